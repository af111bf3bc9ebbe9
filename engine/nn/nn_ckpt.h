/* nn_ckpt: a checkpoint as one self-checking byte buffer.
 *
 * Layout (little-endian):
 *   "GIANTNN\0" magic, u32 version (NN_CKPT_VERSION), u32 flags
 *   (1 = optimizer state present, 2 = generator state present),
 *   u32 n_views, u64 numel, then per view: u16 name length, name bytes,
 *   u32 rows, u32 cols; then u64 rng seed/stream/offset, i64 optimizer step;
 *   then per view its values (fp32), then per view m, then per view v (when
 *   flag 1); finally u32 CRC-32 (IEEE, as zlib's crc32) of every byte
 *   before it.
 * Loading checks magic, version, size, checksum, and that the stored table
 * matches the model's (names, order, shapes), naming the first mismatch. */
#ifndef NN_CKPT_H
#define NN_CKPT_H

#include <stddef.h>

#include "gt_error.h"
#include "nn_adamw.h"
#include "nn_params.h"
#include "nn_rng.h"

#define NN_CKPT_VERSION 1u

/* The checksum used (CRC-32/IEEE, identical to zlib's crc32()). */
uint32_t nn_ckpt_crc32(const void *data, size_t n);

/* *buf is malloc'ed; free it with free().  opt and rng may be NULL. */
int nn_ckpt_save(const nn_params *p, const nn_adamw_opt *opt, const nn_rng *rng, void **buf,
                 size_t *len, gt_error *err);
/* Restores into an already created model (and optimizer / rng when not
 * NULL; asking for optimizer state a buffer lacks is GT_EFORMAT).  Rewrites
 * the bf16 working copy.  Nothing is modified when an error is returned. */
int nn_ckpt_load(nn_params *p, nn_adamw_opt *opt, nn_rng *rng, const void *buf, size_t len,
                 gt_error *err);

#endif
