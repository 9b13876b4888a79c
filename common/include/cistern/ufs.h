/* Under-store connectors: one interface over object stores and directories.
 *
 * A cis_ufs is opened from a URI ("s3://bucket/prefix", "file:///data") and
 * options (endpoint, region, path_style, access_key, secret_key,
 * session_token, ca_bundle, verify_tls, ...). Every path given to the
 * functions below is relative to the URI's root, without a leading slash,
 * "" meaning the root itself; "a/b" names an object or a directory.
 *
 * Handles are thread-safe: any number of threads may call into one handle
 * at once. All functions return 0 or a negative code and, on failure, fill
 * em (when not NULL) with a line naming the object and what the store said:
 *   "s3://bkt/key: 403 AccessDenied: Access Denied"
 * Codes: -ENOENT (no such object or directory), -CIS_E_DENIED (credentials
 * or signature refused), -CIS_E_NOBUCKET, -CIS_E_STORE (5xx after retries,
 * network failure, malformed reply), -CIS_E_URI, -EINVAL, -ENOMEM, -EIO. */
#ifndef CISTERN_UFS_H
#define CISTERN_UFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cistern/error.h"
#include "cistern/kv.h"

#define CIS_UFS_VERSION_MAX 80 /* ETag (quoted hex, or multipart "hex-N") or size-mtime-ctime */

typedef struct cis_ufs cis_ufs;

/* A struct without a typedef, as with stat(2): the name cis_ufs_stat is
 * also the function below, and C has one namespace for both. */
struct cis_ufs_stat {
	bool is_dir;
	uint64_t size;
	int64_t mtime_ns;
	uint32_t mode; /* permission bits; 0 when the store has none */
	char version[CIS_UFS_VERSION_MAX];
};

/* A listed entry. A symbolic link (only a file:// store has them) is shown
 * as itself: link_target is its text, verbatim, and st says is_dir false,
 * size the text's length, no version; link_target is NULL for files and
 * directories. */
typedef struct cis_ufs_entry {
	char *name; /* one path component, no slashes */
	struct cis_ufs_stat st;
	char *link_target;
} cis_ufs_entry;

/* One page of one directory level, in the store's order (S3: bytewise
 * key order). next_token is NULL on the last page. */
typedef struct cis_ufs_page {
	cis_ufs_entry *entries;
	size_t n;
	char *next_token;
} cis_ufs_page;

/* Where read() delivers bytes, in order, as they arrive. Return 0 to go on,
 * negative to abort the read with that code. A connector may also call it
 * with len 0 while the store sends nothing (the S3 one: about once a
 * second), so that a sink holding bytes back can put them out; data then
 * points at no bytes but is not NULL. */
typedef int (*cis_ufs_sink_fn)(void *arg, const void *data, size_t len);

/* Open a connector for uri. *out is the caller's (cis_ufs_close). Opening
 * does not contact the store; cis_ufs_check does. */
int cis_ufs_open(const char *uri, const cis_kvlist *options, cis_ufs **out, cis_errmsg *em);
void cis_ufs_close(cis_ufs *u);

/* The URI it was opened with, credentials never included. */
const char *cis_ufs_uri(const cis_ufs *u);

/* Contact the store: the bucket or directory exists and the credentials
 * work. Used when a mount is made. */
int cis_ufs_check(cis_ufs *u, cis_errmsg *em);

/* A file or directory. S3: HEAD of the key, then a one-key listing of
 * "path/" to find a directory. file://: symbolic links on the way and at
 * the end are followed (beneath the root only). */
int cis_ufs_stat(cis_ufs *u, const char *path, struct cis_ufs_stat *st, cis_errmsg *em);

/* One level of dir, at most max entries (0: the store's default), starting
 * at token (NULL for the first page); links are listed as links. page is the caller's afterwards
 * (cis_ufs_page_free), also on failure (then empty). */
int cis_ufs_list(cis_ufs *u, const char *dir, const char *token, size_t max, cis_ufs_page *page,
                 cis_errmsg *em);
void cis_ufs_page_free(cis_ufs_page *page);

/* Bytes [off, off+len) of path into sink; fewer at end of file. *got (may be
 * NULL) is the count delivered. With version non-NULL and non-empty, the
 * read fails with -CIS_E_CHANGED if the object is no longer that version
 * (S3: If-Match). Retried transparently while no byte has been delivered;
 * after that a failure is returned, never a gap or a duplicate. */
int cis_ufs_read(cis_ufs *u, const char *path, const char *version, uint64_t off, uint64_t len,
                 cis_ufs_sink_fn sink, void *arg, uint64_t *got, cis_errmsg *em);
/* Convenience: into buf (len bytes of room). */
int cis_ufs_read_buf(cis_ufs *u, const char *path, const char *version, uint64_t off, size_t len,
                     void *buf, size_t *got, cis_errmsg *em);

/* Write a whole object from fd (size bytes from its current offset).
 * S3 uses multipart upload above the part size (option part_size, default
 * 8 MiB), aborting the upload on failure. */
int cis_ufs_write_fd(cis_ufs *u, const char *path, int fd, uint64_t size, cis_errmsg *em);
int cis_ufs_write_buf(cis_ufs *u, const char *path, const void *data, size_t size, cis_errmsg *em);

/* Remove an object (S3) or file (POSIX). -ENOENT if it was not there (S3
 * cannot tell, and returns 0). */
int cis_ufs_delete(cis_ufs *u, const char *path, cis_errmsg *em);

/* For a process that is stopping: every store request of every handle,
 * in flight (S3: within about a second, at curl's next progress call) or
 * made from now on, fails with -ECANCELED, so that a store that stopped
 * answering does not hold the stop up for its timeouts. A system call
 * already blocked in a file:// store is not interrupted. For good: there
 * is no undoing it. */
void cis_ufs_cancel_all(void);

#endif
