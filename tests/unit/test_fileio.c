#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cistern/fileio.h"

/* A temporary file of len bytes, open for reading; unlinked. In the
 * working directory (the build's), on a disk: a tmpfs /tmp keeps every
 * page in memory. */
static int temp_file(size_t len)
{
	char path[] = "cis-fileio-XXXXXX";
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
	if (resident_pages(fd, 3 << 20) == pages(3 << 20)) {
		close(fd);
		cr_skip_test("the page cache keeps this file after a drop (a tmpfs build dir?)");
	}
	cr_assert_eq(cis_file_range_readable(fd, 1, 3 << 20), 0);
	cr_assert_eq(resident_pages(fd, 3 << 20), pages(3 << 20),
	             "the range read is not in the page cache");
	close(fd);
}

/* No descriptor to spare for /dev/null: the range is read through a buffer,
 * into the page cache all the same, and still reported readable. */
Test(fileio, without_a_descriptor_to_spare_the_range_is_read_all_the_same)
{
	int fd = temp_file(2 << 20);
	struct rlimit was, none;

	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &was), 0);
	none = was;
	none.rlim_cur = (rlim_t)fd + 1; /* fd is the highest open one */
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &none), 0);
	int spare = open("/dev/null", O_RDONLY);
	int rc = cis_file_range_readable(fd, 0, 2 << 20);
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &was), 0);
	cr_assert_lt(spare, 0, "a descriptor was to be had: the test proves nothing");
	cr_assert_eq(rc, 0);
	cr_assert_eq(resident_pages(fd, 2 << 20), pages(2 << 20));
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
