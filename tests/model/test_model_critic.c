/* The WGAN-GP critic (engine/model/model_critic.h):
 *  - first-order backward (every parameter and dD/dx) against central finite
 *    differences of L = sum_i w_i D_i;
 *  - the penalty's input gradient equals the backward's dD/dx;
 *  - the double backward: dP/dtheta of the gradient penalty
 *    P = lambda * mean_i (||grad_x D_i|| - 1)^2 against central finite
 *    differences of P itself (the penalty recomputed from scratch at
 *    theta +- h), for every weight; entries whose perturbation flips a
 *    LeakyReLU mask (a kink of P) are skipped and counted;
 *  - bad arguments are refused. */
#include "model_backend.h"
#include "check.h"
#include "model_critic.h"
#include "nn_rng.h"

#include <stdlib.h>
#include <string.h>

enum { B = 6, DIN = 5, NC = 2, HID = 7, DEPTH = 3 };

static nn_backend *be;
static model_critic *cr;
static float *xd, *cd, *outd, *doutd;
static float xh[B * DIN], ch[B * NC], wrow[B];

static void forward(void)
{
    gt_error err;
    CHECK(model_critic_forward(cr, nn_f32(xd, B, DIN), nn_f32(cd, B, NC), outd, &err) == GT_OK);
}

static double loss_d(void)
{
    forward();
    float o[B];
    nn_copy_d2h(be, o, outd, sizeof o, NULL);
    double s = 0;
    for (int i = 0; i < B; i++)
        s += (double)wrow[i] * o[i];
    return s;
}

/* The penalty weight the test uses throughout. */
static const float LAMBDA = 10.0f;

static double penalty(void)
{
    gt_error err;
    forward();
    nn_params *p = model_critic_params(cr);
    nn_params_zero_grad(p, NULL);
    float pen = 0;
    CHECK(model_critic_penalty(cr, LAMBDA, &pen, NULL, &err) == GT_OK);
    return pen;
}

/* Sets host[at] and its device copy dev[at] to v. */
static void set_at(float *host, float *dev, size_t at, float v)
{
    host[at] = v;
    nn_copy_h2d(be, dev + at, host + at, sizeof(float), NULL);
}

/* The central difference of f in one element (host[at], mirrored at
 * dev[at]) with step h; f at +h and -h in *up and *down.  The element is
 * restored. */
static double central_diff(float *host, float *dev, size_t at, double h, double (*f)(void),
                           double *up, double *down)
{
    float keep = host[at];
    set_at(host, dev, at, keep + (float)h);
    *up = f();
    set_at(host, dev, at, keep - (float)h);
    *down = f();
    set_at(host, dev, at, keep);
    return (*up - *down) / (2 * h);
}

int main(void)
{
    gt_error err;
    CHECK(model_backend_open("cpu", &be, &err) == GT_OK);
    model_critic_config cc = {DIN, NC, HID, DEPTH, 0.2f};
    CHECK(model_critic_create(be, &cc, B, &cr, &err) == GT_OK);
    CHECK(model_critic_init(cr, 3, &err) == GT_OK);
    nn_alloc(be, sizeof xh, (void **)&xd, &err);
    nn_alloc(be, sizeof ch, (void **)&cd, &err);
    nn_alloc(be, B * sizeof(float), (void **)&outd, &err);
    nn_alloc(be, B * sizeof(float), (void **)&doutd, &err);
    nn_rng r = nn_rng_make(42, 0);
    for (int i = 0; i < B * DIN; i += 4) {
        float u[4];
        nn_rng_uniform4(&r, u);
        for (int k = 0; k < 4 && i + k < B * DIN; k++)
            xh[i + k] = 4.0f * u[k] - 2.0f;
    }
    for (int i = 0; i < B * NC; i++)
        ch[i] = 0.3f * (float)(i % 5) - 0.6f;
    for (int i = 0; i < B; i++)
        wrow[i] = 0.5f + 0.25f * (float)i;
    nn_copy_h2d(be, xd, xh, sizeof xh, &err);
    nn_copy_h2d(be, cd, ch, sizeof ch, &err);

    nn_params *p = model_critic_params(cr);
    float *val = malloc(p->count * sizeof(float)), *g1 = malloc(p->count * sizeof(float));
    float *gp = malloc(p->count * sizeof(float));

    /* 1. first-order backward */
    forward();
    nn_copy_h2d(be, doutd, wrow, sizeof wrow, &err);
    nn_params_zero_grad(p, NULL);
    float *dxd = NULL;
    nn_alloc(be, sizeof xh, (void **)&dxd, &err);
    CHECK(model_critic_backward(cr, doutd, nn_f32(dxd, B, DIN), &err) == GT_OK);
    float dx[B * DIN];
    nn_copy_d2h(be, dx, dxd, sizeof dx, &err);
    nn_copy_d2h(be, g1, p->grad, p->count * sizeof(float), &err);
    nn_copy_d2h(be, val, p->value, p->count * sizeof(float), &err);
    const double h = 1e-3;
    int bad = 0, checked = 0;
    for (int v = 0; v < p->n_views; v++) {
        const nn_param_view *pv = &p->views[v];
        for (int k = 0; k < pv->rows * pv->cols; k++) {
            size_t at = pv->offset + (size_t)k;
            double lp, lm, fd = central_diff(val, p->value, at, h, loss_d, &lp, &lm);
            checked++;
            if (fabs(fd - g1[at]) > 2e-3 + 2e-2 * fabs(fd)) {
                bad++;
                fprintf(stderr, "dD/d%s[%d]: analytic %.6g, fd %.6g\n", pv->name, k,
                        (double)g1[at], fd);
            }
        }
    }
    for (int k = 0; k < B * DIN; k++) {
        double lp, lm, fd = central_diff(xh, xd, (size_t)k, h, loss_d, &lp, &lm);
        checked++;
        if (fabs(fd - dx[k]) > 2e-3 + 2e-2 * fabs(fd)) {
            bad++;
            fprintf(stderr, "dD/dx[%d]: analytic %.6g, fd %.6g\n", k, (double)dx[k], fd);
        }
    }
    printf("critic backward: %d gradients checked, %d off\n", checked, bad);
    CHECK_EQ_INT(bad, 0);

    /* 2. the penalty's input gradient is the backward's dD/dx: with unit
     * row weights, mean ||dD/dx_i|| is the penalty's mean norm */
    for (int i = 0; i < B; i++)
        wrow[i] = 1.0f;
    forward();
    nn_copy_h2d(be, doutd, wrow, sizeof wrow, &err);
    nn_params_zero_grad(p, NULL);
    CHECK(model_critic_backward(cr, doutd, nn_f32(dxd, B, DIN), &err) == GT_OK);
    nn_copy_d2h(be, dx, dxd, sizeof dx, &err);
    double mn = 0, pen_ref = 0;
    for (int i = 0; i < B; i++) {
        double s = 0;
        for (int j = 0; j < DIN; j++)
            s += (double)dx[i * DIN + j] * dx[i * DIN + j];
        mn += sqrt(s) / B;
        pen_ref += LAMBDA * (sqrt(s) - 1) * (sqrt(s) - 1) / B;
    }
    forward();
    nn_params_zero_grad(p, NULL);
    float pen = 0, mnorm = 0;
    CHECK(model_critic_penalty(cr, LAMBDA, &pen, &mnorm, &err) == GT_OK);
    CHECK_CLOSE(mnorm, mn, 1e-6, 1e-5);
    CHECK_CLOSE(pen, pen_ref, 1e-6, 1e-4);
    printf("penalty %.6g (mean |grad_x D| %.4f)\n", (double)pen, (double)mnorm);
    CHECK(pen > 0.01f); /* a non-trivial penalty: the test would see a wrong gradient */

    /* 3. the double backward against finite differences of P */
    nn_copy_d2h(be, gp, p->grad, p->count * sizeof(float), &err);
    bad = checked = 0;
    int kinks = 0, nonzero = 0;
    for (int v = 0; v < p->n_views; v++) {
        const nn_param_view *pv = &p->views[v];
        for (int k = 0; k < pv->rows * pv->cols; k++) {
            size_t at = pv->offset + (size_t)k;
            double pv0 = penalty();
            double pp, pm, fd = central_diff(val, p->value, at, h, penalty, &pp, &pm);
            /* a mask flip inside [-h, h] shows as one-sided slopes that disagree */
            double fr = (pp - pv0) / h, fl = (pv0 - pm) / h;
            if (fabs(fr - fl) > 0.05 * (fabs(fr) + fabs(fl)) + 0.05) {
                kinks++;
                continue;
            }
            checked++;
            nonzero += fabs(gp[at]) > 1e-4;
            if (fabs(fd - gp[at]) > 2e-3 + 2e-2 * fabs(fd)) {
                bad++;
                fprintf(stderr, "dP/d%s[%d]: analytic %.6g, fd %.6g\n", pv->name, k,
                        (double)gp[at], fd);
            }
        }
    }
    printf("penalty double backward: %d gradients checked (%d non-zero), %d off, %d at a kink\n",
           checked, nonzero, bad, kinks);
    CHECK_EQ_INT(bad, 0);
    CHECK(checked > 100 && kinks < checked / 10 && nonzero > checked / 2);

    /* 4. bad arguments */
    model_critic *x = NULL;
    model_critic_config bc = cc;
    bc.depth = 0;
    CHECK_EQ_INT(model_critic_create(be, &bc, B, &x, &err), GT_EINVAL);
    bc = cc;
    bc.slope = 1.5f;
    CHECK_EQ_INT(model_critic_create(be, &bc, B, &x, &err), GT_EINVAL);
    CHECK_EQ_INT(model_critic_forward(cr, nn_f32(xd, B + 1, DIN), nn_f32(cd, B + 1, NC), outd,
                                      &err),
                 GT_EINVAL);
    CHECK_EQ_INT(model_critic_forward(cr, nn_f32(xd, B, DIN - 1), nn_f32(cd, B, NC), outd, &err),
                 GT_EINVAL);
    CHECK_EQ_INT(model_critic_penalty(cr, NAN, &pen, NULL, &err), GT_EINVAL);
    CHECK_EQ_INT(model_critic_backward(cr, NULL, nn_f32(NULL, B, DIN), &err), GT_EINVAL);

    free(val);
    free(g1);
    free(gp);
    nn_free(be, xd);
    nn_free(be, cd);
    nn_free(be, outd);
    nn_free(be, doutd);
    nn_free(be, dxd);
    model_critic_destroy(cr);
    nn_backend_close(be);
    return check_finish();
}
