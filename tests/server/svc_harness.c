#include "svc_harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void svc_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

const char *svc_binary(void)
{
    static char path[1024];
    const char *dir = getenv("GIANT_BINARY_DIR");
    snprintf(path, sizeof path, "%s/giant", dir ? dir : ".");
    return path;
}

static void *reader_main(void *arg)
{
    svc *s = arg;
    char buf[4096];
    ssize_t n;
    while ((n = read(s->fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
        if (n <= 0)
            continue;
        pthread_mutex_lock(&s->mu);
        if (s->len + (size_t)n + 1 > s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 65536;
            while (cap < s->len + (size_t)n + 1)
                cap *= 2;
            char *p = realloc(s->log, cap);
            if (p) {
                s->log = p;
                s->cap = cap;
            }
        }
        if (s->len + (size_t)n + 1 <= s->cap) {
            memcpy(s->log + s->len, buf, (size_t)n);
            s->len += (size_t)n;
            s->log[s->len] = '\0';
        }
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

int svc_log_has(svc *s, const char *needle)
{
    pthread_mutex_lock(&s->mu);
    int found = s->log && strstr(s->log, needle) != NULL;
    pthread_mutex_unlock(&s->mu);
    return found;
}

int svc_log_wait(svc *s, const char *needle, long ms)
{
    for (long t = 0; t < ms; t += 20) {
        if (svc_log_has(s, needle))
            return 1;
        svc_sleep_ms(20);
    }
    return svc_log_has(s, needle);
}

void svc_dump(svc *s)
{
    pthread_mutex_lock(&s->mu);
    fprintf(stderr, "---- server log ----\n%s\n--------------------\n", s->log ? s->log : "");
    pthread_mutex_unlock(&s->mu);
}

int svc_spawn(svc *s, char *const argv[])
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    s->pid = fork();
    if (s->pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (s->pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    s->fd = fds[0];
    pthread_create(&s->reader, NULL, reader_main, s);
    return 0;
}

int svc_await_listening(svc *s, long ms)
{
    static const char needle[] = "msg=listening addr=127.0.0.1:";
    if (!svc_log_wait(s, needle, ms))
        return 0;
    pthread_mutex_lock(&s->mu);
    s->port = atoi(strstr(s->log, needle) + strlen(needle));
    pthread_mutex_unlock(&s->mu);
    snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
    return 1;
}

int svc_start(svc *s, const char *db, const char *data_dir, const char *const *extra)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = svc_binary();
    argv[n++] = "serve";
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--db";
    argv[n++] = db;
    argv[n++] = "--data-dir";
    argv[n++] = data_dir;
    argv[n++] = "--default-dataset";
    argv[n++] = "0";
    argv[n++] = "--device";
    argv[n++] = "cpu";
    /* the suite trains bf16 runs on any CPU; a test of the refusal passes
     * "--allow-bf16-emulation", "0" in extra, which comes later and wins */
    argv[n++] = "--allow-bf16-emulation";
    argv[n++] = "1";
    for (int i = 0; extra && extra[i] && n < 62; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    return svc_launch(s, (char *const *)argv);
}

int svc_launch(svc *s, char *const argv[])
{
    if (svc_spawn(s, argv) != 0)
        return -1;
    if (!svc_await_listening(s, 60000) || s->port <= 0) {
        svc_stop(s, SIGKILL, 1000);
        return -1;
    }
    return 0;
}

int svc_wait_exit(svc *s, long ms)
{
    if (s->pid <= 0)
        return -1;
    int status = 0, done = 0;
    for (long t = 0; t < ms; t += 20) {
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            done = 1;
            break;
        }
        svc_sleep_ms(20);
    }
    if (!done) {
        /* ms == 0 is a caller's "kill it if it still runs", not a failure */
        if (ms > 0)
            fprintf(stderr, "svc: the server (pid %d) did not exit within %ld ms: killed\n",
                    (int)s->pid, ms);
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &status, 0);
    } else if (WIFSIGNALED(status)) {
        fprintf(stderr, "svc: the server (pid %d) died of signal %d\n", (int)s->pid,
                WTERMSIG(status));
    }
    pthread_join(s->reader, NULL);
    close(s->fd);
    s->pid = 0;
    return done && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int svc_stop(svc *s, int sig, long ms)
{
    if (s->pid <= 0)
        return -1;
    kill(s->pid, sig);
    return svc_wait_exit(s, ms);
}

void svc_free(svc *s)
{
    free(s->log);
    s->log = NULL;
    pthread_mutex_destroy(&s->mu);
}

long svc_json(gc_client *c, const char *method, const char *path, const char *body,
              const char *const *headers, json_t **j)
{
    gc_response r;
    gt_error err = {0};
    if (j)
        *j = NULL;
    if (gc_request(c, method, path, body ? "application/json" : NULL, body,
                   body ? strlen(body) : 0, headers, &r, &err) != GT_OK) {
        fprintf(stderr, "%s %s: %s\n", method, path, err.message);
        return 0;
    }
    if (j)
        *j = json_loadb(r.body, r.len, 0, NULL);
    long st = r.status;
    gc_response_free(&r);
    return st;
}

json_t *svc_wait_run(gc_client *c, long long id, const char *want, long ms)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/runs/%lld", id);
    json_t *run = NULL;
    for (long t = 0; t <= ms; t += 50) {
        json_decref(run);
        svc_json(c, "GET", path, NULL, NULL, &run);
        const char *st = json_string_value(json_object_get(run, "status"));
        if (st && want && strcmp(st, want) == 0)
            return run;
        if (st && !want &&
            (!strcmp(st, "succeeded") || !strcmp(st, "failed") || !strcmp(st, "cancelled")))
            return run;
        svc_sleep_ms(50);
    }
    return run;
}

long long svc_dataset_ready(gc_client *c, const char *body, long ms)
{
    json_t *j = NULL;
    if (svc_json(c, "POST", "/v1/datasets", body, NULL, &j) != 202) {
        json_decref(j);
        return 0;
    }
    long long id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    char path[64];
    snprintf(path, sizeof path, "/v1/datasets/%lld", id);
    for (long t = 0; t <= ms; t += 10) {
        j = NULL;
        svc_json(c, "GET", path, NULL, NULL, &j);
        const char *st = json_string_value(json_object_get(j, "status"));
        int ready = st && strcmp(st, "ready") == 0, pending = st && strcmp(st, "pending") == 0;
        json_decref(j);
        if (!pending)
            return ready ? id : 0;
        svc_sleep_ms(10);
    }
    return 0;
}

char *svc_tiny_config(const char *name, int steps, int log_every, int ckpt_every,
                      const char *dataset_members)
{
    char *text = malloc(4096);
    if (!text)
        return NULL;
    snprintf(text, 4096,
             "{\"name\": \"%s\", %s%s"
             " \"model\": {\"stage1\": {\"trunk\": {\"hidden\": 32, \"blocks\": 1, \"emb_dim\": 8}},"
             "  \"stage2\": {\"trunk\": {\"hidden\": 32, \"blocks\": 1, \"emb_dim\": 8}}},"
             " \"train\": {\"device\": \"cpu\", \"batch\": 32, \"steps\": {\"stage1\": %d,"
             " \"stage2\": %d}, \"warmup_steps\": 2, \"log_every\": %d, \"val_every\": %d,"
             " \"val_size\": 32, \"ckpt_every\": %d},"
             " \"sample\": {\"steps\": 3}}",
             name,
             dataset_members ? dataset_members
                             : "\"dataset\": {\"geometry\": \"dataset_1_photons\","
                               " \"synthetic\": {\"n\": 300, \"seed\": 1}}",
             ",", steps, steps, log_every, ckpt_every, ckpt_every);
    return text;
}

char *svc_with_accept(char *text, int showers, int hidden, int epochs, double cap_quantile)
{
    json_t *root = json_loads(text, 0, NULL);
    free(text);
    if (!root)
        return NULL;
    json_t *acc = json_pack("{s:i, s:i, s:i, s:i}", "showers", showers, "hidden", hidden,
                            "depth", 1, "epochs", epochs);
    if (cap_quantile > 0)
        json_object_set_new(acc, "cap_quantile", json_real(cap_quantile));
    json_object_set_new(json_object_get(root, "model"), "accept", acc);
    text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

int svc_sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* ---------------------------------------------------------------------------
 * The Prometheus text format
 * ------------------------------------------------------------------------- */

double svc_metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

/* A histogram series being read: its labels without le, the last bucket. */
typedef struct prom_hist {
    char labels[512];
    double last_le, last_count;
    int buckets, inf_seen;
} prom_hist;

static int prom_fail(char *why, size_t cap, const char *line, const char *what)
{
    snprintf(why, cap, "%s: '%.*s'", what, (int)strcspn(line, "\n"), line);
    return 0;
}

/* One sample line of the current family (name, type): checks the name,
 * and for a histogram the buckets' order, +Inf and _count. */
static int prom_sample(const char *line, const char *family, const char *type, prom_hist *h,
                       char *why, size_t cap)
{
    size_t nl = strcspn(line, "{ ");
    char name[256], labels[512] = "";
    snprintf(name, sizeof name, "%.*s", (int)nl, line);
    const char *p = line + nl;
    if (*p == '{') {
        /* Label values may hold braces (route templates): skip quoted
         * text, with its backslash escapes. */
        const char *close = p + 1;
        for (int quoted = 0; *close && *close != '\n' && (quoted || *close != '}'); close++) {
            if (quoted && *close == '\\' && close[1])
                close++;
            else if (*close == '"')
                quoted = !quoted;
        }
        if (*close != '}')
            return prom_fail(why, cap, line, "unclosed labels");
        snprintf(labels, sizeof labels, "%.*s", (int)(close - p - 1), p + 1);
        p = close + 1;
    }
    if (*p != ' ')
        return prom_fail(why, cap, line, "no value");
    char *end;
    double v = strtod(p + 1, &end);
    if (end == p + 1 || (*end != '\n' && *end != '\0'))
        return prom_fail(why, cap, line, "bad value");
    size_t fl = strlen(family);
    if (strcmp(type, "histogram") != 0)
        return strcmp(name, family) == 0 ? 1 : prom_fail(why, cap, line, "not of its family");
    if (strncmp(name, family, fl) != 0)
        return prom_fail(why, cap, line, "not of its family");
    const char *suffix = name + fl;
    if (strcmp(suffix, "_bucket") == 0) {
        char *le = strstr(labels, "le=\"");
        if (!le)
            return prom_fail(why, cap, line, "bucket without le");
        double bound = strncmp(le + 4, "+Inf\"", 5) == 0 ? INFINITY : strtod(le + 4, NULL);
        char rest[512];
        snprintf(rest, sizeof rest, "%.*s", (int)(le - labels), labels);
        if (h->buckets && strcmp(rest, h->labels) == 0 && !h->inf_seen) {
            if (!(bound > h->last_le) || v < h->last_count)
                return prom_fail(why, cap, line, "buckets not cumulative in rising le");
        } else {
            if (h->buckets && !h->inf_seen)
                return prom_fail(why, cap, line, "a series ended without le=\"+Inf\"");
            snprintf(h->labels, sizeof h->labels, "%s", rest);
            h->inf_seen = 0;
            h->buckets = 0;
        }
        h->buckets++;
        h->last_le = bound;
        h->last_count = v;
        h->inf_seen = isinf(bound);
        return 1;
    }
    if (strcmp(suffix, "_count") == 0) {
        if (!h->inf_seen || v != h->last_count)
            return prom_fail(why, cap, line, "_count is not the +Inf bucket");
        return 1;
    }
    if (strcmp(suffix, "_sum") == 0)
        return h->inf_seen ? 1 : prom_fail(why, cap, line, "_sum before the +Inf bucket");
    return prom_fail(why, cap, line, "not of its family");
}

int svc_prometheus_check(const char *text, char *why, size_t cap)
{
    char family[256] = "", type[32] = "", seen[8192] = " ";
    prom_hist h = {0};
    int help = 0;
    size_t len = strlen(text);
    if (len == 0 || text[len - 1] != '\n')
        return prom_fail(why, cap, "", "empty or no final newline");
    for (const char *line = text; *line; line += strcspn(line, "\n") + 1) {
        if (strncmp(line, "# HELP ", 7) == 0) {
            size_t n = strcspn(line + 7, " \n");
            snprintf(family, sizeof family, "%.*s", (int)n, line + 7);
            char key[300];
            snprintf(key, sizeof key, " %s ", family);
            if (strstr(seen, key))
                return prom_fail(why, cap, line, "family declared twice");
            size_t used = strlen(seen);
            snprintf(seen + used, sizeof seen - used, "%s ", family);
            help = 1;
            type[0] = '\0';
            memset(&h, 0, sizeof h);
        } else if (strncmp(line, "# TYPE ", 7) == 0) {
            size_t n = strlen(family);
            if (!help || strncmp(line + 7, family, n) != 0 || line[7 + n] != ' ')
                return prom_fail(why, cap, line, "TYPE without its HELP");
            snprintf(type, sizeof type, "%.*s", (int)strcspn(line + 8 + n, "\n"), line + 8 + n);
            if (strcmp(type, "counter") && strcmp(type, "gauge") && strcmp(type, "histogram"))
                return prom_fail(why, cap, line, "unknown type");
        } else if (line[0] == '#' || line[0] == '\n') {
            return prom_fail(why, cap, line, "stray comment or empty line");
        } else {
            if (!type[0])
                return prom_fail(why, cap, line, "sample before HELP and TYPE");
            if (!prom_sample(line, family, type, &h, why, cap))
                return 0;
        }
    }
    return 1;
}

int svc_openmetrics_check(const char *text, char *why, size_t cap)
{
    size_t len = strlen(text);
    if (len < 6 || strcmp(text + len - 6, "# EOF\n") != 0 || strstr(text, "# EOF\n") != text + len - 6)
        return prom_fail(why, cap, "", "no final # EOF, or something after it");
    /* the classic text back, into a buffer of the same size plus the
     * suffixes put back */
    size_t cap2 = 2 * len + 1;
    char *classic = malloc(cap2), counter[256] = "";
    if (!classic)
        return prom_fail(why, cap, "", "out of memory");
    size_t o = 0;
    int ok = 1;
    for (const char *line = text; *line && ok; line += strcspn(line, "\n") + 1) {
        size_t n = strcspn(line, "\n");
        if (strncmp(line, "# EOF", 5) == 0)
            break;
        int help = strncmp(line, "# HELP ", 7) == 0, type = strncmp(line, "# TYPE ", 7) == 0;
        if (help || type) {
            const char *name = line + 7;
            size_t nlen = strcspn(name, " \n");
            if (type && strncmp(name + nlen, " counter", 8) == 0) {
                if (nlen > 6 && strncmp(name + nlen - 6, "_total", 6) == 0)
                    ok = prom_fail(why, cap, line, "a counter family named with _total");
                snprintf(counter, sizeof counter, "%.*s", (int)nlen, name);
            } else if (type) {
                counter[0] = '\0';
            }
            /* the HELP's family is a counter when the next line says so */
            const char *next = line + n + 1;
            int is_counter = type ? counter[0] != '\0'
                                  : strncmp(next, "# TYPE ", 7) == 0 &&
                                        strncmp(next + 7, name, nlen) == 0 &&
                                        strncmp(next + 7 + nlen, " counter", 8) == 0;
            o += (size_t)snprintf(classic + o, cap2 - o, "%.7s%.*s%s", line, (int)nlen, name,
                                  is_counter ? "_total" : "");
            for (const char *p = name + nlen; p < line + n; p++) {
                if (help && *p == '"' && p[-1] != '\\')
                    ok = prom_fail(why, cap, line, "an unescaped quote in a HELP");
                if (help && *p == '\\' && p[1] == '"')
                    continue;   /* \" back to " */
                classic[o++] = *p;
            }
            classic[o++] = '\n';
        } else {
            if (counter[0] && line[0] != '#' &&
                (strncmp(line, counter, strlen(counter)) != 0 ||
                 strncmp(line + strlen(counter), "_total", 6) != 0))
                ok = prom_fail(why, cap, line, "a counter's sample without _total");
            memcpy(classic + o, line, n);
            o += n;
            classic[o++] = '\n';
        }
    }
    classic[o] = '\0';
    if (ok)
        ok = svc_prometheus_check(classic, why, cap);
    free(classic);
    return ok;
}

/* ---------------------------------------------------------------------------
 * What several service tests share
 * ------------------------------------------------------------------------- */

const char *svc_str(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

long long svc_num(json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

const char *svc_ecode(json_t *j)
{
    return svc_str(json_object_get(j, "error"), "code");
}

const char *svc_efield(json_t *j)
{
    return svc_str(json_object_get(j, "error"), "field");
}

json_t *svc_wait_dataset(gc_client *c, long long id, long ms)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/datasets/%lld", id);
    json_t *j = NULL;
    for (long t = 0; t < ms; t += 50) {
        json_decref(j);
        j = NULL;
        svc_json(c, "GET", path, NULL, NULL, &j);
        const char *st = svc_str(j, "status");
        if (st && strcmp(st, "pending") != 0)
            break;
        svc_sleep_ms(50);
    }
    return j;
}

int svc_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

void svc_remove_tree(const char *dir)
{
    if (svc_sh("rm -rf '%s'", dir) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}
