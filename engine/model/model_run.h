/* model_run: a whole training run, offline or inside the service.
 *
 * Loads the showers, builds the stage arrays, trains stage 1 then stage 2
 * with the stage trainer (flow, DDPM or WGAN-GP; stage 2 oneshot or
 * autoregressive), and hands every metric, validation and
 * checkpoint to the caller's hooks (the service writes them to SQLite; the
 * command line does too, into a local database).  Resuming: pass the last
 * checkpoint of each stage; a stage whose checkpoint is at its final step is
 * not trained again. */
#ifndef MODEL_RUN_H
#define MODEL_RUN_H

#include <stddef.h>

#include "dist.h"
#include "gt_error.h"
#include "model_config.h"
#include "model_stage.h"
#include "nn_backend.h"

typedef struct model_run_hooks {
    void *user;
    int (*on_step)(void *user, const model_step_report *r);
    int (*on_validation)(void *user, int stage, long long step, float val_loss);
    /* blob: a model_ckpt (stage checkpoint with the fitted transforms). */
    int (*on_checkpoint)(void *user, int stage, long long step, float val_loss,
                         const void *blob, size_t len);
    int (*should_stop)(void *user);
    /* Human-readable phase changes ("simulating 20000 showers", ...). */
    void (*on_phase)(void *user, const char *phase);
} model_run_hooks;

typedef struct model_resume {
    const void *stage1;   /* last stage-1 checkpoint blob or NULL */
    size_t len1;
    const void *stage2;   /* last stage-2 checkpoint blob or NULL */
    size_t len2;
} model_resume;

/* How a bf16 config may run on a device without native bf16 matmuls. */
typedef enum model_bf16_policy {
    MODEL_BF16_NATIVE = 0,     /* refuse: training (the product rule) */
    MODEL_BF16_EMULATE = 1,    /* allow the CPU's exact emulation: sampling
                                  (whose fixed-order layer emulates at fp32
                                  speed), tests, and operators who ask */
} model_bf16_policy;

/* Opens the backend a config asks for: "auto" = the first CUDA device when
 * there is one, else the CPU.  bf16 on a device that cannot do it at all is
 * an error naming the device; bf16 on a CPU without AVX512-BF16 is an error
 * naming the missing instruction set unless the policy allows emulation
 * (never a silent fp32 run, never a silent slow one). */
int model_open_backend(const model_config *cfg, model_bf16_policy policy, nn_backend **out,
                       gt_error *err);

/* Why a bf16 config cannot train natively on the backend: "" when it can
 * (or the config is fp32); else a sentence naming train.precision, the
 * device and what it lacks.  Shared by model_open_backend and the service's
 * check at submission. */
void model_bf16_refusal(const model_config *cfg, const char *device_kind,
                        const char *device_name, int native_bf16, int emulation_possible,
                        int cc_major, int cc_minor, char *msg, size_t cap);

int model_run_train(const model_config *cfg, nn_backend *b, const char *data_dir,
                    const model_run_hooks *hooks, const model_resume *resume, gt_error *err);

/* The same as one rank of a data-parallel group (engine/dist; NULL = one
 * rank, exactly model_run_train).  Every rank loads the same data and
 * builds the same arrays; rank 0 is given the resume checkpoints and the
 * hooks that record, the others need neither (each stage starts from rank
 * 0's state, model_stage_sync) and usually pass only should_stop.  A rank
 * that fails aborts the group, so the others fail too instead of waiting.
 * The config's batch is the global batch (a multiple of the ranks). */
int model_run_train_dist(const model_config *cfg, nn_backend *b, const char *data_dir,
                         const model_run_hooks *hooks, const model_resume *resume,
                         dist_comm *comm, gt_error *err);

#endif
