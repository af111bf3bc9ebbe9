/* Runs with executor "slurm" without a Slurm: the real service, whose
 * --slurm-bin holds stand-ins for sbatch, squeue and scancel (shell scripts
 * this test writes: sbatch hands out job ids, squeue prints a state file
 * the test rewrites, scancel records its argument and marks the job
 * CANCELLED).  Proven here:
 * - the executor section is validated (422 naming the field), and refused
 *   on a server without the Slurm commands;
 * - the job script holds the job's token (mode 0600) and runs
 *   giant train --report; sbatch gets the run's partition, time and gres;
 * - the ingest routes: no token, a malformed one and an unknown one are
 *   401, another run's 403; a batch of 1001 metrics is 422 naming
 *   "metrics"; a batch sent twice records nothing twice, one repeating a
 *   key with another value rewrites nothing (append only); a checkpoint
 *   with a wrong sha256 is 422 checksum_mismatch, without one 422, again
 *   with the same bytes 200 (a retry), other bytes at that step 409; the
 *   newest checkpoint comes back with its sha256, and with best=1 the best;
 * - the acceptance test a job uploads (model.accept): stored against the
 *   best checkpoints it names (201, then sampling serves it), 409 when it
 *   names others or the run's config asks for none, 422 for bytes that are
 *   not a test, a test naming no checkpoints, no showers, a wrong sha256;
 * - the end reported makes
 *   the run succeeded, a retry of that last batch is 200, anything after
 *   it 409; a failure the trainer reports fails the run at once with its
 *   reason, which the job's FAILED keeps, and resume waits for the job to
 *   leave Slurm's queue (409);
 * - the run follows the job: PENDING keeps it queued, RUNNING makes it
 *   running, a cancel through the API runs scancel and CANCELLED makes it
 *   cancelled; FAILED fails it with Slurm's state and reason. */
#include "check.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "model_accept.h"
#include "svc_check.h"
#include "svc_harness.h"

static char dir[64], fake[320];
static svc S;

static void write_file(const char *path, const char *text, int mode)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
    chmod(tmp, (mode_t)mode);
    rename(tmp, path);
}

/* The stand-ins, in fake/: each job's squeue line lives in state. */
static void write_fakes(void)
{
    char p[600], t[2048];
    snprintf(p, sizeof p, "%s/sbatch", fake);
    snprintf(t, sizeof t,
             "#!/bin/sh\n"
             "d=%s\n"
             "n=$(cat $d/next 2>/dev/null || echo 100)\n"
             "echo $((n + 1)) > $d/next\n"
             "echo \"$@\" > $d/sbatch-$n.args\n"
             "echo \"$n|PENDING|None|\" >> $d/state\n"
             "echo \"$n\"\n",
             fake);
    write_file(p, t, 0755);
    snprintf(p, sizeof p, "%s/squeue", fake);
    snprintf(t, sizeof t, "#!/bin/sh\ncat %s/state 2>/dev/null\n", fake);
    write_file(p, t, 0755);
    snprintf(p, sizeof p, "%s/scancel", fake);
    snprintf(t, sizeof t,
             "#!/bin/sh\n"
             "d=%s\n"
             "echo \"$1\" >> $d/scancel.log\n"
             "sed \"s/^$1|[^|]*|[^|]*|/$1|CANCELLED|None|/\" $d/state > $d/state.new\n"
             "mv $d/state.new $d/state\n",
             fake);
    write_file(p, t, 0755);
}

/* Sets job's squeue line (the others kept). */
static void set_state(long long job, const char *state, const char *reason)
{
    char p[600], line[128], buf[8192] = "";
    snprintf(p, sizeof p, "%s/state", fake);
    FILE *f = fopen(p, "r");
    size_t k = 0;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%lld|", job);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, prefix, strlen(prefix)) != 0 && k + strlen(line) < sizeof buf)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s", line);
    if (f)
        fclose(f);
    snprintf(buf + k, sizeof buf - k, "%lld|%s|%s|node7\n", job, state, reason);
    write_file(p, buf, 0644);
}

/* A tiny config with an executor section. */
static char *slurm_config(const char *executor)
{
    char *text = svc_tiny_config("on-slurm", 20, 5, 5, NULL);
    json_t *c = json_loads(text, 0, NULL);
    free(text);
    json_object_set_new(c, "executor", json_loads(executor, 0, NULL));
    text = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    /* run A (the executor with gres) takes an acceptance test */
    return strstr(executor, "gres") ? svc_with_accept(text, 100, 8, 5, 0) : text;
}

static long long submit(gc_client *c, const char *executor)
{
    char *cfg = slurm_config(executor);
    json_t *j = NULL;
    long st = svc_json(c, "POST", "/v1/runs", cfg, NULL, &j);
    free(cfg);
    CHECK_MSG(st == 201, "submit: %ld", st);
    long long id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    return id;
}

/* Waits for the run's job (the fake sbatch ran) and reads the token from
 * its script; returns the job id. */
static long long job_of(gc_client *c, long long run, char token[80])
{
    char path[64];
    snprintf(path, sizeof path, "/v1/runs/%lld", run);
    long long job = 0;
    for (int t = 0; t < 200 && !job; t++) {
        json_t *j = NULL;
        svc_json(c, "GET", path, NULL, NULL, &j);
        job = json_integer_value(json_object_get(json_object_get(j, "executor"), "job_id"));
        json_decref(j);
        if (!job)
            svc_sleep_ms(50);
    }
    CHECK_MSG(job > 0, "run %lld got no job", run);
    char script[600], line[256];
    snprintf(script, sizeof script, "%s/data/slurm/run-%lld.sh", dir, run);
    struct stat st;
    CHECK(stat(script, &st) == 0 && (st.st_mode & 0777) == 0600);
    token[0] = '\0';
    FILE *f = fopen(script, "r");
    int runs_train = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "GIANT_REPORT_TOKEN='%75[^']'", token) == 1)
            continue;
        if (strstr(line, " train --report ") && strstr(line, " --run "))
            runs_train = 1;
    }
    if (f)
        fclose(f);
    CHECK_MSG(strncmp(token, "gtj_", 4) == 0 && strlen(token) == 68, "token '%s'", token);
    CHECK(runs_train);
    return job;
}

static long as(gc_client *c, const char *token, const char *method, const char *path,
               const char *body, json_t **j)
{
    char auth[128];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    const char *headers[] = {auth, NULL};
    return svc_json(c, method, path, body, token ? headers : NULL, j);
}

static long put_checkpoint(gc_client *c, const char *token, long long run, const char *stage,
                           long long step, const char *bytes, const char *sha, json_t **j)
{
    char path[160], auth[128], sum[100];
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest/checkpoints/%s/%lld?val_loss=1.5", run,
             stage, step);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    snprintf(sum, sizeof sum, "X-Checksum-SHA256: %s", sha);
    const char *headers[] = {auth, sum, NULL};
    const char *no_sum[] = {auth, NULL};
    gc_response r;
    gt_error err = {0};
    *j = NULL;
    if (gc_request(c, "PUT", path, "application/octet-stream", bytes, strlen(bytes),
                   sha ? headers : no_sum, &r, &err) != GT_OK)
        return 0;
    *j = json_loadb(r.body, r.len, 0, NULL);
    long st = r.status;
    gc_response_free(&r);
    return st;
}

/* PUT path with bytes and X-Checksum-SHA256 (sha NULL: none): the status. */
static long put_bytes(gc_client *c, const char *token, const char *path, const void *bytes,
                      size_t len, const char *sha, json_t **j)
{
    char auth[128], sum[100];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    snprintf(sum, sizeof sum, "X-Checksum-SHA256: %s", sha ? sha : "");
    const char *headers[] = {auth, sum, NULL};
    const char *no_sum[] = {auth, NULL};
    gc_response r;
    gt_error err = {0};
    *j = NULL;
    if (gc_request(c, "PUT", path, "application/octet-stream", bytes, len,
                   sha ? headers : no_sum, &r, &err) != GT_OK)
        return 0;
    *j = json_loadb(r.body, r.len, 0, NULL);
    long st = r.status;
    gc_response_free(&r);
    return st;
}

/* The features a dataset-1 photon shower gives giant eval's classifier
 * (feat_classifier_width): what a test of these runs reads. */
#define PHOTON_FEATURES 31

/* A small acceptance test's bytes (d inputs, zero weights) naming the
 * checkpoints whose bytes are energy and shower (NULL: none). */
static void *accept_blob_d(int d, const char *energy, const char *shower, size_t *len,
                           char sum[65])
{
    model_accept t;
    memset(&t, 0, sizeof t);
    t.net.d = d;
    t.net.hidden = 2;
    t.net.depth = 1;
    t.net.slope = 0.01f;
    t.net.n_weights = model_classify_net_count(d, 2, 1);
    t.net.weights = calloc(t.net.n_weights, sizeof(float));
    t.net.mean = calloc((size_t)d, sizeof(double));
    t.net.inv_std = calloc((size_t)d, sizeof(double));
    t.max_attempts = 4;
    t.acceptance = 0.5;
    t.auc = 0.625;
    const char *ck[2] = {energy, shower};
    unsigned int n = 0;
    for (int s = 0; s < 2; s++)
        if (ck[s])
            EVP_Digest(ck[s], strlen(ck[s]), t.ckpt_sha256[s], &n, EVP_sha256(), NULL);
    void *b = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(model_accept_pack(&t, &b, len, &err), GT_OK);
    model_accept_free(&t);
    unsigned char md[32];
    EVP_Digest(b, *len, md, &n, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(sum + 2 * i, 3, "%02x", md[i]);
    return b;
}

static void *accept_blob(const char *energy, const char *shower, size_t *len, char sum[65])
{
    return accept_blob_d(PHOTON_FEATURES, energy, shower, len, sum);
}

static json_t *wait_for(gc_client *c, long long run, const char *status, long ms)
{
    json_t *j = svc_wait_run(c, run, status, ms);
    const char *st = json_string_value(json_object_get(j, "status"));
    CHECK_MSG(st && strcmp(st, status) == 0, "run %lld: %s, not %s", run, st ? st : "?",
              status);
    return j;
}

static void sha_hex(const char *s, char out[65])
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "printf '%%s' '%s' | sha256sum", s);
    FILE *p = popen(cmd, "r");
    out[0] = '\0';
    if (p) {
        if (fscanf(p, "%64s", out) != 1)
            out[0] = '\0';
        pclose(p);
    }
}

int main(void)
{
    snprintf(dir, sizeof dir, "svc-ingest-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char db[320], data[320], cwd[200];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(fake, sizeof fake, "%s/%s/fake", cwd, dir);
    snprintf(db, sizeof db, "%s/a.db", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    mkdir(fake, 0755);
    write_fakes();
    const char *extra[] = {"--slurm-bin", fake, "--slurm-poll-ms", "100",
                           "--slurm-partition", "short", NULL};
    if (svc_check_start(&S, "the server did not start", db, data, extra) != 0)
        return check_finish();
    gt_error err = {0};
    gc_client *c = svc_check_client(&S);
    json_t *j = NULL;

    /* the executor section, validated */
    const char *bad[][2] = {
        {"{\"kind\": \"pbs\"}", "executor.kind"},
        {"{\"kind\": \"local\", \"partition\": \"x\"}", "executor.partition"},
        {"{\"kind\": \"slurm\", \"partition\": \"a b\"}", "executor.partition"},
        {"{\"kind\": \"slurm\", \"gres\": \"gpu:1;rm\"}", "executor.gres"},
        {"{\"kind\": \"slurm\", \"time_limit_min\": -1}", "executor.time_limit_min"},
        {"{\"kind\": \"slurm\", \"nodes\": 2}", "executor.nodes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *cfg = slurm_config(bad[i][0]);
        CHECK_EQ_INT(svc_json(c, "POST", "/v1/runs", cfg, NULL, &j), 422);
        CHECK_MSG(svc_efield(j) && strcmp(svc_efield(j), bad[i][1]) == 0, "%s: field %s", bad[i][0],
                  svc_efield(j) ? svc_efield(j) : "null");
        json_decref(j);
        free(cfg);
    }

    /* run A: submitted with its own time and gres, the server's partition */
    long long a = submit(c, "{\"kind\": \"slurm\", \"time_limit_min\": 30, \"gres\": \"gpu:1\"}");
    char tok_a[80], tok_b[80];
    long long job_a = job_of(c, a, tok_a);
    char args[600], line[1024] = "";
    snprintf(args, sizeof args, "%s/sbatch-%lld.args", fake, job_a);
    FILE *f = fopen(args, "r");
    if (f) {
        if (!fgets(line, sizeof line, f))
            line[0] = '\0';
        fclose(f);
    }
    CHECK_MSG(strstr(line, "--partition=short") && strstr(line, "--time=30") &&
                  strstr(line, "--gres=gpu:1") && strstr(line, "--requeue") &&
                  strstr(line, "--parsable"),
              "sbatch got: %s", line);
    json_t *run = wait_for(c, a, "queued", 2000);
    CHECK(strcmp(json_string_value(json_object_get(json_object_get(run, "executor"), "state")) ?: "",
                 "PENDING") == 0);
    json_decref(run);
    long long b = submit(c, "{\"kind\": \"slurm\"}");
    long long job_b = job_of(c, b, tok_b);

    /* the token: none, malformed, unknown, another run's */
    char path[128];
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest/start", a);
    CHECK_EQ_INT(as(c, NULL, "POST", path, "{}", &j), 401);
    CHECK(svc_ecode(j) && strcmp(svc_ecode(j), "unauthorized") == 0);
    json_decref(j);
    CHECK_EQ_INT(as(c, "gtj_123", "POST", path, "{}", &j), 401);
    json_decref(j);
    CHECK_EQ_INT(as(c, "gtj_0000000000000000000000000000000000000000000000000000000000000000",
                    "POST", path, "{}", &j),
                 401);
    json_decref(j);
    CHECK_EQ_INT(as(c, tok_b, "POST", path, "{}", &j), 403);
    CHECK(svc_ecode(j) && strcmp(svc_ecode(j), "forbidden") == 0);
    json_decref(j);

    /* start: running, the config back, no checkpoint yet */
    CHECK_EQ_INT(as(c, tok_a, "POST", path, "{\"node\": \"node7\"}", &j), 200);
    CHECK(json_is_object(json_object_get(j, "config")));
    CHECK(json_is_null(json_object_get(json_object_get(j, "checkpoints"), "energy")));
    CHECK(strcmp(json_string_value(json_object_get(j, "status")) ?: "", "running") == 0);
    json_decref(j);

    /* a batch over the limit names the field */
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest", a);
    json_t *big = json_array();
    for (int i = 0; i < 1001; i++)
        json_array_append_new(big, json_pack("{s:s, s:s, s:i, s:f}", "stage", "energy", "name",
                                             "loss", "step", i, "value", 1.0));
    json_t *body = json_pack("{s:o}", "metrics", big);
    char *text = json_dumps(body, JSON_COMPACT);
    CHECK_EQ_INT(as(c, tok_a, "POST", path, text, &j), 422);
    CHECK(svc_efield(j) && strcmp(svc_efield(j), "metrics") == 0);
    json_decref(j);
    free(text);
    /* exactly 1000 is taken */
    json_array_remove(json_object_get(body, "metrics"), 1000);
    text = json_dumps(body, JSON_COMPACT);
    CHECK_EQ_INT(as(c, tok_a, "POST", path, text, &j), 200);
    CHECK_EQ_INT((int)json_integer_value(
                     json_object_get(json_object_get(j, "metrics"), "recorded")), 1000);
    json_decref(j);
    free(text);
    json_decref(body);
    CHECK_EQ_INT(as(c, tok_a, "POST", path,
                    "{\"metrics\": [{\"stage\": \"calo\", \"name\": \"loss\", \"step\": 1,"
                    " \"value\": 1}]}", &j), 422);
    CHECK(svc_efield(j) && strcmp(svc_efield(j), "metrics[0].stage") == 0);
    json_decref(j);

    /* sent twice: recorded once; a key again with another value: kept */
    const char *batch = "{\"metrics\": [{\"stage\": \"shower\", \"name\": \"loss\", \"step\": 10,"
                        " \"value\": 2.5}, {\"stage\": \"shower\", \"name\": \"lr\", \"step\": 10,"
                        " \"value\": 0.001}], \"validations\": [{\"stage\": \"shower\","
                        " \"step\": 10, \"loss\": 3.25, \"n_samples\": 32}],"
                        " \"progress\": {\"stage\": \"shower\", \"step\": 10, \"done_steps\": 30}}";
    CHECK_EQ_INT(as(c, tok_a, "POST", path, batch, &j), 200);
    CHECK_EQ_INT((int)json_integer_value(
                     json_object_get(json_object_get(j, "metrics"), "recorded")), 2);
    json_decref(j);
    CHECK_EQ_INT(as(c, tok_a, "POST", path, batch, &j), 200);
    CHECK_EQ_INT((int)json_integer_value(
                     json_object_get(json_object_get(j, "metrics"), "recorded")), 0);
    CHECK_EQ_INT((int)json_integer_value(
                     json_object_get(json_object_get(j, "metrics"), "duplicates")), 2);
    CHECK_EQ_INT((int)json_integer_value(
                     json_object_get(json_object_get(j, "validations"), "duplicates")), 1);
    json_decref(j);
    CHECK_EQ_INT(as(c, tok_a, "POST", path,
                    "{\"metrics\": [{\"stage\": \"shower\", \"name\": \"loss\", \"step\": 10,"
                    " \"value\": 99}]}", &j), 200);
    json_decref(j);
    char mpath[128];
    snprintf(mpath, sizeof mpath, "/v1/runs/%lld/metrics?name=loss", a);
    CHECK_EQ_INT(svc_json(c, "GET", mpath, NULL, NULL, &j), 200);
    int seen_shower = 0;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(j, "series"), i, s) {
        if (strcmp(json_string_value(json_object_get(s, "stage")) ?: "", "shower") != 0)
            continue;
        seen_shower = 1;
        CHECK_EQ_INT((int)json_integer_value(json_object_get(s, "count")), 1);
        json_t *pt = json_array_get(json_object_get(s, "points"), 0);
        CHECK_CLOSE(json_number_value(json_array_get(pt, 1)), 2.5, 1e-9, 0);
    }
    CHECK(seen_shower);
    json_decref(j);

    /* checkpoints: sha256 checked, retries idempotent, append only */
    const char *ck = "checkpoint-bytes-of-step-20", *other = "other-bytes";
    char sum[65], sum_other[65];
    sha_hex(ck, sum);
    sha_hex(other, sum_other);
    CHECK_EQ_INT(put_checkpoint(c, tok_a, a, "energy", 20, ck, sum_other, &j), 422);
    CHECK(svc_ecode(j) && strcmp(svc_ecode(j), "checksum_mismatch") == 0);
    json_decref(j);
    CHECK_EQ_INT(put_checkpoint(c, tok_a, a, "energy", 20, ck, NULL, &j), 422);
    CHECK(svc_efield(j) && strcmp(svc_efield(j), "X-Checksum-SHA256") == 0);
    json_decref(j);
    CHECK_EQ_INT(put_checkpoint(c, tok_a, a, "energy", 20, ck, sum, &j), 201);
    json_decref(j);
    CHECK_EQ_INT(put_checkpoint(c, tok_a, a, "energy", 20, ck, sum, &j), 200);
    CHECK(json_is_true(json_object_get(j, "duplicate")));
    json_decref(j);
    CHECK_EQ_INT(put_checkpoint(c, tok_a, a, "energy", 20, other, sum_other, &j), 409);
    json_decref(j);
    CHECK_EQ_INT(put_checkpoint(c, tok_b, a, "energy", 25, ck, sum, &j), 403);
    json_decref(j);
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest/checkpoints/energy", a);
    char auth[128];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", tok_a);
    const char *hdr[] = {auth, NULL};
    gc_response r;
    CHECK_EQ_INT(gc_request(c, "GET", path, NULL, NULL, 0, hdr, &r, &err), GT_OK);
    CHECK_EQ_INT((int)r.status, 200);
    CHECK(r.len == strlen(ck) && memcmp(r.body, ck, r.len) == 0);
    CHECK(strcmp(r.checksum, sum) == 0);
    gc_response_free(&r);
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest/start", a);
    CHECK_EQ_INT(as(c, tok_a, "POST", path, "{}", &j), 200);
    json_t *ce = json_object_get(json_object_get(j, "checkpoints"), "energy");
    CHECK_EQ_INT((int)json_integer_value(json_object_get(ce, "step")), 20);
    CHECK(strcmp(json_string_value(json_object_get(ce, "sha256")) ?: "", sum) == 0);
    json_decref(j);

    /* the acceptance test, against the best checkpoints it names */
    {
        const char *sh = "shower-checkpoint-of-step-20";
        char sum_sh[65], tsum[65], path2[160];
        sha_hex(sh, sum_sh);
        CHECK_EQ_INT(put_checkpoint(c, tok_a, a, "shower", 20, sh, sum_sh, &j), 201);
        json_decref(j);
        snprintf(path2, sizeof path2, "/v1/runs/%lld/ingest/checkpoints/shower?best=1", a);
        CHECK_EQ_INT(gc_request(c, "GET", path2, NULL, NULL, 0, hdr, &r, &err), GT_OK);
        CHECK_EQ_INT((int)r.status, 200);
        CHECK(r.len == strlen(sh) && memcmp(r.body, sh, r.len) == 0);
        gc_response_free(&r);
        snprintf(path2, sizeof path2, "/v1/runs/%lld/ingest/checkpoints/shower?best=2", a);
        CHECK_EQ_INT(as(c, tok_a, "GET", path2, NULL, &j), 422);
        CHECK(svc_efield(j) && strcmp(svc_efield(j), "best") == 0);
        json_decref(j);
        size_t tl = 0;
        void *t = accept_blob(ck, sh, &tl, tsum);
        snprintf(path2, sizeof path2, "/v1/runs/%lld/ingest/acceptance?showers=100", a);
        CHECK_EQ_INT(put_bytes(c, tok_a, path2, t, tl, sum_other, &j), 422);
        CHECK(svc_ecode(j) && strcmp(svc_ecode(j), "checksum_mismatch") == 0);
        json_decref(j);
        CHECK_EQ_INT(put_bytes(c, tok_a, path2, ck, strlen(ck), sum, &j), 422);
        CHECK(svc_efield(j) && strcmp(svc_efield(j), "body") == 0);
        json_decref(j);
        CHECK_EQ_INT(put_bytes(c, tok_b, path2, t, tl, tsum, &j), 403);
        json_decref(j);
        char nopath[128];
        snprintf(nopath, sizeof nopath, "/v1/runs/%lld/ingest/acceptance", a);
        CHECK_EQ_INT(put_bytes(c, tok_a, nopath, t, tl, tsum, &j), 422);
        CHECK(svc_efield(j) && strcmp(svc_efield(j), "showers") == 0);
        json_decref(j);
        CHECK_EQ_INT(put_bytes(c, tok_a, path2, t, tl, tsum, &j), 201);
        CHECK(strcmp(json_string_value(json_object_get(j, "sha256")) ?: "", tsum) == 0);
        CHECK(strcmp(json_string_value(json_object_get(
                         json_object_get(j, "checkpoints"), "shower")) ?: "", sum_sh) == 0);
        CHECK_CLOSE(json_number_value(json_object_get(j, "auc")), 0.625, 1e-12, 0);
        json_decref(j);
        free(t);
        /* the run says which test it serves */
        snprintf(path2, sizeof path2, "/v1/runs/%lld", a);
        CHECK_EQ_INT(svc_json(c, "GET", path2, NULL, NULL, &j), 200);
        json_t *ta = json_object_get(j, "acceptance");
        CHECK(strcmp(json_string_value(json_object_get(ta, "sha256")) ?: "", tsum) == 0 &&
              json_integer_value(json_object_get(ta, "showers")) == 100);
        json_decref(j);
        snprintf(path2, sizeof path2, "/v1/runs/%lld", b);
        CHECK_EQ_INT(svc_json(c, "GET", path2, NULL, NULL, &j), 200);
        CHECK(json_is_null(json_object_get(j, "acceptance")));
        json_decref(j);
        snprintf(path2, sizeof path2, "/v1/runs/%lld/ingest/acceptance?showers=100", a);
        /* named against another shower checkpoint: stale, refused */
        t = accept_blob(ck, other, &tl, tsum);
        CHECK_EQ_INT(put_bytes(c, tok_a, path2, t, tl, tsum, &j), 409);
        json_decref(j);
        free(t);
        t = accept_blob(NULL, NULL, &tl, tsum);
        CHECK_EQ_INT(put_bytes(c, tok_a, path2, t, tl, tsum, &j), 422);
        CHECK(svc_efield(j) && strcmp(svc_efield(j), "body") == 0);
        json_decref(j);
        free(t);
        /* a test of another geometry's features: it could serve nothing */
        t = accept_blob_d(PHOTON_FEATURES + 1, ck, sh, &tl, tsum);
        CHECK_EQ_INT(put_bytes(c, tok_a, path2, t, tl, tsum, &j), 422);
        CHECK(svc_efield(j) && strcmp(svc_efield(j), "body") == 0);
        CHECK(strstr(json_string_value(json_object_get(json_object_get(j, "error"), "message"))
                         ?: "", "features") != NULL);
        json_decref(j);
        free(t);
        /* a run whose config asks for no test takes none */
        t = accept_blob(ck, sh, &tl, tsum);
        snprintf(path2, sizeof path2, "/v1/runs/%lld/ingest/acceptance?showers=100", b);
        CHECK_EQ_INT(put_bytes(c, tok_b, path2, t, tl, tsum, &j), 409);
        json_decref(j);
        free(t);
    }

    /* the end: succeeded at once; the retried last batch 200; then 409 */
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest", a);
    CHECK_EQ_INT(as(c, tok_a, "POST", path, "{\"status\": \"succeeded\"}", &j), 200);
    json_decref(j);
    json_decref(wait_for(c, a, "succeeded", 2000));
    CHECK_EQ_INT(as(c, tok_a, "POST", path, "{\"status\": \"succeeded\"}", &j), 200);
    json_decref(j);
    CHECK_EQ_INT(as(c, tok_a, "POST", path,
                    "{\"metrics\": [{\"stage\": \"shower\", \"name\": \"loss\", \"step\": 11,"
                    " \"value\": 1}]}", &j), 409);
    json_decref(j);
    set_state(job_a, "COMPLETED", "None");
    svc_sleep_ms(400);
    json_decref(wait_for(c, a, "succeeded", 100));

    /* run B follows its job: RUNNING, then a cancel through the API */
    set_state(job_b, "RUNNING", "None");
    run = wait_for(c, b, "running", 3000);
    CHECK(strcmp(json_string_value(json_object_get(json_object_get(run, "executor"), "node")) ?: "",
                 "node7") == 0);
    json_decref(run);
    snprintf(path, sizeof path, "/v1/runs/%lld/cancel", b);
    CHECK_EQ_INT(svc_json(c, "POST", path, NULL, NULL, &j), 202);
    json_decref(j);
    run = wait_for(c, b, "cancelled", 3000);
    CHECK(strstr(json_string_value(json_object_get(run, "error")) ?: "", "scancel") != NULL);
    json_decref(run);
    char log[600], got[64] = "";
    snprintf(log, sizeof log, "%s/scancel.log", fake);
    f = fopen(log, "r");
    if (f) {
        if (!fgets(got, sizeof got, f))
            got[0] = '\0';
        fclose(f);
    }
    CHECK_EQ_INT((int)atoll(got), (int)job_b);

    /* run C: Slurm says FAILED */
    char tok_c[80];
    long long cc = submit(c, "{\"kind\": \"slurm\"}");
    long long job_c = job_of(c, cc, tok_c);
    set_state(job_c, "FAILED", "NonZeroExitCode");
    run = wait_for(c, cc, "failed", 3000);
    const char *why = json_string_value(json_object_get(run, "error"));
    CHECK_MSG(why && strstr(why, "FAILED") && strstr(why, "NonZeroExitCode"), "error: %s",
              why ? why : "null");
    json_decref(run);
    /* a new submission (resume) gets a new job and token; the old token
     * is refused */
    snprintf(path, sizeof path, "/v1/runs/%lld/resume", cc);
    CHECK_EQ_INT(svc_json(c, "POST", path, NULL, NULL, &j), 202);
    json_decref(j);
    char tok_c2[80];
    long long job_c2 = 0;
    for (int t = 0; t < 100 && job_c2 <= job_c; t++) {
        svc_sleep_ms(50);
        json_t *rj = NULL;
        snprintf(path, sizeof path, "/v1/runs/%lld", cc);
        svc_json(c, "GET", path, NULL, NULL, &rj);
        job_c2 = json_integer_value(json_object_get(json_object_get(rj, "executor"), "job_id"));
        json_decref(rj);
    }
    CHECK(job_c2 > job_c);
    job_of(c, cc, tok_c2);
    CHECK(strcmp(tok_c, tok_c2) != 0);
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest/start", cc);
    CHECK_EQ_INT(as(c, tok_c, "POST", path, "{}", &j), 401);
    json_decref(j);

    /* run D: the trainer reports a failure while its job still runs; the
     * run fails at once with the trainer's reason, may not resume before
     * the job has left Slurm's queue, and keeps that reason when the job
     * ends FAILED */
    char tok_d[80];
    long long d = submit(c, "{\"kind\": \"slurm\"}");
    long long job_d = job_of(c, d, tok_d);
    set_state(job_d, "RUNNING", "None");
    json_decref(wait_for(c, d, "running", 3000));
    snprintf(path, sizeof path, "/v1/runs/%lld/ingest", d);
    CHECK_EQ_INT(as(c, tok_d, "POST", path, "{\"status\": \"failed\", \"error\": \"out of"
                    " memory on the node\"}", &j), 200);
    json_decref(j);
    run = wait_for(c, d, "failed", 2000);
    CHECK(strcmp(json_string_value(json_object_get(run, "error")) ?: "",
                 "out of memory on the node") == 0);
    json_decref(run);
    snprintf(path, sizeof path, "/v1/runs/%lld/resume", d);
    CHECK_EQ_INT(svc_json(c, "POST", path, NULL, NULL, &j), 409);
    json_decref(j);
    set_state(job_d, "FAILED", "NonZeroExitCode");
    snprintf(path, sizeof path, "/v1/runs/%lld", d);
    for (int t = 0; t < 60; t++) {
        svc_json(c, "GET", path, NULL, NULL, &run);
        int done = strcmp(json_string_value(json_object_get(json_object_get(run, "executor"),
                                                            "state")) ?: "", "FAILED") == 0;
        if (done)
            break;
        json_decref(run);
        run = NULL;
        svc_sleep_ms(50);
    }
    CHECK(strcmp(json_string_value(json_object_get(run, "error")) ?: "",
                 "out of memory on the node") == 0);
    CHECK(strcmp(json_string_value(json_object_get(run, "status")) ?: "", "failed") == 0);
    json_decref(run);
    snprintf(path, sizeof path, "/v1/runs/%lld/resume", d);
    CHECK_EQ_INT(svc_json(c, "POST", path, NULL, NULL, &j), 202);
    json_decref(j);

    /* a role token never opens the ingest routes: the guard asks for a job's */
    CHECK_EQ_INT(as(c, "gt_0123456789abcdef", "POST", path, "{}", &j), 401);
    json_decref(j);

    gc_close(c);
    CHECK_EQ_INT(svc_stop(&S, SIGTERM, 20000), 0);
    svc_check_done(&S);

    /* a server without the Slurm commands refuses slurm runs */
    char db2[320], nobin[320];
    snprintf(db2, sizeof db2, "%s/b.db", dir);
    snprintf(nobin, sizeof nobin, "%s/no-such-dir", dir);
    const char *extra2[] = {"--slurm-bin", nobin, NULL};
    if (svc_start(&S, db2, data, extra2) == 0) {
        CHECK_EQ_INT(gc_open(&c, S.url, &err), GT_OK);
        char *cfg = slurm_config("{\"kind\": \"slurm\"}");
        CHECK_EQ_INT(svc_json(c, "POST", "/v1/runs", cfg, NULL, &j), 422);
        CHECK(svc_efield(j) && strcmp(svc_efield(j), "executor.kind") == 0);
        json_decref(j);
        free(cfg);
        gc_close(c);
        svc_stop(&S, SIGTERM, 20000);
    } else {
        CHECK_MSG(0, "the second server did not start");
    }
    svc_free(&S);
    svc_check_cleanup(dir);
    return check_finish();
}
