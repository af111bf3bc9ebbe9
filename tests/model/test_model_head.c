/* The stick-breaking head of a stage-2 WGAN generator (model_head.h), on a
 * 5-layer and a 45-layer layout:
 *  - the device forward equals the host row function;
 *  - the layer fractions sum to 1 and equal the layer shares that the
 *    sampler's decoder (prep_logit_unmap + prep_stick_join, in double) gives
 *    the same logits, so a sampled shower holds what the critic judged;
 *  - the standardised fraction columns have mean 0 and std 1 over the
 *    training rows (or a floored std);
 *  - voxel columns pass through unchanged;
 *  - backward against central finite differences of L = sum w . h(x);
 *  - bad arguments are refused. */
#include "model_backend.h"
#include "check.h"
#include "model_head.h"
#include "prep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static nn_backend *be;
static uint64_t lcg = 12345;

static double urand(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) / 9007199254740992.0;
}

static float *dev(size_t n)
{
    float *p = NULL;
    gt_error err;
    if (nn_alloc(be, (n ? n : 1) * sizeof(float), (void **)&p, &err) != GT_OK) {
        fprintf(stderr, "%s\n", err.message);
        exit(1);
    }
    return p;
}

/* sum_j w_ij h(x)_ij of row i of the device forward, in double (the other
 * rows do not depend on row i, so leaving them out only removes rounding) */
static double loss(model_head *h, float *x, float *out, const float *w, int B, int D, int i)
{
    gt_error err;
    const int W = D + 1;
    CHECK(model_head_forward(h, nn_f32(x, B, D), nn_f32(out, B, W), &err) == GT_OK);
    double s = 0;
    for (int j = 0; j < W; j++)
        s += (double)w[(size_t)i * W + j] * out[(size_t)i * W + j];
    return s;
}

/* L layers, V voxels, n training rows, B test rows. */
static void check_layout(int L, int V, int n, int B)
{
    gt_error err;
    const int D = L - 1 + V, W = D + 1;
    double *um = malloc((size_t)L * sizeof(double)), *us = malloc((size_t)L * sizeof(double));
    float *xtr = malloc((size_t)n * D * sizeof(float));
    for (int l = 0; l < L - 1; l++) {
        um[l] = -3.0 + 2.0 * urand(); /* most energy in the first layers */
        us[l] = 0.5 + 2.0 * urand();
    }
    for (size_t i = 0; i < (size_t)n * D; i++)
        xtr[i] = (float)(3.0 * urand() - 1.5);
    model_head *h = NULL;
    CHECK(model_head_create(be, L, D, um, us, xtr, n, B, &h, &err) == GT_OK);
    if (!h)
        return;
    CHECK_EQ_INT(model_head_width(h), W);

    /* forward on B rows (CPU backend memory is host memory) */
    float *x = dev((size_t)B * D), *out = dev((size_t)B * W), *dout = dev((size_t)B * W);
    float *dx = dev((size_t)B * D);
    float *row = malloc((size_t)W * sizeof(float)), *f = malloc((size_t)L * sizeof(float));
    double *u = malloc((size_t)L * sizeof(double)), *share = malloc((size_t)L * sizeof(double));
    memcpy(x, xtr, (size_t)B * D * sizeof(float));
    CHECK(model_head_forward(h, nn_f32(x, B, D), nn_f32(out, B, W), &err) == GT_OK);
    double d_host = 0, d_sum = 0, d_dec = 0;
    int pass = 0;
    for (int i = 0; i < B; i++) {
        const float *xi = xtr + (size_t)i * D;
        model_head_row_host(h, xi, row);
        for (int j = 0; j < W; j++)
            d_host = fmax(d_host, fabs(row[j] - out[(size_t)i * W + j]));
        pass += memcmp(row + L, xi + L - 1, (size_t)V * sizeof(float)) == 0;
        model_head_fractions_host(h, xi, f);
        double sum = 0;
        for (int l = 0; l < L; l++)
            sum += f[l];
        d_sum = fmax(d_sum, fabs(sum - 1.0));
        for (int l = 0; l < L - 1; l++)
            u[l] = prep_logit_unmap((double)xi[l] * us[l] + um[l]);
        prep_stick_join(u, L, 1.0, share);
        for (int l = 0; l < L; l++)
            d_dec = fmax(d_dec, fabs(f[l] - share[l]));
    }
    /* moments of the standardised fraction columns over the training rows */
    double *m1 = calloc((size_t)L, sizeof(double)), *m2 = calloc((size_t)L, sizeof(double));
    double *r1 = calloc((size_t)L, sizeof(double)), *r2 = calloc((size_t)L, sizeof(double));
    for (int i = 0; i < n; i++) {
        model_head_row_host(h, xtr + (size_t)i * D, row);
        model_head_fractions_host(h, xtr + (size_t)i * D, f);
        for (int l = 0; l < L; l++) {
            m1[l] += row[l];
            m2[l] += (double)row[l] * row[l];
            r1[l] += f[l];
            r2[l] += (double)f[l] * f[l];
        }
    }
    double d_mean = 0, d_std = 0;
    int floored = 0;
    for (int l = 0; l < L; l++) {
        double m = m1[l] / n, sd = sqrt(fmax(m2[l] / n - m * m, 0));
        double rm = r1[l] / n, rsd = sqrt(fmax(r2[l] / n - rm * rm, 0));
        /* unit std, or raw std / floor where the floor applies */
        double want = rsd > MODEL_HEAD_STD_FLOOR ? 1.0 : rsd / MODEL_HEAD_STD_FLOOR;
        floored += rsd <= MODEL_HEAD_STD_FLOOR;
        d_mean = fmax(d_mean, fabs(m));
        d_std = fmax(d_std, fabs(sd - want) / want);
    }
    printf("L %2d V %2d: host vs device %.2g, |sum f - 1| %.2g, vs decoder %.2g, "
           "standardised mean %.2g, std rel. err %.2g (%d floored)\n",
           L, V, d_host, d_sum, d_dec, d_mean, d_std, floored);
    CHECK_MSG(d_host < 1e-5, "host and device heads differ by %g", d_host);
    CHECK_EQ_INT(pass, B);
    CHECK_MSG(d_sum < 1e-5, "fractions sum to 1 +- %g", d_sum);
    /* the decoder unmaps with alpha = 1e-6 and multiplies in double */
    CHECK_MSG(d_dec < 1e-5, "head and decoder fractions differ by %g", d_dec);
    CHECK_MSG(d_mean < 1e-3 && d_std < 1e-3, "standardisation off: mean %g, std %g", d_mean,
              d_std);

    /* backward against central differences (fp32 forward, h = 1e-2) */
    float *w = malloc((size_t)B * W * sizeof(float));
    for (int i = 0; i < B * W; i++)
        w[i] = (float)(2.0 * urand() - 1.0);
    loss(h, x, out, w, B, D, 0);
    memcpy(dout, w, (size_t)B * W * sizeof(float));
    CHECK(model_head_backward(h, nn_f32(dout, B, W), nn_f32(dx, B, D), &err) == GT_OK);
    int bad = 0, checked = 0;
    double worst = 0;
    for (int i = 0; i < B && i < 4; i++)
        for (int j = 0; j < D; j++) {
            float *p = x + (size_t)i * D + j, keep = *p;
            const float step = 1e-2f;
            *p = keep + step;
            double lp = loss(h, x, out, w, B, D, i);
            *p = keep - step;
            double lm = loss(h, x, out, w, B, D, i);
            *p = keep;
            double fd = (lp - lm) / (2.0 * step), an = dx[(size_t)i * D + j];
            /* relative 1e-3, plus an absolute 2e-4: the fp32 forward rounds
             * standardised values of size ~10 to ~1e-6 each, which the
             * difference quotient divides by 2e-2 */
            double e = fabs(fd - an), tol = 1e-3 * (fabs(fd) + fabs(an)) + 2e-4;
            worst = fmax(worst, e / tol);
            if (e > tol)
                printf("  row %d col %d: fd %.6g analytic %.6g\n", i, j, fd, an);
            bad += e > tol;
            checked++;
        }
    printf("L %2d: backward vs finite differences: %d entries, %d off, worst %.2g of the "
           "tolerance\n", L,
           checked, bad, worst);
    CHECK_EQ_INT(bad, 0);

    /* bad arguments */
    CHECK_EQ_INT(model_head_forward(h, nn_f32(x, B, D - 1), nn_f32(out, B, W), &err), GT_EINVAL);
    CHECK_EQ_INT(model_head_forward(h, nn_f32(x, B, D), nn_f32(out, B, D), &err), GT_EINVAL);
    CHECK_EQ_INT(model_head_backward(h, nn_f32(dout, B, W), nn_f32(dx, B, W), &err), GT_EINVAL);
    model_head *h2 = NULL;
    CHECK_EQ_INT(model_head_create(be, 1, D, um, us, xtr, n, B, &h2, &err), GT_EINVAL);
    CHECK_EQ_INT(model_head_create(be, L, L - 2, um, us, xtr, n, B, &h2, &err), GT_EINVAL);
    CHECK_EQ_INT(model_head_create(be, L, D, NULL, us, xtr, n, B, &h2, &err), GT_EINVAL);
    CHECK(h2 == NULL);

    free(w);
    free(m1);
    free(m2);
    free(r1);
    free(r2);
    free(u);
    free(share);
    free(row);
    free(f);
    model_head_destroy(h);
    nn_free(be, x);
    nn_free(be, out);
    nn_free(be, dout);
    nn_free(be, dx);
    free(um);
    free(us);
    free(xtr);
}

int main(void)
{
    gt_error err;
    CHECK(model_backend_open("cpu", &be, &err) == GT_OK);
    check_layout(5, 7, 300, 16);
    check_layout(45, 20, 400, 32);
    nn_backend_close(be);
    return check_finish();
}
