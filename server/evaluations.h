/* evaluations: the owner of the evaluations table (migrations/0007), and
 * the worker that evaluates a run's best checkpoints against a reference
 * dataset in the background.
 *
 * The table: every SQL statement on it is in evaluations.c.  Reads return
 * rows as Jansson objects keyed by column name (SQL NULL is null), as in
 * runs.h; the routes reshape them into the documented objects.
 *
 * The worker: a thread with its own database connection takes the oldest
 * queued evaluation and
 *  1. reads the first n showers of the reference dataset (and of the
 *     second reference, when one is named) with their features;
 *  2. generates n showers with the run's best checkpoints at the
 *     reference's incident energies, through the sampling worker
 *     (sampling.h: the samplers the sample requests use, in chunks with
 *     row0 set, so the showers equal one POST .../samples with those
 *     energies and the seed), computing features chunk by chunk;
 *  3. compares them with eval_core (the code of `giant eval`), and the
 *     second reference with the first for the floor;
 *  4. stores the document eval_core_json makes (eval_core.h), or the
 *     failure's reason.
 * Each step updates status, phase and progress and appends an
 * "evaluation" event to the run's event stream (runs_append_event), so
 * GET /v1/runs/{id}/events shows it live.
 * - Restart after a crash: evaluations left 'running' become 'failed'
 *   with the reason (queue them again); queued ones run.
 * - Stop (SIGTERM): the worker stops between chunks and before each
 *   classifier and puts its evaluation back in the queue; it starts again
 *   from the beginning at the next start (a classifier in training is
 *   finished first: shutdown waits for one classifier at most).
 * Depends on store, runs, datasets, sampling, eval_core, log,
 * worker_thread and the engine's model_data / synth / geo. */
#ifndef EVALUATIONS_H
#define EVALUATIONS_H

#include <stdint.h>

#include <jansson.h>

#include "gt_error.h"
#include "store.h"

struct sampling;

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
 * The worker
 * ------------------------------------------------------------------------- */

typedef struct evaluations evaluations;

/* Opens its own connection to db_path, fails the evaluations a crash left
 * running, and starts the worker.  smp: the sampling worker that generates
 * the showers (it must outlive this worker: stop this one first). */
int evaluations_start(evaluations **out, const char *db_path, const char *data_dir,
                      struct sampling *smp, gt_error *err);

/* Wakes the worker (an evaluation was queued). */
void evaluations_kick(evaluations *e);

/* Stops at the next chunk and joins (NULL is fine); the evaluation in
 * progress goes back to the queue. */
void evaluations_stop(evaluations *e);

#endif
