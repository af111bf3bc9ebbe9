/* cuda_matmul: matrix products through cuBLASLt.
 *
 * Row-major C[m,n] = op(A)[m,k] op(B)[k,n] is, read column-major, the
 * product C^T[n,m] = op(B)^T op(A)^T, so cuBLASLt's "A" is our B and its
 * "B" is our A, with no data moved.  Types: fp32 inputs -> CUBLAS_COMPUTE_32F
 * (true fp32: no TF32); bf16 inputs -> CUBLAS_COMPUTE_32F with fp32 C/D.
 * The bias rides in the epilogue (CUBLASLT_EPILOGUE_BIAS: one value per row
 * of the column-major D = per output feature) when it is 16-byte aligned and
 * the heuristic has an algorithm for it; otherwise a broadcast kernel adds
 * it.  The heuristic is asked with the call's own bias pointer on the
 * descriptor (a NULL one would let it assume any alignment), and the key
 * records that pointer's alignment like A's, B's and C's, so a plan is
 * never reused for a bias aligned worse than the one it was chosen for.
 * "accumulate" is beta = 1 (D = A.B + C + bias, the residual update in one
 * call).  SiLU has no cuBLASLt epilogue, so it runs as one elementwise pass
 * after the product.
 *
 * Plans (operation descriptor, three layouts, the heuristic's algorithm) are
 * cached per shape, transposes, leading dimensions, dtype and the
 * alignment of every pointer (bias included); each new one moves the
 * backend's plan_count (nn_backend.h), so tests can assert that a step
 * after warm-up plans nothing.  A miss inside graph capture is an error, so
 * callers warm the cache with one uncaptured step first. */
#ifndef CUDA_MATMUL_CUH
#define CUDA_MATMUL_CUH

#include "cuda_act.cuh"
#include "cuda_common.cuh"

struct cuda_mm_key {
    int m, n, k, ta, tb, lda, ldb, ldc;
    int dtype;
    int align_a, align_b, align_c;
    int align_bias;                      /* 0: no bias */
};

struct cuda_mm_entry {
    cuda_mm_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;   /* cuBLASLt's A (our B), B (our A), C/D */
    cublasLtMatmulAlgo_t algo;
    int bias_fused;                      /* 0: bias added by a kernel */
};

/* Largest power of two (<= 256) dividing the address: what cuBLASLt's
 * alignment preferences ask about. */
static int cuda_align_of(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    int a = 256;
    while (a > 1 && (u % (uintptr_t)a) != 0)
        a >>= 1;
    return a;
}

static void cuda_mm_entry_release(cuda_mm_entry *e)
{
    cuda_lt_destroy(e->op, e->la, e->lb, e->lc);
    memset(e, 0, sizeof *e);
}

static void cuda_mm_cache_free(cuda_state *s)
{
    cuda_cache_free(&s->mm, &s->mm_count, &s->mm_cap, cuda_mm_entry_release);
}

/* The epilogue is tried for a bias of at least this alignment (bytes);
 * a less aligned one is added by the broadcast kernel. */
#define CUDA_MM_BIAS_ALIGN 16

/* Builds descriptors and asks the heuristic for the best algorithm, first
 * with the bias epilogue (when the key's bias allows it), then without.
 * bias is the call's own pointer (NULL when key->align_bias is 0): the
 * heuristic sees the alignment the product will run with.  Runs outside
 * capture only. */
static int cuda_mm_plan(cuda_state *s, const cuda_mm_key *key, const float *bias,
                        cuda_mm_entry *e, gt_error *err)
{
    memset(e, 0, sizeof *e);
    e->key = *key;
    cudaDataType_t in_t = key->dtype == NN_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasOperation_t opa = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N;   /* our B */
    cublasOperation_t opb = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N;   /* our A */
    cublasLtMatmulPreference_t pref = NULL;
    int rc = GT_OK;
#define MM_TRY(call) CUBLAS_TRY_GOTO(call, fail)
    {
        if ((rc = cuda_lt_op(&e->op, opa, opb, err)))
            goto fail;
        cudaDataType_t bias_t = CUDA_R_32F;
        MM_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                              &bias_t, sizeof bias_t));
        /* stored (column-major) shapes before the transposes */
        uint64_t a_rows = key->tb ? key->k : key->n, a_cols = key->tb ? key->n : key->k;
        uint64_t b_rows = key->ta ? key->m : key->k, b_cols = key->ta ? key->k : key->m;
        MM_TRY(cublasLtMatrixLayoutCreate(&e->la, in_t, a_rows, a_cols, key->ldb));
        MM_TRY(cublasLtMatrixLayoutCreate(&e->lb, in_t, b_rows, b_cols, key->lda));
        MM_TRY(cublasLtMatrixLayoutCreate(&e->lc, CUDA_R_32F, key->n, key->m, key->ldc));

        /* cuBLASLt's A is our B and its B our A */
        if ((rc = cuda_lt_pref(&pref, s->workspace_bytes, (uint32_t)key->align_b,
                               (uint32_t)key->align_a, (uint32_t)key->align_c, err)))
            goto fail;

        int try_bias = key->align_bias >= CUDA_MM_BIAS_ALIGN;
        for (int attempt = try_bias ? 0 : 1; attempt < 2; attempt++) {
            cublasLtEpilogue_t epi = attempt == 0 ? CUBLASLT_EPILOGUE_BIAS
                                                  : CUBLASLT_EPILOGUE_DEFAULT;
            /* the real pointer while the epilogue is asked about; none
             * after, so an unfused plan keeps no caller pointer */
            const float *bp = attempt == 0 ? bias : NULL;
            MM_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp,
                                                  sizeof bp));
            MM_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                  sizeof epi));
            cublasLtMatmulHeuristicResult_t res;
            int found = 0;
            memset(&res, 0, sizeof res);
            cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(s->lt, e->op, e->la, e->lb,
                                                               e->lc, e->lc, pref, 1, &res,
                                                               &found);
            if (st == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
                e->algo = res.algo;
                e->bias_fused = attempt == 0;
                cublasLtMatmulPreferenceDestroy(pref);
                return GT_OK;
            }
            if (attempt == 1) {
                rc = gt_error_set(err, GT_EUNSUPPORTED,
                                  "cuBLASLt has no algorithm for %s matmul m=%d n=%d k=%d "
                                  "ta=%d tb=%d ld=(%d,%d,%d) on %s: %s",
                                  nn_dtype_name((nn_dtype)key->dtype), key->m, key->n, key->k,
                                  key->ta, key->tb, key->lda, key->ldb, key->ldc, s->dev_name,
                                  st == CUBLAS_STATUS_SUCCESS ? "no result"
                                                              : cublasLtGetStatusString(st));
                goto fail;
            }
        }
    }
#undef MM_TRY
fail:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    cuda_mm_entry_release(e);
    return rc ? rc : gt_error_set(err, GT_EDEVICE, "matmul plan failed");
}

/* The plan of key, made on a miss (outside capture) with the call's bias;
 * a new plan moves b->plan_count. */
static int cuda_mm_lookup(nn_backend *b, cuda_state *s, const cuda_mm_key *key,
                          const float *bias, cuda_mm_entry **out, gt_error *err)
{
    for (int i = 0; i < s->mm_count; i++)
        if (!memcmp(&s->mm[i].key, key, sizeof *key)) {
            *out = &s->mm[i];
            return GT_OK;
        }
    if (s->capturing)
        return gt_error_set(err, GT_EINVAL,
                            "matmul m=%d n=%d k=%d (%s) was not planned before graph capture: "
                            "run the step once uncaptured first",
                            key->m, key->n, key->k, nn_dtype_name((nn_dtype)key->dtype));
    cuda_mm_entry *mm =
        (cuda_mm_entry *)gt_array_grow(s->mm, s->mm_count, &s->mm_cap, sizeof *mm, 32);
    if (!mm)
        return gt_error_set(err, GT_ENOMEM, "matmul plan cache: out of memory");
    s->mm = mm;
    int rc = cuda_mm_plan(s, key, bias, &s->mm[s->mm_count], err);
    if (rc)
        return rc;
    b->plan_count++;   /* nn_backend.h: a new per-shape plan */
    *out = &s->mm[s->mm_count++];
    return GT_OK;
}

static int cuda_matmul(nn_backend *b, nn_tensor c, nn_tensor a, int trans_a, nn_tensor bm,
                       int trans_b, const float *bias, nn_act act, int accumulate, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    int m = c.rows, n = c.cols;
    int k = trans_a ? a.rows : a.cols;
    if (m <= 0 || n <= 0)
        return GT_OK;
    if (a.dtype == NN_BF16 && s->cc_major < 8)
        return gt_error_set(err, GT_EUNSUPPORTED,
                            "bf16 matmul needs compute capability 8.0 or later; %s (cuda:%d) "
                            "has %d.%d",
                            s->dev_name, s->device, s->cc_major, s->cc_minor);
    int rc;
    if (k == 0) {
        /* nothing to multiply: C = bias (or 0), or C += bias */
        if (bias)
            rc = cuda_bias_rows(s, c, bias, accumulate, err);
        else if (!accumulate)
            rc = cuda_fill_zero(s, c, err);
        else
            rc = GT_OK;
    } else {
        cuda_mm_key key;
        memset(&key, 0, sizeof key);   /* the key is compared bytewise */
        key.m = m;
        key.n = n;
        key.k = k;
        key.ta = trans_a ? 1 : 0;
        key.tb = trans_b ? 1 : 0;
        key.lda = a.ld;
        key.ldb = bm.ld;
        key.ldc = c.ld;
        key.dtype = (int)a.dtype;
        key.align_a = cuda_align_of(a.data);
        key.align_b = cuda_align_of(bm.data);
        key.align_c = cuda_align_of(c.data);
        key.align_bias = bias ? cuda_align_of(bias) : 0;
        cuda_mm_entry *e = NULL;
        rc = cuda_mm_lookup(b, s, &key, bias, &e, err);
        if (rc)
            return rc;
        if (e->bias_fused)
            CUBLAS_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof bias),
                       err);
        float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        CUBLAS_TRY(cublasLtMatmul(s->lt, e->op, &alpha, bm.data, e->la, a.data, e->lb, &beta,
                                  c.data, e->lc, c.data, e->lc, &e->algo, s->workspace,
                                  s->workspace_bytes, s->stream),
                   err);
        rc = GT_OK;
        if (bias && !e->bias_fused)
            rc = cuda_bias_rows(s, c, bias, 1, err);
    }
    if (rc == GT_OK && act == NN_ACT_SILU)
        rc = cuda_silu_fwd(b, c, c, err);
    return rc;
}

/* This family's entries of the op table (each on the backend's device). */
static void cuda_matmul_ops(nn_backend_ops *o)
{
    o->matmul = ON_DEV(cuda_matmul);
}

#endif
