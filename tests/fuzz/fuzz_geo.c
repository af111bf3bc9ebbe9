/* fuzz_geo: a CaloChallenge binning XML (geo_load_memory), the reader of
 * the geometry an imported model carries and of geometry files; voxel
 * look-ups on what it accepts. */
#include <limits.h>
#include <stdint.h>

#include "geo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > INT_MAX)
        return 0;
    geo_geometry g;
    gt_error err = {0};
    if (geo_load_memory(&g, (const char *)data, (int)size, &err) == GT_OK) {
        for (int l = 0; l < g.n_layers; l++)
            (void)geo_find_voxel(&g, l, 10.0, 0.5);
    }
    geo_free(&g);
    return 0;
}
