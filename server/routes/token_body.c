/* token_body: a token request's body, checked (see token_body.h).  Every
 * refusal names the key at fault. */
#include "token_body.h"

#include <string.h>

/* An optional string member: 1 with *out set (NULL when absent or null),
 * or 0 with the fault naming it. */
static int optional_string(json_t *body, const char *key, const char **out,
                           token_body_fault *f)
{
    json_t *v = json_object_get(body, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 1;
    if (json_is_string(v)) {
        *out = json_string_value(v);
        return 1;
    }
    return body_refuse(f, 422, key, "%s must be a string", key);
}

int token_body_parse(const json_t *cbody, token_body *out, token_body_fault *f)
{
    memset(out, 0, sizeof *out);
    memset(f, 0, sizeof *f);
    json_t *body = (json_t *)cbody;       /* Jansson's getters take no const */
    static const char *const known[] = {"name", "role", "expires_at", "ttl", NULL};
    if (!body_known_keys(body, known, f, sizeof f->field,
                         "unknown member '%.180s' (name, role, expires_at, ttl)"))
        return 0;
    return optional_string(body, "name", &out->name, f) &&
           optional_string(body, "role", &out->role, f) &&
           optional_string(body, "expires_at", &out->expires_at, f) &&
           optional_string(body, "ttl", &out->ttl, f);
}
