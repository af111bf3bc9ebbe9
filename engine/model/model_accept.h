/* model_accept: a learned acceptance test for generated showers.
 *
 * Discriminator rejection sampling (Azadi et al. 2019), the unweighted form
 * of the classifier reweighting HEP generators use (DCTR).  A classifier D
 * is trained to tell a run's training showers (label 1) from showers its
 * best checkpoints generated (label 0), on the high-level features giant
 * eval's classifier reads (feat_classifier_row).  Where D is calibrated,
 * r = D / (1 - D) = exp(z), z its logit, estimates p_train(x | E) /
 * p_gen(x | E).  A sampler that keeps a shower with probability
 * min(1, r / M) and otherwise draws again at the same incident energy
 * serves p_gen(x | E) min(r, M) / Z(E): the training distribution wherever
 * r < M.  M is a quantile of r over generated showers: a higher one
 * corrects more and keeps fewer (a kept shower costs 1 / acceptance draws).
 * After max_attempts draws the last is kept whatever it scores, so that a
 * shower's cost is bounded.
 *
 * Blob (little-endian):
 *   "GIANTACC" | u32 version 1 | u32 d | u32 hidden | u32 depth |
 *   f32 slope | f64 log_cap | u32 max_attempts | f64 acceptance | f64 auc |
 *   32 bytes: sha256 of the stage-1 checkpoint it was trained against |
 *   32 bytes: the same of stage 2 | f64 mean[d] | f64 inv_std[d] |
 *   f32 weights[model_classify_net_count(d, hidden, depth)] |
 *   u32 CRC-32 (nn_ckpt_crc32) of every byte before it. */
#ifndef MODEL_ACCEPT_H
#define MODEL_ACCEPT_H

#include <stddef.h>
#include <stdint.h>

#include "geo.h"
#include "gt_error.h"
#include "model_classify.h"
#include "model_config.h"
#include "nn_backend.h"

typedef struct model_accept {
    model_classify_net net;    /* D: training showers score high */
    double log_cap;            /* ln M */
    int max_attempts;          /* draws per shower at most, >= 1 */
    double acceptance;         /* mean keep probability over the generated rows trained on */
    double auc;                /* D's held-out AUC when trained (0.5: nothing to correct) */
    uint8_t ckpt_sha256[2][32];/* the stage checkpoints it was trained against (zeros: unknown) */
} model_accept;

/* Trains D on classifier rows (feat_classifier_row, d values each) of the
 * training showers and of generated ones with cls (one test at cls->seed;
 * model_classify_fit), then sets log_cap to the cap_quantile quantile
 * (in (0, 1]) of the generated rows' logits and `acceptance` to the mean
 * keep probability over them.  max_attempts >= 1. */
int model_accept_train(nn_backend *b, const float *train_rows, int64_t n_train,
                       const float *gen_rows, int64_t n_gen, int d,
                       const model_classify_config *cls, double cap_quantile, int max_attempts,
                       model_accept *out, gt_error *err);

/* What model_accept_for_run did. */
typedef struct model_accept_report {
    int64_t showers;        /* training showers, and as many generated at their energies */
    double auc;             /* the classifier's held-out AUC */
    double acceptance;      /* mean keep probability of the generated showers */
    double generate_s;      /* seconds generating the showers */
    double train_s;         /* seconds of features and classifier */
} model_accept_report;

/* The test of a run whose config asks for one (model.accept): the run's
 * training showers (dataset.*, its training split, the first
 * model.accept.showers of them or all), as many showers generated from the
 * stage checkpoints given (the best ones) at the same incident energies
 * with the run's sampler settings, a classifier of model.accept's size
 * trained between them (seed train.seed), the cap at
 * model.accept.cap_quantile.  ckpt_sha256 (may be NULL: zeros) is the
 * sha256 of stage1 and stage2, which the test records as the checkpoints
 * it belongs to.  *blob (malloc'ed) is the packed test.
 * should_stop (may be NULL) is asked between the steps and between the
 * classifier's epochs: GT_ECANCELLED. */
int model_accept_for_run(nn_backend *b, const model_config *cfg, const char *data_dir,
                         const void *stage1, size_t len1, const void *stage2, size_t len2,
                         const uint8_t ckpt_sha256[2][32], int (*should_stop)(void *user),
                         void *stop_user, void **blob,
                         size_t *blob_len, model_accept_report *rep, gt_error *err);

/* min(1, exp(z - log_cap)): the probability of keeping a shower of logit z. */
double model_accept_keep_probability(const model_accept *a, double z);

/* The logit of one classifier row (model_classify_net_logit). */
double model_accept_logit(const model_accept *a, const float *row, float *scratch);

/* GT_OK when the test reads as many features a shower as geometry g gives
 * (feat_classifier_width at g's readout threshold); else GT_EINVAL naming
 * both counts.  What a test from outside (a model file, a job's upload)
 * is checked by before it is stored. */
int model_accept_fits(const model_accept *a, const geo_geometry *g, gt_error *err);

/* *out is malloc'ed. */
int model_accept_pack(const model_accept *a, void **out, size_t *out_len, gt_error *err);
/* Checks magic, version, sizes and the CRC; *a owns copies (model_accept_free). */
int model_accept_unpack(const void *buf, size_t len, model_accept *a, gt_error *err);
void model_accept_free(model_accept *a);   /* zeroes it; NULL ok */

#endif
