/* http_server: the daemon and its connections: the listening gate hands
 * connections over, each connection's header clock and the reaper that
 * enforces it, the request log, start, quiesce, drain and free (http.h,
 * "Server"). */
#include "http_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gt_clock.h"
#include "log.h"

conn_clock *http_conn_clock_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (conn_clock *)ci->socket_context : NULL;
}

/* The connection now waits for a request's headers (waiting = 1, for at
 * most `limit_s` from now; 0 = no limit), or has them (waiting = 0). */
void http_conn_clock_set(http_server *srv, conn_clock *c, int waiting, unsigned limit_s)
{
    if (!c)
        return;
    pthread_mutex_lock(&srv->clocks_mu);
    c->waiting = waiting && limit_s > 0;
    c->deadline = gt_clock_s() + (double)limit_s;
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
        double now = gt_clock_s();
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
    http_conn_clock_set(srv, http_conn_clock_of(conn), 1, srv->idle_timeout_s);
    http_request *req = *con_cls;
    if (!req || req == (void *)&http_query_refused_mark || req == (void *)&http_path_refused_mark) {
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
        c->deadline = gt_clock_s() + (double)srv->header_timeout_s;
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
    http_count_error(srv, v->code);
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
        flags, 0, NULL, NULL, http_on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,   /* first, to catch all */
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)cfg->threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)cfg->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)cfg->per_ip_connections,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->connection_memory,
        MHD_OPTION_CONNECTION_TIMEOUT, srv->header_timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
        MHD_OPTION_URI_LOG_CALLBACK, http_on_uri, NULL,
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
