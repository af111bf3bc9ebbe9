/* test_cuda_backend: the CUDA backend against the CPU backend.  (One
 * program over 800 lines: every op family's comparison, the fixed-order
 * layer and the whole steps share the paired-buffer harness below and the
 * two backends it opens; one function per op family.)
 *
 * Every op runs on both backends on the same random inputs, outputs
 * poisoned (all bits set: NaN) beforehand, and the results are compared by
 * normwise relative error  max|gpu - cpu| / max|cpu|  with these bounds:
 *   exact     integer outputs (top-k indices), the bf16 cast, uniform
 *             random numbers (bit-identical by construction), and ops
 *             that round each element once or not at all (add, mul,
 *             leaky ReLU, concat/split, gathers);
 *   TOL_EW    1e-5  fp32 elementwise ops (device expf/logf/sinf differ from
 *                   libm by an ulp or two; FMA contraction);
 *   TOL_RED   1e-4  fp32 reductions, matmuls, LayerNorm (summation order),
 *                   and chains of transcendental functions (stick-breaking's
 *                   products over up to 512 layers, embeddings at large phases);
 *   TOL_BF16  1e-2  bf16-input matmuls and what follows them;
 *   TOL_STEP  1e-3  whole fp32 training steps (several ops compounded).
 * The fixed-order linear layer (linear_fixed, the sampler's product) is
 * compared the same way (TOL_RED fp32, TOL_BF16 bf16); where the naive
 * reference stands in for the GPU it must equal the CPU backend bit for
 * bit (host code on both sides, built without FMA contraction, both
 * following engine/cpu/cpu_fixed.h).  Its row invariance is exact on each
 * backend: rows [r0, r0+m) computed alone are the bytes of the same rows
 * of one big call, for m = 1..24, 64, 256, 1000 at several offsets.
 * Plans: a library matmul plan is made once per shape and pointer
 * alignment (the bias's included) and moves plan_count once; a training
 * step after a warm-up step makes none, on either backend.
 * Then whole steps: engine/nn's expert and routed trunks (forward, backward,
 * AdamW, the packed sampling forward) on both backends, and on the GPU the
 * trunk's gradient step and an Euler sampler captured as graphs and replayed
 * against their uncaptured runs (expected bit-identical: same kernels, same
 * cuBLASLt algorithms).
 * Skips (exit 77) when there is no CUDA device. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "check.h"
#include "cuda_backend.h"
#include "nn_adamw.h"
#include "nn_backend.h"
#include "nn_rng.h"
#include "nn_trunk.h"
#include "ref_backend.h"
#ifdef GIANT_TEST_WITH_CPU
#include "cpu_backend.h"
#endif


#define TOL_EW 1e-5
#define TOL_RED 1e-4
#define TOL_BF16 1e-2
#define TOL_STEP 1e-3

static nn_backend *CPU, *GPU;
static gt_error err;

#define OK(x)                                                                  \
    do {                                                                       \
        int rc_ = (x);                                                         \
        CHECK_MSG(rc_ == GT_OK, "%s -> %d: %s", #x, rc_, err.message);         \
    } while (0)

/* Runs the statement once per backend: b is the backend, side 0 = CPU, 1 = GPU,
 * and T(p) / P(p) give pair p's tensor / pointer on that side. */
#define BOTH for (int side = 0; side < 2; side++) for (nn_backend *b = side ? GPU : CPU; b; b = NULL)
#define T(p) (side ? pg(&(p)) : pc(&(p)))
#define P(p) (side ? (p).g : (p).c)

/* ------------------------------------------------------------------------ */
/* paired buffers                                                           */
/* ------------------------------------------------------------------------ */

typedef struct pair {
    int rows, cols;
    size_t n;
    nn_dtype dt;
    float *h;      /* host values (fp32) */
    void *c, *g;   /* CPU and GPU copies */
} pair;

static uint64_t rs = 0x9E3779B97F4A7C15ull;

static float frand(float lo, float hi)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return lo + (hi - lo) * (float)((rs >> 40) * (1.0 / 16777216.0));
}

static pair pnew_t(int rows, int cols, nn_dtype dt)
{
    pair p;
    memset(&p, 0, sizeof p);
    p.rows = rows;
    p.cols = cols;
    p.n = (size_t)rows * cols;
    p.dt = dt;
    p.h = calloc(p.n ? p.n : 1, sizeof(float));
    size_t bytes = p.n * nn_dtype_size(dt);
    OK(nn_alloc(CPU, bytes, &p.c, &err));
    OK(nn_alloc(GPU, bytes, &p.g, &err));
    return p;
}

static pair pnew(int rows, int cols)
{
    return pnew_t(rows, cols, NN_F32);
}

static void pfree(pair *p)
{
    nn_free(CPU, p->c);
    nn_free(GPU, p->g);
    free(p->h);
}

/* pfree on each of the pairs named */
#define PFREE(...)                                                             \
    do {                                                                       \
        pair *all_[] = {__VA_ARGS__};                                          \
        for (size_t i_ = 0; i_ < sizeof all_ / sizeof all_[0]; i_++)           \
            pfree(all_[i_]);                                                   \
    } while (0)

static nn_tensor pc(pair *p)
{
    return nn_tensor_make(p->c, p->dt, p->rows, p->cols);
}

static nn_tensor pg(pair *p)
{
    return nn_tensor_make(p->g, p->dt, p->rows, p->cols);
}

/* Uploads the host values (fp32 pairs only). */
static void pput(pair *p)
{
    OK(nn_copy_h2d(CPU, p->c, p->h, p->n * sizeof(float), &err));
    OK(nn_copy_h2d(GPU, p->g, p->h, p->n * sizeof(float), &err));
}

static void prand(pair *p, float lo, float hi)
{
    for (size_t i = 0; i < p->n; i++)
        p->h[i] = frand(lo, hi);
    pput(p);
}

static void poison(pair *p)
{
    size_t bytes = p->n * nn_dtype_size(p->dt);
    OK(nn_memset(CPU, p->c, 0xFF, bytes, &err));
    OK(nn_memset(GPU, p->g, 0xFF, bytes, &err));
}

/* The first `cols` columns of an fp32 pair as a view with row pitch
 * p->cols (ld > cols when the pair is wider). */
static nn_tensor pview(pair *p, int side, int cols)
{
    nn_tensor t = side ? pg(p) : pc(p);
    t.cols = cols;
    return t;
}

/* Poisons the view of the first `cols` columns and fills the columns past
 * them with the same random values on both sides: an op on the view must
 * overwrite all of it and leave the rest alone, which pcmp then sees. */
static void poison_view(pair *p, int cols)
{
    const uint32_t nan_bits = 0xFFFFFFFFu;
    for (size_t i = 0; i < p->n; i++) {
        if ((int)(i % (size_t)p->cols) < cols)
            memcpy(&p->h[i], &nan_bits, sizeof nan_bits);
        else
            p->h[i] = frand(-1, 1);
    }
    pput(p);
}

static void fetch(pair *p, void *hc, void *hg)
{
    size_t bytes = p->n * nn_dtype_size(p->dt);
    OK(nn_copy_d2h(CPU, hc, p->c, bytes, &err));
    OK(nn_copy_d2h(GPU, hg, p->g, bytes, &err));
}

/* Normwise relative error of the GPU result against the CPU one. */
static double relerr(const float *c, const float *g, size_t n)
{
    double md = 0.0, mc = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)g[i] - (double)c[i]);
        if (!(d <= md))            /* NaN (poison left) counts as infinite */
            md = isnan(d) ? INFINITY : d;
        if (fabs((double)c[i]) > mc)
            mc = fabs((double)c[i]);
    }
    return mc > 0.0 ? md / mc : md;
}

static double cmp_f(const char *what, const float *c, const float *g, size_t n, double tol)
{
    double e = relerr(c, g, n);
    CHECK_MSG(e <= tol, "%s: relative error %.3g > %.1g", what, e, tol);
    printf("  %-28s %.2e (bound %.0e)\n", what, e, tol);
    return e;
}

static double pcmp(pair *p, const char *what, double tol)
{
    size_t n = p->n ? p->n : 1;
    float *c = calloc(n, sizeof(float)), *g = calloc(n, sizeof(float));
    double e = 0.0;
    if (p->dt == NN_F32) {
        fetch(p, c, g);
        e = cmp_f(what, c, g, p->n, tol);
    } else {   /* bf16: compare as floats */
        uint16_t *hc = calloc(n, 2), *hg = calloc(n, 2);
        fetch(p, hc, hg);
        for (size_t i = 0; i < p->n; i++) {
            c[i] = nn_f32_from_bf16(hc[i]);
            g[i] = nn_f32_from_bf16(hg[i]);
        }
        e = cmp_f(what, c, g, p->n, tol);
        free(hc);
        free(hg);
    }
    free(c);
    free(g);
    return e;
}

static void pcmp_exact(pair *p, const char *what)
{
    size_t bytes = p->n * nn_dtype_size(p->dt);
    void *c = calloc(bytes + 1, 1), *g = calloc(bytes + 1, 1);
    fetch(p, c, g);
    CHECK_MSG(memcmp(c, g, bytes) == 0, "%s: not bit-identical", what);
    printf("  %-28s %s\n", what, memcmp(c, g, bytes) == 0 ? "bit-identical" : "DIFFERS");
    free(c);
    free(g);
}

/* On each side, a (bf16) holds the same bytes as b (bf16): an op writing
 * bf16 itself equals the op in fp32 followed by that side's cast_bf16. */
static void psame_sides(pair *a, pair *b2, const char *what)
{
    size_t bytes = a->n * nn_dtype_size(a->dt);
    unsigned char *ac = calloc(bytes + 1, 1), *ag = calloc(bytes + 1, 1);
    unsigned char *bc = calloc(bytes + 1, 1), *bg = calloc(bytes + 1, 1);
    fetch(a, ac, ag);
    fetch(b2, bc, bg);
    int same = !memcmp(ac, bc, bytes) && !memcmp(ag, bg, bytes);
    CHECK_MSG(same, "%s: differs from fp32 then cast_bf16", what);
    printf("  %-28s %s\n", what, same ? "= fp32 then cast, both sides" : "DIFFERS");
    free(ac);
    free(ag);
    free(bc);
    free(bg);
}

/* ------------------------------------------------------------------------ */
/* op tests                                                                 */
/* ------------------------------------------------------------------------ */

static void test_matmul_f32(void)
{
    printf("matmul fp32\n");
    const int M = 67, N = 45, K = 33;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int mode = 0; mode < 3; mode++) {
                /* A stored wider than used (ld > cols) to test views */
                pair a = ta ? pnew(K, M + 3) : pnew(M, K + 3);
                pair bm = tb ? pnew(N, K) : pnew(K, N);
                pair c = pnew(M, N), bias = pnew(1, N);
                prand(&a, -1, 1);
                prand(&bm, -1, 1);
                prand(&bias, -1, 1);
                if (mode == 2)
                    prand(&c, -1, 1);
                else
                    poison(&c);
                BOTH
                {
                    nn_tensor A = T(a);
                    A.cols -= 3;
                    OK(nn_matmul(b, T(c), A, ta, T(bm), tb, mode ? P(bias) : NULL,
                                 mode == 1 ? NN_ACT_SILU : NN_ACT_NONE, mode == 2, &err));
                }
                char what[64];
                snprintf(what, sizeof what, "matmul ta%d tb%d %s", ta, tb,
                         mode == 0 ? "plain" : mode == 1 ? "bias+silu" : "bias+acc");
                pcmp(&c, what, TOL_RED);
                PFREE(&a, &bm, &c, &bias);
            }
    /* a tensor-core friendly shape, the Linear layer pattern */
    pair x = pnew(256, 512), w = pnew(384, 512), y = pnew(256, 384), bias = pnew(1, 384);
    prand(&x, -1, 1);
    prand(&w, -0.05f, 0.05f);
    prand(&bias, -1, 1);
    poison(&y);
    BOTH OK(nn_matmul(b, T(y), T(x), 0, T(w), 1, P(bias), NN_ACT_NONE, 0, &err));
    pcmp(&y, "linear 256x512 -> 384", TOL_RED);
    /* k == 0: bias only */
    pair e0 = pnew(256, 0), w0 = pnew(384, 0);
    poison(&y);
    BOTH
    {
        nn_tensor A = T(e0), W = T(w0);
        A.ld = W.ld = 1;                 /* the wrappers want ld >= 1 */
        OK(nn_matmul(b, T(y), A, 0, W, 1, P(bias), NN_ACT_NONE, 0, &err));
    }
    pcmp(&y, "matmul k=0 (bias only)", 0.0);
    PFREE(&e0, &w0, &x, &w, &y, &bias);
}

static void test_matmul_bf16(void)
{
    printf("matmul bf16 (and the cast)\n");
    pair x = pnew(256, 520), w = pnew(384, 520), y = pnew(256, 384), bias = pnew(1, 384);
    pair xb = pnew_t(256, 520, NN_BF16), wb = pnew_t(384, 520, NN_BF16);
    prand(&x, -1, 1);
    prand(&w, -0.05f, 0.05f);
    prand(&bias, -1, 1);
    poison(&xb);
    poison(&wb);
    poison(&y);
    BOTH
    {
        OK(nn_cast_bf16(b, T(xb), T(x), &err));
        OK(nn_cast_bf16(b, T(wb), T(w), &err));
        OK(nn_matmul(b, T(y), T(xb), 0, T(wb), 1, P(bias), NN_ACT_NONE, 0, &err));
    }
    pcmp_exact(&xb, "cast_bf16");
    pcmp(&y, "bf16 linear", TOL_BF16);
    /* weight gradient pattern: dW += dY^T X, fp32 output */
    pair dw = pnew(384, 520), dyb = pnew_t(256, 384, NN_BF16);
    prand(&dw, -1, 1);
    BOTH
    {
        OK(nn_cast_bf16(b, T(dyb), T(y), &err));
        OK(nn_matmul(b, T(dw), T(dyb), 1, T(xb), 0, NULL, NN_ACT_NONE, 1, &err));
    }
    pcmp(&dw, "bf16 dW += dY^T X", TOL_BF16);
    PFREE(&dw, &dyb, &x, &w, &y, &bias, &xb, &wb);
}

/* The plan cache of the library matmul: a linear layer whose bias starts
 * 256, 4, 8 and 16 bytes into its allocation.  Each alignment is its own
 * plan (chosen with that bias pointer), made on the first call and reused
 * by the second (plan_count moves once); b->plan_count follows the caches
 * (cuda_backend_plan_count); the results stay within TOL_RED of the CPU. */
static void test_matmul_plans(void)
{
    printf("matmul plans and bias alignment\n");
    const int M = 64, N = 48, K = 32;
    pair x = pnew(M, K), w = pnew(N, K), y = pnew(M, N), bias = pnew(1, N + 4);
    prand(&x, -1, 1);
    prand(&w, -1, 1);
    prand(&bias, -1, 1);
    static const int offs[] = {0, 1, 2, 4};   /* floats into the 256-byte aligned block */
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "linear, bias at +%d bytes", 4 * offs[i]);
        for (int call = 0; call < 2; call++) {
            poison(&y);
            size_t plans = GPU->plan_count;
            BOTH OK(nn_matmul(b, T(y), T(x), 0, T(w), 1, (const float *)P(bias) + offs[i],
                              NN_ACT_NONE, 0, &err));
            pcmp(&y, what, TOL_RED);
            if (cuda_backend_is(GPU)) {
                CHECK_MSG(GPU->plan_count == plans + (call == 0),
                          "%s, call %d: %zu new plans (expected %d)", what, call,
                          GPU->plan_count - plans, call == 0);
                CHECK_EQ_INT(GPU->plan_count, cuda_backend_plan_count(GPU));
            }
        }
    }
    PFREE(&x, &w, &y, &bias);
}

static void test_elementwise(int rows, int cols)
{
    printf("elementwise %dx%d\n", rows, cols);
    pair x = pnew(rows, cols), dy = pnew(rows, cols), y = pnew(rows, cols), x2 = pnew(rows, cols);
    prand(&x, -4, 4);
    prand(&dy, -1, 1);
    prand(&x2, -1, 1);
    poison(&y);
    BOTH OK(nn_silu_fwd(b, T(y), T(x), &err));
    pcmp(&y, "silu_fwd", TOL_EW);
    poison(&y);
    BOTH OK(nn_silu_bwd(b, T(y), T(dy), T(x), &err));
    pcmp(&y, "silu_bwd", TOL_EW);
    poison(&y);
    BOTH OK(nn_leaky_fwd(b, T(y), T(x), 0.2f, &err));
    pcmp(&y, "leaky_fwd", 0.0);
    poison(&y);
    BOTH OK(nn_leaky_bwd(b, T(y), T(dy), T(x), 0.2f, &err));
    pcmp(&y, "leaky_bwd", 0.0);
    poison(&y);
    BOTH OK(nn_add(b, T(y), T(x), T(x2), &err));
    pcmp(&y, "add", 0.0);
    poison(&y);
    BOTH OK(nn_mul(b, T(y), T(x), T(x2), &err));
    pcmp(&y, "mul", 0.0);
    /* SiLU into bf16 (the trunk's bf16 path) */
    pair yb = pnew_t(rows, cols, NN_BF16), yc = pnew_t(rows, cols, NN_BF16);
    poison(&yb);
    BOTH OK(nn_silu_fwd(b, T(y), T(x), &err));
    BOTH OK(nn_cast_bf16(b, T(yc), T(y), &err));
    BOTH OK(nn_silu_fwd(b, T(yb), T(x), &err));
    pcmp(&yb, "silu_fwd to bf16", TOL_BF16);
    psame_sides(&yb, &yc, "silu_fwd to bf16");
    PFREE(&yb, &yc);
    /* in place: y aliases x */
    BOTH OK(nn_silu_fwd(b, T(y), T(y), &err));
    pcmp(&y, "silu_fwd in place", TOL_EW);
    poison(&y);
    BOTH OK(nn_mse_bwd(b, T(y), 0.5f, T(x), T(x2), 0, &err));
    pcmp(&y, "mse_bwd", TOL_EW);
    BOTH OK(nn_mse_bwd(b, T(y), 0.5f, T(x), T(x2), 1, &err));
    pcmp(&y, "mse_bwd accumulate", TOL_EW);
    BOTH OK(nn_mean_bwd(b, T(y), 2.0f, 1, &err));
    pcmp(&y, "mean_bwd accumulate", TOL_EW);
    pair loss = pnew(1, 2);
    poison(&loss);
    BOTH
    {
        OK(nn_mse_fwd(b, (float *)P(loss), T(x), T(x2), &err));
        OK(nn_mean_fwd(b, (float *)P(loss) + 1, T(x), &err));
    }
    pcmp(&loss, "mse_fwd, mean_fwd", TOL_RED);
    /* bias gradient: column sums */
    pair db = pnew(1, cols);
    poison(&db);
    BOTH OK(nn_bias_grad(b, P(db), T(dy), 0, &err));
    pcmp(&db, "bias_grad", TOL_RED);
    BOTH OK(nn_bias_grad(b, P(db), T(dy), 1, &err));
    pcmp(&db, "bias_grad accumulate", TOL_RED);
    PFREE(&db, &loss, &x, &dy, &y, &x2);
}

/* axpby_rows, y[i,:] = alpha[i] x[i,:] + beta[i] z[i,:] (every sampler
 * step): into a separate y, then in place with y aliasing x, z and both.
 * Views of `cols` columns: y and x with row pitch cols + pad, z dense, so
 * the 16-byte path (cols and pitches multiples of 4) and the scalar one
 * both run, with mixed pitches; the columns past a view must stay
 * untouched.  Each case starts from the same uploaded values. */
static void test_axpby_rows(int rows, int cols, int pad)
{
    printf("axpby_rows %dx%d, row pitch %d\n", rows, cols, cols + pad);
    pair y = pnew(rows, cols + pad), x = pnew(rows, cols + pad), z = pnew(rows, cols),
         al = pnew(1, rows), be = pnew(1, rows);
    prand(&x, -4, 4);
    prand(&z, -4, 4);
    prand(&al, -2, 2);
    prand(&be, -2, 2);
    poison_view(&y, cols);
#define AXPBY(Y, X, Z) OK(nn_axpby_rows(b, Y, P(al), X, P(be), Z, &err))
    BOTH AXPBY(pview(&y, side, cols), pview(&x, side, cols), T(z));
    pcmp(&y, "axpby_rows", TOL_EW);
    BOTH AXPBY(pview(&x, side, cols), pview(&x, side, cols), T(z));
    pcmp(&x, "axpby_rows y = x", TOL_EW);
    pput(&x);
    BOTH AXPBY(T(z), pview(&x, side, cols), T(z));
    pcmp(&z, "axpby_rows y = z", TOL_EW);
    BOTH AXPBY(pview(&x, side, cols), pview(&x, side, cols), pview(&x, side, cols));
    pcmp(&x, "axpby_rows y = x = z", TOL_EW);
#undef AXPBY
    PFREE(&y, &x, &z, &al, &be);
}

static void test_layernorm(int rows, int cols)
{
    printf("layernorm %dx%d\n", rows, cols);
    pair x = pnew(rows, cols), y = pnew(rows, cols), dy = pnew(rows, cols), dx = pnew(rows, cols);
    pair mean = pnew(1, rows), rstd = pnew(1, rows), g = pnew(1, cols), be = pnew(1, cols);
    pair dg = pnew(1, cols), dbe = pnew(1, cols);
    prand(&x, 2, 6);   /* a large mean: the two-pass statistics matter */
    prand(&dy, -1, 1);
    prand(&g, 0.5f, 1.5f);
    prand(&be, -1, 1);
    prand(&dg, -1, 1);
    prand(&dbe, -1, 1);
    poison(&y);
    poison(&mean);
    poison(&rstd);
    poison(&dx);
    BOTH OK(nn_ln_fwd(b, T(y), P(mean), P(rstd), T(x), P(g), P(be), 1e-5f, &err));
    pcmp(&y, "ln_fwd y", TOL_RED);
    pcmp(&mean, "ln_fwd mean", TOL_RED);
    pcmp(&rstd, "ln_fwd rstd", TOL_RED);
    /* into bf16 (the trunk's bf16 path): that side's fp32 output, cast */
    pair yb = pnew_t(rows, cols, NN_BF16), yc = pnew_t(rows, cols, NN_BF16);
    poison(&yb);
    BOTH OK(nn_cast_bf16(b, T(yc), T(y), &err));
    BOTH OK(nn_ln_fwd(b, T(yb), P(mean), P(rstd), T(x), P(g), P(be), 1e-5f, &err));
    pcmp(&yb, "ln_fwd to bf16", TOL_BF16);
    psame_sides(&yb, &yc, "ln_fwd to bf16");
    PFREE(&yb, &yc);
    BOTH OK(nn_ln_bwd(b, T(dx), P(dg), P(dbe), T(dy), T(x), P(mean), P(rstd), P(g), 0, &err));
    pcmp(&dx, "ln_bwd dx", TOL_RED);
    pcmp(&dg, "ln_bwd dgamma (accumulated)", TOL_RED);
    pcmp(&dbe, "ln_bwd dbeta (accumulated)", TOL_RED);
    BOTH OK(nn_ln_bwd(b, T(dx), P(dg), P(dbe), T(dy), T(x), P(mean), P(rstd), P(g), 1, &err));
    pcmp(&dx, "ln_bwd dx accumulate", TOL_RED);
    PFREE(&x, &y, &dy, &dx, &mean, &rstd, &g, &be, &dg, &dbe);
}

static void test_blocks_embed(void)
{
    printf("concat / split / embed\n");
    const int R = 37;
    pair p0 = pnew(R, 5), p1 = pnew(R, 12), p2 = pnew(R, 64), y = pnew(R, 81);
    prand(&p0, -1, 1);
    prand(&p1, -1, 1);
    prand(&p2, -1, 1);
    poison(&y);
    BOTH
    {
        nn_tensor parts[3] = {T(p0), T(p1), T(p2)};
        OK(nn_concat(b, T(y), parts, 3, &err));
    }
    pcmp(&y, "concat", 0.0);
    poison(&p0);
    poison(&p2);
    BOTH
    {
        nn_tensor parts[3] = {T(p0), T(p1), T(p2)};
        parts[1].data = NULL;            /* skipped block */
        OK(nn_split(b, parts, 3, T(y), 0, &err));
    }
    pcmp(&p0, "split", 0.0);
    pcmp(&p2, "split (after a skipped block)", 0.0);
    BOTH
    {
        nn_tensor parts[3] = {T(p0), T(p1), T(p2)};
        OK(nn_split(b, parts, 3, T(y), 1, &err));
    }
    pcmp(&p1, "split accumulate", 0.0);
    pair cond = pnew(R, 2), emb = pnew(R, 32), demb = pnew(R, 32), dcond = pnew(R, 2);
    prand(&cond, 0, 1);
    prand(&demb, -1, 1);
    poison(&emb);
    poison(&dcond);
    /* Phases reach scale * cond; the frequencies come from expf/logf, which
     * may differ by an ulp or two between the device and libm, so the phase
     * error grows with the phase: a moderate scale keeps it inside TOL_RED. */
    BOTH OK(nn_embed_fwd(b, T(emb), T(cond), 16, 100.0f, 1e4f, &err));
    pcmp(&emb, "embed_fwd", TOL_RED);
    BOTH OK(nn_embed_bwd(b, T(dcond), T(demb), T(cond), 16, 100.0f, 1e4f, 0, &err));
    pcmp(&dcond, "embed_bwd", TOL_RED);
    PFREE(&p0, &p1, &p2, &y, &cond, &emb, &demb, &dcond);
}

static void test_softmax_route(int E)
{
    printf("softmax / routing, %d experts\n", E);
    const int R = 300, K = 2, C = 130;
    pair lg = pnew(R, E), pr = pnew(R, E), dp = pnew(R, E), dl = pnew(R, E);
    prand(&lg, -3, 3);
    prand(&dp, -1, 1);
    poison(&pr);
    poison(&dl);
    BOTH OK(nn_softmax_fwd(b, T(pr), T(lg), &err));
    pcmp(&pr, "softmax_fwd", TOL_EW);
    BOTH OK(nn_softmax_bwd(b, T(dl), T(dp), T(pr), &err));
    pcmp(&dl, "softmax_bwd", TOL_EW);
    if (E > 64) {
        PFREE(&lg, &pr, &dp, &dl);
        return;
    }
    /* top-k on the CPU's probabilities (uploaded to both, so the selection
     * is compared on identical inputs) */
    float *hp = malloc(sizeof(float) * R * E);
    OK(nn_copy_d2h(CPU, hp, pr.c, sizeof(float) * R * E, &err));
    memcpy(pr.h, hp, sizeof(float) * R * E);
    pput(&pr);
    free(hp);
    pair idx = pnew(R, K), w = pnew(R, K), dw = pnew(R, K);
    idx.dt = NN_F32;   /* 4-byte elements; compared bytewise */
    prand(&dw, -1, 1);
    poison(&idx);
    poison(&w);
    BOTH OK(nn_topk_fwd(b, (int32_t *)P(idx), P(w), T(pr), K, &err));
    pcmp_exact(&idx, "topk_fwd indices");
    pcmp(&w, "topk_fwd weights", TOL_EW);
    /* upload the CPU's indices to both for the backward */
    int32_t *hi = malloc(sizeof(int32_t) * R * K);
    OK(nn_copy_d2h(CPU, hi, idx.c, sizeof(int32_t) * R * K, &err));
    OK(nn_copy_h2d(GPU, idx.g, hi, sizeof(int32_t) * R * K, &err));
    BOTH OK(nn_topk_bwd(b, T(dl), P(dw), (int32_t *)P(idx), P(w), T(pr), K, 0, &err));
    pcmp(&dl, "topk_bwd", TOL_EW);
    BOTH OK(nn_topk_bwd(b, T(dl), P(dw), (int32_t *)P(idx), P(w), T(pr), K, 1, &err));
    pcmp(&dl, "topk_bwd accumulate", TOL_EW);
    free(hi);

    /* gather / scatter over a permutation of 40 of 60 rows */
    pair x = pnew(60, C), y = pnew(40, C), ri = pnew(1, 40), sc = pnew(1, 40), dot = pnew(1, 40);
    int32_t perm[60];
    for (int i = 0; i < 60; i++)
        perm[i] = i;
    for (int i = 59; i > 0; i--) {
        int j = (int)frand(0, (float)i + 0.999f);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    OK(nn_copy_h2d(CPU, ri.c, perm, sizeof(int32_t) * 40, &err));
    OK(nn_copy_h2d(GPU, ri.g, perm, sizeof(int32_t) * 40, &err));
    prand(&x, -1, 1);
    prand(&sc, 0, 1);
    poison(&y);
    BOTH OK(nn_gather_rows(b, T(y), T(x), (int32_t *)P(ri), P(sc), &err));
    pcmp(&y, "gather_rows (scaled)", 0.0);
    BOTH OK(nn_gather_rows(b, T(y), T(x), (int32_t *)P(ri), NULL, &err));
    pcmp(&y, "gather_rows", 0.0);
    BOTH OK(nn_scatter_add_rows(b, T(x), T(y), (int32_t *)P(ri), P(sc), &err));
    pcmp(&x, "scatter_add_rows", TOL_EW);
    poison(&dot);
    BOTH OK(nn_gather_dot(b, P(dot), T(x), (int32_t *)P(ri), T(y), &err));
    pcmp(&dot, "gather_dot", TOL_RED);
    /* the critic's penalty: each row's squared norm over a column view of
     * a wider matrix, the view dotted with itself through the identity */
    pair iota = pnew(1, 40);
    int32_t ident[40];
    for (int i = 0; i < 40; i++)
        ident[i] = i;
    OK(nn_copy_h2d(CPU, iota.c, ident, sizeof ident, &err));
    OK(nn_copy_h2d(GPU, iota.g, ident, sizeof ident, &err));
    poison(&dot);
    BOTH OK(nn_gather_dot(b, P(dot), pview(&y, side, C - 3), (int32_t *)P(iota),
                          pview(&y, side, C - 3), &err));
    pcmp(&dot, "gather_dot (strided, self)", TOL_RED);
    PFREE(&iota);

    /* router losses */
    pair frac = pnew(1, E), loss = pnew(1, 2);
    prand(&frac, 0, 1);
    poison(&loss);
    BOTH
    {
        OK(nn_balance_fwd(b, P(loss), T(pr), P(frac), &err));
        OK(nn_entropy_fwd(b, (float *)P(loss) + 1, T(pr), &err));
    }
    pcmp(&loss, "balance_fwd, entropy_fwd", TOL_RED);
    BOTH
    {
        OK(nn_balance_bwd(b, T(dl), 0.01f, P(frac), &err));
        OK(nn_entropy_bwd(b, T(dl), 0.1f, T(pr), &err));
    }
    pcmp(&dl, "balance_bwd + entropy_bwd", TOL_EW);
    PFREE(&lg, &pr, &dp, &dl, &idx, &w, &dw, &x, &y, &ri, &sc, &dot, &frac, &loss);
}

/* L layers: 45 (datasets 2 and 3), and others that change the GPU's
 * launch shape (threads per block shrink as the per-thread scratch grows,
 * down to 16 at L = 512, the cap). */
static void test_stick(int L)
{
    printf("stick-breaking (%d layers)\n", L);
    const int R = 300;
    pair z = pnew(R, L - 1), f = pnew(R, L), df = pnew(R, L), dz = pnew(R, L - 1),
         zi = pnew(R, L - 1);
    prand(&z, -3, 3);
    prand(&df, -1, 1);
    poison(&f);
    poison(&dz);
    poison(&zi);
    /* products of L sigmoids: device expf may differ by an ulp per layer */
    BOTH OK(nn_sb_fwd(b, T(f), T(z), &err));
    pcmp(&f, "sb_fwd", TOL_RED);
    BOTH OK(nn_sb_bwd(b, T(dz), T(df), T(z), 0, &err));
    pcmp(&dz, "sb_bwd", TOL_RED);
    BOTH OK(nn_sb_bwd(b, T(dz), T(df), T(z), 1, &err));
    pcmp(&dz, "sb_bwd accumulate", TOL_RED);
    /* the inverse on the CPU's fractions */
    OK(nn_copy_d2h(CPU, f.h, f.c, f.n * sizeof(float), &err));
    pput(&f);
    BOTH OK(nn_sb_inv(b, T(zi), T(f), 1e-6f, &err));
    pcmp(&zi, "sb_inv", TOL_RED);
    /* the per-column affine map the generator head wraps around them, with
     * and without a shift, and in place (inputs: each side's own f) */
    pair sc = pnew(1, L), sh = pnew(1, L), g = pnew(R, L);
    prand(&sc, -2, 2);
    prand(&sh, -1, 1);
    poison(&g);
    BOTH OK(nn_affine_cols(b, T(g), T(f), P(sc), P(sh), &err));
    pcmp(&g, "affine_cols", TOL_RED);
    BOTH OK(nn_affine_cols(b, T(g), T(g), P(sc), NULL, &err));
    pcmp(&g, "affine_cols in place, no shift", TOL_RED);
    PFREE(&z, &f, &df, &dz, &zi, &sc, &sh, &g);
}

static void test_optim_rng(void)
{
    printf("sumsq / adamw / rand_fill\n");
    const int n = 100003;   /* not a multiple of 4: the scalar tail */
    pair x = pnew(1, n), out = pnew(1, 2);
    prand(&x, -1, 1);
    poison(&out);
    BOTH
    {
        OK(nn_sumsq(b, P(out), P(x), (size_t)n, &err));
        OK(nn_sumsq(b, (float *)P(out) + 1, (float *)P(x) + 1, (size_t)n - 1, &err)); /* unaligned */
    }
    pcmp(&out, "sumsq", TOL_RED);

    pair p = pnew(1, n), g = pnew(1, n), m = pnew(1, n), v = pnew(1, n);
    pair pb = pnew_t(1, n, NN_BF16);
    prand(&p, -1, 1);
    prand(&g, -1, 1);
    prand(&m, -0.1f, 0.1f);
    prand(&v, 0, 0.01f);
    poison(&pb);
    /* the hyper-parameters live in backend memory (read when the update
     * runs, so a graph replays the current step's) */
    nn_adamw_hp hp = nn_adamw_hp_make(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 3, 0.7f);
    pair hpp = pnew(1, (int)(sizeof hp / sizeof(float)));
    memcpy(hpp.h, &hp, sizeof hp);
    pput(&hpp);
    BOTH OK(nn_adamw(b, P(p), P(pb), P(g), P(m), P(v), (size_t)n, P(hpp), NULL, &err));
    pcmp(&p, "adamw param", TOL_EW);
    pcmp(&m, "adamw m", TOL_EW);
    pcmp(&v, "adamw v", TOL_EW);
    pcmp(&pb, "adamw bf16 copy", TOL_BF16);
    /* clipped on the device from each side's own sum of squares (0.7 |g|
     * down to 0.2 |g|), then a non-finite sum that must change nothing */
    pair ss = pnew(1, 1);
    BOTH OK(nn_sumsq(b, P(ss), P(g), (size_t)n, &err));
    double gss = 0.0;
    for (int i = 0; i < n; i++)
        gss += (double)g.h[i] * g.h[i];
    hp = nn_adamw_hp_make(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 4, 0.7f);
    hp.clip_norm = (float)(0.2 * sqrt(gss));
    memcpy(hpp.h, &hp, sizeof hp);
    pput(&hpp);
    BOTH OK(nn_adamw(b, P(p), P(pb), P(g), P(m), P(v), (size_t)n, P(hpp), P(ss), &err));
    pcmp(&p, "adamw clipped param", TOL_EW);
    pcmp(&m, "adamw clipped m", TOL_EW);
    pcmp(&v, "adamw clipped v", TOL_EW);
    {
        size_t bytes = sizeof(float) * n;
        float *c0 = malloc(bytes), *g0 = malloc(bytes), *c1 = malloc(bytes), *g1 = malloc(bytes);
        fetch(&p, c0, g0);
        ss.h[0] = INFINITY;
        pput(&ss);
        BOTH OK(nn_adamw(b, P(p), P(pb), P(g), P(m), P(v), (size_t)n, P(hpp), P(ss), &err));
        fetch(&p, c1, g1);
        CHECK_MSG(!memcmp(c0, c1, bytes) && !memcmp(g0, g1, bytes),
                  "adamw: weights updated on a non-finite norm");
        printf("  %-28s %s\n", "adamw non-finite norm",
               !memcmp(c0, c1, bytes) && !memcmp(g0, g1, bytes) ? "unchanged, both sides"
                                                                 : "CHANGED");
        free(c0);
        free(g0);
        free(c1);
        free(g1);
    }

    pair r = pnew(1, n);
    poison(&r);
    BOTH OK(nn_rand_fill(b, P(r), (size_t)n, NN_DIST_UNIFORM, 0.0f, 1.0f, 42, 3, 1000, &err));
    pcmp_exact(&r, "rand_fill uniform");
    poison(&r);
    BOTH OK(nn_rand_fill(b, (float *)P(r) + 1, (size_t)n - 1, NN_DIST_NORMAL, 0.5f, 2.0f, 42, 3,
                         7, &err));
    {
        float *hc = malloc(sizeof(float) * n), *hg = malloc(sizeof(float) * n);
        fetch(&r, hc, hg);
        cmp_f("rand_fill normal", hc + 1, hg + 1, (size_t)n - 1, TOL_EW);
        free(hc);
        free(hg);
    }
    PFREE(&x, &out, &p, &g, &m, &v, &pb, &r, &hpp, &ss);
}

/* rand_rows, a batch's noise in one call (the sampler's): row r of a view
 * of `cols` columns with row pitch cols + pad is the fill at offset
 * (row0 + r) * per_row.  Uniforms bit-identical, normals within TOL_EW, as
 * rand_fill; the columns past the view stay untouched.  On the GPU also
 * against its own rand_fill per row: the same kernel arithmetic, so the
 * same bytes. */
static void test_rand_rows(int rows, int cols, int pad, uint64_t row0, uint64_t extra)
{
    printf("rand_rows %dx%d, row pitch %d, row0 %llu\n", rows, cols, cols + pad,
           (unsigned long long)row0);
    pair r = pnew(rows, cols + pad);
    const uint64_t per_row = nn_rng_blocks((uint64_t)cols) + extra;
    for (int dist = 0; dist < 2; dist++) {
        float pa = dist == NN_DIST_NORMAL ? 0.5f : -1.0f, pb = 2.0f;
        poison_view(&r, cols);
        BOTH OK(nn_rand_rows(b, pview(&r, side, cols), (nn_dist)dist, pa, pb, 42, 9, row0,
                             per_row, &err));
        if (dist == NN_DIST_UNIFORM)
            pcmp_exact(&r, "rand_rows uniform");
        else
            pcmp(&r, "rand_rows normal", TOL_EW);
        /* the GPU's op against the GPU's own per-row fills */
        float *one = malloc(r.n * sizeof(float)), *per = malloc(r.n * sizeof(float));
        OK(nn_copy_d2h(GPU, one, r.g, r.n * sizeof(float), &err));
        for (int i = 0; i < rows; i++)
            OK(nn_rand_fill(GPU, (float *)r.g + (size_t)i * (cols + pad), (size_t)cols,
                            (nn_dist)dist, pa, pb, 42, 9, (row0 + (uint64_t)i) * per_row, &err));
        OK(nn_copy_d2h(GPU, per, r.g, r.n * sizeof(float), &err));
        CHECK_MSG(memcmp(one, per, r.n * sizeof(float)) == 0,
                  "rand_rows %s: not the bytes of one rand_fill per row",
                  dist ? "uniform" : "normal");
        free(one);
        free(per);
    }
    pfree(&r);
}

/* ------------------------------------------------------------------------ */
/* the fixed-order linear layer (the sampler's product)                     */
/* ------------------------------------------------------------------------ */

/* Packs w on b. */
static int fx_pack(nn_backend *b, nn_tensor w, nn_packed *out)
{
    return nn_pack_weight(b, w, out, &err);
}

static void fx_unpack(nn_backend *b, nn_packed *p)
{
    nn_packed_free(b, p);
}

/* Rows [r0, r0 + m) of a dense or strided view, sharing its storage. */
static nn_tensor fx_rows(nn_tensor t, int r0, int m)
{
    t.data = (char *)t.data + (size_t)r0 * t.ld * nn_dtype_size(t.dtype);
    t.rows = m;
    return t;
}

/* The operands of one comparison: x (M x K) and W (N x K) of dtype dt on
 * both sides, from fp32 values (bf16 through the bit-identical cast), and
 * W packed on both sides.  ld_x > K stores x with a wider row pitch. */
typedef struct fx_ops {
    nn_dtype dt;
    int ld_x;
    pair x, w, xb, wb;
    nn_packed pk[2];
    int ok;
} fx_ops;

static void fx_ops_make(fx_ops *o, int M, int N, int K, int ld_x, nn_dtype dt, float wscale)
{
    memset(o, 0, sizeof *o);
    o->dt = dt;
    o->ld_x = ld_x;
    o->x = pnew(M, ld_x);
    o->w = pnew(N, K);
    prand(&o->x, -1, 1);
    prand(&o->w, -wscale, wscale);
    if (dt == NN_BF16) {
        o->xb = pnew_t(M, ld_x, NN_BF16);
        o->wb = pnew_t(N, K, NN_BF16);
        poison(&o->xb);
    }
    o->ok = 1;
    BOTH
    {
        nn_tensor W = T(o->w);
        if (dt == NN_BF16) {
            nn_tensor X = T(o->x), XB = T(o->xb);
            X.cols = XB.cols = K;
            OK(nn_cast_bf16(b, XB, X, &err));
            OK(nn_cast_bf16(b, T(o->wb), W, &err));
            W = T(o->wb);
        }
        if (K == 0)
            W.ld = 1;   /* the wrappers want ld >= 1 */
        int rc = fx_pack(b, W, &o->pk[side]);
        CHECK_MSG(rc == GT_OK, "pack_weight %s on %s: %s", nn_dtype_name(dt), b->name,
                  err.message);
        if (rc)
            o->ok = 0;
    }
}

/* x as the op sees it on one side: M x K, row pitch ld_x */
static nn_tensor fx_x(fx_ops *o, int side, int K)
{
    pair *p = o->dt == NN_BF16 ? &o->xb : &o->x;
    nn_tensor t = side ? pg(p) : pc(p);
    t.cols = K;
    if (t.ld < 1)
        t.ld = 1;
    return t;
}

static void fx_ops_free(fx_ops *o)
{
    fx_unpack(CPU, &o->pk[0]);
    fx_unpack(GPU, &o->pk[1]);
    pfree(&o->x);
    pfree(&o->w);
    if (o->dt == NN_BF16) {
        pfree(&o->xb);
        pfree(&o->wb);
    }
}

/* linear_fixed on both backends against each other, every epilogue. */
static void test_linear_fixed(int M, int N, int K, nn_dtype dt)
{
    printf("linear_fixed %s m=%d n=%d k=%d\n", nn_dtype_name(dt), M, N, K);
#ifdef GIANT_TEST_WITH_CPU
    if (cpu_backend_fixed_kernel(CPU, dt))
        printf("  (cpu kernel: %s)\n", cpu_backend_fixed_kernel(CPU, dt));
#endif
    /* inputs are the same fp32 / bf16 values on both sides: only the
     * summation order differs (K == 0: the epilogue alone) */
    double tol = K == 0 ? TOL_EW : dt == NN_BF16 ? TOL_BF16 : TOL_RED;
    /* the reference in the GPU's place follows the CPU contract exactly */
    int exact = !cuda_backend_is(GPU);
    fx_ops o;
    fx_ops_make(&o, M, N, K, K, dt, 0.3f);
    pair y = pnew(M, N), y0 = pnew(M, N), bias = pnew(1, N);
    pair yb = pnew_t(M, N, NN_BF16), yc = pnew_t(M, N, NN_BF16);
    prand(&y0, -1, 1);
    prand(&bias, -1, 1);
    static const struct {
        const char *name;
        int bias, silu, acc;
    } modes[] = {
        {"plain", 0, 0, 0},           {"bias", 1, 0, 0}, {"bias+silu", 1, 1, 0},
        {"silu", 0, 1, 0},            {"bias+accumulate", 1, 0, 1},
        {"accumulate", 0, 0, 1},
    };
    for (size_t i = 0; o.ok && i < sizeof modes / sizeof modes[0]; i++) {
        if (modes[i].acc)
            BOTH OK(nn_copy_d2d(b, P(y), P(y0), y.n * sizeof(float), &err));
        else
            poison(&y);
        BOTH OK(nn_linear_fixed(b, T(y), fx_x(&o, side, K), &o.pk[side],
                                modes[i].bias ? (const float *)P(bias) : NULL,
                                modes[i].silu ? NN_ACT_SILU : NN_ACT_NONE, modes[i].acc, &err));
        char what[64];
        snprintf(what, sizeof what, "fixed %s %s", nn_dtype_name(dt), modes[i].name);
        pcmp(&y, what, tol);
        if (exact) {
            snprintf(what, sizeof what, "fixed %s %s = CPU", nn_dtype_name(dt), modes[i].name);
            pcmp_exact(&y, what);
        }
        if (modes[i].acc)
            continue;
        /* the bf16 output: on each side the bits of that side's fp32
         * result cast (the GPU's own epilogue, the CPU's fallback) */
        BOTH OK(nn_cast_bf16(b, T(yc), T(y), &err));
        poison(&yb);
        poison(&y);   /* its scratch */
        BOTH OK(nn_linear_fixed_bf16(b, T(yb), T(y), fx_x(&o, side, K), &o.pk[side],
                                     modes[i].bias ? (const float *)P(bias) : NULL,
                                     modes[i].silu ? NN_ACT_SILU : NN_ACT_NONE, &err));
        snprintf(what, sizeof what, "fixed %s %s to bf16", nn_dtype_name(dt), modes[i].name);
        psame_sides(&yb, &yc, what);
    }
    /* refused: a y_bf that is not bf16, or not y's shape */
    if (o.ok) BOTH
    {
        gt_error e2;
        CHECK_EQ_INT(nn_linear_fixed_bf16(b, T(y0), T(y), fx_x(&o, side, K), &o.pk[side], NULL,
                                          NN_ACT_NONE, &e2),
                     GT_EINVAL);
        nn_tensor half = nn_tensor_make(P(yb), NN_BF16, M, N > 1 ? N - 1 : N + 1);
        CHECK_EQ_INT(nn_linear_fixed_bf16(b, half, T(y), fx_x(&o, side, K), &o.pk[side], NULL,
                                          NN_ACT_NONE, &e2),
                     GT_EINVAL);
    }
    PFREE(&y, &y0, &bias, &yb, &yc);
    fx_ops_free(&o);
}

/* One backend's rows [r0, r0+m) of x computed alone against the same rows
 * of one big call, byte for byte.  Returns the sub-batches that differ. */
static int fx_rows_check(nn_backend *b, const float *hall, nn_tensor X, const nn_packed *pk,
                         pair *ysub, pair *yold, int side, const float *bias, nn_act act,
                         int acc, int m, int r0, int y_at_r0, const char *what)
{
    int N = ysub->cols;
    size_t n = (size_t)m * N;
    float *ys = (float *)P(*ysub) + (y_at_r0 ? (size_t)r0 * N : 0);
    nn_tensor Y = nn_f32(ys, m, N);
    if (acc)
        OK(nn_copy_d2d(b, ys, (float *)P(*yold) + (size_t)r0 * N, n * sizeof(float), &err));
    else
        OK(nn_memset(b, ys, 0xFF, n * sizeof(float), &err));
    int rc = nn_linear_fixed(b, Y, fx_rows(X, r0, m), pk, bias, act, acc, &err);
    CHECK_MSG(rc == GT_OK, "%s on %s, m=%d r0=%d: %s", what, b->name, m, r0, err.message);
    if (rc)
        return 1;
    float *h = malloc(n * sizeof(float));
    OK(nn_copy_d2h(b, h, ys, n * sizeof(float), &err));
    int bad = memcmp(h, hall + (size_t)r0 * N, n * sizeof(float)) != 0;
    if (bad) {
        size_t at = 0;
        while (at < n && !memcmp(&h[at], &hall[(size_t)r0 * N + at], sizeof(float)))
            at++;
        CHECK_MSG(0, "%s on %s: rows [%d, %d) alone differ from the big call at row %d col %d "
                  "(%.9g vs %.9g)",
                  what, b->name, r0, r0 + m, r0 + (int)(at / N), (int)(at % N), h[at],
                  hall[(size_t)r0 * N + at]);
    }
    free(h);
    return bad;
}

/* Row invariance: a row's bytes do not depend on m, on its position or on
 * the rows computed with it, on either backend.  On the GPU also: no plan
 * after the first call, a captured call replays the eager bytes, a row
 * count not run before capture is refused inside it, and a weaker row
 * pitch gives the same bytes or GT_EUNSUPPORTED (never another algorithm). */
static void test_linear_fixed_rows(nn_dtype dt)
{
    printf("linear_fixed row invariance %s\n", nn_dtype_name(dt));
    const int MT = 1300, N = 72, K = 136;
    int ms[27], nm = 0;
    for (int m = 1; m <= 24; m++)
        ms[nm++] = m;
    ms[nm++] = 64;
    ms[nm++] = 256;
    ms[nm++] = 1000;
    fx_ops o, ow;
    fx_ops_make(&o, MT, N, K, K, dt, 0.2f);
    /* the first 64 rows again with a row pitch of K + 1 elements */
    fx_ops_make(&ow, 64, N, K, K + 1, dt, 0.2f);
    for (int i = 0; i < 64; i++)
        memcpy(ow.x.h + (size_t)i * (K + 1), o.x.h + (size_t)i * K, K * sizeof(float));
    pput(&ow.x);
    BOTH if (dt == NN_BF16)
    {
        nn_tensor X = T(ow.x), XB = T(ow.xb);
        X.cols = XB.cols = K;
        OK(nn_cast_bf16(b, XB, X, &err));
    }
    pair bias = pnew(1, N), yold = pnew(MT, N), yall = pnew(MT, N), ysub = pnew(MT, N);
    prand(&bias, -1, 1);
    prand(&yold, -1, 1);
    for (int mode = 0; o.ok && ow.ok && mode < 2; mode++) {
        nn_act act = mode == 0 ? NN_ACT_SILU : NN_ACT_NONE;
        int acc = mode == 1;
        char what[64];
        snprintf(what, sizeof what, "rows %s %s", nn_dtype_name(dt),
                 mode == 0 ? "bias+silu" : "bias+accumulate");
        BOTH
        {
            const float *bs = (const float *)P(bias);
            nn_tensor X = fx_x(&o, side, K);
            size_t nall = (size_t)MT * N;
            if (acc)
                OK(nn_copy_d2d(b, P(yall), P(yold), nall * sizeof(float), &err));
            else
                OK(nn_memset(b, P(yall), 0xFF, nall * sizeof(float), &err));
            int rc = nn_linear_fixed(b, T(yall), X, &o.pk[side], bs, act, acc, &err);
            CHECK_MSG(rc == GT_OK, "%s on %s, m=%d: %s", what, b->name, MT, err.message);
            if (rc)
                continue;
            float *hall = malloc(nall * sizeof(float));
            OK(nn_copy_d2h(b, hall, P(yall), nall * sizeof(float), &err));
            size_t plans = b->plan_count;
            int calls = 0, bad = 0;
            for (int i = 0; i < nm; i++) {
                int m = ms[i];
                const int offs[4] = {0, 1, 5, MT - m};
                for (int j = 0; j < 4; j++, calls++)
                    bad += fx_rows_check(b, hall, X, &o.pk[side], &ysub, &yold, side, bs, act,
                                         acc, m, offs[j], j & 1, what);
            }
            /* x with a wider, less aligned row pitch: the first 64 rows */
            nn_tensor XW = fx_x(&ow, side, K);
            rc = GT_OK;
            if (acc)
                OK(nn_copy_d2d(b, P(ysub), P(yold), (size_t)64 * N * sizeof(float), &err));
            rc = nn_linear_fixed(b, nn_f32((float *)P(ysub), 64, N), XW, &o.pk[side], bs, act,
                                 acc, &err);
            if (rc == GT_EUNSUPPORTED && cuda_backend_is(b)) {
                CHECK_MSG(strstr(err.message, "m=64") && strstr(err.message, "k="),
                          "the refusal names m, n, k: %s", err.message);
                printf("  %-28s refused (%s)\n", "row pitch k+1", err.message);
            } else {
                CHECK_MSG(rc == GT_OK, "%s, row pitch %d on %s: %s", what, K + 1, b->name,
                          err.message);
                if (rc == GT_OK) {
                    size_t n64 = (size_t)64 * N;
                    float *h = malloc(n64 * sizeof(float));
                    OK(nn_copy_d2h(b, h, P(ysub), n64 * sizeof(float), &err));
                    int same = !memcmp(h, hall, n64 * sizeof(float));
                    CHECK_MSG(same, "%s on %s: row pitch %d changes the bytes", what, b->name,
                              K + 1);
                    bad += !same;
                    calls++;
                    free(h);
                }
            }
            if (cuda_backend_is(b)) {
                CHECK_EQ_INT(b->plan_count, plans);
                if (!acc) {
                    /* captured: m = 24 from row 1 replays the eager bytes;
                     * m = 25 was never run, so capture refuses it */
                    cuda_graph *g = NULL;
                    gt_error e2;
                    nn_tensor Y = nn_f32((float *)P(ysub), 24, N);
                    OK(cuda_graph_begin(b, &err));
                    int rc1 = nn_linear_fixed(b, Y, fx_rows(X, 1, 24), &o.pk[side], bs, act, 0,
                                              &err);
                    CHECK_MSG(rc1 == GT_OK, "captured linear_fixed: %s", err.message);
                    int rc2 = nn_linear_fixed(b, nn_f32((float *)P(ysub), 25, N),
                                              fx_rows(X, 1, 25), &o.pk[side], bs, act, 0, &e2);
                    CHECK_MSG(rc2 == GT_EINVAL, "an unseen m inside capture gave %d: %s", rc2,
                              rc2 ? e2.message : "ok");
                    rc = cuda_graph_end(b, &g, &e2);
                    CHECK_MSG(rc == GT_OK, "cuda_graph_end: %s", e2.message);
                    if (g) {
                        OK(nn_memset(b, P(ysub), 0xFF, (size_t)24 * N * sizeof(float), &err));
                        OK(cuda_graph_launch(b, g, &err));
                        OK(nn_sync(b, &err));
                        float *h = malloc((size_t)24 * N * sizeof(float));
                        OK(nn_copy_d2h(b, h, P(ysub), (size_t)24 * N * sizeof(float), &err));
                        CHECK_MSG(!memcmp(h, hall + N, (size_t)24 * N * sizeof(float)),
                                  "%s: the replayed call differs from the eager one", what);
                        free(h);
                    }
                    cuda_graph_destroy(g);
                    CHECK_EQ_INT(b->plan_count, plans);
                }
            }
            printf("  %-28s %s: %d of %d sub-batches differ\n", what, b->name, bad, calls);
            free(hall);
        }
    }
    PFREE(&bias, &yold, &yall, &ysub);
    fx_ops_free(&o);
    fx_ops_free(&ow);
}

/* ------------------------------------------------------------------------ */
/* whole steps                                                              */
/* ------------------------------------------------------------------------ */

/* The small trunk both step tests run: dim wide in and out. */
static void trunk_config(nn_trunk_config *cfg, nn_trunk_kind kind, int dim, nn_dtype prec)
{
    nn_trunk_config_default(cfg);
    cfg->kind = kind;
    cfg->in_dim = dim;
    cfg->out_dim = dim;
    cfg->emb_dim = 8;
    cfg->hidden = 64;
    cfg->blocks = 2;
    cfg->precision = prec;
}

/* A trunk per side, initialised (seed, scale) and planned for `rows` rows,
 * each with its AdamW optimizer; input_check 0 turns the finiteness
 * read-back off.  0 (reported) when either trunk cannot be made. */
static int trunk_setup_both(const nn_trunk_config *cfg, int rows, uint64_t seed, float scale,
                            int input_check, nn_trunk *t[2], nn_adamw_opt opt[2])
{
    int ok = 1;
    BOTH
    {
        int rc = nn_trunk_create(b, cfg, &t[side], &err);
        CHECK_MSG(rc == GT_OK, "trunk create: %s", err.message);
        if (rc) {
            ok = 0;
            continue;
        }
        if (!input_check)
            nn_trunk_set_input_check(t[side], 0);
        OK(nn_trunk_init(t[side], seed, scale, &err));
        OK(nn_trunk_plan(t[side], rows, &err));
        nn_adamw_config ac;
        nn_adamw_config_default(&ac);
        ac.lr = 1e-4f;   /* a gradient near 0 of other sign moves a weight by 2 lr */
        OK(nn_adamw_create(&opt[side], nn_trunk_params(t[side]), &ac, &err));
    }
    return ok;
}

/* Packs both sides' trunks for the fixed-order forward; 1 when both did. */
static int trunk_pack_both(nn_trunk *t[2])
{
    int packed = 1;
    BOTH
    {
        int rc = nn_trunk_pack(t[side], &err);
        CHECK_MSG(rc == GT_OK, "trunk pack on %s: %s", b->name, err.message);
        packed &= rc == GT_OK;
    }
    return packed;
}

static float *dl_copy(nn_backend *b, const float *d, size_t n)
{
    float *h = malloc(n * sizeof(float));
    OK(nn_copy_d2h(b, h, d, n * sizeof(float), &err));
    return h;
}

/* The CPU's and the GPU's n floats at c and g, compared as cmp_f does. */
static void cmp_dev(const char *what, const float *c, const float *g, size_t n, double tol)
{
    float *hc = dl_copy(CPU, c, n), *hg = dl_copy(GPU, g, n);
    cmp_f(what, hc, hg, n, tol);
    free(hc);
    free(hg);
}

static void trunk_free_both(nn_trunk *t[2], nn_adamw_opt opt[2])
{
    for (int s = 0; s < 2; s++) {
        if (t[s]) {
            nn_adamw_destroy(&opt[s]);
            nn_trunk_destroy(t[s]);
        }
    }
}

/* engine/nn's trunk: one forward, backward and AdamW update per backend. */
static void test_trunk(nn_trunk_kind kind, nn_dtype prec)
{
    printf("nn_trunk %s %s step\n", kind == NN_TRUNK_EXPERT ? "expert" : "routed",
           nn_dtype_name(prec));
    const int B = 96;
    nn_trunk_config cfg;
    trunk_config(&cfg, kind, 40, prec);
    double tol = prec == NN_BF16 ? TOL_BF16 : TOL_STEP;
    nn_trunk *t[2] = {NULL, NULL};
    nn_adamw_opt opt[2];
    memset(opt, 0, sizeof opt);
    pair x = pnew(B, 40), cond = pnew(B, 2), tgt = pnew(B, 40), out = pnew(B, 40),
         dout = pnew(B, 40), loss = pnew(1, 1);
    prand(&x, -1, 1);
    prand(&cond, 0, 1);
    prand(&tgt, -1, 1);
    poison(&out);
    if (!trunk_setup_both(&cfg, B, 11, 0.1f, 1, t, opt))
        goto out;
    BOTH
    {
        OK(nn_trunk_forward(t[side], T(x), T(cond), T(out), 1, &err));
        OK(nn_mse_fwd(b, P(loss), T(out), T(tgt), &err));
        OK(nn_mse_bwd(b, T(dout), 1.0f, T(out), T(tgt), 0, &err));
        OK(nn_params_zero_grad(nn_trunk_params(t[side]), &err));
        OK(nn_trunk_backward(t[side], T(dout), nn_f32(NULL, B, 40), &err));
    }
    pcmp(&out, "trunk out", tol);
    pcmp(&loss, "trunk loss", tol);
    nn_params *pc_ = nn_trunk_params(t[0]), *pg_ = nn_trunk_params(t[1]);
    CHECK_EQ_INT(pc_->count, pg_->count);
    size_t n = pc_->count;
    cmp_dev("trunk gradients", pc_->grad, pg_->grad, n, tol);
    float norm[2];
    OK(nn_adamw_step(&opt[0], &norm[0], &err));
    OK(nn_adamw_step(&opt[1], &norm[1], &err));
    CHECK_CLOSE(norm[1], norm[0], 0.0, tol);
    cmp_dev("trunk params after AdamW", pc_->value, pg_->value, n, tol);
    /* the sampler's forward: packed weights, the fixed-order layer;
     * rows [5, 12) alone must be the bytes of the same rows of the
     * whole batch on each backend */
    if (!trunk_pack_both(t))
        goto out;
    poison(&out);
    BOTH OK(nn_trunk_forward(t[side], T(x), T(cond), T(out), 0, &err));
    pcmp(&out, "packed trunk forward", tol);
    const int r0 = 5, m = 7;
    BOTH
    {
        size_t nall = (size_t)B * 40, nsub = (size_t)m * 40;
        float *hall = malloc(nall * sizeof(float)), *hs = malloc(nsub * sizeof(float));
        OK(nn_copy_d2h(b, hall, P(out), nall * sizeof(float), &err));
        OK(nn_memset(b, P(out), 0xFF, nall * sizeof(float), &err));
        OK(nn_trunk_forward(t[side], nn_f32((float *)P(x) + r0 * 40, m, 40),
                            nn_f32((float *)P(cond) + r0 * 2, m, 2),
                            nn_f32((float *)P(out), m, 40), 0, &err));
        OK(nn_copy_d2h(b, hs, P(out), nsub * sizeof(float), &err));
        int same = !memcmp(hs, hall + (size_t)r0 * 40, nsub * sizeof(float));
        CHECK_MSG(same, "packed trunk on %s: rows [%d, %d) alone differ from the batch",
                  b->name, r0, r0 + m);
        printf("  %-28s %s: %s\n", "packed rows alone", b->name,
               same ? "bit-identical" : "DIFFER");
        free(hall);
        free(hs);
    }
out:
    trunk_free_both(t, opt);
    PFREE(&x, &cond, &tgt, &out, &dout, &loss);
}

/* The steps a graph may hold: the gradient part of a training step (zero
 * grads, forward, mse, backward; AdamW reads the gradient norm back to the
 * host, so it runs outside) and an Euler sampler of the packed trunk. */
static int grad_step(nn_trunk *t, nn_backend *b, nn_tensor x, nn_tensor c, nn_tensor tgt,
                     nn_tensor out, nn_tensor dout, float *loss)
{
    int rc;
    if ((rc = nn_params_zero_grad(nn_trunk_params(t), &err)) ||
        (rc = nn_trunk_forward(t, x, c, out, 1, &err)) ||
        (rc = nn_mse_fwd(b, loss, out, tgt, &err)) ||
        (rc = nn_mse_bwd(b, dout, 1.0f, out, tgt, 0, &err)))
        return rc;
    return nn_trunk_backward(t, dout, nn_f32(NULL, x.rows, x.cols), &err);
}

/* Puts an optimizer's parameters back to saved host copies of weights and
 * moments (and its step count), the bf16 working copy rewritten from them
 * as AdamW writes it. */
static void opt_restore(nn_backend *b, nn_adamw_opt *o, const float *w, const float *m,
                        const float *v, long long step)
{
    nn_params *p = o->p;
    size_t bytes = p->count * sizeof(float);
    OK(nn_copy_h2d(b, p->value, w, bytes, &err));
    OK(nn_copy_h2d(b, o->m, m, bytes, &err));
    OK(nn_copy_h2d(b, o->v, v, bytes, &err));
    if (p->value_bf16)
        OK(nn_cast_bf16(b, nn_tensor_make(p->value_bf16, NN_BF16, 1, (int)p->count),
                        nn_f32(p->value, 1, (int)p->count), &err));
    o->step = step;
}

/* x += dt v(x, [t, E]) for `steps` steps: cond holds one [B, 2] block per
 * step, ones / dts one entry per row. */
static int euler(nn_trunk *t, nn_backend *b, float *x, const float *cond, float *v,
                 const float *ones, const float *dts, int rows, int dim, int steps)
{
    for (int k = 0; k < steps; k++) {
        int rc;
        nn_tensor X = nn_f32(x, rows, dim), V = nn_f32(v, rows, dim);
        if ((rc = nn_trunk_forward(t, X, nn_f32((float *)cond + (size_t)k * rows * 2, rows, 2),
                                   V, 0, &err)) ||
            (rc = nn_axpby_rows(b, X, ones, X, dts, V, &err)))
            return rc;
    }
    return GT_OK;
}

/* engine/nn's expert trunk: two full training steps on both backends, then
 * on the GPU the gradient part captured as a graph, the whole step (AdamW
 * included) captured as a graph, and an Euler sampler
 * captured as a graph, each replayed against its uncaptured run
 * (bit-identical: the same kernels, the same pinned algorithms); no
 * allocation and no new plan inside. */
static void test_trunk_graph(nn_dtype prec)
{
    printf("nn_trunk %s: CPU vs GPU, graph vs no graph\n", nn_dtype_name(prec));
    const int B = 96, D = 40, STEPS = 4;
    nn_trunk_config cfg;
    trunk_config(&cfg, NN_TRUNK_EXPERT, D, prec);
    double tol = prec == NN_BF16 ? TOL_BF16 : TOL_STEP;
    nn_trunk *t[2] = {NULL, NULL};
    nn_adamw_opt opt[2];
    memset(opt, 0, sizeof opt);
    pair x = pnew(B, D), c = pnew(B, 2), tgt = pnew(B, D), out = pnew(B, D), dout = pnew(B, D),
         loss = pnew(1, 1), sx = pnew(B, D), sv = pnew(B, D), sc = pnew(STEPS * B, 2),
         ones = pnew(B, 1), dts = pnew(B, 1);
    prand(&x, -1, 1);
    prand(&c, 0, 1);
    prand(&tgt, -1, 1);
    for (int k = 0; k < STEPS; k++)
        for (int i = 0; i < B; i++) {
            sc.h[((size_t)k * B + i) * 2] = (float)k / STEPS;          /* time */
            sc.h[((size_t)k * B + i) * 2 + 1] = (float)(i % 7) / 7.0f; /* energy */
        }
    pput(&sc);
    for (int i = 0; i < B; i++) {
        ones.h[i] = 1.0f;
        dts.h[i] = 1.0f / STEPS;
    }
    pput(&ones);
    pput(&dts);
    /* no finiteness read-back: a graph cannot hold one */
    if (!trunk_setup_both(&cfg, B, 5, 0.5f, 0, t, opt))
        goto out;
    /* step 0 warms the plan caches up; step 1 must plan nothing (on the
     * GPU: every matmul shape and alignment was seen, and plan_count, which
     * each new cuBLASLt plan moves, follows the caches) */
    BOTH
    {
        for (int step = 0; step < 2; step++) {
            size_t plans = b->plan_count;
            OK(grad_step(t[side], b, T(x), T(c), T(tgt), T(out), T(dout), P(loss)));
            OK(nn_adamw_step(&opt[side], NULL, &err));
            if (step == 1)
                CHECK_MSG(b->plan_count == plans, "%s: %zu plans made by a step after warm-up",
                          b->name, b->plan_count - plans);
        }
        if (cuda_backend_is(b)) {
            CHECK_MSG(b->plan_count > 0, "cuda: a training step made no plan");
            CHECK_EQ_INT(b->plan_count, cuda_backend_plan_count(b));
        }
        printf("  %-28s %s: %zu, none after warm-up\n", "plans", b->name, b->plan_count);
        OK(nn_sync(b, &err));
    }
    nn_params *pc_ = nn_trunk_params(t[0]), *pg_ = nn_trunk_params(t[1]);
    size_t np = pg_->count;
    cmp_dev("trunk params, 2 steps", pc_->value, pg_->value, np, tol);
    pcmp(&loss, "trunk loss, 2 steps", tol);
    /* the gradient part: uncaptured, then captured and replayed */
    {
        nn_backend *b = GPU;
        int graphs = cuda_backend_is(b), side = 1;
        OK(grad_step(t[1], b, T(x), T(c), T(tgt), T(out), T(dout), P(loss)));
        float *ref = dl_copy(b, pg_->grad, np);
        OK(nn_memset(b, pg_->grad, 0xFF, np * sizeof(float), &err));   /* poison */
        size_t allocs = b->alloc_count;
        int plans = cuda_backend_plan_count(b);
        cuda_graph *cg = NULL;
        gt_error e2;
        int rc, ran = 0;
        if (graphs) {
            OK(cuda_graph_begin(b, &err));
            rc = grad_step(t[1], b, T(x), T(c), T(tgt), T(out), T(dout), P(loss));
            CHECK_MSG(rc == GT_OK, "gradient step inside capture: %s", err.message);
            rc = cuda_graph_end(b, &cg, &e2);
            CHECK_MSG(rc == GT_OK, "cuda_graph_end: %s", e2.message);
            if (cg) {
                OK(cuda_graph_launch(b, cg, &err));
                OK(cuda_graph_launch(b, cg, &err));   /* again: the same state in, the same out */
                ran = 1;
            }
        } else {
            OK(grad_step(t[1], b, T(x), T(c), T(tgt), T(out), T(dout), P(loss)));
            ran = 1;
        }
        if (ran) {
            float *got = dl_copy(b, pg_->grad, np);
            cmp_f("replayed gradient step", ref, got, np, 0.0);
            free(got);
        }
        if (graphs) {
            CHECK_EQ_INT(b->alloc_count, allocs);
            CHECK_EQ_INT(cuda_backend_plan_count(b), plans);
        }
        cuda_graph_destroy(cg);
        free(ref);
    }
    /* the whole step, AdamW included (its clipping and hyper-parameters are
     * read on the device): two steps eager from a saved state, then the
     * same two from that state as one captured graph replayed, each step's
     * hyper-parameters written before its launch (nn_adamw_prepare).  The
     * learning rate moves every step (a warm-up), so a replay that kept its
     * capture's values would differ; the weights must be the same bits. */
    {
        nn_backend *b = GPU;
        int graphs = cuda_backend_is(b), side = 1;
        nn_adamw_opt *o = &opt[1];
        float *v0 = dl_copy(b, pg_->value, np), *m0 = dl_copy(b, o->m, np);
        float *s0 = dl_copy(b, o->v, np);
        long long step0 = o->step;
        o->cfg.warmup_steps = step0 + 4;
        float norm_ref[2], norm_got[2] = {-1.0f, -1.0f};
        for (int k = 0; k < 2; k++) {
            OK(grad_step(t[1], b, T(x), T(c), T(tgt), T(out), T(dout), P(loss)));
            OK(nn_adamw_step(o, &norm_ref[k], &err));
        }
        float *ref = dl_copy(b, pg_->value, np);
        opt_restore(b, o, v0, m0, s0, step0);
        size_t allocs = b->alloc_count;
        int plans = cuda_backend_plan_count(b);
        cuda_graph *cg = NULL;
        gt_error e2;
        int rc = GT_OK;
        if (graphs) {
            OK(cuda_graph_begin(b, &err));
            rc = grad_step(t[1], b, T(x), T(c), T(tgt), T(out), T(dout), P(loss));
            if (rc == GT_OK)
                rc = nn_adamw_launch(o, &err);
            CHECK_MSG(rc == GT_OK, "whole step inside capture: %s", err.message);
            rc = cuda_graph_end(b, &cg, &e2);
            CHECK_MSG(rc == GT_OK, "cuda_graph_end: %s", e2.message);
        }
        for (int k = 0; k < 2 && rc == GT_OK; k++) {
            OK(nn_adamw_prepare(o, &err));
            if (cg) {
                OK(cuda_graph_launch(b, cg, &err));
            } else {
                OK(grad_step(t[1], b, T(x), T(c), T(tgt), T(out), T(dout), P(loss)));
                OK(nn_adamw_launch(o, &err));
            }
            OK(nn_adamw_finish(o, &norm_got[k], &err));
        }
        if (rc == GT_OK) {
            float *got = dl_copy(b, pg_->value, np);
            cmp_f(graphs ? "replayed whole step, 2 steps" : "split whole step, 2 steps", ref,
                  got, np, 0.0);
            CHECK_MSG(norm_got[0] == norm_ref[0] && norm_got[1] == norm_ref[1],
                      "gradient norms %g %g, eager %g %g", norm_got[0], norm_got[1],
                      norm_ref[0], norm_ref[1]);
            CHECK_EQ_INT(o->step, step0 + 2);
            free(got);
        }
        if (graphs) {
            CHECK_EQ_INT(b->alloc_count, allocs);
            CHECK_EQ_INT(cuda_backend_plan_count(b), plans);
        }
        cuda_graph_destroy(cg);
        /* back to the saved state: the sampler below compares the two sides */
        opt_restore(b, o, v0, m0, s0, step0);
        free(ref);
        free(v0);
        free(m0);
        free(s0);
    }
    /* the sampler on the packed trunk: CPU vs GPU, then captured vs not */
    {
        if (!trunk_pack_both(t))
            goto out;
        prand(&sx, -1, 1);   /* the same noise on both sides (kept in sx.h) */
        BOTH OK(euler(t[side], b, P(sx), P(sc), P(sv), P(ones), P(dts), B, D, STEPS));
        float *a = calloc((size_t)B * D, sizeof(float)), *g = calloc((size_t)B * D, sizeof(float));
        fetch(&sx, a, g);
        cmp_f("Euler sampler, 4 steps", a, g, (size_t)B * D, tol);
        cuda_graph *cg = NULL;
        int graphs = cuda_backend_is(GPU), ran = 0, side = 1;
        nn_backend *b = GPU;
        OK(nn_copy_h2d(b, P(sx), sx.h, (size_t)B * D * sizeof(float), &err));
        if (graphs) {
            OK(cuda_graph_begin(b, &err));
            int rc = euler(t[1], b, P(sx), P(sc), P(sv), P(ones), P(dts), B, D, STEPS);
            CHECK_MSG(rc == GT_OK, "sampler inside capture: %s", err.message);
            gt_error e2;
            rc = cuda_graph_end(b, &cg, &e2);
            CHECK_MSG(rc == GT_OK, "cuda_graph_end (sampler): %s", e2.message);
            if (cg) {
                OK(cuda_graph_launch(b, cg, &err));
                ran = 1;
            }
        } else {
            OK(euler(t[1], b, P(sx), P(sc), P(sv), P(ones), P(dts), B, D, STEPS));
            ran = 1;
        }
        if (ran) {
            float *r = dl_copy(b, P(sx), (size_t)B * D);
            cmp_f("replayed sampler", g, r, (size_t)B * D, 0.0);
            free(r);
        }
        cuda_graph_destroy(cg);
        if (graphs) {
            /* a row count the pinned algorithm has not been checked for is
             * refused inside capture */
            OK(cuda_graph_begin(b, &err));
            int rc = nn_trunk_forward(t[1], nn_f32(P(sx), B - 1, D), nn_f32(P(sc), B - 1, 2),
                                      nn_f32(P(sv), B - 1, D), 0, &err);
            CHECK_EQ_INT(rc, GT_EINVAL);
            CHECK(strstr(err.message, "capture") != NULL);
            cg = NULL;
            gt_error e2;
            (void)cuda_graph_end(b, &cg, &e2);
            cuda_graph_destroy(cg);
        }
        free(a);
        free(g);
    }
out:
    trunk_free_both(t, opt);
    PFREE(&x, &c, &tgt, &out, &dout, &loss, &sx, &sv, &sc, &ones, &dts);
}

/* bad input through the validating wrappers reaches neither backend */
/* zero_outside (the autoregressive stage's padding cleared in one pass):
 * the same bits on both sides, in a view narrower than its rows, with and
 * without an index, rows with an index out of range left alone. */
static void test_zero_outside(int rows, int cols)
{
    printf("zero_outside %dx%d\n", rows, cols);
    const int NV = 7;
    int32_t valid[14], *ix = malloc(sizeof(int32_t) * (size_t)rows);
    for (int k = 0; k < NV; k++) {
        int lo = (int)frand(0, (float)cols + 0.999f), hi = (int)frand(0, (float)cols + 0.999f);
        valid[2 * k] = lo < hi ? lo : hi;
        valid[2 * k + 1] = lo < hi ? hi : lo;
    }
    valid[0] = 0, valid[1] = cols; /* a full row */
    for (int i = 0; i < rows; i++)
        ix[i] = i % 5 == 4 ? -1 : (int32_t)frand(0, (float)NV + 0.999f); /* NV: out of range */
    pair x = pnew(rows, cols + 3), v = pnew(1, 14), id = pnew(1, rows);
    OK(nn_copy_h2d(CPU, v.c, valid, sizeof valid, &err));
    OK(nn_copy_h2d(GPU, v.g, valid, sizeof valid, &err));
    OK(nn_copy_h2d(CPU, id.c, ix, sizeof(int32_t) * (size_t)rows, &err));
    OK(nn_copy_h2d(GPU, id.g, ix, sizeof(int32_t) * (size_t)rows, &err));
    for (int with_idx = 0; with_idx < 2; with_idx++) {
        prand(&x, -1, 1);
        BOTH OK(nn_zero_outside(b, pview(&x, side, cols), (const int32_t *)P(v), NV,
                                with_idx ? (const int32_t *)P(id) : NULL, &err));
        pcmp_exact(&x, with_idx ? "zero_outside (idx)" : "zero_outside");
    }
    PFREE(&x, &v, &id);
    free(ix);
}

/* nn_host_alloc on both backends: aligned, unique at 0 bytes, a target
 * and a source of copies; on the GPU page-locked (the sampler's copies back
 * land there). */
static void test_host_memory(void)
{
    printf("host memory for copies\n");
    nn_backend *bs[2] = {GPU, CPU};
    for (int k = 0; k < 2; k++) {
        nn_backend *b = bs[k];
        void *z0 = NULL, *z1 = NULL, *d = NULL;
        OK(nn_host_alloc(b, 0, &z0, &err));
        OK(nn_host_alloc(b, 0, &z1, &err));
        CHECK(z0 && z1 && z0 != z1);
        const size_t n = 3 * 1024 * 1024 + 13, bytes = n * sizeof(float);
        float *h = NULL, *src = malloc(bytes);
        OK(nn_host_alloc(b, bytes, (void **)&h, &err));
        CHECK(h && src && (uintptr_t)h % 64 == 0);
        if (!h || !src) {
            free(src);
            return;
        }
        for (size_t i = 0; i < n; i++)
            src[i] = 0.5f * (float)(i % 100003);
        OK(nn_alloc(b, bytes, &d, &err));
        OK(nn_copy_h2d(b, d, src, bytes, &err));
        OK(nn_copy_d2h(b, h, d, bytes, &err));
        CHECK_MSG(memcmp(h, src, bytes) == 0, "%s: a copy into host memory differs", b->name);
        for (size_t i = 0; i < n; i++)
            h[i] = -h[i];
        OK(nn_copy_h2d(b, d, h, bytes, &err));
        OK(nn_copy_d2h(b, src, d, bytes, &err));
        CHECK_MSG(memcmp(h, src, bytes) == 0, "%s: a copy from host memory differs", b->name);
        if (b == GPU && !getenv("GIANT_CUDA_TEST_ON_CPU")) {
            struct cudaPointerAttributes a;
            CHECK_MSG(cudaPointerGetAttributes(&a, h) == cudaSuccess &&
                          a.type == cudaMemoryTypeHost,
                      "host memory of the CUDA backend is not page-locked");
            (void)cudaGetLastError();
        }
        nn_free(b, d);
        nn_host_free(b, h);
        nn_host_free(b, z0);
        nn_host_free(b, z1);
        free(src);
    }
}

static void test_bad_input(void)
{
    printf("bad input\n");
    pair x = pnew(4, 8), y = pnew(4, 6);
    gt_error e;
    CHECK(nn_silu_fwd(GPU, pg(&y), pg(&x), &e) != GT_OK);       /* shape mismatch */
    nn_tensor bad = pg(&x);
    bad.ld = 3;                                                  /* ld < cols */
    CHECK(nn_silu_fwd(GPU, pg(&x), bad, &e) != GT_OK);
    CHECK(nn_matmul(GPU, pg(&y), pg(&x), 0, pg(&x), 1, NULL, NN_ACT_NONE, 0, &e) != GT_OK);
    pfree(&x);
    pfree(&y);
}

int main(void)
{
    /* GIANT_CUDA_TEST_ON_CPU=1 runs this whole program with the naive
     * reference backend in the GPU's place (no graphs): it proves the
     * harness and the trunk steps on machines without a GPU, under the
     * sanitizers, and checks the CPU backend against the reference. */
    int rc;
    if (getenv("GIANT_CUDA_TEST_ON_CPU"))
        rc = ref_backend_create(&GPU, &err);
    else
        rc = cuda_backend_create(0, &GPU, &err);
    if (rc != GT_OK) {
        if (rc == GT_EUNSUPPORTED && !strncmp(err.message, "no CUDA device", 14))
            check_skip(err.message);
        CHECK_MSG(0, "cuda_backend_create: %s", err.message);
        return check_finish();
    }
#ifdef GIANT_TEST_WITH_CPU
    rc = cpu_backend_create(&CPU, &err);
#else
    rc = ref_backend_create(&CPU, &err);
#endif
    CHECK_MSG(rc == GT_OK, "cpu backend: %s", err.message);
    if (rc)
        return check_finish();
    int bf16 = GPU->has_bf16 || GPU->bf16_emulated;
    printf("under test: %s:%d, reference: %s, bf16 %d\n", GPU->name, GPU->device, CPU->name, bf16);

    test_matmul_f32();
    if (bf16)
        test_matmul_bf16();
    test_matmul_plans();
    test_elementwise(67, 130);
    test_elementwise(64, 512);
    test_axpby_rows(1, 1, 0);
    test_axpby_rows(7, 5, 3);
    test_axpby_rows(33, 130, 1);
    test_axpby_rows(96, 40, 0);      /* the sampler's batch in the trunk tests */
    test_axpby_rows(64, 128, 4);     /* 16-byte path with a row pitch */
    test_axpby_rows(300, 64, 0);
    test_layernorm(67, 130);
    test_layernorm(64, 512);
    test_blocks_embed();
    test_softmax_route(8);
    test_softmax_route(100);
    test_stick(45);
    test_stick(2);
    test_stick(130);
    test_stick(512);
    test_optim_rng();
    test_rand_rows(1, 1, 0, 0, 0);
    test_rand_rows(7, 5, 3, 0, 0);          /* a partial last block, 16-byte pitch */
    test_rand_rows(33, 130, 1, 17, 2);      /* odd pitch: the scalar stores */
    test_rand_rows(64, 128, 4, 5, 0);       /* whole blocks, 16-byte stores */
    test_rand_rows(300, 1, 0, (1ULL << 40) + 3, 0);   /* stage 1's noise: one column */
    test_rand_rows(20, 6480, 0, 1000, 0);   /* a stage-2 row of dataset 2 */
    test_linear_fixed(67, 45, 33, NN_F32);
    test_linear_fixed(256, 384, 512, NN_F32);
    test_linear_fixed(5, 16, 0, NN_F32);
    if (bf16) {
        test_linear_fixed(67, 45, 33, NN_BF16);
        test_linear_fixed(256, 384, 520, NN_BF16);
    }
    test_linear_fixed_rows(NN_F32);
    if (bf16)
        test_linear_fixed_rows(NN_BF16);
    test_bad_input();
    test_host_memory();
    test_zero_outside(1, 1);
    test_zero_outside(37, 130);
    test_zero_outside(300, 64);
    test_trunk(NN_TRUNK_EXPERT, NN_F32);
    test_trunk(NN_TRUNK_ROUTED, NN_F32);
    if (bf16)
        test_trunk(NN_TRUNK_EXPERT, NN_BF16);
    test_trunk_graph(NN_F32);
    if (bf16)
        test_trunk_graph(NN_BF16);
    size_t live = GPU->bytes_live;
    CHECK_EQ_INT(live, 0);
    nn_backend_close(GPU);
    nn_backend_close(CPU);
    return check_finish();
}
