/* routes_handlers: every handler of the route table (routes.c), grouped by
 * the routes_*.c file that holds it.  Each takes the request and the app *
 * the server was given (app.h) and sends exactly one reply; what each
 * answers is in api/openapi.json.  Depends on http. */
#ifndef ROUTES_HANDLERS_H
#define ROUTES_HANDLERS_H

#include "http.h"

/* The one signature of a handler: http_handler's function type, so that a
 * file's handlers are declared in one line and none can differ. */
typedef void route_handler(http_request *req, void *ctx);

/* routes_service.c: the service's own routes: GET /healthz (liveness),
 * /readyz (the database at this binary's schema, the engine's devices, not
 * draining, a replica's models loaded), /v1/info (build, devices, sampling
 * counts) and /v1/openapi.json (the embedded document). */
route_handler route_healthz, route_readyz, route_info, route_openapi;

/* routes_metrics.c: GET /metrics, the Prometheus exposition: gauges read at
 * scrape time from their owners (the database's counts by status and
 * device, device memory, the sampling worker, the HTTP layer), counters and
 * the histograms the HTTP layer, the sampling worker and the scheduler
 * keep, in the text format or, for a scraper that asks for it, OpenMetrics
 * (metrics.h writes both). */
route_handler route_metrics;

/* routes_runs.c: POST and GET /v1/runs, GET /v1/runs/{id}, POST
 * /v1/runs/{id}/cancel and /resume, GET /v1/runs/{id}/metrics,
 * /checkpoints and /checkpoints/{ckpt}. */
route_handler route_runs_create, route_runs_list, route_runs_get, route_runs_cancel,
    route_runs_resume, route_runs_metrics, route_runs_checkpoints, route_runs_checkpoint;

/* routes_events.c: GET /v1/runs/{id}/events, Server-Sent Events from
 * run_events until the run ends. */
route_handler route_runs_events;

/* routes_samples.c: POST /v1/runs/{id}/samples and POST
 * /v1/models/{name}/samples (the same request and replies, from an
 * imported model), showers through the sampling worker; on a sampling
 * replica, POST /v1/runs/{id}/samples is served by the model exported from
 * run {id} (404 when none is, 409 when several are). */
route_handler route_runs_samples, route_models_samples, route_replica_runs_samples;

/* routes_models.c: a model leaves its run and is served elsewhere.
 *   GET  /v1/runs/{id}/model      the run as one model file (models_export)
 *   POST /v1/models               import a file (the body; ?name=NAME)
 *   GET  /v1/models               the imported models
 *   GET  /v1/models/{name}        one of them, with its manifest
 *   GET  /v1/models/{name}/file   the file as it was imported */
route_handler route_runs_model, route_models_create, route_models_list, route_models_get,
    route_models_file;

/* routes_evaluations.c: POST and GET /v1/runs/{id}/evaluations, GET
 * /v1/runs/{id}/evaluations/{eid}. */
route_handler route_evaluations_create, route_evaluations_list, route_evaluations_get;

/* routes_datasets.c: POST and GET /v1/datasets, GET /v1/datasets/{id}. */
route_handler route_datasets_create, route_datasets_list, route_datasets_get;

/* routes_ingest.c: what a Slurm job's trainer (`giant train --report`)
 * sends back to the service, authenticated by the job's own ingest token
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
 * The rules (limits, append only, idempotent retries) are ingest.h's. */
route_handler route_ingest_start, route_ingest_checkpoint_get, route_ingest_batch,
    route_ingest_checkpoint_put, route_ingest_acceptance_put;

/* routes_tokens.c: POST and GET /v1/tokens, DELETE /v1/tokens/{id}: the
 * admin's view of the bearer tokens (admin only). */
route_handler route_tokens_create, route_tokens_list, route_tokens_revoke;

/* routes_ui.c: the dashboard's static files (server/ui/, embedded at build
 * time): GET / is index.html, GET /ui/{file} the others.  Open routes: the
 * page itself holds no data; its API calls carry the token. */
route_handler route_ui_index, route_ui_file;

#endif
