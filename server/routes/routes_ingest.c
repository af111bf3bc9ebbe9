/* routes_ingest: what a Slurm job's trainer sends back to the service
 * (the routes: routes_handlers.h; the rules: ingest.h), on the job's own
 * ingest token. */
#include "routes_handlers.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "gt_sha256.h"
#include "ingest.h"
#include "ingest_check.h"
#include "log.h"
#include "model_accept.h"
#include "model_data.h"
#include "query_args.h"
#include "routes_common.h"
#include "runs.h"
#include "slurm.h"

/* The run of the path's {id} and its {stage} (1 energy, 2 shower), or 0
 * after the reply (404 for the run, 422 for the stage). */
static int64_t path_run_stage(http_request *req, store *db, int *stage)
{
    int64_t id = routes_path_run(req, db);
    if (!id)
        return 0;
    const char *s = http_param(req, "stage");
    *stage = s && strcmp(s, "energy") == 0 ? 1 : s && strcmp(s, "shower") == 0 ? 2 : 0;
    if (*stage)
        return id;
    http_reply_error(req, 422, HTTP_E_VALIDATION, "stage",
                     "stage must be energy or shower, not '%s'", s ? s : "");
    return 0;
}

static void reply_conflict_or_internal(http_request *req, int rc, const char *conflict,
                                       const gt_error *err)
{
    if (rc)
        routes_reply_internal(req, err);
    else
        http_reply_error(req, 409, HTTP_E_CONFLICT, NULL, "%s", conflict);
}

/* {"step", "sha256", "size_bytes"} of the newest checkpoint of each stage
 * (null for a stage without one). */
static int newest_checkpoints(store *db, int64_t run, json_t **out, gt_error *err)
{
    json_t *rows = NULL;
    int rc = runs_checkpoints(db, run, &rows, err);
    if (rc)
        return rc;
    json_t *o = json_pack("{s:n, s:n}", "energy", "shower");
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        const char *stage = json_string_value(json_object_get(r, "stage"));
        json_t *have = json_object_get(o, stage ? stage : "");
        long long step = json_integer_value(json_object_get(r, "step"));
        if (!stage || (json_is_object(have) &&
                       json_integer_value(json_object_get(have, "step")) >= step))
            continue;
        json_object_set_new(o, stage,
                            json_pack("{s:I, s:O, s:O}", "step", (json_int_t)step, "sha256",
                                      json_object_get(r, "checksum"), "size_bytes",
                                      json_object_get(r, "size_bytes")));
    }
    json_decref(rows);
    *out = o;
    return GT_OK;
}

void route_ingest_start(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = routes_path_run(req, a->db);
    if (!id)
        return;
    json_t *body = http_body_json(req);
    if (!json_is_object(body)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "", "the body must be an object");
        return;
    }
    const char *keys[] = {"device", "node", "job_id", "restart", NULL};
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) {
        int ok = 0;
        for (const char **p = keys; *p && !ok; p++)
            ok = strcmp(*p, k) == 0;
        if (!ok) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, k, "%s: unknown key", k);
            return;
        }
    }
    const char *device = json_string_value(json_object_get(body, "device"));
    const char *node = json_string_value(json_object_get(body, "node"));
    if ((json_object_get(body, "device") && (!device || strlen(device) > 31)) ||
        (json_object_get(body, "node") && (!node || strlen(node) > 128))) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, device ? "node" : "device",
                         "device (at most 31 bytes) and node (at most 128) are strings");
        return;
    }
    char status[16], conflict[INGEST_CONFLICT_CAP];
    gt_error err = {0};
    int rc = ingest_start(a->ingest, id, device, status, conflict, &err);
    if (rc || conflict[0]) {
        reply_conflict_or_internal(req, rc, conflict, &err);
        return;
    }
    /* the config the job trains with: the run's, written back whole and
     * versioned, so the trainer reads it as this giant does */
    model_config run_cfg;
    json_t *ck = NULL, *cfg = NULL;
    if ((rc = runs_read_config(a->db, id, &run_cfg, &err)) ||
        (rc = newest_checkpoints(a->db, id, &ck, &err))) {
        routes_reply_internal(req, &err);
        return;
    }
    if (!(cfg = model_config_to_json(&run_cfg))) {
        json_decref(ck);
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
        return;
    }
    log_msg(LOG_INFO, "ingest", "run=%lld start=1 node=\"%s\" device=\"%s\"", (long long)id,
            node ? node : "", device ? device : "");
    http_reply_json(req, 200,
                    json_pack("{s:I, s:s, s:o, s:o}", "run_id", (json_int_t)id, "status", status,
                              "config", cfg, "checkpoints", ck));
}

void route_ingest_checkpoint_get(http_request *req, void *ctx)
{
    app *a = ctx;
    int stage = 0;
    int64_t id = path_run_stage(req, a->db, &stage);
    if (!id)
        return;
    const char *bp = http_query(req, "best");
    if (bp && strcmp(bp, "0") != 0 && strcmp(bp, "1") != 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "best", "best must be 0 or 1");
        return;
    }
    void *blob = NULL;
    size_t len = 0;
    long long step = 0;
    gt_error err = {0};
    int rc = runs_load_checkpoint(a->db, id, stage, bp && bp[0] == '1', &blob, &len, &step, &err);
    if (!routes_reply_rc(req, rc, &err, 404, 0, NULL))
        return;
    char sum[65], stp[32];
    gt_sha256_hex(blob, len, sum);
    snprintf(stp, sizeof stp, "%lld", step);
    const char *headers[] = {"X-Checksum-SHA256", sum, "X-Checkpoint-Step", stp, NULL};
    http_reply_buffer(req, 200, "application/octet-stream", blob, len, headers);
}

void route_ingest_batch(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = routes_path_run(req, a->db);
    if (!id)
        return;
    json_t *body = http_body_json(req);
    char field[160] = "";
    gt_error err = {0};
    if (ingest_batch_check(body, field, sizeof field, &err)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, field, "%s", err.message);
        return;
    }
    ingest_counts c;
    char status[16] = "", conflict[INGEST_CONFLICT_CAP];
    int cancel = 0;
    int rc = ingest_batch_write(a->ingest, id, body, &c, status, &cancel, conflict, &err);
    if (rc || conflict[0]) {
        reply_conflict_or_internal(req, rc, conflict, &err);
        return;
    }
    if (json_object_get(body, "status")) {
        log_msg(LOG_INFO, "ingest", "run=%lld reported=%s", (long long)id,
                json_string_value(json_object_get(body, "status")));
        slurm_kick(a->slurm);
    }
    http_reply_json(
        req, 200,
        json_pack("{s:I, s:{s:i, s:i, s:i}, s:{s:i, s:i, s:i}, s:s, s:b}", "run_id",
                  (json_int_t)id, "metrics", "received", c.metrics, "recorded",
                  c.metrics_recorded, "duplicates", c.metrics - c.metrics_recorded,
                  "validations", "received", c.validations, "recorded", c.validations_recorded,
                  "duplicates", c.validations - c.validations_recorded, "status", status,
                  "cancel_requested", cancel));
}

static int hex64(const char *s)
{
    if (!s || strlen(s) != 64)
        return 0;
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

/* The request's bytes when they hash to its X-Checksum-SHA256 (got: their
 * hex sha256); NULL once the 422 is sent. */
static const char *checked_body(http_request *req, const char *what, size_t *len, char got[65])
{
    const char *want = http_header(req, "X-Checksum-SHA256");
    if (!hex64(want)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "X-Checksum-SHA256",
                         "a %s comes with X-Checksum-SHA256: the hex SHA-256 of its bytes",
                         what);
        return NULL;
    }
    const char *blob = http_body(req, len);
    if (*len == 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "body", "the %s is empty", what);
        return NULL;
    }
    char lower[65];
    gt_sha256_hex(blob, *len, got);
    for (int i = 0; i < 65; i++)
        lower[i] = (char)tolower((unsigned char)want[i]);
    if (strcmp(got, lower) != 0) {
        http_reply_error(req, 422, HTTP_E_CHECKSUM, "X-Checksum-SHA256",
                         "the %zu bytes received hash to %s, not %s: send the %s again", *len,
                         got, lower, what);
        return NULL;
    }
    return blob;
}

void route_ingest_checkpoint_put(http_request *req, void *ctx)
{
    app *a = ctx;
    int stage = 0;
    int64_t id = path_run_stage(req, a->db, &stage);
    if (!id)
        return;
    long long step = query_args_ll(http_param(req, "step"), -1, 0, 1000000000000LL);
    if (step < 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "step",
                         "step must be an integer from 0 to 10^12");
        return;
    }
    const char *vl = http_query(req, "val_loss");
    double val = NAN;
    if (vl && strcmp(vl, "nan") != 0) {
        char *end = NULL;
        val = strtod(vl, &end);
        if (!*vl || *end || !isfinite(val)) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "val_loss",
                             "val_loss must be a finite number, or nan");
            return;
        }
    }
    size_t len = 0;
    char got[65];
    const char *blob = checked_body(req, "checkpoint", &len, got);
    if (!blob)
        return;
    int64_t ck = 0;
    int dup = 0, best = 0;
    char conflict[INGEST_CONFLICT_CAP];
    gt_error err = {0};
    int rc = ingest_checkpoint(a->ingest, id, stage, step, (float)val, blob, len, got, &ck, &dup,
                               &best, conflict, &err);
    if (rc || conflict[0]) {
        reply_conflict_or_internal(req, rc, conflict, &err);
        return;
    }
    http_reply_json(req, dup ? 200 : 201,
                    json_pack("{s:I, s:I, s:s, s:I, s:s, s:I, s:b, s:b}", "run_id",
                              (json_int_t)id, "checkpoint_id", (json_int_t)ck, "stage",
                              runs_stage_name(stage), "step", (json_int_t)step, "sha256", got,
                              "size_bytes", (json_int_t)len, "duplicate", dup, "best", best));
}

void route_ingest_acceptance_put(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = routes_path_run(req, a->db);
    if (!id)
        return;
    long long showers = routes_query_ll(req, "showers", -1, 1, 1000000000LL);
    if (showers < 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "showers",
                         "showers (the training showers the test was trained on) must be an "
                         "integer from 1 to 10^9");
        return;
    }
    size_t len = 0;
    char got[65];
    const char *blob = checked_body(req, "acceptance test", &len, got);
    if (!blob)
        return;
    /* what it is, and the checkpoints it names, from its own bytes */
    model_accept t;
    gt_error err = {0};
    if (model_accept_unpack(blob, len, &t, &err) != GT_OK) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "body", "not an acceptance test: %s",
                         err.message);
        return;
    }
    /* it must read this run's showers: the features of its geometry */
    model_config cfg;
    geo_geometry g;
    memset(&g, 0, sizeof g);
    int rc = runs_read_config(a->db, id, &cfg, &err);
    if (rc == GT_OK && (rc = model_geometry_load(cfg.geometry, &g, &err)) != GT_OK) {
        geo_free(&g);
        model_accept_free(&t);
        http_reply_error(req, 409, HTTP_E_CONFLICT, NULL,
                         "the run's geometry cannot be read here: %s", err.message);
        return;
    }
    if (rc == GT_OK && (rc = model_accept_fits(&t, &g, &err)) != GT_OK) {
        geo_free(&g);
        model_accept_free(&t);
        http_reply_error(req, 422, HTTP_E_VALIDATION, "body", "%s", err.message);
        return;
    }
    geo_free(&g);
    if (rc) {
        model_accept_free(&t);
        routes_reply_internal(req, &err);
        return;
    }
    char hex[2][65];
    int named = 0;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 32; i++) {
            snprintf(hex[s] + 2 * i, 3, "%02x", t.ckpt_sha256[s][i]);
            named |= t.ckpt_sha256[s][i];
        }
    double auc = t.auc, acceptance = t.acceptance;
    model_accept_free(&t);
    if (!named) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "body",
                         "the acceptance test names no checkpoints it was trained against");
        return;
    }
    const char *sums[2] = {hex[0], hex[1]};
    char conflict[INGEST_CONFLICT_CAP];
    rc = ingest_acceptance(a->ingest, id, sums, showers, auc, acceptance, blob, len, conflict,
                           &err);
    if (rc || conflict[0]) {
        reply_conflict_or_internal(req, rc, conflict, &err);
        return;
    }
    log_msg(LOG_INFO, "ingest", "run=%lld acceptance_test=1 auc=%.4f acceptance=%.4f",
            (long long)id, auc, acceptance);
    http_reply_json(req, 201,
                    json_pack("{s:I, s:s, s:I, s:I, s:f, s:f, s:{s:s, s:s}}", "run_id",
                              (json_int_t)id, "sha256", got, "size_bytes", (json_int_t)len,
                              "showers", (json_int_t)showers, "auc", auc, "acceptance",
                              acceptance, "checkpoints", "energy", hex[0], "shower", hex[1]));
}
