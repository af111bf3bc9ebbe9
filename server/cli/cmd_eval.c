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
            "  --cls-repeats N   whole classifier tests averaged, seeds S .. S + N - 1\n"
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
    static const char *const kind[2] = {"high-level", "low-level"};
    for (int k = 0; k < 2; k++) {
        if (!a->has_cls[k])
            continue;
        const model_classify_result *c = &a->cls[k];
        printf("classifier AUC (%s): %.4f", kind[k], c->auc);
        if (c->repeats > 1)
            printf(" (sd %.4f over %d repeats)", c->auc_sd, c->repeats);
        if (floor && floor->has_cls[k])
            printf("   (floor %.4f)", floor->cls[k].auc);
        printf("   JSD %.4f bits, best epoch %d, %lld + %lld + %lld showers each\n", c->jsd_bits,
               c->best_epoch, (long long)c->n_train, (long long)c->n_select,
               (long long)c->n_test);
    }
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

/* --classifier high, low, high,low or none into want[2].  1, or 0 after
 * saying why. */
static int parse_classifier(const char *val, int want[2])
{
    want[0] = want[1] = 0;
    if (strcmp(val, "none") == 0)
        return 1;
    char list[64];
    snprintf(list, sizeof list, "%s", val);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        if (!strcmp(tok, "high"))
            want[0] = 1;
        else if (!strcmp(tok, "low"))
            want[1] = 1;
        else {
            fprintf(stderr, "giant eval: --classifier takes high, low, high,low or "
                            "none, not \"%s\"\n",
                    val);
            return 0;
        }
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
    eval_core_options o = e.o;
    const int *want_cls = o.classifier;

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
    if (eval_core_sample_read(&sa, files[0], &geo, &fl, max_rows, want_cls[1], &err) ||
        eval_core_sample_read(&sb, files[1], &geo, &fl, max_rows, want_cls[1], &err) ||
        (ref2 && eval_core_sample_read(&s2, ref2, &geo, &fl, max_rows, want_cls[1], &err)) ||
        ((want_cls[0] || want_cls[1]) && model_backend_open("cpu", &cls_b, &err)) ||
        eval_core_compare(&sa, &sb, &fl, &o, cls_b, stderr, &res, &err) ||
        (ref2 && eval_core_compare(&s2, &sb, &fl, &o, cls_b, stderr, &flo, &err))) {
        fprintf(stderr, "giant eval: %s\n", err.message);
        goto done;
    }
    printf("A: %s (%lld showers)\nB: %s (%lld showers, reference)\n", sa.label,
           (long long)sa.n, sb.label, (long long)sb.n);
    if (ref2)
        printf("floor: %s (%lld showers) against B\n", s2.label, (long long)s2.n);
    eval_print(&res, ref2 ? &flo : NULL, &fl, o.distances);
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
