/* rng: small counter-based random numbers for the data modules.
 *
 * Every random stream is a pure function of (seed, stream index): a shower,
 * a shuffle or a split gets rng_init(seed, index) and nothing else.  That is
 * what makes the simulator's output independent of the thread count and the
 * loader's order independent of when it is asked.  The generator is
 * splitmix64 (Steele, Lea & Flood 2014): one add and a 64-bit mix per draw,
 * which passes BigCrush and is more than enough for Monte Carlo of showers. */
#ifndef RNG_H
#define RNG_H

#include <math.h>
#include <stdint.h>

typedef struct rng_state {
    uint64_t s;
} rng_state;

static inline uint64_t rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Two mixing rounds so that neighbouring (seed, index) pairs give unrelated
 * streams: stream = mix(mix(seed) + golden * (index + 1)). */
static inline rng_state rng_init(uint64_t seed, uint64_t index)
{
    rng_state r;
    r.s = rng_mix64(rng_mix64(seed ^ 0x5851f42d4c957f2dULL) +
                    0x9e3779b97f4a7c15ULL * (index + 1));
    return r;
}

static inline uint64_t rng_next_u64(rng_state *r)
{
    r->s += 0x9e3779b97f4a7c15ULL;
    return rng_mix64(r->s);
}

/* Uniform in (0, 1): never 0, so log(u) is always finite. */
static inline double rng_next_uniform(rng_state *r)
{
    return ((double)(rng_next_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n) by multiply-shift (bias below 2^-32 for n < 2^32). */
static inline uint64_t rng_next_below(rng_state *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_next_u64(r) * n) >> 64);
}

/* Standard normal by Box-Muller; used a few times per shower, not per spot. */
static inline double rng_next_normal(rng_state *r)
{
    double u1 = rng_next_uniform(r), u2 = rng_next_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
