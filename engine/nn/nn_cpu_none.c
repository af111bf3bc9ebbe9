/* nn_cpu_none.c: stands in for the CPU backend in a build without its
 * libraries (OpenBLAS, oneDNN, OpenMP), e.g. a GPU-only build.  The rest
 * of giant_nn (trunks, optimizer, checkpoints) works on any backend. */
#include "nn_backend.h"

int nn_cpu_backend_create(nn_backend **out, gt_error *err)
{
    if (out)
        *out = NULL;
    return gt_error_set(err, GT_EUNSUPPORTED,
                        "this build has no CPU backend (built without OpenBLAS/oneDNN/OpenMP)");
}

const char *nn_cpu_fixed_kernel(const nn_backend *b, nn_dtype dt)
{
    (void)b;
    (void)dt;
    return NULL;
}
