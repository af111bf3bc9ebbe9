/* giant_client: a small C client of the giant HTTP API, on libcurl.
 *
 *   gc_client *c;
 *   gc_open(&c, "http://127.0.0.1:8080", &err);
 *   json_t *run;
 *   gc_submit_run(c, config_text, NULL, &run, &err);     // POST /v1/runs
 *   gc_watch_events(c, id, 0, on_event, user, &err);     // SSE until the run ends
 *   gc_response r;
 *   gc_sample(c, id, "{\"count\":100,\"seed\":1}", GC_ACCEPT_HDF5, &r, &err);
 *
 * Transport failures and non-2xx replies are errors: err carries the
 * server's error code and message ("not_found: run 9 does not exist") and
 * the return value maps the HTTP status (404 -> GT_ENOTFOUND, 4xx ->
 * GT_EINVAL, 5xx / transport -> GT_EIO).  gc_request gives the raw reply
 * for anything else.  A client handle is not thread-safe: one per thread.
 * Depends on libcurl, Jansson and the engine's gt_error only. */
#ifndef GIANT_CLIENT_H
#define GIANT_CLIENT_H

#include <stddef.h>

#include <jansson.h>

#include "gt_error.h"

#define GC_ACCEPT_JSON   "application/json"
#define GC_ACCEPT_BINARY "application/octet-stream"
#define GC_ACCEPT_HDF5   "application/x-hdf5"

typedef struct gc_client gc_client;

typedef struct gc_response {
    long status;               /* HTTP status                                */
    char *body;                /* malloc'ed, NUL-terminated (also binary)    */
    size_t len;
    char content_type[128];
    char checksum[80];         /* X-Checksum-SHA256, or ""                   */
} gc_response;

/* base_url: "http://host:port" (no trailing path). */
int gc_open(gc_client **out, const char *base_url, gt_error *err);
void gc_close(gc_client *c);

/* One request. headers: NULL or NULL-terminated "Name: value" strings.
 * Any HTTP status is GT_OK here; only transport failures are errors. */
int gc_request(gc_client *c, const char *method, const char *path, const char *content_type,
               const void *body, size_t len, const char *const *headers, gc_response *out,
               gt_error *err);
void gc_response_free(gc_response *r);

/* Fills err from a non-2xx reply and returns its status code mapping. */
int gc_check(const gc_response *r, gt_error *err);

/* Runs. Each *out is a new reference to the reply's JSON. */
int gc_submit_run(gc_client *c, const char *config_json, const char *idempotency_key,
                  json_t **out, gt_error *err);
int gc_get_run(gc_client *c, long long id, json_t **out, gt_error *err);
/* status may be NULL; cursor NULL for the first page; limit 0 = default. */
int gc_list_runs(gc_client *c, const char *status, const char *cursor, int limit, json_t **out,
                 gt_error *err);
int gc_cancel_run(gc_client *c, long long id, json_t **out, gt_error *err);

/* POST /v1/runs/{id}/samples with body (JSON text) and Accept. */
int gc_sample(gc_client *c, long long id, const char *body_json, const char *accept,
              gc_response *out, gt_error *err);

/* Follows GET /v1/runs/{id}/events from last_event_id (0 = the start),
 * calling fn for each event until the stream ends (the run finished or
 * the server stops) or fn returns non-zero. */
typedef int (*gc_event_fn)(void *user, long long id, const char *event, const char *data);
int gc_watch_events(gc_client *c, long long id, long long last_event_id, gc_event_fn fn,
                    void *user, gt_error *err);

#endif
