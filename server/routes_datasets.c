/* routes_datasets: /v1/datasets.  Registering a file reads its metadata here
 * (shapes, and that the rows it declares can be in it: the same time for any
 * size) and queues it: the datasets worker reads and checks every row.  A
 * synthetic dataset is only queued: the datasets worker makes it.
 * Contracts: api/openapi.json. */
#include "routes_datasets.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "app.h"
#include "calo_h5.h"
#include "datasets.h"
#include "geo.h"
#include "gt_path.h"
#include "model_data.h"
#include "model_energy.h"
#include "routes.h"
#include "synth.h"

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
    if (rc == GT_OK)
        http_reply_json(req, status, dataset_object(row));
    else if (rc == GT_ENOTFOUND)
        http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL, "%s", err.message);
    else
        routes_reply_internal(req, &err);
    json_decref(row);
}

/* Names become file names: letters, digits, '-', '_', '.', no leading dot. */
static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 100 || s[0] == '.')
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return 0;
    return 1;
}

/* Adds the row; replies (409 for a taken name) and returns 0 on failure. */
static int insert(http_request *req, app *a, const datasets_new *d, int64_t *id)
{
    gt_error err = {0};
    int rc = datasets_add(a->db, d, id, &err);
    if (rc == GT_EINVAL)
        http_reply_error(req, 409, HTTP_E_CONFLICT, "name", "%s", err.message);
    else if (rc)
        routes_reply_internal(req, &err);
    return rc == GT_OK;
}

static void register_file(http_request *req, app *a, const char *name, const char *path,
                          const char *geometry)
{
    /* The file must resolve (symlinks included) to a place inside the data
     * directory: "../x.h5", "/x.h5" or a link out of it is refused (gt_path),
     * and no message names where the directory really is. */
    char root[PATH_MAX], real[PATH_MAX];
    gt_error err = {0};
    int rc = gt_path_inside(a->cfg.data_dir, path, real, sizeof real, &err);
    if (rc == GT_EINVAL || rc == GT_ENOTFOUND) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "path", "%s", err.message);
        return;
    }
    if (rc || !realpath(a->cfg.data_dir, root)) {
        routes_reply_internal(req, &err);
        return;
    }
    size_t rl = strlen(root);
    if (!model_geometry_is_builtin(geometry)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "geometry",
                         "the service takes a built-in geometry: dataset_1_photons, "
                         "dataset_1_pions, dataset_2 or dataset_3");
        return;
    }
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
        datasets_kick(a->datasets);
        reply_dataset(req, a, id, 202);
    }
}

static void queue_synthetic(http_request *req, app *a, const char *name, json_t *syn)
{
    const char *geometry = "dataset_2", *particle = NULL;
    json_int_t n = 0, seed = 1;
    json_t *energy = NULL;
    json_error_t jerr;
    if (json_unpack_ex(syn, &jerr, JSON_STRICT, "{s?s, s?s, s:I, s?I, s?o}", "geometry",
                       &geometry, "particle", &particle, "n", &n, "seed", &seed, "energy",
                       &energy) != 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "synthetic", "%s", jerr.text);
        return;
    }
    if (n < 1 || n > a->cfg.max_synthetic_showers) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "synthetic.n",
                         "n must be 1 to %ld (--max-synthetic-showers)",
                         a->cfg.max_synthetic_showers);
        return;
    }
    if (seed < 0) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "synthetic.seed",
                         "seed must be non-negative");
        return;
    }
    /* the spec run configs and sample requests take, parsed by the same
     * function */
    model_energy spec;
    model_energy_default(&spec);
    char field[64] = "";
    gt_error err = {0};
    if (energy && model_energy_from_json(energy, "synthetic.energy", MODEL_ENERGY_MIN_MEV,
                                         MODEL_ENERGY_MAX_MEV, &spec, field, sizeof field,
                                         &err) != GT_OK) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, field, "%s", err.message);
        return;
    }
    synth_particle p;
    if (particle && synth_parse_particle(particle, &p, &err) != GT_OK) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "synthetic.particle", "%s", err.message);
        return;
    }
    geo_geometry geo;
    if (!model_geometry_is_builtin(geometry)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "synthetic.geometry",
                         "the service takes a built-in geometry: dataset_1_photons, "
                         "dataset_1_pions, dataset_2 or dataset_3");
        return;
    }
    if (model_geometry_load(geometry, &geo, &err) != GT_OK) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "synthetic.geometry", "%s", err.message);
        return;
    }
    /* the file, at most 4 bytes a voxel and one energy a shower, must fit
     * in what the data directory's file system has free */
    double need = (double)n * ((double)geo.n_voxels + 1.0) * 4.0;
    geo_free(&geo);
    struct statvfs fs;
    if (statvfs(a->cfg.data_dir, &fs) == 0) {
        double avail = (double)fs.f_bavail * (double)fs.f_frsize;
        if (need > avail) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "synthetic.n",
                             "%lld showers need up to %.0f MB and the data directory has %.0f MB "
                             "free", (long long)n, need / 1e6, avail / 1e6);
            return;
        }
    }
    json_t *doc = json_pack("{s:I, s:I, s:o}", "n", n, "seed", seed, "energy",
                            model_energy_to_json(&spec));
    if (doc && particle)
        json_object_set_new(doc, "particle", json_string(particle));
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(doc);
    char path[160];
    snprintf(path, sizeof path, "%s.h5", name);
    int64_t id;
    datasets_new d = {name, "synthetic", geometry, path, text, "pending", -1, 0, -1, 0, 0};
    if (text && insert(req, a, &d, &id)) {
        datasets_kick(a->datasets);
        reply_dataset(req, a, id, 202);
    } else if (!text) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
    }
    free(text);
}

void route_datasets_create(http_request *req, void *ctx)
{
    app *a = ctx;
    json_t *body = http_body_json(req);
    if (!json_is_object(body)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "", "the body must be an object");
        return;
    }
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        if (strcmp(key, "name") && strcmp(key, "path") && strcmp(key, "geometry") &&
            strcmp(key, "synthetic")) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, key, "unknown field '%s'", key);
            return;
        }
    }
    json_t *name = json_object_get(body, "name"), *path = json_object_get(body, "path");
    json_t *geometry = json_object_get(body, "geometry"), *syn = json_object_get(body, "synthetic");
    if (!json_is_string(name) || !name_ok(json_string_value(name))) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "name",
                         "name must be 1 to 100 of [A-Za-z0-9._-], not starting with '.'");
        return;
    }
    if ((path != NULL) == (syn != NULL)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "", "give either path or synthetic");
        return;
    }
    if (path) {
        if (!json_is_string(path) || json_string_length(path) == 0) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "path", "path must be a string");
            return;
        }
        if (geometry && !json_is_string(geometry)) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "geometry", "geometry must be a string");
            return;
        }
        register_file(req, a, json_string_value(name), json_string_value(path),
                      geometry ? json_string_value(geometry) : "dataset_2");
        return;
    }
    if (geometry || !json_is_object(syn)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, geometry ? "geometry" : "synthetic",
                         "synthetic must be an object (geometry goes inside it)");
        return;
    }
    queue_synthetic(req, a, json_string_value(name), syn);
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
