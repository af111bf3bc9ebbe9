/* auth_tokens: the api_tokens table and the roles of its tokens.
 *
 * Owner of the api_tokens table: every SQL statement on it is here.  A
 * token is "gt_" + 8 hex digits of a public selector (the `prefix` column
 * holds "gt_" and them, shown in listings) + 64 hex digits of a random
 * 256-bit secret; the database keeps only the hex SHA-256 of the whole
 * token.  A presented token is found by its prefix and its hash compared
 * in constant time (CRYPTO_memcmp), so nothing about the secret shows in
 * the time a refusal takes.  What a route needs and the guard that asks
 * about every request are auth.h's.
 *
 * Depends on store, gt_sha256, OpenSSL's libcrypto. */
#ifndef AUTH_TOKENS_H
#define AUTH_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "gt_error.h"
#include "store.h"

/* Roles, as bits; admin may call every route.  Bits 5 to 7 are the guard's
 * (auth.h). */
enum {
    AUTH_ADMIN = 1u << 0,
    AUTH_TRAINER = 1u << 1,
    AUTH_SAMPLER = 1u << 2,
    AUTH_READER = 1u << 3,
    AUTH_ALL_ROLES = AUTH_ADMIN | AUTH_TRAINER | AUTH_SAMPLER | AUTH_READER,
};

#define AUTH_TOKEN_LEN 75          /* "gt_" + 8 + 64 hex digits            */
#define AUTH_PREFIX_LEN 11         /* "gt_" + 8 hex digits                  */
#define AUTH_NAME_MAX 64

/* "admin", "trainer", "sampler", "reader" for one role bit, else "?". */
const char *auth_role_name(unsigned role);
/* The role bit of a name, 0 when it is none of the four. */
unsigned auth_role_parse(const char *name);
/* "admin, trainer" for the roles in bits (admin always: it may call all). */
void auth_role_list(unsigned bits, char *out, size_t cap);

/* ---------------------------------------------------------------------------
 * Tokens in the database
 * ------------------------------------------------------------------------- */

/* The expiry of a new token as the table stores it (ISO-8601 UTC with
 * milliseconds) from either an ISO-8601 time ("2027-01-01",
 * "2027-01-01T12:00:00Z", with an offset) or a time to live ("90s", "45m",
 * "12h", "30d").  Both NULL gives "" (no expiry).  GT_EINVAL naming the
 * value otherwise. */
int auth_expiry(store *s, const char *iso, const char *ttl, char out[40], gt_error *err);

/* Creates a token: name (1..64 of [A-Za-z0-9._-], not all digits, not the
 * name of another usable token), role by name, expires_at "" for none.  Writes the token,
 * which is never stored and cannot be shown again, into token and the new
 * row (as auth_token_get) into *row (may be NULL).  GT_EINVAL for a bad or
 * taken name or an unknown role, with *field (may be NULL) set to "name"
 * or "role". */
int auth_token_create(store *s, const char *name, const char *role, const char *expires_at,
                      char token[AUTH_TOKEN_LEN + 1], json_t **row, const char **field,
                      gt_error *err);

/* A token's row: id, name, prefix, role, status (active, expired,
 * revoked), created_at, expires_at, last_used_at, revoked_at.  Never the
 * hash.  GT_ENOTFOUND with a message when there is no such id. */
int auth_token_get(store *s, int64_t id, json_t **row, gt_error *err);

/* Every token, newest first (at most 1000). */
int auth_token_list(store *s, json_t **rows, gt_error *err);

/* Revokes the token whose id or name (the one usable token of that name)
 * `which` is; revoking a revoked token changes nothing.  *id gets its id.
 * GT_ENOTFOUND when there is none. */
int auth_token_revoke(store *s, const char *which, int64_t *id, gt_error *err);

/* 1 when token has the form a presented token must have to be looked up
 * ("gt_" and 72 more characters, AUTH_TOKEN_LEN in all), else 0. */
int auth_token_well_formed(const char *token);

/* Registers a token made elsewhere (a sampling replica's --token-file):
 * its hash and prefix are stored as auth_token_create stores a new one's,
 * under name (as auth_token_create's) with role by name.  GT_EINVAL, with a
 * message that never holds the token, when it is not well formed
 * (auth_token_well_formed), the name is bad or taken, the role unknown,
 * or the same token is registered already; *id (may be NULL) gets its id. */
int auth_token_register(store *s, const char *token, const char *name, const char *role,
                        int64_t *id, gt_error *err);

/* Tokens neither revoked nor expired. */
int auth_token_count_usable(store *s, long long *n, gt_error *err);

/* ---------------------------------------------------------------------------
 * Checking a presented token
 * ------------------------------------------------------------------------- */

typedef enum {
    AUTH_VALID = 0,
    AUTH_UNKNOWN,              /* malformed, or no such token                 */
    AUTH_REVOKED,
    AUTH_EXPIRED,
} auth_verdict;

typedef struct auth_identity {
    int64_t id;
    unsigned role;             /* one role bit                                */
    char name[AUTH_NAME_MAX + 1];
    char expires_at[40];
} auth_identity;

/* Looks token up: *verdict says what was found; who is filled unless
 * AUTH_UNKNOWN.  Fails only when the database does. */
int auth_token_verify(store *s, const char *token, auth_verdict *verdict, auth_identity *who,
                      gt_error *err);

/* Writes the token's last_used_at (now); the guard decides how often. */
int auth_token_touch(store *s, int64_t id, gt_error *err);

#endif
