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

/* Opens the backend a config asks for: "auto" = the first CUDA device when
 * there is one, else the CPU.  bf16 on a device that cannot do it is an
 * error naming the device (never a silent fp32 run). */
int model_open_backend(const model_config *cfg, nn_backend **out, gt_error *err);

int model_run_train(const model_config *cfg, nn_backend *b, const char *data_dir,
                    const model_run_hooks *hooks, const model_resume *resume, gt_error *err);

#endif
