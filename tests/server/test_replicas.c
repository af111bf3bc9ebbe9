/* Stateless sampling replicas (giant serve --role sampler --models DIR), on
 * real processes: a tiny run trained on a trainer and exported into a
 * directory; a replica started on it writes no database and no data
 * directory, is alive at once and ready with the model's name; the same
 * requests give, from the replica's models route and its run-scoped route,
 * the trainer's bytes (binary), the same HDF5 datasets and the same JSON
 * showers, and `giant sample --server` works against it; the trainer's
 * routes answer 404 not_on_sampler (a file upload before its body is
 * read); a replica started with --model-url pulls the run's model from
 * the trainer and serves the same bytes; a directory with a damaged file, a
 * badly named file or no file at all, a URL the trainer refuses, and a
 * non-loopback address (a replica has no tokens to check) stop it with the
 * reason; a replica given --token-file may listen on 0.0.0.0 and requires
 * tokens (none: 401, a sampler's: 200, a reader's: 403 on samples), and a
 * token file readable by others or with a malformed line stops it, the
 * line named and its text never shown. */
#include "check.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calo_h5.h"
#include "geo.h"
#include "model_data.h"
#include "replica_fixture.h"
#include "svc_check.h"
#include "svc_harness.h"

static char dir[256];

/* the datasets of two HDF5 replies */
static int same_h5(const void *a, size_t la, const void *b, size_t lb)
{
    char fa[320], fb[320];
    snprintf(fa, sizeof fa, "%s/a.h5", dir);
    snprintf(fb, sizeof fb, "%s/b.h5", dir);
    FILE *f = fopen(fa, "wb");
    fwrite(a, 1, la, f);
    fclose(f);
    f = fopen(fb, "wb");
    fwrite(b, 1, lb, f);
    fclose(f);
    geo_geometry g;
    gt_error err = {0};
    if (model_geometry_load("dataset_1_photons", &g, &err) != GT_OK)
        return 0;
    float *ea = NULL, *sa = NULL, *eb = NULL, *sb = NULL;
    int64_t na = 0, nb = 0;
    int ok = calo_h5_read_all(fa, &g, &ea, &sa, &na, &err) == GT_OK &&
             calo_h5_read_all(fb, &g, &eb, &sb, &nb, &err) == GT_OK && na == nb && na > 0 &&
             memcmp(ea, eb, (size_t)na * sizeof(float)) == 0 &&
             memcmp(sa, sb, (size_t)na * (size_t)g.n_voxels * sizeof(float)) == 0;
    free(ea);
    free(sa);
    free(eb);
    free(sb);
    geo_free(&g);
    return ok;
}

/* One request to the trainer's run and to the replica's two routes. */
static void same_showers(gc_client *t, gc_client *r, long long run, const char *body,
                         const char *accept)
{
    char run_path[64];
    snprintf(run_path, sizeof run_path, "/v1/runs/%lld/samples", run);
    void *want = NULL, *got = NULL, *got_run = NULL;
    size_t lw = 0, lg = 0, lr = 0;
    long sw = replica_fixture_post(t, run_path, body, accept, &want, &lw);
    long sg = replica_fixture_post(r, "/v1/models/tiny/samples", body, accept, &got, &lg);
    long sr = replica_fixture_post(r, run_path, body, accept, &got_run, &lr);
    CHECK_MSG(sw == 200 && sg == 200 && sr == 200, "%s %s: %ld %ld %ld", accept, body, sw, sg,
              sr);
    if (sw == 200 && sg == 200 && sr == 200) {
        if (strcmp(accept, "application/octet-stream") == 0) {
            CHECK_MSG(lw == lg && lw == lr && lw > 0 && memcmp(want, got, lw) == 0 &&
                      memcmp(want, got_run, lw) == 0, "%s: %zu, %zu, %zu bytes differ", body,
                      lw, lg, lr);
        } else if (strcmp(accept, "application/x-hdf5") == 0) {
            CHECK_MSG(same_h5(want, lw, got, lg) && same_h5(want, lw, got_run, lr),
                      "%s: other HDF5 datasets", body);
        } else {
            json_t *jw = json_loadb(want, lw, 0, NULL), *jg = json_loadb(got, lg, 0, NULL),
                   *jr = json_loadb(got_run, lr, 0, NULL);
            CHECK(json_equal(json_object_get(jw, "showers"), json_object_get(jg, "showers")));
            CHECK(json_equal(json_object_get(jw, "showers"), json_object_get(jr, "showers")));
            CHECK(json_equal(json_object_get(jw, "energies"), json_object_get(jg, "energies")));
            CHECK_EQ_INT(json_integer_value(json_object_get(jr, "run_id")), run);
            CHECK(strcmp(json_string_value(json_object_get(jr, "model")), "tiny") == 0);
            json_decref(jw);
            json_decref(jg);
            json_decref(jr);
        }
    }
    free(want);
    free(got);
    free(got_run);
}

#define TOK_SAMPLER "gt_0badc0de" "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define TOK_READER  "gt_5eed1e55" "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

/* Writes text to path with mode; the path. */
static const char *token_file(const char *name, const char *text, mode_t mode)
{
    static char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, mode);
    return path;
}

/* A replica with a token file that must stop it: exit 1 with why. */
static void refused_tokens(const char *models, const char *file, const char *why)
{
    svc s;
    const char *argv[] = {svc_binary(), "serve", "--role", "sampler", "--models", models,
                          "--token-file", file, "--listen", "0.0.0.0:0", "--device", "cpu",
                          NULL};
    CHECK_EQ_INT(svc_spawn(&s, (char *const *)argv), 0);
    int rc = svc_wait_exit(&s, 60000);
    CHECK_MSG(rc == 1 && svc_log_has(&s, why), "%s: exit %d, want 1 and '%s'", file, rc, why);
    /* the secret never shows, not even its public prefix's neighbours */
    CHECK(!svc_log_has(&s, "0123456789abcdef0123") && !svc_log_has(&s, "fedcba9876543210"));
    svc_check_done(&s);
}

/* A replica on models that must stop it: exit 1 with why in its log. */
static void refused_dir(const char *models, const char *listen, const char *why)
{
    svc s;
    char db[320], data[320];
    snprintf(db, sizeof db, "%s/bad.db", dir);
    snprintf(data, sizeof data, "%s/bad-data", dir);
    const char *argv[] = {svc_binary(), "serve", "--role", "sampler", "--models", models,
                          "--listen", listen, "--db", db, "--data-dir", data,
                          "--device", "cpu", NULL};
    CHECK_EQ_INT(svc_spawn(&s, (char *const *)argv), 0);
    int rc = svc_wait_exit(&s, 60000);
    CHECK_MSG(rc == 1 && svc_log_has(&s, why), "%s: exit %d, want 1 and '%s'", models, rc, why);
    svc_check_done(&s);
}

int main(void)
{
    snprintf(dir, sizeof dir, "svc-replicas-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    replica_paths P;
    CHECK_EQ_INT(replica_fixture_paths(&P, dir), 0);
    const char *db = P.db, *data = P.data, *models = P.models, *file = P.file;
    char rdb[320], rdata[320];
    snprintf(rdb, sizeof rdb, "%s/replica.db", dir);
    snprintf(rdata, sizeof rdata, "%s/replica-data", dir);
    static const char *const extra[] = {"--threads", "2", "--max-json-showers", "20", NULL};
    svc T, R;
    int r_started = 0;
    if (svc_check_start(&T, "the trainer did not start", db, data, extra) != 0)
        return check_finish();
    gc_client *t = NULL, *r = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(gc_open(&t, T.url, &err), GT_OK);
    long long run = replica_fixture_train(t, file);
    CHECK_MSG(run > 0, "no tiny run and model file");
    if (check_failures_)
        goto out;

    /* the replica: alive, then ready with its model; nothing on disk.  It
     * computes on one thread where the trainer uses the machine's cores, so
     * the same bytes below also say that the thread count does not matter */
    setenv("OMP_NUM_THREADS", "1", 1);
    int r_rc = replica_fixture_start(&R, models, "127.0.0.1:0", rdb, rdata);
    unsetenv("OMP_NUM_THREADS");
    if (r_rc != 0) {
        svc_dump(&R);
        svc_free(&R);
        CHECK_MSG(0, "the replica did not start");
        goto out;
    }
    r_started = 1;
    CHECK_EQ_INT(gc_open(&r, R.url, &err), GT_OK);
    json_t *j = NULL;
    CHECK_EQ_INT(svc_json(r, "GET", "/healthz", NULL, NULL, &j), 200);
    json_decref(j);
    j = replica_fixture_ready(r, 30000);
    json_t *checks = json_object_get(j, "checks");
    CHECK_MSG(json_is_string(json_object_get(checks, "role")) &&
              strcmp(json_string_value(json_object_get(checks, "role")), "sampler") == 0,
              "readyz: no role sampler");
    json_t *m = json_object_get(checks, "models");
    CHECK(m && strcmp(json_string_value(json_object_get(m, "state")), "loaded") == 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(m, "files")), 1);
    CHECK(json_array_size(json_object_get(m, "loaded")) == 1 &&
          strcmp(json_string_value(json_array_get(json_object_get(m, "loaded"), 0)), "tiny") == 0);
    json_decref(j);
    struct stat st;
    CHECK_MSG(stat(rdb, &st) != 0 && stat(rdata, &st) != 0,
              "the replica wrote its --db or --data-dir");
    CHECK(svc_log_has(&R, "path=:memory:"));
    CHECK_EQ_INT(svc_json(r, "GET", "/v1/models", NULL, NULL, &j), 200);
    CHECK_EQ_INT(json_array_size(json_object_get(j, "items")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(json_object_get(j, "items"), 0),
                                                    "source_run_id")), run);
    json_decref(j);
    CHECK_EQ_INT(svc_json(r, "GET", "/metrics", NULL, NULL, &j), 200);
    json_decref(j);

    /* the trainer's bytes, from both of the replica's routes */
    for (int i = 0; i < REPLICA_FIXTURE_REQUESTS; i++)
        same_showers(t, r, run, replica_fixture_requests[i].body,
                     replica_fixture_requests[i].accept);
    /* a farm job's command, pointed at the replica, unchanged */
    CHECK_EQ_INT(svc_sh("%s sample --server %s --run %lld --n 30 --seed 4 -o %s/farm.h5"
                        " > /dev/null 2>&1", svc_binary(), R.url, run, dir), 0);
    CHECK_EQ_INT(svc_json(r, "POST", "/v1/runs/999/samples", "{\"count\": 1}", NULL, &j), 404);
    CHECK(svc_ecode(j) && strcmp(svc_ecode(j), "not_found") == 0);
    json_decref(j);
    CHECK_EQ_INT(svc_json(r, "POST", "/v1/models/tiny/samples", "{\"count\": 0}", NULL, &j), 422);
    json_decref(j);

    /* what needs a trainer: 404 not_on_sampler */
    static const struct { const char *method, *path, *body; } trainer_only[] = {
        {"POST", "/v1/runs", "{\"name\": \"x\"}"},
        {"POST", "/v1/runs", "{not json"},
        {"GET", "/v1/runs", NULL},
        {"GET", "/v1/runs/1", NULL},
        {"GET", "/v1/runs/1/model", NULL},
        {"GET", "/v1/runs/1/events", NULL},
        {"POST", "/v1/runs/1/evaluations", "{}"},
        {"GET", "/v1/datasets", NULL},
        {"POST", "/v1/datasets", "{}"},
        {"GET", "/v1/tokens", NULL},
        {"DELETE", "/v1/tokens/1", NULL},
        {"GET", "/", NULL},
    };
    for (size_t i = 0; i < sizeof trainer_only / sizeof trainer_only[0]; i++) {
        long code = svc_json(r, trainer_only[i].method, trainer_only[i].path,
                             trainer_only[i].body, NULL, &j);
        CHECK_MSG(code == 404 && svc_ecode(j) && strcmp(svc_ecode(j), "not_on_sampler") == 0,
                  "%s %s: %ld %s", trainer_only[i].method, trainer_only[i].path, code,
                  svc_ecode(j) ? svc_ecode(j) : "(no code)");
        json_decref(j);
    }
    /* an import is refused before its body is read (the declared length
     * is far over --max-model-bytes' default, and no 413 comes back) */
    CHECK_EQ_INT(svc_sh("curl -s -o %s/up.json -w '%%{http_code}' -X POST -H 'Content-Type:"
                        " application/octet-stream' -H 'Content-Length: 4000000000' --data-binary"
                        " @%s %s/v1/models | grep -q 404 && grep -q not_on_sampler %s/up.json",
                        dir, file, R.url, dir), 0);

    /* a replica that pulls its model from the trainer at start (no
     * directory): named after the run, the trainer's bytes again */
    {
        svc U;
        char url[160], udb[320], udata[320];
        snprintf(url, sizeof url, "%s/v1/runs/%lld/model", T.url, run);
        snprintf(udb, sizeof udb, "%s/pulled.db", dir);
        snprintf(udata, sizeof udata, "%s/pulled-data", dir);
        const char *argv[] = {svc_binary(), "serve", "--role", "sampler", "--model-url", url,
                              "--listen", "127.0.0.1:0", "--db", udb, "--data-dir", udata,
                              "--device", "cpu", NULL};
        int up = svc_spawn(&U, (char *const *)argv) == 0 && svc_await_listening(&U, 60000);
        if (up) {
            gc_client *u = NULL;
            CHECK_EQ_INT(gc_open(&u, U.url, &err), GT_OK);
            j = replica_fixture_ready(u, 30000);
            const char *name = json_string_value(json_array_get(json_object_get(
                json_object_get(json_object_get(j, "checks"), "models"), "loaded"), 0));
            CHECK_MSG(name && strncmp(name, "run-", 4) == 0, "pulled model named %s",
                      name ? name : "(none)");
            json_decref(j);
            char run_path[64];
            snprintf(run_path, sizeof run_path, "/v1/runs/%lld/samples", run);
            const char *body = "{\"energies\": [1500, 70000], \"seed\": 8}";
            void *want = NULL, *got = NULL;
            size_t lw = 0, lg = 0;
            CHECK_EQ_INT(replica_fixture_post(t, run_path, body, "application/octet-stream",
                                              &want, &lw), 200);
            CHECK_EQ_INT(replica_fixture_post(u, run_path, body, "application/octet-stream",
                                              &got, &lg), 200);
            CHECK(lw == lg && lw > 0 && memcmp(want, got, lw) == 0);
            free(want);
            free(got);
            gc_close(u);
        }
        svc_check_stop_started(&U, up, "the replica with --model-url did not start");
        svc_check_done(&U);
    }

    /* a replica with a token file: any address, tokens required */
    {
        svc K;
        const char *tf = token_file("tokens", "# the replica's tokens\n\n" TOK_SAMPLER "\n"
                                    "  " TOK_READER "  reader\n", 0600);
        const char *argv[] = {svc_binary(), "serve", "--role", "sampler", "--models", models,
                              "--token-file", tf, "--listen", "127.0.0.1:0", "--device", "cpu",
                              "--threads", "2", NULL};
        int up = svc_spawn(&K, (char *const *)argv) == 0 && svc_await_listening(&K, 60000);
        if (up) {
            gc_client *k = NULL;
            CHECK_EQ_INT(gc_open(&k, K.url, &err), GT_OK);
            j = replica_fixture_ready(k, 30000);       /* /readyz needs no token */
            json_decref(j);
            CHECK(svc_log_has(&K, "tokens=2 require_tokens=1"));
            const char *body = "{\"energies\": [1500, 70000], \"seed\": 8}";
            void *got = NULL;
            size_t lg = 0;
            /* no token, from loopback: 401 */
            CHECK_EQ_INT(replica_fixture_post(k, "/v1/models/tiny/samples", body,
                                              "application/octet-stream", &got, &lg), 401);
            free(got);
            CHECK_EQ_INT(svc_json(k, "GET", "/v1/models", NULL, NULL, &j), 401);
            json_decref(j);
            /* a sampler's: the showers */
            CHECK_EQ_INT(gc_set_token(k, TOK_SAMPLER, &err), GT_OK);
            CHECK_EQ_INT(replica_fixture_post(k, "/v1/models/tiny/samples", body,
                                              "application/octet-stream", &got, &lg), 200);
            CHECK(lg > 0);
            free(got);
            /* a reader's: reads, does not sample */
            CHECK_EQ_INT(gc_set_token(k, TOK_READER, &err), GT_OK);
            CHECK_EQ_INT(svc_json(k, "GET", "/v1/models", NULL, NULL, &j), 200);
            json_decref(j);
            CHECK_EQ_INT(svc_json(k, "POST", "/v1/models/tiny/samples", body, NULL, &j), 403);
            CHECK(svc_ecode(j) && strcmp(svc_ecode(j), "forbidden") == 0);
            json_decref(j);
            /* one not in the file */
            CHECK_EQ_INT(gc_set_token(k, "gt_00000000" "0123456789abcdef0123456789abcdef"
                                      "0123456789abcdef0123456789abcdef", &err), GT_OK);
            CHECK_EQ_INT(svc_json(k, "POST", "/v1/models/tiny/samples", body, NULL, &j), 401);
            json_decref(j);
            gc_close(k);
        }
        svc_check_stop_started(&K, up, "the replica with --token-file did not start");
        CHECK(!svc_log_has(&K, "0123456789abcdef0123") && !svc_log_has(&K, "fedcba9876543210"));
        svc_check_done(&K);
        /* and on a non-loopback address it starts (the harness talks to
         * 127.0.0.1 only: the start is what is checked) */
        {
            svc W;
            const char *wargv[] = {svc_binary(), "serve", "--role", "sampler", "--models",
                                   models, "--token-file", tf, "--listen", "0.0.0.0:0",
                                   "--device", "cpu", "--threads", "2", NULL};
            CHECK_EQ_INT(svc_spawn(&W, (char *const *)wargv), 0);
            CHECK_MSG(svc_log_wait(&W, "msg=listening addr=0.0.0.0:", 60000) &&
                      svc_log_wait(&W, "msg=ready role=sampler", 30000),
                      "the replica with --token-file did not start on 0.0.0.0");
            CHECK(svc_log_has(&W, "usable_tokens=2 require_tokens=1"));
            svc_check_stop(&W);
        }
        /* refused: readable by others or its group, a malformed line (its
         * number, never its text), an unknown role, nothing in it */
        refused_tokens(models, token_file("open", TOK_SAMPLER "\n", 0644),
                       "must not be readable or writable by its group or others");
        refused_tokens(models, token_file("group", TOK_SAMPLER "\n", 0640), "has mode 0640");
        refused_tokens(models, token_file("bad", "# one\n" TOK_SAMPLER "\n\n"
                                          "gt_0badc0de0123456789abcdef0123\n", 0600),
                       "line 4: not a token");
        refused_tokens(models, token_file("role", TOK_SAMPLER " admin\n", 0600),
                       "line 1: role 'admin' is not sampler or reader");
        refused_tokens(models, token_file("twice", TOK_SAMPLER "\n" TOK_SAMPLER "\n", 0600),
                       "line 2: the same token is registered already");
        refused_tokens(models, token_file("empty", "# none yet\n", 0600), "holds no token");
        refused_tokens(models, "no-such-token-file", "token file no-such-token-file");
    }

    /* models that stop a replica, with the reason */
    {
        char bad[320], path[400];
        snprintf(bad, sizeof bad, "%s/bad-models", dir);
        CHECK_EQ_INT(mkdir(bad, 0755), 0);
        refused_dir(bad, "127.0.0.1:0", "has no *.giant file");
        snprintf(path, sizeof path, "%s/1234.giant", bad);
        CHECK_EQ_INT(svc_sh("cp %s %s", file, path), 0);
        refused_dir(bad, "127.0.0.1:0", "is not a model name");
        unlink(path);
        snprintf(path, sizeof path, "%s/damaged.giant", bad);
        CHECK_EQ_INT(svc_sh("cp %s %s && printf 'X' | dd of=%s bs=1 seek=$(($(stat -c %%s %s) -"
                            " 100)) conv=notrunc 2>/dev/null", file, path, path, path), 0);
        refused_dir(bad, "127.0.0.1:0", "model_corrupt");
        refused_dir("no-such-directory", "127.0.0.1:0", "models directory no-such-directory");
        /* no token to check a remote client's: loopback only */
        refused_dir(models, "0.0.0.0:0", "a sampling replica has no tokens to check");
        /* a URL the trainer answers 404 to */
        {
            svc s;
            char url[160];
            snprintf(url, sizeof url, "%s/v1/runs/999/model", T.url);
            const char *argv[] = {svc_binary(), "serve", "--role", "sampler", "--model-url",
                                  url, "--listen", "127.0.0.1:0", "--device", "cpu", NULL};
            CHECK_EQ_INT(svc_spawn(&s, (char *const *)argv), 0);
            CHECK_EQ_INT(svc_wait_exit(&s, 60000), 1);
            CHECK(svc_log_has(&s, "status 404"));
            svc_check_done(&s);
        }
    }

out:
    gc_close(t);
    gc_close(r);
    if (r_started)
        CHECK_EQ_INT(svc_stop(&R, SIGTERM, 30000), 0);
    CHECK_EQ_INT(svc_stop(&T, SIGTERM, 30000), 0);
    svc_check_done(&T);
    if (r_started)
        svc_check_done(&R);
    svc_check_cleanup(dir);
    return check_finish();
}
