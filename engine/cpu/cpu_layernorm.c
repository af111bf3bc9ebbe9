/* cpu_layernorm: LayerNorm forward and backward over rows (statistics
 * two-pass in fp32, nn_ln_row_stats). */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

static int cpu_ln_fwd(nn_backend *b, nn_tensor y, float *mean, float *rstd, nn_tensor x,
                      const float *gamma, const float *beta, float eps, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = x.rows, cols = x.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(x)) {
        const float *xr = ROW(x, i);
        float mu, rs;
        nn_ln_row_stats(xr, cols, eps, &mu, &rs);
        if (y.dtype == NN_BF16) {
            uint16_t *yr = ROWH(y, i);
            for (int j = 0; j < cols; j++)
                yr[j] = nn_bf16_from_f32(nn_ln_elem(xr[j], mu, rs, gamma[j], beta[j]));
        } else {
            float *yr = ROW(y, i);
            for (int j = 0; j < cols; j++)
                yr[j] = nn_ln_elem(xr[j], mu, rs, gamma[j], beta[j]);
        }
        mean[i] = mu;
        rstd[i] = rs;
    }
    return GT_OK;
}

/* The backward's two loops, compiled once per instruction set so that GCC
 * vectorises them at each width: a row's dx (nn_ln_row_bwd: its sums run
 * in a fixed number of lanes, not in the vector's) and one thread's block
 * of gamma / beta columns over the rows (each column added row by row).
 * Neither order depends on the width, so every version gives the same bits
 * and GIANT_CPU_KERNEL changes the speed only. */
#define LN_BWD_LOOPS(sfx, TGT)                                                          \
    TGT static void ln_bwd_rows_##sfx(nn_tensor dx, nn_tensor dy, nn_tensor x,          \
                                      const float *mean, const float *rstd,             \
                                      const float *gamma, int i0, int i1, int acc)      \
    {                                                                                   \
        for (int i = i0; i < i1; i++)                                                   \
            nn_ln_row_bwd(ROW(x, i), ROW(dy, i), gamma, mean[i], rstd[i], x.cols,       \
                          ROW(dx, i), acc);                                             \
    }                                                                                   \
    TGT static void ln_bwd_params_##sfx(float *dgamma, float *dbeta, nn_tensor dy,      \
                                        nn_tensor x, const float *mean,                 \
                                        const float *rstd, int j0, int j1)              \
    {                                                                                   \
        for (int i = 0; i < x.rows; i++) {                                              \
            const float *xr = ROW(x, i), *dyr = ROW(dy, i);                             \
            float mu = mean[i], rs = rstd[i];                                           \
            for (int j = j0; j < j1; j++) {                                             \
                dgamma[j] += dyr[j] * (xr[j] - mu) * rs;                                \
                dbeta[j] += dyr[j];                                                     \
            }                                                                           \
        }                                                                               \
    }

LN_BWD_LOOPS(base, )
LN_BWD_LOOPS(avx2, __attribute__((target("avx2,fma"))))
LN_BWD_LOOPS(avx512, __attribute__((target("avx512f,fma"))))

static int cpu_ln_bwd(nn_backend *b, nn_tensor dx, float *dgamma, float *dbeta, nn_tensor dy,
                      nn_tensor x, const float *mean, const float *rstd, const float *gamma,
                      int accumulate_dx, gt_error *err)
{
    CPU_UNUSED(b, err);
    cpu_isa isa = cpu_st(b)->fixed.isa;
#pragma omp parallel if (NUMEL(x) > CPU_PAR_MIN)
    {
        /* parameter grads: each thread owns a block of columns; then the
         * rows, a static share each (dx aliases neither x nor dy, so no
         * barrier between the two) */
        int nt = omp_get_num_threads(), tid = omp_get_thread_num();
        int j0, j1;
        cpu_thread_cols(x.cols, tid, nt, &j0, &j1);
        if (isa == CPU_ISA_AVX512)
            ln_bwd_params_avx512(dgamma, dbeta, dy, x, mean, rstd, j0, j1);
        else if (isa == CPU_ISA_AVX2)
            ln_bwd_params_avx2(dgamma, dbeta, dy, x, mean, rstd, j0, j1);
        else
            ln_bwd_params_base(dgamma, dbeta, dy, x, mean, rstd, j0, j1);
        int i0 = (int)((long long)x.rows * tid / nt);
        int i1 = (int)((long long)x.rows * (tid + 1) / nt);
        if (isa == CPU_ISA_AVX512)
            ln_bwd_rows_avx512(dx, dy, x, mean, rstd, gamma, i0, i1, accumulate_dx);
        else if (isa == CPU_ISA_AVX2)
            ln_bwd_rows_avx2(dx, dy, x, mean, rstd, gamma, i0, i1, accumulate_dx);
        else
            ln_bwd_rows_base(dx, dy, x, mean, rstd, gamma, i0, i1, accumulate_dx);
    }
    return GT_OK;
}

void cpu_layernorm_ops(nn_backend_ops *o)
{
    o->ln_fwd = cpu_ln_fwd;
    o->ln_bwd = cpu_ln_bwd;
}
