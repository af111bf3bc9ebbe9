/* Evaluations end to end against the real `giant serve` on a loopback
 * port: two synthetic reference datasets, a tiny run trained on the first;
 * an evaluation of a run that did not succeed is refused (409); bad requests
 * get 422 naming the field (unknown dataset, n out of range, unknown
 * metric, ...), 400 for malformed JSON, 404 for an unknown run; a good one
 * is queued (202), followed over the run's event stream to `succeeded`,
 * and its stored document has the groups, the floor, the AUCs, FPD/KPD
 * with their errors and the histograms; the same document comes out of
 * `giant eval --json` on the same showers (fetched with POST .../samples
 * at the reference's energies and the same seed).  Then SIGTERM in the
 * middle of an evaluation puts it back in the queue and it runs again
 * after the restart, and a server killed in the middle of it leaves it
 * `failed` with the reason, never `running`. */
#include "check.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "calo_h5.h"
#include "giant_client.h"
#include "svc_check.h"
#include "svc_harness.h"

static svc S;
static char dir[256], db[320], data[320];
static const char *const extra[] = {"--max-showers", "1000", "--default-dataset", "0",
                                    "--threads", "2", "--max-active-evaluations", "1", NULL};

/* A synthetic dataset_1_photons dataset of 400 showers, waited for. */
static long long make_dataset(gc_client *c, const char *name, int seed)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\": \"%s\", \"synthetic\": {\"geometry\": \"dataset_1_photons\", \"n\": 400,"
             " \"seed\": %d, \"energy\": {\"dist\": \"log-uniform\", \"min_mev\": 1000,"
             " \"max_mev\": 100000}}}",
             name, seed);
    json_t *j = NULL;
    CHECK_EQ_INT(svc_json(c, "POST", "/v1/datasets", body, NULL, &j), 202);
    long long id = svc_num(j, "id");
    json_decref(j);
    j = svc_wait_dataset(c, id, 60000);
    CHECK_MSG(svc_str(j, "status") && !strcmp(svc_str(j, "status"), "ready"), "dataset %s: %s",
              name, svc_str(j, "status"));
    json_decref(j);
    return id;
}

/* POST an evaluation; the status, *j the body. */
static long post_eval(gc_client *c, long long run, const char *body, json_t **j)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/runs/%lld/evaluations", run);
    return svc_json(c, "POST", path, body, NULL, j);
}

/* POSTs the body fmt (each %lld in it the dataset ref) as an evaluation of
 * run: 422 naming field. */
static void expect_422(gc_client *c, long long run, const char *fmt, long long ref,
                       const char *field)
{
    char body[512];
    snprintf(body, sizeof body, fmt, ref, ref);
    json_t *j = NULL;
    long st = post_eval(c, run, body, &j);
    CHECK_MSG(st == 422, "%s: status %ld", body, st);
    CHECK_MSG(svc_efield(j) && !strcmp(svc_efield(j), field), "%s: field %s, not %s", body,
              svc_efield(j), field);
    json_decref(j);
}

/* ---------------------------------------------------------------------------
 * Following an evaluation over the run's event stream
 * ------------------------------------------------------------------------- */

typedef struct follow {
    int evaluation, generating, comparing;
    char last_status[16];
    long long last_id;
} follow;

static int on_event(void *user, long long id, const char *event, const char *data)
{
    follow *f = user;
    f->last_id = id;
    if (strcmp(event, "evaluation") != 0)
        return 0;
    json_t *j = json_loads(data, 0, NULL);
    f->evaluation++;
    const char *phase = svc_str(j, "phase");
    f->generating += phase && !strcmp(phase, "generating");
    f->comparing += phase && !strcmp(phase, "comparing");
    snprintf(f->last_status, sizeof f->last_status, "%s", svc_str(j, "status"));
    json_decref(j);
    return 0;
}

/* ---------------------------------------------------------------------------
 * The same document from `giant eval`
 * ------------------------------------------------------------------------- */

/* The showers the evaluation compared, fetched again: POST .../samples at
 * the reference's first n energies with the evaluation's seed, as HDF5. */
static int fetch_generated(gc_client *c, long long run, const char *ref_path, int n, int seed,
                           const char *out)
{
    float *e = NULL, *x = NULL;
    int64_t rows = 0;
    gt_error err = {0};
    if (calo_h5_read_all(ref_path, NULL, &e, &x, &rows, &err) != GT_OK || rows < n) {
        fprintf(stderr, "%s: %s\n", ref_path, err.message);
        return 0;
    }
    json_t *energies = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(energies, json_real(e[i]));
    free(e);
    free(x);
    json_t *body = json_pack("{s:o, s:i}", "energies", energies, "seed", seed);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    gc_response r = {0};
    int ok = gc_sample(c, run, text, GC_ACCEPT_HDF5, &r, &err) == GT_OK && r.status == 200;
    free(text);
    FILE *f = ok ? fopen(out, "wb") : NULL;
    ok = f && fwrite(r.body, 1, r.len, f) == r.len;
    if (f)
        fclose(f);
    gc_response_free(&r);
    return ok;
}

/* The document without what names the inputs (files there, datasets and
 * a run here). */
static void strip_names(json_t *doc)
{
    static const char *const keys[] = {"a", "b", "ref2", "geometry"};
    for (size_t i = 0; i < 4; i++)
        json_object_del(doc, keys[i]);
}

/* ---------------------------------------------------------------------------
 * The test
 * ------------------------------------------------------------------------- */

static void test_evaluation(gc_client *c)
{
    long long ref = make_dataset(c, "ref", 2), ref2 = make_dataset(c, "ref2", 3);
    char members[64];
    snprintf(members, sizeof members, "\"dataset_id\": %lld", ref);
    char *cfg = svc_tiny_config("evaluated", 20, 5, 10, members);
    json_t *runj = NULL, *j = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(gc_submit_run(c, cfg, NULL, &runj, &err), GT_OK);
    free(cfg);
    long long run = svc_num(runj, "id");
    json_decref(runj);
    char good[512];
    snprintf(good, sizeof good,
             "{\"dataset_id\": %lld, \"ref2_dataset_id\": %lld, \"n\": 300, \"seed\": 7,"
             " \"classifier\": {\"hidden\": 32, \"depth\": 2, \"epochs\": 5, \"repeats\": 2}}",
             ref, ref2);

    json_t *done = svc_wait_run(c, run, "succeeded", 45000);
    CHECK_MSG(svc_str(done, "status") && !strcmp(svc_str(done, "status"), "succeeded"), "run %s",
              svc_str(done, "status"));
    json_decref(done);

    /* a run that did not succeed: 409 (cancelled before it trained) */
    cfg = svc_tiny_config("cancelled", 2000, 100, 1000, members);
    CHECK_EQ_INT(gc_submit_run(c, cfg, NULL, &runj, &err), GT_OK);
    free(cfg);
    long long other = svc_num(runj, "id");
    json_decref(runj);
    char cpath[64];
    snprintf(cpath, sizeof cpath, "/v1/runs/%lld/cancel", other);
    svc_json(c, "POST", cpath, NULL, NULL, &j);
    json_decref(j);
    json_t *gone = svc_wait_run(c, other, "cancelled", 30000);
    CHECK(svc_str(gone, "status") && !strcmp(svc_str(gone, "status"), "cancelled"));
    json_decref(gone);
    long st = post_eval(c, other, good, &j);
    CHECK_MSG(st == 409 && svc_ecode(j) && !strcmp(svc_ecode(j), "conflict"), "cancelled run: %ld",
              st);
    json_decref(j);

    /* bad requests, each naming its field; the server keeps serving (%lld:
     * the reference dataset) */
    expect_422(c, run, "{\"dataset_id\": 999, \"n\": 300}", ref, "dataset_id");
    expect_422(c, run, "{\"n\": 300}", ref, "dataset_id");
    expect_422(c, run, "{\"dataset_id\": \"one\"}", ref, "dataset_id");
    expect_422(c, run, "{\"dataset_id\": %lld, \"n\": 5}", ref, "n");
    expect_422(c, run, "{\"dataset_id\": %lld, \"n\": 100000}", ref, "n");
    expect_422(c, run, "{\"dataset_id\": %lld, \"n\": 450}", ref, "n");   /* the dataset has 400 */
    expect_422(c, run, "{\"dataset_id\": %lld, \"n\": 300, \"seed\": -1}", ref, "seed");
    expect_422(c, run, "{\"dataset_id\": %lld, \"ref2_dataset_id\": %lld}", ref, "ref2_dataset_id");
    expect_422(c, run, "{\"dataset_id\": %lld, \"metrics\": [\"fpd_kpd\", \"fid\"]}", ref,
               "metrics[1]");
    expect_422(c, run, "{\"dataset_id\": %lld, \"metrics\": []}", ref, "metrics");
    expect_422(c, run, "{\"dataset_id\": %lld, \"classifier\": {\"epochs\": 0}}", ref,
               "classifier.epochs");
    expect_422(c, run, "{\"dataset_id\": %lld, \"classifier\": {\"repeats\": 0}}", ref,
               "classifier.repeats");
    expect_422(c, run, "{\"dataset_id\": %lld, \"classifier\": {\"repeats\": 21}}", ref,
               "classifier.repeats");
    expect_422(c, run, "{\"dataset_id\": %lld, \"bogus\": 1}", ref, "bogus");
    CHECK_EQ_INT(post_eval(c, run, "{\"dataset_id\": ", &j), 400);
    CHECK(svc_ecode(j) && !strcmp(svc_ecode(j), "malformed_json"));
    json_decref(j);
    CHECK_EQ_INT(svc_json(c, "POST", "/v1/runs/999/evaluations", good, NULL, &j), 404);
    json_decref(j);
    CHECK_EQ_INT(svc_json(c, "GET", "/v1/runs/999/evaluations", NULL, NULL, &j), 404);
    json_decref(j);

    /* the stream up to the run's end, so the evaluation's events are new */
    follow before = {0};
    CHECK_EQ_INT(gc_watch_events(c, run, 0, on_event, &before, &err), GT_OK);

    /* queued: 202 with the request, defaults filled */
    CHECK_EQ_INT(post_eval(c, run, good, &j), 202);
    long long eid = svc_num(j, "id");
    CHECK(eid > 0 && svc_num(j, "run_id") == run);
    CHECK(svc_str(j, "status") && !strcmp(svc_str(j, "status"), "queued"));
    json_t *rq = json_object_get(j, "request");
    CHECK_EQ_INT(svc_num(rq, "n"), 300);
    /* every metric but the breakdown, which is asked for by name */
    CHECK_EQ_INT(json_array_size(json_object_get(rq, "metrics")), 6);
    CHECK(!json_object_get(j, "result"));
    json_decref(j);
    /* one queued or running is the most --max-active-evaluations 1 takes:
     * a second gets 429 with Retry-After while the first has not finished */
    gc_response r;
    char epath[64];
    snprintf(epath, sizeof epath, "/v1/runs/%lld/evaluations", run);
    CHECK_EQ_INT(gc_request(c, "POST", epath, "application/json", good, strlen(good), NULL, &r,
                            &err), GT_OK);
    CHECK_MSG(r.status == 429 && strcmp(r.retry_after, "30") == 0 && strstr(r.body, "rate_limited"),
              "second evaluation: %ld, Retry-After '%s': %s", r.status, r.retry_after, r.body);
    gc_response_free(&r);

    /* live over the run's event stream, which stays open until it ends */
    follow f = {0};
    CHECK_EQ_INT(gc_watch_events(c, run, before.last_id, on_event, &f, &err), GT_OK);
    CHECK_MSG(!strcmp(f.last_status, "succeeded"), "last evaluation event '%s'",
              f.last_status);
    CHECK(f.generating >= 1 && f.comparing == 1 && f.evaluation >= 4);

    char path[96];
    snprintf(path, sizeof path, "/v1/runs/%lld/evaluations/%lld", run, eid);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    CHECK(svc_str(j, "status") && !strcmp(svc_str(j, "status"), "succeeded"));
    CHECK_CLOSE(json_number_value(json_object_get(j, "progress")), 1.0, 1e-12, 0);
    CHECK(svc_str(j, "finished_at") != NULL);
    json_t *res = json_object_get(j, "result");
    CHECK(json_object_size(json_object_get(res, "groups")) == 10);
    CHECK(json_is_object(json_object_get(res, "floor")));
    CHECK(json_is_object(json_object_get(json_object_get(res, "floor"), "groups")));
    double auc = json_number_value(json_object_get(
        json_object_get(json_object_get(res, "classifier"), "high"), "auc"));
    CHECK_MSG(auc >= 0 && auc <= 1, "auc %g", auc);
    /* two whole classifier tests asked for: their mean and spread */
    json_t *high = json_object_get(json_object_get(res, "classifier"), "high");
    CHECK_EQ_INT(json_integer_value(json_object_get(high, "repeats")), 2);
    CHECK(json_number_value(json_object_get(high, "auc_sd")) > 0);
    CHECK(json_is_number(json_object_get(json_object_get(json_object_get(res, "classifier"),
                                                         "low"), "auc")));
    /* the second family, and the voxel energy spectrum with its floor */
    CHECK(json_is_number(json_object_get(json_object_get(json_object_get(res, "classifier"),
                                                         "trees_high"), "auc")) &&
          json_is_number(json_object_get(json_object_get(json_object_get(res, "classifier"),
                                                         "trees_low"), "auc")));
    CHECK(json_object_size(json_object_get(json_object_get(res, "voxel_spectrum"),
                                           "features")) == 4 &&
          json_is_number(json_object_get(json_object_get(json_object_get(res, "floor"),
                                                         "voxel_spectrum"), "mean")));
    CHECK(!json_object_get(res, "breakdown"));
    CHECK(json_is_number(json_object_get(res, "fpd_x1e3")) &&
          json_number_value(json_object_get(res, "kpd_err_x1e3")) > 0 &&
          json_is_number(json_object_get(res, "fpd_err_x1e3")));
    CHECK(json_is_array(json_object_get(res, "constant_features")));
    json_t *h = json_object_get(json_object_get(res, "histograms"), "E_layer_1");
    CHECK(json_array_size(json_object_get(h, "edges")) == 40 &&
          json_array_size(json_object_get(h, "a")) == 39 &&
          json_array_size(json_object_get(h, "ref2")) == 39);
    CHECK(svc_str(res, "b") && strstr(svc_str(res, "b"), "dataset") &&
          !strstr(svc_str(res, "b"), data));
    CHECK_EQ_INT(svc_num(res, "n_a"), 300);

    /* the list: newest first, no result */
    json_t *l = NULL;
    snprintf(path, sizeof path, "/v1/runs/%lld/evaluations", run);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &l), 200);
    json_t *items = json_object_get(l, "items");
    CHECK(json_array_size(items) == 1 && svc_num(json_array_get(items, 0), "id") == eid &&
          !json_object_get(json_array_get(items, 0), "result"));
    json_decref(l);
    snprintf(path, sizeof path, "/v1/runs/%lld/evaluations/%lld", run, eid + 100);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &l), 404);
    json_decref(l);

    /* `giant eval --json` on the same showers: the same document */
    char ref_path[400], ref2_path[400], gen[400], out[400], geo[1200];
    snprintf(ref_path, sizeof ref_path, "%s/ref.h5", data);
    snprintf(ref2_path, sizeof ref2_path, "%s/ref2.h5", data);
    snprintf(gen, sizeof gen, "%s/gen.h5", dir);
    snprintf(out, sizeof out, "%s/eval.json", dir);
    const char *root = getenv("GIANT_SOURCE_DIR");
    snprintf(geo, sizeof geo, "%s/configs/geometry/binning_dataset_1_photons.xml",
             root ? root : "../..");
    CHECK(fetch_generated(c, run, ref_path, 300, 7, gen));
    CHECK_EQ_INT(svc_sh("%s eval %s %s --ref2 %s --geometry %s --max-showers 300 --seed 7"
                    " --cls-hidden 32 --cls-depth 2 --cls-epochs 5 --cls-repeats 2 --no-breakdown"
                    " --json %s"
                    " > /dev/null"
                    " 2>&1",
                    svc_binary(), gen, ref_path, ref2_path, geo, out),
                 0);
    json_t *cmd = json_load_file(out, 0, NULL);
    CHECK(cmd != NULL);
    strip_names(cmd);
    strip_names(res);
    CHECK_MSG(json_equal(cmd, res), "the stored document differs from giant eval --json's");
    json_decref(cmd);
    json_decref(j);
}

/* Polls evaluation `path` until its phase is `comparing` (its
 * classifiers); 1 when it got there. */
static int await_comparing(gc_client *c, const char *path)
{
    for (int t = 0; t < 1200; t++) {
        json_t *j = NULL;
        svc_json(c, "GET", path, NULL, NULL, &j);
        int there = svc_str(j, "phase") && !strcmp(svc_str(j, "phase"), "comparing");
        json_decref(j);
        if (there)
            return 1;
        svc_sleep_ms(50);
    }
    return 0;
}

static int restart(gc_client **c)
{
    svc_free(&S);
    if (svc_start(&S, db, data, extra) != 0) {
        svc_dump(&S);
        return 0;
    }
    gt_error err = {0};
    return gc_open(c, S.url, &err) == GT_OK;
}

/* SIGTERM in the middle of an evaluation puts it back in the queue (after
 * the classifier in training); it starts again at the next start; a server
 * killed in the middle of it leaves it failed with the reason, never
 * running. */
static void test_stop_and_crash(void)
{
    gc_client *c = svc_check_client(&S);
    json_t *l = NULL;
    CHECK_EQ_INT(svc_json(c, "GET", "/v1/runs?status=succeeded", NULL, NULL, &l), 200);
    long long run = svc_num(json_array_get(json_object_get(l, "items"), 0), "id");
    json_decref(l);
    /* classifiers slow enough to be caught at them (about a second each) */
    json_t *j = NULL;
    CHECK_EQ_INT(post_eval(c, run,
                           "{\"dataset_id\": 1, \"n\": 400,"
                           " \"metrics\": [\"classifier_high\", \"classifier_low\"],"
                           " \"classifier\": {\"hidden\": 512, \"depth\": 3, \"epochs\": 10}}",
                           &j),
                 202);
    long long eid = svc_num(j, "id");
    json_decref(j);
    char path[96];
    snprintf(path, sizeof path, "/v1/runs/%lld/evaluations/%lld", run, eid);
    CHECK_MSG(await_comparing(c, path), "the evaluation never reached its comparison");
    gc_close(c);

    /* SIGTERM: a clean stop, the evaluation queued again */
    CHECK_EQ_INT(svc_stop(&S, SIGTERM, 60000), 0);
    CHECK(svc_log_has(&S, "status=queued note=stopped"));
    if (!restart(&c)) {
        CHECK_MSG(0, "server did not restart");
        return;
    }
    /* it runs again from the start: caught at its classifiers once more */
    CHECK_MSG(await_comparing(c, path), "the re-queued evaluation did not run again");
    gc_close(c);

    /* SIGKILL: failed with the reason after the restart */
    svc_stop(&S, SIGKILL, 10000);
    if (!restart(&c)) {
        CHECK_MSG(0, "server did not restart");
        return;
    }
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    CHECK_MSG(svc_str(j, "status") && !strcmp(svc_str(j, "status"), "failed"), "after a crash: %s",
              svc_str(j, "status"));
    CHECK(svc_str(j, "error") && strstr(svc_str(j, "error"), "stopped during the evaluation"));
    json_decref(j);
    gc_close(c);
}

int main(void)
{
    snprintf(dir, sizeof dir, "svc-eval-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(db, sizeof db, "%s/test.db", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    if (svc_check_start(&S, "server did not start", db, data, extra) != 0)
        return check_finish();
    gc_client *c = svc_check_client(&S);
    test_evaluation(c);
    gc_close(c);
    if (!check_failures_)
        test_stop_and_crash();
    CHECK_EQ_INT(svc_stop(&S, SIGTERM, 30000), 0);
    svc_check_done(&S);
    svc_check_cleanup(dir);
    return check_finish();
}
