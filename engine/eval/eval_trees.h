/* eval_trees: the classifier test with gradient-boosted decision trees.
 *
 * The CaloChallenge test (model_classify.h) trains a neural network to
 * tell generated showers from reference ones.  A goal met against one
 * classifier family is easy to please: a model tuned until the MLP's AUC
 * is low may still be told apart by a classifier that looks differently,
 * and trees look very differently (axis-aligned cuts, exact on the joint
 * thresholds an MLP smooths over).  So the yardstick also trains
 * histogram gradient-boosted trees on the same inputs, split the same way.
 *
 * The trees are XGBoost's (its C API, Debian libxgboost-dev): a
 * well-kept, widely used implementation, so the number is the one any
 * physicist reproduces with `xgboost.XGBClassifier(tree_method="hist")`.
 *
 * Protocol (the reference; docs/evaluations.md shows the result):
 *  - the split is model_classify's, row for row: each sample shuffled by
 *    model_classify_shuffle(seed) and cut 60 / 20 / 20 into train, select
 *    and test rows at the smaller sample's count;
 *  - binary:logistic, tree_method hist (256 bins), depth `max_depth`,
 *    learning rate `eta`, at most `max_rounds` rounds; after each round
 *    the select rows' log loss is measured and training stops when it has
 *    not improved for `patience` rounds; the round with the lowest one is
 *    kept (early stopping, as the MLP keeps its best epoch);
 *  - the result is the kept model's AUC on the test rows, with its log
 *    loss and the JSD estimate ln 2 - BCE, in a model_classify_result
 *    (best_epoch holds the kept round count);
 *  - with `repeats` R > 1, R whole tests with seeds seed .. seed + R - 1
 *    (each its own split and tree seed): the mean and the AUCs' standard
 *    deviation;
 *  - `missing`: the input value that means "no value" (NAN for high-level
 *    features; 0 for voxels, where an empty voxel is then its own branch
 *    of every split and the matrix is stored sparse: each split scans
 *    the hits, not every voxel).
 * The trees see raw values: they are invariant under any monotone map of
 * a column, so voxels / E_inc and log(voxels / E_inc) give one result.
 * XGBoost sums its histograms in double; a result may still move in the
 * last digits with the thread count. */
#ifndef EVAL_TREES_H
#define EVAL_TREES_H

#include <stdint.h>

#include "gt_error.h"
#include "model_classify.h"

typedef struct eval_trees_config {
    int max_rounds;   /* boosting rounds at most              */
    int patience;     /* rounds without a better select loss  */
    int max_depth;
    double eta;       /* learning rate                        */
    int threads;      /* 0: OpenMP's default                  */
    uint64_t seed;
    int repeats;      /* 1 .. MODEL_CLASSIFY_MAX_REPEATS       */
    /* Asked before every round (NULL: never): nonzero ends the test with
     * GT_ECANCELLED. */
    int (*should_stop)(void *user);
    void *stop_user;
} eval_trees_config;

/* 300 rounds, patience 30, depth 6, eta 0.1, default threads, seed 1, 1 repeat. */
void eval_trees_config_default(eval_trees_config *cfg);

/* xa [na x d] (generated), xb [nb x d] (reference), row-major.  cols: the
 * columns to use (n_cols of them, each in [0, d)), or NULL for all d.
 * Needs at least 10 rows of each sample. */
int eval_trees_classify(const float *xa, int64_t na, const float *xb, int64_t nb, int d,
                        const int *cols, int n_cols, float missing,
                        const eval_trees_config *cfg, model_classify_result *out,
                        gt_error *err);

/* The library's version, e.g. "1.7.4" (for the report). */
const char *eval_trees_version(void);

#endif
