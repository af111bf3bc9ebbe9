/* prep: model representation of showers and its exact inverse. */
#include "prep.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gt_le.h"

int prep_layout_init(prep_layout *p, const geo_geometry *g, float threshold_mev, gt_error *err)
{
    memset(p, 0, sizeof *p);
    if (!g || g->n_active < 1 || g->n_voxels < 1)
        return gt_error_set(err, GT_EINVAL, "prep: geometry has no voxels");
    if (!(threshold_mev >= 0) || !isfinite(threshold_mev))
        return gt_error_set(err, GT_EINVAL, "prep: threshold must be >= 0");
    p->geo = g;
    p->n_layers = g->n_active;
    p->n_u = g->n_active - 1;
    p->n_voxels = g->n_voxels;
    p->dim = p->n_u + p->n_voxels;
    p->threshold_mev = threshold_mev;
    p->readout_mev = threshold_mev;
    p->voxel_alpha = PREP_ALPHA;
    p->dequant_top = PREP_DEQUANT_TOP;
    prep_layout_set_rings(p, 0);
    return GT_OK;
}

/* Block offsets and widths, and dim, from p->rings and p->counts. */
static void layout_blocks(prep_layout *p)
{
    const geo_geometry *g = p->geo;
    const int per_ring = p->rings ? 1 + (p->counts != 0) : 0; /* features per ring */
    int extra = 0;
    p->n_rings = 0;
    for (int k = 0; k < p->n_layers; k++) {
        const geo_layer *l = &g->layers[g->active[k]];
        p->block_off[k] = l->offset + extra;
        p->block_width[k] = l->n_voxels + per_ring * l->n_r;
        extra += per_ring * l->n_r;
        if (p->rings)
            p->n_rings += l->n_r;
    }
    p->dim = p->n_u + extra + p->n_voxels;
}

void prep_layout_set_rings(prep_layout *p, int on)
{
    p->rings = on != 0;
    if (!p->rings)
        p->counts = p->count_stick = 0;
    layout_blocks(p);
}

void prep_layout_set_counts(prep_layout *p, int on)
{
    p->counts = on != 0 && p->rings;
    if (!p->counts)
        p->count_stick = 0;
    layout_blocks(p);
}

void prep_layout_set_count_stick(prep_layout *p, int on)
{
    p->count_stick = on != 0 && p->counts;
}

double prep_logit_map_alpha(double p, double alpha)
{
    if (!(p > 0))
        p = 0;
    if (p > 1)
        p = 1;
    double q = alpha + (1.0 - 2.0 * alpha) * p;
    return log(q / (1.0 - q));
}

double prep_logit_unmap_alpha(double x, double alpha)
{
    double q = 1.0 / (1.0 + exp(-x));
    double p = (q - alpha) / (1.0 - 2.0 * alpha);
    return p < 0 ? 0 : p > 1 ? 1 : p;
}

double prep_logit_map(double p)
{
    return prep_logit_map_alpha(p, PREP_ALPHA);
}

double prep_logit_unmap(double x)
{
    return prep_logit_unmap_alpha(x, PREP_ALPHA);
}

float prep_encode_energy(float e_dep, float e_inc)
{
    return e_dep / e_inc;
}

float prep_decode_energy(float r, float e_inc)
{
    return r > 0 ? r * e_inc : 0.0f;
}

float prep_condition_energy(float e_inc)
{
    return log10f(e_inc);
}

float prep_condition_energy_inverse(float c)
{
    return powf(10.0f, c);
}

void prep_stick_break(const double *layer_e, int n_layers, double *u)
{
    double remaining = 0;
    for (int l = 0; l < n_layers; l++)
        remaining += layer_e[l];
    for (int l = 0; l < n_layers - 1; l++) {
        u[l] = remaining > 0 ? layer_e[l] / remaining : 0.0;
        if (u[l] > 1)
            u[l] = 1;
        remaining -= layer_e[l];
        if (remaining < 0)
            remaining = 0;
    }
}

void prep_stick_join(const double *u, int n_layers, double e_dep, double *layer_e)
{
    double remaining = e_dep > 0 ? e_dep : 0;
    for (int l = 0; l < n_layers - 1; l++) {
        double ul = u[l] < 0 ? 0 : u[l] > 1 ? 1 : u[l];
        layer_e[l] = ul * remaining;
        remaining -= layer_e[l];
    }
    layer_e[n_layers - 1] = remaining;
}

/* The noise of an empty voxel (or ring) stays under p->dequant_top times
 * the threshold: the gap it leaves (ln(1 / top) in the logit of a small
 * fraction) keeps a model's small errors on an empty voxel from lifting it
 * over the threshold.  engine/model/README.md has the measurements. */

/* The dequantization noise of voxel v of shower key: uniform in (0, 1)
 * from a splitmix64 hash (24 bits, never 0 or 1). */
static double dequant_uniform(uint64_t key, int v)
{
    uint64_t z = key * 0x9E3779B97F4A7C15ull + (uint64_t)v + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((double)(z >> 40) + 0.5) / 16777216.0;
}

/* The hits a stick-broken ring may take when R hits are left for it and
 * `after` more rings, each of n_alpha voxels: at least what those rings
 * cannot hold, at most what is left or what it can hold. */
static void hit_bounds(int left, int after, int na, int *lo, int *hi)
{
    *lo = left - na * after > 0 ? left - na * after : 0;
    *hi = left < na ? left : na;
}

/* p->count_stick: a layer's ring hit counts (hits[j]) and their noise
 * (u[j], uniform in (0, 1)) -> xc = [ N + u_0 ; s for rings nr-1 .. 1 ],
 * N the layer's hits and s = (n - lo + u') / (hi - lo + 1) the share, in
 * (0, 1), of ring j's count within what is left for it (hit_bounds; ring 0
 * takes the rest).  u' = 0.001 + 0.998 u keeps the value off the edges of
 * its cell, so that float rounding cannot move floor(s * width). */
static void encode_count_stick(const int *hits, const double *u, int nr, int na, float *xc)
{
    int left = 0;
    for (int j = 0; j < nr; j++)
        left += hits[j];
    xc[0] = (float)(left + u[0]);
    for (int i = 1; i < nr; i++) {
        const int j = nr - i; /* outer rings first */
        int lo, hi;
        hit_bounds(left, j, na, &lo, &hi);
        xc[i] = (float)((hits[j] - lo + 0.001 + 0.998 * u[i]) / (double)(hi - lo + 1));
        left -= hits[j];
    }
}

/* Its inverse for decoding: each ring's count, within its bounds whatever
 * the values (NaN: the fewest hits), so the rings always hold the total
 * (clamped to the layer's voxels). */
static void decode_count_stick(const float *xc, int nr, int na, int *hits)
{
    const int most = nr * na;
    int left = !(xc[0] >= 0) ? 0 : xc[0] >= (float)most ? most : (int)floorf(xc[0]);
    for (int i = 1; i < nr; i++) {
        const int j = nr - i;
        int lo, hi;
        hit_bounds(left, j, na, &lo, &hi);
        double s = xc[i], n = !(s >= 0) ? lo : lo + floor(s * (hi - lo + 1));
        hits[j] = n > hi ? hi : n < lo ? lo : (int)n;
        left -= hits[j];
    }
    hits[0] = left; /* within [0, na]: ring 1's lower bound saw to it */
}

/* Layer k with rings: xb = [ring fractions of the layer (n_r) ; voxel
 * fractions of their ring (n_voxels, as stored: voxel a * n_r + j is in
 * ring j)].  Noise keys: voxel v -> v, ring j of layer k -> V + its ring
 * index, so none is shared. */
static void encode_layer_rings(const prep_layout *p, int k, const float *shower, uint64_t key,
                               double layer_e, float *xb)
{
    const geo_layer *l = &p->geo->layers[p->geo->active[k]];
    const int nr = l->n_r, na = l->n_alpha;
    const double thr = p->threshold_mev, alpha = p->voxel_alpha;
    const int dq = p->dequantize && thr > 0;
    const int ring0 = p->block_off[k] - l->offset; /* ring features before this layer */
    const int ring_idx0 = p->counts ? ring0 / 2 : ring0; /* rings before this layer */
    float *xr = xb, *xc = p->counts ? xb + nr : NULL, *xv = xb + (p->counts ? 2 * nr : nr);
    int ring_hits_of[GEO_MAX_R_BINS] = {0}; /* with count_stick: each ring's hits */
    double ring_u[GEO_MAX_R_BINS] = {0};    /* and their noise */
    for (int j = 0; j < nr; j++) {
        double ring = 0;
        for (int a = 0; a < na; a++)
            ring += shower[l->offset + a * nr + j];
        int empty = dq ? ring < thr : !(ring > 0);
        double rf;
        if (!(layer_e > 0))
            rf = 1.0 / nr;
        else if (empty && dq)
            rf = p->dequant_top * thr * dequant_uniform(key, p->n_voxels + ring_idx0 + j) / layer_e;
        else
            rf = ring / layer_e;
        xr[j] = (float)prep_logit_map_alpha(rf, alpha);
        if (xc) {
            int hits = 0;
            for (int a = 0; a < na && !empty && layer_e > 0; a++) {
                float e = shower[l->offset + a * nr + j];
                hits += dq ? e >= thr : e > 0;
            }
            double u = dequant_uniform(key, p->n_voxels + p->n_rings + ring_idx0 + j);
            if (p->count_stick)
                ring_hits_of[j] = hits, ring_u[j] = u;
            else
                xc[j] = (float)(hits + u);
        }
        /* an empty ring's voxels: a noise split of it (dequantized) or the
         * uniform one, so they lie on the simplex like every ring's */
        /* with counts, decoding picks the hits by rank, not by the
         * threshold: an empty voxel of a hit ring is dequantized just under
         * the ring's smallest hit, so its values and the hits' meet with no
         * gap for a model to fall into */
        double minhit = ring;
        if (xc && dq && !empty && layer_e > 0)
            for (int a = 0; a < na; a++) {
                float e = shower[l->offset + a * nr + j];
                if (e >= thr && e < minhit)
                    minhit = e;
            }
        double usum = 0;
        if (empty || !(layer_e > 0))
            for (int a = 0; a < na; a++)
                usum += dq ? dequant_uniform(key, l->offset + a * nr + j) : 1.0;
        for (int a = 0; a < na; a++) {
            int at = l->offset + a * nr + j;
            double f;
            if (empty || !(layer_e > 0))
                f = (dq ? dequant_uniform(key, at) : 1.0) / usum;
            else if (dq && shower[at] < thr && xc)
                f = minhit * dequant_uniform(key, at) / ring;
            else if (dq && shower[at] < thr)
                f = p->dequant_top * thr * dequant_uniform(key, at) / ring;
            else
                f = shower[at] / ring;
            xv[a * nr + j] = (float)prep_logit_map_alpha(f, alpha);
        }
    }
    if (xc && p->count_stick)
        encode_count_stick(ring_hits_of, ring_u, nr, na, xc);
}

/* Scales the entries of e[a * stride] (n of them; the threshold's
 * survivors and zeros) to add up to `to` (nothing when none is left). */
static void scale_survivors(float *e, int n, int stride, double to)
{
    double kept = 0;
    for (int a = 0; a < n; a++)
        kept += e[a * stride];
    if (kept > 0 && kept != to) {
        double f = to / kept;
        for (int a = 0; a < n; a++)
            e[a * stride] = (float)(e[a * stride] * f);
    }
}

/* p->keep_largest: when energy that reaches the threshold (a ring's or a
 * layer's; n entries e[a * stride]) left no survivor, the entry that was
 * largest before the threshold (index best) takes all of it.  A recorded
 * shower never has a ring or a layer with energy and no hit; a model that
 * spreads a small energy thinly would otherwise read out an empty layer. */
static void keep_largest(const prep_layout *p, float *e, int n, int stride, int best,
                         double energy)
{
    if (!p->keep_largest || !(energy >= p->threshold_mev))
        return;
    for (int a = 0; a < n; a++)
        if (e[a * stride] > 0)
            return;
    e[best * stride] = (float)energy;
}

/* A decoded ring hit count: floor(x) in [0, na] (x = count + u). */
static int ring_hits(float x, int na)
{
    if (!(x >= 0)) /* NaN too: no hit */
        return 0;
    return x >= (float)na ? na : (int)floorf(x);
}

static int descending(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* Zeroes all but the `keep` largest of v[0 .. n) (ties: the lower index
 * stays): an entry goes when `keep` others rank before it, by value and
 * then by index.  A NaN ranks before nothing and nothing before it, so it
 * stays (every comparison with it is false) unless keep is 0.
 * That count for every entry was n^2 unpredictable branches, most of
 * decoding's time.  Now the values are sorted once (n is a ring's angular
 * bin count: 16 in dataset 2, 50 at most in the CaloChallenge files) and
 * the keep-th largest, t, decides: above t stays, below goes, and of the
 * entries equal to t the first by index fill what is left.  The same
 * entries go. */
void prep_keep_top(double *v, int n, int keep)
{
    if (keep >= n)
        return;
    if (keep <= 0) { /* nothing stays, a NaN neither */
        for (int a = 0; a < n; a++)
            v[a] = 0.0;
        return;
    }
    double s[GEO_MAX_ALPHA_BINS];
    int m = 0;
    for (int a = 0; a < n; a++)
        if (v[a] == v[a]) /* not NaN */
            s[m++] = v[a];
    if (keep >= m)
        return;
    if (m > 64) {
        qsort(s, (size_t)m, sizeof s[0], descending);
    } else {
        for (int i = 1; i < m; i++) { /* insertion, descending */
            double x = s[i];
            int j = i;
            for (; j > 0 && s[j - 1] < x; j--)
                s[j] = s[j - 1];
            s[j] = x;
        }
    }
    const double t = s[keep - 1];
    int ties = keep; /* entries equal to t that stay */
    for (int i = 0; i < keep; i++)
        ties -= s[i] > t;
    for (int a = 0; a < n; a++) {
        if (!(v[a] == v[a]) || v[a] > t)
            continue;
        if (v[a] == t && ties > 0)
            ties--;
        else
            v[a] = 0.0;
    }
}

/* The inverse of encode_layer_rings for a layer of energy layer_e, with the
 * threshold: ring energies are the layer energy times their fractions
 * (renormalised unless dequantized), voxels their ring's energy times
 * theirs; then the threshold, and each ring's survivors carry the ring's
 * energy and the layer's survivors the layer's (keep_largest first, at both
 * levels). */
static void decode_layer_rings(const prep_layout *p, int k, const float *xb, double layer_e,
                               float *shower)
{
    const geo_layer *l = &p->geo->layers[p->geo->active[k]];
    const int nr = l->n_r, na = l->n_alpha;
    const double alpha = p->voxel_alpha;
    float *e = shower + l->offset;
    double rf[GEO_MAX_R_BINS], rsum = 0;
    int best = 0;    /* the layer's largest voxel before the threshold */
    double vbest = -1;
    for (int j = 0; j < nr; j++) {
        rf[j] = prep_logit_unmap_alpha(xb[j], alpha);
        rsum += rf[j];
    }
    const float *xv = xb + (p->counts ? 2 * nr : nr);
    int stick_hits[GEO_MAX_R_BINS]; /* with count_stick: each ring's hits */
    if (p->count_stick)
        decode_count_stick(xb + nr, nr, na, stick_hits);
    for (int j = 0; j < nr; j++) {
        double ring = p->dequantize ? layer_e * rf[j] : rsum > 0 ? layer_e * rf[j] / rsum : 0;
        double vsum = 0, v[GEO_MAX_ALPHA_BINS];
        for (int a = 0; a < na; a++) {   /* each fraction once: exp is the cost */
            v[a] = prep_logit_unmap_alpha(xv[a * nr + j], alpha);
            vsum += v[a];
        }
        int rbest = 0; /* the ring's */
        double rvbest = -1;
        for (int a = 0; a < na; a++) {
            double f = v[a];
            v[a] = p->dequantize ? ring * f : vsum > 0 ? ring * f / vsum : 0;
            if (v[a] > rvbest)
                rvbest = v[a], rbest = a;
            if (v[a] > vbest)
                vbest = v[a], best = a * nr + j;
        }
        int keep = p->count_stick ? stick_hits[j] : p->counts ? ring_hits(xb[nr + j], na) : na;
        /* a count of 0 empties the ring, whatever its energy: the layer's
         * other rings carry it (keeping one voxel instead, keep_largest's
         * reading, measured worse: 3.9x against 3.7x the floor) */
        if (keep < na)
            prep_keep_top(v, na, keep);
        for (int a = 0; a < na; a++)
            e[a * nr + j] = v[a] < p->threshold_mev ? 0.0f : (float)v[a];
        if (keep > 0)
            keep_largest(p, e + j, na, nr, rbest, ring);
        if (p->dequantize || p->counts)
            scale_survivors(e + j, na, nr, ring);
    }
    keep_largest(p, e, l->n_voxels, 1, best, layer_e);
    if (p->dequantize || p->counts)
        scale_survivors(e, l->n_voxels, 1, layer_e);
}

int prep_encode_shower(const prep_layout *p, const float *shower, float *x, float *e_dep,
                       gt_error *err)
{
    return prep_encode_shower_keyed(p, shower, 0, x, e_dep, err);
}

int prep_encode_shower_keyed(const prep_layout *p, const float *shower, uint64_t key, float *x,
                             float *e_dep, gt_error *err)
{
    const geo_geometry *g = p->geo;
    double layer_e[GEO_MAX_LAYERS], u[GEO_MAX_LAYERS];
    double total = 0;
    double thr = p->threshold_mev;
    int dq = p->dequantize && thr > 0;
    for (int k = 0; k < p->n_layers; k++) {
        const geo_layer *l = &g->layers[g->active[k]];
        double s = 0;
        for (int v = 0; v < l->n_voxels; v++) {
            float e = shower[l->offset + v];
            if (!(e >= 0) || isinf(e))
                return gt_error_set(err, GT_EINVAL, "voxel %d: energy %g is not a finite "
                                    "non-negative number", l->offset + v, e);
            s += e;
        }
        layer_e[k] = s;
        total += s;
    }
    prep_stick_break(layer_e, p->n_layers, u);
    for (int k = 0; k < p->n_u; k++)
        x[k] = (float)prep_logit_map(u[k]);
    if (p->rings) {
        for (int k = 0; k < p->n_layers; k++)
            encode_layer_rings(p, k, shower, key, layer_e[k], x + p->n_u + p->block_off[k]);
        if (e_dep)
            *e_dep = (float)total;
        return GT_OK;
    }
    float *xv = x + p->n_u;
    for (int k = 0; k < p->n_layers; k++) {
        const geo_layer *l = &g->layers[g->active[k]];
        if (dq && layer_e[k] > 0) {
            /* voxels under the threshold hold noise under it; fractions of
             * the layer's true energy, so an occupied voxel's fraction is
             * exact and the noise adds on top (decoding cuts it) */
            for (int v = 0; v < l->n_voxels; v++) {
                int at = l->offset + v;
                double e = shower[at] < thr ? p->dequant_top * thr * dequant_uniform(key, at)
                                            : shower[at];
                xv[at] = (float)prep_logit_map_alpha(e / layer_e[k], p->voxel_alpha);
            }
            continue;
        }
        /* An empty layer gets the uniform distribution: every layer's
         * fractions then lie on the simplex, and decoding multiplies them
         * by E_layer = 0 anyway. */
        double inv = layer_e[k] > 0 ? 1.0 / layer_e[k] : 0.0;
        for (int v = 0; v < l->n_voxels; v++) {
            double f = inv > 0 ? shower[l->offset + v] * inv : 1.0 / l->n_voxels;
            xv[l->offset + v] = (float)prep_logit_map_alpha(f, p->voxel_alpha);
        }
    }
    if (e_dep)
        *e_dep = (float)total;
    return GT_OK;
}

void prep_decode_showers(const prep_layout *p, const float *x, const float *e_dep, int64_t n,
                         float *showers)
{
#pragma omp parallel for schedule(static) if (n >= 16)
    for (int64_t i = 0; i < n; i++)
        prep_decode_shower(p, x + i * (int64_t)p->dim, e_dep[i],
                           showers + i * (int64_t)p->n_voxels);
}

int64_t prep_first_nonfinite_row(const float *x, int64_t n, int64_t per)
{
    int64_t first = n;
#pragma omp parallel for schedule(static) reduction(min : first) if (n * per > (1 << 16))
    for (int64_t r = 0; r < n; r++) {
        const float *v = x + r * per;
        int ok = 1;
        for (int64_t j = 0; j < per; j++)   /* no early exit: it vectorises */
            ok &= fabsf(v[j]) <= FLT_MAX;   /* false for NaN and infinities */
        if (!ok && r < first)
            first = r;
    }
    return first;
}

/* The readout, last of all: every voxel under p->readout_mev becomes 0.
 * Its energy is dropped, not given back to its layer: the simulator and the
 * CaloChallenge files drop what a cell reads under the threshold (a layer's
 * recorded energy is the sum of its read-out voxels), and giving it back
 * would rescale the survivors, changing voxels that were already read out.
 * What goes is voxels the survivors' rescaling took back under the
 * threshold (a ring's or a layer's dequantized fractions can add up to more
 * than 1, and scaling them down to its energy shrinks every survivor), and
 * those between threshold_mev and a higher readout_mev; each held less
 * than the threshold.  A NaN stays (the sampler checks for them before
 * decoding). */
static void readout_cut(const prep_layout *p, float *shower)
{
    const float cut = p->readout_mev;
    for (int v = 0; v < p->n_voxels; v++)
        if (shower[v] < cut)
            shower[v] = 0.0f;
}

/* Decoding without rings: each layer's voxel fractions times its energy,
 * the threshold, keep_largest, and (dequantized) the survivors scaled to
 * the layer's energy. */
static void decode_layers(const prep_layout *p, const float *xv, const double *layer_e,
                          float *shower)
{
    const geo_geometry *g = p->geo;
    for (int k = 0; k < p->n_layers; k++) {
        const geo_layer *l = &g->layers[g->active[k]];
        double sum = 0;
        for (int v = 0; v < l->n_voxels; v++) {
            double f = prep_logit_unmap_alpha(xv[l->offset + v], p->voxel_alpha);
            shower[l->offset + v] = (float)f;
            sum += f;
        }
        /* dequantized: fractions of the layer energy as they are (the
         * noise on top of an exact shower decodes under the threshold);
         * otherwise renormalised to sum to 1 */
        double scale = p->dequantize ? layer_e[k] : sum > 0 ? layer_e[k] / sum : 0.0;
        int best = 0;
        float ebest = -1;
        for (int v = 0; v < l->n_voxels; v++) {
            float e = sum > 0 ? (float)(shower[l->offset + v] * scale)
                              : (float)(layer_e[k] / l->n_voxels);
            if (e > ebest)
                ebest = e, best = v;
            shower[l->offset + v] = e < p->threshold_mev ? 0.0f : e;
        }
        keep_largest(p, shower + l->offset, l->n_voxels, 1, best, layer_e[k]);
        /* dequantized: the survivors of the threshold carry the layer's
         * energy exactly */
        if (p->dequantize)
            scale_survivors(shower + l->offset, l->n_voxels, 1, layer_e[k]);
    }
}

void prep_decode_shower(const prep_layout *p, const float *x, float e_dep, float *shower)
{
    double layer_e[GEO_MAX_LAYERS], u[GEO_MAX_LAYERS];
    for (int k = 0; k < p->n_u; k++)
        u[k] = prep_logit_unmap(x[k]);
    prep_stick_join(u, p->n_layers, e_dep, layer_e);
    const float *xv = x + p->n_u;
    /* voxels of layers without voxels do not exist; zero the whole row first
     * so nothing stale survives */
    memset(shower, 0, (size_t)p->n_voxels * sizeof *shower);
    if (p->rings) {
        for (int k = 0; k < p->n_layers; k++)
            decode_layer_rings(p, k, xv + p->block_off[k], layer_e[k], shower);
    } else {
        decode_layers(p, xv, layer_e, shower);
    }
    readout_cut(p, shower);
}

int prep_encode_batch(const prep_layout *p, const float *showers, const float *e_inc,
                      int64_t n, float *x, float *energy_target, gt_error *err)
{
    for (int64_t i = 0; i < n; i++) {
        float e_dep;
        int rc = prep_encode_shower(p, showers + i * (int64_t)p->n_voxels,
                                    x + i * (int64_t)p->dim, &e_dep, err);
        if (rc)
            return gt_error_wrap(err, "row %lld", (long long)i);
        if (energy_target) {
            if (!e_inc || !(e_inc[i] > 0))
                return gt_error_set(err, GT_EINVAL, "row %lld: incident energy must be > 0",
                                    (long long)i);
            energy_target[i] = prep_encode_energy(e_dep, e_inc[i]);
        }
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* Standardisation                                                           */
/* ------------------------------------------------------------------------ */

void prep_stats_free(prep_stats *s)
{
    if (!s)
        return;
    free(s->mean);
    free(s->std);
    memset(s, 0, sizeof *s);
}

static int prep_stats_alloc(prep_stats *s, int dim, gt_error *err)
{
    memset(s, 0, sizeof *s);
    if (dim <= 0 || dim > 100000000)
        return gt_error_set(err, GT_EINVAL, "stats: dimension %d out of range", dim);
    s->mean = calloc(dim, sizeof(double));
    s->std = calloc(dim, sizeof(double));
    if (!s->mean || !s->std) {
        prep_stats_free(s);
        return gt_error_set(err, GT_ENOMEM, "stats: out of memory");
    }
    s->dim = dim;
    return GT_OK;
}

int prep_stats_fit(prep_stats *s, const float *x, int64_t n, int dim, const int64_t *rows,
                   int64_t n_rows, gt_error *err)
{
    if (!rows)
        n_rows = n;
    if (n_rows < 1)
        return gt_error_set(err, GT_EINVAL, "stats: no rows to fit");
    GT_TRY(prep_stats_alloc(s, dim, err));
    /* two passes in double: numerically safe and cheap next to training */
    for (int64_t k = 0; k < n_rows; k++) {
        int64_t i = rows ? rows[k] : k;
        if (i < 0 || i >= n) {
            prep_stats_free(s);
            return gt_error_set(err, GT_EINVAL, "stats: row %lld outside [0, %lld)",
                                (long long)i, (long long)n);
        }
        const float *r = x + i * (int64_t)dim;
        for (int d = 0; d < dim; d++)
            s->mean[d] += r[d];
    }
    for (int d = 0; d < dim; d++)
        s->mean[d] /= (double)n_rows;
    for (int64_t k = 0; k < n_rows; k++) {
        const float *r = x + (rows ? rows[k] : k) * (int64_t)dim;
        for (int d = 0; d < dim; d++) {
            double t = r[d] - s->mean[d];
            s->std[d] += t * t;
        }
    }
    for (int d = 0; d < dim; d++) {
        double sd = sqrt(s->std[d] / (double)n_rows);
        if (!isfinite(s->mean[d]) || !isfinite(sd)) {
            prep_stats_free(s);
            return gt_error_set(err, GT_EINVAL, "stats: feature %d is not finite", d);
        }
        s->std[d] = sd > 1e-6 * (1.0 + fabs(s->mean[d])) ? sd : 1.0;
    }
    return GT_OK;
}

void prep_stats_apply(const prep_stats *s, float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float *r = x + i * (int64_t)s->dim;
        for (int d = 0; d < s->dim; d++)
            r[d] = (float)((r[d] - s->mean[d]) / s->std[d]);
    }
}

void prep_stats_invert(const prep_stats *s, float *x, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= 256)
    for (int64_t i = 0; i < n; i++) {
        float *r = x + i * (int64_t)s->dim;
        for (int d = 0; d < s->dim; d++)
            r[d] = (float)(r[d] * s->std[d] + s->mean[d]);
    }
}

static uint64_t prep_fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

#define PREP_STATS_HEADER 16 /* magic 4, version 4, dim 8 */

size_t prep_stats_size(const prep_stats *s)
{
    return PREP_STATS_HEADER + 16 * (size_t)s->dim + 8;
}

int prep_stats_to_bytes(const prep_stats *s, uint8_t *buf, size_t cap, size_t *len,
                        gt_error *err)
{
    size_t need = prep_stats_size(s);
    if (len)
        *len = need;
    if (!buf || cap < need)
        return gt_error_set(err, GT_EINVAL, "stats: buffer of %zu bytes, need %zu", cap, need);
    memcpy(buf, "GTPS", 4);
    buf[4] = 1;
    buf[5] = buf[6] = buf[7] = 0;
    gt_le_put_u64(buf + 8, (uint64_t)s->dim);
    uint8_t *p = buf + PREP_STATS_HEADER;
    for (int d = 0; d < s->dim; d++, p += 8)
        gt_le_put_f64(p, s->mean[d]);
    for (int d = 0; d < s->dim; d++, p += 8)
        gt_le_put_f64(p, s->std[d]);
    gt_le_put_u64(p, prep_fnv1a(buf, need - 8));
    return GT_OK;
}

int prep_stats_from_bytes(prep_stats *s, const uint8_t *buf, size_t len, gt_error *err)
{
    memset(s, 0, sizeof *s);
    if (!buf || len < PREP_STATS_HEADER + 8 || memcmp(buf, "GTPS", 4))
        return gt_error_set(err, GT_EFORMAT, "stats: not a statistics blob");
    if (buf[4] != 1 || buf[5] || buf[6] || buf[7])
        return gt_error_set(err, GT_EFORMAT, "stats: unsupported version %u", buf[4]);
    uint64_t dim = gt_le_get_u64(buf + 8);
    if (dim == 0 || dim > 100000000 || len != PREP_STATS_HEADER + 16 * dim + 8)
        return gt_error_set(err, GT_EFORMAT, "stats: length %zu does not match dimension %llu",
                            len, (unsigned long long)dim);
    if (gt_le_get_u64(buf + len - 8) != prep_fnv1a(buf, len - 8))
        return gt_error_set(err, GT_ECHECKSUM, "stats: checksum mismatch");
    GT_TRY(prep_stats_alloc(s, (int)dim, err));
    const uint8_t *p = buf + PREP_STATS_HEADER;
    for (int d = 0; d < s->dim; d++, p += 8)
        s->mean[d] = gt_le_get_f64(p);
    for (int d = 0; d < s->dim; d++, p += 8) {
        s->std[d] = gt_le_get_f64(p);
        if (!(s->std[d] > 0) || !isfinite(s->std[d]) || !isfinite(s->mean[d])) {
            double bad = s->std[d];
            prep_stats_free(s);
            return gt_error_set(err, GT_EFORMAT, "stats: feature %d has std %g", d, bad);
        }
    }
    return GT_OK;
}
