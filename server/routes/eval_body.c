/* eval_body: an evaluation request's body, checked and normalised (see
 * eval_body.h).  Every refusal names the key at fault. */
#include "eval_body.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "model_classify.h"

const char *const eval_body_metrics[EVAL_BODY_N_METRICS] = {
    "separation_power",      "fpd_kpd",   "classifier_high", "classifier_low",
    "classifier_trees_high", "classifier_trees_low", "classifier_breakdown"};

/* body_refuse where the request is returned: NULL, with the fault filled
 * (every refusal here is a 422). */
#define REFUSE(f, ...) (body_refuse((f), 422, __VA_ARGS__), (json_t *)NULL)

/* A positive integer id, or 0 with the fault set. */
static int64_t body_id(eval_body_fault *f, json_t *v, const char *field)
{
    if (!json_is_integer(v) || json_integer_value(v) < 1) {
        body_refuse(f, 422, field, "%s must be a dataset id", field);
        return 0;
    }
    return json_integer_value(v);
}

/* An optional integer in [lo, hi] (def when absent); -1 with the fault
 * set. */
static long long body_int(eval_body_fault *f, json_t *obj, const char *key, const char *field,
                          long long def, long long lo, long long hi)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return def;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        body_refuse(f, 422, field, "%s must be an integer in [%lld, %lld]", field, lo, hi);
        return -1;
    }
    return json_integer_value(v);
}

static int known_metric(json_t *v)
{
    for (size_t k = 0; k < EVAL_BODY_N_METRICS; k++)
        if (json_is_string(v) && !strcmp(json_string_value(v), eval_body_metrics[k]))
            return 1;
    return 0;
}

json_t *eval_body_normalise(const json_t *cbody, long max_showers, eval_body_fault *f)
{
    memset(f, 0, sizeof *f);
    json_t *body = (json_t *)cbody;       /* Jansson's getters take no const */
    static const char *const known[] = {"dataset_id", "ref2_dataset_id", "n", "seed",
                                        "metrics", "classifier", NULL};
    /* 48: the key cut to 47 bytes, as this API has always named it */
    if (!body_known_keys(body, known, f, 48, "unknown field '%.100s'"))
        return NULL;
    const char *key;
    json_t *v;
    json_t *jds = json_object_get(body, "dataset_id");
    json_t *jr2 = json_object_get(body, "ref2_dataset_id");
    if (!jds)
        return REFUSE(f, "dataset_id", "dataset_id (the reference dataset) is required");
    int64_t ds = body_id(f, jds, "dataset_id"), r2 = 0;
    if (!ds)
        return NULL;
    if (jr2 && !json_is_null(jr2)) {
        if (!(r2 = body_id(f, jr2, "ref2_dataset_id")))
            return NULL;
        if (r2 == ds)
            return REFUSE(f, "ref2_dataset_id",
                          "ref2_dataset_id must name another dataset than dataset_id");
    }
    long long n = body_int(f, body, "n", "n", max_showers < 2000 ? max_showers : 2000,
                           EVAL_BODY_MIN_SHOWERS, max_showers);
    long long seed = n < 0 ? -1 : body_int(f, body, "seed", "seed", 1, 0, INT64_MAX);
    if (n < 0 || seed < 0)
        return NULL;
    json_t *metrics = json_object_get(body, "metrics");
    if (metrics && (!json_is_array(metrics) || json_array_size(metrics) == 0))
        return REFUSE(f, "metrics",
                      "metrics must be a non-empty array of " EVAL_BODY_METRIC_LIST);
    size_t i;
    json_array_foreach(metrics, i, v) {
        if (!known_metric(v)) {
            char field[32];
            snprintf(field, sizeof field, "metrics[%zu]", i);
            return REFUSE(f, field, "a metric is one of " EVAL_BODY_METRIC_LIST);
        }
    }
    json_t *cls = json_object_get(body, "classifier");
    if (cls && !json_is_object(cls))
        return REFUSE(f, "classifier",
                      "classifier must be {\"hidden\", \"depth\", \"epochs\", \"repeats\"}");
    json_object_foreach(cls, key, v) {
        if (strcmp(key, "hidden") && strcmp(key, "depth") && strcmp(key, "epochs") &&
            strcmp(key, "repeats")) {
            char field[64];
            snprintf(field, sizeof field, "classifier.%.40s", key);
            return REFUSE(f, field, "unknown field '%s'", field);
        }
    }
    /* `giant eval`'s defaults (model_classify.h) */
    long long hidden = body_int(f, cls, "hidden", "classifier.hidden", 512, 1, 4096);
    long long depth = hidden < 0 ? -1 : body_int(f, cls, "depth", "classifier.depth", 3, 1, 8);
    long long epochs =
        depth < 0 ? -1 : body_int(f, cls, "epochs", "classifier.epochs", 50, 1, 500);
    long long repeats = epochs < 0 ? -1
                                   : body_int(f, cls, "repeats", "classifier.repeats", 1, 1,
                                              MODEL_CLASSIFY_MAX_REPEATS);
    if (hidden < 0 || depth < 0 || epochs < 0 || repeats < 0)
        return NULL;
    /* in the documented order, each once, whatever order they came in */
    json_t *norm_metrics = json_array();
    for (size_t k = 0; norm_metrics && k < EVAL_BODY_N_METRICS; k++) {
        /* no list: every metric but the breakdown, which trains the
         * strongest classifier a dozen times more */
        int want = !metrics && strcmp(eval_body_metrics[k], "classifier_breakdown");
        json_array_foreach(metrics, i, v)
            want |= json_is_string(v) && !strcmp(json_string_value(v), eval_body_metrics[k]);
        if (want)
            json_array_append_new(norm_metrics, json_string(eval_body_metrics[k]));
    }
    json_t *out = norm_metrics
                      ? json_pack("{s:I, s:o, s:I, s:I, s:o, s:{s:I, s:I, s:I, s:I}}", "dataset_id",
                                  (json_int_t)ds, "ref2_dataset_id",
                                  r2 ? json_integer(r2) : json_null(), "n", (json_int_t)n,
                                  "seed", (json_int_t)seed, "metrics", norm_metrics,
                                  "classifier", "hidden", (json_int_t)hidden, "depth",
                                  (json_int_t)depth, "epochs", (json_int_t)epochs, "repeats",
                                  (json_int_t)repeats)
                      : NULL;
    if (!out) {
        f->status = 500;
        snprintf(f->message, sizeof f->message, "out of memory");
    }
    return out;
}
