/* evaluations: the owner of the evaluations table (migrations/0007).
 *
 * Every SQL statement on it is in evaluations.c.  Reads return rows as
 * Jansson objects keyed by column name (SQL NULL is null), as in runs.h;
 * the routes reshape them into the documented objects.  The worker that
 * runs the evaluations (evaluations_worker.h) writes through the
 * statements at the end, each of which also appends an "evaluation" event
 * to the run's event stream (runs_append_event).
 * Depends on store, runs, log and Jansson. */
#ifndef EVALUATIONS_H
#define EVALUATIONS_H

#include <stdint.h>

#include <jansson.h>

#include "gt_error.h"
#include "store.h"

/* ---------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------- */

/* A new queued evaluation: request is the normalised request (JSON text
 * with every default filled: dataset_id, ref2_dataset_id, n, seed,
 * metrics, classifier), which the worker reads back. */
typedef struct evaluations_new {
    int64_t run, dataset, ref2;    /* ref2: 0 for none */
    long long n;
    uint64_t seed;
    const char *request;
} evaluations_new;

int evaluations_create(store *db, const evaluations_new *e, int64_t *id, gt_error *err);

/* Evaluation `id` of run `run`: id, run_id, status, phase, progress,
 * error, request (text), created_at, started_at, finished_at, and, when
 * with_result, result (text or null).  GT_ENOTFOUND when the run has none
 * of that id. */
int evaluations_get(store *db, int64_t run, int64_t id, int with_result, json_t **row,
                    gt_error *err);

/* Up to limit of the run's evaluations, newest first, without results. */
int evaluations_list(store *db, int64_t run, int limit, json_t **rows, gt_error *err);

/* How many of the run's evaluations are queued or running (0 also when it
 * cannot be read): an event stream stays open while there are some. */
long long evaluations_active(store *db, int64_t run);

/* How many evaluations have this status, over every run (0 also when it
 * cannot be read): the /metrics gauges. */
long long evaluations_count(store *db, const char *status);

/* ---------------------------------------------------------------------------
 * The worker's statements (evaluations_worker.c); each appends the run's
 * "evaluation" event {"evaluation_id", "status", "phase", "progress"[,
 * "error"]}.  A failed write is let go unless it returns one.
 * ------------------------------------------------------------------------- */

/* The oldest queued evaluation: id, run_id, request.  GT_ENOTFOUND when
 * there is none. */
int evaluations_next_queued(store *db, json_t **row, gt_error *err);

void evaluations_set_running(store *db, int64_t run, int64_t id);
void evaluations_set_phase(store *db, int64_t run, int64_t id, const char *phase,
                           double progress);
int evaluations_set_succeeded(store *db, int64_t run, int64_t id, const char *result,
                              gt_error *err);
void evaluations_set_failed(store *db, int64_t run, int64_t id, const char *error);
/* Back in the queue (a stop): it starts again from the beginning. */
void evaluations_set_queued_again(store *db, int64_t run, int64_t id);

/* Evaluations a crash left 'running' fail with the reason: one that made
 * the process die would otherwise kill every start after it. */
void evaluations_fail_interrupted(store *db);

#endif
