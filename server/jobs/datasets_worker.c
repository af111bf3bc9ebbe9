/* datasets_worker: the thread that makes synthetic datasets and checks
 * registered files (datasets_worker.h). */
#include "datasets_worker.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "calo_h5.h"
#include "datasets.h"
#include "geo.h"
#include "gt_clock.h"
#include "gt_path.h"
#include "log.h"
#include "model_data.h"
#include "model_energy.h"
#include "synth.h"
#include "worker_thread.h"

/* ---------------------------------------------------------------------------
 * The worker
 * ------------------------------------------------------------------------- */

#define DATASETS_BLOCK 256         /* showers simulated between progress updates */

struct datasets_worker {
    store *db;
    char data_dir[1024];
    worker_thread w;
};

/* Makes one pending dataset; returns GT_ECANCELLED when stopped. */
static int make_one(datasets_worker *d, int64_t id, const char *path, const char *geometry,
                    const char *spec_text, gt_error *err)
{
    json_error_t jerr;
    json_t *spec = json_loads(spec_text, 0, &jerr);
    synth_config sc;
    synth_config_default(&sc);
    sc.threads = 1;            /* leave the cores to training and HTTP */
    long long n = 0;
    const char *particle = NULL, *simulator = NULL;
    json_int_t seed = 1;
    json_t *energy = NULL;
    if (!spec || json_unpack_ex(spec, &jerr, 0, "{s:I, s?I, s?s, s?o, s?s}", "n", &n, "seed",
                                &seed, "particle", &particle, "energy", &energy, "simulator",
                                &simulator) != 0) {
        json_decref(spec);
        return gt_error_set(err, GT_EINVAL, "bad dataset spec: %s", jerr.text);
    }
    /* the spec the route wrote, read by the function that checked it */
    model_energy en;
    model_energy_default(&en);
    if (energy && model_energy_from_json(energy, "energy", MODEL_ENERGY_MIN_MEV,
                                         MODEL_ENERGY_MAX_MEV, &en, NULL, 0, err) != GT_OK) {
        json_decref(spec);
        return gt_error_wrap(err, "bad dataset spec");
    }
    sc.seed = (uint64_t)seed;
    model_energy_apply(&en, &sc);
    geo_geometry geo;
    synth_detector det;
    int have_geo = 0, have_det = 0, have_w = 0, rc;
    float *e = NULL, *s = NULL;
    calo_h5_writer w;
    char full[2200], tmp[2300];
    snprintf(full, sizeof full, "%s/%s", d->data_dir, path);
    snprintf(tmp, sizeof tmp, "%s.part", full);
    /* a spec without a simulator was stored before there were two: gflash */
    if ((simulator && (rc = synth_parse_simulator(simulator, &sc.simulator, err))) ||
        (rc = synth_config_check(&sc, err)) || (rc = model_geometry_load(geometry, &geo, err)))
        goto out;
    have_geo = 1;
    sc.particle = synth_particle_for_geometry(&geo);
    if (particle && (rc = synth_parse_particle(particle, &sc.particle, err)))
        goto out;
    if ((rc = synth_detector_init(&det, &geo, err)))
        goto out;
    have_det = 1;
    e = malloc(DATASETS_BLOCK * sizeof *e);
    s = malloc((size_t)DATASETS_BLOCK * (size_t)geo.n_voxels * sizeof *s);
    if (!e || !s) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory");
        goto out;
    }
    /* Written to a .part file and renamed: a file under its final name is
     * always complete. */
    if ((rc = calo_h5_create(&w, tmp, geo.n_voxels, 0, 1, err)))
        goto out;
    have_w = 1;
    for (long long first = 0; first < n; first += DATASETS_BLOCK) {
        if (atomic_load(&d->w.stopping)) {
            rc = gt_error_set(err, GT_ECANCELLED, "stopped");
            goto out;
        }
        long long m = n - first < DATASETS_BLOCK ? n - first : DATASETS_BLOCK;
        if ((rc = synth_generate(&det, &geo, &sc, first, m, NULL, e, s, err)) ||
            (rc = calo_h5_append(&w, e, s, m, err)))
            goto out;
        datasets_set_progress(d->db, id, (double)(first + m) / (double)n);
    }
    have_w = 0;
    if ((rc = calo_h5_finish(&w, err)))
        goto out;
    if (rename(tmp, full) != 0) {
        rc = gt_error_set(err, GT_EIO, "cannot rename %s", tmp);
        goto out;
    }
    struct stat stt;
    long long size = stat(full, &stt) == 0 ? (long long)stt.st_size : 0;
    if ((rc = datasets_set_ready(d->db, id, n, geo.n_voxels, size, sc.e_min_mev,
                                 sc.energy_mode == SYNTH_ENERGY_FIXED ? sc.e_min_mev
                                                                      : sc.e_max_mev,
                                 err)))
        unlink(full);          /* no file under a name no ready dataset has */
out:
    if (have_w)
        calo_h5_finish(&w, NULL);
    if (rc)
        unlink(tmp);
    free(e);
    free(s);
    if (have_det)
        synth_detector_free(&det);
    if (have_geo)
        geo_free(&geo);
    json_decref(spec);
    return rc;
}

/* What calo_h5_scan calls back after each block of a registered file. */
typedef struct check_ctx {
    datasets_worker *d;
    int64_t id;
    double written; /* when progress was last written */
} check_ctx;

/* Stops at SIGTERM; writes progress at most twice a second (one UPDATE
 * each, on the worker's own connection). */
static int on_checked(void *user, int64_t done, int64_t total)
{
    check_ctx *c = user;
    if (atomic_load(&c->d->w.stopping))
        return GT_ECANCELLED;
    double t = gt_clock_s();
    if (t - c->written >= 0.5) {
        datasets_set_progress(c->d->db, c->id, (double)done / (double)total);
        c->written = t;
    }
    return GT_OK;
}

/* Checks every row of a registered file (the route read only its metadata)
 * and marks it ready with what was counted; the error names the row that
 * failed, and the file as the client named it.  GT_ECANCELLED when
 * stopped. */
static int check_one(datasets_worker *d, int64_t id, const char *path, const char *geometry,
                     gt_error *err)
{
    /* again: a link inside the data directory may have changed since */
    char real[PATH_MAX];
    int rc = gt_path_inside(d->data_dir, path, real, sizeof real, err);
    if (rc)
        return rc;
    geo_geometry geo;
    if ((rc = model_geometry_load(geometry, &geo, err)))
        return rc;
    datasets_set_progress(d->db, id, 0);
    calo_h5_reader r;
    rc = calo_h5_open(&r, real, &geo, err);
    geo_free(&geo);
    if (rc == GT_OK) {
        struct stat st;
        long long size = stat(real, &st) == 0 ? (long long)st.st_size : 0;
        calo_h5_scan_stats stats;
        check_ctx c = {d, id, gt_clock_s()};
        if ((rc = calo_h5_check_storage(&r, size, NULL, err)) == GT_OK)
            rc = calo_h5_scan(&r, 0, on_checked, &c, &stats, err);
        if (rc == GT_OK && stats.rows < 1)
            rc = gt_error_set(err, GT_EFORMAT, "%s: the file holds no showers", real);
        if (rc == GT_OK)
            rc = datasets_set_ready(d->db, id, stats.rows, r.n_voxels, size, stats.e_min,
                                    stats.e_max, err);
        calo_h5_close(&r);
    }
    gt_path_scrub(err->message, sizeof err->message, real, path);
    return rc;
}

static void *worker_main(void *arg)
{
    datasets_worker *d = arg;
    json_t *row;
    while (worker_thread_next_row(&d->w, d->db, datasets_next_pending, &row)) {
        int64_t id = json_integer_value(json_object_get(row, "id"));
        const char *path = json_string_value(json_object_get(row, "path"));
        if (!path)
            path = "";
        const char *kind = json_string_value(json_object_get(row, "kind"));
        const char *geometry = json_string_value(json_object_get(row, "geometry"));
        int file = kind && strcmp(kind, "file") == 0;
        log_msg(LOG_INFO, "dataset", "id=%lld status=%s path=%s", (long long)id,
                file ? "checking" : "making", path);
        gt_error err = {0};
        int rc = file ? check_one(d, id, path, geometry, &err)
                      : make_one(d, id, path, geometry,
                                 json_string_value(json_object_get(row, "spec")), &err);
        json_decref(row);
        if (rc == GT_ECANCELLED)
            break;
        if (rc) {
            /* A full disk may refuse the failure too: the dataset would stay
             * pending and be made again at once, in a loop.  Tried again
             * each second until recorded or stopped (a restart checks a
             * pending dataset again). */
            while (datasets_set_failed(d->db, id, err.message) != GT_OK &&
                   !atomic_load(&d->w.stopping))
                worker_thread_nap(&d->w, 1);
            log_msg(LOG_WARN, "dataset", "id=%lld status=failed error=\"%s\"", (long long)id,
                    err.message);
        } else {
            log_msg(LOG_INFO, "dataset", "id=%lld status=ready", (long long)id);
        }
    }
    return NULL;
}

int datasets_worker_start(datasets_worker **out, const char *db_path, const char *data_dir,
                          gt_error *err)
{
    *out = NULL;
    datasets_worker *d = calloc(1, sizeof *d);
    if (!d)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    int rc = store_open(&d->db, db_path, err);
    if (rc) {
        free(d);
        return rc;
    }
    snprintf(d->data_dir, sizeof d->data_dir, "%s", data_dir);
    if ((rc = worker_thread_launch(&d->w, worker_main, d, d->db, "dataset", err)))
        return rc;
    *out = d;
    return GT_OK;
}

void datasets_worker_kick(datasets_worker *d)
{
    if (d)
        worker_thread_kick(&d->w);
}

void datasets_worker_stop(datasets_worker *d)
{
    if (d)
        worker_thread_end(&d->w, d->db, d);
}
