#include "model_energy.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void model_energy_default(model_energy *e)
{
    e->mode = SYNTH_ENERGY_LOG_UNIFORM;
    e->min_mev = 1e3;
    e->max_mev = 1e6;
}

const char *model_energy_dist_name(synth_energy_mode mode)
{
    switch (mode) {
    case SYNTH_ENERGY_DISCRETE: return "discrete";
    case SYNTH_ENERGY_FIXED: return "fixed";
    default: return "log-uniform";
    }
}

static int fail(char *field, size_t field_len, const char *path, const char *key,
                gt_error *err, const char *msg)
{
    char p[256];
    if (key)
        snprintf(p, sizeof p, "%s%s%s", path, path[0] ? "." : "", key);
    else
        snprintf(p, sizeof p, "%s", path);
    if (field && field_len)
        snprintf(field, field_len, "%s", p);
    return gt_error_set(err, GT_EINVAL, "%s: %s", p[0] ? p : "energy", msg);
}

int model_energy_from_json(const json_t *obj, const char *path, double lo, double hi,
                           model_energy *e, char *field, size_t field_len, gt_error *err)
{
    char msg[256];
    if (!json_is_object(obj))
        return fail(field, field_len, path, NULL, err,
                    "must be {\"dist\": \"log-uniform\"|\"discrete\"|\"fixed\","
                    " \"min_mev\": number, \"max_mev\": number}");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        if (strcmp(key, "dist") && strcmp(key, "min_mev") && strcmp(key, "max_mev")) {
            snprintf(msg, sizeof msg, "unknown field '%s' (dist, min_mev, max_mev)", key);
            return fail(field, field_len, path, key, err, msg);
        }
    }
    const json_t *jd = json_object_get(obj, "dist"), *jmin = json_object_get(obj, "min_mev"),
                 *jmax = json_object_get(obj, "max_mev");
    if (jd && !json_is_string(jd))
        return fail(field, field_len, path, "dist", err,
                    "must be \"log-uniform\", \"discrete\" or \"fixed\"");
    if (jmin && !json_is_number(jmin))
        return fail(field, field_len, path, "min_mev", err, "must be a number (MeV)");
    if (jmax && !json_is_number(jmax))
        return fail(field, field_len, path, "max_mev", err, "must be a number (MeV)");
    model_energy out = *e;
    gt_error perr = {0};
    if (jd && synth_parse_energy_mode(json_string_value(jd), &out.mode, &perr) != GT_OK)
        return fail(field, field_len, path, "dist", err, perr.message);
    if (jmin)
        out.min_mev = json_number_value(jmin);
    if (jmax)
        out.max_mev = json_number_value(jmax);
    if (!(out.min_mev >= lo && out.min_mev <= hi)) {
        snprintf(msg, sizeof msg, "min_mev must be in [%g, %g] MeV", lo, hi);
        return fail(field, field_len, path, "min_mev", err, msg);
    }
    if (!(out.max_mev >= out.min_mev && out.max_mev <= hi)) {
        snprintf(msg, sizeof msg, "max_mev must be in [min_mev, %g] MeV", hi);
        return fail(field, field_len, path, "max_mev", err, msg);
    }
    synth_config sc;
    synth_config_default(&sc);
    model_energy_apply(&out, &sc);
    if (synth_config_check(&sc, &perr) != GT_OK)
        return fail(field, field_len, path, NULL, err, perr.message);
    *e = out;
    return GT_OK;
}

void model_energy_apply(const model_energy *e, synth_config *sc)
{
    sc->energy_mode = e->mode;
    sc->e_min_mev = e->min_mev;
    sc->e_max_mev = e->max_mev;
}

json_t *model_energy_to_json(const model_energy *e)
{
    return json_pack("{s:s, s:f, s:f}", "dist", model_energy_dist_name(e->mode), "min_mev",
                     e->min_mev, "max_mev", e->max_mev);
}
