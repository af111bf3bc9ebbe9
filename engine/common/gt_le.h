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

static inline void gt_le_put_u16(void *p, uint16_t v)
{
    uint8_t *b = p;
    for (int i = 0; i < 2; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t gt_le_get_u16(const void *p)
{
    const uint8_t *b = p;
    return (uint16_t)(b[0] | (uint16_t)b[1] << 8);
}

static inline void gt_le_put_u32(void *p, uint32_t v)
{
    uint8_t *b = p;
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t gt_le_get_u32(const void *p)
{
    const uint8_t *b = p;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)b[i] << (8 * i);
    return v;
}

static inline void gt_le_put_u64(void *p, uint64_t v)
{
    uint8_t *b = p;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t gt_le_get_u64(const void *p)
{
    const uint8_t *b = p;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static inline void gt_le_put_f32(void *p, float f)
{
    uint32_t v;
    memcpy(&v, &f, sizeof v);
    gt_le_put_u32(p, v);
}

static inline float gt_le_get_f32(const void *p)
{
    uint32_t v = gt_le_get_u32(p);
    float f;
    memcpy(&f, &v, sizeof f);
    return f;
}

static inline void gt_le_put_f64(void *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof v);
    gt_le_put_u64(p, v);
}

static inline double gt_le_get_f64(const void *p)
{
    uint64_t v = gt_le_get_u64(p);
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

#endif
