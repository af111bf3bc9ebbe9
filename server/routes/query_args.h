/* query_args: the numbers clients put in paths, query strings and headers
 * ({id} captures, limit, cursor, since_step, max_points, Last-Event-ID,
 * an ingested checkpoint's {step}, an acceptance test's showers),
 * parsed one way for every route and without HTTP in it, so the fuzz
 * target (tests/fuzz/fuzz_query.c) calls what the routes call.  Depends on
 * nothing. */
#ifndef QUERY_ARGS_H
#define QUERY_ARGS_H

#include <stdint.h>

/* A row id: 1 to 18 decimal digits and nothing else (no sign, space or
 * exponent), so every id fits an int64.  0 when s is not one (ids start at
 * 1, so 0 is never a real one; "0" itself also gives 0). */
int64_t query_args_id(const char *s);

/* An integer parameter: def when v is NULL (absent); -1 when it is not a
 * whole decimal number (strtoll's syntax: optional space and sign) in
 * [lo, hi] (so lo must be >= 0 for -1 to mean an error). */
long long query_args_ll(const char *v, long long def, long long lo, long long hi);

#endif
