/* store: the service's SQLite database.
 *
 * One connection per process, opened in serialized mode (SQLite's own mutex
 * makes it safe to share between HTTP threads), in WAL mode so readers never
 * wait for the writer, with foreign keys enforced and a busy timeout so a
 * second process (giant migrate, the sqlite3 shell) waits instead of
 * failing.  The schema comes from numbered migrations (migrations/NNNN_name.sql,
 * embedded at build time), applied in order, each in its own transaction,
 * and recorded in schema_migrations with a checksum of the file.
 *
 * It also holds the one copy of the statement boilerplate (prepare, bind,
 * step, finalize, SQLite failures as gt_error): the modules that own tables
 * (runs, datasets) write SQL and read columns, nothing more.
 * Depends on SQLite, Jansson and embed. */
#ifndef STORE_H
#define STORE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <sqlite3.h>

#include "gt_error.h"

typedef struct store store;

typedef struct store_migration {
    int version;               /* from the file name: 0001_init.sql -> 1      */
    const char *name;          /* the file name                               */
    const char *sql;           /* NUL-terminated script                       */
} store_migration;

#define STORE_BUSY_TIMEOUT_MS 5000
#define STORE_MAX_MIGRATIONS 256

/* Opens (creating if missing) the database at path and sets the pragmas.
 * Fails with GT_EIO when the file cannot be opened or is not a database.
 * ":memory:" opens a private in-memory database (tests): it has no WAL, and
 * no other connection can see it. */
int store_open(store **out, const char *path, gt_error *err);

/* Closes the connection (a WAL checkpoint happens here); NULL is fine.
 * Returns GT_OK or GT_EIO when statements were left unfinalized. */
int store_close(store *s, gt_error *err);

/* The connection, for modules that run their own queries. */
sqlite3 *store_db(store *s);

/* The migrations compiled into this binary, validated (names NNNN_*.sql,
 * versions strictly increasing). out needs STORE_MAX_MIGRATIONS entries. */
int store_builtin_migrations(store_migration *out, int *n, gt_error *err);

/* Applies the pending migrations of list (sorted by version).  Refuses with
 * GT_EFORMAT a database whose newest applied version is above the newest in
 * list (naming both), or whose applied migration differs from the one in
 * list (checksum).  *applied (may be NULL) gets the number applied now. */
int store_migrate(store *s, const store_migration *list, int n, int *applied,
                  gt_error *err);

/* Newest applied migration version (0 for an empty database). */
int store_schema_version(store *s, int *version, gt_error *err);

/* Opens path and brings it to this binary's schema (the built-in
 * migrations, store_migrate): what every command that opens a database
 * does first.  *applied (may be NULL) gets the number applied now, *latest
 * (may be NULL) the newest version this binary carries.  On failure *out is
 * NULL, nothing is left open, and err says why. */
int store_open_migrated(store **out, const char *path, int *applied, int *latest,
                        gt_error *err);

/* FNV-1a 64 of text as 16 hex digits (checksum of a migration file). */
void store_checksum_text(const char *text, char out[17]);

/* ---------------------------------------------------------------------------
 * Statements
 *
 * Each helper prepares sql, binds args to ?1, ?2, ... in order, steps and
 * finalizes, and turns a failure into GT_EIO "what: <SQLite's message>";
 * a row refused by a UNIQUE constraint is GT_EINVAL instead (the caller's
 * value is taken).  Helpers that read one row answer GT_ENOTFOUND when
 * there is none and leave err alone then: the caller knows what is missing
 * and says so.
 * ------------------------------------------------------------------------- */

typedef enum { STORE_V_NULL, STORE_V_INT, STORE_V_REAL, STORE_V_TEXT, STORE_V_BLOB } store_kind;

/* One parameter; write them with the macros below. */
typedef struct store_val {
    store_kind kind;
    int64_t i;
    double r;
    const void *p;             /* text (NUL-terminated) or blob bytes         */
    size_t n;                  /* blob length                                 */
} store_val;

#define STORE_INT(x)     ((store_val){.kind = STORE_V_INT, .i = (x)})
#define STORE_REAL(x)    ((store_val){.kind = STORE_V_REAL, .r = (x)})    /* not finite: NULL */
#define STORE_TEXT(x)    ((store_val){.kind = STORE_V_TEXT, .p = (x)})    /* NULL pointer: NULL */
#define STORE_BLOB(x, n_) ((store_val){.kind = STORE_V_BLOB, .p = (x), .n = (n_)})

/* The parameters of one statement, as the two arguments (array, count):
 *     store_exec(s, "what", "UPDATE t SET a = ? WHERE id = ?",
 *                STORE_ARGS(STORE_TEXT(a), STORE_INT(id)), err);            */
#define STORE_ARGS(...)                                                              \
    ((const store_val[]){__VA_ARGS__}),                                              \
        (int)(sizeof((const store_val[]){__VA_ARGS__}) / sizeof(store_val))
#define STORE_NO_ARGS NULL, 0

/* Prepares and binds; the caller steps with store_step and finalizes
 * (sqlite3_finalize).  Blob bytes must live until then; text is copied. */
int store_query(store *s, const char *what, const char *sql, const store_val *args, int nargs,
                sqlite3_stmt **st, gt_error *err);

/* Steps st: 1 when a row is ready, 0 at the end, -1 on failure (err set). */
int store_step(store *s, sqlite3_stmt *st, const char *what, gt_error *err);

/* Runs a statement to its end, ignoring any rows (INSERT, UPDATE, DELETE,
 * PRAGMA). */
int store_exec(store *s, const char *what, const char *sql, const store_val *args, int nargs,
               gt_error *err);

/* The first column of the first row as an integer (NULL reads as 0): a
 * COUNT, an id, what INSERT/UPDATE ... RETURNING id gives.  GT_ENOTFOUND
 * when there is no row: an UPDATE ... RETURNING that changed nothing. */
int store_int64(store *s, const char *what, const char *sql, const store_val *args, int nargs,
                int64_t *out, gt_error *err);

/* The first column of the first row as malloc'ed text (NULL reads as "").
 * GT_ENOTFOUND when there is no row. */
int store_string(store *s, const char *what, const char *sql, const store_val *args, int nargs,
                 char **out, gt_error *err);

/* The first row as a JSON object keyed by column name (store_column_json
 * per column).  GT_ENOTFOUND when there is no row. */
int store_row_json(store *s, const char *what, const char *sql, const store_val *args,
                   int nargs, json_t **out, gt_error *err);

/* The row of one id the same way: sql selects it with one parameter, the
 * id.  GT_ENOTFOUND says "<noun> <id> does not exist". */
int store_row_by_id(store *s, const char *what, const char *noun, const char *sql, int64_t id,
                    json_t **out, gt_error *err);

/* Every row so, in an array (keep the result bounded with LIMIT). */
int store_rows_json(store *s, const char *what, const char *sql, const store_val *args,
                    int nargs, json_t **out, gt_error *err);

/* The same with each row made by row (a new reference; NULL when out of
 * memory): a table owner's own shape of its rows. */
int store_rows_with(store *s, const char *what, const char *sql, const store_val *args,
                    int nargs, json_t *(*row)(sqlite3_stmt *st), json_t **out, gt_error *err);

/* A column as JSON: INTEGER, REAL and TEXT as such; NULL, blobs and text
 * that is not UTF-8 as null. */
json_t *store_column_json(sqlite3_stmt *st, int i);

/* A transaction on the connection: BEGIN IMMEDIATE takes the write lock at
 * once, so it never fails half-way through on a busy database.  Only on a
 * connection no other thread uses (its statements would join it). */
int store_begin(store *s, gt_error *err);
int store_commit(store *s, gt_error *err);
void store_rollback(store *s);

#endif
