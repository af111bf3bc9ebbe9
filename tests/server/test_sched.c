/* The training scheduler driven directly, without a service or a child
 * process: runs queued before it starts train one at a time, oldest first,
 * each going queued -> running -> succeeded with its progress, metrics,
 * validations and best checkpoints recorded; a queued run is cancelled at
 * once and never starts, a running one within a step; a run a crash left
 * 'running' is queued again at start and trains to the end; a stop puts
 * the run in training back in the queue.
 *
 * The scheduler opens its own connection by path (as in the service), so
 * the database is a file in a fresh directory, not ":memory:"; the test
 * reads through a connection of its own, as the HTTP threads do. */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gt_clock.h"
#include "model_config.h"
#include "runs.h"
#include "scheduler.h"
#include "store.h"
#include "svc_harness.h"

static store *db;
static char dir[64], dbpath[128];

/* A queued run of the tiny config (dataset_1_photons, 300 synthetic
 * showers), stored canonical as POST /v1/runs stores it. */
static int64_t create(const char *name, int steps, int log_every, int ckpt_every)
{
    char *text = svc_tiny_config(name, steps, log_every, ckpt_every, NULL);
    model_config cfg;
    char field[128];
    gt_error err = {0};
    int64_t id = 0;
    CHECK_MSG(model_config_parse(text, strlen(text), &cfg, field, sizeof field, &err) == GT_OK,
              "%s: %s", field, err.message);
    json_t *j = model_config_to_json(&cfg);
    char *canon = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_EQ_INT(runs_create(db, cfg.name, canon, "fp32", NULL, cfg.steps1 + cfg.steps2, &id,
                             &err), GT_OK);
    free(canon);
    json_decref(j);
    free(text);
    return id;
}

static const char *status_of(int64_t id, char buf[16])
{
    if (runs_status(db, id, buf, NULL) != GT_OK)
        snprintf(buf, 16, "?");
    return buf;
}

/* Polls until the run's status is want; 1 when it got there within ms. */
static int wait_status(int64_t id, const char *want, double ms)
{
    char st[16];
    for (double t0 = gt_clock_s(); (gt_clock_s() - t0) * 1e3 < ms;) {
        if (strcmp(status_of(id, st), want) == 0)
            return 1;
        usleep(10000);
    }
    return 0;
}

/* The run's status events, "queued,running,..." (and the event id of each
 * in ids, at most 16). */
static void statuses(int64_t id, char *out, size_t cap, int64_t *ids)
{
    json_t *events = NULL;
    out[0] = '\0';
    CHECK_EQ_INT(runs_events_after(db, id, 0, 10000, &events, NULL), GT_OK);
    size_t i, n = 0;
    json_t *e;
    json_array_foreach(events, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "kind")), "status") != 0)
            continue;
        json_t *d = json_loads(json_string_value(json_object_get(e, "data")), 0, NULL);
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", len ? "," : "",
                 json_string_value(json_object_get(d, "status")));
        if (ids && n < 16)
            ids[n] = json_integer_value(json_object_get(e, "id"));
        n++;
        json_decref(d);
    }
    json_decref(events);
}

static json_t *row_of(int64_t id)
{
    json_t *row = NULL;
    CHECK_EQ_INT(runs_get(db, id, &row, NULL), GT_OK);
    return row;
}

static long long int_of(json_t *row, const char *key)
{
    return json_integer_value(json_object_get(row, key));
}

/* Three runs queued before the scheduler starts: FIFO, one at a time,
 * everything a finished run records. */
static int64_t test_queue_and_training(sched **s)
{
    int64_t a = create("a", 20, 5, 10), b = create("b", 4, 2, 2), c = create("c", 4, 2, 2);
    gt_error err = {0};
    CHECK_EQ_INT(sched_start(s, dbpath, dir, "cpu", MODEL_BF16_NATIVE, &err), GT_OK);
    CHECK_MSG(wait_status(c, "succeeded", 25000), "run c: %s", err.message);
    char st[16];
    CHECK_MSG(strcmp(status_of(a, st), "succeeded") == 0, "run a %s", st);
    CHECK_MSG(strcmp(status_of(b, st), "succeeded") == 0, "run b %s", st);
    CHECK_EQ_INT(sched_runs_started(*s), 3);

    /* Each went queued -> running -> succeeded, and never two at once:
     * a run starts after the one before it ended, in id order. */
    char seq[256];
    int64_t ia[16], ib[16], ic[16];
    statuses(a, seq, sizeof seq, ia);
    CHECK_MSG(strcmp(seq, "queued,running,succeeded") == 0, "run a: %s", seq);
    statuses(b, seq, sizeof seq, ib);
    CHECK_MSG(strcmp(seq, "queued,running,succeeded") == 0, "run b: %s", seq);
    statuses(c, seq, sizeof seq, ic);
    CHECK_MSG(strcmp(seq, "queued,running,succeeded") == 0, "run c: %s", seq);
    CHECK(ia[2] < ib[1] && ib[2] < ic[1]);

    /* What run a recorded. */
    json_t *row = row_of(a);
    CHECK_EQ_INT(int_of(row, "attempts"), 1);
    CHECK_EQ_INT(int_of(row, "total_steps"), 40);
    CHECK_EQ_INT(int_of(row, "step"), 20);
    CHECK(json_number_value(json_object_get(row, "progress")) == 1.0);
    CHECK(strcmp(json_string_value(json_object_get(row, "stage")), "shower") == 0);
    CHECK(strcmp(json_string_value(json_object_get(row, "device")), "cpu") == 0);
    CHECK(json_is_string(json_object_get(row, "started_at")));
    CHECK(json_is_string(json_object_get(row, "finished_at")));
    CHECK(json_is_null(json_object_get(row, "error")));
    json_decref(row);
    json_t *series = NULL;
    CHECK_EQ_INT(runs_series(db, a, "shower", "loss", 0, 1000, &series, NULL), GT_OK);
    CHECK_EQ_INT(int_of(series, "count"), 4);              /* steps 5, 10, 15, 20 */
    json_decref(series);
    CHECK_EQ_INT(runs_series(db, a, "energy", "val_loss", 0, 1000, &series, NULL), GT_OK);
    CHECK_EQ_INT(int_of(series, "count"), 2);              /* steps 10 and 20 */
    json_decref(series);
    json_t *best = NULL;
    CHECK_EQ_INT(runs_best(db, a, &best, NULL), GT_OK);
    CHECK(json_object_get(best, "energy") && json_object_get(best, "shower"));
    json_decref(best);
    int64_t version;
    CHECK_EQ_INT(runs_best_pair(db, a, &version, NULL), GT_OK);
    return a;
}

/* A queued run is cancelled at once and never starts; the running one
 * stops within a step; a finished or unknown run is left alone. */
static void test_cancel(sched *s, int64_t finished)
{
    int64_t busy = create("long", 100000, 50, 100000);
    sched_kick(s);
    CHECK(wait_status(busy, "running", 20000));
    int64_t waiting = create("waiting", 4, 2, 2);
    char st[16] = "";
    gt_error err = {0};
    CHECK_EQ_INT(sched_cancel(s, db, waiting, st, &err), GT_OK);
    CHECK_MSG(strcmp(st, "cancelled") == 0, "queued run after cancel: %s", st);
    char seq[256];
    statuses(waiting, seq, sizeof seq, NULL);
    CHECK_MSG(strcmp(seq, "queued,cancelled") == 0, "waiting: %s", seq);

    double t0 = gt_clock_s();
    CHECK_EQ_INT(sched_cancel(s, db, busy, st, &err), GT_OK);
    CHECK_MSG(strcmp(st, "running") == 0, "running run after cancel: %s", st);
    CHECK(wait_status(busy, "cancelled", 20000));
    fprintf(stderr, "a running run stopped %.0f ms after its cancel\n", (gt_clock_s() - t0) * 1e3);
    json_t *row = row_of(busy);
    CHECK(strcmp(json_string_value(json_object_get(row, "error")), "cancelled on request") == 0);
    CHECK(json_number_value(json_object_get(row, "progress")) < 1.0);
    json_decref(row);

    /* The cancelled queued run never started, even with the worker free. */
    sched_kick(s);
    usleep(300000);
    row = row_of(waiting);
    CHECK_EQ_INT(int_of(row, "attempts"), 0);
    CHECK(json_is_null(json_object_get(row, "started_at")));
    CHECK(strcmp(json_string_value(json_object_get(row, "status")), "cancelled") == 0);
    json_decref(row);

    /* A finished run: a cancel changes nothing.  Run 999: no such run. */
    CHECK_EQ_INT(sched_cancel(s, db, finished, st, &err), GT_OK);
    CHECK(strcmp(st, "succeeded") == 0);
    row = row_of(finished);
    CHECK_EQ_INT(int_of(row, "cancel_requested"), 0);
    json_decref(row);
    CHECK_EQ_INT(sched_cancel(s, db, 999, st, &err), GT_ENOTFOUND);
}

/* A run a crash left 'running' goes back to the queue at start and trains;
 * a stop puts the run in training back in the queue. */
static void test_recovery(sched **s)
{
    sched_stop(*s);
    *s = NULL;
    int64_t crashed = create("crashed", 6, 2, 3);
    gt_error err = {0};
    CHECK_EQ_INT(runs_set_status(db, crashed, "running", NULL, "cpu", &err), GT_OK);
    CHECK_EQ_INT(sched_start(s, dbpath, dir, "cpu", MODEL_BF16_NATIVE, &err), GT_OK);
    CHECK(wait_status(crashed, "succeeded", 20000));
    char seq[256];
    statuses(crashed, seq, sizeof seq, NULL);
    CHECK_MSG(strcmp(seq, "queued,running,queued,running,succeeded") == 0, "crashed: %s", seq);
    json_t *row = row_of(crashed);
    CHECK_EQ_INT(int_of(row, "attempts"), 2);
    json_decref(row);

    /* Stopped mid-run (SIGTERM in the service): queued again, not failed. */
    int64_t stopped = create("stopped", 100000, 50, 100000);
    sched_kick(*s);
    CHECK(wait_status(stopped, "running", 20000));
    double t0 = gt_clock_s();
    sched_stop(*s);
    *s = NULL;
    CHECK_MSG(gt_clock_s() - t0 < 10, "sched_stop took %.1f s", gt_clock_s() - t0);
    char st[16];
    CHECK_MSG(strcmp(status_of(stopped, st), "queued") == 0, "stopped run: %s", st);
    statuses(stopped, seq, sizeof seq, NULL);
    CHECK_MSG(strcmp(seq, "queued,running,queued") == 0, "stopped: %s", seq);
}

int main(void)
{
    snprintf(dir, sizeof dir, "sched-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(dbpath, sizeof dbpath, "%s/test.db", dir);
    store_migration list[STORE_MAX_MIGRATIONS];
    int n = 0;
    gt_error err = {0};
    CHECK_EQ_INT(store_builtin_migrations(list, &n, &err), GT_OK);
    CHECK_EQ_INT(store_open(&db, dbpath, &err), GT_OK);
    CHECK_EQ_INT(store_migrate(db, list, n, NULL, &err), GT_OK);
    if (check_failures_)
        return check_finish();

    sched *s = NULL;
    int64_t finished = test_queue_and_training(&s);
    test_cancel(s, finished);
    test_recovery(&s);
    sched_stop(s);
    CHECK_EQ_INT(store_close(db, &err), GT_OK);
    if (!check_failures_) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);   /* kept on failure, for a look */
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    }
    return check_finish();
}
