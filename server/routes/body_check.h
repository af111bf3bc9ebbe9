/* body_check: what the request-body modules (sample_body, eval_body,
 * dataset_body, token_body) share: the fault a refused body is answered
 * with, a refusal formatted into it, and the first check of every body
 * (an object with known keys only) made one way.  No HTTP in it: the
 * routes reply with the fault, and the fuzz targets read it as it is.
 * Depends on Jansson. */
#ifndef GIANT_BODY_CHECK_H
#define GIANT_BODY_CHECK_H

#include <stddef.h>

#include <jansson.h>

typedef struct body_fault {
    int status;                /* 422, or 500 when out of memory            */
    char field[64];            /* the body's key at fault ("" = the body)  */
    char message[256];
} body_fault;

/* Fills f: the status, field (cut to the field's size) and the message
 * printf-formatted (cut likewise).  Returns 0, so that a parser can
 * `return body_refuse(...)`. */
int body_refuse(body_fault *f, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* 1 when body is an object whose every key is one of keys (NULL-terminated),
 * or 0 with f refused 422: a body that is no object (or NULL) with field ""
 * and "the body must be an object", else the first other key in the
 * body's order.  That key's field is the key cut as a copy into field_size
 * bytes would cut it (0, or more than the field holds: the field's own
 * size); its message is fmt with the whole key for its one %s, which fmt
 * cuts with a precision ("unknown field '%.100s'"): each module keeps the
 * wording and the cuts its API has always answered with. */
int body_known_keys(const json_t *body, const char *const *keys, body_fault *f,
                    size_t field_size, const char *fmt);

#endif
