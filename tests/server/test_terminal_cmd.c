/* test_terminal_cmd: the terminal commands end to end, as a user runs them.
 *
 * giant train on a pseudo-terminal (log records muted, and with --verbose
 * never inside the bar's line); giant migrate --help; then a real service
 * with --max-showers 50: a sample request over it is 422 too_many_showers
 * with the limit, row0 chunks equal one request, `giant sample --server
 * --n 120` splits the work and writes the same showers as one request (to
 * a second server without the cap), giant submit --key says when the run
 * already existed, giant watch draws its bar, and the event stream, the
 * metric history and the config echo write the same shortest numbers. */
#define _XOPEN_SOURCE 700      /* posix_openpt, grantpt, unlockpt, ptsname */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "calo_h5.h"
#include "check.h"
#include "svc_check.h"
#include "svc_harness.h"

static char dir[64], db[128], data[128];

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* ---------------------------------------------------------------------------
 * giant train on a pseudo-terminal
 * ------------------------------------------------------------------------- */

/* Runs giant train CONFIG --db DB [--verbose] with stderr on a pty; its
 * output (malloc'ed) or NULL. */
static char *train_on_pty(const char *config, const char *dbfile, int verbose)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) || unlockpt(m))
        return NULL;
    const char *slave = ptsname(m);
    pid_t pid = fork();
    if (pid == 0) {
        int s = open(slave, O_RDWR | O_NOCTTY);
        int null = open("/dev/null", O_WRONLY);
        dup2(s, 2);
        dup2(null, 1);
        close(m);
        execl(svc_binary(), "giant", "train", config, "--db", dbfile, "--data-dir", data,
              verbose ? "--verbose" : "--db", dbfile, (char *)NULL);
        _exit(127);
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        ssize_t n = read(m, buf + len, 4096);
        if (n > 0)
            len += (size_t)n;
        else if (n < 0 && errno == EINTR)
            continue;
        else
            break;             /* EIO: every writer of the slave is gone */
    }
    buf[len] = '\0';
    close(m);
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return buf;
}

static void test_train_tty(void)
{
    char cfg[256], db1[256], db2[256];
    snprintf(cfg, sizeof cfg, "%s/tty.json", dir);
    snprintf(db1, sizeof db1, "%s/tty1.db", dir);
    snprintf(db2, sizeof db2, "%s/tty2.db", dir);
    char *text = svc_tiny_config("tty", 12, 2, 6, NULL);
    CHECK(write_text(cfg, text) == 0);
    free(text);

    char *out = train_on_pty(cfg, db1, 0);
    CHECK(out != NULL);
    if (out) {
        CHECK_MSG(strstr(out, "level=info") == NULL, "%s", out);   /* muted */
        CHECK_MSG(strstr(out, "100%") != NULL, "%s", out);
        CHECK(strstr(out, "ETA") != NULL);
    }
    free(out);

    out = train_on_pty(cfg, db2, 1);
    CHECK(out != NULL);
    if (out) {
        CHECK_MSG(strstr(out, "level=info msg=run") != NULL, "%s", out);
        /* every record starts a line: after a newline, or after the bar's
         * line was cleared (\r, erase to the end of the line) */
        int records = 0;
        for (const char *p = strstr(out, "ts="); p; p = strstr(p + 1, "ts=")) {
            records++;
            int line_start = p == out || p[-1] == '\n' ||
                             (p - out >= 4 && memcmp(p - 4, "\r\033[K", 4) == 0);
            CHECK_MSG(line_start, "a log record inside a line: ...%.60s", p > out + 40 ? p - 40 : out);
        }
        CHECK(records >= 2);
    }
    free(out);
}

static void test_migrate_help(void)
{
    const char *g = svc_binary();
    CHECK_EQ_INT(svc_sh("%s migrate --help > %s/mh.txt 2>&1", g, dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q -- '--db FILE' %s/mh.txt", dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q -- '--config FILE' %s/mh.txt", dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q -- '--log-level' %s/mh.txt", dir), 0);
    /* the service's settings are not its options */
    CHECK_EQ_INT(svc_sh("grep -q -e '--listen' -e '--max-showers' -e '--threads' %s/mh.txt", dir), 1);
}

/* ---------------------------------------------------------------------------
 * The service
 * ------------------------------------------------------------------------- */

static svc S;

/* giant submit --key twice: the second says the run already existed. */
static long long test_submit_key(void)
{
    const char *g = svc_binary();
    char cfg[256];
    snprintf(cfg, sizeof cfg, "%s/run.json", dir);
    char *text = svc_tiny_config("term", 12, 2, 6, NULL);
    CHECK(write_text(cfg, text) == 0);
    free(text);
    CHECK_EQ_INT(svc_sh("%s submit %s --key term-1 --server %s > %s/id1 2> %s/sub1", g, cfg, S.url,
                    dir, dir), 0);
    CHECK_EQ_INT(svc_sh("%s submit %s --key term-1 --server %s > %s/id2 2> %s/sub2", g, cfg, S.url,
                    dir, dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q '^run [0-9]* [a-z]*$' %s/sub1 && ! grep -q 'already' %s/sub1", dir, dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q 'already existed' %s/sub2", dir), 0);
    CHECK_EQ_INT(svc_sh("cmp -s %s/id1 %s/id2", dir, dir), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/id1", dir);
    FILE *f = fopen(path, "r");
    long long id = 0;
    CHECK(f && fscanf(f, "%lld", &id) == 1 && id > 0);
    if (f)
        fclose(f);
    return id;
}

/* POST .../samples as binary; decoded into *s (status returned). */
static long sample_binary(gc_client *c, long long run, const char *body, gc_showers *s)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/runs/%lld/samples", run);
    const char *h[] = {"Accept: application/octet-stream", NULL};
    gc_response r;
    gt_error err = {0};
    memset(s, 0, sizeof *s);
    if (gc_request(c, "POST", path, "application/json", body, strlen(body), h, &r, &err))
        return 0;
    long st = r.status;
    if (st == 200)
        CHECK_EQ_INT(gc_showers_decode(r.body, r.len, s, &err), GT_OK);
    gc_response_free(&r);
    return st;
}

static void expect_error(gc_client *c, long long run, const char *body, const char *accept,
                         long status, const char *code, const char *field, long long limit)
{
    char path[64], acc[96];
    snprintf(path, sizeof path, "/v1/runs/%lld/samples", run);
    snprintf(acc, sizeof acc, "Accept: %s", accept);
    const char *h[] = {acc, NULL};
    json_t *j = NULL;
    long st = svc_json(c, "POST", path, body, h, &j);
    json_t *e = json_object_get(j, "error");
    const char *got = json_string_value(json_object_get(e, "code"));
    const char *f = json_string_value(json_object_get(e, "field"));
    CHECK_MSG(st == status && got && strcmp(got, code) == 0, "%s: %ld %s", body, st,
              got ? got : "-");
    CHECK_MSG(f && strcmp(f, field) == 0, "%s: field %s", body, f ? f : "-");
    if (limit)
        CHECK_EQ_INT(json_integer_value(json_object_get(e, "limit")), limit);
    else
        CHECK(json_object_get(e, "limit") == NULL);
    json_decref(j);
}

static void test_limits_and_row0(gc_client *c, long long run)
{
    const char *bin = "application/octet-stream";
    expect_error(c, run, "{\"count\": 51}", bin, 422, "too_many_showers", "count", 50);
    expect_error(c, run, "{\"count\": 11}", "application/json", 422, "too_many_showers",
                 "count", 10);
    expect_error(c, run, "{\"count\": 2, \"row0\": -1}", bin, 422, "validation_failed", "row0", 0);
    expect_error(c, run, "{\"count\": 2, \"row0\": 1.5}", bin, 422, "validation_failed", "row0", 0);
    expect_error(c, run, "{\"count\": 2, \"row0\": \"3\"}", bin, 422, "validation_failed", "row0",
                 0);
    expect_error(c, run, "{\"count\": 2, \"row0\": 2199023255552}", bin, 422, "validation_failed",
                 "row0", 0);

    /* rows [0, 40) at once and in three requests */
    gc_showers all, part;
    CHECK_EQ_INT(sample_binary(c, run, "{\"count\": 40, \"seed\": 9}", &all), 200);
    static const long long cuts[][2] = {{0, 15}, {15, 15}, {30, 10}};
    for (int k = 0; k < 3 && all.n == 40; k++) {
        char body[128];
        snprintf(body, sizeof body, "{\"count\": %lld, \"seed\": 9, \"row0\": %lld}", cuts[k][1],
                 cuts[k][0]);
        CHECK_EQ_INT(sample_binary(c, run, body, &part), 200);
        long long r0 = cuts[k][0], n = cuts[k][1];
        CHECK(part.n == n && part.voxels == all.voxels);
        if (part.n == n) {
            CHECK(memcmp(part.energies, all.energies + r0, (size_t)n * 4) == 0);
            CHECK(memcmp(part.showers, all.showers + r0 * all.voxels,
                         (size_t)(n * all.voxels) * 4) == 0);
        }
        gc_showers_free(&part);
    }
    /* explicit energies at row0: the same rows */
    if (all.n == 40) {
        char body[512];
        int o = snprintf(body, sizeof body, "{\"seed\": 9, \"row0\": 30, \"energies\": [");
        for (int i = 30; i < 40; i++)
            o += snprintf(body + o, sizeof body - (size_t)o, "%s%.9g", i > 30 ? ", " : "",
                          (double)all.energies[i]);
        snprintf(body + o, sizeof body - (size_t)o, "]}");
        CHECK_EQ_INT(sample_binary(c, run, body, &part), 200);
        CHECK(part.n == 10 && memcmp(part.showers, all.showers + 30 * all.voxels,
                                     (size_t)(10 * all.voxels) * 4) == 0);
        gc_showers_free(&part);
    }
    gc_showers_free(&all);
}

/* giant sample --server over the cap: several requests, one file. */
static void test_sample_chunked(long long run)
{
    const char *g = svc_binary();
    CHECK_EQ_INT(svc_sh("%s sample --server %s --run %lld --n 120 --seed 5 -o %s/chunked.h5"
                    " 2> %s/sample.txt", g, S.url, run, dir, dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q '100%%' %s/sample.txt", dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q 'in 3 requests of at most 50' %s/sample.txt", dir), 0);
}

/* The first metric values of the event stream, as the stream wrote them. */
typedef struct sse_numbers {
    int n;
    long long step[64];
    char loss[64][32];
} sse_numbers;

static int on_event(void *user, long long id, const char *event, const char *dat)
{
    (void)id;
    sse_numbers *s = user;
    const char *p = strstr(dat, "\"loss\":");
    if (strcmp(event, "metric") == 0 && strstr(dat, "\"energy\"") && p && s->n < 64) {
        json_t *j = json_loads(dat, 0, NULL);
        s->step[s->n] = json_integer_value(json_object_get(j, "step"));
        json_decref(j);
        p += 7;
        size_t k = strcspn(p, ",}");
        snprintf(s->loss[s->n], sizeof s->loss[0], "%.*s", (int)k, p);
        s->n++;
    }
    return 0;
}

static void test_numbers(gc_client *c, long long run)
{
    sse_numbers s = {0};
    gt_error err = {0};
    CHECK_EQ_INT(gc_watch_events(c, run, 0, on_event, &s, &err), GT_OK);
    CHECK(s.n >= 3);
    char path[128];
    snprintf(path, sizeof path, "/v1/runs/%lld/metrics?name=loss&max_points=10000", run);
    gc_response r;
    CHECK_EQ_INT(gc_request(c, "GET", path, NULL, NULL, 0, NULL, &r, &err), GT_OK);
    json_t *j = json_loadb(r.body, r.len, 0, NULL);
    json_t *series = json_object_get(j, "series"), *points = NULL;
    size_t i;
    json_t *one;
    json_array_foreach(series, i, one)
        if (strcmp(json_string_value(json_object_get(one, "stage")), "energy") == 0)
            points = json_object_get(one, "points");
    CHECK((int)json_array_size(points) == s.n);
    for (int k = 0; k < s.n && k < (int)json_array_size(points); k++) {
        json_t *p = json_array_get(points, (size_t)k);
        CHECK_EQ_INT(json_integer_value(json_array_get(p, 0)), s.step[k]);
        /* the same number, and the same digits in both replies */
        CHECK_MSG(json_real_value(json_array_get(p, 1)) == strtod(s.loss[k], NULL), "%s vs %.17g",
                  s.loss[k], json_real_value(json_array_get(p, 1)));
        char needle[3 * sizeof s.loss[0] + 8];   /* room for three whole numbers */
        snprintf(needle, sizeof needle, ",%s,%s,%s]", s.loss[k], s.loss[k], s.loss[k]);
        CHECK_MSG(strstr(r.body, needle) != NULL, "%s not in the history", needle);
    }
    json_decref(j);
    gc_response_free(&r);

    /* the config echo: 0.1, not 0.10000000000000001 */
    snprintf(path, sizeof path, "/v1/runs/%lld", run);
    CHECK_EQ_INT(gc_request(c, "GET", path, NULL, NULL, 0, NULL, &r, &err), GT_OK);
    CHECK_MSG(strstr(r.body, "\"val_fraction\":0.1}") != NULL, "%s", r.body);
    CHECK_MSG(strstr(r.body, "\"lr\":0.001,") != NULL, "%s", r.body);
    CHECK_MSG(strstr(r.body, "0000000000") == NULL && strstr(r.body, "9999999999") == NULL,
              "%s", r.body);
    gc_response_free(&r);
}

static void test_watch(long long run)
{
    const char *g = svc_binary();
    CHECK_EQ_INT(svc_sh("%s watch %lld --server %s 2> %s/watch.txt", g, run, S.url, dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q '100%%' %s/watch.txt", dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q 'ETA' %s/watch.txt", dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q 'loss' %s/watch.txt", dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q 'status succeeded' %s/watch.txt", dir), 0);
}

/* The chunked file equals one request for all 120 (a server without the
 * cap, on the same database). */
static void test_chunked_equals_one(long long run)
{
    svc T;
    const char *extra[] = {"--max-showers", "500", NULL};
    if (svc_check_start(&T, "second server did not start", db, data, extra) != 0)
        return;
    gc_client *c = NULL;
    gt_error err = {0};
    gc_showers one;
    CHECK_EQ_INT(gc_open(&c, T.url, &err), GT_OK);
    CHECK_EQ_INT(sample_binary(c, run, "{\"count\": 120, \"seed\": 5}", &one), 200);
    gc_close(c);
    char path[256];
    snprintf(path, sizeof path, "%s/chunked.h5", dir);
    float *e = NULL, *sh_ = NULL;
    int64_t n = 0;
    CHECK_EQ_INT(calo_h5_read_all(path, NULL, &e, &sh_, &n, &err), GT_OK);
    CHECK_EQ_INT(n, 120);
    if (n == 120 && one.n == 120) {
        CHECK(memcmp(e, one.energies, 120 * 4) == 0);
        CHECK(memcmp(sh_, one.showers, (size_t)(120 * one.voxels) * 4) == 0);
    }
    free(e);
    free(sh_);
    gc_showers_free(&one);
    /* and through the command's one-request path, the same showers */
    CHECK_EQ_INT(svc_sh("%s sample --server %s --run %lld --n 120 --seed 5 -o %s/one.h5 2> /dev/null",
                    svc_binary(), T.url, run, dir), 0);
    snprintf(path, sizeof path, "%s/one.h5", dir);
    float *e2 = NULL, *s2 = NULL;
    int64_t n2 = 0;
    CHECK_EQ_INT(calo_h5_read_all(path, NULL, &e2, &s2, &n2, &err), GT_OK);
    char p1[256];
    snprintf(p1, sizeof p1, "%s/chunked.h5", dir);
    CHECK_EQ_INT(calo_h5_read_all(p1, NULL, &e, &sh_, &n, &err), GT_OK);
    CHECK(n2 == 120 && n == 120 && memcmp(e, e2, 120 * 4) == 0);
    free(e);
    free(sh_);
    free(e2);
    free(s2);
    svc_check_stop(&T);
}

/* giant sample on this machine (no server): --gzip 0, 1, 4 and the default
 * write the same showers, deflated or not; the default is level 1 (the
 * same file bytes); one batch or four give the same file bytes; a level
 * outside 0..9 is a usage error; the time line names every part. */
static void test_sample_gzip(long long run)
{
    const char *g = svc_binary();
    const char *level[] = {"0", "1", "4", NULL};
    for (int i = 0; i < 4; i++) {
        char opt[32] = "";
        if (level[i])
            snprintf(opt, sizeof opt, "--gzip %s", level[i]);
        CHECK_EQ_INT(svc_sh("%s sample --db %s --run %lld --n 60 --batch 16 --seed 5 %s -o %s/z%d.h5"
                            " 2> %s/z%d.txt",
                            g, db, run, opt, dir, i, dir, i),
                     0);
        CHECK_EQ_INT(svc_sh("grep -q 'writing [0-9.]* s (of it compressing [0-9.]* s; beside the sampler, waited for [0-9.]* s)' %s/z%d.txt",
                            dir, i),
                     0);
        CHECK_EQ_INT(svc_sh("grep -q 'the networks and copies back [0-9.]* s' %s/z%d.txt", dir, i),
                     0);
    }
    gt_error err = {0};
    float *e[4] = {NULL}, *sh[4] = {NULL};
    int64_t n[4] = {0};
    long long bytes[4] = {0};
    char p0[256];
    for (int i = 0; i < 4; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/z%d.h5", dir, i);
        CHECK_EQ_INT(calo_h5_read_all(path, NULL, &e[i], &sh[i], &n[i], &err), GT_OK);
        struct stat st;
        if (stat(path, &st) == 0)
            bytes[i] = (long long)st.st_size;
    }
    calo_h5_reader r;
    int voxels = 0;
    snprintf(p0, sizeof p0, "%s/z0.h5", dir);
    if (calo_h5_open(&r, p0, NULL, &err) == GT_OK) {
        voxels = r.n_voxels;
        calo_h5_close(&r);
    }
    CHECK(voxels > 0);
    for (int i = 1; i < 4; i++)
        CHECK_MSG(n[i] == 60 && n[0] == 60 && memcmp(e[0], e[i], 60 * 4) == 0 &&
                      memcmp(sh[0], sh[i], (size_t)60 * (size_t)voxels * 4) == 0,
                  "--gzip: file %d holds other showers", i);
    /* dataset-2 showers are mostly empty voxels: deflated, far smaller */
    CHECK_MSG(bytes[1] > 0 && bytes[2] > 0 && bytes[1] * 2 < bytes[0] && bytes[2] * 2 < bytes[0],
              "file sizes: --gzip 0 %lld, 1 %lld, 4 %lld", bytes[0], bytes[1], bytes[2]);
    CHECK_EQ_INT(svc_sh("cmp -s %s/z1.h5 %s/z3.h5", dir, dir), 0); /* the default: level 1 */
    /* one batch of 60 (nothing written beside the sampling) against 4 of
     * 16 (each written while the next is sampled): the same file bytes */
    CHECK_EQ_INT(svc_sh("%s sample --db %s --run %lld --n 60 --batch 60 --seed 5 --gzip 1 "
                        "-o %s/one.h5 2> %s/one.txt && cmp -s %s/z1.h5 %s/one.h5",
                        g, db, run, dir, dir, dir, dir),
                 0);
    CHECK_MSG(bytes[2] < bytes[1], "--gzip 4 (%lld bytes) not smaller than 1 (%lld)", bytes[2],
              bytes[1]);
    for (int i = 0; i < 4; i++) {
        free(e[i]);
        free(sh[i]);
    }
    CHECK_EQ_INT(svc_sh("%s sample --db %s --run %lld --n 4 --gzip 10 -o %s/bad.h5 2> %s/bad.txt",
                        g, db, run, dir, dir),
                 2);
    CHECK_EQ_INT(svc_sh("grep -q 'gzip must be a deflate level' %s/bad.txt", dir), 0);
    /* --temperature: the run's own value gives the run's bytes, another
     * value other showers, and one out of (0, 2] is a usage error */
    CHECK_EQ_INT(svc_sh("%s sample --db %s --run %lld --n 60 --batch 16 --seed 5 --temperature 1 "
                        "-o %s/t1.h5 2> /dev/null && cmp -s %s/z1.h5 %s/t1.h5",
                        g, db, run, dir, dir, dir),
                 0);
    CHECK_EQ_INT(svc_sh("%s sample --db %s --run %lld --n 60 --batch 16 --seed 5 --temperature 0.5 "
                        "-o %s/t05.h5 2> /dev/null && cmp -s %s/z1.h5 %s/t05.h5",
                        g, db, run, dir, dir, dir),
                 1);
    CHECK_EQ_INT(svc_sh("%s sample --db %s --run %lld --n 4 --temperature 0 -o %s/bad.h5 "
                        "2> %s/bad.txt && grep -q 'temperature must be in' %s/bad.txt",
                        g, db, run, dir, dir, dir),
                 2);
}

/* giant sample whose writing fails in its writing thread (a file size
 * limit, with SIGXFSZ ignored, standing for a full disk; 1 000 showers in
 * batches of 100 fill the writer's 640-row stage while batch 7 is being
 * written): a clean failure, exit 1 with the reason, no HDF5 error dump
 * and no crash at exit (libhdf5's exit handler once crashed on the half
 * closed file). */
static void test_sample_disk_full(long long run)
{
    const char *g = svc_binary();
    CHECK_EQ_INT(svc_sh("sh -c \"trap '' XFSZ; ulimit -f 100; exec %s sample --db %s --run %lld "
                        "--n 1000 --batch 100 --steps 2 -o %s/full.h5\" 2> %s/full.txt",
                        g, db, run, dir, dir),
                 1);
    CHECK_EQ_INT(svc_sh("grep -q 'chunk write failed (disk full?)' %s/full.txt", dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q -e HDF5-DIAG -e Sanitizer -e Segmentation %s/full.txt", dir),
                 1);
}

int main(void)
{
    snprintf(dir, sizeof dir, "svc-term-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(db, sizeof db, "%s/test.db", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    test_migrate_help();
    test_train_tty();

    const char *extra[] = {"--max-showers", "50", "--max-json-showers", "10", NULL};
    if (svc_check_start(&S, "server did not start", db, data, extra) != 0)
        return check_finish();
    gc_client *c = svc_check_client(&S);
    long long run = test_submit_key();
    json_t *r = svc_wait_run(c, run, "succeeded", 120000);
    const char *st = json_string_value(json_object_get(r, "status"));
    CHECK_MSG(st && strcmp(st, "succeeded") == 0, "run %lld: %s", run, st ? st : "?");
    json_decref(r);
    test_limits_and_row0(c, run);
    test_sample_chunked(run);
    test_numbers(c, run);
    test_watch(run);
    gc_close(c);
    svc_check_stop(&S);
    test_chunked_equals_one(run);
    test_sample_gzip(run);
    test_sample_disk_full(run);
    svc_check_cleanup(dir);
    return check_finish();
}
