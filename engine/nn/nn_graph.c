/* nn_graph: the graphs family of the op table driven as one state machine
 * (nn_graph.h).  The only caller of the table's graph entries. */
#include "nn_graph.h"

#include <stddef.h>

int nn_graph_supported(const nn_backend *b)
{
    const nn_backend_ops *o = b ? b->ops : NULL;
    return o && o->graph_begin && o->graph_end && o->graph_launch && o->graph_destroy;
}

void nn_graph_refuse(nn_graph *g)
{
    g->refused = 1;
}

void nn_graph_reset(nn_backend *b, nn_graph *g)
{
    if (g->exec && nn_graph_supported(b))
        b->ops->graph_destroy(b, g->exec);
    g->exec = NULL;
    g->state = NN_GRAPH_UNSEEN;
    g->refused = 0;
}

/* The second call: the work captured, then launched.  Nothing of a capture
 * runs, so when it fails (or the work refused it) the work runs eagerly
 * now, with the caller's error. */
static int graph_capture(nn_backend *b, nn_graph *g, nn_graph_fn fn, void *ctx, gt_error *err)
{
    const nn_backend_ops *o = b->ops;
    void *exec = NULL;
    gt_error ignored;
    int rc = o->graph_begin(b, &ignored), rc_end = GT_OK;
    if (!rc) {
        rc = fn(ctx, &ignored);
        /* after an error inside the capture this still ends it */
        rc_end = o->graph_end(b, &exec, &ignored);
    }
    if (rc || rc_end || !exec || g->refused) {
        o->graph_destroy(b, exec);
        g->state = NN_GRAPH_NEVER;
        return fn(ctx, err);
    }
    g->exec = exec;
    g->state = NN_GRAPH_READY;
    g->replays++;
    return o->graph_launch(b, exec, err);
}

int nn_graph_run(nn_backend *b, nn_graph *g, nn_graph_fn fn, void *ctx, gt_error *err)
{
    if (!nn_graph_supported(b) || g->state == NN_GRAPH_NEVER)
        return fn(ctx, err);
    g->refused = 0;
    if (g->state == NN_GRAPH_READY) {
        g->replays++;
        return b->ops->graph_launch(b, g->exec, err);
    }
    if (g->state == NN_GRAPH_SEEN)
        return graph_capture(b, g, fn, ctx, err);
    int rc = fn(ctx, err);
    if (g->refused)
        g->state = NN_GRAPH_NEVER;
    else if (rc == GT_OK)
        g->state = NN_GRAPH_SEEN;
    return rc;
}
