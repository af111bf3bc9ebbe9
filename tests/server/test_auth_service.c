/* Tokens, roles and rate limits on the real service (giant serve as a child
 * process, on loopback):
 *   - giant token create / list / revoke on the database, offline;
 *   - every protected route (the table below, checked against the router)
 *     refuses a missing, malformed, unknown, revoked and expired token (401
 *     unauthorized, WWW-Authenticate) and a token of a role it does not take
 *     (403 forbidden), and lets the roles it takes through
 *     (--require-tokens 1, --public-metrics 0); the ingest routes of Slurm
 *     jobs refuse every role's token (401: they take a job's own);
 *   - /v1/tokens: an admin creates, lists and revokes tokens over HTTP;
 *     last_used_at is written; the request log names the token's id only;
 *   - a token sent on loopback is checked even when none is required;
 *   - --rate-limit: 429 rate_limited with Retry-After, then success after
 *     waiting that long; the client library waits and retries on its own;
 *   - --max-queued-runs-per-token: 429 past a token's queued runs;
 *   - a non-loopback address is refused at start without a usable token, and
 *     taken with one; /metrics is public by default.
 * No wait here is shorter than what it waits for: the rate limit is 12 a
 * minute (one each 5 s), so a burst of requests on a slow machine still
 * meets it. */
#include "check.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "auth.h"
#include "giant_client.h"
#include "http.h"
#include "routes.h"
#include "svc_check.h"
#include "svc_harness.h"

static char dir[64], db[128], data[128];

/* ---------------------------------------------------------------------------
 * Raw requests, with the headers the client library does not keep
 * ------------------------------------------------------------------------- */

typedef struct reply {
    long status;
    char www[256];             /* WWW-Authenticate */
    char retry[16];            /* Retry-After */
    char body[4096];
    size_t len;
} reply;

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    reply *r = arg;
    size_t b = size * n, room = sizeof r->body - 1 - r->len;
    memcpy(r->body + r->len, p, b < room ? b : room);
    r->len += b < room ? b : room;
    r->body[r->len] = '\0';
    return b;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    reply *r = arg;
    gc_header_value(p, size * n, "WWW-Authenticate", r->www, sizeof r->www);
    gc_header_value(p, size * n, "Retry-After", r->retry, sizeof r->retry);
    return size * n;
}

/* auth: the whole Authorization value ("Bearer gt_...") or NULL. */
static reply request(const char *url, const char *method, const char *path, const char *auth,
                     const char *body)
{
    reply r;
    memset(&r, 0, sizeof r);
    char full[512], ah[400];
    snprintf(full, sizeof full, "%s%s", url, path);
    CURL *h = curl_easy_init();
    struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
    if (auth) {
        snprintf(ah, sizeof ah, "Authorization: %s", auth);
        hl = curl_slist_append(hl, ah);
    }
    if (body)
        hl = curl_slist_append(hl, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, full);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    return r;
}

static int has_code(const reply *r, const char *code)
{
    char want[64];
    snprintf(want, sizeof want, "\"code\":\"%s\"", code);
    return strstr(r->body, want) != NULL;
}

/* ---------------------------------------------------------------------------
 * The token command
 * ------------------------------------------------------------------------- */

/* Runs giant token ARGS... --db db; returns the exit status and leaves the
 * output (stdout and stderr) in out. */
static int token_cmd(char *out, size_t cap, const char *a1, const char *a2, const char *a3,
                     const char *a4, const char *a5, const char *a6, const char *a7)
{
    const char *argv[16] = {svc_binary(), "token", a1, a2, a3, a4, a5, a6, a7, NULL};
    int n = 2;
    while (argv[n])
        n++;
    argv[n++] = "--db";
    argv[n++] = db;
    argv[n] = NULL;
    svc p;
    if (svc_spawn(&p, (char *const *)argv) != 0)
        return -1;
    int rc = svc_wait_exit(&p, 60000);
    snprintf(out, cap, "%s", p.log ? p.log : "");
    svc_free(&p);
    return rc;
}

/* The token a create printed: the line that is nothing but gt_ and hex. */
static int token_of(const char *out, char tok[128])
{
    for (const char *p = out; (p = strstr(p, "gt_")); p++) {
        if (p != out && p[-1] != '\n')
            continue;
        size_t n = strspn(p + 3, "0123456789abcdef");
        if (n == 72 && (p[75] == '\n' || p[75] == '\0')) {
            snprintf(tok, 128, "%.75s", p);
            return 1;
        }
    }
    return 0;
}

typedef struct tokens {
    char admin[128], trainer[128], sampler[128], reader[128], revoked[128], expired[128];
} tokens;

static void create(const char *name, const char *role, const char *expires, char tok[128])
{
    char out[8192];
    int rc = expires ? token_cmd(out, sizeof out, "create", "--name", name, "--role", role,
                                 "--expires", expires)
                     : token_cmd(out, sizeof out, "create", "--name", name, "--role", role, NULL,
                                 NULL);
    CHECK_MSG(rc == 0 && token_of(out, tok), "token create %s: %d\n%s", name, rc, out);
}

static void test_token_cli(tokens *t)
{
    char out[16384];
    create("admin1", "admin", NULL, t->admin);
    create("trainer1", "trainer", NULL, t->trainer);
    create("sampler1", "sampler", NULL, t->sampler);
    create("reader1", "reader", NULL, t->reader);
    create("gone", "reader", NULL, t->revoked);
    create("old", "admin", "2020-01-01", t->expired);
    CHECK_EQ_INT(token_cmd(out, sizeof out, "revoke", "gone", NULL, NULL, NULL, NULL, NULL), 0);
    /* mistakes: usage 2, a taken name or bad role 2, an unknown token 1 */
    CHECK_EQ_INT(token_cmd(out, sizeof out, "create", "--name", "admin1", "--role", "reader",
                           NULL, NULL), 2);
    CHECK_MSG(strstr(out, "exists"), "%s", out);
    CHECK_EQ_INT(token_cmd(out, sizeof out, "create", "--name", "x", "--role", "write", NULL,
                           NULL), 2);
    CHECK_EQ_INT(token_cmd(out, sizeof out, "create", "--name", "x", "--role", "reader",
                           "--ttl", "5weeks"), 2);
    CHECK_EQ_INT(token_cmd(out, sizeof out, "create", "--role", "reader", NULL, NULL, NULL,
                           NULL), 2);
    CHECK_EQ_INT(token_cmd(out, sizeof out, "revoke", "nobody", NULL, NULL, NULL, NULL, NULL), 1);
    CHECK_EQ_INT(token_cmd(out, sizeof out, "frobnicate", NULL, NULL, NULL, NULL, NULL, NULL), 2);
    /* list: every token with its status, never a secret */
    CHECK_EQ_INT(token_cmd(out, sizeof out, "list", NULL, NULL, NULL, NULL, NULL, NULL), 0);
    CHECK_MSG(strstr(out, "admin1") && strstr(out, "revoked") && strstr(out, "expired") &&
                  strstr(out, "sampler1"), "%s", out);
    const char *all[] = {t->admin, t->trainer, t->sampler, t->reader, t->revoked, t->expired};
    for (int i = 0; i < 6; i++)
        CHECK_MSG(all[i][0] && !strstr(out, all[i] + 11), "token list shows a secret:\n%s", out);
}

/* ---------------------------------------------------------------------------
 * Every protected route against every kind of token
 * ------------------------------------------------------------------------- */

enum { ADMIN = 1, TRAINER = 2, SAMPLER = 4, READER = 8 };

static const struct {
    const char *method, *path, *body;
    int roles;                 /* besides admin */
} routes[] = {
    {"GET", "/v1/info", NULL, TRAINER | SAMPLER | READER},
    {"GET", "/v1/openapi.json", NULL, TRAINER | SAMPLER | READER},
    {"GET", "/metrics", NULL, TRAINER | SAMPLER | READER},     /* --public-metrics 0 */
    {"POST", "/v1/runs", "{\"train\": {\"lr\": 7}}", TRAINER},  /* 422: nothing queued */
    {"GET", "/v1/runs", NULL, TRAINER | SAMPLER | READER},
    {"GET", "/v1/runs/999", NULL, TRAINER | SAMPLER | READER},
    {"POST", "/v1/runs/999/cancel", NULL, TRAINER},
    {"POST", "/v1/runs/999/resume", NULL, TRAINER},
    {"GET", "/v1/runs/999/metrics", NULL, TRAINER | READER},
    {"GET", "/v1/runs/999/events", NULL, TRAINER | READER},
    {"GET", "/v1/runs/999/checkpoints", NULL, TRAINER | READER},
    {"GET", "/v1/runs/999/checkpoints/1", NULL, TRAINER | READER},
    {"POST", "/v1/runs/999/samples", "{\"count\": 1}", TRAINER | SAMPLER},
    {"POST", "/v1/runs/999/evaluations", "{}", TRAINER | SAMPLER},
    {"GET", "/v1/runs/999/evaluations", NULL, TRAINER | READER},
    {"GET", "/v1/runs/999/evaluations/1", NULL, TRAINER | READER},
    {"GET", "/v1/runs/999/model", NULL, TRAINER | READER},
    {"POST", "/v1/models", NULL, TRAINER},                      /* 422: no file */
    {"GET", "/v1/models", NULL, TRAINER | SAMPLER | READER},
    {"GET", "/v1/models/nope", NULL, TRAINER | SAMPLER | READER},
    {"GET", "/v1/models/nope/file", NULL, TRAINER | READER},
    {"POST", "/v1/models/nope/samples", "{\"count\": 1}", TRAINER | SAMPLER},
    {"POST", "/v1/datasets", "{\"name\": \"\"}", 0},
    {"GET", "/v1/datasets", NULL, TRAINER | READER},
    {"GET", "/v1/datasets/999", NULL, TRAINER | READER},
    {"POST", "/v1/tokens", "{\"name\": \"\", \"role\": \"reader\"}", 0},
    {"GET", "/v1/tokens", NULL, 0},
    {"DELETE", "/v1/tokens/999", NULL, 0},
};

/* The ingest routes take a Slurm job's own token, never a role's
 * (test_ingest proves the job tokens themselves). */
static const struct {
    const char *method, *path, *body;
} job_routes[] = {
    {"POST", "/v1/runs/999/ingest/start", "{}"},
    {"POST", "/v1/runs/999/ingest", "{}"},
    {"GET", "/v1/runs/999/ingest/checkpoints/energy", NULL},
    {"PUT", "/v1/runs/999/ingest/checkpoints/energy/1", NULL},
    {"PUT", "/v1/runs/999/ingest/acceptance", NULL},
};

/* Does path (with numbers) fill pattern (with {captures})? */
static int fills(const char *pattern, const char *path)
{
    while (*pattern && *path) {
        if (*pattern == '{') {
            pattern = strchr(pattern, '}') + 1;
            path += strcspn(path, "/");
        } else if (*pattern++ != *path++) {
            return 0;
        }
    }
    return !*pattern && !*path;
}

/* Every route the service registers is in the table above (or open: the
 * health checks and the dashboard's files), so a new route cannot miss
 * this test. */
static void test_table_covers_router(void)
{
    http_router *r = http_router_new();
    gt_error err = {0};
    CHECK_EQ_INT(routes_register(r, &err), GT_OK);
    for (int i = 0; i < http_router_count(r); i++) {
        const char *method, *pattern;
        http_router_get(r, i, &method, &pattern);
        int found = (http_router_flags(r, i) & AUTH_OPEN) == AUTH_OPEN;
        for (size_t k = 0; !found && k < sizeof routes / sizeof routes[0]; k++)
            found = !strcmp(routes[k].method, method) && fills(pattern, routes[k].path);
        for (size_t k = 0; !found && k < sizeof job_routes / sizeof job_routes[0]; k++)
            found = !strcmp(job_routes[k].method, method) && fills(pattern, job_routes[k].path);
        CHECK_MSG(found, "%s %s is not in test_auth_service's table of routes", method, pattern);
    }
    http_router_free(r);
}

static void expect_401(const char *url, int i, const char *what, const char *auth,
                       const char *says)
{
    reply r = request(url, routes[i].method, routes[i].path, auth, routes[i].body);
    CHECK_MSG(r.status == 401 && has_code(&r, "unauthorized") && strncmp(r.www, "Bearer", 6) == 0,
              "%s %s with %s: %ld, WWW-Authenticate '%s': %s", routes[i].method, routes[i].path,
              what, r.status, r.www, r.body);
    if (says)
        CHECK_MSG(strstr(r.body, says), "%s %s with %s: %s", routes[i].method, routes[i].path,
                  what, r.body);
}

static void test_route_table(const char *url, const tokens *t)
{
    char bearer[6][160];
    const char *toks[6] = {t->admin, t->trainer, t->sampler, t->reader, t->revoked, t->expired};
    for (int k = 0; k < 6; k++)
        snprintf(bearer[k], sizeof bearer[k], "Bearer %s", toks[k]);
    /* unknown: a well-formed token of another secret, and of the admin's
     * prefix with the last digit changed */
    char unknown[160], altered[160];
    snprintf(unknown, sizeof unknown, "Bearer gt_%s", "0123456789abcdef0123456789abcdef"
             "0123456789abcdef0123456789abcdef01234567");
    snprintf(altered, sizeof altered, "%s", bearer[0]);
    size_t last = strlen(altered) - 1;
    altered[last] = altered[last] == 'a' ? 'b' : 'a';
    static const char *const role_name[4] = {"admin", "trainer", "sampler", "reader"};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        expect_401(url, (int)i, "no token", NULL, "needs a token");
        expect_401(url, (int)i, "Basic", "Basic YWRtaW46YWRtaW4=", "Bearer <token>");
        expect_401(url, (int)i, "an unknown token", unknown, NULL);
        expect_401(url, (int)i, "an altered token", altered, NULL);
        expect_401(url, (int)i, "a revoked token", bearer[4], "revoked");
        expect_401(url, (int)i, "an expired token", bearer[5], "expired");
        for (int k = 0; k < 4; k++) {
            int allowed = k == 0 || (routes[i].roles & (1 << k));
            reply r = request(url, routes[i].method, routes[i].path, bearer[k], routes[i].body);
            if (allowed)
                CHECK_MSG(r.status != 401 && r.status != 403 && r.status != 0,
                          "%s %s as %s: %ld %s", routes[i].method, routes[i].path, role_name[k],
                          r.status, r.body);
            else
                CHECK_MSG(r.status == 403 && has_code(&r, "forbidden") &&
                              strstr(r.body, role_name[k]),
                          "%s %s as %s: %ld %s (want 403)", routes[i].method, routes[i].path,
                          role_name[k], r.status, r.body);
        }
    }
    /* no role opens the ingest routes, admin's neither */
    for (size_t i = 0; i < sizeof job_routes / sizeof job_routes[0]; i++) {
        reply r = request(url, job_routes[i].method, job_routes[i].path, NULL,
                          job_routes[i].body);
        CHECK_MSG(r.status == 401 && has_code(&r, "unauthorized"), "%s %s without a token: %ld",
                  job_routes[i].method, job_routes[i].path, r.status);
        for (int k = 0; k < 4; k++) {
            r = request(url, job_routes[i].method, job_routes[i].path, bearer[k],
                        job_routes[i].body);
            CHECK_MSG(r.status == 401 && strstr(r.body, "gtj_"), "%s %s as %s: %ld %s",
                      job_routes[i].method, job_routes[i].path, role_name[k], r.status, r.body);
        }
    }
    /* health checks and the dashboard's files need nothing, and ignore what
     * is sent */
    const char *open[] = {"/healthz", "/readyz", "/", "/ui/app.js"};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(request(url, "GET", open[i], NULL, NULL).status, 200);
        CHECK_EQ_INT(request(url, "GET", open[i], "Bearer nonsense", NULL).status, 200);
    }
    /* unknown paths are still 404 and wrong methods 405, whoever asks */
    CHECK_EQ_INT(request(url, "GET", "/v1/nothing", NULL, NULL).status, 404);
    CHECK_EQ_INT(request(url, "PUT", "/v1/tokens", bearer[3], NULL).status, 405);
}

/* /v1/tokens over HTTP: create (the token once), use, list, revoke. */
static void test_token_routes(const char *url, const tokens *t)
{
    char admin[160];
    snprintf(admin, sizeof admin, "Bearer %s", t->admin);
    reply r = request(url, "POST", "/v1/tokens", admin,
                      "{\"name\": \"farm\", \"role\": \"sampler\", \"ttl\": \"1h\"}");
    CHECK_MSG(r.status == 201, "create: %ld %s", r.status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    const char *got = json_string_value(json_object_get(j, "token"));
    long long id = json_integer_value(json_object_get(j, "id"));
    CHECK(got && strlen(got) == 75 && json_string_value(json_object_get(j, "expires_at")));
    char tok[128], farm[160];
    snprintf(tok, sizeof tok, "%s", got ? got : "none");
    snprintf(farm, sizeof farm, "Bearer %s", tok);
    json_decref(j);
    r = request(url, "POST", "/v1/runs/999/samples", farm, "{\"count\": 1}");
    CHECK_MSG(r.status == 404, "the new sampler token: %ld %s", r.status, r.body);
    r = request(url, "GET", "/v1/runs/999/checkpoints", farm, NULL);
    CHECK_MSG(r.status == 403, "sampler on checkpoints: %ld %s", r.status, r.body);
    /* bad requests name the field */
    r = request(url, "POST", "/v1/tokens", admin, "{\"name\": \"farm\", \"role\": \"reader\"}");
    CHECK_MSG(r.status == 422 && strstr(r.body, "\"field\":\"name\""), "%ld %s", r.status, r.body);
    r = request(url, "POST", "/v1/tokens", admin, "{\"name\": \"z\", \"role\": \"root\"}");
    CHECK_MSG(r.status == 422 && strstr(r.body, "\"field\":\"role\""), "%ld %s", r.status, r.body);
    r = request(url, "POST", "/v1/tokens", admin, "{\"name\": \"z\", \"role\": \"reader\","
                " \"ttl\": \"soon\"}");
    CHECK_MSG(r.status == 422 && strstr(r.body, "\"field\":\"ttl\""), "%ld %s", r.status, r.body);
    /* the listing: no secret, no hash; last_used_at written for a used token */
    r = request(url, "GET", "/v1/tokens", admin, NULL);
    CHECK_MSG(r.status == 200 && !strstr(r.body, "token_hash") &&
                  !strstr(r.body, tok + 11), "%ld %s", r.status, r.body);
    j = json_loads(r.body, 0, NULL);
    size_t i;
    json_t *row;
    int seen = 0;
    json_array_foreach(json_object_get(j, "items"), i, row) {
        if (strcmp(json_string_value(json_object_get(row, "name")), "farm") == 0) {
            seen = 1;
            CHECK(json_is_string(json_object_get(row, "last_used_at")));
            CHECK(strcmp(json_string_value(json_object_get(row, "status")), "active") == 0);
        }
    }
    CHECK(seen);
    json_decref(j);
    char path[64];
    snprintf(path, sizeof path, "/v1/tokens/%lld", id);
    r = request(url, "DELETE", path, admin, NULL);
    CHECK_MSG(r.status == 200 && strstr(r.body, "\"status\":\"revoked\""), "%ld %s", r.status,
              r.body);
    r = request(url, "DELETE", path, admin, NULL);             /* again: the same */
    CHECK_EQ_INT(r.status, 200);
    r = request(url, "POST", "/v1/runs/999/samples", farm, "{\"count\": 1}");
    CHECK_MSG(r.status == 401 && strstr(r.body, "revoked"), "%ld %s", r.status, r.body);
    CHECK_EQ_INT(request(url, "DELETE", "/v1/tokens/abc", admin, NULL).status, 404);
}

/* ---------------------------------------------------------------------------
 * Rate limits and the client's retries
 * ------------------------------------------------------------------------- */

/* Sends GET /v1/runs as auth until a 429 comes (at most 20 tries). */
static reply until_limited(const char *url, const char *auth)
{
    reply r;
    for (int i = 0; i < 20; i++) {
        r = request(url, "GET", "/v1/runs", auth, NULL);
        if (r.status != 200)
            break;
    }
    return r;
}

static void test_rate_limit(const char *url, const tokens *t)
{
    char reader[160];
    snprintf(reader, sizeof reader, "Bearer %s", t->reader);
    /* no token on loopback: let through when none is required */
    CHECK_EQ_INT(request(url, "GET", "/v1/runs", NULL, NULL).status, 200);
    CHECK_EQ_INT(request(url, "GET", "/v1/tokens", NULL, NULL).status, 200);
    /* a token that is sent is checked even so */
    reply r = request(url, "GET", "/v1/runs", "Bearer gt_nope", NULL);
    CHECK_MSG(r.status == 401 && has_code(&r, "unauthorized"), "%ld %s", r.status, r.body);
    char revoked[160];
    snprintf(revoked, sizeof revoked, "Bearer %s", t->revoked);
    CHECK_EQ_INT(request(url, "GET", "/v1/runs", revoked, NULL).status, 401);
    char sampler[160];
    snprintf(sampler, sizeof sampler, "Bearer %s", t->sampler);
    CHECK_EQ_INT(request(url, "GET", "/v1/tokens", sampler, NULL).status, 403);

    /* 12 a minute, 3 at once: the fourth quick request waits */
    r = until_limited(url, reader);
    long wait = strtol(r.retry, NULL, 10);
    CHECK_MSG(r.status == 429 && has_code(&r, "rate_limited") && wait >= 1 && wait <= 5,
              "%ld Retry-After '%s' %s", r.status, r.retry, r.body);
    /* another token has a bucket of its own */
    CHECK_EQ_INT(request(url, "GET", "/v1/runs", sampler, NULL).status, 200);
    svc_sleep_ms(wait * 1000 + 100);
    r = request(url, "GET", "/v1/runs", reader, NULL);
    CHECK_MSG(r.status == 200, "after waiting %ld s: %ld %s", wait, r.status, r.body);

    /* the client library waits out a 429 and retries */
    r = until_limited(url, reader);
    CHECK_EQ_INT(r.status, 429);
    gc_client *c = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(gc_open(&c, url, &err), GT_OK);
    CHECK_EQ_INT(gc_set_token(c, t->reader, &err), GT_OK);
    gc_set_retries(c, 0);
    json_t *page = NULL;
    CHECK_MSG(gc_list_runs(c, NULL, NULL, 5, &page, &err) != GT_OK &&
                  strstr(err.message, "rate_limited"), "without retries: %s", err.message);
    gc_set_retries(c, 3);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_MSG(gc_list_runs(c, NULL, NULL, 5, &page, &err) == GT_OK, "with retries: %s",
              err.message);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK_MSG(t1.tv_sec - t0.tv_sec >= 1, "the client did not wait (%ld s)",
              (long)(t1.tv_sec - t0.tv_sec));
    json_decref(page);
    CHECK_EQ_INT(gc_set_token(c, "bad token", &err), GT_EINVAL);
    gc_close(c);

    /* giant runs --token through the same library */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s runs --server %s --token %s > /dev/null 2>&1", svc_binary(),
             url, t->trainer);
    CHECK_EQ_INT(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "GIANT_TOKEN=gt_nope %s runs --server %s > /dev/null 2>&1",
             svc_binary(), url);
    CHECK(system(cmd) != 0);
}

/* One token may have --max-queued-runs-per-token (1) runs queued. */
static void test_queue_limit(const char *url, const tokens *t)
{
    gc_client *c = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(gc_open(&c, url, &err), GT_OK);
    CHECK_EQ_INT(gc_set_token(c, t->trainer, &err), GT_OK);
    gc_set_retries(c, 0);
    char *cfg = svc_tiny_config("long", 100000, 100, 100000, NULL);
    json_t *run = NULL;
    long long ids[2] = {0, 0};
    CHECK_EQ_INT(gc_submit_run(c, cfg, NULL, &run, &err), GT_OK);
    ids[0] = json_integer_value(json_object_get(run, "id"));
    json_decref(run);
    run = svc_wait_run(c, ids[0], "running", 60000);
    CHECK(run && strcmp(json_string_value(json_object_get(run, "status")), "running") == 0);
    json_decref(run);
    CHECK_EQ_INT(gc_submit_run(c, cfg, NULL, &run, &err), GT_OK);    /* queued behind it */
    ids[1] = json_integer_value(json_object_get(run, "id"));
    json_decref(run);
    char auth[160];
    snprintf(auth, sizeof auth, "Bearer %s", t->trainer);
    reply r = request(url, "POST", "/v1/runs", auth, cfg);
    CHECK_MSG(r.status == 429 && has_code(&r, "rate_limited") && strcmp(r.retry, "30") == 0 &&
                  strstr(r.body, "max-queued-runs-per-token"), "%ld %s", r.status, r.body);
    /* the admin's queue is its own */
    snprintf(auth, sizeof auth, "Bearer %s", t->admin);
    r = request(url, "POST", "/v1/runs", auth, "{\"train\": {\"lr\": 7}}");
    CHECK_MSG(r.status == 422, "admin: %ld %s", r.status, r.body);
    for (int i = 1; i >= 0; i--) {
        if (!ids[i])
            continue;
        CHECK_EQ_INT(gc_cancel_run(c, ids[i], &run, &err), GT_OK);
        json_decref(run);
        json_decref(svc_wait_run(c, ids[i], NULL, 60000));
    }
    free(cfg);
    gc_close(c);
}

/* ---------------------------------------------------------------------------
 * Start-up on a non-loopback address
 * ------------------------------------------------------------------------- */

static void test_non_loopback(void)
{
    char empty[160];
    snprintf(empty, sizeof empty, "%s/empty.db", dir);
    const char *argv[] = {svc_binary(), "serve", "--listen", "0.0.0.0:0", "--db", empty,
                          "--data-dir", data, "--default-dataset", "0", NULL};
    svc p;
    CHECK(svc_spawn(&p, (char *const *)argv) == 0);
    int rc = svc_wait_exit(&p, 60000);
    CHECK_MSG(rc == 1 && svc_log_has(&p, "not a loopback address") &&
                  svc_log_has(&p, "giant token create --name NAME --role admin") &&
                  !svc_log_has(&p, "msg=listening"), "exit %d", rc);
    svc_check_done(&p);

    /* with a usable token in the database it starts there; /metrics is
     * public by default, the rest needs a token (--require-tokens 1) */
    const char *argv2[] = {svc_binary(), "serve", "--listen", "0.0.0.0:0", "--db", db,
                           "--data-dir", data, "--default-dataset", "0", "--require-tokens", "1",
                           NULL};
    CHECK(svc_spawn(&p, (char *const *)argv2) == 0);
    static const char needle[] = "msg=listening addr=0.0.0.0:";
    int up = svc_log_wait(&p, needle, 60000);
    if (up) {
        pthread_mutex_lock(&p.mu);
        int port = atoi(strstr(p.log, needle) + strlen(needle));
        pthread_mutex_unlock(&p.mu);
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
        CHECK_EQ_INT(request(url, "GET", "/metrics", NULL, NULL).status, 200);
        CHECK_EQ_INT(request(url, "GET", "/v1/info", NULL, NULL).status, 401);
    }
    svc_check_stop_started(&p, up, "serve on 0.0.0.0 with a token did not start");
    svc_check_done(&p);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    snprintf(dir, sizeof dir, "svc-auth-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(db, sizeof db, "%s/auth.db", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    tokens t;
    memset(&t, 0, sizeof t);
    test_table_covers_router();
    test_token_cli(&t);
    test_non_loopback();            /* after the token command: it needs one */

    /* tokens required, /metrics closed, no rate limit, one queued run a
     * token: the table, /v1/tokens, the queue limit */
    svc s;
    const char *strict[] = {"--require-tokens", "1", "--public-metrics", "0", "--rate-limit", "0",
                            "--max-queued-runs-per-token", "1", NULL};
    if (svc_check_start(&s, "the server did not start", db, data, strict) != 0)
        return check_finish();
    test_route_table(s.url, &t);
    test_token_routes(s.url, &t);
    test_queue_limit(s.url, &t);
    /* the request log names the token's id, never the token */
    CHECK(svc_log_has(&s, "path=/v1/tokens status=200") && svc_log_has(&s, " token="));
    CHECK(!svc_log_has(&s, t.admin + 11) && !svc_log_has(&s, t.reader + 11));
    svc_check_stop(&s);

    /* tokens optional on loopback, a small rate limit */
    const char *limited[] = {"--rate-limit", "12", "--rate-burst", "3", NULL};
    if (svc_check_start(&s, "the rate-limited server did not start", db, data, limited) != 0)
        return check_finish();
    test_rate_limit(s.url, &t);
    svc_check_stop(&s);
    if (!check_failures_) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
    }
    return check_finish();
}
