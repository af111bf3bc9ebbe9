/* classify_fixture.h: what the classifier tests (test_model_classify,
 * test_model_accept) share (header only): samples whose separability is
 * known in closed form, the CPU backend they train on and the small
 * classifier they train. */
#ifndef CLASSIFY_FIXTURE_H
#define CLASSIFY_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "model_backend.h"
#include "model_classify.h"
#include "rng.h"

/* n rows of d columns drawn from N(0, 1) (Box-Muller on the seed's
 * stream), column 0 shifted by shift.  malloc'ed. */
static inline float *cf_gaussian(int64_t n, int d, double shift, uint64_t seed)
{
    float *x = malloc((size_t)n * d * sizeof(float));
    rng_state r = rng_init(seed, 0);
    for (int64_t i = 0; i < n * d; i++) {
        double u1 = ((double)(rng_next_u64(&r) >> 11) + 0.5) / 9007199254740992.0;
        double u2 = ((double)(rng_next_u64(&r) >> 11) + 0.5) / 9007199254740992.0;
        x[i] = (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
    for (int64_t i = 0; i < n; i++)
        x[(size_t)i * d] += (float)shift;
    return x;
}

/* The CPU backend; the test is skipped (77) when it does not open. */
static inline nn_backend *cf_backend(void)
{
    gt_error err;
    nn_backend *b = NULL;
    if (model_backend_open("cpu", &b, &err) != GT_OK)
        check_skip(err.message);
    return b;
}

/* The tests' classifier: 32 hidden units, two layers, batches of 200 at
 * lr 2e-3, trained for epochs; the rest the defaults. */
static inline model_classify_config cf_config(int epochs)
{
    model_classify_config c;
    model_classify_config_default(&c);
    c.hidden = 32;
    c.depth = 2;
    c.epochs = epochs;
    c.batch = 200;
    c.lr = 2e-3f;
    return c;
}

#endif
