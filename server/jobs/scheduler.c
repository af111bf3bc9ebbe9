#include "scheduler.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include "gt_sha256.h"
#include "log.h"
#include "model_accept.h"
#include "model_config.h"
#include "model_run.h"
#include "runs.h"
#include "worker_thread.h"

/* ---------------------------------------------------------------------------
 * One run, start to end: shared by the worker and `giant train`
 * ------------------------------------------------------------------------- */

typedef struct train_ctx {
    store *db;
    int64_t run;
    const model_config *cfg;
    const char *precision;
    long long total;
    const sched_observer *obs;
    gt_error err;       /* first database failure, which stops training */
    int failed;
} train_ctx;

static int hook_step(void *user, const model_step_report *r)
{
    train_ctx *c = user;
    long long done = (r->stage == 2 ? c->cfg->steps1 : 0) + r->step;
    if (runs_record_step(c->db, c->run, r, &c->err) ||
        runs_set_progress(c->db, c->run, r->stage, r->step, done, c->total, &c->err)) {
        c->failed = 1;
        return 1;
    }
    if (c->obs && c->obs->on_step)
        c->obs->on_step(c->obs->user, r, done, c->total);
    return 0;
}

static int hook_validation(void *user, int stage, long long step, float val)
{
    train_ctx *c = user;
    if (runs_record_validation(c->db, c->run, stage, step, val, c->cfg->val_size, &c->err)) {
        c->failed = 1;
        return 1;
    }
    if (c->obs && c->obs->on_validation)
        c->obs->on_validation(c->obs->user, stage, step, val);
    return 0;
}

static int hook_checkpoint(void *user, int stage, long long step, float val, const void *blob,
                           size_t len)
{
    train_ctx *c = user;
    if (runs_record_checkpoint(c->db, c->run, stage, step, val, c->precision, blob, len,
                               c->cfg->keep_checkpoints, NULL, &c->err)) {
        c->failed = 1;
        return 1;
    }
    return 0;
}

static int hook_stop(void *user)
{
    train_ctx *c = user;
    return c->obs && c->obs->should_stop ? c->obs->should_stop(c->obs->user) : 0;
}

static void hook_phase(void *user, const char *phase)
{
    train_ctx *c = user;
    if (c->obs && c->obs->on_phase)
        c->obs->on_phase(c->obs->user, phase);
}

/* model.accept: the run's acceptance test, trained against its best
 * checkpoints once both stages are done, unless one for them is stored
 * already (a run resumed after its test was made). */
static int train_acceptance(store *db, int64_t run, const model_config *cfg, nn_backend *b,
                            const char *data_dir, train_ctx *ctx, gt_error *err)
{
    void *ck1 = NULL, *ck2 = NULL, *blob = NULL;
    size_t l1 = 0, l2 = 0, len = 0;
    gt_error none;
    if (runs_load_acceptance(db, run, &blob, &len, &none) == GT_OK) {
        free(blob);
        return GT_OK;
    }
    hook_phase(ctx, "training the acceptance test");
    model_accept_report rep;
    int rc;
    if ((rc = runs_load_checkpoint(db, run, 1, 1, &ck1, &l1, NULL, err)) ||
        (rc = runs_load_checkpoint(db, run, 2, 1, &ck2, &l2, NULL, err)))
        goto out;
    /* the test names its checkpoints by sha256: an exported file checks it
     * against the checkpoints it carries */
    uint8_t sums[2][32];
    char hex[2][65];
    const char *named[2] = {hex[0], hex[1]};
    gt_sha256(ck1, l1, sums[0]);
    gt_sha256(ck2, l2, sums[1]);
    gt_sha256_hex(ck1, l1, hex[0]);
    gt_sha256_hex(ck2, l2, hex[1]);
    if ((rc = model_accept_for_run(b, cfg, data_dir, ck1, l1, ck2, l2,
                                   (const uint8_t(*)[32])sums, hook_stop, ctx, &blob, &len,
                                   &rep, err)) ||
        (rc = runs_record_acceptance(db, run, named, rep.showers, rep.auc, rep.acceptance,
                                     blob, len, err)))
        goto out;
    log_msg(LOG_INFO, "run", "id=%lld acceptance_test=1 showers=%lld auc=%.4f "
            "acceptance=%.4f generate_s=%.1f train_s=%.1f", (long long)run,
            (long long)rep.showers, rep.auc, rep.acceptance, rep.generate_s, rep.train_s);
out:
    if (rc && rc != GT_ECANCELLED)
        gt_error_wrap(err, "the acceptance test");
    free(ck1);
    free(ck2);
    free(blob);
    return rc;
}

int sched_train_run(store *db, int64_t run, const char *data_dir, const char *device,
                    model_bf16_policy bf16, const sched_observer *obs, gt_error *err)
{
    return sched_train_run_dist(db, run, data_dir, device, bf16, obs, NULL, err);
}

int sched_train_run_dist(store *db, int64_t run, const char *data_dir, const char *device,
                         model_bf16_policy bf16, const sched_observer *obs,
                         const dist_spec *spec, gt_error *err)
{
    dist_comm *comm = NULL;
    model_config cfg;
    nn_backend *b = NULL;
    void *ck1 = NULL, *ck2 = NULL;
    size_t l1 = 0, l2 = 0;
    char *config_text = NULL;
    int rc = runs_config(db, run, &config_text, err);
    if (rc)
        return rc;
    rc = runs_parse_config(config_text, &cfg, err);
    free(config_text);
    if (rc == GT_OK && obs && obs->refuse_config && obs->refuse_config(obs->user, &cfg, err))
        rc = err->code ? err->code : GT_EINVAL;
    if (rc) {
        runs_set_status(db, run, "failed", err->message, NULL, NULL);
        goto out;
    }
    if (device && device[0])
        snprintf(cfg.device, sizeof cfg.device, "%s", device);
    /* The newest checkpoint of each stage, when a previous attempt left one. */
    gt_error ignored;
    runs_load_checkpoint(db, run, 1, 0, &ck1, &l1, NULL, &ignored);
    runs_load_checkpoint(db, run, 2, 0, &ck2, &l2, NULL, &ignored);
    if ((rc = model_open_backend(&cfg, bf16, &b, err))) {
        runs_set_status(db, run, "failed", err->message, NULL, NULL);
        goto out;
    }
    char devname[48];
    if (strcmp(b->name, "cpu") == 0)
        snprintf(devname, sizeof devname, "cpu");
    else
        snprintf(devname, sizeof devname, "%s:%d", b->name, b->device);
    if (spec && (rc = dist_open(spec, b, &comm, err))) {
        gt_error_wrap(err, "joining the %d ranks", spec->size);
        runs_set_status(db, run, "failed", err->message, NULL, NULL);
        goto out;
    }
    if (spec && spec->size > 1) {
        size_t n = strlen(devname);
        snprintf(devname + n, sizeof devname - n, " x%d", spec->size);
    }
    if ((rc = runs_set_status(db, run, "running", NULL, devname, err)))
        goto out;
    log_msg(LOG_INFO, "run", "id=%lld status=running device=%s resume=%d", (long long)run,
            devname, ck1 || ck2);
    train_ctx ctx = {.db = db, .run = run, .cfg = &cfg, .precision = cfg.bf16 ? "bf16" : "fp32",
                     .total = cfg.steps1 + cfg.steps2, .obs = obs};
    model_run_hooks hooks = {&ctx, hook_step, hook_validation, hook_checkpoint, hook_stop,
                             hook_phase};
    model_resume rs = {ck1, l1, ck2, l2};
    rc = model_run_train_dist(&cfg, b, data_dir, &hooks, &rs, comm, err);
    if (ctx.failed) {
        *err = ctx.err;
        rc = ctx.err.code ? ctx.err.code : GT_EIO;
    }
    if (rc == GT_OK && cfg.accept.enabled)
        rc = train_acceptance(db, run, &cfg, b, data_dir, &ctx, err);
    if (rc == GT_OK) {
        rc = runs_set_status(db, run, "succeeded", NULL, NULL, err);
    } else if (rc == GT_ECANCELLED && !ctx.failed) {
        /* the caller decides: cancelled, or queued again at shutdown */
    } else {
        runs_set_status(db, run, "failed", err->message, NULL, NULL);
    }
out:
    dist_destroy(comm);
    free(ck1);
    free(ck2);
    nn_backend_close(b);
    return rc;
}

/* ---------------------------------------------------------------------------
 * The worker
 * ------------------------------------------------------------------------- */

struct sched {
    store *db;
    char data_dir[1024];
    char device[32];
    model_bf16_policy bf16;
    worker_thread w;
    atomic_llong started;
    int64_t current;           /* run being trained, 0 = none (under w.mu) */
    metrics_hist step_seconds[2];  /* per stage                            */
};

typedef struct worker_obs {
    sched *s;
    int64_t run;
    int cancel;                /* why it stopped: 1 cancel, 0 shutdown */
    int last_stage;            /* the previous step report: the step time */
    long long last_step;       /* is the time between two reports over    */
    struct timespec last_at;   /* the steps between them                  */
} worker_obs;

/* Step reports come every train.log_every steps: each observes the mean
 * time of the steps since the previous report of the same stage (a
 * validation or checkpoint inside the interval counts in it). */
static void worker_step(void *user, const model_step_report *r, long long done,
                        long long total)
{
    (void)done;
    (void)total;
    worker_obs *w = user;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (w->last_stage == r->stage && r->step > w->last_step && (r->stage == 1 || r->stage == 2)) {
        double s = (double)(now.tv_sec - w->last_at.tv_sec) +
                   1e-9 * (double)(now.tv_nsec - w->last_at.tv_nsec);
        metrics_hist_observe(&w->s->step_seconds[r->stage - 1],
                             s / (double)(r->step - w->last_step));
    }
    w->last_stage = r->stage;
    w->last_step = r->step;
    w->last_at = now;
}

static int worker_should_stop(void *user)
{
    worker_obs *w = user;
    if (atomic_load(&w->s->w.stopping))
        return 1;
    if (runs_cancel_requested(w->s->db, w->run)) {
        w->cancel = 1;
        return 1;
    }
    return 0;
}

static void worker_phase(void *user, const char *phase)
{
    worker_obs *w = user;
    log_msg(LOG_INFO, "run", "id=%lld phase=\"%s\"", (long long)w->run, phase);
}

/* A recorded run whose dataset.path is absolute: the service refuses such a
 * path at submission (files_allowed), but a run recorded before it did, or
 * written by hand, would read any file of the machine.  The service fails
 * it with the reason; `giant train --resume` on the command line, whose
 * user owns the paths, can still train it. */
static int worker_refuse_config(void *user, const model_config *cfg, gt_error *err)
{
    const worker_obs *w = user;
    if (cfg->dataset_path[0] != '/')
        return 0;
    return gt_error_set(err, GT_EINVAL,
                        "dataset.path: an absolute path is refused by the service (the run was "
                        "recorded before it refused them at submission); train it with giant "
                        "train --resume %lld, or submit it again with a path inside the data "
                        "directory",
                        (long long)w->run);
}

static void *worker_main(void *arg)
{
    sched *s = arg;
    while (!atomic_load(&s->w.stopping)) {
        int64_t run = 0;
        gt_error qerr = {0};
        int found = runs_oldest(s->db, "queued", &run, &qerr);
        if (found != GT_OK) {
            if (found != GT_ENOTFOUND)
                log_msg(LOG_ERROR, "sched", "error=\"%s\"", qerr.message);
            /* Woken by sched_kick; the timeout is a safety net only. */
            worker_thread_nap(&s->w, 1);
            continue;
        }
        pthread_mutex_lock(&s->w.mu);
        s->current = run;
        pthread_mutex_unlock(&s->w.mu);
        /* sched_cancel holds mu while it cancels a queued run, so after
         * this re-read either the run is ours or it was cancelled. */
        char st_now[16] = "";
        if (runs_status(s->db, run, st_now, NULL) != GT_OK || strcmp(st_now, "queued") != 0) {
            pthread_mutex_lock(&s->w.mu);
            s->current = 0;
            pthread_mutex_unlock(&s->w.mu);
            continue;
        }
        atomic_fetch_add(&s->started, 1);
        worker_obs w = {s, run, 0, 0, 0, {0, 0}};
        sched_observer obs = {&w, worker_should_stop, worker_step, NULL, worker_phase,
                              worker_refuse_config};
        gt_error err = {0};
        int rc = sched_train_run(s->db, run, s->data_dir, s->device, s->bf16, &obs, &err);
        if (rc == GT_ECANCELLED && w.cancel) {
            runs_set_status(s->db, run, "cancelled", "cancelled on request", NULL, NULL);
            log_msg(LOG_INFO, "run", "id=%lld status=cancelled", (long long)run);
        } else if (rc == GT_ECANCELLED) {
            /* Shutdown: back in the queue, resumed from its checkpoints. */
            runs_set_status(s->db, run, "queued", NULL, NULL, NULL);
            log_msg(LOG_INFO, "run", "id=%lld status=queued reason=shutdown", (long long)run);
        } else if (rc != GT_OK) {
            /* A database failure may have left it running: never retried
             * forever.  A full disk may refuse this write too; the run would
             * then show 'running' with nothing training it until a restart,
             * so it is tried again each second until recorded or stopped
             * (a restart re-queues a run left running). */
            for (;;) {
                char st[16] = "";
                if (runs_status(s->db, run, st, NULL) == GT_OK && strcmp(st, "running") != 0 &&
                    strcmp(st, "queued") != 0)
                    break;
                if (runs_set_status(s->db, run, "failed", err.message, NULL, NULL) == GT_OK ||
                    atomic_load(&s->w.stopping))
                    break;
                worker_thread_nap(&s->w, 1);
            }
            log_msg(LOG_WARN, "run", "id=%lld status=failed error=\"%s\"", (long long)run,
                    err.message);
        } else {
            log_msg(LOG_INFO, "run", "id=%lld status=succeeded", (long long)run);
        }
        pthread_mutex_lock(&s->w.mu);
        s->current = 0;
        pthread_mutex_unlock(&s->w.mu);
    }
    return NULL;
}

int sched_start(sched **out, const char *db_path, const char *data_dir, const char *device,
                model_bf16_policy bf16, gt_error *err)
{
    *out = NULL;
    /* The worker's own connection: its transactions (one per step) never
     * mix with the HTTP threads' statements; WAL lets both go on. */
    store *db = NULL;
    int orc = store_open(&db, db_path, err);
    if (orc)
        return orc;
    /* Runs a crash left 'running' go back to the queue (FIFO keeps their
     * place: they are older than anything queued since). */
    int64_t id;
    int rc;
    while ((rc = runs_oldest(db, "running", &id, err)) == GT_OK) {
        if ((rc = runs_set_status(db, id, "queued", NULL, NULL, err)))
            break;
        log_msg(LOG_INFO, "run", "id=%lld status=queued reason=recovered", (long long)id);
    }
    if (rc != GT_ENOTFOUND) {
        store_close(db, NULL);
        return rc;
    }
    sched *s = calloc(1, sizeof *s);
    if (!s) {
        store_close(db, NULL);
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    }
    s->db = db;
    snprintf(s->data_dir, sizeof s->data_dir, "%s", data_dir);
    snprintf(s->device, sizeof s->device, "%s", device ? device : "");
    s->bf16 = bf16;
    for (int i = 0; i < 2; i++)
        metrics_hist_init(&s->step_seconds[i], metrics_seconds_bounds, metrics_seconds_nb, 1e6);
    if ((rc = worker_thread_launch(&s->w, worker_main, s, db, "scheduler", err)))
        return rc;
    *out = s;
    return GT_OK;
}

void sched_kick(sched *s)
{
    if (s)
        worker_thread_kick(&s->w);
}

int sched_cancel(sched *s, store *db, int64_t run, char *status, gt_error *err)
{
    /* Flag first, so a run the worker picks up meanwhile still sees
     * cancel_requested at its first step. */
    char st_now[16] = "";
    int rc = runs_request_cancel(db, run, err);
    if (rc || (rc = runs_status(db, run, st_now, err)))
        return rc;
    if (strcmp(st_now, "queued") == 0) {
        /* Not picked up: cancelled now.  The worker holds mu while it takes
         * a run, and the update is conditional on 'queued', so a run it has
         * just taken is left to it (it sees the flag). */
        int busy = 0, cancelled = 0;
        if (s) {
            pthread_mutex_lock(&s->w.mu);
            busy = s->current == run;
        }
        if (!busy)
            rc = runs_cancel_queued(db, run, &cancelled, err);
        if (s)
            pthread_mutex_unlock(&s->w.mu);
        if (rc)
            return rc;
        if (cancelled)
            snprintf(st_now, sizeof st_now, "cancelled");
    }
    if (status)
        snprintf(status, 16, "%s", st_now);
    sched_kick(s);
    return GT_OK;
}

const metrics_hist *sched_step_seconds(const sched *s, int stage)
{
    return s && (stage == 1 || stage == 2) ? &s->step_seconds[stage - 1] : NULL;
}

long long sched_runs_started(const sched *s)
{
    return s ? atomic_load(&((sched *)s)->started) : 0;
}

void sched_stop(sched *s)
{
    if (s)
        worker_thread_end(&s->w, s->db, s);
}
