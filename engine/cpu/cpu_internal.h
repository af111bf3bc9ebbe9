/* cpu_internal: what the CPU backend's files share: the backend state, row
 * access, the parallel row loop, and each op family's registration.  Not
 * for use outside engine/cpu. */
#ifndef CPU_INTERNAL_H
#define CPU_INTERNAL_H

#include <dnnl.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_fixed.h"
#include "nn_backend.h"
#include "nn_math.h"

/* Below this many elements an op runs on one thread: the fork/join of a
 * parallel region costs more than the work. */
#define CPU_PAR_MIN 32768
#define CPU_CACHE_SLOTS 256

typedef struct cpu_mm_key {
    int m, n, k, lda, ldb, ldc;
    int trans_a, trans_b, bf16, bias, act, accumulate;
} cpu_mm_key;

typedef struct cpu_mm_entry {
    cpu_mm_key key;
    int used;
    unsigned long long last_use;
    dnnl_primitive_t prim;
    dnnl_memory_t mem_a, mem_b, mem_c, mem_bias;
} cpu_mm_entry;

typedef struct cpu_state {
    nn_backend *owner;
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int f32_onednn;        /* 1: fp32 matmuls through oneDNN, 0: OpenBLAS */
    int bf16_native;       /* 1: oneDNN bf16, 0: emulation */
    cpu_mm_entry cache[CPU_CACHE_SLOTS];
    unsigned long long clock;
    float *scratch_a, *scratch_b;   /* emulation: widened bf16 inputs */
    size_t scratch_a_n, scratch_b_n;
    double *red;           /* per-thread partial sums, nthreads of them */
    int nthreads;          /* OpenMP threads at creation; reductions use at
                              most this many so red never overflows */
    cpu_fixed fixed;       /* the fixed-order linear layer (cpu_fixed.c) */
} cpu_state;

static inline cpu_state *cpu_st(nn_backend *b)
{
    return (cpu_state *)b->impl;
}

static inline float *ROW(nn_tensor t, int i)
{
    return (float *)t.data + (size_t)i * (size_t)t.ld;
}

static inline uint16_t *ROWH(nn_tensor t, int i)
{
    return (uint16_t *)t.data + (size_t)i * (size_t)t.ld;
}

static inline long long NUMEL(nn_tensor t)
{
    return (long long)t.rows * t.cols;
}

/* for (int i = 0; i < rows; i++), on all cores when `work` (elements
 * touched) is worth a parallel region.  Each row is one thread's, so a row
 * op's result never depends on the thread count.  (The outer one-pass loop
 * only names the work: _Pragma cannot take a macro argument.) */
#define CPU_FOR_ROWS(i, rows, work)                                                 \
    for (long long cpu_work_ = (long long)(work), cpu_once_ = 1; cpu_once_;         \
         cpu_once_ = 0)                                                             \
    _Pragma("omp parallel for schedule(static) if (cpu_work_ > CPU_PAR_MIN)")        \
    for (int i = 0; i < (rows); i++)

/* The loop of an elementwise op: for every element (i, j) of y, with
 * `a` = x1[i, j] and `c` = x2[i, j] in scope, y[i, j] = (expr).  y may alias
 * either input (each element is read before it is written).  One macro so
 * that each op's code is its formula alone. */
#define CPU_EW(y, x1, x2, expr)                                                     \
    CPU_FOR_ROWS(i_, (y).rows, NUMEL(y))                                            \
    {                                                                               \
        const float *r1_ = ROW(x1, i_), *r2_ = ROW(x2, i_);                         \
        float *ry_ = ROW(y, i_);                                                    \
        for (int j_ = 0; j_ < (y).cols; j_++) {                                     \
            const float a = r1_[j_], c = r2_[j_];                                   \
            (void)c;                                                                \
            ry_[j_] = (expr);                                                       \
        }                                                                           \
    }

/* An op's signature names the backend and the error even when, as on the
 * CPU, the op needs neither. */
#define CPU_UNUSED(b, err) ((void)(b), (void)(err))

/* Columns [*j0, *j1) of `cols` that thread tid of nt owns (column sums:
 * each thread adds whole columns, so the order within one is fixed). */
static inline void cpu_thread_cols(int cols, int tid, int nt, int *j0, int *j1)
{
    *j0 = (int)((long long)cols * tid / nt);
    *j1 = (int)((long long)cols * (tid + 1) / nt);
}

/* Each op family fills its entries of the table (one file per family,
 * like engine/cuda's headers). */
void cpu_copy_ops(nn_backend_ops *o);       /* concat, split, zero_outside */
void cpu_matmul_ops(nn_backend_ops *o);     /* matmul (oneDNN / OpenBLAS) */
void cpu_act_ops(nn_backend_ops *o);        /* silu, leaky, add, mul, cast, axpby, affine */
void cpu_embed_ops(nn_backend_ops *o);
void cpu_layernorm_ops(nn_backend_ops *o);
void cpu_reduce_ops(nn_backend_ops *o);     /* bias_grad, mse, mean, sumsq */
void cpu_softmax_ops(nn_backend_ops *o);
void cpu_route_ops(nn_backend_ops *o);      /* top-k, gather/scatter, router losses */
void cpu_stick_ops(nn_backend_ops *o);
void cpu_adamw_ops(nn_backend_ops *o);
void cpu_rng_ops(nn_backend_ops *o);        /* rand_fill (rand_rows: the generic loop) */
void cpu_fixed_ops(nn_backend_ops *o);      /* pack_bytes, pack_weight, linear_fixed */

/* cpu_matmul.c: the matmul cache's teardown, and whether oneDNN builds a
 * bf16 product on this machine. */
void cpu_matmul_release(cpu_state *s);
int cpu_matmul_onednn_bf16(cpu_state *s);

/* cpu_reduce.c: the sum of the per-thread partials, in thread order. */
double cpu_reduce_finish(cpu_state *s, int used);

#endif
