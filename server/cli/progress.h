/* progress: what the terminal commands show of a two-stage run (giant
 * train, giant watch): the fraction done and the time left, estimated over
 * both stages, and the one-line bar.
 *
 * The stages cost very different amounts per step (a stage-2 step of the
 * quickstart takes 10 to 20 times a stage-1 step), so progress counted in
 * steps and an ETA from the current stage's speed alone are wrong: at the
 * end of stage 1 they said 11% and 00:00 with almost all the time still
 * to come.  Each stage is weighted by its steps times its measured seconds
 * per step; a stage not measured yet borrows the other's, scaled by
 * PROGRESS_STAGE2_PRIOR.  Pure functions but the clock: unit-tested in
 * tests/server/test_progress.c. */
#ifndef PROGRESS_H
#define PROGRESS_H

#include <stddef.h>

/* Seconds of a stage-2 step per second of a stage-1 step, assumed until
 * stage 2 is measured (the quickstart measured 12 to 20; a guess that is
 * replaced by the measurement at stage 2's second report). */
#define PROGRESS_STAGE2_PRIOR 16.0

typedef struct progress_stage {
    long long steps;           /* of this stage                               */
    long long done;            /* steps done, 0..steps                        */
    double step_s;             /* measured seconds per step; <= 0 unknown     */
} progress_stage;

/* The fraction of the whole run's time done (0..1) and in *eta_s the
 * seconds left, -1 when neither stage has a measured step time (the
 * fraction then weighs a stage-2 step PROGRESS_STAGE2_PRIOR stage-1 steps). */
double progress_estimate(const progress_stage st[2], double *eta_s);

/* Seconds per step of each stage measured on the caller's clock: the
 * first report of a stage anchors it, later ones measure from there (so
 * the start-up before the first step and replayed history do not count). */
typedef struct progress_clock {
    long long step0[2];
    double t0[2];
    int anchored[2];
    double step_s[2];          /* 0 until measured                            */
} progress_clock;

/* stage 1 or 2, its step, now in seconds (any monotonic origin). */
void progress_clock_tick(progress_clock *c, int stage, long long step, double now);

/* "01:02:03", "02:03" under an hour, "--:--" when eta_s < 0. */
void progress_format_eta(char *buf, size_t cap, double eta_s);

/* One line: "[######..........]  33%  ETA 02:03  " then detail. */
void progress_line(char *buf, size_t cap, double fraction, double eta_s, const char *detail);

/* Whether giant train mutes log records: on a terminal the bar is the
 * output, so the records (which would break its line) are dropped unless
 * --verbose; into a file or pipe they are kept. */
int progress_logs_muted(int stderr_is_tty, int verbose);

#endif
