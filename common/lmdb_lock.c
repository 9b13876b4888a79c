/* See cistern/lmdb_lock.h. */
#include "cistern/lmdb_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

int cis_lmdb_lock_prepare(const char *lock_path, cis_errmsg *em)
{
	int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return cis_fail(em, -errno, "%s: %s", lock_path, strerror(errno));
	int rc = posix_fallocate(fd, 0, CIS_LMDB_LOCK_BYTES);
	close(fd);
	if (rc)
		return cis_fail(em, -rc, "%s: %s (LMDB's lock file needs %u KiB)", lock_path,
		                strerror(rc), CIS_LMDB_LOCK_BYTES >> 10);
	return 0;
}
