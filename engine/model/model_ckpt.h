/* model_ckpt: one stage's checkpoint as stored by a run.
 *
 *   "GIANTMDL" | u32 version 1 | u32 stage | u64 step | f32 val_loss |
 *   u64 repr length | repr (model_data: fitted transforms) |
 *   u64 weights length | nn_ckpt buffer (weights, optimizer, generator)
 *
 * Each stage checkpoint carries the fitted transforms, so the best stage-1
 * and stage-2 checkpoints of a run are all a sampler needs besides the run
 * config; the inner blocks carry their own checksums (crc32 for the
 * weights, FNV-1a for the statistics). */
#ifndef MODEL_CKPT_H
#define MODEL_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "gt_error.h"

typedef struct model_ckpt_view {
    int stage;
    long long step;
    float val_loss;
    const uint8_t *repr;
    size_t repr_len;
    const uint8_t *weights;
    size_t weights_len;
} model_ckpt_view;

/* *out is malloc'ed. */
int model_ckpt_pack(int stage, long long step, float val_loss, const void *repr,
                    size_t repr_len, const void *weights, size_t weights_len, void **out,
                    size_t *out_len, gt_error *err);
/* Points into buf (no copy); checks the header and lengths. */
int model_ckpt_unpack(const void *buf, size_t len, model_ckpt_view *v, gt_error *err);

#endif
