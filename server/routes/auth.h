/* auth: who may call what, and the guard that asks about every request.
 *
 * The policy: each route of routes.c's table declares in its flags the
 * roles that may call it (AUTH_TO_* below); http.c calls auth_http_check
 * for every routed request before the body is read and before the handler.
 * A route that declares nothing is for admins only.  A request without a
 * token is let through only from a loopback address and only when tokens
 * are not required; a request with one is checked wherever it comes from
 * (auth_tokens.h: the tokens and roles themselves).
 *
 * Depends on auth_tokens, http, store, slurm_jobs, log. */
#ifndef AUTH_H
#define AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "auth_tokens.h"
#include "gt_error.h"
#include "http.h"
#include "store.h"

/* Access bits beside the roles (auth_tokens.h) in a route's flags. */
enum {
    AUTH_JOB_BIT = 1u << 5,      /* a Slurm job's own ingest token, for its run
                                    only (the {id} of the path): no role token */
    AUTH_SCRAPE_BIT = 1u << 6,   /* /metrics: open unless --public-metrics 0 */
    AUTH_OPEN_BIT = 1u << 7,     /* no token ever (health checks)           */
};

/* What a route of routes.c's table needs, for its flags. */
#define AUTH_OPEN        HTTP_ACCESS(AUTH_OPEN_BIT)
#define AUTH_SCRAPE      HTTP_ACCESS(AUTH_SCRAPE_BIT)
#define AUTH_ANY_ROLE    HTTP_ACCESS(AUTH_READER | AUTH_TRAINER | AUTH_SAMPLER)
#define AUTH_TO_READ     HTTP_ACCESS(AUTH_READER | AUTH_TRAINER)
#define AUTH_TO_SAMPLE   HTTP_ACCESS(AUTH_SAMPLER | AUTH_TRAINER)
#define AUTH_TO_TRAIN    HTTP_ACCESS(AUTH_TRAINER)
#define AUTH_ADMIN_ONLY  HTTP_ACCESS(AUTH_ADMIN)
#define AUTH_JOB_TOKEN   HTTP_ACCESS(AUTH_JOB_BIT)

/* ---------------------------------------------------------------------------
 * Start-up policy
 * ------------------------------------------------------------------------- */

/* 1 when host (a listen address's host part) is loopback: 127.0.0.0/8, ::1,
 * "localhost". */
int auth_host_is_loopback(const char *host);

/* May `giant serve` listen on host with this many usable tokens?  Returns
 * 1, or 0 with why filled: a non-loopback address needs at least one
 * token, and why says how to create one (db names the database). */
int auth_listen_allowed(const char *host, long long usable_tokens, const char *db, char *why,
                        size_t cap);

/* ---------------------------------------------------------------------------
 * The server's guard: the authorize hook and its per-token state
 * ------------------------------------------------------------------------- */

typedef struct auth_config {
    int require_tokens;        /* 1: loopback requests need a token too       */
    int public_metrics;        /* 1: /metrics needs no token                  */
    long rate_per_min;         /* requests per minute per token, 0 = no limit */
    long burst;                /* requests a token may send at once           */
} auth_config;

typedef struct auth_guard auth_guard;

int auth_guard_new(auth_guard **out, store *db, const auth_config *cfg, gt_error *err);
void auth_guard_free(auth_guard *g);

/* The http_authorize_fn of the service (ctx is the guard): 401
 * unauthorized with WWW-Authenticate: Bearer, 403 forbidden naming the
 * roles the route takes, 429 rate_limited with Retry-After.  Touches the
 * token's last_used_at at most once a minute.  A route flagged
 * AUTH_JOB_TOKEN (the ingest routes) takes only the ingest token of the
 * run's current Slurm job (slurm_jobs), from anywhere, whatever
 * --require-tokens says: 401 without one or with one no job holds, 403
 * with another run's. */
int auth_http_check(http_request *req, unsigned access, void *ctx);

/* The token bucket alone, for tests: may a request of token id go now
 * (now_s on any monotonic clock)?  Returns 0, or the seconds to wait. */
int auth_guard_take(auth_guard *g, int64_t id, double now_s);

#endif
