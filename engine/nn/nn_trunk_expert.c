/* nn_trunk_expert.c: one expert trunk on an assembled input
 * xin = x ++ embed(cond): linear -> blocks x {h += W2 SiLU(W1 LN(h) + b1
 * [+ Wc embed(cond[:, :block_cond])]) + b2} -> LN -> linear, forward and
 * hand-written backward.  Inference forwards of a packed trunk run the
 * fixed-order linear layer. */
#include "nn_trunk_expert.h"

/* The matmul operand for an fp32 activation: itself, or its bf16 copy
 * (written here) under bf16 precision. */
static int operand(nn_trunk *t, nn_tensor f, uint16_t *bf, nn_tensor *out, gt_error *err)
{
    if (!bf || t->compute != NN_BF16) {
        *out = f;
        return GT_OK;
    }
    nn_tensor h = TH(bf, f.rows, f.cols);
    GT_TRY(nn_cast_bf16(t->b, h, f, err));
    *out = h;
    return GT_OK;
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
int nn_expert_forward(nn_trunk *t, expert *e, int n, nn_tensor out, int training,
                      gt_error *err)
{
    nn_backend *b = t->b;
    const nn_trunk_config *c = &t->cfg;
    int H = c->hidden, N = c->blocks, B = t->batch;
    float eps = c->ln_eps;
    size_t BH = (size_t)B * H;
    int bf = t->compute == NN_BF16;
    nn_tensor X;
    if (t->x_direct && t->compute == NN_BF16)
        X = TH(e->x_bf, n, t->D);   /* assembled there (nn_trunk.c) */
    else
        GT_TRY(operand(t, T(e->x, n, t->D), e->x_bf, &X, err));
    /* the embeddings the blocks see (block_cond): columns of the input */
    nn_tensor E = nn_tensor_cols(X, c->in_dim, c->block_cond * c->emb_dim);
    nn_tensor h0 = T(e->h, n, H);
    GT_TRY(linear(t, training, h0, X, e->w_in, P(t, e->b_in), NN_ACT_NONE, 0, err));
    nn_tensor hl = h0;
    for (int l = 0; l < N; l++) {
        const ex_block *k = &e->blk[l];
        size_t lo = training ? (size_t)l : 0;   /* inference reuses slot 0 */
        /* under bf16 the backward reads the bf16 copies: one fp32 slot */
        size_t lo32 = c->precision == NN_BF16 ? 0 : lo;
        /* under bf16, LayerNorm writes its bf16 output itself (the same
         * bits as fp32 then cast_bf16, one pass fewer) */
        nn_tensor A = bf ? TH(e->a_bf + lo * BH, n, H) : T(e->a + lo32 * BH, n, H);
        GT_TRY(nn_ln_fwd(b, A, e->mean + lo * B, e->rstd + lo * B, hl, P(t, k->ln_g),
                      P(t, k->ln_b), eps, err));
        nn_tensor s = T(e->s + lo32 * BH, n, H), S;
        if (training) {
            nn_tensor z = T(e->z + lo * BH, n, H);
            GT_TRY(nn_matmul(b, z, A, 0, W(t, k->w1), 1, P(t, k->b1), NN_ACT_NONE, 0, err));
            if (k->wc >= 0)
                GT_TRY(nn_matmul(b, z, E, 0, W(t, k->wc), 1, NULL, NN_ACT_NONE, 1, err));
            S = bf ? TH(e->s_bf + lo * BH, n, H) : s;   /* SiLU likewise */
            GT_TRY(nn_silu_fwd(b, S, z, err));
        } else if (k->wc >= 0) {
            /* the block's input, then the conditions' term added (each a
             * fixed-order layer when packed; the order of the training
             * forward), then SiLU, written in bf16 directly under bf16
             * (the bits of fp32 then cast_bf16) */
            nn_tensor z = T(e->z, n, H);
            GT_TRY(linear(t, training, z, A, k->w1, P(t, k->b1), NN_ACT_NONE, 0, err));
            GT_TRY(linear(t, training, z, E, k->wc, NULL, NN_ACT_NONE, 1, err));
            S = bf && e->s_bf ? TH(e->s_bf, n, H) : s;
            GT_TRY(nn_silu_fwd(b, S, z, err));
        } else if (t->packed && bf && e->s_bf) {
            /* the packed layer applies SiLU in its own pass and writes the
             * bf16 operand of the next product there (s is its scratch) */
            S = TH(e->s_bf, n, H);
            GT_TRY(nn_linear_fixed_bf16(b, S, s, A, &t->pk[k->w1], P(t, k->b1), NN_ACT_SILU,
                                        err));
        } else {
            /* the packed layer applies SiLU in its own kernel */
            GT_TRY(linear(t, training, s, A, k->w1, P(t, k->b1), NN_ACT_SILU, 0, err));
            GT_TRY(operand(t, s, e->s_bf ? e->s_bf + lo * BH : NULL, &S, err));
        }
        nn_tensor hn = hl;
        if (training) {
            /* keep h_l for the LayerNorm backward: h_{l+1} = h_l + ... */
            hn = T(e->h + (size_t)(l + 1) * BH, n, H);
            GT_TRY(nn_copy_d2d(b, hn.data, hl.data, (size_t)n * H * sizeof(float), err));
        }
        GT_TRY(linear(t, training, hn, S, k->w2, P(t, k->b2), NN_ACT_NONE, 1, err));
        hl = hn;
    }
    size_t lf = training ? (size_t)N : 0;
    nn_tensor AF = bf ? TH(e->af_bf, n, H) : T(e->af, n, H);
    GT_TRY(nn_ln_fwd(b, AF, e->mean + lf * B, e->rstd + lf * B, hl, P(t, e->lnf_g),
                  P(t, e->lnf_b), eps, err));
    GT_TRY(linear(t, training, out, AF, e->w_out, P(t, e->b_out), NN_ACT_NONE, 0, err));
    e->rows = n;
    return GT_OK;
}

/* d_out[n, O] -> parameter grads (+=), and dxin[n, D] when not NULL. */
int nn_expert_backward(nn_trunk *t, expert *e, nn_tensor d_out, float *dxin, gt_error *err)
{
    nn_backend *b = t->b;
    const nn_trunk_config *c = &t->cfg;
    int H = c->hidden, N = c->blocks, n = e->rows, B = t->batch;
    size_t BH = (size_t)B * H;
    nn_tensor G, AF, X;
    /* output head */
    GT_TRY(operand(t, d_out, t->g_bf, &G, err));
    int bf = t->compute == NN_BF16;
    X = bf ? TH(e->x_bf, n, t->D) : T(e->x, n, t->D);
    nn_tensor E = nn_tensor_cols(X, c->in_dim, c->block_cond * c->emb_dim);
    AF = bf ? TH(e->af_bf, n, H) : T(e->af, n, H);
    GT_TRY(nn_matmul(b, WG(t, e->w_out), G, 1, AF, 0, NULL, NN_ACT_NONE, 1, err));
    GT_TRY(nn_bias_grad(b, PG(t, e->b_out), d_out, 1, err));
    nn_tensor daf = T(t->da, n, H);
    GT_TRY(nn_matmul(b, daf, G, 0, W(t, e->w_out), 0, NULL, NN_ACT_NONE, 0, err));
    nn_tensor dh = T(t->dh, n, H);
    GT_TRY(nn_ln_bwd(b, dh, PG(t, e->lnf_g), PG(t, e->lnf_b), daf, T(e->h + (size_t)N * BH, n, H),
                  e->mean + (size_t)N * B, e->rstd + (size_t)N * B, P(t, e->lnf_g), 0, err));
    /* blocks, last to first; dh carries the residual gradient */
    for (int l = N - 1; l >= 0; l--) {
        const ex_block *k = &e->blk[l];
        size_t lo = (size_t)l;
        nn_tensor S = bf ? TH(e->s_bf + lo * BH, n, H) : T(e->s + lo * BH, n, H);
        nn_tensor A = bf ? TH(e->a_bf + lo * BH, n, H) : T(e->a + lo * BH, n, H);
        GT_TRY(operand(t, dh, t->g_bf, &G, err));
        GT_TRY(nn_matmul(b, WG(t, k->w2), G, 1, S, 0, NULL, NN_ACT_NONE, 1, err));
        GT_TRY(nn_bias_grad(b, PG(t, k->b2), dh, 1, err));
        nn_tensor ds = T(t->dtmp, n, H);
        GT_TRY(nn_matmul(b, ds, G, 0, W(t, k->w2), 0, NULL, NN_ACT_NONE, 0, err));
        GT_TRY(nn_silu_bwd(b, ds, ds, T(e->z + lo * BH, n, H), err));
        GT_TRY(operand(t, ds, t->g_bf, &G, err));
        GT_TRY(nn_matmul(b, WG(t, k->w1), G, 1, A, 0, NULL, NN_ACT_NONE, 1, err));
        if (k->wc >= 0)   /* the conditions get no gradient (d_x is x's alone) */
            GT_TRY(nn_matmul(b, WG(t, k->wc), G, 1, E, 0, NULL, NN_ACT_NONE, 1, err));
        GT_TRY(nn_bias_grad(b, PG(t, k->b1), ds, 1, err));
        nn_tensor da = T(t->da, n, H);
        GT_TRY(nn_matmul(b, da, G, 0, W(t, k->w1), 0, NULL, NN_ACT_NONE, 0, err));
        GT_TRY(nn_ln_bwd(b, dh, PG(t, k->ln_g), PG(t, k->ln_b), da, T(e->h + lo * BH, n, H),
                      e->mean + lo * B, e->rstd + lo * B, P(t, k->ln_g), 1, err));
    }
    /* input projection */
    GT_TRY(operand(t, dh, t->g_bf, &G, err));
    GT_TRY(nn_matmul(b, WG(t, e->w_in), G, 1, X, 0, NULL, NN_ACT_NONE, 1, err));
    GT_TRY(nn_bias_grad(b, PG(t, e->b_in), dh, 1, err));
    if (dxin)
        GT_TRY(nn_matmul(b, T(dxin, n, t->D), G, 0, W(t, e->w_in), 0, NULL, NN_ACT_NONE, 0, err));
    return GT_OK;
}
