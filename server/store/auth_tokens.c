/* auth_tokens: the api_tokens table and the roles (auth_tokens.h). */
#include "auth_tokens.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "gt_sha256.h"

#define NOW_SQL "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

/* ---------------------------------------------------------------------------
 * Roles
 * ------------------------------------------------------------------------- */

static const struct {
    unsigned bit;
    const char *name;
} role_names[] = {
    { AUTH_ADMIN, "admin" },
    { AUTH_TRAINER, "trainer" },
    { AUTH_SAMPLER, "sampler" },
    { AUTH_READER, "reader" },
};

const char *auth_role_name(unsigned role)
{
    for (size_t i = 0; i < sizeof role_names / sizeof role_names[0]; i++)
        if (role_names[i].bit == role)
            return role_names[i].name;
    return "?";
}

unsigned auth_role_parse(const char *name)
{
    for (size_t i = 0; name && i < sizeof role_names / sizeof role_names[0]; i++)
        if (strcmp(role_names[i].name, name) == 0)
            return role_names[i].bit;
    return 0;
}

void auth_role_list(unsigned bits, char *out, size_t cap)
{
    out[0] = '\0';
    bits |= AUTH_ADMIN;
    for (size_t i = 0; i < sizeof role_names / sizeof role_names[0]; i++) {
        if (!(bits & role_names[i].bit))
            continue;
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%s%s", n ? ", " : "", role_names[i].name);
    }
}

/* ---------------------------------------------------------------------------
 * Tokens in the database
 * ------------------------------------------------------------------------- */

#define TOKEN_COLUMNS                                                                         \
    "id, name, prefix, role,"                                                                 \
    " CASE WHEN revoked_at IS NOT NULL THEN 'revoked'"                                        \
    "      WHEN expires_at IS NOT NULL AND expires_at <= " NOW_SQL " THEN 'expired'"          \
    "      ELSE 'active' END AS status,"                                                      \
    " created_at, expires_at, last_used_at, revoked_at"

#define USABLE_SQL "revoked_at IS NULL AND (expires_at IS NULL OR expires_at > " NOW_SQL ")"

static void hex(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

/* 1..64 of [A-Za-z0-9._-], not all digits: `giant token revoke NAME|ID`
 * reads digits as an id. */
static int name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > AUTH_NAME_MAX || strspn(name, "0123456789") == n)
        return 0;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-')
            return 0;
    return 1;
}

/* A new token's name and role, checked; *field names the one refused. */
static int check_name_role(const char *name, const char *role, const char **field,
                           gt_error *err)
{
    if (!name_ok(name)) {
        *field = "name";
        return gt_error_set(err, GT_EINVAL, "a token's name is 1 to %d letters, digits, '.', '_'"
                            " or '-', not only digits", AUTH_NAME_MAX);
    }
    if (!auth_role_parse(role)) {
        *field = "role";
        return gt_error_set(err, GT_EINVAL, "role '%s' is not admin, trainer, sampler or reader",
                            role ? role : "");
    }
    return GT_OK;
}

/* What the table keeps of a token: its public prefix and its SHA-256 in
 * hex, never the token. */
static int token_digest(const char *token, char prefix[AUTH_PREFIX_LEN + 1], char hash[65],
                        gt_error *err)
{
    snprintf(prefix, AUTH_PREFIX_LEN + 1, "%.*s", AUTH_PREFIX_LEN, token);
    if (gt_sha256_hex(token, strlen(token), hash) != 0)
        return gt_error_set(err, GT_EIO, "SHA-256 failed");
    return GT_OK;
}

int auth_expiry(store *s, const char *iso, const char *ttl, char out[40], gt_error *err)
{
    out[0] = '\0';
    if (iso && ttl)
        return gt_error_set(err, GT_EINVAL, "give an expiry time or a time to live, not both");
    char *v = NULL;
    int rc = GT_OK;
    if (iso) {
        /* SQLite reads a bare number as a Julian day: ask for a date. */
        if (strlen(iso) < 10 || !isdigit((unsigned char)iso[0]) || iso[4] != '-')
            return gt_error_set(err, GT_EINVAL, "expiry '%s' is not an ISO-8601 time"
                                " (2027-01-31 or 2027-01-31T12:00:00Z)", iso);
        rc = store_string(s, "reading an expiry", "SELECT strftime('%Y-%m-%dT%H:%M:%fZ', ?)",
                          STORE_ARGS(STORE_TEXT(iso)), &v, err);
        if (rc == GT_OK && !v[0])
            rc = gt_error_set(err, GT_EINVAL, "expiry '%s' is not an ISO-8601 time"
                              " (2027-01-31 or 2027-01-31T12:00:00Z)", iso);
    } else if (ttl) {
        char *end = NULL;
        long long n = strtoll(ttl, &end, 10);
        long long unit = !end || end == ttl || end[0] == '\0' || end[1] != '\0' ? 0
                         : *end == 's' ? 1 : *end == 'm' ? 60 : *end == 'h' ? 3600
                         : *end == 'd' ? 86400 : 0;
        if (unit == 0 || n < 1 || n > 36500LL * 86400 / unit)
            return gt_error_set(err, GT_EINVAL, "time to live '%s' is not N followed by s, m, h"
                                " or d (e.g. 30d), at most 100 years", ttl);
        char mod[48];
        snprintf(mod, sizeof mod, "+%lld seconds", n * unit);
        rc = store_string(s, "reading an expiry",
                          "SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)",
                          STORE_ARGS(STORE_TEXT(mod)), &v, err);
    }
    if (rc == GT_OK && v)
        snprintf(out, 40, "%s", v);
    free(v);
    return rc;
}

int auth_token_get(store *s, int64_t id, json_t **row, gt_error *err)
{
    return store_row_by_id(s, "reading a token", "token",
                           "SELECT " TOKEN_COLUMNS " FROM api_tokens WHERE id = ?", id, row, err);
}

int auth_token_list(store *s, json_t **rows, gt_error *err)
{
    return store_rows_json(s, "listing tokens",
                           "SELECT " TOKEN_COLUMNS " FROM api_tokens ORDER BY id DESC LIMIT 1000",
                           STORE_NO_ARGS, rows, err);
}

int auth_token_count_usable(store *s, long long *n, gt_error *err)
{
    int64_t c = 0;
    int rc = store_int64(s, "counting tokens", "SELECT COUNT(*) FROM api_tokens WHERE " USABLE_SQL,
                         STORE_NO_ARGS, &c, err);
    *n = rc ? 0 : (long long)c;
    return rc;
}

/* The id of the usable token named name: GT_ENOTFOUND when there is none. */
static int usable_by_name(store *s, const char *name, int64_t *id, gt_error *err)
{
    return store_int64(s, "finding a token",
                       "SELECT id FROM api_tokens WHERE name = ? AND " USABLE_SQL
                       " ORDER BY id DESC LIMIT 1",
                       STORE_ARGS(STORE_TEXT(name)), id, err);
}

int auth_token_create(store *s, const char *name, const char *role, const char *expires_at,
                      char token[AUTH_TOKEN_LEN + 1], json_t **row, const char **field,
                      gt_error *err)
{
    const char *unused;
    if (!field)
        field = &unused;
    *field = NULL;
    token[0] = '\0';
    int rc = check_name_role(name, role, field, err);
    if (rc)
        return rc;
    int64_t id = 0;
    rc = usable_by_name(s, name, &id, err);
    if (rc == GT_OK) {
        *field = "name";
        return gt_error_set(err, GT_EINVAL, "token '%s' exists (id %lld): revoke it first or"
                            " pick another name", name, (long long)id);
    }
    if (rc != GT_ENOTFOUND)
        return rc;
    /* 4 random bytes of public selector, 32 of secret. */
    unsigned char raw[36];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return gt_error_set(err, GT_EIO, "no random bytes for a token");
    char digits[73], hash[65], prefix[AUTH_PREFIX_LEN + 1];
    hex(raw, sizeof raw, digits);
    OPENSSL_cleanse(raw, sizeof raw);
    snprintf(token, AUTH_TOKEN_LEN + 1, "gt_%s", digits);
    OPENSSL_cleanse(digits, sizeof digits);
    if ((rc = token_digest(token, prefix, hash, err))) {
        OPENSSL_cleanse(token, AUTH_TOKEN_LEN + 1);
        return rc;
    }
    rc = store_int64(s, "creating a token",
                     "INSERT INTO api_tokens (name, prefix, token_hash, role, expires_at)"
                     " VALUES (?, ?, ?, ?, NULLIF(?, '')) RETURNING id",
                     STORE_ARGS(STORE_TEXT(name), STORE_TEXT(prefix), STORE_TEXT(hash),
                                STORE_TEXT(role), STORE_TEXT(expires_at ? expires_at : "")),
                     &id, err);
    if (rc == GT_OK && row)
        rc = auth_token_get(s, id, row, err);
    if (rc != GT_OK)
        OPENSSL_cleanse(token, AUTH_TOKEN_LEN + 1);
    return rc;
}

int auth_token_well_formed(const char *token)
{
    return token && strlen(token) == AUTH_TOKEN_LEN && strncmp(token, "gt_", 3) == 0;
}

int auth_token_register(store *s, const char *token, const char *name, const char *role,
                        int64_t *id, gt_error *err)
{
    int64_t unused;
    if (!id)
        id = &unused;
    *id = 0;
    if (!auth_token_well_formed(token))
        return gt_error_set(err, GT_EINVAL, "not a token: a token is 'gt_' and %d more"
                            " characters", AUTH_TOKEN_LEN - 3);
    const char *field;
    int rc = check_name_role(name, role, &field, err);
    if (rc)
        return rc;
    int64_t other = 0;
    rc = usable_by_name(s, name, &other, err);
    if (rc == GT_OK)
        return gt_error_set(err, GT_EINVAL, "token '%s' exists (id %lld): pick another name",
                            name, (long long)other);
    if (rc != GT_ENOTFOUND)
        return rc;
    char hash[65], prefix[AUTH_PREFIX_LEN + 1];
    if ((rc = token_digest(token, prefix, hash, err)))
        return rc;
    char *taken = NULL;
    rc = store_string(s, "finding a token", "SELECT name FROM api_tokens WHERE token_hash = ?",
                      STORE_ARGS(STORE_TEXT(hash)), &taken, err);
    if (rc == GT_OK) {
        rc = gt_error_set(err, GT_EINVAL, "the same token is registered already, as '%s'",
                          taken ? taken : "");
        free(taken);
        return rc;
    }
    if (rc != GT_ENOTFOUND)
        return rc;
    return store_int64(s, "registering a token",
                       "INSERT INTO api_tokens (name, prefix, token_hash, role)"
                       " VALUES (?, ?, ?, ?) RETURNING id",
                       STORE_ARGS(STORE_TEXT(name), STORE_TEXT(prefix), STORE_TEXT(hash),
                                  STORE_TEXT(role)),
                       id, err);
}

int auth_token_revoke(store *s, const char *which, int64_t *id, gt_error *err)
{
    *id = 0;
    int digits = which && *which && strspn(which, "0123456789") == strlen(which);
    int rc;
    if (digits && strlen(which) <= 18) {
        *id = strtoll(which, NULL, 10);
        int64_t one;
        rc = store_int64(s, "finding a token", "SELECT 1 FROM api_tokens WHERE id = ?",
                         STORE_ARGS(STORE_INT(*id)), &one, err);
    } else {
        rc = usable_by_name(s, which ? which : "", id, err);
    }
    if (rc == GT_ENOTFOUND)
        return gt_error_set(err, GT_ENOTFOUND, "no token %s'%s'", digits ? "with id " : "named ",
                            which ? which : "");
    if (rc != GT_OK)
        return rc;
    return store_exec(s, "revoking a token",
                      "UPDATE api_tokens SET revoked_at = " NOW_SQL
                      " WHERE id = ? AND revoked_at IS NULL",
                      STORE_ARGS(STORE_INT(*id)), err);
}

int auth_token_verify(store *s, const char *token, auth_verdict *verdict, auth_identity *who,
                      gt_error *err)
{
    *verdict = AUTH_UNKNOWN;
    memset(who, 0, sizeof *who);
    if (!auth_token_well_formed(token))
        return GT_OK;
    char hash[65], prefix[AUTH_PREFIX_LEN + 1];
    int rc = token_digest(token, prefix, hash, err);
    if (rc)
        return rc;
    sqlite3_stmt *st = NULL;
    const char *what = "checking a token";
    rc = store_query(s, what,
                         "SELECT id, name, role, token_hash, revoked_at IS NOT NULL,"
                         " expires_at IS NOT NULL AND expires_at <= " NOW_SQL ", expires_at"
                         " FROM api_tokens WHERE prefix = ?",
                         STORE_ARGS(STORE_TEXT(prefix)), &st, err);
    if (rc)
        return rc;
    int r;
    /* Every row of the prefix is compared (a prefix is 32 random bits, so
     * there is almost always one). */
    while ((r = store_step(s, st, what, err)) == 1) {
        const char *h = (const char *)sqlite3_column_text(st, 3);
        if (!h || strlen(h) != 64 || CRYPTO_memcmp(h, hash, 64) != 0)
            continue;
        const char *name = (const char *)sqlite3_column_text(st, 1);
        const char *role = (const char *)sqlite3_column_text(st, 2);
        const char *exp = (const char *)sqlite3_column_text(st, 6);
        who->id = sqlite3_column_int64(st, 0);
        who->role = auth_role_parse(role);
        snprintf(who->name, sizeof who->name, "%s", name ? name : "");
        snprintf(who->expires_at, sizeof who->expires_at, "%s", exp ? exp : "");
        *verdict = sqlite3_column_int(st, 4) ? AUTH_REVOKED
                   : sqlite3_column_int(st, 5) ? AUTH_EXPIRED
                   : who->role ? AUTH_VALID : AUTH_UNKNOWN;
        break;
    }
    sqlite3_finalize(st);
    return r < 0 ? GT_EIO : GT_OK;
}

int auth_token_touch(store *s, int64_t id, gt_error *err)
{
    return store_exec(s, "touching a token",
                      "UPDATE api_tokens SET last_used_at = " NOW_SQL " WHERE id = ?",
                      STORE_ARGS(STORE_INT(id)), err);
}
