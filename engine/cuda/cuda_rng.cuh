/* cuda_rng: random fills from Philox4x32-10 with the CPU's counter layout
 * (nn_rng.h): one thread per 4-element block, element i = lane i % 4 of
 * block offset + i / 4, one 16-byte store when the block is whole and the
 * buffer aligned; rand_rows does the same per row of a view, each row at
 * its own offset, in one launch.  Integer words and uniforms are bit-identical to the CPU;
 * normals go through the device's logf/sinf/cosf (no fast-math), which
 * differ from the host's libm by an ulp or two.  Kernels first, launchers
 * after. */
#ifndef CUDA_RNG_CUH
#define CUDA_RNG_CUH

#include "cuda_common.cuh"

/* ------------------------------------------------------------------------ */
/* kernels                                                                  */
/* ------------------------------------------------------------------------ */

/* Philox block `block` as 4 values of the distribution, stored at p, of
 * which n elements remain (a whole block in one 16-byte store when vec
 * allows it, else the first min(n, 4) one by one). */
__device__ __forceinline__ void cuda_rng_put_block(float *p, long long n, int dist, float a,
                                                   float bb, uint64_t seed, uint64_t stream,
                                                   uint64_t block, int vec)
{
    uint32_t r[4];
    nn_rng_block(seed, stream, block, r);
    float o[4];
#pragma unroll
    for (int lane = 0; lane < 4; lane++)
        o[lane] = nn_rng_fill_elem(r, lane, dist, a, bb);
    if (vec && n >= 4) {
        *reinterpret_cast<float4 *>(p) = make_float4(o[0], o[1], o[2], o[3]);
    } else {
#pragma unroll
        for (int lane = 0; lane < 4; lane++)
            if (lane < n)
                p[lane] = o[lane];
    }
}

__global__ void cuda_rand_fill_kernel(float *x, long long n, int dist, float a, float bb,
                                      uint64_t seed, uint64_t stream, uint64_t offset, int vec)
{
    long long nblocks = (n + 3) / 4;
    for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < nblocks;
         q += (long long)gridDim.x * blockDim.x)
        cuda_rng_put_block(x + 4 * q, n - 4 * q, dist, a, bb, seed, stream,
                           offset + (uint64_t)q, vec);
}

/* Row r of x (row pitch ld) as the fill at offset (row0 + r) * per_row: one
 * thread per (row, 4-element block), so a batch's noise is one launch.
 * The per-element values are rand_fill's (the same nn_rng_fill_elem). */
__global__ void cuda_rand_rows_kernel(float *x, int rows, int cols, long long ld, int dist,
                                      float a, float bb, uint64_t seed, uint64_t stream,
                                      uint64_t row0, uint64_t per_row, int vec)
{
    long long nb = ((long long)cols + 3) / 4, total = (long long)rows * nb;
    for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < total;
         q += (long long)gridDim.x * blockDim.x) {
        long long r = q / nb, k = q - r * nb;
        cuda_rng_put_block(x + r * ld + 4 * k, (long long)cols - 4 * k, dist, a, bb, seed,
                           stream, (row0 + (uint64_t)r) * per_row + (uint64_t)k, vec);
    }
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */
/* ------------------------------------------------------------------------ */

static int cuda_rand_fill(nn_backend *b, float *x, size_t n, nn_dist dist, float a, float bb,
                          uint64_t seed, uint64_t stream, uint64_t offset, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (n == 0)
        return GT_OK;
    long long nblocks = ((long long)n + 3) / 4;
    cuda_rand_fill_kernel<<<cuda_grid(s, nblocks), CUDA_THREADS, 0, s->stream>>>(
        x, (long long)n, (int)dist, a, bb, seed, stream, offset, cuda_aligned(x, 16));
    CUDA_LAUNCHED("cuda_rand_fill_kernel", err);
    return GT_OK;
}

static int cuda_rand_rows(nn_backend *b, nn_tensor x, nn_dist dist, float a, float bb,
                          uint64_t seed, uint64_t stream, uint64_t row0, uint64_t per_row,
                          gt_error *err)
{
    cuda_state *s = cuda_st(b);
    long long total = (long long)x.rows * (((long long)x.cols + 3) / 4);
    if (total == 0)
        return GT_OK;
    cuda_rand_rows_kernel<<<cuda_grid(s, total), CUDA_THREADS, 0, s->stream>>>(
        (float *)x.data, x.rows, x.cols, (long long)x.ld, (int)dist, a, bb, seed, stream, row0,
        per_row, cuda_vec4_ok(x));
    CUDA_LAUNCHED("cuda_rand_rows_kernel", err);
    return GT_OK;
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_rng_ops(nn_backend_ops *o)
{
    o->rand_fill = ON_DEV(cuda_rand_fill);
    o->rand_rows = ON_DEV(cuda_rand_rows);
}

#endif
