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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "calo_h5.h"
#include "commands.h"
#include "giant_client.h"
#include "gt_clock.h"
#include "gt_path.h"
#include "progress.h"
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
    void *text = NULL;
    size_t len;
    int rc = gt_path_read_stream(f, path, &text, &len, err);
    if (f != stdin)
        fclose(f);
    return rc ? NULL : text;
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

/* POST /v1/runs: *created 1 when the server made the run (201), 0 when
 * the Idempotency-Key named one it had made before (200). */
static int submit_run(gc_client *c, const char *config, const char *key, json_t **run,
                      int *created, gt_error *err)
{
    char hk[320];
    const char *headers[2] = {NULL, NULL};
    if (key) {
        snprintf(hk, sizeof hk, "Idempotency-Key: %s", key);
        headers[0] = hk;
    }
    gc_response r;
    int rc = gc_request_retrying(c, "POST", "/v1/runs", "application/json", config,
                                 strlen(config), headers, &r, err);
    if (rc == GT_OK && (rc = gc_check(&r, err)) == GT_OK) {
        *created = r.status == 201;
        *run = json_loadb(r.body, r.len, 0, NULL);
        if (!*run)
            rc = gt_error_set(err, GT_EFORMAT, "POST /v1/runs: the reply is not JSON");
    }
    gc_response_free(&r);
    return rc;
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
        "Queues a training run on the service and prints its id.  With --key, a\n"
        "second submit of the same config and key gets the run the first made (and\n"
        "says so) instead of a new one.\n";
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
    int created = 1;
    char *text = read_file(argv[optind], &err);
    int status = 1;
    if (text && open_client(server, token, &c, &err) == GT_OK &&
        submit_run(c, text, key, &run, &created, &err) == GT_OK) {
        long long id = (long long)json_integer_value(json_object_get(run, "id"));
        const char *st = json_string_value(json_object_get(run, "status"));
        printf("%lld\n", id);
        /* a replay of the key is the run made earlier, not a new one */
        if (created)
            fprintf(stderr, "run %lld %s\n", id, st ? st : "?");
        else
            fprintf(stderr, "run %lld already existed with key '%s' (%s); nothing was queued\n",
                    id, key, st ? st : "?");
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

/* What giant watch knows of the run: its steps per stage (from its
 * config), where the history it replays ends, the clock of the live steps
 * and the latest losses, for a bar like giant train's. */
typedef struct watch_state {
    char final[16];
    char error[512];
    long long steps[2];        /* per stage, from the config                  */
    long long history;         /* steps done when the watch began             */
    long long done[2];
    long long metrics;         /* metric events seen                          */
    int stage;                 /* of the latest metric, 0 before one          */
    double loss, val_loss;     /* latest; NaN until one came                  */
    int tty, line_open;
    progress_clock clock;
} watch_state;

static int stage_number(const char *name)
{
    return name && strcmp(name, "shower") == 0 ? 2 : 1;
}

/* Ends the bar's line before a line of its own (cleared on a terminal). */
static void watch_break(watch_state *w)
{
    if (w->line_open)
        fputs("\r\033[K", stderr);
    w->line_open = 0;
}

static void watch_bar(watch_state *w, int stage, long long step)
{
    progress_stage st[2] = {{w->steps[0], w->done[0], w->clock.step_s[0]},
                            {w->steps[1], w->done[1], w->clock.step_s[1]}};
    double eta, fraction = progress_estimate(st, &eta);
    char detail[160], line[256], val[40] = "";
    if (!isnan(w->val_loss))
        snprintf(val, sizeof val, "  val %.5f", w->val_loss);
    snprintf(detail, sizeof detail, "stage %d step %lld/%lld  loss %.5f%s", stage, step,
             w->steps[stage - 1], w->loss, val);
    progress_line(line, sizeof line, fraction, eta, detail);
    if (w->tty) {
        fprintf(stderr, "\r%s\033[K", line);
        w->line_open = 1;
    } else if (w->metrics % 20 == 0 || step == w->steps[stage - 1]) {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

static void on_metric(watch_state *w, json_t *j)
{
    int stage = stage_number(json_string_value(json_object_get(j, "stage")));
    long long step = (long long)json_integer_value(json_object_get(j, "step"));
    if (stage != w->stage)
        w->val_loss = NAN;     /* the other stage's: not this one's */
    w->stage = stage;
    if (stage == 2)
        w->done[0] = w->steps[0];
    w->done[stage - 1] = step;
    w->loss = json_number_value(json_object_get(j, "loss"));
    w->metrics++;
    /* replayed history came at once: only live steps measure the speed */
    if ((stage == 2 ? w->steps[0] : 0) + step > w->history)
        progress_clock_tick(&w->clock, stage, step, gt_clock_s());
    watch_bar(w, stage, step);
}

static int on_event(void *user, long long id, const char *event, const char *data)
{
    (void)id;
    watch_state *w = user;
    json_t *j = json_loads(data, 0, NULL);
    if (strcmp(event, "metric") == 0) {
        on_metric(w, j);
    } else if (strcmp(event, "val_loss") == 0) {
        w->val_loss = json_number_value(json_object_get(j, "val_loss"));
        watch_break(w);
        fprintf(stderr, "%-6s step %6lld  validation loss (fp32) %.6f\n",
                json_string_value(json_object_get(j, "stage")),
                (long long)json_integer_value(json_object_get(j, "step")), w->val_loss);
    } else if (strcmp(event, "checkpoint") == 0) {
        watch_break(w);
        fprintf(stderr, "%-6s step %6lld  checkpoint%s\n",
                json_string_value(json_object_get(j, "stage")),
                (long long)json_integer_value(json_object_get(j, "step")),
                json_is_true(json_object_get(j, "best")) ? " (best)" : "");
    } else if (strcmp(event, "status") == 0) {
        const char *st = json_string_value(json_object_get(j, "status"));
        const char *e = json_string_value(json_object_get(j, "error"));
        watch_break(w);
        fprintf(stderr, "status %s%s%s\n", st ? st : "?", e ? ": " : "", e ? e : "");
        snprintf(w->final, sizeof w->final, "%s", st ? st : "");
        snprintf(w->error, sizeof w->error, "%s", e ? e : "");
    }
    json_decref(j);
    return 0;
}

/* The run's steps per stage and steps done, from GET /v1/runs/{id}. */
static int watch_begin(gc_client *c, long long id, watch_state *w, gt_error *err)
{
    json_t *run = NULL;
    int rc = gc_get_run(c, id, &run, err);
    if (rc)
        return rc;
    json_t *steps = json_object_get(json_object_get(json_object_get(run, "config"), "train"),
                                    "steps");
    w->steps[0] = (long long)json_integer_value(json_object_get(steps, "stage1"));
    w->steps[1] = (long long)json_integer_value(json_object_get(steps, "stage2"));
    w->history = (long long)json_integer_value(
        json_object_get(json_object_get(run, "progress"), "done_steps"));
    json_decref(run);
    return GT_OK;
}

int cmd_watch(int argc, char **argv)
{
    const char *server = default_server(), *token = default_token();
    static const struct option opts[] = {CLIENT_SERVER_OPTION, CLIENT_HELP_OPTION, {0, 0, 0, 0}};
    static const char help[] =
        "usage: giant watch RUN_ID [--server URL] [--token T]\n\n"
        "Follows a run live until it ends, with a progress bar (percentage and ETA over\n"
        "both stages, the latest losses); exits 0 when it succeeded.\n";
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
    watch_state w = {.loss = NAN, .val_loss = NAN, .tty = isatty(2)};
    if (open_client(server, token, &c, &err) || watch_begin(c, id, &w, &err) ||
        gc_watch_events(c, id, 0, on_event, &w, &err)) {
        watch_break(&w);
        fprintf(stderr, "giant watch: %s\n", err.message);
        gc_close(c);
        return 1;
    }
    watch_break(&w);
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

/* Showers per request when the server's cap makes the work split: small
 * enough for a steady progress bar and a bounded reply in memory (2 000
 * dataset-2 showers are 52 MB), large enough that the sampler batches well. */
#define SAMPLE_CHUNK_MAX 2000

/* The JSON body of a sample request of rows [row0, row0 + n) of a's sample. */
static char *sample_body(const sample_args *a, long long row0, long long n)
{
    json_t *body = json_pack("{s:I, s:I, s:{s:s, s:f, s:f}}", "count", (json_int_t)n, "seed",
                             (json_int_t)a->seed, "energy", "dist", a->energy, "min_mev", a->emin,
                             "max_mev", a->emax);
    if (body && a->steps > 0)
        json_object_set_new(body, "steps", json_integer(a->steps));
    if (body && row0 > 0)
        json_object_set_new(body, "row0", json_integer(row0));
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return text;
}

/* POST .../samples of rows [row0, row0 + n): the reply as it came (429
 * and 503 with Retry-After waited out). */
static int sample_post(gc_client *c, const sample_args *a, long long row0, long long n,
                       const char *accept, gc_response *r, gt_error *err)
{
    char path[64], acc[128];
    snprintf(path, sizeof path, "/v1/runs/%lld/samples", a->run);
    snprintf(acc, sizeof acc, "Accept: %s", accept);
    const char *headers[] = {acc, NULL};
    char *body = sample_body(a, row0, n);
    if (!body)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    int rc = gc_request_retrying(c, "POST", path, "application/json", body, strlen(body),
                                 headers, r, err);
    free(body);
    return rc;
}

/* The limit of a 422 too_many_showers reply, else 0. */
static long long too_many_limit(const gc_response *r)
{
    if (r->status != 422)
        return 0;
    json_t *j = json_loadb(r->body, r->len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    long long limit = code && strcmp(code, "too_many_showers") == 0
                          ? (long long)json_integer_value(json_object_get(e, "limit"))
                          : 0;
    json_decref(j);
    return limit;
}

/* Rows [0, a->n) in requests of `chunk` rows (binary replies, row0 set:
 * the same showers as one request), appended to one HDF5 file with a
 * progress bar on stderr. */
static int sample_chunked(gc_client *c, const sample_args *a, long long chunk, gt_error *err)
{
    calo_h5_writer w;
    int writer_open = 0, rc = GT_OK, tty = isatty(2), line_open = 0;
    long long requests = (a->n + chunk - 1) / chunk, every = requests / 20 + 1;
    double t0 = gt_clock_s();
    for (long long row0 = 0, k = 0; row0 < a->n && rc == GT_OK; row0 += chunk, k++) {
        long long n = a->n - row0 < chunk ? a->n - row0 : chunk;
        gc_response r;
        gc_showers s = {0};
        if ((rc = sample_post(c, a, row0, n, GC_ACCEPT_BINARY, &r, err)) != GT_OK)
            break;
        if ((rc = gc_check(&r, err)) == GT_OK &&
            (rc = gc_showers_decode(r.body, r.len, &s, err)) == GT_OK) {
            if (s.n != n)
                rc = gt_error_set(err, GT_EFORMAT, "asked for %lld showers, got %lld", n,
                                  (long long)s.n);
            else if (!writer_open &&
                     (rc = calo_h5_create(&w, a->out_path, s.voxels, 0, 1, err)) == GT_OK)
                writer_open = 1;
            if (rc == GT_OK)
                rc = calo_h5_append(&w, s.energies, s.showers, s.n, err);
        }
        gc_showers_free(&s);
        gc_response_free(&r);
        if (rc != GT_OK)
            break;
        long long done = row0 + n;
        double dt = gt_clock_s() - t0, eta = dt / (double)done * (double)(a->n - done);
        char detail[128], line[256];
        snprintf(detail, sizeof detail, "%lld/%lld showers, request %lld/%lld", done, a->n, k + 1,
                 requests);
        progress_line(line, sizeof line, (double)done / (double)a->n, eta, detail);
        if (tty) {
            fprintf(stderr, "\r%s\033[K", line);
            line_open = 1;
        } else if ((k + 1) % every == 0 || done == a->n) {
            fprintf(stderr, "%s\n", line);
        }
    }
    if (line_open)
        fputc('\n', stderr);
    if (writer_open && calo_h5_finish(&w, rc == GT_OK ? err : NULL) != GT_OK && rc == GT_OK)
        rc = err->code ? err->code : GT_EIO;
    if (rc == GT_OK)
        fprintf(stderr, "wrote %lld showers of run %lld to %s in %lld requests of at most %lld\n",
                a->n, a->run, a->out_path, requests, chunk);
    return rc;
}

/* The reply of one request (an HDF5 file) into a->out_path. */
static int sample_write_reply(const sample_args *a, const gc_response *r, gt_error *err)
{
    FILE *f = fopen(a->out_path, "wb");
    int ok = f && fwrite(r->body, 1, r->len, f) == r->len;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok)
        return gt_error_set(err, GT_EIO, "cannot write %s", a->out_path);
    fprintf(stderr, "wrote %lld showers of run %lld to %s (%zu bytes)\n", a->n, a->run,
            a->out_path, r->len);
    return GT_OK;
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
        "and writes them to a CaloChallenge HDF5 file.  Above the service's showers\n"
        "per request (its --max-showers) the work is split into requests of rows\n"
        "that together give the same showers as one request, with a progress bar.\n";
    int rc = client_options(argc, argv, SAMPLE_ARGS_SHORT "h", opts, help, &server, &token,
                            sample_option, &a);
    if (rc >= 0)
        return rc;
    if (a.n <= 0 || a.run <= 0 || !a.out_path || a.steps < 0 || optind != argc) {
        fprintf(stderr, "usage: giant sample --server URL --run ID --n N -o OUT.h5 [options]\n");
        return 2;
    }
    gt_error err = {0};
    gc_client *c = NULL;
    gc_response r = {0};
    /* One request for all of them first; a server whose cap is lower says
     * so (422 too_many_showers with its limit) before doing any work. */
    rc = open_client(server, token, &c, &err);
    if (rc == GT_OK)
        rc = sample_post(c, &a, 0, a.n, GC_ACCEPT_HDF5, &r, &err);
    long long limit = rc == GT_OK ? too_many_limit(&r) : 0;
    if (rc == GT_OK && limit > 0)
        rc = sample_chunked(c, &a, limit < SAMPLE_CHUNK_MAX ? limit : SAMPLE_CHUNK_MAX, &err);
    else if (rc == GT_OK && (rc = gc_check(&r, &err)) == GT_OK)
        rc = sample_write_reply(&a, &r, &err);
    if (rc != GT_OK)
        fprintf(stderr, "giant sample: %s\n", err.message);
    gc_response_free(&r);
    gc_close(c);
    return rc == GT_OK ? 0 : 1;
}
