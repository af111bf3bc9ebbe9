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

/* What a member of an object in a batch must be. */
typedef enum {
    M_STAGE,            /* "energy" or "shower" */
    M_NAME,             /* a metric's name (name_ok) */
    M_STEP,             /* check_step */
    M_NUMBER,           /* check_number_or_null */
    M_SAMPLES,          /* absent, or an integer from 1 to 2^24 */
    M_TIME,             /* check_time */
} member_kind;

/* One member; where names it ("metrics[3].step"). */
static int check_member(const json_t *v, member_kind kind, const char *where, char *field,
                        size_t cap, gt_error *err)
{
    switch (kind) {
    case M_STAGE:
        if (!ingest_stage(json_string_value(v)))
            return bad(field, cap, err, where, "must be \"energy\" or \"shower\"");
        return GT_OK;
    case M_NAME:
        if (!name_ok(json_string_value(v)))
            return bad(field, cap, err, where, "must be 1 to 64 of A-Z a-z 0-9 _ - .");
        return GT_OK;
    case M_STEP:
        return check_step(v, where, field, cap, err);
    case M_NUMBER:
        return check_number_or_null(v, where, field, cap, err);
    case M_SAMPLES:
        if (v && (!json_is_integer(v) || json_integer_value(v) < 1 ||
                  json_integer_value(v) > (1 << 24)))
            return bad(field, cap, err, where, "must be an integer from 1 to 2^24");
        return GT_OK;
    case M_TIME:
        return check_time(v, where, field, cap, err);
    }
    return GT_OK;
}

/* An object of only the members keys names (NULL-terminated), each of
 * the kind kinds gives it, checked in that order: the first fault is
 * named.  where names the object ("metrics[3]", "progress"); shape is the
 * refusal of a value that is no object. */
static int check_object(const json_t *o, const char *const *keys, const member_kind *kinds,
                        const char *where, const char *shape, char *field, size_t cap,
                        gt_error *err)
{
    if (!json_is_object(o))
        return bad(field, cap, err, where, shape);
    int rc = only_keys(o, keys, where, field, cap, err);
    for (size_t k = 0; rc == GT_OK && keys[k]; k++) {
        char f[160];
        snprintf(f, sizeof f, "%s.%s", where, keys[k]);
        rc = check_member(json_object_get(o, keys[k]), kinds[k], f, field, cap, err);
    }
    return rc;
}

/* The list body[list], when there: an array of at most max objects, each
 * checked by check_object.  hint ends the refusal of a longer one. */
static int check_list(const json_t *body, const char *list, size_t max, const char *hint,
                      const char *const *keys, const member_kind *kinds, const char *shape,
                      char *field, size_t cap, gt_error *err)
{
    const json_t *a = json_object_get(body, list);
    if (a && !json_is_array(a))
        return bad(field, cap, err, list, "must be an array");
    if (json_array_size(a) > max) {
        snprintf(field, cap, "%s", list);
        return gt_error_set(err, GT_EINVAL, "%s: %zu in one batch, at most %zu%s", list,
                            json_array_size(a), max, hint);
    }
    size_t i;
    json_t *e;
    json_array_foreach(a, i, e) {
        char f[160];
        snprintf(f, sizeof f, "%s[%zu]", list, i);
        int rc = check_object(e, keys, kinds, f, shape, field, cap, err);
        if (rc)
            return rc;
    }
    return GT_OK;
}

int ingest_batch_check(const json_t *body, char *field, size_t cap, gt_error *err)
{
    static const char *const top[] = {"metrics", "validations", "progress", "status", "error",
                                      NULL};
    static const char *const mkeys[] = {"stage", "name", "step", "value", "time", NULL};
    static const member_kind mkinds[] = {M_STAGE, M_NAME, M_STEP, M_NUMBER, M_TIME};
    static const char *const vkeys[] = {"stage", "step", "loss", "n_samples", "time", NULL};
    static const member_kind vkinds[] = {M_STAGE, M_STEP, M_NUMBER, M_SAMPLES, M_TIME};
    static const char *const pkeys[] = {"stage", "step", "done_steps", NULL};
    static const member_kind pkinds[] = {M_STAGE, M_STEP, M_STEP};
    if (!json_is_object(body))
        return bad(field, cap, err, "", "the batch must be a JSON object");
    int rc = only_keys(body, top, "", field, cap, err);
    if (rc ||
        (rc = check_list(body, "metrics", INGEST_MAX_METRICS, ": send them in several", mkeys,
                         mkinds, "must be an object {stage, name, step, value}", field, cap,
                         err)) ||
        (rc = check_list(body, "validations", INGEST_MAX_VALIDATIONS, "", vkeys, vkinds,
                         "must be an object {stage, step, loss, n_samples}", field, cap, err)))
        return rc;
    const json_t *p = json_object_get(body, "progress");
    if (p && (rc = check_object(p, pkeys, pkinds, "progress",
                                "must be an object {stage, step, done_steps}", field, cap, err)))
        return rc;
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
