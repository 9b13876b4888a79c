/* The file:// connector's versions and checks: a rewrite of the same size
 * that kept its modification time is a new version (the change time tells
 * it apart), and paths up to what the kernel takes are valid. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cistern/error.h"
#include "cistern/ufs.h"
#include "cistern/ufs_backend.h"

static char root[64];
static cis_ufs *u;

static void setup(void)
{
	char uri[128];
	cis_errmsg em = {{0}};

	snprintf(root, sizeof(root), "/tmp/cis-posix.XXXXXX");
	cr_assert_not_null(mkdtemp(root));
	snprintf(uri, sizeof(uri), "file://%s", root);
	cr_assert_eq(cis_ufs_open(uri, NULL, &u, &em), 0, "%s", em.text);
}

static void teardown(void)
{
	char cmd[128];

	cis_ufs_close(u);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(posix, .init = setup, .fini = teardown, .timeout = 30);

static void write_at(const char *name, const char *bytes)
{
	char p[4200];
	snprintf(p, sizeof(p), "%s/%s", root, name);
	int fd = open(p, O_CREAT | O_WRONLY, 0644);
	cr_assert_geq(fd, 0, "%s", p);
	cr_assert_eq(pwrite(fd, bytes, strlen(bytes), 0), (ssize_t)strlen(bytes));
	close(fd);
}

Test(posix, a_same_size_rewrite_that_kept_its_mtime_is_a_new_version)
{
	struct cis_ufs_stat a, b;
	cis_errmsg em = {{0}};
	struct stat sb;
	char p[128];

	write_at("f", "version one");
	snprintf(p, sizeof(p), "%s/f", root);
	cr_assert_eq(stat(p, &sb), 0);
	cr_assert_eq(cis_ufs_stat(u, "f", &a, &em), 0, "%s", em.text);
	usleep(20000); /* past the file system's clock tick */
	write_at("f", "version two");
	/* as rsync --inplace -t or touch -r leave it */
	struct timespec times[2] = {sb.st_atim, sb.st_mtim};
	cr_assert_eq(utimensat(AT_FDCWD, p, times, 0), 0);
	cr_assert_eq(cis_ufs_stat(u, "f", &b, &em), 0, "%s", em.text);
	cr_assert_eq(a.size, b.size);
	cr_assert_eq(a.mtime_ns, b.mtime_ns);
	cr_assert_str_neq(a.version, b.version, "the rewrite kept version %s", a.version);
}

Test(posix, paths_up_to_what_the_kernel_takes_are_valid)
{
	char key[4096];
	struct cis_ufs_stat st;
	cis_errmsg em = {{0}};
	size_t n = 0;

	/* 16 levels of 250-byte names: 4015 bytes, past S3's 1024 */
	for (int lvl = 0; lvl < 16; lvl++) {
		if (lvl)
			key[n++] = '/';
		memset(key + n, 'a' + lvl, 250);
		n += 250;
		key[n] = 0;
		if (lvl < 15) {
			char p[4200];
			snprintf(p, sizeof(p), "%s/%s", root, key);
			cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
		}
	}
	write_at(key, "deep");
	cr_assert_eq(cis_ufs_stat(u, key, &st, &em), 0, "%s", em.text);
	cr_assert_eq(st.size, 4);
	/* written and deleted there too (the parent's path is 3764 bytes) */
	cr_assert_eq(cis_ufs_write_buf(u, key, "again", 5, &em), 0, "%s", em.text);
	cr_assert_eq(cis_ufs_stat(u, key, &st, &em), 0, "%s", em.text);
	cr_assert_eq(st.size, 5);
	cr_assert_eq(cis_ufs_delete(u, key, &em), 0, "%s", em.text);
	cr_assert_eq(cis_ufs_check_path(key), 0);
	char longer[4200];
	memset(longer, 'z', 4096);
	longer[4096] = 0;
	cr_assert_eq(cis_ufs_check_path(longer), -EINVAL, "4096 bytes is past PATH_MAX");
}
