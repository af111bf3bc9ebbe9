/* synth_cascade: the second shower simulator ("cascade"), shaped unlike
 * GFlash on purpose, so that a model change that helps on one simulator's
 * quirks only shows as such.  engine/data/README.md ("The cascade
 * simulator") has the formulas and why each differs from GFlash's.
 *
 * One shower:
 *  1. a toy branching tree: the incident particle travels to its first
 *     interaction (a hard bremsstrahlung, a conversion, a pion's inelastic
 *     interaction), drawn per shower, then splits; daughters above an
 *     energy split again, up to CAS_MAX_LEAVES sub-showers.  The charged
 *     particles of the tree leave tracks of minimum-ionising deposits;
 *  2. every sub-shower deposits a Longo-Sestili gamma profile with a fixed
 *     slope b from where it starts, its maximum at ln(E_j / E_c) + C_j;
 *  3. a pion's interaction splits its energy into an electromagnetic part
 *     (pi0 photons, into the tree) and a hadronic part with its own gamma
 *     profile in interaction lengths and a broad radial profile;
 *  4. a layer's energy comes as quanta whose count is Poisson: charged
 *     track crossings (Moyal, Landau-like), soft deposits and hadronic
 *     ones (exponential), grouped beyond max_spots per shower;
 *  5. radially a Gaussian core and an exponential halo that widen with
 *     the depth after the shower's start;
 *  6. voxels under the readout threshold are zeroed. */
#include <math.h>
#include <string.h>

#include "synth_internal.h"

/* ------------------------------------------------------------------------ */
/* Constants (X0 and R_M are the stack's; energies MeV)                     */
/* ------------------------------------------------------------------------ */

#define CAS_MAX_LEAVES 8     /* sub-showers of one shower                      */
#define CAS_MAX_TRACKS 32    /* charged steps of the tree, and a pion's track  */
#define CAS_SPLIT_DIV 8.0    /* a particle splits while above E / 8 ...        */
#define CAS_SPLIT_MIN 2000.0 /* ... and above 2 GeV                            */
#define CAS_BREM_VMIN 0.1    /* a hard bremsstrahlung gives the photon > 10%   */
#define CAS_PAIR_PATH (9.0 / 7.0) /* photon mean free path, X0                */
#define CAS_B 0.5            /* Longo-Sestili slope b, per X0                  */
#define CAS_B_SIGMA 0.18     /* per-shower log-normal spread of b              */
#define CAS_B_LEAF_SIGMA 0.08 /* and per sub-shower                            */
#define CAS_TMAX_E (-1.0)    /* maximum of an electron sub-shower: ln y + C   */
#define CAS_TMAX_GAMMA (-0.5)/* ... of a photon sub-shower                     */
#define CAS_MOYAL_W 0.08     /* Moyal width / most probable deposit of a crossing */
#define CAS_MOYAL_MEAN 1.2703628454614782 /* E[-ln Z^2] = gamma + ln 2      */
#define CAS_MOYAL_MAX 30.0   /* the Moyal variable is cut there (mean moves < 1e-6) */
#define CAS_SOFT_Q 0.2       /* a soft deposit's mean, in track crossings      */
#define CAS_HAD_Q 4.0        /* a hadronic deposit's mean, in track crossings  */
#define CAS_MIN_SPOTS 16     /* spots of one kind in one layer before grouping */
#define CAS_TRACK_R 0.03     /* Gaussian width of a tree track's deposits, R_M */
/* pions (energies in GeV where a formula says so) */
#define CAS_FEM_K 0.82       /* <f_em> = 1 - (E/GeV)^(k - 1) (Groom, Wigmans) */
#define CAS_FEM_MIN 0.1
#define CAS_FEM_CONC 8.0     /* f_em ~ Beta with a + b = 8                     */
#define CAS_H_E 0.6          /* visible share of the hadronic energy (h/e)     */
#define CAS_H_E_SIGMA 0.15   /* its per-shower log-normal spread               */

/* ------------------------------------------------------------------------ */
/* Random variates                                                           */
/* ------------------------------------------------------------------------ */

static double cas_exp(rng_state *r)
{
    return -log(rng_next_uniform(r));
}

/* Poisson(mu): multiplication below 30, a rounded normal above (the
 * quanta counts only need the right mean and width there). */
static int64_t cas_poisson(rng_state *r, double mu)
{
    if (!(mu > 0))
        return 0;
    if (mu < 30.0) {
        double lim = exp(-mu), p = rng_next_uniform(r);
        int64_t k = 0;
        while (p > lim) {
            p *= rng_next_uniform(r);
            k++;
        }
        return k;
    }
    double x = floor(mu + sqrt(mu) * rng_next_normal(r) + 0.5);
    return x > 0 ? (int64_t)x : 0;
}

/* Gamma(a, 1) by Marsaglia and Tsang; a < 1 through Gamma(a + 1) U^(1/a). */
static double cas_gamma(rng_state *r, double a)
{
    if (a < 1.0)
        return cas_gamma(r, a + 1.0) * pow(rng_next_uniform(r), 1.0 / a);
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_next_normal(r), v = 1.0 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        if (log(rng_next_uniform(r)) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
}

/* Photon energy fraction of a hard bremsstrahlung (v > CAS_BREM_VMIN) from
 * the complete-screening spectrum (4/3 (1 - v) + v^2) / v: log-uniform
 * proposals kept with probability (4/3 (1 - v) + v^2) / (4/3). */
static double cas_brem_fraction(rng_state *r)
{
    for (;;) {
        double v = exp(log(CAS_BREM_VMIN) * rng_next_uniform(r));
        if (rng_next_uniform(r) * (4.0 / 3.0) <= (4.0 / 3.0) * (1.0 - v) + v * v)
            return v;
    }
}

/* Electron energy fraction of a conversion, 1 - 4/3 v (1 - v). */
static double cas_pair_fraction(rng_state *r)
{
    for (;;) {
        double v = rng_next_uniform(r);
        if (rng_next_uniform(r) <= 1.0 - (4.0 / 3.0) * v * (1.0 - v))
            return v;
    }
}

/* Mean free path of a hard bremsstrahlung in X0: 1 / the spectrum's
 * integral over [v_min, 1]. */
static double cas_brem_path(void)
{
    double v = CAS_BREM_VMIN;
    return 1.0 / ((4.0 / 3.0) * -log(v) - (4.0 / 3.0) * (1.0 - v) + 0.5 * (1.0 - v * v));
}

/* ------------------------------------------------------------------------ */
/* The tree of sub-showers                                                   */
/* ------------------------------------------------------------------------ */

typedef struct cas_part {
    double e, t; /* energy (MeV), depth (X0) where it is */
    int photon;
    int trk;     /* its track in cas_shower (charged), -1: none yet */
} cas_part;

typedef struct cas_shower {
    cas_part leaf[CAS_MAX_LEAVES]; /* sub-showers: energy and start depth */
    int n_leaf;
    double trk_from[CAS_MAX_TRACKS], trk_to[CAS_MAX_TRACKS]; /* charged steps, X0 */
    int n_trk;
    double t_start; /* depth of the first interaction, X0 */
} cas_shower;

/* Track k runs on to `to`; k < 0 starts a new one at from (its index, or
 * -1 when there is no room: the path then leaves no deposits). */
static int cas_track(cas_shower *s, int k, double from, double to)
{
    if (k >= 0) {
        s->trk_to[k] = to;
        return k;
    }
    if (s->n_trk == CAS_MAX_TRACKS)
        return -1;
    s->trk_from[s->n_trk] = from;
    s->trk_to[s->n_trk] = to;
    return s->n_trk++;
}

/* Runs the particles of start through the tree: each travels to its next
 * interaction (a hard bremsstrahlung for e+-, a conversion for a photon),
 * losing E_c per X0 to ionisation on the way when charged (Rossi), then
 * splits while above e_split and the sub-shower budget allows, or becomes
 * a sub-shower starting there.  The first interaction of the first
 * particle is the shower's start when set_start. */
static void cas_tree(cas_shower *s, const cas_part *start, int n_start, double e_split,
                     double ec, rng_state *r, int set_start)
{
    cas_part stack[2 * CAS_MAX_LEAVES + 2];
    int top = 0;
    double brem_path = cas_brem_path();
    for (int i = n_start - 1; i >= 0; i--)
        stack[top++] = start[i];
    while (top > 0) {
        cas_part p = stack[--top];
        double step = cas_exp(r) * (p.photon ? CAS_PAIR_PATH : brem_path);
        if (!p.photon) {
            p.trk = cas_track(s, p.trk, p.t, p.t + step);
            p.e -= fmin(ec * step, 0.5 * p.e);
        }
        p.t += step;
        if (set_start) {
            s->t_start = p.t;
            set_start = 0;
        }
        if (p.e > e_split && s->n_leaf + top + 2 <= CAS_MAX_LEAVES) {
            double v = p.photon ? cas_pair_fraction(r) : cas_brem_fraction(r);
            /* a photon gives an e- and an e+ (new tracks); an electron a
             * photon and itself (its track goes on) */
            stack[top++] = (cas_part){p.e * (1.0 - v), p.t, 0, p.photon ? -1 : p.trk};
            stack[top++] = (cas_part){p.e * v, p.t, !p.photon, -1};
        } else if (s->n_leaf < CAS_MAX_LEAVES) {
            s->leaf[s->n_leaf++] = p;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Longitudinal profiles                                                     */
/* ------------------------------------------------------------------------ */

/* Adds e times the gamma(a, b) profile starting at depth t0 to prof[] over
 * the layers' ranges [lo[l], hi[l]], and the energy-weighted depth inside
 * each layer to depth[] (the layer's centre for thin layers, the profile's
 * mean over the layer for those thicker than 2). */
static void cas_add_profile(const geo_geometry *g, const double *lo, const double *hi, double e,
                            double t0, double a, double b, double *prof, double *depth)
{
    double lga = lgamma(a), p_lo = 0, prev = -1;
    for (int li = 0; li < g->n_layers; li++) {
        double x_lo = lo[li] - t0, x_hi = hi[li] - t0;
        if (!(hi[li] > lo[li]) || x_hi <= 0 || g->layers[li].n_voxels == 0) {
            prev = -1;
            continue;
        }
        if (lo[li] != prev)
            p_lo = synth_gamma_p_lg(a, b * fmax(x_lo, 0.0), lga);
        double p_hi = synth_gamma_p_lg(a, b * x_hi, lga), f = p_hi - p_lo;
        p_lo = p_hi;
        prev = hi[li];
        if (!(f > 0))
            continue;
        double t_c = 0.5 * (lo[li] + hi[li]);
        if (x_hi - fmax(x_lo, 0.0) > 2.0 && f > 1e-12) {
            double m = synth_gamma_p(a + 1.0, b * x_hi) - synth_gamma_p(a + 1.0, b * fmax(x_lo, 0));
            t_c = fmin(fmax(t0 + a / b * m / f, lo[li]), hi[li]);
        }
        prof[li] += e * f;
        depth[li] += e * f * t_c;
    }
}

/* The sub-showers' Longo-Sestili profiles: b = CAS_B, log-normal per shower
 * (b_shower) and per sub-shower, a = 1 + b t_max. */
static void cas_em_profiles(const cas_shower *s, const synth_detector *d, const geo_geometry *g,
                            double b_shower, rng_state *r, double *em, double *em_t)
{
    double ec = d->stack.ec_mev;
    for (int j = 0; j < s->n_leaf; j++) {
        const cas_part *p = &s->leaf[j];
        if (!(p->e > 0))
            continue;
        double t_max = log(p->e / ec) + (p->photon ? CAS_TMAX_GAMMA : CAS_TMAX_E);
        double b = CAS_B * b_shower * exp(CAS_B_LEAF_SIGMA * rng_next_normal(r));
        double a = 1.0 + b * fmax(t_max, 0.2);
        cas_add_profile(g, d->t_lo, d->t_hi, p->e, p->t, a, b, em, em_t);
    }
}

/* ------------------------------------------------------------------------ */
/* Deposits                                                                  */
/* ------------------------------------------------------------------------ */

typedef enum cas_kind { CAS_TRACK, CAS_SOFT, CAS_HADRON } cas_kind;

/* Where deposits land: a Gaussian core of width core (mm) and, with
 * probability p_halo, an exponential halo r ~ Gamma(2, halo). */
typedef struct cas_radial {
    double core, halo, p_halo;
} cas_radial;

/* One quantum of `kind` relative to its mean (mean 1).  A track crossing:
 * a Moyal deposit MPV (1 + w lambda), lambda = -ln Z^2, times the path
 * 1 + theta^2 / 2 with theta^2 exponential of mean theta2. */
static double cas_quantum(rng_state *r, cas_kind kind, double theta2)
{
    if (kind != CAS_TRACK)
        return cas_exp(r);
    double z = rng_next_normal(r);
    double lam = z != 0 ? fmin(-log(z * z), CAS_MOYAL_MAX) : CAS_MOYAL_MAX;
    double path = 1.0 + 0.5 * theta2 * cas_exp(r);
    return (1.0 + CAS_MOYAL_W * lam) / (1.0 + CAS_MOYAL_W * CAS_MOYAL_MEAN) * path /
           (1.0 + 0.5 * theta2);
}

/* The relative spread of one quantum (for grouped quanta). */
static double cas_quantum_cv(cas_kind kind, double theta2)
{
    if (kind != CAS_TRACK)
        return 1.0;
    double moyal = CAS_MOYAL_W * 2.2214414690791831 / (1.0 + CAS_MOYAL_W * CAS_MOYAL_MEAN);
    double path = 0.5 * theta2 / (1.0 + 0.5 * theta2);
    return sqrt(moyal * moyal + path * path);
}

static void cas_place(float *lay, const geo_layer *l, rng_state *r, const cas_radial *rad,
                      double e)
{
    double rr = rng_next_uniform(r) < rad->p_halo
                    ? rad->halo * -log(rng_next_uniform(r) * rng_next_uniform(r))
                    : rad->core * sqrt(-2.0 * log(rng_next_uniform(r)));
    if (rr >= l->r_edges[l->n_r])
        return; /* lateral leakage */
    int ir = geo_find_r_bin(l, rr);
    int ia = (int)rng_next_below(r, (uint64_t)l->n_alpha);
    lay[ia * l->n_r + ir] += (float)e;
}

/* `energy` on average as quanta of mean q: a Poisson count, each quantum
 * its own spot up to cap; beyond, cap spots of n / cap quanta each, whose
 * sum is drawn as a normal of the right width. */
static void cas_quanta(float *lay, const geo_layer *l, rng_state *r, const cas_radial *rad,
                       double energy, double q, cas_kind kind, double theta2, int64_t cap)
{
    int64_t n = cas_poisson(r, energy / q);
    if (n == 0)
        return;
    int64_t k = n <= cap ? n : cap;
    double cv = cas_quantum_cv(kind, theta2);
    for (int64_t i = 0; i < k; i++) {
        int64_t m = n / k + (i < n % k);
        double dep = m == 1 ? q * cas_quantum(r, kind, theta2)
                            : (double)m * q *
                                  fmax(0.0, 1.0 + cv / sqrt((double)m) * rng_next_normal(r));
        cas_place(lay, l, r, rad, dep);
    }
}

/* Spots for a kind's share of the shower's visible energy. */
static int64_t cas_cap(const synth_config *c, double energy, double total)
{
    double k = total > 0 ? c->max_spots * energy / total : 0;
    return k > CAS_MIN_SPOTS ? (int64_t)ceil(k) : CAS_MIN_SPOTS;
}

/* ------------------------------------------------------------------------ */
/* Pions                                                                     */
/* ------------------------------------------------------------------------ */

/* The hadronic part of a pion's shower, filled by cas_pion. */
typedef struct cas_hadron {
    double l_int;   /* depth of the interaction, interaction lengths (<0: none) */
    double e_vis;   /* visible energy of the hadronic part */
    double a, b;    /* its gamma profile in interaction lengths */
} cas_hadron;

/* Depth in X0 of the depth l in interaction lengths (layers are
 * contiguous); the end of the last layer when l is beyond. */
static double cas_x0_at(const synth_detector *d, double l)
{
    double t = 0;
    for (int li = 0; li < d->n_layers; li++) {
        if (!(d->l_hi[li] > d->l_lo[li]))
            continue;
        if (l < d->l_hi[li])
            return d->t_lo[li] + (fmax(l, d->l_lo[li]) - d->l_lo[li]) /
                                     (d->l_hi[li] - d->l_lo[li]) * (d->t_hi[li] - d->t_lo[li]);
        t = d->t_hi[li];
    }
    return t;
}

/* A pion: a track to its first interaction (exponential in interaction
 * lengths), then an electromagnetic fraction f_em ~ Beta around
 * 1 - (E/GeV)^(k-1) as pi0 photons into the tree, and the rest hadronic,
 * of which CAS_H_E (fluctuating) is visible. */
static void cas_pion(cas_shower *s, cas_hadron *h, const synth_detector *d, double e_mev,
                     double e_split, rng_state *r)
{
    double l_end = 0, ec = d->stack.ec_mev;
    for (int li = 0; li < d->n_layers; li++)
        l_end = fmax(l_end, d->l_hi[li]);
    h->l_int = cas_exp(r);
    /* it ionises E_c per X0 and stops after E / E_c X0 (all of it seen) */
    double range = e_mev / ec;
    s->t_start = cas_x0_at(d, fmin(h->l_int, l_end));
    if (h->l_int >= l_end || s->t_start >= range) { /* no interaction: a track */
        h->l_int = -1;
        s->t_start = fmin(s->t_start, range);
        cas_track(s, -1, 0, s->t_start);
        return;
    }
    cas_track(s, -1, 0, s->t_start);
    e_mev -= ec * s->t_start;
    double e_gev = e_mev * 1e-3;
    double f_mean = e_gev > 1.0 ? 1.0 - pow(e_gev, CAS_FEM_K - 1.0) : 0.0;
    f_mean = fmax(f_mean, CAS_FEM_MIN);
    double ga = cas_gamma(r, CAS_FEM_CONC * f_mean);
    double gb = cas_gamma(r, CAS_FEM_CONC * (1.0 - f_mean));
    double f_em = ga / (ga + gb);
    /* pi0s: 1 + Poisson(0.5 ln E/GeV), at most 3, sharing E f_em uniformly */
    int n_pi0 = 1 + (int)cas_poisson(r, 0.5 * log(fmax(e_gev, 1.0)));
    if (n_pi0 > 3)
        n_pi0 = 3;
    cas_part ph[6];
    double left = e_mev * f_em;
    for (int k = 0; k < n_pi0; k++) {
        double e_pi0 = k + 1 < n_pi0 ? left * rng_next_uniform(r) : left;
        left -= e_pi0;
        double u = rng_next_uniform(r);
        ph[2 * k] = (cas_part){e_pi0 * u, s->t_start, 1, -1};
        ph[2 * k + 1] = (cas_part){e_pi0 * (1.0 - u), s->t_start, 1, -1};
    }
    cas_tree(s, ph, 2 * n_pi0, e_split, d->stack.ec_mev, r, 0);
    double s_h = CAS_H_E_SIGMA * rng_next_normal(r) - 0.5 * CAS_H_E_SIGMA * CAS_H_E_SIGMA;
    h->e_vis = e_mev * (1.0 - f_em) * fmin(CAS_H_E * exp(s_h), 1.0);
    /* maximum (a - 1) / b = 0.2 ln(E/GeV) + 0.6 interaction lengths after
     * the interaction, b = 1 per interaction length, both log-normal */
    h->b = exp(0.15 * rng_next_normal(r));
    h->a = 1.0 + h->b * (0.2 * log(fmax(e_gev, 0.1)) + 0.6) * exp(0.2 * rng_next_normal(r));
}

/* ------------------------------------------------------------------------ */
/* One shower                                                                */
/* ------------------------------------------------------------------------ */

/* Radial profile of the electromagnetic deposits tau X0 after the start. */
static cas_radial cas_em_radial(double rm, double tau)
{
    cas_radial rad = {rm * (0.06 + 0.008 * tau), rm * (0.38 + 0.006 * tau),
                      0.16 + 0.22 * (1.0 - exp(-tau / 10.0))};
    return rad;
}

/* Radial profile of the hadronic deposits x interaction lengths after the
 * interaction (lam: the interaction length, mm). */
static cas_radial cas_had_radial(double lam, double x)
{
    cas_radial rad = {lam * (0.04 + 0.02 * x), lam * (0.15 + 0.05 * x), 0.45};
    return rad;
}

void synth_cascade_one(const synth_detector *d, const geo_geometry *g, const synth_config *c,
                       double e_mev, rng_state *r, float *out)
{
    const synth_stack *st = &d->stack;
    memset(out, 0, (size_t)g->n_voxels * sizeof *out);
    double ec = st->ec_mev, rm = st->rm_mm;
    double e_split = fmax(e_mev / CAS_SPLIT_DIV, CAS_SPLIT_MIN);
    double b_shower = exp(CAS_B_SIGMA * rng_next_normal(r));
    cas_shower s;
    memset(&s, 0, sizeof s);
    cas_hadron h = {-1, 0, 1, 1};
    if (c->particle == SYNTH_PARTICLE_PION) {
        cas_pion(&s, &h, d, e_mev, e_split, r);
    } else {
        cas_part p0 = {e_mev, 0.0, c->particle == SYNTH_PARTICLE_PHOTON, -1};
        cas_tree(&s, &p0, 1, e_split, ec, r, 1);
    }

    double em[GEO_MAX_LAYERS] = {0}, em_t[GEO_MAX_LAYERS] = {0};
    double had[GEO_MAX_LAYERS] = {0}, had_x[GEO_MAX_LAYERS] = {0};
    cas_em_profiles(&s, d, g, b_shower, r, em, em_t);
    if (h.l_int >= 0)
        cas_add_profile(g, d->l_lo, d->l_hi, h.e_vis, h.l_int, h.a, h.b, had, had_x);
    double total = 0;
    for (int li = 0; li < g->n_layers; li++)
        total += em[li] + had[li];

    for (int li = 0; li < g->n_layers; li++) {
        const geo_layer *l = &g->layers[li];
        if (l->n_voxels == 0 || !(d->t_hi[li] > d->t_lo[li]))
            continue;
        float *lay = out + l->offset;
        /* a track crossing the layer (at most 1 X0 of it) */
        double q = ec * fmin(d->t_hi[li] - d->t_lo[li], 1.0);
        if (em[li] > 0) {
            double tau = fmax(em_t[li] / em[li] - s.t_start, 0.0);
            cas_radial rad = cas_em_radial(rm, tau);
            double f_soft = 0.1 + 0.3 * (1.0 - exp(-tau / 6.0));
            double theta2 = fmin(0.02 + 0.03 * tau, 1.0);
            double e_trk = em[li] * (1.0 - f_soft), e_soft = em[li] * f_soft;
            cas_quanta(lay, l, r, &rad, e_trk, q, CAS_TRACK, theta2, cas_cap(c, e_trk, total));
            cas_quanta(lay, l, r, &rad, e_soft, CAS_SOFT_Q * q, CAS_SOFT, 0,
                       cas_cap(c, e_soft, total));
        }
        if (had[li] > 0) {
            double x = fmax(had_x[li] / had[li] - h.l_int, 0.0);
            cas_radial rad = cas_had_radial(d->lambda_mm, x);
            cas_quanta(lay, l, r, &rad, had[li], CAS_HAD_Q * q, CAS_HADRON, 0,
                       cas_cap(c, had[li], total));
        }
        /* the tree's tracks: one deposit per track and layer, E_c per X0
         * of path in it, near the axis */
        cas_radial trk = {rm * CAS_TRACK_R, 0, 0};
        for (int k = 0; k < s.n_trk; k++) {
            double ov = fmin(d->t_hi[li], s.trk_to[k]) - fmax(d->t_lo[li], s.trk_from[k]);
            if (ov > 0)
                cas_place(lay, l, r, &trk, ec * ov * cas_quantum(r, CAS_TRACK, 0.02));
        }
    }
    float thr = (float)d->threshold_mev;
    for (int v = 0; v < g->n_voxels; v++)
        if (out[v] < thr)
            out[v] = 0.0f;
}
