/* giant train: train a run config offline into a local database.
 *
 * The run is recorded exactly as the service records one (runs, metrics,
 * val_losses, checkpoints), so `giant sample`, `giant serve` and the HTTP
 * API see it.  Ctrl-C stops within one step and leaves the run cancelled
 * with its checkpoints; `giant train --resume ID` continues it. */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd_train_dist.h"
#include "commands.h"
#include "gt_clock.h"
#include "log.h"
#include "model_config.h"
#include "progress.h"
#include "report.h"
#include "runs.h"
#include "scheduler.h"
#include "settings.h"
#include "store.h"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

typedef struct train_view {
    const model_config *cfg;
    int tty, quiet;
    int line_open;             /* the bar is drawn and its line not ended   */
    long long reports;
    progress_clock clock;
} train_view;

/* Ends the bar's line before anything else is written to stderr: on a
 * terminal the line is cleared (the next step draws it again). */
static void view_break(train_view *c)
{
    if (c->line_open)
        fputs("\r\033[K", stderr);
    fflush(stderr);
    c->line_open = 0;
}

static void view_before_log(void *user)
{
    view_break(user);
}

static void view_step(void *user, const model_step_report *r, long long done, long long total)
{
    train_view *c = user;
    (void)done;
    (void)total;
    if (c->quiet)
        return;
    progress_clock_tick(&c->clock, r->stage, r->step, gt_clock_s());
    progress_stage st[2] = {{c->cfg->steps1, r->stage == 1 ? r->step : c->cfg->steps1, 0},
                            {c->cfg->steps2, r->stage == 2 ? r->step : 0, 0}};
    for (int i = 0; i < 2; i++)
        st[i].step_s = c->clock.step_s[i];
    /* before a stage's second report, its step time from the throughput */
    if (st[r->stage - 1].step_s <= 0 && r->samples_per_s > 0)
        st[r->stage - 1].step_s = c->cfg->batch / r->samples_per_s;
    double eta, fraction = progress_estimate(st, &eta);
    char detail[160], line[256];
    snprintf(detail, sizeof detail, "stage %d step %lld/%lld  loss %.5f  %.0f samples/s",
             r->stage, r->step, r->total, (double)r->loss, r->samples_per_s);
    progress_line(line, sizeof line, fraction, eta, detail);
    c->reports++;
    if (c->tty) {
        fprintf(stderr, "\r%s\033[K", line);
        c->line_open = 1;
    } else if (c->reports % 20 == 0 || r->step == r->total) {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

static void view_validation(void *user, int stage, long long step, float val)
{
    train_view *c = user;
    if (c->quiet)
        return;
    view_break(c);
    fprintf(stderr, "stage %d step %lld: validation loss (fp32) %.6f\n", stage, step,
            (double)val);
}

static int view_stop(void *user)
{
    (void)user;
    return stop_requested;
}

static void view_phase(void *user, const char *phase)
{
    train_view *c = user;
    if (c->quiet)
        return;
    view_break(c);
    fprintf(stderr, "%s\n", phase);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: giant train CONFIG.json [options]\n"
            "       giant train --resume RUN_ID [options]\n"
            "       giant train --report URL --run RUN_ID [options]\n\n"
            "Trains both stages of a run config into a local database, printing progress.\n"
            "With no dataset in the config the built-in simulator's dataset-2 showers are used\n"
            "(dataset.simulator: gflash, the default, or cascade).\n\n"
            "options:\n"
            "  --db FILE         database (default %s, env GIANT_DB)\n"
            "  --data-dir DIR    where relative dataset paths live (default %s,\n"
            "                    env GIANT_DATA_DIR)\n"
            "  --resume RUN_ID   continue a run from its last checkpoints\n"
            "  --device SPEC     override train.device: cpu, cuda:N or auto\n"
            "  --allow-bf16-emulation\n"
            "                    let a bf16 config train on a CPU without AVX512-BF16\n"
            "                    (exact emulation, ~3x slower; env GIANT_ALLOW_BF16_EMULATION=1)\n"
            "  --report URL      train run --run of the service at URL (a Slurm job's\n"
            "                    command): config and checkpoints from it, metrics,\n"
            "                    validations and checkpoints back to it; no database\n"
            "  --run RUN_ID      the run --report trains\n"
            "  --token TOKEN     the job's ingest token (default env GIANT_REPORT_TOKEN;\n"
            "                    prefer it: flags show in ps)\n"
            "                    with --gpus N or --ranks N: N processes on this node, rank 0\n"
            "                    reporting (--start-file FILE: the service's start reply the\n"
            "                    launcher hands its rank 0; not for hand use)\n"
            "  --quiet           no progress output\n"
            "  --verbose         log records too when stderr is a terminal (they are always\n"
            "                    written to a file or pipe)\n\n"
            "data parallel (train.batch is the global batch, a multiple of N):\n"
            "  --gpus N          one process per GPU, cuda:0 .. cuda:N-1, gradients all-reduced\n"
            "                    over NCCL; refused when N GPUs are not present\n"
            "  --ranks N         N CPU processes on this machine over shared memory (each with\n"
            "                    its share of the cores)\n"
            "  --dist-id PATH    under Slurm (srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID):\n"
            "                    a file on a folder every node sees, where rank 0 leaves NCCL's\n"
            "                    unique id (env GIANT_DIST_ID); rank 0 records the run\n",
            settings_default("db"), settings_default("data_dir"));
}

/* What `giant train` was asked, after its options. */
typedef struct train_args {
    const char *db_path, *data_dir, *device, *config_path;
    long long resume, report_run;
    const char *report_url, *token, *start_file, *dist_id;
    int quiet, verbose, allow_emulation;
    int ranks, gpus;
} train_args;

/* A positive count or id from optarg into *out; 0 when it is none. */
static int parse_id(const char *text, long long *out)
{
    char *end;
    *out = strtoll(text, &end, 10);
    return !*end && *out > 0;
}

/* The options into t (the service's settings table has the defaults and
 * variable names).  Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, train_args *t)
{
    *t = (train_args){
        .db_path = settings_env_or_default("db"),
        .data_dir = settings_env_or_default("data_dir"),
        .token = getenv("GIANT_REPORT_TOKEN"),
        .allow_emulation = strcmp(settings_env_or_default("allow_bf16_emulation"), "1") == 0,
        .dist_id = getenv("GIANT_DIST_ID"),
    };
    static const struct option opts[] = {
        {"db", required_argument, 0, 'd'},     {"data-dir", required_argument, 0, 'D'},
        {"resume", required_argument, 0, 'r'}, {"device", required_argument, 0, 'x'},
        {"quiet", no_argument, 0, 'q'},        {"help", no_argument, 0, 'h'},
        {"allow-bf16-emulation", no_argument, 0, 'E'},
        {"verbose", no_argument, 0, 'v'},
        {"report", required_argument, 0, 'R'}, {"run", required_argument, 0, 'n'},
        {"token", required_argument, 0, 'T'},
        {"ranks", required_argument, 0, 'K'}, {"gpus", required_argument, 0, 'G'},
        {"dist-id", required_argument, 0, 'I'}, {"start-file", required_argument, 0, 'S'},
        {0, 0, 0, 0}};
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, "hqv", opts, NULL)) != -1) {
        switch (o) {
        case 'd': t->db_path = optarg; break;
        case 'D': t->data_dir = optarg; break;
        case 'x': t->device = optarg; break;
        case 'q': t->quiet = 1; break;
        case 'v': t->verbose = 1; break;
        case 'E': t->allow_emulation = 1; break;
        case 'R': t->report_url = optarg; break;
        case 'T': t->token = optarg; break;
        case 'n':
            if (!parse_id(optarg, &t->report_run)) {
                fprintf(stderr, "giant train: --run needs a run id\n");
                return 2;
            }
            break;
        case 'I': t->dist_id = optarg; break;
        case 'S': t->start_file = optarg; break;
        case 'K':
        case 'G': {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || !optarg[0] || n < 1 || n > DIST_MAX_RANKS) {
                fprintf(stderr, "giant train: --%s needs a count from 1 to %d\n",
                        o == 'K' ? "ranks" : "gpus", DIST_MAX_RANKS);
                return 2;
            }
            *(o == 'K' ? &t->ranks : &t->gpus) = (int)n;
            break;
        }
        case 'r':
            if (!parse_id(optarg, &t->resume)) {
                fprintf(stderr, "giant train: --resume needs a run id\n");
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    t->config_path = optind < argc ? argv[optind] : NULL;
    return -1;
}

/* --report URL --run ID: a Slurm job's trainer, with no database
 * (report.c); alone, or the launcher of --ranks/--gpus, or rank 0 of them. */
static int train_report(train_args *t)
{
    if (!t->report_url || !t->report_run || t->config_path || t->resume) {
        fprintf(stderr, "giant train: --report URL and --run ID go together, without a"
                        " config or --resume\n");
        return 2;
    }
    if (!t->token || !t->token[0]) {
        fprintf(stderr, "giant train: --report needs the job's token (GIANT_REPORT_TOKEN"
                        " or --token)\n");
        return 2;
    }
    gt_error derr = {0};
    dist_env re = {.size = 1, .from = "none"};
    /* only a launcher's ranks (GIANT_RANK...): a batch step has a
     * SLURM_PROCID without the rest, and a job's trainer is one task */
    if (getenv("GIANT_RANK") && dist_env_read(&re, &derr)) {
        fprintf(stderr, "giant train: %s\n", derr.message);
        return 2;
    }
    int gpus = t->gpus, ranks = t->ranks;
    int n = gpus > 1 ? gpus : ranks > 1 ? ranks : 1;
    if (ranks > 1 && !t->device)
        t->device = "cpu";   /* as for a local run: --ranks runs CPU processes */
    if (n > 1 && (re.size > 1 || t->start_file)) {
        fprintf(stderr, "giant train: this process is a rank already: --ranks/--gpus start "
                        "ranks, they are not given to one\n");
        return 2;
    }
    if (re.size > 1 && (re.rank != 0 || !t->start_file)) {
        /* the launcher gives rank 0 the start reply and the others the
         * config: a rank never asks the service itself */
        fprintf(stderr, "giant train: --report in a group is rank 0's, with --start-file\n");
        return 2;
    }
    if (gpus > 1 && (cmd_train_gpu_count() < gpus || !dist_nccl_available())) {
        fprintf(stderr, "giant train: --gpus %d needs %d CUDA devices and NCCL; this node "
                        "has %d devices%s\n", gpus, gpus, cmd_train_gpu_count(),
                dist_nccl_available() ? "" : " and this build no NCCL");
        return 2;
    }
    if (progress_logs_muted(isatty(2), t->verbose))
        log_set_level(LOG_WARN);
    dist_spec rspec = {getenv("GIANT_DIST"), t->dist_id, re.rank, re.size, 300.0};
    report_args ra = {t->report_url, t->token, t->report_run, t->data_dir, t->device,
                      t->allow_emulation ? MODEL_BF16_EMULATE : MODEL_BF16_NATIVE, t->quiet,
                      t->start_file, re.size > 1 ? &rspec : NULL};
    if (n > 1)
        return report_launch(&ra, n, gpus > 1, t->verbose);
    return report_train(&ra);
}

/* What --ranks and --gpus may ask of this process and machine (de: the
 * ranks this process is one of already); --gpus 1 and --ranks N pick the
 * device they imply.  Returns -1 to go on, else 2 after saying why. */
static int check_parallel(train_args *t, const dist_env *de)
{
    int ranks = t->ranks, gpus = t->gpus;
    if (ranks && gpus) {
        fprintf(stderr, "giant train: --ranks (CPU processes) or --gpus (one per GPU), not both\n");
        return 2;
    }
    if ((ranks || gpus) && de->size > 1) {
        fprintf(stderr, "giant train: this process is rank %d of %d already (%s variables): "
                "--ranks/--gpus start ranks, they are not given to one\n",
                de->rank, de->size, de->from);
        return 2;
    }
    if (gpus) {
        int have = cmd_train_gpu_count();
        if (have < gpus) {
            fprintf(stderr, "giant train: --gpus %d needs %d CUDA devices; this machine has %d%s\n",
                    gpus, gpus, have,
#ifdef GIANT_HAVE_CUDA
                    ""
#else
                    " (this build has no CUDA backend)"
#endif
            );
            return 2;
        }
        if (gpus > 1 && !dist_nccl_available()) {
            fprintf(stderr, "giant train: --gpus %d needs NCCL, which this build lacks "
                    "(a CUDA build that finds nccl.h and libnccl: engine/dist/README.md)\n", gpus);
            return 2;
        }
        if (t->device && strncmp(t->device, "cuda", 4) != 0) {
            fprintf(stderr, "giant train: --gpus trains on cuda:0 .. cuda:%d, not --device %s\n",
                    gpus - 1, t->device);
            return 2;
        }
        if (gpus == 1 && !t->device)
            t->device = "cuda:0";
    }
    if (ranks && t->device && strcmp(t->device, "cpu") != 0) {
        fprintf(stderr, "giant train: --ranks runs CPU processes; use --gpus for GPUs\n");
        return 2;
    }
    if (ranks > 1 && !t->device)
        t->device = "cpu";
    return -1;
}

/* A rank other than 0 of a group this process is in: trains with the
 * group and records nothing (cmd_train_dist.c). */
static int train_other_rank(train_args *t, const dist_env *de, const dist_spec *spec)
{
    char rank_dev[32] = "";
    model_config wcfg;
    char wfield[128];
    gt_error err = {0};
    /* the device of this rank: --device, else from the local rank */
    if (!t->device && t->config_path &&
        model_config_load(t->config_path, &wcfg, wfield, sizeof wfield, &err) == GT_OK) {
        cmd_train_rank_device(&wcfg, de, rank_dev, sizeof rank_dev);
        t->device = rank_dev[0] ? rank_dev : NULL;
    }
    cmd_train_worker_args wa = {t->config_path, t->resume, t->db_path, t->data_dir, t->device,
                                t->allow_emulation ? MODEL_BF16_EMULATE : MODEL_BF16_NATIVE,
                                spec};
    return cmd_train_worker(&wa);
}

/* The run this process trains as rank 0 or alone: its config (the stored
 * one for --resume, else the file's) with the device of --device or of
 * this rank (*device: the one to train on, NULL for the config's), checked
 * against the group's size and the device, and for a new run recorded
 * queued.  Returns -1 to go on with *run and *cfg set, else the exit
 * status (1 with err set). */
static int prepare_run(const train_args *t, store *db, const dist_env *de, int nranks,
                       model_config *cfg, char *rank_dev, size_t rank_cap,
                       const char **device, int64_t *run, gt_error *err)
{
    char field[128] = "";
    int status = -1;
    *run = t->resume;
    if (t->resume) {
        char st[16];
        if (runs_read_config(db, *run, cfg, err) || runs_status(db, *run, st, err)) {
            status = 1;
        } else if (strcmp(st, "succeeded") == 0) {
            fprintf(stderr, "giant train: run %lld already succeeded\n", (long long)*run);
            status = 0;
        }
        if (status != -1)
            return status;
    } else if (model_config_load(t->config_path, cfg, field, sizeof field, err)) {
        return 1;
    }
    *device = t->device;
    if (de->size > 1 && !*device) {
        cmd_train_rank_device(cfg, de, rank_dev, rank_cap);
        *device = rank_dev[0] ? rank_dev : NULL;
    }
    if (*device)
        snprintf(cfg->device, sizeof cfg->device, "%s", *device);
    int lo, n;
    if (nranks > 1 && dist_shard(cfg->batch, 0, nranks, &lo, &n, err)) {
        fprintf(stderr, "giant train: %s\n", err->message);
        return 2;
    }
    /* refuse before a run is recorded: a device that cannot train this
     * precision is the user's mistake to fix, not a failed run */
    nn_backend *probe = NULL;
    if (model_open_backend(cfg, t->allow_emulation ? MODEL_BF16_EMULATE : MODEL_BF16_NATIVE,
                           &probe, err))
        return 1;
    nn_backend_close(probe);
    if (!t->resume) {
        json_t *j = model_config_to_json(cfg);
        char *text = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(j);
        if (!text) {
            gt_error_set(err, GT_ENOMEM, "out of memory");
            return 1;
        }
        int rc = runs_create(db, cfg->name, text, cfg->bf16 ? "bf16" : "fp32", NULL,
                             cfg->steps1 + cfg->steps2, run, err);
        free(text);
        if (rc)
            return 1;
    }
    if (!t->quiet)
        fprintf(stderr, "run %lld: %s, %s, stage 1 %lld steps, stage 2 %lld steps\n",
                (long long)*run, cfg->name, cfg->bf16 ? "bf16" : "fp32", (long long)cfg->steps1,
                (long long)cfg->steps2);
    return -1;
}

/* Trains run here, on the scheduler's loop, with the bar and Ctrl-C, and
 * says how it ended: 0 succeeded, 130 interrupted, else 1 (err set). */
static int train_here(const train_args *t, store *db, int64_t run, const model_config *cfg,
                      const char *device, const dist_env *de, const dist_spec *spec,
                      gt_error *err)
{
    train_view view = {.cfg = cfg, .tty = isatty(2), .quiet = t->quiet};
    /* and never written into the bar's line */
    log_set_hook(view_before_log, &view);
    sched_observer obs = {&view, view_stop, view_step, view_validation, view_phase, NULL};
    double t0 = gt_clock_s();
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int rc = sched_train_run_dist(db, run, t->data_dir, device,
                                  t->allow_emulation ? MODEL_BF16_EMULATE : MODEL_BF16_NATIVE,
                                  &obs, de->size > 1 ? spec : NULL, err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    log_set_hook(NULL, NULL);
    if (view.line_open)
        fputc('\n', stderr);
    if (rc == GT_OK) {
        fprintf(stderr, "run %lld succeeded in %.1f s\n", (long long)run, gt_clock_s() - t0);
        printf("%lld\n", (long long)run);
        return 0;
    }
    if (rc == GT_ECANCELLED && stop_requested) {
        runs_set_status(db, run, "cancelled", "interrupted", NULL, NULL);
        fprintf(stderr, "run %lld interrupted; continue it with: giant train --resume %lld\n",
                (long long)run, (long long)run);
        return 130;
    }
    if (rc == GT_ECANCELLED && de->size > 1) {
        /* the group stopped because another rank asked (its signal), or
         * was aborted because another rank failed */
        int aborted = strstr(err->message, "another rank failed") ||
                      strstr(err->message, "process is gone");
        runs_set_status(db, run, aborted ? "failed" : "cancelled",
                        aborted ? err->message : "interrupted", NULL, NULL);
        if (!aborted) {
            fprintf(stderr, "run %lld interrupted by another rank\n", (long long)run);
            return 130;
        }
    }
    return 1;
}

int cmd_train(int argc, char **argv)
{
    train_args t;
    int status = parse_args(argc, argv, &t);
    if (status != -1)
        return status;
    if (t.report_url || t.report_run)
        return train_report(&t);
    if (!t.config_path && !t.resume) {
        usage(stderr);
        return 2;
    }
    /* Data parallel: this process may be a rank already (started by
     * --ranks/--gpus below, or by srun), or be asked to start them. */
    gt_error err = {0};
    dist_env de;
    if (dist_env_read(&de, &err)) {
        fprintf(stderr, "giant train: %s\n", err.message);
        return 2;
    }
    if ((status = check_parallel(&t, &de)) != -1)
        return status;
    int launch = t.gpus > 1 || t.ranks > 1;
    int nranks = t.gpus > 1 ? t.gpus : t.ranks > 1 ? t.ranks : 1;
    /* Slurm's tasks may be on several nodes: only NCCL reaches them (the
     * shared-memory group is for the ranks --ranks starts on one machine) */
    dist_spec spec = {strcmp(de.from, "slurm") == 0 ? "nccl" : getenv("GIANT_DIST"), t.dist_id,
                      de.rank, de.size, 300.0};
    if (de.size > 1 && de.rank > 0)
        return train_other_rank(&t, &de, &spec);

    /* Log records (migrations, the run's status) go to stderr too: on a
     * terminal they are muted under the bar unless --verbose. */
    if (progress_logs_muted(isatty(2), t.verbose))
        log_set_level(LOG_WARN);
    model_config cfg;
    char rank_dev[32] = "";
    const char *device = NULL;
    store *db = NULL;
    int64_t run = 0;
    status = store_open_migrated(&db, t.db_path, NULL, NULL, &err) ? 1
             : prepare_run(&t, db, &de, launch ? nranks : de.size, &cfg, rank_dev,
                           sizeof rank_dev, &device, &run, &err);
    if (status == -1 && launch) {
        /* the ranks open the database themselves: no connection crosses
         * the fork */
        store_close(db, NULL);
        db = NULL;
        cmd_train_spawn sp = {.run = run, .n = nranks, .gpus = t.gpus > 1,
                              .db_path = t.db_path, .data_dir = t.data_dir,
                              .device = t.gpus > 1 ? NULL : t.device,
                              .allow_emulation = t.allow_emulation, .quiet = t.quiet,
                              .verbose = t.verbose};
        return cmd_train_spawn_ranks(&sp); /* rank 0 prints the run id; the ranks said why */
    }
    if (status == -1)
        status = train_here(&t, db, run, &cfg, device, &de, &spec, &err);
    if (status == 1)
        fprintf(stderr, "giant train: %s\n", err.message);
    store_close(db, NULL);
    return status;
}
