/* auth, in this process: the start-up decision (a non-loopback address
 * needs a usable token), roles by name, expiry parsing, tokens created,
 * verified (valid, altered, revoked, expired), listed without their hash,
 * revoked by name and id, and the token bucket on a clock of the test's
 * own (no sleeping, so nothing here depends on the machine's speed). */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "store.h"

static void test_listen_decision(void)
{
    const char *loop[] = {"127.0.0.1", "127.1.2.3", "::1", "localhost", "::ffff:127.0.0.1"};
    for (size_t i = 0; i < sizeof loop / sizeof loop[0]; i++)
        CHECK_MSG(auth_host_is_loopback(loop[i]), "%s is loopback", loop[i]);
    const char *open[] = {"0.0.0.0", "::", "10.0.0.1", "192.168.1.5", "example.org",
                          "128.0.0.1", "::ffff:10.0.0.1"};
    for (size_t i = 0; i < sizeof open / sizeof open[0]; i++)
        CHECK_MSG(!auth_host_is_loopback(open[i]), "%s is not loopback", open[i]);
    char why[1024];
    CHECK(auth_listen_allowed("127.0.0.1", 0, "x.db", why, sizeof why) == 1);
    CHECK(why[0] == '\0');
    CHECK(auth_listen_allowed("0.0.0.0", 1, "x.db", why, sizeof why) == 1);
    CHECK(auth_listen_allowed("0.0.0.0", 0, "x.db", why, sizeof why) == 0);
    CHECK_MSG(strstr(why, "giant token create --name NAME --role admin --db x.db") &&
                  strstr(why, "0.0.0.0"), "%s", why);
    CHECK(auth_listen_allowed("10.1.2.3", 0, "x.db", why, sizeof why) == 0);
}

static void test_roles(void)
{
    CHECK_EQ_INT(auth_role_parse("admin"), AUTH_ADMIN);
    CHECK_EQ_INT(auth_role_parse("trainer"), AUTH_TRAINER);
    CHECK_EQ_INT(auth_role_parse("sampler"), AUTH_SAMPLER);
    CHECK_EQ_INT(auth_role_parse("reader"), AUTH_READER);
    CHECK_EQ_INT(auth_role_parse("read"), 0);
    CHECK_EQ_INT(auth_role_parse("Admin"), 0);
    CHECK_EQ_INT(auth_role_parse(NULL), 0);
    CHECK(strcmp(auth_role_name(AUTH_SAMPLER), "sampler") == 0);
}

static void test_expiry(store *s)
{
    char out[40];
    gt_error err = {0};
    CHECK_EQ_INT(auth_expiry(s, NULL, NULL, out, &err), GT_OK);
    CHECK(out[0] == '\0');
    CHECK_EQ_INT(auth_expiry(s, "2027-01-31", NULL, out, &err), GT_OK);
    CHECK_MSG(strcmp(out, "2027-01-31T00:00:00.000Z") == 0, "%s", out);
    CHECK_EQ_INT(auth_expiry(s, "2027-01-31T12:30:00+02:00", NULL, out, &err), GT_OK);
    CHECK_MSG(strcmp(out, "2027-01-31T10:30:00.000Z") == 0, "%s", out);
    CHECK_EQ_INT(auth_expiry(s, NULL, "30d", out, &err), GT_OK);
    CHECK_MSG(strlen(out) == 24 && out[23] == 'Z', "%s", out);
    const char *bad_iso[] = {"garbage", "2461000", "2027-13-45", ""};
    for (size_t i = 0; i < sizeof bad_iso / sizeof bad_iso[0]; i++)
        CHECK_MSG(auth_expiry(s, bad_iso[i], NULL, out, &err) == GT_EINVAL, "'%s'", bad_iso[i]);
    const char *bad_ttl[] = {"0d", "5x", "d", "-1h", "10", "1dd", "99999999999d"};
    for (size_t i = 0; i < sizeof bad_ttl / sizeof bad_ttl[0]; i++)
        CHECK_MSG(auth_expiry(s, NULL, bad_ttl[i], out, &err) == GT_EINVAL, "'%s'", bad_ttl[i]);
    CHECK_EQ_INT(auth_expiry(s, "2027-01-31", "1d", out, &err), GT_EINVAL);
}

static void test_tokens(store *s)
{
    gt_error err = {0};
    char tok[AUTH_TOKEN_LEN + 1], tok2[AUTH_TOKEN_LEN + 1], old[AUTH_TOKEN_LEN + 1];
    json_t *row = NULL;
    const char *field = NULL;
    long long usable = -1;
    CHECK_EQ_INT(auth_token_count_usable(s, &usable, &err), GT_OK);
    CHECK_EQ_INT(usable, 0);
    CHECK_EQ_INT(auth_token_create(s, "ci", "trainer", "", tok, &row, &field, &err), GT_OK);
    CHECK_EQ_INT((int)strlen(tok), AUTH_TOKEN_LEN);
    CHECK(strncmp(tok, "gt_", 3) == 0);
    CHECK(strncmp(json_string_value(json_object_get(row, "prefix")), tok, AUTH_PREFIX_LEN) == 0);
    CHECK(strcmp(json_string_value(json_object_get(row, "status")), "active") == 0);
    CHECK(json_object_get(row, "token_hash") == NULL);
    json_decref(row);
    /* a taken name, a bad name, a bad role: refused, naming the field */
    CHECK_EQ_INT(auth_token_create(s, "ci", "reader", "", tok2, NULL, &field, &err), GT_EINVAL);
    CHECK(field && strcmp(field, "name") == 0 && strstr(err.message, "exists"));
    CHECK_EQ_INT(auth_token_create(s, "a b", "reader", "", tok2, NULL, &field, &err), GT_EINVAL);
    CHECK(field && strcmp(field, "name") == 0);
    CHECK_EQ_INT(auth_token_create(s, "42", "reader", "", tok2, NULL, &field, &err), GT_EINVAL);
    CHECK_EQ_INT(auth_token_create(s, "", "reader", "", tok2, NULL, &field, &err), GT_EINVAL);
    CHECK_EQ_INT(auth_token_create(s, "x", "write", "", tok2, NULL, &field, &err), GT_EINVAL);
    CHECK(field && strcmp(field, "role") == 0);
    CHECK_EQ_INT(auth_token_create(s, "old", "reader", "2020-01-01T00:00:00.000Z", old, NULL,
                                   &field, &err), GT_OK);
    CHECK_EQ_INT(auth_token_create(s, "farm", "sampler", "", tok2, NULL, &field, &err), GT_OK);
    CHECK(strcmp(tok, tok2) != 0);
    CHECK_EQ_INT(auth_token_count_usable(s, &usable, &err), GT_OK);
    CHECK_EQ_INT(usable, 2);

    auth_verdict v;
    auth_identity who;
    CHECK_EQ_INT(auth_token_verify(s, tok, &v, &who, &err), GT_OK);
    CHECK_EQ_INT(v, AUTH_VALID);
    CHECK_EQ_INT(who.role, AUTH_TRAINER);
    CHECK(strcmp(who.name, "ci") == 0);
    /* one character of the secret changed, the prefix kept */
    char bad[AUTH_TOKEN_LEN + 1];
    memcpy(bad, tok, sizeof bad);
    bad[AUTH_TOKEN_LEN - 1] = bad[AUTH_TOKEN_LEN - 1] == '0' ? '1' : '0';
    CHECK_EQ_INT(auth_token_verify(s, bad, &v, &who, &err), GT_OK);
    CHECK_EQ_INT(v, AUTH_UNKNOWN);
    const char *junk[] = {"", "gt_", "Bearer", "gt_zz", tok + 1};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        CHECK_EQ_INT(auth_token_verify(s, junk[i], &v, &who, &err), GT_OK);
        CHECK_EQ_INT(v, AUTH_UNKNOWN);
    }
    CHECK_EQ_INT(auth_token_verify(s, old, &v, &who, &err), GT_OK);
    CHECK_EQ_INT(v, AUTH_EXPIRED);
    CHECK(strcmp(who.expires_at, "2020-01-01T00:00:00.000Z") == 0);

    /* revoke by name, then the name is free again; by id; unknown ones */
    int64_t id = 0;
    CHECK_EQ_INT(auth_token_revoke(s, "ci", &id, &err), GT_OK);
    CHECK_EQ_INT(auth_token_verify(s, tok, &v, &who, &err), GT_OK);
    CHECK_EQ_INT(v, AUTH_REVOKED);
    CHECK_EQ_INT(auth_token_revoke(s, "ci", &id, &err), GT_ENOTFOUND);
    char which[16];
    snprintf(which, sizeof which, "%lld", (long long)who.id);
    CHECK_EQ_INT(auth_token_revoke(s, which, &id, &err), GT_OK);     /* again: no change */
    CHECK_EQ_INT(auth_token_revoke(s, "999", &id, &err), GT_ENOTFOUND);
    CHECK_EQ_INT(auth_token_create(s, "ci", "reader", "", tok, NULL, &field, &err), GT_OK);

    json_t *rows = NULL;
    CHECK_EQ_INT(auth_token_list(s, &rows, &err), GT_OK);
    CHECK_EQ_INT((int)json_array_size(rows), 4);
    char *text = json_dumps(rows, 0);
    CHECK(text && !strstr(text, "token_hash") && !strstr(text, tok + AUTH_PREFIX_LEN) &&
          strstr(text, "\"revoked\"") && strstr(text, "\"expired\""));
    free(text);
    json_decref(rows);
}

/* A token made elsewhere (a replica's --token-file), registered as given. */
static void test_register(store *s)
{
    gt_error err = {0};
    char tok[AUTH_TOKEN_LEN + 1];
    CHECK_EQ_INT(auth_token_create(s, "elsewhere", "sampler", "", tok, NULL, NULL, &err), GT_OK);
    /* the same secret in another database: the replica's in-memory one */
    store *m = NULL;
    store_migration list[STORE_MAX_MIGRATIONS];
    int n = 0;
    CHECK_EQ_INT(store_builtin_migrations(list, &n, &err), GT_OK);
    CHECK_EQ_INT(store_open(&m, ":memory:", &err), GT_OK);
    CHECK_EQ_INT(store_migrate(m, list, n, NULL, &err), GT_OK);
    if (!m)
        return;
    CHECK(auth_token_well_formed(tok));
    int64_t id = 0;
    CHECK_EQ_INT(auth_token_register(m, tok, "file-1", "sampler", &id, &err), GT_OK);
    CHECK(id > 0);
    auth_verdict v;
    auth_identity who;
    CHECK_EQ_INT(auth_token_verify(m, tok, &v, &who, &err), GT_OK);
    CHECK_EQ_INT(v, AUTH_VALID);
    CHECK_EQ_INT(who.role, AUTH_SAMPLER);
    CHECK_EQ_INT(who.id, id);
    CHECK(strcmp(who.name, "file-1") == 0);
    json_t *row = NULL;
    CHECK_EQ_INT(auth_token_get(m, id, &row, &err), GT_OK);
    CHECK(strncmp(json_string_value(json_object_get(row, "prefix")), tok, AUTH_PREFIX_LEN) == 0);
    json_decref(row);
    long long usable = 0;
    CHECK_EQ_INT(auth_token_count_usable(m, &usable, &err), GT_OK);
    CHECK_EQ_INT(usable, 1);
    /* a reader's */
    char tok2[AUTH_TOKEN_LEN + 1];
    memcpy(tok2, tok, sizeof tok2);
    tok2[5] = tok2[5] == 'a' ? 'b' : 'a';
    CHECK_EQ_INT(auth_token_register(m, tok2, "file-2", "reader", NULL, &err), GT_OK);
    CHECK_EQ_INT(auth_token_verify(m, tok2, &v, &who, &err), GT_OK);
    CHECK(v == AUTH_VALID && who.role == AUTH_READER);
    /* refused: the same token twice, a taken name, a bad name or role,
     * and every form a presented token may not have; the message never
     * holds the token */
    CHECK_EQ_INT(auth_token_register(m, tok, "file-3", "sampler", NULL, &err), GT_EINVAL);
    CHECK_MSG(strstr(err.message, "registered already") && !strstr(err.message, tok + 3),
              "%s", err.message);
    char tok3[AUTH_TOKEN_LEN + 1];
    memcpy(tok3, tok, sizeof tok3);
    tok3[6] = tok3[6] == 'a' ? 'b' : 'a';
    CHECK_EQ_INT(auth_token_register(m, tok3, "file-1", "sampler", NULL, &err), GT_EINVAL);
    CHECK(strstr(err.message, "exists") != NULL);
    CHECK_EQ_INT(auth_token_register(m, tok3, "a b", "sampler", NULL, &err), GT_EINVAL);
    CHECK_EQ_INT(auth_token_register(m, tok3, "x", "write", NULL, &err), GT_EINVAL);
    char longer[AUTH_TOKEN_LEN + 2];
    snprintf(longer, sizeof longer, "%sa", tok);
    char other[AUTH_TOKEN_LEN + 1];
    memcpy(other, tok, sizeof other);
    other[0] = 'G';
    const char *junk[] = {"", "gt_", "gt_zz", tok + 1, longer, other, NULL};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        CHECK_MSG(!auth_token_well_formed(junk[i]), "junk %zu is well formed", i);
        CHECK_EQ_INT(auth_token_register(m, junk[i], "junk", "sampler", NULL, &err), GT_EINVAL);
        CHECK_MSG(strstr(err.message, "not a token") &&
                  (!junk[i] || strlen(junk[i]) < 8 || !strstr(err.message, junk[i] + 3)),
                  "%s", err.message);
        /* what register refuses, verify never finds */
        if (junk[i]) {
            CHECK_EQ_INT(auth_token_verify(m, junk[i], &v, &who, &err), GT_OK);
            CHECK_EQ_INT(v, AUTH_UNKNOWN);
        }
    }
    CHECK_EQ_INT(auth_token_count_usable(m, &usable, &err), GT_OK);
    CHECK_EQ_INT(usable, 2);
    CHECK_EQ_INT(store_close(m, &err), GT_OK);
    CHECK_EQ_INT(auth_token_revoke(s, "elsewhere", &id, &err), GT_OK);
}

static void test_bucket(store *s)
{
    gt_error err = {0};
    auth_guard *g = NULL;
    auth_config cfg = {0, 1, 60, 3};         /* one a second, three at once */
    CHECK_EQ_INT(auth_guard_new(&g, s, &cfg, &err), GT_OK);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(auth_guard_take(g, 7, 100.0), 0);
    CHECK_EQ_INT(auth_guard_take(g, 7, 100.0), 1);
    CHECK_EQ_INT(auth_guard_take(g, 8, 100.0), 0);          /* another token: its own */
    CHECK_EQ_INT(auth_guard_take(g, 7, 100.5), 1);          /* half a request refilled */
    CHECK_EQ_INT(auth_guard_take(g, 7, 101.0), 0);
    CHECK_EQ_INT(auth_guard_take(g, 7, 1000.0), 0);         /* refills to the burst only */
    CHECK_EQ_INT(auth_guard_take(g, 7, 1000.0), 0);
    CHECK_EQ_INT(auth_guard_take(g, 7, 1000.0), 0);
    CHECK_EQ_INT(auth_guard_take(g, 7, 1000.0), 1);
    auth_guard_free(g);
    cfg = (auth_config){0, 1, 6, 1};                        /* one each 10 s */
    CHECK_EQ_INT(auth_guard_new(&g, s, &cfg, &err), GT_OK);
    CHECK_EQ_INT(auth_guard_take(g, 1, 0.0), 0);
    CHECK_EQ_INT(auth_guard_take(g, 1, 0.0), 10);
    CHECK_EQ_INT(auth_guard_take(g, 1, 7.5), 3);
    auth_guard_free(g);
    cfg = (auth_config){0, 1, 0, 1};                        /* no limit */
    CHECK_EQ_INT(auth_guard_new(&g, s, &cfg, &err), GT_OK);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ_INT(auth_guard_take(g, 1, 0.0), 0);
    auth_guard_free(g);
}

int main(void)
{
    test_listen_decision();
    test_roles();
    char dir[] = "test-auth-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/auth.db", dir);
    store_migration list[STORE_MAX_MIGRATIONS];
    int n = 0;
    gt_error err = {0};
    store *s = NULL;
    CHECK_EQ_INT(store_builtin_migrations(list, &n, &err), GT_OK);
    CHECK_EQ_INT(store_open(&s, path, &err), GT_OK);
    CHECK_EQ_INT(store_migrate(s, list, n, NULL, &err), GT_OK);
    if (!s)
        return check_finish();
    test_expiry(s);
    test_tokens(s);
    test_register(s);
    test_bucket(s);
    CHECK_EQ_INT(store_close(s, &err), GT_OK);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!check_failures_ && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_finish();
}
