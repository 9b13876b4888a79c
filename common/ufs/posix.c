/* The POSIX connector: "file:///abs/dir", a local or NFS directory.
 *
 * Every path is resolved relative to a descriptor of the root with
 * openat2(RESOLVE_BENEATH): symbolic links are followed, but one that leads
 * outside the root (absolute, or ".." past the root) fails with -EACCES, so a
 * store can never expose files beyond its directory. A listing shows a link
 * as a link, with its text as it is (a client resolves it in its own
 * namespace, as with NFS), whatever it points at. The root is opened per
 * call (one extra openat per operation) rather than once at open time, so
 * that opening contacts nothing and a directory that is replaced or mounted
 * later is picked up.
 *
 * An object's version is "size-mtime_ns-ctime_ns": the change time, which no
 * program can set, tells apart a same-size rewrite that kept its mtime
 * (rsync --inplace -t, touch -r, archives with fixed times). Writes go to a temporary file in
 * the target's directory and are renamed over it, so readers see the old or
 * the new bytes, never a mix; the new file's mtime is set to the current
 * time in nanoseconds and made to differ from the replaced file's, so every
 * overwrite yields a new version even where the file system's clock is
 * coarse.
 *
 * A listing is paged by name, and a directory can only be read whole: the
 * first page reads and sorts every name, and the names after the page are
 * kept (a few directories' worth) for the next page, which takes them if
 * the directory is the same one, unchanged (inode and mtime). Reading the
 * whole directory again for each page made a listing of n names cost
 * n / 1000 sorts of n names: minutes for a million. */
#include "cistern/ufs_backend.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cistern/time.h"

#define POSIX_LIST_DEFAULT 1000
#define POSIX_READ_CHUNK   (1u << 20)
#define POSIX_TMP_PREFIX   ".cis-tmp."

#define POSIX_LISTINGS   4     /* directories whose next page is kept */
#define POSIX_LISTING_MS 60000 /* for at most this long (a listing given up) */

/* The sorted names a listing has not returned yet: those after the token
 * its next page comes with. */
struct posix_listing {
	char *dir; /* NULL: a free slot */
	char *token;
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
	char **names;
	size_t n;
	uint64_t stamp;   /* when kept; the oldest slot is reused first */
	uint64_t kept_ms; /* monotonic */
};

struct posix_state {
	char *root; /* absolute, no trailing slash except for "/" itself */
	bool fsync;
	pthread_mutex_t lock; /* the listings */
	struct posix_listing listings[POSIX_LISTINGS];
	uint64_t stamps;
};

static int sys_openat2(int dirfd, const char *path, int flags, mode_t mode)
{
	struct open_how how = {
	    .flags = (uint64_t)flags | O_CLOEXEC,
	    .mode = flags & O_CREAT ? mode : 0,
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	long fd;
	int busy = 0;

	/* EAGAIN: a ".." under RESOLVE_BENEATH met a rename or a mount
	 * somewhere on the system meanwhile; the kernel asks for a retry. */
	do
		fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	while (fd < 0 && (errno == EINTR || (errno == EAGAIN && ++busy < 16)));
	if (fd < 0 && errno == EXDEV)
		errno = EACCES; /* a link (or path) leads outside the root */
	return (int)fd;
}

static int posix_open(const char *rest, const cis_kvlist *options, void **state, cis_errmsg *em)
{
	struct posix_state *s;
	const char *opt;
	size_t len;

	if (strncmp(rest, "localhost/", 10) == 0) /* file://localhost/dir is file:///dir */
		rest += 9;
	/* never echo what may be a secret (which may hold a '/') */
	if (rest[0] != '/' && (strchr(rest, '@') || memchr(rest, ':', strcspn(rest, "/"))))
		return cis_fail(em, -CIS_E_URI,
		                "file uri: credentials are not supported (use file:///abs/dir)");
	if (rest[0] != '/')
		return cis_fail(em, -CIS_E_URI,
		                "file://%s: the directory must be absolute (file:///abs/dir)",
		                rest);
	s = calloc(1, sizeof(*s));
	if (!s)
		return cis_fail(em, -ENOMEM, "file://%s: out of memory", rest);
	s->root = strdup(rest);
	if (!s->root) {
		free(s);
		return cis_fail(em, -ENOMEM, "file://%s: out of memory", rest);
	}
	len = strlen(s->root);
	while (len > 1 && s->root[len - 1] == '/')
		s->root[--len] = 0;
	s->fsync = true;
	pthread_mutex_init(&s->lock, NULL);
	opt = options ? cis_kvlist_get(options, "fsync") : NULL;
	if (opt && (strcmp(opt, "false") == 0 || strcmp(opt, "0") == 0))
		s->fsync = false;
	else if (opt && strcmp(opt, "true") != 0 && strcmp(opt, "1") != 0) {
		pthread_mutex_destroy(&s->lock);
		free(s->root);
		free(s);
		return cis_fail(em, -CIS_E_CONFIG, "fsync=%s: want true or false", opt);
	}
	*state = s;
	return 0;
}

static void free_names(char **names, size_t n);

static void listing_clear(struct posix_listing *l)
{
	free(l->dir);
	free(l->token);
	free_names(l->names, l->n);
	memset(l, 0, sizeof(*l));
}

static void posix_close(void *state)
{
	struct posix_state *s = state;

	if (!s)
		return;
	for (int i = 0; i < POSIX_LISTINGS; i++)
		listing_clear(&s->listings[i]);
	pthread_mutex_destroy(&s->lock);
	free(s->root);
	free(s);
}

static bool same_page(const struct posix_listing *l, const char *dir, const char *token,
                      const struct stat *st)
{
	return l->dir && strcmp(l->dir, dir) == 0 && strcmp(l->token, token) == 0 &&
	       l->dev == st->st_dev && l->ino == st->st_ino &&
	       l->mtime.tv_sec == st->st_mtim.tv_sec && l->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* The names kept for the page of dir after token, now the caller's; false
 * if none (or the directory changed since). */
static bool listing_take(struct posix_state *s, const char *dir, const char *token,
                         const struct stat *st, char ***names, size_t *n)
{
	bool found = false;
	uint64_t now = cis_mono_ms();

	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < POSIX_LISTINGS; i++) {
		struct posix_listing *l = &s->listings[i];

		if (l->dir && now - l->kept_ms > POSIX_LISTING_MS)
			listing_clear(l); /* a listing given up half way */
		if (found || !same_page(l, dir, token, st))
			continue;
		*names = l->names;
		*n = l->n;
		l->names = NULL;
		l->n = 0;
		listing_clear(l);
		found = true;
	}
	pthread_mutex_unlock(&s->lock);
	return found;
}

/* Keep names[from..n) for the page of dir after token (in the oldest
 * slot); the rest is freed. Takes names in any case. */
static void listing_keep(struct posix_state *s, const char *dir, const char *token,
                         const struct stat *st, char **names, size_t from, size_t n)
{
	char *d = from < n && token ? strdup(dir) : NULL;
	char *t = d ? strdup(token) : NULL;

	for (size_t i = 0; i < from; i++)
		free(names[i]);
	if (!t) { /* nothing left, or no memory to keep it */
		free(d);
		for (size_t i = from; i < n; i++)
			free(names[i]);
		free(names);
		return;
	}
	memmove(names, names + from, (n - from) * sizeof(*names));
	pthread_mutex_lock(&s->lock);
	struct posix_listing *l = &s->listings[0];
	for (int i = 0; i < POSIX_LISTINGS; i++) {
		struct posix_listing *c = &s->listings[i];

		if (!c->dir || c->stamp < l->stamp) {
			l = c;
			if (!c->dir)
				break;
		}
	}
	listing_clear(l);
	*l = (struct posix_listing){.dir = d,
	                            .token = t,
	                            .dev = st->st_dev,
	                            .ino = st->st_ino,
	                            .mtime = st->st_mtim,
	                            .names = names,
	                            .n = n - from,
	                            .stamp = ++s->stamps,
	                            .kept_ms = cis_mono_ms()};
	pthread_mutex_unlock(&s->lock);
}

/* "/" + path for messages, or "" for the root itself. */
static const char *slash_if(const char *path)
{
	return *path ? "/" : "";
}

static const char *root_shown(const struct posix_state *s)
{
	return strcmp(s->root, "/") == 0 ? "" : s->root;
}

static int open_root(const struct posix_state *s, cis_errmsg *em)
{
	int fd = open(s->root, O_PATH | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0) {
		int err = -errno;

		return cis_fail(em, err, "file://%s: cannot open the directory: %s", s->root,
		                strerror(-err));
	}
	return fd;
}

/* The open descriptor for path under the root (the root itself for ""). */
static int open_beneath(int rootfd, const char *path, int flags)
{
	return sys_openat2(rootfd, *path ? path : ".", flags, 0);
}

static void fill_stat(const struct stat *sb, struct cis_ufs_stat *st)
{
	memset(st, 0, sizeof(*st));
	st->is_dir = S_ISDIR(sb->st_mode);
	st->size = st->is_dir ? 0 : (uint64_t)sb->st_size;
	/* Clamped to what int64 nanoseconds hold (years 1678 to 2262). */
	const int64_t max_s = INT64_MAX / 1000000000 - 1;
	int64_t sec = (int64_t)sb->st_mtim.tv_sec;
	sec = sec > max_s ? max_s : sec < -max_s ? -max_s : sec;
	st->mtime_ns = sec * 1000000000 + sb->st_mtim.tv_nsec;
	st->mode = sb->st_mode & 07777;
	if (!st->is_dir) {
		int64_t csec = (int64_t)sb->st_ctim.tv_sec;
		csec = csec > max_s ? max_s : csec < -max_s ? -max_s : csec;
		snprintf(st->version, sizeof(st->version), "%" PRIu64 "-%" PRId64 "-%" PRId64,
		         st->size, st->mtime_ns, csec * 1000000000 + sb->st_ctim.tv_nsec);
	}
}

/* Stats path under rootfd, following links beneath the root. Only regular
 * files and directories are objects; anything else is -ENOENT's cousin
 * -EINVAL with a message. */
static int stat_beneath(const struct posix_state *s, int rootfd, const char *path,
                        struct cis_ufs_stat *st, cis_errmsg *em)
{
	struct stat sb;
	int fd, err;

	fd = open_beneath(rootfd, path, O_PATH);
	if (fd < 0) {
		err = -errno;
		if (err == -ENOTDIR) /* "file/x": a component is not a directory */
			err = -ENOENT;
		return cis_fail(em, err, "file://%s%s%s: %s", root_shown(s), slash_if(path), path,
		                err == -EACCES ? "outside the root or permission denied"
		                               : strerror(-err));
	}
	if (fstat(fd, &sb) < 0) {
		err = -errno;
		close(fd);
		return cis_fail(em, err, "file://%s%s%s: fstat: %s", root_shown(s), slash_if(path),
		                path, strerror(-err));
	}
	close(fd);
	if (!S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode))
		return cis_fail(em, -EINVAL, "file://%s%s%s: not a regular file or directory",
		                root_shown(s), slash_if(path), path);
	fill_stat(&sb, st);
	return 0;
}

/* A listed entry, not followed if it is a link (then its text), resolved
 * beneath the root like every path. 0, -ENOMEM, or another code for "skip
 * it": vanished, or neither a file, a directory nor a link. */
static int stat_entry(int rootfd, const char *path, cis_ufs_entry *e)
{
	char target[PATH_MAX];
	struct stat sb;
	ssize_t n = 0;
	int fd, err = 0;

	fd = open_beneath(rootfd, path, O_PATH | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) < 0)
		err = -errno;
	else if (S_ISLNK(sb.st_mode) && (n = readlinkat(fd, "", target, sizeof(target) - 1)) <= 0)
		err = n < 0 ? -errno : -EINVAL;
	close(fd);
	if (err)
		return err;
	if (!S_ISLNK(sb.st_mode) && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode))
		return -EINVAL;
	fill_stat(&sb, &e->st); /* a link's size is its text's length */
	if (!S_ISLNK(sb.st_mode))
		return 0;
	target[n] = 0;
	e->link_target = strdup(target);
	e->st.version[0] = 0;
	return e->link_target ? 0 : -ENOMEM;
}

static int posix_check(void *state, cis_errmsg *em)
{
	struct posix_state *s = state;
	struct stat sb;
	int fd, err = 0;

	fd = open_root(s, em);
	if (fd < 0)
		return fd;
	int dot = open_beneath(fd, "", O_RDONLY | O_DIRECTORY);
	if (dot < 0)
		/* Every call resolves paths with openat2 (Linux 5.6), which a
		 * container's seccomp profile may also refuse. */
		err = errno == ENOSYS || errno == EPERM
		          ? cis_fail(em, -ENOSYS,
		                     "file://%s: openat2 is not available (Linux 5.6 or later, "
		                     "allowed by the seccomp profile): %s",
		                     s->root, strerror(errno))
		          : cis_fail(em, -CIS_E_DENIED, "file://%s: directory not readable: %s",
		                     s->root, strerror(errno));
	else if (fstat(fd, &sb) < 0)
		err = cis_fail(em, -errno, "file://%s: fstat: %s", s->root, strerror(errno));
	else if (faccessat(AT_FDCWD, s->root, R_OK | X_OK, AT_EACCESS) < 0)
		err = cis_fail(em, -CIS_E_DENIED, "file://%s: directory not readable: %s", s->root,
		               strerror(errno));
	if (dot >= 0)
		close(dot);
	close(fd);
	return err;
}

static int posix_stat(void *state, const char *path, struct cis_ufs_stat *st, cis_errmsg *em)
{
	struct posix_state *s = state;
	int rootfd, err;

	rootfd = open_root(s, em);
	if (rootfd < 0)
		return rootfd;
	err = stat_beneath(s, rootfd, path, st, em);
	close(rootfd);
	return err;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* All names in the directory dirfd (which is consumed), sorted bytewise,
 * without ".", ".." and our own temporary files. */
static int read_names(int dirfd, char ***out, size_t *n_out)
{
	DIR *d = fdopendir(dirfd);
	struct dirent *de;
	char **names = NULL, **grown;
	size_t n = 0, cap = 0;
	int err = 0;

	if (!d) {
		err = -errno;
		close(dirfd);
		return err;
	}
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			err = -errno;
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    strncmp(de->d_name, POSIX_TMP_PREFIX, strlen(POSIX_TMP_PREFIX)) == 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			grown = realloc(names, cap * sizeof(*names));
			if (!grown) {
				err = -ENOMEM;
				break;
			}
			names = grown;
		}
		names[n] = strdup(de->d_name);
		if (!names[n]) {
			err = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(d);
	if (err) {
		free_names(names, n);
		return err;
	}
	if (n > 1)
		qsort(names, n, sizeof(*names), cmp_names);
	*out = names;
	*n_out = n;
	return 0;
}

static int posix_list(void *state, const char *dir, const char *token, size_t max,
                      cis_ufs_page *page, cis_errmsg *em)
{
	struct posix_state *s = state;
	char **names = NULL, *child = NULL;
	size_t n = 0, i, lo, hi, dlen = strlen(dir);
	int rootfd, dirfd, err;

	if (max == 0)
		max = POSIX_LIST_DEFAULT;
	rootfd = open_root(s, em);
	if (rootfd < 0)
		return rootfd;
	dirfd = open_beneath(rootfd, dir, O_RDONLY | O_DIRECTORY);
	if (dirfd < 0) {
		err = -errno;
		cis_fail(em, err, "file://%s%s%s: %s", root_shown(s), slash_if(dir), dir,
		         err == -EACCES ? "outside the root or permission denied" : strerror(-err));
		goto out_close_root;
	}
	struct stat dst;
	if (fstat(dirfd, &dst) < 0) {
		err = -errno;
		close(dirfd);
		cis_fail(em, err, "file://%s%s%s: %s", root_shown(s), slash_if(dir), dir,
		         strerror(-err));
		goto out_close_root;
	}
	err = 0;
	if (token && listing_take(s, dir, token, &dst, &names, &n))
		close(dirfd);
	else
		err = read_names(dirfd, &names, &n);
	if (err) {
		cis_fail(em, err, "file://%s%s%s: reading the directory: %s", root_shown(s),
		         slash_if(dir), dir, strerror(-err));
		goto out_close_root;
	}
	/* Resume after the token: the first name bytewise greater than it. */
	lo = 0;
	hi = n;
	while (token && lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(names[mid], token) <= 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	page->entries = calloc(max < n - lo ? max : n - lo + 1, sizeof(*page->entries));
	/* Sized for the longest name: some file systems (FUSE, vfat's 255
	 * UTF-16 units) give names longer than NAME_MAX bytes. */
	size_t longest = 0;
	for (i = lo; i < n; i++)
		if (strlen(names[i]) > longest)
			longest = strlen(names[i]);
	child = malloc(dlen + 1 + longest + 1);
	if (!page->entries || !child) {
		err = cis_fail(em, -ENOMEM, "file://%s/%s: out of memory", root_shown(s), dir);
		goto out_free;
	}
	for (i = lo; i < n && page->n < max; i++) {
		cis_ufs_entry *e = &page->entries[page->n];

		if (dlen)
			sprintf(child, "%s/%s", dir, names[i]);
		else
			strcpy(child, names[i]);
		/* Entries that vanished, are neither files, directories nor
		 * links, or are not ours to see are not objects: skip them.
		 * Any other failure (EIO, ESTALE: a file server in trouble)
		 * fails the page: a listing without the entry would drop it,
		 * and all below it, from the namespace. */
		err = stat_entry(rootfd, child, e);
		if (err == -ENOENT || err == -EINVAL || err == -ENAMETOOLONG || err == -EACCES)
			continue;
		if (err) {
			cis_fail(em, err, "file://%s%s%s/%s: %s", root_shown(s), slash_if(dir), dir,
			         names[i], strerror(-err));
			goto out_free;
		}
		e->name = names[i];
		names[i] = NULL;
		page->n++;
	}
	if (i < n && page->n > 0) {
		page->next_token = strdup(page->entries[page->n - 1].name);
		if (!page->next_token) {
			err = cis_fail(em, -ENOMEM, "file://%s/%s: out of memory", root_shown(s),
			               dir);
			goto out_free;
		}
	}
	err = 0;
	/* The names after this page, for the page that comes with its token. */
	listing_keep(s, dir, page->next_token, &dst, names, i, n);
	names = NULL;
	n = 0;
out_free:
	free(child);
	free_names(names, n);
out_close_root:
	close(rootfd);
	return err;
}

/* The version the open file fd has now, as stat reports it. */
static void fd_version(int fd, char *out, size_t outlen, struct stat *sb)
{
	struct cis_ufs_stat st;

	if (fstat(fd, sb) < 0) {
		memset(sb, 0, sizeof(*sb)); /* no type: not read as a file */
		snprintf(out, outlen, "?");
		return;
	}
	fill_stat(sb, &st);
	snprintf(out, outlen, "%s", st.version);
}

static int posix_read(void *state, const char *path, const char *version, uint64_t off,
                      uint64_t len, cis_ufs_sink_fn sink, void *arg, uint64_t *got, cis_errmsg *em)
{
	struct posix_state *s = state;
	char now[CIS_UFS_VERSION_MAX];
	struct stat sb;
	char *buf = NULL;
	uint64_t done = 0;
	int rootfd, fd, err;
	ssize_t r;

	*got = 0;
	rootfd = open_root(s, em);
	if (rootfd < 0)
		return rootfd;
	fd = open_beneath(rootfd, path, O_RDONLY | O_NOCTTY | O_NONBLOCK);
	close(rootfd);
	if (fd < 0) {
		err = -errno;
		if (err == -ENOTDIR)
			err = -ENOENT;
		return cis_fail(em, err, "file://%s/%s: %s", root_shown(s), path,
		                err == -EACCES ? "outside the root or permission denied"
		                               : strerror(-err));
	}
	fd_version(fd, now, sizeof(now), &sb);
	if (S_ISDIR(sb.st_mode)) {
		err = cis_fail(em, -EISDIR, "file://%s/%s: is a directory", root_shown(s), path);
		goto out_close;
	}
	if (!S_ISREG(sb.st_mode)) {
		err =
		    cis_fail(em, -EINVAL, "file://%s/%s: not a regular file", root_shown(s), path);
		goto out_close;
	}
	if (version && *version && strcmp(version, now) != 0) {
		err = cis_fail(em, -CIS_E_CHANGED, "file://%s/%s: changed (version %s, wanted %s)",
		               root_shown(s), path, now, version);
		goto out_close;
	}
	buf = malloc(POSIX_READ_CHUNK);
	if (!buf) {
		err = cis_fail(em, -ENOMEM, "file://%s/%s: out of memory", root_shown(s), path);
		goto out_close;
	}
	while (done < len) {
		size_t want =
		    len - done < POSIX_READ_CHUNK ? (size_t)(len - done) : POSIX_READ_CHUNK;

		if (off + done > (uint64_t)INT64_MAX)
			break;
		r = pread(fd, buf, want, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			err = cis_fail(em, -EIO, "file://%s/%s: read at %" PRIu64 ": %s",
			               root_shown(s), path, off + done, strerror(errno));
			goto out_free;
		}
		if (r == 0)
			break; /* end of file */
		err = sink(arg, buf, (size_t)r);
		done += (uint64_t)r; /* handed over, even if the sink then refused */
		*got = done;
		if (err) {
			cis_fail(em, err, "file://%s/%s: read aborted by the receiver: %s",
			         root_shown(s), path, cis_strerror(err));
			goto out_free;
		}
	}
	/* With a version asked for, the bytes must all be of that version: a
	 * file rewritten in place while we read is reported, not mixed. */
	if (version && *version) {
		fd_version(fd, now, sizeof(now), &sb);
		if (strcmp(version, now) != 0) {
			err = cis_fail(em, -CIS_E_CHANGED, "file://%s/%s: changed during the read",
			               root_shown(s), path);
			goto out_free;
		}
	}
	err = 0;
out_free:
	free(buf);
out_close:
	close(fd);
	return err;
}

/* Opens (creating as needed) the directory holding path's last component,
 * beneath rootfd. Returns the descriptor and sets *base to the last
 * component within path, or returns a negative errno. Each prefix is
 * resolved from the root, so links inside the root work wherever they
 * point within it; a new directory is made with mkdirat on its (already
 * resolved) parent, which follows no link. */
static int open_parent(int rootfd, const char *path, bool create, const char **base)
{
	const char *slash = strrchr(path, '/');
	char prefix[PATH_MAX], comp[256];
	size_t plen, n;
	char *p, *end, save;
	int fd, next;

	*base = slash ? slash + 1 : path;
	if (!slash) {
		fd = sys_openat2(rootfd, ".", O_PATH | O_DIRECTORY, 0);
		return fd < 0 ? -errno : fd;
	}
	plen = (size_t)(slash - path);
	if (plen >= sizeof(prefix))
		return -ENAMETOOLONG;
	memcpy(prefix, path, plen);
	prefix[plen] = 0;
	fd = sys_openat2(rootfd, prefix, O_PATH | O_DIRECTORY, 0);
	if (fd >= 0 || errno != ENOENT || !create)
		return fd >= 0 ? fd : -errno;
	/* Walk down from the root, making what is missing. */
	fd = sys_openat2(rootfd, ".", O_PATH | O_DIRECTORY, 0);
	if (fd < 0)
		return -errno;
	for (p = prefix;;) {
		end = strchr(p, '/');
		n = end ? (size_t)(end - p) : strlen(p);
		if (n >= sizeof(comp)) {
			close(fd);
			return -ENAMETOOLONG;
		}
		memcpy(comp, p, n);
		comp[n] = 0;
		if (mkdirat(fd, comp, 0777) < 0 && errno != EEXIST) {
			int err = -errno;

			close(fd);
			return err;
		}
		close(fd);
		/* Open the prefix up to this component, from the root. */
		save = p[n];
		p[n] = 0;
		next = sys_openat2(rootfd, prefix, O_PATH | O_DIRECTORY, 0);
		p[n] = save;
		if (next < 0)
			return -errno;
		fd = next;
		if (!end)
			return fd;
		p = end + 1;
	}
}

/* Copies size bytes from in's current offset to out; -EIO (with em) if in
 * ends early. sendfile where the source allows it, read/write otherwise. */
static int copy_fd(int in, int out, uint64_t size, const char *shown, const char *path,
                   cis_errmsg *em)
{
	uint64_t done = 0;
	bool use_sendfile = true;
	char *buf = NULL;
	int err = 0;

	while (done < size) {
		size_t want = size - done < (1u << 30) ? (size_t)(size - done) : (1u << 30);
		ssize_t n;

		if (use_sendfile) {
			n = sendfile(out, in, NULL, want);
			if (n < 0 && (errno == EINVAL || errno == ENOSYS) && done == 0) {
				use_sendfile = false;
				continue;
			}
		} else {
			if (!buf && !(buf = malloc(POSIX_READ_CHUNK))) {
				err = cis_fail(em, -ENOMEM, "file://%s/%s: out of memory", shown,
				               path);
				break;
			}
			n = read(in, buf, want < POSIX_READ_CHUNK ? want : POSIX_READ_CHUNK);
			for (ssize_t w = 0, put = 0; n > 0 && put < n; put += w) {
				w = write(out, buf + put, (size_t)(n - put));
				if (w < 0 && errno == EINTR) {
					w = 0;
					continue;
				}
				if (w < 0) {
					err = cis_fail(em, -errno, "file://%s/%s: write: %s", shown,
					               path, strerror(errno));
					goto out_free;
				}
			}
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = cis_fail(em, -errno, "file://%s/%s: copying data: %s", shown, path,
			               strerror(errno));
			break;
		}
		if (n == 0) {
			err = cis_fail(em, -EIO,
			               "file://%s/%s: source ended after %" PRIu64 " of %" PRIu64
			               " bytes",
			               shown, path, done, size);
			break;
		}
		done += (uint64_t)n;
	}
out_free:
	free(buf);
	return err;
}

static int posix_write_fd(void *state, const char *path, int fd, uint64_t size, cis_errmsg *em)
{
	struct posix_state *s = state;
	const char *base;
	char tmp[64];
	uint64_t rnd = 0;
	struct timespec ts[2];
	struct stat old;
	int rootfd, dirfd, tfd, err;

	rootfd = open_root(s, em);
	if (rootfd < 0)
		return rootfd;
	dirfd = open_parent(rootfd, path, true, &base);
	close(rootfd);
	if (dirfd < 0)
		return cis_fail(em, dirfd, "file://%s/%s: creating the parent directory: %s",
		                root_shown(s), path,
		                dirfd == -EACCES ? "outside the root or permission denied"
		                                 : strerror(-dirfd));
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = (uint64_t)getpid() ^ (uint64_t)time(NULL) ^ (uintptr_t)&rnd;
	snprintf(tmp, sizeof(tmp), POSIX_TMP_PREFIX "%016" PRIx64, rnd);
	tfd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (tfd < 0) {
		err = cis_fail(em, -errno, "file://%s/%s: creating a temporary file: %s",
		               root_shown(s), path, strerror(errno));
		goto out_close_dir;
	}
	err = copy_fd(fd, tfd, size, root_shown(s), path, em);
	if (err)
		goto out_unlink;
	/* A fresh, fine-grained mtime that differs from the replaced file's:
	 * the version must change with every overwrite. */
	clock_gettime(CLOCK_REALTIME, &ts[1]);
	if (fstatat(dirfd, base, &old, 0) == 0 && old.st_mtim.tv_sec == ts[1].tv_sec &&
	    old.st_mtim.tv_nsec == ts[1].tv_nsec && (uint64_t)old.st_size == size) {
		if (++ts[1].tv_nsec == 1000000000) {
			ts[1].tv_nsec = 0;
			ts[1].tv_sec++;
		}
	}
	ts[0] = ts[1];
	if (futimens(tfd, ts) < 0) {
		err = cis_fail(em, -errno, "file://%s/%s: futimens: %s", root_shown(s), path,
		               strerror(errno));
		goto out_unlink;
	}
	if (s->fsync && fdatasync(tfd) < 0) {
		err = cis_fail(em, -errno, "file://%s/%s: fsync: %s", root_shown(s), path,
		               strerror(errno));
		goto out_unlink;
	}
	if (close(tfd) < 0) {
		tfd = -1;
		err = cis_fail(em, -errno, "file://%s/%s: close: %s", root_shown(s), path,
		               strerror(errno));
		goto out_unlink;
	}
	tfd = -1;
	if (renameat(dirfd, tmp, dirfd, base) < 0) {
		err = cis_fail(em, -errno, "file://%s/%s: rename into place: %s", root_shown(s),
		               path, strerror(errno));
		goto out_unlink;
	}
	close(dirfd);
	return 0;

out_unlink:
	if (tfd >= 0)
		close(tfd);
	unlinkat(dirfd, tmp, 0);
out_close_dir:
	close(dirfd);
	return err;
}

static int posix_delete(void *state, const char *path, cis_errmsg *em)
{
	struct posix_state *s = state;
	const char *base;
	int rootfd, dirfd, err = 0;

	rootfd = open_root(s, em);
	if (rootfd < 0)
		return rootfd;
	dirfd = open_parent(rootfd, path, false, &base);
	close(rootfd);
	if (dirfd < 0) {
		err = dirfd == -ENOTDIR ? -ENOENT : dirfd;
		return cis_fail(em, err, "file://%s/%s: %s", root_shown(s), path,
		                err == -EACCES ? "outside the root or permission denied"
		                               : strerror(-err));
	}
	if (unlinkat(dirfd, base, 0) < 0) {
		err = -errno;
		if (err == -EISDIR || err == -EPERM) {
			struct stat sb;

			if (fstatat(dirfd, base, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISDIR(sb.st_mode))
				err = -EISDIR;
		}
		cis_fail(em, err, "file://%s/%s: delete: %s", root_shown(s), path, strerror(-err));
	}
	close(dirfd);
	return err;
}

static const char *const posix_options[] = {"fsync", NULL};

const cis_ufs_ops cis_ufs_posix_ops = {
    .scheme = "file",
    .options = posix_options,
    .open = posix_open,
    .close = posix_close,
    .check = posix_check,
    .stat = posix_stat,
    .list = posix_list,
    .read = posix_read,
    .write_fd = posix_write_fd,
    .delete = posix_delete,
};
