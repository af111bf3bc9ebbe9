/* The learned acceptance test (model_accept) on samples whose density
 * ratio is known: "training" rows N(0, 1) in every column, "generated" rows
 * the same with column 0 shifted by delta.  Kept with the trained
 * probabilities, fresh generated rows must move most of the way back to
 * the training rows' mean (the exact ratio would take them all the way
 * where it is under the cap); then the blob's round trip, its checks, and
 * the refusals. */
#include "check.h"
#include "classify_fixture.h"
#include "model_accept.h"
#include "model_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

int main(void)
{
    gt_error err;
    nn_backend *b = cf_backend();
    model_classify_config cls = cf_config(20);
    const int d = 6;
    const int64_t n = 3000;
    const double delta = 0.8;
    float *train = cf_gaussian(n, d, 0.0, 1), *gen = cf_gaussian(n, d, delta, 2);
    model_accept a;
    CHECK(model_accept_train(b, train, n, gen, n, d, &cls, 0.95, 8, &a, &err) == GT_OK);
    printf("trained: AUC %.4f, acceptance %.4f, ln M %.4f\n", a.auc, a.acceptance, a.log_cap);
    /* Phi(delta / sqrt 2) = 0.714 at best */
    CHECK_MSG(a.auc > 0.64 && a.auc < 0.76, "AUC %.4f", a.auc);
    CHECK_MSG(a.acceptance > 0.1 && a.acceptance < 0.9, "acceptance %.4f", a.acceptance);
    CHECK(a.max_attempts == 8);
    CHECK(model_accept_keep_probability(&a, a.log_cap + 1.0) == 1.0);
    CHECK_CLOSE(model_accept_keep_probability(&a, a.log_cap - 1.0), exp(-1.0), 1e-12, 0);

    /* fresh generated rows kept with those probabilities: the kept mean of
     * column 0 falls from delta towards 0, the other columns stay put */
    const int64_t m = 20000;
    float *fresh = cf_gaussian(m, d, delta, 3);
    float scratch[2 * 32];
    rng_state u = rng_init(4, 0);
    double kept = 0.0, sum0 = 0.0, sum1 = 0.0;
    for (int64_t i = 0; i < m; i++) {
        const float *row = fresh + (size_t)i * d;
        double p = model_accept_keep_probability(&a, model_accept_logit(&a, row, scratch));
        if ((double)(rng_next_u64(&u) >> 11) / 9007199254740992.0 < p) {
            kept += 1;
            sum0 += row[0];
            sum1 += row[1];
        }
    }
    printf("kept %.0f of %lld: mean of column 0 %.4f (generated %.1f, training 0), column 1 "
           "%.4f\n",
           kept, (long long)m, sum0 / kept, delta, sum1 / kept);
    CHECK_MSG(sum0 / kept < 0.4 * delta, "kept column-0 mean %.4f", sum0 / kept);
    CHECK_MSG(fabs(sum1 / kept) < 0.05, "kept column-1 mean %.4f", sum1 / kept);
    CHECK_MSG(fabs(kept / m - a.acceptance) < 0.05, "kept %.4f, trained acceptance %.4f",
              kept / m, a.acceptance);

    /* the blob: the same logits and fields after a round trip */
    void *blob = NULL;
    size_t len = 0;
    memset(a.ckpt_sha256[1], 0xab, 32);
    CHECK(model_accept_pack(&a, &blob, &len, &err) == GT_OK);
    model_accept back;
    CHECK(model_accept_unpack(blob, len, &back, &err) == GT_OK);
    CHECK(back.log_cap == a.log_cap && back.max_attempts == 8 && back.auc == a.auc &&
          back.acceptance == a.acceptance && back.net.slope == a.net.slope);
    CHECK(memcmp(back.ckpt_sha256, a.ckpt_sha256, 64) == 0);
    int same = 1;
    for (int64_t i = 0; i < 100; i++)
        same &= model_accept_logit(&a, fresh + (size_t)i * d, scratch) ==
                model_accept_logit(&back, fresh + (size_t)i * d, scratch);
    CHECK_MSG(same, "the unpacked test scores otherwise");
    model_accept_free(&back);
    /* damage: a flipped bit, a short blob, another magic, another version */
    uint8_t *bad = malloc(len);
    memcpy(bad, blob, len);
    bad[len / 2] ^= 1;
    CHECK(model_accept_unpack(bad, len, &back, &err) == GT_ECHECKSUM);
    CHECK(back.net.weights == NULL);
    CHECK(model_accept_unpack(blob, len - 1, &back, &err) == GT_EFORMAT);
    CHECK(model_accept_unpack(blob, 10, &back, &err) == GT_EFORMAT);
    memcpy(bad, blob, len);
    bad[0] = 'X';
    CHECK(model_accept_unpack(bad, len, &back, &err) == GT_EFORMAT);
    memcpy(bad, blob, len);
    bad[8] = 2;
    CHECK(model_accept_unpack(bad, len, &back, &err) == GT_EFORMAT);
    memcpy(bad, blob, len);
    bad[12] = 0xff, bad[13] = 0xff, bad[14] = 0xff, bad[15] = 0x7f;   /* d out of range */
    CHECK(model_accept_unpack(bad, len, &back, &err) == GT_EFORMAT);
    CHECK(model_accept_unpack(NULL, 0, &back, &err) == GT_EFORMAT);
    free(bad);
    free(blob);

    /* refusals */
    model_accept r;
    CHECK(model_accept_train(b, train, n, gen, n, d, &cls, 0.0, 8, &r, &err) == GT_EINVAL);
    CHECK(model_accept_train(b, train, n, gen, n, d, &cls, 1.5, 8, &r, &err) == GT_EINVAL);
    CHECK(model_accept_train(b, train, n, gen, n, d, &cls, 0.9, 0, &r, &err) == GT_EINVAL);
    CHECK(model_accept_train(b, train, 5, gen, n, d, &cls, 0.9, 8, &r, &err) == GT_EINVAL);
    CHECK(r.net.weights == NULL);
    model_accept empty;
    memset(&empty, 0, sizeof empty);
    CHECK(model_accept_pack(&empty, &blob, &len, &err) == GT_EINVAL);
    model_accept_free(NULL);

    model_accept_free(&a);
    free(train);
    free(gen);
    free(fresh);
    nn_backend_close(b);
    return check_finish();
}
