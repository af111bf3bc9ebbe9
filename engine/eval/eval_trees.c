/* eval_trees: the classifier test with XGBoost's gradient-boosted trees
 * (eval_trees.h). */
#include "eval_trees.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xgboost/c_api.h>

void eval_trees_config_default(eval_trees_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->max_rounds = 300;
    cfg->patience = 30;
    cfg->max_depth = 6;
    cfg->eta = 0.1;
    cfg->seed = 1;
    cfg->repeats = 1;
}

const char *eval_trees_version(void)
{
    static char v[32];
    int major = 0, minor = 0, patch = 0;
    XGBoostVersion(&major, &minor, &patch);
    snprintf(v, sizeof v, "%d.%d.%d", major, minor, patch);
    return v;
}

/* The library's last error as ours: a failed library call, as a failed
 * oneDNN call is (GT_EDEVICE). */
static int trees_fail(gt_error *err, const char *what)
{
    return gt_error_set(err, GT_EDEVICE, "trees: %s: %s", what, XGBGetLastError());
}

/* One split's rows, [B rows ; A rows], columns picked, with labels. */
typedef struct trees_split {
    float *x;
    float *y;
    int64_t rows;   /* 2 m */
} trees_split;

static void split_free(trees_split *s)
{
    free(s->x);
    free(s->y);
    memset(s, 0, sizeof *s);
}

/* Rows [first, first + m) of each sample's order into s. */
static int split_gather(trees_split *s, const float *const x[2], const int64_t *const order[2],
                        int d, const int *cols, int n_cols, int64_t first, int64_t m)
{
    s->rows = 2 * m;
    s->x = malloc((size_t)s->rows * n_cols * sizeof *s->x);
    s->y = malloc((size_t)s->rows * sizeof *s->y);
    if (!s->x || !s->y)
        return -1;
    for (int side = 0; side < 2; side++)
        for (int64_t i = 0; i < m; i++) {
            const float *src = x[side] + (size_t)order[side][first + i] * d;
            float *dst = s->x + (size_t)(side * m + i) * n_cols;
            for (int j = 0; j < n_cols; j++)
                dst[j] = src[cols ? cols[j] : j];
            s->y[side * m + i] = (float)side;
        }
    return 0;
}

static int split_matrix(const trees_split *s, int n_cols, float missing, DMatrixHandle *out,
                        gt_error *err)
{
    if (XGDMatrixCreateFromMat(s->x, (bst_ulong)s->rows, (bst_ulong)n_cols, missing, out))
        return trees_fail(err, "matrix");
    if (XGDMatrixSetFloatInfo(*out, "label", s->y, (bst_ulong)s->rows))
        return trees_fail(err, "labels");
    return GT_OK;
}

/* "[12]\tselect-logloss:0.6543" -> 0.6543 */
static double parse_eval(const char *s)
{
    const char *c = s ? strrchr(s, ':') : NULL;
    return c ? strtod(c + 1, NULL) : NAN;
}

static int set_params(BoosterHandle b, const eval_trees_config *cfg, uint64_t seed,
                      gt_error *err)
{
    char depth[16], eta[32], threads[16], seed_s[32];
    snprintf(depth, sizeof depth, "%d", cfg->max_depth);
    snprintf(eta, sizeof eta, "%.17g", cfg->eta);
    snprintf(threads, sizeof threads, "%d", cfg->threads);
    /* XGBoost's seed is a 32-bit int; the low bits keep repeats distinct */
    snprintf(seed_s, sizeof seed_s, "%d", (int)(seed & 0x7fffffff));
    const char *kv[][2] = {
        {"objective", "binary:logistic"}, {"tree_method", "hist"}, {"max_bin", "256"},
        {"max_depth", depth},             {"eta", eta},            {"eval_metric", "logloss"},
        {"seed", seed_s},                 {"verbosity", "0"},      {"nthread", threads},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (XGBoosterSetParam(b, kv[i][0], kv[i][1]))
            return trees_fail(err, "parameters");
    return GT_OK;
}

/* Trains on train with early stopping on sel; *best_rounds: the kept count. */
static int boost(BoosterHandle b, DMatrixHandle train, DMatrixHandle sel,
                 const eval_trees_config *cfg, int *best_rounds, double *best_loss,
                 gt_error *err)
{
    *best_loss = INFINITY;
    *best_rounds = 0;
    const char *name[1] = {"select"};
    for (int round = 0; round < cfg->max_rounds; round++) {
        if (cfg->should_stop && cfg->should_stop(cfg->stop_user))
            return gt_error_set(err, GT_ECANCELLED, "trees: stopped");
        const char *msg = NULL;
        DMatrixHandle evs[1] = {sel};
        if (XGBoosterUpdateOneIter(b, round, train))
            return trees_fail(err, "training");
        if (XGBoosterEvalOneIter(b, round, evs, name, 1, &msg))
            return trees_fail(err, "select loss");
        double loss = parse_eval(msg);
        if (!isfinite(loss))
            return gt_error_set(err, GT_EDEVICE, "trees: unreadable select loss \"%s\"",
                                msg ? msg : "");
        if (loss < *best_loss) {
            *best_loss = loss;
            *best_rounds = round + 1;
        } else if (round + 1 - *best_rounds >= cfg->patience) {
            break;
        }
    }
    return GT_OK;
}

/* Probabilities of the test rows from the first `rounds` trees. */
static int predict(BoosterHandle b, DMatrixHandle test, int rounds, int64_t rows, float *p,
                   gt_error *err)
{
    char conf[160];
    snprintf(conf, sizeof conf,
             "{\"type\": 0, \"training\": false, \"iteration_begin\": 0, "
             "\"iteration_end\": %d, \"strict_shape\": false}",
             rounds);
    const bst_ulong *shape = NULL;
    bst_ulong dim = 0;
    const float *res = NULL;
    if (XGBoosterPredictFromDMatrix(b, test, conf, &shape, &dim, &res))
        return trees_fail(err, "prediction");
    if (dim < 1 || (int64_t)shape[0] != rows)
        return gt_error_set(err, GT_EDEVICE, "trees: %llu predictions for %lld rows",
                            dim ? (unsigned long long)shape[0] : 0ULL, (long long)rows);
    memcpy(p, res, (size_t)rows * sizeof *p);
    return GT_OK;
}

static int trees_once(const float *xa, int64_t na, const float *xb, int64_t nb, int d,
                      const int *cols, int n_cols, float missing, const eval_trees_config *cfg,
                      uint64_t seed, model_classify_result *out, gt_error *err)
{
    memset(out, 0, sizeof *out);
    const int64_t n = na < nb ? na : nb;
    out->n_train = n * 6 / 10;
    out->n_select = n * 2 / 10;
    out->n_test = n - out->n_train - out->n_select;
    int64_t *order[2] = {malloc((size_t)nb * sizeof(int64_t)),
                         malloc((size_t)na * sizeof(int64_t))};
    trees_split part[3];
    memset(part, 0, sizeof part);
    DMatrixHandle m[3] = {NULL, NULL, NULL};
    BoosterHandle booster = NULL;
    float *p = NULL;
    uint8_t *label = NULL;
    int rc = GT_OK;
    if (!order[0] || !order[1]) {
        rc = gt_error_set(err, GT_ENOMEM, "trees: out of memory");
        goto done;
    }
    model_classify_shuffle(order[0], nb, seed, 0);
    model_classify_shuffle(order[1], na, seed, 1);
    const float *const x[2] = {xb, xa};
    const int64_t *const ord[2] = {order[0], order[1]};
    const int64_t first[3] = {0, out->n_train, out->n_train + out->n_select};
    const int64_t count[3] = {out->n_train, out->n_select, out->n_test};
    for (int k = 0; k < 3; k++) {
        if (split_gather(&part[k], x, ord, d, cols, n_cols, first[k], count[k])) {
            rc = gt_error_set(err, GT_ENOMEM, "trees: out of memory for %lld rows",
                              (long long)(2 * count[k]));
            goto done;
        }
        if ((rc = split_matrix(&part[k], n_cols, missing, &m[k], err)))
            goto done;
    }
    if (XGBoosterCreate(m, 2, &booster)) {
        rc = trees_fail(err, "booster");
        goto done;
    }
    int rounds = 0;
    if ((rc = set_params(booster, cfg, seed, err)) ||
        (rc = boost(booster, m[0], m[1], cfg, &rounds, &out->select_bce, err)))
        goto done;
    const int64_t rows = part[2].rows;
    p = malloc((size_t)rows * sizeof *p);
    label = malloc((size_t)rows);
    if (!p || !label) {
        rc = gt_error_set(err, GT_ENOMEM, "trees: out of memory");
        goto done;
    }
    if ((rc = predict(booster, m[2], rounds, rows, p, err)))
        goto done;
    double bce = 0;
    for (int64_t i = 0; i < rows; i++) {
        label[i] = (uint8_t)part[2].y[i];
        double q = fmin(fmax(p[i], 1e-7), 1.0 - 1e-7);
        bce -= label[i] ? log(q) : log(1.0 - q);
    }
    out->bce = bce / (double)rows;
    out->auc = model_classify_auc(p, label, rows);
    out->jsd_bits = fmax(0.0, (log(2.0) - out->bce) / log(2.0));
    out->best_epoch = rounds;
    out->repeats = 1;
done:
    if (booster)
        XGBoosterFree(booster);
    for (int k = 0; k < 3; k++) {
        if (m[k])
            XGDMatrixFree(m[k]);
        split_free(&part[k]);
    }
    free(order[0]);
    free(order[1]);
    free(p);
    free(label);
    return rc;
}

int eval_trees_classify(const float *xa, int64_t na, const float *xb, int64_t nb, int d,
                        const int *cols, int n_cols, float missing,
                        const eval_trees_config *cfg, model_classify_result *out,
                        gt_error *err)
{
    memset(out, 0, sizeof *out);
    if (!xa || !xb || !cfg || d < 1)
        return gt_error_set(err, GT_EINVAL, "trees: bad arguments");
    if (!cols)
        n_cols = d;
    for (int j = 0; cols && j < n_cols; j++)
        if (cols[j] < 0 || cols[j] >= d)
            return gt_error_set(err, GT_EINVAL, "trees: column %d outside [0, %d)", cols[j], d);
    if (n_cols < 1 || cfg->max_rounds < 1 || cfg->patience < 1 || cfg->max_depth < 1 ||
        cfg->max_depth > 32 || !(cfg->eta > 0) || cfg->threads < 0 || cfg->repeats < 1 ||
        cfg->repeats > MODEL_CLASSIFY_MAX_REPEATS)
        return gt_error_set(err, GT_EINVAL,
                            "trees: columns %d, rounds %d, patience %d, depth %d, eta %g, "
                            "threads %d, repeats %d: out of range",
                            n_cols, cfg->max_rounds, cfg->patience, cfg->max_depth, cfg->eta,
                            cfg->threads, cfg->repeats);
    if ((na < nb ? na : nb) < 10)
        return gt_error_set(err, GT_EINVAL,
                            "trees: needs at least 10 showers of each sample (got %lld and "
                            "%lld)",
                            (long long)na, (long long)nb);
    model_classify_result one[MODEL_CLASSIFY_MAX_REPEATS];
    for (int r = 0; r < cfg->repeats; r++) {
        int rc = trees_once(xa, na, xb, nb, d, cols, n_cols, missing, cfg,
                            cfg->seed + (uint64_t)r, &one[r], err);
        if (rc)
            return rc;
    }
    model_classify_mean(one, cfg->repeats, out);
    return GT_OK;
}
