#include "model_ckpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gt_le.h"

#define MAGIC "GIANTMDL"
#define HEADER (8 + 4 + 4 + 8 + 4)

int model_ckpt_pack(int stage, long long step, float val_loss, const void *repr,
                    size_t repr_len, const void *weights, size_t weights_len, void **out,
                    size_t *out_len, gt_error *err)
{
    size_t total = HEADER + 8 + repr_len + 8 + weights_len;
    uint8_t *b = malloc(total);
    if (!b)
        return gt_error_set(err, GT_ENOMEM, "out of memory packing a %zu-byte checkpoint", total);
    memcpy(b, MAGIC, 8);
    gt_le_put_u32(b + 8, 1);
    gt_le_put_u32(b + 12, (uint32_t)stage);
    gt_le_put_u64(b + 16, (uint64_t)step);
    gt_le_put_f32(b + 24, val_loss);
    size_t off = HEADER;
    gt_le_put_u64(b + off, repr_len);
    memcpy(b + off + 8, repr, repr_len);
    off += 8 + repr_len;
    gt_le_put_u64(b + off, weights_len);
    memcpy(b + off + 8, weights, weights_len);
    *out = b;
    *out_len = total;
    return GT_OK;
}

int model_ckpt_unpack(const void *buf, size_t len, model_ckpt_view *v, gt_error *err)
{
    const uint8_t *b = buf;
    if (!b || len < HEADER + 16 || memcmp(b, MAGIC, 8) != 0)
        return gt_error_set(err, GT_EFORMAT, "not a giant model checkpoint");
    if (gt_le_get_u32(b + 8) != 1)
        return gt_error_set(err, GT_EFORMAT, "checkpoint version %u, this build reads 1",
                            gt_le_get_u32(b + 8));
    v->stage = (int)gt_le_get_u32(b + 12);
    v->step = (long long)gt_le_get_u64(b + 16);
    v->val_loss = gt_le_get_f32(b + 24);
    if (v->stage != 1 && v->stage != 2)
        return gt_error_set(err, GT_EFORMAT, "checkpoint names stage %d", v->stage);
    size_t off = HEADER;
    uint64_t rl = gt_le_get_u64(b + off);
    if (rl > len - off - 8 - 8)
        return gt_error_set(err, GT_EFORMAT, "checkpoint is truncated");
    v->repr = b + off + 8;
    v->repr_len = (size_t)rl;
    off += 8 + (size_t)rl;
    uint64_t wl = gt_le_get_u64(b + off);
    if (wl != len - off - 8)
        return gt_error_set(err, GT_EFORMAT, "checkpoint is truncated or has trailing bytes");
    v->weights = b + off + 8;
    v->weights_len = (size_t)wl;
    return GT_OK;
}
