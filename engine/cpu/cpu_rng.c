/* cpu_rng: Philox fills in the counter layout of nn_rng.h (the same
 * numbers as the CUDA backend's). */
#include "cpu_internal.h"
#include "nn_rng.h"

static int cpu_rand_fill(nn_backend *b, float *x, size_t n, nn_dist dist, float a, float bb,
                         uint64_t seed, uint64_t stream, uint64_t offset, gt_error *err)
{
    CPU_UNUSED(b, err);
    long long nblocks = (long long)nn_rng_blocks(n);
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
    for (long long q = 0; q < nblocks; q++) {
        uint32_t r[4];
        float v[4];
        nn_rng_block(seed, stream, offset + (uint64_t)q, r);
        nn_rng_fill_block(r, (int)dist, a, bb, v);
        for (int lane = 0; lane < 4; lane++) {
            size_t i = (size_t)q * 4 + (size_t)lane;
            if (i < n)
                x[i] = v[lane];
        }
    }
    return GT_OK;
}

void cpu_rng_ops(nn_backend_ops *o)
{
    o->rand_fill = cpu_rand_fill;
}
