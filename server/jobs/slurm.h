/* slurm: runs whose executor is "slurm" train as Slurm batch jobs.
 *
 * One service thread, on its own database connection, never an HTTP
 * thread, every poll interval (or when kicked):
 * - submits each queued slurm run without an active job: a job script
 *   (written here, mode 0600, holding the job's ingest token) that runs
 *   `giant train --report URL --run ID` on the node, given to sbatch with
 *   the run's partition, time limit and gres (the config's executor
 *   section, else the service's defaults), --requeue and the operator's
 *   extra options;
 * - follows the active jobs with one squeue call: the run goes queued
 *   (PENDING) -> running (RUNNING) -> succeeded (the trainer reported the
 *   end and the job COMPLETED) | failed (Slurm's state and reason, and
 *   what the trainer reported) | cancelled; a job Slurm puts back to
 *   PENDING (requeued) sends its run back to queued, and its trainer
 *   resumes from the last checkpoint it uploaded;
 * - sends scancel for the job of a run cancelled through the API.
 * Every Slurm command runs through subproc_run (argv, no shell) with a time
 * limit; a failed one is logged and tried again at the next poll, never
 * fatal to the service.  Runs, metrics and checkpoints arrive through the
 * ingest routes (routes_ingest.c), not here.
 * Depends on runs, slurm_jobs, subproc, store, log, worker_thread, OpenSSL. */
#ifndef SLURM_H
#define SLURM_H

#include <stdint.h>

#include "gt_error.h"

typedef struct slurm_config {
    char bin_dir[1024];        /* where sbatch, squeue, scancel are ("" = PATH) */
    char partition[65];        /* default partition ("" = the cluster's)     */
    long time_limit_min;       /* default time limit (0 = the partition's)   */
    char gres[129];            /* default gres ("" = none)                   */
    char options[1024];        /* the operator's extra sbatch options,
                                  whitespace-separated, each "--name[=value]" */
    char report_url[512];      /* the URL the nodes reach this service at    */
    char giant[1024];          /* the giant binary on the nodes              */
    char job_dir[1024];        /* job scripts and output (the nodes write
                                  the output: a shared directory)            */
    char node_data_dir[1024];  /* the data directory as the nodes see it     */
    long poll_ms;              /* between two squeue calls                   */
} slurm_config;

typedef struct slurm slurm;

/* 1 when sbatch, squeue and scancel are there (bin_dir, else PATH); else 0
 * and why says which is missing. */
int slurm_available(const slurm_config *cfg, char *why, size_t cap);

/* Checks the options (each "--name" or "--name=value" of [A-Za-z0-9_-]
 * names); GT_EINVAL naming the first bad one. */
int slurm_options_check(const char *options, gt_error *err);

/* Opens its own connection to db_path and starts the thread. */
int slurm_start(slurm **out, const char *db_path, const slurm_config *cfg, gt_error *err);

/* Wakes the thread (a slurm run was queued or a cancel asked for). */
void slurm_kick(slurm *s);

/* Stops and joins the thread (NULL is fine).  Jobs keep running on the
 * cluster; the next start follows them again. */
void slurm_stop(slurm *s);

/* The ingest token of a job: "gtj_" + 64 hex digits, and its hash. */
#define SLURM_TOKEN_LEN 68
void slurm_token_new(char token[SLURM_TOKEN_LEN + 1], char hash[65]);

#endif
