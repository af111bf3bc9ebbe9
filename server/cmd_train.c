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

#include "commands.h"
#include "model_config.h"
#include "runs.h"
#include "sched.h"
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
    long long reports;
} train_view;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void view_step(void *user, const model_step_report *r, long long done, long long total)
{
    train_view *c = user;
    if (c->quiet)
        return;
    long long left = total - done;
    double eta = r->samples_per_s > 0 ? (double)left * c->cfg->batch / r->samples_per_s : 0;
    int width = 24, filled = (int)(width * (double)done / (double)(total ? total : 1));
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    c->reports++;
    if (c->tty || c->reports % 20 == 0 || done == total)
        fprintf(stderr, "%s[%s] stage %d step %6lld/%-6lld loss %.5f  %7.0f samples/s  ETA %02d:%02d%s",
                c->tty ? "\r" : "", bar, r->stage, r->step, r->total, (double)r->loss,
                r->samples_per_s, (int)(eta / 60), (int)fmod(eta, 60), c->tty ? "  " : "\n");
}

static void view_validation(void *user, int stage, long long step, float val)
{
    train_view *c = user;
    if (!c->quiet)
        fprintf(stderr, "%sstage %d step %lld: validation loss (fp32) %.6f\n", c->tty ? "\n" : "",
                stage, step, (double)val);
}

static int view_stop(void *user)
{
    (void)user;
    return stop_requested;
}

static void view_phase(void *user, const char *phase)
{
    train_view *c = user;
    if (!c->quiet)
        fprintf(stderr, "%s%s\n", c->tty && c->reports ? "\n" : "", phase);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: giant train CONFIG.json [options]\n"
            "       giant train --resume RUN_ID [options]\n\n"
            "Trains both stages of a run config into a local database, printing progress.\n"
            "With no dataset in the config the built-in synthetic dataset-2 showers are used.\n\n"
            "options:\n"
            "  --db FILE         database (default %s, env GIANT_DB)\n"
            "  --data-dir DIR    where relative dataset paths live (default %s,\n"
            "                    env GIANT_DATA_DIR)\n"
            "  --resume RUN_ID   continue a run from its last checkpoints\n"
            "  --device SPEC     override train.device: cpu, cuda:N or auto\n"
            "  --allow-bf16-emulation\n"
            "                    let a bf16 config train on a CPU without AVX512-BF16\n"
            "                    (exact emulation, ~3x slower; env GIANT_ALLOW_BF16_EMULATION=1)\n"
            "  --quiet           no progress output\n",
            settings_default("db"), settings_default("data_dir"));
}

int cmd_train(int argc, char **argv)
{
    /* The service's settings table has the defaults and variable names. */
    const char *db_path = settings_env_or_default("db");
    const char *data_dir = settings_env_or_default("data_dir");
    const char *device = NULL;
    long long resume = 0;
    int quiet = 0;
    int allow_emulation = strcmp(settings_env_or_default("allow_bf16_emulation"), "1") == 0;
    static const struct option opts[] = {
        {"db", required_argument, 0, 'd'},     {"data-dir", required_argument, 0, 'D'},
        {"resume", required_argument, 0, 'r'}, {"device", required_argument, 0, 'x'},
        {"quiet", no_argument, 0, 'q'},        {"help", no_argument, 0, 'h'},
        {"allow-bf16-emulation", no_argument, 0, 'E'},
        {0, 0, 0, 0}};
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, "hq", opts, NULL)) != -1) {
        switch (o) {
        case 'd': db_path = optarg; break;
        case 'D': data_dir = optarg; break;
        case 'x': device = optarg; break;
        case 'q': quiet = 1; break;
        case 'E': allow_emulation = 1; break;
        case 'r': {
            char *end;
            resume = strtoll(optarg, &end, 10);
            if (*end || resume <= 0) {
                fprintf(stderr, "giant train: --resume needs a run id\n");
                return 2;
            }
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    const char *config_path = optind < argc ? argv[optind] : NULL;
    if (!config_path && !resume) {
        usage(stderr);
        return 2;
    }

    gt_error err = {0};
    char field[128] = "";
    model_config cfg;
    store *db = NULL;
    char *config_text = NULL;
    int64_t run = resume;
    int status = 1;
    store_migration list[STORE_MAX_MIGRATIONS];
    int nmig = 0;
    if (store_builtin_migrations(list, &nmig, &err) || store_open(&db, db_path, &err) ||
        store_migrate(db, list, nmig, NULL, &err))
        goto out;
    if (resume) {
        char st[16];
        if (runs_config(db, run, &config_text, &err) || runs_status(db, run, st, &err) ||
            model_config_parse(config_text, strlen(config_text), &cfg, field, sizeof field, &err))
            goto out;
        if (strcmp(st, "succeeded") == 0) {
            fprintf(stderr, "giant train: run %lld already succeeded\n", (long long)run);
            status = 0;
            goto out;
        }
    } else if (model_config_load(config_path, &cfg, field, sizeof field, &err)) {
        goto out;
    }
    if (device)
        snprintf(cfg.device, sizeof cfg.device, "%s", device);
    const char *precision = cfg.bf16 ? "bf16" : "fp32";
    model_bf16_policy bf16 = allow_emulation ? MODEL_BF16_EMULATE : MODEL_BF16_NATIVE;
    {
        /* refuse before a run is recorded: a device that cannot train this
         * precision is the user's mistake to fix, not a failed run */
        nn_backend *probe = NULL;
        if (model_open_backend(&cfg, bf16, &probe, &err))
            goto out;
        nn_backend_close(probe);
    }
    if (!resume) {
        json_t *j = model_config_to_json(&cfg);
        char *text = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(j);
        if (!text) {
            gt_error_set(&err, GT_ENOMEM, "out of memory");
            goto out;
        }
        int rc = runs_create(db, cfg.name, text, precision, NULL, cfg.steps1 + cfg.steps2, &run,
                             &err);
        free(text);
        if (rc)
            goto out;
    }
    if (!quiet)
        fprintf(stderr, "run %lld: %s, %s, stage 1 %lld steps, stage 2 %lld steps\n",
                (long long)run, cfg.name, precision, (long long)cfg.steps1,
                (long long)cfg.steps2);

    /* The same training loop as the service's scheduler. */
    train_view view = {.cfg = &cfg, .tty = isatty(2), .quiet = quiet};
    sched_observer obs = {&view, view_stop, view_step, view_validation, view_phase};
    double t0 = now_s();
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int rc = sched_train_run(db, run, data_dir, device, bf16, &obs, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (!quiet && view.tty)
        fputc('\n', stderr);
    if (rc == GT_OK) {
        fprintf(stderr, "run %lld succeeded in %.1f s\n", (long long)run, now_s() - t0);
        printf("%lld\n", (long long)run);
        status = 0;
    } else if (rc == GT_ECANCELLED && stop_requested) {
        runs_set_status(db, run, "cancelled", "interrupted", NULL, NULL);
        fprintf(stderr, "run %lld interrupted; continue it with: giant train --resume %lld\n",
                (long long)run, (long long)run);
        status = 130;
    }
out:
    if (status == 1)
        fprintf(stderr, "giant train: %s\n", err.message);
    free(config_text);
    store_close(db, NULL);
    return status;
}
