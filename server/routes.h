/* routes: the one table of the service's routes (every method, path and
 * handler, whichever routes_*.c holds the handler), the handlers of the
 * service itself (/healthz, /readyz, /v1/info, /v1/openapi.json, /metrics),
 * and the helpers the routes_*.c files share.  Each handler's contract is
 * described in api/openapi.json.  Depends on http, store, runs, sched,
 * sampling, app, build_info, embed and the routes_*.h it registers. */
#ifndef ROUTES_H
#define ROUTES_H

#include <stdint.h>

#include "gt_error.h"
#include "http.h"
#include "store.h"

/* What a sampling replica answers to a route that needs a trainer (404). */
#define ROUTES_E_NOT_ON_SAMPLER "not_on_sampler"

/* Adds every shipped route to r. The handlers expect an app * as context. */
int routes_register(http_router *r, gt_error *err);

/* Adds only /healthz, /readyz and /metrics (the same handlers and access):
 * the routes of the admin listener (--admin-listen), which has its own
 * connections, so a flood on the API's port leaves probes and scrapes
 * their headroom. */
int routes_register_admin(http_router *r, gt_error *err);

/* The same for a role: sampler 0 is the trainer (routes_register), 1 a
 * sampling replica (--role sampler): the same methods and paths, with the
 * routes that need a trainer answering 404 not_on_sampler. */
int routes_register_role(http_router *r, int sampler, gt_error *err);

/* A positive decimal id of at most 18 digits, or 0. */
int64_t routes_parse_id(const char *s);

/* Optional integer query argument in [lo, hi]: def when absent, -1 when
 * malformed or out of range. */
long long routes_query_ll(http_request *req, const char *name, long long def, long long lo,
                          long long hi);

/* The run the path's {id} names, or 0 after a 404 reply. */
int64_t routes_path_run(http_request *req, store *db);

/* A failure the client cannot fix (the database's, out of memory) as a 500
 * with err's message. */
void routes_reply_internal(http_request *req, const gt_error *err);

#endif
