/* model_stage_internal: the stage trainer's layers below its API.
 * Not part of the API: only the trainer's files include it.
 *
 *   model_stage.c        on top: creation and the device copies of the
 *                        data, the fixed validation draws, the training
 *                        loop and its hooks, validation, checkpoints and
 *                        resume (the public model_stage_* functions);
 *                        every objective reached through its table
 *   model_obj_flow.c     the flow / DDPM objective and
 *   model_obj_wgan.c     the WGAN-GP objective (model_obj.h, the table)
 *   model_stage_base.c   at the bottom: what the objectives share (the
 *                        declarations at the end of this header)
 *
 * The split follows the objectives because they share the loop, the data
 * and the checkpoint plumbing but nothing of their arithmetic; one struct
 * keeps every buffer so that creation and destruction stay in one place. */
#ifndef MODEL_STAGE_INTERNAL_H
#define MODEL_STAGE_INTERNAL_H

#include "dist.h"
#include "model_critic.h"
#include "model_head.h"
#include "model_obj.h"
#include "model_stage.h"
#include "nn_graph.h"
#include "nn_rng.h"

struct model_stage {
    nn_backend *b;
    model_config cfg;
    int stage;
    model_objective objective;
    const model_obj_ops *ops;   /* the objective's table */
    int dim, n_cond, n_train, n_val, batch, n_valset;
    /* Data parallel (model_stage_create_dist): every rank draws the whole
     * batch of gbatch rows from the same generator (so the stream is the
     * one-rank run's) and computes rows [lo, lo + batch) of it; batch ==
     * gbatch and lo == 0 for one rank. */
    dist_comm *comm;     /* NULL = one rank */
    int gbatch, lo;
    float *noise_part;   /* ranks > 1: the block-aligned noise of the shard */
    float *flag;         /* ranks > 1: one backend float for all-reduced flags */
    int group_stopped;   /* the ranks agreed to stop (no abort needed) */
    int n_ctx;           /* extra un-noised inputs (autoregressive context) */
    /* variable-length rows (the autoregressive stage's tokens): each row's
     * valid columns [lo, hi), the training rows' in backend memory (a
     * step clears the batch's padding in one op), the held-out rows' on
     * the host (cleared once); NULL = no padding */
    int32_t *valid_train, *valid_val_h;
    long long total;

    nn_trunk *trunk;     /* trained, in the run's precision          */
    nn_trunk *val_trunk; /* fp32 twin for validation                */
    nn_adamw_opt opt;
    int opt_ready;
    nn_rng rng;
    /* train.ema > 0 (flow and ddpm): the moving average of the trunk's
     * fp32 weights, in its parameter layout, and the two coefficients of
     * its update (backend floats) */
    float *ema, *ema_coef;

    /* backend memory */
    float *x_train, *c_train, *x_val, *c_val;
    int32_t *idx;
    float *x1, *x0, *xt, *pred, *dpred, *cdata, *cond; /* flow's target: in x1 */
    float *t, *alpha, *beta, *ones, *mones, *loss;
    float *val_noise, *val_t;
    float *ctx_train, *ctx_val, *ctxb, *xin; /* n_ctx > 0 only */
    /* wgan only (model_obj_wgan.c) */
    model_head *head;            /* stage 2: the stick-breaking head; NULL = none */
    int cdim;                    /* critic input width: dim + 1 with the head, else dim */
    int noise_from;              /* G = T + [0 ; z]: first column that gets the noise */
    int ed_cols;                 /* energy distance: the first ed_cols columns ...   */
    float ed_weight;             /* ... weigh this much (the layer fractions)        */
    float *hfake, *hreal, *hmix, *dh; /* [B, cdim]: the critic's view of rows */
    model_critic *critic;
    nn_adamw_opt copt;
    int copt_ready;
    float *dpos, *dneg, *score;  /* [B]: +1/B, -1/B, critic scores */
    float *score_h, *gen_h, *val_xc_h; /* host: [B], generated [n, D], held-out [n, D + C] */
    int n_ed;                    /* held-out rows of the energy distance */
    double ed_yy;                /* their mean pairwise distance (fixed) */
    float gan_loss;
    /* The device part of a flow / ddpm step as one graph
     * (model_stage_run_device): graphs_on (default 1) and the graph. */
    int graphs_on;
    nn_graph graph;
    /* host scratch */
    int32_t *idx_h;
    float *t_h, *alpha_h, *beta_h, *u_h;
};

/* ---- the plumbing below the objectives (model_stage_base.c) ---- */

/* n uniforms in [0, 1) from the generator, laid out like a device fill. */
void model_stage_uniforms(nn_rng *r, float *out, int n);

/* n floats of backend memory. */
int model_stage_alloc(model_stage *s, float **p, size_t n, gt_error *err);

/* A training batch: batch row indices from the stage generator (batch
 * uniforms), then the rows into x1 and their conditions into cdata.  Both
 * objectives draw their batches through this, in the same order, so the
 * generator's stream means the same in either. */
int model_stage_real_batch(model_stage *s, gt_error *err);

/* Standard normal noise for the batch into x0 (batch * dim draws). */
int model_stage_batch_noise(model_stage *s, gt_error *err);

/* Data parallel: p's gradients summed over the ranks (the optimizer's
 * grad_scale of 1 / ranks makes it the mean).  No-op for one rank. */
int model_stage_allreduce_grads(model_stage *s, nn_params *p, gt_error *err);

/* Zeroes the padding columns of `rows` rows of x [rows, dim]: row i uses
 * valid[2 * (idx ? idx[i] : i)], host arrays, a memset per range (once, at
 * creation; a step uses nn_zero_outside). */
int model_stage_zero_padding(model_stage *s, float *x, const int32_t *valid,
                             const int32_t *idx, int rows, gt_error *err);

/* Runs fn(s) (ctx is the stage), the device part of a step: eagerly, or
 * on a backend with graphs (one rank, an expert trunk) through the stage's
 * nn_graph: the first step runs it eagerly (which plans its products and
 * sizes its buffers), the second captures it, later steps replay it.  fn
 * must read every per-step value from backend memory written before it
 * runs, read nothing back, and be the same function every call.  A
 * capture that fails leaves the stage eager.  The same kernels in the same
 * order: the same bytes either way. */
int model_stage_run_device(model_stage *s, nn_graph_fn fn, gt_error *err);

#endif
