/* config_eras.h: reading tests/model/config_eras.json, the configs each
 * era of the project recorded (header only; test_model_config_fields and
 * tests/server/test_config_eras include it). */
#ifndef CONFIG_ERAS_H
#define CONFIG_ERAS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "model_config.h"

/* doc.path = v (borrowed; "a.b.c" makes a and b on the way when absent). */
static inline void config_eras_set(json_t *doc, const char *path, json_t *v)
{
    char key[128];
    json_t *o = doc;
    for (const char *p = path;;) {
        const char *dot = strchr(p, '.');
        if (!dot) {
            json_object_set(o, p, v);
            return;
        }
        snprintf(key, sizeof key, "%.*s", (int)(dot - p), p);
        json_t *next = json_object_get(o, key);
        if (!next) {
            next = json_object();
            json_object_set_new(o, key, next);
        }
        o = next;
        p = dot + 1;
    }
}

/* The fixture (new reference), or NULL with the reason printed. */
static inline json_t *config_eras_load(void)
{
    const char *src = getenv("GIANT_SOURCE_DIR");
    if (!src) {
        fprintf(stderr, "config_eras: GIANT_SOURCE_DIR is not set\n");
        return NULL;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/model/config_eras.json", src);
    json_error_t jerr;
    json_t *fx = json_load_file(path, 0, &jerr);
    if (!fx)
        fprintf(stderr, "%s: %s\n", path, jerr.text);
    return fx;
}

/* What a run of an era of schema version `schema` had when asked for the
 * fixture's asked config `index`: the features that came after its era as
 * they were before them.  A status of model_config_from_json. */
static inline int config_eras_had(const json_t *fx, size_t index, int schema,
                                  model_config *cfg)
{
    json_t *doc = json_deep_copy(json_array_get(json_object_get(fx, "asked"), index)), *ft;
    size_t k;
    json_array_foreach(json_object_get(fx, "features"), k, ft)
        if (schema < json_integer_value(json_object_get(ft, "schema")))
            config_eras_set(doc, json_string_value(json_object_get(ft, "path")),
                            json_object_get(ft, "before"));
    char field[128];
    gt_error err = {0};
    int rc = model_config_from_json(doc, cfg, field, sizeof field, &err);
    json_decref(doc);
    return rc;
}

#endif
