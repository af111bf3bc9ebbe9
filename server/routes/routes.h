/* routes: the one table of the service's routes (every method, path,
 * access flags and handler, whichever routes_*.c holds the handler, and
 * what a sampling replica answers on each), and its registration in a
 * router.  Each handler's contract is described in api/openapi.json.  The
 * helpers route files share are in routes_common.h.  Depends on http, auth
 * and the handlers it registers (routes_handlers.h). */
#ifndef ROUTES_H
#define ROUTES_H

#include "gt_error.h"
#include "http.h"

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

#endif
