/* Run-config parsing: defaults, every section, and that each kind of bad
 * input is refused with the dotted path of the offending field. */
#include "check.h"
#include "model_config.h"

#include <stdlib.h>
#include <string.h>

static int parse(const char *text, model_config *cfg, char *field, gt_error *err)
{
    return model_config_parse(text, strlen(text), cfg, field, 128, err);
}

static void expect_bad(const char *text, const char *want_field)
{
    model_config cfg;
    char field[128];
    gt_error err;
    int rc = parse(text, &cfg, field, &err);
    CHECK_MSG(rc == GT_EINVAL, "accepted: %s", text);
    CHECK_MSG(strcmp(field, want_field) == 0, "field '%s', want '%s' (%s)", field, want_field,
              err.message);
}

/* 1 when cfg's canonical JSON writes model.<stage>.<key> as false. */
static int written_false(const model_config *cfg, const char *stage, const char *key)
{
    json_t *o = model_config_to_json(cfg);
    int is_false = json_is_false(
        json_object_get(json_object_get(json_object_get(o, "model"), stage), key));
    json_decref(o);
    return is_false;
}

int main(void)
{
    model_config cfg;
    char field[128];
    gt_error err;

    /* Empty object = all defaults. */
    CHECK_EQ_INT(parse("{}", &cfg, field, &err), GT_OK);
    CHECK_EQ_INT(cfg.batch, 256);
    CHECK(strcmp(cfg.geometry, "dataset_2") == 0);
    CHECK_EQ_INT(cfg.bf16, 0);
    CHECK_EQ_INT(cfg.solver, MODEL_SOLVER_HEUN);
    /* the stage-2 representation and trunk defaults (engine/model/README.md) */
    CHECK_EQ_INT(cfg.stage2.dequantize, 1);
    CHECK_EQ_INT(cfg.stage2.trunk.skip, MODEL_SKIP_GATED);
    CHECK_EQ_INT(cfg.stage1.trunk.skip, MODEL_SKIP_NONE);
    CHECK_CLOSE(cfg.stage2.voxel_alpha, 1e-10, 0, 1e-25);
    CHECK_EQ_INT(cfg.stage2.rings, 1);
    CHECK(cfg.stage2.dequantize_top == 1e-4);
    CHECK(cfg.stage2.skip_spent_layers == 0); /* measured, not better (model README) */
    CHECK_EQ_INT(cfg.stage2.history, 0);      /* the conditions before the field */
    CHECK(cfg.ema == 0);                      /* the trained weights themselves */
    CHECK_EQ_INT(cfg.stage2.keep_largest, 1);
    CHECK(cfg.stage2.layer_weight == 4);
    CHECK_EQ_INT(cfg.stage2.ring_counts, 1);
    CHECK_EQ_INT(cfg.stage2.count_stick, 1);
    CHECK_EQ_INT(cfg.stage1.profile, 1);
    CHECK_EQ_INT(cfg.time_power, 2);
    CHECK_EQ_INT(cfg.symmetrize, 1);
    /* a run recorded before them names the old values (migration 0003) */
    CHECK_EQ_INT(parse("{\"model\":{\"stage1\":{\"trunk\":{\"skip\":\"gated\"}},"
                       "\"stage2\":{\"dequantize\":false,\"voxel_alpha\":1e-6,"
                       "\"rings\":false,\"dequantize_top\":0.1,"
                       "\"keep_largest\":false,\"layer_weight\":1,"
                       "\"skip_spent_layers\":true,"
                       "\"trunk\":{\"skip\":\"none\"}}}}",
                       &cfg, field, &err),
                 GT_OK);
    CHECK_EQ_INT(cfg.stage2.dequantize, 0);
    CHECK_EQ_INT(cfg.stage2.trunk.skip, MODEL_SKIP_NONE);
    CHECK_EQ_INT(cfg.stage1.trunk.skip, MODEL_SKIP_GATED);
    CHECK_CLOSE(cfg.stage2.voxel_alpha, 1e-6, 0, 1e-20);
    CHECK_EQ_INT(cfg.stage2.rings, 0);
    CHECK(cfg.stage2.dequantize_top == 0.1);
    CHECK_EQ_INT(cfg.stage2.keep_largest, 0);
    CHECK(cfg.stage2.layer_weight == 1);
    CHECK_EQ_INT(cfg.stage2.ring_counts, 0); /* no rings: no counts, unasked */
    CHECK_EQ_INT(cfg.stage2.count_stick, 0);  /* nor their stick-breaking */
    CHECK_EQ_INT(cfg.stage2.skip_spent_layers, 1);
    {
        json_t *o = model_config_to_json(&cfg);
        json_t *s2 = json_object_get(json_object_get(o, "model"), "stage2");
        CHECK(json_is_false(json_object_get(s2, "dequantize")));
        CHECK(json_real_value(json_object_get(s2, "voxel_alpha")) == 1e-6);
        CHECK(json_is_false(json_object_get(s2, "rings")));
        CHECK(json_real_value(json_object_get(s2, "dequantize_top")) == 0.1);
        CHECK(json_is_false(json_object_get(s2, "keep_largest")));
        CHECK(json_number_value(json_object_get(s2, "layer_weight")) == 1);
        CHECK(json_is_false(json_object_get(s2, "ring_counts")));
        CHECK(json_is_false(json_object_get(s2, "count_stick")));
        CHECK(json_is_true(json_object_get(s2, "skip_spent_layers")));
        CHECK(!strcmp(json_string_value(json_object_get(json_object_get(s2, "trunk"), "skip")),
                      "none"));
        json_decref(o);
    }
    /* stage 2's representation: wrong types, out of range, on stage 1, counts
     * without rings, count_stick without counts */
    static const char *const repr_refused[][2] = {
        {"{\"model\":{\"stage2\":{\"dequantize\":1}}}", "model.stage2.dequantize"},
        {"{\"model\":{\"stage1\":{\"dequantize\":true}}}", "model.stage1.dequantize"},
        {"{\"model\":{\"stage2\":{\"voxel_alpha\":0}}}", "model.stage2.voxel_alpha"},
        {"{\"model\":{\"stage2\":{\"voxel_alpha\":0.1}}}", "model.stage2.voxel_alpha"},
        {"{\"model\":{\"stage2\":{\"rings\":\"yes\"}}}", "model.stage2.rings"},
        {"{\"model\":{\"stage1\":{\"rings\":true}}}", "model.stage1.rings"},
        {"{\"model\":{\"stage2\":{\"dequantize_top\":0}}}", "model.stage2.dequantize_top"},
        {"{\"model\":{\"stage2\":{\"dequantize_top\":1.5}}}", "model.stage2.dequantize_top"},
        {"{\"model\":{\"stage2\":{\"keep_largest\":0}}}", "model.stage2.keep_largest"},
        {"{\"model\":{\"stage2\":{\"ring_counts\":1}}}", "model.stage2.ring_counts"},
        {"{\"model\":{\"stage1\":{\"ring_counts\":true}}}", "model.stage1.ring_counts"},
        {"{\"model\":{\"stage2\":{\"rings\":false,\"ring_counts\":true}}}",
         "model.stage2.ring_counts"},
        {"{\"model\":{\"stage2\":{\"count_stick\":1}}}", "model.stage2.count_stick"},
        {"{\"model\":{\"stage1\":{\"count_stick\":true}}}", "model.stage1.count_stick"},
        {"{\"model\":{\"stage2\":{\"ring_counts\":false,\"count_stick\":true}}}",
         "model.stage2.count_stick"},
    };
    for (size_t i = 0; i < sizeof repr_refused / sizeof repr_refused[0]; i++)
        expect_bad(repr_refused[i][0], repr_refused[i][1]);
    /* a run recorded before counts names them off, with rings on */
    CHECK_EQ_INT(parse("{\"model\":{\"stage2\":{\"ring_counts\":false}}}", &cfg, field, &err),
                 GT_OK);
    CHECK_EQ_INT(cfg.stage2.rings, 1);
    CHECK_EQ_INT(cfg.stage2.ring_counts, 0);
    CHECK_EQ_INT(cfg.stage2.count_stick, 0);
    /* a run recorded before 0013 names it off, with counts on */
    CHECK_EQ_INT(parse("{\"model\":{\"stage2\":{\"count_stick\":false}}}", &cfg, field, &err),
                 GT_OK);
    CHECK_EQ_INT(cfg.stage2.ring_counts, 1);
    CHECK_EQ_INT(cfg.stage2.count_stick, 0);
    CHECK(written_false(&cfg, "stage2", "count_stick"));
    /* model.stage1.profile: stage 1's only; a run recorded before 0014
     * names it off, and it is written back out */
    expect_bad("{\"model\":{\"stage2\":{\"profile\":true}}}", "model.stage2.profile");
    expect_bad("{\"model\":{\"stage1\":{\"profile\":\"yes\"}}}", "model.stage1.profile");
    CHECK_EQ_INT(parse("{\"model\":{\"stage1\":{\"profile\":false}}}", &cfg, field, &err),
                 GT_OK);
    CHECK_EQ_INT(cfg.stage1.profile, 0);
    CHECK(written_false(&cfg, "stage1", "profile"));
    expect_bad("{\"model\":{\"stage1\":{\"layer_weight\":2}}}", "model.stage1.layer_weight");
    expect_bad("{\"model\":{\"stage2\":{\"layer_weight\":0}}}", "model.stage2.layer_weight");
    expect_bad("{\"model\":{\"stage2\":{\"layer_weight\":101}}}", "model.stage2.layer_weight");
    expect_bad("{\"model\":{\"stage2\":{\"trunk\":{\"skip\":\"residual\"}}}}",
               "model.stage2.trunk.skip");
    /* train.ema: [0, 1), round-trips */
    expect_bad("{\"train\":{\"ema\":1}}", "train.ema");
    expect_bad("{\"train\":{\"ema\":-0.5}}", "train.ema");
    expect_bad("{\"train\":{\"ema\":\"0.99\"}}", "train.ema");
    CHECK_EQ_INT(parse("{\"train\":{\"ema\":0.999}}", &cfg, field, &err), GT_OK);
    CHECK(cfg.ema == 0.999);
    {
        json_t *o = model_config_to_json(&cfg);
        CHECK(json_real_value(json_object_get(json_object_get(o, "train"), "ema")) == 0.999);
        json_decref(o);
    }
    /* history: autoregressive only, 0..MODEL_AR_MAX_HISTORY, round-trips */
    expect_bad("{\"model\":{\"stage2\":{\"history\":2}}}", "model.stage2.history");
    expect_bad("{\"model\":{\"stage2\":{\"mode\":\"autoregressive\",\"history\":9}}}",
               "model.stage2.history");
    expect_bad("{\"model\":{\"stage2\":{\"mode\":\"autoregressive\",\"history\":-1}}}",
               "model.stage2.history");
    expect_bad("{\"model\":{\"stage2\":{\"mode\":\"autoregressive\",\"history\":1.5}}}",
               "model.stage2.history");
    expect_bad("{\"model\":{\"stage1\":{\"history\":1}}}", "model.stage1.history");
    CHECK_EQ_INT(parse("{\"model\":{\"stage2\":{\"mode\":\"autoregressive\",\"history\":3}}}",
                       &cfg, field, &err),
                 GT_OK);
    CHECK_EQ_INT(cfg.stage2.history, 3);
    {
        json_t *o = model_config_to_json(&cfg);
        json_t *s2 = json_object_get(json_object_get(o, "model"), "stage2");
        CHECK_EQ_INT(json_integer_value(json_object_get(s2, "history")), 3);
        char *text = json_dumps(o, 0);
        model_config again;
        CHECK_EQ_INT(parse(text, &again, field, &err), GT_OK);
        CHECK_EQ_INT(again.stage2.history, 3);
        free(text);
        json_decref(o);
    }

    /* block_cond: none (the default, and absent from the document so that
     * configs from before it read back unchanged), time, all; no time for
     * a wgan generator */
    CHECK_EQ_INT(cfg.stage2.trunk.block_cond, MODEL_BLOCK_COND_NONE);
    {
        json_t *o = model_config_to_json(&cfg);
        json_t *t2 = json_object_get(json_object_get(json_object_get(o, "model"), "stage2"),
                                     "trunk");
        CHECK(t2 && !json_object_get(t2, "block_cond"));
        json_decref(o);
    }
    CHECK_EQ_INT(parse("{\"model\":{\"stage2\":{\"trunk\":{\"block_cond\":\"time\"}},"
                       "\"stage1\":{\"trunk\":{\"block_cond\":\"all\"}}}}",
                       &cfg, field, &err),
                 GT_OK);
    CHECK_EQ_INT(cfg.stage2.trunk.block_cond, MODEL_BLOCK_COND_TIME);
    CHECK_EQ_INT(cfg.stage1.trunk.block_cond, MODEL_BLOCK_COND_ALL);
    {
        json_t *o = model_config_to_json(&cfg);
        char *text = json_dumps(o, 0);
        model_config again;
        CHECK_EQ_INT(parse(text, &again, field, &err), GT_OK);
        CHECK_EQ_INT(again.stage2.trunk.block_cond, MODEL_BLOCK_COND_TIME);
        CHECK_EQ_INT(again.stage1.trunk.block_cond, MODEL_BLOCK_COND_ALL);
        free(text);
        json_decref(o);
    }
    expect_bad("{\"model\":{\"stage2\":{\"trunk\":{\"block_cond\":\"every\"}}}}",
               "model.stage2.trunk.block_cond");
    expect_bad("{\"model\":{\"stage2\":{\"trunk\":{\"block_cond\":1}}}}",
               "model.stage2.trunk.block_cond");
    expect_bad("{\"model\":{\"stage2\":{\"objective\":\"wgan\",\"trunk\":{\"block_cond\":"
               "\"time\"}}}}",
               "model.stage2.trunk.block_cond");
    CHECK_EQ_INT(parse("{\"model\":{\"stage2\":{\"objective\":\"wgan\",\"trunk\":{\"block_cond\":"
                       "\"all\"}}}}",
                       &cfg, field, &err),
                 GT_OK);

    /* A full config. */
    const char *full =
        "{\"name\":\"x\",\"dataset\":{\"synthetic\":{\"n\":500,\"seed\":3,\"energy\":\"fixed\","
        "\"emin_mev\":5000,\"emax_mev\":5000},\"geometry\":\"dataset_1_photons\","
        "\"val_fraction\":0.2},"
        "\"model\":{\"stage1\":{\"objective\":\"ddpm\",\"trunk\":{\"hidden\":32,\"blocks\":1}},"
        "\"stage2\":{\"objective\":\"ddpm\",\"mode\":\"oneshot\",\"trunk\":{\"kind\":\"routed\","
        "\"experts\":4,\"top_k\":2,\"hidden\":64}}},"
        "\"train\":{\"precision\":\"bf16\",\"device\":\"cuda:1\",\"batch\":64,"
        "\"steps\":{\"stage1\":10,\"stage2\":20},\"lr\":0.002},"
        "\"sample\":{\"solver\":\"ddim\",\"steps\":8}}";
    CHECK_EQ_INT(parse(full, &cfg, field, &err), GT_OK);
    CHECK_EQ_INT(cfg.synthetic_n, 500);
    CHECK_EQ_INT(cfg.bf16, 1);
    CHECK_EQ_INT(cfg.stage2.trunk.kind, MODEL_TRUNK_ROUTED);
    CHECK_EQ_INT(cfg.stage2.trunk.experts, 4);
    CHECK_EQ_INT(cfg.steps2, 20);
    CHECK_CLOSE(cfg.lr, 0.002, 0, 1e-12);
    CHECK_EQ_INT(cfg.solver, MODEL_SOLVER_DDIM);
    CHECK_EQ_INT(cfg.time_power, 1); /* ddim steps on its own grid */
    CHECK(strcmp(cfg.device, "cuda:1") == 0);

    /* Round trip through model_config_to_json gives the same config. */
    json_t *j = model_config_to_json(&cfg);
    CHECK(j != NULL);
    model_config back;
    CHECK_EQ_INT(model_config_from_json(j, &back, field, sizeof field, &err), GT_OK);
    json_t *j2 = model_config_to_json(&back);
    CHECK(json_equal(j, j2));
    json_decref(j);
    json_decref(j2);

    /* The energy spec: the object shape of sample requests and datasets,
     * the deprecated string + emin_mev/emax_mev giving the same config, and
     * the canonical JSON in the object shape. */
    {
        const char *shapes[][2] = {
            {"{\"dataset\":{\"synthetic\":{\"n\":500,\"seed\":3,\"energy\":{\"dist\":"
             "\"discrete\",\"min_mev\":2048,\"max_mev\":65536}}}}",
             "{\"dataset\":{\"synthetic\":{\"n\":500,\"seed\":3,\"energy\":\"discrete\","
             "\"emin_mev\":2048,\"emax_mev\":65536}}}"},
            {"{\"dataset\":{\"synthetic\":{\"energy\":{\"max_mev\":5e5}}}}",
             "{\"dataset\":{\"synthetic\":{\"emax_mev\":5e5}}}"},
            {"{\"dataset\":{\"synthetic\":{\"energy\":{\"dist\":\"fixed\",\"min_mev\":5000,"
             "\"max_mev\":5000}}}}",
             "{\"dataset\":{\"synthetic\":{\"energy\":\"fixed\",\"emin_mev\":5000,"
             "\"emax_mev\":5000}}}"},
        };
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            model_config a, b, back;
            CHECK_EQ_INT(parse(shapes[i][0], &a, field, &err), GT_OK);
            CHECK_EQ_INT(parse(shapes[i][1], &b, field, &err), GT_OK);
            CHECK(memcmp(&a, &b, sizeof a) == 0);
            json_t *ja = model_config_to_json(&a), *jb = model_config_to_json(&b);
            CHECK(json_equal(ja, jb));
            json_t *syn = json_object_get(json_object_get(ja, "dataset"), "synthetic");
            json_t *en = json_object_get(syn, "energy");
            CHECK(json_is_object(en));
            CHECK(!json_object_get(syn, "emin_mev") && !json_object_get(syn, "emax_mev"));
            CHECK(!strcmp(json_string_value(json_object_get(en, "dist")), a.synthetic_energy));
            CHECK(json_number_value(json_object_get(en, "min_mev")) == a.synthetic_emin_mev);
            CHECK(json_number_value(json_object_get(en, "max_mev")) == a.synthetic_emax_mev);
            CHECK_EQ_INT(model_config_from_json(ja, &back, field, sizeof field, &err), GT_OK);
            CHECK(memcmp(&a, &back, sizeof a) == 0);
            json_decref(ja);
            json_decref(jb);
        }
    }
    /* mixing the two spellings names the deprecated field */
    expect_bad("{\"dataset\":{\"synthetic\":{\"energy\":{\"dist\":\"fixed\"},"
               "\"emin_mev\":5000}}}", "dataset.synthetic.emin_mev");
    expect_bad("{\"dataset\":{\"synthetic\":{\"energy\":{\"min_mev\":5000},"
               "\"emax_mev\":6000}}}", "dataset.synthetic.emax_mev");
    /* the object shape validates as the sample route does */
    expect_bad("{\"dataset\":{\"synthetic\":{\"energy\":{\"dist\":\"gaussian\"}}}}",
               "dataset.synthetic.energy.dist");
    expect_bad("{\"dataset\":{\"synthetic\":{\"energy\":{\"dist\":3}}}}",
               "dataset.synthetic.energy.dist");
    expect_bad("{\"dataset\":{\"synthetic\":{\"energy\":{\"min_mev\":1}}}}",
               "dataset.synthetic.energy.min_mev");
    expect_bad("{\"dataset\":{\"synthetic\":{\"energy\":{\"min_mev\":\"1 GeV\"}}}}",
               "dataset.synthetic.energy.min_mev");
    expect_bad("{\"dataset\":{\"synthetic\":{\"energy\":{\"min_mev\":5000,"
               "\"max_mev\":4000}}}}", "dataset.synthetic.energy.max_mev");
    expect_bad("{\"dataset\":{\"synthetic\":{\"energy\":{\"max_mev\":2e8}}}}",
               "dataset.synthetic.energy.max_mev");
    expect_bad("{\"dataset\":{\"synthetic\":{\"energy\":{\"emin_mev\":5000}}}}",
               "dataset.synthetic.energy.emin_mev");
    expect_bad("{\"dataset\":{\"synthetic\":{\"energy\":{\"dist\":\"discrete\","
               "\"min_mev\":3000,\"max_mev\":4000}}}}", "dataset.synthetic.energy");
    expect_bad("{\"dataset\":{\"synthetic\":{\"energy\":[1000,2000]}}}",
               "dataset.synthetic.energy");

    /* The model variants: autoregressive stage 2, wgan with its section
     * (a wgan stage goes with a flow or ddpm stage), and their round trip. */
    const char *variants =
        "{\"model\":{\"stage2\":{\"objective\":\"wgan\",\"wgan\":{\"critic_steps\":3,"
        "\"gp_lambda\":5,\"beta1\":0.0,\"beta2\":0.9,\"critic\":{\"hidden\":32,\"depth\":2}}}}}";
    CHECK_EQ_INT(parse(variants, &cfg, field, &err), GT_OK);
    CHECK_EQ_INT(cfg.stage2.objective, MODEL_OBJ_WGAN);
    CHECK_EQ_INT(cfg.stage1.objective, MODEL_OBJ_FLOW);
    CHECK_EQ_INT(cfg.stage2.wgan.critic_steps, 3);
    CHECK_EQ_INT(cfg.stage2.wgan.critic_hidden, 32);
    CHECK_EQ_INT(cfg.stage2.wgan.critic_depth, 2);
    CHECK_CLOSE(cfg.stage2.wgan.gp_lambda, 5.0, 0, 1e-12);
    CHECK_EQ_INT(cfg.stage1.wgan.critic_steps, 5); /* defaults: 5 critic steps, lambda 10 */
    CHECK_CLOSE(cfg.stage1.wgan.gp_lambda, 10.0, 0, 1e-12);
    j = model_config_to_json(&cfg);
    CHECK_EQ_INT(model_config_from_json(j, &back, field, sizeof field, &err), GT_OK);
    CHECK_EQ_INT(back.stage2.wgan.critic_steps, 3);
    CHECK_EQ_INT(back.stage2.wgan.critic_depth, 2);
    json_decref(j);
    CHECK_EQ_INT(parse("{\"model\":{\"stage2\":{\"mode\":\"autoregressive\"}}}", &cfg, field,
                       &err),
                 GT_OK);
    CHECK_EQ_INT(cfg.stage2.mode, MODEL_MODE_AUTOREGRESSIVE);
    j = model_config_to_json(&cfg);
    CHECK_EQ_INT(model_config_from_json(j, &back, field, sizeof field, &err), GT_OK);
    CHECK_EQ_INT(back.stage2.mode, MODEL_MODE_AUTOREGRESSIVE);
    json_decref(j);
    CHECK_EQ_INT(parse("{\"model\":{\"stage1\":{\"objective\":\"ddpm\"},\"stage2\":"
                       "{\"objective\":\"wgan\"}}}",
                       &cfg, field, &err),
                 GT_OK);
    CHECK_EQ_INT(cfg.solver, MODEL_SOLVER_DDIM); /* the ddpm stage's solver */
    expect_bad("{\"model\":{\"stage2\":{\"objective\":\"wgan\",\"mode\":\"autoregressive\"}}}",
               "model.stage2.mode");
    expect_bad("{\"model\":{\"stage2\":{\"wgan\":{\"critic_steps\":0}}}}",
               "model.stage2.wgan.critic_steps");
    expect_bad("{\"model\":{\"stage2\":{\"wgan\":{\"gp_lambda\":-1}}}}",
               "model.stage2.wgan.gp_lambda");
    expect_bad("{\"model\":{\"stage2\":{\"wgan\":{\"critic\":{\"depth\":0}}}}}",
               "model.stage2.wgan.critic.depth");
    expect_bad("{\"model\":{\"stage2\":{\"wgan\":{\"critic\":{\"width\":8}}}}}",
               "model.stage2.wgan.critic.width");
    expect_bad("{\"model\":{\"stage2\":{\"wgan\":{\"lr\":1}}}}", "model.stage2.wgan.lr");
    expect_bad("{\"model\":{\"stage1\":{\"mode\":\"autoregressive\"}}}", "model.stage1.mode");

    /* Bad input: each names its field. */
    expect_bad("[]", "");
    expect_bad("{\"bogus\":1}", "bogus");
    expect_bad("{\"train\":{\"lr\":\"fast\"}}", "train.lr");
    expect_bad("{\"train\":{\"lr\":0}}", "train.lr");
    expect_bad("{\"train\":{\"batch\":0}}", "train.batch");
    expect_bad("{\"train\":{\"batch\":1.5}}", "train.batch");
    expect_bad("{\"train\":{\"precision\":\"fp16\"}}", "train.precision");
    expect_bad("{\"train\":{\"device\":\"tpu\"}}", "train.device");
    expect_bad("{\"train\":{\"steps\":{\"stage3\":1}}}", "train.steps.stage3");
    expect_bad("{\"train\":{\"steps\":{\"stage1\":0,\"stage2\":0}}}", "train.steps");
    expect_bad("{\"model\":{\"stage2\":{\"trunk\":{\"hidden\":-4}}}}", "model.stage2.trunk.hidden");
    expect_bad("{\"model\":{\"stage2\":{\"trunk\":{\"emb_dim\":7}}}}", "model.stage2.trunk.emb_dim");
    expect_bad("{\"model\":{\"stage2\":{\"trunk\":{\"experts\":2,\"top_k\":3}}}}",
               "model.stage2.trunk.top_k");
    expect_bad("{\"model\":{\"stage2\":{\"mode\":\"sideways\"}}}", "model.stage2.mode");
    expect_bad("{\"model\":{\"stage1\":{\"mode\":\"oneshot\"}}}", "model.stage1.mode");
    expect_bad("{\"model\":{\"stage1\":{\"objective\":\"ddpm\"}}}", "model.stage1.objective");
    expect_bad("{\"dataset\":{\"path\":\"a.h5\",\"synthetic\":{}}}", "dataset.synthetic");
    expect_bad("{\"dataset\":{\"synthetic\":{\"emin_mev\":10,\"emax_mev\":5}}}",
               "dataset.synthetic.emax_mev");
    expect_bad("{\"dataset\":{\"val_fraction\":0.9}}", "dataset.val_fraction");
    expect_bad("{\"sample\":{\"solver\":\"ddim\"}}", "sample.solver");
    expect_bad("{\"sample\":{\"time_power\":0}}", "sample.time_power");
    expect_bad("{\"sample\":{\"time_power\":5}}", "sample.time_power");
    expect_bad("{\"sample\":{\"time_power\":1.5}}", "sample.time_power");
    expect_bad("{\"model\":{\"stage1\":{\"objective\":\"ddpm\"},\"stage2\":"
               "{\"objective\":\"ddpm\"}},\"sample\":{\"time_power\":2}}",
               "sample.time_power");
    /* a run recorded before the power grid names the uniform one (0009) */
    CHECK_EQ_INT(parse("{\"sample\":{\"solver\":\"euler\",\"time_power\":1}}", &cfg, field,
                       &err),
                 GT_OK);
    CHECK_EQ_INT(cfg.time_power, 1);
    {
        json_t *o = model_config_to_json(&cfg);
        CHECK(json_integer_value(json_object_get(json_object_get(o, "sample"), "time_power")) ==
              1);
        json_decref(o);
    }
    /* ab2 is a flow solver: parsed, round-tripped, refused for ddpm */
    CHECK_EQ_INT(parse("{\"sample\":{\"solver\":\"ab2\",\"steps\":21}}", &cfg, field, &err),
                 GT_OK);
    CHECK_EQ_INT(cfg.solver, MODEL_SOLVER_AB2);
    {
        json_t *o = model_config_to_json(&cfg);
        const char *solver =
            json_string_value(json_object_get(json_object_get(o, "sample"), "solver"));
        CHECK(solver && strcmp(solver, "ab2") == 0);
        json_decref(o);
    }
    expect_bad("{\"model\":{\"stage1\":{\"objective\":\"ddpm\"},\"stage2\":"
               "{\"objective\":\"ddpm\"}},\"sample\":{\"solver\":\"ab2\"}}",
               "sample.solver");
    expect_bad("{\"sample\":{\"solver\":\"ab3\"}}", "sample.solver");
    /* a run recorded before the turned showers names false (0012) */
    expect_bad("{\"sample\":{\"symmetrize\":1}}", "sample.symmetrize");
    CHECK_EQ_INT(parse("{\"sample\":{\"symmetrize\":false}}", &cfg, field, &err), GT_OK);
    CHECK_EQ_INT(cfg.symmetrize, 0);
    {
        json_t *o = model_config_to_json(&cfg);
        CHECK(json_is_false(json_object_get(json_object_get(o, "sample"), "symmetrize")));
        json_decref(o);
    }
    /* sample.temperature: (0, 2], written back only when it is not 1, so
     * the configs recorded before it keep their text */
    CHECK_EQ_INT(parse("{}", &cfg, field, &err), GT_OK);
    CHECK(cfg.temperature == 1.0);
    {
        json_t *o = model_config_to_json(&cfg);
        CHECK(json_object_get(json_object_get(o, "sample"), "temperature") == NULL);
        json_decref(o);
    }
    CHECK_EQ_INT(parse("{\"sample\":{\"temperature\":0.96}}", &cfg, field, &err), GT_OK);
    CHECK(cfg.temperature == 0.96);
    {
        json_t *o = model_config_to_json(&cfg);
        CHECK(json_real_value(json_object_get(json_object_get(o, "sample"), "temperature")) ==
              0.96);
        char *text = json_dumps(o, 0);
        model_config back;
        CHECK(text && parse(text, &back, field, &err) == GT_OK && back.temperature == 0.96);
        free(text);
        json_decref(o);
    }
    CHECK_EQ_INT(parse("{\"sample\":{\"temperature\":1}}", &cfg, field, &err), GT_OK);
    CHECK(cfg.temperature == 1.0);
    expect_bad("{\"sample\":{\"temperature\":0}}", "sample.temperature");
    expect_bad("{\"sample\":{\"temperature\":-0.5}}", "sample.temperature");
    expect_bad("{\"sample\":{\"temperature\":2.5}}", "sample.temperature");
    expect_bad("{\"sample\":{\"temperature\":\"cold\"}}", "sample.temperature");
    expect_bad("{\"sample\":{\"temperature\":null}}", "sample.temperature");
    /* model.accept: absent by default and then not written back (the
     * configs recorded before it keep their text); present, its defaults
     * fill in and it round-trips */
    CHECK_EQ_INT(parse("{}", &cfg, field, &err), GT_OK);
    CHECK(!cfg.accept.enabled);
    {
        json_t *o = model_config_to_json(&cfg);
        CHECK(json_object_get(json_object_get(o, "model"), "accept") == NULL);
        json_decref(o);
    }
    CHECK_EQ_INT(parse("{\"model\":{\"accept\":{}}}", &cfg, field, &err), GT_OK);
    CHECK(cfg.accept.enabled && cfg.accept.cap_quantile == 0.5 && cfg.accept.max_attempts == 8 &&
          cfg.accept.showers == 0 && cfg.accept.hidden == 512 && cfg.accept.depth == 3 &&
          cfg.accept.epochs == 10);
    CHECK_EQ_INT(parse("{\"model\":{\"accept\":{\"cap_quantile\":0.8,\"max_attempts\":4,"
                       "\"showers\":5000,\"hidden\":64,\"depth\":2,\"epochs\":7}}}",
                       &cfg, field, &err),
                 GT_OK);
    {
        json_t *o = model_config_to_json(&cfg);
        char *text = json_dumps(o, 0);
        model_config back;
        CHECK(text && parse(text, &back, field, &err) == GT_OK && back.accept.enabled &&
              back.accept.cap_quantile == 0.8 && back.accept.max_attempts == 4 &&
              back.accept.showers == 5000 && back.accept.hidden == 64 && back.accept.depth == 2 &&
              back.accept.epochs == 7);
        free(text);
        json_decref(o);
    }
    expect_bad("{\"model\":{\"accept\":{\"cap_quantile\":0}}}", "model.accept.cap_quantile");
    expect_bad("{\"model\":{\"accept\":{\"cap_quantile\":1.5}}}", "model.accept.cap_quantile");
    expect_bad("{\"model\":{\"accept\":{\"max_attempts\":0}}}", "model.accept.max_attempts");
    expect_bad("{\"model\":{\"accept\":{\"max_attempts\":65}}}", "model.accept.max_attempts");
    expect_bad("{\"model\":{\"accept\":{\"showers\":-1}}}", "model.accept.showers");
    expect_bad("{\"model\":{\"accept\":{\"depth\":\"deep\"}}}", "model.accept.depth");
    expect_bad("{\"model\":{\"accept\":{\"strict\":true}}}", "model.accept.strict");
    expect_bad("{\"model\":{\"accept\":true}}", "model.accept");
    /* a Slurm job trains the test too, and uploads it (server/cli/report.c) */
    CHECK_EQ_INT(parse("{\"model\":{\"accept\":{}},\"executor\":{\"kind\":\"slurm\"}}", &cfg,
                       field, &err), GT_OK);
    CHECK(cfg.accept.enabled && cfg.executor.kind == MODEL_EXEC_SLURM);
    expect_bad("{\"name\":\"a\\u0000b\"}", ""); /* Jansson refuses NUL */

    /* dataset.simulator: gflash by default and written back only when it
     * is another; cascade round-trips; an unknown name, a non-string and
     * another simulator beside a file are refused */
    CHECK_EQ_INT(parse("{}", &cfg, field, &err), GT_OK);
    CHECK_EQ_INT(cfg.synthetic_simulator, 0);
    {
        json_t *o = model_config_to_json(&cfg);
        CHECK(json_object_get(json_object_get(o, "dataset"), "simulator") == NULL);
        json_decref(o);
    }
    CHECK_EQ_INT(parse("{\"dataset\":{\"simulator\":\"cascade\"}}", &cfg, field, &err), GT_OK);
    CHECK_EQ_INT(cfg.synthetic_simulator, 1);
    {
        json_t *o = model_config_to_json(&cfg);
        const char *sim =
            json_string_value(json_object_get(json_object_get(o, "dataset"), "simulator"));
        CHECK(sim && strcmp(sim, "cascade") == 0);
        char *text = json_dumps(o, JSON_COMPACT);
        model_config again;
        CHECK_EQ_INT(model_config_parse_stored(text, strlen(text), &again, field, 128, &err),
                     GT_OK);
        CHECK_EQ_INT(again.synthetic_simulator, 1);
        free(text);
        json_decref(o);
    }
    expect_bad("{\"dataset\":{\"simulator\":\"geant4\"}}", "dataset.simulator");
    expect_bad("{\"dataset\":{\"simulator\":\"\"}}", "dataset.simulator");
    expect_bad("{\"dataset\":{\"simulator\":1}}", "dataset.simulator");
    expect_bad("{\"dataset\":{\"path\":\"x.h5\",\"simulator\":\"cascade\"}}",
               "dataset.simulator");
    CHECK_EQ_INT(parse("{\"dataset\":{\"path\":\"x.h5\",\"simulator\":\"gflash\"}}", &cfg,
                       field, &err),
                 GT_OK);
    /* a file run recorded by version 1 reads as it did: the upgrade's
     * gflash beside its path is taken */
    {
        const char *v1 = "{\"config_version\":1,\"dataset\":{\"path\":\"x.h5\"}}";
        CHECK_EQ_INT(model_config_parse_stored(v1, strlen(v1), &cfg, field, 128, &err), GT_OK);
        CHECK(strcmp(cfg.dataset_path, "x.h5") == 0 && cfg.synthetic_simulator == 0);
    }

    /* Malformed JSON reports line and column; duplicates are refused. */
    CHECK_EQ_INT(parse("{\n  \"train\": {,}\n}", &cfg, field, &err), GT_EINVAL);
    CHECK_MSG(strstr(err.message, "line 2") != NULL, "%s", err.message);
    CHECK_EQ_INT(parse("{\"name\":\"a\",\"name\":\"b\"}", &cfg, field, &err), GT_EINVAL);

    /* The shipped configs parse. */
    const char *src = getenv("GIANT_SOURCE_DIR");
    const char *shipped[] = {"quickstart.json",      "baseline.json",
                             "baseline-bf16.json",   "routed.json",
                             "routed-bf16.json",     "autoregressive.json",
                             "autoregressive-bf16.json", "wgan.json",
                             "wgan-bf16.json",       "cpu-long.json"};
    for (size_t i = 0; src && i < sizeof shipped / sizeof shipped[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/configs/%s", src, shipped[i]);
        int rc = model_config_load(path, &cfg, field, sizeof field, &err);
        CHECK_MSG(rc == GT_OK, "%s: %s", shipped[i], err.message);
    }
    CHECK(src != NULL);
    CHECK_EQ_INT(model_config_load(NULL == src ? "" : "/dev/null", &cfg, field, sizeof field,
                                   &err), GT_EINVAL);

    /* Missing file. */
    CHECK_EQ_INT(model_config_load("no/such/config.json", &cfg, field, sizeof field, &err),
                 GT_EIO);
    /* executor: local by default and then not written back (local runs
     * record the bytes they did before it); slurm with its options, written
     * back; its values checked */
    CHECK_EQ_INT(parse("{}", &cfg, field, &err), GT_OK);
    CHECK_EQ_INT(cfg.executor.kind, MODEL_EXEC_LOCAL);
    json_t *jback = model_config_to_json(&cfg);
    CHECK(json_object_get(jback, "executor") == NULL);
    json_decref(jback);
    CHECK_EQ_INT(parse("{\"executor\":{\"kind\":\"slurm\",\"partition\":\"gpu-long\","
                       "\"gres\":\"gpu:a100:2\",\"time_limit_min\":90,\"requeue\":false}}",
                       &cfg, field, &err),
                 GT_OK);
    CHECK_EQ_INT(cfg.executor.kind, MODEL_EXEC_SLURM);
    CHECK(strcmp(cfg.executor.partition, "gpu-long") == 0);
    CHECK(strcmp(cfg.executor.gres, "gpu:a100:2") == 0);
    CHECK_EQ_INT(cfg.executor.time_limit_min, 90);
    CHECK_EQ_INT(cfg.executor.requeue, 0);
    jback = model_config_to_json(&cfg);
    json_t *ex = json_object_get(jback, "executor");
    CHECK(strcmp(json_string_value(json_object_get(ex, "kind")), "slurm") == 0);
    CHECK(json_is_false(json_object_get(ex, "requeue")));
    CHECK_EQ_INT(json_integer_value(json_object_get(ex, "time_limit_min")), 90);
    char *text = json_dumps(jback, JSON_COMPACT);
    model_config again;
    CHECK_EQ_INT(parse(text, &again, field, &err), GT_OK);
    CHECK(strcmp(again.executor.gres, "gpu:a100:2") == 0 && again.executor.requeue == 0);
    free(text);
    json_decref(jback);
    expect_bad("{\"executor\":{\"kind\":\"pbs\"}}", "executor.kind");
    expect_bad("{\"executor\":{\"kind\":\"local\",\"gres\":\"gpu:1\"}}", "executor.gres");
    expect_bad("{\"executor\":{\"kind\":\"slurm\",\"partition\":\"a;b\"}}",
               "executor.partition");
    expect_bad("{\"executor\":{\"kind\":\"slurm\",\"gres\":\"gpu 1\"}}", "executor.gres");
    expect_bad("{\"executor\":{\"kind\":\"slurm\",\"time_limit_min\":525601}}",
               "executor.time_limit_min");
    expect_bad("{\"executor\":{\"account\":\"x\"}}", "executor.account");
    /* data parallel in the job: gpus or ranks, written back only when set,
     * a divisor of the global batch, for slurm only */
    CHECK(json_object_get(ex, "gpus") == NULL && json_object_get(ex, "ranks") == NULL);
    CHECK_EQ_INT(parse("{\"train\":{\"batch\":64},\"executor\":{\"kind\":\"slurm\","
                       "\"gpus\":4}}", &cfg, field, &err), GT_OK);
    CHECK_EQ_INT(cfg.executor.gpus, 4);
    CHECK_EQ_INT(cfg.executor.ranks, 0);
    jback = model_config_to_json(&cfg);
    ex = json_object_get(jback, "executor");
    CHECK_EQ_INT(json_integer_value(json_object_get(ex, "gpus")), 4);
    CHECK(json_object_get(ex, "ranks") == NULL);
    json_decref(jback);
    CHECK_EQ_INT(parse("{\"train\":{\"batch\":64},\"executor\":{\"kind\":\"slurm\","
                       "\"ranks\":2}}", &cfg, field, &err), GT_OK);
    CHECK_EQ_INT(cfg.executor.ranks, 2);
    expect_bad("{\"train\":{\"batch\":64},\"executor\":{\"kind\":\"slurm\",\"gpus\":2,"
               "\"ranks\":2}}", "executor.ranks");
    expect_bad("{\"train\":{\"batch\":100},\"executor\":{\"kind\":\"slurm\",\"gpus\":8}}",
               "executor.gpus");
    expect_bad("{\"executor\":{\"kind\":\"slurm\",\"gpus\":65}}", "executor.gpus");
    expect_bad("{\"executor\":{\"kind\":\"local\",\"ranks\":2}}", "executor.ranks");
    expect_bad("{\"executor\":\"slurm\"}", "executor");
    return check_finish();
}
