/* cpu_adamw: the fused AdamW update (nn_adamw_elem) with the bf16 working
 * copy written in the same pass. */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

/* One contiguous run of weights.  restrict and the hyper-parameters in
 * locals let the compiler vectorise the loop: each weight's update is
 * independent and the same arithmetic as nn_adamw_elem (the CUDA kernel's),
 * lane by lane, so the bits do not depend on the vector width. */
static void adamw_run(float *restrict param, float *restrict m, float *restrict v,
                      const float *restrict grad, size_t n, nn_adamw_hp h)
{
    for (size_t i = 0; i < n; i++)
        nn_adamw_elem(&param[i], &m[i], &v[i], grad[i], &h);
}

/* Weights per task: a run's four arrays (64 KiB) stay in L2 while its bf16
 * copy is written. */
#define ADAMW_CHUNK 4096

static int cpu_adamw(nn_backend *b, float *param, uint16_t *param_bf16, const float *grad,
                     float *m, float *v, size_t n, const nn_adamw_hp *hp, const float *sumsq,
                     gt_error *err)
{
    CPU_UNUSED(b, err);
    nn_adamw_hp h = *hp;
    if (sumsq && !nn_adamw_hp_clip(&h, *sumsq))
        return GT_OK;   /* non-finite norm: nothing changes */
    const long long chunks = (long long)((n + ADAMW_CHUNK - 1) / ADAMW_CHUNK);
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
    for (long long c = 0; c < chunks; c++) {
        const size_t lo = (size_t)c * ADAMW_CHUNK;
        const size_t len = n - lo < ADAMW_CHUNK ? n - lo : ADAMW_CHUNK;
        adamw_run(param + lo, m + lo, v + lo, grad + lo, len, h);
        if (param_bf16)
            for (size_t i = lo; i < lo + len; i++)
                param_bf16[i] = nn_bf16_from_f32(param[i]);
    }
    return GT_OK;
}

void cpu_adamw_ops(nn_backend_ops *o)
{
    o->adamw = cpu_adamw;
}
