/* routes_tokens: /v1/tokens, the admin's view of the bearer tokens; the
 * body is checked by token_body, the rows are auth_tokens'. */
#include "routes_handlers.h"

#include <stdio.h>

#include <openssl/crypto.h>

#include "app.h"
#include "auth_tokens.h"
#include "log.h"
#include "routes_common.h"
#include "token_body.h"

/* POST /v1/tokens {"name", "role", "expires_at" | "ttl"}: 201 with the
 * token's row and, once, the token itself. */
void route_tokens_create(http_request *req, void *ctx)
{
    app *a = ctx;
    token_body b;
    token_body_fault fault;
    if (!token_body_parse(http_body_json(req), &b, &fault)) {
        http_reply_error(req, fault.status, HTTP_E_VALIDATION, fault.field, "%s", fault.message);
        return;
    }
    const char *name = b.name, *role = b.role, *iso = b.expires_at, *ttl = b.ttl;
    char expires[40];
    gt_error err = {0};
    int rc = auth_expiry(a->db, iso, ttl, expires, &err);
    if (!routes_reply_rc(req, rc, &err, 0, 422, ttl ? "ttl" : "expires_at"))
        return;
    char token[AUTH_TOKEN_LEN + 1];
    json_t *row = NULL;
    const char *field = NULL;
    rc = auth_token_create(a->db, name ? name : "", role ? role : "", expires, token, &row,
                           &field, &err);
    if (!routes_reply_rc(req, rc, &err, 0, 422, field))
        return;
    json_object_set_new(row, "token", json_string(token));
    OPENSSL_cleanse(token, sizeof token);
    log_msg(LOG_INFO, "token", "action=create id=%lld name=%s role=%s",
            (long long)json_integer_value(json_object_get(row, "id")), name, role);
    http_reply_json(req, 201, row);
}

void route_tokens_list(http_request *req, void *ctx)
{
    app *a = ctx;
    routes_reply_list(req, a->db, auth_token_list);
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
