/* fuzz_query: the numbers of the list routes' query strings, path ids and
 * Last-Event-ID (query_args.c, what routes.c's helpers call), fed as a
 * client sends them: the input is a query string, split at '&' and '=' and
 * percent-decoded by libmicrohttpd's own unescaper, each value given to
 * the parser of its name with the route's bounds.  Every answer must be
 * the documented one: an id is 1 to 18 digits and reads back as the
 * same digits; an integer is the default when absent, else -1 or a value
 * in its bounds that strtoll agrees with; a cursor written back as
 * next_cursor is ("%lld") parses to the same value. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "query_args.h"

static void check_id(const char *v)
{
    int64_t id = query_args_id(v);
    size_t n = strlen(v);
    int digits = n >= 1 && n <= 18 && strspn(v, "0123456789") == n;
    if (!digits) {
        if (id != 0)
            abort();
        return;
    }
    char back[32];
    snprintf(back, sizeof back, "%lld", (long long)id);
    /* the same number: leading zeros are the only other spelling */
    const char *p = v;
    while (*p == '0' && p[1])
        p++;
    if (id < 0 || strcmp(back, p) != 0)
        abort();
}

static void check_ll(const char *v, long long def, long long lo, long long hi)
{
    long long x = query_args_ll(v, def, lo, hi);
    if (!v) {
        if (x != def)
            abort();
        return;
    }
    if (x == -1)
        return;
    if (x < lo || x > hi)
        abort();
    char *end;
    errno = 0;
    long long y = strtoll(v, &end, 10);
    if (errno || *end || y != x)
        abort();
    char back[32];
    snprintf(back, sizeof back, "%lld", x);
    if (query_args_ll(back, def, lo, hi) != x)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 16384)          /* the service refuses a longer query (414) */
        return 0;
    char *q = malloc(size + 1);
    if (!q)
        return 0;
    memcpy(q, data, size);
    q[size] = '\0';
    int seen_limit = 0;
    for (char *save = NULL, *pair = strtok_r(q, "&", &save); pair;
         pair = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(pair, '=');
        char *value = eq ? eq + 1 : NULL;
        if (eq)
            *eq = '\0';
        MHD_http_unescape(pair);
        if (value)
            MHD_http_unescape(value);
        const char *v = value ? value : "";
        /* the bounds of routes_runs.c, routes_evaluations.c, routes_events.c */
        if (!strcmp(pair, "limit")) {
            check_ll(v, 20, 1, 100);
            check_ll(v, 50, 1, 200);
            seen_limit = 1;
        } else if (!strcmp(pair, "cursor") || !strcmp(pair, "since_step")) {
            check_ll(v, 0, 0, INT64_MAX);
        } else if (!strcmp(pair, "max_points")) {
            check_ll(v, 1000, 1, 10000);
        } else {
            /* {id}, {eid}, {ckpt}, Last-Event-ID, or any other value */
            check_id(v);
            check_id(pair);
        }
    }
    if (!seen_limit)
        check_ll(NULL, 20, 1, 100);
    free(q);
    return 0;
}
