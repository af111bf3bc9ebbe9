/* cpu_act: elementwise ops: SiLU and leaky ReLU (forward, backward), the
 * residual add, the bf16 cast, the samplers' per-row axpby and the
 * per-column affine map.  Per-element math from nn_math.h. */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

static int cpu_silu_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(x)) {
        const float *xr = ROW(x, i);
        float *yr = ROW(y, i);
        for (int j = 0; j < cols; j++)
            yr[j] = nn_silu(xr[j]);
    }
    return GT_OK;
}

static int cpu_silu_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(x)) {
        const float *xr = ROW(x, i), *dyr = ROW(dy, i);
        float *dxr = ROW(dx, i);
        for (int j = 0; j < cols; j++)
            dxr[j] = dyr[j] * nn_silu_grad(xr[j]);
    }
    return GT_OK;
}

static int cpu_leaky_fwd(nn_backend *b, nn_tensor y, nn_tensor x, float slope, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(x)) {
        const float *xr = ROW(x, i);
        float *yr = ROW(y, i);
        for (int j = 0; j < cols; j++)
            yr[j] = nn_leaky(xr[j], slope);
    }
    return GT_OK;
}

static int cpu_leaky_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, float slope,
                         gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(x)) {
        const float *xr = ROW(x, i), *dyr = ROW(dy, i);
        float *dxr = ROW(dx, i);
        for (int j = 0; j < cols; j++)
            dxr[j] = dyr[j] * nn_leaky_grad(xr[j], slope);
    }
    return GT_OK;
}

static int cpu_add(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = y.rows, cols = y.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(y)) {
        const float *a = ROW(x1, i), *c = ROW(x2, i);
        float *r = ROW(y, i);
        for (int j = 0; j < cols; j++)
            r[j] = a[j] + c[j];
    }
    return GT_OK;
}

static int cpu_cast_bf16(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(x)) {
        const float *xr = ROW(x, i);
        uint16_t *yr = ROWH(y, i);
        for (int j = 0; j < cols; j++)
            yr[j] = nn_bf16_from_f32(xr[j]);
    }
    return GT_OK;
}

static int cpu_axpby_rows(nn_backend *b, nn_tensor y, const float *alpha, nn_tensor x,
                          const float *beta, nn_tensor z, gt_error *err)
{
    (void)b;
    (void)err;
    const int rows = y.rows, cols = y.cols;
    CPU_FOR_ROWS(i, rows, (size_t)rows * cols) {
        float *yr = (float *)y.data + (size_t)i * y.ld;
        const float *xr = (const float *)x.data + (size_t)i * x.ld;
        const float *zr = (const float *)z.data + (size_t)i * z.ld;
        const float a = alpha[i], c = beta[i];
        for (int j = 0; j < cols; j++)
            yr[j] = a * xr[j] + c * zr[j];
    }
    return GT_OK;
}

static int cpu_affine_cols(nn_backend *b, nn_tensor y, nn_tensor x, const float *scale,
                           const float *shift, gt_error *err)
{
    (void)b;
    (void)err;
    const int rows = y.rows, cols = y.cols;
    CPU_FOR_ROWS(i, rows, (size_t)rows * cols) {
        float *yr = (float *)y.data + (size_t)i * y.ld;
        const float *xr = (const float *)x.data + (size_t)i * x.ld;
        for (int j = 0; j < cols; j++)
            yr[j] = scale[j] * xr[j] + (shift ? shift[j] : 0.0f);
    }
    return GT_OK;
}

void cpu_act_ops(nn_backend_ops *o)
{
    o->silu_fwd = cpu_silu_fwd;
    o->silu_bwd = cpu_silu_bwd;
    o->leaky_fwd = cpu_leaky_fwd;
    o->leaky_bwd = cpu_leaky_bwd;
    o->add = cpu_add;
    o->cast_bf16 = cpu_cast_bf16;
    o->axpby_rows = cpu_axpby_rows;
    o->affine_cols = cpu_affine_cols;
}
