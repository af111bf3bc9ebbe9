/* synth: seeded, parallel shower simulators that fill any CaloChallenge
 * binning geometry.  Two of them, chosen by synth_config.simulator:
 * "gflash" (the default, below) and "cascade" (synth_cascade.c: explicit
 * sub-showers, track quanta, hadron-like pions; engine/data/README.md).
 *
 * The GFlash model (formulas from Grindhammer & Peters, hep-ex/0001020):
 *  - the detector is a sampling stack (absorber + active) summarised by
 *    X0_eff, R_M, E_c, Z_eff, F_S and e_hat (synth_stack_compute);
 *  - per shower, (ln T, ln alpha) of the longitudinal Gamma profile are drawn
 *    from a correlated log-normal with the sampling-calorimeter corrections;
 *  - each readout layer covers a depth range in X0; its energy is the Gamma
 *    profile's integral over that range and its number of spots the spot
 *    profile's integral times the (capped) spot count;
 *  - spots land at r = R sqrt(u/(1-u)) with R the core or tail radius of the
 *    profile at the layer's relative depth, at a uniform angle, and carry
 *    exponentially distributed weights (so voxel energies are continuous);
 *  - each layer's energy gets a log-normal sampling fluctuation whose sum
 *    over layers has relative width sampling_term / sqrt(E/GeV);
 *  - voxels under the readout threshold are zeroed.
 * Reproducible: shower i depends only on (seed, i), whatever the threads. */
#ifndef SYNTH_H
#define SYNTH_H

#include <stdint.h>

#include "geo.h"
#include "gt_error.h"

/* One material of a sampling stack. */
typedef struct synth_material {
    double z;            /* atomic number                       */
    double rho;          /* density, g/cm^3                     */
    double x0_mm;        /* radiation length, mm                */
    double thickness_mm; /* thickness of one sheet in the stack */
} synth_material;

/* Effective parameters of a two-material sampling stack. */
typedef struct synth_stack {
    double z_eff;  /* sum W_i Z_i, W_i = d_i rho_i / sum d_j rho_j             */
    double x0_mm;  /* 1 / sum W_i rho_eff / (X0_i rho_i)                       */
    double ec_mev; /* X0_eff * sum W_i rho_eff E_c,i / (X0_i rho_i)            */
    double rm_mm;  /* X0_eff * 21.2 MeV / E_c                                  */
    double f_s;    /* X0_eff / (d_1 + d_2)                                     */
    double e_hat;  /* 1 / (1 + 0.007 (Z_1 - Z_2))                             */
} synth_stack;

/* Fills out from an absorber and an active material (E_c,i = 610 MeV / (Z + 1.24)). */
int synth_stack_compute(const synth_material *absorber, const synth_material *active,
                        synth_stack *out, gt_error *err);

/* The detector a geometry is simulated in. */
typedef struct synth_detector {
    synth_stack stack;
    double sampling_fraction; /* voxel = active deposit / sampling_fraction   */
    double sampling_term;     /* relative energy resolution at 1 GeV          */
    double threshold_mev;     /* per-voxel readout threshold                  */
    double lambda_mm;         /* the stack's nuclear interaction length, mm:
                                 d / sum d_i / lambda_i (the cascade's pions) */
    int n_layers;             /* = geometry n_layers                          */
    double *t_lo, *t_hi;      /* depth range of each layer, radiation lengths */
    double *l_lo, *l_hi;      /* the same in interaction lengths (cascade)    */
    char name[64];            /* which built-in description was used          */
} synth_detector;

/* Picks the detector for a geometry:
 *  - geometries whose layers all have voxels (datasets 2 and 3, and anything
 *    like them): the W/Si stack, 1.4 mm W + 0.3 mm Si, two pairs (3.4 mm) per
 *    readout layer, sampling fraction 0.033, threshold 15.15 keV;
 *  - dataset-1 style geometries (layer ids 0-3 and 12-14 with voxels): an
 *    ATLAS-barrel-like Pb/LAr stack with fixed depth slabs per layer (see
 *    engine/data/README.md), threshold 1 MeV. */
int synth_detector_init(synth_detector *d, const geo_geometry *g, gt_error *err);
void synth_detector_free(synth_detector *d);

typedef enum synth_energy_mode {
    SYNTH_ENERGY_LOG_UNIFORM = 0, /* E = e_min (e_max / e_min)^u                 */
    SYNTH_ENERGY_DISCRETE,        /* powers of two in [e_min, e_max], uniform    */
    SYNTH_ENERGY_FIXED,           /* always e_min                                */
} synth_energy_mode;

/* The incident particle.  Electrons and photons shower electromagnetically;
 * a photon's shower starts after its first conversion, at a depth drawn
 * from an exponential with mean 9/7 X0 (the pair-production mean free
 * path).  A pion is what a pion geometry gets: the cascade simulator gives
 * it a hadron-like shower; GFlash has no hadronic model and simulates it
 * as an electron. */
typedef enum synth_particle {
    SYNTH_PARTICLE_ELECTRON = 0,
    SYNTH_PARTICLE_PHOTON,
    SYNTH_PARTICLE_PION,
} synth_particle;

/* The simulator (the names synth_parse_simulator takes, in this order). */
typedef enum synth_simulator {
    SYNTH_SIM_GFLASH = 0, /* "gflash": Grindhammer-Peters parameterisation  */
    SYNTH_SIM_CASCADE,    /* "cascade": sub-showers, quanta, hadron-like pions */
} synth_simulator;

typedef struct synth_config {
    uint64_t seed;
    synth_particle particle;
    synth_energy_mode energy_mode;
    double e_min_mev, e_max_mev;
    int max_spots;  /* cap on spots per shower; spot energy is scaled up
                       (cascade: quanta beyond it are grouped)          */
    int threads;    /* OpenMP threads, 0 = the runtime's default         */
    synth_simulator simulator; /* default gflash                         */
} synth_config;

/* Parses "electron" / "e-" / "positron" / "e+" and "photon" / "gamma"
 * (a pion comes only from a pion geometry). */
int synth_parse_particle(const char *s, synth_particle *p, gt_error *err);

/* The particle to simulate for a geometry's <Bin name>: photon for
 * "photon", pion for "pion" (hadron-like in the cascade simulator, an
 * electron's shower in GFlash), electron otherwise. */
synth_particle synth_particle_for_geometry(const geo_geometry *g);

/* "electron", "photon" or "pion": the particle's showers as simulator s
 * makes them (a pion is "electron" in GFlash, which has no hadronic model). */
const char *synth_particle_shower_name(synth_particle p, synth_simulator s);

/* Parses "gflash" and "cascade". */
int synth_parse_simulator(const char *s, synth_simulator *out, gt_error *err);

/* "gflash" or "cascade" ("?" for a value outside the enum). */
const char *synth_simulator_name(synth_simulator s);

/* seed 1, electron, log-uniform 1 GeV .. 1 TeV, 2000 spots, default
 * threads, GFlash. */
void synth_config_default(synth_config *c);

/* Parses "log-uniform", "discrete", "fixed". */
int synth_parse_energy_mode(const char *s, synth_energy_mode *mode, gt_error *err);

/* Checks a configuration (ranges, positive energies). */
int synth_config_check(const synth_config *c, gt_error *err);

/* Incident energies of showers [first, first + n) (MeV), a pure function of
 * (seed, index). */
int synth_draw_energies(const synth_config *c, int64_t first, int64_t n, float *energies,
                        gt_error *err);

/* Generates showers [first, first + n) into showers (n * n_voxels floats,
 * MeV) with the configuration's simulator.  energies: when not NULL, the
 * incident energies to use (MeV, > 0); when NULL they are drawn from the
 * configuration (the same for both simulators) and, if energies_out is not
 * NULL, written there.  Runs in parallel over showers. */
int synth_generate(const synth_detector *d, const geo_geometry *g, const synth_config *c,
                   int64_t first, int64_t n, const float *energies, float *energies_out,
                   float *showers, gt_error *err);

/* Regularised lower incomplete gamma function P(a, x) (exposed for tests). */
double synth_gamma_p(double a, double x);

#endif
