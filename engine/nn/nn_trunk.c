/* nn_trunk.c: expert and routed trunks, forward and hand-written backward.
 *
 * Layout of the code: configuration, parameter declaration, arena planning,
 * the expert trunk (forward, backward) on an already assembled input
 * xin = x ++ embed(cond), then the public entry points that assemble xin
 * and, for a routed trunk, do the gating and dispatch. */
#include "nn_trunk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_rng.h"

#define TRY(x)                                                                 \
    do {                                                                       \
        int rc_ = (x);                                                         \
        if (rc_)                                                               \
            return rc_;                                                        \
    } while (0)

/* A routed expert runs on its rows padded up to a multiple of this (at
 * most the planned batch), so the matmul shapes an expert sees come from a
 * small set and the backend's per-shape plans (oneDNN primitives, cuBLASLt
 * heuristics) are all made during warm-up.  Padding rows repeat a real row
 * with gate weight 0: their gradient is exactly zero. */
#define NN_ROUTE_BUCKET 32

/* ------------------------------------------------------------------------ */
/* configuration                                                            */
/* ------------------------------------------------------------------------ */

void nn_trunk_config_default(nn_trunk_config *c)
{
    memset(c, 0, sizeof *c);
    c->kind = NN_TRUNK_EXPERT;
    c->in_dim = 6480;
    c->cond_dim = 2;
    c->emb_dim = 32;
    c->emb_scale = 1000.0f;
    c->emb_max_period = 10000.0f;
    c->hidden = 512;
    c->blocks = 6;
    c->out_dim = 6480;
    c->n_experts = 4;
    c->top_k = 2;
    c->balance_coef = 0.01f;
    c->entropy_coef = 0.0f;
    c->precision = NN_F32;
    c->ln_eps = 1e-5f;
}

int nn_trunk_config_check(const nn_trunk_config *c, gt_error *err)
{
    if (!c)
        return gt_error_set(err, GT_EINVAL, "trunk: NULL config");
    if (c->kind != NN_TRUNK_EXPERT && c->kind != NN_TRUNK_ROUTED)
        return gt_error_set(err, GT_EINVAL, "trunk: unknown kind %d", (int)c->kind);
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
/* state                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct ex_block {
    int ln_g, ln_b, w1, b1, w2, b2;   /* view indices */
} ex_block;

/* One expert trunk: its views and its share of the arena. */
typedef struct expert {
    int w_in, b_in, lnf_g, lnf_b, w_out, b_out;
    ex_block *blk;
    /* arena (planned batch B; N blocks; H hidden; D input; O output) */
    float *x;            /* B x D   input rows (gathered for a routed expert) */
    uint16_t *x_bf;      /* B x D   bf16 copy (bf16 precision) */
    float *h;            /* (N+1) x B x H residual stream */
    float *a;            /* N x B x H LayerNorm outputs */
    uint16_t *a_bf;      /* N x B x H */
    float *z;            /* N x B x H pre-activations */
    float *s;            /* N x B x H SiLU outputs */
    uint16_t *s_bf;      /* N x B x H */
    float *af;           /* B x H final LayerNorm output */
    uint16_t *af_bf;
    float *mean, *rstd;  /* (N+1) x B */
    float *out;          /* B x O: unscaled output (routed experts) */
    int rows;            /* rows of the last forward */
} expert;

struct nn_trunk {
    nn_trunk_config cfg;
    nn_backend *b;
    int check_input;     /* 1: forward checks its input is finite (a sync) */
    nn_params params;
    int D;               /* in_dim + cond_dim * emb_dim */
    int n_ex;            /* 1 or n_experts */
    expert ex[NN_TRUNK_MAX_EXPERTS];
    int w_gate, b_gate;
    /* arena */
    void *arena;
    size_t arena_bytes;
    int batch;           /* planned rows */
    float *emb;          /* B x cond_dim*emb_dim */
    float *xin;          /* B x D (routed; the expert kind uses ex[0].x) */
    float *dh, *dtmp, *da;     /* B x H gradient scratch */
    uint16_t *g_bf;      /* B x max(H, O) bf16 copy of a gradient */
    float *dxin;         /* B x D */
    float *dxe;          /* B x D (routed: an expert's dxin) */
    float *de;           /* B x O (routed: gathered, scaled d_out) */
    float *logits, *probs, *dprobs, *dlogits;   /* B x E */
    int32_t *idx;                               /* B*k, slot order */
    float *w, *dw;                              /* B*k, slot order */
    int32_t *rows_d, *pos_d;                    /* dispatch order, padded */
    float *scale_d, *dscale_d;                  /* dispatch order, padded */
    float *frac;         /* E */
    float *scalars;      /* 4: balance, entropy, sumsq */
    /* host mirrors (planned with the arena) */
    int32_t *h_idx, *h_rows, *h_pos;
    float h_frac[NN_TRUNK_MAX_EXPERTS];
    int off[NN_TRUNK_MAX_EXPERTS + 1];   /* segment starts in dispatch order */
    int cnt[NN_TRUNK_MAX_EXPERTS];       /* real rows per expert */
    /* last forward */
    int fwd_rows, fwd_training;
    nn_router_stats stats;
    nn_dtype compute;    /* matmul input dtype now (nn_trunk_set_precision) */
    /* nn_trunk_pack: every linear weight packed for the fixed-order layer,
     * indexed by parameter view (empty for vectors); forwards with
     * training = 0 use them while `packed` is set */
    nn_packed *pk;
    int packed;
};

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
        TRY(nn_params_add(p, nm, r, co, which, &(field), err));                     \
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
            TRY(nn_params_add(&t->params, which ? "gate.w" : "gate.b", which ? t->cfg.n_experts : 1,
                              which ? t->D : t->cfg.n_experts, which,
                              which ? &t->w_gate : &t->b_gate, err));
            for (int i = 0; i < t->n_ex; i++) {
                char pre[16];
                snprintf(pre, sizeof pre, "e%d.", i);
                TRY(declare_expert(t, &t->ex[i], pre, which, err));
            }
        } else {
            TRY(declare_expert(t, &t->ex[0], "", which, err));
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
    TRY(nn_trunk_config_check(cfg, err));
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
    t->compute = cfg->precision;
    nn_params_init(&t->params, b);
    int rc = GT_OK;
    for (int i = 0; i < t->n_ex && !rc; i++) {
        t->ex[i].blk = calloc((size_t)(cfg->blocks ? cfg->blocks : 1), sizeof(ex_block));
        if (!t->ex[i].blk)
            rc = gt_error_set(err, GT_ENOMEM, "trunk: out of memory");
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
    t->arena = NULL;
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
    double per = 2.0 * ((double)t->D * H + 2.0 * c->blocks * H * H + H * c->out_dim);
    if (c->kind == NN_TRUNK_ROUTED)
        per = per * c->top_k + 2.0 * t->D * c->n_experts;
    return per * rows;
}

int nn_trunk_init(nn_trunk *t, uint64_t seed, float out_scale, gt_error *err)
{
    if (!t)
        return gt_error_set(err, GT_EINVAL, "trunk init: NULL trunk");
    if (!isfinite(out_scale))
        return gt_error_set(err, GT_EINVAL, "trunk init: out_scale not finite");
    nn_params *p = &t->params;
    nn_rng rng = nn_rng_make(seed, 0);
    TRY(nn_memset(t->b, p->value, 0, p->count * sizeof(float), err));
    for (int i = 0; i < p->n_views; i++) {
        const nn_param_view *v = &p->views[i];
        size_t n = (size_t)v->rows * v->cols;
        const char *nm = v->name;
        size_t L = strlen(nm);
        int is_gamma = L >= 5 && !strcmp(nm + L - 5, ".ln.g");
        if (v->decay) {
            float sd = 1.0f / sqrtf((float)v->cols);
            if (L >= 5 && !strcmp(nm + L - 5, "out.w"))
                sd *= out_scale;
            TRY(nn_rand_fill(t->b, p->value + v->offset, n, NN_DIST_NORMAL, 0.0f, sd, rng.seed,
                             rng.stream, nn_rng_take(&rng, n), err));
        } else if (is_gamma) {
            /* gamma = 1: uniform on [1, 1) is exactly 1 */
            TRY(nn_rand_fill(t->b, p->value + v->offset, n, NN_DIST_UNIFORM, 1.0f, 1.0f, 0, 0,
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
    for (int i = 0; i < t->n_ex; i++) {
        expert *e = &t->ex[i];
        e->x = TAKE_F(pl, Bz * D);
        e->x_bf = bf ? TAKE_H(pl, Bz * D) : NULL;
        e->h = TAKE_F(pl, (N + 1) * Bz * H);
        e->a = TAKE_F(pl, (N ? N : 1) * Bz * H);
        e->a_bf = bf ? TAKE_H(pl, (N ? N : 1) * Bz * H) : NULL;
        e->z = TAKE_F(pl, (N ? N : 1) * Bz * H);
        e->s = TAKE_F(pl, (N ? N : 1) * Bz * H);
        e->s_bf = bf ? TAKE_H(pl, (N ? N : 1) * Bz * H) : NULL;
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
    t->dxin = TAKE_F(pl, Bz * D);
    t->scalars = TAKE_F(pl, 4);
    if (routed) {
        size_t E = (size_t)c->n_experts, K = (size_t)c->top_k;
        t->dxe = TAKE_F(pl, Bz * D);
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
    TRY(nn_alloc(t->b, pl.off, &mem, err));
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

/* ------------------------------------------------------------------------ */
/* the expert trunk on an assembled input                                   */
/* ------------------------------------------------------------------------ */

static nn_tensor T(float *p, int rows, int cols)
{
    return nn_f32(p, rows, cols);
}

static nn_tensor TH(uint16_t *p, int rows, int cols)
{
    return nn_tensor_make(p, NN_BF16, rows, cols);
}

/* The matmul operand for an fp32 activation: itself, or its bf16 copy
 * (written here) under bf16 precision. */
static int operand(nn_trunk *t, nn_tensor f, uint16_t *bf, nn_tensor *out, gt_error *err)
{
    if (!bf || t->compute != NN_BF16) {
        *out = f;
        return GT_OK;
    }
    nn_tensor h = TH(bf, f.rows, f.cols);
    TRY(nn_cast_bf16(t->b, h, f, err));
    *out = h;
    return GT_OK;
}

static float *P(nn_trunk *t, int view)
{
    return t->params.value + t->params.views[view].offset;
}

static float *PG(nn_trunk *t, int view)
{
    return t->params.grad + t->params.views[view].offset;
}

static nn_tensor W(nn_trunk *t, int view)
{
    if (t->compute == NN_BF16)
        return nn_params_bf16(&t->params, view);
    return nn_params_value(&t->params, view);
}

static nn_tensor WG(nn_trunk *t, int view)
{
    return nn_params_grad(&t->params, view);
}

/* out (+)= act(X . W[view]^T + bias): the fixed-order layer from the packed
 * snapshot when the trunk is packed and this is not a training forward,
 * else the backend's matmul. */
static int linear(nn_trunk *t, int training, nn_tensor out, nn_tensor X, int view,
                  const float *bias, nn_act act, int accumulate, gt_error *err)
{
    if (t->packed && !training)
        return nn_linear_fixed(t->b, out, X, &t->pk[view], bias, act, accumulate, err);
    return nn_matmul(t->b, out, X, 0, W(t, view), 1, bias, act, accumulate, err);
}

/* e->x[n, D] (and e->x_bf when bf16) -> out[n, O] */
static int ex_forward(nn_trunk *t, expert *e, int n, nn_tensor out, int training,
                      gt_error *err)
{
    nn_backend *b = t->b;
    const nn_trunk_config *c = &t->cfg;
    int H = c->hidden, N = c->blocks, B = t->batch;
    float eps = c->ln_eps;
    size_t BH = (size_t)B * H;
    nn_tensor X;
    TRY(operand(t, T(e->x, n, t->D), e->x_bf, &X, err));
    nn_tensor h0 = T(e->h, n, H);
    TRY(linear(t, training, h0, X, e->w_in, P(t, e->b_in), NN_ACT_NONE, 0, err));
    nn_tensor hl = h0;
    for (int l = 0; l < N; l++) {
        const ex_block *k = &e->blk[l];
        size_t lo = training ? (size_t)l : 0;   /* inference reuses slot 0 */
        nn_tensor a = T(e->a + lo * BH, n, H), A;
        TRY(nn_ln_fwd(b, a, e->mean + lo * B, e->rstd + lo * B, hl, P(t, k->ln_g),
                      P(t, k->ln_b), eps, err));
        TRY(operand(t, a, e->a_bf ? e->a_bf + lo * BH : NULL, &A, err));
        nn_tensor s = T(e->s + lo * BH, n, H), S;
        if (training) {
            nn_tensor z = T(e->z + lo * BH, n, H);
            TRY(nn_matmul(b, z, A, 0, W(t, k->w1), 1, P(t, k->b1), NN_ACT_NONE, 0, err));
            TRY(nn_silu_fwd(b, s, z, err));
        } else {
            TRY(linear(t, training, s, A, k->w1, P(t, k->b1), NN_ACT_SILU, 0, err));
        }
        TRY(operand(t, s, e->s_bf ? e->s_bf + lo * BH : NULL, &S, err));
        nn_tensor hn = hl;
        if (training) {
            /* keep h_l for the LayerNorm backward: h_{l+1} = h_l + ... */
            hn = T(e->h + (size_t)(l + 1) * BH, n, H);
            TRY(nn_copy_d2d(b, hn.data, hl.data, (size_t)n * H * sizeof(float), err));
        }
        TRY(linear(t, training, hn, S, k->w2, P(t, k->b2), NN_ACT_NONE, 1, err));
        hl = hn;
    }
    size_t lf = training ? (size_t)N : 0;
    nn_tensor af = T(e->af, n, H), AF;
    TRY(nn_ln_fwd(b, af, e->mean + lf * B, e->rstd + lf * B, hl, P(t, e->lnf_g),
                  P(t, e->lnf_b), eps, err));
    TRY(operand(t, af, e->af_bf, &AF, err));
    TRY(linear(t, training, out, AF, e->w_out, P(t, e->b_out), NN_ACT_NONE, 0, err));
    e->rows = n;
    return GT_OK;
}

/* d_out[n, O] -> parameter grads (+=), and dxin[n, D] when not NULL. */
static int ex_backward(nn_trunk *t, expert *e, nn_tensor d_out, float *dxin, gt_error *err)
{
    nn_backend *b = t->b;
    const nn_trunk_config *c = &t->cfg;
    int H = c->hidden, N = c->blocks, n = e->rows, B = t->batch;
    size_t BH = (size_t)B * H;
    nn_tensor G, AF, X;
    /* output head */
    TRY(operand(t, d_out, t->g_bf, &G, err));
    int bf = t->compute == NN_BF16;
    AF = bf ? TH(e->af_bf, n, H) : T(e->af, n, H);
    TRY(nn_matmul(b, WG(t, e->w_out), G, 1, AF, 0, NULL, NN_ACT_NONE, 1, err));
    TRY(nn_bias_grad(b, PG(t, e->b_out), d_out, 1, err));
    nn_tensor daf = T(t->da, n, H);
    TRY(nn_matmul(b, daf, G, 0, W(t, e->w_out), 0, NULL, NN_ACT_NONE, 0, err));
    nn_tensor dh = T(t->dh, n, H);
    TRY(nn_ln_bwd(b, dh, PG(t, e->lnf_g), PG(t, e->lnf_b), daf, T(e->h + (size_t)N * BH, n, H),
                  e->mean + (size_t)N * B, e->rstd + (size_t)N * B, P(t, e->lnf_g), 0, err));
    /* blocks, last to first; dh carries the residual gradient */
    for (int l = N - 1; l >= 0; l--) {
        const ex_block *k = &e->blk[l];
        size_t lo = (size_t)l;
        nn_tensor S = bf ? TH(e->s_bf + lo * BH, n, H) : T(e->s + lo * BH, n, H);
        nn_tensor A = bf ? TH(e->a_bf + lo * BH, n, H) : T(e->a + lo * BH, n, H);
        TRY(operand(t, dh, t->g_bf, &G, err));
        TRY(nn_matmul(b, WG(t, k->w2), G, 1, S, 0, NULL, NN_ACT_NONE, 1, err));
        TRY(nn_bias_grad(b, PG(t, k->b2), dh, 1, err));
        nn_tensor ds = T(t->dtmp, n, H);
        TRY(nn_matmul(b, ds, G, 0, W(t, k->w2), 0, NULL, NN_ACT_NONE, 0, err));
        TRY(nn_silu_bwd(b, ds, ds, T(e->z + lo * BH, n, H), err));
        TRY(operand(t, ds, t->g_bf, &G, err));
        TRY(nn_matmul(b, WG(t, k->w1), G, 1, A, 0, NULL, NN_ACT_NONE, 1, err));
        TRY(nn_bias_grad(b, PG(t, k->b1), ds, 1, err));
        nn_tensor da = T(t->da, n, H);
        TRY(nn_matmul(b, da, G, 0, W(t, k->w1), 0, NULL, NN_ACT_NONE, 0, err));
        TRY(nn_ln_bwd(b, dh, PG(t, k->ln_g), PG(t, k->ln_b), da, T(e->h + lo * BH, n, H),
                      e->mean + lo * B, e->rstd + lo * B, P(t, k->ln_g), 1, err));
    }
    /* input projection */
    TRY(operand(t, dh, t->g_bf, &G, err));
    X = bf ? TH(e->x_bf, n, t->D) : T(e->x, n, t->D);
    TRY(nn_matmul(b, WG(t, e->w_in), G, 1, X, 0, NULL, NN_ACT_NONE, 1, err));
    TRY(nn_bias_grad(b, PG(t, e->b_in), dh, 1, err));
    if (dxin)
        TRY(nn_matmul(b, T(dxin, n, t->D), G, 0, W(t, e->w_in), 0, NULL, NN_ACT_NONE, 0, err));
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* public forward / backward                                                */
/* ------------------------------------------------------------------------ */

static int check_io(nn_trunk *t, nn_tensor x, nn_tensor cond, nn_tensor out, gt_error *err)
{
    const nn_trunk_config *c = &t->cfg;
    TRY(nn_tensor_check(x, "trunk forward: x", err));
    TRY(nn_tensor_check(cond, "trunk forward: cond", err));
    TRY(nn_tensor_check(out, "trunk forward: out", err));
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

/* xin = x ++ embed(cond), then a finiteness check of the whole input: one
 * fp32 sum of squares is NaN or Inf iff some input is (or is ~1e19+). */
static int assemble_input(nn_trunk *t, nn_tensor x, nn_tensor cond, float *xin, gt_error *err)
{
    const nn_trunk_config *c = &t->cfg;
    int n = x.rows, nemb = c->cond_dim * c->emb_dim;
    nn_tensor parts[2];
    int np = 0;
    if (c->in_dim)
        parts[np++] = x;
    if (c->cond_dim) {
        nn_tensor emb = T(t->emb, n, nemb);
        TRY(nn_embed_fwd(t->b, emb, cond, c->emb_dim, c->emb_scale, c->emb_max_period, err));
        parts[np++] = emb;
    }
    TRY(nn_concat(t->b, T(xin, n, t->D), parts, np, err));
    if (!t->check_input)
        return GT_OK;
    float ss = 0.0f;
    TRY(nn_sumsq(t->b, t->scalars + 2, xin, (size_t)n * t->D, err));
    TRY(nn_copy_d2h(t->b, &ss, t->scalars + 2, sizeof ss, err));
    if (!isfinite(ss))
        return gt_error_set(err, GT_EINVAL,
                            "trunk forward: input x or cond contains NaN or infinite values");
    return GT_OK;
}

static int zero_rows(nn_trunk *t, nn_tensor y, gt_error *err)
{
    if (y.ld == y.cols)
        return nn_memset(t->b, y.data, 0, (size_t)y.rows * y.cols * sizeof(float), err);
    for (int i = 0; i < y.rows; i++)
        TRY(nn_memset(t->b, nn_tensor_rows(y, i, 1).data, 0, (size_t)y.cols * sizeof(float),
                      err));
    return GT_OK;
}

static int routed_forward(nn_trunk *t, int n, nn_tensor out, int training, gt_error *err)
{
    nn_backend *b = t->b;
    const nn_trunk_config *c = &t->cfg;
    int E = c->n_experts, K = c->top_k, D = t->D, O = c->out_dim;
    nn_tensor xin = T(t->xin, n, D);
    /* gate: fp32 input and fp32 master weights whatever the precision */
    nn_tensor logits = T(t->logits, n, E), probs = T(t->probs, n, E);
    if (t->packed && !training)
        TRY(nn_linear_fixed(b, logits, xin, &t->pk[t->w_gate], P(t, t->b_gate), NN_ACT_NONE,
                            0, err));
    else
        TRY(nn_matmul(b, logits, xin, 0, nn_params_value(&t->params, t->w_gate), 1,
                      P(t, t->b_gate), NN_ACT_NONE, 0, err));
    TRY(nn_softmax_fwd(b, probs, logits, err));
    TRY(nn_topk_fwd(b, t->idx, t->w, probs, K, err));
    /* dispatch lists on the host: rows grouped by expert, in row order */
    size_t nk = (size_t)n * K;
    TRY(nn_copy_d2h(b, t->h_idx, t->idx, nk * sizeof(int32_t), err));
    int *cnt = t->cnt, pc[NN_TRUNK_MAX_EXPERTS];
    memset(cnt, 0, sizeof(int) * NN_TRUNK_MAX_EXPERTS);
    for (size_t i = 0; i < nk; i++) {
        int e = t->h_idx[i];
        if (e < 0 || e >= E)
            return gt_error_set(err, GT_EDEVICE, "trunk: top-k returned expert %d", e);
        cnt[e]++;
    }
    t->off[0] = 0;
    for (int e = 0; e < E; e++) {
        int p = (cnt[e] + NN_ROUTE_BUCKET - 1) / NN_ROUTE_BUCKET * NN_ROUTE_BUCKET;
        pc[e] = p < t->batch ? p : t->batch;
        if (pc[e] < cnt[e])
            pc[e] = cnt[e];
        t->off[e + 1] = t->off[e] + pc[e];
    }
    int nd = t->off[E], fill[NN_TRUNK_MAX_EXPERTS];
    memcpy(fill, t->off, sizeof(int) * (size_t)E);
    for (size_t i = 0; i < nk; i++) {
        int e = t->h_idx[i];
        t->h_rows[fill[e]] = (int32_t)(i / (size_t)K);
        t->h_pos[fill[e]] = (int32_t)i;
        fill[e]++;
    }
    for (int e = 0; e < E; e++) {
        for (int j = cnt[e]; j < pc[e]; j++) {
            t->h_rows[t->off[e] + j] = t->h_rows[t->off[e]];   /* a real row */
            t->h_pos[t->off[e] + j] = -1;                        /* no slot */
        }
        t->h_frac[e] = (float)cnt[e] / (float)nk;
    }
    TRY(nn_copy_h2d(b, t->rows_d, t->h_rows, (size_t)nd * sizeof(int32_t), err));
    TRY(nn_copy_h2d(b, t->pos_d, t->h_pos, (size_t)nd * sizeof(int32_t), err));
    TRY(nn_copy_h2d(b, t->frac, t->h_frac, (size_t)E * sizeof(float), err));
    /* the gate weight of each dispatched row; 0 for padding rows */
    TRY(nn_memset(b, t->scale_d, 0, (size_t)nd * sizeof(float), err));
    TRY(zero_rows(t, out, err));
    for (int e = 0; e < E; e++) {
        expert *x = &t->ex[e];
        x->rows = 0;
        if (!cnt[e])
            continue;
        const int32_t *rows = t->rows_d + t->off[e];
        float *scale = t->scale_d + t->off[e];
        TRY(nn_gather_rows(b, T(scale, cnt[e], 1), T(t->w, (int)nk, 1), t->pos_d + t->off[e],
                           NULL, err));
        TRY(nn_gather_rows(b, T(x->x, pc[e], D), xin, rows, NULL, err));
        nn_tensor oe = T(x->out, pc[e], O);
        TRY(ex_forward(t, x, pc[e], oe, training, err));
        TRY(nn_scatter_add_rows(b, out, nn_tensor_rows(oe, 0, cnt[e]), rows, scale, err));
    }
    /* auxiliary losses (fp32) for the trainer's log */
    float sc[2];
    TRY(nn_balance_fwd(b, t->scalars, probs, t->frac, err));
    TRY(nn_entropy_fwd(b, t->scalars + 1, probs, err));
    TRY(nn_copy_d2h(b, sc, t->scalars, sizeof sc, err));
    t->stats.balance_loss = sc[0];
    t->stats.entropy_loss = sc[1];
    t->stats.n_experts = E;
    for (int e = 0; e < E; e++)
        t->stats.load[e] = t->cnt[e];
    return GT_OK;
}

int nn_trunk_forward(nn_trunk *t, nn_tensor x, nn_tensor cond, nn_tensor out, int training,
                     gt_error *err)
{
    if (!t)
        return gt_error_set(err, GT_EINVAL, "trunk forward: NULL trunk");
    TRY(check_io(t, x, cond, out, err));
    int n = x.rows;
    t->fwd_rows = 0;
    TRY(assemble_input(t, x, cond, t->xin, err));
    if (t->cfg.kind == NN_TRUNK_EXPERT)
        TRY(ex_forward(t, &t->ex[0], n, out, training, err));
    else
        TRY(routed_forward(t, n, out, training, err));
    t->fwd_rows = n;
    t->fwd_training = training;
    return GT_OK;
}

static int routed_backward(nn_trunk *t, nn_tensor d_out, int want_dx, gt_error *err)
{
    nn_backend *b = t->b;
    const nn_trunk_config *c = &t->cfg;
    int n = t->fwd_rows, E = c->n_experts, K = c->top_k, D = t->D, O = c->out_dim;
    int nk = n * K;
    nn_tensor xin = T(t->xin, n, D);
    if (want_dx)
        TRY(nn_memset(b, t->dxin, 0, (size_t)n * D * sizeof(float), err));
    TRY(nn_memset(b, t->dw, 0, (size_t)nk * sizeof(float), err));
    for (int e = 0; e < E; e++) {
        expert *x = &t->ex[e];
        int np = x->rows, ne = t->cnt[e];
        if (!ne)
            continue;
        const int32_t *rows = t->rows_d + t->off[e];
        float *scale = t->scale_d + t->off[e], *dscale = t->dscale_d + t->off[e];
        nn_tensor de = T(t->de, np, O);
        /* out[r] = sum_e w_e out_e[r]: d out_e = w_e d_out[r] (0 on padding
         * rows), d w_e = <d_out[r], out_e[r]> */
        TRY(nn_gather_rows(b, de, d_out, rows, scale, err));
        TRY(nn_gather_dot(b, dscale, d_out, rows, T(x->out, ne, O), err));
        TRY(ex_backward(t, x, de, want_dx ? t->dxe : NULL, err));
        if (want_dx)
            TRY(nn_scatter_add_rows(b, T(t->dxin, n, D), T(t->dxe, ne, D), rows, NULL, err));
        /* back to slot order: dw[pos] = dscale */
        TRY(nn_scatter_add_rows(b, T(t->dw, nk, 1), T(dscale, ne, 1), t->pos_d + t->off[e],
                                NULL, err));
    }
    nn_tensor probs = T(t->probs, n, E), dprobs = T(t->dprobs, n, E);
    TRY(nn_topk_bwd(b, dprobs, t->dw, t->idx, t->w, probs, K, 0, err));
    if (c->balance_coef != 0.0f)
        TRY(nn_balance_bwd(b, dprobs, c->balance_coef, t->frac, err));
    if (c->entropy_coef != 0.0f)
        TRY(nn_entropy_bwd(b, dprobs, c->entropy_coef, probs, err));
    nn_tensor dlogits = T(t->dlogits, n, E);
    TRY(nn_softmax_bwd(b, dlogits, dprobs, probs, err));
    TRY(nn_matmul(b, WG(t, t->w_gate), dlogits, 1, xin, 0, NULL, NN_ACT_NONE, 1, err));
    TRY(nn_bias_grad(b, PG(t, t->b_gate), dlogits, 1, err));
    if (want_dx)
        TRY(nn_matmul(b, T(t->dxin, n, D), dlogits, 0, nn_params_value(&t->params, t->w_gate),
                      0, NULL, NN_ACT_NONE, 1, err));
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
    TRY(nn_tensor_check(d_out, "trunk backward: d_out", err));
    if (d_out.dtype != NN_F32 || d_out.rows != n || d_out.cols != t->cfg.out_dim)
        return gt_error_set(err, GT_EINVAL,
                            "trunk backward: d_out is %s %dx%d, expected f32 %dx%d",
                            nn_dtype_name(d_out.dtype), d_out.rows, d_out.cols, n,
                            t->cfg.out_dim);
    int want_dx = d_x.data != NULL;
    if (want_dx) {
        TRY(nn_tensor_check(d_x, "trunk backward: d_x", err));
        if (d_x.dtype != NN_F32 || d_x.rows != n || d_x.cols != t->cfg.in_dim)
            return gt_error_set(err, GT_EINVAL,
                                "trunk backward: d_x is %s %dx%d, expected f32 %dx%d",
                                nn_dtype_name(d_x.dtype), d_x.rows, d_x.cols, n,
                                t->cfg.in_dim);
    }
    if (t->cfg.kind == NN_TRUNK_EXPERT)
        TRY(ex_backward(t, &t->ex[0], d_out, want_dx ? t->dxin : NULL, err));
    else
        TRY(routed_backward(t, d_out, want_dx, err));
    if (want_dx && t->cfg.in_dim) {
        nn_tensor parts[2] = {d_x, T(NULL, n, t->cfg.cond_dim * t->cfg.emb_dim)};
        TRY(nn_split(t->b, parts, t->cfg.cond_dim ? 2 : 1, T(t->dxin, n, t->D), 0, err));
    }
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
        /* the gate is fp32 whatever the precision (the brief's fp32 guard) */
        nn_tensor w = i == t->w_gate ? nn_params_value(p, i) : W(t, i);
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
