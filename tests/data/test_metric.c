/* feat and metric: features of hand-made showers, separation power,
 * histogram edges, FPD/KPD on Gaussians, and the headline behaviour: two
 * independent simulated samples score near zero, a 10% energy-scale shift
 * scores clearly worse. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data_test_util.h"
#include "feat.h"
#include "geo.h"
#include "metric.h"
#include "rng.h"
#include "synth.h"

static int find_feature(const feat_layout *f, const char *name)
{
    for (int j = 0; j < f->n_features; j++)
        if (!strcmp(f->info[j].name, name))
            return j;
    return -1;
}

static void test_features(const geo_geometry *g)
{
    feat_layout f;
    gt_error err = {0};
    CHECK_EQ_INT(feat_layout_init(&f, g, 0.01515f, &err), GT_OK);
    CHECK_EQ_INT(f.n_features, 2 + 45 * 8);
    float *s = calloc(g->n_voxels, sizeof *s), *out = malloc(f.n_features * sizeof *out);
    /* layer 3: 30 MeV in one voxel (alpha bin 4, r bin 2), 10 MeV in the
     * opposite angular bin at the same radius */
    int v1 = 3 * 144 + 4 * 9 + 2, v2 = 3 * 144 + 12 * 9 + 2;
    s[v1] = 30.0f;
    s[v2] = 10.0f;
    s[7 * 144] = 0.01f; /* under threshold in layer 7: counts as empty */
    feat_compute(&f, s, 80.0f, out);
    CHECK_CLOSE(out[find_feature(&f, "Etot/Einc")], 40.01 / 80.0, 1e-6, 0);
    CHECK_CLOSE(out[find_feature(&f, "Etot")], 40.01, 1e-4, 0);
    CHECK_CLOSE(out[find_feature(&f, "E_layer_3")], 40.0, 1e-5, 0);
    CHECK_CLOSE(out[find_feature(&f, "E_layer_4")], 0.0, 0, 0);
    double ex = (30 * g->eta[v1] + 10 * g->eta[v2]) / 40;
    double ey = (30 * g->phi[v1] + 10 * g->phi[v2]) / 40;
    CHECK_CLOSE(out[find_feature(&f, "EC_eta_3")], ex, 1e-4, 1e-5);
    CHECK_CLOSE(out[find_feature(&f, "EC_phi_3")], ey, 1e-4, 1e-5);
    double wx = sqrt((30 * g->eta[v1] * g->eta[v1] + 10 * g->eta[v2] * g->eta[v2]) / 40 - ex * ex);
    CHECK_CLOSE(out[find_feature(&f, "width_eta_3")], wx, 1e-3, 1e-4);
    CHECK_CLOSE(out[find_feature(&f, "EC_r_3")], 11.625, 1e-4, 0);
    CHECK_CLOSE(out[find_feature(&f, "width_r_3")], 0.0, 1e-3, 0);
    CHECK_CLOSE(out[find_feature(&f, "sparsity_3")], 1.0 - 2.0 / 144, 1e-6, 0);
    CHECK_CLOSE(out[find_feature(&f, "sparsity_7")], 1.0, 1e-6, 0);
    CHECK_CLOSE(out[find_feature(&f, "sparsity_0")], 1.0, 1e-6, 0);
    /* empty layers give 0, never NaN */
    int nonfinite = 0;
    for (int j = 0; j < f.n_features; j++)
        nonfinite += !isfinite(out[j]);
    CHECK_EQ_INT(nonfinite, 0);
    /* the classifier's row: log10 E_inc first, the energies as log10(x + 1e-8) */
    CHECK_EQ_INT(feat_classifier_width(&f), f.n_features + 1);
    float *row = malloc((size_t)feat_classifier_width(&f) * sizeof *row);
    feat_classifier_row(&f, out, 80.0f, row);
    CHECK_CLOSE(row[0], log10(80.0), 1e-6, 0);
    CHECK_CLOSE(row[1 + find_feature(&f, "Etot")], log10(40.01), 1e-6, 0);
    CHECK_CLOSE(row[1 + find_feature(&f, "E_layer_3")], log10(40.0), 1e-6, 0);
    CHECK_CLOSE(row[1 + find_feature(&f, "E_layer_4")], -8.0, 1e-5, 0);
    CHECK(row[1 + find_feature(&f, "Etot/Einc")] == out[find_feature(&f, "Etot/Einc")]);
    CHECK(row[1 + find_feature(&f, "EC_eta_3")] == out[find_feature(&f, "EC_eta_3")]);
    CHECK(row[1 + find_feature(&f, "sparsity_3")] == out[find_feature(&f, "sparsity_3")]);
    free(row);
    /* CaloChallenge binning */
    const feat_info *fi = &f.info[find_feature(&f, "EC_eta_3")];
    CHECK(fi->binning == FEAT_BINS_LINEAR && fi->lo == -30 && fi->hi == 30 && fi->nbins == 100);
    fi = &f.info[find_feature(&f, "E_layer_3")];
    CHECK(fi->binning == FEAT_BINS_LOG_REF && fabs(fi->lo - 0.5e-3 / 0.033) < 1e-12);
    fi = &f.info[0];
    CHECK(fi->lo == 0.5 && fi->hi == 1.5 && fi->nbins == 100);
    free(s);
    free(out);
    feat_layout_free(&f);

    /* dataset 1: only layers binned in angle have eta/phi features */
    geo_geometry g1;
    CHECK(geo_load_file(&g1, dt_geometry_path("binning_dataset_1_photons.xml"), &err) == GT_OK);
    CHECK_EQ_INT(feat_layout_init(&f, &g1, 1.0f, &err), GT_OK);
    CHECK(find_feature(&f, "EC_eta_0") < 0);
    CHECK(find_feature(&f, "EC_eta_1") >= 0);
    CHECK(find_feature(&f, "E_layer_12") >= 0);
    CHECK_EQ_INT(f.n_features, 2 + 5 * 4 + 2 * 4);
    CHECK(f.info[find_feature(&f, "E_layer_1")].lo == 10.0);
    feat_layout_free(&f);
    geo_free(&g1);
    CHECK_EQ_INT(feat_layout_init(&f, NULL, 0, &err), GT_EINVAL);
}

static void test_separation(void)
{
    double a[4] = {1, 2, 3, 4}, b[4] = {2, 4, 6, 8}, c[4] = {0, 0, 5, 5}, d[4] = {5, 5, 0, 0};
    CHECK_CLOSE(metric_separation_power(a, b, 4), 0.0, 1e-15, 0);
    CHECK_CLOSE(metric_separation_power(c, d, 4), 1.0, 1e-15, 0);
    double e[2] = {1, 0}, f[2] = {0.5, 0.5};
    CHECK_CLOSE(metric_separation_power(e, f, 2), 0.5 * (0.25 / 1.5 + 0.25 / 0.5), 1e-15, 0);
    double z[2] = {0, 0};
    CHECK_CLOSE(metric_separation_power(z, z, 2), 0.0, 0, 0);
    CHECK_CLOSE(metric_separation_power(z, e, 2), 1.0, 0, 0);
    /* symmetric */
    CHECK_CLOSE(metric_separation_power(a, c, 4), metric_separation_power(c, a, 4), 1e-15, 0);

    /* numpy-style histogram: last bin closed, outside and NaN dropped */
    double edges[4] = {0, 1, 2, 3}, h[3];
    float x[8] = {0, 0.5f, 1, 2.999f, 3, 3.5f, -1, NAN};
    metric_histogram(x, 8, 1, edges, 3, h);
    CHECK(h[0] == 2 && h[1] == 1 && h[2] == 2);
    /* log edges up to the reference maximum */
    feat_info fi = {.binning = FEAT_BINS_LOG_REF, .lo = 0.01, .nbins = 4};
    float ref[3] = {5, 100, 0};
    double le[5];
    gt_error err = {0};
    CHECK_EQ_INT(metric_feature_edges(&fi, ref, 3, 1, le, &err), GT_OK);
    CHECK_CLOSE(le[0], 0.01, 1e-12, 0);
    CHECK_CLOSE(le[2], 1.0, 1e-12, 0);
    CHECK(le[4] == 100.0);
    fi.nbins = 0;
    CHECK_EQ_INT(metric_feature_edges(&fi, ref, 3, 1, le, &err), GT_EINVAL);
}

static void test_distances(void)
{
    const int n = 4000, d = 3;
    double *a = malloc(n * d * sizeof *a), *b = malloc(n * d * sizeof *b),
           *c = malloc(n * d * sizeof *c);
    rng_state r = rng_init(3, 0);
    for (int i = 0; i < n * d; i++) {
        a[i] = rng_next_normal(&r);
        b[i] = rng_next_normal(&r);
        c[i] = rng_next_normal(&r) + ((i % d) == 0 ? 0.5 : 0.0);
    }
    double fpd_same, fpd_shift, kpd_same, kpd_shift, e1, e2;
    gt_error err = {0};
    double fe1, fe2;
    CHECK_EQ_INT(metric_fpd(a, n, b, n, d, &fpd_same, &fe1, &err), GT_OK);
    CHECK_EQ_INT(metric_fpd(a, n, c, n, d, &fpd_shift, &fe2, &err), GT_OK);
    CHECK_EQ_INT(metric_kpd(a, n, b, n, d, 1000, 5, 1, &kpd_same, &e1, &err), GT_OK);
    CHECK_EQ_INT(metric_kpd(a, n, c, n, d, 1000, 5, 1, &kpd_shift, &e2, &err), GT_OK);
    printf("Gaussians: FPD same %.5f shifted %.5f (expect 0.25); KPD same %.5f +- %.5f, "
           "shifted %.5f +- %.5f\n", fpd_same, fpd_shift, kpd_same, e1, kpd_shift, e2);
    CHECK_MSG(fabs(fpd_same) < 0.01, "FPD of one distribution %g", fpd_same);
    CHECK_CLOSE(fpd_shift, 0.25, 0.03, 0);
    CHECK_MSG(fabs(kpd_same) < 4 * e1 + 1e-3, "KPD of one distribution %g +- %g", kpd_same, e1);
    CHECK_MSG(kpd_shift > 10 * fabs(kpd_same) && kpd_shift > 5 * e2, "KPD shifted %g", kpd_shift);
    /* real uncertainties: the fit's intercept error, the batches' spread */
    printf("FPD errors: same %.5f, shifted %.5f\n", fe1, fe2);
    CHECK_MSG(fe1 > 0 && fe1 < 0.01 && fe2 > 0 && fe2 < 0.03, "FPD errors %g %g", fe1, fe2);
    CHECK_MSG(e1 > 0 && e2 > 0, "KPD errors %g %g", e1, e2);
    /* samples smaller than a batch: the batches are halves, still different
     * subsets, so the spread is not 0 (it was, when a batch was the whole
     * sample); two draws of one distribution stay within a few sigma of 0 */
    double k400, e400, k400s, e400s;
    CHECK_EQ_INT(metric_kpd(a, 400, b, 400, d, 2000, 10, 42, &k400, &e400, &err), GT_OK);
    CHECK_EQ_INT(metric_kpd(a, 400, c, 400, d, 2000, 10, 42, &k400s, &e400s, &err), GT_OK);
    printf("KPD of 400: same %.5f +- %.5f, shifted %.5f +- %.5f\n", k400, e400, k400s, e400s);
    CHECK_MSG(e400 > 1e-5 && fabs(k400) < 4 * e400, "KPD of 400 %g +- %g", k400, e400);
    CHECK_MSG(e400s > 1e-5 && k400s > 3 * e400s, "KPD shifted of 400 %g +- %g", k400s, e400s);
    /* the error is of one batch's value: it shrinks as the batches grow */
    CHECK_MSG(e1 < e400, "KPD error of 1000-row batches %g, of 200-row ones %g", e1, e400);
    CHECK_EQ_INT(metric_fpd(a, 5, b, 5, d, &fpd_same, NULL, &err), GT_EINVAL);
    CHECK_EQ_INT(metric_kpd(a, 1, b, 1, d, 1000, 5, 1, &kpd_same, &e1, &err), GT_EINVAL);
    free(a);
    free(b);
    free(c);
}

/* n showers with seed; scale multiplies every voxel (an energy-scale error). */
static void sample(const geo_geometry *g, const synth_detector *det, const feat_layout *f,
                   uint64_t seed, int n, float scale, float *feats, float *e)
{
    synth_config c;
    synth_config_default(&c);
    c.seed = seed;
    float *s = malloc((size_t)n * g->n_voxels * sizeof *s);
    gt_error err = {0};
    CHECK_EQ_INT(synth_generate(det, g, &c, 0, n, NULL, e, s, &err), GT_OK);
    for (size_t i = 0; i < (size_t)n * g->n_voxels; i++)
        s[i] *= scale;
    feat_compute_batch(f, s, e, n, feats);
    free(s);
}

/* The simulator's detector for g and the feature layout at its threshold. */
static void detector_and_features(const geo_geometry *g, synth_detector *det, feat_layout *f)
{
    gt_error err = {0};
    CHECK(synth_detector_init(det, g, &err) == GT_OK);
    CHECK(feat_layout_init(f, g, (float)det->threshold_mev, &err) == GT_OK);
}

static void test_same_vs_shifted(const geo_geometry *g)
{
    synth_detector det;
    feat_layout f;
    gt_error err = {0};
    detector_and_features(g, &det, &f);
    const int n = 1500;
    float *fa = malloc((size_t)n * f.n_features * sizeof *fa), *ea = malloc(n * sizeof *ea);
    float *fb = malloc((size_t)n * f.n_features * sizeof *fb), *eb = malloc(n * sizeof *eb);
    float *fc = malloc((size_t)n * f.n_features * sizeof *fc), *ec = malloc(n * sizeof *ec);
    sample(g, &det, &f, 1, n, 1.0f, fa, ea);
    sample(g, &det, &f, 2, n, 1.0f, fb, eb);
    sample(g, &det, &f, 3, n, 1.1f, fc, ec);
    metric_report same, shifted;
    CHECK_EQ_INT(metric_compare(&f, fa, ea, n, fb, eb, n, 42, &same, &err), GT_OK);
    CHECK_EQ_INT(metric_compare(&f, fc, ec, n, fb, eb, n, 42, &shifted, &err), GT_OK);
    int j = find_feature(&f, "Etot/Einc");
    printf("same config: mean S %.4f, max S %.4f, S(Etot/Einc) %.4f, FPD %.2f, KPD %.4f\n",
           same.all.mean, same.all.max, same.sep[j], same.fpd, same.kpd);
    printf("10%% shift:   mean S %.4f, max S %.4f, S(Etot/Einc) %.4f, FPD %.2f, KPD %.4f\n",
           shifted.all.mean, shifted.all.max, shifted.sep[j], shifted.fpd, shifted.kpd);
    /* two samples of one configuration: near zero everywhere (the floor
     * is the statistical noise of 1500 showers in up to 100 bins) */
    CHECK_MSG(same.all.mean < 0.03, "mean S %g", same.all.mean);
    CHECK_MSG(same.all.max < 0.08, "max S %g", same.all.max);
    CHECK_MSG(same.sep[j] < 0.05, "S(Etot/Einc) %g", same.sep[j]);
    /* a 10% energy scale: the response histogram separates clearly */
    CHECK_MSG(shifted.sep[j] > 0.3, "S(Etot/Einc) shifted %g", shifted.sep[j]);
    CHECK(shifted.sep[j] > 10 * same.sep[j]);
    CHECK(shifted.all.max > 4 * same.all.max);
    CHECK(shifted.group[FEAT_E_LAYER].mean > same.group[FEAT_E_LAYER].mean);
    CHECK(shifted.all.mean > same.all.mean);
    CHECK(shifted.all.argmax == j);
    CHECK(isfinite(same.fpd) && isfinite(same.kpd) && isfinite(shifted.fpd));
    CHECK(same.kpd_err > 0 && isfinite(same.fpd_err) && same.fpd_err > 0);
    CHECK_EQ_INT(same.group[FEAT_E_LAYER].count, 45);
    /* bad input */
    metric_report bad;
    CHECK_EQ_INT(metric_compare(&f, fa, NULL, 0, fb, NULL, n, 1, &bad, &err), GT_EINVAL);
    metric_report_free(&same);
    metric_report_free(&shifted);
    free(fa);
    free(fb);
    free(fc);
    free(ea);
    free(eb);
    free(ec);
    feat_layout_free(&f);
    synth_detector_free(&det);
}

/* Features constant in a sample (an always-empty layer; widths that are
 * round-off in one sample and exactly 0 in the other; one incident energy
 * for every shower) are listed and left out of FPD/KPD instead of blowing
 * them up. */
static void test_constant(const geo_geometry *g)
{
    synth_detector det;
    feat_layout f;
    gt_error err = {0};
    detector_and_features(g, &det, &f);
    const int n = 600, nf = f.n_features;
    float *fa = malloc((size_t)n * nf * sizeof *fa), *ea = malloc(n * sizeof *ea);
    float *fb = malloc((size_t)n * nf * sizeof *fb), *eb = malloc(n * sizeof *eb);
    sample(g, &det, &f, 11, n, 1.0f, fa, ea);
    sample(g, &det, &f, 12, n, 1.0f, fb, eb);
    metric_report ref;
    CHECK_EQ_INT(metric_compare(&f, fa, ea, n, fb, eb, n, 42, &ref, &err), GT_OK);
    /* the simulator's own: layers (nearly) never reached at these energies */
    printf("constant in the untouched samples:");
    for (int c = 0; c < ref.n_constant; c++)
        printf(" %s", ref.constant[c] < 0 ? "E_inc" : f.info[ref.constant[c]].name);
    printf("\n");
    /* layer 44 always empty in both; width_eta_20 round-off in A, 0 in B */
    static const char *const empty[] = {"E_layer_44", "EC_eta_44", "EC_phi_44", "width_eta_44",
                                        "width_phi_44"};
    int jw = find_feature(&f, "width_eta_20");
    rng_state r = rng_init(5, 0);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 5; k++) {
            int j = find_feature(&f, empty[k]);
            fa[(size_t)i * nf + j] = fb[(size_t)i * nf + j] = 0.0f;
        }
        fa[(size_t)i * nf + jw] = (float)(1e-8 * rng_next_uniform(&r));
        fb[(size_t)i * nf + jw] = 0.0f;
    }
    metric_report mod;
    CHECK_EQ_INT(metric_compare(&f, fa, ea, n, fb, eb, n, 42, &mod, &err), GT_OK);
    printf("constant features: %d; FPD %.3f +- %.3f (untouched %.3f), KPD %.4f +- %.4f "
           "(untouched %.4f)\n", mod.n_constant, mod.fpd, mod.fpd_err, ref.fpd, mod.kpd,
           mod.kpd_err, ref.kpd);
    int before = 0;   /* of those made constant here, already constant untouched */
    for (int c = 0; c < ref.n_constant; c++)
        for (int k = 0; k < 5; k++)
            before += ref.constant[c] == find_feature(&f, empty[k]);
    CHECK_EQ_INT(mod.n_constant, ref.n_constant + 6 - before);
    for (int k = 0; k < 5; k++) {
        int j = find_feature(&f, empty[k]), seen = 0;
        for (int c = 0; c < mod.n_constant; c++)
            seen |= mod.constant[c] == j;
        CHECK_MSG(seen, "%s not listed as constant", empty[k]);
    }
    int seen_w = 0;
    for (int c = 0; c < mod.n_constant; c++)
        seen_w |= mod.constant[c] == jw;
    CHECK(seen_w);
    /* scaled by its maximum, the round-off column alone would add about
     * 1/3 (1e3 x: 333) to FPD; left out, FPD and KPD stay where they were */
    CHECK(isfinite(mod.fpd) && isfinite(mod.kpd) && mod.kpd_err > 0);
    CHECK_MSG(fabs(mod.fpd - ref.fpd) < 0.5 * fabs(ref.fpd) + 5 * ref.fpd_err + 1.0,
              "FPD %g against %g", mod.fpd, ref.fpd);
    CHECK_MSG(fabs(mod.kpd - ref.kpd) < 5 * ref.kpd_err + 0.5 * fabs(ref.kpd) + 0.05,
              "KPD %g against %g", mod.kpd, ref.kpd);
    /* one incident energy for every shower: E_inc is constant too */
    for (int i = 0; i < n; i++)
        ea[i] = eb[i] = 65536.0f;
    metric_report fixed;
    CHECK_EQ_INT(metric_compare(&f, fa, ea, n, fb, eb, n, 42, &fixed, &err), GT_OK);
    int seen_e = 0;
    for (int c = 0; c < fixed.n_constant; c++)
        seen_e |= fixed.constant[c] == -1;
    CHECK(seen_e && fixed.n_constant == mod.n_constant + 1 && isfinite(fixed.fpd) &&
          isfinite(fixed.kpd));
    metric_report_free(&ref);
    metric_report_free(&mod);
    metric_report_free(&fixed);
    free(fa);
    free(fb);
    free(ea);
    free(eb);
    feat_layout_free(&f);
    synth_detector_free(&det);
}

int main(void)
{
    geo_geometry g;
    if (dt_load_geometry(&g, "binning_dataset_2.xml"))
        return 1;
    test_features(&g);
    test_separation();
    test_distances();
    test_same_vs_shifted(&g);
    test_constant(&g);
    geo_free(&g);
    return check_finish();
}
