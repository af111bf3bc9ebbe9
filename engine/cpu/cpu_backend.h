/* cpu_backend: the engine's op API (nn_backend.h) on the host CPU.
 *
 * Matrix products on oneDNN (fp32, and bf16 natively on CPUs with
 * AVX512-BF16) or OpenBLAS; the sampler's fixed-order linear layer on the
 * backend's own kernels (cpu_fixed.h); every other op on all cores with
 * OpenMP, its arithmetic from nn_math.h (shared with the CUDA kernels).
 *
 * Environment, read once at creation (benchmarks and tests):
 *   GIANT_CPU_SGEMM=openblas|onednn   fp32 matmul library (default oneDNN)
 *   GIANT_CPU_BF16=native|emulate     bf16 path (default: native when the
 *                                     CPU has AVX512-BF16 and oneDNN builds it)
 *   GIANT_CPU_KERNEL=avx2|scalar      lower the fixed-order kernels' ISA */
#ifndef CPU_BACKEND_H
#define CPU_BACKEND_H

#include "gt_error.h"
#include "nn_backend.h"

int cpu_backend_create(nn_backend **out, gt_error *err);

/* The fixed-order linear kernel of a CPU backend for dtype dt: "avx512",
 * "avx2", "scalar", or for bf16 "avx512bf16" (VDPBF16PS, checked against
 * the emulation at creation); NULL for a backend that is not the CPU's. */
const char *cpu_backend_fixed_kernel(const nn_backend *b, nn_dtype dt);

#endif
