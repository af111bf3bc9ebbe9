/* model_sampler: showers from a run's best checkpoints.
 *
 * Composes the stage-1 and stage-2 trunks (each loaded from its model_ckpt),
 * integrates each stage's ODE (flow: Euler or Heun from t = 0 to 1; ddpm:
 * deterministic DDIM from t = 1 to 0), inverts the transforms and applies
 * the readout threshold.  Several requests are served in one call, batched
 * together on the device up to max_batch rows at a time.
 *
 * Reproducibility: the starting noise of shower i of a request depends only
 * on (request seed, i), never on how requests were batched together, so the
 * same seed gives the same showers on the same device and thread count. */
#ifndef MODEL_SAMPLER_H
#define MODEL_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "gt_error.h"
#include "model_config.h"
#include "nn_backend.h"

typedef struct model_sampler model_sampler;

typedef struct model_sample_request {
    const float *e_inc;   /* [n] incident energies, MeV, > 0 */
    int64_t n;
    uint64_t seed;
    int64_t row0;         /* index of e_inc[0] in the caller's whole sample: row
                             i draws its noise as row row0 + i of (seed), so a
                             large sample made in chunks equals one made at once */
    float *showers;       /* [n, voxels] out, MeV */
    float *e_dep;         /* [n] out (may be NULL): generated deposited energy */
} model_sample_request;

/* max_batch: rows per device pass (rounded down to a multiple of 4). */
int model_sampler_open(nn_backend *b, const model_config *cfg, const void *stage1,
                       size_t len1, const void *stage2, size_t len2, int max_batch,
                       model_sampler **out, gt_error *err);
void model_sampler_close(model_sampler *s);

int model_sampler_voxels(const model_sampler *s);

/* steps <= 0: the config's sample.steps. */
int model_sampler_run(model_sampler *s, model_sample_request *reqs, int n_reqs, int steps,
                      gt_error *err);

/* Trunk forward passes per shower of the last run (for cost reports). */
double model_sampler_evals_per_shower(const model_sampler *s);

#endif
