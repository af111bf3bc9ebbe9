/* dataset_body: a dataset request's body, checked (see dataset_body.h).
 * Every refusal names the key at fault. */
#include "dataset_body.h"

#include <string.h>

#include "gt_error.h"
#include "model_data.h"
#include "synth.h"

static const char builtin_only[] = "the service takes a built-in geometry: dataset_1_photons, "
                                   "dataset_1_pions, dataset_2 or dataset_3";

/* Names become file names: letters, digits, '-', '_', '.', no leading dot. */
static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 100 || s[0] == '.')
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return 0;
    return 1;
}

/* A file to register: its path and geometry, as strings.  The geometry is
 * checked before the route looks at the path, so that a refused geometry
 * tells nothing about which files exist. */
static int parse_file(json_t *body, json_t *path, dataset_body *out, dataset_body_fault *f)
{
    json_t *geometry = json_object_get(body, "geometry");
    if (!json_is_string(path) || json_string_length(path) == 0)
        return body_refuse(f, 422, "path", "path must be a string");
    if (geometry && !json_is_string(geometry))
        return body_refuse(f, 422, "geometry", "geometry must be a string");
    out->path = json_string_value(path);
    out->geometry = geometry ? json_string_value(geometry) : "dataset_2";
    if (!model_geometry_is_builtin(out->geometry))
        return body_refuse(f, 422, "geometry", "%s", builtin_only);
    return 1;
}

/* A synthetic dataset: the object's members, each in its range. */
static int parse_synthetic(json_t *syn, long max_showers, dataset_body *out,
                           dataset_body_fault *f)
{
    const char *geometry = "dataset_2", *particle = NULL, *simulator = NULL;
    json_int_t n = 0, seed = 1;
    json_t *energy = NULL;
    json_error_t jerr;
    if (json_unpack_ex(syn, &jerr, JSON_STRICT, "{s?s, s?s, s:I, s?I, s?o, s?s}", "geometry",
                       &geometry, "particle", &particle, "n", &n, "seed", &seed, "energy",
                       &energy, "simulator", &simulator) != 0)
        return body_refuse(f, 422, "synthetic", "%s", jerr.text);
    if (n < 1 || n > max_showers)
        return body_refuse(f, 422, "synthetic.n",
                           "n must be 1 to %ld (--max-synthetic-showers)", max_showers);
    if (seed < 0)
        return body_refuse(f, 422, "synthetic.seed", "seed must be non-negative");
    /* the spec run configs and sample requests take, parsed by the same
     * function */
    model_energy_default(&out->energy);
    char field[sizeof f->field] = "";
    gt_error err = {0};
    if (energy && model_energy_from_json(energy, "synthetic.energy", MODEL_ENERGY_MIN_MEV,
                                         MODEL_ENERGY_MAX_MEV, &out->energy, field, sizeof field,
                                         &err) != GT_OK)
        return body_refuse(f, 422, field, "%s", err.message);
    synth_particle p;
    if (particle && synth_parse_particle(particle, &p, &err) != GT_OK)
        return body_refuse(f, 422, "synthetic.particle", "%s", err.message);
    synth_simulator sim;
    if (simulator && synth_parse_simulator(simulator, &sim, &err) != GT_OK)
        return body_refuse(f, 422, "synthetic.simulator", "%s", err.message);
    if (!model_geometry_is_builtin(geometry))
        return body_refuse(f, 422, "synthetic.geometry", "%s", builtin_only);
    out->geometry = geometry;
    out->particle = particle;
    out->simulator = simulator;
    out->n = n;
    out->seed = seed;
    return 1;
}

int dataset_body_parse(const json_t *cbody, long max_synthetic_showers, dataset_body *out,
                       dataset_body_fault *f)
{
    memset(out, 0, sizeof *out);
    memset(f, 0, sizeof *f);
    json_t *body = (json_t *)cbody;       /* Jansson's getters take no const */
    static const char *const known[] = {"name", "path", "geometry", "synthetic", NULL};
    if (!body_known_keys(body, known, f, sizeof f->field, "unknown field '%.200s'"))
        return 0;
    json_t *name = json_object_get(body, "name"), *path = json_object_get(body, "path");
    json_t *geometry = json_object_get(body, "geometry"), *syn = json_object_get(body, "synthetic");
    if (!json_is_string(name) || !name_ok(json_string_value(name)))
        return body_refuse(f, 422, "name",
                           "name must be 1 to 100 of [A-Za-z0-9._-], not starting with '.'");
    out->name = json_string_value(name);
    if ((path != NULL) == (syn != NULL))
        return body_refuse(f, 422, "", "give either path or synthetic");
    if (path)
        return parse_file(body, path, out, f);
    if (geometry || !json_is_object(syn))
        return body_refuse(f, 422, geometry ? "geometry" : "synthetic",
                           "synthetic must be an object (geometry goes inside it)");
    return parse_synthetic(syn, max_synthetic_showers, out, f);
}

json_t *dataset_body_spec(const dataset_body *b)
{
    json_t *doc = json_pack("{s:I, s:I, s:o}", "n", (json_int_t)b->n, "seed",
                            (json_int_t)b->seed, "energy", model_energy_to_json(&b->energy));
    if (doc && ((b->particle && json_object_set_new(doc, "particle", json_string(b->particle))) ||
                (b->simulator &&
                 json_object_set_new(doc, "simulator", json_string(b->simulator))))) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}
