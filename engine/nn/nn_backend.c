/* nn_backend.c: tensor views and the validating wrappers every caller goes
 * through (the backends themselves trust their input).  It knows no
 * backend: they are siblings (engine/cpu, engine/cuda), opened by name a
 * level up (model_backend_open). */
#include "nn_backend.h"
#include "nn_rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* dtypes, views                                                            */
/* ------------------------------------------------------------------------ */

int nn_dtype_parse(const char *s, nn_dtype *out, gt_error *err)
{
    if (s && (!strcmp(s, "fp32") || !strcmp(s, "f32") || !strcmp(s, "float32"))) {
        *out = NN_F32;
        return GT_OK;
    }
    if (s && (!strcmp(s, "bf16") || !strcmp(s, "bfloat16"))) {
        *out = NN_BF16;
        return GT_OK;
    }
    return gt_error_set(err, GT_EINVAL, "unknown precision '%s' (expected fp32 or bf16)",
                        s ? s : "(null)");
}

nn_tensor nn_tensor_cols(nn_tensor t, int col0, int ncols)
{
    nn_tensor v = t;
    v.data = (char *)t.data + (size_t)col0 * nn_dtype_size(t.dtype);
    v.cols = ncols;
    return v;
}

nn_tensor nn_tensor_rows(nn_tensor t, int row0, int nrows)
{
    nn_tensor v = t;
    v.data = (char *)t.data + (size_t)row0 * (size_t)t.ld * nn_dtype_size(t.dtype);
    v.rows = nrows;
    return v;
}

int nn_tensor_check(nn_tensor t, const char *what, gt_error *err)
{
    if (t.dtype != NN_F32 && t.dtype != NN_BF16)
        return gt_error_set(err, GT_EINVAL, "%s: unknown dtype %d", what, (int)t.dtype);
    if (t.rows < 0 || t.cols < 0)
        return gt_error_set(err, GT_EINVAL, "%s: negative shape %dx%d", what, t.rows, t.cols);
    if (t.ld < t.cols)
        return gt_error_set(err, GT_EINVAL, "%s: leading dimension %d < cols %d", what, t.ld,
                            t.cols);
    if (!t.data && t.rows > 0 && t.cols > 0)
        return gt_error_set(err, GT_EINVAL, "%s: NULL data for a %dx%d tensor", what, t.rows,
                            t.cols);
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* closing                                                                  */
/* ------------------------------------------------------------------------ */

void nn_backend_close(nn_backend *b)
{
    if (b && b->ops && b->ops->destroy)
        b->ops->destroy(b);
}

/* ------------------------------------------------------------------------ */
/* validation helpers                                                       */
/* ------------------------------------------------------------------------ */

static int need_backend(nn_backend *b, const char *op, gt_error *err)
{
    if (!b || !b->ops)
        return gt_error_set(err, GT_EINVAL, "%s: NULL backend", op);
    return GT_OK;
}

static int need_f32(nn_tensor t, const char *op, const char *what, gt_error *err)
{
    char name[96];
    snprintf(name, sizeof name, "%s: %s", op, what);
    GT_TRY(nn_tensor_check(t, name, err));
    if (t.dtype != NN_F32)
        return gt_error_set(err, GT_EINVAL, "%s: %s must be f32, got %s", op, what,
                            nn_dtype_name(t.dtype));
    return GT_OK;
}

static int same_shape(nn_tensor a, nn_tensor b, const char *op, const char *wa,
                      const char *wb, gt_error *err)
{
    if (a.rows != b.rows || a.cols != b.cols)
        return gt_error_set(err, GT_EINVAL, "%s: %s is %dx%d but %s is %dx%d", op, wa, a.rows,
                            a.cols, wb, b.rows, b.cols);
    return GT_OK;
}

static int need_ptr(const void *p, int nonempty, const char *op, const char *what,
                    gt_error *err)
{
    if (nonempty && !p)
        return gt_error_set(err, GT_EINVAL, "%s: NULL %s", op, what);
    return GT_OK;
}

static int unary_check(nn_backend *b, nn_tensor y, nn_tensor x, const char *op, gt_error *err)
{
    GT_TRY(need_backend(b, op, err));
    GT_TRY(need_f32(y, op, "y", err));
    GT_TRY(need_f32(x, op, "x", err));
    return same_shape(y, x, op, "y", "x", err);
}

/* ------------------------------------------------------------------------ */
/* memory and copies                                                        */
/* ------------------------------------------------------------------------ */

int nn_alloc(nn_backend *b, size_t bytes, void **out, gt_error *err)
{
    GT_TRY(need_backend(b, "alloc", err));
    if (!out)
        return gt_error_set(err, GT_EINVAL, "alloc: NULL out");
    return b->ops->alloc(b, bytes, out, err);
}

void nn_free(nn_backend *b, void *p)
{
    if (b && b->ops && p)
        b->ops->free(b, p);
}

int nn_memset(nn_backend *b, void *p, int value, size_t bytes, gt_error *err)
{
    GT_TRY(need_backend(b, "memset", err));
    GT_TRY(need_ptr(p, bytes > 0, "memset", "pointer", err));
    return bytes ? b->ops->memset(b, p, value, bytes, err) : GT_OK;
}

/* The three copies check alike; their table entry is read only once
 * need_backend has vouched for b->ops. */
typedef enum copy_dir { COPY_H2D, COPY_D2H, COPY_D2D } copy_dir;

static int copy_checked(nn_backend *b, copy_dir dir, void *dst, const void *src, size_t bytes,
                        gt_error *err)
{
    static const char *const op[] = {"copy_h2d", "copy_d2h", "copy_d2d"};
    GT_TRY(need_backend(b, op[dir], err));
    GT_TRY(need_ptr(dst, bytes > 0, op[dir], "destination", err));
    GT_TRY(need_ptr(src, bytes > 0, op[dir], "source", err));
    if (!bytes)
        return GT_OK;
    return dir == COPY_H2D   ? b->ops->copy_h2d(b, dst, src, bytes, err)
           : dir == COPY_D2H ? b->ops->copy_d2h(b, dst, src, bytes, err)
                             : b->ops->copy_d2d(b, dst, src, bytes, err);
}

int nn_copy_h2d(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err)
{
    return copy_checked(b, COPY_H2D, dst, src, bytes, err);
}

int nn_copy_d2h(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err)
{
    return copy_checked(b, COPY_D2H, dst, src, bytes, err);
}

int nn_copy_d2d(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err)
{
    return copy_checked(b, COPY_D2D, dst, src, bytes, err);
}

int nn_sync(nn_backend *b, gt_error *err)
{
    GT_TRY(need_backend(b, "synchronize", err));
    return b->ops->synchronize(b, err);
}

int nn_host_alloc(nn_backend *b, size_t bytes, void **out, gt_error *err)
{
    *out = NULL;
    if (b && b->ops && b->ops->host_alloc)
        return b->ops->host_alloc(b, bytes, out, err);
    size_t sz = (bytes + 63) / 64 * 64;
    *out = aligned_alloc(64, sz ? sz : 64);
    if (!*out)
        return gt_error_set(err, GT_ENOMEM, "out of host memory (%zu bytes)", bytes);
    return GT_OK;
}

void nn_host_free(nn_backend *b, void *p)
{
    if (!p)
        return;
    if (b && b->ops && b->ops->host_free)
        b->ops->host_free(b, p);
    else
        free(p);
}

/* ------------------------------------------------------------------------ */
/* column blocks and padding                                                */
/* ------------------------------------------------------------------------ */

static int blocks_check(nn_backend *b, nn_tensor y, const nn_tensor *parts, int nparts,
                        const char *op, gt_error *err)
{
    GT_TRY(need_backend(b, op, err));
    GT_TRY(need_f32(y, op, "y", err));
    if (nparts < 1 || !parts)
        return gt_error_set(err, GT_EINVAL, "%s: no parts", op);
    int cols = 0;
    for (int i = 0; i < nparts; i++) {
        nn_tensor p = parts[i];
        if (p.dtype != NN_F32)
            return gt_error_set(err, GT_EINVAL, "%s: part %d must be f32", op, i);
        if (p.rows != y.rows)
            return gt_error_set(err, GT_EINVAL, "%s: part %d has %d rows, y has %d", op, i,
                                p.rows, y.rows);
        if (p.data) {
            nn_tensor q = p;
            GT_TRY(nn_tensor_check(q, op, err));
        } else if (p.cols < 0) {
            return gt_error_set(err, GT_EINVAL, "%s: part %d has negative cols", op, i);
        }
        cols += p.cols;
    }
    if (cols != y.cols)
        return gt_error_set(err, GT_EINVAL, "%s: parts have %d columns in all, y has %d", op,
                            cols, y.cols);
    return GT_OK;
}

int nn_concat(nn_backend *b, nn_tensor y, const nn_tensor *parts, int nparts, gt_error *err)
{
    GT_TRY(blocks_check(b, y, parts, nparts, "concat", err));
    return b->ops->concat(b, y, parts, nparts, err);
}

int nn_split(nn_backend *b, nn_tensor *parts, int nparts, nn_tensor y, int accumulate,
             gt_error *err)
{
    GT_TRY(blocks_check(b, y, parts, nparts, "split", err));
    return b->ops->split(b, parts, nparts, y, accumulate, err);
}

int nn_zero_outside(nn_backend *b, nn_tensor x, const int32_t *valid, int n_valid,
                    const int32_t *idx, gt_error *err)
{
    GT_TRY(need_backend(b, "zero_outside", err));
    GT_TRY(need_f32(x, "zero_outside", "x", err));
    if (n_valid < 0)
        return gt_error_set(err, GT_EINVAL, "zero_outside: n_valid %d is negative", n_valid);
    GT_TRY(need_ptr(valid, n_valid > 0, "zero_outside", "valid", err));
    if (x.rows == 0 || x.cols == 0 || n_valid == 0)
        return GT_OK;
    if (b->ops->zero_outside)
        return b->ops->zero_outside(b, x, valid, n_valid, idx, err);
    /* the fallback: the bounds to the host, then a memset per range */
    int32_t *v = malloc((size_t)n_valid * 2 * sizeof *v);
    int32_t *ix = idx ? malloc((size_t)x.rows * sizeof *ix) : NULL;
    int rc = !v || (idx && !ix) ? gt_error_set(err, GT_ENOMEM, "zero_outside: out of memory")
                                : GT_OK;
    if (!rc)
        rc = nn_copy_d2h(b, v, valid, (size_t)n_valid * 2 * sizeof *v, err);
    if (!rc && idx)
        rc = nn_copy_d2h(b, ix, idx, (size_t)x.rows * sizeof *ix, err);
    for (int r = 0; !rc && r < x.rows; r++) {
        int k = ix ? ix[r] : r;
        if (k < 0 || k >= n_valid)
            continue;
        int lo = v[2 * k] < 0 ? 0 : v[2 * k] > x.cols ? x.cols : v[2 * k];
        int hi = v[2 * k + 1] < lo ? lo : v[2 * k + 1] > x.cols ? x.cols : v[2 * k + 1];
        float *row = (float *)x.data + (size_t)r * x.ld;
        if (lo > 0)
            rc = nn_memset(b, row, 0, (size_t)lo * sizeof(float), err);
        if (!rc && hi < x.cols)
            rc = nn_memset(b, row + hi, 0, (size_t)(x.cols - hi) * sizeof(float), err);
    }
    free(v);
    free(ix);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* matrix product                                                           */
/* ------------------------------------------------------------------------ */

int nn_matmul(nn_backend *b, nn_tensor c, nn_tensor a, int trans_a, nn_tensor bm,
              int trans_b, const float *bias, nn_act act, int accumulate, gt_error *err)
{
    const char *op = "matmul";
    GT_TRY(need_backend(b, op, err));
    GT_TRY(need_f32(c, op, "C", err));
    GT_TRY(nn_tensor_check(a, "matmul: A", err));
    GT_TRY(nn_tensor_check(bm, "matmul: B", err));
    if (a.dtype != bm.dtype)
        return gt_error_set(err, GT_EINVAL, "matmul: A is %s but B is %s (must match)",
                            nn_dtype_name(a.dtype), nn_dtype_name(bm.dtype));
    if (a.dtype == NN_BF16 && !b->has_bf16 && !b->bf16_emulated)
        return gt_error_set(err, GT_EUNSUPPORTED, "matmul: backend %s cannot do bf16",
                            b->name);
    int m = trans_a ? a.cols : a.rows, ka = trans_a ? a.rows : a.cols;
    int kb = trans_b ? bm.cols : bm.rows, n = trans_b ? bm.rows : bm.cols;
    if (ka != kb)
        return gt_error_set(err, GT_EINVAL,
                            "matmul: inner dimensions differ: op(A) is %dx%d, op(B) is %dx%d",
                            m, ka, kb, n);
    if (c.rows != m || c.cols != n)
        return gt_error_set(err, GT_EINVAL, "matmul: C is %dx%d but op(A).op(B) is %dx%d",
                            c.rows, c.cols, m, n);
    if (act != NN_ACT_NONE && act != NN_ACT_SILU)
        return gt_error_set(err, GT_EINVAL, "matmul: unknown activation %d", (int)act);
    if (accumulate && act != NN_ACT_NONE)
        return gt_error_set(err, GT_EINVAL, "matmul: an activation cannot be accumulated");
    if (m == 0 || n == 0)
        return GT_OK;
    return b->ops->matmul(b, c, a, trans_a, bm, trans_b, bias, act, accumulate, err);
}

/* ------------------------------------------------------------------------ */
/* elementwise and activations                                              */
/* ------------------------------------------------------------------------ */

/* A unary op whose output may also be bf16: the fp32 result rounded as
 * cast_bf16 rounds it (the trunk's LayerNorm and SiLU outputs under bf16
 * feed a matmul only, so the cast pass is folded into them). */
static int unary_check_out_bf16(nn_backend *b, nn_tensor y, nn_tensor x, const char *op,
                                gt_error *err)
{
    if (y.dtype != NN_BF16)
        return unary_check(b, y, x, op, err);
    GT_TRY(need_backend(b, op, err));
    GT_TRY(nn_tensor_check(y, op, err));
    GT_TRY(need_f32(x, op, "x", err));
    return same_shape(y, x, op, "y", "x", err);
}

int nn_silu_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    GT_TRY(unary_check_out_bf16(b, y, x, "silu_fwd", err));
    return b->ops->silu_fwd(b, y, x, err);
}

int nn_silu_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, gt_error *err)
{
    GT_TRY(unary_check(b, dx, x, "silu_bwd", err));
    GT_TRY(unary_check(b, dy, x, "silu_bwd", err));
    return b->ops->silu_bwd(b, dx, dy, x, err);
}

int nn_leaky_fwd(nn_backend *b, nn_tensor y, nn_tensor x, float slope, gt_error *err)
{
    GT_TRY(unary_check(b, y, x, "leaky_fwd", err));
    if (!isfinite(slope))
        return gt_error_set(err, GT_EINVAL, "leaky_fwd: slope is not finite");
    return b->ops->leaky_fwd(b, y, x, slope, err);
}

int nn_leaky_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, float slope,
                 gt_error *err)
{
    GT_TRY(unary_check(b, dx, x, "leaky_bwd", err));
    GT_TRY(unary_check(b, dy, x, "leaky_bwd", err));
    if (!isfinite(slope))
        return gt_error_set(err, GT_EINVAL, "leaky_bwd: slope is not finite");
    return b->ops->leaky_bwd(b, dx, dy, x, slope, err);
}

int nn_add(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err)
{
    GT_TRY(unary_check(b, y, x1, "add", err));
    GT_TRY(unary_check(b, y, x2, "add", err));
    return b->ops->add(b, y, x1, x2, err);
}

int nn_mul(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err)
{
    GT_TRY(unary_check(b, y, x1, "mul", err));
    GT_TRY(unary_check(b, y, x2, "mul", err));
    if (!b->ops->mul)
        return gt_error_set(err, GT_EUNSUPPORTED, "mul: backend %s lacks this op", b->name);
    return y.rows && y.cols ? b->ops->mul(b, y, x1, x2, err) : GT_OK;
}

int nn_cast_bf16(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    GT_TRY(need_backend(b, "cast_bf16", err));
    GT_TRY(nn_tensor_check(y, "cast_bf16: y", err));
    GT_TRY(need_f32(x, "cast_bf16", "x", err));
    if (y.dtype != NN_BF16)
        return gt_error_set(err, GT_EINVAL, "cast_bf16: y must be bf16, got %s",
                            nn_dtype_name(y.dtype));
    GT_TRY(same_shape(y, x, "cast_bf16", "y", "x", err));
    return b->ops->cast_bf16(b, y, x, err);
}

int nn_axpby_rows(nn_backend *b, nn_tensor y, const float *alpha, nn_tensor x,
                  const float *beta, nn_tensor z, gt_error *err)
{
    GT_TRY(need_backend(b, "axpby_rows", err));
    GT_TRY(need_f32(y, "axpby_rows", "y", err));
    GT_TRY(need_f32(x, "axpby_rows", "x", err));
    GT_TRY(need_f32(z, "axpby_rows", "z", err));
    GT_TRY(same_shape(y, x, "axpby_rows", "y", "x", err));
    GT_TRY(same_shape(y, z, "axpby_rows", "y", "z", err));
    GT_TRY(need_ptr(alpha, y.rows > 0, "axpby_rows", "alpha", err));
    GT_TRY(need_ptr(beta, y.rows > 0, "axpby_rows", "beta", err));
    if (!b->ops->axpby_rows)
        return gt_error_set(err, GT_EUNSUPPORTED, "axpby_rows: backend %s lacks this op",
                            b->name);
    return y.rows && y.cols ? b->ops->axpby_rows(b, y, alpha, x, beta, z, err) : GT_OK;
}

int nn_affine_cols(nn_backend *b, nn_tensor y, nn_tensor x, const float *scale,
                   const float *shift, gt_error *err)
{
    GT_TRY(need_backend(b, "affine_cols", err));
    GT_TRY(need_f32(y, "affine_cols", "y", err));
    GT_TRY(need_f32(x, "affine_cols", "x", err));
    GT_TRY(same_shape(y, x, "affine_cols", "y", "x", err));
    GT_TRY(need_ptr(scale, y.cols > 0, "affine_cols", "scale", err));
    if (!b->ops->affine_cols)
        return gt_error_set(err, GT_EUNSUPPORTED, "affine_cols: backend %s lacks this op",
                            b->name);
    return y.rows && y.cols ? b->ops->affine_cols(b, y, x, scale, shift, err) : GT_OK;
}

/* ------------------------------------------------------------------------ */
/* condition embedding                                                      */
/* ------------------------------------------------------------------------ */

static int embed_check(nn_backend *b, nn_tensor y, nn_tensor cond, int emb_dim, float scale,
                       float max_period, const char *op, const char *yname, gt_error *err)
{
    GT_TRY(need_backend(b, op, err));
    GT_TRY(need_f32(y, op, yname, err));
    GT_TRY(need_f32(cond, op, "cond", err));
    if (emb_dim <= 0 || emb_dim % 2)
        return gt_error_set(err, GT_EINVAL, "%s: emb_dim must be positive and even, got %d",
                            op, emb_dim);
    if (!isfinite(scale) || !(max_period > 1.0f) || !isfinite(max_period))
        return gt_error_set(err, GT_EINVAL, "%s: bad scale %g or max_period %g", op, scale,
                            max_period);
    if (y.rows != cond.rows || y.cols != cond.cols * emb_dim)
        return gt_error_set(err, GT_EINVAL, "%s: %s is %dx%d, expected %dx%d", op, yname,
                            y.rows, y.cols, cond.rows, cond.cols * emb_dim);
    return GT_OK;
}

int nn_embed_fwd(nn_backend *b, nn_tensor y, nn_tensor cond, int emb_dim, float scale,
                 float max_period, gt_error *err)
{
    GT_TRY(embed_check(b, y, cond, emb_dim, scale, max_period, "embed_fwd", "y", err));
    return b->ops->embed_fwd(b, y, cond, emb_dim, scale, max_period, err);
}

int nn_embed_bwd(nn_backend *b, nn_tensor dcond, nn_tensor dy, nn_tensor cond, int emb_dim,
                 float scale, float max_period, int accumulate, gt_error *err)
{
    GT_TRY(embed_check(b, dy, cond, emb_dim, scale, max_period, "embed_bwd", "dy", err));
    GT_TRY(need_f32(dcond, "embed_bwd", "dcond", err));
    GT_TRY(same_shape(dcond, cond, "embed_bwd", "dcond", "cond", err));
    return b->ops->embed_bwd(b, dcond, dy, cond, emb_dim, scale, max_period, accumulate, err);
}

/* ------------------------------------------------------------------------ */
/* LayerNorm                                                                */
/* ------------------------------------------------------------------------ */

int nn_ln_fwd(nn_backend *b, nn_tensor y, float *mean, float *rstd, nn_tensor x,
              const float *gamma, const float *beta, float eps, gt_error *err)
{
    GT_TRY(unary_check_out_bf16(b, y, x, "ln_fwd", err));
    GT_TRY(need_ptr(mean, x.rows > 0, "ln_fwd", "mean", err));
    GT_TRY(need_ptr(rstd, x.rows > 0, "ln_fwd", "rstd", err));
    GT_TRY(need_ptr(gamma, x.cols > 0, "ln_fwd", "gamma", err));
    GT_TRY(need_ptr(beta, x.cols > 0, "ln_fwd", "beta", err));
    if (!(eps > 0.0f) || !isfinite(eps))
        return gt_error_set(err, GT_EINVAL, "ln_fwd: eps must be positive, got %g", eps);
    if (x.cols == 0 && x.rows > 0)
        return gt_error_set(err, GT_EINVAL, "ln_fwd: rows with zero features");
    return b->ops->ln_fwd(b, y, mean, rstd, x, gamma, beta, eps, err);
}

int nn_ln_bwd(nn_backend *b, nn_tensor dx, float *dgamma, float *dbeta, nn_tensor dy,
              nn_tensor x, const float *mean, const float *rstd, const float *gamma,
              int accumulate_dx, gt_error *err)
{
    GT_TRY(unary_check(b, dx, x, "ln_bwd", err));
    GT_TRY(unary_check(b, dy, x, "ln_bwd", err));
    GT_TRY(need_ptr(mean, x.rows > 0, "ln_bwd", "mean", err));
    GT_TRY(need_ptr(rstd, x.rows > 0, "ln_bwd", "rstd", err));
    GT_TRY(need_ptr(gamma, x.cols > 0, "ln_bwd", "gamma", err));
    GT_TRY(need_ptr(dgamma, x.cols > 0, "ln_bwd", "dgamma", err));
    GT_TRY(need_ptr(dbeta, x.cols > 0, "ln_bwd", "dbeta", err));
    if (dx.data == x.data || dx.data == dy.data)
        return gt_error_set(err, GT_EINVAL, "ln_bwd: dx must not alias x or dy");
    return b->ops->ln_bwd(b, dx, dgamma, dbeta, dy, x, mean, rstd, gamma, accumulate_dx, err);
}

/* ------------------------------------------------------------------------ */
/* reductions and losses                                                    */
/* ------------------------------------------------------------------------ */

int nn_bias_grad(nn_backend *b, float *db, nn_tensor dy, int accumulate, gt_error *err)
{
    GT_TRY(need_backend(b, "bias_grad", err));
    GT_TRY(need_f32(dy, "bias_grad", "dy", err));
    GT_TRY(need_ptr(db, dy.cols > 0, "bias_grad", "db", err));
    return b->ops->bias_grad(b, db, dy, accumulate, err);
}

int nn_mse_fwd(nn_backend *b, float *loss, nn_tensor pred, nn_tensor target, gt_error *err)
{
    GT_TRY(need_backend(b, "mse_fwd", err));
    GT_TRY(need_f32(pred, "mse_fwd", "pred", err));
    GT_TRY(need_f32(target, "mse_fwd", "target", err));
    GT_TRY(same_shape(pred, target, "mse_fwd", "pred", "target", err));
    GT_TRY(need_ptr(loss, 1, "mse_fwd", "loss", err));
    if ((long long)pred.rows * pred.cols == 0)
        return gt_error_set(err, GT_EINVAL, "mse_fwd: empty input");
    return b->ops->mse_fwd(b, loss, pred, target, err);
}

int nn_mse_bwd(nn_backend *b, nn_tensor dpred, float dloss, nn_tensor pred, nn_tensor target,
               int accumulate, gt_error *err)
{
    GT_TRY(need_backend(b, "mse_bwd", err));
    GT_TRY(need_f32(dpred, "mse_bwd", "dpred", err));
    GT_TRY(need_f32(pred, "mse_bwd", "pred", err));
    GT_TRY(need_f32(target, "mse_bwd", "target", err));
    GT_TRY(same_shape(pred, target, "mse_bwd", "pred", "target", err));
    GT_TRY(same_shape(dpred, pred, "mse_bwd", "dpred", "pred", err));
    if ((long long)pred.rows * pred.cols == 0)
        return gt_error_set(err, GT_EINVAL, "mse_bwd: empty input");
    return b->ops->mse_bwd(b, dpred, dloss, pred, target, accumulate, err);
}

int nn_mean_fwd(nn_backend *b, float *out, nn_tensor x, gt_error *err)
{
    GT_TRY(need_backend(b, "mean_fwd", err));
    GT_TRY(need_f32(x, "mean_fwd", "x", err));
    GT_TRY(need_ptr(out, 1, "mean_fwd", "out", err));
    if ((long long)x.rows * x.cols == 0)
        return gt_error_set(err, GT_EINVAL, "mean_fwd: empty input");
    return b->ops->mean_fwd(b, out, x, err);
}

int nn_mean_bwd(nn_backend *b, nn_tensor dx, float dout, int accumulate, gt_error *err)
{
    GT_TRY(need_backend(b, "mean_bwd", err));
    GT_TRY(need_f32(dx, "mean_bwd", "dx", err));
    if ((long long)dx.rows * dx.cols == 0)
        return gt_error_set(err, GT_EINVAL, "mean_bwd: empty input");
    return b->ops->mean_bwd(b, dx, dout, accumulate, err);
}

int nn_sumsq(nn_backend *b, float *out, const float *x, size_t n, gt_error *err)
{
    GT_TRY(need_backend(b, "sumsq", err));
    GT_TRY(need_ptr(out, 1, "sumsq", "out", err));
    GT_TRY(need_ptr(x, n > 0, "sumsq", "x", err));
    return b->ops->sumsq(b, out, x, n, err);
}

/* ------------------------------------------------------------------------ */
/* softmax                                                                  */
/* ------------------------------------------------------------------------ */

int nn_softmax_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    GT_TRY(unary_check(b, y, x, "softmax_fwd", err));
    if (x.cols == 0 && x.rows > 0)
        return gt_error_set(err, GT_EINVAL, "softmax_fwd: rows with zero columns");
    return b->ops->softmax_fwd(b, y, x, err);
}

int nn_softmax_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor y, gt_error *err)
{
    GT_TRY(unary_check(b, dx, y, "softmax_bwd", err));
    GT_TRY(unary_check(b, dy, y, "softmax_bwd", err));
    return b->ops->softmax_bwd(b, dx, dy, y, err);
}

/* ------------------------------------------------------------------------ */
/* routing                                                                  */
/* ------------------------------------------------------------------------ */

static int topk_check(nn_backend *b, nn_tensor probs, int k, const char *op, gt_error *err)
{
    GT_TRY(need_backend(b, op, err));
    GT_TRY(need_f32(probs, op, "probs", err));
    if (k < 1 || k > probs.cols)
        return gt_error_set(err, GT_EINVAL, "%s: k = %d outside 1..%d", op, k, probs.cols);
    return GT_OK;
}

int nn_topk_fwd(nn_backend *b, int32_t *idx, float *w, nn_tensor probs, int k, gt_error *err)
{
    GT_TRY(topk_check(b, probs, k, "topk_fwd", err));
    GT_TRY(need_ptr(idx, probs.rows > 0, "topk_fwd", "idx", err));
    GT_TRY(need_ptr(w, probs.rows > 0, "topk_fwd", "w", err));
    return b->ops->topk_fwd(b, idx, w, probs, k, err);
}

int nn_topk_bwd(nn_backend *b, nn_tensor dprobs, const float *dw, const int32_t *idx,
                const float *w, nn_tensor probs, int k, int accumulate, gt_error *err)
{
    GT_TRY(topk_check(b, probs, k, "topk_bwd", err));
    GT_TRY(need_f32(dprobs, "topk_bwd", "dprobs", err));
    GT_TRY(same_shape(dprobs, probs, "topk_bwd", "dprobs", "probs", err));
    GT_TRY(need_ptr(idx, probs.rows > 0, "topk_bwd", "idx", err));
    GT_TRY(need_ptr(w, probs.rows > 0, "topk_bwd", "w", err));
    GT_TRY(need_ptr(dw, probs.rows > 0, "topk_bwd", "dw", err));
    return b->ops->topk_bwd(b, dprobs, dw, idx, w, probs, k, accumulate, err);
}

int nn_gather_rows(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                   const float *scale, gt_error *err)
{
    GT_TRY(need_backend(b, "gather_rows", err));
    GT_TRY(need_f32(y, "gather_rows", "y", err));
    GT_TRY(need_f32(x, "gather_rows", "x", err));
    if (y.cols != x.cols)
        return gt_error_set(err, GT_EINVAL, "gather_rows: y has %d cols, x has %d", y.cols,
                            x.cols);
    GT_TRY(need_ptr(idx, y.rows > 0, "gather_rows", "idx", err));
    return y.rows ? b->ops->gather_rows(b, y, x, idx, scale, err) : GT_OK;
}

int nn_scatter_add_rows(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                        const float *scale, gt_error *err)
{
    GT_TRY(need_backend(b, "scatter_add_rows", err));
    GT_TRY(need_f32(y, "scatter_add_rows", "y", err));
    GT_TRY(need_f32(x, "scatter_add_rows", "x", err));
    if (y.cols != x.cols)
        return gt_error_set(err, GT_EINVAL, "scatter_add_rows: y has %d cols, x has %d",
                            y.cols, x.cols);
    GT_TRY(need_ptr(idx, x.rows > 0, "scatter_add_rows", "idx", err));
    return x.rows ? b->ops->scatter_add_rows(b, y, x, idx, scale, err) : GT_OK;
}

int nn_gather_dot(nn_backend *b, float *out, nn_tensor a, const int32_t *idx, nn_tensor x,
                  gt_error *err)
{
    GT_TRY(need_backend(b, "gather_dot", err));
    GT_TRY(need_f32(a, "gather_dot", "a", err));
    GT_TRY(need_f32(x, "gather_dot", "x", err));
    if (a.cols != x.cols)
        return gt_error_set(err, GT_EINVAL, "gather_dot: a has %d cols, x has %d", a.cols,
                            x.cols);
    GT_TRY(need_ptr(idx, x.rows > 0, "gather_dot", "idx", err));
    GT_TRY(need_ptr(out, x.rows > 0, "gather_dot", "out", err));
    return x.rows ? b->ops->gather_dot(b, out, a, idx, x, err) : GT_OK;
}

int nn_balance_fwd(nn_backend *b, float *loss, nn_tensor probs, const float *frac,
                   gt_error *err)
{
    GT_TRY(need_backend(b, "balance_fwd", err));
    GT_TRY(need_f32(probs, "balance_fwd", "probs", err));
    GT_TRY(need_ptr(loss, 1, "balance_fwd", "loss", err));
    GT_TRY(need_ptr(frac, probs.cols > 0, "balance_fwd", "frac", err));
    if (probs.rows < 1)
        return gt_error_set(err, GT_EINVAL, "balance_fwd: no rows");
    return b->ops->balance_fwd(b, loss, probs, frac, err);
}

int nn_balance_bwd(nn_backend *b, nn_tensor dprobs, float dloss, const float *frac,
                   gt_error *err)
{
    GT_TRY(need_backend(b, "balance_bwd", err));
    GT_TRY(need_f32(dprobs, "balance_bwd", "dprobs", err));
    GT_TRY(need_ptr(frac, dprobs.cols > 0, "balance_bwd", "frac", err));
    if (dprobs.rows < 1)
        return gt_error_set(err, GT_EINVAL, "balance_bwd: no rows");
    return b->ops->balance_bwd(b, dprobs, dloss, frac, err);
}

int nn_entropy_fwd(nn_backend *b, float *loss, nn_tensor probs, gt_error *err)
{
    GT_TRY(need_backend(b, "entropy_fwd", err));
    GT_TRY(need_f32(probs, "entropy_fwd", "probs", err));
    GT_TRY(need_ptr(loss, 1, "entropy_fwd", "loss", err));
    if (probs.rows < 1)
        return gt_error_set(err, GT_EINVAL, "entropy_fwd: no rows");
    return b->ops->entropy_fwd(b, loss, probs, err);
}

int nn_entropy_bwd(nn_backend *b, nn_tensor dprobs, float dloss, nn_tensor probs,
                   gt_error *err)
{
    GT_TRY(need_backend(b, "entropy_bwd", err));
    GT_TRY(need_f32(dprobs, "entropy_bwd", "dprobs", err));
    GT_TRY(need_f32(probs, "entropy_bwd", "probs", err));
    GT_TRY(same_shape(dprobs, probs, "entropy_bwd", "dprobs", "probs", err));
    if (probs.rows < 1)
        return gt_error_set(err, GT_EINVAL, "entropy_bwd: no rows");
    return b->ops->entropy_bwd(b, dprobs, dloss, probs, err);
}

/* ------------------------------------------------------------------------ */
/* stick-breaking                                                           */
/* ------------------------------------------------------------------------ */

static int sb_check(nn_backend *b, nn_tensor f, nn_tensor z, const char *op, gt_error *err)
{
    GT_TRY(need_backend(b, op, err));
    GT_TRY(need_f32(f, op, "fractions", err));
    GT_TRY(need_f32(z, op, "logits", err));
    if (f.rows != z.rows || f.cols != z.cols + 1 || f.cols < 2)
        return gt_error_set(err, GT_EINVAL,
                            "%s: fractions are %dx%d, logits %dx%d (need rows equal, "
                            "L >= 2 fractions and L-1 logits)",
                            op, f.rows, f.cols, z.rows, z.cols);
    return GT_OK;
}

int nn_sb_fwd(nn_backend *b, nn_tensor f, nn_tensor z, gt_error *err)
{
    GT_TRY(sb_check(b, f, z, "sb_fwd", err));
    return b->ops->sb_fwd(b, f, z, err);
}

int nn_sb_bwd(nn_backend *b, nn_tensor dz, nn_tensor df, nn_tensor z, int accumulate,
              gt_error *err)
{
    GT_TRY(sb_check(b, df, z, "sb_bwd", err));
    GT_TRY(need_f32(dz, "sb_bwd", "dz", err));
    GT_TRY(same_shape(dz, z, "sb_bwd", "dz", "z", err));
    return b->ops->sb_bwd(b, dz, df, z, accumulate, err);
}

int nn_sb_inv(nn_backend *b, nn_tensor z, nn_tensor f, float eps, gt_error *err)
{
    GT_TRY(sb_check(b, f, z, "sb_inv", err));
    if (!(eps > 0.0f && eps < 0.5f))
        return gt_error_set(err, GT_EINVAL, "sb_inv: eps must be in (0, 0.5), got %g", eps);
    return b->ops->sb_inv(b, z, f, eps, err);
}

/* ------------------------------------------------------------------------ */
/* optimizer                                                                */
/* ------------------------------------------------------------------------ */

int nn_adamw(nn_backend *b, float *param, uint16_t *param_bf16, const float *grad, float *m,
             float *v, size_t n, const nn_adamw_hp *hp, const float *sumsq, gt_error *err)
{
    /* hp lives in backend memory, so its values are the caller's to check
     * (nn_adamw_prepare does) */
    GT_TRY(need_backend(b, "adamw", err));
    GT_TRY(need_ptr(hp, 1, "adamw", "hyper-parameters", err));
    GT_TRY(need_ptr(param, n > 0, "adamw", "param", err));
    GT_TRY(need_ptr(grad, n > 0, "adamw", "grad", err));
    GT_TRY(need_ptr(m, n > 0, "adamw", "m", err));
    GT_TRY(need_ptr(v, n > 0, "adamw", "v", err));
    return n ? b->ops->adamw(b, param, param_bf16, grad, m, v, n, hp, sumsq, err) : GT_OK;
}

/* ------------------------------------------------------------------------ */
/* random numbers                                                           */
/* ------------------------------------------------------------------------ */

int nn_rand_fill(nn_backend *b, float *x, size_t n, nn_dist dist, float a, float bb,
                 uint64_t seed, uint64_t stream, uint64_t offset, gt_error *err)
{
    GT_TRY(need_backend(b, "rand_fill", err));
    GT_TRY(need_ptr(x, n > 0, "rand_fill", "x", err));
    if (dist != NN_DIST_NORMAL && dist != NN_DIST_UNIFORM)
        return gt_error_set(err, GT_EINVAL, "rand_fill: unknown distribution %d", (int)dist);
    if (!isfinite(a) || !isfinite(bb))
        return gt_error_set(err, GT_EINVAL, "rand_fill: non-finite parameters");
    return n ? b->ops->rand_fill(b, x, n, dist, a, bb, seed, stream, offset, err) : GT_OK;
}

/* rand_rows where the backend leaves it NULL: one rand_fill per row, the
 * numbers the op promises by definition. */
static int rand_rows_by_fill(nn_backend *b, nn_tensor x, nn_dist dist, float a, float bb,
                             uint64_t seed, uint64_t stream, uint64_t row0, uint64_t per_row,
                             gt_error *err)
{
    for (int r = 0; r < x.rows; r++) {
        float *row = (float *)x.data + (size_t)r * (size_t)x.ld;
        GT_TRY(b->ops->rand_fill(b, row, (size_t)x.cols, dist, a, bb, seed, stream,
                                 (row0 + (uint64_t)r) * per_row, err));
    }
    return GT_OK;
}

int nn_rand_rows(nn_backend *b, nn_tensor x, nn_dist dist, float a, float bb, uint64_t seed,
                 uint64_t stream, uint64_t row0, uint64_t per_row, gt_error *err)
{
    GT_TRY(need_backend(b, "rand_rows", err));
    GT_TRY(need_f32(x, "rand_rows", "x", err));
    if (dist != NN_DIST_NORMAL && dist != NN_DIST_UNIFORM)
        return gt_error_set(err, GT_EINVAL, "rand_rows: unknown distribution %d", (int)dist);
    if (!isfinite(a) || !isfinite(bb))
        return gt_error_set(err, GT_EINVAL, "rand_rows: non-finite parameters");
    if (per_row < nn_rng_blocks((uint64_t)x.cols))
        return gt_error_set(err, GT_EINVAL,
                            "rand_rows: %llu blocks per row cannot hold %d columns (need %llu)",
                            (unsigned long long)per_row, x.cols,
                            (unsigned long long)nn_rng_blocks((uint64_t)x.cols));
    if (!x.rows || !x.cols)
        return GT_OK;
    if (!b->ops->rand_rows)
        return rand_rows_by_fill(b, x, dist, a, bb, seed, stream, row0, per_row, err);
    return b->ops->rand_rows(b, x, dist, a, bb, seed, stream, row0, per_row, err);
}

/* ------------------------------------------------------------------------ */
/* fixed-order linear layer (sampling)                                      */
/* ------------------------------------------------------------------------ */

int nn_pack_weight(nn_backend *b, nn_tensor w, nn_packed *out, gt_error *err)
{
    const char *op = "pack_weight";
    GT_TRY(need_ptr(out, 1, op, "out", err));
    memset(out, 0, sizeof *out);
    GT_TRY(need_backend(b, op, err));
    GT_TRY(nn_tensor_check(w, "pack_weight: W", err));
    if (w.dtype == NN_BF16 && !b->has_bf16 && !b->bf16_emulated)
        return gt_error_set(err, GT_EUNSUPPORTED, "pack_weight: backend %s cannot do bf16",
                            b->name);
    if (!b->ops->pack_bytes || !b->ops->pack_weight || !b->ops->linear_fixed)
        return gt_error_set(err, GT_EUNSUPPORTED,
                            "pack_weight: backend %s has no fixed-order linear layer", b->name);
    size_t bytes = b->ops->pack_bytes(b, w.rows, w.cols, w.dtype);
    nn_packed p;
    memset(&p, 0, sizeof p);
    p.bytes = bytes;
    p.dtype = w.dtype;
    p.n = w.rows;
    p.k = w.cols;
    GT_TRY(nn_alloc(b, bytes, &p.data, err));
    int rc = b->ops->pack_weight(b, &p, w, err);
    if (rc) {
        nn_free(b, p.data);
        return rc;
    }
    *out = p;
    return GT_OK;
}

void nn_packed_free(nn_backend *b, nn_packed *p)
{
    if (!p)
        return;
    if (b && p->data)
        nn_free(b, p->data);
    memset(p, 0, sizeof *p);
}

/* What linear_fixed and linear_fixed_bf16 both ask of their arguments. */
static int linear_fixed_check(nn_backend *b, nn_tensor y, nn_tensor x, const nn_packed *w,
                              nn_act act, int accumulate, gt_error *err)
{
    const char *op = "linear_fixed";
    GT_TRY(need_backend(b, op, err));
    GT_TRY(need_f32(y, op, "y", err));
    GT_TRY(nn_tensor_check(x, "linear_fixed: x", err));
    GT_TRY(need_ptr(w, 1, op, "packed weight", err));
    GT_TRY(need_ptr(w->data, 1, op, "packed weight data", err));
    if (!b->ops->linear_fixed)
        return gt_error_set(err, GT_EUNSUPPORTED, "linear_fixed: backend %s lacks this op",
                            b->name);
    if (x.dtype != w->dtype)
        return gt_error_set(err, GT_EINVAL, "linear_fixed: x is %s but the weight is %s",
                            nn_dtype_name(x.dtype), nn_dtype_name(w->dtype));
    if (x.cols != w->k || y.cols != w->n || y.rows != x.rows)
        return gt_error_set(err, GT_EINVAL,
                            "linear_fixed: y is %dx%d, x %dx%d, weight %dx%d (want y m x n, "
                            "x m x k, weight n x k)",
                            y.rows, y.cols, x.rows, x.cols, w->n, w->k);
    if (act != NN_ACT_NONE && act != NN_ACT_SILU)
        return gt_error_set(err, GT_EINVAL, "linear_fixed: unknown activation %d", (int)act);
    if (accumulate && act != NN_ACT_NONE)
        return gt_error_set(err, GT_EINVAL,
                            "linear_fixed: an activation cannot be accumulated");
    return GT_OK;
}

int nn_linear_fixed(nn_backend *b, nn_tensor y, nn_tensor x, const nn_packed *w,
                    const float *bias, nn_act act, int accumulate, gt_error *err)
{
    GT_TRY(linear_fixed_check(b, y, x, w, act, accumulate, err));
    /* even with no rows: the backend still refuses a weight it did not pack */
    return b->ops->linear_fixed(b, y, x, w, bias, act, accumulate, err);
}

int nn_linear_fixed_bf16(nn_backend *b, nn_tensor y_bf, nn_tensor y, nn_tensor x,
                         const nn_packed *w, const float *bias, nn_act act, gt_error *err)
{
    GT_TRY(need_backend(b, "linear_fixed_bf16", err));
    GT_TRY(nn_tensor_check(y_bf, "linear_fixed_bf16: y_bf", err));
    if (y_bf.dtype != NN_BF16)
        return gt_error_set(err, GT_EINVAL, "linear_fixed_bf16: y_bf must be bf16, got %s",
                            nn_dtype_name(y_bf.dtype));
    GT_TRY(same_shape(y_bf, y, "linear_fixed_bf16", "y_bf", "y", err));
    GT_TRY(linear_fixed_check(b, y, x, w, act, 0, err));
    if (!b->ops->linear_fixed_bf16) {
        /* the definition itself: the same bits */
        GT_TRY(b->ops->linear_fixed(b, y, x, w, bias, act, 0, err));
        return nn_cast_bf16(b, y_bf, y, err);
    }
    return b->ops->linear_fixed_bf16(b, y_bf, y, x, w, bias, act, err);
}
