/* `giant train --ranks N` (data parallel on the CPU, processes over shared
 * memory) and the refusals of --ranks / --gpus, against the real binary:
 *
 *  - two ranks train a tiny run to success; the run is recorded once, by
 *    rank 0 (device "cpu x2", checkpoints, validation losses), and its
 *    validation losses are within 1e-5 of the one-process run's;
 *  - SIGTERM to the launcher reaches every rank: the run is cancelled at
 *    one step on all ranks, exit 130, and `--resume --ranks 2` finishes it;
 *  - a rank killed with SIGKILL fails the run with the reason, and no
 *    process is left waiting;
 *  - refused before anything is recorded: --gpus N without N GPUs, a batch
 *    the ranks do not divide, --ranks with --gpus, a bad count, and
 *    --ranks in a process that is a rank already. */
#include "check.h"
#include "svc_harness.h"

#include <dirent.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* One text column of the first row of a query, or "" (into out). */
static void query(const char *db, const char *sql, char *out, size_t cap)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *st = NULL;
    out[0] = '\0';
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_text(st, 0))
        snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(h);
}

static double query_num(const char *db, const char *sql)
{
    char v[64];
    query(db, sql, v, sizeof v);
    return v[0] ? atof(v) : -1.0;
}

/* The launcher's children (its ranks), from /proc. */
static int children(pid_t pid, pid_t *out, int max)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    int k = 0;
    for (char *t = strtok(buf, " \n"); t && k < max; t = strtok(NULL, " \n"))
        out[k++] = (pid_t)atoi(t);
    return k;
}

static void test_train_two_ranks(const char *g)
{
    char cfg[512], a[512], b[512], v[256];
    snprintf(cfg, sizeof cfg, "%s/tiny.json", dir);
    snprintf(a, sizeof a, "%s/one.db", dir);
    snprintf(b, sizeof b, "%s/two.db", dir);
    char *text = svc_tiny_config("dist", 20, 5, 10, NULL);
    write_file(cfg, text);
    free(text);
    CHECK_EQ_INT(svc_sh("%s train %s --db %s --data-dir %s --quiet > %s/one.out 2>&1", g, cfg, a,
                        dir, dir), 0);
    CHECK_EQ_INT(svc_sh("%s train %s --db %s --data-dir %s --ranks 2 --quiet > %s/two.out 2>&1",
                        g, cfg, b, dir, dir), 0);
    CHECK_EQ_INT(svc_sh("grep -qx 1 %s/two.out", dir), 0); /* the run id, printed once */
    CHECK_EQ_INT(svc_sh("test $(grep -cx 1 %s/two.out) = 1", dir), 0);
    query(b, "SELECT status || ' ' || device FROM runs WHERE id = 1", v, sizeof v);
    CHECK_MSG(strcmp(v, "succeeded cpu x2") == 0, "run: '%s'", v);
    CHECK(query_num(b, "SELECT count(*) FROM runs") == 1);
    CHECK(query_num(b, "SELECT count(*) FROM checkpoints WHERE run_id = 1") >= 2);
    for (int st = 0; st < 2; st++) {
        char sql[200];
        snprintf(sql, sizeof sql,
                 "SELECT loss FROM val_losses WHERE run_id = 1 AND stage = '%s' ORDER BY step "
                 "DESC LIMIT 1",
                 st ? "shower" : "energy");
        double l1 = query_num(a, sql), l2 = query_num(b, sql);
        printf("%s: validation loss one process %.9g, two ranks %.9g\n", st ? "shower" : "energy",
               l1, l2);
        CHECK(l1 > 0 && l2 > 0);
        CHECK_CLOSE(l2, l1, 0.0, 1e-5);
    }
}

static void test_signals(const char *g)
{
    char cfg[512], db[512], v[256];
    snprintf(cfg, sizeof cfg, "%s/long.json", dir);
    snprintf(db, sizeof db, "%s/sig.db", dir);
    char *text = svc_tiny_config("long", 100000, 50, 200, NULL);
    write_file(cfg, text);
    free(text);
    /* SIGTERM to the launcher: passed on, every rank stops at one step */
    svc s;
    char *argv[] = {(char *)g, "train", cfg, "--db", db, "--data-dir", dir, "--ranks", "2",
                    NULL};
    CHECK_EQ_INT(svc_spawn(&s, argv), 0);
    CHECK(svc_log_wait(&s, "training stage 1", 60000));
    svc_sleep_ms(300);
    int st = svc_stop(&s, SIGTERM, 60000);
    CHECK_MSG(st == 130, "launcher exit %d", st);
    if (st != 130)
        svc_dump(&s);
    svc_free(&s);
    query(db, "SELECT status FROM runs WHERE id = 1", v, sizeof v);
    CHECK_MSG(strcmp(v, "cancelled") == 0, "after SIGTERM: '%s'", v);

    /* SIGKILL of rank 1: the run fails with the reason, nothing waits */
    char *argv2[] = {(char *)g, "train", "--resume", "1", "--db", db, "--data-dir", dir,
                     "--ranks", "2", NULL};
    CHECK_EQ_INT(svc_spawn(&s, argv2), 0);
    CHECK(svc_log_wait(&s, "training stage 1", 60000));
    svc_sleep_ms(300);
    pid_t kids[4];
    int n = children(s.pid, kids, 4);
    CHECK_MSG(n == 2, "%d ranks under the launcher", n);
    if (n == 2)
        kill(kids[1], SIGKILL);
    st = svc_wait_exit(&s, 60000);
    CHECK_MSG(st == 1, "launcher exit %d after a rank was killed", st);
    CHECK(svc_log_has(&s, "rank 1 was killed by signal 9"));
    if (st != 1)
        svc_dump(&s);
    svc_free(&s);
    query(db, "SELECT status || ': ' || coalesce(error, '') FROM runs WHERE id = 1", v, sizeof v);
    CHECK_MSG(strcmp(v, "failed: rank 1 of 2 was killed by signal 9; the others were stopped") == 0,
              "after SIGKILL: '%s'", v);
    printf("a rank killed: %s\n", v);
    /* the named shared-memory groups are gone */
    CHECK_EQ_INT(svc_sh("ls /dev/shm | grep -q giant-train-"), 1);
}

static void test_refusals(const char *g)
{
    char cfg[512], db[512];
    snprintf(cfg, sizeof cfg, "%s/tiny.json", dir);
    snprintf(db, sizeof db, "%s/refuse.db", dir);
    const char *out = "refuse.out";
    CHECK_EQ_INT(svc_sh("%s train %s --db %s --gpus 64 > %s/%s 2>&1", g, cfg, db, dir, out), 2);
    CHECK_EQ_INT(svc_sh("grep -q 'needs 64 CUDA devices; this machine has' %s/%s", dir, out), 0);
    CHECK_EQ_INT(svc_sh("%s train %s --db %s --ranks 3 > %s/%s 2>&1", g, cfg, db, dir, out), 2);
    CHECK_EQ_INT(svc_sh("grep -q 'batch 32 is not a multiple of the 3 ranks' %s/%s", dir, out), 0);
    CHECK_EQ_INT(svc_sh("%s train %s --db %s --ranks 2 --gpus 2 > %s/%s 2>&1", g, cfg, db, dir,
                        out), 2);
    CHECK_EQ_INT(svc_sh("%s train %s --db %s --ranks 0 > %s/%s 2>&1", g, cfg, db, dir, out), 2);
    CHECK_EQ_INT(svc_sh("%s train %s --db %s --ranks 2x > %s/%s 2>&1", g, cfg, db, dir, out), 2);
    CHECK_EQ_INT(svc_sh("GIANT_RANK=0 GIANT_WORLD_SIZE=2 %s train %s --db %s --ranks 2 > %s/%s "
                        "2>&1", g, cfg, db, dir, out), 2);
    CHECK_EQ_INT(svc_sh("grep -q 'rank 0 of 2 already' %s/%s", dir, out), 0);
    CHECK_EQ_INT(svc_sh("GIANT_RANK=2 GIANT_WORLD_SIZE=2 %s train %s --db %s > %s/%s 2>&1", g, cfg,
                        db, dir, out), 2);
    /* nothing was recorded by any of them */
    CHECK(query_num(db, "SELECT count(*) FROM runs") <= 0);
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *g = svc_binary();
    snprintf(dir, sizeof dir, "/tmp/giant-test-train-dist.XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    test_train_two_ranks(g);
    test_refusals(g);
    test_signals(g);
    svc_sh("rm -rf %s", dir);
    return check_finish();
}
