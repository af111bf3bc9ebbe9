#include "fault_vfs.h"

#include <stdatomic.h>
#include <string.h>

#include <sqlite3.h>

/* One open file: our methods first (SQLite sees this struct), the wrapped
 * VFS's file right behind it in the same allocation (szOsFile covers both). */
typedef struct fault_file {
    sqlite3_file base;
    sqlite3_file *real;
} fault_file;

static sqlite3_vfs *inner;           /* the default VFS before ours */
static sqlite3_vfs shim;
static atomic_int installed;

static atomic_llong ops;             /* writes, truncates and syncs so far */
static atomic_llong fail_from;       /* first failing op number, 0 = none  */
static atomic_llong fail_until;      /* first op number past the failures  */
static atomic_int fail_kind;
static atomic_llong injected;

/* Numbers this write or sync; the code it must fail with, or SQLITE_OK. */
static int tick(int ioerr_code)
{
    long long n = atomic_fetch_add(&ops, 1) + 1;
    long long from = atomic_load(&fail_from);
    if (from <= 0 || n < from || n >= atomic_load(&fail_until))
        return SQLITE_OK;
    atomic_fetch_add(&injected, 1);
    return atomic_load(&fail_kind) == FAULT_VFS_FULL ? SQLITE_FULL : ioerr_code;
}

static sqlite3_file *real_of(sqlite3_file *f)
{
    return ((fault_file *)f)->real;
}

static int f_close(sqlite3_file *f)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods ? r->pMethods->xClose(r) : SQLITE_OK;
}

static int f_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xRead(r, buf, n, off);
}

static int f_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off)
{
    int rc = tick(SQLITE_IOERR_WRITE);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_file *r = real_of(f);
    return r->pMethods->xWrite(r, buf, n, off);
}

static int f_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    int rc = tick(SQLITE_IOERR_TRUNCATE);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_file *r = real_of(f);
    return r->pMethods->xTruncate(r, size);
}

static int f_sync(sqlite3_file *f, int flags)
{
    int rc = tick(SQLITE_IOERR_FSYNC);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_file *r = real_of(f);
    return r->pMethods->xSync(r, flags);
}

static int f_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xFileSize(r, size);
}

static int f_lock(sqlite3_file *f, int lock)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xLock(r, lock);
}

static int f_unlock(sqlite3_file *f, int lock)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xUnlock(r, lock);
}

static int f_check_reserved(sqlite3_file *f, int *out)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xCheckReservedLock(r, out);
}

static int f_file_control(sqlite3_file *f, int op, void *arg)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xFileControl(r, op, arg);
}

static int f_sector_size(sqlite3_file *f)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xSectorSize(r);
}

static int f_device_characteristics(sqlite3_file *f)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xDeviceCharacteristics(r);
}

/* The shared-memory index (WAL): memory, not writes to a file, so never
 * failed; passed through when the wrapped file has it. */
static int f_shm_map(sqlite3_file *f, int page, int size, int extend, void volatile **out)
{
    sqlite3_file *r = real_of(f);
    if (r->pMethods->iVersion < 2 || !r->pMethods->xShmMap)
        return SQLITE_IOERR_SHMMAP;
    return r->pMethods->xShmMap(r, page, size, extend, out);
}

static int f_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xShmLock(r, offset, n, flags);
}

static void f_shm_barrier(sqlite3_file *f)
{
    sqlite3_file *r = real_of(f);
    r->pMethods->xShmBarrier(r);
}

static int f_shm_unmap(sqlite3_file *f, int del)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods->xShmUnmap(r, del);
}

static int f_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **out)
{
    sqlite3_file *r = real_of(f);
    if (r->pMethods->iVersion < 3 || !r->pMethods->xFetch) {
        *out = NULL;
        return SQLITE_OK;
    }
    return r->pMethods->xFetch(r, off, n, out);
}

static int f_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    sqlite3_file *r = real_of(f);
    if (r->pMethods->iVersion < 3 || !r->pMethods->xUnfetch)
        return SQLITE_OK;
    return r->pMethods->xUnfetch(r, off, p);
}

static const sqlite3_io_methods methods = {
    3,
    f_close, f_read, f_write, f_truncate, f_sync, f_file_size, f_lock, f_unlock,
    f_check_reserved, f_file_control, f_sector_size, f_device_characteristics,
    f_shm_map, f_shm_lock, f_shm_barrier, f_shm_unmap, f_fetch, f_unfetch,
};

/* Files without shared memory (journals, temporary files, the WAL itself)
 * must not claim version 2: SQLite would take them for WAL-capable. */
static const sqlite3_io_methods methods_v1 = {
    1,
    f_close, f_read, f_write, f_truncate, f_sync, f_file_size, f_lock, f_unlock,
    f_check_reserved, f_file_control, f_sector_size, f_device_characteristics,
    NULL, NULL, NULL, NULL, NULL, NULL,
};

static int v_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out)
{
    (void)vfs;
    fault_file *f = (fault_file *)file;
    f->real = (sqlite3_file *)(f + 1);
    memset(f->real, 0, (size_t)inner->szOsFile);
    int rc = inner->xOpen(inner, name, f->real, flags, out);
    if (f->real->pMethods)
        f->base.pMethods = f->real->pMethods->iVersion >= 2 ? &methods : &methods_v1;
    else
        f->base.pMethods = NULL;
    return rc;
}

/* The rest of the VFS passes straight to the wrapped one. */
static int v_delete(sqlite3_vfs *v, const char *name, int sync_dir)
{
    (void)v;
    return inner->xDelete(inner, name, sync_dir);
}

static int v_access(sqlite3_vfs *v, const char *name, int flags, int *out)
{
    (void)v;
    return inner->xAccess(inner, name, flags, out);
}

static int v_full_pathname(sqlite3_vfs *v, const char *name, int n, char *out)
{
    (void)v;
    return inner->xFullPathname(inner, name, n, out);
}

static void *v_dl_open(sqlite3_vfs *v, const char *name)
{
    (void)v;
    return inner->xDlOpen(inner, name);
}

static void v_dl_error(sqlite3_vfs *v, int n, char *msg)
{
    (void)v;
    inner->xDlError(inner, n, msg);
}

static void (*v_dl_sym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
    (void)v;
    return inner->xDlSym(inner, h, sym);
}

static void v_dl_close(sqlite3_vfs *v, void *h)
{
    (void)v;
    inner->xDlClose(inner, h);
}

static int v_randomness(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return inner->xRandomness(inner, n, out);
}

static int v_sleep(sqlite3_vfs *v, int us)
{
    (void)v;
    return inner->xSleep(inner, us);
}

static int v_current_time(sqlite3_vfs *v, double *out)
{
    (void)v;
    return inner->xCurrentTime(inner, out);
}

static int v_get_last_error(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return inner->xGetLastError ? inner->xGetLastError(inner, n, out) : 0;
}

static int v_current_time_int64(sqlite3_vfs *v, sqlite3_int64 *out)
{
    (void)v;
    return inner->xCurrentTimeInt64(inner, out);
}

int fault_vfs_install(void)
{
    if (atomic_load(&installed))
        return SQLITE_OK;
    int rc = sqlite3_initialize();
    if (rc != SQLITE_OK)
        return rc;
    inner = sqlite3_vfs_find(NULL);
    if (!inner)
        return SQLITE_ERROR;
    /* Version 2 is all SQLite needs (xCurrentTimeInt64); the version 3
     * system-call hooks are for SQLite's own test harness. */
    shim = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(fault_file) + inner->szOsFile,
        .mxPathname = inner->mxPathname,
        .zName = "giant-fault",
        .xOpen = v_open,
        .xDelete = v_delete,
        .xAccess = v_access,
        .xFullPathname = v_full_pathname,
        .xDlOpen = v_dl_open,
        .xDlError = v_dl_error,
        .xDlSym = v_dl_sym,
        .xDlClose = v_dl_close,
        .xRandomness = v_randomness,
        .xSleep = v_sleep,
        .xCurrentTime = v_current_time,
        .xGetLastError = v_get_last_error,
        .xCurrentTimeInt64 = v_current_time_int64,
    };
    if ((rc = sqlite3_vfs_register(&shim, 1)) != SQLITE_OK)
        return rc;
    atomic_store(&installed, 1);
    return SQLITE_OK;
}

int fault_vfs_installed(void)
{
    return atomic_load(&installed);
}

void fault_vfs_arm(long long after, long long count, fault_vfs_kind kind)
{
    if (after <= 0 || count <= 0) {
        fault_vfs_disarm();
        return;
    }
    /* Until first: the window is set before it opens. */
    atomic_store(&fail_from, 0);
    atomic_store(&fail_kind, (int)kind);
    long long first = atomic_load(&ops) + after;
    atomic_store(&fail_until, first + count);
    atomic_store(&fail_from, first);
}

void fault_vfs_disarm(void)
{
    atomic_store(&fail_from, 0);
}

long long fault_vfs_ops(void)
{
    return atomic_load(&ops);
}

long long fault_vfs_injected(void)
{
    return atomic_load(&injected);
}
