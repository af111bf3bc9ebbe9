/* model_sampler_internal: the sampler's layers below its API.  Not part of
 * the API: only the sampler's files and the objectives' sampling hooks
 * include it.  Bottom to top:
 *
 *   model_solver.c          the steppers: a network evaluation at a time,
 *                           the per-row step constants, the flow ODE's
 *                           Euler / Heun / AB2 on the time grid, a DDIM step
 *   model_sampler_rows.c    a device batch's rows: the piece holding a row,
 *                           their starting noise, the host's finiteness
 *                           check naming the shower, the beam-axis turn
 *   model_obj_flow.c,       each objective's integrate hook (its table,
 *   model_obj_wgan.c        model_obj.h), beside its training
 *   model_sampler_ar.c      the autoregressive stage 2, layer token by layer
 *   model_sampler_batch.c   one stage's integration (as a graph per shape),
 *                           a device batch through both stages and the
 *                           decoding, requests cut into batches
 *   model_sampler_accept.c  the acceptance test: scoring and redrawing
 *   model_sampler.c         the API: open, close, run, the reports
 *
 * A file calls only the files listed before it; the upper layers reach an
 * objective's hook through its table (model_sampler_net.ops), never by
 * name. */
#ifndef MODEL_SAMPLER_INTERNAL_H
#define MODEL_SAMPLER_INTERNAL_H

#include <stdint.h>

#include "feat.h"
#include "model_accept.h"
#include "model_data.h"
#include "model_obj.h"
#include "model_sampler.h"
#include "nn_graph.h"
#include "nn_trunk.h"

/* Noise streams of the sampler (training uses streams 1, 2 and 1000+). */
#define SAMPLE_STREAM 100u
/* Noise of layer token l of an autoregressive stage 2 comes from stream
 * AR_STREAM + l (rows as in model_sampler_fill_noise). */
#define AR_STREAM 200u
/* sample.symmetrize's turn and mirror of row r: block r of this stream */
#define TURN_STREAM 90u
/* The acceptance test's uniform for row r's draw k: block r of stream
 * ACCEPT_STREAM | k << 32. */
#define ACCEPT_STREAM 95u

/* One stage's network as the sampler runs it. */
typedef struct model_sampler_net {
    nn_trunk *trunk;
    int dim, n_cond, n_ctx;
    model_objective obj;
    const model_obj_ops *ops;   /* the objective's table: its integrate hook */
    int noise_from;   /* wgan: first column that gets the generator's noise */
} model_sampler_net;

/* The integration's per-row constants (the time column of the network's
 * conditions, the coefficients of every axpby): each distinct float gets,
 * on first use, a backend array of max_batch copies that later steps and
 * batches reuse, so once a (steps, solver) has run, an integration copies
 * nothing to the device (and can be captured in a graph).  n Heun or
 * Euler steps use about 2n + 3 values, n DDIM steps about 5n + 4.  Past
 * CONST_MAX values or CONST_BYTES of arrays, a value is uploaded into
 * scratch at each use instead: the same bytes, only slower. */
#define CONST_MAX 1024
#define CONST_SLOTS_LOG2 11      /* the table stays at most half full */
#define CONST_SLOTS (1u << CONST_SLOTS_LOG2)
#define CONST_BYTES ((size_t)64 << 20)

typedef struct const_slot {
    uint32_t bits;   /* the float's bits: -0 and +0 are two values */
    float *dev;      /* NULL: an empty slot */
} const_slot;

/* Graphs of an integration (nn_graph.h), one per (stage, rows, steps) (the
 * solver is the config's): a shape runs eagerly the first time (which
 * plans its products and makes its step constants), is captured the second
 * time and replayed from then on; a shape whose integration had to upload
 * a step constant (the cache full) is never captured.  The most recently
 * used GRAPH_MAX shapes are kept. */
#define GRAPH_MAX 16

typedef struct graph_slot {
    int stage, rows, steps;  /* stage 0: an empty slot */
    nn_graph graph;
    double evals;            /* network evaluations of one integration */
    uint64_t used;           /* the sampler's use counter at the last use */
} graph_slot;

/* What one model_sampler_run counts: zeroed at its start, read by the
 * per-shower figures and the accessors after it. */
typedef struct model_sampler_tally {
    double evals_sum;        /* shower-evaluations */
    double flops_sum;        /* and their multiply-add FLOPs */
    int64_t evals_rows;
    double decode_s;         /* host seconds spent decoding */
    double device_s;         /* seconds from each stage's noise to its result
                              * on the host (the device's work and the copy
                              * back; on a CPU, the networks) */
    int64_t graph_replays;
} model_sampler_tally;

struct model_sampler {
    nn_backend *b;
    model_config cfg;
    geo_geometry geo;
    model_repr repr;
    int repr_ready;
    model_sampler_net net[2];
    int max_batch;
    double evals_per_shower;
    double flops_per_shower;
    model_sampler_tally tally;          /* of the current run */
    /* backend buffers, max_batch rows */
    float *x, *xp, *v1, *v2, *c, *cond, *t, *ca, *cb;
    float *ones;  /* [max_batch, dim2] of 1: the constant term of clamps */
    /* autoregressive stage 2 */
    int ar;
    model_ar_dims ard;
    float *ctx, *xin;                   /* backend: [B, n_ctx], [B, dim + n_ctx] */
    float *zeros;                       /* backend: [B, dim] of 0, the tokens' padding */
    float *tok_h, *ctx_h, *cnd_h, *prev_h;
    double *rem_h;                      /* energy not yet placed, MeV */
    double *hist_h;                     /* [B, history]: previous layers' shares */
    int *act_h;                         /* rows of the batch still generating */
    /* host buffers */
    float *t_h, *ca_h, *cb_h, *e_inc_h, *c1_h, *x1_h, *c2_h, *edep_h, *x2_h;
    float *turn_h;                      /* sample.symmetrize's copies, a shower a thread */
    int turn_threads;                   /* the turning runs on at most these */
    /* per-row constants (model_solver.c) */
    const_slot *consts;                 /* CONST_SLOTS, open addressing */
    int n_consts, max_consts;
    int64_t const_misses;               /* uses that found the cache full */
    /* graphs (model_sampler_batch.c) */
    int graphs_on;
    graph_slot graphs[GRAPH_MAX];
    uint64_t graph_uses;
    /* the acceptance test (model_sampler_set_accept) */
    int has_accept;
    model_accept accept;
    feat_layout feats;                  /* its features; feats.info NULL: none */
    float *feat_h, *row_h, *score_h;    /* host scratch of the scoring, a share a thread */
    int accept_threads;                 /* the shares: the scoring runs on at most these */
    double draws_per_shower;            /* of the last run: 1 without a test */
};

/* A slice of one request placed in the current device batch. */
typedef struct model_sampler_piece {
    int req;
    int64_t first;   /* first row within the request */
    int rows;
    int at;          /* row within the batch */
} model_sampler_piece;

/* A row's k-th draw under an acceptance test (model_accept) takes every
 * stream's noise from stream | k << 32: the sampler's streams are all
 * under 2^32, so draw 0 is the noise a sampler without the test draws, bit
 * for bit, and every later draw is another shower of the same row. */
static inline uint64_t draw_stream(uint64_t stream, uint32_t draw)
{
    return stream | (uint64_t)draw << 32;
}

/* The standard deviation of a stage's starting noise: sample.temperature
 * for stage 2, 1 for stage 1.  Stage 1's few features (the energy and its
 * depth profile) come out right at 1; stage 2 under it draws fewer of the
 * layers' wide radial tails that the network over-weights (engine/model/
 * README.md, "The sampler's temperature").  At 1 the noise is the unit
 * normal bit for bit, as before the field. */
static inline float noise_sd(const model_sampler *s, int stage)
{
    return stage == 2 ? (float)s->cfg.temperature : 1.0f;
}

/* FLOPs of one row through a stage's trunk (matmuls, as nn_trunk counts). */
static inline double row_flops(const model_sampler_net *n)
{
    return nn_trunk_forward_flops(n->trunk, 1);
}

#define DIVERGED "the checkpoint's network gave a non-finite value"

/* ---- the solver (model_solver.c) ---- */

/* v = f(x, [t, c]) for `rows` rows (the network's conditions in s->c). */
int model_solver_eval(model_sampler *s, model_sampler_net *n, float *x, float t, float *v,
                      int rows, gt_error *err);

/* y = a x + b z with scalar a, b (per-row constants from the cache). */
int model_solver_axpby(model_sampler *s, float *y, float a, float *x, float bcoef, float *z,
                       int rows, int dim, gt_error *err);

/* The flow ODE dx/dt = v integrated in place on s->x from t = 0 (noise) to
 * 1 with the config's solver (Euler, Heun or AB2) on its time grid. */
int model_solver_ode(model_sampler *s, model_sampler_net *n, int rows, int steps,
                     double *evals, gt_error *err);

/* One deterministic DDIM step of s->x from time t (abar = ab) to the next
 * time (abar = abn): the network's noise estimate at t, the clean sample
 * it implies (clipped), noised again to abn.  One evaluation. */
int model_solver_ddim_step(model_sampler *s, model_sampler_net *n, float t, double ab,
                           double abn, int rows, gt_error *err);

/* ---- a batch's rows (model_sampler_rows.c) ---- */

/* The piece that holds batch row i. */
int model_sampler_piece_of(const model_sampler_piece *p, int np, int i);

/* GT_EINVAL naming the shower behind the first of `rows` rows of `per`
 * host floats that is not finite (row r is batch row idx[r], or r when idx
 * is NULL), with `what` happened to it. */
int model_sampler_check_finite(const model_sampler_piece *p, int np, const float *x, int rows,
                               int per, const int *idx, const char *what, gt_error *err);

/* Starting noise of a stage (D columns) into s->x: row `row` of a request
 * keyed by (seed, row) alone. */
int model_sampler_fill_noise(model_sampler *s, const model_sample_request *reqs,
                             const model_sampler_piece *p, int np, int stage, int D,
                             gt_error *err);

/* sample.symmetrize: rows [first, first + rows) of q's decoded showers
 * turned about the beam axis and mirrored, as (seed, row) draws. */
void model_sampler_turn(model_sampler *s, const model_sample_request *q, int64_t first,
                        int rows);

/* ---- the autoregressive stage 2 (model_sampler_ar.c) ---- */

/* Stage 2 token by token for the `rows` rows of the batch (their stage-2
 * conditions in c2_h, E_dep in edep_h); the full standardised stage-2
 * vectors into x2_h.  Adds the evaluations and FLOPs per shower. */
int model_sampler_ar_run(model_sampler *s, model_sample_request *reqs,
                         const model_sampler_piece *p, int np, int rows, int steps,
                         double *evals, double *flops, gt_error *err);

/* ---- batches (model_sampler_batch.c) ---- */

/* Destroys every integration graph (model_sampler_set_graphs, closing). */
void model_sampler_graphs_clear(model_sampler *s);

/* The requests' showers, batched max_batch rows a device pass (steps <= 0:
 * the config's); no acceptance test. */
int model_sampler_batches(model_sampler *s, model_sample_request *reqs, int n_reqs, int steps,
                          gt_error *err);

/* ---- the acceptance test (model_sampler_accept.c) ---- */

/* model_sampler_batches under the acceptance test: the rows not kept drawn
 * again until every row is kept; *scored counts the draws judged. */
int model_sampler_accept_run(model_sampler *s, model_sample_request *reqs, int n_reqs,
                             int steps, double *scored, gt_error *err);

#endif
