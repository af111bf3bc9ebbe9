/* model_sampler_ar: the autoregressive stage 2 (model_sampler_internal.h):
 * the shower's layers generated as tokens one after the other, each
 * conditioned on the energy not yet placed and the layers before it, for
 * the rows of the batch that can still put a voxel over the threshold.
 * Each token's integration is its objective's (the table's hook); no
 * graph, since the active rows change from layer to layer. */
#include "model_sampler_internal.h"

#include <string.h>

#include "nn_rng.h"

/* Noise of layer token l for the na active rows (s->act_h) packed at the
 * top of s->x: (request seed, row, stream AR_STREAM + l), as
 * model_sampler_fill_noise keys it.  Active rows that are consecutive rows
 * of one request are one rand_rows call; the columns outside the layer's
 * [lo, hi) are then zeroed for all rows at once (a copy from s->zeros), as
 * in training. */
static int ar_noise(model_sampler *s, const model_sample_request *reqs,
                    const model_sampler_piece *p, int np, int na, int l, int32_t lo, int32_t hi,
                    gt_error *err)
{
    const int TD = s->ard.dim;
    const uint64_t per_row = nn_rng_blocks((uint64_t)TD);
    int rc;
    for (int a = 0; a < na;) {
        int i = s->act_h[a], k = model_sampler_piece_of(p, np, i);
        int end = p[k].at + p[k].rows, run = 1;
        while (a + run < na && s->act_h[a + run] == i + run && i + run < end)
            run++;
        const model_sample_request *q = &reqs[p[k].req];
        uint64_t row = (uint64_t)(q->row0 + p[k].first + (i - p[k].at));
        if ((rc = nn_rand_rows(s->b, nn_f32(s->x + (size_t)a * TD, run, TD), NN_DIST_NORMAL,
                               0.0f, noise_sd(s, 2), q->seed,
                               draw_stream(AR_STREAM + (uint64_t)l, q->draw), row, per_row,
                               err)))
            return rc;
        a += run;
    }
    if (lo <= 0 && hi >= TD)
        return GT_OK;
    /* [zeros | untouched | zeros]: a NULL part leaves its columns alone */
    nn_tensor parts[3];
    int n = 0;
    if (lo > 0)
        parts[n++] = nn_f32(s->zeros, na, lo);
    if (hi > lo)
        parts[n++] = nn_f32(NULL, na, hi - lo);
    if (hi < TD)
        parts[n++] = nn_f32(s->zeros, na, TD - hi);
    return nn_concat(s->b, nn_f32(s->x, na, TD), parts, n, err);
}

/* Autoregressive stage 2 for the `rows` rows of the batch (their stage-2
 * conditions in c2_h, E_dep in edep_h): layer by layer, only for the rows
 * whose remaining energy can still put a voxel over the readout threshold.
 * Once E_dep * r_l is under the threshold every later voxel would read 0,
 * so those rows leave the batch without a network call: skipping changes
 * no output.  Writes the full standardised stage-2 vectors to x2_h. */
int model_sampler_ar_run(model_sampler *s, model_sample_request *reqs, const model_sampler_piece *p,
                         int np, int rows, int steps, double *evals, double *flops, gt_error *err)
{
    const prep_layout *lay = &s->repr.layout;
    const int L = s->ard.n_tokens, TD = s->ard.dim, P = s->ard.n_ctx, D2 = lay->dim;
    const int C = s->ard.n_cond, H = s->ard.history, K = s->ard.n_profile;
    const int C2 = model_repr_cond2(&s->repr);
    /* 1e-6 below the threshold: a float rounding of the decoder can never
     * lift a skipped voxel to the threshold itself */
    const double cut = (double)lay->threshold_mev * (1.0 - 1e-6);
    int rc;
    memset(s->x2_h, 0, (size_t)rows * D2 * sizeof(float));
    memset(s->prev_h, 0, (size_t)rows * P * sizeof(float));
    for (int i = 0; i < rows; i++)
        s->rem_h[i] = s->edep_h[i] > 0 ? (double)s->edep_h[i] : 0.0;
    if (H)
        memset(s->hist_h, 0, (size_t)rows * H * sizeof(double));
    for (int l = 0; l < L; l++) {
        int32_t lo, hi;
        model_ar_valid(lay, l, &lo, &hi);
        int na = 0;
        for (int i = 0; i < rows; i++) {
            if (!(s->rem_h[i] >= cut))
                continue;
            s->act_h[na] = i;
            float *cd = s->cnd_h + (size_t)na * C;
            const float *c2 = s->c2_h + (size_t)i * C2;
            cd[0] = c2[0];
            cd[1] = c2[1];
            cd[2] = model_ar_remainder_feature(s->rem_h[i] / (double)s->edep_h[i]);
            cd[3] = L > 1 ? (float)l / (float)(L - 1) : 0.0f;
            for (int h = 0; h < H; h++)
                cd[4 + h] = model_ar_remainder_feature(s->hist_h[(size_t)i * H + h]);
            for (int j = 0; j < K; j++)
                cd[4 + H + j] = c2[2 + j];
            memcpy(s->ctx_h + (size_t)na * P, s->prev_h + (size_t)i * P, (size_t)P * sizeof(float));
            na++;
        }
        if (na == 0)
            break;
        if ((rc = model_sampler_check_finite(p, np, s->cnd_h, na, C, s->act_h,
                               "the stage-2 conditions are not finite", err)) ||
            (rc = nn_copy_h2d(s->b, s->c, s->cnd_h, (size_t)na * C * sizeof(float), err)) ||
            (rc = nn_copy_h2d(s->b, s->ctx, s->ctx_h, (size_t)na * P * sizeof(float), err)))
            return rc;
        /* noise of (request seed, row, layer), padding columns at 0 as in training */
        if ((rc = ar_noise(s, reqs, p, np, na, l, lo, hi, err)))
            return rc;
        double ev = 0;
        if ((rc = s->net[1].ops->integrate(s, &s->net[1], na, steps, &ev, err)) ||
            (rc = nn_copy_d2h(s->b, s->tok_h, s->x, (size_t)na * TD * sizeof(float), err)) ||
            (rc = model_sampler_check_finite(p, np, s->tok_h, na, TD, s->act_h,
                                             DIVERGED " in stage 2", err)))
            return rc;
        *evals += ev * na / rows;
        *flops += ev * na / rows * row_flops(&s->net[1]);
        for (int a = 0; a < na; a++) {
            int i = s->act_h[a];
            const float *t = s->tok_h + (size_t)a * TD;
            float *x2 = s->x2_h + (size_t)i * D2;
            memcpy(x2 + lay->n_u + lay->block_off[l], t + 1,
                   (size_t)lay->block_width[l] * sizeof(float));
            memset(s->prev_h + (size_t)i * P, 0, (size_t)P * sizeof(float));
            memcpy(s->prev_h + (size_t)i * P, t + 1, (size_t)lay->block_width[l] * sizeof(float));
            if (l < L - 1) {
                x2[l] = t[0];
                /* the remainder exactly as prep_stick_join will compute it */
                float xs = (float)(t[0] * s->repr.shower.std[l] + s->repr.shower.mean[l]);
                double u = prep_logit_unmap(xs);
                u = u < 0 ? 0 : u > 1 ? 1 : u;
                double placed = u * s->rem_h[i];
                if (H)
                    model_ar_history_push(s->hist_h + (size_t)i * H, H,
                                          placed / (double)s->edep_h[i]);
                s->rem_h[i] -= placed;
            }
        }
    }
    return GT_OK;
}
