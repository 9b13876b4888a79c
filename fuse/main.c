/* cistern-fuse: the cluster as a local, read-only folder. FUSE low-level
 * API, multi-threaded session loop with clone_fd; metadata from the master
 * through the client caches, data from the workers (short-circuit when the
 * worker is on this host) with the store as the last resort. */
#include "client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "cistern/http.h"
#include "cistern/log.h"
#include "cistern/time.h"
#include "cistern/version.h"

#define MAX_IO   (1u << 20) /* max_read, max_write, max_readahead */
#define DIR_PAGE 1024

static fcl *req_fcl(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static uint64_t to_master(const fcl *c, fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? __atomic_load_n(&c->root_ino, __ATOMIC_RELAXED)
	                           : (uint64_t)ino;
}

static fuse_ino_t to_fuse(const fcl *c, uint64_t ino)
{
	return ino == __atomic_load_n(&c->root_ino, __ATOMIC_RELAXED) ? FUSE_ROOT_ID
	                                                              : (fuse_ino_t)ino;
}

/* A code for the kernel: errno values pass, Cistern codes (the master or a
 * store failed) and failures to reach the master (ECONNREFUSED from a
 * stat reads as a bug in the program) read as EIO. */
static int kernel_err(int rc)
{
	if (rc >= 0 || cis_rpc_unreachable(rc))
		return EIO;
	return -rc < CIS_E_FIRST ? -rc : EIO;
}

/* The error for an op on node ino: an inode the master no longer has (its
 * name is another object now) is ESTALE, which makes the kernel look the
 * path up again, where ENOENT failed a name that exists (getattr, access,
 * readlink alike). */
static int node_err(fuse_ino_t ino, int rc)
{
	return rc == -ENOENT && ino != FUSE_ROOT_ID ? ESTALE : kernel_err(rc);
}

static void fill_stat(const fcl *c, const fcl_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = to_fuse(c, a->ino);
	st->st_mode = (a->is_dir ? S_IFDIR : a->is_link ? S_IFLNK : S_IFREG) | (a->mode & 07777);
	st->st_nlink = a->nlink;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_size = (off_t)a->size;
	st->st_blksize = MAX_IO;
	st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
	/* Floored: a time before 1970 with a fraction of a second has a
	 * negative remainder, which tv_nsec must not be. */
	int64_t sec = a->mtime_ns / 1000000000, nsec = a->mtime_ns % 1000000000;
	if (nsec < 0) {
		sec--;
		nsec += 1000000000;
	}
	st->st_mtim.tv_sec = sec;
	st->st_mtim.tv_nsec = nsec;
	st->st_atim = st->st_ctim = st->st_mtim;
}

/* What the kernel may keep an answer for: the timeout, or less when the
 * answer came from the client's cache with less than that left (left:
 * seconds, -1 for none cached, which is a fresh answer). */
static double kernel_ttl(double timeout, double left)
{
	return left >= 0 && left < timeout ? left : timeout;
}

/* left: what the cached name and attributes had left (fcl_left). */
static void fill_entry(const fcl *c, const fcl_attr *a, fcl_left left, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = to_fuse(c, a->ino);
	e->generation = 1;
	fill_stat(c, a, &e->attr);
	e->attr_timeout = kernel_ttl(c->opts->attr_timeout, left.attr);
	e->entry_timeout = kernel_ttl(c->opts->entry_timeout, left.entry);
}

static void log_err(const char *op, uint64_t ino, int rc, const cis_errmsg *em)
{
	if (rc == -ENOENT || rc == -ENOTDIR || rc == -ENAMETOOLONG || rc == -EINVAL)
		return;
	char cause[32];
	snprintf(cause, sizeof(cause), "op:%s", op);
	cis_log_limited(CIS_LOG_WARN, cause, 10, "request failed", "op=%s ino=%llu err=\"%s\"", op,
	                (unsigned long long)ino, cis_errmsg_or(em, rc));
}

/* ---- metadata ---- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	conn->max_read = MAX_IO; /* must match the max_read mount option */
	conn->max_write = MAX_IO;
	conn->max_readahead = MAX_IO;
	/* Readahead requests are background requests: the default (12 in
	 * flight, congested at 9) keeps a sequential reader at about one
	 * outstanding request per file. */
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	/* Replies are memory buffers (read.c reads the bytes before it
	 * answers, so that a failed read can still fail over): writev copies
	 * them once, cheaper than vmsplice + splice. */
	conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
	if (conn->capable & FUSE_CAP_READDIRPLUS) {
		/* Always plus: ls -l of a big directory is one listing. */
		conn->want |= FUSE_CAP_READDIRPLUS;
		conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	}
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	/* A link's text never changes under one inode (the master gives a
	 * changed link a new one): the kernel may keep it. */
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fcl *c = req_fcl(req);
	fcl_attr a;
	cis_errmsg em = {{0}};
	fcl_left left;
	int rc = fcl_meta_lookup(c->meta, to_master(c, parent), name, &a, &left, &em);
	struct fuse_entry_param e;
	if (rc == -ENOENT) {
		/* A negative entry the kernel may keep for negative_timeout. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = kernel_ttl(c->opts->negative_timeout, left.entry);
		fuse_reply_entry(req, &e);
		return;
	}
	if (rc) {
		log_err("lookup", parent, rc, &em);
		fuse_reply_err(req, kernel_err(rc));
		return;
	}
	fill_entry(c, &a, left, &e);
	if (fcl_inodes_ref(c->inodes, a.ino)) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (fuse_reply_entry(req, &e))
		fcl_inodes_forget(c->inodes, a.ino, 1); /* the kernel never saw it */
}

/* The kernel dropped nlookup references. The open cache keeps the file:
 * it is bounded by itself, and the kernel forgets inodes whenever it
 * drops caches, which must not send every later open to the master. */
static void forget(fcl *c, fuse_ino_t ino, uint64_t nlookup)
{
	(void)fcl_inodes_forget(c->inodes, to_master(c, ino), nlookup);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fcl *c = req_fcl(req);
	forget(c, ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	fcl *c = req_fcl(req);
	for (size_t i = 0; i < count; i++)
		forget(c, forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	fcl *c = req_fcl(req);
	fcl_attr a;
	cis_errmsg em = {{0}};
	fcl_left left;
	int rc = fcl_meta_getattr(c->meta, to_master(c, ino), &a, &left, &em);
	if (rc) {
		log_err("getattr", ino, rc, &em);
		fuse_reply_err(req, node_err(ino, rc));
		return;
	}
	struct stat st;
	fill_stat(c, &a, &st);
	fuse_reply_attr(req, &st, kernel_ttl(c->opts->attr_timeout, left.attr));
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	fcl *c = req_fcl(req);
	cis_errmsg em = {{0}};
	char *target = NULL;
	int rc = fcl_master_readlink(c, to_master(c, ino), &target, &em);
	if (rc) {
		log_err("readlink", ino, rc, &em);
		fuse_reply_err(req, node_err(ino, rc));
		return;
	}
	fuse_reply_readlink(req, target);
	free(target);
}

/* Size and free space: the cluster's cache (df shows how much of the
 * dataset fits; the store behind it has no size to give). */
static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	uint64_t capacity, used;
	fcl_cluster_space(req_fcl(req), &capacity, &used);
	struct statvfs sv;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = MAX_IO;
	sv.f_frsize = 4096;
	sv.f_blocks = capacity / sv.f_frsize;
	sv.f_bfree = used < capacity ? (capacity - used) / sv.f_frsize : 0;
	sv.f_bavail = sv.f_bfree;
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

/* Without default_permissions the kernel takes this answer: writes are
 * refused (read-only mount), execution needs an execute bit (a script
 * without one passed test -x and then failed to run). */
static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	fcl *c = req_fcl(req);
	if (mask & W_OK) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (!(mask & X_OK)) {
		fuse_reply_err(req, 0);
		return;
	}
	fcl_attr a;
	cis_errmsg em = {{0}};
	int rc = fcl_meta_getattr(c->meta, to_master(c, ino), &a, NULL, &em);
	if (rc) {
		log_err("access", ino, rc, &em);
		fuse_reply_err(req, node_err(ino, rc));
		return;
	}
	fuse_reply_err(req, (a.mode & 0111) ? 0 : EACCES);
}

/* ---- directories ---- */

typedef struct dent {
	char *name;
	fcl_attr a;
	uint64_t ticket; /* of the listing page a came from (fcl_meta_ticket) */
} dent;

typedef struct fcl_dir {
	pthread_mutex_t lock;
	bool loaded;
	uint64_t loaded_ns; /* monotonic: when the listing was taken */
	dent *ents;
	size_t n, cap;
} fcl_dir;

static void dir_clear(fcl_dir *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->ents[i].name);
	free(d->ents);
	d->ents = NULL;
	d->n = d->cap = 0;
	d->loaded = false;
}

/* Hand a directory's files and subdirectories, in order, to the directory
 * readahead. */
static void note_listing(fcl *c, uint64_t dino, const fcl_dir *d)
{
	fcl_da_file *files = malloc((d->n ? d->n : 1) * sizeof(*files));
	uint64_t *subdirs = malloc((d->n ? d->n : 1) * sizeof(*subdirs));
	size_t n = 0, nsub = 0;

	if (files && subdirs) {
		for (size_t i = 0; i < d->n; i++)
			if (d->ents[i].a.is_dir)
				subdirs[nsub++] = d->ents[i].a.ino;
			else if (!d->ents[i].a.is_link)
				files[n++] = (fcl_da_file){d->ents[i].a.ino, d->ents[i].a.size};
		fcl_da_listed(c->da, dino, files, n, subdirs, nsub);
	}
	free(files);
	free(subdirs);
}

/* The whole listing, in pages of DIR_PAGE; a listing that went stale under
 * us (-ESTALE: the directory was re-synced) starts again. -EFBIG once it
 * holds more than max entries (those pages were cached all the same). */
static int dir_load(fcl *c, uint64_t dino, fcl_dir *d, size_t max, cis_errmsg *em)
{
	int rc = -ESTALE;
	for (int attempt = 0; attempt < 3 && rc == -ESTALE; attempt++) {
		dir_clear(d);
		uint64_t cookie = 0;
		for (;;) {
			Cis__ReadDirReply *rep = NULL;
			rc = fcl_master_readdir(c, dino, cookie, DIR_PAGE, &rep, em);
			if (rc)
				break;
			uint64_t ticket = fcl_meta_ticket(c->meta); /* the page's arrival */
			if (d->n + rep->n_entries > d->cap) {
				size_t cap = d->cap ? d->cap * 2 : 64;
				while (cap < d->n + rep->n_entries)
					cap *= 2;
				dent *g = realloc(d->ents, cap * sizeof(*g));
				if (!g) {
					cis__read_dir_reply__free_unpacked(rep, NULL);
					rc = -ENOMEM;
					break;
				}
				d->ents = g;
				d->cap = cap;
			}
			for (size_t i = 0; i < rep->n_entries && rc == 0; i++) {
				const Cis__Inode *in = rep->entries[i];
				if (!in->name || !in->name[0] || strchr(in->name, '/'))
					continue;
				dent *e = &d->ents[d->n];
				e->name = strdup(in->name);
				if (!e->name) {
					rc = -ENOMEM;
					break;
				}
				fcl_attr_from_inode(in, &e->a);
				e->ticket = ticket;
				fcl_meta_put(c->meta, dino, e->name, &e->a, ticket);
				d->n++;
			}
			bool done = rep->eof || rep->n_entries == 0;
			cookie = rep->next_cookie;
			cis__read_dir_reply__free_unpacked(rep, NULL);
			if (rc == 0 && !done && d->n > max)
				rc = cis_fail(em, -EFBIG, "listing: over %zu entries", max);
			if (rc || done)
				break;
		}
	}
	d->loaded = rc == 0;
	d->loaded_ns = cis_mono_ns();
	if (d->loaded)
		note_listing(c, dino, d);
	return rc;
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	fcl_dir *d = calloc(1, sizeof(*d));
	if (!d) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_init(&d->lock, NULL);
	fi->fh = (uintptr_t)d;
	fi->cache_readdir = 0;
	if (fuse_reply_open(req, fi)) {
		pthread_mutex_destroy(&d->lock);
		free(d);
	}
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi, bool plus)
{
	fcl *c = req_fcl(req);
	fcl_dir *d = (fcl_dir *)(uintptr_t)fi->fh;
	cis_errmsg em = {{0}};
	char *buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&d->lock);
	int rc = 0;
	if (!d->loaded || off == 0)
		rc = dir_load(c, to_master(c, ino), d, SIZE_MAX, &em);
	if (rc) {
		pthread_mutex_unlock(&d->lock);
		log_err("readdir", ino, rc, &em);
		free(buf);
		fuse_reply_err(req, kernel_err(rc));
		return;
	}
	size_t used = 0;
	/* The inodes this page took a lookup reference on, to give back if
	 * the reply fails (an interrupted request): the kernel never saw
	 * them, so it will never forget them. */
	uint64_t *refd = NULL;
	size_t nrefd = 0, caprefd = 0;
	for (size_t i = (size_t)(off < 0 ? 0 : off); i < d->n; i++) {
		const dent *e = &d->ents[i];
		size_t sz;
		if (plus) {
			/* The listing was loaded at the handle's first read; a
			 * later answer (a getattr since, an open of a grown
			 * file) may have given the kernel newer attributes,
			 * which these must not undo. */
			struct fuse_entry_param ep;
			fcl_attr a = e->a;
			int newer = fcl_meta_newer_attr(c->meta, e->a.ino, e->ticket, &a);
			/* The name as old as the listing: a reader that takes
			 * its pages slowly must not get it for a whole timeout
			 * past it. */
			double age = (double)(cis_mono_ns() - d->loaded_ns) / 1e9;
			double entry_left =
			    c->opts->entry_timeout > age ? c->opts->entry_timeout - age : 0;
			fill_entry(c, &a,
			           (fcl_left){entry_left, fcl_meta_attr_left(c->meta, a.ino)}, &ep);
			if (newer < 0)
				ep.attr_timeout = 0; /* forgotten: the kernel asks again */
			sz = fuse_add_direntry_plus(req, buf + used, size - used, e->name, &ep,
			                            (off_t)i + 1);
			if (sz > size - used)
				break;
			if (nrefd == caprefd) {
				size_t nc = caprefd ? caprefd * 2 : 64;
				uint64_t *nr = realloc(refd, nc * sizeof(*nr));
				if (!nr)
					break; /* ENOMEM: the kernel gets a shorter page */
				refd = nr;
				caprefd = nc;
			}
			if (fcl_inodes_ref(c->inodes, e->a.ino))
				break; /* ENOMEM: the kernel gets a shorter page */
			refd[nrefd++] = e->a.ino;
		} else {
			struct stat st;
			fill_stat(c, &e->a, &st);
			sz = fuse_add_direntry(req, buf + used, size - used, e->name, &st,
			                       (off_t)i + 1);
			if (sz > size - used)
				break;
		}
		used += sz;
	}
	pthread_mutex_unlock(&d->lock);
	if (fuse_reply_buf(req, buf, used))
		for (size_t i = 0; i < nrefd; i++)
			fcl_inodes_forget(c->inodes, refd[i], 1);
	free(refd);
	free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	fcl_dir *d = (fcl_dir *)(uintptr_t)fi->fh;
	dir_clear(d);
	pthread_mutex_destroy(&d->lock);
	free(d);
	fuse_reply_err(req, 0);
}

/* The directory refresh thread (dirfresh.c decides which): a listing fills
 * the name and attribute caches and the directory readahead, as a readdir
 * does. A directory of more names than half the caches hold (or than
 * 262,144) is left to lookups: listing it would only push the rest out. */
#define REFRESH_MAX(cache) ((cache) / 2 < (1u << 18) ? (cache) / 2 : (1u << 18))
static void *refresh_main(void *arg)
{
	fcl *c = arg;
	uint64_t dino;
	while (fcl_df_next(c->df, &dino) == 0) {
		fcl_dir d = {.loaded = false};
		cis_errmsg em = {{0}};
		int rc = dir_load(c, dino, &d, REFRESH_MAX(c->opts->meta_cache), &em);
		if (rc == 0)
			cis_counter_inc(c->stats.dir_refreshes);
		else if (rc == -EFBIG)
			fcl_df_too_big(c->df, dino);
		else
			cis_log_limited(CIS_LOG_WARN, "dir-refresh", 30, "cannot list a directory",
			                "ino=%llu err=\"%s\"", (unsigned long long)dino,
			                cis_errmsg_or(&em, rc));
		dir_clear(&d);
	}
	return NULL;
}

/* The metadata cache's lookups: a name found counts against its
 * directory. */
static int lookup_counted(void *ctx, uint64_t parent, const char *name, fcl_attr *out,
                          cis_errmsg *em)
{
	fcl *c = ctx;
	int rc = fcl_master_lookup(c, parent, name, out, em);
	if (rc == 0)
		fcl_df_missed(c->df, parent, cis_mono_ns());
	return rc;
}

static void refresh_start(fcl *c)
{
	/* in the metadata cache's own unit, whole milliseconds */
	uint64_t entry_ms = (uint64_t)(c->opts->entry_timeout * 1000);
	if (fcl_df_new(entry_ms * 1000000 / 2, &c->df))
		cis_die("out of memory at start-up");
	if (pthread_create(&c->df_thread, NULL, refresh_main, c) == 0) {
		c->df_started = true;
		return;
	}
	cis_warn("no directory refresh thread: names are looked up one by one", NULL);
	fcl_df_free(c->df);
	c->df = NULL;
}

static void refresh_stop(fcl *c)
{
	if (!c->df_started)
		return;
	fcl_df_stop(c->df);
	pthread_join(c->df_thread, NULL);
}

/* ---- files ---- */

static void refuse_write(fuse_req_t req, const char *op, fuse_ino_t ino)
{
	fcl *c = req_fcl(req);
	cis_counter_inc(c->stats.erofs);
	cis_log_limited(CIS_LOG_WARN, "erofs", 10, "write refused: the mount is read-only",
	                "op=%s ino=%llu", op, (unsigned long long)ino);
	fuse_reply_err(req, EROFS);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fcl *c = req_fcl(req);
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & (O_TRUNC | O_CREAT))) {
		refuse_write(req, "open-for-write", ino);
		return;
	}
	uint64_t mino = to_master(c, ino);
	fcl_file *f;
	bool hit;
	cis_errmsg em = {{0}};
	int rc = fcl_master_open(c, mino, &f, &hit, &em);
	if (rc) {
		log_err("open", ino, rc, &em);
		fuse_reply_err(req, kernel_err(rc));
		return;
	}
	cis_counter_inc(c->stats.opens);
	if (hit)
		cis_counter_inc(c->stats.open_cache_hits);
	/* Keep the kernel's pages only while the version is the one they came
	 * from; a version we do not remember (or a changed one) drops them. */
	fi->keep_cache =
	    fcl_versions_opened(c->inodes, mino, f->vhash, f->version[0] != 0, f->answered);
	if (!fi->keep_cache) {
		/* The kernel may still hold the size of an older version (until
		 * its attribute timeout) and would cut reads there. Dropping its
		 * attributes (a negative offset touches nothing else, so this
		 * cannot deadlock) makes a read past the old size fetch the new
		 * ones first. */
		if (c->se)
			(void)fuse_lowlevel_notify_inval_inode(c->se, ino, -1, 0);
	}
	fi->fh = (uintptr_t)f;
	/* Small files are prefetched whole on open. When this host's worker
	 * owns the block, its descriptor is opened before the reply: the
	 * read that follows at once then needs no request of its own (it
	 * would otherwise race this one with a second), or, passing through,
	 * the kernel reads the block file itself. */
	bool small = f->size > 0 && f->size <= f->block_size;
	uint64_t block_size = f->block_size;
	bool ask_owner = false; /* another worker owns it: Prefetch after the reply */
	int bfd = -1;
	if (small) {
		f->ra.issued_to = 1;
		ask_owner = !fcl_prefetch_local(c, f, 0, &bfd);
	}
	bool direct;
	int32_t backing = fcl_pt_open(c, mino, f->vhash, f->size, bfd, (fi->flags & O_DIRECT) != 0,
	                              &direct, &f->pt_counted);
	if (backing) {
		fi->keep_cache = 0; /* the kernel refuses it with passthrough */
		fi->direct_io = direct;
	}
	f->page_cache = !backing;
	if (ask_owner)
		fcl_file_ref(f); /* for the prefetch after the reply */
	fcl_pt_mark_reply(backing);
	int failed = fuse_reply_open(req, fi);
	fcl_pt_mark_reply(0);
	if (failed) {
		/* The kernel dropped nothing: the next open must. */
		if (!fi->keep_cache)
			fcl_versions_changed(c->inodes, mino);
		if (f->pt_counted)
			fcl_pt_release(c, mino);
		fcl_file_unref(f);
		if (ask_owner)
			fcl_file_unref(f);
		return;
	}
	if (ask_owner) {
		fcl_prefetch(c, f, 0, 1);
		fcl_file_unref(f);
	}
	/* The files after this one, when its directory is read in order. */
	if (small) {
		uint64_t next[DA_MAX_WINDOW];
		size_t k = fcl_da_opened(c->da, mino, block_size, next, DA_MAX_WINDOW);
		if (k)
			fcl_prefetch_files(c, next, k);
	}
}

/* A read found the object changed in the store (-ESTALE): whatever is
 * cached about its version is wrong. Drop it so the next open asks the
 * master, naming the version found changed so that the master asks the
 * store (and the open drops the kernel's pages), and drop the kernel's
 * attributes (a negative offset: no page is touched, so this cannot
 * deadlock with the read in progress). */
static void forget_changed(fcl *c, fuse_ino_t ino, const fcl_file *f)
{
	fcl_meta_forget_attr(c->meta, f->ino);
	fcl_versions_changed(c->inodes, f->ino);
	(void)fcl_lru_put(c->changed, &f->ino, sizeof(f->ino), f->version, NULL, NULL);
	cis_counter_inc(c->stats.stale_reads);
	if (c->se)
		(void)fuse_lowlevel_notify_inval_inode(c->se, ino, -1, 0);
}

/* The node's page cache is one for all its open files: once an open of a
 * newer version has dropped it, a file still open on the older version must
 * not fill it with old bytes (nor cut the node's size to the old one with a
 * short read). Its reads fail as reads of a changed object do. A read that
 * passed this check before that open is safe: the open's dropping of the
 * cache waits for the pages that read holds locked. */
static bool newer_version_open(fcl *c, const fcl_file *f)
{
	uint64_t now;
	if (!f->page_cache || !(now = fcl_versions_other(c->inodes, f->ino, f->vhash)))
		return false;
	cis_counter_inc(c->stats.stale_reads);
	cis_log_limited(CIS_LOG_WARN, "older-version-read", 10,
	                "read failed: a newer version of the file was opened since",
	                "ino=%llu key=\"%s\" version=\"%s\" newer_vhash=%016llx",
	                (unsigned long long)f->ino, f->key, f->version, (unsigned long long)now);
	return true;
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
	fcl *c = req_fcl(req);
	fcl_file *f = (fcl_file *)(uintptr_t)fi->fh;
	fcl_file_ref(f); /* the readahead below runs after the reply */
	uint64_t t0 = cis_mono_ns();
	int nmax = (int)(size / f->block_size) + 2;
	fcl_seg stack[8];
	fcl_seg *segs = nmax <= 8 ? stack : calloc((size_t)nmax, sizeof(*segs));
	if (!segs) {
		fuse_reply_err(req, ENOMEM);
		fcl_file_unref(f);
		return;
	}
	int n = 0;
	cis_errmsg em = {{0}};
	bool older = newer_version_open(c, f);
	int rc = older ? -ESTALE : fcl_read(c, f, (uint64_t)off, size, segs, nmax, &n, &em);
	if (rc) {
		if (rc == -ESTALE && !older)
			forget_changed(c, ino, f);
		fuse_reply_err(req, kernel_err(rc));
	} else if (n == 0) {
		fuse_reply_buf(req, NULL, 0);
	} else {
		struct fuse_bufvec *bv =
		    calloc(1, sizeof(*bv) + (size_t)n * sizeof(struct fuse_buf));
		if (!bv) {
			fuse_reply_err(req, ENOMEM);
		} else {
			bv->count = (size_t)n;
			for (int i = 0; i < n; i++) {
				bv->buf[i].size = segs[i].len;
				bv->buf[i].mem = segs[i].buf;
			}
			fuse_reply_data(req, bv, 0);
			free(bv);
		}
	}
	fcl_segs_release(segs, n);
	if (segs != stack)
		free(segs);
	cis_histogram_observe(c->stats.read_seconds, (double)(cis_mono_ns() - t0) / 1e9);
	if (rc == 0) {
		uint64_t first;
		pthread_mutex_lock(&f->lock);
		uint64_t ahead =
		    fcl_ra_on_read(&f->ra, (uint64_t)off, size, f->block_size, f->size, &first);
		bool own_run = f->ra.seq >= 2;
		pthread_mutex_unlock(&f->lock);
		/* An open with no sequential run of its own may be one of
		 * many, each reading once: the file's shared detector. */
		if (!own_run && f->size > f->block_size)
			ahead = fcl_ra_shared_on_read(c->ras, f->ino, f->vhash, f->ra.max_window,
			                              (uint64_t)off, size, f->block_size, f->size,
			                              &first);
		if (ahead)
			fcl_prefetch(c, f, first, ahead);
	}
	fcl_file_unref(f);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fcl *c = req_fcl(req);
	fcl_file *f = (fcl_file *)(uintptr_t)fi->fh;
	if (f->pt_counted)
		fcl_pt_release(c, to_master(c, ino));
	fcl_file_unref(f);
	fuse_reply_err(req, 0);
}

/* ---- the mount is read-only ---- */

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
	(void)attr, (void)to_set, (void)fi;
	refuse_write(req, "setattr", ino);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	(void)name, (void)mode, (void)rdev;
	refuse_write(req, "mknod", parent);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)name, (void)mode;
	refuse_write(req, "mkdir", parent);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)name;
	refuse_write(req, "unlink", parent);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)name;
	refuse_write(req, "rmdir", parent);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	(void)link, (void)name;
	refuse_write(req, "symlink", parent);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
	(void)name, (void)newparent, (void)newname, (void)flags;
	refuse_write(req, "rename", parent);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	(void)newparent, (void)newname;
	refuse_write(req, "link", ino);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
	(void)name, (void)mode, (void)fi;
	refuse_write(req, "create", parent);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
	(void)buf, (void)size, (void)off, (void)fi;
	refuse_write(req, "write", ino);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
	(void)name, (void)value, (void)size, (void)flags;
	refuse_write(req, "setxattr", ino);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)name;
	refuse_write(req, "removexattr", ino);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                         struct fuse_file_info *fi)
{
	(void)mode, (void)offset, (void)length, (void)fi;
	refuse_write(req, "fallocate", ino);
}

static const struct fuse_lowlevel_ops ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .readlink = op_readlink,
    .statfs = op_statfs,
    .access = op_access,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .releasedir = op_releasedir,
    .open = op_open,
    .read = op_read,
    .release = op_release,
    .setattr = op_setattr,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .create = op_create,
    .write = op_write,
    .setxattr = op_setxattr,
    .removexattr = op_removexattr,
    .fallocate = op_fallocate,
};

/* ---- background: worker list, leases, bdi readahead ---- */

/* The kernel caps FUSE readahead at the bdi's read_ahead_kb (128 KiB by
 * default) whatever max_readahead says: raise it to match. Best effort
 * (needs root). Runs on the background thread: stat() goes through the
 * mount, which answers only once the session loop runs. */
static void raise_bdi_readahead(fcl *c)
{
	struct stat st;
	if (stat(c->opts->mountpoint, &st))
		return;
	char path[128];
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev),
	         minor(st.st_dev));
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		cis_debug("cannot raise the mount's readahead", "path=%s err=\"%s\"", path,
		          strerror(errno));
		return;
	}
	char val[16];
	int n = snprintf(val, sizeof(val), "%u", MAX_IO / 1024);
	if (write(fd, val, (size_t)n) != n)
		cis_debug("cannot raise the mount's readahead", "path=%s err=\"%s\"", path,
		          strerror(errno));
	close(fd);
}

/* A --root below "/" is an inode of its own, which a mount made again at
 * that path (or above it) replaces: follow it (the old one answered
 * ENOENT to everything for good). */
static void follow_root(fcl *c)
{
	if (!strcmp(c->opts->root, "/"))
		return; /* inode 1, whatever is mounted there */
	fcl_attr a;
	cis_errmsg em = {{0}};
	if (fcl_master_resolve(c, c->opts->root, &a, &em) != 0 || !a.is_dir)
		return; /* not there now: the old inode answers, as before */
	uint64_t old = __atomic_exchange_n(&c->root_ino, a.ino, __ATOMIC_RELAXED);
	if (old == a.ino)
		return;
	cis_warn("the root was mounted again: following it", "root=\"%s\" old_ino=%llu ino=%llu",
	         c->opts->root, (unsigned long long)old, (unsigned long long)a.ino);
	if (c->se)
		(void)fuse_lowlevel_notify_inval_inode(c->se, FUSE_ROOT_ID, -1, 0);
}

static void *bg_main(void *arg)
{
	fcl *c = arg;
	raise_bdi_readahead(c);
	pthread_mutex_lock(&c->bg_lock);
	while (!c->bg_stop) {
		pthread_mutex_unlock(&c->bg_lock);
		cis_errmsg em = {{0}};
		int rc = fcl_workers_refresh(c, &em);
		if (rc)
			cis_log_limited(CIS_LOG_WARN, "worker-list", 30,
			                "cannot refresh the worker list", "err=\"%s\"",
			                cis_errmsg_or(&em, rc));
		fcl_local_tick(c);
		follow_root(c);
		pthread_mutex_lock(&c->bg_lock);
		if (c->bg_stop)
			break;
		cis_cond_wait_ms(&c->bg_cond, &c->bg_lock, 2000);
	}
	pthread_mutex_unlock(&c->bg_lock);
	return NULL;
}

/* ---- start-up checks ---- */

/* Whether path (canonical) is a mount point, from mountinfo; the file
 * system type of the top mount there (the last line naming it) goes to
 * type (n bytes) when it is not NULL. */
static bool mount_at(const char *path, char *type, size_t n)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return false;
	char line[4096];
	bool found = false;
	while (fgets(line, sizeof(line), f)) {
		/* id parent maj:min root MOUNTPOINT opts [tags] - TYPE source ...;
		 * spaces escaped as \040 */
		char *sep = strstr(line, " - ");
		char *save = NULL, *tok = strtok_r(line, " ", &save);
		for (int i = 0; tok && i < 4; i++)
			tok = strtok_r(NULL, " ", &save);
		if (!tok)
			continue;
		char un[4096];
		size_t j = 0;
		for (size_t i = 0; tok[i] && j + 1 < sizeof(un); i++) {
			if (tok[i] == '\\' && tok[i + 1] >= '0' && tok[i + 1] <= '3' &&
			    tok[i + 2] && tok[i + 3]) {
				un[j++] = (char)((tok[i + 1] - '0') * 64 + (tok[i + 2] - '0') * 8 +
				                 (tok[i + 3] - '0'));
				i += 3;
			} else {
				un[j++] = tok[i];
			}
		}
		un[j] = 0;
		if (strcmp(un, path) != 0)
			continue;
		found = true;
		if (type && n) {
			size_t k = sep ? strcspn(sep + 3, " \n") : 0;
			if (k >= n)
				k = n - 1;
			memcpy(type, sep ? sep + 3 : "", k);
			type[k] = 0;
		}
	}
	fclose(f);
	return found;
}

/* The canonical path of mount point mnt without looking at mnt itself (a
 * dead mount there fails every look): its parent's real path and its
 * name. False when that cannot be had. */
static bool canonical_mountpoint(const char *mnt, char *out, size_t n)
{
	char copy[PATH_MAX], parent[PATH_MAX];
	if (snprintf(copy, sizeof(copy), "%s", mnt) >= (int)sizeof(copy))
		return false;
	/* A link to the mount point: the kernel mounted on its target. */
	struct stat ls;
	for (int hops = 0; hops < 8 && lstat(copy, &ls) == 0 && S_ISLNK(ls.st_mode); hops++) {
		char target[PATH_MAX];
		ssize_t k = readlink(copy, target, sizeof(target) - 1);
		if (k <= 0)
			return false;
		target[k] = 0;
		char *slash = strrchr(copy, '/');
		if (target[0] == '/' || !slash) {
			memcpy(copy, target, (size_t)k + 1);
		} else {
			slash[1] = 0;
			if (strlen(copy) + (size_t)k >= sizeof(copy))
				return false;
			memcpy(copy + strlen(copy), target, (size_t)k + 1);
		}
	}
	size_t len = strlen(copy);
	while (len > 1 && copy[len - 1] == '/')
		copy[--len] = 0;
	char *slash = strrchr(copy, '/');
	const char *name = slash ? slash + 1 : copy;
	if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return false;
	if (slash)
		*slash = 0;
	if (!realpath(slash ? (copy[0] ? copy : "/") : ".", parent))
		return false;
	return snprintf(out, n, "%s%s%s", parent, strcmp(parent, "/") ? "/" : "", name) < (int)n;
}

static int check_mountpoint(const char *mnt, cis_errmsg *em)
{
	struct stat st;
	struct statfs sfs;
	/* A dead mount left by a client that was killed (a container
	 * restarted in its pod, a unit restarted): detached when we may, as
	 * fusermount3 -u -z would, else named. statfs always asks the
	 * daemon; a stat may be answered from the kernel's cached attributes. */
	char canon[PATH_MAX], type[64];
	for (int i = 0; i < 8 && statfs(mnt, &sfs) != 0 && errno == ENOTCONN && getuid() == 0;
	     i++) {
		/* Only a FUSE mount, as fusermount3 would (ENOTCONN from
		 * another file system is no dead FUSE daemon). */
		if (!canonical_mountpoint(mnt, canon, sizeof(canon)) ||
		    !mount_at(canon, type, sizeof(type)) || strncmp(type, "fuse", 4) != 0 ||
		    umount2(canon, MNT_DETACH) != 0)
			break;
		cis_info("detached a dead FUSE mount", "mountpoint=%s type=%s", canon, type);
	}
	if (stat(mnt, &st) || statfs(mnt, &sfs)) {
		int e = errno;
		if (e == ENOTCONN)
			return cis_fail(
			    em, -e,
			    "%s: a dead FUSE mount is still there (transport endpoint is "
			    "not connected): run fusermount3 -u %s",
			    mnt, mnt);
		if (e == ENOENT)
			return cis_fail(em, -e, "%s: mount point does not exist", mnt);
		return cis_fail(em, -e, "%s: %s", mnt, strerror(e));
	}
	if (!S_ISDIR(st.st_mode))
		return cis_fail(em, -ENOTDIR, "%s: mount point is not a directory", mnt);
	char real[PATH_MAX];
	if (realpath(mnt, real) && mount_at(real, NULL, 0))
		return cis_fail(em, -EBUSY,
		                "%s: already mounted (unmount it first: fusermount3 -u %s)", mnt,
		                mnt);
	if (access(mnt, W_OK) && getuid() != 0)
		return cis_fail(em, -EACCES, "%s: mount point not writable by this user", mnt);
	return 0;
}

/* Whether the metrics port can be bound, checked before the daemon forks
 * so a clash is reported on the terminal. */
static int check_port(const char *addr, int port, cis_errmsg *em)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
		return 0; /* IPv6: the server's own bind says */
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	int rc = 0;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		rc = cis_fail(em, -errno, "metrics port %d: %s (use --http-port)", port,
		              strerror(errno));
	close(fd);
	return rc;
}

/* Descriptors kept for everything but the descriptor cache: /dev/fuse
 * clones, sockets, the log. */
#define FD_RESERVE 1024

/* The descriptor cache holds up to --fd-cache block files open: lift the
 * descriptor limit so it fits (the hard one too where we may, as root),
 * else shrink the cache to the limit, saying so. */
static void fit_fd_cache(fcl_opts *o)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	rlim_t want = (rlim_t)o->fd_cache + FD_RESERVE;
	if (rl.rlim_cur < want) {
		struct rlimit up = {want, rl.rlim_max > want ? rl.rlim_max : want};
		if (setrlimit(RLIMIT_NOFILE, &up)) {
			rl.rlim_cur = rl.rlim_max;
			(void)setrlimit(RLIMIT_NOFILE, &rl);
			(void)getrlimit(RLIMIT_NOFILE, &rl);
		} else {
			rl = up;
		}
	}
	if (rl.rlim_cur < want) {
		uint64_t fit =
		    rl.rlim_cur > 2 * FD_RESERVE ? rl.rlim_cur - FD_RESERVE : rl.rlim_cur / 2;
		cis_info("descriptor cache shrunk to the open-file limit",
		         "fd_cache=%llu limit=%llu", (unsigned long long)fit,
		         (unsigned long long)rl.rlim_cur);
		o->fd_cache = fit;
	}
}

static int build_fuse_args(const fcl_opts *o, struct fuse_args *args)
{
	char opts[4096];
	int n = snprintf(opts, sizeof(opts), "max_read=%u", MAX_IO);
	const char *user = o->fuse_opts ? o->fuse_opts : "";
	if (!strstr(user, "fsname="))
		n += snprintf(opts + n, sizeof(opts) - (size_t)n, ",fsname=cistern");
	if (!strstr(user, "subtype="))
		n += snprintf(opts + n, sizeof(opts) - (size_t)n, ",subtype=cistern");
	if (user[0])
		n += snprintf(opts + n, sizeof(opts) - (size_t)n, ",%s", user);
	if (n >= (int)sizeof(opts))
		return -CIS_E_TOOBIG;
	if (fuse_opt_add_arg(args, "cistern-fuse") || fuse_opt_add_arg(args, "-o") ||
	    fuse_opt_add_arg(args, opts))
		return -ENOMEM;
	if (o->debug && fuse_opt_add_arg(args, "-d"))
		return -ENOMEM;
	return 0;
}

/* Resolve --root with a client of its own, closed again before the daemon
 * forks (a fork keeps no threads). */
static int resolve_root(fcl *c, cis_errmsg *em)
{
	int rc = fcl_master_connect(c, em);
	if (rc)
		return rc;
	fcl_attr a;
	cis_errmsg why = {{0}};
	rc = fcl_master_resolve(c, c->opts->root, &a, &why);
	if (rc == 0)
		c->root_ino = a.ino;
	else if (cis_rpc_unreachable(rc))
		cis_fail(em, rc, "cannot reach master at %s: %s", c->opts->master,
		         cis_errmsg_or(&why, rc));
	else
		cis_fail(em, rc, "root %s: %s", c->opts->root, cis_errmsg_or(&why, rc));
	cis_rpc_client_free(c->master);
	c->master = NULL;
	return rc;
}

int main(int argc, char **argv)
{
	fcl_opts o;
	cis_errmsg em = {{0}};
	int rc = fcl_opts_parse(&o, argc, argv, &em);
	if (rc == 1 || rc == 2) {
		if (rc == 1)
			fcl_opts_usage(stdout);
		else
			cis_version_print("cistern-fuse", stdout);
		fcl_opts_free(&o);
		return 0;
	}
	if (rc) {
		fprintf(stderr, "cistern-fuse: %s (cistern-fuse --help lists the options)\n",
		        cis_errmsg_or(&em, rc));
		fcl_opts_free(&o);
		return 2;
	}
	enum cis_log_level level = CIS_LOG_INFO;
	if (cis_log_parse_level(o.log_level, &level))
		cis_die("log-level: expected debug, info, warn or error, got '%s'", o.log_level);
	cis_log_init("cistern-fuse", level);
	signal(SIGPIPE, SIG_IGN);

	fcl c = {.opts = &o, .root_ino = 1};
	pthread_mutex_init(&c.lock, NULL);
	pthread_mutex_init(&c.bg_lock, NULL);
	pthread_cond_init(&c.bg_cond, NULL);
	if (gethostname(c.hostname, sizeof(c.hostname) - 1))
		c.hostname[0] = 0;

	int exit_code = 1;
	if ((rc = check_mountpoint(o.mountpoint, &em)))
		cis_die("%s", cis_errmsg_or(&em, rc));
	char real[PATH_MAX];
	if (realpath(o.mountpoint, real)) { /* the daemon changes to / */
		free(o.mountpoint);
		o.mountpoint = strdup(real);
		if (!o.mountpoint)
			cis_die("out of memory at start-up");
	}
	int log_fd = -1;
	if (o.log_file) {
		log_fd = open(o.log_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (log_fd < 0)
			cis_die("log-file %s: %s", o.log_file, strerror(errno));
	}
	if (o.http_port && (rc = check_port(o.http_bind, o.http_port, &em)))
		cis_die("%s", cis_errmsg_or(&em, rc));
	if ((rc = resolve_root(&c, &em)))
		cis_die("%s", cis_errmsg_or(&em, rc));

	fcl_meta_src src = {lookup_counted, fcl_master_getattr, &c};
	fit_fd_cache(&o);
	if (fcl_inodes_new(&c.inodes) || fcl_workers_init(&c) || fcl_stats_init(&c) ||
	    fcl_meta_new(&src, (uint64_t)(o.entry_timeout * 1000),
	                 (uint64_t)(o.attr_timeout * 1000), (uint64_t)(o.negative_timeout * 1000),
	                 o.meta_cache, &c.meta) ||
	    fcl_lru_new(FCL_CHANGED_MAX, CIS_UFS_VERSION_MAX, &c.changed) ||
	    fcl_local_new(o.fd_cache, &c.local) || fcl_remote_new(&c.remote) || fcl_da_new(&c.da) ||
	    fcl_ra_shared_new(&c.ras))
		cis_die("out of memory at start-up");

	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	if (build_fuse_args(&o, &args))
		cis_die("fuse options too long");
	struct fuse_session *se = fuse_session_new(&args, &ops, sizeof(ops), &c);
	if (!se)
		cis_die("fuse: bad options (see the line above): %s",
		        o.fuse_opts ? o.fuse_opts : "");
	c.se = se;
	if (fuse_set_signal_handlers(se))
		cis_die("cannot install signal handlers");
	if (fuse_session_mount(se, o.mountpoint))
		cis_die("%s: mount failed (see the line above)", o.mountpoint);
	if ((rc = fcl_pt_attach(&c, se)))
		cis_die("fuse: cannot hook the session's I/O: %s", strerror(-rc));
	if (fuse_daemonize(o.foreground))
		cis_die("cannot become a daemon");

	/* From here on we may be the daemon: threads start only now. */
	if (log_fd >= 0) {
		dup2(log_fd, STDERR_FILENO);
		close(log_fd);
	}
	cis_http_server *http = NULL;
	if ((rc = fcl_master_connect(&c, &em)))
		cis_die("%s", cis_errmsg_or(&em, rc));
	if ((rc = fcl_stop_watch(&c)))
		cis_warn("a stop will wait for the requests in flight", "err=\"%s\"",
		         strerror(-rc));
	if (o.http_port) {
		cis_http_server_opts ho = {.bind_addr = o.http_bind,
		                           .port = (uint16_t)o.http_port,
		                           .metrics = c.stats.reg};
		if ((rc = cis_http_server_new(&ho, &http, &em)) ||
		    (rc = cis_http_server_start(http))) {
			cis_error("metrics server failed; serving without it", "err=\"%s\"",
			          cis_errmsg_or(&em, rc));
			cis_http_server_free(http);
			http = NULL;
		}
	}
	(void)fcl_workers_refresh(&c, &em);
	refresh_start(&c);
	if (pthread_create(&c.bg, NULL, bg_main, &c) == 0)
		c.bg_started = true;
	cis_info("mounted", "mountpoint=\"%s\" master=%s root=\"%s\" root_ino=%llu", o.mountpoint,
	         o.master, o.root, (unsigned long long)c.root_ino);

	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	if (!lc)
		cis_die("out of memory at start-up");
	fuse_loop_cfg_set_clone_fd(lc, 1);
	fuse_loop_cfg_set_max_threads(lc, (unsigned)o.threads);
	fuse_loop_cfg_set_idle_threads(lc, (unsigned)o.threads);
	rc = fuse_session_loop_mt(se, lc);
	/* libfuse returns the signal number after SIGTERM/SIGINT/SIGHUP: that
	 * is the clean way out. Negative is a failure of the loop. */
	exit_code = rc < 0 ? 1 : 0;
	if (rc < 0)
		cis_error("session loop failed", "err=\"%s\"", strerror(-rc));
	fuse_loop_cfg_destroy(lc);
	cis_info("unmounting", "mountpoint=\"%s\"", o.mountpoint);

	/* Unmount first: it aborts requests nobody will answer now (the
	 * background thread's stat of the mount point may be one). */
	fuse_session_unmount(se);
	pthread_mutex_lock(&c.bg_lock);
	c.bg_stop = true;
	pthread_cond_signal(&c.bg_cond);
	pthread_mutex_unlock(&c.bg_lock);
	if (c.bg_started)
		pthread_join(c.bg, NULL);
	refresh_stop(&c);
	fcl_stop_unwatch(&c);
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	if (http)
		cis_http_server_free(http);
	fcl_local_release_all(&c);
	fcl_local_free(c.local);
	fcl_remote_free(c.remote);
	fcl_da_free(c.da);
	fcl_ra_shared_free(c.ras);
	fcl_df_free(c.df);
	cis_rpc_client_free(c.master);
	fcl_meta_free(c.meta);
	fcl_lru_free(c.changed);
	fcl_inodes_free(c.inodes);
	fcl_mounts_free(&c);
	fcl_workers_fini(&c);
	fcl_stats_free(&c);
	fcl_opts_free(&o);
	return exit_code;
}
