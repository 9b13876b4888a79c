/* cistern-master internals, shared by the files of master/ only.
 *
 * Threads: the RPC I/O threads and the HTTP threads call into ns/mounts/
 * workers concurrently. The namespace lives in LMDB only (no in-memory copy):
 * each call opens its own read transaction (MDB_NOTLS, so any thread may),
 * writes are serialised by LMDB (one write transaction at a time). A lookup
 * or listing that needs the store blocks the calling thread while one thread
 * per directory (single flight) lists it; the RPC server runs several I/O
 * threads so others keep being served. */
#ifndef CISTERN_MASTER_H
#define CISTERN_MASTER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <lmdb.h>
#include <protobuf-c/protobuf-c.h>

#include "cistern/error.h"
#include "cistern/hash.h"
#include "cistern/kv.h"
#include "cistern/metrics.h"
#include "cistern/rpc.h"
#include "cistern/ufs.h"

#define MST_ROOT_INO 1
#define MST_NAME_MAX 255
#define MST_PATH_MAX 4096
/* First listings that failed, remembered so that the lookups after them
 * get the error back instead of each listing the directory again. */
#define MST_LIST_FAILS      32
#define MST_DEFAULT_BLOCK   (4u << 20)
#define MST_DEFAULT_SYNC_MS (300u * 1000u)
/* Options one mount may be given: every connector knows a dozen at most. */
#define MST_MOUNT_OPTIONS_MAX 64

enum mst_type { MST_FILE = 1, MST_DIR = 2, MST_LINK = 3 };

/* One inode, decoded from LMDB (strings copied out of the transaction). */
typedef struct mst_inode {
	uint64_t id;
	uint64_t parent;
	uint64_t mount_id; /* 0 outside any mount */
	uint64_t size;
	int64_t mtime_ns;
	int64_t listed_ns; /* directories: wall time of the last store listing; 0 never.
	                    * files: of the last stat of the object itself (a refresh) */
	uint32_t mode;
	uint8_t type; /* enum mst_type */
	bool mount_point;
	char name[MST_NAME_MAX + 1];
	char version[CIS_UFS_VERSION_MAX];
	/* One place in LMDB: a link is never read, so it has no key. */
	union {
		char key[MST_PATH_MAX + 1];         /* relative to the mount's URI root */
		char link_target[MST_PATH_MAX + 1]; /* links: the store's text */
	};
} mst_inode;

/* One mount; the table is small and kept in memory as well as in LMDB. */
typedef struct mst_mount {
	uint64_t id;
	uint64_t root_ino;
	char *path;
	char *uri;
	cis_kvlist options; /* credentials included: never print (mst_option_secret) */
	uint64_t block_size;
	uint64_t sync_interval_ms; /* 0: listed once, refreshed only by sync */
	bool read_only;
	cis_ufs *ufs;
	/* The last refresh of a directory listed before failed: until
	 * refresh_retry_ms (monotonic) such directories are served as last
	 * listed, and no lookup waits on a refresh in flight while it fails.
	 * Under m->flight_lock (ns.c). */
	bool refresh_failing;
	uint64_t refresh_retry_ms;
} mst_mount;

typedef struct mst_flight mst_flight;
typedef struct mst_workers mst_workers;
typedef struct mst_jobs mst_jobs;
typedef struct mst_repl mst_repl;
typedef struct mst_wconns mst_wconns;
typedef struct mst_listahead mst_listahead;

typedef struct mst_master {
	MDB_env *env;
	MDB_dbi dbi_meta, dbi_inodes, dbi_children, dbi_mounts;
	MDB_dbi dbi_jobs;     /* u64 job id (big-endian) -> job record (JSON text) */
	MDB_dbi dbi_policies; /* path bytes -> policy (JSON text) */

	pthread_mutex_t mounts_lock; /* guards mounts, nmounts */
	mst_mount **mounts;
	size_t nmounts;
	mst_mount **graves; /* removed mounts, freed at close (see mounts.c) */
	size_t ngraves;
	pthread_mutex_t mount_op_lock; /* one mount/unmount at a time */
	/* One policy change at a time: a job's submission with the policy it
	 * reads and keeps (pin, replicas), and an unmount's drop of the
	 * policies below it. Taken after mount_op_lock, before mounts_lock. */
	pthread_mutex_t policy_lock;
	/* Bumped after each change mst_policy_update saves (not by an
	 * unmount's drop of policies: the loads of its paths go with it): a
	 * load that read a pin setting before a batch went out checks it
	 * again once the batch is answered, and the TTL expiry works out when
	 * loads are due again (jobs.c). */
	atomic_uint_fast64_t policy_gen;

	uint64_t list_max; /* entries one directory's listing may hold */

	pthread_mutex_t flight_lock; /* single flight of directory listings */
	pthread_cond_t flight_cond;
	mst_flight *flights;
	/* Directories whose first listing failed lately: the error is given
	 * again until their retry time (ns.c). Under flight_lock. */
	struct mst_list_fail {
		uint64_t dir, mount_id;
		int rc, fails;
		uint64_t retry_ms; /* monotonic; 0: a free slot */
		cis_errmsg em;
	} list_fails[MST_LIST_FAILS];

	mst_workers *workers;
	mst_wconns *wconns;       /* RPC clients to workers (repl.c) */
	mst_jobs *jobs;           /* jobs.c */
	mst_repl *repl;           /* repl.c */
	mst_listahead *listahead; /* listahead.c; NULL: none */

	cis_metrics *metrics;
	cis_counter *c_store_lists, *c_store_list_errors, *c_lookups, *c_rpc_requests,
	    *c_rpc_errors, *c_api_requests, *c_lists_ahead, *c_store_stats;
} mst_master;

typedef struct mst_open_opts {
	const char *data_dir;
	uint64_t map_size;         /* 0: 64 GiB */
	uint64_t heartbeat_ms;     /* 0: 3000 */
	uint64_t lost_timeout_ms;  /* 0: 10000 */
	cis_metrics *metrics;      /* NULL: a private registry */
	uint64_t repl_interval_ms; /* 0: 30000; the replication manager's full scan period */
	bool no_background;        /* tests: no job threads, no replication manager */
	int list_ahead;            /* threads listing new subdirectories ahead; 0: none */
	uint64_t list_max;         /* 0: MST_LIST_MAX; entries one directory's listing may hold */
	uint64_t jobs_kept;        /* 0: MST_JOBS_KEPT; finished job records kept (jobs.c) */
} mst_open_opts;

/* A directory's listing is held whole while it is merged (a few hundred
 * bytes an entry): past this many entries it is refused, which also ends a store
 * that pages on and on with fresh continuation tokens. */
#define MST_LIST_MAX 10000000u
/* Finished job records kept by default: the newest this many, besides
 * those of loads whose TTL is still to run. */
#define MST_JOBS_KEPT 1000u
/* Pages in a row that bring no entry: a store paging on and on. */
#define MST_LIST_MAX_EMPTY_PAGES 10000u

/* master.c: open/close everything (LMDB, mounts, worker registry). */
int mst_open(const mst_open_opts *o, mst_master **out, cis_errmsg *em);
void mst_close(mst_master *m);

/* store.c: LMDB access. Functions with txn take the caller's transaction. */
int mst_store_open(mst_master *m, const char *dir, uint64_t map_size, cis_errmsg *em);
/* An LMDB result as our code: 0, -ENOENT (not found), -ENOSPC (the map is
 * full: a delete can need pages too), -errno, or -CIS_E_INTERNAL. */
int mst_lmdb_err(int rc);
void mst_store_close(mst_master *m);
int mst_store_next_id(mst_master *m, MDB_txn *txn, const char *counter, uint64_t *out);
/* The same, but the id is at least at_least (the counter moves past it). */
int mst_store_take_id(mst_master *m, MDB_txn *txn, const char *counter, uint64_t at_least,
                      uint64_t *out);
/* The id counter's next id, unchanged (2 when it was never taken). */
int mst_store_peek_id(mst_master *m, MDB_txn *txn, const char *counter, uint64_t *out);
int mst_inode_get(mst_master *m, MDB_txn *txn, uint64_t id, mst_inode *out);
int mst_inode_put(mst_master *m, MDB_txn *txn, const mst_inode *ino);
int mst_child_get(mst_master *m, MDB_txn *txn, uint64_t parent, const char *name, uint64_t *id);
int mst_child_put(mst_master *m, MDB_txn *txn, uint64_t parent, const char *name, uint64_t id);
int mst_child_del(mst_master *m, MDB_txn *txn, uint64_t parent, const char *name);
/* Delete an inode, its children entry and (directories) everything below. */
int mst_inode_del_tree(mst_master *m, MDB_txn *txn, uint64_t id);
/* Call fn for children of parent in name order, starting after the name
 * `after` (NULL: first). fn returns 0 to go on, 1 to stop, negative to fail. */
int mst_children_each(mst_master *m, MDB_txn *txn, uint64_t parent, const char *after,
                      int (*fn)(void *arg, const char *name, size_t nlen, uint64_t id), void *arg);
int mst_txn_begin(mst_master *m, bool write, MDB_txn **txn);
/* Commit a write transaction; an LMDB error is mapped to a negative code. */
int mst_txn_commit(MDB_txn *txn);
uint64_t mst_inode_count(mst_master *m);

/* mounts.c */
bool mst_option_secret(const char *key);
int mst_mounts_load(mst_master *m, cis_errmsg *em);
void mst_mounts_free(mst_master *m);
typedef struct mst_mount_req {
	const char *path;
	const char *uri;
	const cis_kvlist *options;
	uint64_t block_size;      /* 0: default */
	int64_t sync_interval_ms; /* < 0: default */
	bool read_only;
} mst_mount_req;
int mst_mount_add(mst_master *m, const mst_mount_req *r, uint64_t *id, cis_errmsg *em);
int mst_mount_remove(mst_master *m, const char *path, cis_errmsg *em);
/* A copy of the mount's fields (options included) as a protobuf-c MountInfo
 * built with malloc: free with protobuf_c_message_free_unpacked. */
int mst_mount_info(mst_master *m, uint64_t id, ProtobufCMessage **out);
/* JSON of all mounts, credentials shown as "***". */
json_t *mst_mounts_json(mst_master *m);
json_t *mst_mount_json(const mst_mount *mt);
/* The mount's ufs handle; NULL if the mount is gone. Valid while the mount
 * exists (mounts are only freed at close; removed ones are kept aside). */
mst_mount *mst_mount_find(mst_master *m, uint64_t id);
size_t mst_mount_count(mst_master *m);

/* ns.c: the namespace. */
/* Check a path: absolute, no empty/./.. components, no NUL, <= 4096,
 * components <= 255. len is the byte length (NUL inside is refused). */
int mst_path_check(const char *path, size_t len, cis_errmsg *em);
int mst_name_check(const char *name, size_t len, cis_errmsg *em);
int mst_ns_getattr(mst_master *m, uint64_t id, mst_inode *out, cis_errmsg *em);
int mst_ns_lookup(mst_master *m, uint64_t parent, const char *name, mst_inode *out, cis_errmsg *em);
int mst_ns_resolve(mst_master *m, const char *path, mst_inode *out, cis_errmsg *em);
/* path with its symbolic links followed, into out: every link on the way,
 * and the last component too with follow_last. A link's text is resolved
 * as in its store: relative to its directory, or (absolute) below the
 * store's root; one that leads out of its mount, dangles or loops (more
 * than MST_LINK_HOPS) is an error naming it. ino_out (may be NULL) gets
 * the inode out names. */
#define MST_LINK_HOPS 40
int mst_ns_realpath(mst_master *m, const char *path, bool follow_last, char out[MST_PATH_MAX + 1],
                    mst_inode *ino_out, cis_errmsg *em);
/* One page of a directory: up to max entries after cookie (0 first).
 * *entries malloc'd (caller frees). */
int mst_ns_readdir(mst_master *m, uint64_t dir, uint64_t cookie, size_t max, mst_inode **entries,
                   size_t *n, uint64_t *next_cookie, bool *eof, cis_errmsg *em);
/* List the directory from the store now (force) or if stale. Directories
 * the listing shows for the first time are queued for listing ahead. */
int mst_ns_ensure_listed(mst_master *m, const mst_inode *dir, bool force, cis_errmsg *em);
/* On this thread, refuse (or allow again) what would wait on a store: a
 * listing (or joining one in flight), a store's stat. Refused, the call
 * fails with -EWOULDBLOCK and mst_ns_store_wait_refused() says so. */
void mst_ns_refuse_store_waits(bool refuse);
bool mst_ns_store_wait_refused(void);
/* True, and noted for mst_ns_store_wait_refused, when this thread may not
 * wait now: for a store, or for another long wait (LMDB's writer lock). */
bool mst_ns_wait_refused_now(void);
/* The same for a directory queued for listing ahead, depth levels below
 * the listing a client asked for. */
int mst_ns_list_ahead(mst_master *m, const mst_inode *dir, int depth, cis_errmsg *em);
/* A reader found version stale_version of file id changed in its store:
 * while the namespace still holds that version, ask the store for the
 * object and store its size, time and version; an object that is gone or
 * became a directory has its directory listed again instead. 0 also when
 * there is nothing to do (not a file, already another version). */
int mst_ns_refresh_file(mst_master *m, uint64_t id, const char *stale_version, cis_errmsg *em);
/* Re-list path now; with recursive, every directory below already loaded. */
int mst_ns_sync(mst_master *m, const char *path, bool recursive, uint64_t *dirs, cis_errmsg *em);
void mst_ns_flights_init(mst_master *m);

/* listahead.c: threads listing new subdirectories before a walk asks. */
#define MST_LIST_AHEAD_DEPTH 2 /* levels below the listing asked for */
int mst_listahead_new(mst_master *m, int threads, mst_listahead **out);
void mst_listahead_free(mst_listahead *la);
/* Queue dirs (inode ids) depth levels below a listing asked for; none
 * beyond MST_LIST_AHEAD_DEPTH, none with la NULL. */
void mst_listahead_queue(mst_listahead *la, const uint64_t *dirs, size_t n, int depth);

/* workers.c */
int mst_workers_new(mst_master *m, uint64_t heartbeat_ms, uint64_t lost_ms, mst_workers **out);
void mst_workers_free(mst_workers *w);
/* Mark lost the workers silent for too long; called by the monitor thread
 * (and tests). Returns how many were lost. */
size_t mst_workers_expire(mst_workers *w, uint64_t now_ms);
int mst_workers_register(mst_workers *w, const ProtobufCMessage *req, ProtobufCMessage **reply,
                         cis_errmsg *em);
int mst_workers_heartbeat(mst_workers *w, const ProtobufCMessage *req, ProtobufCMessage **reply,
                          cis_errmsg *em);
int mst_workers_report(mst_workers *w, const ProtobufCMessage *req, ProtobufCMessage **reply,
                       cis_errmsg *em);
int mst_workers_list(mst_workers *w, uint64_t known, ProtobufCMessage **reply);
json_t *mst_workers_json(mst_workers *w);
/* Worker ids holding the block, up to max; returns the count. */
size_t mst_workers_locate(mst_workers *w, cis_block_id id, uint64_t *out, size_t max);
uint64_t mst_workers_version(mst_workers *w);
/* The live worker ids (malloc'd array, caller frees; *n may be 0 with
 * *ids NULL). */
int mst_workers_ids(mst_workers *w, uint64_t **ids, size_t *n);
/* A malloc'd copy of a live worker's info (free with
 * protobuf_c_message_free_unpacked), or NULL if it is not live. */
struct Cis__WorkerInfo *mst_workers_info(mst_workers *w, uint64_t id);
/* Heartbeat timing as configured. */
/* Live and heard from within two heartbeats (and 0.5 s): not one going
 * silent before it is declared lost; and not registered again or in the
 * middle of a full report (until its last page, its locations are the
 * ones from before: a copy it may have lost). */
bool mst_workers_sure_holder(mst_workers *w, uint64_t id);
uint64_t mst_workers_heartbeat_ms(mst_workers *w);
uint64_t mst_workers_lost_ms(mst_workers *w);

/* policy.c: per-path policies (replication target, pin, TTL), inherited by
 * descendants: for each field the nearest ancestor that sets it wins. */
typedef struct mst_policy {
	uint32_t replicas;    /* 0: not set (no replication management) */
	int pin;              /* -1 not set, 0 unpinned, 1 pinned */
	int64_t ttl_s;        /* -1 not set, 0 off, > 0 seconds after load */
	size_t replicas_from; /* length of the path that set replicas (0: none) */
	size_t pin_from;      /* length of the path that set pin (0: none) */
} mst_policy;
#define MST_POLICY_UNSET ((mst_policy){0, -1, -1, 0, 0})
/* The effective policy of path. */
int mst_policy_resolve(mst_master *m, const char *path, mst_policy *out);
/* Change path's own policy: replicas (< 0 keep), pin (< 0 keep), ttl_s
 * (< -1 keep; -1 unset, 0 off). With clear_below, descendants' own
 * replication targets are removed so the whole subtree follows path. */
int mst_policy_update(mst_master *m, const char *path, int64_t replicas, int pin, int64_t ttl_s,
                      bool clear_below, cis_errmsg *em);
/* Drop the policies of path (no trailing slash) and of everything below it,
 * in txn (an unmount: what is mounted there next starts with none). */
int mst_policies_drop(mst_master *m, MDB_txn *txn, const char *path);
/* The stored policies for the API: each its own fields, "path" as text and
 * "path_hex" when the path is not UTF-8; NULL without memory. */
json_t *mst_policies_json(mst_master *m);
/* Paths with their own replication target (malloc'd strings, any bytes
 * but NUL, in a malloc'd NULL-terminated array; free with mst_strv_free). */
int mst_policies_with_replicas(mst_master *m, char ***paths, size_t *n);
/* Paths with their own pin: true, as mst_policies_with_replicas. */
int mst_policies_pinned(mst_master *m, char ***paths, size_t *n);
void mst_strv_free(char **v, size_t n);

/* walk.c: depth-first walk of the files below a path, in name order (each
 * directory's entries bytewise; a file's path compares with
 * mst_path_order); links are neither followed nor handed to fn. With list,
 * directories are listed from the store as lookups do; without, only what
 * LMDB holds is walked. fn returns 0 to go on, > 0 to stop, < 0 to fail.
 * Memory: O(depth * page), not O(files). */
typedef int (*mst_walk_fn)(void *arg, const char *path, const mst_inode *file);
/* A directory below the root that could not be listed: return 0 to skip
 * it and go on, negative to fail the walk. NULL: fail the walk. */
typedef int (*mst_walk_err_fn)(void *arg, const char *path, int code, const char *msg);
int mst_walk(mst_master *m, const char *path, bool list, mst_walk_fn fn, mst_walk_err_fn efn,
             void *arg, cis_errmsg *em);
/* Order of two paths as the walk visits them (component-wise bytewise). */
int mst_path_order(const char *a, const char *b);
/* Blocks of a file of its mount; 0 if the mount is gone. */
uint64_t mst_file_blocks(mst_master *m, const mst_inode *f, uint64_t *block_size);

/* repl.c: RPC clients to workers, the replication manager. */
int mst_wconns_new(mst_master *m, mst_wconns **out);
void mst_wconns_free(mst_wconns *c);
/* A worker was declared lost: calls in flight to it fail now (a load batch
 * is placed again) instead of waiting out their timeouts. */
void mst_wconns_abort(mst_master *m, uint64_t wid);
/* One RPC to worker wid (a live worker). res as cis_rpc_call. */
int mst_wcall(mst_master *m, uint64_t wid, uint16_t type, const ProtobufCMessage *req, void *res,
              int timeout_ms, cis_errmsg *em);
/* mst_wcall that fails with -ECANCELED once cancel fires (a job's calls:
 * cancelling the job or stopping the master must not wait for a slow
 * worker). */
int mst_wcall_in(mst_master *m, uint64_t wid, cis_rpc_cancel *cancel, uint16_t type,
                 const ProtobufCMessage *req, void *res, int timeout_ms, cis_errmsg *em);
int mst_repl_start(mst_master *m, uint64_t interval_ms, mst_repl **out);
/* Stop the thread; the struct stays for mst_repl_kick (jobs finishing
 * after it) until mst_repl_free. */
void mst_repl_stop(mst_repl *r);
void mst_repl_free(mst_repl *r);
/* Ask for a full scan soon (a policy changed, a load ended). */
void mst_repl_kick(mst_master *m);
/* One full pass now (tests): copies and trims; counts what it did. */
int mst_repl_scan(mst_master *m, uint64_t *copied, uint64_t *trimmed);
/* Hits and misses from a worker's /metrics (-errno if unreachable). */
int mst_worker_hits(const struct Cis__WorkerInfo *wi, uint64_t *hits, uint64_t *misses);

/* jobs.c: load / free / pin / unpin jobs, kept in LMDB. */
typedef struct mst_job_req {
	const char *type; /* "load", "free", "pin", "unpin" */
	const char *path;
	uint32_t replicas;  /* load: 0 means 1 */
	uint32_t parallel;  /* batches in flight; 0: LOAD_PARALLEL (16) */
	uint64_t bandwidth; /* bytes/s; 0: unlimited */
	bool verify, metadata_only;
	bool pin_checked; /* pin: the caller ran mst_pin_check (policy_lock held since) */
	bool keep_pinned; /* free: not the blocks of files the pin settings pin */
} mst_job_req;
/* Records of finished jobs past the newest `kept` (64 at least: the
 * finished jobs kept in memory) are deleted oldest first, at open and
 * after jobs finish, except those of running jobs and of loads whose TTL
 * is still to run. */
int mst_jobs_new(mst_master *m, bool background, uint64_t kept, mst_jobs **out);
/* Resume the jobs LMDB says were running (call once the RPC server runs,
 * before the API takes new jobs). */
int mst_jobs_resume(mst_master *m);
/* Running jobs stop: they commit nothing more (their records stay
 * "running", so the next start resumes them; so does a job submitted from
 * now on) and their calls to workers fail at once; their threads wind
 * down (mst_jobs_free joins them). The first step of a master's stop,
 * before anything in flight is cut short, so that an error of a request
 * abandoned then is never kept. */
void mst_jobs_stop(mst_jobs *j);
void mst_jobs_free(mst_jobs *j);
int mst_job_submit(mst_master *m, const mst_job_req *r, uint64_t *id, cis_errmsg *em);
/* The same with m->policy_lock already held (a policy change that submits a
 * job with it). */
int mst_job_submit_locked(mst_master *m, const mst_job_req *r, uint64_t *id, cis_errmsg *em);
/* Whether everything pinned still fits the cache (the live workers' total
 * capacity) once path (a real path) has the pin setting pin (< 0: kept) and
 * the replication target replicas (<= 0: kept; clear_below: also below
 * it): 0, or -ENOSPC with the sizes in em. A change that pins no more bytes
 * than now passes. O(pinned files): a walk of LMDB, listing the store below
 * a new pin. Caller holds m->policy_lock. */
int mst_pin_check(mst_master *m, const char *path, int pin, int64_t replicas, bool clear_below,
                  cis_errmsg *em);
/* The job's record (live counters while it runs); NULL if unknown. */
json_t *mst_job_json(mst_master *m, uint64_t id, size_t max_failures);
json_t *mst_jobs_json(mst_master *m);
int mst_job_cancel(mst_master *m, uint64_t id, cis_errmsg *em);
/* Run a job to its end on the calling thread (tests without background). */
int mst_job_run(mst_master *m, uint64_t id);
/* Whether id is among ids[0..n) (worker ids: a block's holders, a
 * placement). */
static inline bool mst_id_in(const uint64_t *ids, size_t n, uint64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* Whether a load job runs on path, below it or above it (the replication
 * manager leaves such paths to the load). */
bool mst_jobs_loading(mst_master *m, const char *path);
/* Whether a free job runs on path, below it or above it, or ended too
 * recently for the workers' block reports to show it (the replication
 * manager would copy back what it drops). */
bool mst_jobs_freeing(mst_master *m, const char *path);
/* TTL: free what loads left behind once their path's TTL has passed. */
int mst_jobs_expire(mst_master *m, int64_t now_ns, uint64_t *started);

/* rpc.c: the binary RPC, callable without a socket (tests, fuzzing). */
typedef struct mst_reply {
	ProtobufCMessage *msg; /* malloc'd; protobuf_c_message_free_unpacked */
	int code;              /* non-zero: an error reply */
	cis_errmsg em;
} mst_reply;
void mst_rpc_dispatch(mst_master *m, uint16_t type, const uint8_t *msg, size_t len, mst_reply *out);
/* The same without waiting on a store (for an I/O thread): false, out
 * empty, when the request would have to (a lookup or readdir in a directory
 * due for a listing, an open asking the store about a changed file). */
bool mst_rpc_dispatch_quick(mst_master *m, uint16_t type, const uint8_t *msg, size_t len,
                            mst_reply *out);
void mst_reply_clear(mst_reply *r);
struct cis_rpc_conn;
struct cis_frame_hdr;
struct evbuffer;
/* rpcpool.c: the cis_rpc_server handler (ctx: an mst_rpcpool): dispatch,
 * then reply (error or message); lookups, readdirs and opens, which may
 * wait on a store, on the pool's threads, the rest at once. */
typedef struct mst_rpcpool mst_rpcpool;
int mst_rpcpool_new(mst_master *m, int threads, mst_rpcpool **out);
/* After the RPC server has stopped: requests still queued are dropped. */
void mst_rpcpool_free(mst_rpcpool *p);
void mst_rpc_handler(void *ctx, struct cis_rpc_conn *conn, const struct cis_frame_hdr *hdr,
                     const uint8_t *msg, struct evbuffer *data);

/* api.c: the HTTP admin API, callable without a socket. query holds the
 * decoded query parameters, body the parsed JSON (or NULL). *out is the
 * reply body (caller's); returns the HTTP status. */
int mst_api_handle(mst_master *m, const char *method, const char *path, const cis_kvlist *query,
                   json_t *body, json_t **out);
/* The query parameter names mst_api_handle reads. */
extern const char *const mst_api_query_names[];

#endif
