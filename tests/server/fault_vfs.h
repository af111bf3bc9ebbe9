/* fault_vfs: a SQLite VFS that fails chosen writes, for fault-injection
 * tests.  Never linked into the shipped binary.
 *
 * It wraps the VFS that was the default (unix) and becomes the default, so
 * every connection the process opens afterwards goes through it.  Every
 * xWrite, xTruncate and xSync of every file (database, WAL, journals,
 * temporary files) is numbered from 1 in one process-wide count; armed, the
 * operations numbered [from, from + count) fail with SQLITE_IOERR_* (an I/O
 * error) or SQLITE_FULL (a full disk) instead of reaching the file, as a
 * real failing disk would answer.  Unarmed it only counts, so it can sit
 * under a whole test server.  Counters are atomics: the HTTP threads and
 * the workers write on their own connections concurrently. */
#ifndef FAULT_VFS_H
#define FAULT_VFS_H

/* Registers the shim as the default VFS; call before any sqlite3_open.
 * 0, or a SQLite error code; a second call does nothing. */
int fault_vfs_install(void);
/* 1 when installed. */
int fault_vfs_installed(void);

typedef enum { FAULT_VFS_IOERR, FAULT_VFS_FULL } fault_vfs_kind;

/* The after-th write or sync from now (1 = the next one) and the count - 1
 * after it fail with kind.  after <= 0 disarms. */
void fault_vfs_arm(long long after, long long count, fault_vfs_kind kind);
void fault_vfs_disarm(void);

/* Writes and syncs so far, and how many of them failed on purpose. */
long long fault_vfs_ops(void);
long long fault_vfs_injected(void);

#endif
