/* slurm_jobs: owner of the slurm_jobs table (migrations/0011_slurm.sql),
 * the Slurm job of each run whose executor is "slurm".  Every SQL
 * statement on it is here; server/jobs/slurm.c (the thread that submits and
 * follows jobs), server/store/ingest.c (what the job reports) and the routes
 * call these.  Writes are single statements: safe on the shared connection
 * as on a private one.
 * Depends on store and Jansson. */
#ifndef SLURM_JOBS_H
#define SLURM_JOBS_H

#include <stdint.h>

#include <jansson.h>

#include "gt_error.h"
#include "store.h"

/* A job was submitted for run: its id, the hash of its ingest token; the
 * row is created or reset (state PENDING, active, submissions + 1). */
int slurm_jobs_submitted(store *s, int64_t run, long long job_id, const char *token_hash,
                         gt_error *err);

/* What squeue showed of the run's job now (state, reason may be NULL;
 * node NULL or "" leaves the one known). */
int slurm_jobs_observe(store *s, int64_t run, const char *state, const char *reason,
                       const char *node, gt_error *err);

/* The job left Slurm's queue for good (its final state and reason). */
int slurm_jobs_finish(store *s, int64_t run, const char *state, const char *reason,
                      gt_error *err);

/* scancel was sent for the run's job (it is sent once). */
int slurm_jobs_mark_scancel(store *s, int64_t run, gt_error *err);

/* One more restart of the job (requeued by Slurm or an operator). */
int slurm_jobs_count_restart(store *s, int64_t run, gt_error *err);

/* The trainer said how training ended: "succeeded" or "failed" (error may
 * be NULL). */
int slurm_jobs_report(store *s, int64_t run, const char *outcome, const char *error,
                      gt_error *err);

/* The oldest slurm run that waits for a job: queued, not asked to cancel,
 * and without an active job.  GT_ENOTFOUND when none. */
int slurm_jobs_next_to_submit(store *s, int64_t *run, gt_error *err);

/* Every active job with what the poller decides on: rows {run_id, job_id,
 * state, scancel_sent, reported, report_error, status (the run's),
 * cancel_requested}, at most 1000, oldest run first. */
int slurm_jobs_active(store *s, json_t **rows, gt_error *err);

/* The run's job as the API shows it: {job_id, state, reason, node, active,
 * submissions, restarts, submitted_at, updated_at}; GT_ENOTFOUND before
 * the first submission. */
int slurm_jobs_get(store *s, int64_t run, json_t **row, gt_error *err);

/* The run whose current job holds the token of this hash; GT_ENOTFOUND
 * when no job does. */
int slurm_jobs_run_of_token(store *s, const char *token_hash, int64_t *run, gt_error *err);

#endif
