/* test_cuda_create: opening the CUDA backend on any machine.  Without a GPU
 * (CI) it checks that "no device" is a clean GT_EUNSUPPORTED with a clear
 * message, never a crash; with one, that the backend describes its device
 * and that the graph API refuses misuse.  Never skipped. */
#include <string.h>

#include "check.h"
#include "cuda_backend.h"
#include "cuda_devices.h"

int main(void)
{
    gt_error err;
    nn_backend *b = (nn_backend *)1;

    /* bad arguments */
    gt_error_clear(&err);
    CHECK_EQ_INT(cuda_backend_create(0, NULL, &err), GT_EINVAL);
    CHECK(strstr(err.message, "out") != NULL);
    CHECK_EQ_INT(cuda_backend_create(-1, &b, &err), GT_EINVAL);
    CHECK(b == NULL);
    CHECK(strstr(err.message, "-1") != NULL);
    CHECK_EQ_INT(cuda_backend_create(-1, &b, NULL), GT_EINVAL);   /* err may be NULL */

    /* the graph API refuses anything that is not a CUDA backend */
    nn_backend fake;
    memset(&fake, 0, sizeof fake);
    cuda_graph *g = (cuda_graph *)1;
    CHECK_EQ_INT(cuda_graph_begin(&fake, &err), GT_EINVAL);
    CHECK_EQ_INT(cuda_graph_begin(NULL, &err), GT_EINVAL);
    CHECK_EQ_INT(cuda_graph_end(&fake, &g, &err), GT_EINVAL);
    CHECK_EQ_INT(cuda_graph_launch(&fake, NULL, &err), GT_EINVAL);
    cuda_graph_destroy(NULL);
    CHECK(!cuda_backend_is(&fake));
    CHECK(cuda_backend_stream(&fake) == NULL);
    CHECK_EQ_INT(cuda_backend_plan_count(&fake), 0);

    gt_device_info devs[8];
    int ndev = -1;
    CHECK_EQ_INT(cuda_devices_query(devs, 8, &ndev, &err), GT_OK);

    int rc = cuda_backend_create(0, &b, &err);
    if (ndev == 0) {
        /* a CPU-only machine: a normal, reported condition */
        CHECK_EQ_INT(rc, GT_EUNSUPPORTED);
        CHECK(b == NULL);
        CHECK_MSG(strncmp(err.message, "no CUDA device", 14) == 0, "message: %s", err.message);
        printf("no device, as expected: %s\n", err.message);
    } else {
        CHECK_EQ_INT(rc, GT_OK);
        if (rc == GT_OK) {
            CHECK(cuda_backend_is(b));
            CHECK(strcmp(b->name, "cuda") == 0);
            CHECK_EQ_INT(b->has_bf16, devs[0].cc_major >= 8);
            CHECK(cuda_backend_stream(b) != NULL);
            /* misuse of the graph API */
            CHECK_EQ_INT(cuda_graph_end(b, &g, &err), GT_EINVAL);       /* not capturing */
            CHECK_EQ_INT(cuda_graph_launch(b, NULL, &err), GT_EINVAL);
            CHECK_EQ_INT(cuda_graph_begin(b, &err), GT_OK);
            CHECK_EQ_INT(cuda_graph_begin(b, &err), GT_EINVAL);         /* nested */
            void *p = NULL;
            CHECK_EQ_INT(b->ops->alloc(b, 64, &p, &err), GT_EINVAL);    /* no alloc in capture */
            CHECK(p == NULL);
            g = NULL;
            CHECK_EQ_INT(cuda_graph_end(b, &g, &err), GT_OK);           /* empty graph */
            if (g) {
                CHECK_EQ_INT(cuda_graph_launch(b, g, &err), GT_OK);
                CHECK_EQ_INT(b->ops->synchronize(b, &err), GT_OK);
            }
            cuda_graph_destroy(g);
            /* alloc bookkeeping and alignment */
            size_t before = b->alloc_count;
            void *q = NULL, *z = NULL;
            CHECK_EQ_INT(b->ops->alloc(b, 1000, &q, &err), GT_OK);
            CHECK_EQ_INT(b->ops->alloc(b, 0, &z, &err), GT_OK);
            CHECK(q && z && q != z);
            CHECK(((size_t)q % 256) == 0);
            CHECK_EQ_INT(b->alloc_count, before + 2);
            CHECK_EQ_INT(b->bytes_live, 1000);
            b->ops->free(b, q);
            b->ops->free(b, z);
            CHECK_EQ_INT(b->bytes_live, 0);
            b->ops->destroy(b);
        }
        CHECK(cuda_backend_create(ndev, &b, &err) == GT_EINVAL);       /* past the last */
        CHECK(strstr(err.message, "does not exist") != NULL);
    }
    return check_finish();
}
