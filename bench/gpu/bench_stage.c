/* bench_stage: the real stage trainer (engine/model's model_stage, what
 * `giant train` runs) on a config's stage 2, in fp32 and bf16, eagerly and
 * with its step's device part as one CUDA graph (model_stage_run_device):
 * milliseconds a step and what the stage holds on the device.
 *
 *   bench_stage CONFIG [--device SPEC] [--steps N] [--showers N]
 *                      [--batch B] [--hidden H] [--blocks K] [--precision P]
 *
 * CONFIG is a run config (configs/baseline.json: stage 2 an expert trunk
 * 512 x 6 at batch 4 096); the synthetic dataset is cut to --showers
 * (default 2 x batch + 1 024) so that the data stays small beside the
 * step.  Each step is timed at the step hook (log_every 1: the hook reads
 * the loss back, so the step has finished), and the median of the steps
 * after the first three is the figure: the first runs eagerly, the second
 * captures the graph.  Validation (at the last step) is left out.
 *
 * Rows "RESULT stage_<prec>_<eager|graph> <ms> <tflops> <samples_per_s>"
 * and "MEMORY stage_<prec> <MiB>" (backend bytes the stage holds after
 * training, its device copy of the data included; "data" says how much of
 * it that is) for bench/gpu/summary.py.  On a device without graphs (the
 * CPU) the graph rows are the eager run again, labelled so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gt_clock.h"
#include "gt_error.h"
#include "model_backend.h"
#include "model_config.h"
#include "model_data.h"
#include "model_stage.h"
#include "nn_trunk.h"

#define MAX_STEPS 1000

typedef struct timing {
    double t[MAX_STEPS + 1];
    int n;
} timing;

static int on_step(void *user, const model_step_report *r)
{
    timing *tm = user;
    (void)r;
    if (tm->n <= MAX_STEPS)
        tm->t[tm->n++] = gt_clock_s();
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Trains stage 2 for cfg->steps2 steps with graphs on or off; *ms the median
 * step after the first three, *mib what the stage holds afterwards. */
static int run_stage(nn_backend *b, const model_config *cfg, const model_stage_data *d,
                     int graphs, double *ms, double *mib, double *flops, long long *replays,
                     gt_error *err)
{
    model_stage *s = NULL;
    size_t before = b->bytes_live;
    int rc = model_stage_create(b, cfg, 2, d, &s, err);
    if (rc)
        return rc;
    model_stage_set_graphs(s, graphs);
    timing tm;
    memset(&tm, 0, sizeof tm);
    model_stage_hooks h = {&tm, on_step, NULL, NULL, NULL};
    tm.t[tm.n++] = gt_clock_s();
    rc = model_stage_train(s, &h, err);
    if (!rc) {
        /* steps 4.. (the last one validates after its hook: not counted) */
        double dt[MAX_STEPS];
        int k = 0;
        for (int i = 4; i < tm.n; i++)
            dt[k++] = tm.t[i] - tm.t[i - 1];
        qsort(dt, (size_t)k, sizeof dt[0], cmp_double);
        *ms = k ? 1e3 * dt[k / 2] : 0.0;
        *mib = (double)(b->bytes_live - before) / 1048576.0;
        nn_trunk *t = model_stage_trunk(s);
        const nn_trunk_config *c = nn_trunk_get_config(t);
        double ff = nn_trunk_forward_flops(t, cfg->batch);
        /* backward: weight grads (= forward) and data grads less the input
         * projection's (not computed), as bench_trunk counts */
        double inproj = 2.0 * cfg->batch * (double)c->hidden * (c->in_dim + c->cond_dim * c->emb_dim);
        *flops = 3.0 * ff - inproj;
        *replays = model_stage_graph_replays(s);
    }
    model_stage_destroy(s);
    return rc;
}

/* A positive integer option, or 0 after saying why. */
static int positive(const char *opt, const char *v)
{
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x <= 0 || x > 1 << 24) {
        fprintf(stderr, "bench_stage: %s wants a positive integer, got \"%s\"\n", opt, v);
        return 0;
    }
    return (int)x;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_stage CONFIG [--device SPEC] [--steps N] [--showers N] "
                    "[--batch B] [--hidden H] [--blocks K] [--precision fp32|bf16|both]\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage();
        return 2;
    }
    const char *path = argv[1], *device = "cuda:0", *precision = "both";
    int steps = 30, showers = 0, batch = 0, hidden = 0, blocks = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage();
            return 2;
        }
        int *num = !strcmp(a, "--steps")     ? &steps
                   : !strcmp(a, "--showers") ? &showers
                   : !strcmp(a, "--batch")   ? &batch
                   : !strcmp(a, "--hidden")  ? &hidden
                   : !strcmp(a, "--blocks")  ? &blocks
                                             : NULL;
        if (num) {
            if (!(*num = positive(a, v)))
                return 2;
        } else if (!strcmp(a, "--device")) {
            device = v;
        } else if (!strcmp(a, "--precision") &&
                   (!strcmp(v, "fp32") || !strcmp(v, "bf16") || !strcmp(v, "both"))) {
            precision = v;
        } else {
            usage();
            return 2;
        }
        i++;
    }
    if (steps < 6 || steps > MAX_STEPS) {
        fprintf(stderr, "bench_stage: --steps must be in [6, %d]\n", MAX_STEPS);
        return 2;
    }
    gt_error err;
    char field[64];
    model_config cfg;
    if (model_config_load(path, &cfg, field, sizeof field, &err)) {
        fprintf(stderr, "bench_stage: %s: %s\n", path, err.message);
        return 1;
    }
    if (batch > 0)
        cfg.batch = batch;
    if (hidden > 0)
        cfg.stage2.trunk.hidden = hidden;
    if (blocks > 0)
        cfg.stage2.trunk.blocks = blocks;
    cfg.synthetic_n = showers > 0 ? showers : 2 * cfg.batch + 1024;
    cfg.steps2 = steps;
    cfg.log_every = 1;
    cfg.val_every = steps;
    cfg.ckpt_every = steps;
    cfg.val_size = 256;
    nn_backend *b = NULL;
    if (model_backend_open(device, &b, &err)) {
        fprintf(stderr, "bench_stage: %s: %s\n", device, err.message);
        return 1;
    }
    model_dataset ds;
    model_arrays arr;
    double t_data = gt_clock_s();
    if (model_dataset_load(&cfg, NULL, &ds, &err) ||
        model_arrays_build(&cfg, &ds, &arr, &err)) {
        fprintf(stderr, "bench_stage: data: %s\n", err.message);
        nn_backend_close(b);
        return 1;
    }
    model_stage_data d = model_arrays_stage(&arr, 2);
    double data_mib = (double)(d.n_train + d.n_val) * (d.dim + d.n_cond) * 4.0 / 1048576.0;
    printf("# bench_stage %s on %s: stage 2, %d x %d, batch %d, D %d, %d training rows "
           "(data %.1f MiB on the device, made in %.1f s on the host), %d steps\n",
           path, device, cfg.stage2.trunk.hidden, cfg.stage2.trunk.blocks, cfg.batch, d.dim,
           d.n_train, data_mib, gt_clock_s() - t_data, steps);
    int failed = 0;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        const char *p = bf16 ? "bf16" : "fp32";
        if (strcmp(precision, "both") && strcmp(precision, p))
            continue;
        cfg.bf16 = bf16;
        double mib = 0;
        for (int graphs = 0; graphs < 2; graphs++) {
            double ms = 0, fl = 0;
            long long replays = 0;
            double t_run = gt_clock_s();
            if (run_stage(b, &cfg, &d, graphs, &ms, &mib, &fl, &replays, &err)) {
                printf("SKIP stage_%s_%s: %s\n", p, graphs ? "graph" : "eager", err.message);
                failed += !(bf16 && strstr(err.message, "bf16"));
                break;
            }
            const char *how = graphs ? (replays ? "graph" : "graph_none") : "eager";
            printf("RESULT stage_%s_%s %.4f %.2f %.0f\n", p, how, ms,
                   ms > 0 ? fl / (ms * 1e-3) / 1e12 : 0.0, ms > 0 ? cfg.batch / (ms * 1e-3) : 0.0);
            printf("# stage %s %s: %.3f ms a step, %lld steps replayed from a graph, "
                   "%.1f s in all\n",
                   p, graphs ? "graphs on" : "eager", ms, replays, gt_clock_s() - t_run);
        }
        if (mib > 0)
            printf("MEMORY stage_%s %.1f\n", p, mib);
    }
    model_arrays_free(&arr);
    model_dataset_free(&ds);
    nn_backend_close(b);
    return failed ? 1 : 0;
}
