#include "model_config.h"
#include "model_energy.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* defaults                                                                 */
/* ------------------------------------------------------------------------ */

static void wgan_defaults(model_wgan_config *w)
{
    w->critic_steps = 5;
    w->gp_lambda = 10.0;
    w->beta1 = 0.5;
    w->beta2 = 0.9;
    w->critic_hidden = 256;
    w->critic_depth = 3;
}

static void trunk_defaults(model_trunk_config *t)
{
    t->kind = MODEL_TRUNK_EXPERT;
    t->hidden = 256;
    t->blocks = 3;
    t->emb_dim = 16;
    t->experts = 4;
    t->top_k = 2;
    t->balance_weight = 0.01;
    t->entropy_weight = 0.001;
}

void model_config_defaults(model_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->name, sizeof cfg->name, "run");
    snprintf(cfg->geometry, sizeof cfg->geometry, "dataset_2");
    cfg->synthetic_n = 20000;
    cfg->synthetic_seed = 1;
    snprintf(cfg->synthetic_energy, sizeof cfg->synthetic_energy, "log-uniform");
    cfg->synthetic_emin_mev = 1e3;
    cfg->synthetic_emax_mev = 1e6;
    cfg->max_showers = 0;
    cfg->val_fraction = 0.1;
    cfg->split_seed = 7;

    cfg->stage1.objective = MODEL_OBJ_FLOW;
    cfg->stage1.mode = MODEL_MODE_ONESHOT;
    trunk_defaults(&cfg->stage1.trunk);
    cfg->stage1.trunk.hidden = 64;
    cfg->stage1.trunk.blocks = 2;
    cfg->stage2.objective = MODEL_OBJ_FLOW;
    cfg->stage2.mode = MODEL_MODE_ONESHOT;
    trunk_defaults(&cfg->stage2.trunk);
    cfg->stage2.trunk.skip = MODEL_SKIP_GATED;
    cfg->stage2.dequantize = 1;
    cfg->stage2.voxel_alpha = 1e-10;
    cfg->stage2.rings = 1;
    cfg->stage2.dequantize_top = 1e-4;
    cfg->stage2.keep_largest = 1;
    cfg->stage2.ring_counts = 1;
    cfg->stage2.count_stick = 1;
    cfg->stage2.layer_weight = 4;
    cfg->stage1.profile = 1;
    wgan_defaults(&cfg->stage1.wgan);
    wgan_defaults(&cfg->stage2.wgan);

    cfg->bf16 = 0;
    snprintf(cfg->device, sizeof cfg->device, "auto");
    cfg->seed = 1;
    cfg->batch = 256;
    cfg->steps1 = 1000;
    cfg->steps2 = 2000;
    cfg->lr = 1e-3;
    cfg->min_lr_ratio = 0.05;
    cfg->warmup_steps = 100;
    cfg->weight_decay = 0.01;
    cfg->beta1 = 0.9;
    cfg->beta2 = 0.999;
    cfg->adam_eps = 1e-8;
    cfg->grad_clip = 1.0;
    cfg->log_every = 10;
    cfg->val_every = 200;
    cfg->ckpt_every = 500;
    cfg->val_size = 1024;
    cfg->keep_checkpoints = 2;

    cfg->solver = MODEL_SOLVER_HEUN;
    cfg->sample_steps = 20;
    cfg->time_power = 2;
    cfg->symmetrize = 1;
    cfg->temperature = 1.0;

    cfg->executor.kind = MODEL_EXEC_LOCAL;
    cfg->executor.requeue = 1;

    cfg->accept.cap_quantile = 0.5;
    cfg->accept.max_attempts = 8;
    cfg->accept.showers = 0;
    cfg->accept.hidden = 512;
    cfg->accept.depth = 3;
    cfg->accept.epochs = 10;
}

/* ------------------------------------------------------------------------ */
/* a small strict walker: every object lists its keys; the first problem   */
/* found is reported with its dotted path                                   */
/* ------------------------------------------------------------------------ */

typedef struct walker {
    char *field;
    size_t field_len;
    gt_error *err;
} walker;

static int fail(walker *w, const char *path, const char *fmt, const char *detail)
{
    if (w->field && w->field_len)
        snprintf(w->field, w->field_len, "%s", path);
    char msg[400];
    snprintf(msg, sizeof msg, fmt, detail);
    return gt_error_set(w->err, GT_EINVAL, "%s: %s", path[0] ? path : "config", msg);
}

static void join(char *out, size_t n, const char *prefix, const char *key)
{
    if (prefix[0])
        snprintf(out, n, "%s.%s", prefix, key);
    else
        snprintf(out, n, "%s", key);
}

/* Fails naming key under path (the dotted "train.lr"). */
static int fail_key(walker *w, const char *path, const char *key, const char *fmt,
                    const char *detail)
{
    char p[256];
    join(p, sizeof p, path, key);
    return fail(w, p, fmt, detail);
}

/* Unknown keys are errors; `allowed` is NULL-terminated. */
static int check_keys(walker *w, const json_t *obj, const char *path, const char *const *allowed)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(*a, key) == 0)
                ok = 1;
        if (!ok)
            return fail_key(w, path, key, "unknown key%s", "");
    }
    return GT_OK;
}

/* The JSON types a field may have; "a number" accepts integers too ("lr": 1
 * is a number). */
typedef enum field_type {
    FIELD_OBJECT,
    FIELD_INTEGER,
    FIELD_NUMBER,
    FIELD_STRING,
    FIELD_BOOLEAN
} field_type;

/* *out = obj[key], or NULL when the key is absent (the field keeps its
 * default); a value of another type fails with "must be <type>".  Every
 * getter starts here, so absence and type errors read the same everywhere. */
static int lookup(walker *w, const json_t *obj, const char *path, const char *key,
                  field_type type, const json_t **out)
{
    static const char *const names[] = {"an object", "an integer", "a number", "a string",
                                        "true or false"};
    const json_t *v = json_object_get(obj, key);
    *out = v;
    if (!v)
        return GT_OK;
    int ok = type == FIELD_OBJECT    ? json_is_object(v)
             : type == FIELD_INTEGER ? json_is_integer(v)
             : type == FIELD_NUMBER  ? json_is_number(v)
             : type == FIELD_STRING  ? json_is_string(v)
                                     : json_is_boolean(v);
    return ok ? GT_OK : fail_key(w, path, key, "must be %s", names[type]);
}

static int get_object(walker *w, const json_t *parent, const char *path, const char *key,
                      const json_t **out)
{
    return lookup(w, parent, path, key, FIELD_OBJECT, out);
}

static int get_int(walker *w, const json_t *obj, const char *path, const char *key,
                   int64_t lo, int64_t hi, int64_t *out)
{
    const json_t *v;
    int rc = lookup(w, obj, path, key, FIELD_INTEGER, &v);
    if (rc || !v)
        return rc;
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        char range[96];
        snprintf(range, sizeof range, "[%lld, %lld]", (long long)lo, (long long)hi);
        return fail_key(w, path, key, "out of range %s", range);
    }
    *out = x;
    return GT_OK;
}

static int get_int32(walker *w, const json_t *obj, const char *path, const char *key, int lo,
                     int hi, int *out)
{
    int64_t x = *out;
    int rc = get_int(w, obj, path, key, lo, hi, &x);
    *out = (int)x;
    return rc;
}

static int get_u64(walker *w, const json_t *obj, const char *path, const char *key,
                   uint64_t *out)
{
    int64_t x = (int64_t)*out;
    int rc = get_int(w, obj, path, key, 0, INT64_MAX, &x);
    *out = (uint64_t)x;
    return rc;
}

/* lo_open: lo itself excluded. */
static int get_real(walker *w, const json_t *obj, const char *path, const char *key,
                    double lo, int lo_open, double hi, double *out)
{
    const json_t *v;
    int rc = lookup(w, obj, path, key, FIELD_NUMBER, &v);
    if (rc || !v)
        return rc;
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || (lo_open && x == lo) || x > hi) {
        char range[96];
        snprintf(range, sizeof range, "%s%g, %g]", lo_open ? "(" : "[", lo, hi);
        return fail_key(w, path, key, "out of range %s", range);
    }
    *out = x;
    return GT_OK;
}

static int get_string(walker *w, const json_t *obj, const char *path, const char *key,
                      char *out, size_t cap)
{
    const json_t *v;
    int rc = lookup(w, obj, path, key, FIELD_STRING, &v);
    if (rc || !v)
        return rc;
    const char *s = json_string_value(v);
    if (strlen(s) >= cap || strlen(s) != json_string_length(v))
        return fail_key(w, path, key, "too long or contains NUL%s", "");
    snprintf(out, cap, "%s", s);
    return GT_OK;
}

static int get_bool(walker *w, const json_t *obj, const char *path, const char *key, int *out)
{
    const json_t *v;
    int rc = lookup(w, obj, path, key, FIELD_BOOLEAN, &v);
    if (rc || !v)
        return rc;
    *out = json_is_true(v);
    return GT_OK;
}

/* A string that must be one of `names`; *out = its index. */
static int get_enum(walker *w, const json_t *obj, const char *path, const char *key,
                    const char *const *names, int *out)
{
    const json_t *v;
    int rc = lookup(w, obj, path, key, FIELD_STRING, &v);
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
    return fail_key(w, path, key, "must be one of: %s", list);
}

/* ------------------------------------------------------------------------ */
/* sections                                                                 */
/* ------------------------------------------------------------------------ */

static const char *const OBJECTIVES[] = {"flow", "ddpm", "wgan", NULL};
static const char *const MODES[] = {"oneshot", "autoregressive", NULL};
static const char *const TRUNKS[] = {"expert", "routed", NULL};
static const char *const SKIPS[] = {"none", "gated", NULL};
static const char *const BLOCK_CONDS[] = {"none", "time", "all", NULL};
static const char *const SOLVERS[] = {"euler", "heun", "ddim", "ab2", NULL};
static const char *const PRECISIONS[] = {"fp32", "bf16", NULL};
static const char *const ENERGIES[] = {"log-uniform", "discrete", "fixed", NULL};

static int parse_trunk(walker *w, const json_t *obj, const char *path, model_trunk_config *t)
{
    static const char *const keys[] = {"kind", "skip", "block_cond", "hidden", "blocks",
                                       "emb_dim", "experts", "top_k", "balance_weight",
                                       "entropy_weight", NULL};
    int rc, kind = (int)t->kind, skip = (int)t->skip, bc = (int)t->block_cond;
    if ((rc = check_keys(w, obj, path, keys)) ||
        (rc = get_enum(w, obj, path, "kind", TRUNKS, &kind)) ||
        (rc = get_enum(w, obj, path, "skip", SKIPS, &skip)) ||
        (rc = get_enum(w, obj, path, "block_cond", BLOCK_CONDS, &bc)) ||
        (rc = get_int32(w, obj, path, "hidden", 1, 8192, &t->hidden)) ||
        (rc = get_int32(w, obj, path, "blocks", 0, 64, &t->blocks)) ||
        (rc = get_int32(w, obj, path, "emb_dim", 2, 512, &t->emb_dim)) ||
        (rc = get_int32(w, obj, path, "experts", 1, 64, &t->experts)) ||
        (rc = get_int32(w, obj, path, "top_k", 1, 64, &t->top_k)) ||
        (rc = get_real(w, obj, path, "balance_weight", 0, 0, 100, &t->balance_weight)) ||
        (rc = get_real(w, obj, path, "entropy_weight", 0, 0, 100, &t->entropy_weight)))
        return rc;
    t->kind = (model_trunk_kind)kind;
    t->skip = (model_trunk_skip)skip;
    t->block_cond = (model_block_cond)bc;
    if (t->emb_dim % 2)
        return fail_key(w, path, "emb_dim", "must be even (sine and cosine pairs)%s", "");
    if (t->top_k > t->experts)
        return fail_key(w, path, "top_k", "must not exceed experts%s", "");
    return GT_OK;
}

static int parse_wgan(walker *w, const json_t *obj, const char *path, model_wgan_config *g)
{
    static const char *const keys[] = {"critic_steps", "gp_lambda", "beta1", "beta2", "critic",
                                       NULL};
    static const char *const ckeys[] = {"hidden", "depth", NULL};
    int rc;
    if ((rc = check_keys(w, obj, path, keys)) ||
        (rc = get_int32(w, obj, path, "critic_steps", 1, 100, &g->critic_steps)) ||
        (rc = get_real(w, obj, path, "gp_lambda", 0, 0, 1e4, &g->gp_lambda)) ||
        (rc = get_real(w, obj, path, "beta1", 0, 0, 0.9999, &g->beta1)) ||
        (rc = get_real(w, obj, path, "beta2", 0, 0, 0.99999, &g->beta2)))
        return rc;
    const json_t *c;
    char p[320];
    join(p, sizeof p, path, "critic");
    if ((rc = get_object(w, obj, path, "critic", &c)))
        return rc;
    if (c && ((rc = check_keys(w, c, p, ckeys)) ||
              (rc = get_int32(w, c, p, "hidden", 1, 8192, &g->critic_hidden)) ||
              (rc = get_int32(w, c, p, "depth", 1, 16, &g->critic_depth))))
        return rc;
    return GT_OK;
}

static int parse_stage(walker *w, const json_t *obj, const char *path, model_stage_config *s,
                       int is_stage2)
{
    static const char *const keys1[] = {"objective", "profile", "trunk", "wgan", NULL};
    static const char *const keys2[] = {"objective", "mode", "dequantize", "dequantize_top",
                                        "skip_spent_layers", "history", "voxel_alpha", "rings",
                                        "ring_counts", "count_stick", "keep_largest",
                                        "layer_weight", "trunk", "wgan", NULL};
    int rc, objective = (int)s->objective, mode = (int)s->mode;
    if ((rc = check_keys(w, obj, path, is_stage2 ? keys2 : keys1)) ||
        (rc = get_enum(w, obj, path, "objective", OBJECTIVES, &objective)) ||
        (!is_stage2 && (rc = get_bool(w, obj, path, "profile", &s->profile))) ||
        (is_stage2 && (rc = get_enum(w, obj, path, "mode", MODES, &mode))) ||
        (is_stage2 && (rc = get_bool(w, obj, path, "dequantize", &s->dequantize))) ||
        (is_stage2 && (rc = get_bool(w, obj, path, "rings", &s->rings))) ||
        (is_stage2 && (rc = get_bool(w, obj, path, "skip_spent_layers", &s->skip_spent_layers))) ||
        (is_stage2 && (rc = get_int32(w, obj, path, "history", 0, MODEL_AR_MAX_HISTORY,
                                      &s->history))) ||
        (is_stage2 && (rc = get_bool(w, obj, path, "ring_counts", &s->ring_counts))) ||
        (is_stage2 && (rc = get_bool(w, obj, path, "count_stick", &s->count_stick))) ||
        (is_stage2 && (rc = get_bool(w, obj, path, "keep_largest", &s->keep_largest))) ||
        (is_stage2 && (rc = get_real(w, obj, path, "layer_weight", 0, 1, 100, &s->layer_weight))) ||
        (is_stage2 && (rc = get_real(w, obj, path, "dequantize_top", 0, 1, 1, &s->dequantize_top))) ||
        (is_stage2 && (rc = get_real(w, obj, path, "voxel_alpha", 0, 1, 1e-3, &s->voxel_alpha))))
        return rc;
    s->objective = (model_objective)objective;
    s->mode = (model_stage2_mode)mode;
    if (is_stage2 && s->history && s->mode != MODEL_MODE_AUTOREGRESSIVE)
        return fail_key(w, path, "history", "needs the autoregressive mode (model.stage2.mode)%s",
                        "");
    /* ring hit counts are features of the rings: on by default where there
     * are rings, an error only when asked for without them */
    if (is_stage2 && !s->rings) {
        const json_t *rc_json = json_object_get(obj, "ring_counts");
        if (json_is_true(rc_json))
            return fail_key(w, path, "ring_counts", "needs rings (model.stage2.rings)%s", "");
        s->ring_counts = 0;
    }
    /* the stick-breaking is of the counts: likewise */
    if (is_stage2 && !s->ring_counts) {
        if (json_is_true(json_object_get(obj, "count_stick")))
            return fail_key(w, path, "count_stick",
                            "needs ring hit counts (model.stage2.ring_counts)%s", "");
        s->count_stick = 0;
    }
    const json_t *trunk;
    char p[256];
    join(p, sizeof p, path, "trunk");
    if ((rc = get_object(w, obj, path, "trunk", &trunk)))
        return rc;
    if (trunk && (rc = parse_trunk(w, trunk, p, &s->trunk)))
        return rc;
    const json_t *wg;
    join(p, sizeof p, path, "wgan");
    if ((rc = get_object(w, obj, path, "wgan", &wg)))
        return rc;
    if (wg && (rc = parse_wgan(w, wg, p, &s->wgan)))
        return rc;
    return GT_OK;
}

static int parse_dataset(walker *w, const json_t *obj, model_config *cfg)
{
    static const char *const keys[] = {"path", "synthetic", "geometry", "max_showers",
                                       "val_fraction", "split_seed", NULL};
    static const char *const skeys[] = {"n", "seed", "energy", "emin_mev", "emax_mev", NULL};
    int rc;
    if ((rc = check_keys(w, obj, "dataset", keys)) ||
        (rc = get_string(w, obj, "dataset", "path", cfg->dataset_path,
                         sizeof cfg->dataset_path)) ||
        (rc = get_string(w, obj, "dataset", "geometry", cfg->geometry, sizeof cfg->geometry)) ||
        (rc = get_int(w, obj, "dataset", "max_showers", 0, INT64_MAX, &cfg->max_showers)) ||
        (rc = get_real(w, obj, "dataset", "val_fraction", 0, 1, 0.5, &cfg->val_fraction)) ||
        (rc = get_u64(w, obj, "dataset", "split_seed", &cfg->split_seed)))
        return rc;
    const json_t *syn;
    if ((rc = get_object(w, obj, "dataset", "synthetic", &syn)))
        return rc;
    if (syn && cfg->dataset_path[0])
        return fail(w, "dataset.synthetic", "give either path or synthetic, not both%s", "");
    if (json_object_get(obj, "path") && !cfg->dataset_path[0])
        return fail(w, "dataset.path", "must not be empty%s", "");
    const json_t *je = syn ? json_object_get(syn, "energy") : NULL;
    if (syn && json_is_object(je)) {
        /* {"dist", "min_mev", "max_mev"}: the shape of sample requests and
         * datasets, parsed by the same function */
        static const char *const nkeys[] = {"n", "seed", "energy", NULL};
        const char *old = json_object_get(syn, "emin_mev")   ? "dataset.synthetic.emin_mev"
                          : json_object_get(syn, "emax_mev") ? "dataset.synthetic.emax_mev"
                                                             : NULL;
        if (old)
            return fail(w, old, "is the deprecated spelling of the range: with energy as an "
                        "object give energy.min_mev and energy.max_mev%s", "");
        if ((rc = check_keys(w, syn, "dataset.synthetic", nkeys)) ||
            (rc = get_int(w, syn, "dataset.synthetic", "n", 16, 100000000, &cfg->synthetic_n)) ||
            (rc = get_u64(w, syn, "dataset.synthetic", "seed", &cfg->synthetic_seed)))
            return rc;
        model_energy e;
        model_energy_default(&e);
        if ((rc = model_energy_from_json(je, "dataset.synthetic.energy", MODEL_ENERGY_MIN_MEV,
                                         MODEL_ENERGY_MAX_MEV, &e, w->field, w->field_len,
                                         w->err)))
            return rc;
        snprintf(cfg->synthetic_energy, sizeof cfg->synthetic_energy, "%s",
                 model_energy_dist_name(e.mode));
        cfg->synthetic_emin_mev = e.min_mev;
        cfg->synthetic_emax_mev = e.max_mev;
    } else if (syn) {
        /* deprecated: "energy" the dist's name beside "emin_mev" and
         * "emax_mev" (recorded runs have it; parsed as before) */
        int energy = 0;
        for (int i = 0; ENERGIES[i]; i++)
            if (strcmp(ENERGIES[i], cfg->synthetic_energy) == 0)
                energy = i;
        if ((rc = check_keys(w, syn, "dataset.synthetic", skeys)) ||
            (rc = get_int(w, syn, "dataset.synthetic", "n", 16, 100000000, &cfg->synthetic_n)) ||
            (rc = get_u64(w, syn, "dataset.synthetic", "seed", &cfg->synthetic_seed)) ||
            (rc = get_enum(w, syn, "dataset.synthetic", "energy", ENERGIES, &energy)) ||
            (rc = get_real(w, syn, "dataset.synthetic", "emin_mev", 1, 0, 1e8,
                           &cfg->synthetic_emin_mev)) ||
            (rc = get_real(w, syn, "dataset.synthetic", "emax_mev", 1, 0, 1e8,
                           &cfg->synthetic_emax_mev)))
            return rc;
        snprintf(cfg->synthetic_energy, sizeof cfg->synthetic_energy, "%s", ENERGIES[energy]);
        if (cfg->synthetic_emax_mev < cfg->synthetic_emin_mev)
            return fail(w, "dataset.synthetic.emax_mev", "must be >= emin_mev%s", "");
    }
    if (!cfg->geometry[0])
        return fail(w, "dataset.geometry", "must not be empty%s", "");
    return GT_OK;
}

static int parse_train(walker *w, const json_t *obj, model_config *cfg)
{
    static const char *const keys[] = {
        "precision", "device", "seed", "batch", "steps", "lr", "min_lr_ratio",
        "warmup_steps", "weight_decay", "beta1", "beta2", "adam_eps", "grad_clip", "ema",
        "log_every", "val_every", "val_size", "ckpt_every", "keep_checkpoints", NULL};
    static const char *const skeys[] = {"stage1", "stage2", NULL};
    int rc, precision = cfg->bf16;
    if ((rc = check_keys(w, obj, "train", keys)) ||
        (rc = get_enum(w, obj, "train", "precision", PRECISIONS, &precision)) ||
        (rc = get_string(w, obj, "train", "device", cfg->device, sizeof cfg->device)) ||
        (rc = get_u64(w, obj, "train", "seed", &cfg->seed)) ||
        (rc = get_int32(w, obj, "train", "batch", 1, 1 << 20, &cfg->batch)) ||
        (rc = get_real(w, obj, "train", "lr", 0, 1, 1.0, &cfg->lr)) ||
        (rc = get_real(w, obj, "train", "min_lr_ratio", 0, 0, 1.0, &cfg->min_lr_ratio)) ||
        (rc = get_int(w, obj, "train", "warmup_steps", 0, INT64_MAX, &cfg->warmup_steps)) ||
        (rc = get_real(w, obj, "train", "weight_decay", 0, 0, 1.0, &cfg->weight_decay)) ||
        (rc = get_real(w, obj, "train", "beta1", 0, 0, 0.9999, &cfg->beta1)) ||
        (rc = get_real(w, obj, "train", "beta2", 0, 0, 0.99999, &cfg->beta2)) ||
        (rc = get_real(w, obj, "train", "adam_eps", 0, 1, 1.0, &cfg->adam_eps)) ||
        (rc = get_real(w, obj, "train", "grad_clip", 0, 0, 1e6, &cfg->grad_clip)) ||
        (rc = get_real(w, obj, "train", "ema", 0, 0, 0.999999, &cfg->ema)) ||
        (rc = get_int(w, obj, "train", "log_every", 1, INT64_MAX, &cfg->log_every)) ||
        (rc = get_int(w, obj, "train", "val_every", 1, INT64_MAX, &cfg->val_every)) ||
        (rc = get_int32(w, obj, "train", "val_size", 1, 1 << 24, &cfg->val_size)) ||
        (rc = get_int(w, obj, "train", "ckpt_every", 1, INT64_MAX, &cfg->ckpt_every)) ||
        (rc = get_int32(w, obj, "train", "keep_checkpoints", 1, 1000,
                        &cfg->keep_checkpoints)))
        return rc;
    cfg->bf16 = precision;
    const char *d = cfg->device;
    int idx = -1, consumed = 0;
    if (strcmp(d, "auto") != 0 && strcmp(d, "cpu") != 0 && strcmp(d, "cuda") != 0 &&
        !(sscanf(d, "cuda:%d%n", &idx, &consumed) == 1 && d[consumed] == '\0' && idx >= 0))
        return fail(w, "train.device", "must be auto, cpu, cuda or cuda:N%s", "");
    const json_t *steps = json_object_get(obj, "steps");
    if (steps) {
        if (!json_is_object(steps))
            return fail(w, "train.steps", "must be an object {stage1, stage2}%s", "");
        if ((rc = check_keys(w, steps, "train.steps", skeys)) ||
            (rc = get_int(w, steps, "train.steps", "stage1", 0, 100000000, &cfg->steps1)) ||
            (rc = get_int(w, steps, "train.steps", "stage2", 0, 100000000, &cfg->steps2)))
            return rc;
    }
    return GT_OK;
}

static int parse_sample(walker *w, const json_t *obj, model_config *cfg)
{
    static const char *const keys[] = {"solver",     "steps",       "time_power",
                                       "symmetrize", "temperature", NULL};
    int rc, solver = (int)cfg->solver;
    if ((rc = check_keys(w, obj, "sample", keys)) ||
        (rc = get_enum(w, obj, "sample", "solver", SOLVERS, &solver)) ||
        (rc = get_int32(w, obj, "sample", "steps", 1, 1000, &cfg->sample_steps)) ||
        (rc = get_int32(w, obj, "sample", "time_power", 1, 4, &cfg->time_power)) ||
        (rc = get_bool(w, obj, "sample", "symmetrize", &cfg->symmetrize)) ||
        (rc = get_real(w, obj, "sample", "temperature", 0, 1, 2.0, &cfg->temperature)))
        return rc;
    cfg->solver = (model_solver)solver;
    return GT_OK;
}

static int parse_accept(walker *w, const json_t *obj, model_config *cfg)
{
    static const char *const keys[] = {"cap_quantile", "max_attempts", "showers", "hidden",
                                       "depth", "epochs", NULL};
    model_accept_config *a = &cfg->accept;
    int rc;
    if ((rc = check_keys(w, obj, "model.accept", keys)) ||
        (rc = get_real(w, obj, "model.accept", "cap_quantile", 0, 1, 1.0, &a->cap_quantile)) ||
        (rc = get_int32(w, obj, "model.accept", "max_attempts", 1, 64, &a->max_attempts)) ||
        (rc = get_int(w, obj, "model.accept", "showers", 0, 10000000, &a->showers)) ||
        (rc = get_int32(w, obj, "model.accept", "hidden", 1, 4096, &a->hidden)) ||
        (rc = get_int32(w, obj, "model.accept", "depth", 1, 8, &a->depth)) ||
        (rc = get_int32(w, obj, "model.accept", "epochs", 1, 1000, &a->epochs)))
        return rc;
    a->enabled = 1;
    return GT_OK;
}

static const char *const EXECUTORS[] = {"local", "slurm", NULL};

const char *model_executor_name(model_executor_kind k) { return EXECUTORS[k ? 1 : 0]; }

/* A value handed to sbatch as one argv element (never through a shell):
 * still only the characters Slurm's partition and gres names use, so the
 * job script and the logs never carry anything else. */
static int slurm_word_ok(const char *s, const char *extra)
{
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-' || *p == '.' || strchr(extra, *p)))
            return 0;
    return 1;
}

static int parse_executor(walker *w, const json_t *obj, model_config *cfg)
{
    static const char *const keys[] = {"kind", "partition", "time_limit_min", "gres", "requeue",
                                       "gpus", "ranks", NULL};
    model_executor *e = &cfg->executor;
    int rc, kind = (int)e->kind;
    if ((rc = check_keys(w, obj, "executor", keys)) ||
        (rc = get_enum(w, obj, "executor", "kind", EXECUTORS, &kind)) ||
        (rc = get_string(w, obj, "executor", "partition", e->partition, sizeof e->partition)) ||
        (rc = get_int32(w, obj, "executor", "time_limit_min", 0, 525600, &e->time_limit_min)) ||
        (rc = get_string(w, obj, "executor", "gres", e->gres, sizeof e->gres)) ||
        (rc = get_bool(w, obj, "executor", "requeue", &e->requeue)) ||
        (rc = get_int32(w, obj, "executor", "gpus", 0, 64, &e->gpus)) ||
        (rc = get_int32(w, obj, "executor", "ranks", 0, 64, &e->ranks)))
        return rc;
    e->kind = (model_executor_kind)kind;
    if (e->gpus > 1 && e->ranks > 1)
        return fail(w, "executor.ranks", "gpus (one process per GPU) or ranks (CPU processes), "
                    "not both%s", "");
    int n = e->gpus > 1 ? e->gpus : e->ranks;
    if (n > 1 && cfg->batch % n != 0)
        return fail(w, n == e->gpus ? "executor.gpus" : "executor.ranks",
                    "train.batch (the global batch) must be a multiple of the processes%s", "");
    if (!slurm_word_ok(e->partition, ""))
        return fail(w, "executor.partition", "only letters, digits, '_', '-' and '.'%s", "");
    if (!slurm_word_ok(e->gres, ":,="))
        return fail(w, "executor.gres",
                    "only letters, digits and _ - . : , = (e.g. \"gpu:1\")%s", "");
    if (e->kind == MODEL_EXEC_LOCAL) {
        static const char *const slurm_only[] = {"partition", "time_limit_min", "gres",
                                                 "requeue", "gpus", "ranks", NULL};
        for (const char *const *k = slurm_only; *k; k++)
            if (json_object_get(obj, *k))
                return fail_key(w, "executor", *k, "only with kind \"slurm\"%s", "");
    }
    return GT_OK;
}

int model_config_from_json(const json_t *root, model_config *cfg, char *field,
                           size_t field_len, gt_error *err)
{
    walker w = {field, field_len, err};
    if (field && field_len)
        field[0] = '\0';
    model_config_defaults(cfg);
    if (!json_is_object(root))
        return fail(&w, "", "the config must be a JSON object%s", "");
    static const char *const keys[] = {"name", "dataset", "model", "train", "sample",
                                       "executor", NULL};
    static const char *const mkeys[] = {"stage1", "stage2", "accept", NULL};
    int rc;
    const json_t *sec;
    if ((rc = check_keys(&w, root, "", keys)) ||
        (rc = get_string(&w, root, "", "name", cfg->name, sizeof cfg->name)))
        return rc;
    if ((rc = get_object(&w, root, "", "dataset", &sec)) ||
        (sec && (rc = parse_dataset(&w, sec, cfg))))
        return rc;
    if ((rc = get_object(&w, root, "", "model", &sec)))
        return rc;
    if (sec) {
        const json_t *st;
        if ((rc = check_keys(&w, sec, "model", mkeys)) ||
            (rc = get_object(&w, sec, "model", "stage1", &st)) ||
            (st && (rc = parse_stage(&w, st, "model.stage1", &cfg->stage1, 0))) ||
            (rc = get_object(&w, sec, "model", "stage2", &st)) ||
            (st && (rc = parse_stage(&w, st, "model.stage2", &cfg->stage2, 1))) ||
            (rc = get_object(&w, sec, "model", "accept", &st)) ||
            (st && (rc = parse_accept(&w, st, cfg))))
            return rc;
    }
    if ((rc = get_object(&w, root, "", "train", &sec)) ||
        (sec && (rc = parse_train(&w, sec, cfg))))
        return rc;
    if ((rc = get_object(&w, root, "", "sample", &sec)) ||
        (sec && (rc = parse_sample(&w, sec, cfg))))
        return rc;
    if ((rc = get_object(&w, root, "", "executor", &sec)) ||
        (sec && (rc = parse_executor(&w, sec, cfg))))
        return rc;

    /* Cross-field rules. */
    if (cfg->steps1 + cfg->steps2 == 0)
        return fail(&w, "train.steps", "at least one stage must train%s", "");
    /* flow and ddpm share the sampler's solver, so they cannot be mixed; a
     * wgan generator needs no solver and goes with either */
    if (cfg->stage1.objective != cfg->stage2.objective &&
        cfg->stage1.objective != MODEL_OBJ_WGAN && cfg->stage2.objective != MODEL_OBJ_WGAN)
        return fail(&w, "model.stage1.objective",
                    "flow and ddpm stages share one sampler: use the same objective for both "
                    "(wgan goes with either)%s", "");
    /* the objective the solver serves (wgan only when both stages are) */
    model_objective so = cfg->stage2.objective != MODEL_OBJ_WGAN ? cfg->stage2.objective
                                                                 : cfg->stage1.objective;
    if (cfg->solver == MODEL_SOLVER_DDIM && so == MODEL_OBJ_FLOW)
        return fail(&w, "sample.solver",
                    "ddim samples ddpm models; use euler, heun or ab2 for flow%s", "");
    if (cfg->solver != MODEL_SOLVER_DDIM && so == MODEL_OBJ_DDPM &&
        json_object_get(root, "sample") && json_object_get(json_object_get(root, "sample"),
                                                           "solver"))
        return fail(&w, "sample.solver", "ddpm models sample with ddim%s", "");
    if (so == MODEL_OBJ_DDPM) {
        const json_t *tp = json_object_get(json_object_get(root, "sample"), "time_power");
        if (tp && cfg->time_power != 1)
            return fail(&w, "sample.time_power",
                        "ddim steps on its own grid; time_power is for euler, heun and ab2%s",
                        "");
        cfg->solver = MODEL_SOLVER_DDIM;
        cfg->time_power = 1;
    }
    if (so == MODEL_OBJ_WGAN && cfg->solver == MODEL_SOLVER_DDIM)
        cfg->solver = MODEL_SOLVER_HEUN; /* unused: a generator is one forward pass */
    if (cfg->stage2.objective == MODEL_OBJ_WGAN && cfg->stage2.mode == MODEL_MODE_AUTOREGRESSIVE)
        return fail(&w, "model.stage2.mode",
                    "autoregressive stage 2 trains with flow or ddpm, not wgan%s", "");
    if (cfg->stage1.objective == MODEL_OBJ_WGAN &&
        cfg->stage1.trunk.block_cond == MODEL_BLOCK_COND_TIME)
        return fail(&w, "model.stage1.trunk.block_cond",
                    "a wgan generator has no time: use none or all%s", "");
    if (cfg->stage2.objective == MODEL_OBJ_WGAN &&
        cfg->stage2.trunk.block_cond == MODEL_BLOCK_COND_TIME)
        return fail(&w, "model.stage2.trunk.block_cond",
                    "a wgan generator has no time: use none or all%s", "");
    return GT_OK;
}

int model_config_parse(const char *text, size_t len, model_config *cfg, char *field,
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
    int rc = model_config_from_json(root, cfg, field, field_len, err);
    json_decref(root);
    return rc;
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

const char *model_objective_name(model_objective o) { return OBJECTIVES[o]; }
const char *model_solver_name(model_solver s) { return SOLVERS[s]; }
const char *model_trunk_kind_name(model_trunk_kind k) { return TRUNKS[k]; }
const char *model_mode_name(model_stage2_mode m) { return MODES[m]; }

static json_t *trunk_json(const model_trunk_config *t)
{
    json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:i}", "kind", TRUNKS[t->kind], "skip",
                          SKIPS[t->skip], "hidden", t->hidden, "blocks", t->blocks, "emb_dim",
                          t->emb_dim);
    /* only when set: configs from before the field read back unchanged */
    if (o && t->block_cond != MODEL_BLOCK_COND_NONE)
        json_object_set_new(o, "block_cond", json_string(BLOCK_CONDS[t->block_cond]));
    if (o && t->kind == MODEL_TRUNK_ROUTED) {
        json_object_set_new(o, "experts", json_integer(t->experts));
        json_object_set_new(o, "top_k", json_integer(t->top_k));
        json_object_set_new(o, "balance_weight", json_real(t->balance_weight));
        json_object_set_new(o, "entropy_weight", json_real(t->entropy_weight));
    }
    return o;
}

static json_t *wgan_json(const model_wgan_config *w)
{
    return json_pack("{s:i, s:f, s:f, s:f, s:{s:i, s:i}}", "critic_steps", w->critic_steps,
                     "gp_lambda", w->gp_lambda, "beta1", w->beta1, "beta2", w->beta2, "critic",
                     "hidden", w->critic_hidden, "depth", w->critic_depth);
}

json_t *model_config_to_json(const model_config *c)
{
    json_t *dataset = json_pack("{s:s, s:I, s:f, s:I}", "geometry", c->geometry, "max_showers",
                                (json_int_t)c->max_showers, "val_fraction", c->val_fraction,
                                "split_seed", (json_int_t)c->split_seed);
    if (!dataset)
        return NULL;
    if (c->dataset_path[0])
        json_object_set_new(dataset, "path", json_string(c->dataset_path));
    else
        json_object_set_new(dataset, "synthetic",
                            json_pack("{s:I, s:I, s:{s:s, s:f, s:f}}", "n",
                                      (json_int_t)c->synthetic_n, "seed",
                                      (json_int_t)c->synthetic_seed, "energy", "dist",
                                      c->synthetic_energy, "min_mev", c->synthetic_emin_mev,
                                      "max_mev", c->synthetic_emax_mev));
    json_t *model = json_pack(
        "{s:{s:s, s:b, s:o}, s:{s:s, s:s, s:b, s:f, s:f, s:b, s:b, s:b, s:b, s:f, s:b, s:i, s:o}}",
        "stage1",
        "objective",
        OBJECTIVES[c->stage1.objective], "profile", c->stage1.profile, "trunk", trunk_json(&c->stage1.trunk), "stage2",
        "objective", OBJECTIVES[c->stage2.objective], "mode", MODES[c->stage2.mode],
        "dequantize", c->stage2.dequantize, "dequantize_top", c->stage2.dequantize_top,
        "voxel_alpha", c->stage2.voxel_alpha, "rings", c->stage2.rings, "ring_counts",
        c->stage2.ring_counts, "count_stick", c->stage2.count_stick, "keep_largest", c->stage2.keep_largest, "layer_weight",
        c->stage2.layer_weight, "skip_spent_layers", c->stage2.skip_spent_layers, "history",
        c->stage2.history, "trunk", trunk_json(&c->stage2.trunk));
    /* written only when the run has one: the configs recorded before it
     * read back to the same text */
    if (model && c->accept.enabled)
        json_object_set_new(model, "accept",
                            json_pack("{s:f, s:i, s:I, s:i, s:i, s:i}", "cap_quantile",
                                      c->accept.cap_quantile, "max_attempts",
                                      c->accept.max_attempts, "showers",
                                      (json_int_t)c->accept.showers, "hidden", c->accept.hidden,
                                      "depth", c->accept.depth, "epochs", c->accept.epochs));
    const model_stage_config *st[2] = {&c->stage1, &c->stage2};
    for (int i = 0; model && i < 2; i++)
        if (st[i]->objective == MODEL_OBJ_WGAN)
            json_object_set_new(json_object_get(model, i ? "stage2" : "stage1"), "wgan",
                                wgan_json(&st[i]->wgan));
    json_t *train = json_pack(
        "{s:s, s:s, s:I, s:i, s:{s:I, s:I}, s:f, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:I,"
        " s:I, s:i, s:I, s:i}",
        "precision", PRECISIONS[c->bf16], "device", c->device, "seed", (json_int_t)c->seed,
        "batch", c->batch, "steps", "stage1", (json_int_t)c->steps1, "stage2",
        (json_int_t)c->steps2, "lr", c->lr, "min_lr_ratio", c->min_lr_ratio, "warmup_steps",
        (json_int_t)c->warmup_steps, "weight_decay", c->weight_decay, "beta1", c->beta1,
        "beta2", c->beta2, "adam_eps", c->adam_eps, "grad_clip", c->grad_clip, "ema", c->ema, "log_every",
        (json_int_t)c->log_every, "val_every", (json_int_t)c->val_every, "val_size",
        c->val_size, "ckpt_every", (json_int_t)c->ckpt_every, "keep_checkpoints",
        c->keep_checkpoints);
    json_t *sample = json_pack("{s:s, s:i, s:i, s:b}", "solver", SOLVERS[c->solver], "steps",
                               c->sample_steps, "time_power", c->time_power, "symmetrize",
                               c->symmetrize);
    /* written only when not 1: the configs recorded before it read back to
     * the same text */
    if (sample && c->temperature != 1.0)
        json_object_set_new(sample, "temperature", json_real(c->temperature));
    json_t *root = json_pack("{s:s, s:o, s:o, s:o, s:o}", "name", c->name, "dataset", dataset,
                             "model", model, "train", train, "sample", sample);
    if (root && c->executor.kind != MODEL_EXEC_LOCAL)
        json_object_set_new(root, "executor",
                            json_pack("{s:s, s:s, s:i, s:s, s:b}", "kind",
                                      model_executor_name(c->executor.kind), "partition",
                                      c->executor.partition, "time_limit_min",
                                      c->executor.time_limit_min, "gres", c->executor.gres,
                                      "requeue", c->executor.requeue));
    /* written only when set: the configs recorded before them read back
     * to the same text */
    json_t *ex = root ? json_object_get(root, "executor") : NULL;
    if (ex && c->executor.gpus)
        json_object_set_new(ex, "gpus", json_integer(c->executor.gpus));
    if (ex && c->executor.ranks)
        json_object_set_new(ex, "ranks", json_integer(c->executor.ranks));
    return root;
}
