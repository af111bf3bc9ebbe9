/* svc_check: the checks the service tests make on the servers they start,
 * over svc_harness.  Header only, so that its checks count in the test's
 * own check.h tally (svc_harness.c has none). */
#ifndef SVC_CHECK_H
#define SVC_CHECK_H

#include <signal.h>
#include <string.h>

#include <sqlite3.h>

#include "check.h"
#include "svc_harness.h"

/* svc_start; when the server does not start, its log is printed and a
 * check fails with the message failed ("the trainer did not start").  0
 * when it listens. */
static inline int svc_check_start(svc *s, const char *failed, const char *db,
                                  const char *data_dir, const char *const *extra)
{
    if (svc_start(s, db, data_dir, extra) == 0)
        return 0;
    svc_dump(s);
    CHECK_MSG(0, "%s", failed);
    return -1;
}

/* A client of the started server s, checked to open. */
static inline gc_client *svc_check_client(const svc *s)
{
    gc_client *c = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(gc_open(&c, s->url, &err), GT_OK);
    return c;
}

/* The end of a server: its log printed when any check of the test has
 * failed, then freed. */
static inline void svc_check_done(svc *s)
{
    if (check_failures_)
        svc_dump(s);
    svc_free(s);
}

/* Stops s with SIGTERM, checks that it exits with 0 within 30 s, then as
 * svc_check_done. */
static inline void svc_check_stop(svc *s)
{
    CHECK_EQ_INT(svc_stop(s, SIGTERM, 30000), 0);
    svc_check_done(s);
}

/* The stop of a server that may not have started: when up, with SIGTERM
 * and checked to exit with 0 within 30 s; else a check fails with the
 * message failed and the process, if any, is killed. */
static inline void svc_check_stop_started(svc *s, int up, const char *failed)
{
    if (up) {
        CHECK_EQ_INT(svc_stop(s, SIGTERM, 30000), 0);
    } else {
        CHECK_MSG(0, "%s", failed);
        svc_stop(s, SIGKILL, 1000);
    }
}

/* Submits the run config text (gc_submit_run, checked); the run's id, or
 * 0 when refused. */
static inline long long svc_check_submit(gc_client *c, const char *text)
{
    json_t *run = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(gc_submit_run(c, text, NULL, &run, &err), GT_OK);
    long long id = svc_num(run, "id");
    json_decref(run);
    return id;
}

/* The end of a test's folder: removed when no check failed, kept for a
 * look otherwise. */
static inline void svc_check_cleanup(const char *dir)
{
    if (!check_failures_)
        svc_remove_tree(dir);
}

/* The database at path on a read-only connection of the test's own (busy
 * for up to 5 s), checked to open. */
static inline sqlite3 *svc_check_open_db(const char *path)
{
    sqlite3 *h = NULL;
    CHECK(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    sqlite3_busy_timeout(h, 5000);
    return h;
}

/* The first column of the first row sql gives on h (its parameters ?1 ..
 * bound to the n values of args), or -1 when it gives none; a check fails
 * when sql does not prepare. */
static inline long long svc_check_query(sqlite3 *h, const char *sql, const long long *args,
                                        int n)
{
    sqlite3_stmt *st;
    long long v = -1;
    if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK) {
        CHECK_MSG(0, "%s: %s", sql, sqlite3_errmsg(h));
        return -1;
    }
    for (int i = 0; i < n; i++)
        sqlite3_bind_int64(st, i + 1, args[i]);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* PRAGMA integrity_check on the database at path answers "ok"; a failure
 * says "integrity_check after <when>" and what it answered. */
static inline void svc_check_integrity(const char *path, const char *when)
{
    sqlite3 *h = svc_check_open_db(path);
    sqlite3_stmt *st;
    CHECK(sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK);
    int ok = sqlite3_step(st) == SQLITE_ROW &&
             strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0;
    CHECK_MSG(ok, "integrity_check after %s: %s", when,
              sqlite3_column_text(st, 0) ? (const char *)sqlite3_column_text(st, 0) : "?");
    sqlite3_finalize(st);
    sqlite3_close(h);
}

#endif
