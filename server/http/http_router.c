/* http_router: routes with {name} captures and per-route flags, matched
 * segment by segment (http.h, "Router"). */
#include "http_internal.h"

#include <string.h>

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

/* Matches path against pattern segment by segment; fills caps on success. */
int http_route_match(const char *pattern, const char *path, http_capture *caps, int *ncaps)
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
