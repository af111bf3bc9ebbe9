/* ingest_check: a batch's body checked before anything is written
 * (ingest_check.h), apart from the database, so that the fuzz target
 * (fuzz_ingest_batch) links it alone.  Every refusal names the member at
 * fault. */
#include "ingest_check.h"

#include <stdio.h>
#include <string.h>

static int bad(char *field, size_t cap, gt_error *err, const char *where, const char *msg)
{
    snprintf(field, cap, "%s", where);
    return gt_error_set(err, GT_EINVAL, "%s: %s", where, msg);
}

int ingest_stage(const char *s)
{
    return !s ? 0 : strcmp(s, "energy") == 0 ? 1 : strcmp(s, "shower") == 0 ? 2 : 0;
}

/* Metric names as the local trainer writes them: loss, grad_norm, lr,
 * samples_per_s, load_3, ... */
static int name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64)
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-' || *p == '.'))
            return 0;
    return 1;
}

/* Only the keys listed; the first other one is named. */
static int only_keys(const json_t *o, const char *const *keys, const char *where, char *field,
                     size_t cap, gt_error *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        int ok = 0;
        for (const char *const *p = keys; *p && !ok; p++)
            ok = strcmp(*p, k) == 0;
        if (!ok) {
            char f[160];
            snprintf(f, sizeof f, "%s%s%s", where, where[0] ? "." : "", k);
            return bad(field, cap, err, f, "unknown key");
        }
    }
    return GT_OK;
}

#define STEP_MAX 1000000000000LL

static int check_step(const json_t *v, const char *where, char *field, size_t cap,
                      gt_error *err)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > STEP_MAX)
        return bad(field, cap, err, where, "must be an integer from 0 to 10^12");
    return GT_OK;
}

/* A value: a number, or null for one that was not finite. */
static int check_number_or_null(const json_t *v, const char *where, char *field, size_t cap,
                                gt_error *err)
{
    if (!v || !(json_is_number(v) || json_is_null(v)))
        return bad(field, cap, err, where, "must be a number or null (not finite)");
    return GT_OK;
}

static int check_time(const json_t *v, const char *where, char *field, size_t cap,
                      gt_error *err)
{
    if (v && !(json_is_number(v) && json_number_value(v) > 0 && json_number_value(v) < 1e11))
        return bad(field, cap, err, where, "must be unix seconds");
    return GT_OK;
}

int ingest_batch_check(const json_t *body, char *field, size_t cap, gt_error *err)
{
    static const char *const top[] = {"metrics", "validations", "progress", "status", "error",
                                      NULL};
    static const char *const mkeys[] = {"stage", "name", "step", "value", "time", NULL};
    static const char *const vkeys[] = {"stage", "step", "loss", "n_samples", "time", NULL};
    static const char *const pkeys[] = {"stage", "step", "done_steps", NULL};
    char f[160];
    if (!json_is_object(body))
        return bad(field, cap, err, "", "the batch must be a JSON object");
    int rc = only_keys(body, top, "", field, cap, err);
    if (rc)
        return rc;
    const json_t *m = json_object_get(body, "metrics");
    if (m && !json_is_array(m))
        return bad(field, cap, err, "metrics", "must be an array");
    if (json_array_size(m) > INGEST_MAX_METRICS) {
        snprintf(field, cap, "metrics");
        return gt_error_set(err, GT_EINVAL,
                            "metrics: %zu in one batch, at most %d: send them in several",
                            json_array_size(m), INGEST_MAX_METRICS);
    }
    size_t i;
    json_t *e;
    json_array_foreach(m, i, e) {
        snprintf(f, sizeof f, "metrics[%zu]", i);
        if (!json_is_object(e))
            return bad(field, cap, err, f, "must be an object {stage, name, step, value}");
        if ((rc = only_keys(e, mkeys, f, field, cap, err)))
            return rc;
        snprintf(f, sizeof f, "metrics[%zu].stage", i);
        if (!ingest_stage(json_string_value(json_object_get(e, "stage"))))
            return bad(field, cap, err, f, "must be \"energy\" or \"shower\"");
        snprintf(f, sizeof f, "metrics[%zu].name", i);
        if (!name_ok(json_string_value(json_object_get(e, "name"))))
            return bad(field, cap, err, f, "must be 1 to 64 of A-Z a-z 0-9 _ - .");
        snprintf(f, sizeof f, "metrics[%zu].step", i);
        if ((rc = check_step(json_object_get(e, "step"), f, field, cap, err)))
            return rc;
        snprintf(f, sizeof f, "metrics[%zu].value", i);
        if ((rc = check_number_or_null(json_object_get(e, "value"), f, field, cap, err)))
            return rc;
        snprintf(f, sizeof f, "metrics[%zu].time", i);
        if ((rc = check_time(json_object_get(e, "time"), f, field, cap, err)))
            return rc;
    }
    const json_t *v = json_object_get(body, "validations");
    if (v && !json_is_array(v))
        return bad(field, cap, err, "validations", "must be an array");
    if (json_array_size(v) > INGEST_MAX_VALIDATIONS) {
        snprintf(field, cap, "validations");
        return gt_error_set(err, GT_EINVAL, "validations: %zu in one batch, at most %d",
                            json_array_size(v), INGEST_MAX_VALIDATIONS);
    }
    json_array_foreach(v, i, e) {
        snprintf(f, sizeof f, "validations[%zu]", i);
        if (!json_is_object(e))
            return bad(field, cap, err, f, "must be an object {stage, step, loss, n_samples}");
        if ((rc = only_keys(e, vkeys, f, field, cap, err)))
            return rc;
        snprintf(f, sizeof f, "validations[%zu].stage", i);
        if (!ingest_stage(json_string_value(json_object_get(e, "stage"))))
            return bad(field, cap, err, f, "must be \"energy\" or \"shower\"");
        snprintf(f, sizeof f, "validations[%zu].step", i);
        if ((rc = check_step(json_object_get(e, "step"), f, field, cap, err)))
            return rc;
        snprintf(f, sizeof f, "validations[%zu].loss", i);
        if ((rc = check_number_or_null(json_object_get(e, "loss"), f, field, cap, err)))
            return rc;
        const json_t *ns = json_object_get(e, "n_samples");
        snprintf(f, sizeof f, "validations[%zu].n_samples", i);
        if (ns && (!json_is_integer(ns) || json_integer_value(ns) < 1 ||
                   json_integer_value(ns) > (1 << 24)))
            return bad(field, cap, err, f, "must be an integer from 1 to 2^24");
        snprintf(f, sizeof f, "validations[%zu].time", i);
        if ((rc = check_time(json_object_get(e, "time"), f, field, cap, err)))
            return rc;
    }
    const json_t *p = json_object_get(body, "progress");
    if (p) {
        if (!json_is_object(p))
            return bad(field, cap, err, "progress", "must be an object {stage, step, done_steps}");
        if ((rc = only_keys(p, pkeys, "progress", field, cap, err)))
            return rc;
        if (!ingest_stage(json_string_value(json_object_get(p, "stage"))))
            return bad(field, cap, err, "progress.stage", "must be \"energy\" or \"shower\"");
        if ((rc = check_step(json_object_get(p, "step"), "progress.step", field, cap, err)) ||
            (rc = check_step(json_object_get(p, "done_steps"), "progress.done_steps", field, cap,
                             err)))
            return rc;
    }
    const json_t *st = json_object_get(body, "status");
    if (st) {
        const char *s = json_string_value(st);
        if (!s || (strcmp(s, "succeeded") != 0 && strcmp(s, "failed") != 0))
            return bad(field, cap, err, "status", "must be \"succeeded\" or \"failed\" (how"
                       " training ended)");
    }
    const json_t *er = json_object_get(body, "error");
    if (er && (!json_is_string(er) || json_string_length(er) > 2000))
        return bad(field, cap, err, "error", "must be a string of at most 2000 bytes");
    if (er && !(st && strcmp(json_string_value(st), "failed") == 0))
        return bad(field, cap, err, "error", "only with status \"failed\"");
    return GT_OK;
}
