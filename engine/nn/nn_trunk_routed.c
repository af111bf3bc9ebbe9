/* nn_trunk_routed.c: the routed trunk: an fp32 gate (linear, softmax,
 * top-k with renormalised weights), rows gathered per expert (padded to
 * NN_ROUTE_BUCKET), each expert's forward, and the gate-weighted
 * scatter-add; the backward through all of it and the router losses. */
#include "nn_trunk_expert.h"
#include "nn_trunk_routed.h"

#include <string.h>

static int zero_rows(nn_trunk *t, nn_tensor y, gt_error *err)
{
    if (y.ld == y.cols)
        return nn_memset(t->b, y.data, 0, (size_t)y.rows * y.cols * sizeof(float), err);
    for (int i = 0; i < y.rows; i++)
        GT_TRY(nn_memset(t->b, nn_tensor_rows(y, i, 1).data, 0, (size_t)y.cols * sizeof(float),
                      err));
    return GT_OK;
}

int nn_routed_forward(nn_trunk *t, int n, nn_tensor out, int training, gt_error *err)
{
    nn_backend *b = t->b;
    const nn_trunk_config *c = &t->cfg;
    int E = c->n_experts, K = c->top_k, D = t->D, O = c->out_dim;
    nn_tensor xin = T(t->xin, n, D);
    /* gate: fp32 input and fp32 master weights whatever the precision */
    nn_tensor logits = T(t->logits, n, E), probs = T(t->probs, n, E);
    if (t->packed && !training)
        GT_TRY(nn_linear_fixed(b, logits, xin, &t->pk[t->w_gate], P(t, t->b_gate), NN_ACT_NONE,
                            0, err));
    else
        GT_TRY(nn_matmul(b, logits, xin, 0, nn_params_value(&t->params, t->w_gate), 1,
                      P(t, t->b_gate), NN_ACT_NONE, 0, err));
    GT_TRY(nn_softmax_fwd(b, probs, logits, err));
    GT_TRY(nn_topk_fwd(b, t->idx, t->w, probs, K, err));
    /* dispatch lists on the host: rows grouped by expert, in row order */
    size_t nk = (size_t)n * K;
    GT_TRY(nn_copy_d2h(b, t->h_idx, t->idx, nk * sizeof(int32_t), err));
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
    GT_TRY(nn_copy_h2d(b, t->rows_d, t->h_rows, (size_t)nd * sizeof(int32_t), err));
    GT_TRY(nn_copy_h2d(b, t->pos_d, t->h_pos, (size_t)nd * sizeof(int32_t), err));
    GT_TRY(nn_copy_h2d(b, t->frac, t->h_frac, (size_t)E * sizeof(float), err));
    /* the gate weight of each dispatched row; 0 for padding rows */
    GT_TRY(nn_memset(b, t->scale_d, 0, (size_t)nd * sizeof(float), err));
    GT_TRY(zero_rows(t, out, err));
    for (int e = 0; e < E; e++) {
        expert *x = &t->ex[e];
        x->rows = 0;
        if (!cnt[e])
            continue;
        const int32_t *rows = t->rows_d + t->off[e];
        float *scale = t->scale_d + t->off[e];
        GT_TRY(nn_gather_rows(b, T(scale, cnt[e], 1), T(t->w, (int)nk, 1), t->pos_d + t->off[e],
                           NULL, err));
        GT_TRY(nn_gather_rows(b, T(x->x, pc[e], D), xin, rows, NULL, err));
        nn_tensor oe = T(x->out, pc[e], O);
        GT_TRY(nn_expert_forward(t, x, pc[e], oe, training, err));
        GT_TRY(nn_scatter_add_rows(b, out, nn_tensor_rows(oe, 0, cnt[e]), rows, scale, err));
    }
    /* auxiliary losses (fp32) for the trainer's log */
    float sc[2];
    GT_TRY(nn_balance_fwd(b, t->scalars, probs, t->frac, err));
    GT_TRY(nn_entropy_fwd(b, t->scalars + 1, probs, err));
    GT_TRY(nn_copy_d2h(b, sc, t->scalars, sizeof sc, err));
    t->stats.balance_loss = sc[0];
    t->stats.entropy_loss = sc[1];
    t->stats.n_experts = E;
    for (int e = 0; e < E; e++)
        t->stats.load[e] = t->cnt[e];
    return GT_OK;
}

int nn_routed_backward(nn_trunk *t, nn_tensor d_out, int want_dx, gt_error *err)
{
    nn_backend *b = t->b;
    const nn_trunk_config *c = &t->cfg;
    int n = t->fwd_rows, E = c->n_experts, K = c->top_k, D = t->D, O = c->out_dim;
    int nk = n * K;
    nn_tensor xin = T(t->xin, n, D);
    if (want_dx)
        GT_TRY(nn_memset(b, t->dxin, 0, (size_t)n * D * sizeof(float), err));
    GT_TRY(nn_memset(b, t->dw, 0, (size_t)nk * sizeof(float), err));
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
        GT_TRY(nn_gather_rows(b, de, d_out, rows, scale, err));
        GT_TRY(nn_gather_dot(b, dscale, d_out, rows, T(x->out, ne, O), err));
        GT_TRY(nn_expert_backward(t, x, de, want_dx ? t->dxe : NULL, err));
        if (want_dx)
            GT_TRY(nn_scatter_add_rows(b, T(t->dxin, n, D), T(t->dxe, ne, D), rows, NULL, err));
        /* back to slot order: dw[pos] = dscale */
        GT_TRY(nn_scatter_add_rows(b, T(t->dw, nk, 1), T(dscale, ne, 1), t->pos_d + t->off[e],
                                NULL, err));
    }
    nn_tensor probs = T(t->probs, n, E), dprobs = T(t->dprobs, n, E);
    GT_TRY(nn_topk_bwd(b, dprobs, t->dw, t->idx, t->w, probs, K, 0, err));
    if (c->balance_coef != 0.0f)
        GT_TRY(nn_balance_bwd(b, dprobs, c->balance_coef, t->frac, err));
    if (c->entropy_coef != 0.0f)
        GT_TRY(nn_entropy_bwd(b, dprobs, c->entropy_coef, probs, err));
    nn_tensor dlogits = T(t->dlogits, n, E);
    GT_TRY(nn_softmax_bwd(b, dlogits, dprobs, probs, err));
    GT_TRY(nn_matmul(b, WG(t, t->w_gate), dlogits, 1, xin, 0, NULL, NN_ACT_NONE, 1, err));
    GT_TRY(nn_bias_grad(b, PG(t, t->b_gate), dlogits, 1, err));
    if (want_dx)
        GT_TRY(nn_matmul(b, T(t->dxin, n, D), dlogits, 0, nn_params_value(&t->params, t->w_gate),
                      0, NULL, NN_ACT_NONE, 1, err));
    return GT_OK;
}
