/* replica: what makes `giant serve --role sampler` a stateless sampling
 * replica: the *.giant files of one directory, checked and registered as
 * `giant import` does, each under its file name without ".giant".
 *
 * A replica keeps no database file.  Its models live in an in-memory
 * SQLite database (migrated like any other) that this module fills at
 * start: models.c, the sampling worker and the model routes then serve
 * them with the very code a trainer uses, so there is no second code path
 * to keep byte-identical; the cost is one copy of each file in memory.
 * Nothing else is ever written to it, and it is gone with the process.
 *
 * The list of files is fixed by replica_new; replica_load runs on the main
 * thread while HTTP already answers (so /healthz is alive and /readyz says
 * how far it is), and the HTTP threads read the progress without a lock.
 * Depends on models, model_pack, store, log, Jansson and the C client
 * library (api/client: --model-url). */
#ifndef REPLICA_H
#define REPLICA_H

#include <stddef.h>

#include <jansson.h>

#include "gt_error.h"
#include "store.h"

typedef struct replica replica;

/* Lists dir's *.giant files (sorted by name; dir "" or NULL: none) and
 * adds url (a model file on a trainer, fetched by replica_load with token;
 * "" or NULL: none).  GT_EINVAL when a file's name is not a model name
 * (models_name_ok) or when there is no model at all, GT_EIO when dir cannot
 * be read: a replica without models must not start. */
int replica_new(replica **out, const char *dir, const char *url, const char *token,
                gt_error *err);

/* Reads (or fetches), checks and registers every file in db, in order.  Files over
 * max_bytes are refused as POST /v1/models refuses them.  On a refused file
 * it stops: err names the file and, for a bad file, the code `giant import`
 * prints (model_corrupt, ...), and the replica reports "failed". */
int replica_load(replica *r, store *db, size_t max_bytes, gt_error *err);

/* 1 once every model is loaded. */
int replica_ready(const replica *r);

/* What /readyz shows: {"state": "loading" | "loaded" | "failed",
 * "files": N, "loaded": [the names registered so far]}. */
json_t *replica_models_json(const replica *r);

/* Registers in db (auth_token_register) every token of the file at path
 * (--token-file): one a line, "TOKEN" or "TOKEN ROLE" (sampler, the
 * default, or reader); blank lines and lines starting with '#' are
 * skipped.  The file must be readable by its owner only (mode & 077 == 0);
 * owned by root, as a Kubernetes Secret mounted with fsGroup is, it may be
 * readable by its group too (mode & 037 == 0).  A malformed line stops it
 * with the line's number and never its text; a file without a token too.
 * *n gets how many were registered. */
int replica_token_file(store *db, const char *path, long long *n, gt_error *err);

void replica_free(replica *r);

#endif
