/* gt_path: a caller's path is confined to the data directory.  Builds a
 * small tree in a temporary directory: a file inside, a file beside the
 * root, links that stay inside and links that lead out, and checks each
 * answer and that no message names the root's real location. */
#define _DEFAULT_SOURCE   /* mkdtemp, symlink */
#include "check.h"
#include "gt_path.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char top[64], root[128];

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot create %s", path);
    if (f)
        fclose(f);
}

/* rc of gt_path_inside(root, rel), and its message never holds the temp dir */
static int inside(const char *rel, char *real)
{
    gt_error err = {0};
    char buf[PATH_MAX];
    int rc = gt_path_inside(root, rel, real ? real : buf, PATH_MAX, &err);
    CHECK_MSG(rc == GT_OK || !strstr(err.message, top), "'%s': the message names the server's "
              "directory: %s", rel, err.message);
    return rc;
}

int main(void)
{
    snprintf(top, sizeof top, "/tmp/gt_path_XXXXXX");
    if (!mkdtemp(top)) {
        CHECK_MSG(0, "mkdtemp failed");
        return check_finish();
    }
    char p[256], q[256];
    snprintf(root, sizeof root, "%s/data", top);
    CHECK(mkdir(root, 0700) == 0);
    snprintf(p, sizeof p, "%s/sub", root);
    CHECK(mkdir(p, 0700) == 0);
    snprintf(p, sizeof p, "%s/a.h5", root);
    touch(p);
    snprintf(p, sizeof p, "%s/sub/b.h5", root);
    touch(p);
    snprintf(p, sizeof p, "%s/secret.db", top);   /* beside the root */
    touch(p);
    snprintf(q, sizeof q, "%s/out.h5", root);     /* a link out */
    CHECK(symlink(p, q) == 0);
    snprintf(q, sizeof q, "%s/outdir", root);     /* a directory link out */
    CHECK(symlink(top, q) == 0);
    snprintf(q, sizeof q, "%s/in.h5", root);      /* a link that stays inside */
    CHECK(symlink("sub/b.h5", q) == 0);

    /* lexical refusals, before the file system is asked */
    const char *bad[] = {"", "/etc/passwd", "../secret.db", "sub/../a.h5", "./a.h5", "a//b",
                         "sub/", "..", ".", "a\\b", NULL};
    for (int i = 0; bad[i]; i++) {
        gt_error err = {0};
        CHECK_MSG(gt_path_check_relative(bad[i], &err) == GT_EINVAL, "'%s' accepted", bad[i]);
        CHECK_MSG(inside(bad[i], NULL) == GT_EINVAL, "'%s' not refused", bad[i]);
    }
    gt_error err = {0};
    CHECK_EQ_INT(gt_path_check_relative("sub/b.h5", &err), GT_OK);
    CHECK_EQ_INT(gt_path_check_relative("..a.h5", &err), GT_OK);   /* a name, not ".." */

    /* files inside, directly, in a folder and through an inside link */
    char real[PATH_MAX], want[PATH_MAX];
    CHECK_EQ_INT(inside("a.h5", real), GT_OK);
    snprintf(p, sizeof p, "%s/a.h5", root);
    CHECK(realpath(p, want) && strcmp(real, want) == 0);
    CHECK_EQ_INT(inside("sub/b.h5", real), GT_OK);
    CHECK_EQ_INT(inside("in.h5", real), GT_OK);
    snprintf(p, sizeof p, "%s/sub/b.h5", root);
    CHECK(realpath(p, want) && strcmp(real, want) == 0);
    CHECK_EQ_INT(inside("..a.h5", NULL), GT_ENOTFOUND);

    /* links that lead out, and missing files */
    CHECK_EQ_INT(inside("out.h5", NULL), GT_EINVAL);
    CHECK_EQ_INT(inside("outdir/secret.db", NULL), GT_EINVAL);
    CHECK_EQ_INT(inside("missing.h5", NULL), GT_ENOTFOUND);
    CHECK_EQ_INT(inside("a.h5/x", NULL), GT_ENOTFOUND);

    /* a root that does not exist */
    char none[PATH_MAX];
    snprintf(none, sizeof none, "%s/nothing", top);
    CHECK_EQ_INT(gt_path_inside(none, "a.h5", real, sizeof real, &err), GT_EIO);
    /* a real path longer than the caller's buffer */
    CHECK_EQ_INT(gt_path_inside(root, "a.h5", real, 4, &err), GT_EINVAL);

    /* a library's message told in the caller's terms */
    char msg[64];
    snprintf(msg, sizeof msg, "cannot open /srv/d/a.h5: bad; /srv/d/a.h5 again");
    gt_path_scrub(msg, sizeof msg, "/srv/d/a.h5", "a.h5");
    CHECK_MSG(strcmp(msg, "cannot open a.h5: bad; a.h5 again") == 0, "%s", msg);
    snprintf(msg, sizeof msg, "/x/y");
    gt_path_scrub(msg, 3, "/x/y", "a-long-name");   /* truncated to the buffer */
    CHECK_MSG(strcmp(msg, "a-") == 0, "%s", msg);
    snprintf(msg, sizeof msg, "nothing to do");
    gt_path_scrub(msg, sizeof msg, "/x", "y");
    CHECK(strcmp(msg, "nothing to do") == 0);

    /* gt_path_read_all: the whole file, across its growth from 1 MiB; a
     * missing one is GT_EIO naming it. */
    {
        static char big[(1 << 20) + 3];
        for (size_t i = 0; i < sizeof big; i++)
            big[i] = (char)(i * 7);
        snprintf(p, sizeof p, "%s/big.bin", top);
        FILE *f = fopen(p, "wb");
        CHECK(f && fwrite(big, 1, sizeof big, f) == sizeof big);
        if (f)
            fclose(f);
        void *got = NULL;
        size_t len = 0;
        gt_error err = {0};
        CHECK_EQ_INT(gt_path_read_all(p, &got, &len, &err), GT_OK);
        CHECK(len == sizeof big && got && memcmp(got, big, len) == 0);
        free(got);
        snprintf(p, sizeof p, "%s/none.bin", top);
        CHECK_EQ_INT(gt_path_read_all(p, &got, &len, &err), GT_EIO);
        CHECK(strstr(err.message, "none.bin") != NULL);
    }

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
    CHECK(system(cmd) == 0);
    return check_finish();
}
