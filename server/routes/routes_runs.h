/* routes_runs: /v1/runs and the run's metrics and checkpoints.  Handlers
 * expect an app * as context; routes.c registers them.  Contracts:
 * api/openapi.json.  Depend on routes (shared helpers), http, runs,
 * datasets, sched, log and the engine's model_config / model_run. */
#ifndef ROUTES_RUNS_H
#define ROUTES_RUNS_H

#include "http.h"

void route_runs_create(http_request *req, void *ctx);      /* POST /v1/runs                */
void route_runs_list(http_request *req, void *ctx);        /* GET  /v1/runs                */
void route_runs_get(http_request *req, void *ctx);         /* GET  /v1/runs/{id}           */
void route_runs_cancel(http_request *req, void *ctx);      /* POST /v1/runs/{id}/cancel    */
void route_runs_resume(http_request *req, void *ctx);      /* POST /v1/runs/{id}/resume    */
void route_runs_metrics(http_request *req, void *ctx);     /* GET  /v1/runs/{id}/metrics   */
void route_runs_checkpoints(http_request *req, void *ctx); /* GET  .../checkpoints         */
void route_runs_checkpoint(http_request *req, void *ctx);  /* GET  .../checkpoints/{ckpt}  */

#endif
