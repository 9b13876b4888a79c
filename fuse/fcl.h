/* cistern-fuse internals (prefix fcl_). Modules, one concept each:
 *   opts.c      command line and mount.fuse3 "-o" options
 *   lru.c       bounded LRU map (metadata caches, descriptor cache)
 *   inode.c     kernel lookup counts; forget drops entries
 *   meta.c      entry/attribute/negative caches with single flight
 *   readahead.c per-handle sequential detector and window
 *   versions.c  the version of each file the page cache holds
 *   dirahead.c  files of a directory opened in order: the next ones to prefetch
 *   dirfresh.c  names of a directory asked one by one: when to list it instead
 *   master.c    master RPC: namespace, open, worker list
 *   local.c     short-circuit: block fds from the local worker, leases
 *   remote.c    streamed block reads from workers over TCP
 *   read.c      offset -> block -> worker, failover, store-direct
 *   metrics.c   /metrics counters
 *   main.c      FUSE low-level operations, session, daemon
 * The modules before master.c use neither libfuse nor the RPC layer, so the
 * unit tests compile them in directly. */
#ifndef CISTERN_FUSE_FCL_H
#define CISTERN_FUSE_FCL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cistern/error.h"
#include "cistern/hash.h"
#include "cistern/kv.h"
#include "cistern/ufs.h"

/* ---- options (opts.c) ---- */

typedef struct fcl_opts {
	char *mountpoint;
	char *master;        /* "host:port" */
	char *root;          /* cistern path shown at the mount point, "/" by default */
	double attr_timeout; /* seconds */
	double entry_timeout;
	double negative_timeout;
	int http_port;             /* metrics; 0 turns the server off */
	char *http_bind;           /* the address it listens on, 0.0.0.0 by default */
	uint64_t readahead_budget; /* bytes of blocks asked ahead per handle */
	uint64_t fd_cache;         /* short-circuit descriptors kept open */
	uint64_t meta_cache;       /* entries in each metadata cache */
	int worker_timeout_ms;     /* a worker slower than this is skipped */
	int threads;               /* FUSE worker threads at most */
	bool foreground;
	bool no_short_circuit; /* read a same-host worker over TCP too */
	bool no_passthrough;   /* never let the kernel read block files itself */
	bool debug;
	char *log_level;
	char *log_file;  /* where the daemon logs (it has no stderr) */
	char *fuse_opts; /* comma list handed to libfuse ("allow_other,ro") */
} fcl_opts;

/* Parse argv. Accepts both "cistern-fuse MNT --master H:P [...]" and the
 * mount.fuse3 form "cistern-fuse SOURCE MNT -o master=H:P,ro,..." (SOURCE
 * "H:P" sets the master; other sources are ignored). Options of ours inside
 * -o lists (master=, root=, attr_timeout=, ...) are taken out; the rest go to
 * libfuse in fuse_opts. 0; 1 for --help; -CIS_E_CONFIG with em. o is the
 * caller's to fcl_opts_free afterwards, also on failure. */
int fcl_opts_parse(fcl_opts *o, int argc, char **argv, cis_errmsg *em);
void fcl_opts_free(fcl_opts *o);
void fcl_opts_usage(FILE *out);

/* ---- bounded LRU map (lru.c) ---- */

/* Keys are byte strings up to 4 KiB, values fixed-size blobs copied in and
 * out. Thread-safe (one mutex). */
typedef struct fcl_lru fcl_lru;

int fcl_lru_new(size_t capacity, size_t val_size, fcl_lru **out);
void fcl_lru_free(fcl_lru *l);
/* Copy the value into val (may be NULL) and mark it recently used. */
bool fcl_lru_get(fcl_lru *l, const void *key, size_t klen, void *val);
/* Insert or replace. When that pushes out the least recently used entry,
 * its value is copied to evicted (if not NULL) and *did_evict set. A
 * replaced value is not reported. 0 or -ENOMEM / -EINVAL. */
int fcl_lru_put(fcl_lru *l, const void *key, size_t klen, const void *val, void *evicted,
                bool *did_evict);
/* fcl_lru_put (no eviction reported), unless the key is in place with a
 * value for which keep(value, arg) is true: then nothing changes and 1 is
 * returned. The check and the put are one step under the map's lock. */
int fcl_lru_put_unless(fcl_lru *l, const void *key, size_t klen, const void *val,
                       bool (*keep)(const void *old, void *arg), void *arg);
/* Remove; the value is copied to val when found. */
bool fcl_lru_remove(fcl_lru *l, const void *key, size_t klen, void *val);
/* Remove the least recently used entry, copying its value out. */
bool fcl_lru_pop(fcl_lru *l, void *val);
/* Remove the least recently used entry if pred says so. */
bool fcl_lru_pop_if(fcl_lru *l, bool (*pred)(const void *val, void *arg), void *arg, void *val);
size_t fcl_lru_count(fcl_lru *l);

/* ---- kernel lookup counts (inode.c) ---- */

/* FUSE node ids are master inode ids, so the only per-inode state the
 * client keeps is the kernel's lookup count and its open files, and forget
 * (with the last release) removes even that: memory follows what the
 * kernel holds, not what was ever looked up. */
typedef struct fcl_inodes fcl_inodes;

/* A node's open files and how the kernel reads them (passthrough.c), and
 * the version its page cache holds (versions.c). */
typedef struct fcl_io {
	uint32_t opens;          /* opens answered and not yet released */
	int32_t backing;         /* the backing file they share; 0: none */
	uint64_t vhash;          /* version of the object the backing file holds */
	uint64_t page_vhash;     /* the newest version an open got; 0: none known */
	uint64_t page_answered;  /* the ticket of that open's master answer */
	bool page_changed;       /* a read found it changed in the store */
	uint64_t page_switch_ms; /* when an open last moved it to another version */
} fcl_io;

int fcl_inodes_new(fcl_inodes **out);
void fcl_inodes_free(fcl_inodes *t);
/* One more kernel reference (a reply to lookup or a readdirplus entry). */
int fcl_inodes_ref(fcl_inodes *t, uint64_t ino);
/* Drop n references; true when the node is now gone (or was unknown). */
bool fcl_inodes_forget(fcl_inodes *t, uint64_t ino, uint64_t n);
uint64_t fcl_inodes_lookups(fcl_inodes *t, uint64_t ino);
/* Call fn on ino's open state under the node's lock (a node the kernel
 * does not hold gets one too; it goes when neither lookups nor opens are
 * left). 0, -EINVAL or -ENOMEM (fn not called). */
int fcl_inodes_with_io(fcl_inodes *t, uint64_t ino, void (*fn)(fcl_io *io, void *arg), void *arg);
size_t fcl_inodes_count(fcl_inodes *t);

/* ---- metadata caches (meta.c) ---- */

typedef struct fcl_attr {
	uint64_t ino; /* master inode id */
	bool is_dir;
	bool is_link; /* a symbolic link: size is its text's length */
	uint64_t size;
	int64_t mtime_ns;
	uint32_t mode; /* permission bits only */
	uint32_t nlink;
	uint64_t vhash; /* hash of the object version; 0: none (directories) */
} fcl_attr;

/* Where misses go (the master, or a test double). Return 0 or a negative
 * code; -ENOENT from lookup is cached as a negative entry. */
typedef struct fcl_meta_src {
	int (*lookup)(void *ctx, uint64_t parent, const char *name, fcl_attr *out, cis_errmsg *em);
	int (*getattr)(void *ctx, uint64_t ino, fcl_attr *out, cis_errmsg *em);
	void *ctx;
} fcl_meta_src;

typedef struct fcl_meta fcl_meta;

/* Timeouts in ms; 0 turns that cache off. capacity bounds each cache. */
int fcl_meta_new(const fcl_meta_src *src, uint64_t entry_ms, uint64_t attr_ms, uint64_t neg_ms,
                 size_t capacity, fcl_meta **out);
void fcl_meta_free(fcl_meta *m);
/* A name in a directory: the cache, else one request to the source however
 * many threads ask for the same name at once. 0, -ENOENT, or the source's
 * code (em says why). */
/* Seconds the cached entry (the name) and attributes an answer came from
 * had left, each -1 for a fresh answer from the source. An answer taken
 * from the cache is the kernel's for no longer than that: given the whole
 * timeout again, it would outlive the client's own bound on how stale it
 * may be. */
typedef struct fcl_left {
	double entry, attr;
} fcl_left;
/* left: NULL, or filled on every return (a negative lookup's entry too). */
int fcl_meta_lookup(fcl_meta *m, uint64_t parent, const char *name, fcl_attr *out, fcl_left *left,
                    cis_errmsg *em);
int fcl_meta_getattr(fcl_meta *m, uint64_t ino, fcl_attr *out, fcl_left *left, cis_errmsg *em);
/* Seconds the cached attributes of ino have left (-1: none cached). */
double fcl_meta_attr_left(fcl_meta *m, uint64_t ino);
/* A ticket, taken as an answer that will be put arrives: an answer never
 * replaces one put with a later ticket (a thread may put its answer after
 * a newer one's). */
uint64_t fcl_meta_ticket(fcl_meta *m);
/* Seed the caches from a listing or an open. */
void fcl_meta_put(fcl_meta *m, uint64_t parent, const char *name, const fcl_attr *a,
                  uint64_t ticket);
void fcl_meta_put_attr(fcl_meta *m, const fcl_attr *a, uint64_t ticket);
void fcl_meta_forget_attr(fcl_meta *m, uint64_t ino);
/* Whether an answer later than ticket is cached for ino (expired or not;
 * the source is not asked): 1 with its attributes in *out, -1 when it
 * forgot the node (a read found it changed), 0 when none is. For a copy
 * of attributes kept since ticket (a directory handle's listing), so it
 * never hands the kernel older ones than the client gave it since. */
int fcl_meta_newer_attr(fcl_meta *m, uint64_t ino, uint64_t ticket, fcl_attr *out);

/* Open cache: what an Open reply says about a file that does not change
 * while its version does not, so an open(2) needs no master request while
 * the inode's attributes are cached. An entry lives as long as the
 * attributes put with it (attr timeout: no staler than getattr), and goes
 * when the attribute cache learns another version of the inode (or
 * forgets it). Bounded by the attribute cache's capacity (at most
 * FCL_OPEN_CACHE_MAX). Off when the attribute timeout is 0. */
#define FCL_OPEN_CACHE_MAX 65536

struct fcl_mount;

typedef struct fcl_open_info {
	struct fcl_mount *mount; /* shared with the client's mount list, never freed here */
	char *key;               /* object key; a get hands the caller a copy to free */
	char version[CIS_UFS_VERSION_MAX];
	uint64_t size;
	uint64_t block_size;
	uint64_t answered; /* the ticket its Open answer took (fcl_meta_ticket): later is newer */
} fcl_open_info;

/* Remember oi (its key copied) and put a as the inode's attributes. */
void fcl_meta_put_open(fcl_meta *m, const fcl_attr *a, const fcl_open_info *oi);
/* 0 and *oi (oi->key the caller's to free) while the entry is valid;
 * -ENOENT on a miss, -ENOMEM. */
int fcl_meta_get_open(fcl_meta *m, uint64_t ino, fcl_open_info *oi);
/* Entries in the open cache. */
size_t fcl_meta_open_count(fcl_meta *m);

/* ---- versions the page cache holds (versions.c) ---- */

/* The version of each node's pages is the newest master answer (by its
 * arrival's ticket, `answered`) an open got, kept in the node's state.
 *
 * An open of the version hashed vhash (versioned: the object has a
 * version; files without one never keep pages), from the master answer
 * of ticket answered: true when the kernel may keep the node's pages (they
 * are of this version). Notes the version unless a newer answer said
 * another. */
bool fcl_versions_opened(fcl_inodes *t, uint64_t ino, uint64_t vhash, bool versioned,
                         uint64_t answered);
/* The hash of the node's version when that is not vhash (a handle on an
 * older one); 0 when it is, or none is known. */
uint64_t fcl_versions_other(fcl_inodes *t, uint64_t ino, uint64_t vhash);
/* A read found the object changed in the store: the next open keeps no
 * pages, whatever version it names. The version stays, so handles still
 * open on older ones keep failing their reads (fcl_versions_other):
 * forgetting it would let them fill the node's cache with old bytes under
 * the newer handles. */
void fcl_versions_changed(fcl_inodes *t, uint64_t ino);

/* Slot of ino in a table of 1 << bits (Fibonacci hashing: consecutive
 * inode numbers spread over the table). */
static inline size_t fcl_ino_slot(uint64_t ino, int bits)
{
	return (size_t)((ino * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

/* ---- readahead (readahead.c) ---- */

typedef struct fcl_ra {
	uint64_t next_off;   /* where a sequential reader reads next */
	uint64_t last_block; /* block of the previous read */
	uint32_t seq;        /* sequential reads in a row */
	uint64_t window;     /* blocks asked ahead of the reader; 0: none */
	uint64_t max_window;
	uint64_t issued_to; /* blocks below this were asked for already */
	uint64_t slack;     /* a read this far from next_off, or 4 lengths, is in order */
	uint64_t run_start; /* where the current run began */
} fcl_ra;

/* Slack of one open file's detector: the kernel's parallel readahead
 * requests of one reader. */
#define FCL_RA_SLACK_HANDLE (512u << 10)
/* Slack of the detector a file's opens share: the reads of a loader's
 * threads, each opening the file for one sample, come a few samples out
 * of order. */
#define FCL_RA_SLACK_SHARED (1u << 20)

/* Blocks one prefetch names at most, and so the most a window may hold:
 * a larger window would mark blocks asked for that no request named. */
#define FCL_PREFETCH_MAX 256
/* max_window_blocks: at most FCL_PREFETCH_MAX (larger is cut to it). */
void fcl_ra_init(fcl_ra *ra, uint64_t max_window_blocks, uint64_t slack);
/* Record a read of [off, off+len). Returns how many blocks to prefetch,
 * starting at *first (never past the file's last block and never the same
 * block twice in one sequential run); 0 for random access. */
uint64_t fcl_ra_on_read(fcl_ra *ra, uint64_t off, uint64_t len, uint64_t block_size,
                        uint64_t file_size, uint64_t *first);

/* The detectors of files read through many opens: a loader that opens a
 * shard for each sample it reads, samples in order, never reads twice
 * through one open, so no open's own detector starts. One detector per
 * file, in a table of 1 << FCL_RA_SHARED_BITS (a file whose slot
 * another takes starts over). */
#define FCL_RA_SHARED_BITS 10
typedef struct fcl_ra_shared fcl_ra_shared;
int fcl_ra_shared_new(fcl_ra_shared **out);
void fcl_ra_shared_free(fcl_ra_shared *rs);
/* fcl_ra_on_read on the detector of file ino (whose version hashes to
 * vhash: another version starts over). */
uint64_t fcl_ra_shared_on_read(fcl_ra_shared *rs, uint64_t ino, uint64_t vhash,
                               uint64_t max_window_blocks, uint64_t off, uint64_t len,
                               uint64_t block_size, uint64_t file_size, uint64_t *first);

/* ---- directory readahead (dirahead.c) ---- */

typedef struct fcl_dirahead fcl_dirahead;

/* Files named per prefetch at most. */
#define DA_MAX_WINDOW 64

typedef struct fcl_da_file {
	uint64_t ino; /* master inode */
	uint64_t size;
} fcl_da_file;

int fcl_da_new(fcl_dirahead **out);
void fcl_da_free(fcl_dirahead *da);
/* The files of directory dino in listing order, as just served, and its
 * subdirectories' inodes in listing order (a window that runs past the end
 * of one goes on into the next). */
void fcl_da_listed(fcl_dirahead *da, uint64_t dino, const fcl_da_file *files, size_t n,
                   const uint64_t *subdirs, size_t nsub);
/* File ino was opened. When its directory's files are being opened in
 * order, fills next (at most max) with the inodes of the files after it
 * (and then of the next directories), of 1..max_size bytes, not named
 * before; returns how many. */
size_t fcl_da_opened(fcl_dirahead *da, uint64_t ino, uint64_t max_size, uint64_t *next, size_t max);

/* ---- directory refresh (dirfresh.c) ---- */

typedef struct fcl_dirfresh fcl_dirfresh;

/* Names of one directory found at the master that get it listed. */
#define DF_MISSES 32

/* gap_ns: the least time between two listings of one directory (0: never
 * list, as when names are not cached). */
int fcl_df_new(uint64_t gap_ns, fcl_dirfresh **out);
void fcl_df_free(fcl_dirfresh *df);
/* A name in directory dino was found at the master (monotonic now_ns);
 * true when that queued the directory for a listing. df may be NULL. */
bool fcl_df_missed(fcl_dirfresh *df, uint64_t dino, uint64_t now_ns);
/* Wait for a queued directory: 0 with *dino, or -ECANCELED once stopped. */
int fcl_df_next(fcl_dirfresh *df, uint64_t *dino);
/* Directory dino holds more names than the caches: never queue it again
 * while remembered. */
void fcl_df_too_big(fcl_dirfresh *df, uint64_t dino);
/* Wake and end every fcl_df_next; queue nothing more. */
void fcl_df_stop(fcl_dirfresh *df);

#endif
