/* routes_service: the service's own routes (routes_handlers.h). */
#include "routes_handlers.h"

#include <stdio.h>
#include <string.h>

#include "app.h"
#include "build_info.h"
#include "embed.h"
#include "replica.h"
#include "sampling.h"

/* ---------------------------------------------------------------------------
 * Health
 * ------------------------------------------------------------------------- */

/* Liveness: the process answers. Nothing else is checked on purpose, so a
 * slow database never gets a healthy process restarted. */
void route_healthz(http_request *req, void *ctx)
{
    (void)ctx;
    http_reply_json(req, 200, json_pack("{s:s}", "status", "ok"));
}

/* Readiness: the database answers and is at this binary's schema version,
 * the engine listed its devices, and the server is not shutting down. */
void route_readyz(http_request *req, void *ctx)
{
    app *a = ctx;
    char why[1024] = "";
    int version = 0;
    gt_error err = { 0 };
    const char *db = "ok", *engine = "ok", *server = "ok";
    if (store_schema_version(a->db, &version, &err) != GT_OK) {
        db = "error";
        snprintf(why, sizeof why, "database: %s", err.message);
    } else if (version != a->schema_latest) {
        db = "error";
        snprintf(why, sizeof why, "database: schema version %d, expected %d", version,
                 a->schema_latest);
    }
    if (!a->engine_ok) {
        engine = "error";
        size_t n = strlen(why);
        snprintf(why + n, sizeof why - n, "%sengine: %s", n ? "; " : "", a->engine_error);
    }
    if (http_request_draining(req)) {
        server = "draining";
        size_t n = strlen(why);
        snprintf(why + n, sizeof why - n, "%sserver: shutting down", n ? "; " : "");
    }
    json_t *checks = json_pack("{s:s, s:i, s:s, s:s}", "database", db, "schema_version",
                               version, "engine", engine, "server", server);
    /* A replica is ready once every model of --models is in: the balancer
     * sends it nothing before (its sample routes would answer 503). */
    if (a->replica) {
        json_t *models = replica_models_json(a->replica);
        if (!replica_ready(a->replica)) {
            size_t n = strlen(why);
            snprintf(why + n, sizeof why - n, "%smodels: %s", n ? "; " : "",
                     json_string_value(json_object_get(models, "state")));
        }
        json_object_set_new(checks, "models", models);
    }
    json_object_set_new(checks, "role", json_string(a->cfg.role));
    if (why[0]) {
        json_t *body = json_pack("{s:{s:s, s:s, s:n}, s:o}", "error", "code",
                                 HTTP_E_UNAVAILABLE, "message", why, "field", "checks", checks);
        http_reply_json(req, 503, body);
        return;
    }
    http_reply_json(req, 200, json_pack("{s:s, s:o}", "status", "ready", "checks", checks));
}

/* ---------------------------------------------------------------------------
 * Info
 * ------------------------------------------------------------------------- */

/* How a bf16 training run goes on this device: natively, emulated (a CPU
 * without AVX512-BF16 when the operator allows it), or refused. */
static const char *bf16_training(const app *a, const gt_device_info *d)
{
    if (d->bf16)
        return "native";
    if (strcmp(d->kind, "cpu") == 0 && a->cfg.allow_bf16_emulation)
        return "emulated";
    return "refused";
}

static json_t *device_json(const app *a, const gt_device_info *d)
{
    json_t *o = json_pack("{s:s, s:i, s:s, s:I, s:i, s:b, s:s}", "kind", d->kind, "index",
                          d->index, "name", d->name, "memory_bytes",
                          (json_int_t)d->memory_bytes, "cores", d->cores, "bf16", d->bf16,
                          "bf16_training", bf16_training(a, d));
    if (!o)
        return NULL;
    if (strcmp(d->kind, "cpu") == 0)
        json_object_set_new(o, "sampling_kernels",
                            json_pack("{s:s, s:s}", "fp32", a->cpu_kernel[0], "bf16",
                                      a->cpu_kernel[1]));
    if (strcmp(d->kind, "cpu") != 0) {
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
        json_object_set_new(o, "compute_capability", json_string(cc));
    } else {
        json_object_set_new(o, "compute_capability", json_null());
    }
    return o;
}

void route_info(http_request *req, void *ctx)
{
    app *a = ctx;
    const build_info *b = build_info_get();
    json_t *devices = json_array();
    for (int i = 0; devices && i < a->ndevices; i++)
        json_array_append_new(devices, device_json(a, &a->devices[i]));
    sampling_stats ss;
    sampling_get_stats(a->sampling, &ss);
    json_t *body = json_pack("{s:s, s:s, s:s, s:{s:s, s:s, s:b, s:b}, s:o, s:{s:I, s:I, s:I, s:I}}",
                             "name", "giant", "version", b->version, "git_commit", b->git_commit,
                             "build", "type", b->build_type, "compiler", b->compiler, "cuda",
                             b->cuda, "sanitizers", b->sanitizers, "devices", devices,
                             "sampling", "requests", (json_int_t)ss.requests, "batches",
                             (json_int_t)ss.batches, "showers", (json_int_t)ss.showers,
                             "loads", (json_int_t)ss.loads);
    if (!body) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "could not build the info document");
        return;
    }
    http_reply_json(req, 200, body);
}

void route_openapi(http_request *req, void *ctx)
{
    (void)ctx;
    if (embed_openapi_count < 1) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "no OpenAPI document was embedded");
        return;
    }
    http_reply_static(req, 200, "application/json", embed_openapi[0].data,
                      embed_openapi[0].size);
}
