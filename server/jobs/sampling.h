/* sampling: showers on demand from a run's best checkpoints.
 *
 * One worker thread owns the samplers.  A job (run, energies, seed, steps)
 * is queued by an HTTP handler, which then suspends its connection; the
 * worker takes the oldest job, waits up to batch_delay_ms for more jobs of
 * the same run and steps, serves them all in one model_sampler_run call,
 * and calls each job's done callback (which resumes its connection).  A
 * job comes back with its showers and the layer layout of the sampler's
 * geometry, so nobody else reloads the geometry to describe them.
 * Showers depend only on (seed, row) however jobs are batched.
 *
 * Loaded samplers are cached per run or imported model (least recently used
 * out first), so a run's checkpoints or a model's file are read and checked
 * once; the shape of their showers is kept longer (sampling_shape), for
 * admitting the requests before they are queued.  A model is served by the same code on the same bytes as the run it
 * was exported from, so it gives the same showers.  Depends on runs,
 * models, model_pack, store, log and the engine's model_sampler. */
#ifndef SAMPLING_H
#define SAMPLING_H

#include <stdint.h>

#include <time.h>

#include "gt_error.h"
#include "metrics.h"
#include "store.h"

typedef struct sampling sampling;

#define SAMPLING_MAX_LAYERS 256    /* the engine's GEO_MAX_LAYERS */

typedef struct sampling_job sampling_job;
struct sampling_job {
    /* in */
    int64_t run;
    int64_t model;         /* > 0: an imported model (models table) instead
                              of a run's checkpoints; run is then 0 */
    int64_t version;       /* changes when the run's best checkpoints do:
                              a cached sampler of another version is reloaded */
    int64_t n;
    float *e_inc;          /* [n], owned by the job's creator              */
    uint64_t seed;
    int64_t row0;          /* index of e_inc[0] in the caller's whole sample
                              (0 for a request on its own): a sample made in
                              chunks equals the same sample asked at once */
    int steps;             /* <= 0: the run's sample.steps                  */
    void (*done)(sampling_job *job);  /* called on the worker thread        */
    /* NULL: admitted by its submitter.  Else the job's admission, for a
     * submitter that did not know its showers' shape (sampling_shape):
     * called on the worker thread with the shape once the sampler is
     * loaded, before anything is allocated for the job.  GT_OK takes it;
     * any other code refuses it: done is then called with that rc and the
     * message admit wrote, the job never sampled nor counted. */
    int (*admit)(sampling_job *job, int voxels, int layers);
    struct timespec submitted; /* set by sampling_submit (the latency metrics) */
    void *user;
    /* out */
    float *showers;        /* [n, voxels], malloc'ed by the worker          */
    int voxels;
    int layers;            /* of the run's geometry, with or without voxels */
    int layer_voxels[SAMPLING_MAX_LAYERS];  /* voxels of each; they sum to
                              voxels (the binary reply's header needs them) */
    int rc;                /* GT_OK or the failure                          */
    char message[512];
    sampling_job *next;    /* queue link (worker's)                         */
};

/* The shape of the showers a run (model 0) or an imported model (run 0)
 * gives at `version`: its geometry's voxels and layers with voxels, known
 * once the worker has loaded that sampler and kept for the last
 * SAMPLING_MAX_SHAPES loaded (after the sampler has left the cache).
 * Keyed as the cache of samplers is, by (run, model, version): a better
 * checkpoint since asks the worker again.  1 and the shape when known,
 * else 0.  Any thread: a sample request is admitted with it, so the HTTP
 * pool never loads a geometry. */
#define SAMPLING_MAX_SHAPES 256
int sampling_shape(sampling *s, int64_t run, int64_t model, int64_t version, int *voxels,
                   int *layers);

typedef struct sampling_stats {
    unsigned long long requests, batches, showers, loads;
} sampling_stats;

/* db: a connection the worker reads checkpoints with.  device overrides
 * each run's train.device when not NULL or "". */
int sampling_start(sampling **out, store *db, const char *device, int cache_size,
                   int batch_delay_ms, gt_error *err);

/* Queues a job; job->done is called exactly once (also on stop). */
int sampling_submit(sampling *s, sampling_job *job, gt_error *err);

void sampling_get_stats(sampling *s, sampling_stats *out);

/* Jobs submitted and not yet done (sample requests and evaluation chunks). */
int sampling_in_flight(sampling *s);
/* Histograms of the jobs: seconds from submit to done (queue wait and the
 * device batch), seconds from submit to the start of the batch that serves
 * the job (queue wait, one per job taken by the worker), seconds per device
 * batch (a sampler load included; one per batch, however many jobs it
 * merged), and showers per job.  NULL for a NULL s. */
const metrics_hist *sampling_seconds(sampling *s);
const metrics_hist *sampling_queue_wait_seconds(sampling *s);
const metrics_hist *sampling_batch_seconds(sampling *s);
const metrics_hist *sampling_showers(sampling *s);
/* Sample jobs (column 0) and showers generated (column 1) per run ("12") or
 * imported model ("model:3"), the first METRICS_MAX_KEYS of them, the rest
 * as "other" (metrics.h).  NULL for a NULL s. */
metrics_keyed *sampling_by_source(sampling *s);

/* Fails the queued jobs (GT_ECANCELLED), finishes the running batch, joins
 * the worker and frees every sampler (NULL is fine). */
void sampling_stop(sampling *s);

#endif
