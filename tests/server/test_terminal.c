/* test_terminal: what the terminal commands print, in-process: the ETA and
 * fraction of a two-stage run (progress.c), the decision to mute log
 * records under giant train's bar, and the shortest round-trip numbers
 * (numfmt.c) that configs, events and metric histories are written with. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "log.h"
#include "numfmt.h"
#include "progress.h"

static void test_eta_both_stages(void)
{
    double eta;
    /* the end of stage 1 of the quickstart: 1500 stage-1 steps done at
     * 0.02 s, 12000 stage-2 steps to come, not measured yet */
    progress_stage st[2] = {{1500, 1500, 0.02}, {12000, 0, 0}};
    double f = progress_estimate(st, &eta);
    double s2 = 0.02 * PROGRESS_STAGE2_PRIOR;
    CHECK_CLOSE(eta, 12000 * s2, 1e-9, 1e-9);
    CHECK_CLOSE(f, 30.0 / (30.0 + 12000 * s2), 1e-12, 1e-9);
    CHECK(f < 0.02);                      /* not 11% of the steps, and not ETA 0 */

    /* stage 2 measured: its own time, stage 1's for stage 1 */
    progress_stage mid[2] = {{1500, 1500, 0.02}, {12000, 3000, 0.1}};
    f = progress_estimate(mid, &eta);
    CHECK_CLOSE(eta, 9000 * 0.1, 1e-9, 1e-9);
    CHECK_CLOSE(f, (30.0 + 300.0) / (30.0 + 1200.0), 1e-12, 1e-9);

    /* half-way through stage 1: the rest of it plus all of stage 2 */
    progress_stage early[2] = {{100, 50, 1.0}, {200, 0, 0}};
    f = progress_estimate(early, &eta);
    CHECK_CLOSE(eta, 50 * 1.0 + 200 * PROGRESS_STAGE2_PRIOR, 1e-9, 1e-9);

    /* resumed in stage 2 (stage 1 never measured): stage 1 borrows */
    progress_stage resumed[2] = {{100, 100, 0}, {200, 100, 0.5}};
    f = progress_estimate(resumed, &eta);
    CHECK_CLOSE(eta, 50.0, 1e-9, 1e-9);
    CHECK(f > 0.5 && f < 1);

    /* nothing measured: ETA unknown, the steps weighted by the prior (the
     * same fraction as once stage 1 is measured: no jump back) */
    progress_stage none[2] = {{100, 25, 0}, {100, 0, 0}};
    f = progress_estimate(none, &eta);
    CHECK(eta < 0);
    CHECK_CLOSE(f, 25.0 / (100 + 100 * PROGRESS_STAGE2_PRIOR), 1e-12, 1e-12);
    none[0].step_s = 0.3;
    CHECK_CLOSE(progress_estimate(none, &eta), f, 1e-12, 1e-12);

    /* done */
    progress_stage done[2] = {{100, 100, 0.1}, {100, 100, 0.2}};
    f = progress_estimate(done, &eta);
    CHECK_CLOSE(eta, 0, 1e-12, 0);
    CHECK_CLOSE(f, 1, 1e-12, 0);
}

static void test_clock_and_line(void)
{
    progress_clock c = {0};
    progress_clock_tick(&c, 1, 10, 100.0);        /* anchors: no time yet */
    CHECK(c.step_s[0] == 0);
    progress_clock_tick(&c, 1, 30, 102.0);
    CHECK_CLOSE(c.step_s[0], 0.1, 1e-12, 1e-12);
    progress_clock_tick(&c, 2, 10, 105.0);
    CHECK(c.step_s[1] == 0);
    progress_clock_tick(&c, 2, 20, 110.0);
    CHECK_CLOSE(c.step_s[1], 0.5, 1e-12, 1e-12);
    CHECK_CLOSE(c.step_s[0], 0.1, 1e-12, 1e-12);

    char buf[128];
    progress_format_eta(buf, sizeof buf, 83);
    CHECK(strcmp(buf, "01:23") == 0);
    progress_format_eta(buf, sizeof buf, 3723);
    CHECK(strcmp(buf, "01:02:03") == 0);
    progress_format_eta(buf, sizeof buf, -1);
    CHECK(strcmp(buf, "--:--") == 0);
    progress_line(buf, sizeof buf, 0.5, 60, "loss 1");
    CHECK_MSG(strcmp(buf, "[############............]  50%  ETA 01:00  loss 1") == 0, "%s", buf);
    progress_line(buf, sizeof buf, 0.999, 1, "");
    CHECK_MSG(strstr(buf, " 99%") != NULL, "%s", buf);
}

static void test_logs_muted(void)
{
    CHECK(progress_logs_muted(1, 0));             /* terminal: the bar only */
    CHECK(!progress_logs_muted(1, 1));            /* --verbose */
    CHECK(!progress_logs_muted(0, 0));            /* file or pipe: kept */
    CHECK(!progress_logs_muted(0, 1));
}

static int hook_calls;
static void count_hook(void *user)
{
    (void)user;
    hook_calls++;
}

static void test_log_hook(void)
{
    log_set_hook(count_hook, NULL);
    log_msg(LOG_INFO, "test", "hook=1");
    log_set_level(LOG_WARN);
    log_msg(LOG_INFO, "test", "muted=1");         /* dropped: no hook call */
    log_set_level(LOG_INFO);
    log_set_hook(NULL, NULL);
    log_msg(LOG_INFO, "test", "hook=0");
    CHECK_EQ_INT(hook_calls, 1);
}

static void test_shortest(void)
{
    char buf[40];
    CHECK(strcmp(numfmt_double(buf, sizeof buf, 0.1), "0.1") == 0);
    CHECK(strcmp(numfmt_double(buf, sizeof buf, 1e-4), "0.0001") == 0);
    CHECK(strcmp(numfmt_double(buf, sizeof buf, 0.1 + 0.2), "0.30000000000000004") == 0);
    CHECK(strcmp(numfmt_float(buf, sizeof buf, 1e-4f), "0.0001") == 0);
    CHECK(strcmp(numfmt_float(buf, sizeof buf, 1.2379328f), "1.2379328") == 0);
    /* every value round-trips, over a spread of magnitudes and bits */
    unsigned long long x = 88172645463325252ULL;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double d;
        memcpy(&d, &x, sizeof d);
        if (!isfinite(d))
            continue;
        CHECK_MSG(strtod(numfmt_double(buf, sizeof buf, d), NULL) == d, "%s", buf);
        float f = (float)((double)(x >> 11) / 9007199254740992.0 * 1e3);
        CHECK_MSG(strtof(numfmt_float(buf, sizeof buf, f), NULL) == f, "%s", buf);
        CHECK((float)numfmt_float_as_double(f) == f);
    }

    /* documents: reals shortest, integers, strings (with digits and
     * escapes) and integral reals untouched */
    json_t *j = json_pack("{s:f, s:f, s:i, s:s, s:f, s:[f, f], s:f}", "lr", 0.1, "w", 1e-10,
                          "n", 42, "s", "0.10000000000000001 \"1.5\"", "two", 2.0, "a", -0.3,
                          numfmt_float_as_double(1.2379328f), "big", 1.5e300);
    char *t = numfmt_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_MSG(t && strcmp(t, "{\"a\":[-0.3,1.2379328],\"big\":1.5e+300,\"lr\":0.1,\"n\":42,"
                             "\"s\":\"0.10000000000000001 \\\"1.5\\\"\",\"two\":2.0,"
                             "\"w\":1e-10}") == 0,
              "%s", t ? t : "(null)");
    json_t *back = t ? json_loads(t, 0, NULL) : NULL;
    CHECK(back && json_equal(back, j));
    json_decref(back);
    free(t);
    json_decref(j);
}

int main(void)
{
    test_eta_both_stages();
    test_clock_and_line();
    test_logs_muted();
    test_log_hook();
    test_shortest();
    return check_finish();
}
