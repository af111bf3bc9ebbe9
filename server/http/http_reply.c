/* http_reply: every reply a handler or the layer itself sends (the JSON
 * error shape, static and owned buffers, event streams with their share
 * per client address), suspension, and the layer's counters and
 * histograms for /metrics (http.h, "Replies"). */
#include "http_internal.h"

#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "numfmt.h"

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
_Static_assert(N_ERROR_CODES == HTTP_N_ERROR_CODES, "http_internal.h counts the codes");

void http_count_error(http_server *srv, const char *code)
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
        http_count_error(req->srv, json_string_value(json_object_get(
                                       json_object_get(body, "error"), "code")));
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
    http_count_error(req->srv, code);
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
int http_reply_method_not_allowed(http_request *req)
{
    char allow[128] = "";
    const http_router *r = req->srv->router;
    http_capture caps[HTTP_MAX_PARAMS];
    int ncaps;
    for (int i = 0; i < r->n; i++) {
        if (!http_route_match(r->routes[i].pattern, req->path, caps, &ncaps))
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
    http_count_error(req->srv, HTTP_E_METHOD_NOT_ALLOWED);
    return queue(req, 405, resp, "application/json", len);
}
