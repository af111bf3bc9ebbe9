/* calo_h5: CaloChallenge HDF5 files (libhdf5 C API): what reading and
 * writing share (the process-wide lock, HDF5's errors folded into a
 * gt_error, the row checks, row selections), and the reader: opening,
 * row ranges, the storage check and the full scan.  The writer is
 * calo_h5_write.c. */
#include "calo_h5.h"
#include "calo_h5_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>
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

void calo_h5_lock(void)
{
    pthread_once(&calo_h5_lock_once, calo_h5_lock_init);
    pthread_mutex_lock(&calo_h5_lock_mu);
    calo_h5_quiet();
}

void calo_h5_unlock(void)
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
int calo_h5_fail(gt_error *err, int code, const char *what, const char *path)
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
herr_t calo_h5_select_rows(hid_t ds, int64_t row0, int64_t n, int64_t width, hid_t *fspace,
                           hid_t *mspace)
{
    hsize_t start[2] = {(hsize_t)row0, 0}, count[2] = {(hsize_t)n, (hsize_t)width};
    *fspace = H5Dget_space(ds);
    *mspace = H5Screate_simple(2, count, NULL);
    if (*fspace < 0 || *mspace < 0)
        return -1;
    return H5Sselect_hyperslab(*fspace, H5S_SELECT_SET, start, NULL, count, NULL);
}

void calo_h5_close_rows(hid_t fspace, hid_t mspace)
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
