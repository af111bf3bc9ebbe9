/* Test-only routes, compiled into giant_test_server and never into giant.
 * They exercise machinery shared by every route that takes a body (the
 * cap, the media-type check, JSON parsing), path captures, and shutdown
 * with a request in flight, and show what call_counts.c counts. */
#include "test_routes.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "call_counts.h"
#include "fault_vfs.h"
#include "log.h"

/* POST /test/echo: {"echo": <the parsed body>} */
static void route_echo(http_request *req, void *ctx)
{
    (void)ctx;
    http_reply_json(req, 200, json_pack("{s:O}", "echo", http_body_json(req)));
}

/* GET /test/items/{id}: {"id": "<capture>"} */
static void route_item(http_request *req, void *ctx)
{
    (void)ctx;
    http_reply_json(req, 200, json_pack("{s:s}", "id", http_param(req, "id")));
}

/* GET /test/slow?ms=N: blocks its pool thread for N ms (at most 10 s). */
static void route_slow(http_request *req, void *ctx)
{
    (void)ctx;
    const char *q = http_query(req, "ms");
    long ms = q ? strtol(q, NULL, 10) : 500;
    if (ms < 0 || ms > 10000) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "ms", "ms must be in [0, 10000]");
        return;
    }
    log_msg(LOG_INFO, "test_slow", "state=begin ms=%ld", ms);
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0)
        ;
    http_reply_json(req, 200, json_pack("{s:i}", "slept_ms", (int)ms));
}

/* GET /test/stream: an endless stream of comments, one every 100 ms, until
 * the client goes away. */
static long stream_tick(void *user, char *buf, size_t max)
{
    (void)user;
    struct timespec ts = { 0, 100 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    static const char tick[] = ": tick\n\n";
    if (max < sizeof tick - 1)
        return 0;
    memcpy(buf, tick, sizeof tick - 1);
    return (long)(sizeof tick - 1);
}

static void route_stream(http_request *req, void *ctx)
{
    (void)ctx;
    http_reply_stream(req, 200, "text/event-stream", stream_tick, NULL, NULL, NULL);
}

/* GET /test/fault: the fault VFS's counts ({"installed", "ops",
 * "injected"}).  POST /test/fault {"after": N, "count": K, "kind": "ioerr" |
 * "full"}: the N-th write or sync from now and the K - 1 after it fail
 * (fault_vfs.h); "after": 0 disarms.  409 when the server was started
 * without GIANT_TEST_FAULT_VFS=1 (the VFS is not under its database). */
static void route_fault(http_request *req, void *ctx)
{
    (void)ctx;
    if (!fault_vfs_installed()) {
        http_reply_error(req, 409, HTTP_E_CONFLICT, NULL, "the fault VFS is not installed");
        return;
    }
    json_t *body = http_body_json(req);
    if (body) {
        json_int_t after = 0, count = 1;
        const char *kind = "ioerr";
        if (json_unpack(body, "{s:I, s?I, s?s}", "after", &after, "count", &count, "kind",
                        &kind) != 0 ||
            (strcmp(kind, "ioerr") != 0 && strcmp(kind, "full") != 0)) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "after",
                             "want {\"after\": N, \"count\": K, \"kind\": \"ioerr\"|\"full\"}");
            return;
        }
        fault_vfs_arm(after, count, strcmp(kind, "full") == 0 ? FAULT_VFS_FULL : FAULT_VFS_IOERR);
        log_msg(LOG_INFO, "test_fault", "after=%lld count=%lld kind=%s", (long long)after,
                (long long)count, kind);
    }
    http_reply_json(req, 200, json_pack("{s:b, s:I, s:I}", "installed", 1, "ops",
                                        (json_int_t)fault_vfs_ops(), "injected",
                                        (json_int_t)fault_vfs_injected()));
}

/* GET /test/counts: what call_counts.c counted since the last POST, per
 * thread.  POST /test/counts: zeroes the counts and traces the statements
 * of the shared connection (the HTTP pool's and the sampling worker's). */
static void route_counts(http_request *req, void *ctx)
{
    app *a = ctx;
    if (strcmp(http_method(req), "POST") == 0)
        call_counts_reset(a->db);
    http_reply_json(req, 200, call_counts_json());
}

int test_routes_add(http_router *r, gt_error *err)
{
    int rc;
    if ((rc = http_router_add(r, "POST", "/test/echo", route_echo, HTTP_JSON_BODY, err)) ||
        (rc = http_router_add(r, "GET", "/test/items/{id}", route_item, 0, err)) ||
        (rc = http_router_add(r, "GET", "/test/slow", route_slow, 0, err)) ||
        (rc = http_router_add(r, "GET", "/test/stream", route_stream, 0, err)) ||
        (rc = http_router_add(r, "GET", "/test/fault", route_fault, 0, err)) ||
        (rc = http_router_add(r, "POST", "/test/fault", route_fault, HTTP_JSON_BODY, err)) ||
        (rc = http_router_add(r, "GET", "/test/counts", route_counts, 0, err)) ||
        (rc = http_router_add(r, "POST", "/test/counts", route_counts, 0, err)))
        return rc;
    return GT_OK;
}
