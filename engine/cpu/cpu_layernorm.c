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

static int cpu_ln_bwd(nn_backend *b, nn_tensor dx, float *dgamma, float *dbeta, nn_tensor dy,
                      nn_tensor x, const float *mean, const float *rstd, const float *gamma,
                      int accumulate_dx, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = x.rows, cols = x.cols;
#pragma omp parallel if (NUMEL(x) > CPU_PAR_MIN)
    {
#pragma omp for schedule(static)
        for (int i = 0; i < rows; i++)
            nn_ln_row_bwd(ROW(x, i), ROW(dy, i), gamma, mean[i], rstd[i], cols, ROW(dx, i),
                          accumulate_dx);
        /* parameter grads: each thread owns a block of columns */
        int nt = omp_get_num_threads(), tid = omp_get_thread_num();
        int j0 = (int)((long long)cols * tid / nt), j1 = (int)((long long)cols * (tid + 1) / nt);
        for (int i = 0; i < rows; i++) {
            const float *xr = ROW(x, i), *dyr = ROW(dy, i);
            float mu = mean[i], rs = rstd[i];
            for (int j = j0; j < j1; j++) {
                dgamma[j] += dyr[j] * (xr[j] - mu) * rs;
                dbeta[j] += dyr[j];
            }
        }
    }
    return GT_OK;
}

void cpu_layernorm_ops(nn_backend_ops *o)
{
    o->ln_fwd = cpu_ln_fwd;
    o->ln_bwd = cpu_ln_bwd;
}
