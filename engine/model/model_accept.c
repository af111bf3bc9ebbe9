/* model_accept.c: the learned acceptance test; the idea and the blob in
 * model_accept.h. */
#include "model_accept.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "feat.h"
#include "gt_le.h"
#include "loader.h"
#include "model_data.h"
#include "model_sampler.h"
#include "nn_ckpt.h"

#define MAGIC "GIANTACC"
#define VERSION 1u
/* magic, version, d, hidden, depth, slope, log_cap, max_attempts,
 * acceptance, auc, two sha256 */
#define HEADER (8 + 4 + 4 + 4 + 4 + 4 + 8 + 4 + 8 + 8 + 64)
/* Generous bounds for a blob read from outside: sizes past them are a
 * damaged or hostile blob, not a classifier. */
#define MAX_D (1 << 20)
#define MAX_HIDDEN (1 << 14)
#define MAX_DEPTH 16

void model_accept_free(model_accept *a)
{
    if (!a)
        return;
    model_classify_net_free(&a->net);
    memset(a, 0, sizeof *a);
}

double model_accept_keep_probability(const model_accept *a, double z)
{
    double t = z - a->log_cap;
    return t >= 0.0 ? 1.0 : exp(t);
}

double model_accept_logit(const model_accept *a, const float *row, float *scratch)
{
    return model_classify_net_logit(&a->net, row, scratch);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int model_accept_train(nn_backend *b, const float *train_rows, int64_t n_train,
                       const float *gen_rows, int64_t n_gen, int d,
                       const model_classify_config *cls, double cap_quantile, int max_attempts,
                       model_accept *out, gt_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!out || !cls || !gen_rows || n_gen < 1 || !(cap_quantile > 0.0 && cap_quantile <= 1.0) ||
        max_attempts < 1)
        return gt_error_set(err, GT_EINVAL,
                            "acceptance: cap quantile %g must be in (0, 1], max attempts %d at "
                            "least 1, and there must be generated rows",
                            cap_quantile, max_attempts);
    model_classify_result res;
    int rc = model_classify_fit(b, train_rows, n_train, gen_rows, n_gen, d, cls, &out->net, &res,
                                err);
    if (rc)
        return rc;
    double *z = malloc((size_t)n_gen * sizeof *z);
    float *scratch = malloc(2 * (size_t)(d > cls->hidden ? d : cls->hidden) * sizeof *scratch);
    if (!z || !scratch) {
        free(z);
        free(scratch);
        model_accept_free(out);
        return gt_error_set(err, GT_ENOMEM, "acceptance: out of memory");
    }
    for (int64_t i = 0; i < n_gen; i++)
        z[i] = model_classify_net_logit(&out->net, gen_rows + (size_t)i * d, scratch);
    double *sorted = malloc((size_t)n_gen * sizeof *sorted);
    if (!sorted) {
        free(z);
        free(scratch);
        model_accept_free(out);
        return gt_error_set(err, GT_ENOMEM, "acceptance: out of memory");
    }
    memcpy(sorted, z, (size_t)n_gen * sizeof *z);
    qsort(sorted, (size_t)n_gen, sizeof *sorted, cmp_double);
    out->log_cap = sorted[(int64_t)floor(cap_quantile * (double)(n_gen - 1))];
    out->max_attempts = max_attempts;
    out->auc = res.auc;
    double keep = 0.0;
    for (int64_t i = 0; i < n_gen; i++)
        keep += model_accept_keep_probability(out, z[i]);
    out->acceptance = keep / (double)n_gen;
    free(sorted);
    free(z);
    free(scratch);
    return GT_OK;
}

int model_accept_pack(const model_accept *a, void **out, size_t *out_len, gt_error *err)
{
    const model_classify_net *n = &a->net;
    if (!n->weights || n->n_weights != model_classify_net_count(n->d, n->hidden, n->depth))
        return gt_error_set(err, GT_EINVAL, "acceptance: no trained network to pack");
    size_t total = HEADER + 16 * (size_t)n->d + 4 * n->n_weights + 4;
    uint8_t *p = malloc(total);
    if (!p)
        return gt_error_set(err, GT_ENOMEM, "out of memory packing a %zu-byte acceptance test",
                            total);
    memcpy(p, MAGIC, 8);
    gt_le_put_u32(p + 8, VERSION);
    gt_le_put_u32(p + 12, (uint32_t)n->d);
    gt_le_put_u32(p + 16, (uint32_t)n->hidden);
    gt_le_put_u32(p + 20, (uint32_t)n->depth);
    gt_le_put_f32(p + 24, n->slope);
    gt_le_put_f64(p + 28, a->log_cap);
    gt_le_put_u32(p + 36, (uint32_t)a->max_attempts);
    gt_le_put_f64(p + 40, a->acceptance);
    gt_le_put_f64(p + 48, a->auc);
    memcpy(p + 56, a->ckpt_sha256, 64);
    size_t off = HEADER;
    for (int j = 0; j < n->d; j++, off += 8)
        gt_le_put_f64(p + off, n->mean[j]);
    for (int j = 0; j < n->d; j++, off += 8)
        gt_le_put_f64(p + off, n->inv_std[j]);
    for (size_t i = 0; i < n->n_weights; i++, off += 4)
        gt_le_put_f32(p + off, n->weights[i]);
    gt_le_put_u32(p + off, nn_ckpt_crc32(p, off));
    *out = p;
    *out_len = total;
    return GT_OK;
}

int model_accept_unpack(const void *buf, size_t len, model_accept *a, gt_error *err)
{
    const uint8_t *p = buf;
    memset(a, 0, sizeof *a);
    if (!p || len < HEADER + 4 || memcmp(p, MAGIC, 8) != 0)
        return gt_error_set(err, GT_EFORMAT, "not a giant acceptance test");
    if (gt_le_get_u32(p + 8) != VERSION)
        return gt_error_set(err, GT_EFORMAT, "acceptance test version %u, this build reads %u",
                            gt_le_get_u32(p + 8), VERSION);
    uint32_t d = gt_le_get_u32(p + 12), hidden = gt_le_get_u32(p + 16),
             depth = gt_le_get_u32(p + 20);
    if (d < 1 || d > MAX_D || hidden < 1 || hidden > MAX_HIDDEN || depth < 1 || depth > MAX_DEPTH)
        return gt_error_set(err, GT_EFORMAT,
                            "acceptance test of %u inputs, %u hidden, depth %u: out of range", d,
                            hidden, depth);
    size_t count = model_classify_net_count((int)d, (int)hidden, (int)depth);
    if (len != HEADER + 16 * (size_t)d + 4 * count + 4)
        return gt_error_set(err, GT_EFORMAT, "acceptance test is truncated or has trailing bytes");
    if (gt_le_get_u32(p + len - 4) != nn_ckpt_crc32(p, len - 4))
        return gt_error_set(err, GT_ECHECKSUM, "acceptance test: checksum mismatch");
    float slope = gt_le_get_f32(p + 24);
    double log_cap = gt_le_get_f64(p + 28);
    uint32_t attempts = gt_le_get_u32(p + 36);
    if (!(slope > 0.0f && slope < 1.0f) || !isfinite(log_cap) || attempts < 1 ||
        attempts > 1u << 20)
        return gt_error_set(err, GT_EFORMAT,
                            "acceptance test: slope %g, cap %g, %u attempts: out of range",
                            (double)slope, log_cap, attempts);
    model_classify_net *n = &a->net;
    n->d = (int)d;
    n->hidden = (int)hidden;
    n->depth = (int)depth;
    n->slope = slope;
    n->n_weights = count;
    n->mean = malloc((size_t)d * sizeof(double));
    n->inv_std = malloc((size_t)d * sizeof(double));
    n->weights = malloc(count * sizeof(float));
    if (!n->mean || !n->inv_std || !n->weights) {
        model_accept_free(a);
        return gt_error_set(err, GT_ENOMEM, "out of memory reading an acceptance test");
    }
    a->log_cap = log_cap;
    a->max_attempts = (int)attempts;
    a->acceptance = gt_le_get_f64(p + 40);
    a->auc = gt_le_get_f64(p + 48);
    memcpy(a->ckpt_sha256, p + 56, 64);
    size_t off = HEADER;
    for (uint32_t j = 0; j < d; j++, off += 8)
        n->mean[j] = gt_le_get_f64(p + off);
    for (uint32_t j = 0; j < d; j++, off += 8)
        n->inv_std[j] = gt_le_get_f64(p + off);
    for (size_t i = 0; i < count; i++, off += 4)
        n->weights[i] = gt_le_get_f32(p + off);
    for (uint32_t j = 0; j < d; j++)
        if (!isfinite(n->mean[j]) || !isfinite(n->inv_std[j])) {
            model_accept_free(a);
            return gt_error_set(err, GT_EFORMAT, "acceptance test: column %u's statistics are "
                                                 "not finite", j);
        }
    return GT_OK;
}

/* Monotonic seconds, for the report. */
static double accept_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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
                         int (*should_stop)(void *user), void *stop_user, void **blob,
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
    double t0 = accept_clock();
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
    rep->generate_s = accept_clock() - t0;
    t0 = accept_clock();
    model_classify_config cls;
    model_classify_config_default(&cls);
    cls.hidden = cfg->accept.hidden;
    cls.depth = cfg->accept.depth;
    cls.epochs = cfg->accept.epochs;
    cls.seed = cfg->seed;
    cls.should_stop = should_stop;
    cls.stop_user = stop_user;
    if ((rc = model_accept_train(b, train_rows, n, gen_rows, n, d, &cls, cfg->accept.cap_quantile,
                                 cfg->accept.max_attempts, &acc, err)) ||
        (rc = model_accept_pack(&acc, blob, blob_len, err)))
        goto done;
    rep->train_s = accept_clock() - t0;
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
