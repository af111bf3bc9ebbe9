/* run_fixture: a tiny run recorded in a test's own database, as the
 * service records one (test_model_pack, test_sampling).  Header only, so
 * that its checks count in the test's own check.h tally. */
#ifndef RUN_FIXTURE_H
#define RUN_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "check.h"
#include "model_config.h"
#include "runs.h"
#include "svc_harness.h"

/* A tiny run (svc_tiny_config: steps a stage, validated and checkpointed
 * every 5) recorded in db as the service records one, every default
 * filled in; with accept, a small acceptance test too (200 showers, a
 * narrow classifier).  Its id, 0 when a check failed. */
static inline int64_t run_fixture_record(store *db, const char *name, int steps,
                                                int accept)
{
    char *text = svc_tiny_config(name, steps, 5, 5, NULL);
    if (accept)
        text = svc_with_accept(text, 200, 16, 5, 0.9);
    model_config cfg;
    char field[128];
    gt_error err = {0};
    int64_t id = 0;
    CHECK_EQ_INT(model_config_parse(text, strlen(text), &cfg, field, sizeof field, &err), GT_OK);
    free(text);
    json_t *canon = model_config_to_json(&cfg);
    text = json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(canon);
    CHECK_EQ_INT(runs_create(db, cfg.name, text, "fp32", NULL, cfg.steps1 + cfg.steps2, &id,
                             &err), GT_OK);
    free(text);
    return id;
}

#endif
