/* nn_backend_fixed.c: the validating wrappers of the fixed-order linear
 * layer that sampling runs on (packing a weight, the product, the product
 * writing bf16). */
#include "nn_backend.h"
#include "nn_backend_check.h"

#include <string.h>

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
    GT_TRY(need_op(b, b->ops->linear_fixed != NULL, op, err));
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
