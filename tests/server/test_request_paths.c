/* What the request paths cost, counted inside giant_test_server
 * (call_counts.c: statements on the shared connection, geometry loads, run
 * config reads and data path checks, per thread):
 * - a run's submission (POST /v1/runs) reads its config once and resolves
 *   its data path once; the scheduler, up to the run's end, reads it once
 *   and checks the path once (where the trainer opens the file);
 * - a sample request is one statement (whether the run exists and its best
 *   pair's version) and loads no geometry on the HTTP pool: the sampling
 *   worker loads the run's sampler once (the first request is admitted
 *   there, once its shape is known), and the next requests are admitted on
 *   the pool with the shape the worker kept; a run without checkpoints is
 *   409 and an unknown run 404 after that one statement;
 * - an imported model's samples likewise: one statement (the model and its
 *   manifest's shape), no geometry on the pool;
 * - GET /v1/runs?limit=50 over several runs, and GET /v1/runs/{id}, are one
 *   statement each.
 * Each count is printed, and the replies' statuses and messages are the
 * ones the routes have always given. */
#include "check.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant_client.h"
#include "svc_harness.h"

static gc_client *C;

static const char *str(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }
static long long num(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

/* The threads the service's workers are named by (worker_thread.c); every
 * other thread is the HTTP pool's or the listener's. */
static int is_worker(const char *name)
{
    static const char *const workers[] = {"sampling", "scheduler", "dataset", "evaluation",
                                          "Slurm"};
    for (size_t i = 0; i < sizeof workers / sizeof workers[0]; i++)
        if (strcmp(name, workers[i]) == 0)
            return 1;
    return 0;
}

static void counts_reset(void)
{
    CHECK_EQ_INT(svc_json(C, "POST", "/test/counts", NULL, NULL, NULL), 200);
}

static json_t *counts(void)
{
    json_t *j = NULL;
    CHECK_EQ_INT(svc_json(C, "GET", "/test/counts", NULL, NULL, &j), 200);
    return j;
}

/* kind counted on thread `worker`, or on every thread but the workers'
 * (worker NULL: the HTTP pool). */
static long long count_of(json_t *c, const char *worker, const char *kind)
{
    long long n = 0;
    const char *name;
    json_t *t;
    json_object_foreach(json_object_get(c, "threads"), name, t) {
        if (worker ? strcmp(name, worker) == 0 : !is_worker(name))
            n += num(t, kind);
    }
    return n;
}

static void print_statements(json_t *c, const char *what)
{
    size_t i;
    json_t *s;
    printf("%s:\n", what);
    json_array_foreach(json_object_get(c, "statements"), i, s)
        printf("  [%s] %.120s\n", str(s, "thread"), str(s, "sql"));
}

/* One request; its status, the body in *body (malloc'ed, NUL-terminated)
 * when body is not NULL. */
static long request(const char *method, const char *path, const char *accept, const char *json,
                    char **body)
{
    gc_response r = {0};
    gt_error err = {0};
    char hdr[96];
    snprintf(hdr, sizeof hdr, "Accept: %s", accept ? accept : "application/json");
    const char *h[] = {hdr, NULL};
    if (gc_request(C, method, path, json ? "application/json" : NULL, json,
                   json ? strlen(json) : 0, h, &r, &err) != GT_OK) {
        CHECK_MSG(0, "%s %s: %s", method, path, err.message);
        return 0;
    }
    if (body) {
        *body = malloc(r.len + 1);
        memcpy(*body, r.body ? r.body : "", r.len);
        (*body)[r.len] = '\0';
    }
    long st = r.status;
    gc_response_free(&r);
    return st;
}

/* A run of the tiny config on the dataset; its id. */
static long long submit(const char *name, long long dataset, int steps)
{
    char members[64];
    snprintf(members, sizeof members, "\"dataset_id\": %lld", dataset);
    char *cfg = svc_tiny_config(name, steps, 2, steps, members);
    char *body = NULL;
    long st = request("POST", "/v1/runs", NULL, cfg, &body);
    CHECK_MSG(st == 201, "POST /v1/runs: %ld %s", st, body);
    json_t *j = json_loads(body ? body : "", 0, NULL);
    long long id = num(j, "id");
    json_decref(j);
    free(body);
    free(cfg);
    return id;
}

static void test_training(long long dataset, long long *run)
{
    counts_reset();
    *run = submit("paths", dataset, 6);
    json_t *c = counts();
    long long reads = count_of(c, NULL, "config_reads");
    long long paths = count_of(c, NULL, "path_checks");
    printf("POST /v1/runs on the pool: %lld config reads, %lld data path checks\n", reads,
           paths);
    CHECK_MSG(reads == 1, "the submission read its config %lld times", reads);
    CHECK_MSG(paths == 1, "the submission resolved its data path %lld times", paths);
    json_decref(c);
    json_t *r = svc_wait_run(C, *run, "succeeded", 120000);
    CHECK(r && str(r, "status") && strcmp(str(r, "status"), "succeeded") == 0);
    json_decref(r);
    c = counts();
    reads = count_of(c, "scheduler", "config_reads");
    paths = count_of(c, "scheduler", "path_checks");
    printf("the scheduler, to the run's end: %lld config reads, %lld data path checks\n", reads,
           paths);
    CHECK_MSG(reads == 1, "the scheduler read the run's config %lld times", reads);
    CHECK_MSG(paths == 1, "the scheduler checked the data path %lld times", paths);
    json_decref(c);
}

/* n sample requests of `path` in three formats; checks each is 200 and
 * what the pool and the sampling worker did. */
static void sample_counts(const char *path, int n, long long pool_statements,
                          long long worker_statements_max, long long worker_geometry,
                          const char *what)
{
    static const char *const accepts[] = {"application/octet-stream", "application/json",
                                          "application/x-hdf5"};
    counts_reset();
    for (int i = 0; i < n; i++) {
        char *body = NULL;
        long st = request("POST", path, accepts[i % 3],
                          "{\"energies\": [1000, 20000, 300000], \"seed\": 3}", &body);
        CHECK_MSG(st == 200, "%s: %s %ld %.200s", what, path, st, body);
        free(body);
    }
    json_t *c = counts();
    long long pool = count_of(c, NULL, "statements");
    long long pool_geo = count_of(c, NULL, "geometry_loads");
    long long pool_cfg = count_of(c, NULL, "config_reads");
    long long worker = count_of(c, "sampling", "statements");
    long long worker_geo = count_of(c, "sampling", "geometry_loads");
    printf("%s, %d requests: the pool %lld statements, %lld geometry loads, %lld config reads;"
           " the sampling worker %lld statements, %lld geometry loads\n",
           what, n, pool, pool_geo, pool_cfg, worker, worker_geo);
    print_statements(c, what);
    CHECK_MSG(pool == pool_statements * n, "%s: %lld statements on the pool for %d requests",
              what, pool, n);
    CHECK_MSG(pool_geo == 0 && pool_cfg == 0,
              "%s: the pool loaded %lld geometries and read %lld configs", what, pool_geo,
              pool_cfg);
    CHECK_MSG(worker <= worker_statements_max && worker_geo == worker_geometry,
              "%s: the sampling worker ran %lld statements and loaded %lld geometries", what,
              worker, worker_geo);
    json_decref(c);
}

static long long info_loads(void)
{
    json_t *j = NULL;
    CHECK_EQ_INT(svc_json(C, "GET", "/v1/info", NULL, NULL, &j), 200);
    long long n = num(json_object_get(j, "sampling"), "loads");
    json_decref(j);
    return n;
}

/* One request's statements on the pool, and its status and message. */
static void one_statement(const char *method, const char *path, const char *json,
                          long want_status, const char *want_message)
{
    counts_reset();
    char *body = NULL;
    long st = request(method, path, NULL, json, &body);
    json_t *c = counts();
    long long n = count_of(c, NULL, "statements");
    printf("%s %s: %ld, %lld statements\n", method, path, st, n);
    print_statements(c, path);
    CHECK_MSG(st == want_status, "%s %s: %ld %.200s", method, path, st, body);
    CHECK_MSG(n == 1, "%s %s: %lld statements", method, path, n);
    if (want_message) {
        json_t *j = json_loads(body ? body : "", 0, NULL);
        const char *m = str(json_object_get(j, "error"), "message");
        CHECK_MSG(m && strcmp(m, want_message) == 0, "%s %s: message %s", method, path,
                  m ? m : "(none)");
        json_decref(j);
    }
    json_decref(c);
    free(body);
}

static void test_sampling(long long run)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/runs/%lld/samples", run);
    long long loads = info_loads();
    /* the first: the worker loads the sampler (config, two checkpoints, the
     * geometry) and admits the request */
    sample_counts(path, 1, 1, 4, 1, "the run's first sample request");
    CHECK_EQ_INT(info_loads(), loads + 1);
    sample_counts(path, 6, 1, 0, 0, "the run's next sample requests");
    CHECK_EQ_INT(info_loads(), loads + 1);
}

static void test_model(long long run)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/runs/%lld/model", run);
    gc_response r = {0};
    gt_error err = {0};
    CHECK_EQ_INT(gc_request(C, "GET", path, NULL, NULL, 0, NULL, &r, &err), GT_OK);
    CHECK_EQ_INT(r.status, 200);
    gc_response q = {0};
    CHECK_EQ_INT(gc_request(C, "POST", "/v1/models?name=paths", "application/octet-stream",
                            r.body, r.len, NULL, &q, &err),
                 GT_OK);
    CHECK_EQ_INT(q.status, 201);
    gc_response_free(&q);
    gc_response_free(&r);
    /* the worker reads the file once and loads its geometry for its checks
     * and for the sampler */
    sample_counts("/v1/models/paths/samples", 1, 1, 1, 2, "the model's first sample request");
    sample_counts("/v1/models/paths/samples", 3, 1, 0, 0, "the model's next sample requests");
    one_statement("POST", "/v1/models/nope/samples", "{\"count\": 1}", 404,
                  "model 'nope' does not exist");
}

static void test_lists(long long dataset, long long run)
{
    /* more runs for the page: queued ones, cancelled at once */
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "more%d", i);
        long long id = submit(name, dataset, 400);
        char path[64];
        snprintf(path, sizeof path, "/v1/runs/%lld/cancel", id);
        CHECK_EQ_INT(svc_json(C, "POST", path, NULL, NULL, NULL), 202);
        json_decref(svc_wait_run(C, id, "cancelled", 60000));
    }
    counts_reset();
    char *body = NULL;
    CHECK_EQ_INT(request("GET", "/v1/runs?limit=50", NULL, NULL, &body), 200);
    json_t *c = counts(), *j = json_loads(body ? body : "", 0, NULL);
    long long n = count_of(c, NULL, "statements");
    size_t items = json_array_size(json_object_get(j, "items"));
    printf("GET /v1/runs?limit=50: %zu runs, %lld statements\n", items, n);
    CHECK_MSG(items == 5 && n == 1, "GET /v1/runs?limit=50: %zu runs in %lld statements", items,
              n);
    json_decref(j);
    json_decref(c);
    free(body);
    char path[64];
    snprintf(path, sizeof path, "/v1/runs/%lld", run);
    one_statement("GET", path, NULL, 200, NULL);
    one_statement("GET", "/v1/runs/999999", NULL, 404, "run '999999' does not exist");
    /* a run with no checkpoint: 409 after its one statement, as an unknown
     * run is 404 */
    snprintf(path, sizeof path, "/v1/runs/%lld/samples", run + 1);
    char want[96];
    snprintf(want, sizeof want, "run %lld has no best checkpoint of both stages yet", run + 1);
    one_statement("POST", path, "{\"count\": 2}", 409, want);
    one_statement("POST", "/v1/runs/999999/samples", "{\"count\": 2}", 404,
                  "run '999999' does not exist");
}

int main(void)
{
    char dir[64] = "paths-XXXXXX", db[256], data[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(db, sizeof db, "%s/giant.db", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    char *argv[] = {"./giant_test_server", "serve", "--listen", "127.0.0.1:0", "--db", db,
                    "--data-dir", data, "--default-dataset", "0", "--device", "cpu",
                    "--threads", "2", NULL};
    svc s;
    if (svc_launch(&s, argv) != 0) {
        CHECK_MSG(0, "giant_test_server did not start:\n%s", s.log ? s.log : "");
        return check_finish();
    }
    gt_error err = {0};
    CHECK_EQ_INT(gc_open(&C, s.url, &err), GT_OK);
    long long dataset = svc_dataset_ready(C,
                                          "{\"name\": \"paths\", \"synthetic\": {\"geometry\":"
                                          " \"dataset_1_photons\", \"n\": 300, \"seed\": 1}}",
                                          30000),
              run = 0;
    CHECK_MSG(dataset > 0, "the dataset did not become ready");
    test_training(dataset, &run);
    test_sampling(run);
    test_model(run);
    test_lists(dataset, run);
    gc_close(C);
    CHECK_EQ_INT(svc_stop(&s, SIGTERM, 30000), 0);
    if (check_failures_)
        svc_dump(&s);
    svc_free(&s);
    return check_finish();
}
