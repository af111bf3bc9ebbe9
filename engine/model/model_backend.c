#include "model_backend.h"

#include <stdlib.h>
#include <string.h>

#ifdef GIANT_HAVE_CPU
#include "cpu_backend.h"
#endif
#ifdef GIANT_HAVE_CUDA
#include "cuda_backend.h"
#endif

int model_backend_open(const char *spec, nn_backend **out, gt_error *err)
{
    if (!out)
        return gt_error_set(err, GT_EINVAL, "model_backend_open: NULL out");
    *out = NULL;
    if (!spec)
        return gt_error_set(err, GT_EINVAL, "model_backend_open: NULL device spec");
    if (!strcmp(spec, "cpu")) {
#ifdef GIANT_HAVE_CPU
        return cpu_backend_create(out, err);
#else
        return gt_error_set(err, GT_EUNSUPPORTED,
                            "this build has no CPU backend (built without OpenBLAS, oneDNN "
                            "or OpenMP)");
#endif
    }
    if (!strncmp(spec, "cuda", 4)) {
        int dev = 0;
        if (spec[4] == ':') {
            char *end = NULL;
            long v = strtol(spec + 5, &end, 10);
            if (end == spec + 5 || *end || v < 0 || v > 1024)
                return gt_error_set(err, GT_EINVAL, "bad device '%s' (expected cuda:N)", spec);
            dev = (int)v;
        } else if (spec[4]) {
            return gt_error_set(err, GT_EINVAL, "bad device '%s' (expected cpu or cuda:N)",
                                spec);
        }
#ifdef GIANT_HAVE_CUDA
        return cuda_backend_create(dev, out, err);
#else
        return gt_error_set(err, GT_EUNSUPPORTED,
                            "device '%s' (index %d) requested but this build has no CUDA "
                            "backend (built with GIANT_CUDA=OFF or without nvcc)",
                            spec, dev);
#endif
    }
    return gt_error_set(err, GT_EINVAL, "unknown device '%s' (expected cpu or cuda:N)", spec);
}

const char *model_backend_cpu_kernel(const nn_backend *b, nn_dtype dt)
{
#ifdef GIANT_HAVE_CPU
    return cpu_backend_fixed_kernel(b, dt);
#else
    (void)b;
    (void)dt;
    return NULL;
#endif
}
