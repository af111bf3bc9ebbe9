/* fuzz_ckpt: a stage checkpoint as a run stores it and an imported model
 * carries it (model_ckpt_unpack), then the fitted transforms inside it
 * (model_repr_from_bytes) against the dataset-1 photon geometry (small, so its seed is too), as the sampler
 * and model_pack_read take them.
 *
 * Each statistics blob of the transforms ends in an FNV-1a checksum that a
 * mutation almost never keeps right; the harness writes it again where the
 * blob's length allows, so the fuzzer reaches the values behind it (a real
 * file could carry any bytes with a right checksum). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "geo.h"
#include "gt_le.h"
#include "model_ckpt.h"
#include "model_data.h"

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The transforms' layout (model_data.c): 8-byte header, then three blocks
 * of u64 length + blob, each blob ending in its checksum. */
static void fix_checksums(uint8_t *b, size_t len)
{
    size_t off = 8;
    for (int i = 0; i < 3 && len >= off + 8; i++) {
        uint64_t n = gt_le_get_u64(b + off);
        if (n < 16 || n > len - off - 8)
            return;
        uint8_t *blob = b + off + 8;
        gt_le_put_u64(blob + n - 8, fnv1a(blob, (size_t)n - 8));
        off += 8 + (size_t)n;
    }
}

static const geo_geometry *geometry_once(float *threshold)
{
    static geo_geometry g;
    static float thr;
    static int loaded;
    gt_error err = {0};
    if (!loaded) {
        if (model_geometry_load("dataset_1_photons", &g, &err) != GT_OK ||
            model_geometry_threshold(&g, &thr, &err) != GT_OK)
            abort();
        loaded = 1;
    }
    *threshold = thr;
    return &g;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    float threshold;
    const geo_geometry *g = geometry_once(&threshold);
    model_ckpt_view v;
    gt_error err = {0};
    if (model_ckpt_unpack(data, size, &v, &err) != GT_OK)
        return 0;
    if (v.repr + v.repr_len > data + size || v.weights + v.weights_len > data + size)
        abort();
    uint8_t *repr = malloc(v.repr_len ? v.repr_len : 1);
    if (!repr)
        return 0;
    memcpy(repr, v.repr, v.repr_len);
    fix_checksums(repr, v.repr_len);
    model_repr r;
    if (model_repr_from_bytes(&r, g, threshold, repr, v.repr_len, &err) == GT_OK)
        model_repr_free(&r);
    free(repr);
    return 0;
}
