#include "runs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "gt_sha256.h"
#include "numfmt.h"

/* The ISO-8601 UTC time SQLite writes into the *_at columns. */
#define NOW "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

/* The columns of a run row (runs_get, runs_list). */
#define RUN_COLUMNS                                                                          \
    "id, name, status, config, stage, device, precision, progress, step, total_steps, error," \
    " cancel_requested, attempts, created_at, started_at, finished_at, updated_at, executor," \
    " (julianday('now') - julianday(started_at)) * 86400.0 AS elapsed_s"

const char *runs_stage_name(int stage) { return stage == 1 ? "energy" : "shower"; }

static double unix_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

static int no_run(gt_error *err, int64_t id)
{
    return gt_error_set(err, GT_ENOTFOUND, "run %lld does not exist", (long long)id);
}

/* ---------------------------------------------------------------------------
 * Writes
 * ------------------------------------------------------------------------- */

/* 1 when the query (run, stage, step) finds a row, 0 when not, < 0 on
 * error (err set). */
static int step_seen(store *s, const char *sql, int64_t id, int stage, long long step,
                     gt_error *err)
{
    int64_t one = 0;
    int rc = store_int64(s, "checking a recorded step", sql,
                         STORE_ARGS(STORE_INT(id), STORE_TEXT(runs_stage_name(stage)),
                                    STORE_INT(step)),
                         &one, err);
    return rc == GT_OK ? 1 : rc == GT_ENOTFOUND ? 0 : -1;
}

static int event(store *s, int64_t id, const char *kind, const char *data, gt_error *err)
{
    return store_exec(s, "recording an event",
                      "INSERT INTO run_events (run_id, kind, data) VALUES (?, ?, ?)",
                      STORE_ARGS(STORE_INT(id), STORE_TEXT(kind), STORE_TEXT(data)), err);
}

int runs_create(store *s, const char *name, const char *config_json, const char *precision,
                const char *idempotency_key, long long total_steps, int64_t *id, gt_error *err)
{
    return runs_create_by(s, 0, name, config_json, precision, idempotency_key, total_steps, id,
                          err);
}

int runs_create_by(store *s, int64_t token_id, const char *name, const char *config_json,
                   const char *precision, const char *idempotency_key, long long total_steps,
                   int64_t *id, gt_error *err)
{
    /* RETURNING: the id of this insert, whatever other threads insert on
     * the shared connection meanwhile. */
    int rc = store_int64(s, "creating a run",
                         "INSERT INTO runs (name, config, precision, idempotency_key, total_steps,"
                         " token_id, executor) VALUES (?1, ?2, ?3, ?4, ?5, NULLIF(?6, 0),"
                         " COALESCE(json_extract(?2, '$.executor.kind'), 'local')) RETURNING id",
                         STORE_ARGS(STORE_TEXT(name), STORE_TEXT(config_json),
                                    STORE_TEXT(precision), STORE_TEXT(idempotency_key),
                                    STORE_INT(total_steps), STORE_INT(token_id)),
                         id, err);
    return rc ? rc : event(s, *id, "status", "{\"status\":\"queued\"}", err);
}

int runs_set_status(store *s, int64_t id, const char *status, const char *error,
                    const char *device, gt_error *err)
{
    int64_t changed;
    int rc = store_begin(s, err);
    if (rc)
        return rc;
    rc = store_int64(
        s, "updating a run",
        "UPDATE runs SET status = ?1, error = ?2, device = COALESCE(?3, device),"
        " attempts = attempts + (?1 = 'running'),"
        " started_at = CASE WHEN ?1 = 'running' AND started_at IS NULL"
        "   THEN " NOW " ELSE started_at END,"
        " finished_at = CASE WHEN ?1 IN ('succeeded', 'failed', 'cancelled')"
        "   THEN " NOW " ELSE NULL END,"
        " updated_at = " NOW " WHERE id = ?4 RETURNING id",
        STORE_ARGS(STORE_TEXT(status), STORE_TEXT(error), STORE_TEXT(device), STORE_INT(id)),
        &changed, err);
    if (rc) {
        store_rollback(s);
        return rc == GT_ENOTFOUND ? no_run(err, id) : rc;
    }
    char data[700];
    if (error) {
        /* The reason goes through Jansson-free escaping: quote and backslash. */
        char esc[600];
        size_t k = 0;
        for (const char *p = error; *p && k + 2 < sizeof esc; p++) {
            if (*p == '"' || *p == '\\')
                esc[k++] = '\\';
            esc[k++] = (*p >= 0 && *p < 32) ? ' ' : *p;
        }
        esc[k] = '\0';
        snprintf(data, sizeof data, "{\"status\":\"%s\",\"error\":\"%s\"}", status, esc);
    } else {
        snprintf(data, sizeof data, "{\"status\":\"%s\"}", status);
    }
    if ((rc = event(s, id, "status", data, err))) {
        store_rollback(s);
        return rc;
    }
    return store_commit(s, err);
}

int runs_transition(store *s, int64_t id, const char *from, const char *status,
                    const char *error, const char *device, int *changed, gt_error *err)
{
    int64_t one;
    *changed = 0;
    int rc = store_int64(
        s, "updating a run",
        "UPDATE runs SET status = ?1, error = ?2, device = COALESCE(?3, device),"
        " attempts = attempts + (?1 = 'running'),"
        " started_at = CASE WHEN ?1 = 'running' AND started_at IS NULL"
        "   THEN " NOW " ELSE started_at END,"
        " finished_at = CASE WHEN ?1 IN ('succeeded', 'failed', 'cancelled')"
        "   THEN " NOW " ELSE NULL END,"
        " updated_at = " NOW " WHERE id = ?4 AND status != ?1"
        " AND (?5 IS NULL AND status IN ('queued', 'running') OR status = ?5) RETURNING id",
        STORE_ARGS(STORE_TEXT(status), STORE_TEXT(error), STORE_TEXT(device), STORE_INT(id),
                   STORE_TEXT(from)),
        &one, err);
    if (rc == GT_ENOTFOUND)
        return GT_OK;
    if (rc)
        return rc;
    *changed = 1;
    json_t *data = json_pack("{s:s}", "status", status);
    if (error)
        json_object_set_new(data, "error", json_string(error));
    char *text = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    /* The status is changed even if its event could not be written. */
    if (text)
        event(s, id, "status", text, NULL);
    free(text);
    return GT_OK;
}

int runs_set_progress(store *s, int64_t id, int stage, long long step, long long done_steps,
                      long long total_steps, gt_error *err)
{
    double progress = total_steps > 0 ? (double)done_steps / (double)total_steps : 0.0;
    if (progress > 1)
        progress = 1;
    return store_exec(s, "updating progress",
                      "UPDATE runs SET stage = ?, step = ?, total_steps = ?, progress = ?,"
                      " updated_at = " NOW " WHERE id = ?",
                      STORE_ARGS(STORE_TEXT(runs_stage_name(stage)), STORE_INT(step),
                                 STORE_INT(total_steps), STORE_REAL(progress), STORE_INT(id)),
                      err);
}

int runs_record_step(store *s, int64_t id, const model_step_report *r, gt_error *err)
{
    int rc = store_begin(s, err);
    if (rc)
        return rc;
    double now = unix_now();
    struct {
        const char *name;
        double v;
    } m[4 + 2 + NN_TRUNK_MAX_EXPERTS];
    char names[NN_TRUNK_MAX_EXPERTS][16];
    int n = 0;
    m[n].name = "loss", m[n++].v = r->loss;
    m[n].name = "grad_norm", m[n++].v = r->grad_norm;
    m[n].name = "lr", m[n++].v = r->lr;
    m[n].name = "samples_per_s", m[n++].v = r->samples_per_s;
    if (r->n_experts > 0) {
        m[n].name = "balance_loss", m[n++].v = r->balance_loss;
        m[n].name = "entropy_loss", m[n++].v = r->entropy_loss;
        for (int e = 0; e < r->n_experts && e < NN_TRUNK_MAX_EXPERTS; e++) {
            snprintf(names[e], sizeof names[e], "load_%d", e);
            m[n].name = names[e], m[n++].v = r->load[e];
        }
    }
    /* A resumed run trains the steps after its last checkpoint again: their
     * rows are replaced, and their event, already in the stream, is not
     * appended a second time (a Last-Event-ID client sees each step once). */
    int seen = step_seen(s,
                         "SELECT 1 FROM metrics WHERE run_id = ? AND stage = ? AND name = 'loss'"
                         " AND step = ?",
                         id, r->stage, r->step, err);
    if (seen < 0) {
        store_rollback(s);
        return err ? err->code : GT_EIO;
    }
    for (int i = 0; i < n && rc == GT_OK; i++)
        rc = store_exec(s, "recording a metric",
                        "INSERT OR REPLACE INTO metrics (run_id, stage, name, step, value, time)"
                        " VALUES (?, ?, ?, ?, ?, ?)",
                        STORE_ARGS(STORE_INT(id), STORE_TEXT(runs_stage_name(r->stage)),
                                   STORE_TEXT(m[i].name), STORE_INT(r->step), STORE_REAL(m[i].v),
                                   STORE_REAL(now)),
                        err);
    if (rc == GT_OK && !seen) {
        /* each float in its shortest form, as the metric history writes it */
        char data[256], loss[32], gn[32], lr[32];
        numfmt_float(loss, sizeof loss, isfinite(r->loss) ? r->loss : 0.0f);
        numfmt_float(gn, sizeof gn, isfinite(r->grad_norm) ? r->grad_norm : 0.0f);
        numfmt_float(lr, sizeof lr, r->lr);
        snprintf(data, sizeof data,
                 "{\"stage\":\"%s\",\"step\":%lld,\"loss\":%s,\"grad_norm\":%s,\"lr\":%s}",
                 runs_stage_name(r->stage), r->step, loss, gn, lr);
        rc = event(s, id, "metric", data, err);
    }
    if (rc) {
        store_rollback(s);
        return rc;
    }
    return store_commit(s, err);
}

int runs_record_validation(store *s, int64_t id, int stage, long long step, float loss,
                           int n_samples, gt_error *err)
{
    /* as for the step metrics: a validation trained again after a resume
     * replaces its row and adds no second event. Row and event go in one
     * transaction, so a kill between them cannot keep the row and lose the
     * event (the resumed run would then see the step and never append it). */
    int rc = store_begin(s, err);
    if (rc)
        return rc;
    int seen = step_seen(s, "SELECT 1 FROM val_losses WHERE run_id = ? AND stage = ? AND step = ?",
                         id, stage, step, err);
    if (seen < 0) {
        store_rollback(s);
        return err ? err->code : GT_EIO;
    }
    rc = store_exec(s, "recording a val loss",
                    "INSERT OR REPLACE INTO val_losses (run_id, stage, step, loss, n_samples,"
                    " time) VALUES (?, ?, ?, ?, ?, ?)",
                    STORE_ARGS(STORE_INT(id), STORE_TEXT(runs_stage_name(stage)), STORE_INT(step),
                               STORE_REAL(loss), STORE_INT(n_samples > 0 ? n_samples : 1),
                               STORE_REAL(unix_now())),
                    err);
    if (rc == GT_OK && !seen) {
        char data[160], val[32];
        numfmt_float(val, sizeof val, isfinite(loss) ? loss : 0.0f);
        snprintf(data, sizeof data, "{\"stage\":\"%s\",\"step\":%lld,\"val_loss\":%s}",
                 runs_stage_name(stage), step, val);
        rc = event(s, id, "val_loss", data, err);
    }
    if (rc) {
        store_rollback(s);
        return rc;
    }
    return store_commit(s, err);
}

/* Whether a checkpoint of val_loss at step becomes the stage's best: the
 * lowest finite validation loss wins, only when strictly lower, so the
 * earliest of equal losses stays. */
static int checkpoint_is_best(store *s, int64_t id, const char *stage, long long step,
                              float val_loss, int *best, gt_error *err)
{
    json_t *cur = NULL;
    int rc = store_row_json(s, "reading the best checkpoint",
                            "SELECT val_loss FROM checkpoints WHERE run_id = ? AND stage = ?"
                            " AND is_best = 1 AND step != ?",
                            STORE_ARGS(STORE_INT(id), STORE_TEXT(stage), STORE_INT(step)), &cur,
                            err);
    if (rc == GT_ENOTFOUND) {
        *best = 1;
        return GT_OK;
    }
    if (rc)
        return rc;
    json_t *v = json_object_get(cur, "val_loss");
    *best = isfinite(val_loss) && (json_is_null(v) || val_loss < json_number_value(v));
    json_decref(cur);
    return GT_OK;
}

int runs_record_checkpoint(store *s, int64_t id, int stage, long long step, float val_loss,
                           const char *precision, const void *blob, size_t len, int keep,
                           int *is_best, gt_error *err)
{
    char sum[65];
    gt_sha256_hex(blob, len, sum);
    const char *sname = runs_stage_name(stage);
    int rc = store_begin(s, err), best = 0;
    if (rc)
        return rc;
    if ((rc = checkpoint_is_best(s, id, sname, step, val_loss, &best, err)))
        goto fail;
    if (best && (rc = store_exec(s, "clearing the best flag",
                                 "UPDATE checkpoints SET is_best = 0 WHERE run_id = ? AND stage = ?",
                                 STORE_ARGS(STORE_INT(id), STORE_TEXT(sname)), err)))
        goto fail;
    if ((rc = store_exec(s, "storing a checkpoint",
                         "INSERT OR REPLACE INTO checkpoints (run_id, stage, step, val_loss,"
                         " is_best, precision, checksum, size_bytes, blob)"
                         " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         STORE_ARGS(STORE_INT(id), STORE_TEXT(sname), STORE_INT(step),
                                    STORE_REAL(val_loss), STORE_INT(best), STORE_TEXT(precision),
                                    STORE_TEXT(sum), STORE_INT((int64_t)len),
                                    STORE_BLOB(blob, len)),
                         err)))
        goto fail;
    /* Retention: keep the best and the newest `keep` of the stage. */
    if ((rc = store_exec(s, "pruning checkpoints",
                         "DELETE FROM checkpoints WHERE run_id = ?1 AND stage = ?2 AND is_best = 0"
                         " AND id NOT IN (SELECT id FROM checkpoints WHERE run_id = ?1"
                         " AND stage = ?2 ORDER BY step DESC LIMIT ?3)",
                         STORE_ARGS(STORE_INT(id), STORE_TEXT(sname),
                                    STORE_INT(keep > 0 ? keep : 1)),
                         err)))
        goto fail;
    char data[200];
    snprintf(data, sizeof data, "{\"stage\":\"%s\",\"step\":%lld,\"best\":%s,\"size\":%zu}",
             sname, step, best ? "true" : "false", len);
    if ((rc = event(s, id, "checkpoint", data, err)) || (rc = store_commit(s, err)))
        goto fail;
    if (is_best)
        *is_best = best;
    return GT_OK;
fail:
    store_rollback(s);
    return rc;
}

int runs_append_metric(store *s, int64_t id, const char *stage, const char *name,
                       long long step, double value, double time, int *inserted, gt_error *err)
{
    int64_t one = 0;
    int rc = store_int64(s, "appending a metric",
                         "INSERT INTO metrics (run_id, stage, name, step, value, time)"
                         " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING 1",
                         STORE_ARGS(STORE_INT(id), STORE_TEXT(stage), STORE_TEXT(name),
                                    STORE_INT(step), STORE_REAL(value),
                                    STORE_REAL(time > 0 ? time : unix_now())),
                         &one, err);
    *inserted = rc == GT_OK;
    return rc == GT_ENOTFOUND ? GT_OK : rc;
}

int runs_append_validation(store *s, int64_t id, const char *stage, long long step,
                           double loss, int n_samples, double time, int *inserted,
                           gt_error *err)
{
    int64_t one = 0;
    int rc = store_int64(s, "appending a val loss",
                         "INSERT INTO val_losses (run_id, stage, step, loss, n_samples, time)"
                         " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING 1",
                         STORE_ARGS(STORE_INT(id), STORE_TEXT(stage), STORE_INT(step),
                                    STORE_REAL(loss), STORE_INT(n_samples > 0 ? n_samples : 1),
                                    STORE_REAL(time > 0 ? time : unix_now())),
                         &one, err);
    *inserted = rc == GT_OK;
    return rc == GT_ENOTFOUND ? GT_OK : rc;
}

int runs_checkpoint_at(store *s, int64_t id, int stage, long long step, int64_t *checkpoint,
                       char sha256[65], gt_error *err)
{
    json_t *row = NULL;
    int rc = store_row_json(s, "finding a checkpoint",
                            "SELECT id, checksum FROM checkpoints WHERE run_id = ? AND stage = ?"
                            " AND step = ?",
                            STORE_ARGS(STORE_INT(id), STORE_TEXT(runs_stage_name(stage)),
                                       STORE_INT(step)),
                            &row, err);
    if (rc)
        return rc;
    *checkpoint = json_integer_value(json_object_get(row, "id"));
    snprintf(sha256, 65, "%s", json_string_value(json_object_get(row, "checksum")) ?: "");
    json_decref(row);
    return GT_OK;
}

int runs_request_cancel(store *s, int64_t id, gt_error *err)
{
    return store_exec(s, "cancelling a run",
                      "UPDATE runs SET cancel_requested = 1 WHERE id = ?"
                      " AND status IN ('queued', 'running')",
                      STORE_ARGS(STORE_INT(id)), err);
}

int runs_append_event(store *s, int64_t id, const char *kind, const char *data, gt_error *err)
{
    return event(s, id, kind, data, err);
}

int runs_cancel_queued(store *s, int64_t id, int *cancelled, gt_error *err)
{
    /* Conditional: a run the worker took meanwhile is left to the worker. */
    int64_t changed;
    *cancelled = 0;
    int rc = store_int64(s, "cancelling a run",
                         "UPDATE runs SET status = 'cancelled', error = 'cancelled on request',"
                         " finished_at = " NOW ", updated_at = " NOW
                         " WHERE id = ? AND status = 'queued' RETURNING id",
                         STORE_ARGS(STORE_INT(id)), &changed, err);
    if (rc == GT_ENOTFOUND)
        return GT_OK;
    if (rc)
        return rc;
    *cancelled = 1;
    /* The run is cancelled even if its event could not be written. */
    event(s, id, "status", "{\"status\":\"cancelled\"}", NULL);
    return GT_OK;
}

int runs_requeue(store *s, int64_t id, int *requeued, gt_error *err)
{
    /* Conditional and without a transaction, as runs_cancel_queued: this
     * runs on the HTTP threads' shared connection. */
    int64_t changed;
    *requeued = 0;
    int rc = store_int64(s, "resuming a run",
                         "UPDATE runs SET status = 'queued', error = NULL, cancel_requested = 0,"
                         " finished_at = NULL, updated_at = " NOW
                         " WHERE id = ? AND status IN ('cancelled', 'failed') RETURNING id",
                         STORE_ARGS(STORE_INT(id)), &changed, err);
    if (rc == GT_ENOTFOUND)
        return GT_OK;
    if (rc)
        return rc;
    *requeued = 1;
    /* The run is queued even if its event could not be written. */
    event(s, id, "status", "{\"status\":\"queued\"}", NULL);
    return GT_OK;
}

/* ---------------------------------------------------------------------------
 * Reads for the workers and commands
 * ------------------------------------------------------------------------- */

int runs_config(store *s, int64_t id, char **config_json, gt_error *err)
{
    int rc = store_string(s, "reading a run", "SELECT config FROM runs WHERE id = ?",
                          STORE_ARGS(STORE_INT(id)), config_json, err);
    return rc == GT_ENOTFOUND ? no_run(err, id) : rc;
}

int runs_status(store *s, int64_t id, char status[16], gt_error *err)
{
    char *text = NULL;
    int rc = store_string(s, "reading a run", "SELECT status FROM runs WHERE id = ?",
                          STORE_ARGS(STORE_INT(id)), &text, err);
    if (rc == GT_ENOTFOUND)
        return no_run(err, id);
    if (rc == GT_OK)
        snprintf(status, 16, "%s", text);
    free(text);
    return rc;
}

int runs_cancel_requested(store *s, int64_t id)
{
    int64_t yes = 0;
    return store_int64(s, "reading a run", "SELECT cancel_requested FROM runs WHERE id = ?",
                       STORE_ARGS(STORE_INT(id)), &yes, NULL) == GT_OK &&
           yes == 1;
}

int runs_oldest(store *s, const char *status, int64_t *id, gt_error *err)
{
    int rc = store_int64(s, "finding the oldest run",
                         "SELECT id FROM runs WHERE status = ? AND executor = 'local'"
                         " ORDER BY id LIMIT 1",
                         STORE_ARGS(STORE_TEXT(status)), id, err);
    return rc == GT_ENOTFOUND ? gt_error_set(err, GT_ENOTFOUND, "no run is %s", status) : rc;
}

int runs_latest_succeeded(store *s, int64_t *id, gt_error *err)
{
    int rc = store_int64(s, "finding the latest run",
                         "SELECT id FROM runs WHERE status = 'succeeded' ORDER BY id DESC LIMIT 1",
                         STORE_NO_ARGS, id, err);
    return rc == GT_ENOTFOUND ? gt_error_set(err, GT_ENOTFOUND, "no run has succeeded yet") : rc;
}

int runs_find_by_key(store *s, const char *key, int64_t *id, char **config_json, gt_error *err)
{
    json_t *row = NULL;
    int rc = store_row_json(s, "looking up the idempotency key",
                            "SELECT id, config FROM runs WHERE idempotency_key = ?",
                            STORE_ARGS(STORE_TEXT(key)), &row, err);
    if (rc == GT_ENOTFOUND)
        return gt_error_set(err, GT_ENOTFOUND, "no run holds idempotency key '%s'", key);
    if (rc)
        return rc;
    *id = json_integer_value(json_object_get(row, "id"));
    const char *config = json_string_value(json_object_get(row, "config"));
    *config_json = strdup(config ? config : "");
    json_decref(row);
    return *config_json ? GT_OK : gt_error_set(err, GT_ENOMEM, "out of memory");
}

/* One checkpoint row (stage, step, checksum, blob) into out. */
static int read_checkpoint(store *s, const char *sql, const store_val *args, int nargs,
                           runs_blob *out, gt_error *err)
{
    static const char what[] = "reading a checkpoint";
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st;
    int rc = store_query(s, what, sql, args, nargs, &st, err);
    if (rc)
        return rc;
    int r = store_step(s, st, what, err);
    if (r == 1) {
        size_t n = (size_t)sqlite3_column_bytes(st, 3);
        const char *stage = (const char *)sqlite3_column_text(st, 0);
        const char *sum = (const char *)sqlite3_column_text(st, 2);
        snprintf(out->stage, sizeof out->stage, "%s", stage ? stage : "");
        out->step = sqlite3_column_int64(st, 1);
        snprintf(out->sha256, sizeof out->sha256, "%s", sum ? sum : "");
        out->data = malloc(n ? n : 1);
        out->len = n;
        if (out->data)
            memcpy(out->data, sqlite3_column_blob(st, 3), n);
        else
            rc = gt_error_set(err, GT_ENOMEM, "out of memory for a checkpoint");
    }
    sqlite3_finalize(st);
    if (r < 0)
        return GT_EIO;
    return r == 0 ? GT_ENOTFOUND : rc;
}

/* Whether a blob read back matches its stored sha256; frees it when not. */
static int blob_intact(runs_blob *b)
{
    char got[65];
    gt_sha256_hex(b->data, b->len, got);
    if (strcmp(b->sha256, got) == 0)
        return 1;
    free(b->data);
    b->data = NULL;
    return 0;
}

int runs_load_checkpoint(store *s, int64_t id, int stage, int best, void **blob, size_t *len,
                         long long *step, gt_error *err)
{
    const char *sql = best ? "SELECT stage, step, checksum, blob FROM checkpoints"
                             " WHERE run_id = ? AND stage = ? AND is_best = 1"
                           : "SELECT stage, step, checksum, blob FROM checkpoints"
                             " WHERE run_id = ? AND stage = ? ORDER BY step DESC LIMIT 1";
    runs_blob b;
    int rc = read_checkpoint(s, sql, STORE_ARGS(STORE_INT(id), STORE_TEXT(runs_stage_name(stage))),
                             &b, err);
    if (rc == GT_ENOTFOUND)
        return gt_error_set(err, GT_ENOTFOUND, "run %lld has no %s checkpoint for stage %s",
                            (long long)id, best ? "best" : "", runs_stage_name(stage));
    if (rc)
        return rc;
    if (!blob_intact(&b))
        return gt_error_set(err, GT_ECHECKSUM, "checkpoint of run %lld stage %s is corrupt",
                            (long long)id, runs_stage_name(stage));
    *blob = b.data;
    *len = b.len;
    if (step)
        *step = b.step;
    return GT_OK;
}

int runs_checkpoint_blob(store *s, int64_t id, int64_t checkpoint, runs_blob *out,
                         gt_error *err)
{
    int rc = read_checkpoint(s,
                             "SELECT stage, step, checksum, blob FROM checkpoints WHERE id = ?"
                             " AND run_id = ?",
                             STORE_ARGS(STORE_INT(checkpoint), STORE_INT(id)), out, err);
    if (rc == GT_ENOTFOUND)
        return gt_error_set(err, GT_ENOTFOUND, "run %lld has no checkpoint %lld", (long long)id,
                            (long long)checkpoint);
    return rc;
}

/* The acceptance test of the run that was trained against its current
 * best pair: one row or none. */
#define CURRENT_ACCEPTANCE                                                                  \
    " FROM acceptance_tests a WHERE a.run_id = ?1"                                          \
    " AND a.energy_ckpt = (SELECT id FROM checkpoints WHERE run_id = ?1 AND stage = 'energy'" \
    " AND is_best = 1)"                                                                     \
    " AND a.shower_ckpt = (SELECT id FROM checkpoints WHERE run_id = ?1 AND stage = 'shower'" \
    " AND is_best = 1)"

int runs_best_pair(store *s, int64_t id, int64_t *version, gt_error *err)
{
    json_t *row = NULL;
    int rc = store_row_json(s, "reading a run",
                            "SELECT COUNT(*) AS n, SUM(id) AS version,"
                            " (SELECT a.id" CURRENT_ACCEPTANCE ") AS accept"
                            " FROM checkpoints WHERE run_id = ?1 AND is_best = 1",
                            STORE_ARGS(STORE_INT(id)), &row, err);
    if (rc)
        return rc;
    int both = json_integer_value(json_object_get(row, "n")) == 2;
    /* checkpoint ids stay far under 2^32: the test's id shifted past them
     * makes a version no pair of checkpoints alone can have */
    *version = json_integer_value(json_object_get(row, "version")) +
               (json_integer_value(json_object_get(row, "accept")) << 32);
    json_decref(row);
    return both ? GT_OK
                : gt_error_set(err, GT_ENOTFOUND,
                               "run %lld has no best checkpoint of both stages yet",
                               (long long)id);
}

int runs_record_acceptance(store *s, int64_t id, const char *const sha256[2], int64_t showers,
                           double auc, double acceptance, const void *blob, size_t len,
                           gt_error *err)
{
    char sum[65];
    gt_sha256_hex(blob, len, sum);
    int rc = store_begin(s, err);
    if (rc)
        return rc;
    if ((rc = store_exec(s, "storing an acceptance test",
                         "INSERT OR REPLACE INTO acceptance_tests (run_id, energy_ckpt,"
                         " shower_ckpt, showers, auc, acceptance, checksum, size_bytes, blob)"
                         " SELECT ?1, e.id, h.id, ?2, ?3, ?4, ?5, ?6, ?7 FROM checkpoints e,"
                         " checkpoints h WHERE e.run_id = ?1 AND e.stage = 'energy'"
                         " AND e.is_best = 1 AND h.run_id = ?1 AND h.stage = 'shower'"
                         " AND h.is_best = 1 AND (?8 IS NULL OR e.checksum = lower(?8))"
                         " AND (?9 IS NULL OR h.checksum = lower(?9))",
                         STORE_ARGS(STORE_INT(id), STORE_INT(showers), STORE_REAL(auc),
                                    STORE_REAL(acceptance), STORE_TEXT(sum),
                                    STORE_INT((int64_t)len), STORE_BLOB(blob, len),
                                    STORE_TEXT(sha256 ? sha256[0] : NULL),
                                    STORE_TEXT(sha256 ? sha256[1] : NULL)),
                         err)))
        goto fail;
    int64_t n = 0;
    /* this test, stored for the current pair (an older one for it may be
     * current still when nothing was inserted) */
    if ((rc = store_int64(s, "reading the acceptance test",
                          "SELECT COUNT(*)" CURRENT_ACCEPTANCE " AND a.checksum = ?2",
                          STORE_ARGS(STORE_INT(id), STORE_TEXT(sum)), &n, err)))
        goto fail;
    if (n != 1) {
        rc = gt_error_set(err, GT_ENOTFOUND,
                          sha256 ? "the best checkpoints of run %lld are not those the test "
                                   "was trained against"
                                 : "run %lld has no best checkpoint of both stages to test "
                                   "against",
                          (long long)id);
        goto fail;
    }
    char data[160];
    snprintf(data, sizeof data, "{\"showers\":%lld,\"auc\":%.4f,\"acceptance\":%.4f}",
             (long long)showers, auc, acceptance);
    if ((rc = event(s, id, "acceptance", data, err)) || (rc = store_commit(s, err)))
        goto fail;
    return GT_OK;
fail:
    store_rollback(s);
    return rc;
}

int runs_load_acceptance(store *s, int64_t id, void **blob, size_t *len, gt_error *err)
{
    runs_blob b;
    memset(&b, 0, sizeof b);
    int rc = read_checkpoint(s, "SELECT 'accept' AS stage, 0 AS step, a.checksum, a.blob"
                                CURRENT_ACCEPTANCE,
                             STORE_ARGS(STORE_INT(id)), &b, err);
    if (rc == GT_ENOTFOUND)
        return gt_error_set(err, GT_ENOTFOUND, "run %lld has no acceptance test for its best "
                                               "checkpoints", (long long)id);
    if (rc)
        return rc;
    if (!blob_intact(&b))
        return gt_error_set(err, GT_ECHECKSUM, "the acceptance test of run %lld is corrupt",
                            (long long)id);
    *blob = b.data;
    *len = b.len;
    return GT_OK;
}

int runs_count(store *s, const char *status, long long *n, gt_error *err)
{
    int64_t c = 0;
    int rc = store_int64(s, "counting runs", "SELECT COUNT(*) FROM runs WHERE status = ?",
                         STORE_ARGS(STORE_TEXT(status)), &c, err);
    *n = rc ? 0 : (long long)c;
    return rc;
}

int runs_count_by_device(store *s,
                         void (*fn)(void *user, const char *status, const char *device,
                                    long long n),
                         void *user, gt_error *err)
{
    static const char what[] = "counting runs by device";
    sqlite3_stmt *st;
    int rc = store_query(s, what,
                         "SELECT status, COALESCE(device, ''), COUNT(*) FROM runs"
                         " GROUP BY 1, 2 ORDER BY 1, 2",
                         STORE_NO_ARGS, &st, err);
    if (rc)
        return rc;
    int r;
    while ((r = store_step(s, st, what, err)) == 1)
        fn(user, (const char *)sqlite3_column_text(st, 0),
           (const char *)sqlite3_column_text(st, 1), sqlite3_column_int64(st, 2));
    sqlite3_finalize(st);
    return r < 0 ? GT_EIO : GT_OK;
}

int runs_count_queued_by_token(store *s, int64_t token_id, long long *n, gt_error *err)
{
    int64_t c = 0;
    int rc = store_int64(s, "counting a token's runs",
                         "SELECT COUNT(*) FROM runs WHERE token_id = ? AND status = 'queued'",
                         STORE_ARGS(STORE_INT(token_id)), &c, err);
    *n = rc ? 0 : (long long)c;
    return rc;
}

/* ---------------------------------------------------------------------------
 * Reads the HTTP API shows
 * ------------------------------------------------------------------------- */

int runs_exists(store *s, int64_t id, gt_error *err)
{
    int64_t one;
    int rc = store_int64(s, "reading a run", "SELECT 1 FROM runs WHERE id = ?",
                         STORE_ARGS(STORE_INT(id)), &one, err);
    return rc == GT_ENOTFOUND ? no_run(err, id) : rc;
}

int runs_get(store *s, int64_t id, json_t **row, gt_error *err)
{
    int rc = store_row_json(s, "reading a run", "SELECT " RUN_COLUMNS " FROM runs WHERE id = ?",
                            STORE_ARGS(STORE_INT(id)), row, err);
    return rc == GT_ENOTFOUND ? no_run(err, id) : rc;
}

int runs_list(store *s, const char *status, int64_t before_id, int limit, json_t **rows,
              gt_error *err)
{
    return store_rows_json(s, "listing runs",
                           "SELECT " RUN_COLUMNS " FROM runs WHERE (?1 IS NULL OR status = ?1)"
                           " AND (?2 = 0 OR id < ?2) ORDER BY id DESC LIMIT ?3",
                           STORE_ARGS(STORE_TEXT(status), STORE_INT(before_id), STORE_INT(limit)),
                           rows, err);
}

static json_t *series_real(double v);

/* Each row's val_loss (a float kept as a double) in the float's shortest
 * digits, the number the event stream sent. */
static void val_loss_as_float(json_t *rows)
{
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        json_t *v = json_object_get(r, "val_loss");
        if (json_is_real(v))
            json_object_set_new(r, "val_loss", series_real(json_real_value(v)));
    }
}

int runs_best(store *s, int64_t id, json_t **best, gt_error *err)
{
    json_t *rows = NULL;
    int rc = store_rows_json(s, "reading the best checkpoints",
                             "SELECT stage, id AS checkpoint_id, step, val_loss FROM checkpoints"
                             " WHERE run_id = ? AND is_best = 1",
                             STORE_ARGS(STORE_INT(id)), &rows, err);
    if (rc)
        return rc;
    val_loss_as_float(rows);
    *best = json_object();
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        json_t *stage = json_object_get(r, "stage");
        json_incref(stage);
        json_object_del(r, "stage");
        json_object_set(*best, json_string_value(stage), r);
        json_decref(stage);
    }
    json_decref(rows);
    return GT_OK;
}

int runs_acceptance_info(store *s, int64_t id, json_t **info, gt_error *err)
{
    int rc = store_row_json(s, "reading the acceptance test",
                            "SELECT a.showers, a.auc, a.acceptance, a.checksum AS sha256,"
                            " a.created_at" CURRENT_ACCEPTANCE,
                            STORE_ARGS(STORE_INT(id)), info, err);
    if (rc == GT_ENOTFOUND) {
        *info = json_null();
        return GT_OK;
    }
    return rc;
}

int runs_checkpoints(store *s, int64_t id, json_t **rows, gt_error *err)
{
    int rc = store_rows_json(s, "listing checkpoints",
                             "SELECT id, stage, step, val_loss, is_best, precision, size_bytes,"
                             " checksum, created_at FROM checkpoints WHERE run_id = ?"
                             " ORDER BY stage = 'shower', step",
                             STORE_ARGS(STORE_INT(id)), rows, err);
    if (rc == GT_OK)
        val_loss_as_float(*rows);
    return rc;
}

int runs_events_after(store *s, int64_t id, int64_t after, int limit, json_t **rows,
                      gt_error *err)
{
    return store_rows_json(s, "reading events",
                           "SELECT id, kind, data FROM run_events WHERE run_id = ? AND id > ?"
                           " ORDER BY id LIMIT ?",
                           STORE_ARGS(STORE_INT(id), STORE_INT(after), STORE_INT(limit)), rows,
                           err);
}

int runs_series_names(store *s, int64_t id, const char *name, json_t **rows, gt_error *err)
{
    return store_rows_json(s, "listing metrics",
                           "SELECT DISTINCT stage, name FROM metrics WHERE run_id = ?1"
                           " AND (?2 IS NULL OR name = ?2) ORDER BY stage, name LIMIT 64",
                           STORE_ARGS(STORE_INT(id), STORE_TEXT(name)), rows, err);
}

/* Averages rows (step, value) into buckets of `per` rows. */
typedef struct bucketer {
    json_t *points;            /* [[step, mean, min, max], ...]             */
    long long per;             /* rows per bucket                           */
    long long n, last_step;
    double sum, lo, hi;
    int finite;
} bucketer;

/* A stored value that is exactly a float (loss, grad_norm, lr, val_loss
 * are floats kept as doubles) comes out with the float's shortest digits,
 * the numbers the event stream sent; others (means, samples_per_s) as
 * the doubles they are. */
static json_t *series_real(double v)
{
    if (isfinite(v) && (double)(float)v == v)
        return json_real(numfmt_float_as_double((float)v));
    return json_real(v);
}

static void bucket_flush(bucketer *b)
{
    if (b->n == 0)
        return;
    json_t *p = json_array();
    json_array_append_new(p, json_integer(b->last_step));
    if (b->finite) {
        json_array_append_new(p, series_real(b->sum / b->finite));
        json_array_append_new(p, series_real(b->lo));
        json_array_append_new(p, series_real(b->hi));
    } else {
        for (int i = 0; i < 3; i++)
            json_array_append_new(p, json_null());
    }
    json_array_append_new(b->points, p);
    b->n = 0;
    b->finite = 0;
    b->sum = 0;
}

static void bucket_add(bucketer *b, long long step, int has, double v)
{
    if (has) {
        if (!b->finite || v < b->lo)
            b->lo = v;
        if (!b->finite || v > b->hi)
            b->hi = v;
        b->sum += v;
        b->finite++;
    }
    b->last_step = step;
    if (++b->n == b->per)
        bucket_flush(b);
}

int runs_series(store *s, int64_t id, const char *stage, const char *name, long long since_step,
                long long max_points, json_t **series, gt_error *err)
{
    static const char what[] = "reading a metric series";
    int val = strcmp(name, "val_loss") == 0;
    /* Counted first, so the bucket size is known before the rows are read. */
    const char *count_sql =
        val ? "SELECT COUNT(*) FROM val_losses WHERE run_id = ? AND stage = ? AND step >= ?"
            : "SELECT COUNT(*) FROM metrics WHERE run_id = ? AND stage = ? AND step >= ?"
              " AND name = ?";
    const char *rows_sql =
        val ? "SELECT step, loss FROM val_losses WHERE run_id = ? AND stage = ? AND step >= ?"
              " ORDER BY step"
            : "SELECT step, value FROM metrics WHERE run_id = ? AND stage = ? AND step >= ?"
              " AND name = ? ORDER BY step";
    const store_val args[] = {STORE_INT(id), STORE_TEXT(stage), STORE_INT(since_step),
                              STORE_TEXT(name)};
    int nargs = val ? 3 : 4;
    int64_t count = 0;
    sqlite3_stmt *st;
    int rc = store_int64(s, what, count_sql, args, nargs, &count, err);
    if (rc || (rc = store_query(s, what, rows_sql, args, nargs, &st, err)))
        return rc;
    bucketer b = {json_array(), (count + max_points - 1) / max_points, 0, 0, 0, 0, 0, 0};
    if (b.per < 1)
        b.per = 1;
    int r;
    while ((r = store_step(s, st, what, err)) == 1)
        bucket_add(&b, sqlite3_column_int64(st, 0), sqlite3_column_type(st, 1) != SQLITE_NULL,
                   sqlite3_column_double(st, 1));
    sqlite3_finalize(st);
    if (r < 0) {
        json_decref(b.points);
        return GT_EIO;
    }
    bucket_flush(&b);
    *series = json_pack("{s:s, s:s, s:I, s:I, s:o}", "stage", stage, "name", name, "count",
                        (json_int_t)count, "bucket", (json_int_t)b.per, "points", b.points);
    return *series ? GT_OK : gt_error_set(err, GT_ENOMEM, "%s: out of memory", what);
}
