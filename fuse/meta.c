/* Client-side metadata: an entry cache ((parent, name) -> attributes, or a
 * negative entry) and an attribute cache (inode -> attributes), each a
 * bounded LRU with its own timeout. Misses go to the source with single
 * flight: the first thread to miss a key asks, later ones for the same key
 * wait for its answer, so a thousand readers opening one new file cost one
 * master request.
 *
 * Every answer is put with the ticket (fcl_meta_ticket) taken when it
 * arrived, and never replaces an entry put with a later one: the answer
 * that arrived last is the newest, since the master answers a request that
 * asks the store (an open of a changed file, a lookup that lists a
 * directory) after the quick ones sent later, and its answer is the fresher.
 * The order of sending would put the old size of a grown file back in that
 * case; without any order, a thread that put its answer late did. A
 * forgotten inode leaves a tombstone with its ticket, so an answer that
 * arrived before the forget does not come back. */
#include "fcl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/time.h"

#define KEY_MAX (8 + 256)

typedef struct cached {
	uint64_t expires_ns;
	uint64_t ticket; /* taken when the answer this came from arrived */
	bool negative;
	fcl_attr attr;
} cached;

/* An open cache entry; oi.key belongs to the cache (freed under olock on
 * every way out: expiry, eviction, replacement, invalidation). */
typedef struct open_ent {
	uint64_t expires_ns;
	uint64_t vhash;
	fcl_open_info oi;
} open_ent;

/* One request under way; waiters hold references. */
typedef struct flight {
	struct flight *next;
	unsigned char key[KEY_MAX];
	size_t klen;
	int refs;
	bool done;
	int rc;
	fcl_attr attr;
	cis_errmsg em;
} flight;

struct fcl_meta {
	fcl_meta_src src;
	uint64_t entry_ns, attr_ns, neg_ns;
	fcl_lru *entries, *attrs;
	fcl_lru *opens;        /* ino -> open_ent */
	pthread_mutex_t olock; /* guards opens, so a key is freed exactly once */
	uint64_t tickets;      /* the last ticket handed out */
	pthread_mutex_t lock;  /* guards flights */
	pthread_cond_t landed;
	flight *flights;
};

int fcl_meta_new(const fcl_meta_src *src, uint64_t entry_ms, uint64_t attr_ms, uint64_t neg_ms,
                 size_t capacity, fcl_meta **out)
{
	fcl_meta *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->src = *src;
	m->entry_ns = entry_ms * 1000000u;
	m->attr_ns = attr_ms * 1000000u;
	m->neg_ns = neg_ms * 1000000u;
	int rc = fcl_lru_new(capacity, sizeof(cached), &m->entries);
	if (rc)
		goto out_free;
	rc = fcl_lru_new(capacity, sizeof(cached), &m->attrs);
	if (rc)
		goto out_entries;
	rc = fcl_lru_new(capacity < FCL_OPEN_CACHE_MAX ? capacity : FCL_OPEN_CACHE_MAX,
	                 sizeof(open_ent), &m->opens);
	if (rc)
		goto out_attrs;
	pthread_mutex_init(&m->olock, NULL);
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->landed, NULL);
	*out = m;
	return 0;
out_attrs:
	fcl_lru_free(m->attrs);
out_entries:
	fcl_lru_free(m->entries);
out_free:
	free(m);
	return rc;
}

void fcl_meta_free(fcl_meta *m)
{
	if (!m)
		return;
	fcl_lru_free(m->entries);
	fcl_lru_free(m->attrs);
	open_ent e;
	while (fcl_lru_pop(m->opens, &e))
		free(e.oi.key);
	fcl_lru_free(m->opens);
	pthread_mutex_destroy(&m->olock);
	pthread_mutex_destroy(&m->lock);
	pthread_cond_destroy(&m->landed);
	free(m);
}

/* Entry keys: 'e', parent (8 bytes), name. Attribute keys: 'a', inode. */
static size_t entry_key(unsigned char *k, uint64_t parent, const char *name)
{
	size_t n = strnlen(name, 255);
	k[0] = 'e';
	memcpy(k + 1, &parent, 8);
	memcpy(k + 9, name, n);
	return 9 + n;
}

static size_t attr_key(unsigned char *k, uint64_t ino)
{
	k[0] = 'a';
	memcpy(k + 1, &ino, 8);
	return 9;
}

/* An expired entry stays until a newer answer or the LRU replaces it:
 * removing it here could remove one put meanwhile (a forget's tombstone
 * among them, which keeps older answers out). */
/* A live entry of l at k into *c, and the seconds it has left. */
static bool cache_get(fcl_lru *l, const unsigned char *k, size_t klen, cached *c, double *left)
{
	uint64_t now = cis_mono_ns();
	if (!fcl_lru_get(l, k, klen, c) || c->expires_ns <= now)
		return false;
	*left = (double)(c->expires_ns - now) / 1e9;
	return true;
}

uint64_t fcl_meta_ticket(fcl_meta *m)
{
	return __atomic_add_fetch(&m->tickets, 1, __ATOMIC_RELAXED);
}

static bool put_later(const void *old, void *ticket)
{
	return ((const cached *)old)->ticket > *(const uint64_t *)ticket;
}

/* False when the entry in place came from a later request (this answer is
 * older news and is dropped). */
static bool cache_put(fcl_lru *l, const unsigned char *k, size_t klen, uint64_t ttl_ns,
                      bool negative, const fcl_attr *a, uint64_t ticket)
{
	if (ttl_ns == 0)
		return true;
	cached c = {.expires_ns = cis_mono_ns() + ttl_ns, .ticket = ticket, .negative = negative};
	if (a)
		c.attr = *a;
	/* ENOMEM only costs a miss */
	return fcl_lru_put_unless(l, k, klen, &c, put_later, &ticket) != 1;
}

void fcl_meta_put(fcl_meta *m, uint64_t parent, const char *name, const fcl_attr *a,
                  uint64_t ticket)
{
	unsigned char k[KEY_MAX];
	size_t klen = entry_key(k, parent, name);
	cache_put(m->entries, k, klen, m->entry_ns, false, a, ticket);
	fcl_meta_put_attr(m, a, ticket);
}

/* Drop the open entry of ino unless it is of version vhash (any version
 * when drop_all). One of version vhash is renewed for attr-timeout: the
 * attributes just put show the master still has that version, which is
 * all an open would ask it again. So a listing or a lookup made past the
 * timeout (a new epoch's walk, the kernel's lookups after its own entries
 * expired) spares every open of the files it names its master request. */
static void open_update(fcl_meta *m, uint64_t ino, uint64_t vhash, bool drop_all)
{
	open_ent e;
	pthread_mutex_lock(&m->olock);
	if (fcl_lru_get(m->opens, &ino, sizeof(ino), &e)) {
		if (drop_all || e.vhash != vhash) {
			fcl_lru_remove(m->opens, &ino, sizeof(ino), NULL);
			free(e.oi.key);
		} else {
			e.expires_ns = cis_mono_ns() + m->attr_ns;
			(void)fcl_lru_put(m->opens, &ino, sizeof(ino), &e, NULL,
			                  NULL); /* in place */
		}
	}
	pthread_mutex_unlock(&m->olock);
}

void fcl_meta_put_attr(fcl_meta *m, const fcl_attr *a, uint64_t ticket)
{
	unsigned char k[KEY_MAX];
	size_t klen = attr_key(k, a->ino);
	/* Another version: what its Open said no longer holds. */
	if (cache_put(m->attrs, k, klen, m->attr_ns, false, a, ticket) && !a->is_dir)
		open_update(m, a->ino, a->vhash, false);
}

int fcl_meta_newer_attr(fcl_meta *m, uint64_t ino, uint64_t ticket, fcl_attr *out)
{
	unsigned char k[KEY_MAX];
	size_t klen = attr_key(k, ino);
	cached c;
	/* Expired or not: what matters is that the kernel may have been given
	 * it after the caller's copy was taken. */
	if (!fcl_lru_get(m->attrs, k, klen, &c) || c.ticket <= ticket)
		return 0;
	if (c.negative)
		return -1;
	*out = c.attr;
	return 1;
}

void fcl_meta_forget_attr(fcl_meta *m, uint64_t ino)
{
	unsigned char k[KEY_MAX];
	size_t klen = attr_key(k, ino);
	/* a tombstone (a miss for getattr) that older answers cannot replace */
	cache_put(m->attrs, k, klen, m->attr_ns, true, NULL, fcl_meta_ticket(m));
	open_update(m, ino, 0, true);
}

void fcl_meta_put_open(fcl_meta *m, const fcl_attr *a, const fcl_open_info *oi)
{
	if (m->attr_ns == 0)
		return;
	open_ent e = {.expires_ns = cis_mono_ns() + m->attr_ns, .vhash = a->vhash, .oi = *oi};
	e.oi.key = strdup(oi->key ? oi->key : "");
	if (!e.oi.key)
		return; /* a cache: ENOMEM only costs a miss */
	unsigned char k[KEY_MAX];
	size_t klen = attr_key(k, a->ino);
	open_ent old;
	bool evicted = false;
	/* The attributes and the entry together, under olock: a newer
	 * answer's attributes put before refuse both, and put after, they
	 * drop the entry (open_update waits for olock). An answer older than
	 * the open entry cached says nothing new either. */
	pthread_mutex_lock(&m->olock);
	if ((fcl_lru_get(m->opens, &a->ino, sizeof(a->ino), &old) &&
	     old.oi.answered > oi->answered) ||
	    !cache_put(m->attrs, k, klen, m->attr_ns, false, a, oi->answered)) {
		pthread_mutex_unlock(&m->olock);
		free(e.oi.key);
		return;
	}
	/* fcl_lru_put does not report a replaced value: take it out first. */
	if (fcl_lru_remove(m->opens, &a->ino, sizeof(a->ino), &old))
		free(old.oi.key);
	if (fcl_lru_put(m->opens, &a->ino, sizeof(a->ino), &e, &old, &evicted))
		free(e.oi.key);
	else if (evicted)
		free(old.oi.key);
	pthread_mutex_unlock(&m->olock);
}

int fcl_meta_get_open(fcl_meta *m, uint64_t ino, fcl_open_info *oi)
{
	open_ent e;
	int rc = 0;
	pthread_mutex_lock(&m->olock);
	if (!fcl_lru_get(m->opens, &ino, sizeof(ino), &e)) {
		rc = -ENOENT;
	} else if (e.expires_ns <= cis_mono_ns()) {
		fcl_lru_remove(m->opens, &ino, sizeof(ino), NULL);
		free(e.oi.key);
		rc = -ENOENT;
	} else {
		*oi = e.oi;
		oi->key = strdup(e.oi.key);
		if (!oi->key)
			rc = -ENOMEM;
	}
	pthread_mutex_unlock(&m->olock);
	return rc;
}

size_t fcl_meta_open_count(fcl_meta *m)
{
	return fcl_lru_count(m->opens);
}

/* Put the source's answer (rc, *a) for key k, which arrived at ticket,
 * before anyone can miss it again. *a becomes the newest attributes known
 * for its inode: another thread's answer that arrived after this one may
 * have been put first, and the kernel is not to be given older ones (a
 * grown file's old size). */
static void put_answer(fcl_meta *m, const unsigned char *k, size_t klen, uint64_t parent,
                       const char *name, int rc, fcl_attr *a, uint64_t ticket)
{
	if (name && rc == 0)
		fcl_meta_put(m, parent, name, a, ticket);
	else if (name && rc == -ENOENT)
		cache_put(m->entries, k, klen, m->neg_ns, true, NULL, ticket);
	else if (!name && rc == 0)
		fcl_meta_put_attr(m, a, ticket);
	if (rc == 0)
		(void)fcl_meta_newer_attr(m, a->ino, ticket, a);
}

/* The source request for one key, shared by every thread that asks while it
 * is under way. */
static int fetch_shared(fcl_meta *m, const unsigned char *k, size_t klen, uint64_t parent,
                        const char *name, uint64_t ino, fcl_attr *out, cis_errmsg *em)
{
	pthread_mutex_lock(&m->lock);
	flight *f = m->flights;
	while (f && !(f->klen == klen && memcmp(f->key, k, klen) == 0))
		f = f->next;
	if (f) {
		f->refs++;
		while (!f->done)
			pthread_cond_wait(&m->landed, &m->lock);
	} else {
		f = calloc(1, sizeof(*f));
		if (!f) {
			pthread_mutex_unlock(&m->lock);
			return -ENOMEM;
		}
		memcpy(f->key, k, klen);
		f->klen = klen;
		f->refs = 1;
		f->next = m->flights;
		m->flights = f;
		pthread_mutex_unlock(&m->lock);

		if (name)
			f->rc = m->src.lookup(m->src.ctx, parent, name, &f->attr, &f->em);
		else
			f->rc = m->src.getattr(m->src.ctx, ino, &f->attr, &f->em);
		put_answer(m, k, klen, parent, name, f->rc, &f->attr, fcl_meta_ticket(m));

		pthread_mutex_lock(&m->lock);
		flight **pp = &m->flights;
		while (*pp != f)
			pp = &(*pp)->next;
		*pp = f->next;
		f->done = true;
		pthread_cond_broadcast(&m->landed);
	}
	int rc = f->rc;
	if (rc == 0)
		*out = f->attr;
	else if (em)
		*em = f->em;
	bool last = --f->refs == 0;
	pthread_mutex_unlock(&m->lock);
	if (last)
		free(f);
	return rc;
}

int fcl_meta_lookup(fcl_meta *m, uint64_t parent, const char *name, fcl_attr *out, fcl_left *left,
                    cis_errmsg *em)
{
	fcl_left fresh = {-1, -1}, *l = left ? left : &fresh;
	*l = fresh;
	if (strlen(name) > 255)
		return cis_fail(em, -ENAMETOOLONG, "lookup: name over 255 bytes");
	unsigned char k[KEY_MAX];
	size_t klen = entry_key(k, parent, name);
	cached c;
	double entry_left;
	if (cache_get(m->entries, k, klen, &c, &entry_left)) {
		l->entry = entry_left;
		if (c.negative)
			return -ENOENT;
		/* The name gives the inode; its attributes come from the
		 * attribute cache, which every later answer (an open, a
		 * getattr) updated, or from the master: the name's own copy
		 * may be older, and a kernel given the old size of a grown
		 * file cuts its reads there. */
		int rc = fcl_meta_getattr(m, c.attr.ino, out, l, em);
		l->entry = entry_left; /* getattr reset it */
		if (rc != -ENOENT)
			return rc;
		/* That inode is gone (the name is another object now, of
		 * another type): ask for the name, whose answer replaces the
		 * entry (removing it here could remove a newer one). */
	}
	*l = fresh;
	return fetch_shared(m, k, klen, parent, name, 0, out, em);
}

double fcl_meta_attr_left(fcl_meta *m, uint64_t ino)
{
	unsigned char k[KEY_MAX];
	cached c;
	double left;
	return cache_get(m->attrs, k, attr_key(k, ino), &c, &left) ? left : -1;
}

int fcl_meta_getattr(fcl_meta *m, uint64_t ino, fcl_attr *out, fcl_left *left, cis_errmsg *em)
{
	unsigned char k[KEY_MAX];
	size_t klen = attr_key(k, ino);
	cached c;
	double attr_left;
	if (left)
		*left = (fcl_left){-1, -1};
	if (cache_get(m->attrs, k, klen, &c, &attr_left) && !c.negative) { /* negative: forgotten */
		*out = c.attr;
		if (left)
			left->attr = attr_left;
		return 0;
	}
	return fetch_shared(m, k, klen, 0, NULL, ino, out, em);
}
