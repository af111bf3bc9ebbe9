/* ingest_check: a Slurm job's batch body checked before anything is
 * written, with no database (ingest_check.c), so that the route refuses a
 * bad batch naming the member at fault and the fuzz target
 * (fuzz_ingest_batch) links it alone.  ingest.h writes what it accepted.
 * Depends on Jansson. */
#ifndef INGEST_CHECK_H
#define INGEST_CHECK_H

#include <stddef.h>

#include <jansson.h>

#include "gt_error.h"

/* The log-batch contract's limits per request (ingest.h). */
#define INGEST_MAX_METRICS 1000
#define INGEST_MAX_VALIDATIONS 100

/* Checks a batch body ({metrics, validations, progress, status, error});
 * GT_EINVAL with field naming the offending member ("metrics" past the
 * limit, "metrics[3].step", ...).  A batch it accepts is what
 * ingest_batch_write relies on: every entry an object of the known keys,
 * with a stage, a name of 1 to 64 of [A-Za-z0-9_.-], steps in [0, 10^12],
 * values numbers or null, times unix seconds, n_samples in [1, 2^24]; a
 * status "succeeded" or "failed", and an error (at most 2000 bytes) only
 * with "failed". */
int ingest_batch_check(const json_t *body, char *field, size_t field_cap, gt_error *err);

/* A stage by name: 1 "energy", 2 "shower", 0 anything else (or NULL). */
int ingest_stage(const char *s);

#endif
