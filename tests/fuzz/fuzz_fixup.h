/* fuzz_fixup: checksums a fuzz harness writes again into a mutated input,
 * so that the fuzzer reaches the values behind them (a file made on
 * purpose carries right checksums over any bytes). */
#ifndef FUZZ_FIXUP_H
#define FUZZ_FIXUP_H

#include <stddef.h>
#include <stdint.h>

#include "gt_le.h"
#include "nn_ckpt.h"

/* prep.c's checksum of a statistics blob (FNV-1a, 64 bits). */
static inline uint64_t fuzz_fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The fitted transforms (model_data.c): an 8-byte header, then three
 * blocks of u64 length + statistics blob, each blob ending in its
 * checksum, which is rewritten where the lengths allow (version 2 then
 * has an f64 readout threshold, which has no checksum). */
static inline void fuzz_fix_repr(uint8_t *b, size_t len)
{
    size_t off = 8;
    for (int i = 0; i < 3 && len >= off + 8; i++) {
        uint64_t n = gt_le_get_u64(b + off);
        if (n < 16 || n > len - off - 8)
            return;
        uint8_t *blob = b + off + 8;
        gt_le_put_u64(blob + n - 8, fuzz_fnv1a(blob, (size_t)n - 8));
        off += 8 + (size_t)n;
    }
}

/* A stage checkpoint (model_ckpt.h): the transforms start at byte 36 after
 * their u64 length at 28. */
static inline void fuzz_fix_ckpt(uint8_t *b, size_t len)
{
    if (len < 36)
        return;
    uint64_t rl = gt_le_get_u64(b + 28);
    if (rl <= len - 36)
        fuzz_fix_repr(b + 36, (size_t)rl);
}

/* An acceptance test's blob (model_accept.h): a CRC-32 of every byte
 * before it in its last four. */
static inline void fuzz_fix_accept(uint8_t *b, size_t len)
{
    if (len >= 4)
        gt_le_put_u32(b + len - 4, nn_ckpt_crc32(b, len - 4));
}

#endif
