/* A model leaves its run, end to end on two real services: a tiny run
 * trained on server A is exported over HTTP (GET /v1/runs/{id}/model) and
 * with `giant export` (the same bytes), imported into server B with a
 * fresh database of its own (POST /v1/models: 201, then 200 and the same
 * model for the same file), listed and read back there, and served: the
 * same sample requests (explicit energies, count with a distribution, other
 * steps, row0; binary, HDF5 and JSON) give the same bytes from B's model as
 * from A's run.  Bad files are refused over HTTP with their code and the
 * part they concern (a byte of shower.ckpt changed, a cut file, a newer
 * format, a geometry other than the config's), a wrong Content-Type with
 * 415, a taken name with 409; `giant import` offline likewise. */
#include "check.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calo_h5.h"
#include "geo.h"
#include "giant_client.h"
#include "gt_le.h"
#include "model_data.h"
#include "model_pack.h"
#include "replica_fixture.h"
#include "svc_check.h"
#include "svc_harness.h"

static svc A, B;
static char dir[256];
static const char *const extra[] = {"--default-dataset", "0", "--threads", "2",
                                    "--max-json-showers", "20", NULL};

static long post_file(gc_client *c, const char *path, const void *buf, size_t len,
                      const char *type, json_t **j)
{
    gc_response r = {0};
    gt_error err = {0};
    *j = NULL;
    if (gc_request(c, "POST", path, type, buf, len, NULL, &r, &err) != GT_OK)
        return 0;
    *j = json_loads(r.body ? r.body : "", 0, NULL);
    long st = r.status;
    gc_response_free(&r);
    return st;
}

static void *get_bytes(gc_client *c, const char *path, size_t *len, long *status)
{
    gc_response r = {0};
    gt_error err = {0};
    *len = 0;
    *status = 0;
    if (gc_request(c, "GET", path, NULL, NULL, 0, NULL, &r, &err) != GT_OK)
        return NULL;
    *status = r.status;
    void *b = malloc(r.len ? r.len : 1);
    memcpy(b, r.body, r.len);
    *len = r.len;
    gc_response_free(&r);
    return b;
}

static void *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    *len = 0;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* The same request to A's run and B's model: equal bytes. */
static void same_showers(gc_client *a, gc_client *b, long long run, const char *body,
                         const char *accept)
{
    gc_response ra = {0}, rb = {0};
    gt_error err = {0};
    char path[64];
    snprintf(path, sizeof path, "/v1/runs/%lld/samples", run);
    const char *h[] = {NULL, NULL};
    char hdr[96];
    snprintf(hdr, sizeof hdr, "Accept: %s", accept);
    h[0] = hdr;
    CHECK_EQ_INT(gc_request(a, "POST", path, "application/json", body, strlen(body), h, &ra,
                            &err), GT_OK);
    CHECK_EQ_INT(gc_request(b, "POST", "/v1/models/tiny/samples", "application/json", body,
                            strlen(body), h, &rb, &err), GT_OK);
    CHECK_MSG(ra.status == 200 && rb.status == 200, "%s %s: %ld / %ld: %s", accept, body,
              ra.status, rb.status, rb.body ? rb.body : "");
    if (strcmp(accept, "application/json") == 0) {
        /* the reply adds the model's name; the showers are the same */
        json_t *ja = json_loads(ra.body, 0, NULL), *jb = json_loads(rb.body, 0, NULL);
        CHECK(json_equal(json_object_get(ja, "showers"), json_object_get(jb, "showers")));
        CHECK(json_equal(json_object_get(ja, "energies"), json_object_get(jb, "energies")));
        CHECK_EQ_INT(json_integer_value(json_object_get(jb, "run_id")), run);
        CHECK(strcmp(json_string_value(json_object_get(jb, "model")), "tiny") == 0);
        json_decref(ja);
        json_decref(jb);
    } else if (strcmp(accept, "application/x-hdf5") == 0) {
        /* HDF5 object headers carry their write time: the files differ in
         * those bytes, the datasets must not */
        char fa[320], fb[320];
        snprintf(fa, sizeof fa, "%s/a.h5", dir);
        snprintf(fb, sizeof fb, "%s/b.h5", dir);
        FILE *f = fopen(fa, "wb");
        fwrite(ra.body, 1, ra.len, f);
        fclose(f);
        f = fopen(fb, "wb");
        fwrite(rb.body, 1, rb.len, f);
        fclose(f);
        geo_geometry g;
        CHECK_EQ_INT(model_geometry_load("dataset_1_photons", &g, &err), GT_OK);
        float *ea = NULL, *sa = NULL, *eb = NULL, *sb = NULL;
        int64_t na = 0, nb = 0;
        CHECK_EQ_INT(calo_h5_read_all(fa, &g, &ea, &sa, &na, &err), GT_OK);
        CHECK_EQ_INT(calo_h5_read_all(fb, &g, &eb, &sb, &nb, &err), GT_OK);
        CHECK(na == nb && na > 0 && memcmp(ea, eb, (size_t)na * sizeof(float)) == 0 &&
              memcmp(sa, sb, (size_t)na * (size_t)g.n_voxels * sizeof(float)) == 0);
        free(ea);
        free(sa);
        free(eb);
        free(sb);
        geo_free(&g);
    } else {
        CHECK_MSG(ra.len == rb.len && ra.len > 0 && memcmp(ra.body, rb.body, ra.len) == 0,
                  "%s %s: %zu and %zu bytes differ", accept, body, ra.len, rb.len);
    }
    gc_response_free(&ra);
    gc_response_free(&rb);
}

/* expects a refusal of buf over HTTP with code and field */
static void refused(gc_client *b, const void *buf, size_t len, long status, const char *code,
                    const char *field, const char *what)
{
    json_t *j = NULL;
    long st = post_file(b, "/v1/models?name=bad", buf, len, "application/octet-stream", &j);
    CHECK_MSG(st == status, "%s: %ld, want %ld", what, st, status);
    CHECK_MSG(svc_ecode(j) && strcmp(svc_ecode(j), code) == 0, "%s: code %s, want %s", what,
              svc_ecode(j) ? svc_ecode(j) : "(none)", code);
    if (field)
        CHECK_MSG(svc_efield(j) && strcmp(svc_efield(j), field) == 0, "%s: field %s, want %s", what,
                  svc_efield(j) ? svc_efield(j) : "null", field);
    json_decref(j);
}

int main(void)
{
    snprintf(dir, sizeof dir, "svc-models-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char dba[320], dbb[320], dbc[320], data_a[320], data_b[320], cli[320];
    snprintf(dba, sizeof dba, "%s/a.db", dir);
    snprintf(dbb, sizeof dbb, "%s/b.db", dir);
    snprintf(dbc, sizeof dbc, "%s/c.db", dir);
    snprintf(data_a, sizeof data_a, "%s/data-a", dir);
    snprintf(data_b, sizeof data_b, "%s/data-b", dir);
    snprintf(cli, sizeof cli, "%s/cli.giant", dir);
    if (svc_start(&A, dba, data_a, extra) != 0 || svc_start(&B, dbb, data_b, extra) != 0) {
        svc_dump(&A);
        svc_dump(&B);
        CHECK_MSG(0, "a server did not start");
        return check_finish();
    }
    gc_client *a = NULL, *b = NULL;
    gt_error err = {0};
    void *file = NULL;
    size_t len = 0;
    CHECK_EQ_INT(gc_open(&a, A.url, &err), GT_OK);
    CHECK_EQ_INT(gc_open(&b, B.url, &err), GT_OK);

    /* a tiny run on A */
    char *cfg = svc_tiny_config("exported", 20, 5, 5, NULL);
    json_t *j = NULL;
    CHECK_EQ_INT(svc_json(a, "POST", "/v1/runs", cfg, NULL, &j), 201);
    free(cfg);
    long long run = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    j = svc_wait_run(a, run, "succeeded", 120000);
    CHECK_MSG(j && strcmp(json_string_value(json_object_get(j, "status")), "succeeded") == 0,
              "the run did not succeed");
    json_decref(j);
    if (check_failures_)
        goto out;

    /* export: over HTTP and with the command, the same bytes */
    char path[96];
    snprintf(path, sizeof path, "/v1/runs/%lld/model", run);
    size_t cli_len = 0;
    long st = 0;
    file = get_bytes(a, path, &len, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(len > 16 && memcmp(file, "GIANTPKG", 8) == 0);
    CHECK_EQ_INT(svc_sh("%s export %lld -o %s --db %s > /dev/null", svc_binary(), run, cli, dba),
                 0);
    void *cli_file = read_all(cli, &cli_len);
    CHECK(cli_file && cli_len == len && memcmp(cli_file, file, len) == 0);
    free(cli_file);
    void *none = get_bytes(a, "/v1/runs/999/model", &cli_len, &st);
    CHECK_EQ_INT(st, 404);
    free(none);

    /* import into B: 201, then the same model (200) whatever name is asked */
    CHECK_EQ_INT(post_file(b, "/v1/models?name=tiny", file, len, "application/octet-stream", &j),
                 201);
    long long mid = json_integer_value(json_object_get(j, "id"));
    const char *content = json_string_value(json_object_get(j, "content_sha256"));
    char content_sha[65] = "";
    snprintf(content_sha, sizeof content_sha, "%s", content ? content : "");
    CHECK(strcmp(json_string_value(json_object_get(j, "name")), "tiny") == 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "source_run_id")), run);
    CHECK_EQ_INT(json_integer_value(json_object_get(
                     json_object_get(json_object_get(j, "manifest"), "run"), "id")), run);
    json_decref(j);
    CHECK_EQ_INT(post_file(b, "/v1/models?name=again", file, len, "application/octet-stream", &j), 200);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "id")), mid);
    CHECK(strcmp(json_string_value(json_object_get(j, "name")), "tiny") == 0);
    json_decref(j);
    CHECK_EQ_INT(svc_json(b, "GET", "/v1/models", NULL, NULL, &j), 200);
    CHECK_EQ_INT(json_array_size(json_object_get(j, "items")), 1);
    json_decref(j);
    CHECK_EQ_INT(svc_json(b, "GET", "/v1/models/tiny", NULL, NULL, &j), 200);
    CHECK(strcmp(json_string_value(json_object_get(j, "content_sha256")), content_sha) == 0);
    json_decref(j);
    CHECK_EQ_INT(svc_json(b, "GET", "/v1/models/nope", NULL, NULL, &j), 404);
    json_decref(j);
    size_t back_len = 0;
    void *back = get_bytes(b, "/v1/models/tiny/file", &back_len, &st);
    CHECK(st == 200 && back_len == len && memcmp(back, file, len) == 0);
    free(back);

    /* served: the same bytes as the run, request for request */
    for (int i = 0; i < REPLICA_FIXTURE_REQUESTS; i++)
        same_showers(a, b, run, replica_fixture_requests[i].body,
                     replica_fixture_requests[i].accept);
    CHECK_EQ_INT(svc_json(b, "POST", "/v1/models/tiny/samples", "{\"count\": 0}", NULL, &j),
                 422);
    json_decref(j);
    CHECK_EQ_INT(svc_json(b, "POST", "/v1/models/nope/samples", "{\"count\": 1}", NULL, &j), 404);
    json_decref(j);

    /* refusals, each with its code and the part */
    {
        uint8_t *bad = malloc(len);
        memcpy(bad, file, len);
        bad[len - 100] ^= 0x04;              /* inside shower.ckpt, the last part */
        refused(b, bad, len, 422, "model_corrupt", "shower.ckpt", "a byte of shower.ckpt");
        refused(b, file, len / 2, 422, "model_truncated", NULL, "half the file");
        memcpy(bad, file, len);
        gt_le_put_u32(bad + 8, 7);
        refused(b, bad, len, 422, "model_version_unsupported", NULL, "format 7");
        free(bad);
        /* the pions geometry under a config that names the photons one */
        model_pack p;
        model_pack_fault fault;
        CHECK_EQ_INT(model_pack_read(file, len, &p, &fault, NULL, &err), GT_OK);
        char *config = strndup(p.config_json, p.config_len);
        const void *pions;
        size_t pl;
        CHECK_EQ_INT(model_geometry_builtin_xml("dataset_1_pions", &pions, &pl, &err), GT_OK);
        model_pack_src src = {.run_id = run, .giant_version = "test", .config_json = config,
                              .geometry_xml = pions, .geometry_len = pl,
                              .ckpt = {p.ckpt[0], p.ckpt[1]},
                              .ckpt_len = {p.ckpt_len[0], p.ckpt_len[1]}};
        void *mis = NULL;
        size_t ml = 0;
        CHECK_EQ_INT(model_pack_write(&src, &mis, &ml, &err), GT_OK);
        refused(b, mis, ml, 422, "geometry_mismatch", "geometry.xml", "the pions geometry");
        free(mis);
        free(config);
        model_pack_free(&p);
        CHECK_EQ_INT(post_file(b, "/v1/models?name=tiny", "GIANTPKG", 8, "application/octet-stream", &j), 422);
        json_decref(j);
        /* a bad name is refused before the file is looked at */
        CHECK_EQ_INT(post_file(b, "/v1/models?name=1234", file, len, "application/octet-stream",
                               &j), 422);
        CHECK(svc_ecode(j) && strcmp(svc_ecode(j), "validation_failed") == 0);
        CHECK(svc_efield(j) && strcmp(svc_efield(j), "name") == 0);
        json_decref(j);
    }
    /* a JSON body type for a file: 415 */
    {
        json_t *k = NULL;
        CHECK_EQ_INT(post_file(b, "/v1/models", file, len, "application/json", &k), 415);
        json_decref(k);
    }

    /* offline: giant import into a third database, then the same file again */
    CHECK_EQ_INT(svc_sh("%s import %s --name offline --db %s > %s/import.out", svc_binary(), cli,
                        dbc, dir), 0);
    CHECK_EQ_INT(svc_sh("grep -q \"imported model 'offline' (content sha256 %s)\" %s/import.out",
                        content_sha, dir), 0);
    CHECK_EQ_INT(svc_sh("%s import %s --db %s | grep -q \"already had model 'offline'\"",
                        svc_binary(), cli, dbc), 0);
    CHECK_EQ_INT(svc_sh("head -c 1000 %s > %s/cut.giant && %s import %s/cut.giant --db %s 2> "
                        "%s/import.err; test $? -eq 1 && grep -q model_truncated %s/import.err",
                        cli, dir, svc_binary(), dir, dbc, dir, dir), 0);

out:
    gc_close(a);
    gc_close(b);
    free(file);
    CHECK_EQ_INT(svc_stop(&A, SIGTERM, 30000), 0);
    CHECK_EQ_INT(svc_stop(&B, SIGTERM, 30000), 0);
    svc_check_done(&A);
    svc_check_done(&B);
    svc_check_cleanup(dir);
    return check_finish();
}
