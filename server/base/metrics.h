/* metrics: Prometheus histograms and the text exposition format.
 *
 * A histogram has fixed upper bounds chosen by its owner and lock-free
 * counters, so observing costs a few atomic adds on any thread (pool
 * threads, the sampling and training workers).  The writer appends the
 * text format (version 0.0.4) to a growing buffer: # HELP and # TYPE once
 * per metric family, then each series' cumulative _bucket{le="..."} lines
 * ending at le="+Inf", _sum and _count, or in OpenMetrics for a scraper
 * that asks.  Also counters by a label of
 * bounded cardinality (metrics_keyed).  Depends on nothing. */
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

/* Counters by a label whose values come from clients' data (a run's id),
 * with bounded cardinality: the first METRICS_MAX_KEYS distinct keys since
 * the start get a series each, for the life of the process (a counter never
 * goes back or moves to another series); any later key adds to the series
 * "other".  Each key has METRICS_KEYED_COLS counters (requests, showers).
 * Guarded by a spin lock held for a few instructions (adds are per batch,
 * reads per scrape); not a pthread mutex, since pthread.h includes
 * <sched.h>, which server/sched.h shadows on this include path. */
typedef struct metrics_buf metrics_buf;

#define METRICS_MAX_KEYS 32
#define METRICS_KEYED_COLS 2

typedef struct metrics_keyed {
    atomic_flag lock;
    int n;                                      /* keys taken               */
    char keys[METRICS_MAX_KEYS][32];
    unsigned long long v[METRICS_MAX_KEYS + 1][METRICS_KEYED_COLS];  /* last: other */
} metrics_keyed;

void metrics_keyed_init(metrics_keyed *k);
/* Adds add[0..METRICS_KEYED_COLS-1] to key's counters (key cut to 31 bytes). */
void metrics_keyed_add(metrics_keyed *k, const char *key, const unsigned long long *add);
/* One counter series per key of column col, label="key" (escaped), then
 * label="other" (always written, 0 until a key overflows). */
void metrics_write_keyed(metrics_buf *b, const char *name, const char *label,
                         metrics_keyed *k, int col);

struct metrics_buf {
    char *text;                /* malloc'ed, NUL-terminated                 */
    size_t len, cap;
    int failed;                /* out of memory: the text is incomplete     */
};

void metrics_printf(metrics_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* # HELP and # TYPE lines of a family; type is counter, gauge or histogram. */
void metrics_family(metrics_buf *b, const char *name, const char *type, const char *help);
/* One histogram series of family name; labels is "" or label pairs without
 * braces ("route=\"/healthz\",class=\"2xx\""), already escaped. */
void metrics_write_hist(metrics_buf *b, const char *name, const char *labels,
                        const metrics_hist *h);
/* Writes s into out as a label value: backslash, quote and newline escaped. */
void metrics_escape(const char *s, char *out, size_t cap);

/* The same families in the OpenMetrics text format (1.0.0), for a scraper
 * that asks for it (Accept: application/openmetrics-text): a counter
 * family is named without its _total suffix in # HELP and # TYPE (its
 * samples keep it), a counter without the suffix becomes "unknown", a
 * double quote in a HELP text is escaped, and the exposition ends with
 * "# EOF".  text is what the writers above produced. */
void metrics_openmetrics(const char *text, metrics_buf *out);
#define METRICS_OPENMETRICS_TYPE "application/openmetrics-text; version=1.0.0; charset=utf-8"

#endif
