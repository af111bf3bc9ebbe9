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
    o->classifier[0] = o->classifier[1] = 1;
    model_classify_config_default(&o->cls);
    o->seed = 42;
    o->cls.seed = 42;
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
    return GT_OK;
}

void eval_core_sample_put(eval_core_sample *s, const feat_layout *fl, int64_t row, int64_t m,
                          const float *showers, const float *e_inc)
{
    const int V = s->voxels;
    memcpy(s->e_inc + row, e_inc, (size_t)m * sizeof *e_inc);
    feat_compute_batch(fl, showers, s->e_inc + row, m, s->feats + row * fl->n_features);
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

int eval_core_compare(const eval_core_sample *a, const eval_core_sample *ref,
                      const feat_layout *fl, const eval_core_options *o, nn_backend *cls_b,
                      FILE *log, eval_core_result *out, gt_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = metric_compare(fl, a->feats, o->distances ? a->e_inc : NULL, a->n, ref->feats,
                            o->distances ? ref->e_inc : NULL, ref->n, o->seed, &out->rep, err);
    if (rc)
        return rc;
    for (int k = 0; k < 2; k++) {
        if (!o->classifier[k])
            continue;
        if (o->should_stop && o->should_stop(o->stop_user)) {
            rc = gt_error_set(err, GT_ECANCELLED, "stopped");
            break;
        }
        if (k && (!a->low || !ref->low)) {
            rc = gt_error_set(err, GT_EINVAL, "the low-level classifier needs the voxels");
            break;
        }
        int d = fl->geo->n_voxels + 1;
        float *xa = k ? a->low : eval_core_high_rows(a, fl, &d);
        float *xb = k ? ref->low : eval_core_high_rows(ref, fl, &d);
        if (!xa || !xb) {
            rc = gt_error_set(err, GT_ENOMEM, "out of memory for the classifier's input");
        } else {
            if (log)
                fprintf(log, "giant eval: training the %s-level classifier on %s against %s\n",
                        k ? "low" : "high", a->label, ref->label);
            model_classify_config cls = o->cls;
            cls.should_stop = o->should_stop;
            cls.stop_user = o->stop_user;
            rc = model_classify(cls_b, xa, a->n, xb, ref->n, d, &cls, &out->cls[k], err);
            out->has_cls[k] = rc == GT_OK;
        }
        if (!k) {
            free(xa);
            free(xb);
        }
        if (rc)
            break;
    }
    if (rc)
        eval_core_result_free(out);
    return rc;
}

void eval_core_result_free(eval_core_result *r)
{
    metric_report_free(&r->rep);
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
    static const char *const key[2] = {"high", "low"};
    json_t *cls = json_object();
    for (int k = 0; k < 2; k++) {
        if (!e->has_cls[k])
            continue;
        const model_classify_result *c = &e->cls[k];
        json_t *x = json_object();
        json_object_set_new(x, "auc", num(c->auc));
        json_object_set_new(x, "auc_sd", num(c->auc_sd));
        json_object_set_new(x, "repeats", json_integer(c->repeats));
        json_object_set_new(x, "bce", num(c->bce));
        json_object_set_new(x, "jsd_bits", num(c->jsd_bits));
        json_object_set_new(x, "best_epoch", json_integer(c->best_epoch));
        json_object_set_new(x, "n_train", json_integer(c->n_train));
        json_object_set_new(x, "n_select", json_integer(c->n_select));
        json_object_set_new(x, "n_test", json_integer(c->n_test));
        json_object_set_new(cls, key[k], x);
    }
    json_object_set_new(o, "classifier", cls);
}

static json_t *counts_json(const double *h, int nb)
{
    json_t *a = json_array();
    for (int i = 0; i < nb; i++)
        json_array_append_new(a, json_integer((json_int_t)h[i]));
    return a;
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
