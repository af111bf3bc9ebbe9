/* prep: every transform against its inverse, conventions for empty layers,
 * standardisation statistics and their serialisation. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data_test_util.h"
#include "geo.h"
#include "prep.h"
#include "synth.h"

static void test_logit(void)
{
    for (int i = 0; i <= 1000; i++) {
        double p = i / 1000.0;
        CHECK_CLOSE(prep_logit_unmap(prep_logit_map(p)), p, 1e-12, 0);
    }
    CHECK_CLOSE(prep_logit_map(0.0), log(1e-6 / (1 - 1e-6)), 1e-12, 0);
    CHECK_CLOSE(prep_logit_map(1.0), -log(1e-6 / (1 - 1e-6)), 1e-9, 0);
    CHECK_CLOSE(prep_logit_map(0.5), 0.0, 1e-15, 0);
    /* out-of-range inputs are clamped, not NaN */
    CHECK(prep_logit_map(-0.5) == prep_logit_map(0.0));
    CHECK(prep_logit_map(1.5) == prep_logit_map(1.0));
    CHECK(prep_logit_unmap(-100) == 0.0 && prep_logit_unmap(100) == 1.0);
    CHECK(prep_logit_map(NAN) == prep_logit_map(0.0));
    /* another alpha: its own floor, still an exact inverse */
    CHECK_CLOSE(prep_logit_map_alpha(0.0, 1e-10), log(1e-10 / (1 - 1e-10)), 1e-9, 0);
    for (double p = 1e-9; p < 1; p *= 7)
        CHECK_CLOSE(prep_logit_unmap_alpha(prep_logit_map_alpha(p, 1e-10), 1e-10), p, 1e-12,
                    1e-9);
}

/* prep_keep_top against its definition: entry a goes when `keep` entries
 * rank before it (a larger value, or the same at a lower index), every
 * comparison with a NaN false.  Values drawn from a few levels, so ties are
 * common, and NaNs, zeros and negative zeros among them. */
static void keep_top_by_rank(double *v, int n, int keep)
{
    unsigned char drop[GEO_MAX_ALPHA_BINS];
    for (int a = 0; a < n; a++) {
        int above = 0;
        for (int b = 0; b < n; b++)
            above += v[b] > v[a] || (v[b] == v[a] && b < a);
        drop[a] = above >= keep;
    }
    for (int a = 0; a < n; a++)
        if (drop[a])
            v[a] = 0.0;
}

static void test_keep_top(void)
{
    uint64_t r = 88172645463325252ull;
    int cases = 0;
    for (int it = 0; it < 20000; it++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        /* rings up to 64 bins (sorted by insertion), now and then a wide one */
        const int n = 1 + (int)(r % (it % 500 == 0 ? 3000 : 64));
        const int levels = 1 + (int)((r >> 8) % 12);
        const int keep = (int)((r >> 16) % (uint64_t)(n + 2));
        double v[GEO_MAX_ALPHA_BINS], want[GEO_MAX_ALPHA_BINS];
        for (int a = 0; a < n; a++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            const int k = (int)(r % (uint64_t)(levels + 3));
            v[a] = k == levels ? NAN : k == levels + 1 ? -0.0 : k == levels + 2 ? 0.0
                                                                  : 1.5 * (double)k - 3.0;
            want[a] = v[a];
        }
        keep_top_by_rank(want, n, keep);
        prep_keep_top(v, n, keep);
        int same = 1;
        for (int a = 0; a < n; a++) {
            same &= isnan(want[a]) ? isnan(v[a]) : memcmp(&want[a], &v[a], sizeof v[a]) == 0;
        }
        CHECK_MSG(same, "keep_top n=%d keep=%d levels=%d: not the ranked entries", n, keep,
                  levels);
        cases++;
    }
    /* the examples written out: ties keep the lower index, a NaN stays */
    double a[6] = {1, 3, 3, 2, 3, 0};
    prep_keep_top(a, 6, 2);
    CHECK(a[0] == 0 && a[1] == 3 && a[2] == 3 && a[3] == 0 && a[4] == 0 && a[5] == 0);
    double b[4] = {NAN, 1, 2, 3};
    prep_keep_top(b, 4, 1);
    CHECK(isnan(b[0]) && b[1] == 0 && b[2] == 0 && b[3] == 3);
    prep_keep_top(b, 4, 0);
    CHECK(b[0] == 0 && b[3] == 0);
    CHECK(cases == 20000);
}

static void test_stick(void)
{
    double e[6] = {3.0, 0.0, 5.0, 2.0, 0.0, 0.0}, u[5], back[6];
    prep_stick_break(e, 6, u);
    CHECK_CLOSE(u[0], 0.3, 1e-15, 0);
    CHECK_CLOSE(u[1], 0.0, 1e-15, 0);
    CHECK_CLOSE(u[2], 5.0 / 7.0, 1e-15, 0);
    CHECK_CLOSE(u[3], 1.0, 1e-15, 0);
    CHECK_CLOSE(u[4], 0.0, 1e-15, 0); /* nothing left: defined as 0 */
    prep_stick_join(u, 6, 10.0, back);
    for (int i = 0; i < 6; i++)
        CHECK_CLOSE(back[i], e[i], 1e-12, 0);
    /* any u in [0,1]^(L-1) conserves the deposited energy */
    double u2[5] = {0.9, 0.1, 0.5, 0.33, 0.7}, s = 0;
    prep_stick_join(u2, 6, 42.0, back);
    for (int i = 0; i < 6; i++) {
        CHECK(back[i] >= 0);
        s += back[i];
    }
    CHECK_CLOSE(s, 42.0, 1e-12, 0);
}

/* Sums layer k of a decoded shower and counts its hits. */
static double layer_sum(const prep_layout *p, const float *e, int k, int *hits)
{
    const geo_layer *l = &p->geo->layers[p->geo->active[k]];
    double s = 0;
    *hits = 0;
    for (int v = 0; v < l->n_voxels; v++) {
        s += e[l->offset + v];
        *hits += e[l->offset + v] > 0;
    }
    return s;
}

/* base with dequantized rings and voxel shares' alpha 1e-10: the layout
 * the ring cases decode with. */
static prep_layout ring_layout(const prep_layout *base)
{
    prep_layout p = *base;
    p.dequantize = 1;
    p.voxel_alpha = 1e-10;
    prep_layout_set_rings(&p, 1);
    return p;
}

/* The first active layer with two rings and at least min_alpha angles.
 * When there is none, or no threshold thr, a failed check says there is no
 * layer of file to test what on, and -1. */
static int two_ring_layer(const prep_layout *p, int min_alpha, double thr, const char *file,
                          const char *what)
{
    const geo_geometry *g = p->geo;
    for (int i = 0; i < g->n_active && thr > 0; i++)
        if (g->layers[g->active[i]].n_r >= 2 && g->layers[g->active[i]].n_alpha >= min_alpha)
            return i;
    CHECK_MSG(0, "%s: no layer to test %s on", file, what);
    return -1;
}

/* A stage-2 vector x with all the energy in layer k (u = 0 before it, 1 at
 * it) and every voxel share near 0; returns layer k's block of x. */
static float *layer_only(const prep_layout *p, int k, float *x)
{
    for (int i = 0; i < p->n_u; i++)
        x[i] = (float)prep_logit_map(i < k ? 0.0 : 1.0);
    for (int i = p->n_u; i < p->dim; i++)
        x[i] = (float)prep_logit_map_alpha(1e-12, 1e-10);
    return x + p->n_u + p->block_off[k];
}

/* The ring counts' layer: ring 0 holds 60 % over voxels of shares 0.4,
 * 0.3, 0.2, 0.1 (angles 0 to 3), ring 1 the other 40 % on angle 2, the
 * outer rings nothing. */
static void ring_shares(float *xb, int nr)
{
    const double v0[4] = {0.4, 0.3, 0.2, 0.1};
    for (int j = 0; j < nr; j++)
        xb[j] = (float)prep_logit_map_alpha(j == 0 ? 0.6 : j == 1 ? 0.4 : 1e-12, 1e-10);
    for (int a = 0; a < 4; a++)
        xb[2 * nr + a * nr + 0] = (float)prep_logit_map_alpha(v0[a], 1e-10);
    xb[2 * nr + 2 * nr + 1] = (float)prep_logit_map_alpha(1.0, 1e-10); /* ring 1, angle 2 */
}

/* keep_largest (dequantized rings): a stage-2 vector that spreads a layer's
 * energy so thinly that no voxel reaches the threshold reads out an empty
 * layer without it, and exactly one hit holding the layer's energy with it:
 * the largest voxel of the ring that reaches the threshold, or of the whole
 * layer when no ring does. */
static void keep_largest_cases(const char *file, const prep_layout *base, double thr)
{
    prep_layout p = ring_layout(base);
    const int k = two_ring_layer(&p, 2, thr, file, "keep_largest");
    if (k < 0)
        return;
    const geo_layer *l = &p.geo->layers[p.geo->active[k]];
    const int nr = l->n_r, na = l->n_alpha;
    float *x = malloc((size_t)p.dim * sizeof *x), *e = malloc((size_t)p.n_voxels * sizeof *e);
    /* all the energy in layer k: u = 0 before it, 1 at it */
    const double el = 10.0 * thr * na;
    float *xb = layer_only(&p, k, x);
    for (int c = 0; c < 2; c++) {
        /* case 0: ring 1 holds 1.5 thr (it reaches the threshold) spread
         * evenly but for angle 1 (1.2 / na); case 1: every ring holds
         * 0.5 thr (none does), ring 1 a little more, spread evenly */
        for (int j = 0; j < nr; j++) {
            double share = c == 0 ? (j == 1 ? 1.5 : 1e-9) : (j == 1 ? 0.6 : 0.5);
            xb[j] = (float)prep_logit_map_alpha(share * thr / el, 1e-10);
            for (int a = 0; a < na; a++)
                xb[nr + a * nr + j] =
                    (float)prep_logit_map_alpha((c == 0 && a == 1 ? 1.2 : 1.0) / na, 1e-10);
        }
        const int want = c == 0 ? 1 * nr + 1 : 0 * nr + 1;   /* voxel a * nr + j */
        int hits;
        p.keep_largest = 0;
        prep_decode_shower(&p, x, (float)el, e);
        CHECK_MSG(layer_sum(&p, e, k, &hits) == 0 && hits == 0,
                  "%s case %d: without keep_largest the layer reads empty (%d hits)", file, c,
                  hits);
        p.keep_largest = 1;
        prep_decode_shower(&p, x, (float)el, e);
        double sum = layer_sum(&p, e, k, &hits);
        CHECK_MSG(hits == 1 && fabs(e[l->offset + want] - el) <= 1e-6 * el &&
                      fabs(sum - el) <= 1e-6 * el,
                  "%s case %d: keep_largest gives %d hits, voxel %d holds %g of %g", file, c,
                  hits, want, e[l->offset + want], el);
        /* a layer under the threshold stays empty */
        prep_decode_shower(&p, x, (float)(0.5 * thr), e);
        CHECK_MSG(layer_sum(&p, e, k, &hits) == 0 && hits == 0,
                  "%s case %d: a layer under the threshold keeps %d hits", file, c, hits);
    }
    free(x);
    free(e);
}

/* Ring hit counts (dequantized rings): ring 0 holds 60 % of the layer over
 * voxels of shares 0.4, 0.3, 0.2, 0.1 (the rest noise far under the
 * threshold), ring 1 the other 40 % on one voxel.  Decoding keeps the
 * floor(count) largest voxels of a ring: count 2.7 keeps two of ring 0,
 * carrying its 60 % as 4:3; count 0.4 empties ring 0 and ring 1 carries the
 * layer, with keep_largest too (it applies to rings that keep voxels). */
static void counts_cases(const char *file, const prep_layout *base, double thr)
{
    prep_layout p = ring_layout(base);
    prep_layout_set_counts(&p, 1);
    const int k = two_ring_layer(&p, 4, thr, file, "the ring counts");
    if (k < 0)
        return;
    const geo_layer *l = &p.geo->layers[p.geo->active[k]];
    const int nr = l->n_r;
    CHECK_EQ_INT(p.block_width[k], 2 * nr + l->n_voxels);
    float *x = malloc((size_t)p.dim * sizeof *x), *e = malloc((size_t)p.n_voxels * sizeof *e);
    const double el = 1000.0 * thr;
    float *xb = layer_only(&p, k, x);
    ring_shares(xb, nr);
    for (int j = 0; j < nr; j++)
        xb[nr + j] = j < 2 ? 1.5f : 0.5f;
    for (int c = 0; c < 3; c++) {
        xb[nr] = c == 0 ? 2.7f : 0.4f;
        p.keep_largest = c == 2;
        prep_decode_shower(&p, x, (float)el, e);
        int hits;
        double sum = layer_sum(&p, e, k, &hits);
        const float *r0a = e + l->offset, *r1 = e + l->offset + 2 * nr + 1;
        double want0 = c == 0 ? 0.6 * el * 4 / 7 : 0;
        double want1 = c == 0 ? 0.4 * el : el;
        CHECK_MSG(fabs(sum - el) <= 1e-5 * el && hits == (c == 0 ? 3 : 1) &&
                      fabs(r0a[0] - want0) <= 1e-5 * el && fabs(*r1 - want1) <= 1e-5 * el &&
                      (c != 0 || fabs(r0a[nr] - 0.6 * el * 3 / 7) <= 1e-5 * el),
                  "%s counts case %d: %d hits, ring 0 angle 0 holds %g (want %g), ring 1 %g "
                  "(want %g), layer %g of %g", file, c, hits, r0a[0], want0, *r1, want1, sum, el);
    }
    free(x);
    free(e);
}

/* The same layer with the counts stick-broken: [N + u ; s_{nr-1} .. s_1].
 * Case 0: N = 3.5, the outer rings' shares 0.1 (no hit of 0..3 left),
 * ring 1's 0.3 (floor(0.3 * 4) = 1 of the 3 left), so ring 0 takes 2: the
 * shower of the counts' case 0.  Case 1: N = 2.5 and every share NaN (the
 * fewest hits each ring may take): ring 0 takes both, ring 1 is empty and
 * ring 0 carries the layer.  Case 2: N far over the layer's voxels and
 * every share 7: each ring full, clamped, so ring 0 keeps its four voxels
 * with energy and the values never ask a ring for more than it holds. */
static void count_stick_cases(const char *file, const prep_layout *base, double thr)
{
    prep_layout p = ring_layout(base);
    prep_layout_set_count_stick(&p, 1); /* no counts: stays off */
    CHECK_EQ_INT(p.count_stick, 0);
    prep_layout_set_counts(&p, 1);
    const int dim = p.dim;
    prep_layout_set_count_stick(&p, 1);
    CHECK_EQ_INT(p.count_stick, 1);
    CHECK_EQ_INT(p.dim, dim); /* the same width */
    const int k = two_ring_layer(&p, 4, thr, file, "the stick-broken counts");
    if (k < 0)
        return;
    const geo_layer *l = &p.geo->layers[p.geo->active[k]];
    const int nr = l->n_r;
    float *x = malloc((size_t)p.dim * sizeof *x), *e = malloc((size_t)p.n_voxels * sizeof *e);
    const double el = 1000.0 * thr;
    float *xb = layer_only(&p, k, x);
    ring_shares(xb, nr);
    for (int c = 0; c < 3; c++) {
        xb[nr] = c == 0 ? 3.5f : c == 1 ? 2.5f : 1e6f;
        for (int i = 1; i < nr; i++) /* s of ring nr - i */
            xb[nr + i] = c == 1 ? NAN : c == 2 ? 7.0f : nr - i == 1 ? 0.3f : 0.1f;
        prep_decode_shower(&p, x, (float)el, e);
        int hits, r0 = 0, r1 = 0;
        double sum = layer_sum(&p, e, k, &hits);
        for (int a = 0; a < l->n_alpha; a++) {
            r0 += e[l->offset + a * nr] > 0;
            r1 += e[l->offset + a * nr + 1] > 0;
        }
        const float *r0a = e + l->offset, *r1v = e + l->offset + 2 * nr + 1;
        const int want_r0 = c == 2 ? 4 : 2, want_r1 = c == 1 ? 0 : 1;
        double want0 = c == 0 ? 0.6 * el * 4 / 7 : c == 1 ? el * 4 / 7 : 0.6 * el * 0.4;
        double want1 = c == 1 ? 0 : 0.4 * el;
        CHECK_MSG(fabs(sum - el) <= 1e-5 * el && r0 == want_r0 && r1 == want_r1 &&
                      hits == want_r0 + want_r1 && fabs(r0a[0] - want0) <= 1e-5 * el &&
                      fabs(*r1v - want1) <= 1e-5 * el,
                  "%s count stick case %d: rings 0 and 1 keep %d and %d hits (want %d and %d), "
                  "ring 0 angle 0 holds %g (want %g), ring 1 %g (want %g), layer %g of %g",
                  file, c, r0, r1, want_r0, want_r1, r0a[0], want0, *r1v, want1, sum, el);
    }
    free(x);
    free(e);
}

/* The readout cut, last of decoding (dequantized, no rings): a layer of
 * 10 thr whose voxel shares add up to more than 1 (0.95 and 0.105, the rest
 * noise) passes both voxels at the threshold, then scales them down to the
 * layer's energy, which takes the smaller (1.05 thr) under it: it is cut
 * and its energy dropped (the layer keeps 9.5 / 10.55 of its energy, not
 * all of it).  A readout threshold over the representation's cuts more and
 * changes nothing else; 0 cuts nothing, and the voxel under the threshold
 * is what the scaling left. */
static void readout_cases(const char *file, const prep_layout *base, double thr)
{
    prep_layout p = *base;
    p.dequantize = 1;
    p.voxel_alpha = 1e-10;
    prep_layout_set_rings(&p, 0);
    const geo_geometry *g = p.geo;
    int k = -1;
    for (int i = 0; i < g->n_active && k < 0 && thr > 0; i++)
        if (g->layers[g->active[i]].n_voxels >= 2)
            k = i;
    CHECK_MSG(k >= 0, "%s: no layer to test the readout cut on", file);
    if (k < 0)
        return;
    const geo_layer *l = &g->layers[g->active[k]];
    float *x = malloc((size_t)p.dim * sizeof *x), *e = malloc((size_t)p.n_voxels * sizeof *e);
    float *xb = layer_only(&p, k, x);
    xb[0] = (float)prep_logit_map_alpha(0.95, 1e-10);
    xb[1] = (float)prep_logit_map_alpha(0.105, 1e-10);
    const double el = 10.0 * thr, a = 9.5 * thr * (10.0 / 10.55);
    int hits;
    prep_decode_shower(&p, x, (float)el, e);
    double sum = layer_sum(&p, e, k, &hits);
    CHECK_MSG(hits == 1 && e[l->offset + 1] == 0.0f && fabs(e[l->offset] - a) <= 1e-6 * a &&
                  fabs(sum - a) <= 1e-6 * a,
              "%s: the readout cut: %d hits, voxels %g and %g thr, layer %g thr (want %g)", file,
              hits, e[l->offset] / thr, e[l->offset + 1] / thr, sum / thr, a / thr);
    p.readout_mev = (float)(0.5 * thr);
    prep_decode_shower(&p, x, (float)el, e);
    CHECK_MSG(layer_sum(&p, e, k, &hits) > a && hits == 2 && e[l->offset + 1] < thr &&
                  e[l->offset + 1] >= 0.5 * thr,
              "%s: a readout under the threshold: %d hits, voxel 1 at %g thr", file, hits,
              e[l->offset + 1] / thr);
    p.readout_mev = (float)(9.5 * thr); /* over voxel 0's 9.0 thr: nothing is left */
    prep_decode_shower(&p, x, (float)el, e);
    CHECK_MSG(layer_sum(&p, e, k, &hits) == 0 && hits == 0,
              "%s: a readout over every voxel leaves %d hits", file, hits);
    p.readout_mev = (float)(8.9 * thr); /* under it: voxel 0 as at the threshold */
    prep_decode_shower(&p, x, (float)el, e);
    CHECK_MSG(layer_sum(&p, e, k, &hits) > 0 && hits == 1 && fabs(e[l->offset] - a) <= 1e-6 * a,
              "%s: a readout between the voxels: %d hits, voxel 0 at %g thr", file, hits,
              e[l->offset] / thr);
    free(x);
    free(e);
}

static void roundtrip_geometry(const char *file, int n)
{
    geo_geometry g;
    synth_detector d;
    gt_error err = {0};
    if (geo_load_file(&g, dt_geometry_path(file), &err) || synth_detector_init(&d, &g, &err)) {
        CHECK_MSG(0, "%s", err.message);
        return;
    }
    prep_layout p;
    CHECK_EQ_INT(prep_layout_init(&p, &g, (float)d.threshold_mev, &err), GT_OK);
    CHECK_EQ_INT(p.dim, g.n_active - 1 + g.n_voxels);
    synth_config c;
    synth_config_default(&c);
    float *s = malloc((size_t)n * g.n_voxels * sizeof *s), *e = malloc(n * sizeof *e);
    float *x = malloc((size_t)n * p.dim * sizeof *x), *r = malloc(n * sizeof *r);
    float *back = malloc(g.n_voxels * sizeof *back);
    CHECK_EQ_INT(synth_generate(&d, &g, &c, 0, n, NULL, e, s, &err), GT_OK);
    CHECK_EQ_INT(prep_encode_batch(&p, s, e, n, x, r, &err), GT_OK);
    int bad = 0, nonfinite = 0;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const float *si = s + (size_t)i * g.n_voxels;
        double tot = 0;
        for (int v = 0; v < g.n_voxels; v++)
            tot += si[v];
        for (int k = 0; k < p.dim; k++)
            if (!isfinite(x[(size_t)i * p.dim + k]))
                nonfinite++;
        /* stage 1 */
        float e_dep = prep_decode_energy(r[i], e[i]);
        CHECK_CLOSE(e_dep, tot, 0, 1e-6);
        /* stage 2 */
        prep_decode_shower(&p, x + (size_t)i * p.dim, (float)tot, back);
        for (int v = 0; v < g.n_voxels; v++) {
            double a = si[v], b = back[v];
            double dlt = fabs(a - b) / (1e-3 * d.threshold_mev + 1e-4 * a);
            if (dlt > 1)
                bad++;
            if (dlt > worst)
                worst = dlt;
        }
    }
    CHECK_EQ_INT(nonfinite, 0);
    CHECK_MSG(bad == 0, "%s: %d voxels off (worst %.3g of tolerance)", file, bad, worst);
    printf("%s: round trip of %d showers, worst voxel error %.3g of tolerance\n", file, n, worst);

    /* A smaller voxel alpha (the default of new runs): the same round trip,
     * and empty voxels further below the occupied ones. */
    prep_layout pa = p;
    pa.voxel_alpha = 1e-10;
    float *xa = malloc((size_t)p.dim * sizeof *xa);
    int a_bad = 0, a_dec = 0;
    for (int i = 0; i < n; i++) {
        const float *si = s + (size_t)i * g.n_voxels;
        float ed = 0;
        CHECK_EQ_INT(prep_encode_shower(&pa, si, xa, &ed, &err), GT_OK);
        for (int k = 0; k < p.n_u; k++)
            a_bad += xa[k] != x[(size_t)i * p.dim + k];   /* layer energies: PREP_ALPHA */
        for (int v = 0; v < g.n_voxels; v++)
            if (si[v] == 0)   /* below the old floor (equal in an empty layer) */
                a_bad += xa[p.n_u + v] > x[(size_t)i * p.dim + p.n_u + v];
        prep_decode_shower(&pa, xa, ed, back);
        for (int v = 0; v < g.n_voxels; v++)
            a_dec += fabs(si[v] - back[v]) > 1e-3 * d.threshold_mev + 1e-4 * si[v];
    }
    CHECK_MSG(a_bad == 0, "%s voxel_alpha 1e-10: %d encoded values off", file, a_bad);
    CHECK_MSG(a_dec == 0, "%s voxel_alpha 1e-10: %d decoded voxels off", file, a_dec);
    free(xa);

    /* Dequantized: the empty voxels become noise just under the occupied
     * range (different per key, the same for the same key), the stick-
     * breaking is unchanged, and decoding gives back every voxel the
     * threshold does not cut, each layer with exactly its energy. */
    prep_layout pq = p;
    pq.dequantize = 1;
    pq.voxel_alpha = 1e-10;   /* the default pairing */
    pq.keep_largest = 1;      /* never fires on a recorded shower */
    float *xq = malloc((size_t)p.dim * sizeof *xq), *xq2 = malloc((size_t)p.dim * sizeof *xq2);
    int dq_bad = 0, dq_empty = 0, dq_spread = 0, dq_lost = 0, dq_occ = 0;
    for (int i = 0; i < n && d.threshold_mev > 0; i++) {
        const float *si = s + (size_t)i * g.n_voxels;
        const float *xi = x + (size_t)i * p.dim;
        float ed = 0, ed2 = 0;
        CHECK_EQ_INT(prep_encode_shower_keyed(&pq, si, (uint64_t)i, xq, &ed, &err), GT_OK);
        CHECK_EQ_INT(prep_encode_shower_keyed(&pq, si, (uint64_t)i + 1000, xq2, &ed2, &err), GT_OK);
        CHECK(ed == ed2);
        for (int k = 0; k < p.n_u; k++)
            dq_bad += xq[k] != xi[k] || xq2[k] != xi[k];
        for (int k = 0; k < g.n_active; k++) {
            const geo_layer *l = &g.layers[g.active[k]];
            double el = 0;
            for (int v = 0; v < l->n_voxels; v++)
                el += si[l->offset + v];
            for (int v = l->offset; v < l->offset + l->n_voxels; v++) {
                float a = xq[p.n_u + v], b = xq2[p.n_u + v];
                if (si[v] != 0)
                    continue;
                if (el == 0) {   /* an empty layer: uniform, as without noise */
                    dq_bad += fabs(a - prep_logit_map_alpha(1.0 / l->n_voxels, 1e-10)) > 1e-5 ||
                              b != a;
                    continue;
                }
                dq_empty++;
                dq_spread += a != b;                                /* its own key's noise */
                dq_bad += a < (float)prep_logit_map_alpha(0.0, 1e-10);  /* not below the floor */
            }
        }
        prep_decode_shower(&pq, xq, ed, back);
        for (int v = 0; v < g.n_voxels; v++) {
            double a = si[v], b = back[v];
            dq_occ += a > 0;
            if (a == 0 && b != 0)
                dq_bad++;
            else if (a > 0 && b == 0)
                dq_lost++;   /* only a voxel right at the threshold may go */
            else if (fabs(a - b) > 1e-3 * d.threshold_mev + 1e-4 * a)
                dq_bad++;
        }
    }
    CHECK_MSG(dq_bad == 0, "%s dequantized: %d values off", file, dq_bad);
    CHECK_MSG(dq_spread * 10 > dq_empty * 9, "%s dequantized: %d of %d empty voxels differ "
              "between keys", file, dq_spread, dq_empty);
    CHECK_MSG(dq_lost * 1000 <= dq_occ, "%s dequantized: %d of %d occupied voxels lost", file,
              dq_lost, dq_occ);
    printf("%s: dequantized round trip, %d empty and %d occupied voxels, %d lost at the "
           "threshold\n", file, dq_empty, dq_occ, dq_lost);
    free(xq);
    free(xq2);

    /* Rings, with and without dequantization and ring hit counts: layer k's
     * block holds its ring fractions, then (counts) its rings' hit counts,
     * then its voxels' fractions of their ring; the stick-breaking is
     * unchanged, a ring's fraction is its share of the layer, a count
     * reads back as the ring's hits (stick-broken: the layer's total, then
     * each ring's share of what is left, outer rings first), and decoding
     * gives back the shower. */
    for (int mode = 0; mode < 12; mode++) {
        const int dq = mode & 1, keep = (mode >> 1) & 1, counts = mode >= 4, stick = mode >= 8;
        prep_layout pr = p;
        pr.dequantize = dq;
        pr.voxel_alpha = 1e-10;
        pr.keep_largest = keep;
        prep_layout_set_counts(&pr, 1); /* no rings: stays off */
        CHECK_EQ_INT(pr.counts, 0);
        prep_layout_set_rings(&pr, 1);
        prep_layout_set_counts(&pr, counts);
        prep_layout_set_count_stick(&pr, stick);
        int nring = 0;
        for (int k = 0; k < g.n_active; k++)
            nring += g.layers[g.active[k]].n_r;
        CHECK_EQ_INT(pr.n_rings, nring);
        CHECK_EQ_INT(pr.dim, p.n_u + (1 + counts) * nring + g.n_voxels);
        float *xr = malloc((size_t)pr.dim * sizeof *xr);
        /* every row's encoding and decoding, for the batch decoder below */
        float *xall = malloc((size_t)n * pr.dim * sizeof *xall);
        float *eall = malloc((size_t)n * sizeof *eall);
        float *rows_back = malloc((size_t)n * g.n_voxels * sizeof *rows_back);
        float *batch_back = malloc((size_t)n * g.n_voxels * sizeof *batch_back);
        int r_bad = 0, r_lost = 0, r_occ = 0;
        for (int i = 0; i < n; i++) {
            const float *si = s + (size_t)i * g.n_voxels;
            const float *xi = x + (size_t)i * p.dim;
            float ed = 0;
            CHECK_EQ_INT(prep_encode_shower_keyed(&pr, si, (uint64_t)i, xr, &ed, &err), GT_OK);
            for (int k = 0; k < p.n_u; k++)
                r_bad += xr[k] != xi[k];
            for (int k = 0; k < g.n_active; k++) {
                const geo_layer *l = &g.layers[g.active[k]];
                const float *xb = xr + pr.n_u + pr.block_off[k];
                double el = 0;
                for (int v = 0; v < l->n_voxels; v++)
                    el += si[l->offset + v];
                int ring_hits[GEO_MAX_R_BINS] = {0}, layer_hits = 0;
                for (int j = 0; j < l->n_r && el > 0; j++) {
                    double ring = 0;
                    for (int a = 0; a < l->n_alpha; a++)
                        ring += si[l->offset + a * l->n_r + j];
                    if (ring >= d.threshold_mev && ring > 0)
                        r_bad += fabs(prep_logit_unmap_alpha(xb[j], 1e-10) - ring / el) >
                                 1e-6 * (ring / el) + 1e-9;
                    int hits = 0;
                    for (int a = 0; a < l->n_alpha; a++) {
                        float e = si[l->offset + a * l->n_r + j];
                        hits += dq ? e >= d.threshold_mev : e > 0;
                    }
                    if (dq && ring < d.threshold_mev)
                        hits = 0;
                    if (counts && !stick)
                        r_bad += (int)floorf(xb[l->n_r + j]) != hits ||
                                 !(xb[l->n_r + j] > (float)hits);
                    ring_hits[j] = hits;
                    layer_hits += hits;
                }
                if (stick && el > 0) {
                    const int nr = l->n_r, na = l->n_alpha;
                    r_bad += (int)floorf(xb[nr]) != layer_hits || !(xb[nr] > (float)layer_hits);
                    int left = layer_hits;
                    for (int j = nr - 1; j >= 1; j--) {
                        int lo = left - j * na > 0 ? left - j * na : 0, hi = left < na ? left : na;
                        float sj = xb[nr + (nr - j)];
                        r_bad += !(sj > 0 && sj < 1) || ring_hits[j] < lo || ring_hits[j] > hi ||
                                 (int)floor(sj * (hi - lo + 1)) != ring_hits[j] - lo;
                        left -= ring_hits[j];
                    }
                }
            }
            prep_decode_shower(&pr, xr, ed, back);
            memcpy(xall + (size_t)i * pr.dim, xr, (size_t)pr.dim * sizeof *xr);
            eall[i] = ed;
            memcpy(rows_back + (size_t)i * g.n_voxels, back, (size_t)g.n_voxels * sizeof *back);
            for (int v = 0; v < g.n_voxels; v++) {
                double a = si[v], b = back[v];
                r_occ += a > 0;
                if (a == 0 && b != 0)
                    r_bad++;
                else if (a > 0 && b == 0)
                    r_lost++;
                else if (fabs(a - b) > 1e-3 * d.threshold_mev + 1e-4 * a)
                    r_bad++;
            }
        }
        /* counts 2: stick-broken */
        CHECK_MSG(r_bad == 0, "%s rings (dequantize %d, keep_largest %d, counts %d): %d values "
                  "off", file, dq, keep, counts + stick, r_bad);
        CHECK_MSG(r_lost * 1000 <= r_occ, "%s rings (dequantize %d, keep_largest %d, counts %d): "
                  "%d of %d occupied voxels lost", file, dq, keep, counts + stick, r_lost, r_occ);
        printf("%s: rings round trip (dequantize %d, keep_largest %d, counts %d), %d occupied "
               "voxels, %d lost at the threshold\n", file, dq, keep, counts + stick, r_occ, r_lost);
        /* the batch decoder, on the OpenMP threads: each row's bytes as alone */
        prep_decode_showers(&pr, xall, eall, n, batch_back);
        CHECK_MSG(!memcmp(batch_back, rows_back, (size_t)n * g.n_voxels * sizeof *rows_back),
                  "%s rings (mode %d): prep_decode_showers differs from row by row", file, mode);
        free(xall);
        free(eall);
        free(rows_back);
        free(batch_back);
        free(xr);
    }
    keep_largest_cases(file, &p, d.threshold_mev);
    counts_cases(file, &p, d.threshold_mev);
    count_stick_cases(file, &p, d.threshold_mev);
    readout_cases(file, &p, d.threshold_mev);

    /* an empty layer: uniform fractions, and zeros when decoded */
    float *one = calloc(g.n_voxels, sizeof *one);
    const geo_layer *l0 = &g.layers[g.active[0]], *l1 = &g.layers[g.active[1]];
    one[l1->offset] = 100.0f;
    one[l1->offset + 1] = 300.0f;
    float e_dep;
    CHECK_EQ_INT(prep_encode_shower(&p, one, x, &e_dep, &err), GT_OK);
    CHECK_CLOSE(e_dep, 400.0, 0, 1e-7);
    CHECK_CLOSE(x[0], prep_logit_map(0.0), 1e-5, 0);              /* u_0 = 0 */
    CHECK_CLOSE(x[1], prep_logit_map(1.0), 1e-4, 0);              /* all in layer 1 */
    CHECK_CLOSE(x[p.n_u + l0->offset], prep_logit_map(1.0 / l0->n_voxels), 1e-5, 0);
    CHECK_CLOSE(x[p.n_u + l1->offset + 1], prep_logit_map(0.75), 1e-5, 0);
    prep_decode_shower(&p, x, e_dep, back);
    double tot = 0;
    for (int v = 0; v < g.n_voxels; v++)
        tot += back[v];
    CHECK_CLOSE(back[l1->offset], 100.0, 0, 1e-4);
    CHECK_CLOSE(back[l1->offset + 1], 300.0, 0, 1e-4);
    CHECK_CLOSE(tot, 400.0, 0, 1e-4);
    /* the threshold applies on decoding */
    prep_decode_shower(&p, x, 1e-4f, back);
    tot = 0;
    for (int v = 0; v < g.n_voxels; v++)
        tot += back[v];
    CHECK(tot == 0 || d.threshold_mev < 1e-4);
    /* bad voxel values are refused with the voxel named */
    one[5] = -1.0f;
    CHECK_EQ_INT(prep_encode_shower(&p, one, x, &e_dep, &err), GT_EINVAL);
    CHECK(strstr(err.message, "voxel 5") != NULL);
    one[5] = NAN;
    CHECK_EQ_INT(prep_encode_shower(&p, one, x, &e_dep, &err), GT_EINVAL);
    one[5] = INFINITY;
    CHECK_EQ_INT(prep_encode_shower(&p, one, x, &e_dep, &err), GT_EINVAL);
    free(one);
    free(s);
    free(e);
    free(x);
    free(r);
    free(back);
    synth_detector_free(&d);
    geo_free(&g);
}

static void test_conditions(void)
{
    CHECK_CLOSE(prep_condition_energy(1000.0f), 3.0, 1e-6, 0);
    CHECK_CLOSE(prep_condition_energy_inverse(prep_condition_energy(12345.0f)), 12345.0, 0,
                1e-5);
    CHECK_CLOSE(prep_decode_energy(prep_encode_energy(950.0f, 1000.0f), 1000.0f), 950.0, 0,
                1e-6);
    CHECK(prep_decode_energy(-0.1f, 1000.0f) == 0.0f);
    prep_layout p;
    gt_error err = {0};
    CHECK_EQ_INT(prep_layout_init(&p, NULL, 0, &err), GT_EINVAL);
}

static void test_stats(void)
{
    const int n = 500, dim = 4;
    float *x = malloc(n * dim * sizeof *x), *y = malloc(n * dim * sizeof *y);
    for (int i = 0; i < n; i++) {
        x[i * dim + 0] = (float)i;                    /* mean 249.5 */
        x[i * dim + 1] = (i % 2) ? 3.0f : -1.0f;      /* mean 1, std 2 */
        x[i * dim + 2] = 7.0f;                        /* constant */
        x[i * dim + 3] = (float)sin(i) * 1e-3f;
    }
    prep_stats s;
    gt_error err = {0};
    CHECK_EQ_INT(prep_stats_fit(&s, x, n, dim, NULL, 0, &err), GT_OK);
    CHECK_CLOSE(s.mean[0], 249.5, 1e-9, 0);
    CHECK_CLOSE(s.mean[1], 1.0, 1e-12, 0);
    CHECK_CLOSE(s.std[1], 2.0, 1e-12, 0);
    CHECK_CLOSE(s.mean[2], 7.0, 1e-12, 0);
    CHECK(s.std[2] == 1.0); /* constant feature: no division by ~0 */
    memcpy(y, x, n * dim * sizeof *x);
    prep_stats_apply(&s, y, n);
    double m0 = 0, v1 = 0;
    for (int i = 0; i < n; i++) {
        m0 += y[i * dim] / n;
        v1 += y[i * dim + 1] * y[i * dim + 1] / n;
    }
    CHECK_CLOSE(m0, 0, 1e-5, 0);
    CHECK_CLOSE(v1, 1, 1e-5, 0);
    prep_stats_invert(&s, y, n);
    int bad = 0;
    for (int i = 0; i < n * dim; i++)
        if (fabs(y[i] - x[i]) > 1e-4 * (1 + fabs(x[i])))
            bad++;
    CHECK_EQ_INT(bad, 0);

    /* fit on a subset of rows only (the training split) */
    int64_t rows[3] = {0, 2, 4};
    prep_stats t;
    CHECK_EQ_INT(prep_stats_fit(&t, x, n, dim, rows, 3, &err), GT_OK);
    CHECK_CLOSE(t.mean[0], 2.0, 1e-12, 0);
    CHECK_CLOSE(t.mean[1], -1.0, 1e-12, 0);
    prep_stats_free(&t);
    int64_t bad_rows[1] = {n};
    CHECK_EQ_INT(prep_stats_fit(&t, x, n, dim, bad_rows, 1, &err), GT_EINVAL);
    CHECK_EQ_INT(prep_stats_fit(&t, x, n, dim, rows, 0, &err), GT_EINVAL);
    x[7] = NAN;
    CHECK_EQ_INT(prep_stats_fit(&t, x, n, dim, NULL, 0, &err), GT_EINVAL);

    /* bytes round trip, bit exact */
    size_t len = prep_stats_size(&s);
    uint8_t *buf = malloc(len);
    size_t got = 0;
    CHECK_EQ_INT(prep_stats_to_bytes(&s, buf, len - 1, &got, &err), GT_EINVAL);
    CHECK_EQ_INT(prep_stats_to_bytes(&s, buf, len, &got, &err), GT_OK);
    CHECK_EQ_INT(got, len);
    CHECK(!memcmp(buf, "GTPS", 4));
    prep_stats u;
    CHECK_EQ_INT(prep_stats_from_bytes(&u, buf, len, &err), GT_OK);
    CHECK_EQ_INT(u.dim, dim);
    CHECK(!memcmp(u.mean, s.mean, dim * sizeof(double)));
    CHECK(!memcmp(u.std, s.std, dim * sizeof(double)));
    prep_stats_free(&u);
    /* corruption, truncation, wrong magic, wrong version */
    buf[20] ^= 1;
    CHECK_EQ_INT(prep_stats_from_bytes(&u, buf, len, &err), GT_ECHECKSUM);
    buf[20] ^= 1;
    CHECK_EQ_INT(prep_stats_from_bytes(&u, buf, len - 8, &err), GT_EFORMAT);
    CHECK_EQ_INT(prep_stats_from_bytes(&u, buf, 3, &err), GT_EFORMAT);
    buf[4] = 2;
    CHECK_EQ_INT(prep_stats_from_bytes(&u, buf, len, &err), GT_EFORMAT);
    buf[4] = 1;
    buf[0] = 'X';
    CHECK_EQ_INT(prep_stats_from_bytes(&u, buf, len, &err), GT_EFORMAT);
    CHECK_EQ_INT(prep_stats_from_bytes(&u, NULL, 0, &err), GT_EFORMAT);
    free(buf);
    prep_stats_free(&s);
    free(x);
    free(y);
}

/* The sampler's check of a network's output: the first row holding a NaN
 * or an infinity, whatever the thread count (the parallel scan must give
 * the lowest bad row, not the first a thread finds). */
static void test_first_nonfinite(void)
{
    const int64_t n = 300, per = 6480;   /* over the size scanned in parallel */
    float *x = malloc((size_t)(n * per) * sizeof *x);
    for (int64_t i = 0; i < n * per; i++)
        x[i] = (float)((i % 13) - 6) * 1e30f;   /* large, finite, both signs */
    x[5] = FLT_MAX;
    x[6] = -FLT_MAX;
    CHECK_EQ_INT(prep_first_nonfinite_row(x, n, per), n);
    x[250 * per + 17] = INFINITY;
    CHECK_EQ_INT(prep_first_nonfinite_row(x, n, per), 250);
    x[99 * per + per - 1] = NAN;
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        CHECK_EQ_INT(prep_first_nonfinite_row(x, n, per), 99);
    }
    x[0] = -INFINITY;
    CHECK_EQ_INT(prep_first_nonfinite_row(x, n, per), 0);
    CHECK_EQ_INT(prep_first_nonfinite_row(x + per, 2, per), 2);   /* small: one thread */
    CHECK_EQ_INT(prep_first_nonfinite_row(x, 0, per), 0);
    free(x);
}

int main(void)
{
    test_first_nonfinite();
    test_logit();
    test_stick();
    test_keep_top();
    test_conditions();
    roundtrip_geometry("binning_dataset_2.xml", 40);
    roundtrip_geometry("binning_dataset_1_photons.xml", 200);
    roundtrip_geometry("binning_dataset_1_pions.xml", 100);
    test_stats();
    return check_finish();
}
