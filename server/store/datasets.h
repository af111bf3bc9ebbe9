/* datasets: the owner of the datasets table.
 *
 * Every SQL statement on it is in datasets.c.  Reads return rows as
 * Jansson objects keyed by column name (SQL NULL is null), as in runs.h:
 * the column list and its reader stay together here and the routes
 * reshape them into the documented objects.  The worker that makes and
 * checks datasets (datasets_worker.h) writes through the statements at the
 * end.  Depends on store and Jansson. */
#ifndef DATASETS_H
#define DATASETS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "gt_error.h"
#include "store.h"

/* ---------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------- */

/* A dataset row: id, name, kind, geometry, path, spec (JSON text),
 * n_showers, n_voxels, size_bytes, status, progress, error, e_min_mev,
 * e_max_mev, created_at.  GT_ENOTFOUND when there is none. */
int datasets_get(store *db, int64_t id, json_t **row, gt_error *err);

/* Up to limit dataset rows, newest first. */
int datasets_list(store *db, int limit, json_t **rows, gt_error *err);

/* What a new row holds.  Unknown (NULL): n_showers and size_bytes when
 * negative, n_voxels when not positive, the energy range unless
 * 0 < e_min_mev <= e_max_mev. */
typedef struct datasets_new {
    const char *name, *kind, *geometry, *path, *spec, *status;
    long long n_showers;
    int n_voxels;
    long long size_bytes;
    double e_min_mev, e_max_mev;
} datasets_new;

/* Adds a row (progress 1 when ready, else 0).  GT_EINVAL when the name is
 * taken. */
int datasets_add(store *db, const datasets_new *d, int64_t *id, gt_error *err);

/* Why a row that is not ready cannot be used yet, for an API error: failed
 * (with its reason), or still being made or checked (with its progress). */
void datasets_why_not_ready(json_t *row, char *msg, size_t cap);

/* Queues the first-start dataset (synthetic dataset-2, n showers) when the
 * table is empty; n == 0 does nothing. */
int datasets_ensure_default(store *db, long n, gt_error *err);

/* ---------------------------------------------------------------------------
 * The worker's statements (datasets_worker.c)
 * ------------------------------------------------------------------------- */

/* The oldest pending dataset: id, kind, path, geometry, spec.  GT_ENOTFOUND
 * when there is none. */
int datasets_next_pending(store *db, json_t **row, gt_error *err);

/* Progress in [0, 1]; a failed write is let go (the next one tries again). */
void datasets_set_progress(store *db, int64_t id, double progress);

/* Ready with what was made or read.  Its failure is the dataset's: a
 * dataset that could not be marked ready must not stay pending (the worker
 * would make it again at once). */
int datasets_set_ready(store *db, int64_t id, long long n, int voxels, long long size,
                       double emin, double emax, gt_error *err);

/* Failed with the reason; GT_OK or the database's failure (the worker
 * tries again while the disk refuses it). */
int datasets_set_failed(store *db, int64_t id, const char *error);

#endif
