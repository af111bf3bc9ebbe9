#include "evaluations.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "runs.h"

/* The ISO-8601 UTC time SQLite writes into the *_at columns. */
#define NOW "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

#define EVAL_COLUMNS                                                                        \
    "id, run_id, status, phase, progress, error, request, created_at, started_at, finished_at"

/* ---------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------- */

int evaluations_create(store *db, const evaluations_new *e, int64_t *id, gt_error *err)
{
    const store_val null = {.kind = STORE_V_NULL};
    return store_int64(db, "queueing an evaluation",
                       "INSERT INTO evaluations (run_id, dataset_id, ref2_dataset_id, n, seed,"
                       " request) VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                       STORE_ARGS(STORE_INT(e->run), STORE_INT(e->dataset),
                                  e->ref2 > 0 ? STORE_INT(e->ref2) : null, STORE_INT(e->n),
                                  STORE_INT((int64_t)e->seed), STORE_TEXT(e->request)),
                       id, err);
}

int evaluations_get(store *db, int64_t run, int64_t id, int with_result, json_t **row,
                    gt_error *err)
{
    int rc = store_row_json(db, "reading an evaluation",
                            with_result
                                ? "SELECT " EVAL_COLUMNS ", result FROM evaluations"
                                  " WHERE run_id = ? AND id = ?"
                                : "SELECT " EVAL_COLUMNS " FROM evaluations"
                                  " WHERE run_id = ? AND id = ?",
                            STORE_ARGS(STORE_INT(run), STORE_INT(id)), row, err);
    return rc == GT_ENOTFOUND ? gt_error_set(err, GT_ENOTFOUND,
                                             "run %lld has no evaluation %lld", (long long)run,
                                             (long long)id)
                              : rc;
}

int evaluations_list(store *db, int64_t run, int limit, json_t **rows, gt_error *err)
{
    return store_rows_json(db, "listing evaluations",
                           "SELECT " EVAL_COLUMNS " FROM evaluations WHERE run_id = ?"
                           " ORDER BY id DESC LIMIT ?",
                           STORE_ARGS(STORE_INT(run), STORE_INT(limit)), rows, err);
}

long long evaluations_active(store *db, int64_t run)
{
    int64_t n = 0;
    if (store_int64(db, "counting evaluations",
                    "SELECT COUNT(*) FROM evaluations WHERE run_id = ?"
                    " AND status IN ('queued', 'running')",
                    STORE_ARGS(STORE_INT(run)), &n, NULL) != GT_OK)
        return 0;
    return (long long)n;
}

long long evaluations_count(store *db, const char *status)
{
    int64_t n = 0;
    if (store_int64(db, "counting evaluations", "SELECT COUNT(*) FROM evaluations WHERE status = ?",
                    STORE_ARGS(STORE_TEXT(status)), &n, NULL) != GT_OK)
        return 0;
    return (long long)n;
}

/* The worker's statements (evaluations_worker.c). */

int evaluations_next_queued(store *db, json_t **row, gt_error *err)
{
    return store_row_json(db, "finding a queued evaluation",
                          "SELECT id, run_id, request FROM evaluations WHERE status = 'queued'"
                          " ORDER BY id LIMIT 1",
                          STORE_NO_ARGS, row, err);
}

/* The run's "evaluation" event: {"evaluation_id", "status", "phase",
 * "progress"[, "error"]}. */
static void event(store *db, int64_t run, int64_t id, const char *status, const char *phase,
                  double progress, const char *error)
{
    json_t *o = json_pack("{s:I, s:s, s:s?, s:f}", "evaluation_id", (json_int_t)id, "status",
                          status, "phase", phase, "progress", progress);
    if (o && error)
        json_object_set_new(o, "error", json_string(error));
    /* six digits: a progress of 0.05, not 0.050000000000000003 */
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    if (text)
        runs_append_event(db, run, "evaluation", text, NULL);
    free(text);
    json_decref(o);
}

void evaluations_set_running(store *db, int64_t run, int64_t id)
{
    store_exec(db, "evaluation running",
               "UPDATE evaluations SET status = 'running', phase = 'reading', progress = 0,"
               " error = NULL, result = NULL, started_at = " NOW ", finished_at = NULL"
               " WHERE id = ?",
               STORE_ARGS(STORE_INT(id)), NULL);
    event(db, run, id, "running", "reading", 0.0, NULL);
}

void evaluations_set_phase(store *db, int64_t run, int64_t id, const char *phase,
                           double progress)
{
    store_exec(db, "evaluation progress",
               "UPDATE evaluations SET phase = ?, progress = ? WHERE id = ?",
               STORE_ARGS(STORE_TEXT(phase), STORE_REAL(progress), STORE_INT(id)), NULL);
    event(db, run, id, "running", phase, progress, NULL);
}

int evaluations_set_succeeded(store *db, int64_t run, int64_t id, const char *result,
                              gt_error *err)
{
    int rc = store_exec(db, "storing an evaluation",
                        "UPDATE evaluations SET status = 'succeeded', phase = NULL, progress = 1,"
                        " result = ?, finished_at = " NOW " WHERE id = ?",
                        STORE_ARGS(STORE_TEXT(result), STORE_INT(id)), err);
    if (rc == GT_OK)
        event(db, run, id, "succeeded", NULL, 1.0, NULL);
    return rc;
}

void evaluations_set_failed(store *db, int64_t run, int64_t id, const char *error)
{
    store_exec(db, "evaluation failed",
               "UPDATE evaluations SET status = 'failed', phase = NULL, error = ?,"
               " finished_at = " NOW " WHERE id = ?",
               STORE_ARGS(STORE_TEXT(error), STORE_INT(id)), NULL);
    event(db, run, id, "failed", NULL, 0.0, error);
}

void evaluations_set_queued_again(store *db, int64_t run, int64_t id)
{
    store_exec(db, "evaluation re-queued",
               "UPDATE evaluations SET status = 'queued', phase = NULL, progress = 0,"
               " started_at = NULL WHERE id = ?",
               STORE_ARGS(STORE_INT(id)), NULL);
    event(db, run, id, "queued", NULL, 0.0, NULL);
}

void evaluations_fail_interrupted(store *db)
{
    static const char why[] = "the server stopped during the evaluation (a crash or a kill);"
                              " queue it again";
    json_t *rows = NULL;
    if (store_rows_json(db, "failing interrupted evaluations",
                        "UPDATE evaluations SET status = 'failed', phase = NULL, error = ?,"
                        " finished_at = " NOW " WHERE status = 'running' RETURNING id, run_id",
                        STORE_ARGS(STORE_TEXT(why)), &rows, NULL) != GT_OK)
        return;
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        int64_t id = json_integer_value(json_object_get(r, "id"));
        int64_t run = json_integer_value(json_object_get(r, "run_id"));
        event(db, run, id, "failed", NULL, 0.0, why);
        log_msg(LOG_WARN, "evaluation", "id=%lld status=failed error=\"%s\"", (long long)id,
                why);
    }
    json_decref(rows);
}
