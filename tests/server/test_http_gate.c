/* http_gate: the judgement of a first request head (http_gate_check) on a
 * table of heads libmicrohttpd takes and heads it would answer in HTML,
 * each also fed byte by byte (a final answer must not change as bytes
 * arrive); the reply's format; and the gate itself on a loopback socket:
 * a good head handed over with its bytes unread, a bad one answered as
 * JSON, a slow one cut at the header deadline, the per-address limit, and
 * a quiesced gate refusing connections. */
#include "check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http_gate.h"

static const http_gate_limits lim = { 200, 600, 6, 5 };

typedef struct head_case {
    const char *what, *head;
    int rc;
    unsigned status;
    const char *code;
} head_case;

static const head_case cases[] = {
    { "plain GET", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", HTTP_GATE_PASS, 0, NULL },
    { "HTTP/1.0, no headers", "GET / HTTP/1.0\r\n\r\n", HTTP_GATE_PASS, 0, NULL },
    { "HTTP/1.2 (libmicrohttpd reads it as 1.1)", "GET / HTTP/1.2\r\n\r\n", HTTP_GATE_PASS, 0,
      NULL },
    { "empty lines first", "\r\n\n\r\nGET / HTTP/1.1\r\n\r\n", HTTP_GATE_PASS, 0, NULL },
    { "bare LF line ends", "GET / HTTP/1.1\nHost: x\n\n", HTTP_GATE_PASS, 0, NULL },
    { "a folded header", "GET / HTTP/1.1\r\nX: 1\r\n  2\r\n\r\n", HTTP_GATE_PASS, 0, NULL },
    { "spaces around the target", "GET   /a  HTTP/1.1\r\n\r\n", HTTP_GATE_PASS, 0, NULL },
    { "a body after the head", "POST /v1/runs HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
      HTTP_GATE_PASS, 0, NULL },
    { "two equal lengths", "POST / HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\n",
      HTTP_GATE_PASS, 0, NULL },
    { "a length with a tab before it", "POST / HTTP/1.1\r\nContent-Length:\t7\r\n\r\n",
      HTTP_GATE_PASS, 0, NULL },
    { "five cookies", "GET / HTTP/1.1\r\nCookie: a=1; b=2; c=3\r\nCookie: d=4; e=5\r\n\r\n",
      HTTP_GATE_PASS, 0, NULL },
    { "six headers", "GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\n\r\n",
      HTTP_GATE_PASS, 0, NULL },
    { "Content-Length: -1", "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", HTTP_GATE_REFUSE,
      400, "bad_request" },
    { "Content-Length: +0", "POST / HTTP/1.1\r\nContent-Length: +0\r\n\r\n", HTTP_GATE_REFUSE,
      400, "bad_request" },
    { "a space after the length", "POST / HTTP/1.1\r\nContent-Length: 0 \r\n\r\n",
      HTTP_GATE_REFUSE, 400, "bad_request" },
    { "an empty length", "POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", HTTP_GATE_REFUSE, 400,
      "bad_request" },
    { "two lengths", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
      HTTP_GATE_REFUSE, 400, "bad_request" },
    { "2^64", "POST / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n",
      HTTP_GATE_REFUSE, 413, "body_too_large" },
    { "no version", "GET /healthz\r\n\r\n", HTTP_GATE_REFUSE, 400, "bad_request" },
    { "one word", "GET\r\n\r\n", HTTP_GATE_REFUSE, 400, "bad_request" },
    { "a space first", " / HTTP/1.1\r\n\r\n", HTTP_GATE_REFUSE, 400, "bad_request" },
    { "a trailing space", "GET / HTTP/1.1 \r\n\r\n", HTTP_GATE_REFUSE, 400, "bad_request" },
    { "lower-case version", "GET / http/1.1\r\n\r\n", HTTP_GATE_REFUSE, 400, "bad_request" },
    { "HTTP/1.10", "GET / HTTP/1.10\r\n\r\n", HTTP_GATE_REFUSE, 400, "bad_request" },
    { "HTTP/3", "GET / HTTP/3\r\n\r\n", HTTP_GATE_REFUSE, 400, "bad_request" },
    { "a method with '('", "G(T / HTTP/1.1\r\n\r\n", HTTP_GATE_REFUSE, 400, "bad_request" },
    { "a bare CR", "GET / HTTP/1.1\rHost: x\r\n\r\n", HTTP_GATE_REFUSE, 400, "bad_request" },
    { "a NUL in a header", "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", HTTP_GATE_REFUSE, 400,
      "bad_request" },
    { "a header without ':'", "GET / HTTP/1.1\r\nHost x\r\n\r\n", HTTP_GATE_REFUSE, 400,
      "bad_request" },
    { "HTTP/0.9", "GET / HTTP/0.9\r\n\r\n", HTTP_GATE_REFUSE, 505, "version_not_supported" },
    { "HTTP/2.0", "GET / HTTP/2.0\r\n\r\n", HTTP_GATE_REFUSE, 505, "version_not_supported" },
    { "the HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", HTTP_GATE_REFUSE, 505,
      "version_not_supported" },
    { "a TLS ClientHello", "\x16\x03\x01\x02\x00\x01", HTTP_GATE_REFUSE, 400, "bad_request" },
    { "seven headers", "GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\n"
      "G: 1\r\n\r\n", HTTP_GATE_REFUSE, 431, "headers_too_large" },
    { "six cookies", "GET / HTTP/1.1\r\nCookie: a=1; b=2; c=3\r\nCookie: d=4; e=5; f=6\r\n\r\n",
      HTTP_GATE_REFUSE, 431, "headers_too_large" },
};

/* The NUL case has a byte strlen would stop at. */
static size_t head_len(const head_case *c)
{
    if (strcmp(c->what, "a NUL in a header") == 0)
        return sizeof "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n" - 1;
    return strlen(c->head);
}

static void check_table(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const head_case *c = &cases[i];
        size_t n = head_len(c);
        http_gate_verdict v;
        int rc = http_gate_check(c->head, n, 0, &lim, &v);
        CHECK_MSG(rc == c->rc, "%s: %d, want %d", c->what, rc, c->rc);
        if (rc == HTTP_GATE_REFUSE && c->rc == HTTP_GATE_REFUSE)
            CHECK_MSG(v.status == c->status && strcmp(v.code, c->code) == 0 && v.message[0],
                      "%s: %u %s (%s)", c->what, v.status, v.code, v.message);
        /* byte by byte: MORE until the answer, then the same answer */
        int decided = 0;
        for (size_t k = 0; k < n; k++) {
            http_gate_verdict pv;
            int pr = http_gate_check(c->head, k, 0, &lim, &pv);
            if (pr == HTTP_GATE_MORE)
                continue;
            decided = 1;
            CHECK_MSG(pr == c->rc && (pr != HTTP_GATE_REFUSE || pv.status == c->status),
                      "%s: prefix %zu answers %d", c->what, k, pr);
        }
        /* the head ends exactly where the table's does for a pass */
        if (c->rc == HTTP_GATE_PASS && !strstr(c->what, "body"))
            CHECK_MSG(!decided, "%s: passed before its end", c->what);
        /* told no more will come, a prefix without its end is refused */
        if (n > 1) {
            rc = http_gate_check(c->head, n - 1, 1, &lim, &v);
            CHECK_MSG(rc != HTTP_GATE_MORE, "%s: MORE when complete", c->what);
        }
    }
    /* limits: a request line over max_line is 414 as soon as it is seen */
    char big[2048];
    memset(big, 'a', sizeof big);
    memcpy(big, "GET /", 5);
    http_gate_verdict v;
    CHECK_EQ_INT(http_gate_check(big, 300, 0, &lim, &v), HTTP_GATE_REFUSE);
    CHECK(v.status == 414 && strcmp(v.code, "uri_too_long") == 0);
    CHECK_EQ_INT(http_gate_check(big, 150, 0, &lim, &v), HTTP_GATE_MORE);
    /* a head over max_head, with its end unseen: 431 */
    int n = snprintf(big, sizeof big, "GET / HTTP/1.1\r\nX: ");
    memset(big + n, 'b', sizeof big - (size_t)n);
    CHECK_EQ_INT(http_gate_check(big, 700, 0, &lim, &v), HTTP_GATE_REFUSE);
    CHECK(v.status == 431 && strcmp(v.code, "headers_too_large") == 0);
    CHECK_EQ_INT(http_gate_check(big, 500, 0, &lim, &v), HTTP_GATE_MORE);
    /* nothing, or empty lines only, then the end: no reply at all */
    CHECK_EQ_INT(http_gate_check("", 0, 1, &lim, &v), HTTP_GATE_DROP);
    CHECK_EQ_INT(http_gate_check("\r\n\r\n", 4, 1, &lim, &v), HTTP_GATE_DROP);
    CHECK_EQ_INT(http_gate_check("\r\n\r\n", 4, 0, &lim, &v), HTTP_GATE_MORE);
    CHECK_EQ_INT(http_gate_check("GET / HT", 8, 1, &lim, &v), HTTP_GATE_REFUSE);
    CHECK(v.status == 400);
}

static void check_reply(void)
{
    http_gate_verdict v = { 505, "version_not_supported", "HTTP/2 \"and\" later" };
    char out[512];
    size_t len = http_gate_reply(&v, out, sizeof out);
    CHECK(len > 0 && len == strlen(out));
    CHECK(strncmp(out, "HTTP/1.1 505 HTTP Version Not Supported\r\n", 41) == 0);
    CHECK(strstr(out, "Connection: close\r\n") && strstr(out, "Content-Type: application/json"));
    const char *body = strstr(out, "\r\n\r\n");
    CHECK(body && strcmp(body + 4, "{\"error\":{\"code\":\"version_not_supported\",\"message\":"
                                   "\"HTTP/2 \\\"and\\\" later\",\"field\":null}}") == 0);
    char len_line[64];
    snprintf(len_line, sizeof len_line, "Content-Length: %zu\r\n", body ? strlen(body + 4) : 0);
    CHECK(strstr(out, len_line) != NULL);
    CHECK_EQ_INT((int)http_gate_reply(&v, out, 40), 0);   /* does not fit */
}

/* ---------------------------------------------------------------------------
 * The gate on a loopback socket
 * ------------------------------------------------------------------------- */

typedef struct seen {
    atomic_int handed, refused, slow;
    char first[64];            /* the bytes a handed-over socket still had */
} seen;

static void hand_over(void *ctx, int fd, const struct sockaddr *addr, socklen_t len)
{
    seen *s = ctx;
    (void)addr;
    (void)len;
    /* the gate consumed nothing: the head is still there to read */
    ssize_t r = recv(fd, s->first, sizeof s->first - 1, 0);
    s->first[r > 0 ? r : 0] = '\0';
    atomic_fetch_add(&s->handed, 1);   /* before the reply the client waits for */
    static const char ok[] = "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";
    if (send(fd, ok, sizeof ok - 1, MSG_NOSIGNAL) < 0)
        perror("send");
    close(fd);
}

static void refused(void *ctx, const http_gate_verdict *v, const struct sockaddr *addr)
{
    (void)v;
    (void)addr;
    atomic_fetch_add(&((seen *)ctx)->refused, 1);
}

static void slow_closed(void *ctx, unsigned n)
{
    atomic_fetch_add(&((seen *)ctx)->slow, (int)n);
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = { 5, 0 };
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* Sends head, reads to the close. */
static void exchange(int port, const char *head, char *out, size_t cap)
{
    out[0] = '\0';
    int fd = dial(port);
    if (fd < 0)
        return;
    if (send(fd, head, strlen(head), MSG_NOSIGNAL) < 0)
        perror("send");
    size_t got = 0;
    ssize_t r;
    while (got + 1 < cap && (r = recv(fd, out + got, cap - 1 - got, 0)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    close(fd);
}

static void check_gate(void)
{
    seen s;
    memset(&s, 0, sizeof s);
    http_gate_config cfg = { lim, 1, 8, 3, hand_over, refused, slow_closed, &s };
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    http_gate *g = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(http_gate_start(&g, (struct sockaddr *)&a, sizeof a, &cfg, &err), GT_OK);
    if (!g)
        return;
    int port = http_gate_port(g);
    CHECK(port > 0);
    char out[1024];
    exchange(port, "GET /x HTTP/1.1\r\nHost: y\r\n\r\n", out, sizeof out);
    CHECK_MSG(strncmp(out, "HTTP/1.1 204 ", 13) == 0, "%s", out);
    CHECK(atomic_load(&s.handed) == 1);
    CHECK_MSG(strcmp(s.first, "GET /x HTTP/1.1\r\nHost: y\r\n\r\n") == 0, "%s", s.first);
    exchange(port, "GET /x\r\n\r\n", out, sizeof out);
    CHECK_MSG(strncmp(out, "HTTP/1.1 400 Bad Request\r\n", 26) == 0 &&
              strstr(out, "\"code\":\"bad_request\""), "%s", out);
    CHECK(atomic_load(&s.refused) == 1);
    /* three waiting connections from one address take its share: a
     * fourth is closed at once; the three are cut at the 1 s deadline */
    int held[3];
    for (int i = 0; i < 3; i++) {
        held[i] = dial(port);
        if (held[i] >= 0 && send(held[i], "GET", 3, MSG_NOSIGNAL) < 0)
            perror("send");
    }
    struct timespec settle = { 0, 200 * 1000 * 1000 };
    nanosleep(&settle, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int extra = dial(port);
    char b[16];
    ssize_t r = extra >= 0 ? recv(extra, b, sizeof b, 0) : -1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK_MSG(extra >= 0 && r <= 0 && took < 0.5, "a fourth waiting connection: %zd after %.2f s",
              r, took);
    if (extra >= 0)
        close(extra);
    struct timespec wait = { 1, 600 * 1000 * 1000 };
    nanosleep(&wait, NULL);
    for (int i = 0; i < 3; i++) {
        CHECK(held[i] >= 0 && recv(held[i], b, sizeof b, 0) <= 0);
        if (held[i] >= 0)
            close(held[i]);
    }
    CHECK_MSG(atomic_load(&s.slow) == 3, "slow closed %d", atomic_load(&s.slow));
    /* the address has its share back */
    exchange(port, "GET /y HTTP/1.1\r\n\r\n", out, sizeof out);
    CHECK_MSG(strncmp(out, "HTTP/1.1 204 ", 13) == 0, "%s", out);
    http_gate_quiesce(g);
    http_gate_quiesce(g);   /* idempotent */
    CHECK_MSG(dial(port) < 0, "a quiesced gate still accepts");
    http_gate_free(g);
}

int main(void)
{
    check_table();
    check_reply();
    check_gate();
    return check_finish();
}
