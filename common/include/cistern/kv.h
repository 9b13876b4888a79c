/* An ordered list of key=value strings: mount options, HTTP query
 * parameters, S3 headers. Keys are unique (set replaces). Small lists only:
 * lookups are O(n). */
#ifndef CISTERN_KV_H
#define CISTERN_KV_H

#include <stddef.h>

typedef struct cis_kv {
	char *key;
	char *value;
} cis_kv;

typedef struct cis_kvlist {
	cis_kv *items;
	size_t n;
	size_t cap;
} cis_kvlist;

#define CIS_KVLIST_INIT                                                                            \
	{                                                                                          \
		NULL, 0, 0                                                                         \
	}

void cis_kvlist_free(cis_kvlist *l);
/* Copies key and value. 0 or -ENOMEM. */
int cis_kvlist_set(cis_kvlist *l, const char *key, const char *value);
/* Parse "key=value" and set it. -EINVAL when there is no '=' or no key. */
int cis_kvlist_set_pair(cis_kvlist *l, const char *pair);
/* Borrowed pointer into l, or NULL. */
const char *cis_kvlist_get(const cis_kvlist *l, const char *key);
int cis_kvlist_remove(cis_kvlist *l, const char *key);
int cis_kvlist_copy(cis_kvlist *dst, const cis_kvlist *src);

#endif
