#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cistern/fileio.h"

/* A temporary file of len bytes, open for reading; unlinked. */
static int temp_file(size_t len)
{
	char path[] = "/tmp/cis-fileio-XXXXXX";
	int fd = mkstemp(path);
	char *buf = malloc(len ? len : 1);

	cr_assert(fd >= 0 && buf);
	memset(buf, 'x', len);
	cr_assert_eq(write(fd, buf, len), (ssize_t)len);
	cr_assert_eq(fsync(fd), 0, "written back, so that the page cache can drop it");
	unlink(path);
	free(buf);
	return fd;
}

static size_t pages(size_t len)
{
	return len / (size_t)sysconf(_SC_PAGESIZE);
}

/* Pages of fd's first len bytes (a whole number of pages) in the page
 * cache. */
static size_t resident_pages(int fd, size_t len)
{
	size_t n = pages(len), got = 0;
	unsigned char *v = calloc(n, 1);
	void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);

	cr_assert(v && map != MAP_FAILED);
	cr_assert_eq(mincore(map, len, v), 0);
	for (size_t i = 0; i < n; i++)
		got += v[i] & 1;
	munmap(map, len);
	free(v);
	return got;
}

Test(fileio, whole_and_partial_ranges_read)
{
	int fd = temp_file(3 << 20 | 123);

	cr_assert_eq(cis_file_range_readable(fd, 0, 3 << 20 | 123), 0);
	cr_assert_eq(cis_file_range_readable(fd, 4097, 2 << 20), 0);
	cr_assert_eq(cis_file_range_readable(fd, 100, 100), 0, "an empty range");
	/* Not in the page cache: read for real, into it. */
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	cr_assert_lt(resident_pages(fd, 3 << 20), pages(3 << 20), "the drop left the file cached");
	cr_assert_eq(cis_file_range_readable(fd, 1, 3 << 20), 0);
	cr_assert_eq(resident_pages(fd, 3 << 20), pages(3 << 20),
	             "the range read is not in the page cache");
	close(fd);
}

Test(fileio, a_file_shorter_than_the_range_fails)
{
	int fd = temp_file(10000);

	cr_assert_eq(cis_file_range_readable(fd, 0, 20000), -EIO);
	cr_assert_eq(cis_file_range_readable(fd, 12000, 13000), -EIO);
	close(fd);
}

Test(fileio, a_bad_descriptor_fails)
{
	cr_assert_eq(cis_file_range_readable(-1, 0, 10), -EBADF);
}
