/* nn_params: all parameters of a model in ONE backend allocation, with a
 * table of named views into it.  The gradient buffer (and the optimizer's
 * moments, see nn_adamw.h) share the same layout, so "zero the gradients",
 * "global gradient norm" and "AdamW update" are single passes over flat
 * buffers, and a checkpoint is the table plus the flat buffers.
 *
 * Use: nn_params_init, nn_params_add for every tensor (planning: offsets
 * only), nn_params_alloc once, then nn_params_value / _grad / _bf16 views. */
#ifndef NN_PARAMS_H
#define NN_PARAMS_H

#include <stddef.h>

#include "gt_error.h"
#include "nn_backend.h"

#define NN_PARAM_NAME_MAX 48
/* View offsets are multiples of this many elements (64 bytes in fp32 and 64
 * bytes in bf16 too), so every view is aligned for vector loads. */
#define NN_PARAM_ALIGN 32

typedef struct nn_param_view {
    char name[NN_PARAM_NAME_MAX];
    int rows, cols;
    size_t offset;        /* in elements, from the start of every buffer */
    int decay;            /* 1: AdamW weight decay applies (matrices) */
} nn_param_view;

typedef struct nn_params {
    nn_backend *b;
    nn_param_view *views;
    int n_views, cap_views;
    size_t count;         /* elements in each buffer, padding included */
    float *value;         /* fp32 master weights (backend memory) */
    float *grad;          /* fp32 gradients, same layout */
    uint16_t *value_bf16; /* bf16 working copy, or NULL (fp32 precision) */
} nn_params;

void nn_params_init(nn_params *p, nn_backend *b);
/* Declares a tensor; *index (may be NULL) receives its view index.  Names
 * must be unique.  Only before nn_params_alloc. */
int nn_params_add(nn_params *p, const char *name, int rows, int cols, int decay, int *index,
                  gt_error *err);
/* Allocates value and grad (and the bf16 copy when with_bf16), zeroed. */
int nn_params_alloc(nn_params *p, int with_bf16, gt_error *err);
void nn_params_free(nn_params *p);

/* Index of a view by name, or -1. */
int nn_params_find(const nn_params *p, const char *name);
nn_tensor nn_params_value(const nn_params *p, int index);
nn_tensor nn_params_grad(const nn_params *p, int index);
/* The bf16 working copy of a view (NN_BF16 tensor); data NULL when none. */
nn_tensor nn_params_bf16(const nn_params *p, int index);
/* The view the matmuls should read: bf16 copy when present, else fp32. */
nn_tensor nn_params_matmul(const nn_params *p, int index);

int nn_params_zero_grad(nn_params *p, gt_error *err);
/* Rewrites the bf16 copy from the fp32 values (after init or load). */
int nn_params_sync_bf16(nn_params *p, gt_error *err);
/* Number of real (unpadded) parameters. */
size_t nn_params_numel(const nn_params *p);

#endif
