/* nn_backend_math.c: the validating wrappers of the per-element and per-row
 * families of the table, in its order: elementwise and activations, the
 * condition embedding, LayerNorm, reductions and losses, softmax, routing,
 * stick-breaking, the optimizer and random numbers (nn_backend.h says what
 * each op does; nn_backend.c has the first families). */
#include "nn_backend.h"
#include "nn_backend_check.h"
#include "nn_rng.h"

#include <math.h>

/* ------------------------------------------------------------------------ */
/* elementwise and activations                                              */
/* ------------------------------------------------------------------------ */

/* A unary op whose output may also be bf16: the fp32 result rounded as
 * cast_bf16 rounds it (the trunk's LayerNorm and SiLU outputs under bf16
 * feed a matmul only, so the cast pass is folded into them). */
/* leaky ReLU's slope */
static int slope_check(float slope, const char *op, gt_error *err)
{
    if (!isfinite(slope))
        return gt_error_set(err, GT_EINVAL, "%s: slope is not finite", op);
    return GT_OK;
}

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
    GT_TRY(grad_check(b, dx, dy, x, "silu_bwd", err));
    return b->ops->silu_bwd(b, dx, dy, x, err);
}

int nn_leaky_fwd(nn_backend *b, nn_tensor y, nn_tensor x, float slope, gt_error *err)
{
    GT_TRY(unary_check(b, y, x, "leaky_fwd", err));
    GT_TRY(slope_check(slope, "leaky_fwd", err));
    return b->ops->leaky_fwd(b, y, x, slope, err);
}

int nn_leaky_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, float slope,
                 gt_error *err)
{
    GT_TRY(grad_check(b, dx, dy, x, "leaky_bwd", err));
    GT_TRY(slope_check(slope, "leaky_bwd", err));
    return b->ops->leaky_bwd(b, dx, dy, x, slope, err);
}

int nn_add(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err)
{
    GT_TRY(binary_check(b, y, x1, x2, "add", err));
    return b->ops->add(b, y, x1, x2, err);
}

int nn_mul(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err)
{
    GT_TRY(binary_check(b, y, x1, x2, "mul", err));
    GT_TRY(need_op(b, b->ops->mul != NULL, "mul", err));
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
    GT_TRY(need_op(b, b->ops->axpby_rows != NULL, "axpby_rows", err));
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
    GT_TRY(need_op(b, b->ops->affine_cols != NULL, "affine_cols", err));
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
    GT_TRY(grad_check(b, dx, dy, x, "ln_bwd", err));
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

/* A loss or mean over no element has no value. */
static int need_elems(nn_tensor t, const char *op, gt_error *err)
{
    if ((long long)t.rows * t.cols == 0)
        return gt_error_set(err, GT_EINVAL, "%s: empty input", op);
    return GT_OK;
}

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
    GT_TRY(need_elems(pred, "mse_fwd", err));
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
    GT_TRY(need_elems(pred, "mse_bwd", err));
    return b->ops->mse_bwd(b, dpred, dloss, pred, target, accumulate, err);
}

int nn_mean_fwd(nn_backend *b, float *out, nn_tensor x, gt_error *err)
{
    GT_TRY(need_backend(b, "mean_fwd", err));
    GT_TRY(need_f32(x, "mean_fwd", "x", err));
    GT_TRY(need_ptr(out, 1, "mean_fwd", "out", err));
    GT_TRY(need_elems(x, "mean_fwd", err));
    return b->ops->mean_fwd(b, out, x, err);
}

int nn_mean_bwd(nn_backend *b, nn_tensor dx, float dout, int accumulate, gt_error *err)
{
    GT_TRY(need_backend(b, "mean_bwd", err));
    GT_TRY(need_f32(dx, "mean_bwd", "dx", err));
    GT_TRY(need_elems(dx, "mean_bwd", err));
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
    GT_TRY(grad_check(b, dx, dy, y, "softmax_bwd", err));
    return b->ops->softmax_bwd(b, dx, dy, y, err);
}

/* ------------------------------------------------------------------------ */
/* routing                                                                  */
/* ------------------------------------------------------------------------ */

/* gather_rows and scatter_add_rows: rows of x and y of one width, idx
 * one index for each of n rows. */
static int rows_check(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx, int n,
                      const char *op, gt_error *err)
{
    GT_TRY(need_backend(b, op, err));
    GT_TRY(need_f32(y, op, "y", err));
    GT_TRY(need_f32(x, op, "x", err));
    if (y.cols != x.cols)
        return gt_error_set(err, GT_EINVAL, "%s: y has %d cols, x has %d", op, y.cols, x.cols);
    return need_ptr(idx, n > 0, op, "idx", err);
}

/* The balance and entropy losses average over rows. */
static int need_rows(int rows, const char *op, gt_error *err)
{
    if (rows < 1)
        return gt_error_set(err, GT_EINVAL, "%s: no rows", op);
    return GT_OK;
}

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
    GT_TRY(rows_check(b, y, x, idx, y.rows, "gather_rows", err));
    return y.rows ? b->ops->gather_rows(b, y, x, idx, scale, err) : GT_OK;
}

int nn_scatter_add_rows(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                        const float *scale, gt_error *err)
{
    GT_TRY(rows_check(b, y, x, idx, x.rows, "scatter_add_rows", err));
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
    GT_TRY(need_rows(probs.rows, "balance_fwd", err));
    return b->ops->balance_fwd(b, loss, probs, frac, err);
}

int nn_balance_bwd(nn_backend *b, nn_tensor dprobs, float dloss, const float *frac,
                   gt_error *err)
{
    GT_TRY(need_backend(b, "balance_bwd", err));
    GT_TRY(need_f32(dprobs, "balance_bwd", "dprobs", err));
    GT_TRY(need_ptr(frac, dprobs.cols > 0, "balance_bwd", "frac", err));
    GT_TRY(need_rows(dprobs.rows, "balance_bwd", err));
    return b->ops->balance_bwd(b, dprobs, dloss, frac, err);
}

int nn_entropy_fwd(nn_backend *b, float *loss, nn_tensor probs, gt_error *err)
{
    GT_TRY(need_backend(b, "entropy_fwd", err));
    GT_TRY(need_f32(probs, "entropy_fwd", "probs", err));
    GT_TRY(need_ptr(loss, 1, "entropy_fwd", "loss", err));
    GT_TRY(need_rows(probs.rows, "entropy_fwd", err));
    return b->ops->entropy_fwd(b, loss, probs, err);
}

int nn_entropy_bwd(nn_backend *b, nn_tensor dprobs, float dloss, nn_tensor probs,
                   gt_error *err)
{
    GT_TRY(need_backend(b, "entropy_bwd", err));
    GT_TRY(need_f32(dprobs, "entropy_bwd", "dprobs", err));
    GT_TRY(need_f32(probs, "entropy_bwd", "probs", err));
    GT_TRY(same_shape(dprobs, probs, "entropy_bwd", "dprobs", "probs", err));
    GT_TRY(need_rows(probs.rows, "entropy_bwd", err));
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

/* A distribution and its two parameters. */
static int dist_check(nn_dist dist, float a, float bb, const char *op, gt_error *err)
{
    if (dist != NN_DIST_NORMAL && dist != NN_DIST_UNIFORM)
        return gt_error_set(err, GT_EINVAL, "%s: unknown distribution %d", op, (int)dist);
    if (!isfinite(a) || !isfinite(bb))
        return gt_error_set(err, GT_EINVAL, "%s: non-finite parameters", op);
    return GT_OK;
}

int nn_rand_fill(nn_backend *b, float *x, size_t n, nn_dist dist, float a, float bb,
                 uint64_t seed, uint64_t stream, uint64_t offset, gt_error *err)
{
    GT_TRY(need_backend(b, "rand_fill", err));
    GT_TRY(need_ptr(x, n > 0, "rand_fill", "x", err));
    GT_TRY(dist_check(dist, a, bb, "rand_fill", err));
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
    GT_TRY(dist_check(dist, a, bb, "rand_rows", err));
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
