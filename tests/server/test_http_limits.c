/* Integration test of the HTTP layer's limits on the real `giant serve`,
 * over raw loopback sockets:
 *
 * - what libmicrohttpd would answer with its own HTML page and the service
 *   now answers with its JSON error (431 headers over --max-header-bytes,
 *   411 for a chunked body, good or bad framing, 414 for a long path), and
 *   the heads the gate judges before libmicrohttpd parses them (a bad
 *   Content-Length, a request line without a version, HTTP/2, TLS, heads
 *   past the connection's memory: 400, 413, 414, 431, 505 as JSON);
 * - what still gets libmicrohttpd's HTML page (a malformed request after a
 *   good one on a kept-alive connection; server/README.md, "Errors
 *   libmicrohttpd answers itself"), pinned so that a library upgrade that
 *   changes it fails here and the README is looked at again;
 * - connection headroom: half-open connections from several loopback
 *   addresses past --max-connections leave /healthz on the admin listener
 *   answering at once, and the header timeout closes them, after which the
 *   API's port answers again; an idle keep-alive connection outlives the
 *   header timeout; an address at its event-stream limit gets 429 for one
 *   more stream and still reaches /healthz.
 *
 * Limits are lowered through settings so it takes seconds. */
#include "check.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "gt_clock.h"
#include "svc_check.h"
#include "svc_harness.h"

enum {
    HEADER_TIMEOUT_S = 2,
    MAX_CONNECTIONS = 120,
    PER_IP = 50,
    FLOOD_ADDRESSES = 3,       /* 127.0.0.2 .. 127.0.0.4, PER_IP each */
    STREAMS_PER_IP = 4,        /* from 127.0.0.5 */
};

/* A connection to 127.0.0.1:port from 127.0.0.<from> (0: any); -1 on
 * failure. */
static int dial(int port, int from)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (from) {
        struct sockaddr_in src = { .sin_family = AF_INET };
        src.sin_addr.s_addr = htonl((127u << 24) | (unsigned)from);
        if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0) {
            close(fd);
            return -1;
        }
    }
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *data, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t w = send(fd, data + off, len - off, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return 0;
}

/* Reads until the server closes, or timeout_s pass; NUL-terminated. */
static size_t read_all(int fd, char *out, size_t cap, int timeout_s)
{
    struct timeval tv = { timeout_s, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < cap && (r = recv(fd, out + got, cap - 1 - got, 0)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    return got;
}

/* One request on a fresh connection, read to the close (5 s at most). */
static size_t exchange(int port, const char *data, size_t len, char *out, size_t cap)
{
    out[0] = '\0';
    int fd = dial(port, 0);
    if (fd < 0)
        return 0;
    send_all(fd, data, len);
    shutdown(fd, SHUT_WR);
    size_t got = read_all(fd, out, cap, 5);
    close(fd);
    return got;
}

/* The status line starts "HTTP/1.1 <status>" and the body is the JSON
 * error with that code. */
static int is_json_error(const char *out, int status, const char *code)
{
    char line[32], want[64];
    snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
    snprintf(want, sizeof want, "{\"error\":{\"code\":\"%s\"", code);
    return strncmp(out, line, strlen(line)) == 0 && strstr(out, want) &&
           strstr(out, "application/json");
}


static char out[65536];

/* Writes head, count copies of item, then tail into req (cap bytes): a
 * request too large to spell out.  Its length. */
static size_t repeated(char *req, size_t cap, const char *head, const char *item, size_t count,
                       const char *tail)
{
    size_t n = (size_t)snprintf(req, cap, "%s", head), k = strlen(item);
    for (size_t i = 0; i < count && n + k < cap; i++, n += k)
        memcpy(req + n, item, k);
    return n + (size_t)snprintf(req + n, cap - n, "%s", tail);
}

/* A request too large to spell out (head, count copies of item, tail) and
 * the reply it must get: status 200, or a JSON error of status and code,
 * within max_s seconds when max_s > 0.  what names it in a failure. */
typedef struct big_request {
    const char *what, *head, *item;
    size_t count;
    const char *tail;
    int status;
    const char *code;
    double max_s;
} big_request;

static void check_big_requests(int port, const big_request *b, size_t n)
{
    static char req[300000];
    for (size_t i = 0; i < n; i++) {
        repeated(req, sizeof req, b[i].head, b[i].item, b[i].count, b[i].tail);
        double t0 = gt_clock_s();
        exchange(port, req, strlen(req), out, sizeof out);
        double took = gt_clock_s() - t0;
        int ok = b[i].status == 200 ? strncmp(out, "HTTP/1.1 200 ", 13) == 0
                                    : is_json_error(out, b[i].status, b[i].code);
        CHECK_MSG(ok && (b[i].max_s <= 0 || took < b[i].max_s), "%s: %.300s", b[i].what, out);
    }
}

/* ---------------------------------------------------------------------------
 * Errors the service answers itself, as JSON
 * ------------------------------------------------------------------------- */

static void check_json_errors(int port)
{
    static char req[300000];
    /* A chunked body, well or badly framed, is refused before it is read. */
    static const char *const chunked[] = {
        "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    };
    for (int i = 0; i < 2; i++) {
        exchange(port, chunked[i], strlen(chunked[i]), out, sizeof out);
        CHECK_MSG(is_json_error(out, 411, "length_required"), "chunked %d: %.300s", i, out);
    }
    char many[2048];   /* 120 headers X-0 .. X-119 */
    for (int i = 0, n = 0; i < 120; i++)
        n += snprintf(many + n, sizeof many - (size_t)n, "X-%d: 1\r\n", i);
    const big_request big[] = {
        /* Headers over --max-header-bytes (16 KB here): 431, as JSON, while
         * the connection's memory (128 KB) still holds them ... */
        {"20 KB header", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ", "a", 20000,
         "\r\nConnection: close\r\n\r\n", 431, "headers_too_large", 0},
        /* ... and under it, through. */
        {"15 KB header", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ", "a", 15000,
         "\r\nConnection: close\r\n\r\n", 200, NULL, 0},
        /* More than 100 headers, however small. */
        {"120 headers", "GET /healthz HTTP/1.1\r\nHost: x\r\n", many, 1,
         "Connection: close\r\n\r\n", 431, "headers_too_large", 0},
        /* A path over 8 KB: 414 ... */
        {"9 KB path", "GET /", "p", 9000, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
         414, "uri_too_long", 0},
        /* ... also when a body follows: refused before it is read. */
        {"9 KB path with a body", "POST /", "p", 9000,
         " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
         414, "uri_too_long", 0},
    };
    check_big_requests(port, big, sizeof big / sizeof big[0]);
    /* A wrong content type with a body within the cap, larger than the
     * socket buffers take at once: the body is read and dropped, the 415
     * follows, and the connection stays open for the next request.  (Were
     * the 415 sent at once, the server would close on unread bytes: a
     * reset, and no 200 for the request behind it.) */
    enum { DROPPED = 200000 };
    char head[160];
    snprintf(head, sizeof head,
             "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
             "Content-Length: %d\r\n\r\n", (int)DROPPED);
    size_t len = repeated(req, sizeof req, head, "x", DROPPED,
                          "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    exchange(port, req, len, out, sizeof out);
    const char *second = strstr(out + 1, "HTTP/1.1 ");
    CHECK_MSG(is_json_error(out, 415, "unsupported_media_type") && second &&
                  strncmp(second, "HTTP/1.1 200 ", 13) == 0,
              "a 200 KB text body, then /healthz: %.600s", out);
}

/* ---------------------------------------------------------------------------
 * Heads libmicrohttpd 0.9.75 would answer itself, in HTML, before any
 * callback: the gate (http_gate.h) answers them as JSON
 * ------------------------------------------------------------------------- */

static void check_gate_errors(int port)
{
    static const struct {
        const char *what, *request;
        int status;
        const char *code;
    } heads[] = {
        { "Content-Length: -1", "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
          400, "bad_request" },
        { "Content-Length: abc", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
          400, "bad_request" },
        { "two Content-Lengths", "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
          "Content-Length: 2\r\n\r\n{}", 400, "bad_request" },
        { "Content-Length past 2^64", "POST /v1/runs HTTP/1.1\r\nHost: x\r\n"
          "Content-Length: 99999999999999999999999\r\n\r\n", 413, "body_too_large" },
        { "a request line without a version", "GET /healthz\r\n\r\n", 400, "bad_request" },
        { "a request line of one word", "GET\r\n\r\n", 400, "bad_request" },
        { "a malformed version", "GET /healthz HTTP/1.10\r\nHost: x\r\n\r\n", 400,
          "bad_request" },
        { "a header without a colon", "GET /healthz HTTP/1.1\r\nHost x\r\n\r\n", 400,
          "bad_request" },
        { "a bare CR", "GET /healthz HTTP/1.1\rHost: x\r\n\r\n", 400, "bad_request" },
        { "HTTP/0.9", "GET /healthz HTTP/0.9\r\nHost: x\r\n\r\n", 505, "version_not_supported" },
        { "HTTP/2.0", "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, "version_not_supported" },
        { "the HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, "version_not_supported" },
        { "a TLS ClientHello", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400,
          "bad_request" },
    };
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        exchange(port, heads[i].request, strlen(heads[i].request), out, sizeof out);
        CHECK_MSG(is_json_error(out, heads[i].status, heads[i].code), "%s: %.300s",
                  heads[i].what, out);
    }
    /* What libmicrohttpd takes stays taken: empty lines before the request
     * line, bare LF line ends, a folded header, a HTTP/1.0 request. */
    static const char *const fine[] = {
        "\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /healthz HTTP/1.1\nHost: x\nConnection: close\n\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  more\r\nConnection: close\r\n\r\n",
        "GET /healthz HTTP/1.0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        exchange(port, fine[i], strlen(fine[i]), out, sizeof out);
        CHECK_MSG(strncmp(out, "HTTP/1.1 200 ", 13) == 0, "accepted head %zu: %.300s", i, out);
    }
    static const big_request big[] = {
        /* A request line, or headers, larger than the connection's memory. */
        {"200 KB request line", "GET /", "p", 200000, " HTTP/1.1\r\nHost: x\r\n\r\n", 414,
         "uri_too_long", 0},
        {"200 KB header", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ", "a", 200000, "\r\n\r\n",
         431, "headers_too_large", 0},
        /* Many tiny headers or cookies: each costs libmicrohttpd a record of
         * about 56 bytes in the connection's memory, so 2 000 of them (12
         * KB, under --max-header-bytes) would fill 128 KB before the
         * handler ran. */
        {"2 000 headers", "GET /healthz HTTP/1.1\r\nHost: x\r\n", "X: 1\r\n", 2000,
         "Connection: close\r\n\r\n", 431, "headers_too_large", 0},
        {"2 000 cookies", "GET /healthz HTTP/1.1\r\nHost: x\r\nCookie: a=1", "; a=1", 2000,
         "\r\nConnection: close\r\n\r\n", 431, "headers_too_large", 4.0},
    };
    check_big_requests(port, big, sizeof big / sizeof big[0]);
    /* A head that trickles in is judged once complete, byte by byte. */
    int fd = dial(port, 0);
    static const char slow[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n";
    for (size_t i = 0; fd >= 0 && i < sizeof slow - 1; i++) {
        send_all(fd, slow + i, 1);
        struct timespec pause = { 0, 2 * 1000 * 1000 };
        nanosleep(&pause, NULL);
    }
    if (fd >= 0) {
        read_all(fd, out, sizeof out, 5);
        close(fd);
    }
    CHECK_MSG(is_json_error(out, 400, "bad_request"), "a trickled bad head: %.300s", out);
    /* Pinned: only a connection's first head passes the gate.  A malformed
     * second request on a kept-alive connection still gets libmicrohttpd's
     * page (server/README.md, "Errors libmicrohttpd answers itself"); a
     * library upgrade that changes it fails here. */
    static const char second[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                                 "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n";
    exchange(port, second, sizeof second - 1, out, sizeof out);
    const char *page = strstr(out, "\r\n\r\n{\"status\":\"ok\"}");
    CHECK_MSG(strncmp(out, "HTTP/1.1 200 ", 13) == 0 && page &&
              strstr(page, "HTTP/1.1 400 ") && strstr(page, "<html>"),
              "a bad second request: %.400s", out);
}

/* ---------------------------------------------------------------------------
 * /metrics: the exposition format, and values that move
 * ------------------------------------------------------------------------- */

/* GET /metrics on port; the body (from out) or NULL. */
static const char *scrape(int port)
{
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    exchange(port, req, sizeof req - 1, out, sizeof out);
    const char *body = strstr(out, "\r\n\r\n");
    if (strncmp(out, "HTTP/1.1 200 ", 13) != 0 || !body ||
        !strstr(out, "Content-Type: text/plain; version=0.0.4"))
        return NULL;
    return body + 4;
}

/* /metrics asked for in OpenMetrics, as Prometheus asks: its content type,
 * the format (svc_openmetrics_check), and where Debian's Prometheus client
 * for Python is installed, its OpenMetrics parser's reading of it. */
static void check_openmetrics(int port)
{
    static const char req[] =
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAccept: "
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n";
    exchange(port, req, sizeof req - 1, out, sizeof out);
    const char *body = strstr(out, "\r\n\r\n");
    CHECK_MSG(strncmp(out, "HTTP/1.1 200 ", 13) == 0 && body &&
              strstr(out, "Content-Type: application/openmetrics-text; version=1.0.0; "
                          "charset=utf-8\r\n") && strstr(out, "Vary: Accept"),
              "OpenMetrics /metrics: %.300s", out);
    if (!body)
        return;
    body += 4;
    char why[512] = "";
    CHECK_MSG(svc_openmetrics_check(body, why, sizeof why), "%s", why);
    CHECK(strstr(body, "\n# TYPE giant_http_errors counter\n") != NULL);
    CHECK(svc_metric(body, "giant_http_errors_total{code=\"other\"}") == 0);
    static const char probe[] =
        "/usr/bin/python3 -c 'import prometheus_client.openmetrics.parser' 2>/dev/null";
    if (system(probe) != 0) {
        printf("test_http_limits: OpenMetrics parser check skipped: no prometheus_client for "
               "/usr/bin/python3 (Debian: python3-prometheus-client)\n");
        return;
    }
    char path[] = "/tmp/giant-openmetrics-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK(write(fd, body, strlen(body)) == (ssize_t)strlen(body));
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c 'import sys\n"
             "from prometheus_client.openmetrics.parser import text_string_to_metric_families as f\n"
             "n = sum(1 for _ in f(open(sys.argv[1]).read()))\n"
             "assert n > 10, n' %s", path);
    CHECK_MSG(system(cmd) == 0, "the OpenMetrics parser refused %s", path);
    unlink(path);
}

static void check_metrics(int port, int admin_port)
{
    static const char healthz_2xx[] =
        "giant_http_request_duration_seconds_count{method=\"GET\",route=\"/healthz\","
        "class=\"2xx\"}";
    static const char runs_4xx[] =
        "giant_http_request_duration_seconds_count{method=\"GET\",route=\"/v1/runs/{id}\","
        "class=\"4xx\"}";
    static const char unmatched_4xx[] =
        "giant_http_request_duration_seconds_count{method=\"any\",route=\"unmatched\","
        "class=\"4xx\"}";
    const char *text = scrape(port);
    CHECK_MSG(text != NULL, "/metrics: %.300s", out);
    if (!text)
        return;
    double before = svc_metric(text, healthz_2xx);
    for (int i = 0; i < 5; i++) {
        static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        exchange(port, req, sizeof req - 1, out, sizeof out);
    }
    static const char missing[] =
        "GET /v1/runs/987654 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    exchange(port, missing, sizeof missing - 1, out, sizeof out);
    CHECK_MSG(strstr(out, " 404 "), "%.200s", out);
    static const char nowhere[] =
        "GET /no/such/path HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    exchange(port, nowhere, sizeof nowhere - 1, out, sizeof out);
    /* The admin listener serves the same text. */
    char why[512] = "";
    text = scrape(admin_port);
    CHECK_MSG(text && svc_prometheus_check(text, why, sizeof why), "admin /metrics: %s %.300s",
              why, out);
    text = scrape(port);
    CHECK_MSG(text != NULL, "/metrics: %.300s", out);
    if (!text)
        return;
    CHECK_MSG(svc_prometheus_check(text, why, sizeof why), "%s", why);
    CHECK_MSG(svc_metric(text, healthz_2xx) >= (before < 0 ? 0 : before) + 5,
              "healthz count %.0f after %.0f", svc_metric(text, healthz_2xx), before);
    CHECK(svc_metric(text, runs_4xx) >= 1);
    CHECK(svc_metric(text, unmatched_4xx) >= 1);
    CHECK(svc_metric(text, "giant_http_errors_total{code=\"not_found\"}") >= 2);
    CHECK(svc_metric(text, "giant_http_errors_total{code=\"other\"}") == 0);
    CHECK(strstr(text, "\ngiant_build_info{version=\"") != NULL);
    /* Route templates, never a client's path. */
    CHECK(!strstr(text, "987654") && !strstr(text, "/no/such/path"));
    CHECK(svc_metric(text, "giant_http_connections") >= 1);
    CHECK(svc_metric(text, "giant_runs{status=\"queued\",device=\"none\"}") == 0);
    CHECK(svc_metric(text, "giant_runs{status=\"running\",device=\"cpu\"}") == 0);
    /* the host's memory for the CPU (a GPU only where the build reads it) */
    CHECK(svc_metric(text, "giant_device_memory_used_bytes{device=\"cpu\"}") > 0);
    CHECK(svc_metric(text, "giant_device_memory_free_bytes{device=\"cpu\"}") > 0);
    CHECK(svc_metric(text, "giant_sample_showers_by_run_total{run=\"other\"}") == 0);
    CHECK(svc_metric(text, "giant_evaluations{status=\"queued\"}") == 0);
    CHECK(svc_metric(text, "giant_sampling_jobs_in_flight") == 0);
    CHECK(svc_metric(text, "giant_sample_bytes_in_flight") == 0);
    CHECK(svc_metric(text, "giant_train_step_seconds_count{stage=\"1\"}") == 0);
    CHECK(svc_metric(text, "giant_sample_job_duration_seconds_count") == 0);
    /* The checker itself refuses what breaks the format. */
    CHECK(!svc_prometheus_check("# TYPE x gauge\nx 1\n", why, sizeof why));
    CHECK(!svc_prometheus_check("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
                                "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
                                why, sizeof why));
    CHECK(!svc_prometheus_check("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\n"
                                "h_sum 1\nh_count 1\n", why, sizeof why));
    CHECK(svc_prometheus_check("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\n"
                               "h_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n",
                               why, sizeof why));
    check_openmetrics(port);
}

/* ---------------------------------------------------------------------------
 * Headroom and the header timeout
 * ------------------------------------------------------------------------- */

/* GET /healthz on a fresh connection; 1 when it answered 200 within
 * timeout_s, with the seconds it took in *took. */
static int healthz_from(int port, int from, int timeout_s, double *took)
{
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    double t0 = gt_clock_s();
    int fd = dial(port, from);
    char buf[1024] = "";
    if (fd >= 0) {
        send_all(fd, req, sizeof req - 1);
        read_all(fd, buf, sizeof buf, timeout_s);
        close(fd);
    }
    *took = gt_clock_s() - t0;
    return strncmp(buf, "HTTP/1.1 200 ", 13) == 0;
}

static int healthz(int port, int timeout_s, double *took)
{
    return healthz_from(port, 0, timeout_s, took);
}

/* Waits up to timeout_s for every socket in fds to be closed by the
 * server; returns how many were. */
static int await_closed(int *fds, int n, double timeout_s)
{
    int closed = 0;
    double end = gt_clock_s() + timeout_s;
    while (closed < n && gt_clock_s() < end) {
        for (int i = 0; i < n; i++) {
            if (fds[i] < 0)
                continue;
            struct pollfd p = { fds[i], POLLIN, 0 };
            char c;
            if (poll(&p, 1, 0) == 1 && recv(fds[i], &c, 1, MSG_DONTWAIT) <= 0) {
                close(fds[i]);
                fds[i] = -1;
                closed++;
            }
        }
        svc_sleep_ms(100);
    }
    return closed;
}

static void check_headroom(svc *s, int admin_port)
{
    /* Half-open: a request line and one header, never the blank line. */
    static const char half[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
    int fds[FLOOD_ADDRESSES * PER_IP], opened = 0;
    for (int a = 0; a < FLOOD_ADDRESSES; a++)
        for (int i = 0; i < PER_IP; i++) {
            int fd = dial(s->port, 2 + a);
            if (fd >= 0 && send_all(fd, half, sizeof half - 1) == 0)
                fds[opened++] = fd;
            else if (fd >= 0)
                close(fd);
        }
    double t_flood = gt_clock_s();
    /* More than --max-connections: the API's port is full, the admin
     * listener is not. */
    CHECK_MSG(opened > MAX_CONNECTIONS, "only %d half-open connections", opened);
    double took;
    CHECK_MSG(healthz(admin_port, 10, &took) && took < 5.0,
              "admin /healthz under the flood: %.1f s", took);
    char metrics_req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    exchange(admin_port, metrics_req, strlen(metrics_req), out, sizeof out);
    CHECK_MSG(strncmp(out, "HTTP/1.1 200 ", 13) == 0 && strstr(out, "giant_http_connections"),
              "admin /metrics under the flood: %.300s", out);

    /* The header timeout closes them: the accepted ones after about 2 s,
     * the ones waiting in the backlog 2 s after they are accepted. */
    int closed = await_closed(fds, opened, 30.0);
    double t_closed = gt_clock_s() - t_flood;
    CHECK_MSG(closed == opened, "%d of %d half-open connections closed in %.0f s", closed,
              opened, t_closed);
    CHECK_MSG(t_closed >= HEADER_TIMEOUT_S - 0.5, "closed after %.1f s, before the timeout",
              t_closed);
    for (int i = 0; i < opened; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    CHECK_MSG(healthz(s->port, 10, &took), "API /healthz after the flood: %.1f s", took);

    /* An idle keep-alive connection has --timeout (30 s), not the header
     * timeout: a second request 4 s after the first is still answered. */
    int fd = dial(s->port, 0);
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    char buf[1024];
    CHECK(fd >= 0 && send_all(fd, req, sizeof req - 1) == 0);
    struct timeval tv = { 5, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t r = recv(fd, buf, sizeof buf - 1, 0);
    CHECK(r > 0 && strncmp(buf, "HTTP/1.1 200 ", 13) == 0);
    svc_sleep_ms(2000 * HEADER_TIMEOUT_S);
    CHECK(send_all(fd, req, sizeof req - 1) == 0);
    r = recv(fd, buf, sizeof buf - 1, 0);
    CHECK_MSG(r > 0 && strncmp(buf, "HTTP/1.1 200 ", 13) == 0,
              "a keep-alive connection idle for %d s was closed", 2 * HEADER_TIMEOUT_S);
    close(fd);
}

/* Whether the server has closed fd (EOF or reset waiting to be read). */
static int peer_closed(int fd)
{
    struct pollfd p = { fd, POLLIN, 0 };
    char c;
    return poll(&p, 1, 0) == 1 && recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

/* Headers that trickle in, one byte every 400 ms (under the 2 s inactivity
 * timeout, so MHD's own timeout never fires): the connection is cut at its
 * header deadline, counted from the accept, whatever keeps arriving.  Then
 * the same on a kept-alive connection's second request, whose deadline is
 * the idle timeout (30 s here) from the first reply: not cut at 2 s. */
static void check_slow_headers(int port)
{
    static const char line[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaa"
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    int fd = dial(port, 0);
    CHECK(fd >= 0);
    double t0 = gt_clock_s(), t_cut = -1;
    for (size_t i = 0; fd >= 0 && i < sizeof line - 1 && gt_clock_s() - t0 < 5.0 * HEADER_TIMEOUT_S;
         i++) {
        if (send(fd, line + i, 1, MSG_NOSIGNAL) != 1 || peer_closed(fd)) {
            t_cut = gt_clock_s() - t0;
            break;
        }
        svc_sleep_ms(400);
    }
    CHECK_MSG(t_cut >= HEADER_TIMEOUT_S - 0.5 && t_cut <= HEADER_TIMEOUT_S + 2.0,
              "headers trickling in were cut after %.1f s (deadline %d s; -1: never)", t_cut,
              HEADER_TIMEOUT_S);
    if (fd >= 0)
        close(fd);
    char out[65536];
    static const char mreq[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    exchange(port, mreq, sizeof mreq - 1, out, sizeof out);
    const char *body = strstr(out, "\r\n\r\n");
    CHECK_MSG(body && svc_metric(body, "giant_http_slow_headers_closed_total") >= 1,
              "the cut connection is not counted: %.200s", body ? body : out);

    /* a kept-alive connection: the second request trickles in for longer
     * than the header timeout and is still answered */
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    char buf[1024];
    fd = dial(port, 0);
    CHECK(fd >= 0 && send_all(fd, req, sizeof req - 1) == 0);
    struct timeval tv = { 5, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t r = recv(fd, buf, sizeof buf - 1, 0);
    CHECK(r > 0 && strncmp(buf, "HTTP/1.1 200 ", 13) == 0);
    double t1 = gt_clock_s();
    int ok = 1;
    for (size_t i = 0; ok && i < sizeof req - 1; i++) {
        ok = send(fd, req + i, 1, MSG_NOSIGNAL) == 1;
        if (gt_clock_s() - t1 < 2.0 * HEADER_TIMEOUT_S)
            svc_sleep_ms(200);
    }
    r = ok ? recv(fd, buf, sizeof buf - 1, 0) : -1;
    CHECK_MSG(r > 0 && strncmp(buf, "HTTP/1.1 200 ", 13) == 0,
              "a second request trickling in over %.1f s was not answered",
              gt_clock_s() - t1);
    close(fd);
}

/* ---------------------------------------------------------------------------
 * Event streams per address
 * ------------------------------------------------------------------------- */

/* Opens GET /test/stream from 127.0.0.<from>; the socket once the reply's
 * head arrived (its first bytes in head), else -1 (closed). */
static int open_stream(int port, int from, char *head, size_t cap)
{
    static const char req[] = "GET /test/stream HTTP/1.1\r\nHost: x\r\n\r\n";
    int fd = dial(port, from);
    head[0] = '\0';
    if (fd < 0 || send_all(fd, req, sizeof req - 1) != 0)
        return fd < 0 ? -1 : (close(fd), -1);
    struct timeval tv = { 5, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t r = recv(fd, head, cap - 1, 0);
    head[r > 0 ? r : 0] = '\0';
    return fd;
}

static void check_streams(int port)
{
    char head[4096];
    int fds[STREAMS_PER_IP + 1];
    for (int i = 0; i < STREAMS_PER_IP; i++) {
        fds[i] = open_stream(port, 5, head, sizeof head);
        CHECK_MSG(strncmp(head, "HTTP/1.1 200 ", 13) == 0, "stream %d: %.200s", i, head);
    }
    /* One more from that address is refused as JSON, with Retry-After. */
    fds[STREAMS_PER_IP] = open_stream(port, 5, head, sizeof head);
    CHECK_MSG(is_json_error(head, 429, "rate_limited") && strstr(head, "Retry-After: "),
              "stream past the limit: %.300s", head);
    close(fds[STREAMS_PER_IP]);
    /* The address still has connections for everything else. */
    double took;
    CHECK_MSG(healthz_from(port, 5, 10, &took) && took < 5.0,
              "/healthz from an address at its stream limit: %.1f s", took);
    /* A stream that ends gives its place back. */
    close(fds[0]);
    int again = -1;
    for (int k = 0; k < 50 && again < 0; k++) {
        svc_sleep_ms(100);
        int fd = open_stream(port, 5, head, sizeof head);
        if (strncmp(head, "HTTP/1.1 200 ", 13) == 0)
            again = fd;
        else if (fd >= 0)
            close(fd);
    }
    CHECK_MSG(again >= 0, "no stream after one closed: %.200s", head);
    fds[0] = again;
    for (int i = 0; i < STREAMS_PER_IP; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

int main(void)
{
    if (!getenv("GIANT_BINARY_DIR"))
        check_skip("GIANT_BINARY_DIR not set (run through ctest)");
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "limits-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char db[256], data[256];
    snprintf(db, sizeof db, "%s/giant.db", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    char header_timeout[16], max_conn[16], per_ip[16];
    snprintf(header_timeout, sizeof header_timeout, "%d", HEADER_TIMEOUT_S);
    snprintf(max_conn, sizeof max_conn, "%d", MAX_CONNECTIONS);
    snprintf(per_ip, sizeof per_ip, "%d", PER_IP);
    char streams[16];
    snprintf(streams, sizeof streams, "%d", STREAMS_PER_IP);
    /* giant_test_server: giant plus test routes (an endless /test/stream) */
    char *argv[] = { "./giant_test_server", "serve", "--listen", "127.0.0.1:0", "--db", db,
                     "--data-dir", data, "--default-dataset", "0", "--threads", "2",
                     "--timeout", "30", "--header-timeout", header_timeout,
                     "--max-connections", max_conn, "--per-ip-connections", per_ip,
                     "--max-streams-per-ip", streams, "--admin-listen", "127.0.0.1:0",
                     "--shutdown-grace", "5", NULL };
    svc s;
    int started = svc_launch(&s, argv) == 0;
    CHECK_MSG(started, "giant serve did not start:\n%s", s.log ? s.log : "");
    static const char needle[] = "msg=admin_listening addr=127.0.0.1:";
    int admin_port = 0;
    if (started && svc_log_wait(&s, needle, 10000)) {
        pthread_mutex_lock(&s.mu);
        admin_port = atoi(strstr(s.log, needle) + strlen(needle));
        pthread_mutex_unlock(&s.mu);
    }
    CHECK_MSG(admin_port > 0, "no admin listener:\n%s", s.log ? s.log : "");
    if (started && admin_port > 0) {
        check_metrics(s.port, admin_port);
        check_json_errors(s.port);
        check_gate_errors(s.port);
        check_headroom(&s, admin_port);
        check_slow_headers(s.port);
        check_streams(s.port);
        CHECK_EQ_INT(svc_stop(&s, SIGTERM, 30000), 0);
    }
    svc_check_done(&s);
    svc_check_cleanup(dir);
    return check_finish();
}
