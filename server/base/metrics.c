#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gt_array.h"

const double metrics_seconds_bounds[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                          0.25,  0.5,    1,     2.5,  5,     10,   30, 60 };
const int metrics_seconds_nb = (int)(sizeof metrics_seconds_bounds / sizeof(double));
const double metrics_count_bounds[] = { 1, 10, 100, 1000, 2000, 5000, 10000, 100000 };
const int metrics_count_nb = (int)(sizeof metrics_count_bounds / sizeof(double));

void metrics_hist_init(metrics_hist *h, const double *bounds, int nb, double sum_scale)
{
    h->bounds = bounds;
    h->nb = nb < METRICS_MAX_BUCKETS ? nb : METRICS_MAX_BUCKETS;
    h->sum_scale = sum_scale;
    for (int i = 0; i <= METRICS_MAX_BUCKETS; i++)
        atomic_init(&h->counts[i], 0);
    atomic_init(&h->sum, 0);
}

void metrics_hist_observe(metrics_hist *h, double v)
{
    if (!(v >= 0))
        v = 0;                 /* a clock step back, or NaN */
    int i = 0;
    while (i < h->nb && v > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, (unsigned long long)(v * h->sum_scale + 0.5),
                              memory_order_relaxed);
}

unsigned long long metrics_hist_count(const metrics_hist *h)
{
    unsigned long long n = 0;
    for (int i = 0; i <= h->nb; i++)
        n += atomic_load(&((metrics_hist *)h)->counts[i]);
    return n;
}

void metrics_printf(metrics_buf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->text ? b->text + b->len : NULL, b->text ? b->cap - b->len : 0,
                          fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->text && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        if (gt_array_reserve(&b->text, &b->cap, b->len + (size_t)n + 1, 16384) != 0) {
            b->failed = 1;
            return;
        }
    }
}

void metrics_family(metrics_buf *b, const char *name, const char *type, const char *help)
{
    metrics_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The shortest text that reads back as v (a bound's 0.0025, not
 * 0.0025000000000000001), without an exponent where a plain decimal does
 * (le="60", not the "6e+01" that %.1g gives). */
static void format_shortest(double v, char *out, size_t cap)
{
    if (v >= 1e-6 && v < 1e15)
        for (int d = 0; d <= 17; d++) {
            snprintf(out, cap, "%.*f", d, v);
            if (strtod(out, NULL) == v)
                return;
        }
    for (int p = 1; p <= 17; p++) {
        snprintf(out, cap, "%.*g", p, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

void metrics_write_hist(metrics_buf *b, const char *name, const char *labels,
                        const metrics_hist *h)
{
    const char *sep = labels[0] ? "," : "";
    unsigned long long cumulative = 0;
    metrics_hist *m = (metrics_hist *)h;
    for (int i = 0; i < h->nb; i++) {
        char le[32];
        format_shortest(h->bounds[i], le, sizeof le);
        cumulative += atomic_load(&m->counts[i]);
        metrics_printf(b, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, labels, sep, le, cumulative);
    }
    cumulative += atomic_load(&m->counts[h->nb]);
    metrics_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, cumulative);
    char sum[64];
    format_shortest((double)atomic_load(&m->sum) / h->sum_scale, sum, sizeof sum);
    if (labels[0]) {
        metrics_printf(b, "%s_sum{%s} %s\n", name, labels, sum);
        metrics_printf(b, "%s_count{%s} %llu\n", name, labels, cumulative);
    } else {
        metrics_printf(b, "%s_sum %s\n%s_count %llu\n", name, sum, name, cumulative);
    }
}

void metrics_escape(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    for (; *s && o + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') {
            out[o++] = '\\';
            out[o++] = *s;
        } else if (*s == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = *s;
        }
    }
    out[o] = '\0';
}

void metrics_keyed_init(metrics_keyed *k)
{
    memset(k, 0, sizeof *k);
    atomic_flag_clear(&k->lock);
}

static void keyed_lock(metrics_keyed *k)
{
    while (atomic_flag_test_and_set_explicit(&k->lock, memory_order_acquire))
        ;
}

static void keyed_unlock(metrics_keyed *k)
{
    atomic_flag_clear_explicit(&k->lock, memory_order_release);
}

void metrics_keyed_add(metrics_keyed *k, const char *key, const unsigned long long *add)
{
    keyed_lock(k);
    int i = 0;
    while (i < k->n && strncmp(k->keys[i], key, sizeof k->keys[i] - 1) != 0)
        i++;
    if (i == k->n) {
        if (k->n < METRICS_MAX_KEYS)
            snprintf(k->keys[k->n++], sizeof k->keys[0], "%s", key);
        else
            i = METRICS_MAX_KEYS;       /* "other" */
    }
    for (int c = 0; c < METRICS_KEYED_COLS; c++)
        k->v[i][c] += add[c];
    keyed_unlock(k);
}

void metrics_write_keyed(metrics_buf *b, const char *name, const char *label,
                         metrics_keyed *k, int col)
{
    keyed_lock(k);
    for (int i = 0; i < k->n; i++) {
        char esc[100];
        metrics_escape(k->keys[i], esc, sizeof esc);
        metrics_printf(b, "%s{%s=\"%s\"} %llu\n", name, label, esc, k->v[i][col]);
    }
    metrics_printf(b, "%s{%s=\"other\"} %llu\n", name, label, k->v[METRICS_MAX_KEYS][col]);
    keyed_unlock(k);
}

/* The TYPE of family name (len bytes): on the line after its HELP, as
 * metrics_family writes them, or else wherever it is; "" when none. */
static void family_type(const char *text, const char *from, const char *name, size_t len,
                        char *out, size_t cap)
{
    out[0] = '\0';
    for (int pass = 0; pass < 2 && !out[0]; pass++)
        for (const char *line = pass ? text : from; *line;) {
            if (strncmp(line, "# TYPE ", 7) == 0 && strncmp(line + 7, name, len) == 0 &&
                line[7 + len] == ' ') {
                const char *t = line + 8 + len;
                snprintf(out, cap, "%.*s", (int)strcspn(t, "\n"), t);
                break;
            }
            size_t n = strcspn(line, "\n");
            line += n + (line[n] != '\0');
            if (!pass && strncmp(line, "# TYPE ", 7) != 0)
                break;   /* the first pass looks at the next line only */
        }
}

void metrics_openmetrics(const char *text, metrics_buf *out)
{
    for (const char *line = text; *line;) {
        size_t n = strcspn(line, "\n");
        int help = strncmp(line, "# HELP ", 7) == 0, type = strncmp(line, "# TYPE ", 7) == 0;
        if (help || type) {
            const char *name = line + 7;
            size_t nlen = strcspn(name, " \n");
            char t[32];
            family_type(text, line, name, nlen, t, sizeof t);
            int counter = strcmp(t, "counter") == 0;
            int total = nlen > 6 && strncmp(name + nlen - 6, "_total", 6) == 0;
            /* OpenMetrics names a counter family without _total; a counter
             * whose samples lack it cannot be one */
            int keep = (int)(counter && total ? nlen - 6 : nlen);
            if (type) {
                metrics_printf(out, "# TYPE %.*s %s\n", keep, name,
                               counter && !total ? "unknown" : t);
            } else {
                /* the help text with each double quote escaped */
                metrics_printf(out, "# HELP %.*s", keep, name);
                const char *p = name + nlen, *end = line + n;
                while (p < end) {
                    size_t run = strcspn(p, "\"\n");
                    if (p + run > end)
                        run = (size_t)(end - p);
                    metrics_printf(out, "%.*s%s", (int)run, p, p + run < end ? "\\\"" : "");
                    p += run + (p + run < end);
                }
                metrics_printf(out, "\n");
            }
        } else {
            metrics_printf(out, "%.*s\n", (int)n, line);
        }
        line += n + (line[n] != '\0');
    }
    metrics_printf(out, "# EOF\n");
}
