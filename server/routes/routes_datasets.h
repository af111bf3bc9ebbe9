/* routes_datasets: /v1/datasets.  Handlers expect an app * as context;
 * routes.c registers them.  Contracts: api/openapi.json.  Depend on routes
 * (shared helpers), http, datasets and the engine's calo_h5 / geo / synth /
 * model_data. */
#ifndef ROUTES_DATASETS_H
#define ROUTES_DATASETS_H

#include "http.h"

void route_datasets_create(http_request *req, void *ctx);  /* POST /v1/datasets       */
void route_datasets_list(http_request *req, void *ctx);    /* GET  /v1/datasets       */
void route_datasets_get(http_request *req, void *ctx);     /* GET  /v1/datasets/{id}  */

#endif
