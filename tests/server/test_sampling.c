/* The sampling worker driven directly, on an in-memory database: a tiny
 * run trained with sched_train_run serves jobs; jobs queued together run in
 * one device batch (those with other steps in their own) and give the very
 * bytes each gives alone; each job comes back with the layer layout of its
 * geometry; an unknown run and a run without checkpoints fail their jobs
 * with the reason; a new checkpoint version reloads the sampler; stopping
 * fails what is still queued.  Every job's done is called exactly once.
 * A run whose config asks for an acceptance test (model.accept) trains one
 * at its end; the worker serves with it (the same bytes batched or alone,
 * some rows redrawn), the version of its best pair says so, and a better
 * checkpoint since makes it stale: not served. */
#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geo.h"
#include "model_config.h"
#include "model_sampler.h"
#include "nn_backend.h"
#include "model_backend.h"
#include <jansson.h>
#include "model_data.h"
#include "runs.h"
#include "sampling.h"
#include "scheduler.h"
#include "store.h"
#include "run_fixture.h"

static store *db;

/* Jobs finished so far, under mu (done runs on the worker thread). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int finished;

static void on_done(sampling_job *job)
{
    pthread_mutex_lock(&mu);
    finished++;
    *(int *)job->user += 1;            /* calls of this job's done */
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void wait_finished(int n)
{
    pthread_mutex_lock(&mu);
    while (finished < n)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

typedef struct job {
    sampling_job j;
    int calls;
} job;

static void job_init(job *k, int64_t run, int64_t version, int n, uint64_t seed, int steps)
{
    memset(k, 0, sizeof *k);
    k->j.run = run;
    k->j.version = version;
    k->j.n = n;
    k->j.e_inc = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++)
        k->j.e_inc[i] = 1000.0f * (float)(1 + 7 * i + (int)seed);
    k->j.seed = seed;
    k->j.steps = steps;
    k->j.done = on_done;
    k->j.user = &k->calls;
}

static void job_free(job *k)
{
    free(k->j.e_inc);
    free(k->j.showers);
}

/* Submits jobs [0, n) at once and waits for all of them. */
static void run_jobs(sampling *s, job *k, int n)
{
    pthread_mutex_lock(&mu);
    int target = finished + n;
    pthread_mutex_unlock(&mu);
    gt_error err = {0};
    for (int i = 0; i < n; i++)
        CHECK_EQ_INT(sampling_submit(s, &k[i].j, &err), GT_OK);
    wait_finished(target);
}

static int64_t create_run_accept(const char *name, int steps, int accept)
{
    return run_fixture_record(db, name, steps, accept);
}

static int64_t create_run(const char *name, int steps) { return create_run_accept(name, steps, 0); }

/* model.accept end to end in the service's pieces. */
static void check_acceptance(sampling *alone, sampling *batched)
{
    gt_error err = {0};
    int64_t run = create_run_accept("accepting", 10, 1);
    CHECK_MSG(sched_train_run(db, run, ".", "cpu", MODEL_BF16_NATIVE, NULL, &err) == GT_OK,
              "training with an acceptance test: %s", err.message);
    void *acc = NULL;
    size_t acc_len = 0;
    CHECK_EQ_INT(runs_load_acceptance(db, run, &acc, &acc_len, &err), GT_OK);
    int64_t version = 0;
    CHECK_EQ_INT(runs_best_pair(db, run, &version, &err), GT_OK);
    CHECK_MSG(version >> 32 != 0, "version %lld does not count the test", (long long)version);
    /* batched and alone: the same bytes */
    enum { NA = 3 };
    static const int rows[NA] = {7, 5, 9};
    job k[NA], a[NA];
    for (int i = 0; i < NA; i++)
        job_init(&k[i], run, version, rows[i], 300 + (uint64_t)i, 0);
    run_jobs(batched, k, NA);
    for (int i = 0; i < NA; i++) {
        job_init(&a[i], run, version, rows[i], 300 + (uint64_t)i, 0);
        run_jobs(alone, &a[i], 1);
        CHECK_MSG(k[i].j.rc == GT_OK && a[i].j.rc == GT_OK &&
                      memcmp(k[i].j.showers, a[i].j.showers,
                             (size_t)rows[i] * k[i].j.voxels * sizeof(float)) == 0,
                  "acceptance job %d: batched %d (%s), alone %d", i, k[i].j.rc, k[i].j.message,
                  a[i].j.rc);
    }
    /* against the same checkpoints without the test: some rows are the
     * first draw, some were drawn again */
    char *text = NULL;
    model_config cfg;
    char field[128];
    void *ck1 = NULL, *ck2 = NULL;
    size_t l1 = 0, l2 = 0;
    nn_backend *b = NULL;
    model_sampler *smp = NULL;
    CHECK(runs_config(db, run, &text, &err) == GT_OK &&
          model_config_parse(text, strlen(text), &cfg, field, sizeof field, &err) == GT_OK &&
          runs_load_checkpoint(db, run, 1, 1, &ck1, &l1, NULL, &err) == GT_OK &&
          runs_load_checkpoint(db, run, 2, 1, &ck2, &l2, NULL, &err) == GT_OK &&
          model_backend_open("cpu", &b, &err) == GT_OK &&
          model_sampler_open(b, &cfg, ck1, l1, ck2, l2, 16, &smp, &err) == GT_OK);
    int same = 0, redrawn = 0;
    if (smp && k[2].j.rc == GT_OK) {
        const int V = model_sampler_voxels(smp);
        float *plain = malloc((size_t)rows[2] * V * sizeof(float));
        model_sample_request rq = {k[2].j.e_inc, rows[2], 302, 0, plain, NULL, 0};
        CHECK(model_sampler_run(smp, &rq, 1, 0, &err) == GT_OK);
        for (int r = 0; r < rows[2]; r++) {
            int eq = memcmp(plain + (size_t)r * V, k[2].j.showers + (size_t)r * V,
                            (size_t)V * sizeof(float)) == 0;
            same += eq;
            redrawn += !eq;
        }
        free(plain);
    }
    printf("acceptance test: %d of %d rows the first draw, %d drawn again\n", same, rows[2],
           redrawn);
    CHECK_MSG(same > 0 && redrawn > 0, "%d rows the first draw, %d drawn again", same, redrawn);
    model_sampler_close(smp);
    nn_backend_close(b);
    free(ck1);
    free(ck2);
    free(text);
    /* a better stage-2 checkpoint since: the test is stale, not served */
    void *ck = NULL;
    size_t ckl = 0;
    CHECK_EQ_INT(runs_load_checkpoint(db, run, 2, 1, &ck, &ckl, NULL, &err), GT_OK);
    int best = 0;
    CHECK_EQ_INT(runs_record_checkpoint(db, run, 2, 999999, -1e30f, "fp32", ck, ckl, 2, &best,
                                        &err),
                 GT_OK);
    CHECK(best == 1);
    free(ck);
    void *stale = NULL;
    size_t stale_len = 0;
    CHECK_EQ_INT(runs_load_acceptance(db, run, &stale, &stale_len, &err), GT_ENOTFOUND);
    int64_t v2 = 0;
    CHECK_EQ_INT(runs_best_pair(db, run, &v2, &err), GT_OK);
    CHECK(v2 >> 32 == 0 && v2 != version);
    /* recorded again for the new pair, it is served again */
    CHECK_EQ_INT(runs_record_acceptance(db, run, NULL, 200, 0.6, 0.5, acc, acc_len, &err),
                 GT_OK);
    CHECK_EQ_INT(runs_load_acceptance(db, run, &stale, &stale_len, &err), GT_OK);
    CHECK(stale_len == acc_len && memcmp(stale, acc, acc_len) == 0);
    free(stale);
    /* a run without checkpoints cannot hold one */
    int64_t bare = create_run("bare-accept", 10);
    CHECK_EQ_INT(runs_record_acceptance(db, bare, NULL, 200, 0.6, 0.5, acc, acc_len, &err),
                 GT_ENOTFOUND);
    CHECK_EQ_INT(runs_load_acceptance(db, bare, &stale, &stale_len, &err), GT_ENOTFOUND);
    free(acc);
    for (int i = 0; i < NA; i++) {
        job_free(&k[i]);
        job_free(&a[i]);
    }
}

int main(void)
{
    store_migration list[STORE_MAX_MIGRATIONS];
    int nmig = 0;
    gt_error err = {0};
    CHECK_EQ_INT(store_builtin_migrations(list, &nmig, &err), GT_OK);
    CHECK_EQ_INT(store_open(&db, ":memory:", &err), GT_OK);
    CHECK_EQ_INT(store_migrate(db, list, nmig, NULL, &err), GT_OK);

    /* A trained run (the scheduler's training loop, no worker) and one
     * that never trained. */
    int64_t run = create_run("trained", 10);
    int64_t bare = create_run("bare", 10);
    CHECK_MSG(sched_train_run(db, run, ".", "cpu", MODEL_BF16_NATIVE, NULL, &err) == GT_OK,
              "training: %s", err.message);
    int64_t version = 0;
    CHECK_EQ_INT(runs_best_pair(db, run, &version, &err), GT_OK);
    if (check_failures_)
        return check_finish();

    /* Two workers: one waits a second to gather jobs into a batch, the
     * other serves each job as it comes (the "alone" reference). */
    sampling *batched = NULL, *alone = NULL;
    CHECK_EQ_INT(sampling_start(&batched, db, "cpu", 2, 1000, &err), GT_OK);
    CHECK_EQ_INT(sampling_start(&alone, db, "cpu", 2, 0, &err), GT_OK);

    /* Six jobs at once: four with the run's steps, two with 2 steps. */
    enum { NJ = 6 };
    static const int rows[NJ] = {1, 3, 2, 5, 4, 1};
    static const int steps[NJ] = {0, 0, 0, 0, 2, 2};
    job k[NJ], a[NJ];
    for (int i = 0; i < NJ; i++)
        job_init(&k[i], run, version, rows[i], 100 + (uint64_t)i, steps[i]);
    sampling_stats s0, s1;
    sampling_get_stats(batched, &s0);
    run_jobs(batched, k, NJ);
    sampling_get_stats(batched, &s1);
    CHECK_EQ_INT(s1.requests - s0.requests, NJ);
    CHECK_MSG(s1.batches - s0.batches == 2, "%llu batches for %d jobs of two step counts",
              s1.batches - s0.batches, NJ);
    CHECK_EQ_INT(s1.showers - s0.showers, 1 + 3 + 2 + 5 + 4 + 1);
    CHECK_EQ_INT(s1.loads, 1);

    /* The geometry's layer layout comes back with the showers. */
    geo_geometry g;
    CHECK_EQ_INT(model_geometry_load("dataset_1_photons", &g, &err), GT_OK);
    for (int i = 0; i < NJ; i++) {
        CHECK_MSG(k[i].j.rc == GT_OK && k[i].calls == 1, "job %d: rc %d (%s), %d calls", i,
                  k[i].j.rc, k[i].j.message, k[i].calls);
        CHECK_EQ_INT(k[i].j.voxels, g.n_voxels);
        CHECK_EQ_INT(k[i].j.layers, g.n_layers);
        int same = 1, sum = 0;
        for (int l = 0; l < g.n_layers && l < SAMPLING_MAX_LAYERS; l++) {
            same &= k[i].j.layer_voxels[l] == g.layers[l].n_voxels;
            sum += k[i].j.layer_voxels[l];
        }
        CHECK(same && sum == k[i].j.voxels);
    }
    CHECK(g.n_layers > 5);            /* layers without voxels are counted too */
    geo_free(&g);

    /* Each job alone gives the same bytes as in the batch. */
    for (int i = 0; i < NJ; i++) {
        job_init(&a[i], run, version, rows[i], 100 + (uint64_t)i, steps[i]);
        run_jobs(alone, &a[i], 1);
        size_t bytes = (size_t)rows[i] * (size_t)k[i].j.voxels * sizeof(float);
        CHECK_MSG(a[i].j.rc == GT_OK && k[i].j.showers && a[i].j.showers &&
                      memcmp(a[i].j.showers, k[i].j.showers, bytes) == 0,
                  "job %d: batched showers differ from the job alone", i);
        int bad = 0;
        for (size_t v = 0; k[i].j.showers && v < bytes / sizeof(float); v++)
            bad += !(k[i].j.showers[v] >= 0);
        CHECK_EQ_INT(bad, 0);
    }
    /* 2 steps are not the run's 3: the job's step count reached the sampler. */
    job other;
    job_init(&other, run, version, 4, 104, 0);
    run_jobs(alone, &other, 1);
    CHECK(other.j.rc == GT_OK &&
          memcmp(other.j.showers, k[4].j.showers, 4 * (size_t)k[4].j.voxels * sizeof(float)) != 0);
    job_free(&other);

    /* A sample made in chunks (row0: where each starts in the whole) equals
     * the sample asked at once, as the evaluations worker makes it. */
    job whole, part[2];
    job_init(&whole, run, version, 6, 105, 0);
    job_init(&part[0], run, version, 4, 105, 0);
    job_init(&part[1], run, version, 2, 105, 0);
    memcpy(part[1].j.e_inc, whole.j.e_inc + 4, 2 * sizeof(float));
    part[1].j.row0 = 4;
    run_jobs(alone, &whole, 1);
    run_jobs(alone, part, 2);
    size_t vb = (size_t)whole.j.voxels * sizeof(float);
    CHECK(whole.j.rc == GT_OK && part[0].j.rc == GT_OK && part[1].j.rc == GT_OK &&
          memcmp(part[0].j.showers, whole.j.showers, 4 * vb) == 0 &&
          memcmp(part[1].j.showers, whole.j.showers + 4 * (size_t)whole.j.voxels, 2 * vb) == 0);
    /* without row0 the second chunk would repeat the first's noise */
    job norow;
    job_init(&norow, run, version, 2, 105, 0);
    memcpy(norow.j.e_inc, whole.j.e_inc + 4, 2 * sizeof(float));
    run_jobs(alone, &norow, 1);
    CHECK(norow.j.rc == GT_OK && memcmp(norow.j.showers, part[1].j.showers, 2 * vb) != 0);
    job_free(&whole);
    job_free(&part[0]);
    job_free(&part[1]);
    job_free(&norow);

    /* An unknown run and a run without checkpoints fail with the reason. */
    job bad[2];
    job_init(&bad[0], 999, 0, 2, 1, 0);
    job_init(&bad[1], bare, 0, 2, 1, 0);
    run_jobs(alone, bad, 2);
    CHECK_EQ_INT(bad[0].j.rc, GT_ENOTFOUND);
    CHECK_MSG(strstr(bad[0].j.message, "999"), "unknown run: %s", bad[0].j.message);
    CHECK_EQ_INT(bad[1].j.rc, GT_ENOTFOUND);
    CHECK_MSG(strstr(bad[1].j.message, "checkpoint"), "run without checkpoints: %s",
              bad[1].j.message);
    CHECK(bad[0].calls == 1 && bad[1].calls == 1 && !bad[0].j.showers && !bad[1].j.showers);
    job_free(&bad[0]);
    job_free(&bad[1]);

    /* Another version of the best pair loads the sampler again. */
    sampling_stats before, after;
    sampling_get_stats(alone, &before);
    job again;
    job_init(&again, run, version + 1, rows[0], 100, 0);
    run_jobs(alone, &again, 1);
    sampling_get_stats(alone, &after);
    CHECK_EQ_INT(after.loads - before.loads, 1);
    CHECK(again.j.rc == GT_OK &&
          memcmp(again.j.showers, k[0].j.showers, (size_t)k[0].j.voxels * sizeof(float)) == 0);
    job_free(&again);

    check_acceptance(alone, batched);

    /* Stopping fails the job still waiting for its batch. */
    job late;
    job_init(&late, run, version, 1, 1, 0);
    CHECK_EQ_INT(sampling_submit(batched, &late.j, &err), GT_OK);
    sampling_stop(batched);
    CHECK_EQ_INT(late.calls, 1);
    CHECK_EQ_INT(late.j.rc, GT_ECANCELLED);
    job_free(&late);

    sampling_stop(alone);
    for (int i = 0; i < NJ; i++) {
        job_free(&k[i]);
        job_free(&a[i]);
    }
    CHECK_EQ_INT(store_close(db, &err), GT_OK);
    return check_finish();
}
