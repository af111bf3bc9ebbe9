/* model_energy: the one energy spec of run configs, sample requests and
 * synthetic datasets,
 *
 *   {"dist": "log-uniform" | "discrete" | "fixed", "min_mev": N, "max_mev": N}
 *
 * parsed and validated in one place so that the three cannot drift apart.
 * Every key is optional (the spec passed in holds the defaults); unknown
 * keys, wrong types, an unknown dist, min_mev outside [lo, hi], max_mev
 * outside [min_mev, hi] and a range the simulator cannot draw from (no
 * power of two for discrete, outside [10 MeV, 100 TeV]) are errors that
 * name the field by its dotted path under the caller's prefix
 * ("dataset.synthetic.energy.min_mev", "energy.dist"). */
#ifndef MODEL_ENERGY_H
#define MODEL_ENERGY_H

#include <jansson.h>
#include <stddef.h>

#include "gt_error.h"
#include "synth.h"

typedef struct model_energy {
    synth_energy_mode mode;
    double min_mev, max_mev;
} model_energy;

/* The simulator's range: what a spec may ask for at most. */
#define MODEL_ENERGY_MIN_MEV 10.0
#define MODEL_ENERGY_MAX_MEV 1.0e8

/* log-uniform from 1 GeV to 1 TeV. */
void model_energy_default(model_energy *e);

/* Parses obj at path into e (keys left out keep e's values); on an error
 * writes the field's dotted path into field and returns GT_EINVAL. */
int model_energy_from_json(const json_t *obj, const char *path, double lo, double hi,
                           model_energy *e, char *field, size_t field_len, gt_error *err);

/* The spec onto a simulator config: its dist and range (the rest of sc as
 * it was). */
void model_energy_apply(const model_energy *e, synth_config *sc);

/* {"dist", "min_mev", "max_mev"} (NULL when out of memory). */
json_t *model_energy_to_json(const model_energy *e);

/* "log-uniform", "discrete" or "fixed". */
const char *model_energy_dist_name(synth_energy_mode mode);

#endif
