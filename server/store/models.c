#include "models.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "build_info.h"
#include "gt_path.h"
#include "gt_sha256.h"
#include "model_accept.h"
#include "model_data.h"
#include "numfmt.h"
#include "runs.h"

/* The columns the API shows; the file stays out of every listing. */
#define MODEL_COLUMNS                                                                      \
    "id, name, content_sha256, file_sha256, geometry, source_run_id, size_bytes, "        \
    "created_at, manifest"

int models_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > MODELS_NAME_MAX)
        return 0;
    int digits = 1;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
        if (c < '0' || c > '9')
            digits = 0;
    }
    return !digits;
}

/* ---------------------------------------------------------------------------
 * Export
 * ------------------------------------------------------------------------- */

/* The binning file's bytes: the built-in one a name gives, or the file a
 * path names (an offline run's own geometry).  *owned is what to free. */
static int geometry_bytes(const char *geometry, const void **xml, size_t *len, void **owned,
                          gt_error *err)
{
    *owned = NULL;
    if (model_geometry_is_builtin(geometry))
        return model_geometry_builtin_xml(geometry, xml, len, err);
    void *b = NULL;
    size_t n = 0;
    int rc = gt_path_read_all(geometry, &b, &n, err);
    if (rc != GT_OK)
        return rc;
    *xml = b;
    *len = n;
    *owned = b;
    return GT_OK;
}

/* The run's acceptance test for the checkpoints exported (*blob NULL when
 * it has none), naming them by sha256: a test recorded before its blob
 * carried them names none, and the store only hands out a test of the
 * current best pair, so they are filled in here. */
static int acceptance_for_export(store *s, int64_t id, void *const ck[2], const size_t cl[2],
                                 void **blob, size_t *len, gt_error *err)
{
    *blob = NULL;
    *len = 0;
    void *raw = NULL;
    size_t raw_len = 0;
    gt_error none;
    int rc = runs_load_acceptance(s, id, &raw, &raw_len, &none);
    if (rc == GT_ENOTFOUND)
        return GT_OK;
    if (rc) {
        *err = none;
        return rc;
    }
    model_accept a;
    if ((rc = model_accept_unpack(raw, raw_len, &a, err))) {
        free(raw);
        return gt_error_wrap(err, "the acceptance test of run %lld", (long long)id);
    }
    static const uint8_t zero[2][32];
    if (memcmp(a.ckpt_sha256, zero, sizeof zero) != 0) {
        *blob = raw;
        *len = raw_len;
        model_accept_free(&a);
        return GT_OK;
    }
    free(raw);
    for (int i = 0; i < 2; i++)
        gt_sha256(ck[i], cl[i], a.ckpt_sha256[i]);
    rc = model_accept_pack(&a, blob, len, err);
    model_accept_free(&a);
    return rc;
}

int models_export(store *s, int64_t id, void **out, size_t *len, gt_error *err)
{
    *out = NULL;
    *len = 0;
    json_t *run = NULL;
    char *config = NULL;
    void *ck[2] = {NULL, NULL}, *owned = NULL, *acc = NULL;
    size_t cl[2] = {0, 0}, acc_len = 0;
    int rc;
    if ((rc = runs_get(s, id, &run, err)) || (rc = runs_config(s, id, &config, err)) ||
        (rc = runs_load_checkpoint(s, id, 1, 1, &ck[0], &cl[0], NULL, err)) ||
        (rc = runs_load_checkpoint(s, id, 2, 1, &ck[1], &cl[1], NULL, err)) ||
        (rc = acceptance_for_export(s, id, ck, cl, &acc, &acc_len, err)))
        goto out;
    /* the file carries the config as recorded, and the geometry it names */
    model_config cfg;
    const void *xml = NULL;
    size_t xml_len = 0;
    if ((rc = runs_parse_config(config, &cfg, err)) ||
        (rc = geometry_bytes(cfg.geometry, &xml, &xml_len, &owned, err)))
        goto out;
    const build_info *bi = build_info_get();
    model_pack_src src = {
        .run_id = id,
        .run_name = json_string_value(json_object_get(run, "name")),
        .giant_version = bi->version,
        .git_commit = bi->git_commit,
        .config_json = config,
        .geometry_xml = xml,
        .geometry_len = xml_len,
        .ckpt = {ck[0], ck[1]},
        .ckpt_len = {cl[0], cl[1]},
        .accept = acc,
        .accept_len = acc_len,
    };
    rc = model_pack_write(&src, out, len, err);
out:
    json_decref(run);
    free(acc);
    free(config);
    free(ck[0]);
    free(ck[1]);
    free(owned);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Reads
 * ------------------------------------------------------------------------- */

/* The manifest column as an object, not text. */
static void manifest_object(json_t *row)
{
    json_t *m = json_loads(json_string_value(json_object_get(row, "manifest")), 0, NULL);
    json_object_set_new(row, "manifest", m ? m : json_null());
}

static int get_where(store *s, const char *where, const store_val *args, int nargs,
                     json_t **row, gt_error *err)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT " MODEL_COLUMNS " FROM models WHERE %s", where);
    int rc = store_row_json(s, "reading a model", sql, args, nargs, row, err);
    if (rc == GT_OK)
        manifest_object(*row);
    return rc;
}

int models_get(store *s, const char *name, json_t **row, gt_error *err)
{
    int rc = get_where(s, "name = ?", STORE_ARGS(STORE_TEXT(name)), row, err);
    if (rc == GT_ENOTFOUND)
        return gt_error_set(err, GT_ENOTFOUND, "model '%s' does not exist", name);
    return rc;
}

/* The columns of a models_source, then how many models the WHERE clause
 * matched. */
#define MODEL_SOURCE                                                                       \
    "SELECT id, source_run_id, name, json_extract(manifest, '$.geometry.voxels') AS voxels," \
    " json_extract(manifest, '$.geometry.layers') AS layers, count(*) OVER () AS matched"  \
    " FROM models"

static int read_source(store *s, const char *sql, const store_val *args, int nargs,
                       models_source *out, int *matched, gt_error *err)
{
    json_t *row = NULL;
    memset(out, 0, sizeof *out);
    *matched = 0;
    int rc = store_row_json(s, "finding a model", sql, args, nargs, &row, err);
    if (rc == GT_ENOTFOUND)
        return GT_OK;
    if (rc)
        return rc;
    const char *name = json_string_value(json_object_get(row, "name"));
    out->id = json_integer_value(json_object_get(row, "id"));
    out->source_run = json_integer_value(json_object_get(row, "source_run_id"));
    snprintf(out->name, sizeof out->name, "%s", name ? name : "");
    out->voxels = (int)json_integer_value(json_object_get(row, "voxels"));
    out->layers = (int)json_integer_value(json_object_get(row, "layers"));
    *matched = (int)json_integer_value(json_object_get(row, "matched"));
    json_decref(row);
    return GT_OK;
}

int models_source_by_name(store *s, const char *name, models_source *out, gt_error *err)
{
    int n = 0;
    int rc = read_source(s, MODEL_SOURCE " WHERE name = ?", STORE_ARGS(STORE_TEXT(name)), out,
                         &n, err);
    if (rc == GT_OK && n == 0)
        return gt_error_set(err, GT_ENOTFOUND, "model '%s' does not exist", name);
    return rc;
}

int models_source_by_run(store *s, int64_t run, models_source *out, gt_error *err)
{
    int n = 0;
    int rc = read_source(s, MODEL_SOURCE " WHERE source_run_id = ? ORDER BY id LIMIT 1",
                         STORE_ARGS(STORE_INT(run)), out, &n, err);
    if (rc)
        return rc;
    if (n == 0)
        return gt_error_set(err, GT_ENOTFOUND, "no model here was exported from run %lld",
                            (long long)run);
    if (n > 1)
        return gt_error_set(err, GT_EINVAL, "%d models here were exported from a run %lld"
                            " (of different trainers): ask for one by name", n,
                            (long long)run);
    return GT_OK;
}

int models_list(store *s, json_t **rows, gt_error *err)
{
    int rc = store_rows_json(s, "listing models",
                             "SELECT " MODEL_COLUMNS " FROM models ORDER BY id DESC LIMIT 1000",
                             STORE_NO_ARGS, rows, err);
    if (rc == GT_OK) {
        size_t i;
        json_t *r;
        json_array_foreach(*rows, i, r)
            manifest_object(r);
    }
    return rc;
}

static int read_file(store *s, const char *sql, const store_val *args, int nargs, int64_t *id,
                     void **blob, size_t *len, char sha[65], gt_error *err)
{
    static const char what[] = "reading a model file";
    sqlite3_stmt *st;
    int rc = store_query(s, what, sql, args, nargs, &st, err);
    if (rc)
        return rc;
    int r = store_step(s, st, what, err);
    char stored[65] = "";
    if (r == 1) {
        size_t n = (size_t)sqlite3_column_bytes(st, 2);
        const char *sum = (const char *)sqlite3_column_text(st, 1);
        snprintf(stored, sizeof stored, "%s", sum ? sum : "");
        if (id)
            *id = sqlite3_column_int64(st, 0);
        *blob = malloc(n ? n : 1);
        *len = n;
        if (*blob)
            memcpy(*blob, sqlite3_column_blob(st, 2), n);
        else
            rc = gt_error_set(err, GT_ENOMEM, "out of memory for a model file");
    }
    sqlite3_finalize(st);
    if (r < 0)
        return GT_EIO;
    if (r == 0)
        return GT_ENOTFOUND;
    if (rc)
        return rc;
    char got[65];
    gt_sha256_hex(*blob, *len, got);
    if (strcmp(got, stored) != 0) {
        free(*blob);
        *blob = NULL;
        return gt_error_set(err, GT_ECHECKSUM, "the stored model file is corrupt");
    }
    if (sha)
        memcpy(sha, got, 65);
    return GT_OK;
}

int models_file(store *s, const char *name, int64_t *id, void **blob, size_t *len,
                char sha256[65], gt_error *err)
{
    int rc = read_file(s, "SELECT id, file_sha256, file FROM models WHERE name = ?",
                       STORE_ARGS(STORE_TEXT(name)), id, blob, len, sha256, err);
    if (rc == GT_ENOTFOUND)
        return gt_error_set(err, GT_ENOTFOUND, "model '%s' does not exist", name);
    return rc;
}

int models_file_by_id(store *s, int64_t id, void **blob, size_t *len, gt_error *err)
{
    int rc = read_file(s, "SELECT id, file_sha256, file FROM models WHERE id = ?",
                       STORE_ARGS(STORE_INT(id)), NULL, blob, len, NULL, err);
    if (rc == GT_ENOTFOUND)
        return gt_error_set(err, GT_ENOTFOUND, "model %lld does not exist", (long long)id);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Import
 * ------------------------------------------------------------------------- */

int models_import(store *s, const char *name, const void *buf, size_t len, json_t **row,
                  int *created, model_pack_fault *fault, char part[64], int *name_taken,
                  gt_error *err)
{
    *created = 0;
    *name_taken = 0;
    if (row)
        *row = NULL;
    if (name && name[0] && !models_name_ok(name))
        return gt_error_set(err, GT_EINVAL,
                            "a model's name is 1 to 64 of A-Z a-z 0-9 . _ - and not all digits");
    model_pack p;
    int rc = model_pack_read(buf, len, &p, fault, part, err);
    if (rc)
        return rc;
    json_t *found = NULL;
    /* idempotent by content: the same model again is the model there */
    rc = get_where(s, "content_sha256 = ?", STORE_ARGS(STORE_TEXT(p.content_sha256)), &found,
                   err);
    if (rc == GT_OK)
        goto done;
    if (rc != GT_ENOTFOUND)
        goto done;
    char def[MODELS_NAME_MAX + 1];
    if (!name || !name[0]) {
        snprintf(def, sizeof def, "run-%lld-%.8s", (long long)p.run_id, p.content_sha256);
        name = def;
    }
    char file_sha[65];
    gt_sha256_hex(buf, len, file_sha);
    char *manifest = numfmt_dumps(p.manifest, JSON_COMPACT | JSON_SORT_KEYS);
    int64_t id = 0;
    rc = store_int64(s, "importing a model",
                     "INSERT INTO models (name, content_sha256, file_sha256, manifest, geometry,"
                     " source_run_id, size_bytes, file) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                     " RETURNING id",
                     STORE_ARGS(STORE_TEXT(name), STORE_TEXT(p.content_sha256),
                                STORE_TEXT(file_sha), STORE_TEXT(manifest),
                                STORE_TEXT(p.geometry), STORE_INT(p.run_id),
                                STORE_INT((int64_t)len), STORE_BLOB(buf, len)),
                     &id, err);
    free(manifest);
    if (rc == GT_EINVAL) {
        /* a UNIQUE column: the same content imported at the same moment
         * (then that model is the answer), or the name is another model's */
        if (get_where(s, "content_sha256 = ?", STORE_ARGS(STORE_TEXT(p.content_sha256)),
                      &found, NULL) == GT_OK) {
            rc = GT_OK;
            goto done;
        }
        *name_taken = 1;
        rc = gt_error_set(err, GT_EINVAL, "the name '%s' is another model's", name);
        goto done;
    }
    if (rc)
        goto done;
    *created = 1;
    rc = get_where(s, "id = ?", STORE_ARGS(STORE_INT(id)), &found, err);
done:
    model_pack_free(&p);
    if (rc == GT_OK && row)
        *row = found;
    else
        json_decref(found);
    return rc;
}
