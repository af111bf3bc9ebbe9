/* routes_datasets: /v1/datasets.  The body is checked by dataset_body; what
 * touches the disk or the database is done here.  Registering a file reads
 * its metadata here (shapes, and that the rows it declares can be in it:
 * the same time for any size) and queues it: the datasets worker reads and
 * checks every row.  A synthetic dataset is only queued: the datasets
 * worker makes it.  Contracts: api/openapi.json. */
#include "routes_handlers.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "app.h"
#include "calo_h5.h"
#include "dataset_body.h"
#include "datasets.h"
#include "datasets_worker.h"
#include "geo.h"
#include "gt_path.h"
#include "model_data.h"
#include "routes_common.h"

/* The API's dataset object (api/openapi.json) from a datasets row. */
static json_t *dataset_object(json_t *row)
{
#define COL(name) json_object_get(row, name)
    json_t *spec = json_loads(json_string_value(COL("spec")), 0, NULL);
    return json_pack("{s:O, s:O, s:O, s:O, s:O, s:o, s:O, s:O, s:O, s:O, s:O, s:O, s:{s:O, s:O},"
                     " s:O}",
                     "id", COL("id"), "name", COL("name"), "kind", COL("kind"), "geometry",
                     COL("geometry"), "path", COL("path"), "spec", spec ? spec : json_object(),
                     "n_showers", COL("n_showers"), "n_voxels", COL("n_voxels"), "size_bytes",
                     COL("size_bytes"), "status", COL("status"), "progress", COL("progress"),
                     "error", COL("error"), "energy_range_mev", "min", COL("e_min_mev"), "max",
                     COL("e_max_mev"), "created_at", COL("created_at"));
#undef COL
}

static void reply_dataset(http_request *req, app *a, int64_t id, unsigned status)
{
    json_t *row = NULL;
    gt_error err = {0};
    int rc = datasets_get(a->db, id, &row, &err);
    if (routes_reply_rc(req, rc, &err, 404, 0, NULL))
        http_reply_json(req, status, dataset_object(row));
    json_decref(row);
}

/* Adds the row; replies (409 for a taken name) and returns 0 on failure. */
static int insert(http_request *req, app *a, const datasets_new *d, int64_t *id)
{
    gt_error err = {0};
    return routes_reply_rc(req, datasets_add(a->db, d, id, &err), &err, 0, 409, "name");
}

/* Registers the file a checked body names (geometry a built-in one). */
static void register_file(http_request *req, app *a, const char *name, const char *path,
                          const char *geometry)
{
    /* The file must resolve (symlinks included) to a place inside the data
     * directory: "../x.h5", "/x.h5" or a link out of it is refused (gt_path),
     * and no message names where the directory really is. */
    char root[PATH_MAX], real[PATH_MAX];
    gt_error err = {0};
    int rc = gt_path_inside(a->cfg.data_dir, path, real, sizeof real, &err);
    if (!routes_reply_rc(req, rc, &err, 422, 422, "path"))
        return;
    if (!realpath(a->cfg.data_dir, root)) {
        routes_reply_internal(req, &err);
        return;
    }
    size_t rl = strlen(root);
    geo_geometry geo;
    if (model_geometry_load(geometry, &geo, &err) != GT_OK) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "geometry", "%s", err.message);
        return;
    }
    /* Metadata only, on this thread: the shapes, and that the rows the file
     * declares can be in it.  Reading the rows is the worker's job. */
    calo_h5_reader r;
    rc = calo_h5_open(&r, real, &geo, &err);
    geo_free(&geo);
    struct stat stt;
    long long size = stat(real, &stt) == 0 ? (long long)stt.st_size : 0;
    long long n = rc == GT_OK ? r.n_rows : 0;
    int voxels = rc == GT_OK ? r.n_voxels : 0;
    if (rc == GT_OK) {
        rc = calo_h5_check_storage(&r, size, NULL, &err);
        calo_h5_close(&r);
    }
    if (rc) {
        gt_path_scrub(err.message, sizeof err.message, real, path);
        http_reply_error(req, 422, HTTP_E_VALIDATION, "path", "%s", err.message);
        return;
    }
    if (n < 1) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "path", "%s holds no showers", path);
        return;
    }
    /* pending until the datasets worker has checked every row; n_showers
     * is what the file declares until then */
    int64_t id;
    datasets_new d = {name, "file", geometry, real + rl + 1, "{}", "pending", n, voxels, size,
                      0, 0};
    if (insert(req, a, &d, &id)) {
        datasets_worker_kick(a->datasets);
        reply_dataset(req, a, id, 202);
    }
}

/* Queues a synthetic dataset the body asked for (dataset_body has checked
 * it), when its file fits in the data directory. */
static void queue_synthetic(http_request *req, app *a, const dataset_body *b)
{
    geo_geometry geo;
    gt_error err = {0};
    if (model_geometry_load(b->geometry, &geo, &err) != GT_OK) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "synthetic.geometry", "%s", err.message);
        return;
    }
    /* the file, at most 4 bytes a voxel and one energy a shower, must fit
     * in what the data directory's file system has free */
    double need = (double)b->n * ((double)geo.n_voxels + 1.0) * 4.0;
    geo_free(&geo);
    struct statvfs fs;
    if (statvfs(a->cfg.data_dir, &fs) == 0) {
        double avail = (double)fs.f_bavail * (double)fs.f_frsize;
        if (need > avail) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "synthetic.n",
                             "%lld showers need up to %.0f MB and the data directory has %.0f MB "
                             "free", b->n, need / 1e6, avail / 1e6);
            return;
        }
    }
    json_t *doc = dataset_body_spec(b);
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(doc);
    char path[160];
    snprintf(path, sizeof path, "%s.h5", b->name);
    int64_t id;
    datasets_new d = {b->name, "synthetic", b->geometry, path, text, "pending", -1, 0, -1, 0, 0};
    if (text && insert(req, a, &d, &id)) {
        datasets_worker_kick(a->datasets);
        reply_dataset(req, a, id, 202);
    } else if (!text) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
    }
    free(text);
}

void route_datasets_create(http_request *req, void *ctx)
{
    app *a = ctx;
    dataset_body b;
    dataset_body_fault fault;
    if (!dataset_body_parse(http_body_json(req), a->cfg.max_synthetic_showers, &b, &fault)) {
        http_reply_error(req, fault.status, HTTP_E_VALIDATION, fault.field, "%s", fault.message);
        return;
    }
    if (b.path)
        register_file(req, a, b.name, b.path, b.geometry);
    else
        queue_synthetic(req, a, &b);
}

void route_datasets_list(http_request *req, void *ctx)
{
    app *a = ctx;
    json_t *rows = NULL;
    gt_error err = {0};
    if (datasets_list(a->db, 1000, &rows, &err) != GT_OK) {
        routes_reply_internal(req, &err);
        return;
    }
    json_t *items = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) json_array_append_new(items, dataset_object(row));
    json_decref(rows);
    http_reply_json(req, 200, json_pack("{s:o}", "items", items));
}

void route_datasets_get(http_request *req, void *ctx)
{
    const char *s = http_param(req, "id");
    char *end;
    errno = 0;
    long long id = strtoll(s, &end, 10);
    if (errno || *end || id <= 0 || s[0] == '+' || s[0] == ' ') {
        http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL, "dataset '%s' does not exist", s);
        return;
    }
    reply_dataset(req, ctx, id, 200);
}
