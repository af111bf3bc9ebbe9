#define _DEFAULT_SOURCE   /* realpath */
#include "gt_path.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gt_path_check_relative(const char *rel, gt_error *err)
{
    if (!rel || !rel[0])
        return gt_error_set(err, GT_EINVAL, "the path is empty");
    if (rel[0] == '/')
        return gt_error_set(err, GT_EINVAL, "'%.200s' is absolute: name a file inside the data "
                            "directory, relative to it", rel);
    if (strchr(rel, '\\'))
        return gt_error_set(err, GT_EINVAL, "'%.200s' holds a backslash", rel);
    for (const char *p = rel; *p;) {
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return gt_error_set(err, GT_EINVAL, "'%.200s' has a '%.*s' component: name a file "
                                "inside the data directory", rel, (int)n, p);
        p += n + (end ? 1 : 0);
        if (end && !*p)
            return gt_error_set(err, GT_EINVAL, "'%.200s' ends in '/'", rel);
    }
    return GT_OK;
}

int gt_path_inside(const char *root, const char *rel, char *real, size_t cap, gt_error *err)
{
    int rc = gt_path_check_relative(rel, err);
    if (rc)
        return rc;
    char root_real[PATH_MAX], full[PATH_MAX], got[PATH_MAX];
    if (!realpath(root, root_real))
        return gt_error_set(err, GT_EIO, "the data directory cannot be resolved: %s",
                            strerror(errno));
    if ((size_t)snprintf(full, sizeof full, "%s/%s", root_real, rel) >= sizeof full)
        return gt_error_set(err, GT_EINVAL, "'%.200s' is too long", rel);
    if (!realpath(full, got)) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return gt_error_set(err, GT_ENOTFOUND, "no file '%.200s' in the data directory", rel);
        return gt_error_set(err, GT_EINVAL, "'%.200s' cannot be resolved: %s", rel, strerror(e));
    }
    size_t rl = strlen(root_real);
    /* the root "/" itself: everything is inside it */
    int inside = rl == 1 ? got[0] == '/' : strncmp(got, root_real, rl) == 0 && got[rl] == '/';
    if (!inside)
        return gt_error_set(err, GT_EINVAL, "'%.200s' leads out of the data directory", rel);
    if (strlen(got) >= cap)
        return gt_error_set(err, GT_EINVAL, "'%.200s' is too long", rel);
    memcpy(real, got, strlen(got) + 1);
    return GT_OK;
}

void gt_path_scrub(char *msg, size_t cap, const char *real, const char *shown)
{
    size_t rl = strlen(real), sl = strlen(shown);
    if (!rl || cap == 0 || !strstr(msg, real))
        return;
    char out[1024];
    size_t n = 0, room = (cap < sizeof out ? cap : sizeof out) - 1;
    for (const char *p = msg; *p && n < room;) {
        if (strncmp(p, real, rl) == 0) {
            size_t k = sl < room - n ? sl : room - n;
            memcpy(out + n, shown, k);
            n += k;
            p += rl;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    memcpy(msg, out, n + 1);
}

int gt_path_read_all(const char *path, void **out, size_t *len, gt_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return gt_error_set(err, GT_EIO, "cannot open %s: %s", path, strerror(errno));
    int rc = gt_path_read_stream(f, path, out, len, err);
    fclose(f);
    return rc;
}

int gt_path_read_stream(FILE *f, const char *name, void **out, size_t *len, gt_error *err)
{
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap);
    while (b) {
        /* one byte kept for the NUL */
        n += fread(b + n, 1, cap - n - 1, f);
        if (n + 1 < cap)
            break;
        char *grown = realloc(b, cap * 2);
        if (!grown) {
            free(b);
            b = NULL;
            break;
        }
        b = grown;
        cap *= 2;
    }
    if (!b || ferror(f)) {
        int code = b ? GT_EIO : GT_ENOMEM;
        free(b);
        return gt_error_set(err, code, "cannot read %s", name);
    }
    b[n] = '\0';
    *out = b;
    *len = n;
    return GT_OK;
}
