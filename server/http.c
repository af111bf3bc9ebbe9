#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "http_gate.h"
#include "log.h"
#include "metrics.h"
#include "numfmt.h"

/* ---------------------------------------------------------------------------
 * Router
 * ------------------------------------------------------------------------- */

typedef struct http_route {
    const char *method;
    const char *pattern;
    http_handler handler;
    int flags;
} http_route;

struct http_router {
    http_route routes[HTTP_MAX_ROUTES];
    int n;
};

http_router *http_router_new(void)
{
    return calloc(1, sizeof(http_router));
}

void http_router_free(http_router *r)
{
    free(r);
}

int http_router_add(http_router *r, const char *method, const char *pattern,
                    http_handler handler, int flags, gt_error *err)
{
    if (!r || !method || !pattern || !handler || pattern[0] != '/')
        return gt_error_set(err, GT_EINVAL, "http_router_add: bad route");
    if (r->n == HTTP_MAX_ROUTES)
        return gt_error_set(err, GT_EINVAL, "http_router_add: more than %d routes",
                            HTTP_MAX_ROUTES);
    int captures = 0;
    for (const char *p = pattern; *p; p++) {
        if (*p != '{')
            continue;
        const char *close = strchr(p, '}');
        if (!close || close == p + 1 || p[-1] != '/' || (close[1] != '/' && close[1] != '\0'))
            return gt_error_set(err, GT_EINVAL, "http_router_add: bad capture in '%s'", pattern);
        captures++;
    }
    if (captures > HTTP_MAX_PARAMS)
        return gt_error_set(err, GT_EINVAL, "http_router_add: '%s' has more than %d captures",
                            pattern, HTTP_MAX_PARAMS);
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->routes[i].method, method) == 0 &&
            strcmp(r->routes[i].pattern, pattern) == 0)
            return gt_error_set(err, GT_EINVAL, "http_router_add: %s %s added twice", method,
                                pattern);
    r->routes[r->n++] = (http_route){ method, pattern, handler, flags };
    return GT_OK;
}

int http_router_count(const http_router *r) { return r ? r->n : 0; }

void http_router_get(const http_router *r, int i, const char **method, const char **pattern)
{
    *method = r->routes[i].method;
    *pattern = r->routes[i].pattern;
}

int http_router_flags(const http_router *r, int i) { return r->routes[i].flags; }

typedef struct http_capture {
    const char *name;          /* into the pattern, not NUL-terminated */
    size_t name_len;
    char value[256];
} http_capture;

/* Matches path against pattern segment by segment; fills caps on success. */
static int route_match(const char *pattern, const char *path, http_capture *caps, int *ncaps)
{
    int n = 0;
    const char *p = pattern, *u = path;
    while (*p && *u) {
        if (*p != '/' || *u != '/')
            return 0;
        p++;
        u++;
        size_t plen = strcspn(p, "/"), ulen = strcspn(u, "/");
        if (p[0] == '{') {
            if (ulen == 0 || ulen >= sizeof caps[0].value)
                return 0;
            caps[n].name = p + 1;
            caps[n].name_len = plen - 2;
            memcpy(caps[n].value, u, ulen);
            caps[n].value[ulen] = '\0';
            n++;
        } else if (plen != ulen || memcmp(p, u, plen) != 0) {
            return 0;
        }
        p += plen;
        u += ulen;
    }
    if (*p || *u)
        return 0;
    *ncaps = n;
    return 1;
}

/* ---------------------------------------------------------------------------
 * Per-request state
 * ------------------------------------------------------------------------- */

struct http_request {
    http_server *srv;
    struct MHD_Connection *conn;
    const http_route *route;
    char method[16];
    char *path;
    http_capture caps[HTTP_MAX_PARAMS];
    int ncaps;
    int path_known;            /* some route has this path (405, not 404)    */
    char *body;                /* accumulated, NUL-terminated               */
    size_t body_len, body_cap;
    int too_large;             /* body passed the cap; rest discarded        */
    int drop_body;             /* refused (415) once the body is read       */
    int query_refused;         /* over HTTP_MAX_QUERY_*: answered 414        */
    int path_refused;          /* over HTTP_MAX_PATH_BYTES: answered 414     */
    json_t *json;
    http_resume_fn resume_fn;  /* set while suspended                       */
    int suspended;
    void *user;
    void (*user_free)(void *user);
    int auth_done;             /* the authorize hook ran (it runs once)     */
    int64_t principal;         /* http_set_principal                        */
    unsigned principal_roles;
    int replied;
    unsigned status;
    size_t bytes;
    struct timespec start;
};

/* The error codes counted by giant_http_errors_total: the API's stable
 * codes (api/openapi.json's Error.code), and "other" for any code not in
 * the list, so the label's values stay this set. */
static const char *const error_codes[] = {
    "not_found", "method_not_allowed", "uri_too_long", "headers_too_large", "length_required",
    "body_too_large", "unsupported_media_type", "malformed_json", "validation_failed",
    "conflict", "rate_limited", "unavailable", "internal", "not_acceptable",
    "too_many_showers", "unauthorized", "forbidden", "checksum_mismatch", "bad_request",
    "version_not_supported", "other",
};
#define N_ERROR_CODES (int)(sizeof error_codes / sizeof error_codes[0])

typedef struct stream_slot {
    unsigned char addr[16];    /* IPv4 in the first 4 bytes                 */
    unsigned count;            /* 0 = free                                  */
} stream_slot;

/* A connection's header clock (the socket context MHD keeps for it): the
 * headers of its first request must be complete within the header timeout
 * of its accept, and those of each later request within the idle timeout
 * of the previous reply, however the bytes trickle in.  MHD's own timeout
 * counts from the last byte, so a client sending one every few seconds
 * was never cut off.  The reaper thread shuts down the socket of one past
 * its deadline; MHD then closes the connection as it would any reset one. */
typedef struct conn_clock {
    struct conn_clock *prev, *next;
    int fd;
    int waiting;               /* for a request's headers                  */
    int reaped;                /* shut down by the reaper                   */
    double deadline;           /* monotonic seconds                         */
} conn_clock;

struct http_server {
    struct MHD_Daemon *daemon;
    http_gate *gate;           /* the listening socket; first heads judged */
    const http_router *router;
    void *app;
    size_t max_body, max_file_body;
    size_t max_header_bytes;
    unsigned idle_timeout_s, header_timeout_s;
    http_authorize_fn authorize;
    void *authorize_ctx;
    int port;
    atomic_int in_flight;
    atomic_int draining;
    atomic_ullong by_class[5];
    atomic_int connections;    /* open now (MHD_OPTION_NOTIFY_CONNECTION)  */
    atomic_ullong by_code[N_ERROR_CODES];   /* error replies by code        */
    /* Request durations by route (the router's index; n = no route) and
     * status class: the labels are the route table's templates, never a
     * client's path, so there are at most (routes + 1) x 5 series. */
    metrics_hist latency[HTTP_MAX_ROUTES + 1][5];
    /* Streams open per client address (max_streams_per_ip): at most one
     * slot per connection, so max_connections slots always suffice. */
    unsigned max_streams_per_ip;
    pthread_mutex_t streams_mu;
    stream_slot *streams;
    unsigned nstreams;
    /* the header clocks of the open connections, and their reaper */
    pthread_mutex_t clocks_mu;
    pthread_cond_t clocks_cv;
    conn_clock *clocks;
    int reaper_running, reaper_stop;
    pthread_t reaper;
    atomic_ullong slow_closed; /* connections cut at their header deadline */
};

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static conn_clock *conn_clock_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (conn_clock *)ci->socket_context : NULL;
}

/* The connection now waits for a request's headers (waiting = 1, for at
 * most `limit_s` from now; 0 = no limit), or has them (waiting = 0). */
static void conn_clock_set(http_server *srv, conn_clock *c, int waiting, unsigned limit_s)
{
    if (!c)
        return;
    pthread_mutex_lock(&srv->clocks_mu);
    c->waiting = waiting && limit_s > 0;
    c->deadline = mono_s() + (double)limit_s;
    pthread_mutex_unlock(&srv->clocks_mu);
}

static void *reaper_main(void *arg)
{
    http_server *srv = arg;
    pthread_mutex_lock(&srv->clocks_mu);
    while (!srv->reaper_stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 250 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&srv->clocks_cv, &srv->clocks_mu, &until);
        double now = mono_s();
        int cut = 0;
        for (conn_clock *c = srv->clocks; c; c = c->next)
            if (c->waiting && !c->reaped && now > c->deadline) {
                /* MHD still owns the socket (its close notification takes
                 * this lock first): a shutdown makes its next read fail */
                shutdown(c->fd, SHUT_RDWR);
                c->reaped = 1;
                cut++;
            }
        if (cut) {
            atomic_fetch_add(&srv->slow_closed, (unsigned long long)cut);
            log_msg(LOG_WARN, "httpd", "slow_headers_closed=%d", cut);
        }
    }
    pthread_mutex_unlock(&srv->clocks_mu);
    return NULL;
}

const char *http_method(const http_request *req) { return req->method; }
const char *http_path(const http_request *req) { return req->path; }
json_t *http_body_json(const http_request *req) { return req->json; }
int http_request_draining(const http_request *req) { return atomic_load(&req->srv->draining); }

int http_client_loopback(const http_request *req)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (!sa)
        return 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return 0;
}

void http_set_principal(http_request *req, int64_t id, unsigned roles)
{
    req->principal = id;
    req->principal_roles = roles;
}

int64_t http_principal(const http_request *req, unsigned *roles)
{
    if (roles)
        *roles = req->principal_roles;
    return req->principal;
}

const char *http_body(const http_request *req, size_t *len)
{
    if (len)
        *len = req->body_len;
    return req->body ? req->body : "";
}

const char *http_param(const http_request *req, const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < req->ncaps; i++)
        if (req->caps[i].name_len == n && memcmp(req->caps[i].name, name, n) == 0)
            return req->caps[i].value;
    return NULL;
}

const char *http_query(const http_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *http_header(const http_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

/* ---------------------------------------------------------------------------
 * Replies
 * ------------------------------------------------------------------------- */

static void count_error(http_server *srv, const char *code)
{
    int i = 0;
    while (i < N_ERROR_CODES - 1 && (!code || strcmp(error_codes[i], code) != 0))
        i++;
    atomic_fetch_add(&srv->by_code[i], 1);
}

static int queue(http_request *req, unsigned status, struct MHD_Response *resp,
                 const char *content_type, size_t len)
{
    if (!resp)
        return -1;
    if (content_type)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (atomic_load(&req->srv->draining))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(req->conn, status, resp);
    MHD_destroy_response(resp);
    if (status >= 100 && status < 600)
        atomic_fetch_add(&req->srv->by_class[status / 100 - 1], 1);
    req->replied = 1;
    req->status = status;
    req->bytes = len;
    return ok == MHD_YES ? 0 : -1;
}

int http_reply_json(http_request *req, unsigned status, json_t *body)
{
    if (req->replied) {
        json_decref(body);
        return -1;
    }
    if (status >= 400)
        count_error(req->srv, json_string_value(json_object_get(json_object_get(body, "error"),
                                                                "code")));
    /* reals in their shortest round-trip form (a config's 0.1, not
     * 0.10000000000000001) */
    char *text = body ? numfmt_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(body);
    if (!text) {
        /* Only out-of-memory gets here; a fixed reply needs no allocation. */
        static const char oom[] = "{\"error\":{\"code\":\"internal\",\"message\":"
                                  "\"out of memory encoding the reply\",\"field\":null}}";
        return queue(req, 500,
                     MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom,
                                                     MHD_RESPMEM_PERSISTENT),
                     "application/json", sizeof oom - 1);
    }
    size_t len = strlen(text);
    /* json_dumps allocates with malloc (Jansson's default allocator). */
    return queue(req, status, MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE),
                 "application/json", len);
}

static json_t *error_body(const char *code, const char *field, const char *message)
{
    json_t *body = json_pack("{s:{s:s, s:s, s:s?}}", "error", "code", code, "message",
                             message, "field", field);
    if (body)
        return body;
    /* Messages quote client input (paths, headers) that may not be UTF-8,
     * which JSON strings must be: fall back to an ASCII-only copy. */
    char ascii[1024];
    size_t i = 0;
    for (; message[i] && i + 1 < sizeof ascii; i++)
        ascii[i] = (unsigned char)message[i] < 0x80 ? message[i] : '?';
    ascii[i] = '\0';
    return json_pack("{s:{s:s, s:s, s:s?}}", "error", "code", code, "message", ascii,
                     "field", field);
}

int http_reply_error(http_request *req, unsigned status, const char *code, const char *field,
                     const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return http_reply_json(req, status, error_body(code, field, msg));
}

/* An error reply with extra headers (a NULL-terminated name, value list). */
__attribute__((format(printf, 5, 0)))
static int reply_error_va(http_request *req, unsigned status, const char *code,
                          const char *const *headers, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    json_t *body = error_body(code, NULL, msg);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text)
        return http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
    count_error(req->srv, code);
    return http_reply_buffer(req, status, "application/json", text, strlen(text), headers);
}

int http_reply_error_retry(http_request *req, unsigned status, const char *code,
                           int retry_after_s, const char *fmt, ...)
{
    char after[16];
    snprintf(after, sizeof after, "%d", retry_after_s > 0 ? retry_after_s : 1);
    const char *const headers[] = {"Retry-After", after, NULL};
    va_list ap;
    va_start(ap, fmt);
    int rc = reply_error_va(req, status, code, headers, fmt, ap);
    va_end(ap);
    return rc;
}

int http_reply_error_headers(http_request *req, unsigned status, const char *code,
                             const char *const *headers, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = reply_error_va(req, status, code, headers, fmt, ap);
    va_end(ap);
    return rc;
}

int http_reply_static(http_request *req, unsigned status, const char *content_type,
                      const void *data, size_t len)
{
    if (req->replied)
        return -1;
    return queue(req, status,
                 MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_PERSISTENT),
                 content_type, len);
}

int http_reply_buffer(http_request *req, unsigned status, const char *content_type,
                      void *data, size_t len, const char *const *headers)
{
    if (req->replied) {
        free(data);
        return -1;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(data);
        return -1;
    }
    for (int i = 0; headers && headers[i] && headers[i + 1]; i += 2)
        MHD_add_response_header(resp, headers[i], headers[i + 1]);
    return queue(req, status, resp, content_type, len);
}

typedef struct http_stream {
    http_stream_fn fn;
    void *user;
    void (*done)(void *user);
    http_server *srv;
    stream_slot *slot;         /* the address's count this stream holds   */
} http_stream;

/* The client's address as 16 bytes (IPv4 in the first 4); 0 when unknown. */
static int client_key(const http_request *req, unsigned char key[16])
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    memset(key, 0, 16);
    if (sa && sa->sa_family == AF_INET) {
        memcpy(key, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 1;
    }
    if (sa && sa->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return 1;
    }
    return 0;
}

/* Takes one of the address's stream slots: the slot, or NULL when the
 * address has max_streams_per_ip open already. */
static stream_slot *streams_take(http_server *srv, const unsigned char key[16])
{
    stream_slot *hit = NULL, *free_slot = NULL;
    pthread_mutex_lock(&srv->streams_mu);
    for (unsigned i = 0; i < srv->nstreams && !hit; i++) {
        if (srv->streams[i].count && memcmp(srv->streams[i].addr, key, 16) == 0)
            hit = &srv->streams[i];
        else if (!srv->streams[i].count && !free_slot)
            free_slot = &srv->streams[i];
    }
    if (!hit && free_slot) {
        memcpy(free_slot->addr, key, 16);
        hit = free_slot;
    }
    if (hit && hit->count < srv->max_streams_per_ip)
        hit->count++;
    else
        hit = NULL;
    pthread_mutex_unlock(&srv->streams_mu);
    return hit;
}

static void streams_release(http_server *srv, stream_slot *slot)
{
    pthread_mutex_lock(&srv->streams_mu);
    slot->count--;
    pthread_mutex_unlock(&srv->streams_mu);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    http_stream *s = cls;
    long n = s->fn(s->user, buf, max);
    if (n < 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    http_stream *s = cls;
    if (s->slot)
        streams_release(s->srv, s->slot);
    if (s->done)
        s->done(s->user);
    free(s);
}

int http_reply_stream(http_request *req, unsigned status, const char *content_type,
                      http_stream_fn fn, void *user, void (*done)(void *user),
                      const char *const *headers)
{
    http_stream *s = calloc(1, sizeof *s);
    if (!s || req->replied) {
        free(s);
        if (done)
            done(user);
        return -1;
    }
    s->fn = fn;
    s->user = user;
    s->done = done;
    s->srv = req->srv;
    unsigned char key[16];
    if (req->srv->streams && client_key(req, key) && !(s->slot = streams_take(req->srv, key))) {
        stream_free(s);
        return http_reply_error_retry(req, 429, HTTP_E_RATE_LIMITED, 5,
                                      "this address has %u event streams open, the most it may; "
                                      "close one or retry later",
                                      req->srv->max_streams_per_ip);
    }
    /* 4 KiB blocks: events are small, and a short block is sent at once. */
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
    if (!resp) {
        stream_free(s);
        return -1;
    }
    for (int i = 0; headers && headers[i] && headers[i + 1]; i += 2)
        MHD_add_response_header(resp, headers[i], headers[i + 1]);
    return queue(req, status, resp, content_type, 0);
}

void http_suspend(http_request *req, http_resume_fn fn)
{
    req->resume_fn = fn;
    req->suspended = 1;
    MHD_suspend_connection(req->conn);
}

void http_resume(http_request *req)
{
    MHD_resume_connection(req->conn);
}

void http_set_user(http_request *req, void *user, void (*free_fn)(void *user))
{
    req->user = user;
    req->user_free = free_fn;
}
void *http_get_user(const http_request *req) { return req->user; }

void http_server_counts(const http_server *srv, unsigned long long out[5])
{
    for (int i = 0; i < 5; i++)
        out[i] = atomic_load(&((http_server *)srv)->by_class[i]);
}

int http_server_connections(const http_server *srv)
{
    return atomic_load(&((http_server *)srv)->connections);
}

void http_server_write_metrics(const http_server *srv, metrics_buf *b)
{
    metrics_family(b, "giant_http_errors_total", "counter",
                   "JSON error replies, by the error's code (other: a code not in the API's "
                   "list).");
    for (int i = 0; i < N_ERROR_CODES; i++)
        metrics_printf(b, "giant_http_errors_total{code=\"%s\"} %llu\n", error_codes[i],
                       atomic_load(&((http_server *)srv)->by_code[i]));
    metrics_family(b, "giant_http_slow_headers_closed_total", "counter",
                   "Connections cut because a request's headers were not complete by their "
                   "deadline (the header timeout from the accept, the idle timeout after a "
                   "reply), however the bytes trickled in.");
    metrics_printf(b, "giant_http_slow_headers_closed_total %llu\n",
                   atomic_load(&((http_server *)srv)->slow_closed));
    static const char name[] = "giant_http_request_duration_seconds";
    metrics_family(b, name, "histogram",
                   "Time from a request's headers to its reply's end, by route template and "
                   "status class (unmatched: no route).");
    const http_router *r = srv->router;
    for (int i = 0; i <= r->n; i++)
        for (int c = 0; c < 5; c++) {
            const metrics_hist *h = &srv->latency[i][c];
            if (metrics_hist_count(h) == 0)
                continue;
            char route[256], labels[512];
            metrics_escape(i < r->n ? r->routes[i].pattern : "unmatched", route, sizeof route);
            snprintf(labels, sizeof labels, "method=\"%s\",route=\"%s\",class=\"%dxx\"",
                     i < r->n ? r->routes[i].method : "any", route, c + 1);
            metrics_write_hist(b, name, labels, h);
        }
}

/* 405 needs an Allow header listing the methods the path does have. */
static int reply_method_not_allowed(http_request *req)
{
    char allow[128] = "";
    const http_router *r = req->srv->router;
    http_capture caps[HTTP_MAX_PARAMS];
    int ncaps;
    for (int i = 0; i < r->n; i++) {
        if (!route_match(r->routes[i].pattern, req->path, caps, &ncaps))
            continue;
        if (strstr(allow, r->routes[i].method))
            continue;
        size_t used = strlen(allow);
        snprintf(allow + used, sizeof allow - used, "%s%s", used ? ", " : "",
                 r->routes[i].method);
    }
    char msg[512];
    snprintf(msg, sizeof msg, "%s is not allowed on %s (allowed: %s)", req->method,
             req->path, allow);
    json_t *body = error_body(HTTP_E_METHOD_NOT_ALLOWED, NULL, msg);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text)
        return http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
    size_t len = strlen(text);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (resp)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    count_error(req->srv, HTTP_E_METHOD_NOT_ALLOWED);
    return queue(req, 405, resp, "application/json", len);
}

/* ---------------------------------------------------------------------------
 * The request callback
 * ------------------------------------------------------------------------- */

static int is_json_media_type(const char *ct)
{
    if (!ct)
        return 0;
    while (*ct == ' ')
        ct++;
    static const char want[] = "application/json";
    if (strncasecmp(ct, want, sizeof want - 1) != 0)
        return 0;
    char next = ct[sizeof want - 1];
    return next == '\0' || next == ';' || next == ' ';
}

/* JSON routes take application/json only, file routes octet-stream (or
 * no type).  Returns 1 when the request's type is acceptable. */
static int media_type_acceptable(http_request *req)
{
    const char *ct = http_header(req, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (req->route->flags & HTTP_FILE_BODY)
        return !ct || strncasecmp(ct, "application/octet-stream", 24) == 0;
    return !(req->route->flags & HTTP_JSON_BODY) || is_json_media_type(ct);
}

/* Replies 415 and returns 0 when the media type is not acceptable. */
static int media_type_ok(http_request *req)
{
    if (media_type_acceptable(req))
        return 1;
    const char *ct = http_header(req, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (req->route->flags & HTTP_FILE_BODY)
        http_reply_error(req, 415, HTTP_E_UNSUPPORTED_MEDIA, NULL,
                         "Content-Type must be application/octet-stream, got '%s'", ct);
    else
        http_reply_error(req, 415, HTTP_E_UNSUPPORTED_MEDIA, NULL,
                         "Content-Type must be application/json, got '%s'",
                         ct ? ct : "(none)");
    return 0;
}

/* Runs the server's authorize hook once per request: before the body is
 * read when one is coming, else just before the handler.  Returns 1 to go
 * on, 0 when the hook replied. */
static int authorized(http_request *req)
{
    if (req->auth_done || !req->srv->authorize)
        return 1;
    req->auth_done = 1;
    unsigned access = ((unsigned)req->route->flags >> 8) & 0xffu;
    return req->srv->authorize(req, access, req->srv->authorize_ctx);
}

/* A body is coming when Content-Length is non-zero or it is chunked. */
static int request_has_body(const http_request *req)
{
    const char *cl = http_header(req, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > 0)
        return 1;
    return http_header(req, MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
}

typedef struct head_size {
    size_t bytes;
    unsigned count;
} head_size;

static enum MHD_Result add_header_size(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    (void)kind;
    head_size *h = cls;
    h->bytes += strlen(key) + (value ? strlen(value) : 0) + 4;   /* ": " and CRLF */
    h->count++;
    return MHD_YES;
}

/* What is refused before routing, with the service's JSON error rather
 * than libmicrohttpd's HTML page: a URI on_uri marked (414), headers over
 * the server's limits (431;
 * MHD only answers itself, in HTML, past its connection memory, which is
 * sized well above the limit) and a request whose body has no
 * Content-Length (411).  MHD decodes chunked bodies itself and answers a
 * framing error with its own HTML page, a reply no callback can replace;
 * refusing chunked bodies up front (RFC 9112 lets a server ask for a
 * length) keeps every answer JSON, and every body here is a small JSON
 * document whose length the client knows.  Returns 1 to go on, 0 after
 * replying; either reply closes the connection when a body follows. */
static int head_acceptable(http_request *req)
{
    if (req->path_refused || req->query_refused) {
        /* on_uri marked it: 414 now, before any body is read */
        if (req->path_refused)
            http_reply_error(req, 414, HTTP_E_URI_TOO_LONG, NULL, "the path is over %d bytes",
                             HTTP_MAX_PATH_BYTES);
        else
            http_reply_error(req, 414, HTTP_E_URI_TOO_LONG, NULL,
                             "the query string is over %d parameters or %d bytes",
                             HTTP_MAX_QUERY_PARAMS, HTTP_MAX_QUERY_BYTES);
        return 0;
    }
    head_size h = { 0, 0 };
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, add_header_size, &h);
    size_t limit = req->srv->max_header_bytes;
    if ((limit && h.bytes > limit) || h.count > HTTP_MAX_HEADERS) {
        http_reply_error(req, 431, HTTP_E_HEADERS_TOO_LARGE, NULL,
                         "%u request headers of %zu bytes: at most %d headers and %zu bytes",
                         h.count, h.bytes, HTTP_MAX_HEADERS, limit);
        return 0;
    }
    if (http_header(req, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        http_reply_error(req, 411, HTTP_E_LENGTH_REQUIRED, NULL,
                         "a request body needs a Content-Length header "
                         "(Transfer-Encoding is not accepted)");
        return 0;
    }
    return 1;
}

/* Sends the 404 or 405 for a request that matched no route. */
static void reply_unrouted(http_request *req)
{
    if (req->path_known)
        reply_method_not_allowed(req);
    else
        http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL, "no route for %s", req->path);
}

/* The body cap of the request's route: a file body (a model being
 * imported) may be far larger than any JSON request. */
static size_t body_cap(const http_request *req)
{
    if (req->route && (req->route->flags & HTTP_FILE_BODY))
        return req->srv->max_file_body;
    return req->srv->max_body;
}

/* First call for a request: route it.  What can be refused before the body
 * is read (no route, a refused token, declared length over the cap) is
 * answered now when a body is coming, so it is never read: MHD then closes
 * the connection after the reply.  A wrong media type within the cap is
 * the exception (see below).  Without a body the answer waits for the
 * final call and the connection stays open for the next request. */
static void request_begin(http_request *req)
{
    /* The headers are complete: from here the connection gets the idle
     * timeout instead of the daemon's shorter header timeout, and its
     * header clock stops until the reply is done. */
    conn_clock_set(req->srv, conn_clock_of(req->conn), 0, 0);
    if (req->srv->idle_timeout_s != req->srv->header_timeout_s)
        MHD_set_connection_option(req->conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                  req->srv->idle_timeout_s);
    if (!head_acceptable(req))
        return;
    const http_router *r = req->srv->router;
    /* HEAD is served by the GET route; MHD drops the body. */
    const char *method = strcmp(req->method, "HEAD") == 0 ? "GET" : req->method;
    for (int i = 0; i < r->n; i++) {
        int ncaps;
        if (!route_match(r->routes[i].pattern, req->path, req->caps, &ncaps))
            continue;
        req->path_known = 1;
        if (strcmp(r->routes[i].method, method) == 0) {
            req->route = &r->routes[i];
            req->ncaps = ncaps;
            break;
        }
    }
    if (!request_has_body(req))
        return;
    if (!req->route) {
        reply_unrouted(req);
        return;
    }
    if (!authorized(req))
        return;
    if (req->route->flags & HTTP_NO_BODY) {
        req->route->handler(req, req->srv->app);
        if (!req->replied && !req->suspended)
            http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "the handler sent no reply");
        return;
    }
    const char *cl = http_header(req, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;
    if (!media_type_acceptable(req)) {
        /* An authorized client that sent the wrong type gets its 415 after
         * the body, read and dropped, when the body is within the cap.
         * Answering now would close the connection on bytes still coming,
         * and the reset that causes can reach the client before the
         * answer does: it would see a broken connection, not a 415. */
        if (n <= body_cap(req))
            req->drop_body = 1;
        else
            media_type_ok(req);
        return;
    }
    if (n > body_cap(req))
        http_reply_error(req, 413, HTTP_E_BODY_TOO_LARGE, NULL,
                         "request body of %llu bytes is over the limit of %zu", n,
                         body_cap(req));
}

/* Appends a chunk, or marks the request too large and drops the chunk. */
static void request_append(http_request *req, const char *data, size_t n)
{
    if (req->too_large || req->drop_body)
        return;
    if (n > body_cap(req) - req->body_len) {
        req->too_large = 1;
        free(req->body);
        req->body = NULL;
        req->body_len = req->body_cap = 0;
        return;
    }
    if (req->body_len + n + 1 > req->body_cap) {
        size_t cap = req->body_cap ? req->body_cap : 4096;
        while (cap < req->body_len + n + 1)
            cap *= 2;
        char *grown = realloc(req->body, cap);
        if (!grown) {
            req->too_large = 1;        /* treated as over the cap: refuse */
            return;
        }
        req->body = grown;
        req->body_cap = cap;
    }
    memcpy(req->body + req->body_len, data, n);
    req->body_len += n;
    req->body[req->body_len] = '\0';
}

static void request_finish(http_request *req, void *app)
{
    if (!req->route) {
        reply_unrouted(req);
        return;
    }
    /* Bodiless requests were not authorized nor, to JSON routes, checked
     * at the start. */
    if (!authorized(req))
        return;
    if (req->route->flags & HTTP_NO_BODY) {
        req->route->handler(req, app);
        if (!req->replied && !req->suspended)
            http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "the handler sent no reply");
        return;
    }
    if (!media_type_ok(req))
        return;
    if (req->too_large) {
        http_reply_error(req, 413, HTTP_E_BODY_TOO_LARGE, NULL,
                         "request body is over the limit of %zu bytes", body_cap(req));
        return;
    }
    if (req->route->flags & HTTP_JSON_BODY) {
        json_error_t jerr;
        req->json = json_loadb(req->body ? req->body : "", req->body_len,
                               JSON_REJECT_DUPLICATES, &jerr);
        if (!req->json) {
            http_reply_error(req, 400, HTTP_E_MALFORMED_JSON, NULL,
                             "malformed JSON at line %d, column %d: %s", jerr.line,
                             jerr.column, jerr.text);
            return;
        }
    }
    req->route->handler(req, app);
    if (!req->replied && !req->suspended)
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "the handler sent no reply");
}

/* The markers on_uri leaves for a request whose query or path it
 * refused. */
static char query_refused_mark, path_refused_mark;

/* MHD_OPTION_URI_LOG_CALLBACK: runs on the raw request line, before MHD
 * splits the query into its connection memory.  Thousands of repeated
 * parameters (a 16 KB URL) exhaust that memory; 0.9.75 then queues its
 * HTML 431 but carries on parsing the request line as if nothing failed
 * and moves the connection back to reading headers, so the queued reply is
 * never sent and the connection only dies at its timeout, answering
 * nothing.  So an over-long query is cut here, where MHD has not parsed it
 * yet, and an over-long path marked.  MHD finds the query at the
 * '?' and parses what follows it, in place, in its own buffer: ending the
 * string just after the '?' leaves it an empty query (every libmicrohttpd
 * version does it so; test_serve's "query flood" case fails if one
 * changes).  The request then gets a JSON 414 from head_acceptable. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)cls;
    (void)conn;
    if (!uri)
        return NULL;
    char *q = strchr(uri, '?');
    size_t path_len = q ? (size_t)(q - uri) : strcspn(uri, " ");
    if (path_len > HTTP_MAX_PATH_BYTES)
        return &path_refused_mark;
    if (!q)
        return NULL;
    size_t bytes = 0;
    int params = 1;
    for (const char *p = q + 1; *p && *p != ' '; p++, bytes++)
        params += *p == '&';
    if (params <= HTTP_MAX_QUERY_PARAMS && bytes <= HTTP_MAX_QUERY_BYTES)
        return NULL;
    q[1] = '\0';
    return &query_refused_mark;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    http_server *srv = cls;
    http_request *req = *con_cls;
    int query_refused = req == (void *)&query_refused_mark;
    int path_refused = req == (void *)&path_refused_mark;
    if (query_refused || path_refused)
        req = NULL;
    if (!req) {
        req = calloc(1, sizeof *req);
        if (!req)
            return MHD_NO;
        req->path = strdup(url ? url : "");
        if (!req->path) {
            free(req);
            return MHD_NO;
        }
        clock_gettime(CLOCK_MONOTONIC, &req->start);
        req->srv = srv;
        req->conn = conn;
        snprintf(req->method, sizeof req->method, "%s", method);
        req->query_refused = query_refused;
        req->path_refused = path_refused;
        *con_cls = req;
        atomic_fetch_add(&srv->in_flight, 1);
        request_begin(req);
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!req->replied)
            request_append(req, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->suspended) {
        /* Called again after http_resume: the worker is done. */
        req->suspended = 0;
        http_resume_fn fn = req->resume_fn;
        req->resume_fn = NULL;
        fn(req, srv->app);
        if (!req->replied && !req->suspended)
            http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "the handler sent no reply");
        return MHD_YES;
    }
    if (!req->replied)
        request_finish(req, srv->app);
    return MHD_YES;
}

/* Writes s into out with spaces, quotes, backslashes and control bytes as
 * %XX, so a path can never break the key=value log format. */
static void log_escape(const char *s, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s && o + 4 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= ' ' || c == '"' || c == '\\' || c == '%' || c >= 0x7f) {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = '\0';
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *srv = cls;
    /* the next request's headers are due within the idle timeout */
    conn_clock_set(srv, conn_clock_of(conn), 1, srv->idle_timeout_s);
    http_request *req = *con_cls;
    if (!req || req == (void *)&query_refused_mark || req == (void *)&path_refused_mark) {
        *con_cls = NULL;
        return;
    }
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    long long us = (long long)(end.tv_sec - req->start.tv_sec) * 1000000LL +
                   (end.tv_nsec - req->start.tv_nsec) / 1000;
    if (req->status >= 100 && req->status < 600) {
        int route = req->route ? (int)(req->route - srv->router->routes) : srv->router->n;
        metrics_hist_observe(&srv->latency[route][req->status / 100 - 1], (double)us * 1e-6);
    }
    char path[512], method[48];
    log_escape(req->path, path, sizeof path);
    log_escape(req->method, method, sizeof method);
    /* The token's id, so the log says who did what (never the token). */
    char who[32] = "";
    if (req->principal > 0)
        snprintf(who, sizeof who, " token=%lld", (long long)req->principal);
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        log_msg(LOG_INFO, "request", "method=%s path=%s status=%u bytes=%zu us=%lld%s", method,
                path, req->status, req->bytes, us, who);
    else
        log_msg(LOG_WARN, "request",
                "method=%s path=%s status=%u bytes=%zu us=%lld aborted=%d%s", method, path,
                req->status, req->bytes, us, (int)toe, who);
    if (req->user && req->user_free)
        req->user_free(req->user);
    json_decref(req->json);
    free(req->body);
    free(req->path);
    free(req);
    *con_cls = NULL;
    atomic_fetch_sub(&srv->in_flight, 1);
}

/* MHD_OPTION_NOTIFY_CONNECTION: the open-connections gauge, and each
 * connection's header clock (from its accept: the header timeout). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    http_server *srv = cls;
    atomic_fetch_add(&srv->connections, toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_clock *c = ci && srv->header_timeout_s ? calloc(1, sizeof *c) : NULL;
        *socket_context = c;
        if (!c)
            return;   /* no clock: MHD's own timeout still applies */
        c->fd = ci->connect_fd;
        c->waiting = 1;
        c->deadline = mono_s() + (double)srv->header_timeout_s;
        pthread_mutex_lock(&srv->clocks_mu);
        c->next = srv->clocks;
        if (srv->clocks)
            srv->clocks->prev = c;
        srv->clocks = c;
        pthread_mutex_unlock(&srv->clocks_mu);
        return;
    }
    conn_clock *c = *socket_context;
    if (!c)
        return;
    pthread_mutex_lock(&srv->clocks_mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->clocks = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&srv->clocks_mu);
    free(c);
    *socket_context = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512], esc[600];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    /* Keep MHD's text readable in one quoted value. */
    size_t o = 0;
    for (const char *p = msg; *p && o + 2 < sizeof esc; p++)
        esc[o++] = *p == '"' ? '\'' : *p;
    esc[o] = '\0';
    log_msg(LOG_WARN, "httpd", "detail=\"%s\"", esc);
}

/* ---------------------------------------------------------------------------
 * The gate's callbacks (http_gate.h)
 * ------------------------------------------------------------------------- */

static http_gate_limits gate_limits(size_t max_header_bytes)
{
    /* a request line the URI callback would answer 414 anyway, and headers
     * head_acceptable would answer 431, with room for their separators */
    size_t line = HTTP_MAX_PATH_BYTES + 1 + HTTP_MAX_QUERY_BYTES + 64;
    http_gate_limits lim = {
        .max_line = line,
        .max_head = line + 2 + max_header_bytes + 4 * HTTP_MAX_HEADERS + 2,
        .max_fields = HTTP_MAX_HEADERS,
        .max_cookies = HTTP_MAX_COOKIES,
    };
    return lim;
}

static void gate_hand_over(void *ctx, int fd, const struct sockaddr *addr, socklen_t addrlen)
{
    http_server *srv = ctx;
    /* on failure (past a connection limit) libmicrohttpd closes the socket */
    if (MHD_add_connection(srv->daemon, fd, addr, addrlen) != MHD_YES)
        log_msg(LOG_WARN, "httpd", "hand_over=refused detail=\"%s\"", strerror(errno));
}

static void gate_refused(void *ctx, const http_gate_verdict *v, const struct sockaddr *addr)
{
    http_server *srv = ctx;
    count_error(srv, v->code);
    atomic_fetch_add(&srv->by_class[v->status / 100 - 1], 1);
    char peer[INET6_ADDRSTRLEN] = "?";
    if (addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)addr)->sin_addr, peer, sizeof peer);
    else if (addr->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)addr)->sin6_addr, peer, sizeof peer);
    log_msg(LOG_WARN, "request", "status=%u code=%s peer=%s detail=\"%s\"", v->status, v->code,
            peer, v->message);
}

static void gate_slow_closed(void *ctx, unsigned n)
{
    http_server *srv = ctx;
    atomic_fetch_add(&srv->slow_closed, (unsigned long long)n);
    log_msg(LOG_WARN, "httpd", "slow_headers_closed=%u", n);
}

/* ---------------------------------------------------------------------------
 * Server lifecycle
 * ------------------------------------------------------------------------- */

int http_server_start(http_server **out, const http_config *cfg, const http_router *router,
                      void *app, gt_error *err)
{
    *out = NULL;
    if (!cfg || !router || cfg->threads < 1 || cfg->max_connections < cfg->threads ||
        cfg->max_body_bytes < 1)
        return gt_error_set(err, GT_EINVAL,
                            "http: need threads >= 1 and max_connections >= threads");
    char port_text[16];
    snprintf(port_text, sizeof port_text, "%d", cfg->port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(cfg->host, port_text, &hints, &ai);
    if (gai != 0)
        return gt_error_set(err, GT_EINVAL, "http: cannot resolve '%s': %s", cfg->host,
                            gai_strerror(gai));
    http_server *srv = calloc(1, sizeof *srv);
    if (!srv) {
        freeaddrinfo(ai);
        return gt_error_set(err, GT_ENOMEM, "http: out of memory");
    }
    srv->router = router;
    srv->app = app;
    srv->max_body = cfg->max_body_bytes;
    srv->max_file_body = cfg->max_file_body_bytes ? cfg->max_file_body_bytes : cfg->max_body_bytes;
    srv->max_header_bytes = cfg->max_header_bytes;
    srv->idle_timeout_s = cfg->timeout_s;
    /* The daemon's timeout is the header timeout: every connection has it
     * until its first request's headers are complete (request_begin then
     * gives it the idle one), so a slowloris is closed sooner than an idle
     * keep-alive connection or an event stream. */
    srv->header_timeout_s = cfg->header_timeout_s && (cfg->header_timeout_s < cfg->timeout_s ||
                                                      cfg->timeout_s == 0)
                                ? cfg->header_timeout_s
                                : cfg->timeout_s;
    srv->authorize = cfg->authorize;
    srv->authorize_ctx = cfg->authorize_ctx;
    atomic_init(&srv->in_flight, 0);
    atomic_init(&srv->draining, 0);
    atomic_init(&srv->connections, 0);
    pthread_mutex_init(&srv->streams_mu, NULL);
    pthread_mutex_init(&srv->clocks_mu, NULL);
    pthread_cond_init(&srv->clocks_cv, NULL);
    atomic_init(&srv->slow_closed, 0);
    srv->max_streams_per_ip = cfg->max_streams_per_ip;
    if (cfg->max_streams_per_ip) {
        srv->nstreams = cfg->max_connections;
        srv->streams = calloc(srv->nstreams, sizeof *srv->streams);
        if (!srv->streams) {
            freeaddrinfo(ai);
            free(srv);
            return gt_error_set(err, GT_ENOMEM, "http: out of memory");
        }
    }
    for (int i = 0; i <= HTTP_MAX_ROUTES; i++)
        for (int c = 0; c < 5; c++)
            metrics_hist_init(&srv->latency[i][c], metrics_seconds_bounds, metrics_seconds_nb,
                              1e6);

    /* The daemon listens on nothing: the gate accepts, judges each new
     * connection's first head and hands it over (http_gate.h). */
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_NO_LISTEN_SOCKET;
    srv->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,   /* first, to catch all */
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)cfg->threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)cfg->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)cfg->per_ip_connections,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->connection_memory,
        MHD_OPTION_CONNECTION_TIMEOUT, srv->header_timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL,
        MHD_OPTION_END);
    if (!srv->daemon) {
        freeaddrinfo(ai);
        free(srv->streams);
        free(srv);
        return gt_error_set(err, GT_EIO, "http: libmicrohttpd did not start");
    }
    http_gate_config gc = {
        .limits = gate_limits(cfg->max_header_bytes),
        .header_timeout_s = srv->header_timeout_s,
        .max_pending = (unsigned)cfg->max_connections,
        .max_pending_per_ip = (unsigned)cfg->per_ip_connections,
        .hand_over = gate_hand_over,
        .refused = gate_refused,
        .slow_closed = gate_slow_closed,
        .ctx = srv,
    };
    gt_error gerr = {0};
    if (http_gate_start(&srv->gate, ai->ai_addr, ai->ai_addrlen, &gc, &gerr) != GT_OK) {
        freeaddrinfo(ai);
        MHD_stop_daemon(srv->daemon);
        free(srv->streams);
        free(srv);
        return gt_error_set(err, GT_EIO,
                            "http: cannot listen on %s:%d (%s; address in use or not local?)",
                            cfg->host, cfg->port, gerr.message);
    }
    freeaddrinfo(ai);
    srv->port = http_gate_port(srv->gate);
    /* without it a slow client is still cut by MHD's inactivity timeout */
    if (srv->header_timeout_s &&
        pthread_create(&srv->reaper, NULL, reaper_main, srv) == 0)
        srv->reaper_running = 1;
    else if (srv->header_timeout_s)
        log_msg(LOG_WARN, "httpd", "reaper=0 detail=\"no thread for the header deadlines\"");
    *out = srv;
    return GT_OK;
}

int http_server_port(const http_server *srv) { return srv->port; }
int http_server_draining(const http_server *srv) { return atomic_load(&srv->draining); }
int http_server_in_flight(const http_server *srv) { return atomic_load(&srv->in_flight); }

void http_server_quiesce(http_server *srv)
{
    if (!srv || atomic_exchange(&srv->draining, 1))
        return;
    /* new connection attempts fail fast instead of waiting in the backlog */
    http_gate_quiesce(srv->gate);
}

int http_server_drain(http_server *srv, long grace_ms)
{
    struct timespec tick = { 0, 10 * 1000 * 1000 };
    for (long waited = 0; waited < grace_ms; waited += 10) {
        if (atomic_load(&srv->in_flight) == 0)
            return 0;
        nanosleep(&tick, NULL);
    }
    return atomic_load(&srv->in_flight);
}

void http_server_free(http_server *srv)
{
    if (!srv)
        return;
    if (srv->reaper_running) {
        pthread_mutex_lock(&srv->clocks_mu);
        srv->reaper_stop = 1;
        pthread_cond_signal(&srv->clocks_cv);
        pthread_mutex_unlock(&srv->clocks_mu);
        pthread_join(srv->reaper, NULL);
    }
    http_gate_free(srv->gate);   /* first: it hands sockets to the daemon */
    MHD_stop_daemon(srv->daemon);
    pthread_mutex_destroy(&srv->clocks_mu);
    pthread_cond_destroy(&srv->clocks_cv);
    pthread_mutex_destroy(&srv->streams_mu);
    free(srv->streams);
    free(srv);
}
