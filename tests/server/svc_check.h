/* svc_check: the checks the service tests make on the servers they start,
 * over svc_harness.  Header only, so that its checks count in the test's
 * own check.h tally (svc_harness.c has none). */
#ifndef SVC_CHECK_H
#define SVC_CHECK_H

#include <signal.h>

#include "check.h"
#include "svc_harness.h"

/* svc_start; when the server does not start, its log is printed and a
 * check fails saying "<what> did not start".  0 when it listens. */
static inline int svc_check_start(svc *s, const char *what, const char *db,
                                  const char *data_dir, const char *const *extra)
{
    if (svc_start(s, db, data_dir, extra) == 0)
        return 0;
    svc_dump(s);
    CHECK_MSG(0, "%s did not start", what);
    return -1;
}

/* A client of the started server s, checked to open. */
static inline gc_client *svc_check_client(const svc *s)
{
    gc_client *c = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(gc_open(&c, s->url, &err), GT_OK);
    return c;
}

/* The end of a server: its log printed when any check of the test has
 * failed, then freed. */
static inline void svc_check_done(svc *s)
{
    if (check_failures_)
        svc_dump(s);
    svc_free(s);
}

/* Stops s with SIGTERM, checks that it exits with 0 within 30 s, then as
 * svc_check_done. */
static inline void svc_check_stop(svc *s)
{
    CHECK_EQ_INT(svc_stop(s, SIGTERM, 30000), 0);
    svc_check_done(s);
}

#endif
