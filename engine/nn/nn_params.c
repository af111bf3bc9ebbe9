/* nn_params.c: one allocation, a table of named views. */
#include "nn_params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gt_array.h"

void nn_params_init(nn_params *p, nn_backend *b)
{
    memset(p, 0, sizeof *p);
    p->b = b;
}

int nn_params_add(nn_params *p, const char *name, int rows, int cols, int decay, int *index,
                  gt_error *err)
{
    if (!p || !name)
        return gt_error_set(err, GT_EINVAL, "params: NULL argument");
    if (p->value)
        return gt_error_set(err, GT_EINVAL, "params: '%s' declared after allocation", name);
    if (rows <= 0 || cols <= 0)
        return gt_error_set(err, GT_EINVAL, "params: '%s' has shape %dx%d", name, rows, cols);
    if (strlen(name) >= NN_PARAM_NAME_MAX)
        return gt_error_set(err, GT_EINVAL, "params: name '%s' longer than %d", name,
                            NN_PARAM_NAME_MAX - 1);
    if (nn_params_find(p, name) >= 0)
        return gt_error_set(err, GT_EINVAL, "params: duplicate name '%s'", name);
    nn_param_view *views = gt_array_grow(p->views, p->n_views, &p->cap_views, sizeof *views, 32);
    if (!views)
        return gt_error_set(err, GT_ENOMEM, "params: out of memory");
    p->views = views;
    nn_param_view *v = &p->views[p->n_views];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    v->rows = rows;
    v->cols = cols;
    v->decay = decay;
    v->offset = p->count;
    size_t n = (size_t)rows * (size_t)cols;
    p->count += (n + NN_PARAM_ALIGN - 1) / NN_PARAM_ALIGN * NN_PARAM_ALIGN;
    if (index)
        *index = p->n_views;
    p->n_views++;
    return GT_OK;
}

int nn_params_alloc(nn_params *p, int with_bf16, gt_error *err)
{
    if (!p || !p->b)
        return gt_error_set(err, GT_EINVAL, "params: no backend");
    if (p->value)
        return gt_error_set(err, GT_EINVAL, "params: already allocated");
    size_t n = p->count ? p->count : NN_PARAM_ALIGN;
    void *val = NULL, *grad = NULL, *half = NULL;
    int rc;
    if ((rc = nn_alloc(p->b, n * sizeof(float), &val, err)) ||
        (rc = nn_alloc(p->b, n * sizeof(float), &grad, err)) ||
        (with_bf16 && (rc = nn_alloc(p->b, n * sizeof(uint16_t), &half, err))) ||
        (rc = nn_memset(p->b, val, 0, n * sizeof(float), err)) ||
        (rc = nn_memset(p->b, grad, 0, n * sizeof(float), err)) ||
        (half && (rc = nn_memset(p->b, half, 0, n * sizeof(uint16_t), err)))) {
        nn_free(p->b, val);
        nn_free(p->b, grad);
        nn_free(p->b, half);
        return rc;
    }
    p->value = val;
    p->grad = grad;
    p->value_bf16 = half;
    return GT_OK;
}

void nn_params_free(nn_params *p)
{
    if (!p)
        return;
    if (p->b) {
        nn_free(p->b, p->value);
        nn_free(p->b, p->grad);
        nn_free(p->b, p->value_bf16);
    }
    free(p->views);
    nn_backend *b = p->b;
    memset(p, 0, sizeof *p);
    p->b = b;
}

int nn_params_find(const nn_params *p, const char *name)
{
    for (int i = 0; i < p->n_views; i++)
        if (!strcmp(p->views[i].name, name))
            return i;
    return -1;
}

nn_tensor nn_params_value(const nn_params *p, int i)
{
    const nn_param_view *v = &p->views[i];
    return nn_f32(p->value + v->offset, v->rows, v->cols);
}

nn_tensor nn_params_grad(const nn_params *p, int i)
{
    const nn_param_view *v = &p->views[i];
    return nn_f32(p->grad + v->offset, v->rows, v->cols);
}

nn_tensor nn_params_bf16(const nn_params *p, int i)
{
    const nn_param_view *v = &p->views[i];
    return nn_tensor_make(p->value_bf16 ? p->value_bf16 + v->offset : NULL, NN_BF16, v->rows,
                          v->cols);
}

nn_tensor nn_params_matmul(const nn_params *p, int i)
{
    return p->value_bf16 ? nn_params_bf16(p, i) : nn_params_value(p, i);
}

int nn_params_zero_grad(nn_params *p, gt_error *err)
{
    return nn_memset(p->b, p->grad, 0, p->count * sizeof(float), err);
}

int nn_params_sync_bf16(nn_params *p, gt_error *err)
{
    if (!p->value_bf16)
        return GT_OK;
    /* the whole buffer as one row: padding is zero in both copies */
    nn_tensor src = nn_f32(p->value, 1, (int)p->count);
    nn_tensor dst = nn_tensor_make(p->value_bf16, NN_BF16, 1, (int)p->count);
    return nn_cast_bf16(p->b, dst, src, err);
}

size_t nn_params_numel(const nn_params *p)
{
    size_t n = 0;
    for (int i = 0; i < p->n_views; i++)
        n += (size_t)p->views[i].rows * (size_t)p->views[i].cols;
    return n;
}
