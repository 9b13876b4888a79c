/* Fetching blocks from the store: single flight, a bounded pool, streaming.
 *
 * Every block being fetched has one `fetch` in the in-flight table; readers
 * of that block join it as waiters instead of starting their own. The fetch
 * writes into a temporary file in a cache dir as bytes arrive, and after
 * each chunk sends each streaming waiter what it can now have straight
 * from that file (sendfile through cis_rpc_reply_file), so the first bytes
 * reach a reader long before the block is complete.
 *
 * A fixed number of fetch threads (--fetch-threads) run jobs from two
 * queues: reads a client waits on (high) before prefetch and load (low). A
 * low fetch that a reader joins moves to the high queue. At most
 * --background-fetches threads run low jobs at a time, so a read that
 * arrives while a load keeps the queue full finds a thread at once instead
 * of waiting for a load's span to finish, and the store is not shared by so
 * many load streams that each of them (and the read among them) crawls.
 * Nor is the store's bandwidth: while reads for readers (or their
 * prefetches) are under way, a load's reads stream no more of them at a
 * time than those do, and the others pause (bulk_gate).
 *
 * A thread that takes a fetch also takes the queued fetches of the blocks
 * that follow it in the same object (up to FX_SPAN_BYTES in all) and reads
 * them from the store with one ranged GET, filling each block in turn:
 * loads and readahead queue runs of consecutive blocks, and a store serves
 * a few large ranges much better than many small ones (s3rver: 4 MiB
 * ranges 0.8 of the throughput of 16 MiB ones), on top of the saved
 * request latency and per-request cost of a cloud store.
 *
 * Every fill gathers what the store sends (up to 256 KiB at a time, the
 * S3 connector's receive buffer) in the thread's stage and writes it out in large pieces: one
 * pwrite for sixteen, and the page cache takes 1 GiB in 256 KiB writes for
 * about half the system time of 16 KiB ones on the benchmark machine (0.3
 * s against 0.6-0.8 s). A fill readers wait on writes its stage through
 * the page cache at 256 KiB, or its whole pages as soon as data arrives
 * 20 ms after the stage's first byte or the store goes quiet (the sink's
 * tick: a call with no bytes), so a reader of a slow or stalling store
 * still gets bytes soon after they came. A cold fill (WRK_FETCH_COLD: a load
 * or a replica, no reader joined before it started) writes 1 MiB pieces
 * with O_DIRECT to a second descriptor of the temporary file, the block's
 * last partial page through the page cache; once a reader joins it, its
 * whole pages also go out on the 20 ms timer and the store's quiet.
 * Streaming waiters read what is on disk (`ondisk`), not what was
 * received.
 *
 * When the cache cannot take the block (no space, a dir read-only or gone)
 * a reader is served by a direct read from the store into its reply
 * ("direct" jobs), so a sick disk costs caching, not service. */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cistern/fileio.h"
#include "cistern/log.h"
#include "cistern/msgtype.h"
#include "cistern/time.h"

#define FX_BUCKETS       4096
#define FX_SPAN_BYTES    (16u << 20)  /* at most this much per store GET */
#define FX_SPAN_MAX      16           /* and at most this many blocks */
#define FX_STAGE         (1u << 20)   /* a cold fill writes to disk in pieces of this size */
#define FX_HOT_STAGE     (256u << 10) /* a fill readers wait on, in pieces of at most this */
#define FX_HOT_WAIT      20000000u    /* ns: or its whole pages this long after their first byte */
#define FX_DIO_ALIGN     4096u        /* offset and length alignment for O_DIRECT */
#define FX_BULK_PAUSE_MS 2000u      /* a bulk read gives way to readers this long at most at once */
#define FX_BULK_TAIL     (1u << 20) /* and not with this little left to read */

enum { W_STREAM, W_DONE };
enum { J_FILL, J_DIRECT, J_VERIFY_READ, J_VERIFY_ENSURE };

typedef struct waiter {
	struct waiter *next;
	int kind;
	cis_rpc_conn *conn;
	cis_frame_hdr hdr;
	uint64_t off, end, sent, total;
	wrk_done_fn done;
	void *arg;
} waiter;

typedef struct fetch fetch;

typedef struct job {
	struct job *next;
	int kind;
	fetch *f;
	wrk_ref ref;
	/* direct and verify-read */
	cis_rpc_conn *conn;
	cis_frame_hdr hdr;
	uint64_t off, end, total;
	/* verify-ensure */
	wrk_done_fn done;
	void *arg;
	int prio;
	unsigned flags; /* WRK_FETCH_* */
} job;

struct fetch {
	struct fetch *hnext;
	wrk_ref ref;
	uint64_t len;
	int prio;
	bool running;
	bool pin;
	bool committed_pinned; /* what the block was committed with (under mu) */
	bool cold;             /* no reader waits: fill past the page cache */
	bool read;             /* a reader asked for it: the block is used once filled */
	bool alone;            /* fetched by itself (a span it was in failed) */
	char *src_host;
	uint16_t src_port;
	job *queued; /* while in a queue */
	int fd, dir;
	int dfd;     /* the temporary file opened O_DIRECT for a cold fill, or -1 */
	char *stage; /* the fetch thread's buffer (FX_STAGE bytes, O_DIRECT-aligned) or NULL */
	char tmp[PATH_MAX];
	uint64_t filled;    /* bytes received */
	uint64_t ondisk;    /* bytes in the file, for readers (filled less staged) */
	size_t staged;      /* bytes in the thread's stage, not written yet */
	uint64_t staged_ns; /* when the stage's first byte came in */
	cis_checksum *cs;
	int local_err; /* a write to the cache failed with this */
	waiter *waiters;
	uint64_t start_ns;
	bool from_peer; /* the bytes came from src_host */
};

struct wrk_fx {
	wrk *w;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	fetch *table[FX_BUCKETS];
	uint64_t inflight;
	job *q_head[2], *q_tail[2];
	size_t queued;            /* jobs in both queues */
	int idle;                 /* threads waiting for a job */
	int low_max;              /* threads that may run low jobs at once */
	int low_busy;             /* threads running a low job */
	int batching;             /* batches being queued: the low queue waits */
	struct span_ctx *reading; /* every store read of blocks under way */
	pthread_cond_t bulk_cv;   /* a bulk read paused in bulk_gate waits here */
	pthread_t *threads;
	int nthreads;
	bool stop;
};

static size_t fx_bucket(cis_block_id id)
{
	return (size_t)(id.lo ^ id.hi) % FX_BUCKETS;
}

static fetch *do_find(wrk_fx *fx, cis_block_id id)
{
	for (fetch *f = fx->table[fx_bucket(id)]; f; f = f->hnext)
		if (cis_block_id_eq(f->ref.id, id))
			return f;
	return NULL;
}

static void do_remove(wrk_fx *fx, fetch *f)
{
	fetch **pp = &fx->table[fx_bucket(f->ref.id)];

	for (; *pp; pp = &(*pp)->hnext)
		if (*pp == f) {
			*pp = f->hnext;
			fx->inflight--;
			return;
		}
}

static void do_enqueue(wrk_fx *fx, job *j, int prio)
{
	j->next = NULL;
	if (fx->q_tail[prio])
		fx->q_tail[prio]->next = j;
	else
		fx->q_head[prio] = j;
	fx->q_tail[prio] = j;
	fx->queued++;
	if (prio == WRK_PRIO_HIGH || !fx->batching)
		pthread_cond_signal(&fx->cv); /* else the batch's end wakes threads */
}

static void enqueue(wrk_fx *fx, job *j, int prio)
{
	pthread_mutex_lock(&fx->mu);
	do_enqueue(fx, j, prio);
	pthread_mutex_unlock(&fx->mu);
}

/* Take j out of queue prio. O(queue length). False if it is not there. */
static bool do_unqueue(wrk_fx *fx, job *j, int prio)
{
	job **pp, *prev = NULL;

	for (pp = &fx->q_head[prio]; *pp; prev = *pp, pp = &(*pp)->next)
		if (*pp == j) {
			*pp = j->next;
			if (fx->q_tail[prio] == j)
				fx->q_tail[prio] = prev;
			fx->queued--;
			return true;
		}
	return false;
}

/* Move a queued low-priority fetch to the high queue. */
static void do_upgrade(wrk_fx *fx, fetch *f)
{
	if (f->prio == WRK_PRIO_HIGH || !f->queued)
		return;
	if (do_unqueue(fx, f->queued, WRK_PRIO_LOW)) {
		f->prio = WRK_PRIO_HIGH;
		do_enqueue(fx, f->queued, WRK_PRIO_HIGH);
	}
}

/* head was just taken from its queue. Take with it the queued fetches of
 * the blocks that follow it in its object, as long as they are
 * consecutive, fetched from the store and within the span: span[0] = head,
 * the count returned. A span is no longer than the queue's share per
 * thread: while threads are idle, parallel requests are better than long
 * ones (a cloud store caps each connection's bandwidth). Caller holds
 * fx->mu. */
static size_t do_take_span(wrk_fx *fx, fetch *head, fetch **span)
{
	const wrk_ref *r = &head->ref;
	uint64_t nblocks = cis_block_count(r->file_size, r->block_size);
	uint64_t max = FX_SPAN_BYTES / r->block_size;
	int idle = fx->idle; /* threads that could take a share of the queue */
	if (head->prio == WRK_PRIO_LOW && idle > fx->low_max - fx->low_busy)
		idle = fx->low_max > fx->low_busy ? fx->low_max - fx->low_busy : 0;
	uint64_t share = (fx->queued + 1 + (size_t)idle) / ((size_t)idle + 1);
	size_t n = 1;

	span[0] = head;
	if (head->src_host || head->alone)
		return 1;
	if (max > FX_SPAN_MAX)
		max = FX_SPAN_MAX;
	if (max > share)
		max = share;
	while (n < max && r->index + n < nblocks) {
		cis_block_id id =
		    cis_block_id_make(r->mount_id, r->key, r->version, r->block_size, r->index + n);
		fetch *g = do_find(fx, id);

		if (!g || !g->queued || g->src_host || g->alone || g->ref.index != r->index + n ||
		    g->ref.file_size != r->file_size || strcmp(g->ref.key, r->key) != 0 ||
		    strcmp(g->ref.version, r->version) != 0 || !do_unqueue(fx, g->queued, g->prio))
			break;
		free(g->queued);
		g->queued = NULL;
		g->running = true;
		span[n++] = g;
	}
	return n;
}

static void reply_msg(Cis__ReadBlockReply *r, uint64_t total, uint64_t off, bool cached)
{
	cis__read_block_reply__init(r);
	r->total = total;
	r->offset = off;
	r->cached = cached;
}

/* Send [off, end) of the open block file fd, ending the reply. */
static int send_file_range(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr, int fd,
                           uint64_t off, uint64_t end, uint64_t total, bool cached, bool last)
{
	Cis__ReadBlockReply r;
	int rc = 0;

	if (off == end && last) {
		reply_msg(&r, total, off, cached);
		return cis_rpc_reply(conn, hdr, &r.base, 0);
	}
	while (off < end) {
		size_t n = end - off > WRK_STREAM_CHUNK ? WRK_STREAM_CHUNK : (size_t)(end - off);
		uint8_t fl = (off + n < end || !last) ? CIS_FRAME_MORE : 0;

		reply_msg(&r, total, off, cached);
		rc = cis_rpc_reply_file(conn, hdr, &r.base, fd, (off_t)off, n, fl);
		if (rc < 0)
			break;
		cis_counter_add(w->m.served_remote, n);
		off += n;
	}
	return rc;
}

/* A send of block bytes to conn failed with rc. The reply functions send
 * whole frames or nothing, so the stream is still well formed: while the
 * connection is open, end it with an error (else the reader would wait for
 * bytes that never come, time out and take this worker for dead). */
static void end_stream_on_send_error(cis_rpc_conn *conn, const cis_frame_hdr *hdr, int rc)
{
	if (cis_rpc_conn_open(conn))
		cis_rpc_reply_error(conn, hdr, rc, "worker: cannot send block bytes: %s",
		                    cis_strerror(rc));
}

static waiter *new_stream_waiter(cis_rpc_conn *conn, const cis_frame_hdr *hdr, uint64_t off,
                                 uint64_t end)
{
	waiter *wt = calloc(1, sizeof(*wt));

	if (!wt)
		return NULL;
	wt->kind = W_STREAM;
	wt->conn = conn;
	cis_rpc_conn_ref(conn);
	wt->hdr = *hdr;
	wt->off = wt->sent = off;
	wt->end = end;
	wt->total = end - off;
	return wt;
}

/* Send streaming waiters what the fetch now has. Caller holds fx->mu. */
static void do_flush(wrk_fx *fx, fetch *f, bool final)
{
	waiter **pp = &f->waiters;

	while (*pp) {
		waiter *wt = *pp;
		uint64_t avail;

		if (wt->kind != W_STREAM) {
			pp = &wt->next;
			continue;
		}
		if (!cis_rpc_conn_open(wt->conn)) {
			*pp = wt->next;
			cis_rpc_conn_unref(wt->conn);
			free(wt);
			continue;
		}
		avail = f->ondisk < wt->end ? f->ondisk : wt->end;
		if (avail > wt->sent &&
		    (final || avail == wt->end || avail - wt->sent >= WRK_STREAM_MIN)) {
			int rc = send_file_range(fx->w, wt->conn, &wt->hdr, f->fd, wt->sent, avail,
			                         wt->total, false, avail == wt->end);

			if (rc < 0) {
				end_stream_on_send_error(wt->conn, &wt->hdr, rc);
				avail = wt->end; /* the stream is over: forget it */
			}
			wt->sent = avail;
		}
		if (wt->sent == wt->end) {
			*pp = wt->next;
			cis_rpc_conn_unref(wt->conn);
			free(wt);
			continue;
		}
		pp = &wt->next;
	}
}

/* A fetch commits the block before it leaves the table (both in its
 * thread, the leaving under mu), so with mu held: no fetch in the table
 * and the block in the store means it landed since the caller looked.
 * Without this re-check a reader in that window would fetch it again. */
static bool do_cached_now(wrk_fx *fx, cis_block_id id)
{
	return !do_find(fx, id) && wrk_bs_has(fx->w->bs, id);
}

/* Create or join the fetch of ref. Caller holds fx->mu. NULL on ENOMEM. */
static fetch *do_get_fetch(wrk_fx *fx, const wrk_ref *ref, int prio, const Cis__WorkerInfo *src,
                           unsigned flags, bool *created)
{
	fetch *f = do_find(fx, ref->id);
	job *j;

	*created = false;
	if (f) {
		cis_counter_inc(fx->w->m.single_flight_joins);
		if (prio == WRK_PRIO_HIGH) {
			do_upgrade(fx, f);
			/* Running: should its span fail, it goes back to the
			 * high queue (requeue_alone), not behind the loads. */
			f->prio = WRK_PRIO_HIGH;
			f->read |= !(flags & WRK_FETCH_COLD); /* a replica reads nothing */
		}
		f->pin |= (flags & WRK_FETCH_PIN) != 0;
		if (!(flags & WRK_FETCH_COLD) && f->cold) {
			/* O_DIRECT or not was decided when the fill started;
			 * a bulk read paused in bulk_gate now goes on. */
			/* (read unlocked by the fill's stage_due) */
			__atomic_store_n(&f->cold, false, __ATOMIC_RELAXED);
			if (f->running)
				pthread_cond_broadcast(&fx->bulk_cv);
		}
		return f;
	}
	f = calloc(1, sizeof(*f));
	j = calloc(1, sizeof(*j));
	if (!f || !j || wrk_ref_copy(&f->ref, ref) < 0) {
		free(f);
		free(j);
		return NULL;
	}
	f->len = wrk_ref_len(ref);
	f->prio = prio;
	f->read = prio == WRK_PRIO_HIGH && !(flags & WRK_FETCH_COLD);
	f->pin = (flags & WRK_FETCH_PIN) != 0;
	f->cold = (flags & WRK_FETCH_COLD) != 0;
	f->fd = -1;
	f->dfd = -1;
	f->dir = -1;
	if (src && src->host && src->host[0] && src->rpc_port) {
		f->src_host = strdup(src->host);
		f->src_port = (uint16_t)src->rpc_port;
	}
	j->kind = J_FILL;
	j->f = f;
	f->queued = j;
	f->hnext = fx->table[fx_bucket(ref->id)];
	fx->table[fx_bucket(ref->id)] = f;
	fx->inflight++;
	do_enqueue(fx, j, prio);
	*created = true;
	return f;
}

static void queue_direct(wrk_fx *fx, const wrk_ref *ref, cis_rpc_conn *conn,
                         const cis_frame_hdr *hdr, uint64_t off, uint64_t end, uint64_t total)
{
	job *j = calloc(1, sizeof(*j));

	if (!j || wrk_ref_copy(&j->ref, ref) < 0) {
		free(j);
		cis_rpc_reply_error(conn, hdr, -ENOMEM, "worker out of memory");
		return;
	}
	j->kind = J_DIRECT;
	j->conn = conn;
	cis_rpc_conn_ref(conn);
	j->hdr = *hdr;
	j->off = off;
	j->end = end;
	j->total = total;
	enqueue(fx, j, WRK_PRIO_HIGH);
}

void wrk_fx_read(wrk_fx *fx, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const wrk_ref *ref,
                 uint64_t off, uint64_t len)
{
	wrk *w = fx->w;
	uint64_t blen = wrk_ref_len(ref), end;
	wrk_blk_info info;
	fetch *f;
	waiter *wt;
	bool created;

	if (off > blen) {
		cis_rpc_reply_error(
		    conn, hdr, -EINVAL,
		    "read offset %" PRIu64 " past the end of a %" PRIu64 "-byte block", off, blen);
		return;
	}
	end = (len == 0 || len > blen - off) ? blen : off + len;
	if (end == off) {
		/* Nothing to send (an empty file, or the offset at the end):
		 * answer now; a waiter with nothing to wait for would never be. */
		Cis__ReadBlockReply r;

		reply_msg(&r, 0, off, wrk_bs_has(w->bs, ref->id));
		cis_rpc_reply(conn, hdr, &r.base, 0);
		return;
	}

again:
	if (wrk_bs_acquire(w->bs, ref->id, true, &info) == 0) {
		int fd, rc;
		struct stat st;

		if (!info.verified) {
			job *j = calloc(1, sizeof(*j));

			wrk_bs_release(w->bs, info.blk);
			if (!j || wrk_ref_copy(&j->ref, ref) < 0) {
				free(j);
				cis_rpc_reply_error(conn, hdr, -ENOMEM, "worker out of memory");
				return;
			}
			j->kind = J_VERIFY_READ;
			j->conn = conn;
			cis_rpc_conn_ref(conn);
			j->hdr = *hdr;
			j->off = off;
			j->end = len;
			enqueue(fx, j, WRK_PRIO_HIGH);
			return;
		}
		/* The block must be as long as the reference says: the id does
		 * not cover the file size, so a block cached for a reference
		 * with another one is taken for corrupt, dropped and fetched
		 * again. */
		fd = info.len == blen ? open(info.path, O_RDONLY | O_CLOEXEC) : -1;
		/* The bytes go out later with sendfile, on the connection's
		 * thread, where a read error could only cut the connection
		 * (the reader would take this worker for dead, and every
		 * later read of the block would do the same): the range is
		 * read first, and a file that fails it is dropped below. */
		int unreadable = 0;
		if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == info.len &&
		    (unreadable = cis_file_range_readable(fd, off, end)) == 0) {
			cis_counter_inc(w->m.hits);
			rc = send_file_range(w, conn, hdr, fd, off, end, end - off, true, true);
			if (rc < 0)
				end_stream_on_send_error(conn, hdr, rc);
			close(fd);
			wrk_bs_release(w->bs, info.blk);
			return;
		}
		if (fd < 0 && info.len == blen && wrk_short_of_resources(errno)) {
			int e = errno;
			wrk_bs_release(w->bs, info.blk);
			cis_rpc_reply_error(conn, hdr, -e, "cannot open the cached block now: %s",
			                    strerror(e));
			return;
		}
		if (unreadable && wrk_short_of_resources(-unreadable)) {
			/* The worker's want, not the file's fault: the block stays. */
			close(fd);
			wrk_bs_release(w->bs, info.blk);
			cis_rpc_reply_error(conn, hdr, unreadable,
			                    "cannot read the cached block now: %s",
			                    cis_strerror(unreadable));
			return;
		}
		/* Deleted, truncated or unreadable (a failing disk) behind our
		 * back, or of another length than the reference's: drop it,
		 * fetch again. */
		cis_log_limited(CIS_LOG_WARN, "worker:block-file-bad", 10,
		                "cached block file missing, unreadable or of the wrong length, "
		                "fetching again",
		                "path=%s err=\"%s\" indexed=%" PRIu64 " wanted=%" PRIu64, info.path,
		                info.len != blen ? "indexed length is not the reference's"
		                : fd < 0         ? strerror(errno)
		                : unreadable     ? cis_strerror(unreadable)
		                                 : "file size is not the indexed length",
		                info.len, blen);
		if (fd >= 0)
			close(fd);
		wrk_bs_drop_held(w->bs, info.blk,
		                 unreadable ? "file unreadable"
		                            : "file missing or of the wrong length");
		wrk_bs_release(w->bs, info.blk);
	}

	cis_counter_inc(w->m.misses);
	wt = new_stream_waiter(conn, hdr, off, end);
	if (!wt) {
		cis_rpc_reply_error(conn, hdr, -ENOMEM, "worker out of memory");
		return;
	}
	pthread_mutex_lock(&fx->mu);
	if (do_cached_now(fx, ref->id)) {
		pthread_mutex_unlock(&fx->mu);
		cis_rpc_conn_unref(wt->conn);
		free(wt);
		goto again;
	}
	f = do_get_fetch(fx, ref, WRK_PRIO_HIGH, NULL, 0, &created);
	if (!f) {
		pthread_mutex_unlock(&fx->mu);
		cis_rpc_conn_unref(wt->conn);
		free(wt);
		cis_rpc_reply_error(conn, hdr, -ENOMEM, "worker out of memory");
		return;
	}
	if (f->len != blen) {
		/* The fetch under way is for a reference of this id with
		 * another file size (the id does not cover it), so another
		 * length: it cannot be trusted for this reader's bytes. */
		pthread_mutex_unlock(&fx->mu);
		cis_rpc_conn_unref(wt->conn);
		free(wt);
		queue_direct(fx, ref, conn, hdr, off, end, end - off);
		return;
	}
	wt->next = f->waiters;
	f->waiters = wt;
	if (f->fd >= 0 && f->ondisk > off)
		do_flush(fx, f, true);
	pthread_mutex_unlock(&fx->mu);
}

bool wrk_fx_ensure(wrk_fx *fx, const wrk_ref *ref, int prio, const Cis__WorkerInfo *source,
                   unsigned flags, wrk_done_fn done, void *arg)
{
	wrk_blk_info info;
	waiter *wt;
	fetch *f;
	bool created;

	bool hit = wrk_bs_acquire(fx->w->bs, ref->id, false, &info) == 0;

	if (hit && info.len != wrk_ref_len(ref)) {
		/* Cached for a reference with another file size (the id does
		 * not cover it): corrupt for this one. Drop it, fetch again. */
		wrk_bs_drop_held(fx->w->bs, info.blk, "indexed length is not the reference's");
		wrk_bs_release(fx->w->bs, info.blk);
	} else if (hit) {
		bool ok = info.verified;

		/* Pinned while held: released first, it could be evicted
		 * before the pin and reported cached all the same. */
		if (ok && (flags & WRK_FETCH_PIN))
			wrk_bs_pin(fx->w->bs, ref->id, true);
		wrk_bs_release(fx->w->bs, info.blk);
		if (ok)
			return true;
		job *j = calloc(1, sizeof(*j));

		if (!j || wrk_ref_copy(&j->ref, ref) < 0) {
			free(j);
			done(arg, -ENOMEM, 0, NULL);
			return false;
		}
		j->kind = J_VERIFY_ENSURE;
		j->done = done;
		j->arg = arg;
		j->prio = prio;
		j->flags = flags;
		enqueue(fx, j, prio);
		return false;
	}
	wt = calloc(1, sizeof(*wt));
	if (!wt) {
		done(arg, -ENOMEM, 0, NULL);
		return false;
	}
	wt->kind = W_DONE;
	wt->done = done;
	wt->arg = arg;
	pthread_mutex_lock(&fx->mu);
	if (do_cached_now(fx, ref->id)) {
		pthread_mutex_unlock(&fx->mu);
		free(wt);
		return wrk_fx_ensure(fx, ref, prio, source, flags, done, arg);
	}
	f = do_get_fetch(fx, ref, prio, source, flags, &created);
	if (!f) {
		pthread_mutex_unlock(&fx->mu);
		free(wt);
		done(arg, -ENOMEM, 0, NULL);
		return false;
	}
	if (f->len != wrk_ref_len(ref)) {
		/* As in wrk_fx_read: a fetch for a reference of another file
		 * size (so another length) does not fill this one's block. */
		pthread_mutex_unlock(&fx->mu);
		free(wt);
		cis_errmsg em = {{0}};
		cis_fail(&em, -EAGAIN, "a fetch of this block for another file size is under way");
		done(arg, -EAGAIN, 0, &em);
		return false;
	}
	wt->next = f->waiters;
	f->waiters = wt;
	pthread_mutex_unlock(&fx->mu);
	return false;
}

void wrk_fx_batch_begin(wrk_fx *fx)
{
	pthread_mutex_lock(&fx->mu);
	fx->batching++;
	pthread_mutex_unlock(&fx->mu);
}

void wrk_fx_batch_end(wrk_fx *fx)
{
	pthread_mutex_lock(&fx->mu);
	/* Wake as many threads as there are jobs, not all of them: a batch of
	 * blocks already cached (a warm prefetch) wakes none. */
	if (--fx->batching == 0 && fx->q_head[WRK_PRIO_LOW])
		for (size_t i = 0; i < fx->queued && i < (size_t)fx->idle; i++)
			pthread_cond_signal(&fx->cv);
	pthread_mutex_unlock(&fx->mu);
}

int wrk_fx_background_busy(wrk_fx *fx)
{
	int n;

	pthread_mutex_lock(&fx->mu);
	n = fx->low_busy;
	pthread_mutex_unlock(&fx->mu);
	return n;
}

uint64_t wrk_fx_inflight(wrk_fx *fx)
{
	uint64_t n;

	pthread_mutex_lock(&fx->mu);
	n = fx->inflight;
	pthread_mutex_unlock(&fx->mu);
	return n;
}

/* ---- the fill job ---- */

typedef struct fill_ctx {
	wrk_fx *fx;
	fetch *f;
} fill_ctx;

/* Write len bytes at off: all of them, or the error. */
static int write_all(int fd, const char *p, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ENOSPC;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Write the first n bytes of f's stage out at off: a cold fill's whole
 * pages past the page cache, the rest through it. A file system that
 * refuses O_DIRECT (EINVAL: tmpfs before 6.6, an odd alignment) gets the
 * rest of the fill through the page cache. */
static int stage_out(fetch *f, uint64_t off, size_t n)
{
	size_t whole = f->dfd >= 0 ? n & ~(size_t)(FX_DIO_ALIGN - 1) : 0;
	int rc = 0;

	if (whole) {
		rc = write_all(f->dfd, f->stage, whole, off);
		if (rc == -EINVAL) {
			close(f->dfd);
			f->dfd = -1;
			whole = 0;
			rc = 0;
		}
	}
	if (rc == 0 && n > whole)
		rc = write_all(f->fd, f->stage + whole, n - whole, off + whole);
	return rc;
}

/* How many of the staged bytes go out now: all of them when the stage
 * reaches its boundary (full) or the block's end (last); for a fill
 * readers wait on, the whole pages of bytes that came in a while ago
 * (a cold fill a reader joined too: it writes 1 MiB pieces, and a reader
 * would otherwise see nothing while the store stalls mid-piece); else
 * none. */
static size_t stage_due(const fetch *f, bool full, bool last)
{
	if (full || last)
		return f->staged;
	bool waited_on = f->dfd < 0 || !__atomic_load_n(&f->cold, __ATOMIC_RELAXED);
	if (waited_on && cis_mono_ns() - f->staged_ns >= FX_HOT_WAIT)
		return f->staged & ~(size_t)(FX_DIO_ALIGN - 1);
	return 0;
}

/* Write the first out bytes of the stage at *ondisk, advance it and keep
 * the rest (less than a page) for the next write. */
static int stage_write(fetch *f, size_t out, uint64_t *ondisk)
{
	int rc = stage_out(f, *ondisk, out);

	if (rc < 0)
		return rc;
	*ondisk += out;
	f->staged -= out;
	if (f->staged) {
		memmove(f->stage, f->stage + out, f->staged);
		f->staged_ns = cis_mono_ns();
	}
	return 0;
}

/* Copy into the stage and write out what is due. The stage ends at
 * multiples of its size in the block, so the writes after a partial one
 * are aligned again. The new count of bytes in the file goes to *ondisk. */
static int stage_bytes(fetch *f, const char *p, size_t len, uint64_t *ondisk)
{
	bool last = f->filled + len == f->len;

	while (len) {
		size_t size = f->dfd >= 0 ? FX_STAGE : FX_HOT_STAGE;
		size_t room = size - (size_t)(*ondisk % size) - f->staged;
		size_t take = room < len ? room : len;
		size_t out;
		int rc;

		if (f->staged == 0)
			f->staged_ns = cis_mono_ns();
		memcpy(f->stage + f->staged, p, take);
		f->staged += take;
		p += take;
		len -= take;
		out = stage_due(f, take == room, last && len == 0);
		if (out == 0)
			continue; /* len is 0: the stage had room for it all */
		rc = stage_write(f, out, ondisk);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The store is quiet (a tick of the sink): write out what is due of the
 * stage without waiting for its next bytes. */
static int stage_tick(fetch *f, uint64_t *ondisk)
{
	size_t out = f->staged ? stage_due(f, false, false) : 0;

	return out ? stage_write(f, out, ondisk) : 0;
}

/* The next len bytes of the block: into the file (through the stage),
 * then to streaming waiters. */
static int fill_write(void *arg, const void *data, size_t len)
{
	fill_ctx *c = arg;
	fetch *f = c->f;
	uint64_t ondisk = f->filled + len;
	int rc;

	if (f->filled + len > f->len)
		return -CIS_E_STORE; /* the store sent more than the block holds */
	cis_checksum_update(f->cs, data, len);
	if (f->stage) {
		ondisk = f->ondisk;
		rc = len ? stage_bytes(f, data, len, &ondisk) : stage_tick(f, &ondisk);
	} else {
		rc = write_all(f->fd, data, len, f->filled);
	}
	if (rc < 0) {
		f->local_err = -rc;
		return rc;
	}
	f->filled += len; /* only this thread reads it */
	/* Readers see what is in the file: nothing new for them while the
	 * bytes sit in the stage, so no lock until the stage is out. */
	if (ondisk == f->ondisk)
		return 0;
	pthread_mutex_lock(&c->fx->mu);
	f->ondisk = ondisk;
	do_flush(c->fx, f, false);
	pthread_mutex_unlock(&c->fx->mu);
	return 0;
}

typedef struct peer_ctx {
	fill_ctx *fc;
	int rc;
} peer_ctx;

static int peer_frame(void *arg, const cis_frame_hdr *hdr, const uint8_t *msg, const uint8_t *data)
{
	peer_ctx *pc = arg;
	Cis__ReadBlockReply *r = NULL;
	int rc;

	if (hdr->flags & CIS_FRAME_ERROR)
		return -CIS_E_STORE;
	if (cis_msg_unpack(&cis__read_block_reply__descriptor, msg, hdr->msg_len,
	                   (ProtobufCMessage **)&r) < 0)
		return -CIS_E_PROTO;
	rc = r->offset == pc->fc->f->filled ? 0 : -CIS_E_PROTO;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	if (rc == 0 && hdr->data_len)
		rc = fill_write(pc->fc, data, hdr->data_len);
	pc->rc = rc;
	return rc;
}

/* Copy the block from a peer worker over its RPC. */
static int fill_from_peer(wrk *w, fill_ctx *fc, cis_errmsg *em)
{
	fetch *f = fc->f;
	cis_rpc_client_opts o = {.host = f->src_host,
	                         .port = f->src_port,
	                         .name = "cistern-worker",
	                         .connect_timeout_ms = 2000,
	                         .call_timeout_ms = 60000};
	cis_rpc_client *cl;
	Cis__ReadBlockRequest req = CIS__READ_BLOCK_REQUEST__INIT;
	Cis__BlockRef br;
	uint8_t idb[16];
	peer_ctx pc = {fc, 0};
	int rc;

	(void)w;
	rc = cis_rpc_client_new(&o, &cl);
	if (rc < 0)
		return cis_fail(em, rc, "peer %s:%u: %s", f->src_host, f->src_port,
		                cis_strerror(rc));
	wrk_ref_to_proto(&f->ref, &br, idb);
	req.block = &br;
	rc = cis_rpc_call_stream(cl, CIS_MSG_WORKER_READ_BLOCK, &req.base, peer_frame, &pc, 0, em);
	cis_rpc_client_free(cl);
	if (rc == 0 && f->filled != f->len)
		rc = cis_fail(em, -CIS_E_PROTO, "peer %s:%u sent %" PRIu64 " of %" PRIu64 " bytes",
		              f->src_host, f->src_port, f->filled, f->len);
	if (rc == 0) {
		cis_counter_add(w->m.peer_bytes, f->len);
		f->from_peer = true;
	}
	return rc;
}

static bool is_local_err(int e)
{
	return e == ENOSPC || e == EROFS || e == EIO || e == ENOENT || e == EACCES || e == EDQUOT ||
	       e == EPERM || e == ESTALE || e == ENOTDIR;
}

static void finish(wrk_fx *fx, fetch *f, int rc, bool local, const cis_errmsg *em)
{
	unsigned flags = (local ? WRK_DONE_LOCAL : 0) | (f->from_peer ? WRK_DONE_PEER : 0);

	wrk *w = fx->w;
	waiter *list, *wt, *next;

	pthread_mutex_lock(&fx->mu);
	if (rc == 0)
		do_flush(fx, f, true);
	do_remove(fx, f);
	list = f->waiters;
	f->waiters = NULL;
	/* A pin that joined after the block was committed (unpinned): no
	 * later one can join now. */
	bool pin_late = rc == 0 && f->pin && !f->committed_pinned;
	pthread_mutex_unlock(&fx->mu);
	if (pin_late)
		(void)wrk_bs_pin(w->bs, f->ref.id, true);
	if (f->fd >= 0)
		close(f->fd);
	if (f->dfd >= 0)
		close(f->dfd);
	cis_histogram_observe(w->m.fetch_seconds, (double)(cis_mono_ns() - f->start_ns) / 1e9);
	for (wt = list; wt; wt = next) {
		next = wt->next;
		if (wt->kind == W_STREAM) {
			if (rc == 0 && wt->sent < wt->end)
				rc = -CIS_E_INTERNAL; /* cannot happen: flushed above */
			if (rc < 0 && local && cis_rpc_conn_open(wt->conn))
				queue_direct(fx, &f->ref, wt->conn, &wt->hdr, wt->sent, wt->end,
				             wt->total);
			else if (rc < 0)
				cis_rpc_reply_error(wt->conn, &wt->hdr, rc, "%s",
				                    cis_errmsg_or(em, rc));
			cis_rpc_conn_unref(wt->conn);
		} else {
			wt->done(wt->arg, rc, flags, em);
		}
		free(wt);
	}
	wrk_ref_free(&f->ref);
	free(f->src_host);
	cis_checksum_free(f->cs);
	free(f);
}

/* Everything a fill needs before bytes come: a checksum, the mount (the
 * reference checked against it before anything is cached under its id)
 * and a temporary file in the dir with the most free space (a dir that
 * fails is skipped for the next). On failure f is finished: false. */
static bool fill_prepare(wrk_fx *fx, fetch *f, cis_ufs **ufs)
{
	wrk *w = fx->w;
	cis_errmsg em = {{0}};
	char hex[CIS_BLOCK_ID_HEX];
	int rc, tries;

	f->start_ns = cis_mono_ns();
	f->cs = cis_checksum_new();
	if (!f->cs) {
		finish(fx, f, -ENOMEM, false, NULL);
		return false;
	}
	rc = wrk_link_check_ref(w->link, &f->ref, ufs, &em);
	if (rc < 0) {
		if (rc == -EINVAL)
			cis_counter_inc(w->m.bad_requests);
		else
			cis_counter_inc(w->m.store_errors);
		finish(fx, f, rc, false, &em);
		return false;
	}
	for (tries = 0, rc = -ENOSPC; tries < WRK_MAX_DIRS; tries++) {
		int fd;

		rc = wrk_bs_reserve(w->bs, f->len, &f->dir);
		if (rc < 0)
			break;
		fd = wrk_bs_create_tmp(w->bs, f->dir, f->ref.id, f->tmp, sizeof(f->tmp));
		if (fd >= 0) {
			bool cold;

			pthread_mutex_lock(&fx->mu);
			f->fd = fd;
			cold = f->cold;
			pthread_mutex_unlock(&fx->mu);
			/* Where O_DIRECT is refused, the fill goes through
			 * the page cache like any other. */
			if (cold && f->stage)
				f->dfd = open(f->tmp, O_WRONLY | O_DIRECT | O_CLOEXEC);
			return true;
		}
		wrk_bs_unreserve(w->bs, f->dir, f->len);
		rc = fd;
		f->dir = -1;
	}
	cis_block_id_fmt(f->ref.id, hex);
	cis_log_limited(CIS_LOG_WARN, "worker:nocache", 60,
	                "no cache room for a block, serving it from the store uncached",
	                "block=%s err=\"%s\"", hex, cis_strerror(rc));
	cis_fail(&em, rc, "cache: %s", cis_strerror(rc));
	finish(fx, f, rc, true, &em);
	return false;
}

/* The bytes are in (rc 0) or the fill failed with rc: commit or clean up,
 * and finish f. */
static void fill_complete(wrk_fx *fx, fetch *f, int rc, cis_errmsg *em)
{
	wrk *w = fx->w;
	bool local = false;
	char hex[CIS_BLOCK_ID_HEX];

	if (rc == 0 && f->filled != f->len)
		rc = cis_fail(em, -CIS_E_CHANGED,
		              "%s: short read (%" PRIu64 " of %" PRIu64
		              " bytes): the object changed",
		              f->ref.key, f->filled, f->len);
	if (f->local_err) {
		rc = -f->local_err;
		local = true;
		wrk_bs_dir_error(w->bs, f->dir, rc, "write");
		cis_fail(em, rc, "cache write: %s", cis_strerror(rc));
	} else if (rc < 0 && rc != -ECANCELED) { /* ECANCELED: abandoned at a stop */
		cis_counter_inc(w->m.store_errors);
		cis_block_id_fmt(f->ref.id, hex);
		cis_log_limited(CIS_LOG_WARN, "worker:fetch", 10, "block fetch failed",
		                "block=%s key=%s err=\"%s\"", hex, f->ref.key,
		                cis_errmsg_or(em, rc));
	}
	if (rc < 0) {
		unlink(f->tmp);
		wrk_bs_unreserve(w->bs, f->dir, f->len);
		finish(fx, f, rc, local, em);
		return;
	}
	/* Every streaming waiter gets its last bytes before the rename. */
	pthread_mutex_lock(&fx->mu);
	do_flush(fx, f, true);
	f->committed_pinned = f->pin; /* f->pin changes under mu (a pin joining) */
	bool read = f->read;
	pthread_mutex_unlock(&fx->mu);
	rc = wrk_bs_commit(w->bs, f->dir, f->ref.id, f->len, cis_checksum_digest(f->cs), f->tmp,
	                   f->committed_pinned, read);
	if (rc < 0) {
		cis_fail(em, rc, "cache commit: %s", cis_strerror(rc));
		local = is_local_err(-rc);
	}
	finish(fx, f, rc, local, em);
}

/* ---- a span of consecutive blocks in one store read ---- */

/* A store read of blocks f[0..n) (consecutive, of one object), on
 * fx->reading while under way. */
typedef struct span_ctx {
	wrk_fx *fx;
	fetch **f;
	size_t n, cur; /* f[cur] takes the next bytes */
	struct span_ctx *next;
	bool paused; /* waiting in bulk_gate (under mu) */
	bool wanted; /* seen wanted (do_wanted) once: it stays so (only its thread reads it) */
} span_ctx;

static void reading_begin(span_ctx *sc)
{
	wrk_fx *fx = sc->fx;

	pthread_mutex_lock(&fx->mu);
	sc->next = fx->reading;
	fx->reading = sc;
	pthread_cond_broadcast(&fx->bulk_cv); /* a read for readers lets one more bulk read go */
	pthread_mutex_unlock(&fx->mu);
}

static void reading_end(span_ctx *sc)
{
	wrk_fx *fx = sc->fx;

	pthread_mutex_lock(&fx->mu);
	for (span_ctx **pp = &fx->reading; *pp; pp = &(*pp)->next)
		if (*pp == sc) {
			*pp = sc->next;
			break;
		}
	pthread_cond_broadcast(&fx->bulk_cv);
	pthread_mutex_unlock(&fx->mu);
}

/* Whether a reader or a prefetch wants a block sc reads; else it is a bulk
 * read (a load's or a replica's blocks only). Caller holds fx->mu. */
static bool do_wanted(const span_ctx *sc)
{
	for (size_t i = 0; i < sc->n; i++)
		if (!sc->f[i]->cold)
			return true;
	return false;
}

/* Bytes sc has still to read (only its thread changes them). */
static uint64_t span_left(const span_ctx *sc)
{
	uint64_t left = 0;

	for (size_t i = sc->cur; i < sc->n; i++)
		left += sc->f[i]->len - sc->f[i]->filled;
	return left;
}

/* Called by a bulk read before it takes more bytes: while reads for
 * readers run, at most as many bulk reads stream as they (at least one);
 * the rest wait here, between two pieces, with their connections' windows
 * closed, so the store's bandwidth goes to what readers wait for instead
 * of being split evenly over every stream of a load (a load of four
 * shards started together with a training epoch over them made the
 * epoch half a second longer: the reader's blocks came at a share of
 * the store among 16 load streams). A wait
 * ends when it may go, when a reader wants one of its blocks, or after
 * FX_BULK_PAUSE_MS (the read takes a piece then, so the connection is
 * never idle long enough for the store to drop it). A read with at most
 * FX_BULK_TAIL left finishes instead: pausing it would hold a thread and
 * a connection for little bandwidth (a load's small file costs the store
 * a request's latency, not its bandwidth). */
static void bulk_gate(span_ctx *sc)
{
	if (sc->wanted || span_left(sc) <= FX_BULK_TAIL)
		return;
	wrk_fx *fx = sc->fx;
	uint64_t until = cis_mono_ms() + FX_BULK_PAUSE_MS;
	bool counted = false;

	pthread_mutex_lock(&fx->mu);
	while (!fx->stop && !(sc->wanted = do_wanted(sc))) {
		size_t wanted = 0, streaming = 0;

		for (const span_ctx *r = fx->reading; r; r = r->next)
			if (r != sc && do_wanted(r))
				wanted++;
			else if (r != sc && !r->paused)
				streaming++;
		uint64_t now = cis_mono_ms();

		if (wanted == 0 || streaming < wanted || now >= until)
			break;
		if (!counted)
			cis_counter_inc(fx->w->m.bulk_pauses);
		counted = true;
		sc->paused = true;
		cis_cond_wait_ms(&fx->bulk_cv, &fx->mu, until - now);
		sc->paused = false;
	}
	pthread_mutex_unlock(&fx->mu);
}

static int span_write(void *arg, const void *data, size_t len)
{
	span_ctx *sc = arg;
	const char *p = data;

	if (len)
		bulk_gate(sc);
	if (len == 0 && sc->cur < sc->n) { /* a tick: to the block filling now */
		fill_ctx fc = {sc->fx, sc->f[sc->cur]};
		return fill_write(&fc, p, 0);
	}
	while (len) {
		if (sc->cur == sc->n)
			return -CIS_E_STORE; /* more than the span holds */
		fetch *f = sc->f[sc->cur];
		fill_ctx fc = {sc->fx, f};
		size_t take = f->len - f->filled < len ? (size_t)(f->len - f->filled) : len;
		int rc = fill_write(&fc, p, take);

		if (rc < 0)
			return rc;
		p += take;
		len -= take;
		if (f->filled == f->len)
			sc->cur++;
	}
	return 0;
}

/* Read blocks f[0..n) (prepared, consecutive, of one object) from the
 * store with one ranged read into their files: the store's result. */
static int store_read(wrk_fx *fx, cis_ufs *ufs, fetch **f, size_t n, uint64_t *got, cis_errmsg *em)
{
	span_ctx sc = {.fx = fx, .f = f, .n = n};
	const wrk_ref *r = &f[0]->ref;
	uint64_t len = 0;
	int rc;

	for (size_t i = 0; i < n; i++)
		len += f[i]->len;
	cis_counter_inc(fx->w->m.store_reads);
	reading_begin(&sc);
	rc = cis_ufs_read(ufs, r->key, r->version, r->index * r->block_size, len, span_write, &sc,
	                  got, em);
	reading_end(&sc);
	cis_counter_add(fx->w->m.store_bytes, *got);
	return rc;
}

static void run_fill(wrk_fx *fx, fetch *f, char *stage)
{
	wrk *w = fx->w;
	fill_ctx fc = {fx, f};
	cis_errmsg em = {{0}};
	cis_ufs *ufs = NULL;
	uint64_t got = 0;
	int rc = 0;

	f->stage = stage;
	if (!fill_prepare(fx, f, &ufs))
		return;
	if (f->src_host) {
		rc = fill_from_peer(w, &fc, &em);
		if (rc < 0 && !f->local_err) {
			char hex[CIS_BLOCK_ID_HEX];

			cis_block_id_fmt(f->ref.id, hex);
			cis_log_limited(CIS_LOG_WARN, "worker:peer", 30,
			                "copy from peer failed, fetching from the store",
			                "block=%s err=\"%s\"", hex, cis_errmsg_or(&em, rc));
			pthread_mutex_lock(&fx->mu);
			f->filled = 0; /* the same bytes will be written again */
			f->ondisk = 0;
			f->staged = 0;
			pthread_mutex_unlock(&fx->mu);
			cis_checksum_reset(f->cs);
			em.text[0] = 0;
			free(f->src_host);
			f->src_host = NULL;
			rc = 0;
		}
	}
	if (rc == 0 && !f->src_host)
		rc = store_read(fx, ufs, &f, 1, &got, &em);
	fill_complete(fx, f, rc, &em);
}

/* Put f, which has no bytes yet (prepared or not), back in its queue to
 * be fetched alone. */
static void requeue_alone(wrk_fx *fx, fetch *f)
{
	job *j = calloc(1, sizeof(*j));
	int fd = f->fd;

	if (fd >= 0) {
		unlink(f->tmp);
		wrk_bs_unreserve(fx->w->bs, f->dir, f->len);
		pthread_mutex_lock(&fx->mu);
		f->fd = -1;
		pthread_mutex_unlock(&fx->mu);
		close(fd);
	}
	if (f->dfd >= 0)
		close(f->dfd);
	f->dfd = -1;
	f->stage = NULL;
	cis_checksum_free(f->cs);
	f->cs = NULL;
	f->dir = -1;
	f->alone = true;
	if (!j) {
		finish(fx, f, -ENOMEM, false, NULL);
		return;
	}
	j->kind = J_FILL;
	j->f = f;
	pthread_mutex_lock(&fx->mu);
	f->running = false;
	f->queued = j;
	do_enqueue(fx, j, f->prio);
	pthread_mutex_unlock(&fx->mu);
}

/* Fill span[0..n) (consecutive blocks of one object, all running) with
 * one ranged store read. A block complete when the read fails is kept; the
 * one it failed in fails; those after it, with no bytes yet, go back to
 * the queue to be fetched alone (their failure may not be theirs). */
static void run_fill_span(wrk_fx *fx, fetch **span, size_t n, char *stage)
{
	cis_errmsg em = {{0}};
	cis_ufs *ufs = NULL;
	uint64_t got = 0;
	size_t ready = 0;
	int rc;

	/* The span ends at the first block that cannot be prepared (it is
	 * finished); the ones after it are fetched alone. */
	for (size_t i = 0; i < n; i++)
		span[i]->stage = stage; /* one at a time: each block fills in turn */
	while (ready < n && fill_prepare(fx, span[ready], &ufs))
		ready++;
	for (size_t i = ready + 1; i < n; i++)
		requeue_alone(fx, span[i]);
	if (ready == 0)
		return;
	rc = store_read(fx, ufs, span, ready, &got, &em);
	for (size_t i = 0; i < ready; i++) {
		fetch *f = span[i];

		if (f->filled == f->len && !f->local_err)
			fill_complete(fx, f, 0, &em);
		else if (rc < 0 && f->filled == 0 && !f->local_err && i > 0)
			requeue_alone(fx, f);
		else
			fill_complete(fx, f, rc, &em);
	}
}

/* ---- direct (uncached) reads ---- */

typedef struct direct_ctx {
	wrk *w;
	job *j;
	uint64_t pos; /* block offset of buf[0] */
	char *buf;
	size_t n;
	int send_err; /* a reply frame could not be sent: this error */
} direct_ctx;

/* Send what buf holds. 0; -CIS_E_CLOSED when the reader is gone; or the
 * send's error (d->send_err) with the connection still open, for the
 * caller to end the stream with. */
static int direct_flush(direct_ctx *d, bool last)
{
	Cis__ReadBlockReply r;
	int rc;

	reply_msg(&r, d->j->total, d->pos, false);
	rc = cis_rpc_reply_data(d->j->conn, &d->j->hdr, &r.base, d->buf, d->n,
	                        last ? 0 : CIS_FRAME_MORE);
	if (!cis_rpc_conn_open(d->j->conn))
		return -CIS_E_CLOSED;
	if (rc < 0) {
		d->send_err = rc;
		return rc;
	}
	cis_counter_add(d->w->m.served_remote, d->n);
	d->pos += d->n;
	d->n = 0;
	return 0;
}

static int direct_sink(void *arg, const void *data, size_t len)
{
	direct_ctx *d = arg;
	const char *p = data;

	/* The store must not send more than asked: it would overrun the
	 * reply (and, with a full buffer at the end, spin here forever). */
	if (len > d->j->end - (d->pos + d->n))
		return -CIS_E_STORE;
	while (len) {
		size_t room = (1u << 20) - d->n, k = len < room ? len : room;
		int rc;

		memcpy(d->buf + d->n, p, k);
		d->n += k;
		p += k;
		len -= k;
		if (d->n == (1u << 20) && d->pos + d->n < d->j->end) {
			rc = direct_flush(d, false);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

static void run_direct(wrk_fx *fx, job *j)
{
	wrk *w = fx->w;
	direct_ctx d = {w, j, j->off, NULL, 0, 0};
	cis_errmsg em = {{0}};
	cis_ufs *ufs;
	uint64_t got = 0;
	int rc;

	cis_counter_inc(w->m.direct_reads);
	d.buf = malloc(1u << 20);
	if (!d.buf) {
		cis_rpc_reply_error(j->conn, &j->hdr, -ENOMEM, "worker out of memory");
		return;
	}
	rc = wrk_link_check_ref(w->link, &j->ref, &ufs, &em);
	if (rc == 0) {
		cis_counter_inc(w->m.store_reads);
		rc = cis_ufs_read(ufs, j->ref.key, j->ref.version,
		                  j->ref.index * j->ref.block_size + j->off, j->end - j->off,
		                  direct_sink, &d, &got, &em);
		cis_counter_add(w->m.store_bytes, got);
	}
	if (rc == 0 && d.pos + d.n != j->end)
		rc =
		    cis_fail(&em, -CIS_E_CHANGED, "%s: short read: the object changed", j->ref.key);
	if (rc == 0)
		rc = direct_flush(&d, true);
	if (d.send_err && rc != -CIS_E_CLOSED) {
		end_stream_on_send_error(j->conn, &j->hdr, d.send_err);
	} else if (rc < 0 && rc != -CIS_E_CLOSED) {
		cis_counter_inc(w->m.store_errors);
		cis_rpc_reply_error(j->conn, &j->hdr, rc, "%s", cis_errmsg_or(&em, rc));
	}
	free(d.buf);
}

/* ---- threads ---- */

/* Verify a cached block for a reader, unless another reader's verify got
 * there first or is under way (readers of one block after a restart queue
 * one each; wrk_bs_verify lets one read it). A block that fails, or whose
 * file cannot be read, is dropped by wrk_bs_verify, unless the process is
 * only short of descriptors or memory, or stopping (-ECANCELED): then the
 * block stays and the error is the reader's. */
static int verify_once(wrk *w, cis_block_id id)
{
	return wrk_bs_verify(w->bs, id, false);
}

static void run_job(wrk_fx *fx, job *j, char *stage)
{
	wrk *w = fx->w;
	int rc;

	switch (j->kind) {
	case J_FILL:
		run_fill(fx, j->f, stage);
		break;
	case J_DIRECT:
		run_direct(fx, j);
		break;
	case J_VERIFY_READ:
		rc = verify_once(w, j->ref.id);
		if (rc == -ECANCELED || wrk_short_of_resources(-rc)) {
			cis_rpc_reply_error(j->conn, &j->hdr, rc,
			                    "cannot verify the cached block now: %s",
			                    cis_strerror(rc));
			break;
		}
		/* Now verified (a hit) or gone (a miss). */
		wrk_fx_read(fx, j->conn, &j->hdr, &j->ref, j->off, j->end);
		break;
	case J_VERIFY_ENSURE:
		rc = verify_once(w, j->ref.id);
		if (rc == -ECANCELED || wrk_short_of_resources(-rc)) {
			cis_errmsg em = {{0}};
			cis_fail(&em, rc, "cannot verify the cached block now: %s",
			         cis_strerror(rc));
			j->done(j->arg, rc, 0, &em);
			break;
		}
		if (wrk_fx_ensure(fx, &j->ref, j->prio, NULL, j->flags, j->done, j->arg))
			j->done(j->arg, 0, 0, NULL);
		break;
	}
	if (j->conn)
		cis_rpc_conn_unref(j->conn);
	wrk_ref_free(&j->ref);
	free(j);
}

/* A thread may take a low job now. Caller holds fx->mu. */
static bool do_low_ready(const wrk_fx *fx)
{
	return fx->q_head[WRK_PRIO_LOW] && !fx->batching && fx->low_busy < fx->low_max;
}

static void *fx_thread(void *arg)
{
	wrk_fx *fx = arg;
	char *stage = NULL;

	/* Without it, fills write what comes in as it comes, through the page
	 * cache. */
	if (posix_memalign((void **)&stage, FX_DIO_ALIGN, FX_STAGE) != 0)
		stage = NULL;
	int p = WRK_PRIO_HIGH; /* the queue of the job this thread ran last */

	for (;;) {
		job *j;

		pthread_mutex_lock(&fx->mu);
		if (p == WRK_PRIO_LOW)
			fx->low_busy--; /* its low job is done: this thread may take the next */
		while (!fx->stop && !fx->q_head[WRK_PRIO_HIGH] && !do_low_ready(fx)) {
			fx->idle++;
			pthread_cond_wait(&fx->cv, &fx->mu);
			fx->idle--;
		}
		if (fx->stop) {
			pthread_mutex_unlock(&fx->mu);
			break;
		}
		p = fx->q_head[WRK_PRIO_HIGH] ? WRK_PRIO_HIGH : WRK_PRIO_LOW;
		j = fx->q_head[p];
		fx->q_head[p] = j->next;
		fx->queued--;
		if (!fx->q_head[p])
			fx->q_tail[p] = NULL;
		if (p == WRK_PRIO_LOW)
			fx->low_busy++;
		else if (do_low_ready(fx)) /* a slot this thread freed and did not take */
			pthread_cond_signal(&fx->cv);
		size_t nspan = 0;
		fetch *span[FX_SPAN_MAX];

		if (j->kind == J_FILL) {
			j->f->queued = NULL;
			j->f->running = true;
			nspan = do_take_span(fx, j->f, span);
		}
		pthread_mutex_unlock(&fx->mu);
		if (nspan > 1) {
			run_fill_span(fx, span, nspan, stage);
			free(j);
		} else {
			run_job(fx, j, stage);
		}
	}
	free(stage);
	return NULL;
}

int wrk_fx_start(wrk *w, int threads, int low_max, wrk_fx **out)
{
	wrk_fx *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -ENOMEM;
	fx->w = w;
	fx->low_max = low_max < 1 ? 1 : low_max > threads ? threads : low_max;
	pthread_mutex_init(&fx->mu, NULL);
	pthread_cond_init(&fx->cv, NULL);
	pthread_cond_init(&fx->bulk_cv, NULL);
	fx->threads = calloc((size_t)threads, sizeof(*fx->threads));
	if (!fx->threads) {
		free(fx);
		return -ENOMEM;
	}
	for (int i = 0; i < threads; i++) {
		if (pthread_create(&fx->threads[i], NULL, fx_thread, fx) != 0)
			break;
		fx->nthreads++;
	}
	if (fx->nthreads == 0) {
		free(fx->threads);
		free(fx);
		return -EAGAIN;
	}
	*out = fx;
	return 0;
}

void wrk_fx_stop(wrk_fx *fx)
{
	if (!fx)
		return;
	pthread_mutex_lock(&fx->mu);
	fx->stop = true;
	pthread_cond_broadcast(&fx->cv);
	pthread_cond_broadcast(&fx->bulk_cv);
	pthread_mutex_unlock(&fx->mu);
	for (int i = 0; i < fx->nthreads; i++)
		pthread_join(fx->threads[i], NULL);
	/* Queued jobs and their waiters are abandoned: the process is ending. */
	free(fx->threads);
}
