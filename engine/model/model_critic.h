/* model_critic: the WGAN-GP critic, a piecewise-linear network with its
 * hand-written double backward.
 *
 *   h_0 = [x ; c]                    x [B, in_dim] data, c [B, n_cond]
 *   h_l = LeakyReLU(W_l h_{l-1} + b_l), l = 1..depth  (hidden wide)
 *   D   = w_out . h_depth + b_out    one score per row
 *
 * No LayerNorm and no smooth activation: D is piecewise linear in x, so
 * grad_x D = W_1^T M_1 ... W_L^T M_L w_out, with M_l the diagonal of
 * LeakyReLU slopes (1 or `slope`) at the row's pre-activations.  Those are
 * constant almost everywhere, so the gradient penalty
 *   P = lambda * mean_i (||grad_x D(x_i)|| - 1)^2
 * is a polynomial in the weights between mask changes and its gradient is
 * obtained exactly by back-propagating through that product (the terms a
 * smooth activation's second derivative would add are zero, and the
 * biases do not enter).  model_critic_penalty computes it; tests/model
 * checks it against finite differences of P itself.
 *
 * The critic is always fp32, whatever the run's precision: its penalty is a
 * difference of nearly equal quantities (a norm near 1) whose gradient a
 * bf16 matmul input would swamp.  The per-row norms are reduced on the host
 * in double (one [B, in] copy per critic step). */
#ifndef MODEL_CRITIC_H
#define MODEL_CRITIC_H

#include <stdint.h>

#include "gt_error.h"
#include "nn_backend.h"
#include "nn_params.h"

typedef struct model_critic_config {
    int in_dim;   /* data features (the penalty's gradient is over these) */
    int n_cond;   /* conditions appended to the input (no penalty over them) */
    int hidden;
    int depth;    /* hidden layers, >= 1 */
    float slope;  /* LeakyReLU negative slope, in (0, 1) */
} model_critic_config;

typedef struct model_critic model_critic;

/* Allocates parameters and the activations of `batch` rows. */
int model_critic_create(nn_backend *b, const model_critic_config *cfg, int batch,
                        model_critic **out, gt_error *err);
void model_critic_destroy(model_critic *c);   /* NULL ok */
/* Weights normal(0, 1/sqrt(fan_in)) from (seed, stream 0), biases 0. */
int model_critic_init(model_critic *c, uint64_t seed, gt_error *err);
nn_params *model_critic_params(model_critic *c);
const model_critic_config *model_critic_get_config(const model_critic *c);

/* out[B] (backend memory) = D(x, c); keeps what backward and penalty need.
 * x [B, in_dim], cond [B, n_cond] (ignored when n_cond is 0), B <= batch. */
int model_critic_forward(model_critic *c, nn_tensor x, nn_tensor cond, float *out,
                         gt_error *err);

/* For L = sum_i dout[i] * D_i of the last forward (dout: backend [B]):
 * accumulates dL/dtheta into the parameter gradients; when dx.data is not
 * NULL writes dL/dx [B, in_dim]. */
int model_critic_backward(model_critic *c, const float *dout, nn_tensor dx, gt_error *err);

/* The gradient penalty of the last forward's rows (forward the random
 * interpolates first): *penalty = lambda * mean_i (||grad_x D_i|| - 1)^2,
 * and lambda-scaled dP/dtheta accumulated into the parameter gradients.
 * *mean_norm (may be NULL) receives mean_i ||grad_x D_i||. */
int model_critic_penalty(model_critic *c, float lambda, float *penalty, float *mean_norm,
                         gt_error *err);

#endif
