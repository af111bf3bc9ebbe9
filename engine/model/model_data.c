#include "model_data.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calo_h5.h"
#include "gt_embed.h"
#include "gt_le.h"
#include "gt_path.h"
#include "loader.h"
#include "synth.h"

/* The XML files of configs/geometry, embedded at build time (engine/model/CMakeLists.txt). */
extern const gt_embed_file model_geometries[];
extern const size_t model_geometries_count;

/* ------------------------------------------------------------------------ */
/* geometry                                                                 */
/* ------------------------------------------------------------------------ */

int model_geometry_is_builtin(const char *name)
{
    char file[96];
    if ((size_t)snprintf(file, sizeof file, "binning_%s.xml", name) >= sizeof file)
        return 0;
    for (size_t i = 0; i < model_geometries_count; i++)
        if (model_geometries[i].name && strcmp(model_geometries[i].name, file) == 0)
            return 1;
    return 0;
}

int model_geometry_builtin_xml(const char *name, const void **xml, size_t *len, gt_error *err)
{
    char file[96];
    if ((size_t)snprintf(file, sizeof file, "binning_%s.xml", name) < sizeof file)
        for (size_t i = 0; i < model_geometries_count; i++)
            if (model_geometries[i].name && strcmp(model_geometries[i].name, file) == 0) {
                *xml = model_geometries[i].data;
                *len = model_geometries[i].size;
                return GT_OK;
            }
    return gt_error_set(err, GT_ENOTFOUND, "'%s' is not a built-in geometry", name);
}

int model_geometry_load(const char *name, geo_geometry *g, gt_error *err)
{
    char file[96];
    snprintf(file, sizeof file, "binning_%s.xml", name);
    for (size_t i = 0; i < model_geometries_count; i++)
        if (model_geometries[i].name && strcmp(model_geometries[i].name, file) == 0)
            return geo_load_memory(g, (const char *)model_geometries[i].data,
                                   (int)model_geometries[i].size, err);
    if (!strchr(name, '/') && !strstr(name, ".xml"))
        return gt_error_set(err, GT_ENOTFOUND,
                            "unknown geometry '%s' (built in: dataset_1_photons, "
                            "dataset_1_pions, dataset_2, dataset_3; or a path to a binning "
                            "XML file)",
                            name);
    return geo_load_file(g, name, err);
}

int model_geometry_threshold(const geo_geometry *g, float *threshold_mev, gt_error *err)
{
    synth_detector d;
    memset(&d, 0, sizeof d);
    int rc = synth_detector_init(&d, g, err);
    if (rc)
        return rc;
    *threshold_mev = (float)d.threshold_mev;
    synth_detector_free(&d);
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* showers                                                                  */
/* ------------------------------------------------------------------------ */

void model_dataset_free(model_dataset *ds)
{
    if (!ds)
        return;
    geo_free(&ds->geo);
    free(ds->e_inc);
    free(ds->showers);
    memset(ds, 0, sizeof *ds);
}

static int load_file(const model_config *cfg, const char *data_dir, model_dataset *ds,
                     gt_error *err)
{
    char path[PATH_MAX];
    int rc;
    /* a relative path names a file inside the data directory, and nothing
     * outside it, links included (gt_path); an absolute one is the command
     * line's, which the service refuses before a run is recorded */
    if (cfg->dataset_path[0] != '/' && data_dir && data_dir[0]) {
        if ((rc = gt_path_inside(data_dir, cfg->dataset_path, path, sizeof path, err)))
            return gt_error_wrap(err, "dataset.path");
    } else {
        snprintf(path, sizeof path, "%s", cfg->dataset_path);
    }
    calo_h5_reader r;
    if ((rc = calo_h5_open(&r, path, &ds->geo, err))) {
        /* the reader names the file by its real path: say it as given */
        gt_path_scrub(err->message, sizeof err->message, path, cfg->dataset_path);
        return rc;
    }
    int64_t n = r.n_rows;
    if (cfg->max_showers > 0 && cfg->max_showers < n)
        n = cfg->max_showers;
    ds->e_inc = malloc((size_t)n * sizeof(float));
    ds->showers = malloc((size_t)n * (size_t)ds->geo.n_voxels * sizeof(float));
    if (!ds->e_inc || !ds->showers) {
        calo_h5_close(&r);
        return gt_error_set(err, GT_ENOMEM, "out of memory for %lld showers", (long long)n);
    }
    rc = calo_h5_read_rows(&r, 0, n, ds->e_inc, ds->showers, err);
    calo_h5_close(&r);
    if (rc)
        return rc;
    ds->n = n;
    return GT_OK;
}

static int load_synthetic(const model_config *cfg, model_dataset *ds, gt_error *err)
{
    synth_config sc;
    synth_config_default(&sc);
    sc.seed = cfg->synthetic_seed;
    sc.particle = synth_particle_for_geometry(&ds->geo);
    sc.e_min_mev = cfg->synthetic_emin_mev;
    sc.e_max_mev = cfg->synthetic_emax_mev;
    sc.simulator = (synth_simulator)cfg->synthetic_simulator;
    int rc = synth_parse_energy_mode(cfg->synthetic_energy, &sc.energy_mode, err);
    if (rc || (rc = synth_config_check(&sc, err)))
        return rc;
    int64_t n = cfg->synthetic_n;
    if (cfg->max_showers > 0 && cfg->max_showers < n)
        n = cfg->max_showers;
    synth_detector d;
    memset(&d, 0, sizeof d);
    if ((rc = synth_detector_init(&d, &ds->geo, err)))
        return rc;
    ds->e_inc = malloc((size_t)n * sizeof(float));
    ds->showers = malloc((size_t)n * (size_t)ds->geo.n_voxels * sizeof(float));
    if (!ds->e_inc || !ds->showers) {
        synth_detector_free(&d);
        return gt_error_set(err, GT_ENOMEM, "out of memory for %lld showers", (long long)n);
    }
    rc = synth_generate(&d, &ds->geo, &sc, 0, n, NULL, ds->e_inc, ds->showers, err);
    synth_detector_free(&d);
    if (rc)
        return rc;
    ds->n = n;
    return GT_OK;
}

int model_dataset_load(const model_config *cfg, const char *data_dir, model_dataset *ds,
                       gt_error *err)
{
    memset(ds, 0, sizeof *ds);
    int rc = model_geometry_load(cfg->geometry, &ds->geo, err);
    if (rc || (rc = model_geometry_threshold(&ds->geo, &ds->threshold_mev, err)))
        goto fail;
    rc = cfg->dataset_path[0] ? load_file(cfg, data_dir, ds, err)
                              : load_synthetic(cfg, ds, err);
    if (rc)
        goto fail;
    if (ds->n < 4) {
        rc = gt_error_set(err, GT_EINVAL, "dataset has %lld showers; at least 4 are needed",
                          (long long)ds->n);
        goto fail;
    }
    return GT_OK;
fail:
    model_dataset_free(ds);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* representation                                                           */
/* ------------------------------------------------------------------------ */

/* E_dep of zero (nothing over threshold) would make ln infinite: floor it. */
#define RATIO_FLOOR 1e-6f

static float ln_ratio(float e_dep, float e_inc)
{
    float r = prep_encode_energy(e_dep, e_inc);
    return logf(r > RATIO_FLOOR ? r : RATIO_FLOOR);
}

void model_repr_free(model_repr *r)
{
    if (!r)
        return;
    prep_stats_free(&r->cond);
    prep_stats_free(&r->ratio);
    prep_stats_free(&r->shower);
}

#define REPR_MAGIC "GTRP"
/* Version 2 appends the readout threshold (f64, MeV) to version 1's three
 * statistics; version 1 is still read (model_repr_from_bytes). */
#define REPR_VERSION 2

size_t model_repr_size(const model_repr *r)
{
    return 8 + 3 * 8 + prep_stats_size(&r->cond) + prep_stats_size(&r->ratio) +
           prep_stats_size(&r->shower) + 8;
}

int model_repr_to_bytes(const model_repr *r, uint8_t *buf, size_t cap, size_t *len,
                        gt_error *err)
{
    size_t need = model_repr_size(r);
    if (cap < need)
        return gt_error_set(err, GT_EINVAL, "buffer of %zu bytes, need %zu", cap, need);
    memcpy(buf, REPR_MAGIC, 4);
    buf[4] = REPR_VERSION;
    buf[5] = buf[6] = buf[7] = 0;
    size_t off = 8;
    const prep_stats *parts[3] = {&r->cond, &r->ratio, &r->shower};
    for (int i = 0; i < 3; i++) {
        size_t n = 0;
        GT_TRY(prep_stats_to_bytes(parts[i], buf + off + 8, cap - off - 8, &n, err));
        gt_le_put_u64(buf + off, n);
        off += 8 + n;
    }
    gt_le_put_f64(buf + off, (double)r->layout.readout_mev);
    *len = off + 8;
    return GT_OK;
}

int model_repr_from_bytes(model_repr *r, const geo_geometry *geo, float threshold_mev,
                          const uint8_t *buf, size_t len, gt_error *err)
{
    memset(r, 0, sizeof *r);
    if (len < 8 || memcmp(buf, REPR_MAGIC, 4) != 0 || buf[4] < 1 || buf[4] > REPR_VERSION)
        return gt_error_set(err, GT_EFORMAT, "not a model representation block (v1 or v2)");
    const int version = buf[4];
    int rc = prep_layout_init(&r->layout, geo, threshold_mev, err);
    if (rc)
        return rc;
    size_t off = 8;
    prep_stats *parts[3] = {&r->cond, &r->ratio, &r->shower};
    for (int i = 0; i < 3; i++) {
        if (len - off < 8) {
            model_repr_free(r);
            return gt_error_set(err, GT_EFORMAT, "model representation block is truncated");
        }
        uint64_t n = gt_le_get_u64(buf + off);
        if (n > len - off - 8) {
            model_repr_free(r);
            return gt_error_set(err, GT_EFORMAT, "model representation block is truncated");
        }
        if ((rc = prep_stats_from_bytes(parts[i], buf + off + 8, (size_t)n, err))) {
            model_repr_free(r);
            return rc;
        }
        off += 8 + (size_t)n;
    }
    /* The readout threshold the training showers showed (model_arrays_build).
     * A block written before it was recorded (version 1) gets the threshold
     * of the geometry's detector, the caller's threshold_mev: that is what
     * the simulator cut its showers at, and the CaloChallenge threshold of
     * datasets 2 and 3; such a model opens and serves as before, with its
     * sub-threshold voxels now zeroed. */
    if (version >= 2) {
        if (len - off < 8) {
            model_repr_free(r);
            return gt_error_set(err, GT_EFORMAT, "model representation block is truncated");
        }
        double t = gt_le_get_f64(buf + off);
        if (!(t >= 0 && t <= FLT_MAX)) {
            model_repr_free(r);
            return gt_error_set(err, GT_EFORMAT,
                                "model representation block: readout threshold %g MeV", t);
        }
        r->layout.readout_mev = (float)t;
    }
    /* a model trained with rings (and ring hit counts) has their features;
     * the statistics' width says which */
    if (r->shower.dim != r->layout.dim)
        prep_layout_set_rings(&r->layout, 1);
    if (r->shower.dim != r->layout.dim)
        prep_layout_set_counts(&r->layout, 1);
    /* stage 1's statistics are as wide as its vector: with the profile
     * (model.stage1.profile) three features, one before it */
    r->n_profile = r->ratio.dim - 1;
    if (r->cond.dim != 1 || (r->n_profile != 0 && r->n_profile != MODEL_PROFILE_DIM)) {
        int c = r->cond.dim, d1 = r->ratio.dim;
        model_repr_free(r);
        return gt_error_set(err, GT_EFORMAT,
                            "model representation block: %d condition and %d stage-1 "
                            "features (need 1, and 1 or %d)",
                            c, d1, 1 + MODEL_PROFILE_DIM);
    }
    if (r->shower.dim != r->layout.dim) {
        int dim = r->shower.dim, want = r->layout.dim;
        model_repr_free(r);
        return gt_error_set(err, GT_EFORMAT,
                            "model was trained for a %d-feature shower vector, the geometry "
                            "gives %d",
                            dim, want);
    }
    return GT_OK;
}

void model_arrays_free(model_arrays *a)
{
    if (!a)
        return;
    model_repr_free(&a->repr);
    float *bufs[] = {a->x1_train, a->c1_train, a->x1_val,  a->c1_val,  a->x2_train,
                     a->c2_train, a->x2_val,   a->c2_val,  a->t2_train, a->tc_train,
                     a->tx_train, a->t2_val,   a->tc_val,  a->tx_val};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(a->tv_train);
    free(a->tv_val);
    free(a->edep_train);
    free(a->edep_val);
    memset(a, 0, sizeof *a);
}

void model_profile_of(const geo_geometry *g, const float *shower, float *out)
{
    /* sums in double: a 1 TeV shower's layers span six decades */
    double e = 0, m1 = 0, m2 = 0;
    const int L = g->n_active;
    for (int k = 0; k < L; k++) {
        const geo_layer *ly = &g->layers[g->active[k]];
        double el = 0;
        for (int v = 0; v < ly->n_voxels; v++)
            el += shower[ly->offset + v];
        e += el;
        m1 += el * k;
        m2 += el * (double)k * k;
    }
    out[0] = out[1] = 0.0f;
    if (!(e > 0) || L < 2)
        return;
    double mean = m1 / e, var = m2 / e - mean * mean;
    out[0] = (float)(mean / (L - 1));
    out[1] = (float)(sqrt(var > 0 ? var : 0) / (L - 1));
}

/* Encodes the listed rows: x2 [n, dim], c1 [n] (log10 E), x1 [n, dim1] (ln
 * ratio, then the profile with model.stage1.profile). */
static int encode_rows(const model_repr *r, const model_dataset *ds, const int64_t *rows,
                       int64_t n, float *x2, float *c1, float *x1, float *edep, gt_error *err)
{
    const int V = ds->geo.n_voxels, dim = r->layout.dim, D1 = model_repr_dim1(r);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = rows[i];
        float e_dep = 0;
        /* keyed by the dataset row: a shower gets the same noise whichever
         * split it falls in */
        int rc = prep_encode_shower_keyed(&r->layout, ds->showers + (size_t)k * V, (uint64_t)k,
                                          x2 + (size_t)i * dim, &e_dep, err);
        if (rc)
            return gt_error_wrap(err, "shower %lld", (long long)k);
        c1[i] = prep_condition_energy(ds->e_inc[k]);
        x1[(size_t)i * D1] = ln_ratio(e_dep, ds->e_inc[k]);
        if (r->n_profile)
            model_profile_of(&ds->geo, ds->showers + (size_t)k * V, x1 + (size_t)i * D1 + 1);
        edep[i] = e_dep;
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* autoregressive tokens                                                    */
/* ------------------------------------------------------------------------ */

void model_ar_dims_of(const prep_layout *p, int history, int n_profile, model_ar_dims *d)
{
    int vmax = 1;
    for (int k = 0; k < p->n_layers; k++) {
        int nv = p->block_width[k];
        if (nv > vmax)
            vmax = nv;
    }
    d->n_tokens = p->n_layers;
    d->dim = 1 + vmax;
    d->n_ctx = vmax;
    d->history = history;
    d->n_profile = n_profile;
    d->n_cond = 4 + history + n_profile;
}

void model_ar_history_push(double *share, int history, double layer_share)
{
    for (int h = history - 1; h > 0; h--)
        share[h] = share[h - 1];
    if (history > 0)
        share[0] = layer_share;
}

float model_ar_remainder_feature(double r)
{
    /* r spans decades in the late layers; its log says how much is left to
     * place, and 6 decades map onto [0, 1] like the other conditions. */
    double lr = log10(r > 1e-6 ? r : 1e-6);
    return (float)(1.0 + lr / 6.0);
}

void model_ar_valid(const prep_layout *p, int l, int32_t *lo, int32_t *hi)
{
    *lo = l == p->n_layers - 1 ? 1 : 0;
    *hi = 1 + p->block_width[l];
}

/* The share of a shower left after layer l (< L - 1), from the share rem
 * before it and its standardised stick-breaking logit x[l], as
 * prep_stick_join decodes it (the sampler's run_ar does the same on its
 * tokens). */
static double ar_remainder_after(const model_repr *r, const float *x, int l, double rem)
{
    float xs = (float)(x[l] * r->shower.std[l] + r->shower.mean[l]);
    double u = prep_logit_unmap(xs);
    u = u < 0 ? 0 : u > 1 ? 1 : u;
    return rem - u * rem;
}

void model_ar_tokens(const model_repr *r, int history, const float *x2, const float *c2,
                     int64_t n, float *tok, float *cond, float *ctx, int32_t *valid)
{
    const prep_layout *p = &r->layout;
    model_ar_dims d;
    model_ar_dims_of(p, history, r->n_profile, &d);
    const int L = d.n_tokens, D = d.dim, P = d.n_ctx, C = d.n_cond, H = d.history;
    const int C2 = model_repr_cond2(r), K = d.n_profile;
    for (int64_t i = 0; i < n; i++) {
        const float *x = x2 + (size_t)i * p->dim;
        double rem = 1.0, share[MODEL_AR_MAX_HISTORY] = {0};
        for (int l = 0; l < L; l++) {
            size_t row = (size_t)i * L + l;
            float *t = tok + row * D, *cx = ctx + row * P, *cd = cond + row * C;
            memset(t, 0, (size_t)D * sizeof *t);
            memset(cx, 0, (size_t)P * sizeof *cx);
            if (l < L - 1)
                t[0] = x[l];
            memcpy(t + 1, x + p->n_u + p->block_off[l], (size_t)p->block_width[l] * sizeof *t);
            if (l > 0)
                memcpy(cx, x + p->n_u + p->block_off[l - 1],
                       (size_t)p->block_width[l - 1] * sizeof *cx);
            cd[0] = c2[(size_t)i * C2];
            cd[1] = c2[(size_t)i * C2 + 1];
            cd[2] = model_ar_remainder_feature(rem);
            cd[3] = L > 1 ? (float)l / (float)(L - 1) : 0.0f;
            for (int h = 0; h < H; h++)
                cd[4 + h] = model_ar_remainder_feature(share[h]);
            for (int j = 0; j < K; j++)
                cd[4 + H + j] = c2[(size_t)i * C2 + 2 + j];
            model_ar_valid(p, l, &valid[2 * row], &valid[2 * row + 1]);
            if (l < L - 1) {
                double after = ar_remainder_after(r, x, l, rem);
                model_ar_history_push(share, H, rem - after);
                rem = after;
            }
        }
    }
}

/* Keeps the token rows (n showers of L, shower-major) whose shower still
 * has energy that can reach the threshold before the layer: E_dep * r_l at
 * or over the sampler's cut, with r_l computed as model_ar_tokens and the
 * sampler compute it.  Returns the rows kept, moved to the front. */
static int64_t keep_live_tokens(const model_repr *r, const model_ar_dims *d, const float *x2,
                                const float *edep, int64_t n, float *tok, float *cond,
                                float *ctx, int32_t *valid)
{
    const prep_layout *p = &r->layout;
    const int L = d->n_tokens, D = d->dim, P = d->n_ctx, C = d->n_cond;
    const double cut = (double)p->threshold_mev * (1.0 - 1e-6);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *x = x2 + (size_t)i * p->dim;
        double rem = edep[i] > 0 ? (double)edep[i] : 0.0;
        for (int l = 0; l < L; l++) {
            size_t row = (size_t)i * L + l;
            if (rem >= cut) {
                if ((size_t)kept != row) {
                    memmove(tok + (size_t)kept * D, tok + row * D, (size_t)D * sizeof *tok);
                    memmove(cond + (size_t)kept * C, cond + row * C, (size_t)C * sizeof *cond);
                    memmove(ctx + (size_t)kept * P, ctx + row * P, (size_t)P * sizeof *ctx);
                    memmove(valid + 2 * kept, valid + 2 * row, 2 * sizeof *valid);
                }
                kept++;
            }
            if (l < L - 1)
                rem = ar_remainder_after(r, x, l, rem);
        }
    }
    return kept;
}

/* The smallest non-zero voxel energy (MeV) of the listed showers, or 0
 * when they have none: the readout threshold as the data shows it. */
static float smallest_hit(const model_dataset *ds, const int64_t *rows, int64_t n)
{
    const size_t V = (size_t)ds->geo.n_voxels;
    float least = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *x = ds->showers + (size_t)rows[i] * V;
        for (size_t v = 0; v < V; v++)
            if (x[v] > 0 && (least == 0 || x[v] < least))
                least = x[v];
    }
    return least;
}

static int build_tokens(model_arrays *a, int history, int skip_spent, gt_error *err)
{
    model_ar_dims_of(&a->repr.layout, history, a->repr.n_profile, &a->ar_dims);
    const model_ar_dims *d = &a->ar_dims;
    size_t L = (size_t)d->n_tokens, ntr = (size_t)a->n_train * L, nva = (size_t)a->n_val * L;
    a->ar = 1;
    a->t2_train = malloc(ntr * d->dim * sizeof(float));
    a->tc_train = malloc(ntr * d->n_cond * sizeof(float));
    a->tx_train = malloc(ntr * d->n_ctx * sizeof(float));
    a->tv_train = malloc(ntr * 2 * sizeof(int32_t));
    a->t2_val = malloc(nva * d->dim * sizeof(float));
    a->tc_val = malloc(nva * d->n_cond * sizeof(float));
    a->tx_val = malloc(nva * d->n_ctx * sizeof(float));
    a->tv_val = malloc(nva * 2 * sizeof(int32_t));
    if (!a->t2_train || !a->tc_train || !a->tx_train || !a->tv_train || !a->t2_val ||
        !a->tc_val || !a->tx_val || !a->tv_val)
        return gt_error_set(err, GT_ENOMEM, "out of memory building %zu layer tokens",
                            ntr + nva);
    model_ar_tokens(&a->repr, history, a->x2_train, a->c2_train, a->n_train, a->t2_train,
                    a->tc_train, a->tx_train, a->tv_train);
    model_ar_tokens(&a->repr, history, a->x2_val, a->c2_val, a->n_val, a->t2_val, a->tc_val,
                    a->tx_val, a->tv_val);
    a->n_tok_train = (int64_t)ntr;
    a->n_tok_val = (int64_t)nva;
    /* model.stage2.skip_spent_layers: the sampler never calls the network
     * for a layer once the shower's remaining energy is under the threshold
     * (model_sampler_ar.c), so those rows teach nothing it uses, and
     * they taught harm: a spent shower's layers all read "place nothing"
     * (u = 0), which a generated shower with a small leftover then copied
     * down to its last layer */
    if (skip_spent) {
        a->n_tok_train = keep_live_tokens(&a->repr, d, a->x2_train, a->edep_train, a->n_train,
                                          a->t2_train, a->tc_train, a->tx_train, a->tv_train);
        a->n_tok_val = keep_live_tokens(&a->repr, d, a->x2_val, a->edep_val, a->n_val, a->t2_val,
                                        a->tc_val, a->tx_val, a->tv_val);
        if (a->n_tok_train < 1 || a->n_tok_val < 1)
            return gt_error_set(err, GT_EINVAL, "no shower has energy over the threshold");
    }
    return GT_OK;
}

int model_arrays_build(const model_config *cfg, const model_dataset *ds, model_arrays *a,
                       gt_error *err)
{
    memset(a, 0, sizeof *a);
    int64_t *tr = NULL, *va = NULL, ntr = 0, nva = 0;
    int rc = loader_split(ds->n, cfg->val_fraction, cfg->split_seed, &tr, &ntr, &va, &nva, err);
    if (rc)
        return rc;
    if (ntr < 1 || nva < 1) {
        free(tr);
        free(va);
        return gt_error_set(err, GT_EINVAL,
                            "the split leaves %lld training and %lld validation showers",
                            (long long)ntr, (long long)nva);
    }
    if ((rc = prep_layout_init(&a->repr.layout, &ds->geo, ds->threshold_mev, err)))
        goto fail;
    a->repr.layout.dequantize = cfg->stage2.dequantize;
    a->repr.layout.voxel_alpha = cfg->stage2.voxel_alpha;
    a->repr.layout.dequant_top = cfg->stage2.dequantize_top;
    a->repr.layout.keep_largest = cfg->stage2.keep_largest;
    prep_layout_set_rings(&a->repr.layout, cfg->stage2.rings);
    prep_layout_set_counts(&a->repr.layout, cfg->stage2.ring_counts);
    prep_layout_set_count_stick(&a->repr.layout, cfg->stage2.count_stick);
    /* The readout threshold the sampler applies last (prep_decode_shower):
     * the training showers' smallest hit, the detector's threshold as the
     * data shows it (about 15.15 keV in the CaloChallenge dataset-2 files),
     * not the geometry's guess; the representation keeps the geometry's
     * threshold, so the encoded vectors do not depend on it.  Data without
     * a hit keep the geometry's. */
    const float least = smallest_hit(ds, tr, ntr);
    if (least > 0)
        a->repr.layout.readout_mev = least;
    a->repr.n_profile = cfg->stage1.profile ? MODEL_PROFILE_DIM : 0;
    const int dim = a->repr.layout.dim, D1 = model_repr_dim1(&a->repr),
              C2 = model_repr_cond2(&a->repr);
    a->dim2 = dim;
    a->n_train = ntr;
    a->n_val = nva;
    a->x1_train = malloc((size_t)ntr * D1 * sizeof(float));
    a->c1_train = malloc((size_t)ntr * sizeof(float));
    a->x1_val = malloc((size_t)nva * D1 * sizeof(float));
    a->c1_val = malloc((size_t)nva * sizeof(float));
    a->x2_train = malloc((size_t)ntr * dim * sizeof(float));
    a->x2_val = malloc((size_t)nva * dim * sizeof(float));
    a->c2_train = malloc((size_t)ntr * C2 * sizeof(float));
    a->c2_val = malloc((size_t)nva * C2 * sizeof(float));
    if (!a->x1_train || !a->c1_train || !a->x1_val || !a->c1_val || !a->x2_train ||
        !a->x2_val || !a->c2_train || !a->c2_val) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory encoding %lld showers",
                          (long long)ds->n);
        goto fail;
    }
    a->edep_train = malloc((size_t)ntr * sizeof(float));
    a->edep_val = malloc((size_t)nva * sizeof(float));
    if (!a->edep_train || !a->edep_val) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory encoding %lld showers",
                          (long long)ds->n);
        goto fail;
    }
    if ((rc = encode_rows(&a->repr, ds, tr, ntr, a->x2_train, a->c1_train, a->x1_train,
                          a->edep_train, err)) ||
        (rc = encode_rows(&a->repr, ds, va, nva, a->x2_val, a->c1_val, a->x1_val, a->edep_val,
                          err)))
        goto fail;
    /* Statistics from the training split only. */
    if ((rc = prep_stats_fit(&a->repr.cond, a->c1_train, ntr, 1, NULL, ntr, err)) ||
        (rc = prep_stats_fit(&a->repr.ratio, a->x1_train, ntr, D1, NULL, ntr, err)) ||
        (rc = prep_stats_fit(&a->repr.shower, a->x2_train, ntr, dim, NULL, ntr, err)))
        goto fail;
    /* model.stage2.layer_weight: the stick-breaking columns standardised to
     * that std.  In a token of 1 + ~150 columns the layer's share of the
     * energy is one column of the loss, yet it decides whether the layer is
     * empty; the checkpoint keeps these statistics, so the sampler needs
     * nothing else to undo it. */
    for (int k = 0; k < a->repr.layout.n_u; k++)
        a->repr.shower.std[k] /= cfg->stage2.layer_weight;
    /* With ring hit counts, the ring columns (fractions and counts: 18 of a
     * dataset-2 layer's 162) decide the radial shape and the hits as the
     * stick-breaking decides the layer's energy; they get the same weight. */
    const prep_layout *lay = &a->repr.layout;
    for (int k = 0; lay->counts && k < lay->n_layers; k++) {
        const int nr = lay->geo->layers[lay->geo->active[k]].n_r;
        for (int j = 0; j < 2 * nr; j++)
            a->repr.shower.std[lay->n_u + lay->block_off[k] + j] /= cfg->stage2.layer_weight;
    }
    prep_stats_apply(&a->repr.cond, a->c1_train, ntr);
    prep_stats_apply(&a->repr.cond, a->c1_val, nva);
    prep_stats_apply(&a->repr.ratio, a->x1_train, ntr);
    prep_stats_apply(&a->repr.ratio, a->x1_val, nva);
    prep_stats_apply(&a->repr.shower, a->x2_train, ntr);
    prep_stats_apply(&a->repr.shower, a->x2_val, nva);
    for (int64_t i = 0; i < ntr; i++) {
        a->c2_train[(size_t)i * C2] = a->c1_train[i];
        memcpy(a->c2_train + (size_t)i * C2 + 1, a->x1_train + (size_t)i * D1,
               (size_t)D1 * sizeof(float));
    }
    for (int64_t i = 0; i < nva; i++) {
        a->c2_val[(size_t)i * C2] = a->c1_val[i];
        memcpy(a->c2_val + (size_t)i * C2 + 1, a->x1_val + (size_t)i * D1,
               (size_t)D1 * sizeof(float));
    }
    if (cfg->stage2.mode == MODEL_MODE_AUTOREGRESSIVE &&
        (rc = build_tokens(a, cfg->stage2.history, cfg->stage2.skip_spent_layers, err)))
        goto fail;
    free(a->edep_train);
    free(a->edep_val);
    a->edep_train = a->edep_val = NULL;
    free(tr);
    free(va);
    return GT_OK;
fail:
    free(tr);
    free(va);
    model_arrays_free(a);
    return rc;
}

model_stage_data model_arrays_stage(const model_arrays *a, int stage)
{
    model_stage_data d;
    memset(&d, 0, sizeof d);
    d.rows_per_item = 1;
    d.n_train = (int)a->n_train;
    d.n_val = (int)a->n_val;
    if (stage == 1) {
        d.dim = model_repr_dim1(&a->repr);
        d.n_cond = 1;
        d.x_train = a->x1_train;
        d.c_train = a->c1_train;
        d.x_val = a->x1_val;
        d.c_val = a->c1_val;
    } else if (a->ar) {
        const model_ar_dims *ad = &a->ar_dims;
        d.n_train = (int)a->n_tok_train;
        d.n_val = (int)a->n_tok_val;
        d.dim = ad->dim;
        d.n_cond = ad->n_cond;
        d.x_train = a->t2_train;
        d.c_train = a->tc_train;
        d.x_val = a->t2_val;
        d.c_val = a->tc_val;
        d.n_ctx = ad->n_ctx;
        d.ctx_train = a->tx_train;
        d.ctx_val = a->tx_val;
        d.valid_train = a->tv_train;
        d.valid_val = a->tv_val;
        /* val_size counts showers: their mean number of rows */
        d.rows_per_item = (int)((a->n_tok_val + a->n_val - 1) / a->n_val);
    } else {
        d.dim = a->dim2;
        d.n_cond = model_repr_cond2(&a->repr);
        d.x_train = a->x2_train;
        d.c_train = a->c2_train;
        d.x_val = a->x2_val;
        d.c_val = a->c2_val;
        if (a->repr.layout.n_layers >= 2) {
            d.sb_layers = a->repr.layout.n_layers;
            d.sb_mean = a->repr.shower.mean;
            d.sb_std = a->repr.shower.std;
        }
    }
    return d;
}

void model_repr_conditions(const model_repr *r, const float *e_inc, int64_t n, float *c1)
{
    for (int64_t i = 0; i < n; i++)
        c1[i] = prep_condition_energy(e_inc[i]);
    prep_stats_apply(&r->cond, c1, n);
}

void model_repr_energy(const model_repr *r, const float *e_inc, const float *c1,
                       const float *x1, int64_t n, float *e_dep, float *c2)
{
    const int D1 = model_repr_dim1(r), C2 = model_repr_cond2(r);
    for (int64_t i = 0; i < n; i++) {
        float z = x1[(size_t)i * D1];
        float ln = (float)(z * r->ratio.std[0] + r->ratio.mean[0]);
        /* A generated ratio far outside the data is clamped: a shower never
         * deposits more than a few times its sampling-corrected energy. */
        if (ln > 2.0f)
            ln = 2.0f;
        float ratio = expf(ln);
        e_dep[i] = ratio > RATIO_FLOOR ? prep_decode_energy(ratio, e_inc[i]) : 0.0f;
        /* stage 2 reads stage 1's vector as it came (standardised) */
        c2[(size_t)i * C2] = c1[i];
        memcpy(c2 + (size_t)i * C2 + 1, x1 + (size_t)i * D1, (size_t)D1 * sizeof(float));
    }
}

void model_repr_showers(const model_repr *r, float *x2, const float *e_dep, int64_t n,
                        float *showers)
{
    prep_stats_invert(&r->shower, x2, n);
    prep_decode_showers(&r->layout, x2, e_dep, n, showers);
}
