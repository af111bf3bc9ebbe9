/* model_score.h: how the model tests judge a trained model (header only).
 *
 * score_samples samples showers from a pair of stage checkpoints for the
 * incident energies of a reference data set and compares them with it
 * (CaloChallenge separation power, engine/data/metric.h); a shower with a
 * voxel under the sampler's readout threshold fails a check.
 * score_untrained_checkpoints makes the baseline: checkpoints of an
 * untrained model with the transforms fitted to a data set, which already
 * has the right marginals (its noise goes through the fitted
 * standardisation), so "trained beats untrained" is a real bar.
 * test_model_train.c and test_model_variants.c both use them. */
#ifndef MODEL_SCORE_H
#define MODEL_SCORE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "feat.h"
#include "metric.h"
#include "model_ckpt.h"
#include "model_data.h"
#include "model_sampler.h"
#include "nn_ckpt.h"

typedef struct score {
    double all;       /* mean separation power over all features */
    double etot_einc; /* mean of the E_tot/E_inc group             */
    double e_layer;   /* mean of the layer-energy group             */
    double evals;     /* network calls per shower of the sampling   */
    int bad_voxels;   /* generated voxels that are negative or not finite */
} score;

/* Showers for every incident energy of ref (seed 5, batches of 256) from
 * the checkpoints (ck1, ck2), scored against ref's showers.  A sampler that
 * does not open or run fails a check, and out->all is then 1. */
static void score_samples(nn_backend *b, const model_config *cfg, const void *ck1, size_t l1,
                          const void *ck2, size_t l2, const model_dataset *ref, score *out)
{
    gt_error err;
    memset(out, 0, sizeof *out);
    out->all = 1.0;
    model_sampler *s = NULL;
    int rc = model_sampler_open(b, cfg, ck1, l1, ck2, l2, 256, &s, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    if (rc)
        return;
    const int V = ref->geo.n_voxels;
    int64_t n = ref->n;
    float *gen = malloc((size_t)n * V * sizeof(float));
    model_sample_request rq = {ref->e_inc, n, 5, 0, gen, NULL, 0};
    rc = model_sampler_run(s, &rq, 1, 0, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    out->evals = model_sampler_evals_per_shower(s);
    const float readout = model_sampler_readout_mev(s);
    size_t under = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) {
        out->bad_voxels += gen[i] < 0 || !isfinite(gen[i]);
        under += gen[i] != 0.0f && !(gen[i] >= readout);
    }
    CHECK_MSG(under == 0 && readout >= ref->threshold_mev,
              "%zu generated voxels under the readout threshold of %g MeV (the geometry's: %g)",
              under, readout, ref->threshold_mev);
    feat_layout fl;
    feat_layout_init(&fl, &ref->geo, ref->threshold_mev, &err);
    float *fa = malloc((size_t)n * fl.n_features * sizeof(float));
    float *fb = malloc((size_t)n * fl.n_features * sizeof(float));
    feat_compute_batch(&fl, gen, ref->e_inc, n, fa);
    feat_compute_batch(&fl, ref->showers, ref->e_inc, n, fb);
    metric_report rep;
    memset(&rep, 0, sizeof rep);
    rc = metric_compare(&fl, fa, NULL, n, fb, NULL, n, 1, &rep, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    out->all = rep.all.mean;
    out->etot_einc = rep.group[FEAT_ETOT_EINC].mean;
    out->e_layer = rep.group[FEAT_E_LAYER].mean;
    metric_report_free(&rep);
    feat_layout_free(&fl);
    free(fa);
    free(fb);
    free(gen);
    model_sampler_close(s);
}

/* Checkpoints ck[1], ck[2] (malloc'ed, lengths in len[]) of an untrained
 * model with the transforms fitted to ds; val0, when not NULL, gets the
 * untrained stage 2's validation loss (the loss at step 0). */
static void score_untrained_checkpoints(nn_backend *b, const model_config *cfg,
                                        const model_dataset *ds, void **ck, size_t *len,
                                        float *val0)
{
    gt_error err;
    model_arrays a;
    CHECK(model_arrays_build(cfg, ds, &a, &err) == GT_OK);
    size_t rl = model_repr_size(&a.repr), got;
    uint8_t *repr = malloc(rl);
    model_repr_to_bytes(&a.repr, repr, rl, &got, &err);
    for (int stage = 1; stage <= 2; stage++) {
        model_stage_data d = model_arrays_stage(&a, stage);
        model_stage *s = NULL;
        CHECK(model_stage_create(b, cfg, stage, &d, &s, &err) == GT_OK);
        if (stage == 2 && val0)
            CHECK(model_stage_validate(s, val0, &err) == GT_OK);
        void *w;
        size_t wl;
        CHECK(nn_ckpt_save(nn_trunk_params(model_stage_trunk(s)), NULL, NULL, &w, &wl, &err) ==
              GT_OK);
        model_ckpt_pack(stage, 0, NAN, repr, got, w, wl, &ck[stage], &len[stage], &err);
        free(w);
        model_stage_destroy(s);
    }
    free(repr);
    model_arrays_free(&a);
}

#endif
