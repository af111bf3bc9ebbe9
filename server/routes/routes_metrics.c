/* routes_metrics: the Prometheus exposition (routes_handlers.h). */
#include "routes_handlers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "build_info.h"
#include "evaluations.h"
#include "metrics.h"
#include "runs.h"
#include "sampling.h"
#include "scheduler.h"

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
 * sampling worker and the scheduler.  docs/metrics.md documents each
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

void route_metrics(http_request *req, void *ctx)
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
