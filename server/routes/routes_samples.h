/* routes_samples: POST /v1/runs/{id}/samples and /v1/models/{name}/samples,
 * showers through the sampling worker.  The handler expects an app * as context; routes.c registers it.
 * Depends on routes (shared helpers), http, runs, sampling, the client
 * library's shower codec and the engine's calo_h5 / synth. */
#ifndef ROUTES_SAMPLES_H
#define ROUTES_SAMPLES_H

#include "http.h"

void route_runs_samples(http_request *req, void *ctx);
/* POST /v1/models/{name}/samples: the same request and replies, from an
 * imported model (models). */
void route_models_samples(http_request *req, void *ctx);
/* POST /v1/runs/{id}/samples on a sampling replica: served by the model
 * exported from run {id} (404 when none is, 409 when several are). */
void route_replica_runs_samples(http_request *req, void *ctx);

#endif
