/* gt_clock: the monotonic clock in seconds, for durations (what a step,
 * a request or a phase of a command took) and deadlines.  Its origin is
 * arbitrary: only differences mean anything. */
#ifndef GT_CLOCK_H
#define GT_CLOCK_H

#include <time.h>

static inline double gt_clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
