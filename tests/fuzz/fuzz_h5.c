/* fuzz_h5: the HDF5 shower reader (calo_h5.c) on CaloChallenge-shaped
 * files whose every property comes from the input: rows (0 to 63) and
 * voxels (1 to 64), float32 or float64 or integer datasets, contiguous or
 * chunked storage with any chunk size, shuffle, deflate and fletcher32,
 * rows declared and never written, the two datasets disagreeing on N, and
 * every value a raw float bit pattern from the input (NaN, infinities,
 * negatives, -0, subnormals).  The files are written with the HDF5 C API
 * (not fuzzed bytes: libhdf5 itself is not the target) into the working
 * folder, and read as the datasets worker reads a registered file: open,
 * the storage check, the scan in blocks the input picks, and a few row
 * ranges.  The oracle is what was written: the scan succeeds exactly when
 * every declared row holds a finite positive energy and finite
 * non-negative voxels, and otherwise names the first bad row. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "calo_h5.h"
#include "../data/h5_fixture.h"

typedef struct in_bytes {
    const uint8_t *p;
    size_t n, at;
} in_bytes;

static uint8_t byte(in_bytes *b)
{
    return b->at < b->n ? b->p[b->at++] : 0;
}

/* The next raw float32 of the input (cycling over what is left), or a
 * plain valid value when the input is used up. */
static float value(in_bytes *b, float plain)
{
    if (b->at + 4 > b->n)
        return plain;
    float f;
    memcpy(&f, b->p + b->at, 4);
    b->at += 4;
    return f;
}

/* One dataset (h5_fixture's writer), chunked and written only when it has
 * rows: HDF5 refuses chunks larger than a fixed dataset. */
static int write_dataset(hid_t f, const char *name, int64_t rows, int64_t width, hid_t type,
                         const h5fx_layout *l, const float *data)
{
    h5fx_layout as = *l;
    if (rows <= 0)
        as.chunk_rows = 0;
    return h5fx_dataset_as(f, name, rows, width, type, &as, rows > 0 ? data : NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);   /* the writer's refusals are expected */
        quiet = 1;
    }
    in_bytes b = {data, size, 0};
    uint8_t flags = byte(&b), more = byte(&b);
    int64_t rows = byte(&b) % 64;
    int voxels = 1 + byte(&b) % 64;
    int chunk_rows = (flags & 1) ? 1 + byte(&b) % 64 : 0;
    int shuffle = flags & 2, gzip = (flags & 4) ? 1 + more % 9 : 0, fletcher = flags & 8;
    int empty = flags & 16;                       /* declared, never written */
    int mismatch = (flags & 32) && rows > 0;      /* energies one row short */
    hid_t etype = (more & 0x10) ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
    hid_t stype = (more & 0x20) ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
    if (flags & 64)
        etype = H5T_STD_I32LE;                    /* not floating point */
    int64_t block = byte(&b) % 70;                /* 0: the reader's choice */

    float *e = malloc((size_t)(rows ? rows : 1) * sizeof *e);
    float *s = malloc((size_t)(rows ? rows : 1) * (size_t)voxels * sizeof *s);
    if (!e || !s) {
        free(e);
        free(s);
        return 0;
    }
    /* the input's floats go mostly to a few places, so that it can make
     * one bad value among good ones: each row's energy and first voxel */
    int64_t first_bad = -1;
    for (int64_t i = 0; i < rows; i++) {
        e[i] = (more & 0x40) ? value(&b, 1000.0f) : 1000.0f + (float)i;
        for (int v = 0; v < voxels; v++)
            s[i * voxels + v] = (v == 0 || (more & 0x80)) ? value(&b, 0.5f) : 0.25f * (float)v;
        int ok = isfinite(e[i]) && e[i] > 0;
        for (int v = 0; v < voxels && ok; v++)
            ok = s[i * voxels + v] >= 0 && s[i * voxels + v] <= FLT_MAX;
        if (!ok && first_bad < 0)
            first_bad = i;
    }
    if ((flags & 64) && rows > 0 && first_bad < 0)
        first_bad = -2;                           /* the energies are integers: no oracle */

    char path[64];
    snprintf(path, sizeof path, "fuzz_h5-%d.h5", (int)getpid());
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    h5fx_layout layout = {chunk_rows, shuffle != 0, gzip, fletcher != 0, NULL};
    int written = f >= 0 &&
                  write_dataset(f, "incident_energies", mismatch ? rows - 1 : rows, 1, etype,
                                &layout, empty ? NULL : e) == 0 &&
                  write_dataset(f, "showers", rows, voxels, stype, &layout,
                                empty ? NULL : s) == 0;
    if (f >= 0 && H5Fclose(f) < 0)
        written = 0;
    if (!written)
        goto out;

    calo_h5_reader r;
    gt_error err = {0};
    int rc = calo_h5_open(&r, path, NULL, &err);
    if (mismatch || (flags & 64)) {
        if (rc == GT_OK)
            abort();                              /* N differs, or not floats */
        if (!err.message[0])
            abort();
        goto out;
    }
    if (rc != GT_OK) {
        if (!err.message[0])
            abort();
        goto out;
    }
    if (r.n_rows != rows || r.n_voxels != voxels)
        abort();
    struct stat st;
    int64_t fsize = stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
    if (calo_h5_check_storage(&r, fsize, NULL, &err) == GT_OK) {
        calo_h5_scan_stats stats;
        gt_error serr = {0};
        int src = calo_h5_scan(&r, block, NULL, NULL, &stats, &serr);
        int want_ok = !empty ? first_bad < 0 : rows == 0;
        if ((src == GT_OK) != want_ok)
            abort();
        if (src == GT_OK && stats.rows != rows)
            abort();
        if (src != GT_OK && !empty && first_bad >= 0) {
            char a[40], c[40];
            snprintf(a, sizeof a, "row %lld:", (long long)first_bad);
            snprintf(c, sizeof c, "row %lld voxel", (long long)first_bad);
            if (!strstr(serr.message, a) && !strstr(serr.message, c))
                abort();
        }
        /* a range read agrees with the scan about the rows before the first bad one */
        if (!empty && rows > 0) {
            int64_t upto = first_bad < 0 ? rows : first_bad;
            if (upto > 0 && calo_h5_read_rows(&r, 0, upto, e, s, &serr) != GT_OK)
                abort();
            if (calo_h5_read_rows(&r, rows, 1, e, s, &serr) == GT_OK)
                abort();                          /* past the end */
        }
    } else if (!err.message[0]) {
        abort();
    }
    calo_h5_close(&r);
out:
    unlink(path);
    free(e);
    free(s);
    return 0;
}
