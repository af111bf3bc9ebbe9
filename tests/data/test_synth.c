/* synth: material parameters, special functions, physics sense of the
 * simulated showers, reproducibility and bad configurations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data_test_util.h"
#include "geo.h"
#include "synth.h"

static void test_materials(void)
{
    synth_material w = {74, 19.3, 3.504, 1.4}, si = {14, 2.33, 93.7, 0.3};
    synth_stack s;
    gt_error err = {0};
    CHECK_EQ_INT(synth_stack_compute(&w, &si, &s, &err), GT_OK);
    /* CALO.md: X0_eff about 4.2 mm, F_S 2.5, e_hat 0.70 for the W/Si stack */
    CHECK_CLOSE(s.x0_mm, 4.2, 0.1, 0);
    CHECK_CLOSE(s.f_s, 2.5, 0.05, 0);
    CHECK_CLOSE(s.e_hat, 0.70, 0.01, 0);
    CHECK(s.z_eff > 70 && s.z_eff < 74);
    /* E_c between tungsten's 8.1 MeV and a little above (silicon's share) */
    CHECK(s.ec_mev > 8.0 && s.ec_mev < 9.0);
    CHECK_CLOSE(s.rm_mm, s.x0_mm * 21.2 / s.ec_mev, 1e-12, 0);
    /* the same material twice is that material */
    synth_stack t;
    synth_material w2 = w;
    CHECK_EQ_INT(synth_stack_compute(&w, &w2, &t, &err), GT_OK);
    CHECK_CLOSE(t.x0_mm, 3.504, 1e-9, 0);
    CHECK_CLOSE(t.ec_mev, 610.0 / 75.24, 1e-9, 0);
    CHECK_CLOSE(t.e_hat, 1.0, 1e-12, 0);
    synth_material bad = {74, 0, 3.5, 1};
    CHECK_EQ_INT(synth_stack_compute(&bad, &si, &t, &err), GT_EINVAL);
}

static void test_gamma_p(void)
{
    double xs[] = {0.01, 0.5, 1, 2.5, 4, 9, 20, 60};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        double x = xs[i];
        CHECK_CLOSE(synth_gamma_p(1.0, x), 1 - exp(-x), 1e-10, 0);
        CHECK_CLOSE(synth_gamma_p(3.0, x), 1 - exp(-x) * (1 + x + x * x / 2), 1e-10, 0);
        CHECK_CLOSE(synth_gamma_p(0.5, x), erf(sqrt(x)), 1e-10, 0);
    }
    CHECK(synth_gamma_p(2.0, 0.0) == 0.0);
    CHECK(synth_gamma_p(2.0, 1e4) == 1.0);
}

/* Showers at one fixed energy in dataset-2 geometry. */
static float *simulate_fixed(const synth_detector *d, const geo_geometry *g, double e_mev,
                             int n, uint64_t seed)
{
    synth_config c;
    synth_config_default(&c);
    c.seed = seed;
    c.energy_mode = SYNTH_ENERGY_FIXED;
    c.e_min_mev = c.e_max_mev = e_mev;
    float *s = malloc((size_t)n * g->n_voxels * sizeof *s);
    float *e = malloc(n * sizeof *e);
    gt_error err = {0};
    int rc = synth_generate(d, g, &c, 0, n, NULL, e, s, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    CHECK(e[0] == (float)e_mev && e[n - 1] == (float)e_mev);
    free(e);
    return s;
}

static void test_physics(const geo_geometry *g, const synth_detector *d)
{
    const double energies[] = {1e3, 4e3, 16e3, 64e3, 256e3};
    const int ne = 5, n = 150;
    double depth_max[5], rel_std[5];
    double dt = d->t_hi[0] - d->t_lo[0]; /* X0 per layer */
    CHECK_CLOSE(dt, 3.4 / d->stack.x0_mm, 1e-12, 0);
    for (int k = 0; k < ne; k++) {
        double e = energies[k];
        float *s = simulate_fixed(d, g, e, n, 7 + k);
        double prof[45] = {0}, sum = 0, sum2 = 0, r_in1 = 0, r_in2 = 0, tot_all = 0;
        int under = 0;
        for (int i = 0; i < n; i++) {
            double tot = 0;
            for (int v = 0; v < g->n_voxels; v++) {
                float x = s[(size_t)i * g->n_voxels + v];
                if (x > 0 && x < d->threshold_mev)
                    under++;
                tot += x;
                prof[g->voxel_layer[v]] += x;
                /* radial containment in Moliere radii (bin centres) */
                if (g->r[v] < d->stack.rm_mm)
                    r_in1 += x;
                if (g->r[v] < 2 * d->stack.rm_mm)
                    r_in2 += x;
            }
            sum += tot / e;
            sum2 += (tot / e) * (tot / e);
            tot_all += tot;
        }
        CHECK_EQ_INT(under, 0); /* nothing survives under the readout threshold */
        double mean = sum / n, sd = sqrt(fmax(sum2 / n - mean * mean, 0));
        rel_std[k] = sd / mean;
        /* energy is conserved up to leakage, sampling fluctuation and threshold */
        CHECK_MSG(mean > 0.93 && mean < 1.03, "E=%g MeV: <E_dep/E_inc> = %g", e, mean);
        /* the expected 0.11/sqrt(E/GeV), within a broad factor */
        double expect = 0.11 / sqrt(e / 1e3);
        CHECK_MSG(rel_std[k] > 0.5 * expect && rel_std[k] < 2.0 * expect,
                  "E=%g MeV: relative std %g, expected about %g", e, rel_std[k], expect);
        /* lateral: most energy inside 1 R_M, about all inside 2 R_M */
        double f1 = r_in1 / tot_all, f2 = r_in2 / tot_all;
        CHECK_MSG(f1 > 0.75 && f1 < 0.99, "E=%g: %g inside 1 R_M", e, f1);
        CHECK_MSG(f2 > 0.90, "E=%g: %g inside 2 R_M", e, f2);
        /* longitudinal maximum: parabola through the peak layer of the mean profile */
        int m = 0;
        for (int l = 1; l < 45; l++)
            if (prof[l] > prof[m])
                m = l;
        double off = 0;
        if (m > 0 && m < 44) {
            double a = prof[m - 1], b = prof[m], c = prof[m + 1];
            off = 0.5 * (a - c) / (a - 2 * b + c);
        }
        depth_max[k] = (m + 0.5 + off) * dt;
        printf("E = %6.0f GeV: <Edep/Einc> %.4f, rel std %.4f (0.11/sqrt(E) = %.4f), "
               "max at %.2f X0, in 1/2 R_M %.3f/%.3f\n",
               e / 1e3, mean, rel_std[k], expect, depth_max[k], f1, f2);
        free(s);
    }
    /* fluctuations shrink with energy */
    for (int k = 1; k < ne; k++)
        CHECK_MSG(rel_std[k] < rel_std[k - 1], "rel std %g at %g MeV not below %g", rel_std[k],
                  energies[k], rel_std[k - 1]);
    /* shower maximum moves as ln E: least-squares slope in X0 per e-fold,
     * GFlash predicts 1 (T = ln y - const) */
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int k = 0; k < ne; k++) {
        double x = log(energies[k]);
        sx += x;
        sy += depth_max[k];
        sxx += x * x;
        sxy += x * depth_max[k];
    }
    double slope = (ne * sxy - sx * sy) / (ne * sxx - sx * sx);
    printf("shower maximum: %.3f X0 per unit ln E\n", slope);
    CHECK_MSG(slope > 0.75 && slope < 1.25, "slope %g X0 per ln E", slope);
    /* and sits where GFlash puts it: T = ln(E/E_c) - 0.858 - sampling shift, +- 1 X0 */
    double t_hom = log(64e3 / d->stack.ec_mev) - 0.858;
    CHECK_MSG(fabs(depth_max[3] - (t_hom - 0.55 / d->stack.f_s - 0.69 * (1 - d->stack.e_hat))) < 1.0,
              "max at %g X0 for 64 GeV", depth_max[3]);
}

/* Shower i depends only on (seed, i), for either simulator. */
static void test_reproducible(const geo_geometry *g, const synth_detector *d, synth_simulator sim)
{
    synth_config c;
    synth_config_default(&c);
    c.seed = 99;
    c.simulator = sim;
    const int n = 24;
    size_t bytes = (size_t)n * g->n_voxels * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *e1 = malloc(n * 4), *e2 = malloc(n * 4);
    gt_error err = {0};
    c.threads = 1;
    CHECK_EQ_INT(synth_generate(d, g, &c, 0, n, NULL, e1, a, &err), GT_OK);
    c.threads = 3;
    CHECK_EQ_INT(synth_generate(d, g, &c, 0, n, NULL, e2, b, &err), GT_OK);
    CHECK(memcmp(a, b, bytes) == 0);
    CHECK(memcmp(e1, e2, n * 4) == 0);
    /* a later block is the same as the same rows of a bigger one */
    CHECK_EQ_INT(synth_generate(d, g, &c, 10, 5, NULL, e2, b, &err), GT_OK);
    CHECK(memcmp(a + (size_t)10 * g->n_voxels, b, (size_t)5 * g->n_voxels * 4) == 0);
    CHECK(memcmp(e1 + 10, e2, 5 * 4) == 0);
    /* given energies reproduce drawn ones */
    CHECK_EQ_INT(synth_generate(d, g, &c, 0, n, e1, NULL, b, &err), GT_OK);
    CHECK(memcmp(a, b, bytes) == 0);
    /* another seed, other showers */
    c.seed = 100;
    CHECK_EQ_INT(synth_generate(d, g, &c, 0, n, NULL, e2, b, &err), GT_OK);
    CHECK(memcmp(a, b, bytes) != 0);
    CHECK(e1[0] != e2[0]);
    free(a);
    free(b);
    free(e1);
    free(e2);
}

static void test_energies(void)
{
    synth_config c;
    synth_config_default(&c);
    gt_error err = {0};
    float e[2000];
    CHECK_EQ_INT(synth_draw_energies(&c, 0, 2000, e, &err), GT_OK);
    double lo = 1e30, hi = 0, mean_log = 0;
    for (int i = 0; i < 2000; i++) {
        lo = fmin(lo, e[i]);
        hi = fmax(hi, e[i]);
        mean_log += log10(e[i]) / 2000;
    }
    CHECK(lo >= 1e3 && hi <= 1e6);
    CHECK_CLOSE(mean_log, 4.5, 0.05, 0); /* log-uniform over 3..6 decades */
    c.energy_mode = SYNTH_ENERGY_DISCRETE;
    c.e_min_mev = 256;
    c.e_max_mev = 4.2e6;
    CHECK_EQ_INT(synth_draw_energies(&c, 0, 2000, e, &err), GT_OK);
    int seen[23] = {0}, bad = 0;
    for (int i = 0; i < 2000; i++) {
        int k = (int)lround(log2(e[i]));
        if (ldexp(1.0, k) != e[i] || k < 8 || k > 22)
            bad++;
        else
            seen[k]++;
    }
    CHECK_EQ_INT(bad, 0);
    for (int k = 8; k <= 22; k++)
        CHECK_MSG(seen[k] > 80, "2^%d drawn %d times", k, seen[k]);
    c.energy_mode = SYNTH_ENERGY_FIXED;
    c.e_min_mev = c.e_max_mev = 5e4;
    CHECK_EQ_INT(synth_draw_energies(&c, 0, 10, e, &err), GT_OK);
    CHECK(e[0] == 5e4f && e[9] == 5e4f);

    synth_energy_mode m;
    CHECK_EQ_INT(synth_parse_energy_mode("discrete", &m, &err), GT_OK);
    CHECK_EQ_INT(m, SYNTH_ENERGY_DISCRETE);
    CHECK_EQ_INT(synth_parse_energy_mode("gaussian", &m, &err), GT_EINVAL);
    CHECK(strstr(err.message, "gaussian") != NULL);
    /* bad configurations */
    synth_config_default(&c);
    c.e_min_mev = -1;
    CHECK_EQ_INT(synth_config_check(&c, &err), GT_EINVAL);
    synth_config_default(&c);
    c.e_max_mev = 10;
    CHECK_EQ_INT(synth_config_check(&c, &err), GT_EINVAL);
    synth_config_default(&c);
    c.e_max_mev = NAN;
    CHECK_EQ_INT(synth_config_check(&c, &err), GT_EINVAL);
    synth_config_default(&c);
    c.energy_mode = SYNTH_ENERGY_DISCRETE;
    c.e_min_mev = 1100;
    c.e_max_mev = 1200;
    CHECK_EQ_INT(synth_config_check(&c, &err), GT_EINVAL);
    synth_config_default(&c);
    c.max_spots = 1;
    CHECK_EQ_INT(synth_config_check(&c, &err), GT_EINVAL);
}

static void test_bad_inputs(const geo_geometry *g, const synth_detector *d)
{
    synth_config c;
    synth_config_default(&c);
    gt_error err = {0};
    float e[2] = {5e3f, NAN}, s[2 * 6480];
    CHECK_EQ_INT(synth_generate(d, g, &c, 0, 2, e, NULL, s, &err), GT_EINVAL);
    CHECK(strstr(err.message, "incident energy 1") != NULL);
    e[1] = -3;
    CHECK_EQ_INT(synth_generate(d, g, &c, 0, 2, e, NULL, s, &err), GT_EINVAL);
    CHECK_EQ_INT(synth_generate(d, g, &c, 0, -1, NULL, NULL, s, &err), GT_EINVAL);
    CHECK_EQ_INT(synth_generate(NULL, g, &c, 0, 1, NULL, NULL, s, &err), GT_EINVAL);
}

static void test_other_geometries(void)
{
    const char *files[] = {"binning_dataset_1_photons.xml", "binning_dataset_1_pions.xml",
                           "binning_dataset_3.xml"};
    for (int f = 0; f < 3; f++) {
        geo_geometry g;
        synth_detector d;
        gt_error err = {0};
        CHECK(geo_load_file(&g, dt_geometry_path(files[f]), &err) == GT_OK);
        CHECK_MSG(synth_detector_init(&d, &g, &err) == GT_OK, "%s", err.message);
        int n = f < 2 ? 60 : 6;
        float *s = simulate_fixed(&d, &g, 65536, n, 3);
        double mean = 0;
        int under = 0;
        for (int i = 0; i < n; i++) {
            double t = 0;
            for (int v = 0; v < g.n_voxels; v++) {
                float x = s[(size_t)i * g.n_voxels + v];
                t += x;
                if (x > 0 && x < d.threshold_mev)
                    under++;
            }
            mean += t / 65536 / n;
        }
        CHECK_EQ_INT(under, 0);
        CHECK_MSG(mean > 0.85 && mean < 1.05, "%s: <E_dep/E_inc> = %g", files[f], mean);
        printf("%s: Z_eff %.2f, X0 %.3f mm, E_c %.3f MeV, R_M %.2f mm, F_S %.3f, e_hat %.3f\n",
               files[f], d.stack.z_eff, d.stack.x0_mm, d.stack.ec_mev, d.stack.rm_mm,
               d.stack.f_s, d.stack.e_hat);
        if (f < 2) {
            CHECK_CLOSE(d.threshold_mev, 1.0, 1e-12, 0);
            /* empty layers have no thickness, so nothing is lost there */
            CHECK(d.t_hi[5] == d.t_lo[5]);
        } else {
            CHECK_CLOSE(d.threshold_mev, 0.01515, 1e-5, 0);
        }
        printf("%s: <E_dep/E_inc> = %.4f (%s)\n", files[f], mean, d.name);
        free(s);
        synth_detector_free(&d);
        geo_free(&g);
    }
}

/* The ends of the allowed energy range give finite, non-negative showers
 * that never exceed the incident energy by more than the fluctuation. */
static void test_extremes(const geo_geometry *g, const synth_detector *d)
{
    const double es[] = {10, 30, 100, 3e7, 1e8};
    for (int k = 0; k < 5; k++) {
        float *s = simulate_fixed(d, g, es[k], 4, 11);
        int bad = 0;
        double tot = 0;
        for (int i = 0; i < 4 * g->n_voxels; i++) {
            if (!(s[i] >= 0) || !isfinite(s[i]))
                bad++;
            tot += s[i];
        }
        CHECK_MSG(bad == 0, "E = %g MeV: %d bad voxels", es[k], bad);
        CHECK_MSG(tot / 4 < 2.0 * es[k], "E = %g MeV: mean deposit %g", es[k], tot / 4);
        if (es[k] > 1e3)
            CHECK_MSG(tot / 4 > 0.8 * es[k], "E = %g MeV: mean deposit %g", es[k], tot / 4);
        free(s);
    }
}

/* Photons convert first: their showers peak deeper than electrons' by
 * about the mean conversion depth, 9/7 X0. */
static void test_photon(const geo_geometry *g, const synth_detector *d)
{
    synth_config c;
    synth_config_default(&c);
    c.energy_mode = SYNTH_ENERGY_FIXED;
    c.e_min_mev = c.e_max_mev = 32e3;
    const int n = 200;
    float *s = malloc((size_t)n * g->n_voxels * sizeof *s);
    double mean_depth[2];
    gt_error err = {0};
    for (int p = 0; p < 2; p++) {
        c.particle = p ? SYNTH_PARTICLE_PHOTON : SYNTH_PARTICLE_ELECTRON;
        CHECK_EQ_INT(synth_generate(d, g, &c, 0, n, NULL, NULL, s, &err), GT_OK);
        double sw = 0, swt = 0;
        for (size_t i = 0; i < (size_t)n * g->n_voxels; i++) {
            int l = g->voxel_layer[i % g->n_voxels];
            sw += s[i];
            swt += s[i] * 0.5 * (d->t_lo[l] + d->t_hi[l]);
        }
        mean_depth[p] = swt / sw;
    }
    double shift = mean_depth[1] - mean_depth[0];
    printf("photon - electron mean depth at 32 GeV: %.3f X0 (expect about 9/7 = 1.286)\n",
           shift);
    CHECK_MSG(shift > 0.9 && shift < 1.7, "photon shift %g X0", shift);
    synth_particle pp;
    CHECK_EQ_INT(synth_parse_particle("gamma", &pp, &err), GT_OK);
    CHECK_EQ_INT(pp, SYNTH_PARTICLE_PHOTON);
    CHECK_EQ_INT(synth_parse_particle("pion", &pp, &err), GT_EINVAL);
    c.particle = (synth_particle)7;
    CHECK_EQ_INT(synth_config_check(&c, &err), GT_EINVAL);
    free(s);
}

int main(void)
{
    test_materials();
    test_gamma_p();
    test_energies();
    geo_geometry g;
    synth_detector d;
    gt_error err = {0};
    if (geo_load_file(&g, dt_geometry_path("binning_dataset_2.xml"), &err) ||
        synth_detector_init(&d, &g, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    printf("binning_dataset_2.xml: Z_eff %.2f, X0 %.3f mm, E_c %.3f MeV, R_M %.2f mm, "
           "F_S %.3f, e_hat %.3f, %.3f X0 per layer, threshold %.5f MeV\n",
           d.stack.z_eff, d.stack.x0_mm, d.stack.ec_mev, d.stack.rm_mm, d.stack.f_s,
           d.stack.e_hat, d.t_hi[0] - d.t_lo[0], d.threshold_mev);
    test_physics(&g, &d);
    test_reproducible(&g, &d, SYNTH_SIM_GFLASH);
    test_reproducible(&g, &d, SYNTH_SIM_CASCADE);
    test_extremes(&g, &d);
    test_photon(&g, &d);
    test_bad_inputs(&g, &d);
    test_other_geometries();
    synth_detector_free(&d);
    geo_free(&g);
    return check_finish();
}
