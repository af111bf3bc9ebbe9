/* cuda_stick: stick-breaking between L-1 logits and L layer fractions
 * (fp32).  One thread per row runs the CPU's own row functions
 * (nn_sb_*_row): the cumulative product is sequential by nature and L is
 * small (45 layers for dataset 2), so the GPU gives exactly the CPU's
 * numbers.  The per-row scratch lives in local memory, hence the cap on L.
 * Kernels first, launchers after. */
#ifndef CUDA_STICK_CUH
#define CUDA_STICK_CUH

#include "cuda_common.cuh"

#define CUDA_SB_MAX_L 512   /* the CPU's stack scratch size */

/* ------------------------------------------------------------------------ */
/* kernels                                                                  */
/* ------------------------------------------------------------------------ */

__global__ void cuda_sb_fwd_kernel(float *f, int ldf, const float *z, int ldz, int rows, int L)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows)
        nn_sb_fwd_row(cuda_row(z, ldz, i), cuda_row(f, ldf, i), L);
}

__global__ void cuda_sb_bwd_kernel(float *dz, int lddz, const float *df, int lddf,
                                   const float *z, int ldz, int rows, int L, int accumulate)
{
    float scratch[CUDA_SB_MAX_L];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows)
        nn_sb_bwd_row(cuda_row(z, ldz, i), cuda_row(df, lddf, i), cuda_row(dz, lddz, i), L,
                      scratch, accumulate);
}

__global__ void cuda_sb_inv_kernel(float *z, int ldz, const float *f, int ldf, int rows, int L,
                                   float eps)
{
    float scratch[CUDA_SB_MAX_L];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows)
        nn_sb_inv_row(cuda_row(f, ldf, i), cuda_row(z, ldz, i), L, eps, scratch);
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */
/* ------------------------------------------------------------------------ */

/* Threads per block for the per-row kernels: small blocks, since each
 * thread walks a whole row and the rows are few. */
#define CUDA_SB_THREADS 128

static int cuda_sb_check(int L, const char *what, gt_error *err)
{
    if (L > CUDA_SB_MAX_L)
        return gt_error_set(err, GT_EUNSUPPORTED, "%s: %d layers (the CUDA backend supports "
                            "up to %d)", what, L, CUDA_SB_MAX_L);
    return GT_OK;
}

static int cuda_sb_fwd(nn_backend *b, nn_tensor f, nn_tensor z, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (f.rows <= 0 || f.cols <= 0)
        return GT_OK;
    cuda_sb_fwd_kernel<<<cuda_blocks(f.rows, CUDA_SB_THREADS), CUDA_SB_THREADS, 0, s->stream>>>(
        (float *)f.data, f.ld, (const float *)z.data, z.ld, f.rows, f.cols);
    CUDA_LAUNCHED("cuda_sb_fwd_kernel", err);
    return GT_OK;
}

static int cuda_sb_bwd(nn_backend *b, nn_tensor dz, nn_tensor df, nn_tensor z, int accumulate,
                       gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (cuda_sb_check(df.cols, "sb_bwd", err))
        return err ? err->code : GT_EUNSUPPORTED;
    if (df.rows <= 0 || df.cols <= 0)
        return GT_OK;
    cuda_sb_bwd_kernel<<<cuda_blocks(df.rows, CUDA_SB_THREADS), CUDA_SB_THREADS, 0, s->stream>>>(
        (float *)dz.data, dz.ld, (const float *)df.data, df.ld, (const float *)z.data, z.ld,
        df.rows, df.cols, accumulate);
    CUDA_LAUNCHED("cuda_sb_bwd_kernel", err);
    return GT_OK;
}

static int cuda_sb_inv(nn_backend *b, nn_tensor z, nn_tensor f, float eps, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (cuda_sb_check(f.cols, "sb_inv", err))
        return err ? err->code : GT_EUNSUPPORTED;
    if (f.rows <= 0 || f.cols <= 0)
        return GT_OK;
    cuda_sb_inv_kernel<<<cuda_blocks(f.rows, CUDA_SB_THREADS), CUDA_SB_THREADS, 0, s->stream>>>(
        (float *)z.data, z.ld, (const float *)f.data, f.ld, f.rows, f.cols, eps);
    CUDA_LAUNCHED("cuda_sb_inv_kernel", err);
    return GT_OK;
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_stick_ops(nn_backend_ops *o)
{
    o->sb_fwd = ON_DEV(cuda_sb_fwd);
    o->sb_bwd = ON_DEV(cuda_sb_bwd);
    o->sb_inv = ON_DEV(cuda_sb_inv);
}

#endif
