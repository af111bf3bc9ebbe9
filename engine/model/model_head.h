/* model_head: the stick-breaking head of a stage-2 WGAN generator.
 *
 * The generator's trunk emits the standardised stage-2 vector
 * x = [x_u ; x_v] (L - 1 stick-breaking logits, then V voxel logits, see
 * model_data.h).  The head maps it to what the critic judges:
 *
 *   h(x) = [ (sb(x_u * std_u + mean_u) - mean_f) / std_f ; x_v ]   width L + V
 *
 * sb is the fp32 stick-breaking product (nn_sb_fwd): the L layer fractions
 * of the shower's deposited energy, which sum to 1 by construction.  They
 * are standardised with their training-split statistics (mean_f, std_f,
 * fitted here) so they weigh like the voxel columns in the critic and in the
 * energy-distance validation.  Real rows go through the same head.
 *
 * The sampler decodes the generator's logits with the same product (in
 * double, prep_stick_join), so a generated shower holds exactly these
 * fractions of E_dep; tests/model/test_model_head.c checks both that and
 * the head's backward against finite differences. */
#ifndef MODEL_HEAD_H
#define MODEL_HEAD_H

#include "gt_error.h"
#include "nn_backend.h"

/* Floor of a layer fraction's std: a layer that almost never sees energy
 * must not turn rounding noise into unit-scale critic inputs. */
#define MODEL_HEAD_STD_FLOOR 1e-3

typedef struct model_head model_head;

/* n_layers L >= 2 and dim = L - 1 + V.  u_mean, u_std [L - 1]: statistics of
 * the unstandardised logits; x_train [n_train, dim] (host): the rows the
 * fraction statistics are fitted on.  Scratch for `batch` rows. */
int model_head_create(nn_backend *b, int n_layers, int dim, const double *u_mean,
                      const double *u_std, const float *x_train, int n_train, int batch,
                      model_head **out, gt_error *err);
void model_head_destroy(model_head *h); /* NULL ok */

/* dim + 1 */
int model_head_width(const model_head *h);

/* One row on the host (the same fp32 arithmetic as the device). */
void model_head_row_host(const model_head *h, const float *x, float *out);

/* The L layer fractions of one row, before standardisation (host). */
void model_head_fractions_host(const model_head *h, const float *x, float *f);

/* out [B, width] = h(x [B, dim]), B <= batch; keeps what backward needs. */
int model_head_forward(model_head *h, nn_tensor x, nn_tensor out, gt_error *err);

/* dx [B, dim] = dL/dx from dout [B, width] = dL/dh of the last forward
 * (dout is overwritten in its first L columns). */
int model_head_backward(model_head *h, nn_tensor dout, nn_tensor dx, gt_error *err);

#endif
