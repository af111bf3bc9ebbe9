/* bench_trunk: times the baseline trunk on the CUDA backend.
 *
 *   bench_trunk [--quick] [--device N] [--sample-batch N] [--steps N]
 *
 * Rows printed as "RESULT <name> <ms> <tflops> <per_s>" (per_s: samples or
 * showers per second, 0 when not meaningful) for bench/gpu/summary.py, plus
 * a readable table.  Measured with CUDA events on the backend's stream
 * after warm-up; "graph" rows replay one CUDA graph per step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_backend.h"
#include "gpu_model.h"
#include "nn_rng.h"

#define TRY(x)                                                                 \
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
    TRY(B->ops->alloc(B, nn * sizeof(float), &af, &err));
    TRY(B->ops->alloc(B, nn * sizeof(float), &c, &err));
    TRY(B->ops->rand_fill(B, af, nn, NN_DIST_NORMAL, 0.0f, 1.0f, 1, 0, 0, &err));
    nn_tensor A, Bt, C = nn_tensor_make(c, NN_F32, n, n);
    if (dt == NN_BF16) {
        TRY(B->ops->alloc(B, nn * 2, &a, &err));
        TRY(B->ops->alloc(B, nn * 2, &bb, &err));
        TRY(B->ops->cast_bf16(B, nn_tensor_make(a, NN_BF16, n, n),
                              nn_tensor_make(af, NN_F32, n, n), &err));
        TRY(B->ops->cast_bf16(B, nn_tensor_make(bb, NN_BF16, n, n),
                              nn_tensor_make(af, NN_F32, n, n), &err));
        A = nn_tensor_make(a, NN_BF16, n, n);
        Bt = nn_tensor_make(bb, NN_BF16, n, n);
    } else {
        A = nn_tensor_make(af, NN_F32, n, n);
        Bt = nn_tensor_make(af, NN_F32, n, n);
    }
    for (int i = 0; i < 3; i++)
        TRY(B->ops->matmul(B, C, A, 0, Bt, 1, NULL, NN_ACT_NONE, 0, &err));
    timer t;
    if (timer_start(&t))
        return 1;
    for (int i = 0; i < reps; i++)
        TRY(B->ops->matmul(B, C, A, 0, Bt, 1, NULL, NN_ACT_NONE, 0, &err));
    double ms = timer_stop(&t) / reps;
    char name[64];
    snprintf(name, sizeof name, "gemm_%s_%d", dt == NN_BF16 ? "bf16" : "fp32", n);
    result(name, ms, 2.0 * n * (double)n * n, 0);
    B->ops->free(B, a);
    B->ops->free(B, bb);
    B->ops->free(B, af);
    B->ops->free(B, c);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* training and sampling                                                    */
/* ------------------------------------------------------------------------ */

static int fill_inputs(gpu_model *m, int rows, const gpu_model_config *c)
{
    TRY(B->ops->rand_fill(B, gpu_model_x(m), (size_t)rows * c->in_dim, NN_DIST_NORMAL, 0, 1,
                          3, 0, 0, &err));
    TRY(B->ops->rand_fill(B, gpu_model_cond(m), (size_t)rows * c->cond_dim, NN_DIST_UNIFORM, 0,
                          1, 3, 1, 0, &err));
    TRY(B->ops->rand_fill(B, gpu_model_target(m), (size_t)rows * c->out_dim, NN_DIST_NORMAL, 0,
                          1, 3, 2, 0, &err));
    return 0;
}

static int bench_train(nn_dtype dt, int batch, int reps)
{
    const char *p = dt == NN_BF16 ? "bf16" : "fp32";
    gpu_model_config c;
    gpu_model_config_default(&c);
    c.precision = dt;
    c.batch = batch;
    gpu_model *m = NULL;
    TRY(gpu_model_create(B, &c, &m, &err));
    TRY(gpu_model_init(m, 1, &err));
    if (fill_inputs(m, batch, &c))
        return 1;
    nn_adamw_hp hp = nn_adamw_hp_make(1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1.0f);
    double fl = gpu_model_train_flops(m, batch), ff = gpu_model_forward_flops(m, batch);
    char name[64];
    timer t;

    /* training step, eager */
    for (int i = 0; i < 3; i++)
        TRY(gpu_model_train_step(m, batch, &hp, &err));
    if (timer_start(&t))
        return 1;
    for (int i = 0; i < reps; i++)
        TRY(gpu_model_train_step(m, batch, &hp, &err));
    double ms = timer_stop(&t) / reps;
    snprintf(name, sizeof name, "train_%s_eager", p);
    result(name, ms, fl, batch / (ms * 1e-3));

    /* training step, one graph */
    cuda_graph *g = NULL;
    TRY(cuda_graph_begin(B, &err));
    int rc = gpu_model_train_step(m, batch, &hp, &err);
    gt_error e2;
    if (cuda_graph_end(B, &g, &e2) != GT_OK || rc != GT_OK) {
        fprintf(stderr, "bench_trunk: capture failed: %s / %s\n", err.message, e2.message);
        return 1;
    }
    for (int i = 0; i < 3; i++)
        TRY(cuda_graph_launch(B, g, &err));
    if (timer_start(&t))
        return 1;
    for (int i = 0; i < reps; i++)
        TRY(cuda_graph_launch(B, g, &err));
    ms = timer_stop(&t) / reps;
    snprintf(name, sizeof name, "train_%s_graph", p);
    result(name, ms, fl, batch / (ms * 1e-3));
    cuda_graph_destroy(g);

    /* sampling forward step (no grad), eager and graph */
    for (int i = 0; i < 3; i++)
        TRY(gpu_model_forward(m, batch, 0, &err));
    if (timer_start(&t))
        return 1;
    for (int i = 0; i < reps; i++)
        TRY(gpu_model_forward(m, batch, 0, &err));
    ms = timer_stop(&t) / reps;
    snprintf(name, sizeof name, "fwd_%s_eager", p);
    result(name, ms, ff, batch / (ms * 1e-3));
    g = NULL;
    TRY(cuda_graph_begin(B, &err));
    rc = gpu_model_forward(m, batch, 0, &err);
    if (cuda_graph_end(B, &g, &e2) != GT_OK || rc != GT_OK) {
        fprintf(stderr, "bench_trunk: capture failed: %s / %s\n", err.message, e2.message);
        return 1;
    }
    for (int i = 0; i < 3; i++)
        TRY(cuda_graph_launch(B, g, &err));
    if (timer_start(&t))
        return 1;
    for (int i = 0; i < reps; i++)
        TRY(cuda_graph_launch(B, g, &err));
    ms = timer_stop(&t) / reps;
    snprintf(name, sizeof name, "fwd_%s_graph", p);
    result(name, ms, ff, batch / (ms * 1e-3));
    cuda_graph_destroy(g);
    gpu_model_destroy(m);
    return 0;
}

static int bench_sampler(nn_dtype dt, int batch, int steps, int reps)
{
    const char *p = dt == NN_BF16 ? "bf16" : "fp32";
    gpu_model_config c;
    gpu_model_config_default(&c);
    c.precision = dt;
    c.batch = batch;
    gpu_model *m = NULL;
    TRY(gpu_model_create(B, &c, &m, &err));
    TRY(gpu_model_init(m, 1, &err));
    TRY(gpu_model_sample_prepare(m, steps, &err));
    double fl = steps * gpu_model_forward_flops(m, batch);
    char name[64];
    timer t;
    TRY(gpu_model_sample(m, batch, 1, &err));
    if (timer_start(&t))
        return 1;
    for (int i = 0; i < reps; i++)
        TRY(gpu_model_sample(m, batch, (uint64_t)i + 2, &err));
    double ms = timer_stop(&t) / reps;
    snprintf(name, sizeof name, "sample%d_%s_eager", steps, p);
    result(name, ms, fl, batch / (ms * 1e-3));
    cuda_graph *g = NULL;
    gt_error e2;
    TRY(cuda_graph_begin(B, &err));
    int rc = gpu_model_sample(m, batch, 7, &err);
    if (cuda_graph_end(B, &g, &e2) != GT_OK || rc != GT_OK) {
        fprintf(stderr, "bench_trunk: capture failed: %s / %s\n", err.message, e2.message);
        return 1;
    }
    TRY(cuda_graph_launch(B, g, &err));
    if (timer_start(&t))
        return 1;
    for (int i = 0; i < reps; i++)
        TRY(cuda_graph_launch(B, g, &err));
    ms = timer_stop(&t) / reps;
    snprintf(name, sizeof name, "sample%d_%s_graph", steps, p);
    result(name, ms, fl, batch / (ms * 1e-3));
    cuda_graph_destroy(g);
    gpu_model_destroy(m);
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
    B->ops->destroy(B);
    return 0;
}
