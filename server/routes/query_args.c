#include "query_args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int64_t query_args_id(const char *s)
{
    /* 18 digits: at most 999 999 999 999 999 999 < 2^63, no overflow */
    if (!s || !*s || strlen(s) > 18)
        return 0;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        v = v * 10 + (*p - '0');
    }
    return v;
}

long long query_args_ll(const char *v, long long def, long long lo, long long hi)
{
    if (!v)
        return def;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return -1;
    return x;
}
