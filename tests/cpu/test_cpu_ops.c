/* Every op of the CPU backend: forward against a double-precision reference
 * or an exact expectation, backward against central finite differences, at
 * odd sizes; both fp32 matmul libraries and both bf16 paths; bad input.
 *
 * Finite differences: the scalar probed is L = sum(r * y) with fixed random
 * r, evaluated in double from fp32 outputs, with step h = 1e-2 (1e-3 where
 * noted).  Truncation error is O(h^2) ~ 1e-4 and rounding error ~
 * 1e-7 |L| / h ~ 1e-4 for these sizes, so gradients must agree within
 * atol 2e-3 + rtol 2e-2. */
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "check.h"
#include "nn_backend.h"
#include "nn_rng.h"
#include "nn/nn_fixture.h"

#define FD_ATOL 2e-3
#define FD_RTOL 2e-2

static nn_backend *B;
static gt_error E;

static uint64_t lcg = 88172645463325252ull;
static float frand(void) { return nnfx_frand(&lcg); }

static float *buf(size_t n)
{
    void *p = NULL;
    if (nn_alloc(B, (n ? n : 1) * sizeof(float), &p, &E)) {
        fprintf(stderr, "alloc: %s\n", E.message);
        exit(1);
    }
    return p;
}

static float *rbuf(size_t n, float scale)
{
    float *p = buf(n);
    nnfx_fill(p, n, scale, &lcg);
    return p;
}

/* equal up to a rounding (a fused multiply-add may round once less) */
static int near(float x, float y)
{
    return fabsf(x - y) <= 1e-6f * (1.0f + fabsf(y));
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* FD check of dL/dx for every element of x; loss() recomputes L. */
static void fd_check(const char *what, float *x, size_t n, const float *grad, double (*loss)(void),
                     float h)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + h;
        double lp = loss();
        x[i] = keep - h;
        double lm = loss();
        x[i] = keep;
        double fd = (lp - lm) / (2.0 * h);
        if (!(fabs(grad[i] - fd) <= FD_ATOL + FD_RTOL * fabs(fd))) {
            if (bad++ < 3)
                fprintf(stderr, "%s[%zu]: analytic %.6g, finite difference %.6g\n", what, i,
                        grad[i], fd);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d of %zu gradients off", what, bad, n);
}

/* ------------------------------------------------------------------------ */
/* matmul                                                                   */
/* ------------------------------------------------------------------------ */

static void ref_matmul(double *c, const float *a, int ta, int lda, const float *b, int tb,
                       int ldb, int m, int n, int k)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[p * lda + i] : a[i * lda + p];
                double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += av * bv;
            }
            c[i * n + j] = s;
        }
}

static void test_matmul_backend(nn_backend *be, const char *label)
{
    nn_backend *save = B;
    B = be;
    int m = 13, n = 7, k = 5;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int variant = 0; variant < 3; variant++) {
                /* variant 0: plain; 1: bias + SiLU; 2: accumulate + bias */
                int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
                float *a = rbuf((size_t)(ta ? k : m) * lda, 1.0f);
                float *bm = rbuf((size_t)(tb ? n : k) * ldb, 1.0f);
                float *c = rbuf((size_t)m * ldc, 1.0f);
                float *c0 = malloc((size_t)m * ldc * sizeof(float));
                memcpy(c0, c, (size_t)m * ldc * sizeof(float));
                float *bias = rbuf((size_t)n, 1.0f);
                nn_tensor A = {a, NN_F32, ta ? k : m, ta ? m : k, lda};
                nn_tensor Bt = {bm, NN_F32, tb ? n : k, tb ? k : n, ldb};
                nn_tensor C = {c, NN_F32, m, n, ldc};
                OK(nn_matmul(be, C, A, ta, Bt, tb, variant ? bias : NULL,
                             variant == 1 ? NN_ACT_SILU : NN_ACT_NONE, variant == 2, &E));
                double *ref = malloc((size_t)m * n * sizeof(double));
                ref_matmul(ref, a, ta, lda, bm, tb, ldb, m, n, k);
                int bad = 0;
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double r = ref[i * n + j] + (variant ? bias[j] : 0.0);
                        if (variant == 1)
                            r = r / (1.0 + exp(-r));
                        if (variant == 2)
                            r += c0[i * ldc + j];
                        if (fabs(c[i * ldc + j] - r) > 1e-5 + 1e-5 * fabs(r))
                            bad++;
                    }
                /* the padding columns of C are untouched */
                for (int i = 0; i < m; i++)
                    if (c[i * ldc + n] != c0[i * ldc + n])
                        bad++;
                CHECK_MSG(bad == 0, "%s matmul ta=%d tb=%d variant %d: %d wrong", label, ta, tb,
                          variant, bad);
                free(ref);
                free(c0);
                nn_free(be, a);
                nn_free(be, bm);
                nn_free(be, c);
                nn_free(be, bias);
            }
    B = save;
}

/* bf16: inputs are bf16 values; the result must equal the double product
 * of those exact values to fp32 accumulation accuracy, for every transpose
 * combination and with bias + accumulate. */
static void test_matmul_bf16(nn_backend *be, const char *label)
{
    int m = 17, n = 9, k = 33;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            uint16_t *a = NULL, *bm = NULL;
            float *c = NULL, *bias = NULL;
            OK(nn_alloc(be, (size_t)m * k * 2, (void **)&a, &E));
            OK(nn_alloc(be, (size_t)n * k * 2, (void **)&bm, &E));
            OK(nn_alloc(be, (size_t)m * n * 4, (void **)&c, &E));
            OK(nn_alloc(be, (size_t)n * 4, (void **)&bias, &E));
            float *af = malloc((size_t)m * k * 4), *bf = malloc((size_t)n * k * 4);
            float *c0 = malloc((size_t)m * n * 4);
            for (int i = 0; i < m * k; i++) {
                a[i] = nn_bf16_from_f32(frand());
                af[i] = nn_f32_from_bf16(a[i]);
            }
            for (int i = 0; i < n * k; i++) {
                bm[i] = nn_bf16_from_f32(frand());
                bf[i] = nn_f32_from_bf16(bm[i]);
            }
            for (int i = 0; i < m * n; i++)
                c0[i] = c[i] = frand();
            for (int j = 0; j < n; j++)
                bias[j] = frand();
            int acc = ta ^ tb; /* exercise accumulate + bias on half the cases */
            nn_tensor A = nn_tensor_make(a, NN_BF16, ta ? k : m, ta ? m : k);
            nn_tensor Bt = nn_tensor_make(bm, NN_BF16, tb ? n : k, tb ? k : n);
            OK(nn_matmul(be, nn_f32(c, m, n), A, ta, Bt, tb, bias, NN_ACT_NONE, acc, &E));
            double *ref = malloc((size_t)m * n * sizeof(double));
            ref_matmul(ref, af, ta, ta ? m : k, bf, tb, tb ? k : n, m, n, k);
            int bad = 0;
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double r = ref[i * n + j] + bias[j] + (acc ? c0[i * n + j] : 0.0);
                    if (fabs(c[i * n + j] - r) > 1e-5 + 1e-5 * fabs(r))
                        bad++;
                }
            CHECK_MSG(bad == 0, "%s bf16 matmul ta=%d tb=%d: %d of %d wrong", label, ta, tb, bad,
                      m * n);
            /* mixed dtypes are refused */
            int rc = nn_matmul(be, nn_f32(c, m, n), A, ta, nn_f32(bf, Bt.rows, Bt.cols), tb, NULL,
                               NN_ACT_NONE, 0, &E);
            CHECK_EQ_INT(rc, GT_EINVAL);
            free(ref);
            free(af);
            free(bf);
            free(c0);
            nn_free(be, a);
            nn_free(be, bm);
            nn_free(be, c);
            nn_free(be, bias);
        }
}

/* ------------------------------------------------------------------------ */
/* finite-difference checks, one per op                                     */
/* ------------------------------------------------------------------------ */

enum { R = 7, C = 13 };
static float *X, *Y, *RR, *G1, *G2, *P1, *P2, *MEAN, *RSTD;

static double loss_silu(void)
{
    nn_silu_fwd(B, nn_f32(Y, R, C), nn_f32(X, R, C), &E);
    return dot(Y, RR, R * C);
}

static double loss_leaky(void)
{
    nn_leaky_fwd(B, nn_f32(Y, R, C), nn_f32(X, R, C), 0.1f, &E);
    return dot(Y, RR, R * C);
}

static double loss_ln(void)
{
    nn_ln_fwd(B, nn_f32(Y, R, C), MEAN, RSTD, nn_f32(X, R, C), P1, P2, 1e-5f, &E);
    return dot(Y, RR, R * C);
}

static double loss_softmax(void)
{
    nn_softmax_fwd(B, nn_f32(Y, R, C), nn_f32(X, R, C), &E);
    return dot(Y, RR, R * C);
}

static void test_unary_fd(void)
{
    X = rbuf(R * C, 2.0f);
    Y = buf(R * 32);          /* room for every op's output (embed: R x 18) */
    RR = rbuf(R * 32, 1.0f);
    G1 = buf(R * C);
    /* keep leaky away from its kink */
    for (int i = 0; i < R * C; i++)
        if (fabs(X[i]) < 0.05f)
            X[i] = 0.3f;
    OK(nn_silu_bwd(B, nn_f32(G1, R, C), nn_f32(RR, R, C), nn_f32(X, R, C), &E));
    fd_check("silu dx", X, R * C, G1, loss_silu, 1e-2f);
    OK(nn_leaky_bwd(B, nn_f32(G1, R, C), nn_f32(RR, R, C), nn_f32(X, R, C), 0.1f, &E));
    fd_check("leaky dx", X, R * C, G1, loss_leaky, 1e-2f);
    /* in place: dx aliases dy */
    float *d = buf(R * C);
    memcpy(d, RR, R * C * 4);
    OK(nn_silu_bwd(B, nn_f32(d, R, C), nn_f32(d, R, C), nn_f32(X, R, C), &E));
    OK(nn_silu_bwd(B, nn_f32(G1, R, C), nn_f32(RR, R, C), nn_f32(X, R, C), &E));
    CHECK(memcmp(d, G1, R * C * 4) == 0);
    nn_free(B, d);

    OK(nn_softmax_fwd(B, nn_f32(Y, R, C), nn_f32(X, R, C), &E));
    OK(nn_softmax_bwd(B, nn_f32(G1, R, C), nn_f32(RR, R, C), nn_f32(Y, R, C), &E));
    fd_check("softmax dx", X, R * C, G1, loss_softmax, 1e-2f);

    /* LayerNorm: dx, dgamma, dbeta */
    P1 = rbuf(C, 1.0f);
    P2 = rbuf(C, 1.0f);
    MEAN = buf(R);
    RSTD = buf(R);
    float *dg = buf(C), *db = buf(C);
    memset(dg, 0, C * 4);
    memset(db, 0, C * 4);
    OK(nn_ln_fwd(B, nn_f32(Y, R, C), MEAN, RSTD, nn_f32(X, R, C), P1, P2, 1e-5f, &E));
    OK(nn_ln_bwd(B, nn_f32(G1, R, C), dg, db, nn_f32(RR, R, C), nn_f32(X, R, C), MEAN, RSTD,
                 P1, 0, &E));
    fd_check("layernorm dx", X, R * C, G1, loss_ln, 1e-2f);
    fd_check("layernorm dgamma", P1, C, dg, loss_ln, 1e-2f);
    fd_check("layernorm dbeta", P2, C, db, loss_ln, 1e-2f);
    /* accumulate_dx adds */
    float *acc = buf(R * C);
    for (int i = 0; i < R * C; i++)
        acc[i] = 1.0f;
    OK(nn_ln_bwd(B, nn_f32(acc, R, C), dg, db, nn_f32(RR, R, C), nn_f32(X, R, C), MEAN, RSTD,
                 P1, 1, &E));
    int bad = 0;
    for (int i = 0; i < R * C; i++)
        bad += fabsf(acc[i] - (1.0f + G1[i])) > 1e-6f;
    CHECK_EQ_INT(bad, 0);
    nn_free(B, acc);
    nn_free(B, dg);
    nn_free(B, db);
    /* the forward, bit for bit the per-row rule (nn_ln_row_stats, then
     * nn_ln_elem; the op computes eight rows' statistics together), fp32
     * and bf16 out, with a ragged last group: 19 rows on one thread, 1 283
     * (past CPU_PAR_MIN) on all */
    static const int lrows[] = {19, 1283};
    for (int li = 0; li < 2; li++) {
        int nr = lrows[li], nc = 257;
        float *lx = rbuf((size_t)nr * nc, 3.0f), *ly = buf((size_t)nr * nc),
              *lg = rbuf((size_t)nc, 1.0f), *lb = rbuf((size_t)nc, 1.0f), *lm = buf((size_t)nr),
              *lr = buf((size_t)nr);
        uint16_t *lh = (uint16_t *)buf((size_t)nr * nc);
        for (int i = 0; i < nr; i++)
            lx[(size_t)i * nc] += (float)i;   /* means and spreads that differ by row */
        OK(nn_ln_fwd(B, nn_f32(ly, nr, nc), lm, lr, nn_f32(lx, nr, nc), lg, lb, 1e-5f, &E));
        OK(nn_ln_fwd(B, nn_tensor_make(lh, NN_BF16, nr, nc), lm, lr, nn_f32(lx, nr, nc), lg, lb,
                     1e-5f, &E));
        int bad_l = 0;
        for (int i = 0; i < nr; i++) {
            float mu, rs;
            nn_ln_row_stats(lx + (size_t)i * nc, nc, 1e-5f, &mu, &rs);
            bad_l += memcmp(&mu, &lm[i], sizeof mu) != 0 || memcmp(&rs, &lr[i], sizeof rs) != 0;
            for (int j = 0; j < nc; j++) {
                float want = nn_ln_elem(lx[(size_t)i * nc + j], mu, rs, lg[j], lb[j]);
                bad_l += memcmp(&want, &ly[(size_t)i * nc + j], sizeof want) != 0;
                bad_l += lh[(size_t)i * nc + j] != nn_bf16_from_f32(want);
            }
        }
        CHECK_MSG(bad_l == 0, "ln_fwd, %d rows: %d values differ from the per-row rule", nr,
                  bad_l);
        nn_free(B, lx);
        nn_free(B, ly);
        nn_free(B, lg);
        nn_free(B, lb);
        nn_free(B, lm);
        nn_free(B, lr);
        nn_free(B, lh);
    }
}

/* linear layer through matmul + bias_grad */
static float *LW, *LB;
enum { LIN = 5, LOUT = 3 };
static double loss_linear(void)
{
    nn_matmul(B, nn_f32(Y, R, LOUT), nn_f32(X, R, LIN), 0, nn_f32(LW, LOUT, LIN), 1, LB,
              NN_ACT_NONE, 0, &E);
    return dot(Y, RR, R * LOUT);
}

static void test_linear_fd(void)
{
    float *x = rbuf(R * LIN, 1.0f), *keep_x = X;
    X = x;
    LW = rbuf(LOUT * LIN, 1.0f);
    LB = rbuf(LOUT, 1.0f);
    float *dx = buf(R * LIN), *dw = buf(LOUT * LIN), *db = buf(LOUT);
    memset(dw, 0, LOUT * LIN * 4);
    float *r = rbuf(R * LOUT, 1.0f);
    float *keep = RR;
    RR = r;
    OK(nn_matmul(B, nn_f32(dx, R, LIN), nn_f32(r, R, LOUT), 0, nn_f32(LW, LOUT, LIN), 0, NULL,
                 NN_ACT_NONE, 0, &E));
    OK(nn_matmul(B, nn_f32(dw, LOUT, LIN), nn_f32(r, R, LOUT), 1, nn_f32(x, R, LIN), 0, NULL,
                 NN_ACT_NONE, 1, &E));
    OK(nn_bias_grad(B, db, nn_f32(r, R, LOUT), 0, &E));
    fd_check("linear dx", x, R * LIN, dx, loss_linear, 1e-2f);
    fd_check("linear dW", LW, LOUT * LIN, dw, loss_linear, 1e-2f);
    fd_check("linear db", LB, LOUT, db, loss_linear, 1e-2f);
    RR = keep;
    X = keep_x;
    nn_free(B, x);
    nn_free(B, dx);
    nn_free(B, dw);
    nn_free(B, db);
    nn_free(B, r);
    nn_free(B, LW);
    nn_free(B, LB);
}

/* embedding of 3 conditions x 6 features */
static float *COND;
static double loss_embed(void)
{
    nn_embed_fwd(B, nn_f32(Y, R, 18), nn_f32(COND, R, 3), 6, 3.0f, 100.0f, &E);
    return dot(Y, RR, R * 18);
}

static void test_embed_fd(void)
{
    COND = rbuf(R * 3, 1.0f);
    float *dc = buf(R * 3);
    OK(nn_embed_bwd(B, nn_f32(dc, R, 3), nn_f32(RR, R, 18), nn_f32(COND, R, 3), 6, 3.0f, 100.0f,
                    0, &E));
    fd_check("embed dcond", COND, R * 3, dc, loss_embed, 1e-3f);
    /* feature layout: sin block then cos block per condition */
    OK(nn_embed_fwd(B, nn_f32(Y, R, 18), nn_f32(COND, R, 3), 6, 3.0f, 100.0f, &E));
    CHECK_CLOSE(Y[6 + 0], sin(COND[1] * 3.0), 1e-6, 0);
    CHECK_CLOSE(Y[6 + 3], cos(COND[1] * 3.0), 1e-6, 0);
    CHECK_CLOSE(Y[6 + 4], cos(COND[1] * 3.0 * pow(100.0, -1.0 / 3.0)), 1e-5, 0);
    /* bit for bit the per-element rule (the op computes each column's
     * frequency once), with the frequencies cached (emb_dim 16) and past
     * the cache (emb_dim 520) */
    static const int dims[] = {16, 520};
    for (int di = 0; di < 2; di++) {
        int ed = dims[di], nr = 5;
        float *ye = buf((size_t)nr * 3 * ed), *ge = rbuf((size_t)nr * 3 * ed, 1.0f);
        OK(nn_embed_fwd(B, nn_f32(ye, nr, 3 * ed), nn_f32(COND, nr, 3), ed, 3.0f, 100.0f, &E));
        OK(nn_embed_bwd(B, nn_f32(dc, nr, 3), nn_f32(ge, nr, 3 * ed), nn_f32(COND, nr, 3), ed,
                        3.0f, 100.0f, 0, &E));
        int bad_e = 0;
        for (int i = 0; i < nr; i++)
            for (int c = 0; c < 3; c++) {
                float t = COND[i * 3 + c] * 3.0f, acc = 0.0f;
                for (int j = 0; j < ed; j++) {
                    float want = nn_embed_elem(t, j, ed, 100.0f);
                    bad_e += memcmp(&ye[(size_t)(i * 3 + c) * ed + j], &want, sizeof want) != 0;
                    acc += ge[(size_t)(i * 3 + c) * ed + j] * nn_embed_elem_grad(t, j, ed, 100.0f);
                }
                acc *= 3.0f;
                bad_e += memcmp(&dc[i * 3 + c], &acc, sizeof acc) != 0;
            }
        CHECK_MSG(bad_e == 0, "embed, emb_dim %d: %d values differ from the per-element rule",
                  ed, bad_e);
        nn_free(B, ye);
        nn_free(B, ge);
    }
    nn_free(B, dc);
}

/* MSE and mean */
static float *TGT;
static double loss_mse(void)
{
    float *l = Y;
    nn_mse_fwd(B, l, nn_f32(X, R, C), nn_f32(TGT, R, C), &E);
    return 3.0 * l[0];
}

static double loss_mean(void)
{
    nn_mean_fwd(B, Y, nn_f32(X, R, C), &E);
    return 3.0 * Y[0];
}

static void test_reductions_fd(void)
{
    TGT = rbuf(R * C, 1.0f);
    OK(nn_mse_bwd(B, nn_f32(G1, R, C), 3.0f, nn_f32(X, R, C), nn_f32(TGT, R, C), 0, &E));
    fd_check("mse dpred", X, R * C, G1, loss_mse, 1e-2f);
    OK(nn_mean_bwd(B, nn_f32(G1, R, C), 3.0f, 0, &E));
    fd_check("mean dx", X, R * C, G1, loss_mean, 1e-2f);
    double ref = 0;
    for (int i = 0; i < R * C; i++)
        ref += (double)(X[i] - TGT[i]) * (X[i] - TGT[i]);
    OK(nn_mse_fwd(B, Y, nn_f32(X, R, C), nn_f32(TGT, R, C), &E));
    CHECK_CLOSE(Y[0], ref / (R * C), 1e-6, 1e-6);
    float *ss = buf(1);
    OK(nn_sumsq(B, ss, X, R * C, &E));
    CHECK_CLOSE(ss[0], dot(X, X, R * C), 1e-5, 1e-6);
    nn_free(B, ss);
}

/* stick-breaking, L = 9 layers */
enum { SL = 9 };
static float *SZ;
static double loss_sb(void)
{
    nn_sb_fwd(B, nn_f32(Y, R, SL), nn_f32(SZ, R, SL - 1), &E);
    return dot(Y, RR, R * SL);
}

static void test_sb_fd(void)
{
    SZ = rbuf(R * (SL - 1), 2.0f);
    float *dz = buf(R * (SL - 1));
    OK(nn_sb_bwd(B, nn_f32(dz, R, SL - 1), nn_f32(RR, R, SL), nn_f32(SZ, R, SL - 1), 0, &E));
    fd_check("stick-breaking dz", SZ, R * (SL - 1), dz, loss_sb, 1e-2f);
    OK(nn_sb_fwd(B, nn_f32(Y, R, SL), nn_f32(SZ, R, SL - 1), &E));
    for (int i = 0; i < R; i++) {
        double s = 0;
        for (int l = 0; l < SL; l++)
            s += Y[i * SL + l];
        CHECK_CLOSE(s, 1.0, 1e-6, 0);
    }
    float *z2 = buf(R * (SL - 1));
    OK(nn_sb_inv(B, nn_f32(z2, R, SL - 1), nn_f32(Y, R, SL), 1e-6f, &E));
    for (int i = 0; i < R * (SL - 1); i++)
        CHECK_CLOSE(z2[i], SZ[i], 1e-3, 1e-3);
    nn_free(B, dz);
    nn_free(B, z2);
}

/* routing: top-k weights, gather/scatter, router losses */
enum { NE = 5, TK = 2 };
static float *PR, *TW;
static int32_t *TI;
static double loss_topk(void)
{
    nn_topk_fwd(B, TI, TW, nn_f32(PR, R, NE), TK, &E);
    return dot(TW, RR, R * TK);
}

static float *FRAC;
static double loss_router(void)
{
    nn_balance_fwd(B, Y, nn_f32(PR, R, NE), FRAC, &E);
    nn_entropy_fwd(B, Y + 1, nn_f32(PR, R, NE), &E);
    return 0.7 * Y[0] + 0.3 * Y[1];
}

static void test_routing(void)
{
    /* probabilities with clear gaps so the selection is stable under FD */
    PR = buf(R * NE);
    for (int i = 0; i < R; i++)
        for (int e = 0; e < NE; e++)
            PR[i * NE + e] = 0.05f + 0.1f * (float)((e * 3 + i) % NE) + 0.01f * frand();
    TI = NULL;
    OK(nn_alloc(B, R * TK * sizeof(int32_t), (void **)&TI, &E));
    TW = buf(R * TK);
    OK(nn_topk_fwd(B, TI, TW, nn_f32(PR, R, NE), TK, &E));
    for (int i = 0; i < R; i++) {
        const float *p = PR + i * NE;
        CHECK(p[TI[i * TK]] >= p[TI[i * TK + 1]]);
        for (int e = 0; e < NE; e++)
            if (e != TI[i * TK] && e != TI[i * TK + 1])
                CHECK(p[e] <= p[TI[i * TK + 1]]);
        CHECK_CLOSE(TW[i * TK] + TW[i * TK + 1], 1.0, 1e-6, 0);
    }
    float *dw = rbuf(R * TK, 1.0f), *dp = buf(R * NE);
    float *keep = RR;
    RR = dw;
    OK(nn_topk_bwd(B, nn_f32(dp, R, NE), dw, TI, TW, nn_f32(PR, R, NE), TK, 0, &E));
    fd_check("topk dprobs", PR, R * NE, dp, loss_topk, 1e-3f);
    RR = keep;

    FRAC = buf(NE);
    for (int e = 0; e < NE; e++)
        FRAC[e] = (float)(e + 1) / 15.0f;
    memset(dp, 0, R * NE * 4);
    OK(nn_balance_bwd(B, nn_f32(dp, R, NE), 0.7f, FRAC, &E));
    OK(nn_entropy_bwd(B, nn_f32(dp, R, NE), 0.3f, nn_f32(PR, R, NE), &E));
    fd_check("router losses dprobs", PR, R * NE, dp, loss_router, 1e-3f);
    /* uniform routing gives balance loss 1 */
    float *uni = buf(R * NE), *fu = buf(NE);
    for (int i = 0; i < R * NE; i++)
        uni[i] = 1.0f / NE;
    for (int e = 0; e < NE; e++)
        fu[e] = 1.0f / NE;
    OK(nn_balance_fwd(B, Y, nn_f32(uni, R, NE), fu, &E));
    CHECK_CLOSE(Y[0], 1.0, 1e-6, 0);
    OK(nn_entropy_fwd(B, Y, nn_f32(uni, R, NE), &E));
    CHECK_CLOSE(Y[0], log((double)NE), 1e-5, 0);

    /* gather / scatter / gather_dot against direct loops */
    int32_t *ix = NULL;
    OK(nn_alloc(B, 4 * sizeof(int32_t), (void **)&ix, &E));
    ix[0] = 5;
    ix[1] = 0;
    ix[2] = 3;
    ix[3] = 6;
    float *src = rbuf(R * C, 1.0f), *g = buf(4 * C), *sc = rbuf(4, 1.0f), *acc = buf(R * C);
    OK(nn_gather_rows(B, nn_f32(g, 4, C), nn_f32(src, R, C), ix, sc, &E));
    int bad = 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < C; j++)
            bad += g[i * C + j] != sc[i] * src[ix[i] * C + j];
    memset(acc, 0, R * C * 4);
    OK(nn_scatter_add_rows(B, nn_f32(acc, R, C), nn_f32(g, 4, C), ix, NULL, &E));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < C; j++)
            bad += acc[ix[i] * C + j] != g[i * C + j];
    bad += acc[1 * C] != 0.0f;
    float *dd = buf(4);
    OK(nn_gather_dot(B, dd, nn_f32(src, R, C), ix, nn_f32(g, 4, C), &E));
    for (int i = 0; i < 4; i++)
        bad += fabs(dd[i] - dot(src + ix[i] * C, g + i * C, C)) > 1e-5;
    CHECK_EQ_INT(bad, 0);
    nn_free(B, ix);
    nn_free(B, src);
    nn_free(B, g);
    nn_free(B, sc);
    nn_free(B, acc);
    nn_free(B, dd);
    nn_free(B, uni);
    nn_free(B, fu);
    nn_free(B, dw);
    nn_free(B, dp);
    nn_free(B, FRAC);
    nn_free(B, TI);
    nn_free(B, TW);
    nn_free(B, PR);
}

/* zero_outside: each row's columns outside its valid range cleared, the
 * rest untouched, in a strided view; rows through idx, rows whose index is
 * out of range left alone; and the same bits from the generic fallback
 * (this backend's table without the op: host copies, memsets). */
static void test_zero_outside(void)
{
    enum { ROWS = 9, LD = 11, COLS = 8, NV = 6 };
    const int32_t valid[NV * 2] = {0, 8, 2, 5, 0, 0, 3, 3, 7, 8, 0, 1};
    const int32_t idx[ROWS] = {1, 0, 5, 2, 4, -1, 6, 3, 1};
    nn_backend_ops no_op = *B->ops;
    no_op.zero_outside = NULL;
    nn_backend fallback = *B;
    fallback.ops = &no_op;
    nn_backend *bs[2] = {B, &fallback};
    for (int k = 0; k < 2; k++) {
        for (int with_idx = 0; with_idx < 2; with_idx++) {
            float *x = rbuf(ROWS * LD, 1.0f), *want = buf(ROWS * LD);
            memcpy(want, x, sizeof(float) * ROWS * LD);
            for (int i = 0; i < ROWS; i++) {
                int r = with_idx ? idx[i] : i;
                if (r < 0 || r >= NV)
                    continue;
                for (int j = 0; j < COLS; j++)
                    if (j < valid[2 * r] || j >= valid[2 * r + 1])
                        want[i * LD + 2 + j] = 0.0f;
            }
            nn_tensor v = nn_tensor_cols(nn_f32(x, ROWS, LD), 2, COLS);
            OK(nn_zero_outside(bs[k], v, valid, NV, with_idx ? idx : NULL, &E));
            CHECK_MSG(memcmp(x, want, sizeof(float) * ROWS * LD) == 0,
                      "zero_outside (%s, idx %d): other bits than the ranges say",
                      k ? "fallback" : "op", with_idx);
            nn_free(B, x);
            nn_free(B, want);
        }
    }
    float *x = buf(4);
    CHECK_EQ_INT(nn_zero_outside(B, nn_f32(x, 2, 2), valid, -1, NULL, &E), GT_EINVAL);
    CHECK_EQ_INT(nn_zero_outside(B, nn_f32(x, 2, 2), NULL, 3, NULL, &E), GT_EINVAL);
    nn_free(B, x);
}

static void test_misc(void)
{
    /* concat / split with a strided destination view */
    float *a = rbuf(R * 3, 1.0f), *c = rbuf(R * 4, 1.0f), *y = buf(R * 9);
    nn_tensor wide = nn_f32(y, R, 9);
    nn_tensor parts[2] = {nn_f32(a, R, 3), nn_f32(c, R, 4)};
    OK(nn_concat(B, nn_tensor_cols(wide, 1, 7), parts, 2, &E));
    int bad = 0;
    for (int i = 0; i < R; i++) {
        for (int j = 0; j < 3; j++)
            bad += y[i * 9 + 1 + j] != a[i * 3 + j];
        for (int j = 0; j < 4; j++)
            bad += y[i * 9 + 4 + j] != c[i * 4 + j];
    }
    float *a2 = buf(R * 3);
    nn_tensor back[2] = {nn_f32(a2, R, 3), nn_f32(NULL, R, 4)};
    OK(nn_split(B, back, 2, nn_tensor_cols(wide, 1, 7), 0, &E));
    bad += memcmp(a, a2, R * 3 * 4) != 0;
    OK(nn_split(B, back, 2, nn_tensor_cols(wide, 1, 7), 1, &E));
    for (int i = 0; i < R * 3; i++)
        bad += a2[i] != 2.0f * a[i];
    /* add */
    OK(nn_add(B, nn_f32(a2, R, 3), nn_f32(a, R, 3), nn_f32(a, R, 3), &E));
    for (int i = 0; i < R * 3; i++)
        bad += a2[i] != 2.0f * a[i];
    CHECK_EQ_INT(bad, 0);
    /* mul: exact products, into a strided column view, then in place */
    float *m5 = buf(R * 5);
    OK(nn_mul(B, nn_tensor_cols(nn_f32(m5, R, 5), 2, 3), nn_f32(a, R, 3), nn_f32(a2, R, 3), &E));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 3; j++)
            bad += m5[i * 5 + 2 + j] != a[i * 3 + j] * a2[i * 3 + j];
    OK(nn_mul(B, nn_f32(a2, R, 3), nn_f32(a2, R, 3), nn_f32(a, R, 3), &E));
    for (int i = 0; i < R * 3; i++)
        bad += a2[i] != 2.0f * a[i] * a[i];
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(nn_mul(B, nn_f32(a2, R, 3), nn_f32(a, R, 2), nn_f32(a, R, 3), &E), GT_EINVAL);
    OK(nn_add(B, nn_f32(a2, R, 3), nn_f32(a, R, 3), nn_f32(a, R, 3), &E));
    /* axpby_rows, in place on x too */
    float *co = rbuf(R, 1.0f), *cz = rbuf(R, 1.0f), *ax = buf(R * 3);
    OK(nn_axpby_rows(B, nn_f32(ax, R, 3), co, nn_f32(a, R, 3), cz, nn_f32(a2, R, 3), &E));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 3; j++)
            bad += ax[i * 3 + j] != co[i] * a[i * 3 + j] + cz[i] * a2[i * 3 + j];
    memcpy(ax, a, R * 3 * 4);
    OK(nn_axpby_rows(B, nn_f32(ax, R, 3), co, nn_f32(ax, R, 3), cz, nn_f32(a2, R, 3), &E));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 3; j++)
            bad += ax[i * 3 + j] != co[i] * a[i * 3 + j] + cz[i] * a2[i * 3 + j];
    CHECK_EQ_INT(nn_axpby_rows(B, nn_f32(ax, R, 3), co, nn_f32(a, R, 2), cz, nn_f32(a2, R, 3),
                               &E), GT_EINVAL);
    CHECK_EQ_INT(bad, 0);
    /* affine_cols: with a shift, without, in place, into a column view */
    float *sc = rbuf(3, 1.0f), *sh = rbuf(3, 1.0f), *w5 = buf(R * 5);
    OK(nn_affine_cols(B, nn_f32(ax, R, 3), nn_f32(a, R, 3), sc, sh, &E));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 3; j++)
            bad += !near(ax[i * 3 + j], sc[j] * a[i * 3 + j] + sh[j]);
    memcpy(ax, a, R * 3 * 4);
    OK(nn_affine_cols(B, nn_f32(ax, R, 3), nn_f32(ax, R, 3), sc, NULL, &E));
    for (int i = 0; i < R * 3; i++)
        bad += !near(ax[i], sc[i % 3] * a[i]);
    for (int i = 0; i < R * 5; i++)
        w5[i] = -7.0f;
    OK(nn_affine_cols(B, nn_tensor_cols(nn_f32(w5, R, 5), 1, 3), nn_f32(a, R, 3), sc, sh, &E));
    for (int i = 0; i < R; i++)
        bad += w5[i * 5] != -7.0f || w5[i * 5 + 4] != -7.0f ||
               !near(w5[i * 5 + 2], sc[1] * a[i * 3 + 1] + sh[1]);
    CHECK_EQ_INT(nn_affine_cols(B, nn_f32(ax, R, 3), nn_f32(a, R, 2), sc, sh, &E), GT_EINVAL);
    CHECK_EQ_INT(nn_affine_cols(B, nn_f32(ax, R, 3), nn_f32(a, R, 3), NULL, sh, &E), GT_EINVAL);
    CHECK_EQ_INT(bad, 0);
    nn_free(B, sc);
    nn_free(B, sh);
    nn_free(B, w5);
    nn_free(B, co);
    nn_free(B, cz);
    nn_free(B, ax);
    /* cast matches the scalar conversion bit for bit */
    uint16_t *h = NULL;
    OK(nn_alloc(B, R * 3 * 2, (void **)&h, &E));
    OK(nn_cast_bf16(B, nn_tensor_make(h, NN_BF16, R, 3), nn_f32(a, R, 3), &E));
    for (int i = 0; i < R * 3; i++)
        bad += h[i] != nn_bf16_from_f32(a[i]);
    CHECK_EQ_INT(bad, 0);
    /* SiLU and LayerNorm into bf16 (the trunk's bf16 path): the fp32
     * result rounded as the cast rounds it, bit for bit; a strided bf16
     * output leaves the columns past its view alone */
    {
        float *f = buf(R * 3), *mu = buf(R), *rs = buf(R), *gm = rbuf(3, 1.0f), *bt = rbuf(3, 1.0f);
        uint16_t *hb = NULL;
        OK(nn_alloc(B, R * 4 * 2, (void **)&hb, &E));
        nn_tensor hv = nn_tensor_make(hb, NN_BF16, R, 3);
        hv.ld = 4;
        for (int i = 0; i < R * 4; i++)
            hb[i] = 0x7FC1;
        OK(nn_silu_fwd(B, nn_f32(f, R, 3), nn_f32(a, R, 3), &E));
        OK(nn_silu_fwd(B, hv, nn_f32(a, R, 3), &E));
        for (int i = 0; i < R; i++) {
            for (int j = 0; j < 3; j++)
                bad += hb[i * 4 + j] != nn_bf16_from_f32(f[i * 3 + j]);
            bad += hb[i * 4 + 3] != 0x7FC1;
        }
        CHECK_EQ_INT(bad, 0);
        OK(nn_ln_fwd(B, nn_f32(f, R, 3), mu, rs, nn_f32(a, R, 3), gm, bt, 1e-5f, &E));
        OK(nn_ln_fwd(B, hv, mu, rs, nn_f32(a, R, 3), gm, bt, 1e-5f, &E));
        for (int i = 0; i < R; i++) {
            for (int j = 0; j < 3; j++)
                bad += hb[i * 4 + j] != nn_bf16_from_f32(f[i * 3 + j]);
            bad += hb[i * 4 + 3] != 0x7FC1;
        }
        CHECK_EQ_INT(bad, 0);
        /* the input stays fp32 */
        CHECK_EQ_INT(nn_silu_fwd(B, hv, nn_tensor_make(hb, NN_BF16, R, 3), &E), GT_EINVAL);
        float *fb[] = {f, mu, rs, gm, bt};
        for (size_t i = 0; i < sizeof fb / sizeof fb[0]; i++)
            nn_free(B, fb[i]);
        nn_free(B, hb);
    }
    /* AdamW op == per-element reference, bit for bit, bf16 copy written:
     * a short run (one thread) and one over the parallel threshold with
     * a ragged last run of the vectorised loop, two steps each, with and
     * without the bf16 copy */
    static const int adamw_n[] = {100, 70001};
    for (size_t k = 0; k < 2; k++) {
        const int n = adamw_n[k];
        float *p = rbuf(n, 1.0f), *gr = rbuf(n, 1.0f), *m = buf(n), *v = buf(n);
        float *pr = malloc((size_t)n * sizeof(float)), *mr = calloc((size_t)n, sizeof(float));
        float *vr = calloc((size_t)n, sizeof(float));
        memset(m, 0, (size_t)n * sizeof(float));
        memset(v, 0, (size_t)n * sizeof(float));
        memcpy(pr, p, (size_t)n * sizeof(float));
        uint16_t *pb = NULL;
        OK(nn_alloc(B, (size_t)n * sizeof(uint16_t), (void **)&pb, &E));
        /* steps 3 and 4 clip in the op from the gradient's sum of squares
         * (3: under the norm, so unchanged; 4: over it); step 5's sum is
         * not finite and must leave everything as it was */
        float ss_g = 0.0f;
        OK(nn_sumsq(B, &ss_g, gr, (size_t)n, &E));
        for (int step = 1; step <= 5; step++) {
            uint16_t *copy = step == 1 ? pb : NULL;
            nn_adamw_hp hp = nn_adamw_hp_make(1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, step, 0.5f);
            const float *ss = NULL;
            float ss_bad = NAN;
            nn_adamw_hp ref = hp;
            if (step >= 3) {
                hp.clip_norm = step == 3 ? 1e9f : 0.25f * sqrtf(ss_g);
                ss = step == 5 ? &ss_bad : &ss_g;
                ref = hp;
                CHECK_EQ_INT(nn_adamw_hp_clip(&ref, *ss), step != 5);
                if (step == 3)
                    CHECK(ref.grad_scale == 0.5f);
                if (step == 4)   /* 0.5 |g| clipped to 0.25 |g|: about 0.25 */
                    CHECK(fabsf(ref.grad_scale - 0.25f) < 1e-5f);
            }
            OK(nn_adamw(B, p, copy, gr, m, v, (size_t)n, &hp, ss, &E));
            for (int i = 0; i < n; i++) {
                if (step != 5)
                    nn_adamw_elem(&pr[i], &mr[i], &vr[i], gr[i], &ref);
                bad += pr[i] != p[i] || mr[i] != m[i] || vr[i] != v[i];
                if (copy)
                    bad += pb[i] != nn_bf16_from_f32(p[i]);
            }
        }
        CHECK_EQ_INT(bad, 0);
        nn_free(B, pb);
        nn_free(B, p);
        nn_free(B, gr);
        nn_free(B, m);
        nn_free(B, v);
        free(pr);
        free(mr);
        free(vr);
    }
    /* random fill == the documented per-element rule, bit for bit (the
     * fill computes a block's four lanes together, one logarithm per
     * Box-Muller pair), on one thread and (40 001: past CPU_PAR_MIN) on
     * all, with a ragged last block */
    float *rf = buf(40001);
    for (int fi = 0; fi < 2; fi++) {
        int nf = fi ? 40001 : 103;
        OK(nn_rand_fill(B, rf, (size_t)nf, NN_DIST_NORMAL, 1.0f, 2.0f, 77, 3, 10, &E));
        for (int i = 0; i < nf; i++) {
            uint32_t r[4];
            nn_rng_block(77, 3, 10 + (uint64_t)i / 4, r);
            float want = nn_rng_fill_elem(r, i % 4, 0, 1.0f, 2.0f);
            bad += memcmp(&rf[i], &want, sizeof want) != 0;
        }
        OK(nn_rand_fill(B, rf, (size_t)nf, NN_DIST_UNIFORM, -1.0f, 3.0f, 77, 3, 10, &E));
        for (int i = 0; i < nf; i++) {
            uint32_t r[4];
            nn_rng_block(77, 3, 10 + (uint64_t)i / 4, r);
            float want = nn_rng_fill_elem(r, i % 4, 1, -1.0f, 3.0f);
            bad += memcmp(&rf[i], &want, sizeof want) != 0;
            bad += !(rf[i] >= -1.0f && rf[i] < 3.0f);
        }
    }
    CHECK_EQ_INT(bad, 0);
    nn_free(B, rf);
    nn_free(B, h);
    nn_free(B, a);
    nn_free(B, a2);
    nn_free(B, m5);
    nn_free(B, c);
    nn_free(B, y);
}

static void test_bad_input(void)
{
    float *a = buf(64), *c = buf(64);
    gt_error e = {0};
    /* mismatched shapes */
    CHECK_EQ_INT(nn_matmul(B, nn_f32(c, 3, 4), nn_f32(a, 3, 5), 0, nn_f32(a, 4, 6), 1, NULL,
                           NN_ACT_NONE, 0, &e), GT_EINVAL);
    CHECK(strstr(e.message, "inner") != NULL);
    CHECK_EQ_INT(nn_matmul(B, nn_f32(c, 3, 3), nn_f32(a, 3, 5), 0, nn_f32(a, 4, 5), 1, NULL,
                           NN_ACT_NONE, 0, &e), GT_EINVAL);
    CHECK_EQ_INT(nn_silu_fwd(B, nn_f32(c, 3, 4), nn_f32(a, 4, 3), &e), GT_EINVAL);
    CHECK_EQ_INT(nn_mse_fwd(B, c, nn_f32(a, 2, 3), nn_f32(a, 3, 2), &e), GT_EINVAL);
    /* unknown dtype */
    nn_tensor bad = nn_tensor_make(a, (nn_dtype)7, 2, 2);
    CHECK_EQ_INT(nn_silu_fwd(B, nn_f32(c, 2, 2), bad, &e), GT_EINVAL);
    CHECK(strstr(e.message, "dtype") != NULL);
    nn_dtype dt;
    CHECK_EQ_INT(nn_dtype_parse("fp16", &dt, &e), GT_EINVAL);
    CHECK_EQ_INT(nn_dtype_parse("bf16", &dt, &e), GT_OK);
    CHECK_EQ_INT(dt, NN_BF16);
    /* bf16 where fp32 is required */
    CHECK_EQ_INT(nn_softmax_fwd(B, nn_f32(c, 2, 2), nn_tensor_make(a, NN_BF16, 2, 2), &e),
                 GT_EINVAL);
    /* NULL data, negative shapes, bad leading dimension */
    CHECK_EQ_INT(nn_silu_fwd(B, nn_f32(c, 2, 2), nn_f32(NULL, 2, 2), &e), GT_EINVAL);
    CHECK_EQ_INT(nn_silu_fwd(B, nn_f32(c, -1, 2), nn_f32(a, -1, 2), &e), GT_EINVAL);
    nn_tensor ld = nn_f32(a, 2, 4);
    ld.ld = 3;
    CHECK_EQ_INT(nn_silu_fwd(B, nn_f32(c, 2, 4), ld, &e), GT_EINVAL);
    /* op-specific ranges */
    int32_t *ix = (int32_t *)c;
    CHECK_EQ_INT(nn_topk_fwd(B, ix, a, nn_f32(a, 2, 3), 4, &e), GT_EINVAL);
    CHECK_EQ_INT(nn_embed_fwd(B, nn_f32(c, 2, 6), nn_f32(a, 2, 2), 3, 1.0f, 10.0f, &e),
                 GT_EINVAL);
    CHECK_EQ_INT(nn_ln_fwd(B, nn_f32(c, 2, 4), a, a, nn_f32(a + 8, 2, 4), a, a, -1.0f, &e),
                 GT_EINVAL);
    CHECK_EQ_INT(nn_sb_fwd(B, nn_f32(c, 2, 4), nn_f32(a, 2, 4), &e), GT_EINVAL);
    CHECK_EQ_INT(nn_rand_fill(B, a, 4, (nn_dist)9, 0, 1, 0, 0, 0, &e), GT_EINVAL);
    CHECK_EQ_INT(nn_matmul(B, nn_f32(c, 2, 2), nn_f32(a, 2, 2), 0, nn_f32(a, 2, 2), 0, NULL,
                           NN_ACT_SILU, 1, &e), GT_EINVAL);
    CHECK_EQ_INT(nn_matmul(NULL, nn_f32(c, 2, 2), nn_f32(a, 2, 2), 0, nn_f32(a, 2, 2), 0, NULL,
                           NN_ACT_NONE, 0, &e), GT_EINVAL);
    nn_free(B, a);
    nn_free(B, c);
}

int main(void)
{
    /* both fp32 matmul libraries and both bf16 paths */
    nn_backend *blas = NULL, *dnnl = NULL, *emu = NULL;
    setenv("GIANT_CPU_SGEMM", "openblas", 1);
    setenv("GIANT_CPU_BF16", "emulate", 1);
    if (cpu_backend_create(&blas, &E)) {
        fprintf(stderr, "cpu backend: %s\n", E.message);
        return 1;
    }
    emu = blas;
    setenv("GIANT_CPU_SGEMM", "onednn", 1);
    unsetenv("GIANT_CPU_BF16");
    if (cpu_backend_create(&dnnl, &E)) {
        fprintf(stderr, "cpu backend: %s\n", E.message);
        return 1;
    }
    unsetenv("GIANT_CPU_SGEMM");
    B = dnnl;
    CHECK(emu->bf16_emulated && !emu->has_bf16);
    test_matmul_backend(blas, "openblas");
    test_matmul_backend(dnnl, "onednn");
    test_matmul_bf16(emu, "emulated");
    if (dnnl->has_bf16)
        test_matmul_bf16(dnnl, "native");
    else
        printf("note: no AVX512-BF16 here; native bf16 path not tested\n");
    size_t live0 = B->bytes_live;
    test_unary_fd();
    test_linear_fd();
    test_embed_fd();
    test_reductions_fd();
    test_sb_fd();
    test_routing();
    test_misc();
    test_zero_outside();
    test_bad_input();
    nn_free(B, X);
    nn_free(B, Y);
    nn_free(B, RR);
    nn_free(B, G1);
    nn_free(B, P1);
    nn_free(B, P2);
    nn_free(B, MEAN);
    nn_free(B, RSTD);
    nn_free(B, COND);
    nn_free(B, TGT);
    nn_free(B, SZ);
    CHECK_EQ_INT(B->bytes_live, live0 > 0 ? live0 : 0);
    (void)G2;
    nn_backend_close(blas);
    nn_backend_close(dnnl);
    return check_finish();
}
