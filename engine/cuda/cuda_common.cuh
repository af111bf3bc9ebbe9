/* cuda_common: what every op family of the CUDA backend shares: the
 * backend state, the checking macros, launch shapes, 16-byte vector
 * loads, block reductions.  Included only by cuda_backend.cu (one
 * translation unit, like llm.c's train_gpt2.cu), so everything is static. */
#ifndef CUDA_COMMON_CUH
#define CUDA_COMMON_CUH

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

/* gt_error.h and gt_array.h have no extern "C" guard of their own;
 * included here first, gt_error.h's include guard keeps nn_backend.h from
 * re-including it as C++. */
extern "C" {
#include "gt_array.h"
#include "gt_error.h"
}
#include "nn_backend.h"
#include "nn_math.h"
#include "nn_rng.h"

/* ------------------------------------------------------------------------ */
/* state                                                                    */
/* ------------------------------------------------------------------------ */

struct cuda_mm_entry;   /* cuda_matmul.cuh */
struct cuda_fx_entry;   /* cuda_fixed.cuh */

struct cuda_alloc_rec {
    void *p;
    size_t bytes;
};

struct cuda_state {
    int device;
    char dev_name[256];
    int cc_major, cc_minor;
    int sm_count;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *workspace;               /* cuBLASLt workspace, planned once */
    size_t workspace_bytes;
    float *scratch;                /* reduction partials (column sums, totals) */
    size_t scratch_floats;
    struct cuda_mm_entry *mm;      /* matmul plan cache, grown only outside capture */
    int mm_count, mm_cap;
    struct cuda_fx_entry *fx;      /* fixed-order (sampling) plans, pinned per shape */
    int fx_count, fx_cap;
    struct cuda_alloc_rec *allocs; /* live allocations, for bytes_live */
    int n_allocs, cap_allocs;
    int capturing;                 /* inside cuda_graph_begin/end */
};

static inline cuda_state *cuda_st(nn_backend *b)
{
    return (cuda_state *)b->impl;
}

/* ------------------------------------------------------------------------ */
/* checks: every CUDA and cuBLASLt call becomes an error with call/file/line */
/* ------------------------------------------------------------------------ */

static const char *cuda_base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int cuda_fail(gt_error *err, cudaError_t e, const char *call, const char *file,
                     int line)
{
    /* Clears a non-sticky error so the next call does not report it again. */
    (void)cudaGetLastError();
    int code = e == cudaErrorMemoryAllocation ? GT_ENOMEM : GT_EDEVICE;
    return gt_error_set(err, code, "%s failed: %s (%s) at %s:%d", call, cudaGetErrorName(e),
                        cudaGetErrorString(e), cuda_base_name(file), line);
}

static int cublas_fail(gt_error *err, cublasStatus_t s, const char *call, const char *file,
                       int line)
{
    int code = s == CUBLAS_STATUS_ALLOC_FAILED ? GT_ENOMEM
               : s == CUBLAS_STATUS_NOT_SUPPORTED ? GT_EUNSUPPORTED
                                                  : GT_EDEVICE;
    return gt_error_set(err, code, "%s failed: %s (%s) at %s:%d", call,
                        cublasLtGetStatusName(s), cublasLtGetStatusString(s),
                        cuda_base_name(file), line);
}

#define CUDA_TRY(call, err)                                                    \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess)                                                 \
            return cuda_fail((err), e_, #call, __FILE__, __LINE__);            \
    } while (0)

/* A failed cuBLASLt call, worded in err; then `failed` runs with its code
 * in rc_: the two ways on below. */
#define CUBLAS_CHECK_(call, err, failed)                                       \
    do {                                                                       \
        cublasStatus_t s_ = (call);                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                     \
            int rc_ = cublas_fail((err), s_, #call, __FILE__, __LINE__);       \
            failed;                                                            \
        }                                                                      \
    } while (0)

#define CUBLAS_TRY(call, err) CUBLAS_CHECK_(call, err, return rc_)

/* Where something is left to release: the code goes to the caller's rc
 * and control to its label (err is the caller's too). */
#define CUBLAS_TRY_GOTO(call, label) CUBLAS_CHECK_(call, err, rc = rc_; goto label)

/* After every <<<>>> launch: a bad configuration shows up here. */
#define CUDA_LAUNCHED(name, err)                                               \
    do {                                                                       \
        cudaError_t e_ = cudaGetLastError();                                   \
        if (e_ != cudaSuccess)                                                 \
            return cuda_launch_fail((err), e_, (name), __FILE__, __LINE__);    \
    } while (0)

/* The kernel's name is a string, not only a literal: a launcher shared by
 * several kernels (cuda_sb_launch, cuda_softmax_launch) is given it. */
static int cuda_launch_fail(gt_error *err, cudaError_t e, const char *kernel, const char *file,
                            int line)
{
    char call[128];
    snprintf(call, sizeof call, "launch %s", kernel);
    return cuda_fail(err, e, call, file, line);
}

/* ------------------------------------------------------------------------ */
/* the cuBLASLt plan caches (cuda_matmul.cuh, cuda_fixed.cuh)                */
/* ------------------------------------------------------------------------ */

/* Destroys a plan's matrix layouts and operation descriptor: those made (a
 * plan that failed half-way holds NULLs for the rest). */
static void cuda_lt_destroy(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t l0,
                            cublasLtMatrixLayout_t l1, cublasLtMatrixLayout_t l2)
{
    cublasLtMatrixLayout_t layouts[3] = {l0, l1, l2};
    for (int i = 0; i < 3; i++)
        if (layouts[i])
            cublasLtMatrixLayoutDestroy(layouts[i]);
    if (op)
        cublasLtMatmulDescDestroy(op);
}

/* A plan's operation descriptor: fp32 compute and scale, cuBLASLt's A and
 * B transposed or not (the epilogue and the rest are the plan's own). */
static int cuda_lt_op(cublasLtMatmulDesc_t *op, cublasOperation_t trans_a,
                      cublasOperation_t trans_b, gt_error *err)
{
    CUBLAS_TRY(cublasLtMatmulDescCreate(op, CUBLAS_COMPUTE_32F, CUDA_R_32F), err);
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                              sizeof trans_a),
               err);
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                              sizeof trans_b),
               err);
    return GT_OK;
}

/* A plan's heuristic preference: at most `workspace` bytes of workspace,
 * operands aligned to align_a, align_b and align_cd (C and D) bytes.  On
 * failure *pref may be made: the caller destroys it. */
static int cuda_lt_pref(cublasLtMatmulPreference_t *pref, uint64_t workspace, uint32_t align_a,
                        uint32_t align_b, uint32_t align_cd, gt_error *err)
{
    CUBLAS_TRY(cublasLtMatmulPreferenceCreate(pref), err);
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(*pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace, sizeof workspace),
               err);
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
                   *pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a),
               err);
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
                   *pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b),
               err);
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
                   *pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_cd, sizeof align_cd),
               err);
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
                   *pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_cd, sizeof align_cd),
               err);
    return GT_OK;
}

/* Releases every plan of a cache, then the cache. */
template <class Plan>
static void cuda_cache_free(Plan **plans, int *count, int *cap, void (*release)(Plan *))
{
    for (int i = 0; i < *count; i++)
        release(&(*plans)[i]);
    free(*plans);
    *plans = NULL;
    *count = *cap = 0;
}

/* ------------------------------------------------------------------------ */
/* every op runs on its backend's device (a process may hold several)       */
/* ------------------------------------------------------------------------ */

static int cuda_use_device(nn_backend *b, gt_error *err)
{
    int cur = -1;
    int dev = cuda_st(b)->device;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == dev)
        return GT_OK;
    CUDA_TRY(cudaSetDevice(dev), err);
    return GT_OK;
}

/* ON_DEV(fn): fn wrapped to select the backend's device first; what each
 * family registers in the op table (cuda_<family>_ops). */
template <auto Fn> struct cuda_on_device;

template <typename... A, int (*Fn)(nn_backend *, A...)> struct cuda_on_device<Fn> {
    static int call(nn_backend *b, A... a)
    {
        /* every op's last argument is its gt_error * */
        gt_error *err = cuda_last_arg(a...);
        int rc = cuda_use_device(b, err);
        return rc ? rc : Fn(b, a...);
    }
    template <typename T> static gt_error *cuda_last_arg(T t) { return t; }
    template <typename T, typename... R> static gt_error *cuda_last_arg(T, R... r)
    {
        return cuda_last_arg(r...);
    }
};

#define ON_DEV(fn) cuda_on_device<fn>::call

/* ------------------------------------------------------------------------ */
/* launch shapes                                                            */
/* ------------------------------------------------------------------------ */

#define CUDA_THREADS 256
#define CUDA_WARPS_PER_BLOCK (CUDA_THREADS / 32)

/* Grid for a grid-stride loop over n items: enough blocks to fill the
 * machine several times over, never more than the items need, at least 1. */
static inline unsigned cuda_grid(const cuda_state *s, long long n)
{
    long long want = (n + CUDA_THREADS - 1) / CUDA_THREADS;
    long long cap = (long long)s->sm_count * 32;
    if (want > cap)
        want = cap;
    return want < 1 ? 1u : (unsigned)want;
}

/* Blocks of `threads` for one thread per item, n items (n > 0). */
static inline unsigned cuda_blocks(long long n, int threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

/* Blocks for one warp per row. */
static inline unsigned cuda_grid_rows(int rows)
{
    long long g = ((long long)rows + CUDA_WARPS_PER_BLOCK - 1) / CUDA_WARPS_PER_BLOCK;
    return g < 1 ? 1u : (unsigned)g;
}

/* ------------------------------------------------------------------------ */
/* alignment and 16-byte vectors                                            */
/* ------------------------------------------------------------------------ */

static inline int cuda_aligned(const void *p, unsigned bytes)
{
    return ((uintptr_t)p % bytes) == 0;
}

/* A float tensor can take 4-wide (16-byte) accesses when its base is 16-byte
 * aligned and every row starts on a multiple of 4 elements. */
static inline int cuda_vec4_ok(nn_tensor t)
{
    return t.data == NULL || (cuda_aligned(t.data, 16) && t.ld % 4 == 0);
}

/* An output that is fp32 or bf16 (4 bf16 values are 8 bytes). */
static inline int cuda_vec4_out_ok(nn_tensor t)
{
    if (t.dtype != NN_BF16)
        return cuda_vec4_ok(t);
    return t.data == NULL || (cuda_aligned(t.data, 8) && t.ld % 4 == 0);
}

template <int V>
__device__ __forceinline__ void cuda_ld(float (&r)[V], const float *p)
{
    if constexpr (V == 4) {
        float4 q = *reinterpret_cast<const float4 *>(p);
        r[0] = q.x;
        r[1] = q.y;
        r[2] = q.z;
        r[3] = q.w;
    } else {
#pragma unroll
        for (int k = 0; k < V; k++)
            r[k] = p[k];
    }
}

template <int V>
__device__ __forceinline__ void cuda_st(float *p, const float (&r)[V])
{
    if constexpr (V == 4) {
        *reinterpret_cast<float4 *>(p) = make_float4(r[0], r[1], r[2], r[3]);
    } else {
#pragma unroll
        for (int k = 0; k < V; k++)
            p[k] = r[k];
    }
}

/* The same store into bf16, each value rounded as nn_bf16_from_f32 rounds
 * it (the CPU's cast): 4-wide it writes 8 bytes. */
template <int V>
__device__ __forceinline__ void cuda_st(uint16_t *p, const float (&r)[V])
{
    if constexpr (V == 4) {
        uint2 o;
        o.x = (uint32_t)nn_bf16_from_f32(r[0]) | ((uint32_t)nn_bf16_from_f32(r[1]) << 16);
        o.y = (uint32_t)nn_bf16_from_f32(r[2]) | ((uint32_t)nn_bf16_from_f32(r[3]) << 16);
        *reinterpret_cast<uint2 *>(p) = o;
    } else {
#pragma unroll
        for (int k = 0; k < V; k++)
            p[k] = nn_bf16_from_f32(r[k]);
    }
}

/* ------------------------------------------------------------------------ */
/* reductions inside a warp and a block                                     */
/* ------------------------------------------------------------------------ */

/* float or double: the same butterfly */
template <class T> __device__ __forceinline__ T cuda_warp_sum(T v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float cuda_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over a block of CUDA_THREADS threads; every thread gets the result.
 * Deterministic: a fixed tree for a fixed block size. */
__device__ __forceinline__ double cuda_block_sum_d(double v)
{
    __shared__ double part[CUDA_WARPS_PER_BLOCK];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = cuda_warp_sum(v);
    __syncthreads();            /* part may still be read by a previous call */
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    double t = 0.0;
#pragma unroll
    for (int i = 0; i < CUDA_WARPS_PER_BLOCK; i++)
        t += part[i];
    return t;
}

/* ------------------------------------------------------------------------ */
/* 2-D elementwise launcher                                                 */
/* ------------------------------------------------------------------------ */

/* F has  template <int V> __device__ void apply(int i, int j) const  that
 * handles elements (i, j .. j+V-1).  V = 4 when every tensor the functor
 * touches allows 16-byte accesses and cols % 4 == 0. */
template <class F, int V>
__global__ void cuda_ew2d_kernel(F f, int rows, int vcols)
{
    long long n = (long long)rows * vcols;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (long long)gridDim.x * blockDim.x) {
        int i = (int)(t / vcols);
        int jv = (int)(t - (long long)i * vcols);
        f.template apply<V>(i, jv * V);
    }
}

template <class F>
static int cuda_ew2d(cuda_state *s, const F &f, int rows, int cols, int vec_ok,
                     gt_error *err)
{
    if (rows <= 0 || cols <= 0)
        return GT_OK;
    if (vec_ok && cols % 4 == 0) {
        int vcols = cols / 4;
        cuda_ew2d_kernel<F, 4>
            <<<cuda_grid(s, (long long)rows * vcols), CUDA_THREADS, 0, s->stream>>>(f, rows, vcols);
    } else {
        cuda_ew2d_kernel<F, 1>
            <<<cuda_grid(s, (long long)rows * cols), CUDA_THREADS, 0, s->stream>>>(f, rows, cols);
    }
    CUDA_LAUNCHED("cuda_ew2d_kernel", err);
    return GT_OK;
}

/* Row pointer of a view at row i (float, const float or bf16 elements). */
template <class T> __device__ __forceinline__ T *cuda_row(T *p, int ld, int i)
{
    return p + (long long)i * ld;
}

#endif
