/* model_obj_wgan: the WGAN-GP objective (model_stage.h describes it,
 * engine/model/README.md says why it is built this way; model_obj.h the
 * table).  The generator is the stage's trunk; training adds the critic,
 * the stick-breaking head of stage 2 and the energy-distance validation;
 * sampling is one pass of the generator from the noise. */
#include "model_sampler_internal.h"
#include "model_stage_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rows of the energy-distance validation (O(n^2 D) on the host). */
#define GAN_ED_MAX 512

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

/* Fills n floats of backend memory with v (through the host scratch). */
static int fill_const(model_stage *s, float *dst, int n, float v, gt_error *err)
{
    for (int i = 0; i < n; i++)
        s->score_h[i] = v;
    return nn_copy_h2d(s->b, dst, s->score_h, (size_t)n * sizeof(float), err);
}

/* The critic, its optimizer (from the generator's, goc), the head of a
 * stage with stick-breaking columns and the held-out rows of the energy
 * distance. */
static int gan_create(model_stage *s, const model_stage_data *data, const nn_adamw_config *goc,
                      gt_error *err)
{
    const int B = s->batch, D = s->dim, C = s->n_cond;
    const model_wgan_config *wg = s->stage == 1 ? &s->cfg.stage1.wgan : &s->cfg.stage2.wgan;
    if (s->n_ctx || data->valid_train)
        return gt_error_set(err, GT_EINVAL, "wgan trains oneshot stages only");
    s->cdim = D;
    if (data->sb_layers) {
        GT_TRY(model_head_create(s->b, data->sb_layers, D, data->sb_mean, data->sb_std,
                                 data->x_train, s->n_train, B, &s->head, err));
        s->cdim = model_head_width(s->head);
        s->noise_from = model_stage_gan_noise_from(data->sb_layers);
        s->ed_cols = data->sb_layers;
        s->ed_weight = (float)sqrt((double)(D - (data->sb_layers - 1)) / data->sb_layers);
        size_t n = (size_t)B * s->cdim;
        GT_TRY(model_stage_alloc(s, &s->hfake, n, err));
        GT_TRY(model_stage_alloc(s, &s->hreal, n, err));
        GT_TRY(model_stage_alloc(s, &s->hmix, n, err));
        GT_TRY(model_stage_alloc(s, &s->dh, n, err));
    }
    const int W = s->cdim;
    model_critic_config cc = {W, C, wg->critic_hidden, wg->critic_depth, 0.2f};
    GT_TRY(model_critic_create(s->b, &cc, B, &s->critic, err));
    GT_TRY(model_critic_init(s->critic, s->cfg.seed * 2 + 101 + (uint64_t)s->stage, err));
    /* The critic: same peak lr and betas, no weight decay and no clipping
     * (the penalty is its regulariser), its own schedule over
     * critic_steps updates per generator step. */
    nn_adamw_config oc = *goc;
    oc.weight_decay = 0.0f;
    oc.clip_norm = 0.0f;
    oc.warmup_steps = goc->warmup_steps * wg->critic_steps;
    oc.total_steps = goc->total_steps * wg->critic_steps;
    GT_TRY(nn_adamw_create(&s->copt, model_critic_params(s->critic), &oc, err));
    s->copt_ready = 1;
    GT_TRY(model_stage_alloc(s, &s->dpos, B, err));
    GT_TRY(model_stage_alloc(s, &s->dneg, B, err));
    GT_TRY(model_stage_alloc(s, &s->score, B, err));
    s->n_ed = s->n_valset < GAN_ED_MAX ? s->n_valset : GAN_ED_MAX;
    s->score_h = malloc((size_t)B * sizeof(float));
    s->gen_h = malloc((size_t)s->n_ed * (W + C) * sizeof(float));
    s->val_xc_h = malloc((size_t)s->n_ed * (W + C) * sizeof(float));
    if (!s->score_h || !s->gen_h || !s->val_xc_h)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    GT_TRY(fill_const(s, s->dpos, B, 1.0f / (float)B, err));
    GT_TRY(fill_const(s, s->dneg, B, -1.0f / (float)B, err));
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

/* Frees what gan_create made (safe on a partial one). */
static void gan_destroy(model_stage *s)
{
    float **bufs[] = {&s->dpos, &s->dneg, &s->score, &s->hfake, &s->hreal, &s->hmix, &s->dh};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        nn_free(s->b, *bufs[i]);
    if (s->copt_ready)
        nn_adamw_destroy(&s->copt);
    model_critic_destroy(s->critic);
    model_head_destroy(s->head);
    free(s->score_h);
    free(s->gen_h);
    free(s->val_xc_h);
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
    const int D = s->dim, C = s->n_cond, W = s->cdim, n = s->n_ed;
    for (int r0 = 0; r0 < n; r0 += s->batch) {
        int rows = n - r0 < s->batch ? n - r0 : s->batch;
        nn_tensor h;
        GT_TRY(nn_trunk_forward(s->val_trunk, nn_f32(s->val_noise + (size_t)r0 * D, rows, D),
                                nn_f32(C ? s->c_val + (size_t)r0 * C : NULL, rows, C),
                                nn_f32(s->pred, rows, D), 0, err));
        GT_TRY(gan_skip(s, s->pred, s->val_noise + (size_t)r0 * D, rows, err));
        GT_TRY(head_fwd(s, s->pred, rows, s->hfake, &h, err));
        GT_TRY(nn_copy_d2h(s->b, s->gen_h + (size_t)r0 * (W + C), h.data,
                           (size_t)rows * W * sizeof(float), err));
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
    double closs = 0;
    for (int k = 0; k < wg->critic_steps; k++) {
        /* the reported loss is the last critic step's: the others read no
         * scores back (each read-back stalls a GPU) */
        const int last = k == wg->critic_steps - 1;
        GT_TRY(model_stage_real_batch(s, err));
        GT_TRY(model_stage_batch_noise(s, err));
        /* interpolation weights: the whole batch's, this rank's share */
        model_stage_uniforms(&s->rng, s->u_h, s->gbatch);
        const float *uh = s->u_h + s->lo;
        for (int i = 0; i < B; i++)
            s->beta_h[i] = 1.0f - uh[i];
        double mr = 0, mf = 0;
        float pen = 0;
        GT_TRY(nn_copy_h2d(s->b, s->alpha, uh, (size_t)B * sizeof(float), err));
        GT_TRY(nn_copy_h2d(s->b, s->beta, s->beta_h, (size_t)B * sizeof(float), err));
        GT_TRY(nn_trunk_forward(s->trunk, z, cd, fake, 0, err));
        GT_TRY(gan_skip(s, s->pred, s->x0, B, err));
        GT_TRY(head_fwd(s, s->x1, B, s->hreal, &hr, err));
        GT_TRY(head_fwd(s, s->pred, B, s->hfake, &hf, err));
        GT_TRY(nn_params_zero_grad(cp, err));
        GT_TRY(model_critic_forward(s->critic, hr, cd, s->score, err));
        GT_TRY(model_critic_backward(s->critic, s->dneg, none, err));
        if (last)
            GT_TRY(gan_mean_score(s, B, &mr, err));
        GT_TRY(model_critic_forward(s->critic, hf, cd, s->score, err));
        GT_TRY(model_critic_backward(s->critic, s->dpos, none, err));
        if (last)
            GT_TRY(gan_mean_score(s, B, &mf, err));
        GT_TRY(nn_axpby_rows(s->b, hmix, s->alpha, hr, s->beta, hf, err));
        GT_TRY(model_critic_forward(s->critic, hmix, cd, s->score, err));
        GT_TRY(model_critic_penalty(s->critic, (float)wg->gp_lambda, &pen, NULL, err));
        GT_TRY(model_stage_allreduce_grads(s, cp, err));
        GT_TRY(nn_adamw_step(&s->copt, NULL, err));
        closs = mf - mr + pen;
    }
    /* generator: minimise -mean D(h(G(z, c))) */
    float *dhf = s->head ? s->dh : s->dpred;
    GT_TRY(model_stage_real_batch(s, err));
    GT_TRY(model_stage_batch_noise(s, err));
    GT_TRY(nn_trunk_forward(s->trunk, z, cd, fake, 1, err));
    GT_TRY(gan_skip(s, s->pred, s->x0, B, err));
    GT_TRY(head_fwd(s, s->pred, B, s->hfake, &hf, err));
    GT_TRY(model_critic_forward(s->critic, hf, cd, s->score, err));
    GT_TRY(model_critic_backward(s->critic, s->dneg, nn_f32(dhf, B, W), err));
    if (s->head)
        GT_TRY(model_head_backward(s->head, nn_f32(s->dh, B, W), nn_f32(s->dpred, B, D), err));
    GT_TRY(nn_params_zero_grad(nn_trunk_params(s->trunk), err));
    GT_TRY(nn_trunk_backward(s->trunk, nn_f32(s->dpred, B, D), nn_f32(NULL, B, D), err));
    GT_TRY(model_stage_allreduce_grads(s, nn_trunk_params(s->trunk), err));
    GT_TRY(nn_adamw_step(&s->opt, grad_norm, err));
    /* the reported loss: the critic's, -W estimate + penalty, of the last critic step */
    s->gan_loss = (float)closs;
    return nn_copy_h2d(s->b, s->loss, &s->gan_loss, sizeof(float), err);
}

/* ------------------------------------------------------------------------ */
/* sampling                                                                 */
/* ------------------------------------------------------------------------ */

/* A generator: one forward pass from the noise, no time input (steps
 * unused). */
static int gan_integrate(model_sampler *s, model_sampler_net *n, int rows, int steps,
                         double *evals, gt_error *err)
{
    (void)steps;
    const int D = n->dim;
    int rc;
    nn_tensor x = nn_f32(s->x, rows, D), v = nn_f32(s->v1, rows, D);
    if ((rc = nn_trunk_forward(n->trunk, x, nn_f32(s->c, rows, n->n_cond), v, 0, err)))
        return rc;
    *evals += 1;
    /* G(z, c) = T(z, c) + [0 ; z_k..] (model_stage_gan_noise_from) */
    const int k = n->noise_from;
    nn_tensor xv = nn_tensor_cols(x, k, D - k), vv = nn_tensor_cols(v, k, D - k);
    nn_tensor vu = nn_tensor_cols(v, 0, k);
    if ((rc = nn_add(s->b, xv, xv, vv, err)))
        return rc;
    return k ? nn_concat(s->b, nn_tensor_cols(x, 0, k), &vu, 1, err) : GT_OK;
}

const model_obj_ops model_obj_wgan = {.name = "wgan", .create = gan_create, .destroy = gan_destroy,
                                      .step = gan_step, .validate = gan_validate,
                                      .integrate = gan_integrate};
