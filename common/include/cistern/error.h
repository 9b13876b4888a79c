/* Error codes shared by every Cistern module.
 *
 * Functions that act return int: 0 on success, a negative errno value, or a
 * negative project code from the reserved range below. Predicates return
 * bool. cis_strerror() names every code. Where a caller needs more than the
 * code (which object, what the store said), functions take an optional
 * cis_errmsg that they fill with one lowercase line; see cis_fail(). */
#ifndef CISTERN_ERROR_H
#define CISTERN_ERROR_H

#include <stddef.h>

/* Project codes, used negated (return -CIS_E_PROTO). Kept far above errno. */
enum cis_err {
	CIS_E_FIRST = 10000,
	CIS_E_PROTO,    /* malformed, truncated or unexpected frame or message */
	CIS_E_TOOBIG,   /* input over a size limit */
	CIS_E_STORE,    /* the under-store failed (5xx, network, unparseable reply) */
	CIS_E_DENIED,   /* the store refused the credentials or signature */
	CIS_E_NOBUCKET, /* the bucket does not exist */
	CIS_E_URI,      /* malformed or unsupported URI */
	CIS_E_CONFIG,   /* bad configuration value or flag */
	CIS_E_CHECKSUM, /* data failed its checksum */
	CIS_E_PARSE,    /* malformed XML, JSON or text input */
	CIS_E_CHANGED,  /* the object changed under us (version mismatch) */
	CIS_E_CLOSED,   /* the connection closed or was never open */
	CIS_E_INTERNAL, /* a bug: an invariant did not hold */
	CIS_E_UPSTREAM, /* a peer answered that it could not reach a server of its own */
	CIS_E_LAST
};

#define CIS_ERRMSG_MAX 512

/* One line saying what failed, for logs and users. text[0] == 0 when unset. */
typedef struct cis_errmsg {
	char text[CIS_ERRMSG_MAX];
} cis_errmsg;

/* Static string naming err (negative errno or -CIS_E_*). Never NULL. */
const char *cis_strerror(int err);

/* Fill em (if not NULL) with the formatted text and return code, so that
 * failures read: return cis_fail(em, -ENOENT, "s3://%s/%s: not found", b, k); */
int cis_fail(cis_errmsg *em, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The text in em if set, else cis_strerror(code). */
const char *cis_errmsg_or(const cis_errmsg *em, int code);

#endif
