/* synth_internal: what the two simulators of synth_ share inside
 * giant_data (synth.c and synth_cascade.c); nothing outside engine/data
 * includes it. */
#ifndef SYNTH_INTERNAL_H
#define SYNTH_INTERNAL_H

#include "rng.h"
#include "synth.h"

/* The cascade simulator's showers use the streams rng_init(seed ^ this, i),
 * so that its showers and GFlash's of the same seed are independent. */
#define SYNTH_STREAM_CASCADE 0x4341534341444500ULL

/* Regularised lower incomplete gamma P(a, x) with lga = lgamma(a). */
double synth_gamma_p_lg(double a, double x, double lga);

/* One cascade shower of incident energy e_mev into out (n_voxels floats),
 * drawing only from r (synth_cascade.c). */
void synth_cascade_one(const synth_detector *d, const geo_geometry *g, const synth_config *c,
                       double e_mev, rng_state *r, float *out);

#endif
