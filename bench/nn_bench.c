/* nn_bench: times the engine's training step (forward + backward + AdamW)
 * and sampling step (forward only) of an expert trunk, and the raw matmul
 * rates that bound them.  Output lines (parsed by run-cpu.sh):
 *   giant <fp32|bf16> <train|sample|sample-onednn> <ms_median> <ms_min> <gflop_per_step>
 *     (sample: the fixed-order forward the sampler runs; sample-onednn: the
 *     same forward through the library matmuls, the peer it must keep up with)
 *   ceiling <name> <gflops>
 * Usage: nn_bench [--batch N] [--iters N] [--hidden N] [--blocks N]
 *                 [--in N] [--out N] [--precision fp32,bf16] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "cpu_backend.h"
#include "nn_adamw.h"
#include "nn_trunk.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define DIE(...)                                                               \
    do {                                                                       \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
        exit(1);                                                               \
    } while (0)

#define TRYB(call)                                                             \
    do {                                                                       \
        if ((call) != GT_OK)                                                   \
            DIE("%s: %s", #call, err.message);                                 \
    } while (0)

static gt_error err;

typedef struct stat2 {
    double med, min;
} stat2;

static stat2 summarize(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    stat2 s = {t[n / 2], t[0]};
    return s;
}

static void bench_trunk(nn_backend *b, nn_trunk_config *cfg, int batch, int iters)
{
    nn_trunk *t;
    /* what a training step holds, by part (bytes_live between the calls) */
    size_t live0 = b->bytes_live;
    TRYB(nn_trunk_create(b, cfg, &t, &err));
    TRYB(nn_trunk_init(t, 1, 1.0f, &err));
    size_t live_w = b->bytes_live;
    TRYB(nn_trunk_plan(t, batch, &err));
    size_t live_a = b->bytes_live;
    nn_adamw_opt opt;
    nn_adamw_config oc;
    nn_adamw_config_default(&oc);
    oc.lr = 1e-4f;
    TRYB(nn_adamw_create(&opt, nn_trunk_params(t), &oc, &err));
    size_t live_o = b->bytes_live;
    float *x, *c, *y, *out, *dout, *loss;
    size_t nx = (size_t)batch * cfg->in_dim, no = (size_t)batch * cfg->out_dim;
    TRYB(nn_alloc(b, nx * 4, (void **)&x, &err));
    TRYB(nn_alloc(b, (size_t)batch * cfg->cond_dim * 4 + 4, (void **)&c, &err));
    TRYB(nn_alloc(b, no * 4, (void **)&y, &err));
    TRYB(nn_alloc(b, no * 4, (void **)&out, &err));
    TRYB(nn_alloc(b, no * 4, (void **)&dout, &err));
    TRYB(nn_alloc(b, 64, (void **)&loss, &err));
    TRYB(nn_rand_fill(b, x, nx, NN_DIST_NORMAL, 0, 1, 7, 0, 0, &err));
    TRYB(nn_rand_fill(b, c, (size_t)batch * cfg->cond_dim, NN_DIST_UNIFORM, 0, 1, 7, 1, 0, &err));
    TRYB(nn_rand_fill(b, y, no, NN_DIST_NORMAL, 0, 1, 7, 2, 0, &err));
    size_t live_io = b->bytes_live;
    nn_tensor X = nn_f32(x, batch, cfg->in_dim), C = nn_f32(c, batch, cfg->cond_dim);
    nn_tensor O = nn_f32(out, batch, cfg->out_dim), Y = nn_f32(y, batch, cfg->out_dim);
    nn_tensor DO = nn_f32(dout, batch, cfg->out_dim), DX = nn_f32(NULL, batch, cfg->in_dim);
    double *ts = calloc((size_t)iters, sizeof(double));
    const char *prec = cfg->precision == NN_BF16 ? "bf16" : "fp32";
    double fwd = nn_trunk_forward_flops(t, batch);
    /* backward: weight grads (= fwd) + data grads (fwd minus the input
     * projection's, which is not needed) */
    double inproj = 2.0 * batch * (double)cfg->hidden *
                    (cfg->in_dim + cfg->cond_dim * cfg->emb_dim);
    double train = 3.0 * fwd - inproj;
    double *tf = calloc((size_t)iters, sizeof(double)), *tb = calloc((size_t)iters, sizeof(double));
    double *to = calloc((size_t)iters, sizeof(double));
    for (int it = -2; it < iters; it++) {
        double t0 = now_ms();
        TRYB(nn_params_zero_grad(nn_trunk_params(t), &err));
        TRYB(nn_trunk_forward(t, X, C, O, 1, &err));
        TRYB(nn_mse_fwd(b, loss, O, Y, &err));
        TRYB(nn_mse_bwd(b, DO, 1.0f, O, Y, 0, &err));
        TRYB(nn_sync(b, &err));
        double t1 = now_ms();
        TRYB(nn_trunk_backward(t, DO, DX, &err));
        TRYB(nn_sync(b, &err));
        double t2 = now_ms();
        TRYB(nn_adamw_step(&opt, NULL, &err));
        TRYB(nn_sync(b, &err));
        double t3 = now_ms();
        if (it >= 0) {
            ts[it] = t3 - t0;
            tf[it] = t1 - t0;
            tb[it] = t2 - t1;
            to[it] = t3 - t2;
        }
    }
    stat2 s = summarize(ts, iters);
    printf("giant %s train %.3f %.3f %.4f\n", prec, s.med, s.min, train / 1e9);
    /* where a training step's time goes (medians, ms): forward incl. zero
     * grad and loss, backward, optimizer (norm + clip + AdamW) */
    printf("# giant %s train parts: forward %.1f, backward %.1f, optimizer %.1f ms\n", prec,
           summarize(tf, iters).med, summarize(tb, iters).med, summarize(to, iters).med);
    free(tf);
    free(tb);
    free(to);
    /* the same allocations as on a GPU (bench/gpu/bench_trunk prints the
     * device's total): the weights with their gradients and any bf16 copy,
     * the trunk's activation arena, AdamW's moments, the step's input,
     * target, output and output gradient (fp32 in every precision), and
     * whatever the step allocated on first use */
    const double mib = 1048576.0;
    printf("# giant %s train memory: %.1f MiB = weights + gradients %.1f, activations %.1f, "
           "AdamW %.1f, step input/target/output/gradient %.1f, allocated by the step %.1f\n",
           prec, (b->bytes_live - live0) / mib, (live_w - live0) / mib, (live_a - live_w) / mib,
           (live_o - live_a) / mib, (live_io - live_o) / mib, (b->bytes_live - live_io) / mib);
    fflush(stdout);
    /* sampling: the library's forward (oneDNN), then the fixed-order one
     * the sampler runs (nn_trunk_pack: batch-invariant, the same bits on
     * every CPU) */
    for (int fixed = 0; fixed < 2; fixed++) {
        if (fixed)
            TRYB(nn_trunk_pack(t, &err));
        for (int it = -2; it < iters; it++) {
            double t0 = now_ms();
            TRYB(nn_trunk_forward(t, X, C, O, 0, &err));
            TRYB(nn_sync(b, &err));
            if (it >= 0)
                ts[it] = now_ms() - t0;
        }
        s = summarize(ts, iters);
        printf("giant %s %s %.3f %.3f %.4f\n", prec, fixed ? "sample" : "sample-onednn", s.med,
               s.min, fwd / 1e9);
        fflush(stdout);
    }
    free(ts);
    nn_free(b, x);
    nn_free(b, c);
    nn_free(b, y);
    nn_free(b, out);
    nn_free(b, dout);
    nn_free(b, loss);
    nn_adamw_destroy(&opt);
    nn_trunk_destroy(t);
}

/* Best-of rates of one matmul shape (dtype of A and W) through the
 * backend's library matmul and through its fixed-order linear layer, timed
 * alternately so a burst of load from elsewhere hits both alike. */
static void pair_rate(nn_backend *b, nn_dtype dt, int m, int n, int k, int reps, double *lib,
                      double *fixed)
{
    size_t es = nn_dtype_size(dt);
    void *a, *w;
    float *c;
    TRYB(nn_alloc(b, (size_t)m * k * es, &a, &err));
    TRYB(nn_alloc(b, (size_t)n * k * es, &w, &err));
    TRYB(nn_alloc(b, (size_t)m * n * 4, (void **)&c, &err));
    memset(a, 0x3f, (size_t)m * k * es);
    memset(w, 0x3f, (size_t)n * k * es);
    nn_tensor A = nn_tensor_make(a, dt, m, k), W = nn_tensor_make(w, dt, n, k);
    nn_packed P;
    TRYB(nn_pack_weight(b, W, &P, &err));
    double best[2] = {1e30, 1e30};
    for (int r = -1; r < reps; r++) {
        for (int f = 0; f < 2; f++) {
            double t0 = now_ms();
            if (f)
                TRYB(nn_linear_fixed(b, nn_f32(c, m, n), A, &P, NULL, NN_ACT_NONE, 0, &err));
            else
                TRYB(nn_matmul(b, nn_f32(c, m, n), A, 0, W, 1, NULL, NN_ACT_NONE, 0, &err));
            double dt_ms = now_ms() - t0;
            if (r >= 0 && dt_ms < best[f])
                best[f] = dt_ms;
        }
    }
    nn_packed_free(b, &P);
    nn_free(b, a);
    nn_free(b, w);
    nn_free(b, c);
    *lib = 2.0 * m * n * k / (best[0] * 1e6);
    *fixed = 2.0 * m * n * k / (best[1] * 1e6);
}

static double sgemm_rate(int m, int n, int k, int reps)
{
    float *a = malloc((size_t)m * k * 4), *w = malloc((size_t)n * k * 4), *c = malloc((size_t)m * n * 4);
    for (size_t i = 0; i < (size_t)m * k; i++)
        a[i] = 0.5f;
    for (size_t i = 0; i < (size_t)n * k; i++)
        w[i] = 0.25f;
    double best = 1e30;
    for (int r = -1; r < reps; r++) {
        double t0 = now_ms();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, w, k, 0.0f, c, n);
        double d = now_ms() - t0;
        if (r >= 0 && d < best)
            best = d;
    }
    free(a);
    free(w);
    free(c);
    return 2.0 * m * n * k / (best * 1e6);
}

int main(int argc, char **argv)
{
    nn_trunk_config cfg;
    nn_trunk_config_default(&cfg);
    int batch = 256, iters = 10;
    const char *precs = "fp32,bf16";
    int ceilings = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-ceilings")) {
            ceilings = 0;
            continue;
        }
        if (!v)
            DIE("missing value for %s", a);
        if (!strcmp(a, "--batch"))
            batch = atoi(v);
        else if (!strcmp(a, "--iters"))
            iters = atoi(v);
        else if (!strcmp(a, "--hidden"))
            cfg.hidden = atoi(v);
        else if (!strcmp(a, "--blocks"))
            cfg.blocks = atoi(v);
        else if (!strcmp(a, "--in"))
            cfg.in_dim = atoi(v);
        else if (!strcmp(a, "--out"))
            cfg.out_dim = atoi(v);
        else if (!strcmp(a, "--precision"))
            precs = v;
        else
            DIE("unknown option %s", a);
        i++;
    }
    if (batch < 1 || iters < 1)
        DIE("bad --batch or --iters");
    nn_backend *b;
    TRYB(cpu_backend_create(&b, &err));
    printf("# backend %s: bf16 %s; fixed-order sampling kernels: fp32 %s, bf16 %s\n", b->name,
           b->has_bf16 ? "native (oneDNN, AVX512-BF16)" : "emulated",
           cpu_backend_fixed_kernel(b, NN_F32), cpu_backend_fixed_kernel(b, NN_BF16));
    if (strstr(precs, "fp32")) {
        cfg.precision = NN_F32;
        bench_trunk(b, &cfg, batch, iters);
    }
    if (strstr(precs, "bf16")) {
        cfg.precision = NN_BF16;
        bench_trunk(b, &cfg, batch, iters);
    }
    if (ceilings) {
        /* the input projection's shape, the largest of the step */
        int m = batch, n = cfg.hidden, k = cfg.in_dim + cfg.cond_dim * cfg.emb_dim;
        printf("ceiling openblas_sgemm_%dx%dx%d %.1f\n", m, n, k, sgemm_rate(m, n, k, 5));
        /* the library's matmul and the sampler's fixed-order layer on the
         * input projection, a block's product and the output head */
        const int shapes[3][2] = {{n, k}, {cfg.hidden, cfg.hidden}, {cfg.out_dim, cfg.hidden}};
        for (int i = 0; i < 3; i++) {
            int sn = shapes[i][0], sk = shapes[i][1];
            double lib, fixed;
            pair_rate(b, NN_F32, m, sn, sk, 20, &lib, &fixed);
            printf("ceiling engine_f32_matmul_%dx%dx%d %.1f\n", m, sn, sk, lib);
            printf("ceiling engine_f32_fixed_%dx%dx%d %.1f\n", m, sn, sk, fixed);
            pair_rate(b, NN_BF16, m, sn, sk, 20, &lib, &fixed);
            printf("ceiling onednn_bf16_matmul_%dx%dx%d %.1f\n", m, sn, sk, lib);
            printf("ceiling engine_bf16_fixed_%dx%dx%d %.1f\n", m, sn, sk, fixed);
        }
    }
    nn_backend_close(b);
    return 0;
}
