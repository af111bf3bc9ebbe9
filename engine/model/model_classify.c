/* model_classify.c: the classifier test; protocol in model_classify.h. */
#include "model_classify.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_critic.h"
#include "nn_adamw.h"
#include "nn_params.h"
#include "rng.h"

void model_classify_config_default(model_classify_config *c)
{
    memset(c, 0, sizeof *c);
    c->hidden = 512;
    c->depth = 3;
    c->epochs = 50;
    c->batch = 1000;
    c->lr = 2e-4f;
    c->seed = 1;
    c->repeats = 1;
}

/* ------------------------------------------------------------------------ */
/* AUC                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct scored {
    float s;
    uint8_t y;
} scored;

static int cmp_scored(const void *a, const void *b)
{
    float x = ((const scored *)a)->s, y = ((const scored *)b)->s;
    return x < y ? -1 : x > y;
}

double model_classify_auc(const float *score, const uint8_t *label, int64_t n)
{
    scored *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v)
        return NAN;
    int64_t pos = 0;
    for (int64_t i = 0; i < n; i++) {
        v[i].s = score[i];
        v[i].y = label[i];
        pos += label[i] != 0;
    }
    int64_t neg = n - pos;
    if (pos == 0 || neg == 0) {
        free(v);
        return NAN;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_scored);
    /* rank sum of the positives, tied scores sharing their mean rank */
    double rank_sum = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j < n && v[j].s == v[i].s)
            j++;
        double mean_rank = 0.5 * (double)(i + 1 + j);   /* ranks i+1 .. j */
        for (int64_t k = i; k < j; k++)
            if (v[k].y)
                rank_sum += mean_rank;
        i = j;
    }
    free(v);
    return (rank_sum - 0.5 * (double)pos * (double)(pos + 1)) / ((double)pos * (double)neg);
}

/* ------------------------------------------------------------------------ */
/* data: split, standardise, batches                                        */
/* ------------------------------------------------------------------------ */

typedef struct cls_data {
    const float *x[2];      /* B (label 0), A (label 1) */
    int d;
    int64_t *order[2];      /* shuffled row indices of each sample */
    int64_t n_train, n_select, n_test;
    double *mean, *inv_std; /* train statistics, per column */
} cls_data;

/* Fisher-Yates with a counter-based stream: the split depends on the seed
 * and the sample only. */
void model_classify_shuffle(int64_t *idx, int64_t n, uint64_t seed, uint64_t stream)
{
    rng_state r = rng_init(seed, stream);
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_next_u64(&r) % (uint64_t)(i + 1));
        int64_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}

/* Column means and standard deviations over the train rows of both
 * samples (in double). */
static void fit_standardise(cls_data *D)
{
    const int d = D->d;
    int64_t n = 2 * D->n_train;
    for (int j = 0; j < d; j++)
        D->mean[j] = D->inv_std[j] = 0;
    for (int s = 0; s < 2; s++)
        for (int64_t i = 0; i < D->n_train; i++) {
            const float *r = D->x[s] + (size_t)D->order[s][i] * d;
            for (int j = 0; j < d; j++)
                D->mean[j] += r[j];
        }
    for (int j = 0; j < d; j++)
        D->mean[j] /= (double)n;
    for (int s = 0; s < 2; s++)
        for (int64_t i = 0; i < D->n_train; i++) {
            const float *r = D->x[s] + (size_t)D->order[s][i] * d;
            for (int j = 0; j < d; j++) {
                double c = r[j] - D->mean[j];
                D->inv_std[j] += c * c;
            }
        }
    for (int j = 0; j < d; j++) {
        double sd = sqrt(D->inv_std[j] / (double)n);
        D->inv_std[j] = sd > 1e-12 ? 1.0 / sd : 0.0;   /* a constant column becomes 0 */
    }
}

/* Row `k` of a split laid out as [B rows ; A rows] (k < 2 m), from the
 * split's first row `first`, standardised into dst. */
static uint8_t fetch_row(const cls_data *D, int64_t first, int64_t m, int64_t k, float *dst)
{
    int s = k >= m;
    int64_t i = first + (s ? k - m : k);
    const float *r = D->x[s] + (size_t)D->order[s][i] * D->d;
    for (int j = 0; j < D->d; j++)
        dst[j] = (float)((r[j] - D->mean[j]) * D->inv_std[j]);
    return (uint8_t)s;
}

/* ------------------------------------------------------------------------ */
/* the network                                                              */
/* ------------------------------------------------------------------------ */

typedef struct cls_net {
    nn_backend *b;
    model_critic *c;
    nn_adamw_opt opt;
    int opt_ready;
    int batch, d;
    float *x_d, *z_d, *dz_d;   /* backend: [batch, d], [batch], [batch] */
    float *x_h, *z_h, *dz_h;   /* host mirrors */
    uint8_t *y_h;
    float *best;               /* backend: the best epoch's parameters */
} cls_net;

static void net_free(cls_net *n)
{
    if (n->opt_ready)
        nn_adamw_destroy(&n->opt);
    model_critic_destroy(n->c);
    nn_free(n->b, n->x_d);
    nn_free(n->b, n->z_d);
    nn_free(n->b, n->dz_d);
    nn_free(n->b, n->best);
    free(n->x_h);
    free(n->z_h);
    free(n->dz_h);
    free(n->y_h);
}

static int net_open(cls_net *n, nn_backend *b, int d, const model_classify_config *cfg,
                    gt_error *err)
{
    memset(n, 0, sizeof *n);
    n->b = b;
    n->batch = cfg->batch;
    n->d = d;
    model_critic_config cc = {d, 0, cfg->hidden, cfg->depth, 0.01f};   /* torch's LeakyReLU */
    int rc;
    if ((rc = model_critic_create(b, &cc, cfg->batch, &n->c, err)) ||
        (rc = model_critic_init(n->c, cfg->seed, err)))
        return rc;
    nn_adamw_config ac;
    nn_adamw_config_default(&ac);
    ac.lr = cfg->lr;
    ac.weight_decay = 0.0f;   /* Adam, as the CaloChallenge classifier */
    ac.clip_norm = 0.0f;
    if ((rc = nn_adamw_create(&n->opt, model_critic_params(n->c), &ac, err)))
        return rc;
    n->opt_ready = 1;
    size_t B = (size_t)cfg->batch, np = model_critic_params(n->c)->count;
    if ((rc = nn_alloc(b, B * (size_t)d * sizeof(float), (void **)&n->x_d, err)) ||
        (rc = nn_alloc(b, B * sizeof(float), (void **)&n->z_d, err)) ||
        (rc = nn_alloc(b, B * sizeof(float), (void **)&n->dz_d, err)) ||
        (rc = nn_alloc(b, np * sizeof(float), (void **)&n->best, err)))
        return rc;
    n->x_h = malloc(B * (size_t)d * sizeof(float));
    n->z_h = malloc(B * sizeof(float));
    n->dz_h = malloc(B * sizeof(float));
    n->y_h = malloc(B);
    if (!n->x_h || !n->z_h || !n->dz_h || !n->y_h)
        return gt_error_set(err, GT_ENOMEM, "classifier: out of memory");
    return GT_OK;
}

/* Logits of the m rows in x_h (uploaded here) into z_h. */
static int net_scores(cls_net *n, int m, gt_error *err)
{
    int rc;
    nn_tensor none = nn_f32(NULL, m, 0);
    if ((rc = nn_copy_h2d(n->b, n->x_d, n->x_h, (size_t)m * n->d * sizeof(float), err)) ||
        (rc = model_critic_forward(n->c, nn_f32(n->x_d, m, n->d), none, n->z_d, err)))
        return rc;
    return nn_copy_d2h(n->b, n->z_h, n->z_d, (size_t)m * sizeof(float), err);
}

/* Binary cross-entropy of a logit against a 0/1 label, stably. */
static double bce_term(float z, uint8_t y)
{
    double zz = z;
    return fmax(zz, 0.0) - zz * (double)y + log1p(exp(-fabs(zz)));
}

/* One optimiser step on the m rows of x_h / y_h. */
static int net_step(cls_net *n, int m, gt_error *err)
{
    int rc;
    if ((rc = net_scores(n, m, err)))
        return rc;
    for (int i = 0; i < m; i++) {
        double p = 1.0 / (1.0 + exp(-(double)n->z_h[i]));
        n->dz_h[i] = (float)((p - (double)n->y_h[i]) / (double)m);
    }
    if ((rc = nn_copy_h2d(n->b, n->dz_d, n->dz_h, (size_t)m * sizeof(float), err)) ||
        (rc = nn_params_zero_grad(model_critic_params(n->c), err)) ||
        (rc = model_critic_backward(n->c, n->dz_d, nn_f32(NULL, m, n->d), err)))
        return rc;
    return nn_adamw_step(&n->opt, NULL, err);
}

/* Scores of a whole split ([B rows ; A rows], m of each, from `first`):
 * the mean cross-entropy, and the scores and labels when wanted. */
static int net_eval(cls_net *n, const cls_data *D, int64_t first, int64_t m, double *bce,
                    float *scores, uint8_t *labels, gt_error *err)
{
    double acc = 0;
    for (int64_t k0 = 0; k0 < 2 * m; k0 += n->batch) {
        int rows = 2 * m - k0 < n->batch ? (int)(2 * m - k0) : n->batch;
        for (int r = 0; r < rows; r++)
            n->y_h[r] = fetch_row(D, first, m, k0 + r, n->x_h + (size_t)r * n->d);
        int rc = net_scores(n, rows, err);
        if (rc)
            return rc;
        for (int r = 0; r < rows; r++) {
            acc += bce_term(n->z_h[r], n->y_h[r]);
            if (scores) {
                scores[k0 + r] = n->z_h[r];
                labels[k0 + r] = n->y_h[r];
            }
        }
    }
    *bce = acc / (double)(2 * m);
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* the kept network                                                         */
/* ------------------------------------------------------------------------ */

size_t model_classify_net_count(int d, int hidden, int depth)
{
    size_t h = (size_t)hidden;
    return h * (size_t)d + h + (size_t)(depth - 1) * (h * h + h) + h + 1;
}

void model_classify_net_free(model_classify_net *net)
{
    if (!net)
        return;
    free(net->mean);
    free(net->inv_std);
    free(net->weights);
    memset(net, 0, sizeof *net);
}

/* Copies one parameter view to the host at dst. */
static int view_to_host(cls_net *n, const char *name, float *dst, size_t count, gt_error *err)
{
    nn_params *p = model_critic_params(n->c);
    int i = nn_params_find(p, name);
    if (i < 0)
        return gt_error_set(err, GT_EINVAL, "classifier: no parameter %s", name);
    nn_tensor v = nn_params_value(p, i);
    if ((size_t)v.rows * (size_t)v.cols != count)
        return gt_error_set(err, GT_EINVAL, "classifier: %s has %d x %d values, want %zu",
                            name, v.rows, v.cols, count);
    return nn_copy_d2h(n->b, dst, v.data, count * sizeof(float), err);
}

/* The best epoch's network (already restored into the parameters) and
 * the standardisation, into keep. */
static int keep_net(cls_net *n, const cls_data *D, const model_classify_config *cfg,
                    model_classify_net *keep, gt_error *err)
{
    const int d = D->d, H = cfg->hidden, L = cfg->depth;
    memset(keep, 0, sizeof *keep);
    keep->d = d;
    keep->hidden = H;
    keep->depth = L;
    keep->slope = model_critic_get_config(n->c)->slope;
    keep->n_weights = model_classify_net_count(d, H, L);
    keep->mean = malloc((size_t)d * sizeof(double));
    keep->inv_std = malloc((size_t)d * sizeof(double));
    keep->weights = malloc(keep->n_weights * sizeof(float));
    if (!keep->mean || !keep->inv_std || !keep->weights) {
        model_classify_net_free(keep);
        return gt_error_set(err, GT_ENOMEM, "classifier: out of memory");
    }
    memcpy(keep->mean, D->mean, (size_t)d * sizeof(double));
    memcpy(keep->inv_std, D->inv_std, (size_t)d * sizeof(double));
    float *w = keep->weights, *wt = malloc((size_t)H * (size_t)(d > H ? d : H) * sizeof *wt);
    int rc = wt ? GT_OK : gt_error_set(err, GT_ENOMEM, "classifier: out of memory");
    for (int l = 0; l < L && !rc; l++) {
        char name[NN_PARAM_NAME_MAX];
        size_t in = (size_t)(l ? H : d);
        snprintf(name, sizeof name, "critic.%d.w", l);
        rc = view_to_host(n, name, wt, (size_t)H * in, err);
        for (size_t o = 0; o < (size_t)H; o++)   /* [H x in] -> [in x H] */
            for (size_t i = 0; i < in; i++)
                w[i * (size_t)H + o] = wt[o * in + i];
        w += (size_t)H * in;
        snprintf(name, sizeof name, "critic.%d.b", l);
        if (!rc)
            rc = view_to_host(n, name, w, (size_t)H, err);
        w += H;
    }
    if (!rc)
        rc = view_to_host(n, "critic.out.w", w, (size_t)H, err);
    if (!rc)
        rc = view_to_host(n, "critic.out.b", w + H, 1, err);
    free(wt);
    if (rc)
        model_classify_net_free(keep);
    return rc;
}

/* Each output sums its inputs in ascending order, whatever the compiler
 * does with the loop over outputs: the same bits on every machine and for
 * every row, alone or among others. */
double model_classify_net_logit(const model_classify_net *net, const float *row, float *scratch)
{
    const int H = net->hidden;
    const int wide = net->d > H ? net->d : H;
    float *in = scratch, *out = scratch + wide;
    for (int j = 0; j < net->d; j++)
        in[j] = (float)((row[j] - net->mean[j]) * net->inv_std[j]);
    const float *w = net->weights;
    int n_in = net->d;
    for (int l = 0; l < net->depth; l++) {
        for (int o = 0; o < H; o++)
            out[o] = 0.0f;
        for (int i = 0; i < n_in; i++) {
            const float x = in[i], *wr = w + (size_t)i * H;
            for (int o = 0; o < H; o++)
                out[o] += wr[o] * x;
        }
        const float *bias = w + (size_t)n_in * H;
        for (int o = 0; o < H; o++) {
            float a = out[o] + bias[o];
            out[o] = a > 0.0f ? a : net->slope * a;
        }
        w = bias + H;
        n_in = H;
        float *t = in;
        in = out;
        out = t;
    }
    double z = 0.0;
    for (int i = 0; i < H; i++)
        z += (double)w[i] * in[i];
    return z + w[H];
}

static int model_classify_run(nn_backend *b, const float *xa, int64_t na, const float *xb,
                              int64_t nb, int d, const model_classify_config *cfg,
                              model_classify_result *out, model_classify_net *keep,
                              gt_error *err);

int model_classify_fit(nn_backend *b, const float *xa, int64_t na, const float *xb, int64_t nb,
                       int d, const model_classify_config *cfg, model_classify_net *net,
                       model_classify_result *out, gt_error *err)
{
    if (net)
        memset(net, 0, sizeof *net);
    if (!net)
        return gt_error_set(err, GT_EINVAL, "classifier: no network to keep");
    model_classify_config one = *cfg;
    one.repeats = 1;
    return model_classify_run(b, xa, na, xb, nb, d, &one, out, net, err);
}

/* ------------------------------------------------------------------------ */
/* the test                                                                 */
/* ------------------------------------------------------------------------ */

/* One classifier test with one seed: its split, initialisation and batches. */
static int classify_once(nn_backend *b, const float *xa, int64_t na, const float *xb,
                         int64_t nb, int d, const model_classify_config *cfg, uint64_t seed,
                         model_classify_result *out, model_classify_net *keep, gt_error *err)
{
    memset(out, 0, sizeof *out);
    int64_t n = na < nb ? na : nb;   /* equal counts: AUC 0.5 means no information */
    cls_data D;
    memset(&D, 0, sizeof D);
    D.x[0] = xb;
    D.x[1] = xa;
    D.d = d;
    D.n_train = n * 6 / 10;
    D.n_select = n * 2 / 10;
    D.n_test = n - D.n_train - D.n_select;
    cls_net net;
    memset(&net, 0, sizeof net);
    float *scores = NULL;
    uint8_t *labels = NULL;
    int64_t *perm = NULL;
    int rc = GT_OK;
    D.order[0] = malloc((size_t)nb * sizeof(int64_t));
    D.order[1] = malloc((size_t)na * sizeof(int64_t));
    D.mean = malloc((size_t)d * sizeof(double));
    D.inv_std = malloc((size_t)d * sizeof(double));
    perm = malloc((size_t)(2 * D.n_train) * sizeof(int64_t));
    scores = malloc((size_t)(2 * D.n_test) * sizeof(float));
    labels = malloc((size_t)(2 * D.n_test));
    if (!D.order[0] || !D.order[1] || !D.mean || !D.inv_std || !perm || !scores || !labels) {
        rc = gt_error_set(err, GT_ENOMEM, "classifier: out of memory");
        goto done;
    }
    model_classify_shuffle(D.order[0], nb, seed, 0);
    model_classify_shuffle(D.order[1], na, seed, 1);
    fit_standardise(&D);
    /* at least ~20 steps an epoch: a small sample in batches of 1000 would
     * train for a handful of steps and understate the difference */
    model_classify_config run_cfg = *cfg;
    run_cfg.seed = seed;
    int64_t per_epoch = 2 * D.n_train / 20;
    if (per_epoch < 32)
        per_epoch = 32;
    if (run_cfg.batch > per_epoch)
        run_cfg.batch = (int)per_epoch;
    if ((rc = net_open(&net, b, d, &run_cfg, err)))
        goto done;
    nn_params *params = model_critic_params(net.c);
    double best = INFINITY;
    for (int epoch = 1; epoch <= cfg->epochs; epoch++) {
        if (cfg->should_stop && cfg->should_stop(cfg->stop_user)) {
            rc = gt_error_set(err, GT_ECANCELLED, "classifier: stopped");
            goto done;
        }
        model_classify_shuffle(perm, 2 * D.n_train, seed, 100 + (uint64_t)epoch);
        for (int64_t k0 = 0; k0 < 2 * D.n_train; k0 += net.batch) {
            int rows = 2 * D.n_train - k0 < net.batch ? (int)(2 * D.n_train - k0) : net.batch;
            if (rows < 2)
                break;   /* a lone last row: a step on it would be noise */
            for (int r = 0; r < rows; r++)
                net.y_h[r] = fetch_row(&D, 0, D.n_train, perm[k0 + r],
                                       net.x_h + (size_t)r * d);
            if ((rc = net_step(&net, rows, err)))
                goto done;
        }
        double sel;
        if ((rc = net_eval(&net, &D, D.n_train, D.n_select, &sel, NULL, NULL, err)))
            goto done;
        if (sel < best) {
            best = sel;
            out->best_epoch = epoch;
            out->select_bce = sel;
            if ((rc = nn_copy_d2d(b, net.best, params->value, params->count * sizeof(float),
                                  err)))
                goto done;
        }
    }
    if ((rc = nn_copy_d2d(b, params->value, net.best, params->count * sizeof(float), err)) ||
        (rc = net_eval(&net, &D, D.n_train + D.n_select, D.n_test, &out->bce, scores, labels,
                       err)))
        goto done;
    out->auc = model_classify_auc(scores, labels, 2 * D.n_test);
    out->jsd_bits = fmax(0.0, (log(2.0) - out->bce) / log(2.0));
    out->n_train = D.n_train;
    out->n_select = D.n_select;
    out->n_test = D.n_test;
    if (keep)
        rc = keep_net(&net, &D, cfg, keep, err);
done:
    net_free(&net);
    free(D.order[0]);
    free(D.order[1]);
    free(D.mean);
    free(D.inv_std);
    free(perm);
    free(scores);
    free(labels);
    return rc;
}

int model_classify(nn_backend *b, const float *xa, int64_t na, const float *xb, int64_t nb,
                   int d, const model_classify_config *cfg, model_classify_result *out,
                   gt_error *err)
{
    return model_classify_run(b, xa, na, xb, nb, d, cfg, out, NULL, err);
}

/* The checks and the repeats; keep (one repeat only) receives the network. */
static int model_classify_run(nn_backend *b, const float *xa, int64_t na, const float *xb,
                              int64_t nb, int d, const model_classify_config *cfg,
                              model_classify_result *out, model_classify_net *keep,
                              gt_error *err)
{
    memset(out, 0, sizeof *out);
    if (!b || !xa || !xb || !cfg || d < 1)
        return gt_error_set(err, GT_EINVAL, "classifier: bad arguments");
    if (cfg->hidden < 1 || cfg->depth < 1 || cfg->epochs < 1 || cfg->batch < 2 ||
        !(cfg->lr > 0) || cfg->repeats < 1 || cfg->repeats > MODEL_CLASSIFY_MAX_REPEATS)
        return gt_error_set(err, GT_EINVAL,
                            "classifier: hidden %d, depth %d, epochs %d, batch %d, lr %g, "
                            "repeats %d: all must be positive (batch >= 2, repeats <= %d)",
                            cfg->hidden, cfg->depth, cfg->epochs, cfg->batch, cfg->lr,
                            cfg->repeats, MODEL_CLASSIFY_MAX_REPEATS);
    int64_t n = na < nb ? na : nb;
    if (n < 10)
        return gt_error_set(err, GT_EINVAL,
                            "classifier: needs at least 10 showers of each sample (got %lld "
                            "and %lld)",
                            (long long)na, (long long)nb);
    /* Each repeat is a whole test of its own (seed + r: another split, start
     * and order); the mean over them is the estimate, their spread its noise. */
    model_classify_result one[MODEL_CLASSIFY_MAX_REPEATS];
    for (int r = 0; r < cfg->repeats; r++) {
        int rc = classify_once(b, xa, na, xb, nb, d, cfg, cfg->seed + (uint64_t)r, &one[r],
                               keep, err);
        if (rc) {
            memset(out, 0, sizeof *out);
            return rc;
        }
    }
    model_classify_mean(one, cfg->repeats, out);
    return GT_OK;
}

void model_classify_mean(const model_classify_result *one, int n, model_classify_result *out)
{
    memset(out, 0, sizeof *out);
    for (int r = 0; r < n; r++) {
        out->auc += one[r].auc / n;
        out->bce += one[r].bce / n;
        out->jsd_bits += one[r].jsd_bits / n;
        out->select_bce += one[r].select_bce / n;
        if (one[r].best_epoch > out->best_epoch)
            out->best_epoch = one[r].best_epoch;
        out->n_train = one[r].n_train;
        out->n_select = one[r].n_select;
        out->n_test = one[r].n_test;
    }
    out->repeats = n;
    double ss = 0.0;
    for (int r = 0; r < n; r++)
        ss += (one[r].auc - out->auc) * (one[r].auc - out->auc);
    out->auc_sd = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
}
