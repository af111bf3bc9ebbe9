/* nn_trunk_internal: the trunk's state and the view helpers, at the bottom
 * of its three files, each of which calls only those below it:
 *   nn_trunk_expert.{h,c}  an expert trunk on an assembled input
 *   nn_trunk_routed.{h,c}  the gate and the dispatch over experts
 *   nn_trunk.c             configuration, parameters, the arena, the
 *                          public API (nn_trunk.h)
 * Not for use outside engine/nn. */
#ifndef NN_TRUNK_INTERNAL_H
#define NN_TRUNK_INTERNAL_H

#include "nn_trunk.h"

/* A routed expert runs on its rows padded up to a multiple of this (at
 * most the planned batch), so the matmul shapes an expert sees come from a
 * small set and the backend's per-shape plans (oneDNN primitives, cuBLASLt
 * heuristics) are all made during warm-up.  Padding rows repeat a real row
 * with gate weight 0: their gradient is exactly zero. */
#define NN_ROUTE_BUCKET 32

typedef struct ex_block {
    int ln_g, ln_b, w1, b1, w2, b2;   /* view indices */
    int wc;                           /* block_cond weight, -1 without */
} ex_block;

/* One expert trunk: its views and its share of the arena. */
typedef struct expert {
    int w_in, b_in, lnf_g, lnf_b, w_out, b_out;
    ex_block *blk;
    /* arena (planned batch B; N blocks; H hidden; D input; O output) */
    float *x;            /* B x D   input rows (gathered for a routed expert);
                          * NULL until needed when the trunk assembles
                          * straight into x_bf (nn_trunk.x_direct) */
    uint16_t *x_bf;      /* B x D   bf16 copy (bf16 precision) */
    float *h;            /* (N+1) x B x H residual stream */
    float *a;            /* N x B x H LayerNorm outputs (one B x H slot
                          * under bf16 precision: the backward reads a_bf) */
    uint16_t *a_bf;      /* N x B x H */
    float *z;            /* N x B x H pre-activations */
    float *s;            /* N x B x H SiLU outputs (one slot under bf16) */
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
    int w_skip, b_skip;  /* gated skip, -1 without */
    /* arena */
    void *arena;
    size_t arena_bytes;
    int batch;           /* planned rows */
    /* Under bf16 precision the arena saves each activation a GEMM reads
     * once, in bf16: a and s keep one fp32 slot (the cast's source), and
     * an expert trunk without the skip assembles its input straight into
     * x_bf (x_direct).  Buffers only some calls need are allocated on
     * their first use, outside the arena: the input gradients (dxin, dxe)
     * for a backward that wants d_x, and the fp32 input x of an x_direct
     * trunk for an fp32 forward.  Neither happens inside a captured
     * training step or sampler pass. */
    int x_direct;
    void *dx_mem;        /* dxin (and dxe), or NULL */
    void *x32_mem;       /* ex[0].x of an x_direct trunk, or NULL */
    float *emb;          /* B x cond_dim*emb_dim */
    float *xin;          /* B x D (routed; the expert kind uses ex[0].x) */
    float *dh, *dtmp, *da;     /* B x H gradient scratch */
    uint16_t *g_bf;      /* B x max(H, O) bf16 copy of a gradient */
    float *dxin;         /* B x D (dx_mem) */
    float *dxe;          /* B x D (dx_mem; routed: an expert's dxin) */
    float *de;           /* B x O (routed: gathered, scaled d_out) */
    float *logits, *probs, *dprobs, *dlogits;   /* B x E */
    int32_t *idx;                               /* B*k, slot order */
    float *w, *dw;                              /* B*k, slot order */
    int32_t *rows_d, *pos_d;                    /* dispatch order, padded */
    float *scale_d, *dscale_d;                  /* dispatch order, padded */
    float *frac;         /* E */
    float *scalars;      /* 4: balance, entropy, sumsq of x, of the embedding */
    float *skip_g;       /* B x O: the skip gate g(cond) of the last forward */
    float *skip_p;       /* B x O: product scratch */
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

/* Views of the activation arena and of the parameters. */
static inline nn_tensor T(float *p, int rows, int cols)
{
    return nn_f32(p, rows, cols);
}

static inline nn_tensor TH(uint16_t *p, int rows, int cols)
{
    return nn_tensor_make(p, NN_BF16, rows, cols);
}

static inline float *P(nn_trunk *t, int view)
{
    return t->params.value + t->params.views[view].offset;
}

static inline float *PG(nn_trunk *t, int view)
{
    return t->params.grad + t->params.views[view].offset;
}

static inline nn_tensor W(nn_trunk *t, int view)
{
    if (t->compute == NN_BF16)
        return nn_params_bf16(&t->params, view);
    return nn_params_value(&t->params, view);
}

static inline nn_tensor WG(nn_trunk *t, int view)
{
    return nn_params_grad(&t->params, view);
}

#endif
