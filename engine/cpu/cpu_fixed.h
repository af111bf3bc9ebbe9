/* cpu_fixed: the CPU backend's fixed-order linear layer (sampling).
 *
 *   y[i,j] = act(dot(x[i,:], W[j,:]) + bias[j])   (+ y[i,j] with accumulate)
 *
 * where dot is one fixed sequence of roundings per output element:
 *   fp32: acc = 0; for p = 0 .. k-1:  acc = fma(x[p], w[p], acc)
 *   bf16: acc = 0; for each pair q:   acc = fma(x[2q+1], w[2q+1], acc);
 *                                     acc = fma(x[2q],   w[2q],   acc)
 *         (x[k] = w[k] = 0 when k is odd), with denormal inputs and
 *         results flushed to zero: exactly what AVX512-BF16's VDPBF16PS
 *         computes per Intel's definition (checked against the emulation at
 *         start-up on every CPU that has it).
 * and the epilogue is, in this order: + bias[j]; SiLU as
 * v / (1 + nn_exp_fixed(-v)); + the old y[i,j].
 *
 * The same instructions produce each element whatever the number of rows,
 * the row's position in the batch, or the thread count (rows are handled
 * in blocks whose short last block runs the full block code on copies of
 * its rows; columns come from zero-padded weight panels; threads split rows
 * and columns, never k).  The AVX-512, AVX2 and scalar kernels perform the
 * same roundings in the same order, so the result is also the same on every
 * x86-64 CPU.  That is what makes a sampled shower a function of its own
 * inputs only (see engine/model/README.md, "Reproducible showers").
 *
 * The CPU backend's pack_bytes / pack_weight / linear_fixed ops
 * (cpu_fixed_ops); nothing outside engine/cpu includes this header. */
#ifndef CPU_FIXED_H
#define CPU_FIXED_H

#include <stddef.h>
#include <stdint.h>

#include "nn_backend.h"

/* Kernel instruction sets, lowest first. */
typedef enum cpu_isa {
    CPU_ISA_SCALAR = 0,   /* portable C with fmaf */
    CPU_ISA_AVX2 = 1,     /* AVX2 + FMA, 8 lanes */
    CPU_ISA_AVX512 = 2,   /* AVX-512F, 16 lanes */
} cpu_isa;

typedef struct cpu_fixed {
    cpu_isa isa;          /* the fp32 kernel (and the bf16 emulation) */
    int bf16_native;      /* 1: bf16 through VDPBF16PS */
    int bf16_checked;     /* 1: the CPU has AVX512-BF16 and its VDPBF16PS
                             matched the emulation bit for bit at start-up */
    float *scratch;       /* widened bf16 rows, tail-row copies */
    size_t scratch_n;     /* floats */
} cpu_fixed;

/* Picks the kernels: the best the CPU has, lowered by the environment
 * variable GIANT_CPU_KERNEL=scalar|avx2|avx512 (never raised above what
 * the CPU can run) and, for bf16, by want_bf16_native = 0 (emulation).
 * Runs the VDPBF16PS self-check when native bf16 is possible; a mismatch
 * falls back to the emulation (bf16_checked = 0). */
void cpu_fixed_init(cpu_fixed *f, int want_bf16_native);
void cpu_fixed_free(cpu_fixed *f);

/* "avx512", "avx2" or "scalar"; and for bf16 "avx512bf16" when native. */
const char *cpu_fixed_isa_name(const cpu_fixed *f, nn_dtype dt);

/* Bytes of a packed n x k weight of dtype dt for these kernels. */
size_t cpu_fixed_pack_bytes(const cpu_fixed *f, int n, int k, nn_dtype dt);
/* Layout tag the packed weight records (checked by cpu_fixed_linear). */
int cpu_fixed_layout(const cpu_fixed *f, nn_dtype dt);
/* Packs w (n x k, fp32 or bf16, row-major with ld) into dst. */
void cpu_fixed_pack(const cpu_fixed *f, void *dst, nn_tensor w);

/* y = act(x . W^T + bias) (+ y).  x is m x k of the packed weight's dtype;
 * y is m x n fp32.  Inputs were validated by the nn_* wrapper. */
int cpu_fixed_linear(cpu_fixed *f, nn_tensor y, nn_tensor x, const nn_packed *w,
                     const float *bias, nn_act act, int accumulate, gt_error *err);

#endif
