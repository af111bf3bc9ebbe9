/* fuzz_token_body: the body of POST /v1/tokens, checked by token_body_parse
 * as the route does.  An accepted body must be an object of name, role,
 * expires_at and ttl only, each handed on as the body's own string, or
 * NULL exactly when the member is absent or null (auth_expiry and
 * auth_token_create take them as C strings).  A refused one must be a 422
 * with a message and a field that is "" when the body is no object (or
 * has the unknown key ""), a known member that is neither a string nor
 * null, or an unknown key of the body (cut to the field's size). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz_json.h"
#include "token_body.h"

static const char *const known[] = {"name", "role", "expires_at", "ttl"};

static int is_known(const char *key)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(key, known[i]))
            return 1;
    return 0;
}

/* out is the member's string, or NULL when it is absent or null. */
static int handed_on(json_t *body, const char *key, const char *out)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v))
        return out == NULL;
    return json_is_string(v) && out == json_string_value(v);
}

static void check_accepted(json_t *body, const token_body *b)
{
    const char *key;
    json_t *v;
    if (!json_is_object(body))
        abort();
    json_object_foreach(body, key, v) {
        if (!is_known(key))
            abort();
    }
    if (!handed_on(body, "name", b->name) || !handed_on(body, "role", b->role) ||
        !handed_on(body, "expires_at", b->expires_at) || !handed_on(body, "ttl", b->ttl))
        abort();
}

static void check_refused(json_t *body, const token_body_fault *f)
{
    if (f->status != 422 || !f->message[0])
        abort();
    if (!f->field[0]) {
        /* the body as a whole, or the unknown key "" */
        if (json_is_object(body) && !json_object_get(body, ""))
            abort();
        return;
    }
    if (is_known(f->field)) {
        json_t *v = json_object_get(body, f->field);
        if (!v || json_is_string(v) || json_is_null(v))
            abort();
        return;
    }
    const char *key;
    json_t *v;
    int found = 0;
    json_object_foreach(body, key, v) {
        found |= !is_known(key) && strncmp(key, f->field, strlen(f->field)) == 0 &&
                 (strlen(key) == strlen(f->field) || strlen(f->field) == sizeof f->field - 1);
    }
    if (!found)
        abort();
}

static void check(json_t *body, void *ctx)
{
    (void)ctx;
    token_body b;
    token_body_fault f;
    if (token_body_parse(body, &b, &f))
        check_accepted(body, &b);
    else
        check_refused(body, &f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_json_run(data, size, check, NULL);
}
