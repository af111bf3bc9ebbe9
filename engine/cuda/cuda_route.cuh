/* cuda_route: the routed trunk's dispatch and its losses.
 *  - top-k forward and backward: one thread per row running the CPU's own
 *    row functions (nn_topk_row, nn_topk_bwd_row in nn_math.h); E <= 64,
 *    which NN_TRUNK_MAX_EXPERTS guarantees;
 *  - gather / scatter-add of rows (16-byte accesses when the views allow;
 *    scatter needs no atomics since idx does not repeat within a call);
 *  - gather_dot: one warp per row, summed in double like the CPU;
 *  - the balance and entropy losses (full sums, cuda_reduce.cuh) and their
 *    elementwise backwards.
 * Kernels first, launchers after. */
#ifndef CUDA_ROUTE_CUH
#define CUDA_ROUTE_CUH

#include "cuda_common.cuh"
#include "cuda_reduce.cuh"

#define CUDA_TOPK_MAX_E 64

/* ------------------------------------------------------------------------ */
/* kernels                                                                  */
/* ------------------------------------------------------------------------ */

__global__ void cuda_topk_fwd_kernel(int32_t *idx, float *w, const float *probs, int ldp,
                                     int rows, int E, int k)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows)
        return;
    nn_topk_row(cuda_row(probs, ldp, i), E, k, idx + (long long)i * k, w + (long long)i * k);
}

__global__ void cuda_topk_bwd_kernel(float *dprobs, int lddp, const float *dw,
                                     const int32_t *idx, const float *w, const float *probs,
                                     int ldp, int rows, int E, int k, int accumulate)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows)
        return;
    nn_topk_bwd_row(cuda_row(probs, ldp, i), idx + (long long)i * k, w + (long long)i * k,
                    dw + (long long)i * k, E, k, accumulate, cuda_row(dprobs, lddp, i));
}

/* What gather_rows and scatter_add_rows are given: y and x, a row index
 * for each row and its optional scale. */
struct cuda_rows_args {
    float *y; int ldy;
    const float *x; int ldx;
    const int32_t *idx;
    const float *scale;
};

/* y[i, :] = scale[i] * x[idx[i], :] */
struct cuda_gather_f : cuda_rows_args {
    template <int V> __device__ void apply(int i, int j) const
    {
        float a[V];
        cuda_ld<V>(a, cuda_row(x, ldx, idx[i]) + j);
        if (scale) {
            float sc = scale[i];
#pragma unroll
            for (int k = 0; k < V; k++)
                a[k] *= sc;
        }
        cuda_st<V>(cuda_row(y, ldy, i) + j, a);
    }
};

/* y[idx[i], :] += scale[i] * x[i, :] */
struct cuda_scatter_f : cuda_rows_args {
    template <int V> __device__ void apply(int i, int j) const
    {
        float a[V], o[V];
        float *d = cuda_row(y, ldy, idx[i]) + j;
        cuda_ld<V>(a, cuda_row(x, ldx, i) + j);
        cuda_ld<V>(o, d);
        float sc = scale ? scale[i] : 1.0f;
#pragma unroll
        for (int k = 0; k < V; k++)
            o[k] += sc * a[k];
        cuda_st<V>(d, o);
    }
};

__global__ void cuda_gather_dot_kernel(float *out, const float *a, int lda, const int32_t *idx,
                                       const float *x, int ldx, int rows, int cols)
{
    int row = blockIdx.x * CUDA_WARPS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    const float *ar = cuda_row(a, lda, idx[row]), *xr = cuda_row(x, ldx, row);
    double acc = 0.0;
    for (int j = lane; j < cols; j += 32)
        acc += (double)ar[j] * xr[j];
    acc = cuda_warp_sum(acc);
    if (lane == 0)
        out[row] = (float)acc;
}

/* frac[e] * probs[i, e] summed over all (i, e) */
struct cuda_balance_f {
    const float *p; int ldp;
    const float *frac;
    int E;
    __device__ float value(long long t) const
    {
        int i = (int)(t / E), e = (int)(t - (long long)i * E);
        return frac[e] * cuda_row(p, ldp, i)[e];
    }
};

struct cuda_entropy_f {
    const float *p; int ldp;
    int E;
    __device__ float value(long long t) const
    {
        int i = (int)(t / E), e = (int)(t - (long long)i * E);
        return nn_entropy_term(cuda_row(p, ldp, i)[e]);
    }
};

/* dprobs[i, e] += dloss E frac[e] / rows, exactly as the CPU groups it */
struct cuda_balance_bwd_f {
    float *d; int ldd;
    const float *frac;
    float dloss, E, rows;
    template <int V> __device__ void apply(int i, int j) const
    {
        float *r = cuda_row(d, ldd, i) + j;
#pragma unroll
        for (int k = 0; k < V; k++)
            r[k] += dloss * E * frac[j + k] / rows;
    }
};

struct cuda_entropy_bwd_f {
    float *d; int ldd;
    const float *p; int ldp;
    float s;
    template <int V> __device__ void apply(int i, int j) const
    {
        float *r = cuda_row(d, ldd, i) + j;
        const float *pr = cuda_row(p, ldp, i) + j;
#pragma unroll
        for (int k = 0; k < V; k++)
            r[k] += s * nn_entropy_grad(pr[k]);
    }
};

/* ------------------------------------------------------------------------ */
/* launchers                                                                */
/* ------------------------------------------------------------------------ */

static int cuda_topk_fwd(nn_backend *b, int32_t *idx, float *w, nn_tensor probs, int k,
                         gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (probs.cols > CUDA_TOPK_MAX_E)
        return gt_error_set(err, GT_EUNSUPPORTED, "topk_fwd: %d experts (the CUDA backend "
                            "supports up to %d)", probs.cols, CUDA_TOPK_MAX_E);
    if (probs.rows <= 0 || k <= 0)
        return GT_OK;
    cuda_topk_fwd_kernel<<<cuda_blocks(probs.rows, CUDA_THREADS), CUDA_THREADS, 0, s->stream>>>(
        idx, w, (const float *)probs.data, probs.ld, probs.rows, probs.cols, k);
    CUDA_LAUNCHED("cuda_topk_fwd_kernel", err);
    return GT_OK;
}

static int cuda_topk_bwd(nn_backend *b, nn_tensor dprobs, const float *dw, const int32_t *idx,
                         const float *w, nn_tensor probs, int k, int accumulate, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (probs.rows <= 0)
        return GT_OK;
    cuda_topk_bwd_kernel<<<cuda_blocks(probs.rows, CUDA_THREADS), CUDA_THREADS, 0, s->stream>>>(
        (float *)dprobs.data, dprobs.ld, dw, idx, w, (const float *)probs.data, probs.ld,
        probs.rows, probs.cols, k, accumulate);
    CUDA_LAUNCHED("cuda_topk_bwd_kernel", err);
    return GT_OK;
}

static int cuda_gather_rows(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                            const float *scale, gt_error *err)
{
    cuda_gather_f f = {{(float *)y.data, y.ld, (const float *)x.data, x.ld, idx, scale}};
    return cuda_ew2d(cuda_st(b), f, y.rows, y.cols, cuda_vec4_ok(y) && cuda_vec4_ok(x), err);
}

static int cuda_scatter_add_rows(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                                 const float *scale, gt_error *err)
{
    cuda_scatter_f f = {{(float *)y.data, y.ld, (const float *)x.data, x.ld, idx, scale}};
    return cuda_ew2d(cuda_st(b), f, x.rows, x.cols, cuda_vec4_ok(y) && cuda_vec4_ok(x), err);
}

static int cuda_gather_dot(nn_backend *b, float *out, nn_tensor a, const int32_t *idx,
                           nn_tensor x, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (x.rows <= 0)
        return GT_OK;
    cuda_gather_dot_kernel<<<cuda_grid_rows(x.rows), CUDA_THREADS, 0, s->stream>>>(
        out, (const float *)a.data, a.ld, idx, (const float *)x.data, x.ld, x.rows, x.cols);
    CUDA_LAUNCHED("cuda_gather_dot_kernel", err);
    return GT_OK;
}

static int cuda_balance_fwd(nn_backend *b, float *loss, nn_tensor probs, const float *frac,
                            gt_error *err)
{
    cuda_balance_f f = {(const float *)probs.data, probs.ld, frac, probs.cols};
    long long n = (long long)probs.rows * probs.cols;
    return cuda_reduce(cuda_st(b), f, n, (double)probs.cols / (double)probs.rows, loss, err);
}

static int cuda_balance_bwd(nn_backend *b, nn_tensor dprobs, float dloss, const float *frac,
                            gt_error *err)
{
    cuda_balance_bwd_f f = {(float *)dprobs.data, dprobs.ld, frac, dloss, (float)dprobs.cols,
                            (float)dprobs.rows};
    return cuda_ew2d(cuda_st(b), f, dprobs.rows, dprobs.cols, 0, err);
}

static int cuda_entropy_fwd(nn_backend *b, float *loss, nn_tensor probs, gt_error *err)
{
    cuda_entropy_f f = {(const float *)probs.data, probs.ld, probs.cols};
    long long n = (long long)probs.rows * probs.cols;
    return cuda_reduce(cuda_st(b), f, n, 1.0 / (double)probs.rows, loss, err);
}

static int cuda_entropy_bwd(nn_backend *b, nn_tensor dprobs, float dloss, nn_tensor probs,
                            gt_error *err)
{
    cuda_entropy_bwd_f f = {(float *)dprobs.data, dprobs.ld, (const float *)probs.data,
                            probs.ld, dloss / (float)probs.rows};
    return cuda_ew2d(cuda_st(b), f, probs.rows, probs.cols, 0, err);
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_route_ops(nn_backend_ops *o)
{
    o->topk_fwd = ON_DEV(cuda_topk_fwd);
    o->topk_bwd = ON_DEV(cuda_topk_bwd);
    o->gather_rows = ON_DEV(cuda_gather_rows);
    o->scatter_add_rows = ON_DEV(cuda_scatter_add_rows);
    o->gather_dot = ON_DEV(cuda_gather_dot);
    o->balance_fwd = ON_DEV(cuda_balance_fwd);
    o->balance_bwd = ON_DEV(cuda_balance_bwd);
    o->entropy_fwd = ON_DEV(cuda_entropy_fwd);
    o->entropy_bwd = ON_DEV(cuda_entropy_bwd);
}

#endif
