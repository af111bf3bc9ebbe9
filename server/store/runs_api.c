/* runs_api: the runs tables' reads the HTTP API shows, as JSON rows and
 * bucketed series (runs.h). */
#include "runs.h"

#include <math.h>
#include <string.h>

#include "numfmt.h"
#include "runs_internal.h"

/* The columns of a run row (runs_get). */
#define RUN_COLUMNS                                                                          \
    "id, name, status, config, stage, device, precision, progress, step, total_steps, error," \
    " cancel_requested, attempts, created_at, started_at, finished_at, updated_at, executor," \
    " (julianday('now') - julianday(started_at)) * 86400.0 AS elapsed_s"

/* A run as the API shows it (runs_show, runs_list), in one statement: its
 * row (RUN_SHOWN_ROW columns, named as RUN_COLUMNS), its best checkpoint of
 * each stage, the acceptance test of that pair, and its Slurm job.  Each
 * run has at most one best checkpoint per stage (checkpoints_one_best),
 * one acceptance test and one slurm_jobs row, so the joins never repeat a
 * run.  The slurm_jobs columns are read here beside the run so that a page
 * of runs is one statement; slurm_jobs.c owns every write of them. */
#define RUN_SHOWN_ROW 19
#define RUN_SHOWN(config)                                                                     \
    "SELECT r.id AS id, r.name AS name, r.status AS status, " config " AS config,"            \
    " r.stage AS stage, r.device AS device, r.precision AS precision,"                       \
    " r.progress AS progress, r.step AS step, r.total_steps AS total_steps, r.error AS error," \
    " r.cancel_requested AS cancel_requested, r.attempts AS attempts,"                       \
    " r.created_at AS created_at, r.started_at AS started_at, r.finished_at AS finished_at,"  \
    " r.updated_at AS updated_at, r.executor AS executor,"                                   \
    " (julianday('now') - julianday(r.started_at)) * 86400.0 AS elapsed_s,"                  \
    " e.id, e.step, e.val_loss, h.id, h.step, h.val_loss,"                                   \
    " a.showers, a.auc, a.acceptance, a.checksum, a.created_at,"                             \
    " j.run_id, j.job_id, j.state, j.reason, j.node, j.submissions, j.restarts,"             \
    " j.submitted_at"                                                                        \
    " FROM runs r"                                                                           \
    " LEFT JOIN checkpoints e ON e.run_id = r.id AND e.stage = 'energy' AND e.is_best = 1"   \
    " LEFT JOIN checkpoints h ON h.run_id = r.id AND h.stage = 'shower' AND h.is_best = 1"   \
    " LEFT JOIN acceptance_tests a ON a.run_id = r.id AND a.energy_ckpt = e.id"              \
    " AND a.shower_ckpt = h.id"                                                              \
    " LEFT JOIN slurm_jobs j ON j.run_id = r.id"

/* ---------------------------------------------------------------------------
 * Reads the HTTP API shows
 * ------------------------------------------------------------------------- */

int runs_exists(store *s, int64_t id, gt_error *err)
{
    int64_t one;
    int rc = store_int64(s, "reading a run", "SELECT 1 FROM runs WHERE id = ?",
                         STORE_ARGS(STORE_INT(id)), &one, err);
    return rc == GT_ENOTFOUND ? runs_no_run(err, id) : rc;
}

int runs_get(store *s, int64_t id, json_t **row, gt_error *err)
{
    int rc = store_row_json(s, "reading a run", "SELECT " RUN_COLUMNS " FROM runs WHERE id = ?",
                            STORE_ARGS(STORE_INT(id)), row, err);
    return rc == GT_ENOTFOUND ? runs_no_run(err, id) : rc;
}

static json_t *series_real(double v);

/* A val_loss column (a float kept as a double) in the float's shortest
 * digits, the number the event stream sent. */
static json_t *val_loss_json(sqlite3_stmt *st, int i)
{
    if (sqlite3_column_type(st, i) == SQLITE_FLOAT)
        return series_real(sqlite3_column_double(st, i));
    return store_column_json(st, i);
}

/* Sets o[keys[k]] to column first + k for each key. */
static void set_columns(json_t *o, sqlite3_stmt *st, int first, const char *const *keys, int n)
{
    for (int k = 0; k < n; k++)
        json_object_set_new(o, keys[k], store_column_json(st, first + k));
}

/* One row of RUN_SHOWN as the run's columns plus "best" (the stages that
 * have one: {"checkpoint_id", "step", "val_loss"}), "acceptance" (as
 * runs_acceptance_info) and "slurm_job" (the slurm_jobs columns the API
 * shows, or null). */
static json_t *shown_row(sqlite3_stmt *st)
{
    json_t *o = json_object(), *best = json_object();
    if (!o || !best) {
        json_decref(o);
        json_decref(best);
        return NULL;
    }
    for (int i = 0; i < RUN_SHOWN_ROW; i++)
        json_object_set_new(o, sqlite3_column_name(st, i), store_column_json(st, i));
    static const char *const stages[2] = {"energy", "shower"};
    for (int k = 0, c = RUN_SHOWN_ROW; k < 2; k++, c += 3) {
        if (sqlite3_column_type(st, c) == SQLITE_NULL)
            continue;
        json_t *b = json_object();
        json_object_set_new(b, "checkpoint_id", store_column_json(st, c));
        json_object_set_new(b, "step", store_column_json(st, c + 1));
        json_object_set_new(b, "val_loss", val_loss_json(st, c + 2));
        json_object_set_new(best, stages[k], b);
    }
    json_object_set_new(o, "best", best);
    int c = RUN_SHOWN_ROW + 6;
    json_t *acc = json_null();
    if (sqlite3_column_type(st, c + 3) != SQLITE_NULL) {      /* its checksum */
        static const char *const keys[] = {"showers", "auc", "acceptance", "sha256",
                                           "created_at"};
        acc = json_object();
        set_columns(acc, st, c, keys, 5);
    }
    json_object_set_new(o, "acceptance", acc);
    c += 5;
    json_t *job = json_null();
    if (sqlite3_column_type(st, c) != SQLITE_NULL) {          /* its run_id */
        static const char *const keys[] = {"job_id", "state", "reason", "node",
                                           "submissions", "restarts", "submitted_at"};
        job = json_object();
        set_columns(job, st, c + 1, keys, 7);
    }
    json_object_set_new(o, "slurm_job", job);
    return o;
}

int runs_show(store *s, int64_t id, json_t **row, gt_error *err)
{
    json_t *rows = NULL;
    *row = NULL;
    int rc = store_rows_with(s, "reading a run", RUN_SHOWN("r.config") " WHERE r.id = ?1",
                             STORE_ARGS(STORE_INT(id)), shown_row, &rows, err);
    if (rc)
        return rc;
    if (json_array_size(rows) == 0) {
        json_decref(rows);
        return runs_no_run(err, id);
    }
    *row = json_incref(json_array_get(rows, 0));
    json_decref(rows);
    return GT_OK;
}

int runs_list(store *s, const char *status, int64_t before_id, int limit, json_t **rows,
              gt_error *err)
{
    /* a listing shows no config: it is not read */
    return store_rows_with(s, "listing runs",
                           RUN_SHOWN("NULL") " WHERE (?1 IS NULL OR r.status = ?1)"
                           " AND (?2 = 0 OR r.id < ?2) ORDER BY r.id DESC LIMIT ?3",
                           STORE_ARGS(STORE_TEXT(status), STORE_INT(before_id),
                                      STORE_INT(limit)),
                           shown_row, rows, err);
}

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
