/* Kernel lookup counts, open files and the version of each node's pages,
 * keyed by node id (= master inode id). Open addressing with linear
 * probing and backward-shift deletion, in shards so concurrent lookups
 * rarely share a lock. 56 bytes per node the kernel holds or has open; a
 * node the kernel forgets (and no longer has open) costs nothing, and a
 * shard shrinks when it falls below a quarter full, so memory follows the
 * kernel's working set (bounded by its own inode cache), not the number
 * of names ever seen. */
#include "fcl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SHARDS    64
#define MIN_SLOTS 64

typedef struct slot {
	uint64_t ino; /* 0: empty (the master never hands out inode 0) */
	uint64_t nlookup;
	fcl_io io;
} slot;

typedef struct shard {
	pthread_mutex_t lock;
	slot *slots;
	size_t cap; /* power of two, or 0 before the first insert */
	size_t n;
} shard;

struct fcl_inodes {
	shard shards[SHARDS];
};

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

int fcl_inodes_new(fcl_inodes **out)
{
	fcl_inodes *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (int i = 0; i < SHARDS; i++)
		pthread_mutex_init(&t->shards[i].lock, NULL);
	*out = t;
	return 0;
}

void fcl_inodes_free(fcl_inodes *t)
{
	if (!t)
		return;
	for (int i = 0; i < SHARDS; i++) {
		free(t->shards[i].slots);
		pthread_mutex_destroy(&t->shards[i].lock);
	}
	free(t);
}

static shard *shard_of(fcl_inodes *t, uint64_t ino, uint64_t *h)
{
	*h = mix(ino);
	return &t->shards[*h % SHARDS];
}

/* Caller holds the shard lock. Index of ino, or of the empty slot where it
 * would go. cap must be non-zero. */
static size_t do_probe(const shard *s, uint64_t ino, uint64_t h)
{
	size_t mask = s->cap - 1;
	size_t i = (h / SHARDS) & mask;
	while (s->slots[i].ino && s->slots[i].ino != ino)
		i = (i + 1) & mask;
	return i;
}

/* Caller holds the shard lock. Rehash into newcap slots. */
static int do_resize(shard *s, size_t newcap)
{
	slot *old = s->slots;
	size_t oldcap = s->cap;
	slot *fresh = calloc(newcap, sizeof(*fresh));
	if (!fresh)
		return -ENOMEM;
	s->slots = fresh;
	s->cap = newcap;
	for (size_t i = 0; i < oldcap; i++) {
		if (!old[i].ino)
			continue;
		size_t j = do_probe(s, old[i].ino, mix(old[i].ino));
		s->slots[j] = old[i];
	}
	free(old);
	return 0;
}

/* Caller holds the shard lock. The slot of ino in *at, added (empty) if
 * missing, growing the shard first when it is three quarters full. 0 or
 * -ENOMEM. */
static int do_slot(shard *s, uint64_t ino, uint64_t h, size_t *at)
{
	size_t i = s->cap ? do_probe(s, ino, h) : 0;
	if (s->cap && s->slots[i].ino) {
		*at = i;
		return 0;
	}
	if (s->cap == 0 || (s->n + 1) * 4 > s->cap * 3) {
		int rc = do_resize(s, s->cap ? s->cap * 2 : MIN_SLOTS);
		if (rc)
			return rc;
		i = do_probe(s, ino, h);
	}
	s->slots[i] = (slot){.ino = ino};
	s->n++;
	*at = i;
	return 0;
}

int fcl_inodes_ref(fcl_inodes *t, uint64_t ino)
{
	if (ino == 0)
		return -EINVAL;
	uint64_t h;
	size_t i;
	shard *s = shard_of(t, ino, &h);
	pthread_mutex_lock(&s->lock);
	int rc = do_slot(s, ino, h, &i);
	if (rc == 0)
		s->slots[i].nlookup++;
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Caller holds the lock: delete slot i, shifting back the run after it so
 * probes never meet a hole they should have crossed. */
static void do_delete(shard *s, size_t i)
{
	size_t mask = s->cap - 1;
	size_t j = i;
	for (;;) {
		j = (j + 1) & mask;
		if (!s->slots[j].ino)
			break;
		size_t home = (mix(s->slots[j].ino) / SHARDS) & mask;
		/* Move j back into i unless its home lies cyclically in (i, j]. */
		bool stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
		if (!stays) {
			s->slots[i] = s->slots[j];
			i = j;
		}
	}
	s->slots[i] = (slot){0};
	s->n--;
}

/* Caller holds the lock: delete slot i if the kernel neither holds nor has
 * open its node, and shrink the shard when it is mostly empty. */
static void do_drop_unused(shard *s, size_t i)
{
	if (s->slots[i].nlookup || s->slots[i].io.opens)
		return;
	do_delete(s, i);
	if (s->cap > MIN_SLOTS && s->n * 8 < s->cap)
		(void)do_resize(s, s->cap / 2); /* on ENOMEM it just stays large */
}

bool fcl_inodes_forget(fcl_inodes *t, uint64_t ino, uint64_t n)
{
	uint64_t h;
	shard *s = shard_of(t, ino, &h);
	bool gone = true;
	pthread_mutex_lock(&s->lock);
	if (s->cap == 0)
		goto out_unlock;
	size_t i = do_probe(s, ino, h);
	if (!s->slots[i].ino)
		goto out_unlock;
	if (s->slots[i].nlookup > n) {
		s->slots[i].nlookup -= n;
		gone = false;
		goto out_unlock;
	}
	s->slots[i].nlookup = 0;
	do_drop_unused(s, i);
out_unlock:
	pthread_mutex_unlock(&s->lock);
	return gone;
}

uint64_t fcl_inodes_lookups(fcl_inodes *t, uint64_t ino)
{
	uint64_t h, n = 0;
	shard *s = shard_of(t, ino, &h);
	pthread_mutex_lock(&s->lock);
	if (s->cap) {
		size_t i = do_probe(s, ino, h);
		n = s->slots[i].ino ? s->slots[i].nlookup : 0;
	}
	pthread_mutex_unlock(&s->lock);
	return n;
}

size_t fcl_inodes_count(fcl_inodes *t)
{
	size_t n = 0;
	for (int i = 0; i < SHARDS; i++) {
		pthread_mutex_lock(&t->shards[i].lock);
		n += t->shards[i].n;
		pthread_mutex_unlock(&t->shards[i].lock);
	}
	return n;
}

int fcl_inodes_with_io(fcl_inodes *t, uint64_t ino, void (*fn)(fcl_io *io, void *arg), void *arg)
{
	if (ino == 0)
		return -EINVAL;
	uint64_t h;
	size_t i;
	shard *s = shard_of(t, ino, &h);
	pthread_mutex_lock(&s->lock);
	int rc = do_slot(s, ino, h, &i);
	if (rc == 0) {
		fn(&s->slots[i].io, arg);
		do_drop_unused(s, i);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}
