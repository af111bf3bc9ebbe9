/* model_stage: one stage's trainer (flow, DDPM or WGAN-GP).  The stage
 * itself is model_stage.c, each objective's arithmetic model_obj_flow.c or
 * model_obj_wgan.c behind a table (model_obj.h), the plumbing they share
 * model_stage_base.c (model_stage_internal.h).
 *
 * One stage = one conditional generative model of a D-dimensional vector x
 * given C scalar conditions c (stage 1: x = the standardised energy
 * fraction, c = log E_inc; stage 2: x = layer stick-breaking logits and voxel
 * fractions, c = log E_inc and the energy fraction).  The trainer only sees
 * standardised float arrays; model_repr turns showers into them and back.
 *
 * Objectives (time t in [0, 1], the trunk sees c' = [t, c]):
 *  - flow: x_t = (1 - t) x0 + t x1, x0 ~ N(0, I), x1 = data; the trunk
 *    predicts the velocity x1 - x0 (conditional flow matching, linear path);
 *    sampling integrates dx/dt = v from t = 0 (noise) to 1 (Euler or Heun).
 *  - ddpm: x_t = sqrt(abar(t)) x1 + sqrt(1 - abar(t)) eps with the cosine
 *    schedule abar(t) = cos^2(pi/2 (t + s)/(1 + s)) / cos^2(pi/2 s/(1 + s)),
 *    s = 0.008; the trunk predicts eps; sampling is deterministic DDIM from
 *    t = 1 to 0.
 *  - wgan: a generator trunk x = G(z, c) (no time input) against the
 *    piecewise-linear critic of model_critic.h, WGAN-GP: critic_steps
 *    critic updates (D(fake) - D(real) + lambda * penalty on random
 *    interpolates) per generator update (-D(fake)).  In stage 2 the critic
 *    sees rows through the stick-breaking head of model_head.h (layer
 *    fractions, fp32).  Validation is the energy distance of generated and
 *    held-out [h(x) ; c] rows (fixed noise).
 * The loss is the mean squared error of the prediction (fp32 reduction).
 *
 * Validation (the number that picks the best checkpoint) is the same loss on
 * a fixed held-out set with noise and times drawn once from a fixed seed,
 * computed by an fp32 twin of the trunk holding the same master weights, so
 * the value is comparable across runs of any precision and reproducible in
 * another process.
 *
 * Randomness: one counter-based generator per stage (seed, stream = stage);
 * every step consumes a fixed number of blocks, so resuming from a
 * checkpoint (which stores the generator offset and the optimizer step)
 * continues exactly as an uninterrupted run would. */
#ifndef MODEL_STAGE_H
#define MODEL_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "dist.h"
#include "gt_error.h"
#include "model_config.h"
#include "nn_adamw.h"
#include "nn_backend.h"
#include "nn_trunk.h"

/* Standardised training arrays (host memory, row-major). */
typedef struct model_stage_data {
    int dim;            /* D */
    int n_cond;         /* C (without time) */
    int n_train, n_val;
    const float *x_train, *c_train; /* [n_train, D], [n_train, C] */
    const float *x_val, *c_val;     /* [n_val, D], [n_val, C]     */
    /* Optional (zero / NULL when unused; added for autoregressive stage 2): */
    int n_ctx;                      /* P: extra trunk inputs that are not noised */
    const float *ctx_train, *ctx_val; /* [n_train, P], [n_val, P]  */
    /* Per row the column range [lo, hi) that is data; the other columns are
     * padding: zero in x, and the trainer zeroes their noise so the trunk
     * learns to leave them at 0.  NULL = every column is data. */
    const int32_t *valid_train, *valid_val; /* [n, 2] */
    int rows_per_item;              /* rows per shower (val_size counts showers); 0 = 1 */
    /* Stage 2 of a shower model: the first sb_layers - 1 columns of x are
     * standardised stick-breaking logits with these statistics of the
     * unstandardised logits (what a wgan generator's stick-breaking head
     * needs; other objectives ignore it).  0 / NULL = no such columns. */
    int sb_layers;
    const double *sb_mean, *sb_std; /* [sb_layers - 1] */
} model_stage_data;

typedef struct model_step_report {
    int stage;          /* 1 or 2 */
    long long step;     /* updates done, 1-based */
    long long total;    /* steps of this stage */
    float loss;         /* training loss of this step (fp32) */
    float grad_norm;    /* before clipping */
    float lr;
    double samples_per_s;
    /* routed trunks only (n_experts == 0 otherwise) */
    float balance_loss, entropy_loss;
    int n_experts;
    int load[NN_TRUNK_MAX_EXPERTS];
} model_step_report;

/* Callbacks; a non-zero return from any of them stops training and is
 * returned by model_stage_train (GT_ECANCELLED by convention). */
typedef struct model_stage_hooks {
    void *user;
    int (*on_step)(void *user, const model_step_report *r);              /* every log_every */
    int (*on_validation)(void *user, int stage, long long step, float val_loss);
    /* Called every ckpt_every steps and at the end with a self-contained
     * checkpoint buffer (valid during the call only). */
    int (*on_checkpoint)(void *user, int stage, long long step, float val_loss,
                         const void *buf, size_t len);
    /* Polled once per step; non-zero = cancel (takes effect within a step). */
    int (*should_stop)(void *user);
} model_stage_hooks;

typedef struct model_stage model_stage;

/* Builds the trunk (input D, conditions 1 + C, output D), the optimizer and
 * the device copies of the data.  stage is 1 or 2. */
int model_stage_create(nn_backend *b, const model_config *cfg, int stage,
                       const model_stage_data *data, model_stage **out, gt_error *err);

/* The same as one rank of a data-parallel group (engine/dist; NULL = one
 * rank, exactly model_stage_create).  cfg->batch is the global batch and
 * must be a multiple of the ranks: every rank draws the whole batch from
 * the same generator and computes its contiguous share, the gradients are
 * summed over the ranks in fp32 (bit-identical on all) and the optimizer
 * takes their mean.  Only rank 0 validates and calls the validation and
 * checkpoint hooks; the should_stop hooks of all ranks are or-ed every step,
 * so any rank can stop the group.  comm is borrowed and must outlive s. */
int model_stage_create_dist(nn_backend *b, const model_config *cfg, int stage,
                            const model_stage_data *data, dist_comm *comm, model_stage **out,
                            gt_error *err);

/* Data parallel: rank 0's weights, optimizer state and generator position
 * to every rank (after rank 0 resumed from a checkpoint; the other ranks
 * need none).  No-op for one rank. */
int model_stage_sync(model_stage *s, gt_error *err);
void model_stage_destroy(model_stage *s);

/* Restores weights, optimizer and generator state from a checkpoint buffer
 * made by this stage (training continues at the stored step). */
int model_stage_resume(model_stage *s, const void *buf, size_t len, gt_error *err);

/* Trains until the configured number of steps (or a hook stops it). */
int model_stage_train(model_stage *s, const model_stage_hooks *hooks, gt_error *err);

/* The fp32 validation loss of the current weights. */
int model_stage_validate(model_stage *s, float *val_loss, gt_error *err);

long long model_stage_step(const model_stage *s);
nn_trunk *model_stage_trunk(model_stage *s);

/* On a backend with graphs (CUDA; nn_graph.h) a flow / ddpm step's device
 * part runs as one graph from the third step on (model_stage_internal.h);
 * off runs every step eagerly (the same bytes: tests compare the two).
 * Replays so far. */
void model_stage_set_graphs(model_stage *s, int on);
long long model_stage_graph_replays(const model_stage *s);

/* The trunk shape of a stage (shared by the trainer and the sampler). */
void model_stage_trunk_config(const model_config *cfg, int stage, int dim, int n_cond,
                              nn_trunk_config *out);

/* The same with n_ctx extra (un-noised) trunk inputs: in_dim = dim + n_ctx. */
void model_stage_trunk_config_ctx(const model_config *cfg, int stage, int dim, int n_cond,
                                  int n_ctx, nn_trunk_config *out);

/* The parts of a stage checkpoint buffer (the weights block of a
 * model_ckpt): a wgan stage stores its generator and its critic (each an
 * nn_ckpt with its optimizer state); any other stage is one nn_ckpt, which
 * is returned as the generator part with *critic = NULL. */
int model_stage_ckpt_parts(const void *buf, size_t len, const void **gen, size_t *gen_len,
                           const void **critic, size_t *critic_len, gt_error *err);

/* A wgan generator is G(z, c) = T(z, c) + [0 ; z_k..]: the trunk's output
 * plus its own input noise on every column from k on, with k the number of
 * stick-breaking logit columns (sb_layers - 1, or 0 for a stage without
 * them, which gets the noise on every column).  Why: a trunk a few hundred
 * wide cannot make thousands of independent voxel fluctuations, so without
 * the skip the samples collapse onto a low-dimensional set; the layer
 * logits, few and strongly correlated, are the trunk's alone.  The sampler
 * applies the same rule (engine/model/README.md). */
int model_stage_gan_noise_from(int sb_layers);

/* Cosine-schedule abar(t) of the ddpm objective, clamped to [1e-4, 1]. */
double model_ddpm_abar(double t);

#endif
