#include "replica_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const replica_request replica_fixture_requests[REPLICA_FIXTURE_REQUESTS] = {
    {"{\"energies\": [1000, 5000, 20000, 80000, 500000], \"seed\": 11}",
     "application/octet-stream"},
    {"{\"count\": 64, \"energy\": {\"dist\": \"log-uniform\", \"min_mev\": 1000,"
     " \"max_mev\": 1000000}, \"seed\": 5, \"steps\": 4, \"row0\": 100}",
     "application/octet-stream"},
    {"{\"count\": 30, \"seed\": 2}", "application/x-hdf5"},
    {"{\"energies\": [2000, 30000], \"seed\": 3}", "application/json"},
};

int replica_fixture_paths(replica_paths *p, const char *dir)
{
    snprintf(p->db, sizeof p->db, "%s/trainer.db", dir);
    snprintf(p->data, sizeof p->data, "%s/trainer-data", dir);
    snprintf(p->models, sizeof p->models, "%s/models", dir);
    snprintf(p->file, sizeof p->file, "%s/tiny.giant", p->models);
    return mkdir(p->models, 0755);
}

long long replica_fixture_train(gc_client *c, const char *path)
{
    char *cfg = svc_tiny_config("replicated", 20, 5, 5, NULL);
    json_t *j = NULL;
    long st = svc_json(c, "POST", "/v1/runs", cfg, NULL, &j);
    free(cfg);
    long long run = st == 201 ? json_integer_value(json_object_get(j, "id")) : 0;
    json_decref(j);
    if (!run)
        return 0;
    j = svc_wait_run(c, run, "succeeded", 120000);
    int ok = j && strcmp(json_string_value(json_object_get(j, "status")), "succeeded") == 0;
    json_decref(j);
    if (!ok)
        return 0;
    char url[64];
    snprintf(url, sizeof url, "/v1/runs/%lld/model", run);
    gc_response r = {0};
    gt_error err = {0};
    if (gc_request(c, "GET", url, NULL, NULL, 0, NULL, &r, &err) != GT_OK || r.status != 200) {
        gc_response_free(&r);
        return 0;
    }
    FILE *f = fopen(path, "wb");
    ok = f && fwrite(r.body, 1, r.len, f) == r.len;
    if (f)
        ok = fclose(f) == 0 && ok;
    gc_response_free(&r);
    return ok ? run : 0;
}

int replica_fixture_start(svc *s, const char *dir, const char *listen, const char *db,
                          const char *data_dir)
{
    const char *argv[] = {svc_binary(), "serve", "--role", "sampler", "--models", dir,
                          "--listen", listen, "--db", db, "--data-dir", data_dir,
                          "--device", "cpu", "--threads", "2", NULL};
    return svc_launch(s, (char *const *)argv);
}

long replica_fixture_post(gc_client *c, const char *path, const char *body, const char *accept,
                          void **out, size_t *len)
{
    char hdr[96];
    snprintf(hdr, sizeof hdr, "Accept: %s", accept);
    const char *h[] = {hdr, NULL};
    gc_response r = {0};
    gt_error err = {0};
    *out = NULL;
    *len = 0;
    if (gc_request(c, "POST", path, "application/json", body, strlen(body), h, &r, &err) !=
        GT_OK)
        return 0;
    *out = malloc(r.len ? r.len : 1);
    if (*out) {
        memcpy(*out, r.body, r.len);
        *len = r.len;
    }
    long st = r.status;
    gc_response_free(&r);
    return st;
}

json_t *replica_fixture_ready(gc_client *c, long ms)
{
    json_t *j = NULL;
    for (long t = 0; t <= ms; t += 50) {
        json_decref(j);
        j = NULL;
        if (svc_json(c, "GET", "/readyz", NULL, NULL, &j) == 200)
            return j;
        svc_sleep_ms(50);
    }
    return j;
}
