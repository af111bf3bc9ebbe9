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

#include "fuzz_fixup.h"
#include "geo.h"
#include "model_ckpt.h"
#include "model_data.h"

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
    fuzz_fix_repr(repr, v.repr_len);
    model_repr r;
    if (model_repr_from_bytes(&r, g, threshold, repr, v.repr_len, &err) == GT_OK)
        model_repr_free(&r);
    free(repr);
    return 0;
}
