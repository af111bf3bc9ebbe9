/* gt_le: little-endian fields of the engine's byte formats.
 *
 * Checkpoints, statistics blobs and the sample stream are stored
 * little-endian whatever the host, so that a file written on one machine
 * reads on any other.  put writes the value's bytes least significant
 * first at p; get reads them back.  Floats travel as their IEEE-754 bit
 * pattern (memcpy, no conversion), so every value round-trips exactly,
 * NaN payloads included.
 *
 * Header only, static inline: the helpers are a few shifts each, and the
 * compiler folds them into one load or store on a little-endian host.
 * p needs no alignment. */
#ifndef GT_LE_H
#define GT_LE_H

#include <stdint.h>
#include <string.h>

/* The n low bytes of v at p, least significant first: every width below
 * is this with its own n. */
static inline void gt_le_put_bytes(void *p, uint64_t v, int n)
{
    uint8_t *b = p;
    for (int i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t gt_le_get_bytes(const void *p, int n)
{
    const uint8_t *b = p;
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static inline void gt_le_put_u16(void *p, uint16_t v)
{
    gt_le_put_bytes(p, v, 2);
}

static inline uint16_t gt_le_get_u16(const void *p)
{
    return (uint16_t)gt_le_get_bytes(p, 2);
}

static inline void gt_le_put_u32(void *p, uint32_t v)
{
    gt_le_put_bytes(p, v, 4);
}

static inline uint32_t gt_le_get_u32(const void *p)
{
    return (uint32_t)gt_le_get_bytes(p, 4);
}

static inline void gt_le_put_u64(void *p, uint64_t v)
{
    gt_le_put_bytes(p, v, 8);
}

static inline uint64_t gt_le_get_u64(const void *p)
{
    return gt_le_get_bytes(p, 8);
}

/* gt_le_put_f32 / gt_le_get_f32 and gt_le_put_f64 / gt_le_get_f64: a
 * float travels as the unsigned integer of its width that holds its bit
 * pattern. */
#define GT_LE_FLOAT(name, T, U)                                                \
    static inline void gt_le_put_##name(void *p, T f)                          \
    {                                                                          \
        U v;                                                                   \
        memcpy(&v, &f, sizeof v);                                              \
        gt_le_put_bytes(p, v, (int)sizeof v);                                  \
    }                                                                          \
    static inline T gt_le_get_##name(const void *p)                            \
    {                                                                          \
        U v = (U)gt_le_get_bytes(p, (int)sizeof v);                            \
        T f;                                                                   \
        memcpy(&f, &v, sizeof f);                                              \
        return f;                                                              \
    }

GT_LE_FLOAT(f32, float, uint32_t)
GT_LE_FLOAT(f64, double, uint64_t)

#undef GT_LE_FLOAT

#endif
