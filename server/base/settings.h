/* settings: the service's configuration.
 *
 * Every setting has a flag (--name), an environment variable (GIANT_NAME)
 * and a key in the optional JSON config file (name with '_' for '-').
 * Precedence, highest first: flags > GIANT_* environment > config file >
 * built-in defaults.  The table in settings.c is the single list: --help,
 * the config-file reader and the environment reader all walk it. */
#ifndef SETTINGS_H
#define SETTINGS_H

#include <stddef.h>

#include "gt_error.h"

typedef struct settings {
    char listen[256];          /* HOST:PORT, port 0 = pick a free port       */
    char db[1024];             /* SQLite database file                        */
    char data_dir[1024];       /* datasets, exports                           */
    char config[1024];         /* JSON config file ("" = none)                */
    char log_level[16];        /* debug | info | warn | error                 */
    long threads;              /* HTTP worker threads (pool size)             */
    long max_body_bytes;       /* request body cap; larger gets 413           */
    long max_model_bytes;      /* the cap of a model file (POST /v1/models)    */
    long max_connections;      /* open connections across all clients         */
    long per_ip_connections;   /* open connections from one address           */
    long connection_memory;    /* per-connection buffer limit (bytes)         */
    long timeout;              /* idle connection timeout (seconds)           */
    long header_timeout;       /* until a request's headers are complete (s) */
    long max_header_bytes;     /* request headers; more gets 431              */
    long max_streams_per_ip;   /* event streams one address may hold open     */
    char admin_listen[256];    /* HOST:PORT of the health and metrics listener
                                  ("" = none)                                 */
    long shutdown_grace;       /* seconds to let in-flight requests finish    */
    char device[32];           /* training device: cpu | cuda:N | auto        */
    long max_showers;          /* showers per sample request; more gets 413   */
    long max_json_showers;     /* largest sample answered as JSON             */
    long max_active_runs;      /* queued + running runs; more gets 429        */
    long max_train_steps;      /* per stage, in a submitted config            */
    long max_sample_steps;     /* a sample request's steps, a run's
                                  sample.steps                                */
    long max_active_evaluations;/* queued + running evaluations; more: 429    */
    long max_synthetic_showers;/* a synthetic dataset's n (runs and datasets) */
    long max_dataset_mb;       /* a run's dataset in memory (MiB)             */
    long sample_memory_mb;     /* showers and replies of the sample requests
                                  in flight, all together (MiB); past it 503  */
    long min_energy_mev;       /* accepted incident energy range (MeV)        */
    long max_energy_mev;
    long batch_delay_ms;       /* how long sampling waits to batch requests   */
    long sampler_cache;        /* runs whose samplers stay loaded             */
    long default_dataset;      /* showers of the first-start dataset (0 = none) */
    long allow_bf16_emulation; /* 1: bf16 runs may train on a CPU without
                                  AVX512-BF16 (emulated, ~3x slower)         */
    long require_tokens;       /* 1: loopback requests need a token too       */
    long public_metrics;       /* 1: /metrics needs no token                  */
    long rate_limit;           /* requests per minute per token (0 = none)    */
    long rate_burst;           /* requests a token may send at once           */
    long max_queued_runs_per_token; /* runs one token may have queued (0 = no
                                  limit); past it 429                        */
    char role[16];             /* trainer | sampler (a stateless replica)     */
    char models[1024];         /* sampler: the directory of *.giant files     */
    char model_url[1024];      /* sampler: a model file fetched at start      */
    char model_token[512];     /* the bearer token model_url is fetched with  */
    char token_file[1024];     /* sampler: the bearer tokens it accepts       */
    /* Runs with executor "slurm" (slurm.h) */
    char slurm_bin[1024];      /* where sbatch, squeue, scancel are ("" = PATH) */
    char slurm_partition[65];  /* partition of runs that name none            */
    long slurm_time_limit;     /* minutes, of runs that name none (0 = the
                                  partition's)                               */
    char slurm_gres[129];      /* gres of runs that name none                 */
    char slurm_options[1024];  /* extra sbatch options (--account=..., ...)   */
    char slurm_report_url[512];/* the URL nodes reach the service at          */
    char slurm_giant[1024];    /* the giant binary on the nodes               */
    char slurm_job_dir[1024];  /* job scripts and output (shared with nodes)  */
    char slurm_data_dir[1024]; /* the data directory as the nodes see it      */
    long slurm_poll_ms;        /* between two squeue calls                    */
} settings;

/* Loads defaults, then the config file (--config or GIANT_CONFIG), then
 * GIANT_* variables, then the flags in argv[0..argc).  argv holds only the
 * flags of the subcommand (no program or command name).  Returns GT_OK,
 * GT_EINVAL with a message naming the flag/variable/key, or GT_EIO when the
 * config file cannot be read.  *help is set when --help/-h was given (the
 * rest is still parsed so the help can show effective values). */
int settings_load(settings *s, int argc, char **argv, int *help, gt_error *err);

/* The built-in default of a setting, as text ("giant.db" for "db"); NULL
 * for a name the table does not have.  Commands that share a setting with
 * the service take its default from here, so the table says it once. */
const char *settings_default(const char *name);

/* For the commands that parse their own flags but share a setting with the
 * service (giant train --db, giant sample --db, ...): the GIANT_* variable
 * when it is set, else the built-in default.  NULL for an unknown name. */
const char *settings_env_or_default(const char *name);

/* Prints usage for `giant serve`: every setting with its default and env. */
void settings_print_help(const char *usage, void *stream);

/* Splits s->listen into host and port; host "" never happens (validated). */
int settings_split_listen(const char *listen, char *host, size_t host_cap,
                          int *port, gt_error *err);

#endif
