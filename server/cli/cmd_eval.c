/* giant eval: compare a file of generated showers with a reference file, the
 * CaloChallenge way, beside the reference-vs-reference floor.
 *
 *   giant eval GENERATED.h5 REFERENCE.h5 --geometry FILE.xml
 *              [--ref2 REFERENCE2.h5] [--classifier LIST] [--json OUT]
 *
 * Files are streamed in blocks; the high-level features (a few hundred
 * floats per shower) are kept, and the voxels only when the low-level
 * classifier needs them.  Prints, per feature group, the mean separation
 * power of GENERATED against REFERENCE and, with --ref2, of a second
 * independent reference against the same REFERENCE (the floor a perfect
 * model would reach at these sample sizes) and their ratio; the voxel
 * energy spectrum's separation per depth (eval_spectrum.h); FPD and KPD;
 * and the AUCs of classifiers of two families trained to tell the files
 * apart (the CaloChallenge MLP, model_classify.h, and gradient-boosted
 * trees, eval_trees.h), on the high-level features and on the voxels, with
 * the high-level trees' breakdown by depth and feature kind. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_core.h"
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
            "feature group, the voxel energy spectrum per depth, the Frechet / kernel physics\n"
            "distances (x 1e3), and the AUCs of classifiers of two families trained to tell\n"
            "A from B (0.5 = indistinguishable): the CaloChallenge MLP and gradient-boosted\n"
            "trees (XGBoost), with the trees' breakdown by depth and feature kind.\n"
            "\n"
            "options:\n"
            "  --geometry FILE   CaloChallenge binning XML of the files (required)\n"
            "  --ref2 FILE       a second reference, independent of B: every number is also\n"
            "                    computed for it against B, the floor A is judged against\n"
            "  --classifier LIST comma-separated: high (the MLP on the high-level features),\n"
            "                    low (the MLP on voxels / E_inc and log10 E_inc), trees-high,\n"
            "                    trees-low (gradient-boosted trees on the same), mlp\n"
            "                    (= high,low), trees (= trees-high,trees-low), all (the\n"
            "                    default) or none\n"
            "  --no-breakdown    skip the breakdown: the high-level trees again on layers\n"
            "                    0-9, 10-24, 25- and on each feature kind\n"
            "  --trees-rounds N  boosting rounds at most (default 300; early stopping)\n"
            "  --trees-depth N   tree depth (default 6)\n"
            "  --cls-hidden N    classifier width (default 512; CaloChallenge uses 2048)\n"
            "  --cls-depth N     classifier hidden layers (default 3)\n"
            "  --cls-epochs N    classifier epochs (default 50)\n"
            "  --cls-repeats N   whole classifier tests averaged (each family), seeds\n"
            "                    S .. S + N - 1\n"
            "                    (default 1, at most 20); prints the mean AUC and their sd\n"
            "  --json OUT        write per-feature values, every summary, the features left\n"
            "                    out of FPD/KPD (constant in a sample) and every feature's\n"
            "                    histogram as JSON (what the service stores per evaluation)\n"
            "  --max-showers N   use at most the first N showers of each file\n"
            "  --threshold MEV   voxel threshold for sparsity (default: the detector's,\n"
            "                    15.15 keV for datasets 2/3, 1 MeV for dataset 1)\n"
            "  --no-distances    skip FPD and KPD\n"
            "  --seed S          seed of the FPD/KPD subsets and the classifier (default 42)\n"
            "  -h, --help        this text\n");
}

static void eval_print(const eval_core_result *a, const eval_core_result *floor,
                       const feat_layout *fl, int distances)
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
        double m = eval_core_mean_over_groups(r), mf = eval_core_mean_over_groups(&floor->rep);
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
        printf("FPD x1e3: %.3f +- %.3f   KPD x1e3: %.4f +- %.4f", r->fpd, r->fpd_err, r->kpd,
               r->kpd_err);
        if (floor && isfinite(floor->rep.fpd))
            printf("   (floor: FPD %.3f +- %.3f, KPD %.4f +- %.4f)", floor->rep.fpd,
                   floor->rep.fpd_err, floor->rep.kpd, floor->rep.kpd_err);
        printf("\n");
        if (r->n_constant > 0) {
            printf("left out of FPD/KPD, constant in a sample:");
            for (int k = 0; k < r->n_constant; k++)
                printf(" %s", r->constant[k] < 0 ? "E_inc" : fl->info[r->constant[k]].name);
            printf("\n");
        }
    } else if (distances) {
        printf("FPD/KPD: not computed (too few showers for the feature dimension)\n");
    }
    static const char *const kind[EVAL_CORE_N_CLS] = {"high-level", "low-level",
                                                      "trees, high-level", "trees, low-level"};
    for (int k = 0; k < EVAL_CORE_N_CLS; k++) {
        if (!a->has_cls[k])
            continue;
        const model_classify_result *c = &a->cls[k];
        printf("classifier AUC (%s): %.4f", kind[k], c->auc);
        if (c->repeats > 1)
            printf(" (sd %.4f over %d repeats)", c->auc_sd, c->repeats);
        if (floor && floor->has_cls[k])
            printf("   (floor %.4f)", floor->cls[k].auc);
        printf("   JSD %.4f bits, best %s %d, %lld + %lld + %lld showers each\n", c->jsd_bits,
               k >= EVAL_CORE_TREES_HIGH ? "rounds" : "epoch", c->best_epoch,
               (long long)c->n_train, (long long)c->n_select, (long long)c->n_test);
    }
    for (int k = 0; k < a->n_subsets; k++) {
        printf("  breakdown (%s): %-12s AUC %.4f", kind[a->breakdown_of], a->subset_name[k],
               a->subset[k].auc);
        if (a->subset[k].repeats > 1)
            printf(" (sd %.4f)", a->subset[k].auc_sd);
        printf("\n");
    }
}

/* The voxel energy spectrum's separation per feature, beside the floor's. */
static void eval_print_spectrum(const eval_core_result *a, const eval_core_result *floor)
{
    if (a->n_spec == 0)
        return;
    printf("voxel energy spectrum (all hits of a layer group):\n");
    double worst = 0;
    for (int k = 0; k < a->n_spec; k++) {
        if (floor) {
            double q = a->spec_sep[k] / floor->spec_sep[k];
            worst = q > worst ? q : worst;
            printf("  %-22s S %.5f   floor %.5f   %7.1fx\n", a->spec_name[k], a->spec_sep[k],
                   floor->spec_sep[k], q);
        } else {
            printf("  %-22s S %.5f\n", a->spec_name[k], a->spec_sep[k]);
        }
    }
    if (floor)
        printf("voxel energy spectrum: mean S %.5f, floor %.5f; worst %.1fx the floor\n",
               eval_core_spectrum_mean(a), eval_core_spectrum_mean(floor), worst);
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

/* What `giant eval` was asked, after its options. */
typedef struct eval_args {
    const char *files[2], *geometry, *json, *ref2;
    int nfiles;
    int64_t max_rows;
    double threshold;          /* < 0: the detector's */
    eval_core_options o;
} eval_args;

/* --classifier LIST into want[EVAL_CORE_N_CLS].  1, or 0 after saying
 * why. */
static int parse_classifier(const char *val, int want[EVAL_CORE_N_CLS])
{
    for (int k = 0; k < EVAL_CORE_N_CLS; k++)
        want[k] = 0;
    if (strcmp(val, "none") == 0)
        return 1;
    static const struct {
        const char *name;
        int cls[EVAL_CORE_N_CLS];
    } names[] = {
        {"high", {1, 0, 0, 0}},       {"low", {0, 1, 0, 0}},   {"trees-high", {0, 0, 1, 0}},
        {"trees-low", {0, 0, 0, 1}},  {"mlp", {1, 1, 0, 0}},   {"trees", {0, 0, 1, 1}},
        {"all", {1, 1, 1, 1}},
    };
    char list[128];
    snprintf(list, sizeof list, "%s", val);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        size_t i = 0;
        while (i < sizeof names / sizeof names[0] && strcmp(tok, names[i].name))
            i++;
        if (i == sizeof names / sizeof names[0]) {
            fprintf(stderr, "giant eval: --classifier takes a list of high, low, trees-high, "
                            "trees-low, mlp, trees, all, or none, not \"%s\"\n",
                    val);
            return 0;
        }
        for (int k = 0; k < EVAL_CORE_N_CLS; k++)
            want[k] |= names[i].cls[k];
    }
    return 1;
}

/* Option a with its value val into e.  1, or 0 after saying why. */
static int parse_option(eval_args *e, const char *a, const char *val)
{
    model_classify_config *cc = &e->o.cls;
    char *end = NULL;
    errno = 0;
    if (!strcmp(a, "--geometry")) {
        e->geometry = val;
    } else if (!strcmp(a, "--json")) {
        e->json = val;
    } else if (!strcmp(a, "--ref2")) {
        e->ref2 = val;
    } else if (!strcmp(a, "--classifier")) {
        return parse_classifier(val, e->o.classifier);
    } else if (!strcmp(a, "--cls-hidden")) {
        return parse_int(a, val, 1, 65536, &cc->hidden);
    } else if (!strcmp(a, "--cls-depth")) {
        return parse_int(a, val, 1, 64, &cc->depth);
    } else if (!strcmp(a, "--cls-epochs")) {
        return parse_int(a, val, 1, 100000, &cc->epochs);
    } else if (!strcmp(a, "--trees-rounds")) {
        return parse_int(a, val, 1, 100000, &e->o.trees.max_rounds);
    } else if (!strcmp(a, "--trees-depth")) {
        return parse_int(a, val, 1, 32, &e->o.trees.max_depth);
    } else if (!strcmp(a, "--cls-repeats")) {
        return parse_int(a, val, 1, MODEL_CLASSIFY_MAX_REPEATS, &cc->repeats);
    } else if (!strcmp(a, "--max-showers")) {
        long long v = strtoll(val, &end, 10);
        if (errno || *end || end == val || v < 1) {
            fprintf(stderr, "giant eval: bad --max-showers \"%s\"\n", val);
            return 0;
        }
        e->max_rows = v;
    } else if (!strcmp(a, "--threshold")) {
        e->threshold = strtod(val, &end);
        if (errno || *end || end == val || !(e->threshold >= 0)) {
            fprintf(stderr, "giant eval: bad --threshold \"%s\"\n", val);
            return 0;
        }
    } else if (!strcmp(a, "--seed")) {
        unsigned long long v = strtoull(val, &end, 10);
        if (errno || *end || end == val) {
            fprintf(stderr, "giant eval: bad --seed \"%s\"\n", val);
            return 0;
        }
        e->o.seed = v;
    } else {
        fprintf(stderr, "giant eval: unknown option %s (see --help)\n", a);
        return 0;
    }
    return 1;
}

/* The options into e.  Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, eval_args *e)
{
    *e = (eval_args){.max_rows = INT64_MAX, .threshold = -1};
    eval_core_options_default(&e->o);
    e->o.breakdown = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cmd_eval_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-distances")) {
            e->o.distances = 0;
            continue;
        }
        if (!strcmp(a, "--no-breakdown")) {
            e->o.breakdown = 0;
            continue;
        }
        if (a[0] != '-') {
            if (e->nfiles == 2) {
                fprintf(stderr, "giant eval: more than two input files (a second reference "
                                "goes with --ref2)\n");
                return 2;
            }
            e->files[e->nfiles++] = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "giant eval: %s needs a value (or is unknown)\n", a);
            return 2;
        }
        if (!parse_option(e, a, argv[++i]))
            return 2;
    }
    if (e->nfiles != 2 || !e->geometry) {
        fprintf(stderr, "giant eval: two files and --geometry are required (see --help)\n");
        return 2;
    }
    e->o.cls.seed = e->o.seed;
    return -1;
}

int cmd_eval(int argc, char **argv)
{
    eval_args e;
    int status = parse_args(argc, argv, &e);
    if (status != -1)
        return status;
    const char *const *files = e.files, *geometry = e.geometry, *json = e.json, *ref2 = e.ref2;
    const int64_t max_rows = e.max_rows;
    double threshold = e.threshold;
    eval_core_options o = e.o, floor_o = e.o;
    floor_o.breakdown = 0;   /* where a reference's own differences sit says little */
    const int *want_cls = o.classifier;
    const int want_low = want_cls[EVAL_CORE_MLP_LOW] || want_cls[EVAL_CORE_TREES_LOW];

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
    eval_core_sample sa, sb, s2;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    memset(&s2, 0, sizeof s2);
    eval_core_result res, flo;
    memset(&res, 0, sizeof res);
    memset(&flo, 0, sizeof flo);
    nn_backend *cls_b = NULL;
    json_t *doc = NULL;
    int rc = 1;
    if (feat_layout_init(&fl, &geo, (float)threshold, &err)) {
        fprintf(stderr, "giant eval: %s\n", err.message);
        geo_free(&geo);
        eval_json_abandon(json_f, json);
        return 1;
    }
    if (eval_core_sample_read(&sa, files[0], &geo, &fl, max_rows, want_low, &err) ||
        eval_core_sample_read(&sb, files[1], &geo, &fl, max_rows, want_low, &err) ||
        (ref2 && eval_core_sample_read(&s2, ref2, &geo, &fl, max_rows, want_low, &err)) ||
        ((want_cls[EVAL_CORE_MLP_HIGH] || want_cls[EVAL_CORE_MLP_LOW]) &&
         model_backend_open("cpu", &cls_b, &err)) ||
        eval_core_compare(&sa, &sb, &fl, &o, cls_b, stderr, &res, &err) ||
        (ref2 && eval_core_compare(&s2, &sb, &fl, &floor_o, cls_b, stderr, &flo, &err))) {
        fprintf(stderr, "giant eval: %s\n", err.message);
        goto done;
    }
    printf("A: %s (%lld showers)\nB: %s (%lld showers, reference)\n", sa.label,
           (long long)sa.n, sb.label, (long long)sb.n);
    if (ref2)
        printf("floor: %s (%lld showers) against B\n", s2.label, (long long)s2.n);
    eval_print(&res, ref2 ? &flo : NULL, &fl, o.distances);
    if (o.separation)
        eval_print_spectrum(&res, ref2 ? &flo : NULL);
    if (json_f) {
        doc = eval_core_json(&sa, &sb, ref2 ? &s2 : NULL, geometry, &fl, &o, &res,
                             ref2 ? &flo : NULL);
        if (!doc || json_dumpf(doc, json_f, JSON_INDENT(2) | EVAL_CORE_JSON_FLAGS) != 0 ||
            fputc('\n', json_f) == EOF || fflush(json_f) != 0 || ferror(json_f)) {
            fprintf(stderr, "giant eval: cannot write %s: %s\n", json,
                    doc ? strerror(errno) : "out of memory");
            goto done;
        }
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
    json_decref(doc);
    eval_json_abandon(json_f, json);
    eval_core_result_free(&res);
    eval_core_result_free(&flo);
    nn_backend_close(cls_b);
    eval_core_sample_free(&sa);
    eval_core_sample_free(&sb);
    eval_core_sample_free(&s2);
    feat_layout_free(&fl);
    geo_free(&geo);
    return rc;
}
