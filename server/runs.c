#include "runs.h"

#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

const char *runs_stage_name(int stage) { return stage == 1 ? "energy" : "shower"; }

static double unix_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

static int sql_fail(store *s, gt_error *err, const char *what)
{
    return gt_error_set(err, GT_EIO, "%s: %s", what, sqlite3_errmsg(store_db(s)));
}

static int prepare(store *s, const char *sql, sqlite3_stmt **st, gt_error *err)
{
    if (sqlite3_prepare_v2(store_db(s), sql, -1, st, NULL) != SQLITE_OK)
        return sql_fail(s, err, "preparing a statement");
    return GT_OK;
}

static int exec(store *s, const char *sql, gt_error *err)
{
    char *msg = NULL;
    if (sqlite3_exec(store_db(s), sql, NULL, NULL, &msg) != SQLITE_OK) {
        int rc = gt_error_set(err, GT_EIO, "%s: %s", sql, msg ? msg : "?");
        sqlite3_free(msg);
        return rc;
    }
    return GT_OK;
}

/* Binds a float as REAL, or NULL when not finite (SQLite has no NaN). */
static void bind_real(sqlite3_stmt *st, int i, double v)
{
    if (isfinite(v))
        sqlite3_bind_double(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

static int event(store *s, int64_t id, const char *kind, const char *data, gt_error *err)
{
    sqlite3_stmt *st;
    int rc = prepare(s, "INSERT INTO run_events (run_id, kind, data) VALUES (?, ?, ?)", &st, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, data, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st) == SQLITE_DONE ? GT_OK : sql_fail(s, err, "recording an event");
    sqlite3_finalize(st);
    return rc;
}

int runs_create(store *s, const char *name, const char *config_json, const char *precision,
                const char *idempotency_key, long long total_steps, int64_t *id, gt_error *err)
{
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "INSERT INTO runs (name, config, precision, idempotency_key, total_steps)"
                     " VALUES (?, ?, ?, ?, ?)",
                     &st, err);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, config_json, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, precision, -1, SQLITE_STATIC);
    if (idempotency_key)
        sqlite3_bind_text(st, 4, idempotency_key, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 4);
    sqlite3_bind_int64(st, 5, total_steps);
    rc = sqlite3_step(st) == SQLITE_DONE ? GT_OK : sql_fail(s, err, "creating a run");
    sqlite3_finalize(st);
    if (rc == GT_OK) {
        *id = sqlite3_last_insert_rowid(store_db(s));
        rc = event(s, *id, "status", "{\"status\":\"queued\"}", err);
    }
    return rc;
}

int runs_set_status(store *s, int64_t id, const char *status, const char *error,
                    const char *device, gt_error *err)
{
    sqlite3_stmt *st;
    int rc = prepare(
        s,
        "UPDATE runs SET status = ?1, error = ?2, device = COALESCE(?3, device),"
        " attempts = attempts + (?1 = 'running'),"
        " started_at = CASE WHEN ?1 = 'running' AND started_at IS NULL"
        "   THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') ELSE started_at END,"
        " finished_at = CASE WHEN ?1 IN ('succeeded', 'failed', 'cancelled')"
        "   THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') ELSE NULL END,"
        " updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?4",
        &st, err);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, status, -1, SQLITE_STATIC);
    if (error)
        sqlite3_bind_text(st, 2, error, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 2);
    if (device)
        sqlite3_bind_text(st, 3, device, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 3);
    sqlite3_bind_int64(st, 4, id);
    rc = sqlite3_step(st) == SQLITE_DONE ? GT_OK : sql_fail(s, err, "updating a run");
    sqlite3_finalize(st);
    if (rc)
        return rc;
    if (sqlite3_changes(store_db(s)) == 0)
        return gt_error_set(err, GT_ENOTFOUND, "run %lld does not exist", (long long)id);
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
    return event(s, id, "status", data, err);
}

int runs_set_progress(store *s, int64_t id, int stage, long long step, long long done_steps,
                      long long total_steps, gt_error *err)
{
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "UPDATE runs SET stage = ?, step = ?, total_steps = ?, progress = ?,"
                     " updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?",
                     &st, err);
    if (rc)
        return rc;
    double progress = total_steps > 0 ? (double)done_steps / (double)total_steps : 0.0;
    if (progress > 1)
        progress = 1;
    sqlite3_bind_text(st, 1, runs_stage_name(stage), -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, step);
    sqlite3_bind_int64(st, 3, total_steps);
    sqlite3_bind_double(st, 4, progress);
    sqlite3_bind_int64(st, 5, id);
    rc = sqlite3_step(st) == SQLITE_DONE ? GT_OK : sql_fail(s, err, "updating progress");
    sqlite3_finalize(st);
    return rc;
}

int runs_record_step(store *s, int64_t id, const model_step_report *r, gt_error *err)
{
    int rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc)
        return rc;
    sqlite3_stmt *st;
    if ((rc = prepare(s,
                      "INSERT OR REPLACE INTO metrics (run_id, stage, name, step, value, time)"
                      " VALUES (?, ?, ?, ?, ?, ?)",
                      &st, err))) {
        exec(s, "ROLLBACK", NULL);
        return rc;
    }
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
    for (int i = 0; i < n && rc == GT_OK; i++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_text(st, 2, runs_stage_name(r->stage), -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, m[i].name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, r->step);
        bind_real(st, 5, m[i].v);
        sqlite3_bind_double(st, 6, now);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = sql_fail(s, err, "recording a metric");
    }
    sqlite3_finalize(st);
    if (rc == GT_OK) {
        char data[256];
        snprintf(data, sizeof data,
                 "{\"stage\":\"%s\",\"step\":%lld,\"loss\":%.9g,\"grad_norm\":%.9g,\"lr\":%.9g}",
                 runs_stage_name(r->stage), r->step, isfinite(r->loss) ? r->loss : 0.0,
                 isfinite(r->grad_norm) ? r->grad_norm : 0.0, (double)r->lr);
        rc = event(s, id, "metric", data, err);
    }
    if (rc) {
        exec(s, "ROLLBACK", NULL);
        return rc;
    }
    return exec(s, "COMMIT", err);
}

int runs_record_validation(store *s, int64_t id, int stage, long long step, float loss,
                           int n_samples, gt_error *err)
{
    sqlite3_stmt *st;
    int rc = prepare(s,
                     "INSERT OR REPLACE INTO val_losses (run_id, stage, step, loss, n_samples,"
                     " time) VALUES (?, ?, ?, ?, ?, ?)",
                     &st, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, runs_stage_name(stage), -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, step);
    bind_real(st, 4, loss);
    sqlite3_bind_int(st, 5, n_samples > 0 ? n_samples : 1);
    sqlite3_bind_double(st, 6, unix_now());
    rc = sqlite3_step(st) == SQLITE_DONE ? GT_OK : sql_fail(s, err, "recording a val loss");
    sqlite3_finalize(st);
    if (rc)
        return rc;
    char data[160];
    snprintf(data, sizeof data, "{\"stage\":\"%s\",\"step\":%lld,\"val_loss\":%.9g}",
             runs_stage_name(stage), step, isfinite(loss) ? loss : 0.0);
    return event(s, id, "val_loss", data, err);
}

void runs_sha256_hex(const void *buf, size_t len, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_Digest(buf, len, md, &n, EVP_sha256(), NULL);
    for (unsigned i = 0; i < n && i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    out[64] = '\0';
}

int runs_record_checkpoint(store *s, int64_t id, int stage, long long step, float val_loss,
                           const char *precision, const void *blob, size_t len, int keep,
                           int *is_best, gt_error *err)
{
    char sum[65];
    runs_sha256_hex(blob, len, sum);
    const char *sname = runs_stage_name(stage);
    int rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc)
        return rc;
    sqlite3_stmt *st = NULL;
    int best = 0;
    /* Best = lowest finite validation loss of the stage (the new one wins
     * only when strictly lower, so the earliest of equal losses stays). */
    if ((rc = prepare(s,
                      "SELECT val_loss FROM checkpoints WHERE run_id = ? AND stage = ?"
                      " AND is_best = 1 AND step != ?",
                      &st, err)))
        goto fail;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, sname, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, step);
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW) {
        int has = sqlite3_column_type(st, 0) != SQLITE_NULL;
        double cur = sqlite3_column_double(st, 0);
        best = isfinite(val_loss) && (!has || val_loss < cur);
    } else if (r == SQLITE_DONE) {
        best = 1;
    } else {
        rc = sql_fail(s, err, "reading the best checkpoint");
    }
    sqlite3_finalize(st);
    st = NULL;
    if (rc)
        goto fail;
    if (best && (rc = prepare(s,
                              "UPDATE checkpoints SET is_best = 0 WHERE run_id = ? AND stage = ?",
                              &st, err)) == GT_OK) {
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_text(st, 2, sname, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = sql_fail(s, err, "clearing the best flag");
        sqlite3_finalize(st);
        st = NULL;
    }
    if (rc)
        goto fail;
    if ((rc = prepare(s,
                      "INSERT OR REPLACE INTO checkpoints (run_id, stage, step, val_loss, is_best,"
                      " precision, checksum, size_bytes, blob) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      &st, err)))
        goto fail;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, sname, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, step);
    bind_real(st, 4, val_loss);
    sqlite3_bind_int(st, 5, best);
    sqlite3_bind_text(st, 6, precision, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, sum, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 8, (sqlite3_int64)len);
    sqlite3_bind_blob64(st, 9, blob, len, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = sql_fail(s, err, "storing a checkpoint");
    sqlite3_finalize(st);
    st = NULL;
    if (rc)
        goto fail;
    /* Retention: keep the best and the newest `keep` of the stage. */
    if ((rc = prepare(s,
                      "DELETE FROM checkpoints WHERE run_id = ?1 AND stage = ?2 AND is_best = 0"
                      " AND id NOT IN (SELECT id FROM checkpoints WHERE run_id = ?1 AND stage = ?2"
                      " ORDER BY step DESC LIMIT ?3)",
                      &st, err)))
        goto fail;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, sname, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, keep > 0 ? keep : 1);
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = sql_fail(s, err, "pruning checkpoints");
    sqlite3_finalize(st);
    st = NULL;
    if (rc)
        goto fail;
    char data[200];
    snprintf(data, sizeof data, "{\"stage\":\"%s\",\"step\":%lld,\"best\":%s,\"size\":%zu}",
             sname, step, best ? "true" : "false", len);
    if ((rc = event(s, id, "checkpoint", data, err)))
        goto fail;
    if ((rc = exec(s, "COMMIT", err)))
        goto fail;
    if (is_best)
        *is_best = best;
    return GT_OK;
fail:
    exec(s, "ROLLBACK", NULL);
    return rc;
}

int runs_load_checkpoint(store *s, int64_t id, int stage, int best, void **blob, size_t *len,
                         long long *step, gt_error *err)
{
    sqlite3_stmt *st;
    const char *sql = best ? "SELECT step, checksum, blob FROM checkpoints WHERE run_id = ?"
                             " AND stage = ? AND is_best = 1"
                           : "SELECT step, checksum, blob FROM checkpoints WHERE run_id = ?"
                             " AND stage = ? ORDER BY step DESC LIMIT 1";
    int rc = prepare(s, sql, &st, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, runs_stage_name(stage), -1, SQLITE_STATIC);
    int r = sqlite3_step(st);
    if (r == SQLITE_DONE) {
        sqlite3_finalize(st);
        return gt_error_set(err, GT_ENOTFOUND, "run %lld has no %s checkpoint for stage %s",
                            (long long)id, best ? "best" : "", runs_stage_name(stage));
    }
    if (r != SQLITE_ROW) {
        rc = sql_fail(s, err, "reading a checkpoint");
        sqlite3_finalize(st);
        return rc;
    }
    size_t n = (size_t)sqlite3_column_bytes(st, 2);
    const void *p = sqlite3_column_blob(st, 2);
    char want[65], got[65];
    snprintf(want, sizeof want, "%s", (const char *)sqlite3_column_text(st, 1));
    if (step)
        *step = sqlite3_column_int64(st, 0);
    *blob = malloc(n ? n : 1);
    if (!*blob) {
        sqlite3_finalize(st);
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    }
    memcpy(*blob, p, n);
    *len = n;
    sqlite3_finalize(st);
    runs_sha256_hex(*blob, n, got);
    if (strcmp(want, got) != 0) {
        free(*blob);
        *blob = NULL;
        return gt_error_set(err, GT_ECHECKSUM, "checkpoint of run %lld stage %s is corrupt",
                            (long long)id, runs_stage_name(stage));
    }
    return GT_OK;
}

int runs_get(store *s, int64_t id, char **config_json, char *status, gt_error *err)
{
    sqlite3_stmt *st;
    int rc = prepare(s, "SELECT config, status FROM runs WHERE id = ?", &st, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    int r = sqlite3_step(st);
    if (r != SQLITE_ROW) {
        sqlite3_finalize(st);
        return r == SQLITE_DONE
                   ? gt_error_set(err, GT_ENOTFOUND, "run %lld does not exist", (long long)id)
                   : sql_fail(s, err, "reading a run");
    }
    if (config_json) {
        *config_json = strdup((const char *)sqlite3_column_text(st, 0));
        if (!*config_json)
            rc = gt_error_set(err, GT_ENOMEM, "out of memory");
    }
    if (status)
        snprintf(status, 16, "%s", (const char *)sqlite3_column_text(st, 1));
    sqlite3_finalize(st);
    return rc;
}

int runs_latest_succeeded(store *s, int64_t *id, gt_error *err)
{
    sqlite3_stmt *st;
    int rc = prepare(s, "SELECT id FROM runs WHERE status = 'succeeded' ORDER BY id DESC LIMIT 1",
                     &st, err);
    if (rc)
        return rc;
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW)
        *id = sqlite3_column_int64(st, 0);
    else
        rc = r == SQLITE_DONE ? gt_error_set(err, GT_ENOTFOUND, "no run has succeeded yet")
                              : sql_fail(s, err, "finding the latest run");
    sqlite3_finalize(st);
    return rc;
}
