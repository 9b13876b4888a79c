/* LMDB maps its lock file and writes through the mapping. On a full file
 * system the first write to a page of it that has no block on disk yet is
 * a SIGBUS, not an error: a daemon started with its state on a full disk
 * died of it. Allocating the file's blocks before mdb_env_open turns that
 * into a clear ENOSPC. */
#ifndef CISTERN_LMDB_LOCK_H
#define CISTERN_LMDB_LOCK_H

#include "cistern/error.h"

/* Bytes allocated: room for LMDB's reader table at our reader counts (at
 * most 1024 readers of 64 bytes) with its header. LMDB takes a lock file
 * of this size as it is, with room for more readers. */
#define CIS_LMDB_LOCK_BYTES (256u << 10)

/* Create lock_path (the environment's lock file: "<dir>/lock.mdb", or
 * "<path>-lock" with MDB_NOSUBDIR) if needed and allocate its blocks. 0, or
 * a negative errno with em saying which file and why. */
int cis_lmdb_lock_prepare(const char *lock_path, cis_errmsg *em);

#endif
