/* nn_adamw: AdamW over an nn_params (fp32 master weights and moments in the
 * parameter layout; a bf16 working copy rewritten in the same pass when the
 * parameters have one), gradient clipping by global norm, and a linear
 * warmup + cosine decay learning-rate schedule. */
#ifndef NN_ADAMW_H
#define NN_ADAMW_H

#include "gt_error.h"
#include "nn_params.h"

typedef struct nn_adamw_config {
    float lr;               /* peak learning rate */
    float beta1, beta2, eps;
    float weight_decay;     /* decoupled; applied to views with decay = 1 */
    float clip_norm;        /* clip the global gradient norm to this; <= 0: off */
    long long warmup_steps; /* linear ramp from lr/warmup to lr */
    long long total_steps;  /* cosine from lr down to lr*min_lr_ratio; <= 0: constant */
    float min_lr_ratio;
} nn_adamw_config;

typedef struct nn_adamw_opt {
    nn_adamw_config cfg;
    nn_params *p;
    float *m, *v;           /* moments, parameter layout (backend memory) */
    float *scratch;         /* one backend float: the sum of squares */
    nn_adamw_hp *hp;        /* backend memory: this step's hyper-parameters,
                             * [0] for views with decay, [1] without */
    long long step;         /* updates done so far */
    /* The gradient the update uses is grad_scale * p->grad (1 after
     * create).  Data-parallel training all-reduces the ranks' gradients as a
     * sum and sets 1 / ranks here, so the norm, the clipping and the update
     * see the mean without another pass over the gradients; at 1 every
     * operation is the one-rank arithmetic, bit for bit. */
    float grad_scale;
} nn_adamw_opt;

/* lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, clip 1.0,
 * no warmup, constant schedule. */
void nn_adamw_config_default(nn_adamw_config *cfg);
int nn_adamw_config_check(const nn_adamw_config *cfg, gt_error *err);

int nn_adamw_create(nn_adamw_opt *opt, nn_params *p, const nn_adamw_config *cfg, gt_error *err);
void nn_adamw_destroy(nn_adamw_opt *opt);

/* Learning rate of update number step + 1 (steps count from 0). */
float nn_adamw_lr(const nn_adamw_config *cfg, long long step);

/* Global norm of the gradients (fp32 sum of squares, one pass), times
 * grad_scale. */
int nn_adamw_grad_norm(nn_adamw_opt *opt, float *norm, gt_error *err);

/* One update from p->grad: computes the global norm (returned in *norm when
 * not NULL), clips, updates every view (decay per view), advances step.
 * A non-finite norm returns GT_EINVAL and leaves parameters unchanged.
 * It is the three calls below. */
int nn_adamw_step(nn_adamw_opt *opt, float *norm, gt_error *err);

/* The update in three parts, so that one captured graph can hold a whole
 * training step (forward, backward, norm, clipping and update) and replay
 * it step after step:
 *  - nn_adamw_prepare writes this step's hyper-parameters (learning rate of
 *    the schedule, bias corrections, grad_scale, clip_norm) into backend
 *    memory (opt->hp); outside any capture, before the step runs;
 *  - nn_adamw_launch enqueues the gradient's sum of squares and the update,
 *    which reads that sum and the hyper-parameters when it runs, so it
 *    reads nothing back and can be captured; on a non-finite norm the
 *    update itself leaves every buffer unchanged (nn_adamw_hp_clip);
 *  - nn_adamw_finish reads the sum back: *norm (when not NULL), and step
 *    advances, or GT_EINVAL when the norm was not finite. */
int nn_adamw_prepare(nn_adamw_opt *opt, gt_error *err);
int nn_adamw_launch(nn_adamw_opt *opt, gt_error *err);
int nn_adamw_finish(nn_adamw_opt *opt, float *norm, gt_error *err);

#endif
