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

/* Runs row(ctx, i, scratch) for rows [0, rows), over the threads when the
 * work is large; each thread brings its own L floats of scratch. */
static int cpu_sb_rows(int rows, int L, long long work, void (*row)(const void *, int, float *),
                       const void *ctx, const char *op, gt_error *err)
{
    int nomem = 0;
#pragma omp parallel if (work > CPU_PAR_MIN)
    {
        float stack[CPU_SB_STACK];
        float *scratch = L <= CPU_SB_STACK ? stack : malloc((size_t)L * sizeof(float));
        if (!scratch) {
#pragma omp atomic write
            nomem = 1;
        } else {
#pragma omp for schedule(static)
            for (int i = 0; i < rows; i++)
                row(ctx, i, scratch);
            if (scratch != stack)
                free(scratch);
        }
    }
    if (nomem)
        return gt_error_set(err, GT_ENOMEM, "%s: no memory for %d-float scratch", op, L);
    return GT_OK;
}

typedef struct cpu_sb_bwd_args {
    nn_tensor dz, df, z;
    int accumulate;
} cpu_sb_bwd_args;

static void cpu_sb_bwd_row(const void *ctx, int i, float *scratch)
{
    const cpu_sb_bwd_args *a = ctx;
    nn_sb_bwd_row(ROW(a->z, i), ROW(a->df, i), ROW(a->dz, i), a->df.cols, scratch, a->accumulate);
}

static int cpu_sb_bwd(nn_backend *b, nn_tensor dz, nn_tensor df, nn_tensor z, int accumulate,
                      gt_error *err)
{
    (void)b;
    cpu_sb_bwd_args a = {dz, df, z, accumulate};
    return cpu_sb_rows(df.rows, df.cols, NUMEL(df), cpu_sb_bwd_row, &a, "sb_bwd", err);
}

typedef struct cpu_sb_inv_args {
    nn_tensor z, f;
    float eps;
} cpu_sb_inv_args;

static void cpu_sb_inv_row(const void *ctx, int i, float *scratch)
{
    const cpu_sb_inv_args *a = ctx;
    nn_sb_inv_row(ROW(a->f, i), ROW(a->z, i), a->f.cols, a->eps, scratch);
}

static int cpu_sb_inv(nn_backend *b, nn_tensor z, nn_tensor f, float eps, gt_error *err)
{
    (void)b;
    cpu_sb_inv_args a = {z, f, eps};
    return cpu_sb_rows(f.rows, f.cols, NUMEL(f), cpu_sb_inv_row, &a, "sb_inv", err);
}

void cpu_stick_ops(nn_backend_ops *o)
{
    o->sb_fwd = cpu_sb_fwd;
    o->sb_bwd = cpu_sb_bwd;
    o->sb_inv = cpu_sb_inv;
}
