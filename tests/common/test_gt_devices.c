/* gt_devices: the CPU is always listed; a registered GPU lister's devices
 * follow; a failing lister's error is reported; a machine without a CUDA
 * driver or device lists none, without error; device memory (the host's for
 * the CPU, a GPU's through its registered query). */
#include "check.h"

#include <stdio.h>
#include <string.h>

#include "gt_devices.h"
#ifdef GIANT_HAVE_CUDA
#include "cuda_devices.h"
#endif

static int fake_two(gt_device_info *out, int max, int *count, gt_error *err)
{
    (void)err;
    *count = 0;
    for (int i = 0; i < 2 && i < max; i++) {
        memset(&out[i], 0, sizeof out[i]);
        strcpy(out[i].kind, "cuda");
        out[i].index = i;
        strcpy(out[i].name, "Fake GPU");
        out[i].cc_major = 9;
        out[i].memory_bytes = (size_t)1 << 30;
        out[i].bf16 = 1;
        (*count)++;
    }
    return GT_OK;
}

static int fake_broken(gt_device_info *out, int max, int *count, gt_error *err)
{
    (void)out;
    (void)max;
    *count = 0;
    return gt_error_set(err, GT_EDEVICE, "driver exploded");
}

static int fake_liar(gt_device_info *out, int max, int *count, gt_error *err)
{
    (void)out;
    (void)err;
    *count = max + 5;
    return GT_OK;
}

static int fake_memory(int index, size_t *used, size_t *free_bytes, gt_error *err)
{
    if (index == 1)
        return gt_error_set(err, GT_EDEVICE, "no such device");
    *used = (size_t)3 << 20;
    *free_bytes = (size_t)(1021 - index) << 20;
    return GT_OK;
}

/* Device memory: the CPU's is the host's (used + free = MemTotal, both
 * above zero); a GPU's only through the registered query (GT_ENOTFOUND
 * without one, the query's error for a device it cannot read). */
static void test_memory(void)
{
    gt_device_info cpu, gpu = {.kind = "cuda", .index = 0};
    gt_error err = {0};
    size_t used = 0, avail = 0;
    CHECK_EQ_INT(gt_devices_query_cpu(&cpu, &err), GT_OK);
    CHECK_EQ_INT(gt_devices_memory(&cpu, &used, &avail, &err), GT_OK);
    CHECK(used > 0 && avail > 0);
    CHECK(used + avail == cpu.memory_bytes);
    CHECK_EQ_INT(gt_devices_memory(&cpu, NULL, &avail, &err), GT_EINVAL);
    gt_devices_set_gpu_memory_query(NULL);
    CHECK_EQ_INT(gt_devices_memory(&gpu, &used, &avail, &err), GT_ENOTFOUND);
    gt_devices_set_gpu_memory_query(fake_memory);
    CHECK_EQ_INT(gt_devices_memory(&gpu, &used, &avail, &err), GT_OK);
    CHECK(used == (size_t)3 << 20 && avail == (size_t)1021 << 20);
    gpu.index = 1;
    CHECK_EQ_INT(gt_devices_memory(&gpu, &used, &avail, &err), GT_EDEVICE);
    gt_devices_set_gpu_memory_query(NULL);
#ifdef GIANT_HAVE_CUDA
    /* each GPU this machine has: used + free is its global memory */
    gt_device_info d[8];
    int n = 0;
    gt_devices_set_gpu_query(cuda_devices_query);
    gt_devices_set_gpu_memory_query(cuda_devices_memory);
    if (gt_devices_query(d, 8, &n, &err) == GT_OK)
        for (int i = 1; i < n; i++) {
            int rc = gt_devices_memory(&d[i], &used, &avail, &err);
            CHECK_MSG(rc == GT_OK, "cuda:%d: %s", d[i].index, err.message);
            CHECK(rc != GT_OK || used + avail == d[i].memory_bytes);
            printf("cuda:%d memory used %zu MiB, free %zu MiB\n", d[i].index, used >> 20,
                   avail >> 20);
        }
    CHECK_EQ_INT(cuda_devices_memory(-1, &used, &avail, &err), GT_EINVAL);
    gt_devices_set_gpu_memory_query(NULL);
    gt_devices_set_gpu_query(NULL);
#endif
}

int main(void)
{
    test_memory();
    gt_device_info d[8];
    gt_error err = { 0 };
    int n = -1;

    gt_devices_set_gpu_query(NULL);
    CHECK_EQ_INT(gt_devices_query(d, 8, &n, &err), GT_OK);
    CHECK_EQ_INT(n, 1);
    CHECK(strcmp(d[0].kind, "cpu") == 0);
    CHECK_EQ_INT(d[0].index, 0);
    CHECK(strlen(d[0].name) > 0);
    CHECK(d[0].cores >= 1);
    CHECK(d[0].memory_bytes > 0);
    CHECK(d[0].bf16 == 0 || d[0].bf16 == 1);
    CHECK_EQ_INT(d[0].cc_major, 0);

    gt_devices_set_gpu_query(fake_two);
    CHECK_EQ_INT(gt_devices_query(d, 8, &n, &err), GT_OK);
    CHECK_EQ_INT(n, 3);
    CHECK(strcmp(d[0].kind, "cpu") == 0);
    CHECK(strcmp(d[1].kind, "cuda") == 0 && d[1].index == 0);
    CHECK(strcmp(d[2].kind, "cuda") == 0 && d[2].index == 1);
    CHECK_EQ_INT(gt_devices_query(d, 2, &n, &err), GT_OK);   /* room for one GPU */
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(gt_devices_query(d, 1, &n, &err), GT_OK);   /* CPU only */
    CHECK_EQ_INT(n, 1);

    gt_devices_set_gpu_query(fake_broken);
    CHECK_EQ_INT(gt_devices_query(d, 8, &n, &err), GT_EDEVICE);
    CHECK(strstr(err.message, "driver exploded") != NULL);
    gt_devices_set_gpu_query(fake_liar);
    CHECK_EQ_INT(gt_devices_query(d, 8, &n, &err), GT_EDEVICE);

    CHECK_EQ_INT(gt_devices_query(d, 0, &n, &err), GT_EINVAL);
    CHECK_EQ_INT(gt_devices_query(NULL, 8, &n, &err), GT_EINVAL);
    CHECK_EQ_INT(gt_devices_query(d, 8, NULL, &err), GT_EINVAL);
    CHECK_EQ_INT(gt_devices_query_cpu(NULL, &err), GT_EINVAL);

#ifdef GIANT_HAVE_CUDA
    /* Real CUDA: GT_OK whether or not this machine has a GPU and driver. */
    gt_devices_set_gpu_query(cuda_devices_query);
    int rc = gt_devices_query(d, 8, &n, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    CHECK(n >= 1);
    for (int i = 1; i < n; i++) {
        CHECK(strcmp(d[i].kind, "cuda") == 0);
        CHECK(d[i].cc_major >= 1 && d[i].memory_bytes > 0 && d[i].cores > 0);
        CHECK_EQ_INT(d[i].bf16, d[i].cc_major >= 8);
        printf("cuda:%d %s cc %d.%d %zu MiB %d SMs bf16 %d\n", d[i].index, d[i].name,
               d[i].cc_major, d[i].cc_minor, d[i].memory_bytes >> 20, d[i].cores, d[i].bf16);
    }
    printf("devices listed: %d (CUDA ones: %d)\n", n, n - 1);
    CHECK_EQ_INT(cuda_devices_query(NULL, 1, &n, &err), GT_EINVAL);
#endif
    gt_devices_set_gpu_query(NULL);
    return check_finish();
}
