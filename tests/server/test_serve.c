/* Integration test: runs the real `serve` command of giant_test_server (the
 * giant binary plus test-only routes) on an ephemeral loopback port with a
 * temporary database, checks every route and error path over HTTP with
 * libcurl, then stops it with SIGTERM while a request is in flight and
 * checks the request finished, the process exited cleanly and the database
 * is intact.  Also checks that the shipped giant binary has no test routes
 * and refuses bad settings and a database newer than itself. */
#include "check.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <curl/curl.h>
#include <jansson.h>
#include <sqlite3.h>

#include "svc_check.h"
#include "svc_harness.h"

/* ---------------------------------------------------------------------------
 * A server process and its log (svc_harness's process layer)
 * ------------------------------------------------------------------------- */

/* Starts `BIN serve` on port 0 and reads the bound port from the log. */
static int serve_start(svc *p, const char *bin, const char *db, const char *data_dir)
{
    char *argv[] = { (char *)bin, "serve", "--listen", "127.0.0.1:0", "--db", (char *)db,
                     "--data-dir", (char *)data_dir, "--threads", "4", "--max-body-bytes",
                     "1024", "--shutdown-grace", "10",
                     /* no first-start dataset: its simulation would run
                      * beside the shutdown checks on a loaded machine */
                     "--default-dataset", "0",
                     /* reaps the malformed-request test's stalled connections */
                     "--timeout", "2", NULL };
    if (svc_spawn(p, argv) != 0)
        return -1;
    /* Generous: a sanitizer build on a loaded machine starts slowly. */
    if (!svc_await_listening(p, 30000)) {
        svc_wait_exit(p, 0);           /* kills it if it is still running */
        return -1;
    }
    return p->port > 0 ? 0 : -1;
}

/* ---------------------------------------------------------------------------
 * HTTP through libcurl
 * ------------------------------------------------------------------------- */

typedef struct reply {
    long status;
    CURLcode curl;
    char body[262144];         /* the OpenAPI document is about 50 KB */
    size_t len;
    char headers[4096];
    size_t hlen;
    json_t *json;               /* parsed body, or NULL                      */
} reply;

/* Appends what fits of data to buf (cap bytes, *len used, kept
 * NUL-terminated); the rest is dropped. Returns bytes, as curl wants. */
static size_t append_capped(char *buf, size_t cap, size_t *len, const char *data, size_t bytes)
{
    size_t room = cap - 1 - *len;
    size_t take = bytes < room ? bytes : room;
    memcpy(buf + *len, data, take);
    *len += take;
    buf[*len] = '\0';
    return bytes;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    reply *r = arg;
    return append_capped(r->body, sizeof r->body, &r->len, data, size * n);
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    reply *r = arg;
    return append_capped(r->headers, sizeof r->headers, &r->hlen, data, size * n);
}

/* One request. content_type NULL sends none; chunked sends the body with
 * Transfer-Encoding: chunked instead of a Content-Length. */
static void http(reply *r, int port, const char *method, const char *path,
                 const char *content_type, const char *body, long len, int chunked)
{
    memset(r, 0, sizeof *r);
    CURL *c = curl_easy_init();
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    struct curl_slist *hdrs = NULL;
    /* curl adds a form content type to POSTs unless told otherwise. */
    char ct[256];
    snprintf(ct, sizeof ct, "Content-Type:%s%s", content_type ? " " : "",
             content_type ? content_type : "");
    hdrs = curl_slist_append(hdrs, ct);
    hdrs = curl_slist_append(hdrs, "Expect:");
    if (chunked)
        hdrs = curl_slist_append(hdrs, "Transfer-Encoding: chunked");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        if (!chunked)
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, len);
    }
    r->curl = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    json_error_t jerr;
    r->json = r->len ? json_loadb(r->body, r->len, 0, &jerr) : NULL;
}

static void reply_free(reply *r)
{
    json_decref(r->json);
    r->json = NULL;
}

/* The error shape: {"error": {"code": code, "message": "...", "field": null|string}}. */
static int is_error(const reply *r, const char *code)
{
    json_t *e = json_object_get(r->json, "error");
    json_t *c = json_object_get(e, "code"), *m = json_object_get(e, "message");
    json_t *f = json_object_get(e, "field");
    return json_is_object(e) && json_is_string(c) && strcmp(json_string_value(c), code) == 0 &&
           json_is_string(m) && json_string_length(m) > 0 && f &&
           (json_is_null(f) || json_is_string(f));
}

static const char *str_at(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : "";
}

/* ---------------------------------------------------------------------------
 * The checks
 * ------------------------------------------------------------------------- */

static void check_routes(svc *p, const char *source_dir)
{
    int port = p->port;
    reply r;

    http(&r, port, "GET", "/healthz", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK(strcmp(str_at(r.json, "status"), "ok") == 0);
    CHECK(strstr(r.headers, "Content-Type: application/json") != NULL);
    reply_free(&r);

    http(&r, port, "HEAD", "/healthz", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_INT(r.len, 0);
    reply_free(&r);

    http(&r, port, "GET", "/readyz", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK(strcmp(str_at(r.json, "status"), "ready") == 0);
    json_t *checks = json_object_get(r.json, "checks");
    CHECK(strcmp(str_at(checks, "database"), "ok") == 0);
    CHECK(strcmp(str_at(checks, "engine"), "ok") == 0);
    CHECK(json_integer_value(json_object_get(checks, "schema_version")) >= 1);
    reply_free(&r);

    http(&r, port, "GET", "/v1/info", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK(strcmp(str_at(r.json, "name"), "giant") == 0);
    CHECK(strlen(str_at(r.json, "version")) > 0);
    CHECK(strlen(str_at(r.json, "git_commit")) > 0);
    json_t *build = json_object_get(r.json, "build");
    CHECK(json_is_boolean(json_object_get(build, "cuda")));
    CHECK(json_is_boolean(json_object_get(build, "sanitizers")));
    json_t *devices = json_object_get(r.json, "devices");
    CHECK(json_is_array(devices) && json_array_size(devices) >= 1);
    json_t *cpu = json_array_get(devices, 0);
    CHECK(strcmp(str_at(cpu, "kind"), "cpu") == 0);
    CHECK(json_integer_value(json_object_get(cpu, "cores")) >= 1);
    CHECK(json_is_boolean(json_object_get(cpu, "bf16")));
    CHECK(json_is_null(json_object_get(cpu, "compute_capability")));
    for (size_t i = 1; i < json_array_size(devices); i++) {
        json_t *d = json_array_get(devices, i);
        CHECK(strcmp(str_at(d, "kind"), "cuda") == 0);
        CHECK(strlen(str_at(d, "compute_capability")) >= 3);
        CHECK(json_integer_value(json_object_get(d, "memory_bytes")) > 0);
    }
    reply_free(&r);

    /* The served document is the file in api/, byte for byte. */
    http(&r, port, "GET", "/v1/openapi.json", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK(strncmp(str_at(r.json, "openapi"), "3.0", 3) == 0);
    json_t *paths = json_object_get(r.json, "paths");
    const char *documented[] = { "/healthz", "/readyz", "/v1/info", "/v1/openapi.json" };
    for (int i = 0; i < 4; i++)
        CHECK_MSG(json_object_get(paths, documented[i]) != NULL, "%s undocumented",
                  documented[i]);
    char file[1024];
    snprintf(file, sizeof file, "%s/api/openapi.json", source_dir);
    FILE *f = fopen(file, "rb");
    CHECK(f != NULL);
    if (f) {
        static char want[262144];
        size_t n = fread(want, 1, sizeof want, f);
        fclose(f);
        CHECK_EQ_INT(n, r.len);
        CHECK(n == r.len && memcmp(want, r.body, n) == 0);
    }
    reply_free(&r);

    /* 404 and 405 are JSON; 405 names the allowed methods. */
    http(&r, port, "GET", "/no/such/route", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 404);
    CHECK(is_error(&r, "not_found"));
    CHECK(json_is_null(json_object_get(json_object_get(r.json, "error"), "field")));
    reply_free(&r);
    http(&r, port, "GET", "/healthz/", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 404);
    reply_free(&r);
    http(&r, port, "POST", "/healthz", "application/json", "{}", 2, 0);
    CHECK_EQ_INT(r.status, 405);
    CHECK(is_error(&r, "method_not_allowed"));
    CHECK(strstr(r.headers, "Allow: GET") != NULL);
    reply_free(&r);
    http(&r, port, "DELETE", "/v1/info", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 405);
    CHECK(is_error(&r, "method_not_allowed"));
    reply_free(&r);
    http(&r, port, "GET", "/test/echo", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 405);
    CHECK(strstr(r.headers, "Allow: POST") != NULL);
    reply_free(&r);

    /* Path captures. */
    http(&r, port, "GET", "/test/items/run-42", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK(strcmp(str_at(r.json, "id"), "run-42") == 0);
    reply_free(&r);
    http(&r, port, "GET", "/test/items/", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 404);
    reply_free(&r);
    http(&r, port, "GET", "/test/items/a/b", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 404);
    reply_free(&r);

    /* A JSON body that parses is handed to the route. */
    const char *good = "{\"a\": [1, 2.5, \"x\"], \"b\": {\"c\": null}}";
    http(&r, port, "POST", "/test/echo", "application/json; charset=utf-8", good,
         (long)strlen(good), 0);
    CHECK_EQ_INT(r.status, 200);
    json_t *want = json_loads(good, 0, NULL);
    CHECK(json_equal(json_object_get(r.json, "echo"), want));
    json_decref(want);
    reply_free(&r);

    /* Exactly at the cap (1024 bytes) is accepted; one byte more is 413.
     * A chunked body is refused with 411 whatever its size. */
    static char big[4096];
    memset(big, ' ', sizeof big);
    big[0] = '[';
    big[1022] = ']';
    big[1023] = '\n';
    http(&r, port, "POST", "/test/echo", "application/json", big, 1024, 0);
    CHECK_EQ_INT(r.status, 200);
    reply_free(&r);
    big[1023] = ' ';
    big[1024] = '\n';
    http(&r, port, "POST", "/test/echo", "application/json", big, 1025, 0);
    CHECK_EQ_INT(r.status, 413);
    CHECK(is_error(&r, "body_too_large"));
    reply_free(&r);
    big[4095] = '\0';
    http(&r, port, "POST", "/test/echo", "application/json", big, 4095, 1);
    CHECK_EQ_INT(r.status, 411);
    CHECK(is_error(&r, "length_required"));
    reply_free(&r);

    /* Broken JSON: 400 with the parser's line and column. */
    const char *broken = "{\n  \"a\": 1,\n  \"b\": }\n";
    http(&r, port, "POST", "/test/echo", "application/json", broken, (long)strlen(broken), 0);
    CHECK_EQ_INT(r.status, 400);
    CHECK(is_error(&r, "malformed_json"));
    const char *msg = str_at(json_object_get(r.json, "error"), "message");
    CHECK_MSG(strstr(msg, "line 3") != NULL && strstr(msg, "column 8") != NULL, "%s", msg);
    reply_free(&r);
    const char *dup = "{\"a\": 1, \"a\": 2}";
    http(&r, port, "POST", "/test/echo", "application/json", dup, (long)strlen(dup), 0);
    CHECK_EQ_INT(r.status, 400);
    CHECK(is_error(&r, "malformed_json"));
    reply_free(&r);
    http(&r, port, "POST", "/test/echo", "application/json", "", 0, 0);
    CHECK_EQ_INT(r.status, 400);
    CHECK(is_error(&r, "malformed_json"));
    reply_free(&r);

    /* Wrong or missing media type: 415, with or without a body. */
    http(&r, port, "POST", "/test/echo", "text/plain", good, (long)strlen(good), 0);
    CHECK_EQ_INT(r.status, 415);
    CHECK(is_error(&r, "unsupported_media_type"));
    reply_free(&r);
    http(&r, port, "POST", "/test/echo", NULL, good, (long)strlen(good), 0);
    CHECK_EQ_INT(r.status, 415);
    reply_free(&r);
    http(&r, port, "POST", "/test/echo", "application/jsonx", "", 0, 0);
    CHECK_EQ_INT(r.status, 415);
    reply_free(&r);

    /* Validation errors name their field. */
    http(&r, port, "GET", "/test/slow?ms=-1", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 422);
    CHECK(is_error(&r, "validation_failed"));
    CHECK(strcmp(str_at(json_object_get(r.json, "error"), "field"), "ms") == 0);
    reply_free(&r);

    /* One structured log line per request. */
    CHECK(svc_log_wait(p, "msg=request method=GET path=/healthz status=200 bytes=15 us=", 2000));
    CHECK(svc_log_wait(p, "method=POST path=/test/echo status=413", 2000));
    CHECK(svc_log_wait(p, "path=/no/such/route status=404", 2000));
}


/* ---------------------------------------------------------------------------
 * Robustness: malformed HTTP and concurrent clients
 * ------------------------------------------------------------------------- */

/* Sends raw bytes on a fresh connection and reads until the server closes
 * or 5 s pass; returns the bytes read into out (NUL-terminated). */
static size_t raw_exchange(int port, const char *data, size_t len, char *out, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = { 5, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t got = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        for (size_t off = 0; off < len;) {
            ssize_t w = send(fd, data + off, len - off, MSG_NOSIGNAL);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        shutdown(fd, SHUT_WR);
        ssize_t r;
        while (got + 1 < cap && (r = recv(fd, out + got, cap - 1 - got, 0)) > 0)
            got += (size_t)r;
    }
    out[got] = '\0';
    close(fd);
    return got;
}

static void check_malformed(svc *p)
{
    static char out[65536];
    const char *cases[] = {
        "GARBAGE\r\n\r\n",
        "GET\r\n\r\n",
        "GET /healthz HTTP/9.9\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        "POST /test/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        "POST /test/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 10\r\n\r\n{\"a\"",                 /* body cut short */
        "GET /\xff\xfe%00%zz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "\x00\x01\x02\x03\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = strlen(cases[i]);
        if (i == sizeof cases / sizeof cases[0] - 1)
            len = 8;                                     /* starts with a NUL */
        raw_exchange(p->port, cases[i], len, out, sizeof out);
        /* Whatever the answer, it is never a 2xx and the server survives. */
        CHECK_MSG(strncmp(out, "HTTP/1.1 2", 10) != 0, "case %zu answered %.40s", i, out);
    }
    /* The invalid-UTF-8 path still gets a JSON 404. */
    raw_exchange(p->port, cases[7], strlen(cases[7]), out, sizeof out);
    CHECK_MSG(strstr(out, " 404 ") && strstr(out, "\"not_found\""), "%.200s", out);

    /* Headers larger than the connection's memory are refused, not fatal. */
    static char huge[300000];
    int n = snprintf(huge, sizeof huge, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(huge + n, 'a', sizeof huge - (size_t)n - 8);
    memcpy(huge + sizeof huge - 8, "\r\n\r\n", 5);
    raw_exchange(p->port, huge, strlen(huge), out, sizeof out);
    CHECK_MSG(strncmp(out, "HTTP/1.1 2", 10) != 0, "%.40s", out);

    /* Query flood: thousands of repeated parameters (a 16 KB URL) once
     * exhausted the connection's memory and got no answer until the
     * timeout; now a JSON 414 at once, and 64 parameters still pass. */
    for (int k = 0; k < 3; k++) {
        static char req[40000];
        int params = k == 0 ? 2000 : k == 1 ? 65 : 64;
        size_t at = (size_t)snprintf(req, sizeof req, "GET /healthz?");
        for (int i = 0; i < params; i++)
            at += (size_t)snprintf(req + at, sizeof req - at, "%slimit=1", i ? "&" : "");
        snprintf(req + at, sizeof req - at, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        raw_exchange(p->port, req, strlen(req), out, sizeof out);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (params > 64)
            CHECK_MSG(strstr(out, " 414 ") && strstr(out, "\"uri_too_long\"") && s < 2.0,
                      "query flood of %d parameters: %.1f s, %.200s", params, s, out);
        else
            CHECK_MSG(strstr(out, " 200 "), "64 parameters: %.200s", out);
    }
    /* and a query over 8 KB in one parameter */
    {
        static char req[12000];
        int n = snprintf(req, sizeof req, "GET /healthz?x=");
        memset(req + n, 'a', 9000);
        snprintf(req + n + 9000, sizeof req - (size_t)n - 9000,
                 " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        raw_exchange(p->port, req, strlen(req), out, sizeof out);
        CHECK_MSG(strstr(out, " 414 ") && strstr(out, "\"uri_too_long\""), "%.200s", out);
    }

    reply r;
    http(&r, p->port, "GET", "/healthz", NULL, NULL, 0, 0);
    CHECK_EQ_INT(r.status, 200);
    reply_free(&r);
}

typedef struct hammer {
    int port, ok, bad;
} hammer;

static void *hammer_main(void *arg)
{
    hammer *h = arg;
    const char *body = "{\"x\": [1, 2, 3]}";
    for (int i = 0; i < 25; i++) {
        reply r;
        if (i % 2)
            http(&r, h->port, "POST", "/test/echo", "application/json", body,
                 (long)strlen(body), 0);
        else
            http(&r, h->port, "GET", "/readyz", NULL, NULL, 0, 0);
        if (r.status == 200)
            h->ok++;
        else
            h->bad++;
        reply_free(&r);
    }
    return NULL;
}

/* 8 clients at once, 25 requests each, more clients than pool threads. */
static void check_concurrent(svc *p)
{
    hammer h[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        h[i] = (hammer){ .port = p->port };
        pthread_create(&t[i], NULL, hammer_main, &h[i]);
    }
    int ok = 0, bad = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        ok += h[i].ok;
        bad += h[i].bad;
    }
    CHECK_EQ_INT(ok, 200);
    CHECK_EQ_INT(bad, 0);
}

typedef struct slow_call {
    int port;
    int ms;       /* how long the test route sleeps; 0 = 1500 */
    reply r;
} slow_call;

static void *slow_main(void *arg)
{
    slow_call *s = arg;
    char path[64];
    snprintf(path, sizeof path, "/test/slow?ms=%d", s->ms ? s->ms : 1500);
    http(&s->r, s->port, "GET", path, NULL, NULL, 0, 0);
    return NULL;
}

/* SIGTERM with a request in flight: the request completes, new connections
 * are refused, the process exits 0 and closes the database. */
static void check_shutdown(svc *p, const char *db)
{
    slow_call s = { .port = p->port };
    pthread_t t;
    pthread_create(&t, NULL, slow_main, &s);
    CHECK(svc_log_wait(p, "msg=test_slow state=begin", 10000));
    kill(p->pid, SIGTERM);
    CHECK(svc_log_wait(p, "msg=shutdown signal=15 in_flight=1", 5000));
    reply r;
    http(&r, p->port, "GET", "/healthz", NULL, NULL, 0, 0);
    CHECK_MSG(r.curl == CURLE_COULDNT_CONNECT, "curl %d, status %ld", (int)r.curl, r.status);
    reply_free(&r);
    pthread_join(t, NULL);
    CHECK_EQ_INT(s.r.status, 200);
    CHECK_EQ_INT(json_integer_value(json_object_get(s.r.json, "slept_ms")), 1500);
    reply_free(&s.r);
    CHECK_EQ_INT(svc_wait_exit(p, 20000), 0);
    CHECK(svc_log_has(p, "msg=stopped clean=1"));
    CHECK(!svc_log_has(p, "abandoned="));

    /* Intact: integrity check passes, the schema is there, and the WAL was
     * checkpointed and removed by the clean close. */
    char wal[1100];
    snprintf(wal, sizeof wal, "%s-wal", db);
    struct stat st;
    CHECK_MSG(stat(wal, &st) != 0, "%s left behind", wal);
    sqlite3 *h = NULL;
    CHECK(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    sqlite3_stmt *q = NULL;
    CHECK(sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &q, NULL) == SQLITE_OK);
    const unsigned char *verdict = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_text(q, 0)
                                                                 : NULL;
    CHECK_MSG(verdict && strcmp((const char *)verdict, "ok") == 0, "integrity: %s",
              verdict ? (const char *)verdict : "(no answer)");
    sqlite3_finalize(q);
    CHECK(sqlite3_prepare_v2(h, "SELECT COUNT(*) FROM schema_migrations", -1, &q, NULL) ==
          SQLITE_OK);
    CHECK(sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) >= 1);
    sqlite3_finalize(q);
    sqlite3_close(h);
}

/* A second signal during the drain stops waiting: the process exits 0 and
 * says how many requests it abandoned. */
static void check_second_signal(svc *p)
{
    /* The request sleeps long enough that the second signal surely lands
     * during the drain, however slowly a loaded machine runs the first. */
    slow_call s = { .port = p->port, .ms = 8000 };
    pthread_t t;
    pthread_create(&t, NULL, slow_main, &s);
    CHECK(svc_log_wait(p, "msg=test_slow state=begin", 10000));
    kill(p->pid, SIGTERM);
    CHECK(svc_log_wait(p, "msg=shutdown signal=15", 5000));
    kill(p->pid, SIGINT);
    CHECK_EQ_INT(svc_wait_exit(p, 20000), 0);
    CHECK(svc_log_has(p, "note=second-signal-stops-now"));
    CHECK(svc_log_has(p, "abandoned=1"));
    pthread_join(t, NULL);
    reply_free(&s.r);
}

/* Runs a command to completion; returns its exit status, log in p. */
static int run(svc *p, char *const argv[])
{
    if (svc_spawn(p, argv) != 0)
        return -1;
    return svc_wait_exit(p, 30000);
}

int main(void)
{
    const char *src = getenv("GIANT_SOURCE_DIR");
    const char *bin_dir = getenv("GIANT_BINARY_DIR");
    if (!src || !bin_dir)
        check_skip("GIANT_SOURCE_DIR/GIANT_BINARY_DIR not set (run through ctest)");
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);

    char dir[] = "serve-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char db[256], data[256], giant[1024];
    snprintf(db, sizeof db, "%s/giant.db", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(giant, sizeof giant, "%s/giant", bin_dir);

    /* The test server: every route, then shutdown with a request in flight. */
    svc p;
    int started = serve_start(&p, "./giant_test_server", db, data) == 0;
    CHECK_MSG(started, "giant_test_server did not start:\n%s", p.log ? p.log : "");
    if (started) {
        check_routes(&p, src);
        check_malformed(&p);
        check_concurrent(&p);
        check_shutdown(&p, db);
    }
    struct stat st;
    CHECK(stat(data, &st) == 0 && S_ISDIR(st.st_mode));
    if (check_failures_)
        fprintf(stderr, "--- server log ---\n%s\n", p.log ? p.log : "");
    svc_free(&p);

    /* The shipped binary serves the same database and has no test routes. */
    started = serve_start(&p, giant, db, data) == 0;
    CHECK_MSG(started, "giant did not start:\n%s", p.log ? p.log : "");
    if (started) {
        reply r;
        http(&r, p.port, "POST", "/test/echo", "application/json", "{}", 2, 0);
        CHECK_EQ_INT(r.status, 404);
        reply_free(&r);
        http(&r, p.port, "GET", "/readyz", NULL, NULL, 0, 0);
        CHECK_EQ_INT(r.status, 200);
        reply_free(&r);
        CHECK(svc_log_has(&p, "applied=0"));              /* already migrated */
        int rc = svc_stop(&p, SIGINT, 20000);
        CHECK_MSG(rc == 0, "giant serve exited %d on SIGINT; its log:\n%s", rc,
                  p.log ? p.log : "");
    }
    svc_free(&p);

    started = serve_start(&p, "./giant_test_server", db, data) == 0;
    CHECK(started);
    if (started)
        check_second_signal(&p);
    svc_free(&p);

    /* Bad settings are refused before anything starts. */
    char *bad_threads[] = { giant, "serve", "--threads", "many", NULL };
    CHECK_EQ_INT(run(&p, bad_threads), 2);
    CHECK(svc_log_has(&p, "--threads: 'many' is not an integer"));
    svc_free(&p);
    char *bad_listen[] = { giant, "serve", "--listen", "localhost", NULL };
    CHECK_EQ_INT(run(&p, bad_listen), 2);
    CHECK(svc_log_has(&p, "not HOST:PORT"));
    svc_free(&p);
    char *bad_flag[] = { giant, "serve", "--no-such-flag", NULL };
    CHECK_EQ_INT(run(&p, bad_flag), 2);
    svc_free(&p);
    char *help[] = { giant, "serve", "--help", NULL };
    CHECK_EQ_INT(run(&p, help), 0);
    CHECK(svc_log_has(&p, "--listen HOST:PORT") && svc_log_has(&p, "GIANT_LISTEN") &&
          svc_log_has(&p, "127.0.0.1:8080") && svc_log_has(&p, "--db FILE") &&
          svc_log_has(&p, "--data-dir DIR") && svc_log_has(&p, "GIANT_MAX_BODY_BYTES"));
    svc_free(&p);
    char *unknown[] = { giant, "frobnicate", NULL };
    CHECK_EQ_INT(run(&p, unknown), 2);
    svc_free(&p);
    char *version[] = { giant, "version", NULL };
    CHECK_EQ_INT(run(&p, version), 0);
    CHECK(svc_log_has(&p, "giant "));
    svc_free(&p);

    /* A database newer than the binary is refused by migrate and serve. */
    sqlite3 *h = NULL;
    CHECK(sqlite3_open(db, &h) == SQLITE_OK);
    CHECK(sqlite3_exec(h, "INSERT INTO schema_migrations(version, name, checksum) "
                          "VALUES (9999, '9999_future.sql', 'x')", NULL, NULL, NULL) ==
          SQLITE_OK);
    sqlite3_close(h);
    char *migrate[] = { giant, "migrate", "--db", db, NULL };
    CHECK_EQ_INT(run(&p, migrate), 1);
    CHECK_MSG(svc_log_has(&p, "version 9999 is newer than this binary supports ("), "%s",
              p.log ? p.log : "");
    svc_free(&p);
    char *serve[] = { giant, "serve", "--listen", "127.0.0.1:0", "--db", db, "--data-dir",
                      data, NULL };
    CHECK_EQ_INT(run(&p, serve), 1);
    CHECK(svc_log_has(&p, "9999"));
    CHECK(!svc_log_has(&p, "msg=listening"));
    svc_free(&p);

    curl_global_cleanup();
    /* Keep the directory for a look when something failed. */
    svc_check_cleanup(dir);
    return check_finish();
}
