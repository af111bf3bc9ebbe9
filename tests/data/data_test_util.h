/* Helpers shared by the data tests: the repository's geometry files (path
 * and loading), shell commands, the h5py probe, and the synth and eval
 * commands called as the giant binary calls them. */
#ifndef DATA_TEST_UTIL_H
#define DATA_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "geo.h"

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

/* Loads configs/geometry/<name> for a test's main(): 0, or 1 after printing
 * why (the test cannot run without it). */
static inline int dt_load_geometry(geo_geometry *g, const char *name)
{
    gt_error err = {0};
    if (geo_load_file(g, dt_geometry_path(name), &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    return 0;
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

/* The commands (server/cli), for the tests that link their sources. */
int cmd_synth(int argc, char **argv);
int cmd_eval(int argc, char **argv);

/* Calls a command fn with the arguments after it as argv (argv[0] first),
 * stdout flushed first so its output stays in order; its exit status. */
#define RUN(fn, ...)                                                           \
    ({                                                                         \
        char *argv_[] = {__VA_ARGS__, NULL};                                   \
        fflush(stdout);                                                        \
        fn((int)(sizeof argv_ / sizeof argv_[0]) - 1, argv_);                  \
    })

#endif
