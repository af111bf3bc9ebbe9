/* dist_internal: the implementation table behind dist.h; included by the
 * dist_*.c files only. */
#ifndef DIST_INTERNAL_H
#define DIST_INTERNAL_H

#include "dist.h"

typedef struct dist_ops {
    const char *kind;
    int (*allreduce_sum)(dist_comm *c, float *buf, size_t n, gt_error *err);
    int (*broadcast)(dist_comm *c, void *buf, size_t bytes, int root, gt_error *err);
    int (*barrier)(dist_comm *c, gt_error *err);
    void (*abort)(dist_comm *c);
    void (*destroy)(dist_comm *c); /* frees c */
} dist_ops;

/* The first member of every implementation's struct. */
struct dist_comm {
    const dist_ops *ops;
    nn_backend *b;
    int rank, size;
};

#endif
