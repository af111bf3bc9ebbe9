/* routes_ingest: what a Slurm job's trainer (`giant train --report`) sends
 * back to the service, authenticated by the job's own ingest token
 * (AUTH_JOB_TOKEN: auth.c checks it before any body is read).
 *   POST /v1/runs/{id}/ingest/start                  the trainer starts: the run
 *        goes running; the reply has its config and its last checkpoints
 *   GET  /v1/runs/{id}/ingest/checkpoints/{stage}[?best=1]    the newest
 *        checkpoint of a stage, to resume from, or its best, to train the
 *        acceptance test against (X-Checksum-SHA256, X-Checkpoint-Step)
 *   POST /v1/runs/{id}/ingest                        a batch of metrics,
 *        validations, progress, and at the end how training ended
 *   PUT  /v1/runs/{id}/ingest/checkpoints/{stage}/{step}?val_loss=X
 *        a checkpoint's bytes with X-Checksum-SHA256, verified here
 *   PUT  /v1/runs/{id}/ingest/acceptance?showers=N
 *        the run's acceptance test (model.accept) with X-Checksum-SHA256,
 *        stored only against the best checkpoints it names
 * The rules (limits, append only, idempotent retries) are ingest.h's.
 * Depends on routes, http, ingest, runs. */
#ifndef ROUTES_INGEST_H
#define ROUTES_INGEST_H

#include "http.h"

void route_ingest_start(http_request *req, void *ctx);
void route_ingest_checkpoint_get(http_request *req, void *ctx);
void route_ingest_batch(http_request *req, void *ctx);
void route_ingest_checkpoint_put(http_request *req, void *ctx);
void route_ingest_acceptance_put(http_request *req, void *ctx);

#endif
