/* calo_h5_check_storage and calo_h5_scan: what a file declares against what
 * it stores, and every row streamed and checked in bounded blocks, the
 * first bad row (and voxel) named, a damaged compressed chunk included. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "calo_h5.h"
#include "check.h"
#include "data/h5_fixture.h"
#include "gt_clock.h"

#define NV 368   /* dataset 1 photons */

static int64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

static h5fx fixture(int64_t rows, int64_t chunk_rows, int gzip)
{
    h5fx x = {.rows = rows, .voxels = NV, .chunk_rows = chunk_rows, .gzip = gzip,
              .poke_row = -1};
    return x;
}

/* Opens path; the storage check's code and message. */
static int storage_of(const char *path, calo_h5_storage *st, gt_error *err)
{
    calo_h5_reader r;
    int rc = calo_h5_open(&r, path, NULL, err);
    if (rc)
        return rc;
    rc = calo_h5_check_storage(&r, file_size(path), st, err);
    calo_h5_close(&r);
    return rc;
}

typedef struct seen {
    int calls;
    int64_t last, total;
    int stop_after; /* > 0: stop at that call */
} seen;

static int on_block(void *user, int64_t done, int64_t total)
{
    seen *s = user;
    CHECK(done > s->last);
    s->last = done;
    s->total = total;
    return ++s->calls == s->stop_after ? GT_ECANCELLED : GT_OK;
}

/* Scans path with blocks of block rows; the code, the message in err. */
static int scan(const char *path, int64_t block, seen *sn, calo_h5_scan_stats *stats,
                gt_error *err)
{
    calo_h5_reader r;
    int rc = calo_h5_open(&r, path, NULL, err);
    if (rc)
        return rc;
    rc = calo_h5_scan(&r, block, on_block, sn, stats, err);
    calo_h5_close(&r);
    return rc;
}

static void good_files(void)
{
    /* gzip-chunked and contiguous: every row read in blocks, counts and
     * range right, the callback sees each block */
    h5fx z = fixture(1000, 64, 4), c = fixture(1000, 0, 0);
    CHECK_EQ_INT(h5fx_write("good_gz.h5", &z), 0);
    CHECK_EQ_INT(h5fx_write("good_plain.h5", &c), 0);
    calo_h5_storage st;
    gt_error err = {0};
    CHECK_EQ_INT(storage_of("good_gz.h5", &st, &err), GT_OK);
    CHECK_EQ_INT(st.chunk_rows, 64);
    CHECK_EQ_INT(st.compressed, 1);
    CHECK_EQ_INT(storage_of("good_plain.h5", &st, &err), GT_OK);
    CHECK_EQ_INT(st.chunk_rows, 0);
    CHECK_EQ_INT(st.compressed, 0);
    const char *files[2] = {"good_gz.h5", "good_plain.h5"};
    for (int k = 0; k < 2; k++) {
        seen sn = {0};
        calo_h5_scan_stats stats;
        int rc = scan(files[k], 300, &sn, &stats, &err);
        CHECK_MSG(rc == GT_OK, "%s: %s", files[k], err.message);
        CHECK_EQ_INT(stats.rows, 1000);
        CHECK_EQ_INT(sn.calls, 4);            /* 300 + 300 + 300 + 100 */
        CHECK_EQ_INT(sn.last, 1000);
        CHECK_EQ_INT(sn.total, 1000);
        CHECK_CLOSE(stats.e_min, h5fx_energy(0), 0, 0);
        CHECK_CLOSE(stats.e_max, h5fx_energy(999), 0, 0);
        /* the automatic block: about 1 MiB, in whole chunks (712 rows of
         * 368 voxels, 768 with chunks of 64) */
        seen sa = {0};
        rc = scan(files[k], 0, &sa, &stats, &err);
        CHECK_MSG(rc == GT_OK, "%s: %s", files[k], err.message);
        CHECK_EQ_INT(sa.calls, 2);
        CHECK_EQ_INT(stats.rows, 1000);
        /* a callback that says stop stops the scan with its code */
        seen ss = {.stop_after = 2};
        rc = scan(files[k], 100, &ss, &stats, &err);
        CHECK_EQ_INT(rc, GT_ECANCELLED);
        CHECK_EQ_INT(stats.rows, 200);
    }
}

static void expect_scan_fails(const h5fx *x, const char *path, const char *needle)
{
    CHECK_EQ_INT(h5fx_write(path, x), 0);
    seen sn = {0};
    calo_h5_scan_stats stats;
    gt_error err = {0};
    int rc = scan(path, 100, &sn, &stats, &err);
    CHECK_MSG(rc == GT_EINVAL, "%s: code %d (%s)", path, rc, err.message);
    CHECK_MSG(strstr(err.message, needle) != NULL, "%s: \"%s\" lacks \"%s\"", path, err.message,
              needle);
}

static void bad_values(void)
{
    h5fx x = fixture(500, 50, 4);
    x.poke_row = 234;
    x.poke_voxel = 17;
    x.poke_value = NAN;
    expect_scan_fails(&x, "nan_voxel.h5", "row 234 voxel 17: energy is NaN");
    x.poke_voxel = 3;
    x.poke_value = -0.5f;
    expect_scan_fails(&x, "neg_voxel.h5", "row 234 voxel 3: negative energy -0.5");
    x.poke_value = INFINITY;
    expect_scan_fails(&x, "inf_voxel.h5", "row 234 voxel 3: energy is infinite");
    x.poke_row = 401;
    x.poke_voxel = -1;
    expect_scan_fails(&x, "inf_energy.h5", "row 401: incident energy is infinite");
    x.poke_value = 0;
    expect_scan_fails(&x, "zero_energy.h5", "row 401: incident energy 0 is not positive");
    /* finite values near FLT_MAX are valid (they were once called negative) */
    x.poke_voxel = 9;
    x.poke_value = 3.2e38f;
    CHECK_EQ_INT(h5fx_write("big_voxel.h5", &x), 0);
    seen sn = {0};
    calo_h5_scan_stats stats;
    gt_error err = {0};
    CHECK_MSG(scan("big_voxel.h5", 0, &sn, &stats, &err) == GT_OK, "%s", err.message);
}

/* A gzip-chunked file with one damaged chunk: the scan names the first row
 * of that chunk, whatever the block, and the rows before it were fine. */
static void damaged_chunk(void)
{
    h5fx x = fixture(600, 40, 6);
    CHECK_EQ_INT(h5fx_write("damaged.h5", &x), 0);
    CHECK_EQ_INT(h5fx_damage_chunk("damaged.h5", 7), 0);   /* rows 280..319 */
    int64_t blocks[3] = {0, 100, 1};
    for (int k = 0; k < 3; k++) {
        seen sn = {0};
        calo_h5_scan_stats stats;
        gt_error err = {0};
        int rc = scan("damaged.h5", blocks[k], &sn, &stats, &err);
        CHECK_MSG(rc == GT_EIO, "block %lld: code %d (%s)", (long long)blocks[k], rc,
                  err.message);
        CHECK_MSG(strstr(err.message, "damaged.h5: row 280: cannot be read, the file is "
                                      "corrupt or truncated: ") == err.message,
                  "block %lld: %s", (long long)blocks[k], err.message);
        CHECK_EQ_INT(stats.rows, blocks[k] == 100 ? 200 : blocks[k] == 1 ? 280 : 0);
    }
}

static void expect_storage_refused(const char *path, const char *needle, double max_s)
{
    calo_h5_storage st;
    gt_error err = {0};
    double t0 = gt_clock_s();
    int rc = storage_of(path, &st, &err);
    double dt = gt_clock_s() - t0;
    CHECK_MSG(rc == GT_EFORMAT, "%s: code %d (%s)", path, rc, err.message);
    CHECK_MSG(strstr(err.message, needle) != NULL, "%s: \"%s\" lacks \"%s\"", path, err.message,
              needle);
    CHECK_MSG(dt < max_s, "%s: the check took %.3f s", path, dt);
}

/* Shapes that the file cannot back: refused from metadata, at once. */
static void storage(void)
{
    h5fx x = fixture(10000000000LL, 0, 0);
    x.empty = 1;
    CHECK_EQ_INT(h5fx_write("huge_plain.h5", &x), 0);
    CHECK_MSG(file_size("huge_plain.h5") < 4096, "%lld bytes",
              (long long)file_size("huge_plain.h5"));
    expect_storage_refused("huge_plain.h5", "declares 10000000000 rows", 0.5);
    expect_storage_refused("huge_plain.h5", "stores 0 bytes", 0.5);
    x.chunk_rows = 100;
    x.gzip = 4;
    CHECK_EQ_INT(h5fx_write("huge_gz.h5", &x), 0);
    expect_storage_refused("huge_gz.h5", "can hold even deflated", 0.5);
    x.gzip = 0;
    CHECK_EQ_INT(h5fx_write("huge_chunked.h5", &x), 0);
    expect_storage_refused("huge_chunked.h5", "can hold", 0.5);
    /* a contiguous file cut short: its data no longer fits */
    h5fx c = fixture(200, 0, 0);
    CHECK_EQ_INT(h5fx_write("cut_plain.h5", &c), 0);
    CHECK_EQ_INT(truncate("cut_plain.h5", file_size("cut_plain.h5") - 1000), 0);
    calo_h5_storage st;
    gt_error err = {0};
    int rc = storage_of("cut_plain.h5", &st, &err);
    CHECK_MSG(rc != GT_OK, "a truncated contiguous file passed");
    /* chunks too large to decompress in bounded memory */
    h5fx big = fixture(50000, 50000, 1);
    big.empty = 1;
    CHECK_EQ_INT(h5fx_write("big_chunks.h5", &big), 0);
    expect_storage_refused("big_chunks.h5", "more than the 64 MiB", 0.5);
    /* values kept in another file: refused when opened, by every reader */
    h5fx ext = fixture(10, 0, 0);
    ext.external = "elsewhere.raw";
    ext.empty = 1;
    CHECK_EQ_INT(h5fx_write("external.h5", &ext), 0);
    calo_h5_reader r;
    rc = calo_h5_open(&r, "external.h5", NULL, &err);
    CHECK_EQ_INT(rc, GT_EFORMAT);
    CHECK_MSG(strstr(err.message, "external files") != NULL, "%s", err.message);
    /* zero rows is a valid shape for the storage check (the service
     * refuses it itself) */
    h5fx zero = fixture(0, 0, 0);
    CHECK_EQ_INT(h5fx_write("zero.h5", &zero), 0);
    CHECK_EQ_INT(storage_of("zero.h5", &st, &err), GT_OK);
}

int main(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);   /* the fixtures' own calls */
    good_files();
    bad_values();
    damaged_chunk();
    storage();
    return check_finish();
}
