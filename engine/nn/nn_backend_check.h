/* nn_backend_check: the checks the validating wrappers share (nn_backend.c,
 * nn_backend_math.c, nn_backend_fixed.c): each returns GT_EINVAL with a
 * message naming the op and the argument.  Internal to engine/nn. */
#ifndef NN_BACKEND_CHECK_H
#define NN_BACKEND_CHECK_H

#include <stdio.h>

#include "nn_backend.h"

static inline int need_backend(nn_backend *b, const char *op, gt_error *err)
{
    if (!b || !b->ops)
        return gt_error_set(err, GT_EINVAL, "%s: NULL backend", op);
    return GT_OK;
}

static inline int need_f32(nn_tensor t, const char *op, const char *what, gt_error *err)
{
    char name[96];
    snprintf(name, sizeof name, "%s: %s", op, what);
    GT_TRY(nn_tensor_check(t, name, err));
    if (t.dtype != NN_F32)
        return gt_error_set(err, GT_EINVAL, "%s: %s must be f32, got %s", op, what,
                            nn_dtype_name(t.dtype));
    return GT_OK;
}

static inline int same_shape(nn_tensor a, nn_tensor b, const char *op, const char *wa,
                      const char *wb, gt_error *err)
{
    if (a.rows != b.rows || a.cols != b.cols)
        return gt_error_set(err, GT_EINVAL, "%s: %s is %dx%d but %s is %dx%d", op, wa, a.rows,
                            a.cols, wb, b.rows, b.cols);
    return GT_OK;
}

static inline int need_ptr(const void *p, int nonempty, const char *op, const char *what,
                    gt_error *err)
{
    if (nonempty && !p)
        return gt_error_set(err, GT_EINVAL, "%s: NULL %s", op, what);
    return GT_OK;
}

/* An optional entry of the table (NULL on some backend): GT_EUNSUPPORTED. */
static inline int need_op(nn_backend *b, int has, const char *op, gt_error *err)
{
    if (!has)
        return gt_error_set(err, GT_EUNSUPPORTED, "%s: backend %s lacks this op", op, b->name);
    return GT_OK;
}

static inline int unary_check(nn_backend *b, nn_tensor y, nn_tensor x, const char *op, gt_error *err)
{
    GT_TRY(need_backend(b, op, err));
    GT_TRY(need_f32(y, op, "y", err));
    GT_TRY(need_f32(x, op, "x", err));
    return same_shape(y, x, op, "y", "x", err);
}

/* y = f(x1, x2), element by element: both inputs as unary_check's x. */
static inline int binary_check(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2,
                               const char *op, gt_error *err)
{
    GT_TRY(unary_check(b, y, x1, op, err));
    return unary_check(b, y, x2, op, err);
}

/* A backward pass dx from dy at x: dx and dy each as unary_check's y. */
static inline int grad_check(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x,
                             const char *op, gt_error *err)
{
    GT_TRY(unary_check(b, dx, x, op, err));
    return unary_check(b, dy, x, op, err);
}

#endif
