/* model_solver: the sampler's steppers (model_sampler_internal.h), at the
 * bottom of the sampler: one network evaluation at a time t, the per-row
 * constants every step's coefficients come from (cached on the device, so
 * an integration copies nothing once its shape has run), the flow ODE's
 * Euler, Heun and AB2 on the time grid of sample.time_power, and one DDIM
 * step.  The objectives' integrate hooks (model_obj_*.c) drive them. */
#include "model_sampler_internal.h"

#include <math.h>
#include <string.h>

/* DDIM clips its estimate of the clean sample to +-X0_CLIP standardised
 * units: at t = 1 (abar = 1e-4) the estimate divides by sqrt(abar) = 0.01,
 * so an eps error of 0.1 would otherwise put x0 at 10 sigma and the next
 * step would carry it.  Training data beyond 8 sigma is rare (< 0.1%). */
#define X0_CLIP 8.0f

/* Fills n host floats with v and uploads them. */
static int upload_const(model_sampler *s, float *dev, float *host, int n, float v, gt_error *err)
{
    for (int i = 0; i < n; i++)
        host[i] = v;
    return nn_copy_h2d(s->b, dev, host, (size_t)n * sizeof(float), err);
}

/* *out = the cached backend array of max_batch copies of v, made on first
 * use (host: max_batch floats of staging), or NULL when the cache is full. */
static int const_dev(model_sampler *s, float v, float *host, const float **out, gt_error *err)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    unsigned h = (bits * 2654435761u) >> (32 - CONST_SLOTS_LOG2);
    const_slot *c = &s->consts[h];
    for (; c->dev; h = (h + 1) & (CONST_SLOTS - 1), c = &s->consts[h])
        if (c->bits == bits) {
            *out = c->dev;
            return GT_OK;
        }
    *out = NULL;
    if (s->n_consts >= s->max_consts) {
        s->const_misses++;
        return GT_OK;
    }
    float *d = NULL;
    GT_TRY(nn_alloc(s->b, (size_t)s->max_batch * sizeof(float), (void **)&d, err));
    int rc = upload_const(s, d, host, s->max_batch, v, err);
    if (rc) {
        nn_free(s->b, d);
        return rc;
    }
    c->bits = bits;
    c->dev = d;
    s->n_consts++;
    *out = d;
    return GT_OK;
}

/* *out = a backend array of (at least) `rows` copies of v: the cached one,
 * or, with the cache full, v uploaded into `scratch` (staged in `host`). */
static int const_rows(model_sampler *s, float v, int rows, float *scratch, float *host,
                      const float **out, gt_error *err)
{
    GT_TRY(const_dev(s, v, host, out, err));
    if (*out)
        return GT_OK;
    *out = scratch;
    return upload_const(s, scratch, host, rows, v, err);
}

/* v = f(x, [t, c]) for `rows` rows. */
int model_solver_eval(model_sampler *s, model_sampler_net *n, float *x, float t, float *v,
                      int rows, gt_error *err)
{
    const float *tc = NULL;
    int rc = const_rows(s, t, rows, s->t, s->t_h, &tc, err);
    if (rc)
        return rc;
    nn_tensor parts[2] = {nn_f32((float *)tc, rows, 1), nn_f32(s->c, rows, n->n_cond)};
    nn_tensor cond = nn_f32(s->cond, rows, 1 + n->n_cond);
    if ((rc = nn_concat(s->b, cond, parts, 2, err)))
        return rc;
    nn_tensor xin = nn_f32(x, rows, n->dim);
    if (n->n_ctx) {
        nn_tensor xp[2] = {xin, nn_f32(s->ctx, rows, n->n_ctx)};
        xin = nn_f32(s->xin, rows, n->dim + n->n_ctx);
        if ((rc = nn_concat(s->b, xin, xp, 2, err)))
            return rc;
    }
    return nn_trunk_forward(n->trunk, xin, cond, nn_f32(v, rows, n->dim), 0, err);
}

/* y = a x + b z with scalar a, b. */
int model_solver_axpby(model_sampler *s, float *y, float a, float *x, float bcoef, float *z,
                       int rows, int dim, gt_error *err)
{
    const float *ca = NULL, *cb = NULL;
    int rc;
    if ((rc = const_rows(s, a, rows, s->ca, s->ca_h, &ca, err)) ||
        (rc = const_rows(s, bcoef, rows, s->cb, s->cb_h, &cb, err)))
        return rc;
    return nn_axpby_rows(s->b, nn_f32(y, rows, dim), ca, nn_f32(x, rows, dim), cb,
                         nn_f32(z, rows, dim), err);
}

/* x = min(max(x, -c), c), from existing ops:
 * max(x, -c) = relu(x + c) - c and min(y, c) = c - relu(c - y). */
static int clamp(model_sampler *s, float *x, float c, int rows, int dim, gt_error *err)
{
    nn_tensor t = nn_f32(x, rows, dim);
    int rc;
    if ((rc = model_solver_axpby(s, x, 1.0f, x, c, s->ones, rows, dim, err)) ||
        (rc = nn_leaky_fwd(s->b, t, t, 0.0f, err)) ||
        (rc = model_solver_axpby(s, x, -1.0f, x, 2.0f * c, s->ones, rows, dim, err)) ||
        (rc = nn_leaky_fwd(s->b, t, t, 0.0f, err)) ||
        (rc = model_solver_axpby(s, x, -1.0f, x, c, s->ones, rows, dim, err)))
        return rc;
    return GT_OK;
}

/* Time of step k of `steps` on the flow solvers' grid, (k / steps)^power:
 * with power > 1 the steps are short near the noise (t = 0), where the
 * measured velocity turns fastest (engine/model/README.md, "Time grid").
 * Repeated products of a correctly rounded quotient: the same float on
 * every CPU and compiler (pow() may differ in the last bit by libm). */
static float grid_time(int k, int steps, int power)
{
    const double u = (double)k / steps;
    double t = 1.0;
    for (int i = 0; i < power; i++)
        t *= u;
    return (float)t;
}

/* Heun's corrector for a step of length h from (s->x, t), v holding
 * v(s->x, t): predicts s->xp, evaluates vp there, and moves s->x by the
 * average slope.  Heun's steps and ab2's first step. */
static int heun_correct(model_sampler *s, model_sampler_net *n, float t, float h, float *v,
                        float *vp, int rows, double *evals, gt_error *err)
{
    const int D = n->dim;
    int rc;
    if ((rc = model_solver_axpby(s, s->xp, 1.0f, s->x, h, v, rows, D, err)) ||
        (rc = model_solver_eval(s, n, s->xp, t + h, vp, rows, err)) ||
        (rc = model_solver_axpby(s, s->x, 1.0f, s->x, 0.5f * h, v, rows, D, err)) ||
        (rc = model_solver_axpby(s, s->x, 1.0f, s->x, 0.5f * h, vp, rows, D, err)))
        return rc;
    *evals += 1;
    return GT_OK;
}

/* The ab2 flow solver: one Heun step from the noise, then the two-step
 * Adams-Bashforth rule for the grid's uneven steps,
 *   x_{k+1} = x_k + h_k ((1 + r / 2) v_k - (r / 2) v_{k-1}),  r = h_k / h_{k-1},
 * one network evaluation a step (steps + 1 in all, against Heun's 2 steps):
 * twice Heun's steps for the same evaluations, with the slope of the step
 * before standing in for a corrector.  The first step is Heun's because
 * there is no slope before it, and the velocity turns fastest near the
 * noise. */
static int integrate_ab2(model_sampler *s, model_sampler_net *n, int rows, int steps,
                         double *evals, gt_error *err)
{
    const int D = n->dim, power = s->cfg.time_power;
    float *cur = s->v1, *prev = s->v2, h_prev = 0.0f;
    int rc;
    for (int k = 0; k < steps; k++) {
        const float t = grid_time(k, steps, power);
        const float h = grid_time(k + 1, steps, power) - t;
        if ((rc = model_solver_eval(s, n, s->x, t, cur, rows, err)))
            return rc;
        *evals += 1;
        if (k == 0) {
            /* Heun; v(x_0, t_0) stays in cur as the slope before step 1 */
            if ((rc = heun_correct(s, n, t, h, cur, prev, rows, evals, err)))
                return rc;
        } else {
            const float r = h / h_prev;
            if ((rc = model_solver_axpby(s, s->x, 1.0f, s->x, h * (1.0f + 0.5f * r), cur, rows,
                                         D, err)) ||
                (rc = model_solver_axpby(s, s->x, 1.0f, s->x, -h * 0.5f * r, prev, rows, D,
                                         err)))
                return rc;
        }
        float *swap = cur;
        cur = prev;
        prev = swap;
        h_prev = h;
    }
    return GT_OK;
}

int model_solver_ode(model_sampler *s, model_sampler_net *n, int rows, int steps,
                     double *evals, gt_error *err)
{
    const int D = n->dim, power = s->cfg.time_power;
    int rc;
    if (s->cfg.solver == MODEL_SOLVER_AB2)
        return integrate_ab2(s, n, rows, steps, evals, err);
    for (int k = 0; k < steps; k++) {
        /* power 1 keeps the float arithmetic of the uniform grid runs were
         * recorded with (migration 0009), so they serve the same bytes */
        const float t = power == 1 ? (float)k * (1.0f / (float)steps) : grid_time(k, steps, power);
        const float dt = power == 1 ? 1.0f / (float)steps : grid_time(k + 1, steps, power) - t;
        if ((rc = model_solver_eval(s, n, s->x, t, s->v1, rows, err)))
            return rc;
        *evals += 1;
        if (s->cfg.solver == MODEL_SOLVER_EULER) {
            if ((rc = model_solver_axpby(s, s->x, 1.0f, s->x, dt, s->v1, rows, D, err)))
                return rc;
            continue;
        }
        /* Heun: predictor, corrector with the average slope. */
        if ((rc = heun_correct(s, n, t, dt, s->v1, s->v2, rows, evals, err)))
            return rc;
    }
    return GT_OK;
}

int model_solver_ddim_step(model_sampler *s, model_sampler_net *n, float t, double ab,
                           double abn, int rows, gt_error *err)
{
    const int D = n->dim;
    int rc;
    if ((rc = model_solver_eval(s, n, s->x, t, s->v1, rows, err)))
        return rc;
    /* x0 = (x - sqrt(1 - ab) eps) / sqrt(ab), clipped;
     * x' = sqrt(abn) x0 + sqrt(1 - abn) eps */
    float a0 = (float)(1.0 / sqrt(ab)), b0 = (float)(-sqrt(1.0 - ab) / sqrt(ab));
    if ((rc = model_solver_axpby(s, s->xp, a0, s->x, b0, s->v1, rows, D, err)) ||
        (rc = clamp(s, s->xp, X0_CLIP, rows, D, err)) ||
        (rc = model_solver_axpby(s, s->x, (float)sqrt(abn), s->xp, (float)sqrt(1.0 - abn),
                                 s->v1, rows, D, err)))
        return rc;
    return GT_OK;
}
