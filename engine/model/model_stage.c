/* model_stage: the stage trainer on top (model_stage.h is the API,
 * model_stage_internal.h the layers below): creation and the device copies
 * of the data, the fixed validation draws, the training loop with its
 * hooks, validation, checkpoints and resume.  Everything an objective does
 * goes through its table (model_obj.h: flow, ddpm, wgan); the plumbing
 * they share is model_stage_base.c. */
#include "model_stage_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gt_clock.h"
#include "gt_le.h"
#include "nn_ckpt.h"

/* Generator streams: the training stream of stage s is s; the fixed
 * validation draws use VAL_STREAM + s under a seed derived from the run seed,
 * so they never depend on how far training has gone. */
#define VAL_STREAM 1000u
#define VAL_SEED_SALT 0x9e3779b97f4a7c15ull

/* A wgan stage checkpoint: "GIANTGA2" | u64 len | generator nn_ckpt | u64
 * len | critic nn_ckpt.  "GIANTGA2": generator G = T + [0 ; z_v] with the
 * stick-breaking head.  "GIANTGAN" was the first form (G = T, no head); its
 * weights mean something else, so such checkpoints are refused, not
 * misread. */
#define GAN_CKPT_MAGIC "GIANTGA2"
#define GAN_CKPT_MAGIC_V1 "GIANTGAN"
/* A flow or ddpm stage trained with train.ema: "GIANTEMA" | u64 len | the
 * averaged weights' nn_ckpt (what a sampler loads) | u64 len | the training
 * nn_ckpt (weights, optimizer, generator: what a resume loads). */
#define EMA_CKPT_MAGIC "GIANTEMA"

void model_stage_destroy(model_stage *s)
{
    if (!s)
        return;
    float **bufs[] = {&s->x_train, &s->c_train, &s->x_val, &s->c_val, &s->x1, &s->x0,
                      &s->xt, &s->pred, &s->dpred, &s->cdata, &s->cond,
                      &s->t, &s->alpha, &s->beta, &s->ones, &s->mones, &s->loss,
                      &s->val_noise, &s->val_t, &s->ctx_train, &s->ctx_val, &s->ctxb,
                      &s->xin, &s->noise_part, &s->flag};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        nn_free(s->b, *bufs[i]);
    nn_free(s->b, s->idx);
    nn_graph_reset(s->b, &s->graph);
    if (s->opt_ready)
        nn_adamw_destroy(&s->opt);
    if (s->ops && s->ops->destroy)
        s->ops->destroy(s);
    nn_trunk_destroy(s->trunk);
    nn_trunk_destroy(s->val_trunk);
    free(s->idx_h);
    free(s->t_h);
    free(s->alpha_h);
    free(s->beta_h);
    free(s->u_h);
    nn_free(s->b, s->valid_train);
    free(s->valid_val_h);
    free(s);
}

static int check_data(const model_stage_data *d, gt_error *err)
{
    if (d->dim < 1 || d->n_cond < 0 || d->n_train < 1 || d->n_val < 1)
        return gt_error_set(err, GT_EINVAL,
                            "stage data needs dim >= 1, n_train >= 1 and n_val >= 1 "
                            "(dim %d, train %d, val %d)",
                            d->dim, d->n_train, d->n_val);
    if (!d->x_train || !d->x_val || (d->n_cond && (!d->c_train || !d->c_val)))
        return gt_error_set(err, GT_EINVAL, "stage data arrays missing");
    if (d->sb_layers < 0 || d->sb_layers == 1 || d->sb_layers - 1 > d->dim ||
        (d->sb_layers && (!d->sb_mean || !d->sb_std)))
        return gt_error_set(err, GT_EINVAL, "stage data: %d stick-breaking layers for %d columns",
                            d->sb_layers, d->dim);
    for (int l = 0; l < d->sb_layers - 1; l++)
        if (!isfinite(d->sb_mean[l]) || !(d->sb_std[l] > 0) || !isfinite(d->sb_std[l]))
            return gt_error_set(err, GT_EINVAL, "stage data: logit column %d has statistics "
                                "mean %g std %g", l, d->sb_mean[l], d->sb_std[l]);
    if (d->n_ctx < 0 || (d->n_ctx && (!d->ctx_train || !d->ctx_val)) || d->rows_per_item < 0 ||
        (!d->valid_train != !d->valid_val))
        return gt_error_set(err, GT_EINVAL, "stage data context or padding arrays inconsistent");
    for (int pass = 0; pass < 2 && d->valid_train; pass++) {
        const int32_t *v = pass ? d->valid_val : d->valid_train;
        int n = pass ? d->n_val : d->n_train;
        for (int i = 0; i < n; i++)
            if (v[2 * i] < 0 || v[2 * i] > v[2 * i + 1] || v[2 * i + 1] > d->dim)
                return gt_error_set(err, GT_EINVAL, "%s row %d: valid columns [%d, %d) outside "
                                    "[0, %d]", pass ? "validation" : "training", i, v[2 * i],
                                    v[2 * i + 1], d->dim);
    }
    size_t nt = (size_t)d->n_train * d->dim, nv = (size_t)d->n_val * d->dim;
    for (size_t i = 0; i < nt; i++)
        if (!isfinite(d->x_train[i]))
            return gt_error_set(err, GT_EINVAL, "training data row %zu is not finite",
                                i / (size_t)d->dim);
    for (size_t i = 0; i < nv; i++)
        if (!isfinite(d->x_val[i]))
            return gt_error_set(err, GT_EINVAL, "validation data row %zu is not finite",
                                i / (size_t)d->dim);
    /* the conditions and context too: the training trunk checks no input */
    static const char *what[4] = {"training conditions", "validation conditions",
                                  "training context", "validation context"};
    const float *arr[4] = {d->c_train, d->c_val, d->ctx_train, d->ctx_val};
    size_t cols[4] = {(size_t)d->n_cond, (size_t)d->n_cond, (size_t)d->n_ctx, (size_t)d->n_ctx};
    size_t rows[4] = {(size_t)d->n_train, (size_t)d->n_val, (size_t)d->n_train,
                      (size_t)d->n_val};
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; cols[k] && i < rows[k] * cols[k]; i++)
            if (!isfinite(arr[k][i]))
                return gt_error_set(err, GT_EINVAL, "%s row %zu is not finite", what[k],
                                    i / cols[k]);
    return GT_OK;
}

/* The generator's optimizer: the run's AdamW settings over this stage's
 * steps; a wgan generator takes the betas of its stage's wgan section
 * (the wgan objective derives the critic's optimizer from this). */
static nn_adamw_config stage_adamw_config(const model_config *cfg, long long total,
                                          model_objective objective,
                                          const model_wgan_config *wg)
{
    nn_adamw_config oc;
    nn_adamw_config_default(&oc);
    oc.lr = (float)cfg->lr;
    oc.beta1 = (float)cfg->beta1;
    oc.beta2 = (float)cfg->beta2;
    oc.eps = (float)cfg->adam_eps;
    oc.weight_decay = (float)cfg->weight_decay;
    oc.clip_norm = (float)cfg->grad_clip;
    oc.warmup_steps = cfg->warmup_steps;
    oc.total_steps = total;
    oc.min_lr_ratio = (float)cfg->min_lr_ratio;
    if (objective == MODEL_OBJ_WGAN) {
        oc.beta1 = (float)wg->beta1;
        oc.beta2 = (float)wg->beta2;
    }
    return oc;
}

/* Everything model_stage_create makes, into a zeroed s; on failure the
 * caller destroys the partial stage. */
static int stage_build(model_stage *s, nn_backend *b, const model_config *cfg, int stage,
                       const model_stage_data *data, dist_comm *comm, gt_error *err)
{
    s->b = b;
    s->comm = comm;
    s->gbatch = cfg->batch;
    s->lo = 0;
    s->cfg = *cfg;
    s->stage = stage;
    s->objective = stage == 1 ? cfg->stage1.objective : cfg->stage2.objective;
    s->ops = model_obj_of(s->objective);
    s->dim = data->dim;
    s->n_cond = data->n_cond;
    s->n_train = data->n_train;
    s->n_val = data->n_val;
    s->batch = cfg->batch;
    if (dist_size(comm) > 1)
        GT_TRY(dist_shard(cfg->batch, dist_rank(comm), dist_size(comm), &s->lo, &s->batch, err));
    s->n_ctx = data->n_ctx;
    {
        /* val_size counts showers; an autoregressive shower is L rows */
        int per = data->rows_per_item > 0 ? data->rows_per_item : 1;
        long long want = (long long)cfg->val_size * per;
        s->n_valset = want < data->n_val ? (int)want : data->n_val;
    }
    s->total = stage == 1 ? cfg->steps1 : cfg->steps2;
    s->rng = nn_rng_make(cfg->seed, (uint64_t)stage);

    nn_trunk_config tc;
    model_stage_trunk_config_ctx(cfg, stage, s->dim, s->n_cond, s->n_ctx, &tc);
    nn_trunk_config vc = tc;
    vc.precision = NN_F32;
    const int B = s->batch, D = s->dim, C = s->n_cond;
    GT_TRY(nn_trunk_create(b, &tc, &s->trunk, err));
    GT_TRY(nn_trunk_init(s->trunk, cfg->seed * 2 + (uint64_t)stage, 0.1f, err));
    GT_TRY(nn_trunk_plan(s->trunk, B, err));
    /* the training trunk's inputs are the validated data, the generator's
     * noise and times: its per-forward finiteness read-back would only
     * stall the device (and keep a step out of a graph); divergence still
     * shows, as a non-finite gradient norm */
    nn_trunk_set_input_check(s->trunk, 0);
    s->graphs_on = 1;
    GT_TRY(nn_trunk_create(b, &vc, &s->val_trunk, err));
    GT_TRY(nn_trunk_plan(s->val_trunk, B, err));

    const model_wgan_config *wg = stage == 1 ? &cfg->stage1.wgan : &cfg->stage2.wgan;
    nn_adamw_config oc = stage_adamw_config(cfg, s->total, s->objective, wg);
    GT_TRY(nn_adamw_create(&s->opt, nn_trunk_params(s->trunk), &oc, err));
    s->opt_ready = 1;
    if (s->ops->create)
        GT_TRY(s->ops->create(s, data, &oc, err));
    if (dist_size(comm) > 1) {
        /* the ranks' gradients are summed: the optimizers take the mean */
        s->opt.grad_scale = 1.0f / (float)dist_size(comm);
        if (s->copt_ready)
            s->copt.grad_scale = s->opt.grad_scale;
        GT_TRY(model_stage_alloc(s, &s->noise_part, (size_t)B * D + 4, err));
        GT_TRY(model_stage_alloc(s, &s->flag, 16, err));
    }

    size_t ntr = (size_t)s->n_train, nva = (size_t)s->n_val, V = (size_t)s->n_valset;
    int rc;
    if ((rc = model_stage_alloc(s, &s->x_train, ntr * D, err)) ||
        (rc = model_stage_alloc(s, &s->c_train, ntr * (C ? C : 1), err)) ||
        (rc = model_stage_alloc(s, &s->x_val, nva * D, err)) ||
        (rc = model_stage_alloc(s, &s->c_val, nva * (C ? C : 1), err)) ||
        (rc = nn_alloc(b, (size_t)B * sizeof(int32_t), (void **)&s->idx, err)) ||
        (rc = model_stage_alloc(s, &s->x1, (size_t)B * D, err)) ||
        (rc = model_stage_alloc(s, &s->x0, (size_t)B * D, err)) ||
        (rc = model_stage_alloc(s, &s->xt, (size_t)B * D, err)) ||
        (rc = model_stage_alloc(s, &s->pred, (size_t)B * D, err)) ||
        (rc = model_stage_alloc(s, &s->dpred, (size_t)B * D, err)) ||
        (rc = model_stage_alloc(s, &s->cdata, (size_t)B * (C ? C : 1), err)) ||
        (rc = model_stage_alloc(s, &s->cond, (size_t)B * (1 + C), err)) ||
        (rc = model_stage_alloc(s, &s->t, B, err)) ||
        (rc = model_stage_alloc(s, &s->alpha, B, err)) ||
        (rc = model_stage_alloc(s, &s->beta, B, err)) ||
        (rc = model_stage_alloc(s, &s->ones, B, err)) ||
        (rc = model_stage_alloc(s, &s->mones, B, err)) ||
        (rc = model_stage_alloc(s, &s->loss, 1, err)) ||
        (rc = model_stage_alloc(s, &s->val_noise, V * D, err)) ||
        (rc = model_stage_alloc(s, &s->val_t, V, err)))
        return rc;
    if (s->n_ctx) {
        size_t P = (size_t)s->n_ctx;
        GT_TRY(model_stage_alloc(s, &s->ctx_train, ntr * P, err));
        GT_TRY(model_stage_alloc(s, &s->ctx_val, nva * P, err));
        GT_TRY(model_stage_alloc(s, &s->ctxb, (size_t)B * P, err));
        GT_TRY(model_stage_alloc(s, &s->xin, (size_t)B * (D + P), err));
        GT_TRY(nn_copy_h2d(b, s->ctx_train, data->ctx_train, ntr * P * sizeof(float), err));
        GT_TRY(nn_copy_h2d(b, s->ctx_val, data->ctx_val, nva * P * sizeof(float), err));
    }
    if (data->valid_train) {
        GT_TRY(nn_alloc(b, ntr * 2 * sizeof(int32_t), (void **)&s->valid_train, err));
        GT_TRY(nn_copy_h2d(b, s->valid_train, data->valid_train, ntr * 2 * sizeof(int32_t),
                           err));
        s->valid_val_h = malloc(nva * 2 * sizeof(int32_t));
        if (!s->valid_val_h)
            return gt_error_set(err, GT_ENOMEM, "out of memory");
        memcpy(s->valid_val_h, data->valid_val, nva * 2 * sizeof(int32_t));
    }
    /* host draws cover the whole batch (G), device buffers the shard (B) */
    const int G = s->gbatch;
    s->idx_h = malloc((size_t)G * sizeof *s->idx_h);
    s->t_h = malloc((size_t)(G > (int)V ? G : (int)V) * sizeof(float));
    s->alpha_h = malloc((size_t)G * sizeof(float));
    s->beta_h = malloc((size_t)G * sizeof(float));
    s->u_h = malloc((size_t)G * sizeof(float));
    if (!s->idx_h || !s->t_h || !s->alpha_h || !s->beta_h || !s->u_h)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    GT_TRY(nn_copy_h2d(b, s->x_train, data->x_train, ntr * D * sizeof(float), err));
    GT_TRY(nn_copy_h2d(b, s->x_val, data->x_val, nva * D * sizeof(float), err));
    if (C) {
        GT_TRY(nn_copy_h2d(b, s->c_train, data->c_train, ntr * C * sizeof(float), err));
        GT_TRY(nn_copy_h2d(b, s->c_val, data->c_val, nva * C * sizeof(float), err));
    }
    for (int i = 0; i < B; i++) {
        s->alpha_h[i] = 1.0f;
        s->beta_h[i] = -1.0f;
    }
    GT_TRY(nn_copy_h2d(b, s->ones, s->alpha_h, (size_t)B * sizeof(float), err));
    GT_TRY(nn_copy_h2d(b, s->mones, s->beta_h, (size_t)B * sizeof(float), err));

    /* The fixed validation draws: noise and times, once. */
    nn_rng vr = nn_rng_make(cfg->seed ^ VAL_SEED_SALT, VAL_STREAM + (uint64_t)stage);
    uint64_t off = nn_rng_take(&vr, V * D);
    GT_TRY(nn_rand_fill(b, s->val_noise, V * D, NN_DIST_NORMAL, 0.0f, 1.0f, vr.seed, vr.stream,
                        off, err));
    if (s->valid_val_h)
        GT_TRY(model_stage_zero_padding(s, s->val_noise, s->valid_val_h, NULL, (int)V, err));
    model_stage_uniforms(&vr, s->t_h, (int)V);
    return nn_copy_h2d(b, s->val_t, s->t_h, V * sizeof(float), err);
}

int model_stage_create(nn_backend *b, const model_config *cfg, int stage,
                       const model_stage_data *data, model_stage **out, gt_error *err)
{
    return model_stage_create_dist(b, cfg, stage, data, NULL, out, err);
}

int model_stage_create_dist(nn_backend *b, const model_config *cfg, int stage,
                            const model_stage_data *data, dist_comm *comm, model_stage **out,
                            gt_error *err)
{
    *out = NULL;
    if (stage != 1 && stage != 2)
        return gt_error_set(err, GT_EINVAL, "stage must be 1 or 2, not %d", stage);
    GT_TRY(check_data(data, err));
    model_stage *s = calloc(1, sizeof *s);
    if (!s)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    int rc = stage_build(s, b, cfg, stage, data, comm, err);
    if (rc) {
        model_stage_destroy(s);
        return rc;
    }
    *out = s;
    return GT_OK;
}

long long model_stage_step(const model_stage *s) { return s->opt.step; }
nn_trunk *model_stage_trunk(model_stage *s) { return s->trunk; }

/* ------------------------------------------------------------------------ */
/* checkpoints                                                              */
/* ------------------------------------------------------------------------ */

/* Two nn_ckpt buffers as one: magic | u64 len | first | u64 len | second. */
static int ckpt_pair(const char *magic, void *first, size_t fl, void *second, size_t sl,
                     void **out, size_t *out_len, gt_error *err)
{
    size_t n = 8 + 8 + fl + 8 + sl;
    uint8_t *buf = malloc(n);
    if (!buf) {
        free(first);
        free(second);
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    }
    memcpy(buf, magic, 8);
    gt_le_put_u64(buf + 8, fl);
    memcpy(buf + 16, first, fl);
    gt_le_put_u64(buf + 16 + fl, sl);
    memcpy(buf + 24 + fl, second, sl);
    free(first);
    free(second);
    *out = buf;
    *out_len = n;
    return GT_OK;
}

/* The EMA weights as an nn_ckpt of the trunk's layout (no optimizer, no
 * generator): the fp32 twin holds them for the moment. */
static int ema_ckpt_save(model_stage *s, void **out, size_t *out_len, gt_error *err)
{
    nn_params *tp = nn_trunk_params(s->trunk), *vp = nn_trunk_params(s->val_trunk);
    GT_TRY(nn_copy_d2d(s->b, vp->value, s->ema, tp->count * sizeof(float), err));
    return nn_ckpt_save(vp, NULL, NULL, out, out_len, err);
}

/* A flow or ddpm stage: one nn_ckpt, or with train.ema the container of
 * the averaged weights (first: what a sampler loads) and the training
 * state (EMA_CKPT_MAGIC).  A wgan stage: the container of its generator and
 * critic (GAN_CKPT_MAGIC). */
static int stage_ckpt_save(model_stage *s, void **out, size_t *out_len, gt_error *err)
{
    if (s->ema) {
        void *e = NULL, *t = NULL;
        size_t el = 0, tl = 0;
        int rc = ema_ckpt_save(s, &e, &el, err);
        if (rc || (rc = nn_ckpt_save(nn_trunk_params(s->trunk), &s->opt, &s->rng, &t, &tl,
                                     err))) {
            free(e);
            return rc;
        }
        return ckpt_pair(EMA_CKPT_MAGIC, e, el, t, tl, out, out_len, err);
    }
    if (!s->critic)
        return nn_ckpt_save(nn_trunk_params(s->trunk), &s->opt, &s->rng, out, out_len, err);
    void *g = NULL, *c = NULL;
    size_t gl = 0, cl = 0;
    int rc = nn_ckpt_save(nn_trunk_params(s->trunk), &s->opt, &s->rng, &g, &gl, err);
    if (rc || (rc = nn_ckpt_save(model_critic_params(s->critic), &s->copt, NULL, &c, &cl, err))) {
        free(g);
        return rc;
    }
    return ckpt_pair(GAN_CKPT_MAGIC, g, gl, c, cl, out, out_len, err);
}

/* The two parts of a container of ckpt_pair; 0 when buf is not one of
 * that magic. */
static int ckpt_unpair(const void *buf, size_t len, const char *magic, const char *what,
                       const void **first, size_t *first_len, const void **second,
                       size_t *second_len, int *is_pair, gt_error *err)
{
    const uint8_t *p = buf;
    *is_pair = 0;
    if (!buf || len < 8 || memcmp(p, magic, 8) != 0)
        return GT_OK;
    *is_pair = 1;
    if (len < 16)
        return gt_error_set(err, GT_EFORMAT, "%s checkpoint is truncated", what);
    uint64_t fl = gt_le_get_u64(p + 8);
    if (fl > len - 16 || len - 16 - fl < 8)
        return gt_error_set(err, GT_EFORMAT, "%s checkpoint is truncated", what);
    uint64_t sl = gt_le_get_u64(p + 16 + fl);
    if (sl != len - 24 - fl)
        return gt_error_set(err, GT_EFORMAT, "%s checkpoint has a bad second length", what);
    *first = p + 16;
    *first_len = (size_t)fl;
    *second = p + 24 + fl;
    *second_len = (size_t)sl;
    return GT_OK;
}

/* The parts of a stage checkpoint: gen, the trunk's weights a sampler
 * loads (averaged with train.ema); critic (wgan) or NULL; train (train.ema:
 * the training state) or NULL. */
static int ckpt_split(const void *buf, size_t len, const void **gen, size_t *gen_len,
                      const void **critic, size_t *critic_len, const void **train,
                      size_t *train_len, gt_error *err)
{
    *critic = *train = NULL;
    *critic_len = *train_len = 0;
    *gen = buf;
    *gen_len = len;
    if (buf && len >= 8 && memcmp(buf, GAN_CKPT_MAGIC_V1, 8) == 0)
        return gt_error_set(err, GT_EFORMAT, "a wgan checkpoint of the first generator form "
                            "(no noise skip, no stick-breaking head): retrain the run");
    int pair = 0;
    GT_TRY(ckpt_unpair(buf, len, GAN_CKPT_MAGIC, "wgan", gen, gen_len, critic, critic_len,
                       &pair, err));
    if (!pair)
        GT_TRY(ckpt_unpair(buf, len, EMA_CKPT_MAGIC, "averaged-weights", gen, gen_len, train,
                           train_len, &pair, err));
    return GT_OK;
}

int model_stage_ckpt_parts(const void *buf, size_t len, const void **gen, size_t *gen_len,
                           const void **critic, size_t *critic_len, gt_error *err)
{
    const void *train;
    size_t train_len;
    return ckpt_split(buf, len, gen, gen_len, critic, critic_len, &train, &train_len, err);
}

int model_stage_resume(model_stage *s, const void *buf, size_t len, gt_error *err)
{
    nn_rng r = s->rng;
    const void *g = buf, *c = NULL, *t = NULL;
    size_t gl = len, cl = 0, tl = 0;
    int rc = ckpt_split(buf, len, &g, &gl, &c, &cl, &t, &tl, err);
    if (!rc && s->critic && !c)
        rc = gt_error_set(err, GT_EFORMAT, "not a wgan checkpoint (no critic)");
    if (!rc && !s->critic && c)
        rc = gt_error_set(err, GT_EFORMAT, "a wgan checkpoint, but this stage is not wgan");
    if (!rc && !s->ema != !t)
        rc = gt_error_set(err, GT_EFORMAT, "a checkpoint %s averaged weights, but the run has "
                          "train.ema %g", t ? "with" : "without", s->cfg.ema);
    if (!rc && t) {
        /* the training state into the trunk, the averaged weights through
         * the fp32 twin into the average */
        nn_params *tp = nn_trunk_params(s->trunk), *vp = nn_trunk_params(s->val_trunk);
        rc = nn_ckpt_load(tp, &s->opt, &r, t, tl, err);
        if (!rc)
            rc = nn_ckpt_load(vp, NULL, NULL, g, gl, err);
        if (!rc)
            rc = nn_copy_d2d(s->b, s->ema, vp->value, tp->count * sizeof(float), err);
    } else if (!rc) {
        rc = nn_ckpt_load(nn_trunk_params(s->trunk), &s->opt, &r, g, gl, err);
    }
    if (!rc && s->critic)
        rc = nn_ckpt_load(model_critic_params(s->critic), &s->copt, NULL, c, cl, err);
    if (rc)
        return gt_error_wrap(err, "resuming stage %d", s->stage);
    if (r.stream != s->rng.stream || r.seed != s->rng.seed)
        return gt_error_set(err, GT_EFORMAT,
                            "checkpoint belongs to another stage or seed (seed %llu stream %llu)",
                            (unsigned long long)r.seed, (unsigned long long)r.stream);
    s->rng = r;
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* validation and the training loop                                         */
/* ------------------------------------------------------------------------ */

int model_stage_validate(model_stage *s, float *val_loss, gt_error *err)
{
    /* the fp32 twin gets the master weights (or their average, which the
     * checkpoints serve), so the value is the same function of the weights
     * in every precision */
    nn_params *tp = nn_trunk_params(s->trunk), *vp = nn_trunk_params(s->val_trunk);
    GT_TRY(nn_copy_d2d(s->b, vp->value, s->ema ? s->ema : tp->value,
                       tp->count * sizeof(float), err));
    return s->ops->validate(s, val_loss, err);
}

/* Data parallel: the sum over ranks of one float v of each rank (the
 * should_stop votes; the reported loss), through the stage's flag buffer. */
static int allreduce_scalar(model_stage *s, float *v, gt_error *err)
{
    GT_TRY(nn_copy_h2d(s->b, s->flag, v, sizeof *v, err));
    GT_TRY(dist_allreduce_sum(s->comm, s->flag, 1, err));
    return nn_copy_d2h(s->b, v, s->flag, sizeof *v, err);
}

/* Broadcasts n host bytes from rank 0 through backend memory. */
static int broadcast_host(model_stage *s, void *host, size_t n, gt_error *err)
{
    void *d = NULL;
    int rc = nn_alloc(s->b, n, &d, err);
    if (!rc)
        rc = nn_copy_h2d(s->b, d, host, n, err);
    if (!rc)
        rc = dist_broadcast(s->comm, d, n, 0, err);
    if (!rc)
        rc = nn_copy_d2h(s->b, host, d, n, err);
    nn_free(s->b, d);
    return rc;
}

static int sync_params(model_stage *s, nn_params *p, nn_adamw_opt *o, gt_error *err)
{
    size_t bytes = p->count * sizeof(float);
    GT_TRY(dist_broadcast(s->comm, p->value, bytes, 0, err));
    GT_TRY(dist_broadcast(s->comm, o->m, bytes, 0, err));
    GT_TRY(dist_broadcast(s->comm, o->v, bytes, 0, err));
    return p->value_bf16 ? nn_params_sync_bf16(p, err) : GT_OK;
}

int model_stage_sync(model_stage *s, gt_error *err)
{
    if (dist_size(s->comm) == 1)
        return GT_OK;
    int rc = sync_params(s, nn_trunk_params(s->trunk), &s->opt, err);
    if (!rc && s->critic)
        rc = sync_params(s, model_critic_params(s->critic), &s->copt, err);
    /* the counters: optimizer steps and the generator's next block */
    long long st[3] = {s->opt.step, s->critic ? s->copt.step : 0, (long long)s->rng.offset};
    if (!rc)
        rc = broadcast_host(s, st, sizeof st, err);
    if (rc) {
        dist_abort(s->comm);
        return gt_error_wrap(err, "stage %d: taking rank 0's state", s->stage);
    }
    s->opt.step = st[0];
    if (s->critic)
        s->copt.step = st[1];
    s->rng.offset = (uint64_t)st[2];
    return GT_OK;
}

/* train.ema: avg = d avg + (1 - d) w after update n (1-based), with
 * d = min(ema, (1 + n) / (10 + n)) so that the early average follows the
 * weights instead of their random start.  A function of n alone: a resumed
 * run continues the same sequence, bit for bit. */
static int ema_update(model_stage *s, gt_error *err)
{
    double n = (double)s->opt.step, warm = (1.0 + n) / (10.0 + n);
    float coef[2];
    coef[0] = (float)(s->cfg.ema < warm ? s->cfg.ema : warm);
    coef[1] = 1.0f - coef[0];
    nn_params *tp = nn_trunk_params(s->trunk);
    GT_TRY(nn_copy_h2d(s->b, s->ema_coef, coef, sizeof coef, err));
    nn_tensor avg = nn_f32(s->ema, 1, (int)tp->count);
    return nn_axpby_rows(s->b, avg, s->ema_coef, avg, s->ema_coef + 1,
                         nn_f32(tp->value, 1, (int)tp->count), err);
}

static int stage_train(model_stage *s, const model_stage_hooks *h, gt_error *err);

int model_stage_train(model_stage *s, const model_stage_hooks *h, gt_error *err)
{
    int rc = stage_train(s, h, err);
    /* a rank that stops for any reason but the group's agreed stop (which
     * every rank sees at the same step) must not leave the others waiting */
    if (rc && dist_size(s->comm) > 1 && !(rc == GT_ECANCELLED && s->group_stopped))
        dist_abort(s->comm);
    return rc;
}

static int stage_train(model_stage *s, const model_stage_hooks *h, gt_error *err)
{
    model_stage_hooks none = {0};
    if (!h)
        h = &none;
    const int ranks = dist_size(s->comm), rank0 = dist_rank(s->comm) == 0;
    double t_last = gt_clock_s();
    long long step_last = s->opt.step;
    while (s->opt.step < s->total) {
        float stop = h->should_stop && h->should_stop(h->user) ? 1.0f : 0.0f;
        if (ranks > 1) {
            /* every rank stops at the same step when any one asks */
            GT_TRY(allreduce_scalar(s, &stop, err));
            s->group_stopped = stop > 0.0f;
        }
        if (stop > 0.0f)
            return gt_error_set(err, GT_ECANCELLED, "stopped at stage %d step %lld", s->stage,
                                s->opt.step);
        float lr = nn_adamw_lr(&s->opt.cfg, s->opt.step);
        float gnorm = 0.0f;
        int rc = s->ops->step(s, &gnorm, err);
        if (!rc && s->ema)
            rc = ema_update(s, err);
        if (rc)
            return gt_error_wrap(err, "stage %d step %lld", s->stage, s->opt.step + 1);
        long long step = s->opt.step;
        int last = step == s->total;
        /* a report step is the same on every rank (the loss all-reduce) */
        if ((h->on_step || ranks > 1) && (step % s->cfg.log_every == 0 || last)) {
            model_step_report r;
            memset(&r, 0, sizeof r);
            r.stage = s->stage;
            r.step = step;
            r.total = s->total;
            r.grad_norm = gnorm;
            r.lr = lr;
            if ((rc = nn_copy_d2h(s->b, &r.loss, s->loss, sizeof r.loss, err)))
                return rc;
            if (ranks > 1) {
                /* the mean of the shards' losses: the whole batch's loss */
                if ((rc = allreduce_scalar(s, &r.loss, err)))
                    return rc;
                r.loss *= 1.0f / (float)ranks;
            }
            double t = gt_clock_s();
            r.samples_per_s = (double)(step - step_last) * s->gbatch / (t - t_last + 1e-12);
            t_last = t;
            step_last = step;
            nn_router_stats rs;
            if (nn_trunk_get_config(s->trunk)->kind == NN_TRUNK_ROUTED &&
                nn_trunk_router_stats(s->trunk, &rs, NULL) == GT_OK) {
                r.balance_loss = rs.balance_loss;
                r.entropy_loss = rs.entropy_loss;
                r.n_experts = rs.n_experts;
                memcpy(r.load, rs.load, sizeof r.load);
            }
            if (h->on_step && (rc = h->on_step(h->user, &r)))
                return gt_error_set(err, GT_ECANCELLED, "stopped by the step hook");
        }
        /* rank 0 alone validates and checkpoints: the weights are the same
         * bits on every rank */
        int do_ckpt = rank0 && (step % s->cfg.ckpt_every == 0 || last);
        int do_val = rank0 && (step % s->cfg.val_every == 0 || do_ckpt);
        float val = NAN;
        if (do_val) {
            if ((rc = model_stage_validate(s, &val, err)))
                return gt_error_wrap(err, "stage %d validation at step %lld", s->stage, step);
            if (h->on_validation && (rc = h->on_validation(h->user, s->stage, step, val)))
                return gt_error_set(err, GT_ECANCELLED, "stopped by the validation hook");
        }
        if (do_ckpt && h->on_checkpoint) {
            void *buf = NULL;
            size_t len = 0;
            if ((rc = stage_ckpt_save(s, &buf, &len, err)))
                return rc;
            rc = h->on_checkpoint(h->user, s->stage, step, val, buf, len);
            free(buf);
            if (rc)
                return gt_error_set(err, GT_ECANCELLED, "stopped by the checkpoint hook");
        }
        if (do_val)
            step_last = s->opt.step, t_last = gt_clock_s(); /* keep validation out of samples/s */
    }
    return GT_OK;
}
