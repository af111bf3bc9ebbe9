/* cpu_adamw: the fused AdamW update (nn_adamw_elem) with the bf16 working
 * copy written in the same pass. */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

static int cpu_adamw(nn_backend *b, float *param, uint16_t *param_bf16, const float *grad,
                     float *m, float *v, size_t n, const nn_adamw_hp *hp, gt_error *err)
{
    CPU_UNUSED(b, err);
    nn_adamw_hp h = *hp;
    long long nn = (long long)n;
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
    for (long long i = 0; i < nn; i++) {
        nn_adamw_elem(&param[i], &m[i], &v[i], grad[i], &h);
        if (param_bf16)
            param_bf16[i] = nn_bf16_from_f32(param[i]);
    }
    return GT_OK;
}

void cpu_adamw_ops(nn_backend_ops *o)
{
    o->adamw = cpu_adamw;
}
