/* cpu_reduce: column sums (bias gradients) and full reductions (mse, mean,
 * sum of squares).  Reductions accumulate in double, per thread over a fixed
 * static partition, then in thread order: deterministic for a given thread
 * count. */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

/* Partial sums in double: each thread owns part[tid]; summed in order. */
double cpu_reduce_finish(cpu_state *s, int used)
{
    double acc = 0.0;
    for (int i = 0; i < used; i++)
        acc += s->red[i];
    return acc;
}

static int cpu_bias_grad(nn_backend *b, float *db, nn_tensor dy, int accumulate, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = dy.rows, cols = dy.cols;
#pragma omp parallel if (NUMEL(dy) > CPU_PAR_MIN)
    {
        int nt = omp_get_num_threads(), tid = omp_get_thread_num();
        int j0 = (int)((long long)cols * tid / nt), j1 = (int)((long long)cols * (tid + 1) / nt);
        if (!accumulate)
            for (int j = j0; j < j1; j++)
                db[j] = 0.0f;
        for (int i = 0; i < rows; i++) {
            const float *r = ROW(dy, i);
            for (int j = j0; j < j1; j++)
                db[j] += r[j];
        }
    }
    return GT_OK;
}

static int cpu_mse_fwd(nn_backend *b, float *loss, nn_tensor pred, nn_tensor target,
                       gt_error *err)
{
    (void)err;
    cpu_state *s = cpu_st(b);
    int rows = pred.rows, cols = pred.cols, used = 1;
#pragma omp parallel if (NUMEL(pred) > CPU_PAR_MIN) num_threads(s->nthreads)
    {
        int nt = omp_get_num_threads(), tid = omp_get_thread_num();
        int i0 = (int)((long long)rows * tid / nt), i1 = (int)((long long)rows * (tid + 1) / nt);
        double acc = 0.0;
        for (int i = i0; i < i1; i++) {
            const float *p = ROW(pred, i), *t = ROW(target, i);
            float racc = 0.0f;
            for (int j = 0; j < cols; j++) {
                float d = p[j] - t[j];
                racc += d * d;
            }
            acc += racc;
        }
        s->red[tid] = acc;
#pragma omp single
        used = nt;
    }
    *loss = (float)(cpu_reduce_finish(s, used) / ((double)rows * cols));
    return GT_OK;
}

static int cpu_mse_bwd(nn_backend *b, nn_tensor dpred, float dloss, nn_tensor pred,
                       nn_tensor target, int accumulate, gt_error *err)
{
    CPU_UNUSED(b, err);
    int rows = pred.rows, cols = pred.cols;
    float sc = 2.0f * dloss / (float)((double)rows * cols);
    CPU_FOR_ROWS(i, rows, NUMEL(pred)) {
        const float *p = ROW(pred, i), *t = ROW(target, i);
        float *d = ROW(dpred, i);
        for (int j = 0; j < cols; j++) {
            float g = sc * (p[j] - t[j]);
            d[j] = accumulate ? d[j] + g : g;
        }
    }
    return GT_OK;
}

static int cpu_mean_fwd(nn_backend *b, float *out, nn_tensor x, gt_error *err)
{
    CPU_UNUSED(b, err);
    double acc = 0.0;
    for (int i = 0; i < x.rows; i++) {
        const float *r = ROW(x, i);
        for (int j = 0; j < x.cols; j++)
            acc += r[j];
    }
    *out = (float)(acc / ((double)x.rows * x.cols));
    return GT_OK;
}

static int cpu_mean_bwd(nn_backend *b, nn_tensor dx, float dout, int accumulate, gt_error *err)
{
    CPU_UNUSED(b, err);
    float g = dout / (float)((double)dx.rows * dx.cols);
    for (int i = 0; i < dx.rows; i++) {
        float *r = ROW(dx, i);
        for (int j = 0; j < dx.cols; j++)
            r[j] = accumulate ? r[j] + g : g;
    }
    return GT_OK;
}

static int cpu_sumsq(nn_backend *b, float *out, const float *x, size_t n, gt_error *err)
{
    (void)err;
    cpu_state *s = cpu_st(b);
    int used = 1;
#pragma omp parallel if (n > CPU_PAR_MIN) num_threads(s->nthreads)
    {
        int nt = omp_get_num_threads(), tid = omp_get_thread_num();
        size_t i0 = n * (size_t)tid / (size_t)nt, i1 = n * (size_t)(tid + 1) / (size_t)nt;
        double acc = 0.0;
        /* blocks of fp32 partial sums, folded into double */
        for (size_t i = i0; i < i1; i += 4096) {
            size_t e = i + 4096 < i1 ? i + 4096 : i1;
            float part = 0.0f;
            for (size_t j = i; j < e; j++)
                part += x[j] * x[j];
            acc += part;
        }
        s->red[tid] = acc;
#pragma omp single
        used = nt;
    }
    *out = (float)cpu_reduce_finish(s, used);
    return GT_OK;
}

void cpu_reduce_ops(nn_backend_ops *o)
{
    o->bias_grad = cpu_bias_grad;
    o->mse_fwd = cpu_mse_fwd;
    o->mse_bwd = cpu_mse_bwd;
    o->mean_fwd = cpu_mean_fwd;
    o->mean_bwd = cpu_mean_bwd;
    o->sumsq = cpu_sumsq;
}
