/* giant token: bearer tokens, offline on the database (like giant migrate):
 *
 *   giant token create --name N --role R [--expires ISO8601 | --ttl 30d]
 *   giant token list
 *   giant token revoke NAME|ID
 *
 * Each takes --db FILE (default: the service's, GIANT_DB).  The database is
 * created and migrated when needed, so the first token can be made before
 * the service ever started.  create prints the token once, on stdout. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

#include "auth_tokens.h"
#include "commands.h"
#include "log.h"
#include "settings.h"
#include "store.h"

static const char usage[] =
    "usage: giant token create --name NAME --role ROLE [--expires ISO8601 | --ttl N{s,m,h,d}]\n"
    "       giant token list\n"
    "       giant token revoke NAME|ID\n"
    "  each with [--db FILE]\n\n"
    "Bearer tokens of the service, written straight into its database.\n"
    "Roles: admin (everything, tokens included), trainer (runs: submit, cancel,\n"
    "and what reader and sampler may), sampler (samples, and reading runs),\n"
    "reader (runs, metrics, events, checkpoints, datasets).\n"
    "create prints the token once: it is stored only as a SHA-256 hash.\n";

static const char *str(json_t *row, const char *key)
{
    const char *v = json_string_value(json_object_get(row, key));
    return v ? v : "-";
}

static int token_create(store *db, const char *name, const char *role, const char *iso,
                        const char *ttl, gt_error *err)
{
    char expires[40], token[AUTH_TOKEN_LEN + 1];
    json_t *row = NULL;
    int rc = auth_expiry(db, iso, ttl, expires, err);
    if (rc == GT_OK)
        rc = auth_token_create(db, name ? name : "", role ? role : "", expires, token, &row,
                               NULL, err);
    if (rc != GT_OK)
        return rc;
    printf("%s\n", token);
    OPENSSL_cleanse(token, sizeof token);
    fprintf(stderr, "token %lld '%s': role %s, %s%s%s; it is shown only now, keep it safe\n",
            (long long)json_integer_value(json_object_get(row, "id")), str(row, "name"),
            str(row, "role"), expires[0] ? "expires " : "never expires", expires,
            strcmp(str(row, "status"), "expired") == 0 ? " (already expired)" : "");
    json_decref(row);
    return GT_OK;
}

static int token_list(store *db, gt_error *err)
{
    json_t *rows = NULL;
    int rc = auth_token_list(db, &rows, err);
    if (rc != GT_OK)
        return rc;
    printf("%-5s %-20s %-8s %-8s %-12s %-25s %-25s %s\n", "ID", "NAME", "ROLE", "STATUS",
           "PREFIX", "CREATED", "EXPIRES", "LAST USED");
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        printf("%-5lld %-20s %-8s %-8s %-12s %-25s %-25s %s\n",
               (long long)json_integer_value(json_object_get(r, "id")), str(r, "name"),
               str(r, "role"), str(r, "status"), str(r, "prefix"), str(r, "created_at"),
               str(r, "expires_at"), str(r, "last_used_at"));
    }
    json_decref(rows);
    return GT_OK;
}

int cmd_token(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *action = argv[1];
    const char *db_path = settings_env_or_default("db");
    const char *name = NULL, *role = NULL, *iso = NULL, *ttl = NULL;
    static const struct option opts[] = {
        {"db", required_argument, 0, 'd'},      {"name", required_argument, 0, 'n'},
        {"role", required_argument, 0, 'r'},    {"expires", required_argument, 0, 'e'},
        {"ttl", required_argument, 0, 't'},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    int o;
    /* argv + 1: getopt sees the action as its program name */
    while ((o = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'd': db_path = optarg; break;
        case 'n': name = optarg; break;
        case 'r': role = optarg; break;
        case 'e': iso = optarg; break;
        case 't': ttl = optarg; break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    int operands = argc - 1 - optind;
    int is_create = strcmp(action, "create") == 0, is_list = strcmp(action, "list") == 0,
        is_revoke = strcmp(action, "revoke") == 0;
    if ((!is_create && !is_list && !is_revoke) || (is_revoke ? operands != 1 : operands != 0) ||
        (is_create && (!name || !role)) || (!is_create && (name || role || iso || ttl))) {
        fputs(usage, stderr);
        return 2;
    }
    store *db = NULL;
    gt_error err = {0};
    int rc = store_open_migrated(&db, db_path, NULL, NULL, &err);
    if (rc == GT_OK) {
        if (is_create) {
            rc = token_create(db, name, role, iso, ttl, &err);
        } else if (is_list) {
            rc = token_list(db, &err);
        } else {
            int64_t id = 0;
            rc = auth_token_revoke(db, argv[1 + optind], &id, &err);
            if (rc == GT_OK)
                fprintf(stderr, "token %lld revoked\n", (long long)id);
        }
    }
    if (store_close(db, rc == GT_OK ? &err : NULL) != GT_OK && rc == GT_OK)
        rc = GT_EIO;
    if (rc != GT_OK) {
        fprintf(stderr, "giant token %s: %s\n", action, err.message);
        return rc == GT_EINVAL ? 2 : 1;
    }
    return 0;
}
