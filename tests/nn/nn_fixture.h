/* nn_fixture.h: what the engine-core tests (nn/, cpu/) share, header only:
 * checked calls of the engine's functions, deterministic numbers and the
 * small trunk they test.
 *
 * OK and MUST expand to checks on a call that returns a gt code; they read
 * the message from the test's own `static gt_error E;`, which each test
 * passes to the calls it checks. */
#ifndef NN_FIXTURE_H
#define NN_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "nn_trunk.h"

/* A call that must return GT_OK; the test goes on when it does not. */
#define OK(call)                                                               \
    do {                                                                       \
        int rc_ = (call);                                                      \
        CHECK_MSG(rc_ == GT_OK, "%s -> %d: %s", #call, rc_, E.message);        \
    } while (0)

/* A call that must succeed: on failure the rest would crash, so the test
 * stops there (the checks' summary printed). */
#define MUST(call)                                                             \
    do {                                                                       \
        int rc_ = (call);                                                      \
        CHECK_MSG(rc_ == GT_OK, "%s -> %d: %s", #call, rc_, E.message);        \
        if (rc_)                                                               \
            exit(check_finish() ? 1 : 1);                                      \
    } while (0)

/* The tests' deterministic numbers: a 64-bit LCG (Knuth's MMIX constants)
 * on a state each test seeds itself. */
static inline uint64_t nnfx_next(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state;
}

/* Uniform in [-1, 1), from the state's top 24 bits. */
static inline float nnfx_frand(uint64_t *state)
{
    return (float)((nnfx_next(state) >> 40) / 16777216.0) * 2.0f - 1.0f;
}

/* p[0..n) uniform in [-scale, scale). */
static inline void nnfx_fill(float *p, size_t n, float scale, uint64_t *state)
{
    for (size_t i = 0; i < n; i++)
        p[i] = scale * nnfx_frand(state);
}

/* The tests' small trunk of kind: in_dim inputs, two conditions embedded
 * in 4 (scale 2), two blocks of hidden units, out_dim outputs, and for a
 * routed trunk 4 experts of which 2 take each row; the rest the defaults. */
static inline void nnfx_trunk_config(nn_trunk_config *c, nn_trunk_kind kind, int in_dim,
                                     int hidden, int out_dim)
{
    nn_trunk_config_default(c);
    c->kind = kind;
    c->in_dim = in_dim;
    c->cond_dim = 2;
    c->emb_dim = 4;
    c->emb_scale = 2.0f;
    c->hidden = hidden;
    c->blocks = 2;
    c->out_dim = out_dim;
    c->n_experts = 4;
    c->top_k = 2;
}

#endif
