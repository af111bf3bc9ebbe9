/* nn_trunk.c: expert and routed trunks: configuration, parameters, the
 * activation arena, the packed snapshot, and the public forward / backward,
 * which assemble the input and hand it to nn_trunk_expert.c or
 * nn_trunk_routed.c. */
#include "nn_trunk.h"
#include "nn_trunk_expert.h"
#include "nn_trunk_internal.h"
#include "nn_trunk_routed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_rng.h"

/* ------------------------------------------------------------------------ */
/* configuration                                                            */
/* ------------------------------------------------------------------------ */

void nn_trunk_config_default(nn_trunk_config *c)
{
    /* grouped as nn_trunk.h tells the baseline; the members not named are
     * 0: no skip, no block conditions */
    *c = (nn_trunk_config){
        .kind = NN_TRUNK_EXPERT, .in_dim = 6480, .out_dim = 6480,
        .cond_dim = 2, .emb_dim = 32, .emb_scale = 1000.0f, .emb_max_period = 10000.0f,
        .hidden = 512, .blocks = 6, .precision = NN_F32, .ln_eps = 1e-5f,
        /* routed */
        .n_experts = 4, .top_k = 2, .balance_coef = 0.01f, .entropy_coef = 0.0f,
    };
}

int nn_trunk_config_check(const nn_trunk_config *c, gt_error *err)
{
    if (!c)
        return gt_error_set(err, GT_EINVAL, "trunk: NULL config");
    if (c->kind != NN_TRUNK_EXPERT && c->kind != NN_TRUNK_ROUTED)
        return gt_error_set(err, GT_EINVAL, "trunk: unknown kind %d", (int)c->kind);
    if (c->skip != NN_SKIP_NONE && c->skip != NN_SKIP_GATED)
        return gt_error_set(err, GT_EINVAL, "trunk: unknown skip %d", (int)c->skip);
    if (c->skip == NN_SKIP_GATED && (c->cond_dim < 1 || c->in_dim < c->out_dim))
        return gt_error_set(err, GT_EINVAL, "trunk: the gated skip needs conditions and "
                                            "in_dim >= out_dim (got cond_dim %d, in_dim %d, "
                                            "out_dim %d)", c->cond_dim, c->in_dim, c->out_dim);
    if (c->in_dim < 0 || c->cond_dim < 0 || c->in_dim + c->cond_dim < 1)
        return gt_error_set(err, GT_EINVAL, "trunk: in_dim %d and cond_dim %d (need >= 0, "
                                            "at least one input)", c->in_dim, c->cond_dim);
    if (c->cond_dim > 0 && (c->emb_dim <= 0 || c->emb_dim % 2))
        return gt_error_set(err, GT_EINVAL, "trunk: emb_dim must be positive and even, got %d",
                            c->emb_dim);
    if (c->cond_dim > 0 && (!isfinite(c->emb_scale) || !(c->emb_max_period > 1.0f)))
        return gt_error_set(err, GT_EINVAL, "trunk: bad embedding scale %g / period %g",
                            c->emb_scale, c->emb_max_period);
    if (c->hidden < 1 || c->blocks < 0 || c->out_dim < 1)
        return gt_error_set(err, GT_EINVAL, "trunk: hidden %d, blocks %d, out_dim %d invalid",
                            c->hidden, c->blocks, c->out_dim);
    if (c->hidden > (1 << 20) || c->in_dim > (1 << 24) || c->out_dim > (1 << 24) ||
        c->blocks > 1024)
        return gt_error_set(err, GT_EINVAL, "trunk: dimensions too large");
    if (c->precision != NN_F32 && c->precision != NN_BF16)
        return gt_error_set(err, GT_EINVAL, "trunk: unknown precision %d", (int)c->precision);
    if (!(c->ln_eps > 0.0f))
        return gt_error_set(err, GT_EINVAL, "trunk: ln_eps must be positive");
    if (c->block_cond < 0 || c->block_cond > c->cond_dim)
        return gt_error_set(err, GT_EINVAL, "trunk: block_cond %d outside 0..cond_dim (%d)",
                            c->block_cond, c->cond_dim);
    if (c->kind == NN_TRUNK_ROUTED) {
        if (c->n_experts < 2 || c->n_experts > NN_TRUNK_MAX_EXPERTS)
            return gt_error_set(err, GT_EINVAL, "trunk: n_experts %d outside 2..%d",
                                c->n_experts, NN_TRUNK_MAX_EXPERTS);
        if (c->top_k < 1 || c->top_k > c->n_experts)
            return gt_error_set(err, GT_EINVAL, "trunk: top_k %d outside 1..%d", c->top_k,
                                c->n_experts);
        if (!isfinite(c->balance_coef) || !isfinite(c->entropy_coef))
            return gt_error_set(err, GT_EINVAL, "trunk: router coefficients not finite");
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* parameters                                                               */
/* ------------------------------------------------------------------------ */

/* which: 1 declares the matrices (weight decay), 0 the vectors, so the two
 * groups are contiguous and AdamW does two passes over the buffer. */
static int declare_expert(nn_trunk *t, expert *e, const char *pre, int which, gt_error *err)
{
    nn_params *p = &t->params;
    const nn_trunk_config *c = &t->cfg;
    char nm[NN_PARAM_NAME_MAX];
    int H = c->hidden;
#define DECL(field, suffix, r, co)                                                  \
    do {                                                                            \
        snprintf(nm, sizeof nm, "%s%s", pre, suffix);                               \
        GT_TRY(nn_params_add(p, nm, r, co, which, &(field), err));                     \
    } while (0)
    if (which) {
        DECL(e->w_in, "in.w", H, t->D);
        for (int l = 0; l < c->blocks; l++) {
            char s1[32], s2[32];
            snprintf(s1, sizeof s1, "blk%d.fc1.w", l);
            snprintf(s2, sizeof s2, "blk%d.fc2.w", l);
            DECL(e->blk[l].w1, s1, H, H);
            DECL(e->blk[l].w2, s2, H, H);
        }
        DECL(e->w_out, "out.w", c->out_dim, H);
    } else {
        DECL(e->b_in, "in.b", 1, H);
        for (int l = 0; l < c->blocks; l++) {
            char s[6][32];
            snprintf(s[0], 32, "blk%d.ln.g", l);
            snprintf(s[1], 32, "blk%d.ln.b", l);
            snprintf(s[2], 32, "blk%d.fc1.b", l);
            snprintf(s[3], 32, "blk%d.fc2.b", l);
            DECL(e->blk[l].ln_g, s[0], 1, H);
            DECL(e->blk[l].ln_b, s[1], 1, H);
            DECL(e->blk[l].b1, s[2], 1, H);
            DECL(e->blk[l].b2, s[3], 1, H);
        }
        DECL(e->lnf_g, "out.ln.g", 1, H);
        DECL(e->lnf_b, "out.ln.b", 1, H);
        DECL(e->b_out, "out.b", 1, c->out_dim);
    }
#undef DECL
    return GT_OK;
}

static int declare_all(nn_trunk *t, gt_error *err)
{
    for (int which = 1; which >= 0; which--) {
        if (t->cfg.kind == NN_TRUNK_ROUTED) {
            GT_TRY(nn_params_add(&t->params, which ? "gate.w" : "gate.b", which ? t->cfg.n_experts : 1,
                              which ? t->D : t->cfg.n_experts, which,
                              which ? &t->w_gate : &t->b_gate, err));
            for (int i = 0; i < t->n_ex; i++) {
                char pre[16];
                snprintf(pre, sizeof pre, "e%d.", i);
                GT_TRY(declare_expert(t, &t->ex[i], pre, which, err));
            }
        } else {
            GT_TRY(declare_expert(t, &t->ex[0], "", which, err));
        }
        /* last in each group: the other weights draw the same numbers as
         * in a trunk without the skip */
        if (t->cfg.skip == NN_SKIP_GATED)
            GT_TRY(nn_params_add(&t->params, which ? "skip.w" : "skip.b", which ? t->cfg.out_dim : 1,
                                 which ? t->cfg.cond_dim * t->cfg.emb_dim : t->cfg.out_dim, which,
                                 which ? &t->w_skip : &t->b_skip, err));
        /* after them, the blocks' condition weights (zero, drawing nothing) */
        for (int i = 0; which && t->cfg.block_cond && i < t->n_ex; i++)
            for (int l = 0; l < t->cfg.blocks; l++) {
                char nm[NN_PARAM_NAME_MAX];
                if (t->cfg.kind == NN_TRUNK_ROUTED)
                    snprintf(nm, sizeof nm, "e%d.blk%d.cond.w", i, l);
                else
                    snprintf(nm, sizeof nm, "blk%d.cond.w", l);
                GT_TRY(nn_params_add(&t->params, nm, t->cfg.hidden,
                                     t->cfg.block_cond * t->cfg.emb_dim, 1,
                                     &t->ex[i].blk[l].wc, err));
            }
    }
    return GT_OK;
}

int nn_trunk_create(nn_backend *b, const nn_trunk_config *cfg, nn_trunk **out, gt_error *err)
{
    if (!out)
        return gt_error_set(err, GT_EINVAL, "trunk: NULL out");
    *out = NULL;
    if (!b)
        return gt_error_set(err, GT_EINVAL, "trunk: NULL backend");
    GT_TRY(nn_trunk_config_check(cfg, err));
    if (cfg->precision == NN_BF16 && !b->has_bf16 && !b->bf16_emulated)
        return gt_error_set(err, GT_EUNSUPPORTED,
                            "trunk: precision bf16 requested but backend %s cannot do bf16",
                            b->name);
    nn_trunk *t = calloc(1, sizeof *t);
    if (!t)
        return gt_error_set(err, GT_ENOMEM, "trunk: out of memory");
    t->cfg = *cfg;
    t->b = b;
    t->check_input = 1;
    t->D = cfg->in_dim + cfg->cond_dim * cfg->emb_dim;
    t->n_ex = cfg->kind == NN_TRUNK_ROUTED ? cfg->n_experts : 1;
    t->w_gate = t->b_gate = -1;
    t->w_skip = t->b_skip = -1;
    t->compute = cfg->precision;
    nn_params_init(&t->params, b);
    int rc = GT_OK;
    for (int i = 0; i < t->n_ex && !rc; i++) {
        t->ex[i].blk = calloc((size_t)(cfg->blocks ? cfg->blocks : 1), sizeof(ex_block));
        if (!t->ex[i].blk)
            rc = gt_error_set(err, GT_ENOMEM, "trunk: out of memory");
        for (int l = 0; !rc && l < cfg->blocks; l++)
            t->ex[i].blk[l].wc = -1;
    }
    if (!rc)
        rc = declare_all(t, err);
    if (!rc)
        rc = nn_params_alloc(&t->params, cfg->precision == NN_BF16, err);
    if (rc) {
        nn_trunk_destroy(t);
        return rc;
    }
    *out = t;
    return GT_OK;
}

static void free_arena(nn_trunk *t)
{
    nn_free(t->b, t->arena);
    nn_free(t->b, t->dx_mem);
    nn_free(t->b, t->x32_mem);
    t->arena = t->dx_mem = t->x32_mem = NULL;
    t->dxin = t->dxe = NULL;
    if (t->x_direct)
        t->ex[0].x = t->xin = NULL;
    t->arena_bytes = 0;
    t->batch = 0;
    free(t->h_idx);
    free(t->h_rows);
    free(t->h_pos);
    t->h_idx = t->h_rows = t->h_pos = NULL;
}

static void unpack_all(nn_trunk *t)
{
    if (t->pk)
        for (int i = 0; i < t->params.n_views; i++)
            nn_packed_free(t->b, &t->pk[i]);
    free(t->pk);
    t->pk = NULL;
    t->packed = 0;
}

void nn_trunk_destroy(nn_trunk *t)
{
    if (!t)
        return;
    unpack_all(t);
    free_arena(t);
    nn_params_free(&t->params);
    for (int i = 0; i < NN_TRUNK_MAX_EXPERTS; i++)
        free(t->ex[i].blk);
    free(t);
}

nn_params *nn_trunk_params(nn_trunk *t)
{
    return &t->params;
}

const nn_trunk_config *nn_trunk_get_config(const nn_trunk *t)
{
    return &t->cfg;
}

double nn_trunk_forward_flops(const nn_trunk *t, int rows)
{
    const nn_trunk_config *c = &t->cfg;
    double H = c->hidden;
    double per = 2.0 * ((double)t->D * H + 2.0 * c->blocks * H * H + H * c->out_dim +
                        (double)c->blocks * H * c->block_cond * c->emb_dim);
    if (c->kind == NN_TRUNK_ROUTED)
        per = per * c->top_k + 2.0 * t->D * c->n_experts;
    if (c->skip == NN_SKIP_GATED)
        per += 2.0 * c->cond_dim * c->emb_dim * c->out_dim;
    return per * rows;
}

static int is_block_cond(const nn_trunk *t, int view)
{
    for (int i = 0; t->cfg.block_cond && i < t->n_ex; i++)
        for (int l = 0; l < t->cfg.blocks; l++)
            if (t->ex[i].blk[l].wc == view)
                return 1;
    return 0;
}

int nn_trunk_init(nn_trunk *t, uint64_t seed, float out_scale, gt_error *err)
{
    if (!t)
        return gt_error_set(err, GT_EINVAL, "trunk init: NULL trunk");
    if (!isfinite(out_scale))
        return gt_error_set(err, GT_EINVAL, "trunk init: out_scale not finite");
    nn_params *p = &t->params;
    nn_rng rng = nn_rng_make(seed, 0);
    GT_TRY(nn_memset(t->b, p->value, 0, p->count * sizeof(float), err));
    for (int i = 0; i < p->n_views; i++) {
        const nn_param_view *v = &p->views[i];
        size_t n = (size_t)v->rows * v->cols;
        const char *nm = v->name;
        size_t L = strlen(nm);
        int is_gamma = L >= 5 && !strcmp(nm + L - 5, ".ln.g");
        if (i == t->w_skip || is_block_cond(t, i))
            continue;   /* zero: the trunk starts as if it had neither */
        if (v->decay) {
            float sd = 1.0f / sqrtf((float)v->cols);
            if (L >= 5 && !strcmp(nm + L - 5, "out.w"))
                sd *= out_scale;
            GT_TRY(nn_rand_fill(t->b, p->value + v->offset, n, NN_DIST_NORMAL, 0.0f, sd, rng.seed,
                             rng.stream, nn_rng_take(&rng, n), err));
        } else if (is_gamma) {
            /* gamma = 1: uniform on [1, 1) is exactly 1 */
            GT_TRY(nn_rand_fill(t->b, p->value + v->offset, n, NN_DIST_UNIFORM, 1.0f, 1.0f, 0, 0,
                             0, err));
        }
    }
    return nn_params_sync_bf16(p, err);
}

/* ------------------------------------------------------------------------ */
/* arena planning                                                           */
/* ------------------------------------------------------------------------ */

typedef struct planner {
    char *base;     /* NULL while sizing */
    size_t off;
} planner;

static void *take(planner *pl, size_t bytes)
{
    size_t at = (pl->off + 63) & ~(size_t)63;
    pl->off = at + bytes;
    return pl->base ? pl->base + at : NULL;
}

#define TAKE_F(pl, n) ((float *)take(pl, (size_t)(n) * sizeof(float)))
#define TAKE_H(pl, n) ((uint16_t *)take(pl, (size_t)(n) * sizeof(uint16_t)))
#define TAKE_I(pl, n) ((int32_t *)take(pl, (size_t)(n) * sizeof(int32_t)))

static void plan_layout(nn_trunk *t, planner *pl, int B)
{
    const nn_trunk_config *c = &t->cfg;
    size_t H = (size_t)c->hidden, N = (size_t)c->blocks, D = (size_t)t->D, O = (size_t)c->out_dim;
    size_t Bz = (size_t)B;
    int bf = c->precision == NN_BF16;
    int routed = c->kind == NN_TRUNK_ROUTED;
    size_t slots = N ? N : 1;              /* per-block saved activations */
    size_t slots32 = bf ? 1 : slots;       /* fp32 a and s: see x_direct */
    /* the skip multiplies the fp32 input; a routed trunk gathers it */
    t->x_direct = bf && !routed && c->skip == NN_SKIP_NONE;
    for (int i = 0; i < t->n_ex; i++) {
        expert *e = &t->ex[i];
        e->x = t->x_direct ? NULL : TAKE_F(pl, Bz * D);
        e->x_bf = bf ? TAKE_H(pl, Bz * D) : NULL;
        e->h = TAKE_F(pl, (N + 1) * Bz * H);
        e->a = TAKE_F(pl, slots32 * Bz * H);
        e->a_bf = bf ? TAKE_H(pl, slots * Bz * H) : NULL;
        e->z = TAKE_F(pl, slots * Bz * H);
        e->s = TAKE_F(pl, slots32 * Bz * H);
        e->s_bf = bf ? TAKE_H(pl, slots * Bz * H) : NULL;
        e->af = TAKE_F(pl, Bz * H);
        e->af_bf = bf ? TAKE_H(pl, Bz * H) : NULL;
        e->mean = TAKE_F(pl, (N + 1) * Bz);
        e->rstd = TAKE_F(pl, (N + 1) * Bz);
        e->out = routed ? TAKE_F(pl, Bz * O) : NULL;
    }
    size_t G = H > O ? H : O;
    t->emb = TAKE_F(pl, Bz * (size_t)(c->cond_dim * c->emb_dim + 1));
    t->xin = routed ? TAKE_F(pl, Bz * D) : t->ex[0].x;
    t->dh = TAKE_F(pl, Bz * H);
    t->dtmp = TAKE_F(pl, Bz * H);
    t->da = TAKE_F(pl, Bz * H);
    t->g_bf = bf ? TAKE_H(pl, Bz * G) : NULL;
    t->scalars = TAKE_F(pl, 4);
    if (c->skip == NN_SKIP_GATED) {
        t->skip_g = TAKE_F(pl, Bz * O);
        t->skip_p = TAKE_F(pl, Bz * O);
    }
    if (routed) {
        size_t E = (size_t)c->n_experts, K = (size_t)c->top_k;
        t->de = TAKE_F(pl, Bz * O);
        t->logits = TAKE_F(pl, Bz * E);
        t->probs = TAKE_F(pl, Bz * E);
        t->dprobs = TAKE_F(pl, Bz * E);
        t->dlogits = TAKE_F(pl, Bz * E);
        t->idx = TAKE_I(pl, Bz * K);
        size_t ND = Bz * K + E * NN_ROUTE_BUCKET;   /* padded dispatch */
        t->rows_d = TAKE_I(pl, ND);
        t->pos_d = TAKE_I(pl, ND);
        t->w = TAKE_F(pl, Bz * K);
        t->dw = TAKE_F(pl, Bz * K);
        t->scale_d = TAKE_F(pl, ND);
        t->dscale_d = TAKE_F(pl, ND);
        t->frac = TAKE_F(pl, E);
    }
}

int nn_trunk_plan(nn_trunk *t, int batch, gt_error *err)
{
    if (!t)
        return gt_error_set(err, GT_EINVAL, "trunk plan: NULL trunk");
    if (batch < 1 || batch > (1 << 24))
        return gt_error_set(err, GT_EINVAL, "trunk plan: batch %d outside 1..%d", batch, 1 << 24);
    if (t->arena && t->batch == batch)
        return GT_OK;
    free_arena(t);
    planner pl = {NULL, 0};
    plan_layout(t, &pl, batch);
    void *mem = NULL;
    GT_TRY(nn_alloc(t->b, pl.off, &mem, err));
    if (t->cfg.kind == NN_TRUNK_ROUTED) {
        size_t n = (size_t)batch * (size_t)t->cfg.top_k +
                   (size_t)t->cfg.n_experts * NN_ROUTE_BUCKET;
        t->h_idx = malloc(n * sizeof(int32_t));
        t->h_rows = malloc(n * sizeof(int32_t));
        t->h_pos = malloc(n * sizeof(int32_t));
        if (!t->h_idx || !t->h_rows || !t->h_pos) {
            nn_free(t->b, mem);
            free_arena(t);
            return gt_error_set(err, GT_ENOMEM, "trunk plan: out of memory");
        }
    }
    t->arena = mem;
    t->arena_bytes = pl.off;
    t->batch = batch;
    pl.base = mem;
    pl.off = 0;
    plan_layout(t, &pl, batch);
    t->fwd_rows = 0;
    t->fwd_training = 0;
    return nn_memset(t->b, mem, 0, t->arena_bytes, err);
}

/* One buffer of the planned batch outside the arena, zeroed (see
 * nn_trunk.dx_mem and x32_mem). */
static int alloc_aside(nn_trunk *t, size_t bytes, void **mem, gt_error *err)
{
    GT_TRY(nn_alloc(t->b, bytes, mem, err));
    int rc = nn_memset(t->b, *mem, 0, bytes, err);
    if (rc) {
        nn_free(t->b, *mem);
        *mem = NULL;
    }
    return rc;
}

/* dxin (and a routed trunk's dxe), on the first backward that wants d_x. */
static int need_dx(nn_trunk *t, gt_error *err)
{
    if (t->dx_mem)
        return GT_OK;
    size_t one = ((size_t)t->batch * (size_t)t->D * sizeof(float) + 63) & ~(size_t)63;
    int routed = t->cfg.kind == NN_TRUNK_ROUTED;
    GT_TRY(alloc_aside(t, routed ? 2 * one : one, &t->dx_mem, err));
    t->dxin = (float *)t->dx_mem;
    t->dxe = routed ? (float *)((char *)t->dx_mem + one) : NULL;
    return GT_OK;
}

/* The fp32 input of an x_direct trunk, on its first fp32 forward. */
static int need_x32(nn_trunk *t, gt_error *err)
{
    if (t->x32_mem)
        return GT_OK;
    GT_TRY(alloc_aside(t, (size_t)t->batch * (size_t)t->D * sizeof(float), &t->x32_mem, err));
    t->ex[0].x = t->xin = (float *)t->x32_mem;
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* public forward / backward                                                */
/* ------------------------------------------------------------------------ */

static int check_io(nn_trunk *t, nn_tensor x, nn_tensor cond, nn_tensor out, gt_error *err)
{
    const nn_trunk_config *c = &t->cfg;
    GT_TRY(nn_tensor_check(x, "trunk forward: x", err));
    GT_TRY(nn_tensor_check(cond, "trunk forward: cond", err));
    GT_TRY(nn_tensor_check(out, "trunk forward: out", err));
    if (x.dtype != NN_F32 || cond.dtype != NN_F32 || out.dtype != NN_F32)
        return gt_error_set(err, GT_EINVAL, "trunk forward: x, cond and out must be f32 "
                                            "(got %s, %s, %s)", nn_dtype_name(x.dtype),
                            nn_dtype_name(cond.dtype), nn_dtype_name(out.dtype));
    if (x.cols != c->in_dim || cond.cols != c->cond_dim || out.cols != c->out_dim)
        return gt_error_set(err, GT_EINVAL,
                            "trunk forward: x has %d cols (want %d), cond %d (want %d), "
                            "out %d (want %d)",
                            x.cols, c->in_dim, cond.cols, c->cond_dim, out.cols, c->out_dim);
    if (x.rows != out.rows || (c->cond_dim && cond.rows != x.rows))
        return gt_error_set(err, GT_EINVAL, "trunk forward: rows differ: x %d, cond %d, out %d",
                            x.rows, cond.rows, out.rows);
    if (!t->arena)
        return gt_error_set(err, GT_EINVAL, "trunk forward: not planned (call nn_trunk_plan)");
    if (x.rows < 1 || x.rows > t->batch)
        return gt_error_set(err, GT_EINVAL, "trunk forward: %d rows, planned for 1..%d", x.rows,
                            t->batch);
    return GT_OK;
}

static int refuse_nonfinite(float ss, gt_error *err)
{
    if (!isfinite(ss))
        return gt_error_set(err, GT_EINVAL,
                            "trunk forward: input x or cond contains NaN or infinite values");
    return GT_OK;
}

/* The bf16 input of an x_direct trunk: x and embed(cond) cast into their
 * columns of x_bf, the same bits as casting the assembled fp32 input.  The
 * finiteness check sums x and the embedding apart (x row by row when the
 * caller's view has gaps between rows). */
static int assemble_input_bf16(nn_trunk *t, nn_tensor x, nn_tensor cond, gt_error *err)
{
    const nn_trunk_config *c = &t->cfg;
    int n = x.rows, nemb = c->cond_dim * c->emb_dim;
    nn_tensor xb = TH(t->ex[0].x_bf, n, t->D);
    nn_tensor emb = T(t->emb, n, nemb);
    if (c->in_dim)
        GT_TRY(nn_cast_bf16(t->b, nn_tensor_cols(xb, 0, c->in_dim), x, err));
    if (c->cond_dim) {
        GT_TRY(nn_embed_fwd(t->b, emb, cond, c->emb_dim, c->emb_scale, c->emb_max_period, err));
        GT_TRY(nn_cast_bf16(t->b, nn_tensor_cols(xb, c->in_dim, nemb), emb, err));
    }
    if (!t->check_input)
        return GT_OK;
    float ss[2] = {0.0f, 0.0f};
    GT_TRY(nn_memset(t->b, t->scalars + 2, 0, 2 * sizeof(float), err));
    if (c->cond_dim)
        GT_TRY(nn_sumsq(t->b, t->scalars + 3, emb.data, (size_t)n * nemb, err));
    if (c->in_dim && x.ld == x.cols) {
        GT_TRY(nn_sumsq(t->b, t->scalars + 2, x.data, (size_t)n * x.cols, err));
    } else if (c->in_dim) {
        for (int r = 0; r < n; r++) {
            GT_TRY(nn_sumsq(t->b, t->scalars + 2, (const float *)x.data + (size_t)r * x.ld,
                            (size_t)x.cols, err));
            GT_TRY(nn_copy_d2h(t->b, ss, t->scalars + 2, sizeof ss[0], err));
            GT_TRY(refuse_nonfinite(ss[0], err));
        }
    }
    GT_TRY(nn_copy_d2h(t->b, ss, t->scalars + 2, sizeof ss, err));
    return refuse_nonfinite(ss[0] + ss[1], err);
}

/* xin = x ++ embed(cond), then a finiteness check of the whole input: one
 * fp32 sum of squares is NaN or Inf iff some input is (or is ~1e19+). */
static int assemble_input(nn_trunk *t, nn_tensor x, nn_tensor cond, gt_error *err)
{
    const nn_trunk_config *c = &t->cfg;
    if (t->x_direct && t->compute == NN_BF16)
        return assemble_input_bf16(t, x, cond, err);
    if (t->x_direct)
        GT_TRY(need_x32(t, err));
    float *xin = t->xin;
    int n = x.rows, nemb = c->cond_dim * c->emb_dim;
    nn_tensor parts[2];
    int np = 0;
    if (c->in_dim)
        parts[np++] = x;
    if (c->cond_dim) {
        nn_tensor emb = T(t->emb, n, nemb);
        GT_TRY(nn_embed_fwd(t->b, emb, cond, c->emb_dim, c->emb_scale, c->emb_max_period, err));
        parts[np++] = emb;
    }
    GT_TRY(nn_concat(t->b, T(xin, n, t->D), parts, np, err));
    if (!t->check_input)
        return GT_OK;
    float ss = 0.0f;
    GT_TRY(nn_sumsq(t->b, t->scalars + 2, xin, (size_t)n * t->D, err));
    GT_TRY(nn_copy_d2h(t->b, &ss, t->scalars + 2, sizeof ss, err));
    return refuse_nonfinite(ss, err);
}

/* The gated skip: out += g * x[:, :O], g = emb . W_skip^T + b_skip (fp32;
 * the fixed-order layer in a packed inference forward).  g stays in
 * skip_g for the backward. */
static int skip_forward(nn_trunk *t, int n, nn_tensor out, int training, gt_error *err)
{
    const nn_trunk_config *c = &t->cfg;
    int O = c->out_dim;
    nn_tensor emb = T(t->emb, n, c->cond_dim * c->emb_dim);
    nn_tensor g = T(t->skip_g, n, O), p = T(t->skip_p, n, O);
    if (t->packed && !training)
        GT_TRY(nn_linear_fixed(t->b, g, emb, &t->pk[t->w_skip], P(t, t->b_skip), NN_ACT_NONE, 0,
                               err));
    else
        GT_TRY(nn_matmul(t->b, g, emb, 0, nn_params_value(&t->params, t->w_skip), 1,
                         P(t, t->b_skip), NN_ACT_NONE, 0, err));
    GT_TRY(nn_mul(t->b, p, g, nn_tensor_cols(T(t->xin, n, t->D), 0, O), err));
    return nn_add(t->b, out, out, p, err);
}

/* dg = d_out * x[:, :O] -> W_skip, b_skip gradients (+=); d_x[:, :O] +=
 * d_out * g when d_x is wanted (after the main backward has written it). */
static int skip_backward(nn_trunk *t, int n, nn_tensor d_out, nn_tensor d_x, gt_error *err)
{
    const nn_trunk_config *c = &t->cfg;
    int O = c->out_dim;
    nn_tensor emb = T(t->emb, n, c->cond_dim * c->emb_dim);
    nn_tensor p = T(t->skip_p, n, O);
    GT_TRY(nn_mul(t->b, p, d_out, nn_tensor_cols(T(t->xin, n, t->D), 0, O), err));
    GT_TRY(nn_matmul(t->b, WG(t, t->w_skip), p, 1, emb, 0, NULL, NN_ACT_NONE, 1, err));
    GT_TRY(nn_bias_grad(t->b, PG(t, t->b_skip), p, 1, err));
    if (!d_x.data)
        return GT_OK;
    nn_tensor dxs = nn_tensor_cols(d_x, 0, O);
    GT_TRY(nn_mul(t->b, p, d_out, T(t->skip_g, n, O), err));
    return nn_add(t->b, dxs, dxs, p, err);
}

int nn_trunk_forward(nn_trunk *t, nn_tensor x, nn_tensor cond, nn_tensor out, int training,
                     gt_error *err)
{
    if (!t)
        return gt_error_set(err, GT_EINVAL, "trunk forward: NULL trunk");
    GT_TRY(check_io(t, x, cond, out, err));
    int n = x.rows;
    if (training && t->compute != t->cfg.precision)
        return gt_error_set(err, GT_EINVAL,
                            "trunk forward: a bf16 trunk trains in bf16 (fp32 precision on it "
                            "is for evaluation; its arena keeps one fp32 slot per activation)");
    t->fwd_rows = 0;
    GT_TRY(assemble_input(t, x, cond, err));
    if (t->cfg.kind == NN_TRUNK_EXPERT)
        GT_TRY(nn_expert_forward(t, &t->ex[0], n, out, training, err));
    else
        GT_TRY(nn_routed_forward(t, n, out, training, err));
    if (t->cfg.skip == NN_SKIP_GATED)
        GT_TRY(skip_forward(t, n, out, training, err));
    t->fwd_rows = n;
    t->fwd_training = training;
    return GT_OK;
}

/* A gradient backward is handed (d_out, d_x): a valid f32 rows x cols view. */
static int need_gradient(nn_tensor g, const char *name, int rows, int cols, gt_error *err)
{
    char what[64];
    snprintf(what, sizeof what, "trunk backward: %s", name);
    GT_TRY(nn_tensor_check(g, what, err));
    if (g.dtype != NN_F32 || g.rows != rows || g.cols != cols)
        return gt_error_set(err, GT_EINVAL, "%s is %s %dx%d, expected f32 %dx%d", what,
                            nn_dtype_name(g.dtype), g.rows, g.cols, rows, cols);
    return GT_OK;
}

int nn_trunk_backward(nn_trunk *t, nn_tensor d_out, nn_tensor d_x, gt_error *err)
{
    if (!t)
        return gt_error_set(err, GT_EINVAL, "trunk backward: NULL trunk");
    if (!t->fwd_rows || !t->fwd_training)
        return gt_error_set(err, GT_EINVAL,
                            "trunk backward: no training forward to differentiate");
    int n = t->fwd_rows;
    GT_TRY(need_gradient(d_out, "d_out", n, t->cfg.out_dim, err));
    int want_dx = d_x.data != NULL;
    if (want_dx) {
        GT_TRY(need_gradient(d_x, "d_x", n, t->cfg.in_dim, err));
        GT_TRY(need_dx(t, err));
    }
    if (t->cfg.kind == NN_TRUNK_EXPERT)
        GT_TRY(nn_expert_backward(t, &t->ex[0], d_out, want_dx ? t->dxin : NULL, err));
    else
        GT_TRY(nn_routed_backward(t, d_out, want_dx, err));
    if (want_dx && t->cfg.in_dim) {
        nn_tensor parts[2] = {d_x, T(NULL, n, t->cfg.cond_dim * t->cfg.emb_dim)};
        GT_TRY(nn_split(t->b, parts, t->cfg.cond_dim ? 2 : 1, T(t->dxin, n, t->D), 0, err));
    }
    if (t->cfg.skip == NN_SKIP_GATED)
        GT_TRY(skip_backward(t, n, d_out, want_dx ? d_x : T(NULL, n, t->cfg.in_dim), err));
    return GT_OK;
}

int nn_trunk_set_precision(nn_trunk *t, nn_dtype precision, gt_error *err)
{
    if (!t)
        return gt_error_set(err, GT_EINVAL, "trunk set precision: NULL trunk");
    if (precision != NN_F32 && precision != NN_BF16)
        return gt_error_set(err, GT_EINVAL, "trunk set precision: unknown precision %d",
                            (int)precision);
    if (precision == NN_BF16 && t->cfg.precision != NN_BF16)
        return gt_error_set(err, GT_EINVAL,
                            "trunk set precision: bf16 needs a trunk created with bf16 "
                            "precision (it has no bf16 weights or buffers)");
    if (t->packed && precision != t->compute)
        unpack_all(t);   /* the snapshot holds the other dtype */
    t->compute = precision;
    /* a backward must follow a forward of the same precision */
    t->fwd_rows = 0;
    t->fwd_training = 0;
    return GT_OK;
}

nn_dtype nn_trunk_get_precision(const nn_trunk *t)
{
    return t->compute;
}

int nn_trunk_router_stats(const nn_trunk *t, nn_router_stats *out, gt_error *err)
{
    if (!t || !out)
        return gt_error_set(err, GT_EINVAL, "router stats: NULL argument");
    if (t->cfg.kind != NN_TRUNK_ROUTED)
        return gt_error_set(err, GT_EINVAL, "router stats: not a routed trunk");
    if (!t->fwd_rows)
        return gt_error_set(err, GT_EINVAL, "router stats: no forward yet");
    *out = t->stats;
    return GT_OK;
}

void nn_trunk_set_input_check(nn_trunk *t, int on)
{
    if (t)
        t->check_input = on != 0;
}

int nn_trunk_pack(nn_trunk *t, gt_error *err)
{
    if (!t)
        return gt_error_set(err, GT_EINVAL, "trunk pack: NULL trunk");
    unpack_all(t);
    nn_params *p = &t->params;
    t->pk = calloc((size_t)p->n_views, sizeof *t->pk);
    if (!t->pk)
        return gt_error_set(err, GT_ENOMEM, "trunk pack: out of memory");
    for (int i = 0; i < p->n_views; i++) {
        if (!p->views[i].decay)
            continue;   /* biases and LayerNorm vectors are used as they are */
        /* the gate and the skip are fp32 whatever the precision (the
         * brief's fp32 guard; the skip multiplies the exact input) */
        nn_tensor w = i == t->w_gate || i == t->w_skip ? nn_params_value(p, i) : W(t, i);
        int rc = nn_pack_weight(t->b, w, &t->pk[i], err);
        if (rc) {
            unpack_all(t);
            return gt_error_wrap(err, "trunk pack: %s", p->views[i].name);
        }
    }
    t->packed = 1;
    return GT_OK;
}

void nn_trunk_unpack(nn_trunk *t)
{
    if (t)
        unpack_all(t);
}

int nn_trunk_is_packed(const nn_trunk *t)
{
    return t && t->packed;
}
