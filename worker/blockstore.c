/* The block store: cache dirs, block files and the LMDB index.
 *
 * A block lives at <dir>/<first 2 hex digits>/<32 hex digit id>. It is
 * written under <dir>/.tmp/ and renamed into place when complete, so a
 * file at a block's name is always whole. The index (LMDB in the state
 * dir, database "blocks": 16-byte id -> bs_rec + dir path) says which dir
 * holds the block, its length, xxh3 checksum, last access and pin;
 * database "repin" the ids of pinned blocks dropped for a bad file, to be
 * pinned again when they are cached again.
 *
 * On start the index and the files are reconciled: temporaries are removed,
 * an index entry whose file is missing or has the wrong size is dropped
 * (its pin kept, as for any repair), a file the index does not know is
 * deleted. Blocks loaded from the index are unverified until their first
 * read (or the scrubber) checks the checksum.
 *
 * In memory every block has a wrk_block in a hash table and in its dir's
 * SLRU. One mutex guards all of it; file I/O of whole blocks (verify) is
 * done without it, holding a reference instead. */
#include "worker.h"
#include "slru.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cistern/lmdb_lock.h"
#include "cistern/log.h"
#include "cistern/time.h"

#define BS_FLAG_PIN 1u

/* The LMDB record of a block, followed by the dir's path (not NUL-ended). */
struct bs_rec {
	uint64_t len;
	uint64_t sum;
	int64_t atime_s;
	uint32_t flags;
	uint32_t dirlen;
};

typedef struct wrk_block {
	wrk_lru_node lru; /* first: the node's address is the block's */
	cis_block_id id;
	struct wrk_block *hnext;
	int dir;
	uint64_t len;
	uint64_t sum;
	int64_t atime_s;
	bool atime_moved; /* atime_s is newer than the index's (wrk_bs_save_atimes) */
	bool index_stale; /* its last index write failed: wrk_bs_save_atimes retries */
	uint64_t pass_ms; /* monotonic, the first use of its last pass; 0: not used yet */
	int refs;
	bool pinned;
	bool verified;
	bool verifying; /* a wrk_bs_verify reads it now; others wait (verify_cv) */
	bool doomed;    /* drop when the last reference goes */
} wrk_block;

typedef struct bs_dir {
	char *path;
	uint64_t cfg_capacity; /* as configured */
	uint64_t capacity;     /* as usable now: lowered after ENOSPC */
	uint64_t high, low;    /* bytes, from the fractions below */
	double high_frac, low_frac, prot_frac;
	uint64_t used;     /* complete blocks plus reservations */
	uint64_t reserved; /* part of used: fetches under way */
	uint64_t pinned;
	uint64_t nblocks;
	bool writable;
	wrk_slru lru;
	/* Files of dropped blocks that could not be removed (a read-only
	 * dir): their bytes stay in used until the probe removes them. */
	struct stuck_file *stuck;
	size_t nstuck;
	bool gone_seen; /* found gone, and its blocks dropped, since last writable */
	int lock_fd;    /* the dir, flocked: one worker per cache dir */
} bs_dir;

typedef struct atime_move {
	cis_block_id id;
	int64_t atime_s;
} atime_move;

struct wrk_bs {
	wrk *w;
	pthread_mutex_t mu;
	pthread_cond_t verify_cv; /* a block's verifying went false */
	bs_dir dirs[WRK_MAX_DIRS];
	int ndirs;
	wrk_block **table;
	size_t nbuckets, nblocks;
	MDB_env *env;
	MDB_dbi dbi_blocks, dbi_meta, dbi_repin;
	uint64_t nrepin; /* entries in dbi_repin, under mu */
	int lock_fd;
	uint64_t dead_seq; /* names of removed block files (victim.seq), under mu */
	uint32_t reuse_ms; /* uses closer than this are one (WRK_REUSE_MS) */
	/* The blocks whose time moved since the last save (atime_s not
	 * filled: the block's own is taken then), so that a save does not
	 * walk the whole table under mu; a block may be listed again after
	 * it was dropped and cached anew. The save walks the table only when
	 * the list lost one (out of memory) or an index write failed. */
	atime_move *moved;
	size_t nmoved, capmoved;
	bool moved_lost;
	bool any_stale; /* a block is index_stale */
};

static size_t bucket_of(const wrk_bs *bs, cis_block_id id)
{
	return (size_t)((id.lo ^ (id.hi * 0x9E3779B97F4A7C15ull)) & (bs->nbuckets - 1));
}

static wrk_block *do_find(const wrk_bs *bs, cis_block_id id)
{
	for (wrk_block *b = bs->table[bucket_of(bs, id)]; b; b = b->hnext)
		if (cis_block_id_eq(b->id, id))
			return b;
	return NULL;
}

static void do_grow(wrk_bs *bs)
{
	size_t old = bs->nbuckets;
	wrk_block **ot = bs->table, **nt = calloc(old * 2, sizeof(*nt));

	if (!nt)
		return; /* stay at the old size: slower chains, still correct */
	bs->table = nt;
	bs->nbuckets = old * 2;
	for (size_t i = 0; i < old; i++) {
		wrk_block *b = ot[i], *next;

		for (; b; b = next) {
			size_t k = bucket_of(bs, b->id);

			next = b->hnext;
			b->hnext = nt[k];
			nt[k] = b;
		}
	}
	free(ot);
}

static void do_insert(wrk_bs *bs, wrk_block *b)
{
	size_t k;

	if (bs->nblocks + 1 > bs->nbuckets)
		do_grow(bs);
	k = bucket_of(bs, b->id);
	b->hnext = bs->table[k];
	bs->table[k] = b;
	bs->nblocks++;
}

static void do_unlink_table(wrk_bs *bs, wrk_block *b)
{
	wrk_block **pp = &bs->table[bucket_of(bs, b->id)];

	for (; *pp; pp = &(*pp)->hnext)
		if (*pp == b) {
			*pp = b->hnext;
			bs->nblocks--;
			return;
		}
}

static void block_path(const char *dir, cis_block_id id, char *out, size_t n)
{
	char hex[CIS_BLOCK_ID_HEX];

	cis_block_id_fmt(id, hex);
	snprintf(out, n, "%s/%.2s/%s", dir, hex, hex);
}

static int64_t now_s(void)
{
	return cis_wall_ns() / 1000000000;
}

/* ---- index ---- */

/* The block's whole record; a failure marks it index_stale, to be
 * written again by the next wrk_bs_save_atimes. Under mu. */
static int idx_put(wrk_bs *bs, wrk_block *b)
{
	const char *dir = bs->dirs[b->dir].path;
	size_t dl = strlen(dir);
	uint8_t key[16], *val;
	struct bs_rec rec = {b->len, b->sum, b->atime_s, b->pinned ? BS_FLAG_PIN : 0, (uint32_t)dl};
	MDB_val k = {16, key}, v;
	MDB_txn *txn;
	int rc;

	val = malloc(sizeof(rec) + dl);
	if (!val)
		return -ENOMEM;
	memcpy(val, &rec, sizeof(rec));
	memcpy(val + sizeof(rec), dir, dl);
	v.mv_size = sizeof(rec) + dl;
	v.mv_data = val;
	cis_block_id_to_bytes(b->id, key);
	rc = mdb_txn_begin(bs->env, NULL, 0, &txn);
	if (rc == 0) {
		rc = mdb_put(txn, bs->dbi_blocks, &k, &v, 0);
		if (rc == 0)
			rc = mdb_txn_commit(txn);
		else
			mdb_txn_abort(txn);
	}
	free(val);
	b->index_stale = rc != 0;
	bs->any_stale |= rc != 0;
	if (rc) {
		cis_log_limited(CIS_LOG_ERROR, "worker:lmdb-put", 60, "block index write failed",
		                "err=\"%s\"", mdb_strerror(rc));
		return -EIO;
	}
	return 0;
}

/* ---- access times ----
 *
 * A use moves a block's access time in memory only: a write per read would
 * cost more than many reads. This writes the times that moved, ATIME_BATCH
 * records per transaction in key order, so a start after kill -9 orders
 * eviction by uses at most one save old (the worker saves every
 * WRK_ATIME_SAVE_MS, and at exit).
 * Only the time is patched into each stored record; the rest of it (pin,
 * length, dir) is written where it changes. A block dropped meanwhile has
 * no record left to patch. */
/* Key order (cis_block_id_to_bytes: hi, then lo, big-endian). */
static int cmp_move(const void *a, const void *b)
{
	const cis_block_id *x = &((const atime_move *)a)->id, *y = &((const atime_move *)b)->id;
	if (x->hi != y->hi)
		return x->hi < y->hi ? -1 : 1;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

#ifndef ATIME_BATCH
#define ATIME_BATCH 2048 /* records per transaction: other writers get in between */
#endif

/* b's time moved: list it for the next save. Caller holds mu. */
static void do_mark_moved(wrk_bs *bs, wrk_block *b)
{
	if (b->atime_moved)
		return;
	b->atime_moved = true;
	if (bs->nmoved == bs->capmoved) {
		size_t nc = bs->capmoved ? bs->capmoved * 2 : 1024;
		atime_move *g = realloc(bs->moved, nc * sizeof(*g));
		if (!g) {
			bs->moved_lost = true; /* the next save walks the table */
			return;
		}
		bs->moved = g;
		bs->capmoved = nc;
	}
	bs->moved[bs->nmoved++] = (atime_move){b->id, 0};
}

/* The blocks whose time moved, their flags cleared, into *out (in key
 * order); how many. From the list of those that moved, or, when it lost
 * one or an index write failed, from the whole table, where a block whose
 * index write failed is written whole now, as commit and pin do; under
 * mu. */
static size_t collect_moved(wrk_bs *bs, atime_move **out)
{
	atime_move *mv = NULL;
	size_t n = 0, cap = 0;
	pthread_mutex_lock(&bs->mu);
	bool walk = bs->moved_lost || bs->any_stale;
	mv = bs->moved;
	cap = bs->nmoved;
	bs->moved = NULL;
	bs->nmoved = bs->capmoved = 0;
	bs->moved_lost = bs->any_stale = false;
	if (!walk) {
		for (size_t i = 0; i < cap; i++) {
			wrk_block *b = do_find(bs, mv[i].id);
			if (!b || !b->atime_moved)
				continue; /* dropped, or listed twice */
			mv[n++] = (atime_move){b->id, b->atime_s};
			b->atime_moved = false;
		}
		goto out;
	}
	for (size_t i = 0; i < bs->nbuckets; i++)
		for (wrk_block *b = bs->table[i]; b; b = b->hnext) {
			if (b->index_stale)
				(void)idx_put(bs, b);
			if (!b->atime_moved)
				continue;
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 1024;
				atime_move *g = realloc(mv, nc * sizeof(*g));
				if (!g) {
					bs->moved_lost = true; /* the rest stay moved: next save */
					goto out;
				}
				mv = g;
				cap = nc;
			}
			mv[n++] = (atime_move){b->id, b->atime_s};
			b->atime_moved = false;
		}
out:
	pthread_mutex_unlock(&bs->mu);
	if (n > 1)
		qsort(mv, n, sizeof(*mv), cmp_move);
	*out = mv;
	return n;
}

/* Patch each time into its stored record, if that is older; a block
 * dropped meanwhile has no record left and gets none. 0, or the LMDB
 * error that stopped it with *done records handled. */
static int write_moved(wrk_bs *bs, const atime_move *mv, size_t n, size_t *done)
{
	uint8_t key[16], val[sizeof(struct bs_rec) + PATH_MAX];
	int rc = 0;
	*done = 0;
	while (*done < n && rc == 0) {
		size_t end = n - *done > ATIME_BATCH ? *done + ATIME_BATCH : n;
		MDB_txn *txn;
		if ((rc = mdb_txn_begin(bs->env, NULL, 0, &txn)))
			break;
		for (size_t i = *done; i < end && rc == 0; i++) {
			MDB_val k = {16, key}, v;
			cis_block_id_to_bytes(mv[i].id, key);
			rc = mdb_get(txn, bs->dbi_blocks, &k, &v);
			if (rc == MDB_NOTFOUND || (rc == 0 && (v.mv_size < sizeof(struct bs_rec) ||
			                                       v.mv_size > sizeof(val)))) {
				rc = 0; /* dropped meanwhile (or not a record of ours) */
				continue;
			}
			if (rc)
				break;
			struct bs_rec rec;
			memcpy(&rec, v.mv_data, sizeof(rec));
			if (rec.atime_s >= mv[i].atime_s)
				continue;
			rec.atime_s = mv[i].atime_s;
			memcpy(val, v.mv_data, v.mv_size);
			memcpy(val, &rec, sizeof(rec));
			MDB_val nv = {v.mv_size, val};
			rc = mdb_put(txn, bs->dbi_blocks, &k, &nv, 0);
		}
		if (rc == 0)
			rc = mdb_txn_commit(txn);
		else
			mdb_txn_abort(txn);
		if (rc == 0)
			*done = end;
	}
	return rc;
}

/* Times a failed save did not write: moved again, for the next one. */
static void remark_moved(wrk_bs *bs, const atime_move *mv, size_t n)
{
	pthread_mutex_lock(&bs->mu);
	for (size_t i = 0; i < n; i++) {
		wrk_block *b = do_find(bs, mv[i].id);
		if (b && b->atime_s >= mv[i].atime_s)
			do_mark_moved(bs, b);
	}
	pthread_mutex_unlock(&bs->mu);
}

int wrk_bs_save_atimes(wrk_bs *bs)
{
	atime_move *mv;
	size_t done, n = collect_moved(bs, &mv);
	int rc = n ? write_moved(bs, mv, n, &done) : 0;
	if (rc)
		remark_moved(bs, mv + done, n - done);
	free(mv);
	if (rc) {
		cis_log_limited(CIS_LOG_ERROR, "worker:lmdb-atime", 60,
		                "saving access times failed: they are tried again at the next save",
		                "err=\"%s\"", mdb_strerror(rc));
		return -EIO;
	}
	return (int)(n > INT_MAX ? INT_MAX : n);
}

static void idx_del(wrk_bs *bs, cis_block_id id)
{
	uint8_t key[16];
	MDB_val k = {16, key};
	MDB_txn *txn;

	cis_block_id_to_bytes(id, key);
	if (mdb_txn_begin(bs->env, NULL, 0, &txn) != 0)
		return;
	mdb_del(txn, bs->dbi_blocks, &k, NULL); /* MDB_NOTFOUND is fine */
	mdb_txn_commit(txn);
}

/* ---- pins kept across a repair ----
 *
 * A pinned block dropped because its file went bad (missing, truncated, of
 * another length, a checksum mismatch, gone with its dir) is fetched again
 * by its next reader, who knows nothing of the pin, while the master still
 * counts it pinned and asks no one to pin it again. So its id waits in the
 * "repin" database until the block is committed again, pinned then, or is
 * freed or unpinned. An id whose object changed meanwhile is never
 * committed again: its entry stays, 16 bytes. nrepin spares every commit a
 * look-up while there are none. Caller holds mu (or owns bs). */
static void do_keep_pin(wrk_bs *bs, cis_block_id id)
{
	uint8_t key[16];
	MDB_val k = {16, key}, v = {0, key};
	MDB_txn *txn;
	int rc;

	cis_block_id_to_bytes(id, key);
	rc = mdb_txn_begin(bs->env, NULL, 0, &txn);
	if (rc == 0) {
		rc = mdb_put(txn, bs->dbi_repin, &k, &v, MDB_NOOVERWRITE);
		if (rc == 0)
			rc = mdb_txn_commit(txn);
		else
			mdb_txn_abort(txn);
	}
	if (rc == 0)
		bs->nrepin++;
	else if (rc != MDB_KEYEXIST)
		cis_log_limited(CIS_LOG_ERROR, "worker:lmdb-repin", 60,
		                "cannot keep the pin of a dropped block", "err=\"%s\"",
		                mdb_strerror(rc));
}

/* Whether id had its pin kept; the entry goes. Caller holds mu. */
static bool do_take_pin(wrk_bs *bs, cis_block_id id)
{
	uint8_t key[16];
	MDB_val k = {16, key};
	MDB_txn *txn;
	int rc;

	if (bs->nrepin == 0)
		return false;
	cis_block_id_to_bytes(id, key);
	rc = mdb_txn_begin(bs->env, NULL, 0, &txn);
	if (rc)
		return false;
	rc = mdb_del(txn, bs->dbi_repin, &k, NULL);
	if (rc == 0)
		rc = mdb_txn_commit(txn);
	else
		mdb_txn_abort(txn);
	if (rc)
		return false;
	bs->nrepin--;
	return true;
}

/* ---- dirs ---- */

static bool probe_writable(const char *dir)
{
	char p[PATH_MAX];
	int fd;

	snprintf(p, sizeof(p), "%s/.tmp/.probe", dir);
	fd = open(p, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	close(fd);
	unlink(p);
	return true;
}

/* Caller holds mu (or owns d). */
static void set_capacity(bs_dir *d, uint64_t cap)
{
	if (cap > d->cfg_capacity)
		cap = d->cfg_capacity;
	d->capacity = cap;
	d->high = (uint64_t)((double)cap * d->high_frac);
	d->low = (uint64_t)((double)cap * d->low_frac);
	d->lru.prot_max = (uint64_t)((double)cap * d->prot_frac);
}

void wrk_bs_dir_error(wrk_bs *bs, int dir, int err, const char *what)
{
	char cause[PATH_MAX + 32];
	bool was;

	if (wrk_short_of_resources(-err)) {
		cis_log_limited(CIS_LOG_WARN, "worker:short-of-resources", 10,
		                "cache dir operation failed for want of resources; the dir is fine",
		                "path=%s op=%s err=\"%s\"", bs->dirs[dir].path, what,
		                cis_strerror(err));
		return;
	}
	pthread_mutex_lock(&bs->mu);
	was = bs->dirs[dir].writable;
	if (err == -ENOSPC || err == -EDQUOT) {
		/* The file system holds less than configured (shared disk, a
		 * tmpfs given too large a size): shrink the dir to what it now
		 * holds, so eviction makes room from here on. The probe grows
		 * it back as space appears. Nothing there: stop writing. */
		bs_dir *d = &bs->dirs[dir];

		set_capacity(d, d->used - d->reserved);
		/* never turns on a dir another error turned off */
		d->writable = d->writable && d->capacity > 0 && d->nstuck == 0;
	} else {
		/* The dir stays readable: cached blocks keep being served. */
		bs->dirs[dir].writable = false;
	}
	pthread_mutex_unlock(&bs->mu);
	cis_counter_inc(bs->w->m.disk_errors);
	snprintf(cause, sizeof(cause), "worker:dir:%d:%s", -err, bs->dirs[dir].path);
	cis_log_limited(CIS_LOG_ERROR, cause, 60, "cache dir failed, caching there paused",
	                "dir=%s op=%s err=\"%s\" was_writable=%d", bs->dirs[dir].path, what,
	                cis_strerror(err), was);
}

static bool remove_stuck(wrk_bs *bs, int dir);

/* Drop dir's blocks whose file is gone (the dir vanished, or came back
 * empty): they still counted as used and as held in block reports, and
 * only a read of each found it missing. Files are looked at outside mu,
 * each block held meanwhile (a copy fetched again is not the one dropped). */
static void reconcile_dir(wrk_bs *bs, int dir)
{
	wrk_block **held = NULL;
	size_t n = 0, cap = 0, dropped = 0;

	pthread_mutex_lock(&bs->mu);
	for (size_t i = 0; i < bs->nbuckets; i++)
		for (wrk_block *b = bs->table[i]; b; b = b->hnext) {
			if (b->dir != dir)
				continue;
			if (n == cap) {
				size_t c2 = cap ? cap * 2 : 256;
				wrk_block **h2 = realloc(held, c2 * sizeof(*h2));
				if (!h2)
					goto walked; /* the rest another time */
				held = h2;
				cap = c2;
			}
			b->refs++;
			held[n++] = b;
		}
walked:
	pthread_mutex_unlock(&bs->mu);
	for (size_t i = 0; i < n; i++) {
		char p[PATH_MAX];
		struct stat st;

		block_path(bs->dirs[dir].path, held[i]->id, p, sizeof(p));
		if (stat(p, &st) < 0 ? errno == ENOENT || errno == ENOTDIR
		                     : (uint64_t)st.st_size != held[i]->len)
			dropped += wrk_bs_drop_held(bs, held[i], "file gone with its cache dir") !=
			           -ENOENT;
		wrk_bs_release(bs, held[i]);
	}
	free(held);
	if (dropped)
		cis_warn("cache dir lost blocks", "dir=%s dropped=%zu", bs->dirs[dir].path,
		         dropped);
}

void wrk_bs_probe_dirs(wrk_bs *bs)
{
	for (int i = 0; i < bs->ndirs; i++) {
		bool ok, was;
		struct statvfs vfs;

		/* A dir shrunk by ENOSPC grows back as the file system frees:
		 * to its blocks plus the free space. Reservations not written
		 * yet are still in the free space, so they are taken out of
		 * used here, as the shrink takes them out. */
		if (statvfs(bs->dirs[i].path, &vfs) == 0) {
			uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;

			pthread_mutex_lock(&bs->mu);
			bs_dir *d = &bs->dirs[i];
			uint64_t fits = d->used - d->reserved + avail;
			if (d->capacity < d->cfg_capacity && fits > d->capacity) {
				set_capacity(d, fits);
				if (d->capacity > 0 && !d->writable)
					d->writable =
					    probe_writable(d->path) && remove_stuck(bs, i);
			}
			pthread_mutex_unlock(&bs->mu);
		}

		pthread_mutex_lock(&bs->mu);
		was = bs->dirs[i].writable;
		pthread_mutex_unlock(&bs->mu);
		if (was)
			continue;
		if (!bs->dirs[i].gone_seen && access(bs->dirs[i].path, F_OK) < 0 &&
		    errno == ENOENT) {
			reconcile_dir(bs, i); /* gone, and its blocks with it */
			bs->dirs[i].gone_seen = true;
		}
		/* A vanished dir comes back empty: recreate its .tmp. */
		{
			char p[PATH_MAX];

			snprintf(p, sizeof(p), "%s/.tmp", bs->dirs[i].path);
			mkdir(p, 0700);
		}
		ok = probe_writable(bs->dirs[i].path);
		if (ok) {
			reconcile_dir(bs, i); /* what it holds now */
			pthread_mutex_lock(&bs->mu);
			ok = remove_stuck(bs, i);
			bs->dirs[i].writable = ok;
			bs->dirs[i].gone_seen = bs->dirs[i].gone_seen && !ok;
			pthread_mutex_unlock(&bs->mu);
			if (ok)
				cis_info("cache dir writable again", "dir=%s", bs->dirs[i].path);
		}
	}
}

/* ---- eviction ---- */

/* A block out of the index whose file is still to be removed: moved to
 * <dir>/.tmp/dead.<seq> while the index lock is held (seq 0: nothing to
 * remove), unlinked after it is let go. Removing the file by its block
 * path after the lock would race a fetch of the same block that renamed
 * a new file there meanwhile, and delete it under a live index entry. */
typedef struct victim {
	cis_block_id id;
	int dir;
	uint64_t len;
	uint64_t seq;
} victim;

typedef struct stuck_file {
	cis_block_id id;
	uint64_t len;
} stuck_file;

/* Remove b from memory and the index (caller holds mu; refs == 0). The
 * file is unlinked by the caller after unlocking. */
static void do_forget(wrk_bs *bs, wrk_block *b)
{
	bs_dir *d = &bs->dirs[b->dir];

	wrk_slru_remove(&d->lru, &b->lru);
	do_unlink_table(bs, b);
	d->used -= b->len;
	d->nblocks--;
	if (b->pinned)
		d->pinned -= b->len;
	idx_del(bs, b->id);
	if (bs->w->link)
		wrk_link_note(bs->w->link, b->id, false);
}

static void dead_path(const wrk_bs *bs, const victim *v, char *p, size_t n)
{
	snprintf(p, n, "%s/.tmp/dead.%" PRIu64, bs->dirs[v->dir].path, v->seq);
}

static void cannot_remove(const char *p)
{
	cis_log_limited(CIS_LOG_WARN, "worker:unlink", 60, "cannot remove evicted block file",
	                "path=%s err=\"%s\"", p, strerror(errno));
}

/* Move v's block file out of its block path; false (logged) when it can
 * be neither moved nor removed (a read-only dir). Caller holds mu. */
static bool bury(wrk_bs *bs, victim *v)
{
	char p[PATH_MAX], dead[PATH_MAX];

	block_path(bs->dirs[v->dir].path, v->id, p, sizeof(p));
	v->seq = ++bs->dead_seq;
	dead_path(bs, v, dead, sizeof(dead));
	if (rename(p, dead) == 0)
		return true;
	v->seq = 0;
	/* Gone already, or .tmp is (a dir emptied behind us): at once. */
	if (unlink(p) == 0 || errno == ENOENT)
		return true;
	cannot_remove(p);
	return false;
}

/* A dropped block whose file bury could not remove: its bytes stay
 * counted, and its dir unwritable, until the probe removes it
 * (remove_stuck). Caller holds mu. */
static void keep_stuck(wrk_bs *bs, const victim *v)
{
	bs_dir *d = &bs->dirs[v->dir];
	stuck_file *s = realloc(d->stuck, (d->nstuck + 1) * sizeof(*s));

	d->writable = false;
	if (!s)
		return; /* its bytes go uncounted until a restart removes the file */
	d->stuck = s;
	d->stuck[d->nstuck++] = (stuck_file){v->id, v->len};
	d->used += v->len;
}

/* Remove what bury could not; true when nothing is left. A stuck file
 * whose id is indexed in its dir again was replaced by the new copy's
 * rename: only its bytes go. Caller holds mu. */
static bool remove_stuck(wrk_bs *bs, int dir)
{
	bs_dir *d = &bs->dirs[dir];
	size_t kept = 0;

	for (size_t i = 0; i < d->nstuck; i++) {
		char p[PATH_MAX];
		const wrk_block *now = do_find(bs, d->stuck[i].id);

		block_path(d->path, d->stuck[i].id, p, sizeof(p));
		if ((now && now->dir == dir) || unlink(p) == 0 || errno == ENOENT)
			d->used -= d->stuck[i].len;
		else
			d->stuck[kept++] = d->stuck[i];
	}
	d->nstuck = kept;
	return kept == 0;
}

static void unlink_victims(wrk_bs *bs, victim *v, size_t n)
{
	char p[PATH_MAX];

	for (size_t i = 0; i < n; i++) {
		if (!v[i].seq)
			continue;
		dead_path(bs, &v[i], p, sizeof(p));
		if (unlink(p) < 0 && errno != ENOENT)
			cannot_remove(p);
	}
}

/* Evict from dir i until used + need <= target, taking probation blocks
 * first (see the SLRU). Returns the victims in *v (caller frees and
 * unlinks; NULL when there are none). Caller holds mu. */
static size_t do_evict(wrk_bs *bs, int i, uint64_t need, uint64_t target, victim **v)
{
	bs_dir *d = &bs->dirs[i];
	wrk_lru_node *n, *next;
	size_t cnt = 0, cap = 0;

	*v = NULL;
	for (n = wrk_slru_next_victim(&d->lru, NULL); n && d->used + need > target; n = next) {
		wrk_block *b = (wrk_block *)n;

		next = wrk_slru_next_victim(&d->lru, n);
		if (b->pinned || b->refs > 0)
			continue;
		/* The hot set only gives what it must: from protected, evict
		 * just enough to fit under the high watermark, not the low. */
		if (n->seg == WRK_SEG_PROTECTED && d->used + need <= d->high)
			break;
		if (cnt == cap) {
			victim *nv = realloc(*v, (cap ? cap * 2 : 16) * sizeof(**v));

			if (!nv)
				break;
			*v = nv;
			cap = cap ? cap * 2 : 16;
		}
		(*v)[cnt].id = b->id;
		(*v)[cnt].dir = i;
		(*v)[cnt].len = b->len;
		if (!bury(bs, &(*v)[cnt])) {
			/* The dir turned read-only: the block stays, served, and
			 * so do the others (each would fail the same way). */
			d->writable = false;
			break;
		}
		cis_counter_inc(bs->w->m.evictions);
		cis_counter_add(bs->w->m.evicted_bytes, b->len);
		do_forget(bs, b);
		cnt++;
		free(b);
	}
	if (!cnt) { /* callers free only what names victims */
		free(*v);
		*v = NULL;
	}
	return cnt;
}

int wrk_bs_reserve(wrk_bs *bs, uint64_t len, int *dir)
{
	bool tried[WRK_MAX_DIRS] = {false};
	victim *v = NULL;
	size_t nv = 0;
	int rc = -ENOSPC;

	pthread_mutex_lock(&bs->mu);
	for (;;) {
		int best = -1;
		uint64_t best_free = 0;

		for (int i = 0; i < bs->ndirs; i++) {
			bs_dir *d = &bs->dirs[i];
			uint64_t fr = d->capacity > d->used ? d->capacity - d->used : 0;

			if (!d->writable || tried[i] || d->capacity < len)
				continue;
			if (best < 0 || fr > best_free) {
				best = i;
				best_free = fr;
			}
		}
		if (best < 0)
			break;
		tried[best] = true;
		if (bs->dirs[best].used + len > bs->dirs[best].high) {
			victim *more;
			size_t nm = do_evict(bs, best, len, bs->dirs[best].low, &more);

			if (nm) {
				victim *all = realloc(v, (nv + nm) * sizeof(*v));

				if (all) {
					memcpy(all + nv, more, nm * sizeof(*v));
					v = all;
					nv += nm;
				} else {
					unlink_victims(bs, more, nm); /* under mu: rare path */
				}
				free(more);
			}
		}
		if (bs->dirs[best].writable && /* eviction may find it read-only */
		    bs->dirs[best].used + len <= bs->dirs[best].capacity) {
			bs->dirs[best].used += len;
			bs->dirs[best].reserved += len;
			*dir = best;
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&bs->mu);
	unlink_victims(bs, v, nv);
	free(v);
	return rc;
}

void wrk_bs_unreserve(wrk_bs *bs, int dir, uint64_t len)
{
	pthread_mutex_lock(&bs->mu);
	bs->dirs[dir].used -= len;
	bs->dirs[dir].reserved -= len;
	pthread_mutex_unlock(&bs->mu);
}

int wrk_bs_create_tmp(wrk_bs *bs, int dir, cis_block_id id, char *tmp_path, size_t n)
{
	static atomic_uint_fast64_t seq;
	char hex[CIS_BLOCK_ID_HEX];
	int fd;

	cis_block_id_fmt(id, hex);
	snprintf(tmp_path, n, "%s/.tmp/%s.%" PRIuFAST64, bs->dirs[dir].path, hex,
	         atomic_fetch_add(&seq, 1));
	fd = open(tmp_path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
	if (fd < 0) {
		/* ENOENT: .tmp vanished, the dir emptied behind us (or another
		 * file system mounted over it, or it unmounted): taken out of
		 * use, the probe makes .tmp again and reconciles the index
		 * with what the dir holds now (the blocks that went would
		 * stay indexed, counted and reported, until each was read). */
		int err = -errno;

		wrk_bs_dir_error(bs, dir, err, "create");
		return err;
	}
	return fd;
}

/* Rename tmp_path to block path p (making its subdirectory if need be).
 * A subdirectory that cannot be made says why (ENOSPC: no inode or block
 * left for it), not the rename's ENOENT, which reads as a vanished dir. */
static int put_in_place(const char *tmp_path, const char *p)
{
	if (rename(tmp_path, p) == 0)
		return 0;
	int rc = -errno;
	if (rc == -ENOENT) {
		char sub[PATH_MAX];

		snprintf(sub, sizeof(sub), "%.*s", (int)(strrchr(p, '/') - p), p);
		if (mkdir(sub, 0755) == 0 || errno == EEXIST)
			rc = rename(tmp_path, p) < 0 ? -errno : 0;
		else
			rc = -errno;
	}
	return rc;
}

int wrk_bs_commit(wrk_bs *bs, int dir, cis_block_id id, uint64_t len, uint64_t sum,
                  const char *tmp_path, bool pin, bool used)
{
	char p[PATH_MAX];
	wrk_block *b = calloc(1, sizeof(*b));
	int rc;

	if (!b) {
		unlink(tmp_path);
		wrk_bs_unreserve(bs, dir, len);
		return -ENOMEM;
	}
	b->id = id;
	b->dir = dir;
	b->len = len;
	b->sum = sum;
	b->atime_s = now_s();
	b->pass_ms = used ? cis_mono_ms() : 0;
	b->verified = true;
	block_path(bs->dirs[dir].path, id, p, sizeof(p));
	/* The rename and the index entry go together under mu: an eviction
	 * or drop of the same id moves its file away under mu too (bury), so
	 * neither can take the other's file. */
	pthread_mutex_lock(&bs->mu);
	bs->dirs[dir].reserved -= len;
	wrk_block *had = do_find(bs, id);
	if (had) {
		/* Raced with another copy (replicate and read at once): keep the
		 * indexed one, pinned if this one was to be, and give back this
		 * space. */
		if ((do_take_pin(bs, id) || pin) && !had->pinned) {
			had->pinned = true;
			bs->dirs[had->dir].pinned += had->len;
			idx_put(bs, had);
		}
		bs->dirs[dir].used -= len;
		pthread_mutex_unlock(&bs->mu);
		unlink(tmp_path);
		free(b);
		return 0;
	}
	rc = put_in_place(tmp_path, p);
	if (rc < 0) {
		bs->dirs[dir].used -= len;
		pthread_mutex_unlock(&bs->mu);
		wrk_bs_dir_error(bs, dir, rc, "rename");
		unlink(tmp_path);
		free(b);
		return rc;
	}
	b->pinned = do_take_pin(bs, id) || pin;
	do_insert(bs, b);
	wrk_slru_insert(&bs->dirs[dir].lru, &b->lru, len);
	bs->dirs[dir].nblocks++;
	if (b->pinned)
		bs->dirs[dir].pinned += len;
	idx_put(bs, b);
	if (bs->w->link)
		wrk_link_note(bs->w->link, id, true);
	pthread_mutex_unlock(&bs->mu);
	return 0;
}

/* A use. One reuse_ms or more after the first use of the block's last
 * pass it is a re-use, promotes the block and starts a new pass; sooner,
 * it is part of that pass (a reader asking in pieces). A block used again
 * and again stays promoted however close together the uses. Caller holds
 * bs->mu. */
static void do_touch(wrk_bs *bs, wrk_block *b)
{
	uint64_t now = cis_mono_ms();
	wrk_slru *lru = &bs->dirs[b->dir].lru;

	if (b->pass_ms && now - b->pass_ms >= bs->reuse_ms) {
		wrk_slru_touch(lru, &b->lru);
		b->pass_ms = now;
	} else {
		wrk_slru_refresh(lru, &b->lru);
		if (!b->pass_ms)
			b->pass_ms = now;
	}
	int64_t t = now_s();
	if (t != b->atime_s) {
		b->atime_s = t;
		do_mark_moved(bs, b);
	}
}

int wrk_bs_acquire(wrk_bs *bs, cis_block_id id, bool touch, wrk_blk_info *info)
{
	wrk_block *b;

	pthread_mutex_lock(&bs->mu);
	b = do_find(bs, id);
	if (!b) {
		pthread_mutex_unlock(&bs->mu);
		return -ENOENT;
	}
	b->refs++;
	if (touch)
		do_touch(bs, b);
	info->blk = b;
	info->dir = b->dir;
	info->len = b->len;
	info->sum = b->sum;
	info->verified = b->verified;
	info->pinned = b->pinned;
	block_path(bs->dirs[b->dir].path, id, info->path, sizeof(info->path));
	pthread_mutex_unlock(&bs->mu);
	return 0;
}

int wrk_bs_touch(wrk_bs *bs, cis_block_id id)
{
	pthread_mutex_lock(&bs->mu);
	wrk_block *b = do_find(bs, id);
	if (b)
		do_touch(bs, b);
	pthread_mutex_unlock(&bs->mu);
	return b ? 0 : -ENOENT;
}

void wrk_bs_touch_held(wrk_bs *bs, wrk_block *b)
{
	pthread_mutex_lock(&bs->mu);
	do_touch(bs, b);
	pthread_mutex_unlock(&bs->mu);
}

bool wrk_bs_has(wrk_bs *bs, cis_block_id id)
{
	bool r;

	pthread_mutex_lock(&bs->mu);
	r = do_find(bs, id) != NULL;
	pthread_mutex_unlock(&bs->mu);
	return r;
}

void wrk_bs_release(wrk_bs *bs, wrk_block *b)
{
	bool gone;

	pthread_mutex_lock(&bs->mu);
	gone = --b->refs == 0 && b->doomed;
	pthread_mutex_unlock(&bs->mu);
	if (gone)
		free(b); /* already out of the table, the index and the dir */
}

/* Drop b (indexed) and unlock mu. Dropping a block in use removes its
 * file and entry at once (readers keep their open fds) and frees the
 * struct at the last release, so a fresh copy of the same id can be cached
 * meanwhile without confusion. A repair keeps a pinned block's pin for its
 * next commit. */
static int drop_unlock(wrk_bs *bs, wrk_block *b, const char *why, bool repair)
{
	victim v;
	bool busy;
	char hex[CIS_BLOCK_ID_HEX];

	cis_block_id_fmt(b->id, hex);
	if (repair && b->pinned)
		do_keep_pin(bs, b->id);
	v.id = b->id;
	v.dir = b->dir;
	v.len = b->len;
	do_forget(bs, b);
	if (!bury(bs, &v))
		keep_stuck(bs, &v);
	busy = b->refs > 0;
	if (busy)
		b->doomed = true;
	else
		free(b);
	pthread_mutex_unlock(&bs->mu);
	unlink_victims(bs, &v, 1);
	cis_info("block dropped", "block=%s why=\"%s\" in_use=%d", hex, why, busy);
	return busy ? -EBUSY : 0;
}

int wrk_bs_free(wrk_bs *bs, cis_block_id id)
{
	pthread_mutex_lock(&bs->mu);
	(void)do_take_pin(bs, id); /* freed while away: no pin to come back */
	wrk_block *b = do_find(bs, id);
	if (!b) {
		pthread_mutex_unlock(&bs->mu);
		return -ENOENT;
	}
	return drop_unlock(bs, b, "freed", false);
}

int wrk_bs_drop_held(wrk_bs *bs, wrk_block *b, const char *why)
{
	pthread_mutex_lock(&bs->mu);
	if (b->doomed || do_find(bs, b->id) != b) {
		/* Dropped already; the id may name a new copy by now. */
		pthread_mutex_unlock(&bs->mu);
		return -ENOENT;
	}
	return drop_unlock(bs, b, why, true);
}

int wrk_bs_verify(wrk_bs *bs, cis_block_id id, bool again)
{
	wrk_blk_info info;
	cis_checksum *cs;
	char *buf;
	uint64_t done = 0;
	int fd, rc = 0;
	struct stat st;

	if (wrk_bs_acquire(bs, id, false, &info) < 0)
		return -ENOENT;
	/* One read of the block at a time: readers of one block after a
	 * restart wait for the first one's verdict instead of each reading
	 * the whole block again. */
	pthread_mutex_lock(&bs->mu);
	while (info.blk->verifying)
		pthread_cond_wait(&bs->verify_cv, &bs->mu);
	bool settled = info.blk->doomed || (info.blk->verified && !again);
	if (!settled)
		info.blk->verifying = true;
	rc = info.blk->doomed ? -ENOENT : 0; /* the other verify failed it */
	pthread_mutex_unlock(&bs->mu);
	if (settled) {
		wrk_bs_release(bs, info.blk);
		return rc;
	}
	cis_counter_inc(bs->w->m.verified_blocks);
	cs = cis_checksum_new();
	buf = malloc(1 << 20);
	if (!cs || !buf) {
		rc = -ENOMEM;
		goto out_release;
	}
	fd = open(info.path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = errno == ENOENT ? -ENOENT : -errno;
		goto out_release;
	}
	if (fstat(fd, &st) == 0 && (uint64_t)st.st_size != info.len) {
		rc = -CIS_E_CHECKSUM;
		goto out_close;
	}
	while (done < info.len) {
		/* A stop does not wait for the rest of a block of up to 1 GiB
		 * (on a slow or hung disk, minutes): no verdict, the block
		 * stays as it was. */
		if (atomic_load(&bs->w->stopping)) {
			rc = -ECANCELED;
			goto out_close;
		}
		ssize_t n = pread(fd, buf, 1 << 20, (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -CIS_E_CHECKSUM;
			goto out_close;
		}
		cis_checksum_update(cs, buf, (size_t)n);
		done += (uint64_t)n;
	}
	if (cis_checksum_digest(cs) != info.sum)
		rc = -CIS_E_CHECKSUM;
out_close:
	close(fd);
out_release:
	free(buf);
	cis_checksum_free(cs);
	/* A mismatch, a missing file, or one that cannot be read; not a
	 * process short of descriptors or memory (the block is fine). */
	bool bad = rc < 0 && rc != -ECANCELED && !wrk_short_of_resources(-rc);
	if (bad) /* this copy: a new one of the id may have come meanwhile */
		wrk_bs_drop_held(bs, info.blk,
		                 rc == -ENOENT           ? "file missing"
		                 : rc == -CIS_E_CHECKSUM ? "checksum mismatch"
		                                         : cis_strerror(rc));
	pthread_mutex_lock(&bs->mu);
	if (rc == 0)
		info.blk->verified = true;
	info.blk->verifying = false;
	pthread_cond_broadcast(&bs->verify_cv);
	pthread_mutex_unlock(&bs->mu);
	wrk_bs_release(bs, info.blk);
	if (bad) {
		char hex[CIS_BLOCK_ID_HEX];

		cis_block_id_fmt(id, hex);
		if (rc == -CIS_E_CHECKSUM)
			cis_counter_inc(bs->w->m.checksum_failures);
		cis_log_limited(CIS_LOG_WARN, "worker:verify", 10,
		                "cached block failed verification", "block=%s path=%s err=\"%s\"",
		                hex, info.path, cis_strerror(rc));
	}
	return rc;
}

int wrk_bs_pin(wrk_bs *bs, cis_block_id id, bool pin)
{
	wrk_block *b;

	pthread_mutex_lock(&bs->mu);
	b = do_find(bs, id);
	if (!b) {
		if (!pin)
			(void)do_take_pin(bs, id); /* unpinned while it was away */
		pthread_mutex_unlock(&bs->mu);
		return -ENOENT;
	}
	if (b->pinned != pin) {
		b->pinned = pin;
		if (pin)
			bs->dirs[b->dir].pinned += b->len;
		else
			bs->dirs[b->dir].pinned -= b->len;
		idx_put(bs, b);
	}
	pthread_mutex_unlock(&bs->mu);
	return 0;
}

int wrk_bs_list(wrk_bs *bs, cis_block_id **ids, size_t *n)
{
	size_t k = 0;

	pthread_mutex_lock(&bs->mu);
	*ids = malloc((bs->nblocks + 1) * sizeof(**ids));
	if (!*ids) {
		pthread_mutex_unlock(&bs->mu);
		return -ENOMEM;
	}
	for (size_t i = 0; i < bs->nbuckets; i++)
		for (wrk_block *b = bs->table[i]; b; b = b->hnext)
			(*ids)[k++] = b->id;
	pthread_mutex_unlock(&bs->mu);
	*n = k;
	return 0;
}

int wrk_bs_next(wrk_bs *bs, const cis_block_id *after, cis_block_id *out)
{
	uint8_t key[16];
	MDB_val k = {16, key}, v;
	MDB_txn *txn;
	MDB_cursor *cur;
	int rc;

	if (mdb_txn_begin(bs->env, NULL, MDB_RDONLY, &txn) != 0)
		return -EIO;
	if (mdb_cursor_open(txn, bs->dbi_blocks, &cur) != 0) {
		mdb_txn_abort(txn);
		return -EIO;
	}
	if (after) {
		cis_block_id_to_bytes(*after, key);
		rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		if (rc == 0 && k.mv_size == 16 && memcmp(k.mv_data, key, 16) == 0)
			rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	} else {
		rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
	}
	if (rc == 0 && k.mv_size == 16) {
		ProtobufCBinaryData b = {16, k.mv_data};

		wrk_id_from_bytes(&b, out); /* copied out before the txn ends */
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return rc == 0 ? 0 : -ENOENT;
}

int wrk_bs_ndirs(const wrk_bs *bs)
{
	return bs->ndirs;
}

void wrk_bs_dir_usage(wrk_bs *bs, int i, Cis__DirUsage *u)
{
	pthread_mutex_lock(&bs->mu);
	u->path = bs->dirs[i].path;
	u->capacity = bs->dirs[i].capacity;
	u->used = bs->dirs[i].used;
	u->blocks = bs->dirs[i].nblocks;
	u->high_watermark = bs->dirs[i].high;
	u->low_watermark = bs->dirs[i].low;
	u->writable = bs->dirs[i].writable;
	u->pinned_bytes = bs->dirs[i].pinned;
	pthread_mutex_unlock(&bs->mu);
}

uint64_t wrk_bs_nblocks(wrk_bs *bs)
{
	uint64_t n;

	pthread_mutex_lock(&bs->mu);
	n = bs->nblocks;
	pthread_mutex_unlock(&bs->mu);
	return n;
}

uint64_t wrk_bs_load_worker_id(wrk_bs *bs)
{
	MDB_val k = {9, "worker_id"}, v;
	MDB_txn *txn;
	uint64_t id = 0;

	if (mdb_txn_begin(bs->env, NULL, MDB_RDONLY, &txn) != 0)
		return 0;
	if (mdb_get(txn, bs->dbi_meta, &k, &v) == 0 && v.mv_size == 8)
		memcpy(&id, v.mv_data, 8);
	mdb_txn_abort(txn);
	return id;
}

int wrk_bs_save_worker_id(wrk_bs *bs, uint64_t id)
{
	MDB_val k = {9, "worker_id"}, v = {8, &id};
	MDB_txn *txn;
	int rc;

	rc = mdb_txn_begin(bs->env, NULL, 0, &txn);
	if (rc)
		return -EIO;
	rc = mdb_put(txn, bs->dbi_meta, &k, &v, 0);
	if (rc) {
		mdb_txn_abort(txn);
		return -EIO;
	}
	/* The id must survive a crash: sync this one. */
	return mdb_txn_commit(txn) == 0 && mdb_env_sync(bs->env, 1) == 0 ? 0 : -EIO;
}

/* ---- start-up ---- */

static int mkdir_p(const char *path)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = 0;
			if (mkdir(p, 0755) < 0 && errno != EEXIST)
				return -errno;
			*s = '/';
		}
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static void clean_tmp(const char *dir)
{
	char p[PATH_MAX];
	DIR *d;
	struct dirent *e;
	int n = 0;

	snprintf(p, sizeof(p), "%s/.tmp", dir);
	mkdir(p, 0700);
	d = opendir(p);
	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) == 0)
			n++;
	}
	closedir(d);
	if (n)
		cis_info("removed unfinished block files", "dir=%s count=%d", dir, n);
}

static int cmp_atime(const void *a, const void *b)
{
	const wrk_block *x = *(wrk_block *const *)a, *y = *(wrk_block *const *)b;

	return x->atime_s < y->atime_s ? 1 : x->atime_s > y->atime_s ? -1 : 0;
}

/* Load the index, dropping entries without a good file. An index that
 * cannot be read to its end fails the start: the block files of the
 * entries not read would be taken for unknown and deleted. */
static int load_index(wrk_bs *bs, cis_errmsg *em)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	wrk_block **loaded = NULL;
	size_t nl = 0, cl = 0;
	struct stale_entry {
		cis_block_id id;
		bool pinned;
	} *stale = NULL;
	size_t ns = 0, cs = 0;
	int rc;

	rc = mdb_txn_begin(bs->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return cis_fail(em, -EIO, "block index: %s", mdb_strerror(rc));
	if ((rc = mdb_cursor_open(txn, bs->dbi_blocks, &cur))) {
		mdb_txn_abort(txn);
		return cis_fail(em, -EIO, "block index: %s", mdb_strerror(rc));
	}
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		struct bs_rec rec = {0};
		ProtobufCBinaryData kb = {k.mv_size, k.mv_data};
		cis_block_id id;
		int dir = -1;
		char p[PATH_MAX];
		struct stat st;

		if (wrk_id_from_bytes(&kb, &id) < 0)
			continue;
		if (v.mv_size >= sizeof(rec)) {
			memcpy(&rec, v.mv_data, sizeof(rec));
			if (v.mv_size == sizeof(rec) + rec.dirlen)
				for (int i = 0; i < bs->ndirs; i++)
					if (strlen(bs->dirs[i].path) == rec.dirlen &&
					    memcmp(bs->dirs[i].path,
					           (char *)v.mv_data + sizeof(rec),
					           rec.dirlen) == 0)
						dir = i;
		}
		if (dir >= 0) {
			block_path(bs->dirs[dir].path, id, p, sizeof(p));
			if (stat(p, &st) < 0 || (uint64_t)st.st_size != rec.len)
				dir = -1;
		}
		if (dir < 0) {
			if (ns == cs) {
				struct stale_entry *n2 =
				    realloc(stale, (cs ? cs * 2 : 64) * sizeof(*n2));

				if (!n2)
					continue;
				stale = n2;
				cs = cs ? cs * 2 : 64;
			}
			stale[ns].id = id;
			stale[ns++].pinned = (rec.flags & BS_FLAG_PIN) != 0;
			continue;
		}
		if (nl == cl) {
			wrk_block **n2 = realloc(loaded, (cl ? cl * 2 : 256) * sizeof(*n2));

			if (!n2) {
				rc = ENOMEM;
				break;
			}
			loaded = n2;
			cl = cl ? cl * 2 : 256;
		}
		wrk_block *b = calloc(1, sizeof(*b));

		if (!b) {
			rc = ENOMEM;
			break;
		}
		b->id = id;
		b->dir = dir;
		b->len = rec.len;
		b->sum = rec.sum;
		b->atime_s = rec.atime_s;
		b->pinned = rec.flags & BS_FLAG_PIN;
		loaded[nl++] = b;
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	if (rc != MDB_NOTFOUND) {
		for (size_t i = 0; i < nl; i++)
			free(loaded[i]);
		free(loaded);
		free(stale);
		return rc == ENOMEM ? cis_fail(em, -ENOMEM, "block index: out of memory")
		                    : cis_fail(em, -EIO,
		                               "block index unreadable after %zu blocks: %s (move "
		                               "index.mdb away to start with an empty cache)",
		                               nl + ns, mdb_strerror(rc));
	}

	/* Most recent first, each appended at probation's cold end. */
	if (nl)
		qsort(loaded, nl, sizeof(*loaded), cmp_atime);
	for (size_t i = 0; i < nl; i++) {
		wrk_block *b = loaded[i];
		bs_dir *d = &bs->dirs[b->dir];

		do_insert(bs, b);
		wrk_slru_insert_old(&d->lru, &b->lru, b->len);
		d->used += b->len;
		d->nblocks++;
		if (b->pinned)
			d->pinned += b->len;
	}
	free(loaded);
	for (size_t i = 0; i < ns; i++) {
		idx_del(bs, stale[i].id);
		if (stale[i].pinned)
			do_keep_pin(bs, stale[i].id); /* for its next reader's fetch */
	}
	if (ns)
		cis_warn("dropped index entries without a good block file", "count=%zu", ns);
	free(stale);
	cis_info("block index loaded", "blocks=%zu", nl);
	return 0;
}

/* Delete files under the 2-hex subdirs that the index does not place there. */
static void remove_unknown(wrk_bs *bs, int i)
{
	const char *dir = bs->dirs[i].path;
	char sub[PATH_MAX];
	int removed = 0;

	for (int h = 0; h < 256; h++) {
		DIR *d;
		struct dirent *e;

		snprintf(sub, sizeof(sub), "%s/%02x", dir, h);
		d = opendir(sub);
		if (!d)
			continue;
		while ((e = readdir(d)) != NULL) {
			cis_block_id id;
			wrk_block *b;

			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			if (cis_block_id_parse(e->d_name, &id) == 0) {
				b = do_find(bs, id);
				if (b && b->dir == i)
					continue;
			}
			if (unlinkat(dirfd(d), e->d_name, 0) == 0)
				removed++;
		}
		closedir(d);
	}
	if (removed)
		cis_warn("deleted files the block index does not know", "dir=%s count=%d", dir,
		         removed);
}

int wrk_bs_open(wrk *w, const wrk_bs_opts *o, wrk_bs **out, cis_errmsg *em)
{
	wrk_bs *bs;
	char p[PATH_MAX];
	MDB_txn *txn;
	MDB_stat repin_stat = {0};
	int rc;

	if (o->ndirs < 1 || o->ndirs > WRK_MAX_DIRS)
		return cis_fail(em, -EINVAL, "need 1 to %d cache dirs", WRK_MAX_DIRS);
	bs = calloc(1, sizeof(*bs));
	if (!bs)
		return cis_fail(em, -ENOMEM, "out of memory");
	bs->w = w;
	bs->reuse_ms = o->reuse_ms ? o->reuse_ms : WRK_REUSE_MS;
	bs->lock_fd = -1;
	pthread_mutex_init(&bs->mu, NULL);
	pthread_cond_init(&bs->verify_cv, NULL);
	bs->nbuckets = 1024;
	bs->table = calloc(bs->nbuckets, sizeof(*bs->table));
	if (!bs->table) {
		rc = cis_fail(em, -ENOMEM, "out of memory");
		goto out_free;
	}
	/* The locks before anything is touched: a second worker started
	 * by mistake must not clean the first one's unfinished files. */
	rc = mkdir_p(o->state_dir);
	if (rc < 0) {
		rc = cis_fail(em, rc, "state dir %s: %s", o->state_dir, cis_strerror(rc));
		goto out_dirs;
	}
	snprintf(p, sizeof(p), "%s/worker.lock", o->state_dir);
	bs->lock_fd = open(p, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
	if (bs->lock_fd < 0 || flock(bs->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		rc = cis_fail(em, -EBUSY, "state dir %s: in use by another worker (%s)",
		              o->state_dir, strerror(errno));
		goto out_dirs;
	}
	for (int i = 0; i < o->ndirs; i++) {
		bs_dir *d = &bs->dirs[i];
		char real[PATH_MAX];

		d->lock_fd = -1;
		rc = mkdir_p(o->dirs[i].path);
		if (rc < 0) {
			rc =
			    cis_fail(em, rc, "cache dir %s: %s", o->dirs[i].path, cis_strerror(rc));
			goto out_dirs;
		}
		d->path = strdup(realpath(o->dirs[i].path, real) ? real : o->dirs[i].path);
		bs->ndirs = i + 1;
		for (int j = 0; j < i; j++)
			if (strcmp(bs->dirs[j].path, d->path) == 0) {
				rc = cis_fail(em, -EINVAL, "cache dir %s given twice", d->path);
				goto out_dirs;
			}
		/* Another worker's (another state dir) would take this one's
		 * blocks for unknown files, and delete them. The dir itself is
		 * locked: a read-only dir (served, not written) has no room
		 * for a lock file. */
		d->lock_fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (d->lock_fd < 0 || flock(d->lock_fd, LOCK_EX | LOCK_NB) < 0) {
			rc = errno == EWOULDBLOCK && d->lock_fd >= 0 ? -EBUSY : -errno;
			rc = cis_fail(em, rc, "cache dir %s: %s", d->path,
			              rc == -EBUSY ? "in use by another worker" : cis_strerror(rc));
			goto out_dirs;
		}
		d->cfg_capacity = o->dirs[i].capacity;
		d->high_frac = o->high;
		d->low_frac = o->low;
		d->prot_frac = o->protected_frac;
		wrk_slru_init(&d->lru, 0);
		set_capacity(d, d->cfg_capacity);
		clean_tmp(d->path);
		d->writable = probe_writable(d->path);
		if (!d->writable)
			cis_warn("cache dir not writable: serving its blocks, caching elsewhere",
			         "dir=%s", d->path);
	}

	snprintf(p, sizeof(p), "%s/index.mdb-lock", o->state_dir);
	rc = cis_lmdb_lock_prepare(p, em);
	if (rc)
		goto out_dirs;
	snprintf(p, sizeof(p), "%s/index.mdb", o->state_dir);
	if ((rc = mdb_env_create(&bs->env)) || (rc = mdb_env_set_maxdbs(bs->env, 4)) ||
	    /* Sparse: only what is used takes disk. 4 GiB held some 30 million
	     * blocks, which a cache of small files on a few TB reaches. */
	    (rc = mdb_env_set_mapsize(bs->env, 64ull << 30)) ||
	    /* NOSYNC: a crash of the process loses nothing (the OS has the
	     * pages); after a power loss reconcile repairs what is missing. */
	    (rc = mdb_env_open(bs->env, p, MDB_NOSUBDIR | MDB_NOSYNC | MDB_NOTLS, 0644))) {
		rc = cis_fail(em, -EIO, "block index %s: %s", p, mdb_strerror(rc));
		goto out_env;
	}
	if ((rc = cis_lmdb_check_length(bs->env, p, em)) < 0)
		goto out_env;
	rc = mdb_txn_begin(bs->env, NULL, 0, &txn);
	if (!rc) {
		if ((rc = mdb_dbi_open(txn, "blocks", MDB_CREATE, &bs->dbi_blocks)) ||
		    (rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &bs->dbi_meta)) ||
		    (rc = mdb_dbi_open(txn, "repin", MDB_CREATE, &bs->dbi_repin)) ||
		    (rc = mdb_stat(txn, bs->dbi_repin, &repin_stat)))
			mdb_txn_abort(txn);
		else
			rc = mdb_txn_commit(txn);
		bs->nrepin = rc ? 0 : repin_stat.ms_entries;
	}
	if (rc) {
		rc = cis_fail(em, -EIO, "block index %s: %s", p, mdb_strerror(rc));
		goto out_env;
	}
	rc = load_index(bs, em);
	if (rc < 0)
		goto out_env;
	for (int i = 0; i < bs->ndirs; i++) {
		victim *v;
		size_t nv;

		remove_unknown(bs, i);
		/* A dir configured smaller than before: trim it now. */
		nv = bs->dirs[i].used > bs->dirs[i].high ? do_evict(bs, i, 0, bs->dirs[i].low, &v)
		                                         : 0;
		if (nv) {
			unlink_victims(bs, v, nv);
			free(v);
		}
	}
	*out = bs;
	return 0;

out_env:
	if (bs->env)
		mdb_env_close(bs->env);
out_dirs:
	for (int i = 0; i < bs->ndirs; i++) {
		free(bs->dirs[i].path);
		free(bs->dirs[i].stuck);
		if (bs->dirs[i].lock_fd >= 0)
			close(bs->dirs[i].lock_fd);
	}
	if (bs->lock_fd >= 0)
		close(bs->lock_fd);
	free(bs->table);
	free(bs->moved);
out_free:
	free(bs);
	return rc;
}

void wrk_bs_close(wrk_bs *bs)
{
	if (!bs)
		return;
	/* the access times, so that the next start orders eviction well */
	(void)wrk_bs_save_atimes(bs);
	for (size_t i = 0; i < bs->nbuckets; i++) {
		wrk_block *b = bs->table[i], *next;

		for (; b; b = next) {
			next = b->hnext;
			free(b);
		}
	}
	mdb_env_sync(bs->env, 1);
	mdb_env_close(bs->env);
	for (int i = 0; i < bs->ndirs; i++) {
		free(bs->dirs[i].path);
		free(bs->dirs[i].stuck);
		close(bs->dirs[i].lock_fd);
	}
	close(bs->lock_fd);
	free(bs->table);
	pthread_mutex_destroy(&bs->mu);
	pthread_cond_destroy(&bs->verify_cv);
	free(bs);
}
