/* End to end against the real `giant serve` on a loopback port: make a
 * synthetic dataset and register a file, submit a tiny run naming it,
 * watch it succeed over the event stream, read metrics (fp32 validation
 * loss per stage), list and download checkpoints (one best per stage),
 * sample in the three formats (shapes, energies, reproducibility by seed,
 * no voxel under the readout threshold the run's checkpoints carry),
 * serve many concurrent sample requests in fewer device batches, check
 * each documented error while the server keeps serving, and train and
 * sample each stage-2 variant (wgan in fp32 and bf16, autoregressive,
 * routed) through the service. */
#include "check.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "giant_client.h"
#include "gt_sha256.h"
#include "model_ckpt.h"
#include "model_data.h"
#include "runs.h"
#include "svc_check.h"
#include "svc_harness.h"

static svc S;
static char dir[256], db[320], data[320];

/* ---------------------------------------------------------------------------
 * Datasets
 * ------------------------------------------------------------------------- */

/* POSTs a dataset (202, its reply's member key is want; *id its id) and
 * waits until it is no longer pending: the last reply, checked to be ready
 * ("<what> status ..." when not). */
static json_t *dataset_ready(gc_client *c, const char *body, const char *key, const char *want,
                             const char *what, long long *id)
{
    json_t *j = NULL;
    CHECK_EQ_INT(svc_json(c, "POST", "/v1/datasets", body, NULL, &j), 202);
    CHECK(svc_str(j, key) && strcmp(svc_str(j, key), want) == 0);
    *id = svc_num(j, "id");
    json_decref(j);
    j = svc_wait_dataset(c, *id, 60000);
    CHECK_MSG(svc_str(j, "status") && strcmp(svc_str(j, "status"), "ready") == 0,
              "%s status %s", what, svc_str(j, "status"));
    return j;
}

static long long test_datasets(gc_client *c)
{
    long long id, file_id;
    json_t *j = dataset_ready(c,
                              "{\"name\": \"tiny\", \"synthetic\": {\"geometry\":"
                              " \"dataset_1_photons\", \"n\": 300, \"seed\": 2, \"energy\":"
                              " {\"dist\": \"log-uniform\", \"min_mev\": 1000, \"max_mev\":"
                              " 100000}}}",
                              "status", "pending", "dataset", &id);
    CHECK_EQ_INT(svc_num(j, "n_showers"), 300);
    CHECK_EQ_INT(svc_num(j, "n_voxels"), 368);
    CHECK_CLOSE(json_number_value(json_object_get(j, "progress")), 1.0, 1e-9, 0);
    json_decref(j);

    /* The file just made, registered under another name: pending while the
     * datasets worker checks its rows, then ready (test_datasets covers
     * the files that fail). */
    j = dataset_ready(c,
                      "{\"name\": \"tiny-file\", \"path\": \"tiny.h5\", \"geometry\":"
                      " \"dataset_1_photons\"}",
                      "kind", "file", "file", &file_id);
    CHECK_EQ_INT(svc_num(j, "n_showers"), 300);
    json_t *range = json_object_get(j, "energy_range_mev");
    double lo = json_number_value(json_object_get(range, "min"));
    double hi = json_number_value(json_object_get(range, "max"));
    CHECK_MSG(lo >= 1000 && hi <= 100000 && lo < hi, "range %g %g", lo, hi);
    json_decref(j);

    /* Paths out of the data directory are refused, links included. */
    long st = svc_json(c, "POST", "/v1/datasets", "{\"name\": \"esc\", \"path\": \"../test.db\"}",
                  NULL, &j);
    CHECK_EQ_INT(st, 422);
    CHECK(svc_efield(j) && strcmp(svc_efield(j), "path") == 0);
    json_decref(j);
    char link[400];
    snprintf(link, sizeof link, "%s/out.h5", data);
    CHECK(symlink(db, link) == 0);
    st = svc_json(c, "POST", "/v1/datasets", "{\"name\": \"esc2\", \"path\": \"out.h5\"}", NULL,
                  &j);
    CHECK_EQ_INT(st, 422);
    json_decref(j);
    st = svc_json(c, "POST", "/v1/datasets", "{\"name\": \"tiny\", \"path\": \"tiny.h5\","
                  " \"geometry\": \"dataset_1_photons\"}", NULL, &j);
    CHECK_EQ_INT(st, 409);      /* name taken */
    json_decref(j);
    st = svc_json(c, "GET", "/v1/datasets", NULL, NULL, &j);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_array_size(json_object_get(j, "items")), 2);
    json_decref(j);
    st = svc_json(c, "GET", "/v1/datasets/999", NULL, NULL, &j);
    CHECK_EQ_INT(st, 404);
    json_decref(j);
    /* the second simulator, named in the spec the dataset keeps */
    long long cascade_id;
    j = dataset_ready(c,
                      "{\"name\": \"tiny-cascade\", \"synthetic\": {\"geometry\":"
                      " \"dataset_1_pions\", \"n\": 40, \"simulator\": \"cascade\"}}",
                      "status", "pending", "cascade dataset", &cascade_id);
    CHECK_EQ_INT(svc_num(j, "n_voxels"), 533);
    const char *sim = json_string_value(
        json_object_get(json_object_get(j, "spec"), "simulator"));
    CHECK_MSG(sim && !strcmp(sim, "cascade"), "spec.simulator %s", sim ? sim : "(none)");
    json_decref(j);
    return id;
}

/* ---------------------------------------------------------------------------
 * A run, watched to the end
 * ------------------------------------------------------------------------- */

typedef struct watch {
    int metrics, vals, ckpts;
    char last_status[16];
    long long last_id;
} watch;

static int on_event(void *user, long long id, const char *event, const char *data)
{
    watch *w = user;
    w->last_id = id;
    if (!strcmp(event, "metric"))
        w->metrics++;
    else if (!strcmp(event, "val_loss"))
        w->vals++;
    else if (!strcmp(event, "checkpoint"))
        w->ckpts++;
    else if (!strcmp(event, "status")) {
        json_t *j = json_loads(data, 0, NULL);
        snprintf(w->last_status, sizeof w->last_status, "%s", svc_str(j, "status"));
        json_decref(j);
    }
    return 0;
}

static long long test_run(gc_client *c, long long dataset)
{
    char members[64];
    snprintf(members, sizeof members, "\"dataset_id\": %lld", dataset);
    char *cfg = svc_tiny_config("e2e", 20, 2, 10, members);
    json_t *run = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(gc_submit_run(c, cfg, "e2e-key", &run, &err), GT_OK);
    long long id = svc_num(run, "id");
    CHECK(id > 0);
    json_t *config = json_object_get(run, "config");
    CHECK(svc_str(json_object_get(config, "dataset"), "path") &&
          strcmp(svc_str(json_object_get(config, "dataset"), "path"), "tiny.h5") == 0);
    json_decref(run);

    /* Same key and body: the same run, 200; another body: 409. */
    CHECK_EQ_INT(gc_submit_run(c, cfg, "e2e-key", &run, &err), GT_OK);
    CHECK_EQ_INT(svc_num(run, "id"), id);
    json_decref(run);
    const char *hdr[] = {"Idempotency-Key: e2e-key", NULL};
    json_t *j;
    CHECK_EQ_INT(svc_json(c, "POST", "/v1/runs", "{\"name\": \"other\"}", hdr, &j), 409);
    CHECK(svc_ecode(j) && strcmp(svc_ecode(j), "conflict") == 0);
    json_decref(j);
    free(cfg);

    /* Follow the events until the stream ends with the run. */
    watch w = {0};
    CHECK_EQ_INT(gc_watch_events(c, id, 0, on_event, &w, &err), GT_OK);
    CHECK_MSG(strcmp(w.last_status, "succeeded") == 0, "last status '%s'", w.last_status);
    CHECK_EQ_INT(w.metrics, 20);                 /* 10 per stage, log_every 2 */
    CHECK_EQ_INT(w.vals, 4);                     /* steps 10 and 20 per stage */
    CHECK(w.ckpts >= 4);
    /* Resume from the last event: nothing new, the stream ends at once. */
    watch w2 = {0};
    CHECK_EQ_INT(gc_watch_events(c, id, w.last_id, on_event, &w2, &err), GT_OK);
    CHECK_EQ_INT(w2.metrics + w2.vals + w2.ckpts, 0);

    run = svc_wait_run(c, id, "succeeded", 1000);
    CHECK(svc_str(run, "status") && strcmp(svc_str(run, "status"), "succeeded") == 0);
    CHECK(svc_str(run, "device") && strcmp(svc_str(run, "device"), "cpu") == 0);
    CHECK(svc_str(run, "precision") && strcmp(svc_str(run, "precision"), "fp32") == 0);
    json_t *best = json_object_get(run, "best");
    CHECK(json_object_get(best, "energy") && json_object_get(best, "shower"));
    json_t *pr = json_object_get(run, "progress");
    CHECK_EQ_INT(svc_num(pr, "done_steps"), 40);
    CHECK_EQ_INT(svc_num(pr, "total_steps"), 40);
    json_decref(run);
    return id;
}

static void test_metrics_and_checkpoints(gc_client *c, long long id)
{
    char path[128];
    json_t *j;
    snprintf(path, sizeof path, "/v1/runs/%lld/metrics?name=val_loss", id);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    json_t *series = json_object_get(j, "series");
    CHECK_EQ_INT(json_array_size(series), 2);
    int stages = 0;
    size_t i;
    json_t *s;
    json_array_foreach(series, i, s) {
        stages |= strcmp(svc_str(s, "stage"), "energy") == 0 ? 1 : 2;
        CHECK_EQ_INT(svc_num(s, "count"), 2);
        json_t *p = json_array_get(json_object_get(s, "points"), 1);
        CHECK_EQ_INT(json_integer_value(json_array_get(p, 0)), 20);
        CHECK(isfinite(json_number_value(json_array_get(p, 1))));
    }
    CHECK_EQ_INT(stages, 3);
    json_decref(j);

    /* Downsampling: 10 loss points per stage into at most 3 buckets. */
    snprintf(path, sizeof path, "/v1/runs/%lld/metrics?name=loss&max_points=3", id);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    series = json_object_get(j, "series");
    CHECK_EQ_INT(json_array_size(series), 2);
    json_array_foreach(series, i, s) {
        CHECK_EQ_INT(svc_num(s, "count"), 10);
        CHECK(json_array_size(json_object_get(s, "points")) <= 3);
    }
    json_decref(j);
    snprintf(path, sizeof path, "/v1/runs/%lld/metrics?since_step=15", id);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    json_array_foreach(json_object_get(j, "series"), i, s) {
        json_t *p = json_array_get(json_object_get(s, "points"), 0);
        CHECK(json_integer_value(json_array_get(p, 0)) >= 15);
    }
    json_decref(j);

    /* Checkpoints: one best per stage; the download matches its checksum. */
    snprintf(path, sizeof path, "/v1/runs/%lld/checkpoints", id);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    int best_e = 0, best_s = 0;
    long long best_id = 0;
    char best_sum[80] = "";
    json_array_foreach(json_object_get(j, "items"), i, s) {
        if (!json_is_true(json_object_get(s, "best")))
            continue;
        if (strcmp(svc_str(s, "stage"), "energy") == 0) {
            best_e++;
            best_id = svc_num(s, "id");
            snprintf(best_sum, sizeof best_sum, "%s", svc_str(s, "sha256"));
        } else {
            best_s++;
        }
    }
    CHECK_EQ_INT(best_e, 1);
    CHECK_EQ_INT(best_s, 1);
    json_decref(j);
    snprintf(path, sizeof path, "/v1/runs/%lld/checkpoints/%lld", id, best_id);
    gc_response r;
    gt_error err = {0};
    CHECK_EQ_INT(gc_request(c, "GET", path, NULL, NULL, 0, NULL, &r, &err), GT_OK);
    CHECK_EQ_INT(r.status, 200);
    char sum[65];
    gt_sha256_hex(r.body, r.len, sum);
    CHECK(strcmp(sum, r.checksum) == 0);
    CHECK(strcmp(sum, best_sum) == 0);
    CHECK(r.len > 100);
    gc_response_free(&r);
    snprintf(path, sizeof path, "/v1/runs/%lld/checkpoints/999999", id);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, NULL), 404);
}

/* ---------------------------------------------------------------------------
 * Samples
 * ------------------------------------------------------------------------- */

static uint32_t u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float f32(const unsigned char *p)
{
    uint32_t v = u32(p);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

static int write_file(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(buf, 1, len, f);
    return fclose(f) == 0 && w == len ? 0 : -1;
}

/* The readout threshold the run's best stage-2 checkpoint carries (what its
 * sampler applies: the training showers' smallest hit), read from the
 * checkpoint as downloaded; 0 when it cannot be read (a failed check). */
static float run_readout(gc_client *c, long long id)
{
    char path[128];
    json_t *j = NULL, *item;
    size_t i;
    long long best = 0;
    snprintf(path, sizeof path, "/v1/runs/%lld/checkpoints", id);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    json_array_foreach(json_object_get(j, "items"), i, item)
        if (json_is_true(json_object_get(item, "best")) &&
            strcmp(svc_str(item, "stage"), "shower") == 0)
            best = svc_num(item, "id");
    json_decref(j);
    snprintf(path, sizeof path, "/v1/runs/%lld/checkpoints/%lld", id, best);
    gc_response r;
    gt_error err = {0};
    float readout = 0, geometry = 0;
    geo_geometry g;
    memset(&g, 0, sizeof g);
    model_ckpt_view v;
    model_repr repr;
    if (gc_request(c, "GET", path, NULL, NULL, 0, NULL, &r, &err) != GT_OK) {
        CHECK_MSG(0, "checkpoint %lld: %s", best, err.message);
        return 0.0f;
    }
    int rc = r.status != 200 ? GT_EINVAL : model_ckpt_unpack(r.body, r.len, &v, &err);
    if (!rc && !(rc = model_geometry_load("dataset_1_photons", &g, &err)) &&
        !(rc = model_geometry_threshold(&g, &geometry, &err)) &&
        !(rc = model_repr_from_bytes(&repr, &g, geometry, v.repr, v.repr_len, &err))) {
        readout = repr.layout.readout_mev;
        model_repr_free(&repr);
    }
    CHECK_MSG(rc == GT_OK && readout >= geometry && geometry == 1.0f,
              "checkpoint %lld (HTTP %ld): readout threshold %g MeV, the geometry's %g: %s", best,
              r.status, readout, geometry, rc ? err.message : "");
    geo_free(&g);
    gc_response_free(&r);
    return readout;
}

static void test_samples(gc_client *c, long long id)
{
    gt_error err = {0};
    gc_response r;
    /* every voxel served is 0 or at least it, in each format */
    const float readout = run_readout(c, id);
    /* JSON: the energies asked for, one row of 368 voxels each. */
    CHECK_EQ_INT(gc_sample(c, id, "{\"energies\": [1000, 20000, 300000], \"seed\": 5}",
                           GC_ACCEPT_JSON, &r, &err), GT_OK);
    json_t *j = json_loadb(r.body, r.len, 0, NULL);
    CHECK_EQ_INT(svc_num(j, "n"), 3);
    CHECK_EQ_INT(svc_num(j, "voxels"), 368);
    CHECK_CLOSE(json_number_value(json_array_get(json_object_get(j, "energies"), 1)), 20000, 1e-3, 0);
    json_t *showers = json_object_get(j, "showers");
    CHECK_EQ_INT(json_array_size(showers), 3);
    CHECK_EQ_INT(json_array_size(json_array_get(showers, 2)), 368);
    int bad = 0, under = 0;
    for (size_t k = 0; k < 368; k++) {
        double v = json_number_value(json_array_get(json_array_get(showers, 0), k));
        bad += !(isfinite(v) && v >= 0);
    }
    CHECK_EQ_INT(bad, 0);
    for (size_t k = 0; k < 3 * 368; k++) {
        /* a float's shortest digits read back as that float */
        float v = (float)json_number_value(json_array_get(json_array_get(showers, k / 368),
                                                          k % 368));
        under += v != 0.0f && !(v >= readout);
    }
    CHECK_MSG(under == 0, "JSON: %d voxels under the readout threshold of %g MeV", under,
              readout);
    json_decref(j);
    gc_response_free(&r);

    /* Binary: header, energies in the asked range, reproducible by seed. */
    const char *body = "{\"count\": 20, \"seed\": 7, \"energy\": {\"dist\": \"log-uniform\","
                       " \"min_mev\": 2000, \"max_mev\": 50000}}";
    gc_response b1, b2, b3;
    CHECK_EQ_INT(gc_sample(c, id, body, GC_ACCEPT_BINARY, &b1, &err), GT_OK);
    CHECK(strncmp(b1.content_type, "application/octet-stream", 24) == 0);
    const unsigned char *p = (const unsigned char *)b1.body;
    CHECK(b1.len > 20 && memcmp(p, "GSHW", 4) == 0);
    CHECK_EQ_INT(u32(p + 4), 1);
    uint32_t n = u32(p + 8), V = u32(p + 12), L = u32(p + 16), sumv = 0;
    CHECK_EQ_INT(n, 20);
    CHECK_EQ_INT(V, 368);
    for (uint32_t l = 0; l < L; l++)
        sumv += u32(p + 20 + 4 * l);
    CHECK_EQ_INT(sumv, V);
    size_t head = 20 + 4 * (size_t)L;
    CHECK_EQ_INT(b1.len, head + 4 * (size_t)n + 4 * (size_t)n * V);
    int out_of_range = 0;
    for (uint32_t i = 0; i < n; i++) {
        float e = f32(p + head + 4 * i);
        out_of_range += !(e >= 2000 * 0.999 && e <= 50000 * 1.001);
    }
    CHECK_EQ_INT(out_of_range, 0);
    size_t under_bin = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) {
        float v = f32(p + head + 4 * (size_t)n + 4 * i);
        under_bin += v != 0.0f && !(v >= readout);
    }
    CHECK_MSG(under_bin == 0, "binary: %zu voxels under the readout threshold of %g MeV",
              under_bin, readout);
    CHECK_EQ_INT(gc_sample(c, id, body, GC_ACCEPT_BINARY, &b2, &err), GT_OK);
    CHECK(b1.len == b2.len && memcmp(b1.body, b2.body, b1.len) == 0);
    CHECK_EQ_INT(gc_sample(c, id, "{\"count\": 20, \"seed\": 8, \"energy\": {\"dist\":"
                           " \"log-uniform\", \"min_mev\": 2000, \"max_mev\": 50000}}",
                           GC_ACCEPT_BINARY, &b3, &err), GT_OK);
    CHECK(b1.len == b3.len && memcmp(b1.body + head, b3.body + head, b1.len - head) != 0);

    /* HDF5: the same showers as the binary reply, read back by h5py. */
    gc_response h;
    CHECK_EQ_INT(gc_sample(c, id, body, GC_ACCEPT_HDF5, &h, &err), GT_OK);
    CHECK(strncmp(h.content_type, "application/x-hdf5", 18) == 0);
    CHECK(h.len > 8 && memcmp(h.body, "\x89HDF\r\n\x1a\n", 8) == 0);
    char h5[400], bin[400];
    snprintf(h5, sizeof h5, "%s/s.h5", dir);
    snprintf(bin, sizeof bin, "%s/s.bin", dir);
    CHECK(write_file(h5, h.body, h.len) == 0);
    CHECK(write_file(bin, b1.body, b1.len) == 0);
    if (access("/usr/bin/python3", X_OK) == 0) {
        char cmd[2400];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c \"import sys\ntry:\n import h5py, numpy as np\nexcept"
                 " ImportError:\n sys.exit(77)\nf = h5py.File('%s', 'r')\n"
                 "e = f['incident_energies'][:]; s = f['showers'][:]\n"
                 "b = open('%s', 'rb').read(); L = int(np.frombuffer(b[16:20], '<u4')[0]); h = 20 + 4 * L\n"
                 "be = np.frombuffer(b[h:h + 80], '<f4'); bs = np.frombuffer(b[h + 80:], '<f4').reshape(20, 368)\n"
                 "assert e.shape == (20, 1) and s.shape == (20, 368), (e.shape, s.shape)\n"
                 "assert (e.ravel() == be).all() and (s == bs).all()\n"
                 "t = np.float32(%.9g); assert ((s == 0) | (s >= t)).all(), s[(s > 0) & (s < t)]\n\"",
                 h5, bin, (double)readout);
        int rc = system(cmd);
        CHECK_MSG(WIFEXITED(rc) && (WEXITSTATUS(rc) == 0 || WEXITSTATUS(rc) == 77),
                  "h5py check failed (%d)", rc);
    }
    gc_response_free(&h);
    gc_response_free(&b1);
    gc_response_free(&b2);
    gc_response_free(&b3);
}

/* ---------------------------------------------------------------------------
 * Concurrent sample requests: batched on the device
 * ------------------------------------------------------------------------- */

#define NCONC 12

typedef struct conc {
    const char *url;
    long long run;
    int seed;
    long status;
    char *body;
    size_t len;
    const char *request;   /* the JSON body; NULL: two energies and `seed` */
} conc;

static void *conc_main(void *arg)
{
    conc *k = arg;
    gc_client *c = NULL;
    gt_error err = {0};
    gc_response r = {0};
    char body[128];
    snprintf(body, sizeof body, "{\"energies\": [5000, 70000], \"seed\": %d}", k->seed);
    if (gc_open(&c, k->url, &err) == GT_OK &&
        gc_sample(c, k->run, k->request ? k->request : body, GC_ACCEPT_BINARY, &r, &err) ==
            GT_OK) {
        k->status = r.status;
        k->body = r.body;
        k->len = r.len;
        r.body = NULL;
    }
    gc_close(c);
    return NULL;
}

static void sampling_counts(gc_client *c, long long *requests, long long *batches)
{
    json_t *j;
    svc_json(c, "GET", "/v1/info", NULL, NULL, &j);
    json_t *s = json_object_get(j, "sampling");
    *requests = svc_num(s, "requests");
    *batches = svc_num(s, "batches");
    json_decref(j);
}

static void test_concurrency(gc_client *c, long long id)
{
    long long r0, b0, r1, b1;
    sampling_counts(c, &r0, &b0);
    conc k[NCONC];
    pthread_t th[NCONC];
    for (int i = 0; i < NCONC; i++) {
        k[i] = (conc){S.url, id, 100 + i, 0, NULL, 0, NULL};
        pthread_create(&th[i], NULL, conc_main, &k[i]);
    }
    /* While they wait for the batch (--batch-delay-ms 500), suspended,
     * health still answers at once: with 2 HTTP threads and 12 requests
     * waiting, it would not if a waiting request held its thread. */
    svc_sleep_ms(60);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ_INT(svc_json(c, "GET", "/healthz", NULL, NULL, NULL), 200);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    CHECK_MSG(ms < 300, "healthz took %.1f ms while sample requests waited", ms);
    for (int i = 0; i < NCONC; i++)
        pthread_join(th[i], NULL);
    sampling_counts(c, &r1, &b1);
    int ok = 0;
    for (int i = 0; i < NCONC; i++)
        ok += k[i].status == 200;
    CHECK_EQ_INT(ok, NCONC);
    CHECK_EQ_INT(r1 - r0, NCONC);
    CHECK_MSG(b1 - b0 < NCONC, "%lld batches for %d requests", b1 - b0, NCONC);
    fprintf(stderr, "concurrency: %d requests in %lld device batches\n", NCONC, b1 - b0);
    /* Batched showers equal the same request made alone. */
    conc alone = {S.url, id, 100 + 5, 0, NULL, 0, NULL};
    conc_main(&alone);
    CHECK_EQ_INT(alone.status, 200);
    CHECK(alone.len == k[5].len && k[5].body && memcmp(alone.body, k[5].body, alone.len) == 0);
    free(alone.body);
    for (int i = 0; i < NCONC; i++)
        free(k[i].body);
}

/* The binary reply's showers (past the header and energies). */
static const char *showers_of(const conc *k, uint32_t *n, uint32_t *v)
{
    uint32_t hdr[5];
    if (!k->body || k->len < sizeof hdr)
        return NULL;
    memcpy(hdr, k->body, sizeof hdr);
    *n = hdr[2];
    *v = hdr[3];
    size_t off = 20 + 4 * (size_t)hdr[4] + 4 * (size_t)hdr[2];
    return off <= k->len ? k->body + off : NULL;
}

/* Showers do not depend on what they were batched with: every request of
 * a concurrent mix gives the bytes it gives alone.  Mixes: many small
 * requests of different sizes; a request larger than one device pass
 * (1024 rows) with small ones, so its rows straddle device batches beside
 * theirs.  And the first rows of a request are the showers of a shorter
 * request with the same seed and leading energies. */
static void test_batch_mixes(gc_client *c, long long id)
{
    static const char *const mix1[] = {
        "{\"energies\": [3000], \"seed\": 201}",
        "{\"energies\": [3000, 45000], \"seed\": 202}",
        "{\"energies\": [800000, 3000, 45000], \"seed\": 203}",
        "{\"energies\": [1500, 1500, 1500, 1500], \"seed\": 204}",
        "{\"energies\": [20000, 40000, 80000, 160000, 320000], \"seed\": 205}",
        "{\"count\": 9, \"energy\": {\"dist\": \"log-uniform\", \"min_mev\": 1000, "
        "\"max_mev\": 500000}, \"seed\": 206}",
        "{\"energies\": [3000], \"seed\": 202}",
    };
    static const char *const mix2[] = {
        "{\"count\": 1100, \"energy\": {\"dist\": \"log-uniform\", \"min_mev\": 1000, "
        "\"max_mev\": 500000}, \"seed\": 41}",
        "{\"energies\": [3000, 60000, 250000], \"seed\": 42}",
        "{\"count\": 7, \"energy\": {\"dist\": \"log-uniform\", \"min_mev\": 1000, "
        "\"max_mev\": 500000}, \"seed\": 43}",
    };
    static const struct {
        const char *const *req;
        int n;
    } mixes[] = {{mix1, 7}, {mix2, 3}};
    for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++) {
        int n = mixes[m].n;
        conc k[8];
        pthread_t th[8];
        long long r0, b0, r1, b1;
        sampling_counts(c, &r0, &b0);
        for (int i = 0; i < n; i++) {
            k[i] = (conc){S.url, id, 0, 0, NULL, 0, mixes[m].req[i]};
            pthread_create(&th[i], NULL, conc_main, &k[i]);
        }
        for (int i = 0; i < n; i++)
            pthread_join(th[i], NULL);
        sampling_counts(c, &r1, &b1);
        /* they were served together (the batch delay gathers them) */
        CHECK_MSG(b1 - b0 < r1 - r0, "mix %zu: %lld batches for %lld requests", m + 1, b1 - b0,
                  r1 - r0);
        int same = 0;
        for (int i = 0; i < n; i++) {
            conc alone = {S.url, id, 0, 0, NULL, 0, mixes[m].req[i]};
            conc_main(&alone);
            CHECK_MSG(k[i].status == 200 && alone.status == 200, "mix %zu request %d: %ld, %ld",
                      m + 1, i, k[i].status, alone.status);
            int eq = alone.len == k[i].len && k[i].body &&
                     memcmp(alone.body, k[i].body, alone.len) == 0;
            CHECK_MSG(eq, "mix %zu request %d (%s): batched showers differ from alone", m + 1, i,
                      mixes[m].req[i]);
            same += eq;
            free(alone.body);
            free(k[i].body);
        }
        fprintf(stderr,
                "batch mix %zu: %lld requests in %lld batches; %d of %d gave the same bytes "
                "as alone\n",
                m + 1, r1 - r0, b1 - b0, same, n);
    }
    /* prefix: rows 0 and 1 of a 3-row request are the 2-row request's */
    conc longer = {S.url, id, 0, 0, NULL, 0, "{\"energies\": [5000, 70000, 9000], \"seed\": 7}"};
    conc shorter = {S.url, id, 0, 0, NULL, 0, "{\"energies\": [5000, 70000], \"seed\": 7}"};
    conc_main(&longer);
    conc_main(&shorter);
    uint32_t n1 = 0, v1 = 0, n2 = 0, v2 = 0;
    const char *a = showers_of(&longer, &n1, &v1), *b = showers_of(&shorter, &n2, &v2);
    CHECK(a && b && n1 == 3 && n2 == 2 && v1 == v2 && v1 > 0);
    if (a && b && n2 == 2 && v1 == v2)
        CHECK_MSG(memcmp(a, b, 2 * (size_t)v1 * sizeof(float)) == 0,
                  "the first rows of a request differ from a shorter request's");
    free(longer.body);
    free(shorter.body);
}

/* ---------------------------------------------------------------------------
 * Documented errors; the server keeps serving
 * ------------------------------------------------------------------------- */

static void expect(gc_client *c, const char *method, const char *path, const char *body,
                   const char *const *headers, long status, const char *code, const char *field)
{
    json_t *j;
    long st = svc_json(c, method, path, body, headers, &j);
    CHECK_MSG(st == status, "%s %s: status %ld, want %ld", method, path, st, status);
    if (code)
        CHECK_MSG(svc_ecode(j) && strcmp(svc_ecode(j), code) == 0, "%s %s: code %s, want %s",
                  method, path, svc_ecode(j), code);
    if (field)
        CHECK_MSG(svc_efield(j) && strcmp(svc_efield(j), field) == 0, "%s %s: field %s, want %s",
                  method, path, svc_efield(j), field);
    json_decref(j);
}

/* A reply's text never names where the data directory really is. */
static void expect_no_server_path(gc_client *c, const char *method, const char *path,
                                  const char *body, long status, const char *field)
{
    char root[PATH_MAX];
    CHECK(realpath(data, root) != NULL);
    json_t *j;
    long st = svc_json(c, method, path, body, NULL, &j);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    CHECK_MSG(st == status, "%s %s %s: status %ld, want %ld (%s)", method, path, body, st,
              status, text ? text : "");
    CHECK_MSG(!field || (svc_efield(j) && strcmp(svc_efield(j), field) == 0),
              "%s: field %s, want %s", body, svc_efield(j), field);
    CHECK_MSG(text && !strstr(text, root), "%s: the reply names the data directory: %s",
              body, text);
    free(text);
    json_decref(j);
}

/* Files outside the data directory are refused everywhere a client names
 * one (runs, datasets), links included, geometries are built-in names
 * only, and no reply tells where the server keeps its files or which of
 * them exist (issue: reading files outside the data directory). */
static void test_file_confinement(gc_client *c)
{
    char body[PATH_MAX + 256], dbreal[PATH_MAX], link[400];
    CHECK(realpath(db, dbreal) != NULL);
    snprintf(link, sizeof link, "%s/out2.h5", data);   /* a link out, to a file that exists */
    CHECK(symlink(dbreal, link) == 0);
    const char *paths[] = {"/etc/hostname", "../test.db", "out2.h5", "./tiny.h5",
                           "sub/../../test.db", NULL};
    for (int i = 0; paths[i]; i++) {
        snprintf(body, sizeof body, "{\"dataset\": {\"path\": \"%s\", \"geometry\": "
                 "\"dataset_1_photons\"}}", paths[i]);
        expect_no_server_path(c, "POST", "/v1/runs", body, 422, "dataset.path");
    }
    snprintf(body, sizeof body, "{\"dataset\": {\"path\": \"%s\", \"geometry\": "
             "\"dataset_1_photons\"}}", dbreal);
    expect_no_server_path(c, "POST", "/v1/runs", body, 422, "dataset.path");
    /* a geometry by path, existing or not: the same answer, so it tells nothing */
    const char *geos[] = {"/etc/passwd", "/nonexistent.xml", "x.xml", "../test.db", NULL};
    for (int i = 0; geos[i]; i++) {
        snprintf(body, sizeof body, "{\"dataset\": {\"geometry\": \"%s\"}}", geos[i]);
        expect_no_server_path(c, "POST", "/v1/runs", body, 422, "dataset.geometry");
        snprintf(body, sizeof body, "{\"name\": \"g%d\", \"path\": \"tiny.h5\", "
                 "\"geometry\": \"%s\"}", i, geos[i]);
        expect_no_server_path(c, "POST", "/v1/datasets", body, 422, "geometry");
        snprintf(body, sizeof body, "{\"name\": \"s%d\", \"synthetic\": {\"geometry\": "
                 "\"%s\", \"n\": 10}}", i, geos[i]);
        expect_no_server_path(c, "POST", "/v1/datasets", body, 422, "synthetic.geometry");
    }
    /* registering: absolute and escaping paths, and a file that is not
     * HDF5, told by the name the client gave */
    expect_no_server_path(c, "POST", "/v1/datasets",
                          "{\"name\": \"abs\", \"path\": \"/etc/hostname\"}", 422, "path");
    char junk[400];
    snprintf(junk, sizeof junk, "%s/junk.h5", data);
    FILE *f = fopen(junk, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("not hdf5", f);
        fclose(f);
    }
    expect_no_server_path(c, "POST", "/v1/datasets",
                          "{\"name\": \"junk\", \"path\": \"junk.h5\", \"geometry\": "
                          "\"dataset_1_photons\"}", 422, "path");
    remove(junk);
}

static void test_errors(gc_client *c, long long id)
{
    char path[128];
    expect(c, "POST", "/v1/runs", "{\"train\": {\"lr\": -1}}", NULL, 422, "validation_failed",
           "train.lr");
    expect(c, "POST", "/v1/runs", "{\"bogus\": 1}", NULL, 422, "validation_failed", NULL);
    /* the energy spec: both spellings at once, and the sample route's rules */
    expect(c, "POST", "/v1/runs",
           "{\"dataset\": {\"synthetic\": {\"energy\": {\"dist\": \"fixed\"},"
           " \"emin_mev\": 5000}}}", NULL, 422, "validation_failed",
           "dataset.synthetic.emin_mev");
    expect(c, "POST", "/v1/runs",
           "{\"dataset\": {\"synthetic\": {\"energy\": {\"min_mev\": 5000,"
           " \"max_mev\": 10}}}}", NULL, 422, "validation_failed",
           "dataset.synthetic.energy.max_mev");
    expect(c, "POST", "/v1/datasets",
           "{\"name\": \"e\", \"synthetic\": {\"n\": 10, \"energy\": {\"min_mev\": 1}}}",
           NULL, 422, "validation_failed", "synthetic.energy.min_mev");
    expect(c, "POST", "/v1/datasets",
           "{\"name\": \"e\", \"synthetic\": {\"n\": 10, \"energy\": {\"emin_mev\": 1000}}}",
           NULL, 422, "validation_failed", "synthetic.energy.emin_mev");
    expect(c, "POST", "/v1/datasets",
           "{\"name\": \"e\", \"synthetic\": {\"n\": 10, \"simulator\": \"geant4\"}}", NULL,
           422, "validation_failed", "synthetic.simulator");
    expect(c, "POST", "/v1/datasets",
           "{\"name\": \"e\", \"synthetic\": {\"n\": 10, \"simulator\": 1}}", NULL, 422,
           "validation_failed", "synthetic");
    expect(c, "POST", "/v1/runs", "{\"dataset_id\": 9999}", NULL, 422, "validation_failed",
           "dataset_id");
    expect(c, "POST", "/v1/runs", "{\"name\": ", NULL, 400, "malformed_json", NULL);
    expect(c, "POST", "/v1/runs", "[1, 2]", NULL, 422, "validation_failed", NULL);
    expect(c, "GET", "/v1/runs/999", NULL, NULL, 404, "not_found", NULL);
    expect(c, "GET", "/v1/runs/abc", NULL, NULL, 404, "not_found", NULL);
    expect(c, "POST", "/v1/runs/999/cancel", NULL, NULL, 404, "not_found", NULL);
    expect(c, "GET", "/v1/runs/999/metrics", NULL, NULL, 404, "not_found", NULL);
    expect(c, "GET", "/v1/runs/999/events", NULL, NULL, 404, "not_found", NULL);
    expect(c, "POST", "/v1/runs/999/samples", "{\"count\": 1}", NULL, 404, "not_found", NULL);
    expect(c, "GET", "/v1/runs?status=bogus", NULL, NULL, 422, "validation_failed", "status");
    expect(c, "GET", "/v1/runs?limit=0", NULL, NULL, 422, "validation_failed", "limit");
    snprintf(path, sizeof path, "/v1/runs/%lld/metrics?max_points=0", id);
    expect(c, "GET", path, NULL, NULL, 422, "validation_failed", "max_points");
    snprintf(path, sizeof path, "/v1/runs/%lld/samples", id);
    const char *bin[] = {"Accept: application/octet-stream", NULL};
    expect(c, "POST", path, "{\"count\": 5000}", bin, 422, "too_many_showers", "count");
    expect(c, "POST", path, "{\"count\": 100}", NULL, 422, "too_many_showers", "count");
    expect(c, "POST", path, "{\"count\": 2, \"row0\": -1}", NULL, 422, "validation_failed",
           "row0");
    expect(c, "POST", path, "{\"energies\": [1000, -5]}", NULL, 422, "validation_failed",
           "energies[1]");
    expect(c, "POST", path, "{\"energies\": [1e12]}", NULL, 422, "validation_failed",
           "energies[0]");
    expect(c, "POST", path, "{\"count\": 2, \"energy\": {\"dist\": \"weird\"}}", NULL, 422,
           "validation_failed", "energy.dist");
    expect(c, "POST", path, "{\"count\": 2, \"energy\": {\"emin_mev\": 2000}}", NULL, 422,
           "validation_failed", "energy.emin_mev");
    expect(c, "POST", path, "{\"count\": 2, \"energy\": {\"min_mev\": 2000, \"max_mev\": 1000}}",
           NULL, 422, "validation_failed", "energy.max_mev");
    expect(c, "POST", path, "{\"count\": 2, \"energies\": [1000]}", NULL, 422,
           "validation_failed", NULL);
    expect(c, "POST", path, "{\"count\": 2, \"steps\": 0}", NULL, 422, "validation_failed",
           "steps");
    expect(c, "POST", path, "{\"count\": ", NULL, 400, "malformed_json", NULL);
    const char *xml[] = {"Accept: text/xml", NULL};
    expect(c, "POST", path, "{\"count\": 1}", xml, 406, "not_acceptable", "Accept");
    /* A finished run cannot be cancelled. */
    snprintf(path, sizeof path, "/v1/runs/%lld/cancel", id);
    expect(c, "POST", path, NULL, NULL, 409, "conflict", NULL);
    /* A run that cannot train fails with the reason; the server goes on. */
    char *cfg = svc_tiny_config("broken", 4, 2, 2,
                                "\"dataset\": {\"path\": \"missing.h5\", \"geometry\":"
                                " \"dataset_1_photons\"}");
    json_t *run;
    gt_error err = {0};
    CHECK_EQ_INT(gc_submit_run(c, cfg, NULL, &run, &err), GT_OK);
    free(cfg);
    long long bad = svc_num(run, "id");
    json_decref(run);
    run = svc_wait_run(c, bad, NULL, 30000);
    CHECK_MSG(svc_str(run, "status") && strcmp(svc_str(run, "status"), "failed") == 0, "status %s",
              svc_str(run, "status"));
    CHECK_MSG(svc_str(run, "error") && strstr(svc_str(run, "error"), "missing.h5"), "error %s",
              svc_str(run, "error"));
    json_decref(run);
    expect(c, "GET", "/healthz", NULL, NULL, 200, NULL, NULL);
}

static void test_paging(gc_client *c)
{
    /* Three more runs (queued behind nothing: they train quickly). */
    for (int i = 0; i < 3; i++) {
        char *cfg = svc_tiny_config("page", 2, 1, 2, NULL);
        json_t *run;
        gt_error err = {0};
        CHECK_EQ_INT(gc_submit_run(c, cfg, NULL, &run, &err), GT_OK);
        json_decref(run);
        free(cfg);
    }
    gt_error err = {0};
    json_t *p1, *p2;
    CHECK_EQ_INT(gc_list_runs(c, NULL, NULL, 2, &p1, &err), GT_OK);
    json_t *items = json_object_get(p1, "items");
    CHECK_EQ_INT(json_array_size(items), 2);
    long long a = svc_num(json_array_get(items, 0), "id");
    long long b = svc_num(json_array_get(items, 1), "id");
    CHECK(a > b);
    const char *cursor = svc_str(p1, "next_cursor");
    CHECK(cursor != NULL);
    CHECK_EQ_INT(gc_list_runs(c, NULL, cursor, 2, &p2, &err), GT_OK);
    items = json_object_get(p2, "items");
    CHECK_EQ_INT(json_array_size(items), 2);
    CHECK(svc_num(json_array_get(items, 0), "id") < b);
    /* Five runs in all (e2e, broken, three here): a last page of one. */
    json_t *p3 = NULL;
    cursor = svc_str(p2, "next_cursor");
    CHECK(cursor != NULL);
    if (cursor) {
        CHECK_EQ_INT(gc_list_runs(c, NULL, cursor, 2, &p3, &err), GT_OK);
        CHECK_EQ_INT(json_array_size(json_object_get(p3, "items")), 1);
        CHECK(json_is_null(json_object_get(p3, "next_cursor")));
    }
    json_decref(p1);
    json_decref(p2);
    json_decref(p3);
    /* Wait for them so shutdown finds an idle worker. */
    for (long long id = a; id > a - 3; id--)
        json_decref(svc_wait_run(c, id, NULL, 60000));
    CHECK_EQ_INT(gc_list_runs(c, "succeeded", NULL, 100, &p1, &err), GT_OK);
    CHECK_EQ_INT(json_array_size(json_object_get(p1, "items")), 4);
    json_decref(p1);
}

static void test_cli(long long run)
{
    const char *g = svc_binary();
    char out[400], cfg[400];
    snprintf(out, sizeof out, "%s/cli.h5", dir);
    CHECK_EQ_INT(svc_sh("%s runs --server %s --limit 3 > %s/runs.txt", g, S.url, dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q succeeded %s/runs.txt", dir), 0);
    CHECK_EQ_INT(svc_sh("%s watch %lld --server %s 2> %s/watch.txt", g, run, S.url, dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q 'status succeeded' %s/watch.txt", dir), 0);
    CHECK_EQ_INT(svc_sh("%s watch 9999 --server %s 2> /dev/null", g, S.url), 1);
    CHECK_EQ_INT(svc_sh("%s sample --server %s --run %lld --n 4 --seed 2 -o %s 2> /dev/null", g,
                    S.url, run, out), 0);
    FILE *f = fopen(out, "rb");
    unsigned char magic[8] = {0};
    CHECK(f && fread(magic, 1, 8, f) == 8 && memcmp(magic, "\x89HDF\r\n\x1a\n", 8) == 0);
    if (f)
        fclose(f);
    CHECK_EQ_INT(svc_sh("%s sample --server %s --run 9999 --n 4 -o %s 2> /dev/null", g, S.url, out),
                 1);
    char *text = svc_tiny_config("cli", 2, 1, 2, NULL);
    snprintf(cfg, sizeof cfg, "%s/cli.json", dir);
    CHECK(write_file(cfg, text, strlen(text)) == 0);
    free(text);
    CHECK_EQ_INT(svc_sh("%s submit %s --server %s > %s/id.txt 2> /dev/null", g, cfg, S.url, dir), 0);
    CHECK_EQ_INT(svc_sh("%s submit /nonexistent.json --server %s 2> /dev/null", g, S.url), 1);
    CHECK_EQ_INT(svc_sh("%s runs --server http://127.0.0.1:1 2> /dev/null", g), 1);
    char idfile[400];
    snprintf(idfile, sizeof idfile, "%s/id.txt", dir);
    f = fopen(idfile, "r");
    long long id = 0;
    CHECK(f && fscanf(f, "%lld", &id) == 1 && id > run);
    if (f)
        fclose(f);
}

/* The _count of histogram name (no labels), after checking its series
 * stands alone: buckets cumulative in rising le up to +Inf, _count equal to
 * the +Inf bucket, _sum written and not negative.  -1 when there is none. */
static double hist_count(const char *body, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s_bucket{le=\"", name);
    double last = -1;
    int inf = 0;
    for (const char *p = strstr(body, key); p; p = strstr(p + 1, key)) {
        double v = strtod(strchr(p + 1, ' ') + 1, NULL);
        CHECK_MSG(v >= last && !inf, "%s: bucket %.40s after %g", name, p + 1, last);
        last = v;
        inf = strncmp(p + strlen(key), "+Inf\"", 5) == 0;
    }
    CHECK_MSG(last < 0 || inf, "%s: no le=\"+Inf\" bucket", name);
    snprintf(key, sizeof key, "%s_count", name);
    CHECK_MSG(svc_metric(body, key) == last, "%s: %g, +Inf bucket %g", key,
              svc_metric(body, key), last);
    snprintf(key, sizeof key, "%s_sum", name);
    CHECK_MSG(svc_metric(body, key) >= 0, "%s: %g", key, svc_metric(body, key));
    return last;
}

static void test_prometheus(gc_client *c)
{
    gc_response r;
    gt_error err = {0};
    CHECK_EQ_INT(gc_request(c, "GET", "/metrics", NULL, NULL, 0, NULL, &r, &err), GT_OK);
    CHECK_EQ_INT(r.status, 200);
    CHECK(strstr(r.body, "giant_runs{status=\"succeeded\",device=\"cpu\"} 4") != NULL);
    CHECK(strstr(r.body, "giant_runs{status=\"succeeded\",device=\"none\"} 0") != NULL);
    CHECK(svc_metric(r.body, "giant_device_memory_used_bytes{device=\"cpu\"}") > 0);
    CHECK(svc_metric(r.body, "giant_device_memory_free_bytes{device=\"cpu\"}") > 0);
    /* per run: the runs sampled so far each have their series, and they sum
     * to the totals (no evaluation ran, nothing is in flight) */
    double jobs = 0, showers = 0;
    static const char jp[] = "\ngiant_sample_requests_by_run_total{run=\"";
    static const char sp[] = "\ngiant_sample_showers_by_run_total{run=\"";
    int series = 0;
    for (const char *p = strstr(r.body, jp); p; p = strstr(p + 1, jp))
        jobs += strtod(strchr(p + 1, ' ') + 1, NULL), series++;
    for (const char *p = strstr(r.body, sp); p; p = strstr(p + 1, sp))
        showers += strtod(strchr(p + 1, ' ') + 1, NULL);
    CHECK_MSG(series >= 2, "%d per-run series", series);     /* a run and "other" */
    CHECK(svc_metric(r.body, "giant_sample_requests_by_run_total{run=\"other\"}") == 0);
    CHECK_CLOSE(showers, svc_metric(r.body, "giant_sample_showers_total"), 0, 0);
    CHECK_CLOSE(jobs, svc_metric(r.body, "giant_sample_requests_total"), 0, 0);
    CHECK(strstr(r.body, "giant_sample_batches_total ") != NULL);
    CHECK(strstr(r.body, "giant_http_responses_total{class=\"4xx\"} ") != NULL);
    /* The format holds, and the histograms of what this test did moved:
     * runs trained (step times of both stages), samples served (jobs and
     * the samples route's durations). */
    char why[512] = "";
    CHECK_MSG(svc_prometheus_check(r.body, why, sizeof why), "%s", why);
    CHECK(svc_metric(r.body, "giant_train_step_seconds_count{stage=\"1\"}") > 0);
    CHECK(svc_metric(r.body, "giant_train_step_seconds_count{stage=\"2\"}") > 0);
    CHECK(svc_metric(r.body, "giant_sample_job_duration_seconds_count") > 0);
    CHECK(svc_metric(r.body, "giant_sample_job_showers_count") ==
          svc_metric(r.body, "giant_sample_job_duration_seconds_count") +
              svc_metric(r.body, "giant_sampling_jobs_in_flight"));
    CHECK(svc_metric(r.body, "giant_http_request_duration_seconds_count{method=\"POST\","
                             "route=\"/v1/runs/{id}/samples\",class=\"2xx\"}") > 0);
    CHECK(svc_metric(r.body, "giant_sample_bytes_limit") > 0);
    /* The job duration split: every job done waited in the queue once (a
     * job in flight may have, too); one batch per device batch counted,
     * and concurrent jobs merged, so at most one per job. */
    double done = hist_count(r.body, "giant_sample_job_duration_seconds");
    double waited = hist_count(r.body, "giant_sample_queue_wait_seconds");
    double batches = hist_count(r.body, "giant_sample_batch_seconds");
    double in_flight = svc_metric(r.body, "giant_sampling_jobs_in_flight");
    CHECK_MSG(waited >= done && waited <= done + in_flight,
              "%g queue waits, %g jobs done, %g in flight", waited, done, in_flight);
    CHECK_MSG(batches >= 1 && batches <= waited, "%g batches, %g jobs", batches, waited);
    CHECK(batches == svc_metric(r.body, "giant_sample_batches_total"));
    gc_response_free(&r);
}

/* ---------------------------------------------------------------------------
 * The stage-2 variants through the service: each trains from its config,
 * succeeds with both best checkpoints and serves showers.
 * ------------------------------------------------------------------------- */

static void test_variants(gc_client *c)
{
    static const struct {
        const char *name, *precision, *stage2, *stage1;
    } v[] = {
        {"v-wgan", "fp32", "\"objective\": \"wgan\", \"wgan\": {\"critic_steps\": 2,"
                           " \"critic\": {\"hidden\": 16, \"depth\": 1}}", ""},
        {"v-wgan-bf16", "bf16", "\"objective\": \"wgan\", \"wgan\": {\"critic_steps\": 2,"
                                " \"critic\": {\"hidden\": 16, \"depth\": 1}}", ""},
        {"v-autoregressive", "fp32", "\"mode\": \"autoregressive\"", ""},
        {"v-routed", "fp32", "\"trunk\": {\"kind\": \"routed\", \"experts\": 2, \"top_k\": 1,"
                             " \"hidden\": 16, \"blocks\": 1, \"emb_dim\": 8}", ""},
        /* a wgan energy stage (no head: the noise skip covers its one column) */
        {"v-wgan-stage1", "fp32", "\"objective\": \"flow\"",
         "\"objective\": \"wgan\", \"wgan\": {\"critic_steps\": 2, \"critic\": {\"hidden\": 16,"
         " \"depth\": 1}}, "},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char cfg[2048];
        int routed = strstr(v[i].stage2, "routed") != NULL;
        snprintf(cfg, sizeof cfg,
                 "{\"name\": \"%s\", \"dataset\": {\"geometry\": \"dataset_1_photons\","
                 " \"synthetic\": {\"n\": 300, \"seed\": 1, \"energy\": {\"dist\":"
                 " \"log-uniform\", \"min_mev\": 2000, \"max_mev\": 200000}}},"
                 " \"model\": {\"stage1\": {%s\"trunk\": {\"hidden\": 32, \"blocks\": 1,"
                 " \"emb_dim\": 8}}, \"stage2\": {%s%s}},"
                 " \"train\": {\"device\": \"cpu\", \"precision\": \"%s\", \"batch\": 32,"
                 " \"steps\": {\"stage1\": 4, \"stage2\": 4}, \"warmup_steps\": 2,"
                 " \"log_every\": 2, \"val_every\": 2, \"val_size\": 32, \"ckpt_every\": 2},"
                 " \"sample\": {\"steps\": 3}}",
                 v[i].name, v[i].stage1, v[i].stage2,
                 routed ? "" : ", \"trunk\": {\"hidden\": 32, \"blocks\": 1, \"emb_dim\": 8}",
                 v[i].precision);
        json_t *run = NULL;
        gt_error err = {0};
        CHECK_MSG(gc_submit_run(c, cfg, NULL, &run, &err) == GT_OK, "%s: %s", v[i].name,
                  err.message);
        long long id = svc_num(run, "id");
        /* the energy spec in the shape of sample requests, recorded so */
        json_t *en = json_object_get(
            json_object_get(json_object_get(json_object_get(run, "config"), "dataset"),
                            "synthetic"),
            "energy");
        CHECK(svc_str(en, "dist") && strcmp(svc_str(en, "dist"), "log-uniform") == 0);
        CHECK(json_number_value(json_object_get(en, "min_mev")) == 2000);
        CHECK(json_number_value(json_object_get(en, "max_mev")) == 200000);
        json_decref(run);
        run = svc_wait_run(c, id, "succeeded", 120000);
        CHECK_MSG(svc_str(run, "status") && strcmp(svc_str(run, "status"), "succeeded") == 0,
                  "%s: status %s (%s)", v[i].name, svc_str(run, "status"), svc_str(run, "error"));
        CHECK(svc_str(run, "precision") && strcmp(svc_str(run, "precision"), v[i].precision) == 0);
        json_t *best = json_object_get(run, "best");
        CHECK(json_object_get(best, "energy") && json_object_get(best, "shower"));
        json_decref(run);
        gc_response r;
        CHECK_EQ_INT(gc_sample(c, id, "{\"energies\": [5000, 70000], \"seed\": 3}",
                               GC_ACCEPT_JSON, &r, &err), GT_OK);
        CHECK_MSG(r.status == 200, "%s: sample status %ld", v[i].name, r.status);
        json_t *j = json_loadb(r.body, r.len, 0, NULL);
        json_t *showers = json_object_get(j, "showers");
        CHECK_EQ_INT(json_array_size(showers), 2);
        int bad = 0;
        for (size_t k = 0; k < 2 * 368; k++) {
            double e = json_number_value(json_array_get(json_array_get(showers, k / 368), k % 368));
            bad += !(isfinite(e) && e >= 0);
        }
        CHECK_MSG(bad == 0 && json_array_size(json_array_get(showers, 1)) == 368,
                  "%s: %d bad voxels", v[i].name, bad);
        printf("variant %s: trained and sampled through the service\n", v[i].name);
        json_decref(j);
        gc_response_free(&r);
    }
}

/* The bf16 rule: a CPU without AVX512-BF16 (GIANT_CPU_BF16=emulate makes
 * this one behave as such) refuses bf16 training at submission unless the
 * operator allows emulation; /v1/info says which applies; giant train
 * refuses too, before recording a run. */
static void test_bf16_policy(void)
{
    static const char bf16_run[] = "{\"name\": \"b\", \"train\": {\"precision\": \"bf16\", "
                                   "\"steps\": {\"stage1\": 1, \"stage2\": 1}}}";
    setenv("GIANT_CPU_BF16", "emulate", 1);
    for (int allow = 0; allow < 2; allow++) {
        char d[512], dbp[600], datap[600];
        snprintf(d, sizeof d, "%s/bf16-%d", dir, allow);
        mkdir(d, 0700);
        snprintf(dbp, sizeof dbp, "%s/test.db", d);
        snprintf(datap, sizeof datap, "%s/data", d);
        const char *extra[] = {"--allow-bf16-emulation", allow ? "1" : "0", NULL};
        svc s;
        if (svc_check_start(&s, "server did not start", dbp, datap, extra) != 0)
            continue;
        gc_client *c = svc_check_client(&s);
        json_t *info = NULL;
        CHECK_EQ_INT(svc_json(c, "GET", "/v1/info", NULL, NULL, &info), 200);
        json_t *cpu = json_array_get(json_object_get(info, "devices"), 0);
        CHECK(json_is_false(json_object_get(cpu, "bf16")));
        const char *mode = svc_str(cpu, "bf16_training");
        CHECK_MSG(mode && strcmp(mode, allow ? "emulated" : "refused") == 0, "bf16_training %s",
                  mode);
        json_t *kern = json_object_get(cpu, "sampling_kernels");
        CHECK(svc_str(kern, "fp32") && svc_str(kern, "bf16") &&
              strcmp(svc_str(kern, "bf16"), "avx512bf16"));
        json_decref(info);
        json_t *j = NULL;
        long st = svc_json(c, "POST", "/v1/runs", bf16_run, NULL, &j);
        if (allow) {
            CHECK_MSG(st == 201, "bf16 run with emulation allowed: status %ld", st);
        } else {
            CHECK_MSG(st == 422, "bf16 run on a CPU without AVX512-BF16: status %ld", st);
            CHECK(svc_efield(j) && strcmp(svc_efield(j), "train.precision") == 0);
            const char *msg = svc_str(json_object_get(j, "error"), "message");
            CHECK_MSG(msg && strstr(msg, "AVX512-BF16") && strstr(msg, "--allow-bf16-emulation"),
                      "message: %s", msg);
        }
        json_decref(j);
        gc_close(c);
        svc_check_stop(&s);
    }
    /* giant train: refused before any run is recorded, then allowed */
    char cfgp[512], dbp[512];
    snprintf(cfgp, sizeof cfgp, "%s/bf16.json", dir);
    snprintf(dbp, sizeof dbp, "%s/train-bf16.db", dir);
    FILE *f = fopen(cfgp, "w");
    if (f) {
        fprintf(f, "{\"dataset\": {\"geometry\": \"dataset_1_photons\", \"synthetic\": {\"n\": 200}},"
                   " \"train\": {\"precision\": \"bf16\", \"device\": \"cpu\", \"batch\": 16,"
                   " \"val_size\": 16, \"steps\": {\"stage1\": 2, \"stage2\": 2}}}\n");
        fclose(f);
    }
    CHECK(svc_sh("%s train %s --db %s --quiet 2>%s/train-bf16.err", svc_binary(), cfgp, dbp, dir) !=
          0);
    CHECK(svc_sh("grep -q 'AVX512-BF16' %s/train-bf16.err", dir) == 0);
    CHECK(svc_sh("test \"$(sqlite3 %s 'SELECT count(*) FROM runs')\" = 0", dbp) == 0);
    CHECK(svc_sh("%s train %s --db %s --quiet --allow-bf16-emulation 2>>%s/train-bf16.err",
             svc_binary(), cfgp, dbp, dir) == 0);
    unsetenv("GIANT_CPU_BF16");
}

/* Admission by memory (--sample-memory-mb): a second server on the same
 * database with a 1 MiB budget and a long batching delay, so concurrent
 * requests are in flight together.  300 dataset-1 showers hold about
 * 0.9 MB: the first request is let in, the ones beside it get 503 with
 * Retry-After, and the client library's gc_sample, which honours it, gets
 * every request answered with the same bytes as alone. */
typedef struct mem_call {
    const char *url;
    long long run;
    int retry;            /* through gc_sample (retries) or gc_request (once) */
    long status;
    char retry_after[16];
    size_t len;
    unsigned char *body;
} mem_call;

static void *mem_call_main(void *arg)
{
    mem_call *m = arg;
    gc_client *c = NULL;
    gt_error err = {0};
    if (gc_open(&c, m->url, &err) != GT_OK)
        return NULL;
    gc_response r;
    const char *body = "{\"count\": 300, \"seed\": 4, \"energy\": {\"dist\": \"fixed\", "
                       "\"min_mev\": 5000, \"max_mev\": 5000}}";
    int rc;
    if (m->retry) {
        rc = gc_sample(c, m->run, body, GC_ACCEPT_BINARY, &r, &err);
    } else {
        char path[64];
        snprintf(path, sizeof path, "/v1/runs/%lld/samples", m->run);
        const char *h[] = {"Accept: application/octet-stream", NULL};
        rc = gc_request(c, "POST", path, "application/json", body, strlen(body), h, &r, &err);
    }
    if (rc != GT_OK)
        fprintf(stderr, "sample call: %s\n", err.message);
    if (rc == GT_OK) {
        m->status = r.status;
        snprintf(m->retry_after, sizeof m->retry_after, "%s", r.retry_after);
        m->len = r.len;
        m->body = malloc(r.len ? r.len : 1);
        if (m->body)
            memcpy(m->body, r.body, r.len);
        gc_response_free(&r);
    }
    gc_close(c);
    return NULL;
}

static void test_sample_memory(long long run)
{
    svc s2;
    const char *extra[] = {"--sample-memory-mb", "1", "--batch-delay-ms", "400", NULL};
    if (svc_check_start(&s2, "second server did not start", db, data, extra) != 0)
        return;
    for (int retry = 0; retry < 2; retry++) {
        mem_call m[4];
        pthread_t t[4];
        for (int i = 0; i < 4; i++) {
            m[i] = (mem_call){s2.url, run, retry, 0, "", 0, NULL};
            pthread_create(&t[i], NULL, mem_call_main, &m[i]);
        }
        int ok = 0, busy = 0;
        for (int i = 0; i < 4; i++) {
            pthread_join(t[i], NULL);
            ok += m[i].status == 200;
            busy += m[i].status == 503 && strcmp(m[i].retry_after, "1") == 0;
        }
        if (retry) {
            CHECK_MSG(ok == 4, "with retries: %d of 4 answered", ok);
            for (int i = 1; i < 4; i++)
                CHECK(m[i].len == m[0].len && m[0].body && m[i].body &&
                      memcmp(m[i].body, m[0].body, m[0].len) == 0);
        } else {
            CHECK_MSG(ok >= 1 && busy >= 1 && ok + busy == 4,
                      "without retries: %d answered, %d told to retry, of 4", ok, busy);
        }
        for (int i = 0; i < 4; i++)
            free(m[i].body);
    }
    svc_check_stop(&s2);
}

/* The service's quotas, on a server of its own with small ones: steps per
 * stage and synthetic showers are refused with 422 naming the field, a
 * synthetic dataset that cannot fit on the disk likewise, and a
 * submission past --max-active-runs with 429 and Retry-After. */
static void test_quotas(void)
{
    svc s3;
    const char *extra[] = {"--max-active-runs", "1", "--max-train-steps", "100",
                           "--max-synthetic-showers", "100000000", "--default-dataset", "0",
                           "--max-dataset-mb", "1", "--max-sample-steps", "50", NULL};
    if (svc_check_start(&s3, "quota server did not start", db, data, extra) != 0)
        return;
    gt_error err = {0};
    gc_client *c = svc_check_client(&s3);
    expect(c, "POST", "/v1/runs", "{\"train\": {\"steps\": {\"stage1\": 10, \"stage2\": 101}}}",
           NULL, 422, "validation_failed", "train.steps.stage2");
    expect(c, "POST", "/v1/runs", "{\"train\": {\"steps\": {\"stage1\": 1000}}}", NULL, 422,
           "validation_failed", "train.steps.stage1");
    expect(c, "POST", "/v1/datasets", "{\"name\": \"big\", \"synthetic\": {\"n\": 100000001}}",
           NULL, 422, "validation_failed", "synthetic.n");
    /* 10^8 dataset-3 showers: about 16 TB, more than any test disk has free */
    expect(c, "POST", "/v1/datasets", "{\"name\": \"huge\", \"synthetic\": {\"geometry\": "
           "\"dataset_3\", \"n\": 100000000}}", NULL, 422, "validation_failed", "synthetic.n");
    /* solver steps past --max-sample-steps (50 here): a run's sample.steps,
     * and a sample request's steps (refused before the run is looked at) */
    expect(c, "POST", "/v1/runs", "{\"sample\": {\"steps\": 51}, \"train\": {\"steps\":"
           " {\"stage1\": 10, \"stage2\": 10}}}", NULL, 422, "validation_failed", "sample.steps");
    expect(c, "POST", "/v1/runs/1/samples", "{\"count\": 2, \"steps\": 51}", NULL, 422,
           "validation_failed", "steps");
    /* a run's dataset past --max-dataset-mb (1 MiB here), synthetic or a
     * file: 1 000 dataset-2 showers are 25 MiB, 1 000 dataset-1 ones 1.4
     * MiB; the tiny runs' 300 dataset-1 showers (0.4 MiB) pass below */
    expect(c, "POST", "/v1/runs", "{\"dataset\": {\"geometry\": \"dataset_2\", \"synthetic\":"
           " {\"n\": 1000}}, \"train\": {\"steps\": {\"stage1\": 10, \"stage2\": 10}}}", NULL, 422, "validation_failed", "dataset.synthetic.n");
    json_t *ds = NULL;
    CHECK_EQ_INT(svc_json(c, "POST", "/v1/datasets", "{\"name\": \"quota-mid\", \"synthetic\":"
                          " {\"geometry\": \"dataset_1_photons\", \"n\": 1000}}", NULL, &ds),
                 202);
    char dpath[64];
    snprintf(dpath, sizeof dpath, "/v1/datasets/%lld", svc_num(ds, "id"));
    for (int t = 0; t < 1200 && svc_str(ds, "status") && strcmp(svc_str(ds, "status"), "ready");
         t++) {
        json_decref(ds);
        ds = NULL;
        usleep(50000);
        CHECK_EQ_INT(svc_json(c, "GET", dpath, NULL, NULL, &ds), 200);
    }
    CHECK_MSG(svc_str(ds, "status") && !strcmp(svc_str(ds, "status"), "ready"),
              "quota-mid not ready");
    json_decref(ds);
    expect(c, "POST", "/v1/runs", "{\"dataset\": {\"geometry\": \"dataset_1_photons\", \"path\":"
           " \"quota-mid.h5\"}, \"train\": {\"steps\": {\"stage1\": 10, \"stage2\": 10}}}", NULL, 422, "validation_failed", "dataset.path");
    /* one run queued or training: a second one waits for it */
    char *cfg = svc_tiny_config("quota", 100, 10, 50, NULL);
    json_t *run = NULL;
    CHECK_EQ_INT(gc_submit_run(c, cfg, NULL, &run, &err), GT_OK);
    long long first = svc_num(run, "id");
    json_decref(run);
    gc_response r;
    CHECK_EQ_INT(gc_request(c, "POST", "/v1/runs", "application/json", cfg, strlen(cfg), NULL, &r,
                            &err), GT_OK);
    CHECK_MSG(r.status == 429 && strcmp(r.retry_after, "30") == 0 && strstr(r.body, "rate_limited"),
              "second run: %ld, Retry-After '%s': %s", r.status, r.retry_after, r.body);
    gc_response_free(&r);
    CHECK_EQ_INT(gc_cancel_run(c, first, &run, &err), GT_OK);
    json_decref(run);
    json_decref(svc_wait_run(c, first, NULL, 60000));
    /* a run recorded with the deprecated energy spelling (as before the
     * object shape) is still found by its Idempotency-Key: the same config
     * submitted again is that run, not a 409 */
    CHECK(svc_sh("sqlite3 -cmd '.timeout 5000' %s \"UPDATE runs SET idempotency_key = 'old-shape',"
             " config = json_set(json_remove(config, '$.dataset.synthetic.energy'),"
             " '$.dataset.synthetic.energy', 'log-uniform', '$.dataset.synthetic.emin_mev',"
             " 1000.0, '$.dataset.synthetic.emax_mev', 1000000.0) WHERE id = %lld\"",
             db, first) == 0);
    CHECK(svc_sh("test \"$(sqlite3 -cmd '.timeout 5000' %s \"SELECT json_type(config,"
             " '$.dataset.synthetic.energy') FROM runs WHERE id = %lld\")\" = text", db,
             first) == 0);
    CHECK_EQ_INT(gc_submit_run(c, cfg, "old-shape", &run, &err), GT_OK);
    CHECK_EQ_INT(svc_num(run, "id"), first);
    json_decref(run);
    /* a run recorded with an absolute dataset.path (as before the service
     * refused them at submission) is failed with the reason, its file
     * never read */
    CHECK(svc_sh("sqlite3 -cmd '.timeout 5000' %s \"INSERT INTO runs (id, name, config, status)"
                 " SELECT 900001, 'legacy-path', json_set(json_remove(config,"
                 " '$.dataset.synthetic'), '$.dataset.path', '/etc/hostname'), 'queued'"
                 " FROM runs WHERE id = %lld\"", db, first) == 0);
    run = svc_wait_run(c, 900001, NULL, 60000);
    CHECK_MSG(run && svc_str(run, "status") && strcmp(svc_str(run, "status"), "failed") == 0 &&
                  svc_str(run, "error") &&
                  strstr(svc_str(run, "error"), "absolute path is refused"),
              "legacy run: %s, %s", run ? svc_str(run, "status") : "none",
              run && svc_str(run, "error") ? svc_str(run, "error") : "");
    json_decref(run);
    free(cfg);
    gc_close(c);
    svc_check_stop(&s3);
}

int main(void)
{
    snprintf(dir, sizeof dir, "svc-e2e-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(db, sizeof db, "%s/test.db", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    const char *extra[] = {"--max-showers", "2000", "--max-json-showers", "50",
                           "--min-energy-mev", "500", "--batch-delay-ms", "500",
                           "--threads", "2", "--per-ip-connections", "0", NULL};
    if (svc_check_start(&S, "server did not start", db, data, extra) != 0)
        return check_finish();
    gc_client *c = svc_check_client(&S);
    long long ds = test_datasets(c);
    long long run = test_run(c, ds);
    test_metrics_and_checkpoints(c, run);
    test_samples(c, run);
    test_concurrency(c, run);
    test_batch_mixes(c, run);
    test_errors(c, run);
    test_file_confinement(c);
    test_paging(c);
    test_prometheus(c);
    test_cli(run);
    test_variants(c);
    test_bf16_policy();
    gc_close(c);
    CHECK_EQ_INT(svc_stop(&S, SIGTERM, 30000), 0);
    if (check_failures_)
        svc_dump(&S);
    test_sample_memory(run);
    test_quotas();
    svc_check_cleanup(dir);
    svc_free(&S);
    return check_finish();
}
