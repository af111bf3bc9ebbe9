#include "sampling.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "model_config.h"
#include "model_run.h"
#include "model_pack.h"
#include "model_sampler.h"
#include "models.h"
#include "runs.h"
#include "worker_thread.h"

#define SAMPLING_MAX_CACHE 64
#define SAMPLING_MAX_BATCH_JOBS 256
#define SAMPLING_DEVICE_ROWS 1024   /* rows per device pass */

typedef struct cached {
    int64_t run, model, version;
    nn_backend *b;
    model_sampler *smp;
    unsigned long long used;   /* LRU clock */
} cached;

/* The shape of one sampler's showers (sampling_shape). */
typedef struct shape {
    int64_t run, model, version;
    int voxels, layers;
    unsigned long long used;   /* its LRU clock; 0: empty */
} shape;

struct sampling {
    store *db;
    char device[32];
    int cache_size, delay_ms;
    cached cache[SAMPLING_MAX_CACHE];
    unsigned long long clock;
    worker_thread w;           /* its mu guards the queue and the stats */
    sampling_job *head, *tail;
    sampling_stats stats;
    atomic_int in_flight;      /* jobs submitted and not yet done          */
    metrics_hist seconds;      /* submit to done: queue wait and batch     */
    metrics_hist queue_wait;   /* submit to the start of the job's batch   */
    metrics_hist batch;        /* per device batch, however many jobs      */
    metrics_hist showers;      /* per job                                   */
    metrics_keyed by_source;   /* requests and showers per run or model     */
    pthread_mutex_t shapes_mu; /* guards shapes and shapes_clock            */
    shape shapes[SAMPLING_MAX_SHAPES];
    unsigned long long shapes_clock;
};

static double seconds_between(const struct timespec *from, const struct timespec *to)
{
    return (double)(to->tv_sec - from->tv_sec) + 1e-9 * (double)(to->tv_nsec - from->tv_nsec);
}

/* Every job ends here: the metrics, then the submitter's callback. */
static void job_done(sampling *s, sampling_job *j)
{
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    metrics_hist_observe(&s->seconds, seconds_between(&j->submitted, &end));
    atomic_fetch_sub(&s->in_flight, 1);
    j->done(j);
}

static void job_fail(sampling *s, sampling_job *j, int rc, const char *msg)
{
    j->rc = rc;
    snprintf(j->message, sizeof j->message, "%s", msg);
    job_done(s, j);
}

static void cache_drop(cached *c)
{
    model_sampler_close(c->smp);
    nn_backend_close(c->b);
    memset(c, 0, sizeof *c);
}

/* Keeps the shape of a sampler just loaded (the least recently used one
 * makes room): its voxels, and its layers with voxels, which admission
 * counts the reply's header by. */
static int active_layers(const model_sampler *smp)
{
    int per[SAMPLING_MAX_LAYERS], active = 0;
    int n = model_sampler_layers(smp, per, SAMPLING_MAX_LAYERS);
    for (int l = 0; l < n && l < SAMPLING_MAX_LAYERS; l++)
        active += per[l] > 0;
    return active;
}

static void shape_keep(sampling *s, int64_t run, int64_t model, int64_t version,
                       const model_sampler *smp)
{
    int active = active_layers(smp);
    pthread_mutex_lock(&s->shapes_mu);
    int slot = 0;
    for (int i = 0; i < SAMPLING_MAX_SHAPES; i++) {
        shape *h = &s->shapes[i];
        if (h->used && h->run == run && h->model == model) {
            slot = i;          /* the same source at another version */
            break;
        }
        if (h->used < s->shapes[slot].used)
            slot = i;
    }
    s->shapes[slot] = (shape){run, model, version, model_sampler_voxels(smp), active,
                              ++s->shapes_clock};
    pthread_mutex_unlock(&s->shapes_mu);
}

int sampling_shape(sampling *s, int64_t run, int64_t model, int64_t version, int *voxels,
                   int *layers)
{
    if (!s)
        return 0;
    int found = 0;
    pthread_mutex_lock(&s->shapes_mu);
    for (int i = 0; i < SAMPLING_MAX_SHAPES && !found; i++) {
        shape *h = &s->shapes[i];
        if (h->used && h->run == run && h->model == model && h->version == version) {
            h->used = ++s->shapes_clock;
            *voxels = h->voxels;
            *layers = h->layers;
            found = 1;
        }
    }
    pthread_mutex_unlock(&s->shapes_mu);
    return found;
}

/* The run's sampler, loaded on first use; the least recently used one
 * makes room. */
static int cache_get(sampling *s, int64_t run, int64_t model, int64_t version, cached **out,
                     gt_error *err)
{
    s->clock++;
    int free_slot = -1, lru = 0;
    for (int i = 0; i < s->cache_size; i++) {
        if (s->cache[i].smp && s->cache[i].run == run && s->cache[i].model == model) {
            if (s->cache[i].version == version) {
                s->cache[i].used = s->clock;
                *out = &s->cache[i];
                return GT_OK;
            }
            cache_drop(&s->cache[i]);      /* a better checkpoint since */
        }
        if (!s->cache[i].smp && free_slot < 0)
            free_slot = i;
        if (s->cache[i].used < s->cache[lru].used)
            lru = i;
    }
    int slot = free_slot >= 0 ? free_slot : lru;
    if (s->cache[slot].smp)
        cache_drop(&s->cache[slot]);
    char field[128];
    model_config cfg;
    void *ck1 = NULL, *ck2 = NULL, *file = NULL;
    size_t l1 = 0, l2 = 0, file_len = 0;
    const void *c1, *c2, *geo_xml = NULL;
    size_t geo_len = 0;
    model_pack pack;
    memset(&pack, 0, sizeof pack);
    nn_backend *b = NULL;
    model_sampler *smp = NULL;
    int rc;
    if (model > 0) {
        /* an imported model: its file holds the config, the geometry and
         * both checkpoints, checked again as at import */
        if ((rc = models_file_by_id(s->db, model, &file, &file_len, err)) ||
            (rc = model_pack_read(file, file_len, &pack, NULL, NULL, err)) ||
            (rc = model_pack_config(&pack, &cfg, field, sizeof field, err)))
            goto out;
        c1 = pack.ckpt[0];
        l1 = pack.ckpt_len[0];
        c2 = pack.ckpt[1];
        l2 = pack.ckpt_len[1];
        geo_xml = pack.geometry_xml;
        geo_len = pack.geometry_len;
    } else {
        if ((rc = runs_read_config(s->db, run, &cfg, err)) ||
            (rc = runs_load_checkpoint(s->db, run, 1, 1, &ck1, &l1, NULL, err)) ||
            (rc = runs_load_checkpoint(s->db, run, 2, 1, &ck2, &l2, NULL, err)))
            goto out;
        c1 = ck1;
        c2 = ck2;
    }
    if (s->device[0])
        snprintf(cfg.device, sizeof cfg.device, "%s", s->device);
    /* sampling a bf16 model on a CPU without AVX512-BF16 is allowed: the
     * fixed-order layer emulates VDPBF16PS exactly, at fp32 speed */
    if ((rc = model_open_backend(&cfg, MODEL_BF16_EMULATE, &b, err)) ||
        (rc = model_sampler_open_xml(b, &cfg, geo_xml, geo_len, c1, l1, c2, l2,
                                     SAMPLING_DEVICE_ROWS, &smp, err)))
        goto out;
    /* an imported model's acceptance test, a part of its file (format 2),
     * or a run's for its best pair, when it has one */
    if (model > 0 && pack.accept) {
        if ((rc = model_sampler_set_accept(smp, pack.accept, pack.accept_len, err)))
            goto out;
    } else if (model <= 0 && cfg.accept.enabled) {
        void *acc = NULL;
        size_t acc_len = 0;
        gt_error none;
        rc = runs_load_acceptance(s->db, run, &acc, &acc_len, &none);
        if (rc == GT_OK)
            rc = model_sampler_set_accept(smp, acc, acc_len, err);
        else if (rc == GT_ENOTFOUND)
            rc = GT_OK;
        else
            *err = none;
        free(acc);
        if (rc)
            goto out;
    }
    shape_keep(s, run, model, version, smp);
    s->cache[slot] = (cached){run, model, version, b, smp, s->clock};
    b = NULL;
    smp = NULL;
    *out = &s->cache[slot];
    pthread_mutex_lock(&s->w.mu);
    s->stats.loads++;
    pthread_mutex_unlock(&s->w.mu);
    log_msg(LOG_INFO, "sampler", "%s=%lld loaded=1 slot=%d", model > 0 ? "model" : "run",
            (long long)(model > 0 ? model : run), slot);
out:
    model_sampler_close(smp);
    nn_backend_close(b);
    model_pack_free(&pack);
    free(file);
    free(ck1);
    free(ck2);
    return rc;
}

/* Takes the oldest job and every queued job with its run (or model) and steps
 * (under mu). */
static int take_batch(sampling *s, sampling_job **batch)
{
    int n = 0;
    sampling_job *first = s->head;
    sampling_job **link = &s->head;
    s->tail = NULL;
    for (sampling_job *j = s->head; j;) {
        sampling_job *next = j->next;
        if (n < SAMPLING_MAX_BATCH_JOBS && j->run == first->run && j->model == first->model &&
            j->steps == first->steps && j->version == first->version) {
            batch[n++] = j;
            *link = next;
            j->next = NULL;
        } else {
            link = &j->next;
            s->tail = j;
        }
        j = next;
    }
    return n;
}

/* The jobs of a batch that were submitted without their shape, admitted
 * now that the sampler says it (sampling_job.admit); a refused one is done
 * at once and leaves the batch, no metric counting it.  Returns how many
 * jobs stay (first in batch, in order). */
static int admit_batch(sampling *s, const model_sampler *smp, sampling_job **batch, int n)
{
    int V = model_sampler_voxels(smp), layers = active_layers(smp), m = 0;
    for (int i = 0; i < n; i++) {
        sampling_job *j = batch[i];
        int rc = j->admit ? j->admit(j, V, layers) : GT_OK;
        if (rc == GT_OK) {
            if (j->admit)      /* counted at submit when admitted there */
                metrics_hist_observe(&s->showers, (double)j->n);
            batch[m++] = j;
        } else {
            j->rc = rc;
            atomic_fetch_sub(&s->in_flight, 1);
            j->done(j);
        }
    }
    return m;
}

static void run_batch(sampling *s, sampling_job **batch, int n)
{
    /* The batch starts when the worker takes it (after batch_delay_ms): a
     * job's queue wait ends here, and a sampler load counts as batch time,
     * so the two come close to the job's duration. */
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    gt_error err = {0};
    cached *c = NULL;
    int loaded = cache_get(s, batch[0]->run, batch[0]->model, batch[0]->version, &c, &err);
    if (loaded == GT_OK && (n = admit_batch(s, c->smp, batch, n)) == 0)
        return;
    for (int i = 0; i < n; i++)
        metrics_hist_observe(&s->queue_wait, seconds_between(&batch[i]->submitted, &start));
    if (loaded != GT_OK) {
        for (int i = 0; i < n; i++)
            job_fail(s, batch[i], err.code ? err.code : GT_EIO, err.message);
        return;
    }
    int V = model_sampler_voxels(c->smp);
    int L = model_sampler_layers(c->smp, NULL, 0);
    if (L > SAMPLING_MAX_LAYERS) {
        for (int i = 0; i < n; i++)
            job_fail(s, batch[i], GT_EUNSUPPORTED, "the geometry has more layers than sampling holds");
        return;
    }
    model_sample_request reqs[SAMPLING_MAX_BATCH_JOBS];
    int m = 0;
    int64_t rows = 0;
    sampling_job *ok[SAMPLING_MAX_BATCH_JOBS];
    for (int i = 0; i < n; i++) {
        sampling_job *j = batch[i];
        j->voxels = V;
        j->layers = model_sampler_layers(c->smp, j->layer_voxels, SAMPLING_MAX_LAYERS);
        j->showers = malloc((size_t)j->n * (size_t)V * sizeof(float));
        if (!j->showers) {
            job_fail(s, j, GT_ENOMEM, "out of memory for the showers");
            continue;
        }
        reqs[m] = (model_sample_request){j->e_inc, j->n, j->seed, j->row0, j->showers, NULL, 0};
        ok[m++] = j;
        rows += j->n;
    }
    if (m == 0)
        return;
    int rc = model_sampler_run(c->smp, reqs, m, ok[0]->steps, &err);
    /* Only batches that reached the device, as giant_sample_batches_total
     * counts them. */
    clock_gettime(CLOCK_MONOTONIC, &end);
    metrics_hist_observe(&s->batch, seconds_between(&start, &end));
    pthread_mutex_lock(&s->w.mu);
    s->stats.batches++;
    s->stats.requests += (unsigned long long)m;
    if (rc == GT_OK)
        s->stats.showers += (unsigned long long)rows;
    pthread_mutex_unlock(&s->w.mu);
    /* A batch is one run's or one model's: one add for all its jobs. */
    char key[32];
    if (ok[0]->model > 0)
        snprintf(key, sizeof key, "model:%lld", (long long)ok[0]->model);
    else
        snprintf(key, sizeof key, "%lld", (long long)ok[0]->run);
    unsigned long long add[METRICS_KEYED_COLS] = {(unsigned long long)m,
                                                  rc == GT_OK ? (unsigned long long)rows : 0};
    metrics_keyed_add(&s->by_source, key, add);
    log_msg(LOG_DEBUG, "sampler", "run=%lld requests=%d showers=%lld rc=%d",
            (long long)ok[0]->run, m, (long long)rows, rc);
    for (int i = 0; i < m; i++) {
        if (rc != GT_OK) {
            free(ok[i]->showers);
            ok[i]->showers = NULL;
            job_fail(s, ok[i], rc, err.message);
        } else {
            ok[i]->rc = GT_OK;
            job_done(s, ok[i]);
        }
    }
}

static void *worker_main(void *arg)
{
    sampling *s = arg;
    sampling_job *batch[SAMPLING_MAX_BATCH_JOBS];
    pthread_mutex_lock(&s->w.mu);
    for (;;) {
        while (!s->head && !atomic_load(&s->w.stopping))
            pthread_cond_wait(&s->w.cv, &s->w.mu);
        if (atomic_load(&s->w.stopping))
            break;
        /* Let concurrent requests join the batch for a few ms. */
        if (s->delay_ms > 0) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += (long)s->delay_ms * 1000000L;
            until.tv_sec += until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
            while (!atomic_load(&s->w.stopping) &&
                   pthread_cond_timedwait(&s->w.cv, &s->w.mu, &until) != ETIMEDOUT)
                ;
            if (atomic_load(&s->w.stopping))
                break;
        }
        int n = take_batch(s, batch);
        pthread_mutex_unlock(&s->w.mu);
        run_batch(s, batch, n);
        pthread_mutex_lock(&s->w.mu);
    }
    /* Stopping: fail whatever is still queued. */
    sampling_job *j = s->head;
    s->head = s->tail = NULL;
    pthread_mutex_unlock(&s->w.mu);
    while (j) {
        sampling_job *next = j->next;
        job_fail(s, j, GT_ECANCELLED, "the server is shutting down");
        j = next;
    }
    return NULL;
}

int sampling_start(sampling **out, store *db, const char *device, int cache_size,
                   int batch_delay_ms, gt_error *err)
{
    *out = NULL;
    sampling *s = calloc(1, sizeof *s);
    if (!s)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    s->db = db;
    snprintf(s->device, sizeof s->device, "%s", device ? device : "");
    s->cache_size = cache_size < 1 ? 1 : cache_size > SAMPLING_MAX_CACHE ? SAMPLING_MAX_CACHE
                                                                         : cache_size;
    s->delay_ms = batch_delay_ms < 0 ? 0 : batch_delay_ms;
    atomic_init(&s->in_flight, 0);
    metrics_hist_init(&s->seconds, metrics_seconds_bounds, metrics_seconds_nb, 1e6);
    metrics_hist_init(&s->queue_wait, metrics_seconds_bounds, metrics_seconds_nb, 1e6);
    metrics_hist_init(&s->batch, metrics_seconds_bounds, metrics_seconds_nb, 1e6);
    metrics_hist_init(&s->showers, metrics_count_bounds, metrics_count_nb, 1);
    metrics_keyed_init(&s->by_source);
    pthread_mutex_init(&s->shapes_mu, NULL);
    int rc = worker_thread_launch(&s->w, worker_main, s, NULL, "sampling", err);
    if (rc)
        return rc;
    *out = s;
    return GT_OK;
}

int sampling_submit(sampling *s, sampling_job *job, gt_error *err)
{
    if (!job || job->n <= 0 || !job->e_inc || !job->done)
        return gt_error_set(err, GT_EINVAL, "sampling_submit: bad job");
    job->next = NULL;
    job->showers = NULL;
    job->rc = GT_OK;
    job->message[0] = '\0';
    clock_gettime(CLOCK_MONOTONIC, &job->submitted);
    pthread_mutex_lock(&s->w.mu);
    if (atomic_load(&s->w.stopping)) {
        pthread_mutex_unlock(&s->w.mu);
        return gt_error_set(err, GT_ECANCELLED, "the server is shutting down");
    }
    atomic_fetch_add(&s->in_flight, 1);
    if (!job->admit)           /* else counted once the worker admits it */
        metrics_hist_observe(&s->showers, (double)job->n);
    if (s->tail)
        s->tail->next = job;
    else
        s->head = job;
    s->tail = job;
    pthread_cond_signal(&s->w.cv);
    pthread_mutex_unlock(&s->w.mu);
    return GT_OK;
}

void sampling_get_stats(sampling *s, sampling_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    pthread_mutex_lock(&s->w.mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->w.mu);
}

int sampling_in_flight(sampling *s)
{
    return s ? atomic_load(&s->in_flight) : 0;
}

const metrics_hist *sampling_seconds(sampling *s) { return s ? &s->seconds : NULL; }
const metrics_hist *sampling_queue_wait_seconds(sampling *s) { return s ? &s->queue_wait : NULL; }
const metrics_hist *sampling_batch_seconds(sampling *s) { return s ? &s->batch : NULL; }
const metrics_hist *sampling_showers(sampling *s) { return s ? &s->showers : NULL; }
metrics_keyed *sampling_by_source(sampling *s) { return s ? &s->by_source : NULL; }

void sampling_stop(sampling *s)
{
    if (!s)
        return;
    worker_thread_stop(&s->w);
    for (int i = 0; i < s->cache_size; i++)
        if (s->cache[i].smp)
            cache_drop(&s->cache[i]);
    pthread_mutex_destroy(&s->shapes_mu);
    free(s);
}
