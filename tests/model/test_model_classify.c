/* The classifier test (model_classify): the AUC statistic itself, then the
 * whole protocol on samples whose separability is known in closed form:
 *  - two draws of one Gaussian: AUC near 0.5;
 *  - a mean shift of delta along one of 12 dimensions: the best possible
 *    classifier has AUC Phi(delta / sqrt 2), which the trained one must
 *    approach from below (and never pass by more than the test noise);
 *  - the same seed gives the same result bit for bit; bad arguments. */
#include "check.h"
#include "classify_fixture.h"
#include "model_backend.h"
#include "model_classify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

static void check_auc(void)
{
    const float s[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
    uint8_t y[6] = {0, 0, 0, 1, 1, 1};
    CHECK_CLOSE(model_classify_auc(s, y, 6), 1.0, 0, 1e-12);
    uint8_t yr[6] = {1, 1, 1, 0, 0, 0};
    CHECK_CLOSE(model_classify_auc(s, yr, 6), 0.0, 0, 1e-12);
    const float tie[4] = {1, 1, 1, 1};
    uint8_t yt[4] = {0, 1, 0, 1};
    CHECK_CLOSE(model_classify_auc(tie, yt, 4), 0.5, 0, 1e-12);
    /* 1 of the 4 (pos, neg) pairs is misordered, one tied: (2 + 0.5) / 4 */
    const float m[4] = {0.9f, 0.2f, 0.5f, 0.2f};
    uint8_t ym[4] = {1, 1, 0, 0};
    CHECK_CLOSE(model_classify_auc(m, ym, 4), 0.625, 0, 1e-12);
    CHECK(isnan(model_classify_auc(s, (uint8_t[6]){0}, 6)));
}

/* Says stop on its `at`-th question. */
typedef struct stop_counter {
    int asked, at;
} stop_counter;

static int stop_at(void *user)
{
    stop_counter *s = user;
    return ++s->asked >= s->at;
}

/* model_classify_fit: the same test as model_classify at one seed, bit for
 * bit, and a network kept on the host that scores new rows: on fresh draws
 * of the same two distributions its AUC is the test's, up to the noise. */
static void check_fit(nn_backend *b, const float *a, const float *bb, int64_t n, int d,
                      const model_classify_config *cfg, double delta)
{
    gt_error err;
    model_classify_config c1 = *cfg;
    c1.repeats = 1;
    model_classify_result r, rf;
    model_classify_net net;
    CHECK(model_classify(b, a, n, bb, n, d, &c1, &r, &err) == GT_OK);
    c1.repeats = 3;   /* ignored: a fit is one test */
    CHECK(model_classify_fit(b, a, n, bb, n, d, &c1, &net, &rf, &err) == GT_OK);
    CHECK_MSG(memcmp(&r, &rf, sizeof r) == 0, "fit AUC %.6f, the test's %.6f", rf.auc, r.auc);
    CHECK(net.d == d && net.hidden == cfg->hidden && net.depth == cfg->depth);
    CHECK(net.n_weights == model_classify_net_count(d, cfg->hidden, cfg->depth));
    CHECK(net.n_weights == (size_t)cfg->hidden * (d + 1) +
                               (size_t)(cfg->depth - 1) * cfg->hidden * (cfg->hidden + 1) +
                               cfg->hidden + 1);
    const int64_t m = 1000;
    float *fa = cf_gaussian(m, d, delta, 11), *fb = cf_gaussian(m, d, 0.0, 12);
    float *score = malloc(2 * (size_t)m * sizeof *score);
    uint8_t *label = malloc(2 * (size_t)m);
    float *scratch = malloc(2 * (size_t)(d > cfg->hidden ? d : cfg->hidden) * sizeof *scratch);
    for (int64_t i = 0; i < m; i++) {
        score[i] = (float)model_classify_net_logit(&net, fa + (size_t)i * d, scratch);
        label[i] = 1;
        score[m + i] = (float)model_classify_net_logit(&net, fb + (size_t)i * d, scratch);
        label[m + i] = 0;
    }
    double auc = model_classify_auc(score, label, 2 * m);
    printf("kept network on fresh rows: AUC %.4f (the test's %.4f)\n", auc, r.auc);
    CHECK_MSG(fabs(auc - r.auc) < 0.05, "kept network's AUC %.4f, the test's %.4f", auc, r.auc);
    /* a row's logit is the same alone as among others, and finite */
    double z0 = model_classify_net_logit(&net, fa, scratch);
    CHECK(isfinite(z0) && (float)z0 == score[0]);
    model_classify_net_free(&net);
    CHECK(net.weights == NULL && net.mean == NULL);
    model_classify_net_free(NULL);
    CHECK(model_classify_fit(b, a, n, bb, n, d, &c1, NULL, &rf, &err) == GT_EINVAL);
    free(fa);
    free(fb);
    free(score);
    free(label);
    free(scratch);
}

int main(void)
{
    check_auc();
    gt_error err;
    nn_backend *b = cf_backend();
    model_classify_config cfg = cf_config(25);
    const int d = 12;
    const int64_t n = 2000;
    model_classify_result r, r2;
    float *a = cf_gaussian(n, d, 0.0, 1), *bb = cf_gaussian(n, d, 0.0, 2);
    CHECK(model_classify(b, a, n, bb, n, d, &cfg, &r, &err) == GT_OK);
    printf("same distribution: AUC %.4f (best epoch %d, test BCE %.4f, JSD %.4f bits)\n", r.auc,
           r.best_epoch, r.bce, r.jsd_bits);
    /* 400 test rows of each: the AUC's standard error is about 0.02 */
    CHECK_MSG(fabs(r.auc - 0.5) < 0.07, "AUC %.4f for identical distributions", r.auc);
    CHECK(r.n_train == 1200 && r.n_select == 400 && r.n_test == 400);
    CHECK(model_classify(b, a, n, bb, n, d, &cfg, &r2, &err) == GT_OK);
    CHECK_MSG(memcmp(&r, &r2, sizeof r) == 0, "the same seed gave another result");
    free(a);
    const double delta = 1.0, best = 0.5 * erfc(-delta / 2.0);   /* Phi(delta / sqrt 2) */
    a = cf_gaussian(n, d, delta, 3);
    CHECK(model_classify(b, a, n, bb, n, d, &cfg, &r, &err) == GT_OK);
    printf("mean shift %.1f in 1 of %d dimensions: AUC %.4f (Bayes-optimal %.4f)\n", delta, d,
           r.auc, best);
    CHECK_MSG(r.auc > best - 0.06 && r.auc < best + 0.05, "AUC %.4f, optimum %.4f", r.auc,
              best);
    /* repeats: the mean of whole tests at seeds s, s + 1, s + 2, and their spread */
    model_classify_result one[3], rep;
    model_classify_config c1 = cfg;
    double mean = 0.0, ss = 0.0;
    for (int k = 0; k < 3; k++) {
        c1.seed = cfg.seed + (uint64_t)k;
        CHECK(model_classify(b, a, n, bb, n, d, &c1, &one[k], &err) == GT_OK);
        CHECK(one[k].repeats == 1 && one[k].auc_sd == 0.0);
        mean += one[k].auc / 3;
    }
    for (int k = 0; k < 3; k++)
        ss += (one[k].auc - mean) * (one[k].auc - mean);
    CHECK_MSG(one[0].auc != one[1].auc || one[1].auc != one[2].auc,
              "three seeds gave one AUC (%.4f): the seed does not reach the test", one[0].auc);
    cfg.repeats = 3;
    CHECK(model_classify(b, a, n, bb, n, d, &cfg, &rep, &err) == GT_OK);
    printf("3 repeats: AUC %.4f +- %.4f (%.4f %.4f %.4f)\n", rep.auc, rep.auc_sd, one[0].auc,
           one[1].auc, one[2].auc);
    CHECK(rep.repeats == 3);
    CHECK_MSG(fabs(rep.auc - mean) < 1e-12, "repeats' AUC %.6f, mean of single tests %.6f",
              rep.auc, mean);
    CHECK_MSG(fabs(rep.auc_sd - sqrt(ss / 2)) < 1e-12, "sd %.6f against %.6f", rep.auc_sd,
              sqrt(ss / 2));
    check_fit(b, a, bb, n, d, &cfg, delta);
    CHECK(rep.n_test == one[0].n_test);
    CHECK(rep.best_epoch >= one[0].best_epoch && rep.best_epoch >= one[1].best_epoch &&
          rep.best_epoch >= one[2].best_epoch);
    cfg.repeats = 0;
    CHECK(model_classify(b, a, n, bb, n, d, &cfg, &r, &err) == GT_EINVAL);
    cfg.repeats = MODEL_CLASSIFY_MAX_REPEATS + 1;
    CHECK(model_classify(b, a, n, bb, n, d, &cfg, &r, &err) == GT_EINVAL);
    /* a stop is asked before every epoch: asked to stop in the second of
     * three repeats (25 epochs each), the test ends there, cancelled */
    stop_counter sc = {0, 30};
    cfg.repeats = 3;
    cfg.should_stop = stop_at;
    cfg.stop_user = &sc;
    CHECK(model_classify(b, a, n, bb, n, d, &cfg, &r, &err) == GT_ECANCELLED);
    CHECK_MSG(sc.asked == 30, "asked %d times", sc.asked);
    CHECK(r.repeats == 0 && r.auc == 0.0);
    /* a stop that never says yes changes nothing */
    sc.at = 1000;
    sc.asked = 0;
    cfg.repeats = 1;
    CHECK(model_classify(b, a, n, bb, n, d, &cfg, &r2, &err) == GT_OK);
    CHECK_MSG(sc.asked == cfg.epochs, "asked %d times in %d epochs", sc.asked, cfg.epochs);
    cfg.should_stop = NULL;
    cfg.stop_user = NULL;
    CHECK(model_classify(b, a, n, bb, n, d, &cfg, &r, &err) == GT_OK);
    CHECK_MSG(memcmp(&r, &r2, sizeof r) == 0, "a stop that never fired changed the result");
    /* refusals */
    CHECK(model_classify(b, a, 5, bb, n, d, &cfg, &r, &err) == GT_EINVAL);
    cfg.epochs = 0;
    CHECK(model_classify(b, a, n, bb, n, d, &cfg, &r, &err) == GT_EINVAL);
    free(a);
    free(bb);
    nn_backend_close(b);
    return check_finish();
}
