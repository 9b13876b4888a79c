/* Bounded LRU map: a chained hash table threaded on a recency list. O(1)
 * per operation; one mutex, which is fine for metadata rates (the hot read
 * path takes it once per block, not per byte). */
#include "fcl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define LRU_MAX_KEY 4096

typedef struct lru_node {
	struct lru_node *hnext;
	struct lru_node *prev, *next; /* recency: head is the most recent */
	uint64_t hash;
	size_t klen;
	unsigned char data[]; /* key, then the value at an aligned offset */
} lru_node;

struct fcl_lru {
	pthread_mutex_t lock;
	lru_node **buckets;
	size_t nbuckets; /* power of two */
	size_t count, capacity, val_size;
	lru_node head; /* sentinel of the recency list */
};

static size_t val_off(size_t klen)
{
	return (klen + 15) & ~(size_t)15;
}

static void *node_val(lru_node *n)
{
	return n->data + val_off(n->klen);
}

int fcl_lru_new(size_t capacity, size_t val_size, fcl_lru **out)
{
	fcl_lru *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	if (capacity == 0)
		capacity = 1;
	l->nbuckets = 16;
	while (l->nbuckets < capacity && l->nbuckets < ((size_t)1 << 24))
		l->nbuckets <<= 1;
	l->buckets = calloc(l->nbuckets, sizeof(*l->buckets));
	if (!l->buckets) {
		free(l);
		return -ENOMEM;
	}
	l->capacity = capacity;
	l->val_size = val_size;
	l->head.prev = l->head.next = &l->head;
	pthread_mutex_init(&l->lock, NULL);
	*out = l;
	return 0;
}

void fcl_lru_free(fcl_lru *l)
{
	if (!l)
		return;
	lru_node *n = l->head.next;
	while (n != &l->head) {
		lru_node *next = n->next;
		free(n);
		n = next;
	}
	free(l->buckets);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

static void list_unlink(lru_node *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
}

static void list_push_front(fcl_lru *l, lru_node *n)
{
	n->prev = &l->head;
	n->next = l->head.next;
	l->head.next->prev = n;
	l->head.next = n;
}

/* Caller holds the lock. Returns the link that points at the node (or at
 * NULL where it would be). */
static lru_node **do_find(fcl_lru *l, const void *key, size_t klen, uint64_t h)
{
	lru_node **pp = &l->buckets[h & (l->nbuckets - 1)];
	while (*pp) {
		lru_node *n = *pp;
		if (n->hash == h && n->klen == klen && memcmp(n->data, key, klen) == 0)
			return pp;
		pp = &n->hnext;
	}
	return pp;
}

/* Caller holds the lock: unhash, unlink, copy the value out, free. */
static void do_drop(fcl_lru *l, lru_node *n, void *val)
{
	lru_node **pp = do_find(l, n->data, n->klen, n->hash);
	*pp = n->hnext;
	list_unlink(n);
	if (val)
		memcpy(val, node_val(n), l->val_size);
	l->count--;
	free(n);
}

bool fcl_lru_get(fcl_lru *l, const void *key, size_t klen, void *val)
{
	uint64_t h = cis_hash64(key, klen, 0);
	pthread_mutex_lock(&l->lock);
	lru_node *n = *do_find(l, key, klen, h);
	if (n) {
		list_unlink(n);
		list_push_front(l, n);
		if (val)
			memcpy(val, node_val(n), l->val_size);
	}
	pthread_mutex_unlock(&l->lock);
	return n != NULL;
}

/* Insert or replace, unless keep says the value in place stays (1). */
static int put(fcl_lru *l, const void *key, size_t klen, const void *val, void *evicted,
               bool *did_evict, bool (*keep)(const void *old, void *arg), void *arg)
{
	if (did_evict)
		*did_evict = false;
	if (klen > LRU_MAX_KEY)
		return -EINVAL;
	uint64_t h = cis_hash64(key, klen, 0);
	pthread_mutex_lock(&l->lock);
	lru_node **pp = do_find(l, key, klen, h);
	if (*pp) {
		lru_node *n = *pp;
		if (keep && keep(node_val(n), arg)) {
			pthread_mutex_unlock(&l->lock);
			return 1;
		}
		memcpy(node_val(n), val, l->val_size);
		list_unlink(n);
		list_push_front(l, n);
		pthread_mutex_unlock(&l->lock);
		return 0;
	}
	lru_node *n = malloc(sizeof(*n) + val_off(klen) + l->val_size);
	if (!n) {
		pthread_mutex_unlock(&l->lock);
		return -ENOMEM;
	}
	n->hash = h;
	n->klen = klen;
	memcpy(n->data, key, klen);
	memcpy(node_val(n), val, l->val_size);
	n->hnext = NULL;
	*pp = n;
	list_push_front(l, n);
	l->count++;
	if (l->count > l->capacity) {
		do_drop(l, l->head.prev, evicted);
		if (did_evict)
			*did_evict = true;
	}
	pthread_mutex_unlock(&l->lock);
	return 0;
}

int fcl_lru_put(fcl_lru *l, const void *key, size_t klen, const void *val, void *evicted,
                bool *did_evict)
{
	return put(l, key, klen, val, evicted, did_evict, NULL, NULL);
}

int fcl_lru_put_unless(fcl_lru *l, const void *key, size_t klen, const void *val,
                       bool (*keep)(const void *old, void *arg), void *arg)
{
	return put(l, key, klen, val, NULL, NULL, keep, arg);
}

bool fcl_lru_remove(fcl_lru *l, const void *key, size_t klen, void *val)
{
	uint64_t h = cis_hash64(key, klen, 0);
	pthread_mutex_lock(&l->lock);
	lru_node *n = *do_find(l, key, klen, h);
	if (n)
		do_drop(l, n, val);
	pthread_mutex_unlock(&l->lock);
	return n != NULL;
}

bool fcl_lru_pop(fcl_lru *l, void *val)
{
	pthread_mutex_lock(&l->lock);
	bool found = l->head.prev != &l->head;
	if (found)
		do_drop(l, l->head.prev, val);
	pthread_mutex_unlock(&l->lock);
	return found;
}

size_t fcl_lru_count(fcl_lru *l)
{
	pthread_mutex_lock(&l->lock);
	size_t n = l->count;
	pthread_mutex_unlock(&l->lock);
	return n;
}

bool fcl_lru_pop_if(fcl_lru *l, bool (*pred)(const void *val, void *arg), void *arg, void *val)
{
	pthread_mutex_lock(&l->lock);
	bool found = l->head.prev != &l->head && pred(node_val(l->head.prev), arg);
	if (found)
		do_drop(l, l->head.prev, val);
	pthread_mutex_unlock(&l->lock);
	return found;
}
