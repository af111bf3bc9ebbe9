/* routes_runs: /v1/runs and what hangs below it (metrics, events,
 * checkpoints, samples), and routes_datasets: /v1/datasets.  Handlers
 * expect an app * as context.  Depend on http, runs, sched, sampling,
 * datasets and the engine's model_config / calo_h5 / synth. */
#ifndef ROUTES_RUNS_H
#define ROUTES_RUNS_H

#include "gt_error.h"
#include "http.h"

int routes_runs_register(http_router *r, gt_error *err);
int routes_datasets_register(http_router *r, gt_error *err);

#endif
