/* Client subcommands of a running service, on api/client:
 *
 *   giant submit CONFIG.json [--key K]     queue a run, print its id
 *   giant runs [--status S] [--limit N]    list runs, newest first
 *   giant watch ID                         live progress until the run ends
 *   giant sample --server URL --run ID ... -o OUT.h5   showers over HTTP
 *
 * Each takes --server URL (default: http:// and the service's default
 * listen address, from the settings table; env GIANT_SERVER) and --token
 * TOKEN (env GIANT_TOKEN; none by default, which a service on loopback
 * takes unless it requires tokens).  A 429 or 503 with Retry-After is
 * waited out and retried by the client library (a bounded number of
 * times). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "giant_client.h"
#include "sample_args.h"
#include "settings.h"

/* GIANT_SERVER, else where `giant serve` listens by default (the settings
 * table's listen). */
static const char *default_server(void)
{
    static char url[300];
    const char *s = getenv("GIANT_SERVER");
    if (s && *s)
        return s;
    snprintf(url, sizeof url, "http://%s", settings_default("listen"));
    return url;
}

/* GIANT_TOKEN, else none. */
static const char *default_token(void)
{
    const char *t = getenv("GIANT_TOKEN");
    return t && *t ? t : NULL;
}

/* gc_open, then the token every request of the command sends. */
static int open_client(const char *server, const char *token, gc_client **c, gt_error *err)
{
    int rc = gc_open(c, server, err);
    if (rc == GT_OK && (rc = gc_set_token(*c, token, err)) != GT_OK) {
        gc_close(*c);
        *c = NULL;
    }
    return rc;
}

static char *read_file(const char *path, gt_error *err)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        gt_error_set(err, GT_EIO, "cannot open %s", path);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *p = realloc(buf, cap * 2);
            if (!p) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = p;
            cap *= 2;
        }
    }
    if (f != stdin)
        fclose(f);
    if (!buf) {
        gt_error_set(err, GT_ENOMEM, "out of memory");
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static long long parse_run_id(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    return *end || v <= 0 ? 0 : v;
}

/* A command's own options, handed over one at a time: 0 to go on, or the
 * exit status that ends the command. */
typedef int (*client_option_fn)(void *ctx, int opt, const char *arg);

/* The option loop every client command shares: opts holds the command's
 * own options and --server ('S'), --token ('T') and --help ('h').
 * --server sets *server, --token *token, --help prints `help` and ends the
 * command with 0, an option getopt refuses ends it with 2, the others go
 * to take.  Returns -1 when the command goes on (its operands from
 * optind). */
static int client_options(int argc, char **argv, const char *shortopts,
                          const struct option *opts, const char *help, const char **server,
                          const char **token, client_option_fn take, void *ctx)
{
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, shortopts, opts, NULL)) != -1) {
        if (o == 'S') {
            *server = optarg;
        } else if (o == 'T') {
            *token = optarg;
        } else if (o == 'h') {
            printf("%s", help);
            return 0;
        } else {
            int rc = take && o != '?' ? take(ctx, o, optarg) : 2;
            if (rc)
                return rc;
        }
    }
    return -1;
}

#define CLIENT_SERVER_OPTION {"server", required_argument, 0, 'S'}, \
                             {"token", required_argument, 0, 'T'}
#define CLIENT_HELP_OPTION {"help", no_argument, 0, 'h'}

/* ---------------------------------------------------------------------------
 * giant submit
 * ------------------------------------------------------------------------- */

static int submit_option(void *key, int opt, const char *arg)
{
    (void)opt;                 /* --key, its one option */
    *(const char **)key = arg;
    return 0;
}

int cmd_submit(int argc, char **argv)
{
    const char *server = default_server(), *key = NULL, *token = default_token();
    static const struct option opts[] = {CLIENT_SERVER_OPTION,
                                         {"key", required_argument, 0, 'k'},
                                         CLIENT_HELP_OPTION,
                                         {0, 0, 0, 0}};
    static const char help[] =
        "usage: giant submit CONFIG.json [--key IDEMPOTENCY_KEY] [--server URL] [--token T]\n\n"
        "Queues a training run on the service and prints its id.\n";
    int rc = client_options(argc, argv, "h", opts, help, &server, &token, submit_option, &key);
    if (rc >= 0)
        return rc;
    if (optind + 1 != argc) {
        fprintf(stderr, "usage: giant submit CONFIG.json [--key K] [--server URL]\n");
        return 2;
    }
    gt_error err = {0};
    gc_client *c = NULL;
    json_t *run = NULL;
    char *text = read_file(argv[optind], &err);
    int status = 1;
    if (text && open_client(server, token, &c, &err) == GT_OK &&
        gc_submit_run(c, text, key, &run, &err) == GT_OK) {
        printf("%lld\n", (long long)json_integer_value(json_object_get(run, "id")));
        fprintf(stderr, "run %lld %s\n", (long long)json_integer_value(json_object_get(run, "id")),
                json_string_value(json_object_get(run, "status")));
        status = 0;
    } else {
        fprintf(stderr, "giant submit: %s\n", err.message);
    }
    json_decref(run);
    gc_close(c);
    free(text);
    return status;
}

/* ---------------------------------------------------------------------------
 * giant runs
 * ------------------------------------------------------------------------- */

typedef struct runs_filter {
    const char *status;
    int limit;
} runs_filter;

static int runs_option(void *ctx, int opt, const char *arg)
{
    runs_filter *f = ctx;
    if (opt == 't')
        f->status = arg;
    else
        f->limit = atoi(arg);
    return 0;
}

int cmd_runs(int argc, char **argv)
{
    const char *server = default_server(), *token = default_token();
    runs_filter f = {NULL, 20};
    static const struct option opts[] = {CLIENT_SERVER_OPTION,
                                         {"status", required_argument, 0, 't'},
                                         {"limit", required_argument, 0, 'n'},
                                         CLIENT_HELP_OPTION,
                                         {0, 0, 0, 0}};
    static const char help[] =
        "usage: giant runs [--status S] [--limit N] [--server URL] [--token T]\n\n"
        "Lists runs, newest first.\n";
    int rc = client_options(argc, argv, "h", opts, help, &server, &token, runs_option, &f);
    if (rc >= 0)
        return rc;
    if (optind != argc || f.limit < 1 || f.limit > 100) {
        fprintf(stderr, "usage: giant runs [--status S] [--limit 1..100] [--server URL]\n");
        return 2;
    }
    gt_error err = {0};
    gc_client *c = NULL;
    json_t *page = NULL;
    if (open_client(server, token, &c, &err) ||
        gc_list_runs(c, f.status, NULL, f.limit, &page, &err)) {
        fprintf(stderr, "giant runs: %s\n", err.message);
        gc_close(c);
        return 1;
    }
    printf("%-6s %-10s %-7s %-6s %-24s %s\n", "ID", "STATUS", "DEVICE", "DONE", "CREATED", "NAME");
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(page, "items"), i, r) {
        const char *dev = json_string_value(json_object_get(r, "device"));
        double frac = json_number_value(json_object_get(json_object_get(r, "progress"), "fraction"));
        printf("%-6lld %-10s %-7s %5.1f%% %-24s %s\n",
               (long long)json_integer_value(json_object_get(r, "id")),
               json_string_value(json_object_get(r, "status")), dev ? dev : "-", 100 * frac,
               json_string_value(json_object_get(r, "created_at")),
               json_string_value(json_object_get(r, "name")) ? json_string_value(json_object_get(r, "name")) : "");
    }
    json_decref(page);
    gc_close(c);
    return 0;
}

/* ---------------------------------------------------------------------------
 * giant watch
 * ------------------------------------------------------------------------- */

typedef struct watch_state {
    char final[16];
    char error[512];
} watch_state;

static int on_event(void *user, long long id, const char *event, const char *data)
{
    (void)id;
    watch_state *w = user;
    json_t *j = json_loads(data, 0, NULL);
    if (strcmp(event, "metric") == 0) {
        fprintf(stderr, "%-6s step %6lld  loss %.5f  grad_norm %.3f  lr %.3g\n",
                json_string_value(json_object_get(j, "stage")),
                (long long)json_integer_value(json_object_get(j, "step")),
                json_number_value(json_object_get(j, "loss")),
                json_number_value(json_object_get(j, "grad_norm")),
                json_number_value(json_object_get(j, "lr")));
    } else if (strcmp(event, "val_loss") == 0) {
        fprintf(stderr, "%-6s step %6lld  validation loss (fp32) %.6f\n",
                json_string_value(json_object_get(j, "stage")),
                (long long)json_integer_value(json_object_get(j, "step")),
                json_number_value(json_object_get(j, "val_loss")));
    } else if (strcmp(event, "checkpoint") == 0) {
        fprintf(stderr, "%-6s step %6lld  checkpoint%s\n",
                json_string_value(json_object_get(j, "stage")),
                (long long)json_integer_value(json_object_get(j, "step")),
                json_is_true(json_object_get(j, "best")) ? " (best)" : "");
    } else if (strcmp(event, "status") == 0) {
        const char *st = json_string_value(json_object_get(j, "status"));
        const char *e = json_string_value(json_object_get(j, "error"));
        fprintf(stderr, "status %s%s%s\n", st ? st : "?", e ? ": " : "", e ? e : "");
        snprintf(w->final, sizeof w->final, "%s", st ? st : "");
        snprintf(w->error, sizeof w->error, "%s", e ? e : "");
    }
    json_decref(j);
    return 0;
}

int cmd_watch(int argc, char **argv)
{
    const char *server = default_server(), *token = default_token();
    static const struct option opts[] = {CLIENT_SERVER_OPTION, CLIENT_HELP_OPTION, {0, 0, 0, 0}};
    static const char help[] =
        "usage: giant watch RUN_ID [--server URL] [--token T]\n\n"
        "Prints a run's progress live until it ends; exits 0 when it succeeded.\n";
    int rc = client_options(argc, argv, "h", opts, help, &server, &token, NULL, NULL);
    if (rc >= 0)
        return rc;
    long long id = optind + 1 == argc ? parse_run_id(argv[optind]) : 0;
    if (!id) {
        fprintf(stderr, "usage: giant watch RUN_ID [--server URL]\n");
        return 2;
    }
    gt_error err = {0};
    gc_client *c = NULL;
    watch_state w = {"", ""};
    if (open_client(server, token, &c, &err) || gc_watch_events(c, id, 0, on_event, &w, &err)) {
        fprintf(stderr, "giant watch: %s\n", err.message);
        gc_close(c);
        return 1;
    }
    gc_close(c);
    return strcmp(w.final, "succeeded") == 0 ? 0 : 1;
}

/* ---------------------------------------------------------------------------
 * giant sample --server
 * ------------------------------------------------------------------------- */

static int sample_option(void *args, int opt, const char *arg)
{
    /* only the sample_args options are in its table */
    return sample_args_take(args, opt, arg) < 0 ? 2 : 0;
}

int cmd_sample_remote(int argc, char **argv)
{
    const char *server = default_server(), *token = default_token();
    sample_args a;
    sample_args_default(&a);
    static const struct option opts[] = {CLIENT_SERVER_OPTION, SAMPLE_ARGS_OPTIONS,
                                         CLIENT_HELP_OPTION, {0, 0, 0, 0}};
    static const char help[] =
        "usage: giant sample --server URL --run ID --n N -o OUT.h5 [--seed S]\n"
        "       [--energy MODE] [--emin MEV] [--emax MEV] [--steps K] [--token T]\n\n"
        "Asks a running service for N showers of a run (its best checkpoints)\n"
        "and writes the CaloChallenge HDF5 file it returns.\n";
    int rc = client_options(argc, argv, SAMPLE_ARGS_SHORT "h", opts, help, &server, &token,
                            sample_option, &a);
    if (rc >= 0)
        return rc;
    if (a.n <= 0 || a.run <= 0 || !a.out_path || a.steps < 0 || optind != argc) {
        fprintf(stderr, "usage: giant sample --server URL --run ID --n N -o OUT.h5 [options]\n");
        return 2;
    }
    json_t *body = json_pack("{s:I, s:I, s:{s:s, s:f, s:f}}", "count", (json_int_t)a.n, "seed",
                             (json_int_t)a.seed, "energy", "dist", a.energy, "min_mev", a.emin,
                             "max_mev", a.emax);
    if (a.steps > 0)
        json_object_set_new(body, "steps", json_integer(a.steps));
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    gt_error err = {0};
    gc_client *c = NULL;
    gc_response r = {0};
    int status = 1;
    if (!text || open_client(server, token, &c, &err) ||
        gc_sample(c, a.run, text, GC_ACCEPT_HDF5, &r, &err)) {
        fprintf(stderr, "giant sample: %s\n", text ? err.message : "out of memory");
    } else {
        FILE *f = fopen(a.out_path, "wb");
        if (!f || fwrite(r.body, 1, r.len, f) != r.len) {
            fprintf(stderr, "giant sample: cannot write %s\n", a.out_path);
        } else {
            fprintf(stderr, "wrote %lld showers of run %lld to %s (%zu bytes)\n", a.n, a.run,
                    a.out_path, r.len);
            status = 0;
        }
        if (f && fclose(f) != 0)
            status = 1;
    }
    gc_response_free(&r);
    gc_close(c);
    free(text);
    return status;
}
