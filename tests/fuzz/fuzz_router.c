/* fuzz_router: the HTTP router's path matcher with {name} captures and the
 * query-length check, as every request reaches them, with no server
 * running.  Both are internal to the HTTP layer (http_internal.h), which
 * this target includes to reach them and the router's table.
 *
 * The input is a request target ("/v1/runs/7?limit=3"): http_on_uri sees it
 * first, as libmicrohttpd hands it over, then each route of the service's
 * table is matched against its path the way request_begin does. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"

/* The service's route patterns (server/routes/routes.c), with the method of each. */
static const char *const route_table[][2] = {
    {"GET", "/healthz"},
    {"GET", "/readyz"},
    {"GET", "/v1/info"},
    {"GET", "/v1/openapi.json"},
    {"GET", "/metrics"},
    {"POST", "/v1/runs"},
    {"GET", "/v1/runs"},
    {"GET", "/v1/runs/{id}"},
    {"POST", "/v1/runs/{id}/cancel"},
    {"POST", "/v1/runs/{id}/resume"},
    {"GET", "/v1/runs/{id}/metrics"},
    {"GET", "/v1/runs/{id}/events"},
    {"GET", "/v1/runs/{id}/checkpoints"},
    {"GET", "/v1/runs/{id}/checkpoints/{ckpt}"},
    {"POST", "/v1/runs/{id}/samples"},
    {"GET", "/v1/runs/{id}/model"},
    {"POST", "/v1/models"},
    {"GET", "/v1/models"},
    {"GET", "/v1/models/{name}"},
    {"GET", "/v1/models/{name}/file"},
    {"POST", "/v1/models/{name}/samples"},
    {"POST", "/v1/runs/{id}/evaluations"},
    {"GET", "/v1/runs/{id}/evaluations"},
    {"GET", "/v1/runs/{id}/evaluations/{eid}"},
    {"POST", "/v1/datasets"},
    {"GET", "/v1/datasets"},
    {"GET", "/v1/datasets/{id}"},
    {"POST", "/v1/tokens"},
    {"GET", "/v1/tokens"},
    {"DELETE", "/v1/tokens/{id}"},
    {"GET", "/"},
    {"GET", "/ui/{file}"},
};

static void no_handler(http_request *req, void *app)
{
    (void)req;
    (void)app;
}

static http_router *router_once(void)
{
    static http_router *r;
    if (r)
        return r;
    r = http_router_new();
    gt_error err = {0};
    for (size_t i = 0; i < sizeof route_table / sizeof route_table[0]; i++)
        if (!r || http_router_add(r, route_table[i][0], route_table[i][1], no_handler, 0,
                                  &err) != GT_OK)
            abort();
    return r;
}

/* A capture is a whole, non-empty path segment: what the handlers' id and
 * name parsers rely on. */
static void check_captures(const http_request *req)
{
    for (int i = 0; i < req->ncaps; i++) {
        const char *v = req->caps[i].value;
        if (!v[0] || strchr(v, '/') || strlen(v) >= sizeof req->caps[i].value)
            abort();
        char name[64];
        if (req->caps[i].name_len >= sizeof name)
            abort();
        memcpy(name, req->caps[i].name, req->caps[i].name_len);
        name[req->caps[i].name_len] = '\0';
        if (http_param(req, name) == NULL)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const http_router *r = router_once();
    /* http_on_uri cuts the string it is given in place, as it does MHD's buffer */
    char *uri = malloc(size + 1);
    if (!uri)
        return 0;
    memcpy(uri, data, size);
    uri[size] = '\0';
    int refused = http_on_uri(NULL, uri, NULL) == &http_query_refused_mark;
    if (refused && uri[strcspn(uri, "?") + 1] != '\0')
        abort();
    /* MHD passes the path without its query */
    uri[strcspn(uri, "?")] = '\0';
    http_request req;
    memset(&req, 0, sizeof req);
    for (int i = 0; i < r->n; i++) {
        int ncaps = 0;
        if (!http_route_match(r->routes[i].pattern, uri, req.caps, &ncaps))
            continue;
        req.ncaps = ncaps;
        check_captures(&req);
    }
    free(uri);
    return 0;
}
