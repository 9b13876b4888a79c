/* Two ways LMDB's mappings turn a bad file into a SIGBUS, made clear errors.
 *
 * LMDB maps its lock file and writes through the mapping. On a full file
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

/* LMDB checks a data file's header pages at open, not that the file holds
 * the pages they name: one cut short (a truncate, a power loss with
 * MDB_NOSYNC) is a SIGBUS at the first read of a page past its end. 0 when
 * the opened env's data file is as long as its last page says, else
 * -EIO with em naming the file (path) and what to do. */
struct MDB_env;
int cis_lmdb_check_length(struct MDB_env *env, const char *path, cis_errmsg *em);

#endif
