/* cpu_embed: the sinusoidal embedding of scalar conditions. */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

static int cpu_embed_fwd(nn_backend *b, nn_tensor y, nn_tensor cond, int emb_dim, float scale,
                         float max_period, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = cond.rows, nc = cond.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(y)) {
        const float *cr = ROW(cond, i);
        float *yr = ROW(y, i);
        for (int c = 0; c < nc; c++)
            for (int j = 0; j < emb_dim; j++)
                yr[c * emb_dim + j] = nn_embed_elem(cr[c] * scale, j, emb_dim, max_period);
    }
    return GT_OK;
}

static int cpu_embed_bwd(nn_backend *b, nn_tensor dcond, nn_tensor dy, nn_tensor cond,
                         int emb_dim, float scale, float max_period, int accumulate,
                         gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = cond.rows, nc = cond.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(dy)) {
        const float *cr = ROW(cond, i), *dyr = ROW(dy, i);
        float *dr = ROW(dcond, i);
        for (int c = 0; c < nc; c++) {
            float acc = 0.0f;
            for (int j = 0; j < emb_dim; j++)
                acc += dyr[c * emb_dim + j] *
                       nn_embed_elem_grad(cr[c] * scale, j, emb_dim, max_period);
            acc *= scale;
            dr[c] = accumulate ? dr[c] + acc : acc;
        }
    }
    return GT_OK;
}

void cpu_embed_ops(nn_backend_ops *o)
{
    o->embed_fwd = cpu_embed_fwd;
    o->embed_bwd = cpu_embed_bwd;
}
