/* feat: the CaloChallenge high-level features of a shower.
 *
 * Per shower: E_tot / E_inc, E_tot, and for every layer with voxels: the
 * layer energy, the energy-weighted centre in eta, phi (layers binned in
 * angle only, as in CaloChallenge) and r, the widths sqrt(<x^2> - <x>^2) of
 * each, and the sparsity (fraction of voxels at or under the threshold).
 * The histogram binning of each feature follows the CaloChallenge
 * evaluation code (see metric.h). */
#ifndef FEAT_H
#define FEAT_H

#include <stdint.h>

#include "geo.h"
#include "gt_error.h"

typedef enum feat_group {
    FEAT_ETOT_EINC = 0,
    FEAT_ETOT,
    FEAT_E_LAYER,
    FEAT_EC_ETA,
    FEAT_EC_PHI,
    FEAT_EC_R,
    FEAT_WIDTH_ETA,
    FEAT_WIDTH_PHI,
    FEAT_WIDTH_R,
    FEAT_SPARSITY,
    FEAT_N_GROUPS
} feat_group;

/* How a feature is histogrammed. */
typedef enum feat_binning {
    FEAT_BINS_LINEAR = 0, /* nbins uniform bins on [lo, hi]                       */
    FEAT_BINS_LOG_REF,    /* nbins log bins from lo to the reference's maximum    */
} feat_binning;

typedef struct feat_info {
    char name[48];     /* e.g. "E_layer_12", "EC_eta_3", "Etot/Einc" */
    feat_group group;
    int layer_id;      /* -1 for whole-shower features                */
    feat_binning binning;
    double lo, hi;
    int nbins;
} feat_info;

typedef struct feat_layout {
    const geo_geometry *geo; /* borrowed */
    float threshold_mev;
    int n_features;
    feat_info *info;
} feat_layout;

const char *feat_group_name(feat_group g);

/* threshold_mev: voxels at or under it count as empty for sparsity. */
int feat_layout_init(feat_layout *f, const geo_geometry *g, float threshold_mev, gt_error *err);
void feat_layout_free(feat_layout *f);

/* out: n_features values for one shower. */
void feat_compute(const feat_layout *f, const float *shower, float e_inc, float *out);

/* n showers (rows of n_voxels) -> n * n_features, in parallel. */
void feat_compute_batch(const feat_layout *f, const float *showers, const float *e_inc,
                        int64_t n, float *out);

/* The high-level classifier's input row (giant eval's, and any model that
 * scores showers the way it does): log10 E_inc, then every feature, the
 * energies (E_tot, E_layer) as log10(x + 1e-8) as CaloChallenge feeds them
 * (a classifier standardises every column itself).  feats: one shower's
 * n_features values; out: feat_classifier_width(f) values. */
int feat_classifier_width(const feat_layout *f);
void feat_classifier_row(const feat_layout *f, const float *feats, float e_inc, float *out);

#endif
