#include "report.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cmd_train_dist.h"
#include "giant_client.h"
#include "gt_clock.h"
#include "gt_sha256.h"
#include "log.h"
#include "model_accept.h"
#include "model_config.h"
#include "model_stage.h"
#include "numfmt.h"
#include "runs.h"

/* A request is sent again for this long before the trainer gives up. */
#define REPORT_RETRY_S 120.0
#define REPORT_FLUSH_S 2.0

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    (void)sig;
    stop_signal = 1;
}

typedef struct reporter {
    gc_client *c;
    int64_t run;
    const model_config *cfg;
    json_t *metrics;           /* the batch being filled                    */
    json_t *validations;
    json_t *progress;          /* the newest, or NULL                       */
    double last_flush;
    int stop;                  /* the service said: stop (409, cancel)      */
    int failed;                /* a request failed for good                 */
    gt_error err;
    int quiet;
} reporter;

static double unix_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

/* Sends a request, again while it fails on the way (no reply, 5xx, 429):
 * the same bytes, so the service's idempotency keeps it recorded once.
 * GT_OK with *out filled for any other reply. */
static int send(reporter *r, const char *method, const char *path, const char *ctype,
                const void *body, size_t len, const char *const *headers, gc_response *out)
{
    double until = gt_clock_s() + REPORT_RETRY_S, pause = 0.5;
    for (;;) {
        gt_error err = {0};
        memset(out, 0, sizeof *out);
        int rc = gc_request(r->c, method, path, ctype, body, len, headers, out, &err);
        int again = rc != GT_OK || out->status >= 500 || out->status == 429;
        if (!again)
            return GT_OK;
        if (gt_clock_s() + pause > until || (stop_signal && rc == GT_OK)) {
            if (rc == GT_OK)
                gc_check(out, &r->err);
            else
                r->err = err;
            gc_response_free(out);
            return r->err.code ? r->err.code : GT_EIO;
        }
        log_msg(LOG_WARN, "report", "run=%lld path=%s retry_in_s=%.1f error=\"%s\"",
                (long long)r->run, path, pause,
                rc ? err.message : out->status >= 500 ? "server error" : "rate limited");
        gc_response_free(out);
        struct timespec ts = {(time_t)pause, (long)((pause - (time_t)pause) * 1e9)};
        nanosleep(&ts, NULL);
        pause = pause * 2 > 10 ? 10 : pause * 2;
    }
}

/* Reads a JSON reply; a 409 (the run ended or is being cancelled) sets
 * stop, any other non-2xx is a failure. */
static json_t *reply_json(reporter *r, gc_response *res)
{
    json_t *j = NULL;
    if (res->status == 409) {
        gc_check(res, &r->err);
        r->stop = 1;
    } else if (gc_check(res, &r->err) == GT_OK) {
        j = json_loadb(res->body ? res->body : "", res->len, 0, NULL);
    } else {
        r->failed = 1;
    }
    gc_response_free(res);
    return j;
}

static int flush(reporter *r, const char *end, const char *error)
{
    if (json_array_size(r->metrics) == 0 && json_array_size(r->validations) == 0 &&
        !r->progress && !end)
        return GT_OK;
    json_t *b = json_pack("{s:O, s:O}", "metrics", r->metrics, "validations", r->validations);
    if (r->progress)
        json_object_set(b, "progress", r->progress);
    if (end)
        json_object_set_new(b, "status", json_string(end));
    if (error)
        json_object_set_new(b, "error", json_string(error));
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    if (!text)
        return gt_error_set(&r->err, GT_ENOMEM, "out of memory");
    char path[96];
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest", (long long)r->run);
    gc_response res;
    int rc = send(r, "POST", path, "application/json", text, strlen(text), NULL, &res);
    free(text);
    if (rc) {
        r->failed = 1;
        return rc;
    }
    json_t *j = reply_json(r, &res);
    if (json_is_true(json_object_get(j, "cancel_requested")))
        r->stop = 1;
    json_decref(j);
    json_array_clear(r->metrics);
    json_array_clear(r->validations);
    json_decref(r->progress);
    r->progress = NULL;
    r->last_flush = gt_clock_s();
    return r->failed ? GT_EIO : GT_OK;
}

static void add_metric(reporter *r, int stage, long long step, const char *name, double v,
                       double t)
{
    json_t *e = json_pack("{s:s, s:s, s:I}", "stage", runs_stage_name(stage), "name", name,
                          "step", (json_int_t)step);
    json_object_set_new(e, "value", isfinite(v) ? json_real(v) : json_null());
    json_object_set_new(e, "time", json_real(t));
    json_array_append_new(r->metrics, e);
}

static int hook_step(void *user, const model_step_report *s)
{
    reporter *r = user;
    int n = 4 + (s->n_experts > 0 ? 2 + s->n_experts : 0);
    if ((int)json_array_size(r->metrics) + n > REPORT_MAX_METRICS && flush(r, NULL, NULL))
        return 1;
    double t = unix_s();
    add_metric(r, s->stage, s->step, "loss", s->loss, t);
    add_metric(r, s->stage, s->step, "grad_norm", s->grad_norm, t);
    add_metric(r, s->stage, s->step, "lr", s->lr, t);
    add_metric(r, s->stage, s->step, "samples_per_s", s->samples_per_s, t);
    if (s->n_experts > 0) {
        add_metric(r, s->stage, s->step, "balance_loss", s->balance_loss, t);
        add_metric(r, s->stage, s->step, "entropy_loss", s->entropy_loss, t);
        for (int e = 0; e < s->n_experts && e < NN_TRUNK_MAX_EXPERTS; e++) {
            char name[16];
            snprintf(name, sizeof name, "load_%d", e);
            add_metric(r, s->stage, s->step, name, s->load[e], t);
        }
    }
    long long done = (s->stage == 2 ? r->cfg->steps1 : 0) + s->step;
    json_decref(r->progress);
    r->progress = json_pack("{s:s, s:I, s:I}", "stage", runs_stage_name(s->stage), "step",
                            (json_int_t)s->step, "done_steps", (json_int_t)done);
    if (!r->quiet)
        fprintf(stderr, "stage %d step %lld/%lld loss %.5f\n", s->stage, s->step, s->total,
                (double)s->loss);
    if (gt_clock_s() - r->last_flush >= REPORT_FLUSH_S && flush(r, NULL, NULL))
        return 1;
    return r->stop;
}

static int hook_validation(void *user, int stage, long long step, float val)
{
    reporter *r = user;
    json_t *e = json_pack("{s:s, s:I, s:i, s:f}", "stage", runs_stage_name(stage), "step",
                          (json_int_t)step, "n_samples", r->cfg->val_size, "time", unix_s());
    json_object_set_new(e, "loss", isfinite(val) ? json_real(val) : json_null());
    json_array_append_new(r->validations, e);
    if (json_array_size(r->validations) >= 100 && flush(r, NULL, NULL))
        return 1;
    return r->stop;
}

static int hook_checkpoint(void *user, int stage, long long step, float val, const void *blob,
                           size_t len)
{
    reporter *r = user;
    /* what led up to it first, so a resumed run finds its metrics too */
    if (flush(r, NULL, NULL))
        return 1;
    char sum[65], hdr[100], path[160], vl[32];
    gt_sha256_hex(blob, len, sum);
    snprintf(hdr, sizeof hdr, "X-Checksum-SHA256: %s", sum);
    if (isfinite(val))
        numfmt_float(vl, sizeof vl, val);
    else
        snprintf(vl, sizeof vl, "nan");
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest/checkpoints/%s/%lld?val_loss=%s",
             (long long)r->run, runs_stage_name(stage), step, vl);
    const char *headers[] = {hdr, NULL};
    gc_response res;
    if (send(r, "PUT", path, "application/octet-stream", blob, len, headers, &res)) {
        r->failed = 1;
        return 1;
    }
    json_decref(reply_json(r, &res));
    if (!r->failed && !r->quiet)
        fprintf(stderr, "stage %d step %lld: checkpoint uploaded (%zu bytes, sha256 %.12s)\n",
                stage, step, len, sum);
    return r->failed || r->stop;
}

static int hook_stop(void *user)
{
    reporter *r = user;
    return stop_signal || r->stop;
}

static void hook_phase(void *user, const char *phase)
{
    reporter *r = user;
    if (!r->quiet)
        fprintf(stderr, "%s\n", phase);
}

/* A checkpoint of a stage: its newest, or with best its best (?best=1),
 * its bytes checked against the sha256 sent with them and, when expect is
 * given, against that. */
static int fetch(reporter *r, const char *stage, int best, const char *expect, void **blob,
                 size_t *len)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest/checkpoints/%s%s", (long long)r->run,
             stage, best ? "?best=1" : "");
    gc_response res;
    if (send(r, "GET", path, NULL, NULL, 0, NULL, &res))
        return r->err.code;
    if (gc_check(&res, &r->err)) {
        gc_response_free(&res);
        return r->err.code;
    }
    char sum[65];
    gt_sha256_hex(res.body, res.len, sum);
    if (strcmp(sum, res.checksum) != 0 || (expect && strcmp(sum, expect) != 0)) {
        gc_response_free(&res);
        return gt_error_set(&r->err, GT_ECHECKSUM,
                            "the %s checkpoint came with another sha256 than it has", stage);
    }
    *blob = res.body;           /* ownership moves to the caller */
    *len = res.len;
    res.body = NULL;
    gc_response_free(&res);
    return GT_OK;
}

/* The newest checkpoint of a stage, as the start reply describes it. */
static int fetch_checkpoint(reporter *r, const char *stage, const json_t *want, void **blob,
                            size_t *len)
{
    if (!json_is_object(want))
        return GT_OK;
    const char *expect = json_string_value(json_object_get(want, "sha256"));
    if (!expect)
        return gt_error_set(&r->err, GT_EFORMAT, "the start reply names no sha256 of the %s "
                                                 "checkpoint", stage);
    return fetch(r, stage, 0, expect, blob, len);
}

/* model.accept in a job: the test trained here, as the service's own
 * worker trains it (server/jobs/scheduler.c), against the run's best
 * checkpoints as the service holds them, then uploaded with the sha256 of
 * both, which the service checks against its best pair (a 409 when they
 * are not: the run ended or was cancelled meanwhile).  The job trains it
 * whenever training ends: a job requeued after the upload trains it again,
 * and the upload replaces it. */
static int train_acceptance(reporter *r, const report_args *a, nn_backend *b,
                            const model_config *cfg, gt_error *err)
{
    void *ck[2] = {NULL, NULL}, *blob = NULL;
    size_t cl[2] = {0, 0}, len = 0;
    int rc;
    if ((rc = fetch(r, "energy", 1, NULL, &ck[0], &cl[0])) ||
        (rc = fetch(r, "shower", 1, NULL, &ck[1], &cl[1]))) {
        r->failed = 1;
        goto out;
    }
    uint8_t sums[2][32];
    for (int s = 0; s < 2; s++)
        gt_sha256(ck[s], cl[s], sums[s]);
    model_accept_report rep;
    if ((rc = model_accept_for_run(b, cfg, a->data_dir, ck[0], cl[0], ck[1], cl[1],
                                   (const uint8_t(*)[32])sums, hook_stop, r, &blob, &len, &rep,
                                   err))) {
        if (rc != GT_ECANCELLED)
            gt_error_wrap(err, "the acceptance test");
        goto out;
    }
    char sum[65], hdr[100], path[128];
    gt_sha256_hex(blob, len, sum);
    snprintf(hdr, sizeof hdr, "X-Checksum-SHA256: %s", sum);
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest/acceptance?showers=%lld",
             (long long)r->run, (long long)rep.showers);
    const char *headers[] = {hdr, NULL};
    gc_response res;
    if ((rc = send(r, "PUT", path, "application/octet-stream", blob, len, headers, &res))) {
        r->failed = 1;
        goto out;
    }
    json_decref(reply_json(r, &res));
    if (r->stop)
        rc = GT_ECANCELLED;
    else if (r->failed)
        rc = r->err.code ? r->err.code : GT_EIO;
    else if (!r->quiet)
        fprintf(stderr, "acceptance test uploaded: %lld showers, AUC %.4f, acceptance %.4f "
                "(%.0f s generating, %.0f s training)\n", (long long)rep.showers, rep.auc,
                rep.acceptance, rep.generate_s, rep.train_s);
out:
    free(ck[0]);
    free(ck[1]);
    free(blob);
    return rc;
}

/* POST .../ingest/start: the run's config and newest checkpoints, and the
 * run marked running on this node; NULL (r->stop, or r->err) when not. */
static json_t *start_call(reporter *r, const report_args *a, const char *host)
{
    char body[512], path[96];
    const char *job = getenv("SLURM_JOB_ID");
    json_t *hello = json_pack("{s:s}", "node", host);
    if (a->device && a->device[0])
        json_object_set_new(hello, "device", json_string(a->device));
    if (job && atoll(job) > 0)
        json_object_set_new(hello, "job_id", json_integer(atoll(job)));
    char *ht = json_dumps(hello, JSON_COMPACT);
    json_decref(hello);
    snprintf(body, sizeof body, "%s", ht ? ht : "{}");
    free(ht);
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest/start", (long long)a->run);
    gc_response res;
    if (send(r, "POST", path, "application/json", body, strlen(body), NULL, &res))
        return NULL;
    return reply_json(r, &res);
}

int report_train(const report_args *a)
{
    reporter r = {.run = a->run, .quiet = a->quiet};
    r.metrics = json_array();
    r.validations = json_array();
    model_config cfg;
    nn_backend *b = NULL;
    dist_comm *comm = NULL;
    void *ck1 = NULL, *ck2 = NULL;
    size_t l1 = 0, l2 = 0;
    int status = 1, rc;
    char field[128];
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    if ((rc = gc_open(&r.c, a->url, &r.err)) || (rc = gc_set_token(r.c, a->token, &r.err)))
        goto out;
    gc_set_retries(r.c, 0);     /* send() paces its own retries */

    char host[128] = "";
    gethostname(host, sizeof host - 1);
    json_t *start = NULL;
    if (a->start_file) {
        json_error_t je;
        if (!(start = json_load_file(a->start_file, 0, &je))) {
            rc = gt_error_set(&r.err, GT_EIO, "reading the start reply %s: %s", a->start_file,
                              je.text);
            goto report_failure;
        }
    } else if (!(start = start_call(&r, a, host))) {
        status = r.stop ? 143 : 1;
        goto out;
    }
    json_t *conf = json_object_get(start, "config");
    json_t *cks = json_object_get(start, "checkpoints");
    if (json_is_object(conf)) {
        /* the section that sent it here means nothing to the engine's run;
         * the run's config as the service recorded it (a service of this
         * version sends it versioned, an older one as it was stored) */
        json_object_del(conf, "executor");
        rc = model_config_from_stored_json(conf, &cfg, field, sizeof field, &r.err);
    } else {
        rc = gt_error_set(&r.err, GT_EFORMAT, "the service sent no config");
    }
    if (rc == GT_OK) {
        cfg.executor.kind = MODEL_EXEC_LOCAL;
        rc = fetch_checkpoint(&r, "energy", json_object_get(cks, "energy"), &ck1, &l1);
    }
    if (rc == GT_OK)
        rc = fetch_checkpoint(&r, "shower", json_object_get(cks, "shower"), &ck2, &l2);
    json_decref(start);
    if (rc)
        goto report_failure;
    if (a->device && a->device[0])
        snprintf(cfg.device, sizeof cfg.device, "%s", a->device);
    r.cfg = &cfg;
    if ((rc = model_open_backend(&cfg, a->bf16, &b, &r.err)))
        goto report_failure;
    if (!a->quiet)
        fprintf(stderr, "run %lld on %s: resuming from stage 1 %s, stage 2 %s\n",
                (long long)a->run, host, ck1 ? "checkpoint" : "start",
                ck2 ? "checkpoint" : "start");
    r.last_flush = gt_clock_s();
    model_run_hooks hooks = {&r, hook_step, hook_validation, hook_checkpoint, hook_stop,
                             hook_phase};
    model_resume rs = {ck1, l1, ck2, l2};
    gt_error terr = {0};
    if (a->spec && a->spec->size > 1) {
        /* rank 0 of the group: its state (the checkpoints) is broadcast
         * to the others at each stage's start */
        if ((rc = dist_open(a->spec, b, &comm, &r.err)))
            goto report_failure;
        rc = model_run_train_dist(&cfg, b, a->data_dir, &hooks, &rs, comm, &terr);
    } else {
        rc = model_run_train(&cfg, b, a->data_dir, &hooks, &rs, &terr);
    }
    if (rc == GT_OK && cfg.accept.enabled && flush(&r, NULL, NULL) == GT_OK) {
        hook_phase(&r, "training the acceptance test");
        rc = train_acceptance(&r, a, b, &cfg, &terr);
    } else if (rc == GT_OK && cfg.accept.enabled) {
        rc = r.stop ? GT_ECANCELLED : GT_EIO;
    }
    if (rc == GT_OK) {
        if (flush(&r, "succeeded", NULL) == GT_OK && !r.stop) {
            status = 0;
            if (!a->quiet)
                fprintf(stderr, "run %lld succeeded and reported\n", (long long)a->run);
        }
        goto out;
    }
    if (rc == GT_ECANCELLED && !r.failed) {
        /* a signal or the service: what is recorded stays; the job's end
         * (cancelled, requeued) is Slurm's to tell the service */
        if (!r.stop)
            flush(&r, NULL, NULL);
        status = 143;
        goto out;
    }
    if (!r.failed)
        r.err = terr;
report_failure:
    if (!r.stop) {
        char why[600];
        snprintf(why, sizeof why, "%s", r.err.message);
        r.failed = 0;
        json_array_clear(r.metrics);
        json_array_clear(r.validations);
        flush(&r, "failed", why);
        snprintf(r.err.message, sizeof r.err.message, "%.500s", why);
    }
out:
    if (status == 1)
        fprintf(stderr, "giant train: run %lld: %s\n", (long long)a->run,
                r.err.message[0] ? r.err.message : "failed");
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    free(ck1);
    free(ck2);
    dist_destroy(comm);
    nn_backend_close(b);
    json_decref(r.metrics);
    json_decref(r.validations);
    json_decref(r.progress);
    gc_close(r.c);
    return status;
}

int report_launch(const report_args *a, int n, int gpus, int verbose)
{
    reporter r = {.run = a->run, .quiet = a->quiet};
    r.metrics = json_array();
    r.validations = json_array();
    int status = 1;
    char host[128] = "", dir[4096] = "", start_path[4200] = "", config_path[4200] = "";
    json_t *start = NULL, *conf = NULL;
    gethostname(host, sizeof host - 1);
    if (gc_open(&r.c, a->url, &r.err) || gc_set_token(r.c, a->token, &r.err))
        goto out;
    gc_set_retries(r.c, 0);
    if (!(start = start_call(&r, a, host))) {
        status = r.stop ? 143 : 1;
        goto out;
    }
    /* the reply for rank 0 and the config (its executor section, which
     * means nothing to the engine, left out) for the others, private */
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/giant-report.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    conf = json_deep_copy(json_object_get(start, "config"));
    if (json_is_object(conf))
        json_object_del(conf, "executor");
    if (!mkdtemp(dir)) {
        gt_error_set(&r.err, GT_EIO, "making %s: %s", dir, strerror(errno));
        dir[0] = '\0';
    } else {
        snprintf(start_path, sizeof start_path, "%s/start.json", dir);
        snprintf(config_path, sizeof config_path, "%s/config.json", dir);
        if (!json_is_object(conf))
            gt_error_set(&r.err, GT_EFORMAT, "the service sent no config");
        else if (json_dump_file(start, start_path, JSON_COMPACT) ||
                 json_dump_file(conf, config_path, JSON_COMPACT))
            gt_error_set(&r.err, GT_EIO, "writing the start reply into %s", dir);
    }
    if (r.err.code) {
        flush(&r, "failed", r.err.message);
        goto out;
    }
    /* rank 0 reads the token where a job's trainer always does */
    setenv("GIANT_REPORT_TOKEN", a->token, 1);
    cmd_train_spawn sp = {
        .run = a->run, .n = n, .gpus = gpus, .data_dir = a->data_dir,
        .device = gpus ? NULL : a->device, .allow_emulation = a->bf16 == MODEL_BF16_EMULATE,
        .quiet = a->quiet, .verbose = verbose, .report_url = a->url, .start_file = start_path,
        .config_file = config_path,
    };
    status = cmd_train_spawn_ranks(&sp);
    if (sp.failure[0]) {
        /* rank 0 was killed, or stopped because another rank failed: the
         * run's end is the launcher's to report */
        r.failed = 0;
        json_array_clear(r.metrics);
        json_array_clear(r.validations);
        flush(&r, "failed", sp.failure);
        snprintf(r.err.message, sizeof r.err.message, "%s", sp.failure);
        if (status == 0 || status == 143)
            status = 1;
    }
out:
    if (status == 1)
        fprintf(stderr, "giant train: run %lld: %s\n", (long long)a->run,
                r.err.message[0] ? r.err.message : "failed");
    if (start_path[0])
        unlink(start_path);
    if (config_path[0])
        unlink(config_path);
    if (dir[0])
        rmdir(dir);
    json_decref(start);
    json_decref(conf);
    json_decref(r.metrics);
    json_decref(r.validations);
    json_decref(r.progress);
    gc_close(r.c);
    return status;
}
