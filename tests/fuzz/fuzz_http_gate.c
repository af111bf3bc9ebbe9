/* fuzz_http_gate: the gate's judgement of a connection's first bytes
 * (http_gate_check), with small limits so that every limit is reached.
 * It must:
 * - never ask for more bytes when told none will come;
 * - refuse with one of the statuses and codes it documents, and a reply
 *   that http_gate_reply formats whole: the status line, and a JSON body
 *   whose error code is the verdict's;
 * - pass only a head that ends (an empty line) within the head limit;
 * - keep a final answer when bytes are appended: the gate judges whatever
 *   prefix has arrived, so a prefix's PASS, REFUSE or DROP (status
 *   included) must be the whole buffer's too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "http_gate.h"

static const http_gate_limits lim = { 64, 256, 8, 8 };

static void check_refusal(const http_gate_verdict *v)
{
    static const struct { unsigned status; const char *code; } known[] = {
        { 400, "bad_request" }, { 413, "body_too_large" }, { 414, "uri_too_long" },
        { 431, "headers_too_large" }, { 505, "version_not_supported" },
    };
    int ok = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        ok |= v->status == known[i].status && v->code && !strcmp(v->code, known[i].code);
    if (!ok || !v->message[0])
        abort();
    char reply[512], line[32];
    size_t len = http_gate_reply(v, reply, sizeof reply);
    snprintf(line, sizeof line, "HTTP/1.1 %u ", v->status);
    const char *body = len ? strstr(reply, "\r\n\r\n") : NULL;
    if (!len || strncmp(reply, line, strlen(line)) != 0 || !body)
        abort();
    json_t *j = json_loads(body + 4, 0, NULL);
    const char *code = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    if (!code || strcmp(code, v->code) != 0)
        abort();
    json_decref(j);
}

static int judge(const char *buf, size_t n, int complete, http_gate_verdict *v)
{
    int rc = http_gate_check(buf, n, complete, &lim, v);
    if (rc < HTTP_GATE_MORE || rc > HTTP_GATE_DROP || (complete && rc == HTTP_GATE_MORE))
        abort();
    if (rc == HTTP_GATE_REFUSE)
        check_refusal(v);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    http_gate_verdict whole, part;
    int rc = judge(buf, size, 0, &whole);
    judge(buf, size, 1, &part);
    if (rc == HTTP_GATE_PASS) {
        /* an empty line ends the head, inside the limit */
        const char *end = NULL;
        for (size_t i = 1; i < size && i < lim.max_head && !end; i++)
            if (buf[i] == '\n' && (buf[i - 1] == '\n' ||
                                   (i >= 2 && buf[i - 1] == '\r' && buf[i - 2] == '\n')))
                end = buf + i;
        if (!end)
            abort();
    }
    size_t prefixes[2] = { size / 2, size ? size - 1 : 0 };
    for (int k = 0; k < 2; k++) {
        if (prefixes[k] >= size)
            continue;
        int pr = judge(buf, prefixes[k], 0, &part);
        if (pr == HTTP_GATE_MORE)
            continue;
        if (pr != rc || (pr == HTTP_GATE_REFUSE && part.status != whole.status))
            abort();
    }
    return 0;
}
