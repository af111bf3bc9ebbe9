/* cuda_backend: the nn_backend vtable on an NVIDIA GPU.
 *
 * The op families, one header each (kernels first, launchers after), in
 * the order of nn_backend_ops; each includes what it builds on: */
#include "cuda_common.cuh"     /* state, error macros, launch shapes, vectors */
#include "cuda_copy.cuh"       /* concat / split, zero_outside */
#include "cuda_matmul.cuh"     /* cuBLASLt products with cached plans */
#include "cuda_act.cuh"        /* silu, leaky, add, mul, bf16 cast, axpby, affine */
#include "cuda_embed.cuh"      /* sinusoidal condition embedding */
#include "cuda_layernorm.cuh"  /* LayerNorm forward and backward */
#include "cuda_reduce.cuh"     /* full sums, column sums, mse, mean, sumsq */
#include "cuda_softmax.cuh"    /* row softmax */
#include "cuda_route.cuh"      /* top-k, gather/scatter, router losses */
#include "cuda_stick.cuh"      /* stick-breaking */
#include "cuda_adamw.cuh"      /* fused AdamW with the bf16 working copy */
#include "cuda_rng.cuh"        /* Philox fills, the CPU's counter layout */
#include "cuda_fixed.cuh"      /* the sampler's fixed-order product, one pinned algorithm per shape */

#include "cuda_backend.h"

#include <stdio.h>
#include <stdlib.h>

/* Planned once at creation: the cuBLASLt workspace (32 MiB on Hopper as
 * NVIDIA recommends for its larger tiles, 4 MiB elsewhere) and the
 * reduction scratch (partials of full sums and of column sums). */
#define CUDA_WORKSPACE_HOPPER ((size_t)32 << 20)
#define CUDA_WORKSPACE_OTHER ((size_t)4 << 20)
#define CUDA_SCRATCH_BYTES ((size_t)16 << 20)
#define CUDA_ALLOC_ALIGN 256

#ifndef GIANT_CUDA_ARCHS
#define GIANT_CUDA_ARCHS "unknown"
#endif

static const nn_backend_ops *cuda_ops(void);

/* ------------------------------------------------------------------------ */
/* memory                                                                   */
/* ------------------------------------------------------------------------ */

static int cuda_no_capture(cuda_state *s, const char *what, gt_error *err)
{
    if (s->capturing)
        return gt_error_set(err, GT_EINVAL, "%s is not allowed inside CUDA graph capture",
                            what);
    return GT_OK;
}

static int cuda_alloc(nn_backend *b, size_t bytes, void **out, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    *out = NULL;
    int rc = cuda_no_capture(s, "alloc", err);
    if (rc)
        return rc;
    cuda_alloc_rec *recs = (cuda_alloc_rec *)gt_array_grow(s->allocs, s->n_allocs, &s->cap_allocs,
                                                           sizeof *recs, 64);
    if (!recs)
        return gt_error_set(err, GT_ENOMEM, "alloc: out of host memory");
    s->allocs = recs;
    /* cudaMalloc returns 256-byte aligned memory; rounding the size up keeps
     * every 16-byte vector access of a tail inside the allocation, and
     * bytes == 0 still gets a unique pointer. */
    size_t sz = (bytes + CUDA_ALLOC_ALIGN - 1) / CUDA_ALLOC_ALIGN * CUDA_ALLOC_ALIGN;
    if (sz == 0)
        sz = CUDA_ALLOC_ALIGN;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, sz);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gt_error_set(err, e == cudaErrorMemoryAllocation ? GT_ENOMEM : GT_EDEVICE,
                            "cudaMalloc(%zu bytes) on %s: %s", sz, s->dev_name,
                            cudaGetErrorString(e));
    }
    s->allocs[s->n_allocs].p = p;
    s->allocs[s->n_allocs].bytes = bytes;
    s->n_allocs++;
    b->alloc_count++;
    b->bytes_live += bytes;
    *out = p;
    return GT_OK;
}

static void cuda_free(nn_backend *b, void *p)
{
    cuda_state *s = cuda_st(b);
    if (!p)
        return;
    /* cudaFree inside capture would invalidate it: keep the block tracked
     * (destroy frees it) rather than break the caller's graph. */
    if (s->capturing)
        return;
    for (int i = s->n_allocs - 1; i >= 0; i--)
        if (s->allocs[i].p == p) {
            b->bytes_live -= s->allocs[i].bytes;
            s->allocs[i] = s->allocs[--s->n_allocs];
            break;
        }
    /* cudaFree synchronises the device, so pending work on p finishes
     * first; a failure here has nobody to report to. */
    (void)cudaFree(p);
    (void)cudaGetLastError();
}

static int cuda_memset(nn_backend *b, void *p, int value, size_t bytes, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (bytes == 0)
        return GT_OK;
    CUDA_TRY(cudaMemsetAsync(p, value, bytes, s->stream), err);
    return GT_OK;
}

/* A copy between host and device (op names it): synchronous from the
 * caller's view, so the host side may be reused (or read) on return, and
 * so never inside capture. */
static int cuda_copy_host(nn_backend *b, void *dst, const void *src, size_t bytes,
                          cudaMemcpyKind kind, const char *op, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    int rc = cuda_no_capture(s, op, err);
    if (rc || bytes == 0)
        return rc;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, s->stream), err);
    CUDA_TRY(cudaStreamSynchronize(s->stream), err);
    return GT_OK;
}

static int cuda_copy_h2d(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err)
{
    return cuda_copy_host(b, dst, src, bytes, cudaMemcpyHostToDevice, "copy_h2d", err);
}

static int cuda_copy_d2h(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err)
{
    return cuda_copy_host(b, dst, src, bytes, cudaMemcpyDeviceToHost, "copy_d2h", err);
}

static int cuda_copy_d2d(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (bytes == 0)
        return GT_OK;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s->stream), err);
    return GT_OK;
}

static int cuda_synchronize(nn_backend *b, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (s->capturing)
        return GT_OK;
    CUDA_TRY(cudaStreamSynchronize(s->stream), err);
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* lifetime                                                                 */
/* ------------------------------------------------------------------------ */

static void cuda_destroy(nn_backend *b)
{
    if (!b)
        return;
    cuda_state *s = cuda_st(b);
    if (s) {
        if (s->stream)
            (void)cudaStreamSynchronize(s->stream);
        cuda_mm_cache_free(s);
        cuda_fx_cache_free(s);
        for (int i = 0; i < s->n_allocs; i++)
            (void)cudaFree(s->allocs[i].p);
        free(s->allocs);
        if (s->workspace)
            (void)cudaFree(s->workspace);
        if (s->scratch)
            (void)cudaFree(s->scratch);
        if (s->lt)
            (void)cublasLtDestroy(s->lt);
        if (s->stream)
            (void)cudaStreamDestroy(s->stream);
        (void)cudaGetLastError();
        free(s);
    }
    free(b);
}

/* Errors of cudaGetDeviceCount that mean "no usable GPU here". */
static int cuda_error_means_absent(cudaError_t e)
{
    return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
           e == cudaErrorSystemDriverMismatch || e == cudaErrorCompatNotSupportedOnDevice;
}

static int cuda_setup(nn_backend *b, cuda_state *s, int device, gt_error *err)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (cuda_error_means_absent(e))
            return gt_error_set(err, GT_EUNSUPPORTED, "no CUDA device: %s (%s)",
                                cudaGetErrorString(e), cudaGetErrorName(e));
        return cuda_fail(err, e, "cudaGetDeviceCount", __FILE__, __LINE__);
    }
    if (count == 0)
        return gt_error_set(err, GT_EUNSUPPORTED, "no CUDA device: the driver lists none");
    if (device >= count)
        return gt_error_set(err, GT_EINVAL, "cuda:%d does not exist (%d device%s)", device,
                            count, count == 1 ? "" : "s");
    CUDA_TRY(cudaSetDevice(device), err);
    struct cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, device), err);
    s->device = device;
    snprintf(s->dev_name, sizeof s->dev_name, "%s", prop.name);
    s->cc_major = prop.major;
    s->cc_minor = prop.minor;
    s->sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;

    /* A device this build has no machine code (or PTX) for cannot run any
     * kernel: say so now rather than at the first op. */
    struct cudaFuncAttributes fa;
    e = cudaFuncGetAttributes(&fa, cuda_rand_fill_kernel);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gt_error_set(err, GT_EUNSUPPORTED,
                            "%s (cuda:%d, compute capability %d.%d) cannot run this build's "
                            "kernels (built for %s): %s",
                            s->dev_name, device, s->cc_major, s->cc_minor, GIANT_CUDA_ARCHS,
                            cudaGetErrorString(e));
    }

    CUDA_TRY(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), err);
    CUBLAS_TRY(cublasLtCreate(&s->lt), err);
    s->workspace_bytes = s->cc_major >= 9 ? CUDA_WORKSPACE_HOPPER : CUDA_WORKSPACE_OTHER;
    CUDA_TRY(cudaMalloc(&s->workspace, s->workspace_bytes), err);
    CUDA_TRY(cudaMalloc((void **)&s->scratch, CUDA_SCRATCH_BYTES), err);
    s->scratch_floats = CUDA_SCRATCH_BYTES / sizeof(float);

    b->ops = cuda_ops();
    snprintf(b->name, sizeof b->name, "cuda");
    b->device = device;
    b->has_bf16 = s->cc_major >= 8;
    b->bf16_emulated = 0;
    return GT_OK;
}

extern "C" int cuda_backend_create(int device, nn_backend **out, gt_error *err)
{
    if (!out)
        return gt_error_set(err, GT_EINVAL, "cuda_backend_create: out is NULL");
    *out = NULL;
    if (device < 0)
        return gt_error_set(err, GT_EINVAL, "cuda_backend_create: device %d < 0", device);
    nn_backend *b = (nn_backend *)calloc(1, sizeof *b);
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    if (!b || !s) {
        free(b);
        free(s);
        return gt_error_set(err, GT_ENOMEM, "cuda_backend_create: out of host memory");
    }
    b->impl = s;
    int rc = cuda_setup(b, s, device, err);
    if (rc) {
        cuda_destroy(b);
        return rc;
    }
    *out = b;
    return GT_OK;
}

extern "C" int cuda_backend_is(const nn_backend *b)
{
    return b && b->ops == cuda_ops();
}

extern "C" void *cuda_backend_stream(nn_backend *b)
{
    return cuda_backend_is(b) ? (void *)cuda_st(b)->stream : NULL;
}

extern "C" int cuda_backend_plan_count(nn_backend *b)
{
    return cuda_backend_is(b) ? cuda_st(b)->mm_count + cuda_st(b)->fx_count : 0;
}

/* ------------------------------------------------------------------------ */
/* CUDA graphs                                                              */
/* ------------------------------------------------------------------------ */

/* The graph family of the op table (graph_begin / end / launch / destroy,
 * which nn_graph.h drives) and the public cuda_graph_* functions (tests
 * and benchmarks capture by hand) are the same code: the table's entries
 * reach only a CUDA backend's state, the public functions first check
 * that b is a CUDA backend at all. */

struct cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

static int cuda_graph_begin_op(nn_backend *b, gt_error *err)
{
    cuda_state *s = cuda_st(b);
    if (s->capturing)
        return gt_error_set(err, GT_EINVAL, "cuda_graph_begin: already capturing");
    /* Thread-local mode: other threads may still allocate meanwhile. */
    CUDA_TRY(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal), err);
    s->capturing = 1;
    return GT_OK;
}

static int cuda_graph_end_op(nn_backend *b, void **out, gt_error *err)
{
    if (!out)
        return gt_error_set(err, GT_EINVAL, "cuda_graph_end: out is NULL");
    *out = NULL;
    cuda_state *s = cuda_st(b);
    if (!s->capturing)
        return gt_error_set(err, GT_EINVAL, "cuda_graph_end: not capturing");
    s->capturing = 0;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(s->stream, &graph);
    if (e != cudaSuccess) {
        if (graph)
            (void)cudaGraphDestroy(graph);
        return cuda_fail(err, e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) {
        (void)cudaGraphDestroy(graph);
        return cuda_fail(err, e, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    cuda_graph *g = (cuda_graph *)calloc(1, sizeof *g);
    if (!g) {
        (void)cudaGraphExecDestroy(exec);
        (void)cudaGraphDestroy(graph);
        return gt_error_set(err, GT_ENOMEM, "cuda_graph_end: out of host memory");
    }
    g->graph = graph;
    g->exec = exec;
    *out = g;
    return GT_OK;
}

static int cuda_graph_launch_op(nn_backend *b, void *graph, gt_error *err)
{
    cuda_graph *g = (cuda_graph *)graph;
    if (!g)
        return gt_error_set(err, GT_EINVAL, "cuda_graph_launch: graph is NULL");
    cuda_state *s = cuda_st(b);
    if (s->capturing)
        return gt_error_set(err, GT_EINVAL, "cuda_graph_launch: inside a capture");
    CUDA_TRY(cudaGraphLaunch(g->exec, s->stream), err);
    return GT_OK;
}

extern "C" void cuda_graph_destroy(cuda_graph *g)
{
    if (!g)
        return;
    (void)cudaGraphExecDestroy(g->exec);
    (void)cudaGraphDestroy(g->graph);
    (void)cudaGetLastError();
    free(g);
}

static void cuda_graph_destroy_op(nn_backend *b, void *graph)
{
    (void)b;
    cuda_graph_destroy((cuda_graph *)graph);
}

/* What every public graph call starts with: b is a CUDA backend, its
 * device made current (the capture and the launch go to its stream). */
static int cuda_graph_enter(nn_backend *b, const char *what, gt_error *err)
{
    if (!cuda_backend_is(b))
        return gt_error_set(err, GT_EINVAL, "%s: not a CUDA backend", what);
    return cuda_use_device(b, err);
}

extern "C" int cuda_graph_begin(nn_backend *b, gt_error *err)
{
    GT_TRY(cuda_graph_enter(b, "cuda_graph_begin", err));
    return cuda_graph_begin_op(b, err);
}

extern "C" int cuda_graph_end(nn_backend *b, cuda_graph **out, gt_error *err)
{
    GT_TRY(cuda_graph_enter(b, "cuda_graph_end", err));
    if (!out)
        return gt_error_set(err, GT_EINVAL, "cuda_graph_end: out is NULL");
    void *g = NULL;
    int rc = cuda_graph_end_op(b, &g, err);
    *out = (cuda_graph *)g;
    return rc;
}

extern "C" int cuda_graph_launch(nn_backend *b, cuda_graph *g, gt_error *err)
{
    GT_TRY(cuda_graph_enter(b, "cuda_graph_launch", err));
    return cuda_graph_launch_op(b, g, err);
}

/* ------------------------------------------------------------------------ */
/* the vtable                                                               */
/* ------------------------------------------------------------------------ */

/* The current device is per host thread, and a backend may be used from a
 * thread other than the one that created it (the service's run threads), so
 * every entry makes the backend's device current first: a cudaGetDevice
 * (a thread-local read) and, only on a change, cudaSetDevice. */


/* Host memory for copies: page aligned, then page-locked with
 * cudaHostRegister, which the copies then use directly instead of going
 * through the driver's staging buffer.  When pinning is refused (a limit
 * on locked memory) the memory stays ordinary: slower copies, the same
 * results.  A refusal is not a sticky error; it is cleared so that no
 * later check reports it. */
#define CUDA_HOST_PAGE 4096
static int cuda_host_alloc(nn_backend *b, size_t bytes, void **out, gt_error *err)
{
    *out = NULL;
    int rc = cuda_no_capture(cuda_st(b), "host_alloc", err);
    if (rc)
        return rc;
    size_t sz = (bytes + CUDA_HOST_PAGE - 1) / CUDA_HOST_PAGE * CUDA_HOST_PAGE;
    if (sz == 0)
        sz = CUDA_HOST_PAGE;
    *out = aligned_alloc(CUDA_HOST_PAGE, sz);
    if (!*out)
        return gt_error_set(err, GT_ENOMEM, "out of host memory (%zu bytes)", bytes);
    if (cudaHostRegister(*out, sz, cudaHostRegisterDefault) != cudaSuccess)
        (void)cudaGetLastError();
    return GT_OK;
}

static void cuda_host_free(nn_backend *b, void *p)
{
    if (!p)
        return;
    if (b && b->impl)
        (void)cuda_use_device(b, NULL);
    if (cudaHostUnregister(p) != cudaSuccess) /* never pinned */
        (void)cudaGetLastError();
    free(p);
}

static void cuda_free_on_device(nn_backend *b, void *p)
{
    (void)cuda_use_device(b, NULL);
    cuda_free(b, p);
}

static void cuda_destroy_on_device(nn_backend *b)
{
    if (b && b->impl)
        (void)cuda_use_device(b, NULL);
    cuda_destroy(b);
}

static nn_backend_ops cuda_ops_table;

static void cuda_ops_fill(nn_backend_ops *o)
{
    memset(o, 0, sizeof *o);
    o->destroy = cuda_destroy_on_device;
    o->alloc = ON_DEV(cuda_alloc);
    o->free = cuda_free_on_device;
    o->memset = ON_DEV(cuda_memset);
    o->copy_h2d = ON_DEV(cuda_copy_h2d);
    o->copy_d2h = ON_DEV(cuda_copy_d2h);
    o->copy_d2d = ON_DEV(cuda_copy_d2d);
    o->synchronize = ON_DEV(cuda_synchronize);
    o->host_alloc = ON_DEV(cuda_host_alloc);
    o->host_free = cuda_host_free;
    /* each op family registers its own entries, in the order of
     * nn_backend_ops */
    cuda_copy_ops(o);
    cuda_matmul_ops(o);
    cuda_act_ops(o);
    cuda_embed_ops(o);
    cuda_layernorm_ops(o);
    cuda_reduce_ops(o);
    cuda_softmax_ops(o);
    cuda_route_ops(o);
    cuda_stick_ops(o);
    cuda_adamw_ops(o);
    cuda_rng_ops(o);
    cuda_fixed_ops(o);
    o->graph_begin = ON_DEV(cuda_graph_begin_op);
    o->graph_end = ON_DEV(cuda_graph_end_op);
    o->graph_launch = ON_DEV(cuda_graph_launch_op);
    o->graph_destroy = cuda_graph_destroy_op;
}

/* Filled on first use (C++ before C++20 has no designated initialisers);
 * a function-local static is initialised once, thread-safely. */
static const nn_backend_ops *cuda_ops(void)
{
    static const int filled = (cuda_ops_fill(&cuda_ops_table), 1);
    (void)filled;
    return &cuda_ops_table;
}
