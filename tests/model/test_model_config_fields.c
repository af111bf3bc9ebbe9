/* The table of config fields (engine/model/model_config_fields.c), row by
 * row: the table is well formed, every default is what a config that
 * leaves the field out gets, every range and type refusal names the row's
 * path, every section refuses a key it has no row for, and every field
 * survives the trip through model_config_to_json and back.  The defaults
 * written back are pinned to what the hand-written parser of before the
 * table wrote.  config_version: what a config leaves out means the default
 * in a submitted config of any version and in a stored one of the current
 * version, the row's older value in a stored one of before. */
#include "check.h"
#include "config_eras.h"
#include "model_config.h"
#include "model_config_fields.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* model_config_to_json of {} before the table (the parser written out by
 * hand), compact with sorted keys. */
static const char defaults_before[] =
    "{\"dataset\":{\"geometry\":\"dataset_2\",\"max_showers\":0,\"split_seed\":7,\"synthetic\":"
    "{\"energy\":{\"dist\":\"log-uniform\",\"max_mev\":1000000.0,\"min_mev\":1000.0},\"n\":20000,"
    "\"seed\":1},\"val_fraction\":0.1},\"model\":{\"stage1\":{\"objective\":\"flow\",\"profile\":"
    "true,\"trunk\":{\"blocks\":2,\"emb_dim\":16,\"hidden\":64,\"kind\":\"expert\",\"skip\":"
    "\"none\"}},\"stage2\":{\"count_stick\":true,\"dequantize\":true,\"dequantize_top\":0.0001,"
    "\"history\":0,\"keep_largest\":true,\"layer_weight\":4.0,\"mode\":\"oneshot\",\"objective\":"
    "\"flow\",\"ring_counts\":true,\"rings\":true,\"skip_spent_layers\":false,\"trunk\":"
    "{\"blocks\":3,\"emb_dim\":16,\"hidden\":256,\"kind\":\"expert\",\"skip\":\"gated\"},"
    "\"voxel_alpha\":1e-10}},\"name\":\"run\",\"sample\":{\"solver\":\"heun\",\"steps\":20,"
    "\"symmetrize\":true,"
    "\"time_power\":2},\"train\":{\"adam_eps\":1e-08,\"batch\":256,\"beta1\":0.9,\"beta2\":0.999,"
    "\"ckpt_every\":500,\"device\":\"auto\",\"ema\":0.0,\"grad_clip\":1.0,\"keep_checkpoints\":2,"
    "\"log_every\":10,\"lr\":0.001,\"min_lr_ratio\":0.05,\"precision\":\"fp32\",\"seed\":1,"
    "\"steps\":{\"stage1\":1000,\"stage2\":2000},\"val_every\":200,\"val_size\":1024,"
    "\"warmup_steps\":100,\"weight_decay\":0.01}}";

static const model_config_field *F;
static int N;

static int is_leaf(const model_config_field *f)
{
    return f->type != MCF_SECTION && f->type != MCF_ENERGY;
}

/* {a: {b: {c: v}}} for the path "a.b.c" (v is stolen); extra (may be NULL)
 * is merged in first, so a row can be named in the context it needs. */
static json_t *doc_with(const char *path, json_t *v, const char *extra)
{
    json_t *root = extra ? json_loads(extra, 0, NULL) : json_object();
    config_eras_set(root, path, v);
    json_decref(v);
    return root;
}

/* The context a row is read or written back in. */
static const char *context(const model_config_field *f)
{
    if (f->flags & MCF_SLURM_ONLY)
        return "{\"executor\":{\"kind\":\"slurm\"}}";
    if (strstr(f->path, "stage1.wgan"))
        return "{\"model\":{\"stage1\":{\"objective\":\"wgan\"}}}";
    if (strstr(f->path, "stage2.wgan"))
        return "{\"model\":{\"stage2\":{\"objective\":\"wgan\"}}}";
    if (strstr(f->path, "stage1.trunk.") && f->when)
        return "{\"model\":{\"stage1\":{\"trunk\":{\"kind\":\"routed\"}}}}";
    if (strstr(f->path, "stage2.trunk.") && f->when)
        return "{\"model\":{\"stage2\":{\"trunk\":{\"kind\":\"routed\"}}}}";
    if (!strcmp(f->path, "model.stage2.history"))
        return "{\"model\":{\"stage2\":{\"mode\":\"autoregressive\"}}}";
    if (!strcmp(f->path, "dataset.synthetic.emax_mev"))
        return "{\"dataset\":{\"synthetic\":{\"emin_mev\":1}}}";
    return NULL;
}

static int parse_doc(json_t *doc, model_config *cfg, char *field, gt_error *err)
{
    int rc = model_config_from_json(doc, cfg, field, 128, err);
    json_decref(doc);
    return rc;
}

static void expect_refused(const model_config_field *f, json_t *v, const char *why)
{
    char *text = json_dumps(v, JSON_ENCODE_ANY);
    model_config cfg;
    char field[128];
    gt_error err = {0};
    int rc = parse_doc(doc_with(f->path, v, context(f)), &cfg, field, &err);
    CHECK_MSG(rc == GT_EINVAL && strcmp(field, f->path) == 0,
              "%s = %s (%s): rc %d, field '%s': %s", f->path, text, why, rc, field,
              err.message);
    free(text);
}

/* The table itself: unique paths, each row under a section that comes
 * before it with all its rows together, defaults and older values that
 * read as their type and lie in range. */
static void test_table(void)
{
    CHECK(N > 100);
    CHECK(F[0].type == MCF_SECTION && F[0].path[0] == '\0');
    for (int i = 1; i < N; i++) {
        const model_config_field *f = &F[i];
        for (int j = 0; j < i; j++)
            CHECK_MSG(strcmp(F[j].path, f->path) != 0, "%s twice", f->path);
        /* its section: the nearest row above that is its parent path */
        char parent[128];
        const char *dot = strrchr(f->path, '.');
        snprintf(parent, sizeof parent, "%.*s", dot ? (int)(dot - f->path) : 0, f->path);
        int p = -1;
        for (int j = i - 1; j >= 0 && p < 0; j--)
            if (strcmp(F[j].path, parent) == 0)
                p = j;
        CHECK_MSG(p >= 0, "%s: no section %s above it", f->path, parent);
        for (int j = p + 1; p >= 0 && j < i; j++) {
            size_t n = strlen(parent);
            CHECK_MSG(n == 0 || (strncmp(F[j].path, parent, n) == 0 && F[j].path[n] == '.'),
                      "%s: the rows of %s are not together (%s between)", f->path, parent,
                      F[j].path);
        }
        if (p >= 0)
            CHECK_MSG(F[p].type == MCF_SECTION || (F[p].type == MCF_ENERGY &&
                                                   (f->flags & MCF_BY_PARENT)),
                      "%s: under %s, which is no section", f->path, parent);
        CHECK_MSG(f->doc && f->doc[0], "%s: no doc", f->path);
        if (f->type == MCF_ENUM || f->type == MCF_NAME)
            CHECK_MSG(f->names != NULL, "%s: no names", f->path);
        if (!is_leaf(f))
            continue;
        CHECK_MSG(f->def || (f->flags & MCF_DEPRECATED) || f->type == MCF_VERSION,
                  "%s: no default", f->path);
        const char *lits[2] = {f->def, f->older};
        for (int k = 0; k < 2; k++) {
            if (!lits[k])
                continue;
            json_t *v = model_config_field_literal(f, lits[k]);
            char *end = NULL;
            double x = strtod(lits[k], &end);
            switch (f->type) {
            case MCF_BOOL:
                CHECK_MSG(!strcmp(lits[k], "true") || !strcmp(lits[k], "false"), "%s: %s",
                          f->path, lits[k]);
                break;
            case MCF_INT:
            case MCF_INT64:
            case MCF_SEED:
                CHECK_MSG(*end == '\0' && json_integer_value(v) >= f->ilo &&
                              json_integer_value(v) <= f->ihi,
                          "%s: %s", f->path, lits[k]);
                break;
            case MCF_REAL:
                CHECK_MSG(*end == '\0' && x >= f->lo && !(f->lo_open && x == f->lo) &&
                              x <= f->hi,
                          "%s: %s", f->path, lits[k]);
                break;
            case MCF_ENUM:
            case MCF_NAME: {
                int found = 0;
                for (int n = 0; f->names[n]; n++)
                    found |= !strcmp(f->names[n], lits[k]);
                CHECK_MSG(found, "%s: %s is none of its names", f->path, lits[k]);
                break;
            }
            default: break;
            }
            json_decref(v);
        }
        /* an older value from before versions (since 1) was written into
         * stored configs by a migration, which the row names; a field of a
         * later version needs none (the upgrade reads config_version) */
        if (f->older && model_config_field_since(f) == 1)
            CHECK_MSG(f->pinned_by != NULL, "%s", f->path);
        if (model_config_field_since(f) > 1)
            CHECK_MSG(f->pinned_by == NULL, "%s", f->path);
    }
}

/* {} gives every row its default, and writes back what it did before the
 * table. */
static void test_defaults(void)
{
    model_config cfg, d;
    char field[128];
    gt_error err = {0};
    CHECK_EQ_INT(model_config_parse("{}", 2, &cfg, field, sizeof field, &err), GT_OK);
    model_config_defaults(&d);
    CHECK(memcmp(&cfg, &d, sizeof cfg) == 0);
    for (int i = 0; i < N; i++) {
        const model_config_field *f = &F[i];
        if (!is_leaf(f) || !f->def)
            continue;
        json_t *got = model_config_field_get(f, &cfg);
        json_t *want = model_config_field_literal(f, f->def);
        char *g = json_dumps(got, JSON_ENCODE_ANY);
        CHECK_MSG(json_equal(got, want), "%s: %s, its default is %s", f->path, g, f->def);
        free(g);
        json_decref(got);
        json_decref(want);
        /* naming the default is the same as leaving it out (but for the
         * path: its default, "", is no file) */
        if (!strcmp(f->path, "dataset.path"))
            continue;
        model_config named;
        int rc = parse_doc(doc_with(f->path, model_config_field_literal(f, f->def), context(f)),
                           &named, field, &err);
        CHECK_MSG(rc == GT_OK, "%s = %s: %s", f->path, f->def, err.message);
    }
    json_t *back = model_config_to_json(&cfg);
    CHECK_EQ_INT(json_integer_value(json_object_get(back, "config_version")),
                 MODEL_CONFIG_VERSION);
    json_object_del(back, "config_version"); /* what the versions added */
    json_t *before = json_loads(defaults_before, 0, NULL);
    CHECK(before != NULL);
    char *text = json_dumps(back, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_MSG(json_equal(back, before), "%s", text);
    free(text);
    json_decref(back);
    json_decref(before);
}

/* Every leaf refuses a value of another JSON type and one outside its
 * range or names, naming its own path. */
static void test_refusals(void)
{
    for (int i = 0; i < N; i++) {
        const model_config_field *f = &F[i];
        if (!is_leaf(f))
            continue;
        switch (f->type) {
        case MCF_BOOL:
            expect_refused(f, json_integer(1), "an integer");
            expect_refused(f, json_string("true"), "a string");
            break;
        case MCF_INT:
        case MCF_INT64:
        case MCF_SEED:
            expect_refused(f, json_real(1.5), "a fraction");
            expect_refused(f, json_string("1"), "a string");
            if (f->ilo > INT64_MIN)
                expect_refused(f, json_integer(f->ilo - 1), "below the range");
            if (f->ihi < INT64_MAX)
                expect_refused(f, json_integer(f->ihi + 1), "above the range");
            break;
        case MCF_REAL:
            expect_refused(f, json_string("1"), "a string");
            expect_refused(f, json_null(), "null");
            expect_refused(f, json_real(f->lo_open ? f->lo : f->lo - (f->lo ? f->lo / 2 : 1)),
                           "below the range");
            expect_refused(f, json_real(f->hi * 2 + 1), "above the range");
            break;
        case MCF_STRING: {
            expect_refused(f, json_integer(1), "an integer");
            char *s = malloc(f->size + 1);
            memset(s, 'a', f->size);
            s[f->size] = '\0';
            expect_refused(f, json_string(s), "too long");
            free(s);
            break;
        }
        case MCF_VERSION:
            expect_refused(f, json_string("1"), "a string");
            expect_refused(f, json_integer(0), "below the range");
            expect_refused(f, json_integer(MODEL_CONFIG_VERSION + 1), "a newer version");
            break;
        case MCF_ENUM:
        case MCF_NAME:
            expect_refused(f, json_integer(0), "an integer");
            expect_refused(f, json_string("no-such-name"), "none of its names");
            break;
        default: break;
        }
    }
}

/* Every section refuses a key it has no row for. */
static void test_unknown_keys(void)
{
    for (int i = 0; i < N; i++) {
        const model_config_field *f = &F[i];
        if (f->type != MCF_SECTION)
            continue;
        char path[160];
        snprintf(path, sizeof path, "%s%sno_such_key", f->path, f->path[0] ? "." : "");
        model_config cfg;
        char field[128];
        gt_error err = {0};
        int rc = parse_doc(doc_with(path, json_integer(1), NULL), &cfg, field, &err);
        CHECK_MSG(rc == GT_EINVAL && !strcmp(field, path) && strstr(err.message, "unknown key"),
                  "%s: rc %d, field '%s': %s", path, rc, field, err.message);
    }
}

/* Some value of f other than its default that a config may hold. */
static int other_values(const model_config_field *f, json_t *out[4])
{
    int n = 0;
    switch (f->type) {
    case MCF_BOOL: out[n++] = json_boolean(strcmp(f->def, "true") != 0); break;
    case MCF_INT:
    case MCF_INT64:
    case MCF_SEED: {
        json_int_t d = strtoll(f->def, NULL, 10);
        json_int_t c[3] = {f->ihi < INT64_MAX ? f->ihi : d + 12345, f->ilo, (f->ilo + 2 + d)};
        for (int k = 0; k < 3; k++)
            if (c[k] != d && c[k] >= f->ilo && c[k] <= f->ihi)
                out[n++] = json_integer(c[k]);
        break;
    }
    case MCF_REAL: {
        double d = strtod(f->def, NULL);
        double c[3] = {f->hi, (f->lo + f->hi) / 2 * 0.75, f->lo_open ? f->hi / 3 : f->lo};
        for (int k = 0; k < 3; k++)
            if (c[k] != d)
                out[n++] = json_real(c[k]);
        break;
    }
    case MCF_STRING: {
        static const char *const s[] = {"b", "cpu", "dataset_3", "cuda:1"};
        for (int k = 0; k < 4; k++)
            if (strcmp(s[k], f->def))
                out[n++] = json_string(s[k]);
        break;
    }
    case MCF_ENUM:
    case MCF_NAME:
        for (int k = 0; f->names[k] && n < 4; k++)
            if (strcmp(f->names[k], f->def))
                out[n++] = json_string(f->names[k]);
        break;
    default: break;
    }
    return n;
}

/* The value at a dotted path of a document, or NULL. */
static json_t *at_path(json_t *o, const char *path)
{
    char key[128];
    for (const char *p = path; o;) {
        const char *dot = strchr(p, '.');
        if (!dot)
            return json_object_get(o, p);
        snprintf(key, sizeof key, "%.*s", (int)(dot - p), p);
        o = json_object_get(o, key);
        p = dot + 1;
    }
    return NULL;
}

/* Each field with another value than its default: the config holds it,
 * and the config written back reads as itself, every field it writes
 * holding the value it had. */
static void test_round_trip(void)
{
    for (int i = 0; i < N; i++) {
        const model_config_field *f = &F[i];
        if (!is_leaf(f) || !f->def)
            continue;
        json_t *vals[4];
        int n = other_values(f, vals), parsed = 0;
        for (int k = 0; k < n; k++) {
            model_config cfg, back;
            char field[128];
            gt_error err = {0};
            json_t *want = f->type == MCF_REAL ? json_real(json_number_value(vals[k]))
                                               : json_incref(vals[k]);
            if (parse_doc(doc_with(f->path, vals[k], context(f)), &cfg, field, &err) != GT_OK) {
                json_decref(want);
                continue; /* refused by a rule between fields: another value */
            }
            parsed++;
            json_t *got = model_config_field_get(f, &cfg);
            /* a rule between fields may set sample.solver and time_power */
            CHECK_MSG(json_equal(got, want) || !strncmp(f->path, "sample.", 7),
                      "%s: not the value asked for", f->path);
            json_decref(got);
            json_decref(want);
            json_t *j1 = model_config_to_json(&cfg);
            char *text = json_dumps(j1, JSON_COMPACT);
            CHECK_MSG(model_config_parse(text, strlen(text), &back, field, sizeof field, &err) ==
                          GT_OK,
                      "%s: %s", f->path, err.message);
            json_t *j2 = model_config_to_json(&back);
            CHECK_MSG(json_equal(j1, j2), "%s: %s", f->path, text);
            for (int g = 0; g < N; g++) {
                if (!is_leaf(&F[g]) || !at_path(j1, F[g].path))
                    continue;
                json_t *a = model_config_field_get(&F[g], &cfg);
                json_t *b = model_config_field_get(&F[g], &back);
                CHECK_MSG(json_equal(a, b) && json_equal(a, at_path(j1, F[g].path)),
                          "%s, written back: %s", f->path, F[g].path);
                json_decref(a);
                json_decref(b);
            }
            json_decref(j1);
            json_decref(j2);
            free(text);
        }
        CHECK_MSG(parsed > 0, "%s: no other value parsed", f->path);
    }
}

/* The configs each era recorded (tests/model/config_eras.json), read as
 * stored configs: each reads to what its run was trained and sampled with,
 * the config asked for with what the era had before each later feature.
 * The newest era's configs are what model_config_to_json writes today,
 * but for config_version (the newest era names version 1; a config that
 * names no simulator writes none back, so version 2 writes the same). */
static void test_eras(void)
{
    json_t *fx = config_eras_load();
    CHECK(fx != NULL);
    if (!fx)
        return;
    json_t *eras = json_object_get(fx, "eras");
    CHECK(json_array_size(eras) >= 15);
    size_t e, i;
    json_t *era, *cfg;
    json_array_foreach(eras, e, era) {
        int schema = (int)json_integer_value(json_object_get(era, "schema"));
        const char *commit = json_string_value(json_object_get(era, "commit"));
        json_array_foreach(json_object_get(era, "configs"), i, cfg) {
            char field[128];
            gt_error err = {0};
            model_config want, got, again, up_cfg;
            /* what the run had: the config asked for, and the era's values
             * of the features that came after it */
            CHECK_EQ_INT(config_eras_had(fx, i, schema, &want), GT_OK);
            char *text = json_dumps(cfg, JSON_COMPACT);
            int rc = model_config_parse_stored(text, strlen(text), &got, field, sizeof field, &err);
            CHECK_MSG(rc == GT_OK && memcmp(&got, &want, sizeof got) == 0,
                      "era %d (%s), config %zu: %s", schema, commit, i,
                      rc ? err.message : "other values");
            /* the upgrade itself: the current version, read as submitted */
            json_t *up = json_deep_copy(cfg);
            CHECK_EQ_INT(model_config_upgrade(up, field, sizeof field, &err), GT_OK);
            CHECK_EQ_INT(json_integer_value(json_object_get(up, "config_version")),
                         MODEL_CONFIG_VERSION);
            CHECK_EQ_INT(model_config_from_json(up, &up_cfg, field, sizeof field, &err), GT_OK);
            CHECK_MSG(memcmp(&up_cfg, &want, sizeof want) == 0, "era %d, config %zu", schema, i);
            json_decref(up);
            /* written back now, it reads the same as stored and as submitted */
            json_t *back = model_config_to_json(&got);
            char *btext = json_dumps(back, JSON_COMPACT);
            CHECK_EQ_INT(model_config_parse_stored(btext, strlen(btext), &again, field,
                                                   sizeof field, &err),
                         GT_OK);
            CHECK(memcmp(&again, &want, sizeof want) == 0);
            CHECK_EQ_INT(model_config_parse(btext, strlen(btext), &again, field, sizeof field,
                                            &err),
                         GT_OK);
            CHECK(memcmp(&again, &want, sizeof want) == 0);
            if (e + 1 == json_array_size(eras)) {
                /* but for the version it names (the era's, or none) */
                json_t *era_cfg = json_deep_copy(cfg);
                json_object_del(back, "config_version");
                json_object_del(era_cfg, "config_version");
                CHECK_MSG(json_equal(back, era_cfg), "the newest era's config %zu is written "
                                                     "otherwise today: %s", i, btext);
                json_decref(era_cfg);
            }
            json_decref(back);
            free(btext);
            free(text);
        }
    }
    json_decref(fx);
}

/* Versions: what a config leaves out, submitted or stored, of each version;
 * a newer version is refused. */
static void test_versions(void)
{
    model_config cfg;
    char field[128];
    gt_error err = {0};
    /* submitted without a version: the defaults */
    CHECK_EQ_INT(model_config_parse("{}", 2, &cfg, field, sizeof field, &err), GT_OK);
    CHECK(cfg.symmetrize == 1 && cfg.stage2.rings == 1 && cfg.time_power == 2);
    /* stored without a version: before versions, the older values */
    CHECK_EQ_INT(model_config_parse_stored("{}", 2, &cfg, field, sizeof field, &err), GT_OK);
    for (int i = 0; i < N; i++) {
        if (!F[i].older)
            continue;
        json_t *got = model_config_field_get(&F[i], &cfg);
        json_t *want = model_config_field_literal(&F[i], F[i].older);
        CHECK_MSG(json_equal(got, want), "stored {}: %s is not %s", F[i].path, F[i].older);
        json_decref(got);
        json_decref(want);
    }
    /* of the current version, stored or submitted: the defaults */
    char cur[64];
    snprintf(cur, sizeof cur, "{\"config_version\":%d}", MODEL_CONFIG_VERSION);
    model_config d, s;
    model_config_defaults(&d);
    CHECK_EQ_INT(model_config_parse_stored(cur, strlen(cur), &s, field, sizeof field, &err),
                 GT_OK);
    CHECK(memcmp(&s, &d, sizeof d) == 0);
    CHECK_EQ_INT(model_config_parse(cur, strlen(cur), &s, field, sizeof field, &err), GT_OK);
    CHECK(memcmp(&s, &d, sizeof d) == 0);
    /* a newer version or a bad one: refused, naming the field */
    const char *bad[] = {"{\"config_version\":0}", "{\"config_version\":\"1\"}",
                         "{\"config_version\":1.0}", "{\"config_version\":99}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(model_config_parse(bad[i], strlen(bad[i]), &s, field, sizeof field, &err),
                     GT_EINVAL);
        CHECK_MSG(!strcmp(field, "config_version"), "%s: %s", bad[i], field);
        CHECK_EQ_INT(model_config_parse_stored(bad[i], strlen(bad[i]), &s, field, sizeof field,
                                               &err),
                     GT_EINVAL);
        json_t *j = json_loads(bad[i], 0, NULL);
        CHECK_EQ_INT(model_config_upgrade(j, field, sizeof field, &err), GT_EINVAL);
        CHECK(!strcmp(field, "config_version"));
        json_decref(j);
    }
    CHECK_MSG(strstr(err.message, "newer giant") != NULL, "%s", err.message);
    /* the upgrade writes the older values in, keeps what a config names,
     * and leaves a section that is no object to the parser */
    json_t *j = json_loads("{\"model\":{\"stage2\":{\"rings\":true}},\"sample\":[]}", 0, NULL);
    CHECK_EQ_INT(model_config_upgrade(j, field, sizeof field, &err), GT_OK);
    json_t *s2 = json_object_get(json_object_get(j, "model"), "stage2");
    CHECK(json_is_true(json_object_get(s2, "rings")));
    CHECK(json_is_false(json_object_get(s2, "ring_counts")));
    CHECK(json_is_array(json_object_get(j, "sample")));
    CHECK_EQ_INT(model_config_from_json(j, &s, field, sizeof field, &err), GT_EINVAL);
    CHECK(!strcmp(field, "sample"));
    json_decref(j);
    /* the upgrade is a no-op on a config of the current version */
    j = model_config_to_json(&d);
    json_t *copy = json_deep_copy(j);
    CHECK_EQ_INT(model_config_upgrade(copy, field, sizeof field, &err), GT_OK);
    CHECK(json_equal(j, copy));
    json_decref(j);
    json_decref(copy);
}

int main(void)
{
    F = model_config_fields;
    N = model_config_field_count;
    test_table();
    test_defaults();
    test_refusals();
    test_unknown_keys();
    test_round_trip();
    test_versions();
    test_eras();
    return check_finish();
}
