/* The under-store dispatcher: parses "scheme://rest", picks the backend from
 * a fixed table, checks every path argument, and calls the backend's vtable.
 * A handle is immutable after cis_ufs_open, so it is safe to share between
 * threads as long as the backend's state is (each backend promises that). */
#include "cistern/ufs.h"
#include "cistern/ufs_backend.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define UFS_PATH_MAX   4095 /* what the kernel takes (S3 refuses keys over 1024 itself) */
#define UFS_URI_MAX    4096
#define UFS_SCHEME_MAX 16

struct cis_ufs {
	const cis_ufs_ops *ops;
	void *state;
	char *uri; /* as opened, userinfo ("key:secret@") removed */
};

static atomic_bool ufs_cancelled;

void cis_ufs_cancel_all(void)
{
	atomic_store(&ufs_cancelled, true);
}

bool cis_ufs_cancelled(void)
{
	return atomic_load(&ufs_cancelled);
}

/* The backends, by scheme. Frozen: adding a connector means adding it here. */
static const cis_ufs_ops *const ufs_backends[] = {
    &cis_ufs_s3_ops,
    &cis_ufs_posix_ops,
};

int cis_ufs_check_path(const char *path)
{
	size_t len, comp;
	const char *p, *slash;

	if (!path)
		return -EINVAL;
	len = strlen(path);
	if (len == 0)
		return 0; /* the root */
	if (len > UFS_PATH_MAX || path[0] == '/')
		return -EINVAL;
	for (p = path;; p = slash + 1) {
		slash = strchr(p, '/');
		comp = slash ? (size_t)(slash - p) : strlen(p);
		if (comp == 0) /* "a//b" or a trailing slash */
			return -EINVAL;
		if ((comp == 1 && p[0] == '.') || (comp == 2 && p[0] == '.' && p[1] == '.'))
			return -EINVAL;
		if (!slash)
			return 0;
	}
}

static int refuse_when_cancelled(const cis_ufs *u, cis_errmsg *em)
{
	if (!cis_ufs_cancelled())
		return 0;
	return cis_fail(em, -ECANCELED, "%s: not asked: the process is stopping", u->uri);
}

/* The path is valid, and the process is not stopping. */
static int check_path_em(const cis_ufs *u, const char *path, cis_errmsg *em)
{
	if (cis_ufs_check_path(path) == 0)
		return refuse_when_cancelled(u, em);
	/* The path may be long or odd: show a bounded prefix of it. */
	return cis_fail(em, -EINVAL,
	                "%s: invalid path '%.64s%s' (relative, no '.', '..' or empty components, "
	                "at most %d bytes)",
	                u->uri, path ? path : "(null)", path && strlen(path) > 64 ? "..." : "",
	                UFS_PATH_MAX);
}

/* A copy of uri with the userinfo of its authority ("user:secret@") removed,
 * so that credentials are never echoed. A secret may hold a '/' (AWS
 * secrets are base64): an authority with a ':' (no store's has one) runs
 * to the first '@' after it, or is all left out. NULL on allocation
 * failure. */
static char *uri_strip_userinfo(const char *uri)
{
	const char *auth = strstr(uri, "://");
	const char *end, *at = NULL, *p;
	size_t head;
	char *out;

	if (!auth)
		return strdup(uri);
	auth += 3;
	end = auth + strcspn(auth, "/?#");
	for (p = auth; p < end; p++)
		if (*p == '@')
			at = p;
	if (!at && memchr(auth, ':', (size_t)(end - auth))) {
		at = strchr(end, '@');
		if (!at) {
			head = (size_t)(auth - uri);
			out = malloc(head + 4);
			if (out) {
				memcpy(out, uri, head);
				strcpy(out + head, "...");
			}
			return out;
		}
	}
	if (!at)
		return strdup(uri);
	head = (size_t)(auth - uri);
	out = malloc(strlen(uri) + 1);
	if (!out)
		return NULL;
	memcpy(out, uri, head);
	strcpy(out + head, at + 1);
	return out;
}

/* Splits "scheme://rest": scheme is [a-z][a-z0-9+.-]*, rest is what follows.
 * 0 or -CIS_E_URI. shown is the credential-free URI for messages. */
static int uri_split(const char *uri, const char *shown, char *scheme, const char **rest,
                     cis_errmsg *em)
{
	const char *sep = strstr(uri, "://");
	const char *p;
	size_t n;

	for (p = uri; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return cis_fail(em, -CIS_E_URI, "malformed uri '%s': control character",
			                shown);
	if (!sep)
		return cis_fail(em, -CIS_E_URI,
		                "malformed uri '%s': expected scheme://... (s3:// or file://)",
		                shown);
	n = (size_t)(sep - uri);
	if (n == 0 || n >= UFS_SCHEME_MAX)
		return cis_fail(em, -CIS_E_URI, "malformed uri '%s': bad scheme", shown);
	for (p = uri; p < sep; p++) {
		bool ok =
		    (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (p > uri && ((*p >= '0' && *p <= '9') || *p == '+' || *p == '-' || *p == '.'));
		if (!ok)
			return cis_fail(em, -CIS_E_URI, "malformed uri '%s': bad scheme", shown);
	}
	for (size_t i = 0; i < n; i++) /* schemes are case-insensitive (RFC 3986) */
		scheme[i] = (char)((uri[i] >= 'A' && uri[i] <= 'Z') ? uri[i] - 'A' + 'a' : uri[i]);
	scheme[n] = 0;
	*rest = sep + 3;
	return 0;
}

/* Every option key is one the backend knows. */
static int check_options(const cis_ufs_ops *ops, const cis_kvlist *options, cis_errmsg *em)
{
	for (size_t i = 0; options && i < options->n; i++) {
		const char *k = options->items[i].key;
		bool known = false;

		for (size_t j = 0; ops->options[j] && !known; j++)
			known = strcmp(ops->options[j], k) == 0;
		if (known)
			continue;
		char list[512] = "";
		for (size_t j = 0; ops->options[j]; j++) {
			if (j)
				strncat(list, ", ", sizeof(list) - strlen(list) - 1);
			strncat(list, ops->options[j], sizeof(list) - strlen(list) - 1);
		}
		return cis_fail(em, -CIS_E_CONFIG, "%s:// has no option '%s' (it knows: %s)",
		                ops->scheme, k, list);
	}
	return 0;
}

int cis_ufs_open(const char *uri, const cis_kvlist *options, cis_ufs **out, cis_errmsg *em)
{
	char scheme[UFS_SCHEME_MAX];
	const cis_ufs_ops *ops = NULL;
	const char *rest = NULL;
	cis_ufs *u;
	int err;

	*out = NULL;
	if (!uri || !*uri)
		return cis_fail(em, -CIS_E_URI,
		                "empty uri (use s3://bucket/prefix or file:///dir)");
	if (strlen(uri) > UFS_URI_MAX)
		return cis_fail(em, -CIS_E_URI, "malformed uri: longer than %d bytes", UFS_URI_MAX);
	u = calloc(1, sizeof(*u));
	if (!u)
		return cis_fail(em, -ENOMEM, "%s: out of memory", "ufs open");
	u->uri = uri_strip_userinfo(uri);
	if (!u->uri) {
		err = cis_fail(em, -ENOMEM, "ufs open: out of memory");
		goto out_free_u;
	}
	err = uri_split(uri, u->uri, scheme, &rest, em);
	if (err)
		goto out_free_uri;
	for (size_t i = 0; i < sizeof(ufs_backends) / sizeof(ufs_backends[0]); i++)
		if (strcmp(ufs_backends[i]->scheme, scheme) == 0)
			ops = ufs_backends[i];
	if (!ops) {
		err = cis_fail(em, -CIS_E_URI, "unknown scheme '%s' in '%s' (use s3:// or file://)",
		               scheme, u->uri);
		goto out_free_uri;
	}
	u->ops = ops;
	err = check_options(ops, options, em);
	if (err)
		goto out_free_uri;
	err = ops->open(rest, options, &u->state, em);
	if (err)
		goto out_free_uri;
	*out = u;
	return 0;

out_free_uri:
	free(u->uri);
out_free_u:
	free(u);
	return err;
}

void cis_ufs_close(cis_ufs *u)
{
	if (!u)
		return;
	u->ops->close(u->state);
	free(u->uri);
	free(u);
}

const char *cis_ufs_uri(const cis_ufs *u)
{
	return u->uri;
}

int cis_ufs_check(cis_ufs *u, cis_errmsg *em)
{
	int err = refuse_when_cancelled(u, em);

	return err ? err : u->ops->check(u->state, em);
}

int cis_ufs_stat(cis_ufs *u, const char *path, struct cis_ufs_stat *st, cis_errmsg *em)
{
	int err = check_path_em(u, path, em);

	if (err)
		return err;
	memset(st, 0, sizeof(*st));
	return u->ops->stat(u->state, path, st, em);
}

int cis_ufs_list(cis_ufs *u, const char *dir, const char *token, size_t max, cis_ufs_page *page,
                 cis_errmsg *em)
{
	int err;

	memset(page, 0, sizeof(*page));
	err = check_path_em(u, dir, em);
	if (err)
		return err;
	if (token && !*token)
		token = NULL;
	err = u->ops->list(u->state, dir, token, max, page, em);
	if (err)
		cis_ufs_page_free(page); /* the contract: empty on failure */
	return err;
}

void cis_ufs_page_free(cis_ufs_page *page)
{
	if (!page)
		return;
	for (size_t i = 0; i < page->n; i++) {
		free(page->entries[i].name);
		free(page->entries[i].link_target);
	}
	free(page->entries);
	free(page->next_token);
	memset(page, 0, sizeof(*page));
}

int cis_ufs_read(cis_ufs *u, const char *path, const char *version, uint64_t off, uint64_t len,
                 cis_ufs_sink_fn sink, void *arg, uint64_t *got, cis_errmsg *em)
{
	uint64_t dummy;
	int err;

	if (!got)
		got = &dummy;
	*got = 0;
	err = check_path_em(u, path, em);
	if (err)
		return err;
	if (*path == 0)
		return cis_fail(em, -EISDIR, "%s: cannot read the root", u->uri);
	if (len > UINT64_MAX - off) /* "to the end" callers pass UINT64_MAX */
		len = UINT64_MAX - off;
	return u->ops->read(u->state, path, version, off, len, sink, arg, got, em);
}

struct buf_sink {
	char *buf;
	size_t room;
	size_t used;
	bool overflow;
};

static int buf_sink_fn(void *arg, const void *data, size_t len)
{
	struct buf_sink *s = arg;

	/* The backend was asked for at most room bytes; more is a bug there. */
	if (len > s->room - s->used) {
		s->overflow = true;
		return -CIS_E_INTERNAL;
	}
	memcpy(s->buf + s->used, data, len);
	s->used += len;
	return 0;
}

int cis_ufs_read_buf(cis_ufs *u, const char *path, const char *version, uint64_t off, size_t len,
                     void *buf, size_t *got, cis_errmsg *em)
{
	struct buf_sink s = {buf, len, 0, false};
	int err;

	err = cis_ufs_read(u, path, version, off, len, buf_sink_fn, &s, NULL, em);
	if (s.overflow)
		err =
		    cis_fail(em, -CIS_E_INTERNAL,
		             "%s/%s: the store sent more than the %zu bytes asked for at %" PRIu64,
		             u->uri, path, len, off);
	if (got)
		*got = s.used;
	return err;
}

int cis_ufs_write_fd(cis_ufs *u, const char *path, int fd, uint64_t size, cis_errmsg *em)
{
	int err = check_path_em(u, path, em);

	if (err)
		return err;
	if (*path == 0)
		return cis_fail(em, -EISDIR, "%s: cannot write the root", u->uri);
	return u->ops->write_fd(u->state, path, fd, size, em);
}

/* Writes through write_fd with the bytes in an anonymous memory file, so each
 * backend has one write path (S3's multipart logic included). The copy costs
 * one memcpy of the data; callers with large data should use write_fd. */
int cis_ufs_write_buf(cis_ufs *u, const char *path, const void *data, size_t size, cis_errmsg *em)
{
	const char *p = data;
	size_t done = 0;
	ssize_t n;
	int fd, err;

	err = check_path_em(u, path, em);
	if (err)
		return err;
	fd = memfd_create("cis-ufs-write", MFD_CLOEXEC);
	if (fd < 0)
		return cis_fail(em, -errno, "%s/%s: memfd_create: %s", u->uri, path,
		                strerror(errno));
	while (done < size) {
		n = write(fd, p + done, size - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = cis_fail(em, -errno, "%s/%s: staging %zu bytes: %s", u->uri, path,
			               size, strerror(errno));
			goto out_close;
		}
		done += (size_t)n;
	}
	if (lseek(fd, 0, SEEK_SET) < 0) {
		err = cis_fail(em, -errno, "%s/%s: lseek: %s", u->uri, path, strerror(errno));
		goto out_close;
	}
	err = cis_ufs_write_fd(u, path, fd, size, em);
out_close:
	close(fd);
	return err;
}

int cis_ufs_delete(cis_ufs *u, const char *path, cis_errmsg *em)
{
	int err = check_path_em(u, path, em);

	if (err)
		return err;
	if (*path == 0)
		return cis_fail(em, -EINVAL, "%s: cannot delete the root", u->uri);
	return u->ops->delete (u->state, path, em);
}
