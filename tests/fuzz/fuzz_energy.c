/* fuzz_energy: the energy spec of sample requests, run configs and
 * synthetic datasets (model_energy_from_json), then what a count request
 * does with an accepted spec: the simulator's check and a few energies
 * drawn at a row the input picks. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <jansson.h>

#include "fuzz_json.h"
#include "model_energy.h"
#include "synth.h"

static void check(json_t *root, void *ctx)
{
    (void)ctx;
    /* {"energy": SPEC, "row0": N}, as in a sample request, or the spec alone */
    json_t *spec_json = json_object_get(root, "energy");
    if (!spec_json)
        spec_json = root;
    /* row0 as the sample route takes it: [0, 2^40] (SAMPLES_MAX_ROW0 in
     * routes_samples.c), so that row0 + n never overflows */
    json_t *row0 = json_object_get(root, "row0");
    int64_t first = json_is_integer(row0) && json_integer_value(row0) >= 0 &&
                            json_integer_value(row0) <= (1LL << 40)
                        ? (int64_t)json_integer_value(row0) : 0;
    model_energy spec;
    model_energy_default(&spec);
    char field[64];
    gt_error err = {0};
    const double lo = MODEL_ENERGY_MIN_MEV, hi = MODEL_ENERGY_MAX_MEV;
    if (model_energy_from_json(spec_json, "energy", lo, hi, &spec, field, sizeof field, &err) ==
        GT_OK) {
        if (!(spec.min_mev >= lo && spec.max_mev <= hi && spec.min_mev <= spec.max_mev))
            abort();
        synth_config sc;
        synth_config_default(&sc);
        model_energy_apply(&spec, &sc);
        float e[4];
        if (synth_config_check(&sc, &err) == GT_OK &&
            synth_draw_energies(&sc, first, 4, e, &err) == GT_OK) {
            for (int i = 0; i < 4; i++)
                if (!isfinite(e[i]) || e[i] <= 0)
                    abort();
        }
        json_decref(model_energy_to_json(&spec));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_json_run(data, size, check, NULL);
}
