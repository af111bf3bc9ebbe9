/* metrics.c in-process: counters by a label of bounded cardinality
 * (metrics_keyed: the first 32 keys get a series for the life of the
 * process, the rest add to "other"; label values escaped) and histograms,
 * written in the text format that svc_prometheus_check accepts. */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "svc_harness.h"

static void test_keyed(void)
{
    metrics_keyed k;
    metrics_keyed_init(&k);
    /* 40 runs sampled: 1 job and 10 x id showers each; run 1 twice */
    for (int id = 1; id <= 40; id++) {
        char key[16];
        snprintf(key, sizeof key, "%d", id);
        unsigned long long add[2] = {1, 10ull * (unsigned long long)id};
        metrics_keyed_add(&k, key, add);
    }
    unsigned long long again[2] = {1, 5};
    metrics_keyed_add(&k, "1", again);
    metrics_keyed_add(&k, "a\"b\\c", again);     /* past 32: counted as other */
    metrics_buf b = {0};
    metrics_family(&b, "t_jobs_total", "counter", "Jobs.");
    metrics_write_keyed(&b, "t_jobs_total", "run", &k, 0);
    metrics_family(&b, "t_showers_total", "counter", "Showers.");
    metrics_write_keyed(&b, "t_showers_total", "run", &k, 1);
    CHECK(!b.failed && b.text);
    char why[256] = "";
    CHECK_MSG(svc_prometheus_check(b.text, why, sizeof why), "%s", why);
    CHECK(svc_metric(b.text, "t_jobs_total{run=\"1\"}") == 2);
    CHECK(svc_metric(b.text, "t_showers_total{run=\"1\"}") == 15);
    CHECK(svc_metric(b.text, "t_showers_total{run=\"32\"}") == 320);
    CHECK(svc_metric(b.text, "t_showers_total{run=\"33\"}") == -1);   /* no series */
    /* runs 33..40 and the odd key: 9 jobs, 10 x (33 + ... + 40) + 5 showers */
    CHECK(svc_metric(b.text, "t_jobs_total{run=\"other\"}") == 9);
    CHECK(svc_metric(b.text, "t_showers_total{run=\"other\"}") == 10 * 292 + 5);
    int series = 0;
    for (const char *p = strstr(b.text, "\nt_jobs_total{"); p; p = strstr(p + 1, "\nt_jobs_total{"))
        series++;
    CHECK_EQ_INT(series, METRICS_MAX_KEYS + 1);
    free(b.text);

    /* a key that needs escaping, while there is room */
    metrics_keyed e;
    metrics_keyed_init(&e);
    metrics_keyed_add(&e, "model:\"x\"\\", again);
    metrics_buf c = {0};
    metrics_family(&c, "e_total", "counter", "E.");
    metrics_write_keyed(&c, "e_total", "run", &e, 0);
    CHECK(strstr(c.text, "e_total{run=\"model:\\\"x\\\"\\\\\"} 1\n") != NULL);
    CHECK_MSG(svc_prometheus_check(c.text, why, sizeof why), "%s", why);
    free(c.text);
}

static void test_hist(void)
{
    metrics_hist h;
    metrics_hist_init(&h, metrics_seconds_bounds, metrics_seconds_nb, 1e6);
    metrics_hist_observe(&h, 0.0025);
    metrics_hist_observe(&h, 100);
    metrics_hist_observe(&h, -1);           /* a clock step back: 0 */
    CHECK(metrics_hist_count(&h) == 3);
    metrics_buf b = {0};
    metrics_family(&b, "t_seconds", "histogram", "T.");
    metrics_write_hist(&b, "t_seconds", "stage=\"1\"", &h);
    char why[256] = "";
    CHECK_MSG(svc_prometheus_check(b.text, why, sizeof why), "%s", why);
    CHECK(svc_metric(b.text, "t_seconds_bucket{stage=\"1\",le=\"0.0025\"}") == 2);
    CHECK(svc_metric(b.text, "t_seconds_bucket{stage=\"1\",le=\"60\"}") == 2);
    CHECK(svc_metric(b.text, "t_seconds_bucket{stage=\"1\",le=\"+Inf\"}") == 3);
    CHECK(svc_metric(b.text, "t_seconds_count{stage=\"1\"}") == 3);
    CHECK_CLOSE(svc_metric(b.text, "t_seconds_sum{stage=\"1\"}"), 100.0025, 1e-9, 0);
    free(b.text);
}

int main(void)
{
    test_keyed();
    test_hist();
    return check_finish();
}
