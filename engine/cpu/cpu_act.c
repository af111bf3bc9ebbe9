/* cpu_act: elementwise ops: SiLU and leaky ReLU (forward, backward), the
 * residual add, the elementwise product, the bf16 cast, the samplers' per-row axpby and the
 * per-column affine map.  Per-element math from nn_math.h. */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

/* SiLU's rows, compiled once per instruction set so that GCC vectorises
 * them: nn_silu and nn_silu_grad are one fixed sequence of IEEE operations
 * with explicit fused multiply-adds (no libm; contraction is off in this
 * library), so every version computes the same bits and the kernel choice
 * (GIANT_CPU_KERNEL, cpu_fixed_init) changes the speed only.  y may alias x
 * and dx may alias dy (each element is read before it is written). */
#define ACT_SILU_ROWS(sfx, TGT)                                                     \
    TGT static void silu_row_##sfx(float *y, const float *x, int n)                 \
    {                                                                               \
        for (int j = 0; j < n; j++)                                                 \
            y[j] = nn_silu(x[j]);                                                   \
    }                                                                               \
    TGT static void silu_row_bf16_##sfx(uint16_t *y, const float *x, int n)         \
    {                                                                               \
        for (int j = 0; j < n; j++)                                                 \
            y[j] = nn_bf16_from_f32(nn_silu(x[j]));                                 \
    }                                                                               \
    TGT static void silu_grad_row_##sfx(float *dx, const float *dy, const float *x, \
                                        int n)                                      \
    {                                                                               \
        for (int j = 0; j < n; j++)                                                 \
            dx[j] = dy[j] * nn_silu_grad(x[j]);                                     \
    }

ACT_SILU_ROWS(scalar, )
ACT_SILU_ROWS(avx2, __attribute__((target("avx2,fma"))))
ACT_SILU_ROWS(avx512, __attribute__((target("avx512f,fma"))))

typedef struct act_silu_kernels {
    void (*fwd)(float *y, const float *x, int n);
    void (*fwd_bf16)(uint16_t *y, const float *x, int n);
    void (*grad)(float *dx, const float *dy, const float *x, int n);
} act_silu_kernels;

static act_silu_kernels act_silu_for(nn_backend *b)
{
    switch (cpu_st(b)->fixed.isa) {
    case CPU_ISA_AVX512:
        return (act_silu_kernels){silu_row_avx512, silu_row_bf16_avx512, silu_grad_row_avx512};
    case CPU_ISA_AVX2:
        return (act_silu_kernels){silu_row_avx2, silu_row_bf16_avx2, silu_grad_row_avx2};
    default:
        return (act_silu_kernels){silu_row_scalar, silu_row_bf16_scalar, silu_grad_row_scalar};
    }
}

static int cpu_silu_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    (void)err;
    act_silu_kernels k = act_silu_for(b);
    int rows = x.rows, cols = x.cols;
    if (y.dtype == NN_BF16) {
        CPU_FOR_ROWS(i, rows, NUMEL(x))
            k.fwd_bf16(ROWH(y, i), ROW(x, i), cols);
    } else {
        CPU_FOR_ROWS(i, rows, NUMEL(x))
            k.fwd(ROW(y, i), ROW(x, i), cols);
    }
    return GT_OK;
}

static int cpu_silu_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, gt_error *err)
{
    (void)err;
    act_silu_kernels k = act_silu_for(b);
    int rows = x.rows, cols = x.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(x))
        k.grad(ROW(dx, i), ROW(dy, i), ROW(x, i), cols);
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
