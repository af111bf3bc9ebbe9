/* cpu_softmax: row softmax (fp32) and its backward. */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

static int cpu_softmax_fwd(nn_backend *b, nn_tensor y, nn_tensor x, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = x.rows, cols = x.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(x))
        nn_softmax_row(ROW(x, i), ROW(y, i), cols);
    return GT_OK;
}

static int cpu_softmax_bwd(nn_backend *b, nn_tensor dx, nn_tensor dy, nn_tensor y,
                           gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = y.rows, cols = y.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(y)) {
        const float *yr = ROW(y, i), *dyr = ROW(dy, i);
        float *dxr = ROW(dx, i);
        float s = 0.0f;
        for (int j = 0; j < cols; j++)
            s += dyr[j] * yr[j];
        for (int j = 0; j < cols; j++)
            dxr[j] = yr[j] * (dyr[j] - s);
    }
    return GT_OK;
}

void cpu_softmax_ops(nn_backend_ops *o)
{
    o->softmax_fwd = cpu_softmax_fwd;
    o->softmax_bwd = cpu_softmax_bwd;
}
