/* model_obj_flow: the flow-matching and DDPM objectives (model_stage.h
 * describes both; model_obj.h the table).  Training: both regress a
 * trunk's prediction on a noised input and differ only in the per-row
 * coefficients of the noising and in the target, so they share one
 * trainer; with train.ema they also keep the moving average of the
 * weights (the stage updates and stores it).  Sampling: flow integrates
 * its velocity with the configured ODE solver, DDPM runs deterministic
 * DDIM (the steppers are model_solver.c's). */
#include "model_sampler_internal.h"
#include "model_stage_internal.h"

#include <math.h>

double model_ddpm_abar(double t)
{
    const double s = 0.008, half_pi = 1.5707963267948966;
    double c0 = cos(half_pi * s / (1 + s));
    double c = cos(half_pi * (t + s) / (1 + s));
    double a = (c * c) / (c0 * c0);
    if (a < 1e-4)
        a = 1e-4;
    if (a > 1)
        a = 1;
    return a;
}

/* Per-row coefficients of the noised input and the regression target.
 *   flow: xt = (1 - t) x0 + t x1, target = x1 - x0
 *   ddpm: xt = sqrt(abar) x1 + sqrt(1 - abar) x0, target = x0 (the noise) */
static void coefficients(model_objective obj, const float *t, int n, float *a0, float *a1)
{
    for (int i = 0; i < n; i++) {
        if (obj == MODEL_OBJ_FLOW) {
            a0[i] = 1.0f - t[i];
            a1[i] = t[i];
        } else {
            double ab = model_ddpm_abar(t[i]);
            a0[i] = (float)sqrt(1.0 - ab);
            a1[i] = (float)sqrt(ab);
        }
    }
}

/* Times: flow uses [0, 1); ddpm avoids t = 0 exactly (abar = 1: no noise). */
static void times_from_uniforms(model_objective obj, float *t, int n)
{
    if (obj == MODEL_OBJ_DDPM)
        for (int i = 0; i < n; i++)
            t[i] = 0.001f + 0.999f * t[i];
}

/* Uploads the per-row coefficients of the noised input (alpha_h, beta_h,
 * `rows` of each, in place on the host). */
static int upload_coefficients(model_stage *s, int rows, gt_error *err)
{
    GT_TRY(nn_copy_h2d(s->b, s->alpha, s->alpha_h, (size_t)rows * sizeof(float), err));
    return nn_copy_h2d(s->b, s->beta, s->beta_h, (size_t)rows * sizeof(float), err);
}

/* Builds xt, the target and cond for `rows` rows whose x1, x0, cdata, t
 * and coefficients are in backend memory: device work only.  flow's target
 * x1 - x0 goes to `target` (rows x D; it may be x1 itself, which xt has
 * been read from by then); ddpm's is x0 itself. */
static int build_inputs(model_stage *s, int rows, nn_tensor x1, nn_tensor x0, nn_tensor cdata,
                        const float *t_dev, float *target, gt_error *err)
{
    const int D = s->dim, C = s->n_cond;
    nn_tensor xt = nn_f32(s->xt, rows, D);
    GT_TRY(nn_axpby_rows(s->b, xt, s->alpha, x0, s->beta, x1, err));
    if (s->objective == MODEL_OBJ_FLOW) {
        nn_tensor tg = nn_f32(target, rows, D);
        GT_TRY(nn_axpby_rows(s->b, tg, s->ones, x1, s->mones, x0, err));
    }
    nn_tensor parts[2] = {nn_f32((float *)t_dev, rows, 1), cdata};
    return nn_concat(s->b, nn_f32(s->cond, rows, 1 + C), parts, C ? 2 : 1, err);
}

/* The trunk's data input: x_t itself, or [x_t ; context] when there is one. */
static int trunk_input(model_stage *s, int rows, const float *ctx, nn_tensor *xin, gt_error *err)
{
    if (!s->n_ctx) {
        *xin = nn_f32(s->xt, rows, s->dim);
        return GT_OK;
    }
    *xin = nn_f32(s->xin, rows, s->dim + s->n_ctx);
    nn_tensor parts[2] = {nn_f32(s->xt, rows, s->dim), nn_f32((float *)ctx, rows, s->n_ctx)};
    return nn_concat(s->b, *xin, parts, 2, err);
}

/* The average of train.ema, started at the initial weights (the stage
 * updates it after every step, model_stage.c). */
static int flow_create(model_stage *s, const model_stage_data *data, const nn_adamw_config *goc,
                       gt_error *err)
{
    (void)data;
    (void)goc;
    if (!(s->cfg.ema > 0))
        return GT_OK;
    nn_params *tp = nn_trunk_params(s->trunk);
    GT_TRY(model_stage_alloc(s, &s->ema, tp->count, err));
    GT_TRY(model_stage_alloc(s, &s->ema_coef, 2, err));
    return nn_copy_d2d(s->b, s->ema, tp->value, tp->count * sizeof(float), err);
}

static void flow_destroy(model_stage *s)
{
    nn_free(s->b, s->ema);
    nn_free(s->b, s->ema_coef);
}

/* The loss on the fixed validation draws, by val_trunk (which holds the
 * master weights on entry). */
static int flow_validate(model_stage *s, float *val_loss, gt_error *err)
{
    const int D = s->dim, C = s->n_cond;
    double sum = 0.0;
    for (int r0 = 0; r0 < s->n_valset; r0 += s->batch) {
        int rows = s->n_valset - r0 < s->batch ? s->n_valset - r0 : s->batch;
        GT_TRY(nn_copy_d2h(s->b, s->t_h, s->val_t + r0, (size_t)rows * sizeof(float), err));
        times_from_uniforms(s->objective, s->t_h, rows);
        coefficients(s->objective, s->t_h, rows, s->alpha_h, s->beta_h);
        GT_TRY(nn_copy_h2d(s->b, s->t, s->t_h, (size_t)rows * sizeof(float), err));
        GT_TRY(upload_coefficients(s, rows, err));
        nn_tensor x1 = nn_f32(s->x_val + (size_t)r0 * D, rows, D);
        nn_tensor x0 = nn_f32(s->val_noise + (size_t)r0 * D, rows, D);
        nn_tensor cd = nn_f32(C ? s->c_val + (size_t)r0 * C : NULL, rows, C);
        /* the held-out rows stay as they are: the target goes to dpred,
         * which validation does not otherwise use */
        GT_TRY(build_inputs(s, rows, x1, x0, cd, s->t, s->dpred, err));
        nn_tensor pred = nn_f32(s->pred, rows, D);
        nn_tensor target = s->objective == MODEL_OBJ_FLOW ? nn_f32(s->dpred, rows, D) : x0;
        nn_tensor xin;
        GT_TRY(trunk_input(s, rows, s->n_ctx ? s->ctx_val + (size_t)r0 * s->n_ctx : NULL, &xin,
                           err));
        float l;
        GT_TRY(nn_trunk_forward(s->val_trunk, xin, nn_f32(s->cond, rows, 1 + C), pred, 0, err));
        GT_TRY(nn_mse_fwd(s->b, s->loss, pred, target, err));
        GT_TRY(nn_copy_d2h(s->b, &l, s->loss, sizeof l, err));
        sum += (double)l * rows;
    }
    *val_loss = (float)(sum / s->n_valset);
    return GT_OK;
}

/* The host's part of a step: the draws (rows, times, noise) and every value
 * that changes from step to step written to backend memory (the batch's
 * rows, times, coefficients, noise and its zeroed padding, this step's
 * AdamW hyper-parameters), so that the device's part runs the same kernels
 * on the same buffers every step. */
static int flow_step_draw(model_stage *s, gt_error *err)
{
    const int B = s->batch;
    /* one fixed order of draws (rows, times, noise), the same number of
     * generator blocks every step: a resumed run continues the stream */
    GT_TRY(model_stage_real_batch(s, err));
    /* the whole batch's times (gbatch draws), this rank's share of them */
    model_stage_uniforms(&s->rng, s->t_h, s->gbatch);
    float *th = s->t_h + s->lo;
    times_from_uniforms(s->objective, th, B);
    coefficients(s->objective, th, B, s->alpha_h, s->beta_h);
    GT_TRY(model_stage_batch_noise(s, err));
    GT_TRY(nn_copy_h2d(s->b, s->t, th, (size_t)B * sizeof(float), err));
    if (s->valid_train)
        GT_TRY(nn_zero_outside(s->b, nn_f32(s->x0, B, s->dim), s->valid_train, s->n_train,
                               s->idx, err));
    GT_TRY(upload_coefficients(s, B, err));
    return nn_adamw_prepare(&s->opt, err);
}

/* The device's part: noised input and target, forward, loss, backward, the
 * gradients' sum over ranks, norm, clipping and update.  It reads nothing
 * back (the training trunk checks no input: model_stage_create validated
 * the data), so one CUDA graph can hold it. */
static int flow_step_device(void *ctx, gt_error *err)
{
    model_stage *s = ctx;
    const int B = s->batch, D = s->dim, C = s->n_cond;
    nn_tensor x1 = nn_f32(s->x1, B, D), x0 = nn_f32(s->x0, B, D);
    nn_tensor cd = nn_f32(C ? s->cdata : NULL, B, C);
    /* the target replaces the batch's rows (gathered afresh every step):
     * one [B, D] buffer fewer */
    GT_TRY(build_inputs(s, B, x1, x0, cd, s->t, s->x1, err));
    if (s->n_ctx)
        GT_TRY(nn_gather_rows(s->b, nn_f32(s->ctxb, B, s->n_ctx),
                              nn_f32(s->ctx_train, s->n_train, s->n_ctx), s->idx, NULL, err));
    nn_tensor xin;
    GT_TRY(trunk_input(s, B, s->ctxb, &xin, err));
    nn_tensor pred = nn_f32(s->pred, B, D), dpred = nn_f32(s->dpred, B, D);
    nn_tensor target = s->objective == MODEL_OBJ_FLOW ? x1 : x0;
    nn_tensor none = nn_f32(NULL, B, D + s->n_ctx);
    GT_TRY(nn_trunk_forward(s->trunk, xin, nn_f32(s->cond, B, 1 + C), pred, 1, err));
    GT_TRY(nn_mse_fwd(s->b, s->loss, pred, target, err));
    GT_TRY(nn_mse_bwd(s->b, dpred, 1.0f, pred, target, 0, err));
    GT_TRY(nn_params_zero_grad(nn_trunk_params(s->trunk), err));
    GT_TRY(nn_trunk_backward(s->trunk, dpred, none, err));
    GT_TRY(model_stage_allreduce_grads(s, nn_trunk_params(s->trunk), err));
    return nn_adamw_launch(&s->opt, err);
}

/* One optimizer update; the loss stays in backend memory (s->loss). */
static int flow_step(model_stage *s, float *grad_norm, gt_error *err)
{
    GT_TRY(flow_step_draw(s, err));
    GT_TRY(model_stage_run_device(s, flow_step_device, err));
    return nn_adamw_finish(&s->opt, grad_norm, err);
}

/* ------------------------------------------------------------------------ */
/* sampling                                                                 */
/* ------------------------------------------------------------------------ */

/* flow: dx/dt = v from the noise (t = 0) to the data (t = 1), by the
 * config's ODE solver (Euler, Heun or AB2) on its time grid. */
static int flow_integrate(model_sampler *s, model_sampler_net *n, int rows, int steps,
                          double *evals, gt_error *err)
{
    return model_solver_ode(s, n, rows, steps, evals, err);
}

/* ddpm: deterministic DDIM from t = 1 (noise) to t = 0 on a uniform grid
 * of the cosine schedule, one evaluation a step. */
static int ddpm_integrate(model_sampler *s, model_sampler_net *n, int rows, int steps,
                          double *evals, gt_error *err)
{
    for (int k = 0; k < steps; k++) {
        double t = 1.0 - (double)k / steps, tn = 1.0 - (double)(k + 1) / steps;
        double ab = model_ddpm_abar(t), abn = tn <= 0 ? 1.0 : model_ddpm_abar(tn);
        GT_TRY(model_solver_ddim_step(s, n, (float)t, ab, abn, rows, err));
        *evals += 1;
    }
    return GT_OK;
}

const model_obj_ops model_obj_flow = {.name = "flow", .create = flow_create, .destroy = flow_destroy,
                                      .step = flow_step, .validate = flow_validate,
                                      .integrate = flow_integrate};

const model_obj_ops model_obj_ddpm = {.name = "ddpm", .create = flow_create, .destroy = flow_destroy,
                                      .step = flow_step, .validate = flow_validate,
                                      .integrate = ddpm_integrate};
