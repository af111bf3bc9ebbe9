/* nn_backend.c: tensor views, closing, and the validating wrappers every
 * caller goes through (the backends themselves trust their input) of the
 * first families of the table: memory and copies, column blocks and
 * padding, the matrix product.  The other families' wrappers are in
 * nn_backend_math.c and nn_backend_fixed.c, the graphs' in nn_graph.c; the
 * checks they share in nn_backend_check.h.  It knows no backend: they are
 * siblings (engine/cpu, engine/cuda), opened by name a level up
 * (model_backend_open). */
#include "nn_backend.h"
#include "nn_backend_check.h"

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
