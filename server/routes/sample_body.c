#include "sample_body.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_energy.h"
#include "synth.h"

/* Fields are cut to 47 bytes, as when sample_body_fault's field held 48:
 * a refusal names what it always named. */
enum { FIELD_SIZE = 48 };

/* The names the fault gives its first members are its base's members: the
 * same place and size, should body_fault change. */
#define SAME_AS_BASE(m)                                                                     \
    (offsetof(sample_body_fault, m) == offsetof(sample_body_fault, base.m) &&               \
     sizeof((sample_body_fault *)0)->m == sizeof((body_fault *)0)->m)
_Static_assert(SAME_AS_BASE(status) && SAME_AS_BASE(field) && SAME_AS_BASE(message),
               "sample_body_fault's members are its base's");

void sample_body_free(sample_body *b)
{
    if (b) {
        free(b->e_inc);
        b->e_inc = NULL;
    }
}

int sample_body_parse(const json_t *cbody, const sample_body_limits *lim, sample_body *out,
                      sample_body_fault *fault)
{
    memset(out, 0, sizeof *out);
    memset(fault, 0, sizeof *fault);
    body_fault *f = &fault->base;
    json_t *body = (json_t *)cbody;       /* Jansson's getters take no const */
    static const char *const known[] = {"energies", "count", "energy", "seed",
                                        "steps", "row0", NULL};
    if (!body_known_keys(body, known, f, FIELD_SIZE, "unknown field '%.100s'"))
        return 0;
    json_t *seed = json_object_get(body, "seed"), *steps = json_object_get(body, "steps");
    json_t *energies = json_object_get(body, "energies"), *count = json_object_get(body, "count");
    json_t *dist = json_object_get(body, "energy");
    if (seed && (!json_is_integer(seed) || json_integer_value(seed) < 0))
        return body_refuse(f, 422, "seed", "seed must be a non-negative integer");
    const int max_steps = lim->max_steps > 0 && lim->max_steps < 1000 ? lim->max_steps : 1000;
    if (steps && (!json_is_integer(steps) || json_integer_value(steps) < 1 ||
                  json_integer_value(steps) > max_steps))
        return body_refuse(f, 422, "steps", "steps must be 1 to %d", max_steps);
    json_t *row0 = json_object_get(body, "row0");
    if (row0 && (!json_is_integer(row0) || json_integer_value(row0) < 0 ||
                 json_integer_value(row0) > SAMPLE_BODY_MAX_ROW0))
        return body_refuse(f, 422, "row0", "row0 must be an integer in [0, %lld]",
                           SAMPLE_BODY_MAX_ROW0);
    out->row0 = row0 ? (int64_t)json_integer_value(row0) : 0;
    out->seed = seed ? (uint64_t)json_integer_value(seed) : 1;
    out->steps = steps ? (int)json_integer_value(steps) : 0;
    if ((energies != NULL) == (count != NULL))
        return body_refuse(f, 422, "", "give either energies or count");
    double lo = lim->min_mev, hi = lim->max_mev;
    long long n;
    if (energies) {
        if (!json_is_array(energies) || json_array_size(energies) == 0)
            return body_refuse(f, 422, "energies", "energies must be a non-empty array of MeV");
        n = (long long)json_array_size(energies);
        if (dist)
            return body_refuse(f, 422, "energy", "energy goes with count, not with energies");
    } else {
        if (!json_is_integer(count) || json_integer_value(count) < 1)
            return body_refuse(f, 422, "count", "count must be a positive integer");
        n = json_integer_value(count);
    }
    const char *nfield = energies ? "energies" : "count";
    if (n > lim->max_showers) {
        fault->too_many = 1;
        fault->limit = lim->max_showers;
        return body_refuse(f, 422, nfield,
                           "%lld showers asked, at most %ld per request (ask in several with row0)",
                           n, lim->max_showers);
    }
    if (lim->json_reply && n > lim->max_json_showers) {
        fault->too_many = 1;
        fault->limit = lim->max_json_showers;
        return body_refuse(f, 422, nfield,
                           "%lld showers asked, at most %ld as JSON (ask for"
                           " application/octet-stream or application/x-hdf5)",
                           n, lim->max_json_showers);
    }
    out->n = n;
    out->e_inc = malloc((size_t)n * sizeof(float));
    if (!out->e_inc)
        return body_refuse(f, 500, "", "out of memory");
    if (energies) {
        for (size_t i = 0; i < (size_t)n; i++) {
            json_t *e = json_array_get(energies, i);
            double x = json_number_value(e);
            if (!json_is_number(e) || !(x >= lo && x <= hi)) {
                char field[FIELD_SIZE];
                snprintf(field, sizeof field, "energies[%zu]", i);
                sample_body_free(out);
                return body_refuse(f, 422, field,
                                   "incident energies must be numbers in [%g, %g] MeV", lo, hi);
            }
            out->e_inc[i] = (float)x;
        }
        return 1;
    }
    /* count + distribution: drawn as `giant sample` draws them */
    synth_config sc;
    synth_config_default(&sc);
    sc.seed = out->seed;
    model_energy spec;
    model_energy_default(&spec);
    char field[FIELD_SIZE] = "";
    gt_error err = {0};
    if (dist && model_energy_from_json(dist, "energy", lo, hi, &spec, field, sizeof field,
                                       &err) != GT_OK) {
        sample_body_free(out);
        return body_refuse(f, 422, field, "%s", err.message);
    }
    model_energy_apply(&spec, &sc);
    if (synth_config_check(&sc, &err) != GT_OK ||
        synth_draw_energies(&sc, out->row0, n, out->e_inc, &err) != GT_OK) {
        sample_body_free(out);
        return body_refuse(f, 422, "energy", "%s", err.message);
    }
    return 1;
}
