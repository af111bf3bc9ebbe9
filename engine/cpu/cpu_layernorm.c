/* cpu_layernorm: LayerNorm forward and backward over rows (statistics
 * two-pass in fp32, nn_ln_row_stats's order, eight rows at a time). */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

/* Rows whose statistics are computed together.  Each row's sums are one
 * serial chain of fp32 adds, in nn_ln_row_stats's order (its bits), and a
 * chain waits on every add; LN_GROUP rows' chains interleaved keep the
 * adders busy. */
#define LN_GROUP 8

/* nn_ln_row_stats of rows r0 .. r0 + nr - 1 (nr <= LN_GROUP), the same
 * operations in the same order per row */
static void ln_group_stats(nn_tensor x, int r0, int nr, float eps, float *mean, float *rstd)
{
    const float *p[LN_GROUP];
    float s[LN_GROUP], v[LN_GROUP], mu[LN_GROUP];
    int n = x.cols;
    for (int k = 0; k < nr; k++) {
        p[k] = ROW(x, r0 + k);
        s[k] = 0.0f;
        v[k] = 0.0f;
    }
    for (int j = 0; j < n; j++)
        for (int k = 0; k < nr; k++)
            s[k] += p[k][j];
    for (int k = 0; k < nr; k++)
        mu[k] = s[k] / (float)n;
    for (int j = 0; j < n; j++)
        for (int k = 0; k < nr; k++) {
            float d = p[k][j] - mu[k];
            v[k] += d * d;
        }
    for (int k = 0; k < nr; k++) {
        float var = v[k] / (float)n;
        mean[k] = mu[k];
        rstd[k] = 1.0f / sqrtf(var + eps);
    }
}

static int cpu_ln_fwd(nn_backend *b, nn_tensor y, float *mean, float *rstd, nn_tensor x,
                      const float *gamma, const float *beta, float eps, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = x.rows, cols = x.cols, groups = (rows + LN_GROUP - 1) / LN_GROUP;
    CPU_FOR_ROWS(g, groups, NUMEL(x)) {
        int r0 = g * LN_GROUP, nr = rows - r0 < LN_GROUP ? rows - r0 : LN_GROUP;
        ln_group_stats(x, r0, nr, eps, mean + r0, rstd + r0);
        for (int i = r0; i < r0 + nr; i++) {
            const float *xr = ROW(x, i);
            float mu = mean[i], rs = rstd[i];
            if (y.dtype == NN_BF16) {
                uint16_t *yr = ROWH(y, i);
                for (int j = 0; j < cols; j++)
                    yr[j] = nn_bf16_from_f32(nn_ln_elem(xr[j], mu, rs, gamma[j], beta[j]));
            } else {
                float *yr = ROW(y, i);
                for (int j = 0; j < cols; j++)
                    yr[j] = nn_ln_elem(xr[j], mu, rs, gamma[j], beta[j]);
            }
        }
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
    (void)err;
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
