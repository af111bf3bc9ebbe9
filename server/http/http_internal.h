/* http_internal: what the four files of the HTTP layer share (http.c,
 * http_router.c, http_reply.c, http_server.c): the router's, a request's
 * and the server's structs, and the functions one file calls in another.
 * Included by them only (and by fuzz_router, which reaches inside). */
#ifndef HTTP_INTERNAL_H
#define HTTP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include <microhttpd.h>

#include "http.h"
#include "http_gate.h"
#include "metrics.h"

/* ---------------------------------------------------------------------------
 * Router (http_router.c)
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

typedef struct http_capture {
    const char *name;          /* into the pattern, not NUL-terminated */
    size_t name_len;
    char value[256];
} http_capture;

/* Matches path against pattern segment by segment; fills caps on success. */
int http_route_match(const char *pattern, const char *path, http_capture *caps, int *ncaps);

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

/* The error codes counted by giant_http_errors_total (http_reply.c's
 * table). */
#define HTTP_N_ERROR_CODES 21

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
    atomic_ullong by_code[HTTP_N_ERROR_CODES];   /* error replies by code        */
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

/* ---------------------------------------------------------------------------
 * Between the files
 * ------------------------------------------------------------------------- */

/* http_reply.c: counts an error reply under its code; the 405 with its
 * Allow header. */
void http_count_error(http_server *srv, const char *code);
int http_reply_method_not_allowed(http_request *req);

/* http_server.c: a connection's header clock (see conn_clock). */
conn_clock *http_conn_clock_of(struct MHD_Connection *conn);
void http_conn_clock_set(http_server *srv, conn_clock *c, int waiting, unsigned limit_s);

/* http.c: libmicrohttpd's URI and request callbacks. */
void *http_on_uri(void *cls, const char *uri, struct MHD_Connection *conn);
enum MHD_Result http_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version,
                                const char *upload_data, size_t *upload_data_size,
                                void **con_cls);
/* The markers http_on_uri leaves for a request whose query or path it
 * refused (in place of the request's state). */
extern char http_query_refused_mark, http_path_refused_mark;

#endif
