/* routes_ui: the dashboard's files, from the embed_ui table (server/ui/,
 * compiled in by cmake/embed.cmake; no file is read at run time).
 * Each reply carries its Content-Type, an ETag (a hash of the bytes, so a
 * rebuilt file gets a new one), Cache-Control: no-cache (the browser keeps
 * the file and asks again with If-None-Match: 304 when unchanged) and a
 * Content-Security-Policy that lets the page load and call only this
 * origin.  Contracts: api/openapi.json. */
#include "routes_handlers.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"

static const char *content_type(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
    };
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

/* FNV-1a, 64 bits: cheap, and any change of the bytes changes the tag. */
static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Whether an If-None-Match header lists etag (or is "*"). */
static int etag_matches(const char *header, const char *etag)
{
    if (!header)
        return 0;
    if (strcmp(header, "*") == 0)
        return 1;
    return strstr(header, etag) != NULL;
}

static void serve(http_request *req, const gt_embed_file *f)
{
    char etag[24];
    snprintf(etag, sizeof etag, "\"%016llx\"", (unsigned long long)fnv1a(f->data, f->size));
    const char *headers[] = {
        "ETag", etag,
        "Cache-Control", "no-cache",
        "X-Content-Type-Options", "nosniff",
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        NULL,
    };
    if (etag_matches(http_header(req, "If-None-Match"), etag)) {
        http_reply_buffer(req, 304, NULL, malloc(1), 0, headers);
        return;
    }
    void *copy = malloc(f->size ? f->size : 1);
    if (!copy) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
        return;
    }
    memcpy(copy, f->data, f->size);
    http_reply_buffer(req, 200, content_type(f->name), copy, f->size, headers);
}

static const gt_embed_file *find(const char *name)
{
    for (size_t i = 0; name && i < embed_ui_count; i++)
        if (strcmp(embed_ui[i].name, name) == 0)
            return &embed_ui[i];
    return NULL;
}

void route_ui_index(http_request *req, void *ctx)
{
    (void)ctx;
    const gt_embed_file *f = find("index.html");
    if (!f) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "no dashboard was embedded");
        return;
    }
    serve(req, f);
}

void route_ui_file(http_request *req, void *ctx)
{
    (void)ctx;
    const char *name = http_param(req, "file");
    const gt_embed_file *f = find(name);
    if (!f) {
        http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL, "no dashboard file '%s'",
                         name ? name : "");
        return;
    }
    serve(req, f);
}
