/* datasets: synthetic datasets made in the background.
 *
 * A worker thread with its own database connection takes datasets whose
 * status is 'pending' (oldest first), simulates their showers with the
 * engine's synth_ into DATA_DIR/<name>.h5 in blocks, updating progress,
 * and marks them ready (with count, size and energy range) or failed.
 * Pending datasets left by a crash are simply made again at start.
 * Depends on store, log and the engine's synth / calo_h5 / geo. */
#ifndef DATASETS_H
#define DATASETS_H

#include <stdint.h>

#include "gt_error.h"
#include "store.h"

typedef struct datasets datasets;

int datasets_start(datasets **out, const char *db_path, const char *data_dir, gt_error *err);

/* Wakes the worker (a dataset was queued). */
void datasets_kick(datasets *d);

/* Queues the first-start dataset (synthetic dataset-2, n showers) when the
 * table is empty; n == 0 does nothing. */
int datasets_ensure_default(store *db, long n, gt_error *err);

/* Stops at the next block and joins (NULL is fine); an unfinished dataset
 * stays pending and is made again at the next start. */
void datasets_stop(datasets *d);

#endif
