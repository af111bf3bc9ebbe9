/* Helpers shared by the data tests: paths to the repository's geometry
 * files and to scratch files in the test's build directory. */
#ifndef DATA_TEST_UTIL_H
#define DATA_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

/* configs/geometry/<name> under GIANT_SOURCE_DIR. */
static inline const char *dt_geometry_path(const char *name)
{
    static char buf[4][1024];
    static int k;
    const char *root = getenv("GIANT_SOURCE_DIR");
    char *out = buf[k++ & 3];
    snprintf(out, 1024, "%s/configs/geometry/%s", root ? root : "../..", name);
    return out;
}

/* Runs a shell command, returns its exit status (-1 when it cannot run). */
static inline int dt_system(const char *cmd)
{
    int rc = system(cmd);
    if (rc == -1)
        return -1;
    return (rc >> 8) & 0xff;
}

/* 1 when Debian's python3 with h5py is available. */
static inline int dt_have_h5py(void)
{
    return dt_system("/usr/bin/python3 -c 'import h5py, numpy' >/dev/null 2>&1") == 0;
}

#endif
