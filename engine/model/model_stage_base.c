/* model_stage_base: the stage trainer's plumbing, below every objective
 * (model_stage_internal.h): the trunk's shape for a stage, the stage
 * generator's uniforms, backend floats, a training batch and its noise, the
 * gradients' sum over the ranks, the padding of variable-length rows, and
 * the device part of a step run as one graph.  It calls nothing above it:
 * the objectives (model_obj_*.c) and the stage itself (model_stage.c)
 * build on it. */
#include "model_stage_internal.h"

void model_stage_trunk_config(const model_config *cfg, int stage, int dim, int n_cond,
                              nn_trunk_config *out)
{
    model_stage_trunk_config_ctx(cfg, stage, dim, n_cond, 0, out);
}

void model_stage_trunk_config_ctx(const model_config *cfg, int stage, int dim, int n_cond,
                                  int n_ctx, nn_trunk_config *out)
{
    const model_trunk_config *t = stage == 1 ? &cfg->stage1.trunk : &cfg->stage2.trunk;
    nn_trunk_config_default(out);
    out->kind = t->kind == MODEL_TRUNK_ROUTED ? NN_TRUNK_ROUTED : NN_TRUNK_EXPERT;
    out->skip = t->skip == MODEL_SKIP_GATED ? NN_SKIP_GATED : NN_SKIP_NONE;
    model_objective obj = stage == 1 ? cfg->stage1.objective : cfg->stage2.objective;
    out->in_dim = dim + n_ctx;
    /* a generator has no time input; flow and ddpm trunks see [t, c] */
    out->cond_dim = (obj == MODEL_OBJ_WGAN ? 0 : 1) + n_cond;
    out->emb_dim = t->emb_dim;
    /* time is a flow's or ddpm's first condition (refused for wgan by the
     * config's validation) */
    out->block_cond = t->block_cond == MODEL_BLOCK_COND_ALL    ? out->cond_dim
                      : t->block_cond == MODEL_BLOCK_COND_TIME ? 1
                                                               : 0;
    /* Conditions are O(1) (time in [0, 1], standardised energies); scaled by
     * 1000 they span the embedding's periods like diffusion timesteps do. */
    out->emb_scale = 1000.0f;
    out->emb_max_period = 10000.0f;
    out->hidden = t->hidden;
    out->blocks = t->blocks;
    out->out_dim = dim;
    out->n_experts = t->experts;
    out->top_k = t->top_k;
    out->balance_coef = (float)t->balance_weight;
    out->entropy_coef = (float)t->entropy_weight;
    out->precision = cfg->bf16 ? NN_BF16 : NN_F32;
}

void model_stage_uniforms(nn_rng *r, float *out, int n)
{
    uint64_t off = nn_rng_take(r, (uint64_t)n);
    uint32_t w[4];
    for (int i = 0; i < n; i++) {
        if (i % 4 == 0)
            nn_rng_block(r->seed, r->stream, off + (uint64_t)(i / 4), w);
        out[i] = nn_rng_uniform(w[i % 4]);
    }
}

int model_stage_alloc(model_stage *s, float **p, size_t n, gt_error *err)
{
    return nn_alloc(s->b, n * sizeof(float), (void **)p, err);
}

int model_stage_real_batch(model_stage *s, gt_error *err)
{
    const int B = s->batch, D = s->dim, C = s->n_cond, G = s->gbatch;
    /* the whole batch's indices (the generator's stream does not depend on
     * the ranks), this rank's share to the device */
    model_stage_uniforms(&s->rng, s->u_h, G);
    for (int i = 0; i < G; i++) {
        int k = (int)(s->u_h[i] * (float)s->n_train);
        s->idx_h[i] = k < s->n_train ? k : s->n_train - 1;
    }
    GT_TRY(nn_copy_h2d(s->b, s->idx, s->idx_h + s->lo, (size_t)B * sizeof(int32_t), err));
    GT_TRY(nn_gather_rows(s->b, nn_f32(s->x1, B, D), nn_f32(s->x_train, s->n_train, D), s->idx,
                          NULL, err));
    if (C)
        GT_TRY(nn_gather_rows(s->b, nn_f32(s->cdata, B, C), nn_f32(s->c_train, s->n_train, C),
                              s->idx, NULL, err));
    return GT_OK;
}

int model_stage_batch_noise(model_stage *s, gt_error *err)
{
    size_t n = (size_t)s->gbatch * s->dim;
    uint64_t off = nn_rng_take(&s->rng, n);
    if (!s->noise_part)
        return nn_rand_fill(s->b, s->x0, n, NN_DIST_NORMAL, 0.0f, 1.0f, s->rng.seed,
                            s->rng.stream, off, err);
    /* A shard: element e of the whole fill is lane e % 4 of block off + e / 4
     * (nn_rng.h), so the shard's elements [e0, e1) are a fill from the block
     * holding e0, less the e0 % 4 elements before it. */
    size_t e0 = (size_t)s->lo * s->dim, e1 = e0 + (size_t)s->batch * s->dim;
    size_t a = e0 - e0 % 4;
    GT_TRY(nn_rand_fill(s->b, s->noise_part, e1 - a, NN_DIST_NORMAL, 0.0f, 1.0f, s->rng.seed,
                        s->rng.stream, off + a / 4, err));
    return nn_copy_d2d(s->b, s->x0, s->noise_part + (e0 - a), (e1 - e0) * sizeof(float), err);
}

int model_stage_allreduce_grads(model_stage *s, nn_params *p, gt_error *err)
{
    if (dist_size(s->comm) == 1)
        return GT_OK;
    return dist_allreduce_sum(s->comm, p->grad, p->count, err);
}

/* One memset per padded range: cheap next to a trunk pass, and it keeps the
 * noise of padding at exactly 0. */
int model_stage_zero_padding(model_stage *s, float *x, const int32_t *valid,
                             const int32_t *idx, int rows, gt_error *err)
{
    const int D = s->dim;
    for (int i = 0; i < rows; i++) {
        const int32_t *v = valid + 2 * (size_t)(idx ? idx[i] : i);
        float *r = x + (size_t)i * D;
        if (v[0] > 0)
            GT_TRY(nn_memset(s->b, r, 0, (size_t)v[0] * sizeof(float), err));
        if (v[1] < D)
            GT_TRY(nn_memset(s->b, r + v[1], 0, (size_t)(D - v[1]) * sizeof(float), err));
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* the device part of a step as one graph                                   */
/* ------------------------------------------------------------------------ */

void model_stage_set_graphs(model_stage *s, int on)
{
    nn_graph_reset(s->b, &s->graph);
    s->graphs_on = on != 0;
}

long long model_stage_graph_replays(const model_stage *s) { return s->graph.replays; }

int model_stage_run_device(model_stage *s, nn_graph_fn fn, gt_error *err)
{
    /* one rank (a collective inside a graph is left for when it can be
     * measured) and an expert trunk (a routed one groups rows per expert
     * on the host) */
    if (s->graphs_on && dist_size(s->comm) == 1 &&
        nn_trunk_get_config(s->trunk)->kind == NN_TRUNK_EXPERT)
        return nn_graph_run(s->b, &s->graph, fn, s, err);
    return fn(s, err);
}
