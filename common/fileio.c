#include "cistern/fileio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#define SCRATCH (1u << 20) /* bytes read at once where not cached */

int cis_file_range_readable(int fd, uint64_t off, uint64_t end)
{
	if (end <= off)
		return 0;
	const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	const uint64_t start = off & ~(pg - 1);
	const size_t len = (size_t)(end - start), npages = (size_t)((len + pg - 1) / pg);
	unsigned char *resident = calloc(npages, 1); /* 0: not known to be cached */
	char *scratch = NULL;
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
		size_t page = (size_t)((pos - start) / pg);

		if (resident[page] & 1) {
			pos = start + (page + 1) * pg;
			continue;
		}
		if (!scratch && !(scratch = malloc(SCRATCH))) {
			rc = -ENOMEM;
			break;
		}
		size_t want = end - pos < SCRATCH ? (size_t)(end - pos) : SCRATCH;
		ssize_t n = pread(fd, scratch, want, (off_t)pos);

		if (n > 0)
			pos += (uint64_t)n;
		else if (!(n < 0 && errno == EINTR))
			rc = n < 0 ? -errno : -EIO;
	}
	free(resident);
	free(scratch);
	return rc;
}
