/* datasets: the owner of the datasets table, and the worker that makes
 * synthetic datasets in the background.
 *
 * The table: every SQL statement on it is in datasets.c.  Reads return
 * rows as Jansson objects keyed by column name (SQL NULL is null), as in
 * runs.h: the column list and its reader stay together here and the routes
 * reshape them into the documented objects.
 *
 * The worker: a thread with its own database connection takes datasets
 * whose status is 'pending' (oldest first).  A synthetic one: it simulates
 * the showers with the engine's synth_ into DATA_DIR/<name>.h5 in blocks.
 * A registered file (the route read only its metadata): it reads every row
 * in blocks (calo_h5_scan) and checks every value.  Either way it updates
 * progress and marks the dataset ready (with count, size and energy range)
 * or failed with the reason (for a file, the row and voxel that failed).
 * Pending datasets left by a crash are made or checked again at start.
 *
 * One module for both: the worker is the table's main writer and the table
 * has one row shape, so the two fit in one file a reader takes in at once.
 * Depends on store, log, Jansson and the engine's synth / calo_h5 / geo /
 * model_data / gt_path. */
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
 * The worker
 * ------------------------------------------------------------------------- */

typedef struct datasets datasets;

int datasets_start(datasets **out, const char *db_path, const char *data_dir, gt_error *err);

/* Wakes the worker (a dataset was queued). */
void datasets_kick(datasets *d);

/* Stops at the next block and joins (NULL is fine); an unfinished dataset
 * stays pending and is made or checked again at the next start. */
void datasets_stop(datasets *d);

#endif
