/* cistern-worker internals: the modules of the block cache and how they
 * share one worker context.
 *
 *   blockstore.c  cache dirs, block files (temp + rename), LMDB index,
 *                 reconcile on start, space reservation and eviction
 *   slru.c        the segmented LRU each dir evicts by (scan resistant)
 *   fetch.c       single-flight fetches from the store (or a peer), a pool of
 *                 fetch threads with two priorities, streaming to waiters
 *   serve.c       RPC handlers (TCP and Unix socket)
 *   local.c       leases of the short-circuit fds
 *   master_link.c register, heartbeats, block reports, GetMount cache
 *   deltas.c      the block changes held for the next heartbeat
 *   scrub.c       background checksum verification
 *   readahead.c   reading a Prefetch's cached blocks into the page cache
 *   ref.c         block references: validation, lengths, proto conversion
 *
 * Lock order: fetch table lock, then blockstore lock, then the link's
 * report lock (a leaf). The lease lock comes before the blockstore lock (a
 * renewal touches the block it keeps alive under it), so the blockstore
 * never calls into the leases. The read-ahead queue lock is a leaf, never
 * held across a blockstore call. No lock is held across a store read or an
 * RPC to the master. */
#ifndef CISTERN_WORKER_WORKER_H
#define CISTERN_WORKER_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "cistern/error.h"
#include "cistern/hash.h"
#include "cistern/metrics.h"
#include "cistern/rpc.h"
#include "cistern/ufs.h"
#include "cistern/proto/common.pb-c.h"
#include "cistern/proto/worker.pb-c.h"

#define WRK_MAX_DIRS          32
#define WRK_MAX_STATIC_MOUNTS 64           /* --mount, a standalone worker's mounts */
#define WRK_MAX_BLOCK_SIZE    (1ull << 30) /* largest block size accepted */
#define WRK_MAX_KEY           4096
#define WRK_STREAM_CHUNK      (4u << 20)   /* data per reply frame */
#define WRK_STREAM_MIN        (256u << 10) /* send a streamed frame once this much is in */
#define WRK_MAX_BATCH         65536        /* blocks per Prefetch/Load/Free/Pin request */
#define WRK_READ_AHEAD_MAX    (64u << 20)  /* cached bytes one Prefetch reads into memory */
#define WRK_READ_AHEAD_PIECE  (128u << 10) /* bytes asked for per WILLNEED */
/* Cached blocks of one Prefetch read ahead at most (blocks of 1 MiB or more). */
#define WRK_READ_AHEAD_BLOCKS (WRK_READ_AHEAD_MAX >> 20)
/* Uses of a block within this of the first use of a pass are that pass,
 * one use for eviction (a reader of a 4 MiB block asks for it in 1 MiB
 * reads); a use this long after it or later is a re-use: the block goes to
 * the protected segment, and a new pass starts. */
#define WRK_REUSE_MS        2000
#define WRK_DEFAULT_LEASE   30000
#define WRK_MAX_LEASE       600000
#define WRK_MAX_LEASES      262144
#define WRK_MAX_LEASE_BATCH 4095 /* more_lease_ids in one renew or release */

typedef struct wrk wrk;
typedef struct wrk_bs wrk_bs;
typedef struct wrk_fx wrk_fx;
typedef struct wrk_leases wrk_leases;
typedef struct wrk_link wrk_link;
typedef struct wrk_ra wrk_ra;

/* ---- ref.c ---- */

/* A block reference with its strings owned. */
typedef struct wrk_ref {
	cis_block_id id;
	uint64_t mount_id;
	char *key;
	char *version;
	uint64_t index;
	uint64_t block_size;
	uint64_t file_size;
} wrk_ref;

/* Validate p (id matches the hash of its fields, sizes sane) and copy it.
 * 0 or -EINVAL / -ENOMEM with em saying what is wrong. r is the caller's
 * (wrk_ref_free) on success only. */
int wrk_ref_from_proto(wrk_ref *r, const Cis__BlockRef *p, cis_errmsg *em);
int wrk_ref_copy(wrk_ref *dst, const wrk_ref *src);
void wrk_ref_free(wrk_ref *r);
/* Bytes in the block: min(block_size, file_size - index * block_size). */
uint64_t wrk_ref_len(const wrk_ref *r);
/* Fill p from r; p borrows r's strings and idbuf. */
void wrk_ref_to_proto(const wrk_ref *r, Cis__BlockRef *p, uint8_t idbuf[16]);
/* 0 or -EINVAL unless b is 16 bytes. */
int wrk_id_from_bytes(const ProtobufCBinaryData *b, cis_block_id *out);

/* ---- metrics ---- */

#define WRK_REQUEST_TYPES 11 /* CIS_MSG_WORKER_READ_BLOCK .. CIS_MSG_WORKER_TOUCH */

typedef struct wrk_metrics {
	cis_counter *hits, *misses;
	cis_counter *served_remote, *served_local;
	cis_counter *store_bytes, *store_reads, *store_errors;
	cis_counter *peer_bytes;
	cis_histogram *fetch_seconds;
	cis_counter *evictions, *evicted_bytes;
	cis_counter *checksum_failures, *scrubbed, *verified_blocks;
	cis_counter *disk_errors, *direct_reads, *bad_requests;
	cis_counter *single_flight_joins;
	cis_counter *read_ahead;
	cis_counter *bulk_pauses;
	/* Requests by message type, CIS_MSG_WORKER_FIRST on; the last counts
	 * every other type. */
	cis_counter *requests[WRK_REQUEST_TYPES + 1];
} wrk_metrics;

/* ---- the worker ---- */

struct wrk {
	/* frozen configuration */
	const char *state_dir;
	const char *socket_path;
	const char *advertise_host;
	char hostname[256];
	uint64_t boot_id;   /* random per process start (WorkerInfo.boot_id) */
	const char *master; /* "host:port" or NULL */
	uint16_t rpc_port, http_port;
	int fetch_threads;
	int background_fetches; /* of them, for prefetch and load at once */
	uint64_t scrub_interval_ms;
	uint64_t scrub_pause_ms;

	wrk_bs *bs;
	wrk_fx *fx;
	wrk_leases *leases;
	wrk_ra *ra;
	wrk_link *link;
	cis_metrics *metrics;
	wrk_metrics m;
	atomic_bool stopping;
	atomic_uint_fast64_t worker_id;
};

/* ---- blockstore.c ---- */

typedef struct wrk_dir_cfg {
	const char *path;
	uint64_t capacity;
} wrk_dir_cfg;

typedef struct wrk_bs_opts {
	const wrk_dir_cfg *dirs;
	int ndirs;
	const char *state_dir;
	double high, low;      /* watermarks, fractions of capacity */
	double protected_frac; /* share of a dir the SLRU's protected segment may hold */
	uint32_t reuse_ms;     /* 0: WRK_REUSE_MS */
} wrk_bs_opts;

/* What a caller learns about a cached block. */
typedef struct wrk_block wrk_block;

typedef struct wrk_blk_info {
	wrk_block *blk; /* the handle to release */
	int dir;
	uint64_t len;
	uint64_t sum;
	bool verified;
	bool pinned;
	char path[4096];
} wrk_blk_info;

/* Open the index, reconcile it with the files (see blockstore.c). */
int wrk_bs_open(wrk *w, const wrk_bs_opts *opts, wrk_bs **out, cis_errmsg *em);
void wrk_bs_close(wrk_bs *bs);
/* Write the access times that uses moved since the last save (in
 * batches): how many, or -EIO (those not written are tried again). */
int wrk_bs_save_atimes(wrk_bs *bs);
#define WRK_ATIME_SAVE_MS 30000

/* Take a reference on a cached block (no eviction while held). touch: count
 * it as a use for the eviction policy (WRK_REUSE_MS). 0 or -ENOENT. Release the
 * handle info->blk, even if the block was dropped meanwhile. */
int wrk_bs_acquire(wrk_bs *bs, cis_block_id id, bool touch, wrk_blk_info *info);
void wrk_bs_release(wrk_bs *bs, wrk_block *b);
bool wrk_bs_has(wrk_bs *bs, cis_block_id id);
/* A use of a block nobody asked the worker for (a client read it through a
 * descriptor it holds): mark it recently used. 0 or -ENOENT. */
int wrk_bs_touch(wrk_bs *bs, cis_block_id id);
/* The same for a block the caller holds a reference on (info.blk). */
void wrk_bs_touch_held(wrk_bs *bs, wrk_block *b);

/* Reserve len bytes in the writable dir with the most free space, evicting
 * down to the low watermark as needed. 0 with *dir set, or -ENOSPC. */
int wrk_bs_reserve(wrk_bs *bs, uint64_t len, int *dir);
void wrk_bs_unreserve(wrk_bs *bs, int dir, uint64_t len);
/* Create the temporary file for id in dir: an fd open for writing and its
 * path (PATH_MAX). Local failures mark the dir unwritable. */
int wrk_bs_create_tmp(wrk_bs *bs, int dir, cis_block_id id, char *tmp_path, size_t n);
/* The reserved block is complete: rename tmp into place and index it
 * (verified). The reservation becomes the block's space. used: a reader
 * waited for it (its first use, now); else (a load, a prefetch, a replica)
 * its first use is still to come, and will not promote it. */
int wrk_bs_commit(wrk_bs *bs, int dir, cis_block_id id, uint64_t len, uint64_t sum,
                  const char *tmp_path, bool pin, bool used);
/* Free a block (a Free request): drop its file and index entry now; one in
 * use stays readable through the fds already open. A pin kept by a repair
 * while the block was away is forgotten. 0, -EBUSY (dropped, was in use)
 * or -ENOENT. */
int wrk_bs_free(wrk_bs *bs, cis_block_id id);
/* Drop the copy the caller holds (info.blk; release it after), its file
 * gone bad: the same as a free, but a pinned block is pinned again when it
 * is next committed (its next reader fetches it again). -ENOENT if that
 * copy is gone already, whatever the id names now (a copy fetched again
 * after it was freed must not go for the old one's fault). */
int wrk_bs_drop_held(wrk_bs *bs, wrk_block *b, const char *why);
/* Read the block's file and compare its checksum. 0 (now verified), or an
 * error: the copy is dropped (by its handle: a copy fetched again meanwhile
 * stays) unless the process was only short of descriptors or memory, or
 * began to stop (-ECANCELED, no verdict: the block stays unverified).
 * One verify of a block runs at a time; another waits for its verdict,
 * and then reads the block again only if again (the scrubber) or if that
 * verify did not settle it (failed for lack of memory, say). */
int wrk_bs_verify(wrk_bs *bs, cis_block_id id, bool again);
/* 0, -ENOENT (an unpin then forgets a pin wrk_bs_drop_held kept). */
int wrk_bs_pin(wrk_bs *bs, cis_block_id id, bool pin);
/* Note a local I/O failure on dir (ENOSPC, EROFS, EIO, ENOENT of the dir). */
void wrk_bs_dir_error(wrk_bs *bs, int dir, int err, const char *what);
/* An errno that says the process is short of something (descriptors,
 * memory), not that a file or a cache dir is bad: nothing is dropped or
 * marked failed for it. */
static inline bool wrk_short_of_resources(int e)
{
	return e == EMFILE || e == ENFILE || e == ENOMEM;
}
/* Re-probe unwritable dirs; called periodically. */
void wrk_bs_probe_dirs(wrk_bs *bs);
/* Every block id, for a full report. *ids is the caller's (free). */
int wrk_bs_list(wrk_bs *bs, cis_block_id **ids, size_t *n);
/* The id after `after` in index order (for the scrubber); -ENOENT at end. */
int wrk_bs_next(wrk_bs *bs, const cis_block_id *after, cis_block_id *out);
int wrk_bs_ndirs(const wrk_bs *bs);
/* Usage of dir i. */
void wrk_bs_dir_usage(wrk_bs *bs, int i, Cis__DirUsage *u);
uint64_t wrk_bs_nblocks(wrk_bs *bs);
/* Persisted worker id; 0 if none. */
uint64_t wrk_bs_load_worker_id(wrk_bs *bs);
int wrk_bs_save_worker_id(wrk_bs *bs, uint64_t id);

/* ---- fetch.c ---- */

enum wrk_prio { WRK_PRIO_HIGH, WRK_PRIO_LOW };

/* Called once when a fetch a caller waits on is over: rc 0 (the block is
 * cached) or negative; flags: WRK_DONE_LOCAL, the failure was the cache's
 * (disk), not the store's; WRK_DONE_PEER, the bytes came from a peer
 * worker. From a fetch thread, or the caller's. */
enum { WRK_DONE_LOCAL = 1, WRK_DONE_PEER = 2 };
typedef void (*wrk_done_fn)(void *arg, int rc, unsigned flags, const cis_errmsg *em);

int wrk_fx_start(wrk *w, int threads, int low_max, wrk_fx **out);
void wrk_fx_stop(wrk_fx *fx);
/* Stream bytes [off, off+len) of the block to a remote reader: from the
 * cache when the block is there, else by joining (or starting) its fetch.
 * Replies on conn (reference taken) and never blocks on the store. */
void wrk_fx_read(wrk_fx *fx, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const wrk_ref *ref,
                 uint64_t off, uint64_t len);
/* How wrk_fx_ensure caches a block. WRK_FETCH_PIN: pin it.
 * WRK_FETCH_COLD: no reader on this host waits for it (a load, a
 * replica), so the fill writes past the page cache (O_DIRECT) where the
 * cache dir allows, unless a reader joins before the fill starts. */
enum { WRK_FETCH_PIN = 1, WRK_FETCH_COLD = 2 };

/* Make sure the block is cached (and verified), then call done. Fetches at
 * prio; source (may be NULL) is a peer to copy from first; flags are
 * WRK_FETCH_*. Returns true if the block was already cached and verified
 * (done is not called). */
bool wrk_fx_ensure(wrk_fx *fx, const wrk_ref *ref, int prio, const Cis__WorkerInfo *source,
                   unsigned flags, wrk_done_fn done, void *arg);
uint64_t wrk_fx_inflight(wrk_fx *fx);
/* Fetch threads running a prefetch or load job now. */
int wrk_fx_background_busy(wrk_fx *fx);
/* Around queueing a batch of low-priority fetches (load, prefetch): the
 * fetch threads take none of them until the whole batch is queued, so
 * consecutive blocks are found together and fetched in spans. */
void wrk_fx_batch_begin(wrk_fx *fx);
void wrk_fx_batch_end(wrk_fx *fx);

/* ---- local.c ---- */

int wrk_leases_new(wrk *w, wrk_leases **out);
void wrk_leases_free(wrk_leases *l);
/* A lease on a block the caller holds a reference on (it passes to the
 * lease on success only), owned by the peer user owner_uid of the Unix
 * connection asking (cis_rpc_conn_peer_uid). 0, -EBUSY when there are too
 * many, -EPERM for an owner < 0 (not a Unix connection), -ENOMEM. */
int wrk_lease_add(wrk_leases *l, wrk_block *blk, uint32_t ms, int owner_uid, uint64_t *lease_id,
                  uint64_t *granted_ms);
/* Renew (the granted ms) or release a lease of owner_uid; -ENOENT when
 * there is none by that id and owner. */
int wrk_lease_renew(wrk_leases *l, uint64_t lease_id, uint32_t ms, int owner_uid);
int wrk_lease_release(wrk_leases *l, uint64_t lease_id, int owner_uid);
/* Drop expired leases (releasing their references). */
void wrk_leases_expire(wrk_leases *l);
uint64_t wrk_leases_count(wrk_leases *l);

/* ---- serve.c ---- */

void wrk_serve_handler(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const uint8_t *msg,
                       struct evbuffer *data);

/* ---- deltas.c ---- */

/* Changes held for one heartbeat, at most this many (about 18 bytes each in
 * the message, far below its 4 MiB limit); past that, a full report. */
#define WRK_MAX_DELTAS 65536

typedef struct wrk_delta {
	cis_block_id id;
	bool added;
	uint32_t seq; /* order noted */
} wrk_delta;

typedef struct wrk_deltas {
	wrk_delta *v;
	size_t n, cap;
	bool overflow; /* more than WRK_MAX_DELTAS (or no memory): v dropped */
} wrk_deltas;

/* Not thread-safe: the link calls these under its lock. */
void wrk_deltas_note(wrk_deltas *d, cis_block_id id, bool added);
/* Move everything to out (the caller frees it) and start empty. */
void wrk_deltas_take(wrk_deltas *d, wrk_deltas *out);
/* Keep each block's last change only (sorted by block id). */
void wrk_deltas_collapse(wrk_deltas *d);
void wrk_deltas_free(wrk_deltas *d);

/* ---- master_link.c ---- */

typedef struct wrk_static_mount {
	uint64_t id;
	const char *uri;
} wrk_static_mount;

/* The link and its mounts, for the servers to use; it says nothing to
 * the master until wrk_link_start. */
int wrk_link_new(wrk *w, const wrk_static_mount *mounts, int nmounts, wrk_link **out,
                 cis_errmsg *em);
/* Register with the master and report, from now on: once the servers
 * listen (the master sends clients to their ports at once). */
int wrk_link_start(wrk_link *l, cis_errmsg *em);
void wrk_link_stop(wrk_link *l);
/* The connector for a mount (GetMount from the master on first use). The
 * handle lives until wrk_link_stop. *block_size (if not NULL) gets the
 * mount's block size as the master has it, or 0 for a mount given with
 * --mount (no master): then any block size is taken, which is sound since
 * the block size is part of the block id (see wrk_link_check_ref). */
int wrk_link_ufs(wrk_link *l, uint64_t mount_id, cis_ufs **out, uint64_t *block_size,
                 cis_errmsg *em);
/* The connector for ref's mount, after checking that ref's block size is
 * the mount's: 0, -EINVAL (another block size) or wrk_link_ufs's error. */
int wrk_link_check_ref(wrk_link *l, const wrk_ref *ref, cis_ufs **out, cis_errmsg *em);
/* Queue an incremental report entry. Any thread, any lock held. */
void wrk_link_note(wrk_link *l, cis_block_id id, bool added);
bool wrk_link_ready(wrk_link *l);

/* ---- scrub.c ---- */

/* The scrubber's thread: one block verified every scrub_pause_ms, and
 * scrub_interval_ms between two passes over every block. Stop joins it. */
typedef struct wrk_scrub wrk_scrub;
int wrk_scrub_start(wrk *w, wrk_scrub **out);
void wrk_scrub_stop(wrk_scrub *s);

/* ---- readahead.c ---- */

/* Threads that read cached blocks into the page cache for Prefetch, off
 * the RPC threads. Queue takes up to WRK_READ_AHEAD_BLOCKS ids (read
 * up to WRK_READ_AHEAD_MAX bytes of them) and never blocks: a batch that
 * finds the queue full is dropped. Stop joins the threads. */
int wrk_ra_start(wrk *w, wrk_ra **out);
void wrk_ra_queue(wrk_ra *ra, const cis_block_id *ids, size_t n);
void wrk_ra_stop(wrk_ra *ra);

#endif
