/* cuda_fixed: the fixed-order linear layer on the GPU, the sampler's
 * products (pack_bytes / pack_weight / linear_fixed in nn_backend.h):
 *
 *   y[m,n] = act(x[m,k] . W^T + bias) (+ old y when accumulate)
 *
 * A row of y must come out the same whatever m, the row's position and
 * the rows it was computed with.  cuBLASLt picks its algorithm (kernel,
 * tile, stages, split-K) per problem shape, m included, and a split-K or
 * stream-K kernel sums k in parts whose boundaries depend on m, so the
 * library matmul (cuda_matmul.cuh) is not batch-invariant.  Here:
 *
 * One algorithm per (n, k, dtype), pinned.  The first call for a weight
 * shape builds a plan (outside graph capture; plan_count moves): the
 * heuristic is asked ONCE, for a fixed reference row count CUDA_FX_REF_M
 * (not the first m seen, so the choice does not depend on the order in
 * which batch sizes arrive), for the dense layouts the engine's arenas have
 * (x ld = k, y ld = n, 256-byte aligned bases: the alignment classes are
 * min(16, the largest power of two dividing ld * element size)), with
 *   - no workspace: split-K reductions (COMPUTE_TYPE / OUTPUT_TYPE keep
 *     partials in the workspace, INPLACE keeps its counters there) and
 *     stream-K kernels (partial tiles fixed up through the workspace)
 *     cannot run without one, and the heuristic offers only algorithms
 *     whose workspaceSize fits; the product is then launched with none
 *     (NULL, 0), or with the few bytes the pinned kernel's check asks for
 *     (at most CUDA_FX_SMALL_WS, too little for one partial tile), so
 *     nothing can fall back to them;
 *   - the reduction-scheme mask at NONE;
 * and from its answers (best first), among those that report workspaceSize
 * 0, SPLITK_NUM <= 1 and REDUCTION_SCHEME NONE, the first one that
 * cublasLtMatmulAlgoCheck accepts at CUDA_FX_REF_M with no workspace once
 * SPLITK_NUM = 1 and REDUCTION_SCHEME = NONE are set on it explicitly is
 * taken (failing that, the first that asks for at most CUDA_FX_SMALL_WS).
 * No such answer: GT_EUNSUPPORTED naming n, k and the device.  The pinned
 * algorithm's own alignment needs (CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_*) are
 * recorded.
 *
 * Every other call runs that same algorithm structure: for each new (m, ld
 * of x, ld of y) cublasLtMatmulAlgoCheck must accept it with at most
 * CUDA_FX_SMALL_WS bytes of workspace (cached with what it asked for; a new one inside graph capture is an error, as for the library
 * matmul), and the call's pointers and leading dimensions must meet the
 * recorded alignment needs.  Otherwise the call fails with GT_EUNSUPPORTED
 * naming m, n and k: it never switches to another algorithm.
 *
 * Bias and activation: always a separate elementwise pass, never the BIAS
 * epilogue, so there is one bias path for every m, every bias alignment
 * and every plan (the product's plan does not depend on the bias, and
 * the epilogue kernel's arithmetic is per element, the same whether it
 * takes 16-byte or scalar loads).  The pass computes, per element,
 * v = y + bias[j], then v = nn_silu_fixed(v) for SiLU: the CPU contract's
 * epilogue order (engine/cpu/cpu_fixed.h) and its formula.  With SiLU or a
 * bias it costs one read and write of y; hidden layers need that pass for
 * SiLU anyway, so only bias-only layers pay for it.
 * accumulate is beta = 1 in the product, so the GPU computes
 * (old y + x.W^T) + bias where the CPU computes old y + (x.W^T + bias):
 * different roundings, the same for every m.
 *
 * What this gives: a fixed kernel, tile and k-loop per (n, k, dtype), no
 * split of k across thread blocks, so each output element's dot product is
 * the same sequence of instructions whatever m (for one device model,
 * driver and cuBLAS version: none of these is promised across versions).
 * GPU and CPU are not the same bits (tensor cores and SIMT kernels sum k
 * in other orders than the CPU's FMA chain; nvcc contracts a multiply-add
 * in nn_exp_fixed that the CPU keeps apart).
 *
 * A packed weight is a dense row-major n x k copy of W (ld = k), in the
 * backend allocation nn_pack_weight makes (256-byte aligned). */
#ifndef CUDA_FIXED_CUH
#define CUDA_FIXED_CUH

#include "cuda_act.cuh"
#include "cuda_common.cuh"
#include "cuda_matmul.cuh"

/* The row count the pinned algorithm is chosen for: a large sampling batch. */
#define CUDA_FX_REF_M 4096
/* Heuristic answers examined for one that is neither split-K nor stream-K. */
#define CUDA_FX_CANDIDATES 16
/* The most workspace a pinned single-pass algorithm may ask for: room for a
 * few counters, never for one partial output tile (a 64 x 64 fp32 tile is
 * 16 KiB), so nothing that sums parts of k can live in it. */
#define CUDA_FX_SMALL_WS 1024
/* nn_packed.layout of this backend: "CUFX", dense row-major n x k. */
#define CUDA_FX_LAYOUT 0x43554658

/* (m, ld of x, ld of y) that cublasLtMatmulAlgoCheck accepted */
struct cuda_fx_check {
    int m, ldx, ldy;
    size_t ws;                           /* workspace the check asked for */
};

struct cuda_fx_entry {
    int n, k, dtype;                     /* the key */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t lw, lx, ly;   /* cuBLASLt's A (W), B (x), C = D (y) */
    cublasLtMatmulAlgo_t algo;           /* pinned */
    int need_w, need_x, need_y;          /* its alignment needs, bytes */
    int algo_id, tile_id, stages_id;     /* for messages; -1 when unknown */
    size_t ws;                           /* workspace at CUDA_FX_REF_M: 0, or <= CUDA_FX_SMALL_WS */
    cuda_fx_check *ok;
    int n_ok, cap_ok;
};

/* z = act(y + bias[j]): the fixed-order layer's epilogue, per element,
 * stored in z's type: back into y itself (fp32, z == y), or rounded to bf16
 * (nn_bf16_from_f32) for the next product, which then reads it without a
 * separate cast pass. */
template <class Out> struct cuda_fx_epi_f {
    Out *z; int ldz;
    const float *y; int ldy;
    const float *bias;                   /* NULL: none */
    int silu;
    template <int V> __device__ void apply(int i, int j) const
    {
        float a[V];
        cuda_ld<V>(a, cuda_row(y, ldy, i) + j);
        if (bias) {
            float bb[V];
            cuda_ld<V>(bb, bias + j);
#pragma unroll
            for (int k = 0; k < V; k++)
                a[k] = a[k] + bb[k];
        }
        if (silu) {
#pragma unroll
            for (int k = 0; k < V; k++)
                a[k] = nn_silu_fixed(a[k]);
        }
        cuda_st<V>(z + (long long)i * ldz + j, a);
    }
};

static int cuda_fx_epilogue(cuda_state *s, nn_tensor y, const float *bias, int silu,
                            gt_error *err)
{
    if (!bias && !silu)
        return GT_OK;
    cuda_fx_epi_f<float> f = {(float *)y.data, y.ld, (const float *)y.data, y.ld, bias, silu};
    int vec = cuda_vec4_ok(y) && (!bias || cuda_aligned(bias, 16));
    return cuda_ew2d(s, f, y.rows, y.cols, vec, err);
}

static int cuda_fx_epilogue_bf16(cuda_state *s, nn_tensor z, nn_tensor y, const float *bias,
                                 int silu, gt_error *err)
{
    cuda_fx_epi_f<uint16_t> f = {(uint16_t *)z.data, z.ld, (const float *)y.data, y.ld, bias,
                                 silu};
    int vec = cuda_vec4_ok(y) && (!bias || cuda_aligned(bias, 16)) &&
              cuda_aligned(z.data, 8) && z.ld % 4 == 0;
    return cuda_ew2d(s, f, y.rows, y.cols, vec, err);
}

/* min(16, largest power of two dividing the address and the row pitch):
 * the alignment class of a matrix operand. */
static int cuda_fx_align(const void *p, int ld, size_t elem)
{
    int a = cuda_align_of(p);
    int r = cuda_align_of((const void *)(uintptr_t)((size_t)ld * elem));
    if (r < a)
        a = r;
    return a < 16 ? a : 16;
}

static void cuda_fx_entry_release(cuda_fx_entry *e)
{
    cuda_lt_destroy(e->op, e->lw, e->lx, e->ly);
    free(e->ok);
    memset(e, 0, sizeof *e);
}

static void cuda_fx_cache_free(cuda_state *s)
{
    cuda_cache_free(&s->fx, &s->fx_count, &s->fx_cap, cuda_fx_entry_release);
}

/* Points the x and y layouts at one call's shape (host-side only). */
static int cuda_fx_shape(cuda_fx_entry *e, int m, int ldx, int ldy, gt_error *err)
{
    uint64_t cols = (uint64_t)m;
    int64_t lx = ldx, ly = ldy;
    CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(e->lx, CUBLASLT_MATRIX_LAYOUT_COLS, &cols,
                                                sizeof cols),
               err);
    CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(e->lx, CUBLASLT_MATRIX_LAYOUT_LD, &lx, sizeof lx),
               err);
    CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(e->ly, CUBLASLT_MATRIX_LAYOUT_COLS, &cols,
                                                sizeof cols),
               err);
    CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(e->ly, CUBLASLT_MATRIX_LAYOUT_LD, &ly, sizeof ly),
               err);
    return GT_OK;
}

/* An algorithm that sums each dot product in one pass: no workspace, no
 * k split, no reduction scheme.  A query that fails counts as "no". */
static int cuda_fx_single_pass(const cublasLtMatmulHeuristicResult_t *r)
{
    if (r->state != CUBLAS_STATUS_SUCCESS || r->workspaceSize != 0)
        return 0;
    int32_t splitk = 0;
    uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_MASK;
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&r->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof splitk, &got) != CUBLAS_STATUS_SUCCESS)
        return 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&r->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                             &scheme, sizeof scheme, &got) != CUBLAS_STATUS_SUCCESS)
        return 0;
    return splitk <= 1 && scheme == CUBLASLT_REDUCTION_SCHEME_NONE;
}

/* One alignment need of the pinned algorithm: what its capabilities say,
 * at most `asked` (the alignment the heuristic was told the operand has,
 * which the algorithm it returned works with), `asked` when the library
 * cannot say. */
static int cuda_fx_cap_align(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoCapAttributes_t a,
                             int asked)
{
    uint32_t v = 0;
    size_t got = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(algo, a, &v, sizeof v, &got) != CUBLAS_STATUS_SUCCESS ||
        got != sizeof v || v == 0 || v > (uint32_t)asked)
        return asked;
    return (int)v;
}

static int cuda_fx_config_int(const cublasLtMatmulAlgo_t *algo,
                              cublasLtMatmulAlgoConfigAttributes_t a)
{
    uint32_t v = 0;   /* ID is int32_t, TILE_ID and STAGES_ID uint32_t: same size */
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, a, &v, sizeof v, &got) != CUBLAS_STATUS_SUCCESS)
        return -1;
    return (int)v;
}

/* Descriptors and the pinned algorithm for e->n, e->k, e->dtype. */
static int cuda_fx_plan(cuda_state *s, cuda_fx_entry *e, gt_error *err)
{
    const int bf = e->dtype == NN_BF16;
    const cudaDataType_t in_t = bf ? CUDA_R_16BF : CUDA_R_32F;
    const size_t es = bf ? 2 : 4;
    const cublasOperation_t opw = CUBLAS_OP_T, opx = CUBLAS_OP_N;
    /* the dense arena's classes: 256-byte bases, x ld = k, y ld = n */
    const int align_w = cuda_fx_align(NULL, e->k, es), align_x = align_w;
    const int align_y = cuda_fx_align(NULL, e->n, sizeof(float));
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[CUDA_FX_CANDIDATES];
    int found = 0, pick = -1, rc = GT_OK;
#define FX_TRY(call) CUBLAS_TRY_GOTO(call, done)
    {
        if ((rc = cuda_lt_op(&e->op, opw, opx, err)))
            goto done;
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
        FX_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                              sizeof epi));
        /* Row-major y = x W^T is column-major y^T = W x^T (cuda_matmul.cuh):
         * W (n x k row-major) is k x n column-major, transposed; x is k x m
         * column-major; y is n x m column-major. */
        FX_TRY(cublasLtMatrixLayoutCreate(&e->lw, in_t, (uint64_t)e->k, (uint64_t)e->n,
                                          (int64_t)e->k));
        FX_TRY(cublasLtMatrixLayoutCreate(&e->lx, in_t, (uint64_t)e->k, CUDA_FX_REF_M,
                                          (int64_t)e->k));
        FX_TRY(cublasLtMatrixLayoutCreate(&e->ly, CUDA_R_32F, (uint64_t)e->n, CUDA_FX_REF_M,
                                          (int64_t)e->n));

        /* no workspace, and no reduction scheme: one pass, a fixed order */
        if ((rc = cuda_lt_pref(&pref, 0, (uint32_t)align_w, (uint32_t)align_x,
                               (uint32_t)align_y, err)))
            goto done;
        uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE;
        FX_TRY(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red));

        memset(res, 0, sizeof res);
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(s->lt, e->op, e->lw, e->lx, e->ly,
                                                           e->ly, pref, CUDA_FX_CANDIDATES, res,
                                                           &found);
        if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
            rc = cublas_fail(err, st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
            goto done;
        }
        /* Among the single-pass answers, best first, the first that
         * cublasLtMatmulAlgoCheck accepts with no workspace once SPLITK_NUM
         * = 1 and REDUCTION_SCHEME = NONE are set on it explicitly; failing
         * that, the first that asks for at most CUDA_FX_SMALL_WS bytes.  An
         * answer can report workspaceSize 0 to the heuristic (told it has
         * none) and still ask the check for a few bytes: seen on an H200
         * with cuBLAS 13 (4 bytes, bf16 n=6480 k=512).  Such a kernel keeps
         * a counter there, not partial sums: split-K is off and the
         * reduction scheme NONE, so each dot product is still one pass. */
        int32_t one = 1;
        uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
        size_t asked = 0;   /* the smallest workspace a rejected answer wanted */
        int single = 0;
        for (int pass = 0; pass < 2 && pick < 0; pass++) {
            const size_t limit = pass == 0 ? 0 : CUDA_FX_SMALL_WS;
            single = 0;
            for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found && pick < 0; i++) {
                if (!cuda_fx_single_pass(&res[i]))
                    continue;
                single++;
                cublasLtMatmulAlgo_t a = res[i].algo;
                if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one,
                                                         sizeof one) != CUBLAS_STATUS_SUCCESS ||
                    cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                         &none,
                                                         sizeof none) != CUBLAS_STATUS_SUCCESS)
                    continue;
                cublasLtMatmulHeuristicResult_t chk;
                memset(&chk, 0, sizeof chk);
                if (cublasLtMatmulAlgoCheck(s->lt, e->op, e->lw, e->lx, e->ly, e->ly, &a, &chk) !=
                    CUBLAS_STATUS_SUCCESS)
                    continue;
                if (chk.workspaceSize > limit) {
                    if (!asked || chk.workspaceSize < asked)
                        asked = chk.workspaceSize;
                    continue;
                }
                e->algo = a;
                e->ws = chk.workspaceSize;
                pick = i;
            }
        }
        if (pick < 0) {
            if (asked)
                rc = gt_error_set(err, GT_EUNSUPPORTED,
                                  "fixed-order %s product n=%d k=%d on %s: each of the %d "
                                  "single-pass algorithms offered asks for more workspace than "
                                  "%d bytes (at least %zu) once split-K is turned off",
                                  nn_dtype_name((nn_dtype)e->dtype), e->n, e->k, s->dev_name,
                                  single, CUDA_FX_SMALL_WS, asked);
            else
                rc = gt_error_set(err, GT_EUNSUPPORTED,
                                  "fixed-order %s product n=%d k=%d: cuBLASLt offers no "
                                  "single-pass algorithm (no split-K, no stream-K, no workspace) "
                                  "on %s (%d answer%s examined)",
                                  nn_dtype_name((nn_dtype)e->dtype), e->n, e->k, s->dev_name,
                                  found, found == 1 ? "" : "s");
            goto done;
        }
        e->need_w = cuda_fx_cap_align(&e->algo, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES, align_w);
        e->need_x = cuda_fx_cap_align(&e->algo, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES, align_x);
        int need_c = cuda_fx_cap_align(&e->algo, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES, align_y);
        int need_d = cuda_fx_cap_align(&e->algo, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES, align_y);
        e->need_y = need_c > need_d ? need_c : need_d;
        e->algo_id = cuda_fx_config_int(&e->algo, CUBLASLT_ALGO_CONFIG_ID);
        e->tile_id = cuda_fx_config_int(&e->algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
        e->stages_id = cuda_fx_config_int(&e->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
    }
#undef FX_TRY
done:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    return rc;
}

/* The plan of (n, k, dtype), made on first use outside capture. */
static int cuda_fx_lookup(nn_backend *b, cuda_state *s, int n, int k, nn_dtype dt,
                          cuda_fx_entry **out, gt_error *err)
{
    for (int i = 0; i < s->fx_count; i++) {
        cuda_fx_entry *e = &s->fx[i];
        if (e->n == n && e->k == k && e->dtype == (int)dt) {
            *out = e;
            return GT_OK;
        }
    }
    if (s->capturing)
        return gt_error_set(err, GT_EINVAL,
                            "fixed-order %s product n=%d k=%d was not planned before graph "
                            "capture: run it once uncaptured first",
                            nn_dtype_name(dt), n, k);
    cuda_fx_entry *fx =
        (cuda_fx_entry *)gt_array_grow(s->fx, s->fx_count, &s->fx_cap, sizeof *fx, 16);
    if (!fx)
        return gt_error_set(err, GT_ENOMEM, "fixed-order plan cache: out of host memory");
    s->fx = fx;
    cuda_fx_entry *e = &s->fx[s->fx_count];
    memset(e, 0, sizeof *e);
    e->n = n;
    e->k = k;
    e->dtype = (int)dt;
    int rc = cuda_fx_plan(s, e, err);
    if (rc) {
        cuda_fx_entry_release(e);
        return rc;
    }
    s->fx_count++;
    b->plan_count++;
    *out = e;
    return GT_OK;
}

/* The pinned algorithm, checked once per (m, ldx, ldy) for this call's
 * layouts (already set by cuda_fx_shape). */
static int cuda_fx_checked(cuda_state *s, cuda_fx_entry *e, int m, int ldx, int ldy,
                           size_t *ws, gt_error *err)
{
    for (int i = 0; i < e->n_ok; i++)
        if (e->ok[i].m == m && e->ok[i].ldx == ldx && e->ok[i].ldy == ldy) {
            *ws = e->ok[i].ws;
            return GT_OK;
        }
    if (s->capturing)
        return gt_error_set(err, GT_EINVAL,
                            "fixed-order product m=%d n=%d k=%d (ld %d, %d) was not run before "
                            "graph capture: run it once uncaptured first",
                            m, e->n, e->k, ldx, ldy);
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    cublasStatus_t st =
        cublasLtMatmulAlgoCheck(s->lt, e->op, e->lw, e->lx, e->ly, e->ly, &e->algo, &r);
    if (st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_NOT_SUPPORTED ||
        st == CUBLAS_STATUS_ARCH_MISMATCH || (st == CUBLAS_STATUS_SUCCESS && r.workspaceSize > CUDA_FX_SMALL_WS))
        return gt_error_set(err, GT_EUNSUPPORTED,
                            "fixed-order %s product: the algorithm pinned for n=%d k=%d (id %d, "
                            "tile %d, stages %d) cannot run m=%d (ld x %d, ld y %d) on %s: %s "
                            "(%zu bytes); it is not replaced by another",
                            nn_dtype_name((nn_dtype)e->dtype), e->n, e->k, e->algo_id,
                            e->tile_id, e->stages_id, m, ldx, ldy, s->dev_name,
                            st != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(st)
                                                        : "it would need more workspace",
                            r.workspaceSize);
    if (st != CUBLAS_STATUS_SUCCESS)
        return cublas_fail(err, st, "cublasLtMatmulAlgoCheck", __FILE__, __LINE__);
    cuda_fx_check *ok = (cuda_fx_check *)gt_array_grow(e->ok, e->n_ok, &e->cap_ok, sizeof *ok, 8);
    if (!ok)
        return gt_error_set(err, GT_ENOMEM, "fixed-order check cache: out of host memory");
    e->ok = ok;
    e->ok[e->n_ok].m = m;
    e->ok[e->n_ok].ldx = ldx;
    e->ok[e->n_ok].ldy = ldy;
    e->ok[e->n_ok].ws = r.workspaceSize;
    e->n_ok++;
    *ws = r.workspaceSize;
    return GT_OK;
}

static size_t cuda_pack_bytes(nn_backend *b, int n, int k, nn_dtype dt)
{
    (void)b;
    return (size_t)n * (size_t)k * nn_dtype_size(dt);
}

/* dst->data (pack_bytes long, from the backend's alloc: 256-byte aligned)
 * = W as a dense row-major n x k copy. */
static int cuda_pack_weight(nn_backend *b, nn_packed *dst, nn_tensor w, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    size_t es = nn_dtype_size(w.dtype);
    if (w.rows > 0 && w.cols > 0)
        CUDA_TRY(cudaMemcpy2DAsync(dst->data, (size_t)w.cols * es, w.data, (size_t)w.ld * es,
                                   (size_t)w.cols * es, (size_t)w.rows, cudaMemcpyDeviceToDevice,
                                   s->stream),
                 err);
    dst->layout = CUDA_FX_LAYOUT;
    return GT_OK;
}

/* y (+)= x . W^T by the algorithm pinned for (n, k, dtype): the product
 * part of linear_fixed, its epilogue left to the caller. */
static int cuda_fx_product(nn_backend *b, nn_tensor y, nn_tensor x, const nn_packed *w,
                           int accumulate, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    const int m = y.rows, n = y.cols, k = w->k;
    if (w->layout != CUDA_FX_LAYOUT)
        return gt_error_set(err, GT_EINVAL,
                            "linear_fixed: the weight was packed by another backend (layout "
                            "%#x): pack it with cuda:%d",
                            (unsigned)w->layout, s->device);
    if (w->dtype == NN_BF16 && s->cc_major < 8)
        return gt_error_set(err, GT_EUNSUPPORTED,
                            "bf16 matmul needs compute capability 8.0 or later; %s (cuda:%d) "
                            "has %d.%d",
                            s->dev_name, s->device, s->cc_major, s->cc_minor);
    if (m <= 0 || n <= 0)
        return GT_OK;
    int rc = GT_OK;
    if (k == 0) {
        /* nothing to multiply: y = 0 (then + bias, act), or y unchanged */
        if (!accumulate)
            rc = cuda_fill_zero(s, y, err);
    } else {
        cuda_fx_entry *e = NULL;
        rc = cuda_fx_lookup(b, s, n, k, w->dtype, &e, err);
        if (rc)
            return rc;
        const size_t es = nn_dtype_size(w->dtype);
        int hw = cuda_fx_align(w->data, k, es), hx = cuda_fx_align(x.data, x.ld, es);
        int hy = cuda_fx_align(y.data, y.ld, sizeof(float));
        if (hw < e->need_w || hx < e->need_x || hy < e->need_y)
            return gt_error_set(err, GT_EUNSUPPORTED,
                                "fixed-order %s product m=%d n=%d k=%d: the algorithm pinned "
                                "for n=%d k=%d needs %d/%d/%d-byte aligned W/x/y (pointers and "
                                "row pitches); this call has %d/%d/%d, and no other algorithm "
                                "is used",
                                nn_dtype_name(w->dtype), m, n, k, n, k, e->need_w, e->need_x,
                                e->need_y, hw, hx, hy);
        size_t ws = 0;
        if ((rc = cuda_fx_shape(e, m, x.ld, y.ld, err)) ||
            (rc = cuda_fx_checked(s, e, m, x.ld, y.ld, &ws, err)))
            return rc;
        float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        CUBLAS_TRY(cublasLtMatmul(s->lt, e->op, &alpha, w->data, e->lw, x.data, e->lx, &beta,
                                  y.data, e->ly, y.data, e->ly, &e->algo,
                                  ws ? s->workspace : NULL, ws, s->stream),
                   err);
    }
    return rc;
}

static int cuda_linear_fixed(nn_backend *b, nn_tensor y, nn_tensor x, const nn_packed *w,
                             const float *bias, nn_act act, int accumulate, gt_error *err)
{
    GT_TRY(cuda_fx_product(b, y, x, w, accumulate, err));
    if (y.rows <= 0 || y.cols <= 0)
        return GT_OK;
    return cuda_fx_epilogue(cuda_st(b), y, bias, act == NN_ACT_SILU, err);
}

static int cuda_linear_fixed_bf16(nn_backend *b, nn_tensor y_bf, nn_tensor y, nn_tensor x,
                                  const nn_packed *w, const float *bias, nn_act act,
                                  gt_error *err)
{
    GT_TRY(cuda_fx_product(b, y, x, w, 0, err));
    if (y.rows <= 0 || y.cols <= 0)
        return GT_OK;
    return cuda_fx_epilogue_bf16(cuda_st(b), y_bf, y, bias, act == NN_ACT_SILU, err);
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_fixed_ops(nn_backend_ops *o)
{
    o->pack_bytes = cuda_pack_bytes;   /* host arithmetic only */
    o->pack_weight = ON_DEV(cuda_pack_weight);
    o->linear_fixed = ON_DEV(cuda_linear_fixed);
    o->linear_fixed_bf16 = ON_DEV(cuda_linear_fixed_bf16);
}

#endif
