/* Opening backends by name (model_backend_open): the CPU backend, a CUDA
 * spec (a device on a GPU machine, a clear error elsewhere or in a build
 * without CUDA), and malformed specs. */
#include "check.h"
#include "model_backend.h"

#include <string.h>

int main(void)
{
    gt_error e;
    nn_backend *x = NULL;
    CHECK_EQ_INT(model_backend_open("tpu", &x, &e), GT_EINVAL);
    CHECK(strstr(e.message, "tpu") != NULL);
    CHECK_EQ_INT(model_backend_open("cuda:x", &x, &e), GT_EINVAL);
    CHECK_EQ_INT(model_backend_open("cuda:-1", &x, &e), GT_EINVAL);
    CHECK_EQ_INT(model_backend_open("cudax", &x, &e), GT_EINVAL);
    CHECK_EQ_INT(model_backend_open(NULL, &x, &e), GT_EINVAL);
    CHECK_EQ_INT(model_backend_open("cpu", NULL, &e), GT_EINVAL);
    CHECK(x == NULL);
#ifdef GIANT_HAVE_CPU
    CHECK_EQ_INT(model_backend_open("cpu", &x, &e), GT_OK);
    CHECK(x && !strcmp(x->name, "cpu"));
    const char *k = model_backend_cpu_kernel(x, NN_F32);
    CHECK(k && (!strcmp(k, "avx512") || !strcmp(k, "avx2") || !strcmp(k, "scalar")));
    nn_backend_close(x);
    x = NULL;
#else
    CHECK_EQ_INT(model_backend_open("cpu", &x, &e), GT_EUNSUPPORTED);
#endif
#ifndef GIANT_HAVE_CUDA
    CHECK_EQ_INT(model_backend_open("cuda:0", &x, &e), GT_EUNSUPPORTED);
    CHECK(strstr(e.message, "CUDA") != NULL);
    CHECK(x == NULL);
#else
    /* a CUDA build: opens on a GPU machine, a clear error elsewhere */
    int rc = model_backend_open("cuda:0", &x, &e);
    CHECK_MSG(rc == GT_OK || rc == GT_EUNSUPPORTED || rc == GT_EDEVICE, "cuda:0 -> %d", rc);
    CHECK(rc == GT_OK ? x != NULL : x == NULL);
    CHECK(model_backend_cpu_kernel(x, NN_F32) == NULL);
    nn_backend_close(x);
#endif
    return check_finish();
}
