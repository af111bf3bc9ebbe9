/* gt_devices: what the engine can compute on.
 *
 * The CPU is always listed first (index 0).  CUDA devices follow when the
 * build has the CUDA backend and a driver and device are present; a machine
 * without either simply has no CUDA entries, which is not an error.
 *
 * Dependency direction: giant_common is the bottom of the engine and links
 * nothing above it.  The CUDA backend (giant_cuda) depends on giant_common,
 * so gt_devices cannot call it directly without a link cycle.  Instead a
 * GPU query function is registered once at start-up
 * (gt_devices_set_gpu_query(cuda_devices_query)) by whoever initialises the
 * engine; tests register a fake one to exercise the listing without a GPU. */
#ifndef GT_DEVICES_H
#define GT_DEVICES_H

#include <stddef.h>

#include "gt_error.h"

typedef struct gt_device_info {
    char kind[8];          /* "cpu" | "cuda"                                 */
    int index;             /* 0 for the CPU; CUDA ordinal for GPUs            */
    char name[128];        /* CPU model name or CUDA device name              */
    int cc_major, cc_minor;/* CUDA compute capability; 0, 0 for the CPU       */
    size_t memory_bytes;   /* CPU: MemTotal; GPU: global memory               */
    int cores;             /* CPU: online logical cores; GPU: SM count        */
    int bf16;              /* 1 when bf16 matmuls run natively                */
} gt_device_info;

/* Signature of a backend's device lister (see cuda_devices_query). It writes
 * at most max entries, sets *count, and returns GT_OK with *count == 0 when
 * the backend has no usable device. */
typedef int (*gt_devices_query_fn)(gt_device_info *out, int max, int *count,
                                   gt_error *err);

/* Registers (or with NULL, removes) the GPU lister.  Call before any thread
 * calls gt_devices_query; it is a plain global, not synchronised. */
void gt_devices_set_gpu_query(gt_devices_query_fn fn);

/* Lists the CPU, then the registered GPU lister's devices.  out has room for
 * max entries (max >= 1); devices past max are dropped silently. */
int gt_devices_query(gt_device_info *out, int max, int *count, gt_error *err);

/* Memory of one device now, in bytes: used and free.  The CPU's is the
 * host's, from /proc/meminfo (free = MemAvailable, used = MemTotal -
 * MemAvailable): the CPU backend's tensors live there.  A GPU's comes from
 * the registered memory query (cuda_devices_memory); without one, or for a
 * device it cannot read, GT_ENOTFOUND, and the caller reports nothing for
 * that device rather than a made-up zero. */
typedef int (*gt_devices_memory_fn)(int index, size_t *used, size_t *free_bytes,
                                    gt_error *err);
void gt_devices_set_gpu_memory_query(gt_devices_memory_fn fn);
int gt_devices_memory(const gt_device_info *d, size_t *used, size_t *free_bytes,
                      gt_error *err);

/* Fills one entry for the host CPU from /proc/cpuinfo and /proc/meminfo:
 * model name, online cores, MemTotal, bf16 = the avx512_bf16 flag. */
int gt_devices_query_cpu(gt_device_info *out, gt_error *err);

#endif
