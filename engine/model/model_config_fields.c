/* The run config's fields, one row each, the rules between fields that the
 * rows' types and ranges cannot say (the sections' hooks), and the walker's
 * refusals they call.  model_config.c walks this table; nothing here calls
 * back into it. */
#include "model_config_fields.h"
#include "model_energy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const model_config_objectives[] = {"flow", "ddpm", "wgan", NULL};
const char *const model_config_modes[] = {"oneshot", "autoregressive", NULL};
const char *const model_config_trunks[] = {"expert", "routed", NULL};
const char *const model_config_skips[] = {"none", "gated", NULL};
const char *const model_config_block_conds[] = {"none", "time", "all", NULL};
const char *const model_config_solvers[] = {"euler", "heun", "ddim", "ab2", NULL};
const char *const model_config_precisions[] = {"fp32", "bf16", NULL};
const char *const model_config_energies[] = {"log-uniform", "discrete", "fixed", NULL};
const char *const model_config_executors[] = {"local", "slurm", NULL};
const char *const model_config_simulators[] = {"gflash", "cascade", NULL};

/* dataset.simulator's index is the engine's synth_simulator. */
_Static_assert(SYNTH_SIM_GFLASH == 0 && SYNTH_SIM_CASCADE == 1, "simulator names");

/* The enum members are read and written as ints. */
_Static_assert(sizeof(model_objective) == sizeof(int), "enum size");
_Static_assert(sizeof(model_stage2_mode) == sizeof(int), "enum size");
_Static_assert(sizeof(model_trunk_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(model_trunk_skip) == sizeof(int), "enum size");
_Static_assert(sizeof(model_block_cond) == sizeof(int), "enum size");
_Static_assert(sizeof(model_solver) == sizeof(int), "enum size");
_Static_assert(sizeof(model_executor_kind) == sizeof(int), "enum size");

/* ------------------------------------------------------------------------ */
/* the walker's refusals, which the hooks below and model_config.c share: */
/* the first problem found is reported with its dotted path                 */
/* ------------------------------------------------------------------------ */

int mcf_fail(mcf_walk *w, const char *path, const char *msg)
{
    if (w->field && w->field_len)
        snprintf(w->field, w->field_len, "%s", path);
    return gt_error_set(w->err, GT_EINVAL, "%s: %s", path[0] ? path : "config", msg);
}

int mcf_fail_key(mcf_walk *w, const char *path, const char *key, const char *msg)
{
    char p[256];
    if (path[0])
        snprintf(p, sizeof p, "%s.%s", path, key);
    else
        snprintf(p, sizeof p, "%s", key);
    return mcf_fail(w, p, msg);
}

int mcf_lookup(mcf_walk *w, const json_t *obj, const char *path, const char *key,
               mcf_type type, const char *what, const json_t **out)
{
    const json_t *v = json_object_get(obj, key);
    *out = v;
    if (!v)
        return GT_OK;
    /* "a number" accepts integers too ("lr": 1 is a number) */
    const char *word;
    switch (type) {
    case MCF_SECTION:
        if (json_is_object(v))
            return GT_OK;
        word = "an object";
        break;
    case MCF_INT:
    case MCF_INT64:
    case MCF_SEED:
    case MCF_VERSION:
        if (json_is_integer(v))
            return GT_OK;
        word = "an integer";
        break;
    case MCF_REAL:
        if (json_is_number(v))
            return GT_OK;
        word = "a number";
        break;
    case MCF_BOOL:
        if (json_is_boolean(v))
            return GT_OK;
        word = "true or false";
        break;
    default:
        if (json_is_string(v))
            return GT_OK;
        word = "a string";
        break;
    }
    char msg[160];
    snprintf(msg, sizeof msg, "must be %s", what ? what : word);
    return mcf_fail_key(w, path, key, msg);
}

/* ------------------------------------------------------------------------ */
/* when a field is written back                                             */
/* ------------------------------------------------------------------------ */

static int has_path(const model_config *c) { return c->dataset_path[0] != '\0'; }
static int is_synthetic(const model_config *c) { return c->dataset_path[0] == '\0'; }
static int names_simulator(const model_config *c)
{
    return is_synthetic(c) && c->synthetic_simulator != SYNTH_SIM_GFLASH;
}
static int stage1_wgan(const model_config *c) { return c->stage1.objective == MODEL_OBJ_WGAN; }
static int stage2_wgan(const model_config *c) { return c->stage2.objective == MODEL_OBJ_WGAN; }
static int stage1_routed(const model_config *c)
{
    return c->stage1.trunk.kind == MODEL_TRUNK_ROUTED;
}
static int stage2_routed(const model_config *c)
{
    return c->stage2.trunk.kind == MODEL_TRUNK_ROUTED;
}
static int has_accept(const model_config *c) { return c->accept.enabled; }
static int on_slurm(const model_config *c) { return c->executor.kind != MODEL_EXEC_LOCAL; }

static const mcf_when WITH_PATH = {has_path, "when given"};
static const mcf_when WITHOUT_PATH = {is_synthetic, "without `dataset.path`"};
static const mcf_when SIMULATOR = {names_simulator, "without `dataset.path`, when not `gflash`"};
static const mcf_when STAGE1_WGAN = {stage1_wgan, "with objective `wgan`"};
static const mcf_when STAGE2_WGAN = {stage2_wgan, "with objective `wgan`"};
static const mcf_when STAGE1_ROUTED = {stage1_routed, "with kind `routed`"};
static const mcf_when STAGE2_ROUTED = {stage2_routed, "with kind `routed`"};
static const mcf_when ACCEPT = {has_accept, "when given"};
static const mcf_when SLURM = {on_slurm, "with kind `slurm`"};

/* ------------------------------------------------------------------------ */
/* the rules between fields (the sections' hooks)                           */
/* ------------------------------------------------------------------------ */

/* dataset: after its own fields, before dataset.synthetic is read. */
static int dataset_check(mcf_walk *w, const json_t *obj, const char *path, void *at,
                         model_config *cfg)
{
    (void)at;
    const json_t *syn;
    int rc = mcf_lookup(w, obj, path, "synthetic", MCF_SECTION, NULL, &syn);
    if (rc)
        return rc;
    if (syn && cfg->dataset_path[0])
        return mcf_fail(w, "dataset.synthetic", "give either path or synthetic, not both");
    if (json_object_get(obj, "path") && !cfg->dataset_path[0])
        return mcf_fail(w, "dataset.path", "must not be empty");
    /* gflash is what every stored config without the field meant, a file
     * dataset's too: only another simulator is refused beside a path */
    if (cfg->dataset_path[0] && cfg->synthetic_simulator != SYNTH_SIM_GFLASH)
        return mcf_fail(w, "dataset.simulator",
                        "only without `dataset.path` (a file's showers are already made)");
    return GT_OK;
}

static int dataset_after(mcf_walk *w, const json_t *obj, const char *path, void *at,
                         model_config *cfg)
{
    (void)obj, (void)path, (void)at;
    if (!cfg->geometry[0])
        return mcf_fail(w, "dataset.geometry", "must not be empty");
    return GT_OK;
}

/* Both spellings of the range at once: the object's, or the deprecated
 * emin_mev/emax_mev beside the dist's name. */
static int synthetic_pre(mcf_walk *w, const json_t *obj, const char *path, void *at,
                         model_config *cfg)
{
    (void)path, (void)at, (void)cfg;
    if (!json_is_object(json_object_get(obj, "energy")))
        return GT_OK;
    const char *old = json_object_get(obj, "emin_mev")   ? "dataset.synthetic.emin_mev"
                      : json_object_get(obj, "emax_mev") ? "dataset.synthetic.emax_mev"
                                                         : NULL;
    if (old)
        return mcf_fail(w, old, "is the deprecated spelling of the range: with energy as an "
                                "object give energy.min_mev and energy.max_mev");
    return GT_OK;
}

static int synthetic_check(mcf_walk *w, const json_t *obj, const char *path, void *at,
                           model_config *cfg)
{
    (void)path, (void)at;
    /* the object's range is model_energy's to check */
    if (!json_is_object(json_object_get(obj, "energy")) &&
        cfg->synthetic_emax_mev < cfg->synthetic_emin_mev)
        return mcf_fail(w, "dataset.synthetic.emax_mev", "must be >= emin_mev");
    return GT_OK;
}

static int stage2_check(mcf_walk *w, const json_t *obj, const char *path, void *at,
                        model_config *cfg)
{
    (void)cfg;
    model_stage_config *s = at;
    if (s->history && s->mode != MODEL_MODE_AUTOREGRESSIVE)
        return mcf_fail_key(w, path, "history",
                            "needs the autoregressive mode (model.stage2.mode)");
    /* ring hit counts are features of the rings: on by default where there
     * are rings, an error only when asked for without them */
    if (!s->rings) {
        if (json_is_true(json_object_get(obj, "ring_counts")))
            return mcf_fail_key(w, path, "ring_counts", "needs rings (model.stage2.rings)");
        s->ring_counts = 0;
    }
    /* the stick-breaking is of the counts: likewise */
    if (!s->ring_counts) {
        if (json_is_true(json_object_get(obj, "count_stick")))
            return mcf_fail_key(w, path, "count_stick",
                                "needs ring hit counts (model.stage2.ring_counts)");
        s->count_stick = 0;
    }
    return GT_OK;
}

static int trunk_check(mcf_walk *w, const json_t *obj, const char *path, void *at,
                       model_config *cfg)
{
    (void)obj, (void)cfg;
    const model_trunk_config *t = at;
    if (t->emb_dim % 2)
        return mcf_fail_key(w, path, "emb_dim", "must be even (sine and cosine pairs)");
    if (t->top_k > t->experts)
        return mcf_fail_key(w, path, "top_k", "must not exceed experts");
    return GT_OK;
}

static int accept_check(mcf_walk *w, const json_t *obj, const char *path, void *at,
                        model_config *cfg)
{
    (void)w, (void)obj, (void)path, (void)cfg;
    ((model_accept_config *)at)->enabled = 1;
    return GT_OK;
}

static int train_check(mcf_walk *w, const json_t *obj, const char *path, void *at,
                       model_config *cfg)
{
    (void)obj, (void)path, (void)at;
    const char *d = cfg->device;
    int idx = -1, consumed = 0;
    if (strcmp(d, "auto") != 0 && strcmp(d, "cpu") != 0 && strcmp(d, "cuda") != 0 &&
        !(sscanf(d, "cuda:%d%n", &idx, &consumed) == 1 && d[consumed] == '\0' && idx >= 0))
        return mcf_fail(w, "train.device", "must be auto, cpu, cuda or cuda:N");
    return GT_OK;
}

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

static int executor_check(mcf_walk *w, const json_t *obj, const char *path, void *at,
                          model_config *cfg)
{
    const model_executor *e = at;
    if (e->gpus > 1 && e->ranks > 1)
        return mcf_fail(w, "executor.ranks",
                        "gpus (one process per GPU) or ranks (CPU processes), not both");
    int n = e->gpus > 1 ? e->gpus : e->ranks;
    if (n > 1 && cfg->batch % n != 0)
        return mcf_fail(w, n == e->gpus ? "executor.gpus" : "executor.ranks",
                        "train.batch (the global batch) must be a multiple of the processes");
    if (!slurm_word_ok(e->partition, ""))
        return mcf_fail(w, "executor.partition", "only letters, digits, '_', '-' and '.'");
    if (!slurm_word_ok(e->gres, ":,="))
        return mcf_fail(w, "executor.gres",
                        "only letters, digits and _ - . : , = (e.g. \"gpu:1\")");
    if (e->kind == MODEL_EXEC_LOCAL) {
        size_t n_path = strlen(path);
        for (int i = 0; i < model_config_field_count; i++) {
            const model_config_field *f = &model_config_fields[i];
            if ((f->flags & MCF_SLURM_ONLY) && strncmp(f->path, path, n_path) == 0 &&
                f->path[n_path] == '.' && json_object_get(obj, f->path + n_path + 1))
                return mcf_fail_key(w, path, f->path + n_path + 1, "only with kind \"slurm\"");
        }
    }
    return GT_OK;
}

/* The rules across sections. */
static int config_after(mcf_walk *w, const json_t *root, const char *path, void *at,
                        model_config *cfg)
{
    (void)path, (void)at;
    if (cfg->steps1 + cfg->steps2 == 0)
        return mcf_fail(w, "train.steps", "at least one stage must train");
    /* flow and ddpm share the sampler's solver, so they cannot be mixed; a
     * wgan generator needs no solver and goes with either */
    if (cfg->stage1.objective != cfg->stage2.objective &&
        cfg->stage1.objective != MODEL_OBJ_WGAN && cfg->stage2.objective != MODEL_OBJ_WGAN)
        return mcf_fail(w, "model.stage1.objective",
                        "flow and ddpm stages share one sampler: use the same objective for "
                        "both (wgan goes with either)");
    /* the objective the solver serves (wgan only when both stages are) */
    model_objective so = cfg->stage2.objective != MODEL_OBJ_WGAN ? cfg->stage2.objective
                                                                 : cfg->stage1.objective;
    const json_t *sample = json_object_get(root, "sample");
    if (cfg->solver == MODEL_SOLVER_DDIM && so == MODEL_OBJ_FLOW)
        return mcf_fail(w, "sample.solver",
                        "ddim samples ddpm models; use euler, heun or ab2 for flow");
    if (cfg->solver != MODEL_SOLVER_DDIM && so == MODEL_OBJ_DDPM &&
        json_object_get(sample, "solver"))
        return mcf_fail(w, "sample.solver", "ddpm models sample with ddim");
    if (so == MODEL_OBJ_DDPM) {
        if (json_object_get(sample, "time_power") && cfg->time_power != 1)
            return mcf_fail(w, "sample.time_power",
                            "ddim steps on its own grid; time_power is for euler, heun and ab2");
        cfg->solver = MODEL_SOLVER_DDIM;
        cfg->time_power = 1;
    }
    if (so == MODEL_OBJ_WGAN && cfg->solver == MODEL_SOLVER_DDIM)
        cfg->solver = MODEL_SOLVER_HEUN; /* unused: a generator is one forward pass */
    if (cfg->stage2.objective == MODEL_OBJ_WGAN && cfg->stage2.mode == MODEL_MODE_AUTOREGRESSIVE)
        return mcf_fail(w, "model.stage2.mode",
                        "autoregressive stage 2 trains with flow or ddpm, not wgan");
    if (cfg->stage1.objective == MODEL_OBJ_WGAN &&
        cfg->stage1.trunk.block_cond == MODEL_BLOCK_COND_TIME)
        return mcf_fail(w, "model.stage1.trunk.block_cond",
                        "a wgan generator has no time: use none or all");
    if (cfg->stage2.objective == MODEL_OBJ_WGAN &&
        cfg->stage2.trunk.block_cond == MODEL_BLOCK_COND_TIME)
        return mcf_fail(w, "model.stage2.trunk.block_cond",
                        "a wgan generator has no time: use none or all");
    return GT_OK;
}

/* ------------------------------------------------------------------------ */
/* the table                                                                */
/* ------------------------------------------------------------------------ */

#define AT(m) .offset = offsetof(model_config, m)
#define SECTION(p) .path = p, .type = MCF_SECTION
#define BOOL(p, m, d) .path = p, .type = MCF_BOOL, AT(m), .def = d
#define INT(p, m, a, b, d) .path = p, .type = MCF_INT, AT(m), .ilo = a, .ihi = b, .def = d
#define INT64(p, m, a, b, d) .path = p, .type = MCF_INT64, AT(m), .ilo = a, .ihi = b, .def = d
#define SEED(p, m, d) .path = p, .type = MCF_SEED, AT(m), .ilo = 0, .ihi = INT64_MAX, .def = d
#define REAL(p, m, a, open, b, d)                                                                 \
    .path = p, .type = MCF_REAL, AT(m), .lo = a, .lo_open = open, .hi = b, .def = d
#define STRING(p, m, d)                                                                           \
    .path = p, .type = MCF_STRING, AT(m), .size = sizeof(((model_config *)0)->m), .def = d
#define ENUM(p, m, names_, d) .path = p, .type = MCF_ENUM, AT(m), .names = names_, .def = d
#define NAME(p, m, names_, d)                                                                     \
    .path = p, .type = MCF_NAME, AT(m), .size = sizeof(((model_config *)0)->m),                   \
    .names = names_, .def = d
#define OPEN 1
#define CLOSED 0
/* the value runs recorded before the field had, and the migration that
 * wrote it into them */
#define OLDER(v, m) .since = 1, .older = v, .pinned_by = m
#define NO_OLDER .older = NULL

/* A stage's trunk: the same fields in both stages, their own defaults. */
#define TRUNK_ROWS(S, SKIP, SKIP_OLDER, HIDDEN, BLOCKS, ROUTED)                                   \
    {SECTION("model." #S ".trunk"), AT(S.trunk), .check = trunk_check,                            \
     .doc = "the stage's network"},                                                               \
    {ENUM("model." #S ".trunk.kind", S.trunk.kind, model_config_trunks, "expert"),                \
     .doc = "`expert`: a residual MLP; `routed`: experts behind a learned top-k gate"},           \
    {ENUM("model." #S ".trunk.skip", S.trunk.skip, model_config_skips, SKIP), SKIP_OLDER,         \
     .doc = "`gated`: each output coordinate also follows its own input, weighted by the "        \
            "conditions"},                                                                        \
    {ENUM("model." #S ".trunk.block_cond", S.trunk.block_cond, model_config_block_conds,          \
          "none"),                                                                                \
     .flags = MCF_UNLESS_DEFAULT,                                                                 \
     .rule = "not `time` for a wgan generator",                                                   \
     .doc = "what enters every residual block besides the input: `time`, the time's "             \
            "embedding; `all`, every condition's"},                                               \
    {INT("model." #S ".trunk.hidden", S.trunk.hidden, 1, 8192, HIDDEN),                           \
     .doc = "width of the residual stream"},                                                      \
    {INT("model." #S ".trunk.blocks", S.trunk.blocks, 0, 64, BLOCKS),                             \
     .doc = "residual blocks (per expert)"},                                                      \
    {INT("model." #S ".trunk.emb_dim", S.trunk.emb_dim, 2, 512, "16"), .rule = "even",            \
     .doc = "sinusoidal features per condition"},                                                 \
    {INT("model." #S ".trunk.experts", S.trunk.experts, 1, 64, "4"), .when = ROUTED,              \
     .doc = "routed: experts"},                                                                   \
    {INT("model." #S ".trunk.top_k", S.trunk.top_k, 1, 64, "2"), .when = ROUTED,                  \
     .rule = "at most `experts`", .doc = "routed: experts each row goes through"},                \
    {REAL("model." #S ".trunk.balance_weight", S.trunk.balance_weight, 0, CLOSED, 100, "0.01"),   \
     .when = ROUTED, .doc = "routed: weight of the load-balance loss"},                           \
    {REAL("model." #S ".trunk.entropy_weight", S.trunk.entropy_weight, 0, CLOSED, 100,            \
          "0.001"),                                                                               \
     .when = ROUTED, .doc = "routed: weight of the gate-entropy loss"}

/* A wgan stage's generator and critic. */
#define WGAN_ROWS(S, WGAN)                                                                        \
    {SECTION("model." #S ".wgan"), .when = WGAN, .doc = "read by a wgan stage"},                  \
    {INT("model." #S ".wgan.critic_steps", S.wgan.critic_steps, 1, 100, "5"),                     \
     .doc = "critic updates per generator update"},                                               \
    {REAL("model." #S ".wgan.gp_lambda", S.wgan.gp_lambda, 0, CLOSED, 1e4, "10"),                 \
     .doc = "weight of the gradient penalty"},                                                    \
    {REAL("model." #S ".wgan.beta1", S.wgan.beta1, 0, CLOSED, 0.9999, "0.5"),                     \
     .doc = "Adam beta1 of both networks"},                                                       \
    {REAL("model." #S ".wgan.beta2", S.wgan.beta2, 0, CLOSED, 0.99999, "0.9"),                    \
     .doc = "Adam beta2 of both networks"},                                                       \
    {SECTION("model." #S ".wgan.critic"), .doc = "the critic network"},                           \
    {INT("model." #S ".wgan.critic.hidden", S.wgan.critic_hidden, 1, 8192, "256"),                \
     .doc = "critic width"},                                                                      \
    {INT("model." #S ".wgan.critic.depth", S.wgan.critic_depth, 1, 16, "3"),                      \
     .doc = "critic hidden layers"}

const model_config_field model_config_fields[] = {
    {SECTION(""), .after = config_after, .doc = "the config"},
    {.path = "config_version", .type = MCF_VERSION, .ilo = 1, .ihi = MODEL_CONFIG_VERSION,
     .doc = "the version of this table the config was written by; left out: the current one "
            "in a submitted config, 0 (before versions) in a recorded one"},
    {STRING("name", name, "run"), .doc = "a label for the run"},

    {SECTION("dataset"), .check = dataset_check, .after = dataset_after,
     .doc = "what the run trains on"},
    {STRING("dataset.path", dataset_path, ""), .when = &WITH_PATH,
     .rule = "not empty; not with `synthetic`",
     .doc = "a CaloChallenge HDF5 file (relative: in the data directory)"},
    {STRING("dataset.geometry", geometry, "dataset_2"), .rule = "not empty",
     .doc = "a built-in binning (`dataset_1_photons`, `dataset_1_pions`, `dataset_2`, "
            "`dataset_3`) or a binning XML file"},
    {INT64("dataset.max_showers", max_showers, 0, INT64_MAX, "0"), .doc = "0: all"},
    {REAL("dataset.val_fraction", val_fraction, 0, OPEN, 0.5, "0.1"),
     .doc = "held-out share"},
    {SEED("dataset.split_seed", split_seed, "7"), .doc = "seed of the train/validation split"},
    {ENUM("dataset.simulator", synthetic_simulator, model_config_simulators, "gflash"),
     .since = 2, .older = "gflash", .when = &SIMULATOR, .rule = "`gflash` with `path`",
     .doc = "the simulator that makes the built-in dataset (`dataset.synthetic`): `gflash`, "
            "the GFlash parameterisation; `cascade`, sub-showers, track quanta and hadron-like "
            "pions (`engine/data/README.md`)"},
    {SECTION("dataset.synthetic"), .when = &WITHOUT_PATH, .pre = synthetic_pre,
     .check = synthetic_check,
     .doc = "showers of the built-in simulator (the default dataset; `dataset.simulator` picks "
            "which)"},
    {INT64("dataset.synthetic.n", synthetic_n, 16, 100000000, "20000"),
     .doc = "showers to simulate"},
    {SEED("dataset.synthetic.seed", synthetic_seed, "1"), .doc = "the simulator's seed"},
    {.path = "dataset.synthetic.energy", .type = MCF_ENERGY, AT(synthetic_energy),
     .size = sizeof(((model_config *)0)->synthetic_energy), .names = model_config_energies,
     .doc = "incident energies, as sample requests and synthetic datasets take them"},
    {NAME("dataset.synthetic.energy.dist", synthetic_energy, model_config_energies,
          "log-uniform"),
     .flags = MCF_BY_PARENT,
     .doc = "`discrete`: powers of two in the range; `fixed`: always `min_mev`"},
    {REAL("dataset.synthetic.energy.min_mev", synthetic_emin_mev, MODEL_ENERGY_MIN_MEV, CLOSED,
          MODEL_ENERGY_MAX_MEV, "1000"),
     .flags = MCF_BY_PARENT, .doc = "MeV"},
    {REAL("dataset.synthetic.energy.max_mev", synthetic_emax_mev, MODEL_ENERGY_MIN_MEV, CLOSED,
          MODEL_ENERGY_MAX_MEV, "1000000"),
     .flags = MCF_BY_PARENT,
     .rule = "at least `min_mev`; a `discrete` range holds a power of two", .doc = "MeV"},
    {REAL("dataset.synthetic.emin_mev", synthetic_emin_mev, 1, CLOSED, 1e8, NULL),
     .flags = MCF_DEPRECATED, .rule = "not with `energy` as an object",
     .doc = "deprecated: `energy` as the dist's name beside `emin_mev`, `emax_mev`"},
    {REAL("dataset.synthetic.emax_mev", synthetic_emax_mev, 1, CLOSED, 1e8, NULL),
     .flags = MCF_DEPRECATED, .rule = "at least `emin_mev`; not with `energy` as an object",
     .doc = "deprecated, as `emin_mev`"},

    {SECTION("model"), .doc = "the two stages and the acceptance test"},
    {SECTION("model.stage1"), AT(stage1),
     .doc = "stage 1: E_dep / E_inc given E_inc (and the depth profile)"},
    {ENUM("model.stage1.objective", stage1.objective, model_config_objectives, "flow"),
     .rule = "flow and ddpm not mixed across the stages",
     .doc = "`flow` (flow matching), `ddpm` (noise prediction), `wgan` (WGAN-GP generator)"},
    {BOOL("model.stage1.profile", stage1.profile, "true"), OLDER("false", "0014"),
     .doc = "stage 1 also draws the shower's energy-weighted mean layer and spread, and "
            "stage 2 is conditioned on them"},
    TRUNK_ROWS(stage1, "none", NO_OLDER, "64", "2", &STAGE1_ROUTED),
    WGAN_ROWS(stage1, &STAGE1_WGAN),

    {SECTION("model.stage2"), AT(stage2), .check = stage2_check,
     .doc = "stage 2: the shower given E_inc and stage 1's draw"},
    {ENUM("model.stage2.objective", stage2.objective, model_config_objectives, "flow"),
     .doc = "as stage 1's"},
    {ENUM("model.stage2.mode", stage2.mode, model_config_modes, "oneshot"),
     .rule = "`autoregressive` with flow or ddpm",
     .doc = "`oneshot`: all layers at once; `autoregressive`: one layer at a time"},
    {BOOL("model.stage2.dequantize", stage2.dequantize, "true"), OLDER("false", "0003"),
     .doc = "empty voxels as noise under the readout threshold"},
    {BOOL("model.stage2.rings", stage2.rings, "true"), OLDER("false", "0004"),
     .doc = "each layer's energy split over its radial rings, then each ring's over its "
            "voxels"},
    {BOOL("model.stage2.skip_spent_layers", stage2.skip_spent_layers, "false"),
     .doc = "autoregressive: training leaves out a shower's layers once its energy is spent"},
    {INT("model.stage2.history", stage2.history, 0, MODEL_AR_MAX_HISTORY, "0"),
     .rule = "0 unless autoregressive",
     .doc = "autoregressive: a layer's token is also conditioned on the previous `history` "
            "layers' energy shares"},
    {BOOL("model.stage2.ring_counts", stage2.ring_counts, "true"), OLDER("false", "0008"),
     .rule = "`true` only with rings; `false` without them",
     .doc = "each ring's hit count is a feature; decoding keeps that many voxels"},
    {BOOL("model.stage2.count_stick", stage2.count_stick, "true"), OLDER("false", "0013"),
     .rule = "`true` only with ring_counts; `false` without them",
     .doc = "a layer's hit total, then the rings' shares of it by stick-breaking, outer "
            "rings first"},
    {BOOL("model.stage2.keep_largest", stage2.keep_largest, "true"), OLDER("false", "0005"),
     .doc = "a decoded ring or layer that reaches the threshold keeps its largest voxel"},
    {REAL("model.stage2.layer_weight", stage2.layer_weight, 0, OPEN, 100, "4"),
     OLDER("1", "0005"),
     .doc = "std the stick-breaking columns (and ring fractions and counts) are "
            "standardised to"},
    {REAL("model.stage2.dequantize_top", stage2.dequantize_top, 0, OPEN, 1, "0.0001"),
     OLDER("0.1", "0004"), .doc = "the dequantization noise stays under this share of the "
                                  "threshold"},
    {REAL("model.stage2.voxel_alpha", stage2.voxel_alpha, 0, OPEN, 1e-3, "1e-10"),
     OLDER("1e-6", "0003"), .doc = "floor of the voxel fractions' logit-map"},
    TRUNK_ROWS(stage2, "gated", OLDER("none", "0003"), "256", "3", &STAGE2_ROUTED),
    WGAN_ROWS(stage2, &STAGE2_WGAN),

    {SECTION("model.accept"), AT(accept), .when = &ACCEPT, .check = accept_check,
     .doc = "a learned acceptance test the sampler applies (absent: none)"},
    {REAL("model.accept.cap_quantile", accept.cap_quantile, 0, OPEN, 1.0, "0.5"),
     .doc = "M is this quantile of the classifier's odds over generated showers"},
    {INT("model.accept.max_attempts", accept.max_attempts, 1, 64, "8"),
     .doc = "draws per shower at most (the last is kept)"},
    {INT64("model.accept.showers", accept.showers, 0, 10000000, "0"),
     .doc = "generated showers it trains on (0: one per training shower)"},
    {INT("model.accept.hidden", accept.hidden, 1, 4096, "512"), .doc = "classifier width"},
    {INT("model.accept.depth", accept.depth, 1, 8, "3"), .doc = "classifier hidden layers"},
    {INT("model.accept.epochs", accept.epochs, 1, 1000, "10"), .doc = "classifier epochs"},

    {SECTION("train"), .check = train_check, .doc = "the optimisation"},
    {ENUM("train.precision", bf16, model_config_precisions, "fp32"),
     .doc = "`bf16`: bf16 matrix inputs, fp32 accumulation and master weights"},
    {STRING("train.device", device, "auto"), .rule = "`auto`, `cpu`, `cuda` or `cuda:N`",
     .doc = "where it trains"},
    {SEED("train.seed", seed, "1"), .doc = "seed of the initialisation and the batches"},
    {INT("train.batch", batch, 1, 1 << 20, "256"), .doc = "showers per step"},
    {REAL("train.lr", lr, 0, OPEN, 1.0, "0.001"), .doc = "peak learning rate"},
    {REAL("train.min_lr_ratio", min_lr_ratio, 0, CLOSED, 1.0, "0.05"),
     .doc = "the cosine schedule ends at lr times this"},
    {INT64("train.warmup_steps", warmup_steps, 0, INT64_MAX, "100"), .doc = "linear warm-up"},
    {REAL("train.weight_decay", weight_decay, 0, CLOSED, 1.0, "0.01"), .doc = "AdamW"},
    {REAL("train.beta1", beta1, 0, CLOSED, 0.9999, "0.9"), .doc = "AdamW"},
    {REAL("train.beta2", beta2, 0, CLOSED, 0.99999, "0.999"), .doc = "AdamW"},
    {REAL("train.adam_eps", adam_eps, 0, OPEN, 1.0, "1e-8"), .doc = "AdamW"},
    {REAL("train.grad_clip", grad_clip, 0, CLOSED, 1e6, "1"), .doc = "global gradient norm"},
    {REAL("train.ema", ema, 0, CLOSED, 0.999999, "0"),
     .doc = "decay of the weights' moving average that validation, checkpoints and sampling "
            "use (flow and ddpm); 0: none"},
    {INT64("train.log_every", log_every, 1, INT64_MAX, "10"), .doc = "steps between metrics"},
    {INT64("train.val_every", val_every, 1, INT64_MAX, "200"),
     .doc = "steps between validations"},
    {INT("train.val_size", val_size, 1, 1 << 24, "1024"),
     .doc = "held-out showers per validation"},
    {INT64("train.ckpt_every", ckpt_every, 1, INT64_MAX, "500"),
     .doc = "steps between checkpoints"},
    {INT("train.keep_checkpoints", keep_checkpoints, 1, 1000, "2"),
     .doc = "checkpoints kept per stage, besides the best"},
    {SECTION("train.steps"), .what = "an object {stage1, stage2}",
     .doc = "training steps of each stage"},
    {INT64("train.steps.stage1", steps1, 0, 100000000, "1000"),
     .rule = "one of the stages more than 0", .doc = "stage 1's steps"},
    {INT64("train.steps.stage2", steps2, 0, 100000000, "2000"), .doc = "stage 2's steps"},

    {SECTION("sample"), .doc = "how the run's showers are generated"},
    {ENUM("sample.solver", solver, model_config_solvers, "heun"),
     .rule = "`ddim` for ddpm (and set so), the others for flow",
     .doc = "`euler`, `heun`, `ab2` (a Heun step, then two-step Adams-Bashforth) for flow; "
            "`ddim` for ddpm"},
    {INT("sample.steps", sample_steps, 1, 1000, "20"), .doc = "solver steps"},
    {INT("sample.time_power", time_power, 1, 4, "2"), OLDER("1", "0009"),
     .rule = "1 for ddpm (and set so)", .doc = "step k of K starts at t = (k / K)^p"},
    {BOOL("sample.symmetrize", symmetrize, "true"), OLDER("false", "0012"),
     .doc = "each shower turned about the beam axis and mirrored at random"},
    {REAL("sample.temperature", temperature, 0, OPEN, 2.0, "1"), .flags = MCF_UNLESS_DEFAULT,
     .doc = "standard deviation of stage 2's starting noise"},

    {SECTION("executor"), AT(executor), .when = &SLURM, .check = executor_check,
     .doc = "where the service trains the run"},
    {ENUM("executor.kind", executor.kind, model_config_executors, "local"),
     .doc = "`local`: the service's scheduler; `slurm`: a Slurm batch job"},
    {STRING("executor.partition", executor.partition, ""), .flags = MCF_SLURM_ONLY,
     .rule = "letters, digits, `_-.`", .doc = "\"\": the service's default"},
    {INT("executor.time_limit_min", executor.time_limit_min, 0, 525600, "0"),
     .flags = MCF_SLURM_ONLY, .doc = "0: the service's default"},
    {STRING("executor.gres", executor.gres, ""), .flags = MCF_SLURM_ONLY,
     .rule = "letters, digits, `_-.:,=`", .doc = "\"\": the service's default (`gpu:1`)"},
    {BOOL("executor.requeue", executor.requeue, "true"), .flags = MCF_SLURM_ONLY,
     .doc = "Slurm may requeue the job; it resumes from its last checkpoint"},
    {INT("executor.gpus", executor.gpus, 0, 64, "0"),
     .flags = MCF_SLURM_ONLY | MCF_UNLESS_DEFAULT,
     .rule = "not with `ranks`; divides `train.batch`",
     .doc = "data parallel in the job: one process per GPU"},
    {INT("executor.ranks", executor.ranks, 0, 64, "0"),
     .flags = MCF_SLURM_ONLY | MCF_UNLESS_DEFAULT, .rule = "divides `train.batch`",
     .doc = "data parallel in the job: CPU processes"},
};

const int model_config_field_count =
    (int)(sizeof model_config_fields / sizeof model_config_fields[0]);

const model_config_field *model_config_field_find(const char *path)
{
    for (int i = 0; i < model_config_field_count; i++)
        if (strcmp(model_config_fields[i].path, path) == 0)
            return &model_config_fields[i];
    return NULL;
}

json_t *model_config_field_get(const model_config_field *f, const model_config *c)
{
    const char *at = (const char *)c + f->offset;
    switch (f->type) {
    case MCF_BOOL: return json_boolean(*(const int *)at);
    case MCF_INT: return json_integer(*(const int *)at);
    case MCF_INT64: return json_integer((json_int_t) * (const int64_t *)at);
    case MCF_SEED: return json_integer((json_int_t) * (const uint64_t *)at);
    case MCF_REAL: return json_real(*(const double *)at);
    case MCF_STRING:
    case MCF_NAME: return json_string(at);
    case MCF_ENUM: return json_string(f->names[*(const int *)at]);
    case MCF_VERSION: return json_integer(MODEL_CONFIG_VERSION);
    default: return NULL;
    }
}

json_t *model_config_field_literal(const model_config_field *f, const char *text)
{
    switch (f->type) {
    case MCF_BOOL: return json_boolean(strcmp(text, "true") == 0);
    case MCF_INT:
    case MCF_INT64:
    case MCF_SEED: return json_integer((json_int_t)strtoll(text, NULL, 10));
    case MCF_REAL: return json_real(strtod(text, NULL));
    case MCF_STRING:
    case MCF_NAME:
    case MCF_ENUM: return json_string(text);
    default: return NULL;
    }
}
