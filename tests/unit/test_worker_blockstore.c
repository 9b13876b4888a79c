/* The worker's block store (worker/blockstore.c) against a real directory
 * and LMDB: commit and lookup, watermark eviction that spares pinned and
 * in-use blocks, reopen with reconcile, verification, drop while in use,
 * the pin of a pinned block dropped for a bad file kept for its next
 * commit, the persisted worker id. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ATIME_BATCH 4 /* saves of a few blocks take several transactions */
#include "../../worker/blockstore.c"
#include "../../worker/ref.c"
#include "../../worker/slru.c"

/* The master link is not part of this test. */
void wrk_link_note(wrk_link *l, cis_block_id id, bool added)
{
	(void)l;
	(void)id;
	(void)added;
}

static wrk w;
static char root[256], cdir[300], sdir[300];

static void setup(void)
{
	snprintf(root, sizeof(root), "/tmp/cis-bs-test.XXXXXX");
	cr_assert_not_null(mkdtemp(root));
	snprintf(cdir, sizeof(cdir), "%s/cache", root);
	snprintf(sdir, sizeof(sdir), "%s/state", root);
	memset(&w, 0, sizeof(w));
	w.metrics = cis_metrics_new();
	w.m.evictions = cis_metrics_counter(w.metrics, "e", NULL, "e");
	w.m.evicted_bytes = cis_metrics_counter(w.metrics, "eb", NULL, "eb");
	w.m.checksum_failures = cis_metrics_counter(w.metrics, "c", NULL, "c");
	w.m.verified_blocks = cis_metrics_counter(w.metrics, "v", NULL, "v");
	w.m.disk_errors = cis_metrics_counter(w.metrics, "d", NULL, "d");
}

static void teardown(void)
{
	char cmd[400];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	cr_assert_eq(system(cmd), 0);
	cis_metrics_free(w.metrics);
}

/* Uses within this of a pass's first are that pass (WRK_REUSE_MS in the
 * worker); wide enough for a put and a few uses under a sanitizer. */
#define REUSE_MS 300

static wrk_bs *open_bs(uint64_t cap)
{
	wrk_dir_cfg d = {cdir, cap};
	wrk_bs_opts o = {&d, 1, sdir, 0.9, 0.5, 0.8, REUSE_MS};
	wrk_bs *bs = NULL;
	cis_errmsg em = {{0}};

	cr_assert_eq(wrk_bs_open(&w, &o, &bs, &em), 0, "%s", em.text);
	w.bs = bs;
	return bs;
}

static cis_block_id bid(int i)
{
	return cis_block_id_make(1, "k", "v", 1 << 20, (uint64_t)i);
}

/* Write a block of len bytes of value (char)i through the real path;
 * used: a reader waited for it (else a load or a prefetch cached it). */
static int put_as(wrk_bs *bs, int i, size_t len, bool pin, bool used)
{
	char tmp[PATH_MAX], *buf = malloc(len);
	cis_checksum *cs = cis_checksum_new();
	int dir, fd, rc;

	memset(buf, i, len);
	rc = wrk_bs_reserve(bs, len, &dir);
	if (rc < 0)
		goto out;
	fd = wrk_bs_create_tmp(bs, dir, bid(i), tmp, sizeof(tmp));
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
	cis_checksum_update(cs, buf, len);
	rc = wrk_bs_commit(bs, dir, bid(i), len, cis_checksum_digest(cs), tmp, pin, used);
out:
	cis_checksum_free(cs);
	free(buf);
	return rc;
}

static int put(wrk_bs *bs, int i, size_t len, bool pin)
{
	return put_as(bs, i, len, pin, true);
}

static uint64_t used(wrk_bs *bs)
{
	Cis__DirUsage u = CIS__DIR_USAGE__INIT;

	wrk_bs_dir_usage(bs, 0, &u);
	return u.used;
}

TestSuite(worker_blockstore, .init = setup, .fini = teardown);

Test(worker_blockstore, commit_then_acquire)
{
	wrk_bs *bs = open_bs(1000);
	wrk_blk_info info;
	struct stat st;

	cr_assert_eq(put(bs, 1, 100, false), 0);
	cr_assert_eq(wrk_bs_acquire(bs, bid(1), true, &info), 0);
	cr_assert(info.verified);
	cr_assert_eq(info.len, 100);
	cr_assert_eq(stat(info.path, &st), 0);
	cr_assert_eq(st.st_size, 100);
	cr_assert(strstr(info.path, "/cache/"));
	wrk_bs_release(bs, info.blk);
	cr_assert_eq(wrk_bs_acquire(bs, bid(2), true, &info), -ENOENT);
	cr_assert_eq(used(bs), 100);
	wrk_bs_close(bs);
}

Test(worker_blockstore, eviction_spares_pinned_and_in_use)
{
	wrk_bs *bs = open_bs(1000);
	wrk_blk_info held;

	cr_assert_eq(put(bs, 0, 100, true), 0); /* pinned, oldest */
	for (int i = 1; i < 9; i++)
		cr_assert_eq(put(bs, i, 100, false), 0);
	cr_assert_eq(wrk_bs_acquire(bs, bid(1), false, &held), 0); /* in use */
	cr_assert_eq(used(bs), 900);
	/* 900 + 100 > high (900): evict down to low (500). */
	cr_assert_eq(put(bs, 9, 100, false), 0);
	cr_assert_leq(used(bs), 600);
	cr_assert(wrk_bs_has(bs, bid(0)), "pinned block evicted");
	cr_assert(wrk_bs_has(bs, bid(1)), "block in use evicted");
	cr_assert(!wrk_bs_has(bs, bid(2)), "oldest unpinned block kept");
	cr_assert(wrk_bs_has(bs, bid(9)));
	cr_assert_gt(cis_counter_get(w.m.evictions), 0);
	wrk_bs_release(bs, held.blk);
	wrk_bs_close(bs);
}

/* A scan of new blocks 4..11 (800 bytes) through a 1000-byte cache that
 * holds blocks 0..3: past the high mark, so eviction picks among them. */
static void scan(wrk_bs *bs)
{
	for (int i = 4; i < 12; i++)
		cr_assert_eq(put(bs, i, 100, false), 0);
}

/* Blocks a client reads again, after a pause, through descriptors it holds
 * are reported as uses (Touch): they move to the protected segment, and a
 * scan of new blocks then evicts the scan, not them. Untouched, the same
 * blocks would be the oldest and go first. */
Test(worker_blockstore, touched_blocks_survive_a_scan)
{
	wrk_bs *bs = open_bs(1000);

	for (int i = 0; i < 4; i++)
		cr_assert_eq(put(bs, i, 100, false), 0);
	usleep(2 * REUSE_MS * 1000);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(wrk_bs_touch(bs, bid(i)), 0);
	scan(bs);
	for (int i = 0; i < 4; i++)
		cr_assert(wrk_bs_has(bs, bid(i)), "touched block %d evicted by a scan", i);
	cr_assert(!wrk_bs_has(bs, bid(4)), "the scan's oldest block kept");
	cr_assert_leq(used(bs), 900);
	cr_assert_eq(wrk_bs_touch(bs, bid(99)), -ENOENT);
	wrk_bs_close(bs);
}

/* One pass over a block in several requests (a reader of a 4 MiB block
 * asks in 1 MiB reads) is one use: uses closer than the reuse window do not
 * promote, and a scan evicts such blocks like any other (each hit promoted
 * them, and one pass over a dataset larger than the cache flushed the hot
 * set). */
Test(worker_blockstore, uses_in_one_pass_do_not_promote)
{
	wrk_bs *bs = open_bs(1000);
	wrk_blk_info info;

	for (int i = 0; i < 4; i++) {
		cr_assert_eq(put(bs, i, 100, false), 0);
		for (int k = 0; k < 3; k++) { /* the rest of the pass: hits at once */
			cr_assert_eq(wrk_bs_acquire(bs, bid(i), true, &info), 0);
			wrk_bs_release(bs, info.blk);
		}
	}
	scan(bs);
	for (int i = 0; i < 2; i++)
		cr_assert(!wrk_bs_has(bs, bid(i)), "block %d of one pass outlived the scan", i);
	wrk_bs_close(bs);
}

/* A block used again and again, never pausing as long as the window, is
 * promoted all the same: the window runs from its pass's first use, not
 * from its last one (then the hottest blocks never left probation). */
Test(worker_blockstore, a_block_used_without_pause_is_promoted)
{
	wrk_bs *bs = open_bs(1000);

	for (int i = 0; i < 4; i++)
		cr_assert_eq(put(bs, i, 100, false), 0);
	for (int k = 0; k < 8; k++) { /* a use every fifth of the window, past it */
		for (int i = 0; i < 2; i++)
			cr_assert_eq(wrk_bs_touch(bs, bid(i)), 0);
		usleep(REUSE_MS * 1000 / 5);
	}
	scan(bs);
	for (int i = 0; i < 2; i++)
		cr_assert(wrk_bs_has(bs, bid(i)), "block %d, used all along, evicted by a scan", i);
	wrk_bs_close(bs);
}

/* A block a load or a prefetch cached has not been used yet: its first use
 * is not a re-use, however late it comes; the one after a pause is. */
Test(worker_blockstore, the_first_use_of_a_loaded_block_does_not_promote)
{
	wrk_bs *bs = open_bs(1000);

	for (int i = 0; i < 4; i++)
		cr_assert_eq(put_as(bs, i, 100, false, false), 0);
	usleep(2 * REUSE_MS * 1000);
	for (int i = 0; i < 2; i++) /* read once: still probation */
		cr_assert_eq(wrk_bs_touch(bs, bid(i)), 0);
	usleep(2 * REUSE_MS * 1000);
	for (int i = 2; i < 4; i++) { /* read, and read again after a pause */
		cr_assert_eq(wrk_bs_touch(bs, bid(i)), 0);
		usleep(2 * REUSE_MS * 1000);
		cr_assert_eq(wrk_bs_touch(bs, bid(i)), 0);
	}
	scan(bs);
	for (int i = 0; i < 2; i++)
		cr_assert(!wrk_bs_has(bs, bid(i)), "block %d, used once, outlived the scan", i);
	for (int i = 2; i < 4; i++)
		cr_assert(wrk_bs_has(bs, bid(i)), "block %d, used twice, evicted by a scan", i);
	wrk_bs_close(bs);
}

Test(worker_blockstore, full_of_pinned_blocks_is_enospc)
{
	wrk_bs *bs = open_bs(300);

	for (int i = 0; i < 3; i++)
		cr_assert_eq(put(bs, i, 100, true), 0);
	cr_assert_eq(put(bs, 3, 100, false), -ENOSPC);
	cr_assert_eq(wrk_bs_pin(bs, bid(0), false), 0);
	cr_assert_eq(put(bs, 3, 100, false), 0, "unpinned block makes room");
	cr_assert(!wrk_bs_has(bs, bid(0)));
	wrk_bs_close(bs);
}

static void *verify_thread(void *arg)
{
	return (void *)(intptr_t)wrk_bs_verify(arg, bid(0), false);
}

/* In a child that dies as kill -9 leaves a worker (no close): block 0
 * committed first, blocks 1-2 a second later, block 0 used a second after
 * that; the access times saved when save. Returns block 0's and block 1's
 * access times as the next start reads them. */
static void atimes_after_crash(bool save, int64_t *t0, int64_t *t1)
{
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		wrk_bs *bs = open_bs(10000);
		wrk_blk_info info;
		int ok = put(bs, 0, 100, false) == 0;
		usleep(1100000);
		ok = ok && put(bs, 1, 100, false) == 0 && put(bs, 2, 100, false) == 0;
		usleep(1100000);
		ok = ok && wrk_bs_acquire(bs, bid(0), true, &info) == 0;
		if (ok)
			wrk_bs_release(bs, info.blk);
		if (ok && save)
			ok = wrk_bs_save_atimes(bs) == 1;
		_exit(ok ? 0 : 1);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed");
	wrk_bs *bs = open_bs(10000);
	pthread_mutex_lock(&bs->mu);
	const wrk_block *b0 = do_find(bs, bid(0)), *b1 = do_find(bs, bid(1));
	cr_assert(b0 && b1);
	*t0 = b0->atime_s;
	*t1 = b1->atime_s;
	pthread_mutex_unlock(&bs->mu);
	wrk_bs_close(bs);
}

Test(worker_blockstore, access_times_saved_survive_a_crash)
{
	int64_t t0, t1;
	atimes_after_crash(true, &t0, &t1);
	cr_assert_gt(t0, t1, "the block used last is the newest after the restart");
}

Test(worker_blockstore, access_times_unsaved_are_lost_in_a_crash)
{
	/* the control: without the save, the restart sees commit times */
	int64_t t0, t1;
	atimes_after_crash(false, &t0, &t1);
	cr_assert_lt(t0, t1);
}

Test(worker_blockstore, a_save_writes_what_moved_and_keeps_the_rest_of_the_record)
{
	wrk_bs *bs = open_bs(10000);
	wrk_blk_info info;
	cr_assert_eq(put(bs, 0, 100, false), 0);
	cr_assert_eq(put(bs, 1, 100, true), 0);
	cr_assert_eq(wrk_bs_save_atimes(bs), 0, "commits write their own time");
	usleep(1100000);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(wrk_bs_acquire(bs, bid(i), true, &info), 0);
		wrk_bs_release(bs, info.blk);
	}
	cr_assert_eq(wrk_bs_free(bs, bid(0)), 0);
	cr_assert_eq(wrk_bs_save_atimes(bs), 1, "block 0 was freed");
	cr_assert_eq(wrk_bs_save_atimes(bs), 0, "nothing moved since");
	wrk_bs_close(bs);
	/* the record patched kept its pin */
	bs = open_bs(10000);
	cr_assert_eq(wrk_bs_acquire(bs, bid(1), false, &info), 0);
	cr_assert(info.pinned);
	wrk_bs_release(bs, info.blk);
	cr_assert_neq(wrk_bs_acquire(bs, bid(0), false, &info), 0);
	wrk_bs_close(bs);
}

/* The stored record of block i: true if there is one. */
static bool stored(wrk_bs *bs, int i, struct bs_rec *rec)
{
	uint8_t key[16];
	MDB_val k = {16, key}, v;
	MDB_txn *txn;
	cis_block_id_to_bytes(bid(i), key);
	cr_assert_eq(mdb_txn_begin(bs->env, NULL, MDB_RDONLY, &txn), 0);
	int rc = mdb_get(txn, bs->dbi_blocks, &k, &v);
	if (rc == 0)
		memcpy(rec, v.mv_data, sizeof(*rec));
	mdb_txn_abort(txn);
	return rc == 0;
}

static void use(wrk_bs *bs, int i)
{
	wrk_blk_info info;
	cr_assert_eq(wrk_bs_acquire(bs, bid(i), true, &info), 0);
	wrk_bs_release(bs, info.blk);
}

Test(worker_blockstore, a_save_takes_the_moved_blocks_from_their_list)
{
	wrk_bs *bs = open_bs(10000);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(put(bs, i, 100, false), 0);
	cr_assert_eq(wrk_bs_save_atimes(bs), 0, "commits write their own time");
	usleep(1100000);
	for (int k = 0; k < 3; k++) {
		use(bs, 3);
		use(bs, 7);
	}
	pthread_mutex_lock(&bs->mu);
	cr_assert_eq(bs->nmoved, 2, "each block that moved is listed once");
	cr_assert_not(bs->moved_lost || bs->any_stale, "nothing sends the save through the table");
	pthread_mutex_unlock(&bs->mu);
	cr_assert_eq(wrk_bs_free(bs, bid(7)), 0);
	cr_assert_eq(wrk_bs_save_atimes(bs), 1, "block 7 was freed");
	pthread_mutex_lock(&bs->mu);
	cr_assert_eq(bs->nmoved, 0);
	int64_t t = do_find(bs, bid(3))->atime_s;
	pthread_mutex_unlock(&bs->mu);
	struct bs_rec rec;
	cr_assert(stored(bs, 3, &rec));
	cr_assert_eq(rec.atime_s, t, "block 3's time was saved");
	cr_assert_eq(wrk_bs_save_atimes(bs), 0, "nothing moved since");
	wrk_bs_close(bs);
}

Test(worker_blockstore, a_save_racing_a_drop_or_a_pin_leaves_them_as_they_are)
{
	wrk_bs *bs = open_bs(10000);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(put(bs, i, 100, false), 0);
	usleep(1100000);
	for (int i = 0; i < 10; i++)
		use(bs, i);
	atime_move *mv;
	size_t done, n = collect_moved(bs, &mv);
	cr_assert_eq(n, 10);
	/* Between the save's collection and its writes: block 0 is freed,
	 * block 1 pinned. */
	cr_assert_eq(wrk_bs_free(bs, bid(0)), 0);
	cr_assert_eq(wrk_bs_pin(bs, bid(1), true), 0);
	cr_assert_eq(write_moved(bs, mv, n, &done), 0);
	cr_assert_eq(done, 10, "three transactions of at most 4");
	free(mv);
	struct bs_rec rec;
	cr_assert_not(stored(bs, 0, &rec), "the freed block came back in the index");
	cr_assert(stored(bs, 1, &rec));
	cr_assert(rec.flags & BS_FLAG_PIN, "the pin made meanwhile was undone");
	pthread_mutex_lock(&bs->mu);
	int64_t t = do_find(bs, bid(9))->atime_s;
	pthread_mutex_unlock(&bs->mu);
	cr_assert(stored(bs, 9, &rec));
	cr_assert_eq(rec.atime_s, t, "the last batch was written");
	wrk_bs_close(bs);
}

Test(worker_blockstore, reopen_reconciles_and_verifies)
{
	wrk_bs *bs = open_bs(10000);
	char p[PATH_MAX], hex[CIS_BLOCK_ID_HEX];
	wrk_blk_info info;
	FILE *f;

	for (int i = 0; i < 4; i++)
		cr_assert_eq(put(bs, i, 100, i == 3), 0);
	cr_assert_eq(wrk_bs_save_worker_id(bs, 42), 0);
	wrk_bs_close(bs);

	/* Behind the worker's back: a leftover temporary, an unknown file,
	 * a missing block file, a corrupted one. */
	snprintf(p, sizeof(p), "%s/.tmp/x.1", cdir);
	f = fopen(p, "w");
	fclose(f);
	snprintf(p, sizeof(p), "%s/ab", cdir);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/ab/abababababababababababababababab", cdir);
	f = fopen(p, "w");
	fclose(f);
	cis_block_id_fmt(bid(1), hex);
	snprintf(p, sizeof(p), "%s/%.2s/%s", cdir, hex, hex);
	cr_assert_eq(unlink(p), 0);
	cis_block_id_fmt(bid(2), hex);
	snprintf(p, sizeof(p), "%s/%.2s/%s", cdir, hex, hex);
	f = fopen(p, "r+");
	fputc('X', f);
	fclose(f);

	bs = open_bs(10000);
	cr_assert_eq(wrk_bs_load_worker_id(bs), 42);
	snprintf(p, sizeof(p), "%s/.tmp/x.1", cdir);
	cr_assert_neq(access(p, F_OK), 0, "temporary survived");
	snprintf(p, sizeof(p), "%s/ab/abababababababababababababababab", cdir);
	cr_assert_neq(access(p, F_OK), 0, "unknown file survived");
	cr_assert(!wrk_bs_has(bs, bid(1)), "entry without a file kept");
	cr_assert_eq(wrk_bs_nblocks(bs), 3);

	cr_assert_eq(wrk_bs_acquire(bs, bid(0), false, &info), 0);
	cr_assert(!info.verified, "unverified after a restart");
	cr_assert(!info.pinned);
	wrk_bs_release(bs, info.blk);
	/* Eight readers of the unverified block at once: one reads it, the
	 * rest take its verdict; a scrub reads it again. */
	pthread_t t[8];
	for (int i = 0; i < 8; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, verify_thread, bs), 0);
	for (int i = 0; i < 8; i++) {
		void *rc;
		pthread_join(t[i], &rc);
		cr_assert_eq((intptr_t)rc, 0);
	}
	cr_assert_eq(cis_counter_get(w.m.verified_blocks), 1, "%llu reads to verify one block",
	             (unsigned long long)cis_counter_get(w.m.verified_blocks));
	cr_assert_eq(wrk_bs_acquire(bs, bid(0), false, &info), 0);
	cr_assert(info.verified);
	wrk_bs_release(bs, info.blk);
	cr_assert_eq(wrk_bs_verify(bs, bid(0), true), 0);
	cr_assert_eq(cis_counter_get(w.m.verified_blocks), 2);

	cr_assert_eq(wrk_bs_verify(bs, bid(2), true), -CIS_E_CHECKSUM);
	cr_assert(!wrk_bs_has(bs, bid(2)), "corrupted block kept");
	cr_assert_eq(cis_counter_get(w.m.checksum_failures), 1);

	cr_assert_eq(wrk_bs_acquire(bs, bid(3), false, &info), 0);
	cr_assert(info.pinned, "pin lost across a restart");
	wrk_bs_release(bs, info.blk);
	wrk_bs_close(bs);
}

/* A verify under way when the worker stops gives up (a stop does not wait
 * for a block of up to 1 GiB to be read): no verdict, the block stays,
 * unverified, and a later verify settles it. */
Test(worker_blockstore, a_verify_at_a_stop_gives_no_verdict)
{
	wrk_bs *bs = open_bs(10000);
	wrk_blk_info info;

	cr_assert_eq(put(bs, 0, 100, false), 0);
	atomic_store(&w.stopping, true);
	cr_assert_eq(wrk_bs_verify(bs, bid(0), true), -ECANCELED);
	atomic_store(&w.stopping, false);
	cr_assert(wrk_bs_has(bs, bid(0)), "a block dropped for a stop");
	cr_assert_eq(cis_counter_get(w.m.checksum_failures), 0);
	cr_assert_eq(wrk_bs_verify(bs, bid(0), true), 0);
	cr_assert_eq(wrk_bs_acquire(bs, bid(0), false, &info), 0);
	cr_assert(info.verified);
	wrk_bs_release(bs, info.blk);
	wrk_bs_close(bs);
}

Test(worker_blockstore, drop_in_use_keeps_the_open_file_readable)
{
	wrk_bs *bs = open_bs(1000);
	wrk_blk_info info;
	char c;
	int fd;

	cr_assert_eq(put(bs, 5, 100, false), 0);
	cr_assert_eq(wrk_bs_acquire(bs, bid(5), false, &info), 0);
	fd = open(info.path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(wrk_bs_free(bs, bid(5)), -EBUSY);
	cr_assert(!wrk_bs_has(bs, bid(5)));
	cr_assert_neq(access(info.path, F_OK), 0, "file still there");
	cr_assert_eq(pread(fd, &c, 1, 50), 1);
	cr_assert_eq(c, 5);
	close(fd);
	/* A fresh copy may be cached while the old one is still held; what
	 * the old copy's holder finds wrong with it (a failed verify) drops
	 * the old copy, never the new one (a drop by id did). */
	cr_assert_eq(put(bs, 5, 100, true), 0);
	cr_assert_eq(wrk_bs_drop_held(bs, info.blk, "test"), -ENOENT);
	cr_assert(wrk_bs_has(bs, bid(5)), "the old copy's drop took the new one");
	wrk_bs_release(bs, info.blk);
	cr_assert(wrk_bs_has(bs, bid(5)), "release of the old copy dropped the new one");
	cr_assert_eq(used(bs), 100);
	cr_assert_eq(wrk_bs_free(bs, bid(6)), -ENOENT);
	wrk_bs_close(bs);
}

Test(worker_blockstore, second_worker_on_the_state_dir_refused)
{
	wrk_bs *bs = open_bs(1000), *bs2 = NULL;
	wrk_dir_cfg d = {cdir, 1000};
	wrk_bs_opts o = {&d, 1, sdir, 0.9, 0.5, 0.8, REUSE_MS};
	cis_errmsg em = {{0}};

	cr_assert_eq(wrk_bs_open(&w, &o, &bs2, &em), -EBUSY);
	cr_assert(strstr(em.text, "in use"), "%s", em.text);
	wrk_bs_close(bs);
}

/* Running out of descriptors or memory says nothing about the cache dir:
 * it stays writable (it used to be marked failed, and a block whose file
 * could not be opened for want of descriptors was dropped); a read-only
 * file system does mark it. */
Test(worker_blockstore, short_of_descriptors_is_not_a_bad_dir)
{
	wrk_bs *bs = open_bs(1000);
	Cis__DirUsage u = CIS__DIR_USAGE__INIT;

	wrk_bs_dir_error(bs, 0, -EMFILE, "create");
	wrk_bs_dir_error(bs, 0, -ENFILE, "create");
	wrk_bs_dir_error(bs, 0, -ENOMEM, "create");
	wrk_bs_dir_usage(bs, 0, &u);
	cr_assert(u.writable, "marked failed for want of descriptors");
	cr_assert_eq(put(bs, 1, 100, false), 0);
	wrk_bs_dir_error(bs, 0, -EROFS, "create");
	wrk_bs_dir_usage(bs, 0, &u);
	cr_assert_not(u.writable, "a read-only file system leaves it writable");
	wrk_bs_close(bs);
}

static bool pinned(wrk_bs *bs, int i)
{
	wrk_blk_info info;
	bool p;

	cr_assert_eq(wrk_bs_acquire(bs, bid(i), false, &info), 0, "block %d not cached", i);
	p = info.pinned;
	wrk_bs_release(bs, info.blk);
	return p;
}

/* Drop block i as its reader does on finding its file bad. */
static void drop_as_bad(wrk_bs *bs, int i)
{
	wrk_blk_info info;

	cr_assert_eq(wrk_bs_acquire(bs, bid(i), false, &info), 0, "block %d not cached", i);
	cr_assert_eq(wrk_bs_drop_held(bs, info.blk, "test"), -EBUSY);
	wrk_bs_release(bs, info.blk);
}

static void remove_block_file(int i)
{
	char p[PATH_MAX], hex[CIS_BLOCK_ID_HEX];

	cis_block_id_fmt(bid(i), hex);
	snprintf(p, sizeof(p), "%s/%.2s/%s", cdir, hex, hex);
	cr_assert_eq(unlink(p), 0);
}

/* A pinned block dropped because its file went bad (missing, truncated, a
 * checksum mismatch, the scrubber) is cached again by its next reader, who
 * knows nothing of the pin: it must come back pinned, since the master
 * still counts it pinned and asks no one to pin it again. It came back
 * unpinned and the next scan evicted it. Also across a restart that found
 * the file missing. */
Test(worker_blockstore, a_repaired_pinned_block_comes_back_pinned)
{
	wrk_bs *bs = open_bs(10000);
	Cis__DirUsage u = CIS__DIR_USAGE__INIT;

	cr_assert_eq(put(bs, 1, 100, true), 0);
	drop_as_bad(bs, 1);
	cr_assert_eq(put(bs, 1, 100, false), 0);
	cr_assert(pinned(bs, 1), "a repaired pinned block came back unpinned");
	wrk_bs_dir_usage(bs, 0, &u);
	cr_assert_eq(u.pinned_bytes, 100);
	cr_assert_eq(put(bs, 2, 100, false), 0);
	cr_assert_not(pinned(bs, 2), "a block never pinned came back pinned");

	cr_assert_eq(put(bs, 3, 100, true), 0);
	wrk_bs_close(bs);
	remove_block_file(3);
	bs = open_bs(10000);
	cr_assert_not(wrk_bs_has(bs, bid(3)));
	cr_assert_eq(put(bs, 3, 100, false), 0);
	cr_assert(pinned(bs, 3), "a pinned block missing at a restart came back unpinned");
	wrk_bs_close(bs);
}

/* A Free forgets the pin, and so does an unpin while the block is away. */
Test(worker_blockstore, a_freed_or_unpinned_block_is_not_pinned_again)
{
	wrk_bs *bs = open_bs(10000);

	cr_assert_eq(put(bs, 1, 100, true), 0);
	cr_assert_eq(wrk_bs_free(bs, bid(1)), 0);
	cr_assert_eq(put(bs, 1, 100, false), 0);
	cr_assert_not(pinned(bs, 1), "a freed block came back pinned");

	cr_assert_eq(put(bs, 2, 100, true), 0);
	drop_as_bad(bs, 2);
	cr_assert_eq(wrk_bs_pin(bs, bid(2), false), -ENOENT);
	cr_assert_eq(put(bs, 2, 100, false), 0);
	cr_assert_not(pinned(bs, 2), "a block unpinned while away came back pinned");

	cr_assert_eq(put(bs, 3, 100, true), 0);
	drop_as_bad(bs, 3);
	cr_assert_eq(wrk_bs_free(bs, bid(3)), -ENOENT);
	cr_assert_eq(put(bs, 3, 100, false), 0);
	cr_assert_not(pinned(bs, 3), "a block freed while away came back pinned");
	wrk_bs_close(bs);
}

/* A block committed again (a read and a replica at once) keeps the copy
 * indexed, pinned when the second was to be pinned. */
Test(worker_blockstore, a_second_copy_asked_pinned_pins_the_first)
{
	wrk_bs *bs = open_bs(10000);
	Cis__DirUsage u = CIS__DIR_USAGE__INIT;

	cr_assert_eq(put(bs, 1, 100, false), 0);
	cr_assert_eq(put(bs, 1, 100, true), 0);
	cr_assert(pinned(bs, 1), "the pin of the second copy was lost");
	wrk_bs_dir_usage(bs, 0, &u);
	cr_assert_eq(u.pinned_bytes, 100);
	cr_assert_eq(u.used, 100, "the second copy's space was not given back");
	wrk_bs_close(bs);
}

/* A dir turned off by an I/O error stays off when a fill there then finds
 * the disk full: the ENOSPC shrink only ever turns writing off. */
Test(worker_blockstore, enospc_does_not_turn_on_a_dir_an_error_turned_off)
{
	wrk_bs *bs = open_bs(10000);

	cr_assert_eq(put(bs, 1, 100, false), 0);
	wrk_bs_dir_error(bs, 0, -EIO, "test");
	cr_assert_not(bs->dirs[0].writable);
	wrk_bs_dir_error(bs, 0, -ENOSPC, "test");
	cr_assert_not(bs->dirs[0].writable, "ENOSPC turned a failed dir back on");
	wrk_bs_close(bs);
}

/* After an ENOSPC shrink the probe grows the dir back to its blocks plus
 * the file system's free space, which still holds the reservations not
 * written yet: counting them in used too would promise that space twice. */
Test(worker_blockstore, the_probe_counts_unwritten_reservations_once)
{
	wrk_bs *bs = open_bs(1ull << 50);
	struct statvfs vfs;
	int dir;

	cr_assert_eq(put(bs, 1, 100, false), 0);
	cr_assert_eq(wrk_bs_reserve(bs, 1ull << 30, &dir), 0);
	wrk_bs_dir_error(bs, 0, -ENOSPC, "test");
	cr_assert_eq(bs->dirs[0].capacity, 100, "shrunk to the blocks written");
	wrk_bs_probe_dirs(bs);
	cr_assert_eq(statvfs(cdir, &vfs), 0);
	uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	cr_assert_lt(bs->dirs[0].capacity, 100 + avail + (256u << 20),
	             "capacity %llu, free space %llu: the reservation counted twice",
	             (unsigned long long)bs->dirs[0].capacity, (unsigned long long)avail);
	cr_assert_gt(bs->dirs[0].capacity, 100, "grown back");
	wrk_bs_unreserve(bs, dir, 1ull << 30);
	wrk_bs_close(bs);
}
