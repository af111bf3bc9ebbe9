#include "gt_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int gt_error_set(gt_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

int gt_error_wrap(gt_error *err, const char *fmt, ...)
{
    if (!err)
        return GT_EINVAL;
    char prefix[256], old[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->message, sizeof old);
    /* Truncation is acceptable: the prefix plus the start of the cause. */
    size_t n = strlen(prefix);
    if (n > sizeof err->message - 3)
        n = sizeof err->message - 3;
    memcpy(err->message, prefix, n);
    memcpy(err->message + n, ": ", 2);
    size_t room = sizeof err->message - n - 3;
    size_t m = strnlen(old, room);
    memcpy(err->message + n + 2, old, m);
    err->message[n + 2 + m] = '\0';
    return err->code;
}

void gt_error_clear(gt_error *err)
{
    if (err) {
        err->code = GT_OK;
        err->message[0] = '\0';
    }
}

const char *gt_status_name(int code)
{
    switch (code) {
    case GT_OK:           return "ok";
    case GT_EINVAL:       return "invalid_argument";
    case GT_ENOMEM:       return "out_of_memory";
    case GT_EIO:          return "io_error";
    case GT_EFORMAT:      return "bad_format";
    case GT_ECHECKSUM:    return "checksum_mismatch";
    case GT_EDEVICE:      return "device_error";
    case GT_EUNSUPPORTED: return "unsupported";
    case GT_ENOTFOUND:    return "not_found";
    case GT_ECANCELLED:   return "cancelled";
    }
    return "unknown";
}
