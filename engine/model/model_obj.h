/* model_obj: the objective table of the stage trainer and the sampler.
 *
 * An objective is how one stage's network is trained and how a sample is
 * drawn from it: flow matching and DDPM (model_obj_flow.c: one trainer,
 * two ways of noising and of sampling), WGAN-GP (model_obj_wgan.c), each
 * file with its training and its sampling side by side.  The stage trainer
 * (model_stage.c) and the sampler (model_sampler_batch.c,
 * model_sampler_ar.c) call an objective only through its table; an
 * objective calls only what lies below it, the stage's plumbing
 * (model_stage_base.c) and the sampler's steppers (model_solver.c), so
 * nothing calls back up.  Internal to engine/model. */
#ifndef MODEL_OBJ_H
#define MODEL_OBJ_H

#include "gt_error.h"
#include "model_config.h"
#include "model_sampler.h"
#include "model_stage.h"
#include "nn_adamw.h"

struct model_sampler_net;   /* one stage's network in the sampler */

typedef struct model_obj_ops {
    const char *name;
    /* What the objective adds to a stage beside the trunk, its optimizer
     * and the batch buffers every objective uses (goc: the trunk's
     * optimizer settings); called once the trunk's optimizer exists, in
     * the stage's creation.  NULL: nothing. */
    int (*create)(model_stage *s, const model_stage_data *data, const nn_adamw_config *goc,
                  gt_error *err);
    /* Frees what create made; safe on a partial stage.  NULL: nothing. */
    void (*destroy)(model_stage *s);
    /* One optimizer update of the trunk; the reported loss stays in
     * backend memory (s->loss), the gradient norm before clipping in
     * *grad_norm. */
    int (*step)(model_stage *s, float *grad_norm, gt_error *err);
    /* The validation value of the weights the fp32 twin (s->val_trunk)
     * holds on entry. */
    int (*validate)(model_stage *s, float *val, gt_error *err);

    /* Sampling: one stage's integration in place on the sampler's x (noise
     * in, sample out) for `rows` rows in `steps` steps, the network's
     * conditions in the sampler's c; adds its network evaluations per row
     * to *evals.  The sampler may capture it as a graph
     * (model_sampler_batch.c): once its shape has run it copies nothing
     * between host and device. */
    int (*integrate)(model_sampler *s, struct model_sampler_net *n, int rows, int steps,
                     double *evals, gt_error *err);
} model_obj_ops;

extern const model_obj_ops model_obj_flow;   /* MODEL_OBJ_FLOW */
extern const model_obj_ops model_obj_ddpm;   /* MODEL_OBJ_DDPM */
extern const model_obj_ops model_obj_wgan;   /* MODEL_OBJ_WGAN */

static inline const model_obj_ops *model_obj_of(model_objective o)
{
    return o == MODEL_OBJ_WGAN ? &model_obj_wgan
           : o == MODEL_OBJ_DDPM ? &model_obj_ddpm
                                 : &model_obj_flow;
}

#endif
