/* http_gate: the listening socket, and a look at each new connection's
 * first request before libmicrohttpd parses it.
 *
 * libmicrohttpd (0.9.75) answers a malformed request line or header itself,
 * with a compiled-in HTML page and no hook to replace it (an unparsable
 * Content-Length, a request line without a version, HTTP/2, headers past
 * its connection memory).  The gate accepts connections itself, peeks
 * (MSG_PEEK: nothing is consumed) at the bytes of the first request's head
 * until it can judge them, and either hands the socket to the daemon
 * (MHD_add_connection, through a callback) or answers the service's JSON
 * error and closes.  A client that never completes its head is closed at
 * the header deadline, as the daemon's header clock would.
 *
 * Only a connection's first request passes the gate; later requests on a
 * kept-alive connection are the daemon's alone (server/README.md, "Errors
 * libmicrohttpd answers itself").
 *
 * http_gate_check is the judgement alone, on a buffer, with no socket (the
 * fuzz target fuzz_http_gate holds it to its contract). */
#ifndef HTTP_GATE_H
#define HTTP_GATE_H

#include <stddef.h>

#include <sys/socket.h>

#include "gt_error.h"

/* What a head may hold before the gate refuses it. */
typedef struct http_gate_limits {
    size_t max_line;           /* request line bytes, its CRLF excluded (414)   */
    size_t max_head;           /* the whole head, request line included (431)  */
    unsigned max_fields;       /* header fields (431)                          */
    unsigned max_cookies;      /* name=value pairs over all Cookie fields (431) */
} http_gate_limits;

enum {
    HTTP_GATE_MORE = 0,        /* not decided: the head is not complete yet */
    HTTP_GATE_PASS = 1,        /* hand the connection to the daemon         */
    HTTP_GATE_REFUSE = 2,      /* answer the verdict's error and close      */
    HTTP_GATE_DROP = 3,        /* close without a reply: no request came    */
};

typedef struct http_gate_verdict {
    unsigned status;           /* 400, 413, 414, 431 or 505                 */
    const char *code;          /* the API's stable error code               */
    char message[160];         /* names no client bytes                     */
} http_gate_verdict;

/* Judges the first n bytes a connection sent.  MORE asks for more bytes;
 * PASS, REFUSE and DROP are final: appending bytes to a buffer judged so never
 * changes the answer (the gate may have seen only a prefix).  complete = 1
 * says no more bytes will come (the peer shut down its side, or the head
 * cannot grow): the head is then judged as it is, and an incomplete one is
 * refused.  The verdict is filled for REFUSE. */
int http_gate_check(const char *buf, size_t n, int complete, const http_gate_limits *lim,
                    http_gate_verdict *v);

/* Formats the reply to a refused head: status line, Content-Type,
 * Content-Length, Connection: close, and the JSON error.  Returns its
 * length (< cap), or 0 when it does not fit. */
size_t http_gate_reply(const http_gate_verdict *v, char *out, size_t cap);

typedef struct http_gate http_gate;

typedef struct http_gate_config {
    http_gate_limits limits;
    unsigned header_timeout_s; /* from the accept to a judged head (0 = none) */
    unsigned max_pending;      /* connections waiting at the gate            */
    unsigned max_pending_per_ip;   /* from one address (0 = no limit)        */
    /* Takes over a socket whose head passed (and closes it on failure). */
    void (*hand_over)(void *ctx, int fd, const struct sockaddr *addr, socklen_t addrlen);
    /* A refused head's reply was sent (for the counters and the log). */
    void (*refused)(void *ctx, const http_gate_verdict *v, const struct sockaddr *addr);
    /* n connections were closed at their header deadline. */
    void (*slow_closed)(void *ctx, unsigned n);
    void *ctx;
} http_gate_config;

/* Listens on addr (SO_REUSEADDR; IPv6 only for an IPv6 address) and starts
 * the gate's thread. */
int http_gate_start(http_gate **out, const struct sockaddr *addr, socklen_t addrlen,
                    const http_gate_config *cfg, gt_error *err);
/* The port listened on (the one picked when asked for port 0). */
int http_gate_port(const http_gate *g);
/* Stops accepting: new connection attempts are refused at once; the
 * connections at the gate are closed.  Idempotent. */
void http_gate_quiesce(http_gate *g);
/* Stops the thread and closes every socket still the gate's. */
void http_gate_free(http_gate *g);

#endif
