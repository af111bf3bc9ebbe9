/* scheduler (prefix sched_): the training scheduler.
 *
 * The queue is the runs table itself (status 'queued', oldest id first), so
 * it survives restarts.  One worker thread per device (the CPU, or the one
 * device the settings name) takes the oldest queued run, marks it running
 * and trains it with model_run_train, writing metrics, validations and
 * checkpoints through runs_*.  Training never runs on an HTTP thread.
 *
 * - Cancellation: POST .../cancel sets runs.cancel_requested; the worker
 *   polls it between steps, so it takes effect within one step.
 * - Crash recovery: sched_start re-queues runs left 'running' by a crash;
 *   they resume from their last checkpoint of each stage (metrics are
 *   upserted per (run, stage, step), so none are duplicated).
 * - Shutdown: sched_stop stops the worker at the next step; its run goes
 *   back to 'queued' with its checkpoints and resumes at the next start.
 * - Failures (bad dataset, device error, ...) make the run 'failed' with
 *   the reason; the worker goes on with the next run.
 *
 * sched_train_run is the one training loop: `giant train` uses it too.
 * Depends on runs, store, log and the engine's model_run. */
#ifndef SCHEDULER_H
#define SCHEDULER_H

#include <stdint.h>

#include "dist.h"
#include "gt_error.h"
#include "metrics.h"
#include "model_config.h"
#include "model_run.h"
#include "model_stage.h"
#include "store.h"

typedef struct sched sched;

/* Optional observers of sched_train_run (all may be NULL). */
typedef struct sched_observer {
    void *user;
    /* Non-zero stops training at the next step (GT_ECANCELLED). */
    int (*should_stop)(void *user);
    void (*on_step)(void *user, const model_step_report *r, long long done, long long total);
    void (*on_validation)(void *user, int stage, long long step, float val_loss);
    void (*on_phase)(void *user, const char *phase);
    /* The caller's rule on a recorded config, asked once it is read and
     * before anything else is done: non-zero fails the run with err's
     * message (the service refuses an absolute dataset.path there). */
    int (*refuse_config)(void *user, const model_config *cfg, gt_error *err);
} sched_observer;

/* Trains run `run` (already created) to the end, resuming from the last
 * checkpoint of each stage when there is one.  Its config is read once,
 * here, and its data path checked once, where the trainer opens it
 * (model_dataset_load, inside data_dir).  device overrides the
 * config's train.device when not NULL or "".  bf16: whether a bf16 run may
 * train on a CPU without AVX512-BF16 (the operator's
 * --allow-bf16-emulation); refused, the run fails with the reason.  Sets the run's status:
 * running, then succeeded or failed (with the reason).  When training
 * stops on request, returns GT_ECANCELLED and leaves the status 'running'
 * for the caller to decide (cancelled or queued again). */
int sched_train_run(store *db, int64_t run, const char *data_dir, const char *device,
                    model_bf16_policy bf16, const sched_observer *obs, gt_error *err);

/* The same as rank 0 of a data-parallel group (`giant train --ranks/--gpus`,
 * Slurm): joins the group described by spec once the backend is open, and
 * records the run as sched_train_run does (the other ranks record nothing;
 * cmd_train.c runs them).  spec NULL: sched_train_run. */
int sched_train_run_dist(store *db, int64_t run, const char *data_dir, const char *device,
                         model_bf16_policy bf16, const sched_observer *obs,
                         const dist_spec *spec, gt_error *err);

/* Opens its own connection to the database at db_path, re-queues
 * interrupted runs and starts the worker. device: as above. */
int sched_start(sched **out, const char *db_path, const char *data_dir, const char *device,
                model_bf16_policy bf16, gt_error *err);

/* Wakes the worker (a run was queued or a cancel requested). */
void sched_kick(sched *s);

/* Marks a run for cancellation: a queued run is cancelled at once, a
 * running one within a step.  GT_ENOTFOUND when the run does not exist;
 * *status (16 bytes, may be NULL) gets the status after the call. */
int sched_cancel(sched *s, store *db, int64_t run, char *status, gt_error *err);

/* Runs started by the worker since sched_start. */
long long sched_runs_started(const sched *s);

/* Seconds per training step of stage 1 or 2 (the mean over each step
 * report's interval, train.log_every steps); NULL for a NULL s. */
const metrics_hist *sched_step_seconds(const sched *s, int stage);

/* Stops the worker at the next step and joins it (NULL is fine). */
void sched_stop(sched *s);

#endif
