/* runs_read: the runs tables' reads for the workers and commands, and the
 * checkpoint and acceptance blobs checked against their sha256 (runs.h). */
#include "runs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gt_sha256.h"
#include "runs_internal.h"

/* ---------------------------------------------------------------------------
 * Reads for the workers and commands
 * ------------------------------------------------------------------------- */

int runs_config(store *s, int64_t id, char **config_json, gt_error *err)
{
    int rc = store_string(s, "reading a run", "SELECT config FROM runs WHERE id = ?",
                          STORE_ARGS(STORE_INT(id)), config_json, err);
    return rc == GT_ENOTFOUND ? runs_no_run(err, id) : rc;
}

int runs_parse_config(const char *config_json, model_config *cfg, gt_error *err)
{
    char field[128] = "";
    const char *text = config_json ? config_json : "";
    return model_config_parse_stored(text, strlen(text), cfg, field, sizeof field, err);
}

int runs_read_config(store *s, int64_t id, model_config *cfg, gt_error *err)
{
    char *text = NULL;
    int rc = runs_config(s, id, &text, err);
    if (rc == GT_OK)
        rc = runs_parse_config(text, cfg, err);
    free(text);
    return rc;
}

int runs_status(store *s, int64_t id, char status[16], gt_error *err)
{
    char *text = NULL;
    int rc = store_string(s, "reading a run", "SELECT status FROM runs WHERE id = ?",
                          STORE_ARGS(STORE_INT(id)), &text, err);
    if (rc == GT_ENOTFOUND)
        return runs_no_run(err, id);
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

/* The run's best pair in one statement: no row when the run does not
 * exist; else how many stages have a best checkpoint and the pair's
 * version (runs.h, runs_best_pair). */
static int best_pair_row(store *s, int64_t id, int *both, int64_t *version, gt_error *err)
{
    json_t *row = NULL;
    int rc = store_row_json(s, "reading a run",
                            "SELECT (SELECT COUNT(*) FROM checkpoints WHERE run_id = ?1"
                            " AND is_best = 1) AS n, (SELECT SUM(id) FROM checkpoints"
                            " WHERE run_id = ?1 AND is_best = 1) AS version,"
                            " (SELECT a.id" CURRENT_ACCEPTANCE ") AS accept"
                            " FROM runs WHERE id = ?1",
                            STORE_ARGS(STORE_INT(id)), &row, err);
    if (rc)
        return rc;
    *both = json_integer_value(json_object_get(row, "n")) == 2;
    /* checkpoint ids stay far under 2^32: the test's id shifted past them
     * makes a version no pair of checkpoints alone can have */
    *version = json_integer_value(json_object_get(row, "version")) +
               (json_integer_value(json_object_get(row, "accept")) << 32);
    json_decref(row);
    return GT_OK;
}

int runs_best_pair(store *s, int64_t id, int64_t *version, gt_error *err)
{
    int both = 0;
    int rc = best_pair_row(s, id, &both, version, err);
    if (rc && rc != GT_ENOTFOUND)
        return rc;
    return rc == GT_OK && both
               ? GT_OK
               : gt_error_set(err, GT_ENOTFOUND,
                              "run %lld has no best checkpoint of both stages yet",
                              (long long)id);
}

int runs_sample_source(store *s, int64_t id, int *ready, int64_t *version, gt_error *err)
{
    *ready = 0;
    *version = 0;
    int rc = best_pair_row(s, id, ready, version, err);
    return rc == GT_ENOTFOUND ? runs_no_run(err, id) : rc;
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
    if ((rc = runs_append_event(s, id, "acceptance", data, err)) || (rc = store_commit(s, err)))
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
