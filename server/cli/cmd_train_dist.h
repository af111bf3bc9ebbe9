/* cmd_train_dist: the data-parallel parts of `giant train` (cmd_train.c
 * and report.c call them): the launcher of `--ranks N` / `--gpus N` and the
 * ranks other than 0. */
#ifndef CMD_TRAIN_DIST_H
#define CMD_TRAIN_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "dist.h"
#include "model_config.h"
#include "model_run.h"

/* What the launcher starts: n ranks of run `run` (already recorded). */
typedef struct cmd_train_spawn {
    int64_t run;
    int n;
    int gpus;              /* 1: rank r on cuda:r over NCCL; 0: CPU ranks over shm */
    const char *db_path, *data_dir;
    const char *device;    /* CPU ranks: the --device given, or NULL */
    int allow_emulation, quiet, verbose;
    /* A reporting run (report.h) instead of one in db_path: rank 0 runs
     * `giant train --report URL --run RUN --start-file START_FILE`, the
     * others `giant train CONFIG_FILE`; the launcher writes no database. */
    const char *report_url, *start_file, *config_file;
    /* Out: why the group failed when rank 0 could not say it (it was
     * killed, or another rank failed first); "" otherwise.  A local run
     * has it recorded in db_path already. */
    char failure[200];
} cmd_train_spawn;

/* Starts the ranks, waits for all, returns the exit status for the user:
 * rank 0's (0, 130 when interrupted), else 1. */
int cmd_train_spawn_ranks(cmd_train_spawn *t);

/* A rank other than 0: trains with the group and records nothing. */
typedef struct cmd_train_worker_args {
    const char *config_path;  /* or NULL with resume */
    long long resume;         /* run id: its config from the database (read only) */
    const char *db_path, *data_dir;
    const char *device;       /* overrides train.device when not NULL */
    model_bf16_policy bf16;
    const dist_spec *spec;
} cmd_train_worker_args;

int cmd_train_worker(const cmd_train_worker_args *a);

/* CUDA devices present (0 in a build without CUDA). */
int cmd_train_gpu_count(void);

/* The device of a launched rank that was given none: "" (keep the config's)
 * for one rank or a CPU config; else cuda:LOCAL_RANK, or cuda:0 when
 * CUDA_VISIBLE_DEVICES names one device (srun --gpus-per-task=1). */
void cmd_train_rank_device(const model_config *cfg, const dist_env *e, char *out, size_t cap);

#endif
