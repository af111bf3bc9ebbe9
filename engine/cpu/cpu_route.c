/* cpu_route: the routed trunk's dispatch: top-k, gather and scatter of
 * rows, the gate-weight gradient, and the balance and entropy losses. */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

static int cpu_topk_fwd(nn_backend *b, int32_t *idx, float *w, nn_tensor probs, int k,
                        gt_error *err)
{
    CPU_UNUSED(b, err);
    for (int i = 0; i < probs.rows; i++)
        nn_topk_row(ROW(probs, i), probs.cols, k, idx + (size_t)i * k, w + (size_t)i * k);
    return GT_OK;
}

static int cpu_topk_bwd(nn_backend *b, nn_tensor dprobs, const float *dw, const int32_t *idx,
                        const float *w, nn_tensor probs, int k, int accumulate, gt_error *err)
{
    CPU_UNUSED(b, err);
    for (int i = 0; i < probs.rows; i++)
        nn_topk_bwd_row(ROW(probs, i), idx + (size_t)i * k, w + (size_t)i * k,
                        dw + (size_t)i * k, probs.cols, k, accumulate, ROW(dprobs, i));
    return GT_OK;
}

static int cpu_gather_rows(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                           const float *scale, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = y.rows, cols = y.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(y)) {
        const float *src = ROW(x, idx[i]);
        float *d = ROW(y, i);
        if (scale) {
            float s = scale[i];
            for (int j = 0; j < cols; j++)
                d[j] = s * src[j];
        } else {
            memcpy(d, src, (size_t)cols * sizeof(float));
        }
    }
    return GT_OK;
}

static int cpu_scatter_add_rows(nn_backend *b, nn_tensor y, nn_tensor x, const int32_t *idx,
                                const float *scale, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = x.rows, cols = x.cols;
    /* idx does not repeat within a call, so rows can be split across threads */
    CPU_FOR_ROWS(i, rows, NUMEL(x)) {
        const float *src = ROW(x, i);
        float *d = ROW(y, idx[i]);
        float s = scale ? scale[i] : 1.0f;
        for (int j = 0; j < cols; j++)
            d[j] += s * src[j];
    }
    return GT_OK;
}

static int cpu_gather_dot(nn_backend *b, float *out, nn_tensor a, const int32_t *idx,
                          nn_tensor x, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = x.rows, cols = x.cols;
    CPU_FOR_ROWS(i, rows, NUMEL(x)) {
        const float *ar = ROW(a, idx[i]), *xr = ROW(x, i);
        double acc = 0.0;
        for (int j = 0; j < cols; j++)
            acc += (double)ar[j] * xr[j];
        out[i] = (float)acc;
    }
    return GT_OK;
}

static int cpu_balance_fwd(nn_backend *b, float *loss, nn_tensor probs, const float *frac,
                           gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = probs.rows, E = probs.cols;
    double acc = 0.0;
    for (int e = 0; e < E; e++) {
        double pe = 0.0;
        for (int i = 0; i < rows; i++)
            pe += ROW(probs, i)[e];
        acc += (double)frac[e] * (pe / rows);
    }
    *loss = (float)(E * acc);
    return GT_OK;
}

static int cpu_balance_bwd(nn_backend *b, nn_tensor dprobs, float dloss, const float *frac,
                           gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = dprobs.rows, E = dprobs.cols;
    for (int i = 0; i < rows; i++) {
        float *d = ROW(dprobs, i);
        for (int e = 0; e < E; e++)
            d[e] += dloss * (float)E * frac[e] / (float)rows;
    }
    return GT_OK;
}

static int cpu_entropy_fwd(nn_backend *b, float *loss, nn_tensor probs, gt_error *err)
{
    CPU_UNUSED(b, err);
    double acc = 0.0;
    for (int i = 0; i < probs.rows; i++) {
        const float *p = ROW(probs, i);
        for (int e = 0; e < probs.cols; e++)
            acc += nn_entropy_term(p[e]);
    }
    *loss = (float)(acc / probs.rows);
    return GT_OK;
}

static int cpu_entropy_bwd(nn_backend *b, nn_tensor dprobs, float dloss, nn_tensor probs,
                           gt_error *err)
{
    CPU_UNUSED(b, err);
    float s = dloss / (float)probs.rows;
    for (int i = 0; i < probs.rows; i++) {
        const float *p = ROW(probs, i);
        float *d = ROW(dprobs, i);
        for (int e = 0; e < probs.cols; e++)
            d[e] += s * nn_entropy_grad(p[e]);
    }
    return GT_OK;
}

void cpu_route_ops(nn_backend_ops *o)
{
    o->topk_fwd = cpu_topk_fwd;
    o->topk_bwd = cpu_topk_bwd;
    o->gather_rows = cpu_gather_rows;
    o->scatter_add_rows = cpu_scatter_add_rows;
    o->gather_dot = cpu_gather_dot;
    o->balance_fwd = cpu_balance_fwd;
    o->balance_bwd = cpu_balance_bwd;
    o->entropy_fwd = cpu_entropy_fwd;
    o->entropy_bwd = cpu_entropy_bwd;
}
