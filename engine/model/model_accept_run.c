/* model_accept_run.c: the acceptance test of a run (model_accept_for_run):
 * its training showers and as many generated ones, their classifier rows,
 * the test trained between them (model_accept.c). */
#include "model_accept.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "feat.h"
#include "gt_clock.h"
#include "loader.h"
#include "model_data.h"
#include "model_sampler.h"

/* The classifier rows of n showers into rows [n x d]. */
static void classifier_rows(const feat_layout *fl, const float *showers, const float *e_inc,
                            int64_t n, float *rows)
{
    const int d = feat_classifier_width(fl), V = fl->geo->n_voxels;
#pragma omp parallel
    {
        float *feat = malloc((size_t)fl->n_features * sizeof *feat);
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n; i++)
            if (feat) {
                feat_compute(fl, showers + (size_t)i * V, e_inc[i], feat);
                feat_classifier_row(fl, feat, e_inc[i], rows + (size_t)i * d);
            }
        free(feat);
    }
}

/* Generated showers of the test: a stream of the run's seed of their own,
 * so they are none of the showers a user asks the run for by seed. */
#define ACCEPT_SEED_SALT 0x61636365707421ull

int model_accept_for_run(nn_backend *b, const model_config *cfg, const char *data_dir,
                         const void *stage1, size_t len1, const void *stage2, size_t len2,
                         const uint8_t ckpt_sha256[2][32], int (*should_stop)(void *user),
                         void *stop_user, void **blob,
                         size_t *blob_len, model_accept_report *rep, gt_error *err)
{
    memset(rep, 0, sizeof *rep);
    *blob = NULL;
    *blob_len = 0;
    if (!cfg->accept.enabled)
        return gt_error_set(err, GT_EINVAL, "the run's config has no model.accept");
    model_dataset ds;
    memset(&ds, 0, sizeof ds);
    feat_layout fl;
    memset(&fl, 0, sizeof fl);
    model_sampler *s = NULL;
    model_accept acc;
    memset(&acc, 0, sizeof acc);
    int64_t *tr = NULL, *va = NULL, ntr = 0, nva = 0;
    float *train_rows = NULL, *gen_rows = NULL, *e = NULL, *gen = NULL;
    int rc;
    if ((rc = model_dataset_load(cfg, data_dir, &ds, err)) ||
        (rc = loader_split(ds.n, cfg->val_fraction, cfg->split_seed, &tr, &ntr, &va, &nva, err)) ||
        (rc = feat_layout_init(&fl, &ds.geo, ds.threshold_mev, err)))
        goto done;
    int64_t n = cfg->accept.showers > 0 && cfg->accept.showers < ntr ? cfg->accept.showers : ntr;
    if (n < 10) {
        rc = gt_error_set(err, GT_EINVAL, "the acceptance test needs at least 10 training "
                                          "showers, the split leaves %lld", (long long)n);
        goto done;
    }
    const int d = feat_classifier_width(&fl), V = ds.geo.n_voxels;
    const int64_t chunk = 1024;
    train_rows = malloc((size_t)n * d * sizeof(float));
    gen_rows = malloc((size_t)n * d * sizeof(float));
    e = malloc((size_t)n * sizeof(float));
    gen = malloc((size_t)chunk * V * sizeof(float));
    if (!train_rows || !gen_rows || !e || !gen) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory for the acceptance test's showers");
        goto done;
    }
    /* the training showers' rows, a chunk at a time in the split's order */
    for (int64_t at = 0; at < n; at += chunk) {
        int64_t m = n - at < chunk ? n - at : chunk;
        for (int64_t i = 0; i < m; i++) {
            e[at + i] = ds.e_inc[tr[at + i]];
            memcpy(gen + (size_t)i * V, ds.showers + (size_t)tr[at + i] * V,
                   (size_t)V * sizeof(float));
        }
        classifier_rows(&fl, gen, e + at, m, train_rows + (size_t)at * d);
    }
    double t0 = gt_clock_s();
    if ((rc = model_sampler_open(b, cfg, stage1, len1, stage2, len2, (int)chunk, &s, err)))
        goto done;
    for (int64_t at = 0; at < n; at += chunk) {
        if (should_stop && should_stop(stop_user)) {
            rc = gt_error_set(err, GT_ECANCELLED, "stopped");
            goto done;
        }
        int64_t m = n - at < chunk ? n - at : chunk;
        model_sample_request rq = {e + at, m, cfg->seed ^ ACCEPT_SEED_SALT, at, gen, NULL, 0};
        if ((rc = model_sampler_run(s, &rq, 1, 0, err)))
            goto done;
        classifier_rows(&fl, gen, e + at, m, gen_rows + (size_t)at * d);
    }
    rep->generate_s = gt_clock_s() - t0;
    t0 = gt_clock_s();
    model_classify_config cls;
    model_classify_config_default(&cls);
    cls.hidden = cfg->accept.hidden;
    cls.depth = cfg->accept.depth;
    cls.epochs = cfg->accept.epochs;
    cls.seed = cfg->seed;
    cls.should_stop = should_stop;
    cls.stop_user = stop_user;
    if ((rc = model_accept_train(b, train_rows, n, gen_rows, n, d, &cls, cfg->accept.cap_quantile,
                                 cfg->accept.max_attempts, &acc, err)))
        goto done;
    if (ckpt_sha256)
        memcpy(acc.ckpt_sha256, ckpt_sha256, sizeof acc.ckpt_sha256);
    if ((rc = model_accept_pack(&acc, blob, blob_len, err)))
        goto done;
    rep->train_s = gt_clock_s() - t0;
    rep->showers = n;
    rep->auc = acc.auc;
    rep->acceptance = acc.acceptance;
done:
    model_accept_free(&acc);
    model_sampler_close(s);
    feat_layout_free(&fl);
    model_dataset_free(&ds);
    free(tr);
    free(va);
    free(train_rows);
    free(gen_rows);
    free(e);
    free(gen);
    return rc;
}
