/* gt_array: room for one more item in an array that grows by doubling,
 * the way the engine's lists and caches grow (a trunk's parameter views,
 * the CUDA backend's allocation records and plan caches), and room for
 * `need` bytes in a text or byte buffer that grows the same way (a
 * request's body, a child's output, an event stream, the metrics page).
 *
 * Header only, static inline; plain C, so the CUDA sources use it too. */
#ifndef GT_ARRAY_H
#define GT_ARRAY_H

#include <stdlib.h>

/* items (holding count of *cap), with room for item count + 1: as it is
 * when there is room, else reallocated to twice *cap (first when empty)
 * and *cap updated.  NULL when out of memory: items and *cap are then
 * unchanged and still the caller's. */
static inline void *gt_array_grow(void *items, int count, int *cap, size_t item_size, int first)
{
    if (count < *cap)
        return items;
    int n = *cap ? 2 * *cap : first;
    void *p = realloc(items, (size_t)n * item_size);
    if (p)
        *cap = n;
    return p;
}

/* *buf (*cap bytes) with room for need bytes: as it is when there is,
 * else reallocated to the first doubling of *cap (of first when empty)
 * that holds need, and *cap updated.  -1 when out of memory: *buf and
 * *cap are then unchanged and still the caller's. */
static inline int gt_array_reserve(char **buf, size_t *cap, size_t need, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : first;
    while (n < need)
        n *= 2;
    char *p = (char *)realloc(*buf, n);   /* the cast: C++ (the CUDA sources) */
    if (!p)
        return -1;
    *buf = p;
    *cap = n;
    return 0;
}

#endif
