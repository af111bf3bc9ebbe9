/* routes_evaluations: /v1/runs/{id}/evaluations.  A POST is validated
 * here and only queued (the evaluations worker generates and compares);
 * the reads shape the table's rows.  Contracts: api/openapi.json. */
#include "routes_evaluations.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "datasets.h"
#include "evaluations.h"
#include "routes.h"
#include "runs.h"

#define EVAL_MIN_SHOWERS 20        /* the classifier needs 10 rows a split */

static const char *const metric_names[] = {"separation_power", "fpd_kpd", "classifier_high",
                                           "classifier_low"};

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

/* The geometry a run trained on (its config's dataset.geometry). */
static int run_geometry(app *a, int64_t run, char *out, size_t size, gt_error *err)
{
    char *text = NULL;
    int rc = runs_config(a->db, run, &text, err);
    if (rc)
        return rc;
    json_t *cfg = json_loads(text, 0, NULL);
    free(text);
    const char *g = json_string_value(json_object_get(json_object_get(cfg, "dataset"),
                                                      "geometry"));
    snprintf(out, size, "%s", g ? g : "dataset_2");
    json_decref(cfg);
    return GT_OK;
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

/* A positive integer id, or 0 after a 422 naming the field. */
static int64_t body_id(http_request *req, json_t *v, const char *field)
{
    if (!json_is_integer(v) || json_integer_value(v) < 1) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, field, "%s must be a dataset id", field);
        return 0;
    }
    return json_integer_value(v);
}

/* An optional integer in [lo, hi] (def when absent); -1 after a 422. */
static long long body_int(http_request *req, json_t *obj, const char *key, const char *field,
                          long long def, long long lo, long long hi)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return def;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, field, "%s must be an integer in "
                         "[%lld, %lld]", field, lo, hi);
        return -1;
    }
    return json_integer_value(v);
}

/* The request with every default filled, or NULL after a 422. */
static json_t *normalise(http_request *req, app *a, json_t *body)
{
    if (!json_is_object(body)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "", "the body must be an object");
        return NULL;
    }
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        if (strcmp(key, "dataset_id") && strcmp(key, "ref2_dataset_id") && strcmp(key, "n") &&
            strcmp(key, "seed") && strcmp(key, "metrics") && strcmp(key, "classifier")) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, key, "unknown field '%s'", key);
            return NULL;
        }
    }
    json_t *jds = json_object_get(body, "dataset_id"), *jr2 = json_object_get(body,
                                                                                "ref2_dataset_id");
    if (!jds) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "dataset_id",
                         "dataset_id (the reference dataset) is required");
        return NULL;
    }
    int64_t ds = body_id(req, jds, "dataset_id"), r2 = 0;
    if (!ds)
        return NULL;
    if (jr2 && !json_is_null(jr2)) {
        if (!(r2 = body_id(req, jr2, "ref2_dataset_id")))
            return NULL;
        if (r2 == ds) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "ref2_dataset_id",
                             "ref2_dataset_id must name another dataset than dataset_id");
            return NULL;
        }
    }
    long long n = body_int(req, body, "n", "n",
                           a->cfg.max_showers < 2000 ? a->cfg.max_showers : 2000,
                           EVAL_MIN_SHOWERS, a->cfg.max_showers);
    long long seed = body_int(req, body, "seed", "seed", 1, 0, INT64_MAX);
    if (n < 0 || seed < 0)
        return NULL;
    json_t *metrics = json_object_get(body, "metrics"), *norm_metrics = json_array();
    if (metrics && (!json_is_array(metrics) || json_array_size(metrics) == 0)) {
        json_decref(norm_metrics);
        http_reply_error(req, 422, HTTP_E_VALIDATION, "metrics",
                         "metrics must be a non-empty array of separation_power, fpd_kpd,"
                         " classifier_high, classifier_low");
        return NULL;
    }
    /* in the documented order, each once, whatever order they came in */
    for (size_t k = 0; k < 4; k++) {
        int want = !metrics;
        size_t i;
        json_array_foreach(metrics, i, v)
            want |= json_is_string(v) && !strcmp(json_string_value(v), metric_names[k]);
        if (want)
            json_array_append_new(norm_metrics, json_string(metric_names[k]));
    }
    size_t i;
    json_array_foreach(metrics, i, v) {
        int known = 0;
        for (size_t k = 0; k < 4; k++)
            known |= json_is_string(v) && !strcmp(json_string_value(v), metric_names[k]);
        if (!known) {
            char field[32];
            snprintf(field, sizeof field, "metrics[%zu]", i);
            json_decref(norm_metrics);
            http_reply_error(req, 422, HTTP_E_VALIDATION, field,
                             "a metric is separation_power, fpd_kpd, classifier_high or"
                             " classifier_low");
            return NULL;
        }
    }
    json_t *cls = json_object_get(body, "classifier");
    if (cls && !json_is_object(cls)) {
        json_decref(norm_metrics);
        http_reply_error(req, 422, HTTP_E_VALIDATION, "classifier",
                         "classifier must be {\"hidden\", \"depth\", \"epochs\"}");
        return NULL;
    }
    json_object_foreach(cls, key, v) {
        if (strcmp(key, "hidden") && strcmp(key, "depth") && strcmp(key, "epochs")) {
            char field[64];
            snprintf(field, sizeof field, "classifier.%.40s", key);
            json_decref(norm_metrics);
            http_reply_error(req, 422, HTTP_E_VALIDATION, field, "unknown field '%s'", field);
            return NULL;
        }
    }
    /* `giant eval`'s defaults (model_classify.h) */
    long long hidden = body_int(req, cls, "hidden", "classifier.hidden", 512, 1, 4096);
    long long depth = hidden < 0 ? -1 : body_int(req, cls, "depth", "classifier.depth", 3, 1, 8);
    long long epochs =
        depth < 0 ? -1 : body_int(req, cls, "epochs", "classifier.epochs", 50, 1, 500);
    if (hidden < 0 || depth < 0 || epochs < 0) {
        json_decref(norm_metrics);
        return NULL;
    }
    return json_pack("{s:I, s:o, s:I, s:I, s:o, s:{s:I, s:I, s:I}}", "dataset_id",
                     (json_int_t)ds, "ref2_dataset_id",
                     r2 ? json_integer(r2) : json_null(), "n", (json_int_t)n, "seed",
                     (json_int_t)seed, "metrics", norm_metrics, "classifier", "hidden",
                     (json_int_t)hidden, "depth", (json_int_t)depth, "epochs",
                     (json_int_t)epochs);
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
    if (rc == GT_OK)
        http_reply_json(req, status, evaluation_object(row, with_result));
    else if (rc == GT_ENOTFOUND)
        http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL, "%s", err.message);
    else
        routes_reply_internal(req, &err);
    json_decref(row);
}

void route_evaluations_create(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t run = routes_path_run(req, a->db);
    if (!run)
        return;
    json_t *norm = normalise(req, a, http_body_json(req));
    if (!norm)
        return;
    char geometry[64];
    gt_error err = {0};
    long long n = json_integer_value(json_object_get(norm, "n"));
    int64_t ds = json_integer_value(json_object_get(norm, "dataset_id"));
    int64_t r2 = json_integer_value(json_object_get(norm, "ref2_dataset_id"));
    if (!run_ready(req, a, run)) {
        json_decref(norm);
        return;
    }
    if (run_geometry(a, run, geometry, sizeof geometry, &err) != GT_OK) {
        json_decref(norm);
        routes_reply_internal(req, &err);
        return;
    }
    if (!check_dataset(req, a, "dataset_id", ds, geometry, n) ||
        (r2 && !check_dataset(req, a, "ref2_dataset_id", r2, geometry, n))) {
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
    evaluations_kick(a->evaluations);
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
