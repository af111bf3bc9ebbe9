/* Run configs: read, checked and written back by walking the table of
 * model_config_fields.c.  What a field is lives in its row; this file only
 * knows how to walk rows. */
#include "model_config.h"
#include "model_config_fields.h"
#include "model_energy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIELDS model_config_fields
#define NFIELDS model_config_field_count

/* ------------------------------------------------------------------------ */
/* the walker: the first problem found is reported with its dotted path     */
/* (mcf_fail and mcf_lookup, which the sections' hooks call too, are in     */
/* model_config_fields.c, below this file)                                  */
/* ------------------------------------------------------------------------ */

/* The key of a row under its section's path ("train.lr" under "train":
 * "lr"), or NULL when the row is not directly under it. */
static const char *child_key(const char *row, const char *section)
{
    size_t n = strlen(section);
    if (n == 0)
        return strchr(row, '.') || !row[0] ? NULL : row;
    if (strncmp(row, section, n) != 0 || row[n] != '.' || strchr(row + n + 1, '.'))
        return NULL;
    return row + n + 1;
}

/* Whether row lies under section (at any depth). */
static int under(const char *row, const char *section)
{
    size_t n = strlen(section);
    return n == 0 ? row[0] != '\0' : strncmp(row, section, n) == 0 && row[n] == '.';
}

/* The row after the last row under section si (they follow it). */
static int section_end(int si)
{
    int i = si + 1;
    while (i < NFIELDS && under(FIELDS[i].path, FIELDS[si].path))
        i++;
    return i;
}

/* Unknown keys are errors: a key is known when a row sits directly under
 * the section. */
static int check_keys(mcf_walk *w, const json_t *obj, int si)
{
    const char *key;
    json_t *val;
    int end = section_end(si);
    json_object_foreach((json_t *)obj, key, val) {
        int ok = 0;
        for (int i = si + 1; i < end && !ok; i++) {
            const char *k = child_key(FIELDS[i].path, FIELDS[si].path);
            ok = k && strcmp(k, key) == 0;
        }
        if (!ok)
            return mcf_fail_key(w, FIELDS[si].path, key, "unknown key");
    }
    return GT_OK;
}

static int get_int(mcf_walk *w, const json_t *obj, const char *path, const char *key,
                   int64_t lo, int64_t hi, int64_t *out)
{
    const json_t *v;
    int rc = mcf_lookup(w, obj, path, key, MCF_INT64, NULL, &v);
    if (rc || !v)
        return rc;
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        char msg[96];
        snprintf(msg, sizeof msg, "out of range [%lld, %lld]", (long long)lo, (long long)hi);
        return mcf_fail_key(w, path, key, msg);
    }
    *out = x;
    return GT_OK;
}

static int get_real(mcf_walk *w, const json_t *obj, const char *path, const char *key,
                    double lo, int lo_open, double hi, double *out)
{
    const json_t *v;
    int rc = mcf_lookup(w, obj, path, key, MCF_REAL, NULL, &v);
    if (rc || !v)
        return rc;
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || (lo_open && x == lo) || x > hi) {
        char msg[96];
        snprintf(msg, sizeof msg, "out of range %s%g, %g]", lo_open ? "(" : "[", lo, hi);
        return mcf_fail_key(w, path, key, msg);
    }
    *out = x;
    return GT_OK;
}

/* A string that must be one of `names`; *out = its index. */
static int get_enum(mcf_walk *w, const json_t *obj, const char *path, const char *key,
                    const char *const *names, int *out)
{
    const json_t *v;
    int rc = mcf_lookup(w, obj, path, key, MCF_ENUM, NULL, &v);
    if (rc || !v)
        return rc;
    char list[200] = "";
    for (int i = 0; names[i]; i++) {
        if (strcmp(names[i], json_string_value(v)) == 0) {
            *out = i;
            return GT_OK;
        }
        size_t n = strlen(list);
        snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", names[i]);
    }
    char msg[240];
    snprintf(msg, sizeof msg, "must be one of: %s", list);
    return mcf_fail_key(w, path, key, msg);
}

static int index_of(const char *const *names, const char *s)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

/* dataset.synthetic.energy: the spec as sample requests take it, parsed by
 * model_energy; or (deprecated) the dist's name beside emin_mev and
 * emax_mev, what runs recorded before the spec have. */
static int read_energy(mcf_walk *w, const json_t *obj, const char *path,
                       const model_config_field *f, model_config *cfg)
{
    const json_t *je = json_object_get(obj, "energy");
    if (json_is_object(je)) {
        char p[256];
        snprintf(p, sizeof p, "%s.energy", path);
        model_energy e;
        model_energy_default(&e);
        int rc = model_energy_from_json(je, p, MODEL_ENERGY_MIN_MEV, MODEL_ENERGY_MAX_MEV, &e,
                                        w->field, w->field_len, w->err);
        if (rc)
            return rc;
        snprintf(cfg->synthetic_energy, sizeof cfg->synthetic_energy, "%s",
                 model_energy_dist_name(e.mode));
        cfg->synthetic_emin_mev = e.min_mev;
        cfg->synthetic_emax_mev = e.max_mev;
        return GT_OK;
    }
    int i = index_of(f->names, cfg->synthetic_energy);
    int rc = get_enum(w, obj, path, "energy", f->names, &i);
    if (rc == GT_OK && i >= 0)
        snprintf(cfg->synthetic_energy, sizeof cfg->synthetic_energy, "%s", f->names[i]);
    return rc;
}

/* One field of the section at path (obj), into its member. */
static int read_field(mcf_walk *w, const json_t *obj, const char *path, const char *key,
                      const model_config_field *f, model_config *cfg)
{
    char *at = (char *)cfg + f->offset;
    int64_t x;
    int rc;
    switch (f->type) {
    case MCF_BOOL: {
        const json_t *v;
        if ((rc = mcf_lookup(w, obj, path, key, MCF_BOOL, NULL, &v)) || !v)
            return rc;
        *(int *)at = json_is_true(v);
        return GT_OK;
    }
    case MCF_INT:
        x = *(int *)at;
        rc = get_int(w, obj, path, key, f->ilo, f->ihi, &x);
        *(int *)at = (int)x;
        return rc;
    case MCF_INT64: return get_int(w, obj, path, key, f->ilo, f->ihi, (int64_t *)at);
    case MCF_SEED:
        x = (int64_t) * (uint64_t *)at;
        rc = get_int(w, obj, path, key, f->ilo, f->ihi, &x);
        *(uint64_t *)at = (uint64_t)x;
        return rc;
    case MCF_REAL: return get_real(w, obj, path, key, f->lo, f->lo_open, f->hi, (double *)at);
    case MCF_STRING: {
        const json_t *v;
        if ((rc = mcf_lookup(w, obj, path, key, MCF_STRING, NULL, &v)) || !v)
            return rc;
        const char *s = json_string_value(v);
        if (strlen(s) >= f->size || strlen(s) != json_string_length(v))
            return mcf_fail_key(w, path, key, "too long or contains NUL");
        snprintf(at, f->size, "%s", s);
        return GT_OK;
    }
    case MCF_ENUM: return get_enum(w, obj, path, key, f->names, (int *)at);
    case MCF_NAME: {
        int i = index_of(f->names, at);
        if ((rc = get_enum(w, obj, path, key, f->names, &i)) == GT_OK && i >= 0)
            snprintf(at, f->size, "%s", f->names[i]);
        return rc;
    }
    case MCF_ENERGY: return read_energy(w, obj, path, f, cfg);
    default: return GT_OK;
    }
}

/* The section of row si, present in the document as obj: its keys, its
 * own fields, its check, its sub-sections, its after (model_config_fields.h). */
static int walk_section(mcf_walk *w, int si, const json_t *obj, model_config *cfg)
{
    const model_config_field *s = &FIELDS[si];
    void *at = (char *)cfg + s->offset;
    int end = section_end(si), rc;
    if (s->pre && (rc = s->pre(w, obj, s->path, at, cfg)))
        return rc;
    if ((rc = check_keys(w, obj, si)))
        return rc;
    for (int i = si + 1; i < end; i++) {
        const model_config_field *f = &FIELDS[i];
        const char *key = child_key(f->path, s->path);
        if (key && f->type != MCF_SECTION && !(f->flags & MCF_BY_PARENT) &&
            (rc = read_field(w, obj, s->path, key, f, cfg)))
            return rc;
    }
    if (s->check && (rc = s->check(w, obj, s->path, at, cfg)))
        return rc;
    for (int i = si + 1; i < end; i++) {
        const model_config_field *f = &FIELDS[i];
        const char *key = child_key(f->path, s->path);
        const json_t *sub;
        if (!key || f->type != MCF_SECTION)
            continue;
        if ((rc = mcf_lookup(w, obj, s->path, key, MCF_SECTION, f->what, &sub)))
            return rc;
        if (sub && (rc = walk_section(w, i, sub, cfg)))
            return rc;
    }
    if (s->after && (rc = s->after(w, obj, s->path, at, cfg)))
        return rc;
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* defaults and parsing                                                     */
/* ------------------------------------------------------------------------ */

/* Sets f's member to the value the text of a default means. */
static void set_literal(const model_config_field *f, model_config *cfg, const char *text)
{
    char *at = (char *)cfg + f->offset;
    switch (f->type) {
    case MCF_BOOL: *(int *)at = strcmp(text, "true") == 0; break;
    case MCF_INT: *(int *)at = (int)strtol(text, NULL, 10); break;
    case MCF_INT64: *(int64_t *)at = strtoll(text, NULL, 10); break;
    case MCF_SEED: *(uint64_t *)at = strtoull(text, NULL, 10); break;
    case MCF_REAL: *(double *)at = strtod(text, NULL); break;
    case MCF_STRING:
    case MCF_NAME: snprintf(at, f->size, "%s", text); break;
    case MCF_ENUM: *(int *)at = index_of(f->names, text); break;
    default: break;
    }
}

void model_config_defaults(model_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < NFIELDS; i++)
        if (FIELDS[i].def)
            set_literal(&FIELDS[i], cfg, FIELDS[i].def);
}

/* ------------------------------------------------------------------------ */
/* versions                                                                 */
/* ------------------------------------------------------------------------ */

/* root's config_version; absent_as when it names none. */
static int read_version(mcf_walk *w, const json_t *root, int absent_as, int *version)
{
    const json_t *v;
    int rc = mcf_lookup(w, root, "", "config_version", MCF_VERSION, NULL, &v);
    if (rc)
        return rc;
    *version = absent_as;
    if (!v)
        return GT_OK;
    json_int_t x = json_integer_value(v);
    char msg[160];
    if (x > MODEL_CONFIG_VERSION) {
        snprintf(msg, sizeof msg,
                 "%lld: written by a newer giant (this one reads versions up to %d)",
                 (long long)x, MODEL_CONFIG_VERSION);
        return mcf_fail(w, "config_version", msg);
    }
    if (x < 1) {
        snprintf(msg, sizeof msg, "out of range [1, %d]", MODEL_CONFIG_VERSION);
        return mcf_fail(w, "config_version", msg);
    }
    *version = (int)x;
    return GT_OK;
}

/* The one upgrade: a config of `version` gets, for every field it leaves
 * out whose meaning changed since (its row's since is later), the value
 * it meant then, made the objects on its way as the SQL migrations'
 * json_set did; a section that is no object is left for the parser to
 * refuse.  Then it is of the current version. */
static int upgrade(json_t *root, int version)
{
    for (int i = 0; i < NFIELDS; i++) {
        const model_config_field *f = &FIELDS[i];
        if (!f->older || version >= model_config_field_since(f))
            continue;
        json_t *o = root;
        char key[128];
        const char *p = f->path;
        for (const char *dot; o && (dot = strchr(p, '.')); p = dot + 1) {
            snprintf(key, sizeof key, "%.*s", (int)(dot - p), p);
            json_t *next = json_object_get(o, key);
            if (!next && json_object_set_new(o, key, next = json_object()))
                return GT_ENOMEM;
            o = json_is_object(next) ? next : NULL;
        }
        if (o && !json_object_get(o, p) &&
            json_object_set_new(o, p, model_config_field_literal(f, f->older)))
            return GT_ENOMEM;
    }
    if (json_object_set_new(root, "config_version", json_integer(MODEL_CONFIG_VERSION)))
        return GT_ENOMEM;
    return GT_OK;
}

int model_config_upgrade(json_t *root, char *field, size_t field_len, gt_error *err)
{
    mcf_walk w = {field, field_len, err};
    if (field && field_len)
        field[0] = '\0';
    if (!json_is_object(root))
        return mcf_fail(&w, "", "the config must be a JSON object");
    int version, rc = read_version(&w, root, 0, &version);
    if (rc)
        return rc;
    if (upgrade(root, version))
        return gt_error_set(err, GT_ENOMEM, "out of memory upgrading a config");
    return GT_OK;
}

/* A config whose config_version, when absent, is absent_as: the current
 * version for a submitted one, 0 for a stored one. */
static int from_json_as(const json_t *root, int absent_as, model_config *cfg, char *field,
                        size_t field_len, gt_error *err)
{
    mcf_walk w = {field, field_len, err};
    if (field && field_len)
        field[0] = '\0';
    model_config_defaults(cfg);
    if (!json_is_object(root))
        return mcf_fail(&w, "", "the config must be a JSON object");
    int version, rc = read_version(&w, root, absent_as, &version);
    if (rc)
        return rc;
    if (version >= MODEL_CONFIG_VERSION)
        return walk_section(&w, 0, root, cfg);
    json_t *up = json_deep_copy(root);
    if (!up || upgrade(up, version)) {
        json_decref(up);
        return gt_error_set(err, GT_ENOMEM, "out of memory upgrading a config");
    }
    rc = walk_section(&w, 0, up, cfg);
    json_decref(up);
    return rc;
}

int model_config_from_json(const json_t *root, model_config *cfg, char *field,
                           size_t field_len, gt_error *err)
{
    return from_json_as(root, MODEL_CONFIG_VERSION, cfg, field, field_len, err);
}

int model_config_from_stored_json(const json_t *root, model_config *cfg, char *field,
                                  size_t field_len, gt_error *err)
{
    return from_json_as(root, 0, cfg, field, field_len, err);
}

/* text as JSON, then read as a submitted or a stored config. */
static int parse_as(const char *text, size_t len, int absent_as, model_config *cfg, char *field,
                    size_t field_len, gt_error *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (field && field_len)
            field[0] = '\0';
        return gt_error_set(err, GT_EINVAL, "malformed JSON at line %d, column %d: %s",
                            jerr.line, jerr.column, jerr.text);
    }
    int rc = from_json_as(root, absent_as, cfg, field, field_len, err);
    json_decref(root);
    return rc;
}

int model_config_parse(const char *text, size_t len, model_config *cfg, char *field,
                       size_t field_len, gt_error *err)
{
    return parse_as(text, len, MODEL_CONFIG_VERSION, cfg, field, field_len, err);
}

int model_config_parse_stored(const char *text, size_t len, model_config *cfg, char *field,
                              size_t field_len, gt_error *err)
{
    return parse_as(text, len, 0, cfg, field, field_len, err);
}

int model_config_load(const char *path, model_config *cfg, char *field, size_t field_len,
                      gt_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return gt_error_set(err, GT_EIO, "cannot open config %s", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            if (cap > (16u << 20)) {
                free(buf);
                fclose(f);
                return gt_error_set(err, GT_EINVAL, "config %s is larger than 16 MiB", path);
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return gt_error_set(err, GT_ENOMEM, "out of memory reading %s", path);
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return gt_error_set(err, GT_EIO, "error reading %s", path);
    }
    int rc = model_config_parse(buf, len, cfg, field, field_len, err);
    free(buf);
    if (rc)
        gt_error_wrap(err, "%s", path);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* back to JSON                                                             */
/* ------------------------------------------------------------------------ */

const char *model_objective_name(model_objective o) { return model_config_objectives[o]; }
const char *model_solver_name(model_solver s) { return model_config_solvers[s]; }
const char *model_trunk_kind_name(model_trunk_kind k) { return model_config_trunks[k]; }
const char *model_mode_name(model_stage2_mode m) { return model_config_modes[m]; }
const char *model_executor_name(model_executor_kind k)
{
    return model_config_executors[k ? 1 : 0];
}

/* Sets root.path (dotted) to v, making the objects on the way. */
static int set_path(json_t *root, const char *path, json_t *v)
{
    char key[128];
    json_t *o = root;
    for (const char *p = path;;) {
        const char *dot = strchr(p, '.');
        if (!dot)
            return json_object_set_new(o, p, v);
        snprintf(key, sizeof key, "%.*s", (int)(dot - p), p);
        json_t *next = json_object_get(o, key);
        if (!next) {
            next = json_object();
            if (json_object_set_new(o, key, next)) {
                json_decref(v);
                return -1;
            }
        }
        o = next;
        p = dot + 1;
    }
}

/* Whether f, a field whose sections are written, is written back. */
static int written(const model_config_field *f, const model_config *c)
{
    if (f->type == MCF_ENERGY || (f->flags & MCF_DEPRECATED))
        return 0;
    if (f->when && !f->when->test(c))
        return 0;
    if (f->flags & MCF_UNLESS_DEFAULT) {
        json_t *v = model_config_field_get(f, c), *d = model_config_field_literal(f, f->def);
        int same = json_equal(v, d);
        json_decref(v);
        json_decref(d);
        return !same;
    }
    return 1;
}

json_t *model_config_to_json(const model_config *c)
{
    json_t *root = json_object();
    if (!root)
        return NULL;
    for (int i = 1; i < NFIELDS; i++) {
        const model_config_field *f = &FIELDS[i];
        if (f->type == MCF_SECTION) {
            /* a section not written: none of its rows either */
            if (f->when && !f->when->test(c))
                i = section_end(i) - 1;
            continue;
        }
        if (written(f, c) && set_path(root, f->path, model_config_field_get(f, c))) {
            json_decref(root);
            return NULL;
        }
    }
    return root;
}
