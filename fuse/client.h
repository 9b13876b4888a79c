/* cistern-fuse: the client state shared by the modules that talk to the
 * cluster (master.c, local.c, remote.c, read.c, metrics.c, main.c). */
#ifndef CISTERN_FUSE_CLIENT_H
#define CISTERN_FUSE_CLIENT_H

#include "fcl.h"

#include "cistern/metrics.h"
#include "cistern/proto/master.pb-c.h"
#include "cistern/proto/worker.pb-c.h"
#include "cistern/rpc.h"

#define FCL_DEFAULT_BLOCK (64u << 20)
#define FCL_MAX_TRIES     8  /* workers tried per block before the store */
#define FCL_DOWN_MAX      32 /* workers remembered as failing */
#define FCL_DOWN_MS       10000
#define FCL_SPACE_MS      1000 /* statfs asks the master at most this often */
#define FCL_CHANGED_MAX   4096 /* files remembered as found changed, until opened */

enum fcl_mop { FCL_MOP_LOOKUP, FCL_MOP_GETATTR, FCL_MOP_READDIR, FCL_MOP_OPEN, FCL_MOP_N };

enum fcl_path { FCL_PATH_LOCAL, FCL_PATH_REMOTE, FCL_PATH_STORE, FCL_PATH_N };

/* A mount as the read path needs it; created on the first open of a file
 * in it and kept until exit (there are few mounts). The connector is
 * opened on the first store-direct read. */
typedef struct fcl_mount {
	struct fcl_mount *next;
	uint64_t id;
	char *uri;
	cis_kvlist options; /* credentials included: never logged */
	uint64_t block_size;
	pthread_mutex_t lock; /* guards ufs */
	cis_ufs *ufs;
} fcl_mount;

typedef struct fcl_worker {
	uint64_t id;
	char host[256];
	uint16_t port;
	char unix_path[108];
	bool local;       /* same host and its socket exists: short-circuit */
	uint64_t boot_id; /* WorkerInfo.boot_id: changes when it restarts */
} fcl_worker;

/* An immutable snapshot of the worker list, reference-counted so readers
 * keep using theirs while a refresh swaps in the next. */
typedef struct fcl_wlist {
	int refs; /* under fcl.lock */
	uint64_t version;
	size_t n;
	uint64_t *ids;
	fcl_worker *w;
} fcl_wlist;

/* One open file (fuse_file_info.fh). */
typedef struct fcl_file {
	int refs; /* atomic: the handle, and each request working on it after its reply */
	uint64_t ino;
	fcl_mount *mount;
	char *key;
	char version[CIS_UFS_VERSION_MAX];
	uint64_t size;
	uint64_t block_size;
	uint64_t vhash;       /* of version; never 0 */
	uint64_t answered;    /* ticket of the Open answer giving version (later is newer) */
	bool page_cache;      /* reads go through the node's page cache (not direct) */
	bool pt_counted;      /* counted among its node's opens (fcl_pt_open) */
	pthread_mutex_t lock; /* guards ra */
	fcl_ra ra;
} fcl_file;

typedef struct fcl_stats {
	cis_metrics *reg;
	cis_counter *reads[FCL_PATH_N];
	cis_counter *bytes[FCL_PATH_N];
	cis_counter *failovers, *store_errors, *erofs, *prefetch_blocks, *opens;
	cis_counter *open_cache_hits;
	cis_counter *direct_opens; /* block files opened by the client itself */
	cis_counter *passthrough_opens;
	cis_counter *stale_reads;
	cis_counter *dir_refreshes;
	cis_counter *master_errors;
	cis_counter *master_calls[FCL_MOP_N];
	cis_histogram *read_seconds;  /* per FUSE read */
	cis_histogram *stall_seconds; /* reads that waited on a fetch or the store */
} fcl_stats;

typedef struct fcl_local fcl_local;
typedef struct fcl_remote fcl_remote;
struct fuse_session;

typedef struct fcl {
	const fcl_opts *opts;
	char master_host[256];
	uint16_t master_port;
	cis_rpc_client *master;
	uint64_t root_ino; /* master inode shown as FUSE node 1 */
	char hostname[256];
	fcl_inodes *inodes;
	fcl_meta *meta;
	fcl_lru *changed;        /* ino -> version a read found changed in the store */
	struct fuse_session *se; /* set once mounted; for cache invalidations */
	fcl_local *local;
	fcl_remote *remote;
	fcl_dirahead *da;
	fcl_ra_shared *ras; /* readahead of files opened for every read */
	fcl_dirfresh *df;   /* NULL until the session starts */
	pthread_t df_thread;
	bool df_started;
	fcl_stats stats;
	/* FUSE passthrough (passthrough.c); set while the session starts. */
	struct {
		int devfd;            /* the session's /dev/fuse: backing ioctls */
		uint64_t init_unique; /* the INIT request, once seen */
		bool offered;         /* the kernel can pass through */
		bool on;              /* and agreed to (atomic) */
		bool refused;         /* registering backing files fails (atomic) */
	} pt;

	pthread_mutex_t lock; /* guards mounts, workers, down */
	fcl_mount *mounts;
	fcl_wlist *workers;
	/* Workers that just failed a read, skipped until the time given, so a
	 * hung worker costs one timeout, not one per block. */
	struct {
		uint64_t id;
		uint64_t until_ms;
	} down[FCL_DOWN_MAX];
	/* The workers' cache capacity and use as statfs last saw them. */
	struct {
		uint64_t asked_ms, capacity, used;
	} space;

	pthread_mutex_t bg_lock;
	pthread_cond_t bg_cond;
	bool bg_stop;
	bool bg_started;
	pthread_t bg;

	bool stop_watched; /* stop.c */
	pthread_t stop_thread;
} fcl;

/* ---- stop.c: a stop signal while requests wait ---- */

/* After libfuse's signal handlers are set and the master client exists:
 * SIGINT, SIGTERM and SIGHUP still end the session loop as libfuse has it,
 * and also make every request in flight give up its wait (master, workers,
 * store), so that the loop's end does not wait out their timeouts. */
int fcl_stop_watch(fcl *c);
/* Before fuse_remove_signal_handlers: libfuse's handlers back, the watcher
 * joined. */
void fcl_stop_unwatch(fcl *c);

/* ---- master.c ---- */

/* Create the master client. 0 or a negative code. */
int fcl_master_connect(fcl *c, cis_errmsg *em);
/* The inode a cistern path names (each component looked up from /). */
int fcl_master_resolve(fcl *c, const char *path, fcl_attr *out, cis_errmsg *em);
/* fcl_meta_src callbacks. */
int fcl_master_lookup(void *ctx, uint64_t parent, const char *name, fcl_attr *out, cis_errmsg *em);
int fcl_master_getattr(void *ctx, uint64_t ino, fcl_attr *out, cis_errmsg *em);
/* A link's text (*target is the caller's); -EINVAL for anything else. */
int fcl_master_readlink(fcl *c, uint64_t ino, char **target, cis_errmsg *em);
/* One page; *out is the caller's (cis__read_dir_reply__free_unpacked). */
int fcl_master_readdir(fcl *c, uint64_t ino, uint64_t cookie, uint32_t max, Cis__ReadDirReply **out,
                       cis_errmsg *em);
/* Open a file: from the open cache (meta.c) while the inode's attributes
 * are cached (*hit set), else by an Open request, whose reply fills the open
 * and attribute caches. *out is the caller's (fcl_file_unref). */
int fcl_master_open(fcl *c, uint64_t ino, fcl_file **out, bool *hit, cis_errmsg *em);
/* Take or drop a reference; the last drop frees. A request that uses the
 * file after replying holds one: once the reply is out, the kernel may
 * release the handle. */
void fcl_file_ref(fcl_file *f);
void fcl_file_unref(fcl_file *f);
void fcl_attr_from_inode(const Cis__Inode *in, fcl_attr *a);
/* fcl_attr.vhash and fcl_file.vhash of a version string. */
uint64_t fcl_version_hash(const char *version);
/* Start with an empty list (reads go to the store until one arrives). */
int fcl_workers_init(fcl *c);
void fcl_workers_fini(fcl *c);
/* Fetch the worker list if it moved. 0 or a negative code. */
int fcl_workers_refresh(fcl *c, cis_errmsg *em);
/* The cache capacity and use of all live workers (bytes), asked of the
 * master at most once every FCL_SPACE_MS; while the master does not answer,
 * the figures it gave last. */
void fcl_cluster_space(fcl *c, uint64_t *capacity, uint64_t *used);
/* The current snapshot with a reference (never NULL); drop with _put. */
fcl_wlist *fcl_workers_get(fcl *c);
void fcl_workers_put(fcl *c, fcl_wlist *wl);
void fcl_mounts_free(fcl *c);

/* ---- local.c: short-circuit through the local worker's Unix socket ---- */

int fcl_local_new(size_t capacity, fcl_local **out);
/* Release every lease, close every descriptor. */
void fcl_local_free(fcl_local *l);
/* Blocks of at most this many bytes are waited for whole on a miss
 * (OpenLocal with wait): streaming would bring their first bytes little
 * sooner than their last, at two more requests. */
#define FCL_LOCAL_WAIT_MAX (1u << 20)

/* A descriptor of the block file (a dup the caller closes) and its length,
 * from the cache or by OpenLocal. *waited_ns is the time OpenLocal took
 * when the worker had to fetch the block first (a miss), else 0: the
 * reader's stall. When the worker does not hold the block
 * yet it starts fetching it; a block of at most FCL_LOCAL_WAIT_MAX bytes
 * is waited for, a larger one answers -EAGAIN at once: read it with
 * fcl_remote_read. */
int fcl_local_open(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref, int *fd, uint64_t *len,
                   uint64_t *waited_ns, cis_errmsg *em);
/* Whether a descriptor of ref from w is in the cache (no RPC). */
bool fcl_local_cached(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref);
/* Whether w has ref's block file: its descriptor is cached, or the file w
 * handed over since its start is still in place (one stat, no RPC). */
bool fcl_local_present(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref);
/* Stop caching the descriptor of ref from w (it failed a read): close it
 * and queue the release of its lease. Readers holding a dup keep theirs. */
void fcl_local_forget(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref);
/* Drop descriptors idle past their lease; send the queued releases. */
void fcl_local_tick(fcl *c);
/* At exit: release every lease (then fcl_local_free). */
void fcl_local_release_all(fcl *c);
size_t fcl_local_count(fcl_local *l);

/* ---- remote.c: worker RPC clients ---- */

int fcl_remote_new(fcl_remote **out);
void fcl_remote_free(fcl_remote *r);
/* The client for w (over its Unix socket when unix is set). Borrowed:
 * clients live until fcl_remote_free. NULL on ENOMEM. */
cis_rpc_client *fcl_remote_client(fcl *c, const fcl_worker *w, bool unix_sock);
/* For a client that is stopping: every worker call, in flight or to come,
 * fails at once (cis_rpc_client_close). */
void fcl_remote_close(fcl_remote *r);
/* ReadBlock [off, off+len) of ref into buf (over the Unix socket for the
 * worker on this host, else TCP); *cached says whether the worker had the
 * block. Fails unless exactly len bytes (or up to the block's end) came
 * back. */
int fcl_remote_read(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref, uint64_t off, size_t len,
                    char *buf, bool *cached, cis_errmsg *em);
/* A request whose reply says nothing the caller needs (Prefetch, Touch):
 * sent over w's socket when w is on this host, else TCP; 0 once answered. */
int fcl_remote_notify(fcl *c, const fcl_worker *w, uint16_t type, const ProtobufCMessage *msg,
                      cis_errmsg *em);
/* Fire and forget. */
int fcl_remote_prefetch(fcl *c, const fcl_worker *w, Cis__BlockRef **refs, size_t n,
                        cis_errmsg *em);

/* ---- read.c ---- */

/* A piece of a read reply: len bytes of buf (caller frees). */
typedef struct fcl_seg {
	size_t len;
	char *buf;
} fcl_seg;

/* Fill segs (caller's array of nsegs_max) for [off, off+size) clamped to
 * the file; *nsegs set. 0, or -EIO when the store itself failed (em says
 * why), -ESTALE when the object changed since open. */
int fcl_read(fcl *c, fcl_file *f, uint64_t off, size_t size, fcl_seg *segs, int nsegs_max,
             int *nsegs, cis_errmsg *em);
void fcl_segs_release(fcl_seg *segs, int n);
/* Ask the owning workers for blocks [first, first+n) of f; blocks whose
 * owner is this host's worker and whose descriptor is cached are not asked
 * for but read ahead into the page cache (POSIX_FADV_WILLNEED). */
void fcl_prefetch(fcl *c, fcl_file *f, uint64_t first, uint64_t n);
/* When block idx of f belongs to this host's worker: open its descriptor
 * into the cache now (OpenLocal, unless cached; a miss starts the fetch)
 * and read it ahead, so the read that follows asks nothing. With keep, a
 * descriptor of the block file is the caller's to close (*keep, -1 when
 * none came). False when another worker owns it (use fcl_prefetch) or the
 * worker failed. */
bool fcl_prefetch_local(fcl *c, fcl_file *f, uint64_t idx, int *keep);
/* Ask the owning workers for the first block of each file in inos (opened
 * through the open cache, which then serves the readers' own opens),
 * but for blocks whose short-circuit descriptor is cached. */
void fcl_prefetch_files(fcl *c, const uint64_t *inos, size_t n);
/* Fill a BlockRef (id buffer owned by the caller, 16 bytes). */
void fcl_blockref(const fcl_file *f, uint64_t index, Cis__BlockRef *ref, uint8_t idbuf[16],
                  cis_block_id *id);

/* ---- passthrough.c: the kernel reads local block files itself ---- */

/* Route the session's device I/O through the passthrough hooks (after
 * fuse_session_mount, before the loop). 0 or a negative code. */
int fcl_pt_attach(fcl *c, struct fuse_session *se);
/* Count an open of node ino (object version vhash, size bytes) and decide
 * how the kernel reads it: the backing id to answer with
 * (fcl_pt_mark_reply), or 0 for the page cache. fd: a file on this host
 * holding the object's bytes (used only if it has size bytes), or -1;
 * closed here. o_direct: the open asked for O_DIRECT, which the kernel
 * would pass on to the block file's own file system (EINVAL for reads it
 * does not align): such an open never starts passing through. *direct:
 * reads must still come to the daemon (the node passes through to another
 * version, or o_direct). *counted: the open was counted among the node's
 * (not when passthrough is off or the count ran out of memory); pair a
 * counted one with fcl_pt_release (also when the reply fails), and only
 * a counted one: another open's count would go. */
int32_t fcl_pt_open(fcl *c, uint64_t ino, uint64_t vhash, uint64_t size, int fd, bool o_direct,
                    bool *direct, bool *counted);
void fcl_pt_release(fcl *c, uint64_t ino);
/* The calling thread's next OPEN reply passes through to backing (0: the
 * mark is cleared). */
void fcl_pt_mark_reply(int32_t backing);

/* ---- metrics.c ---- */

int fcl_stats_init(fcl *c);
void fcl_stats_free(fcl *c);

#endif
