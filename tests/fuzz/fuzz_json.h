/* fuzz_json: what the fuzz targets of JSON documents share: the input
 * parsed as the service parses a request body (json_loadb, duplicate keys
 * refused) and handed to the target's checks, and the check that a
 * refusal's field names one of the body's keys. */
#ifndef FUZZ_JSON_H
#define FUZZ_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

/* Parses size bytes at data; a document that parses goes to check (with
 * ctx) and is freed after.  Returns 0, libFuzzer's "go on". */
static inline int fuzz_json_run(const uint8_t *data, size_t size,
                                void (*check)(json_t *doc, void *ctx), void *ctx)
{
    json_error_t jerr;
    json_t *doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc)
        return 0;
    check(doc, ctx);
    json_decref(doc);
    return 0;
}

/* 1 when field, up to its first character of seps (".": a member
 * "energy.min_mev"; "[": an element "metrics[3]"), begins one of body's
 * keys: the key itself, or a key the field's buffer cut short. */
static inline int fuzz_json_names_key(json_t *body, const char *field, const char *seps)
{
    size_t base = strcspn(field, seps);
    const char *key;
    json_t *v;
    int found = 0;
    json_object_foreach(body, key, v) found |= strncmp(key, field, base) == 0;
    return found;
}

#endif
