/* model_accept.c: the learned acceptance test, its training from rows and
 * its blob; the idea and the layout in model_accept.h.  Training one for a
 * run (showers, sampler, dataset) is model_accept_run.c, so that a reader
 * of the blob (the model file's, the fuzz targets') needs none of that. */
#include "model_accept.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feat.h"
#include "gt_le.h"
#include "model_data.h"
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

int model_accept_fits(const model_accept *a, const geo_geometry *g, gt_error *err)
{
    float threshold = 0;
    feat_layout fl;
    memset(&fl, 0, sizeof fl);
    int rc = model_geometry_threshold(g, &threshold, err);
    if (rc == GT_OK)
        rc = feat_layout_init(&fl, g, threshold, err);
    if (rc == GT_OK && feat_classifier_width(&fl) != a->net.d)
        rc = gt_error_set(err, GT_EINVAL,
                          "the acceptance test reads %d features a shower; this geometry has %d",
                          a->net.d, feat_classifier_width(&fl));
    feat_layout_free(&fl);
    return rc;
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
    if (!(a->acceptance >= 0.0 && a->acceptance <= 1.0) || !(a->auc >= 0.0 && a->auc <= 1.0)) {
        double acc = a->acceptance, auc = a->auc;
        model_accept_free(a);
        return gt_error_set(err, GT_EFORMAT,
                            "acceptance test: acceptance %g, AUC %g: out of [0, 1]", acc, auc);
    }
    memcpy(a->ckpt_sha256, p + 56, 64);
    size_t off = HEADER;
    for (uint32_t j = 0; j < d; j++, off += 8)
        n->mean[j] = gt_le_get_f64(p + off);
    for (uint32_t j = 0; j < d; j++, off += 8)
        n->inv_std[j] = gt_le_get_f64(p + off);
    for (size_t i = 0; i < count; i++, off += 4) {
        n->weights[i] = gt_le_get_f32(p + off);
        if (!isfinite(n->weights[i])) {
            model_accept_free(a);
            return gt_error_set(err, GT_EFORMAT, "acceptance test: weight %zu is not finite", i);
        }
    }
    for (uint32_t j = 0; j < d; j++)
        if (!isfinite(n->mean[j]) || !isfinite(n->inv_std[j])) {
            model_accept_free(a);
            return gt_error_set(err, GT_EFORMAT, "acceptance test: column %u's statistics are "
                                                 "not finite", j);
        }
    return GT_OK;
}
