/* runs: training runs, their metrics, validation losses and checkpoints in
 * SQLite (tables of migrations/0001_init.sql).  Used by the offline `giant
 * train` / `giant sample` commands and by the service's scheduler.
 *
 * Writes are idempotent where a resumed run may repeat them: a metric,
 * validation loss or checkpoint recorded again for the same (run, stage,
 * step) replaces the first, so a run resumed after a crash never holds
 * duplicates.  Stage names in the database: 1 = "energy", 2 = "shower". */
#ifndef RUNS_H
#define RUNS_H

#include <stddef.h>
#include <stdint.h>

#include "gt_error.h"
#include "model_stage.h"
#include "store.h"

const char *runs_stage_name(int stage);

int runs_create(store *s, const char *name, const char *config_json, const char *precision,
                const char *idempotency_key, long long total_steps, int64_t *id, gt_error *err);

/* status: queued | running | succeeded | failed | cancelled.  error may be
 * NULL; device may be NULL (unchanged).  Sets started_at / finished_at and
 * appends a "status" run event. */
int runs_set_status(store *s, int64_t id, const char *status, const char *error,
                    const char *device, gt_error *err);

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

/* The best (best = 1) or newest (best = 0) checkpoint of a stage; *blob is
 * malloc'ed.  GT_ENOTFOUND when there is none.  The stored checksum is
 * verified (GT_ECHECKSUM on mismatch). */
int runs_load_checkpoint(store *s, int64_t id, int stage, int best, void **blob, size_t *len,
                         long long *step, gt_error *err);

/* The run's config (malloc'ed JSON text) and status (up to 16 chars). */
int runs_get(store *s, int64_t id, char **config_json, char *status, gt_error *err);

/* The newest run that succeeded; GT_ENOTFOUND when none. */
int runs_latest_succeeded(store *s, int64_t *id, gt_error *err);

/* Hex SHA-256 of a buffer (65 bytes with the NUL). */
void runs_sha256_hex(const void *buf, size_t len, char out[65]);

#endif
