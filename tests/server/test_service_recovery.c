/* The scheduler under interruption, against the real `giant serve`:
 * - cancel a queued run (at once) and a running one (within a step);
 * - SIGKILL the server mid-run: after a restart the run resumes from its
 *   last checkpoints and finishes;
 * - SIGTERM it mid-run: it exits cleanly, the run goes back to the queue
 *   and resumes at the next start;
 * - a stop signal that lands on any thread of the process, a library's
 *   (OpenBLAS starts threads before main, with nothing blocked) or the main
 *   one, before the server is up or after, gives the same clean exit;
 * and no metric is recorded twice (one row per stage, name and step). */
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sqlite3.h>

#include "giant_client.h"
#include "svc_check.h"
#include "svc_harness.h"

static long long submit(gc_client *c, const char *name, int steps, int ckpt_every)
{
    char *cfg = svc_tiny_config(name, steps, 5, ckpt_every, NULL);
    long long id = svc_check_submit(c, cfg);
    free(cfg);
    return id;
}

static long long done_steps(gc_client *c, long long id, char *status)
{
    json_t *run = NULL;
    gt_error err = {0};
    if (gc_get_run(c, id, &run, &err) != GT_OK)
        return -1;
    if (status)
        snprintf(status, 16, "%s", svc_str(run, "status") ? svc_str(run, "status") : "");
    long long d = svc_num(json_object_get(run, "progress"), "done_steps");
    json_decref(run);
    return d;
}

/* Waits until the run has done at least `steps` steps. */
static int wait_steps(gc_client *c, long long id, long long steps, long ms)
{
    for (long t = 0; t < ms; t += 20) {
        if (done_steps(c, id, NULL) >= steps)
            return 1;
        svc_sleep_ms(20);
    }
    return 0;
}

static void test_cancel(gc_client *c)
{
    long long a = submit(c, "long", 400, 100);
    long long b = submit(c, "queued", 10, 10);
    CHECK(wait_steps(c, a, 10, 60000));
    /* b waits behind a: cancelled at once. */
    json_t *run = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(gc_cancel_run(c, b, &run, &err), GT_OK);
    CHECK_MSG(svc_str(run, "status") && strcmp(svc_str(run, "status"), "cancelled") == 0,
              "status %s", svc_str(run, "status"));
    json_decref(run);
    /* a is running: cancelled within a step. */
    CHECK_EQ_INT(gc_cancel_run(c, a, &run, &err), GT_OK);
    CHECK(json_is_true(json_object_get(run, "cancel_requested")));
    json_decref(run);
    run = svc_wait_run(c, a, NULL, 10000);
    CHECK_MSG(svc_str(run, "status") && strcmp(svc_str(run, "status"), "cancelled") == 0,
              "status %s", svc_str(run, "status"));
    CHECK(svc_num(json_object_get(run, "progress"), "done_steps") < 800);
    json_decref(run);
    /* b never ran. */
    run = svc_wait_run(c, b, NULL, 1000);
    CHECK(json_is_null(json_object_get(run, "started_at")));
    json_decref(run);
}

/* A watcher of the event stream, on its own thread and connection. */
typedef struct watcher {
    const char *url;
    long long run;
    int rc, events;
} watcher;

static int count_event(void *user, long long id, const char *event, const char *data)
{
    (void)id, (void)event, (void)data;
    ((watcher *)user)->events++;
    return 0;
}

static void *watch_main(void *arg)
{
    watcher *w = arg;
    gc_client *c = NULL;
    gt_error err = {0};
    w->rc = gc_open(&c, w->url, &err);
    if (w->rc == GT_OK)
        w->rc = gc_watch_events(c, w->run, 0, count_event, w, &err);
    gc_close(c);
    return NULL;
}

/* Rows per (stage, name, step) are unique by the schema; the check is
 * that each series has exactly one row per logged step. */
static void check_no_duplicates(const char *db, long long run, int steps, int log_every)
{
    sqlite3 *h;
    CHECK(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    sqlite3_stmt *st;
    CHECK(sqlite3_prepare_v2(h,
                             "SELECT stage, COUNT(*), COUNT(DISTINCT step) FROM metrics WHERE"
                             " run_id = ? AND name = 'loss' GROUP BY stage",
                             -1, &st, NULL) == SQLITE_OK);
    sqlite3_bind_int64(st, 1, run);
    int stages = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        stages++;
        CHECK_EQ_INT(sqlite3_column_int(st, 1), steps / log_every);
        CHECK_EQ_INT(sqlite3_column_int(st, 2), steps / log_every);
    }
    CHECK_EQ_INT(stages, 2);
    sqlite3_finalize(st);
    /* and the event stream holds each logged step and validation once:
     * the steps a resumed run trains again after its last checkpoint
     * replace their metric rows and add no second event, so a client
     * resuming with Last-Event-ID sees each step once */
    CHECK(sqlite3_prepare_v2(h,
                             "SELECT kind, COUNT(*), COUNT(DISTINCT json_extract(data, '$.stage')"
                             " || ':' || json_extract(data, '$.step')) FROM run_events"
                             " WHERE run_id = ? AND kind IN ('metric', 'val_loss') GROUP BY kind",
                             -1, &st, NULL) == SQLITE_OK);
    sqlite3_bind_int64(st, 1, run);
    int kinds = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        kinds++;
        CHECK_MSG(sqlite3_column_int(st, 1) == sqlite3_column_int(st, 2),
                  "run %lld: %d %s events for %d distinct steps", run, sqlite3_column_int(st, 1),
                  (const char *)sqlite3_column_text(st, 0), sqlite3_column_int(st, 2));
        if (!strcmp((const char *)sqlite3_column_text(st, 0), "metric"))
            CHECK_EQ_INT(sqlite3_column_int(st, 1), 2 * (steps / log_every));
    }
    CHECK_EQ_INT(kinds, 2);
    sqlite3_finalize(st);
    sqlite3_close(h);
}

/* After a stop: frees the old server and client, starts the server again on
 * the same database and reconnects; -1 (reported) when it does not start. */
static int restart(svc *s, gc_client **c, const char *db, const char *data)
{
    svc_check_done(s);
    gc_close(*c);
    if (svc_check_start(s, "server did not restart", db, data, NULL) != 0)
        return -1;
    *c = svc_check_client(s);
    return 0;
}

/* The step stage 2 resumed from, as the restarted server logs it (-1 when
 * it does not within 10 s). */
static int resumed_from(svc *s)
{
    static const char resumed[] = "training stage 2 (shower) from step ";
    CHECK(svc_log_wait(s, resumed, 10000));
    pthread_mutex_lock(&s->mu);
    const char *at = strstr(s->log, resumed);
    int from = at ? atoi(at + strlen(resumed)) : -1;
    pthread_mutex_unlock(&s->mu);
    return from;
}

/* A thread of pid other than the main one that does not block sig, per
 * /proc/PID/task/TID/status (SigBlk); 0 when there is none. */
static pid_t thread_taking(pid_t pid, int sig)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    pid_t found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid <= 0 || tid == pid)
            continue;
        char sp[96], line[128];
        snprintf(sp, sizeof sp, "/proc/%d/task/%d/status", (int)pid, (int)tid);
        FILE *f = fopen(sp, "r");
        if (!f)
            continue;
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "SigBlk:", 7) == 0) {
                unsigned long long mask = strtoull(line + 7, NULL, 16);
                if (!(mask & (1ULL << (sig - 1))))
                    found = tid;
                break;
            }
        fclose(f);
    }
    closedir(d);
    return found;
}

/* 1 once pid catches sig (its handler is installed: SigCgt), within ms. */
static int catches(pid_t pid, int sig, long ms)
{
    char sp[64], line[128];
    snprintf(sp, sizeof sp, "/proc/%d/status", (int)pid);
    for (long t = 0; t < ms; t += 2) {
        FILE *f = fopen(sp, "r");
        int yes = 0;
        while (f && fgets(line, sizeof line, f))
            if (strncmp(line, "SigCgt:", 7) == 0) {
                yes = (strtoull(line + 7, NULL, 16) >> (sig - 1)) & 1;
                break;
            }
        if (f)
            fclose(f);
        if (yes)
            return 1;
        svc_sleep_ms(2);
    }
    return 0;
}

/* SIGTERM at a library thread, and SIGTERM at start-up: a clean exit, the
 * shutdown logged, never the default action's death by signal. */
static void test_stop_signal_anywhere(const char *dir)
{
    char db[128], data[128];
    snprintf(db, sizeof db, "%s/stop.db", dir);
    snprintf(data, sizeof data, "%s/stop-data", dir);
    svc s;
    if (svc_check_start(&s, "server did not start", db, data, NULL) != 0)
        return;
    pid_t tid = thread_taking(s.pid, SIGTERM);
    if (tid) {
        fprintf(stderr, "stop signal: SIGTERM sent to thread %d, which does not block it\n",
                (int)tid);
        CHECK_EQ_INT(syscall(SYS_tgkill, (int)s.pid, (int)tid, SIGTERM), 0);
        CHECK_EQ_INT(svc_wait_exit(&s, 30000), 0);
    } else {
        fprintf(stderr, "stop signal: every thread but the main one blocks SIGTERM (no "
                        "library thread started before main): sent to the process\n");
        CHECK_EQ_INT(svc_stop(&s, SIGTERM, 30000), 0);
    }
    CHECK(svc_log_has(&s, "msg=shutdown signal=15"));
    CHECK(svc_log_has(&s, "msg=stopped clean=1"));
    svc_check_done(&s);

    /* during start-up, as soon as the handler is in (before it any
     * program takes the default action): the main thread does not wait for
     * the signal yet; it is kept and honoured once the service is up */
    char *argv[] = {(char *)svc_binary(), "serve", "--listen", "127.0.0.1:0", "--db", db,
                    "--data-dir", data, NULL};
    for (int delay_ms = 0; delay_ms <= 40; delay_ms += 20) {
        if (svc_spawn(&s, argv) != 0) {
            CHECK_MSG(0, "cannot spawn the server");
            return;
        }
        CHECK_MSG(catches(s.pid, SIGTERM, 30000), "the server never catches SIGTERM");
        svc_sleep_ms(delay_ms);
        int rc = svc_stop(&s, SIGTERM, 30000);
        CHECK_MSG(rc == 0, "SIGTERM %d ms after start: exit %d", delay_ms, rc);
        svc_check_done(&s);
    }
}

int main(void)
{
    char dir[64] = "svc-rec-XXXXXX", db[128], data[128];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(db, sizeof db, "%s/test.db", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    svc s;
    gt_error err = {0};
    gc_client *c = NULL;
    test_stop_signal_anywhere(dir);
    if (svc_check_start(&s, "server did not start", db, data, NULL) != 0)
        return check_finish();
    CHECK_EQ_INT(gc_open(&c, s.url, &err), GT_OK);
    test_cancel(c);

    /* SIGKILL mid-run, after checkpoints of both stages. */
    /* long enough that the signal lands mid-run even where a step takes
     * 0.2 ms (a Release build): a run that ends first has nothing to resume */
    const int steps = 2000;
    long long run = submit(c, "crash", steps, 20);
    CHECK(wait_steps(c, run, steps + 45, 240000));
    svc_stop(&s, SIGKILL, 5000);
    if (restart(&s, &c, db, data) != 0)
        return check_finish();
    CHECK(svc_log_wait(&s, "status=queued reason=recovered", 10000));
    CHECK(svc_log_wait(&s, "resume=1", 10000));
    /* Resumed at a stage-2 checkpoint, not from the start: 40 when the
     * kill lands right after step 45, a later multiple of 20 when the run
     * got further before the signal (a loaded machine). */
    int from1 = resumed_from(&s);
    CHECK_MSG(from1 >= 40 && from1 % 20 == 0 && from1 < steps, "resumed from step %d", from1);
    json_t *r = svc_wait_run(c, run, NULL, 240000);
    CHECK_MSG(svc_str(r, "status") && strcmp(svc_str(r, "status"), "succeeded") == 0,
              "status %s (%s)", svc_str(r, "status"), svc_str(r, "error"));
    CHECK_EQ_INT(svc_num(r, "attempts"), 2);
    CHECK_EQ_INT(svc_num(json_object_get(r, "progress"), "done_steps"), 2 * steps);
    json_decref(r);
    /* One best checkpoint per stage after all that. */
    json_t *j;
    char path[96];
    snprintf(path, sizeof path, "/v1/runs/%lld/checkpoints", run);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    size_t i;
    json_t *ck;
    int best = 0;
    json_array_foreach(json_object_get(j, "items"), i, ck) best += json_is_true(json_object_get(ck, "best"));
    CHECK_EQ_INT(best, 2);
    json_decref(j);

    /* SIGTERM mid-run: a clean exit, the run back in the queue with its
     * checkpoints, resumed at the next start. */
    const int steps2 = 2000;   /* as above */
    long long run2 = submit(c, "term", steps2, 25);
    CHECK(wait_steps(c, run2, steps2 + 30, 240000));
    /* An open event stream must not hold the shutdown: it ends. */
    watcher w = {s.url, run2, -1, 0};
    pthread_t th;
    pthread_create(&th, NULL, watch_main, &w);
    for (int t = 0; t < 500 && w.events == 0; t++)
        svc_sleep_ms(10);
    CHECK(w.events > 0);
    CHECK_EQ_INT(svc_stop(&s, SIGTERM, 30000), 0);
    pthread_join(th, NULL);
    CHECK_EQ_INT(w.rc, GT_OK);
    CHECK(svc_log_has(&s, "status=queued reason=shutdown"));
    if (restart(&s, &c, db, data) != 0)
        return check_finish();
    /* resumed from its last checkpoint: a multiple of 25 (which one
     * depends on how far the run got before the signal landed) */
    int from = resumed_from(&s);
    CHECK_MSG(from >= 25 && from % 25 == 0 && from < steps2, "resumed from step %d", from);
    r = svc_wait_run(c, run2, NULL, 240000);
    CHECK_MSG(svc_str(r, "status") && strcmp(svc_str(r, "status"), "succeeded") == 0,
              "status %s (%s)", svc_str(r, "status"), svc_str(r, "error"));
    CHECK_EQ_INT(svc_num(r, "attempts"), 2);
    json_decref(r);
    gc_close(c);
    CHECK_EQ_INT(svc_stop(&s, SIGTERM, 30000), 0);
    check_no_duplicates(db, run, steps, 5);
    check_no_duplicates(db, run2, steps2, 5);
    svc_check_done(&s);
    svc_check_cleanup(dir);
    return check_finish();
}
