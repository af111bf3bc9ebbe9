/* nn_cpu: the CPU backend.
 *
 * Matrix products: fp32 through OpenBLAS cblas_sgemm or oneDNN (chosen at
 * creation, see cpu_choose_f32; the faster on this machine is the default),
 * bf16 through oneDNN's matmul (bf16 inputs, fp32 accumulation and output)
 * when the CPU has AVX512-BF16, otherwise by widening the (already rounded)
 * bf16 inputs to fp32 exactly and calling sgemm: a bit-faithful emulation
 * of "bf16 inputs, fp32 accumulation".  oneDNN primitives are created once
 * per shape and kept in a small cache, so a step after warm-up creates none.
 *
 * Elementwise and row ops run on all cores with OpenMP; the arithmetic is
 * nn_math.h's, shared with the CUDA kernels.  Reductions accumulate in
 * double, per thread in a fixed static partition, then in thread order, so
 * results are deterministic for a given thread count.
 *
 * The sampler's matmuls go through the fixed-order linear layer instead
 * (nn_cpu_fixed.c): the same bits whatever the batch, threads or CPU.
 *
 * Environment (read once at creation; for benchmarks and tests):
 *   GIANT_CPU_SGEMM=openblas|onednn   fp32 matmul library
 *   GIANT_CPU_BF16=native|emulate     force the bf16 path (both layers)
 *   GIANT_CPU_KERNEL=avx2|scalar      lower the fixed-order kernels' ISA */
#include "nn_backend.h"
#include "nn_cpu_fixed.h"
#include "nn_rng.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Below this many elements an op runs on one thread: the fork/join of a
 * parallel region costs more than the work. */
#define CPU_PAR_MIN 32768
#define CPU_CACHE_SLOTS 256

typedef struct mm_key {
    int m, n, k, lda, ldb, ldc;
    int trans_a, trans_b, bf16, bias, act, accumulate;
} mm_key;

typedef struct mm_entry {
    mm_key key;
    int used;
    unsigned long long last_use;
    dnnl_primitive_t prim;
    dnnl_memory_t mem_a, mem_b, mem_c, mem_bias;
} mm_entry;

typedef struct cpu_state {
    nn_backend *owner;
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int f32_onednn;        /* 1: fp32 matmuls through oneDNN, 0: OpenBLAS */
    int bf16_native;       /* 1: oneDNN bf16, 0: emulation */
    mm_entry cache[CPU_CACHE_SLOTS];
    unsigned long long clock;
    float *scratch_a, *scratch_b;   /* emulation: widened bf16 inputs */
    size_t scratch_a_n, scratch_b_n;
    double *red;           /* per-thread partial sums, nthreads of them */
    int nthreads;          /* OpenMP threads at creation; reductions use at
                              most this many so red never overflows */
    cpu_fixed fixed;       /* the fixed-order linear layer (nn_cpu_fixed.c) */
} cpu_state;

static cpu_state *ST(nn_backend *b)
{
    return (cpu_state *)b->impl;
}

/* ------------------------------------------------------------------------ */
/* memory: a 64-byte header in front of each block records its size         */
/* ------------------------------------------------------------------------ */

#define CPU_HDR 64

static int cpu_alloc(nn_backend *b, size_t bytes, void **out, gt_error *err)
{
    size_t total = CPU_HDR + ((bytes + 63) & ~(size_t)63);
    void *p = NULL;
    *out = NULL;
    if (total < bytes || posix_memalign(&p, 64, total))
        return gt_error_set(err, GT_ENOMEM, "cpu: cannot allocate %zu bytes", bytes);
    *(size_t *)p = bytes;
    b->alloc_count++;
    b->bytes_live += bytes;
    *out = (char *)p + CPU_HDR;
    return GT_OK;
}

static void cpu_free(nn_backend *b, void *p)
{
    if (!p)
        return;
    char *base = (char *)p - CPU_HDR;
    b->bytes_live -= *(size_t *)base;
    free(base);
}

static int cpu_memset(nn_backend *b, void *p, int value, size_t bytes, gt_error *err)
{
    (void)b;
    (void)err;
    memset(p, value, bytes);
    return GT_OK;
}

static int cpu_copy(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err)
{
    (void)b;
    (void)err;
    memmove(dst, src, bytes);
    return GT_OK;
}

static int cpu_sync(nn_backend *b, gt_error *err)
{
    (void)b;
    (void)err;
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */
/* ------------------------------------------------------------------------ */

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

/* Partial sums in double: each thread owns part[tid]; summed in order. */
static double cpu_reduce_finish(cpu_state *s, int used)
{
    double acc = 0.0;
    for (int i = 0; i < used; i++)
        acc += s->red[i];
    return acc;
}

/* ------------------------------------------------------------------------ */
/* matmul                                                                   */
/* ------------------------------------------------------------------------ */

static int dnnl_fail(gt_error *err, const char *what, dnnl_status_t st)
{
    return gt_error_set(err, GT_EDEVICE, "cpu: oneDNN %s failed (status %d)", what, (int)st);
}

static void mm_entry_release(mm_entry *e)
{
    if (!e->used)
        return;
    if (e->prim)
        dnnl_primitive_destroy(e->prim);
    if (e->mem_a)
        dnnl_memory_destroy(e->mem_a);
    if (e->mem_b)
        dnnl_memory_destroy(e->mem_b);
    if (e->mem_c)
        dnnl_memory_destroy(e->mem_c);
    if (e->mem_bias)
        dnnl_memory_destroy(e->mem_bias);
    memset(e, 0, sizeof *e);
}

static int mm_entry_build(cpu_state *s, mm_entry *e, const mm_key *k, gt_error *err)
{
    dnnl_status_t st;
    dnnl_data_type_t in_t = k->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t a_md, b_md, c_md, bias_md;
    dnnl_dims_t a_dims = {k->m, k->k}, b_dims = {k->k, k->n}, c_dims = {k->m, k->n};
    dnnl_dims_t bias_dims = {1, k->n};
    /* op(A) is m x k: stored m x k (row-major) or k x m when transposed. */
    dnnl_dims_t a_str = {k->trans_a ? 1 : k->lda, k->trans_a ? k->lda : 1};
    dnnl_dims_t b_str = {k->trans_b ? 1 : k->ldb, k->trans_b ? k->ldb : 1};
    dnnl_dims_t c_str = {k->ldc, 1};
    dnnl_dims_t bias_str = {k->n, 1};
    memset(e, 0, sizeof *e);
    if ((st = dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, in_t, a_str)) ||
        (st = dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, in_t, b_str)) ||
        (st = dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_str)) ||
        (st = dnnl_memory_desc_init_by_strides(&bias_md, 2, bias_dims, dnnl_f32, bias_str)))
        return dnnl_fail(err, "memory descriptor", st);
    dnnl_matmul_desc_t md;
    if ((st = dnnl_matmul_desc_init(&md, &a_md, &b_md, k->bias ? &bias_md : NULL, &c_md)))
        return dnnl_fail(err, "matmul descriptor", st);
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int rc = GT_OK;
    if ((st = dnnl_post_ops_create(&po)) || (st = dnnl_primitive_attr_create(&attr))) {
        rc = dnnl_fail(err, "attributes", st);
        goto done;
    }
    if (k->accumulate && (st = dnnl_post_ops_append_sum(po, 1.0f))) {
        rc = dnnl_fail(err, "sum post-op", st);
        goto done;
    }
    if (k->act == NN_ACT_SILU &&
        (st = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f))) {
        rc = dnnl_fail(err, "swish post-op", st);
        goto done;
    }
    if ((st = dnnl_primitive_attr_set_post_ops(attr, po))) {
        rc = dnnl_fail(err, "set post-ops", st);
        goto done;
    }
    if ((st = dnnl_primitive_desc_create(&pd, &md, attr, s->eng, NULL))) {
        rc = dnnl_fail(err, "matmul primitive descriptor", st);
        goto done;
    }
    if ((st = dnnl_primitive_create(&e->prim, pd))) {
        rc = dnnl_fail(err, "matmul primitive", st);
        goto done;
    }
    e->used = 1;
    /* Memory objects are created once with no buffer and pointed at the
     * caller's data on every execution. */
    if ((st = dnnl_memory_create(&e->mem_a, &a_md, s->eng, DNNL_MEMORY_NONE)) ||
        (st = dnnl_memory_create(&e->mem_b, &b_md, s->eng, DNNL_MEMORY_NONE)) ||
        (st = dnnl_memory_create(&e->mem_c, &c_md, s->eng, DNNL_MEMORY_NONE)) ||
        (k->bias && (st = dnnl_memory_create(&e->mem_bias, &bias_md, s->eng,
                                             DNNL_MEMORY_NONE)))) {
        mm_entry_release(e);
        rc = dnnl_fail(err, "memory object", st);
        goto done;
    }
    e->key = *k;
done:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (po)
        dnnl_post_ops_destroy(po);
    return rc;
}

static int mm_onednn(cpu_state *s, const mm_key *k, void *c, const void *a, const void *bm,
                     const float *bias, gt_error *err)
{
    mm_entry *e = NULL, *victim = &s->cache[0];
    for (int i = 0; i < CPU_CACHE_SLOTS; i++) {
        mm_entry *x = &s->cache[i];
        if (x->used && !memcmp(&x->key, k, sizeof *k)) {
            e = x;
            break;
        }
        if (!x->used || (victim->used && x->last_use < victim->last_use))
            victim = x;
    }
    if (!e) {
        mm_entry_release(victim);
        int rc = mm_entry_build(s, victim, k, err);
        if (rc)
            return rc;
        e = victim;
        s->owner->plan_count++;
    }
    e->last_use = ++s->clock;
    dnnl_status_t st;
    if ((st = dnnl_memory_set_data_handle(e->mem_a, (void *)a)) ||
        (st = dnnl_memory_set_data_handle(e->mem_b, (void *)bm)) ||
        (st = dnnl_memory_set_data_handle(e->mem_c, c)) ||
        (k->bias && (st = dnnl_memory_set_data_handle(e->mem_bias, (void *)bias))))
        return dnnl_fail(err, "set data handle", st);
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, e->mem_a},
        {DNNL_ARG_WEIGHTS, e->mem_b},
        {DNNL_ARG_DST, e->mem_c},
        {DNNL_ARG_BIAS, e->mem_bias},
    };
    if ((st = dnnl_primitive_execute(e->prim, s->stream, k->bias ? 4 : 3, args)))
        return dnnl_fail(err, "matmul execute", st);
    if ((st = dnnl_stream_wait(s->stream)))
        return dnnl_fail(err, "stream wait", st);
    return GT_OK;
}

/* Grows a scratch buffer (host malloc, outside the counted allocator: it
 * reaches its final size in the first step and never moves after). */
static int scratch_reserve(float **p, size_t *cap, size_t n, gt_error *err)
{
    if (n <= *cap)
        return GT_OK;
    void *q = NULL;
    if (posix_memalign(&q, 64, n * sizeof(float)))
        return gt_error_set(err, GT_ENOMEM, "cpu: cannot allocate %zu-float scratch", n);
    free(*p);
    *p = (float *)q;
    *cap = n;
    return GT_OK;
}

static void widen_bf16(float *dst, nn_tensor t)
{
    int rows = t.rows, cols = t.cols;
#pragma omp parallel for schedule(static) if (NUMEL(t) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const uint16_t *src = ROWH(t, i);
        float *d = dst + (size_t)i * cols;
        for (int j = 0; j < cols; j++)
            d[j] = nn_f32_from_bf16(src[j]);
    }
}

/* Epilogue for the BLAS path: bias and activation over C. */
static void mm_epilogue(nn_tensor c, const float *bias, nn_act act)
{
    int rows = c.rows, cols = c.cols;
#pragma omp parallel for schedule(static) if (NUMEL(c) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        float *r = ROW(c, i);
        if (bias)
            for (int j = 0; j < cols; j++)
                r[j] += bias[j];
        if (act == NN_ACT_SILU)
            for (int j = 0; j < cols; j++)
                r[j] = nn_silu(r[j]);
    }
}

static int cpu_matmul(nn_backend *b, nn_tensor c, nn_tensor a, int trans_a, nn_tensor bm,
                      int trans_b, const float *bias, nn_act act, int accumulate,
                      gt_error *err)
{
    cpu_state *s = ST(b);
    int m = c.rows, n = c.cols, k = trans_a ? a.rows : a.cols;
    int bf16 = a.dtype == NN_BF16;
    if (k == 0) {
        /* nothing to multiply: C = bias (or unchanged + bias) */
        if (!accumulate)
            for (int i = 0; i < m; i++)
                memset(ROW(c, i), 0, (size_t)n * sizeof(float));
        mm_epilogue(c, bias, act);
        return GT_OK;
    }
    if ((bf16 && s->bf16_native) || (!bf16 && s->f32_onednn)) {
        mm_key key;
        memset(&key, 0, sizeof key);
        key.m = m;
        key.n = n;
        key.k = k;
        key.lda = a.ld;
        key.ldb = bm.ld;
        key.ldc = c.ld;
        key.trans_a = !!trans_a;
        key.trans_b = !!trans_b;
        key.bf16 = bf16;
        key.bias = bias != NULL;
        key.act = (int)act;
        key.accumulate = !!accumulate;
        return mm_onednn(s, &key, c.data, a.data, bm.data, bias, err);
    }
    const float *pa = (const float *)a.data, *pb = (const float *)bm.data;
    int lda = a.ld, ldb = bm.ld;
    if (bf16) {
        /* Emulation: the inputs are bf16 values already; widening is exact,
         * and sgemm accumulates their products in fp32. */
        int rc;
        if ((rc = scratch_reserve(&s->scratch_a, &s->scratch_a_n, (size_t)NUMEL(a), err)) ||
            (rc = scratch_reserve(&s->scratch_b, &s->scratch_b_n, (size_t)NUMEL(bm), err)))
            return rc;
        widen_bf16(s->scratch_a, a);
        widen_bf16(s->scratch_b, bm);
        pa = s->scratch_a;
        pb = s->scratch_b;
        lda = a.cols > 0 ? a.cols : 1;
        ldb = bm.cols > 0 ? bm.cols : 1;
    }
    float beta = accumulate ? 1.0f : 0.0f;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, pa, lda, pb, ldb, beta,
                (float *)c.data, c.ld);
    if (bias || act != NN_ACT_NONE)
        mm_epilogue(c, bias, act);
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* column sums (bias grads, LayerNorm param grads): threads own columns     */
/* ------------------------------------------------------------------------ */

static int cpu_bias_grad(nn_backend *b, float *db, nn_tensor dy, int accumulate, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = dy.rows, cols = dy.cols;
#pragma omp parallel if (NUMEL(dy) > CPU_PAR_MIN)
    {
        int nt = omp_get_num_threads(), tid = omp_get_thread_num();
        int j0 = (int)((long long)cols * tid / nt), j1 = (int)((long long)cols * (tid + 1) / nt);
        if (!accumulate)
            for (int j = j0; j < j1; j++)
                db[j] = 0.0f;
        for (int i = 0; i < rows; i++) {
            const float *r = ROW(dy, i);
            for (int j = j0; j < j1; j++)
                db[j] += r[j];
        }
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* activations                                                              */
/* ------------------------------------------------------------------------ */

static int cpu_silu_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
#pragma omp parallel for schedule(static) if (NUMEL(x) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *xr = ROW(x, i);
        float *yr = ROW(y, i);
        for (int j = 0; j < cols; j++)
            yr[j] = nn_silu(xr[j]);
    }
    return GT_OK;
}

static int cpu_silu_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
#pragma omp parallel for schedule(static) if (NUMEL(x) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *xr = ROW(x, i), *dyr = ROW(dy, i);
        float *dxr = ROW(dx, i);
        for (int j = 0; j < cols; j++)
            dxr[j] = dyr[j] * nn_silu_grad(xr[j]);
    }
    return GT_OK;
}

static int cpu_leaky_fwd(nn_backend *b, nn_tensor y, nn_tensor x, float slope, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
#pragma omp parallel for schedule(static) if (NUMEL(x) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *xr = ROW(x, i);
        float *yr = ROW(y, i);
        for (int j = 0; j < cols; j++)
            yr[j] = nn_leaky(xr[j], slope);
    }
    return GT_OK;
}

static int cpu_leaky_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor x, float slope,
                         gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
#pragma omp parallel for schedule(static) if (NUMEL(x) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *xr = ROW(x, i), *dyr = ROW(dy, i);
        float *dxr = ROW(dx, i);
        for (int j = 0; j < cols; j++)
            dxr[j] = dyr[j] * nn_leaky_grad(xr[j], slope);
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* LayerNorm                                                                */
/* ------------------------------------------------------------------------ */

static int cpu_ln_fwd(nn_backend *b, nn_tensor y, float *mean, float *rstd, nn_tensor x,
                      const float *gamma, const float *beta, float eps, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
#pragma omp parallel for schedule(static) if (NUMEL(x) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *xr = ROW(x, i);
        float *yr = ROW(y, i);
        float mu, rs;
        nn_ln_row_stats(xr, cols, eps, &mu, &rs);
        for (int j = 0; j < cols; j++)
            yr[j] = nn_ln_elem(xr[j], mu, rs, gamma[j], beta[j]);
        mean[i] = mu;
        rstd[i] = rs;
    }
    return GT_OK;
}

static int cpu_ln_bwd(nn_backend *b, nn_tensor dx, float *dgamma, float *dbeta, nn_tensor dy,
                      nn_tensor x, const float *mean, const float *rstd, const float *gamma,
                      int accumulate_dx, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
#pragma omp parallel if (NUMEL(x) > CPU_PAR_MIN)
    {
#pragma omp for schedule(static)
        for (int i = 0; i < rows; i++)
            nn_ln_row_bwd(ROW(x, i), ROW(dy, i), gamma, mean[i], rstd[i], cols, ROW(dx, i),
                          accumulate_dx);
        /* parameter grads: each thread owns a block of columns */
        int nt = omp_get_num_threads(), tid = omp_get_thread_num();
        int j0 = (int)((long long)cols * tid / nt), j1 = (int)((long long)cols * (tid + 1) / nt);
        for (int i = 0; i < rows; i++) {
            const float *xr = ROW(x, i), *dyr = ROW(dy, i);
            float mu = mean[i], rs = rstd[i];
            for (int j = j0; j < j1; j++) {
                dgamma[j] += dyr[j] * (xr[j] - mu) * rs;
                dbeta[j] += dyr[j];
            }
        }
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* add, concat, split                                                       */
/* ------------------------------------------------------------------------ */

static int cpu_add(nn_backend *b, nn_tensor y, nn_tensor x1, nn_tensor x2, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = y.rows, cols = y.cols;
#pragma omp parallel for schedule(static) if (NUMEL(y) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *a = ROW(x1, i), *c = ROW(x2, i);
        float *r = ROW(y, i);
        for (int j = 0; j < cols; j++)
            r[j] = a[j] + c[j];
    }
    return GT_OK;
}

static int cpu_concat(nn_backend *b, nn_tensor y, const nn_tensor *parts, int nparts,
                      gt_error *err)
{
    (void)b;
    (void)err;
    int rows = y.rows;
#pragma omp parallel for schedule(static) if (NUMEL(y) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        float *r = ROW(y, i);
        for (int p = 0; p < nparts; p++) {
            if (parts[p].data)
                memcpy(r, ROW(parts[p], i), (size_t)parts[p].cols * sizeof(float));
            r += parts[p].cols;
        }
    }
    return GT_OK;
}

static int cpu_split(nn_backend *b, nn_tensor *parts, int nparts, nn_tensor y, int accumulate,
                     gt_error *err)
{
    (void)b;
    (void)err;
    int rows = y.rows;
#pragma omp parallel for schedule(static) if (NUMEL(y) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *r = ROW(y, i);
        for (int p = 0; p < nparts; p++) {
            int pc = parts[p].cols;
            if (parts[p].data) {
                float *d = ROW(parts[p], i);
                if (accumulate)
                    for (int j = 0; j < pc; j++)
                        d[j] += r[j];
                else
                    memcpy(d, r, (size_t)pc * sizeof(float));
            }
            r += pc;
        }
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* sinusoidal embedding                                                     */
/* ------------------------------------------------------------------------ */

static int cpu_embed_fwd(nn_backend *b, nn_tensor y, nn_tensor cond, int emb_dim, float scale,
                         float max_period, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = cond.rows, nc = cond.cols;
#pragma omp parallel for schedule(static) if (NUMEL(y) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *cr = ROW(cond, i);
        float *yr = ROW(y, i);
        for (int c = 0; c < nc; c++)
            for (int j = 0; j < emb_dim; j++)
                yr[c * emb_dim + j] = nn_embed_elem(cr[c] * scale, j, emb_dim, max_period);
    }
    return GT_OK;
}

static int cpu_embed_bwd(nn_backend *b, nn_tensor dcond, nn_tensor dy, nn_tensor cond,
                         int emb_dim, float scale, float max_period, int accumulate,
                         gt_error *err)
{
    (void)b;
    (void)err;
    int rows = cond.rows, nc = cond.cols;
#pragma omp parallel for schedule(static) if (NUMEL(dy) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *cr = ROW(cond, i), *dyr = ROW(dy, i);
        float *dr = ROW(dcond, i);
        for (int c = 0; c < nc; c++) {
            float acc = 0.0f;
            for (int j = 0; j < emb_dim; j++)
                acc += dyr[c * emb_dim + j] *
                       nn_embed_elem_grad(cr[c] * scale, j, emb_dim, max_period);
            acc *= scale;
            dr[c] = accumulate ? dr[c] + acc : acc;
        }
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* softmax                                                                  */
/* ------------------------------------------------------------------------ */

static int cpu_softmax_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
#pragma omp parallel for schedule(static) if (NUMEL(x) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++)
        nn_softmax_row(ROW(x, i), ROW(y, i), cols);
    return GT_OK;
}

static int cpu_softmax_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor y,
                           gt_error *err)
{
    (void)b;
    (void)err;
    int rows = y.rows, cols = y.cols;
#pragma omp parallel for schedule(static) if (NUMEL(y) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *yr = ROW(y, i), *dyr = ROW(dy, i);
        float *dxr = ROW(dx, i);
        float s = 0.0f;
        for (int j = 0; j < cols; j++)
            s += dyr[j] * yr[j];
        for (int j = 0; j < cols; j++)
            dxr[j] = yr[j] * (dyr[j] - s);
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* routing                                                                  */
/* ------------------------------------------------------------------------ */

static int cpu_topk_fwd(nn_backend *b, int32_t *idx, float *w, nn_tensor probs, int k,
                        gt_error *err)
{
    (void)b;
    (void)err;
    for (int i = 0; i < probs.rows; i++)
        nn_topk_row(ROW(probs, i), probs.cols, k, idx + (size_t)i * k, w + (size_t)i * k);
    return GT_OK;
}

static int cpu_topk_bwd(nn_backend *b, nn_tensor dprobs, const float *dw, const int32_t *idx,
                        const float *w, nn_tensor probs, int k, int accumulate, gt_error *err)
{
    (void)b;
    (void)err;
    for (int i = 0; i < probs.rows; i++)
        nn_topk_bwd_row(ROW(probs, i), idx + (size_t)i * k, w + (size_t)i * k,
                        dw + (size_t)i * k, probs.cols, k, accumulate, ROW(dprobs, i));
    return GT_OK;
}

static int cpu_gather_rows(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                           const float *scale, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = y.rows, cols = y.cols;
#pragma omp parallel for schedule(static) if (NUMEL(y) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *src = ROW(x, idx[i]);
        float *d = ROW(y, i);
        if (scale) {
            float s = scale[i];
            for (int j = 0; j < cols; j++)
                d[j] = s * src[j];
        } else {
            memcpy(d, src, (size_t)cols * sizeof(float));
        }
    }
    return GT_OK;
}

static int cpu_scatter_add_rows(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                                const float *scale, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
    /* idx does not repeat within a call, so rows can be split across threads */
#pragma omp parallel for schedule(static) if (NUMEL(x) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *src = ROW(x, i);
        float *d = ROW(y, idx[i]);
        float s = scale ? scale[i] : 1.0f;
        for (int j = 0; j < cols; j++)
            d[j] += s * src[j];
    }
    return GT_OK;
}

static int cpu_gather_dot(nn_backend *b, float *out, nn_tensor a, const int32_t *idx,
                          nn_tensor x, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
#pragma omp parallel for schedule(static) if (NUMEL(x) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *ar = ROW(a, idx[i]), *xr = ROW(x, i);
        double acc = 0.0;
        for (int j = 0; j < cols; j++)
            acc += (double)ar[j] * xr[j];
        out[i] = (float)acc;
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* router losses                                                            */
/* ------------------------------------------------------------------------ */

static int cpu_balance_fwd(nn_backend *b, float *loss, nn_tensor probs, const float *frac,
                           gt_error *err)
{
    (void)b;
    (void)err;
    int rows = probs.rows, E = probs.cols;
    double acc = 0.0;
    for (int e = 0; e < E; e++) {
        double pe = 0.0;
        for (int i = 0; i < rows; i++)
            pe += ROW(probs, i)[e];
        acc += (double)frac[e] * (pe / rows);
    }
    *loss = (float)(E * acc);
    return GT_OK;
}

static int cpu_balance_bwd(nn_backend *b, nn_tensor dprobs, float dloss, const float *frac,
                           gt_error *err)
{
    (void)b;
    (void)err;
    int rows = dprobs.rows, E = dprobs.cols;
    for (int i = 0; i < rows; i++) {
        float *d = ROW(dprobs, i);
        for (int e = 0; e < E; e++)
            d[e] += dloss * (float)E * frac[e] / (float)rows;
    }
    return GT_OK;
}

static int cpu_entropy_fwd(nn_backend *b, float *loss, nn_tensor probs, gt_error *err)
{
    (void)b;
    (void)err;
    double acc = 0.0;
    for (int i = 0; i < probs.rows; i++) {
        const float *p = ROW(probs, i);
        for (int e = 0; e < probs.cols; e++)
            acc += nn_entropy_term(p[e]);
    }
    *loss = (float)(acc / probs.rows);
    return GT_OK;
}

static int cpu_entropy_bwd(nn_backend *b, nn_tensor dprobs, float dloss, nn_tensor probs,
                           gt_error *err)
{
    (void)b;
    (void)err;
    float s = dloss / (float)probs.rows;
    for (int i = 0; i < probs.rows; i++) {
        const float *p = ROW(probs, i);
        float *d = ROW(dprobs, i);
        for (int e = 0; e < probs.cols; e++)
            d[e] += s * nn_entropy_grad(p[e]);
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* losses and reductions                                                    */
/* ------------------------------------------------------------------------ */

static int cpu_mse_fwd(nn_backend *b, float *loss, nn_tensor pred, nn_tensor target,
                       gt_error *err)
{
    (void)err;
    cpu_state *s = ST(b);
    int rows = pred.rows, cols = pred.cols, used = 1;
#pragma omp parallel if (NUMEL(pred) > CPU_PAR_MIN) num_threads(s->nthreads)
    {
        int nt = omp_get_num_threads(), tid = omp_get_thread_num();
        int i0 = (int)((long long)rows * tid / nt), i1 = (int)((long long)rows * (tid + 1) / nt);
        double acc = 0.0;
        for (int i = i0; i < i1; i++) {
            const float *p = ROW(pred, i), *t = ROW(target, i);
            float racc = 0.0f;
            for (int j = 0; j < cols; j++) {
                float d = p[j] - t[j];
                racc += d * d;
            }
            acc += racc;
        }
        s->red[tid] = acc;
#pragma omp single
        used = nt;
    }
    *loss = (float)(cpu_reduce_finish(s, used) / ((double)rows * cols));
    return GT_OK;
}

static int cpu_mse_bwd(nn_backend *b, nn_tensor dpred, float dloss, nn_tensor pred,
                       nn_tensor target, int accumulate, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = pred.rows, cols = pred.cols;
    float sc = 2.0f * dloss / (float)((double)rows * cols);
#pragma omp parallel for schedule(static) if (NUMEL(pred) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *p = ROW(pred, i), *t = ROW(target, i);
        float *d = ROW(dpred, i);
        for (int j = 0; j < cols; j++) {
            float g = sc * (p[j] - t[j]);
            d[j] = accumulate ? d[j] + g : g;
        }
    }
    return GT_OK;
}

static int cpu_mean_fwd(nn_backend *b, float *out, nn_tensor x, gt_error *err)
{
    (void)b;
    (void)err;
    double acc = 0.0;
    for (int i = 0; i < x.rows; i++) {
        const float *r = ROW(x, i);
        for (int j = 0; j < x.cols; j++)
            acc += r[j];
    }
    *out = (float)(acc / ((double)x.rows * x.cols));
    return GT_OK;
}

static int cpu_mean_bwd(nn_backend *b, nn_tensor dx, float dout, int accumulate, gt_error *err)
{
    (void)b;
    (void)err;
    float g = dout / (float)((double)dx.rows * dx.cols);
    for (int i = 0; i < dx.rows; i++) {
        float *r = ROW(dx, i);
        for (int j = 0; j < dx.cols; j++)
            r[j] = accumulate ? r[j] + g : g;
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* stick-breaking                                                           */
/* ------------------------------------------------------------------------ */

static int cpu_sb_fwd(nn_backend *b, nn_tensor f, nn_tensor z, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = f.rows, L = f.cols;
#pragma omp parallel for schedule(static) if (NUMEL(f) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++)
        nn_sb_fwd_row(ROW(z, i), ROW(f, i), L);
    return GT_OK;
}

/* The per-row scratch of L floats: stack storage up to a size, beyond it a
 * single heap block per call (a rare, huge-L case). */
#define CPU_SB_STACK 512

static int cpu_sb_bwd(nn_backend *b, nn_tensor dz, nn_tensor df, nn_tensor z, int accumulate,
                      gt_error *err)
{
    (void)b;
    int rows = df.rows, L = df.cols, nomem = 0;
#pragma omp parallel if (NUMEL(df) > CPU_PAR_MIN)
    {
        float stack[CPU_SB_STACK];
        float *scratch = L <= CPU_SB_STACK ? stack : malloc((size_t)L * sizeof(float));
        if (!scratch) {
#pragma omp atomic write
            nomem = 1;
        } else {
#pragma omp for schedule(static)
            for (int i = 0; i < rows; i++)
                nn_sb_bwd_row(ROW(z, i), ROW(df, i), ROW(dz, i), L, scratch, accumulate);
            if (scratch != stack)
                free(scratch);
        }
    }
    if (nomem)
        return gt_error_set(err, GT_ENOMEM, "sb_bwd: no memory for %d-float scratch", L);
    return GT_OK;
}

static int cpu_sb_inv(nn_backend *b, nn_tensor z, nn_tensor f, float eps, gt_error *err)
{
    (void)b;
    int rows = f.rows, L = f.cols, nomem = 0;
#pragma omp parallel if (NUMEL(f) > CPU_PAR_MIN)
    {
        float stack[CPU_SB_STACK];
        float *scratch = L <= CPU_SB_STACK ? stack : malloc((size_t)L * sizeof(float));
        if (!scratch) {
#pragma omp atomic write
            nomem = 1;
        } else {
#pragma omp for schedule(static)
            for (int i = 0; i < rows; i++)
                nn_sb_inv_row(ROW(f, i), ROW(z, i), L, eps, scratch);
            if (scratch != stack)
                free(scratch);
        }
    }
    if (nomem)
        return gt_error_set(err, GT_ENOMEM, "sb_inv: no memory for %d-float scratch", L);
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* precision, optimizer, random                                             */
/* ------------------------------------------------------------------------ */

static int cpu_cast_bf16(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    (void)b;
    (void)err;
    int rows = x.rows, cols = x.cols;
#pragma omp parallel for schedule(static) if (NUMEL(x) > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *xr = ROW(x, i);
        uint16_t *yr = ROWH(y, i);
        for (int j = 0; j < cols; j++)
            yr[j] = nn_bf16_from_f32(xr[j]);
    }
    return GT_OK;
}

static int cpu_sumsq(nn_backend *b, float *out, const float *x, size_t n, gt_error *err)
{
    (void)err;
    cpu_state *s = ST(b);
    int used = 1;
#pragma omp parallel if (n > CPU_PAR_MIN) num_threads(s->nthreads)
    {
        int nt = omp_get_num_threads(), tid = omp_get_thread_num();
        size_t i0 = n * (size_t)tid / (size_t)nt, i1 = n * (size_t)(tid + 1) / (size_t)nt;
        double acc = 0.0;
        /* blocks of fp32 partial sums, folded into double */
        for (size_t i = i0; i < i1; i += 4096) {
            size_t e = i + 4096 < i1 ? i + 4096 : i1;
            float part = 0.0f;
            for (size_t j = i; j < e; j++)
                part += x[j] * x[j];
            acc += part;
        }
        s->red[tid] = acc;
#pragma omp single
        used = nt;
    }
    *out = (float)cpu_reduce_finish(s, used);
    return GT_OK;
}

static int cpu_adamw(nn_backend *b, float *param, uint16_t *param_bf16, const float *grad,
                     float *m, float *v, size_t n, const nn_adamw_hp *hp, gt_error *err)
{
    (void)b;
    (void)err;
    nn_adamw_hp h = *hp;
    long long nn = (long long)n;
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
    for (long long i = 0; i < nn; i++) {
        nn_adamw_elem(&param[i], &m[i], &v[i], grad[i], &h);
        if (param_bf16)
            param_bf16[i] = nn_bf16_from_f32(param[i]);
    }
    return GT_OK;
}

static int cpu_rand_fill(nn_backend *b, float *x, size_t n, nn_dist dist, float a, float bb,
                         uint64_t seed, uint64_t stream, uint64_t offset, gt_error *err)
{
    (void)b;
    (void)err;
    long long nblocks = (long long)nn_rng_blocks(n);
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
    for (long long q = 0; q < nblocks; q++) {
        uint32_t r[4];
        nn_rng_block(seed, stream, offset + (uint64_t)q, r);
        for (int lane = 0; lane < 4; lane++) {
            size_t i = (size_t)q * 4 + (size_t)lane;
            if (i < n)
                x[i] = nn_rng_fill_elem(r, lane, (int)dist, a, bb);
        }
    }
    return GT_OK;
}

static int cpu_axpby_rows(nn_backend *b, nn_tensor y, const float *alpha, nn_tensor x,
                          const float *beta, nn_tensor z, gt_error *err)
{
    (void)b;
    (void)err;
    const int rows = y.rows, cols = y.cols;
#pragma omp parallel for schedule(static) if ((size_t)rows * cols > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        float *yr = (float *)y.data + (size_t)i * y.ld;
        const float *xr = (const float *)x.data + (size_t)i * x.ld;
        const float *zr = (const float *)z.data + (size_t)i * z.ld;
        const float a = alpha[i], c = beta[i];
        for (int j = 0; j < cols; j++)
            yr[j] = a * xr[j] + c * zr[j];
    }
    return GT_OK;
}

static int cpu_affine_cols(nn_backend *b, nn_tensor y, nn_tensor x, const float *scale,
                           const float *shift, gt_error *err)
{
    (void)b;
    (void)err;
    const int rows = y.rows, cols = y.cols;
#pragma omp parallel for schedule(static) if ((size_t)rows * cols > CPU_PAR_MIN)
    for (int i = 0; i < rows; i++) {
        float *yr = (float *)y.data + (size_t)i * y.ld;
        const float *xr = (const float *)x.data + (size_t)i * x.ld;
        for (int j = 0; j < cols; j++)
            yr[j] = scale[j] * xr[j] + (shift ? shift[j] : 0.0f);
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* creation                                                                 */
/* ------------------------------------------------------------------------ */

static const nn_backend_ops cpu_ops;

/* ------------------------------------------------------------------------ */
/* fixed-order linear layer (sampling): nn_cpu_fixed.c                      */
/* ------------------------------------------------------------------------ */

static size_t cpu_pack_bytes(nn_backend *b, int n, int k, nn_dtype dt)
{
    return cpu_fixed_pack_bytes(&ST(b)->fixed, n, k, dt);
}

static int cpu_pack_weight(nn_backend *b, nn_packed *dst, nn_tensor w, gt_error *err)
{
    (void)err;
    cpu_fixed_pack(&ST(b)->fixed, dst->data, w);
    dst->layout = cpu_fixed_layout(&ST(b)->fixed, w.dtype);
    return GT_OK;
}

static int cpu_linear_fixed(nn_backend *b, nn_tensor y, nn_tensor x, const nn_packed *w,
                            const float *bias, nn_act act, int accumulate, gt_error *err)
{
    return cpu_fixed_linear(&ST(b)->fixed, y, x, w, bias, act, accumulate, err);
}

const char *nn_cpu_fixed_kernel(const nn_backend *b, nn_dtype dt)
{
    if (!b || b->ops != &cpu_ops)
        return NULL;
    return cpu_fixed_isa_name(&((const cpu_state *)b->impl)->fixed, dt);
}

static void cpu_destroy(nn_backend *b)
{
    if (!b)
        return;
    cpu_state *s = ST(b);
    if (s) {
        for (int i = 0; i < CPU_CACHE_SLOTS; i++)
            mm_entry_release(&s->cache[i]);
        if (s->stream)
            dnnl_stream_destroy(s->stream);
        if (s->eng)
            dnnl_engine_destroy(s->eng);
        free(s->scratch_a);
        free(s->scratch_b);
        free(s->red);
        cpu_fixed_free(&s->fixed);
        free(s);
    }
    free(b);
}

static const nn_backend_ops cpu_ops = {
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset = cpu_memset,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .synchronize = cpu_sync,
    .matmul = cpu_matmul,
    .bias_grad = cpu_bias_grad,
    .silu_fwd = cpu_silu_fwd,
    .silu_bwd = cpu_silu_bwd,
    .leaky_fwd = cpu_leaky_fwd,
    .leaky_bwd = cpu_leaky_bwd,
    .ln_fwd = cpu_ln_fwd,
    .ln_bwd = cpu_ln_bwd,
    .add = cpu_add,
    .concat = cpu_concat,
    .split = cpu_split,
    .embed_fwd = cpu_embed_fwd,
    .embed_bwd = cpu_embed_bwd,
    .softmax_fwd = cpu_softmax_fwd,
    .softmax_bwd = cpu_softmax_bwd,
    .topk_fwd = cpu_topk_fwd,
    .topk_bwd = cpu_topk_bwd,
    .gather_rows = cpu_gather_rows,
    .scatter_add_rows = cpu_scatter_add_rows,
    .gather_dot = cpu_gather_dot,
    .balance_fwd = cpu_balance_fwd,
    .balance_bwd = cpu_balance_bwd,
    .entropy_fwd = cpu_entropy_fwd,
    .entropy_bwd = cpu_entropy_bwd,
    .mse_fwd = cpu_mse_fwd,
    .mse_bwd = cpu_mse_bwd,
    .mean_fwd = cpu_mean_fwd,
    .mean_bwd = cpu_mean_bwd,
    .sb_fwd = cpu_sb_fwd,
    .sb_bwd = cpu_sb_bwd,
    .sb_inv = cpu_sb_inv,
    .cast_bf16 = cpu_cast_bf16,
    .sumsq = cpu_sumsq,
    .adamw = cpu_adamw,
    .rand_fill = cpu_rand_fill,
    .axpby_rows = cpu_axpby_rows,
    .affine_cols = cpu_affine_cols,
    .pack_bytes = cpu_pack_bytes,
    .pack_weight = cpu_pack_weight,
    .linear_fixed = cpu_linear_fixed,
};

/* Whether oneDNN will build a bf16 matmul here: the CPU may have
 * AVX512-BF16 while oneDNN is held below it (ONEDNN_MAX_CPU_ISA), and then
 * the emulation is the bf16 path. */
static int onednn_has_bf16(cpu_state *s)
{
    mm_key k;
    memset(&k, 0, sizeof k);
    k.m = k.n = k.k = k.lda = k.ldb = k.ldc = 16;
    k.trans_b = 1;
    k.bf16 = 1;
    mm_entry e;
    gt_error ignored;
    if (mm_entry_build(s, &e, &k, &ignored) != GT_OK)
        return 0;
    mm_entry_release(&e);
    return 1;
}

/* Default fp32 library: see bench/README.md for the measurement behind it. */
#define CPU_F32_DEFAULT_ONEDNN 1

int nn_cpu_backend_create(nn_backend **out, gt_error *err)
{
    if (!out)
        return gt_error_set(err, GT_EINVAL, "cpu backend: NULL out");
    *out = NULL;
    nn_backend *b = calloc(1, sizeof *b);
    cpu_state *s = calloc(1, sizeof *s);
    if (!b || !s) {
        free(b);
        free(s);
        return gt_error_set(err, GT_ENOMEM, "cpu backend: out of memory");
    }
    b->ops = &cpu_ops;
    b->impl = s;
    s->owner = b;
    snprintf(b->name, sizeof b->name, "cpu");
    b->device = 0;
    s->nthreads = omp_get_max_threads();
    s->red = calloc((size_t)s->nthreads + 1, sizeof(double));
    if (!s->red) {
        cpu_destroy(b);
        return gt_error_set(err, GT_ENOMEM, "cpu backend: out of memory");
    }
    dnnl_status_t st;
    if ((st = dnnl_engine_create(&s->eng, dnnl_cpu, 0)) ||
        (st = dnnl_stream_create(&s->stream, s->eng, dnnl_stream_default_flags))) {
        cpu_destroy(b);
        return dnnl_fail(err, "engine/stream creation", st);
    }
    __builtin_cpu_init();
    int hw_bf16 = __builtin_cpu_supports("avx512bf16") && onednn_has_bf16(s);
    const char *force = getenv("GIANT_CPU_BF16");
    s->bf16_native = hw_bf16;
    if (force && !strcmp(force, "emulate"))
        s->bf16_native = 0;
    cpu_fixed_init(&s->fixed, s->bf16_native);
    b->has_bf16 = s->bf16_native;
    b->bf16_emulated = !s->bf16_native;
    s->f32_onednn = CPU_F32_DEFAULT_ONEDNN;
    const char *lib = getenv("GIANT_CPU_SGEMM");
    if (lib && !strcmp(lib, "openblas"))
        s->f32_onednn = 0;
    else if (lib && !strcmp(lib, "onednn"))
        s->f32_onednn = 1;
    *out = b;
    return GT_OK;
}
