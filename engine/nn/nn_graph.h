/* nn_graph: a piece of device work run as a captured graph once its shape
 * has been seen, on a backend whose op table has the graphs family
 * (graph_begin / end / launch / destroy; the CUDA backend).  On a backend
 * without it (the CPU) every call just runs the work.
 *
 * One nn_graph follows one piece of work of one shape: the same function
 * issuing the same ops on the same buffers at every call.  Its states:
 *   unseen: the call runs the work eagerly (which plans its products and
 *           sizes its buffers) and, when it succeeds, marks it seen;
 *   seen:   the call captures the work and launches the capture; a
 *           capture that fails (nothing of it ran) makes it never, and the
 *           call then runs the work eagerly;
 *   ready:  the call launches the capture (a replay);
 *   never:  the call runs the work eagerly, for good.
 * The same ops in the same order either way: the same bytes.  So the work
 * must read every value that changes between calls from backend memory
 * written before the call, read nothing back to the host and allocate
 * nothing once it has been seen.  Work that finds it cannot be captured
 * this time (it had to upload a value) says so with nn_graph_refuse.
 *
 * Both the stage trainer (a training step's device part) and the sampler
 * (one stage's integration per batch shape) run their work through here. */
#ifndef NN_GRAPH_H
#define NN_GRAPH_H

#include "gt_error.h"
#include "nn_backend.h"

typedef enum nn_graph_state {
    NN_GRAPH_UNSEEN = 0,
    NN_GRAPH_SEEN = 1,
    NN_GRAPH_READY = 2,
    NN_GRAPH_NEVER = 3,
} nn_graph_state;

/* Zeroed (memset, calloc, = {0}) is a fresh, unseen graph. */
typedef struct nn_graph {
    nn_graph_state state;
    void *exec;          /* the backend's captured graph while ready */
    long long replays;   /* launches of the capture, the capturing call's
                            included; nn_graph_reset keeps the count */
    int refused;         /* nn_graph_refuse during the current call */
} nn_graph;

/* The work: issues its ops on the backend; ctx is the caller's. */
typedef int (*nn_graph_fn)(void *ctx, gt_error *err);

/* 1 when b's table has the graphs family. */
int nn_graph_supported(const nn_backend *b);

/* Runs fn(ctx) as g's state says (above).  On a backend without graphs:
 * fn(ctx), g untouched. */
int nn_graph_run(nn_backend *b, nn_graph *g, nn_graph_fn fn, void *ctx, gt_error *err);

/* Called by the work during nn_graph_run: this shape is not to be
 * captured (a capture in progress is discarded and the work run eagerly;
 * an eager first run leaves it never). */
void nn_graph_refuse(nn_graph *g);

/* Destroys the capture, if any, and makes g unseen again (the replay count
 * stays).  b is the backend the graph ran on; NULL ok for an unused g. */
void nn_graph_reset(nn_backend *b, nn_graph *g);

#endif
