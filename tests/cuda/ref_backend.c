/* ref_backend: see ref_backend.h.  Each op is the documented formula of
 * nn_backend.h written as directly as possible. */
#include "ref_backend.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn_math.h"
#include "nn_rng.h"

#define AT(t, i, j) (((float *)(t).data)[(size_t)(i) * (t).ld + (j)])
#define ATH(t, i, j) (((uint16_t *)(t).data)[(size_t)(i) * (t).ld + (j)])

/* Every element (i, j) of t's shape, row by row: the loop of every
 * per-element op below. */
#define REF_EACH(t)                                                            \
    for (int i = 0; i < (t).rows; i++)                                         \
        for (int j = 0; j < (t).cols; j++)

static float ref_get(nn_tensor t, int i, int j)
{
    return t.dtype == NN_BF16 ? nn_f32_from_bf16(ATH(t, i, j)) : AT(t, i, j);
}

static void ref_destroy(nn_backend *b)
{
    free(b);
}

static int ref_alloc(nn_backend *b, size_t bytes, void **out, gt_error *err)
{
    size_t sz = (bytes + 63) / 64 * 64;
    *out = aligned_alloc(64, sz ? sz : 64);
    if (!*out)
        return gt_error_set(err, GT_ENOMEM, "ref alloc %zu", bytes);
    memset(*out, 0, sz ? sz : 64);
    b->alloc_count++;
    return GT_OK;
}

static void ref_free(nn_backend *b, void *p)
{
    (void)b;
    free(p);
}

static int ref_memset(nn_backend *b, void *p, int v, size_t n, gt_error *err)
{
    (void)b, (void)err;
    memset(p, v, n);
    return GT_OK;
}

static int ref_copy(nn_backend *b, void *d, const void *s, size_t n, gt_error *err)
{
    (void)b, (void)err;
    memmove(d, s, n);
    return GT_OK;
}

static int ref_sync(nn_backend *b, gt_error *err)
{
    (void)b, (void)err;
    return GT_OK;
}

static int ref_matmul(nn_backend *b, nn_tensor c, nn_tensor a, int ta, nn_tensor bm, int tb,
                      const float *bias, nn_act act, int acc, gt_error *err)
{
    (void)b, (void)err;
    int k = ta ? a.rows : a.cols;
    REF_EACH(c) {
        double s = 0.0;
        for (int q = 0; q < k; q++)
            s += (double)(ta ? ref_get(a, q, i) : ref_get(a, i, q)) *
                 (tb ? ref_get(bm, j, q) : ref_get(bm, q, j));
        float v = (float)s + (bias ? bias[j] : 0.0f);
        if (acc)
            v += AT(c, i, j);
        AT(c, i, j) = act == NN_ACT_SILU ? nn_silu(v) : v;
    }
    return GT_OK;
}

static int ref_bias_grad(nn_backend *b, float *db, nn_tensor dy, int acc, gt_error *err)
{
    (void)b, (void)err;
    for (int j = 0; j < dy.cols; j++) {
        double s = 0.0;
        for (int i = 0; i < dy.rows; i++)
            s += AT(dy, i, j);
        db[j] = acc ? db[j] + (float)s : (float)s;
    }
    return GT_OK;
}

static int ref_silu_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    (void)b, (void)err;
    REF_EACH(x) {
        float v = nn_silu(AT(x, i, j));
        if (y.dtype == NN_BF16)
            ATH(y, i, j) = nn_bf16_from_f32(v);
        else
            AT(y, i, j) = v;
    }
    return GT_OK;
}

static int ref_silu_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, gt_error *err)
{
    (void)b, (void)err;
    REF_EACH(x)
        AT(dx, i, j) = AT(dy, i, j) * nn_silu_grad(AT(x, i, j));
    return GT_OK;
}

static int ref_leaky_fwd(nn_backend *b, nn_tensor y, nn_tensor x, float sl, gt_error *err)
{
    (void)b, (void)err;
    REF_EACH(x)
        AT(y, i, j) = nn_leaky(AT(x, i, j), sl);
    return GT_OK;
}

static int ref_leaky_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, float sl,
                         gt_error *err)
{
    (void)b, (void)err;
    REF_EACH(x)
        AT(dx, i, j) = AT(dy, i, j) * nn_leaky_grad(AT(x, i, j), sl);
    return GT_OK;
}

static int ref_ln_fwd(nn_backend *b, nn_tensor y, float *mean, float *rstd, nn_tensor x,
                      const float *g, const float *be, float eps, gt_error *err)
{
    (void)b, (void)err;
    for (int i = 0; i < x.rows; i++) {
        float mu, rs;
        nn_ln_row_stats(&AT(x, i, 0), x.cols, eps, &mu, &rs);
        if (mean)
            mean[i] = mu;
        if (rstd)
            rstd[i] = rs;
        for (int j = 0; j < x.cols; j++) {
            float v = nn_ln_elem(AT(x, i, j), mu, rs, g[j], be[j]);
            if (y.dtype == NN_BF16)
                ATH(y, i, j) = nn_bf16_from_f32(v);
            else
                AT(y, i, j) = v;
        }
    }
    return GT_OK;
}

static int ref_ln_bwd(nn_backend *b, nn_tensor dx, float *dg, float *dbe, nn_tensor dy,
                      nn_tensor x, const float *mean, const float *rstd, const float *g,
                      int acc, gt_error *err)
{
    (void)b, (void)err;
    for (int i = 0; i < x.rows; i++) {
        nn_ln_row_bwd(&AT(x, i, 0), &AT(dy, i, 0), g, mean[i], rstd[i], x.cols, &AT(dx, i, 0),
                      acc);
        for (int j = 0; j < x.cols; j++) {
            dg[j] += AT(dy, i, j) * (AT(x, i, j) - mean[i]) * rstd[i];
            dbe[j] += AT(dy, i, j);
        }
    }
    return GT_OK;
}

static int ref_add(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err)
{
    (void)b, (void)err;
    REF_EACH(y)
        AT(y, i, j) = AT(x1, i, j) + AT(x2, i, j);
    return GT_OK;
}

static int ref_mul(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err)
{
    (void)b, (void)err;
    REF_EACH(y)
        AT(y, i, j) = AT(x1, i, j) * AT(x2, i, j);
    return GT_OK;
}

/* The parts lie side by side in y's columns (absent ones, data NULL,
 * too): to_parts copies each part's block of y into it (split, added to
 * it when acc), else each part into its block of y (concat). */
static void ref_blocks(nn_tensor y, const nn_tensor *p, int np, int to_parts, int acc)
{
    int c0 = 0;
    for (int q = 0; q < np; q++) {
        if (p[q].data)
            for (int i = 0; i < y.rows; i++)
                for (int j = 0; j < p[q].cols; j++) {
                    if (to_parts)
                        AT(p[q], i, j) = (acc ? AT(p[q], i, j) : 0.0f) + AT(y, i, c0 + j);
                    else
                        AT(y, i, c0 + j) = AT(p[q], i, j);
                }
        c0 += p[q].cols;
    }
}

static int ref_concat(nn_backend *b, nn_tensor y, const nn_tensor *p, int np, gt_error *err)
{
    (void)b, (void)err;
    ref_blocks(y, p, np, 0, 0);
    return GT_OK;
}

static int ref_split(nn_backend *b, nn_tensor *p, int np, nn_tensor y, int acc, gt_error *err)
{
    (void)b, (void)err;
    ref_blocks(y, p, np, 1, acc);
    return GT_OK;
}

static int ref_embed_fwd(nn_backend *b, nn_tensor y, nn_tensor cond, int e, float sc, float mp,
                         gt_error *err)
{
    (void)b, (void)err;
    for (int i = 0; i < cond.rows; i++)
        for (int c = 0; c < cond.cols; c++)
            for (int j = 0; j < e; j++)
                AT(y, i, c * e + j) = nn_embed_elem(AT(cond, i, c) * sc, j, e, mp);
    return GT_OK;
}

static int ref_embed_bwd(nn_backend *b, nn_tensor dc, nn_tensor dy, nn_tensor cond, int e,
                         float sc, float mp, int acc, gt_error *err)
{
    (void)b, (void)err;
    for (int i = 0; i < cond.rows; i++)
        for (int c = 0; c < cond.cols; c++) {
            float s = 0.0f;
            for (int j = 0; j < e; j++)
                s += AT(dy, i, c * e + j) * nn_embed_elem_grad(AT(cond, i, c) * sc, j, e, mp);
            s *= sc;
            AT(dc, i, c) = acc ? AT(dc, i, c) + s : s;
        }
    return GT_OK;
}

static int ref_softmax_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    (void)b, (void)err;
    for (int i = 0; i < x.rows; i++)
        nn_softmax_row(&AT(x, i, 0), &AT(y, i, 0), x.cols);
    return GT_OK;
}

static int ref_softmax_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor y,
                           gt_error *err)
{
    (void)b, (void)err;
    for (int i = 0; i < y.rows; i++) {
        float s = 0.0f;
        for (int j = 0; j < y.cols; j++)
            s += AT(dy, i, j) * AT(y, i, j);
        for (int j = 0; j < y.cols; j++)
            AT(dx, i, j) = AT(y, i, j) * (AT(dy, i, j) - s);
    }
    return GT_OK;
}

static int ref_topk_fwd(nn_backend *b, int32_t *idx, float *w, nn_tensor p, int k,
                        gt_error *err)
{
    (void)b, (void)err;
    for (int i = 0; i < p.rows; i++) {
        unsigned long long taken = 0;
        float sum = 0.0f;
        for (int s = 0; s < k; s++) {
            int best = -1;
            for (int e = 0; e < p.cols; e++)
                if (!(taken >> e & 1) && (best < 0 || AT(p, i, e) > AT(p, i, best)))
                    best = e;
            taken |= 1ull << best;
            idx[i * k + s] = best;
            w[i * k + s] = AT(p, i, best);
            sum += AT(p, i, best);
        }
        for (int s = 0; s < k; s++)
            w[i * k + s] *= sum > 0.0f ? 1.0f / sum : 0.0f;
    }
    return GT_OK;
}

static int ref_topk_bwd(nn_backend *b, nn_tensor dp, const float *dw, const int32_t *idx,
                        const float *w, nn_tensor p, int k, int acc, gt_error *err)
{
    (void)b, (void)err;
    for (int i = 0; i < p.rows; i++) {
        if (!acc)
            for (int e = 0; e < p.cols; e++)
                AT(dp, i, e) = 0.0f;
        float S = 0.0f, dot = 0.0f;
        for (int s = 0; s < k; s++) {
            S += AT(p, i, idx[i * k + s]);
            dot += dw[i * k + s] * w[i * k + s];
        }
        if (S > 0.0f)
            for (int s = 0; s < k; s++)
                AT(dp, i, idx[i * k + s]) += (dw[i * k + s] - dot) / S;
    }
    return GT_OK;
}

static int ref_gather(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                      const float *sc, gt_error *err)
{
    (void)b, (void)err;
    REF_EACH(y)
        AT(y, i, j) = (sc ? sc[i] : 1.0f) * AT(x, idx[i], j);
    return GT_OK;
}

static int ref_scatter(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                       const float *sc, gt_error *err)
{
    (void)b, (void)err;
    REF_EACH(x)
        AT(y, idx[i], j) += (sc ? sc[i] : 1.0f) * AT(x, i, j);
    return GT_OK;
}

static int ref_gather_dot(nn_backend *b, float *out, nn_tensor a, const int32_t *idx,
                          nn_tensor x, gt_error *err)
{
    (void)b, (void)err;
    for (int i = 0; i < x.rows; i++) {
        double s = 0.0;
        for (int j = 0; j < x.cols; j++)
            s += (double)AT(a, idx[i], j) * AT(x, i, j);
        out[i] = (float)s;
    }
    return GT_OK;
}

static int ref_balance_fwd(nn_backend *b, float *loss, nn_tensor p, const float *frac,
                           gt_error *err)
{
    (void)b, (void)err;
    double s = 0.0;
    REF_EACH(p)
        s += (double)frac[j] * AT(p, i, j);
    *loss = (float)(s * p.cols / p.rows);
    return GT_OK;
}

static int ref_balance_bwd(nn_backend *b, nn_tensor dp, float dl, const float *frac,
                           gt_error *err)
{
    (void)b, (void)err;
    REF_EACH(dp)
        AT(dp, i, j) += dl * (float)dp.cols * frac[j] / (float)dp.rows;
    return GT_OK;
}

static int ref_entropy_fwd(nn_backend *b, float *loss, nn_tensor p, gt_error *err)
{
    (void)b, (void)err;
    double s = 0.0;
    REF_EACH(p)
        s += nn_entropy_term(AT(p, i, j));
    *loss = (float)(s / p.rows);
    return GT_OK;
}

static int ref_entropy_bwd(nn_backend *b, nn_tensor dp, float dl, nn_tensor p, gt_error *err)
{
    (void)b, (void)err;
    float s = dl / (float)p.rows;
    REF_EACH(p)
        AT(dp, i, j) += s * nn_entropy_grad(AT(p, i, j));
    return GT_OK;
}

static int ref_mse_fwd(nn_backend *b, float *loss, nn_tensor p, nn_tensor t, gt_error *err)
{
    (void)b, (void)err;
    double s = 0.0;
    REF_EACH(p) {
        double d = (double)AT(p, i, j) - AT(t, i, j);
        s += d * d;
    }
    *loss = (float)(s / ((double)p.rows * p.cols));
    return GT_OK;
}

static int ref_mse_bwd(nn_backend *b, nn_tensor dp, float dl, nn_tensor p, nn_tensor t, int acc,
                       gt_error *err)
{
    (void)b, (void)err;
    float sc = 2.0f * dl / (float)((double)p.rows * p.cols);
    REF_EACH(p) {
        float g = sc * (AT(p, i, j) - AT(t, i, j));
        AT(dp, i, j) = acc ? AT(dp, i, j) + g : g;
    }
    return GT_OK;
}

static int ref_mean_fwd(nn_backend *b, float *out, nn_tensor x, gt_error *err)
{
    (void)b, (void)err;
    double s = 0.0;
    REF_EACH(x)
        s += AT(x, i, j);
    *out = (float)(s / ((double)x.rows * x.cols));
    return GT_OK;
}

static int ref_mean_bwd(nn_backend *b, nn_tensor dx, float dout, int acc, gt_error *err)
{
    (void)b, (void)err;
    float g = dout / (float)((double)dx.rows * dx.cols);
    REF_EACH(dx)
        AT(dx, i, j) = acc ? AT(dx, i, j) + g : g;
    return GT_OK;
}

static int ref_affine_cols(nn_backend *b, nn_tensor y, nn_tensor x, const float *scale,
                           const float *shift, gt_error *err)
{
    (void)b, (void)err;
    REF_EACH(y)
        AT(y, i, j) = scale[j] * AT(x, i, j) + (shift ? shift[j] : 0.0f);
    return GT_OK;
}

static int ref_axpby_rows(nn_backend *b, nn_tensor y, const float *alpha, nn_tensor x,
                          const float *beta, nn_tensor z, gt_error *err)
{
    (void)b, (void)err;
    REF_EACH(y)
        AT(y, i, j) = alpha[i] * AT(x, i, j) + beta[i] * AT(z, i, j);
    return GT_OK;
}

static int ref_sb_fwd(nn_backend *b, nn_tensor f, nn_tensor z, gt_error *err)
{
    (void)b, (void)err;
    for (int i = 0; i < f.rows; i++)
        nn_sb_fwd_row(&AT(z, i, 0), &AT(f, i, 0), f.cols);
    return GT_OK;
}

/* The L floats of scratch a stick-breaking row needs (one when L is 0). */
static float *ref_sb_scratch(int L, const char *op, gt_error *err)
{
    float *s = malloc(sizeof(float) * (size_t)(L > 0 ? L : 1));
    if (!s)
        gt_error_set(err, GT_ENOMEM, "ref %s", op);
    return s;
}

static int ref_sb_bwd(nn_backend *b, nn_tensor dz, nn_tensor df, nn_tensor z, int acc,
                      gt_error *err)
{
    (void)b;
    float *s = ref_sb_scratch(df.cols, "sb_bwd", err);
    if (!s)
        return GT_ENOMEM;
    for (int i = 0; i < df.rows; i++)
        nn_sb_bwd_row(&AT(z, i, 0), &AT(df, i, 0), &AT(dz, i, 0), df.cols, s, acc);
    free(s);
    return GT_OK;
}

static int ref_sb_inv(nn_backend *b, nn_tensor z, nn_tensor f, float eps, gt_error *err)
{
    (void)b;
    float *s = ref_sb_scratch(f.cols, "sb_inv", err);
    if (!s)
        return GT_ENOMEM;
    for (int i = 0; i < f.rows; i++)
        nn_sb_inv_row(&AT(f, i, 0), &AT(z, i, 0), f.cols, eps, s);
    free(s);
    return GT_OK;
}

static int ref_cast(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    (void)b, (void)err;
    REF_EACH(x)
        ATH(y, i, j) = nn_bf16_from_f32(AT(x, i, j));
    return GT_OK;
}

static int ref_sumsq(nn_backend *b, float *out, const float *x, size_t n, gt_error *err)
{
    (void)b, (void)err;
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    *out = (float)s;
    return GT_OK;
}

static int ref_adamw(nn_backend *b, float *p, uint16_t *pb, const float *g, float *m, float *v,
                     size_t n, const nn_adamw_hp *hpp, const float *sumsq, gt_error *err)
{
    (void)b, (void)err;
    nn_adamw_hp h = *hpp;
    if (sumsq && !nn_adamw_hp_clip(&h, *sumsq))
        return GT_OK;
    for (size_t i = 0; i < n; i++) {
        nn_adamw_elem(&p[i], &m[i], &v[i], g[i], &h);
        if (pb)
            pb[i] = nn_bf16_from_f32(p[i]);
    }
    return GT_OK;
}

static int ref_rand(nn_backend *b, float *x, size_t n, nn_dist d, float a, float bb,
                    uint64_t seed, uint64_t stream, uint64_t off, gt_error *err)
{
    (void)b, (void)err;
    for (size_t i = 0; i < n; i++) {
        uint32_t r[4];
        nn_rng_block(seed, stream, off + i / 4, r);
        x[i] = nn_rng_fill_elem(r, (int)(i % 4), (int)d, a, bb);
    }
    return GT_OK;
}

/* --- the fixed-order linear layer: the CPU contract (cpu_fixed.h) ----------
 * written out per element.  The packed weight is a dense row-major copy
 * (ld = k).  Per element:
 *   fp32: acc = 0; for p = 0..k-1: acc = fmaf(x[p], w[p], acc)
 *   bf16: acc = 0; for each pair q: acc = fmaf(x[2q+1], w[2q+1], acc);
 *                                  acc = fmaf(x[2q], w[2q], acc)
 *         (x[k] = w[k] = 0 when k is odd), inputs and every fmaf result
 *         flushed to zero when denormal (the CPU's MXCSR FTZ + DAZ, done here
 *         in software: it can differ from the hardware only for a result
 *         that rounds up to exactly FLT_MIN from below, where x86 flushes
 *         and this keeps FLT_MIN);
 *   then v = acc + bias[j]; v = nn_silu_fixed(v) for SiLU; v = y + v when
 *   accumulating.  Built with -ffp-contract=off (tests/cuda/CMakeLists.txt)
 *   so no multiply-add is fused behind the code's back. */
#define REF_FX_LAYOUT 0x52454658   /* "REFX" */

static float ref_ftz(float v)
{
    return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
}

static size_t ref_pack_bytes(nn_backend *b, int n, int k, nn_dtype dt)
{
    (void)b;
    return (size_t)n * (size_t)k * nn_dtype_size(dt);
}

static int ref_pack_weight(nn_backend *b, nn_packed *dst, nn_tensor w, gt_error *err)
{
    (void)b, (void)err;
    size_t es = nn_dtype_size(w.dtype);
    for (int j = 0; j < w.rows; j++)
        memcpy((char *)dst->data + (size_t)j * w.cols * es,
               (const char *)w.data + (size_t)j * w.ld * es, (size_t)w.cols * es);
    dst->layout = REF_FX_LAYOUT;
    return GT_OK;
}

/* x_p * w_p of bf16 row x (ld-strided view row i) and packed row j, 0 past k */
static float ref_fx_x(nn_tensor x, int i, int p)
{
    return p < x.cols ? ref_ftz(nn_f32_from_bf16(ATH(x, i, p))) : 0.0f;
}

static float ref_fx_w(const uint16_t *w, int k, int j, int p)
{
    return p < k ? ref_ftz(nn_f32_from_bf16(w[(size_t)j * k + p])) : 0.0f;
}

static int ref_linear_fixed(nn_backend *b, nn_tensor y, nn_tensor x, const nn_packed *w,
                            const float *bias, nn_act act, int acc, gt_error *err)
{
    (void)b;
    if (w->layout != REF_FX_LAYOUT)
        return gt_error_set(err, GT_EINVAL, "ref linear_fixed: weight packed elsewhere");
    const int k = w->k;
    REF_EACH(y) {
        float s = 0.0f;
        if (w->dtype == NN_BF16) {
            const uint16_t *wh = (const uint16_t *)w->data;
            for (int q = 0; 2 * q < k; q++) {
                s = ref_ftz(fmaf(ref_fx_x(x, i, 2 * q + 1), ref_fx_w(wh, k, j, 2 * q + 1), s));
                s = ref_ftz(fmaf(ref_fx_x(x, i, 2 * q), ref_fx_w(wh, k, j, 2 * q), s));
            }
        } else {
            const float *wf = (const float *)w->data + (size_t)j * k;
            for (int p = 0; p < k; p++)
                s = fmaf(AT(x, i, p), wf[p], s);
        }
        float v = s;
        if (bias)
            v = v + bias[j];
        if (act == NN_ACT_SILU)
            v = nn_silu_fixed(v);
        if (acc)
            v = AT(y, i, j) + v;
        AT(y, i, j) = v;
    }
    return GT_OK;
}

/* In the order of nn_backend_ops (by family). */
static const nn_backend_ops ref_ops = {
    /* memory and copies */
    .destroy = ref_destroy, .alloc = ref_alloc, .free = ref_free, .memset = ref_memset,
    .copy_h2d = ref_copy, .copy_d2h = ref_copy, .copy_d2d = ref_copy, .synchronize = ref_sync,
    /* column blocks */
    .concat = ref_concat, .split = ref_split,
    /* matrix product */
    .matmul = ref_matmul,
    /* elementwise and activations */
    .silu_fwd = ref_silu_fwd, .silu_bwd = ref_silu_bwd, .leaky_fwd = ref_leaky_fwd,
    .leaky_bwd = ref_leaky_bwd, .add = ref_add, .mul = ref_mul, .cast_bf16 = ref_cast,
    .axpby_rows = ref_axpby_rows, .affine_cols = ref_affine_cols,
    /* condition embedding */
    .embed_fwd = ref_embed_fwd, .embed_bwd = ref_embed_bwd,
    /* LayerNorm */
    .ln_fwd = ref_ln_fwd, .ln_bwd = ref_ln_bwd,
    /* reductions and losses */
    .bias_grad = ref_bias_grad, .mse_fwd = ref_mse_fwd, .mse_bwd = ref_mse_bwd,
    .mean_fwd = ref_mean_fwd, .mean_bwd = ref_mean_bwd, .sumsq = ref_sumsq,
    /* softmax */
    .softmax_fwd = ref_softmax_fwd, .softmax_bwd = ref_softmax_bwd,
    /* routing */
    .topk_fwd = ref_topk_fwd, .topk_bwd = ref_topk_bwd, .gather_rows = ref_gather,
    .scatter_add_rows = ref_scatter, .gather_dot = ref_gather_dot,
    .balance_fwd = ref_balance_fwd, .balance_bwd = ref_balance_bwd,
    .entropy_fwd = ref_entropy_fwd, .entropy_bwd = ref_entropy_bwd,
    /* stick-breaking */
    .sb_fwd = ref_sb_fwd, .sb_bwd = ref_sb_bwd, .sb_inv = ref_sb_inv,
    /* optimizer */
    .adamw = ref_adamw,
    /* random numbers */
    .rand_fill = ref_rand,
    /* fixed-order linear layer */
    .pack_bytes = ref_pack_bytes, .pack_weight = ref_pack_weight,
    .linear_fixed = ref_linear_fixed,
};

int ref_backend_create(nn_backend **out, gt_error *err)
{
    nn_backend *b = calloc(1, sizeof *b);
    if (!b)
        return gt_error_set(err, GT_ENOMEM, "ref backend");
    b->ops = &ref_ops;
    strcpy(b->name, "ref");
    b->bf16_emulated = 1;
    *out = b;
    return GT_OK;
}
