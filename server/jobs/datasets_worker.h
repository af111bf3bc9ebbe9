/* datasets_worker: the thread that makes synthetic datasets and checks
 * registered files in the background.
 *
 * A thread with its own database connection takes datasets whose status
 * is 'pending' (oldest first).  A synthetic one: it simulates the showers
 * with the engine's synth_ into DATA_DIR/<name>.h5 in blocks.  A
 * registered file (the route read only its metadata): it reads every row
 * in blocks (calo_h5_scan) and checks every value.  Either way it updates
 * progress and marks the dataset ready (with count, size and energy range)
 * or failed with the reason (for a file, the row and voxel that failed).
 * Pending datasets left by a crash are made or checked again at start.
 * Depends on datasets (the table's statements), worker_thread, store, log
 * and the engine's synth / calo_h5 / geo / model_data / gt_path. */
#ifndef DATASETS_WORKER_H
#define DATASETS_WORKER_H

#include "gt_error.h"

typedef struct datasets_worker datasets_worker;

int datasets_worker_start(datasets_worker **out, const char *db_path, const char *data_dir,
                          gt_error *err);

/* Wakes the worker (a dataset was queued). */
void datasets_worker_kick(datasets_worker *d);

/* Stops at the next block and joins (NULL is fine); an unfinished dataset
 * stays pending and is made or checked again at the next start. */
void datasets_worker_stop(datasets_worker *d);

#endif
