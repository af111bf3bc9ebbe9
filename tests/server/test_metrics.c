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

/* The OpenMetrics form of a small exposition: counters renamed, a
 * counter without _total made unknown, quotes in HELP escaped, # EOF. */
static void test_openmetrics(void)
{
    metrics_buf b = {0};
    metrics_family(&b, "t_requests_total", "counter", "Requests, \"all\" of them.");
    metrics_printf(&b, "t_requests_total{code=\"a\"} 3\n");
    metrics_family(&b, "t_odd", "counter", "A counter without the suffix.");
    metrics_printf(&b, "t_odd 1\n");
    metrics_family(&b, "t_up", "gauge", "Up.");
    metrics_printf(&b, "t_up 1\n");
    metrics_hist h;
    static const double bounds[] = {1, 2};
    metrics_hist_init(&h, bounds, 2, 1);
    metrics_hist_observe(&h, 1.5);
    metrics_family(&b, "t_size", "histogram", "Sizes.");
    metrics_write_hist(&b, "t_size", "", &h);
    metrics_buf om = {0};
    metrics_openmetrics(b.text, &om);
    CHECK(!om.failed && om.text);
    static const char want[] =
        "# HELP t_requests Requests, \\\"all\\\" of them.\n"
        "# TYPE t_requests counter\n"
        "t_requests_total{code=\"a\"} 3\n"
        "# HELP t_odd A counter without the suffix.\n"
        "# TYPE t_odd unknown\n"
        "t_odd 1\n"
        "# HELP t_up Up.\n"
        "# TYPE t_up gauge\n"
        "t_up 1\n"
        "# HELP t_size Sizes.\n"
        "# TYPE t_size histogram\n"
        "t_size_bucket{le=\"1\"} 0\n"
        "t_size_bucket{le=\"2\"} 1\n"
        "t_size_bucket{le=\"+Inf\"} 1\n"
        "t_size_sum 2\n"   /* sum_scale 1: an integer */
        "t_size_count 1\n"
        "# EOF\n";
    CHECK_MSG(om.text && strcmp(om.text, want) == 0, "%s", om.text ? om.text : "(none)");
    char why[256] = "";
    /* t_odd is "unknown" here, which the classic checker does not take:
     * the checker sees the rest */
    metrics_buf two = {0};
    metrics_family(&two, "t_requests_total", "counter", "Requests, \"all\" of them.");
    metrics_printf(&two, "t_requests_total{code=\"a\"} 3\n");
    metrics_family(&two, "t_size", "histogram", "Sizes.");
    metrics_write_hist(&two, "t_size", "", &h);
    metrics_buf om2 = {0};
    metrics_openmetrics(two.text, &om2);
    CHECK_MSG(svc_openmetrics_check(om2.text, why, sizeof why), "%s", why);
    /* and it catches what is wrong */
    CHECK(!svc_openmetrics_check(two.text, why, sizeof why));           /* no # EOF */
    static const char suffixed[] = "# HELP t_x_total X.\n# TYPE t_x_total counter\n"
                                   "t_x_total 1\n# EOF\n";
    CHECK(!svc_openmetrics_check(suffixed, why, sizeof why));
    static const char quoted[] = "# HELP t_x X \"y\".\n# TYPE t_x gauge\nt_x 1\n# EOF\n";
    CHECK(!svc_openmetrics_check(quoted, why, sizeof why));
    free(b.text);
    free(om.text);
    free(two.text);
    free(om2.text);
}

int main(void)
{
    test_keyed();
    test_hist();
    test_openmetrics();
    return check_finish();
}
