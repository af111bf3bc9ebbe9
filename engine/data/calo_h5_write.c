/* calo_h5_write: the CaloChallenge HDF5 writer (calo_h5.h): chunked
 * float32 datasets whose chunks are shuffled and deflated here in
 * parallel (libdeflate, OpenMP) and handed to HDF5 whole; to a file or to
 * memory (HDF5's core driver).  What it shares with the reader is in
 * calo_h5_internal.h. */
#include "calo_h5.h"
#include "calo_h5_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>
#include <libdeflate.h>
#include <omp.h>

/* ------------------------------------------------------------------------ */
/* Writer                                                                    */
/* ------------------------------------------------------------------------ */

static hid_t calo_h5_make_dataset(hid_t file, const char *name, int64_t width,
                                  int64_t chunk_rows, int gzip, const char *path, gt_error *err)
{
    hsize_t dims[2] = {0, (hsize_t)width};
    hsize_t maxdims[2] = {H5S_UNLIMITED, (hsize_t)width};
    hsize_t chunk[2] = {(hsize_t)chunk_rows, (hsize_t)width};
    hid_t space = H5Screate_simple(2, dims, maxdims);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t ds = -1;
    /* no modification times (HDF5 records them by default): the same
     * showers then make the same file, byte for byte, whenever written */
    if (space >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, 2, chunk) >= 0 &&
        H5Pset_obj_track_times(dcpl, 0) >= 0 &&
        (gzip == 0 || (H5Pset_shuffle(dcpl) >= 0 && H5Pset_deflate(dcpl, (unsigned)gzip) >= 0)))
        ds = H5Dcreate2(file, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds < 0)
        calo_h5_fail(err, GT_EIO, "cannot create dataset in", path);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (space >= 0)
        H5Sclose(space);
    return ds;
}

/* fapl: H5P_DEFAULT for a file on disk, a core-driver list for memory. */
static int calo_h5_create_impl(calo_h5_writer *w, const char *path, hid_t fapl, int n_voxels,
                               int64_t chunk_rows, int gzip_level, gt_error *err)
{
    memset(w, 0, sizeof *w);
    w->file = w->ds_energy = w->ds_shower = -1;
    if (n_voxels <= 0)
        return gt_error_set(err, GT_EINVAL, "n_voxels must be positive");
    if (gzip_level < 0 || gzip_level > 9)
        return gt_error_set(err, GT_EINVAL, "gzip level %d outside 0..9", gzip_level);
    if (chunk_rows <= 0) {
        chunk_rows = (1 << 20) / ((int64_t)n_voxels * 4);
        if (chunk_rows < 1)
            chunk_rows = 1;
    }
    if (chunk_rows * (int64_t)n_voxels * 4 > (64LL << 20))
        return gt_error_set(err, GT_EINVAL, "chunk of %lld rows is over 64 MiB",
                            (long long)chunk_rows);
    w->n_voxels = n_voxels;
    w->gzip_level = gzip_level;
    w->chunk_rows = chunk_rows;
    w->n_stage_chunks = 16;
    size_t chunk_bytes = (size_t)chunk_rows * n_voxels * sizeof(float);
    w->zcap = chunk_bytes + libdeflate_zlib_compress_bound(NULL, chunk_bytes);
    w->stage = malloc(chunk_bytes * w->n_stage_chunks);
    w->zbuf = malloc(w->zcap * w->n_stage_chunks);
    w->zlen = malloc(w->n_stage_chunks * sizeof *w->zlen);
    if (!w->stage || !w->zbuf || !w->zlen) {
        calo_h5_finish(w, NULL);
        return gt_error_set(err, GT_ENOMEM, "out of memory for the HDF5 write buffers");
    }
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (f < 0) {
        calo_h5_finish(w, NULL);
        return calo_h5_fail(err, GT_EIO, "cannot create", path);
    }
    w->file = f;
    int64_t echunk = chunk_rows * 64 > 65536 ? 65536 : chunk_rows * 64;
    w->ds_energy = calo_h5_make_dataset(f, "incident_energies", 1, echunk, gzip_level, path, err);
    if (w->ds_energy < 0)
        goto fail;
    w->ds_shower = calo_h5_make_dataset(f, "showers", n_voxels, chunk_rows, gzip_level, path,
                                        err);
    if (w->ds_shower < 0)
        goto fail;
    return GT_OK;
fail:;
    int code = err ? err->code : GT_EIO;
    calo_h5_finish(w, NULL);
    return code;
}

int calo_h5_create(calo_h5_writer *w, const char *path, int n_voxels, int64_t chunk_rows,
                   int gzip_level, gt_error *err)
{
    calo_h5_lock();
    int rc = calo_h5_create_impl(w, path, H5P_DEFAULT, n_voxels, chunk_rows, gzip_level, err);
    calo_h5_unlock();
    return rc;
}

static int calo_h5_append_one(hid_t ds, int64_t row0, int64_t n, int64_t width, const float *src,
                              gt_error *err)
{
    hsize_t newdims[2] = {(hsize_t)(row0 + n), (hsize_t)width};
    if (H5Dset_extent(ds, newdims) < 0)
        return calo_h5_fail(err, GT_EIO, "cannot extend dataset", "");
    hid_t fspace, mspace;
    int rc = GT_OK;
    if (calo_h5_select_rows(ds, row0, n, width, &fspace, &mspace) < 0 ||
        H5Dwrite(ds, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, src) < 0)
        rc = calo_h5_fail(err, GT_EIO, "write failed (disk full?)", "");
    calo_h5_close_rows(fspace, mspace);
    return rc;
}

void calo_h5_shuffle4(const void *src, void *dst, size_t bytes)
{
    const unsigned char *s = src;
    unsigned char *d = dst;
    size_t n = bytes / 4;
    for (size_t i = 0; i < n; i++) {
        d[i] = s[4 * i];
        d[n + i] = s[4 * i + 1];
        d[2 * n + i] = s[4 * i + 2];
        d[3 * n + i] = s[4 * i + 3];
    }
}

/* Writes the staged rows as whole chunks (the last one zero-padded when
 * `partial` allows a short stage).  Compression runs in parallel; the
 * HDF5 calls stay on this thread. */
static int calo_h5_flush_stage(calo_h5_writer *w, gt_error *err)
{
    if (w->staged == 0)
        return GT_OK;
    int64_t cr = w->chunk_rows;
    int n_chunks = (int)((w->staged + cr - 1) / cr);
    size_t row_bytes = (size_t)w->n_voxels * sizeof(float);
    size_t chunk_bytes = (size_t)cr * row_bytes;
    /* zero the padding of a short last chunk (it is never read back) */
    memset((char *)w->stage + (size_t)w->staged * row_bytes, 0,
           (size_t)n_chunks * chunk_bytes - (size_t)w->staged * row_bytes);
    int level = w->gzip_level, failed = 0;
    double t0 = omp_get_wtime();
    if (level == 0) {
        for (int c = 0; c < n_chunks; c++)
            w->zlen[c] = chunk_bytes;
    } else {
        /* libdeflate, not zlib: the same zlib stream HDF5's deflate filter
         * reads, 1.7 times as fast at the same level, a little smaller
         * (bench/host.sh).  A compressor per thread (they are not shared),
         * for this stage. */
#pragma omp parallel reduction(| : failed)
        {
            struct libdeflate_compressor *z = libdeflate_alloc_compressor(level);
            failed |= !z;
#pragma omp for schedule(dynamic, 1)
            for (int c = 0; c < n_chunks; c++) {
                const unsigned char *src =
                    (const unsigned char *)w->stage + (size_t)c * chunk_bytes;
                unsigned char *shuf = w->zbuf + (size_t)c * w->zcap;
                calo_h5_shuffle4(src, shuf, chunk_bytes);
                w->zlen[c] = z ? libdeflate_zlib_compress(z, shuf, chunk_bytes, shuf + chunk_bytes,
                                                          w->zcap - chunk_bytes)
                               : 0;
                failed |= w->zlen[c] == 0;
            }
            libdeflate_free_compressor(z);
        }
    }
    w->compress_s += omp_get_wtime() - t0;
    if (failed)
        return gt_error_set(err, GT_ENOMEM, "deflate compression failed (out of memory)");
    int64_t rows_after = w->flushed + w->staged;
    hsize_t dims[2] = {(hsize_t)rows_after, (hsize_t)w->n_voxels};
    if (H5Dset_extent(w->ds_shower, dims) < 0)
        return calo_h5_fail(err, GT_EIO, "cannot extend dataset", "showers");
    for (int c = 0; c < n_chunks; c++) {
        hsize_t off[2] = {(hsize_t)(w->flushed + (int64_t)c * cr), 0};
        const void *buf = level == 0 ? (const void *)((const char *)w->stage + c * chunk_bytes)
                                     : (const void *)(w->zbuf + c * w->zcap + chunk_bytes);
        if (H5Dwrite_chunk(w->ds_shower, H5P_DEFAULT, 0, off, w->zlen[c], buf) < 0)
            return calo_h5_fail(err, GT_EIO, "chunk write failed (disk full?)", "showers");
    }
    w->flushed = rows_after;
    w->staged = 0;
    return GT_OK;
}

static int calo_h5_append_impl(calo_h5_writer *w, const float *energies, const float *showers,
                               int64_t n, gt_error *err)
{
    if (w->file < 0)
        return gt_error_set(err, GT_EINVAL, "writer is not open");
    if (n < 0 || !energies || !showers)
        return gt_error_set(err, GT_EINVAL, "bad append arguments");
    if (n == 0)
        return GT_OK;
    /* a chunk already on disk cannot take more rows: only flush at chunk
     * boundaries (calo_h5_finish writes the short tail) */
    GT_TRY(calo_h5_check_rows(energies, showers, n, w->n_voxels, w->n_rows, err));
    GT_TRY(calo_h5_append_one(w->ds_energy, w->n_rows, n, 1, energies, err));
    int64_t cap = w->chunk_rows * w->n_stage_chunks;
    size_t row_floats = (size_t)w->n_voxels;
    for (int64_t done = 0; done < n;) {
        int64_t m = cap - w->staged;
        if (m > n - done)
            m = n - done;
        memcpy(w->stage + (size_t)w->staged * row_floats, showers + (size_t)done * row_floats,
               (size_t)m * row_floats * sizeof(float));
        w->staged += m;
        done += m;
        if (w->staged == cap)
            GT_TRY(calo_h5_flush_stage(w, err));
    }
    w->n_rows += n;
    return GT_OK;
}

int calo_h5_append(calo_h5_writer *w, const float *energies, const float *showers, int64_t n,
                   gt_error *err)
{
    calo_h5_lock();
    int rc = calo_h5_append_impl(w, energies, showers, n, err);
    calo_h5_unlock();
    return rc;
}

static int calo_h5_finish_impl(calo_h5_writer *w, gt_error *err)
{
    int rc = GT_OK;
    if (w->file >= 0 && w->ds_shower >= 0)
        rc = calo_h5_flush_stage(w, err);
    int bad = 0;
    if (w->ds_energy >= 0 && H5Dclose(w->ds_energy) < 0)
        bad = 1;
    if (w->ds_shower >= 0 && H5Dclose(w->ds_shower) < 0)
        bad = 1;
    if (w->file >= 0 && H5Fclose(w->file) < 0)
        bad = 1;
    w->file = w->ds_energy = w->ds_shower = -1;
    free(w->stage);
    free(w->zbuf);
    free(w->zlen);
    w->stage = NULL;
    w->zbuf = NULL;
    w->zlen = NULL;
    if (rc)
        return rc;
    if (bad)
        return calo_h5_fail(err, GT_EIO, "closing HDF5 file failed", "");
    return GT_OK;
}

int calo_h5_finish(calo_h5_writer *w, gt_error *err)
{
    calo_h5_lock();
    int rc = calo_h5_finish_impl(w, err);
    calo_h5_unlock();
    return rc;
}

/* ------------------------------------------------------------------------ */
/* In-memory files                                                           */
/* ------------------------------------------------------------------------ */

int calo_h5_create_memory(calo_h5_writer *w, int n_voxels, int64_t chunk_rows, int gzip_level,
                          gt_error *err)
{
    static unsigned long counter;
    calo_h5_lock();
    /* the core driver keys open files by name: make each one unique */
    char name[64];
    snprintf(name, sizeof name, "giant-memory-%lu.h5", ++counter);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    int rc;
    if (fapl < 0 || H5Pset_fapl_core(fapl, 4 << 20, 0) < 0) {
        memset(w, 0, sizeof *w);
        w->file = w->ds_energy = w->ds_shower = -1;
        rc = calo_h5_fail(err, GT_EIO, "cannot set up an in-memory HDF5 file", name);
    } else {
        rc = calo_h5_create_impl(w, name, fapl, n_voxels, chunk_rows, gzip_level, err);
    }
    if (fapl >= 0)
        H5Pclose(fapl);
    calo_h5_unlock();
    return rc;
}

int calo_h5_finish_memory(calo_h5_writer *w, void **image, size_t *len, gt_error *err)
{
    *image = NULL;
    *len = 0;
    calo_h5_lock();
    int rc = GT_OK;
    if (w->file < 0) {
        rc = gt_error_set(err, GT_EINVAL, "writer is not open");
        goto done;
    }
    if ((rc = calo_h5_flush_stage(w, err)))
        goto fail;
    if (H5Fflush(w->file, H5F_SCOPE_LOCAL) < 0) {
        rc = calo_h5_fail(err, GT_EIO, "cannot flush in-memory file", "");
        goto fail;
    }
    ssize_t n = H5Fget_file_image(w->file, NULL, 0);
    void *buf = n > 0 ? malloc((size_t)n) : NULL;
    if (!buf) {
        rc = n > 0 ? gt_error_set(err, GT_ENOMEM, "out of memory for a %zd-byte HDF5 image", n)
                   : calo_h5_fail(err, GT_EIO, "cannot size the in-memory file", "");
        goto fail;
    }
    if (H5Fget_file_image(w->file, buf, (size_t)n) != n) {
        free(buf);
        rc = calo_h5_fail(err, GT_EIO, "cannot copy the in-memory file", "");
        goto fail;
    }
    *image = buf;
    *len = (size_t)n;
fail:
    /* closes and frees either way; an error above takes precedence */
    if (rc) {
        calo_h5_finish_impl(w, NULL);
    } else if ((rc = calo_h5_finish_impl(w, err))) {
        free(*image);
        *image = NULL;
        *len = 0;
    }
done:
    calo_h5_unlock();
    return rc;
}
