/* nn_trunk_routed: the routed trunk's gate, dispatch and gate-weighted sum
 * over its experts.  Internal to engine/nn; see nn_trunk_internal.h for the
 * layers. */
#ifndef NN_TRUNK_ROUTED_H
#define NN_TRUNK_ROUTED_H

#include "nn_trunk_internal.h"

/* Gate, dispatch, experts, gate-weighted sum over the assembled input
 * t->xin of n rows; and its backward (d_x when want_dx). */
int nn_routed_forward(nn_trunk *t, int n, nn_tensor out, int training, gt_error *err);
int nn_routed_backward(nn_trunk *t, nn_tensor d_out, int want_dx, gt_error *err);

#endif
