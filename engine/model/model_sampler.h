/* model_sampler: showers from a run's best checkpoints.
 *
 * Composes the stage-1 and stage-2 trunks (each loaded from its model_ckpt),
 * integrates each stage's ODE (flow: Euler or Heun from t = 0 to 1; ddpm:
 * deterministic DDIM from t = 1 to 0), inverts the transforms and applies
 * the readout threshold: every voxel of every shower served is 0 or at least
 * model_sampler_readout_mev.  Several requests are served in one call,
 * batched together on the device up to max_batch rows at a time.
 *
 * Reproducibility: a shower is a pure function of (checkpoint bytes, request
 * seed, row index in the request, incident energy, sampler settings, backend
 * kind).  Its noise comes from (seed, row) alone, and every network layer
 * runs through the backend's fixed-order linear layer (nn_trunk_pack), so
 * neither the batch size, the row's place in a device batch, the requests
 * it was batched with, the thread count, the autoregressive active set nor
 * the routed expert grouping changes a bit of it; on the CPU the bytes are
 * also the same on every x86-64 CPU with AVX2 or AVX-512 (see
 * engine/model/README.md, "Reproducible showers").
 *
 * On a device, a batch's work stays there: a piece's noise is one launch,
 * the step constants are device arrays made once, and the trunks do not
 * read back (their finiteness check is off; the sampler checks the
 * conditions it uploads and the samples it reads back on the host, so bad
 * values are GT_EINVAL naming the request and shower).  What crosses per
 * batch is each stage's conditions in and samples out (per layer for an
 * autoregressive stage 2, and a routed trunk's grouping of rows). */
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
    uint32_t draw;        /* 0.  Under an acceptance test (model_sampler_set_accept)
                             the sampler redraws a row it does not keep as draw 1,
                             2, ...: the same row's noise from other streams */
} model_sample_request;

/* max_batch: rows per device pass (>= 1); the showers do not depend on it. */
int model_sampler_open(nn_backend *b, const model_config *cfg, const void *stage1,
                       size_t len1, const void *stage2, size_t len2, int max_batch,
                       model_sampler **out, gt_error *err);
/* The same with the geometry given as binning XML bytes instead of by the
 * config's dataset.geometry (an imported model carries its geometry's
 * file, which the importing machine may not have).  geo_xml NULL: the
 * config's geometry, as model_sampler_open. */
int model_sampler_open_xml(nn_backend *b, const model_config *cfg, const void *geo_xml,
                           size_t geo_len, const void *stage1, size_t len1, const void *stage2,
                           size_t len2, int max_batch, model_sampler **out, gt_error *err);
void model_sampler_close(model_sampler *s);

int model_sampler_voxels(const model_sampler *s);

/* The readout threshold (MeV) the sampler applies last: what the run's
 * training showers showed (the checkpoint's transforms), or for a
 * checkpoint written before it was recorded, the threshold of the
 * geometry's detector. */
float model_sampler_readout_mev(const model_sampler *s);

/* The layers of the sampler's geometry: returns how many there are and
 * writes the voxels of the first max of them (empty layers are 0) into
 * voxels_per_layer (may be NULL with max 0). */
int model_sampler_layers(const model_sampler *s, int *voxels_per_layer, int max);

/* A learned acceptance test (model_accept.h; blob as model_accept_pack
 * writes it, NULL to turn it off): from then on each shower is scored as
 * it is made and kept with the test's probability, else drawn again at the
 * same incident energy, up to the test's max_attempts draws (the last is
 * kept).  Whether a draw is kept depends on (seed, row, draw) and the
 * shower's bytes alone, so the showers are still the same bytes whatever
 * the batching, the request split or the thread count.  GT_EFORMAT /
 * GT_ECHECKSUM for a damaged blob, GT_EINVAL for one made for another
 * geometry. */
int model_sampler_set_accept(model_sampler *s, const void *blob, size_t len, gt_error *err);
/* Draws made per shower kept in the last run (1 without a test). */
double model_sampler_draws_per_shower(const model_sampler *s);

/* steps <= 0: the config's sample.steps. */
int model_sampler_run(model_sampler *s, model_sample_request *reqs, int n_reqs, int steps,
                      gt_error *err);

/* On the CUDA backend, each stage's integration of a (rows, steps) shape
 * runs eagerly the first time, is captured as a CUDA graph the second and
 * replayed from then on (expert trunks, oneshot stage 2; the same kernels,
 * so the same bytes).  on = 0 keeps everything eager (and drops the graphs
 * made).  No effect on other backends. */
void model_sampler_set_graphs(model_sampler *s, int on);
/* Integrations of the last run that were graph launches. */
int64_t model_sampler_graph_replays(const model_sampler *s);

/* Trunk forward passes per shower of the last run (for cost reports). */
double model_sampler_evals_per_shower(const model_sampler *s);
/* Matrix-product FLOPs per shower of the last run: the evaluations of each
 * stage times that stage's trunk FLOPs per row (the sampling cost the
 * fidelity work is held to). */
double model_sampler_flops_per_shower(const model_sampler *s);
/* Host seconds the last run spent decoding the generated showers (the
 * inverse transforms, after the device's work): what a GPU cannot speed up. */
double model_sampler_decode_seconds(const model_sampler *s);
/* Seconds the last run spent from each stage's noise to its result on the
 * host: on a GPU the device's work and the copies back, on a CPU the
 * networks.  The rest of a run is host work: checks, conditions, decoding. */
double model_sampler_device_seconds(const model_sampler *s);

#endif
