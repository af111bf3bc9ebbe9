/* token_body: a token request's body, checked (see token_body.h).  Every
 * refusal names the key at fault. */
#include "token_body.h"

#include <stdio.h>
#include <string.h>

static int refuse(token_body_fault *f, const char *field, const char *message)
{
    f->status = 422;
    snprintf(f->field, sizeof f->field, "%s", field);
    snprintf(f->message, sizeof f->message, "%s", message);
    return 0;
}

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
    char message[64];
    snprintf(message, sizeof message, "%s must be a string", key);
    return refuse(f, key, message);
}

int token_body_parse(const json_t *cbody, token_body *out, token_body_fault *f)
{
    memset(out, 0, sizeof *out);
    memset(f, 0, sizeof *f);
    json_t *body = (json_t *)cbody;       /* Jansson's getters take no const */
    if (!json_is_object(body))
        return refuse(f, "", "the body must be an object");
    static const char *const known[] = {"name", "role", "expires_at", "ttl"};
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        int ok = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            ok |= strcmp(key, known[i]) == 0;
        if (!ok) {
            /* a long key is cut, in the field and in the message */
            char message[sizeof f->message];
            snprintf(message, sizeof message,
                     "unknown member '%.180s' (name, role, expires_at, ttl)", key);
            return refuse(f, key, message);
        }
    }
    return optional_string(body, "name", &out->name, f) &&
           optional_string(body, "role", &out->role, f) &&
           optional_string(body, "expires_at", &out->expires_at, f) &&
           optional_string(body, "ttl", &out->ttl, f);
}
