/* ingest: what a Slurm job's trainer reports over the API, written into
 * the run (routes_ingest.c parses the requests; this module checks and
 * writes them).
 *
 * The contract is MLflow's log-batch one: at most INGEST_MAX_METRICS
 * metrics (and INGEST_MAX_VALIDATIONS validations) per request, append
 * only, idempotent: a metric is keyed by (stage, name, step), a
 * validation by (stage, step), a checkpoint by (stage, step); a key
 * already recorded keeps its first value, so a batch sent again after a
 * lost reply records nothing twice, and one that repeats a key with
 * another value rewrites nothing.  A batch is written in one transaction:
 * all of it or none.
 *
 * Writes need transactions, so the module has its own connection, used
 * under its own lock by one HTTP thread at a time (SQLite has one writer
 * anyway).
 * A batch is checked first by ingest_check.h (no database).
 * Depends on ingest_check, runs, slurm_jobs, store, numfmt, Jansson. */
#ifndef INGEST_H
#define INGEST_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "gt_error.h"

typedef struct ingest ingest;

int ingest_open(ingest **out, const char *db_path, gt_error *err);
void ingest_close(ingest *g);

/* What a batch did. */
typedef struct ingest_counts {
    int metrics, metrics_recorded;
    int validations, validations_recorded;
} ingest_counts;

/* The functions below return GT_OK or the database's failure; a request
 * the run's state refuses (the caller's 409) leaves GT_OK with the reason
 * in conflict (cap INGEST_CONFLICT_CAP, "" when none). */
#define INGEST_CONFLICT_CAP 256

/* Writes a checked batch into run.  A run that has ended refuses it,
 * unless the batch reports the very end the run had (a retried last
 * batch); status (16 bytes) gets the run's status after it, *cancel
 * whether a cancel was asked for. */
int ingest_batch_write(ingest *g, int64_t run, const json_t *body, ingest_counts *c,
                       char status[16], int *cancel, char *conflict, gt_error *err);

/* A trainer starts (or starts again after a requeue): the run goes
 * running (when queued), with the trainer's device; refused once it has
 * ended or when a cancel was asked for. */
int ingest_start(ingest *g, int64_t run, const char *device, char status[16], char *conflict,
                 gt_error *err);

/* An uploaded checkpoint, whose sha256 the caller has checked.  An
 * existing (stage, step) with the same sha256 is a retry (*duplicate = 1);
 * with another, a conflict (append only). */
int ingest_checkpoint(ingest *g, int64_t run, int stage, long long step, float val_loss,
                      const void *blob, size_t len, const char *sha256, int64_t *checkpoint,
                      int *duplicate, int *best, char *conflict, gt_error *err);

/* The run's acceptance test (model.accept), trained by the job against the
 * checkpoints whose hex sha256 are given; the caller has checked its bytes
 * and read showers, auc and acceptance from it.  Stored as
 * runs_record_acceptance stores one; a conflict when the run has ended,
 * asks for no test, or its best checkpoints are no longer those two. */
int ingest_acceptance(ingest *g, int64_t run, const char *const sha256[2], int64_t showers,
                      double auc, double acceptance, const void *blob, size_t len,
                      char *conflict, gt_error *err);

#endif
