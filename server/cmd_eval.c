/* giant eval: compare a file of generated showers with a reference file, the
 * CaloChallenge way, beside the reference-vs-reference floor.
 *
 *   giant eval GENERATED.h5 REFERENCE.h5 --geometry FILE.xml
 *              [--ref2 REFERENCE2.h5] [--classifier high,low|none] [--json OUT]
 *
 * Files are streamed in blocks; the high-level features (a few hundred
 * floats per shower) are kept, and the voxels only when the low-level
 * classifier needs them.  Prints, per feature group, the mean separation
 * power of GENERATED against REFERENCE and, with --ref2, of a second
 * independent reference against the same REFERENCE (the floor a perfect
 * model would reach at these sample sizes) and their ratio; FPD and KPD;
 * and the AUC of a classifier trained to tell the files apart
 * (model_classify.h), on the high-level features and on the voxels. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calo_h5.h"
#include "feat.h"
#include "geo.h"
#include "metric.h"
#include "model_backend.h"
#include "model_classify.h"
#include "synth.h"

int cmd_eval(int argc, char **argv);

static void cmd_eval_usage(FILE *f)
{
    fprintf(f,
            "usage: giant eval A.h5 B.h5 --geometry FILE.xml [options]\n"
            "\n"
            "Compares showers A (generated) against B (reference) with the CaloChallenge\n"
            "high-level features: separation power S = 1/2 sum (h_A - h_B)^2 / (h_A + h_B)\n"
            "of each feature's histogram (0 = identical, 1 = disjoint), summarised per\n"
            "feature group, the Frechet / kernel physics distances (x 1e3), and the AUC of a\n"
            "classifier trained to tell A from B (0.5 = indistinguishable).\n"
            "\n"
            "options:\n"
            "  --geometry FILE   CaloChallenge binning XML of the files (required)\n"
            "  --ref2 FILE       a second reference, independent of B: every number is also\n"
            "                    computed for it against B, the floor A is judged against\n"
            "  --classifier LIST high (high-level features), low (voxels / E_inc and\n"
            "                    log10 E_inc), high,low (default) or none\n"
            "  --cls-hidden N    classifier width (default 512; CaloChallenge uses 2048)\n"
            "  --cls-depth N     classifier hidden layers (default 3)\n"
            "  --cls-epochs N    classifier epochs (default 50)\n"
            "  --json OUT        write per-feature values and every summary as JSON\n"
            "  --max-showers N   use at most the first N showers of each file\n"
            "  --threshold MEV   voxel threshold for sparsity (default: the detector's,\n"
            "                    15.15 keV for datasets 2/3, 1 MeV for dataset 1)\n"
            "  --no-distances    skip FPD and KPD\n"
            "  --seed S          seed of the FPD/KPD subsets and the classifier (default 42)\n"
            "  -h, --help        this text\n");
}

/* One file's showers as the comparisons use them. */
typedef struct eval_sample {
    const char *path;
    int64_t n;
    float *feats;     /* n x n_features */
    float *e_inc;     /* n */
    float *low;       /* n x (V + 1): voxels / E_inc, then log10 E_inc; or NULL */
} eval_sample;

static void eval_sample_free(eval_sample *s)
{
    free(s->feats);
    free(s->e_inc);
    free(s->low);
    memset(s, 0, sizeof *s);
}

/* Streams a file: features, energies, and (want_low) the low-level rows. */
static int eval_read(eval_sample *s, const char *path, const geo_geometry *geo,
                     const feat_layout *fl, int64_t max_rows, int want_low, gt_error *err)
{
    calo_h5_reader r;
    memset(s, 0, sizeof *s);
    s->path = path;
    int rc = calo_h5_open(&r, path, geo, err);
    if (rc)
        return rc;
    const int V = geo->n_voxels;
    int64_t n = r.n_rows < max_rows ? r.n_rows : max_rows;
    if (n < 1) {
        calo_h5_close(&r);
        return gt_error_set(err, GT_EFORMAT, "%s holds no showers", path);
    }
    int64_t block = (32LL << 20) / ((int64_t)V * 4);
    if (block < 16)
        block = 16;
    float *buf = malloc((size_t)block * V * sizeof *buf);
    s->feats = malloc((size_t)n * fl->n_features * sizeof *s->feats);
    s->e_inc = malloc((size_t)n * sizeof *s->e_inc);
    if (want_low)
        s->low = malloc((size_t)n * (V + 1) * sizeof *s->low);
    if (!buf || !s->feats || !s->e_inc || (want_low && !s->low)) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory for %lld showers of %s",
                          (long long)n, path);
        goto done;
    }
    for (int64_t row = 0; row < n; row += block) {
        int64_t m = n - row < block ? n - row : block;
        if ((rc = calo_h5_read_rows(&r, row, m, s->e_inc + row, buf, err)))
            goto done;
        feat_compute_batch(fl, buf, s->e_inc + row, m, s->feats + row * fl->n_features);
        for (int64_t i = 0; want_low && i < m; i++) {
            float e = s->e_inc[row + i], *dst = s->low + (size_t)(row + i) * (V + 1);
            const float *src = buf + (size_t)i * V;
            for (int v = 0; v < V; v++)
                dst[v] = src[v] / e;
            dst[V] = log10f(e);
        }
    }
    s->n = n;
done:
    free(buf);
    calo_h5_close(&r);
    if (rc)
        eval_sample_free(s);
    return rc;
}

/* The classifier's high-level input: log10 E_inc, then every feature, the
 * energies (E_tot, E_layer) as log10(x + 1e-8) as CaloChallenge feeds them
 * (the classifier standardises every column itself). */
static float *eval_high_rows(const eval_sample *s, const feat_layout *fl, int *d_out)
{
    const int d = fl->n_features + 1;
    float *x = malloc((size_t)s->n * d * sizeof *x);
    if (!x)
        return NULL;
    for (int64_t i = 0; i < s->n; i++) {
        float *dst = x + (size_t)i * d;
        const float *f = s->feats + (size_t)i * fl->n_features;
        dst[0] = log10f(s->e_inc[i]);
        for (int j = 0; j < fl->n_features; j++) {
            feat_group g = fl->info[j].group;
            dst[j + 1] = g == FEAT_ETOT || g == FEAT_E_LAYER ? log10f(f[j] + 1e-8f) : f[j];
        }
    }
    *d_out = d;
    return x;
}

/* Everything said of one candidate sample against the reference. */
typedef struct eval_result {
    metric_report rep;
    int has_cls[2];                 /* 0: high-level, 1: low-level */
    model_classify_result cls[2];
} eval_result;

static int eval_compare(const eval_sample *a, const eval_sample *ref, const feat_layout *fl,
                        int distances, const int want_cls[2], nn_backend *cls_b,
                        const model_classify_config *cc, uint64_t seed, eval_result *out,
                        gt_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = metric_compare(fl, a->feats, distances ? a->e_inc : NULL, a->n, ref->feats,
                            distances ? ref->e_inc : NULL, ref->n, seed, &out->rep, err);
    if (rc)
        return rc;
    for (int k = 0; k < 2; k++) {
        if (!want_cls[k])
            continue;
        int d = fl->geo->n_voxels + 1;
        float *xa = k ? a->low : eval_high_rows(a, fl, &d);
        float *xb = k ? ref->low : eval_high_rows(ref, fl, &d);
        if (!xa || !xb) {
            rc = gt_error_set(err, GT_ENOMEM, "out of memory for the classifier's input");
        } else {
            fprintf(stderr, "giant eval: training the %s-level classifier on %s against %s\n",
                    k ? "low" : "high", a->path, ref->path);
            rc = model_classify(cls_b, xa, a->n, xb, ref->n, d, cc, &out->cls[k], err);
            out->has_cls[k] = rc == GT_OK;
        }
        if (!k) {
            free(xa);
            free(xb);
        }
        if (rc)
            return rc;
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* output                                                                   */
/* ------------------------------------------------------------------------ */

/* Mean over the feature groups present of each group's mean S. */
static double eval_mean_over_groups(const metric_report *r)
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

static void eval_print(const eval_result *a, const eval_result *floor, const feat_layout *fl,
                       int distances)
{
    const metric_report *r = &a->rep;
    if (floor) {
        printf("%-12s %9s %9s %9s %8s  %s\n", "group", "features", "mean S", "floor S",
               "ratio", "worst feature (S)");
    } else {
        printf("%-12s %9s %9s %9s %9s  %s\n", "group", "features", "mean S", "median S",
               "max S", "worst feature");
    }
    double worst_ratio = 0;
    int worst_group = -1;
    for (int g = 0; g < FEAT_N_GROUPS; g++) {
        const metric_summary *s = &r->group[g];
        if (s->count == 0)
            continue;
        if (floor) {
            double f = floor->rep.group[g].mean, q = s->mean / f;
            if (q > worst_ratio) {
                worst_ratio = q;
                worst_group = g;
            }
            printf("%-12s %9d %9.4f %9.4f %7.1fx  %s (%.4f)\n", feat_group_name((feat_group)g),
                   s->count, s->mean, f, q, fl->info[s->argmax].name, s->max);
        } else {
            printf("%-12s %9d %9.4f %9.4f %9.4f  %s\n", feat_group_name((feat_group)g),
                   s->count, s->mean, s->median, s->max, fl->info[s->argmax].name);
        }
    }
    if (floor) {
        double m = eval_mean_over_groups(r), mf = eval_mean_over_groups(&floor->rep);
        printf("%-12s %9d %9.4f %9.4f %7.1fx  %s (%.4f)\n", "all", r->all.count, r->all.mean,
               floor->rep.all.mean, r->all.mean / floor->rep.all.mean,
               fl->info[r->all.argmax].name, r->all.max);
        printf("mean over groups: %.4f, floor %.4f: %.1fx; worst group: %s at %.1fx the "
               "floor\n",
               m, mf, m / mf, worst_group >= 0 ? feat_group_name((feat_group)worst_group) : "-",
               worst_ratio);
    } else {
        printf("%-12s %9d %9.4f %9.4f %9.4f  %s\n", "all", r->all.count, r->all.mean,
               r->all.median, r->all.max, fl->info[r->all.argmax].name);
    }
    if (distances && isfinite(r->fpd)) {
        printf("FPD x1e3: %.3f   KPD x1e3: %.4f +- %.4f", r->fpd, r->kpd, r->kpd_err);
        if (floor && isfinite(floor->rep.fpd))
            printf("   (floor: FPD %.3f, KPD %.4f +- %.4f)", floor->rep.fpd, floor->rep.kpd,
                   floor->rep.kpd_err);
        printf("\n");
    } else if (distances) {
        printf("FPD/KPD: not computed (too few showers for the feature dimension)\n");
    }
    static const char *const kind[2] = {"high-level", "low-level"};
    for (int k = 0; k < 2; k++) {
        if (!a->has_cls[k])
            continue;
        const model_classify_result *c = &a->cls[k];
        printf("classifier AUC (%s): %.4f", kind[k], c->auc);
        if (floor && floor->has_cls[k])
            printf("   (floor %.4f)", floor->cls[k].auc);
        printf("   JSD %.4f bits, best epoch %d, %lld + %lld + %lld showers each\n", c->jsd_bits,
               c->best_epoch, (long long)c->n_train, (long long)c->n_select,
               (long long)c->n_test);
    }
}

static void json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f); /* NaN and infinity are not JSON numbers */
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fputc('\\', f);
        if ((unsigned char)*p >= 0x20)
            fputc(*p, f);
    }
    fputc('"', f);
}

static void json_summary(FILE *f, const metric_summary *s, const feat_layout *fl)
{
    fprintf(f, "{\"count\": %d, \"mean\": ", s->count);
    json_num(f, s->mean);
    fputs(", \"median\": ", f);
    json_num(f, s->median);
    fputs(", \"max\": ", f);
    json_num(f, s->max);
    if (s->argmax >= 0) {
        fputs(", \"max_feature\": ", f);
        json_str(f, fl->info[s->argmax].name);
    }
    fputc('}', f);
}

/* One comparison's fields, one per line at indent `ind` (no braces). */
static void json_fields(FILE *f, const eval_result *e, const feat_layout *fl, const char *ind)
{
    const metric_report *r = &e->rep;
    fprintf(f, "%s\"separation_power\": {\n", ind);
    for (int j = 0; j < fl->n_features; j++) {
        fprintf(f, "%s  ", ind);
        json_str(f, fl->info[j].name);
        fputs(": ", f);
        json_num(f, r->sep[j]);
        fputs(j + 1 < fl->n_features ? ",\n" : "\n", f);
    }
    fprintf(f, "%s},\n%s\"groups\": {\n", ind, ind);
    int first = 1;
    for (int g = 0; g < FEAT_N_GROUPS; g++) {
        if (r->group[g].count == 0)
            continue;
        fprintf(f, "%s%s  \"%s\": ", first ? "" : ",\n", ind, feat_group_name((feat_group)g));
        json_summary(f, &r->group[g], fl);
        first = 0;
    }
    fprintf(f, "\n%s},\n%s\"summary\": ", ind, ind);
    json_summary(f, &r->all, fl);
    fprintf(f, ",\n%s\"mean_over_groups\": ", ind);
    json_num(f, eval_mean_over_groups(r));
    fprintf(f, ",\n%s\"fpd_x1e3\": ", ind);
    json_num(f, r->fpd);
    fprintf(f, ",\n%s\"kpd_x1e3\": ", ind);
    json_num(f, r->kpd);
    fprintf(f, ",\n%s\"kpd_err_x1e3\": ", ind);
    json_num(f, r->kpd_err);
    static const char *const key[2] = {"high", "low"};
    fprintf(f, ",\n%s\"classifier\": {", ind);
    first = 1;
    for (int k = 0; k < 2; k++) {
        if (!e->has_cls[k])
            continue;
        const model_classify_result *c = &e->cls[k];
        fprintf(f, "%s\n%s  \"%s\": {\"auc\": ", first ? "" : ",", ind, key[k]);
        json_num(f, c->auc);
        fputs(", \"bce\": ", f);
        json_num(f, c->bce);
        fputs(", \"jsd_bits\": ", f);
        json_num(f, c->jsd_bits);
        fprintf(f, ", \"best_epoch\": %d, \"n_train\": %lld, \"n_select\": %lld, "
                   "\"n_test\": %lld}",
                c->best_epoch, (long long)c->n_train, (long long)c->n_select,
                (long long)c->n_test);
        first = 0;
    }
    fprintf(f, "%s}", first ? "" : "\n");
    if (!first)
        fprintf(f, "%s", ind);
}

/* A JSON file opened for a comparison that failed: closed and removed, so
 * no half-written report is left behind. */
static void eval_json_abandon(FILE *f, const char *path)
{
    if (!f)
        return;
    fclose(f);
    remove(path);
}

/* The comparison of A with B at the top level (as the first version of the
 * format had it), the floor (the second reference against B) beside it. */
static int eval_write_json(FILE *f, const eval_sample *a, const eval_sample *b,
                           const eval_sample *r2, const char *geometry, const feat_layout *fl,
                           const eval_result *res, const eval_result *floor)
{
    fputs("{\n  \"a\": ", f);
    json_str(f, a->path);
    fputs(",\n  \"b\": ", f);
    json_str(f, b->path);
    if (r2) {
        fputs(",\n  \"ref2\": ", f);
        json_str(f, r2->path);
    }
    fputs(",\n  \"geometry\": ", f);
    json_str(f, geometry);
    fprintf(f, ",\n  \"n_a\": %lld,\n  \"n_b\": %lld,\n", (long long)a->n, (long long)b->n);
    json_fields(f, res, fl, "  ");
    if (floor) {
        fputs(",\n  \"floor\": {\n", f);
        json_fields(f, floor, fl, "    ");
        fputs("\n  }", f);
    }
    fputs("\n}\n", f);
    return fflush(f) != 0 || ferror(f) ? -1 : 0;
}

/* ------------------------------------------------------------------------ */
/* the command                                                              */
/* ------------------------------------------------------------------------ */

static int parse_int(const char *opt, const char *val, long lo, long hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || *end || end == val || v < lo || v > hi) {
        fprintf(stderr, "giant eval: %s must be an integer in [%ld, %ld], got \"%s\"\n", opt, lo,
                hi, val);
        return 0;
    }
    *out = (int)v;
    return 1;
}

int cmd_eval(int argc, char **argv)
{
    const char *files[2] = {NULL, NULL}, *geometry = NULL, *json = NULL, *ref2 = NULL;
    int nfiles = 0, distances = 1, want_cls[2] = {1, 1};
    int64_t max_rows = INT64_MAX;
    double threshold = -1;
    uint64_t seed = 42;
    model_classify_config cc;
    model_classify_config_default(&cc);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cmd_eval_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-distances")) {
            distances = 0;
            continue;
        }
        if (a[0] != '-') {
            if (nfiles == 2) {
                fprintf(stderr, "giant eval: more than two input files (a second reference "
                                "goes with --ref2)\n");
                return 2;
            }
            files[nfiles++] = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "giant eval: %s needs a value (or is unknown)\n", a);
            return 2;
        }
        const char *val = argv[++i];
        char *end = NULL;
        errno = 0;
        if (!strcmp(a, "--geometry")) {
            geometry = val;
        } else if (!strcmp(a, "--json")) {
            json = val;
        } else if (!strcmp(a, "--ref2")) {
            ref2 = val;
        } else if (!strcmp(a, "--classifier")) {
            want_cls[0] = want_cls[1] = 0;
            if (strcmp(val, "none") != 0) {
                char list[64];
                snprintf(list, sizeof list, "%s", val);
                for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                    if (!strcmp(tok, "high"))
                        want_cls[0] = 1;
                    else if (!strcmp(tok, "low"))
                        want_cls[1] = 1;
                    else {
                        fprintf(stderr, "giant eval: --classifier takes high, low, high,low or "
                                        "none, not \"%s\"\n",
                                val);
                        return 2;
                    }
                }
            }
        } else if (!strcmp(a, "--cls-hidden")) {
            if (!parse_int(a, val, 1, 65536, &cc.hidden))
                return 2;
        } else if (!strcmp(a, "--cls-depth")) {
            if (!parse_int(a, val, 1, 64, &cc.depth))
                return 2;
        } else if (!strcmp(a, "--cls-epochs")) {
            if (!parse_int(a, val, 1, 100000, &cc.epochs))
                return 2;
        } else if (!strcmp(a, "--max-showers")) {
            long long v = strtoll(val, &end, 10);
            if (errno || *end || end == val || v < 1) {
                fprintf(stderr, "giant eval: bad --max-showers \"%s\"\n", val);
                return 2;
            }
            max_rows = v;
        } else if (!strcmp(a, "--threshold")) {
            threshold = strtod(val, &end);
            if (errno || *end || end == val || !(threshold >= 0)) {
                fprintf(stderr, "giant eval: bad --threshold \"%s\"\n", val);
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            unsigned long long v = strtoull(val, &end, 10);
            if (errno || *end || end == val) {
                fprintf(stderr, "giant eval: bad --seed \"%s\"\n", val);
                return 2;
            }
            seed = v;
        } else {
            fprintf(stderr, "giant eval: unknown option %s (see --help)\n", a);
            return 2;
        }
    }
    if (nfiles != 2 || !geometry) {
        fprintf(stderr, "giant eval: two files and --geometry are required (see --help)\n");
        return 2;
    }
    cc.seed = seed;

    /* The JSON file is opened before the work, so a path that cannot be
     * written fails at once instead of after the classifiers have trained. */
    FILE *json_f = NULL;
    if (json && !(json_f = fopen(json, "w"))) {
        fprintf(stderr, "giant eval: cannot write %s: %s\n", json, strerror(errno));
        return 1;
    }
    gt_error err = {0};
    geo_geometry geo;
    if (geo_load_file(&geo, geometry, &err)) {
        fprintf(stderr, "giant eval: %s\n", err.message);
        eval_json_abandon(json_f, json);
        return 1;
    }
    if (threshold < 0) {
        synth_detector det;
        if (synth_detector_init(&det, &geo, &err)) {
            fprintf(stderr, "giant eval: %s\n", err.message);
            geo_free(&geo);
            eval_json_abandon(json_f, json);
            return 1;
        }
        threshold = det.threshold_mev;
        synth_detector_free(&det);
    }
    feat_layout fl;
    eval_sample sa, sb, s2;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    memset(&s2, 0, sizeof s2);
    eval_result res, flo;
    memset(&res, 0, sizeof res);
    memset(&flo, 0, sizeof flo);
    nn_backend *cls_b = NULL;
    int rc = 1;
    if (feat_layout_init(&fl, &geo, (float)threshold, &err)) {
        fprintf(stderr, "giant eval: %s\n", err.message);
        geo_free(&geo);
        eval_json_abandon(json_f, json);
        return 1;
    }
    if (eval_read(&sa, files[0], &geo, &fl, max_rows, want_cls[1], &err) ||
        eval_read(&sb, files[1], &geo, &fl, max_rows, want_cls[1], &err) ||
        (ref2 && eval_read(&s2, ref2, &geo, &fl, max_rows, want_cls[1], &err)) ||
        ((want_cls[0] || want_cls[1]) && model_backend_open("cpu", &cls_b, &err)) ||
        eval_compare(&sa, &sb, &fl, distances, want_cls, cls_b, &cc, seed, &res, &err) ||
        (ref2 &&
         eval_compare(&s2, &sb, &fl, distances, want_cls, cls_b, &cc, seed, &flo, &err))) {
        fprintf(stderr, "giant eval: %s\n", err.message);
        goto done;
    }
    printf("A: %s (%lld showers)\nB: %s (%lld showers, reference)\n", sa.path, (long long)sa.n,
           sb.path, (long long)sb.n);
    if (ref2)
        printf("floor: %s (%lld showers) against B\n", s2.path, (long long)s2.n);
    eval_print(&res, ref2 ? &flo : NULL, &fl, distances);
    if (json_f && eval_write_json(json_f, &sa, &sb, ref2 ? &s2 : NULL, geometry, &fl, &res,
                                ref2 ? &flo : NULL)) {
        fprintf(stderr, "giant eval: cannot write %s: %s\n", json, strerror(errno));
        goto done;
    }
    rc = 0;
    if (json_f) {
        FILE *f = json_f;
        json_f = NULL;
        if (fclose(f) != 0) {
            fprintf(stderr, "giant eval: cannot write %s: %s\n", json, strerror(errno));
            remove(json);
            rc = 1;
        }
    }
done:
    eval_json_abandon(json_f, json);
    metric_report_free(&res.rep);
    metric_report_free(&flo.rep);
    nn_backend_close(cls_b);
    eval_sample_free(&sa);
    eval_sample_free(&sb);
    eval_sample_free(&s2);
    feat_layout_free(&fl);
    geo_free(&geo);
    return rc;
}
