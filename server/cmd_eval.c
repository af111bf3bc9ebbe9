/* giant eval: compare two CaloChallenge files with the CaloChallenge
 * high-level-feature metrics.
 *
 *   giant eval GENERATED.h5 REFERENCE.h5 --geometry FILE.xml [--json OUT.json]
 *
 * Files are streamed in blocks; only the features (a few hundred floats per
 * shower) are kept in memory.  Prints one line per feature group (mean,
 * median and max separation power) and the overall summary, plus FPD and
 * KPD; --json writes every per-feature value. */
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
            "feature group, and the Frechet / kernel physics distances (x 1e3).\n"
            "\n"
            "options:\n"
            "  --geometry FILE   CaloChallenge binning XML of both files (required)\n"
            "  --json OUT        write per-feature values and the summary as JSON\n"
            "  --max-showers N   use at most the first N showers of each file\n"
            "  --threshold MEV   voxel threshold for sparsity (default: the detector's,\n"
            "                    15.15 keV for datasets 2/3, 1 MeV for dataset 1)\n"
            "  --no-distances    skip FPD and KPD\n"
            "  --seed S          seed of the KPD/FPD subsets (default 42)\n"
            "  -h, --help        this text\n");
}

/* Streams a file and computes its features (n x n_features, malloc'd). */
static int cmd_eval_features(const char *path, const geo_geometry *geo, const feat_layout *fl,
                             int64_t max_rows, float **feats, float **energies, int64_t *n_out,
                             gt_error *err)
{
    calo_h5_reader r;
    *feats = NULL;
    *energies = NULL;
    *n_out = 0;
    int rc = calo_h5_open(&r, path, geo, err);
    if (rc)
        return rc;
    int64_t n = r.n_rows < max_rows ? r.n_rows : max_rows;
    if (n < 1) {
        calo_h5_close(&r);
        return gt_error_set(err, GT_EFORMAT, "%s holds no showers", path);
    }
    int64_t block = (32LL << 20) / ((int64_t)geo->n_voxels * 4);
    if (block < 16)
        block = 16;
    float *f = malloc((size_t)n * fl->n_features * sizeof *f);
    float *e = malloc((size_t)n * sizeof *e);
    float *s = malloc((size_t)block * geo->n_voxels * sizeof *s);
    if (!f || !e || !s) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory for the features of %lld showers",
                          (long long)n);
        goto done;
    }
    for (int64_t row = 0; row < n; row += block) {
        int64_t m = n - row < block ? n - row : block;
        if ((rc = calo_h5_read_rows(&r, row, m, e + row, s, err)))
            goto done;
        feat_compute_batch(fl, s, e + row, m, f + row * fl->n_features);
    }
    *n_out = n;
done:
    free(s);
    calo_h5_close(&r);
    if (rc) {
        free(f);
        free(e);
    } else {
        *feats = f;
        *energies = e;
    }
    return rc;
}

static void cmd_eval_json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f); /* NaN and infinity are not JSON numbers */
}

static void cmd_eval_json_summary(FILE *f, const metric_summary *s, const feat_layout *fl)
{
    fprintf(f, "{\"count\": %d, \"mean\": ", s->count);
    cmd_eval_json_num(f, s->mean);
    fputs(", \"median\": ", f);
    cmd_eval_json_num(f, s->median);
    fputs(", \"max\": ", f);
    cmd_eval_json_num(f, s->max);
    if (s->argmax >= 0)
        fprintf(f, ", \"max_feature\": \"%s\"", fl->info[s->argmax].name);
    fputc('}', f);
}

static int cmd_eval_write_json(const char *path, const char *a, const char *b,
                               const char *geometry, int64_t na, int64_t nb,
                               const feat_layout *fl, const metric_report *rep)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    /* paths are written as given; escape the two characters JSON forbids */
    const char *names[3] = {a, b, geometry};
    const char *keys[3] = {"a", "b", "geometry"};
    fputs("{\n", f);
    for (int k = 0; k < 3; k++) {
        fprintf(f, "  \"%s\": \"", keys[k]);
        for (const char *p = names[k]; *p; p++) {
            if (*p == '"' || *p == '\\')
                fputc('\\', f);
            if ((unsigned char)*p >= 0x20)
                fputc(*p, f);
        }
        fputs("\",\n", f);
    }
    fprintf(f, "  \"n_a\": %lld,\n  \"n_b\": %lld,\n", (long long)na, (long long)nb);
    fputs("  \"separation_power\": {\n", f);
    for (int j = 0; j < fl->n_features; j++) {
        fprintf(f, "    \"%s\": ", fl->info[j].name);
        cmd_eval_json_num(f, rep->sep[j]);
        fputs(j + 1 < fl->n_features ? ",\n" : "\n", f);
    }
    fputs("  },\n  \"groups\": {\n", f);
    int first = 1;
    for (int g = 0; g < FEAT_N_GROUPS; g++) {
        if (rep->group[g].count == 0)
            continue;
        fprintf(f, "%s    \"%s\": ", first ? "" : ",\n", feat_group_name((feat_group)g));
        cmd_eval_json_summary(f, &rep->group[g], fl);
        first = 0;
    }
    fputs("\n  },\n  \"summary\": ", f);
    cmd_eval_json_summary(f, &rep->all, fl);
    fputs(",\n  \"fpd_x1e3\": ", f);
    cmd_eval_json_num(f, rep->fpd);
    fputs(",\n  \"kpd_x1e3\": ", f);
    cmd_eval_json_num(f, rep->kpd);
    fputs(",\n  \"kpd_err_x1e3\": ", f);
    cmd_eval_json_num(f, rep->kpd_err);
    fputs("\n}\n", f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return -1;
    return 0;
}

int cmd_eval(int argc, char **argv)
{
    const char *files[2] = {NULL, NULL}, *geometry = NULL, *json = NULL;
    int nfiles = 0, distances = 1;
    int64_t max_rows = INT64_MAX;
    double threshold = -1;
    uint64_t seed = 42;
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
                fprintf(stderr, "giant eval: more than two input files\n");
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

    gt_error err = {0};
    geo_geometry geo;
    if (geo_load_file(&geo, geometry, &err)) {
        fprintf(stderr, "giant eval: %s\n", err.message);
        return 1;
    }
    if (threshold < 0) {
        synth_detector det;
        if (synth_detector_init(&det, &geo, &err)) {
            fprintf(stderr, "giant eval: %s\n", err.message);
            geo_free(&geo);
            return 1;
        }
        threshold = det.threshold_mev;
        synth_detector_free(&det);
    }
    feat_layout fl;
    float *fa = NULL, *fb = NULL, *ea = NULL, *eb = NULL;
    int64_t na = 0, nb = 0;
    metric_report rep = {0};
    int rc = 1;
    if (feat_layout_init(&fl, &geo, (float)threshold, &err)) {
        fprintf(stderr, "giant eval: %s\n", err.message);
        geo_free(&geo);
        return 1;
    }
    if (cmd_eval_features(files[0], &geo, &fl, max_rows, &fa, &ea, &na, &err) ||
        cmd_eval_features(files[1], &geo, &fl, max_rows, &fb, &eb, &nb, &err)) {
        fprintf(stderr, "giant eval: %s\n", err.message);
        goto done;
    }
    if (metric_compare(&fl, fa, distances ? ea : NULL, na, fb, distances ? eb : NULL, nb, seed,
                       &rep, &err)) {
        fprintf(stderr, "giant eval: %s\n", err.message);
        goto done;
    }
    printf("A: %s (%lld showers)\nB: %s (%lld showers, reference)\n", files[0], (long long)na,
           files[1], (long long)nb);
    printf("%-12s %9s %9s %9s %9s  %s\n", "group", "features", "mean S", "median S", "max S",
           "worst feature");
    for (int g = 0; g < FEAT_N_GROUPS; g++) {
        const metric_summary *s = &rep.group[g];
        if (s->count == 0)
            continue;
        printf("%-12s %9d %9.4f %9.4f %9.4f  %s\n", feat_group_name((feat_group)g), s->count,
               s->mean, s->median, s->max, fl.info[s->argmax].name);
    }
    printf("%-12s %9d %9.4f %9.4f %9.4f  %s\n", "all", rep.all.count, rep.all.mean,
           rep.all.median, rep.all.max, fl.info[rep.all.argmax].name);
    if (distances && isfinite(rep.fpd))
        printf("FPD x1e3: %.3f   KPD x1e3: %.4f +- %.4f\n", rep.fpd, rep.kpd, rep.kpd_err);
    else if (distances)
        printf("FPD/KPD: not computed (too few showers for the feature dimension)\n");
    if (json && cmd_eval_write_json(json, files[0], files[1], geometry, na, nb, &fl, &rep)) {
        fprintf(stderr, "giant eval: cannot write %s: %s\n", json, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    metric_report_free(&rep);
    free(fa);
    free(fb);
    free(ea);
    free(eb);
    feat_layout_free(&fl);
    geo_free(&geo);
    return rc;
}
