/* routes_runs: /v1/runs and the run's metrics and checkpoints: create, list,
 * get, cancel.  Training runs on the scheduler's worker; these handlers
 * parse requests, call runs_* and shape the replies.  Contracts:
 * api/openapi.json. */
#include "routes_handlers.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "calo_h5.h"
#include "datasets.h"
#include "gt_path.h"
#include "log.h"
#include "model_config.h"
#include "model_data.h"
#include "model_run.h"
#include "routes_common.h"
#include "runs.h"
#include "scheduler.h"
#include "slurm.h"
#include "slurm_jobs.h"

/* ---------------------------------------------------------------------------
 * A run as JSON
 * ------------------------------------------------------------------------- */

/* Sets o[key] to row[key] (shared, not copied). */
static void keep(json_t *o, json_t *row, const char *key)
{
    json_t *v = json_object_get(row, key);
    json_object_set(o, key, v ? v : json_null());
}

static int key_order(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* A copy of v whose objects have their keys in sorted order, as a run's
 * config is recorded (JSON_SORT_KEYS) and as its echo always was; NULL
 * when out of memory. */
static json_t *sorted_copy(json_t *v)
{
    if (json_is_array(v)) {
        json_t *out = json_array(), *e;
        size_t i;
        json_array_foreach(v, i, e) {
            if (!out || json_array_append_new(out, sorted_copy(e)) != 0) {
                json_decref(out);
                return NULL;
            }
        }
        return out;
    }
    if (!json_is_object(v))
        return json_incref(v);
    size_t n = json_object_size(v), i = 0;
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    json_t *out = keys ? json_object() : NULL, *e;
    const char *k;
    if (!out) {
        free(keys);
        return NULL;
    }
    json_object_foreach(v, k, e)
        keys[i++] = k;
    qsort(keys, n, sizeof *keys, key_order);
    for (i = 0; i < n; i++) {
        json_t *c = sorted_copy(json_object_get(v, keys[i]));
        if (!c || json_object_set_new(out, keys[i], c) != 0) {
            json_decref(out);
            out = NULL;
            break;
        }
    }
    free(keys);
    return out;
}

/* A run's config as its reply echoes it: the config written back whole
 * (model_config_to_json), its keys sorted as a run's config is recorded,
 * so for a run of this version its recorded text itself; null when out of
 * memory. */
static json_t *config_echo(const model_config *cfg)
{
    json_t *whole = model_config_to_json(cfg), *echo = whole ? sorted_copy(whole) : NULL;
    json_decref(whole);
    return echo ? echo : json_null();
}

/* The same for a run's row: its recorded config read as stored; null when
 * it does not read. */
static json_t *row_config_echo(json_t *row)
{
    model_config cfg;
    gt_error ignored = {0};
    if (runs_parse_config(json_string_value(json_object_get(row, "config")), &cfg,
                          &ignored) != GT_OK)
        return json_null();
    return config_echo(&cfg);
}

/* The API's run object from a run as runs_show and runs_list give it (its
 * row with its best checkpoints, acceptance test and Slurm job): a reshape,
 * no further read.  config (taken; NULL: none, as a listing shows it) is
 * its echo. */
static json_t *run_object(json_t *row, json_t *config)
{
    json_t *o = json_object();
    if (!o) {
        json_decref(config);
        return NULL;
    }
    keep(o, row, "id");
    keep(o, row, "name");
    keep(o, row, "status");
    if (config)
        json_object_set_new(o, "config", config);
    keep(o, row, "device");
    keep(o, row, "precision");
    double progress = json_number_value(json_object_get(row, "progress"));
    long long total = json_integer_value(json_object_get(row, "total_steps"));
    json_t *pr = json_object();
    keep(pr, row, "stage");
    keep(pr, row, "step");
    json_object_set_new(pr, "done_steps", json_integer((json_int_t)llround(progress * total)));
    json_object_set_new(pr, "total_steps", json_integer(total));
    json_object_set_new(pr, "fraction", json_real(progress));
    /* ETA from the elapsed time of this attempt and the fraction done. */
    const char *status = json_string_value(json_object_get(row, "status"));
    json_t *elapsed = json_object_get(row, "elapsed_s");
    if (status && strcmp(status, "running") == 0 && progress > 0 && progress < 1 &&
        json_is_number(elapsed))
        json_object_set_new(pr, "eta_s",
                            json_real(json_number_value(elapsed) * (1 - progress) / progress));
    else
        json_object_set_new(pr, "eta_s", json_null());
    json_object_set_new(o, "progress", pr);
    keep(o, row, "error");
    json_object_set_new(o, "cancel_requested",
                        json_boolean(json_integer_value(json_object_get(row, "cancel_requested"))));
    keep(o, row, "attempts");
    /* where it trains; a Slurm run with its job as last seen */
    const char *exec = json_string_value(json_object_get(row, "executor"));
    json_t *ex = json_pack("{s:s}", "kind", exec ? exec : "local");
    if (exec && strcmp(exec, "slurm") == 0) {
        json_t *job = json_object_get(row, "slurm_job");
        const char *const keys[] = {"job_id", "state", "reason", "node", "submissions",
                                    "restarts", "submitted_at"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            json_t *v = json_object_get(job, keys[k]);
            json_object_set(ex, keys[k], v ? v : json_null());
        }
    }
    json_object_set_new(o, "executor", ex);
    keep(o, row, "created_at");
    keep(o, row, "started_at");
    keep(o, row, "finished_at");
    keep(o, row, "updated_at");
    keep(o, row, "best");
    keep(o, row, "acceptance");
    return o;
}

/* Replies with run id (status) in one read; a run that does not exist is
 * 404, worded as routes_path_run words it on a path with an {id}.  cfg:
 * the run's config when the caller has read it (a submission), else NULL
 * and it is read from the run. */
static void reply_run(http_request *req, store *db, int64_t id, unsigned status,
                      const model_config *cfg)
{
    json_t *row = NULL, *o = NULL;
    gt_error err = {0};
    int rc = id > 0 ? runs_show(db, id, &row, &err) : GT_ENOTFOUND;
    if (rc == GT_OK &&
        (o = run_object(row, cfg ? config_echo(cfg) : row_config_echo(row))) == NULL)
        rc = gt_error_set(&err, GT_ENOMEM, "out of memory");
    json_decref(row);
    if (rc == GT_ENOTFOUND && http_param(req, "id"))
        routes_reply_no_run(req);
    else if (routes_reply_rc(req, rc, &err, 404, 0, NULL))
        http_reply_json(req, status, o);
}

/* ---------------------------------------------------------------------------
 * POST /v1/runs
 * ------------------------------------------------------------------------- */

/* A client names files only inside the data directory, and geometries only
 * by their built-in names: the service must never read, or tell whether it
 * can read, a file elsewhere.  real[PATH_MAX] gets the file's resolved path
 * ("" when there is none), which the quotas read its size from.  A file
 * that does not exist yet passes (the run fails with the reason when it
 * trains); the trainer checks the path again when it opens it
 * (model_dataset_load).  Replies 422 and returns 0 when refused. */
static int files_allowed(http_request *req, app *a, const model_config *cfg, char *real)
{
    gt_error err = {0};
    real[0] = '\0';
    if (cfg->dataset_path[0]) {
        int rc = gt_path_inside(a->cfg.data_dir, cfg->dataset_path, real, PATH_MAX, &err);
        if (rc != GT_OK)
            real[0] = '\0';
        if (rc != GT_ENOTFOUND && !routes_reply_rc(req, rc, &err, 0, 422, "dataset.path"))
            return 0;
    }
    if (!model_geometry_is_builtin(cfg->geometry)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "dataset.geometry",
                         "the service takes a built-in geometry: dataset_1_photons, "
                         "dataset_1_pions, dataset_2 or dataset_3 (binning XML files are for "
                         "the command line)");
        return 0;
    }
    return 1;
}

/* The showers a run's dataset holds: synthetic n, or the rows of its file
 * at real, files_allowed's resolved path (opened, its size read from the
 * header; 0 when the file is not there: the run fails on it with the
 * loader's reason).  Sets *v to the voxels. */
static int dataset_rows(const model_config *cfg, const char *real, int64_t *rows, int *v,
                        gt_error *err)
{
    geo_geometry geo;
    GT_TRY(model_geometry_load(cfg->geometry, &geo, err));
    *v = geo.n_voxels;
    *rows = cfg->synthetic_n;
    if (cfg->dataset_path[0]) {
        calo_h5_reader r;
        gt_error ignored = {0};
        *rows = 0;
        if (real[0] && calo_h5_open(&r, real, &geo, &ignored) == GT_OK) {
            *rows = r.n_rows;
            calo_h5_close(&r);
        }
    }
    geo_free(&geo);
    return GT_OK;
}

/* The service's quotas on one submission (settings: --max-train-steps,
 * --max-synthetic-showers, --max-dataset-mb) and on the queue
 * (--max-active-runs).  A
 * config past a quota is refused with 422 naming the field; a full queue
 * with 429 and Retry-After.  Returns 0 after replying. */
static int within_quotas(http_request *req, app *a, const model_config *cfg, const char *real)
{
    const long long steps[2] = {cfg->steps1, cfg->steps2};
    for (int i = 0; i < 2; i++)
        if (steps[i] > a->cfg.max_train_steps) {
            http_reply_error(req, 422, HTTP_E_VALIDATION,
                             i ? "train.steps.stage2" : "train.steps.stage1",
                             "%lld steps: this server takes at most %ld per stage", steps[i],
                             a->cfg.max_train_steps);
            return 0;
        }
    if (cfg->sample_steps > a->cfg.max_sample_steps) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "sample.steps",
                         "%d solver steps: this server takes at most %ld (--max-sample-steps)",
                         cfg->sample_steps, a->cfg.max_sample_steps);
        return 0;
    }
    if (!cfg->dataset_path[0] && cfg->synthetic_n > a->cfg.max_synthetic_showers) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "dataset.synthetic.n",
                         "%lld showers: this server simulates at most %ld for a run",
                         (long long)cfg->synthetic_n, a->cfg.max_synthetic_showers);
        return 0;
    }
    /* a run loads its whole dataset: one that cannot fit is refused here,
     * not failed by the allocator after it has waited in the queue */
    gt_error err = {0};
    int64_t rows = 0;
    int voxels = 0;
    if (dataset_rows(cfg, real, &rows, &voxels, &err)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "dataset.geometry", "%s", err.message);
        return 0;
    }
    double mib = (double)rows * ((double)voxels + 1.0) * 4.0 / 1048576.0;
    if (mib > (double)a->cfg.max_dataset_mb) {
        http_reply_error(req, 422, HTTP_E_VALIDATION,
                         cfg->dataset_path[0] ? "dataset.path" : "dataset.synthetic.n",
                         "%lld showers of %d voxels take %.0f MiB: this server loads at most "
                         "%ld MiB for a run (--max-dataset-mb)",
                         (long long)rows, voxels, mib, a->cfg.max_dataset_mb);
        return 0;
    }
    long long queued = 0, running = 0;
    if (runs_count(a->db, "queued", &queued, &err) || runs_count(a->db, "running", &running, &err)) {
        routes_reply_internal(req, &err);
        return 0;
    }
    if (queued + running >= a->cfg.max_active_runs) {
        http_reply_error_retry(req, 429, HTTP_E_RATE_LIMITED, 30,
                               "%lld runs are queued or training, the most this server takes: "
                               "retry when one has finished", queued + running);
        return 0;
    }
    /* One token may not fill the queue for everyone (anonymous loopback
     * requests have no token and only the limit above). */
    int64_t token = http_principal(req, NULL);
    long long mine = 0;
    if (token > 0 && a->cfg.max_queued_runs_per_token > 0) {
        if (runs_count_queued_by_token(a->db, token, &mine, &err)) {
            routes_reply_internal(req, &err);
            return 0;
        }
        if (mine >= a->cfg.max_queued_runs_per_token) {
            http_reply_error_retry(req, 429, HTTP_E_RATE_LIMITED, 30,
                                   "this token has %lld runs queued, the most"
                                   " --max-queued-runs-per-token allows: retry when one has"
                                   " started", mine);
            return 0;
        }
    }
    return 1;
}

/* "dataset_id": N in the body is replaced by dataset.path of that dataset. */
static int resolve_dataset_id(http_request *req, store *db, json_t *body)
{
    json_t *did = json_object_get(body, "dataset_id");
    if (!did)
        return 1;
    if (!json_is_integer(did) || json_integer_value(did) <= 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "dataset_id",
                         "dataset_id must be a positive integer");
        return 0;
    }
    json_t *row = NULL;
    gt_error err = {0};
    int rc = datasets_get(db, json_integer_value(did), &row, &err), ok = 0;
    const char *status = json_string_value(json_object_get(row, "status"));
    if (rc == GT_ENOTFOUND) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "dataset_id", "dataset %lld does not exist",
                         (long long)json_integer_value(did));
    } else if (rc) {
        routes_reply_internal(req, &err);
    } else if (!status || strcmp(status, "ready") != 0) {
        char why[600];
        datasets_why_not_ready(row, why, sizeof why);
        http_reply_error(req, 422, HTTP_E_VALIDATION, "dataset_id", "%s", why);
    } else {
        json_t *ds = json_object_get(body, "dataset");
        if (!ds) {
            ds = json_object();
            json_object_set_new(body, "dataset", ds);
        }
        if (!json_is_object(ds)) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "dataset", "dataset must be an object");
        } else {
            json_object_set(ds, "path", json_object_get(row, "path"));
            if (!json_object_get(ds, "geometry"))
                json_object_set(ds, "geometry", json_object_get(row, "geometry"));
            json_object_del(body, "dataset_id");
            ok = 1;
        }
    }
    json_decref(row);
    return ok;
}

/* Whether a bf16 run can train where the service will put it, as far as
 * the service knows at submission: the device is the service's --device,
 * else the run's train.device ("auto": the first GPU when there is one).
 * A device it does not list is left to the worker (the run then fails with
 * the reason). */
static void bf16_refusal(const app *a, const model_config *cfg, char *msg, size_t cap)
{
    msg[0] = '\0';
    if (!cfg->bf16 || a->ndevices < 1)
        return;
    const char *dev = a->cfg.device[0] ? a->cfg.device : cfg->device;
    const gt_device_info *d = NULL;
    if (strcmp(dev, "cpu") == 0) {
        d = &a->devices[0];
    } else if (strcmp(dev, "auto") == 0) {
        d = &a->devices[0];
        for (int i = 1; i < a->ndevices; i++)
            if (strcmp(a->devices[i].kind, "cuda") == 0) {
                d = &a->devices[i];
                break;
            }
    } else if (strncmp(dev, "cuda", 4) == 0) {
        int idx = dev[4] == ':' ? atoi(dev + 5) : 0;
        for (int i = 1; i < a->ndevices; i++)
            if (strcmp(a->devices[i].kind, "cuda") == 0 && a->devices[i].index == idx)
                d = &a->devices[i];
    }
    if (!d)
        return;
    int is_cpu = strcmp(d->kind, "cpu") == 0;
    int ok = d->bf16 || (is_cpu && a->cfg.allow_bf16_emulation);
    model_bf16_refusal(cfg, d->kind, d->name, ok, is_cpu, d->cc_major, d->cc_minor, msg, cap);
}

/* Whether a recorded config (a run's canonical text, perhaps written by an
 * older version in an older shape, e.g. the deprecated energy spelling)
 * is the canonical text `text` once written back as this version does. */
static int same_config(const char *prev, const char *text)
{
    if (strcmp(prev, text) == 0)
        return 1;
    model_config cfg;
    gt_error err = {0};
    int ok = runs_parse_config(prev, &cfg, &err) == GT_OK;
    json_t *canon = ok ? model_config_to_json(&cfg) : NULL;
    char *again = canon ? json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(canon);
    int same = again && strcmp(again, text) == 0;
    free(again);
    return same;
}

void route_runs_create(http_request *req, void *ctx)
{
    app *a = ctx;
    json_t *body = http_body_json(req);
    if (!json_is_object(body)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "", "the run config must be an object");
        return;
    }
    if (!resolve_dataset_id(req, a->db, body))
        return;
    model_config cfg;
    char field[128] = "";
    gt_error err = {0};
    if (model_config_from_json(body, &cfg, field, sizeof field, &err) != GT_OK) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, field, "%s", err.message);
        return;
    }
    int on_slurm = cfg.executor.kind == MODEL_EXEC_SLURM;
    if (on_slurm && a->slurm_why[0]) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "executor.kind",
                         "this server cannot submit Slurm jobs: %s", a->slurm_why);
        return;
    }
    char real[PATH_MAX];
    if (!files_allowed(req, a, &cfg, real) || !within_quotas(req, a, &cfg, real))
        return;
    char why[512] = "";
    /* a Slurm run trains on a node the service knows nothing of: the
     * trainer there refuses bf16 without it, as the run's failure */
    if (!on_slurm)
        bf16_refusal(a, &cfg, why, sizeof why);
    if (why[0]) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "train.precision", "%s", why);
        return;
    }
    json_t *canon = model_config_to_json(&cfg);
    char *text = canon ? json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(canon);
    if (!text) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
        return;
    }
    const char *key = http_header(req, "Idempotency-Key");
    if (key && (strlen(key) == 0 || strlen(key) > 255)) {
        free(text);
        http_reply_error(req, 400, HTTP_E_VALIDATION, "Idempotency-Key",
                         "Idempotency-Key must be 1 to 255 characters");
        return;
    }
    int64_t id = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (key) {
            char *prev = NULL;
            int found = runs_find_by_key(a->db, key, &id, &prev, &err);
            if (found != GT_OK && found != GT_ENOTFOUND) {
                free(text);
                routes_reply_internal(req, &err);
                return;
            }
            if (found == GT_OK) {
                int same = prev && same_config(prev, text);
                free(prev);
                free(text);
                if (!same) {
                    http_reply_error(req, 409, HTTP_E_CONFLICT, "Idempotency-Key",
                                     "Idempotency-Key '%s' was used by run %lld with another"
                                     " config",
                                     key, (long long)id);
                    return;
                }
                /* the same config: the submission's own echo */
                reply_run(req, a->db, id, 200, &cfg);
                return;
            }
        }
        if (runs_create_by(a->db, http_principal(req, NULL), cfg.name, text,
                           cfg.bf16 ? "bf16" : "fp32", key, cfg.steps1 + cfg.steps2, &id,
                           &err) == GT_OK)
            break;
        /* Two requests with one new key at once: the loser finds the winner. */
        if (!key || attempt == 1) {
            free(text);
            routes_reply_internal(req, &err);
            return;
        }
    }
    free(text);
    log_msg(LOG_INFO, "run", "id=%lld status=queued name=\"%s\" executor=%s", (long long)id,
            cfg.name, model_executor_name(cfg.executor.kind));
    sched_kick(a->sched);
    slurm_kick(a->slurm);
    reply_run(req, a->db, id, 201, &cfg);
}

/* ---------------------------------------------------------------------------
 * GET /v1/runs, GET /v1/runs/{id}, POST /v1/runs/{id}/cancel
 * ------------------------------------------------------------------------- */

static int valid_status(const char *s)
{
    static const char *const ok[] = {"queued", "running", "succeeded", "failed", "cancelled"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strcmp(s, ok[i]) == 0)
            return 1;
    return 0;
}

void route_runs_list(http_request *req, void *ctx)
{
    app *a = ctx;
    const char *status = http_query(req, "status");
    long long limit = routes_query_ll(req, "limit", 20, 1, 100);
    long long cursor = routes_query_ll(req, "cursor", 0, 0, INT64_MAX);
    if (status && !valid_status(status)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "status",
                         "status must be queued, running, succeeded, failed or cancelled");
        return;
    }
    if (limit < 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "limit", "limit must be 1 to 100");
        return;
    }
    if (cursor < 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "cursor", "cursor is not valid");
        return;
    }
    /* Keyset paging on id: one row more than asked says whether more follow. */
    json_t *rows = NULL;
    gt_error err = {0};
    if (runs_list(a->db, status, cursor, (int)limit + 1, &rows, &err) != GT_OK) {
        routes_reply_internal(req, &err);
        return;
    }
    json_t *items = json_array();
    int64_t last = 0;
    size_t n = json_array_size(rows);
    for (size_t i = 0; i < n && i < (size_t)limit; i++) {
        json_t *row = json_array_get(rows, i);
        json_t *o = run_object(row, NULL);
        if (!o || !items) {
            json_decref(o);
            json_decref(items);
            json_decref(rows);
            http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
            return;
        }
        last = json_integer_value(json_object_get(row, "id"));
        json_array_append_new(items, o);
    }
    json_decref(rows);
    json_t *body = json_pack("{s:o}", "items", items);
    if (n > (size_t)limit) {
        char c[32];
        snprintf(c, sizeof c, "%lld", (long long)last);
        json_object_set_new(body, "next_cursor", json_string(c));
    } else {
        json_object_set_new(body, "next_cursor", json_null());
    }
    http_reply_json(req, 200, body);
}

void route_runs_get(http_request *req, void *ctx)
{
    app *a = ctx;
    /* one read: the run as shown, or its absence */
    reply_run(req, a->db, routes_parse_id(http_param(req, "id")), 200, NULL);
}

void route_runs_cancel(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = routes_path_run(req, a->db);
    if (!id)
        return;
    char status[16] = "";
    gt_error err = {0};
    if (sched_cancel(a->sched, a->db, id, status, &err) != GT_OK) {
        routes_reply_internal(req, &err);
        return;
    }
    if (strcmp(status, "succeeded") == 0 || strcmp(status, "failed") == 0) {
        http_reply_error(req, 409, HTTP_E_CONFLICT, NULL, "run %lld already %s", (long long)id,
                         status);
        return;
    }
    slurm_kick(a->slurm);      /* a Slurm run's job gets its scancel */
    reply_run(req, a->db, id, 202, NULL);
}

/* A cancelled or failed run goes back to the queue and resumes from its
 * checkpoints; the queue's limit (--max-active-runs) holds as for a new run. */
void route_runs_resume(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = routes_path_run(req, a->db);
    if (!id)
        return;
    char status[16] = "";
    long long queued = 0, running = 0;
    gt_error err = {0};
    if (runs_status(a->db, id, status, &err) || runs_count(a->db, "queued", &queued, &err) ||
        runs_count(a->db, "running", &running, &err)) {
        routes_reply_internal(req, &err);
        return;
    }
    if (strcmp(status, "cancelled") != 0 && strcmp(status, "failed") != 0) {
        http_reply_error(req, 409, HTTP_E_CONFLICT, NULL,
                         "run %lld is %s: only a cancelled or failed run resumes", (long long)id,
                         status);
        return;
    }
    if (queued + running >= a->cfg.max_active_runs) {
        http_reply_error_retry(req, 429, HTTP_E_RATE_LIMITED, 30,
                               "%lld runs are queued or training, the most this server takes: "
                               "retry when one has finished", queued + running);
        return;
    }
    /* A Slurm run resumes with a new job once its last one has left Slurm's
     * queue: the old job's end would otherwise be taken for the new one's. */
    json_t *job = NULL;
    int jrc = slurm_jobs_get(a->db, id, &job, &err);
    int active = jrc == GT_OK && json_integer_value(json_object_get(job, "active")) != 0;
    long long job_id = json_integer_value(json_object_get(job, "job_id"));
    json_decref(job);
    if (jrc != GT_OK && jrc != GT_ENOTFOUND) {
        routes_reply_internal(req, &err);
        return;
    }
    if (active) {
        http_reply_error_retry(req, 409, HTTP_E_CONFLICT, 10,
                               "run %lld's Slurm job %lld has not left Slurm's queue yet: retry"
                               " when it has (GET /v1/runs/%lld shows executor.state)",
                               (long long)id, job_id, (long long)id);
        return;
    }
    int requeued = 0;
    if (runs_requeue(a->db, id, &requeued, &err) != GT_OK) {
        routes_reply_internal(req, &err);
        return;
    }
    if (!requeued) {           /* resumed meanwhile by another request */
        http_reply_error(req, 409, HTTP_E_CONFLICT, NULL, "run %lld is no longer cancelled"
                         " or failed", (long long)id);
        return;
    }
    log_msg(LOG_INFO, "run", "id=%lld status=queued reason=resume", (long long)id);
    sched_kick(a->sched);
    slurm_kick(a->slurm);
    reply_run(req, a->db, id, 202, NULL);
}

/* ---------------------------------------------------------------------------
 * GET /v1/runs/{id}/metrics: bucket averages, bounded memory
 * ------------------------------------------------------------------------- */

void route_runs_metrics(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = routes_path_run(req, a->db);
    if (!id)
        return;
    const char *name = http_query(req, "name");
    long long since = routes_query_ll(req, "since_step", 0, 0, INT64_MAX);
    long long max_points = routes_query_ll(req, "max_points", 1000, 1, 10000);
    if (since < 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "since_step",
                         "since_step must be a non-negative integer");
        return;
    }
    if (max_points < 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "max_points",
                         "max_points must be 1 to 10000");
        return;
    }
    if (name && (strlen(name) == 0 || strlen(name) > 64)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "name", "name must be 1 to 64 characters");
        return;
    }
    /* The series that exist (distinct names are few: read them first). */
    json_t *names = NULL, *series = json_array(), *one;
    gt_error err = {0};
    int rc = runs_series_names(a->db, id, name, &names, &err);
    size_t i;
    json_t *row;
    json_array_foreach(names, i, row) {
        if (rc)
            break;
        rc = runs_series(a->db, id, json_string_value(json_object_get(row, "stage")),
                         json_string_value(json_object_get(row, "name")), since, max_points,
                         &one, &err);
        if (rc == GT_OK)
            json_array_append_new(series, one);
    }
    json_decref(names);
    /* Validation losses (fp32) as the series "val_loss" of each stage. */
    if (!name || strcmp(name, "val_loss") == 0) {
        static const char *const stages[] = {"energy", "shower"};
        for (int k = 0; k < 2 && rc == GT_OK; k++) {
            rc = runs_series(a->db, id, stages[k], "val_loss", since, max_points, &one, &err);
            if (rc == GT_OK && json_integer_value(json_object_get(one, "count")) > 0)
                json_array_append_new(series, one);
            else if (rc == GT_OK)
                json_decref(one);
        }
    }
    if (rc) {
        json_decref(series);
        routes_reply_internal(req, &err);
        return;
    }
    http_reply_json(req, 200,
                    json_pack("{s:I, s:I, s:o}", "run_id", (json_int_t)id, "max_points",
                              (json_int_t)max_points, "series", series));
}

/* ---------------------------------------------------------------------------
 * Checkpoints
 * ------------------------------------------------------------------------- */

void route_runs_checkpoints(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = routes_path_run(req, a->db);
    if (!id)
        return;
    json_t *rows = NULL;
    gt_error err = {0};
    if (runs_checkpoints(a->db, id, &rows, &err) != GT_OK) {
        routes_reply_internal(req, &err);
        return;
    }
    json_t *items = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        json_array_append_new(
            items, json_pack("{s:O, s:O, s:O, s:O, s:b, s:O, s:O, s:O, s:O}", "id",
                             json_object_get(r, "id"), "stage", json_object_get(r, "stage"),
                             "step", json_object_get(r, "step"), "val_loss",
                             json_object_get(r, "val_loss"), "best",
                             (int)json_integer_value(json_object_get(r, "is_best")), "precision",
                             json_object_get(r, "precision"), "size_bytes",
                             json_object_get(r, "size_bytes"), "sha256",
                             json_object_get(r, "checksum"), "created_at",
                             json_object_get(r, "created_at")));
    }
    json_decref(rows);
    http_reply_json(req, 200, json_pack("{s:I, s:o}", "run_id", (json_int_t)id, "items", items));
}

void route_runs_checkpoint(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = routes_path_run(req, a->db);
    if (!id)
        return;
    int64_t ck = routes_parse_id(http_param(req, "ckpt"));
    runs_blob b;
    gt_error err = {0};
    int rc = runs_checkpoint_blob(a->db, id, ck, &b, &err);
    if (rc == GT_ENOTFOUND) {
        http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL,
                         "run %lld has no checkpoint '%s' (it may have been pruned)",
                         (long long)id, http_param(req, "ckpt"));
        return;
    }
    if (rc) {
        routes_reply_internal(req, &err);
        return;
    }
    char disp[160];
    snprintf(disp, sizeof disp, "attachment; filename=\"run%lld-%s-step%lld.ckpt\"",
             (long long)id, b.stage, b.step);
    const char *headers[] = {"X-Checksum-SHA256", b.sha256, "Content-Disposition", disp, NULL};
    http_reply_buffer(req, 200, "application/octet-stream", b.data, b.len, headers);
}
