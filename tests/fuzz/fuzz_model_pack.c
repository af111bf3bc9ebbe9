/* fuzz_model_pack: an exported model file as `giant import` and
 * POST /v1/models read it (model_pack_read): layout, versions, hashes, then
 * the config, checkpoints, transforms and geometry inside. */
#include <stdint.h>

#include "model_pack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    model_pack p;
    model_pack_fault fault;
    char part[64];
    gt_error err = {0};
    if (model_pack_read(data, size, &p, &fault, part, &err) == GT_OK)
        model_pack_free(&p);
    return 0;
}
