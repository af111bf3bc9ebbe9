/* store: the service's SQLite database.
 *
 * One connection per process, opened in serialized mode (SQLite's own mutex
 * makes it safe to share between HTTP threads), in WAL mode so readers never
 * wait for the writer, with foreign keys enforced and a busy timeout so a
 * second process (giant migrate, the sqlite3 shell) waits instead of
 * failing.  The schema comes from numbered migrations (migrations/NNNN_name.sql,
 * embedded at build time), applied in order, each in its own transaction,
 * and recorded in schema_migrations with a checksum of the file.
 * Depends on SQLite and embed. */
#ifndef STORE_H
#define STORE_H

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
 * Fails with GT_EIO when the file cannot be opened or is not a database. */
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

/* FNV-1a 64 of text as 16 hex digits (checksum of a migration file). */
void store_checksum_text(const char *text, char out[17]);

#endif
