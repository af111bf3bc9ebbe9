/* models: the owner of the models table (migrations/0010_models.sql):
 * every SQL statement on it is here.  A model is an exported file
 * (model_pack) imported under a name; the table keeps the file itself, its
 * manifest and its content hash, which import is idempotent by.
 *
 * Also what export and import share between `giant export` / `giant
 * import` and the routes: a run made into a file (models_export) and a
 * file checked and registered (models_import).
 * Depends on store, runs (a run's config and best checkpoints), model_pack,
 * build_info, OpenSSL (SHA-256 of the file) and Jansson. */
#ifndef MODELS_H
#define MODELS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "gt_error.h"
#include "model_pack.h"
#include "store.h"

#define MODELS_NAME_MAX 64

/* 1 when name is 1..64 of [A-Za-z0-9._-], not all digits (so a name never
 * reads as an id), else 0. */
int models_name_ok(const char *name);

/* The file of run `id`: its best checkpoint of each stage, config, geometry
 * and transforms (model_pack_write); *out malloc'ed.  GT_ENOTFOUND when the
 * run does not exist or has no best checkpoint of a stage yet. */
int models_export(store *s, int64_t id, void **out, size_t *len, gt_error *err);

/* Checks buf (model_pack_read) and registers it as `name` (NULL or "":
 * "run-<source run id>-<first 8 hex digits of the content hash>").
 * *created is 1 for a new model, 0 when a model of the same content hash
 * was there (that one is returned, whatever its name).  *row (may be
 * NULL) gets the model as models_get gives it.  Failures: a refused file
 * is GT_EFORMAT or GT_EUNSUPPORTED with *fault and part set; a bad name
 * is GT_EINVAL, and a name another model holds GT_EINVAL with
 * *name_taken = 1. */
int models_import(store *s, const char *name, const void *buf, size_t len, json_t **row,
                  int *created, model_pack_fault *fault, char part[64], int *name_taken,
                  gt_error *err);

/* A model by name as the API shows it (the manifest as an object, never
 * the file).  GT_ENOTFOUND when there is none. */
int models_get(store *s, const char *name, json_t **row, gt_error *err);

/* What a sample request needs of a model, in one statement: its id, name,
 * the run it was exported from, and its showers' shape as its manifest
 * gives it (geometry.voxels and .layers, checked at import), so no
 * geometry is loaded for it.  By name: GT_ENOTFOUND when there is none.
 * By the run it was exported from (its source_run_id), for a sampling
 * replica that serves POST /v1/runs/{id}/samples from its models:
 * GT_ENOTFOUND when none is; GT_EINVAL when several are (runs of two
 * trainers may share an id: the caller must not guess). */
typedef struct models_source {
    int64_t id, source_run;
    char name[MODELS_NAME_MAX + 1];
    int voxels, layers;
} models_source;
int models_source_by_name(store *s, const char *name, models_source *out, gt_error *err);
int models_source_by_run(store *s, int64_t run, models_source *out, gt_error *err);

/* Every model, newest first (at most 1000). */
int models_list(store *s, json_t **rows, gt_error *err);

/* The imported file's bytes (malloc'ed), checked against its stored
 * sha256 (GT_ECHECKSUM), and its id (may be NULL). */
int models_file(store *s, const char *name, int64_t *id, void **blob, size_t *len,
                char sha256[65], gt_error *err);

/* The same by id, for the sampling worker. */
int models_file_by_id(store *s, int64_t id, void **blob, size_t *len, gt_error *err);

#endif
