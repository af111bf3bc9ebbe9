#include "settings.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "log.h"

/* ---------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------- */

typedef enum { SET_STR, SET_INT } set_type;

typedef struct set_def {
    const char *name;          /* flag without "--"; env is GIANT_ + upper   */
    set_type type;
    size_t offset;
    size_t cap;                /* SET_STR: buffer size                        */
    long min, max;             /* SET_INT: inclusive range                    */
    const char *meta;          /* what --help shows after the flag            */
    const char *def;           /* default, as text                            */
    const char *help;
} set_def;

#define STR(field, m, d, h) { #field, SET_STR, offsetof(settings, field), \
                              sizeof(((settings *)0)->field), 0, 0, m, d, h }
#define INT(field, lo, hi, d, h) { #field, SET_INT, offsetof(settings, field), \
                                   0, lo, hi, "N", d, h }

static const set_def defs[] = {
    STR(listen,    "HOST:PORT", "127.0.0.1:8080", "address to listen on, HOST:PORT (port 0 picks a free one)"),
    STR(db,        "FILE", "giant.db",       "SQLite database file (created and migrated at start)"),
    STR(data_dir,  "DIR", "giant-data",     "directory for datasets and exported files"),
    STR(config,    "FILE", "",               "JSON config file; keys are setting names with '_'"),
    STR(log_level, "LEVEL", "info",           "debug | info | warn | error"),
    INT(threads,            1, 1024,        "4",        "HTTP worker threads"),
    INT(max_body_bytes,     1, 1L << 30,    "1048576",  "largest request body accepted (bytes); larger gets 413"),
    INT(max_model_bytes,    1, 1L << 32,    "536870912", "largest model file POST /v1/models accepts (bytes); larger gets 413"),
    INT(max_connections,    1, 100000,      "1024",     "open connections across all clients"),
    INT(per_ip_connections, 0, 100000,      "64",       "open connections from one address (0 = no limit)"),
    INT(connection_memory,  4096, 1L << 28, "131072",   "per-connection buffer memory (bytes)"),
    INT(timeout,            0, 86400,       "60",       "idle connection timeout (seconds, 0 = none)"),
    INT(header_timeout,     0, 86400,       "10",       "seconds a new connection may take to send its first request's headers (slowloris); 0 = --timeout"),
    INT(max_header_bytes,   1024, 1L << 20, "16384",    "request header bytes (names and values) accepted; more gets 431 headers_too_large"),
    INT(max_streams_per_ip, 0, 100000,      "32",       "event streams one address may hold open; more gets 429 (0 = no limit), so its other requests keep connections under --per-ip-connections"),
    STR(admin_listen, "HOST:PORT", "",       "second listener with only /healthz, /readyz and /metrics, its own connections and thread (\"\" = none)"),
    INT(shutdown_grace,     0, 3600,        "30",       "seconds in-flight requests get to finish on SIGTERM"),
    STR(device,    "SPEC", "",               "device for every run (cpu, cuda:N, auto); empty = each run's train.device"),
    INT(max_showers,        1, 10000000,    "10000",    "showers per sample request; more gets 422 too_many_showers (dataset-2: 26 KB each in memory)"),
    INT(max_json_showers,   1, 100000,      "100",      "largest sample request answered as JSON; more gets 422 too_many_showers"),
    INT(max_active_runs,    1, 1000000,     "64",       "runs queued or training at once; a submission past it gets 429 with Retry-After"),
    INT(max_active_evaluations, 1, 100000,  "8",        "evaluations queued or running at once (each samples and trains a classifier); a request past it gets 429 with Retry-After"),
    INT(max_sample_steps,   1, 1000,        "1000",     "solver steps a sample request (steps) or a submitted run (sample.steps) may ask for; more gets 422 (a request's cost grows with them)"),
    INT(max_train_steps,    1, 100000000,   "1000000",  "training steps per stage a submitted run may ask for; more gets 422"),
    INT(max_synthetic_showers, 16, 100000000, "1000000", "showers of a synthetic dataset a client may ask for (runs and /v1/datasets); more gets 422"),
    INT(max_dataset_mb,     1, 1L << 30,    "8192",     "memory a run's dataset may take (MiB: showers x (voxels + 1) x 4 bytes, synthetic or a file; training holds about twice that); more gets 422"),
    INT(sample_memory_mb,   1, 1L << 30,    "2048",     "memory the sample requests in flight may hold together (MiB); past it 503 with Retry-After"),
    INT(min_energy_mev,     1, 100000000,   "100",      "lowest incident energy a sample request may ask for (MeV)"),
    INT(max_energy_mev,     1, 100000000,   "10000000", "highest incident energy a sample request may ask for (MeV)"),
    INT(batch_delay_ms,     0, 1000,        "5",        "how long sampling waits to batch concurrent requests (ms)"),
    INT(sampler_cache,      1, 64,          "4",        "runs whose loaded samplers are kept (LRU)"),
    INT(default_dataset,    0, 1000000,     "5000",     "showers of the synthetic dataset-2 file made on first start (0 = none)"),
    INT(allow_bf16_emulation, 0, 1,         "0",        "1: bf16 runs may train on a CPU without AVX512-BF16 (exact emulation, ~3x slower); 0: they are refused"),
    INT(require_tokens,     0, 1,           "0",        "1: every request but /healthz, /readyz (and /metrics, see --public-metrics) needs a token, loopback ones too; 0: loopback requests without one are let through"),
    INT(public_metrics,     0, 1,           "1",        "1: /metrics needs no token; 0: it needs a token of any role"),
    INT(rate_limit,         0, 1000000,     "600",      "requests a minute one token may send (token bucket); past it 429 with Retry-After (0 = no limit)"),
    INT(rate_burst,         1, 1000000,     "120",      "requests one token may send at once before --rate-limit paces it"),
    INT(max_queued_runs_per_token, 0, 1000000, "16",    "runs one token may have queued; a submission past it gets 429 with Retry-After (0 = no limit)"),
    STR(role,      "ROLE", "trainer",        "trainer (the whole service) | sampler (a stateless sampling replica: serves the models in --models, no database file)"),
    STR(models,    "DIR", "",                "sampler: the directory whose *.giant model files it loads at start (each served under its file name)"),
    STR(model_url, "URL", "",                "sampler: a model file fetched from a trainer at start (http://HOST:PORT/v1/models/NAME/file, served as NAME, or /v1/runs/ID/model), beside or instead of --models"),
    STR(model_token, "TOKEN", "",            "the bearer token --model-url is fetched with (a reader's; prefer GIANT_MODEL_TOKEN: flags show in ps)"),
    STR(slurm_bin, "DIR", "",                "runs with executor slurm: the directory of sbatch, squeue and scancel (\"\" = PATH); without them such runs are refused"),
    STR(slurm_partition, "NAME", "",         "slurm: the partition of runs whose executor names none (\"\" = the cluster's default)"),
    INT(slurm_time_limit,   0, 525600,      "0",        "slurm: the time limit of runs whose executor names none (minutes; 0 = the partition's)"),
    STR(slurm_gres, "GRES", "",              "slurm: the gres of runs whose executor names none, e.g. gpu:1 (\"\" = none)"),
    STR(slurm_options, "OPTS", "",           "slurm: extra sbatch options for every job, whitespace-separated --name=value words (e.g. --account=calo --qos=normal)"),
    STR(slurm_report_url, "URL", "",         "slurm: the URL the nodes reach this service at (\"\" = http://LISTEN: only right when the nodes are this host)"),
    STR(slurm_giant, "PATH", "",             "slurm: the giant binary on the nodes (\"\" = this binary's path)"),
    STR(slurm_job_dir, "DIR", "",            "slurm: job scripts and job output (\"\" = DATA_DIR/slurm); the nodes write the output there, so a shared directory"),
    STR(slurm_data_dir, "DIR", "",           "slurm: the data directory as the nodes see it (\"\" = --data-dir made absolute)"),
    INT(slurm_poll_ms,      100, 600000,    "5000",     "slurm: milliseconds between two squeue calls that follow the jobs"),
    STR(token_file, "FILE", "",              "sampler: bearer tokens it accepts, one a line (TOKEN or TOKEN ROLE, role sampler or reader; '#' comments); with one it may listen on any address and requires tokens; the file must not be readable by group or others"),
};
#define NDEFS (sizeof defs / sizeof defs[0])

/* "max_body_bytes" -> "max-body-bytes" / "GIANT_MAX_BODY_BYTES" */
static void flag_name(const set_def *d, char *out, size_t cap)
{
    snprintf(out, cap, "%s", d->name);
    for (char *p = out; *p; p++)
        if (*p == '_')
            *p = '-';
}

static void env_name(const set_def *d, char *out, size_t cap)
{
    snprintf(out, cap, "GIANT_%s", d->name);
    for (char *p = out; *p; p++)
        *p = (char)toupper((unsigned char)*p);
}

static const set_def *find_def(const char *name)
{
    for (size_t i = 0; i < NDEFS; i++)
        if (strcmp(defs[i].name, name) == 0)
            return &defs[i];
    return NULL;
}

const char *settings_default(const char *name)
{
    const set_def *d = find_def(name);
    return d ? d->def : NULL;
}

const char *settings_env_or_default(const char *name)
{
    const set_def *d = find_def(name);
    if (!d)
        return NULL;
    char env[64];
    env_name(d, env, sizeof env);
    const char *v = getenv(env);
    return v ? v : d->def;
}

/* ---------------------------------------------------------------------------
 * Assigning one value, with the source named in any error
 * ------------------------------------------------------------------------- */

static int set_value(settings *s, const set_def *d, const char *value,
                     const char *source, gt_error *err)
{
    char *field = (char *)s + d->offset;
    if (d->type == SET_STR) {
        size_t n = strlen(value);
        if (n >= d->cap)
            return gt_error_set(err, GT_EINVAL, "%s: value is %zu bytes, at most %zu allowed",
                                source, n, d->cap - 1);
        memcpy(field, value, n + 1);
        return GT_OK;
    }
    char *end = NULL;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || end == value || *end != '\0')
        return gt_error_set(err, GT_EINVAL, "%s: '%s' is not an integer", source, value);
    if (v < d->min || v > d->max)
        return gt_error_set(err, GT_EINVAL, "%s: %ld is outside [%ld, %ld]", source, v,
                            d->min, d->max);
    memcpy(field, &v, sizeof v);
    return GT_OK;
}

static int load_config_file(settings *s, const char *path, gt_error *err)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        /* Jansson reports a missing file as a parse error at line -1. */
        if (jerr.line < 0)
            return gt_error_set(err, GT_EIO, "config %s: %s", path, jerr.text);
        return gt_error_set(err, GT_EINVAL, "config %s: line %d column %d: %s", path,
                            jerr.line, jerr.column, jerr.text);
    }
    int rc = GT_OK;
    if (!json_is_object(root)) {
        rc = gt_error_set(err, GT_EINVAL, "config %s: top level must be an object", path);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        const set_def *d = find_def(key);
        char source[1200];
        snprintf(source, sizeof source, "config %s: %s", path, key);
        if (!d || strcmp(key, "config") == 0) {
            rc = gt_error_set(err, GT_EINVAL, "%s: unknown setting", source);
            goto out;
        }
        char text[64];
        const char *value;
        if (d->type == SET_STR && json_is_string(val)) {
            value = json_string_value(val);
        } else if (d->type == SET_INT && json_is_integer(val)) {
            snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(val));
            value = text;
        } else {
            rc = gt_error_set(err, GT_EINVAL, "%s: expected %s", source,
                              d->type == SET_STR ? "a string" : "an integer");
            goto out;
        }
        if ((rc = set_value(s, d, value, source, err)) != GT_OK)
            goto out;
    }
out:
    json_decref(root);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Flags: "--name value" or "--name=value"
 * ------------------------------------------------------------------------- */

/* Finds the setting a flag names; sets *inline_value for --name=value. */
static const set_def *match_flag(const char *arg, const char **inline_value)
{
    if (strncmp(arg, "--", 2) != 0)
        return NULL;
    arg += 2;
    for (size_t i = 0; i < NDEFS; i++) {
        char fname[64];
        flag_name(&defs[i], fname, sizeof fname);
        size_t n = strlen(fname);
        if (strncmp(arg, fname, n) == 0 && (arg[n] == '\0' || arg[n] == '=')) {
            *inline_value = arg[n] == '=' ? arg + n + 1 : NULL;
            return &defs[i];
        }
    }
    return NULL;
}

/* Walks argv; when only is non-NULL applies just that setting (used to find
 * --config before the file is read), otherwise applies every flag. */
static int apply_flags(settings *s, int argc, char **argv, const set_def *only,
                       int *help, gt_error *err)
{
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            if (help)
                *help = 1;
            continue;
        }
        const char *value = NULL;
        const set_def *d = match_flag(arg, &value);
        if (!d)
            return gt_error_set(err, GT_EINVAL, "unknown argument '%s' (try --help)", arg);
        if (!value) {
            if (i + 1 >= argc)
                return gt_error_set(err, GT_EINVAL, "%s needs a value", arg);
            value = argv[++i];
        }
        if (only && d != only)
            continue;
        char source[80] = "--";
        flag_name(d, source + 2, sizeof source - 2);
        int rc = set_value(s, d, value, source, err);
        if (rc != GT_OK)
            return rc;
    }
    return GT_OK;
}

int settings_split_listen(const char *listen, char *host, size_t host_cap, int *port,
                          gt_error *err)
{
    /* "[::1]:8080" for IPv6, "host:port" otherwise; the port is the text
     * after the last ':' so IPv6 needs its brackets. */
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen)
        return gt_error_set(err, GT_EINVAL, "listen: '%s' is not HOST:PORT", listen);
    const char *h = listen;
    size_t hlen = (size_t)(colon - listen);
    if (h[0] == '[') {
        if (hlen < 3 || h[hlen - 1] != ']')
            return gt_error_set(err, GT_EINVAL, "listen: '%s' has a bad [IPv6] host", listen);
        h++;
        hlen -= 2;
    } else if (memchr(h, ':', hlen)) {
        return gt_error_set(err, GT_EINVAL, "listen: write IPv6 hosts as [addr]:port ('%s')",
                            listen);
    }
    if (hlen == 0 || hlen >= host_cap)
        return gt_error_set(err, GT_EINVAL, "listen: '%s' has an empty or too long host", listen);
    char *end = NULL;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end != '\0' || p < 0 || p > 65535)
        return gt_error_set(err, GT_EINVAL, "listen: '%s' has a bad port (0..65535)", listen);
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (int)p;
    return GT_OK;
}

int settings_load(settings *s, int argc, char **argv, int *help, gt_error *err)
{
    int rc;
    if (help)
        *help = 0;
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < NDEFS; i++)
        if ((rc = set_value(s, &defs[i], defs[i].def, "default", err)) != GT_OK)
            return rc;

    /* The config file's path follows the same precedence as everything else,
     * but it must be known before the file is read. */
    const set_def *cfg = find_def("config");
    const char *env = getenv("GIANT_CONFIG");
    if (env && (rc = set_value(s, cfg, env, "GIANT_CONFIG", err)) != GT_OK)
        return rc;
    if ((rc = apply_flags(s, argc, argv, cfg, help, err)) != GT_OK)
        return rc;
    if (s->config[0] && (rc = load_config_file(s, s->config, err)) != GT_OK)
        return rc;

    for (size_t i = 0; i < NDEFS; i++) {
        char name[64];
        env_name(&defs[i], name, sizeof name);
        const char *v = getenv(name);
        if (v && (rc = set_value(s, &defs[i], v, name, err)) != GT_OK)
            return rc;
    }
    if ((rc = apply_flags(s, argc, argv, NULL, help, err)) != GT_OK)
        return rc;

    /* Cross-field checks, so a bad value fails at start, not at first use. */
    char host[256];
    int port;
    if ((rc = settings_split_listen(s->listen, host, sizeof host, &port, err)) != GT_OK)
        return rc;
    if (s->admin_listen[0] &&
        settings_split_listen(s->admin_listen, host, sizeof host, &port, NULL) != GT_OK)
        return gt_error_set(err, GT_EINVAL, "admin_listen: '%s' is not HOST:PORT",
                            s->admin_listen);
    /* MHD answers headers that outgrow a connection's memory itself, with an
     * HTML page: the memory must hold well over the limit (the read buffer
     * starts at half of it, and each header costs a record besides). */
    if (s->max_header_bytes > s->connection_memory / 4)
        return gt_error_set(err, GT_EINVAL,
                            "max_header_bytes: %ld is over a quarter of connection_memory (%ld)",
                            s->max_header_bytes, s->connection_memory);
    if (log_parse_level(s->log_level) < 0)
        return gt_error_set(err, GT_EINVAL, "log_level: '%s' is not debug|info|warn|error",
                            s->log_level);
    if (!s->db[0])
        return gt_error_set(err, GT_EINVAL, "db: must not be empty");
    if (!s->data_dir[0])
        return gt_error_set(err, GT_EINVAL, "data_dir: must not be empty");
    if (strcmp(s->role, "trainer") != 0 && strcmp(s->role, "sampler") != 0)
        return gt_error_set(err, GT_EINVAL, "role: '%s' is not trainer|sampler", s->role);
    /* A replica without models would pass health checks and serve nothing;
     * a trainer given --models would silently ignore them. */
    if (strcmp(s->role, "sampler") == 0 && !s->models[0] && !s->model_url[0])
        return gt_error_set(err, GT_EINVAL, "role sampler: --models DIR or --model-url URL is"
                            " required");
    if (strcmp(s->role, "trainer") == 0 && (s->models[0] || s->model_url[0]))
        return gt_error_set(err, GT_EINVAL, "%s: only a sampler loads models at start"
                            " (--role sampler); a trainer imports them (POST /v1/models)",
                            s->models[0] ? "models" : "model_url");
    if (strcmp(s->role, "trainer") == 0 && s->token_file[0])
        return gt_error_set(err, GT_EINVAL, "token_file: only a sampler reads a token file"
                            " (--role sampler); a trainer's tokens are in its database (giant"
                            " token create)");
    return GT_OK;
}

void settings_print_help(const char *usage, void *stream)
{
    FILE *f = stream;
    fprintf(f, "%s\n\nSettings (flag > environment > config file > default):\n", usage);
    for (size_t i = 0; i < NDEFS; i++) {
        char fname[64], ename[64], flag[96];
        flag_name(&defs[i], fname, sizeof fname);
        env_name(&defs[i], ename, sizeof ename);
        snprintf(flag, sizeof flag, "--%s %s", fname, defs[i].meta);
        fprintf(f, "  %-28s %s\n  %-28s (default: %s, env: %s)\n", flag, defs[i].help, "",
                defs[i].def[0] ? defs[i].def : "none", ename);
    }
    fprintf(f, "  %-28s %s\n", "-h, --help", "show this help");
}
