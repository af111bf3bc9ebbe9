/* cpu_matmul: matrix products.  fp32 through oneDNN or OpenBLAS (chosen at
 * creation; oneDNN by default, see bench/README.md), bf16 through oneDNN's
 * matmul (bf16 inputs, fp32 accumulation and output) when the CPU has
 * AVX512-BF16, otherwise by widening the already-rounded bf16 inputs to fp32
 * exactly and calling sgemm: a bit-faithful emulation of "bf16 inputs, fp32
 * accumulation", about 3x slower.  oneDNN primitives are created once per
 * shape and kept in a small cache, so a step after warm-up creates none
 * (plan_count).  Training uses these; the sampler uses cpu_fixed.c. */
#include "cpu_internal.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dnnl_fail(gt_error *err, const char *what, dnnl_status_t st)
{
    return gt_error_set(err, GT_EDEVICE, "cpu: oneDNN %s failed (status %d)", what, (int)st);
}

static void mm_entry_release(cpu_mm_entry *e)
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

static int mm_entry_build(cpu_state *s, cpu_mm_entry *e, const cpu_mm_key *k, gt_error *err)
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

static int mm_onednn(cpu_state *s, const cpu_mm_key *k, void *c, const void *a, const void *bm,
                     const float *bias, gt_error *err)
{
    cpu_mm_entry *e = NULL, *victim = &s->cache[0];
    for (int i = 0; i < CPU_CACHE_SLOTS; i++) {
        cpu_mm_entry *x = &s->cache[i];
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
    CPU_FOR_ROWS(i, rows, NUMEL(t)) {
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
    CPU_FOR_ROWS(i, rows, NUMEL(c)) {
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
    cpu_state *s = cpu_st(b);
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
        cpu_mm_key key;
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

void cpu_matmul_release(cpu_state *s)
{
    for (int i = 0; i < CPU_CACHE_SLOTS; i++)
        mm_entry_release(&s->cache[i]);
    free(s->scratch_a);
    free(s->scratch_b);
    s->scratch_a = s->scratch_b = NULL;
}

/* Whether oneDNN will build a bf16 matmul here: the CPU may have
 * AVX512-BF16 while oneDNN is held below it (ONEDNN_MAX_CPU_ISA), and then
 * the emulation is the bf16 path. */
int cpu_matmul_onednn_bf16(cpu_state *s)
{
    cpu_mm_key k;
    memset(&k, 0, sizeof k);
    k.m = k.n = k.k = k.lda = k.ldb = k.ldc = 16;
    k.trans_b = 1;
    k.bf16 = 1;
    cpu_mm_entry e;
    gt_error ignored;
    if (mm_entry_build(s, &e, &k, &ignored) != GT_OK)
        return 0;
    mm_entry_release(&e);
    return 1;
}

void cpu_matmul_ops(nn_backend_ops *o)
{
    o->matmul = cpu_matmul;
}
