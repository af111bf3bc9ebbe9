/* http: a request's way through the layer: its accessors, the checks of
 * its head (the URI callback's limits, header sizes, chunked bodies),
 * routing (404/405), the authorize hook, the body (media type, cap, JSON
 * parsing) and the handler (http.h). */
#include "http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "gt_array.h"
#include "http_internal.h"

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
 * than libmicrohttpd's HTML page: a URI http_on_uri marked (414), headers over
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
        /* http_on_uri marked it: 414 now, before any body is read */
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
        http_reply_method_not_allowed(req);
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

/* Runs a handler, or a resumed request's continuation: one that neither
 * replied nor suspended the request gets a 500. */
static void run_handler(http_request *req, void (*fn)(http_request *, void *), void *app)
{
    fn(req, app);
    if (!req->replied && !req->suspended)
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "the handler sent no reply");
}

/* What a request meets before its body counts, when its body is coming
 * (request_begin) or has come (request_finish): no route is answered, the
 * guard may refuse it, and a route that takes no body runs its handler at
 * once.  Returns 1 when the body is next, 0 when the request was answered. */
static int request_admit(http_request *req, void *app)
{
    if (!req->route) {
        reply_unrouted(req);
        return 0;
    }
    if (!authorized(req))
        return 0;
    if (req->route->flags & HTTP_NO_BODY) {
        run_handler(req, req->route->handler, app);
        return 0;
    }
    return 1;
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
    http_conn_clock_set(req->srv, http_conn_clock_of(req->conn), 0, 0);
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
        if (!http_route_match(r->routes[i].pattern, req->path, req->caps, &ncaps))
            continue;
        req->path_known = 1;
        if (strcmp(r->routes[i].method, method) == 0) {
            req->route = &r->routes[i];
            req->ncaps = ncaps;
            break;
        }
    }
    if (!request_has_body(req) || !request_admit(req, req->srv->app))
        return;
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
    if (gt_array_reserve(&req->body, &req->body_cap, req->body_len + n + 1, 4096) != 0) {
        req->too_large = 1;            /* treated as over the cap: refuse */
        return;
    }
    memcpy(req->body + req->body_len, data, n);
    req->body_len += n;
    req->body[req->body_len] = '\0';
}

static void request_finish(http_request *req, void *app)
{
    /* A bodiless request meets request_admit here, not at the start, and
     * is checked (to a JSON route) here too. */
    if (!request_admit(req, app))
        return;
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
    run_handler(req, req->route->handler, app);
}

/* The markers http_on_uri leaves for a request whose query or path it
 * refused. */
char http_query_refused_mark, http_path_refused_mark;

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
void *http_on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)cls;
    (void)conn;
    if (!uri)
        return NULL;
    char *q = strchr(uri, '?');
    size_t path_len = q ? (size_t)(q - uri) : strcspn(uri, " ");
    if (path_len > HTTP_MAX_PATH_BYTES)
        return &http_path_refused_mark;
    if (!q)
        return NULL;
    size_t bytes = 0;
    int params = 1;
    for (const char *p = q + 1; *p && *p != ' '; p++, bytes++)
        params += *p == '&';
    if (params <= HTTP_MAX_QUERY_PARAMS && bytes <= HTTP_MAX_QUERY_BYTES)
        return NULL;
    q[1] = '\0';
    return &http_query_refused_mark;
}

enum MHD_Result http_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version,
                                const char *upload_data, size_t *upload_data_size,
                                void **con_cls)
{
    (void)version;
    http_server *srv = cls;
    http_request *req = *con_cls;
    int query_refused = req == (void *)&http_query_refused_mark;
    int path_refused = req == (void *)&http_path_refused_mark;
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
        run_handler(req, fn, srv->app);
        return MHD_YES;
    }
    if (!req->replied)
        request_finish(req, srv->app);
    return MHD_YES;
}
