/* The fixed-order ("row-invariant") linear layer of the CPU backend
 * (engine/cpu/cpu_fixed.{h,c}: nn_pack_weight + nn_linear_fixed) and the
 * trunks that sample through it (nn_trunk_pack).  Six parts, one summary
 * line each (one program over 800 lines because all six share the
 * per-kernel backends it opens and the independent reference they are
 * checked against):
 *
 *  1. row invariance: rows [r0, r0+m) of a bigger x give exactly the bytes
 *     of the same rows of one big call, for every kernel the CPU runs, fp32
 *     and bf16, m = 1..24, 64, 256, 1000, 1 and 2 OpenMP threads, odd and
 *     even offsets, tails in n and k, k > 2048 (k blocks), bias or not,
 *     NONE / SiLU, accumulate;
 *  2. the same bits across instruction sets (scalar, AVX2, AVX-512, and for
 *     bf16 VDPBF16PS against its emulation), including SiLU at extreme,
 *     infinite and NaN pre-activations;
 *  3. bit-identity with an independent transcription of the contract of
 *     nn_cpu_fixed.h, and closeness to a double-precision dot product;
 *  4. nn_exp_fixed / nn_silu_fixed accuracy in ulps against libm's exp in
 *     double, and their clamps;
 *  5. packing (views with ld > cols, n = k = 1) and refused input;
 *  6. trunks (expert, routed; fp32, bf16): packed inference forwards give
 *     each row the same bytes alone, in chunks and in the full batch, on
 *     every kernel; nn_trunk_set_precision drops the pack; the packed fp32
 *     forward stays close to the library forward.
 *
 * Kernels are chosen by opening CPU backends with GIANT_CPU_KERNEL and
 * GIANT_CPU_BF16 set; the environment the test was started with is the
 * ceiling (the suite's AVX2 pass sets GIANT_CPU_KERNEL=avx2 and
 * GIANT_CPU_BF16=emulate), so a kernel above it or missing from the CPU is
 * skipped with a note, never failed.  Shapes are small: the whole program
 * runs in seconds under ASan. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_backend.h"
#include "check.h"
#include "gt_clock.h"
#include "nn_backend.h"
#include "nn_trunk.h"
#include "nn/nn_fixture.h"

static gt_error E;

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float fromu(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void *xalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* deterministic data */
static uint64_t rng = 0x243F6A8885A308D3ull;
static uint32_t rnd32(void) { return (uint32_t)(nnfx_next(&rng) >> 32); }
static float frand(void) { return nnfx_frand(&rng); }   /* [-1, 1) */

/* ------------------------------------------------------------------------ */
/* kernels: one CPU backend per fixed-order kernel                          */
/* ------------------------------------------------------------------------ */

enum { K_SCALAR, K_AVX2, K_AVX512, K_NATIVE, NK };
static const char *const KNAME[NK] = {"scalar", "avx2", "avx512", "avx512bf16"};
static nn_backend *KB[NK];   /* NULL: this kernel cannot run here */
static nn_backend *DEF;      /* opened with the environment the test started with */
static char *env_kernel, *env_bf16;

static void env_restore(void)
{
    if (env_kernel)
        setenv("GIANT_CPU_KERNEL", env_kernel, 1);
    else
        unsetenv("GIANT_CPU_KERNEL");
    if (env_bf16)
        setenv("GIANT_CPU_BF16", env_bf16, 1);
    else
        unsetenv("GIANT_CPU_BF16");
}

/* kernel / bf16: NULL keeps the starting environment's value */
static nn_backend *open_cpu(const char *kernel, const char *bf16)
{
    env_restore();
    if (kernel)
        setenv("GIANT_CPU_KERNEL", kernel, 1);
    if (bf16)
        setenv("GIANT_CPU_BF16", bf16, 1);
    nn_backend *b = NULL;
    int rc = cpu_backend_create(&b, &E);
    env_restore();
    if (rc) {
        fprintf(stderr, "cpu backend: %s\n", E.message);
        exit(1);
    }
    return b;
}

static int isa_rank(const char *name)
{
    return !strcmp(name, "avx512") ? 2 : !strcmp(name, "avx2") ? 1 : 0;
}

static void open_kernels(void)
{
    const char *k0 = getenv("GIANT_CPU_KERNEL"), *b0 = getenv("GIANT_CPU_BF16");
    env_kernel = k0 ? strdup(k0) : NULL;
    env_bf16 = b0 ? strdup(b0) : NULL;
    DEF = open_cpu(NULL, NULL);
    const char *top = cpu_backend_fixed_kernel(DEF, NN_F32);
    CHECK(top != NULL);
    int ceiling = top ? isa_rank(top) : 0;
    printf("default kernels here: fp32 %s, bf16 %s (GIANT_CPU_KERNEL=%s, GIANT_CPU_BF16=%s)\n",
           top ? top : "?", cpu_backend_fixed_kernel(DEF, NN_BF16), env_kernel ? env_kernel : "",
           env_bf16 ? env_bf16 : "");
    for (int ki = K_SCALAR; ki <= K_AVX512; ki++) {
        if (ki > ceiling) {
            printf("note: the %s kernel is above what this CPU / environment allows: skipped\n",
                   KNAME[ki]);
            continue;
        }
        /* avx512 is what an unrestricted backend picks; never raise a cap
         * the caller set, so the starting GIANT_CPU_KERNEL stays */
        KB[ki] = open_cpu(ki == K_AVX512 ? NULL : KNAME[ki], "emulate");
        const char *f = cpu_backend_fixed_kernel(KB[ki], NN_F32),
                   *h = cpu_backend_fixed_kernel(KB[ki], NN_BF16);
        CHECK_MSG(f && !strcmp(f, KNAME[ki]), "asked for %s, fp32 kernel is %s", KNAME[ki],
                  f ? f : "NULL");
        CHECK_MSG(h && !strcmp(h, KNAME[ki]), "asked for emulated bf16 on %s, got %s", KNAME[ki],
                  h ? h : "NULL");
    }
    const char *h = cpu_backend_fixed_kernel(DEF, NN_BF16);
    if (h && !strcmp(h, "avx512bf16")) {
        KB[K_NATIVE] = DEF;
        CHECK(DEF->has_bf16);
    } else {
        printf("note: no VDPBF16PS kernel here (CPU without AVX512-BF16, oneDNN capped, or "
               "GIANT_CPU_BF16=emulate): native bf16 skipped\n");
    }
}

/* the fp32 kernel of the native-bf16 backend is the avx512 one: not repeated */
static int kernel_runs(int ki, nn_dtype dt)
{
    return KB[ki] && (dt == NN_BF16 || ki != K_NATIVE);
}

/* ------------------------------------------------------------------------ */
/* problems: x (M x k, ld >= k), W (n x k), bias, an old y                  */
/* ------------------------------------------------------------------------ */

typedef struct prob {
    nn_dtype dt;
    int M, n, k, ldx;
    void *x;       /* exactly (M-1)*ldx + k elements: reads past it are caught */
    void *w;       /* n x k */
    float *bias;   /* n */
    float *y0;     /* M x n: the y an accumulating call adds to */
} prob;

/* fp32 values with the cases that tell implementations apart: signed
 * zeros, denormals (no flushing in fp32), cancellation */
static float f32_mixed(int tiny_row)
{
    uint32_t h = rnd32();
    if (tiny_row)   /* products in the denormal range */
        return frand() * 0x1p-128f;
    switch (h & 31u) {
    case 0:
        return (h & 32u) ? -0.0f : 0.0f;
    case 1:
        return fromu(((h >> 9) & 0x7fffffu) | 1u | ((h & 64u) ? 0x80000000u : 0u));
    case 2:
        return frand() * 1024.0f;
    case 3:
        return frand() * 1e-3f;
    default:
        return frand();
    }
}

/* bf16 values: zeros and denormals (treated as zero by VDPBF16PS), tiny
 * normals whose products underflow (flushed), ordinary magnitudes */
static uint16_t bf16_mixed(int tiny_row)
{
    uint32_t h = rnd32();
    unsigned c = tiny_row ? (h & 1u) : (h & 15u);
    switch (c) {
    case 0:
        return (uint16_t)((h >> 16) & 0x807fu);
    case 1:
        return (uint16_t)(((h >> 16) & 0x8000u) | (0x0080u + ((h >> 4) & 0x7ffu)));
    case 2:
        return nn_bf16_from_f32(frand() * 300.0f);
    default:
        return nn_bf16_from_f32(frand());
    }
}

/* plain: uniform [-1, 1) everywhere (the double-precision comparison) */
static void make_prob(prob *P, nn_dtype dt, int M, int n, int k, int ldx, int plain)
{
    memset(P, 0, sizeof *P);
    P->dt = dt;
    P->M = M;
    P->n = n;
    P->k = k;
    P->ldx = ldx;
    size_t es = nn_dtype_size(dt);
    size_t nx = M ? (size_t)(M - 1) * ldx + k : 0;
    P->x = xalloc(nx * es);
    P->w = xalloc((size_t)n * k * es);
    P->bias = xalloc((size_t)n * sizeof(float));
    P->y0 = xalloc((size_t)M * n * sizeof(float));
    for (int i = 0; i < M; i++)
        for (int p = 0; p < ldx && (size_t)i * ldx + p < nx; p++) {
            int tiny = !plain && i % 5 == 3;
            size_t at = (size_t)i * ldx + p;
            if (dt == NN_F32)
                ((float *)P->x)[at] = plain ? frand() : f32_mixed(tiny && i % 2);
            else
                ((uint16_t *)P->x)[at] = plain ? nn_bf16_from_f32(frand()) : bf16_mixed(tiny);
        }
    for (int j = 0; j < n; j++)
        for (int p = 0; p < k; p++) {
            size_t at = (size_t)j * k + p;
            int tiny = !plain && j % 7 == 4;
            if (dt == NN_F32)
                ((float *)P->w)[at] = plain ? frand() : f32_mixed(0);
            else
                ((uint16_t *)P->w)[at] = plain ? nn_bf16_from_f32(frand()) : bf16_mixed(tiny);
        }
    for (int j = 0; j < n; j++)
        P->bias[j] = 0.5f * frand();
    for (size_t i = 0; i < (size_t)M * n; i++)
        P->y0[i] = frand();
}

static void free_prob(prob *P)
{
    free(P->x);
    free(P->w);
    free(P->bias);
    free(P->y0);
    memset(P, 0, sizeof *P);
}

static nn_tensor x_rows(const prob *P, int r0, int m)
{
    nn_tensor t;
    t.data = (char *)P->x + (size_t)r0 * P->ldx * nn_dtype_size(P->dt);
    t.dtype = P->dt;
    t.rows = m;
    t.cols = P->k;
    t.ld = P->ldx;
    return t;
}

static nn_tensor w_tensor(const prob *P)
{
    return nn_tensor_make(P->w, P->dt, P->n, P->k);
}

typedef struct variant {
    int bias;
    nn_act act;
    int acc;
} variant;

static const variant VARS[] = {
    {0, NN_ACT_NONE, 0}, {1, NN_ACT_NONE, 0}, {0, NN_ACT_SILU, 0},
    {1, NN_ACT_SILU, 0}, {0, NN_ACT_NONE, 1}, {1, NN_ACT_NONE, 1},
};
enum { NVAR = (int)(sizeof VARS / sizeof VARS[0]) };

static void var_name(const variant *v, char *s, size_t n)
{
    snprintf(s, n, "%s%s%s", v->bias ? "bias" : "nobias", v->act == NN_ACT_SILU ? "+silu" : "",
             v->acc ? "+accumulate" : "");
}

#define SENTINEL 0x7fc0beefu   /* a quiet NaN no kernel computes */

/* y (rows x n, ld) before a compared call: the old y of rows [r0, r0+rows)
 * when accumulating, else a sentinel (every element must be written) */
static void prefill(float *y, int ld, int rows, const prob *P, int r0, int acc)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < P->n; j++)
            y[(size_t)i * ld + j] = acc ? P->y0[(size_t)(r0 + i) * P->n + j] : fromu(SENTINEL);
}

static int call_fixed(nn_backend *b, const prob *P, const nn_packed *pk, const variant *v,
                      float *y, int ldy, int r0, int m)
{
    nn_tensor Y = {y, NN_F32, m, P->n, ldy};
    return nn_linear_fixed(b, Y, x_rows(P, r0, m), pk, v->bias ? P->bias : NULL, v->act, v->acc,
                           &E);
}

/* index of the first element whose bits differ, or -1 */
static long first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fbits(a[i]) != fbits(b[i]))
            return (long)i;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* 1. row invariance                                                        */
/* ------------------------------------------------------------------------ */

static const int MS_ALL[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12,  13,  14,
                             15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 64, 256, 1000};
static const int MS_SMALL[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13,
                               14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 64};

typedef struct shape {
    const char *what;
    int n, k, M;
    const int *ms;
    int nms;
} shape;

/* n = 37: one full 32-column panel and a 5-column one (two 16-lane halves,
 * the second empty); n = 300: 9 full panels and a 12-column tail, and two
 * threads split panels even for m = 2; k = 67 odd (a cut bf16 pair);
 * k = 2101 > 2048: a second k block of 53 (27 pairs, the last cut), with
 * partial sums parked in y. */
static const shape SHAPES[] = {
    {"n37 k67", 37, 67, 1013, MS_ALL, (int)(sizeof MS_ALL / sizeof MS_ALL[0])},
    {"n300 k131", 300, 131, 70, MS_SMALL, (int)(sizeof MS_SMALL / sizeof MS_SMALL[0])},
    {"n17 k2101", 17, 2101, 70, MS_SMALL, (int)(sizeof MS_SMALL / sizeof MS_SMALL[0])},
};
enum { NSHAPES = (int)(sizeof SHAPES / sizeof SHAPES[0]) };

/* row offsets: 0, 1 (odd), an odd one in the middle, the last possible */
static int pick_r0(int M, int m, int sel)
{
    int last = M - m, r;
    switch (sel & 3) {
    case 0:
        r = 0;
        break;
    case 1:
        r = 1;
        break;
    case 2:
        r = (last / 2) | 1;
        break;
    default:
        r = last;
        break;
    }
    return r > last ? last : r;
}

static void test_row_invariance(void)
{
    double t0 = gt_clock_s();
    int threads0 = omp_get_max_threads();
    long calls = 0, rows_cmp = 0;
    for (int di = 0; di < 2; di++) {
        nn_dtype dt = di ? NN_BF16 : NN_F32;
        for (int s = 0; s < NSHAPES; s++) {
            const shape *S = &SHAPES[s];
            prob P;
            make_prob(&P, dt, S->M, S->n, S->k, S->k + 3, 0);
            float *ybig = xalloc((size_t)S->M * S->n * sizeof(float));
            for (int ki = 0; ki < NK; ki++) {
                if (!kernel_runs(ki, dt))
                    continue;
                nn_backend *b = KB[ki];
                nn_packed pk;
                MUST(nn_pack_weight(b, w_tensor(&P), &pk, &E));
                for (int vi = 0; vi < NVAR; vi++)
                    for (int th = 1; th <= 2; th++) {
                        const variant *v = &VARS[vi];
                        omp_set_num_threads(th);
                        prefill(ybig, S->n, S->M, &P, 0, v->acc);
                        MUST(call_fixed(b, &P, &pk, v, ybig, S->n, 0, S->M));
                        calls++;
                        int bad = 0;
                        char why[160] = "";
                        for (int mi = 0; mi < S->nms; mi++) {
                            int m = S->ms[mi];
                            if (m > S->M)
                                continue;
                            int r0 = pick_r0(S->M, m, mi + vi + th + ki);
                            /* m rows with ld n + 3, and one more row: the
                             * padding and the extra row must stay untouched */
                            int ld = S->n + 3;
                            size_t cap = (size_t)(m + 1) * ld;
                            float *ys = xalloc(cap * sizeof(float));
                            for (size_t q = 0; q < cap; q++)
                                ys[q] = fromu(SENTINEL + 1);
                            prefill(ys, ld, m, &P, r0, v->acc);
                            MUST(call_fixed(b, &P, &pk, v, ys, ld, r0, m));
                            calls++;
                            for (int i = 0; i < m; i++) {
                                long d = first_diff(ys + (size_t)i * ld,
                                                    ybig + (size_t)(r0 + i) * S->n, (size_t)S->n);
                                rows_cmp++;
                                if (d >= 0 && !bad++)
                                    snprintf(why, sizeof why,
                                             "m %d r0 %d: row %d col %ld: 0x%08x alone vs "
                                             "0x%08x in the big call",
                                             m, r0, r0 + i, d, fbits(ys[(size_t)i * ld + d]),
                                             fbits(ybig[(size_t)(r0 + i) * S->n + d]));
                            }
                            for (size_t q = 0; q < cap; q++) {
                                int inside = (int)(q / ld) < m && (int)(q % ld) < S->n;
                                if (!inside && fbits(ys[q]) != SENTINEL + 1 && !bad++)
                                    snprintf(why, sizeof why,
                                             "m %d r0 %d: wrote outside y (row %zu col %zu)", m,
                                             r0, q / ld, q % ld);
                            }
                            free(ys);
                        }
                        char vn[48];
                        var_name(v, vn, sizeof vn);
                        CHECK_MSG(bad == 0, "row invariance %s %s %s %s %d thread(s): %d bad; %s",
                                  KNAME[ki], nn_dtype_name(dt), S->what, vn, th, bad, why);
                    }
                nn_packed_free(b, &pk);
            }
            free(ybig);
            free_prob(&P);
        }
    }
    omp_set_num_threads(threads0);
    int nf = 0, nb = 0;
    for (int ki = 0; ki < NK; ki++) {
        nf += kernel_runs(ki, NN_F32);
        nb += kernel_runs(ki, NN_BF16);
    }
    printf("row invariance: %d fp32 and %d bf16 kernels, %d shapes x %d variants x 1-2 "
           "threads, %ld calls, %ld rows equal to the big call's bytes (%.2f s)\n",
           nf, nb, NSHAPES, NVAR, calls, rows_cmp, gt_clock_s() - t0);
}

/* ------------------------------------------------------------------------ */
/* 2. the same bits on every instruction set                                */
/* ------------------------------------------------------------------------ */

/* SiLU through the vector epilogues at every kind of pre-activation:
 * k = 1, x = {1, -1, 0.5}, W = the values below, so acc = fma(x, w, 0). */
static int silu_sweep_values(float *v, int cap)
{
    static const float special[] = {
        0.0f, -0.0f, 0x1p-149f, -0x1p-149f, FLT_MIN, -FLT_MIN, 1.0f, -1.0f, 0.5f, -0.5f,
        86.9f, -86.9f, 87.0f, -87.0f, 87.0001f, -87.0001f, 88.0f, -88.0f, 88.0001f, -88.0001f,
        88.72f, -88.72f, 89.0f, -89.0f, 100.0f, -100.0f, 1e10f, -1e10f, 1e30f, -1e30f,
        FLT_MAX, -FLT_MAX, INFINITY, -INFINITY, NAN, -NAN};
    int n = 0;
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        v[n++] = special[i];
    for (int e = -149; e <= 127 && n + 2 <= cap; e++) {   /* every binade, both signs */
        float f = ldexpf(1.0f + (float)(e & 7) / 8.0f, e);
        v[n++] = f;
        v[n++] = -f;
    }
    for (int i = 0; n < cap; i++)   /* dense where SiLU bends */
        v[n++] = -100.0f + 200.0f * (float)i / (float)(cap - 1);
    return n;
}

static void test_same_bits_across_isas(void)
{
    double t0 = gt_clock_s();
    int threads0 = omp_get_max_threads();
    long outputs = 0;
    int kernels_cmp[2] = {0, 0};
    for (int di = 0; di < 2; di++) {
        nn_dtype dt = di ? NN_BF16 : NN_F32;
        int first = -1;
        for (int ki = 0; ki < NK; ki++)
            if (kernel_runs(ki, dt)) {
                if (first < 0)
                    first = ki;
                kernels_cmp[di]++;
            }
        for (int s = 0; s < NSHAPES; s++) {
            const shape *S = &SHAPES[s];
            prob P;
            make_prob(&P, dt, S->M, S->n, S->k, S->k + 1, 0);
            size_t ny = (size_t)S->M * S->n;
            float *yref = xalloc(ny * sizeof(float)), *y = xalloc(ny * sizeof(float));
            for (int vi = 0; vi < NVAR; vi++) {
                const variant *v = &VARS[vi];
                for (int ki = first; ki < NK; ki++) {
                    if (!kernel_runs(ki, dt))
                        continue;
                    nn_packed pk;
                    MUST(nn_pack_weight(KB[ki], w_tensor(&P), &pk, &E));
                    omp_set_num_threads(1 + (ki + vi) % 2);
                    float *dst = ki == first ? yref : y;
                    prefill(dst, S->n, S->M, &P, 0, v->acc);
                    MUST(call_fixed(KB[ki], &P, &pk, v, dst, S->n, 0, S->M));
                    nn_packed_free(KB[ki], &pk);
                    if (ki == first)
                        continue;
                    long d = first_diff(y, yref, ny);
                    char vn[48];
                    var_name(v, vn, sizeof vn);
                    CHECK_MSG(d < 0, "%s %s %s: %s gives 0x%08x, %s 0x%08x at row %ld col %ld",
                              nn_dtype_name(dt), S->what, vn, KNAME[ki],
                              d < 0 ? 0u : fbits(y[d]), KNAME[first], d < 0 ? 0u : fbits(yref[d]),
                              d / S->n, d % S->n);
                    outputs += (long)ny;
                }
            }
            free(yref);
            free(y);
            free_prob(&P);
        }
    }
    /* SiLU at extreme pre-activations, fp32: every kernel against the
     * scalar formula (NaN: any NaN) */
    enum { NS = 2500 };
    float *wv = xalloc(NS * sizeof(float));
    int n = silu_sweep_values(wv, NS);
    float xs[3] = {1.0f, -1.0f, 0.5f};
    float *y = xalloc((size_t)3 * n * sizeof(float));
    int silu_bad = 0;
    for (int ki = 0; ki < NK; ki++) {
        if (!kernel_runs(ki, NN_F32))
            continue;
        nn_packed pk;
        MUST(nn_pack_weight(KB[ki], nn_f32(wv, n, 1), &pk, &E));
        MUST(nn_linear_fixed(KB[ki], nn_f32(y, 3, n), nn_f32(xs, 3, 1), &pk, NULL, NN_ACT_SILU, 0,
                             &E));
        nn_packed_free(KB[ki], &pk);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < n; j++) {
                float want = nn_silu_fixed(fmaf(xs[i], wv[j], 0.0f)), got = y[(size_t)i * n + j];
                int ok = isnan(want) ? isnan(got) : fbits(got) == fbits(want);
                if (!ok && silu_bad++ < 3)
                    fprintf(stderr, "silu %s: x %g w %g: 0x%08x, want 0x%08x\n", KNAME[ki],
                            (double)xs[i], (double)wv[j], fbits(got), fbits(want));
            }
        outputs += 3L * n;
    }
    CHECK_MSG(silu_bad == 0, "SiLU epilogue differs from nn_silu_fixed in %d places", silu_bad);
    free(wv);
    free(y);
    omp_set_num_threads(threads0);
    printf("same bits across ISAs: %d fp32 kernels, %d bf16 kernels (%s), %ld outputs "
           "compared, SiLU at %d extreme pre-activations equal to nn_silu_fixed (%.2f s)\n",
           kernels_cmp[0], kernels_cmp[1],
           KB[K_NATIVE] ? "VDPBF16PS and its emulations" : "emulations only", outputs, n,
           gt_clock_s() - t0);
}

/* ------------------------------------------------------------------------ */
/* 3. an independent transcription of the contract                          */
/* ------------------------------------------------------------------------ */

static float ref_dot_f32(const float *x, const float *w, int k)
{
    float acc = 0.0f;
    for (int p = 0; p < k; p++)
        acc = fmaf(x[p], w[p], acc);
    return acc;
}

/* The pairs in VDPBF16PS order, x[k] = w[k] = 0 past an odd k (that last
 * fma(0, 0, acc) matters: it turns a -0 into +0).  noinline / noipa, so the
 * compiler cannot move the chain across the MXCSR writes of the caller. */
#if defined(__GNUC__) && !defined(__clang__)
#define NOIPA __attribute__((noinline, noipa))
#else
#define NOIPA __attribute__((noinline))
#endif
NOIPA static float bf16_chain(const uint16_t *x, const uint16_t *w, int k)
{
    float acc = 0.0f;
    for (int q = 0; 2 * q < k; q++) {
        float x1 = 2 * q + 1 < k ? nn_f32_from_bf16(x[2 * q + 1]) : 0.0f;
        float w1 = 2 * q + 1 < k ? nn_f32_from_bf16(w[2 * q + 1]) : 0.0f;
        acc = fmaf(x1, w1, acc);
        acc = fmaf(nn_f32_from_bf16(x[2 * q]), nn_f32_from_bf16(w[2 * q]), acc);
    }
    return acc;
}

static float ref_dot_bf16(const uint16_t *x, const uint16_t *w, int k)
{
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);   /* FTZ | DAZ while accumulating only */
    float acc = bf16_chain(x, w, k);
    _mm_setcsr(csr);
    return acc;
}

static float ref_epi(float acc, const float *bias, int j, nn_act act, int accumulate, float old)
{
    float v = acc;
    if (bias)
        v = v + bias[j];
    if (act == NN_ACT_SILU)
        v = nn_silu_fixed(v);
    if (accumulate)
        v = old + v;
    return v;
}

/* dot products of every row of P with every weight row (M x n) */
static void ref_dots(const prob *P, float *d)
{
    for (int i = 0; i < P->M; i++)
        for (int j = 0; j < P->n; j++) {
            if (P->dt == NN_F32)
                d[(size_t)i * P->n + j] =
                    ref_dot_f32((const float *)P->x + (size_t)i * P->ldx,
                                (const float *)P->w + (size_t)j * P->k, P->k);
            else
                d[(size_t)i * P->n + j] =
                    ref_dot_bf16((const uint16_t *)P->x + (size_t)i * P->ldx,
                                 (const uint16_t *)P->w + (size_t)j * P->k, P->k);
        }
}

static double xval(const prob *P, int i, int p)
{
    size_t at = (size_t)i * P->ldx + p;
    return P->dt == NN_F32 ? (double)((const float *)P->x)[at]
                           : (double)nn_f32_from_bf16(((const uint16_t *)P->x)[at]);
}

static double wval(const prob *P, int j, int p)
{
    size_t at = (size_t)j * P->k + p;
    return P->dt == NN_F32 ? (double)((const float *)P->w)[at]
                           : (double)nn_f32_from_bf16(((const uint16_t *)P->w)[at]);
}

static void test_reference(void)
{
    double t0 = gt_clock_s();
    long elems = 0;
    for (int di = 0; di < 2; di++) {
        nn_dtype dt = di ? NN_BF16 : NN_F32;
        for (int s = 0; s < NSHAPES; s++) {
            const shape *S = &SHAPES[s];
            int M = S->M < 64 ? S->M : 64;
            prob P;
            make_prob(&P, dt, M, S->n, S->k, S->k + 2, 0);
            size_t ny = (size_t)M * S->n;
            float *dots = xalloc(ny * sizeof(float)), *want = xalloc(ny * sizeof(float)),
                  *y = xalloc(ny * sizeof(float));
            ref_dots(&P, dots);
            for (int vi = 0; vi < NVAR; vi++) {
                const variant *v = &VARS[vi];
                for (size_t q = 0; q < ny; q++)
                    want[q] = ref_epi(dots[q], v->bias ? P.bias : NULL, (int)(q % S->n), v->act,
                                      v->acc, P.y0[q]);
                for (int ki = 0; ki < NK; ki++) {
                    if (!kernel_runs(ki, dt))
                        continue;
                    nn_packed pk;
                    MUST(nn_pack_weight(KB[ki], w_tensor(&P), &pk, &E));
                    prefill(y, S->n, M, &P, 0, v->acc);
                    MUST(call_fixed(KB[ki], &P, &pk, v, y, S->n, 0, M));
                    nn_packed_free(KB[ki], &pk);
                    long d = first_diff(y, want, ny);
                    char vn[48];
                    var_name(v, vn, sizeof vn);
                    CHECK_MSG(d < 0,
                              "%s %s %s %s: 0x%08x, the reference 0x%08x (row %ld col %ld)",
                              KNAME[ki], nn_dtype_name(dt), S->what, vn,
                              d < 0 ? 0u : fbits(y[d]), d < 0 ? 0u : fbits(want[d]), d / S->n,
                              d % S->n);
                    elems += (long)ny;
                }
            }
            free(dots);
            free(want);
            free(y);
            free_prob(&P);
        }
    }
    /* Against the exact dot product (double: products of floats are exact
     * in double and the double sum's error, ~k 2^-53, is negligible here).
     * The chain s_p = fl(s_{p-1} + x_p w_p) rounds once per term (an fma;
     * bf16 products are exact in fp32 anyway: 8 x 8 significand bits), so
     * (Higham, Accuracy and Stability, sec. 3.1)
     *     |y - sum x_p w_p| <= gamma_k sum |x_p w_p|,  gamma_k = k u/(1 - k u),
     * u = 2^-24; bf16 flushing adds at most 2^-126 per step (k 2^-126). */
    const double u = 0x1p-24;
    double worst = 0.0;   /* max |err| / (u sum|xw|) */
    int closeness_bad = 0, ncl = 0;
    static const int CL[][3] = {{24, 37, 67}, {6, 17, 2101}, {4, 5, 5003}};
    for (int di = 0; di < 2; di++) {
        nn_dtype dt = di ? NN_BF16 : NN_F32;
        for (size_t c = 0; c < sizeof CL / sizeof CL[0]; c++) {
            int M = CL[c][0], n = CL[c][1], k = CL[c][2];
            prob P;
            make_prob(&P, dt, M, n, k, k, 1);
            float *y = xalloc((size_t)M * n * sizeof(float)),
                  *d = xalloc((size_t)M * n * sizeof(float));
            nn_packed pk;
            MUST(nn_pack_weight(DEF, w_tensor(&P), &pk, &E));
            MUST(nn_linear_fixed(DEF, nn_f32(y, M, n), x_rows(&P, 0, M), &pk, NULL, NN_ACT_NONE,
                                 0, &E));
            nn_packed_free(DEF, &pk);
            ref_dots(&P, d);
            CHECK_MSG(first_diff(y, d, (size_t)M * n) < 0, "%s plain %dx%dx%d: not the fmaf chain",
                      nn_dtype_name(dt), M, n, k);
            double gamma = k * u / (1.0 - k * u);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < n; j++) {
                    double exact = 0.0, mag = 0.0;
                    for (int p = 0; p < k; p++) {
                        double t = xval(&P, i, p) * wval(&P, j, p);
                        exact += t;
                        mag += fabs(t);
                    }
                    double err = fabs((double)y[(size_t)i * n + j] - exact);
                    if (err > gamma * mag + k * 0x1p-126)
                        closeness_bad++;
                    if (mag > 0 && err / (u * mag) > worst)
                        worst = err / (u * mag);
                    ncl++;
                }
            free(y);
            free(d);
            free_prob(&P);
        }
    }
    CHECK_MSG(closeness_bad == 0, "%d of %d dot products beyond gamma_k sum|xw|", closeness_bad,
              ncl);
    printf("reference: %ld outputs bit-identical to the fmaf chain (bf16: pairs, FTZ/DAZ) + "
           "bias, SiLU, old y; %d dot products (k up to 5003) within gamma_k sum|xw|, "
           "observed max |y - exact| = %.2f u sum|xw| (%.2f s)\n",
           elems, ncl, worst, gt_clock_s() - t0);
}

/* ------------------------------------------------------------------------ */
/* 4. nn_exp_fixed and nn_silu_fixed                                        */
/* ------------------------------------------------------------------------ */

/* ulp of the float nearest e (denormal range: 2^-149) */
static double ulp_of(double e)
{
    double a = fabs(e);
    if (a < (double)FLT_MIN)
        return 0x1p-149;
    int ex;
    frexp(a, &ex);   /* a in [2^(ex-1), 2^ex) */
    return ldexp(1.0, ex - 24);
}

/* Over EVERY float of [-87, 88] (an exhaustive run outside this test, same
 * formulas, glibc exp in double): nn_exp_fixed <= 1.0103 ulp (at
 * -5.87788439), nn_silu_fixed <= 2.4031 ulp (at -16.6837692; 1.4973 for
 * x > 0).  exp: the Cephes polynomial (~1 ulp) on r = x - n ln2 (ln2 in two
 * parts, n * LN2_HI exact); silu adds the roundings of 1 + e^-x and of the
 * division.  The sweep here samples ~6 million of those floats plus the
 * worst ones, and holds the implementation to these bounds. */
#define EXP_MAX_ULP 1.02
#define SILU_MAX_ULP 2.45

static void acc_err(float x, double *emax, float *xe, double *smax, float *xs)
{
    double e = exp((double)x);
    double ue = fabs((double)nn_exp_fixed(x) - e) / ulp_of(e);
    if (ue > *emax) {
        *emax = ue;
        *xe = x;
    }
    double s = (double)x / (1.0 + exp(-(double)x));
    double us = fabs((double)nn_silu_fixed(x) - s) / ulp_of(s);
    if (us > *smax) {
        *smax = us;
        *xs = x;
    }
}

static void test_exp_silu(void)
{
    double t0 = gt_clock_s();
    double emax = 0.0, smax = 0.0;
    float xe = 0.0f, xs = 0.0f;
    long pts = 0;
    /* a uniform grid over [-87, 88] */
    enum { GRID = 1 << 21 };
    for (int i = 0; i < GRID; i++, pts++)
        acc_err(-87.0f + 175.0f * (float)i / (float)(GRID - 1), &emax, &xe, &smax, &xs);
    /* floats by their bit patterns (dense near 0, every binade), both signs */
    for (uint32_t b = 0; b <= fbits(88.0f); b += 613, pts++)
        acc_err(fromu(b), &emax, &xe, &smax, &xs);
    for (uint32_t b = 0; b <= fbits(87.0f); b += 617, pts++)
        acc_err(-fromu(b), &emax, &xe, &smax, &xs);
    /* and every float around ln2/2, where the reduction changes n */
    for (float x = 0.34f; x < 0.3535f; x = nextafterf(x, 1.0f), pts++)
        acc_err(x, &emax, &xe, &smax, &xs);
    /* the worst floats of the exhaustive run */
    static const float worst[] = {-5.87788439f, 26.7286339f, -16.6837692f, 1.27693367f};
    for (size_t i = 0; i < sizeof worst / sizeof worst[0]; i++, pts++)
        acc_err(worst[i], &emax, &xe, &smax, &xs);
    CHECK_MSG(emax <= EXP_MAX_ULP, "nn_exp_fixed: %.3f ulp at x = %.9g", emax, (double)xe);
    CHECK_MSG(smax <= SILU_MAX_ULP, "nn_silu_fixed: %.3f ulp at x = %.9g", smax, (double)xs);

    /* clamps: below -87 it is e^-87, above 88 it is e^88 (both normal) */
    float lo = nn_exp_fixed(-87.0f), hi = nn_exp_fixed(88.0f);
    CHECK(isnormal(lo) && isnormal(hi));
    CHECK_CLOSE(lo, exp(-87.0), 0, 3e-7);
    CHECK_CLOSE(hi, exp(88.0), 0, 3e-7);
    static const float below[] = {-87.0001f, -87.5f, -88.0f, -100.0f, -1e30f, -FLT_MAX, -INFINITY};
    static const float above[] = {88.0001f, 88.7f, 89.0f, 100.0f, 1e30f, FLT_MAX, INFINITY};
    for (size_t i = 0; i < sizeof below / sizeof below[0]; i++) {
        CHECK_MSG(fbits(nn_exp_fixed(below[i])) == fbits(lo), "exp(%g) not clamped to e^-87",
                  (double)below[i]);
        CHECK_MSG(fbits(nn_exp_fixed(above[i])) == fbits(hi), "exp(%g) not clamped to e^88",
                  (double)above[i]);
    }
    /* NaN: min(NaN, 88) is 88 with SSE min/max semantics, then max(88, -87)
     * is 88, in the scalar and the vector code alike: e^88. */
    CHECK(fbits(nn_exp_fixed(NAN)) == fbits(hi));
    /* SiLU: NaN in, NaN out; +inf -> +inf; past 88 it is x itself; at -88
     * it is -88 / (1 + e^88), below -88 it is -0 (the true x e^x is under
     * 6e-37 in magnitude), -inf included */
    CHECK(isnan(nn_silu_fixed(NAN)));
    CHECK(isnan(nn_silu_fixed(-NAN)));
    CHECK(nn_silu_fixed(INFINITY) == INFINITY);
    CHECK(fbits(nn_silu_fixed(-INFINITY)) == fbits(-0.0f));
    CHECK(fbits(nn_silu_fixed(-FLT_MAX)) == fbits(-0.0f));
    for (size_t i = 0; i < sizeof above / sizeof above[0]; i++)
        CHECK_MSG(nn_silu_fixed(above[i]) == above[i], "silu(%g) != x", (double)above[i]);
    CHECK(fbits(nn_silu_fixed(-88.0f)) == fbits(-88.0f / (1.0f + hi)));
    for (float x = -88.0f * 1.37f; x >= -1e6f; x *= 1.37f) {
        float sv = nn_silu_fixed(x);
        CHECK_MSG(fbits(sv) == fbits(-0.0f), "silu(%g) = %g", (double)x, (double)sv);
    }
    CHECK(nn_silu_fixed(0.0f) == 0.0f);
    CHECK(fbits(nn_silu_fixed(-0.0f)) == fbits(-0.0f));
    printf("exp/silu: %ld points of [-87, 88]: nn_exp_fixed max %.3f ulp (at %.7g), "
           "nn_silu_fixed max %.3f ulp (at %.7g), bounds %.2f / %.2f; clamps, inf and NaN ok "
           "(%.2f s)\n",
           pts, emax, (double)xe, smax, (double)xs, EXP_MAX_ULP, SILU_MAX_ULP, gt_clock_s() - t0);
}

/* Training's SiLU ops (silu_fwd to fp32 and to bf16, silu_bwd, in place
 * too) and LayerNorm's backward run vectorised loops per kernel: each must
 * equal the per-element or per-row rule (nn_silu, nn_silu_grad,
 * nn_bf16_from_f32, nn_ln_row_bwd) bit for bit, so the kernel changes the
 * speed and never the bits.  Inputs cover every region
 * of the fixed exponential (clamps, floor, NaN, infinities, signed zeros,
 * subnormals) at an odd width, on one thread and on all. */
static int same_or_both_nan(float a, float b)
{
    return fbits(a) == fbits(b) || (isnan(a) && isnan(b));
}

static void test_elementwise_kernels(void)
{
    static const float edge[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f,
                                 -87.0f, -87.0001f, -88.0f, -88.0001f, -100.0f, 87.0f, 88.0f,
                                 88.0001f, 100.0f, FLT_MAX, -FLT_MAX, 0.3465736f, -0.3465736f};
    enum { COLS = 301 };
    for (int big = 0; big < 2; big++) {
        int rows = big ? 131 : 7;   /* 131 x 301 = 39 431 elements: a parallel region */
        size_t n = (size_t)rows * COLS;
        float *x = xalloc(n * sizeof(float)), *dy = xalloc(n * sizeof(float)),
              *y = xalloc(n * sizeof(float)), *dx = xalloc(n * sizeof(float));
        uint16_t *yh = xalloc(n * sizeof(uint16_t));
        uint64_t st = 0x9e3779b97f4a7c15ull + (uint64_t)big;
        for (size_t q = 0; q < n; q++) {
            nnfx_next(&st);
            float u = (float)((st >> 40) / 16777216.0);
            x[q] = q % 7 == 3 ? edge[(q / 7) % (sizeof edge / sizeof edge[0])]
                              : (u - 0.5f) * (q % 5 == 0 ? 200.0f : 12.0f);
            dy[q] = (float)((st >> 20 & 0xfffff) / 1048576.0) - 0.5f;
        }
        for (int ki = 0; ki < NK; ki++) {
            nn_backend *b = KB[ki];
            if (!b || (ki == K_NATIVE && b == KB[K_AVX512]))
                continue;
            long bad_f = 0, bad_h = 0, bad_g = 0, bad_i = 0;
            MUST(nn_silu_fwd(b, nn_f32(y, rows, COLS), nn_f32(x, rows, COLS), &E));
            MUST(nn_silu_fwd(b, nn_tensor_make(yh, NN_BF16, rows, COLS), nn_f32(x, rows, COLS),
                             &E));
            MUST(nn_silu_bwd(b, nn_f32(dx, rows, COLS), nn_f32(dy, rows, COLS),
                             nn_f32(x, rows, COLS), &E));
            for (size_t q = 0; q < n; q++) {
                bad_f += !same_or_both_nan(y[q], nn_silu(x[q]));
                uint16_t h = nn_bf16_from_f32(nn_silu(x[q]));
                bad_h += yh[q] != h && !(isnan(nn_f32_from_bf16(yh[q])) &&
                                         isnan(nn_f32_from_bf16(h)));
                bad_g += !same_or_both_nan(dx[q], dy[q] * nn_silu_grad(x[q]));
            }
            /* in place: dx aliases dy */
            memcpy(dx, dy, n * sizeof(float));
            MUST(nn_silu_bwd(b, nn_f32(dx, rows, COLS), nn_f32(dx, rows, COLS),
                             nn_f32(x, rows, COLS), &E));
            for (size_t q = 0; q < n; q++)
                bad_i += !same_or_both_nan(dx[q], dy[q] * nn_silu_grad(x[q]));
            CHECK_MSG(bad_f + bad_h + bad_g + bad_i == 0,
                      "silu ops, %s kernel, %d x %d: %ld fp32, %ld bf16, %ld grad, %ld in-place "
                      "grad elements differ from the per-element rule",
                      KNAME[ki], rows, COLS, bad_f, bad_h, bad_g, bad_i);
        }
        free(x);
        free(dy);
        free(y);
        free(dx);
        free(yh);
    }
    /* LayerNorm's backward: dx per row (nn_ln_row_bwd, set and
     * accumulated) and gamma / beta added column by column in row order,
     * at a width with a ragged tail of lanes (301 = 18 x 16 + 13) */
    for (int big = 0; big < 2; big++) {
        int rows = big ? 131 : 5;
        size_t n = (size_t)rows * COLS;
        float *x = xalloc(n * sizeof(float)), *dy = xalloc(n * sizeof(float)),
              *dx = xalloc(n * sizeof(float)), *want = xalloc(n * sizeof(float));
        float mean[131], rstd[131], gam[COLS], dg[COLS], db[COLS], wdg[COLS], wdb[COLS];
        uint64_t st = 0x2545f4914f6cdd1dull + (uint64_t)big;
        for (size_t q = 0; q < n; q++) {
            nnfx_next(&st);
            x[q] = (float)((st >> 40) / 16777216.0) * 4.0f - 1.5f;
            dy[q] = (float)((st >> 16 & 0xffffff) / 16777216.0) - 0.5f;
        }
        for (int j = 0; j < COLS; j++)
            gam[j] = 0.5f + (float)j / COLS;
        for (int i = 0; i < rows; i++)
            nn_ln_row_stats(x + (size_t)i * COLS, COLS, 1e-5f, &mean[i], &rstd[i]);
        for (int acc = 0; acc < 2; acc++) {
            for (size_t q = 0; q < n; q++)
                want[q] = 0.25f * dy[q];
            for (int i = 0; i < rows; i++)
                nn_ln_row_bwd(x + (size_t)i * COLS, dy + (size_t)i * COLS, gam, mean[i],
                              rstd[i], COLS, want + (size_t)i * COLS, acc);
            for (int j = 0; j < COLS; j++) {
                wdg[j] = 0.125f;
                wdb[j] = -0.125f;
                for (int i = 0; i < rows; i++) {
                    size_t q = (size_t)i * COLS + (size_t)j;
                    wdg[j] += dy[q] * (x[q] - mean[i]) * rstd[i];
                    wdb[j] += dy[q];
                }
            }
            for (int ki = 0; ki < NK; ki++) {
                nn_backend *b = KB[ki];
                if (!b)
                    continue;
                for (size_t q = 0; q < n; q++)
                    dx[q] = 0.25f * dy[q];
                for (int j = 0; j < COLS; j++) {
                    dg[j] = 0.125f;
                    db[j] = -0.125f;
                }
                MUST(nn_ln_bwd(b, nn_f32(dx, rows, COLS), dg, db, nn_f32(dy, rows, COLS),
                               nn_f32(x, rows, COLS), mean, rstd, gam, acc, &E));
                long bad_x = 0, bad_p = 0;
                for (size_t q = 0; q < n; q++)
                    bad_x += fbits(dx[q]) != fbits(want[q]);
                for (int j = 0; j < COLS; j++)
                    bad_p += (fbits(dg[j]) != fbits(wdg[j])) + (fbits(db[j]) != fbits(wdb[j]));
                CHECK_MSG(bad_x + bad_p == 0,
                          "ln_bwd, %s kernel, %d x %d, accumulate %d: %ld dx and %ld gamma / "
                          "beta values differ from the per-row rule",
                          KNAME[ki], rows, COLS, acc, bad_x, bad_p);
            }
        }
        free(x);
        free(dy);
        free(dx);
        free(want);
    }
    CHECK(nn_silu(-88.5f) == nn_silu_fixed(-88.5f) && nn_silu(1.25f) == nn_silu_fixed(1.25f));
    printf("silu and layernorm-backward ops: equal the per-element and per-row rules under "
           "every kernel here\n");
}

/* ------------------------------------------------------------------------ */
/* 5. packing and refused input                                             */
/* ------------------------------------------------------------------------ */

/* y = f(x) for P with the weight packed from `w` (a view or a copy) on DEF
 * must equal the reference */
static int check_against_ref(nn_backend *b, const prob *P, nn_tensor w, const char *what)
{
    nn_packed pk;
    MUST(nn_pack_weight(b, w, &pk, &E));
    CHECK(pk.n == P->n && pk.k == P->k && pk.dtype == P->dt && pk.data != NULL);
    size_t ny = (size_t)P->M * P->n;
    float *dots = xalloc(ny * sizeof(float)), *want = xalloc(ny * sizeof(float)),
          *y = xalloc(ny * sizeof(float));
    ref_dots(P, dots);
    int bad = 0;
    for (int vi = 0; vi < NVAR; vi++) {
        const variant *v = &VARS[vi];
        for (size_t q = 0; q < ny; q++)
            want[q] = ref_epi(dots[q], v->bias ? P->bias : NULL, (int)(q % P->n), v->act, v->acc,
                              P->y0[q]);
        prefill(y, P->n, P->M, P, 0, v->acc);
        MUST(call_fixed(b, P, &pk, v, y, P->n, 0, P->M));
        long d = first_diff(y, want, ny);
        if (d >= 0 && !bad++)
            fprintf(stderr, "%s %s variant %d: 0x%08x, want 0x%08x at %ld\n", what,
                    nn_dtype_name(P->dt), vi, fbits(y[d]), fbits(want[d]), d);
    }
    CHECK_MSG(bad == 0, "%s %s: differs from the reference", what, nn_dtype_name(P->dt));
    nn_packed_free(b, &pk);
    free(dots);
    free(want);
    free(y);
    return bad;
}

/* expect GT_EINVAL with a message, y untouched */
#define REFUSED(call, y, ny, what)                                                      \
    do {                                                                                \
        E.message[0] = 0;                                                               \
        int rc_ = (call);                                                               \
        int untouched_ = 1;                                                             \
        for (size_t q_ = 0; q_ < (ny); q_++)                                            \
            untouched_ &= fbits((y)[q_]) == SENTINEL;                                   \
        CHECK_MSG(rc_ == GT_EINVAL && E.message[0] && untouched_,                       \
                  "%s: rc %d (want GT_EINVAL), message \"%s\", y %s", what, rc_,        \
                  E.message, untouched_ ? "untouched" : "written");                     \
        refused++;                                                                      \
    } while (0)

static void test_pack_and_bad_input(void)
{
    double t0 = gt_clock_s();
    int refused = 0;
    nn_backend *b = DEF;
    /* a weight that is a view: rows 2.., cols 3.. of a wider matrix whose
     * other elements are NaN (reading one would show) */
    for (int di = 0; di < 2; di++) {
        nn_dtype dt = di ? NN_BF16 : NN_F32;
        prob P;
        make_prob(&P, dt, 29, 13, 29, 31, 0);
        int R = P.n + 3, C = P.k + 7;
        size_t es = nn_dtype_size(dt);
        char *big = xalloc((size_t)R * C * es);
        for (size_t q = 0; q < (size_t)R * C; q++) {
            if (dt == NN_F32)
                ((float *)big)[q] = NAN;
            else
                ((uint16_t *)big)[q] = 0x7fc1;
        }
        for (int j = 0; j < P.n; j++)
            memcpy(big + (((size_t)(j + 2) * C) + 3) * es, (char *)P.w + (size_t)j * P.k * es,
                   (size_t)P.k * es);
        nn_tensor whole = nn_tensor_make(big, dt, R, C);
        nn_tensor view = nn_tensor_cols(nn_tensor_rows(whole, 2, P.n), 3, P.k);
        CHECK(view.ld == C && view.rows == P.n && view.cols == P.k);
        check_against_ref(b, &P, view, "packed from a view (ld > cols)");
        check_against_ref(b, &P, w_tensor(&P), "packed from a copy");
        /* the other kernels too (all must equal the same reference) */
        for (int ki = 0; ki < NK; ki++)
            if (kernel_runs(ki, dt) && KB[ki] != b)
                check_against_ref(KB[ki], &P, view, KNAME[ki]);
        free(big);
        free_prob(&P);
        /* n and k of 1 (bf16: a cut pair), and n = 1 or k = 1 alone */
        static const int NK1[][3] = {{5, 1, 1}, {3, 1, 2}, {13, 2, 1}, {1, 1, 3}, {14, 33, 1}};
        for (size_t c = 0; c < sizeof NK1 / sizeof NK1[0]; c++) {
            make_prob(&P, dt, NK1[c][0], NK1[c][1], NK1[c][2], NK1[c][2], 0);
            for (int ki = 0; ki < NK; ki++)
                if (kernel_runs(ki, dt))
                    check_against_ref(KB[ki], &P, w_tensor(&P), "small n, k");
            free_prob(&P);
        }
    }

    /* refused input: GT_EINVAL with a message, nothing written */
    prob P, Q;
    make_prob(&P, NN_F32, 4, 5, 6, 6, 0);
    make_prob(&Q, NN_BF16, 4, 5, 6, 6, 0);
    nn_packed pf, pb;
    MUST(nn_pack_weight(b, w_tensor(&P), &pf, &E));
    MUST(nn_pack_weight(b, w_tensor(&Q), &pb, &E));
    float y[4 * 5 + 8];
    uint16_t ybf[4 * 5] = {0};
    const size_t ny = sizeof y / sizeof y[0];
    for (size_t q = 0; q < ny; q++)
        y[q] = fromu(SENTINEL);
    nn_tensor Y = nn_f32(y, 4, 5);
    REFUSED(nn_linear_fixed(b, Y, x_rows(&Q, 0, 4), &pf, NULL, NN_ACT_NONE, 0, &E), y, ny,
            "bf16 x, fp32 weight");
    REFUSED(nn_linear_fixed(b, Y, x_rows(&P, 0, 4), &pb, NULL, NN_ACT_NONE, 0, &E), y, ny,
            "fp32 x, bf16 weight");
    REFUSED(nn_linear_fixed(b, nn_tensor_make(ybf, NN_BF16, 4, 5), x_rows(&P, 0, 4), &pf, NULL,
                            NN_ACT_NONE, 0, &E),
            y, ny, "bf16 y");
    nn_tensor xs = x_rows(&P, 0, 4);
    xs.cols = 5;
    REFUSED(nn_linear_fixed(b, Y, xs, &pf, NULL, NN_ACT_NONE, 0, &E), y, ny, "x cols != k");
    REFUSED(nn_linear_fixed(b, nn_f32(y, 4, 6), x_rows(&P, 0, 4), &pf, NULL, NN_ACT_NONE, 0, &E),
            y, ny, "y cols != n");
    REFUSED(nn_linear_fixed(b, nn_f32(y, 3, 5), x_rows(&P, 0, 4), &pf, NULL, NN_ACT_NONE, 0, &E),
            y, ny, "y rows != x rows");
    nn_tensor yl = Y;
    yl.ld = 4;
    REFUSED(nn_linear_fixed(b, yl, x_rows(&P, 0, 4), &pf, NULL, NN_ACT_NONE, 0, &E), y, ny,
            "y ld < cols");
    REFUSED(nn_linear_fixed(b, Y, x_rows(&P, 0, 4), &pf, NULL, (nn_act)2, 0, &E), y, ny,
            "activation 2");
    REFUSED(nn_linear_fixed(b, Y, x_rows(&P, 0, 4), &pf, NULL, (nn_act)-1, 0, &E), y, ny,
            "activation -1");
    REFUSED(nn_linear_fixed(b, Y, x_rows(&P, 0, 4), &pf, P.bias, NN_ACT_SILU, 1, &E), y, ny,
            "accumulate with SiLU");
    REFUSED(nn_linear_fixed(b, Y, x_rows(&P, 0, 4), NULL, NULL, NN_ACT_NONE, 0, &E), y, ny,
            "NULL packed weight");
    nn_packed empty = pf;
    empty.data = NULL;
    REFUSED(nn_linear_fixed(b, Y, x_rows(&P, 0, 4), &empty, NULL, NN_ACT_NONE, 0, &E), y, ny,
            "packed weight without data");
    REFUSED(nn_linear_fixed(NULL, Y, x_rows(&P, 0, 4), &pf, NULL, NN_ACT_NONE, 0, &E), y, ny,
            "NULL backend");
    {
        nn_packed bad;
        E.message[0] = 0;
        int rc = nn_pack_weight(b, nn_tensor_make(NULL, NN_F32, 3, 4), &bad, &E);
        CHECK_MSG(rc == GT_EINVAL && E.message[0], "pack of NULL data: %d", rc);
        nn_tensor wl = w_tensor(&P);
        wl.ld = 2;
        rc = nn_pack_weight(b, wl, &bad, &E);
        CHECK_MSG(rc == GT_EINVAL && E.message[0], "pack with ld < cols: %d", rc);
        CHECK(nn_pack_weight(b, w_tensor(&P), NULL, &E) == GT_EINVAL);
        refused += 3;
    }
    /* a weight packed by a backend with another kernel: refused both ways */
    int other = -1;
    const char *dk = cpu_backend_fixed_kernel(b, NN_F32);
    if (KB[K_AVX2] && strcmp(dk, "avx2"))
        other = K_AVX2;
    else if (KB[K_SCALAR] && strcmp(dk, "scalar"))
        other = K_SCALAR;
    if (other >= 0) {
        for (int di = 0; di < 2; di++) {
            prob *R = di ? &Q : &P;
            nn_packed po;
            MUST(nn_pack_weight(KB[other], w_tensor(R), &po, &E));
            REFUSED(nn_linear_fixed(b, Y, x_rows(R, 0, 4), &po, NULL, NN_ACT_NONE, 0, &E), y, ny,
                    "weight packed by another kernel");
            CHECK_MSG(strstr(E.message, "another kernel") != NULL, "message: %s", E.message);
            if (di == 0)
                printf("  (packed by %s, used by %s: \"%s\")\n", KNAME[other], dk, E.message);
            REFUSED(nn_linear_fixed(KB[other], Y, x_rows(R, 0, 4), di ? &pb : &pf, NULL,
                                    NN_ACT_NONE, 0, &E),
                    y, ny, "weight packed by the default kernel, used by another");
            /* refused even with no rows to compute */
            REFUSED(nn_linear_fixed(b, nn_f32(y, 0, R->n), x_rows(R, 0, 0), &po, NULL,
                                    NN_ACT_NONE, 0, &E),
                    y, ny, "weight packed by another kernel, m = 0");
            nn_packed_free(KB[other], &po);
        }
    } else {
        printf("note: only one fp32 kernel here: the cross-kernel refusal is not tested\n");
    }
    if (KB[K_NATIVE] && KB[K_AVX512]) {   /* VDPBF16PS layout vs the emulation's */
        nn_packed pe;
        MUST(nn_pack_weight(KB[K_AVX512], w_tensor(&Q), &pe, &E));
        REFUSED(nn_linear_fixed(KB[K_NATIVE], Y, x_rows(&Q, 0, 4), &pe, NULL, NN_ACT_NONE, 0, &E),
                y, ny, "emulated-bf16 weight on the native kernel");
        REFUSED(nn_linear_fixed(KB[K_AVX512], Y, x_rows(&Q, 0, 4), &pb, NULL, NN_ACT_NONE, 0, &E),
                y, ny, "native-bf16 weight on the emulation");
        nn_packed_free(KB[K_AVX512], &pe);
    }

    /* m = 0 and n = 0: no-ops, nothing written */
    for (int di = 0; di < 2; di++) {
        prob *R = di ? &Q : &P;
        nn_packed *pk = di ? &pb : &pf;
        int rc = nn_linear_fixed(b, nn_f32(y, 0, 5), x_rows(R, 0, 0), pk, R->bias, NN_ACT_SILU,
                                 0, &E);
        int untouched = 1;
        for (size_t q = 0; q < ny; q++)
            untouched &= fbits(y[q]) == SENTINEL;
        CHECK_MSG(rc == GT_OK && untouched, "m = 0 (%s): rc %d, y %s", nn_dtype_name(R->dt), rc,
                  untouched ? "untouched" : "written");
        nn_tensor x0 = nn_tensor_make(NULL, R->dt, 0, R->k);
        CHECK(nn_linear_fixed(b, nn_tensor_make(NULL, NN_F32, 0, 5), x0, pk, NULL, NN_ACT_NONE, 1,
                              &E) == GT_OK);
        nn_packed p0;
        MUST(nn_pack_weight(b, nn_tensor_make(R->w, R->dt, 0, R->k), &p0, &E));
        rc = nn_linear_fixed(b, nn_f32(y, 4, 0), x_rows(R, 0, 4), &p0, NULL, NN_ACT_NONE, 0, &E);
        untouched = 1;
        for (size_t q = 0; q < ny; q++)
            untouched &= fbits(y[q]) == SENTINEL;
        CHECK_MSG(rc == GT_OK && untouched, "n = 0 (%s): rc %d", nn_dtype_name(R->dt), rc);
        nn_packed_free(b, &p0);
    }
    nn_packed_free(b, &pf);
    nn_packed_free(b, &pb);
    free_prob(&P);
    free_prob(&Q);

    /* k = 0: y = act(bias) (+ old y), through the same epilogue */
    int k0bad = 0;
    for (int di = 0; di < 2; di++) {
        nn_dtype dt = di ? NN_BF16 : NN_F32;
        enum { M0 = 7, N0 = 21 };
        float bias[N0], y0[M0 * N0], yk[M0 * N0];
        for (int j = 0; j < N0; j++)
            bias[j] = j == 3 ? -0.0f : 8.0f * frand();
        for (int q = 0; q < M0 * N0; q++)
            y0[q] = frand();
        static float dummy[1];
        for (int ki = 0; ki < NK; ki++) {
            if (!kernel_runs(ki, dt))
                continue;
            nn_packed pk;
            MUST(nn_pack_weight(KB[ki], nn_tensor_make(dummy, dt, N0, 0), &pk, &E));
            CHECK(pk.k == 0 && pk.n == N0);
            for (int vi = 0; vi < NVAR; vi++) {
                const variant *v = &VARS[vi];
                for (int q = 0; q < M0 * N0; q++)
                    yk[q] = v->acc ? y0[q] : fromu(SENTINEL);
                MUST(nn_linear_fixed(KB[ki], nn_f32(yk, M0, N0), nn_tensor_make(dummy, dt, M0, 0),
                                     &pk, v->bias ? bias : NULL, v->act, v->acc, &E));
                for (int q = 0; q < M0 * N0; q++) {
                    float want =
                        ref_epi(0.0f, v->bias ? bias : NULL, q % N0, v->act, v->acc, y0[q]);
                    if (fbits(yk[q]) != fbits(want) && !k0bad++)
                        fprintf(stderr, "k = 0 %s %s variant %d: 0x%08x, want 0x%08x\n",
                                KNAME[ki], nn_dtype_name(dt), vi, fbits(yk[q]), fbits(want));
                }
            }
            nn_packed_free(KB[ki], &pk);
        }
    }
    CHECK_MSG(k0bad == 0, "k = 0 is not act(bias) (+ old y)");
    printf("packing and bad input: views with ld > cols, n/k of 1 equal to the reference on "
           "every kernel; %d bad calls refused with GT_EINVAL and a message, y untouched; m = 0 "
           "and n = 0 no-ops; k = 0 gives act(bias) (+ old y) (%.2f s)\n",
           refused, gt_clock_s() - t0);
}

/* ------------------------------------------------------------------------ */
/* 6. trunks                                                                */
/* ------------------------------------------------------------------------ */

enum { TB = 41, TPLAN = 64, TIN = 40, TOUT = 39 };

static void trunk_config(nn_trunk_config *c, nn_trunk_kind kind, nn_dtype prec)
{
    nnfx_trunk_config(c, kind, TIN, 32, TOUT);
    c->precision = prec;
}

/* created, initialised from a seed, biases and LayerNorm parameters moved
 * off their init (so the epilogue's bias matters), planned for 64 rows */
static nn_trunk *make_trunk(nn_backend *b, nn_trunk_kind kind, nn_dtype prec)
{
    nn_trunk_config c;
    trunk_config(&c, kind, prec);
    nn_trunk *t = NULL;
    MUST(nn_trunk_create(b, &c, &t, &E));
    MUST(nn_trunk_init(t, 20261203, 1.0f, &E));
    nn_params *p = nn_trunk_params(t);
    uint32_t h = 12345;
    for (int v = 0; v < p->n_views; v++)
        if (!p->views[v].decay)
            for (int i = 0; i < p->views[v].rows * p->views[v].cols; i++) {
                h = h * 1664525u + 1013904223u;
                p->value[p->views[v].offset + i] += 0.3f * ((float)(h >> 8) / 16777216.0f - 0.5f);
            }
    MUST(nn_params_sync_bf16(p, &E));
    MUST(nn_trunk_plan(t, TPLAN, &E));
    return t;
}

static void forward_rows(nn_trunk *t, const float *x, const float *cond, float *out, int r0,
                         int m)
{
    MUST(nn_trunk_forward(t, nn_f32((float *)x + (size_t)r0 * TIN, m, TIN),
                          nn_f32((float *)cond + (size_t)r0 * 2, m, 2),
                          nn_f32(out + (size_t)r0 * TOUT, m, TOUT), 0, &E));
}

static void test_trunks(void)
{
    double t0 = gt_clock_s();
    float *x = xalloc((size_t)TB * TIN * sizeof(float));
    float *cond = xalloc((size_t)TB * 2 * sizeof(float));
    for (int q = 0; q < TB * TIN; q++)
        x[q] = frand();
    for (int q = 0; q < TB * 2; q++)
        cond[q] = 2.0f * frand();
    size_t no = (size_t)TB * TOUT;
    float *lib = xalloc(no * sizeof(float)), *full = xalloc(no * sizeof(float)),
          *part = xalloc(no * sizeof(float)), *other = xalloc(no * sizeof(float));
    float *full_f32[2] = {xalloc(no * sizeof(float)), xalloc(no * sizeof(float))};
    long chunk_calls = 0;
    int kernels = 0;
    for (int kind = 0; kind < 2; kind++)
        for (int di = 0; di < 2; di++) {
            nn_dtype prec = di ? NN_BF16 : NN_F32;
            const char *what = kind ? (di ? "routed bf16" : "routed fp32")
                                    : (di ? "expert bf16" : "expert fp32");
            nn_trunk *t = make_trunk(DEF, (nn_trunk_kind)kind, prec);
            forward_rows(t, x, cond, lib, 0, TB);   /* the library (oneDNN / sgemm) */
            CHECK(!nn_trunk_is_packed(t));
            MUST(nn_trunk_pack(t, &E));
            CHECK(nn_trunk_is_packed(t));
            forward_rows(t, x, cond, full, 0, TB);
            if (kind) {   /* the routing must mix rows for this to mean much */
                nn_router_stats st;
                MUST(nn_trunk_router_stats(t, &st, &E));
                int used = 0;
                for (int e = 0; e < st.n_experts; e++)
                    used += st.load[e] > 0;
                CHECK_MSG(used >= 3, "%s: only %d experts used by %d rows", what, used, TB);
            }
            /* close to the library: fp32 within 1e-4 (both are fp32 dot
             * products of length <= 48 in other orders; the difference is
             * a few ulp amplified by two LayerNorms); bf16 loosely (the
             * activations are rounded to bf16, 2^-8, at every layer) */
            double tol = di ? 3e-2 : 1e-4, mx = 0.0, dmax = 0.0;
            for (size_t q = 0; q < no; q++)
                mx = fabs(lib[q]) > mx ? fabs(lib[q]) : mx;
            for (size_t q = 0; q < no; q++)
                dmax = fabs(full[q] - lib[q]) > dmax ? fabs(full[q] - lib[q]) : dmax;
            CHECK_MSG(mx > 0 && dmax <= tol * mx, "%s: packed vs library max diff %g, max |out| %g",
                      what, dmax, mx);
            /* every row alone */
            for (int i = 0; i < TB; i++)
                forward_rows(t, x, cond, part, i, 1);
            chunk_calls += TB;
            long d = first_diff(part, full, no);
            CHECK_MSG(d < 0, "%s: row %ld alone differs from the batch of %d (col %ld)", what,
                      d / TOUT, TB, d % TOUT);
            /* chunks of 1, 3, 8, 20 tiling the rows, from several phases,
             * and each size at the start, an odd offset and the end */
            static const int SZ[] = {1, 3, 8, 20};
            for (int phase = 0; phase < 4; phase++) {
                memset(part, 0, no * sizeof(float));
                for (int r = 0, c = phase; r < TB; c++) {
                    int m = SZ[c % 4] < TB - r ? SZ[c % 4] : TB - r;
                    forward_rows(t, x, cond, part, r, m);
                    chunk_calls++;
                    r += m;
                }
                d = first_diff(part, full, no);
                CHECK_MSG(d < 0, "%s: chunks (phase %d) differ from the batch at row %ld col %ld",
                          what, phase, d / TOUT, d % TOUT);
            }
            for (int si = 0; si < 4; si++) {
                int m = SZ[si], at[3] = {0, 7, TB - m};
                for (int a = 0; a < 3; a++) {
                    forward_rows(t, x, cond, part, at[a], m);
                    chunk_calls++;
                    d = first_diff(part + (size_t)at[a] * TOUT, full + (size_t)at[a] * TOUT,
                                   (size_t)m * TOUT);
                    CHECK_MSG(d < 0, "%s: %d rows at %d differ from the batch", what, m, at[a]);
                }
            }
            /* two threads: same bytes */
            int th0 = omp_get_max_threads();
            for (int th = 1; th <= 2; th++) {
                omp_set_num_threads(th);
                forward_rows(t, x, cond, part, 0, TB);
                CHECK_MSG(first_diff(part, full, no) < 0, "%s: %d thread(s) differ", what, th);
            }
            omp_set_num_threads(th0);
            /* every other kernel: the same trunk, the same bytes */
            for (int ki = 0; ki < NK; ki++) {
                if (!kernel_runs(ki, prec) || KB[ki] == DEF)
                    continue;
                nn_trunk *u = make_trunk(KB[ki], (nn_trunk_kind)kind, prec);
                MUST(nn_trunk_pack(u, &E));
                forward_rows(u, x, cond, other, 0, TB);
                d = first_diff(other, full, no);
                CHECK_MSG(d < 0, "%s on %s differs from %s at row %ld col %ld", what, KNAME[ki],
                          cpu_backend_fixed_kernel(DEF, prec), d / TOUT, d % TOUT);
                kernels += kind == 0 && di == 0;
                nn_trunk_destroy(u);
            }
            /* precision switches */
            if (!di) {
                memcpy(full_f32[kind], full, no * sizeof(float));
                MUST(nn_trunk_set_precision(t, NN_F32, &E));
                CHECK_MSG(nn_trunk_is_packed(t), "%s: set_precision to the same dtype dropped the "
                                                 "pack", what);
                CHECK(nn_trunk_set_precision(t, NN_BF16, &E) == GT_EINVAL);
                CHECK_MSG(nn_trunk_is_packed(t), "%s: a refused set_precision dropped the pack",
                          what);
            } else {
                MUST(nn_trunk_set_precision(t, NN_F32, &E));
                CHECK_MSG(!nn_trunk_is_packed(t), "%s: set_precision(fp32) kept the bf16 pack",
                          what);
                /* packed again in fp32: the master weights equal the fp32
                 * trunk's (same seed), so the same bytes */
                MUST(nn_trunk_pack(t, &E));
                forward_rows(t, x, cond, part, 0, TB);
                d = first_diff(part, full_f32[kind], no);
                CHECK_MSG(d < 0, "%s packed in fp32 differs from the fp32 trunk (row %ld)", what,
                          d / TOUT);
                MUST(nn_trunk_set_precision(t, NN_BF16, &E));
                CHECK_MSG(!nn_trunk_is_packed(t), "%s: set_precision(bf16) kept the fp32 pack",
                          what);
            }
            nn_trunk_unpack(t);
            CHECK(!nn_trunk_is_packed(t));
            nn_trunk_destroy(t);
        }
    free(x);
    free(cond);
    free(lib);
    free(full);
    free(part);
    free(other);
    free(full_f32[0]);
    free(full_f32[1]);
    printf("trunks: expert and routed, fp32 and bf16: %d rows forwarded alone and %ld "
           "forwards in chunks of 1/3/8/20 equal the 41-row batch's bytes, on 1 and 2 threads "
           "and on %d other backends (one per kernel); set_precision to another dtype drops "
           "the pack; packed fp32 within 1e-4 of the library (%.2f s)\n",
           TB, chunk_calls, kernels, gt_clock_s() - t0);
}

int main(void)
{
    double t0 = gt_clock_s();
    open_kernels();
    size_t live0 = DEF->bytes_live;
    test_row_invariance();
    test_same_bits_across_isas();
    test_reference();
    test_exp_silu();
    test_elementwise_kernels();
    test_pack_and_bad_input();
    test_trunks();
    CHECK_MSG(DEF->bytes_live == live0, "bytes_live %zu -> %zu: a packed weight leaked", live0,
              DEF->bytes_live);
    for (int ki = 0; ki < NK; ki++)
        if (KB[ki] && KB[ki] != DEF)
            nn_backend_close(KB[ki]);
    nn_backend_close(DEF);
    free(env_kernel);
    free(env_bf16);
    printf("total %.2f s\n", gt_clock_s() - t0);
    return check_finish();
}
