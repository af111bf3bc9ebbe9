/* model_classify.c: the classifier test; protocol in model_classify.h. */
#include "model_classify.h"

#include <math.h>
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
static void shuffle(int64_t *idx, int64_t n, uint64_t seed, uint64_t stream)
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
/* the test                                                                 */
/* ------------------------------------------------------------------------ */

/* One classifier test with one seed: its split, initialisation and batches. */
static int classify_once(nn_backend *b, const float *xa, int64_t na, const float *xb,
                         int64_t nb, int d, const model_classify_config *cfg, uint64_t seed,
                         model_classify_result *out, gt_error *err)
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
    shuffle(D.order[0], nb, seed, 0);
    shuffle(D.order[1], na, seed, 1);
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
        shuffle(perm, 2 * D.n_train, seed, 100 + (uint64_t)epoch);
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
    double auc[MODEL_CLASSIFY_MAX_REPEATS];
    for (int r = 0; r < cfg->repeats; r++) {
        model_classify_result one;
        int rc = classify_once(b, xa, na, xb, nb, d, cfg, cfg->seed + (uint64_t)r, &one, err);
        if (rc) {
            memset(out, 0, sizeof *out);
            return rc;
        }
        auc[r] = one.auc;
        out->auc += one.auc / cfg->repeats;
        out->bce += one.bce / cfg->repeats;
        out->jsd_bits += one.jsd_bits / cfg->repeats;
        out->select_bce += one.select_bce / cfg->repeats;
        if (one.best_epoch > out->best_epoch)
            out->best_epoch = one.best_epoch;
        out->n_train = one.n_train;
        out->n_select = one.n_select;
        out->n_test = one.n_test;
    }
    out->repeats = cfg->repeats;
    double ss = 0.0;
    for (int r = 0; r < cfg->repeats; r++)
        ss += (auc[r] - out->auc) * (auc[r] - out->auc);
    out->auc_sd = cfg->repeats > 1 ? sqrt(ss / (cfg->repeats - 1)) : 0.0;
    return GT_OK;
}
