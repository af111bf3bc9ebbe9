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
 *
 * With gc_set_token every request carries "Authorization: Bearer <token>".
 * The calls below gc_request (runs, samples) retry a 429 or 503 that has a
 * Retry-After header (the server's rate, queue or memory budget is full and
 * the request was not acted on): they wait that many seconds (1 to 30) and
 * send it again, at most gc_set_retries times (default GC_RETRIES).
 *
 * It also holds the codec of the binary shower layout (gc_showers_*): the
 * service encodes its application/octet-stream replies with it, clients
 * decode them with it, so the layout is written down in one place.
 * Depends on libcurl, Jansson and the engine's gt_error / gt_le only. */
#ifndef GIANT_CLIENT_H
#define GIANT_CLIENT_H

#include <stddef.h>
#include <stdint.h>

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
    char retry_after[16];      /* Retry-After (seconds), or ""               */
} gc_response;

/* base_url: "http://host:port" (no trailing path). */
int gc_open(gc_client **out, const char *base_url, gt_error *err);
void gc_close(gc_client *c);

/* The bearer token every request sends from now on (NULL or "": none).
 * GT_EINVAL for a token with spaces or control characters. */
int gc_set_token(gc_client *c, const char *token, gt_error *err);

/* How many times a 429/503 with Retry-After is retried (0: never). */
#define GC_RETRIES 20
void gc_set_retries(gc_client *c, int retries);

/* One request. headers: NULL or NULL-terminated "Name: value" strings.
 * Any HTTP status is GT_OK here; only transport failures are errors. */
/* The value of header name (case-insensitive) in one raw header line of
 * len bytes ("Retry-After: 5\r\n"), its leading blanks and line end cut,
 * into out[cap] (truncated to fit); out is left as it was when the line is
 * another header. */
void gc_header_value(const char *line, size_t len, const char *name, char *out, size_t cap);

int gc_request(gc_client *c, const char *method, const char *path, const char *content_type,
               const void *body, size_t len, const char *const *headers, gc_response *out,
               gt_error *err);
void gc_response_free(gc_response *r);

/* gc_request, sent again after Retry-After seconds while the reply is a
 * 429 or 503 that has one (at most gc_set_retries times), as the calls
 * below do; any other reply, 2xx or not, is handed back as it came (the
 * caller reads an error's body, e.g. the limit of too_many_showers). */
int gc_request_retrying(gc_client *c, const char *method, const char *path,
                        const char *content_type, const void *body, size_t len,
                        const char *const *headers, gc_response *out, gt_error *err);

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

/* POST /v1/runs/{id}/samples with body (JSON text) and Accept.  A 429 or
 * 503 with Retry-After (the server's memory or rate budget for samples is
 * full) is retried as above: the same request gives the same showers, so a
 * retry is safe. */
#define GC_SAMPLE_RETRIES GC_RETRIES
int gc_sample(gc_client *c, long long id, const char *body_json, const char *accept,
              gc_response *out, gt_error *err);

/* Follows GET /v1/runs/{id}/events from last_event_id (0 = the start),
 * calling fn for each event until the stream ends (the run finished or
 * the server stops) or fn returns non-zero. */
typedef int (*gc_event_fn)(void *user, long long id, const char *event, const char *data);
int gc_watch_events(gc_client *c, long long id, long long last_event_id, gc_event_fn fn,
                    void *user, gt_error *err);

/* ---------------------------------------------------------------------------
 * Showers in the binary layout of api/README.md, every number little-endian:
 *   "GSHW", u32 version (1), u32 n, u32 voxels, u32 layers,
 *   u32 voxels of each layer, f32 energies[n], f32 showers[n][voxels]
 * ------------------------------------------------------------------------- */

#define GC_SHOWERS_MAGIC "GSHW"
#define GC_SHOWERS_VERSION 1u

typedef struct gc_showers {
    int64_t n;                 /* showers                                     */
    int voxels;                /* per shower                                  */
    int layers;                /* of the geometry, with or without voxels     */
    int *layer_voxels;         /* [layers]; they sum to voxels                */
    float *energies;           /* [n] incident energies, MeV                  */
    float *showers;            /* [n * voxels], row-major (shower, voxel), MeV */
} gc_showers;

/* Bytes of the encoding of n showers of `voxels` over `layers` layers:
 * 20 + 4 layers + 4 n + 4 n voxels.  0 when a count is negative or above
 * what a u32 holds, or the total does not fit a size_t. */
size_t gc_showers_size(int64_t n, int voxels, int layers);

/* Writes s into out (cap bytes).  GT_EINVAL when a count is out of range,
 * the layers do not sum to the voxels, or cap is below gc_showers_size. */
int gc_showers_encode(const gc_showers *s, void *out, size_t cap, gt_error *err);

/* Reads an encoding into out, whose arrays are malloc'ed (gc_showers_free).
 * Refuses with GT_EFORMAT, leaving out empty: a buffer too short for its
 * header, another magic or version, layers that do not sum to the voxels,
 * counts beyond an int, or a length other than the header's n, voxels and
 * layers make (truncated, or with trailing bytes). */
int gc_showers_decode(const void *buf, size_t len, gc_showers *out, gt_error *err);

/* Frees what gc_showers_decode allocated and empties s (NULL is fine). */
void gc_showers_free(gc_showers *s);

#endif
