/* synth: GFlash-style electromagnetic showers in a binning geometry. */
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "rng.h"
#include "synth_internal.h"

/* Stream offsets: showers and their incident energies use unrelated streams
 * of the same seed. */
#define SYNTH_STREAM_ENERGY 0x454e455247590000ULL

/* ------------------------------------------------------------------------ */
/* Materials                                                                 */
/* ------------------------------------------------------------------------ */

int synth_stack_compute(const synth_material *a, const synth_material *b, synth_stack *out,
                        gt_error *err)
{
    const synth_material *m[2] = {a, b};
    for (int i = 0; i < 2; i++)
        if (!(m[i]->z > 0 && m[i]->rho > 0 && m[i]->x0_mm > 0 && m[i]->thickness_mm > 0))
            return gt_error_set(err, GT_EINVAL, "material %d: Z, density, X0 and thickness "
                                "must be positive", i);
    double mass = a->thickness_mm * a->rho + b->thickness_mm * b->rho;
    double d = a->thickness_mm + b->thickness_mm;
    double rho_eff = mass / d;
    double inv_x0 = 0, ec_sum = 0, z = 0;
    for (int i = 0; i < 2; i++) {
        double w = m[i]->thickness_mm * m[i]->rho / mass;
        double share = w * rho_eff / (m[i]->x0_mm * m[i]->rho); /* per mm */
        inv_x0 += share;
        ec_sum += share * 610.0 / (m[i]->z + 1.24);
        z += w * m[i]->z;
    }
    out->z_eff = z;
    out->x0_mm = 1.0 / inv_x0;
    out->ec_mev = out->x0_mm * ec_sum;
    out->rm_mm = out->x0_mm * 21.2 / out->ec_mev;
    out->f_s = out->x0_mm / d;
    out->e_hat = 1.0 / (1.0 + 0.007 * (a->z - b->z));
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* Detector descriptions                                                     */
/* ------------------------------------------------------------------------ */

/* Dataset-1 (ATLAS barrel near |eta| = 0.2) depth slabs in X0 of the Pb/LAr
 * stack: presampler region 0-2, strips 2-6.4, middle 6.4-22.4, back
 * 22.4-24.4, then the tile layers (1.5, 4.1, 1.8 interaction lengths, taken
 * as about 9.5 X0 per lambda of steel/scintillator).  Layers 4-11 and 15-23
 * have no voxels and get zero thickness.  lambda: the slab's thickness in
 * interaction lengths where it is not the Pb/LAr stack's (the tile). */
static const struct { int id; double lo, hi, lambda; } synth_ds1_slabs[] = {
    {0, 0.0, 2.0, 0},    {1, 2.0, 6.4, 0},     {2, 6.4, 22.4, 0},   {3, 22.4, 24.4, 0},
    {12, 24.4, 38.7, 1.5}, {13, 38.7, 77.6, 4.1}, {14, 77.6, 94.7, 1.8},
};

/* Interaction length of a stack of a and b (lambda_a, lambda_b in mm):
 * like the radiation length, the inverses add by thickness. */
static double synth_lambda_mix(const synth_material *a, double lambda_a, const synth_material *b,
                               double lambda_b)
{
    return (a->thickness_mm + b->thickness_mm) /
           (a->thickness_mm / lambda_a + b->thickness_mm / lambda_b);
}

static int synth_is_ds1_like(const geo_geometry *g)
{
    /* every layer with voxels must be one of the slab ids */
    for (int k = 0; k < g->n_active; k++) {
        int id = g->layers[g->active[k]].id, found = 0;
        for (size_t s = 0; s < sizeof synth_ds1_slabs / sizeof synth_ds1_slabs[0]; s++)
            if (synth_ds1_slabs[s].id == id)
                found = 1;
        if (!found)
            return 0;
    }
    return g->n_layers > 12 && g->n_active < g->n_layers;
}

int synth_detector_init(synth_detector *d, const geo_geometry *g, gt_error *err)
{
    memset(d, 0, sizeof *d);
    if (!g || g->n_layers <= 0)
        return gt_error_set(err, GT_EINVAL, "no geometry");
    d->n_layers = g->n_layers;
    d->t_lo = calloc(g->n_layers, sizeof(double));
    d->t_hi = calloc(g->n_layers, sizeof(double));
    d->l_lo = calloc(g->n_layers, sizeof(double));
    d->l_hi = calloc(g->n_layers, sizeof(double));
    if (!d->t_lo || !d->t_hi || !d->l_lo || !d->l_hi) {
        synth_detector_free(d);
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    }
    d->sampling_term = 0.11;
    int rc;
    if (synth_is_ds1_like(g)) {
        synth_material pb = {82, 11.35, 5.612, 1.5}, lar = {18, 1.396, 140.0, 4.2};
        if ((rc = synth_stack_compute(&pb, &lar, &d->stack, err)))
            goto fail;
        d->lambda_mm = synth_lambda_mix(&pb, 175.9, &lar, 857.7);
        d->sampling_fraction = 1.0; /* dataset-1 cells are calibrated energies */
        d->threshold_mev = 1.0;
        snprintf(d->name, sizeof d->name, "Pb/LAr barrel (dataset-1 like)");
        /* empty layers sit at the end of the previous slab */
        double edge = 0, l_edge = 0, x0_per_lambda = d->stack.x0_mm / d->lambda_mm;
        for (int li = 0; li < g->n_layers; li++) {
            d->t_lo[li] = d->t_hi[li] = edge;
            d->l_lo[li] = d->l_hi[li] = l_edge;
            for (size_t s = 0; s < sizeof synth_ds1_slabs / sizeof synth_ds1_slabs[0]; s++)
                if (synth_ds1_slabs[s].id == g->layers[li].id && g->layers[li].n_voxels) {
                    double lo = synth_ds1_slabs[s].lo, hi = synth_ds1_slabs[s].hi;
                    d->t_lo[li] = lo;
                    d->t_hi[li] = edge = hi;
                    /* the first slab with voxels starts the depth in lambda too */
                    d->l_lo[li] = l_edge = fmax(l_edge, lo * x0_per_lambda);
                    d->l_hi[li] = l_edge += synth_ds1_slabs[s].lambda > 0
                                                ? synth_ds1_slabs[s].lambda
                                                : (hi - lo) * x0_per_lambda;
                }
        }
    } else {
        synth_material w = {74, 19.3, 3.504, 1.4}, si = {14, 2.33, 93.7, 0.3};
        if ((rc = synth_stack_compute(&w, &si, &d->stack, err)))
            goto fail;
        d->lambda_mm = synth_lambda_mix(&w, 99.46, &si, 465.2);
        d->sampling_fraction = 0.033;
        d->threshold_mev = 0.5e-3 / 0.033; /* 0.5 keV in silicon = 15.15 keV */
        snprintf(d->name, sizeof d->name, "W/Si, 3.4 mm per layer (dataset-2/3 like)");
        /* each readout layer is two W/Si pairs, 3.4 mm */
        double dt = 3.4 / d->stack.x0_mm, t = 0;
        double x0_per_lambda = d->stack.x0_mm / d->lambda_mm;
        for (int li = 0; li < g->n_layers; li++) {
            d->t_lo[li] = t;
            d->l_lo[li] = t * x0_per_lambda;
            if (g->layers[li].n_voxels)
                t += dt;
            d->t_hi[li] = t;
            d->l_hi[li] = t * x0_per_lambda;
        }
    }
    return GT_OK;
fail:
    synth_detector_free(d);
    return rc;
}

void synth_detector_free(synth_detector *d)
{
    if (!d)
        return;
    free(d->t_lo);
    free(d->t_hi);
    free(d->l_lo);
    free(d->l_hi);
    d->t_lo = d->t_hi = d->l_lo = d->l_hi = NULL;
}

/* ------------------------------------------------------------------------ */
/* Configuration and incident energies                                       */
/* ------------------------------------------------------------------------ */

void synth_config_default(synth_config *c)
{
    memset(c, 0, sizeof *c);
    c->seed = 1;
    c->energy_mode = SYNTH_ENERGY_LOG_UNIFORM;
    c->e_min_mev = 1.0e3;
    c->e_max_mev = 1.0e6;
    c->max_spots = 2000;
    c->threads = 0;
}

int synth_parse_particle(const char *s, synth_particle *p, gt_error *err)
{
    if (!strcmp(s, "electron") || !strcmp(s, "e-") || !strcmp(s, "positron") ||
        !strcmp(s, "e+"))
        *p = SYNTH_PARTICLE_ELECTRON;
    else if (!strcmp(s, "photon") || !strcmp(s, "gamma"))
        *p = SYNTH_PARTICLE_PHOTON;
    else
        return gt_error_set(err, GT_EINVAL, "cannot simulate particle \"%s\" (electron or "
                            "photon)", s);
    return GT_OK;
}

synth_particle synth_particle_for_geometry(const geo_geometry *g)
{
    if (g && !strcmp(g->particle, "photon"))
        return SYNTH_PARTICLE_PHOTON;
    if (g && !strcmp(g->particle, "pion"))
        return SYNTH_PARTICLE_PION;
    return SYNTH_PARTICLE_ELECTRON;
}

const char *synth_particle_shower_name(synth_particle p, synth_simulator s)
{
    if (p == SYNTH_PARTICLE_PHOTON)
        return "photon";
    return p == SYNTH_PARTICLE_PION && s == SYNTH_SIM_CASCADE ? "pion" : "electron";
}

static const char *const synth_simulator_names[] = {"gflash", "cascade"};

int synth_parse_simulator(const char *s, synth_simulator *out, gt_error *err)
{
    for (int i = 0; i < 2; i++)
        if (!strcmp(s, synth_simulator_names[i])) {
            *out = (synth_simulator)i;
            return GT_OK;
        }
    return gt_error_set(err, GT_EINVAL, "unknown simulator \"%s\" (gflash or cascade)", s);
}

const char *synth_simulator_name(synth_simulator s)
{
    return s == SYNTH_SIM_GFLASH || s == SYNTH_SIM_CASCADE ? synth_simulator_names[s] : "?";
}

int synth_parse_energy_mode(const char *s, synth_energy_mode *mode, gt_error *err)
{
    if (!strcmp(s, "log-uniform"))
        *mode = SYNTH_ENERGY_LOG_UNIFORM;
    else if (!strcmp(s, "discrete"))
        *mode = SYNTH_ENERGY_DISCRETE;
    else if (!strcmp(s, "fixed"))
        *mode = SYNTH_ENERGY_FIXED;
    else
        return gt_error_set(err, GT_EINVAL, "unknown energy distribution \"%s\" (expected "
                            "log-uniform, discrete or fixed)", s);
    return GT_OK;
}

/* Powers of two in [lo, hi]: first exponent and count. */
static void synth_pow2_range(double lo, double hi, int *k0, int *n)
{
    int a = (int)ceil(log2(lo) - 1e-9), b = (int)floor(log2(hi) + 1e-9);
    *k0 = a;
    *n = b >= a ? b - a + 1 : 0;
}

int synth_config_check(const synth_config *c, gt_error *err)
{
    if (!(c->e_min_mev > 0) || !isfinite(c->e_min_mev))
        return gt_error_set(err, GT_EINVAL, "minimum energy must be positive (got %g MeV)",
                            c->e_min_mev);
    if (c->energy_mode != SYNTH_ENERGY_FIXED &&
        (!(c->e_max_mev >= c->e_min_mev) || !isfinite(c->e_max_mev)))
        return gt_error_set(err, GT_EINVAL, "maximum energy %g MeV below minimum %g MeV",
                            c->e_max_mev, c->e_min_mev);
    if (c->e_min_mev < 10.0 || c->e_max_mev > 1.0e8)
        return gt_error_set(err, GT_EINVAL, "energies must lie in [10 MeV, 100 TeV]");
    if (c->energy_mode == SYNTH_ENERGY_DISCRETE) {
        int k0, n;
        synth_pow2_range(c->e_min_mev, c->e_max_mev, &k0, &n);
        if (n == 0)
            return gt_error_set(err, GT_EINVAL, "no power of two in [%g, %g] MeV", c->e_min_mev,
                                c->e_max_mev);
    }
    if (c->max_spots < 10 || c->max_spots > 10000000)
        return gt_error_set(err, GT_EINVAL, "max_spots %d outside [10, 1e7]", c->max_spots);
    if (c->particle != SYNTH_PARTICLE_ELECTRON && c->particle != SYNTH_PARTICLE_PHOTON &&
        c->particle != SYNTH_PARTICLE_PION)
        return gt_error_set(err, GT_EINVAL, "unknown particle %d", (int)c->particle);
    if (c->simulator != SYNTH_SIM_GFLASH && c->simulator != SYNTH_SIM_CASCADE)
        return gt_error_set(err, GT_EINVAL, "unknown simulator %d", (int)c->simulator);
    if (c->threads < 0 || c->threads > 4096)
        return gt_error_set(err, GT_EINVAL, "threads %d outside [0, 4096]", c->threads);
    return GT_OK;
}

/* Energy of shower `index` (the configuration is already checked). */
static double synth_energy_at(const synth_config *c, int64_t index)
{
    rng_state r = rng_init(c->seed ^ SYNTH_STREAM_ENERGY, (uint64_t)index);
    switch (c->energy_mode) {
    case SYNTH_ENERGY_DISCRETE: {
        int k0, nk;
        synth_pow2_range(c->e_min_mev, c->e_max_mev, &k0, &nk);
        return ldexp(1.0, k0 + (int)rng_next_below(&r, (uint64_t)nk));
    }
    case SYNTH_ENERGY_FIXED:
        return c->e_min_mev;
    default:
        return c->e_min_mev * exp(log(c->e_max_mev / c->e_min_mev) * rng_next_uniform(&r));
    }
}

int synth_draw_energies(const synth_config *c, int64_t first, int64_t n, float *energies,
                        gt_error *err)
{
    GT_TRY(synth_config_check(c, err));
    for (int64_t i = 0; i < n; i++)
        energies[i] = (float)synth_energy_at(c, first + i);
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* Special functions                                                         */
/* ------------------------------------------------------------------------ */

/* P(a, x) with lga = lgamma(a) precomputed: power series below a + 1,
 * Lentz continued fraction above (both converge fast in their domains). */
double synth_gamma_p_lg(double a, double x, double lga)
{
    if (!(x > 0))
        return 0.0;
    /* far in the tail: the profile is fully contained */
    if (x > a + 12.0 * sqrt(a) + 40.0)
        return 1.0;
    double front = exp(-x + a * log(x) - lga);
    if (x < a + 1.0) {
        double ap = a, term = 1.0 / a, sum = term;
        for (int i = 0; i < 1000; i++) {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if (term < sum * 1e-12)
                break;
        }
        double p = sum * front;
        return p > 1.0 ? 1.0 : p;
    }
    const double tiny = 1e-300;
    double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < tiny)
            d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny)
            c = tiny;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-12)
            break;
    }
    double q = front * h;
    return q > 1.0 ? 0.0 : 1.0 - q;
}

double synth_gamma_p(double a, double x)
{
    return synth_gamma_p_lg(a, x, lgamma(a));
}

/* ------------------------------------------------------------------------ */
/* One shower                                                                */
/* ------------------------------------------------------------------------ */

static double synth_clamp(double x, double lo, double hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

/* Grindhammer-Peters longitudinal parameters for one shower (sampling
 * calorimeter): correlated log-normal T and alpha. */
static void synth_draw_longitudinal(const synth_stack *s, double e_mev, rng_state *r,
                                    double *t_max, double *alpha)
{
    double ly = log(e_mev / s->ec_mev);
    if (ly < 1.0)
        ly = 1.0; /* below a few E_c the parameterisation has no meaning */
    double z = s->z_eff;
    /* homogeneous medium means, then the sampling shifts */
    double t_hom = fmax(ly - 0.812, 0.1); /* exp(<ln T>) of the per-shower law */
    double a_hom = 0.81 + (0.458 + 2.26 / z) * ly;
    double t_mean = fmax(t_hom - 0.55 / s->f_s - 0.69 * (1.0 - s->e_hat), 0.2);
    double a_mean = fmax(a_hom - 0.476 / s->f_s, 1.1);
    double den_t = -2.5 + 1.25 * ly, den_a = -0.82 + 0.79 * ly;
    double sig_t = den_t > 2.0 ? 1.0 / den_t : 0.5;
    double sig_a = den_a > 2.0 ? 1.0 / den_a : 0.5;
    double rho = synth_clamp(0.784 - 0.023 * ly, -0.99, 0.99);
    double z1 = rng_next_normal(r), z2 = rng_next_normal(r);
    double cp = sqrt(0.5 * (1.0 + rho)), cm = sqrt(0.5 * (1.0 - rho));
    double lt = log(t_mean) + sig_t * (cp * z1 + cm * z2);
    double la = log(a_mean) + sig_a * (cp * z1 - cm * z2);
    *t_max = exp(lt);
    *alpha = fmax(exp(la), 1.05);
}

/* Radial profile parameters (in R_M) at relative depth tau. */
static void synth_radial_params(const synth_stack *s, double ln_e_gev, double tau, double *rc,
                                double *rt, double *p)
{
    double z = s->z_eff, eh = 1.0 - s->e_hat, fs = s->f_s, et = exp(-tau);
    double z1 = 0.0251 + 0.00319 * ln_e_gev, z2 = 0.1162 - 0.000381 * z;
    double k1 = 0.659 - 0.00309 * z, k2 = 0.645, k3 = -2.59, k4 = 0.3585 + 0.0421 * ln_e_gev;
    double p1 = 2.632 - 0.00094 * z, p2 = 0.401 + 0.00187 * z, p3 = 1.313 - 0.0686 * ln_e_gev;
    if (p3 < 0.2)
        p3 = 0.2;
    double core = z1 + z2 * tau - 0.0203 * eh + 0.0397 * et / fs;
    double tail = k1 * (exp(k3 * (tau - k2)) + exp(k4 * (tau - k2))) - 0.14 * eh -
                  0.495 * et / fs;
    double x = (p2 - tau) / p3;
    double w = p1 * exp(x - exp(x)) + eh * (0.348 - 0.642 * exp(-(tau - 1) * (tau - 1)) / fs);
    *rc = fmax(core, 0.005);
    *rt = fmax(tail, *rc * 1.5);
    *p = synth_clamp(w, 0.0, 1.0);
}

static void synth_one(const synth_detector *d, const geo_geometry *g, const synth_config *c,
                      double e_mev, rng_state *r, float *out)
{
    const synth_stack *s = &d->stack;
    memset(out, 0, (size_t)g->n_voxels * sizeof *out);
    double e_gev = e_mev * 1e-3, ln_e = log(e_gev);

    double t_max, alpha;
    synth_draw_longitudinal(s, e_mev, r, &t_max, &alpha);
    /* depth where the shower starts: a photon first has to convert */
    double t0 = c->particle == SYNTH_PARTICLE_PHOTON ? -(9.0 / 7.0) * log(rng_next_uniform(r))
                                                     : 0.0;
    double beta = (alpha - 1.0) / t_max;
    /* spot profile: shifted Gamma (GFlash) */
    double t_spot = t_max * (0.698 + 0.00212 * s->z_eff);
    double a_spot = fmax(alpha * (0.639 + 0.00334 * s->z_eff), 1.05);
    double b_spot = (a_spot - 1.0) / t_spot;
    double lg_a = lgamma(alpha), lg_s = lgamma(a_spot);

    double n_spot = 93.0 * log(s->z_eff) * pow(e_gev, 0.876);
    if (n_spot > c->max_spots)
        n_spot = c->max_spots;
    if (n_spot < 1)
        n_spot = 1;

    /* Per-layer relative fluctuation so that the sum over layers has the
     * calorimeter's resolution: var_l = sigma^2 / f_l gives
     * sum f_l^2 var_l = sigma^2. */
    double sigma2 = d->sampling_term * d->sampling_term / e_gev;

    double rm = s->rm_mm;
    double pe_lo = 0, ps_lo = 0, t_prev = -1;
    for (int li = 0; li < g->n_layers; li++) {
        const geo_layer *l = &g->layers[li];
        double raw_lo = d->t_lo[li], raw_hi = d->t_hi[li];
        /* depths measured from the shower start (P(a, x <= 0) = 0) */
        double lo = fmax(raw_lo - t0, 0.0), hi = fmax(raw_hi - t0, 0.0);
        if (raw_lo != t_prev) { /* non-contiguous slab: restart the integrals */
            pe_lo = synth_gamma_p_lg(alpha, beta * lo, lg_a);
            ps_lo = synth_gamma_p_lg(a_spot, b_spot * lo, lg_s);
        }
        double pe_hi = synth_gamma_p_lg(alpha, beta * hi, lg_a);
        double ps_hi = synth_gamma_p_lg(a_spot, b_spot * hi, lg_s);
        double f_e = pe_hi - pe_lo, f_s = ps_hi - ps_lo;
        pe_lo = pe_hi;
        ps_lo = ps_hi;
        t_prev = raw_hi;
        if (l->n_voxels == 0 || !(f_e > 0))
            continue;

        /* layer energy with its share of the sampling fluctuation */
        double s2 = log1p(sigma2 / f_e);
        double e_layer = e_mev * f_e * exp(sqrt(s2) * rng_next_normal(r) - 0.5 * s2);
        if (e_layer < d->threshold_mev)
            continue;

        /* spots: stochastic rounding of the expected count, at least one */
        double ns = n_spot * f_s;
        int64_t k = (int64_t)ns;
        if (rng_next_uniform(r) < ns - (double)k)
            k++;
        if (k < 1)
            k = 1;

        /* energy-weighted mean depth inside thick layers, centre otherwise */
        double t_c = 0.5 * (lo + hi);
        if (hi - lo > 2.0) {
            double m = synth_gamma_p(alpha + 1.0, beta * hi) - synth_gamma_p(alpha + 1.0, beta * lo);
            if (f_e > 1e-12)
                t_c = synth_clamp(alpha / beta * m / f_e, lo, hi);
        }
        double rcore, rtail, p;
        synth_radial_params(s, ln_e, t_c / t_max, &rcore, &rtail, &p);
        double rc_mm = rcore * rm, rt_mm = rtail * rm;
        double r_max = l->r_edges[l->n_r];

        float *lay = out + l->offset;
        double wsum = 0;
        for (int64_t i = 0; i < k; i++) {
            double w = -log(rng_next_uniform(r));
            wsum += w;
            double u = rng_next_uniform(r);
            double rad = (rng_next_uniform(r) < p ? rc_mm : rt_mm) * sqrt(u / (1.0 - u));
            if (rad >= r_max)
                continue; /* lateral leakage */
            int ir = geo_find_r_bin(l, rad);
            int ia = (int)rng_next_below(r, (uint64_t)l->n_alpha);
            lay[ia * l->n_r + ir] += (float)w;
        }
        float scale = (float)(e_layer / wsum);
        for (int v = 0; v < l->n_voxels; v++)
            lay[v] *= scale;
    }
    float thr = (float)d->threshold_mev;
    for (int v = 0; v < g->n_voxels; v++)
        if (out[v] < thr)
            out[v] = 0.0f;
}

int synth_generate(const synth_detector *d, const geo_geometry *g, const synth_config *c,
                   int64_t first, int64_t n, const float *energies, float *energies_out,
                   float *showers, gt_error *err)
{
    GT_TRY(synth_config_check(c, err));
    if (!d || !g || d->n_layers != g->n_layers || !showers || n < 0 || first < 0)
        return gt_error_set(err, GT_EINVAL, "synth_generate: bad arguments");
    if (energies) {
        for (int64_t i = 0; i < n; i++)
            if (!(energies[i] >= 10.0f && energies[i] <= 1.0e8f))
                return gt_error_set(err, GT_EINVAL, "incident energy %lld is %g MeV (must lie "
                                    "in [10 MeV, 100 TeV])", (long long)i, energies[i]);
        if (energies_out && energies_out != energies)
            memcpy(energies_out, energies, (size_t)n * sizeof *energies);
    } else if (energies_out) {
        GT_TRY(synth_draw_energies(c, first, n, energies_out, err));
    }
    const float *src = energies ? energies : energies_out;
    if (c->simulator == SYNTH_SIM_CASCADE && !(d->lambda_mm > 0))
        return gt_error_set(err, GT_EINVAL, "the cascade simulator needs the detector's "
                            "interaction length");
    int threads = c->threads;
#ifdef _OPENMP
    if (threads <= 0)
        threads = omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads)
#endif
    for (int64_t i = 0; i < n; i++) {
        /* drawn energies are rounded to float like the ones written out */
        double e = src ? (double)src[i] : (double)(float)synth_energy_at(c, first + i);
        float *out = showers + i * (int64_t)g->n_voxels;
        if (c->simulator == SYNTH_SIM_CASCADE) {
            /* its own streams: its showers share nothing with GFlash's */
            rng_state r = rng_init(c->seed ^ SYNTH_STREAM_CASCADE, (uint64_t)(first + i));
            synth_cascade_one(d, g, c, e, &r, out);
        } else {
            rng_state r = rng_init(c->seed, (uint64_t)(first + i));
            synth_one(d, g, c, e, &r, out);
        }
    }
    (void)threads;
    return GT_OK;
}
