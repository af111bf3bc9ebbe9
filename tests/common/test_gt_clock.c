/* gt_clock: seconds that never go back, that move at the wall clock's rate
 * across a sleep, and that resolve well under a millisecond. */
#include <time.h>

#include "check.h"
#include "gt_clock.h"

int main(void)
{
    double prev = gt_clock_s(), first = prev;
    int backwards = 0;
    for (int i = 0; i < 100000; i++) {
        double t = gt_clock_s();
        backwards += t < prev;
        prev = t;
    }
    CHECK_EQ_INT(backwards, 0);
    /* a 50 ms sleep reads as 50 ms, give or take a loaded machine */
    double t0 = gt_clock_s();
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double slept = gt_clock_s() - t0;
    CHECK_MSG(slept >= 0.049 && slept < 5.0, "a 50 ms sleep took %.6f s", slept);
    /* two readings a few microseconds apart differ: not a coarse clock */
    double a = gt_clock_s(), b = a;
    for (int i = 0; i < 1000000 && b == a; i++)
        b = gt_clock_s();
    CHECK_MSG(b > a && b - a < 1e-3, "the clock moved by %.9f s", b - a);
    CHECK(prev >= first);
    return check_finish();
}
