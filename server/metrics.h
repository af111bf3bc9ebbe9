/* metrics: Prometheus histograms and the text exposition format.
 *
 * A histogram has fixed upper bounds chosen by its owner and lock-free
 * counters, so observing costs a few atomic adds on any thread (pool
 * threads, the sampling and training workers).  The writer appends the
 * text format (version 0.0.4) to a growing buffer: # HELP and # TYPE once
 * per metric family, then each series' cumulative _bucket{le="..."} lines
 * ending at le="+Inf", _sum and _count.  Depends on nothing. */
#ifndef METRICS_H
#define METRICS_H

#include <stdatomic.h>
#include <stddef.h>

#define METRICS_MAX_BUCKETS 16

typedef struct metrics_hist {
    const double *bounds;      /* ascending upper bounds, nb of them        */
    int nb;
    double sum_scale;          /* _sum kept as an integer of value * scale  */
    atomic_ullong counts[METRICS_MAX_BUCKETS + 1];   /* per bucket, last +Inf */
    atomic_ullong sum;
} metrics_hist;

/* bounds must outlive h (static arrays); nb <= METRICS_MAX_BUCKETS.
 * sum_scale: 1e6 for seconds (microsecond resolution), 1 for counts. */
void metrics_hist_init(metrics_hist *h, const double *bounds, int nb, double sum_scale);
void metrics_hist_observe(metrics_hist *h, double v);
unsigned long long metrics_hist_count(const metrics_hist *h);

/* Bounds in seconds for latencies from a millisecond to a minute, and in
 * counts for sizes from 1 to 100 000. */
extern const double metrics_seconds_bounds[];
extern const int metrics_seconds_nb;
extern const double metrics_count_bounds[];
extern const int metrics_count_nb;

typedef struct metrics_buf {
    char *text;                /* malloc'ed, NUL-terminated                 */
    size_t len, cap;
    int failed;                /* out of memory: the text is incomplete     */
} metrics_buf;

void metrics_printf(metrics_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* # HELP and # TYPE lines of a family; type is counter, gauge or histogram. */
void metrics_family(metrics_buf *b, const char *name, const char *type, const char *help);
/* One histogram series of family name; labels is "" or label pairs without
 * braces ("route=\"/healthz\",class=\"2xx\""), already escaped. */
void metrics_write_hist(metrics_buf *b, const char *name, const char *labels,
                        const metrics_hist *h);
/* Writes s into out as a label value: backslash, quote and newline escaped. */
void metrics_escape(const char *s, char *out, size_t cap);

#endif
