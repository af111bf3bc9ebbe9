/* app: the state the route handlers share, owned by cmd_serve.
 *
 * Filled before the HTTP server starts and read-only afterwards, except
 * through modules with their own locking (the store's connection is in
 * SQLite's serialized mode). */
#ifndef APP_H
#define APP_H

#include <stdatomic.h>

#include "gt_devices.h"
#include "settings.h"
#include "store.h"

struct sched;
struct sampling;
struct datasets_worker;
struct evaluations_worker;
struct http_server;
struct replica;
struct slurm;
struct ingest;

#define APP_MAX_DEVICES 17     /* the CPU and up to 16 GPUs */

typedef struct app {
    settings cfg;
    store *db;
    int schema_latest;         /* newest migration this binary carries       */
    gt_device_info devices[APP_MAX_DEVICES];
    int ndevices;
    int engine_ok;             /* devices were listed without error          */
    char cpu_kernel[2][16];    /* the CPU's fixed-order sampling kernels,
                                  fp32 and bf16 (model_backend_cpu_kernel)   */
    char engine_error[512];    /* why not, for /readyz                        */
    struct sched *sched;       /* training worker (own locking)               */
    struct sampling *sampling; /* sampling worker (own locking)               */
    struct datasets_worker *datasets; /* background dataset jobs (own locking) */
    struct evaluations_worker *evaluations; /* evaluation jobs (own locking) */
    struct http_server *srv;   /* for /metrics counters                        */
    struct replica *replica;   /* --role sampler: its models (replica.h);
                                  NULL on a trainer                           */
    struct slurm *slurm;       /* Slurm runs' thread (own locking); NULL when
                                  sbatch, squeue or scancel are missing       */
    char slurm_why[256];       /* why there is none, for a slurm run's 422    */
    struct ingest *ingest;     /* what Slurm jobs report (own connection and
                                  lock)                                        */
    atomic_int stopping;       /* set at shutdown: event streams end          */
    atomic_llong sample_bytes; /* held by the sample requests in flight
                                  (routes_samples; --sample-memory-mb)       */
} app;

#endif
