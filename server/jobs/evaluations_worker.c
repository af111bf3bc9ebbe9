/* evaluations_worker: the thread that evaluates runs in the background
 * (evaluations_worker.h). */
#include "evaluations_worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets.h"
#include "eval_core.h"
#include "evaluations.h"
#include "log.h"
#include "model_backend.h"
#include "model_data.h"
#include "runs.h"
#include "sampling.h"
#include "store.h"
#include "synth.h"
#include "worker_thread.h"

/* ---------------------------------------------------------------------------
 * The worker
 * ------------------------------------------------------------------------- */

#define EVAL_CHUNK 500             /* showers generated per sampling job */

struct evaluations_worker {
    store *db;
    char data_dir[1024];
    struct sampling *smp;
    worker_thread w;
};

/* One sampling job waited for on the evaluation thread. */
typedef struct chunk_wait {
    sampling_job job;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} chunk_wait;

static void chunk_done(sampling_job *job)
{
    chunk_wait *c = job->user;
    pthread_mutex_lock(&c->mu);
    c->done = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* What the worker reads back from the normalised request. */
typedef struct eval_request {
    int64_t dataset, ref2;
    long long n;
    uint64_t seed;
    eval_core_options opt;
} eval_request;

static int parse_request(const char *text, eval_request *r, gt_error *err)
{
    memset(r, 0, sizeof *r);
    eval_core_options_default(&r->opt);
    json_error_t jerr;
    json_t *o = json_loads(text ? text : "", 0, &jerr), *ref2 = NULL, *metrics = NULL;
    json_int_t ds = 0, n = 0, seed = 0;
    /* requests stored before `repeats` existed ran one classifier test */
    int hidden = 0, depth = 0, epochs = 0, repeats = 1;
    if (!o ||
        json_unpack_ex(o, &jerr, 0, "{s:I, s:o, s:I, s:I, s:o, s:{s:i, s:i, s:i, s?i}}",
                       "dataset_id", &ds, "ref2_dataset_id", &ref2, "n", &n, "seed", &seed,
                       "metrics", &metrics, "classifier", "hidden", &hidden, "depth", &depth,
                       "epochs", &epochs, "repeats", &repeats) != 0) {
        json_decref(o);
        return gt_error_set(err, GT_EINVAL, "bad stored request: %s", jerr.text);
    }
    r->dataset = ds;
    r->ref2 = json_is_integer(ref2) ? json_integer_value(ref2) : 0;
    r->n = n;
    r->seed = (uint64_t)seed;
    r->opt.separation = r->opt.distances = 0;
    for (int k = 0; k < EVAL_CORE_N_CLS; k++)
        r->opt.classifier[k] = 0;
    r->opt.breakdown = 0;
    size_t i;
    json_t *m;
    json_array_foreach(metrics, i, m) {
        const char *s = json_string_value(m);
        if (!s)
            continue;
        r->opt.separation |= !strcmp(s, "separation_power");
        r->opt.distances |= !strcmp(s, "fpd_kpd");
        r->opt.classifier[EVAL_CORE_MLP_HIGH] |= !strcmp(s, "classifier_high");
        r->opt.classifier[EVAL_CORE_MLP_LOW] |= !strcmp(s, "classifier_low");
        r->opt.classifier[EVAL_CORE_TREES_HIGH] |= !strcmp(s, "classifier_trees_high");
        r->opt.classifier[EVAL_CORE_TREES_LOW] |= !strcmp(s, "classifier_trees_low");
        r->opt.breakdown |= !strcmp(s, "classifier_breakdown");
    }
    r->opt.cls.hidden = hidden;
    r->opt.cls.depth = depth;
    r->opt.cls.epochs = epochs;
    r->opt.cls.repeats = repeats;
    /* one seed for the showers, the FPD/KPD subsets and the classifier, as
     * `giant eval --seed` uses one for the last two */
    r->opt.seed = r->seed;
    r->opt.cls.seed = r->seed;
    json_decref(o);
    return GT_OK;
}

/* A dataset row the worker may read: GT_EINVAL unless it is ready. */
static int ready_dataset(evaluations_worker *e, int64_t id, json_t **row, gt_error *err)
{
    int rc = datasets_get(e->db, id, row, err);
    if (rc)
        return rc;
    const char *status = json_string_value(json_object_get(*row, "status"));
    if (!status || strcmp(status, "ready") != 0 ||
        !json_string_value(json_object_get(*row, "path"))) {
        json_decref(*row);
        *row = NULL;
        return gt_error_set(err, GT_EINVAL, "dataset %lld is not ready", (long long)id);
    }
    return GT_OK;
}

/* A reference dataset's first n showers; label "dataset ID (NAME)" (never
 * its path: no reply names the data directory). */
static int read_reference(evaluations_worker *e, int64_t id, long long n, const geo_geometry *geo,
                          const feat_layout *fl, int want_low, eval_core_sample *s,
                          gt_error *err)
{
    json_t *row = NULL;
    int rc = ready_dataset(e, id, &row, err);
    if (rc)
        return rc;
    const char *name = json_string_value(json_object_get(row, "name"));
    char full[2200];
    snprintf(full, sizeof full, "%s/%s", e->data_dir,
             json_string_value(json_object_get(row, "path")));
    rc = eval_core_sample_read(s, full, geo, fl, n, want_low, err);
    if (rc == GT_OK && s->n < n)
        rc = gt_error_set(err, GT_EINVAL, "dataset %lld holds %lld showers, %lld asked",
                          (long long)id, (long long)s->n, n);
    if (rc == GT_OK)
        snprintf(s->label, sizeof s->label, "dataset %lld (%s)", (long long)id,
                 name ? name : "");
    else if (err)   /* the reader's message names the file: name the dataset */
        gt_error_set(err, err->code, "dataset %lld (%s) cannot be read", (long long)id,
                     name ? name : "");
    json_decref(row);
    return rc;
}

/* Generates the run's showers at the reference's energies, chunk by
 * chunk through the sampling worker, into a.  GT_ECANCELLED when stopped. */
static int generate(evaluations_worker *e, int64_t eid, int64_t run, const eval_request *r,
                    const eval_core_sample *ref, const feat_layout *fl, eval_core_sample *a,
                    gt_error *err)
{
    int64_t version = 0;
    int rc = runs_best_pair(e->db, run, &version, err);
    if (rc == GT_ENOTFOUND)
        return gt_error_set(err, GT_EINVAL, "run %lld has no best checkpoint of both stages",
                            (long long)run);
    char label[64];
    snprintf(label, sizeof label, "run %lld", (long long)run);
    if (rc || (rc = eval_core_sample_alloc(a, label, r->n, fl,
                                                    r->opt.classifier[EVAL_CORE_MLP_LOW] ||
                                                        r->opt.classifier[EVAL_CORE_TREES_LOW],
                                                    err)))
        return rc;
    chunk_wait c;
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    for (int64_t row = 0; rc == GT_OK && row < r->n; row += EVAL_CHUNK) {
        if (atomic_load(&e->w.stopping)) {
            rc = gt_error_set(err, GT_ECANCELLED, "stopped");
            break;
        }
        int64_t m = r->n - row < EVAL_CHUNK ? r->n - row : EVAL_CHUNK;
        memset(&c.job, 0, sizeof c.job);
        c.job.run = run;
        c.job.version = version;
        c.job.n = m;
        c.job.e_inc = ref->e_inc + row;
        c.job.seed = r->seed;
        c.job.row0 = row;
        c.job.done = chunk_done;
        c.job.user = &c;
        c.done = 0;
        if ((rc = sampling_submit(e->smp, &c.job, err)))
            break;
        pthread_mutex_lock(&c.mu);
        while (!c.done)
            pthread_cond_wait(&c.cv, &c.mu);
        pthread_mutex_unlock(&c.mu);
        if (c.job.rc != GT_OK) {
            rc = gt_error_set(err, c.job.rc, "generating showers: %s", c.job.message);
        } else if (c.job.voxels != a->voxels) {
            rc = gt_error_set(err, GT_EINVAL, "the run's showers have %d voxels, the "
                              "reference's %d", c.job.voxels, a->voxels);
        } else {
            eval_core_sample_put(a, fl, row, m, c.job.showers, c.job.e_inc);
            evaluations_set_phase(e->db, run, eid, "generating",
                      0.05 + 0.45 * (double)(row + m) / (double)r->n);
        }
        free(c.job.showers);
    }
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
    return rc;
}

static int stopping(void *user)
{
    evaluations_worker *e = user;
    return atomic_load(&e->w.stopping);
}

/* Runs evaluation eid; *result gets the document's text. */
static int evaluate(evaluations_worker *e, int64_t eid, int64_t run, const char *request,
                    char **result, gt_error *err)
{
    eval_request r;
    int rc = parse_request(request, &r, err);
    if (rc)
        return rc;
    r.opt.should_stop = stopping;
    r.opt.stop_user = e;
    char geometry[64] = "";
    geo_geometry geo;
    synth_detector det;
    feat_layout fl;
    eval_core_sample a, b, r2;
    eval_core_result res, flo;
    nn_backend *cls_b = NULL;
    json_t *doc = NULL;
    int have_geo = 0, have_fl = 0;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&r2, 0, sizeof r2);
    memset(&res, 0, sizeof res);
    memset(&flo, 0, sizeof flo);
    /* the reference's geometry, and its threshold as `giant eval` takes it */
    json_t *ds = NULL;
    if ((rc = ready_dataset(e, r.dataset, &ds, err)))
        goto out;
    const char *gname = json_string_value(json_object_get(ds, "geometry"));
    snprintf(geometry, sizeof geometry, "%s", gname ? gname : "");
    json_decref(ds);
    if ((rc = model_geometry_load(geometry, &geo, err)))
        goto out;
    have_geo = 1;
    if ((rc = synth_detector_init(&det, &geo, err)))
        goto out;
    rc = feat_layout_init(&fl, &geo, (float)det.threshold_mev, err);
    synth_detector_free(&det);
    if (rc)
        goto out;
    have_fl = 1;
    const int low = r.opt.classifier[EVAL_CORE_MLP_LOW] || r.opt.classifier[EVAL_CORE_TREES_LOW];
    if ((rc = read_reference(e, r.dataset, r.n, &geo, &fl, low, &b, err)) ||
        (r.ref2 && (rc = read_reference(e, r.ref2, r.n, &geo, &fl, low, &r2, err))))
        goto out;
    evaluations_set_phase(e->db, run, eid, "generating", 0.05);
    if ((rc = generate(e, eid, run, &r, &b, &fl, &a, err)))
        goto out;
    if ((r.opt.classifier[EVAL_CORE_MLP_HIGH] || r.opt.classifier[EVAL_CORE_MLP_LOW]) &&
        (rc = model_backend_open("cpu", &cls_b, err)))
        goto out;
    evaluations_set_phase(e->db, run, eid, "comparing", 0.5);
    if ((rc = eval_core_compare(&a, &b, &fl, &r.opt, cls_b, NULL, &res, err)))
        goto out;
    if (r.ref2) {
        evaluations_set_phase(e->db, run, eid, "floor", 0.75);
        eval_core_options fo = r.opt;
        fo.breakdown = 0;   /* where a reference's own differences sit says little */
        if ((rc = eval_core_compare(&r2, &b, &fl, &fo, cls_b, NULL, &flo, err)))
            goto out;
    }
    doc = eval_core_json(&a, &b, r.ref2 ? &r2 : NULL, geometry, &fl, &r.opt, &res,
                         r.ref2 ? &flo : NULL);
    *result = doc ? json_dumps(doc, JSON_COMPACT | EVAL_CORE_JSON_FLAGS) : NULL;
    if (!*result)
        rc = gt_error_set(err, GT_ENOMEM, "out of memory for the result");
out:
    json_decref(doc);
    nn_backend_close(cls_b);
    eval_core_result_free(&res);
    eval_core_result_free(&flo);
    eval_core_sample_free(&a);
    eval_core_sample_free(&b);
    eval_core_sample_free(&r2);
    if (have_fl)
        feat_layout_free(&fl);
    if (have_geo)
        geo_free(&geo);
    return rc;
}

static void *worker_main(void *arg)
{
    evaluations_worker *e = arg;
    json_t *row;
    while (worker_thread_next_row(&e->w, e->db, evaluations_next_queued, &row)) {
        int64_t id = json_integer_value(json_object_get(row, "id"));
        int64_t run = json_integer_value(json_object_get(row, "run_id"));
        log_msg(LOG_INFO, "evaluation", "id=%lld run=%lld status=running", (long long)id,
                (long long)run);
        evaluations_set_running(e->db, run, id);
        gt_error err = {0};
        char *result = NULL;
        int rc = evaluate(e, id, run, json_string_value(json_object_get(row, "request")),
                          &result, &err);
        json_decref(row);
        if (rc == GT_OK)
            rc = evaluations_set_succeeded(e->db, run, id, result, &err);
        free(result);
        if (rc == GT_ECANCELLED && atomic_load(&e->w.stopping)) {
            evaluations_set_queued_again(e->db, run, id);
            log_msg(LOG_INFO, "evaluation", "id=%lld status=queued note=stopped", (long long)id);
            break;
        }
        if (rc) {
            evaluations_set_failed(e->db, run, id, err.message[0] ? err.message : "failed");
            log_msg(LOG_WARN, "evaluation", "id=%lld status=failed error=\"%s\"", (long long)id,
                    err.message);
        } else {
            log_msg(LOG_INFO, "evaluation", "id=%lld status=succeeded", (long long)id);
        }
    }
    return NULL;
}

int evaluations_worker_start(evaluations_worker **out, const char *db_path,
                             const char *data_dir, struct sampling *smp, gt_error *err)
{
    *out = NULL;
    evaluations_worker *e = calloc(1, sizeof *e);
    if (!e)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    int rc = store_open(&e->db, db_path, err);
    if (rc) {
        free(e);
        return rc;
    }
    snprintf(e->data_dir, sizeof e->data_dir, "%s", data_dir);
    e->smp = smp;
    evaluations_fail_interrupted(e->db);
    if ((rc = worker_thread_launch(&e->w, worker_main, e, e->db, "evaluation", err)))
        return rc;
    *out = e;
    return GT_OK;
}

void evaluations_worker_kick(evaluations_worker *e)
{
    if (e)
        worker_thread_kick(&e->w);
}

void evaluations_worker_stop(evaluations_worker *e)
{
    if (e)
        worker_thread_end(&e->w, e->db, e);
}
