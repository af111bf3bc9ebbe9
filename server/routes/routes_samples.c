/* routes_samples: POST /v1/runs/{id}/samples, showers from a run's best
 * checkpoints, and POST /v1/models/{name}/samples, the same from an
 * imported model (the same request and replies), as JSON, the binary layout of api/README.md (encoded by the
 * client library's gc_showers_encode) or HDF5.  The request is validated
 * here, queued on the sampling worker and its connection suspended; the
 * reply is formatted when the worker resumes it.  Contracts:
 * api/openapi.json. */
#include "routes_handlers.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "calo_h5.h"
#include "giant_client.h"
#include "models.h"
#include "replica.h"
#include "routes_common.h"
#include "runs.h"
#include "sample_body.h"
#include "sampling.h"

/* ---------------------------------------------------------------------------
 * POST /v1/runs/{id}/samples
 * ------------------------------------------------------------------------- */

enum { FMT_JSON, FMT_BINARY, FMT_HDF5 };

/* More showers than this server answers in one request: the reply names
 * the limit, so a client can split the work (`giant sample --server`
 * does, with row0, into the same showers). */
#define SAMPLES_E_TOO_MANY "too_many_showers"

/* What one sample request holds (its showers and its reply), counted in
 * app.sample_bytes from admission until the request completes. */
typedef struct sample_hold {
    app *a;
    long long bytes;
} sample_hold;

typedef struct sample_call {
    sampling_job job;
    app *a;
    http_request *req;
    int format;
    sample_hold *hold;
    char model[72];        /* the imported model's name, "" for a run   */
    int64_t source_run;    /* and the run it was exported from          */
    unsigned refused;      /* admitted on the worker: 503 or 500 refused
                              it (its message in job.message), 0 not     */
} sample_call;

static void hold_release(sample_hold *h)
{
    if (!h)
        return;
    atomic_fetch_sub(&h->a->sample_bytes, h->bytes);
    free(h);
}

static void hold_release_any(void *p)
{
    hold_release(p);
}

/* The memory a request of n showers of V voxels in `format` holds at its
 * peak: the showers, then its reply beside them (JSON: a value object and
 * its text per voxel, about 64 bytes). */
static long long request_bytes(long long n, int V, int layers, int format)
{
    long long showers = n * (long long)V * 4 + n * 4;
    if (format == 0 /* FMT_JSON */)
        return showers + n * (long long)V * 64;
    return showers + (long long)gc_showers_size(n, V, layers);
}

static void sample_done(sampling_job *job)
{
    sample_call *c = job->user;
    http_resume(c->req);
}

static void sample_call_free(sample_call *c)
{
    hold_release(c->hold);
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

/* The binary layout of api/README.md, written by the client library's
 * encoder so the layout lives beside its decoder. */
static void reply_binary(http_request *req, sample_call *c)
{
    gc_showers s = {c->job.n,        c->job.voxels, c->job.layers, c->job.layer_voxels,
                    c->job.e_inc, c->job.showers};
    size_t len = gc_showers_size(s.n, s.voxels, s.layers);
    unsigned char *buf = len ? malloc(len) : NULL;
    gt_error err = {0};
    if (!buf) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
        return;
    }
    if (gc_showers_encode(&s, buf, len, &err) != GT_OK) {
        free(buf);
        routes_reply_internal(req, &err);
        return;
    }
    http_reply_buffer(req, 200, "application/octet-stream", buf, len, NULL);
}

static void reply_hdf5(http_request *req, sample_call *c)
{
    calo_h5_writer w;
    gt_error err = {0};
    void *image = NULL;
    size_t len = 0;
    if (calo_h5_create_memory(&w, c->job.voxels, 0, 1, &err) != GT_OK) {
        routes_reply_internal(req, &err);
        return;
    }
    if (calo_h5_append(&w, c->job.e_inc, c->job.showers, c->job.n, &err) != GT_OK) {
        calo_h5_finish_memory(&w, &image, &len, NULL);
        free(image);
        routes_reply_internal(req, &err);
        return;
    }
    if (calo_h5_finish_memory(&w, &image, &len, &err) != GT_OK) {
        routes_reply_internal(req, &err);
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
    /* a model's reply names the run it came from, and the model */
    json_t *body = json_pack("{s:I, s:I, s:I, s:i, s:o, s:o}", "run_id",
                             (json_int_t)(c->model[0] ? c->source_run : c->job.run), "seed",
                             (json_int_t)c->job.seed, "n", (json_int_t)c->job.n, "voxels", V,
                             "energies", energies, "showers", showers);
    if (body && c->model[0])
        json_object_set_new(body, "model", json_string(c->model));
    http_reply_json(req, 200, body);
}

static void samples_resume(http_request *req, void *ctx)
{
    (void)ctx;
    sample_call *c = http_get_user(req);
    if (c->refused == 503) {
        http_reply_error_retry(req, 503, HTTP_E_UNAVAILABLE, 1, "%s", c->job.message);
    } else if (c->refused) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", c->job.message);
    } else if (c->job.rc != GT_OK) {
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
        reply_binary(req, c);
    }
    /* the reply holds its memory until it is sent: the hold stays with
     * the request and is released when it completes */
    http_set_user(req, c->hold, c->hold ? hold_release_any : NULL);
    c->hold = NULL;
    sample_call_free(c);
}

/* Admission by memory: the requests in flight hold at most
 * --sample-memory-mb together (one request alone is always let in, so a
 * request the per-request limits allow can always run).  0 when admitted
 * (c->hold set); else the status of the refusal, its message in msg:
 * 503 past the budget (with Retry-After, which the client library
 * honours), 500 out of memory.  Any thread: the pool thread calls it
 * when the shape of the showers is known, the sampling worker otherwise
 * (admit_on_worker). */
static unsigned admit_bytes(app *a, sample_call *c, int V, int layers, char *msg, size_t cap)
{
    long long bytes = request_bytes(c->job.n, V, layers, c->format);
    long long budget = (long long)a->cfg.sample_memory_mb << 20;
    long long before = atomic_fetch_add(&a->sample_bytes, bytes);
    if (before > 0 && before + bytes > budget) {
        atomic_fetch_sub(&a->sample_bytes, bytes);
        snprintf(msg, cap,
                 "the sample requests in flight hold %lld MiB of the %ld MiB this server gives"
                 " them; this one needs %lld MiB: retry shortly",
                 before >> 20, a->cfg.sample_memory_mb, (bytes + (1 << 20) - 1) >> 20);
        return 503;
    }
    c->hold = malloc(sizeof *c->hold);
    if (!c->hold) {
        atomic_fetch_sub(&a->sample_bytes, bytes);
        snprintf(msg, cap, "out of memory");
        return 500;
    }
    c->hold->a = a;
    c->hold->bytes = bytes;
    return 0;
}

/* Admission on the pool thread; 0 after replying. */
static int admit(http_request *req, app *a, sample_call *c, int V, int layers)
{
    char msg[512];
    unsigned refused = admit_bytes(a, c, V, layers, msg, sizeof msg);
    if (refused == 503)
        http_reply_error_retry(req, 503, HTTP_E_UNAVAILABLE, 1, "%s", msg);
    else if (refused)
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", msg);
    return refused == 0;
}

/* The same on the sampling worker, for a run whose shape the pool thread
 * did not know (sampling_job.admit): the refusal is the reply when the
 * request resumes. */
static int admit_on_worker(sampling_job *job, int voxels, int layers)
{
    sample_call *c = job->user;
    c->refused = admit_bytes(c->a, c, voxels, layers, job->message, sizeof job->message);
    return c->refused ? GT_ECANCELLED : GT_OK;
}

/* 422 too_many_showers: the error shape with the limit the request went
 * over ("limit"), which a client splits its work by. */
static void reply_too_many(http_request *req, const char *field, long limit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reply_too_many(http_request *req, const char *field, long limit, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *body = json_pack("{s:{s:s, s:s, s:s, s:I}}", "error", "code", SAMPLES_E_TOO_MANY,
                             "message", msg, "field", field, "limit", (json_int_t)limit);
    if (body)
        http_reply_json(req, 422, body);
    else
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
}

/* Parses the request body into c (sample_body.c; energies drawn for count
 * requests); replies and returns 0 on a bad request. */
static int parse_samples(http_request *req, app *a, json_t *body, sample_call *c)
{
    sample_body_limits lim = {(double)a->cfg.min_energy_mev, (double)a->cfg.max_energy_mev,
                              a->cfg.max_showers, a->cfg.max_json_showers,
                              c->format == FMT_JSON, (int)a->cfg.max_sample_steps};
    sample_body b;
    sample_body_fault f;
    if (!sample_body_parse(body, &lim, &b, &f)) {
        if (f.too_many)
            reply_too_many(req, f.field, f.limit, "%s", f.message);
        else
            http_reply_error(req, (unsigned)f.status,
                             f.status == 422 ? HTTP_E_VALIDATION : HTTP_E_INTERNAL,
                             f.status == 422 ? f.field : NULL, "%s", f.message);
        return 0;
    }
    /* the job owns the energies from here (sample_call_free frees them) */
    c->job.n = b.n;
    c->job.e_inc = b.e_inc;
    c->job.seed = b.seed;
    c->job.row0 = b.row0;
    c->job.steps = b.steps;
    return 1;
}

/* A new call with the reply format Accept asks for; NULL after replying. */
static sample_call *call_new(http_request *req, app *a)
{
    sample_call *c = calloc(1, sizeof *c);
    if (!c) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    c->a = a;
    c->format = accept_format(http_header(req, "Accept"));
    if (c->format < 0) {
        free(c);
        http_reply_error(req, 406, "not_acceptable", "Accept",
                         "Accept must allow application/json, application/octet-stream or"
                         " application/x-hdf5");
        return NULL;
    }
    return c;
}

/* Hands a parsed and admitted call to the sampling worker. */
static void call_submit(http_request *req, app *a, sample_call *c)
{
    c->req = req;
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

void route_runs_samples(http_request *req, void *ctx)
{
    app *a = ctx;
    /* one read: whether the run exists and its best pair's version */
    int64_t id = routes_parse_id(http_param(req, "id")), version = 0;
    int ready = 0;
    gt_error err = {0};
    int rc = id > 0 ? runs_sample_source(a->db, id, &ready, &version, &err) : GT_ENOTFOUND;
    if (rc == GT_ENOTFOUND) {
        routes_reply_no_run(req);
        return;
    }
    if (rc) {
        routes_reply_internal(req, &err);
        return;
    }
    sample_call *c = call_new(req, a);
    if (!c)
        return;
    if (!parse_samples(req, a, http_body_json(req), c)) {
        sample_call_free(c);
        return;
    }
    if (!ready) {
        http_reply_error(req, 409, HTTP_E_CONFLICT, NULL,
                         "run %lld has no best checkpoint of both stages yet", (long long)id);
        sample_call_free(c);
        return;
    }
    c->job.run = id;
    c->job.version = version;
    /* the shape of its showers from the sampler the worker loaded; before
     * it has, the worker admits the request once it knows the shape */
    int V = 0, layers = 0;
    if (!sampling_shape(a->sampling, id, 0, version, &V, &layers))
        c->job.admit = admit_on_worker;
    else if (!admit(req, a, c, V, layers)) {
        sample_call_free(c);
        return;
    }
    call_submit(req, a, c);
}

/* ---------------------------------------------------------------------------
 * POST /v1/models/{name}/samples: the same from an imported model
 * ------------------------------------------------------------------------- */

/* The samples of model m (the models route, and a replica's run-scoped one
 * once it found the run's model): its shape from its manifest, read with
 * it. */
static void model_samples(http_request *req, app *a, const models_source *m)
{
    sample_call *c = call_new(req, a);
    if (!c)
        return;
    if (!parse_samples(req, a, http_body_json(req), c) ||
        !admit(req, a, c, m->voxels, m->layers)) {
        sample_call_free(c);
        return;
    }
    c->job.model = m->id;
    c->job.version = 0;            /* a model's file never changes */
    c->source_run = m->source_run;
    snprintf(c->model, sizeof c->model, "%s", m->name);
    call_submit(req, a, c);
}

/* A replica still loading its models answers 503 with Retry-After, which
 * a balancer retries on another replica, never a 404 for a model it is
 * about to have.  Returns 0 after replying. */
static int replica_loaded(http_request *req, app *a)
{
    if (!a->replica || replica_ready(a->replica))
        return 1;
    http_reply_error_retry(req, 503, HTTP_E_UNAVAILABLE, 1,
                           "this sampling replica is still loading its models");
    return 0;
}

void route_models_samples(http_request *req, void *ctx)
{
    app *a = ctx;
    if (!replica_loaded(req, a))
        return;
    const char *name = http_param(req, "name");
    models_source m;
    gt_error err = {0};
    int rc = models_source_by_name(a->db, name, &m, &err);
    if (routes_reply_rc(req, rc, &err, 404, 0, NULL))
        model_samples(req, a, &m);
}

/* ---------------------------------------------------------------------------
 * POST /v1/runs/{id}/samples on a sampling replica: the model exported from
 * run {id} (its source_run_id) serves it, so a farm client that names a run
 * gets from a replica the bytes the trainer's run gives
 * ------------------------------------------------------------------------- */

void route_replica_runs_samples(http_request *req, void *ctx)
{
    app *a = ctx;
    if (!replica_loaded(req, a))
        return;
    const char *id = http_param(req, "id");
    int64_t run = routes_parse_id(id);
    models_source m;
    gt_error err = {0};
    int rc = run > 0 ? models_source_by_run(a->db, run, &m, &err) : GT_ENOTFOUND;
    if (rc == GT_ENOTFOUND)
        http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL,
                         "run '%s' does not exist here: this sampling replica serves only the"
                         " runs its models were exported from", id);
    else if (routes_reply_rc(req, rc, &err, 0, 409, NULL))
        model_samples(req, a, &m);
}
