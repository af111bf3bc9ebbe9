/* routes_models: export a run as a model file, import, list and read
 * models.  Contracts: api/openapi.json; the file: server/model_format.md. */
#include "routes_handlers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "gt_sha256.h"
#include "model_pack.h"
#include "models.h"
#include "routes_common.h"
#include "runs.h"

void route_runs_model(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = routes_path_run(req, a->db);
    if (!id)
        return;
    void *file = NULL;
    size_t len = 0;
    gt_error err = {0};
    int rc = models_export(a->db, id, &file, &len, &err);
    if (rc == GT_ENOTFOUND) {
        http_reply_error(req, 409, HTTP_E_CONFLICT, NULL,
                         "run %lld has no best checkpoint of both stages yet", (long long)id);
        return;
    }
    if (rc) {
        routes_reply_internal(req, &err);
        return;
    }
    char sum[65], disp[96];
    gt_sha256_hex(file, len, sum);
    snprintf(disp, sizeof disp, "attachment; filename=\"run%lld.giant\"", (long long)id);
    const char *headers[] = {"X-Checksum-SHA256", sum, "Content-Disposition", disp, NULL};
    http_reply_buffer(req, 200, "application/octet-stream", file, len, headers);
}

void route_models_create(http_request *req, void *ctx)
{
    app *a = ctx;
    size_t len = 0;
    const char *body = http_body(req, &len);
    const char *name = http_query(req, "name");
    json_t *row = NULL;
    int created = 0, taken = 0;
    model_pack_fault fault = MODEL_PACK_FAULT_NONE;
    char part[64] = "";
    gt_error err = {0};
    int rc = models_import(a->db, name, body, len, &row, &created, &fault, part, &taken, &err);
    if (rc == GT_OK) {
        http_reply_json(req, created ? 201 : 200, row);
        return;
    }
    if (fault != MODEL_PACK_FAULT_NONE) {
        /* the part is the error's field: which part of the file is wrong */
        http_reply_error(req, 422, model_pack_fault_code(fault), part[0] ? part : NULL, "%s",
                         err.message);
        return;
    }
    if (taken) {
        http_reply_error(req, 409, HTTP_E_CONFLICT, "name", "%s", err.message);
        return;
    }
    routes_reply_rc(req, rc, &err, 0, 422, "name");
}

void route_models_list(http_request *req, void *ctx)
{
    app *a = ctx;
    routes_reply_list(req, a->db, models_list);
}

void route_models_get(http_request *req, void *ctx)
{
    app *a = ctx;
    json_t *row = NULL;
    gt_error err = {0};
    int rc = models_get(a->db, http_param(req, "name"), &row, &err);
    if (routes_reply_rc(req, rc, &err, 404, 0, NULL))
        http_reply_json(req, 200, row);
}

void route_models_file(http_request *req, void *ctx)
{
    app *a = ctx;
    const char *name = http_param(req, "name");
    void *file = NULL;
    size_t len = 0;
    char sum[65];
    gt_error err = {0};
    int rc = models_file(a->db, name, NULL, &file, &len, sum, &err);
    if (!routes_reply_rc(req, rc, &err, 404, 0, NULL))
        return;
    char disp[128];
    snprintf(disp, sizeof disp, "attachment; filename=\"%s.giant\"", name);
    const char *headers[] = {"X-Checksum-SHA256", sum, "Content-Disposition", disp, NULL};
    http_reply_buffer(req, 200, "application/octet-stream", file, len, headers);
}
