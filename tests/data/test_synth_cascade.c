/* The cascade simulator (engine/data/synth_cascade.c): its own random
 * streams (test_synth checks it, like GFlash, for threads and blocks),
 * energy sense, nothing under the threshold, a shower-to-shower start
 * depth, early-layer deposits in quanta of a track crossing, hadron-like
 * pions, every geometry and the ends of the energy range, and showers a
 * simple statistic tells apart from GFlash's.  The printed numbers are those of engine/data/README.md
 * (`ctest -R test_synth_cascade -V`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data_test_util.h"
#include "geo.h"
#include "synth.h"

/* n showers at a fixed energy; the caller frees them. */
static float *simulate(const synth_detector *d, const geo_geometry *g, synth_simulator sim,
                       synth_particle p, double e_mev, int n, uint64_t seed)
{
    synth_config c;
    synth_config_default(&c);
    c.simulator = sim;
    c.particle = p;
    c.seed = seed;
    c.energy_mode = SYNTH_ENERGY_FIXED;
    c.e_min_mev = c.e_max_mev = e_mev;
    float *s = malloc((size_t)n * g->n_voxels * sizeof *s);
    gt_error err = {0};
    int rc = synth_generate(d, g, &c, 0, n, NULL, NULL, s, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    return s;
}

/* Per shower: total energy, energy-weighted depth (layer centres, X0, or
 * interaction lengths when lambda) and radius (voxel centres, mm). */
typedef struct shower_stats {
    double total, depth, radius, early, late;
} shower_stats;

static shower_stats stats_of(const synth_detector *d, const geo_geometry *g, const float *s,
                             int lambda)
{
    shower_stats st = {0};
    double sd = 0, sr = 0;
    for (int v = 0; v < g->n_voxels; v++) {
        int l = g->voxel_layer[v];
        double x = s[v], t = lambda ? 0.5 * (d->l_lo[l] + d->l_hi[l])
                                    : 0.5 * (d->t_lo[l] + d->t_hi[l]);
        st.total += x;
        sd += x * t;
        sr += x * g->r[v];
        if (l < 5)
            st.early += x;
        else if (l >= 15)
            st.late += x;
    }
    if (st.total > 0) {
        st.depth = sd / st.total;
        st.radius = sr / st.total;
    }
    return st;
}

typedef struct sample_stats {
    double response, rel_sd, depth, depth_sd, radius, corr_early_late;
    int under; /* voxels above 0 and under the threshold */
} sample_stats;

static sample_stats sample_of(const synth_detector *d, const geo_geometry *g, const float *s,
                              int n, double e_mev, int lambda)
{
    sample_stats m = {0};
    double r2 = 0, d2 = 0, fe = 0, fl = 0, fe2 = 0, fl2 = 0, fel = 0;
    for (int i = 0; i < n; i++) {
        const float *x = s + (size_t)i * g->n_voxels;
        for (int v = 0; v < g->n_voxels; v++)
            if (x[v] > 0 && x[v] < d->threshold_mev)
                m.under++;
        shower_stats st = stats_of(d, g, x, lambda);
        double resp = st.total / e_mev, e = st.early / st.total, l = st.late / st.total;
        m.response += resp / n;
        r2 += resp * resp / n;
        m.depth += st.depth / n;
        d2 += st.depth * st.depth / n;
        m.radius += st.radius / n;
        fe += e / n, fl += l / n, fe2 += e * e / n, fl2 += l * l / n, fel += e * l / n;
    }
    m.rel_sd = sqrt(fmax(r2 - m.response * m.response, 0)) / m.response;
    m.depth_sd = sqrt(fmax(d2 - m.depth * m.depth, 0));
    m.corr_early_late = (fel - fe * fl) / sqrt((fe2 - fe * fe) * (fl2 - fl * fl));
    return m;
}

/* Dataset 2: response, resolution, threshold, start-depth fluctuation,
 * early/late correlation, the maximum's energy dependence, and GFlash
 * beside it. */
static void test_physics(const geo_geometry *g, const synth_detector *d)
{
    const double es[] = {1e3, 4e3, 16e3, 64e3, 256e3};
    const int n = 150;
    double depth[2][5];
    for (int sim = 0; sim < 2; sim++) {
        double prev_sd = 1e9;
        for (int k = 0; k < 5; k++) {
            float *s = simulate(d, g, (synth_simulator)sim, SYNTH_PARTICLE_ELECTRON, es[k], n,
                                7 + k);
            sample_stats m = sample_of(d, g, s, n, es[k], 0);
            depth[sim][k] = m.depth;
            printf("%-7s E = %3.0f GeV: <Edep/Einc> %.4f, rel std %.4f, mean depth %.2f +- "
                   "%.2f X0, mean r %.2f mm, corr(early, late) %.2f\n",
                   synth_simulator_name((synth_simulator)sim), es[k] / 1e3, m.response, m.rel_sd,
                   m.depth, m.depth_sd, m.radius, m.corr_early_late);
            CHECK_EQ_INT(m.under, 0);
            CHECK_MSG(m.response > 0.93 && m.response < 1.03, "%g MeV: response %g", es[k],
                      m.response);
            if (sim == SYNTH_SIM_CASCADE) {
                /* track quanta and soft deposits: between 3% and 20% at 1 GeV */
                double s1 = m.rel_sd * sqrt(es[k] / 1e3);
                CHECK_MSG(s1 > 0.03 && s1 < 0.2, "%g MeV: rel std %g", es[k], m.rel_sd);
                CHECK(m.rel_sd < prev_sd);
                prev_sd = m.rel_sd;
                /* the start depth (and the tree's branchings) moves whole
                 * profiles: the mean depth spreads by more than half an X0 */
                CHECK_MSG(m.depth_sd > 0.5, "%g MeV: mean depth spread %g X0", es[k], m.depth_sd);
                /* a late start takes energy from the early layers to the late ones */
                if (es[k] >= 4e3)
                    CHECK_MSG(m.corr_early_late < -0.3, "%g MeV: corr %g", es[k],
                              m.corr_early_late);
            }
            free(s);
        }
    }
    /* the maximum moves with ln E, faster in the cascade (sub-showers
     * start deeper as the tree grows) */
    double slope[2];
    for (int sim = 0; sim < 2; sim++) {
        slope[sim] = (depth[sim][4] - depth[sim][0]) / log(es[4] / es[0]);
        printf("%s: mean depth %.3f X0 per unit ln E\n",
               synth_simulator_name((synth_simulator)sim), slope[sim]);
        CHECK(slope[sim] > 0.7 && slope[sim] < 1.5);
    }
    CHECK_MSG(slope[1] > slope[0] + 0.05, "slopes %g (cascade) and %g (gflash)", slope[1],
              slope[0]);
    /* a photon's start, its conversion (mean 9/7 X0), lies deeper than an
     * electron's first hard bremsstrahlung (mean 0.42 X0) */
    float *ph = simulate(d, g, SYNTH_SIM_CASCADE, SYNTH_PARTICLE_PHOTON, 16e3, 300, 31);
    float *el = simulate(d, g, SYNTH_SIM_CASCADE, SYNTH_PARTICLE_ELECTRON, 16e3, 300, 31);
    double shift =
        sample_of(d, g, ph, 300, 16e3, 0).depth - sample_of(d, g, el, 300, 16e3, 0).depth;
    printf("cascade photon - electron mean depth at 16 GeV: %.3f X0 (starts: 9/7 - 0.42 = 0.86)\n",
           shift);
    CHECK_MSG(shift > 0.4 && shift < 1.4, "photon shift %g X0", shift);
    free(ph);
    free(el);
}

/* A simple statistic tells the two apart: at 16 GeV the cascade's mean
 * depth lies many standard errors deeper, its radial profile has a
 * different shape (the share beyond 2 R_M) and its response is narrower. */
static void test_told_apart(const geo_geometry *g, const synth_detector *d)
{
    const int n = 200;
    float *a = simulate(d, g, SYNTH_SIM_GFLASH, SYNTH_PARTICLE_ELECTRON, 16e3, n, 3);
    float *b = simulate(d, g, SYNTH_SIM_CASCADE, SYNTH_PARTICLE_ELECTRON, 16e3, n, 3);
    sample_stats ma = sample_of(d, g, a, n, 16e3, 0), mb = sample_of(d, g, b, n, 16e3, 0);
    double se = sqrt((ma.depth_sd * ma.depth_sd + mb.depth_sd * mb.depth_sd) / n);
    double z = (mb.depth - ma.depth) / se;
    printf("16 GeV mean depth: gflash %.3f, cascade %.3f X0 (%.1f standard errors); rel std "
           "%.4f / %.4f\n",
           ma.depth, mb.depth, z, ma.rel_sd, mb.rel_sd);
    CHECK_MSG(fabs(z) > 5, "mean depths %g and %g, %g standard errors", ma.depth, mb.depth, z);
    CHECK_MSG(mb.rel_sd < 0.85 * ma.rel_sd, "rel std %g (cascade) vs %g", mb.rel_sd, ma.rel_sd);
    free(a);
    free(b);
}

/* The first layers' voxel energies in units of a track crossing's mean
 * deposit q = E_c * 0.805 X0: a 1-crossing peak (Moyal, most probable at
 * 0.91 q) and a 2-crossing one over the valley between them; GFlash's
 * continuous spots have no such peak. */
static void test_early_quanta(const geo_geometry *g, const synth_detector *d)
{
    const int n = 300;
    double q = d->stack.ec_mev * (d->t_hi[0] - d->t_lo[0]);
    double ratio[2];
    for (int sim = 0; sim < 2; sim++) {
        float *s = simulate(d, g, (synth_simulator)sim, SYNTH_PARTICLE_ELECTRON, 64e3, n, 5);
        int one = 0, valley = 0, two = 0, all = 0;
        for (int i = 0; i < n; i++)
            for (int v = 0; v < g->n_voxels; v++) {
                double x = s[(size_t)i * g->n_voxels + v] / q;
                if (g->voxel_layer[v] > 2 || x <= 0)
                    continue;
                all++;
                one += x >= 0.8 && x < 1.1;
                valley += x >= 1.4 && x < 1.7;
                two += x >= 1.8 && x < 2.1;
            }
        /* three windows 0.3 q wide: the peaks and the valley between them */
        ratio[sim] = (double)one / (valley + 1);
        printf("%-7s first 3 layers at 64 GeV: %d voxels, in [0.8, 1.1) q %d, [1.4, 1.7) q %d, "
               "[1.8, 2.1) q %d\n",
               synth_simulator_name((synth_simulator)sim), all, one, valley, two);
        if (sim == SYNTH_SIM_CASCADE) {
            CHECK_MSG(one > 3 * valley, "1-crossing peak %d over the valley %d", one, valley);
            CHECK_MSG(two > 1.3 * valley, "2-crossing peak %d over the valley %d", two, valley);
        }
        free(s);
    }
    CHECK_MSG(ratio[0] < 1.6, "gflash has a peak too: %g", ratio[0]);
}

/* Pions in the dataset-1 pion geometry: a hadron-like shower is deeper,
 * wider, answers less (invisible energy) and fluctuates more than an
 * electron's; GFlash's pion is its electron. */
static void test_pions(void)
{
    geo_geometry g;
    synth_detector d;
    gt_error err = {0};
    if (dt_load_geometry(&g, "binning_dataset_1_pions.xml") ||
        synth_detector_init(&d, &g, &err) != GT_OK) {
        CHECK_MSG(0, "%s", err.message);
        return;
    }
    CHECK_EQ_INT(synth_particle_for_geometry(&g), SYNTH_PARTICLE_PION);
    printf("Pb/LAr: lambda %.1f mm = %.2f X0; depth %.2f lambda\n", d.lambda_mm,
           d.lambda_mm / d.stack.x0_mm, d.l_hi[g.n_layers - 1]);
    CHECK_CLOSE(d.l_hi[14] - d.l_lo[14], 1.8, 1e-9, 0); /* the tile slabs keep their lambdas */
    const int n = 300;
    const double e = 65536;
    float *pi = simulate(&d, &g, SYNTH_SIM_CASCADE, SYNTH_PARTICLE_PION, e, n, 21);
    float *el = simulate(&d, &g, SYNTH_SIM_CASCADE, SYNTH_PARTICLE_ELECTRON, e, n, 21);
    sample_stats mp = sample_of(&d, &g, pi, n, e, 1), me = sample_of(&d, &g, el, n, e, 1);
    printf("64 GeV pion: <Edep/Einc> %.3f, rel std %.3f, depth %.2f +- %.2f lambda, r %.1f mm; "
           "electron: %.3f, %.3f, %.2f +- %.2f lambda, %.1f mm\n",
           mp.response, mp.rel_sd, mp.depth, mp.depth_sd, mp.radius, me.response, me.rel_sd,
           me.depth, me.depth_sd, me.radius);
    CHECK_EQ_INT(mp.under, 0);
    CHECK_MSG(mp.response > 0.55 && mp.response < 0.95, "pion response %g", mp.response);
    CHECK_MSG(me.response > 0.93 && me.response < 1.03, "electron response %g", me.response);
    CHECK_MSG(mp.depth > me.depth + 1.0, "depths %g and %g lambda", mp.depth, me.depth);
    CHECK_MSG(mp.depth_sd > 3 * me.depth_sd, "depth spreads %g and %g", mp.depth_sd, me.depth_sd);
    CHECK_MSG(mp.radius > 2 * me.radius, "radii %g and %g mm", mp.radius, me.radius);
    CHECK_MSG(mp.rel_sd > 3 * me.rel_sd, "rel std %g and %g", mp.rel_sd, me.rel_sd);
    free(pi);
    free(el);
    /* GFlash has no hadronic model: its pion is exactly its electron */
    float *gp = simulate(&d, &g, SYNTH_SIM_GFLASH, SYNTH_PARTICLE_PION, e, 20, 4);
    float *ge = simulate(&d, &g, SYNTH_SIM_GFLASH, SYNTH_PARTICLE_ELECTRON, e, 20, 4);
    CHECK(memcmp(gp, ge, (size_t)20 * g.n_voxels * sizeof(float)) == 0);
    CHECK(!strcmp(synth_particle_shower_name(SYNTH_PARTICLE_PION, SYNTH_SIM_GFLASH), "electron"));
    CHECK(!strcmp(synth_particle_shower_name(SYNTH_PARTICLE_PION, SYNTH_SIM_CASCADE), "pion"));
    free(gp);
    free(ge);
    synth_detector_free(&d);
    geo_free(&g);
}

/* The cascade's showers use their own streams, its incident energies
 * GFlash's: the same energies for a seed, other showers (the rest of its
 * reproducibility is test_synth's, run for both simulators). */
static void test_streams(const geo_geometry *g, const synth_detector *d)
{
    synth_config c;
    synth_config_default(&c);
    const int n = 8;
    size_t bytes = (size_t)n * g->n_voxels * sizeof(float);
    float *s[2] = {malloc(bytes), malloc(bytes)}, e[2][8];
    gt_error err = {0};
    for (int sim = 0; sim < 2; sim++) {
        c.simulator = (synth_simulator)sim;
        CHECK_EQ_INT(synth_generate(d, g, &c, 0, n, NULL, e[sim], s[sim], &err), GT_OK);
    }
    CHECK(memcmp(e[0], e[1], sizeof e[0]) == 0);
    CHECK(memcmp(s[0], s[1], bytes) != 0);
    free(s[0]);
    free(s[1]);
}

/* Every geometry, and the ends of the energy range: finite, non-negative,
 * nothing under the threshold, a sane response. */
static void test_geometries_and_extremes(void)
{
    const char *files[] = {"binning_dataset_1_photons.xml", "binning_dataset_1_pions.xml",
                           "binning_dataset_2.xml", "binning_dataset_3.xml"};
    const double es[] = {10, 100, 65536, 3e7, 1e8};
    for (int f = 0; f < 4; f++) {
        geo_geometry g;
        synth_detector d;
        gt_error err = {0};
        if (dt_load_geometry(&g, files[f]) || synth_detector_init(&d, &g, &err) != GT_OK) {
            CHECK_MSG(0, "%s: %s", files[f], err.message);
            continue;
        }
        synth_particle p = synth_particle_for_geometry(&g);
        for (int k = 0; k < 5; k++) {
            int n = f == 3 ? 3 : 12;
            float *s = simulate(&d, &g, SYNTH_SIM_CASCADE, p, es[k], n, 11);
            int bad = 0, under = 0;
            double tot = 0;
            for (size_t i = 0; i < (size_t)n * g.n_voxels; i++) {
                if (!(s[i] >= 0) || !isfinite(s[i]))
                    bad++;
                under += s[i] > 0 && s[i] < d.threshold_mev;
                tot += s[i];
            }
            CHECK_MSG(bad == 0 && under == 0, "%s, %g MeV: %d bad, %d under", files[f], es[k],
                      bad, under);
            double resp = tot / n / es[k];
            CHECK_MSG(resp < 2.0, "%s, %g MeV: response %g", files[f], es[k], resp);
            if (es[k] > 1e3)
                CHECK_MSG(resp > (p == SYNTH_PARTICLE_PION ? 0.3 : 0.8),
                          "%s, %g MeV: response %g", files[f], es[k], resp);
            free(s);
        }
        printf("%s: lambda %.1f mm (%.2f X0)\n", files[f], d.lambda_mm,
               d.lambda_mm / d.stack.x0_mm);
        synth_detector_free(&d);
        geo_free(&g);
    }
}

/* Names and refusals. */
static void test_names(const geo_geometry *g, const synth_detector *d)
{
    synth_simulator s;
    gt_error err = {0};
    CHECK_EQ_INT(synth_parse_simulator("cascade", &s, &err), GT_OK);
    CHECK_EQ_INT(s, SYNTH_SIM_CASCADE);
    CHECK_EQ_INT(synth_parse_simulator("gflash", &s, &err), GT_OK);
    CHECK_EQ_INT(s, SYNTH_SIM_GFLASH);
    CHECK_EQ_INT(synth_parse_simulator("geant4", &s, &err), GT_EINVAL);
    CHECK(strstr(err.message, "geant4") && strstr(err.message, "cascade"));
    CHECK_EQ_INT(synth_parse_simulator("", &s, &err), GT_EINVAL);
    CHECK(!strcmp(synth_simulator_name(SYNTH_SIM_CASCADE), "cascade"));
    CHECK(!strcmp(synth_simulator_name((synth_simulator)9), "?"));
    synth_config c;
    synth_config_default(&c);
    CHECK_EQ_INT(c.simulator, SYNTH_SIM_GFLASH);
    c.simulator = (synth_simulator)5;
    CHECK_EQ_INT(synth_config_check(&c, &err), GT_EINVAL);
    c.simulator = SYNTH_SIM_CASCADE;
    c.particle = SYNTH_PARTICLE_PION;
    CHECK_EQ_INT(synth_config_check(&c, &err), GT_OK);
    /* a detector without an interaction length cannot make cascades */
    synth_detector no_lambda = *d;
    no_lambda.lambda_mm = 0;
    float s1[6480];
    CHECK_EQ_INT(synth_generate(&no_lambda, g, &c, 0, 1, NULL, NULL, s1, &err), GT_EINVAL);
    c.simulator = SYNTH_SIM_GFLASH;
    CHECK_EQ_INT(synth_generate(&no_lambda, g, &c, 0, 1, NULL, NULL, s1, &err), GT_OK);
}

int main(void)
{
    geo_geometry g;
    synth_detector d;
    gt_error err = {0};
    if (dt_load_geometry(&g, "binning_dataset_2.xml") || synth_detector_init(&d, &g, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    printf("W/Si: lambda %.1f mm = %.2f X0, %.3f lambda per layer; track crossing %.3f MeV\n",
           d.lambda_mm, d.lambda_mm / d.stack.x0_mm, d.l_hi[0] - d.l_lo[0],
           d.stack.ec_mev * (d.t_hi[0] - d.t_lo[0]));
    test_names(&g, &d);
    test_streams(&g, &d);
    test_physics(&g, &d);
    test_told_apart(&g, &d);
    test_early_quanta(&g, &d);
    test_pions();
    test_geometries_and_extremes();
    synth_detector_free(&d);
    geo_free(&g);
    return check_finish();
}
