/* See cistern/lmdb_lock.h. */
#include "cistern/lmdb_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
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

int cis_lmdb_check_length(MDB_env *env, const char *path, cis_errmsg *em)
{
	MDB_envinfo info;
	MDB_stat st;
	mdb_filehandle_t fd;
	struct stat sb;

	if (mdb_env_info(env, &info) || mdb_env_stat(env, &st) || mdb_env_get_fd(env, &fd) ||
	    fstat(fd, &sb) < 0)
		return cis_fail(em, -EIO, "%s: cannot check its length", path);
	uint64_t need = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
	if ((uint64_t)sb.st_size < need)
		return cis_fail(em, -EIO,
		                "%s: cut short (%lld bytes, its pages need %llu): the file is "
		                "damaged; move it away to start afresh",
		                path, (long long)sb.st_size, (unsigned long long)need);
	return 0;
}
