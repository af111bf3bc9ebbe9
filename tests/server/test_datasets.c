/* Registering HDF5 files on the real service (issue: registration said
 * "ready" for files that cannot train).  POST /v1/datasets reads only
 * metadata and answers 202 pending, or 422 for what metadata already shows
 * (no showers, 10^10 rows declared in a few KB, values in external files),
 * within a second whatever the file declares; the datasets worker then
 * reads every row and the dataset becomes ready with its counts, or failed
 * with the row (and voxel) at fault: NaN and negative voxels, an infinite
 * energy, a damaged gzip chunk.  A run naming a failed or pending dataset
 * is refused with the reason; a dataset a crash left pending is checked
 * again at the next start.  The fixtures are written with the HDF5 C API
 * (tests/data/h5_fixture.h). */
#include "check.h"

#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <sqlite3.h>

#include "gt_clock.h"
#include "data/h5_fixture.h"
#include "giant_client.h"
#include "svc_check.h"
#include "svc_harness.h"

#define NV 368   /* dataset_1_photons */

static svc S;
static char dir[256], db[320], data[320], root[PATH_MAX];

/* printf's %s of a string that may be missing */
static const char *nz(const char *s) { return s ? s : "(none)"; }
static const char *emember(json_t *j, const char *k)
{
    return json_string_value(json_object_get(json_object_get(j, "error"), k));
}

/* Writes data/<name> (a dataset_1_photons shape unless x says otherwise). */
static void fixture(const char *name, h5fx x)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", data, name);
    CHECK_MSG(h5fx_write(path, &x) == 0, "cannot write %s", name);
}

static h5fx shape(int64_t rows, int64_t chunk_rows, int gzip)
{
    h5fx x = {.rows = rows, .voxels = NV, .chunk_rows = chunk_rows, .gzip = gzip,
              .poke_row = -1};
    return x;
}

/* POST /v1/datasets for data/<file>; the status, *j the reply, *secs the
 * time it took. */
static long post(gc_client *c, const char *name, const char *file, json_t **j, double *secs)
{
    char body[512];
    snprintf(body, sizeof body, "{\"name\": \"%s\", \"path\": \"%s\", \"geometry\":"
             " \"dataset_1_photons\"}", name, file);
    double t0 = gt_clock_s();
    long st = svc_json(c, "POST", "/v1/datasets", body, NULL, j);
    *secs = gt_clock_s() - t0;
    return st;
}

/* Registers a file that metadata cannot refuse: 202, pending; its id. */
static long long register_ok(gc_client *c, const char *name, const char *file)
{
    json_t *j;
    double secs;
    long st = post(c, name, file, &j, &secs);
    CHECK_MSG(st == 202, "%s: status %ld", file, st);
    CHECK_MSG(svc_str(j, "status") && strcmp(svc_str(j, "status"), "pending") == 0, "%s: status %s",
              file, nz(svc_str(j, "status")));
    CHECK_MSG(secs < 1.0, "%s: the reply took %.3f s", file, secs);
    long long id = svc_num(j, "id");
    json_decref(j);
    return id;
}

/* Registers a file metadata refuses: 422 naming path, with needle, fast. */
static void register_refused(gc_client *c, const char *name, const char *file,
                             const char *needle)
{
    json_t *j;
    double secs;
    long st = post(c, name, file, &j, &secs);
    const char *msg = emember(j, "message");
    CHECK_MSG(st == 422, "%s: status %ld", file, st);
    CHECK_MSG(emember(j, "code") && strcmp(emember(j, "code"), "validation_failed") == 0,
              "%s: code %s", file, nz(emember(j, "code")));
    CHECK_MSG(emember(j, "field") && strcmp(emember(j, "field"), "path") == 0, "%s: field %s",
              file, nz(emember(j, "field")));
    CHECK_MSG(msg && strstr(msg, needle), "%s: \"%s\" lacks \"%s\"", file, nz(msg), needle);
    CHECK_MSG(msg && !strstr(msg, root), "%s: the reply names the data directory: %s", file,
              nz(msg));
    CHECK_MSG(secs < 1.0, "%s: the reply took %.3f s", file, secs);
    printf("%-14s 422 in %.3f s: %s\n", file, secs, msg ? msg : "");
    json_decref(j);
}

/* GET /v1/datasets/{id} until it is no longer pending (up to 120 s). */
static json_t *wait_dataset(gc_client *c, long long id)
{
    return svc_wait_dataset(c, id, 120000);
}

static void expect_ready(gc_client *c, long long id, long long rows)
{
    json_t *j = wait_dataset(c, id);
    CHECK_MSG(svc_str(j, "status") && strcmp(svc_str(j, "status"), "ready") == 0,
              "dataset %lld: %s (%s)", id, nz(svc_str(j, "status")), nz(svc_str(j, "error")));
    CHECK_EQ_INT(svc_num(j, "n_showers"), rows);
    CHECK_EQ_INT(svc_num(j, "n_voxels"), NV);
    CHECK_CLOSE(json_number_value(json_object_get(j, "progress")), 1.0, 0, 0);
    json_t *range = json_object_get(j, "energy_range_mev");
    CHECK_CLOSE(json_number_value(json_object_get(range, "min")), h5fx_energy(0), 0, 0);
    CHECK_CLOSE(json_number_value(json_object_get(range, "max")), h5fx_energy(rows - 1), 0, 0);
    CHECK(json_is_null(json_object_get(j, "error")));
    json_decref(j);
}

static void expect_failed(gc_client *c, long long id, const char *file, const char *needle)
{
    json_t *j = wait_dataset(c, id);
    const char *e = svc_str(j, "error");
    CHECK_MSG(svc_str(j, "status") && strcmp(svc_str(j, "status"), "failed") == 0, "%s: status %s",
              file, nz(svc_str(j, "status")));
    CHECK_MSG(e && strstr(e, needle), "%s: error \"%s\" lacks \"%s\"", file, nz(e), needle);
    CHECK_MSG(e && strstr(e, file), "%s: error \"%s\" does not name the file", file, nz(e));
    CHECK_MSG(e && !strstr(e, root), "%s: the error names the data directory: %s", file, nz(e));
    printf("%-14s failed: %s\n", file, e ? e : "");
    json_decref(j);
}

/* POST /v1/runs naming dataset id: 422 validation_failed on dataset_id,
 * the message with needle. */
static void expect_run_refused(gc_client *c, long long id, const char *needle)
{
    char members[64];
    snprintf(members, sizeof members, "\"dataset_id\": %lld", id);
    char *cfg = svc_tiny_config("on-bad-data", 4, 2, 2, members);
    json_t *j;
    long st = svc_json(c, "POST", "/v1/runs", cfg, NULL, &j);
    free(cfg);
    const char *msg = emember(j, "message");
    CHECK_MSG(st == 422, "run on dataset %lld: status %ld", id, st);
    CHECK_MSG(emember(j, "code") && strcmp(emember(j, "code"), "validation_failed") == 0,
              "code %s", nz(emember(j, "code")));
    CHECK_MSG(emember(j, "field") && strcmp(emember(j, "field"), "dataset_id") == 0,
              "field %s", nz(emember(j, "field")));
    CHECK_MSG(msg && strstr(msg, needle), "run on dataset %lld: \"%s\" lacks \"%s\"", id,
              nz(msg), needle);
    json_decref(j);
}

static void write_fixtures(void)
{
    fixture("good.h5", shape(20000, 50, 4));
    fixture("plain.h5", shape(300, 0, 0));
    h5fx x = shape(500, 50, 4);
    x.poke_row = 321;
    x.poke_voxel = 17;
    x.poke_value = NAN;
    fixture("nan.h5", x);
    x.poke_row = 5;
    x.poke_voxel = 200;
    x.poke_value = -1.5f;
    fixture("negative.h5", x);
    x.poke_row = 77;
    x.poke_voxel = -1;
    x.poke_value = INFINITY;
    fixture("inf_energy.h5", x);
    fixture("zero.h5", shape(0, 0, 0));
    h5fx huge = shape(10000000000LL, 0, 0);
    huge.empty = 1;
    fixture("huge.h5", huge);
    huge.chunk_rows = 100;
    huge.gzip = 4;
    fixture("huge_gz.h5", huge);
    h5fx ext = shape(10, 0, 0);
    ext.external = "elsewhere.raw";   /* refused before anything reads it */
    ext.empty = 1;
    fixture("external.h5", ext);
    fixture("damaged.h5", shape(600, 40, 6));
    char path[400];
    snprintf(path, sizeof path, "%s/damaged.h5", data);
    CHECK_EQ_INT(h5fx_damage_chunk(path, 7), 0);   /* rows 280..319 */
    fixture("later.h5", shape(400, 50, 4));
}

/* The server under test: started on db and data, the client open. */
static gc_client *start(void)
{
    if (svc_check_start(&S, "server did not start", db, data, NULL) != 0)
        return NULL;
    return svc_check_client(&S);
}

/* A restart finds a dataset a crash left pending and checks it again. */
static void restart_checks_again(long long id)
{
    sqlite3 *h = NULL;
    CHECK(sqlite3_open(db, &h) == SQLITE_OK);
    char sql[200];
    snprintf(sql, sizeof sql, "UPDATE datasets SET status = 'pending', progress = 0.25,"
             " e_min_mev = NULL, e_max_mev = NULL WHERE id = %lld", id);
    CHECK(sqlite3_exec(h, sql, NULL, NULL, NULL) == SQLITE_OK);
    CHECK_EQ_INT(sqlite3_changes(h), 1);
    sqlite3_close(h);
    gc_client *c = start();
    if (!c)
        return;
    expect_ready(c, id, 20000);
    CHECK(svc_log_has(&S, "status=checking"));
    gc_close(c);
    CHECK_EQ_INT(svc_stop(&S, SIGTERM, 30000), 0);
}

int main(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    snprintf(dir, sizeof dir, "svc-ds-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(db, sizeof db, "%s/test.db", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    CHECK(mkdir(data, 0755) == 0);
    CHECK(realpath(data, root) != NULL);
    write_fixtures();
    gc_client *c = start();
    if (!c)
        return check_finish();

    /* queued for the worker; what metadata shows is refused at once, while
     * the worker reads the first file */
    long long good = register_ok(c, "good", "good.h5");
    register_refused(c, "huge", "huge.h5", "declares 10000000000 rows");
    register_refused(c, "huge-gz", "huge_gz.h5", "more than a file of");
    register_refused(c, "zero", "zero.h5", "zero.h5 holds no showers");
    register_refused(c, "external", "external.h5", "external files");
    long long plain = register_ok(c, "plain", "plain.h5");
    long long nan = register_ok(c, "nan", "nan.h5");
    long long neg = register_ok(c, "negative", "negative.h5");
    long long inf = register_ok(c, "inf-energy", "inf_energy.h5");
    long long dmg = register_ok(c, "damaged", "damaged.h5");

    expect_ready(c, good, 20000);
    expect_ready(c, plain, 300);
    expect_failed(c, nan, "nan.h5", "row 321 voxel 17: energy is NaN");
    expect_failed(c, neg, "negative.h5", "row 5 voxel 200: negative energy -1.5");
    expect_failed(c, inf, "inf_energy.h5", "row 77: incident energy is infinite");
    expect_failed(c, dmg, "damaged.h5", "damaged.h5: row 280: cannot be read, the file is"
                                        " corrupt or truncated");

    /* a run on a failed dataset: refused with the row at fault */
    expect_run_refused(c, nan, "row 321 voxel 17");
    expect_run_refused(c, dmg, "failed: damaged.h5: row 280");

    /* a run on a dataset still pending: the worker is busy making a
     * synthetic dataset queued first (seconds), so the file waits */
    json_t *j;
    CHECK_EQ_INT(svc_json(c, "POST", "/v1/datasets", "{\"name\": \"busy\", \"synthetic\":"
                          " {\"geometry\": \"dataset_2\", \"n\": 5000}}", NULL, &j), 202);
    long long busy = svc_num(j, "id");
    json_decref(j);
    long long later = register_ok(c, "later", "later.h5");
    expect_run_refused(c, later, "its rows are being checked");
    expect_run_refused(c, busy, "it is being made");
    expect_ready(c, later, 400);
    json_decref(wait_dataset(c, busy));

    gc_close(c);
    svc_check_stop(&S);
    restart_checks_again(good);
    svc_check_done(&S);
    svc_check_cleanup(dir);
    return check_finish();
}
