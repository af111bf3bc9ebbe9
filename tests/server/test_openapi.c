/* The router and api/openapi.json describe the same routes: every
 * (method, path) the service registers is documented, and every documented
 * operation exists.  Also checks each operation documents its error
 * replies, that its security and x-roles say what the route table's
 * access flags do (a Slurm job's ingest routes: the jobToken scheme and no
 * role), and that every $ref resolves. */
#include "check.h"

#include <ctype.h>
#include <string.h>

#include <jansson.h>

#include "auth.h"
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

/* The operation's security and x-roles against the route's access flags:
 * an open route has no token; any other lists exactly the roles that may
 * call it (admin always) and documents 401, 403 and 429. */
static void check_roles(const char *method, const char *pattern, int flags, json_t *op)
{
    unsigned access = ((unsigned)flags >> 8) & 0xffu;
    json_t *sec = json_object_get(op, "security");
    json_t *roles = json_object_get(op, "x-roles");
    if (access & AUTH_OPEN_BIT) {
        CHECK_MSG(!roles && (!sec || json_array_size(sec) == 0), "%s %s is open but documents"
                  " a token", method, pattern);
        return;
    }
    json_t *responses = json_object_get(op, "responses");
    if (access & AUTH_JOB_BIT) {
        /* a Slurm job's own token: no role, 401 and 403 */
        CHECK_MSG(!roles && json_object_get(json_array_get(sec, 0), "jobToken") != NULL &&
                      json_array_size(sec) == 1,
                  "%s %s takes a job token only but documents otherwise", method, pattern);
        CHECK_MSG(json_object_get(responses, "401") && json_object_get(responses, "403"),
                  "%s %s: no 401 or 403 documented", method, pattern);
        return;
    }
    unsigned want = (access & AUTH_SCRAPE_BIT) ? (unsigned)AUTH_ALL_ROLES
                                               : (access & AUTH_ALL_ROLES) | AUTH_ADMIN;
    unsigned got = 0;
    size_t i;
    json_t *r;
    json_array_foreach(roles, i, r) got |= auth_role_parse(json_string_value(r));
    CHECK_MSG(got == want && json_array_size(roles) > 0,
              "%s %s: x-roles say %#x, the route table %#x", method, pattern, got, want);
    CHECK_MSG(json_object_get(json_array_get(sec, 0), "bearer") != NULL,
              "%s %s: no bearer security", method, pattern);
    const char *codes[] = {"401", "403", "429"};
    for (int k = 0; k < 3; k++)
        CHECK_MSG(json_object_get(responses, codes[k]) != NULL, "%s %s: no %s documented",
                  method, pattern, codes[k]);
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
        check_roles(method, pattern, http_router_flags(r, i), op);
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
