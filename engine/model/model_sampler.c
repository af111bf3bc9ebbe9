/* model_sampler: the sampler's API (model_sampler.h): opening it on two
 * stage checkpoints (the geometry, the transforms, each stage's network
 * packed for the fixed-order layer, the buffers of max_batch rows),
 * closing it, a run over requests and its reports.  The layers below are
 * listed in model_sampler_internal.h. */
#include "model_sampler_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "model_ckpt.h"
#include "model_stage.h"
#include "nn_ckpt.h"

void model_sampler_close(model_sampler *s)
{
    if (!s)
        return;
    model_sampler_graphs_clear(s);
    float *dev[] = {s->x,  s->xp, s->v1,   s->v2, s->c,   s->cond,
                    s->t,  s->ca, s->cb,   s->ones, s->ctx, s->xin, s->zeros};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        nn_free(s->b, dev[i]);
    for (unsigned i = 0; s->consts && i < CONST_SLOTS; i++)
        nn_free(s->b, s->consts[i].dev);
    free(s->consts);
    /* the copies' targets came from the backend (pinned on a GPU) */
    nn_host_free(s->b, s->x1_h);
    nn_host_free(s->b, s->x2_h);
    nn_host_free(s->b, s->tok_h);
    float *host[] = {s->t_h,  s->ca_h,   s->cb_h,  s->e_inc_h, s->c1_h,
                     s->c2_h, s->edep_h, s->ctx_h, s->cnd_h,   s->prev_h, s->turn_h};
    free(s->rem_h);
    free(s->hist_h);
    free(s->act_h);
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
    for (int i = 0; i < 2; i++)
        nn_trunk_destroy(s->net[i].trunk);
    if (s->repr_ready)
        model_repr_free(&s->repr);
    model_accept_free(&s->accept);
    feat_layout_free(&s->feats);
    free(s->feat_h);
    free(s->row_h);
    free(s->score_h);
    geo_free(&s->geo);
    free(s);
}

int model_sampler_voxels(const model_sampler *s) { return s->geo.n_voxels; }

float model_sampler_readout_mev(const model_sampler *s) { return s->repr.layout.readout_mev; }

int model_sampler_layers(const model_sampler *s, int *voxels_per_layer, int max)
{
    for (int l = 0; l < s->geo.n_layers && l < max; l++)
        voxels_per_layer[l] = s->geo.layers[l].n_voxels;
    return s->geo.n_layers;
}

double model_sampler_evals_per_shower(const model_sampler *s) { return s->evals_per_shower; }

double model_sampler_decode_seconds(const model_sampler *s) { return s->tally.decode_s; }

double model_sampler_device_seconds(const model_sampler *s) { return s->tally.device_s; }

void model_sampler_set_graphs(model_sampler *s, int on)
{
    s->graphs_on = on != 0;
    model_sampler_graphs_clear(s);
}

int64_t model_sampler_graph_replays(const model_sampler *s) { return s->tally.graph_replays; }

double model_sampler_flops_per_shower(const model_sampler *s) { return s->flops_per_shower; }

static int load_net(model_sampler *s, int stage, int dim, int n_cond, int n_ctx,
                    const model_ckpt_view *v, gt_error *err)
{
    nn_trunk_config tc;
    model_stage_trunk_config_ctx(&s->cfg, stage, dim, n_cond, n_ctx, &tc);
    model_sampler_net *n = &s->net[stage - 1];
    n->dim = dim;
    n->n_cond = n_cond;
    n->n_ctx = n_ctx;
    n->obj = stage == 1 ? s->cfg.stage1.objective : s->cfg.stage2.objective;
    n->ops = model_obj_of(n->obj);
    /* the stage-2 data columns start with the stick-breaking logits (as
     * model_arrays_stage tells the trainer) */
    n->noise_from = stage == 2 && !s->ar ? model_stage_gan_noise_from(s->repr.layout.n_layers)
                                         : 0;
    const void *w = NULL, *cw = NULL;
    size_t wl = 0, cwl = 0;
    int rc;
    if ((rc = model_stage_ckpt_parts(v->weights, v->weights_len, &w, &wl, &cw, &cwl, err)) ||
        (rc = nn_trunk_create(s->b, &tc, &n->trunk, err)) ||
        (rc = nn_ckpt_load(nn_trunk_params(n->trunk), NULL, NULL, w, wl, err)) ||
        (rc = nn_trunk_plan(n->trunk, s->max_batch, err)) ||
        (rc = nn_trunk_pack(n->trunk, err)))
        return gt_error_wrap(err, "stage %d checkpoint", stage);
    /* the sampler checks its inputs once per batch on the host
     * (model_sampler_check_finite): the trunk's own check would read back
     * from the device at every evaluation */
    nn_trunk_set_input_check(n->trunk, 0);
    return GT_OK;
}

/* The checkpoint's vectors against the config: the fields a vector's
 * width cannot tell (rings, ring hit counts, the stage-1 profile). */
static int check_vectors(const model_sampler *s, const model_config *cfg, gt_error *err)
{
    if (s->repr.layout.rings != (cfg->stage2.rings != 0))
        return gt_error_set(err, GT_EFORMAT, "the checkpoint's shower vector %s ring features "
                            "and the config says model.stage2.rings = %s",
                            s->repr.layout.rings ? "has" : "has no",
                            cfg->stage2.rings ? "true" : "false");
    if (s->repr.layout.counts != (cfg->stage2.ring_counts && cfg->stage2.rings))
        return gt_error_set(err, GT_EFORMAT, "the checkpoint's shower vector %s ring hit counts "
                            "and the config says model.stage2.ring_counts = %s",
                            s->repr.layout.counts ? "has" : "has no",
                            cfg->stage2.ring_counts ? "true" : "false");
    if ((s->repr.n_profile != 0) != (cfg->stage1.profile != 0))
        return gt_error_set(err, GT_EFORMAT, "the checkpoint's stage-1 vector %s the shower's "
                            "profile and the config says model.stage1.profile = %s",
                            s->repr.n_profile ? "has" : "has no",
                            cfg->stage1.profile ? "true" : "false");
    return GT_OK;
}

/* The buffers of max_batch rows: device rows (as wide as the widest thing
 * they hold), the step constants' cache, the host's staging, and an
 * autoregressive stage 2's tokens and context.  D: the stage-2 vector, D1:
 * stage 1's, C2: stage 2's conditions, NC: the most conditions a row has.
 * On failure the caller closes the partial sampler. */
static int alloc_buffers(model_sampler *s, int D, int D1, int C2, int NC, gt_error *err)
{
    nn_backend *b = s->b;
    const int B = s->max_batch;
    int rc;
    /* device rows are as wide as the widest thing they hold */
    size_t bd = (size_t)B * (D > s->ard.dim ? D : s->ard.dim);
    float **dev[] = {&s->x, &s->xp, &s->v1, &s->v2, &s->ones};
    for (int i = 0; i < 5; i++)
        if ((rc = nn_alloc(b, bd * sizeof(float), (void **)dev[i], err)))
            return rc;
    if ((rc = nn_alloc(b, (size_t)B * NC * sizeof(float), (void **)&s->c, err)) ||
        (rc = nn_alloc(b, (size_t)B * (1 + NC) * sizeof(float), (void **)&s->cond, err)) ||
        (rc = nn_alloc(b, (size_t)B * sizeof(float), (void **)&s->t, err)) ||
        (rc = nn_alloc(b, (size_t)B * sizeof(float), (void **)&s->ca, err)) ||
        (rc = nn_alloc(b, (size_t)B * sizeof(float), (void **)&s->cb, err)))
        return rc;
    {
        /* one row of 1 from the host, then doubled on the device: a host
         * copy of the whole [B, D] would be the largest buffer of the open
         * (1.7 GB at 65 536 rows), written once and thrown away */
        const size_t row = bd / (size_t)B;
        float *one = malloc(row * sizeof(float));
        if (!one)
            return gt_error_set(err, GT_ENOMEM, "out of memory");
        for (size_t i = 0; i < row; i++)
            one[i] = 1.0f;
        rc = nn_copy_h2d(b, s->ones, one, row * sizeof(float), err);
        free(one);
        for (size_t have = row; rc == GT_OK && have < bd; have *= 2)
            rc = nn_copy_d2d(b, s->ones + have, s->ones,
                             (have < bd - have ? have : bd - have) * sizeof(float), err);
        if (rc)
            return rc;
    }
    s->consts = calloc(CONST_SLOTS, sizeof *s->consts);
    {
        size_t fit = CONST_BYTES / ((size_t)B * sizeof(float));
        s->max_consts = fit < CONST_MAX ? (int)fit : CONST_MAX;
    }
    s->t_h = malloc((size_t)B * sizeof(float));
    s->ca_h = malloc((size_t)B * sizeof(float));
    s->cb_h = malloc((size_t)B * sizeof(float));
    s->e_inc_h = malloc((size_t)B * sizeof(float));
    s->c1_h = malloc((size_t)B * sizeof(float));
    /* what the copies back land in: the backend's host memory (page-locked
     * on a GPU, where a batch's vectors, 480 MB at 16 384 dataset-2 rows,
     * would otherwise cross through a staging buffer) */
    if ((rc = nn_host_alloc(b, (size_t)B * D1 * sizeof(float), (void **)&s->x1_h, err)) ||
        (rc = nn_host_alloc(b, bd * sizeof(float), (void **)&s->x2_h, err)))
        return rc;
    s->c2_h = malloc((size_t)B * C2 * sizeof(float));
    s->edep_h = malloc((size_t)B * sizeof(float));
    s->turn_threads = 1;
#ifdef _OPENMP
    s->turn_threads = omp_get_max_threads();
#endif
    s->turn_h = malloc((size_t)s->turn_threads * s->geo.n_voxels * sizeof(float));
    if (!s->consts || !s->t_h || !s->ca_h || !s->cb_h || !s->e_inc_h || !s->c1_h || !s->x1_h ||
        !s->c2_h || !s->edep_h || !s->x2_h || !s->turn_h)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    if (s->ar) {
        size_t P = (size_t)s->ard.n_ctx;
        if ((rc = nn_alloc(b, (size_t)B * P * sizeof(float), (void **)&s->ctx, err)) ||
            (rc = nn_alloc(b, (size_t)B * (s->ard.dim + P) * sizeof(float), (void **)&s->xin,
                           err)) ||
            (rc = nn_alloc(b, (size_t)B * s->ard.dim * sizeof(float), (void **)&s->zeros, err)) ||
            (rc = nn_memset(b, s->zeros, 0, (size_t)B * s->ard.dim * sizeof(float), err)))
            return rc;
        if ((rc = nn_host_alloc(b, (size_t)B * s->ard.dim * sizeof(float), (void **)&s->tok_h,
                                err)))
            return rc;
        s->ctx_h = malloc((size_t)B * P * sizeof(float));
        s->cnd_h = malloc((size_t)B * NC * sizeof(float));
        s->prev_h = malloc((size_t)B * P * sizeof(float));
        s->rem_h = malloc((size_t)B * sizeof(double));
        s->hist_h = calloc((size_t)B * (s->ard.history ? s->ard.history : 1), sizeof(double));
        s->act_h = malloc((size_t)B * sizeof(int));
        if (!s->tok_h || !s->ctx_h || !s->cnd_h || !s->prev_h || !s->rem_h || !s->hist_h ||
            !s->act_h)
            return gt_error_set(err, GT_ENOMEM, "out of memory");
    }
    return GT_OK;
}

int model_sampler_open(nn_backend *b, const model_config *cfg, const void *stage1, size_t len1,
                       const void *stage2, size_t len2, int max_batch, model_sampler **out,
                       gt_error *err)
{
    return model_sampler_open_xml(b, cfg, NULL, 0, stage1, len1, stage2, len2, max_batch, out,
                                  err);
}

int model_sampler_open_xml(nn_backend *b, const model_config *cfg, const void *geo_xml,
                           size_t geo_len, const void *stage1, size_t len1, const void *stage2,
                           size_t len2, int max_batch, model_sampler **out, gt_error *err)
{
    *out = NULL;
    if (max_batch < 1 || max_batch > (1 << 24))
        return gt_error_set(err, GT_EINVAL, "max_batch %d outside [1, %d]", max_batch, 1 << 24);
    model_ckpt_view v1, v2;
    int rc;
    if ((rc = model_ckpt_unpack(stage1, len1, &v1, err)) ||
        (rc = model_ckpt_unpack(stage2, len2, &v2, err)))
        return rc;
    if (v1.stage != 1 || v2.stage != 2)
        return gt_error_set(err, GT_EINVAL, "need a stage-1 and a stage-2 checkpoint (got %d, %d)",
                            v1.stage, v2.stage);
    model_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    s->b = b;
    s->cfg = *cfg;
    s->max_batch = max_batch;
    s->graphs_on = 1;
    float threshold = 0;
    if (geo_xml && geo_len > (size_t)INT_MAX) {
        rc = gt_error_set(err, GT_EINVAL, "a geometry file of %zu bytes", geo_len);
        goto fail;
    }
    /* the geometry's detector threshold: the representation's, and the
     * readout threshold of transforms recorded before they carried one
     * (model_repr_from_bytes) */
    if ((rc = geo_xml ? geo_load_memory(&s->geo, geo_xml, (int)geo_len, err)
                      : model_geometry_load(cfg->geometry, &s->geo, err)) ||
        (rc = model_geometry_threshold(&s->geo, &threshold, err)) ||
        (rc = model_repr_from_bytes(&s->repr, &s->geo, threshold, v2.repr, v2.repr_len, err)))
        goto fail;
    s->repr.layout.dequantize = cfg->stage2.dequantize;
    s->repr.layout.voxel_alpha = cfg->stage2.voxel_alpha;
    s->repr.layout.keep_largest = cfg->stage2.keep_largest;
    s->repr_ready = 1;
    if ((rc = check_vectors(s, cfg, err)))
        goto fail;
    /* the count features' meaning; the vector's width cannot tell it */
    prep_layout_set_count_stick(&s->repr.layout, cfg->stage2.count_stick);
    const int D = s->repr.layout.dim;
    const int D1 = model_repr_dim1(&s->repr), C2 = model_repr_cond2(&s->repr);
    s->ar = cfg->stage2.mode == MODEL_MODE_AUTOREGRESSIVE;
    model_ar_dims_of(&s->repr.layout, s->ar ? cfg->stage2.history : 0, s->repr.n_profile,
                     &s->ard);
    /* conditions per row: stage 1 has 1, oneshot stage 2 2 (4 with the
     * profile), tokens 4 + H (+ 2) */
    const int NC = s->ard.n_cond > C2 ? s->ard.n_cond : C2;
    if ((rc = load_net(s, 1, D1, 1, 0, &v1, err)) ||
        (rc = s->ar ? load_net(s, 2, s->ard.dim, s->ard.n_cond, s->ard.n_ctx, &v2, err)
                    : load_net(s, 2, D, C2, 0, &v2, err)))
        goto fail;
    if ((rc = alloc_buffers(s, D, D1, C2, NC, err)))
        goto fail;
    *out = s;
    return GT_OK;
fail:
    model_sampler_close(s);
    return rc;
}

int model_sampler_run(model_sampler *s, model_sample_request *reqs, int n_reqs, int steps,
                      gt_error *err)
{
    s->tally = (model_sampler_tally){0};
    double scored = 0.0;
    int rc = s->has_accept ? model_sampler_accept_run(s, reqs, n_reqs, steps, &scored, err)
                           : model_sampler_batches(s, reqs, n_reqs, steps, err);
    int64_t showers = 0;
    for (int r = 0; r < n_reqs; r++)
        showers += reqs[r].n > 0 ? reqs[r].n : 0;
    if (rc == GT_OK && showers > 0) {
        /* per shower kept: every draw's networks, and the test's scoring
         * (a multiply-add per weight) of every draw it judged */
        s->evals_per_shower = s->tally.evals_sum / (double)showers;
        s->flops_per_shower =
            (s->tally.flops_sum + scored * 2.0 * (double)s->accept.net.n_weights) / (double)showers;
        s->draws_per_shower = (double)s->tally.evals_rows / (double)showers;
    }
    return rc;
}
