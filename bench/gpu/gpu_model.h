/* gpu_model: the baseline expert trunk written directly on the backend
 * vtable (nn_backend_ops), for the GPU benchmark and the GPU tests.
 *
 * Same architecture as engine/nn's expert trunk:
 *   xin = x ++ sinusoidal(cond) -> linear -> h
 *   blocks x { h += W2 SiLU(W1 LN(h) + b1) + b2 } -> LN -> linear -> out
 * but with no host synchronisation anywhere in a step (engine/nn's forward
 * checks its input for NaN with a device-to-host read), so a whole training
 * step and a whole sampling loop can be captured as one CUDA graph.  It
 * calls b->ops directly (no giant_nn), so it also builds where engine/nn
 * cannot (a GPU-only machine without the CPU BLAS libraries).
 *
 * bf16 precision: matmul inputs are bf16 (weights' working copy written by
 * AdamW, activations cast before each product) with fp32 accumulation and
 * fp32 outputs; LayerNorm, SiLU, the loss and the optimizer stay fp32. */
#ifndef GPU_MODEL_H
#define GPU_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gt_error.h"
#include "nn_backend.h"

#define GPU_MODEL_MAX_BLOCKS 32

typedef struct gpu_model_config {
    int in_dim;          /* data features (= out_dim for the sampler) */
    int cond_dim;        /* scalar conditions (2 for the sampler: E, t) */
    int emb_dim;         /* features per condition, even */
    int hidden;
    int blocks;          /* <= GPU_MODEL_MAX_BLOCKS */
    int out_dim;
    int batch;           /* rows planned for */
    nn_dtype precision;
    float emb_scale, emb_max_period, ln_eps;
} gpu_model_config;

/* Baseline (dataset 2): in/out 6480, 2 x 32 condition features, hidden 512,
 * 6 blocks, batch 4096, fp32. */
void gpu_model_config_default(gpu_model_config *c);

typedef struct gpu_model gpu_model;

/* Allocates parameters, optimizer state and every activation for
 * cfg->batch rows: nothing is allocated afterwards. */
int gpu_model_create(nn_backend *b, const gpu_model_config *cfg, gpu_model **out,
                     gt_error *err);
void gpu_model_destroy(gpu_model *m);              /* NULL ok */

/* Weights normal(0, 1/sqrt(fan_in)) from Philox stream 7 of seed, biases 0,
 * LayerNorm gamma 1 and beta 0, moments 0, bf16 copy refreshed. */
int gpu_model_init(gpu_model *m, uint64_t seed, gt_error *err);

/* Device buffers the caller fills: x [batch, in_dim], cond [batch,
 * cond_dim], target [batch, out_dim]; out [batch, out_dim] after forward;
 * loss: one float. */
float *gpu_model_x(gpu_model *m);
float *gpu_model_cond(gpu_model *m);
float *gpu_model_target(gpu_model *m);
float *gpu_model_out(gpu_model *m);
float *gpu_model_loss(gpu_model *m);
/* The single parameter / gradient / moment buffers (n floats each). */
float *gpu_model_params(gpu_model *m, size_t *n);
float *gpu_model_grads(gpu_model *m);
float *gpu_model_moment(gpu_model *m, int which);  /* 0: m, 1: v */

/* Rewrites the bf16 working copy from the fp32 master weights (after the
 * caller restored them); a no-op in fp32. */
int gpu_model_sync_bf16(gpu_model *m, gt_error *err);

/* out = trunk(x, cond) over `rows` <= batch rows; training = 1 keeps what
 * backward needs. */
int gpu_model_forward(gpu_model *m, int rows, int training, gt_error *err);

/* One training step, no host synchronisation: zero grads, forward, mse
 * loss against target, backward, AdamW (hp as given). */
int gpu_model_train_step(gpu_model *m, int rows, const nn_adamw_hp *hp, gt_error *err);

/* Sampler (flow-matching Euler, `steps` steps): prepares dt-scaled copies of
 * the output head and the per-step time conditions (host work, outside any
 * capture).  Needs cond_dim == 2 and out_dim == in_dim. */
int gpu_model_sample_prepare(gpu_model *m, int steps, gt_error *err);
/* Draws noise (seed), sets the energy condition, runs `steps` forwards, each
 * updating x += dt * v(x, E, t) inside the output product's epilogue.  The
 * result is left in the sampler state (read with gpu_model_sample_state). */
int gpu_model_sample(gpu_model *m, int rows, uint64_t seed, gt_error *err);
/* The sampler state: rows x in_dim floats with leading dimension *ld. */
float *gpu_model_sample_state(gpu_model *m, int *ld);

/* Multiply-adds x 2 (FLOPs) of the matrix products of one forward and of
 * one training step (forward + both backward products, no input gradient). */
double gpu_model_forward_flops(const gpu_model *m, int rows);
double gpu_model_train_flops(const gpu_model *m, int rows);

#endif
