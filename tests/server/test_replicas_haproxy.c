/* Sampling replicas behind a real load balancer: Debian's haproxy on
 * loopback, run with deploy/haproxy.cfg itself (only its addresses and
 * admin socket replaced), in front of three replicas and one trainer.
 *
 * A farm client (threads, one connection each, no retries of its own)
 * sends sample requests through haproxy, to the run-scoped and the models
 * route alike, and holds every reply to the bytes the trainer gave for the
 * same request.  First the throughput with 1, 2 and 3 replicas in service
 * (the others in maintenance over the admin socket), then the farm runs
 * while one replica is SIGKILLed and restarted on its port: not one request
 * may fail, and the restarted replica must serve again.  Skipped (77) when
 * haproxy is not installed.
 *
 * GIANT_REPLICA_BENCH_MS (default 1500) is how long each throughput phase
 * runs, GIANT_REPLICA_BENCH_COUNT (default 20) the showers per request:
 * bench/replicas.sh sets both for the figures in deploy/README.md. */
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "gt_clock.h"
#include "replica_fixture.h"
#include "svc_check.h"
#include "svc_harness.h"

#define NREPLICAS 3
#define NBODIES 8
#define NTHREADS 6

/* relative to the working directory haproxy shares with the test: a unix
 * socket's path must fit in 108 bytes */
static char dir[64], sock_path[96];

static long env_long(const char *name, long def)
{
    const char *v = getenv(name);
    return v && atol(v) > 0 ? atol(v) : def;
}

/* One command on haproxy's admin socket; its reply (malloc'ed) or NULL. */
static char *admin(const char *cmd)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, sock_path, strlen(sock_path) + 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    size_t n = strlen(cmd);
    char *out = NULL;
    if (write(fd, cmd, n) == (ssize_t)n && write(fd, "\n", 1) == 1) {
        size_t cap = 1 << 16, len = 0;
        out = malloc(cap);
        ssize_t k;
        while (out && (k = read(fd, out + len, cap - len - 1)) > 0) {
            len += (size_t)k;
            if (len + 1 == cap) {
                char *grown = realloc(out, cap *= 2);
                if (!grown) {
                    free(out);
                    out = NULL;
                    break;
                }
                out = grown;
            }
        }
        if (out)
            out[len] = '\0';
    }
    close(fd);
    return out;
}

/* Column col (0-based) of the "show stat" line of backend samplers and
 * server sv, into out; 0 when there is no such line. */
static int stat_field(const char *sv, int col, char *out, size_t cap)
{
    char *all = admin("show stat");
    int found = 0;
    char want[64];
    snprintf(want, sizeof want, "samplers,%s,", sv);
    for (char *line = all ? strtok(all, "\n") : NULL; line && !found; line = strtok(NULL, "\n")) {
        if (strncmp(line, want, strlen(want)) != 0)
            continue;
        const char *p = line;
        for (int i = 0; i < col && p; i++) {
            p = strchr(p, ',');
            if (p)
                p++;
        }
        if (p) {
            size_t n = strcspn(p, ",");
            snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
            found = 1;
        }
    }
    free(all);
    return found;
}

#define COL_WRETR 15
#define COL_WREDIS 16
#define COL_STATUS 17

/* Waits until server sv of backend samplers reads want ("UP", "MAINT"). */
static int await_status(const char *sv, const char *want, long ms)
{
    char st[64] = "";
    for (long t = 0; t <= ms; t += 50) {
        if (stat_field(sv, COL_STATUS, st, sizeof st) && strcmp(st, want) == 0)
            return 1;
        svc_sleep_ms(50);
    }
    fprintf(stderr, "haproxy: %s is '%s', not %s after %ld ms\n", sv, st, want, ms);
    return 0;
}

/* ---------------------------------------------------------------------------
 * The farm
 * ------------------------------------------------------------------------- */

typedef struct farm {
    char url[64];
    long long run;
    char *bodies[NBODIES];
    void *want[NBODIES];
    size_t want_len[NBODIES];
    long count;                    /* showers per request */
    atomic_int stop;
    atomic_long ok, failed, showers;
    pthread_mutex_t mu;
    char first_failure[512];
} farm;

typedef struct farm_thread {
    farm *f;
    int index;
    pthread_t tid;
} farm_thread;

static void *farm_main(void *p)
{
    farm_thread *ft = p;
    farm *f = ft->f;
    gc_client *c = NULL;
    gt_error err = {0};
    if (gc_open(&c, f->url, &err) != GT_OK) {
        atomic_fetch_add(&f->failed, 1);
        return NULL;
    }
    char run_path[64];
    snprintf(run_path, sizeof run_path, "/v1/runs/%lld/samples", f->run);
    for (long i = ft->index; !atomic_load(&f->stop); i += NTHREADS) {
        int k = (int)(i % NBODIES);
        /* both routes a farm job may use; the same bytes from each */
        const char *path = (i / NBODIES) % 2 ? "/v1/models/tiny/samples" : run_path;
        void *got = NULL;
        size_t len = 0;
        long st = replica_fixture_post(c, path, f->bodies[k], "application/octet-stream", &got,
                                       &len);
        if (st == 200 && len == f->want_len[k] && memcmp(got, f->want[k], len) == 0) {
            atomic_fetch_add(&f->ok, 1);
            atomic_fetch_add(&f->showers, f->count);
        } else {
            atomic_fetch_add(&f->failed, 1);
            pthread_mutex_lock(&f->mu);
            if (!f->first_failure[0])
                snprintf(f->first_failure, sizeof f->first_failure,
                         "%s %s: status %ld, %zu bytes (want 200, %zu): %.200s", path,
                         f->bodies[k], st, len, f->want_len[k],
                         st != 200 && got ? (const char *)got : "");
            pthread_mutex_unlock(&f->mu);
        }
        free(got);
    }
    gc_close(c);
    return NULL;
}

static void farm_start(farm *f, farm_thread *ts)
{
    atomic_store(&f->stop, 0);
    for (int i = 0; i < NTHREADS; i++) {
        ts[i].f = f;
        ts[i].index = i;
        pthread_create(&ts[i].tid, NULL, farm_main, &ts[i]);
    }
}

static void farm_stop(farm *f, farm_thread *ts)
{
    atomic_store(&f->stop, 1);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(ts[i].tid, NULL);
}

/* ---------------------------------------------------------------------------
 * deploy/haproxy.cfg with this test's addresses
 * ------------------------------------------------------------------------- */

/* Replaces every occurrence of from in *text by to; how many. */
static int replace_all(char **text, const char *from, const char *to)
{
    int n = 0;
    size_t lf = strlen(from), lt = strlen(to);
    char *p;
    while ((p = strstr(*text, from)) != NULL) {
        size_t head = (size_t)(p - *text), len = strlen(*text);
        char *s = malloc(len - lf + lt + 1);
        memcpy(s, *text, head);
        memcpy(s + head, to, lt);
        memcpy(s + head + lt, p + lf, len - head - lf + 1);
        free(*text);
        *text = s;
        n++;
    }
    return n;
}

static int write_config(const char *out, int front, int trainer, const int *replicas)
{
    char src[1024];
    const char *root = getenv("GIANT_SOURCE_DIR");
    snprintf(src, sizeof src, "%s/deploy/haproxy.cfg", root ? root : "../../..");
    FILE *f = fopen(src, "rb");
    if (!f)
        return 0;
    char *text = calloc(1, 1 << 16);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    fclose(f);
    text[n] = '\0';
    char to[128];
    int ok = 1;
    snprintf(to, sizeof to, "127.0.0.1:%d", front);
    ok &= replace_all(&text, "127.0.0.1:8080", to) == 1;
    snprintf(to, sizeof to, "127.0.0.1:%d", trainer);
    ok &= replace_all(&text, "127.0.0.1:8090", to) == 2;
    for (int i = 0; i < NREPLICAS; i++) {
        char from[32];
        snprintf(from, sizeof from, "127.0.0.1:%d", 8091 + i);
        snprintf(to, sizeof to, "127.0.0.1:%d", replicas[i]);
        ok &= replace_all(&text, from, to) == 1;
    }
    /* "unix@": haproxy reads a relative path as a host name otherwise */
    snprintf(to, sizeof to, "unix@%s", sock_path);
    ok &= replace_all(&text, "/run/haproxy/giant-admin.sock", to) == 1;
    f = fopen(out, "wb");
    ok &= f && fputs(text, f) >= 0;
    if (f)
        fclose(f);
    free(text);
    return ok;
}

int main(void)
{
    char haproxy[512] = "";
    FILE *w = popen("command -v haproxy", "r");
    if (w) {
        if (!fgets(haproxy, sizeof haproxy, w))
            haproxy[0] = '\0';
        pclose(w);
    }
    haproxy[strcspn(haproxy, "\n")] = '\0';
    if (!haproxy[0])
        check_skip("haproxy is not installed (deploy/install-deps.sh installs Debian's"
                   " haproxy): the load-balancer test did not run");

    snprintf(dir, sizeof dir, "svc-haproxy-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    replica_paths P;
    CHECK_EQ_INT(replica_fixture_paths(&P, dir), 0);
    const char *db = P.db, *data = P.data, *models = P.models, *file = P.file;
    char cfg[320];
    snprintf(sock_path, sizeof sock_path, "%s/admin.sock", dir);
    snprintf(cfg, sizeof cfg, "%s/haproxy.cfg", dir);

    static const char *const extra[] = {"--threads", "2", NULL};
    svc T, R[NREPLICAS], H;
    int r_up[NREPLICAS] = {0}, h_up = 0;
    farm f;
    memset(&f, 0, sizeof f);
    pthread_mutex_init(&f.mu, NULL);
    f.count = env_long("GIANT_REPLICA_BENCH_COUNT", 20);
    long phase_ms = env_long("GIANT_REPLICA_BENCH_MS", 1500);
    farm_thread ts[NTHREADS];
    if (svc_check_start(&T, "the trainer did not start", db, data, extra) != 0)
        return check_finish();
    gt_error err = {0};
    gc_client *t = svc_check_client(&T);
    f.run = replica_fixture_train(t, file);
    CHECK_MSG(f.run > 0, "no tiny run and model file");
    if (check_failures_)
        goto out;
    /* the trainer is the backup server: the models route works there too */
    {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "curl -sf -o /dev/null -X POST -H 'Content-Type:"
                 " application/octet-stream' --data-binary @%s '%s/v1/models?name=tiny'", file,
                 T.url);
        CHECK_EQ_INT(svc_sh("%s", cmd), 0);
    }

    /* the expected bytes, from the trainer itself */
    char run_path[64];
    snprintf(run_path, sizeof run_path, "/v1/runs/%lld/samples", f.run);
    for (int k = 0; k < NBODIES; k++) {
        char body[256];
        snprintf(body, sizeof body, "{\"count\": %ld, \"seed\": %d, \"energy\": {\"dist\":"
                 " \"log-uniform\", \"min_mev\": 1000, \"max_mev\": 1000000}}", f.count, k + 1);
        f.bodies[k] = strdup(body);
        CHECK_EQ_INT(replica_fixture_post(t, run_path, body, "application/octet-stream",
                                          &f.want[k], &f.want_len[k]), 200);
    }

    int ports[NREPLICAS];
    for (int i = 0; i < NREPLICAS; i++) {
        char rdb[320], rdata[320];
        snprintf(rdb, sizeof rdb, "%s/r%d.db", dir, i + 1);
        snprintf(rdata, sizeof rdata, "%s/r%d-data", dir, i + 1);
        if (replica_fixture_start(&R[i], models, "127.0.0.1:0", rdb, rdata) != 0) {
            svc_dump(&R[i]);
            svc_free(&R[i]);
            CHECK_MSG(0, "replica %d did not start", i + 1);
            goto out;
        }
        r_up[i] = 1;
        ports[i] = R[i].port;
    }
    int front = svc_free_port();
    CHECK_MSG(write_config(cfg, front, T.port, ports),
              "deploy/haproxy.cfg lacks an address this test replaces, or has it twice");
    if (check_failures_)
        goto out;
    {
        char *argv[] = {haproxy, "-db", "-f", cfg, NULL};
        CHECK_EQ_INT(svc_spawn(&H, argv), 0);
        h_up = 1;
    }
    for (int i = 0; i < NREPLICAS; i++) {
        char sv[8];
        snprintf(sv, sizeof sv, "r%d", i + 1);
        if (!await_status(sv, "UP", 15000)) {
            CHECK_MSG(0, "haproxy never saw %s up", sv);
            goto out;
        }
    }
    snprintf(f.url, sizeof f.url, "http://127.0.0.1:%d", front);
    if (check_failures_)
        goto out;

    /* throughput with 1, 2 and 3 replicas in service */
    double rate[NREPLICAS];
    for (int n = 1; n <= NREPLICAS; n++) {
        for (int i = 0; i < NREPLICAS; i++) {
            char cmd[64], sv[8];
            snprintf(sv, sizeof sv, "r%d", i + 1);
            snprintf(cmd, sizeof cmd, "%s server samplers/%s", i < n ? "enable" : "disable", sv);
            free(admin(cmd));
            CHECK(await_status(sv, i < n ? "UP" : "MAINT", 15000));
        }
        long ok0 = atomic_load(&f.showers);
        double t0 = gt_clock_s();
        farm_start(&f, ts);
        svc_sleep_ms(phase_ms);
        farm_stop(&f, ts);
        rate[n - 1] = (double)(atomic_load(&f.showers) - ok0) / (gt_clock_s() - t0);
        printf("replicas=%d threads=%d showers_per_request=%ld showers_per_s=%.0f\n", n,
               NTHREADS, f.count, rate[n - 1]);
    }
    CHECK_MSG(atomic_load(&f.failed) == 0, "%ld requests failed: %s", atomic_load(&f.failed),
              f.first_failure);

    /* one replica SIGKILLed and restarted under load: no request fails */
    {
        long ok0 = atomic_load(&f.ok);
        farm_start(&f, ts);
        svc_sleep_ms(400);
        svc_stop(&R[1], SIGKILL, 10000);
        svc_free(&R[1]);
        r_up[1] = 0;
        svc_sleep_ms(300);
        char listen[32], rdb[320], rdata[320];
        snprintf(listen, sizeof listen, "127.0.0.1:%d", ports[1]);
        snprintf(rdb, sizeof rdb, "%s/r2.db", dir);
        snprintf(rdata, sizeof rdata, "%s/r2-data", dir);
        if (replica_fixture_start(&R[1], models, listen, rdb, rdata) == 0) {
            r_up[1] = 1;
            CHECK(await_status("r2", "UP", 15000));
            svc_sleep_ms(700);
        } else {
            svc_dump(&R[1]);
            svc_free(&R[1]);
            CHECK_MSG(0, "replica 2 did not restart on port %d", ports[1]);
        }
        farm_stop(&f, ts);
        long served = atomic_load(&f.ok) - ok0;
        char wretr[32] = "?", wredis[32] = "?";
        stat_field("BACKEND", COL_WRETR, wretr, sizeof wretr);
        stat_field("BACKEND", COL_WREDIS, wredis, sizeof wredis);
        printf("kill and restart: %ld requests served, %ld failed; haproxy retries=%s"
               " redispatches=%s\n", served, atomic_load(&f.failed), wretr, wredis);
        CHECK_MSG(atomic_load(&f.failed) == 0, "%ld requests failed: %s",
                  atomic_load(&f.failed), f.first_failure);
        CHECK(served > 0);
        /* the restarted replica served again */
        if (r_up[1]) {
            gc_client *r2 = NULL;
            json_t *j = NULL;
            CHECK_EQ_INT(gc_open(&r2, R[1].url, &err), GT_OK);
            CHECK_EQ_INT(svc_json(r2, "GET", "/v1/info", NULL, NULL, &j), 200);
            long long req = json_integer_value(
                json_object_get(json_object_get(j, "sampling"), "requests"));
            CHECK_MSG(req > 0, "the restarted replica served no request");
            json_decref(j);
            gc_close(r2);
        }
    }

out:
    gc_close(t);
    if (h_up) {
        /* SIGUSR1: haproxy's soft stop (it exits 0 once its connections
         * are closed; SIGTERM would kill it outright) */
        CHECK_EQ_INT(svc_stop(&H, SIGUSR1, 10000), 0);
        svc_check_done(&H);
    }
    for (int i = 0; i < NREPLICAS; i++) {
        if (!r_up[i])
            continue;
        CHECK_EQ_INT(svc_stop(&R[i], SIGTERM, 30000), 0);
        if (check_failures_)
            svc_dump(&R[i]);
        svc_free(&R[i]);
    }
    CHECK_EQ_INT(svc_stop(&T, SIGTERM, 30000), 0);
    svc_check_done(&T);
    svc_check_cleanup(dir);
    for (int k = 0; k < NBODIES; k++) {
        free(f.bodies[k]);
        free(f.want[k]);
    }
    return check_finish();
}
