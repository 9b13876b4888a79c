/* Short-circuit reads: the worker on this host hands over an open
 * descriptor of the cached block file (OpenLocal over its Unix socket,
 * SCM_RIGHTS) under a lease, and the client preads from it with no copy
 * through the worker (read.c; a failed or short pread drops the descriptor
 * with fcl_local_forget and the read fails over). Descriptors are cached
 * per (block, worker) in a bounded LRU; a lease is renewed when a use finds
 * it past a third of its life, and released when its descriptor leaves the
 * cache (evicted, idle past its lease, or at exit). Renewals and releases
 * are queued and sent in batches by the background tick (every 2 s), off
 * the read path. Readers get a dup, so eviction never closes a descriptor
 * under a read in flight. Block files are written once and renamed into
 * place, so a descriptor never shows other bytes, even after the worker
 * drops the file.
 *
 * Past its descriptor, a handed-over block is remembered ("known"): the
 * file's path (read back from /proc/self/fd), its inode and the worker's
 * boot id. When the descriptor is no longer cached (a dataset with more
 * files than the cache, or the open-file limit, holds), the client opens
 * the file itself — no round trip to the worker, which costs more than the
 * read of a small file — provided the worker has not restarted since (a
 * restarted worker verifies its blocks again before serving them) and the
 * path still leads to the same inode (block files are never rewritten in
 * place; a block fetched again is a new file). No lease protects such a
 * descriptor: an evicted file stays readable until it is closed.
 *
 * Reads through these descriptors never reach the worker, whose eviction
 * order must still see them (a hot set read only this way would look cold
 * and go first). A lease renewal counts as a use there; a block opened
 * directly is reported with a Touch when it is opened and, while it stays
 * in use, as often as a lease would be renewed, in the tick's batches. */
#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cistern/buf.h"
#include "cistern/frame.h"
#include "cistern/log.h"
#include "cistern/msgtype.h"
#include "cistern/time.h"

typedef struct lent {
	int fd;
	uint64_t lease_id;
	uint64_t len;
	uint64_t lease_until_ms; /* monotonic */
	uint64_t lease_ms;
	fcl_worker w; /* where to renew and release */
} lent;

/* Lease renewals or releases queued for one worker, sent by the background
 * tick. A renewal keeps its cache key, to drop the descriptor when the
 * worker no longer knows the lease. */
typedef struct lease_item {
	uint64_t lease_id;
	uint8_t key[24];
} lease_item;

typedef struct lease_batch {
	fcl_worker w;
	cis_buf items; /* lease_item[] */
} lease_batch;

typedef struct lease_queue {
	lease_batch *b; /* one per worker */
	size_t n;
} lease_queue;

/* Leases per request (the worker takes at most 4096). */
#define LEASE_BATCH 4096

/* A block file handed over before, keyed like the descriptor cache. */
typedef struct known {
	uint64_t boot_id; /* of the worker that handed it over */
	uint64_t dev, ino, len;
	uint32_t dir; /* index into fcl_local.dirs */
} known;

#define KNOWN_MAX     524288 /* about 100 bytes each */
#define KNOWN_IDLE_MS 30000  /* a directly opened descriptor's stay, unused */
#define KNOWN_DIRS    64     /* distinct cache dirs remembered */

struct fcl_local {
	fcl_lru *lru;
	pthread_mutex_t lock; /* makes get+dup atomic against eviction */
	lease_queue renew;    /* under lock */
	lease_queue release;  /* under lock */
	lease_queue touch;    /* under lock: uses of directly opened blocks */
	fcl_lru *known;       /* under lock */
	char *dirs[KNOWN_DIRS];
	size_t ndirs; /* under lock; entries are never removed */
};

int fcl_local_new(size_t capacity, fcl_local **out)
{
	fcl_local *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	int rc = fcl_lru_new(capacity, sizeof(lent), &l->lru);
	if (rc) {
		free(l);
		return rc;
	}
	rc = fcl_lru_new(KNOWN_MAX, sizeof(known), &l->known);
	if (rc) {
		fcl_lru_free(l->lru);
		free(l);
		return rc;
	}
	pthread_mutex_init(&l->lock, NULL);
	*out = l;
	return 0;
}

/* The worker no longer knows the lease of it: stop caching its
 * descriptor (if the cache still holds that lease). */
static void forget_lease(fcl *c, const lease_item *it)
{
	fcl_local *l = c->local;
	lent gone;
	pthread_mutex_lock(&l->lock);
	bool found = fcl_lru_get(l->lru, it->key, sizeof(it->key), &gone) &&
	             gone.lease_id == it->lease_id &&
	             fcl_lru_remove(l->lru, it->key, sizeof(it->key), &gone);
	pthread_mutex_unlock(&l->lock);
	if (found)
		close(gone.fd);
}

/* Renew or release the leases of items[0..n); on a renewal, the
 * descriptors whose lease the worker did not know are dropped. */
static int lease_call(fcl *c, const fcl_worker *w, uint16_t type, const lease_item *items, size_t n)
{
	cis_rpc_client *cl = fcl_remote_client(c, w, true);
	uint64_t *ids = malloc(n * sizeof(*ids));
	if (!cl || !ids) {
		free(ids);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		ids[i] = items[i].lease_id;
	Cis__LeaseRequest req = CIS__LEASE_REQUEST__INIT;
	req.lease_id = ids[0];
	req.more_lease_ids = ids + 1;
	req.n_more_lease_ids = n - 1;
	cis_rpc_result res;
	memset(&res, 0, sizeof(res));
	res.fd = -1;
	int rc = cis_rpc_call(cl, type, &req.base, NULL, 0, &res, 5000, NULL);
	free(ids);
	if (rc == -ENOENT && n == 1 && type == CIS_MSG_WORKER_RENEW_LOCAL)
		forget_lease(c, &items[0]);
	if (rc)
		return rc;
	Cis__LeaseReply *rep = NULL;
	rc = cis_msg_unpack(&cis__lease_reply__descriptor, res.msg, res.msg_len,
	                    (ProtobufCMessage **)&rep);
	cis_rpc_result_free(&res);
	if (rc)
		return rc;
	for (size_t u = 0; u < rep->n_unknown_lease_ids; u++)
		for (size_t i = 0; i < n; i++)
			if (items[i].lease_id == rep->unknown_lease_ids[u])
				forget_lease(c, &items[i]);
	cis__lease_reply__free_unpacked(rep, NULL);
	return 0;
}

/* Report uses of the blocks of items[0..n) (the ids in their keys). */
static int touch_call(fcl *c, const fcl_worker *w, const lease_item *items, size_t n)
{
	ProtobufCBinaryData *ids = malloc(n * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		ids[i] = (ProtobufCBinaryData){.len = 16, .data = (uint8_t *)items[i].key};
	Cis__TouchRequest req = CIS__TOUCH_REQUEST__INIT;
	req.ids = ids;
	req.n_ids = n;
	int rc = fcl_remote_notify(c, w, CIS_MSG_WORKER_TOUCH, &req.base, NULL);
	free(ids);
	return rc;
}

/* Queue a renewal, release or touch; false when out of memory. Under lock. */
static bool queue_lease(lease_queue *q, const fcl_worker *w, uint64_t lease_id,
                        const uint8_t key[24])
{
	lease_batch *b = NULL;
	for (size_t i = 0; i < q->n && !b; i++)
		if (q->b[i].w.id == w->id)
			b = &q->b[i];
	if (!b) {
		lease_batch *more = realloc(q->b, (q->n + 1) * sizeof(*more));
		if (!more)
			return false;
		q->b = more;
		b = &q->b[q->n++];
		*b = (lease_batch){.w = *w};
	}
	lease_item it = {.lease_id = lease_id};
	if (key)
		memcpy(it.key, key, sizeof(it.key));
	return cis_buf_append(&b->items, &it, sizeof(it)) == 0;
}

static void free_queue(lease_queue *q)
{
	for (size_t i = 0; i < q->n; i++)
		cis_buf_free(&q->b[i].items);
	free(q->b);
	*q = (lease_queue){0};
}

/* Send a queue, LEASE_BATCH items a request. A worker that does not
 * answer lets releases lapse; its renewals and touches are tried again by
 * later uses. */
static void flush_queue(fcl *c, lease_queue *q, uint16_t type)
{
	pthread_mutex_lock(&c->local->lock);
	lease_queue took = *q;
	*q = (lease_queue){0};
	pthread_mutex_unlock(&c->local->lock);
	for (size_t i = 0; i < took.n; i++) {
		lease_batch *b = &took.b[i];
		const lease_item *items = (const lease_item *)b->items.data;
		size_t total = b->items.len / sizeof(*items);
		for (size_t at = 0; at < total; at += LEASE_BATCH) {
			size_t n = total - at < LEASE_BATCH ? total - at : LEASE_BATCH;
			if (type == CIS_MSG_WORKER_TOUCH)
				(void)touch_call(c, &b->w, items + at, n);
			else
				(void)lease_call(c, &b->w, type, items + at, n);
		}
	}
	free_queue(&took);
}

/* Close an entry that left the cache and queue the release of its lease
 * (sent at once if the queue cannot grow). */
static void drop(fcl *c, lent *e)
{
	close(e->fd);
	if (!c || e->lease_id == 0)
		return; /* opened directly: no lease */
	pthread_mutex_lock(&c->local->lock);
	bool queued = queue_lease(&c->local->release, &e->w, e->lease_id, NULL);
	pthread_mutex_unlock(&c->local->lock);
	if (!queued) {
		lease_item it = {.lease_id = e->lease_id};
		(void)lease_call(c, &e->w, CIS_MSG_WORKER_RELEASE_LOCAL, &it, 1);
	}
}

void fcl_local_free(fcl_local *l)
{
	if (!l)
		return;
	lent e;
	while (fcl_lru_pop(l->lru, &e))
		close(e.fd);
	free_queue(&l->renew);
	free_queue(&l->release);
	free_queue(&l->touch);
	fcl_lru_free(l->lru);
	fcl_lru_free(l->known);
	for (size_t i = 0; i < l->ndirs; i++)
		free(l->dirs[i]);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

size_t fcl_local_count(fcl_local *l)
{
	return fcl_lru_count(l->lru);
}

static size_t make_key(uint8_t *k, const Cis__BlockRef *ref, uint64_t worker_id)
{
	memcpy(k, ref->id.data, 16);
	memcpy(k + 16, &worker_id, 8);
	return 24;
}

/* The block's id as the worker names its file (cis_block_id_fmt). */
static void hex_id(const Cis__BlockRef *ref, char hex[CIS_BLOCK_ID_HEX])
{
	cis_block_id_fmt(cis_block_id_from_bytes(ref->id.data), hex);
}

/* Remember the block file behind fd, just handed over by w: its path must
 * end in <2 hex>/<id> (the worker's layout), else nothing is learned. */
static void learn(fcl_local *l, const fcl_worker *w, const Cis__BlockRef *ref, const uint8_t *k,
                  size_t klen, int fd, uint64_t len)
{
	char link[32], path[PATH_MAX], hex[CIS_BLOCK_ID_HEX];
	const size_t tail = 1 + 2 + 1 + 32; /* "/ab/ab…" */
	struct stat st;
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= (ssize_t)tail || fstat(fd, &st) != 0)
		return;
	path[n] = 0; /* an unlinked file reads "... (deleted)" and fails below */
	hex_id(ref, hex);
	char *t = path + n - tail;
	if (t[0] != '/' || memcmp(t + 1, hex, 2) != 0 || t[3] != '/' || strcmp(t + 4, hex) != 0)
		return;
	*t = 0;
	known kn = {.boot_id = w->boot_id,
	            .dev = (uint64_t)st.st_dev,
	            .ino = (uint64_t)st.st_ino,
	            .len = len};
	pthread_mutex_lock(&l->lock);
	for (kn.dir = 0; kn.dir < l->ndirs && strcmp(l->dirs[kn.dir], path) != 0; kn.dir++)
		;
	if (kn.dir == l->ndirs && l->ndirs < KNOWN_DIRS && (l->dirs[l->ndirs] = strdup(path)))
		l->ndirs++;
	if (kn.dir < l->ndirs)
		(void)fcl_lru_put(l->known, k, klen, &kn, NULL, NULL);
	pthread_mutex_unlock(&l->lock);
}

/* The path of ref's block file as known (*kn) from a hand-over: 1, or 0
 * when none is known, or -1 when it was handed over before w's current
 * start (boot id). */
static int known_path(fcl_local *l, const fcl_worker *w, const Cis__BlockRef *ref, const uint8_t *k,
                      size_t klen, known *kn, char path[PATH_MAX])
{
	char hex[CIS_BLOCK_ID_HEX];
	pthread_mutex_lock(&l->lock);
	bool found = fcl_lru_get(l->known, k, klen, kn);
	if (found)
		snprintf(path, PATH_MAX, "%s", l->dirs[kn->dir]);
	pthread_mutex_unlock(&l->lock);
	if (!found)
		return 0;
	if (kn->boot_id != w->boot_id)
		return -1;
	size_t dl = strlen(path);
	hex_id(ref, hex);
	snprintf(path + dl, PATH_MAX - dl, "/%.2s/%s", hex, hex);
	return 1;
}

/* Whether st is the block file that was handed over. */
static bool same_file(const struct stat *st, const known *kn)
{
	return (uint64_t)st->st_dev == kn->dev && (uint64_t)st->st_ino == kn->ino &&
	       (uint64_t)st->st_size == kn->len;
}

/* Open a known block file directly, into *e (no lease: lease_id 0; it
 * leaves the cache after KNOWN_IDLE_MS unused). False (and forgotten)
 * unless it is still the file w handed over, w has not restarted and it
 * opens. */
static bool open_known(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref, const uint8_t *k,
                       size_t klen, lent *e)
{
	fcl_local *l = c->local;
	char path[PATH_MAX];
	struct stat st;
	known kn;

	int d = -1, kp = known_path(l, w, ref, k, klen, &kn, path);
	if (kp == 0)
		return false;
	if (kp > 0)
		d = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* never wait on a FIFO */
	if (d >= 0 && fstat(d, &st) == 0 && same_file(&st, &kn)) {
		(void)posix_fadvise(d, 0, 0, POSIX_FADV_SEQUENTIAL);
		*e = (lent){.fd = d, .len = kn.len, .lease_ms = KNOWN_IDLE_MS, .w = *w};
		cis_counter_inc(c->stats.direct_opens);
		pthread_mutex_lock(&l->lock);
		(void)queue_lease(&l->touch, w, 0, k); /* a lost touch only ages the block */
		pthread_mutex_unlock(&l->lock);
		return true;
	}
	if (d >= 0)
		close(d);
	pthread_mutex_lock(&l->lock);
	(void)fcl_lru_remove(l->known, k, klen, NULL);
	pthread_mutex_unlock(&l->lock);
	return false;
}

/* OpenLocal: the block file's descriptor and a lease on it, into *e. */
static int ask_worker(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref, lent *e,
                      uint64_t *waited_ns, cis_errmsg *em)
{
	cis_rpc_client *cl = fcl_remote_client(c, w, true);
	if (!cl)
		return cis_fail(em, -ENOMEM, "worker %s: no client", w->unix_path);
	Cis__OpenLocalRequest req = CIS__OPEN_LOCAL_REQUEST__INIT;
	req.block = (Cis__BlockRef *)ref;
	uint64_t start = ref->index * ref->block_size;
	req.wait = ref->block_size <= FCL_LOCAL_WAIT_MAX ||
	           (start < ref->file_size && ref->file_size - start <= FCL_LOCAL_WAIT_MAX);
	cis_rpc_result res;
	memset(&res, 0, sizeof(res));
	res.fd = -1;
	uint64_t t0 = cis_mono_ns();
	int rc = cis_rpc_call(cl, CIS_MSG_WORKER_OPEN_LOCAL, &req.base, NULL, 0, &res,
	                      c->opts->worker_timeout_ms, em);
	uint64_t took = cis_mono_ns() - t0;
	if (rc == -ETIMEDOUT && req.wait)
		/* The worker may be waiting on a slow store, not hung: read the
		 * block from it as a stream (its first bytes as they come), and
		 * take it for down only if that times out too. */
		return cis_fail(em, -EAGAIN, "worker %s: the block's fetch took over %d ms",
		                w->unix_path, c->opts->worker_timeout_ms);
	if (rc)
		return rc;
	Cis__OpenLocalReply *rep = NULL;
	rc = cis_msg_unpack(&cis__open_local_reply__descriptor, res.msg, res.msg_len,
	                    (ProtobufCMessage **)&rep);
	int got_fd = res.fd;
	res.fd = -1;
	cis_rpc_result_free(&res);
	if (rc || got_fd < 0) {
		if (got_fd >= 0)
			close(got_fd);
		if (rep)
			cis__open_local_reply__free_unpacked(rep, NULL);
		return cis_fail(em, -CIS_E_PROTO, "worker %s: open-local reply without %s",
		                w->unix_path, rc ? "a valid message" : "a descriptor");
	}
	/* Block files are read front to back: let the kernel read ahead in
	 * big windows on this (shared, cached) descriptor. */
	(void)posix_fadvise(got_fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	*waited_ns = rep->waited ? took : 0;
	*e = (lent){
	    .fd = got_fd,
	    .lease_id = rep->lease_id,
	    .len = rep->length,
	    .lease_ms = rep->lease_expiry_ms ? rep->lease_expiry_ms : 30000,
	    .w = *w,
	};
	cis__open_local_reply__free_unpacked(rep, NULL);
	return 0;
}

int fcl_local_open(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref, int *fd, uint64_t *len,
                   uint64_t *waited_ns, cis_errmsg *em)
{
	fcl_local *l = c->local;
	uint8_t k[24];
	size_t klen = make_key(k, ref, w->id);
	lent e;
	*waited_ns = 0;

	pthread_mutex_lock(&l->lock);
	bool hit = fcl_lru_get(l->lru, k, klen, &e);
	if (hit && e.w.boot_id != w->boot_id) {
		/* Handed over (or found) before the worker restarted: it has
		 * to verify the block again first. */
		(void)fcl_lru_remove(l->lru, k, klen, NULL);
		pthread_mutex_unlock(&l->lock);
		drop(c, &e);
		pthread_mutex_lock(&l->lock);
		hit = false;
	}
	if (hit) {
		int d = dup(e.fd);
		uint64_t now = cis_mono_ms();
		/* More than a third of the lease used up: renew. */
		bool renew = e.lease_until_ms < now + e.lease_ms * 2 / 3;
		bool queued = true;
		if (renew) {
			/* Claim the renewal so other readers do not repeat it,
			 * and leave it to the background tick (two thirds of
			 * the lease are left). */
			lent claimed = e;
			claimed.lease_until_ms = now + e.lease_ms;
			(void)fcl_lru_put(l->lru, k, klen, &claimed, NULL, NULL);
			queued = e.lease_id ? queue_lease(&l->renew, w, e.lease_id, k)
			                    : queue_lease(&l->touch, w, 0, k); /* opened directly */
		}
		pthread_mutex_unlock(&l->lock);
		if (!queued && e.lease_id) {
			lease_item it = {.lease_id = e.lease_id};
			memcpy(it.key, k, sizeof(it.key));
			(void)lease_call(c, w, CIS_MSG_WORKER_RENEW_LOCAL, &it, 1);
		}
		if (d < 0)
			return cis_fail(em, -errno, "dup: %s", cis_strerror(-errno));
		*fd = d;
		*len = e.len;
		return 0;
	}
	pthread_mutex_unlock(&l->lock);
	if (!w->boot_id || !open_known(c, w, ref, k, klen, &e)) {
		int rc = ask_worker(c, w, ref, &e, waited_ns, em);
		if (rc)
			return rc;
		if (w->boot_id && ref->id.len == 16)
			learn(l, w, ref, k, klen, e.fd, e.len);
	}
	e.lease_until_ms = cis_mono_ms() + e.lease_ms;

	lent victim, other;
	bool evicted = false, raced = false;
	int rc;
	pthread_mutex_lock(&l->lock);
	if (fcl_lru_get(l->lru, k, klen, &other)) {
		/* Another reader opened it meanwhile: use theirs. */
		raced = true;
		*fd = dup(other.fd);
		*len = other.len;
	} else {
		rc = fcl_lru_put(l->lru, k, klen, &e, &victim, &evicted);
		*fd = dup(e.fd);
		*len = e.len;
		if (rc) {
			raced = true; /* not cached: release ours below */
			rc = 0;
		}
	}
	pthread_mutex_unlock(&l->lock);
	if (raced)
		drop(c, &e);
	if (evicted)
		drop(c, &victim);
	if (*fd < 0)
		return cis_fail(em, -errno, "dup: %s", cis_strerror(-errno));
	return 0;
}

bool fcl_local_cached(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref)
{
	fcl_local *l = c->local;
	uint8_t k[24];
	size_t klen = make_key(k, ref, w->id);
	lent e;
	pthread_mutex_lock(&l->lock);
	bool found = fcl_lru_get(l->lru, k, klen, &e);
	pthread_mutex_unlock(&l->lock);
	return found;
}

bool fcl_local_present(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref)
{
	if (fcl_local_cached(c, w, ref))
		return true;
	uint8_t k[24];
	size_t klen = make_key(k, ref, w->id);
	char path[PATH_MAX];
	known kn;
	struct stat st;
	return known_path(c->local, w, ref, k, klen, &kn, path) > 0 && stat(path, &st) == 0 &&
	       same_file(&st, &kn);
}

void fcl_local_forget(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref)
{
	fcl_local *l = c->local;
	uint8_t k[24];
	size_t klen = make_key(k, ref, w->id);
	lent e;

	pthread_mutex_lock(&l->lock);
	bool found = fcl_lru_remove(l->lru, k, klen, &e);
	pthread_mutex_unlock(&l->lock);
	if (found)
		drop(c, &e);
}

static bool lease_lapsed(const void *val, void *arg)
{
	const lent *e = val;
	return e->lease_until_ms <= *(uint64_t *)arg;
}

static void release_lapsed(fcl *c, uint64_t now)
{
	lent e;
	/* Least recently used first; stop at the first one still leased. The
	 * lock keeps a reader from dup'ing an fd we are about to close. */
	for (;;) {
		pthread_mutex_lock(&c->local->lock);
		bool got = fcl_lru_pop_if(c->local->lru, lease_lapsed, &now, &e);
		pthread_mutex_unlock(&c->local->lock);
		if (!got)
			break;
		drop(c, &e);
	}
}

void fcl_local_tick(fcl *c)
{
	flush_queue(c, &c->local->renew, CIS_MSG_WORKER_RENEW_LOCAL);
	flush_queue(c, &c->local->touch, CIS_MSG_WORKER_TOUCH);
	release_lapsed(c, cis_mono_ms());
	flush_queue(c, &c->local->release, CIS_MSG_WORKER_RELEASE_LOCAL);
}

void fcl_local_release_all(fcl *c)
{
	release_lapsed(c, UINT64_MAX);
	flush_queue(c, &c->local->release, CIS_MSG_WORKER_RELEASE_LOCAL);
}
