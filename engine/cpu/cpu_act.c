/* cpu_act: elementwise ops: SiLU and leaky ReLU (forward, backward), the
 * residual add, the elementwise product, the bf16 cast, the samplers' per-row axpby and the
 * per-column affine map.  Per-element math from nn_math.h. */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

static int cpu_silu_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    CPU_UNUSED(b, err);
    if (y.dtype == NN_BF16) {
        int rows = x.rows, cols = x.cols;
        CPU_FOR_ROWS(i, rows, NUMEL(x)) {
            const float *xr = ROW(x, i);
            uint16_t *yr = ROWH(y, i);
            for (int j = 0; j < cols; j++)
                yr[j] = nn_bf16_from_f32(nn_silu(xr[j]));
        }
        return GT_OK;
    }
    CPU_EW(y, x, x, nn_silu(a));
    return GT_OK;
}

static int cpu_silu_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, gt_error *err)
{
    CPU_UNUSED(b, err);
    CPU_EW(dx, dy, x, a * nn_silu_grad(c));
    return GT_OK;
}

static int cpu_leaky_fwd(nn_backend *b, nn_tensor y, nn_tensor x, float slope, gt_error *err)
{
    CPU_UNUSED(b, err);
    CPU_EW(y, x, x, nn_leaky(a, slope));
    return GT_OK;
}

static int cpu_leaky_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, float slope,
                         gt_error *err)
{
    CPU_UNUSED(b, err);
    CPU_EW(dx, dy, x, a * nn_leaky_grad(c, slope));
    return GT_OK;
}

static int cpu_add(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err)
{
    CPU_UNUSED(b, err);
    CPU_EW(y, x1, x2, a + c);
    return GT_OK;
}

static int cpu_mul(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err)
{
    CPU_UNUSED(b, err);
    CPU_EW(y, x1, x2, a * c);
    return GT_OK;
}

static int cpu_cast_bf16(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    CPU_UNUSED(b, err);
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
    CPU_UNUSED(b, err);
    CPU_EW(y, x, z, alpha[i_] * a + beta[i_] * c);
    return GT_OK;
}

static int cpu_affine_cols(nn_backend *b, nn_tensor y, nn_tensor x, const float *scale,
                           const float *shift, gt_error *err)
{
    CPU_UNUSED(b, err);
    CPU_EW(y, x, x, scale[j_] * a + (shift ? shift[j_] : 0.0f));
    return GT_OK;
}

void cpu_act_ops(nn_backend_ops *o)
{
    o->silu_fwd = cpu_silu_fwd;
    o->silu_bwd = cpu_silu_bwd;
    o->leaky_fwd = cpu_leaky_fwd;
    o->leaky_bwd = cpu_leaky_bwd;
    o->add = cpu_add;
    o->mul = cpu_mul;
    o->cast_bf16 = cpu_cast_bf16;
    o->axpby_rows = cpu_axpby_rows;
    o->affine_cols = cpu_affine_cols;
}
