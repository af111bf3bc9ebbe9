#include "model_stage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model_critic.h"
#include "model_head.h"
#include "nn_ckpt.h"
#include "nn_rng.h"

/* Generator streams: the training stream of stage s is s; the fixed
 * validation draws use VAL_STREAM + s under a seed derived from the run seed,
 * so they never depend on how far training has gone. */
#define VAL_STREAM 1000u
#define VAL_SEED_SALT 0x9e3779b97f4a7c15ull

struct model_stage {
    nn_backend *b;
    model_config cfg;
    int stage;
    model_objective objective;
    int dim, n_cond, n_train, n_val, batch, n_valset;
    int n_ctx;           /* extra un-noised inputs (autoregressive context) */
    int32_t *valid_train_h, *valid_val_h; /* host copies, NULL = no padding */
    long long total;

    nn_trunk *trunk;     /* trained, in the run's precision          */
    nn_trunk *val_trunk; /* fp32 twin for validation                */
    nn_adamw_opt opt;
    int opt_ready;
    nn_rng rng;

    /* backend memory */
    float *x_train, *c_train, *x_val, *c_val;
    int32_t *idx;
    float *x1, *x0, *xt, *target, *pred, *dpred, *cdata, *cond;
    float *t, *alpha, *beta, *ones, *mones, *loss;
    float *val_noise, *val_t;
    float *ctx_train, *ctx_val, *ctxb, *xin; /* n_ctx > 0 only */
    /* wgan only */
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
    /* host scratch */
    int32_t *idx_h;
    float *t_h, *alpha_h, *beta_h, *u_h;
};

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

void model_stage_trunk_config(const model_config *cfg, int stage, int dim, int n_cond,
                              nn_trunk_config *out)
{
    model_stage_trunk_config_ctx(cfg, stage, dim, n_cond, 0, out);
}

void model_stage_trunk_config_ctx(const model_config *cfg, int stage, int dim, int n_cond,
                                  int n_ctx, nn_trunk_config *out)
{
    const model_trunk_config *t = stage == 1 ? &cfg->stage1.trunk : &cfg->stage2.trunk;
    nn_trunk_config_default(out);
    out->kind = t->kind == MODEL_TRUNK_ROUTED ? NN_TRUNK_ROUTED : NN_TRUNK_EXPERT;
    model_objective obj = stage == 1 ? cfg->stage1.objective : cfg->stage2.objective;
    out->in_dim = dim + n_ctx;
    /* a generator has no time input; flow and ddpm trunks see [t, c] */
    out->cond_dim = (obj == MODEL_OBJ_WGAN ? 0 : 1) + n_cond;
    out->emb_dim = t->emb_dim;
    /* Conditions are O(1) (time in [0, 1], standardised energies); scaled by
     * 1000 they span the embedding's periods like diffusion timesteps do. */
    out->emb_scale = 1000.0f;
    out->emb_max_period = 10000.0f;
    out->hidden = t->hidden;
    out->blocks = t->blocks;
    out->out_dim = dim;
    out->n_experts = t->experts;
    out->top_k = t->top_k;
    out->balance_coef = (float)t->balance_weight;
    out->entropy_coef = (float)t->entropy_weight;
    out->precision = cfg->bf16 ? NN_BF16 : NN_F32;
}

/* n uniforms in [0, 1) from the generator, laid out like a device fill. */
static void host_uniforms(nn_rng *r, float *out, int n)
{
    uint64_t off = nn_rng_take(r, (uint64_t)n);
    uint32_t w[4];
    for (int i = 0; i < n; i++) {
        if (i % 4 == 0)
            nn_rng_block(r->seed, r->stream, off + (uint64_t)(i / 4), w);
        out[i] = nn_rng_uniform(w[i % 4]);
    }
}

static int balloc(model_stage *s, float **p, size_t n, gt_error *err)
{
    return nn_alloc(s->b, n * sizeof(float), (void **)p, err);
}

void model_stage_destroy(model_stage *s)
{
    if (!s)
        return;
    float **bufs[] = {&s->x_train, &s->c_train, &s->x_val, &s->c_val, &s->x1, &s->x0,
                      &s->xt, &s->target, &s->pred, &s->dpred, &s->cdata, &s->cond,
                      &s->t, &s->alpha, &s->beta, &s->ones, &s->mones, &s->loss,
                      &s->val_noise, &s->val_t, &s->ctx_train, &s->ctx_val, &s->ctxb,
                      &s->xin, &s->dpos, &s->dneg, &s->score, &s->hfake, &s->hreal, &s->hmix,
                      &s->dh};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        nn_free(s->b, *bufs[i]);
    nn_free(s->b, s->idx);
    if (s->opt_ready)
        nn_adamw_destroy(&s->opt);
    if (s->copt_ready)
        nn_adamw_destroy(&s->copt);
    model_critic_destroy(s->critic);
    free(s->score_h);
    free(s->gen_h);
    free(s->val_xc_h);
    model_head_destroy(s->head);
    nn_trunk_destroy(s->trunk);
    nn_trunk_destroy(s->val_trunk);
    free(s->idx_h);
    free(s->t_h);
    free(s->alpha_h);
    free(s->beta_h);
    free(s->u_h);
    free(s->valid_train_h);
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
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* WGAN-GP                                                                  */
/* ------------------------------------------------------------------------ */

/* Rows of the energy-distance validation (O(n^2 D) on the host). */
#define GAN_ED_MAX 512
/* "GIANTGA2": generator G = T + [0 ; z_v] with the stick-breaking head.
 * "GIANTGAN" was the first form (G = T, no head); its weights mean
 * something else, so such checkpoints are refused, not misread. */
#define GAN_CKPT_MAGIC "GIANTGA2"
#define GAN_CKPT_MAGIC_V1 "GIANTGAN"

/* Mean Euclidean distance between the rows of a [na, w] and b [nb, w]
 * (excluding the diagonal when same). */
static double mean_pair_dist(const float *a, int na, const float *b, int nb, int w, int same)
{
    double sum = 0;
    long long cnt = 0;
    for (int i = 0; i < na; i++)
        for (int j = same ? i + 1 : 0; j < nb; j++) {
            const float *x = a + (size_t)i * w, *y = b + (size_t)j * w;
            double d = 0;
            for (int k = 0; k < w; k++) {
                double t = (double)x[k] - y[k];
                d += t * t;
            }
            sum += sqrt(d);
            cnt++;
        }
    return cnt ? sum / (double)cnt : 0.0;
}

/* The critic's view of rows x [rows, D] (backend): h(x) into out [rows,
 * cdim] through the stick-breaking head (model_head.h), or x itself for a
 * stage without one. */
static int head_fwd(model_stage *s, const float *x, int rows, float *out, nn_tensor *h,
                    gt_error *err)
{
    if (!s->head) {
        *h = nn_f32((float *)x, rows, s->dim);
        return GT_OK;
    }
    *h = nn_f32(out, rows, s->cdim);
    return model_head_forward(s->head, nn_f32((float *)x, rows, s->dim), *h, err);
}

static int gan_create(model_stage *s, const model_stage_data *data, const nn_adamw_config *goc,
                      const model_wgan_config *wg, gt_error *err)
{
    const int B = s->batch, D = s->dim, C = s->n_cond;
    if (s->n_ctx || data->valid_train)
        return gt_error_set(err, GT_EINVAL, "wgan trains oneshot stages only");
    s->cdim = D;
    int rc;
    if (data->sb_layers) {
        if ((rc = model_head_create(s->b, data->sb_layers, D, data->sb_mean, data->sb_std,
                                    data->x_train, s->n_train, B, &s->head, err)))
            return rc;
        s->cdim = model_head_width(s->head);
        s->noise_from = model_stage_gan_noise_from(data->sb_layers);
        s->ed_cols = data->sb_layers;
        s->ed_weight = (float)sqrt((double)(D - (data->sb_layers - 1)) / data->sb_layers);
        size_t n = (size_t)B * s->cdim;
        if ((rc = balloc(s, &s->hfake, n, err)) || (rc = balloc(s, &s->hreal, n, err)) ||
            (rc = balloc(s, &s->hmix, n, err)) || (rc = balloc(s, &s->dh, n, err)))
            return rc;
    }
    const int W = s->cdim;
    model_critic_config cc = {W, C, wg->critic_hidden, wg->critic_depth, 0.2f};
    rc = model_critic_create(s->b, &cc, B, &s->critic, err);
    if (rc || (rc = model_critic_init(s->critic, s->cfg.seed * 2 + 101 + (uint64_t)s->stage, err)))
        return rc;
    /* The critic: same peak lr and betas, no weight decay and no clipping
     * (the penalty is its regulariser), its own schedule over
     * critic_steps updates per generator step. */
    nn_adamw_config oc = *goc;
    oc.weight_decay = 0.0f;
    oc.clip_norm = 0.0f;
    oc.warmup_steps = goc->warmup_steps * wg->critic_steps;
    oc.total_steps = goc->total_steps * wg->critic_steps;
    if ((rc = nn_adamw_create(&s->copt, model_critic_params(s->critic), &oc, err)))
        return rc;
    s->copt_ready = 1;
    if ((rc = balloc(s, &s->dpos, B, err)) || (rc = balloc(s, &s->dneg, B, err)) ||
        (rc = balloc(s, &s->score, B, err)))
        return rc;
    s->n_ed = s->n_valset < GAN_ED_MAX ? s->n_valset : GAN_ED_MAX;
    s->score_h = malloc((size_t)B * sizeof(float));
    s->gen_h = malloc((size_t)s->n_ed * (W + C) * sizeof(float));
    s->val_xc_h = malloc((size_t)s->n_ed * (W + C) * sizeof(float));
    if (!s->score_h || !s->gen_h || !s->val_xc_h)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    for (int i = 0; i < B; i++)
        s->score_h[i] = 1.0f / (float)B;
    if ((rc = nn_copy_h2d(s->b, s->dpos, s->score_h, (size_t)B * sizeof(float), err)))
        return rc;
    for (int i = 0; i < B; i++)
        s->score_h[i] = -1.0f / (float)B;
    if ((rc = nn_copy_h2d(s->b, s->dneg, s->score_h, (size_t)B * sizeof(float), err)))
        return rc;
    /* held-out rows as the critic sees them, [h(x) ; c], and their mean
     * pairwise distance, once */
    for (int i = 0; i < s->n_ed; i++) {
        float *r = s->val_xc_h + (size_t)i * (W + C);
        const float *x = data->x_val + (size_t)i * D;
        if (s->head)
            model_head_row_host(s->head, x, r);
        else
            memcpy(r, x, (size_t)D * sizeof(float));
        if (C)
            memcpy(r + W, data->c_val + (size_t)i * C, (size_t)C * sizeof(float));
        for (int j = 0; j < s->ed_cols; j++)
            r[j] *= s->ed_weight;
    }
    s->ed_yy = mean_pair_dist(s->val_xc_h, s->n_ed, s->val_xc_h, s->n_ed, W + C, 1);
    return GT_OK;
}

int model_stage_gan_noise_from(int sb_layers) { return sb_layers >= 2 ? sb_layers - 1 : 0; }

/* G(z, c) = T(z, c) + [0 ; z_k..] (out holds T on entry): see
 * model_stage_gan_noise_from. */
static int gan_skip(model_stage *s, float *out, const float *z, int rows, gt_error *err)
{
    const int D = s->dim, k = s->noise_from;
    nn_tensor o = nn_tensor_cols(nn_f32(out, rows, D), k, D - k);
    nn_tensor zz = nn_tensor_cols(nn_f32((float *)z, rows, D), k, D - k);
    return nn_add(s->b, o, o, zz, err);
}

/* Validation of a generator: the energy distance
 *   ED = 2 E|G - Y| - E|G - G'| - E|Y - Y'|
 * between n held-out rows Y = [h(x) ; c] and rows G = [h(G(z_i, c_i)) ; c_i]
 * generated for the same conditions from noise drawn once (fixed seed), by
 * the fp32 twin; h is the critic's view (the head, when there is one), with
 * its L layer-fraction columns weighted by sqrt(V / L) so that the layer
 * profile counts as much as the V voxel columns together.  See
 * engine/model/README.md for why. */
static int gan_validate(model_stage *s, float *val, gt_error *err)
{
    nn_params *tp = nn_trunk_params(s->trunk), *vp = nn_trunk_params(s->val_trunk);
    int rc = nn_copy_d2d(s->b, vp->value, tp->value, tp->count * sizeof(float), err);
    if (rc)
        return rc;
    const int D = s->dim, C = s->n_cond, W = s->cdim, n = s->n_ed;
    for (int r0 = 0; r0 < n; r0 += s->batch) {
        int rows = n - r0 < s->batch ? n - r0 : s->batch;
        nn_tensor h;
        if ((rc = nn_trunk_forward(s->val_trunk, nn_f32(s->val_noise + (size_t)r0 * D, rows, D),
                                   nn_f32(C ? s->c_val + (size_t)r0 * C : NULL, rows, C),
                                   nn_f32(s->pred, rows, D), 0, err)) ||
            (rc = gan_skip(s, s->pred, s->val_noise + (size_t)r0 * D, rows, err)) ||
            (rc = head_fwd(s, s->pred, rows, s->hfake, &h, err)) ||
            (rc = nn_copy_d2h(s->b, s->gen_h + (size_t)r0 * (W + C), h.data,
                              (size_t)rows * W * sizeof(float), err)))
            return rc;
        /* spread the rows to width W + C, last row first (in place) */
        for (int i = rows - 1; i >= 0; i--) {
            float *dst = s->gen_h + (size_t)(r0 + i) * (W + C);
            memmove(dst, s->gen_h + (size_t)r0 * (W + C) + (size_t)i * W,
                    (size_t)W * sizeof(float));
            if (C)
                memcpy(dst + W, s->val_xc_h + (size_t)(r0 + i) * (W + C) + W,
                       (size_t)C * sizeof(float));
            for (int j = 0; j < s->ed_cols; j++)
                dst[j] *= s->ed_weight;
        }
    }
    double xy = mean_pair_dist(s->gen_h, n, s->val_xc_h, n, W + C, 0);
    double xx = mean_pair_dist(s->gen_h, n, s->gen_h, n, W + C, 1);
    *val = (float)(2 * xy - xx - s->ed_yy);
    return GT_OK;
}

/* Batch indices, then the real rows and their conditions. */
static int gan_real_batch(model_stage *s, gt_error *err)
{
    const int B = s->batch, D = s->dim, C = s->n_cond;
    host_uniforms(&s->rng, s->u_h, B);
    for (int i = 0; i < B; i++) {
        int k = (int)(s->u_h[i] * (float)s->n_train);
        s->idx_h[i] = k < s->n_train ? k : s->n_train - 1;
    }
    int rc;
    if ((rc = nn_copy_h2d(s->b, s->idx, s->idx_h, (size_t)B * sizeof(int32_t), err)) ||
        (rc = nn_gather_rows(s->b, nn_f32(s->x1, B, D), nn_f32(s->x_train, s->n_train, D),
                             s->idx, NULL, err)) ||
        (C && (rc = nn_gather_rows(s->b, nn_f32(s->cdata, B, C),
                                   nn_f32(s->c_train, s->n_train, C), s->idx, NULL, err))))
        return rc;
    uint64_t off = nn_rng_take(&s->rng, (uint64_t)B * D);
    return nn_rand_fill(s->b, s->x0, (size_t)B * D, NN_DIST_NORMAL, 0.0f, 1.0f, s->rng.seed,
                        s->rng.stream, off, err);
}

static int gan_mean_score(model_stage *s, int rows, double *mean, gt_error *err)
{
    int rc = nn_copy_d2h(s->b, s->score_h, s->score, (size_t)rows * sizeof(float), err);
    double m = 0;
    for (int i = 0; i < rows; i++)
        m += s->score_h[i];
    *mean = m / rows;
    return rc;
}

/* critic_steps critic updates, then one generator update.  The critic sees
 * rows through the head (h = x without one); interpolates are taken there,
 * so the penalty constrains the critic on the space it judges. */
static int gan_step(model_stage *s, float *grad_norm, gt_error *err)
{
    const int B = s->batch, D = s->dim, C = s->n_cond, W = s->cdim;
    const model_wgan_config *wg = s->stage == 1 ? &s->cfg.stage1.wgan : &s->cfg.stage2.wgan;
    nn_tensor z = nn_f32(s->x0, B, D), fake = nn_f32(s->pred, B, D);
    nn_tensor cd = nn_f32(C ? s->cdata : NULL, B, C), none = nn_f32(NULL, B, W);
    nn_tensor hmix = nn_f32(s->hmix ? s->hmix : s->xt, B, W), hr, hf;
    nn_params *cp = model_critic_params(s->critic);
    int rc;
    double closs = 0;
    for (int k = 0; k < wg->critic_steps; k++) {
        if ((rc = gan_real_batch(s, err)))
            return rc;
        host_uniforms(&s->rng, s->u_h, B); /* interpolation weights */
        for (int i = 0; i < B; i++)
            s->beta_h[i] = 1.0f - s->u_h[i];
        double mr, mf;
        float pen = 0;
        if ((rc = nn_copy_h2d(s->b, s->alpha, s->u_h, (size_t)B * sizeof(float), err)) ||
            (rc = nn_copy_h2d(s->b, s->beta, s->beta_h, (size_t)B * sizeof(float), err)) ||
            (rc = nn_trunk_forward(s->trunk, z, cd, fake, 0, err)) ||
            (rc = gan_skip(s, s->pred, s->x0, B, err)) ||
            (rc = head_fwd(s, s->x1, B, s->hreal, &hr, err)) ||
            (rc = head_fwd(s, s->pred, B, s->hfake, &hf, err)) ||
            (rc = nn_params_zero_grad(cp, err)) ||
            (rc = model_critic_forward(s->critic, hr, cd, s->score, err)) ||
            (rc = model_critic_backward(s->critic, s->dneg, none, err)) ||
            (rc = gan_mean_score(s, B, &mr, err)) ||
            (rc = model_critic_forward(s->critic, hf, cd, s->score, err)) ||
            (rc = model_critic_backward(s->critic, s->dpos, none, err)) ||
            (rc = gan_mean_score(s, B, &mf, err)) ||
            (rc = nn_axpby_rows(s->b, hmix, s->alpha, hr, s->beta, hf, err)) ||
            (rc = model_critic_forward(s->critic, hmix, cd, s->score, err)) ||
            (rc = model_critic_penalty(s->critic, (float)wg->gp_lambda, &pen, NULL, err)) ||
            (rc = nn_adamw_step(&s->copt, NULL, err)))
            return rc;
        closs = mf - mr + pen;
    }
    /* generator: minimise -mean D(h(G(z, c))) */
    float *dhf = s->head ? s->dh : s->dpred;
    if ((rc = gan_real_batch(s, err)) || (rc = nn_trunk_forward(s->trunk, z, cd, fake, 1, err)) ||
        (rc = gan_skip(s, s->pred, s->x0, B, err)) ||
        (rc = head_fwd(s, s->pred, B, s->hfake, &hf, err)) ||
        (rc = model_critic_forward(s->critic, hf, cd, s->score, err)) ||
        (rc = model_critic_backward(s->critic, s->dneg, nn_f32(dhf, B, W), err)) ||
        (s->head && (rc = model_head_backward(s->head, nn_f32(s->dh, B, W),
                                              nn_f32(s->dpred, B, D), err))) ||
        (rc = nn_params_zero_grad(nn_trunk_params(s->trunk), err)) ||
        (rc = nn_trunk_backward(s->trunk, nn_f32(s->dpred, B, D), nn_f32(NULL, B, D), err)) ||
        (rc = nn_adamw_step(&s->opt, grad_norm, err)))
        return rc;
    /* the reported loss: the critic's, -W estimate + penalty, of the last critic step */
    s->gan_loss = (float)closs;
    return nn_copy_h2d(s->b, s->loss, &s->gan_loss, sizeof(float), err);
}

static void put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* "GIANTGAN" | u64 len | generator nn_ckpt | u64 len | critic nn_ckpt */
static int gan_ckpt_save(model_stage *s, void **out, size_t *out_len, gt_error *err)
{
    void *g = NULL, *c = NULL;
    size_t gl = 0, cl = 0;
    int rc = nn_ckpt_save(nn_trunk_params(s->trunk), &s->opt, &s->rng, &g, &gl, err);
    if (rc || (rc = nn_ckpt_save(model_critic_params(s->critic), &s->copt, NULL, &c, &cl, err))) {
        free(g);
        return rc;
    }
    size_t n = 8 + 8 + gl + 8 + cl;
    uint8_t *buf = malloc(n);
    if (!buf) {
        free(g);
        free(c);
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    }
    memcpy(buf, GAN_CKPT_MAGIC, 8);
    put_u64le(buf + 8, gl);
    memcpy(buf + 16, g, gl);
    put_u64le(buf + 16 + gl, cl);
    memcpy(buf + 24 + gl, c, cl);
    free(g);
    free(c);
    *out = buf;
    *out_len = n;
    return GT_OK;
}

int model_stage_ckpt_parts(const void *buf, size_t len, const void **gen, size_t *gen_len,
                           const void **critic, size_t *critic_len, gt_error *err)
{
    const uint8_t *p = buf;
    *critic = NULL;
    *critic_len = 0;
    if (buf && len >= 8 && memcmp(p, GAN_CKPT_MAGIC_V1, 8) == 0)
        return gt_error_set(err, GT_EFORMAT, "a wgan checkpoint of the first generator form "
                            "(no noise skip, no stick-breaking head): retrain the run");
    if (!buf || len < 8 || memcmp(p, GAN_CKPT_MAGIC, 8) != 0) {
        *gen = buf;
        *gen_len = len;
        return GT_OK;
    }
    if (len < 16)
        return gt_error_set(err, GT_EFORMAT, "wgan checkpoint is truncated");
    uint64_t gl = get_u64le(p + 8);
    if (gl > len - 16 || len - 16 - gl < 8)
        return gt_error_set(err, GT_EFORMAT, "wgan checkpoint is truncated");
    uint64_t cl = get_u64le(p + 16 + gl);
    if (cl != len - 24 - gl)
        return gt_error_set(err, GT_EFORMAT, "wgan checkpoint has a bad critic length");
    *gen = p + 16;
    *gen_len = (size_t)gl;
    *critic = p + 24 + gl;
    *critic_len = (size_t)cl;
    return GT_OK;
}

/* Zeroes the padding columns of `rows` rows of x [rows, dim]: row i uses
 * valid[2 * (idx ? idx[i] : i)].  One memset per padded range: cheap next
 * to a trunk pass, and it keeps the noise of padding at exactly 0. */
static int zero_padding(model_stage *s, float *x, const int32_t *valid, const int32_t *idx,
                        int rows, gt_error *err)
{
    const int D = s->dim;
    for (int i = 0; i < rows; i++) {
        const int32_t *v = valid + 2 * (size_t)(idx ? idx[i] : i);
        float *r = x + (size_t)i * D;
        int rc;
        if (v[0] > 0 && (rc = nn_memset(s->b, r, 0, (size_t)v[0] * sizeof(float), err)))
            return rc;
        if (v[1] < D &&
            (rc = nn_memset(s->b, r + v[1], 0, (size_t)(D - v[1]) * sizeof(float), err)))
            return rc;
    }
    return GT_OK;
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

int model_stage_create(nn_backend *b, const model_config *cfg, int stage,
                       const model_stage_data *data, model_stage **out, gt_error *err)
{
    *out = NULL;
    if (stage != 1 && stage != 2)
        return gt_error_set(err, GT_EINVAL, "stage must be 1 or 2, not %d", stage);
    int rc = check_data(data, err);
    if (rc)
        return rc;
    model_stage *s = calloc(1, sizeof *s);
    if (!s)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    s->b = b;
    s->cfg = *cfg;
    s->stage = stage;
    s->objective = stage == 1 ? cfg->stage1.objective : cfg->stage2.objective;
    s->dim = data->dim;
    s->n_cond = data->n_cond;
    s->n_train = data->n_train;
    s->n_val = data->n_val;
    s->batch = cfg->batch;
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
    if ((rc = nn_trunk_create(b, &tc, &s->trunk, err)) ||
        (rc = nn_trunk_init(s->trunk, cfg->seed * 2 + (uint64_t)stage, 0.1f, err)) ||
        (rc = nn_trunk_plan(s->trunk, B, err)) ||
        (rc = nn_trunk_create(b, &vc, &s->val_trunk, err)) ||
        (rc = nn_trunk_plan(s->val_trunk, B, err)))
        goto fail;

    nn_adamw_config oc;
    nn_adamw_config_default(&oc);
    oc.lr = (float)cfg->lr;
    oc.beta1 = (float)cfg->beta1;
    oc.beta2 = (float)cfg->beta2;
    oc.eps = (float)cfg->adam_eps;
    oc.weight_decay = (float)cfg->weight_decay;
    oc.clip_norm = (float)cfg->grad_clip;
    oc.warmup_steps = cfg->warmup_steps;
    oc.total_steps = s->total;
    oc.min_lr_ratio = (float)cfg->min_lr_ratio;
    const model_wgan_config *wg = stage == 1 ? &cfg->stage1.wgan : &cfg->stage2.wgan;
    if (s->objective == MODEL_OBJ_WGAN) {
        oc.beta1 = (float)wg->beta1;
        oc.beta2 = (float)wg->beta2;
    }
    if ((rc = nn_adamw_create(&s->opt, nn_trunk_params(s->trunk), &oc, err)))
        goto fail;
    s->opt_ready = 1;
    if (s->objective == MODEL_OBJ_WGAN && (rc = gan_create(s, data, &oc, wg, err)))
        goto fail;

    size_t ntr = (size_t)s->n_train, nva = (size_t)s->n_val, V = (size_t)s->n_valset;
    if ((rc = balloc(s, &s->x_train, ntr * D, err)) ||
        (rc = balloc(s, &s->c_train, ntr * (C ? C : 1), err)) ||
        (rc = balloc(s, &s->x_val, nva * D, err)) ||
        (rc = balloc(s, &s->c_val, nva * (C ? C : 1), err)) ||
        (rc = nn_alloc(b, (size_t)B * sizeof(int32_t), (void **)&s->idx, err)) ||
        (rc = balloc(s, &s->x1, (size_t)B * D, err)) ||
        (rc = balloc(s, &s->x0, (size_t)B * D, err)) ||
        (rc = balloc(s, &s->xt, (size_t)B * D, err)) ||
        (rc = balloc(s, &s->target, (size_t)B * D, err)) ||
        (rc = balloc(s, &s->pred, (size_t)B * D, err)) ||
        (rc = balloc(s, &s->dpred, (size_t)B * D, err)) ||
        (rc = balloc(s, &s->cdata, (size_t)B * (C ? C : 1), err)) ||
        (rc = balloc(s, &s->cond, (size_t)B * (1 + C), err)) ||
        (rc = balloc(s, &s->t, B, err)) || (rc = balloc(s, &s->alpha, B, err)) ||
        (rc = balloc(s, &s->beta, B, err)) || (rc = balloc(s, &s->ones, B, err)) ||
        (rc = balloc(s, &s->mones, B, err)) || (rc = balloc(s, &s->loss, 1, err)) ||
        (rc = balloc(s, &s->val_noise, V * D, err)) || (rc = balloc(s, &s->val_t, V, err)))
        goto fail;
    if (s->n_ctx) {
        size_t P = (size_t)s->n_ctx;
        if ((rc = balloc(s, &s->ctx_train, ntr * P, err)) ||
            (rc = balloc(s, &s->ctx_val, nva * P, err)) ||
            (rc = balloc(s, &s->ctxb, (size_t)B * P, err)) ||
            (rc = balloc(s, &s->xin, (size_t)B * (D + P), err)) ||
            (rc = nn_copy_h2d(b, s->ctx_train, data->ctx_train, ntr * P * sizeof(float), err)) ||
            (rc = nn_copy_h2d(b, s->ctx_val, data->ctx_val, nva * P * sizeof(float), err)))
            goto fail;
    }
    if (data->valid_train) {
        s->valid_train_h = malloc(ntr * 2 * sizeof(int32_t));
        s->valid_val_h = malloc(nva * 2 * sizeof(int32_t));
        if (!s->valid_train_h || !s->valid_val_h) {
            rc = gt_error_set(err, GT_ENOMEM, "out of memory");
            goto fail;
        }
        memcpy(s->valid_train_h, data->valid_train, ntr * 2 * sizeof(int32_t));
        memcpy(s->valid_val_h, data->valid_val, nva * 2 * sizeof(int32_t));
    }
    s->idx_h = malloc((size_t)B * sizeof *s->idx_h);
    s->t_h = malloc((size_t)(B > (int)V ? B : (int)V) * sizeof(float));
    s->alpha_h = malloc((size_t)B * sizeof(float));
    s->beta_h = malloc((size_t)B * sizeof(float));
    s->u_h = malloc((size_t)B * sizeof(float));
    if (!s->idx_h || !s->t_h || !s->alpha_h || !s->beta_h || !s->u_h) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = nn_copy_h2d(b, s->x_train, data->x_train, ntr * D * sizeof(float), err)) ||
        (rc = nn_copy_h2d(b, s->x_val, data->x_val, nva * D * sizeof(float), err)) ||
        (C && (rc = nn_copy_h2d(b, s->c_train, data->c_train, ntr * C * sizeof(float), err))) ||
        (C && (rc = nn_copy_h2d(b, s->c_val, data->c_val, nva * C * sizeof(float), err))))
        goto fail;
    for (int i = 0; i < B; i++) {
        s->alpha_h[i] = 1.0f;
        s->beta_h[i] = -1.0f;
    }
    if ((rc = nn_copy_h2d(b, s->ones, s->alpha_h, (size_t)B * sizeof(float), err)) ||
        (rc = nn_copy_h2d(b, s->mones, s->beta_h, (size_t)B * sizeof(float), err)))
        goto fail;

    /* The fixed validation draws: noise and times, once. */
    nn_rng vr = nn_rng_make(cfg->seed ^ VAL_SEED_SALT, VAL_STREAM + (uint64_t)stage);
    uint64_t off = nn_rng_take(&vr, V * D);
    if ((rc = nn_rand_fill(b, s->val_noise, V * D, NN_DIST_NORMAL, 0.0f, 1.0f, vr.seed,
                           vr.stream, off, err)))
        goto fail;
    if (s->valid_val_h && (rc = zero_padding(s, s->val_noise, s->valid_val_h, NULL, (int)V, err)))
        goto fail;
    host_uniforms(&vr, s->t_h, (int)V);
    if ((rc = nn_copy_h2d(b, s->val_t, s->t_h, V * sizeof(float), err)))
        goto fail;
    *out = s;
    return GT_OK;
fail:
    model_stage_destroy(s);
    return rc;
}

long long model_stage_step(const model_stage *s) { return s->opt.step; }
nn_trunk *model_stage_trunk(model_stage *s) { return s->trunk; }

int model_stage_resume(model_stage *s, const void *buf, size_t len, gt_error *err)
{
    nn_rng r = s->rng;
    const void *g = buf, *c = NULL;
    size_t gl = len, cl = 0;
    int rc = model_stage_ckpt_parts(buf, len, &g, &gl, &c, &cl, err);
    if (!rc && s->critic && !c)
        rc = gt_error_set(err, GT_EFORMAT, "not a wgan checkpoint (no critic)");
    if (!rc && !s->critic && c)
        rc = gt_error_set(err, GT_EFORMAT, "a wgan checkpoint, but this stage is not wgan");
    if (!rc)
        rc = nn_ckpt_load(nn_trunk_params(s->trunk), &s->opt, &r, g, gl, err);
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

/* Builds xt, target and cond for `rows` rows whose x1, x0, cdata and
 * t/alpha/beta (host) are in place.  target_is_x0 for ddpm. */
static int build_inputs(model_stage *s, int rows, nn_tensor x1, nn_tensor x0, nn_tensor cdata,
                        const float *t_dev, gt_error *err)
{
    const int D = s->dim, C = s->n_cond;
    int rc;
    if ((rc = nn_copy_h2d(s->b, s->alpha, s->alpha_h, (size_t)rows * sizeof(float), err)) ||
        (rc = nn_copy_h2d(s->b, s->beta, s->beta_h, (size_t)rows * sizeof(float), err)))
        return rc;
    nn_tensor xt = nn_f32(s->xt, rows, D);
    if ((rc = nn_axpby_rows(s->b, xt, s->alpha, x0, s->beta, x1, err)))
        return rc;
    if (s->objective == MODEL_OBJ_FLOW) {
        nn_tensor tg = nn_f32(s->target, rows, D);
        if ((rc = nn_axpby_rows(s->b, tg, s->ones, x1, s->mones, x0, err)))
            return rc;
    }
    nn_tensor parts[2] = {nn_f32((float *)t_dev, rows, 1), cdata};
    return nn_concat(s->b, nn_f32(s->cond, rows, 1 + C), parts, C ? 2 : 1, err);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int model_stage_validate(model_stage *s, float *val_loss, gt_error *err)
{
    if (s->critic)
        return gan_validate(s, val_loss, err);
    nn_params *tp = nn_trunk_params(s->trunk), *vp = nn_trunk_params(s->val_trunk);
    int rc = nn_copy_d2d(s->b, vp->value, tp->value, tp->count * sizeof(float), err);
    if (rc)
        return rc;
    const int D = s->dim, C = s->n_cond;
    double sum = 0.0;
    for (int r0 = 0; r0 < s->n_valset; r0 += s->batch) {
        int rows = s->n_valset - r0 < s->batch ? s->n_valset - r0 : s->batch;
        if ((rc = nn_copy_d2h(s->b, s->t_h, s->val_t + r0, (size_t)rows * sizeof(float), err)))
            return rc;
        times_from_uniforms(s->objective, s->t_h, rows);
        coefficients(s->objective, s->t_h, rows, s->alpha_h, s->beta_h);
        if ((rc = nn_copy_h2d(s->b, s->t, s->t_h, (size_t)rows * sizeof(float), err)))
            return rc;
        nn_tensor x1 = nn_f32(s->x_val + (size_t)r0 * D, rows, D);
        nn_tensor x0 = nn_f32(s->val_noise + (size_t)r0 * D, rows, D);
        nn_tensor cd = nn_f32(C ? s->c_val + (size_t)r0 * C : NULL, rows, C);
        if ((rc = build_inputs(s, rows, x1, x0, cd, s->t, err)))
            return rc;
        nn_tensor pred = nn_f32(s->pred, rows, D);
        nn_tensor target = s->objective == MODEL_OBJ_FLOW ? nn_f32(s->target, rows, D) : x0;
        nn_tensor xin;
        if ((rc = trunk_input(s, rows, s->n_ctx ? s->ctx_val + (size_t)r0 * s->n_ctx : NULL, &xin,
                               err)))
            return rc;
        float l;
        if ((rc = nn_trunk_forward(s->val_trunk, xin,
                                   nn_f32(s->cond, rows, 1 + C), pred, 0, err)) ||
            (rc = nn_mse_fwd(s->b, s->loss, pred, target, err)) ||
            (rc = nn_copy_d2h(s->b, &l, s->loss, sizeof l, err)))
            return rc;
        sum += (double)l * rows;
    }
    *val_loss = (float)(sum / s->n_valset);
    return GT_OK;
}

/* One optimizer update; the loss stays in backend memory (s->loss). */
static int train_step(model_stage *s, float *grad_norm, gt_error *err)
{
    const int B = s->batch, D = s->dim, C = s->n_cond;
    int rc;
    host_uniforms(&s->rng, s->u_h, B);
    for (int i = 0; i < B; i++) {
        int k = (int)(s->u_h[i] * (float)s->n_train);
        s->idx_h[i] = k < s->n_train ? k : s->n_train - 1;
    }
    host_uniforms(&s->rng, s->t_h, B);
    times_from_uniforms(s->objective, s->t_h, B);
    coefficients(s->objective, s->t_h, B, s->alpha_h, s->beta_h);
    uint64_t noise_off = nn_rng_take(&s->rng, (uint64_t)B * D);

    nn_tensor x1 = nn_f32(s->x1, B, D), x0 = nn_f32(s->x0, B, D);
    nn_tensor cd = nn_f32(C ? s->cdata : NULL, B, C);
    if ((rc = nn_copy_h2d(s->b, s->idx, s->idx_h, (size_t)B * sizeof(int32_t), err)) ||
        (rc = nn_copy_h2d(s->b, s->t, s->t_h, (size_t)B * sizeof(float), err)) ||
        (rc = nn_gather_rows(s->b, x1, nn_f32(s->x_train, s->n_train, D), s->idx, NULL, err)) ||
        (C && (rc = nn_gather_rows(s->b, cd, nn_f32(s->c_train, s->n_train, C), s->idx, NULL,
                                   err))) ||
        (rc = nn_rand_fill(s->b, s->x0, (size_t)B * D, NN_DIST_NORMAL, 0.0f, 1.0f, s->rng.seed,
                           s->rng.stream, noise_off, err)) ||
        (s->valid_train_h &&
         (rc = zero_padding(s, s->x0, s->valid_train_h, s->idx_h, B, err))) ||
        (rc = build_inputs(s, B, x1, x0, cd, s->t, err)))
        return rc;
    nn_tensor xin;
    if (s->n_ctx &&
        (rc = nn_gather_rows(s->b, nn_f32(s->ctxb, B, s->n_ctx),
                             nn_f32(s->ctx_train, s->n_train, s->n_ctx), s->idx, NULL, err)))
        return rc;
    if ((rc = trunk_input(s, B, s->ctxb, &xin, err)))
        return rc;
    nn_tensor pred = nn_f32(s->pred, B, D), dpred = nn_f32(s->dpred, B, D);
    nn_tensor target = s->objective == MODEL_OBJ_FLOW ? nn_f32(s->target, B, D) : x0;
    nn_tensor none = nn_f32(NULL, B, D + s->n_ctx);
    if ((rc = nn_trunk_forward(s->trunk, xin, nn_f32(s->cond, B, 1 + C), pred, 1, err)) ||
        (rc = nn_mse_fwd(s->b, s->loss, pred, target, err)) ||
        (rc = nn_mse_bwd(s->b, dpred, 1.0f, pred, target, 0, err)) ||
        (rc = nn_params_zero_grad(nn_trunk_params(s->trunk), err)) ||
        (rc = nn_trunk_backward(s->trunk, dpred, none, err)) ||
        (rc = nn_adamw_step(&s->opt, grad_norm, err)))
        return rc;
    return GT_OK;
}

int model_stage_train(model_stage *s, const model_stage_hooks *h, gt_error *err)
{
    model_stage_hooks none = {0};
    if (!h)
        h = &none;
    double t_last = now_s();
    long long step_last = s->opt.step;
    while (s->opt.step < s->total) {
        if (h->should_stop && h->should_stop(h->user))
            return gt_error_set(err, GT_ECANCELLED, "stopped at stage %d step %lld", s->stage,
                                s->opt.step);
        float lr = nn_adamw_lr(&s->opt.cfg, s->opt.step);
        float gnorm = 0.0f;
        int rc = s->critic ? gan_step(s, &gnorm, err) : train_step(s, &gnorm, err);
        if (rc)
            return gt_error_wrap(err, "stage %d step %lld", s->stage, s->opt.step + 1);
        long long step = s->opt.step;
        int last = step == s->total;
        if (h->on_step && (step % s->cfg.log_every == 0 || last)) {
            model_step_report r;
            memset(&r, 0, sizeof r);
            r.stage = s->stage;
            r.step = step;
            r.total = s->total;
            r.grad_norm = gnorm;
            r.lr = lr;
            if ((rc = nn_copy_d2h(s->b, &r.loss, s->loss, sizeof r.loss, err)))
                return rc;
            double t = now_s();
            r.samples_per_s = (double)(step - step_last) * s->batch / (t - t_last + 1e-12);
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
            if ((rc = h->on_step(h->user, &r)))
                return gt_error_set(err, GT_ECANCELLED, "stopped by the step hook");
        }
        int do_ckpt = step % s->cfg.ckpt_every == 0 || last;
        int do_val = step % s->cfg.val_every == 0 || do_ckpt;
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
            if ((rc = s->critic ? gan_ckpt_save(s, &buf, &len, err)
                                : nn_ckpt_save(nn_trunk_params(s->trunk), &s->opt, &s->rng, &buf,
                                               &len, err)))
                return rc;
            rc = h->on_checkpoint(h->user, s->stage, step, val, buf, len);
            free(buf);
            if (rc)
                return gt_error_set(err, GT_ECANCELLED, "stopped by the checkpoint hook");
        }
        if (do_val)
            step_last = s->opt.step, t_last = now_s(); /* keep validation out of samples/s */
    }
    return GT_OK;
}
