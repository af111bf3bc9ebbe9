#include "routes.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "build_info.h"
#include "embed.h"
#include "evaluations.h"
#include "metrics.h"
#include "query_args.h"
#include "replica.h"
#include "routes_datasets.h"
#include "routes_evaluations.h"
#include "routes_events.h"
#include "routes_ingest.h"
#include "routes_models.h"
#include "routes_runs.h"
#include "routes_samples.h"
#include "routes_tokens.h"
#include "routes_ui.h"
#include "runs.h"
#include "sampling.h"
#include "scheduler.h"

/* ---------------------------------------------------------------------------
 * Helpers of the routes_*.c files
 * ------------------------------------------------------------------------- */

int64_t routes_parse_id(const char *s)
{
    return query_args_id(s);
}

long long routes_query_ll(http_request *req, const char *name, long long def, long long lo,
                          long long hi)
{
    return query_args_ll(http_query(req, name), def, lo, hi);
}

int64_t routes_path_run(http_request *req, store *db)
{
    int64_t id = routes_parse_id(http_param(req, "id"));
    if (id > 0 && runs_exists(db, id, NULL) == GT_OK)
        return id;
    http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL, "run '%s' does not exist",
                     http_param(req, "id"));
    return 0;
}

void routes_reply_internal(http_request *req, const gt_error *err)
{
    http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", err->message);
}

/* ---------------------------------------------------------------------------
 * Health
 * ------------------------------------------------------------------------- */

/* Liveness: the process answers. Nothing else is checked on purpose, so a
 * slow database never gets a healthy process restarted. */
static void route_healthz(http_request *req, void *ctx)
{
    (void)ctx;
    http_reply_json(req, 200, json_pack("{s:s}", "status", "ok"));
}

/* Readiness: the database answers and is at this binary's schema version,
 * the engine listed its devices, and the server is not shutting down. */
static void route_readyz(http_request *req, void *ctx)
{
    app *a = ctx;
    char why[1024] = "";
    int version = 0;
    gt_error err = { 0 };
    const char *db = "ok", *engine = "ok", *server = "ok";
    if (store_schema_version(a->db, &version, &err) != GT_OK) {
        db = "error";
        snprintf(why, sizeof why, "database: %s", err.message);
    } else if (version != a->schema_latest) {
        db = "error";
        snprintf(why, sizeof why, "database: schema version %d, expected %d", version,
                 a->schema_latest);
    }
    if (!a->engine_ok) {
        engine = "error";
        size_t n = strlen(why);
        snprintf(why + n, sizeof why - n, "%sengine: %s", n ? "; " : "", a->engine_error);
    }
    if (http_request_draining(req)) {
        server = "draining";
        size_t n = strlen(why);
        snprintf(why + n, sizeof why - n, "%sserver: shutting down", n ? "; " : "");
    }
    json_t *checks = json_pack("{s:s, s:i, s:s, s:s}", "database", db, "schema_version",
                               version, "engine", engine, "server", server);
    /* A replica is ready once every model of --models is in: the balancer
     * sends it nothing before (its sample routes would answer 503). */
    if (a->replica) {
        json_t *models = replica_models_json(a->replica);
        if (!replica_ready(a->replica)) {
            size_t n = strlen(why);
            snprintf(why + n, sizeof why - n, "%smodels: %s", n ? "; " : "",
                     json_string_value(json_object_get(models, "state")));
        }
        json_object_set_new(checks, "models", models);
    }
    json_object_set_new(checks, "role", json_string(a->cfg.role));
    if (why[0]) {
        json_t *body = json_pack("{s:{s:s, s:s, s:n}, s:o}", "error", "code",
                                 HTTP_E_UNAVAILABLE, "message", why, "field", "checks", checks);
        http_reply_json(req, 503, body);
        return;
    }
    http_reply_json(req, 200, json_pack("{s:s, s:o}", "status", "ready", "checks", checks));
}

/* ---------------------------------------------------------------------------
 * Info
 * ------------------------------------------------------------------------- */

/* How a bf16 training run goes on this device: natively, emulated (a CPU
 * without AVX512-BF16 when the operator allows it), or refused. */
static const char *bf16_training(const app *a, const gt_device_info *d)
{
    if (d->bf16)
        return "native";
    if (strcmp(d->kind, "cpu") == 0 && a->cfg.allow_bf16_emulation)
        return "emulated";
    return "refused";
}

static json_t *device_json(const app *a, const gt_device_info *d)
{
    json_t *o = json_pack("{s:s, s:i, s:s, s:I, s:i, s:b, s:s}", "kind", d->kind, "index",
                          d->index, "name", d->name, "memory_bytes",
                          (json_int_t)d->memory_bytes, "cores", d->cores, "bf16", d->bf16,
                          "bf16_training", bf16_training(a, d));
    if (!o)
        return NULL;
    if (strcmp(d->kind, "cpu") == 0)
        json_object_set_new(o, "sampling_kernels",
                            json_pack("{s:s, s:s}", "fp32", a->cpu_kernel[0], "bf16",
                                      a->cpu_kernel[1]));
    if (strcmp(d->kind, "cpu") != 0) {
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
        json_object_set_new(o, "compute_capability", json_string(cc));
    } else {
        json_object_set_new(o, "compute_capability", json_null());
    }
    return o;
}

static void route_info(http_request *req, void *ctx)
{
    app *a = ctx;
    const build_info *b = build_info_get();
    json_t *devices = json_array();
    for (int i = 0; devices && i < a->ndevices; i++)
        json_array_append_new(devices, device_json(a, &a->devices[i]));
    sampling_stats ss;
    sampling_get_stats(a->sampling, &ss);
    json_t *body = json_pack("{s:s, s:s, s:s, s:{s:s, s:s, s:b, s:b}, s:o, s:{s:I, s:I, s:I, s:I}}",
                             "name", "giant", "version", b->version, "git_commit", b->git_commit,
                             "build", "type", b->build_type, "compiler", b->compiler, "cuda",
                             b->cuda, "sanitizers", b->sanitizers, "devices", devices,
                             "sampling", "requests", (json_int_t)ss.requests, "batches",
                             (json_int_t)ss.batches, "showers", (json_int_t)ss.showers,
                             "loads", (json_int_t)ss.loads);
    if (!body) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "could not build the info document");
        return;
    }
    http_reply_json(req, 200, body);
}

static void route_openapi(http_request *req, void *ctx)
{
    (void)ctx;
    if (embed_openapi_count < 1) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "no OpenAPI document was embedded");
        return;
    }
    http_reply_static(req, 200, "application/json", embed_openapi[0].data,
                      embed_openapi[0].size);
}

/* ---------------------------------------------------------------------------
 * Prometheus metrics
 * ------------------------------------------------------------------------- */

/* giant_runs{status, device}: every status with "none" (never started) and
 * each device the service lists, zeros included, so a series does not
 * appear from nowhere; a device only the database names (a run trained
 * before the database moved machines) gets its own series too, at most
 * RUNS_EXTRA_DEVICES of them, the rest summed as "other". */
#define RUNS_STATUSES 5
#define RUNS_EXTRA_DEVICES 8
#define RUNS_DEVICES (APP_MAX_DEVICES + 1 + RUNS_EXTRA_DEVICES + 1)

static const char *const run_statuses[RUNS_STATUSES] = {"queued", "running", "succeeded",
                                                        "failed", "cancelled"};

typedef struct runs_table {
    char devices[RUNS_DEVICES][32];
    int ndev, extra;
    long long n[RUNS_STATUSES][RUNS_DEVICES];
} runs_table;

static int runs_table_device(runs_table *t, const char *device)
{
    for (int i = 0; i < t->ndev; i++)
        if (strcmp(t->devices[i], device) == 0)
            return i;
    if (strcmp(device, "other") != 0) {
        if (t->extra == RUNS_EXTRA_DEVICES)
            return runs_table_device(t, "other");
        t->extra++;
    }
    snprintf(t->devices[t->ndev], sizeof t->devices[0], "%s", device);
    return t->ndev++;
}

static void runs_table_add(void *user, const char *status, const char *device, long long n)
{
    runs_table *t = user;
    for (int s = 0; s < RUNS_STATUSES; s++)
        if (status && strcmp(status, run_statuses[s]) == 0)
            t->n[s][runs_table_device(t, device && device[0] ? device : "none")] += n;
}

/* The label of a listed device, as runs.device writes it: "cpu", "cuda:0". */
static void device_label(const gt_device_info *d, char *out, size_t cap)
{
    if (strcmp(d->kind, "cpu") == 0)
        snprintf(out, cap, "cpu");
    else
        snprintf(out, cap, "%s:%d", d->kind, d->index);
}

static void metrics_runs(metrics_buf *b, app *a)
{
    runs_table *t = calloc(1, sizeof *t);
    if (!t) {
        b->failed = 1;
        return;
    }
    snprintf(t->devices[t->ndev++], sizeof t->devices[0], "none");
    for (int i = 0; i < a->ndevices && i < APP_MAX_DEVICES; i++)
        device_label(&a->devices[i], t->devices[t->ndev++], sizeof t->devices[0]);
    runs_count_by_device(a->db, runs_table_add, t, NULL);     /* zeros when unreadable */
    metrics_family(b, "giant_runs", "gauge",
                   "Runs in the database, by status and by the device they last trained on "
                   "(none: never started).");
    for (int s = 0; s < RUNS_STATUSES; s++)
        for (int d = 0; d < t->ndev; d++) {
            char esc[80];
            metrics_escape(t->devices[d], esc, sizeof esc);
            metrics_printf(b, "giant_runs{status=\"%s\",device=\"%s\"} %lld\n", run_statuses[s],
                           esc, t->n[s][d]);
        }
    free(t);
}

/* Used and free memory of each listed device (gt_devices_memory): the CPU's
 * is the host's; a GPU's is read where the build has CUDA; a device whose
 * memory cannot be read has no series (no made-up zero). */
static void metrics_device_memory(metrics_buf *b, app *a)
{
    size_t used[APP_MAX_DEVICES], avail[APP_MAX_DEVICES];
    int ok[APP_MAX_DEVICES] = {0}, any = 0;
    for (int i = 0; i < a->ndevices && i < APP_MAX_DEVICES; i++) {
        gt_error err = {0};
        ok[i] = gt_devices_memory(&a->devices[i], &used[i], &avail[i], &err) == GT_OK;
        any |= ok[i];
    }
    if (!any)
        return;
    const char *names[2] = {"giant_device_memory_used_bytes", "giant_device_memory_free_bytes"};
    const char *help[2] = {"Memory in use on each device, bytes (cpu: the host's, MemTotal - "
                           "MemAvailable).",
                           "Memory free on each device, bytes (cpu: the host's MemAvailable)."};
    for (int k = 0; k < 2; k++) {
        metrics_family(b, names[k], "gauge", help[k]);
        for (int i = 0; i < a->ndevices && i < APP_MAX_DEVICES; i++) {
            if (!ok[i])
                continue;
            char label[48];
            device_label(&a->devices[i], label, sizeof label);
            metrics_printf(b, "%s{device=\"%s\"} %zu\n", names[k], label,
                           k ? avail[i] : used[i]);
        }
    }
}

/* Gauges read at scrape time from their owners (the database's counts, the
 * sampling worker, the HTTP layer); histograms kept by the HTTP layer, the
 * sampling worker and the scheduler.  README.md, "Metrics", documents each
 * with the alert it supports. */
static void metrics_gauges(metrics_buf *b, app *a)
{
    metrics_family(b, "giant_http_connections", "gauge",
                   "HTTP connections open now on the API's listener (idle keep-alive ones too).");
    metrics_printf(b, "giant_http_connections %d\n",
                   a->srv ? http_server_connections(a->srv) : 0);
    metrics_family(b, "giant_http_requests_in_flight", "gauge",
                   "Requests whose headers arrived and whose reply has not ended.");
    metrics_printf(b, "giant_http_requests_in_flight %d\n",
                   a->srv ? http_server_in_flight(a->srv) : 0);
    metrics_runs(b, a);
    metrics_device_memory(b, a);
    metrics_family(b, "giant_evaluations", "gauge",
                   "Evaluations waiting or running, by status.");
    metrics_printf(b, "giant_evaluations{status=\"queued\"} %lld\n"
                      "giant_evaluations{status=\"running\"} %lld\n",
                   evaluations_count(a->db, "queued"), evaluations_count(a->db, "running"));
    metrics_family(b, "giant_sampling_jobs_in_flight", "gauge",
                   "Sampling jobs queued or in a device batch (sample requests and evaluation "
                   "chunks).");
    metrics_printf(b, "giant_sampling_jobs_in_flight %d\n", sampling_in_flight(a->sampling));
    metrics_family(b, "giant_sample_bytes_in_flight", "gauge",
                   "Memory the sample requests in flight hold (showers and replies), bytes.");
    metrics_printf(b, "giant_sample_bytes_in_flight %lld\n", atomic_load(&a->sample_bytes));
    metrics_family(b, "giant_sample_bytes_limit", "gauge",
                   "--sample-memory-mb in bytes: past it sample requests get 503.");
    metrics_printf(b, "giant_sample_bytes_limit %lld\n", (long long)a->cfg.sample_memory_mb << 20);
}

static void metrics_counters(metrics_buf *b, app *a)
{
    const build_info *bi = build_info_get();
    metrics_family(b, "giant_build_info", "gauge",
                   "Always 1; the labels say which build is running.");
    metrics_printf(b, "giant_build_info{version=\"%s\",git_commit=\"%s\",build_type=\"%s\","
                      "cuda=\"%d\",sanitizers=\"%d\"} 1\n",
                   bi->version, bi->git_commit, bi->build_type, bi->cuda, bi->sanitizers);
    unsigned long long by[5] = {0};
    if (a->srv)
        http_server_counts(a->srv, by);
    metrics_family(b, "giant_http_responses_total", "counter",
                   "HTTP responses sent, by status class.");
    for (int i = 0; i < 5; i++)
        metrics_printf(b, "giant_http_responses_total{class=\"%dxx\"} %llu\n", i + 1, by[i]);
    sampling_stats ss;
    sampling_get_stats(a->sampling, &ss);
    metrics_family(b, "giant_sample_requests_total", "counter", "Sample requests served.");
    metrics_printf(b, "giant_sample_requests_total %llu\n", ss.requests);
    metrics_family(b, "giant_sample_batches_total", "counter",
                   "Device batches run for sample requests.");
    metrics_printf(b, "giant_sample_batches_total %llu\n", ss.batches);
    metrics_family(b, "giant_sample_showers_total", "counter", "Showers generated.");
    metrics_printf(b, "giant_sample_showers_total %llu\n", ss.showers);
    metrics_family(b, "giant_sampler_loads_total", "counter",
                   "Samplers loaded from checkpoints.");
    metrics_printf(b, "giant_sampler_loads_total %llu\n", ss.loads);
    metrics_keyed *per_run = sampling_by_source(a->sampling);
    if (per_run) {
        metrics_family(b, "giant_sample_requests_by_run_total", "counter",
                       "Sampling jobs by run id, or model:ID for an imported model; the first "
                       "32 since the start, the rest as run=\"other\".");
        metrics_write_keyed(b, "giant_sample_requests_by_run_total", "run", per_run, 0);
        metrics_family(b, "giant_sample_showers_by_run_total", "counter",
                       "Showers generated by run id, or model:ID for an imported model; the "
                       "first 32 since the start, the rest as run=\"other\".");
        metrics_write_keyed(b, "giant_sample_showers_by_run_total", "run", per_run, 1);
    }
    metrics_family(b, "giant_train_runs_started_total", "counter", "Runs the scheduler started.");
    metrics_printf(b, "giant_train_runs_started_total %lld\n", sched_runs_started(a->sched));
}

static void metrics_histograms(metrics_buf *b, app *a)
{
    if (a->srv)
        http_server_write_metrics(a->srv, b);
    const metrics_hist *h = sampling_seconds(a->sampling);
    if (h) {
        metrics_family(b, "giant_sample_job_duration_seconds", "histogram",
                       "Sampling jobs from submission to done: queue wait and device batch.");
        metrics_write_hist(b, "giant_sample_job_duration_seconds", "", h);
        metrics_family(b, "giant_sample_job_showers", "histogram", "Showers per sampling job.");
        metrics_write_hist(b, "giant_sample_job_showers", "", sampling_showers(a->sampling));
        metrics_family(b, "giant_sample_queue_wait_seconds", "histogram",
                       "Sampling jobs from submission to the start of the device batch that "
                       "serves them.");
        metrics_write_hist(b, "giant_sample_queue_wait_seconds", "",
                           sampling_queue_wait_seconds(a->sampling));
        metrics_family(b, "giant_sample_batch_seconds", "histogram",
                       "Wall time of each device batch of the sampling worker (a sampler load "
                       "included), however many jobs it merged.");
        metrics_write_hist(b, "giant_sample_batch_seconds", "",
                           sampling_batch_seconds(a->sampling));
    }
    if (sched_step_seconds(a->sched, 1)) {
        metrics_family(b, "giant_train_step_seconds", "histogram",
                       "Seconds per training step, by stage (the mean over each step report's "
                       "train.log_every steps).");
        metrics_write_hist(b, "giant_train_step_seconds", "stage=\"1\"",
                           sched_step_seconds(a->sched, 1));
        metrics_write_hist(b, "giant_train_step_seconds", "stage=\"2\"",
                           sched_step_seconds(a->sched, 2));
    }
}

static void route_metrics(http_request *req, void *ctx)
{
    app *a = ctx;
    metrics_buf b = {0};
    metrics_gauges(&b, a);
    metrics_counters(&b, a);
    metrics_histograms(&b, a);
    if (b.failed || !b.text) {
        free(b.text);
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
        return;
    }
    static const char *const headers[] = {"Cache-Control", "no-cache", "Vary", "Accept", NULL};
    /* OpenMetrics for a scraper that asks for it (Prometheus sends
     * application/openmetrics-text first in its Accept), else the classic
     * text format every scraper reads */
    const char *accept = http_header(req, "Accept");
    if (accept && strstr(accept, "application/openmetrics-text")) {
        metrics_buf om = {0};
        metrics_openmetrics(b.text, &om);
        free(b.text);
        if (om.failed || !om.text) {
            free(om.text);
            http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
            return;
        }
        http_reply_buffer(req, 200, METRICS_OPENMETRICS_TYPE, om.text, om.len, headers);
        return;
    }
    http_reply_buffer(req, 200, "text/plain; version=0.0.4", b.text, b.len, headers);
}

/* ---------------------------------------------------------------------------
 * A sampling replica's answer to the routes that need a trainer
 * ------------------------------------------------------------------------- */

/* 404, not 405 or 403: the route exists in the API but not on this
 * process, and a balancer that sends it here is misconfigured; the code
 * tells that apart from an unknown run or model. */
static void route_not_on_sampler(http_request *req, void *ctx)
{
    (void)ctx;
    http_reply_error(req, 404, ROUTES_E_NOT_ON_SAMPLER, NULL,
                     "%s %s is not served by a sampling replica (giant serve --role sampler):"
                     " send it to the trainer", http_method(req), http_path(req));
}

/* ---------------------------------------------------------------------------
 * The table: every route of the service, in one place
 *
 * The flags say who may call a route (auth.h): AUTH_OPEN needs no token,
 * AUTH_SCRAPE none unless --public-metrics 0, AUTH_TO_READ a reader or a
 * trainer, AUTH_TO_TRAIN a trainer, AUTH_TO_SAMPLE a sampler or a trainer,
 * AUTH_ANY_ROLE any token; admins may call everything, and a route with no
 * AUTH_ flag only they.  AUTH_JOB_TOKEN: only the ingest token of the
 * run's Slurm job (no role token, admin's neither).
 * ------------------------------------------------------------------------- */

/* The last column is what a sampling replica (--role sampler) answers with:
 * the same handler, another one (the run-scoped samples route serves the
 * model exported from that run), or NOT_SAMPLER (404 not_on_sampler,
 * before any body is read).  A replica serves samples, models and the
 * service's own routes; training, datasets, evaluations, tokens and the
 * dashboard live on the trainer. */
#define NOT_SAMPLER route_not_on_sampler

static const struct {
    const char *method, *pattern;
    http_handler handler;
    int flags;
    http_handler sampler;
} routes[] = {
    { "GET",  "/healthz",                         route_healthz,          AUTH_OPEN, route_healthz },
    { "GET",  "/readyz",                          route_readyz,           AUTH_OPEN, route_readyz },
    { "GET",  "/v1/info",                         route_info,             AUTH_ANY_ROLE, route_info },
    { "GET",  "/v1/openapi.json",                 route_openapi,          AUTH_ANY_ROLE, route_openapi },
    { "GET",  "/metrics",                         route_metrics,          AUTH_SCRAPE, route_metrics },
    /* routes_runs.c */
    { "POST", "/v1/runs",                         route_runs_create,      HTTP_JSON_BODY | AUTH_TO_TRAIN, NOT_SAMPLER },
    { "GET",  "/v1/runs",                         route_runs_list,        AUTH_ANY_ROLE, NOT_SAMPLER },
    { "GET",  "/v1/runs/{id}",                    route_runs_get,         AUTH_ANY_ROLE, NOT_SAMPLER },
    { "POST", "/v1/runs/{id}/cancel",             route_runs_cancel,      AUTH_TO_TRAIN, NOT_SAMPLER },
    { "POST", "/v1/runs/{id}/resume",             route_runs_resume,      AUTH_TO_TRAIN, NOT_SAMPLER },
    { "GET",  "/v1/runs/{id}/metrics",            route_runs_metrics,     AUTH_TO_READ, NOT_SAMPLER },
    /* routes_ingest.c: a Slurm job's trainer, with its own token */
    { "POST", "/v1/runs/{id}/ingest/start",       route_ingest_start,     HTTP_JSON_BODY | AUTH_JOB_TOKEN, NOT_SAMPLER },
    { "POST", "/v1/runs/{id}/ingest",             route_ingest_batch,     HTTP_JSON_BODY | AUTH_JOB_TOKEN, NOT_SAMPLER },
    { "GET",  "/v1/runs/{id}/ingest/checkpoints/{stage}", route_ingest_checkpoint_get, AUTH_JOB_TOKEN, NOT_SAMPLER },
    { "PUT",  "/v1/runs/{id}/ingest/checkpoints/{stage}/{step}", route_ingest_checkpoint_put, HTTP_FILE_BODY | AUTH_JOB_TOKEN, NOT_SAMPLER },
    { "PUT",  "/v1/runs/{id}/ingest/acceptance",  route_ingest_acceptance_put, HTTP_FILE_BODY | AUTH_JOB_TOKEN, NOT_SAMPLER },
    /* routes_events.c */
    { "GET",  "/v1/runs/{id}/events",             route_runs_events,      AUTH_TO_READ, NOT_SAMPLER },
    /* routes_runs.c */
    { "GET",  "/v1/runs/{id}/checkpoints",        route_runs_checkpoints, AUTH_TO_READ, NOT_SAMPLER },
    { "GET",  "/v1/runs/{id}/checkpoints/{ckpt}", route_runs_checkpoint,  AUTH_TO_READ, NOT_SAMPLER },
    /* routes_samples.c */
    { "POST", "/v1/runs/{id}/samples",            route_runs_samples,     HTTP_JSON_BODY | AUTH_TO_SAMPLE, route_replica_runs_samples },
    /* routes_models.c */
    { "GET",  "/v1/runs/{id}/model",              route_runs_model,       AUTH_TO_READ, NOT_SAMPLER },
    { "POST", "/v1/models",                       route_models_create,    HTTP_FILE_BODY | AUTH_TO_TRAIN, NOT_SAMPLER },
    { "GET",  "/v1/models",                       route_models_list,      AUTH_ANY_ROLE, route_models_list },
    { "GET",  "/v1/models/{name}",                route_models_get,       AUTH_ANY_ROLE, route_models_get },
    { "GET",  "/v1/models/{name}/file",           route_models_file,      AUTH_TO_READ, route_models_file },
    /* routes_samples.c */
    { "POST", "/v1/models/{name}/samples",        route_models_samples,   HTTP_JSON_BODY | AUTH_TO_SAMPLE, route_models_samples },
    /* routes_evaluations.c */
    { "POST", "/v1/runs/{id}/evaluations",        route_evaluations_create, HTTP_JSON_BODY | AUTH_TO_SAMPLE, NOT_SAMPLER },
    { "GET",  "/v1/runs/{id}/evaluations",        route_evaluations_list, AUTH_TO_READ, NOT_SAMPLER },
    { "GET",  "/v1/runs/{id}/evaluations/{eid}",  route_evaluations_get,  AUTH_TO_READ, NOT_SAMPLER },
    /* routes_datasets.c */
    { "POST", "/v1/datasets",                     route_datasets_create,  HTTP_JSON_BODY | AUTH_ADMIN_ONLY, NOT_SAMPLER },
    { "GET",  "/v1/datasets",                     route_datasets_list,    AUTH_TO_READ, NOT_SAMPLER },
    { "GET",  "/v1/datasets/{id}",                route_datasets_get,     AUTH_TO_READ, NOT_SAMPLER },
    /* routes_tokens.c */
    { "POST",   "/v1/tokens",                     route_tokens_create,    HTTP_JSON_BODY | AUTH_ADMIN_ONLY, NOT_SAMPLER },
    { "GET",    "/v1/tokens",                     route_tokens_list,      AUTH_ADMIN_ONLY, NOT_SAMPLER },
    { "DELETE", "/v1/tokens/{id}",                route_tokens_revoke,    AUTH_ADMIN_ONLY, NOT_SAMPLER },
    /* routes_ui.c: the dashboard's files; its API calls carry the token */
    { "GET",    "/",                              route_ui_index,         AUTH_OPEN, NOT_SAMPLER },
    { "GET",    "/ui/{file}",                     route_ui_file,          AUTH_OPEN, NOT_SAMPLER },
};

int routes_register_admin(http_router *r, gt_error *err)
{
    static const char *const admin[] = {"/healthz", "/readyz", "/metrics"};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        for (size_t k = 0; k < sizeof admin / sizeof admin[0]; k++) {
            if (strcmp(routes[i].pattern, admin[k]) != 0)
                continue;
            int rc = http_router_add(r, routes[i].method, routes[i].pattern,
                                     routes[i].handler, routes[i].flags, err);
            if (rc != GT_OK)
                return rc;
        }
    return GT_OK;
}

int routes_register_role(http_router *r, int sampler, gt_error *err)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        http_handler h = sampler ? routes[i].sampler : routes[i].handler;
        int flags = routes[i].flags;
        /* a refusal needs no body, whatever the route would take */
        if (h == NOT_SAMPLER)
            flags = (flags & ~(HTTP_JSON_BODY | HTTP_FILE_BODY)) | HTTP_NO_BODY;
        int rc = http_router_add(r, routes[i].method, routes[i].pattern, h, flags, err);
        if (rc != GT_OK)
            return rc;
    }
    return GT_OK;
}

int routes_register(http_router *r, gt_error *err)
{
    return routes_register_role(r, 0, err);
}
