/* The vtable each under-store backend fills. Only ufs.c and the backends
 * include this; everything else uses cistern/ufs.h. */
#ifndef CISTERN_UFS_BACKEND_H
#define CISTERN_UFS_BACKEND_H

#include "cistern/ufs.h"

typedef struct cis_ufs_ops {
	const char *scheme; /* "s3", "file" */
	/* The option keys it knows, NULL-terminated: cis_ufs_open refuses any
	 * other (a misspelt endpoint must not send requests elsewhere). */
	const char *const *options;
	/* rest: the URI after "scheme://". Fills *state. */
	int (*open)(const char *rest, const cis_kvlist *options, void **state, cis_errmsg *em);
	void (*close)(void *state);
	int (*check)(void *state, cis_errmsg *em);
	int (*stat)(void *state, const char *path, struct cis_ufs_stat *st, cis_errmsg *em);
	int (*list)(void *state, const char *dir, const char *token, size_t max, cis_ufs_page *page,
	            cis_errmsg *em);
	int (*read)(void *state, const char *path, const char *version, uint64_t off, uint64_t len,
	            cis_ufs_sink_fn sink, void *arg, uint64_t *got, cis_errmsg *em);
	int (*write_fd)(void *state, const char *path, int fd, uint64_t size, cis_errmsg *em);
	int (*delete)(void *state, const char *path, cis_errmsg *em);
} cis_ufs_ops;

extern const cis_ufs_ops cis_ufs_s3_ops;
extern const cis_ufs_ops cis_ufs_posix_ops;

/* Checks a relative path: no leading '/', no "." or ".." or empty
 * components, no NUL, at most 1024 bytes. 0 or -EINVAL. */
int cis_ufs_check_path(const char *path);

/* Whether cis_ufs_cancel_all was called: a backend's long waits end then. */
bool cis_ufs_cancelled(void);

#endif
