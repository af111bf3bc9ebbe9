/* model_sampler_batch: showers a device batch at a time
 * (model_sampler_internal.h): one stage's integration through its
 * objective's hook, as the graph of its shape where the backend has graphs;
 * a batch through stage 1, stage 2 (oneshot here, autoregressive in
 * model_sampler_ar.c) and the decoding; the requests cut into batches. */
#include "model_sampler_internal.h"

#include <math.h>
#include <string.h>

#include "gt_clock.h"

void model_sampler_graphs_clear(model_sampler *s)
{
    for (int i = 0; i < GRAPH_MAX; i++) {
        nn_graph_reset(s->b, &s->graphs[i].graph);
        memset(&s->graphs[i], 0, sizeof s->graphs[i]);
    }
}

/* Whether the integration of stage net n can be a graph: on a backend with
 * graphs, for an expert trunk (a routed one groups rows per expert on the
 * host) of a oneshot stage (an autoregressive layer's row count changes
 * from layer to layer and batch to batch: no shape would repeat). */
static int graph_fits(const model_sampler *s, const model_sampler_net *n)
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
    model_sampler_net *n;
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
    int rc = it->n->ops->integrate(s, it->n, it->rows, it->steps, &it->evals, err);
    /* a step constant uploaded into scratch would replay as it was this
     * time; a shape whose eager run failed is not tried as a graph */
    if (rc || s->const_misses != misses)
        nn_graph_refuse(&it->slot->graph);
    return rc;
}

/* The integration of stage (1 or 2) for `rows` rows, on a backend with graphs
 * through the graph of its shape once the shape has run (graph_fits);
 * elsewhere, and for shapes that cannot be graphs, as it is.  Same
 * kernels, same order, so the same bytes either way. */
static int run_integrate(model_sampler *s, int stage, int rows, int steps, double *evals,
                         gt_error *err)
{
    model_sampler_net *n = &s->net[stage - 1];
    if (!graph_fits(s, n))
        return n->ops->integrate(s, n, rows, steps, evals, err);
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
    s->tally.graph_replays += g->graph.replays - replays;
    return rc;
}

static int run_batch(model_sampler *s, model_sample_request *reqs, const model_sampler_piece *p,
                     int np, int rows, int steps, gt_error *err)
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
    if ((rc = model_sampler_check_finite(p, np, s->c1_h, rows, 1, NULL,
                                         "the stage-1 conditions are not finite", err)) ||
        (rc = nn_copy_h2d(s->b, s->c, s->c1_h, (size_t)rows * sizeof(float), err)) ||
        (rc = model_sampler_fill_noise(s, reqs, p, np, 1, D1, err)) ||
        (rc = run_integrate(s, 1, rows, steps, &ev1, err)) ||
        (rc = nn_copy_d2h(s->b, s->x1_h, s->x, (size_t)rows * D1 * sizeof(float), err)))
        return rc;
    s->tally.device_s += gt_clock_s() - t_dev;
    if ((rc = model_sampler_check_finite(p, np, s->x1_h, rows, D1, NULL, DIVERGED " in stage 1",
                                         err)))
        return rc;
    model_repr_energy(&s->repr, s->e_inc_h, s->c1_h, s->x1_h, rows, s->edep_h, s->c2_h);
    if ((rc = model_sampler_check_finite(p, np, s->edep_h, rows, 1, NULL,
                                         "the deposited energy is not finite", err)) ||
        (rc = model_sampler_check_finite(p, np, s->c2_h, rows, C2, NULL,
                                         "the stage-2 conditions are not finite", err)))
        return rc;
    /* stage 2: shower (autoregressive: the host's share of each layer
     * counts as the device's here) */
    t_dev = gt_clock_s();
    if (s->ar) {
        if ((rc = model_sampler_ar_run(s, reqs, p, np, rows, steps, &evals, &flops, err)))
            return rc;
        s->tally.device_s += gt_clock_s() - t_dev;
    } else {
        if ((rc = nn_copy_h2d(s->b, s->c, s->c2_h, (size_t)rows * C2 * sizeof(float), err)) ||
            (rc = model_sampler_fill_noise(s, reqs, p, np, 2, D2, err)) ||
            (rc = run_integrate(s, 2, rows, steps, &ev2, err)) ||
            (rc = nn_copy_d2h(s->b, s->x2_h, s->x, (size_t)rows * D2 * sizeof(float), err)))
            return rc;
        s->tally.device_s += gt_clock_s() - t_dev;
        if ((rc = model_sampler_check_finite(p, np, s->x2_h, rows, D2, NULL,
                                             DIVERGED " in stage 2", err)))
            return rc;
    }
    const double t_decode = gt_clock_s();
    for (int i = 0; i < np; i++) {
        model_sample_request *q = &reqs[p[i].req];
        float *x2 = s->x2_h + (size_t)p[i].at * D2;
        const float *ed = s->edep_h + p[i].at;
        model_repr_showers(&s->repr, x2, ed, p[i].rows, q->showers + (size_t)p[i].first * V);
        if (s->cfg.symmetrize)
            model_sampler_turn(s, q, p[i].first, p[i].rows);
        if (q->e_dep)
            memcpy(q->e_dep + p[i].first, ed, (size_t)p[i].rows * sizeof(float));
    }
    s->tally.decode_s += gt_clock_s() - t_decode;
    /* evals counts per-shower evaluations of this batch (all rows for
     * oneshot; the active share of each layer for autoregressive) */
    evals += ev1 + ev2;
    flops += ev1 * row_flops(&s->net[0]) + ev2 * row_flops(&s->net[1]);
    s->tally.evals_sum += evals * rows;
    s->tally.flops_sum += flops * rows;
    s->tally.evals_rows += rows;
    return GT_OK;
}

int model_sampler_batches(model_sampler *s, model_sample_request *reqs, int n_reqs, int steps,
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
    model_sampler_piece p[256];
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
            p[np++] = (model_sampler_piece){r, done, take, used};
            used += take;
            done += take;
        }
    }
    if (np)
        return run_batch(s, reqs, p, np, used, steps, err);
    return GT_OK;
}
