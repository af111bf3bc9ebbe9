/* eval_spectrum: the voxel energy spectrum (eval_spectrum.h). */
#include "eval_spectrum.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "metric.h"

/* First layer index of each depth group; the last runs to the end. */
static const int depth_first[EVAL_SPECTRUM_DEPTHS] = {0, 5, 10, 20};

/* log10 of each unit's range */
static const double log_lo[2] = {-3.0, -8.0}, log_hi[2] = {6.0, 0.0};

void eval_spectrum_init(eval_spectrum *s, const geo_geometry *g)
{
    memset(s, 0, sizeof *s);
    for (int l = 0; l < GEO_MAX_LAYERS; l++)
        s->group_of_layer[l] = -1;
    for (int d = 0; d < EVAL_SPECTRUM_DEPTHS; d++) {
        int lo = depth_first[d];
        int hi = d + 1 < EVAL_SPECTRUM_DEPTHS ? depth_first[d + 1] - 1 : g->n_layers - 1;
        if (hi >= g->n_layers)
            hi = g->n_layers - 1;
        int voxels = 0;
        for (int l = lo; l <= hi; l++)
            voxels += g->layers[l].n_voxels;
        if (voxels == 0)
            continue;
        for (int per_einc = 1; per_einc >= 0; per_einc--) {
            eval_spectrum_feature *f = &s->f[s->n];
            f->per_einc = per_einc;
            f->layer_lo = lo;
            f->layer_hi = hi;
            snprintf(f->name, sizeof f->name, "%s_L%d-%d", per_einc ? "E_vox/E_inc" : "E_vox_MeV",
                     lo, hi);
            s->n++;
        }
        for (int l = lo; l <= hi; l++)
            s->group_of_layer[l] = s->n - 2;   /* the group's first feature */
    }
}

static int bin_of(double v, int per_einc)
{
    if (!(v > 0))
        return 0;
    double x = (log10(v) - log_lo[per_einc]) / (log_hi[per_einc] - log_lo[per_einc]);
    int b = (int)floor(x * EVAL_SPECTRUM_BINS);
    return b < 0 ? 0 : b >= EVAL_SPECTRUM_BINS ? EVAL_SPECTRUM_BINS - 1 : b;
}

void eval_spectrum_add(eval_spectrum *s, const geo_geometry *g, const float *showers,
                       const float *e_inc, int64_t m)
{
    const int V = g->n_voxels;
    for (int64_t i = 0; i < m; i++) {
        const float *x = showers + (size_t)i * V;
        for (int v = 0; v < V; v++) {
            if (x[v] == 0.0f)
                continue;
            int k = s->group_of_layer[g->voxel_layer[v]];
            if (k < 0)
                continue;
            /* features 2k' (per E_inc) and 2k' + 1 (MeV) of a depth group */
            s->counts[k][bin_of((double)x[v] / e_inc[i], 1)] += 1;
            s->counts[k + 1][bin_of(x[v], 0)] += 1;
            s->hits++;
        }
    }
}

void eval_spectrum_edges(const eval_spectrum *s, int k, double *edges)
{
    int u = s->f[k].per_einc;
    for (int b = 0; b <= EVAL_SPECTRUM_BINS; b++)
        edges[b] = pow(10.0, log_lo[u] + (log_hi[u] - log_lo[u]) * b / EVAL_SPECTRUM_BINS);
}

double eval_spectrum_separation(const eval_spectrum *a, const eval_spectrum *b, int k)
{
    return metric_separation_power(a->counts[k], b->counts[k], EVAL_SPECTRUM_BINS);
}
