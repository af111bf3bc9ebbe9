/* fuzz_accept: a learned acceptance test's blob (model_accept_unpack), as a
 * model file's accept.bin and the runs' acceptance_tests rows carry it.
 * The CRC is written again over the input (fuzz_fixup.h), so the fuzzer
 * reaches the sizes and values behind it; a blob that unpacks scores a row
 * of zeros and one of the input's bytes (model_accept_logit), and packs
 * back to the bytes it came from. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_fixup.h"
#include "model_accept.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    fuzz_fix_accept(buf, size);
    model_accept a;
    gt_error err = {0};
    if (model_accept_unpack(buf, size, &a, &err) == GT_OK) {
        const int d = a.net.d, h = a.net.hidden;
        float *row = calloc((size_t)d, sizeof *row);
        float *scratch = malloc(2 * (size_t)(d > h ? d : h) * sizeof *scratch);
        if (row && scratch) {
            double z = model_accept_logit(&a, row, scratch);
            (void)model_accept_keep_probability(&a, z);
            for (int j = 0; j < d; j++)
                row[j] = (float)data[(size_t)j % size] - 128.0f;
            z = model_accept_logit(&a, row, scratch);
            (void)model_accept_keep_probability(&a, z);
        }
        void *back = NULL;
        size_t back_len = 0;
        if (model_accept_pack(&a, &back, &back_len, &err) == GT_OK &&
            (back_len != size || memcmp(back, buf, size) != 0))
            abort();   /* unpack and pack disagree */
        free(back);
        free(row);
        free(scratch);
        model_accept_free(&a);
    }
    free(buf);
    return 0;
}
