/* eval_core: the CaloChallenge comparison of a candidate sample of showers
 * with a reference, as `giant eval` and the service's evaluations make it.
 *
 * One code path for both, so the command's --json file and a stored
 * evaluation hold the same document for the same showers and seed:
 *  - a sample keeps each shower's high-level features (feat.h), its
 *    incident energy and, when the low-level classifier is wanted, its
 *    voxels / E_inc with log10 E_inc; it is filled from a file
 *    (eval_core_sample_read) or block by block from showers in memory
 *    (eval_core_sample_put: the service's generated showers);
 *  - eval_core_compare: separation power per feature and group, the voxel
 *    energy spectrum's (eval_spectrum.h), FPD and KPD (metric.h), and the
 *    AUCs of classifiers of two families, the CaloChallenge MLP
 *    (model_classify.h) and gradient-boosted trees (eval_trees.h), on the
 *    high-level features and on the voxels, with the high-level trees'
 *    breakdown by depth and by feature kind;
 *  - eval_core_json: the document, the comparison at the top level, the
 *    floor (a second reference against the same reference) under "floor",
 *    and the histograms of every feature (shared bin edges, counts of each
 *    sample) so a browser can draw them.
 * Depends on Jansson and the engine's calo_h5, feat, metric, geo and
 * model_classify; nothing of the service. */
#ifndef EVAL_CORE_H
#define EVAL_CORE_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "eval_spectrum.h"
#include "eval_trees.h"
#include "feat.h"
#include "geo.h"
#include "gt_error.h"
#include "metric.h"
#include "model_classify.h"
#include "nn_backend.h"

/* Dump flags of the document wherever it is written: nine significant
 * digits, as the command always wrote them, so a document read back and
 * written again is the same text. */
#define EVAL_CORE_JSON_FLAGS JSON_REAL_PRECISION(9)

/* One sample's showers as the comparisons use them. */
typedef struct eval_core_sample {
    char label[256];   /* a file path, or what the service generated     */
    int64_t n;
    int n_features;
    int voxels;
    float *feats;      /* n x n_features */
    float *e_inc;      /* n */
    float *low;        /* n x (voxels + 1): voxels / E_inc, then log10 E_inc; or NULL */
    eval_spectrum spec; /* the voxel energy spectrum of every shower put */
} eval_core_sample;

/* The classifiers: two families on two inputs. */
typedef enum eval_core_cls {
    EVAL_CORE_MLP_HIGH = 0, /* the CaloChallenge MLP on the high-level features */
    EVAL_CORE_MLP_LOW,      /* the CaloChallenge MLP on the voxels               */
    EVAL_CORE_TREES_HIGH,   /* gradient-boosted trees on the high-level features */
    EVAL_CORE_TREES_LOW,    /* gradient-boosted trees on the voxels              */
    EVAL_CORE_N_CLS
} eval_core_cls;

/* "high", "low", "trees_high", "trees_low": the document's keys. */
const char *eval_core_cls_key(eval_core_cls k);

/* Subsets of the high-level features the breakdown trains on: three
 * depths (layers 0-9, 10-24, 25 on) and each feature kind (feat_group)
 * alone over all layers; each with log10 E_inc. */
#define EVAL_CORE_MAX_SUBSETS (3 + FEAT_N_GROUPS)

/* What to compute. */
typedef struct eval_core_options {
    int separation;        /* separation power, groups and histograms */
    int distances;         /* FPD and KPD */
    int classifier[EVAL_CORE_N_CLS]; /* which to train (eval_core_cls) */
    model_classify_config cls;
    eval_trees_config trees;         /* seed and repeats: cls's        */
    /* The breakdown: the high-level trees (the MLP when the trees are
     * not trained) again on each subset. */
    int breakdown;
    uint64_t seed;         /* FPD/KPD subsets; the classifier's is cls.seed */
    /* Optional: asked before each classifier and each of its epochs;
     * non-zero stops the comparison with GT_ECANCELLED (a service shutting
     * down waits for one classifier epoch at most, not for every repeat). */
    int (*should_stop)(void *user);
    void *stop_user;
} eval_core_options;

/* Everything but the breakdown, classifiers with the defaults of
 * model_classify.h and eval_trees.h, seed 42. */
void eval_core_options_default(eval_core_options *o);

/* Room for n showers (want_low: the low-level rows too). */
int eval_core_sample_alloc(eval_core_sample *s, const char *label, int64_t n,
                           const feat_layout *fl, int want_low, gt_error *err);

/* Rows [row, row + m) from m showers (m x voxels, MeV) and their energies. */
void eval_core_sample_put(eval_core_sample *s, const feat_layout *fl, int64_t row, int64_t m,
                          const float *showers, const float *e_inc);

/* The first min(max_rows, rows in the file) showers of a CaloChallenge
 * file, streamed in blocks; the label is the path. */
int eval_core_sample_read(eval_core_sample *s, const char *path, const geo_geometry *geo,
                          const feat_layout *fl, int64_t max_rows, int want_low, gt_error *err);

void eval_core_sample_free(eval_core_sample *s);

/* Everything said of one candidate sample against the reference. */
typedef struct eval_core_result {
    metric_report rep;
    int has_cls[EVAL_CORE_N_CLS];
    model_classify_result cls[EVAL_CORE_N_CLS];
    /* the voxel energy spectrum: separation power of each feature */
    int n_spec;
    double spec_sep[EVAL_SPECTRUM_MAX];
    char spec_name[EVAL_SPECTRUM_MAX][48];
    /* the breakdown (o->breakdown): which classifier, each subset's name
     * and result */
    int n_subsets;
    eval_core_cls breakdown_of;
    char subset_name[EVAL_CORE_MAX_SUBSETS][48];
    model_classify_result subset[EVAL_CORE_MAX_SUBSETS];
} eval_core_result;

/* Compares a with ref.  cls_b: a CPU backend when an MLP is wanted (NULL
 * otherwise).  log (may be NULL) gets one line per classifier. */
int eval_core_compare(const eval_core_sample *a, const eval_core_sample *ref,
                      const feat_layout *fl, const eval_core_options *o, nn_backend *cls_b,
                      FILE *log, eval_core_result *out, gt_error *err);

void eval_core_result_free(eval_core_result *r);

/* Mean over the feature groups present of each group's mean S (NAN when
 * none).  The high-level groups only, as CaloChallenge reports them: the
 * voxel energy spectrum is judged on its own (eval_core_spectrum_mean). */
double eval_core_mean_over_groups(const metric_report *r);

/* Mean separation power over the voxel energy spectrum's features (NAN
 * when none). */
double eval_core_spectrum_mean(const eval_core_result *r);

/* The document (a new reference; NULL when out of memory): a against b,
 * and r2 against b under "floor" when r2 and floor are given.  geometry:
 * what names the geometry (the command's file, the service's name). */
json_t *eval_core_json(const eval_core_sample *a, const eval_core_sample *b,
                       const eval_core_sample *r2, const char *geometry, const feat_layout *fl,
                       const eval_core_options *o, const eval_core_result *res,
                       const eval_core_result *floor);

#endif
