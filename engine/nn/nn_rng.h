/* nn_rng: a counter-based random generator (Philox4x32-10) that gives the
 * same numbers on the CPU and the GPU.
 *
 * key = seed (64 bits), counter = (block, stream) (64 + 64 bits).  A stream
 * of numbers is addressed, not iterated: block b of stream s yields four
 * 32-bit words, so a run is reproducible from its seed and checkpointable as
 * (seed, stream, offset), and a GPU thread can compute any block directly.
 *
 * Fill convention (nn_backend rand_fill): element i of a fill at `offset`
 * is lane i % 4 of block offset + i / 4; the next fill starts at
 * offset + nn_rng_blocks(n).  Uniforms take the top 24 bits of a word;
 * normals use Box-Muller on lanes (0,1) -> (cos, sin) and (2,3) likewise. */
#ifndef NN_RNG_H
#define NN_RNG_H

#include <stdint.h>

#include "nn_math.h"

#define NN_PHILOX_M0 0xD2511F53u
#define NN_PHILOX_M1 0xCD9E8D57u
#define NN_PHILOX_W0 0x9E3779B9u
#define NN_PHILOX_W1 0xBB67AE85u

/* Philox4x32 with 10 rounds (Salmon et al., SC'11; Random123's reference). */
NN_HD static inline void nn_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2],
                                          uint32_t out[4])
{
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)NN_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)NN_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += NN_PHILOX_W0;
        k1 += NN_PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The four words of block `block` of `stream` under `seed`. */
NN_HD static inline void nn_rng_block(uint64_t seed, uint64_t stream, uint64_t block,
                                      uint32_t out[4])
{
    uint32_t ctr[4], key[2];
    ctr[0] = (uint32_t)block;
    ctr[1] = (uint32_t)(block >> 32);
    ctr[2] = (uint32_t)stream;
    ctr[3] = (uint32_t)(stream >> 32);
    key[0] = (uint32_t)seed;
    key[1] = (uint32_t)(seed >> 32);
    nn_philox4x32_10(ctr, key, out);
}

/* [0, 1) from the top 24 bits (exact in fp32). */
NN_HD static inline float nn_rng_uniform(uint32_t r)
{
    return (float)(r >> 8) * (1.0f / 16777216.0f);
}

/* (0, 1): never 0, so log() is finite. */
NN_HD static inline float nn_rng_uniform_open(uint32_t r)
{
    return ((float)(r >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

/* Box-Muller's radius and angle of the pair of lanes (pair, pair + 1),
 * pair 0 or 2: the normals are rad cos(ang) and rad sin(ang). */
NN_HD static inline void nn_rng_polar(const uint32_t r[4], int pair, float *rad, float *ang)
{
    float u0 = nn_rng_uniform_open(r[pair]);
    float u1 = nn_rng_uniform(r[pair + 1]);
    *rad = sqrtf(-2.0f * logf(u0));
    *ang = 6.2831853071795864769f * u1;
}

/* Lane `lane` (0..3) of a block turned into a standard normal. */
NN_HD static inline float nn_rng_normal_lane(const uint32_t r[4], int lane)
{
    float rad, ang;
    nn_rng_polar(r, lane & 2, &rad, &ang);
    return (lane & 1) ? rad * sinf(ang) : rad * cosf(ang);
}

/* Element value for a fill: dist 0 = normal(a, b), 1 = uniform[a, b). */
NN_HD static inline float nn_rng_fill_elem(const uint32_t r[4], int lane, int dist, float a,
                                           float b)
{
    if (dist == 0)
        return a + b * nn_rng_normal_lane(r, lane);
    return a + (b - a) * nn_rng_uniform(r[lane]);
}

/* The four elements of a block, nn_rng_fill_elem for lanes 0..3, with one
 * logarithm and square root per Box-Muller pair instead of one per lane:
 * the same operations on the same inputs, so the same bits (the CPU's fill
 * uses it; a GPU thread computes one lane). */
NN_HD static inline void nn_rng_fill_block(const uint32_t r[4], int dist, float a, float b,
                                           float out[4])
{
    if (dist != 0) {
        for (int lane = 0; lane < 4; lane++)
            out[lane] = a + (b - a) * nn_rng_uniform(r[lane]);
        return;
    }
    for (int pair = 0; pair < 4; pair += 2) {
        float rad, ang;
        nn_rng_polar(r, pair, &rad, &ang);
        float z0 = rad * cosf(ang), z1 = rad * sinf(ang);
        out[pair] = a + b * z0;
        out[pair + 1] = a + b * z1;
    }
}

/* Blocks consumed by a fill of n elements. */
NN_HD static inline uint64_t nn_rng_blocks(uint64_t n)
{
    return (n + 3) / 4;
}

/* Host-side generator state: what a checkpoint stores. */
typedef struct nn_rng {
    uint64_t seed;
    uint64_t stream;
    uint64_t offset;   /* next unused block */
} nn_rng;

static inline nn_rng nn_rng_make(uint64_t seed, uint64_t stream)
{
    nn_rng r;
    r.seed = seed;
    r.stream = stream;
    r.offset = 0;
    return r;
}

/* Reserves the blocks of an n-element fill and returns its offset. */
static inline uint64_t nn_rng_take(nn_rng *r, uint64_t n)
{
    uint64_t off = r->offset;
    r->offset += nn_rng_blocks(n);
    return off;
}

/* Four host uniforms in [0, 1) from the next block. */
static inline void nn_rng_uniform4(nn_rng *r, float out[4])
{
    uint32_t w[4];
    nn_rng_block(r->seed, r->stream, r->offset++, w);
    for (int i = 0; i < 4; i++)
        out[i] = nn_rng_uniform(w[i]);
}

#endif
