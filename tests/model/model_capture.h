/* model_capture.h: run hooks shared by the model tests (header only).
 *
 * A capture records, per stage (index 1 or 2), the first and last
 * validation loss, the best and the last checkpoint blob, and the router
 * reports of routed trunks; it can stop stage 2 after a given step (to test
 * resuming).  Use capture_init / capture_hooks / capture_free. */
#ifndef MODEL_CAPTURE_H
#define MODEL_CAPTURE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_run.h"

typedef struct capture {
    float first_val[3], last_val[3], best_val[3];
    void *best[3];
    size_t best_len[3];
    void *last[3];
    size_t last_len[3];
    long long stop_at_step2; /* stop stage 2 after this step (0 = never) */
    long long seen_step2;
    /* routed trunks: step reports with router values, and how many of them
     * had per-expert loads summing to batch * top_k with finite losses */
    int router_reports, load_ok;
    int batch, top_k;
} capture;

static int capture_on_val(void *user, int stage, long long step, float v)
{
    capture *c = user;
    (void)step;
    if (isnan(c->first_val[stage]))
        c->first_val[stage] = v;
    c->last_val[stage] = v;
    return 0;
}

static void capture_keep(void **dst, size_t *dst_len, const void *blob, size_t len)
{
    free(*dst);
    *dst = malloc(len);
    memcpy(*dst, blob, len);
    *dst_len = len;
}

static int capture_on_ckpt(void *user, int stage, long long step, float v, const void *blob,
                           size_t len)
{
    capture *c = user;
    (void)step;
    capture_keep(&c->last[stage], &c->last_len[stage], blob, len);
    if (!c->best[stage] || v < c->best_val[stage]) {
        capture_keep(&c->best[stage], &c->best_len[stage], blob, len);
        c->best_val[stage] = v;
    }
    return 0;
}

static int capture_on_step(void *user, const model_step_report *r)
{
    capture *c = user;
    if (r->stage == 2)
        c->seen_step2 = r->step;
    if (r->stage == 2 && r->n_experts > 0) {
        c->router_reports++;
        long long sum = 0;
        for (int e = 0; e < r->n_experts; e++)
            sum += r->load[e];
        c->load_ok += sum == (long long)c->batch * c->top_k && isfinite(r->balance_loss) &&
                      r->balance_loss > 0 && isfinite(r->entropy_loss);
    }
    return 0;
}

static int capture_should_stop(void *user)
{
    capture *c = user;
    return c->stop_at_step2 && c->seen_step2 >= c->stop_at_step2;
}

/* batch and top_k: for the router-load check (0 when not routed). */
static void capture_init(capture *c, int batch, int top_k)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < 3; i++)
        c->first_val[i] = c->last_val[i] = NAN;
    c->batch = batch;
    c->top_k = top_k;
}

/* The hooks for model_run_train; with_stop adds the stage-2 stop. */
static model_run_hooks capture_hooks(capture *c, int with_stop)
{
    model_run_hooks h = {c, capture_on_step, capture_on_val, capture_on_ckpt,
                         with_stop ? capture_should_stop : NULL, NULL};
    return h;
}

static void capture_free(capture *c)
{
    for (int i = 0; i < 3; i++) {
        free(c->best[i]);
        free(c->last[i]);
    }
}

#endif
