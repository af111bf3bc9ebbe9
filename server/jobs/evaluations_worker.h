/* evaluations_worker: the thread that evaluates a run's best checkpoints
 * against a reference dataset in the background.
 *
 * A thread with its own database connection takes the oldest
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
 * Depends on evaluations (the table's statements), store, runs, datasets,
 * sampling, eval_core, log, worker_thread and the engine's model_data /
 * synth / geo. */
#ifndef EVALUATIONS_WORKER_H
#define EVALUATIONS_WORKER_H

#include "gt_error.h"

struct sampling;

typedef struct evaluations_worker evaluations_worker;

/* Opens its own connection to db_path, fails the evaluations a crash left
 * running, and starts the worker.  smp: the sampling worker that generates
 * the showers (it must outlive this worker: stop this one first). */
int evaluations_worker_start(evaluations_worker **out, const char *db_path,
                             const char *data_dir, struct sampling *smp, gt_error *err);

/* Wakes the worker (an evaluation was queued). */
void evaluations_worker_kick(evaluations_worker *e);

/* Stops at the next chunk and joins (NULL is fine); the evaluation in
 * progress goes back to the queue. */
void evaluations_worker_stop(evaluations_worker *e);

#endif
