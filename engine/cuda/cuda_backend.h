/* cuda_backend: the engine's op API (nn_backend.h) on an NVIDIA GPU.
 *
 * Plain C interface; the implementation is CUDA C++ (cuda_backend.cu and
 * one .cuh per op family).  Besides the vtable, the GPU needs a few things
 * the CPU does not: CUDA-graph capture and replay of a whole step, and the
 * stream for callers that time work with events.  Those live here and take
 * a backend made by cuda_backend_create (anything else is GT_EINVAL). */
#ifndef CUDA_BACKEND_H
#define CUDA_BACKEND_H

#include "gt_error.h"
#include "nn_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens device `device` (>= 0).  No driver, no device, or a device this
 * build has no kernels for: GT_EUNSUPPORTED with a message that starts
 * "no CUDA device" in the first two cases.  A device index past the last:
 * GT_EINVAL.  The backend works on one stream of its own; every op is
 * asynchronous except copy_d2h / copy_h2d (done when they return) and
 * synchronize.  has_bf16 = compute capability >= 8.0; a bf16 matmul on an
 * older device is GT_EUNSUPPORTED naming the device and its capability. */
int cuda_backend_create(int device, nn_backend **out, gt_error *err);

/* 1 when b was made by cuda_backend_create. */
int cuda_backend_is(const nn_backend *b);

/* The backend's cudaStream_t (as void *, so this header needs no CUDA
 * headers); NULL for another backend. */
void *cuda_backend_stream(nn_backend *b);

/* Matmul plans cached so far, library (cuda_matmul.cuh) and fixed-order
 * (cuda_fixed.cuh) together (tests assert a captured step adds none). */
int cuda_backend_plan_count(nn_backend *b);

/* ---- CUDA graphs ----------------------------------------------------------
 * Run the step once uncaptured (it plans matmuls and allocates nothing the
 * second time), then:
 *     cuda_graph_begin(b);  ... the same ops ...;  cuda_graph_end(b, &g);
 *     cuda_graph_launch(b, g) per step;  cuda_graph_destroy(g);
 * Inside capture: alloc, free, copy_h2d, copy_d2h and an unplanned matmul
 * shape are errors; synchronize is a no-op (the graph orders its work).
 * Kernel arguments are recorded at capture: host scalars (dloss, random
 * seeds and offsets) replay as captured; what changes per step must be in
 * device memory (AdamW's hyper-parameters are: nn_adamw_prepare).
 * After any error inside capture, call cuda_graph_end: it ends the capture,
 * discards the graph and returns the error. */
typedef struct cuda_graph cuda_graph;

int cuda_graph_begin(nn_backend *b, gt_error *err);
int cuda_graph_end(nn_backend *b, cuda_graph **out, gt_error *err);
int cuda_graph_launch(nn_backend *b, cuda_graph *g, gt_error *err);
void cuda_graph_destroy(cuda_graph *g);                  /* NULL ok */

#ifdef __cplusplus
}
#endif

#endif
