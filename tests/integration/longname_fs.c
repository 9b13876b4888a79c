/* A read-only FUSE file system of two files, one with a name longer than a
 * path component may be elsewhere: 200 CJK characters, 600 bytes of UTF-8
 * (FUSE takes names up to 1,024 bytes; vfat 255 UTF-16 units). The
 * file:// connector must list a store directory holding such a name.
 *
 * Usage: longname_fs MOUNTPOINT (foreground; fusermount3 -u to stop). */
#define FUSE_USE_VERSION 31
#include <errno.h>
#include <fuse.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define LONG_CHARS 200

static char long_name[LONG_CHARS * 3 + 2]; /* "/" and the name */
static const char content[] = "long\n";

static int lfs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	(void)fi;
	memset(st, 0, sizeof(*st));
	if (!strcmp(path, "/")) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	}
	if (!strcmp(path, long_name) || !strcmp(path, "/short.txt")) {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)strlen(content);
		return 0;
	}
	return -ENOENT;
}

static int lfs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                       struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	(void)off;
	(void)fi;
	(void)flags;
	if (strcmp(path, "/"))
		return -ENOENT;
	fill(buf, ".", NULL, 0, 0);
	fill(buf, "..", NULL, 0, 0);
	fill(buf, long_name + 1, NULL, 0, 0);
	fill(buf, "short.txt", NULL, 0, 0);
	return 0;
}

static int lfs_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	size_t len = strlen(content);
	if (strcmp(path, long_name) && strcmp(path, "/short.txt"))
		return -ENOENT;
	if ((size_t)off >= len)
		return 0;
	if (size > len - (size_t)off)
		size = len - (size_t)off;
	memcpy(buf, content + off, size);
	return (int)size;
}

static const struct fuse_operations lfs_ops = {
    .getattr = lfs_getattr,
    .readdir = lfs_readdir,
    .read = lfs_read,
};

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: longname_fs MOUNTPOINT\n");
		return 2;
	}
	long_name[0] = '/';
	for (int i = 0; i < LONG_CHARS; i++)
		memcpy(long_name + 1 + 3 * i, "\xe8\xaa\x9e", 3); /* 語 */
	char *fargv[] = {argv[0], "-f", "-o", "ro", argv[1], NULL};
	return fuse_main(5, fargv, &lfs_ops, NULL);
}
