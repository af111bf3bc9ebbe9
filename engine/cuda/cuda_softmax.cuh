/* cuda_softmax: row softmax (fp32) forward and backward.  Short rows (the
 * router's experts, <= 32) run one thread per row through nn_softmax_row,
 * the CPU's own code, so the gate has the CPU's formula and summation
 * order; longer rows run one warp per row with the same formula and a
 * parallel sum.  Neither is the CPU's bits: device expf differs from libm
 * by an ulp or two, and nvcc contracts the backward's dy * y sum into FMAs
 * that the CPU (built with -ffp-contract=off) rounds twice.
 * test_cuda_backend bounds the normwise relative error against the CPU by
 * 1e-5 (TOL_EW) forward and backward, and runs top-k on identical
 * probabilities for that reason.  Kernels first, launchers after. */
#ifndef CUDA_SOFTMAX_CUH
#define CUDA_SOFTMAX_CUH

#include "cuda_common.cuh"

#define CUDA_SOFTMAX_THREAD_MAX 32

/* ------------------------------------------------------------------------ */
/* kernels                                                                  */
/* ------------------------------------------------------------------------ */

__global__ void cuda_softmax_fwd_row_kernel(float *y, int ldy, const float *x, int ldx,
                                            int rows, int cols)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows)
        nn_softmax_row(cuda_row(x, ldx, i), cuda_row(y, ldy, i), cols);
}

__global__ void cuda_softmax_fwd_warp_kernel(float *y, int ldy, const float *x, int ldx,
                                             int rows, int cols)
{
    int row = blockIdx.x * CUDA_WARPS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    const float *xr = cuda_row(x, ldx, row);
    float *yr = cuda_row(y, ldy, row);
    float mx = -INFINITY;
    for (int j = lane; j < cols; j += 32)
        mx = fmaxf(mx, xr[j]);
    mx = cuda_warp_max(mx);
    float s = 0.0f;
    for (int j = lane; j < cols; j += 32)
        s += expf(xr[j] - mx);
    float inv = 1.0f / cuda_warp_sum(s);
    for (int j = lane; j < cols; j += 32)
        yr[j] = expf(xr[j] - mx) * inv;
}

/* dx = y (dy - sum(dy y)); dx may alias dy (each element is read before it
 * is written by the same thread). */
__global__ void cuda_softmax_bwd_row_kernel(float *dx, int lddx, const float *dy, int lddy,
                                            const float *y, int ldy, int rows, int cols)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows)
        return;
    const float *yr = cuda_row(y, ldy, i), *dyr = cuda_row(dy, lddy, i);
    float *dxr = cuda_row(dx, lddx, i);
    float s = 0.0f;
    for (int j = 0; j < cols; j++)
        s += dyr[j] * yr[j];
    for (int j = 0; j < cols; j++)
        dxr[j] = yr[j] * (dyr[j] - s);
}

__global__ void cuda_softmax_bwd_warp_kernel(float *dx, int lddx, const float *dy, int lddy,
                                             const float *y, int ldy, int rows, int cols)
{
    int row = blockIdx.x * CUDA_WARPS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    const float *yr = cuda_row(y, ldy, row), *dyr = cuda_row(dy, lddy, row);
    float *dxr = cuda_row(dx, lddx, row);
    float s = 0.0f;
    for (int j = lane; j < cols; j += 32)
        s += dyr[j] * yr[j];
    s = cuda_warp_sum(s);
    for (int j = lane; j < cols; j += 32)
        dxr[j] = yr[j] * (dyr[j] - s);
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */
/* ------------------------------------------------------------------------ */

/* Softmax's launch: rows of at most CUDA_SOFTMAX_THREAD_MAX columns one
 * thread each (the CPU's row function), longer ones one warp each; the two
 * kernels take the same arguments. */
template <class... P, class... A>
static int cuda_softmax_launch(nn_backend *b, void (*row_kernel)(P...), void (*warp_kernel)(P...),
                               const char *name, int rows, int cols, gt_error *err, A... args)
{
    cuda_state *s = cuda_st(b);
    if (rows <= 0 || cols <= 0)
        return GT_OK;
    if (cols <= CUDA_SOFTMAX_THREAD_MAX)
        row_kernel<<<cuda_blocks(rows, CUDA_THREADS), CUDA_THREADS, 0, s->stream>>>(args...);
    else
        warp_kernel<<<cuda_grid_rows(rows), CUDA_THREADS, 0, s->stream>>>(args...);
    CUDA_LAUNCHED(name, err);
    return GT_OK;
}

static int cuda_softmax_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    return cuda_softmax_launch(b, cuda_softmax_fwd_row_kernel, cuda_softmax_fwd_warp_kernel,
                               "cuda_softmax_fwd_kernel", x.rows, x.cols, err, (float *)y.data,
                               y.ld, (const float *)x.data, x.ld, x.rows, x.cols);
}

static int cuda_softmax_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor y,
                            gt_error *err)
{
    return cuda_softmax_launch(b, cuda_softmax_bwd_row_kernel, cuda_softmax_bwd_warp_kernel,
                               "cuda_softmax_bwd_kernel", y.rows, y.cols, err, (float *)dx.data,
                               dx.ld, (const float *)dy.data, dy.ld, (const float *)y.data, y.ld,
                               y.rows, y.cols);
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_softmax_ops(nn_backend_ops *o)
{
    o->softmax_fwd = ON_DEV(cuda_softmax_fwd);
    o->softmax_bwd = ON_DEV(cuda_softmax_bwd);
}

#endif
