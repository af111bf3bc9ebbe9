#include "runs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "gt_sha256.h"
#include "numfmt.h"
#include "runs_internal.h"

/* The ISO-8601 UTC time SQLite writes into the *_at columns. */
#define NOW "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

/* A run's new status (?1), error (?2) and device (?3, kept when NULL), with
 * its attempts and times: runs_set_status and runs_transition add which
 * run (?4) and when. */
#define SET_STATUS_SQL                                                                     \
    "UPDATE runs SET status = ?1, error = ?2, device = COALESCE(?3, device),"                \
    " attempts = attempts + (?1 = 'running'),"                                              \
    " started_at = CASE WHEN ?1 = 'running' AND started_at IS NULL"                         \
    "   THEN " NOW " ELSE started_at END,"                                                  \
    " finished_at = CASE WHEN ?1 IN ('succeeded', 'failed', 'cancelled')"                   \
    "   THEN " NOW " ELSE NULL END,"                                                        \
    " updated_at = " NOW

const char *runs_stage_name(int stage) { return stage == 1 ? "energy" : "shower"; }

static double unix_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
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
        SET_STATUS_SQL " WHERE id = ?4 RETURNING id",
        STORE_ARGS(STORE_TEXT(status), STORE_TEXT(error), STORE_TEXT(device), STORE_INT(id)),
        &changed, err);
    if (rc) {
        store_rollback(s);
        return rc == GT_ENOTFOUND ? runs_no_run(err, id) : rc;
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
        SET_STATUS_SQL " WHERE id = ?4 AND status != ?1"
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

/* A conditional update of run id on the shared connection, without a
 * transaction (sql: `... WHERE id = ? AND <condition> RETURNING id`):
 * *done is 1 when it changed the run, whose status event (data) is then
 * written; the update stands even if the event could not be.  GT_OK when
 * the condition held or not. */
static int update_if(store *s, const char *what, const char *sql, int64_t id, const char *data,
                     int *done, gt_error *err)
{
    int64_t changed;
    *done = 0;
    int rc = store_int64(s, what, sql, STORE_ARGS(STORE_INT(id)), &changed, err);
    if (rc == GT_ENOTFOUND)
        return GT_OK;
    if (rc)
        return rc;
    *done = 1;
    event(s, id, "status", data, NULL);
    return GT_OK;
}

int runs_cancel_queued(store *s, int64_t id, int *cancelled, gt_error *err)
{
    /* Conditional: a run the worker took meanwhile is left to the worker. */
    return update_if(s, "cancelling a run",
                     "UPDATE runs SET status = 'cancelled', error = 'cancelled on request',"
                     " finished_at = " NOW ", updated_at = " NOW
                     " WHERE id = ? AND status = 'queued' RETURNING id",
                     id, "{\"status\":\"cancelled\"}", cancelled, err);
}

int runs_requeue(store *s, int64_t id, int *requeued, gt_error *err)
{
    /* Conditional and without a transaction, as runs_cancel_queued: this
     * runs on the HTTP threads' shared connection. */
    return update_if(s, "resuming a run",
                     "UPDATE runs SET status = 'queued', error = NULL, cancel_requested = 0,"
                     " finished_at = NULL, updated_at = " NOW
                     " WHERE id = ? AND status IN ('cancelled', 'failed') RETURNING id",
                     id, "{\"status\":\"queued\"}", requeued, err);
}
