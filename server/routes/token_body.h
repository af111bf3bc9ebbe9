/* token_body: the body of POST /v1/tokens, {"name", "role", "expires_at" |
 * "ttl"}, checked apart from the HTTP layer (the route replies with the
 * fault), so that a fuzzer reaches every path of it (fuzz_token_body).
 * Only its shape is checked here: the expiry, the name and the role are
 * checked by auth (auth_expiry, auth_token_create), which need the
 * database.  Depends on body_check and Jansson. */
#ifndef GIANT_TOKEN_BODY_H
#define GIANT_TOKEN_BODY_H

#include <jansson.h>

#include "body_check.h"

/* status 422; field the body's key at fault ("" = the body); message. */
typedef body_fault token_body_fault;

/* An accepted body: each member a string of the body, or NULL when it is
 * absent or null.  The strings live as long as the body does. */
typedef struct token_body {
    const char *name, *role, *expires_at, *ttl;
} token_body;

/* 1 with out filled, or 0 with fault filled.  body may be any JSON value,
 * or NULL. */
int token_body_parse(const json_t *body, token_body *out, token_body_fault *fault);

#endif
