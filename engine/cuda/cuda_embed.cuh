/* cuda_embed: sinusoidal embedding of scalar conditions, forward (one
 * thread per output element, nn_embed_elem) and backward (one thread per
 * condition value, the serial sum over its emb_dim features in the CPU's
 * order, times scale).  The order is the CPU's, the values are not its
 * bits: device sinf/cosf/expf/logf differ from libm by an ulp or two, and
 * a phase error grows with the phase; test_cuda_backend bounds the
 * normwise relative error against the CPU by 1e-4 (TOL_RED).  Kernels
 * first, launchers after. */
#ifndef CUDA_EMBED_CUH
#define CUDA_EMBED_CUH

#include "cuda_common.cuh"

/* ------------------------------------------------------------------------ */
/* kernels                                                                  */
/* ------------------------------------------------------------------------ */

__global__ void cuda_embed_fwd_kernel(float *y, int ldy, const float *cond, int ldc, int rows,
                                      int nc, int emb_dim, float scale, float max_period)
{
    long long n = (long long)rows * nc * emb_dim;
    int width = nc * emb_dim;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (long long)gridDim.x * blockDim.x) {
        int i = (int)(t / width);
        int col = (int)(t - (long long)i * width);
        int c = col / emb_dim, j = col - c * emb_dim;
        float v = cuda_row(cond, ldc, i)[c] * scale;
        cuda_row(y, ldy, i)[col] = nn_embed_elem(v, j, emb_dim, max_period);
    }
}

__global__ void cuda_embed_bwd_kernel(float *dcond, int lddc, const float *dy, int lddy,
                                      const float *cond, int ldc, int rows, int nc, int emb_dim,
                                      float scale, float max_period, int accumulate)
{
    long long n = (long long)rows * nc;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (long long)gridDim.x * blockDim.x) {
        int i = (int)(t / nc), c = (int)(t - (long long)i * nc);
        float v = cuda_row(cond, ldc, i)[c] * scale;
        const float *d = cuda_row(dy, lddy, i) + (long long)c * emb_dim;
        float acc = 0.0f;
        for (int j = 0; j < emb_dim; j++)
            acc += d[j] * nn_embed_elem_grad(v, j, emb_dim, max_period);
        acc *= scale;
        float *o = cuda_row(dcond, lddc, i) + c;
        *o = accumulate ? *o + acc : acc;
    }
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */
/* ------------------------------------------------------------------------ */

static int cuda_embed_fwd(nn_backend *b, nn_tensor y, nn_tensor cond, int emb_dim, float scale,
                          float max_period, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    long long n = (long long)cond.rows * cond.cols * emb_dim;
    if (n <= 0)
        return GT_OK;
    cuda_embed_fwd_kernel<<<cuda_grid(s, n), CUDA_THREADS, 0, s->stream>>>(
        (float *)y.data, y.ld, (const float *)cond.data, cond.ld, cond.rows, cond.cols, emb_dim,
        scale, max_period);
    CUDA_LAUNCHED("cuda_embed_fwd_kernel", err);
    return GT_OK;
}

static int cuda_embed_bwd(nn_backend *b, nn_tensor dcond, nn_tensor dy, nn_tensor cond,
                          int emb_dim, float scale, float max_period, int accumulate,
                          gt_error *err)
{
    cuda_state *s = cuda_st(b);
    long long n = (long long)cond.rows * cond.cols;
    if (n <= 0)
        return GT_OK;
    cuda_embed_bwd_kernel<<<cuda_grid(s, n), CUDA_THREADS, 0, s->stream>>>(
        (float *)dcond.data, dcond.ld, (const float *)dy.data, dy.ld, (const float *)cond.data,
        cond.ld, cond.rows, cond.cols, emb_dim, scale, max_period, accumulate);
    CUDA_LAUNCHED("cuda_embed_bwd_kernel", err);
    return GT_OK;
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_embed_ops(nn_backend_ops *o)
{
    o->embed_fwd = ON_DEV(cuda_embed_fwd);
    o->embed_bwd = ON_DEV(cuda_embed_bwd);
}

#endif
