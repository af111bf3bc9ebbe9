/* gt_error: the one error convention of the engine.
 *
 * Every engine function that can fail returns an int status (GT_OK == 0 on
 * success) and, when given a non-NULL gt_error, fills it with a code and a
 * human-readable message.  Nothing in the engine calls exit() or abort():
 * the caller (a trainer, the server) decides what a failure means. */
#ifndef GT_ERROR_H
#define GT_ERROR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_status {
    GT_OK = 0,
    GT_EINVAL,        /* bad argument: shape, dtype, range, NaN in data      */
    GT_ENOMEM,        /* allocation failed (host or device)                   */
    GT_EIO,           /* file could not be read or written                    */
    GT_EFORMAT,       /* file or buffer has the wrong layout or version       */
    GT_ECHECKSUM,     /* stored checksum does not match the contents          */
    GT_EDEVICE,       /* a device call failed (CUDA, cuBLAS, oneDNN)          */
    GT_EUNSUPPORTED,  /* asked for something this build or device cannot do   */
    GT_ENOTFOUND,     /* a named thing does not exist                         */
    GT_ECANCELLED,    /* work was stopped on request                          */
} gt_status;

typedef struct gt_error {
    int code;              /* a gt_status */
    char message[512];
} gt_error;

/* Fills err (if not NULL) and returns code, so callers can write
 *     return gt_error_set(err, GT_EINVAL, "bad rows %d", rows);            */
int gt_error_set(gt_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes an existing message with context ("loading checkpoint: ..."). */
int gt_error_wrap(gt_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void gt_error_clear(gt_error *err);

/* Evaluates call (an int status) and returns it from the enclosing function
 * when it is not GT_OK, for straight-line code with nothing to release on
 * failure:
 *     GT_TRY(nn_alloc(b, n, &p, err));
 * Code that must free what it holds on failure keeps its `goto fail`.  It
 * lives here, beside the convention it serves, so that every engine file
 * that returns a gt_status already has it. */
#define GT_TRY(call)             \
    do {                         \
        int gt_try_rc_ = (call); \
        if (gt_try_rc_)          \
            return gt_try_rc_;   \
    } while (0)

/* Stable lower-case name of a status, e.g. "invalid_argument". */
const char *gt_status_name(int code);

#ifdef __cplusplus
}
#endif

#endif
