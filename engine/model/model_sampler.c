#include "model_sampler.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "feat.h"
#include "gt_clock.h"
#include "model_accept.h"
#include "model_ckpt.h"
#include "model_data.h"
#include "model_stage.h"
#include "nn_ckpt.h"
#include "nn_graph.h"
#include "nn_rng.h"
#include "nn_trunk.h"

/* Noise streams of the sampler (training uses streams 1, 2 and 1000+). */
#define SAMPLE_STREAM 100u
/* DDIM clips its estimate of the clean sample to +-X0_CLIP standardised
 * units: at t = 1 (abar = 1e-4) the estimate divides by sqrt(abar) = 0.01,
 * so an eps error of 0.1 would otherwise put x0 at 10 sigma and the next
 * step would carry it.  Training data beyond 8 sigma is rare (< 0.1%). */
#define X0_CLIP 8.0f

typedef struct stage_net {
    nn_trunk *trunk;
    int dim, n_cond, n_ctx;
    model_objective obj;
    int noise_from;   /* wgan: first column that gets the generator's noise */
} stage_net;

/* Noise of layer token l of an autoregressive stage 2 comes from stream
 * AR_STREAM + l (rows as in fill_noise). */
#define AR_STREAM 200u
/* sample.symmetrize's turn and mirror of row r: block r of this stream */
#define TURN_STREAM 90u
/* The acceptance test's uniform for row r's draw k: block r of stream
 * ACCEPT_STREAM | k << 32. */
#define ACCEPT_STREAM 95u

/* A row's k-th draw under an acceptance test (model_accept) takes every
 * stream's noise from stream | k << 32: the sampler's streams are all
 * under 2^32, so draw 0 is the noise a sampler without the test draws, bit
 * for bit, and every later draw is another shower of the same row. */
static uint64_t draw_stream(uint64_t stream, uint32_t draw)
{
    return stream | (uint64_t)draw << 32;
}

/* The integration's per-row constants (the time column of the network's
 * conditions, the coefficients of every axpby): each distinct float gets,
 * on first use, a backend array of max_batch copies that later steps and
 * batches reuse, so once a (steps, solver) has run, integrate() copies
 * nothing to the device (and can be captured in a graph).  n Heun or
 * Euler steps use about 2n + 3 values, n DDIM steps about 5n + 4.  Past
 * CONST_MAX values or CONST_BYTES of arrays, a value is uploaded into
 * scratch at each use instead: the same bytes, only slower. */
#define CONST_MAX 1024
#define CONST_SLOTS_LOG2 11      /* the table stays at most half full */
#define CONST_SLOTS (1u << CONST_SLOTS_LOG2)
#define CONST_BYTES ((size_t)64 << 20)

typedef struct const_slot {
    uint32_t bits;   /* the float's bits: -0 and +0 are two values */
    float *dev;      /* NULL: an empty slot */
} const_slot;

/* Graphs of integrate() (nn_graph.h), one per (stage, rows, steps) (the
 * solver is the config's): a shape runs eagerly the first time (which
 * plans its products and makes its step constants), is captured the second
 * time and replayed from then on; a shape whose integration had to upload
 * a step constant (the cache full) is never captured.  The most recently
 * used GRAPH_MAX shapes are kept. */
#define GRAPH_MAX 16

typedef struct graph_slot {
    int stage, rows, steps;  /* stage 0: an empty slot */
    nn_graph graph;
    double evals;            /* network evaluations of one integration */
    uint64_t used;           /* the sampler's use counter at the last use */
} graph_slot;

struct model_sampler {
    nn_backend *b;
    model_config cfg;
    geo_geometry geo;
    model_repr repr;
    int repr_ready;
    stage_net net[2];
    int max_batch;
    double evals_per_shower;
    double flops_per_shower;
    double evals_sum;   /* shower-evaluations of the current run */
    double flops_sum;   /* and their multiply-add FLOPs */
    int64_t evals_rows;
    double decode_s;    /* host seconds of the current run spent decoding */
    double device_s;    /* seconds of the current run from each stage's noise
                         * to its result on the host (the device's work and
                         * the copy back; on a CPU, the networks) */
    /* backend buffers, max_batch rows */
    float *x, *xp, *v1, *v2, *c, *cond, *t, *ca, *cb;
    float *ones;  /* [max_batch, dim2] of 1: the constant term of clamps */
    /* autoregressive stage 2 */
    int ar;
    model_ar_dims ard;
    float *ctx, *xin;                   /* backend: [B, n_ctx], [B, dim + n_ctx] */
    float *zeros;                       /* backend: [B, dim] of 0, the tokens' padding */
    float *tok_h, *ctx_h, *cnd_h, *prev_h;
    double *rem_h;                      /* energy not yet placed, MeV */
    double *hist_h;                     /* [B, history]: previous layers' shares */
    int *act_h;                         /* rows of the batch still generating */
    /* host buffers */
    float *t_h, *ca_h, *cb_h, *e_inc_h, *c1_h, *x1_h, *c2_h, *edep_h, *x2_h;
    float *turn_h;                      /* sample.symmetrize's copies, a shower a thread */
    int turn_threads;                   /* the turning runs on at most these */
    /* per-row constants (const_rows) */
    const_slot *consts;                 /* CONST_SLOTS, open addressing */
    int n_consts, max_consts;
    int64_t const_misses;               /* uses that found the cache full */
    /* graphs (run_integrate) */
    int graphs_on;
    graph_slot graphs[GRAPH_MAX];
    uint64_t graph_uses;
    int64_t graph_replays;              /* of the current run */
    /* the acceptance test (model_sampler_set_accept) */
    int has_accept;
    model_accept accept;
    feat_layout feats;                  /* its features; feats.info NULL: none */
    float *feat_h, *row_h, *score_h;    /* host scratch of the scoring, a share a thread */
    int accept_threads;                 /* the shares: the scoring runs on at most these */
    double draws_per_shower;            /* of the last run: 1 without a test */
};

static void graphs_clear(model_sampler *s)
{
    for (int i = 0; i < GRAPH_MAX; i++) {
        nn_graph_reset(s->b, &s->graphs[i].graph);
        memset(&s->graphs[i], 0, sizeof s->graphs[i]);
    }
}

void model_sampler_close(model_sampler *s)
{
    if (!s)
        return;
    graphs_clear(s);
    float *dev[] = {s->x,  s->xp, s->v1,   s->v2, s->c,   s->cond,
                    s->t,  s->ca, s->cb,   s->ones, s->ctx, s->xin, s->zeros};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        nn_free(s->b, dev[i]);
    for (unsigned i = 0; s->consts && i < CONST_SLOTS; i++)
        nn_free(s->b, s->consts[i].dev);
    free(s->consts);
    /* the copies' targets came from the backend (pinned on a GPU) */
    nn_host_free(s->b, s->x1_h);
    nn_host_free(s->b, s->x2_h);
    nn_host_free(s->b, s->tok_h);
    float *host[] = {s->t_h,  s->ca_h,   s->cb_h,  s->e_inc_h, s->c1_h,
                     s->c2_h, s->edep_h, s->ctx_h, s->cnd_h,   s->prev_h, s->turn_h};
    free(s->rem_h);
    free(s->hist_h);
    free(s->act_h);
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
    for (int i = 0; i < 2; i++)
        nn_trunk_destroy(s->net[i].trunk);
    if (s->repr_ready)
        model_repr_free(&s->repr);
    model_accept_free(&s->accept);
    feat_layout_free(&s->feats);
    free(s->feat_h);
    free(s->row_h);
    free(s->score_h);
    geo_free(&s->geo);
    free(s);
}

int model_sampler_voxels(const model_sampler *s) { return s->geo.n_voxels; }

int model_sampler_layers(const model_sampler *s, int *voxels_per_layer, int max)
{
    for (int l = 0; l < s->geo.n_layers && l < max; l++)
        voxels_per_layer[l] = s->geo.layers[l].n_voxels;
    return s->geo.n_layers;
}
double model_sampler_evals_per_shower(const model_sampler *s) { return s->evals_per_shower; }
double model_sampler_decode_seconds(const model_sampler *s) { return s->decode_s; }
double model_sampler_device_seconds(const model_sampler *s) { return s->device_s; }
void model_sampler_set_graphs(model_sampler *s, int on)
{
    s->graphs_on = on != 0;
    graphs_clear(s);
}
int64_t model_sampler_graph_replays(const model_sampler *s) { return s->graph_replays; }
double model_sampler_flops_per_shower(const model_sampler *s) { return s->flops_per_shower; }

/* FLOPs of one row through a stage's trunk (matmuls, as nn_trunk counts). */
static double row_flops(const stage_net *n)
{
    return nn_trunk_forward_flops(n->trunk, 1);
}

static int load_net(model_sampler *s, int stage, int dim, int n_cond, int n_ctx,
                    const model_ckpt_view *v, gt_error *err)
{
    nn_trunk_config tc;
    model_stage_trunk_config_ctx(&s->cfg, stage, dim, n_cond, n_ctx, &tc);
    stage_net *n = &s->net[stage - 1];
    n->dim = dim;
    n->n_cond = n_cond;
    n->n_ctx = n_ctx;
    n->obj = stage == 1 ? s->cfg.stage1.objective : s->cfg.stage2.objective;
    /* the stage-2 data columns start with the stick-breaking logits (as
     * model_arrays_stage tells the trainer) */
    n->noise_from = stage == 2 && !s->ar ? model_stage_gan_noise_from(s->repr.layout.n_layers)
                                         : 0;
    const void *w = NULL, *cw = NULL;
    size_t wl = 0, cwl = 0;
    int rc;
    if ((rc = model_stage_ckpt_parts(v->weights, v->weights_len, &w, &wl, &cw, &cwl, err)) ||
        (rc = nn_trunk_create(s->b, &tc, &n->trunk, err)) ||
        (rc = nn_ckpt_load(nn_trunk_params(n->trunk), NULL, NULL, w, wl, err)) ||
        (rc = nn_trunk_plan(n->trunk, s->max_batch, err)) ||
        (rc = nn_trunk_pack(n->trunk, err)))
        return gt_error_wrap(err, "stage %d checkpoint", stage);
    /* the sampler checks its inputs once per batch on the host (check_finite):
     * the trunk's own check would read back from the device at every
     * evaluation */
    nn_trunk_set_input_check(n->trunk, 0);
    return GT_OK;
}

int model_sampler_open(nn_backend *b, const model_config *cfg, const void *stage1,
                       size_t len1, const void *stage2, size_t len2, int max_batch,
                       model_sampler **out, gt_error *err)
{
    return model_sampler_open_xml(b, cfg, NULL, 0, stage1, len1, stage2, len2, max_batch, out,
                                  err);
}

int model_sampler_open_xml(nn_backend *b, const model_config *cfg, const void *geo_xml,
                           size_t geo_len, const void *stage1, size_t len1, const void *stage2,
                           size_t len2, int max_batch, model_sampler **out, gt_error *err)
{
    *out = NULL;
    if (max_batch < 1 || max_batch > (1 << 24))
        return gt_error_set(err, GT_EINVAL, "max_batch %d outside [1, %d]", max_batch, 1 << 24);
    model_ckpt_view v1, v2;
    int rc;
    if ((rc = model_ckpt_unpack(stage1, len1, &v1, err)) ||
        (rc = model_ckpt_unpack(stage2, len2, &v2, err)))
        return rc;
    if (v1.stage != 1 || v2.stage != 2)
        return gt_error_set(err, GT_EINVAL, "need a stage-1 and a stage-2 checkpoint (got %d, %d)",
                            v1.stage, v2.stage);
    model_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    s->b = b;
    s->cfg = *cfg;
    s->max_batch = max_batch;
    s->graphs_on = 1;
    float threshold = 0;
    if (geo_xml && geo_len > (size_t)INT_MAX) {
        rc = gt_error_set(err, GT_EINVAL, "a geometry file of %zu bytes", geo_len);
        goto fail;
    }
    if ((rc = geo_xml ? geo_load_memory(&s->geo, geo_xml, (int)geo_len, err)
                      : model_geometry_load(cfg->geometry, &s->geo, err)) ||
        (rc = model_geometry_threshold(&s->geo, &threshold, err)) ||
        (rc = model_repr_from_bytes(&s->repr, &s->geo, threshold, v2.repr, v2.repr_len, err)))
        goto fail;
    s->repr.layout.dequantize = cfg->stage2.dequantize;
    s->repr.layout.voxel_alpha = cfg->stage2.voxel_alpha;
    s->repr.layout.keep_largest = cfg->stage2.keep_largest;
    s->repr_ready = 1;
    if (s->repr.layout.rings != (cfg->stage2.rings != 0)) {
        rc = gt_error_set(err, GT_EFORMAT, "the checkpoint's shower vector %s ring features "
                          "and the config says model.stage2.rings = %s",
                          s->repr.layout.rings ? "has" : "has no",
                          cfg->stage2.rings ? "true" : "false");
        goto fail;
    }
    if (s->repr.layout.counts != (cfg->stage2.ring_counts && cfg->stage2.rings)) {
        rc = gt_error_set(err, GT_EFORMAT, "the checkpoint's shower vector %s ring hit counts "
                          "and the config says model.stage2.ring_counts = %s",
                          s->repr.layout.counts ? "has" : "has no",
                          cfg->stage2.ring_counts ? "true" : "false");
        goto fail;
    }
    /* the count features' meaning; the vector's width cannot tell it */
    prep_layout_set_count_stick(&s->repr.layout, cfg->stage2.count_stick);
    if ((s->repr.n_profile != 0) != (cfg->stage1.profile != 0)) {
        rc = gt_error_set(err, GT_EFORMAT, "the checkpoint's stage-1 vector %s the shower's "
                          "profile and the config says model.stage1.profile = %s",
                          s->repr.n_profile ? "has" : "has no",
                          cfg->stage1.profile ? "true" : "false");
        goto fail;
    }
    const int D = s->repr.layout.dim, B = max_batch;
    const int D1 = model_repr_dim1(&s->repr), C2 = model_repr_cond2(&s->repr);
    s->ar = cfg->stage2.mode == MODEL_MODE_AUTOREGRESSIVE;
    model_ar_dims_of(&s->repr.layout, s->ar ? cfg->stage2.history : 0, s->repr.n_profile,
                     &s->ard);
    /* conditions per row: stage 1 has 1, oneshot stage 2 2 (4 with the
     * profile), tokens 4 + H (+ 2) */
    const int NC = s->ard.n_cond > C2 ? s->ard.n_cond : C2;
    if ((rc = load_net(s, 1, D1, 1, 0, &v1, err)) ||
        (rc = s->ar ? load_net(s, 2, s->ard.dim, s->ard.n_cond, s->ard.n_ctx, &v2, err)
                    : load_net(s, 2, D, C2, 0, &v2, err)))
        goto fail;
    /* device rows are as wide as the widest thing they hold */
    size_t bd = (size_t)B * (D > s->ard.dim ? D : s->ard.dim);
    float **dev[] = {&s->x, &s->xp, &s->v1, &s->v2, &s->ones};
    for (int i = 0; i < 5; i++)
        if ((rc = nn_alloc(b, bd * sizeof(float), (void **)dev[i], err)))
            goto fail;
    if ((rc = nn_alloc(b, (size_t)B * NC * sizeof(float), (void **)&s->c, err)) ||
        (rc = nn_alloc(b, (size_t)B * (1 + NC) * sizeof(float), (void **)&s->cond, err)) ||
        (rc = nn_alloc(b, (size_t)B * sizeof(float), (void **)&s->t, err)) ||
        (rc = nn_alloc(b, (size_t)B * sizeof(float), (void **)&s->ca, err)) ||
        (rc = nn_alloc(b, (size_t)B * sizeof(float), (void **)&s->cb, err)))
        goto fail;
    {
        /* one row of 1 from the host, then doubled on the device: a host
         * copy of the whole [B, D] would be the largest buffer of the open
         * (1.7 GB at 65 536 rows), written once and thrown away */
        const size_t row = bd / (size_t)B;
        float *one = malloc(row * sizeof(float));
        if (!one) {
            rc = gt_error_set(err, GT_ENOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < row; i++)
            one[i] = 1.0f;
        rc = nn_copy_h2d(b, s->ones, one, row * sizeof(float), err);
        free(one);
        for (size_t have = row; rc == GT_OK && have < bd; have *= 2)
            rc = nn_copy_d2d(b, s->ones + have, s->ones,
                             (have < bd - have ? have : bd - have) * sizeof(float), err);
        if (rc)
            goto fail;
    }
    s->consts = calloc(CONST_SLOTS, sizeof *s->consts);
    {
        size_t fit = CONST_BYTES / ((size_t)B * sizeof(float));
        s->max_consts = fit < CONST_MAX ? (int)fit : CONST_MAX;
    }
    s->t_h = malloc((size_t)B * sizeof(float));
    s->ca_h = malloc((size_t)B * sizeof(float));
    s->cb_h = malloc((size_t)B * sizeof(float));
    s->e_inc_h = malloc((size_t)B * sizeof(float));
    s->c1_h = malloc((size_t)B * sizeof(float));
    /* what the copies back land in: the backend's host memory (page-locked
     * on a GPU, where a batch's vectors, 480 MB at 16 384 dataset-2 rows,
     * would otherwise cross through a staging buffer) */
    if ((rc = nn_host_alloc(b, (size_t)B * D1 * sizeof(float), (void **)&s->x1_h, err)) ||
        (rc = nn_host_alloc(b, bd * sizeof(float), (void **)&s->x2_h, err)))
        goto fail;
    s->c2_h = malloc((size_t)B * C2 * sizeof(float));
    s->edep_h = malloc((size_t)B * sizeof(float));
    s->turn_threads = 1;
#ifdef _OPENMP
    s->turn_threads = omp_get_max_threads();
#endif
    s->turn_h = malloc((size_t)s->turn_threads * s->geo.n_voxels * sizeof(float));
    if (!s->consts || !s->t_h || !s->ca_h || !s->cb_h || !s->e_inc_h || !s->c1_h || !s->x1_h ||
        !s->c2_h || !s->edep_h || !s->x2_h || !s->turn_h) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory");
        goto fail;
    }
    if (s->ar) {
        size_t P = (size_t)s->ard.n_ctx;
        if ((rc = nn_alloc(b, (size_t)B * P * sizeof(float), (void **)&s->ctx, err)) ||
            (rc = nn_alloc(b, (size_t)B * (s->ard.dim + P) * sizeof(float), (void **)&s->xin,
                           err)) ||
            (rc = nn_alloc(b, (size_t)B * s->ard.dim * sizeof(float), (void **)&s->zeros, err)) ||
            (rc = nn_memset(b, s->zeros, 0, (size_t)B * s->ard.dim * sizeof(float), err)))
            goto fail;
        if ((rc = nn_host_alloc(b, (size_t)B * s->ard.dim * sizeof(float), (void **)&s->tok_h,
                                err)))
            goto fail;
        s->ctx_h = malloc((size_t)B * P * sizeof(float));
        s->cnd_h = malloc((size_t)B * NC * sizeof(float));
        s->prev_h = malloc((size_t)B * P * sizeof(float));
        s->rem_h = malloc((size_t)B * sizeof(double));
        s->hist_h = calloc((size_t)B * (s->ard.history ? s->ard.history : 1), sizeof(double));
        s->act_h = malloc((size_t)B * sizeof(int));
        if (!s->tok_h || !s->ctx_h || !s->cnd_h || !s->prev_h || !s->rem_h || !s->hist_h ||
            !s->act_h) {
            rc = gt_error_set(err, GT_ENOMEM, "out of memory");
            goto fail;
        }
    }
    *out = s;
    return GT_OK;
fail:
    model_sampler_close(s);
    return rc;
}

/* Fills n host floats with v and uploads them. */
static int upload_const(model_sampler *s, float *dev, float *host, int n, float v, gt_error *err)
{
    for (int i = 0; i < n; i++)
        host[i] = v;
    return nn_copy_h2d(s->b, dev, host, (size_t)n * sizeof(float), err);
}

/* *out = the cached backend array of max_batch copies of v, made on first
 * use (host: max_batch floats of staging), or NULL when the cache is full. */
static int const_dev(model_sampler *s, float v, float *host, const float **out, gt_error *err)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    unsigned h = (bits * 2654435761u) >> (32 - CONST_SLOTS_LOG2);
    const_slot *c = &s->consts[h];
    for (; c->dev; h = (h + 1) & (CONST_SLOTS - 1), c = &s->consts[h])
        if (c->bits == bits) {
            *out = c->dev;
            return GT_OK;
        }
    *out = NULL;
    if (s->n_consts >= s->max_consts) {
        s->const_misses++;
        return GT_OK;
    }
    float *d = NULL;
    GT_TRY(nn_alloc(s->b, (size_t)s->max_batch * sizeof(float), (void **)&d, err));
    int rc = upload_const(s, d, host, s->max_batch, v, err);
    if (rc) {
        nn_free(s->b, d);
        return rc;
    }
    c->bits = bits;
    c->dev = d;
    s->n_consts++;
    *out = d;
    return GT_OK;
}

/* *out = a backend array of (at least) `rows` copies of v: the cached one,
 * or, with the cache full, v uploaded into `scratch` (staged in `host`). */
static int const_rows(model_sampler *s, float v, int rows, float *scratch, float *host,
                      const float **out, gt_error *err)
{
    GT_TRY(const_dev(s, v, host, out, err));
    if (*out)
        return GT_OK;
    *out = scratch;
    return upload_const(s, scratch, host, rows, v, err);
}

/* v = f(x, [t, c]) for `rows` rows. */
static int eval_net(model_sampler *s, stage_net *n, float *x, float t, float *v, int rows,
                    gt_error *err)
{
    const float *tc = NULL;
    int rc = const_rows(s, t, rows, s->t, s->t_h, &tc, err);
    if (rc)
        return rc;
    nn_tensor parts[2] = {nn_f32((float *)tc, rows, 1), nn_f32(s->c, rows, n->n_cond)};
    nn_tensor cond = nn_f32(s->cond, rows, 1 + n->n_cond);
    if ((rc = nn_concat(s->b, cond, parts, 2, err)))
        return rc;
    nn_tensor xin = nn_f32(x, rows, n->dim);
    if (n->n_ctx) {
        nn_tensor xp[2] = {xin, nn_f32(s->ctx, rows, n->n_ctx)};
        xin = nn_f32(s->xin, rows, n->dim + n->n_ctx);
        if ((rc = nn_concat(s->b, xin, xp, 2, err)))
            return rc;
    }
    return nn_trunk_forward(n->trunk, xin, cond, nn_f32(v, rows, n->dim), 0, err);
}

/* y = a x + b z with scalar a, b. */
static int axpby(model_sampler *s, float *y, float a, float *x, float bcoef, float *z, int rows,
                 int dim, gt_error *err)
{
    const float *ca = NULL, *cb = NULL;
    int rc;
    if ((rc = const_rows(s, a, rows, s->ca, s->ca_h, &ca, err)) ||
        (rc = const_rows(s, bcoef, rows, s->cb, s->cb_h, &cb, err)))
        return rc;
    return nn_axpby_rows(s->b, nn_f32(y, rows, dim), ca, nn_f32(x, rows, dim), cb,
                         nn_f32(z, rows, dim), err);
}

/* x = min(max(x, -c), c), from existing ops:
 * max(x, -c) = relu(x + c) - c and min(y, c) = c - relu(c - y). */
static int clamp(model_sampler *s, float *x, float c, int rows, int dim, gt_error *err)
{
    nn_tensor t = nn_f32(x, rows, dim);
    int rc;
    if ((rc = axpby(s, x, 1.0f, x, c, s->ones, rows, dim, err)) ||
        (rc = nn_leaky_fwd(s->b, t, t, 0.0f, err)) ||
        (rc = axpby(s, x, -1.0f, x, 2.0f * c, s->ones, rows, dim, err)) ||
        (rc = nn_leaky_fwd(s->b, t, t, 0.0f, err)) ||
        (rc = axpby(s, x, -1.0f, x, c, s->ones, rows, dim, err)))
        return rc;
    return GT_OK;
}

/* Time of step k of `steps` on the flow solvers' grid, (k / steps)^power:
 * with power > 1 the steps are short near the noise (t = 0), where the
 * measured velocity turns fastest (engine/model/README.md, "Time grid").
 * Repeated products of a correctly rounded quotient: the same float on
 * every CPU and compiler (pow() may differ in the last bit by libm). */
static float grid_time(int k, int steps, int power)
{
    const double u = (double)k / steps;
    double t = 1.0;
    for (int i = 0; i < power; i++)
        t *= u;
    return (float)t;
}

/* Heun's corrector for a step of length h from (s->x, t), v holding
 * v(s->x, t): predicts s->xp, evaluates vp there, and moves s->x by the
 * average slope.  Heun's steps and ab2's first step. */
static int heun_correct(model_sampler *s, stage_net *n, float t, float h, float *v, float *vp,
                        int rows, double *evals, gt_error *err)
{
    const int D = n->dim;
    int rc;
    if ((rc = axpby(s, s->xp, 1.0f, s->x, h, v, rows, D, err)) ||
        (rc = eval_net(s, n, s->xp, t + h, vp, rows, err)) ||
        (rc = axpby(s, s->x, 1.0f, s->x, 0.5f * h, v, rows, D, err)) ||
        (rc = axpby(s, s->x, 1.0f, s->x, 0.5f * h, vp, rows, D, err)))
        return rc;
    *evals += 1;
    return GT_OK;
}

/* The ab2 flow solver: one Heun step from the noise, then the two-step
 * Adams-Bashforth rule for the grid's uneven steps,
 *   x_{k+1} = x_k + h_k ((1 + r / 2) v_k - (r / 2) v_{k-1}),  r = h_k / h_{k-1},
 * one network evaluation a step (steps + 1 in all, against Heun's 2 steps):
 * twice Heun's steps for the same evaluations, with the slope of the step
 * before standing in for a corrector.  The first step is Heun's because
 * there is no slope before it, and the velocity turns fastest near the
 * noise. */
static int integrate_ab2(model_sampler *s, stage_net *n, int rows, int steps, double *evals,
                         gt_error *err)
{
    const int D = n->dim, power = s->cfg.time_power;
    float *cur = s->v1, *prev = s->v2, h_prev = 0.0f;
    int rc;
    for (int k = 0; k < steps; k++) {
        const float t = grid_time(k, steps, power);
        const float h = grid_time(k + 1, steps, power) - t;
        if ((rc = eval_net(s, n, s->x, t, cur, rows, err)))
            return rc;
        *evals += 1;
        if (k == 0) {
            /* Heun; v(x_0, t_0) stays in cur as the slope before step 1 */
            if ((rc = heun_correct(s, n, t, h, cur, prev, rows, evals, err)))
                return rc;
        } else {
            const float r = h / h_prev;
            if ((rc = axpby(s, s->x, 1.0f, s->x, h * (1.0f + 0.5f * r), cur, rows, D, err)) ||
                (rc = axpby(s, s->x, 1.0f, s->x, -h * 0.5f * r, prev, rows, D, err)))
                return rc;
        }
        float *swap = cur;
        cur = prev;
        prev = swap;
        h_prev = h;
    }
    return GT_OK;
}

/* Integrates one stage in place on s->x (noise in, sample out). */
static int integrate(model_sampler *s, stage_net *n, int rows, int steps, double *evals,
                     gt_error *err)
{
    const int D = n->dim;
    int rc;
    if (n->obj == MODEL_OBJ_WGAN) {
        /* a generator: one forward pass from the noise, no time input */
        nn_tensor x = nn_f32(s->x, rows, D), v = nn_f32(s->v1, rows, D);
        if ((rc = nn_trunk_forward(n->trunk, x, nn_f32(s->c, rows, n->n_cond), v, 0, err)))
            return rc;
        *evals += 1;
        /* G(z, c) = T(z, c) + [0 ; z_k..] (model_stage_gan_noise_from) */
        const int k = n->noise_from;
        nn_tensor xv = nn_tensor_cols(x, k, D - k), vv = nn_tensor_cols(v, k, D - k);
        nn_tensor vu = nn_tensor_cols(v, 0, k);
        if ((rc = nn_add(s->b, xv, xv, vv, err)))
            return rc;
        return k ? nn_concat(s->b, nn_tensor_cols(x, 0, k), &vu, 1, err) : GT_OK;
    }
    if (n->obj == MODEL_OBJ_DDPM) {
        for (int k = 0; k < steps; k++) {
            double t = 1.0 - (double)k / steps, tn = 1.0 - (double)(k + 1) / steps;
            double ab = model_ddpm_abar(t), abn = tn <= 0 ? 1.0 : model_ddpm_abar(tn);
            if ((rc = eval_net(s, n, s->x, (float)t, s->v1, rows, err)))
                return rc;
            /* x0 = (x - sqrt(1 - ab) eps) / sqrt(ab), clipped;
             * x' = sqrt(abn) x0 + sqrt(1 - abn) eps */
            float a0 = (float)(1.0 / sqrt(ab)), b0 = (float)(-sqrt(1.0 - ab) / sqrt(ab));
            if ((rc = axpby(s, s->xp, a0, s->x, b0, s->v1, rows, D, err)) ||
                (rc = clamp(s, s->xp, X0_CLIP, rows, D, err)) ||
                (rc = axpby(s, s->x, (float)sqrt(abn), s->xp, (float)sqrt(1.0 - abn), s->v1,
                            rows, D, err)))
                return rc;
            *evals += 1;
        }
        return GT_OK;
    }
    const int power = s->cfg.time_power;
    if (s->cfg.solver == MODEL_SOLVER_AB2)
        return integrate_ab2(s, n, rows, steps, evals, err);
    for (int k = 0; k < steps; k++) {
        /* power 1 keeps the float arithmetic of the uniform grid runs were
         * recorded with (migration 0009), so they serve the same bytes */
        const float t = power == 1 ? (float)k * (1.0f / (float)steps) : grid_time(k, steps, power);
        const float dt = power == 1 ? 1.0f / (float)steps : grid_time(k + 1, steps, power) - t;
        if ((rc = eval_net(s, n, s->x, t, s->v1, rows, err)))
            return rc;
        *evals += 1;
        if (s->cfg.solver == MODEL_SOLVER_EULER) {
            if ((rc = axpby(s, s->x, 1.0f, s->x, dt, s->v1, rows, D, err)))
                return rc;
            continue;
        }
        /* Heun: predictor, corrector with the average slope. */
        if ((rc = heun_correct(s, n, t, dt, s->v1, s->v2, rows, evals, err)))
            return rc;
    }
    return GT_OK;
}

/* Whether integrate() of stage net n can be a graph: on a backend with
 * graphs, for an expert trunk (a routed one groups rows per expert on the
 * host) of a oneshot stage (an autoregressive layer's row count changes
 * from layer to layer and batch to batch: no shape would repeat). */
static int graph_fits(const model_sampler *s, const stage_net *n)
{
    return s->graphs_on && nn_graph_supported(s->b) && n->n_ctx == 0 &&
           nn_trunk_get_config(n->trunk)->kind == NN_TRUNK_EXPERT;
}

/* The slot of (stage, rows, steps), or a slot for it: an empty one, else
 * the least recently used one (its graph destroyed). */
static graph_slot *graph_slot_of(model_sampler *s, int stage, int rows, int steps)
{
    graph_slot *lru = &s->graphs[0];
    for (int i = 0; i < GRAPH_MAX; i++) {
        graph_slot *g = &s->graphs[i];
        if (g->stage == stage && g->rows == rows && g->steps == steps)
            return g;
        if (!g->stage || (lru->stage && g->used < lru->used))
            lru = g;
    }
    nn_graph_reset(s->b, &lru->graph);
    memset(lru, 0, sizeof *lru);
    lru->stage = stage;
    lru->rows = rows;
    lru->steps = steps;
    return lru;
}

/* One integration as the work of a graph (nn_graph_fn); its evaluations
 * are counted afresh at every run (a capture that fails runs it again). */
typedef struct integration {
    model_sampler *s;
    stage_net *n;
    graph_slot *slot;
    int rows, steps, ran;
    double evals;
} integration;

static int integration_run(void *ctx, gt_error *err)
{
    integration *it = ctx;
    model_sampler *s = it->s;
    const int64_t misses = s->const_misses;
    it->ran = 1;
    it->evals = 0;
    int rc = integrate(s, it->n, it->rows, it->steps, &it->evals, err);
    /* a step constant uploaded into scratch would replay as it was this
     * time; a shape whose eager run failed is not tried as a graph */
    if (rc || s->const_misses != misses)
        nn_graph_refuse(&it->slot->graph);
    return rc;
}

/* integrate() of stage (1 or 2) for `rows` rows, on a backend with graphs
 * through the graph of its shape once the shape has run (graph_fits);
 * elsewhere, and for shapes that cannot be graphs, as it is.  Same
 * kernels, same order, so the same bytes either way. */
static int run_integrate(model_sampler *s, int stage, int rows, int steps, double *evals,
                         gt_error *err)
{
    stage_net *n = &s->net[stage - 1];
    if (!graph_fits(s, n))
        return integrate(s, n, rows, steps, evals, err);
    graph_slot *g = graph_slot_of(s, stage, rows, steps);
    g->used = ++s->graph_uses;
    integration it = {s, n, g, rows, steps, 0, 0.0};
    const long long replays = g->graph.replays;
    int rc = nn_graph_run(s->b, &g->graph, integration_run, &it, err);
    /* a replay runs nothing on the host: it counts the evaluations of the
     * integration it was captured from */
    if (it.ran)
        g->evals = it.evals;
    *evals += g->evals;
    s->graph_replays += g->graph.replays - replays;
    return rc;
}

/* A slice of one request placed in the current device batch. */
typedef struct piece {
    int req;
    int64_t first;   /* first row within the request */
    int rows;
    int at;          /* row within the batch */
} piece;

/* sample.symmetrize: each decoded shower turned by one of the geometry's
 * rotations about the beam axis and mirrored, both drawn from (request
 * seed, row) on their own stream, so a row's bytes still depend on nothing
 * but (seed, row).  Why: a model's small angular biases (one angular bin
 * hit a few percent more often than another, the same in every shower) are
 * spread evenly, as the reference's are; the low-level classifier found
 * exactly those (engine/model/README.md, "The beam axis's symmetry"). */
static void turn_showers(model_sampler *s, const model_sample_request *q, int64_t first,
                         int rows)
{
    const int V = s->geo.n_voxels, G = geo_rotation_count(&s->geo);
    /* rows are independent, so on every core: serial, the turning (about
     * 215 000 dataset-2 showers/s on one core) would be a third of the
     * host's decoding phase on 16 cores, where decoding (about 7 500 a
     * core) runs on all of them */
#pragma omp parallel for schedule(static) num_threads(s->turn_threads) if (rows >= 16)
    for (int r = 0; r < rows; r++) {
        int thread = 0;
#ifdef _OPENMP
        thread = omp_get_thread_num();
#endif
        uint32_t w[4];
        nn_rng_block(q->seed, draw_stream(TURN_STREAM, q->draw), (uint64_t)(q->row0 + first + r),
                     w);
        int k = (int)(((uint64_t)w[0] * (uint64_t)G) >> 32), mirror = (int)(w[1] >> 31);
        float *shower = q->showers + (size_t)(first + r) * V;
        if (!k && !mirror)
            continue;
        float *tmp = s->turn_h + (size_t)thread * V;
        geo_turn_shower(&s->geo, shower, tmp, k, mirror);
        memcpy(shower, tmp, (size_t)V * sizeof(float));
    }
}

/* The standard deviation of a stage's starting noise: sample.temperature
 * for stage 2, 1 for stage 1.  Stage 1's few features (the energy and its
 * depth profile) come out right at 1; stage 2 under it draws fewer of the
 * layers' wide radial tails that the network over-weights (engine/model/
 * README.md, "The sampler's temperature").  At 1 the noise is the unit
 * normal bit for bit, as before the field. */
static float noise_sd(const model_sampler *s, int stage)
{
    return stage == 2 ? (float)s->cfg.temperature : 1.0f;
}

/* Starting noise: row `row` of a request is filled from (seed, stream) at
 * block offset row * ceil(D/4), so a row's noise depends only on (seed, row),
 * however requests are split and batched.  A piece's rows are consecutive
 * rows of one request: one rand_rows call each (one launch on a GPU). */
static int fill_noise(model_sampler *s, const model_sample_request *reqs, const piece *p,
                      int np, int stage, int D, gt_error *err)
{
    const uint64_t per_row = nn_rng_blocks((uint64_t)D);
    for (int i = 0; i < np; i++) {
        const model_sample_request *q = &reqs[p[i].req];
        nn_tensor x = nn_f32(s->x + (size_t)p[i].at * D, p[i].rows, D);
        int rc = nn_rand_rows(s->b, x, NN_DIST_NORMAL, 0.0f, noise_sd(s, stage), q->seed,
                              draw_stream(SAMPLE_STREAM + (uint64_t)stage, q->draw),
                              (uint64_t)(q->row0 + p[i].first),
                              per_row, err);
        if (rc)
            return rc;
    }
    return GT_OK;
}

/* The piece that holds batch row i. */
static int piece_of(const piece *p, int np, int i)
{
    int k = 0;
    while (k < np - 1 && !(i >= p[k].at && i < p[k].at + p[k].rows))
        k++;
    return k;
}

/* GT_EINVAL naming the shower behind the first of `rows` rows of `per`
 * host floats that is not finite (row r is batch row idx[r], or r when idx
 * is NULL), with `what` happened to it.  The trunks' per-evaluation check
 * is off (load_net): what a network reads comes from here (conditions) or
 * from the noise and the networks' own outputs, which are checked when
 * they come back to the host after each stage, so a NaN is still an error
 * rather than a NaN shower. */
static int check_finite(const piece *p, int np, const float *x, int rows, int per,
                        const int *idx, const char *what, gt_error *err)
{
    int64_t first = prep_first_nonfinite_row(x, rows, per);
    if (first == rows)
        return GT_OK;
    int row = idx ? idx[first] : (int)first, k = piece_of(p, np, row);
    return gt_error_set(err, GT_EINVAL, "request %d, shower %lld: %s", p[k].req,
                        (long long)(p[k].first + (row - p[k].at)), what);
}

#define DIVERGED "the checkpoint's network gave a non-finite value"

/* Noise of layer token l for the na active rows (s->act_h) packed at the
 * top of s->x: (request seed, row, stream AR_STREAM + l), as fill_noise
 * keys it.  Active rows that are consecutive rows of one request are one
 * rand_rows call; the columns outside the layer's [lo, hi) are then zeroed
 * for all rows at once (a copy from s->zeros), as in training. */
static int ar_noise(model_sampler *s, const model_sample_request *reqs, const piece *p, int np,
                    int na, int l, int32_t lo, int32_t hi, gt_error *err)
{
    const int TD = s->ard.dim;
    const uint64_t per_row = nn_rng_blocks((uint64_t)TD);
    int rc;
    for (int a = 0; a < na;) {
        int i = s->act_h[a], k = piece_of(p, np, i), end = p[k].at + p[k].rows, run = 1;
        while (a + run < na && s->act_h[a + run] == i + run && i + run < end)
            run++;
        const model_sample_request *q = &reqs[p[k].req];
        uint64_t row = (uint64_t)(q->row0 + p[k].first + (i - p[k].at));
        if ((rc = nn_rand_rows(s->b, nn_f32(s->x + (size_t)a * TD, run, TD), NN_DIST_NORMAL,
                               0.0f, noise_sd(s, 2), q->seed,
                               draw_stream(AR_STREAM + (uint64_t)l, q->draw), row, per_row,
                               err)))
            return rc;
        a += run;
    }
    if (lo <= 0 && hi >= TD)
        return GT_OK;
    /* [zeros | untouched | zeros]: a NULL part leaves its columns alone */
    nn_tensor parts[3];
    int n = 0;
    if (lo > 0)
        parts[n++] = nn_f32(s->zeros, na, lo);
    if (hi > lo)
        parts[n++] = nn_f32(NULL, na, hi - lo);
    if (hi < TD)
        parts[n++] = nn_f32(s->zeros, na, TD - hi);
    return nn_concat(s->b, nn_f32(s->x, na, TD), parts, n, err);
}

/* Autoregressive stage 2 for the `rows` rows of the batch (their stage-2
 * conditions in c2_h, E_dep in edep_h): layer by layer, only for the rows
 * whose remaining energy can still put a voxel over the readout threshold.
 * Once E_dep * r_l is under the threshold every later voxel would read 0,
 * so those rows leave the batch without a network call: skipping changes
 * no output.  Writes the full standardised stage-2 vectors to x2_h. */
static int run_ar(model_sampler *s, model_sample_request *reqs, const piece *p, int np,
                  int rows, int steps, double *evals, double *flops, gt_error *err)
{
    const prep_layout *lay = &s->repr.layout;
    const int L = s->ard.n_tokens, TD = s->ard.dim, P = s->ard.n_ctx, D2 = lay->dim;
    const int C = s->ard.n_cond, H = s->ard.history, K = s->ard.n_profile;
    const int C2 = model_repr_cond2(&s->repr);
    /* 1e-6 below the threshold: a float rounding of the decoder can never
     * lift a skipped voxel to the threshold itself */
    const double cut = (double)lay->threshold_mev * (1.0 - 1e-6);
    int rc;
    memset(s->x2_h, 0, (size_t)rows * D2 * sizeof(float));
    memset(s->prev_h, 0, (size_t)rows * P * sizeof(float));
    for (int i = 0; i < rows; i++)
        s->rem_h[i] = s->edep_h[i] > 0 ? (double)s->edep_h[i] : 0.0;
    if (H)
        memset(s->hist_h, 0, (size_t)rows * H * sizeof(double));
    for (int l = 0; l < L; l++) {
        int32_t lo, hi;
        model_ar_valid(lay, l, &lo, &hi);
        int na = 0;
        for (int i = 0; i < rows; i++) {
            if (!(s->rem_h[i] >= cut))
                continue;
            s->act_h[na] = i;
            float *cd = s->cnd_h + (size_t)na * C;
            const float *c2 = s->c2_h + (size_t)i * C2;
            cd[0] = c2[0];
            cd[1] = c2[1];
            cd[2] = model_ar_remainder_feature(s->rem_h[i] / (double)s->edep_h[i]);
            cd[3] = L > 1 ? (float)l / (float)(L - 1) : 0.0f;
            for (int h = 0; h < H; h++)
                cd[4 + h] = model_ar_remainder_feature(s->hist_h[(size_t)i * H + h]);
            for (int j = 0; j < K; j++)
                cd[4 + H + j] = c2[2 + j];
            memcpy(s->ctx_h + (size_t)na * P, s->prev_h + (size_t)i * P, (size_t)P * sizeof(float));
            na++;
        }
        if (na == 0)
            break;
        if ((rc = check_finite(p, np, s->cnd_h, na, C, s->act_h,
                               "the stage-2 conditions are not finite", err)) ||
            (rc = nn_copy_h2d(s->b, s->c, s->cnd_h, (size_t)na * C * sizeof(float), err)) ||
            (rc = nn_copy_h2d(s->b, s->ctx, s->ctx_h, (size_t)na * P * sizeof(float), err)))
            return rc;
        /* noise of (request seed, row, layer), padding columns at 0 as in training */
        if ((rc = ar_noise(s, reqs, p, np, na, l, lo, hi, err)))
            return rc;
        double ev = 0;
        if ((rc = integrate(s, &s->net[1], na, steps, &ev, err)) ||
            (rc = nn_copy_d2h(s->b, s->tok_h, s->x, (size_t)na * TD * sizeof(float), err)) ||
            (rc = check_finite(p, np, s->tok_h, na, TD, s->act_h, DIVERGED " in stage 2", err)))
            return rc;
        *evals += ev * na / rows;
        *flops += ev * na / rows * row_flops(&s->net[1]);
        for (int a = 0; a < na; a++) {
            int i = s->act_h[a];
            const float *t = s->tok_h + (size_t)a * TD;
            float *x2 = s->x2_h + (size_t)i * D2;
            memcpy(x2 + lay->n_u + lay->block_off[l], t + 1,
                   (size_t)lay->block_width[l] * sizeof(float));
            memset(s->prev_h + (size_t)i * P, 0, (size_t)P * sizeof(float));
            memcpy(s->prev_h + (size_t)i * P, t + 1, (size_t)lay->block_width[l] * sizeof(float));
            if (l < L - 1) {
                x2[l] = t[0];
                /* the remainder exactly as prep_stick_join will compute it */
                float xs = (float)(t[0] * s->repr.shower.std[l] + s->repr.shower.mean[l]);
                double u = prep_logit_unmap(xs);
                u = u < 0 ? 0 : u > 1 ? 1 : u;
                double placed = u * s->rem_h[i];
                if (H)
                    model_ar_history_push(s->hist_h + (size_t)i * H, H,
                                          placed / (double)s->edep_h[i]);
                s->rem_h[i] -= placed;
            }
        }
    }
    return GT_OK;
}

static int run_batch(model_sampler *s, model_sample_request *reqs, const piece *p, int np,
                     int rows, int steps, gt_error *err)
{
    const int D2 = s->repr.layout.dim, V = s->geo.n_voxels;
    const int D1 = model_repr_dim1(&s->repr), C2 = model_repr_cond2(&s->repr);
    int rc;
    double evals = 0, flops = 0, ev1 = 0, ev2 = 0;
    for (int i = 0; i < np; i++)
        memcpy(s->e_inc_h + p[i].at, reqs[p[i].req].e_inc + p[i].first,
               (size_t)p[i].rows * sizeof(float));
    model_repr_conditions(&s->repr, s->e_inc_h, rows, s->c1_h);
    /* stage 1: energy */
    double t_dev = gt_clock_s();
    if ((rc = check_finite(p, np, s->c1_h, rows, 1, NULL, "the stage-1 conditions are not finite",
                           err)) ||
        (rc = nn_copy_h2d(s->b, s->c, s->c1_h, (size_t)rows * sizeof(float), err)) ||
        (rc = fill_noise(s, reqs, p, np, 1, D1, err)) ||
        (rc = run_integrate(s, 1, rows, steps, &ev1, err)) ||
        (rc = nn_copy_d2h(s->b, s->x1_h, s->x, (size_t)rows * D1 * sizeof(float), err)))
        return rc;
    s->device_s += gt_clock_s() - t_dev;
    if ((rc = check_finite(p, np, s->x1_h, rows, D1, NULL, DIVERGED " in stage 1", err)))
        return rc;
    model_repr_energy(&s->repr, s->e_inc_h, s->c1_h, s->x1_h, rows, s->edep_h, s->c2_h);
    if ((rc = check_finite(p, np, s->edep_h, rows, 1, NULL, "the deposited energy is not finite",
                           err)) ||
        (rc = check_finite(p, np, s->c2_h, rows, C2, NULL,
                           "the stage-2 conditions are not finite", err)))
        return rc;
    /* stage 2: shower (autoregressive: the host's share of each layer
     * counts as the device's here) */
    t_dev = gt_clock_s();
    if (s->ar) {
        if ((rc = run_ar(s, reqs, p, np, rows, steps, &evals, &flops, err)))
            return rc;
        s->device_s += gt_clock_s() - t_dev;
    } else {
        if ((rc = nn_copy_h2d(s->b, s->c, s->c2_h, (size_t)rows * C2 * sizeof(float), err)) ||
            (rc = fill_noise(s, reqs, p, np, 2, D2, err)) ||
            (rc = run_integrate(s, 2, rows, steps, &ev2, err)) ||
            (rc = nn_copy_d2h(s->b, s->x2_h, s->x, (size_t)rows * D2 * sizeof(float), err)))
            return rc;
        s->device_s += gt_clock_s() - t_dev;
        if ((rc = check_finite(p, np, s->x2_h, rows, D2, NULL, DIVERGED " in stage 2", err)))
            return rc;
    }
    const double t_decode = gt_clock_s();
    for (int i = 0; i < np; i++) {
        model_sample_request *q = &reqs[p[i].req];
        float *x2 = s->x2_h + (size_t)p[i].at * D2;
        const float *ed = s->edep_h + p[i].at;
        model_repr_showers(&s->repr, x2, ed, p[i].rows, q->showers + (size_t)p[i].first * V);
        if (s->cfg.symmetrize)
            turn_showers(s, q, p[i].first, p[i].rows);
        if (q->e_dep)
            memcpy(q->e_dep + p[i].first, ed, (size_t)p[i].rows * sizeof(float));
    }
    s->decode_s += gt_clock_s() - t_decode;
    /* evals counts per-shower evaluations of this batch (all rows for
     * oneshot; the active share of each layer for autoregressive) */
    evals += ev1 + ev2;
    flops += ev1 * row_flops(&s->net[0]) + ev2 * row_flops(&s->net[1]);
    s->evals_sum += evals * rows;
    s->flops_sum += flops * rows;
    s->evals_rows += rows;
    return GT_OK;
}

static int sampler_run(model_sampler *s, model_sample_request *reqs, int n_reqs, int steps,
                       gt_error *err);

int model_sampler_set_accept(model_sampler *s, const void *blob, size_t len, gt_error *err)
{
    model_accept_free(&s->accept);
    feat_layout_free(&s->feats);
    free(s->feat_h);
    free(s->row_h);
    free(s->score_h);
    s->feat_h = s->row_h = s->score_h = NULL;
    s->has_accept = 0;
    if (!blob)
        return GT_OK;
    float threshold = 0;
    int rc;
    if ((rc = model_accept_unpack(blob, len, &s->accept, err)) ||
        (rc = model_geometry_threshold(&s->geo, &threshold, err)) ||
        (rc = feat_layout_init(&s->feats, &s->geo, threshold, err)))
        goto fail;
    if (s->accept.net.d != feat_classifier_width(&s->feats)) {
        rc = gt_error_set(err, GT_EINVAL,
                          "the acceptance test reads %d features a shower; this geometry has %d",
                          s->accept.net.d, feat_classifier_width(&s->feats));
        goto fail;
    }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    const int H = s->accept.net.hidden, d = s->accept.net.d;
    s->feat_h = malloc((size_t)threads * s->feats.n_features * sizeof(float));
    s->row_h = malloc((size_t)threads * d * sizeof(float));
    s->score_h = malloc((size_t)threads * 2 * (d > H ? d : H) * sizeof(float));
    if (!s->feat_h || !s->row_h || !s->score_h) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory for the acceptance test");
        goto fail;
    }
    s->accept_threads = threads;
    s->has_accept = 1;
    return GT_OK;
fail:
    model_sampler_set_accept(s, NULL, 0, NULL);
    return rc;
}

double model_sampler_draws_per_shower(const model_sampler *s) { return s->draws_per_shower; }

/* Whether the acceptance test keeps row i of q: the shower's classifier
 * row scored on the host, against a uniform of (seed, row, draw).  The
 * last draw allowed is kept whatever it scores. */
static int accept_keeps(const model_sampler *s, const model_sample_request *q, int64_t i,
                        int thread)
{
    if (q->draw + 1 >= (uint32_t)s->accept.max_attempts)
        return 1;
    const int d = s->accept.net.d, H = s->accept.net.hidden;
    float *feat = s->feat_h + (size_t)thread * s->feats.n_features;
    float *row = s->row_h + (size_t)thread * d;
    float *scratch = s->score_h + (size_t)thread * 2 * (d > H ? d : H);
    feat_compute(&s->feats, q->showers + (size_t)i * s->geo.n_voxels, q->e_inc[i], feat);
    feat_classifier_row(&s->feats, feat, q->e_inc[i], row);
    double z = model_accept_logit(&s->accept, row, scratch);
    uint32_t w[4];
    nn_rng_block(q->seed, draw_stream(ACCEPT_STREAM, q->draw), (uint64_t)(q->row0 + i), w);
    return (double)w[0] * (1.0 / 4294967296.0) < model_accept_keep_probability(&s->accept, z);
}

/* Under an acceptance test: every row drawn once, then the rows not kept
 * drawn again, as requests of their own (runs of consecutive rows, the
 * next draw), until every row is kept.  The showers land in the caller's
 * buffers, each row's at its place. */
static int accept_run(model_sampler *s, model_sample_request *reqs, int n_reqs, int steps,
                      double *scored, gt_error *err)
{
    int64_t total = 0;
    for (int r = 0; r < n_reqs; r++)
        total += reqs[r].n > 0 ? reqs[r].n : 0;
    /* a round's requests: the caller's, then at most one run per row */
    size_t cap = (size_t)(total > n_reqs ? total : n_reqs) + 1;
    uint8_t *keep = malloc((size_t)total + 1);
    model_sample_request *cur = malloc(cap * sizeof *cur), *next = malloc(cap * sizeof *next);
    if (!keep || !cur || !next) {
        free(keep);
        free(cur);
        free(next);
        return gt_error_set(err, GT_ENOMEM, "out of memory for the acceptance test's redraws");
    }
    memcpy(cur, reqs, (size_t)n_reqs * sizeof *cur);
    int n_cur = n_reqs, rc = sampler_run(s, cur, n_cur, steps, err);
    while (rc == GT_OK && n_cur > 0) {
        /* every row of cur scored: rows are independent, so in parallel */
        int64_t at = 0;
        for (int r = 0; r < n_cur; r++) {
            const model_sample_request *q = &cur[r];
            const int64_t n = q->n > 0 ? q->n : 0;
#pragma omp parallel for schedule(static) num_threads(s->accept_threads)
            for (int64_t i = 0; i < n; i++) {
                int thread = 0;
#ifdef _OPENMP
                thread = omp_get_thread_num();
#endif
                keep[at + i] = (uint8_t)accept_keeps(s, q, i, thread);
            }
            at += n;
        }
        *scored += (double)at;
        int n_next = 0;
        at = 0;
        for (int r = 0; r < n_cur; r++) {
            const model_sample_request *q = &cur[r];
            for (int64_t i = 0; i < q->n;) {
                if (keep[at + i]) {
                    i++;
                    continue;
                }
                int64_t j = i + 1;
                while (j < q->n && !keep[at + j])
                    j++;
                next[n_next++] = (model_sample_request){
                    q->e_inc + i,
                    j - i,
                    q->seed,
                    q->row0 + i,
                    q->showers + (size_t)i * s->geo.n_voxels,
                    q->e_dep ? q->e_dep + i : NULL,
                    q->draw + 1,
                };
                i = j;
            }
            at += q->n > 0 ? q->n : 0;
        }
        if (n_next == 0)
            break;
        model_sample_request *t = cur;
        cur = next;
        next = t;
        n_cur = n_next;
        rc = sampler_run(s, cur, n_cur, steps, err);
    }
    free(keep);
    free(cur);
    free(next);
    return rc;
}

int model_sampler_run(model_sampler *s, model_sample_request *reqs, int n_reqs, int steps,
                      gt_error *err)
{
    s->evals_sum = 0;
    s->flops_sum = 0;
    s->evals_rows = 0;
    s->decode_s = 0;
    s->device_s = 0;
    s->graph_replays = 0;
    double scored = 0.0;
    int rc = s->has_accept ? accept_run(s, reqs, n_reqs, steps, &scored, err)
                           : sampler_run(s, reqs, n_reqs, steps, err);
    int64_t showers = 0;
    for (int r = 0; r < n_reqs; r++)
        showers += reqs[r].n > 0 ? reqs[r].n : 0;
    if (rc == GT_OK && showers > 0) {
        /* per shower kept: every draw's networks, and the test's scoring
         * (a multiply-add per weight) of every draw it judged */
        s->evals_per_shower = s->evals_sum / (double)showers;
        s->flops_per_shower =
            (s->flops_sum + scored * 2.0 * (double)s->accept.net.n_weights) / (double)showers;
        s->draws_per_shower = (double)s->evals_rows / (double)showers;
    }
    return rc;
}

static int sampler_run(model_sampler *s, model_sample_request *reqs, int n_reqs, int steps,
                       gt_error *err)
{
    if (steps <= 0)
        steps = s->cfg.sample_steps;
    if (steps > 10000)
        return gt_error_set(err, GT_EINVAL, "sampler steps %d out of range [1, 10000]", steps);
    for (int r = 0; r < n_reqs; r++) {
        if (reqs[r].n < 0 || (reqs[r].n > 0 && (!reqs[r].e_inc || !reqs[r].showers)))
            return gt_error_set(err, GT_EINVAL, "request %d: bad count or buffers", r);
        for (int64_t i = 0; i < reqs[r].n; i++) {
            float e = reqs[r].e_inc[i];
            if (!(e > 0) || !isfinite(e))
                return gt_error_set(err, GT_EINVAL,
                                    "request %d: incident energy %lld is %g; must be a "
                                    "positive finite number of MeV",
                                    r, (long long)i, (double)e);
        }
    }
    piece p[256];
    int np = 0, used = 0;
    for (int r = 0; r < n_reqs; r++) {
        int64_t done = 0;
        while (done < reqs[r].n) {
            int room = s->max_batch - used;
            int64_t left = reqs[r].n - done;
            int take = left <= room ? (int)left : room;
            if (take <= 0 || np == (int)(sizeof p / sizeof p[0])) {
                int rc = run_batch(s, reqs, p, np, used, steps, err);
                if (rc)
                    return rc;
                np = used = 0;
                continue;
            }
            p[np++] = (piece){r, done, take, used};
            used += take;
            done += take;
        }
    }
    if (np)
        return run_batch(s, reqs, p, np, used, steps, err);
    return GT_OK;
}
