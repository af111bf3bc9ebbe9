/* kill -9 at random moments of training, against the real `giant serve`:
 * KILLS times (default 20, GIANT_KILLS), each after a seeded random delay
 * (GIANT_KILL_SEED) from the moment the restarted server shows the run
 * running, the server is SIGKILLed and started again on the same database.
 * Afterwards the run resumes and succeeds, and:
 * - PRAGMA integrity_check passes after every kill;
 * - each stage has exactly one metric row per logged step, and the event
 *   stream one metric event per logged step and one val_loss event per
 *   validation (nothing lost, nothing twice);
 * - every checkpoint's sha256 is its blob's;
 * - the losses, gradient norms, learning rates and validation losses equal
 *   those of the same run trained once without interruption (resume is bit
 *   for bit).
 * A run that ends before the kills are done is followed by another, so the
 * test holds on a faster machine too; every run is checked. */
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

#define STEPS 800          /* per stage: long enough for several kills */
#define LOG_EVERY 5
#define CKPT_EVERY 40
#define MAX_RUNS 32

static char g_db[256], g_data[256];

static long long q_int(sqlite3 *h, const char *sql, long long a, long long b)
{
    const long long args[2] = {a, b};
    return svc_check_query(h, sql, args, 2);
}

static sqlite3 *open_db(void)
{
    return svc_check_open_db(g_db);
}

static void check_integrity(int kill)
{
    char when[32];
    snprintf(when, sizeof when, "kill %d", kill);
    svc_check_integrity(g_db, when);
}

/* Rows of a finished run: one per logged step, one event each, checkpoints
 * whole. */
static void check_run(sqlite3 *h, long long run)
{
    for (int s = 0; s < 2; s++) {
        char sql[300];
        const char *stage = s ? "shower" : "energy";
        snprintf(sql, sizeof sql,
                 "SELECT COUNT(*) FROM metrics WHERE run_id = ?1 AND name = 'loss'"
                 " AND stage = '%s' AND step %% %d = 0 AND step BETWEEN 1 AND ?2",
                 stage, LOG_EVERY);
        long long n = q_int(h, sql, run, STEPS);
        snprintf(sql, sizeof sql,
                 "SELECT COUNT(*) FROM metrics WHERE run_id = ?1 AND name = 'loss' AND stage = '%s'",
                 stage);
        CHECK_MSG(n == STEPS / LOG_EVERY && q_int(h, sql, run, 0) == n,
                  "run %lld %s: %lld of %d logged steps", run, stage, n, STEPS / LOG_EVERY);
        snprintf(sql, sizeof sql,
                 "SELECT COUNT(*) * 1000 + COUNT(DISTINCT json_extract(data, '$.step'))"
                 " FROM run_events WHERE run_id = ?1 AND kind = 'metric'"
                 " AND json_extract(data, '$.stage') = '%s'",
                 stage);
        long long ev = q_int(h, sql, run, 0);
        CHECK_MSG(ev / 1000 == STEPS / LOG_EVERY && ev % 1000 == STEPS / LOG_EVERY,
                  "run %lld %s: %lld metric events for %lld steps (want %d)", run, stage,
                  ev / 1000, ev % 1000, STEPS / LOG_EVERY);
        snprintf(sql, sizeof sql,
                 "SELECT COUNT(*) * 1000 + COUNT(DISTINCT json_extract(data, '$.step'))"
                 " FROM run_events WHERE run_id = ?1 AND kind = 'val_loss'"
                 " AND json_extract(data, '$.stage') = '%s'",
                 stage);
        ev = q_int(h, sql, run, 0);
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM val_losses WHERE run_id = ?1 AND stage = '%s'",
                 stage);
        long long vals = q_int(h, sql, run, 0);
        CHECK_MSG(vals == STEPS / CKPT_EVERY && ev / 1000 == vals && ev % 1000 == vals,
                  "run %lld %s: %lld val_loss events for %lld steps, %lld validations", run,
                  stage, ev / 1000, ev % 1000, vals);
    }
    sqlite3_stmt *st;
    CHECK(sqlite3_prepare_v2(h, "SELECT checksum, blob FROM checkpoints WHERE run_id = ?", -1, &st,
                             NULL) == SQLITE_OK);
    sqlite3_bind_int64(st, 1, run);
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        char got[65];
        gt_sha256_hex(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), got);
        CHECK_MSG(strcmp(got, (const char *)sqlite3_column_text(st, 0)) == 0,
                  "run %lld: a checkpoint's sha256 is not its blob's", run);
        n++;
    }
    CHECK_MSG(n >= 2, "run %lld: %d checkpoints", run, n);
    sqlite3_finalize(st);
}

/* The same numbers as the uninterrupted run: every loss, gradient norm,
 * learning rate and validation loss, bit for bit (SQLite compares the
 * stored doubles). */
static void check_same_as(sqlite3 *h, long long run, long long ref)
{
    long long diff = q_int(h,
                           "SELECT COUNT(*) FROM (SELECT stage, name, step, value FROM metrics"
                           " WHERE run_id = ?1 AND name IN ('loss', 'grad_norm', 'lr')"
                           " EXCEPT SELECT stage, name, step, value FROM metrics WHERE run_id = ?2"
                           " AND name IN ('loss', 'grad_norm', 'lr'))",
                           run, ref);
    CHECK_MSG(diff == 0, "run %lld: %lld metric values differ from the uninterrupted run", run,
              diff);
    diff = q_int(h,
                 "SELECT COUNT(*) FROM (SELECT stage, step, loss FROM val_losses WHERE run_id = ?1"
                 " EXCEPT SELECT stage, step, loss FROM val_losses WHERE run_id = ?2)",
                 run, ref);
    CHECK_MSG(diff == 0, "run %lld: %lld validation losses differ from the uninterrupted run",
              run, diff);
}

static long long submit(gc_client *c, long long dataset, const char *name)
{
    char members[64];
    snprintf(members, sizeof members, "\"dataset_id\": %lld", dataset);
    char *cfg = svc_tiny_config(name, STEPS, LOG_EVERY, CKPT_EVERY, members);
    long long id = svc_check_submit(c, cfg);
    free(cfg);
    return id;
}

/* Polls the run until it is running (1), finished (0) or 30 s pass (-1). */
static int await_running(gc_client *c, long long run)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/runs/%lld", run);
    for (double t0 = gt_clock_s(); gt_clock_s() - t0 < 30;) {
        json_t *r = NULL;
        svc_json(c, "GET", path, NULL, NULL, &r);
        const char *s = svc_str(r, "status");
        int state = !s ? -2 : !strcmp(s, "running") ? 1 : !strcmp(s, "queued") ? -2 : 0;
        json_decref(r);
        if (state != -2)
            return state;
        svc_sleep_ms(5);
    }
    return -1;
}

static int start(svc *s, gc_client **c)
{
    if (svc_check_start(s, "server did not start", g_db, g_data, NULL) != 0)
        return -1;
    *c = svc_check_client(s);
    return 0;
}

int main(void)
{
    double t_all = gt_clock_s();
    char dir[64] = "svc-kill-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    snprintf(g_db, sizeof g_db, "%s/test.db", dir);
    snprintf(g_data, sizeof g_data, "%s/data", dir);
    const char *e = getenv("GIANT_KILLS");
    int kills = e && atoi(e) > 0 ? atoi(e) : 20;
    e = getenv("GIANT_KILL_SEED");
    uint64_t seed = e ? strtoull(e, NULL, 10) : 20261204;
    printf("test_service_kill: %d kills, seed %llu (GIANT_KILL_SEED)\n", kills,
           (unsigned long long)seed);
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

    svc s;
    gc_client *c = NULL;
    if (start(&s, &c) != 0)
        return check_finish();
    json_t *j = NULL;
    CHECK_EQ_INT(svc_json(c, "POST", "/v1/datasets",
                          "{\"name\": \"kill\", \"synthetic\": {\"geometry\": \"dataset_1_photons\","
                          " \"n\": 300, \"seed\": 3}}",
                          NULL, &j),
                 202);
    long long dataset = svc_num(j, "id");
    json_decref(j);
    char dpath[64];
    snprintf(dpath, sizeof dpath, "/v1/datasets/%lld", dataset);
    for (double t0 = gt_clock_s(); gt_clock_s() - t0 < 60;) {
        j = NULL;
        svc_json(c, "GET", dpath, NULL, NULL, &j);
        int pending = svc_str(j, "status") && strcmp(svc_str(j, "status"), "pending") == 0;
        json_decref(j);
        if (!pending)
            break;
        svc_sleep_ms(20);
    }

    long long runs[MAX_RUNS];
    int nruns = 0, done = 0;
    runs[nruns++] = submit(c, dataset, "killed");
    double slept = 0;
    for (int k = 1; k <= kills && !check_failures_;) {
        int state = await_running(c, runs[nruns - 1]);
        if (state == 0 && nruns < MAX_RUNS) {
            /* finished between kills: the next run takes the rest */
            runs[nruns++] = submit(c, dataset, "killed");
            continue;
        }
        CHECK_MSG(state == 1, "kill %d: the run did not run again", k);
        if (state != 1)
            break;
        /* somewhere in the next 0.6 s of training: setting up, a step, a
         * validation, a checkpoint being written */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        long ms = (long)(x % 600);
        svc_sleep_ms(ms);
        slept += ms / 1000.0;
        svc_stop(&s, SIGKILL, 5000);
        check_integrity(k);
        svc_check_done(&s);
        gc_close(c);
        c = NULL;
        if (start(&s, &c) != 0)
            return check_finish();
        done = k++;
    }
    printf("%d kills in %.1f s (%.1f s of it training before a kill)\n", done, gt_clock_s() - t_all,
           slept);
    for (int i = 0; i < nruns; i++) {
        json_t *r = svc_wait_run(c, runs[i], NULL, 120000);
        CHECK_MSG(svc_str(r, "status") && strcmp(svc_str(r, "status"), "succeeded") == 0,
                  "run %lld: status %s (%s)", runs[i], svc_str(r, "status"), svc_str(r, "error"));
        json_decref(r);
    }
    /* the same run, never interrupted */
    long long ref = submit(c, dataset, "reference");
    json_t *r = svc_wait_run(c, ref, NULL, 120000);
    CHECK_MSG(svc_str(r, "status") && strcmp(svc_str(r, "status"), "succeeded") == 0,
              "reference run: status %s", svc_str(r, "status"));
    json_decref(r);
    gc_close(c);
    CHECK_EQ_INT(svc_stop(&s, SIGTERM, 30000), 0);
    check_integrity(done + 1);
    sqlite3 *h = open_db();
    check_run(h, ref);
    for (int i = 0; i < nruns; i++) {
        check_run(h, runs[i]);
        check_same_as(h, runs[i], ref);
        check_same_as(h, ref, runs[i]);
        printf("run %lld: %lld attempts\n", runs[i],
               q_int(h, "SELECT attempts FROM runs WHERE id = ?", runs[i], 0));
    }
    sqlite3_close(h);
    svc_check_done(&s);
    svc_check_cleanup(dir);
    printf("test_service_kill: %.1f s\n", gt_clock_s() - t_all);
    return check_finish();
}
