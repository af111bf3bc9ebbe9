/* http: the router refuses malformed routes. (Matching, captures, 404/405
 * and bodies are tested over real HTTP in test_serve.) */
#include "check.h"

#include <stdio.h>
#include <string.h>

#include "http.h"

static void handler(http_request *req, void *app)
{
    (void)req;
    (void)app;
}

int main(void)
{
    gt_error err;
    http_router *r = http_router_new();
    CHECK(r != NULL);
    CHECK_EQ_INT(http_router_add(r, "GET", "/v1/runs/{id}", handler, 0, &err), GT_OK);
    CHECK_EQ_INT(http_router_add(r, "POST", "/v1/runs/{id}", handler, 0, &err), GT_OK);
    CHECK_EQ_INT(http_router_add(r, "GET", "/v1/runs/{id}/metrics/{name}", handler, 0, &err),
                 GT_OK);
    CHECK_EQ_INT(http_router_add(r, "GET", "/v1/runs/{id}", handler, 0, &err), GT_EINVAL);
    CHECK(strstr(err.message, "twice") != NULL);
    CHECK_EQ_INT(http_router_add(r, "GET", "no-slash", handler, 0, &err), GT_EINVAL);
    CHECK_EQ_INT(http_router_add(r, "GET", "/a/{}", handler, 0, &err), GT_EINVAL);
    CHECK_EQ_INT(http_router_add(r, "GET", "/a/{id", handler, 0, &err), GT_EINVAL);
    CHECK_EQ_INT(http_router_add(r, "GET", "/a/x{id}", handler, 0, &err), GT_EINVAL);
    CHECK_EQ_INT(http_router_add(r, "GET", "/a/{id}x", handler, 0, &err), GT_EINVAL);
    CHECK_EQ_INT(http_router_add(r, "GET", "/{a}/{b}/{c}/{d}/{e}", handler, 0, &err), GT_EINVAL);
    CHECK_EQ_INT(http_router_add(r, "GET", "/x", NULL, 0, &err), GT_EINVAL);
    CHECK_EQ_INT(http_router_add(NULL, "GET", "/x", handler, 0, &err), GT_EINVAL);
    int added = 3;
    while (http_router_add(r, "GET", "/same", handler, 0, NULL) == GT_OK)
        added++;                      /* the second /same fails: duplicate */
    CHECK_EQ_INT(added, 4);
    http_router_free(r);

    /* The route table is bounded. */
    r = http_router_new();
    static char paths[HTTP_MAX_ROUTES + 1][16];
    int rc = GT_OK, i;
    for (i = 0; i <= HTTP_MAX_ROUTES && rc == GT_OK; i++) {
        snprintf(paths[i], sizeof paths[i], "/r%d", i);
        rc = http_router_add(r, "GET", paths[i], handler, 0, &err);
    }
    CHECK_EQ_INT(rc, GT_EINVAL);
    CHECK_EQ_INT(i, HTTP_MAX_ROUTES + 1);
    http_router_free(r);

    /* Server start refuses impossible settings before binding. */
    http_server *srv = NULL;
    r = http_router_new();
    http_config bad = { .host = "127.0.0.1", .port = 0, .threads = 4, .max_body_bytes = 1,
                        .max_connections = 2, .connection_memory = 65536 };
    CHECK_EQ_INT(http_server_start(&srv, &bad, r, NULL, &err), GT_EINVAL);
    CHECK(srv == NULL);
    /* Binding the same port twice fails the second time with a message. */
    http_config ok = { .host = "127.0.0.1", .port = 0, .threads = 1, .max_body_bytes = 1,
                       .max_connections = 8, .connection_memory = 65536, .timeout_s = 5 };
    CHECK_EQ_INT(http_server_start(&srv, &ok, r, NULL, &err), GT_OK);
    if (srv) {
        CHECK(http_server_port(srv) > 0);
        http_server *second = NULL;
        ok.port = http_server_port(srv);
        CHECK_EQ_INT(http_server_start(&second, &ok, r, NULL, &err), GT_EIO);
        CHECK(second == NULL);
        CHECK(!http_server_draining(srv));
        http_server_quiesce(srv);
        CHECK(http_server_draining(srv));
        CHECK_EQ_INT(http_server_drain(srv, 100), 0);
        http_server_free(srv);
    }
    http_router_free(r);
    return check_finish();
}
