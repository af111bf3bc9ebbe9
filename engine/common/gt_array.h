/* gt_array: room for one more item in an array that grows by doubling,
 * the way the engine's lists and caches grow (a trunk's parameter views,
 * the CUDA backend's allocation records and plan caches).
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

#endif
