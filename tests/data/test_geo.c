/* geo: the four CaloChallenge binning files and malformed XML. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data_test_util.h"
#include "geo.h"
#include "rng.h"

/* Loads configs/geometry/<file> as a check: nonzero (reported) on failure. */
static int load(geo_geometry *g, const char *file)
{
    gt_error err = {0};
    int rc = geo_load_file(g, dt_geometry_path(file), &err);
    CHECK_MSG(rc == GT_OK, "%s: %s", file, err.message);
    return rc;
}

static void test_dataset2(void)
{
    geo_geometry g;
    if (load(&g, "binning_dataset_2.xml"))
        return;
    CHECK_EQ_INT(g.n_voxels, 6480);
    CHECK_EQ_INT(g.n_layers, 45);
    CHECK_EQ_INT(g.n_active, 45);
    CHECK_EQ_INT(g.pid, 11);
    CHECK(!strcmp(g.particle, "electron"));
    CHECK(g.regular);
    CHECK_EQ_INT(g.layers[0].n_r, 9);
    CHECK_EQ_INT(g.layers[0].n_alpha, 16);
    CHECK_EQ_INT(g.layers[44].offset, 44 * 144);
    CHECK(g.layers[3].uniform_r);
    CHECK_CLOSE(g.layers[7].r_edges[9], 41.85, 1e-9, 0);
    /* voxel 0: first angular bin centred at -pi + pi/16, first radial bin 2.325 mm */
    double a0 = -M_PI + M_PI / 16;
    CHECK_CLOSE(g.r[0], 2.325, 1e-5, 0);
    CHECK_CLOSE(g.eta[0], 2.325 * cos(a0), 1e-5, 0);
    CHECK_CLOSE(g.phi[0], 2.325 * sin(a0), 1e-5, 0);
    /* radial fastest: voxel 1 is the next radial bin, voxel 9 the next angle */
    CHECK_CLOSE(g.r[1], 6.975, 1e-5, 0);
    CHECK_CLOSE(g.r[9], 2.325, 1e-5, 0);
    CHECK_CLOSE(g.dr[5], 4.65, 1e-5, 0);
    CHECK_CLOSE(g.dalpha[5], M_PI / 8, 1e-6, 0);
    CHECK_EQ_INT(g.voxel_layer[6479], 44);
    /* lookups */
    CHECK_EQ_INT(geo_find_voxel(&g, 0, 1.0, -M_PI + 0.01), 0);
    CHECK_EQ_INT(geo_find_voxel(&g, 2, 5.0, a0 + M_PI / 8), 2 * 144 + 9 + 1);
    CHECK_EQ_INT(geo_find_voxel(&g, 0, 41.85, 0.0), -1);
    CHECK_EQ_INT(geo_find_voxel(&g, 0, -1.0, 0.0), -1);
    CHECK_EQ_INT(geo_find_voxel(&g, 45, 1.0, 0.0), -1);
    CHECK_EQ_INT(geo_find_voxel(&g, 0, 1.0, M_PI), -1);
    /* every voxel centre maps back to its own voxel */
    int bad = 0;
    for (int v = 0; v < g.n_voxels; v++) {
        double r = g.r[v], a = atan2(g.phi[v], g.eta[v]);
        if (geo_find_voxel(&g, g.voxel_layer[v], r, a) != v)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    geo_free(&g);
}

static void test_counts(const char *file, int voxels, int layers, int active, int pid,
                        const char *particle, int regular)
{
    geo_geometry g;
    if (load(&g, file))
        return;
    CHECK_MSG(g.n_voxels == voxels, "%s: %d voxels", file, g.n_voxels);
    CHECK_EQ_INT(g.n_layers, layers);
    CHECK_EQ_INT(g.n_active, active);
    CHECK_EQ_INT(g.pid, pid);
    CHECK(!strcmp(g.particle, particle));
    CHECK_EQ_INT(g.regular, regular);
    int sum = 0;
    for (int i = 0; i < g.n_layers; i++) {
        CHECK_EQ_INT(g.layers[i].offset, sum);
        sum += g.layers[i].n_voxels;
    }
    CHECK_EQ_INT(sum, voxels);
    geo_free(&g);
}

static void test_dataset1_details(void)
{
    geo_geometry g;
    if (load(&g, "binning_dataset_1_photons.xml"))
        return;
    /* active layers 0, 1, 2, 3, 12 with 8, 160, 190, 5, 5 voxels */
    int ids[5] = {0, 1, 2, 3, 12}, nv[5] = {8, 160, 190, 5, 5};
    for (int k = 0; k < 5; k++) {
        CHECK_EQ_INT(g.layers[g.active[k]].id, ids[k]);
        CHECK_EQ_INT(g.layers[g.active[k]].n_voxels, nv[k]);
    }
    CHECK_EQ_INT(g.layers[4].n_voxels, 0);
    CHECK(g.layers[4].r_edges == NULL);
    CHECK(!g.layers[1].uniform_r);
    /* a one-angle layer has its centre at alpha = 0: eta = r, phi = 0 */
    CHECK_CLOSE(g.eta[0], 2.5, 1e-6, 0);
    CHECK_CLOSE(g.phi[0], 0.0, 1e-6, 0);
    /* non-uniform radial lookup: layer 1 edges 0,2,4,...,15,20 */
    CHECK_EQ_INT(geo_find_r_bin(&g.layers[1], 14.9), 6);
    CHECK_EQ_INT(geo_find_r_bin(&g.layers[1], 15.0), 7);
    CHECK_EQ_INT(geo_find_r_bin(&g.layers[1], 199.9), 15);
    CHECK_EQ_INT(geo_find_r_bin(&g.layers[1], 200.0), -1);
    geo_free(&g);
}

static void expect_bad(const char *xml, int code, const char *needle)
{
    geo_geometry g;
    gt_error err = {0};
    int rc = geo_load_memory(&g, xml, (int)strlen(xml), &err);
    CHECK_MSG(rc == code, "expected %d got %d (%s) for: %s", code, rc, err.message, xml);
    CHECK_MSG(strstr(err.message, needle) != NULL, "message \"%s\" lacks \"%s\"", err.message,
              needle);
    CHECK(g.layers == NULL && g.eta == NULL);
    geo_free(&g);
}

static void test_bad(void)
{
    expect_bad("<Bins><Bin pid=\"11\" name=\"e\">", GT_EFORMAT, "does not parse");
    expect_bad("<Foo/>", GT_EFORMAT, "<Bins>");
    expect_bad("<Bins></Bins>", GT_EFORMAT, "no <Bin>");
    expect_bad("<Bins><Bin name=\"e\"><Layer id=\"0\" r_edges=\"0,1\" n_bin_alpha=\"1\"/></Bin>"
               "</Bins>", GT_EFORMAT, "pid");
    expect_bad("<Bins><Bin pid=\"11\" name=\"e\"></Bin></Bins>", GT_EFORMAT, "no <Layer>");
    expect_bad("<Bins><Bin pid=\"11\" name=\"e\"><Layer id=\"0\" r_edges=\"0,2,1\" "
               "n_bin_alpha=\"1\"/></Bin></Bins>", GT_EFORMAT, "increasing");
    expect_bad("<Bins><Bin pid=\"11\" name=\"e\"><Layer id=\"0\" r_edges=\"0,x\" "
               "n_bin_alpha=\"1\"/></Bin></Bins>", GT_EFORMAT, "bad r_edges");
    expect_bad("<Bins><Bin pid=\"11\" name=\"e\"><Layer id=\"0\" r_edges=\"0,1\" "
               "n_bin_alpha=\"0\"/></Bin></Bins>", GT_EFORMAT, "n_bin_alpha");
    expect_bad("<Bins><Bin pid=\"11\" name=\"e\"><Layer id=\"1\" r_edges=\"0,1\" "
               "n_bin_alpha=\"1\"/></Bin></Bins>", GT_EFORMAT, "id");
    expect_bad("<Bins><Bin pid=\"11\" name=\"e\"><Layer id=\"0\" n_bin_alpha=\"1\"/></Bin>"
               "</Bins>", GT_EFORMAT, "r_edges");
    expect_bad("<Bins><Bin pid=\"11\" name=\"e\"><Layer id=\"0\" r_edges=\"0\" "
               "n_bin_alpha=\"1\"/></Bin></Bins>", GT_EFORMAT, "no voxels");
    expect_bad("<Bins><Bin pid=\"11\" name=\"e\"><Layer id=\"0\" r_edges=\"1,2\" "
               "n_bin_alpha=\"1\"/></Bin></Bins>", GT_EFORMAT, "start at 0");
    expect_bad("<Bins><Bin pid=\"11\" name=\"e\"><Layer id=\"0\" r_edges=\"0,inf\" "
               "n_bin_alpha=\"1\"/></Bin></Bins>", GT_EFORMAT, "bad r_edges");
    expect_bad("<Bins><Bin pid=\"11\" name=\"e\"><Layer id=\"0\" r_edges=\"600\" "
               "n_bin_alpha=\"1\"/><Layer id=\"1\" r_edges=\"0,1\" n_bin_alpha=\"1\"/>"
               "</Bin></Bins>", GT_EFORMAT, "start at 0");
    expect_bad("", GT_EINVAL, "empty");

    /* the first layer empty and another empty layer: the regularity check
     * compared their radial edges, which an empty layer does not keep (a
     * null read, found by fuzz_geo) */
    {
        const char *xml = "<Bins><Bin pid=\"11\" name=\"e\">"
                          "<Layer id=\"0\" r_edges=\"0\" n_bin_alpha=\"1\"/>"
                          "<Layer id=\"1\" r_edges=\"0,1,2\" n_bin_alpha=\"4\"/>"
                          "<Layer id=\"2\" r_edges=\"0\" n_bin_alpha=\"1\"/></Bin></Bins>";
        geo_geometry eg;
        gt_error eerr = {0};
        CHECK_EQ_INT(geo_load_memory(&eg, xml, (int)strlen(xml), &eerr), GT_OK);
        CHECK_EQ_INT(eg.n_voxels, 8);
        CHECK_EQ_INT(eg.n_active, 1);
        CHECK_EQ_INT(eg.regular, 0);
        geo_free(&eg);
    }

    /* 257 radial by 4096 angular bins, 4096 voxels over GEO_MAX_VOXELS:
     * refused before any per-voxel array is made (the limit was 10^8, and
     * 93 KB of XML took 2.4 GB and over 30 s in a sanitizer build) */
    char edges[8 * 1024];
    size_t used = (size_t)snprintf(edges, sizeof edges, "0");
    for (int i = 1; i <= 257 && used < sizeof edges; i++)
        used += (size_t)snprintf(edges + used, sizeof edges - used, ",%d", i);
    static char big[20 * 1024];
    snprintf(big, sizeof big,
             "<Bins><Bin pid=\"11\" name=\"e\"><Layer id=\"0\" r_edges=\"%s\" "
             "n_bin_alpha=\"4096\"/></Bin></Bins>", edges);
    expect_bad(big, GT_EFORMAT, "too many voxels");
    /* 256 radial bins: exactly at the limit, accepted */
    snprintf(big, sizeof big,
             "<Bins><Bin pid=\"11\" name=\"e\"><Layer id=\"0\" r_edges=\"%s\" "
             "n_bin_alpha=\"4096\"/></Bin></Bins>", edges);
    char *cut = strstr(big, ",257\"");
    CHECK(cut != NULL);
    if (cut)
        memmove(cut, cut + 4, strlen(cut + 4) + 1);
    geo_geometry at;
    gt_error aerr = {0};
    CHECK_EQ_INT(geo_load_memory(&at, big, (int)strlen(big), &aerr), GT_OK);
    CHECK_EQ_INT(at.n_voxels, GEO_MAX_VOXELS);
    geo_free(&at);

    geo_geometry g;
    gt_error err = {0};
    CHECK_EQ_INT(geo_load_file(&g, "no/such/file.xml", &err), GT_EIO);
    CHECK(strstr(err.message, "no/such/file.xml") != NULL);
    geo_free(&g);
}

/* Mutated binning files (bytes flipped, deleted, duplicated, truncated)
 * either parse into a consistent geometry or fail with a message; never a
 * crash, leak or sanitizer report. */
static void test_fuzz(void)
{
    FILE *f = fopen(dt_geometry_path("binning_dataset_1_pions.xml"), "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    static char orig[8192], buf[8192 + 64];
    int n = (int)fread(orig, 1, sizeof orig, f);
    fclose(f);
    const char tokens[] = "<>/=\",0-9.e -\n\"";
    rng_state r = rng_init(2024, 0);
    int ok = 0, failed = 0, unexplained = 0, inconsistent = 0;
    for (int it = 0; it < 3000; it++) {
        int m = n;
        memcpy(buf, orig, n);
        int edits = 1 + (int)rng_next_below(&r, 4);
        for (int e = 0; e < edits && m > 1; e++) {
            int at = (int)rng_next_below(&r, (uint64_t)m);
            switch (rng_next_below(&r, 4)) {
            case 0: /* replace with a syntax character */
                buf[at] = tokens[rng_next_below(&r, sizeof tokens - 1)];
                break;
            case 1: /* delete a run */
            {
                int k = 1 + (int)rng_next_below(&r, 8);
                if (at + k > m)
                    k = m - at;
                memmove(buf + at, buf + at + k, m - at - k);
                m -= k;
                break;
            }
            case 2: /* duplicate a byte */
                if (m < (int)sizeof buf - 1) {
                    memmove(buf + at + 1, buf + at, m - at);
                    m++;
                }
                break;
            default: /* truncate */
                m = at + 1;
            }
        }
        geo_geometry g;
        gt_error err = {0};
        int rc = geo_load_memory(&g, buf, m, &err);
        if (rc == GT_OK) {
            ok++;
            int sum = 0;
            for (int i = 0; i < g.n_layers; i++)
                sum += g.layers[i].n_voxels;
            if (sum != g.n_voxels || g.n_voxels <= 0)
                inconsistent++;
        } else {
            failed++;
            if (!err.message[0])
                unexplained++;
        }
        geo_free(&g);
    }
    printf("fuzz: %d parsed, %d refused\n", ok, failed);
    CHECK_EQ_INT(unexplained, 0);
    CHECK_EQ_INT(inconsistent, 0);
    CHECK(failed > 100);
}

/* The turn about the beam axis: geo_rotation_count is the gcd of the
 * angular bin counts, and geo_turn_shower moves each voxel's energy to the
 * voxel whose centre is the old centre turned by 2 pi k / G (then mirrored
 * phi -> -phi), so it is a permutation, k = G is the identity, turns add up
 * and a mirror twice is the identity. */
static void test_turn(const char *file, int rotations)
{
    geo_geometry g;
    if (load(&g, file))
        return;
    CHECK_MSG(geo_rotation_count(&g) == rotations, "%s: %d rotations, want %d", file,
              geo_rotation_count(&g), rotations);
    const int V = g.n_voxels, G = rotations;
    float *one = calloc((size_t)V, sizeof(float)), *out = calloc((size_t)V, sizeof(float));
    float *a = calloc((size_t)V, sizeof(float)), *b2 = calloc((size_t)V, sizeof(float));
    int bad = 0;
    rng_state r = rng_init(5, 0);
    for (int v = 0; v < V; v += (V > 2000 ? 7 : 1)) {
        for (int t = 0; t < 4; t++) {
            int k = (int)(rng_next_below(&r, (uint64_t)G) + (t & 1 ? G : 0)), m = t >> 1;
            memset(one, 0, (size_t)V * sizeof(float));
            one[v] = 1.0f;
            geo_turn_shower(&g, one, out, k, m);
            int w = -1, n = 0;
            for (int u = 0; u < V; u++)
                if (out[u] != 0.0f) {
                    w = u;
                    n++;
                }
            if (n != 1 || out[w] != 1.0f || g.voxel_layer[w] != g.voxel_layer[v]) {
                bad++;
                continue;
            }
            /* the centre turned: (x, y) by theta = 2 pi k / G, then y -> -y
             * (a layer with one angular bin is a full ring: it stays) */
            if (g.layers[g.voxel_layer[v]].n_alpha == 1) {
                bad += w != v;
                continue;
            }
            double th = 2.0 * M_PI * (double)k / G;
            double x = g.eta[v] * cos(th) - g.phi[v] * sin(th);
            double y = g.eta[v] * sin(th) + g.phi[v] * cos(th);
            if (m)
                y = -y;
            bad += fabs(x - g.eta[w]) > 1e-3 * (1 + fabs(x)) ||
                   fabs(y - g.phi[w]) > 1e-3 * (1 + fabs(y));
        }
    }
    CHECK_MSG(bad == 0, "%s: %d voxels turned wrong", file, bad);
    for (int v = 0; v < V; v++)
        a[v] = (float)v;
    geo_turn_shower(&g, a, out, G, 0);
    CHECK(memcmp(a, out, (size_t)V * sizeof(float)) == 0);
    geo_turn_shower(&g, a, out, 0, 1);
    geo_turn_shower(&g, out, b2, 0, 1);
    CHECK(memcmp(a, b2, (size_t)V * sizeof(float)) == 0);
    geo_turn_shower(&g, a, out, 1, 0);
    geo_turn_shower(&g, out, b2, G - 1 + 2 * G, 0);
    CHECK(memcmp(a, b2, (size_t)V * sizeof(float)) == 0);
    free(one);
    free(out);
    free(a);
    free(b2);
    geo_free(&g);
}

int main(void)
{
    test_dataset2();
    test_counts("binning_dataset_2.xml", 6480, 45, 45, 11, "electron", 1);
    test_counts("binning_dataset_3.xml", 40500, 45, 45, 11, "electron", 1);
    test_counts("binning_dataset_1_photons.xml", 368, 24, 5, 22, "photon", 0);
    test_counts("binning_dataset_1_pions.xml", 533, 24, 7, 211, "pion", 0);
    test_dataset1_details();
    test_turn("binning_dataset_2.xml", 16);
    test_turn("binning_dataset_3.xml", 50);
    test_turn("binning_dataset_1_photons.xml", 10);
    test_turn("binning_dataset_1_pions.xml", 10);
    test_bad();
    test_fuzz();
    return check_finish();
}
