#include "progress.h"

#include <math.h>
#include <stdio.h>

double progress_estimate(const progress_stage st[2], double *eta_s)
{
    double s1 = st[0].step_s, s2 = st[1].step_s;
    /* a stage not measured yet borrows the other's speed, scaled */
    if (s1 <= 0 && s2 > 0)
        s1 = s2 / PROGRESS_STAGE2_PRIOR;
    if (s2 <= 0 && s1 > 0)
        s2 = s1 * PROGRESS_STAGE2_PRIOR;
    long long n1 = st[0].steps > 0 ? st[0].steps : 0, n2 = st[1].steps > 0 ? st[1].steps : 0;
    long long d1 = st[0].done < 0 ? 0 : st[0].done > n1 ? n1 : st[0].done;
    long long d2 = st[1].done < 0 ? 0 : st[1].done > n2 ? n2 : st[1].done;
    if (s1 <= 0) {
        /* no time yet: the stages weighted by the prior alone, so the
         * fraction does not jump back when the first step is measured */
        double all = (double)n1 + PROGRESS_STAGE2_PRIOR * (double)n2;
        *eta_s = -1;
        return all > 0 ? ((double)d1 + PROGRESS_STAGE2_PRIOR * (double)d2) / all : 0;
    }
    double total = (double)n1 * s1 + (double)n2 * s2;
    double left = (double)(n1 - d1) * s1 + (double)(n2 - d2) * s2;
    *eta_s = left;
    return total > 0 ? 1 - left / total : 1;
}

void progress_clock_tick(progress_clock *c, int stage, long long step, double now)
{
    if (stage < 1 || stage > 2)
        return;
    int i = stage - 1;
    if (!c->anchored[i] || step < c->step0[i]) {
        c->anchored[i] = 1;
        c->step0[i] = step;
        c->t0[i] = now;
        return;
    }
    if (step > c->step0[i] && now > c->t0[i])
        c->step_s[i] = (now - c->t0[i]) / (double)(step - c->step0[i]);
}

void progress_format_eta(char *buf, size_t cap, double eta_s)
{
    if (!(eta_s >= 0) || eta_s > 360000.0 * 99) {
        snprintf(buf, cap, "--:--");
        return;
    }
    long long s = (long long)llround(eta_s);
    if (s >= 3600)
        snprintf(buf, cap, "%02lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, cap, "%02lld:%02lld", s / 60, s % 60);
}

void progress_line(char *buf, size_t cap, double fraction, double eta_s, const char *detail)
{
    enum { WIDTH = 24 };
    if (!(fraction >= 0))
        fraction = 0;
    if (fraction > 1)
        fraction = 1;
    char bar[WIDTH + 1], eta[32]; /* room for any long long the compiler can see */
    int filled = (int)(WIDTH * fraction);
    for (int i = 0; i < WIDTH; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[WIDTH] = '\0';
    progress_format_eta(eta, sizeof eta, eta_s);
    /* floor, so 100% means done */
    snprintf(buf, cap, "[%s] %3d%%  ETA %s  %s", bar, (int)floor(100 * fraction), eta,
             detail ? detail : "");
}

int progress_logs_muted(int stderr_is_tty, int verbose)
{
    return stderr_is_tty && !verbose;
}
