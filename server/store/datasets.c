#include "datasets.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

/* ---------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------- */

#define DATASET_COLUMNS                                                                     \
    "id, name, kind, geometry, path, spec, n_showers, n_voxels, size_bytes, status, progress," \
    " error, e_min_mev, e_max_mev, created_at"

int datasets_get(store *db, int64_t id, json_t **row, gt_error *err)
{
    return store_row_by_id(db, "reading a dataset", "dataset",
                           "SELECT " DATASET_COLUMNS " FROM datasets WHERE id = ?", id, row, err);
}

int datasets_list(store *db, int limit, json_t **rows, gt_error *err)
{
    return store_rows_json(db, "listing datasets",
                           "SELECT " DATASET_COLUMNS " FROM datasets ORDER BY id DESC LIMIT ?",
                           STORE_ARGS(STORE_INT(limit)), rows, err);
}

int datasets_add(store *db, const datasets_new *d, int64_t *id, gt_error *err)
{
    const store_val null = {.kind = STORE_V_NULL};
    int range = d->e_min_mev > 0 && d->e_max_mev >= d->e_min_mev;
    int rc = store_int64(
        db, "adding a dataset",
        "INSERT INTO datasets (name, kind, geometry, path, spec, n_showers, n_voxels, size_bytes,"
        " status, progress, e_min_mev, e_max_mev) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " RETURNING id",
        STORE_ARGS(STORE_TEXT(d->name), STORE_TEXT(d->kind), STORE_TEXT(d->geometry),
                   STORE_TEXT(d->path), STORE_TEXT(d->spec),
                   d->n_showers >= 0 ? STORE_INT(d->n_showers) : null,
                   d->n_voxels > 0 ? STORE_INT(d->n_voxels) : null,
                   d->size_bytes >= 0 ? STORE_INT(d->size_bytes) : null, STORE_TEXT(d->status),
                   STORE_REAL(strcmp(d->status, "ready") == 0 ? 1.0 : 0.0),
                   range ? STORE_REAL(d->e_min_mev) : null,
                   range ? STORE_REAL(d->e_max_mev) : null),
        id, err);
    if (rc == GT_EINVAL)
        return gt_error_set(err, GT_EINVAL, "a dataset named '%s' exists", d->name);
    return rc;
}

void datasets_why_not_ready(json_t *row, char *msg, size_t cap)
{
    long long id = (long long)json_integer_value(json_object_get(row, "id"));
    const char *status = json_string_value(json_object_get(row, "status"));
    const char *kind = json_string_value(json_object_get(row, "kind"));
    const char *error = json_string_value(json_object_get(row, "error"));
    double progress = json_number_value(json_object_get(row, "progress"));
    if (!status || strcmp(status, "failed") == 0)
        snprintf(msg, cap, "dataset %lld failed%s%s", id, error ? ": " : "", error ? error : "");
    else if (kind && strcmp(kind, "file") == 0)
        snprintf(msg, cap, "dataset %lld is not ready: its rows are being checked (%.0f%% done);"
                 " retry when its status is ready", id, 100.0 * progress);
    else
        snprintf(msg, cap, "dataset %lld is not ready: it is being made (%.0f%% done); retry"
                 " when its status is ready", id, 100.0 * progress);
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
    return store_exec(db, "default dataset",
                      "INSERT INTO datasets (name, kind, geometry, path, spec, status, progress)"
                      " SELECT 'default-dataset-2', 'synthetic', 'dataset_2',"
                      " 'default-dataset-2.h5', ?, 'pending', 0"
                      " WHERE NOT EXISTS (SELECT 1 FROM datasets)",
                      STORE_ARGS(STORE_TEXT(spec)), err);
}

/* The worker's statements (datasets_worker.c). */

int datasets_next_pending(store *db, json_t **row, gt_error *err)
{
    return store_row_json(db, "finding a pending dataset",
                          "SELECT id, kind, path, geometry, spec FROM datasets"
                          " WHERE status = 'pending'"
                          " ORDER BY id LIMIT 1",
                          STORE_NO_ARGS, row, err);
}

void datasets_set_progress(store *db, int64_t id, double progress)
{
    store_exec(db, "dataset progress", "UPDATE datasets SET progress = ? WHERE id = ?",
               STORE_ARGS(STORE_REAL(progress), STORE_INT(id)), NULL);
}

int datasets_set_ready(store *db, int64_t id, long long n, int voxels, long long size,
                       double emin, double emax, gt_error *err)
{
    return store_exec(db, "recording the dataset as ready",
               "UPDATE datasets SET status = 'ready', progress = 1, n_showers = ?,"
               " n_voxels = ?, size_bytes = ?, e_min_mev = ?, e_max_mev = ? WHERE id = ?",
               STORE_ARGS(STORE_INT(n), STORE_INT(voxels), STORE_INT(size), STORE_REAL(emin),
                          STORE_REAL(emax), STORE_INT(id)),
               err);
}

int datasets_set_failed(store *db, int64_t id, const char *error)
{
    return store_exec(db, "dataset failed",
                      "UPDATE datasets SET status = 'failed', progress = 0, error = ? WHERE id = ?",
                      STORE_ARGS(STORE_TEXT(error), STORE_INT(id)), NULL);
}
