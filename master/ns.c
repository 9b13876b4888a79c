/* The namespace: inodes in LMDB, loaded lazily from the stores.
 *
 * The first lookup or listing of a directory inside a mount lists the store
 * (every page) and writes the result in one transaction; a listing older
 * than the mount's sync interval is refreshed on the next access, and sync
 * refreshes at once. Concurrent callers that need the same directory share
 * one store listing (single flight, keyed by the directory's inode id).
 * Mount points under a directory are kept whatever the store says, and hide
 * a store entry of the same name; so are the store's directories on the way
 * to a nested mount (they stay directories when the store drops them or
 * puts a file in their place). */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/hash.h"
#include "cistern/log.h"
#include "cistern/time.h"
#include "master.h"

struct mst_flight {
	uint64_t dir;
	uint64_t mount_id; /* a listing for another mount of the same dir (a "/" mounted
	                      again keeps inode 1) is not one to wait for */
	bool done;
	int rc;
	cis_errmsg em;
	int refs;
	struct mst_flight *next;
};

void mst_ns_flights_init(mst_master *m)
{
	pthread_mutex_init(&m->flight_lock, NULL);
	pthread_cond_init(&m->flight_cond, NULL);
	m->flights = NULL;
}

int mst_name_check(const char *name, size_t len, cis_errmsg *em)
{
	if (len == 0)
		return cis_fail(em, -EINVAL, "empty name");
	if (len > MST_NAME_MAX)
		return cis_fail(em, -ENAMETOOLONG, "name over %d bytes", MST_NAME_MAX);
	if (memchr(name, 0, len))
		return cis_fail(em, -EINVAL, "name contains a nul byte");
	if (memchr(name, '/', len))
		return cis_fail(em, -EINVAL, "name contains '/'");
	if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		return cis_fail(em, -EINVAL, "name '%.*s' is not allowed", (int)len, name);
	return 0;
}

int mst_path_check(const char *path, size_t len, cis_errmsg *em)
{
	if (len > MST_PATH_MAX)
		return cis_fail(em, -ENAMETOOLONG, "path over %d bytes", MST_PATH_MAX);
	if (len == 0 || memchr(path, 0, len))
		return cis_fail(em, -EINVAL, len ? "path contains a nul byte" : "empty path");
	if (path[0] != '/')
		return cis_fail(em, -EINVAL, "path '%.*s' is not absolute", (int)len, path);
	size_t i = 1;
	while (i < len) {
		const char *c = path + i;
		const char *e = memchr(c, '/', len - i);
		size_t cl = e ? (size_t)(e - c) : len - i;
		/* a single trailing slash is tolerated ("/a/" is "/a") */
		if (cl == 0 && i + 1 < len)
			return cis_fail(em, -EINVAL, "path '%.*s' has an empty component",
			                (int)(len > 200 ? 200 : len), path);
		if (cl == 0)
			break;
		if (cl > MST_NAME_MAX)
			return cis_fail(em, -ENAMETOOLONG, "path component over %d bytes",
			                MST_NAME_MAX);
		if ((cl == 1 && c[0] == '.') || (cl == 2 && c[0] == '.' && c[1] == '.'))
			return cis_fail(em, -EINVAL, "path '%.*s' contains '.' or '..'",
			                (int)(len > 200 ? 200 : len), path);
		i += cl + 1;
	}
	return 0;
}

int mst_ns_getattr(mst_master *m, uint64_t id, mst_inode *out, cis_errmsg *em)
{
	MDB_txn *txn;
	int err = mst_txn_begin(m, false, &txn);
	if (err)
		return cis_fail(em, err, "lmdb: %s", cis_strerror(err));
	err = mst_inode_get(m, txn, id, out);
	mdb_txn_abort(txn);
	if (err == -ENOENT)
		return cis_fail(em, -ENOENT, "inode %llu: no such inode", (unsigned long long)id);
	if (err)
		return cis_fail(em, err, "inode %llu: %s", (unsigned long long)id,
		                cis_strerror(err));
	return 0;
}

static bool is_stale(const mst_inode *dir, const mst_mount *mt, int64_t now)
{
	if (dir->listed_ns == 0)
		return true;
	if (mt->sync_interval_ms == 0)
		return false;
	/* An interval whose ns overflow an int64 (longer than 292 years: mounts
	 * kept before intervals were bounded) is never over. */
	if (mt->sync_interval_ms > (uint64_t)INT64_MAX / 1000000)
		return false;
	return now - dir->listed_ns > (int64_t)mt->sync_interval_ms * 1000000;
}

/* ---- one store listing applied to LMDB ---- */

struct listing {
	cis_ufs_entry *e;
	size_t n, cap;
};

/* By name; of two entries of one name, the directory first. */
static int cmp_entry(const void *a, const void *b)
{
	const cis_ufs_entry *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : (int)y->st.is_dir - (int)x->st.is_dir;
}

static void listing_free(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->e[i].name);
		free(l->e[i].link_target);
	}
	free(l->e);
}

/* An object and a prefix of one name (S3 keys "a" and "a/b") make two
 * entries of that name: the directory is shown, as Mountpoint for S3 shows
 * it, and the object cannot be reached. Two entries of one name would each
 * be given an inode on every listing, the later replacing the earlier as
 * the name's child and leaving it in LMDB with nothing leading to it. l is
 * sorted by cmp_entry. */
static void drop_shadowed(struct listing *l)
{
	size_t kept = 0;
	for (size_t i = 0; i < l->n; i++) {
		if (kept && strcmp(l->e[kept - 1].name, l->e[i].name) == 0) {
			free(l->e[i].name);
			free(l->e[i].link_target);
			continue;
		}
		l->e[kept++] = l->e[i];
	}
	l->n = kept;
}

/* A listing that would never end: tokens that go round in a cycle (Brent's
 * check, one token kept at each power of two), more entries than the
 * master holds for one directory, or page after empty page. */
struct runaway {
	uint64_t kept_hash;
	size_t pages, keep_at, empty_run;
};

/* After a page of got entries (the listing now holds total) that named
 * token to go on with: 0, or why paging must stop. */
static int runaway_check(mst_master *m, struct runaway *r, const char *token, size_t got,
                         size_t total, const char *uri, const char *key, cis_errmsg *em)
{
	r->pages++;
	r->empty_run = got ? 0 : r->empty_run + 1;
	if (total > m->list_max)
		return cis_fail(em, -CIS_E_STORE,
		                "%s: the listing of '%s' holds over %llu entries (the master's "
		                "--list-max-entries)",
		                uri, key, (unsigned long long)m->list_max);
	if (!token)
		return 0;
	if (r->empty_run > MST_LIST_MAX_EMPTY_PAGES)
		return cis_fail(em, -CIS_E_STORE,
		                "%s: the listing of '%s' goes on page after empty page (over %u "
		                "in a row)",
		                uri, key, MST_LIST_MAX_EMPTY_PAGES);
	uint64_t h = cis_hash64(token, strlen(token), 0);
	if (r->pages > 1 && h == r->kept_hash)
		return cis_fail(em, -CIS_E_STORE,
		                "%s: the store's continuation tokens go round in a cycle (the "
		                "listing of '%s' never ends)",
		                uri, key);
	if (r->pages == r->keep_at) {
		r->kept_hash = h;
		r->keep_at *= 2;
	}
	return 0;
}

static int list_store(mst_master *m, mst_mount *mt, const char *key, struct listing *l,
                      cis_errmsg *em)
{
	char *token = NULL;
	int err = 0;
	struct runaway ra = {.keep_at = 1};

	if (!mt->ufs)
		return cis_fail(em, -CIS_E_URI, "%s: store could not be opened", mt->uri);
	cis_counter_inc(m->c_store_lists);
	do {
		cis_ufs_page pg = {0};
		err = cis_ufs_list(mt->ufs, key, token, 0, &pg, em);
		free(token);
		token = NULL;
		if (err) {
			cis_ufs_page_free(&pg);
			cis_counter_inc(m->c_store_list_errors);
			break;
		}
		for (size_t i = 0; i < pg.n; i++) {
			const char *nm = pg.entries[i].name;
			if (mst_name_check(nm, strlen(nm), NULL) != 0) {
				/* a key no file system could show (a component
				 * over 255 bytes): said, not lost in silence */
				cis_log_limited(CIS_LOG_WARN, "ns-skip", 10,
				                "store entry left out: its name cannot be a path "
				                "component",
				                "uri=%s dir=\"%.200s\" name_bytes=%zu", mt->uri,
				                key, strlen(nm));
				continue;
			}
			if (l->n == l->cap) {
				size_t cap = l->cap ? l->cap * 2 : 256;
				cis_ufs_entry *ne = realloc(l->e, cap * sizeof(*ne));
				if (!ne) {
					err = -ENOMEM;
					break;
				}
				l->e = ne;
				l->cap = cap;
			}
			l->e[l->n] = pg.entries[i];
			pg.entries[i].name = NULL; /* moved */
			pg.entries[i].link_target = NULL;
			l->n++;
		}
		if (!err && pg.next_token && !(token = strdup(pg.next_token)))
			err = -ENOMEM; /* not the end of the listing */
		if (!err && (err = runaway_check(m, &ra, token, pg.n, l->n, mt->uri, key, em)))
			cis_counter_inc(m->c_store_list_errors);
		cis_ufs_page_free(&pg);
	} while (!err && token);
	free(token);
	if (!err && l->n > 1)
		qsort(l->e, l->n, sizeof(*l->e), cmp_entry);
	if (!err)
		drop_shadowed(l);
	return err;
}

struct kids {
	char **names;
	uint64_t *ids;
	size_t n, cap;
};

static int collect_kid(void *arg, const char *name, size_t nlen, uint64_t id)
{
	struct kids *k = arg;
	if (k->n == k->cap) {
		size_t cap = k->cap ? k->cap * 2 : 256;
		char **nn = realloc(k->names, cap * sizeof(*nn));
		if (!nn)
			return -ENOMEM;
		k->names = nn;
		uint64_t *ni = realloc(k->ids, cap * sizeof(*ni));
		if (!ni)
			return -ENOMEM;
		k->ids = ni;
		k->cap = cap;
	}
	k->names[k->n] = strndup(name, nlen);
	if (!k->names[k->n])
		return -ENOMEM;
	k->ids[k->n++] = id;
	return 0;
}

static void kids_free(struct kids *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->names[i]);
	free(k->names);
	free(k->ids);
}

/* False when the entry's key would be over MST_PATH_MAX (then skipped). */
static bool key_fits(const mst_inode *dir, const cis_ufs_entry *e)
{
	return strlen(dir->key) + 1 + strlen(e->name) <= MST_PATH_MAX;
}

static uint8_t entry_type(const cis_ufs_entry *e)
{
	return e->link_target ? MST_LINK : e->st.is_dir ? MST_DIR : MST_FILE;
}

static void fill_from_store(mst_inode *ino, const mst_inode *dir, const cis_ufs_entry *e)
{
	ino->parent = dir->id;
	ino->mount_id = dir->mount_id;
	ino->type = entry_type(e);
	ino->size = e->st.is_dir ? 0 : e->st.size;
	ino->mtime_ns = e->st.mtime_ns;
	ino->mode = e->st.mode ? (e->st.mode & 07777) : (e->st.is_dir ? 0755 : 0644);
	snprintf(ino->version, sizeof(ino->version), "%s", e->st.is_dir ? "" : e->st.version);
	snprintf(ino->name, sizeof(ino->name), "%s", e->name);
	if (e->link_target) {
		snprintf(ino->link_target, sizeof(ino->link_target), "%s", e->link_target);
		return;
	}
	size_t dl = strlen(dir->key), nl = strlen(e->name);
	if (dl + 1 + nl > MST_PATH_MAX) { /* callers check key_fits first */
		ino->key[0] = 0;
		return;
	}
	memcpy(ino->key, dir->key, dl);
	if (dl)
		ino->key[dl++] = '/';
	memcpy(ino->key + dl, e->name, nl + 1);
}

/* Directories a listing found for the first time (never listed yet). */
struct new_dirs {
	uint64_t *ids;
	size_t n, cap;
};

static void note_new_dir(struct new_dirs *nd, uint64_t id)
{
	if (nd->n == nd->cap) {
		size_t cap = nd->cap ? nd->cap * 2 : 64;
		uint64_t *ni = realloc(nd->ids, cap * sizeof(*ni));

		if (!ni)
			return; /* only listing ahead misses it */
		nd->ids = ni;
		nd->cap = cap;
	}
	nd->ids[nd->n++] = id;
}

static int add_entry(mst_master *m, MDB_txn *txn, const mst_inode *dir, const cis_ufs_entry *e,
                     mst_inode *scratch, struct new_dirs *nd)
{
	memset(scratch, 0, sizeof(*scratch));
	int err = mst_store_next_id(m, txn, "next_inode", &scratch->id);
	if (err)
		return err;
	fill_from_store(scratch, dir, e);
	err = mst_inode_put(m, txn, scratch);
	if (!err)
		err = mst_child_put(m, txn, dir->id, scratch->name, scratch->id);
	if (!err && scratch->type == MST_DIR)
		note_new_dir(nd, scratch->id);
	return err;
}

/* The directories on the way to the mount roots (their ancestors), read
 * once per listing that drops or retypes a directory. */
struct mount_ways {
	uint64_t *ids;
	size_t n;
	bool read, failed;
};

static void mount_ways_read(mst_master *m, MDB_txn *txn, struct mount_ways *w, mst_inode *scratch)
{
	w->read = true;
	pthread_mutex_lock(&m->mounts_lock);
	for (size_t i = 0; i < m->nmounts && !w->failed; i++) {
		uint64_t at = m->mounts[i]->root_ino;
		for (int hops = 0; at && at != MST_ROOT_INO && hops < 4096; hops++) {
			if (mst_inode_get(m, txn, at, scratch))
				break;
			at = scratch->parent;
			uint64_t *n = realloc(w->ids, (w->n + 1) * sizeof(*n));
			if (!n) {
				w->failed = true;
				break;
			}
			w->ids = n;
			w->ids[w->n++] = at;
		}
	}
	pthread_mutex_unlock(&m->mounts_lock);
}

/* Whether directory id holds a mount point below it (a mount nested in a
 * directory of another's store): such a directory stays, whatever the
 * store says of it, or the nested mount would go with it. Kept too when
 * the ways could not be read (out of memory): nothing is lost. */
static bool holds_mount(mst_master *m, MDB_txn *txn, uint64_t id, struct mount_ways *w,
                        mst_inode *scratch)
{
	if (!w->read)
		mount_ways_read(m, txn, w, scratch);
	for (size_t i = 0; i < w->n; i++)
		if (w->ids[i] == id)
			return true;
	return w->failed;
}

/* Merge the sorted store listing with the sorted children in one write
 * transaction: vanished entries go (with their subtrees), new ones get
 * fresh ids (new directories noted in nd), changed files keep their id
 * with the new attributes, unless the file was asked of the store itself
 * after the listing began at started_ns (its listed_ns: a refresh of a
 * file found changed; the listing's view of it is older). Nothing is
 * applied if the directory is no longer in mount_id, the mount that was
 * listed. */
static int apply_listing(mst_master *m, uint64_t dir_id, uint64_t mount_id, struct listing *l,
                         int64_t started_ns, bool gone, struct new_dirs *nd, cis_errmsg *em)
{
	MDB_txn *txn;
	struct kids k = {0};
	struct mount_ways ways = {0};
	mst_inode *dir = malloc(sizeof(*dir)), *ch = malloc(sizeof(*ch)), *up = malloc(sizeof(*up));
	int err = (!dir || !ch || !up) ? -ENOMEM : mst_txn_begin(m, true, &txn);
	if (err)
		goto out_free;
	err = mst_inode_get(m, txn, dir_id, dir);
	if (!err && dir->mount_id != mount_id) {
		/* Unmounted (or mounted again) while the store was listed: the
		 * listing is of a store this directory no longer shows. */
		mdb_txn_abort(txn);
		nd->n = 0;
		goto out_free;
	}
	if (!err)
		err = mst_children_each(m, txn, dir_id, NULL, collect_kid, &k);
	size_t i = 0, j = 0; /* i over the store, j over the children */
	while (!err && (i < l->n || j < k.n)) {
		int c = i == l->n ? 1 : j == k.n ? -1 : strcmp(l->e[i].name, k.names[j]);
		if (c < 0) {
			if (key_fits(dir, &l->e[i]))
				err = add_entry(m, txn, dir, &l->e[i], ch, nd);
			else
				cis_log_limited(CIS_LOG_WARN, "ns-skip", 10,
				                "store entry left out: its path is over 4096 bytes",
				                "dir=\"%.200s\" name_bytes=%zu", dir->key,
				                strlen(l->e[i].name));
			i++;
			continue;
		}
		err = mst_inode_get(m, txn, k.ids[j], ch);
		if (err)
			break;
		if (c > 0) {
			/* Not in the store's listing: gone, unless what was
			 * learnt of it since the listing started (a stat at an
			 * open, its own listing) says it is there. */
			if (!ch->mount_point && ch->mount_id == dir->mount_id &&
			    ch->listed_ns <= started_ns &&
			    (ch->type != MST_DIR || !holds_mount(m, txn, ch->id, &ways, up)))
				err = mst_inode_del_tree(m, txn, ch->id);
			j++;
			continue;
		}
		/* same name */
		const cis_ufs_entry *e = &l->e[i];
		if (ch->mount_point || ch->mount_id != dir->mount_id) {
			/* a nested mount point hides the store's entry */
		} else if (ch->listed_ns <= started_ns &&
		           (ch->type != entry_type(e) ||
		            (e->link_target && strcmp(ch->link_target, e->link_target) != 0))) {
			/* A new inode: what a client cached of the old one (a
			 * link's text among it) stays with the old one. A
			 * directory that holds a nested mount hides the entry. */
			if (ch->type != MST_DIR || !holds_mount(m, txn, ch->id, &ways, up)) {
				err = mst_inode_del_tree(m, txn, ch->id);
				if (!err)
					err = add_entry(m, txn, dir, e, ch, nd);
			}
		} else if (!e->st.is_dir && ch->listed_ns <= started_ns &&
		           (strcmp(ch->version, e->st.version) != 0 || ch->size != e->st.size ||
		            ch->mtime_ns != e->st.mtime_ns)) {
			uint64_t id = ch->id;
			int64_t listed = ch->listed_ns;
			fill_from_store(ch, dir, e);
			ch->id = id;
			ch->listed_ns = listed;
			err = mst_inode_put(m, txn, ch);
		}
		i++;
		j++;
	}
	/* A directory found gone keeps its old stamp: a listing of its
	 * parent, however old, drops it. */
	if (!err && !gone) {
		dir->listed_ns = cis_wall_ns();
		err = mst_inode_put(m, txn, dir);
	}
	if (err) {
		mdb_txn_abort(txn);
		nd->n = 0;
		cis_fail(em, err, "storing the listing of inode %llu: %s%s",
		         (unsigned long long)dir_id, cis_strerror(err),
		         err == -ENOSPC ? " (the master's LMDB map is full: raise --map-size)"
		                        : "");
		goto out_free;
	}
	err = mst_txn_commit(txn);
	if (err) {
		nd->n = 0;
		cis_fail(em, err, "storing a listing of %zu entries: %s%s", l->n, cis_strerror(err),
		         err == -ENOSPC ? " (the master's data directory is full)" : "");
	}
out_free:
	kids_free(&k);
	free(dir);
	free(ch);
	free(up);
	free(ways.ids);
	return err;
}

/* A listing of at least this many entries is held whole while it is
 * merged (about 300 bytes an entry with the children's names: 700 MB at
 * the peak for two million). Freed, that memory stays in the allocator's
 * free lists, so one huge directory would keep the master's RSS at its
 * peak for good; it is given back to the system after such a listing. */
#define TRIM_AFTER_ENTRIES 100000

static int list_dir(mst_master *m, uint64_t dir_id, bool force, struct new_dirs *nd, cis_errmsg *em)
{
	mst_inode *dir = malloc(sizeof(*dir));
	struct listing l = {0};
	size_t listed = 0;
	int err;
	if (!dir)
		return -ENOMEM;
	err = mst_ns_getattr(m, dir_id, dir, em);
	if (err)
		goto out;
	mst_mount *mt = mst_mount_find(m, dir->mount_id);
	if (!mt || (!force && !is_stale(dir, mt, cis_wall_ns())))
		goto out; /* listed by someone else meanwhile, or no longer mounted */
	int64_t started_ns = cis_wall_ns();
	bool gone = false;
	err = list_store(m, mt, dir->key, &l, em);
	if (err == -ENOENT && dir->key[0]) {
		/* The directory itself vanished: the parent's listing will drop
		 * it. Unless the whole store is what is missing (a file system
		 * not mounted under a file:// root, a bucket gone): then this is
		 * the store's error, and the directory keeps what it had. */
		cis_errmsg cem = {{0}};
		int cerr = cis_ufs_check(mt->ufs, &cem);
		if (cerr) {
			*em = cem;
			err = cerr;
		} else {
			l.n = 0;
			err = 0;
			gone = true;
		}
	}
	if (!err)
		err = apply_listing(m, dir_id, dir->mount_id, &l, started_ns, gone, nd, em);
	listed = l.n;
out:
	listing_free(&l);
	free(dir);
	if (listed >= TRIM_AFTER_ENTRIES)
		(void)malloc_trim(0);
	return err;
}

/* Whether this thread may wait on a store: 0 yes, 1 no (an RPC I/O
 * thread: mst_rpc_dispatch_quick), 2 no, and a request wanted to. */
static _Thread_local int store_waits;

void mst_ns_refuse_store_waits(bool refuse)
{
	store_waits = refuse ? 1 : 0;
}

bool mst_ns_store_wait_refused(void)
{
	return store_waits == 2;
}

bool mst_ns_wait_refused_now(void)
{
	if (!store_waits)
		return false;
	store_waits = 2;
	return true;
}

/* A directory listed before whose refresh fails is served as it was last
 * listed (the store is down or refusing: what the namespace and the
 * workers hold still reads), and its mount's directories are not listed
 * again for this long. */
#define REFRESH_RETRY_MS 5000
/* A directory never listed whose listing fails is not listed again for
 * this long, doubled at each failure in a row up to FIRST_RETRY_MAX_MS: the
 * lookups and readdirs meanwhile get its error back. A listing that runs
 * past --list-max-entries pages through millions of entries each time. */
#define FIRST_RETRY_MS     5000
#define FIRST_RETRY_MAX_MS 300000

/* The remembered failure of dir's first listing, or NULL. Caller holds
 * flight_lock. */
static struct mst_list_fail *do_list_fail(mst_master *m, const mst_inode *dir)
{
	for (size_t i = 0; i < MST_LIST_FAILS; i++)
		if (m->list_fails[i].retry_ms && m->list_fails[i].dir == dir->id &&
		    m->list_fails[i].mount_id == dir->mount_id)
			return &m->list_fails[i];
	return NULL;
}

/* Remember that dir's first listing failed with rc (em), or forget it
 * (rc 0). A new failure takes the slot whose retry comes first. Caller
 * holds flight_lock. */
static void do_note_first_listing(mst_master *m, const mst_inode *dir, int rc, const cis_errmsg *em)
{
	struct mst_list_fail *f = do_list_fail(m, dir);
	if (!rc) {
		if (f)
			f->retry_ms = 0;
		return;
	}
	if (!f) {
		f = &m->list_fails[0];
		for (size_t i = 1; i < MST_LIST_FAILS && f->retry_ms; i++)
			if (m->list_fails[i].retry_ms < f->retry_ms)
				f = &m->list_fails[i];
		*f = (struct mst_list_fail){.dir = dir->id, .mount_id = dir->mount_id};
	}
	uint64_t wait = FIRST_RETRY_MS << (f->fails < 6 ? f->fails : 6);
	f->fails++;
	f->rc = rc;
	f->em = *em;
	f->retry_ms = cis_mono_ms() + (wait < FIRST_RETRY_MAX_MS ? wait : FIRST_RETRY_MAX_MS);
}

/* depth: levels below a listing a client asked for (0: asked for). */
static int ensure_listed(mst_master *m, const mst_inode *dir, bool force, int depth, cis_errmsg *em)
{
	if (dir->type != MST_DIR || dir->mount_id == 0)
		return 0;
	mst_mount *mt = mst_mount_find(m, dir->mount_id);
	if (!mt)
		return 0;
	if (!force && !is_stale(dir, mt, cis_wall_ns()))
		return 0;
	bool stale_ok = !force && dir->listed_ns != 0;
	pthread_mutex_lock(&m->flight_lock);
	bool failing = stale_ok && mt->refresh_failing;
	if (failing && mt->refresh_retry_ms > cis_mono_ms()) {
		pthread_mutex_unlock(&m->flight_lock);
		return 0;
	}
	const struct mst_list_fail *lf = force || dir->listed_ns ? NULL : do_list_fail(m, dir);
	if (lf && lf->retry_ms > cis_mono_ms()) {
		int rc = lf->rc;
		if (em)
			*em = lf->em;
		pthread_mutex_unlock(&m->flight_lock);
		return rc;
	}
	pthread_mutex_unlock(&m->flight_lock);
	if (mst_ns_wait_refused_now())
		return -EWOULDBLOCK;

	pthread_mutex_lock(&m->flight_lock);
	for (;;) {
		mst_flight *f = m->flights;
		while (f && !(f->dir == dir->id && f->mount_id == dir->mount_id))
			f = f->next;
		if (!f)
			break;
		if (failing) { /* the store fails: no wait on another try */
			pthread_mutex_unlock(&m->flight_lock);
			return 0;
		}
		/* Someone is listing it: wait for that result. A forced sync
		 * waits and then lists again (the flight may predate the change
		 * the caller wants to see). */
		f->refs++;
		while (!f->done)
			pthread_cond_wait(&m->flight_cond, &m->flight_lock);
		int rc = stale_ok ? 0 : f->rc; /* served as last listed, as the leader's is */
		if (rc && em)
			*em = f->em;
		if (--f->refs == 0)
			free(f);
		if (!force) {
			pthread_mutex_unlock(&m->flight_lock);
			return rc;
		}
	}
	mst_flight *f = calloc(1, sizeof(*f));
	if (!f) {
		pthread_mutex_unlock(&m->flight_lock);
		return -ENOMEM;
	}
	f->dir = dir->id;
	f->mount_id = dir->mount_id;
	f->refs = 1;
	f->next = m->flights;
	m->flights = f;
	pthread_mutex_unlock(&m->flight_lock);

	struct new_dirs nd = {0};
	int rc = list_dir(m, dir->id, force, &nd, &f->em);

	if (rc == 0 && depth > 0)
		cis_counter_inc(m->c_lists_ahead);

	pthread_mutex_lock(&m->flight_lock);
	/* Not a list-ahead's failure: a guess, which a request retries. */
	if (depth == 0 && !dir->listed_ns && rc != -ECANCELED && rc != -EWOULDBLOCK)
		do_note_first_listing(m, dir, rc, &f->em);
	if (!rc) {
		mt->refresh_failing = false;
	} else if (dir->listed_ns && rc != -ECANCELED) {
		mt->refresh_failing = true;
		mt->refresh_retry_ms = cis_mono_ms() + REFRESH_RETRY_MS;
		cis_log_limited(CIS_LOG_WARN, "ns-refresh", 10,
		                "directory refresh failed: its mount's listed directories are "
		                "served as last listed",
		                "dir=%llu retry_in_ms=%d: %s", (unsigned long long)dir->id,
		                REFRESH_RETRY_MS, cis_errmsg_or(&f->em, rc));
	}
	if (rc && stale_ok)
		rc = 0;
	for (mst_flight **pp = &m->flights; *pp; pp = &(*pp)->next)
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	f->done = true;
	f->rc = rc;
	if (rc && em)
		*em = f->em;
	pthread_cond_broadcast(&m->flight_cond);
	if (--f->refs == 0)
		free(f);
	pthread_mutex_unlock(&m->flight_lock);
	if (rc == 0)
		mst_listahead_queue(m->listahead, nd.ids, nd.n, depth + 1);
	free(nd.ids);
	return rc;
}

int mst_ns_ensure_listed(mst_master *m, const mst_inode *dir, bool force, cis_errmsg *em)
{
	return ensure_listed(m, dir, force, 0, em);
}

int mst_ns_list_ahead(mst_master *m, const mst_inode *dir, int depth, cis_errmsg *em)
{
	return ensure_listed(m, dir, false, depth, em);
}

/* The file's inode, if it still is a file of version stale. */
static bool still_stale(const mst_inode *ino, const char *stale)
{
	return ino->type == MST_FILE && ino->mount_id != 0 && strcmp(ino->version, stale) == 0;
}

/* Store what the store says of file id, if it still holds version stale. */
static int store_file_stat(mst_master *m, uint64_t id, const char *stale,
                           const struct cis_ufs_stat *st, cis_errmsg *em)
{
	MDB_txn *txn;
	mst_inode *ino = malloc(sizeof(*ino));
	int err = ino ? mst_txn_begin(m, true, &txn) : -ENOMEM;
	if (err) {
		free(ino);
		return cis_fail(em, err, "inode %llu: %s", (unsigned long long)id,
		                cis_strerror(err));
	}
	err = mst_inode_get(m, txn, id, ino);
	if (err || !still_stale(ino, stale)) {
		mdb_txn_abort(txn); /* gone or refreshed meanwhile: nothing to store */
		free(ino);
		return 0;
	}
	ino->size = st->size;
	ino->mtime_ns = st->mtime_ns;
	if (st->mode)
		ino->mode = st->mode & 07777;
	snprintf(ino->version, sizeof(ino->version), "%s", st->version);
	ino->listed_ns = cis_wall_ns(); /* a listing begun before now must not undo it */
	err = mst_inode_put(m, txn, ino);
	if (err)
		mdb_txn_abort(txn);
	else
		err = mst_txn_commit(txn);
	free(ino);
	if (err)
		return cis_fail(em, err, "storing inode %llu: %s", (unsigned long long)id,
		                cis_strerror(err));
	return 0;
}

int mst_ns_refresh_file(mst_master *m, uint64_t id, const char *stale_version, cis_errmsg *em)
{
	mst_inode *ino = malloc(sizeof(*ino));
	if (!ino)
		return -ENOMEM;
	int err = mst_ns_getattr(m, id, ino, em);
	if (err || !still_stale(ino, stale_version))
		goto out;
	mst_mount *mt = mst_mount_find(m, ino->mount_id);
	if (!mt || !mt->ufs)
		goto out; /* unmounted meanwhile */
	if (mst_ns_wait_refused_now()) {
		err = -EWOULDBLOCK;
		goto out;
	}
	struct cis_ufs_stat st;
	err = cis_ufs_stat(mt->ufs, ino->key, &st, em);
	cis_counter_inc(m->c_store_stats);
	if (err == 0 && !st.is_dir && st.version[0]) {
		err = store_file_stat(m, id, stale_version, &st, em);
	} else if (err == 0 || err == -ENOENT) {
		/* Gone, or another kind of entry now: its directory's listing
		 * drops or replaces the inode. */
		uint64_t parent = ino->parent;
		err = mst_ns_getattr(m, parent, ino, em);
		if (!err)
			err = mst_ns_ensure_listed(m, ino, true, em);
	}
out:
	free(ino);
	return err;
}

int mst_ns_lookup(mst_master *m, uint64_t parent, const char *name, mst_inode *out, cis_errmsg *em)
{
	int err = mst_name_check(name, strlen(name), em);
	if (err)
		return err;
	cis_counter_inc(m->c_lookups);
	err = mst_ns_getattr(m, parent, out, em);
	if (err)
		return err;
	if (out->type != MST_DIR)
		return cis_fail(em, -ENOTDIR, "inode %llu: not a directory",
		                (unsigned long long)parent);
	err = mst_ns_ensure_listed(m, out, false, em);
	if (err)
		return err;
	MDB_txn *txn;
	uint64_t id;
	err = mst_txn_begin(m, false, &txn);
	if (err)
		return cis_fail(em, err, "lmdb: %s", cis_strerror(err));
	err = mst_child_get(m, txn, parent, name, &id);
	if (!err)
		err = mst_inode_get(m, txn, id, out);
	mdb_txn_abort(txn);
	if (err == -ENOENT)
		return cis_fail(em, -ENOENT, "%s: no such file or directory", name);
	if (err)
		return cis_fail(em, err, "%s: %s", name, cis_strerror(err));
	return 0;
}

int mst_ns_resolve(mst_master *m, const char *path, mst_inode *out, cis_errmsg *em)
{
	int err = mst_path_check(path, strlen(path), em);
	if (err)
		return err;
	err = mst_ns_getattr(m, MST_ROOT_INO, out, em);
	const char *p = path;
	while (!err && *p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = strchr(p, '/');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		char comp[MST_NAME_MAX + 1];
		memcpy(comp, p, l);
		comp[l] = 0;
		cis_errmsg lem = {{0}};
		err = mst_ns_lookup(m, out->id, comp, out, &lem);
		if (err == -ENOENT)
			return cis_fail(em, err, "no such file or directory");
		if (err == -ENOTDIR)
			return cis_fail(em, err, "not a directory");
		if (err)
			return cis_fail(em, err, "%s", cis_errmsg_or(&lem, err));
		p += l;
	}
	return err;
}

/* Append the components of s (a path or a link's text) to the path in
 * out (len bytes, "" for the root), "." skipped and ".." going up: -EINVAL
 * when it would go above the root, -ENAMETOOLONG past MST_PATH_MAX. */
static int path_append(char *out, size_t *len, const char *s)
{
	while (*s) {
		while (*s == '/')
			s++;
		size_t cl = strcspn(s, "/");
		if (cl == 0)
			break;
		if (cl == 2 && s[0] == '.' && s[1] == '.') {
			if (*len == 0)
				return -EINVAL;
			while (*len > 0 && out[*len - 1] != '/')
				(*len)--;
			(*len)--; /* the slash */
		} else if (!(cl == 1 && s[0] == '.')) {
			if (*len + 1 + cl > MST_PATH_MAX)
				return -ENAMETOOLONG;
			out[(*len)++] = '/';
			memcpy(out + *len, s, cl);
			*len += cl;
		}
		s += cl;
	}
	out[*len] = 0;
	return 0;
}

/* The link's text as a path in the namespace: relative to dir (the link's
 * directory), or, absolute, below the file:// root of the link's mount,
 * then the rest of the path after the link. */
static int link_path(mst_master *m, const mst_inode *link, const char *dir, size_t dlen,
                     const char *rest, char *out, cis_errmsg *em)
{
	mst_mount *mt = mst_mount_find(m, link->mount_id);
	const char *t = link->link_target;
	size_t len = 0;
	int err;
	if (!mt)
		return cis_fail(em, -ENOENT, "link '%s' is in no mount", link->name);
	if (t[0] == '/') {
		/* the store's own absolute path: only its root's files are ours */
		const char *root = strncmp(mt->uri, "file://", 7) ? NULL : mt->uri + 7;
		size_t rl = root ? strlen(root) : 0, tl = 0;
		char abs[MST_PATH_MAX + 1];
		while (rl > 0 && root[rl - 1] == '/')
			rl--;                   /* "file:///" is the whole tree: rl 0 */
		err = path_append(abs, &tl, t); /* "/data/../data//x" is "/data/x" */
		if (err == -ENAMETOOLONG)
			return cis_fail(em, err, "link '%s': path over %d bytes", link->name,
			                MST_PATH_MAX);
		if (err || !root || strncmp(abs, root, rl) || (abs[rl] && abs[rl] != '/'))
			return cis_fail(em, -EXDEV, "link '%s' -> '%s' points outside its mount %s",
			                link->name, t, mt->path);
		err = path_append(out, &len, mt->path);
		if (!err)
			err = path_append(out, &len, abs + rl);
	} else {
		memcpy(out, dir, dlen);
		len = dlen;
		out[len] = 0;
		err = path_append(out, &len, t);
	}
	if (!err)
		err = path_append(out, &len, rest);
	if (err == -ENAMETOOLONG)
		return cis_fail(em, err, "link '%s': path over %d bytes", link->name, MST_PATH_MAX);
	size_t ml = strlen(mt->path);
	if (err || (ml > 1 && (strncmp(out, mt->path, ml) || (out[ml] && out[ml] != '/'))))
		return cis_fail(em, -EXDEV, "link '%s' -> '%s' leads out of its mount %s",
		                link->name, t, mt->path);
	if (!len)
		strcpy(out, "/");
	return 0;
}

int mst_ns_realpath(mst_master *m, const char *path, bool follow_last, char out[MST_PATH_MAX + 1],
                    mst_inode *ino_out, cis_errmsg *em)
{
	char cur[MST_PATH_MAX + 1], next[MST_PATH_MAX + 1];
	mst_inode *ino = malloc(sizeof(*ino));
	int err = mst_path_check(path, strlen(path), em);
	if (!ino)
		return -ENOMEM;
	snprintf(cur, sizeof(cur), "%s", path);
	size_t cl = strlen(cur);
	if (cl > 1 && cur[cl - 1] == '/') {
		cur[cl - 1] = 0; /* "/a/" is "/a", and a link there is followed */
		follow_last = true;
	}
	for (int hops = 0; !err;) {
		err = mst_ns_getattr(m, MST_ROOT_INO, ino, em);
		const char *p = cur;
		bool followed = false;
		while (!err && !followed && *p) {
			while (*p == '/')
				p++;
			if (!*p)
				break;
			size_t l = strcspn(p, "/");
			char comp[MST_NAME_MAX + 1];
			if (l > MST_NAME_MAX) { /* a link's text can hold any name */
				err = cis_fail(em, -ENAMETOOLONG, "%s: a component over %d bytes",
				               path, MST_NAME_MAX);
				break;
			}
			memcpy(comp, p, l);
			comp[l] = 0;
			size_t dlen = (size_t)(p - cur) - 1; /* the directory, without its slash */
			cis_errmsg lem = {{0}};
			err = mst_ns_lookup(m, ino->id, comp, ino, &lem);
			if (err == -ENOENT)
				err = cis_fail(em, err, "no such file or directory: %.*s",
				               (int)(p - cur + (ptrdiff_t)l), cur);
			else if (err == -ENOTDIR)
				err = cis_fail(em, err, "not a directory: %.*s", (int)(p - cur - 1),
				               cur);
			else if (err)
				err = cis_fail(em, err, "%s", cis_errmsg_or(&lem, err));
			p += l;
			while (*p == '/')
				p++;
			if (err || ino->type != MST_LINK || (!*p && !follow_last))
				continue;
			if (++hops > MST_LINK_HOPS) {
				err = cis_fail(em, -ELOOP, "%s: more than %d links on the way",
				               path, MST_LINK_HOPS);
				break;
			}
			err = link_path(m, ino, cur, dlen, p, next, em);
			if (!err)
				memcpy(cur, next, sizeof(cur));
			followed = true;
		}
		if (!err && !followed)
			break;
	}
	if (!err) {
		snprintf(out, MST_PATH_MAX + 1, "%s", cur);
		if (ino_out)
			*ino_out = *ino;
	}
	free(ino);
	return err;
}

/* The entries grow as they come (an inode is 4.5 KB, mostly room for a
 * key: a page of 1024 allocated whole cost 4.6 MB and its page faults for
 * every directory of a few files). */
struct rd_ctx {
	mst_master *m;
	MDB_txn *txn;
	mst_inode *ents;
	size_t n, cap, max;
};

static int rd_one(void *arg, const char *name, size_t nlen, uint64_t id)
{
	struct rd_ctx *c = arg;
	(void)name;
	(void)nlen;
	if (c->n == c->max)
		return 1;
	if (c->n == c->cap) {
		size_t cap = c->cap * 2 < c->max ? c->cap * 2 : c->max;
		mst_inode *e = realloc(c->ents, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		c->ents = e;
		c->cap = cap;
	}
	int err = mst_inode_get(c->m, c->txn, id, &c->ents[c->n]);
	if (err == -ENOENT)
		return 0;
	if (err)
		return err;
	c->n++;
	return 0;
}

int mst_ns_readdir(mst_master *m, uint64_t dir_id, uint64_t cookie, size_t max, mst_inode **entries,
                   size_t *n, uint64_t *next_cookie, bool *eof, cis_errmsg *em)
{
	mst_inode *dir = malloc(sizeof(*dir));
	mst_inode *after = NULL;
	MDB_txn *txn;
	int err;
	*entries = NULL;
	*n = 0;
	if (!dir)
		return -ENOMEM;
	if (max == 0 || max > 4096)
		max = 1024;
	err = mst_ns_getattr(m, dir_id, dir, em);
	if (err)
		goto out;
	if (dir->type != MST_DIR) {
		err = cis_fail(em, -ENOTDIR, "inode %llu: not a directory",
		               (unsigned long long)dir_id);
		goto out;
	}
	err = mst_ns_ensure_listed(m, dir, false, em);
	if (err)
		goto out;
	size_t cap = max + 1 < 32 ? max + 1 : 32;
	struct rd_ctx c = {m, NULL, malloc(cap * sizeof(mst_inode)), 0, cap, max + 1};
	if (!c.ents) {
		err = -ENOMEM;
		goto out;
	}
	err = mst_txn_begin(m, false, &txn);
	if (err) {
		free(c.ents);
		goto out;
	}
	c.txn = txn;
	if (cookie) {
		/* The cookie is the id of the last entry returned: resume after
		 * its name. */
		after = malloc(sizeof(*after));
		err = after ? mst_inode_get(m, txn, cookie, after) : -ENOMEM;
		if (err == -ENOENT || (!err && after->parent != dir_id))
			err = cis_fail(em, -ESTALE,
			               "readdir cookie no longer valid: start the listing again");
	}
	if (!err)
		err = mst_children_each(m, txn, dir_id, after ? after->name : NULL, rd_one, &c);
	mdb_txn_abort(txn);
	if (err < 0) {
		free(c.ents);
		goto out;
	}
	err = 0;
	*eof = c.n <= max;
	if (c.n > max)
		c.n = max;
	*entries = c.ents;
	*n = c.n;
	*next_cookie = c.n ? c.ents[c.n - 1].id : cookie;
out:
	free(after);
	free(dir);
	return err;
}

/* The inode a sync of path starts from, links followed. A component the
 * namespace does not hold may be new in the store: the deepest directory
 * on the way is listed again (each one once) before the path is taken for
 * missing. */
static int sync_resolve(mst_master *m, const char *path, mst_inode *ino, cis_errmsg *em)
{
	char *real = malloc(MST_PATH_MAX + 1), *up = NULL;
	uint64_t relisted = 0;
	int err;
	if (!real)
		return -ENOMEM;
	/* bounded: a store changing under it could send it back and forth */
	for (int tries = 0;
	     (err = mst_ns_realpath(m, path, true, real, ino, em)) == -ENOENT && tries < 64;
	     tries++) {
		free(up);
		up = strdup(path);
		if (!up) {
			err = -ENOMEM;
			break;
		}
		cis_errmsg up_em = {{0}};
		int rc = -ENOENT;
		for (char *slash; rc == -ENOENT && (slash = strrchr(up, '/'));) {
			bool root = slash == up;
			slash[root ? 1 : 0] = 0;
			rc = mst_ns_realpath(m, up, true, real, ino, &up_em);
			if (root)
				break;
		}
		if (rc || ino->type != MST_DIR || ino->mount_id == 0 || ino->id == relisted)
			break; /* the path is not in the store either */
		relisted = ino->id;
		rc = mst_ns_ensure_listed(m, ino, true, &up_em);
		if (rc) {
			*em = up_em;
			err = rc;
			break;
		}
	}
	free(up);
	free(real);
	return err;
}

/* After a sync listed the store directory dir and found it empty: whether
 * it is still in the store. An empty listing is also what a directory
 * removed from the store gives (S3 has no empty prefixes; a file:// one
 * that is gone lists as empty), and only its parent's listing drops it:
 * that is asked for here, or the directory would stay until the parent
 * is listed again (never, without a sync interval). 1 when it is gone. */
static int sync_dir_gone(mst_master *m, const mst_inode *dir, cis_errmsg *em)
{
	mst_inode *ents, *up;
	size_t n;
	uint64_t next;
	bool eof;
	int err;

	if (dir->mount_point || !dir->parent || dir->type != MST_DIR)
		return 0;
	err = mst_ns_readdir(m, dir->id, 0, 1, &ents, &n, &next, &eof, em);
	if (err)
		return err;
	free(ents);
	if (n)
		return 0;
	up = malloc(sizeof(*up));
	if (!up)
		return -ENOMEM;
	err = mst_ns_getattr(m, dir->parent, up, em);
	if (!err && up->mount_id == dir->mount_id)
		err = mst_ns_ensure_listed(m, up, true, em);
	free(up);
	if (err)
		return err;
	mst_inode *again = malloc(sizeof(*again));
	if (!again)
		return -ENOMEM;
	cis_errmsg gone_em = {{0}};
	err = mst_ns_getattr(m, dir->id, again, &gone_em);
	free(again);
	return err == -ENOENT ? 1 : err;
}

int mst_ns_sync(mst_master *m, const char *path, bool recursive, uint64_t *dirs, cis_errmsg *em)
{
	mst_inode *ino = malloc(sizeof(*ino));
	uint64_t *todo = NULL;
	size_t nt = 0, cap = 0;
	int err;
	*dirs = 0;
	if (!ino)
		return -ENOMEM;
	err = sync_resolve(m, path, ino, em);
	if (err)
		goto out;
	if (ino->type != MST_DIR) {
		err = mst_ns_getattr(m, ino->parent, ino, em);
		if (err)
			goto out;
	}
	if (ino->mount_id == 0 && !recursive) {
		goto out; /* nothing from a store here */
	}
	todo = malloc(sizeof(*todo) * 64);
	if (!todo) {
		err = -ENOMEM;
		goto out;
	}
	cap = 64;
	todo[nt++] = ino->id;
	const uint64_t top = ino->id;
	while (nt) {
		uint64_t id = todo[--nt];
		err = mst_ns_getattr(m, id, ino, em);
		if (err == -ENOENT) {
			err = 0; /* vanished in the parent's re-listing */
			continue;
		}
		if (err)
			break;
		if (ino->mount_id) {
			err = mst_ns_ensure_listed(m, ino, true, em);
			if (err)
				break;
			(*dirs)++;
			if (id == top && (err = sync_dir_gone(m, ino, em)) != 0) {
				if (err == 1)
					err = cis_fail(em, -ENOENT, "%s: no longer in the store",
					               path);
				break;
			}
		}
		if (!recursive)
			break;
		/* Directories below that were loaded before (or mount points). */
		mst_inode *ents;
		size_t n;
		uint64_t cookie = 0, next = 0;
		bool eof = false;
		int restarts = 0;
		while (!err && !eof) {
			err = mst_ns_readdir(m, id, cookie, 1024, &ents, &n, &next, &eof, em);
			if (err == -ESTALE && cookie && restarts++ < 3) {
				/* A listing meanwhile dropped the entry the cookie
				 * named: from the start again (a directory pushed
				 * twice is only listed twice). */
				err = 0;
				cookie = 0;
				continue;
			}
			if (err)
				break;
			for (size_t i = 0; i < n; i++) {
				/* and the plain directories that lead to mounts */
				if (ents[i].type != MST_DIR ||
				    (ents[i].listed_ns == 0 && !ents[i].mount_point &&
				     ents[i].mount_id != 0))
					continue;
				if (nt == cap) {
					uint64_t *t = realloc(todo, cap * 2 * sizeof(*t));
					if (!t) {
						err = -ENOMEM;
						break;
					}
					todo = t;
					cap *= 2;
				}
				todo[nt++] = ents[i].id;
			}
			free(ents);
			cookie = next;
		}
	}
out:
	free(todo);
	free(ino);
	return err;
}
