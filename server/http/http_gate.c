#define _GNU_SOURCE   /* accept4 */

#include "http_gate.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "gt_clock.h"

/* ---------------------------------------------------------------------------
 * The judgement of a head
 * ------------------------------------------------------------------------- */

/* RFC 9110's tchar: what a method (and a field name) is made of. */
static int is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int is_ctl(unsigned char c) { return c < 0x20 || c == 0x7f; }

static int refuse(http_gate_verdict *v, unsigned status, const char *code, const char *msg)
{
    v->status = status;
    v->code = code;
    snprintf(v->message, sizeof v->message, "%s", msg);
    return HTTP_GATE_REFUSE;
}

static int bad(http_gate_verdict *v, const char *msg)
{
    return refuse(v, 400, "bad_request", msg);
}

static int too_large(http_gate_verdict *v, const char *msg)
{
    return refuse(v, 431, "headers_too_large", msg);
}

/* The request line [s, s + len), its line end excluded.  The grammar is
 * RFC 9112's, as libmicrohttpd 0.9.75 reads it: the version is what
 * follows the last space, the target what lies between the method's space
 * (and any more spaces) and that one; "HTTP/1.x" is spoken, "HTTP/0.x" and
 * "HTTP/2.0" on are answered 505 as it does, anything else 400. */
static int check_request_line(const char *s, size_t len, http_gate_verdict *v)
{
    for (size_t i = 0; i < len; i++)
        if (is_ctl((unsigned char)s[i]))
            return bad(v, "the request line holds a control character");
    const char *sp = memchr(s, ' ', len);
    if (!sp)
        return bad(v, "the request line needs a method, a target and an HTTP version");
    for (const char *p = s; p < sp; p++)
        if (!is_tchar((unsigned char)*p))
            return bad(v, "the request's method is not a token");
    const char *target = sp;
    while (target < s + len && *target == ' ')
        target++;
    const char *last = s + len;
    while (last > target && last[-1] != ' ')
        last--;
    /* last: just after the last space, or target when none follows it */
    if (last == target)
        return bad(v, "the request line needs an HTTP version (HTTP/1.1) after its target");
    size_t vlen = (size_t)(s + len - last);
    if (vlen != 8 || memcmp(last, "HTTP/", 5) != 0 || last[5] < '0' || last[5] > '9' ||
        last[6] != '.' || last[7] < '0' || last[7] > '9')
        return bad(v, "the request's HTTP version is malformed (HTTP/1.1 expected)");
    if (last[5] == '0')
        return refuse(v, 505, "version_not_supported",
                      "HTTP/0.x is not supported: this service speaks HTTP/1.0 and HTTP/1.1");
    if (last[5] >= '2')
        return refuse(v, 505, "version_not_supported",
                      "HTTP/2 and later are not supported: this service speaks HTTP/1.1 "
                      "(put a reverse proxy in front for HTTP/2 or TLS)");
    return HTTP_GATE_PASS;
}

/* The field name [s, colon) equals name, ignoring case. */
static int field_is(const char *s, const char *colon, const char *name)
{
    size_t n = strlen(name);
    return (size_t)(colon - s) == n && strncasecmp(s, name, n) == 0;
}

typedef struct head_state {
    unsigned fields, cookies;
    int have_length;
    uint64_t length;
} head_state;

/* One header field line [s, s + len), line end excluded. */
static int check_field(const char *s, size_t len, head_state *h, const http_gate_limits *lim,
                       http_gate_verdict *v)
{
    for (size_t i = 0; i < len; i++)
        if (is_ctl((unsigned char)s[i]) && s[i] != '\t')
            return bad(v, "a header field holds a control character");
    if (s[0] == ' ' || s[0] == '\t')
        return HTTP_GATE_MORE;   /* a folded continuation (obs-fold), as libmicrohttpd takes it */
    const char *colon = memchr(s, ':', len);
    if (!colon)
        return bad(v, "a header field has no ':'");
    if (++h->fields > lim->max_fields) {
        snprintf(v->message, sizeof v->message, "over %u request headers", lim->max_fields);
        v->status = 431;
        v->code = "headers_too_large";
        return HTTP_GATE_REFUSE;
    }
    const char *val = colon + 1, *end = s + len;
    while (val < end && (*val == ' ' || *val == '\t'))
        val++;
    if (field_is(s, colon, "Content-Length")) {
        /* digits only, as libmicrohttpd parses it: "-1", "+0" and "0 " are
         * refused by it too; one past 2^64 - 1 is its 413 */
        if (val == end)
            return bad(v, "Content-Length is empty");
        uint64_t x = 0;
        for (const char *p = val; p < end; p++) {
            if (*p < '0' || *p > '9')
                return bad(v, "Content-Length is not a decimal number of bytes");
            unsigned d = (unsigned)(*p - '0');
            if (x > (UINT64_MAX - d) / 10)
                return refuse(v, 413, "body_too_large", "Content-Length is past 2^64 - 1");
            x = x * 10 + d;
        }
        if (h->have_length && x != h->length)
            return bad(v, "two Content-Length fields with different values");
        h->have_length = 1;
        h->length = x;
    } else if (field_is(s, colon, "Cookie")) {
        /* libmicrohttpd keeps a record per cookie in the connection's
         * memory; thousands of tiny ones fill it before any callback */
        h->cookies += 1;
        for (const char *p = val; p < end; p++)
            h->cookies += *p == ';';
        if (h->cookies > lim->max_cookies) {
            snprintf(v->message, sizeof v->message, "over %u cookies", lim->max_cookies);
            v->status = 431;
            v->code = "headers_too_large";
            return HTTP_GATE_REFUSE;
        }
    }
    return HTTP_GATE_MORE;
}

int http_gate_check(const char *buf, size_t n, int complete, const http_gate_limits *lim,
                    http_gate_verdict *v)
{
    /* Empty lines before the request line are skipped (RFC 9112 2.2). */
    size_t i = 0;
    while (i < n && (buf[i] == '\r' || buf[i] == '\n')) {
        if (buf[i] == '\r' && i + 1 < n && buf[i + 1] != '\n')
            return bad(v, "a bare CR before the request line");
        i++;
    }
    if (i == n) {
        if (n > lim->max_head)
            return bad(v, "only empty lines, and too many of them");
        /* nothing sent, or empty lines only: no request to answer */
        return complete ? HTTP_GATE_DROP : HTTP_GATE_MORE;
    }
    /* Decided on the first byte: a TLS handshake or any other protocol. */
    if (!is_tchar((unsigned char)buf[i]))
        return bad(v, "not an HTTP/1.1 request (TLS, if that is what this is, belongs to a "
                      "reverse proxy in front of the service)");
    const char *lf = memchr(buf + i, '\n', n - i);
    if (!lf) {
        if (n - i > lim->max_line + 1)
            return refuse(v, 414, "uri_too_long", "the request line is over its limit");
        return complete ? bad(v, "the request line is not complete") : HTTP_GATE_MORE;
    }
    size_t line_end = (size_t)(lf - buf), len = line_end - i;
    if (len && buf[line_end - 1] == '\r')
        len--;
    if (len > lim->max_line)
        return refuse(v, 414, "uri_too_long", "the request line is over its limit");
    int rc = check_request_line(buf + i, len, v);
    if (rc != HTTP_GATE_PASS)
        return rc;
    head_state h = { 0, 0, 0, 0 };
    size_t pos = line_end + 1;
    for (;;) {
        lf = pos < n ? memchr(buf + pos, '\n', n - pos) : NULL;
        if (!lf) {
            if (n > lim->max_head)
                return too_large(v, "the request's head is over its limit");
            return complete ? bad(v, "the request's head is not complete") : HTTP_GATE_MORE;
        }
        size_t e = (size_t)(lf - buf), flen = e - pos;
        if (flen && buf[e - 1] == '\r')
            flen--;
        if (e + 1 > lim->max_head)
            return too_large(v, "the request's head is over its limit");
        if (flen == 0)
            return HTTP_GATE_PASS;
        rc = check_field(buf + pos, flen, &h, lim, v);
        if (rc != HTTP_GATE_MORE)
            return rc;
        pos = e + 1;
    }
}

static const char *reason(unsigned status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

size_t http_gate_reply(const http_gate_verdict *v, char *out, size_t cap)
{
    json_t *body = json_pack("{s:{s:s, s:s, s:n}}", "error", "code", v->code, "message",
                             v->message, "field");
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text)
        return 0;
    int w = snprintf(out, cap,
                     "HTTP/1.1 %u %s\r\nConnection: close\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     v->status, reason(v->status), strlen(text), text);
    free(text);
    return w > 0 && (size_t)w < cap ? (size_t)w : 0;
}

/* ---------------------------------------------------------------------------
 * The gate's thread
 * ------------------------------------------------------------------------- */

/* A connection at the gate: waiting for its head, or refused and reading
 * what the peer still sends until it closes (closing the socket with
 * unread bytes would send a reset, which can destroy the reply before the
 * peer reads it). */
typedef struct gate_conn {
    int fd;                    /* -1: a free slot                           */
    int closing;
    double deadline;           /* monotonic seconds; 0 = none               */
    struct sockaddr_storage addr;
    socklen_t addrlen;
} gate_conn;

/* The seconds a refused connection has to read its reply and close. */
#define GATE_LINGER_S 2.0

struct http_gate {
    http_gate_config cfg;
    int listen_fd, epoll_fd, wake_fd;
    int port;
    gate_conn *conns;
    unsigned nconns;
    char *peek;
    size_t peek_cap;
    pthread_t thread;
    atomic_int stop, quiesce;
    pthread_mutex_t quiesce_mu;   /* the listening socket is shut down once */
};

/* The address a connection came from, as 16 comparable bytes. */
static void addr_key(const struct sockaddr_storage *a, unsigned char key[16])
{
    memset(key, 0, 16);
    if (a->ss_family == AF_INET)
        memcpy(key, &((const struct sockaddr_in *)a)->sin_addr, 4);
    else if (a->ss_family == AF_INET6)
        memcpy(key, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
}

static void conn_close(http_gate *g, gate_conn *c)
{
    epoll_ctl(g->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
}

/* Reads and drops what a refused peer sends; closes at its end. */
static void conn_drain(http_gate *g, gate_conn *c)
{
    char scratch[4096];
    for (;;) {
        ssize_t r = recv(c->fd, scratch, sizeof scratch, 0);
        if (r > 0)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r < 0 && errno == EINTR)
            continue;
        conn_close(g, c);
        return;
    }
}

static void conn_ready(http_gate *g, gate_conn *c, uint32_t events)
{
    if (c->closing) {
        conn_drain(g, c);
        return;
    }
    ssize_t r = recv(c->fd, g->peek, g->peek_cap, MSG_PEEK);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (r <= 0) {
        conn_close(g, c);
        return;
    }
    int complete = (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) || (size_t)r == g->peek_cap;
    http_gate_verdict v;
    switch (http_gate_check(g->peek, (size_t)r, complete, &g->cfg.limits, &v)) {
    case HTTP_GATE_MORE:
        return;   /* the next bytes raise another edge */
    case HTTP_GATE_PASS:
        epoll_ctl(g->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
        g->cfg.hand_over(g->cfg.ctx, c->fd, (const struct sockaddr *)&c->addr, c->addrlen);
        c->fd = -1;
        return;
    case HTTP_GATE_DROP:
        conn_close(g, c);
        return;
    default:
        break;
    }
    char reply[512];
    size_t len = http_gate_reply(&v, reply, sizeof reply);
    /* a fresh socket's send buffer takes half a kilobyte at once */
    if (len && send(c->fd, reply, len, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)len) {
        g->cfg.refused(g->cfg.ctx, &v, (const struct sockaddr *)&c->addr);
        shutdown(c->fd, SHUT_WR);
        c->closing = 1;
        c->deadline = gt_clock_s() + GATE_LINGER_S;
        conn_drain(g, c);
    } else {
        conn_close(g, c);
    }
}

static void accept_all(http_gate *g)
{
    for (;;) {
        struct sockaddr_storage a;
        socklen_t al = sizeof a;
        int fd = accept4(g->listen_fd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE) {
                /* out of descriptors: the listening socket stays readable,
                 * so without a pause the thread would spin until one is
                 * closed; the backlog waits meanwhile */
                struct timespec pause = { 0, 20 * 1000 * 1000 };
                nanosleep(&pause, NULL);
            }
            return;   /* EAGAIN, out of descriptors, or shut down */
        }
        /* a free slot, and the address under its share of them */
        unsigned char key[16], other[16];
        addr_key(&a, key);
        gate_conn *slot = NULL;
        unsigned same = 0;
        for (unsigned i = 0; i < g->nconns; i++) {
            gate_conn *c = &g->conns[i];
            if (c->fd < 0) {
                if (!slot)
                    slot = c;
                continue;
            }
            addr_key(&c->addr, other);
            same += memcmp(key, other, 16) == 0;
        }
        if (!slot || (g->cfg.max_pending_per_ip && same >= g->cfg.max_pending_per_ip)) {
            close(fd);   /* as the daemon does past its connection limits */
            continue;
        }
        if (g->peek_cap > 65536) {
            int want = (int)(2 * g->peek_cap);
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof want);
        }
        slot->fd = fd;
        slot->closing = 0;
        slot->deadline = g->cfg.header_timeout_s ? gt_clock_s() + g->cfg.header_timeout_s : 0;
        slot->addr = a;
        slot->addrlen = al;
        /* edge-triggered: the peeked bytes stay in the socket, so a level
         * would fire again at once; each new segment raises an edge, and
         * bytes already there when the socket is added raise the first */
        struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = slot };
        if (epoll_ctl(g->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            slot->fd = -1;
        }
    }
}

static void reap(http_gate *g, int everything)
{
    double now = gt_clock_s();
    unsigned slow = 0;
    for (unsigned i = 0; i < g->nconns; i++) {
        gate_conn *c = &g->conns[i];
        if (c->fd < 0 || (!everything && (c->deadline == 0 || now <= c->deadline)))
            continue;
        slow += !c->closing && !everything;
        conn_close(g, c);
    }
    if (slow)
        g->cfg.slow_closed(g->cfg.ctx, slow);
}

static void *gate_main(void *arg)
{
    http_gate *g = arg;
    struct epoll_event ev[64];
    while (!atomic_load(&g->stop)) {
        int n = epoll_wait(g->epoll_fd, ev, 64, 250);
        for (int i = 0; i < n; i++) {
            void *p = ev[i].data.ptr;
            if (p == &g->listen_fd) {
                accept_all(g);
            } else if (p == &g->wake_fd) {
                uint64_t x;
                if (read(g->wake_fd, &x, sizeof x) < 0)
                    continue;
            } else {
                gate_conn *c = p;
                if (c->fd >= 0)
                    conn_ready(g, c, ev[i].events);
            }
        }
        if (atomic_load(&g->quiesce) && g->listen_fd >= 0) {
            epoll_ctl(g->epoll_fd, EPOLL_CTL_DEL, g->listen_fd, NULL);
            close(g->listen_fd);
            g->listen_fd = -1;
            reap(g, 1);
        }
        reap(g, 0);
    }
    return NULL;
}

static int listen_on(http_gate *g, const struct sockaddr *addr, socklen_t addrlen, gt_error *err)
{
    g->listen_fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (g->listen_fd < 0)
        return gt_error_set(err, GT_EIO, "http: socket: %s", strerror(errno));
    int on = 1;
    setsockopt(g->listen_fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (addr->sa_family == AF_INET6)
        setsockopt(g->listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
    if (bind(g->listen_fd, addr, addrlen) != 0 || listen(g->listen_fd, SOMAXCONN) != 0)
        return gt_error_set(err, GT_EIO, "http: %s", strerror(errno));
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    if (getsockname(g->listen_fd, (struct sockaddr *)&bound, &bl) != 0)
        return gt_error_set(err, GT_EIO, "http: getsockname: %s", strerror(errno));
    g->port = bound.ss_family == AF_INET6
                  ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                  : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    return GT_OK;
}

int http_gate_start(http_gate **out, const struct sockaddr *addr, socklen_t addrlen,
                    const http_gate_config *cfg, gt_error *err)
{
    *out = NULL;
    http_gate *g = calloc(1, sizeof *g);
    if (!g)
        return gt_error_set(err, GT_ENOMEM, "http: out of memory");
    g->cfg = *cfg;
    g->listen_fd = g->epoll_fd = g->wake_fd = -1;
    atomic_init(&g->stop, 0);
    atomic_init(&g->quiesce, 0);
    pthread_mutex_init(&g->quiesce_mu, NULL);
    g->nconns = cfg->max_pending ? cfg->max_pending : 1;
    g->peek_cap = cfg->limits.max_head + 1;   /* one past: "over the limit" is seen */
    g->conns = calloc(g->nconns, sizeof *g->conns);
    g->peek = malloc(g->peek_cap);
    int rc = g->conns && g->peek ? GT_OK : gt_error_set(err, GT_ENOMEM, "http: out of memory");
    for (unsigned i = 0; rc == GT_OK && i < g->nconns; i++)
        g->conns[i].fd = -1;
    if (rc == GT_OK)
        rc = listen_on(g, addr, addrlen, err);
    if (rc == GT_OK) {
        g->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        g->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        struct epoll_event l = { .events = EPOLLIN, .data.ptr = &g->listen_fd };
        struct epoll_event w = { .events = EPOLLIN, .data.ptr = &g->wake_fd };
        if (g->epoll_fd < 0 || g->wake_fd < 0 ||
            epoll_ctl(g->epoll_fd, EPOLL_CTL_ADD, g->listen_fd, &l) != 0 ||
            epoll_ctl(g->epoll_fd, EPOLL_CTL_ADD, g->wake_fd, &w) != 0)
            rc = gt_error_set(err, GT_EIO, "http: epoll: %s", strerror(errno));
    }
    if (rc == GT_OK && pthread_create(&g->thread, NULL, gate_main, g) != 0)
        rc = gt_error_set(err, GT_EIO, "http: no thread for the gate");
    if (rc != GT_OK) {
        if (g->listen_fd >= 0)
            close(g->listen_fd);
        if (g->epoll_fd >= 0)
            close(g->epoll_fd);
        if (g->wake_fd >= 0)
            close(g->wake_fd);
        free(g->conns);
        free(g->peek);
        free(g);
        return rc;
    }
    *out = g;
    return GT_OK;
}

int http_gate_port(const http_gate *g) { return g->port; }

static void wake(http_gate *g)
{
    uint64_t one = 1;
    if (write(g->wake_fd, &one, sizeof one) < 0) {
        /* the counter is full: the thread is awake already */
    }
}

void http_gate_quiesce(http_gate *g)
{
    if (!g)
        return;
    /* On Linux a listening socket shut down refuses new connections at
     * once.  The gate's thread closes it once it sees the flag, so the
     * shutdown comes first, under the lock, and only once. */
    pthread_mutex_lock(&g->quiesce_mu);
    if (!atomic_load(&g->quiesce)) {
        shutdown(g->listen_fd, SHUT_RDWR);
        atomic_store(&g->quiesce, 1);
    }
    pthread_mutex_unlock(&g->quiesce_mu);
    wake(g);
}

void http_gate_free(http_gate *g)
{
    if (!g)
        return;
    atomic_store(&g->stop, 1);
    wake(g);
    pthread_join(g->thread, NULL);
    reap(g, 1);
    if (g->listen_fd >= 0)
        close(g->listen_fd);
    close(g->epoll_fd);
    close(g->wake_fd);
    pthread_mutex_destroy(&g->quiesce_mu);
    free(g->conns);
    free(g->peek);
    free(g);
}
