/* routes_evaluations: /v1/runs/{id}/evaluations.  A POST is validated
 * here and only queued (the evaluations worker generates and compares);
 * the reads shape the table's rows.  Contracts: api/openapi.json. */
#include "routes_handlers.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "datasets.h"
#include "eval_body.h"
#include "evaluations.h"
#include "evaluations_worker.h"
#include "routes_common.h"
#include "runs.h"

/* The API's evaluation object from a row (with_result: the document, or
 * null until it succeeded). */
static json_t *evaluation_object(json_t *row, int with_result)
{
#define COL(name) json_object_get(row, name)
    json_t *req = json_loads(json_string_value(COL("request")), 0, NULL);
    json_t *o = json_pack("{s:O, s:O, s:O, s:O, s:O, s:O, s:o, s:O, s:O, s:O}", "id", COL("id"),
                          "run_id", COL("run_id"), "status", COL("status"), "phase",
                          COL("phase"), "progress", COL("progress"), "error", COL("error"),
                          "request", req ? req : json_object(), "created_at",
                          COL("created_at"), "started_at", COL("started_at"), "finished_at",
                          COL("finished_at"));
    if (o && with_result) {
        const char *text = json_string_value(COL("result"));
        json_t *res = text ? json_loads(text, 0, NULL) : NULL;
        json_object_set_new(o, "result", res ? res : json_null());
    }
#undef COL
    return o;
}

/* A reference dataset named by `field`: it exists, is ready, has the
 * run's geometry and at least n showers.  Replies and returns 0 if not. */
static int check_dataset(http_request *req, app *a, const char *field, int64_t id,
                         const char *geometry, long long n)
{
    json_t *row = NULL;
    gt_error err = {0};
    int rc = datasets_get(a->db, id, &row, &err);
    if (rc == GT_ENOTFOUND) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, field, "dataset %lld does not exist",
                         (long long)id);
        return 0;
    }
    if (rc) {
        routes_reply_internal(req, &err);
        return 0;
    }
    const char *status = json_string_value(json_object_get(row, "status"));
    const char *g = json_string_value(json_object_get(row, "geometry"));
    json_t *count = json_object_get(row, "n_showers");
    int ok = 0;
    char why[600];
    if (!status || strcmp(status, "ready") != 0) {
        datasets_why_not_ready(row, why, sizeof why);
        http_reply_error(req, 422, HTTP_E_VALIDATION, field, "%s", why);
    } else if (!g || strcmp(g, geometry) != 0)
        http_reply_error(req, 422, HTTP_E_VALIDATION, field,
                         "dataset %lld has geometry %s, the run %s", (long long)id,
                         g ? g : "?", geometry);
    else if (json_is_integer(count) && json_integer_value(count) < n)
        http_reply_error(req, 422, HTTP_E_VALIDATION, "n",
                         "dataset %lld holds %lld showers, fewer than n = %lld", (long long)id,
                         (long long)json_integer_value(count), n);
    else
        ok = 1;
    json_decref(row);
    return ok;
}

/* The run is finished and has its best pair; replies 409 and returns 0
 * otherwise. */
static int run_ready(http_request *req, app *a, int64_t run)
{
    char status[16] = "";
    gt_error err = {0};
    if (runs_status(a->db, run, status, &err) != GT_OK) {
        routes_reply_internal(req, &err);
        return 0;
    }
    if (strcmp(status, "succeeded") != 0) {
        http_reply_error(req, 409, HTTP_E_CONFLICT, NULL,
                         "run %lld is %s: only a run that succeeded is evaluated",
                         (long long)run, status);
        return 0;
    }
    int64_t version = 0;
    int rc = runs_best_pair(a->db, run, &version, &err);
    if (rc == GT_ENOTFOUND)
        http_reply_error(req, 409, HTTP_E_CONFLICT, NULL,
                         "run %lld has no best checkpoint of both stages", (long long)run);
    else if (rc)
        routes_reply_internal(req, &err);
    return rc == GT_OK;
}

static void reply_evaluation(http_request *req, app *a, int64_t run, int64_t id,
                             unsigned status, int with_result)
{
    json_t *row = NULL;
    gt_error err = {0};
    int rc = evaluations_get(a->db, run, id, with_result, &row, &err);
    if (routes_reply_rc(req, rc, &err, 404, 0, NULL))
        http_reply_json(req, status, evaluation_object(row, with_result));
    json_decref(row);
}

void route_evaluations_create(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t run = routes_path_run(req, a->db);
    if (!run)
        return;
    eval_body_fault fault;
    json_t *norm = eval_body_normalise(http_body_json(req), a->cfg.max_showers, &fault);
    if (!norm) {
        http_reply_error(req, fault.status, fault.status == 422 ? HTTP_E_VALIDATION
                                                                : HTTP_E_INTERNAL,
                         fault.status == 422 ? fault.field : NULL, "%s", fault.message);
        return;
    }
    model_config cfg;
    gt_error err = {0};
    long long n = json_integer_value(json_object_get(norm, "n"));
    int64_t ds = json_integer_value(json_object_get(norm, "dataset_id"));
    int64_t r2 = json_integer_value(json_object_get(norm, "ref2_dataset_id"));
    if (!run_ready(req, a, run)) {
        json_decref(norm);
        return;
    }
    if (runs_read_config(a->db, run, &cfg, &err) != GT_OK) {
        json_decref(norm);
        routes_reply_internal(req, &err);
        return;
    }
    if (!check_dataset(req, a, "dataset_id", ds, cfg.geometry, n) ||
        (r2 && !check_dataset(req, a, "ref2_dataset_id", r2, cfg.geometry, n))) {
        json_decref(norm);
        return;
    }
    /* each evaluation samples and trains a classifier on the one worker:
     * a client may not queue them without bound */
    long long active = evaluations_count(a->db, "queued") + evaluations_count(a->db, "running");
    if (active >= a->cfg.max_active_evaluations) {
        json_decref(norm);
        http_reply_error_retry(req, 429, HTTP_E_RATE_LIMITED, 30,
                               "%lld evaluations are queued or running, the most this server "
                               "takes (--max-active-evaluations): retry when one has finished",
                               active);
        return;
    }
    char *text = json_dumps(norm, JSON_COMPACT);
    evaluations_new e = {run, ds, r2, n,
                         (uint64_t)json_integer_value(json_object_get(norm, "seed")), text};
    int64_t id = 0;
    int rc = text ? evaluations_create(a->db, &e, &id, &err)
                  : gt_error_set(&err, GT_ENOMEM, "out of memory");
    free(text);
    json_decref(norm);
    if (rc) {
        routes_reply_internal(req, &err);
        return;
    }
    /* The reply is the evaluation as queued: the worker, kicked after the
     * read, may already be at it by the time the reply is sent. */
    json_t *row = NULL;
    rc = evaluations_get(a->db, run, id, 0, &row, &err);
    evaluations_worker_kick(a->evaluations);
    if (rc) {
        routes_reply_internal(req, &err);
        return;
    }
    json_t *o = evaluation_object(row, 0);
    json_decref(row);
    if (o) {
        json_object_set_new(o, "status", json_string("queued"));
        json_object_set_new(o, "phase", json_null());
        json_object_set_new(o, "progress", json_real(0));
        json_object_set_new(o, "started_at", json_null());
    }
    http_reply_json(req, 202, o);
}

void route_evaluations_list(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t run = routes_path_run(req, a->db);
    if (!run)
        return;
    long long limit = routes_query_ll(req, "limit", 50, 1, 200);
    if (limit < 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "limit", "limit must be 1 to 200");
        return;
    }
    json_t *rows = NULL;
    gt_error err = {0};
    if (evaluations_list(a->db, run, (int)limit, &rows, &err) != GT_OK) {
        routes_reply_internal(req, &err);
        return;
    }
    json_t *items = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
        json_array_append_new(items, evaluation_object(row, 0));
    json_decref(rows);
    http_reply_json(req, 200, json_pack("{s:o}", "items", items));
}

void route_evaluations_get(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t run = routes_path_run(req, a->db);
    if (!run)
        return;
    int64_t id = routes_parse_id(http_param(req, "eid"));
    if (!id) {
        http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL, "evaluation '%s' does not exist",
                         http_param(req, "eid"));
        return;
    }
    reply_evaluation(req, a, run, id, 200, 1);
}
