/* eval_trees: the classifier test with gradient-boosted trees.
 *  - two samples of one distribution: AUC near 0.5;
 *  - a difference no single column shows (the sign of x0 * x1, each
 *    marginal the same normal): the trees find it (the best possible AUC
 *    is 0.75); without those columns they do not;
 *  - voxel-like columns where 0 means empty (missing = 0): a 30 % larger
 *    energy in the non-empty entries is found;
 *  - the split is model_classify's (counts at the smaller sample's size);
 *    a result is a pure function of (data, seed); R repeats are the mean of
 *    R single tests with seeds s .. s + R - 1;
 *  - bad arguments are refused, and should_stop stops. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "eval_trees.h"
#include "rng.h"

enum { D = 5 };

/* n rows of D standard normals; kind 1 makes sign(x0 x1) positive. */
static float *sample(int64_t n, uint64_t seed, int kind)
{
    float *x = malloc((size_t)n * D * sizeof *x);
    rng_state r = rng_init(seed, 0);
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < D; j++)
            x[i * D + j] = (float)rng_next_normal(&r);
        if (kind == 1 && x[i * D] * x[i * D + 1] < 0)
            x[i * D + 1] = -x[i * D + 1];
    }
    return x;
}

static int stop_now(void *user)
{
    return ++*(int *)user > 3;
}

int main(void)
{
    printf("XGBoost %s\n", eval_trees_version());
    eval_trees_config cfg;
    eval_trees_config_default(&cfg);
    cfg.seed = 5;
    gt_error err = {0};
    model_classify_result r, r2;

    /* one distribution: nothing to find */
    float *a = sample(2000, 1, 0), *b = sample(2000, 2, 0);
    CHECK_EQ_INT(eval_trees_classify(a, 2000, b, 2000, D, NULL, 0, NAN, &cfg, &r, &err), GT_OK);
    CHECK_MSG(fabs(r.auc - 0.5) < 0.06, "same distribution: AUC %g", r.auc);
    CHECK(r.n_train == 1200 && r.n_select == 400 && r.n_test == 400 && r.repeats == 1);
    CHECK(r.best_epoch >= 1 && r.best_epoch <= cfg.max_rounds);
    /* a pure function of its inputs and seed */
    CHECK_EQ_INT(eval_trees_classify(a, 2000, b, 2000, D, NULL, 0, NAN, &cfg, &r2, &err), GT_OK);
    CHECK(r.auc == r2.auc && r.bce == r2.bce && r.best_epoch == r2.best_epoch);

    /* the joint difference */
    float *c = sample(2000, 3, 1);
    CHECK_EQ_INT(eval_trees_classify(c, 2000, b, 2000, D, NULL, 0, NAN, &cfg, &r, &err), GT_OK);
    CHECK_MSG(r.auc > 0.68 && r.auc < 0.8, "sign(x0 x1): AUC %g (best possible 0.75)", r.auc);
    CHECK(r.jsd_bits > 0);
    const int others[3] = {2, 3, 4}, one[1] = {1};
    CHECK_EQ_INT(eval_trees_classify(c, 2000, b, 2000, D, others, 3, NAN, &cfg, &r, &err), GT_OK);
    CHECK_MSG(fabs(r.auc - 0.5) < 0.06, "without x0, x1: AUC %g", r.auc);
    CHECK_EQ_INT(eval_trees_classify(c, 2000, b, 2000, D, one, 1, NAN, &cfg, &r, &err), GT_OK);
    CHECK_MSG(fabs(r.auc - 0.5) < 0.06, "x1 alone (same marginal): AUC %g", r.auc);

    /* the smaller sample sets the counts */
    CHECK_EQ_INT(eval_trees_classify(c, 2000, b, 1500, D, NULL, 0, NAN, &cfg, &r, &err), GT_OK);
    CHECK(r.n_train == 900 && r.n_select == 300 && r.n_test == 300);

    /* repeats: the mean of single tests with consecutive seeds */
    cfg.repeats = 3;
    CHECK_EQ_INT(eval_trees_classify(c, 2000, b, 2000, D, NULL, 0, NAN, &cfg, &r, &err), GT_OK);
    double mean = 0;
    for (int k = 0; k < 3; k++) {
        eval_trees_config one_cfg = cfg;
        one_cfg.repeats = 1;
        one_cfg.seed = cfg.seed + (uint64_t)k;
        CHECK_EQ_INT(eval_trees_classify(c, 2000, b, 2000, D, NULL, 0, NAN, &one_cfg, &r2, &err),
                     GT_OK);
        mean += r2.auc / 3;
    }
    CHECK(r.repeats == 3 && r.auc_sd > 0);
    CHECK_CLOSE(r.auc, mean, 1e-12, 0);
    cfg.repeats = 1;

    /* voxel-like: half the entries empty (0, "missing"), the others 30 %
     * larger in A */
    float *va = malloc(2000 * D * sizeof *va), *vb = malloc(2000 * D * sizeof *vb);
    rng_state rr = rng_init(9, 1);
    for (int i = 0; i < 2000 * D; i++) {
        va[i] = rng_next_uniform(&rr) < 0.5 ? 0.0f : 1.3f * (float)rng_next_uniform(&rr);
        vb[i] = rng_next_uniform(&rr) < 0.5 ? 0.0f : (float)rng_next_uniform(&rr);
    }
    CHECK_EQ_INT(eval_trees_classify(va, 2000, vb, 2000, D, NULL, 0, 0.0f, &cfg, &r, &err), GT_OK);
    CHECK_MSG(r.auc > 0.65, "larger non-empty entries: AUC %g", r.auc);

    /* refusals, and a stop */
    const int bad_col[1] = {D};
    CHECK_EQ_INT(eval_trees_classify(a, 2000, b, 2000, D, bad_col, 1, NAN, &cfg, &r, &err),
                 GT_EINVAL);
    CHECK_EQ_INT(eval_trees_classify(a, 9, b, 2000, D, NULL, 0, NAN, &cfg, &r, &err), GT_EINVAL);
    CHECK(strstr(err.message, "at least 10") != NULL);
    eval_trees_config bad = cfg;
    bad.repeats = 0;
    CHECK_EQ_INT(eval_trees_classify(a, 2000, b, 2000, D, NULL, 0, NAN, &bad, &r, &err),
                 GT_EINVAL);
    bad = cfg;
    bad.eta = 0;
    CHECK_EQ_INT(eval_trees_classify(a, 2000, b, 2000, D, NULL, 0, NAN, &bad, &r, &err),
                 GT_EINVAL);
    CHECK_EQ_INT(eval_trees_classify(NULL, 2000, b, 2000, D, NULL, 0, NAN, &cfg, &r, &err),
                 GT_EINVAL);
    int calls = 0;
    eval_trees_config stop = cfg;
    stop.should_stop = stop_now;
    stop.stop_user = &calls;
    CHECK_EQ_INT(eval_trees_classify(c, 2000, b, 2000, D, NULL, 0, NAN, &stop, &r, &err),
                 GT_ECANCELLED);
    CHECK(calls == 4);

    free(a);
    free(b);
    free(c);
    free(va);
    free(vb);
    return check_finish();
}
