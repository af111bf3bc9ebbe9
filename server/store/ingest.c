#include "ingest.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest_check.h"
#include "numfmt.h"
#include "runs.h"
#include "slurm_jobs.h"
#include "store.h"

struct ingest {
    store *db;
    pthread_mutex_t mu;
};

int ingest_open(ingest **out, const char *db_path, gt_error *err)
{
    *out = NULL;
    ingest *g = calloc(1, sizeof *g);
    if (!g)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    int rc = store_open(&g->db, db_path, err);
    if (rc) {
        free(g);
        return rc;
    }
    pthread_mutex_init(&g->mu, NULL);
    *out = g;
    return GT_OK;
}

void ingest_close(ingest *g)
{
    if (!g)
        return;
    store_close(g->db, NULL);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* ---------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------- */

static int run_state(store *db, int64_t run, char status[16], int *cancel, gt_error *err)
{
    int rc = runs_status(db, run, status, err);
    if (rc == GT_OK && cancel)
        *cancel = runs_cancel_requested(db, run);
    return rc;
}

static int ended(const char *status)
{
    return strcmp(status, "succeeded") == 0 || strcmp(status, "failed") == 0 ||
           strcmp(status, "cancelled") == 0;
}

/* The value of metric `name` at (stage, step) in the batch, NAN if absent. */
static double batch_value(const json_t *metrics, const char *stage, long long step,
                          const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(metrics, i, e) {
        if (json_integer_value(json_object_get(e, "step")) == step &&
            strcmp(json_string_value(json_object_get(e, "stage")), stage) == 0 &&
            strcmp(json_string_value(json_object_get(e, "name")), name) == 0) {
            const json_t *v = json_object_get(e, "value");
            return json_is_number(v) ? json_number_value(v) : NAN;
        }
    }
    return NAN;
}

/* The "metric" event the local trainer writes (runs_record_step), for a
 * step whose loss this batch recorded first. */
static int metric_event(store *db, int64_t run, const json_t *metrics, const char *stage,
                        long long step, gt_error *err)
{
    const char *names[3] = {"loss", "grad_norm", "lr"};
    char num[3][32];
    for (int k = 0; k < 3; k++) {
        double v = batch_value(metrics, stage, step, names[k]);
        numfmt_float(num[k], sizeof num[k], isfinite(v) ? (float)v : 0.0f);
    }
    char data[256];
    snprintf(data, sizeof data,
             "{\"stage\":\"%s\",\"step\":%lld,\"loss\":%s,\"grad_norm\":%s,\"lr\":%s}", stage,
             step, num[0], num[1], num[2]);
    return runs_append_event(db, run, "metric", data, err);
}

static int write_entries(store *db, int64_t run, const json_t *body, ingest_counts *c,
                         gt_error *err)
{
    const json_t *metrics = json_object_get(body, "metrics");
    size_t i;
    json_t *e;
    int rc = GT_OK;
    json_array_foreach(metrics, i, e) {
        const char *stage = json_string_value(json_object_get(e, "stage"));
        const char *name = json_string_value(json_object_get(e, "name"));
        long long step = json_integer_value(json_object_get(e, "step"));
        const json_t *v = json_object_get(e, "value");
        int inserted = 0;
        rc = runs_append_metric(db, run, stage, name, step,
                                json_is_number(v) ? json_number_value(v) : NAN,
                                json_number_value(json_object_get(e, "time")), &inserted, err);
        if (rc)
            return rc;
        c->metrics++;
        c->metrics_recorded += inserted;
        if (inserted && strcmp(name, "loss") == 0 &&
            (rc = metric_event(db, run, metrics, stage, step, err)))
            return rc;
    }
    json_array_foreach(json_object_get(body, "validations"), i, e) {
        const char *stage = json_string_value(json_object_get(e, "stage"));
        long long step = json_integer_value(json_object_get(e, "step"));
        const json_t *l = json_object_get(e, "loss");
        double loss = json_is_number(l) ? json_number_value(l) : NAN;
        const json_t *ns = json_object_get(e, "n_samples");
        int inserted = 0;
        rc = runs_append_validation(db, run, stage, step, loss,
                                    ns ? (int)json_integer_value(ns) : 1,
                                    json_number_value(json_object_get(e, "time")), &inserted,
                                    err);
        if (rc)
            return rc;
        c->validations++;
        c->validations_recorded += inserted;
        if (inserted) {
            char data[160], val[32];
            numfmt_float(val, sizeof val, isfinite(loss) ? (float)loss : 0.0f);
            snprintf(data, sizeof data, "{\"stage\":\"%s\",\"step\":%lld,\"val_loss\":%s}", stage,
                     step, val);
            if ((rc = runs_append_event(db, run, "val_loss", data, err)))
                return rc;
        }
    }
    const json_t *p = json_object_get(body, "progress");
    if (p) {
        json_t *row = NULL;
        if ((rc = runs_get(db, run, &row, err)))
            return rc;
        long long total = json_integer_value(json_object_get(row, "total_steps"));
        json_decref(row);
        int stage = ingest_stage(json_string_value(json_object_get(p, "stage")));
        rc = runs_set_progress(db, run, stage, json_integer_value(json_object_get(p, "step")),
                               json_integer_value(json_object_get(p, "done_steps")), total, err);
    }
    return rc;
}

int ingest_batch_write(ingest *g, int64_t run, const json_t *body, ingest_counts *c,
                       char status[16], int *cancel, char *conflict, gt_error *err)
{
    memset(c, 0, sizeof *c);
    conflict[0] = '\0';
    const char *end = json_string_value(json_object_get(body, "status"));
    pthread_mutex_lock(&g->mu);
    int rc = run_state(g->db, run, status, cancel, err);
    if (rc)
        goto out;
    if (ended(status) && !(end && strcmp(end, status) == 0)) {
        snprintf(conflict, INGEST_CONFLICT_CAP, "run %lld is %s: it records nothing more",
                 (long long)run, status);
        goto out;
    }
    if ((rc = store_begin(g->db, err)))
        goto out;
    if ((rc = write_entries(g->db, run, body, c, err))) {
        store_rollback(g->db);
        goto out;
    }
    if ((rc = store_commit(g->db, err)))
        goto out;
    if (end && !ended(status)) {
        const char *why = json_string_value(json_object_get(body, "error"));
        int changed = 0;
        if ((rc = slurm_jobs_report(g->db, run, end, why, err)) ||
            (rc = runs_transition(g->db, run, NULL, end,
                                  strcmp(end, "failed") == 0 ? (why ? why : "the trainer failed")
                                                             : NULL,
                                  NULL, &changed, err)))
            goto out;
        rc = run_state(g->db, run, status, cancel, err);
    }
out:
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int ingest_start(ingest *g, int64_t run, const char *device, char status[16], char *conflict,
                 gt_error *err)
{
    conflict[0] = '\0';
    int cancel = 0;
    pthread_mutex_lock(&g->mu);
    int rc = run_state(g->db, run, status, &cancel, err);
    if (rc == GT_OK && (ended(status) || cancel)) {
        snprintf(conflict, INGEST_CONFLICT_CAP, "run %lld is %s: do not train it",
                 (long long)run, cancel && !ended(status) ? "being cancelled" : status);
    } else if (rc == GT_OK) {
        int changed = 0;
        rc = runs_transition(g->db, run, "queued", "running", NULL, device, &changed, err);
        if (rc == GT_OK)
            rc = run_state(g->db, run, status, NULL, err);
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int ingest_checkpoint(ingest *g, int64_t run, int stage, long long step, float val_loss,
                      const void *blob, size_t len, const char *sha256, int64_t *checkpoint,
                      int *duplicate, int *best, char *conflict, gt_error *err)
{
    conflict[0] = '\0';
    *duplicate = *best = 0;
    char status[16], have[65];
    int cancel = 0;
    pthread_mutex_lock(&g->mu);
    int rc = run_state(g->db, run, status, &cancel, err);
    if (rc)
        goto out;
    rc = runs_checkpoint_at(g->db, run, stage, step, checkpoint, have, err);
    if (rc == GT_OK) {
        /* append only: the first upload of a (stage, step) stays */
        if (strcmp(have, sha256) == 0)
            *duplicate = 1;
        else
            snprintf(conflict, INGEST_CONFLICT_CAP,
                     "run %lld has a checkpoint of stage %s at step %lld with another sha256"
                     " (%.12s...): it is kept", (long long)run, runs_stage_name(stage), step,
                     have);
        goto out;
    }
    if (rc != GT_ENOTFOUND)
        goto out;
    rc = GT_OK;
    if (ended(status)) {
        snprintf(conflict, INGEST_CONFLICT_CAP, "run %lld is %s: it records nothing more",
                 (long long)run, status);
        goto out;
    }
    /* precision and retention come from the run's own config */
    model_config cfg;
    json_t *row = NULL;
    if ((rc = runs_read_config(g->db, run, &cfg, err)) || (rc = runs_get(g->db, run, &row, err)))
        goto out;
    char precision[8];
    snprintf(precision, sizeof precision, "%s",
             json_string_value(json_object_get(row, "precision")) ?: "fp32");
    json_decref(row);
    rc = runs_record_checkpoint(g->db, run, stage, step, val_loss, precision, blob, len,
                                cfg.keep_checkpoints, best, err);
    if (rc == GT_OK)
        rc = runs_checkpoint_at(g->db, run, stage, step, checkpoint, have, err);
out:
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int ingest_acceptance(ingest *g, int64_t run, const char *const sha256[2], int64_t showers,
                      double auc, double acceptance, const void *blob, size_t len,
                      char *conflict, gt_error *err)
{
    conflict[0] = '\0';
    char status[16];
    model_config cfg;
    pthread_mutex_lock(&g->mu);
    int rc = run_state(g->db, run, status, NULL, err);
    if (rc)
        goto out;
    if (ended(status)) {
        snprintf(conflict, INGEST_CONFLICT_CAP, "run %lld is %s: it records nothing more",
                 (long long)run, status);
        goto out;
    }
    if ((rc = runs_read_config(g->db, run, &cfg, err)))
        goto out;
    if (!cfg.accept.enabled) {
        snprintf(conflict, INGEST_CONFLICT_CAP,
                 "run %lld's config has no model.accept: it takes no acceptance test",
                 (long long)run);
        goto out;
    }
    rc = runs_record_acceptance(g->db, run, sha256, showers, auc, acceptance, blob, len, err);
    if (rc == GT_ENOTFOUND) {
        /* a better checkpoint since the job loaded them: the test is stale */
        snprintf(conflict, INGEST_CONFLICT_CAP, "%.200s", err->message);
        rc = GT_OK;
    }
out:
    pthread_mutex_unlock(&g->mu);
    return rc;
}
