/* model_backend: opening a backend of the op table by name.
 *
 * The backends are siblings under engine/nn, which knows none of them; this
 * is the level that does: "cpu" is engine/cpu's backend, "cuda:N" engine/
 * cuda's.  A build without one of them (no CUDA toolkit; a GPU-only build
 * without the CPU BLAS libraries) answers GT_EUNSUPPORTED for it, saying
 * why. */
#ifndef MODEL_BACKEND_H
#define MODEL_BACKEND_H

#include "gt_error.h"
#include "nn_backend.h"

/* spec: "cpu" or "cuda:N" (N >= 0; "cuda" means "cuda:0").  A spec of a
 * backend this build lacks is GT_EUNSUPPORTED; anything else GT_EINVAL. */
int model_backend_open(const char *spec, nn_backend **out, gt_error *err);

/* The CPU backend's fixed-order kernel for dt ("avx512", "avx2",
 * "scalar", "avx512bf16"), or NULL when b is not the CPU backend or the
 * build has none (for reports such as /v1/info). */
const char *model_backend_cpu_kernel(const nn_backend *b, nn_dtype dt);

#endif
