/* cuda_copy: column-block concat and split, and the padding of
 * variable-length rows cleared (zero_outside).  Plain copies are 2-D
 * cudaMemcpy2DAsync (capturable, and the copy engine handles any pitch);
 * an accumulating split adds with the elementwise kernel of cuda_act.cuh. */
#ifndef CUDA_COPY_CUH
#define CUDA_COPY_CUH

#include "cuda_act.cuh"
#include "cuda_common.cuh"

static int cuda_copy2d(cuda_state *s, nn_tensor dst, nn_tensor src, gt_error *err)
{
    if (dst.rows <= 0 || dst.cols <= 0)
        return GT_OK;
    CUDA_TRY(cudaMemcpy2DAsync(dst.data, (size_t)dst.ld * sizeof(float), src.data,
                               (size_t)src.ld * sizeof(float), (size_t)dst.cols * sizeof(float),
                               (size_t)dst.rows, cudaMemcpyDeviceToDevice, s->stream),
             err);
    return GT_OK;
}

/* The parts lie side by side in y's columns (absent ones, data NULL,
 * too): calls copy(blk, part) for each part with data, blk being its
 * columns of y; stops at the first failure. */
template <class Copy>
static int cuda_each_block(nn_tensor y, const nn_tensor *parts, int nparts, Copy copy)
{
    int col = 0;
    for (int p = 0; p < nparts; p++) {
        nn_tensor blk = y;
        blk.data = (float *)y.data + col;
        blk.cols = parts[p].cols;
        if (parts[p].data) {
            int rc = copy(blk, parts[p]);
            if (rc)
                return rc;
        }
        col += parts[p].cols;
    }
    return GT_OK;
}

static int cuda_concat(nn_backend *b, nn_tensor y, const nn_tensor *parts, int nparts,
                       gt_error *err)
{
    cuda_state *s = cuda_st(b);
    return cuda_each_block(y, parts, nparts, [&](nn_tensor blk, nn_tensor part) {
        return cuda_copy2d(s, blk, part, err);
    });
}

static int cuda_split(nn_backend *b, nn_tensor *parts, int nparts, nn_tensor y, int accumulate,
                      gt_error *err)
{
    cuda_state *s = cuda_st(b);
    return cuda_each_block(y, parts, nparts, [&](nn_tensor blk, nn_tensor part) {
        if (accumulate) {
            cuda_add_f f = {(float *)part.data, part.ld, (const float *)blk.data, blk.ld, NULL, 0};
            return cuda_ew2d(s, f, y.rows, blk.cols, cuda_vec4_ok(part) && cuda_vec4_ok(blk), err);
        }
        nn_tensor dst = part;
        dst.rows = y.rows;
        return cuda_copy2d(s, dst, blk, err);
    });
}

/* x[i, j] = 0 outside row i's valid columns [lo, hi) (valid[2k], k = idx[i]
 * or i): one launch for a batch of variable-length rows, where a memset
 * per range from the host was two launches a row. */
struct cuda_zero_outside_f {
    float *x; int ld;
    const int32_t *valid; int n_valid;
    const int32_t *idx;
    template <int V> __device__ void apply(int i, int j) const
    {
        int k = idx ? idx[i] : i;
        if (k < 0 || k >= n_valid)
            return;
        int lo = valid[2 * k], hi = valid[2 * k + 1];
        float *r = cuda_row(x, ld, i) + j;
#pragma unroll
        for (int v = 0; v < V; v++)
            if (j + v < lo || j + v >= hi)
                r[v] = 0.0f;
    }
};

static int cuda_zero_outside(nn_backend *b, nn_tensor x, const int32_t *valid, int n_valid,
                             const int32_t *idx, gt_error *err)
{
    cuda_zero_outside_f f = {(float *)x.data, x.ld, valid, n_valid, idx};
    return cuda_ew2d(cuda_st(b), f, x.rows, x.cols, 0, err);
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_copy_ops(nn_backend_ops *o)
{
    o->concat = ON_DEV(cuda_concat);
    o->split = ON_DEV(cuda_split);
    o->zero_outside = ON_DEV(cuda_zero_outside);
}

#endif
