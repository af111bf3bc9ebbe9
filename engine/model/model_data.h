/* model_data: where a run's showers come from, and how they become the two
 * stages' training arrays.
 *
 * Geometry: "dataset_1_photons", "dataset_1_pions", "dataset_2" and
 * "dataset_3" name the CaloChallenge binning files compiled into the binary
 * (configs/geometry/); anything else is a path to a binning XML file.
 *
 * Showers: a CaloChallenge HDF5 file (dataset.path) or a built-in
 * simulator (dataset.synthetic, the default), GFlash or, with
 * dataset.simulator "cascade", the cascade simulator.
 *
 * Representation (see engine/data/README.md for the prep_ transforms):
 *   condition  c = standardised log10(E_inc / MeV)
 *   stage 1    x = standardised ln(E_dep / E_inc)   (D = 1, C = 1: c)
 *              with model.stage1.profile also the shower's longitudinal
 *              profile: [ln ratio, depth, spread]   (D = 3)
 *   stage 2    x = standardised prep vector          (D = L - 1 + V,
 *                  stick-breaking logits then voxel-fraction logits)
 *              conditions c then stage 1's standardised vector
 *              (C = 1 + D1: 2, or 4 with the profile)
 * ln of the ratio rather than a logit: with voxels scaled by the sampling
 * fraction the ratio fluctuates around 1 and may exceed it.  Statistics are
 * fitted on the training split only and travel with every checkpoint. */
#ifndef MODEL_DATA_H
#define MODEL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "geo.h"
#include "gt_error.h"
#include "model_config.h"
#include "model_stage.h"
#include "prep.h"

/* Loads a built-in geometry by name, or a binning XML file. */
int model_geometry_load(const char *name_or_path, geo_geometry *g, gt_error *err);
/* 1 when name is one of the embedded geometries (dataset_1_photons,
 * dataset_1_pions, dataset_2, dataset_3): the only ones the service takes
 * from a client, who must not make it open files by path. */
int model_geometry_is_builtin(const char *name);
/* The bytes of a built-in geometry's XML file (they live as long as the
 * process): what an exported model carries, and what an imported one's
 * geometry must equal when its config names a built-in.  GT_ENOTFOUND for
 * any other name. */
int model_geometry_builtin_xml(const char *name, const void **xml, size_t *len, gt_error *err);

/* Readout threshold (MeV) of the detector a geometry describes. */
int model_geometry_threshold(const geo_geometry *g, float *threshold_mev, gt_error *err);

/* The showers of a run, in memory. */
typedef struct model_dataset {
    geo_geometry geo;
    float threshold_mev;
    int64_t n;
    float *e_inc;      /* [n]    MeV */
    float *showers;    /* [n, V] MeV */
} model_dataset;

/* Reads dataset.path or simulates dataset.synthetic (capped by
 * dataset.max_showers).  data_dir, when not NULL, is where relative dataset
 * paths are looked up. */
int model_dataset_load(const model_config *cfg, const char *data_dir, model_dataset *ds,
                       gt_error *err);
void model_dataset_free(model_dataset *ds);

/* model.stage1.profile: stage 1 also draws where the shower's energy lies
 * in depth, as the energy-weighted mean of its layers' index and their
 * energy-weighted spread about it, both over L - 1 (0 for a shower with no
 * energy).  Why: each layer's radial shape and hits follow its depth
 * relative to the shower's maximum, which a layer-by-layer stage 2 cannot
 * know before the later layers exist; with the profile among its
 * conditions, every layer knows it from the start. */
#define MODEL_PROFILE_DIM 2

/* The shower's profile features (MODEL_PROFILE_DIM values) from its voxels. */
void model_profile_of(const geo_geometry *g, const float *shower, float *out);

/* The fitted transforms: what a sampler needs besides the weights. */
typedef struct model_repr {
    prep_layout layout;     /* borrows geo */
    prep_stats cond;        /* dim 1: log10 E_inc             */
    prep_stats ratio;       /* stage 1's vector: dim 1 (ln(E_dep / E_inc)),
                             * or 1 + MODEL_PROFILE_DIM with the profile */
    prep_stats shower;      /* dim L - 1 + V                   */
    int n_profile;          /* 0, or MODEL_PROFILE_DIM: ratio.dim - 1 */
} model_repr;

/* Stage 1's vector width (1 + n_profile) and stage 2's condition width
 * (c, then stage 1's vector). */
static inline int model_repr_dim1(const model_repr *r) { return 1 + r->n_profile; }
static inline int model_repr_cond2(const model_repr *r) { return 2 + r->n_profile; }

void model_repr_free(model_repr *r);
/* The transforms as stored in every checkpoint (and a model file's
 * transforms.bin), little-endian: "GTRP", version (u8, 2) and three zero
 * bytes; the condition's, stage 1's and the shower vector's statistics,
 * each as a u64 length and its prep_stats bytes; then (version 2) the
 * readout threshold layout.readout_mev as an f64 in MeV. */
size_t model_repr_size(const model_repr *r);
int model_repr_to_bytes(const model_repr *r, uint8_t *buf, size_t cap, size_t *len,
                        gt_error *err);
/* geo must outlive r.  threshold_mev is the geometry's detector threshold
 * (model_geometry_threshold): the representation's, and the readout
 * threshold of a version-1 block, which has none of its own. */
int model_repr_from_bytes(model_repr *r, const geo_geometry *geo, float threshold_mev,
                          const uint8_t *buf, size_t len, gt_error *err);

/* Autoregressive stage 2: a shower is a sequence of L tokens, one per layer
 * with voxels.  Token l (dim = 1 + the largest layer's voxel count):
 *   col 0       the standardised stick-breaking logit u_l (padding for the
 *               last layer, which takes what is left)
 *   cols 1..n_l the standardised voxel-fraction logits of layer l
 *   the rest    padding (0; the trainer zeroes its noise and the sampler
 *               ignores it)
 * Conditions (4 + history + profile): c, z (the first two stage-2
 * conditions), the remainder
 * feature 1 + log10(max(r_l, 1e-6)) / 6 of the stick-breaking remainder r_l
 * (the share of E_dep not yet placed in layers < l), the layer position
 * l / (L - 1), then (model.stage2.history = H > 0) the same feature of the
 * shares of E_dep in layers l - 1, ..., l - H (0 before layer 0): where the
 * shower stands on its longitudinal profile, which sets its radial shape
 * and which the remainder alone does not tell; then (model.stage1.profile)
 * stage 1's standardised profile features, the same for every layer of a
 * shower.  Context (n_ctx = largest layer's voxel count): the previous
 * layer's standardised voxel logits (zeros for layer 0), which is the teacher-
 * forced input in training and the generated token in sampling. */
typedef struct model_ar_dims {
    int n_tokens;  /* L */
    int dim;       /* token width */
    int n_ctx;     /* previous-layer context width */
    int history;   /* H: previous layers' shares among the conditions */
    int n_profile; /* K: stage 1's profile features among them (after H) */
    int n_cond;    /* 4 + H + K */
} model_ar_dims;

void model_ar_dims_of(const prep_layout *p, int history, int n_profile, model_ar_dims *d);
/* The remainder condition of a stick-breaking remainder r in [0, 1] (and
 * of a layer's share of E_dep in the history conditions). */
float model_ar_remainder_feature(double r);
/* The history of a shower's previous layers' shares (newest first, history
 * entries): pushes the share of the layer just placed. */
void model_ar_history_push(double *share, int history, double layer_share);
/* n showers (standardised stage-2 vectors x2 [n, dim2] and conditions c2
 * [n, model_repr_cond2(r)]) -> n * L token rows: tok [.., dim],
 * cond [.., 4 + history + r->n_profile],
 * ctx [.., n_ctx] and valid [.., 2] (the non-padding column range [lo, hi)
 * of each row). */
void model_ar_tokens(const model_repr *r, int history, const float *x2, const float *c2,
                     int64_t n, float *tok, float *cond, float *ctx, int32_t *valid);
/* The valid column range of token l. */
void model_ar_valid(const prep_layout *p, int l, int32_t *lo, int32_t *hi);

/* Standardised arrays of both stages for one split, plus the fitted
 * transforms.  All arrays are owned (free with model_arrays_free). */
typedef struct model_arrays {
    model_repr repr;
    int64_t n_train, n_val;
    float *x1_train, *c1_train, *x1_val, *c1_val;   /* stage 1: D dim1, C 1 */
    float *x2_train, *c2_train, *x2_val, *c2_val;   /* stage 2: D dim, C cond2 */
    int dim2;
    /* stage 2 in autoregressive mode (NULL otherwise): one row per (shower,
     * layer), shower-major; see model_ar_tokens. */
    int ar;
    model_ar_dims ar_dims;
    float *t2_train, *tc_train, *tx_train, *t2_val, *tc_val, *tx_val;
    int32_t *tv_train, *tv_val;
    /* token rows of each split: n * L, or fewer with
     * model.stage2.skip_spent_layers (the rows the sampler never makes) */
    int64_t n_tok_train, n_tok_val;
    float *edep_train, *edep_val; /* E_dep (MeV) per shower, while building */
} model_arrays;

/* Splits (dataset.val_fraction, dataset.split_seed), encodes, fits the
 * statistics on the training rows and standardises both splits; records
 * the training showers' smallest hit as the readout threshold
 * (repr.layout.readout_mev). */
int model_arrays_build(const model_config *cfg, const model_dataset *ds, model_arrays *a,
                       gt_error *err);
void model_arrays_free(model_arrays *a);
/* The trainer's view of one stage. */
model_stage_data model_arrays_stage(const model_arrays *a, int stage);

/* Sampling-side transforms (host, n rows). */
void model_repr_conditions(const model_repr *r, const float *e_inc, int64_t n, float *c1);
/* x1 (standardised stage-1 output, [n, dim1]) -> E_dep; also writes the
 * stage-2 conditions c2 [n, cond2]. */
void model_repr_energy(const model_repr *r, const float *e_inc, const float *c1,
                       const float *x1, int64_t n, float *e_dep, float *c2);
/* x2 (standardised stage-2 output, modified in place) -> showers [n, V]. */
void model_repr_showers(const model_repr *r, float *x2, const float *e_dep, int64_t n,
                        float *showers);

#endif
