/* cuda_stick: stick-breaking between L-1 logits and L layer fractions
 * (fp32).  One thread per row runs the CPU's own row functions
 * (nn_sb_*_row): the cumulative product is sequential by nature and L is
 * small (45 layers for dataset 2).  The formulas and their order are the
 * CPU's, the results are not its bits: device expf/logf differ from libm by
 * an ulp or two and nvcc contracts multiply-adds into FMAs that the CPU
 * (built with -ffp-contract=off) keeps apart, and a 45-layer product
 * compounds both.  test_cuda_backend bounds the normwise relative error
 * against the CPU by 1e-4 (TOL_RED) for sb_fwd, sb_bwd and sb_inv.
 *
 * The backward and the inverse keep L floats per row between two passes.
 * They live in dynamic shared memory, one slice per thread, not in a
 * per-thread local array: a local array sized for the largest L would be
 * reserved for every resident thread of the device (2 KB each, about half
 * a gigabyte on a large GPU) and grown by the driver on first launch,
 * possibly inside a graph capture.  A block gets at most
 * CUDA_SB_SMEM_BYTES, so a long row means fewer threads per block (128 for
 * 45 layers, 16 at the cap CUDA_SB_MAX_L); slices start an odd number of
 * floats apart, so the threads of a warp reading the same l hit 32
 * different banks.  Kernels first, launchers after. */
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

/* This thread's slice of the block's scratch: `stride` floats from
 * threadIdx.x * stride. */
__device__ __forceinline__ float *cuda_sb_slice(int stride)
{
    extern __shared__ float cuda_sb_scratch[];
    return cuda_sb_scratch + threadIdx.x * stride;
}

__global__ void cuda_sb_bwd_kernel(float *dz, int lddz, const float *df, int lddf,
                                   const float *z, int ldz, int rows, int L, int accumulate,
                                   int stride)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows)
        nn_sb_bwd_row(cuda_row(z, ldz, i), cuda_row(df, lddf, i), cuda_row(dz, lddz, i), L,
                      cuda_sb_slice(stride), accumulate);
}

__global__ void cuda_sb_inv_kernel(float *z, int ldz, const float *f, int ldf, int rows, int L,
                                   float eps, int stride)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows)
        nn_sb_inv_row(cuda_row(f, ldf, i), cuda_row(z, ldz, i), L, eps, cuda_sb_slice(stride));
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */
/* ------------------------------------------------------------------------ */

/* Threads per block for the per-row kernels: small blocks, since each
 * thread walks a whole row and the rows are few. */
#define CUDA_SB_THREADS 128
/* The most dynamic shared memory a block may ask for without opting in. */
#define CUDA_SB_SMEM_BYTES (48 * 1024)

/* The launch shape of a kernel with L floats of scratch per thread: the
 * slice stride (L rounded up to odd) and the threads per block (a power of
 * two, CUDA_SB_THREADS or fewer so the block's slices fit in
 * CUDA_SB_SMEM_BYTES: at least 16 for L <= CUDA_SB_MAX_L). */
struct cuda_sb_shape {
    int stride, threads;
    size_t smem;
};

static cuda_sb_shape cuda_sb_shape_of(int L)
{
    cuda_sb_shape sh;
    sh.stride = L | 1;
    sh.threads = CUDA_SB_THREADS;
    while (sh.threads > 1 && (size_t)sh.threads * sh.stride * sizeof(float) > CUDA_SB_SMEM_BYTES)
        sh.threads >>= 1;
    sh.smem = (size_t)sh.threads * sh.stride * sizeof(float);
    return sh;
}

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

/* The launch of a kernel with L floats of scratch per thread (sb_bwd,
 * sb_inv): L within CUDA_SB_MAX_L, nothing for no rows or no layers, one
 * thread per row in blocks of cuda_sb_shape_of(L); args are the kernel's
 * but the slice stride, which comes last. */
template <class... P, class... A>
static int cuda_sb_launch(nn_backend *b, void (*kernel)(P...), const char *name, const char *op,
                          int rows, int L, gt_error *err, A... args)
{
    cuda_state *s = cuda_st(b);
    if (cuda_sb_check(L, op, err))
        return err ? err->code : GT_EUNSUPPORTED;
    if (rows <= 0 || L <= 0)
        return GT_OK;
    cuda_sb_shape sh = cuda_sb_shape_of(L);
    kernel<<<cuda_blocks(rows, sh.threads), sh.threads, sh.smem, s->stream>>>(args..., sh.stride);
    CUDA_LAUNCHED(name, err);
    return GT_OK;
}

static int cuda_sb_bwd(nn_backend *b, nn_tensor dz, nn_tensor df, nn_tensor z, int accumulate,
                       gt_error *err)
{
    return cuda_sb_launch(b, cuda_sb_bwd_kernel, "cuda_sb_bwd_kernel", "sb_bwd", df.rows,
                          df.cols, err, (float *)dz.data, dz.ld, (const float *)df.data, df.ld,
                          (const float *)z.data, z.ld, df.rows, df.cols, accumulate);
}

static int cuda_sb_inv(nn_backend *b, nn_tensor z, nn_tensor f, float eps, gt_error *err)
{
    return cuda_sb_launch(b, cuda_sb_inv_kernel, "cuda_sb_inv_kernel", "sb_inv", f.rows, f.cols,
                          err, (float *)z.data, z.ld, (const float *)f.data, f.ld, f.rows,
                          f.cols, eps);
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_stick_ops(nn_backend_ops *o)
{
    o->sb_fwd = ON_DEV(cuda_sb_fwd);
    o->sb_bwd = ON_DEV(cuda_sb_bwd);
    o->sb_inv = ON_DEV(cuda_sb_inv);
}

#endif
