/* cuda_reduce: reductions and the losses built on them.
 *  - full sums (mse, mean, sumsq, and the router losses in cuda_route.cuh):
 *    per-thread fp32 partial sums, block sums in double, one partial per
 *    block in the scratch buffer, then one block adds the partials in a
 *    fixed order (deterministic: no atomics), scales, writes one float;
 *  - column sums (bias gradient, LayerNorm parameter gradients): row splits
 *    reduced into scratch, then one thread per column adds the splits in
 *    order (deterministic again);
 *  - the elementwise backwards of mse and mean.
 * Kernels first, launchers after. */
#ifndef CUDA_REDUCE_CUH
#define CUDA_REDUCE_CUH

#include "cuda_common.cuh"

#define CUDA_RED_MAX_BLOCKS 1024   /* partials of a full sum (doubles) */
#define CUDA_COL_MAX_SPLITS 64     /* row splits of a column sum */

/* ------------------------------------------------------------------------ */
/* kernels                                                                  */
/* ------------------------------------------------------------------------ */

/* F: __device__ float value(long long t) const, for t < n. */
template <class F>
__global__ void cuda_reduce_partial_kernel(F f, long long n, double *partial)
{
    float acc = 0.0f;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (long long)gridDim.x * blockDim.x)
        acc += f.value(t);
    double s = cuda_block_sum_d((double)acc);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

__global__ void cuda_reduce_finish_kernel(const double *partial, int nparts, double scale,
                                          float *out)
{
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x)
        acc += partial[i];
    double s = cuda_block_sum_d(acc);
    if (threadIdx.x == 0)
        *out = (float)(s * scale);
}

/* Sum of (pred - target)^2 over a 2-D view pair. */
struct cuda_sqdiff_f {
    const float *p; int ldp;
    const float *t; int ldt;
    int cols;
    __device__ float value(long long k) const
    {
        int i = (int)(k / cols), j = (int)(k - (long long)i * cols);
        float d = cuda_row(p, ldp, i)[j] - cuda_row(t, ldt, i)[j];
        return d * d;
    }
};

struct cuda_elem_f {
    const float *x; int ldx;
    int cols;
    __device__ float value(long long k) const
    {
        int i = (int)(k / cols), j = (int)(k - (long long)i * cols);
        return cuda_row(x, ldx, i)[j];
    }
};

/* Squares of a flat vector: item t < n4 is the 16-byte group t, items past
 * it the scalar tail. */
struct cuda_sumsq_f {
    const float *x;
    long long n4;
    __device__ float value(long long t) const
    {
        if (t < n4) {
            float4 q = reinterpret_cast<const float4 *>(x)[t];
            return q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w;
        }
        float v = x[4 * n4 + (t - n4)];
        return v * v;
    }
};

/* Column sums.  F: __device__ void value(int i, int j, float (&acc)[NV]) const
 * adds row i's contributions for column j.  Block (32, 8): a warp reads 32
 * consecutive floats of one row. */
template <class F, int NV>
__global__ void cuda_colsum_partial_kernel(F f, int rows, int cols, int rows_per_split,
                                           int splits, float *partial)
{
    __shared__ float sh[NV][8][33];
    int j = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * rows_per_split;
    int r1 = min(rows, r0 + rows_per_split);
    float acc[NV];
#pragma unroll
    for (int v = 0; v < NV; v++)
        acc[v] = 0.0f;
    if (j < cols)
        for (int i = r0 + (int)threadIdx.y; i < r1; i += 8)
            f.value(i, j, acc);
#pragma unroll
    for (int v = 0; v < NV; v++)
        sh[v][threadIdx.y][threadIdx.x] = acc[v];
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
#pragma unroll
        for (int v = 0; v < NV; v++) {
            float s = 0.0f;
            for (int y = 0; y < 8; y++)
                s += sh[v][y][threadIdx.x];
            partial[((long long)v * splits + blockIdx.y) * cols + j] = s;
        }
    }
}

template <int NV>
__global__ void cuda_colsum_finish_kernel(float *out0, float *out1, const float *partial,
                                          int splits, int cols, int accumulate)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols)
        return;
#pragma unroll
    for (int v = 0; v < NV; v++) {
        float s = 0.0f;
        for (int sp = 0; sp < splits; sp++)
            s += partial[((long long)v * splits + sp) * cols + j];
        float *o = v == 0 ? out0 : out1;
        o[j] = accumulate ? o[j] + s : s;
    }
}

struct cuda_colsum_f {
    const float *x; int ldx;
    __device__ void value(int i, int j, float (&acc)[1]) const
    {
        acc[0] += cuda_row(x, ldx, i)[j];
    }
};

struct cuda_mse_bwd_f {
    float *d; int ldd;
    const float *p; int ldp;
    const float *t; int ldt;
    float sc;
    int accumulate;
    template <int V> __device__ void apply(int i, int j) const
    {
        float a[V], b[V], o[V];
        cuda_ld<V>(a, cuda_row(p, ldp, i) + j);
        cuda_ld<V>(b, cuda_row(t, ldt, i) + j);
        if (accumulate)
            cuda_ld<V>(o, cuda_row((const float *)d, ldd, i) + j);
#pragma unroll
        for (int k = 0; k < V; k++) {
            float g = sc * (a[k] - b[k]);
            o[k] = accumulate ? o[k] + g : g;
        }
        cuda_st<V>(cuda_row(d, ldd, i) + j, o);
    }
};

struct cuda_fill_f {
    float *d; int ldd;
    float g;
    int accumulate;
    template <int V> __device__ void apply(int i, int j) const
    {
        float o[V];
        if (accumulate)
            cuda_ld<V>(o, cuda_row((const float *)d, ldd, i) + j);
#pragma unroll
        for (int k = 0; k < V; k++)
            o[k] = accumulate ? o[k] + g : g;
        cuda_st<V>(cuda_row(d, ldd, i) + j, o);
    }
};

/* ------------------------------------------------------------------------ */
/* launchers                                                                */
/* ------------------------------------------------------------------------ */

/* *out = scale * sum_{t<n} f.value(t), n may be 0 (writes 0 * scale). */
template <class F>
static int cuda_reduce(cuda_state *s, const F &f, long long n, double scale, float *out,
                       gt_error *err)
{
    double *partial = (double *)s->scratch;
    long long want = (n + CUDA_THREADS * 4 - 1) / (CUDA_THREADS * 4);
    int blocks = (int)(want < 1 ? 1 : want > CUDA_RED_MAX_BLOCKS ? CUDA_RED_MAX_BLOCKS : want);
    cuda_reduce_partial_kernel<F><<<blocks, CUDA_THREADS, 0, s->stream>>>(f, n, partial);
    CUDA_LAUNCHED("cuda_reduce_partial_kernel", err);
    cuda_reduce_finish_kernel<<<1, CUDA_THREADS, 0, s->stream>>>(partial, blocks, scale, out);
    CUDA_LAUNCHED("cuda_reduce_finish_kernel", err);
    return GT_OK;
}

/* out_v[j] (+)= sum_i f(i, j)_v for v < NV (out1 unused when NV == 1). */
template <class F, int NV>
static int cuda_colsum(cuda_state *s, const F &f, int rows, int cols, float *out0, float *out1,
                       int accumulate, gt_error *err)
{
    if (cols <= 0)
        return GT_OK;
    if ((size_t)NV * cols > s->scratch_floats)
        return gt_error_set(err, GT_EUNSUPPORTED,
                            "column sum over %d columns exceeds the %zu-float scratch", cols,
                            s->scratch_floats);
    int splits = (rows + 127) / 128;
    if (splits < 1)
        splits = 1;
    if (splits > CUDA_COL_MAX_SPLITS)
        splits = CUDA_COL_MAX_SPLITS;
    while (splits > 1 && (size_t)splits * NV * cols > s->scratch_floats)
        splits--;
    int rps = rows > 0 ? (rows + splits - 1) / splits : 0;
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)splits);
    dim3 block(32, 8);
    cuda_colsum_partial_kernel<F, NV>
        <<<grid, block, 0, s->stream>>>(f, rows, cols, rps, splits, s->scratch);
    CUDA_LAUNCHED("cuda_colsum_partial_kernel", err);
    cuda_colsum_finish_kernel<NV><<<cuda_blocks(cols, CUDA_THREADS), CUDA_THREADS, 0, s->stream>>>(
        out0, out1, s->scratch, splits, cols, accumulate);
    CUDA_LAUNCHED("cuda_colsum_finish_kernel", err);
    return GT_OK;
}

static int cuda_bias_grad(nn_backend *b, float *db, nn_tensor dy, int accumulate, gt_error *err)
{
    cuda_colsum_f f = {(const float *)dy.data, dy.ld};
    return cuda_colsum<cuda_colsum_f, 1>(cuda_st(b), f, dy.rows, dy.cols, db, NULL, accumulate,
                                         err);
}

static int cuda_mse_fwd(nn_backend *b, float *loss, nn_tensor pred, nn_tensor target,
                        gt_error *err)
{
    cuda_sqdiff_f f = {(const float *)pred.data, pred.ld, (const float *)target.data,
                       target.ld, pred.cols};
    long long n = (long long)pred.rows * pred.cols;
    return cuda_reduce(cuda_st(b), f, n, 1.0 / (double)n, loss, err);
}

static int cuda_mse_bwd(nn_backend *b, nn_tensor dpred, float dloss, nn_tensor pred,
                        nn_tensor target, int accumulate, gt_error *err)
{
    float sc = 2.0f * dloss / (float)((double)pred.rows * pred.cols);
    cuda_mse_bwd_f f = {(float *)dpred.data, dpred.ld, (const float *)pred.data, pred.ld,
                        (const float *)target.data, target.ld, sc, accumulate};
    return cuda_ew2d(cuda_st(b), f, pred.rows, pred.cols,
                     cuda_vec4_ok(dpred) && cuda_vec4_ok(pred) && cuda_vec4_ok(target), err);
}

static int cuda_mean_fwd(nn_backend *b, float *out, nn_tensor x, gt_error *err)
{
    cuda_elem_f f = {(const float *)x.data, x.ld, x.cols};
    long long n = (long long)x.rows * x.cols;
    return cuda_reduce(cuda_st(b), f, n, 1.0 / (double)n, out, err);
}

static int cuda_mean_bwd(nn_backend *b, nn_tensor dx, float dout, int accumulate, gt_error *err)
{
    float g = dout / (float)((double)dx.rows * dx.cols);
    cuda_fill_f f = {(float *)dx.data, dx.ld, g, accumulate};
    return cuda_ew2d(cuda_st(b), f, dx.rows, dx.cols, cuda_vec4_ok(dx), err);
}

static int cuda_sumsq(nn_backend *b, float *out, const float *x, size_t n, gt_error *err)
{
    long long n4 = cuda_aligned(x, 16) ? (long long)(n / 4) : 0;
    cuda_sumsq_f f = {x, n4};
    long long items = n4 + ((long long)n - 4 * n4);
    return cuda_reduce(cuda_st(b), f, items, 1.0, out, err);
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_reduce_ops(nn_backend_ops *o)
{
    o->bias_grad = ON_DEV(cuda_bias_grad);
    o->mse_fwd = ON_DEV(cuda_mse_fwd);
    o->mse_bwd = ON_DEV(cuda_mse_bwd);
    o->mean_fwd = ON_DEV(cuda_mean_fwd);
    o->mean_bwd = ON_DEV(cuda_mean_bwd);
    o->sumsq = ON_DEV(cuda_sumsq);
}

#endif
