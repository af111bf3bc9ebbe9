#include "store.h"

#include <ctype.h>
#include <math.h>
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

/* ---------------------------------------------------------------------------
 * Statements
 * ------------------------------------------------------------------------- */

static void bind(sqlite3_stmt *st, int i, const store_val *v)
{
    switch (v->kind) {
    case STORE_V_INT: sqlite3_bind_int64(st, i, v->i); return;
    case STORE_V_REAL:
        /* SQLite stores NaN as NULL anyway; infinities too, so that every
         * non-finite value reads back the same way. */
        if (isfinite(v->r))
            sqlite3_bind_double(st, i, v->r);
        else
            sqlite3_bind_null(st, i);
        return;
    case STORE_V_TEXT:
        if (v->p)
            sqlite3_bind_text(st, i, v->p, -1, SQLITE_TRANSIENT);
        else
            sqlite3_bind_null(st, i);
        return;
    case STORE_V_BLOB: sqlite3_bind_blob64(st, i, v->p, v->n, SQLITE_STATIC); return;
    case STORE_V_NULL: sqlite3_bind_null(st, i); return;
    }
}

int store_query(store *s, const char *what, const char *sql, const store_val *args, int nargs,
                sqlite3_stmt **st, gt_error *err)
{
    *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK) {
        sqlite3_finalize(*st);
        *st = NULL;
        return sql_fail(err, s->db, what);
    }
    for (int i = 0; i < nargs; i++)
        bind(*st, i + 1, &args[i]);
    return GT_OK;
}

int store_step(store *s, sqlite3_stmt *st, const char *what, gt_error *err)
{
    /* Extended result codes are on: the step's own code says which
     * constraint, whatever another thread does on the connection meanwhile. */
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY)
        gt_error_set(err, GT_EINVAL, "%s: %s", what, sqlite3_errmsg(s->db));
    else
        sql_fail(err, s->db, what);
    return -1;
}

/* The code of the failure store_step reported in err. */
static int step_failure(const gt_error *err)
{
    return err && err->code ? err->code : GT_EIO;
}

int store_exec(store *s, const char *what, const char *sql, const store_val *args, int nargs,
               gt_error *err)
{
    sqlite3_stmt *st;
    int rc = store_query(s, what, sql, args, nargs, &st, err), r;
    if (rc)
        return rc;
    gt_error mine = {0};
    while ((r = store_step(s, st, what, &mine)) == 1)
        ;
    sqlite3_finalize(st);
    if (r < 0) {
        if (err)
            *err = mine;
        return step_failure(&mine);
    }
    return GT_OK;
}

/* Prepares, binds and steps to the first row: GT_OK with *st on it (the
 * caller finalizes), GT_ENOTFOUND (err untouched) or a failure. */
static int first_row(store *s, const char *what, const char *sql, const store_val *args,
                     int nargs, sqlite3_stmt **st, gt_error *err)
{
    int rc = store_query(s, what, sql, args, nargs, st, err);
    if (rc)
        return rc;
    gt_error mine = {0};
    int r = store_step(s, *st, what, &mine);
    if (r == 1)
        return GT_OK;
    sqlite3_finalize(*st);
    *st = NULL;
    if (r == 0)
        return GT_ENOTFOUND;
    if (err)
        *err = mine;
    return step_failure(&mine);
}

/* Finalizes a statement stopped on its first row.  An INSERT or UPDATE ...
 * RETURNING outside a transaction commits here, not at the step that gave
 * the row: a commit refused by the disk (an I/O error, a full disk) shows
 * only in finalize's code, and then the row read before was rolled back
 * (a dataset answered 202 with an id that did not exist).  A SELECT
 * finalizes with SQLITE_OK. */
static int finish_first_row(store *s, sqlite3_stmt *st, const char *what, gt_error *err)
{
    if (sqlite3_finalize(st) == SQLITE_OK)
        return GT_OK;
    return sql_fail(err, s->db, what);
}

int store_int64(store *s, const char *what, const char *sql, const store_val *args, int nargs,
                int64_t *out, gt_error *err)
{
    sqlite3_stmt *st;
    int rc = first_row(s, what, sql, args, nargs, &st, err);
    if (rc)
        return rc;
    int64_t v = sqlite3_column_int64(st, 0);
    if ((rc = finish_first_row(s, st, what, err)))
        return rc;
    *out = v;
    return GT_OK;
}

int store_string(store *s, const char *what, const char *sql, const store_val *args, int nargs,
                 char **out, gt_error *err)
{
    sqlite3_stmt *st;
    int rc = first_row(s, what, sql, args, nargs, &st, err);
    if (rc)
        return rc;
    const char *t = (const char *)sqlite3_column_text(st, 0);
    char *v = strdup(t ? t : "");
    if ((rc = finish_first_row(s, st, what, err))) {
        free(v);
        return rc;
    }
    *out = v;
    return *out ? GT_OK : gt_error_set(err, GT_ENOMEM, "%s: out of memory", what);
}

json_t *store_column_json(sqlite3_stmt *st, int i)
{
    json_t *v = NULL;
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER: v = json_integer(sqlite3_column_int64(st, i)); break;
    case SQLITE_FLOAT: v = json_real(sqlite3_column_double(st, i)); break;
    case SQLITE_TEXT: v = json_string((const char *)sqlite3_column_text(st, i)); break;
    default: break;
    }
    return v ? v : json_null();
}

static json_t *row_json(sqlite3_stmt *st)
{
    json_t *o = json_object();
    int n = sqlite3_column_count(st);
    for (int i = 0; o && i < n; i++)
        json_object_set_new(o, sqlite3_column_name(st, i), store_column_json(st, i));
    return o;
}

int store_row_json(store *s, const char *what, const char *sql, const store_val *args,
                   int nargs, json_t **out, gt_error *err)
{
    sqlite3_stmt *st;
    *out = NULL;
    int rc = first_row(s, what, sql, args, nargs, &st, err);
    if (rc)
        return rc;
    json_t *row = row_json(st);
    if ((rc = finish_first_row(s, st, what, err))) {
        json_decref(row);
        return rc;
    }
    *out = row;
    return *out ? GT_OK : gt_error_set(err, GT_ENOMEM, "%s: out of memory", what);
}

int store_row_by_id(store *s, const char *what, const char *noun, const char *sql, int64_t id,
                    json_t **out, gt_error *err)
{
    int rc = store_row_json(s, what, sql, STORE_ARGS(STORE_INT(id)), out, err);
    return rc == GT_ENOTFOUND
               ? gt_error_set(err, GT_ENOTFOUND, "%s %lld does not exist", noun, (long long)id)
               : rc;
}

int store_rows_json(store *s, const char *what, const char *sql, const store_val *args,
                    int nargs, json_t **out, gt_error *err)
{
    return store_rows_with(s, what, sql, args, nargs, row_json, out, err);
}

int store_rows_with(store *s, const char *what, const char *sql, const store_val *args,
                    int nargs, json_t *(*row)(sqlite3_stmt *st), json_t **out, gt_error *err)
{
    sqlite3_stmt *st;
    *out = NULL;
    int rc = store_query(s, what, sql, args, nargs, &st, err), r;
    if (rc)
        return rc;
    json_t *rows = json_array();
    while ((r = store_step(s, st, what, err)) == 1)
        if (json_array_append_new(rows, row(st)) != 0) {
            r = -1;
            gt_error_set(err, GT_ENOMEM, "%s: out of memory", what);
            break;
        }
    sqlite3_finalize(st);
    if (r < 0) {
        json_decref(rows);
        return step_failure(err);
    }
    *out = rows;
    return GT_OK;
}

static int exec_script(store *s, const char *sql, const char *what, gt_error *err)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        gt_error_set(err, GT_EIO, "%s: %s", what, msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        return GT_EIO;
    }
    return GT_OK;
}

int store_begin(store *s, gt_error *err)
{
    return exec_script(s, "BEGIN IMMEDIATE", "BEGIN IMMEDIATE", err);
}

int store_commit(store *s, gt_error *err)
{
    return exec_script(s, "COMMIT", "COMMIT", err);
}

void store_rollback(store *s)
{
    /* A failed statement may already have ended the transaction. */
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
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
     * run with different durability than documented.  An in-memory database
     * answers "memory": it has no file to be durable in. */
    char *mode = NULL;
    const char *want = strcmp(path, ":memory:") == 0 ? "memory" : "wal";
    if ((rc = store_string(s, "PRAGMA journal_mode = WAL", "PRAGMA journal_mode = WAL",
                           STORE_NO_ARGS, &mode, err)) != GT_OK) {
        if (rc == GT_ENOTFOUND)
            rc = gt_error_set(err, GT_EIO, "database %s: journal_mode gave no answer", path);
        goto fail;
    }
    if (strcmp(mode, want) != 0) {
        rc = gt_error_set(err, GT_EIO, "database %s: WAL mode refused (journal_mode is '%s')",
                          path, mode);
        free(mode);
        goto fail;
    }
    free(mode);
    /* NORMAL in WAL mode: a committed transaction survives a crash of the
     * process (kill -9); only a power cut can lose the last commits, and
     * never corrupts the file. It saves one fsync per commit. */
    if ((rc = store_exec(s, "PRAGMA synchronous = NORMAL", "PRAGMA synchronous = NORMAL",
                         STORE_NO_ARGS, err)) != GT_OK ||
        (rc = store_exec(s, "PRAGMA foreign_keys = ON", "PRAGMA foreign_keys = ON",
                         STORE_NO_ARGS, err)) != GT_OK)
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
    /* An empty database has no bookkeeping table yet: that is version 0. */
    int64_t v = 0;
    int rc = store_int64(s, "reading schema version",
                         "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND"
                         " name = 'schema_migrations'",
                         STORE_NO_ARGS, &v, err);
    if (rc == GT_ENOTFOUND)
        return GT_OK;
    if (rc == GT_OK)
        rc = store_int64(s, "reading schema version",
                         "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                         STORE_NO_ARGS, &v, err);
    if (rc == GT_OK)
        *version = (int)v;
    return rc;
}

int store_open_migrated(store **out, const char *path, int *applied, int *latest,
                        gt_error *err)
{
    store_migration list[STORE_MAX_MIGRATIONS];
    int n = 0, rc;
    *out = NULL;
    if ((rc = store_builtin_migrations(list, &n, err)) != GT_OK ||
        (rc = store_open(out, path, err)) != GT_OK ||
        (rc = store_migrate(*out, list, n, applied, err)) != GT_OK) {
        store_close(*out, NULL);
        *out = NULL;
        return rc;
    }
    if (latest)
        *latest = n ? list[n - 1].version : 0;
    return GT_OK;
}

/* Checks every recorded migration against list: same checksum, known. */
static int verify_applied(store *s, const store_migration *list, int n, gt_error *err)
{
    static const char what[] = "reading schema_migrations";
    sqlite3_stmt *st;
    int rc = store_query(s, what, "SELECT version, name, checksum FROM schema_migrations"
                                  " ORDER BY version",
                         STORE_NO_ARGS, &st, err), step;
    if (rc)
        return rc;
    while ((step = store_step(s, st, what, err)) == 1) {
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
    sqlite3_finalize(st);
    return rc == GT_OK && step < 0 ? GT_EIO : rc;
}

/* Applies one migration in its own IMMEDIATE transaction; re-checks inside
 * the transaction so two processes migrating at once apply it once. */
static int apply_one(store *s, const store_migration *m, int *done, gt_error *err)
{
    *done = 0;
    int rc = store_begin(s, err);
    if (rc) {
        gt_error_wrap(err, "migration %s", m->name);
        return rc;
    }
    int64_t one;
    rc = store_int64(s, "checking migration", "SELECT 1 FROM schema_migrations WHERE version = ?",
                     STORE_ARGS(STORE_INT(m->version)), &one, err);
    if (rc == GT_OK) {
        store_commit(s, NULL);
        return GT_OK;                 /* someone else applied it meanwhile */
    }
    if (rc != GT_ENOTFOUND)
        goto rollback;
    char what[300];
    snprintf(what, sizeof what, "migration %s", m->name);
    char sum[17];
    store_checksum_text(m->sql, sum);
    if ((rc = exec_script(s, m->sql, what, err)) ||
        (rc = store_exec(s, "recording migration",
                         "INSERT INTO schema_migrations(version, name, checksum) VALUES (?, ?, ?)",
                         STORE_ARGS(STORE_INT(m->version), STORE_TEXT(m->name), STORE_TEXT(sum)),
                         err)))
        goto rollback;
    if ((rc = store_commit(s, err))) {
        gt_error_wrap(err, "migration %s", m->name);
        goto rollback;
    }
    *done = 1;
    return GT_OK;
rollback:
    store_rollback(s);
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
    int current, rc;
    if ((rc = exec_script(s, schema_migrations_sql, "creating schema_migrations", err)))
        return rc;
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
