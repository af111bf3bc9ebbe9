/* giant synth: write a CaloChallenge HDF5 file of simulated showers.
 *
 *   giant synth --geometry configs/geometry/binning_dataset_2.xml --n 10000
 *               --seed 1 -o showers.h5
 *
 * Showers are generated in blocks (parallel inside a block) and appended to
 * the file, so memory stays bounded whatever --n is. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calo_h5.h"
#include "geo.h"
#include "gt_clock.h"
#include "synth.h"

int cmd_synth(int argc, char **argv);

static void cmd_synth_usage(FILE *f)
{
    fprintf(f,
            "usage: giant synth --geometry FILE.xml --n N -o OUT.h5 [options]\n"
            "\n"
            "Simulates N showers in the binning geometry FILE.xml and writes them as a\n"
            "CaloChallenge HDF5 file (incident_energies (N,1), showers (N,voxels), MeV,\n"
            "gzip float32).  Two simulators: gflash (electromagnetic showers of the\n"
            "GFlash parameterisation) and cascade (a toy branching cascade of\n"
            "sub-showers, track quanta in the first layers, hadron-like pions).\n"
            "\n"
            "options:\n"
            "  --geometry FILE   CaloChallenge binning XML (required)\n"
            "  --n N             number of showers (required)\n"
            "  -o, --output OUT  output HDF5 file (required)\n"
            "  --seed S          random seed (default 1); same seed, same showers\n"
            "  --energy MODE     log-uniform (default), discrete (powers of two), fixed\n"
            "  --emin MEV        lowest incident energy (default 1000)\n"
            "  --emax MEV        highest incident energy (default 1000000)\n"
            "  --simulator NAME  gflash (default) or cascade\n"
            "  --particle NAME   electron or photon (default: the geometry's <Bin name>;\n"
            "                    pion geometries get hadron-like showers from cascade,\n"
            "                    electromagnetic ones from gflash)\n"
            "  --threads T       OpenMP threads (default: all)\n"
            "  --max-spots K     cap on energy spots per shower (default 2000; cascade:\n"
            "                    quanta beyond it are grouped)\n"
            "  --gzip L          gzip level 0..9 (default 1)\n"
            "  -h, --help        this text\n");
}

static int cmd_synth_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int cmd_synth_parse_f64(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

int cmd_synth(int argc, char **argv)
{
    const char *geometry = NULL, *output = NULL, *particle = NULL;
    int64_t n = -1, v = 0;
    int gzip = 1;
    synth_config cfg;
    synth_config_default(&cfg);
    gt_error err = {0};

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cmd_synth_usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "giant synth: %s needs a value (or is unknown)\n", a);
            return 2;
        }
        const char *val = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--geometry"))
            geometry = val;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
            output = val;
        else if (!strcmp(a, "--particle"))
            particle = val;
        else if (!strcmp(a, "--n"))
            bad = cmd_synth_parse_i64(val, 1, (int64_t)1 << 40, &n);
        else if (!strcmp(a, "--seed"))
            bad = cmd_synth_parse_i64(val, 0, INT64_MAX, &v), cfg.seed = (uint64_t)v;
        else if (!strcmp(a, "--threads"))
            bad = cmd_synth_parse_i64(val, 0, 4096, &v), cfg.threads = (int)v;
        else if (!strcmp(a, "--max-spots"))
            bad = cmd_synth_parse_i64(val, 10, 10000000, &v), cfg.max_spots = (int)v;
        else if (!strcmp(a, "--gzip"))
            bad = cmd_synth_parse_i64(val, 0, 9, &v), gzip = (int)v;
        else if (!strcmp(a, "--emin"))
            bad = cmd_synth_parse_f64(val, &cfg.e_min_mev);
        else if (!strcmp(a, "--emax"))
            bad = cmd_synth_parse_f64(val, &cfg.e_max_mev);
        else if (!strcmp(a, "--energy")) {
            if (synth_parse_energy_mode(val, &cfg.energy_mode, &err)) {
                fprintf(stderr, "giant synth: %s\n", err.message);
                return 2;
            }
        } else if (!strcmp(a, "--simulator")) {
            if (synth_parse_simulator(val, &cfg.simulator, &err)) {
                fprintf(stderr, "giant synth: %s\n", err.message);
                return 2;
            }
        } else {
            fprintf(stderr, "giant synth: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "giant synth: bad value \"%s\" for %s\n", val, a);
            return 2;
        }
    }
    if (!geometry || !output || n < 0) {
        fprintf(stderr, "giant synth: --geometry, --n and -o are required (see --help)\n");
        return 2;
    }
    if (cfg.energy_mode == SYNTH_ENERGY_FIXED && cfg.e_max_mev < cfg.e_min_mev)
        cfg.e_max_mev = cfg.e_min_mev;
    if (synth_config_check(&cfg, &err)) {
        fprintf(stderr, "giant synth: %s\n", err.message);
        return 2;
    }

    geo_geometry geo;
    if (geo_load_file(&geo, geometry, &err)) {
        fprintf(stderr, "giant synth: %s\n", err.message);
        return 1;
    }
    cfg.particle = synth_particle_for_geometry(&geo);
    if (particle && synth_parse_particle(particle, &cfg.particle, &err)) {
        fprintf(stderr, "giant synth: %s\n", err.message);
        geo_free(&geo);
        return 2;
    }
    if (!particle && cfg.particle == SYNTH_PARTICLE_ELECTRON && strcmp(geo.particle, "electron"))
        fprintf(stderr, "giant synth: note: geometry is binned for %s; simulating "
                "electromagnetic (electron) showers\n", geo.particle);
    else if (!particle && cfg.particle == SYNTH_PARTICLE_PION && cfg.simulator == SYNTH_SIM_GFLASH)
        fprintf(stderr, "giant synth: note: gflash has no hadronic model; simulating "
                "electromagnetic (electron) showers for the pion geometry (--simulator "
                "cascade makes hadron-like ones)\n");
    synth_detector det;
    if (synth_detector_init(&det, &geo, &err)) {
        fprintf(stderr, "giant synth: %s\n", err.message);
        geo_free(&geo);
        return 1;
    }

    /* blocks of about 64 MiB of showers */
    int64_t block = (64LL << 20) / ((int64_t)geo.n_voxels * 4);
    if (block < 64)
        block = 64;
    if (block > n)
        block = n;
    float *e = malloc(block * sizeof *e);
    float *s = malloc(block * (size_t)geo.n_voxels * sizeof *s);
    calo_h5_writer w;
    int rc = 1;
    double t_gen = 0, t0 = gt_clock_s();
    if (!e || !s) {
        fprintf(stderr, "giant synth: out of memory\n");
        goto done;
    }
    if (calo_h5_create(&w, output, geo.n_voxels, 0, gzip, &err)) {
        fprintf(stderr, "giant synth: %s\n", err.message);
        goto done;
    }
    for (int64_t first = 0; first < n; first += block) {
        int64_t m = n - first < block ? n - first : block;
        double g0 = gt_clock_s();
        if (synth_generate(&det, &geo, &cfg, first, m, NULL, e, s, &err)) {
            fprintf(stderr, "giant synth: %s\n", err.message);
            calo_h5_finish(&w, NULL);
            goto done;
        }
        t_gen += gt_clock_s() - g0;
        if (calo_h5_append(&w, e, s, m, &err)) {
            fprintf(stderr, "giant synth: %s: %s\n", output, err.message);
            calo_h5_finish(&w, NULL);
            goto done;
        }
    }
    if (calo_h5_finish(&w, &err)) {
        fprintf(stderr, "giant synth: %s: %s\n", output, err.message);
        goto done;
    }
    double total = gt_clock_s() - t0;
    printf("wrote %lld showers (%d voxels, %s, %s, detector %s) to %s\n", (long long)n,
           geo.n_voxels, synth_particle_shower_name(cfg.particle, cfg.simulator),
           synth_simulator_name(cfg.simulator), det.name, output);
    printf("simulation: %.0f showers/s (%.3f s); with HDF5 writing: %.0f showers/s (%.3f s)\n",
           t_gen > 0 ? n / t_gen : 0.0, t_gen, total > 0 ? n / total : 0.0, total);
    rc = 0;
done:
    free(e);
    free(s);
    synth_detector_free(&det);
    geo_free(&geo);
    return rc;
}
