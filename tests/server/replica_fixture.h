/* replica_fixture: what the replica tests share: a tiny run trained on a
 * trainer (a started svc) and its model file written into a directory, a
 * replica started on it, and the bytes of one sample request. */
#ifndef REPLICA_FIXTURE_H
#define REPLICA_FIXTURE_H

#include <stddef.h>

#include "giant_client.h"
#include "svc_harness.h"

/* Where a replica test keeps its trainer and model under its folder: the
 * trainer's database and data directory, the models directory and the
 * model file in it. */
typedef struct replica_paths {
    char db[320], data[320], models[320], file[400];
} replica_paths;

/* Fills p under dir and makes p->models (0755): 0, or mkdir's -1. */
int replica_fixture_paths(replica_paths *p, const char *dir);

/* The sample requests a model's server must answer as the model's run
 * does (energies; a count drawn from a spectrum, with other steps and a
 * row0; an HDF5 reply; a JSON reply), each with the Accept it is sent
 * with. */
typedef struct replica_request {
    const char *body, *accept;
} replica_request;
#define REPLICA_FIXTURE_REQUESTS 4
extern const replica_request replica_fixture_requests[REPLICA_FIXTURE_REQUESTS];

/* Trains a tiny run on the trainer c speaks to and writes its model file
 * (GET /v1/runs/{id}/model) to path.  The run's id, or 0 on failure. */
long long replica_fixture_train(gc_client *c, const char *path);

/* Starts `giant serve --role sampler --models dir` on listen (e.g.
 * "127.0.0.1:0") with --db db and --data-dir data_dir, which a replica
 * must leave alone (the tests check they stay absent); 0 when it listens. */
int replica_fixture_start(svc *s, const char *dir, const char *listen, const char *db,
                          const char *data_dir);

/* POSTs body to path with Accept: accept; the status (0: no reply) and
 * the reply's bytes in *out (malloc'ed) and *len. */
long replica_fixture_post(gc_client *c, const char *path, const char *body, const char *accept,
                          void **out, size_t *len);

/* Polls GET /readyz until 200 or ms pass; the last reply (new reference). */
json_t *replica_fixture_ready(gc_client *c, long ms);

#endif
