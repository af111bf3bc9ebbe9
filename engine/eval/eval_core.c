/* eval_core: the comparison `giant eval` and the service's evaluations
 * share (eval_core.h). */
#include "eval_core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calo_h5.h"

void eval_core_options_default(eval_core_options *o)
{
    memset(o, 0, sizeof *o);
    o->separation = 1;
    o->distances = 1;
    for (int k = 0; k < EVAL_CORE_N_CLS; k++)
        o->classifier[k] = 1;
    model_classify_config_default(&o->cls);
    eval_trees_config_default(&o->trees);
    o->seed = 42;
    o->cls.seed = 42;
}

const char *eval_core_cls_key(eval_core_cls k)
{
    static const char *const key[EVAL_CORE_N_CLS] = {"high", "low", "trees_high", "trees_low"};
    return k >= 0 && k < EVAL_CORE_N_CLS ? key[k] : "?";
}

/* ------------------------------------------------------------------------ */
/* samples                                                                  */
/* ------------------------------------------------------------------------ */

void eval_core_sample_free(eval_core_sample *s)
{
    free(s->feats);
    free(s->e_inc);
    free(s->low);
    memset(s, 0, sizeof *s);
}

int eval_core_sample_alloc(eval_core_sample *s, const char *label, int64_t n,
                           const feat_layout *fl, int want_low, gt_error *err)
{
    memset(s, 0, sizeof *s);
    snprintf(s->label, sizeof s->label, "%s", label);
    if (n < 1)
        return gt_error_set(err, GT_EFORMAT, "%s holds no showers", label);
    const int V = fl->geo->n_voxels;
    s->feats = malloc((size_t)n * fl->n_features * sizeof *s->feats);
    s->e_inc = malloc((size_t)n * sizeof *s->e_inc);
    if (want_low)
        s->low = malloc((size_t)n * (V + 1) * sizeof *s->low);
    if (!s->feats || !s->e_inc || (want_low && !s->low)) {
        eval_core_sample_free(s);
        return gt_error_set(err, GT_ENOMEM, "out of memory for %lld showers of %s",
                            (long long)n, label);
    }
    s->n = n;
    s->n_features = fl->n_features;
    s->voxels = V;
    eval_spectrum_init(&s->spec, fl->geo);
    return GT_OK;
}

void eval_core_sample_put(eval_core_sample *s, const feat_layout *fl, int64_t row, int64_t m,
                          const float *showers, const float *e_inc)
{
    const int V = s->voxels;
    memcpy(s->e_inc + row, e_inc, (size_t)m * sizeof *e_inc);
    feat_compute_batch(fl, showers, s->e_inc + row, m, s->feats + row * fl->n_features);
    eval_spectrum_add(&s->spec, fl->geo, showers, s->e_inc + row, m);
    for (int64_t i = 0; s->low && i < m; i++) {
        float e = s->e_inc[row + i], *dst = s->low + (size_t)(row + i) * (V + 1);
        const float *src = showers + (size_t)i * V;
        for (int v = 0; v < V; v++)
            dst[v] = src[v] / e;
        dst[V] = log10f(e);
    }
}

int eval_core_sample_read(eval_core_sample *s, const char *path, const geo_geometry *geo,
                          const feat_layout *fl, int64_t max_rows, int want_low, gt_error *err)
{
    calo_h5_reader r;
    memset(s, 0, sizeof *s);
    int rc = calo_h5_open(&r, path, geo, err);
    if (rc)
        return rc;
    const int V = geo->n_voxels;
    int64_t n = r.n_rows < max_rows ? r.n_rows : max_rows;
    if ((rc = eval_core_sample_alloc(s, path, n, fl, want_low, err))) {
        calo_h5_close(&r);
        return rc;
    }
    int64_t block = (32LL << 20) / ((int64_t)V * 4);
    if (block < 16)
        block = 16;
    float *buf = malloc((size_t)block * V * sizeof *buf);
    float *e = malloc((size_t)block * sizeof *e);
    if (!buf || !e)
        rc = gt_error_set(err, GT_ENOMEM, "out of memory reading %s", path);
    for (int64_t row = 0; !rc && row < n; row += block) {
        int64_t m = n - row < block ? n - row : block;
        if (!(rc = calo_h5_read_rows(&r, row, m, e, buf, err)))
            eval_core_sample_put(s, fl, row, m, buf, e);
    }
    free(buf);
    free(e);
    calo_h5_close(&r);
    if (rc)
        eval_core_sample_free(s);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* the comparison                                                           */
/* ------------------------------------------------------------------------ */

/* The classifier's high-level input (feat_classifier_row) of every shower. */
static float *eval_core_high_rows(const eval_core_sample *s, const feat_layout *fl, int *d_out)
{
    const int d = feat_classifier_width(fl);
    float *x = malloc((size_t)s->n * d * sizeof *x);
    if (!x)
        return NULL;
    for (int64_t i = 0; i < s->n; i++)
        feat_classifier_row(fl, s->feats + (size_t)i * fl->n_features, s->e_inc[i],
                            x + (size_t)i * d);
    *d_out = d;
    return x;
}

/* What the log calls each classifier. */
static const char *const cls_kind[EVAL_CORE_N_CLS] = {"high-level", "low-level",
                                                     "high-level trees", "low-level trees"};

/* The columns of the high-level row (feat_classifier_row: log10 E_inc,
 * then feature j at column 1 + j) in each breakdown subset; names and
 * column lists into r and cols (EVAL_CORE_MAX_SUBSETS x width), counts
 * into n_cols.  Subsets with no feature are left out. */
static int breakdown_subsets(const feat_layout *fl, eval_core_result *r, int *cols, int width,
                             int *n_cols)
{
    static const int depth_lo[3] = {0, 10, 25}, depth_hi[3] = {9, 24, 1 << 20};
    int n = 0;
    for (int k = 0; k < 3 + FEAT_N_GROUPS; k++) {
        int *c = cols + (size_t)n * width, m = 0;
        c[m++] = 0;   /* log10 E_inc: every subset is conditioned on it */
        for (int j = 0; j < fl->n_features; j++) {
            const feat_info *fi = &fl->info[j];
            int in = k < 3 ? fi->layer_id >= depth_lo[k] && fi->layer_id <= depth_hi[k]
                           : (int)fi->group == k - 3;
            if (in)
                c[m++] = 1 + j;
        }
        if (m == 1)
            continue;
        if (k < 3 && depth_hi[k] < (1 << 20))
            snprintf(r->subset_name[n], sizeof r->subset_name[n], "layers %d-%d", depth_lo[k],
                     depth_hi[k]);
        else if (k < 3)
            snprintf(r->subset_name[n], sizeof r->subset_name[n], "layers %d-", depth_lo[k]);
        else
            snprintf(r->subset_name[n], sizeof r->subset_name[n], "%s",
                     feat_group_name((feat_group)(k - 3)));
        n_cols[n++] = m;
    }
    return n;
}

/* One classifier of family k on inputs xa, xb (d columns; cols/n_cols a
 * subset or NULL for all). */
static int run_classifier(eval_core_cls k, const float *xa, int64_t na, const float *xb,
                          int64_t nb, int d, const int *cols, int n_cols,
                          const eval_core_options *o, nn_backend *cls_b,
                          model_classify_result *out, gt_error *err)
{
    if (k == EVAL_CORE_TREES_HIGH || k == EVAL_CORE_TREES_LOW) {
        eval_trees_config t = o->trees;
        t.seed = o->cls.seed;
        t.repeats = o->cls.repeats;
        t.should_stop = o->should_stop;
        t.stop_user = o->stop_user;
        /* an empty voxel is "missing" for the trees: the same splits, a
         * sparse matrix (eval_trees.h) */
        float missing = k == EVAL_CORE_TREES_LOW ? 0.0f : NAN;
        return eval_trees_classify(xa, na, xb, nb, d, cols, n_cols, missing, &t, out, err);
    }
    model_classify_config cls = o->cls;
    cls.should_stop = o->should_stop;
    cls.stop_user = o->stop_user;
    if (!cols)
        return model_classify(cls_b, xa, na, xb, nb, d, &cls, out, err);
    /* the MLP takes whole rows: gather the subset's columns */
    float *sa = malloc((size_t)na * n_cols * sizeof *sa);
    float *sb = malloc((size_t)nb * n_cols * sizeof *sb);
    int rc;
    if (!sa || !sb) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory for the classifier's input");
    } else {
        for (int64_t i = 0; i < na; i++)
            for (int j = 0; j < n_cols; j++)
                sa[(size_t)i * n_cols + j] = xa[(size_t)i * d + cols[j]];
        for (int64_t i = 0; i < nb; i++)
            for (int j = 0; j < n_cols; j++)
                sb[(size_t)i * n_cols + j] = xb[(size_t)i * d + cols[j]];
        rc = model_classify(cls_b, sa, na, sb, nb, n_cols, &cls, out, err);
    }
    free(sa);
    free(sb);
    return rc;
}

/* A high-level family again on each subset of the features. */
static int run_breakdown(const float *xa, int64_t na, const float *xb, int64_t nb, int d,
                         const feat_layout *fl, const eval_core_options *o, nn_backend *cls_b,
                         FILE *log, eval_core_result *out, gt_error *err)
{
    /* The trees when they were trained: on the high-level features they
     * have been the stronger family in every comparison measured
     * (docs/fidelity-log.md), and a breakdown costs a dozen whole tests,
     * seconds for the trees against minutes for the MLP. */
    eval_core_cls k = out->has_cls[EVAL_CORE_TREES_HIGH] ? EVAL_CORE_TREES_HIGH
                                                          : EVAL_CORE_MLP_HIGH;
    if (!out->has_cls[k])
        return GT_OK;
    int *cols = malloc((size_t)EVAL_CORE_MAX_SUBSETS * d * sizeof *cols);
    int n_cols[EVAL_CORE_MAX_SUBSETS];
    if (!cols)
        return gt_error_set(err, GT_ENOMEM, "out of memory for the breakdown");
    int n = breakdown_subsets(fl, out, cols, d, n_cols), rc = GT_OK;
    out->breakdown_of = k;
    for (int s = 0; s < n && !rc; s++) {
        if (log)
            fprintf(log, "giant eval: breakdown, the %s classifier on %s\n", cls_kind[k],
                    out->subset_name[s]);
        rc = run_classifier(k, xa, na, xb, nb, d, cols + (size_t)s * d, n_cols[s], o, cls_b,
                            &out->subset[s], err);
        if (!rc)
            out->n_subsets = s + 1;
    }
    free(cols);
    return rc;
}

static int run_classifiers(const eval_core_sample *a, const eval_core_sample *ref,
                           const feat_layout *fl, const eval_core_options *o, nn_backend *cls_b,
                           FILE *log, eval_core_result *out, gt_error *err)
{
    int dh = 0, rc = GT_OK;
    float *ha = NULL, *hb = NULL;
    const int want_high = o->classifier[EVAL_CORE_MLP_HIGH] ||
                          o->classifier[EVAL_CORE_TREES_HIGH];
    if (want_high) {
        ha = eval_core_high_rows(a, fl, &dh);
        hb = eval_core_high_rows(ref, fl, &dh);
        if (!ha || !hb)
            rc = gt_error_set(err, GT_ENOMEM, "out of memory for the classifier's input");
    }
    for (int k = 0; k < EVAL_CORE_N_CLS && !rc; k++) {
        if (!o->classifier[k])
            continue;
        if (o->should_stop && o->should_stop(o->stop_user)) {
            rc = gt_error_set(err, GT_ECANCELLED, "stopped");
            break;
        }
        const int low = k == EVAL_CORE_MLP_LOW || k == EVAL_CORE_TREES_LOW;
        if (low && (!a->low || !ref->low)) {
            rc = gt_error_set(err, GT_EINVAL, "the low-level classifier needs the voxels");
            break;
        }
        if (log)
            fprintf(log, "giant eval: training the %s classifier on %s against %s\n",
                    cls_kind[k], a->label, ref->label);
        rc = low ? run_classifier((eval_core_cls)k, a->low, a->n, ref->low, ref->n,
                                  fl->geo->n_voxels + 1, NULL, 0, o, cls_b, &out->cls[k], err)
                 : run_classifier((eval_core_cls)k, ha, a->n, hb, ref->n, dh, NULL, 0, o, cls_b,
                                  &out->cls[k], err);
        out->has_cls[k] = rc == GT_OK;
    }
    if (!rc && o->breakdown && want_high)
        rc = run_breakdown(ha, a->n, hb, ref->n, dh, fl, o, cls_b, log, out, err);
    free(ha);
    free(hb);
    return rc;
}

int eval_core_compare(const eval_core_sample *a, const eval_core_sample *ref,
                      const feat_layout *fl, const eval_core_options *o, nn_backend *cls_b,
                      FILE *log, eval_core_result *out, gt_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = metric_compare(fl, a->feats, o->distances ? a->e_inc : NULL, a->n, ref->feats,
                            o->distances ? ref->e_inc : NULL, ref->n, o->seed, &out->rep, err);
    if (rc)
        return rc;
    if (o->separation) {
        out->n_spec = a->spec.n;
        for (int k = 0; k < a->spec.n; k++) {
            out->spec_sep[k] = eval_spectrum_separation(&a->spec, &ref->spec, k);
            snprintf(out->spec_name[k], sizeof out->spec_name[k], "%s", a->spec.f[k].name);
        }
    }
    rc = run_classifiers(a, ref, fl, o, cls_b, log, out, err);
    if (rc)
        eval_core_result_free(out);
    return rc;
}

void eval_core_result_free(eval_core_result *r)
{
    metric_report_free(&r->rep);
}

double eval_core_spectrum_mean(const eval_core_result *r)
{
    double s = 0;
    for (int k = 0; k < r->n_spec; k++)
        s += r->spec_sep[k];
    return r->n_spec ? s / r->n_spec : NAN;
}

double eval_core_mean_over_groups(const metric_report *r)
{
    double s = 0;
    int n = 0;
    for (int g = 0; g < FEAT_N_GROUPS; g++)
        if (r->group[g].count > 0) {
            s += r->group[g].mean;
            n++;
        }
    return n ? s / n : NAN;
}

/* ------------------------------------------------------------------------ */
/* the document                                                             */
/* ------------------------------------------------------------------------ */

/* NaN and infinity are not JSON numbers: null. */
static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *summary_json(const metric_summary *s, const feat_layout *fl)
{
    json_t *o = json_object();
    json_object_set_new(o, "count", json_integer(s->count));
    json_object_set_new(o, "mean", num(s->mean));
    json_object_set_new(o, "median", num(s->median));
    json_object_set_new(o, "max", num(s->max));
    if (s->argmax >= 0)
        json_object_set_new(o, "max_feature", json_string(fl->info[s->argmax].name));
    return o;
}

/* One classifier's result; trees report their kept rounds, the MLP its
 * best epoch. */
static json_t *cls_json(const model_classify_result *c, int trees)
{
    json_t *x = json_object();
    json_object_set_new(x, "auc", num(c->auc));
    json_object_set_new(x, "auc_sd", num(c->auc_sd));
    json_object_set_new(x, "repeats", json_integer(c->repeats));
    json_object_set_new(x, "bce", num(c->bce));
    json_object_set_new(x, "jsd_bits", num(c->jsd_bits));
    json_object_set_new(x, trees ? "rounds" : "best_epoch", json_integer(c->best_epoch));
    json_object_set_new(x, "n_train", json_integer(c->n_train));
    json_object_set_new(x, "n_select", json_integer(c->n_select));
    json_object_set_new(x, "n_test", json_integer(c->n_test));
    return x;
}

/* One comparison's fields into o. */
static void fields_json(json_t *o, const eval_core_result *e, const feat_layout *fl,
                        const eval_core_options *opt)
{
    const metric_report *r = &e->rep;
    if (opt->separation) {
        json_t *sep = json_object(), *groups = json_object();
        for (int j = 0; j < fl->n_features; j++)
            json_object_set_new(sep, fl->info[j].name, num(r->sep[j]));
        for (int g = 0; g < FEAT_N_GROUPS; g++)
            if (r->group[g].count > 0)
                json_object_set_new(groups, feat_group_name((feat_group)g),
                                    summary_json(&r->group[g], fl));
        json_object_set_new(o, "separation_power", sep);
        json_object_set_new(o, "groups", groups);
        json_object_set_new(o, "summary", summary_json(&r->all, fl));
        json_object_set_new(o, "mean_over_groups", num(eval_core_mean_over_groups(r)));
    }
    json_object_set_new(o, "fpd_x1e3", num(r->fpd));
    json_object_set_new(o, "fpd_err_x1e3", num(r->fpd_err));
    json_object_set_new(o, "kpd_x1e3", num(r->kpd));
    json_object_set_new(o, "kpd_err_x1e3", num(r->kpd_err));
    if (opt->distances) {
        /* left out of FPD/KPD (metric.h): constant in either sample */
        json_t *c = json_array();
        for (int k = 0; k < r->n_constant; k++)
            json_array_append_new(c, json_string(r->constant[k] < 0
                                                     ? "E_inc"
                                                     : fl->info[r->constant[k]].name));
        json_object_set_new(o, "constant_features", c);
    }
    if (opt->separation && e->n_spec > 0) {
        json_t *v = json_object(), *f = json_object();
        for (int k = 0; k < e->n_spec; k++)
            json_object_set_new(f, e->spec_name[k], num(e->spec_sep[k]));
        json_object_set_new(v, "features", f);
        json_object_set_new(v, "mean", num(eval_core_spectrum_mean(e)));
        json_object_set_new(o, "voxel_spectrum", v);
    }
    json_t *cls = json_object();
    for (int k = 0; k < EVAL_CORE_N_CLS; k++)
        if (e->has_cls[k])
            json_object_set_new(cls, eval_core_cls_key((eval_core_cls)k),
                                cls_json(&e->cls[k], k >= EVAL_CORE_TREES_HIGH));
    json_object_set_new(o, "classifier", cls);
    if (e->n_subsets > 0) {
        json_t *b = json_object(), *sub = json_object();
        json_object_set_new(b, "classifier", json_string(eval_core_cls_key(e->breakdown_of)));
        for (int k = 0; k < e->n_subsets; k++)
            json_object_set_new(sub, e->subset_name[k],
                                cls_json(&e->subset[k], e->breakdown_of >= EVAL_CORE_TREES_HIGH));
        json_object_set_new(b, "subsets", sub);
        json_object_set_new(o, "breakdown", b);
    }
}

static json_t *counts_json(const double *h, int nb)
{
    json_t *a = json_array();
    for (int i = 0; i < nb; i++)
        json_array_append_new(a, json_integer((json_int_t)h[i]));
    return a;
}

/* The voxel energy spectrum's histograms, on their fixed bins. */
static void spectrum_histograms(json_t *all, const eval_core_sample *a, const eval_core_sample *b,
                                const eval_core_sample *r2)
{
    double edges[EVAL_SPECTRUM_BINS + 1];
    for (int k = 0; k < b->spec.n; k++) {
        json_t *o = json_object(), *e = json_array();
        eval_spectrum_edges(&b->spec, k, edges);
        for (int i = 0; i <= EVAL_SPECTRUM_BINS; i++)
            json_array_append_new(e, json_real(edges[i]));
        json_object_set_new(o, "edges", e);
        json_object_set_new(o, "a", counts_json(a->spec.counts[k], EVAL_SPECTRUM_BINS));
        json_object_set_new(o, "b", counts_json(b->spec.counts[k], EVAL_SPECTRUM_BINS));
        if (r2)
            json_object_set_new(o, "ref2", counts_json(r2->spec.counts[k], EVAL_SPECTRUM_BINS));
        json_object_set_new(all, b->spec.f[k].name, o);
    }
}

/* Every feature's histogram with the bins its separation power used: the
 * edges follow the reference b (metric.h); the counts are of the values
 * inside them. */
static json_t *histograms_json(const eval_core_sample *a, const eval_core_sample *b,
                               const eval_core_sample *r2, const feat_layout *fl)
{
    int maxb = 0, nf = fl->n_features;
    for (int j = 0; j < nf; j++)
        if (fl->info[j].nbins > maxb)
            maxb = fl->info[j].nbins;
    double *edges = malloc((maxb + 1) * sizeof *edges), *h = malloc(maxb * sizeof *h);
    json_t *all = json_object();
    if (!edges || !h || !all) {
        free(edges);
        free(h);
        json_decref(all);
        return NULL;
    }
    for (int j = 0; j < nf; j++) {
        const feat_info *fi = &fl->info[j];
        if (metric_feature_edges(fi, b->feats + j, b->n, nf, edges, NULL) != GT_OK)
            continue;
        json_t *o = json_object(), *e = json_array();
        for (int i = 0; i <= fi->nbins; i++)
            json_array_append_new(e, json_real(edges[i]));
        json_object_set_new(o, "edges", e);
        metric_histogram(a->feats + j, a->n, nf, edges, fi->nbins, h);
        json_object_set_new(o, "a", counts_json(h, fi->nbins));
        metric_histogram(b->feats + j, b->n, nf, edges, fi->nbins, h);
        json_object_set_new(o, "b", counts_json(h, fi->nbins));
        if (r2) {
            metric_histogram(r2->feats + j, r2->n, nf, edges, fi->nbins, h);
            json_object_set_new(o, "ref2", counts_json(h, fi->nbins));
        }
        json_object_set_new(all, fi->name, o);
    }
    free(edges);
    free(h);
    spectrum_histograms(all, a, b, r2);
    return all;
}

json_t *eval_core_json(const eval_core_sample *a, const eval_core_sample *b,
                       const eval_core_sample *r2, const char *geometry, const feat_layout *fl,
                       const eval_core_options *o, const eval_core_result *res,
                       const eval_core_result *floor)
{
    if (!floor)
        r2 = NULL;
    json_t *doc = json_object();
    if (!doc)
        return NULL;
    json_object_set_new(doc, "a", json_string(a->label));
    json_object_set_new(doc, "b", json_string(b->label));
    if (r2)
        json_object_set_new(doc, "ref2", json_string(r2->label));
    json_object_set_new(doc, "geometry", json_string(geometry));
    json_object_set_new(doc, "n_a", json_integer(a->n));
    json_object_set_new(doc, "n_b", json_integer(b->n));
    if (r2)
        json_object_set_new(doc, "n_ref2", json_integer(r2->n));
    fields_json(doc, res, fl, o);
    if (r2) {
        json_t *f = json_object();
        fields_json(f, floor, fl, o);
        json_object_set_new(doc, "floor", f);
    }
    if (o->separation) {
        json_t *h = histograms_json(a, b, r2, fl);
        if (!h) {
            json_decref(doc);
            return NULL;
        }
        json_object_set_new(doc, "histograms", h);
    }
    return doc;
}
