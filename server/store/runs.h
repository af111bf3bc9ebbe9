/* runs: the owner of the runs, metrics, val_losses, checkpoints and
 * run_events tables (migrations/0001_init.sql): every SQL statement on them
 * is in runs.c (writes), runs_read.c (the reads of the workers and commands,
 * the checkpoint and acceptance blobs) and runs_api.c (the reads the HTTP API
 * shows).  Used by the routes, the scheduler, the sampling worker and the
 * offline `giant train` / `giant sample` commands.
 *
 * What reads return, one rule:
 * - what the HTTP API shows (a run, a page of runs, the best checkpoints,
 *   checkpoint listings, events, metric series) comes back as Jansson
 *   values built from whole rows: object keys are the column names, SQL
 *   NULL is null.  The column list and its reader stay together here; the
 *   routes only reshape them into the documented objects.
 * - what the workers and commands act on (ids, a status, config text,
 *   checkpoint bytes) comes back as C values.
 * Every function returns a gt_status: GT_ENOTFOUND, with a message saying
 * what is missing, when the run (or the thing asked for) does not exist;
 * GT_EIO when the database fails.
 *
 * Writes are idempotent where a resumed run may repeat them: a metric,
 * validation loss or checkpoint recorded again for the same (run, stage,
 * step) replaces the first, so a run resumed after a crash never holds
 * duplicates.  runs_record_* run transactions: call them on a connection no
 * other thread uses (the scheduler's, giant train's).  Stage names in the
 * database: 1 = "energy", 2 = "shower".
 * Depends on store, numfmt, gt_sha256, Jansson and the engine's model_stage
 * and model_config. */
#ifndef RUNS_H
#define RUNS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "gt_error.h"
#include "model_config.h"
#include "model_stage.h"
#include "store.h"

const char *runs_stage_name(int stage);

/* ---------------------------------------------------------------------------
 * Writes
 * ------------------------------------------------------------------------- */

/* A new queued run (and its "queued" event).  A taken idempotency key is
 * GT_EINVAL. */
int runs_create(store *s, const char *name, const char *config_json, const char *precision,
                const char *idempotency_key, long long total_steps, int64_t *id, gt_error *err);
/* The same, recording the API token that submitted it (0: none). */
int runs_create_by(store *s, int64_t token_id, const char *name, const char *config_json,
                   const char *precision, const char *idempotency_key, long long total_steps,
                   int64_t *id, gt_error *err);

/* status: queued | running | succeeded | failed | cancelled.  error may be
 * NULL; device may be NULL (unchanged).  Sets started_at / finished_at and
 * appends a "status" run event, in one transaction: a reader that sees the
 * new status also sees its event.  So only on a connection no other thread
 * uses (the training worker's, or an offline command's). */
int runs_set_status(store *s, int64_t id, const char *status, const char *error,
                    const char *device, gt_error *err);

/* Changes the status only when the run has status `from` (NULL: queued or
 * running), and never to the status it has: one statement, so two
 * threads that each decide (the Slurm poller, a trainer's report) never
 * overwrite each other's final word.  *changed says whether it did; the
 * "status" event follows it.  Any connection. */
int runs_transition(store *s, int64_t id, const char *from, const char *status,
                    const char *error, const char *device, int *changed, gt_error *err);

/* Step progress over both stages. */
int runs_set_progress(store *s, int64_t id, int stage, long long step, long long done_steps,
                      long long total_steps, gt_error *err);

/* loss, grad_norm, lr, samples_per_s (and the router's balance_loss,
 * entropy_loss, load_<e> for routed trunks) at r->step, in one transaction. */
int runs_record_step(store *s, int64_t id, const model_step_report *r, gt_error *err);

int runs_record_validation(store *s, int64_t id, int stage, long long step, float loss,
                           int n_samples, gt_error *err);

/* Stores a checkpoint (SHA-256 checksum), marks it best when its validation
 * loss is the lowest of the stage so far, and prunes the stage's older
 * non-best checkpoints beyond the newest `keep`.  *is_best (may be NULL). */
int runs_record_checkpoint(store *s, int64_t id, int stage, long long step, float val_loss,
                           const char *precision, const void *blob, size_t len, int keep,
                           int *is_best, gt_error *err);

/* Append-only writes for what a remote trainer reports (server/store/ingest.c):
 * a row already recorded for the key (run, stage, name, step) or (run,
 * stage, step) is kept as it is and *inserted is 0, so a retried batch
 * never duplicates nor rewrites anything.  time <= 0: now.  No
 * transaction of their own (the caller's holds a batch together). */
int runs_append_metric(store *s, int64_t id, const char *stage, const char *name,
                       long long step, double value, double time, int *inserted, gt_error *err);
int runs_append_validation(store *s, int64_t id, const char *stage, long long step,
                           double loss, int n_samples, double time, int *inserted,
                           gt_error *err);

/* The checkpoint recorded at (stage, step): its id and checksum, or
 * GT_ENOTFOUND (err left alone). */
int runs_checkpoint_at(store *s, int64_t id, int stage, long long step, int64_t *checkpoint,
                       char sha256[65], gt_error *err);

/* Sets cancel_requested on a queued or running run (the worker polls it
 * between steps); a finished run is left alone. */
int runs_request_cancel(store *s, int64_t id, gt_error *err);

/* Appends an event of `kind` (data: JSON text) to the run's stream: what
 * another module reports on a run, such as its evaluations' progress
 * (kind "evaluation"), goes through here so run_events keeps one owner. */
int runs_append_event(store *s, int64_t id, const char *kind, const char *data, gt_error *err);

/* Cancels the run now if it is still queued, with its "cancelled" event;
 * *cancelled says whether it was (0: it had left the queue). */
int runs_cancel_queued(store *s, int64_t id, int *cancelled, gt_error *err);

/* Puts a cancelled or failed run back in the queue (error and
 * cancel_requested cleared, with its "queued" event); the scheduler then
 * resumes it from its last checkpoint of each stage.  *requeued says
 * whether it was (0: the run had another status). */
int runs_requeue(store *s, int64_t id, int *requeued, gt_error *err);

/* ---------------------------------------------------------------------------
 * Reads for the workers and commands: C values
 * ------------------------------------------------------------------------- */

/* The run's config as recorded, malloc'ed JSON text: for what passes it
 * on as it is (a model file's config.json).  A run's settings are read
 * with runs_read_config. */
int runs_config(store *s, int64_t id, char **config_json, gt_error *err);

/* The run's settings: its recorded config read as a stored config
 * (model_config_parse_stored), so a field it leaves out means what it did
 * when it was recorded.  runs_parse_config reads recorded text in hand.
 * A recorded config that does not read is GT_EINVAL, its message naming
 * the field. */
int runs_read_config(store *s, int64_t id, model_config *cfg, gt_error *err);
int runs_parse_config(const char *config_json, model_config *cfg, gt_error *err);

/* The run's status (up to 15 characters). */
int runs_status(store *s, int64_t id, char status[16], gt_error *err);

/* Whether the run asked to be cancelled (0 also when it cannot be read). */
int runs_cancel_requested(store *s, int64_t id);

/* The oldest local run (executor 'local') with this status: the local
 * scheduler's queue, FIFO by id; Slurm runs are server/jobs/slurm.c's. */
int runs_oldest(store *s, const char *status, int64_t *id, gt_error *err);

/* The newest run that succeeded. */
int runs_latest_succeeded(store *s, int64_t *id, gt_error *err);

/* The run that holds an idempotency key: its id and config (malloc'ed). */
int runs_find_by_key(store *s, const char *key, int64_t *id, char **config_json, gt_error *err);

/* The best (best = 1) or newest (best = 0) checkpoint of a stage; *blob is
 * malloc'ed.  The stored checksum is verified (GT_ECHECKSUM on mismatch). */
int runs_load_checkpoint(store *s, int64_t id, int stage, int best, void **blob, size_t *len,
                         long long *step, gt_error *err);

/* A checkpoint's bytes and what names them, as stored. */
typedef struct runs_blob {
    void *data;                /* malloc'ed                                  */
    size_t len;
    char stage[8];             /* "energy" | "shower"                        */
    long long step;
    char sha256[65];           /* hex, as recorded with the bytes            */
} runs_blob;

/* Checkpoint `checkpoint` of run `id` (GT_ENOTFOUND also when pruned). */
int runs_checkpoint_blob(store *s, int64_t id, int64_t checkpoint, runs_blob *out,
                         gt_error *err);

/* When both stages have a best checkpoint: GT_OK and *version, a number
 * that changes whenever either is replaced (ids only grow: their sum) or
 * an acceptance test for them is stored (its id, shifted past any sum).
 * GT_ENOTFOUND otherwise. */
int runs_best_pair(store *s, int64_t id, int64_t *version, gt_error *err);

/* What a sample request needs of a run, in one statement: GT_ENOTFOUND
 * when the run does not exist; else *ready says whether both stages have a
 * best checkpoint, and *version is then runs_best_pair's. */
int runs_sample_source(store *s, int64_t id, int *ready, int64_t *version, gt_error *err);

/* The run's learned acceptance test (model.accept; engine/model/
 * model_accept.h), trained against its current best checkpoints: stored
 * with their ids (replacing an older test), and loaded only while they are
 * still the best (*blob malloc'ed, the checksum verified).  GT_ENOTFOUND
 * when there is none for the current pair, and from record when the best
 * checkpoints are not those whose hex sha256 is given (sha256 NULL, or an
 * entry NULL: whichever is best), so a test made elsewhere (a Slurm job)
 * is never stored against checkpoints it was not trained on. */
int runs_record_acceptance(store *s, int64_t id, const char *const sha256[2], int64_t showers,
                           double auc, double acceptance, const void *blob, size_t len,
                           gt_error *err);
int runs_load_acceptance(store *s, int64_t id, void **blob, size_t *len, gt_error *err);

/* Runs counted by status and by the device they last trained on (device ""
 * for runs that never started): fn is called once per pair present. */
int runs_count_by_device(store *s,
                         void (*fn)(void *user, const char *status, const char *device,
                                    long long n),
                         void *user, gt_error *err);

/* Runs with this status. */
int runs_count(store *s, const char *status, long long *n, gt_error *err);

/* Queued runs that token submitted (the per-token queue limit). */
int runs_count_queued_by_token(store *s, int64_t token_id, long long *n, gt_error *err);

/* ---------------------------------------------------------------------------
 * Reads the HTTP API shows: Jansson values (new references)
 * ------------------------------------------------------------------------- */

int runs_exists(store *s, int64_t id, gt_error *err);

/* The run's row: id, name, status, config (text), stage, device, precision,
 * progress, step, total_steps, error, cancel_requested, attempts,
 * created_at, started_at, finished_at, updated_at, executor, and elapsed_s (seconds
 * since started_at, null before). */
int runs_get(store *s, int64_t id, json_t **row, gt_error *err);

/* A run as the API shows it, in one statement: runs_get's row, and
 *   "best": the best checkpoint of each stage that has one,
 *     {"energy": {"checkpoint_id", "step", "val_loss"}, "shower": {...}};
 *   "acceptance": the acceptance test the run serves (the one for its
 *     current best pair), {"showers", "auc", "acceptance", "sha256",
 *     "created_at"}, or null when it has none (none asked for, not trained
 *     yet, or stale);
 *   "slurm_job": its Slurm job as last seen, {"job_id", "state", "reason",
 *     "node", "submissions", "restarts", "submitted_at"}, or null. */
int runs_show(store *s, int64_t id, json_t **row, gt_error *err);

/* Up to limit runs as runs_show gives them (config null: a listing shows
 * none), newest first, in one statement: status NULL for any, before_id 0
 * for the newest (keyset paging: stable however many runs are added). */
int runs_list(store *s, const char *status, int64_t before_id, int limit, json_t **rows,
              gt_error *err);

/* The best checkpoint of each stage that has one, as runs_show's "best". */
int runs_best(store *s, int64_t id, json_t **best, gt_error *err);

/* Checkpoint rows (no bytes), energy first, by step: id, stage, step,
 * val_loss, is_best, precision, size_bytes, checksum, created_at. */
int runs_checkpoints(store *s, int64_t id, json_t **rows, gt_error *err);

/* Up to limit event rows after event id `after`, oldest first: id, kind,
 * data (JSON text). */
int runs_events_after(store *s, int64_t id, int64_t after, int limit, json_t **rows,
                      gt_error *err);

/* The metric series a run has: rows {stage, name}, by stage and name, at
 * most 64; name NULL for all, else only that name. */
int runs_series_names(store *s, int64_t id, const char *name, json_t **rows, gt_error *err);

/* One series from since_step on, averaged into at most max_points buckets
 * of equal row counts (memory bounded by the buckets, not the rows):
 * {"stage", "name", "count": rows, "bucket": rows per bucket,
 *  "points": [[last step, mean, min, max], ...]} (null statistics for a
 * bucket without finite values).  The name "val_loss" is the fp32
 * validation loss (val_losses); any other name a training metric. */
int runs_series(store *s, int64_t id, const char *stage, const char *name, long long since_step,
                long long max_points, json_t **series, gt_error *err);

#endif
