/* dataset_body: the body of POST /v1/datasets, checked apart from the HTTP
 * layer (the route replies with the fault), so that a fuzzer reaches every
 * path of it (fuzz_dataset_body).  Nothing here touches the disk: the
 * route confines a file's path to the data directory, reads its metadata,
 * sizes a synthetic dataset against the free space and inserts the row.
 *
 * A body is {"name", "path", "geometry"} (a file to register) or
 * {"name", "synthetic": {"geometry", "particle", "n", "seed", "energy",
 * "simulator"}} (a dataset the datasets worker simulates; energy is the
 * spec of run configs and sample requests, model_energy; simulator one
 * synth_parse_simulator takes, gflash when left out).  Depends on body_check,
 * Jansson and the engine's model_data (the built-in geometries),
 * model_energy and synth. */
#ifndef GIANT_DATASET_BODY_H
#define GIANT_DATASET_BODY_H

#include <jansson.h>

#include "body_check.h"
#include "model_energy.h"

/* status 422; field the body's key at fault ("" = the body), dotted inside
 * synthetic ("synthetic.n"); message. */
typedef body_fault dataset_body_fault;

/* An accepted body.  The strings point into the body it came from and live
 * as long as it does. */
typedef struct dataset_body {
    const char *name;          /* 1 to 100 of [A-Za-z0-9._-], no leading '.':
                                  the dataset's file is <name>.h5           */
    const char *path;          /* the file to register (non-empty, not yet
                                  confined), or NULL for a synthetic one    */
    const char *geometry;      /* a built-in geometry (default dataset_2)   */
    /* a synthetic dataset's; unset when path is not NULL */
    long long n;               /* 1 to max_synthetic_showers                */
    long long seed;            /* >= 0, default 1                           */
    const char *particle;      /* one synth_parse_particle takes, or NULL
                                  for the geometry's own                    */
    model_energy energy;       /* the checked spec (default log-uniform
                                  1 GeV to 1 TeV)                           */
    const char *simulator;     /* one synth_parse_simulator takes, or NULL
                                  for gflash                                */
} dataset_body;

/* 1 with out filled, or 0 with fault filled (422: the checks run in the
 * order the API has always answered them, so the first fault is the one
 * named).  body may be any JSON value, or NULL. */
int dataset_body_parse(const json_t *body, long max_synthetic_showers, dataset_body *out,
                       dataset_body_fault *fault);

/* A synthetic dataset's spec as the datasets worker reads it back:
 * {"n", "seed", "energy", "particle" and "simulator" when given}; a new
 * reference, NULL when out of memory.  A spec without "simulator" (every
 * one stored before there were two) is gflash's. */
json_t *dataset_body_spec(const dataset_body *b);

#endif
