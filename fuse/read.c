/* The read path: offset -> block -> owning workers in rendezvous order ->
 * short-circuit (same host) or streamed TCP read; a worker that fails or
 * times out is skipped for the next; with none left the client reads the
 * store itself with the mount's connector. Only a store failure fails the
 * read, and then the log says what the store said. */
#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cistern/log.h"
#include "cistern/place.h"
#include "cistern/time.h"

void fcl_blockref(const fcl_file *f, uint64_t index, Cis__BlockRef *ref, uint8_t idbuf[16],
                  cis_block_id *id)
{
	*id = cis_block_id_make(f->mount->id, f->key, f->version, f->block_size, index);
	cis_block_id_to_bytes(*id, idbuf);
	cis__block_ref__init(ref);
	ref->id.data = idbuf;
	ref->id.len = 16;
	ref->mount_id = f->mount->id;
	ref->key = f->key;
	ref->version = (char *)f->version;
	ref->index = index;
	ref->block_size = f->block_size;
	ref->file_size = f->size;
}

/* Block idx's workers in rendezvous order, by its extent (cis_place_id):
 * indices into wl, the count returned. */
static size_t block_order(const fcl_file *f, uint64_t idx, cis_block_id id, const fcl_wlist *wl,
                          size_t *order, size_t n)
{
	cis_block_id pid = cis_place_id(id, f->mount->id, f->key, f->version, f->block_size, idx);

	return cis_place(pid, wl->ids, wl->n, order, n);
}

void fcl_segs_release(fcl_seg *segs, int n)
{
	for (int i = 0; i < n; i++) {
		free(segs[i].buf);
		segs[i] = (fcl_seg){0};
	}
}

static void count(fcl *c, enum fcl_path p, size_t len)
{
	cis_counter_inc(c->stats.reads[p]);
	cis_counter_add(c->stats.bytes[p], len);
}

/* The connector, opened on first use. */
static int mount_ufs(fcl_mount *m, cis_ufs **out, cis_errmsg *em)
{
	int rc = 0;
	pthread_mutex_lock(&m->lock);
	if (!m->ufs)
		rc = cis_ufs_open(m->uri, &m->options, &m->ufs, em);
	*out = m->ufs;
	pthread_mutex_unlock(&m->lock);
	return rc;
}

/* The object is no longer the version opened: no worker or store read of
 * this open can succeed, and bytes of two versions must never mix. */
static int changed(const fcl_file *f, uint64_t foff, const cis_errmsg *em)
{
	cis_log(
	    CIS_LOG_WARN, "read failed: the file changed in its store since it was opened",
	    "ino=%llu key=\"%s\" offset=%llu err=\"%s\" next=\"a new open reads the new version\"",
	    (unsigned long long)f->ino, f->key, (unsigned long long)foff,
	    cis_errmsg_or(em, -CIS_E_CHANGED));
	return -ESTALE;
}

static int store_read(fcl *c, fcl_file *f, uint64_t foff, size_t len, fcl_seg *seg, cis_errmsg *em)
{
	cis_ufs *u;
	int rc = mount_ufs(f->mount, &u, em);
	if (rc)
		goto out_fail;
	char *buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	uint64_t t0 = cis_mono_ns();
	size_t got = 0;
	rc = cis_ufs_read_buf(u, f->key, f->version, foff, len, buf, &got, em);
	if (rc == 0 && got != len)
		rc = cis_fail(em, -CIS_E_STORE, "%s/%s: short read: %zu of %zu bytes at %llu",
		              cis_ufs_uri(u), f->key, got, len, (unsigned long long)foff);
	if (rc) {
		free(buf);
		goto out_fail;
	}
	cis_histogram_observe(c->stats.stall_seconds, (double)(cis_mono_ns() - t0) / 1e9);
	*seg = (fcl_seg){.len = len, .buf = buf};
	count(c, FCL_PATH_STORE, len);
	return 0;
out_fail:
	if (rc == -CIS_E_CHANGED)
		return changed(f, foff, em);
	if (rc == -ECANCELED) { /* the client is stopping (stop.c): the store did not fail */
		cis_info("read abandoned: the client is stopping",
		         "ino=%llu key=\"%s\" offset=%llu", (unsigned long long)f->ino, f->key,
		         (unsigned long long)foff);
		return -EIO;
	}
	cis_counter_inc(c->stats.store_errors);
	cis_log(CIS_LOG_ERROR, "read failed: the store failed and no worker could serve it",
	        "ino=%llu key=\"%s\" offset=%llu len=%zu err=\"%s\"", (unsigned long long)f->ino,
	        f->key, (unsigned long long)foff, len, cis_errmsg_or(em, rc));
	return -EIO;
}

/* Whether w failed a read in the last FCL_DOWN_MS. */
static bool worker_down(fcl *c, uint64_t id)
{
	uint64_t now = cis_mono_ms();
	bool down = false;
	pthread_mutex_lock(&c->lock);
	for (int i = 0; i < FCL_DOWN_MAX; i++)
		if (c->down[i].id == id && c->down[i].until_ms > now)
			down = true;
	pthread_mutex_unlock(&c->lock);
	return down;
}

static void mark_down(fcl *c, uint64_t id)
{
	uint64_t now = cis_mono_ms();
	pthread_mutex_lock(&c->lock);
	int slot = 0;
	for (int i = 0; i < FCL_DOWN_MAX; i++) {
		if (c->down[i].id == id) {
			slot = i;
			break;
		}
		if (c->down[i].until_ms < c->down[slot].until_ms)
			slot = i; /* the oldest mark makes room */
	}
	c->down[slot].id = id;
	c->down[slot].until_ms = now + FCL_DOWN_MS;
	pthread_mutex_unlock(&c->lock);
}

/* Read len bytes at off of a block file. 0, or -EIO on an error or a
 * short file (the block file changed under its descriptor). */
static int pread_full(int fd, char *buf, size_t len, uint64_t off, cis_errmsg *em)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return cis_fail(em, -EIO, "block file read at %llu: %s",
			                (unsigned long long)(off + done), strerror(errno));
		if (n == 0)
			return cis_fail(em, -EIO,
			                "block file ends %zu bytes into a %zu-byte read at %llu",
			                done, len, (unsigned long long)off);
		done += (size_t)n;
	}
	return 0;
}

/* Bytes in block idx of f. */
static uint64_t block_len(const fcl_file *f, uint64_t idx)
{
	uint64_t start = idx * f->block_size;

	if (start >= f->size)
		return 0;
	return f->size - start < f->block_size ? f->size - start : f->block_size;
}

static int read_block(fcl *c, fcl_file *f, fcl_wlist *wl, uint64_t idx, uint64_t boff, size_t len,
                      bool seq, fcl_seg *seg, cis_errmsg *em)
{
	Cis__BlockRef ref;
	uint8_t idbuf[16];
	cis_block_id id;
	fcl_blockref(f, idx, &ref, idbuf, &id);
	size_t order[FCL_MAX_TRIES];
	size_t n = block_order(f, idx, id, wl, order, FCL_MAX_TRIES);

	for (size_t i = 0; i < n; i++) {
		const fcl_worker *w = &wl->w[order[i]];
		cis_errmsg wem = {{0}};
		int rc;
		if (worker_down(c, w->id)) {
			/* Found dead by an earlier read or a prefetch: this read
			 * fails over to the next one all the same. */
			cis_counter_inc(c->stats.failovers);
			continue;
		}
		bool stream = !w->local;
		if (w->local) {
			int fd;
			uint64_t blen, waited;
			rc = fcl_local_open(c, w, &ref, &fd, &blen, &waited, &wem);
			/* Not cached yet (a large block): the worker answered at
			 * once and started the fetch. Stream this read from it (the first bytes as
			 * they arrive); a later read opens the block locally. */
			/* Refused by a worker that answers (too many leases, the
			 * block file gone bad and dropped): it can still stream
			 * the bytes, fetching them again as needed. */
			if (rc == -EAGAIN ||
			    (rc && rc != -CIS_E_CHANGED && !cis_rpc_unreachable(rc)))
				stream = true;
			if (rc == 0 && blen != block_len(f, idx)) {
				/* Exactly the block's length, or it is not this block. */
				close(fd);
				fcl_local_forget(c, w, &ref);
				rc = cis_fail(&wem, -CIS_E_PROTO,
				              "block file holds %llu bytes, the block %llu",
				              (unsigned long long)blen,
				              (unsigned long long)block_len(f, idx));
			}
			if (rc == 0) {
				/* Read the bytes here, not in the reply (splice): an
				 * error there would come after this read reported
				 * success, as a short reply (a truncated file to the
				 * reader) or EIO, with no failover. */
				char *buf = malloc(len ? len : 1);
				if (!buf) {
					close(fd);
					return -ENOMEM;
				}
				rc = pread_full(fd, buf, len, boff, &wem);
				/* A sequential reader comes back for the rest of the
				 * block: start reading it from disk now so the next
				 * request finds it in the page cache. */
				if (rc == 0 && seq && boff + len < blen)
					(void)posix_fadvise(fd, (off_t)(boff + len),
					                    (off_t)(blen - boff - len),
					                    POSIX_FADV_WILLNEED);
				close(fd);
				if (rc == 0) {
					if (waited)
						cis_histogram_observe(c->stats.stall_seconds,
						                      (double)waited / 1e9);
					*seg = (fcl_seg){.len = len, .buf = buf};
					count(c, FCL_PATH_LOCAL, len);
					return 0;
				}
				free(buf);
				fcl_local_forget(c, w, &ref); /* that descriptor is bad */
				/* Ask the worker itself: it reads the file before it
				 * sends it, and one it cannot read (a failing disk) it
				 * drops and fetches again. */
				stream = true;
			}
		}
		if (stream) {
			char *buf = malloc(len ? len : 1);
			if (!buf)
				return -ENOMEM;
			bool cached = true;
			uint64_t t0 = cis_mono_ns();
			rc = fcl_remote_read(c, w, &ref, boff, len, buf, &cached, &wem);
			if (rc == 0) {
				if (!cached)
					cis_histogram_observe(c->stats.stall_seconds,
					                      (double)(cis_mono_ns() - t0) / 1e9);
				*seg = (fcl_seg){.len = len, .buf = buf};
				count(c, FCL_PATH_REMOTE, len);
				return 0;
			}
			free(buf);
		}
		if (rc == -CIS_E_CHANGED) {
			*em = wem;
			return changed(f, idx * f->block_size + boff, em);
		}
		cis_counter_inc(c->stats.failovers);
		/* A worker that answered "no" (the block is bad, the request
		 * malformed) is still alive; one that did not answer is skipped
		 * for a while. */
		if (cis_rpc_unreachable(rc))
			mark_down(c, w->id);
		char cause[64];
		snprintf(cause, sizeof(cause), "worker-read:%llu", (unsigned long long)w->id);
		cis_log_limited(CIS_LOG_WARN, cause, 10, "worker read failed, trying the next",
		                "worker=%llu addr=%s:%u local=%d err=\"%s\"",
		                (unsigned long long)w->id, w->host, w->port, w->local,
		                cis_errmsg_or(&wem, rc));
	}
	return store_read(c, f, idx * f->block_size + boff, len, seg, em);
}

int fcl_read(fcl *c, fcl_file *f, uint64_t off, size_t size, fcl_seg *segs, int nsegs_max,
             int *nsegs, cis_errmsg *em)
{
	*nsegs = 0;
	if (off >= f->size || size == 0)
		return 0;
	if (size > f->size - off)
		size = (size_t)(f->size - off);
	uint64_t end = off + size;
	pthread_mutex_lock(&f->lock);
	bool seq = f->ra.seq > 0;
	pthread_mutex_unlock(&f->lock);
	fcl_wlist *wl = fcl_workers_get(c);
	int rc = 0;
	while (off < end) {
		if (*nsegs == nsegs_max) {
			rc = cis_fail(em, -CIS_E_INTERNAL, "read spans more than %d blocks",
			              nsegs_max);
			break;
		}
		uint64_t idx = off / f->block_size;
		uint64_t boff = off % f->block_size;
		uint64_t len = f->block_size - boff;
		if (len > end - off)
			len = end - off;
		rc = read_block(c, f, wl, idx, boff, (size_t)len, seq, &segs[*nsegs], em);
		if (rc)
			break;
		(*nsegs)++;
		off += len;
	}
	fcl_workers_put(c, wl);
	if (rc) {
		fcl_segs_release(segs, *nsegs);
		*nsegs = 0;
	}
	return rc;
}

/* A block of this host's worker needs no Prefetch RPC: start reading its
 * file into the page cache through its descriptor, the cached one or (ask)
 * one opened now with OpenLocal, which also starts the fetch of a block the
 * worker lacks. The descriptor goes to *keep when keep is not NULL. False
 * when the worker is not on this host, or has to be asked (!ask), or
 * failed. */
static bool local_willneed(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref, bool ask,
                           int *keep)
{
	if (!w->local || (!ask && !fcl_local_cached(c, w, ref)) || worker_down(c, w->id))
		return false;
	int fd;
	uint64_t blen, waited;
	cis_errmsg em = {{0}};
	int rc = fcl_local_open(c, w, ref, &fd, &blen, &waited, &em);
	if (rc)
		return rc == -EAGAIN; /* the worker is fetching it */
	/* A small file's open waited for its fetch: its reader stalled. */
	if (waited)
		cis_histogram_observe(c->stats.stall_seconds, (double)waited / 1e9);
	(void)posix_fadvise(fd, 0, (off_t)blen, POSIX_FADV_WILLNEED);
	if (keep)
		*keep = fd;
	else
		close(fd);
	return true;
}

bool fcl_prefetch_local(fcl *c, fcl_file *f, uint64_t idx, int *keep)
{
	fcl_wlist *wl = fcl_workers_get(c);
	bool done = false;
	if (keep)
		*keep = -1;
	if (wl->n) {
		Cis__BlockRef ref;
		uint8_t idbuf[16];
		cis_block_id id;
		size_t owner;
		fcl_blockref(f, idx, &ref, idbuf, &id);
		block_order(f, idx, id, wl, &owner, 1);
		done = local_willneed(c, &wl->w[owner], &ref, true, keep);
	}
	fcl_workers_put(c, wl);
	return done;
}

/* One Prefetch request per primary owner for the refs not sent yet (ptrs:
 * room for n). */
static void send_by_owner(fcl *c, const fcl_wlist *wl, Cis__BlockRef *refs, Cis__BlockRef **ptrs,
                          const size_t *owner, bool *sent, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (sent[i])
			continue;
		size_t k = 0;
		for (size_t j = i; j < n; j++) {
			if (!sent[j] && owner[j] == owner[i]) {
				ptrs[k++] = &refs[j];
				sent[j] = true;
			}
		}
		cis_errmsg em = {{0}};
		const fcl_worker *w = &wl->w[owner[i]];
		/* A worker the reads skip gets no Prefetch either: each would
		 * hold this FUSE thread up to the call's timeout. */
		if (worker_down(c, w->id))
			continue;
		int rc = fcl_remote_prefetch(c, w, ptrs, k, &em);
		if (rc) {
			if (cis_rpc_unreachable(rc))
				mark_down(c, w->id);
			cis_log_limited(CIS_LOG_DEBUG, "prefetch", 10, "prefetch request failed",
			                "worker=%llu err=\"%s\"", (unsigned long long)w->id,
			                cis_errmsg_or(&em, rc));
		} else {
			cis_counter_add(c->stats.prefetch_blocks, k);
		}
	}
}

void fcl_prefetch(fcl *c, fcl_file *f, uint64_t first, uint64_t n)
{
	if (n > FCL_PREFETCH_MAX)
		n = FCL_PREFETCH_MAX;
	fcl_wlist *wl = fcl_workers_get(c);
	if (wl->n == 0 || n == 0)
		goto out_put;
	Cis__BlockRef *refs = calloc(n, sizeof(*refs));
	Cis__BlockRef **ptrs = calloc(n, sizeof(*ptrs));
	uint8_t(*ids)[16] = calloc(n, 16);
	size_t *owner = calloc(n, sizeof(*owner));
	bool *sent = calloc(n, sizeof(*sent));
	if (!refs || !ptrs || !ids || !owner || !sent)
		goto out_free;
	for (uint64_t i = 0; i < n; i++) {
		cis_block_id id;
		fcl_blockref(f, first + i, &refs[i], ids[i], &id);
		block_order(f, first + i, id, wl, &owner[i], 1);
		sent[i] = local_willneed(c, &wl->w[owner[i]], &refs[i], false, NULL);
	}
	send_by_owner(c, wl, refs, ptrs, owner, sent, n);
out_free:
	free(refs);
	free(ptrs);
	free(ids);
	free(owner);
	free(sent);
out_put:
	fcl_workers_put(c, wl);
}

void fcl_prefetch_files(fcl *c, const uint64_t *inos, size_t n)
{
	if (n > DA_MAX_WINDOW)
		n = DA_MAX_WINDOW;
	fcl_wlist *wl = fcl_workers_get(c);
	fcl_file *files[DA_MAX_WINDOW];
	Cis__BlockRef refs[DA_MAX_WINDOW], *ptrs[DA_MAX_WINDOW];
	uint8_t ids[DA_MAX_WINDOW][16];
	size_t owner[DA_MAX_WINDOW];
	bool sent[DA_MAX_WINDOW];
	size_t k = 0;
	for (size_t i = 0; i < n && wl->n; i++) {
		fcl_file *f;
		bool hit;
		cis_errmsg em = {{0}};
		if (fcl_master_open(c, inos[i], &f, &hit, &em))
			continue; /* its reader will see why */
		if (f->size == 0) {
			fcl_file_unref(f);
			continue;
		}
		cis_block_id id;
		fcl_blockref(f, 0, &refs[k], ids[k], &id);
		block_order(f, 0, id, wl, &owner[k], 1);
		/* This host's worker has it: nothing to ask for. */
		if (wl->w[owner[k]].local && fcl_local_present(c, &wl->w[owner[k]], &refs[k])) {
			fcl_file_unref(f);
			continue;
		}
		sent[k] = false;
		files[k++] = f;
	}
	send_by_owner(c, wl, refs, ptrs, owner, sent, k);
	for (size_t i = 0; i < k; i++)
		fcl_file_unref(files[i]);
	fcl_workers_put(c, wl);
}
