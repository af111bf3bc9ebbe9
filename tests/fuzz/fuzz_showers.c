/* fuzz_showers: the binary shower layout the client library decodes from a
 * server's reply (gc_showers_decode); a buffer that decodes must encode
 * back to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "giant_client.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gc_showers s;
    gt_error err = {0};
    if (gc_showers_decode(data, size, &s, &err) != GT_OK)
        return 0;
    size_t need = gc_showers_size(s.n, s.voxels, s.layers);
    if (need != size)
        abort();
    void *out = malloc(need ? need : 1);
    if (out && gc_showers_encode(&s, out, need, &err) == GT_OK && memcmp(out, data, size) != 0)
        abort();
    free(out);
    gc_showers_free(&s);
    return 0;
}
