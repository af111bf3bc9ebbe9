#include "giant_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <strings.h>

#include <curl/curl.h>

#include "gt_le.h"

struct gc_client {
    CURL *curl;
    char base[512];
    char auth[320];            /* "Authorization: Bearer ...", or ""        */
    int retries;
};

int gc_open(gc_client **out, const char *base_url, gt_error *err)
{
    *out = NULL;
    size_t n = strlen(base_url);
    if (n == 0 || n >= 500)
        return gt_error_set(err, GT_EINVAL, "bad server URL '%s'", base_url);
    /* curl_global_init is not thread-safe; call it once per process. */
    static int inited;
    if (!inited) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        inited = 1;
    }
    gc_client *c = calloc(1, sizeof *c);
    if (!c)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    c->curl = curl_easy_init();
    if (!c->curl) {
        free(c);
        return gt_error_set(err, GT_EIO, "curl_easy_init failed");
    }
    snprintf(c->base, sizeof c->base, "%s", base_url);
    c->retries = GC_RETRIES;
    while (n > 0 && c->base[n - 1] == '/')
        c->base[--n] = '\0';
    *out = c;
    return GT_OK;
}

int gc_set_token(gc_client *c, const char *token, gt_error *err)
{
    c->auth[0] = '\0';
    if (!token || !*token)
        return GT_OK;
    for (const char *p = token; *p; p++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
            return gt_error_set(err, GT_EINVAL, "the token has a space or control character");
    if (strlen(token) > sizeof c->auth - 32)
        return gt_error_set(err, GT_EINVAL, "the token is too long");
    snprintf(c->auth, sizeof c->auth, "Authorization: Bearer %s", token);
    return GT_OK;
}

void gc_set_retries(gc_client *c, int retries)
{
    c->retries = retries < 0 ? 0 : retries;
}

void gc_close(gc_client *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->curl);
    free(c);
}

void gc_response_free(gc_response *r)
{
    if (!r)
        return;
    free(r->body);
    memset(r, 0, sizeof *r);
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    gc_response *r = arg;
    size_t bytes = size * n;
    char *p = realloc(r->body, r->len + bytes + 1);
    if (!p)
        return 0;              /* curl reports a write error */
    r->body = p;
    memcpy(r->body + r->len, data, bytes);
    r->len += bytes;
    r->body[r->len] = '\0';
    return bytes;
}

void gc_header_value(const char *line, size_t len, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    if (len <= nl + 1 || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return;
    const char *v = line + nl + 1;
    size_t vl = len - nl - 1;
    while (vl && (*v == ' ' || *v == '\t'))
        v++, vl--;
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n'))
        vl--;
    if (vl >= cap)
        vl = cap - 1;
    memcpy(out, v, vl);
    out[vl] = '\0';
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    gc_response *r = arg;
    size_t len = size * n;
    gc_header_value(data, len, "Content-Type", r->content_type, sizeof r->content_type);
    gc_header_value(data, len, "X-Checksum-SHA256", r->checksum, sizeof r->checksum);
    gc_header_value(data, len, "Retry-After", r->retry_after, sizeof r->retry_after);
    return len;
}

int gc_request(gc_client *c, const char *method, const char *path, const char *content_type,
               const void *body, size_t len, const char *const *headers, gc_response *out,
               gt_error *err)
{
    memset(out, 0, sizeof *out);
    char url[2048];
    snprintf(url, sizeof url, "%s%s", c->base, path);
    struct curl_slist *hl = NULL;
    char ct[160];
    if (content_type) {
        snprintf(ct, sizeof ct, "Content-Type: %s", content_type);
        hl = curl_slist_append(hl, ct);
    }
    hl = curl_slist_append(hl, "Expect:");
    if (c->auth[0])
        hl = curl_slist_append(hl, c->auth);
    for (int i = 0; headers && headers[i]; i++)
        hl = curl_slist_append(hl, headers[i]);
    CURL *h = c->curl;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, out);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    }
    CURLcode cc = curl_easy_perform(h);
    curl_slist_free_all(hl);
    if (cc != CURLE_OK) {
        gc_response_free(out);
        return gt_error_set(err, GT_EIO, "%s %s: %s", method, url, curl_easy_strerror(cc));
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status);
    if (!out->body) {
        out->body = calloc(1, 1);
        if (!out->body)
            return gt_error_set(err, GT_ENOMEM, "out of memory");
    }
    return GT_OK;
}

int gc_check(const gc_response *r, gt_error *err)
{
    if (r->status >= 200 && r->status < 300)
        return GT_OK;
    int code = r->status == 404 ? GT_ENOTFOUND : r->status >= 500 ? GT_EIO : GT_EINVAL;
    json_t *j = json_loadb(r->body ? r->body : "", r->len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    const char *ec = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *field = json_string_value(json_object_get(e, "field"));
    if (ec && msg)
        gt_error_set(err, code, "HTTP %ld %s: %s%s%s%s", r->status, ec, msg,
                     field && *field ? " (field " : "", field && *field ? field : "",
                     field && *field ? ")" : "");
    else
        gt_error_set(err, code, "HTTP %ld", r->status);
    json_decref(j);
    return code;
}

/* gc_request, again after Retry-After seconds (1 to 30) while the reply
 * is a 429 or 503 that has one, at most c->retries times.  Such a reply
 * means the server did not act on the request, so sending it again is
 * safe even for a POST. */
int gc_request_retrying(gc_client *c, const char *method, const char *path,
                        const char *content_type, const void *body, size_t len,
                        const char *const *headers, gc_response *out, gt_error *err)
{
    for (int attempt = 0;; attempt++) {
        int rc = gc_request(c, method, path, content_type, body, len, headers, out, err);
        if (rc)
            return rc;
        int busy = (out->status == 429 || out->status == 503) && out->retry_after[0];
        if (!busy || attempt >= c->retries)
            return GT_OK;
        long s = strtol(out->retry_after, NULL, 10);
        gc_response_free(out);
        struct timespec nap = {s < 1 ? 1 : s > 30 ? 30 : s, 0};
        nanosleep(&nap, NULL);
    }
}

/* A JSON call: request (retried as above), status check, parse. */
static int call_json(gc_client *c, const char *method, const char *path, const char *body,
                     const char *const *headers, json_t **out, gt_error *err)
{
    gc_response r;
    int rc = gc_request_retrying(c, method, path, body ? "application/json" : NULL, body,
                                 body ? strlen(body) : 0, headers, &r, err);
    if (rc)
        return rc;
    if ((rc = gc_check(&r, err))) {
        gc_response_free(&r);
        return rc;
    }
    json_error_t jerr;
    json_t *j = json_loadb(r.body, r.len, 0, &jerr);
    gc_response_free(&r);
    if (!j)
        return gt_error_set(err, GT_EFORMAT, "%s %s: reply is not JSON: %s", method, path,
                            jerr.text);
    if (out)
        *out = j;
    else
        json_decref(j);
    return GT_OK;
}

int gc_submit_run(gc_client *c, const char *config_json, const char *idempotency_key,
                  json_t **out, gt_error *err)
{
    char key[320];
    const char *headers[2] = {NULL, NULL};
    if (idempotency_key) {
        snprintf(key, sizeof key, "Idempotency-Key: %s", idempotency_key);
        headers[0] = key;
    }
    return call_json(c, "POST", "/v1/runs", config_json, headers, out, err);
}

int gc_get_run(gc_client *c, long long id, json_t **out, gt_error *err)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/runs/%lld", id);
    return call_json(c, "GET", path, NULL, NULL, out, err);
}

int gc_list_runs(gc_client *c, const char *status, const char *cursor, int limit, json_t **out,
                 gt_error *err)
{
    char path[512];
    int n = snprintf(path, sizeof path, "/v1/runs?limit=%d", limit > 0 ? limit : 20);
    if (status)
        n += snprintf(path + n, sizeof path - (size_t)n, "&status=%s", status);
    if (cursor)
        snprintf(path + n, sizeof path - (size_t)n, "&cursor=%s", cursor);
    return call_json(c, "GET", path, NULL, NULL, out, err);
}

int gc_cancel_run(gc_client *c, long long id, json_t **out, gt_error *err)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/runs/%lld/cancel", id);
    return call_json(c, "POST", path, NULL, NULL, out, err);
}

int gc_sample(gc_client *c, long long id, const char *body_json, const char *accept,
              gc_response *out, gt_error *err)
{
    char path[64], acc[128];
    snprintf(path, sizeof path, "/v1/runs/%lld/samples", id);
    snprintf(acc, sizeof acc, "Accept: %s", accept ? accept : GC_ACCEPT_JSON);
    const char *headers[] = {acc, NULL};
    int rc = gc_request_retrying(c, "POST", path, "application/json", body_json,
                                 strlen(body_json), headers, out, err);
    if (rc)
        return rc;
    if ((rc = gc_check(out, err)))
        gc_response_free(out);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Server-Sent Events
 * ------------------------------------------------------------------------- */

typedef struct sse_parser {
    gc_event_fn fn;
    void *user;
    char *line;                /* partial line                               */
    size_t len, cap;
    long long id;
    char event[64];
    char *data;                /* data lines of the current event            */
    size_t dlen, dcap;
    int stopped;
    long status;
    char *errbody;             /* body of a non-200 reply                    */
    size_t elen;
} sse_parser;

static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    char *p = realloc(*buf, c);
    if (!p)
        return -1;
    *buf = p;
    *cap = c;
    return 0;
}

static void sse_line(sse_parser *p, char *line)
{
    if (line[0] == '\0') {     /* blank line: dispatch */
        if (p->dlen || p->event[0]) {
            if (p->fn(p->user, p->id, p->event[0] ? p->event : "message", p->data ? p->data : ""))
                p->stopped = 1;
        }
        p->dlen = 0;
        if (p->data)
            p->data[0] = '\0';
        p->event[0] = '\0';
        return;
    }
    if (line[0] == ':')
        return;                /* comment (keep-alive) */
    char *colon = strchr(line, ':');
    const char *value = "";
    if (colon) {
        *colon = '\0';
        value = colon + 1;
        if (*value == ' ')
            value++;
    }
    if (strcmp(line, "id") == 0) {
        p->id = strtoll(value, NULL, 10);
    } else if (strcmp(line, "event") == 0) {
        snprintf(p->event, sizeof p->event, "%s", value);
    } else if (strcmp(line, "data") == 0) {
        size_t vl = strlen(value);
        if (grow(&p->data, &p->dcap, p->dlen + vl + 2) == 0) {
            if (p->dlen)
                p->data[p->dlen++] = '\n';
            memcpy(p->data + p->dlen, value, vl);
            p->dlen += vl;
            p->data[p->dlen] = '\0';
        }
    }
}

static size_t on_sse(char *data, size_t size, size_t n, void *arg)
{
    sse_parser *p = arg;
    size_t bytes = size * n;
    if (p->status != 200) {
        /* An error reply: keep its JSON body for gc_check. */
        char *e = realloc(p->errbody, p->elen + bytes + 1);
        if (!e)
            return 0;
        p->errbody = e;
        memcpy(p->errbody + p->elen, data, bytes);
        p->elen += bytes;
        p->errbody[p->elen] = '\0';
        return bytes;
    }
    for (size_t i = 0; i < bytes && !p->stopped; i++) {
        char ch = data[i];
        if (ch == '\n') {
            if (p->len && p->line[p->len - 1] == '\r')
                p->len--;
            if (grow(&p->line, &p->cap, p->len + 1))
                return 0;
            p->line[p->len] = '\0';
            sse_line(p, p->line);
            p->len = 0;
        } else {
            if (grow(&p->line, &p->cap, p->len + 2))
                return 0;
            p->line[p->len++] = ch;
        }
    }
    return p->stopped ? 0 : bytes;  /* 0 aborts the transfer */
}

static size_t on_sse_header(char *data, size_t size, size_t n, void *arg)
{
    sse_parser *p = arg;
    size_t len = size * n;
    if (len > 9 && strncmp(data, "HTTP/", 5) == 0) {
        const char *sp = memchr(data, ' ', len);
        if (sp)
            p->status = strtol(sp + 1, NULL, 10);
    }
    return len;
}

int gc_watch_events(gc_client *c, long long id, long long last_event_id, gc_event_fn fn,
                    void *user, gt_error *err)
{
    char url[700], last[64];
    snprintf(url, sizeof url, "%s/v1/runs/%lld/events", c->base, id);
    snprintf(last, sizeof last, "Last-Event-ID: %lld", last_event_id);
    struct curl_slist *hl = curl_slist_append(NULL, "Accept: text/event-stream");
    if (last_event_id > 0)
        hl = curl_slist_append(hl, last);
    if (c->auth[0])
        hl = curl_slist_append(hl, c->auth);
    sse_parser p = {.fn = fn, .user = user};
    CURL *h = c->curl;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_sse);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &p);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_sse_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &p);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    CURLcode cc = curl_easy_perform(h);
    curl_slist_free_all(hl);
    int rc = GT_OK;
    if (p.status != 200 && p.status != 0) {
        gc_response r = {.status = p.status, .body = p.errbody, .len = p.elen};
        rc = gc_check(&r, err);
    } else if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && p.stopped)) {
        rc = gt_error_set(err, GT_EIO, "GET %s: %s", url, curl_easy_strerror(cc));
    }
    free(p.line);
    free(p.data);
    free(p.errbody);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Showers: the binary layout
 * ------------------------------------------------------------------------- */

#define SHOWERS_HEAD 20            /* magic, version, n, voxels, layers */

size_t gc_showers_size(int64_t n, int voxels, int layers)
{
    if (n < 0 || voxels < 0 || layers < 0 || (uint64_t)n > UINT32_MAX)
        return 0;
    /* 20 + 4 L + 4 n (1 + V), each step checked: a hostile header must
     * not wrap the length a decoder compares with. */
    size_t rows, per_row, body, head, total;
    if (__builtin_add_overflow((size_t)voxels, (size_t)1, &per_row) ||
        __builtin_mul_overflow((size_t)n, per_row, &rows) ||
        __builtin_mul_overflow(rows, (size_t)4, &body) ||
        __builtin_mul_overflow((size_t)layers, (size_t)4, &head) ||
        __builtin_add_overflow(head, (size_t)SHOWERS_HEAD, &head) ||
        __builtin_add_overflow(body, head, &total))
        return 0;
    return total;
}

/* The sum of the layers' voxels, or -1 when one is negative. */
static long long layer_sum(const int *layer_voxels, int layers)
{
    long long sum = 0;
    for (int l = 0; l < layers; l++) {
        if (layer_voxels[l] < 0)
            return -1;
        sum += layer_voxels[l];
    }
    return sum;
}

int gc_showers_encode(const gc_showers *s, void *out, size_t cap, gt_error *err)
{
    size_t len = gc_showers_size(s->n, s->voxels, s->layers);
    if (len == 0)
        return gt_error_set(err, GT_EINVAL, "showers: %lld x %d voxels over %d layers do not fit"
                            " the layout", (long long)s->n, s->voxels, s->layers);
    if (layer_sum(s->layer_voxels, s->layers) != s->voxels)
        return gt_error_set(err, GT_EINVAL, "showers: the %d layers do not sum to %d voxels",
                            s->layers, s->voxels);
    if (cap < len)
        return gt_error_set(err, GT_EINVAL, "showers: %zu bytes needed, %zu given", len, cap);
    unsigned char *p = out;
    memcpy(p, GC_SHOWERS_MAGIC, 4);
    gt_le_put_u32(p + 4, GC_SHOWERS_VERSION);
    gt_le_put_u32(p + 8, (uint32_t)s->n);
    gt_le_put_u32(p + 12, (uint32_t)s->voxels);
    gt_le_put_u32(p + 16, (uint32_t)s->layers);
    p += SHOWERS_HEAD;
    for (int l = 0; l < s->layers; l++, p += 4)
        gt_le_put_u32(p, (uint32_t)s->layer_voxels[l]);
    for (int64_t i = 0; i < s->n; i++, p += 4)
        gt_le_put_f32(p, s->energies[i]);
    for (int64_t i = 0; i < s->n * s->voxels; i++, p += 4)
        gt_le_put_f32(p, s->showers[i]);
    return GT_OK;
}

int gc_showers_decode(const void *buf, size_t len, gc_showers *out, gt_error *err)
{
    memset(out, 0, sizeof *out);
    const unsigned char *p = buf;
    if (len < SHOWERS_HEAD)
        return gt_error_set(err, GT_EFORMAT, "showers: %zu bytes, shorter than the %d-byte header",
                            len, SHOWERS_HEAD);
    if (memcmp(p, GC_SHOWERS_MAGIC, 4) != 0)
        return gt_error_set(err, GT_EFORMAT, "showers: no \"GSHW\" magic");
    uint32_t version = gt_le_get_u32(p + 4), n = gt_le_get_u32(p + 8);
    uint32_t voxels = gt_le_get_u32(p + 12), layers = gt_le_get_u32(p + 16);
    if (version != GC_SHOWERS_VERSION)
        return gt_error_set(err, GT_EFORMAT, "showers: version %u, this client reads %u", version,
                            GC_SHOWERS_VERSION);
    if (voxels > INT32_MAX || layers > INT32_MAX)
        return gt_error_set(err, GT_EFORMAT, "showers: %u voxels over %u layers is not a shower",
                            voxels, layers);
    size_t want = gc_showers_size(n, (int)voxels, (int)layers);
    if (want == 0)
        return gt_error_set(err, GT_EFORMAT, "showers: %u showers of %u voxels do not fit memory",
                            n, voxels);
    if (len != want)
        return gt_error_set(err, GT_EFORMAT,
                            "showers: %zu bytes, but %u showers of %u voxels over %u layers take"
                            " %zu (%s)",
                            len, n, voxels, layers, want, len < want ? "truncated" : "trailing bytes");
    long long sum = 0;
    for (uint32_t l = 0; l < layers; l++)
        sum += gt_le_get_u32(p + SHOWERS_HEAD + 4 * (size_t)l);
    if (sum != voxels)
        return gt_error_set(err, GT_EFORMAT, "showers: the %u layers hold %lld voxels, not %u",
                            layers, sum, voxels);
    out->n = n;
    out->voxels = (int)voxels;
    out->layers = (int)layers;
    out->layer_voxels = malloc(layers ? 4 * (size_t)layers : 1);
    out->energies = malloc(n ? 4 * (size_t)n : 1);
    out->showers = malloc(n && voxels ? 4 * (size_t)n * voxels : 1);
    if (!out->layer_voxels || !out->energies || !out->showers) {
        gc_showers_free(out);
        return gt_error_set(err, GT_ENOMEM, "showers: out of memory for %u showers", n);
    }
    p += SHOWERS_HEAD;
    for (uint32_t l = 0; l < layers; l++, p += 4)
        out->layer_voxels[l] = (int)gt_le_get_u32(p);
    for (uint32_t i = 0; i < n; i++, p += 4)
        out->energies[i] = gt_le_get_f32(p);
    for (size_t i = 0; i < (size_t)n * voxels; i++, p += 4)
        out->showers[i] = gt_le_get_f32(p);
    return GT_OK;
}

void gc_showers_free(gc_showers *s)
{
    if (!s)
        return;
    free(s->layer_voxels);
    free(s->energies);
    free(s->showers);
    memset(s, 0, sizeof *s);
}
