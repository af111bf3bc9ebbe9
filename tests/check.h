/* check.h: the project's tiny test harness (header only).
 *
 * A test program is a main() that calls CHECK*() and returns check_finish().
 * Each failed check prints file:line and the expression; the program exits 1
 * if any failed.  A test that cannot run here (no GPU, no PyTorch) calls
 * check_skip("why"), which prints the reason and exits 77, which ctest
 * reports as skipped (SKIP_RETURN_CODE 77 is set by giant_add_test). */
#ifndef CHECK_H
#define CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures_;
static int check_count_;

/* Counts a failed check and prints "file:line: CHECK failed: expr" followed
 * by sep: "\n" ends the report, ": " leaves it open for a message. */
static inline void check_failed_(const char *file, int line, const char *expr,
                                 const char *sep)
{
    check_failures_++;
    fprintf(stderr, "%s:%d: CHECK failed: %s%s", file, line, expr, sep);
}

#define CHECK(cond)                                                            \
    do {                                                                       \
        check_count_++;                                                        \
        if (!(cond))                                                           \
            check_failed_(__FILE__, __LINE__, #cond, "\n");                    \
    } while (0)

/* The message (printf arguments) is evaluated only when the check fails. */
#define CHECK_MSG(cond, ...)                                                   \
    do {                                                                       \
        check_count_++;                                                        \
        if (!(cond)) {                                                         \
            check_failed_(__FILE__, __LINE__, #cond, ": ");                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

/* Each side is evaluated once: a check on a call (an HTTP status, a return
 * code) must print the value that failed, not the value of a second call. */
#define CHECK_EQ_INT(a, b)                                                     \
    do {                                                                       \
        long long ia_ = (long long)(a), ib_ = (long long)(b);                  \
        check_count_++;                                                        \
        if (ia_ != ib_) {                                                      \
            check_failed_(__FILE__, __LINE__, #a " == " #b, ": ");             \
            fprintf(stderr, "%lld != %lld\n", ia_, ib_);                       \
        }                                                                      \
    } while (0)

/* |a - b| <= atol + rtol * |b| */
#define CHECK_CLOSE(a, b, atol, rtol)                                          \
    do {                                                                       \
        double ca_ = (double)(a), cb_ = (double)(b);                           \
        CHECK_MSG(fabs(ca_ - cb_) <= (atol) + (rtol) * fabs(cb_),              \
                  "%.9g vs %.9g (atol %g rtol %g)", ca_, cb_, (double)(atol),  \
                  (double)(rtol));                                             \
    } while (0)

static inline int check_finish(void)
{
    if (check_failures_) {
        fprintf(stderr, "FAILED: %d of %d checks\n", check_failures_,
                check_count_);
        return 1;
    }
    printf("ok: %d checks\n", check_count_);
    return 0;
}

static inline void check_skip(const char *why)
{
    printf("SKIPPED: %s\n", why);
    exit(77);
}

#endif
