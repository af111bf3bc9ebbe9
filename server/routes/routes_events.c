/* routes_events: GET /v1/runs/{id}/events, a run's events as Server-Sent
 * Events read from run_events (runs_events_after).  Contracts:
 * api/openapi.json; how the stream holds its pool thread: server/README.md. */
#include "routes_handlers.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "evaluations.h"
#include "gt_array.h"
#include "routes_common.h"
#include "runs.h"

/* ---------------------------------------------------------------------------
 * GET /v1/runs/{id}/events: Server-Sent Events from run_events
 * ------------------------------------------------------------------------- */

#define SSE_KEEPALIVE_MS 250
#define SSE_NAP_MS 25

typedef struct sse {
    app *a;
    int64_t run;
    int64_t last;              /* last event id sent                        */
    char *pending;             /* formatted text not yet handed over        */
    size_t len, off, cap;
    int ended;                 /* the run finished and all was sent         */
} sse;

static void sse_free(void *user)
{
    sse *s = user;
    free(s->pending);
    free(s);
}

static void sse_append(sse *s, const char *text, size_t n)
{
    if (gt_array_reserve(&s->pending, &s->cap, s->len + n, 8192) != 0)
        return;                /* dropped; the client resumes by id */
    memcpy(s->pending + s->len, text, n);
    s->len += n;
}

/* Reads the next events into pending; returns how many. */
static int sse_fetch(sse *s)
{
    json_t *events = NULL;
    if (runs_events_after(s->a->db, s->run, s->last, 64, &events, NULL) != GT_OK)
        return 0;
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        char head[128];
        s->last = json_integer_value(json_object_get(e, "id"));
        int k = snprintf(head, sizeof head, "id: %lld\nevent: %s\ndata: ", (long long)s->last,
                         json_string_value(json_object_get(e, "kind")));
        sse_append(s, head, (size_t)k);
        /* null only for text that is not UTF-8 (an error message cut
         * inside a character): an empty object rather than a crash */
        const char *data = json_string_value(json_object_get(e, "data"));
        if (!data)
            data = "{}";
        sse_append(s, data, strlen(data));
        sse_append(s, "\n\n", 2);
    }
    int n = (int)json_array_size(events);
    json_decref(events);
    return n;
}

/* Finished: the run ended and none of its evaluations is queued or
 * running (their "evaluation" events come after the run's end). */
static int run_finished(store *db, int64_t run)
{
    char st[16] = "";
    if (runs_status(db, run, st, NULL) != GT_OK)
        return 1;
    return (strcmp(st, "succeeded") == 0 || strcmp(st, "failed") == 0 ||
            strcmp(st, "cancelled") == 0) &&
           evaluations_active(db, run) == 0;
}

/* Never returns 0 (nothing ready): it naps in short steps instead and
 * sends a keep-alive comment when nothing happened for a while, so the
 * connection is never left waiting on a poll MHD might not repeat. */
static long sse_read(void *user, char *buf, size_t max)
{
    sse *s = user;
    for (int waited = 0;; waited += SSE_NAP_MS) {
        if (s->off < s->len) {
            size_t n = s->len - s->off < max ? s->len - s->off : max;
            memcpy(buf, s->pending + s->off, n);
            s->off += n;
            if (s->off == s->len)
                s->off = s->len = 0;
            return (long)n;
        }
        if (s->ended || atomic_load(&s->a->stopping))
            return -1;
        /* Finished is read before fetching, so events written just before
         * the final status are never lost. */
        int finished = run_finished(s->a->db, s->run);
        if (sse_fetch(s) > 0)
            continue;
        if (finished) {
            s->ended = 1;
            return -1;
        }
        if (waited >= SSE_KEEPALIVE_MS) {
            static const char ka[] = ": keep-alive\n\n";
            if (max < sizeof ka - 1)
                return -1;
            memcpy(buf, ka, sizeof ka - 1);
            return (long)(sizeof ka - 1);
        }
        struct timespec ts = {0, SSE_NAP_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

void route_runs_events(http_request *req, void *ctx)
{
    app *a = ctx;
    int64_t id = routes_path_run(req, a->db);
    if (!id)
        return;
    const char *last = http_header(req, "Last-Event-ID");
    if (!last)
        last = http_query(req, "last_event_id");
    int64_t from = 0;
    if (last && *last) {
        from = routes_parse_id(last);
        if (from == 0 && strcmp(last, "0") != 0) {
            http_reply_error(req, 422, HTTP_E_VALIDATION, "Last-Event-ID",
                             "Last-Event-ID must be an event id");
            return;
        }
    }
    sse *s = calloc(1, sizeof *s);
    if (!s) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "out of memory");
        return;
    }
    s->a = a;
    s->run = id;
    s->last = from;
    sse_append(s, "retry: 1000\n\n", 13);
    static const char *const headers[] = {"Cache-Control", "no-cache", NULL};
    http_reply_stream(req, 200, "text/event-stream", sse_read, s, sse_free, headers);
}
