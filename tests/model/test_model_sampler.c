/* Reproducible showers: a sampled shower is a pure function of (checkpoint,
 * request seed, row index, incident energy, sampler settings), for every
 * model variant in fp32 and bf16:
 *  - whatever the sampler's batch (1, 8, 20, 64 rows per pass, with odd
 *    tails: 45 rows);
 *  - whatever the requests it is batched with (the rows split over three
 *    requests behind an unrelated one);
 *  - whatever the OpenMP thread count (1 or 2);
 *  - whatever the CPU's instruction set: the AVX-512, AVX2 and scalar
 *    kernels, and native bf16 (VDPBF16PS) against its emulation, give the
 *    same bytes (kernels this CPU lacks are skipped, with a note).
 * Once a shape has run, a batch copies between host and device only what
 * the stages exchange (no per-step copy, no read-back by the trunks) and
 * allocates nothing; bad energies and a checkpoint whose network gives NaN
 * are errors that say so, never NaN showers.
 * On a CUDA device (skipped without one) the GPU's showers are
 * batch-invariant as well, and integrations replayed from CUDA graphs give
 * the eager bytes.
 * Under a learned acceptance test (model_accept), the rows not kept are
 * drawn again: the showers are still the same bytes through every batch,
 * split and thread count, a row kept at its first draw is the shower the
 * sampler makes without the test, and a damaged or foreign test is refused.
 * Every voxel served, by every variant, batching and kernel, with and
 * without the acceptance test, on the CPU and the GPU, is 0 or at least the
 * readout threshold the transforms carry (the training showers' smallest
 * hit; the geometry's for version-1 transforms, which the variants standing
 * for runs recorded before a migration have); raised to the median hit, it
 * cuts exactly the hits under it and changes nothing else.
 * The models are trained for a few steps only: invariance holds for any
 * weights, and a tiny run keeps the test fast.  The autoregressive variant
 * samples energies from 300 MeV to 260 GeV, so rows leave the active set
 * at different layers (the active set changes the matmul's row count). */
#include "model_backend.h"
#include "check.h"
#include "feat.h"
#include "model_accept.h"
#include "model_ckpt.h"
#include "model_config.h"
#include "model_data.h"
#include "model_run.h"
#include "model_sampler.h"
#include "model_stage.h"
#include "nn_ckpt.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_ROWS 45

/* A variant names what differs from a flow oneshot model with an expert
 * trunk (the zero values) besides its solver. */
typedef struct variant {
    const char *name;
    model_objective obj;
    model_stage2_mode mode;
    model_trunk_kind kind;
    model_solver solver;
    int before;         /* 0, or the migration (4, 5, 8, 9, 12, 13, 14) whose old values a run
                         * recorded before it keeps: it must serve the
                         * bytes pinned then */
    int history;        /* model.stage2.history (autoregressive) */
    model_block_cond block_cond;   /* model.stage2.trunk.block_cond */
    double temperature; /* sample.temperature (0: the default, 1) */
} variant;

static const variant VARIANTS[] = {
    {"flow oneshot heun", .solver = MODEL_SOLVER_HEUN},
    {"flow oneshot euler", .solver = MODEL_SOLVER_EULER},
    {"routed", .kind = MODEL_TRUNK_ROUTED, .solver = MODEL_SOLVER_HEUN},
    {"autoregressive", .mode = MODEL_MODE_AUTOREGRESSIVE, .solver = MODEL_SOLVER_HEUN},
    {"wgan", .obj = MODEL_OBJ_WGAN, .solver = MODEL_SOLVER_HEUN},
    {"ddpm", .obj = MODEL_OBJ_DDPM, .solver = MODEL_SOLVER_DDIM},
    /* rings off and the old noise top: a run recorded before migration
     * 0004 serves the bytes it served then (its hashes are the ones pinned
     * before rings existed) */
    {"flow oneshot no rings", .solver = MODEL_SOLVER_HEUN, .before = 4},
    /* no layer weight and no keep_largest: before 0005 (the hashes "flow
     * oneshot heun" had then) */
    {"flow oneshot before 0005", .solver = MODEL_SOLVER_HEUN, .before = 5},
    /* no ring hit counts: before 0008 (the hashes "flow oneshot heun" and
     * "autoregressive" had then) */
    {"flow oneshot before 0008", .solver = MODEL_SOLVER_HEUN, .before = 8},
    {"autoregressive before 0008", .mode = MODEL_MODE_AUTOREGRESSIVE,
     .solver = MODEL_SOLVER_HEUN, .before = 8},
    /* the uniform time grid: before 0009 (the hashes "flow oneshot heun",
     * "flow oneshot euler" and "autoregressive" had then) */
    {"flow oneshot heun before 0009", .solver = MODEL_SOLVER_HEUN, .before = 9},
    {"flow oneshot euler before 0009", .solver = MODEL_SOLVER_EULER, .before = 9},
    {"autoregressive before 0009", .mode = MODEL_MODE_AUTOREGRESSIVE,
     .solver = MODEL_SOLVER_HEUN, .before = 9},
    /* the previous layers' shares among the token conditions */
    {"autoregressive history 2", .mode = MODEL_MODE_AUTOREGRESSIVE,
     .solver = MODEL_SOLVER_HEUN, .history = 2},
    /* showers not turned about the beam axis: before 0012 (the hashes
     * "flow oneshot heun" and "autoregressive" had then); each also checks
     * that the turned showers are its own, turned */
    {"flow oneshot heun before 0012", .solver = MODEL_SOLVER_HEUN, .before = 12},
    {"autoregressive before 0012", .mode = MODEL_MODE_AUTOREGRESSIVE,
     .solver = MODEL_SOLVER_HEUN, .before = 12},
    /* each ring's hit count its own feature, not the layer's total and its
     * stick-breaking: before 0013 (the hashes "flow oneshot heun" and
     * "autoregressive" had then) */
    {"flow oneshot heun before 0013", .solver = MODEL_SOLVER_HEUN, .before = 13},
    {"autoregressive before 0013", .mode = MODEL_MODE_AUTOREGRESSIVE,
     .solver = MODEL_SOLVER_HEUN, .before = 13},
    /* stage 1 without the shower's profile, stage 2 not conditioned on
     * it: before 0014 (the hashes "flow oneshot heun" and "autoregressive"
     * had then) */
    {"flow oneshot heun before 0014", .solver = MODEL_SOLVER_HEUN, .before = 14},
    {"autoregressive before 0014", .mode = MODEL_MODE_AUTOREGRESSIVE,
     .solver = MODEL_SOLVER_HEUN, .before = 14},
    /* the two-step Adams-Bashforth solver (its first step Heun's) */
    {"autoregressive history 2 ab2", .mode = MODEL_MODE_AUTOREGRESSIVE,
     .solver = MODEL_SOLVER_AB2, .history = 2},
    {"flow oneshot ab2", .solver = MODEL_SOLVER_AB2},
    /* every condition's embedding in every block of the stage-2 trunk */
    {"autoregressive block_cond all", .mode = MODEL_MODE_AUTOREGRESSIVE,
     .solver = MODEL_SOLVER_AB2, .history = 2, .block_cond = MODEL_BLOCK_COND_ALL},
    /* stage 2's starting noise narrowed (the default, 1, is every variant
     * above: their hashes are the ones pinned before the field) */
    {"autoregressive history 2 ab2 temperature 0.9", .mode = MODEL_MODE_AUTOREGRESSIVE,
     .solver = MODEL_SOLVER_AB2, .history = 2, .temperature = 0.9},
    {"flow oneshot ab2 temperature 0.9", .solver = MODEL_SOLVER_AB2, .temperature = 0.9},
};

/* FNV-1a of the reference showers of each variant (fp32, bf16), written on
 * an AMD EPYC (Zen 4, AVX-512 + AVX512-BF16) and reproduced there with the
 * AVX2 and scalar kernels and the bf16 emulation.  Every x86-64 CPU with
 * FMA must give them: a mismatch on another machine is exactly the bug
 * this file exists to catch.  A change of the model or its data pipeline
 * changes them too; then print and update. */
static const uint64_t GOLDEN[][2] = {
    {0x2cc6b0cc3521cb59ull, 0xbe94fd89af62bbe3ull},   /* flow oneshot heun */
    {0xee5bc0767440a804ull, 0x70bcae79412adf21ull},   /* flow oneshot euler */
    {0x9adfd602ee323b63ull, 0xfe4b6a8a99192fe4ull},   /* routed */
    {0x64366513e269af99ull, 0xc337a8edc516c146ull},   /* autoregressive */
    {0xd345a0c7d0f02b58ull, 0x421abf8b7a9fbfb3ull},   /* wgan */
    {0x987ffb6798240095ull, 0x5e9fe47612a0f071ull},   /* ddpm */
    {0x2879c7a27af703dfull, 0x8495cf414cc2d700ull},   /* flow oneshot no rings */
    {0x1f90f0ded75b85a0ull, 0x708ece49d9fd9cf3ull},   /* flow oneshot before 0005 */
    {0x93b3d64a623ad1cfull, 0xf6c06d9a852d5c75ull},   /* flow oneshot before 0008 */
    {0x11c6fc3417b04de8ull, 0xbf602d4449b1e863ull},   /* autoregressive before 0008 */
    {0x42587d6e94309c86ull, 0xbdae3664fcdac2adull},   /* flow oneshot heun before 0009 */
    {0x202cb99bd4058e8dull, 0xcb67106ac892a201ull},   /* flow oneshot euler before 0009 */
    {0x1bdee4b6164b353bull, 0x4545e16440dc0c5dull},   /* autoregressive before 0009 */
    {0xda71f98dde206404ull, 0x8afde02da0e8b3ebull},   /* autoregressive history 2 */
    {0x018236d69841f27eull, 0x0c113c146a908238ull},   /* flow oneshot heun before 0012 */
    {0xb5823913f310d4afull, 0x5e230af7359f0a04ull},   /* autoregressive before 0012 */
    {0x4b6dabeb3e87796aull, 0xe90c49c87ea0152aull},   /* flow oneshot heun before 0013 */
    {0x9911cb3c95aeae5bull, 0x82c36c44e33c7a34ull},   /* autoregressive before 0013 */
    {0x5cd4167802da74efull, 0x1a06beabef135888ull},   /* flow oneshot heun before 0014 */
    {0x7501cbcb4d25da1bull, 0xe99bb0d6e5744915ull},   /* autoregressive before 0014 */
    {0x1d892047f4e4ac9eull, 0x1d4dc7f84a4d6020ull},   /* autoregressive history 2 ab2 */
    {0x94053ddd45ac5597ull, 0x02103a8f9f206dd8ull},   /* flow oneshot ab2 */
    {0x8a17ceeab8e387e0ull, 0xbe7c79061cd8f298ull},   /* autoregressive block_cond all */
    {0xcaae8434ad2fde2aull, 0x5122ad849085c5c9ull},   /* autoregressive history 2 ab2 temperature 0.9 */
    {0x2477fc3efadeed3dull, 0x0b8c42c1c5187e49ull},   /* flow oneshot ab2 temperature 0.9 */
};

typedef struct trained {
    model_config cfg;
    void *ck[3];        /* stage 1 and 2 checkpoints (index 0 unused) */
    size_t len[3];
    int v1;             /* the transforms written as version 1, without a readout
                         * threshold: a run recorded before it was (the
                         * geometry's detector threshold applies) */
    float readout;      /* > 0: the readout threshold the transforms carry instead of
                         * the training showers' smallest hit; after
                         * make_checkpoints, the one the sampler must apply */
} trained;

static void tiny_config(const variant *v, int bf16, model_config *c)
{
    model_config_defaults(c);
    snprintf(c->name, sizeof c->name, "sampler-%s", v->name);
    snprintf(c->geometry, sizeof c->geometry, "dataset_1_photons");
    snprintf(c->device, sizeof c->device, "cpu");
    c->synthetic_n = 300;
    c->synthetic_seed = 5;
    c->synthetic_emin_mev = 256;
    c->synthetic_emax_mev = 262144;
    c->val_fraction = 0.2;
    c->stage1.objective = v->obj == MODEL_OBJ_DDPM ? MODEL_OBJ_DDPM : MODEL_OBJ_FLOW;
    c->stage1.trunk.hidden = 16;
    c->stage1.trunk.blocks = 1;
    c->stage1.trunk.emb_dim = 8;
    c->stage2.objective = v->obj;
    c->stage2.mode = v->mode;
    c->stage2.history = v->history;
    c->stage2.trunk.kind = v->kind;
    c->stage2.trunk.block_cond = v->block_cond;
    c->stage2.trunk.hidden = 40;   /* not a multiple of the kernels' column panels */
    c->stage2.trunk.blocks = 2;
    c->stage2.trunk.emb_dim = 8;
    c->stage2.trunk.experts = 3;
    c->stage2.trunk.top_k = 2;
    c->stage2.wgan.critic_steps = 2;
    c->stage2.wgan.critic_hidden = 32;
    c->stage2.wgan.critic_depth = 1;
    c->bf16 = bf16;
    c->batch = 32;
    c->steps1 = 4;
    c->steps2 = 4;
    c->warmup_steps = 1;
    c->val_every = 2;
    c->ckpt_every = 2;
    c->val_size = 32;
    c->log_every = 2;
    c->solver = v->solver;
    if (v->before == 4) {
        c->stage2.rings = 0;
        c->stage2.dequantize_top = 0.1;
    }
    if (v->before == 4 || v->before == 5) {
        c->stage2.keep_largest = 0;
        c->stage2.layer_weight = 1;
    }
    if (v->before == 4 || v->before == 5 || v->before == 8)
        c->stage2.ring_counts = 0;
    c->sample_steps = 3;
    if ((v->before && v->before < 12) || v->obj == MODEL_OBJ_DDPM)
        c->time_power = 1; /* the uniform grid (ddpm: what parsing gives) */
    if (v->before && v->before <= 12)
        c->symmetrize = 0; /* every run recorded before 0012 */
    if (v->before && v->before <= 13)
        c->stage2.count_stick = 0; /* every run recorded before 0013 */
    if (v->before)
        c->stage1.profile = 0; /* every run recorded before 0014 */
    c->temperature = v->temperature > 0 ? v->temperature : 1;
}

/* A variant's config in fp32 or bf16, no checkpoints yet; a variant that
 * stands for a run recorded before a migration has version-1 transforms,
 * as every such run has. */
static void trained_init(const variant *v, int bf16, trained *t)
{
    memset(t, 0, sizeof *t);
    tiny_config(v, bf16, &t->cfg);
    t->v1 = v->before != 0;
}

/* Voxels neither 0 nor at least the readout threshold thr (a NaN too). */
static size_t under_readout(const float *x, size_t n, float thr)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += x[i] != 0.0f && !(x[i] >= thr);
    return bad;
}

static uint64_t fnv(const float *x, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        h = (h ^ u) * 1099511628211ull;
    }
    return h;
}

/* The acceptance test sample() sets on its sampler (NULL: none), and the
 * draws per shower of its last run. */
static const void *g_accept;
static size_t g_accept_len;
static double g_draws;

/* Samples the N_ROWS rows as `parts` requests (row0 at each cut) behind an
 * unrelated request, max_batch rows per pass, on backend b. */
static int sample(nn_backend *b, const trained *t, int max_batch, const int *cuts, int parts,
                  const float *e_inc, float *out, double *evals, gt_error *err)
{
    model_sampler *s = NULL;
    int rc = model_sampler_open(b, &t->cfg, t->ck[1], t->len[1], t->ck[2],
                                t->len[2], max_batch, &s, err);
    if (rc)
        return rc;
    if (g_accept && (rc = model_sampler_set_accept(s, g_accept, g_accept_len, err))) {
        model_sampler_close(s);
        return rc;
    }
    const int V = model_sampler_voxels(s);
    float other_e[11], *other = malloc((size_t)11 * V * sizeof(float));
    for (int i = 0; i < 11; i++)
        other_e[i] = 5000.0f + 1000.0f * (float)i;
    model_sample_request rq[8];
    int nr = 0;
    if (parts > 1)
        rq[nr++] = (model_sample_request){other_e, 11, 5, 0, other, NULL, 0};
    for (int p = 0; p < parts; p++) {
        int a = cuts[p], z = p + 1 < parts ? cuts[p + 1] : N_ROWS;
        rq[nr++] = (model_sample_request){e_inc + a, z - a, 77, a, out + (size_t)a * V, NULL, 0};
    }
    rc = model_sampler_run(s, rq, nr, 0, err);
    if (evals)
        *evals = model_sampler_evals_per_shower(s);
    g_draws = model_sampler_draws_per_shower(s);
    free(other);
    model_sampler_close(s);
    return rc;
}

/* Opens a CPU backend.  kernel NULL: as the environment says (a CI pass
 * that holds the suite to AVX2 sets GIANT_CPU_KERNEL itself); else with
 * GIANT_CPU_KERNEL = kernel ("" = the best) and, when emulate_bf16, the
 * bf16 emulation; the environment is restored afterwards. */
static nn_backend *open_cpu(const char *kernel, int emulate_bf16)
{
    char *saved[2] = {NULL, NULL};
    const char *names[2] = {"GIANT_CPU_KERNEL", "GIANT_CPU_BF16"};
    for (int i = 0; i < 2; i++)
        if (getenv(names[i]))
            saved[i] = strdup(getenv(names[i]));
    if (kernel) {
        if (kernel[0])
            setenv(names[0], kernel, 1);
        else
            unsetenv(names[0]);
        if (emulate_bf16)
            setenv(names[1], "emulate", 1);
        else
            unsetenv(names[1]);
    }
    nn_backend *b = NULL;
    gt_error err;
    int rc = model_backend_open("cpu", &b, &err);
    for (int i = 0; i < 2; i++) {
        if (saved[i])
            setenv(names[i], saved[i], 1);
        else
            unsetenv(names[i]);
        free(saved[i]);
    }
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    return b;
}

/* Checkpoints straight from a seeded initialisation (no training, whose
 * library GEMMs are not the same bits on every CPU), with the output head
 * at full scale so the networks' outputs are far from trivial.  poison 1
 * or 2: that stage's weights are all NaN (a diverged checkpoint). */
/* The blocks' condition weights start at zero, where they change nothing:
 * give them values, so that the showers depend on them. */
static int move_block_cond(nn_backend *b, nn_params *p, gt_error *err)
{
    for (int v = 0; v < p->n_views; v++) {
        const nn_param_view *w = &p->views[v];
        if (strstr(w->name, ".cond.w"))
            GT_TRY(nn_rand_fill(b, p->value + w->offset, (size_t)w->rows * w->cols,
                                NN_DIST_NORMAL, 0.0f, 0.3f, 77, (uint64_t)v, 0, err));
    }
    return nn_params_sync_bf16(p, err);
}

static int make_checkpoints(nn_backend *b, trained *t, int poison, gt_error *err)
{
    model_dataset ds;
    model_arrays a;
    int rc;
    if ((rc = model_dataset_load(&t->cfg, NULL, &ds, err)))
        return rc;
    rc = model_arrays_build(&t->cfg, &ds, &a, err);
    model_dataset_free(&ds);
    if (rc)
        return rc;
    if (t->readout > 0)
        a.repr.layout.readout_mev = t->readout;
    size_t rl = model_repr_size(&a.repr), got = 0;
    uint8_t *repr = malloc(rl);
    rc = model_repr_to_bytes(&a.repr, repr, rl, &got, err);
    if (!rc && t->v1) { /* version 1 (model_data.h): the byte says 1, no threshold after */
        repr[4] = 1;
        got -= 8;
    }
    t->readout = t->v1 ? a.repr.layout.threshold_mev : a.repr.layout.readout_mev;
    for (int stage = 1; stage <= 2 && !rc; stage++) {
        model_stage_data d = model_arrays_stage(&a, stage);
        model_stage *s = NULL;
        void *w = NULL;
        size_t wl = 0;
        nn_params *pp = NULL;
        if (!(rc = model_stage_create(b, &t->cfg, stage, &d, &s, err)) &&
            !(rc = nn_trunk_init(model_stage_trunk(s), 1000 + (uint64_t)stage, 1.0f, err)) &&
            (pp = nn_trunk_params(model_stage_trunk(s))) &&
            !(rc = move_block_cond(b, pp, err)) &&
            !(rc = stage == poison ? nn_memset(b, pp->value, 0xFF, pp->count * sizeof(float), err)
                                   : GT_OK) &&
            !(rc = stage == poison ? nn_params_sync_bf16(pp, err) : GT_OK) &&
            !(rc = nn_ckpt_save(nn_trunk_params(model_stage_trunk(s)), NULL, NULL, &w, &wl,
                                err)))
            rc = model_ckpt_pack(stage, 0, NAN, repr, got, w, wl, &t->ck[stage], &t->len[stage], err);
        free(w);
        model_stage_destroy(s);
    }
    free(repr);
    model_arrays_free(&a);
    return rc;
}

/* A backend that counts the copies between host and device and passes
 * everything to the backend it wraps (whose state it shares). */
typedef struct counting {
    nn_backend b;
    nn_backend_ops ops;
    const nn_backend_ops *inner;
    long h2d, d2h;
} counting;

static int count_h2d(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err)
{
    counting *c = (counting *)b;
    c->h2d++;
    return c->inner->copy_h2d(b, dst, src, bytes, err);
}

static int count_d2h(nn_backend *b, void *dst, const void *src, size_t bytes, gt_error *err)
{
    counting *c = (counting *)b;
    c->d2h++;
    return c->inner->copy_d2h(b, dst, src, bytes, err);
}

static void counting_wrap(counting *c, nn_backend *inner)
{
    memset(c, 0, sizeof *c);
    c->b = *inner;
    c->inner = inner->ops;
    c->ops = *inner->ops;
    c->ops.destroy = NULL;   /* the wrapped backend is closed on its own */
    c->ops.copy_h2d = count_h2d;
    c->ops.copy_d2h = count_d2h;
    c->b.ops = &c->ops;
}

/* Once a shape has run, a batch copies only what the stages exchange with
 * the host: per stage its conditions in and its samples out (and per
 * autoregressive layer the conditions, the context and the tokens), none
 * per integration step (the step constants stay on the device, the trunks'
 * finiteness checks are the sampler's host checks), and allocates nothing.
 * The showers are the reference's bytes.  Routed trunks group rows per
 * expert on the host (their own copies): not counted. */
static void check_copies(const variant *v, int bf16, nn_backend *b, const trained *t,
                         const float *e_inc, const float *ref, size_t n)
{
    gt_error err;
    counting c;
    counting_wrap(&c, b);
    model_sampler *s = NULL;
    int rc = model_sampler_open(&c.b, &t->cfg, t->ck[1], t->len[1], t->ck[2], t->len[2], N_ROWS,
                                &s, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    if (rc)
        return;
    float *got = malloc(n * sizeof(float));
    long h2d = 0, d2h = 0;
    size_t allocs = 0;
    for (int run = 0; run < 2; run++) {
        memset(got, 0xff, n * sizeof(float));
        model_sample_request rq = {e_inc, N_ROWS, 77, 0, got, NULL, 0};
        h2d = c.h2d;
        d2h = c.d2h;
        allocs = c.b.alloc_count;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK(model_sampler_run(s, &rq, 1, 0, &err) == GT_OK);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        CHECK_MSG(memcmp(got, ref, n * sizeof(float)) == 0, "%s %s: counted run %d: other bytes",
                  v->name, bf16 ? "bf16" : "fp32", run);
        /* the split giant sample prints: the networks and decoding are
         * parts of the run, never more than it */
        double wall = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        double dev_s = model_sampler_device_seconds(s), dec_s = model_sampler_decode_seconds(s);
        CHECK_MSG(dev_s > 0 && dec_s >= 0 && dev_s + dec_s <= wall + 1e-6,
                  "%s: networks %.6f s and decoding %.6f s of a %.6f s run", v->name, dev_s, dec_s,
                  wall);
    }
    h2d = c.h2d - h2d;
    d2h = c.d2h - d2h;
    CHECK_MSG(c.b.alloc_count == allocs, "%s: the second batch allocated %zu times", v->name,
              c.b.alloc_count - allocs);
    if (v->kind == MODEL_TRUNK_ROUTED) {
        /* the routed trunk's own copies: nothing to pin */
    } else if (v->mode == MODEL_MODE_AUTOREGRESSIVE) {
        /* stage 1: 1 + 1; each layer run: 2 in (conditions, context), 1 out */
        CHECK_MSG(d2h > 1 && h2d - 1 == 2 * (d2h - 1),
                  "%s: the second batch made %ld copies in and %ld out", v->name, h2d, d2h);
    } else {
        CHECK_MSG(h2d == 2 && d2h == 2,
                  "%s %s: the second batch made %ld copies to the device and %ld back (want 2 "
                  "and 2: one per stage each way)",
                  v->name, bf16 ? "bf16" : "fp32", h2d, d2h);
    }
    /* energies the sampler cannot take: refused with a reason, per request */
    float bad[3] = {1000.0f, NAN, 5000.0f};
    model_sample_request rq = {bad, 3, 77, 0, got, NULL, 0};
    rc = model_sampler_run(s, &rq, 1, 0, &err);
    CHECK_MSG(rc == GT_EINVAL && strstr(err.message, "incident energy 1 is nan"),
              "NaN energy: rc %d (%s)", rc, err.message);
    bad[1] = -1.0f;
    rc = model_sampler_run(s, &rq, 1, 0, &err);
    CHECK_MSG(rc == GT_EINVAL && strstr(err.message, "positive finite"), "negative energy: %s",
              err.message);
    model_sampler_close(s);
    free(got);
}

/* A checkpoint whose weights are NaN makes an error that says so and names
 * the shower, never NaN showers: the trunks' per-evaluation finiteness
 * check is off, and the sampler's host checks stand in for it. */
static void check_diverged(const variant *v, nn_backend *b, int stage)
{
    gt_error err;
    trained t;
    trained_init(v, 0, &t);
    int rc = make_checkpoints(b, &t, stage, &err);
    CHECK_MSG(rc == GT_OK, "%s: checkpoints: %s", v->name, err.message);
    model_sampler *s = NULL;
    if (!rc)
        rc = model_sampler_open(b, &t.cfg, t.ck[1], t.len[1], t.ck[2], t.len[2], 8, &s, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    if (!rc) {
        const size_t V = (size_t)model_sampler_voxels(s);
        float e[12], *out = malloc(12 * V * sizeof(float));
        for (int i = 0; i < 12; i++)
            e[i] = 1000.0f * (float)(i + 1);
        model_sample_request rq[2] = {{e, 5, 1, 0, out, NULL, 0}, {e + 5, 7, 2, 0, out + 5 * V, NULL, 0}};
        char want[32];
        snprintf(want, sizeof want, "in stage %d", stage);
        rc = model_sampler_run(s, rq, 2, 0, &err);
        CHECK_MSG(rc == GT_EINVAL && strstr(err.message, "non-finite") &&
                      strstr(err.message, want) && strstr(err.message, "request 0, shower 0"),
                  "%s, stage %d all NaN: rc %d (%s)", v->name, stage, rc, err.message);
        free(out);
    }
    model_sampler_close(s);
    free(t.ck[1]);
    free(t.ck[2]);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* sample.symmetrize on: each row is the unturned row (ref) with every
 * (layer, radial bin)'s angular values permuted (sorted, they are the same
 * bytes), not every row is left as it was, and the rows still do not
 * depend on how they were batched. */
static void check_turned(const variant *v, int bf16, nn_backend *b, const trained *t0,
                         const float *e_inc, const float *ref, size_t V)
{
    gt_error err;
    trained t = *t0;
    t.cfg.symmetrize = 1;
    const size_t n = (size_t)N_ROWS * V;
    float *got = calloc(n, sizeof(float)), *again = calloc(n, sizeof(float));
    const int whole[1] = {0}, cuts[3] = {0, 5, 19};
    CHECK(sample(b, &t, 64, whole, 1, e_inc, got, NULL, &err) == GT_OK);
    CHECK(sample(b, &t, 8, cuts, 3, e_inc, again, NULL, &err) == GT_OK);
    CHECK_MSG(memcmp(got, again, n * sizeof(float)) == 0, "%s: turned showers depend on the "
              "batching", v->name);
    geo_geometry g;
    memset(&g, 0, sizeof g);
    const void *xml;
    size_t xl;
    int rc = model_geometry_builtin_xml(t.cfg.geometry, &xml, &xl, &err);
    if (!rc)
        rc = geo_load_memory(&g, xml, (int)xl, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    int moved = 0, bad = 0;
    float *a = malloc(4096 * sizeof(float)), *c = malloc(4096 * sizeof(float));
    for (int r = 0; !rc && r < N_ROWS; r++) {
        const float *x = ref + (size_t)r * V, *y = got + (size_t)r * V;
        moved += memcmp(x, y, V * sizeof(float)) != 0;
        for (int li = 0; li < g.n_active; li++) {
            const geo_layer *l = &g.layers[g.active[li]];
            for (int j = 0; j < l->n_r && l->n_alpha <= 4096; j++) {
                for (int q = 0; q < l->n_alpha; q++) {
                    a[q] = x[l->offset + q * l->n_r + j];
                    c[q] = y[l->offset + q * l->n_r + j];
                }
                qsort(a, (size_t)l->n_alpha, sizeof(float), cmp_float);
                qsort(c, (size_t)l->n_alpha, sizeof(float), cmp_float);
                bad += memcmp(a, c, (size_t)l->n_alpha * sizeof(float)) != 0;
            }
        }
    }
    CHECK_MSG(bad == 0, "%s %s: %d (row, layer, ring)s are not a turn of the unturned ones",
              v->name, bf16 ? "bf16" : "fp32", bad);
    CHECK_MSG(moved > N_ROWS / 2, "%s: only %d of %d rows were turned", v->name, moved, N_ROWS);
    printf("%-20s %s: turned about the axis: %d of %d rows moved, every ring a permutation\n",
           v->name, bf16 ? "bf16" : "fp32", moved, N_ROWS);
    free(a);
    free(c);
    geo_free(&g);
    free(got);
    free(again);
}

/* The readout threshold raised to the median hit of ref (the unraised
 * showers of the variant), as transforms recorded from showers that showed
 * that threshold carry it: every voxel served is 0 or at least it, batched
 * either way, and the showers are ref with exactly its hits under it set to
 * 0: the cut is the last step of decoding and changes nothing else (the
 * representation, the survivors' scaling and the autoregressive active set
 * keep the geometry's threshold).  Half the hits of ref lie under it, so a
 * path that serves what it should cut fails. */
static void check_readout_raised(const variant *v, int bf16, nn_backend *b, const float *e_inc,
                                 const float *ref, size_t n)
{
    gt_error err;
    trained t;
    trained_init(v, bf16, &t);
    t.v1 = 0; /* the threshold needs version 2 (the same representation) */
    size_t hits = 0;
    float *sorted = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        if (ref[i] > 0)
            sorted[hits++] = ref[i];
    qsort(sorted, hits, sizeof(float), cmp_float);
    const float raised = hits ? sorted[hits / 2] : 1.0f;
    free(sorted);
    t.readout = raised;
    int rc = make_checkpoints(b, &t, 0, &err);
    CHECK_MSG(rc == GT_OK && t.readout == raised, "%s: checkpoints: %s", v->name, err.message);
    float *got = calloc(n, sizeof(float)), *again = calloc(n, sizeof(float));
    const int whole[1] = {0}, cuts[3] = {0, 7, 26};
    if (!rc)
        CHECK(sample(b, &t, 64, whole, 1, e_inc, got, NULL, &err) == GT_OK &&
              sample(b, &t, 8, cuts, 3, e_inc, again, NULL, &err) == GT_OK);
    size_t under = under_readout(got, n, raised), other = 0, cut = 0;
    for (size_t i = 0; i < n; i++) {
        if (ref[i] >= raised)
            other += memcmp(&got[i], &ref[i], sizeof(float)) != 0;
        else /* 0 now, or counted in `under` */
            other += got[i] >= raised;
        cut += ref[i] > 0 && ref[i] < raised;
    }
    CHECK_MSG(under == 0 && other == 0 && memcmp(got, again, n * sizeof(float)) == 0,
              "%s %s, readout threshold raised to %g MeV: %zu voxels under it served, %zu "
              "others changed, batched differently %s",
              v->name, bf16 ? "bf16" : "fp32", raised, under, other,
              memcmp(got, again, n * sizeof(float)) ? "other bytes" : "the same bytes");
    printf("%-20s %s: readout threshold raised to %.6g MeV: %zu of %zu hits cut, nothing else "
           "changed\n", v->name, bf16 ? "bf16" : "fp32", raised, cut, hits);
    free(got);
    free(again);
    free(t.ck[1]);
    free(t.ck[2]);
}

static void check_variant(const variant *v, int bf16, nn_backend *b, uint64_t golden)
{
    gt_error err;
    trained t;
    trained_init(v, bf16, &t);
    int rc = make_checkpoints(b, &t, 0, &err);
    CHECK_MSG(rc == GT_OK, "%s %s: checkpoints: %s", v->name, bf16 ? "bf16" : "fp32",
              err.message);
    if (rc) {
        free(t.ck[1]);
        free(t.ck[2]);
        return;
    }
    float e_inc[N_ROWS];
    for (int i = 0; i < N_ROWS; i++)   /* 300 MeV .. 262 GeV, log-spaced */
        e_inc[i] = 300.0f * powf(262144.0f / 300.0f, (float)i / (N_ROWS - 1));
    /* the voxel count, from a sampler */
    model_sampler *s0 = NULL;
    rc = model_sampler_open(b, &t.cfg, t.ck[1], t.len[1], t.ck[2], t.len[2], 4, &s0, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    if (rc) {
        free(t.ck[1]);
        free(t.ck[2]);
        return;
    }
    const size_t V = (size_t)model_sampler_voxels(s0), n = (size_t)N_ROWS * V;
    /* the threshold recorded from the training showers (their smallest
     * hit, over the geometry's 1 MeV), or the geometry's for transforms
     * without one */
    const float readout = model_sampler_readout_mev(s0);
    CHECK_MSG(readout == t.readout && (t.v1 ? readout == 1.0f : readout > 1.0f),
              "%s: the sampler applies a readout threshold of %.9g MeV, the transforms say "
              "%.9g", v->name, readout, t.readout);
    model_sampler_close(s0);
    /* a config that says the other representation is refused with a
     * reason, never served with the wrong decoding */
    {
        model_config other = t.cfg;
        other.stage2.rings = !t.cfg.stage2.rings;
        model_sampler *sx = NULL;
        rc = model_sampler_open(b, &other, t.ck[1], t.len[1], t.ck[2], t.len[2], 4, &sx, &err);
        CHECK_MSG(rc == GT_EFORMAT && sx == NULL && strstr(err.message, "rings"),
                  "%s: rings %d against the checkpoint: rc %d (%s)", v->name,
                  other.stage2.rings, rc, err.message);
        model_sampler_close(sx);
        other = t.cfg;
        other.stage1.profile = !t.cfg.stage1.profile;
        rc = model_sampler_open(b, &other, t.ck[1], t.len[1], t.ck[2], t.len[2], 4, &sx, &err);
        CHECK_MSG(rc == GT_EFORMAT && sx == NULL && strstr(err.message, "profile"),
                  "%s: profile %d against the checkpoint: rc %d (%s)", v->name,
                  other.stage1.profile, rc, err.message);
        model_sampler_close(sx);
    }
    float *ref = calloc(n, sizeof(float)), *got = calloc(n, sizeof(float));
    const int whole[1] = {0}, cuts[3] = {0, 7, 26};
    double evals = 0;
    CHECK(sample(b, &t, 64, whole, 1, e_inc, ref, &evals, &err) == GT_OK);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += ref[i];
    CHECK_MSG(isfinite(sum) && sum > 0, "%s: showers sum to %g", v->name, sum);
    /* the other ways to sample below give these bytes, so this holds for them */
    size_t under = under_readout(ref, n, readout);
    CHECK_MSG(under == 0, "%s %s: %zu voxels under the readout threshold of %g MeV", v->name,
              bf16 ? "bf16" : "fp32", under, readout);
    int checks = 0, same = 0;
#define SAME(what)                                                                       \
    do {                                                                                 \
        size_t d_ = 0;                                                                   \
        for (size_t i_ = 0; i_ < n; i_++)                                                \
            d_ += memcmp(&ref[i_], &got[i_], sizeof(float)) != 0;                        \
        checks++;                                                                        \
        same += d_ == 0;                                                                 \
        CHECK_MSG(d_ == 0, "%s %s: %s: %zu of %zu voxels differ", v->name,               \
                  bf16 ? "bf16" : "fp32", what, d_, n);                                  \
    } while (0)
    static const int batches[] = {1, 8, 20, 64};
    for (size_t k = 0; k < sizeof batches / sizeof batches[0]; k++) {
        char what[64];
        snprintf(what, sizeof what, "batch %d", batches[k]);
        memset(got, 0xff, n * sizeof(float));
        CHECK(sample(b, &t, batches[k], whole, 1, e_inc, got, NULL, &err) == GT_OK);
        SAME(what);
    }
    memset(got, 0xff, n * sizeof(float));
    CHECK(sample(b, &t, 20, cuts, 3, e_inc, got, NULL, &err) == GT_OK);
    SAME("three requests behind another, batch 20");
    int threads = omp_get_max_threads();
    omp_set_num_threads(threads > 1 ? 1 : 2);
    memset(got, 0xff, n * sizeof(float));
    CHECK(sample(b, &t, 64, whole, 1, e_inc, got, NULL, &err) == GT_OK);
    SAME(threads > 1 ? "one thread" : "two threads");
    omp_set_num_threads(threads);
    /* the other kernels of this CPU */
    static const struct {
        const char *kernel;
        int emulate;
    } kernels[] = {{"", 1}, {"avx2", 1}, {"scalar", 1}};
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
        nn_backend *o = open_cpu(kernels[k].kernel, kernels[k].emulate);
        if (!o)
            continue;
        const char *name = model_backend_cpu_kernel(o, bf16 ? NN_BF16 : NN_F32);
        const char *mine = model_backend_cpu_kernel(b, bf16 ? NN_BF16 : NN_F32);
        if (kernels[k].kernel[0] && strcmp(name, kernels[k].kernel) != 0) {
            printf("  (this CPU has no %s kernel: skipped)\n", kernels[k].kernel);
        } else if (strcmp(name, mine) == 0 && !kernels[k].kernel[0]) {
            /* the default kernel again (no native bf16 here): nothing new */
        } else {
            char what[64];
            snprintf(what, sizeof what, "kernel %s against %s", name, mine);
            memset(got, 0xff, n * sizeof(float));
            CHECK(sample(o, &t, 20, whole, 1, e_inc, got, NULL, &err) == GT_OK);
            SAME(what);
        }
        nn_backend_close(o);
    }
    check_copies(v, bf16, b, &t, e_inc, ref, n);
    if (v->before == 12)
        check_turned(v, bf16, b, &t, e_inc, ref, V);
    check_readout_raised(v, bf16, b, e_inc, ref, n);
    uint64_t h = fnv(ref, n);
    printf("%-20s %s: %d of %d ways to sample agree; %.2f network calls per shower; "
           "readout threshold %.9g MeV (%s); hash %016llx (%zu voxels)\n",
           v->name, bf16 ? "bf16" : "fp32", same, checks, evals, readout,
           t.v1 ? "the geometry's" : "recorded", (unsigned long long)h, n);
    CHECK_MSG(h == golden,
              "%s %s: the showers hash to %016llx, but to %016llx on the machine that wrote "
              "this test: the same request gives other bytes on this CPU (or the model "
              "changed: then update GOLDEN)",
              v->name, bf16 ? "bf16" : "fp32", (unsigned long long)h,
              (unsigned long long)golden);
#undef SAME
    free(ref);
    free(got);
    free(t.ck[1]);
    free(t.ck[2]);
}

/* A hand-made acceptance test for the geometry of t: a small random
 * network whose cap is the median logit of the showers `ref` (so that
 * about half the first draws are redrawn), max_attempts draws. */
static int make_accept(const trained *t, const float *e_inc, const float *ref, size_t V,
                       int max_attempts, int d_extra, void **blob, size_t *len, gt_error *err)
{
    geo_geometry g;
    float thr;
    feat_layout fl;
    int rc;
    if ((rc = model_geometry_load(t->cfg.geometry, &g, err)))
        return rc;
    if ((rc = model_geometry_threshold(&g, &thr, err)) ||
        (rc = feat_layout_init(&fl, &g, thr, err))) {
        geo_free(&g);
        return rc;
    }
    model_accept a;
    memset(&a, 0, sizeof a);
    model_classify_net *n = &a.net;
    n->d = feat_classifier_width(&fl) + d_extra;
    n->hidden = 4;
    n->depth = 1;
    n->slope = 0.01f;
    n->n_weights = model_classify_net_count(n->d, 4, 1);
    n->mean = calloc((size_t)n->d, sizeof(double));
    n->inv_std = malloc((size_t)n->d * sizeof(double));
    n->weights = malloc(n->n_weights * sizeof(float));
    uint32_t x = 12345;
    for (int j = 0; j < n->d; j++)
        n->inv_std[j] = 0.1;
    for (size_t i = 0; i < n->n_weights; i++) {
        x = x * 1664525u + 1013904223u;
        n->weights[i] = (float)((double)(x >> 8) / 16777216.0 - 0.5);
    }
    a.max_attempts = max_attempts;
    float *feat = malloc((size_t)fl.n_features * sizeof(float));
    float *row = calloc((size_t)n->d, sizeof(float)), scratch[2 * 1024];
    double z[N_ROWS];
    for (int i = 0; i < N_ROWS; i++) {
        feat_compute(&fl, ref + (size_t)i * V, e_inc[i], feat);
        feat_classifier_row(&fl, feat, e_inc[i], row);
        z[i] = model_accept_logit(&a, row, scratch);
    }
    for (int i = 0; i < N_ROWS; i++)   /* the median: a partial sort is enough */
        for (int j = i + 1; j < N_ROWS; j++)
            if (z[j] < z[i]) {
                double tz = z[i];
                z[i] = z[j];
                z[j] = tz;
            }
    a.log_cap = z[N_ROWS / 2];
    rc = model_accept_pack(&a, blob, len, err);
    free(feat);
    free(row);
    model_accept_free(&a);
    feat_layout_free(&fl);
    geo_free(&g);
    return rc;
}

static void check_accept(const variant *v, nn_backend *b)
{
    gt_error err;
    trained t;
    trained_init(v, 0, &t);
    if (make_checkpoints(b, &t, 0, &err) != GT_OK) {
        CHECK_MSG(0, "%s: checkpoints: %s", v->name, err.message);
        return;
    }
    float e_inc[N_ROWS];
    for (int i = 0; i < N_ROWS; i++)
        e_inc[i] = 300.0f * powf(262144.0f / 300.0f, (float)i / (N_ROWS - 1));
    model_sampler *s0 = NULL;
    CHECK(model_sampler_open(b, &t.cfg, t.ck[1], t.len[1], t.ck[2], t.len[2], 4, &s0, &err) ==
          GT_OK);
    const size_t V = (size_t)model_sampler_voxels(s0), n = (size_t)N_ROWS * V;
    float *plain = calloc(n, sizeof(float)), *ref = calloc(n, sizeof(float)),
          *got = calloc(n, sizeof(float));
    const int whole[1] = {0}, cuts[3] = {0, 7, 26};
    g_accept = NULL;
    CHECK(sample(b, &t, 64, whole, 1, e_inc, plain, NULL, &err) == GT_OK);
    CHECK(g_draws == 1.0);
    void *blob = NULL;
    size_t len = 0;
    CHECK(make_accept(&t, e_inc, plain, V, 4, 0, &blob, &len, &err) == GT_OK);
    g_accept = blob;
    g_accept_len = len;
    CHECK(sample(b, &t, 64, whole, 1, e_inc, ref, NULL, &err) == GT_OK);
    const double draws = g_draws;
    /* a row kept at its first draw is the plain shower; a redrawn one is another */
    int redrawn = 0;
    for (int i = 0; i < N_ROWS; i++)
        redrawn += memcmp(ref + (size_t)i * V, plain + (size_t)i * V, V * sizeof(float)) != 0;
    printf("%-20s acceptance test: %.2f draws a shower, %d of %d rows redrawn\n", v->name,
           draws, redrawn, N_ROWS);
    CHECK_MSG(draws > 1.2 && draws <= 4.0, "%s: %.3f draws a shower", v->name, draws);
    CHECK_MSG(redrawn > 5 && redrawn < N_ROWS, "%s: %d rows redrawn", v->name, redrawn);
    /* redrawn showers are decoded as the first draws are: read out alike */
    CHECK_MSG(under_readout(plain, n, t.readout) == 0 && under_readout(ref, n, t.readout) == 0,
              "%s, acceptance test: voxels under the readout threshold of %g MeV: %zu without "
              "the test, %zu with it", v->name, t.readout, under_readout(plain, n, t.readout),
              under_readout(ref, n, t.readout));
    /* the draws are the same too, but for the split behind another request,
     * whose own draws count in its run's figure */
#define SAME_ACC(what, alone)                                                            \
    do {                                                                                 \
        size_t d_ = 0;                                                                   \
        for (size_t i_ = 0; i_ < n; i_++)                                                \
            d_ += memcmp(&ref[i_], &got[i_], sizeof(float)) != 0;                        \
        CHECK_MSG(d_ == 0 && (!(alone) || g_draws == draws),                             \
                  "%s, acceptance test: %s: %zu of %zu voxels differ, %.3f draws a "     \
                  "shower against %.3f", v->name, what, d_, n, g_draws, draws);          \
    } while (0)
    static const int batches[] = {1, 8, 20};
    for (size_t k = 0; k < sizeof batches / sizeof batches[0]; k++) {
        char what[64];
        snprintf(what, sizeof what, "batch %d", batches[k]);
        memset(got, 0xff, n * sizeof(float));
        CHECK(sample(b, &t, batches[k], whole, 1, e_inc, got, NULL, &err) == GT_OK);
        SAME_ACC(what, 1);
    }
    memset(got, 0xff, n * sizeof(float));
    CHECK(sample(b, &t, 20, cuts, 3, e_inc, got, NULL, &err) == GT_OK);
    SAME_ACC("three requests behind another, batch 20", 0);
    int threads = omp_get_max_threads();
    omp_set_num_threads(threads > 1 ? 1 : 2);
    memset(got, 0xff, n * sizeof(float));
    CHECK(sample(b, &t, 64, whole, 1, e_inc, got, NULL, &err) == GT_OK);
    SAME_ACC(threads > 1 ? "one thread" : "two threads", 1);
    omp_set_num_threads(threads);
    /* a test set while one thread runs, then run on more: the scoring keeps
     * to the scratch it has, the same bytes */
    {
        model_sampler *s2 = NULL;
        omp_set_num_threads(1);
        CHECK(model_sampler_open(b, &t.cfg, t.ck[1], t.len[1], t.ck[2], t.len[2], 64, &s2,
                                 &err) == GT_OK &&
              model_sampler_set_accept(s2, blob, len, &err) == GT_OK);
        omp_set_num_threads(4);
        memset(got, 0xff, n * sizeof(float));
        model_sample_request rq2 = {e_inc, N_ROWS, 77, 0, got, NULL, 0};
        CHECK(s2 && model_sampler_run(s2, &rq2, 1, 0, &err) == GT_OK);
        omp_set_num_threads(threads);
        g_draws = s2 ? model_sampler_draws_per_shower(s2) : 0;
        model_sampler_close(s2);
        SAME_ACC("a test set at one thread, run at four", 1);
    }
#undef SAME_ACC
    /* one draw allowed: the test keeps everything, the showers are the plain ones */
    free(blob);
    CHECK(make_accept(&t, e_inc, plain, V, 1, 0, &blob, &len, &err) == GT_OK);
    g_accept = blob;
    g_accept_len = len;
    CHECK(sample(b, &t, 8, whole, 1, e_inc, got, NULL, &err) == GT_OK);
    CHECK_MSG(memcmp(got, plain, n * sizeof(float)) == 0 && g_draws == 1.0,
              "%s: one draw allowed changed the showers", v->name);
    /* refusals: a test for another feature count, a damaged blob; the
     * sampler keeps serving without a test after either */
    model_sampler *s1 = NULL;
    CHECK(model_sampler_open(b, &t.cfg, t.ck[1], t.len[1], t.ck[2], t.len[2], 8, &s1, &err) ==
          GT_OK);
    void *wide = NULL;
    size_t wide_len = 0;
    CHECK(make_accept(&t, e_inc, plain, V, 4, 3, &wide, &wide_len, &err) == GT_OK);
    CHECK(model_sampler_set_accept(s1, wide, wide_len, &err) == GT_EINVAL);
    ((uint8_t *)blob)[len / 2] ^= 0x10;
    CHECK(model_sampler_set_accept(s1, blob, len, &err) == GT_ECHECKSUM);
    model_sample_request rq = {e_inc, N_ROWS, 77, 0, got, NULL, 0};
    CHECK(model_sampler_run(s1, &rq, 1, 0, &err) == GT_OK);
    CHECK_MSG(memcmp(got, plain, n * sizeof(float)) == 0 &&
                  model_sampler_draws_per_shower(s1) == 1.0,
              "%s: a refused test left the sampler changed", v->name);
    model_sampler_close(s1);
    model_sampler_close(s0);
    g_accept = NULL;
    free(wide);
    free(blob);
    free(plain);
    free(ref);
    free(got);
    free(t.ck[1]);
    free(t.ck[2]);
}

/* Samples the N_ROWS rows `runs` times on one sampler of max_batch rows
 * on the GPU (graphs on or off); out gets the last run, *replays the graph
 * launches of it. */
static int gpu_sample(nn_backend *g, const trained *t, int max_batch, int graphs, int runs,
                      const float *e_inc, float *out, size_t n, int64_t *replays,
                      gt_error *err)
{
    model_sampler *s = NULL;
    int rc = model_sampler_open(g, &t->cfg, t->ck[1], t->len[1], t->ck[2], t->len[2], max_batch,
                                &s, err);
    if (rc)
        return rc;
    model_sampler_set_graphs(s, graphs);
    for (int r = 0; r < runs && !rc; r++) {
        memset(out, 0xff, n * sizeof(float));
        model_sample_request rq = {e_inc, N_ROWS, 77, 0, out, NULL, 0};
        rc = model_sampler_run(s, &rq, 1, 0, err);
    }
    *replays = model_sampler_graph_replays(s);
    model_sampler_close(s);
    return rc;
}

/* On a CUDA device: the GPU's showers do not depend on the batch either,
 * and integrations replayed from CUDA graphs give the eager bytes (the same
 * kernels in the same order).  At max_batch 20 the 45 rows are batches of
 * 20, 20 and 5: the first run captures the 20-row shape at its second
 * batch, the second run replays it twice and captures the 5-row one.  The
 * GPU's showers are not the CPU's bytes (device libm, another product
 * order): their total energy is printed beside the CPU's. */
static void check_gpu_variant(const variant *v, int bf16, nn_backend *cpu, nn_backend *g)
{
    gt_error err;
    trained t;
    trained_init(v, bf16, &t);
    int rc = make_checkpoints(cpu, &t, 0, &err);
    CHECK_MSG(rc == GT_OK, "%s: checkpoints: %s", v->name, err.message);
    float e_inc[N_ROWS];
    for (int i = 0; i < N_ROWS; i++)
        e_inc[i] = 300.0f * powf(262144.0f / 300.0f, (float)i / (N_ROWS - 1));
    model_sampler *s0 = NULL;
    if (!rc)
        rc = model_sampler_open(g, &t.cfg, t.ck[1], t.len[1], t.ck[2], t.len[2], 4, &s0, &err);
    CHECK_MSG(rc == GT_OK, "%s on the GPU: %s", v->name, err.message);
    if (rc) {
        free(t.ck[1]);
        free(t.ck[2]);
        return;
    }
    const size_t n = (size_t)N_ROWS * (size_t)model_sampler_voxels(s0);
    model_sampler_close(s0);
    float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    float *on_cpu = malloc(n * sizeof(float));
    int64_t replays = 0;
    const char *name = bf16 ? "bf16" : "fp32";
    CHECK_MSG(gpu_sample(g, &t, 64, 0, 1, e_inc, ref, n, &replays, &err) == GT_OK, "%s", err.message);
    static const struct {
        int batch, graphs, runs;
    } ways[] = {{1, 0, 1}, {8, 0, 1}, {20, 1, 1}, {20, 1, 2}, {64, 1, 3}};
    for (size_t k = 0; k < sizeof ways / sizeof ways[0]; k++) {
        rc = gpu_sample(g, &t, ways[k].batch, ways[k].graphs, ways[k].runs, e_inc, got, n,
                        &replays, &err);
        CHECK_MSG(rc == GT_OK, "%s %s on the GPU: %s", v->name, name, err.message);
        size_t d = 0;
        for (size_t i = 0; i < n; i++)
            d += memcmp(&ref[i], &got[i], sizeof(float)) != 0;
        CHECK_MSG(d == 0, "%s %s on the GPU, batch %d, graphs %s, run %d: %zu of %zu voxels differ",
                  v->name, name, ways[k].batch, ways[k].graphs ? "on" : "off", ways[k].runs, d, n);
        if (ways[k].graphs && ways[k].runs > 1)
            CHECK_MSG(replays > 0, "%s %s: no integration was replayed from a graph", v->name,
                      name);
    }
    double eg = 0, ec = 0;
    if (sample(cpu, &t, 64, (const int[]){0}, 1, e_inc, on_cpu, NULL, &err) == GT_OK)
        for (size_t i = 0; i < n; i++) {
            eg += ref[i];
            ec += on_cpu[i];
        }
    CHECK_MSG(isfinite(eg) && eg > 0, "%s %s on the GPU: showers sum to %g", v->name, name, eg);
    CHECK_MSG(under_readout(ref, n, t.readout) == 0,
              "%s %s on the GPU: %zu voxels under the readout threshold of %g MeV", v->name,
              name, under_readout(ref, n, t.readout), t.readout);
    printf("%-20s %s on the GPU: batch-invariant, graphs replay the eager bytes (%lld replays); "
           "total energy %.6g MeV (CPU %.6g)\n",
           v->name, name, (long long)replays, eg, ec);
    free(ref);
    free(got);
    free(on_cpu);
    free(t.ck[1]);
    free(t.ck[2]);
}

int main(void)
{
    nn_backend *b = open_cpu(NULL, 0);
    if (!b)
        return check_finish();
    printf("CPU kernels: fp32 %s, bf16 %s\n", model_backend_cpu_kernel(b, NN_F32),
           model_backend_cpu_kernel(b, NN_BF16));
    for (size_t i = 0; i < sizeof VARIANTS / sizeof VARIANTS[0]; i++)
        for (int bf16 = 0; bf16 < 2; bf16++)
            check_variant(&VARIANTS[i], bf16, b, GOLDEN[i][bf16]);
    check_accept(&VARIANTS[0], b);   /* oneshot */
    check_accept(&VARIANTS[3], b);   /* autoregressive */
    for (int stage = 1; stage <= 2; stage++) {
        check_diverged(&VARIANTS[0], b, stage);   /* oneshot */
        check_diverged(&VARIANTS[3], b, stage);   /* autoregressive */
    }
    nn_backend *g = NULL;
    gt_error err;
    if (model_backend_open("cuda:0", &g, &err) == GT_OK) {
        for (size_t i = 0; i < sizeof VARIANTS / sizeof VARIANTS[0]; i++)
            for (int bf16 = 0; bf16 < 1 + (g->has_bf16 != 0); bf16++)
                check_gpu_variant(&VARIANTS[i], bf16, b, g);
        nn_backend_close(g);
    } else {
        printf("(the GPU checks are skipped: %s)\n", err.message);
    }
    nn_backend_close(b);
    return check_finish();
}
