/* fuzz_ingest_batch: the body of a Slurm job's batch (POST
 * /v1/runs/{id}/ingest), checked by ingest_batch_check as the route does.
 * An accepted batch must hold what ingest_batch_write reads without
 * looking again (ingest.h): an object of metrics, validations, progress,
 * status and error only; at most INGEST_MAX_METRICS metrics and
 * INGEST_MAX_VALIDATIONS validations, each an object of its known keys
 * with a stage ("energy" or "shower"), a metric's name 1 to 64 of
 * [A-Za-z0-9_.-], steps integers in [0, 10^12], a value or loss that is a
 * number or null, a time that is absent or unix seconds, n_samples absent
 * or in [1, 2^24] (the writer casts it to int); progress with a stage and
 * two steps; status "succeeded" or "failed", and an error string of at
 * most 2000 bytes only beside "failed".  A refused one must be GT_EINVAL
 * with a message that starts with the field, and a field that is "" when
 * the body is no object (or has the unknown key ""), or a path into the
 * body ("metrics[3].step") whose members are there, the last possibly a
 * required one missing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz_json.h"
#include "ingest_check.h"

#define FIELD_CAP 160   /* the route's */
#define STEP_MAX 1000000000000LL

static int only(json_t *o, const char *const *keys)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        int ok = 0;
        for (const char *const *p = keys; *p; p++)
            ok |= !strcmp(*p, k);
        if (!ok)
            return 0;
    }
    return 1;
}

static int is_stage(json_t *v)
{
    const char *s = json_string_value(v);
    return s && (!strcmp(s, "energy") || !strcmp(s, "shower"));
}

static int is_step(json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= STEP_MAX;
}

static int is_value(json_t *v)
{
    return json_is_number(v) || json_is_null(v);
}

static int is_time(json_t *v)
{
    return !v || (json_is_number(v) && json_number_value(v) > 0 && json_number_value(v) < 1e11);
}

static int is_name(json_t *v)
{
    const char *s = json_string_value(v);
    size_t n = s ? strlen(s) : 0;
    return n >= 1 && n <= 64 &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

static void check_metric(json_t *e)
{
    static const char *const keys[] = {"stage", "name", "step", "value", "time", NULL};
    if (!json_is_object(e) || !only(e, keys) || !is_stage(json_object_get(e, "stage")) ||
        !is_name(json_object_get(e, "name")) || !is_step(json_object_get(e, "step")) ||
        !is_value(json_object_get(e, "value")) || !is_time(json_object_get(e, "time")))
        abort();
}

static void check_validation(json_t *e)
{
    static const char *const keys[] = {"stage", "step", "loss", "n_samples", "time", NULL};
    json_t *ns = json_object_get(e, "n_samples");
    if (!json_is_object(e) || !only(e, keys) || !is_stage(json_object_get(e, "stage")) ||
        !is_step(json_object_get(e, "step")) || !is_value(json_object_get(e, "loss")) ||
        !is_time(json_object_get(e, "time")))
        abort();
    if (ns && !(json_is_integer(ns) && json_integer_value(ns) >= 1 &&
                json_integer_value(ns) <= (1 << 24)))
        abort();
}

static void check_accepted(json_t *body)
{
    static const char *const top[] = {"metrics", "validations", "progress", "status", "error",
                                      NULL};
    static const char *const pkeys[] = {"stage", "step", "done_steps", NULL};
    if (!json_is_object(body) || !only(body, top))
        abort();
    json_t *m = json_object_get(body, "metrics"), *v = json_object_get(body, "validations");
    if ((m && !json_is_array(m)) || json_array_size(m) > INGEST_MAX_METRICS ||
        (v && !json_is_array(v)) || json_array_size(v) > INGEST_MAX_VALIDATIONS)
        abort();
    size_t i;
    json_t *e;
    json_array_foreach(m, i, e) check_metric(e);
    json_array_foreach(v, i, e) check_validation(e);
    json_t *p = json_object_get(body, "progress");
    if (p && (!json_is_object(p) || !only(p, pkeys) || !is_stage(json_object_get(p, "stage")) ||
              !is_step(json_object_get(p, "step")) || !is_step(json_object_get(p, "done_steps"))))
        abort();
    const char *status = json_string_value(json_object_get(body, "status"));
    json_t *st = json_object_get(body, "status"), *er = json_object_get(body, "error");
    if (st && !(status && (!strcmp(status, "succeeded") || !strcmp(status, "failed"))))
        abort();
    if (er && !(json_is_string(er) && json_string_length(er) <= 2000 && status &&
                !strcmp(status, "failed")))
        abort();
}

/* The members a batch must have: a fault may name one that is missing. */
static int required(const char *key)
{
    static const char *const keys[] = {"stage", "name", "step", "value", "loss", "done_steps",
                                       NULL};
    for (const char *const *p = keys; *p; p++)
        if (!strcmp(*p, key))
            return 1;
    return 0;
}

static int in_array(json_t *a, const char *path);

/* 1 when path names a member of obj: a key (dots and brackets and all),
 * inside an entry (nested) a required key that is missing, or a key and a
 * path into its value (".key" into an object, "[i]" into an array). */
static int in_object(json_t *obj, const char *path, int nested)
{
    if (!json_is_object(obj))
        return 0;
    if (json_object_get(obj, path) || (nested && required(path)))
        return 1;
    for (const char *s = path + strcspn(path, ".["); *s; s += 1 + strcspn(s + 1, ".[")) {
        char head[FIELD_CAP];
        size_t n = (size_t)(s - path);
        if (n >= sizeof head)
            break;
        memcpy(head, path, n);
        head[n] = '\0';
        json_t *m = json_object_get(obj, head);
        if (m && (*s == '.' ? in_object(m, s + 1, 1) : in_array(m, s)))
            return 1;
    }
    return 0;
}

/* path starts with "[i]": element i is there, and the rest names it or a
 * member of it. */
static int in_array(json_t *a, const char *path)
{
    char *end;
    unsigned long long i = strtoull(path + 1, &end, 10);
    if (!json_is_array(a) || end == path + 1 || *end != ']' || i >= json_array_size(a))
        return 0;
    if (!end[1])
        return 1;
    return end[1] == '.' && in_object(json_array_get(a, (size_t)i), end + 2, 1);
}

static void check_refused(json_t *body, const char *field, const gt_error *err)
{
    size_t len = strlen(field);
    if (err->code != GT_EINVAL || !err->message[0] || strncmp(err->message, field, len))
        abort();
    if (!len) {
        /* the body as a whole, or the unknown key "" */
        if (json_is_object(body) && !json_object_get(body, ""))
            abort();
        return;
    }
    if (len == FIELD_CAP - 1) {
        /* cut to the field's size: its first key at least is the body's */
        if (!fuzz_json_names_key(body, field, ".["))
            abort();
        return;
    }
    if (!in_object(body, field, 0))
        abort();
}

static void check(json_t *body, void *ctx)
{
    (void)ctx;
    char field[FIELD_CAP] = "";
    gt_error err = {0};
    int rc = ingest_batch_check(body, field, sizeof field, &err);
    if (rc == GT_OK)
        check_accepted(body);
    else if (rc != GT_EINVAL)
        abort();
    else
        check_refused(body, field, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_json_run(data, size, check, NULL);
}
