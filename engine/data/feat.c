/* feat: CaloChallenge high-level features. */
#include "feat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *feat_group_names[FEAT_N_GROUPS] = {
    "Etot/Einc", "Etot", "E_layer", "EC_eta", "EC_phi", "EC_r",
    "width_eta", "width_phi", "width_r", "sparsity",
};

const char *feat_group_name(feat_group g)
{
    return (g >= 0 && g < FEAT_N_GROUPS) ? feat_group_names[g] : "?";
}

static void feat_add(feat_layout *f, feat_group g, int layer_id, feat_binning b, double lo,
                     double hi, int nbins)
{
    feat_info *i = &f->info[f->n_features++];
    if (layer_id >= 0)
        snprintf(i->name, sizeof i->name, "%s_%d", feat_group_names[g], layer_id);
    else
        snprintf(i->name, sizeof i->name, "%s", feat_group_names[g]);
    i->group = g;
    i->layer_id = layer_id;
    i->binning = b;
    i->lo = lo;
    i->hi = hi;
    i->nbins = nbins;
}

int feat_layout_init(feat_layout *f, const geo_geometry *g, float threshold_mev, gt_error *err)
{
    memset(f, 0, sizeof *f);
    if (!g || g->n_active < 1)
        return gt_error_set(err, GT_EINVAL, "feat: geometry has no voxels");
    if (!(threshold_mev >= 0))
        return gt_error_set(err, GT_EINVAL, "feat: threshold must be >= 0");
    f->info = calloc(2 + 8 * (size_t)g->n_active, sizeof *f->info);
    if (!f->info)
        return gt_error_set(err, GT_ENOMEM, "feat: out of memory");
    f->geo = g;
    f->threshold_mev = threshold_mev;
    /* CaloChallenge's lower edge of the energy histograms: 0.5 keV in
     * silicon scaled by the sampling fraction for datasets 2/3, 10 MeV for
     * dataset 1 */
    double e_min = g->regular ? 0.5e-3 / 0.033 : 10.0;
    feat_add(f, FEAT_ETOT_EINC, -1, FEAT_BINS_LINEAR, 0.5, 1.5, 100);
    feat_add(f, FEAT_ETOT, -1, FEAT_BINS_LOG_REF, e_min, 0, 39);
    for (int k = 0; k < g->n_active; k++) {
        const geo_layer *l = &g->layers[g->active[k]];
        double lim = 30, wlim = 30;
        if (!g->regular) {
            int far = l->id == 12 || l->id == 13;
            lim = far ? 500 : 100;
            wlim = far ? 400 : 100;
        }
        double rmax = l->r_edges[l->n_r];
        feat_add(f, FEAT_E_LAYER, l->id, FEAT_BINS_LOG_REF, e_min, 0, 39);
        if (l->n_alpha > 1) {
            feat_add(f, FEAT_EC_ETA, l->id, FEAT_BINS_LINEAR, -lim, lim, 100);
            feat_add(f, FEAT_EC_PHI, l->id, FEAT_BINS_LINEAR, -lim, lim, 100);
            feat_add(f, FEAT_WIDTH_ETA, l->id, FEAT_BINS_LINEAR, 0, wlim, 100);
            feat_add(f, FEAT_WIDTH_PHI, l->id, FEAT_BINS_LINEAR, 0, wlim, 100);
        }
        feat_add(f, FEAT_EC_R, l->id, FEAT_BINS_LINEAR, 0, rmax, 100);
        feat_add(f, FEAT_WIDTH_R, l->id, FEAT_BINS_LINEAR, 0, 0.5 * rmax, 100);
        feat_add(f, FEAT_SPARSITY, l->id, FEAT_BINS_LINEAR, 0, 1, 100);
    }
    return GT_OK;
}

void feat_layout_free(feat_layout *f)
{
    if (f) {
        free(f->info);
        f->info = NULL;
        f->n_features = 0;
    }
}

/* sqrt(<x^2> - <x>^2) clipped at 0, with the CaloChallenge 1e-16 guard on
 * the energy sum so empty layers give 0 rather than NaN. */
static float feat_width(double sx2, double sx, double se)
{
    double m = sx / (se + 1e-16), v = sx2 / (se + 1e-16) - m * m;
    return v > 0 ? (float)sqrt(v) : 0.0f;
}

void feat_compute(const feat_layout *f, const float *shower, float e_inc, float *out)
{
    const geo_geometry *g = f->geo;
    double total = 0;
    int j = 2;
    for (int k = 0; k < g->n_active; k++) {
        const geo_layer *l = &g->layers[g->active[k]];
        double se = 0, sx = 0, sy = 0, sr = 0, sx2 = 0, sy2 = 0, sr2 = 0;
        int hit = 0;
        for (int v = l->offset; v < l->offset + l->n_voxels; v++) {
            double e = shower[v];
            if (e > f->threshold_mev)
                hit++;
            if (e == 0)
                continue;
            double x = g->eta[v], y = g->phi[v], r = g->r[v];
            se += e;
            sx += e * x;
            sy += e * y;
            sr += e * r;
            sx2 += e * x * x;
            sy2 += e * y * y;
            sr2 += e * r * r;
        }
        total += se;
        double d = se + 1e-16;
        out[j++] = (float)se;
        if (l->n_alpha > 1) {
            out[j++] = (float)(sx / d);
            out[j++] = (float)(sy / d);
            out[j++] = feat_width(sx2, sx, se);
            out[j++] = feat_width(sy2, sy, se);
        }
        out[j++] = (float)(sr / d);
        out[j++] = feat_width(sr2, sr, se);
        out[j++] = 1.0f - (float)hit / (float)l->n_voxels;
    }
    out[0] = e_inc > 0 ? (float)(total / e_inc) : 0.0f;
    out[1] = (float)total;
}

void feat_compute_batch(const feat_layout *f, const float *showers, const float *e_inc,
                        int64_t n, float *out)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        feat_compute(f, showers + i * (int64_t)f->geo->n_voxels, e_inc[i],
                     out + i * (int64_t)f->n_features);
}

int feat_classifier_width(const feat_layout *f)
{
    return f->n_features + 1;
}

void feat_classifier_row(const feat_layout *f, const float *feats, float e_inc, float *out)
{
    out[0] = log10f(e_inc);
    for (int j = 0; j < f->n_features; j++) {
        feat_group g = f->info[j].group;
        out[j + 1] = g == FEAT_ETOT || g == FEAT_E_LAYER ? log10f(feats[j] + 1e-8f) : feats[j];
    }
}
