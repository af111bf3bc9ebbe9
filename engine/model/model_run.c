#include "model_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gt_devices.h"
#include "model_backend.h"
#include "model_ckpt.h"
#include "model_data.h"

void model_bf16_refusal(const model_config *cfg, const char *device_kind,
                        const char *device_name, int native_bf16, int emulation_possible,
                        int cc_major, int cc_minor, char *msg, size_t cap)
{
    msg[0] = '\0';
    if (!cfg->bf16 || native_bf16)
        return;
    if (strcmp(device_kind, "cpu") == 0 && emulation_possible)
        snprintf(msg, cap,
                 "train.precision bf16 needs AVX512-BF16, which this CPU (%s) lacks: its bf16 "
                 "matmuls would be emulated, about 3x slower than fp32; train in fp32, or run "
                 "the service with --allow-bf16-emulation 1 (giant train: the same flag) to "
                 "reproduce bf16 numerics anyway",
                 device_name && device_name[0] ? device_name : "unknown model");
    else if (strcmp(device_kind, "cuda") == 0 && cc_major > 0)
        snprintf(msg, cap,
                 "train.precision bf16 needs compute capability 8.0 or later; %s has %d.%d",
                 device_name && device_name[0] ? device_name : "this GPU", cc_major, cc_minor);
    else if (strcmp(device_kind, "cuda") == 0)
        snprintf(msg, cap,
                 "train.precision bf16 needs compute capability 8.0 or later, which %s lacks",
                 device_name && device_name[0] ? device_name : "this GPU");
    else
        snprintf(msg, cap, "train.precision bf16: device %s cannot compute in bf16",
                 device_name && device_name[0] ? device_name : device_kind);
}

int model_open_backend(const model_config *cfg, model_bf16_policy policy, nn_backend **out,
                       gt_error *err)
{
    *out = NULL;
    int rc;
    if (strcmp(cfg->device, "auto") == 0) {
        gt_error ignored;
        if (model_backend_open("cuda:0", out, &ignored) != GT_OK)
            rc = model_backend_open("cpu", out, err);
        else
            rc = GT_OK;
    } else {
        rc = model_backend_open(cfg->device, out, err);
    }
    if (rc)
        return rc;
    nn_backend *b = *out;
    int can_emulate = b->bf16_emulated && policy == MODEL_BF16_EMULATE;
    if (cfg->bf16 && !b->has_bf16 && !can_emulate) {
        char msg[512], name[160];
        int is_cpu = strcmp(b->name, "cpu") == 0;
        if (is_cpu) {
            gt_device_info cpu;
            gt_error ignored;
            memset(&cpu, 0, sizeof cpu);
            gt_devices_query_cpu(&cpu, &ignored);
            snprintf(name, sizeof name, "%s", cpu.name);
        } else {
            snprintf(name, sizeof name, "%s:%d", b->name, b->device);
        }
        model_bf16_refusal(cfg, is_cpu ? "cpu" : b->name, name, 0, b->bf16_emulated, 0, 0, msg,
                           sizeof msg);
        nn_backend_close(b);
        *out = NULL;
        return gt_error_set(err, GT_EUNSUPPORTED, "%s", msg);
    }
    return GT_OK;
}

typedef struct run_ctx {
    const model_run_hooks *h;
    const uint8_t *repr;
    size_t repr_len;
} run_ctx;

static int forward_step(void *user, const model_step_report *r)
{
    run_ctx *c = user;
    return c->h->on_step ? c->h->on_step(c->h->user, r) : 0;
}

static int forward_validation(void *user, int stage, long long step, float val)
{
    run_ctx *c = user;
    return c->h->on_validation ? c->h->on_validation(c->h->user, stage, step, val) : 0;
}

static int forward_checkpoint(void *user, int stage, long long step, float val,
                              const void *buf, size_t len)
{
    run_ctx *c = user;
    if (!c->h->on_checkpoint)
        return 0;
    void *blob = NULL;
    size_t blen = 0;
    gt_error err;
    if (model_ckpt_pack(stage, step, val, c->repr, c->repr_len, buf, len, &blob, &blen, &err))
        return 1;
    int rc = c->h->on_checkpoint(c->h->user, stage, step, val, blob, blen);
    free(blob);
    return rc;
}

static int forward_stop(void *user)
{
    run_ctx *c = user;
    return c->h->should_stop ? c->h->should_stop(c->h->user) : 0;
}

static void phase(const model_run_hooks *h, const char *fmt, long long a)
{
    if (h && h->on_phase) {
        char msg[200];
        snprintf(msg, sizeof msg, fmt, a);
        h->on_phase(h->user, msg);
    }
}

static int train_stage(const model_config *cfg, nn_backend *b, const model_arrays *a, int stage,
                       const void *ckpt, size_t ckpt_len, dist_comm *comm, run_ctx *ctx,
                       gt_error *err)
{
    long long total = stage == 1 ? cfg->steps1 : cfg->steps2;
    if (total == 0)
        return GT_OK;
    model_stage_data d = model_arrays_stage(a, stage);
    model_stage *s = NULL;
    int rc = model_stage_create_dist(b, cfg, stage, &d, comm, &s, err);
    if (rc)
        return rc;
    if (ckpt) {
        model_ckpt_view v;
        if ((rc = model_ckpt_unpack(ckpt, ckpt_len, &v, err)) ||
            (rc = model_stage_resume(s, v.weights, v.weights_len, err))) {
            model_stage_destroy(s);
            return rc;
        }
        if (v.stage != stage) {
            model_stage_destroy(s);
            return gt_error_set(err, GT_EFORMAT, "resume checkpoint is for stage %d, not %d",
                                v.stage, stage);
        }
    }
    /* ranks > 1: rank 0 resumed (the others were given no checkpoint) */
    if ((rc = model_stage_sync(s, err))) {
        model_stage_destroy(s);
        return rc;
    }
    if (model_stage_step(s) >= total) {
        model_stage_destroy(s);
        return GT_OK;
    }
    phase(ctx->h, stage == 1 ? "training stage 1 (energy) from step %lld"
                             : "training stage 2 (shower) from step %lld",
          model_stage_step(s));
    model_stage_hooks sh = {ctx, forward_step, forward_validation, forward_checkpoint,
                            forward_stop};
    rc = model_stage_train(s, &sh, err);
    model_stage_destroy(s);
    return rc;
}

int model_run_train(const model_config *cfg, nn_backend *b, const char *data_dir,
                    const model_run_hooks *hooks, const model_resume *resume, gt_error *err)
{
    return model_run_train_dist(cfg, b, data_dir, hooks, resume, NULL, err);
}

static int run_train(const model_config *cfg, nn_backend *b, const char *data_dir,
                     const model_run_hooks *hooks, const model_resume *resume, dist_comm *comm,
                     gt_error *err);

int model_run_train_dist(const model_config *cfg, nn_backend *b, const char *data_dir,
                         const model_run_hooks *hooks, const model_resume *resume,
                         dist_comm *comm, gt_error *err)
{
    int rc = run_train(cfg, b, data_dir, hooks, resume, comm, err);
    /* a rank that fails before or between the stages' collectives (its
     * dataset, say) must not leave the others waiting in them */
    if (rc && rc != GT_ECANCELLED)
        dist_abort(comm);
    return rc;
}

static int run_train(const model_config *cfg, nn_backend *b, const char *data_dir,
                     const model_run_hooks *hooks, const model_resume *resume, dist_comm *comm,
                     gt_error *err)
{
    model_run_hooks none;
    memset(&none, 0, sizeof none);
    if (!hooks)
        hooks = &none;
    model_resume no_resume = {0};
    if (!resume)
        resume = &no_resume;

    model_dataset ds;
    model_arrays a;
    memset(&a, 0, sizeof a);
    phase(hooks, cfg->dataset_path[0] ? "reading showers" : "simulating %lld showers",
          (long long)cfg->synthetic_n);
    int rc = model_dataset_load(cfg, data_dir, &ds, err);
    if (rc)
        return gt_error_wrap(err, "dataset");
    phase(hooks, "encoding %lld showers", (long long)ds.n);
    if ((rc = model_arrays_build(cfg, &ds, &a, err))) {
        model_dataset_free(&ds);
        return gt_error_wrap(err, "dataset");
    }
    /* The encoded arrays are all training needs from here on. */
    free(ds.showers);
    ds.showers = NULL;

    size_t rlen = model_repr_size(&a.repr), got = 0;
    uint8_t *repr = malloc(rlen);
    if (!repr) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = model_repr_to_bytes(&a.repr, repr, rlen, &got, err)))
        goto done;
    run_ctx ctx = {hooks, repr, got};
    if ((rc = train_stage(cfg, b, &a, 1, resume->stage1, resume->len1, comm, &ctx, err)) ||
        (rc = train_stage(cfg, b, &a, 2, resume->stage2, resume->len2, comm, &ctx, err)))
        goto done;
    phase(hooks, "done after %lld steps", (long long)(cfg->steps1 + cfg->steps2));
done:
    free(repr);
    model_arrays_free(&a);
    model_dataset_free(&ds);
    return rc;
}
