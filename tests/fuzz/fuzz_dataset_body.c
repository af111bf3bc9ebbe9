/* fuzz_dataset_body: the body of POST /v1/datasets, checked by
 * dataset_body_parse as the route does, with the service's default
 * --max-synthetic-showers.  An accepted body must hold what the route and
 * the datasets worker rely on: a name of 1 to 100 of [A-Za-z0-9._-] not
 * starting with '.' (it becomes a file name), exactly one of path (a
 * non-empty string) and synthetic, a built-in geometry, and for a
 * synthetic dataset n in [1, the cap], a seed >= 0, a particle and a
 * simulator the engine knows, and a spec that the worker, reading it back
 * as it does (json_unpack, model_energy_from_json, synth_parse_simulator,
 * synth_config_check), takes with the same values.  A refused body must
 * be a 422 with a message and a field that is "" (the body is no object,
 * it has both or neither of path and synthetic, or it has the unknown key
 * ""), "name" when the name is missing or breaks the pattern, or a dotted
 * path into the body ("synthetic.energy.min_mev") whose members are there,
 * the last one possibly a bound left at its default. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "dataset_body.h"
#include "fuzz_json.h"
#include "model_data.h"
#include "model_energy.h"
#include "synth.h"

/* The name pattern, written apart from the module's own check. */
static int name_matches(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= 100 && s[0] != '.' &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* 1 when path names a member of obj: a key (dots and all), or a key, a dot
 * and a path into that member. */
static int names_member(json_t *obj, const char *path)
{
    if (!json_is_object(obj))
        return 0;
    if (json_object_get(obj, path))
        return 1;
    for (const char *dot = strchr(path, '.'); dot; dot = strchr(dot + 1, '.')) {
        char head[64];
        size_t n = (size_t)(dot - path);
        if (n >= sizeof head)
            break;
        memcpy(head, path, n);
        head[n] = '\0';
        if (names_member(json_object_get(obj, head), dot + 1))
            return 1;
    }
    return 0;
}

static const char *member_string(json_t *obj, const char *key, const char *def)
{
    json_t *v = json_object_get(obj, key);
    return v ? json_string_value(v) : def;
}

static int same(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* The spec the route stores, read back as the datasets worker reads it. */
static void check_spec(const dataset_body *b)
{
    json_t *doc = dataset_body_spec(b);
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(doc);
    if (!text)
        abort();
    json_t *spec = json_loads(text, 0, NULL);
    free(text);
    json_int_t n = 0, seed = 1;
    const char *particle = NULL, *simulator = NULL;
    json_t *energy = NULL;
    if (!spec || json_unpack(spec, "{s:I, s?I, s?s, s?o, s?s}", "n", &n, "seed", &seed,
                             "particle", &particle, "energy", &energy, "simulator",
                             &simulator) != 0)
        abort();
    if (n != b->n || seed != b->seed || (particle != NULL) != (b->particle != NULL) ||
        (particle && strcmp(particle, b->particle)) ||
        (simulator != NULL) != (b->simulator != NULL) ||
        (simulator && strcmp(simulator, b->simulator)))
        abort();
    model_energy en;
    model_energy_default(&en);
    if (!energy || model_energy_from_json(energy, "energy", MODEL_ENERGY_MIN_MEV,
                                          MODEL_ENERGY_MAX_MEV, &en, NULL, 0, NULL) != GT_OK)
        abort();
    if (en.mode != b->energy.mode || en.min_mev != b->energy.min_mev ||
        en.max_mev != b->energy.max_mev)
        abort();
    synth_config sc;
    synth_config_default(&sc);
    model_energy_apply(&en, &sc);
    synth_particle p;
    if ((simulator && synth_parse_simulator(simulator, &sc.simulator, NULL) != GT_OK) ||
        synth_config_check(&sc, NULL) != GT_OK ||
        (particle && synth_parse_particle(particle, &p, NULL) != GT_OK))
        abort();
    json_decref(spec);
}

static void check_accepted(json_t *body, const dataset_body *b, long max)
{
    json_t *path = json_object_get(body, "path"), *syn = json_object_get(body, "synthetic");
    if (json_object_size(body) > 4 || !same(b->name, member_string(body, "name", NULL)) ||
        !name_matches(b->name) || (path != NULL) == (syn != NULL) ||
        (b->path != NULL) != (path != NULL) || !b->geometry ||
        !model_geometry_is_builtin(b->geometry))
        abort();
    if (b->path) {
        if (!b->path[0] || !same(b->path, json_string_value(path)) ||
            !same(b->geometry, member_string(body, "geometry", "dataset_2")))
            abort();
        return;
    }
    if (json_object_get(body, "geometry") || !json_is_object(syn) ||
        !same(b->geometry, member_string(syn, "geometry", "dataset_2")) || b->n < 1 ||
        b->n > max || b->seed < 0)
        abort();
    json_t *particle = json_object_get(syn, "particle");
    if ((b->particle != NULL) != (particle != NULL) ||
        (particle && !same(b->particle, json_string_value(particle))))
        abort();
    json_t *simulator = json_object_get(syn, "simulator");
    if ((b->simulator != NULL) != (simulator != NULL) ||
        (simulator && !same(b->simulator, json_string_value(simulator))))
        abort();
    if (!(b->energy.min_mev >= MODEL_ENERGY_MIN_MEV && b->energy.min_mev <= b->energy.max_mev &&
          b->energy.max_mev <= MODEL_ENERGY_MAX_MEV))
        abort();
    check_spec(b);
}

static void check_refused(json_t *body, const dataset_body_fault *f)
{
    if (f->status != 422 || !f->message[0])
        abort();
    if (!f->field[0]) {
        /* or it names the key "", which is no key the body may have */
        if (json_is_object(body) && !json_object_get(body, "") &&
            (json_object_get(body, "path") != NULL) != (json_object_get(body, "synthetic") != NULL))
            abort();
        return;
    }
    if (!strcmp(f->field, "name")) {
        const char *name = member_string(body, "name", NULL);
        if (name && name_matches(name))
            abort();
        return;
    }
    if (strlen(f->field) == sizeof f->field - 1) {
        /* cut to the field's size: its first key at least is the body's */
        if (!fuzz_json_names_key(body, f->field, "."))
            abort();
        return;
    }
    if (!names_member(body, f->field) &&
        !(!strcmp(f->field, "synthetic.energy.max_mev") &&
          names_member(body, "synthetic.energy")))
        abort();
}

static void check(json_t *body, void *ctx)
{
    (void)ctx;
    const long max = 1000000;   /* server/base/settings.c's --max-synthetic-showers */
    dataset_body b;
    dataset_body_fault f;
    if (dataset_body_parse(body, max, &b, &f))
        check_accepted(body, &b, max);
    else
        check_refused(body, &f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_json_run(data, size, check, NULL);
}
