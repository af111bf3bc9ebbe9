/* eval_spectrum: the voxel energy spectrum of a sample of showers.
 *
 * The high-level features (feat.h) are all sums over a layer: a model can
 * get every one of them right and still put the wrong energy in each hit.
 * The spectrum looks at the hits themselves: every non-empty voxel of every
 * shower, pooled per group of layers by depth (layers 0-4, 5-9, 10-19 and
 * 20 onwards: the sparse start of a shower, its rise, its maximum, its
 * tail), histogrammed twice:
 *  - E_vox / E_inc on 100 log bins from 1e-8 to 1 (the shape of a hit's
 *    share whatever the incident energy);
 *  - E_vox in MeV on 100 log bins from 1e-3 to 1e6 (where the readout
 *    threshold and the deposits of single particles sit).
 * A value outside a range counts in the first or last bin, so a hit under
 * the readout threshold is seen, not dropped.  The bins are fixed (not
 * drawn from the reference) so that a sample is histogrammed block by
 * block as its showers arrive.  Each histogram is one feature of the group
 * "voxel_energy"; its separation power is metric_separation_power of the
 * two histograms (normalised over all hits: the spectrum's shape, not the
 * number of hits, which the sparsity features already judge). */
#ifndef EVAL_SPECTRUM_H
#define EVAL_SPECTRUM_H

#include <stdint.h>

#include "geo.h"

#define EVAL_SPECTRUM_BINS 100
#define EVAL_SPECTRUM_DEPTHS 4
#define EVAL_SPECTRUM_MAX (2 * EVAL_SPECTRUM_DEPTHS)

typedef struct eval_spectrum_feature {
    char name[48];       /* e.g. "E_vox/E_inc_L0-4", "E_vox_MeV_L20-44" */
    int per_einc;        /* 1: E_vox / E_inc; 0: MeV                   */
    int layer_lo, layer_hi; /* layer indices [lo, hi]                   */
} eval_spectrum_feature;

typedef struct eval_spectrum {
    int n;                                   /* features: 2 per depth group with voxels */
    eval_spectrum_feature f[EVAL_SPECTRUM_MAX];
    int group_of_layer[GEO_MAX_LAYERS];      /* depth group, -1 for none */
    double counts[EVAL_SPECTRUM_MAX][EVAL_SPECTRUM_BINS];
    int64_t hits;                            /* non-empty voxels counted */
} eval_spectrum;

/* The features of a geometry, counts zero. */
void eval_spectrum_init(eval_spectrum *s, const geo_geometry *g);

/* Adds m showers (m x n_voxels, MeV) with their incident energies. */
void eval_spectrum_add(eval_spectrum *s, const geo_geometry *g, const float *showers,
                       const float *e_inc, int64_t m);

/* The 101 fixed edges of feature k's bins. */
void eval_spectrum_edges(const eval_spectrum *s, int k, double *edges);

/* Separation power of feature k of a against b (same geometry). */
double eval_spectrum_separation(const eval_spectrum *a, const eval_spectrum *b, int k);

#endif
