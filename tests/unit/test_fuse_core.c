/* cistern-fuse core logic: lookup counts and forget, the bounded LRU, the
 * metadata caches with single flight and negative entries, the readahead
 * detector and the command line. These modules use neither libfuse nor the
 * RPC layer, so they are compiled in here directly. */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "../../fuse/inode.c"
#include "../../fuse/lru.c"
#include "../../fuse/meta.c"
#include "../../fuse/opts.c"
#include "../../fuse/readahead.c"
#include "../../fuse/versions.c"

/* ---- inode table ---- */

Test(fuse_inode, counts_and_forget)
{
	fcl_inodes *t;
	cr_assert_eq(fcl_inodes_new(&t), 0);
	cr_assert_eq(fcl_inodes_ref(t, 42), 0);
	cr_assert_eq(fcl_inodes_ref(t, 42), 0);
	cr_assert_eq(fcl_inodes_ref(t, 7), 0);
	cr_assert_eq(fcl_inodes_lookups(t, 42), 2);
	cr_assert_eq(fcl_inodes_count(t), 2);
	cr_assert_not(fcl_inodes_forget(t, 42, 1));
	cr_assert_eq(fcl_inodes_lookups(t, 42), 1);
	cr_assert(fcl_inodes_forget(t, 42, 1));
	cr_assert_eq(fcl_inodes_lookups(t, 42), 0);
	cr_assert_eq(fcl_inodes_count(t), 1);
	/* Forgetting an unknown node is harmless. */
	cr_assert(fcl_inodes_forget(t, 9999, 3));
	cr_assert_eq(fcl_inodes_ref(t, 0), -EINVAL);
	fcl_inodes_free(t);
}

static void io_open(fcl_io *io, void *arg)
{
	io->opens++;
	io->backing = *(int32_t *)arg;
}

static void io_close(fcl_io *io, void *arg)
{
	*(int32_t *)arg = io->backing;
	if (--io->opens == 0)
		io->backing = 0;
}

/* A node's open state outlives the kernel's forget while files stay open
 * (the state decides how the next open of it is read), and goes with the
 * last release. */
Test(fuse_inode, open_state_until_last_release)
{
	fcl_inodes *t;
	int32_t backing = 5, seen = 0;
	cr_assert_eq(fcl_inodes_new(&t), 0);
	cr_assert_eq(fcl_inodes_ref(t, 42), 0);
	cr_assert_eq(fcl_inodes_with_io(t, 42, io_open, &backing), 0);
	cr_assert_eq(fcl_inodes_with_io(t, 42, io_open, &backing), 0);
	cr_assert(fcl_inodes_forget(t, 42, 1)); /* no lookups left... */
	cr_assert_eq(fcl_inodes_count(t), 1);   /* ...but two opens */
	cr_assert_eq(fcl_inodes_with_io(t, 42, io_close, &seen), 0);
	cr_assert_eq(seen, 5);
	cr_assert_eq(fcl_inodes_count(t), 1);
	cr_assert_eq(fcl_inodes_with_io(t, 42, io_close, &seen), 0);
	cr_assert_eq(fcl_inodes_count(t), 0);
	/* A node the kernel looked up and opened keeps its lookups. */
	cr_assert_eq(fcl_inodes_ref(t, 7), 0);
	cr_assert_eq(fcl_inodes_with_io(t, 7, io_open, &backing), 0);
	cr_assert_eq(fcl_inodes_with_io(t, 7, io_close, &seen), 0);
	cr_assert_eq(fcl_inodes_lookups(t, 7), 1);
	cr_assert_eq(fcl_inodes_with_io(t, 0, io_open, &backing), -EINVAL);
	fcl_inodes_free(t);
}

/* Memory follows what the kernel holds: a million lookups, each forgotten,
 * leave nothing behind, and every survivor keeps its own count through the
 * deletions' backward shifts. */
Test(fuse_inode, forget_bounds_memory)
{
	fcl_inodes *t;
	cr_assert_eq(fcl_inodes_new(&t), 0);
	const uint64_t n = 1000000;
	for (uint64_t i = 2; i < n + 2; i++)
		cr_assert_eq(fcl_inodes_ref(t, i * 2654435761u), 0);
	cr_assert_eq(fcl_inodes_count(t), n);
	/* Keep every 1000th, with a second reference. */
	for (uint64_t i = 2; i < n + 2; i++) {
		uint64_t ino = i * 2654435761u;
		if (i % 1000 == 0)
			cr_assert_eq(fcl_inodes_ref(t, ino), 0);
		else
			cr_assert(fcl_inodes_forget(t, ino, 1));
	}
	cr_assert_eq(fcl_inodes_count(t), n / 1000);
	for (uint64_t i = 2; i < n + 2; i++) {
		uint64_t ino = i * 2654435761u;
		cr_assert_eq(fcl_inodes_lookups(t, ino), i % 1000 == 0 ? 2 : 0, "ino %lu", ino);
	}
	size_t slots = 0;
	for (int i = 0; i < SHARDS; i++)
		slots += t->shards[i].cap;
	/* Shrunk back near the survivors, not a million slots. */
	cr_assert_lt(slots, 64 * 1024, "slots %zu", slots);
	fcl_inodes_free(t);
}

/* ---- LRU ---- */

static bool larger_in_place(const void *old, void *arg)
{
	return *(const int *)old > *(const int *)arg;
}

/* A put that the value in place vetoes changes nothing. */
Test(fuse_lru, put_unless_the_value_in_place_says_keep)
{
	fcl_lru *l;
	cr_assert_eq(fcl_lru_new(4, sizeof(int), &l), 0);
	int k = 7, v = 5, got;
	cr_assert_eq(fcl_lru_put_unless(l, &k, sizeof(k), &v, larger_in_place, &v), 0, "new key");
	v = 3;
	cr_assert_eq(fcl_lru_put_unless(l, &k, sizeof(k), &v, larger_in_place, &v), 1, "kept");
	cr_assert(fcl_lru_get(l, &k, sizeof(k), &got));
	cr_assert_eq(got, 5);
	v = 9;
	cr_assert_eq(fcl_lru_put_unless(l, &k, sizeof(k), &v, larger_in_place, &v), 0, "replaced");
	cr_assert(fcl_lru_get(l, &k, sizeof(k), &got));
	cr_assert_eq(got, 9);
	cr_assert_eq(fcl_lru_count(l), 1);
	fcl_lru_free(l);
}

Test(fuse_lru, bounded_and_evicts_least_recent)
{
	fcl_lru *l;
	cr_assert_eq(fcl_lru_new(3, sizeof(int), &l), 0);
	int v, ev;
	bool did;
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(fcl_lru_put(l, &i, sizeof(i), &i, &ev, &did), 0);
		cr_assert_not(did);
	}
	int k0 = 0;
	cr_assert(fcl_lru_get(l, &k0, sizeof(k0), &v)); /* 0 is now the most recent */
	int k3 = 3;
	cr_assert_eq(fcl_lru_put(l, &k3, sizeof(k3), &k3, &ev, &did), 0);
	cr_assert(did);
	cr_assert_eq(ev, 1);
	cr_assert_eq(fcl_lru_count(l), 3);
	int k1 = 1;
	cr_assert_not(fcl_lru_get(l, &k1, sizeof(k1), &v));
	cr_assert(fcl_lru_remove(l, &k3, sizeof(k3), &v));
	cr_assert_eq(v, 3);
	cr_assert(fcl_lru_pop(l, &v));
	cr_assert_eq(v, 2);
	cr_assert_eq(fcl_lru_count(l), 1);
	char big[5000] = {0};
	cr_assert_eq(fcl_lru_put(l, big, sizeof(big), &v, NULL, NULL), -EINVAL);
	fcl_lru_free(l);
}

/* ---- metadata cache ---- */

typedef struct fake_src {
	atomic_int lookups, getattrs;
	int delay_ms;
	int fail;              /* returned instead of an answer when non-zero */
	atomic_int hold, held; /* getattr waits while hold, saying so in held */
} fake_src;

static int fake_lookup(void *ctx, uint64_t parent, const char *name, fcl_attr *out, cis_errmsg *em)
{
	fake_src *f = ctx;
	atomic_fetch_add(&f->lookups, 1);
	if (f->delay_ms)
		usleep((useconds_t)f->delay_ms * 1000);
	if (f->fail)
		return cis_fail(em, f->fail, "master: injected failure");
	if (strcmp(name, "missing") == 0)
		return -ENOENT;
	*out =
	    (fcl_attr){.ino = parent * 1000 + strlen(name), .size = 123, .mode = 0644, .nlink = 1};
	return 0;
}

static int fake_getattr(void *ctx, uint64_t ino, fcl_attr *out, cis_errmsg *em)
{
	fake_src *f = ctx;
	(void)em;
	atomic_fetch_add(&f->getattrs, 1);
	atomic_store(&f->held, atomic_load(&f->hold));
	while (atomic_load(&f->hold))
		usleep(1000);
	*out = (fcl_attr){.ino = ino, .size = ino * 10, .mode = 0644, .nlink = 1};
	return 0;
}

static fcl_meta *new_meta(fake_src *f, uint64_t ttl_ms)
{
	fcl_meta_src src = {fake_lookup, fake_getattr, f};
	fcl_meta *m;
	cr_assert_eq(fcl_meta_new(&src, ttl_ms, ttl_ms, ttl_ms, 1000, &m), 0);
	return m;
}

/* What a cached answer has left is what the kernel may keep it: the
 * whole timeout again would let it outlive the client's own bound. */
Test(fuse_meta, cached_answers_say_their_time_left)
{
	fake_src f = {0};
	fcl_meta *m = new_meta(&f, 1000);
	fcl_attr a;
	fcl_left l;
	cr_assert_eq(fcl_meta_attr_left(m, 1003), -1, "nothing cached yet");
	cr_assert_eq(fcl_meta_lookup(m, 1, "abc", &a, &l, NULL), 0);
	cr_assert(l.entry == -1 && l.attr == -1, "a fresh answer: %f %f", l.entry, l.attr);
	double a0 = fcl_meta_attr_left(m, 1003);
	cr_assert(a0 > 0.9 && a0 <= 1.0, "attributes left %f", a0);
	cr_assert_eq(fcl_meta_lookup(m, 1, "missing", &a, &l, NULL), -ENOENT);
	cr_assert_eq(l.entry, -1, "a fresh negative answer");
	cr_assert_eq(fcl_meta_lookup(m, 1, "missing", &a, &l, NULL), -ENOENT);
	cr_assert(l.entry > 0.9 && l.entry <= 1.0, "negative entry left %f", l.entry);
	cr_assert_eq(fcl_meta_lookup(m, 1, "abc", &a, &l, NULL), 0); /* from the cache */
	cr_assert(l.entry > 0.9 && l.entry <= 1.0, "entry left %f", l.entry);
	cr_assert(l.attr > 0.9 && l.attr <= 1.0, "attributes left %f", l.attr);
	usleep(600 * 1000);
	cr_assert_eq(fcl_meta_lookup(m, 1, "abc", &a, &l, NULL), 0); /* from the cache */
	cr_assert(l.entry > 0 && l.entry < 0.5, "entry left after 0.6 s: %f", l.entry);
	cr_assert(l.attr > 0 && l.attr < 0.5, "attributes left after 0.6 s: %f", l.attr);
	cr_assert_eq(fcl_meta_getattr(m, 1003, &a, &l, NULL), 0);
	cr_assert(l.attr > 0 && l.attr < 0.5, "getattr: attributes left %f", l.attr);
	cr_assert_eq(atomic_load(&f.lookups), 2, "answered from the cache");
	usleep(500 * 1000);
	cr_assert_eq(fcl_meta_attr_left(m, 1003), -1, "expired");
	cr_assert_eq(fcl_meta_lookup(m, 1, "abc", &a, &l, NULL), 0);
	cr_assert(l.entry == -1 && l.attr == -1, "expired: asked again");
	cr_assert_eq(atomic_load(&f.lookups), 3);
	fcl_meta_free(m);
}

Test(fuse_meta, caches_positive_and_negative)
{
	fake_src f = {0};
	fcl_meta *m = new_meta(&f, 60000);
	fcl_attr a;
	cr_assert_eq(fcl_meta_lookup(m, 1, "abc", &a, NULL, NULL), 0);
	cr_assert_eq(a.ino, 1003);
	cr_assert_eq(fcl_meta_lookup(m, 1, "abc", &a, NULL, NULL), 0);
	cr_assert_eq(atomic_load(&f.lookups), 1);
	/* The lookup also filled the attribute cache. */
	cr_assert_eq(fcl_meta_getattr(m, 1003, &a, NULL, NULL), 0);
	cr_assert_eq(a.size, 123);
	cr_assert_eq(atomic_load(&f.getattrs), 0);
	cr_assert_eq(fcl_meta_lookup(m, 1, "missing", &a, NULL, NULL), -ENOENT);
	cr_assert_eq(fcl_meta_lookup(m, 1, "missing", &a, NULL, NULL), -ENOENT);
	cr_assert_eq(atomic_load(&f.lookups), 2);
	/* Same name, other directory: its own entry. */
	cr_assert_eq(fcl_meta_lookup(m, 2, "abc", &a, NULL, NULL), 0);
	cr_assert_eq(a.ino, 2003);
	cr_assert_eq(atomic_load(&f.lookups), 3);
	fcl_meta_free(m);
}

Test(fuse_meta, expiry_and_errors_not_cached)
{
	fake_src f = {0};
	fcl_meta *m = new_meta(&f, 30);
	fcl_attr a;
	cr_assert_eq(fcl_meta_lookup(m, 1, "x", &a, NULL, NULL), 0);
	usleep(60 * 1000);
	cr_assert_eq(fcl_meta_lookup(m, 1, "x", &a, NULL, NULL), 0);
	cr_assert_eq(atomic_load(&f.lookups), 2);
	f.fail = -CIS_E_STORE;
	cis_errmsg em = {{0}};
	cr_assert_eq(fcl_meta_lookup(m, 1, "y", &a, NULL, &em), -CIS_E_STORE);
	cr_assert_str_eq(em.text, "master: injected failure");
	f.fail = 0;
	/* A failure is not remembered: the next ask goes to the source. */
	cr_assert_eq(fcl_meta_lookup(m, 1, "y", &a, NULL, NULL), 0);
	cr_assert_eq(atomic_load(&f.lookups), 4);
	fcl_meta_free(m);

	/* Timeouts of 0 turn the caches off. */
	fake_src g = {0};
	m = new_meta(&g, 0);
	cr_assert_eq(fcl_meta_lookup(m, 1, "x", &a, NULL, NULL), 0);
	cr_assert_eq(fcl_meta_lookup(m, 1, "x", &a, NULL, NULL), 0);
	cr_assert_eq(atomic_load(&g.lookups), 2);
	fcl_meta_free(m);
}

typedef struct racer {
	fcl_meta *m;
	int rc;
	fcl_attr a;
} racer;

static void *race_lookup(void *arg)
{
	racer *r = arg;
	r->rc = fcl_meta_lookup(r->m, 5, "same-name", &r->a, NULL, NULL);
	return NULL;
}

/* 32 threads missing the same name at once: one source request. The cache
 * is off (ttl 0) so only the single flight can make that true. */
Test(fuse_meta, single_flight)
{
	fake_src f = {.delay_ms = 200};
	fcl_meta *m = new_meta(&f, 0);
	pthread_t th[32];
	racer r[32];
	for (int i = 0; i < 32; i++) {
		r[i] = (racer){.m = m};
		cr_assert_eq(pthread_create(&th[i], NULL, race_lookup, &r[i]), 0);
	}
	for (int i = 0; i < 32; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(r[i].rc, 0);
		cr_assert_eq(r[i].a.ino, 5009);
	}
	/* Threads that started after the first request landed ask again; with a
	 * 200 ms request nearly all share it. */
	cr_assert_lt(atomic_load(&f.lookups), 4, "lookups %d", atomic_load(&f.lookups));
	fcl_meta_free(m);
}

/* ---- open cache ---- */

static fcl_open_info open_info(const char *key, const char *version, uint64_t size)
{
	fcl_open_info oi = {.mount = (struct fcl_mount *)0x1000,
	                    .key = (char *)key,
	                    .size = size,
	                    .block_size = 1 << 20};
	snprintf(oi.version, sizeof(oi.version), "%s", version);
	return oi;
}

/* A directory handle's listing is a copy taken at its first read: later
 * pages must not hand the kernel older attributes than an answer since
 * (a getattr of a grown file) gave it. */
Test(fuse_meta, newer_attr_than_a_listing_copy)
{
	fake_src f = {0};
	fcl_meta_src src = {fake_lookup, fake_getattr, &f};
	fcl_meta *m;
	cr_assert_eq(fcl_meta_new(&src, 60000, 60000, 60000, 16, &m), 0);
	fcl_attr listed = {.ino = 7, .size = 100, .mode = 0644, .nlink = 1, .vhash = 3};
	uint64_t page = fcl_meta_ticket(m);
	fcl_meta_put(m, 1, "f", &listed, page);
	fcl_attr a = listed;
	cr_assert_eq(fcl_meta_newer_attr(m, 7, page, &a), 0, "the listing's own answer");
	cr_assert_eq(fcl_meta_newer_attr(m, 8, page, &a), 0, "nothing cached");
	fcl_attr grown = listed;
	grown.size = 300;
	grown.vhash = 5;
	fcl_meta_put_attr(m, &grown, fcl_meta_ticket(m));
	cr_assert_eq(fcl_meta_newer_attr(m, 7, page, &a), 1);
	cr_assert_eq(a.size, 300, "the later answer's size");
	fcl_meta_forget_attr(m, 7);
	cr_assert_eq(fcl_meta_newer_attr(m, 7, page, &a), -1, "forgotten since the listing");
	cr_assert_eq(atomic_load(&f.getattrs), 0, "the source is never asked");
	fcl_meta_free(m);
}

Test(fuse_open_cache, hit_copies_and_expires_with_attrs)
{
	fake_src f = {0};
	fcl_meta *m = new_meta(&f, 40);
	fcl_open_info got;
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), -ENOENT);
	fcl_attr a = {.ino = 9, .size = 500, .mode = 0644, .nlink = 1, .vhash = 77};
	fcl_open_info oi = open_info("dir/file.bin", "\"etag1\"", 500);
	fcl_meta_put_open(m, &a, &oi);
	cr_assert_eq(fcl_meta_open_count(m), 1);
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), 0);
	cr_assert_str_eq(got.key, "dir/file.bin");
	cr_assert_neq(got.key, oi.key, "the caller gets its own copy");
	cr_assert_str_eq(got.version, "\"etag1\"");
	cr_assert_eq(got.size, 500);
	cr_assert_eq(got.block_size, 1 << 20);
	cr_assert_eq(got.mount, oi.mount, "the mount is shared, not copied");
	free(got.key);
	/* The open also filled the attribute cache. */
	fcl_attr b;
	cr_assert_eq(fcl_meta_getattr(m, 9, &b, NULL, NULL), 0);
	cr_assert_eq(b.vhash, 77);
	cr_assert_eq(atomic_load(&f.getattrs), 0);
	/* Past the attribute timeout the entry is gone, like the attributes. */
	usleep(80 * 1000);
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), -ENOENT);
	cr_assert_eq(fcl_meta_open_count(m), 0);
	fcl_meta_free(m);

	/* An attribute timeout of 0 caches nothing. */
	fake_src g = {0};
	m = new_meta(&g, 0);
	fcl_meta_put_open(m, &a, &oi);
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), -ENOENT);
	fcl_meta_free(m);
}

Test(fuse_open_cache, other_version_or_forgotten_attrs_invalidate)
{
	fake_src f = {0};
	fcl_meta *m = new_meta(&f, 60000);
	fcl_open_info got;
	fcl_attr a = {.ino = 9, .size = 500, .mode = 0644, .nlink = 1, .vhash = 77};
	fcl_open_info oi = open_info("k", "v1", 500);
	fcl_meta_put_open(m, &a, &oi);
	/* Attributes of the same version (a listing, a getattr) keep it. */
	fcl_meta_put_attr(m, &a, fcl_meta_ticket(m));
	fcl_meta_put(m, 1, "k", &a, fcl_meta_ticket(m));
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), 0);
	free(got.key);
	/* Another version drops it: the next open asks the master. */
	fcl_attr a2 = a;
	a2.vhash = 78;
	a2.size = 600;
	fcl_meta_put_attr(m, &a2, fcl_meta_ticket(m));
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), -ENOENT);
	/* A newer open replaces the entry (the old key freed: ASan would see). */
	oi.answered = fcl_meta_ticket(m);
	fcl_meta_put_open(m, &a, &oi);
	oi = open_info("k", "v2", 600);
	oi.answered = fcl_meta_ticket(m);
	fcl_meta_put_open(m, &a2, &oi);
	cr_assert_eq(fcl_meta_open_count(m), 1);
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), 0);
	cr_assert_str_eq(got.version, "v2");
	cr_assert_eq(got.size, 600);
	free(got.key);
	/* Forgetting one inode's attributes drops its entry, and only it. */
	fcl_attr other = {.ino = 10, .vhash = 5};
	oi.answered = fcl_meta_ticket(m);
	fcl_meta_put_open(m, &other, &oi);
	fcl_meta_forget_attr(m, 9);
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), -ENOENT);
	cr_assert_eq(fcl_meta_get_open(m, 10, &got), 0);
	free(got.key);
	fcl_meta_forget_attr(m, 10);
	cr_assert_eq(fcl_meta_get_open(m, 10, &got), -ENOENT);
	fcl_meta_free(m);
}

/* Attributes of the entry's version arriving later (a new epoch's listing,
 * a lookup) renew it for the attribute timeout: the next open needs no
 * master request however long ago the file was first opened. */
Test(fuse_open_cache, same_version_attrs_renew_it)
{
	fake_src f = {0};
	fcl_meta *m = new_meta(&f, 1000);
	fcl_open_info got, oi = open_info("k", "v1", 500);
	fcl_attr a = {.ino = 9, .size = 500, .mode = 0644, .nlink = 1, .vhash = 77};
	oi.answered = fcl_meta_ticket(m);
	fcl_meta_put_open(m, &a, &oi);
	usleep(600 * 1000);
	fcl_meta_put(m, 1, "k", &a, fcl_meta_ticket(m)); /* a listing */
	usleep(600 * 1000); /* 1.2 s after the open, 0.6 s after the listing */
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), 0);
	cr_assert_str_eq(got.version, "v1");
	free(got.key);
	/* Without more attributes it expires in its turn. */
	usleep(500 * 1000);
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), -ENOENT);
	/* Attributes older than the open's answer renew nothing. */
	oi.answered = fcl_meta_ticket(m);
	fcl_meta_put_open(m, &a, &oi);
	usleep(600 * 1000);
	fcl_meta_put_attr(m, &a, oi.answered - 1);
	usleep(500 * 1000);
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), -ENOENT);
	fcl_meta_free(m);
}

/* An open answer that arrives after a newer one (opens racing a change in
 * the store) does not replace the newer entry or its attributes. */
Test(fuse_open_cache, an_older_answer_does_not_replace_a_newer)
{
	fake_src f = {0};
	fcl_meta *m = new_meta(&f, 60000);
	fcl_open_info got, v2 = open_info("k", "v2", 600), v1 = open_info("k", "v1", 500);
	fcl_attr a2 = {.ino = 9, .size = 600, .mode = 0644, .nlink = 1, .vhash = 78};
	fcl_attr a1 = {.ino = 9, .size = 500, .mode = 0644, .nlink = 1, .vhash = 77};
	v2.answered = 5;
	v1.answered = 4;
	fcl_meta_put_open(m, &a2, &v2);
	fcl_meta_put_open(m, &a1, &v1);
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), 0);
	cr_assert_str_eq(got.version, "v2");
	free(got.key);
	fcl_attr b;
	cr_assert_eq(fcl_meta_getattr(m, 9, &b, NULL, NULL), 0);
	cr_assert_eq(b.size, 600);
	/* A later answer does. */
	v1.answered = 6;
	fcl_meta_put_open(m, &a1, &v1);
	cr_assert_eq(fcl_meta_get_open(m, 9, &got), 0);
	cr_assert_str_eq(got.version, "v1");
	free(got.key);
	fcl_meta_free(m);
}

struct getattr_call {
	fcl_meta *m;
	fcl_attr a;
	int rc;
};

static void *getattr_thread(void *arg)
{
	struct getattr_call *g = arg;
	g->rc = fcl_meta_getattr(g->m, 7, &g->a, NULL, NULL);
	return NULL;
}

/* The answer that arrived last wins, even when its request went out
 * first: the master answers a request that asks the store (an open of a
 * changed file) after quicker ones sent later, and its answer is the
 * fresher one (ordering by the sending put the old size back). */
Test(fuse_meta, the_answer_that_arrives_last_wins)
{
	fake_src f = {0};
	fcl_meta *m = new_meta(&f, 60000);
	atomic_store(&f.hold, 1);
	struct getattr_call g = {.m = m};
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, getattr_thread, &g), 0);
	while (!atomic_load(&f.held))
		usleep(1000);
	fcl_attr quick = {.ino = 7, .size = 99, .mode = 0644, .nlink = 1, .vhash = 2};
	fcl_meta_put_attr(m, &quick, fcl_meta_ticket(m));
	atomic_store(&f.hold, 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(g.rc, 0);
	fcl_attr b;
	cr_assert_eq(fcl_meta_getattr(m, 7, &b, NULL, NULL), 0);
	cr_assert_eq(b.size, 70, "the answer that arrived last is cached");
	cr_assert_eq(atomic_load(&f.getattrs), 1);
	fcl_meta_free(m);
}

/* An answer put after a newer one arrived (its thread was slow to put it)
 * replaces nothing: not the attributes, not the open entry they came with;
 * nor does one that arrived before its inode was forgotten come back. */
Test(fuse_meta, an_answer_put_late_replaces_nothing_newer)
{
	fake_src f = {0};
	fcl_meta *m = new_meta(&f, 60000);
	uint64_t older = fcl_meta_ticket(m);
	fcl_attr old = {.ino = 7, .size = 60, .mode = 0644, .nlink = 1, .vhash = 1};
	fcl_attr grown = {.ino = 7, .size = 99, .mode = 0644, .nlink = 1, .vhash = 2};
	fcl_open_info oi = open_info("k", "v2", 99);
	oi.answered = fcl_meta_ticket(m);
	fcl_meta_put_open(m, &grown, &oi);
	fcl_meta_put_attr(m, &old, older);
	fcl_attr b;
	cr_assert_eq(fcl_meta_getattr(m, 7, &b, NULL, NULL), 0);
	cr_assert_eq(b.size, 99, "the older answer replaced the newer attributes");
	fcl_open_info got;
	cr_assert_eq(fcl_meta_get_open(m, 7, &got), 0, "the older answer dropped the open entry");
	free(got.key);
	/* An open answer older than the attributes puts no entry either. */
	fcl_open_info stale = open_info("k", "v1", 60);
	stale.answered = older;
	fcl_meta_put_open(m, &old, &stale);
	cr_assert_eq(fcl_meta_get_open(m, 7, &got), 0);
	cr_assert_str_eq(got.version, "v2");
	free(got.key);
	/* Forgotten: an answer that arrived before stays out. */
	older = fcl_meta_ticket(m);
	fcl_meta_forget_attr(m, 7);
	fcl_meta_put_attr(m, &old, older);
	cr_assert_eq(fcl_meta_getattr(m, 7, &b, NULL, NULL), 0);
	cr_assert_eq(atomic_load(&f.getattrs), 1, "the forgotten inode is asked for again");
	cr_assert_eq(b.size, 70, "the source's answer, not the one put late");
	fcl_meta_free(m);
}

/* A source's answer whose put lost to one that arrived after it (its
 * thread was slow to put it) hands out the newer attributes, not its own:
 * the threads waiting on it used to get the older size. */
Test(fuse_meta, an_answer_put_late_hands_out_the_newer_attributes)
{
	fake_src f = {0};
	fcl_meta *m = new_meta(&f, 60000);
	unsigned char k[KEY_MAX];
	uint64_t older = fcl_meta_ticket(m);
	fcl_attr grown = {.ino = 7, .size = 99, .mode = 0644, .nlink = 1, .vhash = 2};
	fcl_meta_put_attr(m, &grown, fcl_meta_ticket(m));
	fcl_attr a = {.ino = 7, .size = 60, .mode = 0644, .nlink = 1, .vhash = 1};
	put_answer(m, k, attr_key(k, 7), 0, NULL, 0, &a, older);
	cr_assert_eq(a.size, 99, "getattr handed out the older answer");
	a.size = 60;
	put_answer(m, k, entry_key(k, 1, "f"), 1, "f", 0, &a, older);
	cr_assert_eq(a.size, 99, "lookup handed out the older answer");
	fcl_attr fresh = {.ino = 8, .size = 5, .mode = 0644, .nlink = 1, .vhash = 3};
	put_answer(m, k, attr_key(k, 8), 0, NULL, 0, &fresh, fcl_meta_ticket(m));
	cr_assert_eq(fresh.size, 5, "the newest answer is its own");
	fcl_meta_free(m);
}

/* An expired entry is not removed by the read that finds it expired: the
 * read could remove one put meanwhile, a forget's tombstone among them. */
Test(fuse_meta, an_expired_entry_keeps_its_ticket)
{
	fake_src f = {0};
	fcl_meta *m = new_meta(&f, 1);
	fcl_attr b;
	uint64_t older = fcl_meta_ticket(m);
	fcl_meta_forget_attr(m, 7);
	usleep(3000);
	unsigned char k[KEY_MAX];
	cached c;
	double left;
	cr_assert_not(cache_get(m->attrs, k, attr_key(k, 7), &c, &left));
	cr_assert_eq(fcl_meta_newer_attr(m, 7, older, &b), -1, "the tombstone went with the read");
	fcl_meta_free(m);
}

/* ---- versions the page cache holds ---- */

Test(fuse_versions, keep_cache_only_for_the_newest_answer)
{
	fcl_inodes *t;
	const uint64_t v1 = 0x1111, v2 = 0x2223; /* version hashes (never 0) */
	cr_assert_eq(fcl_inodes_new(&t), 0);
	cr_assert_eq(fcl_inodes_ref(t, 9), 0); /* the kernel holds node 9 */
	cr_assert_eq(fcl_versions_other(t, 9, v1), 0, "nothing known yet");
	cr_assert_not(fcl_versions_opened(t, 9, v1, true, 1), "first open: no pages to keep");
	cr_assert(fcl_versions_opened(t, 9, v1, true, 2));
	cr_assert_not(fcl_versions_opened(t, 9, v2, true, 4), "a new version drops the pages");
	/* The kernel drops them when the opener takes that answer in: a v2
	 * open answered before then must not keep them either. */
	cr_assert_not(fcl_versions_opened(t, 9, v2, true, 5),
	              "kept v1's pages right after a switch");
	cr_assert_eq(fcl_versions_other(t, 9, v1), v2, "a v1 handle is on an older version");
	cr_assert_eq(fcl_versions_other(t, 9, v2), 0);
	/* An answer older than v2's, arriving late: it keeps no pages, and
	 * the v2 handles read on (they used to fail as if on an old version). */
	cr_assert_not(fcl_versions_opened(t, 9, v1, true, 3));
	cr_assert_eq(fcl_versions_other(t, 9, v2), 0);
	cr_assert_eq(fcl_versions_other(t, 9, v1), v2);
	/* Found changed by a v2 read: v1 handles still read as older (a
	 * forgotten version let them fill the cache with v1 bytes under the
	 * v2 handles), and the next open keeps no pages, even of v2. */
	fcl_versions_changed(t, 9);
	cr_assert_eq(fcl_versions_other(t, 9, v1), v2, "a v1 handle is still on an older version");
	cr_assert_not(fcl_versions_opened(t, 9, v2, true, 7));
	cr_assert_not(fcl_versions_opened(t, 9, v2, true, 8), "kept right after the drop");
	cis_sleep_ms(FCL_SWITCH_GRACE_MS + 50);
	cr_assert(fcl_versions_opened(t, 9, v2, true, 8));
	/* Files without a version never keep pages. */
	cr_assert_eq(fcl_inodes_ref(t, 10), 0);
	cr_assert_not(fcl_versions_opened(t, 10, 0x3335, false, 5));
	cr_assert_not(fcl_versions_opened(t, 10, 0x3335, false, 6));
	/* A node the kernel does not hold has no pages: nothing is kept for
	 * it, and a change found for it is nothing to remember. */
	cr_assert_not(fcl_versions_opened(t, 11, v1, true, 9));
	cr_assert_not(fcl_versions_opened(t, 11, v1, true, 10));
	fcl_versions_changed(t, 11);
	cr_assert_eq(fcl_versions_other(t, 11, v2), 0);
	cr_assert_eq(fcl_inodes_count(t), 2, "nodes 9 and 10 only");
	fcl_inodes_free(t);
}

/* The version lives as long as the kernel holds the node, however many
 * other files are opened meanwhile: a map bounded at 65,536 pushed it out,
 * and a handle on the older version then read into the newer one's pages. */
Test(fuse_versions, held_as_long_as_the_node)
{
	fcl_inodes *t;
	const uint64_t v1 = 0x1111, v2 = 0x2223; /* version hashes (never 0) */
	cr_assert_eq(fcl_inodes_new(&t), 0);
	cr_assert_eq(fcl_inodes_ref(t, 5), 0);
	cr_assert_not(fcl_versions_opened(t, 5, v1, true, 1));
	cr_assert_not(fcl_versions_opened(t, 5, v2, true, 2));
	for (uint64_t ino = 100; ino < 100 + 70000; ino++) {
		cr_assert_eq(fcl_inodes_ref(t, ino), 0);
		(void)fcl_versions_opened(t, ino, v1, true, 3);
	}
	cr_assert_eq(fcl_versions_other(t, 5, v1), v2);
	/* Forgotten by the kernel, the node's pages are gone, and so is its
	 * version. */
	cr_assert(fcl_inodes_forget(t, 5, 1));
	cr_assert_eq(fcl_versions_other(t, 5, v1), 0);
	fcl_inodes_free(t);
}

/* The cache is bounded by the metadata capacity: the least recently used
 * entry goes (its key freed), the rest stay. */
Test(fuse_open_cache, bounded_lru)
{
	fake_src f = {0};
	fcl_meta_src src = {fake_lookup, fake_getattr, &f};
	fcl_meta *m;
	cr_assert_eq(fcl_meta_new(&src, 60000, 60000, 60000, 3, &m), 0);
	fcl_open_info oi = open_info("k", "v", 1);
	for (uint64_t ino = 1; ino <= 5; ino++) {
		fcl_attr a = {.ino = ino, .vhash = ino};
		fcl_meta_put_open(m, &a, &oi);
	}
	cr_assert_eq(fcl_meta_open_count(m), 3);
	fcl_open_info got;
	cr_assert_eq(fcl_meta_get_open(m, 1, &got), -ENOENT);
	cr_assert_eq(fcl_meta_get_open(m, 2, &got), -ENOENT);
	for (uint64_t ino = 3; ino <= 5; ino++) {
		cr_assert_eq(fcl_meta_get_open(m, ino, &got), 0);
		free(got.key);
	}
	fcl_meta_free(m); /* frees the keys still held */
}

/* ---- readahead ---- */

#define MiB (1u << 20)

Test(fuse_readahead, sequential_grows_window_to_budget)
{
	fcl_ra ra;
	fcl_ra_init(&ra, 8, FCL_RA_SLACK_HANDLE);
	uint64_t bs = 4 * MiB, size = 400 * (uint64_t)MiB, first, n;
	cr_assert_eq(fcl_ra_on_read(&ra, 0, MiB, bs, size, &first), 0); /* one read: not yet */
	n = fcl_ra_on_read(&ra, MiB, MiB, bs, size, &first);
	cr_assert_eq(n, 1);
	cr_assert_eq(first, 1);
	/* Same block: nothing new. */
	cr_assert_eq(fcl_ra_on_read(&ra, 2 * MiB, MiB, bs, size, &first), 0);
	uint64_t max_ahead = 0;
	for (uint64_t off = 3 * MiB; off < 200 * (uint64_t)MiB; off += MiB) {
		n = fcl_ra_on_read(&ra, off, MiB, bs, size, &first);
		if (n) {
			uint64_t cur = (off + MiB - 1) / bs;
			cr_assert_gt(first, cur);
			if (first + n - 1 - cur > max_ahead)
				max_ahead = first + n - 1 - cur;
		}
	}
	cr_assert_eq(ra.window, 8);
	cr_assert_eq(max_ahead, 8, "ahead %lu", max_ahead);
}

/* A budget of more blocks than one prefetch names: every block ahead is
 * still asked for, once (a window of 512 marked blocks sent that the
 * prefetch, capped at FCL_PREFETCH_MAX, never named). */
Test(fuse_readahead, a_huge_budget_skips_no_block)
{
	fcl_ra ra;
	fcl_ra_init(&ra, 4 * FCL_PREFETCH_MAX, FCL_RA_SLACK_HANDLE);
	uint64_t bs = 64 << 10, nblocks = 8 * FCL_PREFETCH_MAX, size = nblocks * bs, first, n;
	static uint8_t asked[8 * FCL_PREFETCH_MAX];
	for (uint64_t off = 0; off < size; off += bs) {
		n = fcl_ra_on_read(&ra, off, bs, bs, size, &first);
		cr_assert_leq(n, FCL_PREFETCH_MAX, "%lu blocks in one round", n);
		for (uint64_t b = first; n && b < first + n; b++)
			asked[b]++;
	}
	for (uint64_t b = 2; b < nblocks; b++)
		cr_assert_eq(asked[b], 1, "block %lu asked for %u times", b, asked[b]);
}

Test(fuse_readahead, random_never_triggers)
{
	fcl_ra ra;
	fcl_ra_init(&ra, 64, FCL_RA_SLACK_HANDLE);
	uint64_t first, x = 12345;
	uint64_t size = 1024 * (uint64_t)MiB;
	for (int i = 0; i < 1000; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		uint64_t off = (x >> 20) % (size - MiB);
		cr_assert_eq(fcl_ra_on_read(&ra, off, 64 * 1024, 4 * MiB, size, &first), 0,
		             "read %d at %lu", i, off);
	}
}

Test(fuse_readahead, stops_at_end_of_file)
{
	fcl_ra ra;
	fcl_ra_init(&ra, 64, FCL_RA_SLACK_HANDLE);
	uint64_t first, total = 0, bs = MiB, size = 5 * MiB + 17;
	for (uint64_t off = 0; off < size; off += 128 * 1024) {
		uint64_t n = fcl_ra_on_read(&ra, off, 128 * 1024, bs, size, &first);
		if (n)
			cr_assert_leq(first + n, 6);
		total += n;
	}
	cr_assert_eq(total, 5); /* blocks 1..5, each once */
}

/* The samples of a shard read in order by 8 threads, one open each: the
 * file's shared detector takes their reads, out of order within each 8,
 * as one sequential run and asks for every block after the first, once. */
Test(fuse_readahead, shared_by_opens_of_one_file)
{
	fcl_ra_shared *rs;
	cr_assert_eq(fcl_ra_shared_new(&rs), 0);
	uint64_t bs = MiB, size = 32 * (uint64_t)MiB, len = 128 * 1024, first, asked = 0;
	uint64_t next_block = 1;
	for (uint64_t g = 0; g < size / len; g += 8)
		for (uint64_t k = 0; k < 8; k++) {
			uint64_t i = g + (k * 5) % 8; /* 0 5 2 7 4 1 6 3 */
			uint64_t n =
			    fcl_ra_shared_on_read(rs, 42, 7, 64, i * len, len, bs, size, &first);
			if (n) {
				cr_assert_eq(first, next_block, "asked for %lu, next due %lu",
				             first, next_block);
				next_block = first + n;
				asked += n;
			}
		}
	cr_assert_eq(asked, 31, "blocks 1..31, each once: %lu", asked);
	fcl_ra_shared_free(rs);
}

/* A read that waited on a miss while later ones went by is answered long
 * after them, behind the run by more than the slack: it neither restarts
 * the run (the window would fall back to one block and every block ahead
 * be asked for again) nor counts. */
Test(fuse_readahead, late_reads_keep_the_run)
{
	fcl_ra ra;
	fcl_ra_init(&ra, 16, FCL_RA_SLACK_SHARED);
	uint64_t bs = MiB, size = 64 * (uint64_t)MiB, len = 128 * 1024, first, asked = 0;
	uint64_t next_block = 1, lagging[64], nlag = 0, done = 0;
	for (uint64_t i = 0; i < size / len; i++) {
		uint64_t at[2], n_at = 0;
		if (i % 8 == 3)
			lagging[nlag++] = i; /* answered 24 samples (3 MiB) later */
		else
			at[n_at++] = i;
		if (done < nlag && lagging[done] + 24 <= i)
			at[n_at++] = lagging[done++];
		for (uint64_t k = 0; k < n_at; k++) {
			uint64_t n = fcl_ra_on_read(&ra, at[k] * len, len, bs, size, &first);
			if (n) {
				cr_assert_eq(first, next_block,
				             "asked for %lu again (next due %lu)", first,
				             next_block);
				next_block = first + n;
				asked += n;
			}
		}
	}
	cr_assert_eq(asked, 63, "blocks 1..63, each once: %lu", asked);
	cr_assert_eq(ra.window, 16);
}

/* A run is the file's: a new version of it, or another file in its slot,
 * starts over (the next read is the first of a run). */
Test(fuse_readahead, shared_starts_over)
{
	fcl_ra_shared *rs;
	cr_assert_eq(fcl_ra_shared_new(&rs), 0);
	uint64_t bs = MiB, size = 64 * (uint64_t)MiB, len = MiB, first;
	uint64_t other = 43;
	while (fcl_ino_slot(other, FCL_RA_SHARED_BITS) != fcl_ino_slot(42, FCL_RA_SHARED_BITS))
		other++;
	cr_assert_eq(fcl_ra_shared_on_read(rs, 42, 7, 64, 0, len, bs, size, &first), 0);
	cr_assert_eq(fcl_ra_shared_on_read(rs, 42, 7, 64, len, len, bs, size, &first), 1);
	/* The same offsets of another version, then of the other file. */
	cr_assert_eq(fcl_ra_shared_on_read(rs, 42, 8, 64, 2 * len, len, bs, size, &first), 0);
	cr_assert_eq(fcl_ra_shared_on_read(rs, other, 8, 64, 3 * len, len, bs, size, &first), 0);
	cr_assert_eq(fcl_ra_shared_on_read(rs, 42, 8, 64, 3 * len, len, bs, size, &first), 0);
	cr_assert_gt(fcl_ra_shared_on_read(rs, 42, 8, 64, 4 * len, len, bs, size, &first), 0);
	fcl_ra_shared_free(rs);
}

/* ---- options ---- */

static int parse(fcl_opts *o, cis_errmsg *em, int argc, const char **argv)
{
	return fcl_opts_parse(o, argc, (char **)argv, em);
}

Test(fuse_opts, flags_form)
{
	fcl_opts o;
	cis_errmsg em = {{0}};
	const char *argv[] = {"cistern-fuse",
	                      "/mnt/x",
	                      "--master",
	                      "10.0.0.1:19600",
	                      "--root=/data",
	                      "--attr-timeout",
	                      "2.5",
	                      "-o",
	                      "allow_other,entry_timeout=7",
	                      "-f",
	                      "--no-passthrough"};
	cr_assert_eq(parse(&o, &em, 11, argv), 0, "%s", em.text);
	cr_assert_str_eq(o.mountpoint, "/mnt/x");
	cr_assert_str_eq(o.master, "10.0.0.1:19600");
	cr_assert_str_eq(o.root, "/data");
	cr_assert_float_eq(o.attr_timeout, 2.5, 1e-9);
	cr_assert_float_eq(o.entry_timeout, 7, 1e-9);
	cr_assert_str_eq(o.fuse_opts, "allow_other");
	cr_assert(o.foreground);
	cr_assert(o.no_passthrough);
	cr_assert_not(o.no_short_circuit);
	cr_assert_eq(o.http_port, 19621);
	cr_assert_str_eq(o.http_bind, "0.0.0.0");
	fcl_opts_free(&o);
}

/* The metrics port's address: an IP literal, as a flag or in -o. */
Test(fuse_opts, http_bind)
{
	fcl_opts o;
	cis_errmsg em = {{0}};
	const char *a1[] = {"cistern-fuse", "/m", "--master", "h:1", "--http-bind", "127.0.0.1"};
	cr_assert_eq(parse(&o, &em, 6, a1), 0, "%s", em.text);
	cr_assert_str_eq(o.http_bind, "127.0.0.1");
	fcl_opts_free(&o);
	const char *a2[] = {"cistern-fuse", "/m", "--master", "h:1", "-o", "http_bind=::1"};
	cr_assert_eq(parse(&o, &em, 6, a2), 0, "%s", em.text);
	cr_assert_str_eq(o.http_bind, "::1");
	fcl_opts_free(&o);
	const char *a3[] = {"cistern-fuse", "/m", "--master", "h:1", "--http-bind", "localhost"};
	cr_assert_eq(parse(&o, &em, 6, a3), -CIS_E_CONFIG);
	cr_assert(strstr(em.text, "http-bind: expected an IP address, got 'localhost'"), "%s",
	          em.text);
	fcl_opts_free(&o);
}

/* What mount.fuse3 runs for "cistern-fuse#127.0.0.1:19600 /mnt/data
 * fuse.cistern ro,allow_other,root=/ds" and for a labelled source. */
Test(fuse_opts, mount_helper_form)
{
	fcl_opts o;
	cis_errmsg em = {{0}};
	const char *argv[] = {"cistern-fuse", "127.0.0.1:19600", "/mnt/data", "-o",
	                      "rw,nosuid,nodev,allow_other,root=/ds,http_port=0,subtype=cistern"};
	cr_assert_eq(parse(&o, &em, 5, argv), 0, "%s", em.text);
	cr_assert_str_eq(o.master, "127.0.0.1:19600");
	cr_assert_str_eq(o.mountpoint, "/mnt/data");
	cr_assert_str_eq(o.root, "/ds");
	cr_assert_eq(o.http_port, 0);
	cr_assert_str_eq(o.fuse_opts, "rw,nosuid,nodev,allow_other,subtype=cistern");
	cr_assert_not(o.foreground);
	fcl_opts_free(&o);

	const char *argv2[] = {"cistern-fuse", "cistern", "/mnt/data",
	                       ("-omaster=h:1,defaults,no_short_circuit,log_file=/var/log/c.log,"
	                        "_netdev,nofail,x-systemd.requires=w.service,comment=x")};
	cr_assert_eq(parse(&o, &em, 4, argv2), 0, "%s", em.text);
	cr_assert_str_eq(o.master, "h:1");
	cr_assert_null(o.fuse_opts);
	cr_assert(o.no_short_circuit);
	cr_assert_not(o.no_passthrough);
	cr_assert_str_eq(o.log_file, "/var/log/c.log");
	fcl_opts_free(&o);

	/* A source that is not HOST:PORT is a label; -o master= still wins. */
	const char *argv3[] = {"cistern-fuse", "10.0.0.9:7", "/m", "-o", "master=h:2"};
	cr_assert_eq(parse(&o, &em, 5, argv3), 0, "%s", em.text);
	cr_assert_str_eq(o.master, "h:2");
	fcl_opts_free(&o);
}

Test(fuse_opts, errors_are_clear)
{
	fcl_opts o;
	cis_errmsg em = {{0}};
	const char *a1[] = {"cistern-fuse", "/mnt/x"};
	cr_assert_eq(parse(&o, &em, 2, a1), -CIS_E_CONFIG);
	cr_assert(strstr(em.text, "missing master address"), "%s", em.text);
	fcl_opts_free(&o);
	const char *a2[] = {"cistern-fuse", "--master", "h:1"};
	cr_assert_eq(parse(&o, &em, 3, a2), -CIS_E_CONFIG);
	cr_assert_str_eq(em.text, "missing mount point");
	fcl_opts_free(&o);
	const char *a3[] = {"cistern-fuse", "/m", "--master", "nope"};
	cr_assert_eq(parse(&o, &em, 4, a3), -CIS_E_CONFIG);
	cr_assert(strstr(em.text, "expected HOST:PORT"), "%s", em.text);
	fcl_opts_free(&o);
	const char *a4[] = {"cistern-fuse", "/m", "--master", "h:1", "--attr-timeout", "-3"};
	cr_assert_eq(parse(&o, &em, 6, a4), -CIS_E_CONFIG);
	fcl_opts_free(&o);
	const char *a5[] = {"cistern-fuse", "/m", "--master", "h:1", "--bogus", "1"};
	cr_assert_eq(parse(&o, &em, 6, a5), -CIS_E_CONFIG);
	cr_assert(strstr(em.text, "unknown option '--bogus'"), "%s", em.text);
	fcl_opts_free(&o);
	const char *a6[] = {"cistern-fuse", "/m", "--master"};
	cr_assert_eq(parse(&o, &em, 3, a6), -CIS_E_CONFIG);
	fcl_opts_free(&o);
	const char *a7[] = {"cistern-fuse", "/m", "/n", "/o", "--master", "h:1"};
	cr_assert_eq(parse(&o, &em, 6, a7), -CIS_E_CONFIG);
	fcl_opts_free(&o);
	const char *a8[] = {"cistern-fuse", "/m", "-o", "master=h:1,root=rel"};
	cr_assert_eq(parse(&o, &em, 4, a8), -CIS_E_CONFIG);
	fcl_opts_free(&o);
	const char *a9[] = {"cistern-fuse", "--help"};
	cr_assert_eq(parse(&o, &em, 2, a9), 1);
	fcl_opts_free(&o);
}
