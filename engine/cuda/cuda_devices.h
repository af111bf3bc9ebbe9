/* cuda_devices: lists CUDA devices through the CUDA runtime API.
 *
 * Plain C (no kernels), so it compiles with the host compiler.  Register it
 * with gt_devices_set_gpu_query(cuda_devices_query) to have gt_devices_query
 * list GPUs after the CPU. */
#ifndef CUDA_DEVICES_H
#define CUDA_DEVICES_H

#include "gt_devices.h"
#include "gt_error.h"

/* Writes up to max devices into out and sets *count.  No driver, no device
 * or a driver too old for this runtime gives *count == 0 and GT_OK: a
 * CPU-only machine is a normal answer.  Any other runtime failure is
 * GT_EDEVICE with the runtime's message.  bf16 = compute capability >= 8.0. */
int cuda_devices_query(gt_device_info *out, int max, int *count, gt_error *err);

/* Memory of device index now (cudaMemGetInfo): used = total - free.  Make
 * it current on the calling thread first, which creates the device's
 * primary context the first time in this process (a few hundred MB of the
 * GPU's memory, and a fraction of a second): register it
 * (gt_devices_set_gpu_memory_query) only where every listed GPU is meant
 * for the service.  GT_EDEVICE with the runtime's message on failure. */
int cuda_devices_memory(int index, size_t *used, size_t *free_bytes, gt_error *err);

#endif
