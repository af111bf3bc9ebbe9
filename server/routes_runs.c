/* routes_runs: /v1/runs and everything under it (metrics, events,
 * checkpoints, samples).  Training and sampling run on their workers
 * (sched, sampling); these handlers only read and write the database and
 * queue work.  Contracts: api/openapi.json. */
#include "routes_runs.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "app.h"
#include "datasets.h"
#include "calo_h5.h"
#include "geo.h"
#include "log.h"
#include "model_config.h"
#include "model_data.h"
#include "model_run.h"
#include "runs.h"
#include "sampling.h"
#include "sched.h"
#include "synth.h"

/* ---------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------- */

/* A positive decimal id, or 0. */
static int64_t parse_id(const char *s)
{
    if (!s || !*s || strlen(s) > 18)
        return 0;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        v = v * 10 + (*p - '0');
    }
    return v;
}

/* Optional non-negative integer query argument; -1 when malformed. */
static long long query_ll(http_request *req, const char *name, long long def, long long lo,
                          long long hi)
{
    const char *v = http_query(req, name);
    if (!v)
        return def;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return -1;
    return x;
}

/* A database failure (or anything else unexpected) as a 500. */
static void reply_failure(http_request *req, const gt_error *err)
{
    http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", err->message);
}

/* ---------------------------------------------------------------------------
 * A run as JSON
 * ------------------------------------------------------------------------- */

/* Sets o[key] to row[key] (shared, not copied). */
static void keep(json_t *o, json_t *row, const char *key)
{
    json_t *v = json_object_get(row, key);
    json_object_set(o, key, v ? v : json_null());
}

/* The API's run object from a runs row (runs_get, runs_list) and its best
 * checkpoints; NULL with err set when those cannot be read. */
static json_t *run_object(store *db, json_t *row, int with_config, gt_error *err)
{
    int64_t id = json_integer_value(json_object_get(row, "id"));
    json_t *best;
    if (runs_best(db, id, &best, err) != GT_OK)
        return NULL;
    json_t *o = json_object();
    keep(o, row, "id");
    keep(o, row, "name");
    keep(o, row, "status");
    if (with_config) {
        json_t *cfg = json_loads(json_string_value(json_object_get(row, "config")), 0, NULL);
        json_object_set_new(o, "config", cfg ? cfg : json_null());
    }
    keep(o, row, "device");
    keep(o, row, "precision");
    double progress = json_number_value(json_object_get(row, "progress"));
    long long total = json_integer_value(json_object_get(row, "total_steps"));
    json_t *pr = json_object();
    keep(pr, row, "stage");
    keep(pr, row, "step");
    json_object_set_new(pr, "done_steps", json_integer((json_int_t)llround(progress * total)));
    json_object_set_new(pr, "total_steps", json_integer(total));
    json_object_set_new(pr, "fraction", json_real(progress));
    /* ETA from the elapsed time of this attempt and the fraction done. */
    const char *status = json_string_value(json_object_get(row, "status"));
    json_t *elapsed = json_object_get(row, "elapsed_s");
    if (status && strcmp(status, "running") == 0 && progress > 0 && progress < 1 &&
        json_is_number(elapsed))
        json_object_set_new(pr, "eta_s",
                            json_real(json_number_value(elapsed) * (1 - progress) / progress));
    else
        json_object_set_new(pr, "eta_s", json_null());
    json_object_set_new(o, "progress", pr);
    keep(o, row, "error");
    json_object_set_new(o, "cancel_requested",
                        json_boolean(json_integer_value(json_object_get(row, "cancel_requested"))));
    keep(o, row, "attempts");
    keep(o, row, "created_at");
    keep(o, row, "started_at");
    keep(o, row, "finished_at");
    keep(o, row, "updated_at");
    json_object_set_new(o, "best", best);
    return o;
}

/* Replies with the run (status) or 404. */
static void reply_run(http_request *req, store *db, int64_t id, unsigned status)
{
    json_t *row = NULL, *o = NULL;
    gt_error err = {0};
    int rc = runs_get(db, id, &row, &err);
    if (rc == GT_OK && (o = run_object(db, row, 1, &err)) != NULL)
        http_reply_json(req, status, o);
    else if (rc == GT_ENOTFOUND)
        http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL, "%s", err.message);
    else
        reply_failure(req, &err);
    json_decref(row);
}

/* The run id of the path, or 0 after a 404 reply. */
static int64_t path_run(http_request *req, store *db)
{
    int64_t id = parse_id(http_param(req, "id"));
    if (id > 0 && runs_exists(db, id, NULL) == GT_OK)
        return id;
    http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL, "run '%s' does not exist",
                     http_param(req, "id"));
    return 0;
}

/* ---------------------------------------------------------------------------
 * POST /v1/runs
 * ------------------------------------------------------------------------- */

/* "dataset_id": N in the body is replaced by dataset.path of that dataset. */
static int resolve_dataset_id(http_request *req, store *db, json_t *body)
{
    json_t *did = json_object_get(body, "dataset_id");
    if (!did)
        return 1;
    if (!json_is_integer(did) || json_integer_value(did) <= 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "dataset_id",
                         "dataset_id must be a positive integer");
        return 0;
    }
    json_t *row = NULL;
    gt_error err = {0};
    int rc = datasets_get(db, json_integer_value(did), &row, &err), ok = 0;
    const char *status = json_string_value(json_object_get(row, "status"));
    if (rc == GT_ENOTFOUND) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "dataset_id", "dataset %lld does not exist",
                         (long long)json_integer_value(did));
    } else if (rc) {
        reply_failure(req, &err);
    } else if (!status || strcmp(status, "ready") != 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "dataset_id",
                         "dataset %lld is not ready (%s)", (long long)json_integer_value(did),
                         status ? status : "");
    } else {
        json_t *ds = json_object_get(body, "dataset");
        if (!ds) {
            ds = json_object();
            json_object_set_new(body, "dataset", ds);
        }
        if (!json_is_object(ds)) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "dataset", "dataset must be an object");
        } else {
            json_object_set(ds, "path", json_object_get(row, "path"));
            if (!json_object_get(ds, "geometry"))
                json_object_set(ds, "geometry", json_object_get(row, "geometry"));
            json_object_del(body, "dataset_id");
            ok = 1;
        }
    }
    json_decref(row);
    return ok;
}

/* Whether a bf16 run can train where the service will put it, as far as
 * the service knows at submission: the device is the service's --device,
 * else the run's train.device ("auto": the first GPU when there is one).
 * A device it does not list is left to the worker (the run then fails with
 * the reason). */
static void bf16_refusal(const app *a, const model_config *cfg, char *msg, size_t cap)
{
    msg[0] = '\0';
    if (!cfg->bf16 || a->ndevices < 1)
        return;
    const char *dev = a->cfg.device[0] ? a->cfg.device : cfg->device;
    const gt_device_info *d = NULL;
    if (strcmp(dev, "cpu") == 0) {
        d = &a->devices[0];
    } else if (strcmp(dev, "auto") == 0) {
        d = &a->devices[0];
        for (int i = 1; i < a->ndevices; i++)
            if (strcmp(a->devices[i].kind, "cuda") == 0) {
                d = &a->devices[i];
                break;
            }
    } else if (strncmp(dev, "cuda", 4) == 0) {
        int idx = dev[4] == ':' ? atoi(dev + 5) : 0;
        for (int i = 1; i < a->ndevices; i++)
            if (strcmp(a->devices[i].kind, "cuda") == 0 && a->devices[i].index == idx)
                d = &a->devices[i];
    }
    if (!d)
        return;
    int is_cpu = strcmp(d->kind, "cpu") == 0;
    int ok = d->bf16 || (is_cpu && a->cfg.allow_bf16_emulation);
    model_bf16_refusal(cfg, d->kind, d->name, ok, is_cpu, d->cc_major, d->cc_minor, msg, cap);
}

static void route_runs_create(http_request *req, void *ctx)
{
    app *a = ctx;
    json_t *body = http_body_json(req);
    if (!json_is_object(body)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "", "the run config must be an object");
        return;
    }
    if (!resolve_dataset_id(req, a->db, body))
        return;
    model_config cfg;
    char field[128] = "";
    gt_error err = {0};
    if (model_config_from_json(body, &cfg, field, sizeof field, &err) != GT_OK) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, field, "%s", err.message);
        return;
    }
    char why[512];
    bf16_refusal(a, &cfg, why, sizeof why);
    if (why[0]) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "train.precision", "%s", why);
        return;
    }
    json_t *canon = model_config_to_json(&cfg);
    char *text = canon ? json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(canon);
    if (!text) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
        return;
    }
    const char *key = http_header(req, "Idempotency-Key");
    if (key && (strlen(key) == 0 || strlen(key) > 255)) {
        free(text);
        http_reply_error(req, 400, HTTP_E_VALIDATION, "Idempotency-Key",
                         "Idempotency-Key must be 1 to 255 characters");
        return;
    }
    int64_t id = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (key) {
            char *prev = NULL;
            int found = runs_find_by_key(a->db, key, &id, &prev, &err);
            if (found != GT_OK && found != GT_ENOTFOUND) {
                free(text);
                reply_failure(req, &err);
                return;
            }
            if (found == GT_OK) {
                int same = prev && strcmp(prev, text) == 0;
                free(prev);
                free(text);
                if (!same) {
                    http_reply_error(req, 409, HTTP_E_CONFLICT, "Idempotency-Key",
                                     "Idempotency-Key '%s' was used by run %lld with another"
                                     " config",
                                     key, (long long)id);
                    return;
                }
                reply_run(req, a->db, id, 200);
                return;
            }
        }
        if (runs_create(a->db, cfg.name, text, cfg.bf16 ? "bf16" : "fp32", key,
                        cfg.steps1 + cfg.steps2, &id, &err) == GT_OK)
            break;
        /* Two requests with one new key at once: the loser finds the winner. */
        if (!key || attempt == 1) {
            free(text);
            http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", err.message);
            return;
        }
    }
    free(text);
    log_msg(LOG_INFO, "run", "id=%lld status=queued name=\"%s\"", (long long)id, cfg.name);
    sched_kick(a->sched);
    reply_run(req, a->db, id, 201);
}

/* ---------------------------------------------------------------------------
 * GET /v1/runs, GET /v1/runs/{id}, POST /v1/runs/{id}/cancel
 * ------------------------------------------------------------------------- */

static int valid_status(const char *s)
{
    static const char *const ok[] = {"queued", "running", "succeeded", "failed", "cancelled"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strcmp(s, ok[i]) == 0)
            return 1;
    return 0;
}

static void route_runs_list(http_request *req, void *ctx)
{
    app *a = ctx;
    const char *status = http_query(req, "status");
    long long limit = query_ll(req, "limit", 20, 1, 100);
    long long cursor = query_ll(req, "cursor", 0, 0, INT64_MAX);
    if (status && !valid_status(status)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "status",
                         "status must be queued, running, succeeded, failed or cancelled");
        return;
    }
    if (limit < 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "limit", "limit must be 1 to 100");
        return;
    }
    if (cursor < 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "cursor", "cursor is not valid");
        return;
    }
    /* Keyset paging on id: one row more than asked says whether more follow. */
    json_t *rows = NULL;
    gt_error err = {0};
    if (runs_list(a->db, status, cursor, (int)limit + 1, &rows, &err) != GT_OK) {
        reply_failure(req, &err);
        return;
    }
    json_t *items = json_array();
    int64_t last = 0;
    size_t n = json_array_size(rows);
    for (size_t i = 0; i < n && i < (size_t)limit; i++) {
        json_t *row = json_array_get(rows, i);
        json_t *o = run_object(a->db, row, 0, &err);
        if (!o) {
            json_decref(items);
            json_decref(rows);
            reply_failure(req, &err);
            return;
        }
        last = json_integer_value(json_object_get(row, "id"));
        json_array_append_new(items, o);
    }
    json_decref(rows);
    json_t *body = json_pack("{s:o}", "items", items);
    if (n > (size_t)limit) {
        char c[32];
        snprintf(c, sizeof c, "%lld", (long long)last);
        json_object_set_new(body, "next_cursor", json_string(c));
    } else {
        json_object_set_new(body, "next_cursor", json_null());
    }
    http_reply_json(req, 200, body);
}

static void route_runs_get(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = path_run(req, a->db);
    if (id)
        reply_run(req, a->db, id, 200);
}

static void route_runs_cancel(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = path_run(req, a->db);
    if (!id)
        return;
    char status[16] = "";
    gt_error err = {0};
    if (sched_cancel(a->sched, a->db, id, status, &err) != GT_OK) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", err.message);
        return;
    }
    if (strcmp(status, "succeeded") == 0 || strcmp(status, "failed") == 0) {
        http_reply_error(req, 409, HTTP_E_CONFLICT, NULL, "run %lld already %s", (long long)id,
                         status);
        return;
    }
    reply_run(req, a->db, id, 202);
}

/* ---------------------------------------------------------------------------
 * GET /v1/runs/{id}/metrics: bucket averages, bounded memory
 * ------------------------------------------------------------------------- */

static void route_runs_metrics(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = path_run(req, a->db);
    if (!id)
        return;
    const char *name = http_query(req, "name");
    long long since = query_ll(req, "since_step", 0, 0, INT64_MAX);
    long long max_points = query_ll(req, "max_points", 1000, 1, 10000);
    if (since < 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "since_step",
                         "since_step must be a non-negative integer");
        return;
    }
    if (max_points < 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "max_points",
                         "max_points must be 1 to 10000");
        return;
    }
    if (name && (strlen(name) == 0 || strlen(name) > 64)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "name", "name must be 1 to 64 characters");
        return;
    }
    /* The series that exist (distinct names are few: read them first). */
    json_t *names = NULL, *series = json_array(), *one;
    gt_error err = {0};
    int rc = runs_series_names(a->db, id, name, &names, &err);
    size_t i;
    json_t *row;
    json_array_foreach(names, i, row) {
        if (rc)
            break;
        rc = runs_series(a->db, id, json_string_value(json_object_get(row, "stage")),
                         json_string_value(json_object_get(row, "name")), since, max_points,
                         &one, &err);
        if (rc == GT_OK)
            json_array_append_new(series, one);
    }
    json_decref(names);
    /* Validation losses (fp32) as the series "val_loss" of each stage. */
    if (!name || strcmp(name, "val_loss") == 0) {
        static const char *const stages[] = {"energy", "shower"};
        for (int k = 0; k < 2 && rc == GT_OK; k++) {
            rc = runs_series(a->db, id, stages[k], "val_loss", since, max_points, &one, &err);
            if (rc == GT_OK && json_integer_value(json_object_get(one, "count")) > 0)
                json_array_append_new(series, one);
            else if (rc == GT_OK)
                json_decref(one);
        }
    }
    if (rc) {
        json_decref(series);
        reply_failure(req, &err);
        return;
    }
    http_reply_json(req, 200,
                    json_pack("{s:I, s:I, s:o}", "run_id", (json_int_t)id, "max_points",
                              (json_int_t)max_points, "series", series));
}

/* ---------------------------------------------------------------------------
 * GET /v1/runs/{id}/events: Server-Sent Events from run_events
 * ------------------------------------------------------------------------- */

#define SSE_KEEPALIVE_MS 250
#define SSE_NAP_MS 25

typedef struct sse {
    app *a;
    int64_t run;
    int64_t last;              /* last event id sent                        */
    char *pending;             /* formatted text not yet handed over        */
    size_t len, off, cap;
    int ended;                 /* the run finished and all was sent         */
} sse;

static void sse_free(void *user)
{
    sse *s = user;
    free(s->pending);
    free(s);
}

static void sse_append(sse *s, const char *text, size_t n)
{
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 8192;
        while (cap < s->len + n)
            cap *= 2;
        char *p = realloc(s->pending, cap);
        if (!p)
            return;            /* dropped; the client resumes by id */
        s->pending = p;
        s->cap = cap;
    }
    memcpy(s->pending + s->len, text, n);
    s->len += n;
}

/* Reads the next events into pending; returns how many. */
static int sse_fetch(sse *s)
{
    json_t *events = NULL;
    if (runs_events_after(s->a->db, s->run, s->last, 64, &events, NULL) != GT_OK)
        return 0;
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        char head[128];
        s->last = json_integer_value(json_object_get(e, "id"));
        int k = snprintf(head, sizeof head, "id: %lld\nevent: %s\ndata: ", (long long)s->last,
                         json_string_value(json_object_get(e, "kind")));
        sse_append(s, head, (size_t)k);
        const char *data = json_string_value(json_object_get(e, "data"));
        sse_append(s, data, strlen(data));
        sse_append(s, "\n\n", 2);
    }
    int n = (int)json_array_size(events);
    json_decref(events);
    return n;
}

static int run_finished(store *db, int64_t run)
{
    char st[16] = "";
    if (runs_status(db, run, st, NULL) != GT_OK)
        return 1;
    return strcmp(st, "succeeded") == 0 || strcmp(st, "failed") == 0 ||
           strcmp(st, "cancelled") == 0;
}

/* Never returns 0 (nothing ready): it naps in short steps instead and
 * sends a keep-alive comment when nothing happened for a while, so the
 * connection is never left waiting on a poll MHD might not repeat. */
static long sse_read(void *user, char *buf, size_t max)
{
    sse *s = user;
    for (int waited = 0;; waited += SSE_NAP_MS) {
        if (s->off < s->len) {
            size_t n = s->len - s->off < max ? s->len - s->off : max;
            memcpy(buf, s->pending + s->off, n);
            s->off += n;
            if (s->off == s->len)
                s->off = s->len = 0;
            return (long)n;
        }
        if (s->ended || atomic_load(&s->a->stopping))
            return -1;
        /* Finished is read before fetching, so events written just before
         * the final status are never lost. */
        int finished = run_finished(s->a->db, s->run);
        if (sse_fetch(s) > 0)
            continue;
        if (finished) {
            s->ended = 1;
            return -1;
        }
        if (waited >= SSE_KEEPALIVE_MS) {
            static const char ka[] = ": keep-alive\n\n";
            if (max < sizeof ka - 1)
                return -1;
            memcpy(buf, ka, sizeof ka - 1);
            return (long)(sizeof ka - 1);
        }
        struct timespec ts = {0, SSE_NAP_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void route_runs_events(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = path_run(req, a->db);
    if (!id)
        return;
    const char *last = http_header(req, "Last-Event-ID");
    if (!last)
        last = http_query(req, "last_event_id");
    int64_t from = 0;
    if (last && *last) {
        from = parse_id(last);
        if (from == 0 && strcmp(last, "0") != 0) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "Last-Event-ID",
                             "Last-Event-ID must be an event id");
            return;
        }
    }
    sse *s = calloc(1, sizeof *s);
    if (!s) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
        return;
    }
    s->a = a;
    s->run = id;
    s->last = from;
    sse_append(s, "retry: 1000\n\n", 13);
    static const char *const headers[] = {"Cache-Control", "no-cache", NULL};
    http_reply_stream(req, 200, "text/event-stream", sse_read, s, sse_free, headers);
}

/* ---------------------------------------------------------------------------
 * Checkpoints
 * ------------------------------------------------------------------------- */

static void route_ckpt_list(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = path_run(req, a->db);
    if (!id)
        return;
    json_t *rows = NULL;
    gt_error err = {0};
    if (runs_checkpoints(a->db, id, &rows, &err) != GT_OK) {
        reply_failure(req, &err);
        return;
    }
    json_t *items = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        json_array_append_new(
            items, json_pack("{s:O, s:O, s:O, s:O, s:b, s:O, s:O, s:O, s:O}", "id",
                             json_object_get(r, "id"), "stage", json_object_get(r, "stage"),
                             "step", json_object_get(r, "step"), "val_loss",
                             json_object_get(r, "val_loss"), "best",
                             (int)json_integer_value(json_object_get(r, "is_best")), "precision",
                             json_object_get(r, "precision"), "size_bytes",
                             json_object_get(r, "size_bytes"), "sha256",
                             json_object_get(r, "checksum"), "created_at",
                             json_object_get(r, "created_at")));
    }
    json_decref(rows);
    http_reply_json(req, 200, json_pack("{s:I, s:o}", "run_id", (json_int_t)id, "items", items));
}

static void route_ckpt_get(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = path_run(req, a->db);
    if (!id)
        return;
    int64_t ck = parse_id(http_param(req, "ckpt"));
    runs_blob b;
    gt_error err = {0};
    int rc = runs_checkpoint_blob(a->db, id, ck, &b, &err);
    if (rc == GT_ENOTFOUND) {
        http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL,
                         "run %lld has no checkpoint '%s' (it may have been pruned)",
                         (long long)id, http_param(req, "ckpt"));
        return;
    }
    if (rc) {
        reply_failure(req, &err);
        return;
    }
    char disp[160];
    snprintf(disp, sizeof disp, "attachment; filename=\"run%lld-%s-step%lld.ckpt\"",
             (long long)id, b.stage, b.step);
    const char *headers[] = {"X-Checksum-SHA256", b.sha256, "Content-Disposition", disp, NULL};
    http_reply_buffer(req, 200, "application/octet-stream", b.data, b.len, headers);
}

/* ---------------------------------------------------------------------------
 * POST /v1/runs/{id}/samples
 * ------------------------------------------------------------------------- */

enum { FMT_JSON, FMT_BINARY, FMT_HDF5 };

typedef struct sample_call {
    sampling_job job;
    http_request *req;
    int format;
    char geometry[1024];
} sample_call;

static void sample_done(sampling_job *job)
{
    sample_call *c = job->user;
    http_resume(c->req);
}

static void sample_call_free(sample_call *c)
{
    free(c->job.e_inc);
    free(c->job.showers);
    free(c);
}

static void sample_call_free_any(void *p)
{
    sample_call_free(p);
}

/* "application/x-hdf5" or "application/octet-stream" anywhere in Accept
 * picks that format; anything else (JSON, * / *, none) gets JSON. */
static int accept_format(const char *accept)
{
    if (!accept)
        return FMT_JSON;
    if (strstr(accept, "application/x-hdf5"))
        return FMT_HDF5;
    if (strstr(accept, "application/octet-stream"))
        return FMT_BINARY;
    if (strstr(accept, "application/json") || strstr(accept, "*/*") ||
        strstr(accept, "application/*"))
        return FMT_JSON;
    return -1;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p[2] = (unsigned char)(v >> 16),
    p[3] = (unsigned char)(v >> 24);
}

static void put_f32(unsigned char *p, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    put_u32(p, v);
}

/* Binary layout (api/README.md): all little-endian.
 *   "GSHW", u32 version = 1, u32 n, u32 voxels, u32 layers,
 *   u32 voxels of each layer, f32 energies[n], f32 showers[n][voxels] */
static void reply_binary(http_request *req, sample_call *c, const geo_geometry *g)
{
    int64_t n = c->job.n;
    int V = c->job.voxels;
    size_t head = 20 + 4 * (size_t)g->n_layers;
    size_t len = head + 4 * (size_t)n + 4 * (size_t)n * (size_t)V;
    unsigned char *buf = malloc(len);
    if (!buf) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
        return;
    }
    memcpy(buf, "GSHW", 4);
    put_u32(buf + 4, 1);
    put_u32(buf + 8, (uint32_t)n);
    put_u32(buf + 12, (uint32_t)V);
    put_u32(buf + 16, (uint32_t)g->n_layers);
    for (int l = 0; l < g->n_layers; l++)
        put_u32(buf + 20 + 4 * (size_t)l, (uint32_t)g->layers[l].n_voxels);
    unsigned char *p = buf + head;
    for (int64_t i = 0; i < n; i++, p += 4)
        put_f32(p, c->job.e_inc[i]);
    for (int64_t i = 0; i < n * V; i++, p += 4)
        put_f32(p, c->job.showers[i]);
    http_reply_buffer(req, 200, "application/octet-stream", buf, len, NULL);
}

static void reply_hdf5(http_request *req, sample_call *c)
{
    calo_h5_writer w;
    gt_error err = {0};
    void *image = NULL;
    size_t len = 0;
    if (calo_h5_create_memory(&w, c->job.voxels, 0, 1, &err) != GT_OK) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", err.message);
        return;
    }
    if (calo_h5_append(&w, c->job.e_inc, c->job.showers, c->job.n, &err) != GT_OK) {
        calo_h5_finish_memory(&w, &image, &len, NULL);
        free(image);
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", err.message);
        return;
    }
    if (calo_h5_finish_memory(&w, &image, &len, &err) != GT_OK) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", err.message);
        return;
    }
    static const char *const headers[] = {"Content-Disposition",
                                          "attachment; filename=\"showers.h5\"", NULL};
    http_reply_buffer(req, 200, "application/x-hdf5", image, len, headers);
}

static void reply_samples_json(http_request *req, sample_call *c)
{
    json_t *energies = json_array(), *showers = json_array();
    int V = c->job.voxels;
    for (int64_t i = 0; i < c->job.n; i++) {
        json_array_append_new(energies, json_real(c->job.e_inc[i]));
        json_t *row = json_array();
        for (int v = 0; v < V; v++)
            json_array_append_new(row, json_real(c->job.showers[i * V + v]));
        json_array_append_new(showers, row);
    }
    http_reply_json(req, 200,
                    json_pack("{s:I, s:I, s:I, s:i, s:o, s:o}", "run_id", (json_int_t)c->job.run,
                              "seed", (json_int_t)c->job.seed, "n", (json_int_t)c->job.n,
                              "voxels", V, "energies", energies, "showers", showers));
}

static void samples_resume(http_request *req, void *ctx)
{
    (void)ctx;
    sample_call *c = http_get_user(req);
    if (c->job.rc != GT_OK) {
        if (c->job.rc == GT_ECANCELLED)
            http_reply_error(req, 503, HTTP_E_UNAVAILABLE, NULL, "%s", c->job.message);
        else
            http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "sampling failed: %s",
                             c->job.message);
    } else if (c->format == FMT_JSON) {
        reply_samples_json(req, c);
    } else if (c->format == FMT_HDF5) {
        reply_hdf5(req, c);
    } else {
        geo_geometry g;
        gt_error err = {0};
        if (model_geometry_load(c->geometry, &g, &err) != GT_OK) {
            http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", err.message);
        } else {
            reply_binary(req, c, &g);
            geo_free(&g);
        }
    }
    http_set_user(req, NULL, NULL);
    sample_call_free(c);
}

/* Parses the request body into c (energies drawn for count requests);
 * replies and returns 0 on a bad request. */
static int parse_samples(http_request *req, app *a, json_t *body, sample_call *c)
{
    if (!json_is_object(body)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "", "the body must be an object");
        return 0;
    }
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        if (strcmp(key, "energies") && strcmp(key, "count") && strcmp(key, "energy") &&
            strcmp(key, "seed") && strcmp(key, "steps")) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, key, "unknown field '%s'", key);
            return 0;
        }
    }
    json_t *seed = json_object_get(body, "seed"), *steps = json_object_get(body, "steps");
    json_t *energies = json_object_get(body, "energies"), *count = json_object_get(body, "count");
    json_t *dist = json_object_get(body, "energy");
    if (seed && (!json_is_integer(seed) || json_integer_value(seed) < 0)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "seed",
                         "seed must be a non-negative integer");
        return 0;
    }
    if (steps && (!json_is_integer(steps) || json_integer_value(steps) < 1 ||
                  json_integer_value(steps) > 1000)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "steps", "steps must be 1 to 1000");
        return 0;
    }
    c->job.seed = seed ? (uint64_t)json_integer_value(seed) : 1;
    c->job.steps = steps ? (int)json_integer_value(steps) : 0;
    if ((energies != NULL) == (count != NULL)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "", "give either energies or count");
        return 0;
    }
    double lo = (double)a->cfg.min_energy_mev, hi = (double)a->cfg.max_energy_mev;
    long long n;
    if (energies) {
        if (!json_is_array(energies) || json_array_size(energies) == 0) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "energies",
                             "energies must be a non-empty array of MeV");
            return 0;
        }
        n = (long long)json_array_size(energies);
        if (dist) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "energy",
                             "energy goes with count, not with energies");
            return 0;
        }
    } else {
        if (!json_is_integer(count) || json_integer_value(count) < 1) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "count",
                             "count must be a positive integer");
            return 0;
        }
        n = json_integer_value(count);
    }
    if (n > a->cfg.max_showers) {
        http_reply_error(req, 413, HTTP_E_BODY_TOO_LARGE, energies ? "energies" : "count",
                         "%lld showers asked, at most %ld per request", n, a->cfg.max_showers);
        return 0;
    }
    if (c->format == FMT_JSON && n > a->cfg.max_json_showers) {
        http_reply_error(req, 413, HTTP_E_BODY_TOO_LARGE, energies ? "energies" : "count",
                         "%lld showers asked, at most %ld as JSON (ask for"
                         " application/octet-stream or application/x-hdf5)",
                         n, a->cfg.max_json_showers);
        return 0;
    }
    c->job.n = n;
    c->job.e_inc = malloc((size_t)n * sizeof(float));
    if (!c->job.e_inc) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
        return 0;
    }
    if (energies) {
        for (size_t i = 0; i < (size_t)n; i++) {
            json_t *e = json_array_get(energies, i);
            double x = json_number_value(e);
            if (!json_is_number(e) || !(x >= lo && x <= hi)) {
                char field[48];
                snprintf(field, sizeof field, "energies[%zu]", i);
                http_reply_error(req, 422, HTTP_E_VALIDATION, field,
                                 "incident energies must be numbers in [%g, %g] MeV", lo, hi);
                return 0;
            }
            c->job.e_inc[i] = (float)x;
        }
        return 1;
    }
    /* count + distribution: drawn as `giant sample` draws them. */
    synth_config sc;
    synth_config_default(&sc);
    sc.seed = c->job.seed;
    const char *mode = "log-uniform";
    double emin = 1e3, emax = 1e6;
    if (dist) {
        json_t *jd = json_object_get(dist, "dist"), *jmin = json_object_get(dist, "min_mev"),
               *jmax = json_object_get(dist, "max_mev");
        if (!json_is_object(dist) || (jd && !json_is_string(jd)) ||
            (jmin && !json_is_number(jmin)) || (jmax && !json_is_number(jmax))) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "energy",
                             "energy must be {\"dist\": \"log-uniform\"|\"discrete\"|\"fixed\","
                             " \"min_mev\": number, \"max_mev\": number}");
            return 0;
        }
        if (jd)
            mode = json_string_value(jd);
        if (jmin)
            emin = json_number_value(jmin);
        if (jmax)
            emax = json_number_value(jmax);
    }
    gt_error err = {0};
    if (synth_parse_energy_mode(mode, &sc.energy_mode, &err) != GT_OK) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "energy.dist", "%s", err.message);
        return 0;
    }
    if (!(emin >= lo && emin <= hi)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "energy.min_mev",
                         "min_mev must be in [%g, %g] MeV", lo, hi);
        return 0;
    }
    if (!(emax >= emin && emax <= hi)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "energy.max_mev",
                         "max_mev must be in [min_mev, %g] MeV", hi);
        return 0;
    }
    sc.e_min_mev = emin;
    sc.e_max_mev = emax;
    if (synth_config_check(&sc, &err) != GT_OK ||
        synth_draw_energies(&sc, 0, n, c->job.e_inc, &err) != GT_OK) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "energy", "%s", err.message);
        return 0;
    }
    return 1;
}

/* The run's geometry when both stages have a best checkpoint; replies 409
 * and returns 0 otherwise. */
static int sample_ready(http_request *req, app *a, int64_t id, sample_call *c)
{
    gt_error err = {0};
    char *config = NULL;
    int rc = runs_best_pair(a->db, id, &c->job.version, &err);
    if (rc == GT_ENOTFOUND) {
        http_reply_error(req, 409, HTTP_E_CONFLICT, NULL,
                         "run %lld has no best checkpoint of both stages yet", (long long)id);
        return 0;
    }
    if (rc || (rc = runs_config(a->db, id, &config, &err))) {
        reply_failure(req, &err);
        return 0;
    }
    json_t *cfg = json_loads(config, 0, NULL);
    const char *g = json_string_value(json_object_get(json_object_get(cfg, "dataset"), "geometry"));
    snprintf(c->geometry, sizeof c->geometry, "%s", g ? g : "");
    json_decref(cfg);
    free(config);
    return 1;
}

static void route_samples(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = path_run(req, a->db);
    if (!id)
        return;
    sample_call *c = calloc(1, sizeof *c);
    if (!c) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
        return;
    }
    c->format = accept_format(http_header(req, "Accept"));
    if (c->format < 0) {
        free(c);
        http_reply_error(req, 406, "not_acceptable", "Accept",
                         "Accept must allow application/json, application/octet-stream or"
                         " application/x-hdf5");
        return;
    }
    if (!parse_samples(req, a, http_body_json(req), c) || !sample_ready(req, a, id, c)) {
        sample_call_free(c);
        return;
    }
    c->req = req;
    c->job.run = id;
    c->job.done = sample_done;
    c->job.user = c;
    /* Freed with the request if the client leaves before the reply. */
    http_set_user(req, c, sample_call_free_any);
    /* Suspend first: the worker may finish before sampling_submit returns. */
    http_suspend(req, samples_resume);
    gt_error err = {0};
    if (sampling_submit(a->sampling, &c->job, &err) != GT_OK) {
        c->job.rc = err.code ? err.code : GT_EIO;
        snprintf(c->job.message, sizeof c->job.message, "%s", err.message);
        http_resume(req);
    }
}

/* ---------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------- */

static const struct {
    const char *method, *pattern;
    http_handler handler;
    int flags;
} routes[] = {
    { "POST", "/v1/runs",                             route_runs_create,  HTTP_JSON_BODY },
    { "GET",  "/v1/runs",                             route_runs_list,    0 },
    { "GET",  "/v1/runs/{id}",                        route_runs_get,     0 },
    { "POST", "/v1/runs/{id}/cancel",                 route_runs_cancel,  0 },
    { "GET",  "/v1/runs/{id}/metrics",                route_runs_metrics, 0 },
    { "GET",  "/v1/runs/{id}/events",                 route_runs_events,  0 },
    { "GET",  "/v1/runs/{id}/checkpoints",            route_ckpt_list,    0 },
    { "GET",  "/v1/runs/{id}/checkpoints/{ckpt}",     route_ckpt_get,     0 },
    { "POST", "/v1/runs/{id}/samples",                route_samples,      HTTP_JSON_BODY },
};

int routes_runs_register(http_router *r, gt_error *err)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        int rc = http_router_add(r, routes[i].method, routes[i].pattern, routes[i].handler,
                                 routes[i].flags, err);
        if (rc != GT_OK)
            return rc;
    }
    return GT_OK;
}
