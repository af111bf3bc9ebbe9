/* model_config: the run configuration, parsed and validated strictly.
 *
 * A run config is JSON with five sections (all optional, every field has a
 * default, see configs/README.md):
 *
 *   { "config_version": N, "name": "...",
 *     "dataset": { "path" | "synthetic", "geometry", "max_showers",
 *                  "val_fraction", "split_seed", "simulator" },
 *       (synthetic: { "n", "seed", "energy": {"dist", "min_mev", "max_mev"} },
 *        the energy spec of model_energy.h; deprecated but still parsed as
 *        before: "energy" the dist's name beside "emin_mev", "emax_mev")
 *     "model":   { "stage1": { "objective", "trunk", "wgan" },
 *                  "accept": { "cap_quantile", "max_attempts", "showers",
 *                              "hidden", "depth", "epochs" },
 *                  "stage2": { "mode", "objective", "dequantize", "dequantize_top",
 *                              "voxel_alpha", "rings", "ring_counts", "count_stick", "keep_largest",
 *                              "layer_weight",
 *                              "trunk", "wgan" } },
 *     "train":   { "precision", "device", "seed", "batch", "steps",
 *                  "lr", "min_lr_ratio", "warmup_steps", "weight_decay",
 *                  "beta1", "beta2", "adam_eps", "grad_clip", "ema", "log_every",
 *                  "val_every", "val_size", "ckpt_every", "keep_checkpoints" },
 *     "sample":  { "solver", "steps", "time_power", "symmetrize", "temperature" },
 *     "executor": { "kind", "partition", "time_limit_min", "gres", "requeue",
 *                   "gpus", "ranks" } }
 *
 * Validation is strict: an unknown key, a wrong type or a value out of range
 * is an error that names the field by its dotted path ("train.lr"), so the
 * service can answer 422 with that field.  model_config_to_json writes the
 * complete config back with every default filled in: what a run records is
 * what it ran with.  Every field is a row of model_config_fields.c (its
 * type, range, default, and what leaving it out meant in older configs);
 * configs/README.md holds the same table.
 *
 * Versions.  A config written back names the version of the table it was
 * written by ("config_version": MODEL_CONFIG_VERSION).  Reading one takes
 * one of two views of a field left out:
 *   - a submitted config (a user's file, a POST /v1/runs body): the field
 *     takes its default, as the user sees it in configs/README.md.
 *     model_config_from_json, _parse and _load read so.
 *   - a stored config (a run's recorded config, a model file's config.json):
 *     the field takes what it meant when the config was written.  One
 *     without config_version was recorded before versions existed (version
 *     0): every field it leaves out takes its "older" value, the one the
 *     SQL migrations of that time wrote into recorded runs.
 *     model_config_from_stored_json and _parse_stored read so, through
 *     model_config_upgrade.
 * The two differ only when config_version is absent (a submitted config is
 * of the current version, a stored one of version 0): a submitted config
 * that names an older version is read as written by it, so a recorded
 * config submitted again is the same run. */
#ifndef MODEL_CONFIG_H
#define MODEL_CONFIG_H

#include <jansson.h>
#include <stdint.h>

#include "gt_error.h"

typedef enum model_objective {
    MODEL_OBJ_FLOW = 0, /* conditional flow matching, ODE sampling   */
    MODEL_OBJ_DDPM = 1, /* noise prediction, cosine schedule, DDIM   */
    MODEL_OBJ_WGAN = 2, /* generator + piecewise-linear critic, WGAN-GP */
} model_objective;

typedef enum model_stage2_mode {
    MODEL_MODE_ONESHOT = 0,        /* one network produces all layers at once */
    MODEL_MODE_AUTOREGRESSIVE = 1, /* one layer ("token") at a time, teacher-forced */
} model_stage2_mode;

/* The most previous layers model.stage2.history may name. */
#define MODEL_AR_MAX_HISTORY 8

typedef enum model_trunk_kind {
    MODEL_TRUNK_EXPERT = 0, /* residual MLP                            */
    MODEL_TRUNK_ROUTED = 1, /* experts behind a learned top-k gate     */
} model_trunk_kind;

typedef enum model_trunk_skip {
    MODEL_SKIP_NONE = 0,  /* output from the last hidden state only           */
    MODEL_SKIP_GATED = 1, /* + g(conditions) * input, per output coordinate    */
} model_trunk_skip;

/* Where a run trains: on the service's own scheduler, or as a Slurm batch
 * job that reports back over the API (server/jobs/slurm.c).  The engine only
 * carries and validates the section; what it means is the service's. */
typedef enum model_executor_kind {
    MODEL_EXEC_LOCAL = 0,
    MODEL_EXEC_SLURM = 1,
} model_executor_kind;

typedef struct model_executor {
    model_executor_kind kind;
    char partition[65];        /* "" = the service's default                */
    int time_limit_min;        /* 0 = the service's default                 */
    char gres[129];            /* "" = the service's default ("gpu:1")      */
    int requeue;               /* Slurm may requeue the job (default 1)     */
    /* data parallel inside the job: N processes on its node, gradients
     * all-reduced (giant train --report --gpus N / --ranks N); 0 = one */
    int gpus;                  /* one process per GPU, over NCCL            */
    int ranks;                 /* CPU processes, over shared memory         */
} model_executor;

typedef enum model_solver {
    MODEL_SOLVER_EULER = 0, /* flow */
    MODEL_SOLVER_HEUN = 1,  /* flow */
    MODEL_SOLVER_DDIM = 2,  /* ddpm */
    MODEL_SOLVER_AB2 = 3,   /* flow: a Heun step, then two-step Adams-Bashforth */
} model_solver;

typedef enum model_block_cond {
    MODEL_BLOCK_COND_NONE = 0, /* conditions enter at the input only           */
    MODEL_BLOCK_COND_TIME = 1, /* + the time's embedding in every block         */
    MODEL_BLOCK_COND_ALL = 2,  /* + every condition's embedding in every block  */
} model_block_cond;

typedef struct model_trunk_config {
    model_trunk_kind kind;
    model_trunk_skip skip; /* stage 2 default gated, stage 1 none   */
    model_block_cond block_cond; /* default none                    */
    int hidden;          /* width of the residual stream           */
    int blocks;          /* residual blocks (per expert)           */
    int emb_dim;         /* sinusoidal features per scalar condition */
    int experts;         /* routed only                            */
    int top_k;           /* routed only                            */
    double balance_weight; /* routed only: weight of the balance loss */
    double entropy_weight; /* routed only: weight of the entropy loss */
} model_trunk_config;

/* objective "wgan" only (model.stageN.wgan) */
typedef struct model_wgan_config {
    int critic_steps;     /* critic updates per generator update       */
    double gp_lambda;     /* weight of the gradient penalty            */
    double beta1, beta2;  /* Adam betas of both networks               */
    int critic_hidden;    /* critic width (model.stageN.wgan.critic.hidden) */
    int critic_depth;     /* critic hidden layers (.critic.depth)      */
} model_wgan_config;

typedef struct model_stage_config {
    model_objective objective;
    int profile;            /* stage 1 only: stage 1 also draws the shower's
                             * longitudinal profile (its energy-weighted mean
                             * layer and spread), and stage 2 is conditioned
                             * on it (model_data.h, MODEL_PROFILE_DIM;
                             * default on) */
    model_stage2_mode mode; /* stage 2 only */
    int dequantize;         /* stage 2 only: empty voxels as noise under the
                             * readout threshold (default on) */
    double dequantize_top;  /* stage 2 only: that noise stays under this
                             * share of the threshold (default 1e-4) */
    int skip_spent_layers;  /* stage 2 autoregressive: training leaves out
                             * the layers after a shower's energy is spent,
                             * as the sampler does (model_data.c; default
                             * off: measured in engine/model/README.md) */
    int history;            /* stage 2 autoregressive: the energy shares of
                             * the previous `history` layers are extra
                             * conditions of a layer's token (model_data.h;
                             * default 0, the conditions before the field) */
    double voxel_alpha;     /* stage 2 only: alpha of the voxel fractions'
                             * logit-map (default 1e-10) */
    int rings;              /* stage 2 only: each layer's energy split over
                             * its radial rings, then each ring's over its
                             * voxels (prep_layout_set_rings) */
    int ring_counts;        /* stage 2 only, with rings: each ring's hit
                             * count is a feature and decoding keeps that
                             * many voxels (prep_layout_set_counts; default
                             * on, off without rings) */
    int count_stick;        /* stage 2 only, with ring_counts: a layer's
                             * hit total is one feature and the rings'
                             * counts its stick-breaking, outer rings first
                             * (prep_layout_set_count_stick; default on,
                             * off without ring_counts) */
    int keep_largest;       /* stage 2 only: a decoded ring or layer whose
                             * energy reaches the threshold keeps its largest
                             * voxel (prep_layout.keep_largest; default on) */
    double layer_weight;    /* stage 2 only: the stick-breaking columns (and,
                             * with ring_counts, each layer's ring fractions
                             * and counts) are standardised to this std
                             * instead of 1, so their share of the loss grows
                             * by its square (default 4) */
    model_trunk_config trunk;
    model_wgan_config wgan;
} model_stage_config;

/* model.accept: a learned acceptance test trained at the end of the run
 * (model_accept.h), which the sampler then applies.  Absent: none, and
 * the section is not written back, so every run recorded before it keeps
 * its config text. */
typedef struct model_accept_config {
    int enabled;          /* the section is present */
    double cap_quantile;  /* (0, 1]: M is this quantile of r over generated showers */
    int max_attempts;     /* draws per shower at most (the last is kept), 1..64 */
    int64_t showers;      /* generated showers it trains on, one per training
                           * shower's energy; 0: as many as there are */
    int hidden, depth, epochs;   /* its classifier: giant eval's is 512, 3 */
} model_accept_config;

typedef struct model_config {
    char name[128];

    /* dataset: a CaloChallenge HDF5 file, or the built-in simulator */
    char dataset_path[1024];      /* "" = synthetic                      */
    char geometry[1024];          /* binning XML                         */
    int64_t synthetic_n;          /* showers to simulate                 */
    uint64_t synthetic_seed;
    char synthetic_energy[16];    /* "log-uniform" | "discrete" | "fixed" */
    double synthetic_emin_mev, synthetic_emax_mev;
    int synthetic_simulator;      /* synth_simulator: 0 gflash, 1 cascade */
    int64_t max_showers;          /* 0 = all                             */
    double val_fraction;
    uint64_t split_seed;

    model_stage_config stage1, stage2;
    model_accept_config accept;

    /* train */
    int bf16;                     /* train.precision == "bf16"           */
    char device[32];              /* "auto" | "cpu" | "cuda:N"           */
    uint64_t seed;
    int batch;
    int64_t steps1, steps2;       /* train.steps.stage1 / .stage2        */
    double lr, min_lr_ratio;
    int64_t warmup_steps;
    double weight_decay, beta1, beta2, adam_eps, grad_clip;
    double ema;                   /* train.ema: decay of the weights' moving
                                   * average that validation, checkpoints and
                                   * sampling use (flow and ddpm stages); 0:
                                   * none, the trained weights themselves */
    int64_t log_every, val_every, ckpt_every;
    int val_size;                 /* held-out showers used per validation */
    int keep_checkpoints;         /* per stage, besides the best         */

    /* sample */
    model_solver solver;
    int sample_steps;
    int time_power;     /* flow solvers: step k of K starts at t = (k / K)^p
                         * (t = 0 is the noise): p > 1 puts the short steps
                         * where the velocity turns fastest, near the noise;
                         * 1 for ddim (its own grid) */
    int symmetrize;     /* each shower turned by a random one of the
                         * geometry's rotations about the beam axis and
                         * mirrored at random, keyed by (seed, row)
                         * (geo_turn_shower): 0 in runs recorded before it */
    double temperature; /* the standard deviation of stage 2's starting
                         * noise: under 1 the sampler draws from nearer the
                         * middle of what the network learnt, as a glow's
                         * temperature; 1 (the default, and every run
                         * recorded before it) is the trained model itself */

    /* executor: written back only when it is not "local", so the configs
     * of local runs keep the bytes they had before it existed */
    model_executor executor;
} model_config;

/* Fills cfg with every default (the quickstart-sized model on synthetic
 * dataset-2 showers). */
void model_config_defaults(model_config *cfg);

/* Parses and validates a submitted config (a field left out takes its
 * default).  On failure returns GT_EINVAL, fills err with a message and
 * field (size field_len) with the dotted path of the offending field (""
 * when the document as a whole is wrong). */
int model_config_from_json(const json_t *root, model_config *cfg, char *field,
                           size_t field_len, gt_error *err);

/* The same from text; malformed JSON reports its line and column. */
int model_config_parse(const char *text, size_t len, model_config *cfg, char *field,
                       size_t field_len, gt_error *err);

/* Reads a file and parses it. */
int model_config_load(const char *path, model_config *cfg, char *field, size_t field_len,
                      gt_error *err);

/* The complete config as JSON (new reference), every default filled in and
 * config_version the current one. */
json_t *model_config_to_json(const model_config *cfg);

/* The version of the table of fields this build reads and writes.  A field
 * added to it, or a default changed, raises it by one; the field's row
 * names that version (since) and what leaving the field out meant before
 * (older), and model_config_upgrade does the rest: no SQL migration. */
#define MODEL_CONFIG_VERSION 2

/* Brings a stored config up to MODEL_CONFIG_VERSION in place: every field
 * it leaves out whose meaning changed since its config_version (absent: 0)
 * is written in with the value it meant then, and config_version is set to
 * the current one.  Fails (GT_EINVAL, naming the field) on a root that is
 * no object or a config_version that is not an integer in [1,
 * MODEL_CONFIG_VERSION]: a newer giant wrote it.  The fields themselves are
 * not checked: read the result with model_config_from_json. */
int model_config_upgrade(json_t *root, char *field, size_t field_len, gt_error *err);

/* model_config_from_json and model_config_parse for a stored config (a
 * run's recorded config text, a model file's config.json): upgraded first,
 * so it reads to the values it was written with.  This is how the service
 * reads a run's settings: the C struct, not the JSON. */
int model_config_from_stored_json(const json_t *root, model_config *cfg, char *field,
                                  size_t field_len, gt_error *err);
int model_config_parse_stored(const char *text, size_t len, model_config *cfg, char *field,
                              size_t field_len, gt_error *err);

const char *model_objective_name(model_objective o);
const char *model_solver_name(model_solver s);
const char *model_trunk_kind_name(model_trunk_kind k);
const char *model_mode_name(model_stage2_mode m);
const char *model_executor_name(model_executor_kind k);

#endif
