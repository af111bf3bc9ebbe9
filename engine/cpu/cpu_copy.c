/* cpu_copy: column-block concatenation and its split; the padding of
 * variable-length rows cleared. */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

static int cpu_concat(nn_backend *b, nn_tensor y, const nn_tensor *parts, int nparts,
                      gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = y.rows;
    CPU_FOR_ROWS(i, rows, NUMEL(y)) {
        float *r = ROW(y, i);
        for (int p = 0; p < nparts; p++) {
            if (parts[p].data)
                memcpy(r, ROW(parts[p], i), (size_t)parts[p].cols * sizeof(float));
            r += parts[p].cols;
        }
    }
    return GT_OK;
}

static int cpu_split(nn_backend *b, nn_tensor *parts, int nparts, nn_tensor y, int accumulate,
                     gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = y.rows;
    CPU_FOR_ROWS(i, rows, NUMEL(y)) {
        const float *r = ROW(y, i);
        for (int p = 0; p < nparts; p++) {
            int pc = parts[p].cols;
            if (parts[p].data) {
                float *d = ROW(parts[p], i);
                if (accumulate)
                    for (int j = 0; j < pc; j++)
                        d[j] += r[j];
                else
                    memcpy(d, r, (size_t)pc * sizeof(float));
            }
            r += pc;
        }
    }
    return GT_OK;
}

static int cpu_zero_outside(nn_backend *b, nn_tensor x, const int32_t *valid, int n_valid,
                            const int32_t *idx, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = x.rows, cols = x.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(x)) {
        int k = idx ? idx[i] : i;
        if (k < 0 || k >= n_valid)
            continue;
        int lo = valid[2 * k] < 0 ? 0 : valid[2 * k] > cols ? cols : valid[2 * k];
        int hi = valid[2 * k + 1] < lo ? lo : valid[2 * k + 1] > cols ? cols : valid[2 * k + 1];
        float *r = ROW(x, i);
        memset(r, 0, (size_t)lo * sizeof(float));
        memset(r + hi, 0, (size_t)(cols - hi) * sizeof(float));
    }
    return GT_OK;
}

void cpu_copy_ops(nn_backend_ops *o)
{
    o->concat = cpu_concat;
    o->split = cpu_split;
    o->zero_outside = cpu_zero_outside;
}
