/* routes_evaluations: /v1/runs/{id}/evaluations.  Handlers expect an app *
 * as context; routes.c registers them.  Contracts: api/openapi.json.
 * Depend on routes (shared helpers), http, runs, datasets and evaluations. */
#ifndef ROUTES_EVALUATIONS_H
#define ROUTES_EVALUATIONS_H

#include "http.h"

void route_evaluations_create(http_request *req, void *ctx); /* POST .../evaluations       */
void route_evaluations_list(http_request *req, void *ctx);   /* GET  .../evaluations       */
void route_evaluations_get(http_request *req, void *ctx);    /* GET  .../evaluations/{eid} */

#endif
