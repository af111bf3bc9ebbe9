#include "model_critic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_rng.h"

#define MAX_DEPTH 16

struct model_critic {
    nn_backend *b;
    model_critic_config cfg;
    int batch, in0;      /* planned rows; input width in_dim + n_cond */
    int rows;            /* rows of the last forward */
    nn_params p;
    int w[MAX_DEPTH], bias[MAX_DEPTH], w_out, b_out; /* view indices */
    /* backend activations, batch rows */
    float *h0;                 /* [B, in0] */
    float *a[MAX_DEPTH];       /* pre-activations [B, H] */
    float *h[MAX_DEPTH];       /* post-activations [B, H] */
    float *v[MAX_DEPTH];       /* penalty: masked input-gradient chain [B, H] */
    float *g1, *g2;            /* [B, H] scratch */
    float *u0, *r0;            /* [B, in0] */
    float *ones, *out;         /* [B] */
    float *zeros, *nsq, *k;    /* [B]: the penalty's per-row norms and scales */
    int32_t *iota;             /* [B]: 0 .. B-1, the rows of gather_dot */
    /* host scratch, [B] */
    float *nsq_h, *k_h;
};

void model_critic_destroy(model_critic *c)
{
    if (!c)
        return;
    for (int l = 0; l < MAX_DEPTH; l++) {
        nn_free(c->b, c->a[l]);
        nn_free(c->b, c->h[l]);
        nn_free(c->b, c->v[l]);
    }
    float *bufs[] = {c->h0, c->g1, c->g2, c->u0, c->r0, c->ones, c->out, c->zeros, c->nsq, c->k};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        nn_free(c->b, bufs[i]);
    nn_free(c->b, c->iota);
    nn_params_free(&c->p);
    free(c->nsq_h);
    free(c->k_h);
    free(c);
}

static int falloc(model_critic *c, float **p, size_t n, gt_error *err)
{
    return nn_alloc(c->b, n * sizeof(float), (void **)p, err);
}

int model_critic_create(nn_backend *b, const model_critic_config *cfg, int batch,
                        model_critic **out, gt_error *err)
{
    *out = NULL;
    if (!b || !cfg)
        return gt_error_set(err, GT_EINVAL, "critic: NULL backend or config");
    if (cfg->in_dim < 1 || cfg->n_cond < 0 || cfg->hidden < 1 || cfg->depth < 1 ||
        cfg->depth > MAX_DEPTH || !(cfg->slope > 0.0f && cfg->slope < 1.0f) || batch < 1)
        return gt_error_set(err, GT_EINVAL,
                            "critic: need in_dim >= 1, n_cond >= 0, hidden >= 1, depth in "
                            "[1, %d], slope in (0, 1), batch >= 1 (got %d, %d, %d, %d, %g, %d)",
                            MAX_DEPTH, cfg->in_dim, cfg->n_cond, cfg->hidden, cfg->depth,
                            (double)cfg->slope, batch);
    model_critic *c = calloc(1, sizeof *c);
    if (!c)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    c->b = b;
    c->cfg = *cfg;
    c->batch = batch;
    c->in0 = cfg->in_dim + cfg->n_cond;
    const int H = cfg->hidden, B = batch;
    nn_params_init(&c->p, b);
    int rc = GT_OK;
    for (int l = 0; l < cfg->depth && !rc; l++) {
        char name[NN_PARAM_NAME_MAX];
        snprintf(name, sizeof name, "critic.%d.w", l);
        rc = nn_params_add(&c->p, name, H, l ? H : c->in0, 1, &c->w[l], err);
    }
    if (!rc)
        rc = nn_params_add(&c->p, "critic.out.w", 1, H, 1, &c->w_out, err);
    for (int l = 0; l < cfg->depth && !rc; l++) {
        char name[NN_PARAM_NAME_MAX];
        snprintf(name, sizeof name, "critic.%d.b", l);
        rc = nn_params_add(&c->p, name, 1, H, 0, &c->bias[l], err);
    }
    if (!rc)
        rc = nn_params_add(&c->p, "critic.out.b", 1, 1, 0, &c->b_out, err);
    if (rc || (rc = nn_params_alloc(&c->p, 0, err)))
        goto fail;
    for (int l = 0; l < cfg->depth; l++)
        if ((rc = falloc(c, &c->a[l], (size_t)B * H, err)) ||
            (rc = falloc(c, &c->h[l], (size_t)B * H, err)) ||
            (rc = falloc(c, &c->v[l], (size_t)B * H, err)))
            goto fail;
    if ((rc = falloc(c, &c->h0, (size_t)B * c->in0, err)) ||
        (rc = falloc(c, &c->g1, (size_t)B * (H > c->in0 ? H : c->in0), err)) ||
        (rc = falloc(c, &c->g2, (size_t)B * (H > c->in0 ? H : c->in0), err)) ||
        (rc = falloc(c, &c->u0, (size_t)B * c->in0, err)) ||
        (rc = falloc(c, &c->r0, (size_t)B * c->in0, err)) ||
        (rc = falloc(c, &c->ones, (size_t)B, err)) || (rc = falloc(c, &c->out, (size_t)B, err)) ||
        (rc = falloc(c, &c->zeros, (size_t)B, err)) || (rc = falloc(c, &c->nsq, (size_t)B, err)) ||
        (rc = falloc(c, &c->k, (size_t)B, err)) ||
        (rc = nn_alloc(b, (size_t)B * sizeof(int32_t), (void **)&c->iota, err)))
        goto fail;
    c->nsq_h = malloc((size_t)B * sizeof(float));
    c->k_h = malloc((size_t)B * sizeof(float));
    int32_t *iota_h = malloc((size_t)B * sizeof(int32_t));
    if (!c->nsq_h || !c->k_h || !iota_h) {
        free(iota_h);
        rc = gt_error_set(err, GT_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < B; i++) {
        c->k_h[i] = 1.0f;
        iota_h[i] = i;
    }
    rc = nn_copy_h2d(b, c->iota, iota_h, (size_t)B * sizeof(int32_t), err);
    free(iota_h);
    if (rc || (rc = nn_copy_h2d(b, c->ones, c->k_h, (size_t)B * sizeof(float), err)) ||
        (rc = nn_memset(b, c->zeros, 0, (size_t)B * sizeof(float), err)) ||
        (rc = nn_memset(b, c->r0, 0, (size_t)B * c->in0 * sizeof(float), err)))
        goto fail;
    *out = c;
    return GT_OK;
fail:
    model_critic_destroy(c);
    return rc;
}

nn_params *model_critic_params(model_critic *c) { return &c->p; }
const model_critic_config *model_critic_get_config(const model_critic *c) { return &c->cfg; }

int model_critic_init(model_critic *c, uint64_t seed, gt_error *err)
{
    nn_params *p = &c->p;
    nn_rng rng = nn_rng_make(seed, 0);
    GT_TRY(nn_memset(c->b, p->value, 0, p->count * sizeof(float), err));
    for (int i = 0; i < p->n_views; i++) {
        const nn_param_view *v = &p->views[i];
        if (!v->decay)
            continue;
        size_t n = (size_t)v->rows * v->cols;
        float sd = 1.0f / sqrtf((float)v->cols);
        GT_TRY(nn_rand_fill(c->b, p->value + v->offset, n, NN_DIST_NORMAL, 0.0f, sd, rng.seed,
                            rng.stream, nn_rng_take(&rng, n), err));
    }
    return GT_OK;
}

static nn_tensor val(const model_critic *c, int idx) { return nn_params_value(&c->p, idx); }
static nn_tensor grd(const model_critic *c, int idx) { return nn_params_grad(&c->p, idx); }

/* width of the input of layer l */
static int in_width(const model_critic *c, int l) { return l ? c->cfg.hidden : c->in0; }
static nn_tensor layer_input(const model_critic *c, int l, int rows)
{
    return l ? nn_f32(c->h[l - 1], rows, c->cfg.hidden) : nn_f32(c->h0, rows, c->in0);
}

int model_critic_forward(model_critic *c, nn_tensor x, nn_tensor cond, float *out,
                         gt_error *err)
{
    const int B = x.rows, H = c->cfg.hidden, L = c->cfg.depth;
    if (B < 1 || B > c->batch || x.cols != c->cfg.in_dim ||
        (c->cfg.n_cond && (cond.rows != B || cond.cols != c->cfg.n_cond)) || !out)
        return gt_error_set(err, GT_EINVAL,
                            "critic forward: x [%d, %d] (planned <= %d rows of %d), cond "
                            "[%d, %d] (want %d columns), out %p",
                            x.rows, x.cols, c->batch, c->cfg.in_dim, cond.rows, cond.cols,
                            c->cfg.n_cond, (void *)out);
    c->rows = B;
    nn_tensor parts[2] = {x, cond};
    GT_TRY(nn_concat(c->b, nn_f32(c->h0, B, c->in0), parts, c->cfg.n_cond ? 2 : 1, err));
    for (int l = 0; l < L; l++) {
        nn_tensor a = nn_f32(c->a[l], B, H);
        GT_TRY(nn_matmul(c->b, a, layer_input(c, l, B), 0, val(c, c->w[l]), 1,
                         (const float *)val(c, c->bias[l]).data, NN_ACT_NONE, 0, err));
        GT_TRY(nn_leaky_fwd(c->b, nn_f32(c->h[l], B, H), a, c->cfg.slope, err));
    }
    return nn_matmul(c->b, nn_f32(out, B, 1), nn_f32(c->h[L - 1], B, H), 0, val(c, c->w_out),
                     1, (const float *)val(c, c->b_out).data, NN_ACT_NONE, 0, err);
}

int model_critic_backward(model_critic *c, const float *dout, nn_tensor dx, gt_error *err)
{
    const int B = c->rows, H = c->cfg.hidden, L = c->cfg.depth;
    if (B < 1 || !dout)
        return gt_error_set(err, GT_EINVAL, "critic backward: no forward, or dout NULL");
    if (dx.data && (dx.rows != B || dx.cols != c->cfg.in_dim))
        return gt_error_set(err, GT_EINVAL, "critic backward: dx is [%d, %d], want [%d, %d]",
                            dx.rows, dx.cols, B, c->cfg.in_dim);
    nn_tensor d = nn_f32((float *)dout, B, 1);
    /* output layer: dw_out += dout^T h_L, db_out += sum dout, g = dout w_out */
    GT_TRY(nn_matmul(c->b, grd(c, c->w_out), d, 1, nn_f32(c->h[L - 1], B, H), 0, NULL,
                     NN_ACT_NONE, 1, err));
    GT_TRY(nn_bias_grad(c->b, (float *)grd(c, c->b_out).data, d, 1, err));
    float *g = c->g1, *gn = c->g2;
    GT_TRY(nn_matmul(c->b, nn_f32(g, B, H), d, 0, val(c, c->w_out), 0, NULL, NN_ACT_NONE, 0, err));
    for (int l = L - 1; l >= 0; l--) {
        nn_tensor ga = nn_f32(g, B, H);
        GT_TRY(nn_leaky_bwd(c->b, ga, ga, nn_f32(c->a[l], B, H), c->cfg.slope, err));
        GT_TRY(nn_matmul(c->b, grd(c, c->w[l]), ga, 1, layer_input(c, l, B), 0, NULL, NN_ACT_NONE,
                         1, err));
        GT_TRY(nn_bias_grad(c->b, (float *)grd(c, c->bias[l]).data, ga, 1, err));
        if (l == 0 && !dx.data)
            break;
        GT_TRY(nn_matmul(c->b, nn_f32(gn, B, in_width(c, l)), ga, 0, val(c, c->w[l]), 0, NULL,
                         NN_ACT_NONE, 0, err));
        float *t = g;
        g = gn;
        gn = t;
    }
    if (dx.data) {
        /* g holds dL/dh0 = [dL/dx ; dL/dc]: keep the data columns */
        nn_tensor parts[2] = {dx, nn_f32(NULL, B, c->cfg.n_cond)};
        GT_TRY(nn_split(c->b, parts, c->cfg.n_cond ? 2 : 1, nn_f32(g, B, c->in0), 0, err));
    }
    return GT_OK;
}

int model_critic_penalty(model_critic *c, float lambda, float *penalty, float *mean_norm,
                         gt_error *err)
{
    const int B = c->rows, H = c->cfg.hidden, L = c->cfg.depth, D = c->cfg.in_dim;
    const int in0 = c->in0;
    if (B < 1 || !penalty || !(lambda >= 0.0f) || !isfinite(lambda))
        return gt_error_set(err, GT_EINVAL,
                            "critic penalty: no forward, NULL penalty or bad lambda %g",
                            (double)lambda);
    nn_tensor ones = nn_f32(c->ones, B, 1);
    /* The input gradient as a forward chain: u_L = w_out (every row),
     * v_l = M_l u_l (leaky_bwd applies the mask), u_{l-1} = v_l W_l. */
    float *u = c->g1;
    GT_TRY(nn_matmul(c->b, nn_f32(u, B, H), ones, 0, val(c, c->w_out), 0, NULL, NN_ACT_NONE, 0,
                     err));
    for (int l = L - 1; l >= 0; l--) {
        nn_tensor vl = nn_f32(c->v[l], B, H);
        GT_TRY(nn_leaky_bwd(c->b, vl, nn_f32(u, B, H), nn_f32(c->a[l], B, H), c->cfg.slope, err));
        float *dst = l ? c->g1 : c->u0;
        GT_TRY(nn_matmul(c->b, nn_f32(dst, B, in_width(c, l)), vl, 0, val(c, c->w[l]), 0, NULL,
                         NN_ACT_NONE, 0, err));
        u = dst;
    }
    /* Per-row norms over the data columns: the squares summed on the
     * device (fp32 out, the sum itself in double on the CPU), the B norms
     * and scales on the host in double, and r_0 = k_i g_i back on the
     * device (0 on condition columns):
     * dP/dg_i = (2 lambda / B) (|g_i| - 1) g_i / |g_i|.  Only 2 B floats
     * cross to the host, not the B x in0 gradient twice (a GPU's step
     * time went to those copies). */
    nn_tensor g = nn_tensor_cols(nn_f32(c->u0, B, in0), 0, D);
    GT_TRY(nn_gather_dot(c->b, c->nsq, g, c->iota, g, err));
    GT_TRY(nn_copy_d2h(c->b, c->nsq_h, c->nsq, (size_t)B * sizeof(float), err));
    double pen = 0, nsum = 0;
    for (int i = 0; i < B; i++) {
        double n = sqrt((double)c->nsq_h[i]);
        pen += (n - 1) * (n - 1);
        nsum += n;
        c->k_h[i] = (float)(n > 0 ? 2.0 * lambda * (n - 1) / (n * B) : 0.0);
    }
    *penalty = (float)(lambda * pen / B);
    if (mean_norm)
        *mean_norm = (float)(nsum / B);
    GT_TRY(nn_copy_h2d(c->b, c->k, c->k_h, (size_t)B * sizeof(float), err));
    /* r0's condition columns stay 0 from creation */
    GT_TRY(nn_axpby_rows(c->b, nn_tensor_cols(nn_f32(c->r0, B, in0), 0, D), c->k, g, c->zeros, g,
                         err));
    /* Back through the chain, from u_0 up to u_L = w_out:
     *   dW_l += v_l^T r_{l-1};  r_l = M_l (r_{l-1} W_l^T);  dw_out += sum_i r_L.
     * The masks are constant almost everywhere and the biases never enter
     * the chain, so this is the whole gradient of P. */
    float *r = c->r0, *rn = c->g2;
    for (int l = 0; l < L; l++) {
        nn_tensor rin = nn_f32(r, B, in_width(c, l));
        GT_TRY(nn_matmul(c->b, grd(c, c->w[l]), nn_f32(c->v[l], B, H), 1, rin, 0, NULL,
                         NN_ACT_NONE, 1, err));
        nn_tensor ro = nn_f32(rn, B, H);
        GT_TRY(nn_matmul(c->b, ro, rin, 0, val(c, c->w[l]), 1, NULL, NN_ACT_NONE, 0, err));
        GT_TRY(nn_leaky_bwd(c->b, ro, ro, nn_f32(c->a[l], B, H), c->cfg.slope, err));
        r = rn;
        rn = rn == c->g2 ? c->g1 : c->g2;
    }
    return nn_bias_grad(c->b, (float *)grd(c, c->w_out).data, nn_f32(r, B, H), 1, err);
}
