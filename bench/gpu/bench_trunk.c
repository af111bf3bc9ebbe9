/* bench_trunk: times engine/nn's baseline expert trunk on the CUDA backend:
 * the training step (eager, and as one graph: gradient part, norm,
 * clipping and AdamW; its gradient part alone also as a graph), the
 * sampler's packed forward and a 20-step Euler sampler, eager and as
 * graphs.
 *
 *   bench_trunk [--quick] [--device N] [--sample-batch N] [--steps N]
 *
 * Rows printed as "RESULT <name> <ms> <tflops> <per_s>" (per_s: samples or
 * showers per second, 0 when not meaningful) and "MEMORY train_<dtype> <MiB>"
 * (device bytes the training step holds) for bench/gpu/summary.py, plus
 * a readable table.  Measured with CUDA events on the backend's stream
 * after warm-up; "graph" rows replay one CUDA graph per step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_backend.h"
#include "nn_adamw.h"
#include "nn_trunk.h"

#define BENCH_TRY(x)                                                           \
    do {                                                                       \
        if ((x) != GT_OK) {                                                    \
            fprintf(stderr, "bench_trunk: %s failed: %s\n", #x, err.message);  \
            return 1;                                                          \
        }                                                                      \
    } while (0)

static gt_error err;
static nn_backend *B;

typedef struct timer {
    cudaEvent_t a, b;
} timer;

static int timer_start(timer *t)
{
    if (cudaEventCreate(&t->a) != cudaSuccess || cudaEventCreate(&t->b) != cudaSuccess)
        return 1;
    return cudaEventRecord(t->a, (cudaStream_t)cuda_backend_stream(B)) != cudaSuccess;
}

/* Milliseconds since timer_start, after the stream drains. */
static double timer_stop(timer *t)
{
    float ms = -1.0f;
    cudaStream_t s = (cudaStream_t)cuda_backend_stream(B);
    if (cudaEventRecord(t->b, s) == cudaSuccess && cudaEventSynchronize(t->b) == cudaSuccess)
        cudaEventElapsedTime(&ms, t->a, t->b);
    cudaEventDestroy(t->a);
    cudaEventDestroy(t->b);
    return ms;
}

static void result(const char *name, double ms, double flops, double per_s)
{
    double tf = ms > 0 && flops > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0;
    printf("RESULT %s %.4f %.2f %.0f\n", name, ms, tf, per_s);
    fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* the cuBLASLt ceiling                                                     */
/* ------------------------------------------------------------------------ */

static int bench_gemm(int n, nn_dtype dt, int reps)
{
    size_t nn = (size_t)n * n;
    void *a = NULL, *bb = NULL, *af = NULL, *c = NULL;
    BENCH_TRY(nn_alloc(B, nn * sizeof(float), &af, &err));
    BENCH_TRY(nn_alloc(B, nn * sizeof(float), &c, &err));
    BENCH_TRY(nn_rand_fill(B, af, nn, NN_DIST_NORMAL, 0.0f, 1.0f, 1, 0, 0, &err));
    nn_tensor A, Bt, C = nn_tensor_make(c, NN_F32, n, n);
    if (dt == NN_BF16) {
        BENCH_TRY(nn_alloc(B, nn * 2, &a, &err));
        BENCH_TRY(nn_alloc(B, nn * 2, &bb, &err));
        BENCH_TRY(nn_cast_bf16(B, nn_tensor_make(a, NN_BF16, n, n),
                              nn_tensor_make(af, NN_F32, n, n), &err));
        BENCH_TRY(nn_cast_bf16(B, nn_tensor_make(bb, NN_BF16, n, n),
                              nn_tensor_make(af, NN_F32, n, n), &err));
        A = nn_tensor_make(a, NN_BF16, n, n);
        Bt = nn_tensor_make(bb, NN_BF16, n, n);
    } else {
        A = nn_tensor_make(af, NN_F32, n, n);
        Bt = nn_tensor_make(af, NN_F32, n, n);
    }
    for (int i = 0; i < 3; i++)
        BENCH_TRY(nn_matmul(B, C, A, 0, Bt, 1, NULL, NN_ACT_NONE, 0, &err));
    timer t;
    if (timer_start(&t))
        return 1;
    for (int i = 0; i < reps; i++)
        BENCH_TRY(nn_matmul(B, C, A, 0, Bt, 1, NULL, NN_ACT_NONE, 0, &err));
    double ms = timer_stop(&t) / reps;
    char name[64];
    snprintf(name, sizeof name, "gemm_%s_%d", dt == NN_BF16 ? "bf16" : "fp32", n);
    result(name, ms, 2.0 * n * (double)n * n, 0);
    nn_free(B, a);
    nn_free(B, bb);
    nn_free(B, af);
    nn_free(B, c);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* training and sampling, on engine/nn's expert trunk                       */
/* ------------------------------------------------------------------------ */

typedef struct run {
    nn_trunk *t;
    nn_adamw_opt opt;
    float *x, *c, *tgt, *out, *dout, *loss;
    int rows, in, out_dim, cond;
} run;

static int run_open(run *r, nn_dtype dt, int batch)
{
    nn_trunk_config c;
    nn_trunk_config_default(&c);
    c.precision = dt;
    memset(r, 0, sizeof *r);
    r->rows = batch;
    r->in = c.in_dim;
    r->out_dim = c.out_dim;
    r->cond = c.cond_dim;
    BENCH_TRY(nn_trunk_create(B, &c, &r->t, &err));
    nn_trunk_set_input_check(r->t, 0);   /* no read-back: graphs can hold a step */
    BENCH_TRY(nn_trunk_init(r->t, 1, 1.0f, &err));
    BENCH_TRY(nn_trunk_plan(r->t, batch, &err));
    nn_adamw_config ac;
    nn_adamw_config_default(&ac);
    ac.lr = 1e-4f;
    BENCH_TRY(nn_adamw_create(&r->opt, nn_trunk_params(r->t), &ac, &err));
    size_t nx = (size_t)batch * r->in, no = (size_t)batch * r->out_dim;
    BENCH_TRY(nn_alloc(B, nx * 4, (void **)&r->x, &err));
    BENCH_TRY(nn_alloc(B, (size_t)batch * r->cond * 4, (void **)&r->c, &err));
    BENCH_TRY(nn_alloc(B, no * 4, (void **)&r->tgt, &err));
    BENCH_TRY(nn_alloc(B, no * 4, (void **)&r->out, &err));
    BENCH_TRY(nn_alloc(B, no * 4, (void **)&r->dout, &err));
    BENCH_TRY(nn_alloc(B, 256, (void **)&r->loss, &err));
    BENCH_TRY(nn_rand_fill(B, r->x, nx, NN_DIST_NORMAL, 0, 1, 3, 0, 0, &err));
    BENCH_TRY(nn_rand_fill(B, r->c, (size_t)batch * r->cond, NN_DIST_UNIFORM, 0, 1, 3, 1, 0, &err));
    BENCH_TRY(nn_rand_fill(B, r->tgt, no, NN_DIST_NORMAL, 0, 1, 3, 2, 0, &err));
    return 0;
}

static void run_close(run *r)
{
    float *bufs[] = {r->x, r->c, r->tgt, r->out, r->dout, r->loss};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        nn_free(B, bufs[i]);
    nn_adamw_destroy(&r->opt);
    nn_trunk_destroy(r->t);
}

/* Zero grads, forward, mse, backward: the gradient part of a step. */
static int grad_step(run *r)
{
    nn_tensor X = nn_f32(r->x, r->rows, r->in), C = nn_f32(r->c, r->rows, r->cond);
    nn_tensor O = nn_f32(r->out, r->rows, r->out_dim), Y = nn_f32(r->tgt, r->rows, r->out_dim);
    nn_tensor D = nn_f32(r->dout, r->rows, r->out_dim);
    BENCH_TRY(nn_params_zero_grad(nn_trunk_params(r->t), &err));
    BENCH_TRY(nn_trunk_forward(r->t, X, C, O, 1, &err));
    BENCH_TRY(nn_mse_fwd(B, r->loss, O, Y, &err));
    BENCH_TRY(nn_mse_bwd(B, D, 1.0f, O, Y, 0, &err));
    BENCH_TRY(nn_trunk_backward(r->t, D, nn_f32(NULL, r->rows, r->in), &err));
    return 0;
}

static int train_step(run *r)
{
    if (grad_step(r))
        return 1;
    BENCH_TRY(nn_adamw_step(&r->opt, NULL, &err));
    return 0;
}

/* The whole step as the trainer runs it with a graph: this step's AdamW
 * hyper-parameters written (outside the graph), the graph (gradient part,
 * norm, clipping and update, all on the device) launched, the norm read
 * back.  Captured once, replayed reps times after 3 warm-ups. */
static int time_step_graph(const char *name, run *r, int reps, double flops)
{
    cuda_graph *g = NULL;
    gt_error e2;
    timer t;
    char full[96];
    memset(&t, 0, sizeof t);
    BENCH_TRY(cuda_graph_begin(B, &err));
    int rc = grad_step(r);
    if (!rc && nn_adamw_launch(&r->opt, &err))
        rc = 1;
    if (cuda_graph_end(B, &g, &e2) != GT_OK || rc) {
        fprintf(stderr, "bench_trunk: capture of %s failed: %s / %s\n", name, err.message,
                e2.message);
        return 1;
    }
    for (int i = 0; i < 3 + reps; i++) {
        if (i == 3 && timer_start(&t))
            return 1;
        BENCH_TRY(nn_adamw_prepare(&r->opt, &err));
        BENCH_TRY(cuda_graph_launch(B, g, &err));
        BENCH_TRY(nn_adamw_finish(&r->opt, NULL, &err));
    }
    double ms = timer_stop(&t) / reps;
    snprintf(full, sizeof full, "%s_graph", name);
    result(full, ms, flops, r->rows / (ms * 1e-3));
    cuda_graph_destroy(g);
    return 0;
}

static int forward(run *r)
{
    BENCH_TRY(nn_trunk_forward(r->t, nn_f32(r->x, r->rows, r->in), nn_f32(r->c, r->rows, r->cond),
                         nn_f32(r->out, r->rows, r->out_dim), 0, &err));
    return 0;
}

/* Times fn(r) eagerly (reps after 3 warm-ups) and, when graph, as one
 * captured graph replayed reps times. */
static int time_both(const char *name, int (*fn)(run *), run *r, int graph, int reps,
                     double flops)
{
    timer t;
    char full[96];
    for (int i = 0; i < 3; i++)
        if (fn(r))
            return 1;
    if (timer_start(&t))
        return 1;
    for (int i = 0; i < reps; i++)
        if (fn(r))
            return 1;
    double ms = timer_stop(&t) / reps;
    snprintf(full, sizeof full, "%s_eager", name);
    result(full, ms, flops, r->rows / (ms * 1e-3));
    if (!graph)
        return 0;
    cuda_graph *g = NULL;
    gt_error e2;
    BENCH_TRY(cuda_graph_begin(B, &err));
    int rc = fn(r);
    if (cuda_graph_end(B, &g, &e2) != GT_OK || rc) {
        fprintf(stderr, "bench_trunk: capture of %s failed: %s / %s\n", name, err.message,
                e2.message);
        return 1;
    }
    for (int i = 0; i < 3; i++)
        BENCH_TRY(cuda_graph_launch(B, g, &err));
    if (timer_start(&t))
        return 1;
    for (int i = 0; i < reps; i++)
        BENCH_TRY(cuda_graph_launch(B, g, &err));
    ms = timer_stop(&t) / reps;
    snprintf(full, sizeof full, "%s_graph", name);
    result(full, ms, flops, r->rows / (ms * 1e-3));
    cuda_graph_destroy(g);
    return 0;
}

static int bench_train(nn_dtype dt, int batch, int reps)
{
    const char *p = dt == NN_BF16 ? "bf16" : "fp32";
    run r;
    if (run_open(&r, dt, batch))
        return 1;
    double ff = nn_trunk_forward_flops(r.t, batch);
    /* backward: weight grads (= fwd) and data grads (fwd minus the input
     * projection's, not computed) */
    const nn_trunk_config *c = nn_trunk_get_config(r.t);
    double inproj = 2.0 * batch * (double)c->hidden * (c->in_dim + c->cond_dim * c->emb_dim);
    double fl = 3.0 * ff - inproj;
    char name[64];
    snprintf(name, sizeof name, "train_%s", p);
    if (time_both(name, train_step, &r, 0, reps, fl) || time_step_graph(name, &r, reps, fl))
        return 1;
    snprintf(name, sizeof name, "grad_%s", p);
    if (time_both(name, grad_step, &r, 1, reps, fl))
        return 1;
    /* what training holds on the device once every step has run: weights,
     * gradients, AdamW's moments, the batch and the saved activations, all
     * allocated through the backend (cuBLASLt's fixed workspace aside) */
    printf("MEMORY train_%s %.1f\n", p, (double)B->bytes_live / 1048576.0);
    /* the sampler's forward: packed weights, the fixed-order product */
    BENCH_TRY(nn_trunk_pack(r.t, &err));
    snprintf(name, sizeof name, "fwd_%s", p);
    if (time_both(name, forward, &r, 1, reps, ff))
        return 1;
    run_close(&r);
    return 0;
}

/* A `steps`-step Euler sampler on the packed trunk, x += dt v(x, [t, E]):
 * eager and as one graph. */
static int sampler_steps;
static float *s_cond, *s_ones, *s_dts;

static int euler(run *r)
{
    nn_tensor X = nn_f32(r->x, r->rows, r->in), V = nn_f32(r->out, r->rows, r->out_dim);
    for (int k = 0; k < sampler_steps; k++) {
        BENCH_TRY(nn_trunk_forward(r->t, X, nn_f32(s_cond + (size_t)k * r->rows * 2, r->rows, 2), V, 0,
                             &err));
        BENCH_TRY(nn_axpby_rows(B, X, s_ones, X, s_dts, V, &err));
    }
    return 0;
}

static int bench_sampler(nn_dtype dt, int batch, int steps, int reps)
{
    const char *p = dt == NN_BF16 ? "bf16" : "fp32";
    run r;
    if (run_open(&r, dt, batch))
        return 1;
    BENCH_TRY(nn_trunk_pack(r.t, &err));
    sampler_steps = steps;
    size_t nc = (size_t)steps * batch * 2;
    float *h = malloc(nc * sizeof(float));
    float *hd = malloc((size_t)batch * 2 * sizeof(float));
    if (!h || !hd)
        return 1;
    for (int k = 0; k < steps; k++)
        for (int i = 0; i < batch; i++) {
            h[((size_t)k * batch + i) * 2] = (float)k / steps;
            h[((size_t)k * batch + i) * 2 + 1] = (float)(i % 1000) / 1000.0f;
        }
    for (int i = 0; i < batch; i++) {
        hd[i] = 1.0f;
        hd[batch + i] = 1.0f / steps;
    }
    BENCH_TRY(nn_alloc(B, nc * sizeof(float), (void **)&s_cond, &err));
    BENCH_TRY(nn_alloc(B, (size_t)batch * 2 * sizeof(float), (void **)&s_ones, &err));
    s_dts = s_ones + batch;
    BENCH_TRY(nn_copy_h2d(B, s_cond, h, nc * sizeof(float), &err));
    BENCH_TRY(nn_copy_h2d(B, s_ones, hd, (size_t)batch * 2 * sizeof(float), &err));
    free(h);
    free(hd);
    char name[64];
    snprintf(name, sizeof name, "sample%d_%s", steps, p);
    if (time_both(name, euler, &r, 1, reps, steps * nn_trunk_forward_flops(r.t, batch)))
        return 1;
    nn_free(B, s_cond);
    nn_free(B, s_ones);
    run_close(&r);
    return 0;
}

int main(int argc, char **argv)
{
    int quick = 0, device = 0, sbatch = 16384, steps = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sample-batch") && i + 1 < argc)
            sbatch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_trunk [--quick] [--device N] [--sample-batch N] "
                            "[--steps N]\n");
            return 2;
        }
    }
    if (cuda_backend_create(device, &B, &err) != GT_OK) {
        fprintf(stderr, "bench_trunk: %s\n", err.message);
        return err.code == GT_EUNSUPPORTED ? 77 : 1;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        printf("device: %s, compute capability %d.%d, %d SMs\n", prop.name, prop.major,
               prop.minor, prop.multiProcessorCount);
    int reps = quick ? 5 : 20;
    printf("baseline trunk: 6480 + 2x32 in, hidden 512, 6 blocks, 6480 out; train batch "
           "4096; sampler batch %d, %d steps\n", sbatch, steps);
    if (bench_gemm(8192, NN_BF16, quick ? 3 : 10) || bench_gemm(8192, NN_F32, 3))
        return 1;
    if (bench_train(NN_F32, 4096, reps))
        return 1;
    if (B->has_bf16 && bench_train(NN_BF16, 4096, reps))
        return 1;
    if (bench_sampler(NN_F32, sbatch, steps, quick ? 2 : 5))
        return 1;
    if (B->has_bf16 && bench_sampler(NN_BF16, sbatch, steps, quick ? 2 : 5))
        return 1;
    nn_backend_close(B);
    return 0;
}
