/* gpu_model: see gpu_model.h. */
#include "gpu_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn_rng.h"

#define GM_MAX_ALLOCS 256
#define GM_ALIGN 64            /* parameter views start on 256-byte boundaries */

struct gpu_model {
    nn_backend *b;
    const nn_backend_ops *o;
    gpu_model_config c;
    int D, H, L, O, B;
    int bf16;
    /* parameters: one buffer each for values, grads, moments, bf16 copy */
    size_t np;
    float *param, *grad, *mm, *vv;
    uint16_t *pbf;
    size_t w_in, b_in, w_out, b_out, gf, bef;
    size_t g[GPU_MODEL_MAX_BLOCKS], be[GPU_MODEL_MAX_BLOCKS], w1[GPU_MODEL_MAX_BLOCKS],
        b1[GPU_MODEL_MAX_BLOCKS], w2[GPU_MODEL_MAX_BLOCKS], b2[GPU_MODEL_MAX_BLOCKS];
    /* activations for B rows */
    float *x, *cond, *target, *out, *dout, *loss, *emb, *xin, *hf, *dh, *dt1, *dt2;
    float *h[GPU_MODEL_MAX_BLOCKS + 1], *a[GPU_MODEL_MAX_BLOCKS], *u[GPU_MODEL_MAX_BLOCKS],
        *s[GPU_MODEL_MAX_BLOCKS], *mean[GPU_MODEL_MAX_BLOCKS + 1],
        *rstd[GPU_MODEL_MAX_BLOCKS + 1];
    uint16_t *xin_bf, *hf_bf, *dout_bf, *dh_bf, *du_bf;
    uint16_t *a_bf[GPU_MODEL_MAX_BLOCKS], *s_bf[GPU_MODEL_MAX_BLOCKS];
    /* sampler */
    int steps;
    float *w_out_dt, *b_out_dt, *tcond, *econd;
    uint16_t *w_out_dt_bf;
    void *allocs[GM_MAX_ALLOCS];
    int nallocs;
};

#define TRY(x)                                                                 \
    do {                                                                       \
        int rc_ = (x);                                                         \
        if (rc_)                                                               \
            return rc_;                                                        \
    } while (0)

void gpu_model_config_default(gpu_model_config *c)
{
    memset(c, 0, sizeof *c);
    c->in_dim = 6480;
    c->cond_dim = 2;
    c->emb_dim = 32;
    c->hidden = 512;
    c->blocks = 6;
    c->out_dim = 6480;
    c->batch = 4096;
    c->precision = NN_F32;
    c->emb_scale = 1000.0f;
    c->emb_max_period = 1e4f;
    c->ln_eps = 1e-5f;
}

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */
/* ------------------------------------------------------------------------ */

static int gm_alloc(gpu_model *m, size_t bytes, void **out, gt_error *err)
{
    if (m->nallocs == GM_MAX_ALLOCS)
        return gt_error_set(err, GT_ENOMEM, "gpu_model: too many buffers");
    TRY(m->o->alloc(m->b, bytes, out, err));
    m->allocs[m->nallocs++] = *out;
    return GT_OK;
}

#define ALLOC_F(p, n) TRY(gm_alloc(m, (size_t)(n) * sizeof(float), (void **)&(p), err))
#define ALLOC_H(p, n) TRY(gm_alloc(m, (size_t)(n) * sizeof(uint16_t), (void **)&(p), err))

static nn_tensor F(float *p, int rows, int cols)
{
    return nn_tensor_make(p, NN_F32, rows, cols);
}

static nn_tensor FV(float *p, int rows, int cols, int ld)
{
    nn_tensor t = nn_tensor_make(p, NN_F32, rows, cols);
    t.ld = ld;
    return t;
}

static nn_tensor HB(uint16_t *p, int rows, int cols)
{
    return nn_tensor_make(p, NN_BF16, rows, cols);
}

static size_t gm_take(size_t *off, size_t n)
{
    size_t o = *off;
    *off += (n + GM_ALIGN - 1) / GM_ALIGN * GM_ALIGN;
    return o;
}

/* Weight view as a matmul input: the bf16 working copy or the fp32 master. */
static nn_tensor gm_w(gpu_model *m, size_t off, int rows, int cols)
{
    return m->bf16 ? HB(m->pbf + off, rows, cols) : F(m->param + off, rows, cols);
}

/* Activation as a matmul input: cast to bf16 first in bf16 precision. */
static int gm_act(gpu_model *m, float *src, uint16_t *bf, int rows, int cols, nn_tensor *out,
                  gt_error *err)
{
    if (!m->bf16) {
        *out = F(src, rows, cols);
        return GT_OK;
    }
    *out = HB(bf, rows, cols);
    return m->o->cast_bf16(m->b, *out, F(src, rows, cols), err);
}

static int gm_mm(gpu_model *m, nn_tensor c, nn_tensor a, int ta, nn_tensor bm, int tb,
                 const float *bias, nn_act act, int acc, gt_error *err)
{
    return m->o->matmul(m->b, c, a, ta, bm, tb, bias, act, acc, err);
}

/* ------------------------------------------------------------------------ */
/* creation                                                                 */
/* ------------------------------------------------------------------------ */

void gpu_model_destroy(gpu_model *m)
{
    if (!m)
        return;
    for (int i = m->nallocs - 1; i >= 0; i--)
        m->o->free(m->b, m->allocs[i]);
    free(m);
}

static int gm_build(gpu_model *m, gt_error *err)
{
    const gpu_model_config *c = &m->c;
    int D = m->D, H = m->H, L = m->L, O = m->O, B = m->B;
    size_t off = 0;
    m->w_in = gm_take(&off, (size_t)H * D);
    m->b_in = gm_take(&off, (size_t)H);
    for (int l = 0; l < L; l++) {
        m->g[l] = gm_take(&off, (size_t)H);
        m->be[l] = gm_take(&off, (size_t)H);
        m->w1[l] = gm_take(&off, (size_t)H * H);
        m->b1[l] = gm_take(&off, (size_t)H);
        m->w2[l] = gm_take(&off, (size_t)H * H);
        m->b2[l] = gm_take(&off, (size_t)H);
    }
    m->gf = gm_take(&off, (size_t)H);
    m->bef = gm_take(&off, (size_t)H);
    m->w_out = gm_take(&off, (size_t)O * H);
    m->b_out = gm_take(&off, (size_t)O);
    m->np = off;
    ALLOC_F(m->param, m->np);
    ALLOC_F(m->grad, m->np);
    ALLOC_F(m->mm, m->np);
    ALLOC_F(m->vv, m->np);
    if (m->bf16)
        ALLOC_H(m->pbf, m->np);

    size_t bh = (size_t)B * H;
    ALLOC_F(m->x, (size_t)B * (c->in_dim > 0 ? c->in_dim : 1));
    ALLOC_F(m->cond, (size_t)B * (c->cond_dim > 0 ? c->cond_dim : 1));
    ALLOC_F(m->target, (size_t)B * O);
    ALLOC_F(m->out, (size_t)B * O);
    ALLOC_F(m->dout, (size_t)B * O);
    ALLOC_F(m->loss, 4);
    ALLOC_F(m->emb, (size_t)B * (c->cond_dim * c->emb_dim > 0 ? c->cond_dim * c->emb_dim : 1));
    ALLOC_F(m->xin, (size_t)B * D);
    ALLOC_F(m->hf, bh);
    ALLOC_F(m->dh, bh);
    ALLOC_F(m->dt1, bh);
    ALLOC_F(m->dt2, bh);
    for (int l = 0; l <= L; l++) {
        ALLOC_F(m->h[l], bh);
        ALLOC_F(m->mean[l], B);
        ALLOC_F(m->rstd[l], B);
    }
    for (int l = 0; l < L; l++) {
        ALLOC_F(m->a[l], bh);
        ALLOC_F(m->u[l], bh);
        ALLOC_F(m->s[l], bh);
        if (m->bf16) {
            ALLOC_H(m->a_bf[l], bh);
            ALLOC_H(m->s_bf[l], bh);
        }
    }
    if (m->bf16) {
        ALLOC_H(m->xin_bf, (size_t)B * D);
        ALLOC_H(m->hf_bf, bh);
        ALLOC_H(m->dout_bf, (size_t)B * O);
        ALLOC_H(m->dh_bf, bh);
        ALLOC_H(m->du_bf, bh);
    }
    return GT_OK;
}

int gpu_model_create(nn_backend *b, const gpu_model_config *cfg, gpu_model **out,
                     gt_error *err)
{
    if (!b || !cfg || !out)
        return gt_error_set(err, GT_EINVAL, "gpu_model_create: NULL argument");
    *out = NULL;
    if (cfg->in_dim < 0 || cfg->cond_dim < 0 || cfg->emb_dim < 0 || cfg->emb_dim % 2 ||
        cfg->hidden < 1 || cfg->blocks < 0 || cfg->blocks > GPU_MODEL_MAX_BLOCKS ||
        cfg->out_dim < 1 || cfg->batch < 1 || cfg->in_dim + cfg->cond_dim * cfg->emb_dim < 1)
        return gt_error_set(err, GT_EINVAL, "gpu_model_create: bad configuration");
    if (cfg->precision != NN_F32 && cfg->precision != NN_BF16)
        return gt_error_set(err, GT_EINVAL, "gpu_model_create: precision must be f32 or bf16");
    if (cfg->precision == NN_BF16 && !b->has_bf16 && !b->bf16_emulated)
        return gt_error_set(err, GT_EUNSUPPORTED, "gpu_model_create: backend %s has no bf16",
                            b->name);
    gpu_model *m = (gpu_model *)calloc(1, sizeof *m);
    if (!m)
        return gt_error_set(err, GT_ENOMEM, "gpu_model_create: out of memory");
    m->b = b;
    m->o = b->ops;
    m->c = *cfg;
    m->D = cfg->in_dim + cfg->cond_dim * cfg->emb_dim;
    m->H = cfg->hidden;
    m->L = cfg->blocks;
    m->O = cfg->out_dim;
    m->B = cfg->batch;
    m->bf16 = cfg->precision == NN_BF16;
    int rc = gm_build(m, err);
    if (rc) {
        gpu_model_destroy(m);
        return rc;
    }
    *out = m;
    return GT_OK;
}

int gpu_model_init(gpu_model *m, uint64_t seed, gt_error *err)
{
    const nn_backend_ops *o = m->o;
    nn_backend *b = m->b;
    int H = m->H, D = m->D, O = m->O;
    TRY(o->memset(b, m->param, 0, m->np * sizeof(float), err));
    TRY(o->memset(b, m->mm, 0, m->np * sizeof(float), err));
    TRY(o->memset(b, m->vv, 0, m->np * sizeof(float), err));
    TRY(o->memset(b, m->grad, 0, m->np * sizeof(float), err));
    nn_rng r = nn_rng_make(seed, 7);
    struct { size_t off; size_t n; int fan_in; } w[2 + 2 * GPU_MODEL_MAX_BLOCKS];
    int nw = 0;
    w[nw].off = m->w_in, w[nw].n = (size_t)H * D, w[nw++].fan_in = D;
    for (int l = 0; l < m->L; l++) {
        w[nw].off = m->w1[l], w[nw].n = (size_t)H * H, w[nw++].fan_in = H;
        w[nw].off = m->w2[l], w[nw].n = (size_t)H * H, w[nw++].fan_in = H;
    }
    w[nw].off = m->w_out, w[nw].n = (size_t)O * H, w[nw++].fan_in = H;
    for (int i = 0; i < nw; i++) {
        uint64_t at = nn_rng_take(&r, w[i].n);
        TRY(o->rand_fill(b, m->param + w[i].off, w[i].n, NN_DIST_NORMAL, 0.0f,
                         1.0f / sqrtf((float)w[i].fan_in), seed, 7, at, err));
    }
    /* gamma = 1: a uniform fill on [1, 1) is exactly 1 */
    for (int l = 0; l <= m->L; l++) {
        size_t g = l < m->L ? m->g[l] : m->gf;
        TRY(o->rand_fill(b, m->param + g, (size_t)H, NN_DIST_UNIFORM, 1.0f, 1.0f, seed, 8, 0,
                         err));
    }
    return gpu_model_sync_bf16(m, err);
}

int gpu_model_sync_bf16(gpu_model *m, gt_error *err)
{
    if (!m->bf16)
        return GT_OK;
    return m->o->cast_bf16(m->b, HB(m->pbf, 1, (int)m->np), F(m->param, 1, (int)m->np), err);
}

float *gpu_model_x(gpu_model *m) { return m->x; }
float *gpu_model_cond(gpu_model *m) { return m->cond; }
float *gpu_model_target(gpu_model *m) { return m->target; }
float *gpu_model_out(gpu_model *m) { return m->out; }
float *gpu_model_loss(gpu_model *m) { return m->loss; }
float *gpu_model_grads(gpu_model *m) { return m->grad; }
float *gpu_model_moment(gpu_model *m, int which) { return which ? m->vv : m->mm; }

float *gpu_model_params(gpu_model *m, size_t *n)
{
    if (n)
        *n = m->np;
    return m->param;
}

/* ------------------------------------------------------------------------ */
/* forward and backward                                                     */
/* ------------------------------------------------------------------------ */

/* The trunk on xin (already assembled).  sample = 1: the output product
 * adds dt * (head) into the state columns of xin (Euler step in the
 * epilogue) instead of writing out. */
static int gm_core(gpu_model *m, int n, int training, int sample, gt_error *err)
{
    const nn_backend_ops *o = m->o;
    nn_backend *b = m->b;
    int D = m->D, H = m->H, L = m->L, O = m->O;
    nn_tensor xin;
    TRY(gm_act(m, m->xin, m->xin_bf, n, D, &xin, err));
    float *h = m->h[0];
    TRY(gm_mm(m, F(h, n, H), xin, 0, gm_w(m, m->w_in, H, D), 1, m->param + m->b_in,
              NN_ACT_NONE, 0, err));
    for (int l = 0; l < L; l++) {
        int k = training ? l : 0;             /* inference reuses slot 0 */
        float *hn = training ? m->h[l + 1] : h;
        TRY(o->ln_fwd(b, F(m->a[k], n, H), m->mean[k], m->rstd[k], F(h, n, H),
                      m->param + m->g[l], m->param + m->be[l], m->c.ln_eps, err));
        nn_tensor a;
        TRY(gm_act(m, m->a[k], m->a_bf[k], n, H, &a, err));
        if (training) {
            TRY(gm_mm(m, F(m->u[k], n, H), a, 0, gm_w(m, m->w1[l], H, H), 1,
                      m->param + m->b1[l], NN_ACT_NONE, 0, err));
            TRY(o->silu_fwd(b, F(m->s[k], n, H), F(m->u[k], n, H), err));
        } else {
            TRY(gm_mm(m, F(m->s[k], n, H), a, 0, gm_w(m, m->w1[l], H, H), 1,
                      m->param + m->b1[l], NN_ACT_SILU, 0, err));
        }
        nn_tensor s;
        TRY(gm_act(m, m->s[k], m->s_bf[k], n, H, &s, err));
        if (hn != h)
            TRY(o->copy_d2d(b, hn, h, (size_t)n * H * sizeof(float), err));
        TRY(gm_mm(m, F(hn, n, H), s, 0, gm_w(m, m->w2[l], H, H), 1, m->param + m->b2[l],
                  NN_ACT_NONE, 1, err));
        h = hn;
    }
    int kf = training ? L : 0;
    TRY(o->ln_fwd(b, F(m->hf, n, H), m->mean[kf], m->rstd[kf], F(h, n, H), m->param + m->gf,
                  m->param + m->bef, m->c.ln_eps, err));
    nn_tensor hf;
    TRY(gm_act(m, m->hf, m->hf_bf, n, H, &hf, err));
    if (sample) {
        nn_tensor w = m->bf16 ? HB(m->w_out_dt_bf, O, H) : F(m->w_out_dt, O, H);
        return gm_mm(m, FV(m->xin, n, O, D), hf, 0, w, 1, m->b_out_dt, NN_ACT_NONE, 1, err);
    }
    return gm_mm(m, F(m->out, n, O), hf, 0, gm_w(m, m->w_out, O, H), 1, m->param + m->b_out,
                 NN_ACT_NONE, 0, err);
}

static int gm_assemble(gpu_model *m, int n, gt_error *err)
{
    const gpu_model_config *c = &m->c;
    int ne = c->cond_dim * c->emb_dim;
    nn_tensor parts[2];
    int np = 0;
    if (c->in_dim)
        parts[np++] = F(m->x, n, c->in_dim);
    if (ne) {
        TRY(m->o->embed_fwd(m->b, F(m->emb, n, ne), F(m->cond, n, c->cond_dim), c->emb_dim,
                            c->emb_scale, c->emb_max_period, err));
        parts[np++] = F(m->emb, n, ne);
    }
    return m->o->concat(m->b, F(m->xin, n, m->D), parts, np, err);
}

int gpu_model_forward(gpu_model *m, int rows, int training, gt_error *err)
{
    if (rows < 1 || rows > m->B)
        return gt_error_set(err, GT_EINVAL, "gpu_model_forward: %d rows (planned %d)", rows,
                            m->B);
    TRY(gm_assemble(m, rows, err));
    return gm_core(m, rows, training, 0, err);
}

static int gm_backward(gpu_model *m, int n, gt_error *err)
{
    const nn_backend_ops *o = m->o;
    nn_backend *b = m->b;
    int D = m->D, H = m->H, L = m->L, O = m->O;
    float *G = m->grad, *P = m->param;
    nn_tensor dout, act;
    TRY(gm_act(m, m->dout, m->dout_bf, n, O, &dout, err));
    /* head (the forward left hf's bf16 copy in place) */
    act = m->bf16 ? HB(m->hf_bf, n, H) : F(m->hf, n, H);
    TRY(gm_mm(m, F(G + m->w_out, O, H), dout, 1, act, 0, NULL, NN_ACT_NONE, 1, err));
    TRY(o->bias_grad(b, G + m->b_out, F(m->dout, n, O), 1, err));
    TRY(gm_mm(m, F(m->dt1, n, H), dout, 0, gm_w(m, m->w_out, O, H), 0, NULL, NN_ACT_NONE, 0,
              err));
    TRY(o->ln_bwd(b, F(m->dh, n, H), G + m->gf, G + m->bef, F(m->dt1, n, H), F(m->h[L], n, H),
                  m->mean[L], m->rstd[L], P + m->gf, 0, err));
    for (int l = L - 1; l >= 0; l--) {
        nn_tensor dh, du, s, a;
        TRY(gm_act(m, m->dh, m->dh_bf, n, H, &dh, err));
        s = m->bf16 ? HB(m->s_bf[l], n, H) : F(m->s[l], n, H);
        TRY(gm_mm(m, F(G + m->w2[l], H, H), dh, 1, s, 0, NULL, NN_ACT_NONE, 1, err));
        TRY(o->bias_grad(b, G + m->b2[l], F(m->dh, n, H), 1, err));
        TRY(gm_mm(m, F(m->dt1, n, H), dh, 0, gm_w(m, m->w2[l], H, H), 0, NULL, NN_ACT_NONE, 0,
                  err));
        TRY(o->silu_bwd(b, F(m->dt1, n, H), F(m->dt1, n, H), F(m->u[l], n, H), err));
        TRY(gm_act(m, m->dt1, m->du_bf, n, H, &du, err));
        a = m->bf16 ? HB(m->a_bf[l], n, H) : F(m->a[l], n, H);
        TRY(gm_mm(m, F(G + m->w1[l], H, H), du, 1, a, 0, NULL, NN_ACT_NONE, 1, err));
        TRY(o->bias_grad(b, G + m->b1[l], F(m->dt1, n, H), 1, err));
        TRY(gm_mm(m, F(m->dt2, n, H), du, 0, gm_w(m, m->w1[l], H, H), 0, NULL, NN_ACT_NONE, 0,
                  err));
        TRY(o->ln_bwd(b, F(m->dh, n, H), G + m->g[l], G + m->be[l], F(m->dt2, n, H),
                      F(m->h[l], n, H), m->mean[l], m->rstd[l], P + m->g[l], 1, err));
    }
    nn_tensor dh, xin;
    TRY(gm_act(m, m->dh, m->dh_bf, n, H, &dh, err));
    xin = m->bf16 ? HB(m->xin_bf, n, D) : F(m->xin, n, D);
    TRY(gm_mm(m, F(G + m->w_in, H, D), dh, 1, xin, 0, NULL, NN_ACT_NONE, 1, err));
    return o->bias_grad(b, G + m->b_in, F(m->dh, n, H), 1, err);
}

int gpu_model_train_step(gpu_model *m, int rows, const nn_adamw_hp *hp, gt_error *err)
{
    const nn_backend_ops *o = m->o;
    nn_backend *b = m->b;
    if (rows < 1 || rows > m->B)
        return gt_error_set(err, GT_EINVAL, "gpu_model_train_step: %d rows (planned %d)", rows,
                            m->B);
    TRY(o->memset(b, m->grad, 0, m->np * sizeof(float), err));
    TRY(gpu_model_forward(m, rows, 1, err));
    nn_tensor out = F(m->out, rows, m->O), tgt = F(m->target, rows, m->O);
    TRY(o->mse_fwd(b, m->loss, out, tgt, err));
    TRY(o->mse_bwd(b, F(m->dout, rows, m->O), 1.0f, out, tgt, 0, err));
    TRY(gm_backward(m, rows, err));
    return o->adamw(b, m->param, m->pbf, m->grad, m->mm, m->vv, m->np, hp, err);
}

/* ------------------------------------------------------------------------ */
/* sampler                                                                  */
/* ------------------------------------------------------------------------ */

int gpu_model_sample_prepare(gpu_model *m, int steps, gt_error *err)
{
    const nn_backend_ops *o = m->o;
    nn_backend *b = m->b;
    int H = m->H, O = m->O, B = m->B;
    if (m->c.cond_dim != 2 || m->c.in_dim != O || steps < 1)
        return gt_error_set(err, GT_EINVAL,
                            "gpu_model_sample_prepare: needs cond_dim 2, in_dim == out_dim "
                            "and steps >= 1");
    if (m->steps)
        return gt_error_set(err, GT_EINVAL, "gpu_model_sample_prepare: already prepared");
    float dt = 1.0f / (float)steps;
    size_t nw = (size_t)O * H;
    ALLOC_F(m->w_out_dt, nw);
    ALLOC_F(m->b_out_dt, O);
    ALLOC_F(m->tcond, (size_t)steps * B);
    ALLOC_F(m->econd, B);
    if (m->bf16)
        ALLOC_H(m->w_out_dt_bf, nw);
    /* dt-scaled head, scaled on the host once (the vtable has no scale op) */
    float *h = (float *)malloc((nw + (size_t)O) * sizeof(float));
    if (!h)
        return gt_error_set(err, GT_ENOMEM, "gpu_model_sample_prepare: out of memory");
    int rc = o->copy_d2h(b, h, m->param + m->w_out, nw * sizeof(float), err);
    if (!rc)
        rc = o->copy_d2h(b, h + nw, m->param + m->b_out, (size_t)O * sizeof(float), err);
    for (size_t i = 0; !rc && i < nw + (size_t)O; i++)
        h[i] *= dt;
    if (!rc)
        rc = o->copy_h2d(b, m->w_out_dt, h, nw * sizeof(float), err);
    if (!rc)
        rc = o->copy_h2d(b, m->b_out_dt, h + nw, (size_t)O * sizeof(float), err);
    free(h);
    TRY(rc);
    if (m->bf16)
        TRY(o->cast_bf16(b, HB(m->w_out_dt_bf, O, H), F(m->w_out_dt, O, H), err));
    /* t_s = s dt for every row: uniform on [t, t) is exactly t */
    for (int s = 0; s < steps; s++)
        TRY(o->rand_fill(b, m->tcond + (size_t)s * B, (size_t)B, NN_DIST_UNIFORM, s * dt,
                         s * dt, 0, 9, 0, err));
    m->steps = steps;
    return GT_OK;
}

int gpu_model_sample(gpu_model *m, int rows, uint64_t seed, gt_error *err)
{
    const nn_backend_ops *o = m->o;
    nn_backend *b = m->b;
    const gpu_model_config *c = &m->c;
    int D = m->D, O = m->O, e = c->emb_dim;
    if (!m->steps)
        return gt_error_set(err, GT_EINVAL, "gpu_model_sample: call gpu_model_sample_prepare");
    if (rows < 1 || rows > m->B)
        return gt_error_set(err, GT_EINVAL, "gpu_model_sample: %d rows (planned %d)", rows,
                            m->B);
    /* x_0 ~ N(0, 1) into the state columns of xin */
    TRY(o->rand_fill(b, m->out, (size_t)rows * O, NN_DIST_NORMAL, 0.0f, 1.0f, seed, 1, 0, err));
    nn_tensor noise = F(m->out, rows, O);
    TRY(o->concat(b, FV(m->xin, rows, O, D), &noise, 1, err));
    /* incident energies (normalised) and their embedding, fixed per batch */
    TRY(o->rand_fill(b, m->econd, (size_t)rows, NN_DIST_UNIFORM, 0.1f, 1.0f, seed, 2, 0, err));
    TRY(o->embed_fwd(b, FV(m->xin + O, rows, e, D), F(m->econd, rows, 1), e, c->emb_scale,
                     c->emb_max_period, err));
    for (int s = 0; s < m->steps; s++) {
        TRY(o->embed_fwd(b, FV(m->xin + O + e, rows, e, D), F(m->tcond + (size_t)s * m->B, rows, 1),
                         e, c->emb_scale, c->emb_max_period, err));
        TRY(gm_core(m, rows, 0, 1, err));
    }
    return GT_OK;
}

float *gpu_model_sample_state(gpu_model *m, int *ld)
{
    if (ld)
        *ld = m->D;
    return m->xin;
}

double gpu_model_forward_flops(const gpu_model *m, int rows)
{
    double H = m->H, D = m->D, O = m->O, L = m->L;
    return 2.0 * rows * (D * H + L * 2.0 * H * H + H * O);
}

double gpu_model_train_flops(const gpu_model *m, int rows)
{
    /* forward + weight gradients (= forward) + input gradients of every
     * product but the first */
    return 3.0 * gpu_model_forward_flops(m, rows) - 2.0 * rows * (double)m->D * m->H;
}
