#include "routes.h"

#include <string.h>

#include "auth.h"
#include "routes_handlers.h"

/* ---------------------------------------------------------------------------
 * A sampling replica's answer to the routes that need a trainer
 * ------------------------------------------------------------------------- */

/* 404, not 405 or 403: the route exists in the API but not on this
 * process, and a balancer that sends it here is misconfigured; the code
 * tells that apart from an unknown run or model. */
static void route_not_on_sampler(http_request *req, void *ctx)
{
    (void)ctx;
    http_reply_error(req, 404, ROUTES_E_NOT_ON_SAMPLER, NULL,
                     "%s %s is not served by a sampling replica (giant serve --role sampler):"
                     " send it to the trainer", http_method(req), http_path(req));
}

/* ---------------------------------------------------------------------------
 * The table: every route of the service, in one place
 *
 * The flags say who may call a route (auth.h): AUTH_OPEN needs no token,
 * AUTH_SCRAPE none unless --public-metrics 0, AUTH_TO_READ a reader or a
 * trainer, AUTH_TO_TRAIN a trainer, AUTH_TO_SAMPLE a sampler or a trainer,
 * AUTH_ANY_ROLE any token; admins may call everything, and a route with no
 * AUTH_ flag only they.  AUTH_JOB_TOKEN: only the ingest token of the
 * run's Slurm job (no role token, admin's neither).
 * ------------------------------------------------------------------------- */

/* The last column is what a sampling replica (--role sampler) answers with:
 * the same handler, another one (the run-scoped samples route serves the
 * model exported from that run), or NOT_SAMPLER (404 not_on_sampler,
 * before any body is read).  A replica serves samples, models and the
 * service's own routes; training, datasets, evaluations, tokens and the
 * dashboard live on the trainer. */
#define NOT_SAMPLER route_not_on_sampler

static const struct {
    const char *method, *pattern;
    http_handler handler;
    int flags;
    http_handler sampler;
} routes[] = {
    { "GET",  "/healthz",                         route_healthz,          AUTH_OPEN, route_healthz },
    { "GET",  "/readyz",                          route_readyz,           AUTH_OPEN, route_readyz },
    { "GET",  "/v1/info",                         route_info,             AUTH_ANY_ROLE, route_info },
    { "GET",  "/v1/openapi.json",                 route_openapi,          AUTH_ANY_ROLE, route_openapi },
    { "GET",  "/metrics",                         route_metrics,          AUTH_SCRAPE, route_metrics },
    /* routes_runs.c */
    { "POST", "/v1/runs",                         route_runs_create,      HTTP_JSON_BODY | AUTH_TO_TRAIN, NOT_SAMPLER },
    { "GET",  "/v1/runs",                         route_runs_list,        AUTH_ANY_ROLE, NOT_SAMPLER },
    { "GET",  "/v1/runs/{id}",                    route_runs_get,         AUTH_ANY_ROLE, NOT_SAMPLER },
    { "POST", "/v1/runs/{id}/cancel",             route_runs_cancel,      AUTH_TO_TRAIN, NOT_SAMPLER },
    { "POST", "/v1/runs/{id}/resume",             route_runs_resume,      AUTH_TO_TRAIN, NOT_SAMPLER },
    { "GET",  "/v1/runs/{id}/metrics",            route_runs_metrics,     AUTH_TO_READ, NOT_SAMPLER },
    /* routes_ingest.c: a Slurm job's trainer, with its own token */
    { "POST", "/v1/runs/{id}/ingest/start",       route_ingest_start,     HTTP_JSON_BODY | AUTH_JOB_TOKEN, NOT_SAMPLER },
    { "POST", "/v1/runs/{id}/ingest",             route_ingest_batch,     HTTP_JSON_BODY | AUTH_JOB_TOKEN, NOT_SAMPLER },
    { "GET",  "/v1/runs/{id}/ingest/checkpoints/{stage}", route_ingest_checkpoint_get, AUTH_JOB_TOKEN, NOT_SAMPLER },
    { "PUT",  "/v1/runs/{id}/ingest/checkpoints/{stage}/{step}", route_ingest_checkpoint_put, HTTP_FILE_BODY | AUTH_JOB_TOKEN, NOT_SAMPLER },
    { "PUT",  "/v1/runs/{id}/ingest/acceptance",  route_ingest_acceptance_put, HTTP_FILE_BODY | AUTH_JOB_TOKEN, NOT_SAMPLER },
    /* routes_events.c */
    { "GET",  "/v1/runs/{id}/events",             route_runs_events,      AUTH_TO_READ, NOT_SAMPLER },
    /* routes_runs.c */
    { "GET",  "/v1/runs/{id}/checkpoints",        route_runs_checkpoints, AUTH_TO_READ, NOT_SAMPLER },
    { "GET",  "/v1/runs/{id}/checkpoints/{ckpt}", route_runs_checkpoint,  AUTH_TO_READ, NOT_SAMPLER },
    /* routes_samples.c */
    { "POST", "/v1/runs/{id}/samples",            route_runs_samples,     HTTP_JSON_BODY | AUTH_TO_SAMPLE, route_replica_runs_samples },
    /* routes_models.c */
    { "GET",  "/v1/runs/{id}/model",              route_runs_model,       AUTH_TO_READ, NOT_SAMPLER },
    { "POST", "/v1/models",                       route_models_create,    HTTP_FILE_BODY | AUTH_TO_TRAIN, NOT_SAMPLER },
    { "GET",  "/v1/models",                       route_models_list,      AUTH_ANY_ROLE, route_models_list },
    { "GET",  "/v1/models/{name}",                route_models_get,       AUTH_ANY_ROLE, route_models_get },
    { "GET",  "/v1/models/{name}/file",           route_models_file,      AUTH_TO_READ, route_models_file },
    /* routes_samples.c */
    { "POST", "/v1/models/{name}/samples",        route_models_samples,   HTTP_JSON_BODY | AUTH_TO_SAMPLE, route_models_samples },
    /* routes_evaluations.c */
    { "POST", "/v1/runs/{id}/evaluations",        route_evaluations_create, HTTP_JSON_BODY | AUTH_TO_SAMPLE, NOT_SAMPLER },
    { "GET",  "/v1/runs/{id}/evaluations",        route_evaluations_list, AUTH_TO_READ, NOT_SAMPLER },
    { "GET",  "/v1/runs/{id}/evaluations/{eid}",  route_evaluations_get,  AUTH_TO_READ, NOT_SAMPLER },
    /* routes_datasets.c */
    { "POST", "/v1/datasets",                     route_datasets_create,  HTTP_JSON_BODY | AUTH_ADMIN_ONLY, NOT_SAMPLER },
    { "GET",  "/v1/datasets",                     route_datasets_list,    AUTH_TO_READ, NOT_SAMPLER },
    { "GET",  "/v1/datasets/{id}",                route_datasets_get,     AUTH_TO_READ, NOT_SAMPLER },
    /* routes_tokens.c */
    { "POST",   "/v1/tokens",                     route_tokens_create,    HTTP_JSON_BODY | AUTH_ADMIN_ONLY, NOT_SAMPLER },
    { "GET",    "/v1/tokens",                     route_tokens_list,      AUTH_ADMIN_ONLY, NOT_SAMPLER },
    { "DELETE", "/v1/tokens/{id}",                route_tokens_revoke,    AUTH_ADMIN_ONLY, NOT_SAMPLER },
    /* routes_ui.c: the dashboard's files; its API calls carry the token */
    { "GET",    "/",                              route_ui_index,         AUTH_OPEN, NOT_SAMPLER },
    { "GET",    "/ui/{file}",                     route_ui_file,          AUTH_OPEN, NOT_SAMPLER },
};

int routes_register_admin(http_router *r, gt_error *err)
{
    static const char *const admin[] = {"/healthz", "/readyz", "/metrics"};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        for (size_t k = 0; k < sizeof admin / sizeof admin[0]; k++) {
            if (strcmp(routes[i].pattern, admin[k]) != 0)
                continue;
            int rc = http_router_add(r, routes[i].method, routes[i].pattern,
                                     routes[i].handler, routes[i].flags, err);
            if (rc != GT_OK)
                return rc;
        }
    return GT_OK;
}

int routes_register_role(http_router *r, int sampler, gt_error *err)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        http_handler h = sampler ? routes[i].sampler : routes[i].handler;
        int flags = routes[i].flags;
        /* a refusal needs no body, whatever the route would take */
        if (h == NOT_SAMPLER)
            flags = (flags & ~(HTTP_JSON_BODY | HTTP_FILE_BODY)) | HTTP_NO_BODY;
        int rc = http_router_add(r, routes[i].method, routes[i].pattern, h, flags, err);
        if (rc != GT_OK)
            return rc;
    }
    return GT_OK;
}

int routes_register(http_router *r, gt_error *err)
{
    return routes_register_role(r, 0, err);
}
