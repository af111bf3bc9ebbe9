#include "store.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "log.h"

struct store {
    sqlite3 *db;
    char path[1024];
};

sqlite3 *store_db(store *s)
{
    return s->db;
}

static int sql_fail(gt_error *err, sqlite3 *db, const char *what)
{
    return gt_error_set(err, GT_EIO, "%s: %s", what, db ? sqlite3_errmsg(db) : "no database");
}

/* Runs a statement that returns at most one text value (PRAGMA x = y). */
static int exec_text(sqlite3 *db, const char *sql, char *out, size_t cap, gt_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return sql_fail(err, db, sql);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        sql_fail(err, db, sql);
        sqlite3_finalize(st);
        return GT_EIO;
    }
    if (out && cap) {
        const unsigned char *t = rc == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
        snprintf(out, cap, "%s", t ? (const char *)t : "");
    }
    sqlite3_finalize(st);
    return GT_OK;
}

int store_open(store **out, const char *path, gt_error *err)
{
    *out = NULL;
    if (!path || !*path)
        return gt_error_set(err, GT_EINVAL, "store_open: empty path");
    store *s = calloc(1, sizeof *s);
    if (!s)
        return gt_error_set(err, GT_ENOMEM, "store_open: out of memory");
    snprintf(s->path, sizeof s->path, "%s", path);
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
    int rc = sqlite3_open_v2(path, &s->db, flags, NULL);
    if (rc != SQLITE_OK) {
        gt_error_set(err, GT_EIO, "opening database %s: %s", path,
                     s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        sqlite3_close(s->db);
        free(s);
        return GT_EIO;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, STORE_BUSY_TIMEOUT_MS);

    /* journal_mode answers with the mode now in force: a file that is not a
     * database fails here, and a file system without shared memory (where
     * WAL is impossible) answers something else, which we refuse rather than
     * run with different durability than documented. */
    char mode[32];
    if ((rc = exec_text(s->db, "PRAGMA journal_mode = WAL", mode, sizeof mode, err)) != GT_OK)
        goto fail;
    if (strcmp(mode, "wal") != 0) {
        rc = gt_error_set(err, GT_EIO, "database %s: WAL mode refused (journal_mode is '%s')",
                          path, mode);
        goto fail;
    }
    /* NORMAL in WAL mode: a committed transaction survives a crash of the
     * process (kill -9); only a power cut can lose the last commits, and
     * never corrupts the file. It saves one fsync per commit. */
    if ((rc = exec_text(s->db, "PRAGMA synchronous = NORMAL", NULL, 0, err)) != GT_OK ||
        (rc = exec_text(s->db, "PRAGMA foreign_keys = ON", NULL, 0, err)) != GT_OK)
        goto fail;
    *out = s;
    return GT_OK;
fail:
    gt_error_wrap(err, "opening database %s", path);
    sqlite3_close(s->db);
    free(s);
    return rc;
}

int store_close(store *s, gt_error *err)
{
    if (!s)
        return GT_OK;
    int rc = sqlite3_close(s->db);
    if (rc != SQLITE_OK) {
        /* Unfinalized statements: a bug elsewhere. Close anyway when they
         * are finished (v2), and report it. */
        gt_error_set(err, GT_EIO, "closing database %s: %s", s->path, sqlite3_errstr(rc));
        sqlite3_close_v2(s->db);
        free(s);
        return GT_EIO;
    }
    free(s);
    return GT_OK;
}

void store_checksum_text(const char *text, char out[17])
{
    unsigned long long h = 14695981039346656037ULL;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    snprintf(out, 17, "%016llx", h);
}

/* ---------------------------------------------------------------------------
 * Migrations
 * ------------------------------------------------------------------------- */

int store_builtin_migrations(store_migration *out, int *n, gt_error *err)
{
    *n = 0;
    if (embed_migrations_count > STORE_MAX_MIGRATIONS)
        return gt_error_set(err, GT_EFORMAT, "more than %d migrations", STORE_MAX_MIGRATIONS);
    int prev = 0;
    for (size_t i = 0; i < embed_migrations_count; i++) {
        const embed_file *f = &embed_migrations[i];
        int digits = 0;
        while (isdigit((unsigned char)f->name[digits]))
            digits++;
        size_t len = strlen(f->name);
        if (digits != 4 || f->name[4] != '_' || len < 10 || strcmp(f->name + len - 4, ".sql") != 0)
            return gt_error_set(err, GT_EFORMAT, "migration file '%s' is not NNNN_name.sql",
                                f->name);
        int v = atoi(f->name);
        if (v <= prev)
            return gt_error_set(err, GT_EFORMAT, "migration '%s' does not follow version %d",
                                f->name, prev);
        out[*n] = (store_migration){ v, f->name, (const char *)f->data };
        (*n)++;
        prev = v;
    }
    return GT_OK;
}

static const char schema_migrations_sql[] =
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    "  version    INTEGER PRIMARY KEY,"
    "  name       TEXT NOT NULL,"
    "  checksum   TEXT NOT NULL,"
    "  applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"
    ")";

int store_schema_version(store *s, int *version, gt_error *err)
{
    *version = 0;
    char text[32];
    /* An empty database has no bookkeeping table yet: that is version 0. */
    int exists = 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND "
                           "name = 'schema_migrations'", -1, &st, NULL) != SQLITE_OK)
        return sql_fail(err, s->db, "reading schema version");
    int rc = sqlite3_step(st);
    exists = rc == SQLITE_ROW;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return sql_fail(err, s->db, "reading schema version");
    if (!exists)
        return GT_OK;
    if ((rc = exec_text(s->db, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations", text,
                        sizeof text, err)) != GT_OK)
        return rc;
    *version = atoi(text);
    return GT_OK;
}

/* Checks every recorded migration against list: same checksum, known. */
static int verify_applied(store *s, const store_migration *list, int n, gt_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT version, name, checksum FROM schema_migrations "
                                  "ORDER BY version", -1, &st, NULL) != SQLITE_OK)
        return sql_fail(err, s->db, "reading schema_migrations");
    int rc = GT_OK, step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int v = sqlite3_column_int(st, 0);
        const char *name = (const char *)sqlite3_column_text(st, 1);
        const char *sum = (const char *)sqlite3_column_text(st, 2);
        const store_migration *m = NULL;
        for (int i = 0; i < n; i++)
            if (list[i].version == v)
                m = &list[i];
        if (!m) {
            rc = gt_error_set(err, GT_EFORMAT,
                              "database has migration %04d (%s) that this binary does not know",
                              v, name ? name : "?");
            break;
        }
        char want[17];
        store_checksum_text(m->sql, want);
        if (!sum || strcmp(sum, want) != 0) {
            rc = gt_error_set(err, GT_EFORMAT,
                              "migration %s was applied with checksum %s but this binary's copy "
                              "has %s: applied migration files must never change",
                              m->name, sum ? sum : "(none)", want);
            break;
        }
    }
    if (rc == GT_OK && step != SQLITE_DONE)
        rc = sql_fail(err, s->db, "reading schema_migrations");
    sqlite3_finalize(st);
    return rc;
}

/* Applies one migration in its own IMMEDIATE transaction; re-checks inside
 * the transaction so two processes migrating at once apply it once. */
static int apply_one(store *s, const store_migration *m, int *done, gt_error *err)
{
    *done = 0;
    char *msg = NULL;
    if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK) {
        gt_error_set(err, GT_EIO, "migration %s: BEGIN: %s", m->name, msg ? msg : "?");
        sqlite3_free(msg);
        return GT_EIO;
    }
    sqlite3_stmt *st = NULL;
    int rc = GT_OK;
    if (sqlite3_prepare_v2(s->db, "SELECT 1 FROM schema_migrations WHERE version = ?", -1, &st,
                           NULL) != SQLITE_OK) {
        rc = sql_fail(err, s->db, "checking migration");
        goto rollback;
    }
    sqlite3_bind_int(st, 1, m->version);
    int step = sqlite3_step(st);
    sqlite3_finalize(st);
    if (step == SQLITE_ROW) {
        sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
        return GT_OK;                 /* someone else applied it meanwhile */
    }
    if (sqlite3_exec(s->db, m->sql, NULL, NULL, &msg) != SQLITE_OK) {
        rc = gt_error_set(err, GT_EIO, "migration %s: %s", m->name, msg ? msg : "?");
        sqlite3_free(msg);
        goto rollback;
    }
    char sum[17];
    store_checksum_text(m->sql, sum);
    if (sqlite3_prepare_v2(s->db, "INSERT INTO schema_migrations(version, name, checksum) "
                                  "VALUES (?, ?, ?)", -1, &st, NULL) != SQLITE_OK) {
        rc = sql_fail(err, s->db, "recording migration");
        goto rollback;
    }
    sqlite3_bind_int(st, 1, m->version);
    sqlite3_bind_text(st, 2, m->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, sum, -1, SQLITE_TRANSIENT);
    step = sqlite3_step(st);
    sqlite3_finalize(st);
    if (step != SQLITE_DONE) {
        rc = sql_fail(err, s->db, "recording migration");
        goto rollback;
    }
    if (sqlite3_exec(s->db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
        rc = gt_error_set(err, GT_EIO, "migration %s: COMMIT: %s", m->name, msg ? msg : "?");
        sqlite3_free(msg);
        goto rollback;
    }
    *done = 1;
    return GT_OK;
rollback:
    /* A migration may itself have ended the transaction on error. */
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

int store_migrate(store *s, const store_migration *list, int n, int *applied, gt_error *err)
{
    if (applied)
        *applied = 0;
    if (!s || (!list && n) || n < 0)
        return gt_error_set(err, GT_EINVAL, "store_migrate: bad arguments");
    for (int i = 1; i < n; i++)
        if (list[i].version <= list[i - 1].version)
            return gt_error_set(err, GT_EINVAL, "store_migrate: migrations out of order at %s",
                                list[i].name);
    char *msg = NULL;
    if (sqlite3_exec(s->db, schema_migrations_sql, NULL, NULL, &msg) != SQLITE_OK) {
        gt_error_set(err, GT_EIO, "creating schema_migrations: %s", msg ? msg : "?");
        sqlite3_free(msg);
        return GT_EIO;
    }
    int current, rc;
    if ((rc = store_schema_version(s, &current, err)) != GT_OK)
        return rc;
    int latest = n ? list[n - 1].version : 0;
    if (current > latest)
        return gt_error_set(err, GT_EFORMAT,
                            "database schema version %d is newer than this binary supports "
                            "(%d): run a newer giant, or restore a matching backup",
                            current, latest);
    if ((rc = verify_applied(s, list, n, err)) != GT_OK)
        return rc;
    for (int i = 0; i < n; i++) {
        int done;
        if ((rc = apply_one(s, &list[i], &done, err)) != GT_OK)
            return rc;
        if (done) {
            log_msg(LOG_INFO, "migration", "version=%d name=%s", list[i].version, list[i].name);
            if (applied)
                (*applied)++;
        }
    }
    return GT_OK;
}
