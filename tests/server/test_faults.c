/* SQLite fault injection on the real service (giant_test_server with
 * GIANT_TEST_FAULT_VFS=1: every write and sync of its databases goes
 * through tests/server/fault_vfs.c, armed over POST /test/fault).
 *
 * A baseline counts the writes and syncs of one synthetic dataset's
 * creation and of one tiny training run.  Then, for each write index N of
 * the dataset (every one, as an I/O error and as a full disk) and of the
 * run (every one when there are at most GIANT_FAULT_SAMPLES of them, else
 * the first and last four and a seeded sample of the rest, kinds
 * alternating), the N-th write fails once while the same work is asked
 * again, and:
 * - the request is refused with a JSON error (the write was the insert), or
 *   the dataset or run ends failed with a reason naming the failure, or
 *   succeeds (the write was retried, or its failure did not matter);
 * - the rows it committed hang together: metrics form a prefix of the
 *   logged steps, one event per logged step, every checkpoint's sha256
 *   matches its blob;
 * - PRAGMA integrity_check passes, /healthz and the lists still answer;
 * - nothing committed before is lost: every earlier run and dataset still
 *   has the rows it had.
 * Then a full disk that lasts (every write fails until space is "freed"):
 * the service answers meanwhile, the run ends failed with its reason once
 * the disk takes writes again, and a new run succeeds. */
#include "check.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "giant_client.h"
#include "gt_clock.h"
#include "gt_sha256.h"
#include "runs.h"
#include "svc_check.h"
#include "svc_harness.h"

#define STEPS 4            /* per stage */
#define LOG_EVERY 2
#define CKPT_EVERY 2
#define MAX_RECORDS 512

static char g_db[256];
static gc_client *C;

/* ---------------------------------------------------------------------------
 * The fault VFS over HTTP
 * ------------------------------------------------------------------------- */

static long long vfs_count(const char *what)
{
    json_t *j = NULL;
    long st = svc_json(C, "GET", "/test/fault", NULL, NULL, &j);
    CHECK_EQ_INT(st, 200);
    long long v = svc_num(j, what);
    json_decref(j);
    return v;
}

static void arm(long long after, long long count, const char *kind)
{
    char body[128];
    snprintf(body, sizeof body, "{\"after\": %lld, \"count\": %lld, \"kind\": \"%s\"}", after,
             count, after > 0 ? kind : "ioerr");
    CHECK_EQ_INT(svc_json(C, "POST", "/test/fault", body, NULL, NULL), 200);
}

/* ---------------------------------------------------------------------------
 * What the database holds, read on a connection of the test's own
 * ------------------------------------------------------------------------- */

static sqlite3 *open_db(void)
{
    return svc_check_open_db(g_db);
}

static long long q_int(sqlite3 *h, const char *sql, long long id)
{
    return svc_check_query(h, sql, &id, 1);
}

static void check_integrity(const char *when)
{
    svc_check_integrity(g_db, when);
}

/* A run's rows hang together: for each stage the logged steps are
 * LOG_EVERY, 2 LOG_EVERY, ... with no gap and no twin, stage 2 only after
 * all of stage 1, one metric event per logged step and one val_loss event
 * per validation, and every checkpoint's sha256 is its blob's.  Returns the number of logged steps. */
static long long check_run_rows(sqlite3 *h, long long run, const char *status)
{
    long long steps[2];
    for (int s = 0; s < 2; s++) {
        const char *stage = s ? "shower" : "energy";
        char sql[400];
        snprintf(sql, sizeof sql,
                 "SELECT COUNT(*) * 1000000 + COUNT(DISTINCT step) * 1000 + COALESCE(MAX(step), 0)"
                 " FROM metrics WHERE run_id = ?1 AND name = 'loss' AND stage = '%s'"
                 " AND step %% %d = 0",
                 stage, LOG_EVERY);
        long long v = q_int(h, sql, run);
        long long n = v / 1000000, distinct = v / 1000 % 1000, max = v % 1000;
        snprintf(sql, sizeof sql,
                 "SELECT COUNT(*) FROM metrics WHERE run_id = ?1 AND name = 'loss' AND stage = '%s'",
                 stage);
        CHECK_MSG(q_int(h, sql, run) == n, "run %lld %s: a step off the log grid", run, stage);
        CHECK_MSG(n == distinct && max == n * LOG_EVERY,
                  "run %lld %s: %lld rows, %lld steps, last %lld: not a prefix", run, stage, n,
                  distinct, max);
        steps[s] = n;
    }
    CHECK_MSG(steps[1] == 0 || steps[0] == STEPS / LOG_EVERY,
              "run %lld: stage 2 logged before stage 1 ended", run);
    if (status && strcmp(status, "succeeded") == 0)
        CHECK_MSG(steps[0] == STEPS / LOG_EVERY && steps[1] == STEPS / LOG_EVERY,
                  "run %lld succeeded with %lld + %lld logged steps", run, steps[0], steps[1]);
    long long events = q_int(h, "SELECT COUNT(*) FROM run_events WHERE run_id = ? AND kind = 'metric'",
                             run);
    CHECK_MSG(events == steps[0] + steps[1], "run %lld: %lld metric events for %lld steps", run,
              events, steps[0] + steps[1]);
    /* a validation's row and its event are one transaction: a failed write
     * keeps both or neither */
    long long vals = q_int(h, "SELECT COUNT(*) FROM val_losses WHERE run_id = ?", run);
    events = q_int(h, "SELECT COUNT(*) FROM run_events WHERE run_id = ? AND kind = 'val_loss'",
                   run);
    CHECK_MSG(events == vals, "run %lld: %lld val_loss events for %lld validations", run, events,
              vals);
    sqlite3_stmt *st;
    CHECK(sqlite3_prepare_v2(h, "SELECT checksum, blob FROM checkpoints WHERE run_id = ?", -1, &st,
                             NULL) == SQLITE_OK);
    sqlite3_bind_int64(st, 1, run);
    while (sqlite3_step(st) == SQLITE_ROW) {
        char got[65];
        gt_sha256_hex(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), got);
        CHECK_MSG(strcmp(got, (const char *)sqlite3_column_text(st, 0)) == 0,
                  "run %lld: a checkpoint's sha256 is not its blob's", run);
    }
    sqlite3_finalize(st);
    return steps[0] + steps[1];
}

/* What a finished run or dataset committed, to hold it to later. */
typedef struct record {
    char kind;                 /* 'r' run, 'd' dataset */
    long long id;
    char print[160];
} record;

static record g_rec[MAX_RECORDS];
static int g_nrec;

static void fingerprint(sqlite3 *h, char kind, long long id, char *out, size_t cap)
{
    if (kind == 'r')
        snprintf(out, cap, "%lld metrics, %lld events, %lld checkpoints, %lld validations, %lld",
                 q_int(h, "SELECT COUNT(*) FROM metrics WHERE run_id = ?", id),
                 q_int(h, "SELECT COUNT(*) FROM run_events WHERE run_id = ?", id),
                 q_int(h, "SELECT COUNT(*) FROM checkpoints WHERE run_id = ?", id),
                 q_int(h, "SELECT COUNT(*) FROM val_losses WHERE run_id = ?", id),
                 q_int(h, "SELECT (status = 'succeeded') * 2 + (status = 'failed') FROM runs"
                          " WHERE id = ?", id));
    else
        snprintf(out, cap, "%lld showers, status %lld",
                 q_int(h, "SELECT COALESCE(n_showers, -1) FROM datasets WHERE id = ?", id),
                 q_int(h, "SELECT (status = 'ready') * 2 + (status = 'failed') FROM datasets"
                          " WHERE id = ?", id));
}

static void remember(char kind, long long id)
{
    if (g_nrec >= MAX_RECORDS)
        return;
    sqlite3 *h = open_db();
    record *r = &g_rec[g_nrec++];
    r->kind = kind;
    r->id = id;
    fingerprint(h, kind, id, r->print, sizeof r->print);
    sqlite3_close(h);
}

static void check_nothing_lost(const char *when)
{
    sqlite3 *h = open_db();
    for (int i = 0; i < g_nrec; i++) {
        char now[160];
        fingerprint(h, g_rec[i].kind, g_rec[i].id, now, sizeof now);
        CHECK_MSG(strcmp(now, g_rec[i].print) == 0, "after %s, %s %lld had %s, now %s", when,
                  g_rec[i].kind == 'r' ? "run" : "dataset", g_rec[i].id, g_rec[i].print, now);
    }
    sqlite3_close(h);
}

/* The service still answers. */
static void check_serving(const char *when)
{
    CHECK_MSG(svc_json(C, "GET", "/healthz", NULL, NULL, NULL) == 200, "/healthz after %s", when);
    CHECK_MSG(svc_json(C, "GET", "/v1/runs?limit=5", NULL, NULL, NULL) == 200,
              "GET /v1/runs after %s", when);
    CHECK_MSG(svc_json(C, "GET", "/v1/datasets", NULL, NULL, NULL) == 200,
              "GET /v1/datasets after %s", when);
}

/* A refused request is a JSON error with a code and a message. */
static void check_json_error(long st, json_t *j, const char *when)
{
    CHECK_MSG(st >= 500 && st < 600, "%s: status %ld", when, st);
    json_t *e = json_object_get(j, "error");
    CHECK_MSG(svc_str(e, "code") && svc_str(e, "message") && svc_str(e, "message")[0],
              "%s: not a JSON error", when);
}

/* A failure reason names what failed on the database. */
static void check_reason(const char *reason, const char *when)
{
    CHECK_MSG(reason && (strstr(reason, "I/O error") || strstr(reason, "full")),
              "%s: reason \"%s\"", when, reason ? reason : "(none)");
}

/* ---------------------------------------------------------------------------
 * Datasets
 * ------------------------------------------------------------------------- */

static int g_seq;
static int g_missed;           /* trials whose write index never came */

/* Asks for a tiny synthetic dataset; its id, or 0 when refused (*st, *j). */
static long long post_dataset(int n, long *st, json_t **j)
{
    char body[256];
    int seq = ++g_seq;
    snprintf(body, sizeof body,
             "{\"name\": \"f%d\", \"synthetic\": {\"geometry\": \"dataset_1_photons\","
             " \"n\": %d, \"seed\": %d}}",
             seq, n, seq);
    *st = svc_json(C, "POST", "/v1/datasets", body, NULL, j);
    return *st == 202 ? svc_num(*j, "id") : 0;
}

/* Waits until the dataset is no longer pending; its status (static). */
static const char *wait_dataset(long long id, char *reason, size_t cap)
{
    static char status[16];
    char path[64];
    snprintf(path, sizeof path, "/v1/datasets/%lld", id);
    snprintf(status, sizeof status, "timeout");
    for (double t0 = gt_clock_s(); gt_clock_s() - t0 < 30;) {
        json_t *j = NULL;
        svc_json(C, "GET", path, NULL, NULL, &j);
        const char *s = svc_str(j, "status");
        if (s && strcmp(s, "pending") != 0) {
            snprintf(status, sizeof status, "%s", s);
            snprintf(reason, cap, "%s", svc_str(j, "error") ? svc_str(j, "error") : "");
            json_decref(j);
            break;
        }
        json_decref(j);
        svc_sleep_ms(10);
    }
    return status;
}

static long long dataset_trial(long long after, const char *kind, int n)
{
    char when[96];
    snprintf(when, sizeof when, "dataset, %s at write %lld", kind, after);
    long long before = vfs_count("injected");
    if (after > 0)
        arm(after, 1, kind);
    long st;
    json_t *j = NULL;
    long long id = post_dataset(n, &st, &j);
    if (!id) {
        check_json_error(st, j, when);
    } else {
        char reason[512] = "";
        const char *status = wait_dataset(id, reason, sizeof reason);
        if (strcmp(status, "failed") == 0)
            check_reason(reason, when);
        else
            CHECK_MSG(strcmp(status, "ready") == 0, "%s: status %s", when, status);
    }
    json_decref(j);
    arm(0, 0, kind);
    /* a write count can differ by a WAL checkpoint: a late index may not
     * come, and then the work succeeded (checked above) */
    if (after > 0 && vfs_count("injected") == before)
        g_missed++;
    check_integrity(when);
    check_serving(when);
    if (id)
        remember('d', id);
    return id;
}

/* ---------------------------------------------------------------------------
 * Runs
 * ------------------------------------------------------------------------- */

static long long g_dataset;

static long long run_trial(long long after, long long count, const char *kind)
{
    char when[96];
    snprintf(when, sizeof when, "run, %s at write %lld", kind, after);
    long long before = vfs_count("injected");
    if (after > 0)
        arm(after, count, kind);
    char members[64], name[32];
    snprintf(members, sizeof members, "\"dataset_id\": %lld", g_dataset);
    snprintf(name, sizeof name, "f%d", ++g_seq);
    char *cfg = svc_tiny_config(name, STEPS, LOG_EVERY, CKPT_EVERY, members);
    json_t *j = NULL;
    long st = svc_json(C, "POST", "/v1/runs", cfg, NULL, &j);
    free(cfg);
    long long id = st >= 200 && st < 300 ? svc_num(j, "id") : 0;
    if (!id)
        check_json_error(st, j, when);
    json_decref(j);
    char status[16] = "timeout", reason[512] = "";
    if (id) {
        char path[64];
        snprintf(path, sizeof path, "/v1/runs/%lld", id);
        for (double t0 = gt_clock_s(); gt_clock_s() - t0 < 60;) {
            json_t *r = NULL;
            svc_json(C, "GET", path, NULL, NULL, &r);
            const char *s = svc_str(r, "status");
            if (s && (!strcmp(s, "succeeded") || !strcmp(s, "failed") || !strcmp(s, "cancelled"))) {
                snprintf(status, sizeof status, "%s", s);
                snprintf(reason, sizeof reason, "%s",
                         svc_str(r, "error") ? svc_str(r, "error") : "");
                json_decref(r);
                break;
            }
            json_decref(r);
            svc_sleep_ms(10);
        }
        if (strcmp(status, "failed") == 0)
            check_reason(reason, when);
        else
            CHECK_MSG(strcmp(status, "succeeded") == 0, "%s: status %s", when, status);
    }
    arm(0, 0, kind);
    if (after > 0 && vfs_count("injected") == before)
        g_missed++;
    if (id) {
        sqlite3 *h = open_db();
        check_run_rows(h, id, status);
        sqlite3_close(h);
        remember('r', id);
    }
    check_integrity(when);
    check_serving(when);
    return id;
}

/* The write indices to fail out of n: all of them when n <= budget, else
 * the first and last four and one drawn (seeded, so the same each time) in
 * each of budget - 8 equal slices of the rest, so every phase of the work
 * (setup, steps, validations, checkpoints, the end) gets its share. */
static int pick(long long n, int budget, long long *out)
{
    if (n <= budget) {
        for (long long i = 0; i < n; i++)
            out[i] = i + 1;
        return (int)n;
    }
    int k = 0;
    for (long long i = 1; i <= 4; i++)
        out[k++] = i;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    long long lo = 5, span = n - 8, slices = budget - 8;
    for (long long i = 0; i < slices; i++) {
        long long a = lo + span * i / slices, b = lo + span * (i + 1) / slices;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        out[k++] = a + (long long)(x % (uint64_t)(b > a ? b - a : 1));
    }
    for (long long i = 3; i >= 0; i--)
        out[k++] = n - i;
    return k;
}

/* A full disk that lasts: every write fails from the after-th on until the
 * test frees the space.  Meanwhile the service answers and refuses new work
 * with a JSON error; afterwards the run ends failed with its reason (not left
 * 'running' with nothing training it) and a new run succeeds. */
static void lasting_full_disk(long long after)
{
    const char *when = "a lasting full disk";
    long long before = vfs_count("injected");
    arm(after, 1LL << 40, "full");
    char members[64];
    snprintf(members, sizeof members, "\"dataset_id\": %lld", g_dataset);
    char *cfg = svc_tiny_config("full", STEPS, LOG_EVERY, CKPT_EVERY, members);
    json_t *j = NULL;
    long st = svc_json(C, "POST", "/v1/runs", cfg, NULL, &j);
    long long id = st >= 200 && st < 300 ? svc_num(j, "id") : 0;
    CHECK_MSG(id > 0, "%s: the run was not accepted (%ld)", when, st);
    json_decref(j);
    /* until the faults start and the worker has given up on the run */
    for (double t0 = gt_clock_s(); gt_clock_s() - t0 < 20 && vfs_count("injected") < before + 3;)
        svc_sleep_ms(20);
    svc_sleep_ms(300);
    CHECK(vfs_count("injected") >= before + 3);
    check_serving(when);
    j = NULL;
    st = svc_json(C, "POST", "/v1/runs", cfg, NULL, &j);
    check_json_error(st, j, "a run submitted on a full disk");
    json_decref(j);
    free(cfg);
    arm(0, 0, "full");
    json_t *r = svc_wait_run(C, id, NULL, 20000);
    CHECK_MSG(svc_str(r, "status") && strcmp(svc_str(r, "status"), "failed") == 0,
              "%s: status %s once space is back", when, svc_str(r, "status"));
    check_reason(svc_str(r, "error"), when);
    json_decref(r);
    check_integrity(when);
    sqlite3 *h = open_db();
    check_run_rows(h, id, "failed");
    sqlite3_close(h);
    remember('r', id);
}

int main(void)
{
    double t_all = gt_clock_s();
    char dir[64] = "faults-XXXXXX", data[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(g_db, sizeof g_db, "%s/giant.db", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    setenv("GIANT_TEST_FAULT_VFS", "1", 1);
    char *argv[] = { "./giant_test_server", "serve", "--listen", "127.0.0.1:0", "--db", g_db,
                     "--data-dir", data, "--default-dataset", "0", "--device", "cpu",
                     "--threads", "2", NULL };
    svc s;
    int started = svc_launch(&s, argv) == 0;
    CHECK_MSG(started, "giant_test_server did not start:\n%s", s.log ? s.log : "");
    if (!started)
        return check_finish();
    gt_error err = {0};
    CHECK_EQ_INT(gc_open(&C, s.url, &err), GT_OK);
    const char *env = getenv("GIANT_FAULT_SAMPLES");
    int budget = env && strcmp(env, "all") == 0 ? 4096 : env && atoi(env) > 8 ? atoi(env) : 96;
    long long idx[4096];

    /* Datasets: the baseline also makes the runs' dataset. */
    long long o0 = vfs_count("ops");
    g_dataset = dataset_trial(0, "none", 300);
    long long wd = vfs_count("ops") - o0;
    CHECK(g_dataset > 0 && wd > 0);
    double t0 = gt_clock_s();
    int nd = pick(wd, 4096, idx), trials = 0;
    for (int i = 0; i < nd && !check_failures_; i++) {
        dataset_trial(idx[i], "ioerr", 20);
        dataset_trial(idx[i], "full", 20);
        trials += 2;
    }
    printf("datasets: %lld writes and syncs each; %d trials in %.1f s\n", wd, trials,
           gt_clock_s() - t0);

    /* Runs. */
    o0 = vfs_count("ops");
    run_trial(0, 0, "none");
    long long wr = vfs_count("ops") - o0;
    t0 = gt_clock_s();
    int nr = pick(wr, budget < 4096 ? budget : 4096, idx);
    for (int i = 0; i < nr && !check_failures_; i++)
        run_trial(idx[i], 1, i % 2 ? "full" : "ioerr");
    printf("runs: %lld writes and syncs each; %d of them failed in turn in %.1f s; %d trials"
           " without a fault (their index did not come)\n", wr, nr, gt_clock_s() - t0, g_missed);

    if (!check_failures_)
        lasting_full_disk(wr / 2);
    /* Afterwards: new work succeeds, and everything committed is still there. */
    char when[] = "the sweep";
    long long after_run = run_trial(0, 0, "none");
    char reason[256];
    long st;
    json_t *j = NULL;
    long long after_ds = post_dataset(20, &st, &j);
    json_decref(j);
    CHECK_MSG(after_ds > 0 && strcmp(wait_dataset(after_ds, reason, sizeof reason), "ready") == 0,
              "a dataset after %s", when);
    json_t *r = svc_wait_run(C, after_run, NULL, 1000);
    CHECK_MSG(svc_str(r, "status") && strcmp(svc_str(r, "status"), "succeeded") == 0,
              "a run after %s: %s", when, svc_str(r, "status"));
    json_decref(r);
    check_nothing_lost(when);
    check_integrity(when);

    gc_close(C);
    CHECK_EQ_INT(svc_stop(&s, SIGTERM, 30000), 0);
    check_integrity("the shutdown");
    check_nothing_lost("the shutdown");
    svc_check_done(&s);
    printf("test_faults: %.1f s\n", gt_clock_s() - t_all);
    return check_finish();
}
