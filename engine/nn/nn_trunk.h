/* nn_trunk: the networks the stage trainers train.
 *
 * expert: x[B, in_dim] ++ sinusoidal(cond[B, cond_dim]) -> linear -> h[B, hidden]
 *         -> blocks x { h += W2 SiLU(W1 LN(h) + b1) + b2 } -> LN -> linear
 *         -> out[B, out_dim] (fp32).
 * routed: n_experts expert trunks behind a gate.  The gate is a linear layer
 *         on the same input (x ++ embeddings), an fp32 softmax, top_k
 *         selection; each sample runs through its k experts (data-dependent
 *         expert batches via gather/scatter) and the outputs are summed with
 *         the renormalised gate weights.  Auxiliary losses: Switch-style
 *         load balance E * sum_e f_e P_e and the mean gate entropy; their
 *         gradients (times balance_coef / entropy_coef) are added by the
 *         backward, their values reported by nn_trunk_router_stats.
 *         The output is fp32, exactly like an expert trunk's.
 * skip NN_SKIP_GATED (either kind): out[:, j] += g_j(cond) * x[:, j] for
 *         j < out_dim, with g = Linear(embed(cond)) (zero at initialisation,
 *         fp32 whatever the precision).  Without it the output is an affine
 *         function of the last hidden state, so it lies in a hidden-
 *         dimensional subspace of the out_dim-dimensional space; with it every
 *         output coordinate can follow its own input coordinate, with a
 *         weight that depends on the conditions (a flow's time among them).
 *         Needs cond_dim >= 1 and in_dim >= out_dim (the first out_dim
 *         input columns are the ones followed).
 * block_cond k (either kind): the embeddings of the first k conditions (a
 *         flow's time is the first) also enter every block, the way a
 *         diffusion U-Net's residual blocks each add the time embedding:
 *         h += W2 SiLU(W1 LN(h) + Wc_l embed(cond[:, :k]) + b1) + b2, one
 *         Wc_l a block (zero at initialisation, drawing nothing, so a
 *         trunk starts as the same trunk without them).  Without it the
 *         conditions reach the blocks only through the input layer and the
 *         residual stream.
 *
 * precision NN_BF16: matmul inputs (weights' working copy, activations,
 * gradients fed to matmuls) are bf16 with fp32 accumulation; everything
 * else (LayerNorm statistics, softmax, router losses, reductions, master
 * weights, optimizer) stays fp32.
 *
 * Memory: parameters in one nn_params allocation; activations in one arena
 * planned by nn_trunk_plan(batch); forward/backward allocate nothing. */
#ifndef NN_TRUNK_H
#define NN_TRUNK_H

#include "gt_error.h"
#include "nn_backend.h"
#include "nn_params.h"

#define NN_TRUNK_MAX_EXPERTS 64

typedef enum nn_trunk_kind {
    NN_TRUNK_EXPERT = 0,
    NN_TRUNK_ROUTED = 1,
} nn_trunk_kind;

typedef enum nn_trunk_skip {
    NN_SKIP_NONE = 0,
    NN_SKIP_GATED = 1,
} nn_trunk_skip;

typedef struct nn_trunk_config {
    nn_trunk_kind kind;
    nn_trunk_skip skip;    /* NN_SKIP_NONE (default) or NN_SKIP_GATED */
    int in_dim;            /* data features (may be 0) */
    int cond_dim;          /* scalar conditions (may be 0) */
    int emb_dim;           /* sinusoidal features per condition, even */
    float emb_scale;       /* a condition is multiplied by this first */
    float emb_max_period;  /* longest period of the embedding */
    int hidden;
    int blocks;
    int out_dim;
    int n_experts;         /* routed only, 2..NN_TRUNK_MAX_EXPERTS */
    int top_k;             /* routed only, 1..n_experts */
    float balance_coef;    /* routed: weight of the balance loss gradient */
    float entropy_coef;    /* routed: weight of the entropy loss gradient */
    nn_dtype precision;    /* NN_F32 or NN_BF16 */
    float ln_eps;
    int block_cond;        /* leading conditions fed to every block, 0..cond_dim */
} nn_trunk_config;

/* Baseline: expert, in 6480, 2 conditions x 32 features (scale 1000, period
 * 1e4), hidden 512, 6 blocks, out 6480, fp32; routed defaults 4 experts,
 * top 2, coefs 0.01 / 0.0. */
void nn_trunk_config_default(nn_trunk_config *cfg);
int nn_trunk_config_check(const nn_trunk_config *cfg, gt_error *err);

typedef struct nn_trunk nn_trunk;

/* Plans and allocates the parameters (zero; see nn_trunk_init). */
int nn_trunk_create(nn_backend *b, const nn_trunk_config *cfg, nn_trunk **out, gt_error *err);
void nn_trunk_destroy(nn_trunk *t);                     /* NULL ok */

/* Random initialisation from the counter-based generator (stream 0 of
 * seed): linear weights normal(0, 1/sqrt(fan_in)) (the output head scaled
 * by out_scale), biases 0, LayerNorm gamma 1, beta 0; the gated skip and
 * the blocks' condition weights 0 (drawing nothing, so the other weights
 * are those of the same trunk without them). */
int nn_trunk_init(nn_trunk *t, uint64_t seed, float out_scale, gt_error *err);

/* Allocates the activation arena for up to `batch` rows (re-planning with
 * a new batch frees the old arena; the same batch is a no-op). */
int nn_trunk_plan(nn_trunk *t, int batch, gt_error *err);

/* x[B, in_dim], cond[B, cond_dim], out[B, out_dim], all fp32 backend
 * memory, B <= planned batch.  training = 1 saves what backward needs. */
int nn_trunk_forward(nn_trunk *t, nn_tensor x, nn_tensor cond, nn_tensor out, int training,
                     gt_error *err);

/* Accumulates parameter gradients (zero them first with
 * nn_params_zero_grad) from d_out[B, out_dim] of the last training
 * forward.  d_x: when its data is not NULL, receives dL/dx[B, in_dim]
 * (overwritten). */
int nn_trunk_backward(nn_trunk *t, nn_tensor d_out, nn_tensor d_x, gt_error *err);

/* Switches the precision of the matmuls from now on.  NN_F32 is always
 * allowed: a bf16 trunk then computes in fp32 from its fp32 master weights
 * (fp32 validation losses, comparable across runs); NN_BF16 only for a
 * trunk created with bf16.  The next backward needs a new forward. */
int nn_trunk_set_precision(nn_trunk *t, nn_dtype precision, gt_error *err);

/* By default a forward checks that its input (x and the embedded
 * conditions) is finite, with one sum of squares read back to the host:
 * GT_EINVAL instead of silently propagating NaN.  The read-back is a device
 * synchronisation, which a CUDA graph cannot contain; a caller that
 * validates its inputs itself (or captures the step in a graph) turns the
 * check off here. */
void nn_trunk_set_input_check(nn_trunk *t, int on);
nn_dtype nn_trunk_get_precision(const nn_trunk *t);

/* Packs a snapshot of every linear weight (in the current precision; the
 * routed gate in fp32) for the backend's fixed-order linear layer.  From
 * then on a forward with training = 0 computes each output row from its
 * input row alone, by the same roundings whatever the number of rows, the
 * row's position, the routed expert grouping or the thread count: what a
 * sampler needs for batch-invariant showers.  Training forwards are not
 * affected.  The snapshot does not follow later changes of the weights:
 * pack again after them (nn_trunk_set_precision to another dtype drops
 * it).  GT_EUNSUPPORTED when the backend has no fixed-order layer. */
int nn_trunk_pack(nn_trunk *t, gt_error *err);
void nn_trunk_unpack(nn_trunk *t);                      /* NULL ok */
int nn_trunk_is_packed(const nn_trunk *t);

nn_params *nn_trunk_params(nn_trunk *t);
const nn_trunk_config *nn_trunk_get_config(const nn_trunk *t);
/* Multiply-adds of one forward for `rows` rows (for GFLOP/s reports). */
double nn_trunk_forward_flops(const nn_trunk *t, int rows);

typedef struct nn_router_stats {
    float balance_loss;    /* E * sum_e f_e P_e (1.0 when perfectly balanced) */
    float entropy_loss;    /* mean over rows of the gate entropy (nats) */
    int n_experts;
    int load[NN_TRUNK_MAX_EXPERTS];   /* rows routed to each expert */
} nn_router_stats;

/* Router values of the last forward; GT_EINVAL for an expert trunk. */
int nn_trunk_router_stats(const nn_trunk *t, nn_router_stats *out, gt_error *err);

#endif
