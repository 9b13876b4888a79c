/* Which version of each file the node's page cache holds.
 *
 * An open keeps the kernel's pages (keep_cache) only while they are of the
 * version it opened, and a handle still open on an older version must not
 * read into a cache a newer open has dropped (its bytes would mix with the
 * newer ones). Each entry carries the order of the master answer it came
 * from: an answer that arrives after a newer one (an open that raced
 * another across a change in the store) neither replaces the newer
 * version nor lets the newer handle's reads fail as if theirs were old. */
#include "fcl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct seen_version {
	uint64_t answered;
	bool changed; /* a read found it changed in the store: keep no pages */
	char version[CIS_UFS_VERSION_MAX];
} seen_version;

struct fcl_versions {
	pthread_mutex_t lock; /* a look and the put it decides, as one */
	fcl_lru *map;         /* ino -> seen_version */
};

int fcl_versions_new(size_t capacity, fcl_versions **out)
{
	fcl_versions *v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	int rc = fcl_lru_new(capacity, sizeof(seen_version), &v->map);
	if (rc) {
		free(v);
		return rc;
	}
	pthread_mutex_init(&v->lock, NULL);
	*out = v;
	return 0;
}

void fcl_versions_free(fcl_versions *v)
{
	if (!v)
		return;
	fcl_lru_free(v->map);
	pthread_mutex_destroy(&v->lock);
	free(v);
}

bool fcl_versions_opened(fcl_versions *v, uint64_t ino, const char *version, uint64_t answered)
{
	seen_version seen, now = {.answered = answered};
	snprintf(now.version, sizeof(now.version), "%s", version);
	pthread_mutex_lock(&v->lock);
	bool known = fcl_lru_get(v->map, &ino, sizeof(ino), &seen);
	bool keep = version[0] && known && !seen.changed && strcmp(seen.version, version) == 0;
	if (!known || seen.answered <= answered)
		(void)fcl_lru_put(v->map, &ino, sizeof(ino), &now, NULL, NULL);
	pthread_mutex_unlock(&v->lock);
	return keep;
}

bool fcl_versions_other(fcl_versions *v, uint64_t ino, const char *version,
                        char now[CIS_UFS_VERSION_MAX])
{
	seen_version seen;
	if (!fcl_lru_get(v->map, &ino, sizeof(ino), &seen) || strcmp(seen.version, version) == 0)
		return false;
	memcpy(now, seen.version, CIS_UFS_VERSION_MAX);
	return true;
}

void fcl_versions_changed(fcl_versions *v, uint64_t ino)
{
	seen_version seen;
	pthread_mutex_lock(&v->lock);
	if (fcl_lru_get(v->map, &ino, sizeof(ino), &seen)) {
		seen.changed = true;
		(void)fcl_lru_put(v->map, &ino, sizeof(ino), &seen, NULL, NULL);
	}
	pthread_mutex_unlock(&v->lock);
}
