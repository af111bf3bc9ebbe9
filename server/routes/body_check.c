/* body_check: the fault of a refused request body (see body_check.h). */
#include "body_check.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int body_refuse(body_fault *f, int status, const char *field, const char *fmt, ...)
{
    f->status = status;
    snprintf(f->field, sizeof f->field, "%s", field);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->message, sizeof f->message, fmt, ap);
    va_end(ap);
    return 0;
}

int body_known_keys(const json_t *cbody, const char *const *keys, body_fault *f,
                    size_t field_size, const char *fmt)
{
    json_t *body = (json_t *)cbody;       /* Jansson's iterators take no const */
    if (!json_is_object(body))
        return body_refuse(f, 422, "", "the body must be an object");
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        size_t i = 0;
        while (keys[i] && strcmp(key, keys[i]))
            i++;
        if (keys[i])
            continue;
        char field[sizeof f->field];
        if (field_size == 0 || field_size > sizeof field)
            field_size = sizeof field;
        snprintf(field, field_size, "%s", key);   /* a long key is cut, not copied whole */
        return body_refuse(f, 422, field, fmt, key);
    }
    return 1;
}
