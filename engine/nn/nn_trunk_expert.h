/* nn_trunk_expert: one expert trunk on an assembled input (the expert
 * kind, and each expert of a routed trunk).  Internal to engine/nn; see
 * nn_trunk_internal.h for the layers. */
#ifndef NN_TRUNK_EXPERT_H
#define NN_TRUNK_EXPERT_H

#include "nn_trunk_internal.h"

/* e->x[n, D] (and e->x_bf under bf16) -> out[n, O]; and the backward of the
 * last training forward. */
int nn_expert_forward(nn_trunk *t, expert *e, int n, nn_tensor out, int training,
                      gt_error *err);
int nn_expert_backward(nn_trunk *t, expert *e, nn_tensor d_out, float *dxin, gt_error *err);

#endif
