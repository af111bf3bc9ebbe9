/* cpu_fixed.c: the fixed-order linear layer of the CPU backend.  What it
 * computes, and why, is in cpu_fixed.h; this file is how.
 *
 * Layout.  A packed weight is a row of column panels, NR columns each
 * (zero-padded past n), each panel k-major:
 *   fp32                 panel[p][c]      = W[j0 + c][p]
 *   bf16, emulated       panel[p][c]      = W[j0 + c][p ^ 1] widened to fp32
 *                        (pairs swapped, k padded to even: the fp32 kernel
 *                        then runs the odd element of each pair first)
 *   bf16, VDPBF16PS      panel[q][c]      = W[j0+c][2q] | W[j0+c][2q+1] << 16
 * Rows of x are packed per block of MR rows into the same k-major order
 * (a short last block repeats its first row), so one microkernel shape
 * serves every row, and bf16 rows are widened (emulation) on the way.
 *
 * Loops (per thread): k in blocks of KC (partial sums are parked in y as
 * fp32, which is exact, so blocking does not change the order), panels in
 * groups that stay in L2, row blocks, panels.  The epilogue (bias, SiLU,
 * accumulate) runs on the registers after the last k block.
 *
 * Compiled with -ffp-contract=off: every fused multiply-add here is an
 * explicit one. */
#include "cpu_fixed.h"
#include "cpu_internal.h"

#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "nn_math.h"

/* k block (even, so bf16 pairs never straddle two blocks) */
#define FIX_KC 2048
/* bytes of weight panels a thread keeps hot across its row blocks, and of
 * packed rows it keeps hot across the panels (both within a 1 MB L2) */
#define FIX_PANEL_BYTES (384 * 1024)
#define FIX_ROW_BYTES (256 * 1024)

/* microkernel shapes per instruction set */
#define S_MR 4
#define S_NR 16
#define A2_MR 6
#define A2_NR 16
#define A5_MR 12
#define A5_NR 32

/* packed-weight layout tags: isa * 4 + format */
enum { FMT_F32 = 0, FMT_BF16_EMU = 1, FMT_BF16_DP = 2 };

#define MXCSR_FTZ_DAZ 0x8040u
#define MXCSR_ROUNDING 0x6000u

/* The kernels run in a known floating-point state whatever the caller's
 * thread has set: round to nearest, denormals kept, except while a bf16
 * emulation accumulates (flushed, as VDPBF16PS does).  Returns the
 * caller's MXCSR, to restore. */
static inline unsigned fix_csr_enter(int ftz)
{
    unsigned csr = _mm_getcsr();
    _mm_setcsr((csr & ~(MXCSR_FTZ_DAZ | MXCSR_ROUNDING)) | (ftz ? MXCSR_FTZ_DAZ : 0u));
    return csr;
}

/* After accumulating: the epilogue's state (nearest, no flushing). */
static inline void fix_csr_epilogue(unsigned csr)
{
    _mm_setcsr(csr & ~(MXCSR_FTZ_DAZ | MXCSR_ROUNDING));
}

typedef struct fix_epi {
    const float *bias;   /* at the panel's first column, or NULL */
    int silu;
    int accumulate;
    int partial;         /* start from the partial sums parked in y */
    int final;           /* apply the epilogue (else park the partial sums) */
    int ftz;             /* bf16 emulation: flush denormals while multiplying */
} fix_epi;

/* y rows of one block: MR pointers at the panel's first column; rows past
 * the real ones point at the first (read for partial sums, never written) */
typedef struct fix_rows {
    float *y[A5_MR > A2_MR ? A5_MR : A2_MR];
    int mr;              /* real rows */
    int nr;              /* real columns of the panel */
} fix_rows;

static int isa_mr(cpu_isa isa)
{
    return isa == CPU_ISA_AVX512 ? A5_MR : isa == CPU_ISA_AVX2 ? A2_MR : S_MR;
}

static int isa_nr(cpu_isa isa)
{
    return isa == CPU_ISA_AVX512 ? A5_NR : isa == CPU_ISA_AVX2 ? A2_NR : S_NR;
}

/* ------------------------------------------------------------------------ */
/* scalar kernel: the reference the vector kernels must equal               */
/* ------------------------------------------------------------------------ */

static void epi_scalar(float acc, float *y, const fix_epi *e, int c)
{
    if (!e->final) {
        *y = acc;
        return;
    }
    float v = acc;
    if (e->bias)
        v = v + e->bias[c];
    if (e->silu)
        v = nn_silu_fixed(v);
    if (e->accumulate)
        v = *y + v;
    *y = v;
}

static void kern_scalar(int kc, const float *ap, const float *bp, const fix_rows *rw,
                        const fix_epi *e)
{
    float c[S_MR][S_NR];
    for (int r = 0; r < S_MR; r++)
        for (int j = 0; j < S_NR; j++)
            c[r][j] = e->partial && j < rw->nr ? rw->y[r][j] : 0.0f;
    unsigned csr = fix_csr_enter(e->ftz);
    for (int p = 0; p < kc; p++)
        for (int r = 0; r < S_MR; r++)
            for (int j = 0; j < S_NR; j++)
                c[r][j] = fmaf(ap[p * S_MR + r], bp[p * S_NR + j], c[r][j]);
    fix_csr_epilogue(csr);
    for (int r = 0; r < rw->mr; r++)
        for (int j = 0; j < rw->nr; j++)
            epi_scalar(c[r][j], rw->y[r] + j, e, j);
    _mm_setcsr(csr);
}

/* ------------------------------------------------------------------------ */
/* AVX2 + FMA: 6 rows x 16 columns                                          */
/* ------------------------------------------------------------------------ */

#define TGT_AVX2 __attribute__((target("avx2,fma")))

/* The vector form of nn_exp_fixed (nn_math.h), lane for lane the same
 * operations in the same order, as a function on W-bit vectors (W = 256 or
 * 512: the intrinsics' names differ only in it). */
#define FIX_DEFINE_EXP(name, target, W)                                              \
    target static inline __m##W name(__m##W x)                                       \
    {                                                                                \
        x = _mm##W##_min_ps(x, _mm##W##_set1_ps(NN_EXP_FIXED_HI));                   \
        x = _mm##W##_max_ps(x, _mm##W##_set1_ps(NN_EXP_FIXED_LO));                   \
        __m##W n = _mm##W##_mul_ps(x, _mm##W##_set1_ps(NN_EXP_FIXED_LOG2E));         \
        n = _mm##W##_add_ps(n, _mm##W##_set1_ps(NN_EXP_FIXED_SHIFT));                \
        n = _mm##W##_sub_ps(n, _mm##W##_set1_ps(NN_EXP_FIXED_SHIFT));                \
        __m##W r = _mm##W##_fmadd_ps(n, _mm##W##_set1_ps(-NN_EXP_FIXED_LN2_HI), x);  \
        r = _mm##W##_fmadd_ps(n, _mm##W##_set1_ps(-NN_EXP_FIXED_LN2_LO), r);         \
        __m##W p = _mm##W##_set1_ps(NN_EXP_FIXED_P5);                                \
        p = _mm##W##_fmadd_ps(p, r, _mm##W##_set1_ps(NN_EXP_FIXED_P4));              \
        p = _mm##W##_fmadd_ps(p, r, _mm##W##_set1_ps(NN_EXP_FIXED_P3));              \
        p = _mm##W##_fmadd_ps(p, r, _mm##W##_set1_ps(NN_EXP_FIXED_P2));              \
        p = _mm##W##_fmadd_ps(p, r, _mm##W##_set1_ps(NN_EXP_FIXED_P1));              \
        p = _mm##W##_fmadd_ps(p, r, _mm##W##_set1_ps(NN_EXP_FIXED_P0));              \
        __m##W y = _mm##W##_fmadd_ps(p, _mm##W##_mul_ps(r, r), r);                   \
        y = _mm##W##_add_ps(y, _mm##W##_set1_ps(1.0f));                              \
        __m##W##i ei =                                                               \
            _mm##W##_add_epi32(_mm##W##_cvttps_epi32(n), _mm##W##_set1_epi32(127));  \
        return _mm##W##_mul_ps(y, _mm##W##_castsi##W##_ps(_mm##W##_slli_epi32(ei, 23))); \
    }

FIX_DEFINE_EXP(exp_avx2, TGT_AVX2, 256)

TGT_AVX2 static inline __m256 silu_avx2(__m256 v)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 ex = exp_avx2(_mm256_xor_ps(v, sign));
    __m256 s = _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), ex));
    __m256 low = _mm256_cmp_ps(v, _mm256_set1_ps(NN_SILU_FIXED_FLOOR), _CMP_LT_OQ);
    return _mm256_blendv_ps(s, sign, low);
}

/* lanes [0, n) of 8 */
TGT_AVX2 static inline __m256i mask_avx2(int n)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

TGT_AVX2 static inline void epi_avx2(__m256 acc, float *y, const float *bias, int nlanes,
                                     const fix_epi *e)
{
    if (nlanes <= 0)
        return;
    __m256i m = mask_avx2(nlanes);
    if (e->final) {
        if (bias)
            acc = _mm256_add_ps(acc, _mm256_maskload_ps(bias, m));
        if (e->silu)
            acc = silu_avx2(acc);
        if (e->accumulate)
            acc = _mm256_add_ps(_mm256_maskload_ps(y, m), acc);
    }
    _mm256_maskstore_ps(y, m, acc);
}

TGT_AVX2 static void kern_avx2(int kc, const float *ap, const float *bp, const fix_rows *rw,
                               const fix_epi *e)
{
    __m256 c[A2_MR][2];
    int nr = rw->nr;
    __m256i m0 = mask_avx2(nr), m1 = mask_avx2(nr - 8);
#pragma GCC unroll 6
    for (int r = 0; r < A2_MR; r++) {
        if (e->partial) {
            c[r][0] = _mm256_maskload_ps(rw->y[r], m0);
            c[r][1] = _mm256_maskload_ps(rw->y[r] + 8, m1);
        } else {
            c[r][0] = _mm256_setzero_ps();
            c[r][1] = _mm256_setzero_ps();
        }
    }
    unsigned csr = fix_csr_enter(e->ftz);
    for (int p = 0; p < kc; p++) {
        __m256 b0 = _mm256_load_ps(bp + (size_t)p * A2_NR);
        __m256 b1 = _mm256_load_ps(bp + (size_t)p * A2_NR + 8);
        const float *a = ap + (size_t)p * A2_MR;
#pragma GCC unroll 6
        for (int r = 0; r < A2_MR; r++) {
            __m256 av = _mm256_broadcast_ss(a + r);
            c[r][0] = _mm256_fmadd_ps(av, b0, c[r][0]);
            c[r][1] = _mm256_fmadd_ps(av, b1, c[r][1]);
        }
    }
    fix_csr_epilogue(csr);
    /* constant indices only (an unrolled loop), so c stays in registers */
    const float *bias = e->bias;
#pragma GCC unroll 6
    for (int r = 0; r < A2_MR; r++) {
        if (r < rw->mr) {
            epi_avx2(c[r][0], rw->y[r], bias, nr, e);
            epi_avx2(c[r][1], rw->y[r] + 8, bias ? bias + 8 : NULL, nr - 8, e);
        }
    }
    _mm_setcsr(csr);
}

/* ------------------------------------------------------------------------ */
/* AVX-512: 12 rows x 32 columns, fp32 (and the bf16 emulation) or VDPBF16PS */
/* ------------------------------------------------------------------------ */

#define TGT_AVX512 __attribute__((target("avx512f")))
#define TGT_AVX512BF16 __attribute__((target("avx512f,avx512bf16")))

FIX_DEFINE_EXP(exp_avx512, TGT_AVX512, 512)

TGT_AVX512 static inline __m512 silu_avx512(__m512 v)
{
    __m512 ex = exp_avx512(_mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u))));
    __m512 s = _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), ex));
    __mmask16 low = _mm512_cmp_ps_mask(v, _mm512_set1_ps(NN_SILU_FIXED_FLOOR), _CMP_LT_OQ);
    return _mm512_mask_mov_ps(s, low, _mm512_set1_ps(-0.0f));
}

TGT_AVX512 static inline __mmask16 mask_avx512(int n)
{
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

TGT_AVX512 static inline void epi_avx512(__m512 acc, float *y, const float *bias, int nlanes,
                                         const fix_epi *e)
{
    __mmask16 m = mask_avx512(nlanes);
    if (!m)
        return;
    if (e->final) {
        if (bias)
            acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, bias));
        if (e->silu)
            acc = silu_avx512(acc);
        if (e->accumulate)
            acc = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y), acc);
    }
    _mm512_mask_storeu_ps(y, m, acc);
}

#define A5_INIT(c, rw, e)                                                          \
    do {                                                                           \
        __mmask16 m0_ = mask_avx512((rw)->nr), m1_ = mask_avx512((rw)->nr - 16);   \
        _Pragma("GCC unroll 12") for (int r = 0; r < A5_MR; r++)                   \
        {                                                                          \
            if ((e)->partial) {                                                    \
                c[r][0] = _mm512_maskz_loadu_ps(m0_, (rw)->y[r]);                  \
                c[r][1] = _mm512_maskz_loadu_ps(m1_, (rw)->y[r] + 16);             \
            } else {                                                               \
                c[r][0] = _mm512_setzero_ps();                                     \
                c[r][1] = _mm512_setzero_ps();                                     \
            }                                                                      \
        }                                                                          \
    } while (0)

#define A5_STORE(c, rw, e)                                                         \
    do {                                                                           \
        const float *bias_ = (e)->bias;                                            \
        _Pragma("GCC unroll 12") for (int r = 0; r < A5_MR; r++)                   \
        {                                                                          \
            if (r < (rw)->mr) {                                                    \
                epi_avx512(c[r][0], (rw)->y[r], bias_, (rw)->nr, e);               \
                epi_avx512(c[r][1], (rw)->y[r] + 16, bias_ ? bias_ + 16 : NULL,    \
                           (rw)->nr - 16, e);                                      \
            }                                                                      \
        }                                                                          \
    } while (0)

TGT_AVX512 static void kern_avx512(int kc, const float *ap, const float *bp,
                                   const fix_rows *rw, const fix_epi *e)
{
    __m512 c[A5_MR][2];
    A5_INIT(c, rw, e);
    unsigned csr = fix_csr_enter(e->ftz);
    for (int p = 0; p < kc; p++) {
        __m512 b0 = _mm512_load_ps(bp + (size_t)p * A5_NR);
        __m512 b1 = _mm512_load_ps(bp + (size_t)p * A5_NR + 16);
        const float *a = ap + (size_t)p * A5_MR;
#pragma GCC unroll 12
        for (int r = 0; r < A5_MR; r++) {
            __m512 av = _mm512_set1_ps(a[r]);
            c[r][0] = _mm512_fmadd_ps(av, b0, c[r][0]);
            c[r][1] = _mm512_fmadd_ps(av, b1, c[r][1]);
        }
    }
    fix_csr_epilogue(csr);
    A5_STORE(c, rw, e);
    _mm_setcsr(csr);
}

/* kq pairs; ap: MR uint32 pairs per q; bp: NR uint32 pairs per q */
TGT_AVX512BF16 static void kern_avx512bf16(int kq, const uint32_t *ap, const uint32_t *bp,
                                           const fix_rows *rw, const fix_epi *e)
{
    __m512 c[A5_MR][2];
    A5_INIT(c, rw, e);
    unsigned csr = fix_csr_enter(0);   /* VDPBF16PS ignores it; the epilogue does not */
    for (int q = 0; q < kq; q++) {
        __m512bh b0 = (__m512bh)_mm512_load_si512(bp + (size_t)q * A5_NR);
        __m512bh b1 = (__m512bh)_mm512_load_si512(bp + (size_t)q * A5_NR + 16);
        const uint32_t *a = ap + (size_t)q * A5_MR;
#pragma GCC unroll 12
        for (int r = 0; r < A5_MR; r++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r]);
            c[r][0] = _mm512_dpbf16_ps(c[r][0], av, b0);
            c[r][1] = _mm512_dpbf16_ps(c[r][1], av, b1);
        }
    }
    A5_STORE(c, rw, e);
    _mm_setcsr(csr);
}

/* ------------------------------------------------------------------------ */
/* selection, the VDPBF16PS check, packing                                  */
/* ------------------------------------------------------------------------ */

static int fmt_of(const cpu_fixed *f, nn_dtype dt)
{
    if (dt == NN_F32)
        return FMT_F32;
    return f->bf16_native ? FMT_BF16_DP : FMT_BF16_EMU;
}

int cpu_fixed_layout(const cpu_fixed *f, nn_dtype dt)
{
    return (int)f->isa * 4 + fmt_of(f, dt);
}

const char *cpu_fixed_isa_name(const cpu_fixed *f, nn_dtype dt)
{
    if (dt == NN_BF16 && f->bf16_native)
        return "avx512bf16";
    return f->isa == CPU_ISA_AVX512 ? "avx512" : f->isa == CPU_ISA_AVX2 ? "avx2" : "scalar";
}

/* k as packed: bf16 pads to even */
static int packed_k(int k, nn_dtype dt)
{
    return dt == NN_BF16 ? (k + 1) & ~1 : k;
}

size_t cpu_fixed_pack_bytes(const cpu_fixed *f, int n, int k, nn_dtype dt)
{
    size_t nr = (size_t)isa_nr(f->isa), panels = ((size_t)n + nr - 1) / nr;
    size_t kp = (size_t)packed_k(k, dt);
    /* fp32 and the emulation hold floats; VDPBF16PS holds bf16 (2 bytes) */
    size_t elem = fmt_of(f, dt) == FMT_BF16_DP ? 2 : 4;
    return panels * nr * kp * elem;
}

static float w_at(nn_tensor w, int j, int p)
{
    if (j >= w.rows || p >= w.cols)
        return 0.0f;
    if (w.dtype == NN_BF16)
        return nn_f32_from_bf16(((const uint16_t *)w.data)[(size_t)j * w.ld + p]);
    return ((const float *)w.data)[(size_t)j * w.ld + p];
}

static uint16_t wh_at(nn_tensor w, int j, int p)
{
    if (j >= w.rows || p >= w.cols)
        return 0;
    return ((const uint16_t *)w.data)[(size_t)j * w.ld + p];
}

void cpu_fixed_pack(const cpu_fixed *f, void *dst, nn_tensor w)
{
    const int nr = isa_nr(f->isa), n = w.rows, kp = packed_k(w.cols, w.dtype);
    const int panels = (n + nr - 1) / nr, fmt = fmt_of(f, w.dtype);
#pragma omp parallel for schedule(static) if ((long long)n * kp > 65536)
    for (int pn = 0; pn < panels; pn++) {
        int j0 = pn * nr;
        if (fmt == FMT_BF16_DP) {
            uint32_t *d = (uint32_t *)dst + (size_t)pn * nr * (kp / 2);
            for (int q = 0; q < kp / 2; q++)
                for (int c = 0; c < nr; c++)
                    d[(size_t)q * nr + c] = (uint32_t)wh_at(w, j0 + c, 2 * q) |
                                            (uint32_t)wh_at(w, j0 + c, 2 * q + 1) << 16;
        } else {
            float *d = (float *)dst + (size_t)pn * nr * kp;
            int swap = fmt == FMT_BF16_EMU;
            for (int p = 0; p < kp; p++)
                for (int c = 0; c < nr; c++)
                    d[(size_t)p * nr + c] = w_at(w, j0 + c, swap ? p ^ 1 : p);
        }
    }
}

/* Packs rows [i0, i0 + MR) of x (past m: row i0 again), columns [k0, k0 +
 * kc) into the k-major block the kernels read. */
static void pack_rows(const cpu_fixed *f, int fmt, nn_tensor x, int i0, int k0, int kc,
                      void *dst)
{
    const int mr = isa_mr(f->isa), m = x.rows, k = x.cols;
    /* k outer: sequential writes, mr sequential read streams */
    const void *rows[A5_MR > A2_MR ? A5_MR : A2_MR];
    const size_t esz = fmt == FMT_F32 ? 4 : 2;
    for (int r = 0; r < mr; r++)
        rows[r] = (const char *)x.data + (size_t)(i0 + r < m ? i0 + r : i0) * x.ld * esz;
    if (fmt == FMT_F32) {
        float *d = (float *)dst;
        for (int p = 0; p < kc; p++, d += mr)
            for (int r = 0; r < mr; r++)
                d[r] = ((const float *)rows[r])[k0 + p];
        return;
    }
    /* bf16: the pairs wholly inside k, then the one that k may cut (the
     * element past k is 0, as the weight panels' padding) */
    int full = (k - k0) / 2 < kc / 2 ? (k - k0) / 2 : kc / 2;
    if (fmt == FMT_BF16_DP) {
        uint32_t *d = (uint32_t *)dst;
        for (int q = 0; q < kc / 2; q++, d += mr)
            for (int r = 0; r < mr; r++) {
                const uint16_t *src = (const uint16_t *)rows[r] + k0 + 2 * q;
                uint32_t pair;
                if (q < full)
                    memcpy(&pair, src, sizeof pair);
                else
                    pair = k0 + 2 * q < k ? src[0] : 0;
                d[r] = pair;
            }
        return;
    }
    /* the emulation: widened, each pair's odd element first */
    float *d = (float *)dst;
    for (int q = 0; q < kc / 2; q++, d += 2 * mr)
        for (int r = 0; r < mr; r++) {
            const uint16_t *src = (const uint16_t *)rows[r] + k0 + 2 * q;
            uint16_t lo = k0 + 2 * q < k ? src[0] : 0, hi = q < full ? src[1] : 0;
            d[r] = nn_f32_from_bf16(hi);
            d[mr + r] = nn_f32_from_bf16(lo);
        }
}

static void run_kernel(const cpu_fixed *f, int fmt, int kc, const void *ap, const void *bp,
                       const fix_rows *rw, const fix_epi *e)
{
    if (fmt == FMT_BF16_DP) {
        kern_avx512bf16(kc / 2, (const uint32_t *)ap, (const uint32_t *)bp, rw, e);
        return;
    }
    switch (f->isa) {
    case CPU_ISA_AVX512:
        kern_avx512(kc, (const float *)ap, (const float *)bp, rw, e);
        break;
    case CPU_ISA_AVX2:
        kern_avx2(kc, (const float *)ap, (const float *)bp, rw, e);
        break;
    default:
        kern_scalar(kc, (const float *)ap, (const float *)bp, rw, e);
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* the product                                                              */
/* ------------------------------------------------------------------------ */

typedef struct fix_job {
    const cpu_fixed *f;
    int fmt;
    nn_tensor y, x;
    const nn_packed *w;
    const float *bias;
    nn_act act;
    int accumulate;
    int kp;              /* k as packed */
    int kc_max;          /* k block */
    int chunk;           /* row blocks packed at once */
    int row_blocks, panels;
} fix_job;

/* One thread's share: row blocks [rb0, rb1) x panels [p0, p1).  apack
 * holds FIX_MC_BLOCKS packed row blocks of one k block. */
static void fix_share(const fix_job *j, int rb0, int rb1, int p0, int p1, void *apack)
{
    const cpu_fixed *f = j->f;
    const int mr = isa_mr(f->isa), nr = isa_nr(f->isa), n = j->y.cols, m = j->y.rows;
    const size_t esz = j->fmt == FMT_BF16_DP ? 2 : 4;
    const size_t panel_elems = (size_t)nr * (size_t)j->kp;
    const size_t block_elems = (size_t)mr * (size_t)j->kc_max;   /* one packed row block */
    size_t panel_block_bytes = (size_t)j->kc_max * nr * esz;
    int group = (int)(FIX_PANEL_BYTES / (panel_block_bytes ? panel_block_bytes : 1));
    if (group < 1)
        group = 1;
    for (int k0 = 0; k0 < j->kp; k0 += j->kc_max) {
        int kc = j->kp - k0 < j->kc_max ? j->kp - k0 : j->kc_max;
        fix_epi e = {NULL, j->act == NN_ACT_SILU, j->accumulate, k0 > 0, k0 + kc >= j->kp,
                     j->fmt == FMT_BF16_EMU};
        for (int c0 = rb0; c0 < rb1; c0 += j->chunk) {
            int c1 = c0 + j->chunk < rb1 ? c0 + j->chunk : rb1;
            for (int rb = c0; rb < c1; rb++)
                pack_rows(f, j->fmt, j->x, rb * mr, k0, kc,
                          (char *)apack + (size_t)(rb - c0) * block_elems * esz);
            for (int g0 = p0; g0 < p1; g0 += group) {
                int g1 = g0 + group < p1 ? g0 + group : p1;
                for (int rb = c0; rb < c1; rb++) {
                    int i0 = rb * mr;
                    const char *ap = (const char *)apack + (size_t)(rb - c0) * block_elems * esz;
                    fix_rows rw;
                    rw.mr = m - i0 < mr ? m - i0 : mr;
                    for (int pn = g0; pn < g1; pn++) {
                        int col = pn * nr;
                        rw.nr = n - col < nr ? n - col : nr;
                        for (int r = 0; r < mr; r++)
                            rw.y[r] = (float *)j->y.data +
                                      (size_t)(r < rw.mr ? i0 + r : i0) * j->y.ld + col;
                        e.bias = j->bias ? j->bias + col : NULL;
                        const char *bp = (const char *)j->w->data +
                                         ((size_t)pn * panel_elems + (size_t)k0 * nr) * esz;
                        run_kernel(f, j->fmt, kc, ap, bp, &rw, &e);
                    }
                }
            }
        }
    }
}

int cpu_fixed_linear(cpu_fixed *f, nn_tensor y, nn_tensor x, const nn_packed *w,
                     const float *bias, nn_act act, int accumulate, gt_error *err)
{
    const int m = y.rows, n = y.cols;
    if (w->layout != cpu_fixed_layout(f, w->dtype))
        return gt_error_set(err, GT_EINVAL,
                            "cpu: weight packed for another kernel (layout %d, this backend "
                            "uses %d): pack it with this backend",
                            w->layout, cpu_fixed_layout(f, w->dtype));
    if (m == 0 || n == 0)
        return GT_OK;
    fix_job j;
    j.f = f;
    j.fmt = fmt_of(f, w->dtype);
    j.y = y;
    j.x = x;
    j.w = w;
    j.bias = bias;
    j.act = act;
    j.accumulate = accumulate;
    j.kp = packed_k(w->k, w->dtype);
    /* partial sums are parked in y, so an accumulating product keeps k whole */
    j.kc_max = accumulate || j.kp <= FIX_KC ? (j.kp > 0 ? j.kp : 1) : FIX_KC;
    const int mr = isa_mr(f->isa), nr = isa_nr(f->isa);
    j.row_blocks = (m + mr - 1) / mr;
    j.panels = (n + nr - 1) / nr;
    if (j.kp == 0) {
        /* nothing to multiply: y = act(bias) (+ y) through the same epilogue */
        for (int i = 0; i < m; i++)
            for (int c = 0; c < n; c++) {
                fix_epi e = {bias, act == NN_ACT_SILU, accumulate, 0, 1, 0};
                epi_scalar(0.0f, (float *)y.data + (size_t)i * y.ld + c, &e, c);
            }
        return GT_OK;
    }
    /* threads: rows first, then panels; the split never touches k */
    int threads = omp_get_max_threads();
    long long work = (long long)m * n * j.kp;
    if (work < 65536)
        threads = 1;
    int tr = threads < j.row_blocks ? threads : j.row_blocks;
    int tp = threads / tr;
    if (tp > j.panels)
        tp = j.panels;
    int used = tr * tp;
    /* packed rows per thread: about FIX_ROW_BYTES of them */
    j.chunk = (int)(FIX_ROW_BYTES / ((size_t)mr * (size_t)j.kc_max * sizeof(float)));
    if (j.chunk < 1)
        j.chunk = 1;
    size_t per = (size_t)j.chunk * (size_t)mr * (size_t)j.kc_max + 16;   /* floats */
    if (f->scratch_n < per * (size_t)used) {
        void *q = NULL;
        if (posix_memalign(&q, 64, per * (size_t)used * sizeof(float)))
            return gt_error_set(err, GT_ENOMEM, "cpu: cannot allocate %zu-float scratch",
                                per * (size_t)used);
        free(f->scratch);
        f->scratch = (float *)q;
        f->scratch_n = per * (size_t)used;
    }
#pragma omp parallel num_threads(used) if (used > 1)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        /* a runtime may give fewer threads than asked: each takes several shares */
        for (int s = t; s < used; s += nt) {
            int ir = s / tp, ip = s % tp;
            int rb0 = (int)((long long)j.row_blocks * ir / tr);
            int rb1 = (int)((long long)j.row_blocks * (ir + 1) / tr);
            int p0 = (int)((long long)j.panels * ip / tp);
            int p1 = (int)((long long)j.panels * (ip + 1) / tp);
            fix_share(&j, rb0, rb1, p0, p1, f->scratch + per * (size_t)s);
        }
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* set-up                                                                   */
/* ------------------------------------------------------------------------ */

/* A deterministic bf16 pattern with the cases that tell implementations
 * apart: denormals, values whose products underflow, cancellation, and
 * ordinary magnitudes. */
static uint16_t probe_bf16(uint32_t i)
{
    uint32_t h = i * 2654435761u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    switch (h & 7u) {
    case 0:
        return (uint16_t)(h >> 16 & 0x807fu);                   /* zero or denormal */
    case 1:
        return (uint16_t)((h >> 16 & 0x8000u) | 0x0080u | (h >> 8 & 0x7fu));  /* tiny */
    case 2:
        return (uint16_t)((h >> 16 & 0x8000u) | (0x3f00u + (h >> 4 & 0x1ffu)));  /* ~1 */
    default:
        return (uint16_t)((h >> 16 & 0x8000u) | (0x3800u + (h >> 4 & 0x7ffu)));
    }
}

/* Runs the VDPBF16PS kernel and the emulation on one probe product and
 * compares the bits. */
static int bf16_dp_matches(cpu_fixed *f)
{
    enum { M = 13, N = 37, K = 67 };
    uint16_t xs[M * K], ws[N * K];
    for (uint32_t i = 0; i < M * K; i++)
        xs[i] = probe_bf16(i);
    for (uint32_t i = 0; i < N * K; i++)
        ws[i] = probe_bf16(i + 100003u);
    float ya[M * N], yb[M * N];
    float bias[N];
    for (int i = 0; i < N; i++)
        bias[i] = nn_f32_from_bf16(probe_bf16((uint32_t)i + 7u));
    nn_tensor x = nn_tensor_make(xs, NN_BF16, M, K), w = nn_tensor_make(ws, NN_BF16, N, K);
    int ok = 1;
    for (int native = 0; native < 2 && ok; native++) {
        f->bf16_native = native;
        nn_packed p;
        memset(&p, 0, sizeof p);
        p.bytes = cpu_fixed_pack_bytes(f, N, K, NN_BF16);
        if (posix_memalign(&p.data, 64, p.bytes ? p.bytes : 64))
            return 0;
        p.dtype = NN_BF16;
        p.n = N;
        p.k = K;
        p.layout = cpu_fixed_layout(f, NN_BF16);
        cpu_fixed_pack(f, p.data, w);
        gt_error err;
        float *y = native ? yb : ya;
        ok = cpu_fixed_linear(f, nn_f32(y, M, N), x, &p, bias, NN_ACT_NONE, 0, &err) == GT_OK;
        free(p.data);
    }
    return ok && memcmp(ya, yb, sizeof ya) == 0;
}

void cpu_fixed_init(cpu_fixed *f, int want_bf16_native)
{
    memset(f, 0, sizeof *f);
    __builtin_cpu_init();
    cpu_isa best = CPU_ISA_SCALAR;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        best = CPU_ISA_AVX2;
    if (__builtin_cpu_supports("avx512f"))
        best = CPU_ISA_AVX512;
    const char *want = getenv("GIANT_CPU_KERNEL");
    cpu_isa cap = best;
    if (want && !strcmp(want, "scalar"))
        cap = CPU_ISA_SCALAR;
    else if (want && !strcmp(want, "avx2"))
        cap = CPU_ISA_AVX2;
    f->isa = cap < best ? cap : best;
    int hw_bf16 = f->isa == CPU_ISA_AVX512 && __builtin_cpu_supports("avx512bf16");
    if (hw_bf16) {
        f->bf16_checked = bf16_dp_matches(f);
        f->bf16_native = want_bf16_native && f->bf16_checked;
    }
}

void cpu_fixed_free(cpu_fixed *f)
{
    free(f->scratch);
    f->scratch = NULL;
    f->scratch_n = 0;
}

/* ------------------------------------------------------------------------ */
/* the backend's ops                                                        */
/* ------------------------------------------------------------------------ */

static size_t cpu_pack_bytes(nn_backend *b, int n, int k, nn_dtype dt)
{
    return cpu_fixed_pack_bytes(&cpu_st(b)->fixed, n, k, dt);
}

static int cpu_pack_weight(nn_backend *b, nn_packed *dst, nn_tensor w, gt_error *err)
{
    (void)err;
    cpu_fixed_pack(&cpu_st(b)->fixed, dst->data, w);
    dst->layout = cpu_fixed_layout(&cpu_st(b)->fixed, w.dtype);
    return GT_OK;
}

static int cpu_linear_fixed(nn_backend *b, nn_tensor y, nn_tensor x, const nn_packed *w,
                            const float *bias, nn_act act, int accumulate, gt_error *err)
{
    return cpu_fixed_linear(&cpu_st(b)->fixed, y, x, w, bias, act, accumulate, err);
}

void cpu_fixed_ops(nn_backend_ops *o)
{
    o->pack_bytes = cpu_pack_bytes;
    o->pack_weight = cpu_pack_weight;
    o->linear_fixed = cpu_linear_fixed;
}
