#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
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
	unlink(path);
	free(buf);
	return fd;
}

Test(fileio, whole_and_partial_ranges_read)
{
	int fd = temp_file(3 << 20 | 123);

	cr_assert_eq(cis_file_range_readable(fd, 0, 3 << 20 | 123), 0);
	cr_assert_eq(cis_file_range_readable(fd, 4097, 2 << 20), 0);
	cr_assert_eq(cis_file_range_readable(fd, 100, 100), 0, "an empty range");
	/* Not in the page cache: read for real. */
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	cr_assert_eq(cis_file_range_readable(fd, 1, 3 << 20), 0);
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
