/* fuzz_config: a run config as POST /v1/runs and `giant train` read it:
 * json_loadb with duplicate keys refused, then model_config_from_json, then
 * the config written back (what a run records) must parse again. */
#include <stdint.h>
#include <stdlib.h>

#include <jansson.h>

#include "fuzz_json.h"
#include "model_config.h"

static void check(json_t *root, void *ctx)
{
    (void)ctx;
    model_config cfg;
    char field[128];
    gt_error err = {0};
    if (model_config_from_json(root, &cfg, field, sizeof field, &err) == GT_OK) {
        /* a config that parsed is recorded as its complete form, which the
         * service reads back (resume, export): it must parse to itself */
        json_t *full = model_config_to_json(&cfg);
        model_config again;
        if (full && model_config_from_json(full, &again, field, sizeof field, &err) != GT_OK)
            abort();
        json_decref(full);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_json_run(data, size, check, NULL);
}
