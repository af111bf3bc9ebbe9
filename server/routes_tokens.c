#include "routes_tokens.h"

#include <string.h>

#include <openssl/crypto.h>

#include "app.h"
#include "auth.h"
#include "log.h"
#include "routes.h"

/* An optional string member: 1 with *out set (NULL when absent or null),
 * or 0 after a 422 naming it. */
static int optional_string(http_request *req, json_t *body, const char *key, const char **out)
{
    json_t *v = json_object_get(body, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 1;
    if (json_is_string(v)) {
        *out = json_string_value(v);
        return 1;
    }
    http_reply_error(req, 422, HTTP_E_VALIDATION, key, "%s must be a string", key);
    return 0;
}

/* POST /v1/tokens {"name", "role", "expires_at" | "ttl"}: 201 with the
 * token's row and, once, the token itself. */
void route_tokens_create(http_request *req, void *ctx)
{
    app *a = ctx;
    json_t *body = http_body_json(req);
    if (!json_is_object(body)) {
        http_reply_error(req, 422, HTTP_E_VALIDATION, "", "the body must be an object");
        return;
    }
    static const char *const known[] = {"name", "role", "expires_at", "ttl"};
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        int ok = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            ok |= strcmp(key, known[i]) == 0;
        if (!ok) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, key,
                             "unknown member '%s' (name, role, expires_at, ttl)", key);
            return;
        }
    }
    const char *name, *role, *iso, *ttl;
    if (!optional_string(req, body, "name", &name) || !optional_string(req, body, "role", &role) ||
        !optional_string(req, body, "expires_at", &iso) ||
        !optional_string(req, body, "ttl", &ttl))
        return;
    char expires[40];
    gt_error err = {0};
    int rc = auth_expiry(a->db, iso, ttl, expires, &err);
    if (rc != GT_OK) {
        if (rc == GT_EINVAL)
            http_reply_error(req, 422, HTTP_E_VALIDATION, ttl ? "ttl" : "expires_at", "%s",
                             err.message);
        else
            routes_reply_internal(req, &err);
        return;
    }
    char token[AUTH_TOKEN_LEN + 1];
    json_t *row = NULL;
    const char *field = NULL;
    rc = auth_token_create(a->db, name ? name : "", role ? role : "", expires, token, &row,
                           &field, &err);
    if (rc != GT_OK) {
        if (rc == GT_EINVAL)
            http_reply_error(req, 422, HTTP_E_VALIDATION, field, "%s", err.message);
        else
            routes_reply_internal(req, &err);
        return;
    }
    json_object_set_new(row, "token", json_string(token));
    OPENSSL_cleanse(token, sizeof token);
    log_msg(LOG_INFO, "token", "action=create id=%lld name=%s role=%s",
            (long long)json_integer_value(json_object_get(row, "id")), name, role);
    http_reply_json(req, 201, row);
}

void route_tokens_list(http_request *req, void *ctx)
{
    app *a = ctx;
    json_t *rows = NULL;
    gt_error err = {0};
    if (auth_token_list(a->db, &rows, &err) != GT_OK) {
        routes_reply_internal(req, &err);
        return;
    }
    http_reply_json(req, 200, json_pack("{s:o}", "items", rows));
}

/* DELETE /v1/tokens/{id}: revokes (the row stays, with revoked_at); a
 * revoked token stays revoked, so a retry gets the same 200. */
void route_tokens_revoke(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = routes_parse_id(http_param(req, "id"));
    char which[32];
    snprintf(which, sizeof which, "%lld", (long long)id);
    json_t *row = NULL;
    gt_error err = {0};
    int rc = id > 0 ? auth_token_revoke(a->db, which, &id, &err) : GT_ENOTFOUND;
    if (rc == GT_OK)
        rc = auth_token_get(a->db, id, &row, &err);
    if (rc == GT_ENOTFOUND) {
        http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL, "token '%s' does not exist",
                         http_param(req, "id"));
        return;
    }
    if (rc != GT_OK) {
        routes_reply_internal(req, &err);
        return;
    }
    log_msg(LOG_INFO, "token", "action=revoke id=%lld", (long long)id);
    http_reply_json(req, 200, row);
}
