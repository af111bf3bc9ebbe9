/* cpu_backend.c: the CPU backend's lifetime, memory and op table.  Each op
 * family lives in its own file (cpu_<family>.c, as engine/cuda has one
 * header per family) and fills its own entries of the table. */
#include "cpu_backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

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
    CPU_UNUSED(b, err);
    memset(p, value, bytes);
    return GT_OK;
}

static int cpu_copy(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err)
{
    CPU_UNUSED(b, err);
    memmove(dst, src, bytes);
    return GT_OK;
}

static int cpu_sync(nn_backend *b, gt_error *err)
{
    CPU_UNUSED(b, err);
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* the table                                                                */
/* ------------------------------------------------------------------------ */

static void cpu_destroy(nn_backend *b)
{
    if (!b)
        return;
    cpu_state *s = cpu_st(b);
    if (s) {
        cpu_matmul_release(s);
        if (s->stream)
            dnnl_stream_destroy(s->stream);
        if (s->eng)
            dnnl_engine_destroy(s->eng);
        free(s->red);
        cpu_fixed_free(&s->fixed);
        free(s);
    }
    free(b);
}

static nn_backend_ops cpu_ops;

/* Filled once, before any backend exists (cpu_backend_create): each family
 * adds its own entries, in the order of nn_backend_ops. */
static void cpu_ops_fill(void)
{
    nn_backend_ops *o = &cpu_ops;
    /* memory and copies, every other entry NULL; host_alloc / host_free
     * stay so: plain aligned memory is what copies here move fastest */
    *o = (nn_backend_ops){
        .destroy = cpu_destroy, .alloc = cpu_alloc, .free = cpu_free, .memset = cpu_memset,
        .copy_h2d = cpu_copy, .copy_d2h = cpu_copy, .copy_d2d = cpu_copy,
        .synchronize = cpu_sync,
    };
    /* then the families in the table's order */
    cpu_copy_ops(o);
    cpu_matmul_ops(o);
    cpu_act_ops(o);
    cpu_embed_ops(o);
    cpu_layernorm_ops(o);
    cpu_reduce_ops(o);
    cpu_softmax_ops(o);
    cpu_route_ops(o);
    cpu_stick_ops(o);
    cpu_adamw_ops(o);
    cpu_rng_ops(o);
    cpu_fixed_ops(o);
    /* graphs: NULL, the CPU runs every op as it is issued */
}

static pthread_once_t cpu_ops_once = PTHREAD_ONCE_INIT;

const char *cpu_backend_fixed_kernel(const nn_backend *b, nn_dtype dt)
{
    if (!b || b->ops != &cpu_ops)
        return NULL;
    return cpu_fixed_isa_name(&((const cpu_state *)b->impl)->fixed, dt);
}

/* ------------------------------------------------------------------------ */
/* creation                                                                 */
/* ------------------------------------------------------------------------ */

/* Default fp32 library: see bench/README.md for the measurement behind it. */
#define CPU_F32_DEFAULT_ONEDNN 1

int cpu_backend_create(nn_backend **out, gt_error *err)
{
    if (!out)
        return gt_error_set(err, GT_EINVAL, "cpu backend: NULL out");
    *out = NULL;
    pthread_once(&cpu_ops_once, cpu_ops_fill);
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
        return gt_error_set(err, GT_EDEVICE, "cpu: oneDNN engine/stream creation failed "
                                             "(status %d)",
                            (int)st);
    }
    __builtin_cpu_init();
    int hw_bf16 = __builtin_cpu_supports("avx512bf16") && cpu_matmul_onednn_bf16(s);
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
