/* routes_models: a model leaves its run and is served elsewhere.
 *   GET  /v1/runs/{id}/model      the run as one model file (models_export)
 *   POST /v1/models               import a file (the body; ?name=NAME)
 *   GET  /v1/models               the imported models
 *   GET  /v1/models/{name}        one of them, with its manifest
 *   GET  /v1/models/{name}/file   the file as it was imported
 * (POST /v1/models/{name}/samples is routes_samples.c's.)  The handlers
 * expect an app * as context; routes.c registers them.  Depends on routes,
 * http, models, model_pack. */
#ifndef ROUTES_MODELS_H
#define ROUTES_MODELS_H

#include "http.h"

void route_runs_model(http_request *req, void *ctx);
void route_models_create(http_request *req, void *ctx);
void route_models_list(http_request *req, void *ctx);
void route_models_get(http_request *req, void *ctx);
void route_models_file(http_request *req, void *ctx);

#endif
