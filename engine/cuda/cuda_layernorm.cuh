/* cuda_layernorm: LayerNorm over rows, one warp per row.  Forward: two-pass
 * fp32 statistics (the mean, then the centred sum of squares, as
 * nn_ln_row_stats does serially), then nn_ln_elem per element.  Backward:
 * dx per row as nn_ln_row_bwd (two sums, then the formula), and the gamma /
 * beta gradients as deterministic column sums (cuda_reduce.cuh).
 * Rows are read with 16-byte loads when the view allows.  Kernels first,
 * launchers after. */
#ifndef CUDA_LAYERNORM_CUH
#define CUDA_LAYERNORM_CUH

#include "cuda_common.cuh"
#include "cuda_reduce.cuh"

/* ------------------------------------------------------------------------ */
/* kernels                                                                  */
/* ------------------------------------------------------------------------ */

/* OutT: float, or uint16_t for a bf16 output (the cast folded in) */
template <int V, class OutT>
__global__ void cuda_ln_fwd_kernel(OutT *y, int ldy, float *mean, float *rstd, const float *x,
                                   int ldx, const float *gamma, const float *beta, float eps,
                                   int rows, int cols)
{
    int row = blockIdx.x * CUDA_WARPS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows)
        return;                       /* whole warps leave together */
    const float *xr = cuda_row(x, ldx, row);
    float s = 0.0f;
    for (int j = lane * V; j < cols; j += 32 * V) {
        float a[V];
        cuda_ld<V>(a, xr + j);
#pragma unroll
        for (int k = 0; k < V; k++)
            s += a[k];
    }
    float mu = cuda_warp_sum(s) / (float)cols;
    float v = 0.0f;
    for (int j = lane * V; j < cols; j += 32 * V) {
        float a[V];
        cuda_ld<V>(a, xr + j);
#pragma unroll
        for (int k = 0; k < V; k++) {
            float d = a[k] - mu;
            v += d * d;
        }
    }
    v = cuda_warp_sum(v) / (float)cols;
    float rs = 1.0f / sqrtf(v + eps);
    if (lane == 0) {
        if (mean)
            mean[row] = mu;
        if (rstd)
            rstd[row] = rs;
    }
    OutT *yr = y + (long long)row * ldy;
    for (int j = lane * V; j < cols; j += 32 * V) {
        float a[V], g[V], bt[V];
        cuda_ld<V>(a, xr + j);
        cuda_ld<V>(g, gamma + j);
        cuda_ld<V>(bt, beta + j);
#pragma unroll
        for (int k = 0; k < V; k++)
            a[k] = nn_ln_elem(a[k], mu, rs, g[k], bt[k]);
        cuda_st<V>(yr + j, a);
    }
}

template <int V>
__global__ void cuda_ln_bwd_dx_kernel(float *dx, int lddx, const float *dy, int lddy,
                                      const float *x, int ldx, const float *mean,
                                      const float *rstd, const float *gamma, int rows, int cols,
                                      int accumulate)
{
    int row = blockIdx.x * CUDA_WARPS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    const float *xr = cuda_row(x, ldx, row), *dyr = cuda_row(dy, lddy, row);
    float mu = mean[row], rs = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    for (int j = lane * V; j < cols; j += 32 * V) {
        float a[V], d[V], g[V];
        cuda_ld<V>(a, xr + j);
        cuda_ld<V>(d, dyr + j);
        cuda_ld<V>(g, gamma + j);
#pragma unroll
        for (int k = 0; k < V; k++) {
            float gg = d[k] * g[k];
            sg += gg;
            sgx += gg * ((a[k] - mu) * rs);
        }
    }
    sg = cuda_warp_sum(sg) / (float)cols;
    sgx = cuda_warp_sum(sgx) / (float)cols;
    float *dxr = cuda_row(dx, lddx, row);
    for (int j = lane * V; j < cols; j += 32 * V) {
        float a[V], d[V], g[V], o[V];
        cuda_ld<V>(a, xr + j);
        cuda_ld<V>(d, dyr + j);
        cuda_ld<V>(g, gamma + j);
        if (accumulate)
            cuda_ld<V>(o, dxr + j);
#pragma unroll
        for (int k = 0; k < V; k++) {
            float gg = d[k] * g[k];
            float xh = (a[k] - mu) * rs;
            float r = rs * (gg - sg - xh * sgx);
            o[k] = accumulate ? o[k] + r : r;
        }
        cuda_st<V>(dxr + j, o);
    }
}

/* dgamma += sum_i dy xhat, dbeta += sum_i dy */
struct cuda_ln_param_f {
    const float *dy; int lddy;
    const float *x; int ldx;
    const float *mean, *rstd;
    __device__ void value(int i, int j, float (&acc)[2]) const
    {
        float d = cuda_row(dy, lddy, i)[j];
        float xh = (cuda_row(x, ldx, i)[j] - mean[i]) * rstd[i];
        acc[0] += d * xh;
        acc[1] += d;
    }
};

/* ------------------------------------------------------------------------ */
/* launchers                                                                */
/* ------------------------------------------------------------------------ */

static int cuda_ln_fwd(nn_backend *b, nn_tensor y, float *mean, float *rstd, nn_tensor x,
                       const float *gamma, const float *beta, float eps, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (x.rows <= 0 || x.cols <= 0)
        return GT_OK;
    int vec = x.cols % 4 == 0 && cuda_vec4_ok(x) && cuda_vec4_out_ok(y) &&
              cuda_aligned(gamma, 16) && cuda_aligned(beta, 16);
    unsigned g = cuda_grid_rows(x.rows);
    const float *xp = (const float *)x.data;
    if (y.dtype == NN_BF16 && vec)
        cuda_ln_fwd_kernel<4><<<g, CUDA_THREADS, 0, s->stream>>>(
            (uint16_t *)y.data, y.ld, mean, rstd, xp, x.ld, gamma, beta, eps, x.rows, x.cols);
    else if (y.dtype == NN_BF16)
        cuda_ln_fwd_kernel<1><<<g, CUDA_THREADS, 0, s->stream>>>(
            (uint16_t *)y.data, y.ld, mean, rstd, xp, x.ld, gamma, beta, eps, x.rows, x.cols);
    else if (vec)
        cuda_ln_fwd_kernel<4><<<g, CUDA_THREADS, 0, s->stream>>>(
            (float *)y.data, y.ld, mean, rstd, xp, x.ld, gamma, beta, eps, x.rows, x.cols);
    else
        cuda_ln_fwd_kernel<1><<<g, CUDA_THREADS, 0, s->stream>>>(
            (float *)y.data, y.ld, mean, rstd, xp, x.ld, gamma, beta, eps, x.rows, x.cols);
    CUDA_LAUNCHED("cuda_ln_fwd_kernel", err);
    return GT_OK;
}

static int cuda_ln_bwd(nn_backend *b, nn_tensor dx, float *dgamma, float *dbeta, nn_tensor dy,
                       nn_tensor x, const float *mean, const float *rstd, const float *gamma,
                       int accumulate_dx, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (x.rows <= 0 || x.cols <= 0)
        return GT_OK;
    if (dx.data) {
        int vec = x.cols % 4 == 0 && cuda_vec4_ok(x) && cuda_vec4_ok(dx) && cuda_vec4_ok(dy) &&
                  cuda_aligned(gamma, 16);
        unsigned g = cuda_grid_rows(x.rows);
        if (vec)
            cuda_ln_bwd_dx_kernel<4><<<g, CUDA_THREADS, 0, s->stream>>>(
                (float *)dx.data, dx.ld, (const float *)dy.data, dy.ld, (const float *)x.data,
                x.ld, mean, rstd, gamma, x.rows, x.cols, accumulate_dx);
        else
            cuda_ln_bwd_dx_kernel<1><<<g, CUDA_THREADS, 0, s->stream>>>(
                (float *)dx.data, dx.ld, (const float *)dy.data, dy.ld, (const float *)x.data,
                x.ld, mean, rstd, gamma, x.rows, x.cols, accumulate_dx);
        CUDA_LAUNCHED("cuda_ln_bwd_dx_kernel", err);
    }
    if (dgamma && dbeta) {
        cuda_ln_param_f f = {(const float *)dy.data, dy.ld, (const float *)x.data, x.ld, mean,
                             rstd};
        return cuda_colsum<cuda_ln_param_f, 2>(s, f, x.rows, x.cols, dgamma, dbeta, 1, err);
    }
    return GT_OK;
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_layernorm_ops(nn_backend_ops *o)
{
    o->ln_fwd = ON_DEV(cuda_ln_fwd);
    o->ln_bwd = ON_DEV(cuda_ln_bwd);
}

#endif
