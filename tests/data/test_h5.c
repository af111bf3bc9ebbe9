/* calo_h5: our files read back by us and by h5py, h5py's float64 files read
 * by us, and every kind of bad file. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

#include "calo_h5.h"
#include "check.h"
#include "data_test_util.h"
#include "geo.h"

#define NV 6480

static float value_at(int64_t i, int v)
{
    /* sparse, exactly representable pattern */
    return (v % 7 == (int)(i % 7)) ? (float)(i * 0.5 + v * 0.25) : 0.0f;
}

static void write_ours(const char *path, int64_t n)
{
    calo_h5_writer w;
    gt_error err = {0};
    int rc = calo_h5_create(&w, path, NV, 2, 1, &err); /* stage = 32 rows */
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    if (rc)
        return;
    float *e = malloc(n * sizeof *e), *s = malloc(n * NV * sizeof *s);
    for (int64_t i = 0; i < n; i++) {
        e[i] = 1000.0f * (float)(i + 1);
        for (int v = 0; v < NV; v++)
            s[i * NV + v] = value_at(i, v);
    }
    /* two appends of uneven size exercise the extent logic */
    int64_t half = n / 3;
    rc = calo_h5_append(&w, e, s, half, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    rc = calo_h5_append(&w, e + half, s + half * NV, n - half, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    CHECK_EQ_INT(w.n_rows, n);
    /* a bad row is refused and leaves the file as it was */
    s[0] = NAN;
    rc = calo_h5_append(&w, e, s, 1, &err);
    CHECK_EQ_INT(rc, GT_EINVAL);
    CHECK(strstr(err.message, "NaN") != NULL);
    CHECK_EQ_INT(w.n_rows, n);
    /* the writer counts its deflating (giant sample prints it) */
    CHECK_MSG(n < 32 || w.compress_s > 0, "%lld rows deflated in %g s", (long long)n, w.compress_s);
    rc = calo_h5_finish(&w, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    free(e);
    free(s);
}

static void read_back_ours(const char *path, const geo_geometry *g, int64_t n)
{
    calo_h5_reader r;
    gt_error err = {0};
    int rc = calo_h5_open(&r, path, g, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    if (rc)
        return;
    CHECK_EQ_INT(r.n_rows, n);
    CHECK_EQ_INT(r.n_voxels, NV);
    float e[16], *s = malloc(16 * NV * sizeof *s);
    int64_t row0, got, seen = 0;
    int bad = 0;
    while (calo_h5_read_next(&r, 16, e, s, &row0, &got, &err) == GT_OK && got > 0) {
        CHECK_EQ_INT(row0, seen);
        for (int64_t i = 0; i < got; i++) {
            if (e[i] != 1000.0f * (float)(row0 + i + 1))
                bad++;
            for (int v = 0; v < NV; v++)
                if (s[i * NV + v] != value_at(row0 + i, v))
                    bad++;
        }
        seen += got;
    }
    CHECK_EQ_INT(seen, n);
    CHECK_EQ_INT(bad, 0);
    /* out-of-range rows */
    CHECK_EQ_INT(calo_h5_read_rows(&r, n - 1, 2, e, s, &err), GT_EINVAL);
    CHECK_EQ_INT(calo_h5_read_rows(&r, -1, 1, e, s, &err), GT_EINVAL);
    calo_h5_close(&r);
    free(s);
}

/* Runs a python snippet; its stdout goes to out (first line). */
static int run_py(const char *code, char *out, size_t cap)
{
    FILE *f = fopen("py_snippet.py", "w");
    if (!f)
        return -1;
    fputs(code, f);
    fclose(f);
    int rc = dt_system("/usr/bin/python3 py_snippet.py > py_out.txt 2> py_err.txt");
    out[0] = '\0';
    FILE *o = fopen("py_out.txt", "r");
    if (o) {
        if (!fgets(out, (int)cap, o))
            out[0] = '\0';
        fclose(o);
    }
    return rc;
}

static void h5py_reads_ours(const char *path, int64_t n)
{
    double expect = 0;
    for (int64_t i = 0; i < n; i++)
        for (int v = 0; v < NV; v++)
            expect += value_at(i, v);
    char code[2048], out[512];
    snprintf(code, sizeof code,
             "import h5py, numpy as np\n"
             "f = h5py.File('%s', 'r')\n"
             "e, s = f['incident_energies'], f['showers']\n"
             "print(e.shape[0], e.shape[1], s.shape[0], s.shape[1], s.dtype, s.compression,\n"
             "      '%%.6f' %% float(np.sum(s[:].astype(np.float64))),\n"
             "      '%%.1f' %% float(np.sum(e[:])))\n", path);
    int rc = run_py(code, out, sizeof out);
    CHECK_MSG(rc == 0, "python failed (see py_err.txt)");
    long long a, b, c, d;
    char dtype[32], comp[32];
    double sum, esum;
    int k = sscanf(out, "%lld %lld %lld %lld %31s %31s %lf %lf", &a, &b, &c, &d, dtype, comp,
                   &sum, &esum);
    CHECK_MSG(k == 8, "unexpected h5py output: %s", out);
    if (k != 8)
        return;
    CHECK_EQ_INT(a, n);
    CHECK_EQ_INT(b, 1);
    CHECK_EQ_INT(c, n);
    CHECK_EQ_INT(d, NV);
    CHECK(!strcmp(dtype, "float32"));
    CHECK(!strcmp(comp, "gzip"));
    CHECK_CLOSE(sum, expect, 1e-3, 1e-9);
    CHECK_CLOSE(esum, 1000.0 * n * (n + 1) / 2, 0.5, 0);
}

static void ours_reads_h5py(const geo_geometry *g)
{
    char out[512];
    /* float64 file written the way the CaloChallenge files are */
    int rc = run_py(
        "import h5py, numpy as np\n"
        "n, v = 37, 6480\n"
        "i = np.arange(n, dtype=np.float64)[:, None]\n"
        "j = np.arange(v, dtype=np.float64)[None, :]\n"
        "s = np.where((j % 5) == (i % 5), i * 0.125 + j * 1e-3, 0.0)\n"
        "with h5py.File('py64.h5', 'w') as f:\n"
        "    f.create_dataset('incident_energies', data=(i + 1) * 1000.0, compression='gzip')\n"
        "    f.create_dataset('showers', data=s, compression='gzip')\n"
        "print('%.6f' % s.sum())\n",
        out, sizeof out);
    CHECK_MSG(rc == 0, "python failed (see py_err.txt)");
    calo_h5_reader r;
    gt_error err = {0};
    rc = calo_h5_open(&r, "py64.h5", g, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    if (rc)
        return;
    CHECK_EQ_INT(r.n_rows, 37);
    float *e = malloc(37 * sizeof *e), *s = malloc(37 * NV * sizeof *s);
    rc = calo_h5_read_rows(&r, 0, 37, e, s, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    int bad = 0;
    double sum = 0;
    for (int i = 0; i < 37; i++) {
        if (e[i] != 1000.0f * (i + 1))
            bad++;
        for (int v = 0; v < NV; v++) {
            double want = (v % 5 == i % 5) ? i * 0.125 + v * 1e-3 : 0.0;
            if (fabs(s[i * NV + v] - want) > 1e-6 * (1 + want))
                bad++;
            sum += s[i * NV + v];
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_CLOSE(sum, atof(out), 1e-2, 1e-6);
    /* a middle slice alone, energies only */
    rc = calo_h5_read_rows(&r, 20, 3, e, NULL, &err);
    CHECK(rc == GT_OK && e[0] == 21000.0f && e[2] == 23000.0f);
    calo_h5_close(&r);
    free(e);
    free(s);
}

static void expect_open_fails(const char *path, const geo_geometry *g, int code,
                              const char *needle)
{
    calo_h5_reader r;
    gt_error err = {0};
    int rc = calo_h5_open(&r, path, g, &err);
    CHECK_MSG(rc == code, "%s: expected %d got %d (%s)", path, code, rc, err.message);
    CHECK_MSG(strstr(err.message, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", path,
              err.message, needle);
    if (rc == GT_OK)
        calo_h5_close(&r);
}

static void expect_read_fails(const char *path, const geo_geometry *g, const char *needle)
{
    calo_h5_reader r;
    gt_error err = {0};
    int rc = calo_h5_open(&r, path, g, &err);
    CHECK_MSG(rc == GT_OK, "%s: %s", path, err.message);
    if (rc)
        return;
    float *e = malloc(r.n_rows * sizeof *e), *s = malloc(r.n_rows * r.n_voxels * sizeof *s);
    rc = calo_h5_read_rows(&r, 0, r.n_rows, e, s, &err);
    CHECK_MSG(rc == GT_EINVAL, "%s: expected a data error, got %d", path, rc);
    CHECK_MSG(strstr(err.message, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", path,
              err.message, needle);
    calo_h5_close(&r);
    free(e);
    free(s);
}

static void bad_files_h5py(const geo_geometry *g)
{
    char out[64];
    int rc = run_py(
        "import h5py, numpy as np\n"
        "def mk(name, e, s):\n"
        "    with h5py.File(name, 'w') as f:\n"
        "        if e is not None: f['incident_energies'] = e\n"
        "        if s is not None: f['showers'] = s\n"
        "E = np.full((4, 1), 1000.0); S = np.zeros((4, 6480))\n"
        "mk('no_showers.h5', E, None)\n"
        "mk('no_energies.h5', None, S)\n"
        "mk('wrong_width.h5', E, np.zeros((4, 6479)))\n"
        "mk('rank1.h5', E[:, 0], S)\n"
        "mk('rows_differ.h5', E[:3], S)\n"
        "mk('ints.h5', E, np.zeros((4, 6480), dtype=np.int32))\n"
        "s = S.copy(); s[2, 17] = np.nan; mk('nan.h5', E, s)\n"
        "s = S.copy(); s[3, 5] = np.inf; mk('inf.h5', E, s)\n"
        "s = S.copy(); s[1, 9] = -2.0; mk('negative.h5', E, s)\n"
        "e = E.copy(); e[2, 0] = -5.0; mk('neg_energy.h5', e, S)\n"
        "e = E.copy(); e[0, 0] = np.nan; mk('nan_energy.h5', e, S)\n"
        "print('ok')\n",
        out, sizeof out);
    CHECK_MSG(rc == 0, "python failed (see py_err.txt)");
    expect_open_fails("no_showers.h5", g, GT_EFORMAT, "showers is missing");
    expect_open_fails("no_energies.h5", g, GT_EFORMAT, "incident_energies is missing");
    expect_open_fails("wrong_width.h5", g, GT_EFORMAT, "(4, 6479), expected (N, 6480)");
    expect_open_fails("rank1.h5", g, GT_EFORMAT, "rank 1");
    expect_open_fails("rows_differ.h5", g, GT_EFORMAT, "3 incident energies but 4 showers");
    expect_open_fails("ints.h5", g, GT_EFORMAT, "not floating point");
    expect_read_fails("nan.h5", g, "row 2 voxel 17: energy is NaN");
    expect_read_fails("inf.h5", g, "row 3 voxel 5: energy is infinite");
    expect_read_fails("negative.h5", g, "row 1 voxel 9: negative energy -2");
    expect_read_fails("neg_energy.h5", g, "row 2: incident energy -5 is not positive");
    expect_read_fails("nan_energy.h5", g, "row 0: incident energy is NaN");
}

static void bad_files_c(const char *good, const geo_geometry *g)
{
    expect_open_fails("does_not_exist.h5", g, GT_EIO, "does_not_exist.h5");
    FILE *f = fopen("text.h5", "w");
    fputs("this is not an HDF5 file\n", f);
    fclose(f);
    expect_open_fails("text.h5", g, GT_EFORMAT, "not an HDF5 file");
    /* truncated: the first half of a good file */
    FILE *in = fopen(good, "rb");
    FILE *out = fopen("truncated.h5", "wb");
    CHECK(in && out);
    if (in && out) {
        fseek(in, 0, SEEK_END);
        long n = ftell(in);
        fseek(in, 0, SEEK_SET);
        char *buf = malloc(n);
        CHECK(fread(buf, 1, n, in) == (size_t)n);
        fwrite(buf, 1, n / 2, out);
        free(buf);
    }
    if (in)
        fclose(in);
    if (out)
        fclose(out);
    calo_h5_reader r;
    gt_error err = {0};
    int rc = calo_h5_open(&r, "truncated.h5", g, &err);
    if (rc == GT_OK) {
        /* HDF5 may open a truncated file whose metadata sits up front; the
         * read must then fail cleanly */
        float *s = malloc(r.n_rows * NV * sizeof *s), *e = malloc(r.n_rows * sizeof *e);
        rc = calo_h5_read_rows(&r, 0, r.n_rows, e, s, &err);
        free(s);
        free(e);
        calo_h5_close(&r);
    }
    CHECK_MSG(rc != GT_OK, "truncated file read without error");
    CHECK_MSG(strstr(err.message, "truncated") != NULL, "message: %s", err.message);
    /* cut at 23 places: every cut is a clean error, never a short read */
    in = fopen(good, "rb");
    if (in) {
        fseek(in, 0, SEEK_END);
        long size = ftell(in);
        fseek(in, 0, SEEK_SET);
        char *all = malloc(size);
        CHECK(fread(all, 1, size, in) == (size_t)size);
        fclose(in);
        int clean = 0;
        for (int k = 1; k < 24; k++) {
            long cut = size * k / 24;
            FILE *o = fopen("cut.h5", "wb");
            fwrite(all, 1, cut, o);
            fclose(o);
            calo_h5_reader rr;
            gt_error e2 = {0};
            int r2 = calo_h5_open(&rr, "cut.h5", g, &e2);
            if (r2 == GT_OK) {
                float *s = malloc(rr.n_rows * NV * sizeof *s), *e = malloc(rr.n_rows * 4);
                r2 = calo_h5_read_rows(&rr, 0, rr.n_rows, e, s, &e2);
                free(s);
                free(e);
                calo_h5_close(&rr);
            }
            if (r2 != GT_OK && e2.message[0])
                clean++;
        }
        CHECK_EQ_INT(clean, 23);
        free(all);
    }
    /* geometry mismatch: a dataset-1 geometry against a 6480-voxel file */
    geo_geometry g1;
    gt_error e1 = {0};
    CHECK(geo_load_file(&g1, dt_geometry_path("binning_dataset_1_photons.xml"), &e1) == GT_OK);
    expect_open_fails(good, &g1, GT_EFORMAT, "expected (N, 368)");
    geo_free(&g1);
    /* writer argument checks */
    calo_h5_writer w;
    CHECK_EQ_INT(calo_h5_create(&w, "x.h5", 0, 0, 1, &err), GT_EINVAL);
    CHECK_EQ_INT(calo_h5_create(&w, "x.h5", 10, 0, 12, &err), GT_EINVAL);
    CHECK_EQ_INT(calo_h5_create(&w, "no_such_dir/x.h5", 10, 0, 1, &err), GT_EIO);
    CHECK(strstr(err.message, "no_such_dir/x.h5") != NULL);
}

/* An in-memory file: its bytes, written to disk, are a normal file. */
static void memory_file(const geo_geometry *g)
{
    calo_h5_writer w;
    gt_error err = {0};
    int rc = calo_h5_create_memory(&w, NV, 0, 1, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    if (rc)
        return;
    const int n = 50;
    float *e = malloc(n * sizeof *e), *s = malloc((size_t)n * NV * sizeof *s);
    for (int i = 0; i < n; i++) {
        e[i] = 500.0f + i;
        for (int v = 0; v < NV; v++)
            s[(size_t)i * NV + v] = value_at(i, v);
    }
    CHECK_EQ_INT(calo_h5_append(&w, e, s, n, &err), GT_OK);
    void *image = NULL;
    size_t len = 0;
    rc = calo_h5_finish_memory(&w, &image, &len, &err);
    CHECK_MSG(rc == GT_OK && image && len > 1000, "%s", err.message);
    FILE *f = fopen("memory.h5", "wb");
    CHECK(f && fwrite(image, 1, len, f) == len);
    if (f)
        fclose(f);
    free(image);
    float *e2, *s2;
    int64_t n2;
    rc = calo_h5_read_all("memory.h5", g, &e2, &s2, &n2, &err);
    CHECK_MSG(rc == GT_OK, "%s", err.message);
    if (rc == GT_OK) {
        CHECK_EQ_INT(n2, n);
        CHECK(!memcmp(e, e2, n * sizeof *e));
        CHECK(!memcmp(s, s2, (size_t)n * NV * sizeof *s));
        free(e2);
        free(s2);
    }
    CHECK_EQ_INT(calo_h5_finish_memory(&w, &image, &len, &err), GT_EINVAL);
    free(e);
    free(s);
}

typedef struct thread_job {
    int id;
    const geo_geometry *g;
    int failures;
} thread_job;

/* Writes and reads its own file a few times. */
/* The same rows make the same file bytes whenever they are written: HDF5's
 * modification times are off.  The two writes straddle a change of the
 * clock's second, the times' resolution; on disk and in memory alike. */
static void same_bytes_later(void)
{
    const int n = 20;
    float e[20], *s = malloc((size_t)n * NV * sizeof *s);
    for (int i = 0; i < n; i++) {
        e[i] = 1000.0f + (float)i;
        for (int v = 0; v < NV; v++)
            s[(size_t)i * NV + v] = value_at(i, v);
    }
    void *img[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    unsigned char *disk[2] = {NULL, NULL};
    long dlen[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        if (k == 1) { /* wait for the next second */
            time_t t0 = time(NULL);
            while (time(NULL) == t0) {
                struct timespec ts = {0, 20 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        calo_h5_writer w;
        gt_error err = {0};
        char path[32];
        snprintf(path, sizeof path, "again%d.h5", k);
        CHECK_EQ_INT(calo_h5_create(&w, path, NV, 4, 1, &err), GT_OK);
        CHECK_EQ_INT(calo_h5_append(&w, e, s, n, &err), GT_OK);
        CHECK_EQ_INT(calo_h5_finish(&w, &err), GT_OK);
        CHECK_EQ_INT(calo_h5_create_memory(&w, NV, 4, 1, &err), GT_OK);
        CHECK_EQ_INT(calo_h5_append(&w, e, s, n, &err), GT_OK);
        CHECK_EQ_INT(calo_h5_finish_memory(&w, &img[k], &len[k], &err), GT_OK);
        FILE *f = fopen(path, "rb");
        if (f && fseek(f, 0, SEEK_END) == 0 && (dlen[k] = ftell(f)) > 0) {
            rewind(f);
            disk[k] = malloc((size_t)dlen[k]);
            if (fread(disk[k], 1, (size_t)dlen[k], f) != (size_t)dlen[k])
                dlen[k] = 0;
        }
        if (f)
            fclose(f);
    }
    CHECK_MSG(dlen[0] > 0 && dlen[0] == dlen[1] && memcmp(disk[0], disk[1], (size_t)dlen[0]) == 0,
              "the same rows written a second later: another file (%ld, %ld bytes)", dlen[0],
              dlen[1]);
    CHECK_MSG(len[0] > 0 && len[0] == len[1] && img[0] && img[1] &&
                  memcmp(img[0], img[1], len[0]) == 0,
              "the same rows written to memory a second later: another image");
    for (int k = 0; k < 2; k++) {
        free(img[k]);
        free(disk[k]);
    }
    free(s);
}

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    char path[64];
    snprintf(path, sizeof path, "thread%d.h5", j->id);
    float e[8], *s = calloc(8 * NV, sizeof *s);
    for (int i = 0; i < 8; i++) {
        e[i] = 100.0f * (j->id + 1);
        s[i * NV + j->id] = (float)i;
    }
    for (int rep = 0; rep < 4; rep++) {
        calo_h5_writer w;
        gt_error err = {0};
        void *img;
        size_t len;
        if (calo_h5_create(&w, path, NV, 3, 1, &err) || calo_h5_append(&w, e, s, 8, &err) ||
            calo_h5_finish(&w, &err))
            j->failures++;
        if (calo_h5_create_memory(&w, NV, 3, 1, &err) || calo_h5_append(&w, e, s, 8, &err) ||
            calo_h5_finish_memory(&w, &img, &len, &err))
            j->failures++;
        else
            free(img);
        float *e2, *s2;
        int64_t n;
        if (calo_h5_read_all(path, j->g, &e2, &s2, &n, &err)) {
            j->failures++;
            continue;
        }
        if (n != 8 || e2[7] != e[7] || memcmp(s, s2, 8 * NV * sizeof *s))
            j->failures++;
        free(e2);
        free(s2);
    }
    free(s);
    return NULL;
}

static void threads(const geo_geometry *g)
{
    pthread_t t[4];
    thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){i, g, 0};
        CHECK(pthread_create(&t[i], NULL, thread_main, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ_INT(jobs[i].failures, 0);
    }
}

/* The row check over many rows (scanned in parallel): the lowest bad row
 * is the one named, with its voxel and what is wrong, at any thread count. */
static void check_rows_parallel(void)
{
    const int64_t n = 100;
    float *e = malloc(n * sizeof *e), *s = calloc((size_t)(n * NV), sizeof *s);
    gt_error err = {0};
    for (int64_t i = 0; i < n; i++)
        e[i] = 1000.0f;
    CHECK_EQ_INT(calo_h5_check_rows(e, s, n, NV, 0, &err), GT_OK);
    s[80 * NV + 9] = NAN;
    s[57 * NV + 3] = -2.0f;
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        CHECK_EQ_INT(calo_h5_check_rows(e, s, n, NV, 1000, &err), GT_EINVAL);
        CHECK_MSG(strstr(err.message, "row 1057 voxel 3: negative energy -2") != NULL, "%s",
                  err.message);
    }
    e[30] = INFINITY;
    CHECK_EQ_INT(calo_h5_check_rows(e, s, n, NV, 0, &err), GT_EINVAL);
    CHECK_MSG(strstr(err.message, "row 30: incident energy is infinite") != NULL, "%s",
              err.message);
    CHECK_EQ_INT(calo_h5_check_rows(e, NULL, 30, NV, 0, &err), GT_OK);
    free(e);
    free(s);
}

int main(void)
{
    check_rows_parallel();
    geo_geometry g;
    if (dt_load_geometry(&g, "binning_dataset_2.xml"))
        return 1;
    const int64_t n = 45;
    write_ours("ours.h5", n);
    read_back_ours("ours.h5", &g, n);
    bad_files_c("ours.h5", &g);
    memory_file(&g);
    same_bytes_later();
    threads(&g);
    if (dt_have_h5py()) {
        h5py_reads_ours("ours.h5", n);
        ours_reads_h5py(&g);
        bad_files_h5py(&g);
    } else {
        printf("note: no python3 h5py here, h5py interoperability checks not run\n");
    }
    geo_free(&g);
    return check_finish();
}
