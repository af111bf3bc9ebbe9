/* model_classify: the CaloChallenge classifier test.
 *
 * A binary classifier is trained to tell sample A (generated) from sample B
 * (reference); its ROC AUC on showers it never saw says how far apart the
 * two are: 0.5 means indistinguishable, 1 means told apart every time.
 * The classifier is the CaloChallenge one (code/evaluate.py of the
 * CaloChallenge homepage): a LeakyReLU MLP, `depth` hidden layers of
 * `hidden` units and one logit out, binary cross-entropy, Adam(W) at lr
 * 2e-4, batches of 1000 (here at most a twentieth of the training rows, so
 * that a sample of thousands, not CaloChallenge's 100 000, still gets about
 * twenty steps an epoch), 50 epochs; here on the engine's own network
 * (model_critic, the same piecewise-linear MLP) and AdamW with no weight
 * decay, seeded.
 *
 * Protocol (this list is its reference; docs/evaluations.md shows the result):
 *  - each sample is shuffled (seed) and cut 60 / 20 / 20 into train,
 *    select and test rows, the two samples alike, with equal counts of A
 *    and B (the larger is truncated to the smaller);
 *  - features are standardised with the train rows' mean and standard
 *    deviation (constant columns pass as 0);
 *  - after each epoch the select rows' cross-entropy is measured; the
 *    epoch with the lowest one is kept (early stopping without a stop);
 *  - the result is that epoch's AUC on the test rows, with its
 *    cross-entropy and the JSD estimate ln 2 - BCE (in bits: / ln 2);
 *  - with `repeats` R > 1 the whole test runs R times, with seeds seed,
 *    seed + 1, ..., seed + R - 1 (each its own split, initialisation and
 *    batch order), and the result is the mean over them with the AUCs'
 *    standard deviation: one test on a few thousand showers moves by a few
 *    hundredths between seeds, the mean of R by 1 / sqrt(R) of that.
 * Inputs are host arrays (row-major, n x d). */
#ifndef MODEL_CLASSIFY_H
#define MODEL_CLASSIFY_H

#include <stdint.h>

#include "gt_error.h"
#include "nn_backend.h"

typedef struct model_classify_config {
    int hidden;        /* units per hidden layer (CaloChallenge: 2048) */
    int depth;         /* hidden layers (CaloChallenge: 3, i.e. its n_layer 2 + 1) */
    int epochs;
    int batch;
    float lr;
    uint64_t seed;
    int repeats;       /* whole tests averaged, 1..MODEL_CLASSIFY_MAX_REPEATS */
    /* Asked before every epoch of every repeat (NULL: never): nonzero ends
     * the test with GT_ECANCELLED, so that a service shutting down waits
     * for one epoch, not for all the repeats. */
    int (*should_stop)(void *user);
    void *stop_user;
} model_classify_config;

#define MODEL_CLASSIFY_MAX_REPEATS 20

typedef struct model_classify_result {
    double auc;          /* test rows, best epoch (the mean over repeats) */
    double auc_sd;       /* standard deviation of the repeats' AUCs (0 for one) */
    int repeats;
    double bce;          /* test rows' mean cross-entropy (nats; mean over repeats) */
    double jsd_bits;     /* (ln 2 - bce) / ln 2, clipped at 0 (mean over repeats) */
    double select_bce;   /* the selection value of the best epoch (mean) */
    int best_epoch;      /* 1-based; the latest of the repeats' */
    int64_t n_train, n_select, n_test;   /* rows of each sample per split */
} model_classify_result;

/* hidden 512, depth 3, 50 epochs, batch 1000, lr 2e-4, seed 1, 1 repeat,
 * no stop. */
void model_classify_config_default(model_classify_config *cfg);

/* xa [na x d], xb [nb x d].  Needs at least 10 rows of each. */
int model_classify(nn_backend *b, const float *xa, int64_t na, const float *xb, int64_t nb,
                   int d, const model_classify_config *cfg, model_classify_result *out,
                   gt_error *err);

/* A trained classifier kept for scoring (model_classify_fit): the input's
 * standardisation and the network's weights on the host.  Layout of
 * `weights`: for each hidden layer l = 0 .. depth-1 its matrix transposed,
 * W_l^T [in_l x hidden] (row-major; in_0 = d, else hidden: a layer's
 * outputs for one input are contiguous, so scoring runs down them), then
 * its bias [hidden]; then the output row w_out [hidden] and the output
 * bias. */
typedef struct model_classify_net {
    int d, hidden, depth;
    float slope;            /* LeakyReLU negative slope */
    double *mean, *inv_std; /* [d]; inv_std 0 for a column constant in training */
    float *weights;
    size_t n_weights;
} model_classify_net;

/* Floats of `weights` for these sizes. */
size_t model_classify_net_count(int d, int hidden, int depth);

/* One classifier test as model_classify (cfg->repeats is ignored: one, at
 * cfg->seed) that also keeps the network of its best epoch in *net (free
 * with model_classify_net_free).  The same config, data and seed give the
 * same result as model_classify, bit for bit.  Sample A scores high. */
int model_classify_fit(nn_backend *b, const float *xa, int64_t na, const float *xb, int64_t nb,
                       int d, const model_classify_config *cfg, model_classify_net *net,
                       model_classify_result *out, gt_error *err);
void model_classify_net_free(model_classify_net *net);   /* zeroes it; NULL ok */

/* The logit of one raw (unstandardised) row of d values, on the host in a
 * fixed order: a row's score does not depend on what it is scored with.
 * scratch: 2 * max(d, hidden) floats. */
double model_classify_net_logit(const model_classify_net *net, const float *row, float *scratch);

/* The split's shuffle: idx = a permutation of 0 .. n-1 drawn by
 * Fisher-Yates from a counter-based stream, a pure function of (seed,
 * stream).  Stream 0 orders sample B, stream 1 sample A: the first 60 % of
 * each are the train rows, the next 20 % the select rows, the rest the test
 * rows (at the smaller sample's count).  Public so that a classifier of
 * another family (eval_trees.h) splits the showers exactly as this one. */
void model_classify_shuffle(int64_t *idx, int64_t n, uint64_t seed, uint64_t stream);

/* The result of n whole tests (repeats): the means, the AUCs' sample
 * standard deviation (0 for one), the latest best epoch. */
void model_classify_mean(const model_classify_result *one, int n, model_classify_result *out);

/* ROC AUC of scores (higher = more "positive") against labels 0/1, ties
 * counted half (the Mann-Whitney U statistic).  NAN when a class is
 * missing. */
double model_classify_auc(const float *score, const uint8_t *label, int64_t n);

#endif
