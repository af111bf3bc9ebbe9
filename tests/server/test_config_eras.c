/* Existing databases still upgrade: for every schema version N, a database
 * with migrations 0001..N applied holds runs whose configs are what the
 * giant of that era recorded (tests/model/config_eras.json); opened by this
 * build (every migration applied) each run's config reads, as the service
 * reads it, to what the run was trained and sampled with.  So does the same
 * config as a model file of that era carried it, through model_pack_config,
 * without the SQL migrations: the config upgrade gives what they gave. */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/config_eras.h"
#include "model_config.h"
#include "model_pack.h"
#include "runs.h"
#include "store.h"

static void check_era(const store_migration *list, int n, const json_t *fx, const json_t *era)
{
    int schema = (int)json_integer_value(json_object_get(era, "schema"));
    const char *commit = json_string_value(json_object_get(era, "commit"));
    const json_t *configs = json_object_get(era, "configs");
    gt_error err = {0};
    store *db = NULL;
    CHECK(schema >= 1 && schema <= n && list[schema - 1].version == schema);
    CHECK_EQ_INT(store_open(&db, ":memory:", &err), GT_OK);
    /* the database of the era, its runs as it recorded them */
    int applied = 0;
    CHECK_EQ_INT(store_migrate(db, list, schema, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, schema);
    size_t i;
    json_t *cfg;
    json_array_foreach(configs, i, cfg) {
        char *text = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS);
        CHECK_EQ_INT(store_exec(db, "recording a run", "INSERT INTO runs(config) VALUES (?)",
                                STORE_ARGS(STORE_TEXT(text)), &err),
                     GT_OK);
        free(text);
    }
    /* opened by this build */
    CHECK_EQ_INT(store_migrate(db, list, n, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, n - schema);
    json_array_foreach(configs, i, cfg) {
        model_config want, got;
        char field[128] = "";
        CHECK_EQ_INT(config_eras_had(fx, i, schema, &want), GT_OK);
        char *text = NULL;
        CHECK_EQ_INT(runs_config(db, (int64_t)i + 1, &text, &err), GT_OK);
        int rc = text ? model_config_parse_stored(text, strlen(text), &got, field, sizeof field,
                                                  &err)
                      : GT_EINVAL;
        CHECK_MSG(rc == GT_OK && memcmp(&got, &want, sizeof got) == 0,
                  "schema %d (%s), run %zu from the database: %s", schema, commit, i + 1,
                  rc ? err.message : "other values");
        /* and as the service's call sites read it today (a submitted
         * config's view): the migrations wrote every changed field in */
        rc = text ? model_config_parse(text, strlen(text), &got, field, sizeof field, &err)
                  : GT_EINVAL;
        CHECK_MSG(rc == GT_OK && memcmp(&got, &want, sizeof got) == 0,
                  "schema %d (%s), run %zu read as submitted: %s", schema, commit, i + 1,
                  rc ? err.message : "other values");
        free(text);
        /* the config.json of a model file exported in that era: what the
         * era recorded, without the later migrations */
        char *era_text = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS);
        model_pack p;
        memset(&p, 0, sizeof p);
        p.config_json = era_text;
        p.config_len = strlen(era_text);
        rc = model_pack_config(&p, &got, field, sizeof field, &err);
        CHECK_MSG(rc == GT_OK && memcmp(&got, &want, sizeof got) == 0,
                  "schema %d (%s), config %zu as a model file: %s", schema, commit, i,
                  rc ? err.message : "other values");
        free(era_text);
    }
    CHECK_EQ_INT(store_close(db, &err), GT_OK);
}

int main(void)
{
    json_t *fx = config_eras_load();
    CHECK(fx != NULL);
    if (!fx)
        return check_finish();
    store_migration list[STORE_MAX_MIGRATIONS];
    int n = 0;
    gt_error err = {0};
    CHECK_EQ_INT(store_builtin_migrations(list, &n, &err), GT_OK);
    json_t *eras = json_object_get(fx, "eras"), *era;
    /* every schema version has an era */
    for (int v = 1; v <= n; v++) {
        int found = 0;
        size_t e;
        json_array_foreach(eras, e, era)
            found |= json_integer_value(json_object_get(era, "schema")) == v;
        CHECK_MSG(found, "no era of schema version %d in config_eras.json", v);
    }
    size_t e;
    json_array_foreach(eras, e, era)
        check_era(list, n, fx, era);
    json_decref(fx);
    return check_finish();
}
