/* nn_adamw.c: the optimizer loop over the parameter views. */
#include "nn_adamw.h"

#include <math.h>
#include <string.h>

void nn_adamw_config_default(nn_adamw_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->lr = 1e-3f;
    cfg->beta1 = 0.9f;
    cfg->beta2 = 0.999f;
    cfg->eps = 1e-8f;
    cfg->weight_decay = 0.01f;
    cfg->clip_norm = 1.0f;
    cfg->warmup_steps = 0;
    cfg->total_steps = 0;
    cfg->min_lr_ratio = 0.0f;
}

int nn_adamw_config_check(const nn_adamw_config *c, gt_error *err)
{
    if (!c)
        return gt_error_set(err, GT_EINVAL, "adamw: NULL config");
    if (!(c->lr > 0.0f) || !isfinite(c->lr))
        return gt_error_set(err, GT_EINVAL, "adamw: lr must be positive, got %g", c->lr);
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return gt_error_set(err, GT_EINVAL, "adamw: betas must be in [0, 1), got %g, %g",
                            c->beta1, c->beta2);
    if (!(c->eps > 0.0f) || !isfinite(c->eps))
        return gt_error_set(err, GT_EINVAL, "adamw: eps must be positive, got %g", c->eps);
    if (!(c->weight_decay >= 0.0f) || !isfinite(c->weight_decay))
        return gt_error_set(err, GT_EINVAL, "adamw: weight_decay must be >= 0, got %g",
                            c->weight_decay);
    if (!isfinite(c->clip_norm))
        return gt_error_set(err, GT_EINVAL, "adamw: clip_norm is not finite");
    if (c->warmup_steps < 0)
        return gt_error_set(err, GT_EINVAL, "adamw: warmup_steps < 0");
    if (!(c->min_lr_ratio >= 0.0f && c->min_lr_ratio <= 1.0f))
        return gt_error_set(err, GT_EINVAL, "adamw: min_lr_ratio must be in [0, 1], got %g",
                            c->min_lr_ratio);
    return GT_OK;
}

int nn_adamw_create(nn_adamw_opt *opt, nn_params *p, const nn_adamw_config *cfg, gt_error *err)
{
    int rc;
    if (!opt || !p || !p->value)
        return gt_error_set(err, GT_EINVAL, "adamw: parameters not allocated");
    memset(opt, 0, sizeof *opt);
    if ((rc = nn_adamw_config_check(cfg, err)))
        return rc;
    opt->cfg = *cfg;
    opt->p = p;
    size_t bytes = p->count * sizeof(float);
    void *m = NULL, *v = NULL, *s = NULL;
    if ((rc = nn_alloc(p->b, bytes, &m, err)) || (rc = nn_alloc(p->b, bytes, &v, err)) ||
        (rc = nn_alloc(p->b, 128, &s, err)) || (rc = nn_memset(p->b, m, 0, bytes, err)) ||
        (rc = nn_memset(p->b, v, 0, bytes, err))) {
        nn_free(p->b, m);
        nn_free(p->b, v);
        nn_free(p->b, s);
        memset(opt, 0, sizeof *opt);
        return rc;
    }
    opt->m = m;
    opt->v = v;
    opt->scratch = s;
    /* scratch: the sum of squares in its first 64 bytes, the two sets of
     * hyper-parameters in the next 64 */
    _Static_assert(2 * sizeof(nn_adamw_hp) <= 64, "adamw: hyper-parameters outgrew scratch");
    opt->hp = (nn_adamw_hp *)((char *)s + 64);
    opt->grad_scale = 1.0f;
    return GT_OK;
}

void nn_adamw_destroy(nn_adamw_opt *opt)
{
    if (!opt || !opt->p)
        return;
    nn_free(opt->p->b, opt->m);
    nn_free(opt->p->b, opt->v);
    nn_free(opt->p->b, opt->scratch);
    memset(opt, 0, sizeof *opt);
}

float nn_adamw_lr(const nn_adamw_config *c, long long step)
{
    double lr = c->lr;
    long long t = step + 1;
    if (c->warmup_steps > 0 && t <= c->warmup_steps)
        return (float)(lr * (double)t / (double)c->warmup_steps);
    if (c->total_steps <= 0 || c->total_steps <= c->warmup_steps)
        return (float)lr;
    double prog = (double)(t - c->warmup_steps) / (double)(c->total_steps - c->warmup_steps);
    if (prog > 1.0)
        prog = 1.0;
    double lo = lr * c->min_lr_ratio;
    return (float)(lo + (lr - lo) * 0.5 * (1.0 + cos(M_PI * prog)));
}

/* The norm of grad_scale * grad from the raw gradient's sum of squares, as
 * nn_adamw_hp_clip computes it where the update runs. */
static float scaled_norm(const nn_adamw_opt *opt, float ss)
{
    float norm = sqrtf(ss);
    if (opt->grad_scale != 1.0f)
        norm *= opt->grad_scale;
    return norm;
}

int nn_adamw_grad_norm(nn_adamw_opt *opt, float *norm, gt_error *err)
{
    int rc;
    float ss = 0.0f;
    nn_params *p = opt->p;
    if ((rc = nn_sumsq(p->b, opt->scratch, p->grad, p->count, err)) ||
        (rc = nn_copy_d2h(p->b, &ss, opt->scratch, sizeof ss, err)))
        return rc;
    *norm = scaled_norm(opt, ss);
    return GT_OK;
}

int nn_adamw_prepare(nn_adamw_opt *opt, gt_error *err)
{
    if (!opt || !opt->p)
        return gt_error_set(err, GT_EINVAL, "adamw: not created");
    const nn_adamw_config *c = &opt->cfg;
    float lr = nn_adamw_lr(c, opt->step);
    long long t = opt->step + 1;
    /* grad_scale is the data-parallel mean's factor; the clipping factor is
     * folded in where the update runs (nn_adamw_hp_clip) */
    nn_adamw_hp hp[2];
    hp[0] = nn_adamw_hp_make(lr, c->beta1, c->beta2, c->eps, c->weight_decay, t,
                             opt->grad_scale);
    hp[1] = nn_adamw_hp_make(lr, c->beta1, c->beta2, c->eps, 0.0f, t, opt->grad_scale);
    for (int k = 0; k < 2; k++) {
        hp[k].clip_norm = c->clip_norm > 0.0f ? c->clip_norm : 0.0f;
        if (!isfinite(hp[k].step_size) || !isfinite(hp[k].grad_scale) ||
            !isfinite(hp[k].decay) || !isfinite(hp[k].inv_sqrt_bc2))
            return gt_error_set(err, GT_EINVAL,
                                "adamw: non-finite hyper-parameters at step %lld", opt->step);
    }
    return nn_copy_h2d(opt->p->b, opt->hp, hp, sizeof hp, err);
}

int nn_adamw_launch(nn_adamw_opt *opt, gt_error *err)
{
    if (!opt || !opt->p)
        return gt_error_set(err, GT_EINVAL, "adamw: not created");
    nn_params *p = opt->p;
    GT_TRY(nn_sumsq(p->b, opt->scratch, p->grad, p->count, err));
    /* Runs of views with the same decay flag go in one call. */
    int i = 0;
    while (i < p->n_views) {
        int j = i + 1;
        while (j < p->n_views && p->views[j].decay == p->views[i].decay)
            j++;
        size_t off = p->views[i].offset;
        size_t end = p->views[j - 1].offset + (size_t)p->views[j - 1].rows * p->views[j - 1].cols;
        GT_TRY(nn_adamw(p->b, p->value + off, p->value_bf16 ? p->value_bf16 + off : NULL,
                        p->grad + off, opt->m + off, opt->v + off, end - off,
                        opt->hp + (p->views[i].decay ? 0 : 1), opt->scratch, err));
        i = j;
    }
    return GT_OK;
}

int nn_adamw_finish(nn_adamw_opt *opt, float *norm_out, gt_error *err)
{
    if (!opt || !opt->p)
        return gt_error_set(err, GT_EINVAL, "adamw: not created");
    float ss = 0.0f;
    GT_TRY(nn_copy_d2h(opt->p->b, &ss, opt->scratch, sizeof ss, err));
    float norm = scaled_norm(opt, ss);
    if (norm_out)
        *norm_out = norm;
    if (!isfinite(norm))
        return gt_error_set(err, GT_EINVAL,
                            "adamw: gradient norm is not finite (%g) at step %lld; "
                            "parameters left unchanged",
                            norm, opt->step);
    opt->step++;
    return GT_OK;
}

int nn_adamw_step(nn_adamw_opt *opt, float *norm_out, gt_error *err)
{
    GT_TRY(nn_adamw_prepare(opt, err));
    GT_TRY(nn_adamw_launch(opt, err));
    return nn_adamw_finish(opt, norm_out, err);
}
