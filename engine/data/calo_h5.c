/* calo_h5: CaloChallenge HDF5 reader and writer (libhdf5 C API). */
#include "calo_h5.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>
#include <libdeflate.h>
#include <omp.h>
#include <pthread.h>

/* The Debian libhdf5 is built without thread safety: every call into it
 * from this module holds one process-wide (recursive) lock, so the service
 * may read and write files from several threads. */
static pthread_mutex_t calo_h5_lock_mu;
static pthread_once_t calo_h5_lock_once = PTHREAD_ONCE_INIT;

/* HDF5's exit handler closes what is still open.  A file whose writing
 * failed (the disk full) stays half closed in libhdf5 1.10, and that
 * handler then crashes on it, turning an error already reported into a
 * segmentation fault.  This module closes every file it opens, so the
 * handler has nothing to do: it is not installed (before any other call,
 * as HDF5 asks; where another caller came first it just stays). */
static void calo_h5_lock_init(void)
{
    H5dont_atexit();
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&calo_h5_lock_mu, &a);
    pthread_mutexattr_destroy(&a);
}

/* Turns off HDF5's automatic error-stack printing.  Called on every entry
 * (calo_h5_lock): in a thread-safe libhdf5 the setting belongs to the
 * calling thread, and the service (and giant sample's writing thread)
 * call in from several. */
static void calo_h5_quiet(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void calo_h5_lock(void)
{
    pthread_once(&calo_h5_lock_once, calo_h5_lock_init);
    pthread_mutex_lock(&calo_h5_lock_mu);
    calo_h5_quiet();
}

static void calo_h5_unlock(void)
{
    pthread_mutex_unlock(&calo_h5_lock_mu);
}

/* Walking downward, entry 0 is the API call's message ("unable to open
 * file") and the last one the most specific ("truncated file: eof = ...");
 * keep both. */
static herr_t calo_h5_walk_first(unsigned n, const H5E_error2_t *e, void *data)
{
    char *out = data; /* [0..199] outermost, [200..399] innermost */
    if (!e->desc)
        return 0;
    if (n == 0)
        snprintf(out, 200, "%s", e->desc);
    else
        snprintf(out + 200, 200, "%s", e->desc);
    return 0;
}

/* Sets err from HDF5's current error stack and clears it. */
static int calo_h5_fail(gt_error *err, int code, const char *what, const char *path)
{
    char walk[400] = "", detail[420];
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, calo_h5_walk_first, walk);
    H5Eclear2(H5E_DEFAULT);
    if (walk[200] && strcmp(walk, walk + 200))
        snprintf(detail, sizeof detail, "%s (%s)", walk, walk + 200);
    else
        snprintf(detail, sizeof detail, "%s", walk);
    return gt_error_set(err, code, "%s%s%s%s%s", what, path[0] ? " " : "", path,
                        detail[0] ? ": " : "", detail);
}

/* The first row in [0, n) with a bad energy or voxel, or n: rows in
 * parallel, each scanned without an early exit so that it vectorises (the
 * writer runs this over every value giant sample writes). */
static int64_t calo_h5_first_bad(const float *energies, const float *showers, int64_t n,
                                 int n_voxels)
{
    int64_t first = n;
#pragma omp parallel for schedule(static) reduction(min : first) \
    if (n * (int64_t)n_voxels > (1 << 16))
    for (int64_t i = 0; i < n; i++) {
        int ok = !energies || (isfinite(energies[i]) && energies[i] > 0);
        if (showers) {
            const float *s = showers + i * (int64_t)n_voxels;
            for (int v = 0; v < n_voxels; v++)
                ok &= (s[v] >= 0) & (s[v] <= FLT_MAX);   /* false for NaN */
        }
        if (!ok && i < first)
            first = i;
    }
    return first;
}

int calo_h5_check_rows(const float *energies, const float *showers, int64_t n, int n_voxels,
                       int64_t row_base, gt_error *err)
{
    /* the details (which voxel, what is wrong) from the first bad row alone */
    int64_t bad = calo_h5_first_bad(energies, showers, n, n_voxels);
    if (bad == n)
        return GT_OK;
    energies = energies ? energies + bad : NULL;
    showers = showers ? showers + bad * (int64_t)n_voxels : NULL;
    row_base += bad;
    n = 1;
    for (int64_t i = 0; i < n; i++) {
        if (energies) {
            float e = energies[i];
            if (!isfinite(e))
                return gt_error_set(err, GT_EINVAL, "row %lld: incident energy is %s",
                                    (long long)(row_base + i), isnan(e) ? "NaN" : "infinite");
            if (!(e > 0))
                return gt_error_set(err, GT_EINVAL, "row %lld: incident energy %g is not positive",
                                    (long long)(row_base + i), e);
        }
        if (showers) {
            const float *s = showers + i * (int64_t)n_voxels;
            for (int v = 0; v < n_voxels; v++) {
                float x = s[v];
                /* one test for the common case, details only on failure */
                if (!(x >= 0 && x <= FLT_MAX)) {
                    if (isnan(x))
                        return gt_error_set(err, GT_EINVAL, "row %lld voxel %d: energy is NaN",
                                            (long long)(row_base + i), v);
                    if (isinf(x))
                        return gt_error_set(err, GT_EINVAL,
                                            "row %lld voxel %d: energy is infinite",
                                            (long long)(row_base + i), v);
                    return gt_error_set(err, GT_EINVAL, "row %lld voxel %d: negative energy %g",
                                        (long long)(row_base + i), v, x);
                }
            }
        }
    }
    return GT_OK;
}

/* Checks one dataset: floating point, rank 2, given width; returns rows. */
static int calo_h5_check_dataset(hid_t ds, const char *name, const char *path, int64_t width,
                                 int64_t *rows, int64_t *cols, gt_error *err)
{
    hid_t type = H5Dget_type(ds);
    hid_t space = H5Dget_space(ds);
    int rc = GT_OK;
    if (type < 0 || space < 0) {
        rc = calo_h5_fail(err, GT_EFORMAT, "cannot inspect dataset in", path);
        goto done;
    }
    if (H5Tget_class(type) != H5T_FLOAT) {
        rc = gt_error_set(err, GT_EFORMAT, "%s: dataset %s is not floating point", path, name);
        goto done;
    }
    int rank = H5Sget_simple_extent_ndims(space);
    hsize_t dims[2] = {0, 0};
    if (rank != 2 || H5Sget_simple_extent_dims(space, dims, NULL) != 2) {
        rc = gt_error_set(err, GT_EFORMAT, "%s: dataset %s has rank %d, expected 2", path, name,
                          rank);
        goto done;
    }
    if (width > 0 && dims[1] != (hsize_t)width) {
        rc = gt_error_set(err, GT_EFORMAT, "%s: dataset %s has shape (%llu, %llu), expected "
                          "(N, %lld)", path, name, (unsigned long long)dims[0],
                          (unsigned long long)dims[1], (long long)width);
        goto done;
    }
    *rows = (int64_t)dims[0];
    *cols = (int64_t)dims[1];
done:
    if (type >= 0)
        H5Tclose(type);
    if (space >= 0)
        H5Sclose(space);
    return rc;
}

/* A dataset whose values live in other files (external raw files, a
 * virtual dataset's sources) would let a file inside a confined directory
 * read any file the process can: refused for every reader. */
static int calo_h5_check_local(hid_t ds, const char *name, const char *path, gt_error *err)
{
    hid_t dcpl = H5Dget_create_plist(ds);
    if (dcpl < 0)
        return calo_h5_fail(err, GT_EFORMAT, "cannot inspect dataset in", path);
    int external = H5Pget_external_count(dcpl);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    H5Pclose(dcpl);
    H5Eclear2(H5E_DEFAULT);
    if (external != 0)
        return gt_error_set(err, GT_EFORMAT, "%s: dataset %s keeps its values in external files,"
                            " which is not supported", path, name);
    if (layout == H5D_VIRTUAL)
        return gt_error_set(err, GT_EFORMAT, "%s: dataset %s is virtual (maps other files),"
                            " which is not supported", path, name);
    return GT_OK;
}

static int calo_h5_open_impl(calo_h5_reader *r, const char *path, const geo_geometry *geo,
                             gt_error *err)
{
    memset(r, 0, sizeof *r);
    r->file = r->ds_energy = r->ds_shower = -1;
    snprintf(r->path, sizeof r->path, "%s", path);
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        FILE *f = fopen(path, "rb");
        if (!f) {
            H5Eclear2(H5E_DEFAULT);
            return gt_error_set(err, GT_EIO, "cannot open %s: no such file or not readable",
                                path);
        }
        fclose(f);
        return calo_h5_fail(err, GT_EFORMAT, "not an HDF5 file (or truncated):", path);
    }
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return calo_h5_fail(err, GT_EFORMAT, "cannot open HDF5 file (truncated or corrupt?)",
                            path);
    r->file = f;
    int rc;
    const char *names[2] = {"incident_energies", "showers"};
    int64_t *ids[2] = {&r->ds_energy, &r->ds_shower};
    for (int k = 0; k < 2; k++) {
        if (H5Lexists(f, names[k], H5P_DEFAULT) <= 0) {
            H5Eclear2(H5E_DEFAULT);
            rc = gt_error_set(err, GT_EFORMAT, "%s: dataset %s is missing", path, names[k]);
            goto fail;
        }
        hid_t ds = H5Dopen2(f, names[k], H5P_DEFAULT);
        if (ds < 0) {
            rc = calo_h5_fail(err, GT_EFORMAT, "cannot open a dataset in", path);
            goto fail;
        }
        *ids[k] = ds;
    }
    int64_t ne, ce, ns, cs;
    if ((rc = calo_h5_check_dataset(r->ds_energy, names[0], path, 1, &ne, &ce, err)))
        goto fail;
    if ((rc = calo_h5_check_dataset(r->ds_shower, names[1], path, geo ? geo->n_voxels : 0, &ns,
                                    &cs, err)))
        goto fail;
    if (ne != ns) {
        rc = gt_error_set(err, GT_EFORMAT, "%s: %lld incident energies but %lld showers", path,
                          (long long)ne, (long long)ns);
        goto fail;
    }
    if (cs <= 0 || cs > 100000000) {
        rc = gt_error_set(err, GT_EFORMAT, "%s: showers have %lld voxels", path, (long long)cs);
        goto fail;
    }
    for (int k = 0; k < 2; k++)
        if ((rc = calo_h5_check_local(*ids[k], names[k], path, err)))
            goto fail;
    r->n_rows = ne;
    r->n_voxels = (int)cs;
    return GT_OK;
fail:
    calo_h5_close(r);
    return rc;
}

int calo_h5_open(calo_h5_reader *r, const char *path, const geo_geometry *geo, gt_error *err)
{
    calo_h5_lock();
    int rc = calo_h5_open_impl(r, path, geo, err);
    calo_h5_unlock();
    return rc;
}

static void calo_h5_close_impl(calo_h5_reader *r)
{
    if (!r)
        return;
    if (r->ds_energy >= 0)
        H5Dclose(r->ds_energy);
    if (r->ds_shower >= 0)
        H5Dclose(r->ds_shower);
    if (r->file >= 0)
        H5Fclose(r->file);
    r->file = r->ds_energy = r->ds_shower = -1;
}

void calo_h5_close(calo_h5_reader *r)
{
    calo_h5_lock();
    calo_h5_close_impl(r);
    calo_h5_unlock();
}

/* The rows [row0, row0 + n) of a 2-D dataset `width` wide: the selection in
 * the file (*fspace) and a matching memory space (*mspace).  Negative on
 * failure; either way the caller closes both with calo_h5_close_rows. */
static herr_t calo_h5_select_rows(hid_t ds, int64_t row0, int64_t n, int64_t width,
                                  hid_t *fspace, hid_t *mspace)
{
    hsize_t start[2] = {(hsize_t)row0, 0}, count[2] = {(hsize_t)n, (hsize_t)width};
    *fspace = H5Dget_space(ds);
    *mspace = H5Screate_simple(2, count, NULL);
    if (*fspace < 0 || *mspace < 0)
        return -1;
    return H5Sselect_hyperslab(*fspace, H5S_SELECT_SET, start, NULL, count, NULL);
}

static void calo_h5_close_rows(hid_t fspace, hid_t mspace)
{
    if (mspace >= 0)
        H5Sclose(mspace);
    if (fspace >= 0)
        H5Sclose(fspace);
}

static int calo_h5_read_slab(hid_t ds, int64_t row0, int64_t n, int64_t width, float *out,
                             const char *path, gt_error *err)
{
    hid_t fspace, mspace;
    int rc = GT_OK;
    if (calo_h5_select_rows(ds, row0, n, width, &fspace, &mspace) < 0 ||
        H5Dread(ds, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, out) < 0)
        rc = calo_h5_fail(err, GT_EIO, "read failed (truncated or corrupt file?)", path);
    calo_h5_close_rows(fspace, mspace);
    return rc;
}

/* The HDF5 part of calo_h5_read_rows, under the lock. */
static int calo_h5_read_rows_impl(calo_h5_reader *r, int64_t row0, int64_t n,
                                  float *energies, float *showers, gt_error *err)
{
    if (r->file < 0)
        return gt_error_set(err, GT_EINVAL, "reader is not open");
    if (row0 < 0 || n < 0 || row0 + n > r->n_rows)
        return gt_error_set(err, GT_EINVAL, "%s: rows [%lld, %lld) outside [0, %lld)", r->path,
                            (long long)row0, (long long)(row0 + n), (long long)r->n_rows);
    if (n == 0)
        return GT_OK;
    int rc;
    if (energies && (rc = calo_h5_read_slab(r->ds_energy, row0, n, 1, energies, r->path, err)))
        return rc;
    if (showers &&
        (rc = calo_h5_read_slab(r->ds_shower, row0, n, r->n_voxels, showers, r->path, err)))
        return rc;
    return GT_OK;
}

int calo_h5_read_rows(calo_h5_reader *r, int64_t row0, int64_t n, float *energies,
                      float *showers, gt_error *err)
{
    calo_h5_lock();
    int rc = calo_h5_read_rows_impl(r, row0, n, energies, showers, err);
    calo_h5_unlock();
    /* checked outside the lock: other threads' reads need not wait on it */
    if (rc == GT_OK && n > 0 && (rc = calo_h5_check_rows(energies, showers, n, r->n_voxels, row0,
                                                          err)))
        gt_error_wrap(err, "%s", r->path);
    return rc;
}

int calo_h5_read_next(calo_h5_reader *r, int64_t max_rows, float *energies, float *showers,
                      int64_t *row0, int64_t *n_read, gt_error *err)
{
    int64_t n = r->n_rows - r->next_row;
    if (n > max_rows)
        n = max_rows;
    if (n < 0)
        n = 0;
    *row0 = r->next_row;
    *n_read = 0;
    GT_TRY(calo_h5_read_rows(r, r->next_row, n, energies, showers, err));
    r->next_row += n;
    *n_read = n;
    return GT_OK;
}

int calo_h5_read_all(const char *path, const geo_geometry *geo, float **energies,
                     float **showers, int64_t *n_rows, gt_error *err)
{
    calo_h5_reader r;
    *energies = NULL;
    *showers = NULL;
    *n_rows = 0;
    int rc = calo_h5_open(&r, path, geo, err);
    if (rc)
        return rc;
    size_t nv = (size_t)r.n_rows * (size_t)r.n_voxels;
    float *e = malloc((r.n_rows ? r.n_rows : 1) * sizeof *e);
    float *s = malloc((nv ? nv : 1) * sizeof *s);
    if (!e || !s) {
        rc = gt_error_set(err, GT_ENOMEM, "%s: out of memory for %lld showers", path,
                          (long long)r.n_rows);
    } else {
        rc = calo_h5_read_rows(&r, 0, r.n_rows, e, s, err);
    }
    if (rc) {
        free(e);
        free(s);
    } else {
        *energies = e;
        *showers = s;
        *n_rows = r.n_rows;
    }
    calo_h5_close(&r);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Storage checks and the full scan                                          */
/* ------------------------------------------------------------------------ */

#define CALO_H5_MAX_CHUNK_BYTES (64.0 * 1024 * 1024)
/* deflate codes at most 258 bytes in about 2 bits: 1032:1, plus margin */
#define CALO_H5_MAX_DEFLATE_RATIO 1100.0

/* The filters a dataset may use: 0, or an error naming the first other. */
static int calo_h5_check_filters(hid_t dcpl, const char *name, const char *path, int *deflated,
                                 gt_error *err)
{
    int nf = H5Pget_nfilters(dcpl);
    for (int i = 0; i < nf; i++) {
        unsigned flags = 0;
        size_t nelmts = 0;
        char fname[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nelmts, NULL, sizeof fname,
                                         fname, NULL);
        if (id != H5Z_FILTER_DEFLATE && id != H5Z_FILTER_SHUFFLE && id != H5Z_FILTER_FLETCHER32)
            return gt_error_set(err, GT_EFORMAT, "%s: dataset %s uses HDF5 filter %d (%s): only "
                                "shuffle, deflate (gzip) and fletcher32 are read", path, name,
                                (int)id, fname[0] ? fname : "unnamed");
        if (H5Zfilter_avail(id) <= 0) {
            H5Eclear2(H5E_DEFAULT);
            return gt_error_set(err, GT_EFORMAT, "%s: dataset %s needs HDF5 filter %s, not in "
                                "this build of HDF5", path, name, fname);
        }
        if (id == H5Z_FILTER_DEFLATE)
            *deflated = 1;
    }
    return GT_OK;
}

/* One dataset (rows x cols) against a file of file_size bytes. */
static int calo_h5_check_one_storage(hid_t ds, const char *name, const char *path, int64_t rows,
                                     int64_t cols, int64_t file_size, int64_t *chunk_rows,
                                     int *deflated, gt_error *err)
{
    hid_t dcpl = H5Dget_create_plist(ds), type = H5Dget_type(ds);
    int rc = GT_OK, zipped = 0;
    if (dcpl < 0 || type < 0) {
        rc = calo_h5_fail(err, GT_EFORMAT, "cannot inspect dataset in", path);
        goto done;
    }
    if ((rc = calo_h5_check_filters(dcpl, name, path, &zipped, err)))
        goto done;
    /* doubles: rows * cols * size overflows int64 for declared shapes */
    double raw = (double)rows * (double)cols * (double)H5Tget_size(type);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    *chunk_rows = 0;
    if (layout == H5D_CHUNKED) {
        hsize_t cd[2] = {0, 0};
        if (H5Pget_chunk(dcpl, 2, cd) != 2) {
            rc = calo_h5_fail(err, GT_EFORMAT, "cannot read the chunk shape in", path);
            goto done;
        }
        double chunk = (double)cd[0] * (double)cd[1] * (double)H5Tget_size(type);
        if (chunk > CALO_H5_MAX_CHUNK_BYTES) {
            rc = gt_error_set(err, GT_EFORMAT, "%s: dataset %s has chunks of %.0f MiB, more "
                              "than the 64 MiB a reader decompresses at once", path, name,
                              chunk / 1048576.0);
            goto done;
        }
        *chunk_rows = (int64_t)cd[0];
    } else if (layout == H5D_CONTIGUOUS) {
        /* stored whole or not at all (HDF5 allocates it on first write); a
         * declared shape with nothing stored reads as fill values */
        hsize_t stored = H5Dget_storage_size(ds);
        haddr_t off = H5Dget_offset(ds);
        H5Eclear2(H5E_DEFAULT);
        if (raw > 0 && ((double)stored < raw || off == HADDR_UNDEF ||
                        (double)off + raw > (double)file_size)) {
            rc = gt_error_set(err, GT_EFORMAT, "%s: dataset %s declares %lld rows (%.0f bytes) "
                              "but the file stores %llu bytes of them", path, name,
                              (long long)rows, raw, (unsigned long long)stored);
            goto done;
        }
    }
    double cap = (double)file_size * (zipped ? CALO_H5_MAX_DEFLATE_RATIO : 1.0);
    if (raw > cap) {
        rc = gt_error_set(err, GT_EFORMAT, "%s: dataset %s declares %lld rows (%.3g bytes), "
                          "more than a file of %lld bytes can hold%s", path, name,
                          (long long)rows, raw, (long long)file_size,
                          zipped ? " even deflated" : "");
        goto done;
    }
    *deflated |= zipped;
done:
    if (type >= 0)
        H5Tclose(type);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    return rc;
}

int calo_h5_check_storage(calo_h5_reader *r, int64_t file_size, calo_h5_storage *st,
                          gt_error *err)
{
    if (r->file < 0)
        return gt_error_set(err, GT_EINVAL, "reader is not open");
    calo_h5_lock();
    int64_t echunk = 0, schunk = 0;
    int deflated = 0;
    int rc = calo_h5_check_one_storage(r->ds_energy, "incident_energies", r->path, r->n_rows, 1,
                                       file_size, &echunk, &deflated, err);
    if (rc == GT_OK)
        rc = calo_h5_check_one_storage(r->ds_shower, "showers", r->path, r->n_rows,
                                       r->n_voxels, file_size, &schunk, &deflated, err);
    calo_h5_unlock();
    if (rc == GT_OK && st) {
        st->chunk_rows = schunk;
        st->compressed = deflated;
    }
    return rc;
}

/* Rows per scan block: about 1 MiB of showers, rounded up to whole chunks
 * of the showers (a chunk split between blocks would be decompressed
 * twice) unless a chunk alone is over 64 MiB.  Each block holds the
 * process-wide HDF5 lock while it is read: a small one lets an HTTP
 * thread's open wait milliseconds, not the time of a big read. */
static int64_t calo_h5_scan_block(calo_h5_reader *r)
{
    int64_t rows = (int64_t)(256 << 10) / r->n_voxels;
    if (rows < 1)
        rows = 1;
    calo_h5_lock();
    hid_t dcpl = H5Dget_create_plist(r->ds_shower);
    hsize_t cd[2] = {0, 0};
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, 2, cd) == 2 &&
        cd[0] > 0 && (double)cd[0] * (double)r->n_voxels * 4.0 <= CALO_H5_MAX_CHUNK_BYTES)
        rows = ((rows + (int64_t)cd[0] - 1) / (int64_t)cd[0]) * (int64_t)cd[0];
    if (dcpl >= 0)
        H5Pclose(dcpl);
    H5Eclear2(H5E_DEFAULT);
    calo_h5_unlock();
    return rows;
}

/* Rows [row0, row0 + n) failed to read as a block: reads them one at a
 * time and reports the first that fails (a value error there names its own
 * row and voxel).  Returns the block's error if every row reads alone. */
static int calo_h5_first_bad_row(calo_h5_reader *r, int64_t row0, int64_t n, float *e, float *s,
                                 gt_error *err)
{
    gt_error block = *err, one = {0};
    for (int64_t i = row0; i < row0 + n; i++) {
        int rc = calo_h5_read_rows(r, i, 1, e, s, &one);
        if (rc == GT_EINVAL)
            return gt_error_set(err, rc, "%s", one.message);
        if (rc) {
            /* HDF5's reason without the path the read error starts with */
            const char *at = strstr(one.message, r->path);
            const char *why = at && at[strlen(r->path)] == ':' ? at + strlen(r->path) + 2
                                                                : one.message;
            return gt_error_set(err, rc, "%s: row %lld: cannot be read, the file is corrupt or "
                                "truncated: %s", r->path, (long long)i, why);
        }
    }
    *err = block;
    return gt_error_wrap(err, "rows %lld to %lld: cannot be read", (long long)row0,
                         (long long)(row0 + n - 1));
}

int calo_h5_scan(calo_h5_reader *r, int64_t block_rows, calo_h5_scan_fn fn, void *user,
                 calo_h5_scan_stats *out, gt_error *err)
{
    memset(out, 0, sizeof *out);
    if (r->file < 0)
        return gt_error_set(err, GT_EINVAL, "reader is not open");
    if (block_rows <= 0)
        block_rows = calo_h5_scan_block(r);
    if (block_rows > r->n_rows && r->n_rows > 0)
        block_rows = r->n_rows;
    float *e = malloc((size_t)block_rows * sizeof *e);
    float *s = malloc((size_t)block_rows * (size_t)r->n_voxels * sizeof *s);
    int rc = GT_OK;
    if (!e || !s)
        rc = gt_error_set(err, GT_ENOMEM, "%s: out of memory for a block of %lld rows", r->path,
                          (long long)block_rows);
    for (int64_t row0 = 0; rc == GT_OK && row0 < r->n_rows; row0 += block_rows) {
        int64_t m = r->n_rows - row0 < block_rows ? r->n_rows - row0 : block_rows;
        rc = calo_h5_read_rows(r, row0, m, e, s, err);
        if (rc && rc != GT_EINVAL)
            rc = calo_h5_first_bad_row(r, row0, m, e, s, err);
        if (rc)
            break;
        for (int64_t i = 0; i < m; i++) {
            if (out->rows + i == 0 || e[i] < out->e_min)
                out->e_min = e[i];
            if (out->rows + i == 0 || e[i] > out->e_max)
                out->e_max = e[i];
        }
        out->rows += m;
        if (fn && (rc = fn(user, out->rows, r->n_rows)))
            gt_error_set(err, rc, "stopped after %lld rows", (long long)out->rows);
    }
    free(e);
    free(s);
    return rc;
}

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
