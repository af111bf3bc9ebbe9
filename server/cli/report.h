/* report: `giant train --report URL --run ID`, the trainer of a run whose
 * executor is "slurm", on a cluster node.
 *
 * It has no database of its own: it asks the service for the run's config
 * and the newest checkpoint of each stage (POST .../ingest/start, GET
 * .../ingest/checkpoints/{stage}, both checked against their sha256),
 * trains with the engine's model_run_train, and sends what it records
 * back through the ingest routes (routes_ingest.c): metrics and
 * validations in batches of at most 1000 metrics, at least every two
 * seconds; each checkpoint as soon as it exists, with its sha256; at the
 * end how training ended.  A request that fails on the way (no reply, a
 * 5xx, a 429) is sent again, the same bytes, with a growing pause for up
 * to two minutes: the server records nothing twice.  The job's token comes
 * from GIANT_REPORT_TOKEN (or --token), never from a file it writes.
 *
 * SIGTERM (scancel, a requeue, the time limit) stops training at the next
 * step; what was trained since the last checkpoint is trained again by the
 * next start.  A 409 or a reply with cancel_requested stops it too.
 * Depends on api/client, runs (SHA-256), log, cmd_train_dist (the
 * launcher); engine's model_run, dist. */
#ifndef REPORT_H
#define REPORT_H

#include <stdint.h>

#include "dist.h"
#include "model_run.h"

typedef struct report_args {
    const char *url;           /* the service, http://HOST:PORT              */
    const char *token;         /* the job's ingest token                     */
    int64_t run;
    const char *data_dir;      /* where the config's relative dataset paths are */
    const char *device;        /* overrides train.device (NULL, "": no)      */
    model_bf16_policy bf16;
    int quiet;
    /* Rank 0 of a group report_launch started: the start reply it got, in
     * a file (NULL: ask the service), and the group (NULL: one process). */
    const char *start_file;
    const dist_spec *spec;
} report_args;

/* Trains the run; the exit status of `giant train`: 0 succeeded (and
 * reported), 1 failed (reported when the service could be told), 143
 * stopped by a signal or by the service. */
int report_train(const report_args *a);

/* Data parallel on this node (`--report ... --gpus N` or `--ranks N`): asks
 * the service to start the run once, writes its reply and the config into
 * a private folder, and starts n ranks (cmd_train_spawn_ranks): rank 0
 * trains with report_train from that reply, taking the checkpoints and
 * reporting as one process does; the others train the config with the
 * group and report nothing (rank 0's state is broadcast to them).  When
 * rank 0 could not say why the group failed (it was killed, or another
 * rank failed first), the launcher reports it.  The exit status is as
 * report_train's. */
int report_launch(const report_args *a, int n, int gpus, int verbose);

/* Flushes a batch of metrics when adding n more would pass the limit of
 * one request (the ingest contract's 1000). */
#define REPORT_MAX_METRICS 1000

#endif
