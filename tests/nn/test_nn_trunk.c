/* Trunks, AdamW and checkpoints on the CPU backend:
 *  - expert and routed trunk gradients (every parameter tensor, and d_x)
 *    against central finite differences of L = sum(r * out) (+ the router
 *    losses times their coefficients for the routed trunk), step 1e-2,
 *    tolerance atol 3e-3 + rtol 3e-2 (fp32 forward; see test_nn_ops.c for
 *    the error budget).  For the routed trunk the top-k selection is held
 *    fixed: an element whose perturbation changes the expert loads is
 *    skipped (counted, and most must remain);
 *  - routed output dtype/shape equal to the expert trunk's; router stats;
 *  - no allocation during training steps (backend allocation counter);
 *  - save, reload, continue == uninterrupted, bit for bit (fp32 and bf16);
 *  - bad input: NaN, shapes, dtypes, planning, checkpoint corruption. */
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "check.h"
#include "nn_adamw.h"
#include "nn_ckpt.h"
#include "nn_trunk.h"
#include "nn_fixture.h"

#define FD_ATOL 3e-3
#define FD_RTOL 3e-2

static nn_backend *B;
static gt_error E;

static uint64_t lcg = 1234567;
static float frand(void) { return nnfx_frand(&lcg); }

static float *buf(size_t n)
{
    void *p = NULL;
    MUST(nn_alloc(B, (n ? n : 1) * sizeof(float), &p, &E));
    return p;
}

static float *rbuf(size_t n, float s)
{
    float *p = buf(n);
    nnfx_fill(p, n, s, &lcg);
    return p;
}

static void small_config(nn_trunk_config *c, nn_trunk_kind kind)
{
    nnfx_trunk_config(c, kind, 5, 8, 3);
    c->balance_coef = 0.3f;
    c->entropy_coef = 0.2f;
}

/* A trunk of config c on backend b, initialised (seed, out_scale) and
 * planned for up to rows rows; a step that fails stops the test. */
static nn_trunk *ready_trunk(nn_backend *b, const nn_trunk_config *c, uint64_t seed,
                             float out_scale, int rows)
{
    nn_trunk *t = NULL;
    MUST(nn_trunk_create(b, c, &t, &E));
    MUST(nn_trunk_init(t, seed, out_scale, &E));
    MUST(nn_trunk_plan(t, rows, &E));
    return t;
}

/* ------------------------------------------------------------------------ */
/* finite differences through a whole trunk                                 */
/* ------------------------------------------------------------------------ */

enum { NR = 7 };
static nn_trunk *T_;
static float *TX, *TC, *TO, *TR;

static double trunk_loss(int *load_out)
{
    MUST(nn_trunk_forward(T_, nn_f32(TX, NR, 5), nn_f32(TC, NR, 2), nn_f32(TO, NR, 3), 1, &E));
    double s = 0;
    for (int i = 0; i < NR * 3; i++)
        s += (double)TO[i] * TR[i];
    const nn_trunk_config *c = nn_trunk_get_config(T_);
    if (c->kind == NN_TRUNK_ROUTED) {
        nn_router_stats st;
        MUST(nn_trunk_router_stats(T_, &st, &E));
        s += c->balance_coef * st.balance_loss + c->entropy_coef * st.entropy_loss;
        if (load_out)
            memcpy(load_out, st.load, sizeof(int) * (size_t)c->n_experts);
    }
    return s;
}

static void fd_trunk(nn_trunk_kind kind, nn_trunk_skip skip, int block_cond)
{
    nn_trunk_config c;
    small_config(&c, kind);
    c.skip = skip;
    c.block_cond = block_cond;
    char what[64];
    snprintf(what, sizeof what, "%s%s%s", kind == NN_TRUNK_ROUTED ? "routed" : "expert",
             skip ? "+skip" : "", block_cond ? "+block_cond" : "");
    T_ = ready_trunk(B, &c, 5, 1.0f, NR);
    nn_params *p = nn_trunk_params(T_);
    /* biases, LayerNorm params and the skip (zero at init) away from their
     * init so they matter */
    for (int v = 0; v < p->n_views; v++) {
        const nn_param_view *vw = &p->views[v];
        int is_skip = !strncmp(vw->name, "skip.", 5) || strstr(vw->name, ".cond.w");
        if (!vw->decay || is_skip)
            for (int i = 0; i < vw->rows * vw->cols; i++)
                p->value[vw->offset + i] += (is_skip ? 0.5f : 0.2f) * frand();
    }
    if (skip)
        CHECK(nn_trunk_forward_flops(T_, 1) > 0.0);
    TX = rbuf(NR * 5, 1.0f);
    TC = rbuf(NR * 2, 1.0f);
    TO = buf(NR * 3);
    TR = rbuf(NR * 3, 1.0f);
    float *dx = buf(NR * 5);
    int load0[NN_TRUNK_MAX_EXPERTS] = {0}, load[NN_TRUNK_MAX_EXPERTS];
    trunk_loss(load0);
    MUST(nn_params_zero_grad(p, &E));
    MUST(nn_trunk_backward(T_, nn_f32(TR, NR, 3), nn_f32(dx, NR, 5), &E));
    /* copy the analytic grads: the FD forwards do not touch them, but keep
     * the check independent of that */
    float *g = malloc(p->count * sizeof(float));
    memcpy(g, p->grad, p->count * sizeof(float));
    int bad = 0, skipped = 0, checked = 0;
    const float h = 1e-2f;
    for (int v = 0; v < p->n_views; v++) {
        const nn_param_view *vw = &p->views[v];
        size_t n = (size_t)vw->rows * vw->cols;
        /* every element of small tensors, a stride through larger ones */
        size_t step = n > 40 ? n / 17 + 1 : 1;
        for (size_t i = 0; i < n; i += step) {
            float *x = &p->value[vw->offset + i];
            float keep = *x;
            *x = keep + h;
            double lp = trunk_loss(load);
            int moved = memcmp(load, load0, sizeof(int) * (size_t)c.n_experts) != 0;
            *x = keep - h;
            double lm = trunk_loss(load);
            moved |= memcmp(load, load0, sizeof(int) * (size_t)c.n_experts) != 0;
            *x = keep;
            if (kind == NN_TRUNK_ROUTED && moved) {
                skipped++;
                continue;
            }
            double fd = (lp - lm) / (2.0 * h), an = g[vw->offset + i];
            checked++;
            if (!(fabs(an - fd) <= FD_ATOL + FD_RTOL * fabs(fd)) && bad++ < 5)
                fprintf(stderr, "%s grad %s[%zu]: analytic %.6g, fd %.6g\n", what, vw->name,
                        i, an, fd);
        }
    }
    for (int i = 0; i < NR * 5; i++) {
        float keep = TX[i];
        TX[i] = keep + h;
        double lp = trunk_loss(load);
        int moved = memcmp(load, load0, sizeof(int) * (size_t)c.n_experts) != 0;
        TX[i] = keep - h;
        double lm = trunk_loss(load);
        moved |= memcmp(load, load0, sizeof(int) * (size_t)c.n_experts) != 0;
        TX[i] = keep;
        if (kind == NN_TRUNK_ROUTED && moved) {
            skipped++;
            continue;
        }
        double fd = (lp - lm) / (2.0 * h);
        checked++;
        if (!(fabs(dx[i] - fd) <= FD_ATOL + FD_RTOL * fabs(fd)) && bad++ < 5)
            fprintf(stderr, "%s d_x[%d]: analytic %.6g, fd %.6g\n", what, i, dx[i], fd);
    }
    CHECK_MSG(bad == 0, "%s trunk: %d of %d gradients off", what, bad, checked);
    CHECK_MSG(skipped * 5 < checked, "%s trunk: %d FD probes skipped (selection moved), %d "
              "checked", what, skipped, checked);
    printf("%s trunk: %d gradients checked, %d skipped\n", what, checked, skipped);
    if (kind == NN_TRUNK_ROUTED) {
        nn_router_stats st;
        trunk_loss(NULL);
        MUST(nn_trunk_router_stats(T_, &st, &E));
        int tot = 0;
        for (int e = 0; e < c.n_experts; e++)
            tot += st.load[e];
        CHECK_EQ_INT(tot, NR * c.top_k);
        CHECK(st.balance_loss > 0.0f && isfinite(st.balance_loss));
        CHECK(st.entropy_loss >= 0.0f && st.entropy_loss <= logf((float)c.n_experts) + 1e-5f);
    } else {
        nn_router_stats st;
        CHECK_EQ_INT(nn_trunk_router_stats(T_, &st, &E), GT_EINVAL);
    }
    free(g);
    nn_free(B, TX);
    nn_free(B, TC);
    nn_free(B, TO);
    nn_free(B, TR);
    nn_free(B, dx);
    nn_trunk_destroy(T_);
}

/* How many of the NR rows of x / cd, each forwarded alone (inference),
 * differ from their row of `all` (the NR rows' forward); one: a row's
 * scratch output. */
static int rows_alone_differ(nn_trunk *t, const float *x, const float *cd, const float *all,
                             float *one)
{
    int bad = 0;
    for (int i = 0; i < NR; i++) {
        MUST(nn_trunk_forward(t, nn_f32((float *)x + i * 5, 1, 5), nn_f32((float *)cd + i * 2, 1, 2),
                            nn_f32(one, 1, 3), 0, &E));
        bad += memcmp(one, all + i * 3, sizeof(float) * 3) != 0;
    }
    return bad;
}

/* Every view of p0 is in p1 under its name, with the same values: a trunk
 * with an option (`what`) starts as the same trunk without it. */
static void check_shared_views(const nn_params *p0, const nn_params *p1, const char *what)
{
    for (int v = 0; v < p0->n_views; v++) {
        int u = 0;
        while (u < p1->n_views && strcmp(p0->views[v].name, p1->views[u].name))
            u++;
        CHECK_MSG(u < p1->n_views, "view %s missing with %s", p0->views[v].name, what);
        if (u < p1->n_views)
            CHECK(!memcmp(p0->value + p0->views[v].offset, p1->value + p1->views[u].offset,
                          sizeof(float) * (size_t)p0->views[v].rows * (size_t)p0->views[v].cols));
    }
}

/* A trunk with the gated skip starts as the same trunk without one: the
 * skip is zero and draws nothing, so the shared weights and the outputs
 * are equal; after its weights move, the output follows x coordinate by
 * coordinate, and a packed (fixed-order) forward gives the bits of a
 * packed forward of the row alone. */
static void test_skip_init(void)
{
    nn_trunk_config c0, c1;
    small_config(&c0, NN_TRUNK_EXPERT);
    c1 = c0;
    c1.skip = NN_SKIP_GATED;
    nn_trunk *t0 = ready_trunk(B, &c0, 11, 1.0f, NR), *t1 = ready_trunk(B, &c1, 11, 1.0f, NR);
    nn_params *p0 = nn_trunk_params(t0), *p1 = nn_trunk_params(t1);
    CHECK_EQ_INT(p1->n_views, p0->n_views + 2);
    check_shared_views(p0, p1, "the skip");
    float *x = rbuf(NR * 5, 1.0f), *cd = rbuf(NR * 2, 1.0f), *o0 = buf(NR * 3), *o1 = buf(NR * 3);
    MUST(nn_trunk_forward(t0, nn_f32(x, NR, 5), nn_f32(cd, NR, 2), nn_f32(o0, NR, 3), 0, &E));
    MUST(nn_trunk_forward(t1, nn_f32(x, NR, 5), nn_f32(cd, NR, 2), nn_f32(o1, NR, 3), 0, &E));
    CHECK(!memcmp(o0, o1, sizeof(float) * NR * 3));
    /* skip.b = 1 (and skip.w = 0): out = trunk + x[:, :3] exactly */
    int sb = 0;
    while (sb < p1->n_views - 1 && strcmp(p1->views[sb].name, "skip.b"))
        sb++;
    CHECK(!strcmp(p1->views[sb].name, "skip.b"));
    for (int j = 0; j < 3; j++)
        p1->value[p1->views[sb].offset + j] = 1.0f;
    MUST(nn_trunk_forward(t1, nn_f32(x, NR, 5), nn_f32(cd, NR, 2), nn_f32(o1, NR, 3), 0, &E));
    int bad = 0;
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < 3; j++)
            bad += o1[i * 3 + j] != o0[i * 3 + j] + x[i * 5 + j];
    CHECK_EQ_INT(bad, 0);
    /* packed: row i alone gives the bits it gives among NR rows */
    for (int v = 0; v < p1->n_views; v++)
        for (int i = 0; i < p1->views[v].rows * p1->views[v].cols; i++)
            p1->value[p1->views[v].offset + i] += 0.1f * frand();
    MUST(nn_trunk_pack(t1, &E));
    MUST(nn_trunk_forward(t1, nn_f32(x, NR, 5), nn_f32(cd, NR, 2), nn_f32(o1, NR, 3), 0, &E));
    CHECK_EQ_INT(rows_alone_differ(t1, x, cd, o1, o0), 0);
    nn_free(B, x);
    nn_free(B, cd);
    nn_free(B, o0);
    nn_free(B, o1);
    nn_trunk_destroy(t0);
    nn_trunk_destroy(t1);
}

/* block_cond: a trunk starts as the same trunk without the blocks'
 * condition weights (zero, drawing nothing); once they move the conditions
 * change the output through them; a packed forward gives a row the bits it
 * gets alone, and the same values as the training forward to rounding. */
static void test_block_cond(nn_trunk_kind kind)
{
    nn_trunk_config c0, c1;
    small_config(&c0, kind);
    c0.skip = NN_SKIP_GATED;
    c1 = c0;
    c1.block_cond = 1;
    nn_trunk *t0 = ready_trunk(B, &c0, 11, 1.0f, NR), *t1 = ready_trunk(B, &c1, 11, 1.0f, NR);
    nn_params *p0 = nn_trunk_params(t0), *p1 = nn_trunk_params(t1);
    int n_ex = kind == NN_TRUNK_ROUTED ? c0.n_experts : 1;
    CHECK_EQ_INT(p1->n_views, p0->n_views + n_ex * c0.blocks);
    check_shared_views(p0, p1, "block_cond");
    int n_wc = 0;
    for (int v = 0; v < p1->n_views; v++)
        if (strstr(p1->views[v].name, ".cond.w")) {
            n_wc++;
            CHECK(p1->views[v].decay && p1->views[v].rows == c0.hidden &&
                  p1->views[v].cols == c0.emb_dim);
        }
    CHECK_EQ_INT(n_wc, n_ex * c0.blocks);
    CHECK(nn_trunk_forward_flops(t1, 1) ==
          nn_trunk_forward_flops(t0, 1) +
              2.0 * c0.blocks * c0.hidden * c0.emb_dim * (kind == NN_TRUNK_ROUTED ? c0.top_k : 1));
    float *x = rbuf(NR * 5, 1.0f), *cd = rbuf(NR * 2, 1.0f), *o0 = buf(NR * 3), *o1 = buf(NR * 3);
    float *o2 = buf(NR * 3);
    /* the same bits in training (the zero term adds exactly 0); inference
     * applies SiLU apart from the matmul with block_cond, so only close */
    MUST(nn_trunk_forward(t0, nn_f32(x, NR, 5), nn_f32(cd, NR, 2), nn_f32(o0, NR, 3), 1, &E));
    MUST(nn_trunk_forward(t1, nn_f32(x, NR, 5), nn_f32(cd, NR, 2), nn_f32(o1, NR, 3), 1, &E));
    CHECK(!memcmp(o0, o1, sizeof(float) * NR * 3));
    MUST(nn_trunk_forward(t1, nn_f32(x, NR, 5), nn_f32(cd, NR, 2), nn_f32(o1, NR, 3), 0, &E));
    for (int i = 0; i < NR * 3; i++)
        CHECK(fabsf(o1[i] - o0[i]) <= 1e-5f + 1e-5f * fabsf(o0[i]));
    MUST(nn_trunk_forward(t0, nn_f32(x, NR, 5), nn_f32(cd, NR, 2), nn_f32(o0, NR, 3), 0, &E));
    /* the condition weights moved: the output changes, and only the first
     * condition reaches the blocks through them */
    for (int v = 0; v < p1->n_views; v++)
        if (strstr(p1->views[v].name, ".cond.w"))
            for (int i = 0; i < p1->views[v].rows * p1->views[v].cols; i++)
                p1->value[p1->views[v].offset + i] = 0.5f * frand();
    MUST(nn_trunk_forward(t1, nn_f32(x, NR, 5), nn_f32(cd, NR, 2), nn_f32(o1, NR, 3), 0, &E));
    double moved = 0;
    for (int i = 0; i < NR * 3; i++)
        moved += fabs((double)o1[i] - o0[i]);
    CHECK_MSG(moved > 1e-3, "the blocks' condition weights changed the output by %g", moved);
    /* training forward against the packed one (another summation order) */
    MUST(nn_trunk_forward(t1, nn_f32(x, NR, 5), nn_f32(cd, NR, 2), nn_f32(o1, NR, 3), 1, &E));
    MUST(nn_trunk_pack(t1, &E));
    MUST(nn_trunk_forward(t1, nn_f32(x, NR, 5), nn_f32(cd, NR, 2), nn_f32(o2, NR, 3), 0, &E));
    int bad = 0;
    for (int i = 0; i < NR * 3; i++)
        bad += !(fabsf(o1[i] - o2[i]) <= 1e-5f + 1e-5f * fabsf(o1[i]));
    CHECK_MSG(bad == 0, "%d packed outputs differ from the training forward's", bad);
    CHECK_EQ_INT(rows_alone_differ(t1, x, cd, o2, o0), 0);
    nn_free(B, x);
    nn_free(B, cd);
    nn_free(B, o0);
    nn_free(B, o1);
    nn_free(B, o2);
    nn_trunk_destroy(t0);
    nn_trunk_destroy(t1);
}

/* ------------------------------------------------------------------------ */
/* output dtype, no allocation in steps, bf16 close to fp32                 */
/* ------------------------------------------------------------------------ */

typedef struct run {
    nn_trunk *t;
    nn_adamw_opt opt;
    nn_rng rng;
    float *x, *c, *y, *out, *dout, *loss;
    int n;
} run;

static void run_open(run *r, nn_trunk_kind kind, nn_dtype prec, int n)
{
    nn_trunk_config c;
    small_config(&c, kind);
    c.precision = prec;
    c.hidden = 16;
    memset(r, 0, sizeof *r);
    r->n = n;
    r->t = ready_trunk(B, &c, 11, 0.5f, n);
    nn_adamw_config oc;
    nn_adamw_config_default(&oc);
    oc.lr = 3e-3f;
    oc.warmup_steps = 2;
    oc.total_steps = 20;
    MUST(nn_adamw_create(&r->opt, nn_trunk_params(r->t), &oc, &E));
    r->rng = nn_rng_make(99, 1);
    r->x = buf((size_t)n * 5);
    r->c = buf((size_t)n * 2);
    r->y = buf((size_t)n * 3);
    r->out = buf((size_t)n * 3);
    r->dout = buf((size_t)n * 3);
    r->loss = buf(1);
}

static void run_close(run *r)
{
    nn_adamw_destroy(&r->opt);
    nn_trunk_destroy(r->t);
    nn_free(B, r->x);
    nn_free(B, r->c);
    nn_free(B, r->y);
    nn_free(B, r->out);
    nn_free(B, r->dout);
    nn_free(B, r->loss);
}

/* One training step on data drawn from the run's generator. */
static float run_step(run *r)
{
    int n = r->n;
    MUST(nn_rand_fill(B, r->x, (size_t)n * 5, NN_DIST_NORMAL, 0, 1, r->rng.seed, r->rng.stream,
                    nn_rng_take(&r->rng, (size_t)n * 5), &E));
    MUST(nn_rand_fill(B, r->c, (size_t)n * 2, NN_DIST_UNIFORM, 0, 1, r->rng.seed, r->rng.stream,
                    nn_rng_take(&r->rng, (size_t)n * 2), &E));
    /* a learnable target: a fixed function of the inputs */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 3; j++)
            r->y[i * 3 + j] = sinf(r->x[i * 5 + j] + r->c[i * 2]) * 0.5f;
    nn_tensor out = nn_f32(r->out, n, 3), y = nn_f32(r->y, n, 3);
    MUST(nn_params_zero_grad(nn_trunk_params(r->t), &E));
    MUST(nn_trunk_forward(r->t, nn_f32(r->x, n, 5), nn_f32(r->c, n, 2), out, 1, &E));
    MUST(nn_mse_fwd(B, r->loss, out, y, &E));
    MUST(nn_mse_bwd(B, nn_f32(r->dout, n, 3), 1.0f, out, y, 0, &E));
    MUST(nn_trunk_backward(r->t, nn_f32(r->dout, n, 3), nn_f32(NULL, n, 5), &E));
    float norm;
    MUST(nn_adamw_step(&r->opt, &norm, &E));
    CHECK(isfinite(norm));
    return r->loss[0];
}

static void test_training(nn_trunk_kind kind, nn_dtype prec)
{
    const char *label = kind ? (prec ? "routed bf16" : "routed fp32")
                             : (prec ? "expert bf16" : "expert fp32");
    run r;
    run_open(&r, kind, prec, 32);
    float first = run_step(&r);
    run_step(&r);
    size_t allocs = B->alloc_count, live = B->bytes_live, plans = B->plan_count;
    float last = first;
    for (int s = 0; s < 15; s++)
        last = run_step(&r);
    CHECK_MSG(B->alloc_count == allocs, "%s: %zu allocations during steps", label,
              B->alloc_count - allocs);
    /* routed experts see padded batches, so their shapes repeat too */
    CHECK_MSG(B->plan_count == plans, "%s: %zu matmul plans made after warm-up", label,
              B->plan_count - plans);
    CHECK_EQ_INT(B->bytes_live, live);
    CHECK_MSG(last < first, "%s: loss did not decrease (%g -> %g)", label, first, last);
    /* sampling forward allocates nothing either and matches training
     * forward on the same input */
    float *o2 = buf((size_t)r.n * 3);
    allocs = B->alloc_count;
    MUST(nn_trunk_forward(r.t, nn_f32(r.x, r.n, 5), nn_f32(r.c, r.n, 2), nn_f32(r.out, r.n, 3), 1,
                        &E));
    MUST(nn_trunk_forward(r.t, nn_f32(r.x, r.n, 5), nn_f32(r.c, r.n, 2), nn_f32(o2, r.n, 3), 0,
                        &E));
    CHECK_EQ_INT(B->alloc_count, allocs);
    double md = 0;
    for (int i = 0; i < r.n * 3; i++)
        md = fmax(md, fabs(o2[i] - r.out[i]));
    CHECK_MSG(md < (prec ? 2e-2 : 1e-5), "%s: sampling vs training forward differ by %g",
              label, md);
    nn_free(B, o2);
    run_close(&r);
}

static void test_routed_dtype(void)
{
    /* the routed trunk's output is what an expert trunk's is: f32 [n, out] */
    for (int prec = 0; prec < 2; prec++) {
        nn_trunk_config ce, cr;
        small_config(&ce, NN_TRUNK_EXPERT);
        small_config(&cr, NN_TRUNK_ROUTED);
        ce.precision = cr.precision = (nn_dtype)prec;
        nn_trunk *te = ready_trunk(B, &ce, 1, 1.0f, 4);
        nn_trunk *tr = ready_trunk(B, &cr, 1, 1.0f, 4);
        float *x = rbuf(20, 1.0f), *c = rbuf(8, 1.0f), *o = buf(12);
        nn_tensor out = nn_f32(o, 4, 3);
        CHECK_EQ_INT(nn_trunk_forward(te, nn_f32(x, 4, 5), nn_f32(c, 4, 2), out, 0, &E), GT_OK);
        CHECK_EQ_INT(nn_trunk_forward(tr, nn_f32(x, 4, 5), nn_f32(c, 4, 2), out, 0, &E), GT_OK);
        /* a bf16 output tensor is refused by both alike */
        nn_tensor bo = nn_tensor_make(o, NN_BF16, 4, 3);
        CHECK_EQ_INT(nn_trunk_forward(te, nn_f32(x, 4, 5), nn_f32(c, 4, 2), bo, 0, &E),
                     GT_EINVAL);
        CHECK_EQ_INT(nn_trunk_forward(tr, nn_f32(x, 4, 5), nn_f32(c, 4, 2), bo, 0, &E),
                     GT_EINVAL);
        nn_free(B, x);
        nn_free(B, c);
        nn_free(B, o);
        nn_trunk_destroy(te);
        nn_trunk_destroy(tr);
    }
}

/* ------------------------------------------------------------------------ */
/* save, reload, continue                                                   */
/* ------------------------------------------------------------------------ */

static void test_resume(nn_trunk_kind kind, nn_dtype prec)
{
    run a, b;
    run_open(&a, kind, prec, 16);
    for (int s = 0; s < 8; s++)
        run_step(&a);
    run_open(&b, kind, prec, 16);
    for (int s = 0; s < 4; s++)
        run_step(&b);
    void *ck = NULL;
    size_t len = 0;
    MUST(nn_ckpt_save(nn_trunk_params(b.t), &b.opt, &b.rng, &ck, &len, &E));
    run_close(&b);
    /* a fresh model with a different init: everything must come from the
     * checkpoint */
    run c;
    run_open(&c, kind, prec, 16);
    MUST(nn_trunk_init(c.t, 12345, 1.0f, &E));
    c.rng = nn_rng_make(1, 1);
    MUST(nn_ckpt_load(nn_trunk_params(c.t), &c.opt, &c.rng, ck, len, &E));
    CHECK_EQ_INT(c.opt.step, 4);
    /* the checksum is the standard CRC-32 (check value of "123456789") */
    CHECK_EQ_INT(nn_ckpt_crc32("123456789", 9), 0xcbf43926u);
    for (int s = 0; s < 4; s++)
        run_step(&c);
    nn_params *pa = nn_trunk_params(a.t), *pc = nn_trunk_params(c.t);
    CHECK_MSG(memcmp(pa->value, pc->value, pa->count * sizeof(float)) == 0,
              "resume (kind %d, precision %d): parameters differ", kind, prec);
    CHECK(memcmp(a.opt.m, c.opt.m, pa->count * sizeof(float)) == 0);
    CHECK(memcmp(a.opt.v, c.opt.v, pa->count * sizeof(float)) == 0);
    if (prec == NN_BF16)
        CHECK(memcmp(pa->value_bf16, pc->value_bf16, pa->count * 2) == 0);
    CHECK_EQ_INT(a.rng.offset, c.rng.offset);

    /* corrupted buffers: every failure is an error with a message */
    nn_params *p = pc;
    unsigned char *bad = malloc(len);
    memcpy(bad, ck, len);
    bad[len / 2] ^= 1;
    CHECK_EQ_INT(nn_ckpt_load(p, &c.opt, &c.rng, bad, len, &E), GT_ECHECKSUM);
    CHECK(strstr(E.message, "checksum") != NULL);
    CHECK_EQ_INT(nn_ckpt_load(p, &c.opt, &c.rng, ck, len - 9, &E), GT_ECHECKSUM);
    CHECK_EQ_INT(nn_ckpt_load(p, &c.opt, &c.rng, ck, 10, &E), GT_EFORMAT);
    CHECK_EQ_INT(nn_ckpt_load(p, &c.opt, &c.rng, ck, 0, &E), GT_EFORMAT);
    memcpy(bad, ck, len);
    bad[0] = 'X';
    CHECK_EQ_INT(nn_ckpt_load(p, &c.opt, &c.rng, bad, len, &E), GT_EFORMAT);
    CHECK(strstr(E.message, "magic") != NULL);
    memcpy(bad, ck, len);
    bad[8] = 99;
    CHECK_EQ_INT(nn_ckpt_load(p, &c.opt, &c.rng, bad, len, &E), GT_EFORMAT);
    CHECK(strstr(E.message, "version") != NULL);
    free(bad);
    /* a model of another shape: the message names the tensor */
    nn_trunk_config other;
    small_config(&other, kind);
    other.precision = prec;
    other.hidden = 16;
    other.out_dim = 4;
    nn_trunk *t2;
    MUST(nn_trunk_create(B, &other, &t2, &E));
    CHECK_EQ_INT(nn_ckpt_load(nn_trunk_params(t2), NULL, NULL, ck, len, &E), GT_EFORMAT);
    CHECK_MSG(strstr(E.message, "out.w") != NULL, "message: %s", E.message);
    nn_trunk_destroy(t2);
    /* weights-only checkpoint cannot provide optimizer state */
    void *ck2 = NULL;
    size_t len2 = 0;
    MUST(nn_ckpt_save(pc, NULL, NULL, &ck2, &len2, &E));
    CHECK(len2 < len);
    CHECK_EQ_INT(nn_ckpt_load(pc, &c.opt, NULL, ck2, len2, &E), GT_EFORMAT);
    CHECK_EQ_INT(nn_ckpt_load(pc, NULL, NULL, ck2, len2, &E), GT_OK);
    free(ck2);
    free(ck);
    run_close(&a);
    run_close(&c);
}

/* ------------------------------------------------------------------------ */
/* bad input                                                                */
/* ------------------------------------------------------------------------ */

static void test_bad_input(void)
{
    nn_trunk_config c;
    small_config(&c, NN_TRUNK_EXPERT);
    nn_trunk *t = NULL;
    gt_error e;
    c.emb_dim = 3;
    CHECK_EQ_INT(nn_trunk_create(B, &c, &t, &e), GT_EINVAL);
    small_config(&c, NN_TRUNK_EXPERT);
    c.precision = (nn_dtype)5;
    CHECK_EQ_INT(nn_trunk_create(B, &c, &t, &e), GT_EINVAL);
    CHECK(strstr(e.message, "precision") != NULL);
    small_config(&c, NN_TRUNK_ROUTED);
    c.top_k = 9;
    CHECK_EQ_INT(nn_trunk_create(B, &c, &t, &e), GT_EINVAL);
    small_config(&c, NN_TRUNK_EXPERT);
    c.hidden = 0;
    CHECK_EQ_INT(nn_trunk_create(B, &c, &t, &e), GT_EINVAL);
    CHECK(t == NULL);
    /* the gated skip follows the first out_dim inputs, so it needs that
     * many, and conditions to gate with */
    small_config(&c, NN_TRUNK_EXPERT);
    c.skip = NN_SKIP_GATED;
    c.out_dim = 6;
    CHECK_EQ_INT(nn_trunk_create(B, &c, &t, &e), GT_EINVAL);
    CHECK(strstr(e.message, "skip") != NULL);
    small_config(&c, NN_TRUNK_EXPERT);
    c.skip = NN_SKIP_GATED;
    c.cond_dim = 0;
    CHECK_EQ_INT(nn_trunk_create(B, &c, &t, &e), GT_EINVAL);
    small_config(&c, NN_TRUNK_EXPERT);
    c.skip = (nn_trunk_skip)7;
    CHECK_EQ_INT(nn_trunk_create(B, &c, &t, &e), GT_EINVAL);
    CHECK(t == NULL);
    /* block_cond counts leading conditions: 0..cond_dim */
    small_config(&c, NN_TRUNK_EXPERT);
    c.block_cond = 3;
    CHECK_EQ_INT(nn_trunk_create(B, &c, &t, &e), GT_EINVAL);
    CHECK(strstr(e.message, "block_cond") != NULL);
    c.block_cond = -1;
    CHECK_EQ_INT(nn_trunk_create(B, &c, &t, &e), GT_EINVAL);
    CHECK(t == NULL);

    small_config(&c, NN_TRUNK_EXPERT);
    MUST(nn_trunk_create(B, &c, &t, &E));
    float *x = rbuf(40, 1.0f), *cd = rbuf(16, 1.0f), *o = buf(24);
    /* not planned */
    CHECK_EQ_INT(nn_trunk_forward(t, nn_f32(x, 8, 5), nn_f32(cd, 8, 2), nn_f32(o, 8, 3), 1, &e),
                 GT_EINVAL);
    CHECK(strstr(e.message, "plan") != NULL);
    CHECK_EQ_INT(nn_trunk_plan(t, 0, &e), GT_EINVAL);
    MUST(nn_trunk_plan(t, 4, &E));
    /* more rows than planned */
    CHECK_EQ_INT(nn_trunk_forward(t, nn_f32(x, 8, 5), nn_f32(cd, 8, 2), nn_f32(o, 8, 3), 1, &e),
                 GT_EINVAL);
    /* backward before any forward */
    CHECK_EQ_INT(nn_trunk_backward(t, nn_f32(o, 4, 3), nn_f32(NULL, 4, 5), &e), GT_EINVAL);
    /* shapes */
    CHECK_EQ_INT(nn_trunk_forward(t, nn_f32(x, 4, 6), nn_f32(cd, 4, 2), nn_f32(o, 4, 3), 1, &e),
                 GT_EINVAL);
    CHECK_EQ_INT(nn_trunk_forward(t, nn_f32(x, 4, 5), nn_f32(cd, 3, 2), nn_f32(o, 4, 3), 1, &e),
                 GT_EINVAL);
    /* NaN and infinity in the data */
    x[7] = NAN;
    CHECK_EQ_INT(nn_trunk_forward(t, nn_f32(x, 4, 5), nn_f32(cd, 4, 2), nn_f32(o, 4, 3), 1, &e),
                 GT_EINVAL);
    CHECK(strstr(e.message, "NaN") != NULL);
    x[7] = 0.5f;
    cd[3] = INFINITY;
    CHECK_EQ_INT(nn_trunk_forward(t, nn_f32(x, 4, 5), nn_f32(cd, 4, 2), nn_f32(o, 4, 3), 1, &e),
                 GT_EINVAL);
    cd[3] = 0.5f;
    /* with the input check off (graph-captured callers), no read-back and
     * no error: the NaN reaches the output instead */
    x[7] = NAN;
    nn_trunk_set_input_check(t, 0);
    CHECK_EQ_INT(nn_trunk_forward(t, nn_f32(x, 4, 5), nn_f32(cd, 4, 2), nn_f32(o, 4, 3), 0, &e),
                 GT_OK);
    nn_trunk_set_input_check(t, 1);
    x[7] = 0.5f;
    /* unknown dtype of an input */
    nn_tensor bx = nn_tensor_make(x, (nn_dtype)3, 4, 5);
    CHECK_EQ_INT(nn_trunk_forward(t, bx, nn_f32(cd, 4, 2), nn_f32(o, 4, 3), 1, &e), GT_EINVAL);
    /* a good call works, then backward with a wrong d_out shape fails */
    MUST(nn_trunk_forward(t, nn_f32(x, 4, 5), nn_f32(cd, 4, 2), nn_f32(o, 4, 3), 1, &E));
    CHECK_EQ_INT(nn_trunk_backward(t, nn_f32(o, 4, 2), nn_f32(NULL, 4, 5), &e), GT_EINVAL);
    CHECK_EQ_INT(nn_trunk_backward(t, nn_f32(o, 4, 3), nn_f32(x, 4, 4), &e), GT_EINVAL);
    /* backward after a sampling forward is refused */
    MUST(nn_trunk_forward(t, nn_f32(x, 4, 5), nn_f32(cd, 4, 2), nn_f32(o, 4, 3), 0, &E));
    CHECK_EQ_INT(nn_trunk_backward(t, nn_f32(o, 4, 3), nn_f32(NULL, 4, 5), &e), GT_EINVAL);
    /* optimizer: NaN gradient is reported and changes nothing */
    nn_adamw_opt opt;
    nn_adamw_config oc;
    nn_adamw_config_default(&oc);
    oc.lr = -1.0f;
    CHECK_EQ_INT(nn_adamw_create(&opt, nn_trunk_params(t), &oc, &e), GT_EINVAL);
    nn_adamw_config_default(&oc);
    MUST(nn_adamw_create(&opt, nn_trunk_params(t), &oc, &E));
    nn_params *p = nn_trunk_params(t);
    float *before = malloc(p->count * 4);
    memcpy(before, p->value, p->count * 4);
    p->grad[3] = NAN;
    CHECK_EQ_INT(nn_adamw_step(&opt, NULL, &e), GT_EINVAL);
    CHECK(strstr(e.message, "not finite") != NULL);
    CHECK(memcmp(before, p->value, p->count * 4) == 0);
    CHECK_EQ_INT(opt.step, 0);
    free(before);
    nn_adamw_destroy(&opt);
    nn_free(B, x);
    nn_free(B, cd);
    nn_free(B, o);
    nn_trunk_destroy(t);
}

/* grad_scale (what data-parallel training sets to 1 / ranks over summed
 * gradients): a step from grad g with grad_scale 0.5 is, bit for bit, the
 * step from g / 2 with grad_scale 1 (halving is exact), clipped or not,
 * and reports the norm of g / 2. */
static void test_grad_scale(void)
{
    for (int clip = 0; clip < 2; clip++) {
        nn_trunk_config c;
        small_config(&c, NN_TRUNK_EXPERT);
        nn_trunk *t[2] = {NULL, NULL};
        nn_adamw_opt o[2];
        nn_adamw_config oc;
        nn_adamw_config_default(&oc);
        oc.clip_norm = clip ? 1e-3f : 0.0f; /* clip = 1: every step clips */
        float norm[2];
        for (int k = 0; k < 2; k++) {
            MUST(nn_trunk_create(B, &c, &t[k], &E));
            MUST(nn_trunk_init(t[k], 7, 0.1f, &E));
            MUST(nn_adamw_create(&o[k], nn_trunk_params(t[k]), &oc, &E));
            CHECK(o[k].grad_scale == 1.0f);
        }
        o[0].grad_scale = 0.5f;
        nn_params *p0 = nn_trunk_params(t[0]), *p1 = nn_trunk_params(t[1]);
        for (int step = 0; step < 3; step++) {
            for (size_t i = 0; i < p0->count; i++) {
                float g = (float)((int)((i * 2654435761u + (unsigned)step * 97u) % 2001u) - 1000) *
                          1e-3f;
                p0->grad[i] = g;
                p1->grad[i] = g * 0.5f;
            }
            MUST(nn_adamw_step(&o[0], &norm[0], &E));
            MUST(nn_adamw_step(&o[1], &norm[1], &E));
            CHECK(norm[0] == norm[1]);
        }
        CHECK_MSG(memcmp(p0->value, p1->value, p0->count * sizeof(float)) == 0,
                  "grad_scale 0.5 differs from halved gradients (clip %d)", clip);
        for (int k = 0; k < 2; k++) {
            nn_adamw_destroy(&o[k]);
            nn_trunk_destroy(t[k]);
        }
    }
}

static void test_schedule(void)
{
    nn_adamw_config c;
    nn_adamw_config_default(&c);
    c.lr = 1.0f;
    c.warmup_steps = 4;
    c.total_steps = 14;
    c.min_lr_ratio = 0.1f;
    CHECK_CLOSE(nn_adamw_lr(&c, 0), 0.25, 1e-7, 0);
    CHECK_CLOSE(nn_adamw_lr(&c, 3), 1.0, 1e-7, 0);
    CHECK_CLOSE(nn_adamw_lr(&c, 8), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 0.5)), 1e-6, 0);
    CHECK_CLOSE(nn_adamw_lr(&c, 13), 0.1, 1e-6, 0);
    CHECK_CLOSE(nn_adamw_lr(&c, 100), 0.1, 1e-6, 0);
}

/* bf16 emulation (exact widening + sgemm) computes what native bf16 does:
 * same rounded inputs, fp32 accumulation; only the summation order differs. */
static void test_bf16_emulation(void)
{
    setenv("GIANT_CPU_BF16", "emulate", 1);
    nn_backend *emu = NULL;
    MUST(cpu_backend_create(&emu, &E));
    unsetenv("GIANT_CPU_BF16");
    CHECK(emu->bf16_emulated && !emu->has_bf16);
    nn_trunk_config c;
    small_config(&c, NN_TRUNK_EXPERT);
    c.precision = NN_BF16;
    c.hidden = 24;
    nn_trunk *tn = ready_trunk(B, &c, 3, 1.0f, 9);
    nn_trunk *te = ready_trunk(emu, &c, 3, 1.0f, 9);
    float x[45], cd[18], on[27], oe[27];
    for (int i = 0; i < 45; i++)
        x[i] = frand();
    for (int i = 0; i < 18; i++)
        cd[i] = 0.5f + 0.5f * frand();
    MUST(nn_trunk_forward(tn, nn_f32(x, 9, 5), nn_f32(cd, 9, 2), nn_f32(on, 9, 3), 1, &E));
    MUST(nn_trunk_forward(te, nn_f32(x, 9, 5), nn_f32(cd, 9, 2), nn_f32(oe, 9, 3), 1, &E));
    double d = 0, s = 0;
    for (int i = 0; i < 27; i++) {
        d = fmax(d, fabs(on[i] - oe[i]));
        s = fmax(s, fabs(on[i]));
    }
    /* a summation-order difference can flip one bf16 rounding of a later
     * matmul input: allow a few bf16 ulps */
    CHECK_MSG(d <= 2e-2 * s, "native vs emulated bf16: %g (scale %g)", d, s);
    /* fp32 evaluation of a bf16 trunk == an fp32 trunk with the same
     * weights, bit for bit (validation losses are always fp32) */
    nn_trunk_config c32 = c;
    c32.precision = NN_F32;
    float o32[27], ov[27];
    nn_trunk *t32 = ready_trunk(B, &c32, 3, 1.0f, 9);
    MUST(nn_trunk_forward(t32, nn_f32(x, 9, 5), nn_f32(cd, 9, 2), nn_f32(o32, 9, 3), 0, &E));
    MUST(nn_trunk_set_precision(tn, NN_F32, &E));
    CHECK_EQ_INT(nn_trunk_get_precision(tn), NN_F32);
    MUST(nn_trunk_forward(tn, nn_f32(x, 9, 5), nn_f32(cd, 9, 2), nn_f32(ov, 9, 3), 0, &E));
    CHECK(memcmp(o32, ov, sizeof ov) == 0);
    MUST(nn_trunk_set_precision(tn, NN_BF16, &E));
    MUST(nn_trunk_forward(tn, nn_f32(x, 9, 5), nn_f32(cd, 9, 2), nn_f32(ov, 9, 3), 1, &E));
    CHECK(memcmp(on, ov, sizeof ov) == 0);
    CHECK_EQ_INT(nn_trunk_set_precision(t32, NN_BF16, &E), GT_EINVAL);
    nn_trunk_destroy(t32);
    MUST(nn_params_zero_grad(nn_trunk_params(te), &E));
    MUST(nn_trunk_backward(te, nn_f32(oe, 9, 3), nn_f32(x, 9, 5), &E));
    nn_trunk_destroy(tn);
    nn_trunk_destroy(te);
    nn_backend_close(emu);
}

/* The bf16 arena saves each activation a GEMM reads once: an expert trunk
 * without the skip assembles its input straight into bf16 (the same bits as
 * casting the fp32 input: the forward equals a strided-input forward, whose
 * finiteness check runs row by row), a and s keep one fp32 slot, and the
 * input gradients are allocated only by a backward that wants them. */
static void test_bf16_arena(void)
{
    enum { BR = 32, IN = 64, OUT = 64, LD = IN + 3 };
    nn_trunk_config c;
    small_config(&c, NN_TRUNK_EXPERT);
    c.in_dim = IN;
    c.out_dim = OUT;
    c.emb_dim = 8;
    c.hidden = 32;
    c.blocks = 4;
    size_t arena[2];
    for (int bf = 0; bf < 2; bf++) {
        c.precision = bf ? NN_BF16 : NN_F32;
        nn_trunk *t = NULL;
        MUST(nn_trunk_create(B, &c, &t, &E));
        MUST(nn_trunk_init(t, 4, 1.0f, &E));
        size_t before = B->bytes_live;
        MUST(nn_trunk_plan(t, BR, &E));
        arena[bf] = B->bytes_live - before;
        nn_trunk_destroy(t);
    }
    /* the layout this replaced kept x, every a and every s in fp32 beside
     * their bf16 copies: 1.25x the fp32 arena here */
    CHECK_MSG(arena[1] < arena[0], "bf16 arena %zu bytes, fp32 %zu", arena[1], arena[0]);

    c.precision = NN_BF16;
    nn_trunk *t = ready_trunk(B, &c, 4, 1.0f, BR);
    float *x = rbuf((size_t)BR * IN, 1.0f), *xs = buf((size_t)BR * LD);
    float *cd = rbuf((size_t)BR * 2, 1.0f), *o1 = buf((size_t)BR * OUT);
    float *o2 = buf((size_t)BR * OUT), *dx = buf((size_t)BR * IN);
    for (int r = 0; r < BR; r++)
        for (int j = 0; j < LD; j++)
            xs[(size_t)r * LD + j] = j < IN ? x[(size_t)r * IN + j] : NAN;
    nn_tensor X = nn_f32(x, BR, IN), XS = nn_tensor_make(xs, NN_F32, BR, IN);
    XS.ld = LD;
    nn_tensor C = nn_f32(cd, BR, 2);
    MUST(nn_trunk_forward(t, X, C, nn_f32(o1, BR, OUT), 1, &E));
    MUST(nn_trunk_forward(t, XS, C, nn_f32(o2, BR, OUT), 1, &E));
    CHECK_MSG(memcmp(o1, o2, sizeof(float) * BR * OUT) == 0,
              "bf16 forward of a strided input differs");
    /* a backward without d_x allocates nothing; one with it does, once */
    size_t live = B->bytes_live;
    MUST(nn_params_zero_grad(nn_trunk_params(t), &E));
    MUST(nn_trunk_backward(t, nn_f32(o1, BR, OUT), nn_f32(NULL, BR, IN), &E));
    CHECK_EQ_INT(B->bytes_live, live);
    MUST(nn_trunk_backward(t, nn_f32(o1, BR, OUT), nn_f32(dx, BR, IN), &E));
    CHECK(B->bytes_live >= live + sizeof(float) * BR * (IN + 2 * 8));
    live = B->bytes_live;
    MUST(nn_trunk_backward(t, nn_f32(o1, BR, OUT), nn_f32(dx, BR, IN), &E));
    CHECK_EQ_INT(B->bytes_live, live);
    /* non-finite inputs are refused: in x (either path), in cond */
    gt_error e;
    xs[5 * LD + 7] = INFINITY;
    CHECK_EQ_INT(nn_trunk_forward(t, XS, C, nn_f32(o2, BR, OUT), 0, &e), GT_EINVAL);
    CHECK(strstr(e.message, "NaN or infinite") != NULL);
    x[3 * IN + 1] = NAN;
    CHECK_EQ_INT(nn_trunk_forward(t, X, C, nn_f32(o2, BR, OUT), 0, &e), GT_EINVAL);
    x[3 * IN + 1] = 0.5f;
    cd[7] = INFINITY;
    CHECK_EQ_INT(nn_trunk_forward(t, X, C, nn_f32(o2, BR, OUT), 0, &e), GT_EINVAL);
    cd[7] = 0.5f;
    /* fp32 on a bf16 trunk evaluates (through an fp32 input allocated on
     * first use) but does not train: the arena has one fp32 slot */
    MUST(nn_trunk_set_precision(t, NN_F32, &E));
    MUST(nn_trunk_forward(t, X, C, nn_f32(o2, BR, OUT), 0, &E));
    CHECK_EQ_INT(nn_trunk_forward(t, X, C, nn_f32(o2, BR, OUT), 1, &e), GT_EINVAL);
    CHECK(strstr(e.message, "trains in bf16") != NULL);
    MUST(nn_trunk_set_precision(t, NN_BF16, &E));
    MUST(nn_trunk_forward(t, X, C, nn_f32(o2, BR, OUT), 1, &E));
    /* a new plan drops the buffers allocated aside */
    MUST(nn_trunk_plan(t, BR + 1, &E));
    MUST(nn_trunk_forward(t, X, C, nn_f32(o2, BR, OUT), 1, &E));
    nn_trunk_destroy(t);
    float *bufs[] = {x, xs, cd, o1, o2, dx};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        nn_free(B, bufs[i]);
}

/* Edge shapes: no blocks, no data input (conditions only), no conditions,
 * fewer rows than planned; forward + backward run and stay finite, and a
 * trunk with no blocks is an affine map of LayerNorm(linear(x)). */
static void test_edge_shapes(void)
{
    struct { int in, nc, blocks, kind; } cases[] = {
        {5, 2, 0, NN_TRUNK_EXPERT}, {0, 2, 1, NN_TRUNK_EXPERT},
        {5, 0, 1, NN_TRUNK_EXPERT}, {5, 0, 0, NN_TRUNK_ROUTED},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        nn_trunk_config c;
        small_config(&c, (nn_trunk_kind)cases[k].kind);
        c.in_dim = cases[k].in;
        c.cond_dim = cases[k].nc;
        c.blocks = cases[k].blocks;
        nn_trunk *t = ready_trunk(B, &c, 2, 1.0f, 6);
        float x[30], cd[12], o[18], dx[30];
        for (int i = 0; i < 30; i++)
            x[i] = frand();
        for (int i = 0; i < 12; i++)
            cd[i] = frand();
        int n = 5; /* fewer rows than planned */
        MUST(nn_trunk_forward(t, nn_f32(x, n, c.in_dim), nn_f32(cd, n, c.cond_dim),
                            nn_f32(o, n, 3), 1, &E));
        MUST(nn_params_zero_grad(nn_trunk_params(t), &E));
        MUST(nn_trunk_backward(t, nn_f32(o, n, 3), nn_f32(c.in_dim ? dx : NULL, n, c.in_dim), &E));
        nn_params *p = nn_trunk_params(t);
        int finite = 1;
        for (size_t i = 0; i < p->count; i++)
            finite &= isfinite(p->grad[i]);
        for (int i = 0; i < n * c.in_dim; i++)
            finite &= isfinite(dx[i]);
        CHECK_MSG(finite, "edge case %zu: non-finite gradients", k);
        nn_trunk_destroy(t);
    }
}

int main(void)
{
    if (cpu_backend_create(&B, &E)) {
        fprintf(stderr, "%s\n", E.message);
        return 1;
    }
    size_t live0 = B->bytes_live;
    fd_trunk(NN_TRUNK_EXPERT, NN_SKIP_NONE, 0);
    fd_trunk(NN_TRUNK_ROUTED, NN_SKIP_NONE, 0);
    fd_trunk(NN_TRUNK_EXPERT, NN_SKIP_GATED, 0);
    fd_trunk(NN_TRUNK_ROUTED, NN_SKIP_GATED, 0);
    fd_trunk(NN_TRUNK_EXPERT, NN_SKIP_GATED, 2);
    fd_trunk(NN_TRUNK_ROUTED, NN_SKIP_NONE, 1);
    test_skip_init();
    test_block_cond(NN_TRUNK_EXPERT);
    test_block_cond(NN_TRUNK_ROUTED);
    test_routed_dtype();
    test_training(NN_TRUNK_EXPERT, NN_F32);
    test_training(NN_TRUNK_EXPERT, NN_BF16);
    test_training(NN_TRUNK_ROUTED, NN_F32);
    test_training(NN_TRUNK_ROUTED, NN_BF16);
    test_resume(NN_TRUNK_EXPERT, NN_F32);
    test_resume(NN_TRUNK_EXPERT, NN_BF16);
    test_resume(NN_TRUNK_ROUTED, NN_F32);
    test_bf16_emulation();
    test_bf16_arena();
    test_edge_shapes();
    test_bad_input();
    test_schedule();
    test_grad_scale();
    CHECK_EQ_INT(B->bytes_live, live0);
    nn_backend_close(B);
    return check_finish();
}
