/* cpu_stick: stick-breaking forward, backward and inverse (fp32). */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

/* The per-row scratch of L floats: stack storage up to a size, beyond it a
 * single heap block per call (a rare, huge-L case). */
#define CPU_SB_STACK 512

static int cpu_sb_fwd(nn_backend *b, nn_tensor f, nn_tensor z, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = f.rows, L = f.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(f))
        nn_sb_fwd_row(ROW(z, i), ROW(f, i), L);
    return GT_OK;
}

static int cpu_sb_bwd(nn_backend *b, nn_tensor dz, nn_tensor df, nn_tensor z, int accumulate,
                      gt_error *err)
{
    (void)b;
    int rows = df.rows, L = df.cols, nomem = 0;
#pragma omp parallel if (NUMEL(df) > CPU_PAR_MIN)
    {
        float stack[CPU_SB_STACK];
        float *scratch = L <= CPU_SB_STACK ? stack : malloc((size_t)L * sizeof(float));
        if (!scratch) {
#pragma omp atomic write
            nomem = 1;
        } else {
#pragma omp for schedule(static)
            for (int i = 0; i < rows; i++)
                nn_sb_bwd_row(ROW(z, i), ROW(df, i), ROW(dz, i), L, scratch, accumulate);
            if (scratch != stack)
                free(scratch);
        }
    }
    if (nomem)
        return gt_error_set(err, GT_ENOMEM, "sb_bwd: no memory for %d-float scratch", L);
    return GT_OK;
}

static int cpu_sb_inv(nn_backend *b, nn_tensor z, nn_tensor f, float eps, gt_error *err)
{
    (void)b;
    int rows = f.rows, L = f.cols, nomem = 0;
#pragma omp parallel if (NUMEL(f) > CPU_PAR_MIN)
    {
        float stack[CPU_SB_STACK];
        float *scratch = L <= CPU_SB_STACK ? stack : malloc((size_t)L * sizeof(float));
        if (!scratch) {
#pragma omp atomic write
            nomem = 1;
        } else {
#pragma omp for schedule(static)
            for (int i = 0; i < rows; i++)
                nn_sb_inv_row(ROW(f, i), ROW(z, i), L, eps, scratch);
            if (scratch != stack)
                free(scratch);
        }
    }
    if (nomem)
        return gt_error_set(err, GT_ENOMEM, "sb_inv: no memory for %d-float scratch", L);
    return GT_OK;
}

void cpu_stick_ops(nn_backend_ops *o)
{
    o->sb_fwd = cpu_sb_fwd;
    o->sb_bwd = cpu_sb_bwd;
    o->sb_inv = cpu_sb_inv;
}
