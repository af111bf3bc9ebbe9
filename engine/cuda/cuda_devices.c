#include "cuda_devices.h"

#include <string.h>

#include <cuda_runtime_api.h>

/* Errors that mean "this machine has no usable GPU" rather than "something
 * broke": the service then runs on the CPU and says so in /v1/info. */
static int cuda_error_is_absent(cudaError_t e)
{
    switch (e) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
        return 1;
    default:
        return 0;
    }
}

int cuda_devices_query(gt_device_info *out, int max, int *count, gt_error *err)
{
    if (!out || !count || max < 0)
        return gt_error_set(err, GT_EINVAL, "cuda_devices_query: bad arguments");
    *count = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();   /* reset the runtime's last-error state */
        if (cuda_error_is_absent(e))
            return GT_OK;
        return gt_error_set(err, GT_EDEVICE, "cudaGetDeviceCount: %s (%d)",
                            cudaGetErrorString(e), (int)e);
    }
    for (int i = 0; i < n && *count < max; i++) {
        struct cudaDeviceProp prop;
        e = cudaGetDeviceProperties(&prop, i);
        if (e != cudaSuccess)
            return gt_error_set(err, GT_EDEVICE, "cudaGetDeviceProperties(%d): %s",
                                i, cudaGetErrorString(e));
        gt_device_info *d = &out[*count];
        memset(d, 0, sizeof *d);
        strcpy(d->kind, "cuda");
        d->index = i;
        /* prop.name holds 256 bytes, ours 128: real names are far shorter. */
        size_t len = strnlen(prop.name, sizeof prop.name);
        if (len >= sizeof d->name)
            len = sizeof d->name - 1;
        memcpy(d->name, prop.name, len);
        d->name[len] = '\0';
        d->cc_major = prop.major;
        d->cc_minor = prop.minor;
        d->memory_bytes = prop.totalGlobalMem;
        d->cores = prop.multiProcessorCount;
        d->bf16 = prop.major >= 8;
        (*count)++;
    }
    return GT_OK;
}

int cuda_devices_memory(int index, size_t *used, size_t *free_bytes, gt_error *err)
{
    if (!used || !free_bytes || index < 0)
        return gt_error_set(err, GT_EINVAL, "cuda_devices_memory: bad arguments");
    size_t fr = 0, total = 0;
    cudaError_t e = cudaSetDevice(index);
    if (e == cudaSuccess)
        e = cudaMemGetInfo(&fr, &total);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();   /* leave no sticky error to the next caller */
        return gt_error_set(err, GT_EDEVICE, "cudaMemGetInfo(%d): %s", index,
                            cudaGetErrorString(e));
    }
    *free_bytes = fr;
    *used = total >= fr ? total - fr : 0;
    return GT_OK;
}
