/* The router and api/openapi.json describe the same routes: every
 * (method, path) the service registers is documented, and every documented
 * operation exists.  Also checks each operation documents its error
 * replies and that every $ref resolves. */
#include "check.h"

#include <ctype.h>
#include <string.h>

#include <jansson.h>

#include "embed.h"
#include "http.h"
#include "routes.h"

static void lower(const char *in, char *out, size_t cap)
{
    size_t i = 0;
    for (; in[i] && i + 1 < cap; i++)
        out[i] = (char)tolower((unsigned char)in[i]);
    out[i] = '\0';
}

/* Every {"$ref": "#/components/..."} below node points at something. */
static void check_refs(json_t *root, json_t *node)
{
    if (json_is_object(node)) {
        const char *k;
        json_t *v;
        json_object_foreach(node, k, v) {
            if (strcmp(k, "$ref") == 0 && json_is_string(v)) {
                const char *ref = json_string_value(v);
                CHECK_MSG(strncmp(ref, "#/", 2) == 0, "ref %s", ref);
                char buf[256];
                snprintf(buf, sizeof buf, "%s", ref + 2);
                json_t *at = root;
                for (char *tok = strtok(buf, "/"); tok && at; tok = strtok(NULL, "/"))
                    at = json_object_get(at, tok);
                CHECK_MSG(at != NULL, "dangling $ref %s", ref);
            } else {
                check_refs(root, v);
            }
        }
    } else if (json_is_array(node)) {
        size_t i;
        json_t *v;
        json_array_foreach(node, i, v) check_refs(root, v);
    }
}

int main(void)
{
    CHECK(embed_openapi_count == 1);
    json_error_t jerr;
    json_t *doc = json_loadb((const char *)embed_openapi[0].data, embed_openapi[0].size,
                             JSON_REJECT_DUPLICATES, &jerr);
    CHECK_MSG(doc != NULL, "openapi.json: line %d: %s", jerr.line, jerr.text);
    if (!doc)
        return check_finish();
    json_t *paths = json_object_get(doc, "paths");
    http_router *r = http_router_new();
    gt_error err = {0};
    CHECK_EQ_INT(routes_register(r, &err), GT_OK);
    int n = http_router_count(r);
    CHECK(n >= 17);
    /* Router -> document. */
    for (int i = 0; i < n; i++) {
        const char *method, *pattern;
        http_router_get(r, i, &method, &pattern);
        char m[16];
        lower(method, m, sizeof m);
        json_t *op = json_object_get(json_object_get(paths, pattern), m);
        CHECK_MSG(op != NULL, "%s %s is routed but not in api/openapi.json", method, pattern);
        if (!op)
            continue;
        json_t *responses = json_object_get(op, "responses");
        CHECK_MSG(json_object_size(responses) > 0, "%s %s documents no responses", method,
                  pattern);
        /* Routes with a path id can answer 404: it must be documented. */
        if (strchr(pattern, '{'))
            CHECK_MSG(json_object_get(responses, "404") != NULL, "%s %s: no 404 documented",
                      method, pattern);
    }
    /* Document -> router. */
    const char *path;
    json_t *item;
    json_object_foreach(paths, path, item) {
        const char *m;
        json_t *op;
        json_object_foreach(item, m, op) {
            if (strcmp(m, "parameters") == 0 || strcmp(m, "summary") == 0 ||
                strcmp(m, "description") == 0)
                continue;
            int found = 0;
            for (int i = 0; i < n && !found; i++) {
                const char *method, *pattern;
                http_router_get(r, i, &method, &pattern);
                char lm[16];
                lower(method, lm, sizeof lm);
                found = strcmp(lm, m) == 0 && strcmp(pattern, path) == 0;
            }
            CHECK_MSG(found, "%s %s is documented but not routed", m, path);
        }
    }
    check_refs(doc, doc);
    http_router_free(r);
    json_decref(doc);
    return check_finish();
}
