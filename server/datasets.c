#include "datasets.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "calo_h5.h"
#include "geo.h"
#include "log.h"
#include "model_data.h"
#include "synth.h"

#define DATASETS_BLOCK 256         /* showers simulated between progress updates */

struct datasets {
    store *db;
    char data_dir[1024];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int kicked;
    atomic_int stopping;
};

static int exec1(store *db, const char *sql, int64_t id, double x, const char *text)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(store_db(db), sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_double(st, 1, x);
    if (text)
        sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 2);
    sqlite3_bind_int64(st, 3, id);
    int ok = sqlite3_step(st) == SQLITE_DONE;
    sqlite3_finalize(st);
    return ok ? 0 : -1;
}

/* Makes one pending dataset; returns GT_ECANCELLED when stopped. */
static int make_one(datasets *d, int64_t id, const char *path, const char *geometry,
                    const char *spec_text, gt_error *err)
{
    json_error_t jerr;
    json_t *spec = json_loads(spec_text, 0, &jerr);
    synth_config sc;
    synth_config_default(&sc);
    sc.threads = 1;            /* leave the cores to training and HTTP */
    long long n = 0;
    const char *mode = "log-uniform", *particle = NULL;
    json_int_t seed = 1;
    double emin = 1e3, emax = 1e6;
    if (!spec || json_unpack_ex(spec, &jerr, 0, "{s:I, s?I, s?s, s?{s?s, s?F, s?F}}", "n", &n,
                                "seed", &seed, "particle", &particle, "energy", "dist", &mode,
                                "min_mev", &emin, "max_mev", &emax) != 0) {
        json_decref(spec);
        return gt_error_set(err, GT_EINVAL, "bad dataset spec: %s", jerr.text);
    }
    sc.seed = (uint64_t)seed;
    sc.e_min_mev = emin;
    sc.e_max_mev = emax;
    geo_geometry geo;
    synth_detector det;
    int have_geo = 0, have_det = 0, have_w = 0, rc;
    float *e = NULL, *s = NULL;
    calo_h5_writer w;
    char full[2200], tmp[2300];
    snprintf(full, sizeof full, "%s/%s", d->data_dir, path);
    snprintf(tmp, sizeof tmp, "%s.part", full);
    if ((rc = synth_parse_energy_mode(mode, &sc.energy_mode, err)) ||
        (rc = synth_config_check(&sc, err)) ||
        (rc = model_geometry_load(geometry, &geo, err)))
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
        if (atomic_load(&d->stopping)) {
            rc = gt_error_set(err, GT_ECANCELLED, "stopped");
            goto out;
        }
        long long m = n - first < DATASETS_BLOCK ? n - first : DATASETS_BLOCK;
        if ((rc = synth_generate(&det, &geo, &sc, first, m, NULL, e, s, err)) ||
            (rc = calo_h5_append(&w, e, s, m, err)))
            goto out;
        exec1(d->db, "UPDATE datasets SET progress = ?1 WHERE id = ?3 AND ?2 IS NULL", id,
              (double)(first + m) / (double)n, NULL);
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
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(store_db(d->db),
                           "UPDATE datasets SET status = 'ready', progress = 1, n_showers = ?,"
                           " n_voxels = ?, size_bytes = ?, e_min_mev = ?, e_max_mev = ? WHERE id = ?",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, n);
        sqlite3_bind_int(st, 2, geo.n_voxels);
        sqlite3_bind_int64(st, 3, size);
        sqlite3_bind_double(st, 4, emin);
        sqlite3_bind_double(st, 5, sc.energy_mode == SYNTH_ENERGY_FIXED ? emin : emax);
        sqlite3_bind_int64(st, 6, id);
        sqlite3_step(st);
        sqlite3_finalize(st);
    }
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

static void *worker_main(void *arg)
{
    datasets *d = arg;
    while (!atomic_load(&d->stopping)) {
        sqlite3_stmt *st;
        int64_t id = 0;
        char path[1100] = "", geometry[1100] = "", *spec = NULL;
        if (sqlite3_prepare_v2(store_db(d->db),
                               "SELECT id, path, geometry, spec FROM datasets WHERE status ="
                               " 'pending' ORDER BY id LIMIT 1",
                               -1, &st, NULL) == SQLITE_OK) {
            if (sqlite3_step(st) == SQLITE_ROW) {
                id = sqlite3_column_int64(st, 0);
                snprintf(path, sizeof path, "%s", (const char *)sqlite3_column_text(st, 1));
                snprintf(geometry, sizeof geometry, "%s",
                         (const char *)sqlite3_column_text(st, 2));
                spec = strdup((const char *)sqlite3_column_text(st, 3));
            }
            sqlite3_finalize(st);
        }
        if (!id || !spec) {
            free(spec);
            pthread_mutex_lock(&d->mu);
            if (!d->kicked && !atomic_load(&d->stopping)) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += 1;
                pthread_cond_timedwait(&d->cv, &d->mu, &until);
            }
            d->kicked = 0;
            pthread_mutex_unlock(&d->mu);
            continue;
        }
        log_msg(LOG_INFO, "dataset", "id=%lld status=making path=%s", (long long)id, path);
        gt_error err = {0};
        int rc = make_one(d, id, path, geometry, spec, &err);
        free(spec);
        if (rc == GT_ECANCELLED)
            break;
        if (rc) {
            exec1(d->db, "UPDATE datasets SET status = 'failed', progress = ?1, error = ?2"
                  " WHERE id = ?3", id, 0.0, err.message);
            log_msg(LOG_WARN, "dataset", "id=%lld status=failed error=\"%s\"", (long long)id,
                    err.message);
        } else {
            log_msg(LOG_INFO, "dataset", "id=%lld status=ready", (long long)id);
        }
    }
    return NULL;
}

int datasets_start(datasets **out, const char *db_path, const char *data_dir, gt_error *err)
{
    *out = NULL;
    datasets *d = calloc(1, sizeof *d);
    if (!d)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    int rc = store_open(&d->db, db_path, err);
    if (rc) {
        free(d);
        return rc;
    }
    snprintf(d->data_dir, sizeof d->data_dir, "%s", data_dir);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (pthread_create(&d->thread, NULL, worker_main, d) != 0) {
        store_close(d->db, NULL);
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
        free(d);
        return gt_error_set(err, GT_EIO, "cannot start the dataset thread");
    }
    *out = d;
    return GT_OK;
}

void datasets_kick(datasets *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->kicked = 1;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

int datasets_ensure_default(store *db, long n, gt_error *err)
{
    if (n <= 0)
        return GT_OK;
    char spec[256];
    snprintf(spec, sizeof spec,
             "{\"n\":%ld,\"seed\":1,\"energy\":{\"dist\":\"log-uniform\",\"min_mev\":1000,"
             "\"max_mev\":1000000}}",
             n);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(store_db(db),
                           "INSERT INTO datasets (name, kind, geometry, path, spec, status,"
                           " progress) SELECT 'default-dataset-2', 'synthetic', 'dataset_2',"
                           " 'default-dataset-2.h5', ?, 'pending', 0"
                           " WHERE NOT EXISTS (SELECT 1 FROM datasets)",
                           -1, &st, NULL) != SQLITE_OK)
        return gt_error_set(err, GT_EIO, "default dataset: %s", sqlite3_errmsg(store_db(db)));
    sqlite3_bind_text(st, 1, spec, -1, SQLITE_TRANSIENT);
    int ok = sqlite3_step(st) == SQLITE_DONE;
    sqlite3_finalize(st);
    if (!ok)
        return gt_error_set(err, GT_EIO, "default dataset: %s", sqlite3_errmsg(store_db(db)));
    return GT_OK;
}

void datasets_stop(datasets *d)
{
    if (!d)
        return;
    atomic_store(&d->stopping, 1);
    datasets_kick(d);
    pthread_join(d->thread, NULL);
    store_close(d->db, NULL);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}
