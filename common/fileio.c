#include "cistern/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/types.h>
#include <unistd.h>

#define RUN_MAX (4u << 20) /* bytes read into the page cache per call */
#define SCRATCH (1u << 20) /* bytes per pread where sendfile cannot read */

/* Read [pos, pos + len) of fd into a scratch buffer: for a file system
 * that cannot splice. */
static int read_through_buffer(int fd, uint64_t pos, size_t len)
{
	char *scratch = malloc(SCRATCH);
	int rc = 0;

	if (!scratch)
		return -ENOMEM;
	while (len > 0 && rc == 0) {
		ssize_t n = pread(fd, scratch, len < SCRATCH ? len : SCRATCH, (off_t)pos);

		if (n > 0) {
			pos += (uint64_t)n;
			len -= (size_t)n;
		} else if (!(n < 0 && errno == EINTR)) {
			rc = n < 0 ? -errno : -EIO;
		}
	}
	free(scratch);
	return rc;
}

/* Bring [pos, pos + len) of fd into the page cache, reporting the disk's
 * error: sendfile to /dev/null splices page references and copies no byte
 * (a pread into a scratch buffer copies every one, a memory copy of each
 * byte a worker serves cold). 0, or a negative errno (-EIO for a file that
 * ends before pos + len). */
static int read_into_cache(int fd, int null_fd, uint64_t pos, size_t len)
{
	while (len > 0) {
		off_t at = (off_t)pos;
		ssize_t n = sendfile(null_fd, fd, &at, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EINVAL || errno == ENOSYS))
			return read_through_buffer(fd, pos, len);
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		pos += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

int cis_file_range_readable(int fd, uint64_t off, uint64_t end)
{
	if (end <= off)
		return 0;
	const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	const uint64_t start = off & ~(pg - 1);
	const size_t len = (size_t)(end - start), npages = (size_t)((len + pg - 1) / pg);
	unsigned char *resident = calloc(npages, 1); /* 0: not known to be cached */
	int null_fd = -1;
	uint64_t pos = off;
	int rc = 0;

	if (!resident)
		return -ENOMEM;
	void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)start);
	if (map != MAP_FAILED) {
		if (mincore(map, len, resident) != 0)
			memset(resident, 0, npages);
		munmap(map, len);
	}
	while (pos < end && rc == 0) {
		size_t page = (size_t)((pos - start) / pg), last = page;

		if (resident[page] & 1) {
			pos = start + (page + 1) * pg;
			continue;
		}
		/* The run of pages not cached, read in one call. */
		while (last + 1 < npages && !(resident[last + 1] & 1) &&
		       (last + 1 - page) * pg < RUN_MAX)
			last++;
		uint64_t run_end = start + (last + 1) * pg;
		if (run_end > end)
			run_end = end;
		if (null_fd < 0)
			null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
		/* No descriptor to spare for /dev/null: through a buffer. */
		rc = null_fd >= 0 ? read_into_cache(fd, null_fd, pos, (size_t)(run_end - pos))
		                  : read_through_buffer(fd, pos, (size_t)(run_end - pos));
		pos = run_end;
	}
	if (null_fd >= 0)
		close(null_fd);
	free(resident);
	return rc;
}
