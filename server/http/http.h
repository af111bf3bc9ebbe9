/* http: the service's HTTP layer on libmicrohttpd.
 *
 * - a router: routes are (method, pattern, handler, flags); patterns hold
 *   literal segments and {name} captures ("/v1/runs/{id}"); no match is 404,
 *   a path match with another method is 405 with an Allow header, both JSON;
 * - request bodies accumulated per request up to a cap (413 past it); routes
 *   flagged HTTP_JSON_BODY also get the Content-Type checked (415) and the
 *   body parsed with duplicate keys rejected (400 malformed_json with the
 *   parser's line and column) before the handler runs;
 * - JSON replies and the one error shape
 *       {"error": {"code": "...", "message": "...", "field": null|"..."}}
 * - access control: each route's flags carry who may call it (HTTP_ACCESS);
 *   a server started with an authorize hook runs it for every routed
 *   request before its body is read and before its handler, so no handler
 *   can forget it (the policy itself is auth.c's);
 * - one log line per request: method, path, status, bytes, microseconds;
 * - a daemon with a thread pool over epoll, connection, per-IP, memory and
 *   idle limits, and a shutdown that stops accepting, lets in-flight
 *   requests finish, then closes.
 *
 * Handlers run on pool threads and must be thread-safe.  Each handler sends
 * exactly one reply with an http_reply_* function; one that sends none gets
 * a 500 "internal" reply.
 *
 * Four files, one layer: http_router.c (the router), http.c (a request's way
 * from its head to its handler), http_reply.c (replies, streams, counters),
 * http_server.c (the daemon, connections, start and shutdown), sharing
 * http_internal.h.  Depends on libmicrohttpd, Jansson, log, numfmt, metrics
 * and http_gate. */
#ifndef HTTP_H
#define HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "gt_error.h"

/* Stable error codes (the "code" field), one per kind of failure. */
#define HTTP_E_UNAUTHORIZED       "unauthorized"
#define HTTP_E_FORBIDDEN          "forbidden"
#define HTTP_E_NOT_FOUND          "not_found"
#define HTTP_E_URI_TOO_LONG       "uri_too_long"
#define HTTP_E_HEADERS_TOO_LARGE  "headers_too_large"
#define HTTP_E_LENGTH_REQUIRED    "length_required"
#define HTTP_E_METHOD_NOT_ALLOWED "method_not_allowed"
#define HTTP_E_BODY_TOO_LARGE     "body_too_large"
#define HTTP_E_UNSUPPORTED_MEDIA  "unsupported_media_type"
#define HTTP_E_MALFORMED_JSON     "malformed_json"
#define HTTP_E_VALIDATION         "validation_failed"
#define HTTP_E_CONFLICT           "conflict"
#define HTTP_E_RATE_LIMITED       "rate_limited"
#define HTTP_E_UNAVAILABLE        "unavailable"
#define HTTP_E_INTERNAL           "internal"
/* An upload whose bytes do not hash to the X-Checksum-SHA256 it came with. */
#define HTTP_E_CHECKSUM           "checksum_mismatch"
/* A request line or header libmicrohttpd could not parse (the gate,
 * http_gate.h, answers it), and HTTP/0.x or HTTP/2 and later. */
#define HTTP_E_BAD_REQUEST        "bad_request"
#define HTTP_E_VERSION            "version_not_supported"

typedef struct http_request http_request;
typedef struct http_router http_router;
typedef struct http_server http_server;

typedef void (*http_handler)(http_request *req, void *app);

enum {
    HTTP_JSON_BODY = 1 << 0,   /* Content-Type application/json, parsed body */
    HTTP_FILE_BODY = 1 << 1,   /* the body is a file (an exported model): capped by
                                  max_file_body_bytes instead of max_body_bytes */
    HTTP_NO_BODY = 1 << 2,     /* the handler needs no body: when one is coming it
                                  runs before it is read (after the authorize hook),
                                  so a refusal never reads a 500 MiB upload */
};

/* Bits 8..15 of a route's flags: who may call it.  http.c hands them to
 * the server's authorize hook unread; what they mean is the hook's. */
#define HTTP_ACCESS(bits) ((int)(((unsigned)(bits) & 0xffu) << 8))

/* The authorize hook (http_config.authorize): runs once per routed request,
 * before the body is read and before the handler, with the route's access
 * bits.  Returns 1 to go on, or 0 after sending the one reply (401, 403,
 * 429, ...).  Runs on pool threads. */
typedef int (*http_authorize_fn)(http_request *req, unsigned access, void *ctx);

#define HTTP_MAX_ROUTES 128
#define HTTP_MAX_PARAMS 4
/* A query string over either limit is answered 414 uri_too_long before it
 * is parsed (no route takes more than a handful of parameters). */
#define HTTP_MAX_QUERY_PARAMS 64
#define HTTP_MAX_QUERY_BYTES 8192
/* A path over this is answered 414 too (no route's path comes near it). */
#define HTTP_MAX_PATH_BYTES 8192
/* More request headers than this is 431, like more bytes than
 * http_config.max_header_bytes. */
#define HTTP_MAX_HEADERS 100
/* Cookie name=value pairs per request (libmicrohttpd keeps a record of
 * each in the connection's memory); more gets 431. */
#define HTTP_MAX_COOKIES 200

/* ---------------------------------------------------------------------------
 * Router: built before the server starts, read-only afterwards
 * ------------------------------------------------------------------------- */

http_router *http_router_new(void);
void http_router_free(http_router *r);

/* method is "GET", "POST", ...; pattern must start with '/'. Literal and
 * capture segments only; at most HTTP_MAX_PARAMS captures. The strings must
 * outlive the router (string literals in practice). */
int http_router_add(http_router *r, const char *method, const char *pattern,
                    http_handler handler, int flags, gt_error *err);

/* The routes added so far, in order (for the OpenAPI coverage test). */
int http_router_count(const http_router *r);
void http_router_get(const http_router *r, int i, const char **method, const char **pattern);
/* The flags route i was added with (for the test that holds the OpenAPI
 * document's roles to the table's). */
int http_router_flags(const http_router *r, int i);

/* ---------------------------------------------------------------------------
 * Requests
 * ------------------------------------------------------------------------- */

const char *http_method(const http_request *req);
const char *http_path(const http_request *req);
/* The value captured by {name}, or NULL. */
const char *http_param(const http_request *req, const char *name);
/* Query-string argument (?name=value), or NULL. */
const char *http_query(const http_request *req, const char *name);
/* Request header (case-insensitive name), or NULL. */
const char *http_header(const http_request *req, const char *name);
/* The raw body (may be empty) and, for HTTP_JSON_BODY routes, the parsed
 * JSON (borrowed: owned by the request). */
const char *http_body(const http_request *req, size_t *len);
json_t *http_body_json(const http_request *req);
/* True once the server is shutting down (readiness turns false). */
int http_request_draining(const http_request *req);
/* True when the client connected from a loopback address (127.0.0.0/8,
 * ::1, or an IPv4-mapped 127.x).  A reverse proxy on the same host makes
 * every client look local. */
int http_client_loopback(const http_request *req);
/* Who the authorize hook found the client to be: a token id (0 for an
 * anonymous request it let through) and its role bits. */
void http_set_principal(http_request *req, int64_t id, unsigned roles);
int64_t http_principal(const http_request *req, unsigned *roles);

/* ---------------------------------------------------------------------------
 * Replies: exactly one per request. Each returns 0, or -1 when the reply
 * could not be queued (the connection is then closed).
 * ------------------------------------------------------------------------- */

/* Sends body (a reference is stolen, NULL sends "null") as
 * application/json. */
int http_reply_json(http_request *req, unsigned status, json_t *body);

/* Sends the error shape. field may be NULL (sent as null). */
int http_reply_error(http_request *req, unsigned status, const char *code,
                     const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The error shape with a Retry-After header (seconds): 429 and 503 that a
 * client may retry. */
int http_reply_error_retry(http_request *req, unsigned status, const char *code,
                           int retry_after_s, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The error shape (field null) with extra headers: headers is a
 * NULL-terminated list of name, value pairs (WWW-Authenticate on 401). */
int http_reply_error_headers(http_request *req, unsigned status, const char *code,
                             const char *const *headers, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Sends bytes that live as long as the process (embedded documents). */
int http_reply_static(http_request *req, unsigned status, const char *content_type,
                      const void *data, size_t len);

/* Sends a malloc'ed buffer (ownership taken, freed even on failure) with
 * extra headers: headers is NULL or a NULL-terminated list of name, value
 * pairs. */
int http_reply_buffer(http_request *req, unsigned status, const char *content_type,
                      void *data, size_t len, const char *const *headers);

/* A streamed reply of unknown length (Server-Sent Events).  A stream holds
 * its connection as long as it runs, so one client address may hold at most
 * http_config.max_streams_per_ip of them: past it the reply is 429
 * rate_limited with Retry-After (done runs at once), which leaves that
 * address connections for its other requests.  fn fills buf
 * with up to max bytes and returns the count, 0 when nothing is ready yet
 * (it is called again; it should nap briefly first), or -1 at the end of
 * the stream.  done (may be NULL) frees user when the stream ends. */
typedef long (*http_stream_fn)(void *user, char *buf, size_t max);
int http_reply_stream(http_request *req, unsigned status, const char *content_type,
                      http_stream_fn fn, void *user, void (*done)(void *user),
                      const char *const *headers);

/* ---------------------------------------------------------------------------
 * Suspended requests: long work off the HTTP threads
 *
 * A handler calls http_suspend(req, fn) instead of replying and hands req
 * to a worker; the connection is parked (no pool thread is held).  The
 * worker calls http_resume(req) from any thread once done; fn then runs on
 * a pool thread and sends the one reply.  Every suspended request must be
 * resumed before http_server_free.
 * ------------------------------------------------------------------------- */

typedef void (*http_resume_fn)(http_request *req, void *app);
void http_suspend(http_request *req, http_resume_fn fn);
void http_resume(http_request *req);

/* Per-request slot for the handler's own state across a suspension.
 * free_fn (may be NULL) frees user if the request ends while it is still
 * set (the client went away before the reply); clear it with
 * http_set_user(req, NULL, NULL) once the state is freed. */
void http_set_user(http_request *req, void *user, void (*free_fn)(void *user));
void *http_get_user(const http_request *req);

/* Replies counted by status class since start: [0] 1xx ... [4] 5xx. */
void http_server_counts(const http_server *srv, unsigned long long out[5]);

/* Connections open now (accepted and not yet closed, idle ones too). */
int http_server_connections(const http_server *srv);

/* Appends the error replies by code (giant_http_errors_total) and the
 * request-duration histogram (giant_http_request_duration_seconds, by
 * method, route template and status class) in the Prometheus text
 * format. */
struct metrics_buf;
void http_server_write_metrics(const http_server *srv, struct metrics_buf *b);

/* ---------------------------------------------------------------------------
 * Server
 * ------------------------------------------------------------------------- */

typedef struct http_config {
    const char *host;              /* numeric address or name to bind        */
    int port;                      /* 0 = pick a free port                    */
    unsigned threads;              /* pool threads (>= 1)                     */
    size_t max_body_bytes;         /* body cap (413 past it)                  */
    size_t max_file_body_bytes;    /* the cap of HTTP_FILE_BODY routes; 0: max_body_bytes */
    unsigned max_connections;      /* >= threads                              */
    unsigned per_ip_connections;   /* 0 = no limit                            */
    size_t connection_memory;      /* per-connection buffer (bytes)           */
    unsigned timeout_s;            /* idle timeout, 0 = none                  */
    unsigned header_timeout_s;     /* until a request's headers are complete
                                      (slowloris), 0 = timeout_s             */
    size_t max_header_bytes;       /* request headers, names and values; more
                                      is 431 (0 = what the memory holds)     */
    unsigned max_streams_per_ip;   /* streamed replies one address may hold
                                      open; more is 429 (0 = no limit)       */
    http_authorize_fn authorize;   /* NULL = every route open                 */
    void *authorize_ctx;           /* handed to authorize                     */
} http_config;

/* Binds and starts serving router on cfg. app is passed to every handler.
 * The router must stay alive and unchanged until http_server_free. */
int http_server_start(http_server **out, const http_config *cfg,
                      const http_router *router, void *app, gt_error *err);

/* The port actually bound (useful with port 0). */
int http_server_port(const http_server *srv);

/* Stops accepting connections; requests already received run to the end.
 * Replies sent from then on carry "Connection: close". */
void http_server_quiesce(http_server *srv);

/* True once quiesce was called (for /readyz). */
int http_server_draining(const http_server *srv);

/* Requests received but not yet completed. */
int http_server_in_flight(const http_server *srv);

/* Waits until no request is in flight or grace_ms passed; returns the
 * number still in flight (0 = drained). */
int http_server_drain(http_server *srv, long grace_ms);

/* Closes every connection, joins the threads and frees srv (NULL is fine). */
void http_server_free(http_server *srv);

#endif
