/* Jobs: load (preload blocks onto their owners), free, pin, unpin.
 *
 * A job's record lives in the jobs dbi (JSON text) and is rewritten about
 * once a second while it runs, so a restarted master resumes it (see
 * mst_jobs_resume). Each running job has a producer thread that walks the
 * path (streaming, mst_walk) and N sender threads.
 *
 * Load: for each block of each file, its owners are the first R live
 * workers in rendezvous order (cis_place); an owner that holds the block
 * already answers was_cached without a fetch (tasks_cached). Tasks (block, owner) are gathered in
 * per-worker batches (LOAD_BATCH blocks) and put on a bounded queue that
 * the senders drain with Load RPCs, so at most `parallel` batches per job
 * are in flight and the producer blocks when the queue is full. A batch
 * whose worker cannot be reached (lost, refused, timed out) has its tasks
 * placed again over the workers still live, up to LOAD_ATTEMPTS times; a
 * task with nowhere else to go whose block a live worker holds is cached.
 *
 * Exact, resumable counts: files are tracked in walk order while their
 * tasks are out; when the oldest one is complete its counts move into the
 * committed totals and it becomes the cursor. The record holds committed
 * totals and the cursor only, so after a restart the walk skips files up to
 * the cursor (mst_path_order, done_before) and counts the rest again:
 * nothing is counted twice. A directory that fails to list is tracked the
 * same way, as a file with its error. Memory per job: the walk's page per level, the queue, and the
 * files in flight (at most INFLIGHT_FILES), never the whole file list. */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "cistern/config.h"
#include "cistern/json_text.h"
#include "cistern/log.h"
#include "cistern/msgtype.h"
#include "cistern/place.h"
#include "cistern/proto/worker.pb-c.h"
#include "cistern/rpc.h"
#include "cistern/time.h"
#include "master.h"

#define LOAD_BATCH         64
#define LOAD_ATTEMPTS      5
#define JOBS_KEPT_FINISHED 64 /* finished jobs kept in memory */
/* Batches in flight per job unless the request says: enough to keep every
 * worker's fetch threads busy through the tail of a batch (a 2 GiB load
 * into 3 workers: 4 batches 0.40 of the store's limit, 16 batches
 * 0.6-0.7). */
#define LOAD_PARALLEL  16
#define INFLIGHT_FILES 4096
#define FAILURES_KEPT  1000
#define PRUNE_BATCH    10000 /* job records deleted in one transaction at most */
#define BCAST_BATCH    512

enum { JOB_RUNNING, JOB_DONE, JOB_FAILED, JOB_CANCELLED };
static const char *const state_names[] = {"running", "done", "failed", "cancelled"};

struct counts {
	uint64_t files, files_failed, bytes, blocks;
	uint64_t tasks_loaded, tasks_cached, tasks_failed, bytes_loaded;
	uint64_t verify_missing;
};

struct frec {
	struct frec *next;
	char *path, *key, *version;
	uint64_t ino, mount_id, size, bs;
	bool dir;            /* a directory that failed to list: err, no tasks */
	bool pin;            /* its blocks are pinned once loaded */
	uint64_t policy_gen; /* m->policy_gen when pin was read */
	uint32_t left;       /* tasks not finished */
	bool all_queued;     /* every task of the file was made */
	struct counts c;     /* this file's own counts */
	char *err;           /* first failure */
};

struct task {
	struct frec *f;
	uint64_t index;
	cis_block_id id;
	int attempts;
};

struct batch {
	struct batch *next;
	uint64_t wid;
	bool pin; /* for every block in it */
	size_t n;
	uint64_t bytes; /* the blocks' lengths (a file's last block may be short) */
	struct task t[LOAD_BATCH];
};

struct badw {
	uint64_t id, until_ms;
};

struct job {
	struct job *next;
	struct mst_jobs *js;
	uint64_t id;
	char type[8];
	char *path;
	uint32_t replicas, parallel;
	uint64_t bandwidth;
	bool verify, metadata_only, pin;
	bool keep_pinned; /* free: files pinned now keep their blocks */
	int state;
	char error[512];
	int64_t created_ns, finished_ns;
	char *cursor;        /* the last file committed (changes under js->lock) */
	char *resume_after;  /* the cursor a resumed job started from: fixed */
	struct counts c;     /* committed */
	uint64_t files_seen; /* walked so far (progress) */
	uint64_t bytes_seen;
	bool listing_done, expired;
	json_t *failures;
	uint64_t failures_total;
	/* running state */
	bool cancel, thread, resumed;
	bool shutdown;         /* the master is stopping: keep the record as it is */
	bool cancel_asked;     /* by the user: saved even while the master stops */
	cis_rpc_cancel *calls; /* its calls to workers: fired on cancel and shutdown */
	pthread_t th;
	pthread_cond_t cond; /* queue, in-flight files */
	struct batch *qhead, *qtail;
	size_t qlen;
	bool closed;
	struct frec *fhead, *ftail;
	size_t nfiles;
	struct batch **pending; /* per worker and pin flag, keyed in pend_ids */
	uint64_t *pend_ids;
	size_t npend;
	struct badw bad[16];
	uint64_t *live;
	size_t nlive;
	uint64_t live_version;
	uint64_t bw_due_ms; /* when what was sent is paid for at the cap */
	bool dirty;
	uint64_t saved_ms;
};

/* A finished load whose TTL has not been applied: what the expiry looks
 * at each second, kept in memory (the records, failures and all, are
 * read once). */
struct ended {
	uint64_t id;
	char *path;
	int64_t finished_ns;
	int state;
	int64_t due_ns; /* its TTL passes, by the policies at ended_gen; INT64_MAX: none */
};

struct mst_jobs {
	mst_master *m;
	pthread_mutex_t lock; /* guards every job's fields */
	struct job *list;
	bool background;
	bool stopping;         /* mst_jobs_stop: jobs commit nothing more */
	uint64_t kept;         /* finished job records kept besides those a TTL needs */
	atomic_bool prune_due; /* a job finished since the last prune_records */
	/* The finished loads not expired: read from the records at open, then
	 * added by job_main. Guarded by ended_lock, taken with no other lock
	 * held, so a recount of their due times holds up no job. */
	pthread_mutex_t ended_lock;
	struct ended *ended;
	size_t nended, ended_cap;
	uint64_t ended_gen; /* m->policy_gen their due times were worked out at */
};

/* ---- records ---- */

static json_t *counts_json(const struct counts *c)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "files",
	                 (json_int_t)c->files, "files_failed", (json_int_t)c->files_failed, "bytes",
	                 (json_int_t)c->bytes, "blocks", (json_int_t)c->blocks, "tasks_loaded",
	                 (json_int_t)c->tasks_loaded, "tasks_cached", (json_int_t)c->tasks_cached,
	                 "tasks_failed", (json_int_t)c->tasks_failed, "bytes_loaded",
	                 (json_int_t)c->bytes_loaded, "verify_missing",
	                 (json_int_t)c->verify_missing);
}

static void counts_from(struct counts *c, json_t *o)
{
#define G(f) c->f = (uint64_t)json_integer_value(json_object_get(o, #f))
	G(files);
	G(files_failed);
	G(bytes);
	G(blocks);
	G(tasks_loaded);
	G(tasks_cached);
	G(tasks_failed);
	G(bytes_loaded);
	G(verify_missing);
#undef G
}

/* Caller holds js->lock. */
static json_t *job_record(const struct job *j, size_t max_failures, bool live)
{
	json_t *o =
	    json_pack("{s:I, s:s, s:s, s:I, s:I, s:I, s:b, s:b, s:b, s:I, s:I, s:o, s:b, s:I, s:b}",
	              "id", (json_int_t)j->id, "type", j->type, "state", state_names[j->state],
	              "replicas", (json_int_t)j->replicas, "parallel", (json_int_t)j->parallel,
	              "bandwidth", (json_int_t)j->bandwidth, "verify", j->verify, "metadata_only",
	              j->metadata_only, "pin", j->pin, "created_ns", (json_int_t)j->created_ns,
	              "finished_ns", (json_int_t)j->finished_ns, "counts", counts_json(&j->c),
	              "listing_done", j->listing_done, "failures_total",
	              (json_int_t)j->failures_total, "expired", j->expired);
	if (!o)
		return NULL;
	(void)cis_json_set_text(o, "path", j->path);
	if (j->cursor)
		(void)cis_json_set_text(o, "cursor", j->cursor);
	if (j->error[0])
		json_object_set_new(o, "error", cis_json_text(j->error));
	if (j->keep_pinned)
		json_object_set_new(o, "keep_pinned", json_true());
	json_t *f = json_array();
	for (size_t i = 0; i < json_array_size(j->failures) && i < max_failures; i++)
		json_array_append(f, json_array_get(j->failures, i));
	json_object_set_new(o, "failures", f);
	if (live) {
		json_object_set_new(o, "files_seen", json_integer((json_int_t)j->files_seen));
		json_object_set_new(o, "bytes_seen", json_integer((json_int_t)j->bytes_seen));
		/* in-flight files' finished work, for a smooth progress bar */
		struct counts cur = j->c;
		for (struct frec *f2 = j->fhead; f2; f2 = f2->next) {
			cur.tasks_loaded += f2->c.tasks_loaded;
			cur.tasks_cached += f2->c.tasks_cached;
			cur.bytes_loaded += f2->c.bytes_loaded;
		}
		json_object_set_new(o, "progress", counts_json(&cur));
	}
	return o;
}

static struct job *job_from_record(struct mst_jobs *js, json_t *o)
{
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->js = js;
	j->id = (uint64_t)json_integer_value(json_object_get(o, "id"));
	snprintf(j->type, sizeof(j->type), "%s",
	         json_string_value(json_object_get(o, "type")) ?: "");
	j->path = cis_json_get_text(o, "path");
	const char *st = json_string_value(json_object_get(o, "state")) ?: "";
	for (int i = 0; i < 4; i++)
		if (!strcmp(st, state_names[i]))
			j->state = i;
	j->replicas = (uint32_t)json_integer_value(json_object_get(o, "replicas"));
	j->parallel = (uint32_t)json_integer_value(json_object_get(o, "parallel"));
	if (j->parallel == 0 ||
	    j->parallel > CIS_PARALLEL_MAX) /* a record's own; a queue bound needs one */
		j->parallel = LOAD_PARALLEL;
	j->bandwidth = (uint64_t)json_integer_value(json_object_get(o, "bandwidth"));
	j->verify = json_is_true(json_object_get(o, "verify"));
	j->metadata_only = json_is_true(json_object_get(o, "metadata_only"));
	j->pin = json_is_true(json_object_get(o, "pin"));
	j->keep_pinned = json_is_true(json_object_get(o, "keep_pinned"));
	j->expired = json_is_true(json_object_get(o, "expired"));
	j->created_ns = json_integer_value(json_object_get(o, "created_ns"));
	j->finished_ns = json_integer_value(json_object_get(o, "finished_ns"));
	j->cursor = cis_json_get_text(o, "cursor");
	j->resume_after = j->cursor ? strdup(j->cursor) : NULL;
	counts_from(&j->c, json_object_get(o, "counts"));
	j->failures_total = (uint64_t)json_integer_value(json_object_get(o, "failures_total"));
	j->failures = json_array();
	json_array_extend(j->failures, json_object_get(o, "failures"));
	const char *e = json_string_value(json_object_get(o, "error"));
	if (e)
		snprintf(j->error, sizeof(j->error), "%s", e);
	pthread_cond_init(&j->cond, NULL);
	if (!j->path || !j->failures || cis_rpc_cancel_new(&j->calls)) {
		free(j->path);
		free(j->cursor);
		free(j->resume_after);
		json_decref(j->failures);
		pthread_cond_destroy(&j->cond);
		free(j);
		return NULL;
	}
	return j;
}

static int record_put(mst_master *m, uint64_t id, json_t *rec)
{
	char *s = json_dumps(rec, JSON_COMPACT);
	if (!s)
		return -ENOMEM;
	MDB_txn *txn;
	int err = mst_txn_begin(m, true, &txn);
	if (!err) {
		uint64_t kbe = htobe64(id);
		MDB_val k = {8, &kbe}, v = {strlen(s), s};
		int rc = mdb_put(txn, m->dbi_jobs, &k, &v, 0);
		if (rc) {
			mdb_txn_abort(txn);
			err = rc == MDB_MAP_FULL ? -ENOSPC : -CIS_E_INTERNAL;
		} else {
			err = mst_txn_commit(txn);
		}
	}
	free(s);
	return err;
}

static json_t *record_get(mst_master *m, uint64_t id)
{
	MDB_txn *txn;
	json_t *o = NULL;
	if (mst_txn_begin(m, false, &txn))
		return NULL;
	uint64_t kbe = htobe64(id);
	MDB_val k = {8, &kbe}, v;
	if (mdb_get(txn, m->dbi_jobs, &k, &v) == 0)
		o = json_loadb(v.mv_data, v.mv_size, 0, NULL);
	mdb_txn_abort(txn);
	return o;
}

/* Save j's record. Caller holds js->lock. */
static void job_save(struct job *j)
{
	if (j->shutdown && !j->cancel_asked)
		return; /* the saved record must still say "running" */
	json_t *rec = job_record(j, FAILURES_KEPT, false);
	/* Cancelled, its thread still winding down: a master stopped now must
	 * not resume it. */
	if (rec && j->cancel && j->state == JOB_RUNNING)
		json_object_set_new(rec, "state", json_string(state_names[JOB_CANCELLED]));
	int err = rec ? record_put(j->js->m, j->id, rec) : -ENOMEM;
	json_decref(rec);
	if (err)
		cis_warn("job record not saved", "id=%llu: %s", (unsigned long long)j->id,
		         cis_strerror(err));
	j->dirty = false;
	j->saved_ms = cis_mono_ms();
}

/* Save j's record if it changed and the last save is a second old. Caller
 * holds js->lock. */
static void save_due(struct job *j)
{
	if (j->dirty && cis_mono_ms() - j->saved_ms >= 1000)
		job_save(j);
}

/* j's thread could not start: it ends failed, and its record says so (a
 * record left "running" would name a job nothing runs). Caller holds
 * js->lock. */
static void job_not_started(struct job *j)
{
	j->state = JOB_FAILED;
	snprintf(j->error, sizeof(j->error), "cannot start the job thread");
	j->finished_ns = cis_wall_ns();
	job_save(j);
}

/* Caller holds js->lock. */
static void add_failure(struct job *j, const char *path, const char *msg)
{
	j->failures_total++;
	if (json_array_size(j->failures) >= FAILURES_KEPT)
		return;
	json_t *f = json_object();
	(void)cis_json_set_text(f, "path", path);
	json_object_set_new(f, "error", cis_json_text(msg));
	json_array_append_new(j->failures, f);
}

static void frec_free(struct frec *f)
{
	free(f->path);
	free(f->key);
	free(f->version);
	free(f->err);
	free(f);
}

/* Move completed files at the head into the committed totals. Caller holds
 * js->lock. */
static void commit_head(struct job *j)
{
	if (j->shutdown)
		return; /* tasks dropped at shutdown are redone after the restart */
	while (j->fhead && j->fhead->all_queued && j->fhead->left == 0) {
		struct frec *f = j->fhead;
		j->fhead = f->next;
		if (!j->fhead)
			j->ftail = NULL;
		j->nfiles--;
		j->c.files += !f->dir;
		j->c.bytes += f->size;
		j->c.blocks += f->c.blocks;
		j->c.tasks_loaded += f->c.tasks_loaded;
		j->c.tasks_cached += f->c.tasks_cached;
		j->c.tasks_failed += f->c.tasks_failed;
		j->c.bytes_loaded += f->c.bytes_loaded;
		if (f->err) {
			j->c.files_failed += !f->dir;
			add_failure(j, f->path, f->err);
		}
		free(j->cursor);
		j->cursor = f->path;
		f->path = NULL;
		frec_free(f);
		j->dirty = true;
		pthread_cond_broadcast(&j->cond);
	}
	save_due(j); /* also when no one waits: a metadata-only load */
}

/* A task finished. Caller holds js->lock. */
static void task_done(struct job *j, struct task *t, int code, const char *msg, bool cached,
                      uint64_t len)
{
	struct frec *f = t->f;
	if (code < 0) {
		f->c.tasks_failed++;
		const char *hint = code == -CIS_E_CHANGED
		                       ? " (the master has taken the new version from the store: "
		                         "load it again)"
		                       : "";
		if (!f->err && asprintf(&f->err, "block %llu: %s%s", (unsigned long long)t->index,
		                        msg ? msg : cis_strerror(code), hint) < 0)
			f->err = NULL;
	} else if (cached) {
		f->c.tasks_cached++;
	} else {
		f->c.tasks_loaded++;
		f->c.bytes_loaded += len;
	}
	f->left--;
	commit_head(j);
}

/* ---- placement ---- */

/* Refresh j->live when membership moved. Caller holds js->lock. */
static void refresh_live(struct job *j, mst_master *m)
{
	uint64_t v = mst_workers_version(m->workers);
	if (j->live && v == j->live_version)
		return;
	free(j->live);
	j->live = NULL;
	j->nlive = 0;
	mst_workers_ids(m->workers, &j->live, &j->nlive);
	j->live_version = v;
}

static bool is_bad(struct job *j, uint64_t wid)
{
	uint64_t now = cis_mono_ms();
	for (size_t i = 0; i < 16; i++)
		if (j->bad[i].id == wid && j->bad[i].until_ms > now)
			return true;
	return false;
}

static void mark_bad(struct job *j, uint64_t wid, uint64_t for_ms)
{
	size_t slot = 0;
	for (size_t i = 0; i < 16; i++) {
		if (j->bad[i].id == wid) {
			slot = i;
			break;
		}
		if (j->bad[i].until_ms < j->bad[slot].until_ms)
			slot = i;
	}
	j->bad[slot].id = wid;
	j->bad[slot].until_ms = cis_mono_ms() + for_ms;
}

/* The bytes of t's block: the block size, less at the file's end. */
static uint64_t task_bytes(const struct task *t)
{
	uint64_t end = (t->index + 1) * t->f->bs;
	return (end > t->f->size ? t->f->size : end) - t->index * t->f->bs;
}

/* b goes on the queue. Caller holds js->lock. */
static void queue_batch(struct job *j, struct batch *b)
{
	if (j->qtail)
		j->qtail->next = b;
	else
		j->qhead = b;
	j->qtail = b;
	j->qlen++;
	pthread_cond_broadcast(&j->cond);
}

/* Append the task to worker wid's pending batch; a full batch goes on the
 * queue. A batch is full at LOAD_BATCH blocks, or under a bandwidth cap
 * at one second of it in bytes (the blocks' real lengths: small files'
 * blocks are far shorter than the block size), one block at least: a
 * block that would take it past the second starts the next batch, and
 * one that leaves less room than its own length closes it. So a load
 * shorter than a batch is capped too (the cap allows one batch on
 * credit). Caller holds js->lock. */
static int pend_task(struct job *j, uint64_t wid, const struct task *t)
{
	/* a batch per worker and pin flag: the slot's key has the flag in bit 63 */
	uint64_t key = wid | (t->f->pin ? 1ull << 63 : 0);
	uint64_t len = task_bytes(t), cap = j->bandwidth;
	size_t i;
	for (i = 0; i < j->npend; i++)
		if (j->pend_ids[i] == key)
			break;
	if (i == j->npend) {
		uint64_t *ni = realloc(j->pend_ids, (j->npend + 1) * sizeof(*ni));
		if (!ni)
			return -ENOMEM;
		j->pend_ids = ni;
		struct batch **nb = realloc(j->pending, (j->npend + 1) * sizeof(*nb));
		if (!nb)
			return -ENOMEM;
		j->pending = nb;
		j->pend_ids[i] = key;
		j->pending[i] = NULL;
		j->npend++;
	}
	if (cap && j->pending[i] && j->pending[i]->bytes + len > cap) {
		queue_batch(j, j->pending[i]); /* t would take it past a second */
		j->pending[i] = NULL;
	}
	if (!j->pending[i]) {
		j->pending[i] = calloc(1, sizeof(struct batch));
		if (!j->pending[i])
			return -ENOMEM;
		j->pending[i]->wid = wid;
		j->pending[i]->pin = t->f->pin;
	}
	struct batch *b = j->pending[i];
	b->t[b->n++] = *t;
	b->bytes += len;
	if (b->n >= LOAD_BATCH || (cap && (b->bytes >= cap || cap - b->bytes < len))) {
		j->pending[i] = NULL;
		queue_batch(j, b);
	}
	return 0;
}

/* Caller holds js->lock. */
static void flush_pending(struct job *j)
{
	for (size_t i = 0; i < j->npend; i++) {
		struct batch *b = j->pending[i];
		if (!b)
			continue;
		j->pending[i] = NULL;
		queue_batch(j, b);
	}
	pthread_cond_broadcast(&j->cond);
}

/* The rendezvous order of t's block over the live workers (by its
 * extent, cis_place_id): indices into j->live, the count returned. */
static size_t task_order(struct job *j, const struct task *t, size_t *order, size_t n)
{
	const struct frec *f = t->f;
	cis_block_id pid = cis_place_id(t->id, f->mount_id, f->key, f->version, f->bs, t->index);

	return cis_place(pid, j->live, j->nlive, order, n);
}

/* Whether worker w may take a task placed again: not the one that failed
 * it, not failing, not holding the block (hold[0..nh)). */
static bool can_take(struct job *j, uint64_t w, uint64_t failed, const uint64_t *hold, size_t nh)
{
	return w != failed && !is_bad(j, w) && !mst_id_in(hold, nh, w);
}

/* Place t on a live, not-failing worker that does not hold the block yet:
 * first past the block's first R owners (each of those has a task of its
 * own, so one that fails is replaced rather than doubled), else any: 0.
 * The k-th owner's task goes to the k-th such worker, so that two owners
 * failing together are replaced by two workers, not one twice. With no
 * such worker left but a live one other than `failed` holding the block:
 * 1, the caller counts t as cached (fewer copies than asked, as a load
 * started now would end). Else -EHOSTUNREACH. Caller holds js->lock. */
static int place_again(struct job *j, mst_master *m, struct task *t, uint64_t failed)
{
	refresh_live(j, m);
	size_t order[64];
	size_t no = task_order(j, t, order, 64);
	size_t r = j->replicas ? j->replicas : 1;
	uint64_t hold[64], cand[64];
	size_t nh = mst_workers_locate(m->workers, t->id, hold, 64), nc = 0, rank = 0;
	for (size_t i = 0; i < r && i < no; i++)
		if (j->live[order[i]] == failed)
			rank = i;
	for (size_t i = r; i < no; i++)
		if (can_take(j, j->live[order[i]], failed, hold, nh))
			cand[nc++] = j->live[order[i]];
	for (size_t i = 0; i < no && !nc; i++) /* none past the owners: any */
		if (can_take(j, j->live[order[i]], failed, hold, nh))
			cand[nc++] = j->live[order[i]];
	if (nc)
		return pend_task(j, cand[rank < nc ? rank : nc - 1], t);
	for (size_t k = 0; k < nh; k++)
		for (size_t i = 0; i < j->nlive && hold[k] != failed; i++)
			if (j->live[i] == hold[k])
				return 1;
	return -EHOSTUNREACH;
}

/* ---- pins ---- */

/* Whether path is pinned by the pin settings now (its nearest one), or
 * fallback when they cannot be read. */
static bool pinned_now(mst_master *m, const char *path, bool fallback)
{
	mst_policy pol;
	return mst_policy_resolve(m, path, &pol) == 0 ? pol.pin == 1 : fallback;
}

/* Whether a file the job walks is to be pinned. A load goes by the
 * settings now (one may change while it runs); a pin or unpin job by a
 * setting nearer to the file than the job's path, else its own (its
 * setting may not be stored yet when its walk starts). */
static bool file_pinned(const struct job *j, const char *path)
{
	if (!strcmp(j->type, "load"))
		return pinned_now(j->js->m, path, j->pin);
	mst_policy pol;
	if (mst_policy_resolve(j->js->m, path, &pol) == 0 && pol.pin >= 0 &&
	    pol.pin_from > strlen(j->path))
		return pol.pin == 1;
	return !strcmp(j->type, "pin");
}

/* Pin (or unpin) n blocks of ids on worker wid, with calls of cancel;
 * *changed (may be NULL): the blocks the worker changed. */
static int pin_call(mst_master *m, uint64_t wid, cis_rpc_cancel *cancel, ProtobufCBinaryData *ids,
                    size_t n, bool pin, uint64_t *changed, cis_errmsg *em)
{
	Cis__PinRequest rq = CIS__PIN_REQUEST__INIT;
	cis_rpc_result res = {.fd = -1};
	rq.n_ids = n;
	rq.ids = ids;
	rq.pin = pin;
	int err = mst_wcall_in(m, wid, cancel, CIS_MSG_WORKER_PIN, &rq.base, &res, 60000, em);
	Cis__PinReply *r = NULL;
	if (!err && changed &&
	    !cis_msg_unpack(&cis__pin_reply__descriptor, res.msg, res.msg_len,
	                    (ProtobufCMessage **)&r)) {
		*changed += r->changed;
		protobuf_c_message_free_unpacked(&r->base, NULL);
	}
	cis_rpc_result_free(&res);
	return err;
}

/* pin_call for a load's answered blocks: not among the job's calls (a
 * cancel of the load does not undo what its loaded blocks need). A
 * failure is logged (the worker is gone or going: its copies with it). */
static int send_pins(struct job *j, uint64_t wid, ProtobufCBinaryData *ids, size_t n, bool pin)
{
	cis_errmsg em = {{0}};
	int err = pin_call(j->js->m, wid, NULL, ids, n, pin, NULL, &em);
	if (err)
		cis_warn("load: a pin change not passed on", "job=%llu worker=%llu blocks=%zu: %s",
		         (unsigned long long)j->id, (unsigned long long)wid, n,
		         cis_errmsg_or(&em, err));
	return err;
}

/* A pin setting changed after some of b's files read theirs: their blocks
 * the worker cached (or had) were pinned or not as the batch said, and a
 * pin or unpin job's walk may have passed them before they were in. Set
 * them as the settings say now, again while the settings keep changing
 * (not once the master stops: the load resumed at the next start sends
 * them again, but a worker's cached block keeps its pin then). Before the
 * tasks are done: their files' records live until then. */
static void repin_answered(struct job *j, const struct batch *b, const Cis__LoadReply *rep)
{
	mst_master *m = j->js->m;
	uint64_t gen = atomic_load(&m->policy_gen);
	bool stale = false;
	for (size_t i = 0; i < b->n && !stale; i++)
		stale = b->t[i].f->policy_gen != gen;
	bool sent[LOAD_BATCH];
	for (size_t i = 0; i < b->n; i++)
		sent[i] = b->pin;
	while (stale && !j->shutdown) {
		ProtobufCBinaryData ids[2][LOAD_BATCH];
		uint8_t raw[LOAD_BATCH][16];
		size_t at[2][LOAD_BATCH], n[2] = {0, 0};
		const struct frec *last = NULL;
		bool want = false;
		for (size_t i = 0; i < b->n; i++) {
			const struct task *t = &b->t[i];
			if (rep->results[i]->code < 0)
				continue;
			if (t->f != last) /* a file's blocks lie side by side */
				want = pinned_now(m, t->f->path, sent[i]);
			last = t->f;
			if (want == sent[i])
				continue;
			cis_block_id_to_bytes(t->id, raw[i]);
			at[want][n[want]] = i;
			ids[want][n[want]++] = (ProtobufCBinaryData){16, raw[i]};
		}
		for (int pin = 0; pin < 2; pin++)
			if (n[pin] && send_pins(j, b->wid, ids[pin], n[pin], pin) == 0)
				for (size_t k = 0; k < n[pin]; k++)
					sent[at[pin][k]] = pin;
		uint64_t now = atomic_load(&m->policy_gen);
		stale = now != gen;
		gen = now;
	}
}

/* ---- senders ---- */

/* Wait on the job's condition for up to ms, saving the record when due.
 * Caller holds js->lock. */
static void job_wait(struct job *j, uint64_t ms)
{
	cis_cond_wait_ms(&j->cond, &j->js->lock, ms);
	save_due(j);
}

/* The job's --bandwidth: one bucket its senders share. A sender waits
 * until what was sent before is paid for at the cap (bw_due_ms), however
 * long that is, then takes its batch on credit: the debt carries over to
 * the next sender, so over any stretch the job sends at most the cap's
 * worth plus one batch (unthrottle gives back what the worker did not
 * fetch). It wakes at least every 100 ms (at once on a
 * cancel: the job's cond) to notice a cancel or the master stopping. */
static void throttle(struct job *j, uint64_t bytes)
{
	if (!j->bandwidth)
		return;
	pthread_mutex_lock(&j->js->lock);
	for (;;) {
		uint64_t now = cis_mono_ms();
		if (j->cancel)
			break;
		if (j->bw_due_ms <= now) {
			j->bw_due_ms = now + bytes * 1000 / j->bandwidth;
			break;
		}
		job_wait(j, j->bw_due_ms - now < 100 ? j->bw_due_ms - now : 100);
	}
	pthread_mutex_unlock(&j->js->lock);
}

/* A batch was answered: of the bytes throttle took for it, give back
 * those the worker did not fetch (blocks it had cached, failed ones, the
 * whole batch when the call failed), so the job pays for what it loaded
 * only and the next send waits on that. Caller holds js->lock. */
static void unthrottle(struct job *j, uint64_t taken, uint64_t loaded)
{
	if (!j->bandwidth || loaded >= taken)
		return;
	uint64_t back = (taken - loaded) * 1000 / j->bandwidth;
	j->bw_due_ms = j->bw_due_ms > back ? j->bw_due_ms - back : 0;
	pthread_cond_broadcast(&j->cond);
}

static void send_batch(struct job *j, struct batch *b)
{
	mst_master *m = j->js->m;
	Cis__LoadRequest rq = CIS__LOAD_REQUEST__INIT;
	Cis__BlockRef refs[LOAD_BATCH], *rp[LOAD_BATCH];
	uint8_t ids[LOAD_BATCH][16];
	uint64_t bytes = 0;
	for (size_t i = 0; i < b->n; i++) {
		struct task *t = &b->t[i];
		cis__block_ref__init(&refs[i]);
		cis_block_id_to_bytes(t->id, ids[i]);
		refs[i].id.data = ids[i];
		refs[i].id.len = 16;
		refs[i].mount_id = t->f->mount_id;
		refs[i].key = t->f->key;
		refs[i].version = t->f->version;
		refs[i].index = t->index;
		refs[i].block_size = t->f->bs;
		refs[i].file_size = t->f->size;
		rp[i] = &refs[i];
		bytes += task_bytes(t);
	}
	throttle(j, bytes);
	rq.n_blocks = b->n;
	rq.blocks = rp;
	rq.job_id = j->id;
	rq.pin = b->pin;
	cis_rpc_result res = {.fd = -1};
	cis_errmsg em = {{0}};
	int err =
	    mst_wcall_in(m, b->wid, j->calls, CIS_MSG_WORKER_LOAD, &rq.base, &res, 300000, &em);
	Cis__LoadReply *rep = NULL;
	if (!err && cis_msg_unpack(&cis__load_reply__descriptor, res.msg, res.msg_len,
	                           (ProtobufCMessage **)&rep))
		err = cis_fail(&em, -CIS_E_PROTO, "malformed load reply");
	cis_rpc_result_free(&res);
	if (!err && rep->n_results != b->n)
		err = cis_fail(&em, -CIS_E_PROTO, "load reply has %zu results for %zu blocks",
		               rep->n_results, b->n);
	if (err) {
		/* the worker failed as a whole: place its tasks again */
		if (err != -ECANCELED) {
			cis_warn("load batch failed", "job=%llu worker=%llu blocks=%zu: %s",
			         (unsigned long long)j->id, (unsigned long long)b->wid, b->n,
			         cis_errmsg_or(&em, err));
			if (!j->cancel)
				cis_sleep_ms(500);
		}
		pthread_mutex_lock(&j->js->lock);
		unthrottle(j, bytes, 0);
		if (!j->cancel)
			mark_bad(j, b->wid, mst_workers_lost_ms(m->workers) + 2000);
		for (size_t i = 0; i < b->n; i++) {
			struct task *t = &b->t[i];
			int rc = j->cancel || ++t->attempts >= LOAD_ATTEMPTS
			             ? -1
			             : place_again(j, m, t, b->wid);
			if (rc < 0)
				task_done(j, t, err, cis_errmsg_or(&em, err), false, 0);
			else if (rc > 0)
				task_done(j, t, 0, NULL, true, 0);
		}
		flush_pending(j);
		pthread_mutex_unlock(&j->js->lock);
	} else {
		repin_answered(j, b, rep);
		/* Files whose object changed since the walk listed it: the
		 * namespace takes the new version (after the lock: a store call). */
		struct changed {
			uint64_t ino;
			char version[CIS_UFS_VERSION_MAX];
		} *chg = NULL;
		size_t nchg = 0;
		uint64_t loaded = 0;
		pthread_mutex_lock(&j->js->lock);
		for (size_t i = 0; i < b->n; i++) {
			Cis__BlockResult *r = rep->results[i];
			if (r->code >= 0 && !r->was_cached)
				loaded += r->length;
			const struct frec *f = b->t[i].f;
			if (r->code == -CIS_E_CHANGED && (!nchg || chg[nchg - 1].ino != f->ino)) {
				struct changed *nc = realloc(chg, (nchg + 1) * sizeof(*nc));
				if (nc) {
					chg = nc;
					chg[nchg].ino = f->ino;
					snprintf(chg[nchg].version, sizeof(chg[nchg].version), "%s",
					         f->version);
					nchg++;
				}
			}
			task_done(j, &b->t[i], r->code, r->message, r->was_cached, r->length);
		}
		unthrottle(j, bytes, loaded);
		pthread_mutex_unlock(&j->js->lock);
		for (size_t i = 0; i < nchg; i++) {
			cis_errmsg cem = {{0}};
			int rc = mst_ns_refresh_file(m, chg[i].ino, chg[i].version, &cem);
			if (rc && rc != -ENOENT)
				cis_warn("refreshing a changed file failed",
				         "job=%llu inode=%llu: %s", (unsigned long long)j->id,
				         (unsigned long long)chg[i].ino, cis_errmsg_or(&cem, rc));
		}
		free(chg);
	}
	if (rep)
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	free(b);
}

static void *sender_main(void *arg)
{
	struct job *j = arg;
	pthread_mutex_lock(&j->js->lock);
	for (;;) {
		while (!j->qhead && !j->closed)
			pthread_cond_wait(&j->cond, &j->js->lock);
		if (!j->qhead)
			break;
		struct batch *b = j->qhead;
		j->qhead = b->next;
		if (!j->qhead)
			j->qtail = NULL;
		j->qlen--;
		pthread_cond_broadcast(&j->cond);
		if (j->cancel) {
			for (size_t i = 0; i < b->n; i++)
				task_done(j, &b->t[i], -ECANCELED, "cancelled", false, 0);
			free(b);
			continue;
		}
		pthread_mutex_unlock(&j->js->lock);
		send_batch(j, b);
		pthread_mutex_lock(&j->js->lock);
	}
	pthread_mutex_unlock(&j->js->lock);
	return NULL;
}

/* ---- the producer ---- */

static bool path_within(const char *dir, const char *p)
{
	size_t dl = strlen(dir);
	if (dl == 1)
		return true; /* "/" */
	return !strncmp(p, dir, dl) && (p[dl] == 0 || p[dl] == '/');
}

/* Whether a resumed job did path (a file, or a directory that failed to
 * list) before its restart: whatever the walk visits up to the cursor,
 * except a directory the cursor lies in (only part of it was done: its
 * failure is new), and all below the cursor when that is a directory
 * counted as failed (its files were left to that failure). Not the live
 * cursor: senders move it (and free the old one) while the walk goes on. */
static bool done_before(const struct job *j, const char *path)
{
	const char *c = j->resume_after;
	return c &&
	       (path_within(c, path) || (mst_path_order(path, c) <= 0 && !path_within(path, c)));
}

/* f joins the in-flight files, in walk order. Caller holds js->lock. */
static void append_frec(struct job *j, struct frec *f)
{
	if (j->ftail)
		j->ftail->next = f;
	else
		j->fhead = f;
	j->ftail = f;
	j->nfiles++;
}

static int load_file(void *arg, const char *path, const mst_inode *ino)
{
	struct job *j = arg;
	mst_master *m = j->js->m;
	if (done_before(j, path))
		return 0;
	uint64_t bs = 0, nb = mst_file_blocks(m, ino, &bs);
	struct frec *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->path = strdup(path);
	f->key = strdup(ino->key);
	f->version = strdup(ino->version);
	if (!f->path || !f->key || !f->version) {
		frec_free(f);
		return -ENOMEM;
	}
	f->ino = ino->id;
	f->policy_gen =
	    atomic_load(&m->policy_gen); /* before the read: a change after it is seen */
	f->pin = file_pinned(j, path);
	f->mount_id = ino->mount_id;
	f->size = ino->size;
	f->bs = bs;
	f->c.blocks = j->metadata_only ? 0 : nb;
	pthread_mutex_lock(&j->js->lock);
	while ((j->nfiles >= INFLIGHT_FILES || j->qlen >= 2 * j->parallel) && !j->cancel) {
		flush_pending(j); /* the oldest file may wait in a partial batch */
		job_wait(j, 500);
	}
	if (j->cancel) {
		pthread_mutex_unlock(&j->js->lock);
		frec_free(f);
		return 1;
	}
	j->files_seen++;
	j->bytes_seen += f->size;
	append_frec(j, f);
	int err = 0;
	refresh_live(j, m);
	uint32_t r = j->replicas ? j->replicas : 1;
	for (uint64_t b = 0; !j->metadata_only && b < nb; b++) {
		struct task t = {.f = f, .index = b};
		t.id = cis_block_id_make(f->mount_id, f->key, f->version, f->bs, b);
		size_t order[64];
		size_t no = task_order(j, &t, order, r < 64 ? r : 64);
		if (no == 0) {
			f->left++;
			task_done(j, &t, -EHOSTUNREACH, "no live worker", false, 0);
			continue;
		}
		/* Owners that hold the block already answer was_cached without a
		 * fetch: the worker's own index decides, not the master's, which
		 * lags by a heartbeat (a block freed a moment ago is still in it).
		 * The owners' ids are taken first, not indices: place_again may
		 * reload j->live (membership changed) in the middle of the loop. */
		uint64_t owners[64];
		for (size_t i = 0; i < no; i++)
			owners[i] = j->live[order[i]];
		for (size_t i = 0; i < no; i++) {
			uint64_t w = owners[i];
			f->left++;
			int rc = is_bad(j, w) ? place_again(j, m, &t, w) : pend_task(j, w, &t);
			if (rc < 0)
				task_done(j, &t, -EHOSTUNREACH, "no live worker could take it",
				          false, 0);
			else if (rc > 0)
				task_done(j, &t, 0, NULL, true, 0);
		}
		/* A huge file waits for the queue as files do, rather than queue
		 * every batch (memory) with the lock held (cancel, status and
		 * the senders waited for its last block). */
		if (j->qlen >= 2 * j->parallel) {
			while (j->qlen >= 2 * j->parallel && !j->cancel)
				job_wait(j, 500);
			if (j->cancel) {
				f->c.blocks = b + 1; /* what was queued */
				err = 1;
				break;
			}
			refresh_live(j, m);
		}
	}
	f->all_queued = true;
	commit_head(j);
	pthread_mutex_unlock(&j->js->lock);
	return err;
}

/* A directory that failed to list is recorded in walk order, as a file
 * with its error and no tasks: the failure is counted when it reaches the
 * head and becomes the cursor, so a job resumed before that lists the
 * directory again and counts it then, and one resumed after skips it. */
static int walk_err(void *arg, const char *path, int code, const char *msg)
{
	struct job *j = arg;
	(void)code;
	if (done_before(j, path))
		return 0;
	struct frec *f = calloc(1, sizeof(*f));
	if (!f || !(f->path = strdup(path)) || !(f->err = strdup(msg))) {
		if (f)
			frec_free(f);
		return -ENOMEM;
	}
	f->dir = true;
	f->all_queued = true;
	pthread_mutex_lock(&j->js->lock);
	append_frec(j, f);
	commit_head(j);
	pthread_mutex_unlock(&j->js->lock);
	return 0;
}

struct verify {
	struct job *j;
	size_t want;
};

static int verify_file(void *arg, const char *path, const mst_inode *ino)
{
	struct verify *v = arg;
	mst_master *m = v->j->js->m;
	uint64_t bs = 0, nb = mst_file_blocks(m, ino, &bs);
	for (uint64_t b = 0; b < nb; b++) {
		uint64_t hold[64];
		cis_block_id id = cis_block_id_make(ino->mount_id, ino->key, ino->version, bs, b);
		size_t nh = mst_workers_locate(m->workers, id, hold, 64);
		if (nh < v->want) {
			char msg[128];
			snprintf(msg, sizeof(msg), "verify: block %llu is on %zu of %zu workers",
			         (unsigned long long)b, nh, v->want);
			pthread_mutex_lock(&v->j->js->lock);
			v->j->c.verify_missing++;
			add_failure(v->j, path, msg);
			pthread_mutex_unlock(&v->j->js->lock);
		}
	}
	return v->j->cancel ? 1 : 0;
}

/* A job resumed after a master restart: the workers re-register at their
 * next heartbeat and report their blocks. Wait for that, or a load would
 * find every block uncached and without an owner, and a free, pin or
 * unpin would reach no worker and be recorded done all the same. */
static void wait_for_workers(struct job *j)
{
	mst_master *m = j->js->m;
	uint64_t hb = mst_workers_heartbeat_ms(m->workers);
	uint64_t until = cis_mono_ms() + mst_workers_lost_ms(m->workers) + 2 * hb;
	uint64_t settle = cis_mono_ms() + 2 * hb + 500;
	uint64_t *live = NULL;
	size_t nlive = 0;
	while (!j->cancel && cis_mono_ms() < until) {
		free(live);
		live = NULL;
		mst_workers_ids(m->workers, &live, &nlive);
		if (nlive && cis_mono_ms() >= settle)
			break;
		cis_sleep_ms(200);
	}
	free(live);
}

static int run_load(struct job *j, cis_errmsg *em)
{
	mst_master *m = j->js->m;
	size_t ns = j->parallel ? j->parallel : LOAD_PARALLEL;
	pthread_t *th = calloc(ns, sizeof(*th));
	size_t started = 0;
	if (!th)
		return -ENOMEM;
	if (j->resumed)
		wait_for_workers(j);
	for (; started < ns; started++)
		if (pthread_create(&th[started], NULL, sender_main, j))
			break;
	int err = started ? mst_walk(m, j->path, true, load_file, walk_err, j, em) : -EAGAIN;
	pthread_mutex_lock(&j->js->lock);
	if (!err && !j->cancel) /* a cancel stops the walk too */
		j->listing_done = true;
	flush_pending(j);
	/* at shutdown nothing is committed any more (commit_head): stop once the
	 * queue is drained, the files still listed are freed with the job */
	while ((j->fhead && !j->shutdown) || j->qhead)
		job_wait(j, 500);
	j->closed = true;
	pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->js->lock);
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	if (!err && j->verify && !j->cancel && !j->metadata_only) {
		/* the location index learns of new blocks by heartbeat */
		cis_sleep_ms(2 * mst_workers_heartbeat_ms(m->workers) + 500);
		uint64_t *live;
		size_t nlive;
		if (!mst_workers_ids(m->workers, &live, &nlive)) {
			free(live);
			struct verify v = {j, j->replicas < nlive ? j->replicas : nlive};
			if (!v.want)
				v.want = 1;
			err = mst_walk(m, j->path, false, verify_file, NULL, &v, em);
		}
	}
	mst_repl_kick(m);
	return err;
}

/* Free, pin, unpin: every block below the path, sent to every live worker
 * (the index may lag behind the workers by a heartbeat). */
struct bcast {
	struct job *j;
	uint64_t *live;
	size_t nlive;
	ProtobufCBinaryData ids[BCAST_BATCH];
	uint8_t raw[BCAST_BATCH][16];
	size_t n;
	uint64_t done; /* worker answers counted as done (freed / changed) */
};

static void bcast_flush(struct bcast *b)
{
	struct job *j = b->j;
	mst_master *m = j->js->m;
	for (size_t w = 0; w < b->nlive && b->n; w++) {
		cis_rpc_result res = {.fd = -1};
		cis_errmsg em = {{0}};
		int err;
		if (!strcmp(j->type, "free")) {
			Cis__FreeRequest rq = CIS__FREE_REQUEST__INIT;
			rq.n_ids = b->n;
			rq.ids = b->ids;
			err = mst_wcall_in(m, b->live[w], j->calls, CIS_MSG_WORKER_FREE, &rq.base,
			                   &res, 60000, &em);
			Cis__FreeReply *r = NULL;
			if (!err && !cis_msg_unpack(&cis__free_reply__descriptor, res.msg,
			                            res.msg_len, (ProtobufCMessage **)&r)) {
				b->done += r->freed + r->deferred;
				protobuf_c_message_free_unpacked(&r->base, NULL);
			}
		} else {
			err = pin_call(m, b->live[w], j->calls, b->ids, b->n,
			               !strcmp(j->type, "pin"), &b->done, &em);
		}
		cis_rpc_result_free(&res);
		if (err && err != -ECANCELED) {
			char wn[32];
			snprintf(wn, sizeof(wn), "worker %llu", (unsigned long long)b->live[w]);
			pthread_mutex_lock(&j->js->lock);
			add_failure(j, wn, cis_errmsg_or(&em, err));
			pthread_mutex_unlock(&j->js->lock);
		}
	}
	pthread_mutex_lock(&j->js->lock);
	j->c.tasks_loaded = b->done;
	j->dirty = true;
	pthread_mutex_unlock(&j->js->lock);
	b->n = 0;
}

/* Whether a load newer than job id (submitted after it), running or done,
 * covers path: a TTL's free leaves such a file alone (the newer load
 * brought its blocks in again, or counted them cached, and its own TTL
 * decides; a failed or cancelled one has none, so it does not count).
 * Takes js->lock and then ended_lock, never both at once. */
static bool newer_load_covers(struct mst_jobs *js, uint64_t id, const char *path)
{
	bool r = false;
	pthread_mutex_lock(&js->lock);
	for (struct job *o = js->list; o && !r; o = o->next)
		r = o->id > id && !strcmp(o->type, "load") &&
		    (o->state == JOB_RUNNING || o->state == JOB_DONE) && path_within(o->path, path);
	pthread_mutex_unlock(&js->lock);
	pthread_mutex_lock(&js->ended_lock);
	for (size_t i = 0; i < js->nended && !r; i++)
		r = js->ended[i].id > id && js->ended[i].state == JOB_DONE &&
		    path_within(js->ended[i].path, path);
	pthread_mutex_unlock(&js->ended_lock);
	return r;
}

static int bcast_file(void *arg, const char *path, const mst_inode *ino)
{
	struct bcast *b = arg;
	struct job *j = b->j;
	uint64_t bs = 0, nb = mst_file_blocks(j->js->m, ino, &bs);
	/* pin and unpin leave alone a file that a nearer setting keeps as it
	 * is; a TTL's free, a file pinned now */
	bool skip = !strcmp(j->type, "free")
	                ? j->keep_pinned && (pinned_now(j->js->m, path, true) ||
	                                     newer_load_covers(j->js, j->id, path))
	                : file_pinned(j, path) != !strcmp(j->type, "pin");
	if (skip)
		nb = 0;
	for (uint64_t i = 0; i < nb; i++) {
		cis_block_id id = cis_block_id_make(ino->mount_id, ino->key, ino->version, bs, i);
		cis_block_id_to_bytes(id, b->raw[b->n]);
		b->ids[b->n].data = b->raw[b->n];
		b->ids[b->n].len = 16;
		if (++b->n == BCAST_BATCH)
			bcast_flush(b);
	}
	pthread_mutex_lock(&j->js->lock);
	j->c.files++;
	j->files_seen++;
	j->c.blocks += nb;
	j->c.bytes += ino->size;
	save_due(j);
	pthread_mutex_unlock(&j->js->lock);
	return j->cancel ? 1 : 0;
}

static int run_bcast(struct job *j, cis_errmsg *em)
{
	struct bcast *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->j = j;
	if (j->resumed)
		wait_for_workers(j);
	int err = mst_workers_ids(j->js->m->workers, &b->live, &b->nlive);
	/* A restart starts these over (they are idempotent), progress and
	 * failures included: a resumed job would count its files twice. */
	pthread_mutex_lock(&j->js->lock);
	j->c = (struct counts){0};
	j->files_seen = j->bytes_seen = 0;
	j->failures_total = 0;
	json_array_clear(j->failures);
	pthread_mutex_unlock(&j->js->lock);
	if (!err)
		err = mst_walk(j->js->m, j->path, false, bcast_file, NULL, b, em);
	if (!err)
		bcast_flush(b);
	j->listing_done = !err && !j->cancel;
	free(b->live);
	free(b);
	return err;
}

/* ---- finished loads, for their TTL ---- */

/* When a load of path that finished at fin expires: INT64_MAX without a
 * TTL. */
static int64_t due_at(mst_master *m, const char *path, int64_t fin)
{
	mst_policy pol;
	if (mst_policy_resolve(m, path, &pol) || pol.ttl_s <= 0)
		return INT64_MAX;
	return fin + pol.ttl_s * 1000000000LL;
}

/* Note a finished load. Caller holds js->ended_lock. */
static void ended_add(struct mst_jobs *js, uint64_t id, const char *path, int64_t fin, int state)
{
	if (js->nended == js->ended_cap) {
		size_t cap = js->ended_cap ? 2 * js->ended_cap : 64;
		struct ended *n = realloc(js->ended, cap * sizeof(*n));
		if (!n)
			goto oom;
		js->ended = n;
		js->ended_cap = cap;
	}
	char *p = strdup(path);
	if (!p)
		goto oom;
	js->ended[js->nended++] = (struct ended){id, p, fin, state, due_at(js->m, p, fin)};
	return;
oom:
	cis_warn("a load's TTL will not be applied", "load_job=%llu: out of memory",
	         (unsigned long long)id);
}

/* A load expired: the expiry forgets it. Caller holds js->ended_lock. */
static void ended_drop(struct mst_jobs *js, uint64_t id)
{
	for (size_t i = 0; i < js->nended; i++)
		if (js->ended[i].id == id) {
			free(js->ended[i].path);
			js->ended[i] = js->ended[--js->nended];
			return;
		}
}

/* The finished loads not expired, from the records: at open, before any
 * job runs (later ones come from job_main). Caller holds js->ended_lock. */
static int ended_read(struct mst_jobs *js)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	js->ended_gen = atomic_load(&js->m->policy_gen);
	int err = mst_txn_begin(js->m, false, &txn);
	if (err)
		return err;
	err = mdb_cursor_open(txn, js->m->dbi_jobs, &cur) ? -CIS_E_INTERNAL : 0;
	if (!err) {
		for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
		     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
			json_t *o = json_loadb(v.mv_data, v.mv_size, 0, NULL);
			const char *type = json_string_value(json_object_get(o, "type"));
			const char *st = json_string_value(json_object_get(o, "state"));
			int64_t fin = json_integer_value(json_object_get(o, "finished_ns"));
			/* Finished any way: a cancelled or failed load brought
			 * blocks in too, and they expire as a done one's do. */
			char *path = type && !strcmp(type, "load") && st && strcmp(st, "running") &&
			                     fin && !json_is_true(json_object_get(o, "expired"))
			                 ? cis_json_get_text(o, "path") /* hex in the record */
			                 : NULL;
			int state = JOB_DONE;
			for (int i = 0; path && i < 4; i++)
				if (!strcmp(st, state_names[i]))
					state = i;
			if (path)
				ended_add(js, json_integer_value(json_object_get(o, "id")), path,
				          fin, state);
			free(path);
			json_decref(o);
		}
		mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
	return err;
}

/* ---- retention of finished jobs' records ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Append id to *v; false when out of memory. */
static bool ids_push(uint64_t **v, size_t *n, size_t *cap, uint64_t id)
{
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : 64;
		uint64_t *nv = realloc(*v, c * sizeof(*nv));
		if (!nv)
			return false;
		*v = nv;
		*cap = c;
	}
	(*v)[(*n)++] = id;
	return true;
}

/* Work the finished loads' due times out again if a policy changed since.
 * Caller holds ended_lock. */
static void do_refresh_due(struct mst_jobs *js)
{
	uint64_t gen = atomic_load(&js->m->policy_gen); /* before the policies are read */
	if (gen != js->ended_gen)
		for (size_t i = 0; i < js->nended; i++)
			js->ended[i].due_ns =
			    due_at(js->m, js->ended[i].path, js->ended[i].finished_ns);
	js->ended_gen = gen;
}

/* The ids whose records stay whatever their age, sorted, into *out (their
 * count, or -ENOMEM): the jobs running in memory (one cancelled and still
 * winding down already says so in its record), and the finished loads
 * whose TTL is still to run (take_over_older has dropped those a newer
 * load of their path took over). A load with no TTL keeps its record while
 * it is among the newest. */
static ssize_t ids_kept_anyway(struct mst_jobs *js, uint64_t **out)
{
	uint64_t *ids = NULL;
	size_t n = 0, cap = 0;
	bool ok = ids_push(&ids, &n, &cap, 0); /* never an id: *out is never NULL */
	pthread_mutex_lock(&js->lock);
	for (struct job *j = js->list; j && ok; j = j->next)
		if (j->state == JOB_RUNNING)
			ok = ids_push(&ids, &n, &cap, j->id);
	pthread_mutex_unlock(&js->lock);
	pthread_mutex_lock(&js->ended_lock);
	do_refresh_due(js);
	for (size_t i = 0; i < js->nended && ok; i++)
		if (js->ended[i].due_ns != INT64_MAX)
			ok = ids_push(&ids, &n, &cap, js->ended[i].id);
	pthread_mutex_unlock(&js->ended_lock);
	if (!ok) {
		free(ids);
		return -ENOMEM;
	}
	qsort(ids, n, sizeof(*ids), cmp_u64);
	*out = ids;
	return (ssize_t)n;
}

/* Whether a job record says running. job_record writes the state third,
 * after the id and the type, so it is in the first bytes of a record that
 * may hold a thousand failures; one written otherwise is parsed whole. */
static bool record_running(const MDB_val *v)
{
	static const char key[] = "\"state\":\"", running[] = "running\"";
	const char *s = v->mv_data;
	const char *p = memmem(s, v->mv_size < 128 ? v->mv_size : 128, key, sizeof(key) - 1);
	if (p) {
		p += sizeof(key) - 1;
		return (size_t)(s + v->mv_size - p) >= sizeof(running) - 1 &&
		       !memcmp(p, running, sizeof(running) - 1);
	}
	json_t *o = json_loadb(s, v->mv_size, 0, NULL);
	const char *st = json_string_value(json_object_get(o, "state"));
	bool r = !st || !strcmp(st, "running"); /* unreadable: kept */
	json_decref(o);
	return r;
}

/* Delete the records of finished jobs past the newest js->kept, oldest
 * first: `cistern jobs` and GET /api/v1/jobs read every record, and a
 * master that runs a load an hour would otherwise list them all for good.
 * The records ids_kept_anyway names stay and are left out of the count.
 * Run at open and by the TTL tick after a job finished (prune_due), not by
 * the job's thread: a submit joins finished jobs' threads holding locks. */
static void prune_records(struct mst_jobs *js)
{
	uint64_t *keep = NULL, *gone = NULL;
	size_t ngone = 0, cap = 0, finished = 0;
	ssize_t nkeep = 0;
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	/* The snapshot first: a load's thread adds it to the ended list
	 * before it saves its record as finished, so every finished load
	 * this snapshot holds is in the list read next. */
	int err = mst_txn_begin(js->m, false, &txn);
	if (err)
		goto out;
	nkeep = ids_kept_anyway(js, &keep);
	if (nkeep < 0) {
		err = (int)nkeep;
		mdb_txn_abort(txn);
		goto out;
	}
	if (mdb_cursor_open(txn, js->m->dbi_jobs, &cur) == 0) {
		for (int rc = mdb_cursor_get(cur, &k, &v, MDB_LAST); rc == 0;
		     rc = mdb_cursor_get(cur, &k, &v, MDB_PREV)) {
			uint64_t id;
			if (k.mv_size != 8)
				continue;
			memcpy(&id, k.mv_data, 8);
			id = be64toh(id);
			if (bsearch(&id, keep, (size_t)nkeep, sizeof(id), cmp_u64) ||
			    record_running(&v) || ++finished <= js->kept)
				continue;
			if (ngone == PRUNE_BATCH || !ids_push(&gone, &ngone, &cap, id)) {
				atomic_store(&js->prune_due, true); /* the rest at the next tick */
				break;
			}
		}
		mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
	if (!ngone)
		goto out;
	err = mst_txn_begin(js->m, true, &txn);
	if (err)
		goto out;
	for (size_t i = 0; i < ngone && !err; i++) {
		uint64_t kbe = htobe64(gone[i]);
		MDB_val key = {8, &kbe};
		int rc = mdb_del(txn, js->m->dbi_jobs, &key, NULL);
		err = rc && rc != MDB_NOTFOUND ? mst_lmdb_err(rc) : 0;
	}
	if (err)
		mdb_txn_abort(txn);
	else
		err = mst_txn_commit(txn);
out:
	if (err)
		cis_warn("finished jobs' records not deleted: tried again when the next job ends",
		         "err=\"%s\"", cis_strerror(err));
	else if (ngone)
		cis_info("finished jobs' records deleted", "records=%zu kept=%llu", ngone,
		         (unsigned long long)js->kept);
	free(keep);
	free(gone);
}

/* Mark the finished load id expired, in memory and in its record, and
 * forget it. Takes js->lock and then ended_lock, never both at once. */
static void mark_expired(struct mst_jobs *js, uint64_t id)
{
	bool marked = false;
	pthread_mutex_lock(&js->lock);
	for (struct job *j = js->list; j; j = j->next)
		if (j->id == id) {
			j->expired = true;
			job_save(j);
			marked = true;
		}
	pthread_mutex_unlock(&js->lock);
	pthread_mutex_lock(&js->ended_lock);
	ended_drop(js, id);
	pthread_mutex_unlock(&js->ended_lock);
	if (!marked) {
		json_t *full = record_get(js->m, id);
		if (full) {
			json_object_set_new(full, "expired", json_true());
			record_put(js->m, id, full);
			json_decref(full);
		}
	}
}

/* A load of path finished done: the older finished loads of the same path
 * are taken over now. At their due time it would cover them, and their
 * expiry would free nothing (its own frees the path, later); marked expired
 * at once, the list of finished loads keeps one per path however often a
 * dataset is loaded again. */
static void take_over_older(struct mst_jobs *js, uint64_t id, const char *path)
{
	uint64_t *older = NULL;
	size_t n = 0, cap = 0;
	pthread_mutex_lock(&js->ended_lock);
	for (size_t i = 0; i < js->nended; i++)
		if (js->ended[i].id < id && !strcmp(js->ended[i].path, path) &&
		    !ids_push(&older, &n, &cap, js->ended[i].id))
			break; /* out of memory: they expire in their own time */
	pthread_mutex_unlock(&js->ended_lock);
	for (size_t i = 0; i < n; i++)
		mark_expired(js, older[i]);
	free(older);
}

static void *job_main(void *arg)
{
	struct job *j = arg;
	cis_errmsg em = {{0}};
	bool load = !strcmp(j->type, "load");
	int err = load ? run_load(j, &em) : run_bcast(j, &em);
	pthread_mutex_lock(&j->js->lock);
	if (j->shutdown && !j->cancel_asked) {
		pthread_mutex_unlock(&j->js->lock);
		return NULL; /* its record says running: the next start resumes it */
	}
	int state = j->cancel ? JOB_CANCELLED : err ? JOB_FAILED : JOB_DONE;
	int64_t fin = cis_wall_ns();
	pthread_mutex_unlock(&j->js->lock);
	/* A finished load joins the ended list before it stops looking
	 * running, so that the TTL expiry, which reads the running loads and
	 * then the ended ones, never misses it in between (it would free the
	 * blocks of an older load of the same path that this one holds). */
	if (load) {
		pthread_mutex_lock(&j->js->ended_lock);
		ended_add(j->js, j->id, j->path, fin, state);
		pthread_mutex_unlock(&j->js->ended_lock);
		/* While this job still looks running: a submit that reaps
		 * finished jobs joins their threads holding js->lock, which
		 * the takeover takes. */
		if (state == JOB_DONE)
			take_over_older(j->js, j->id, j->path);
	}
	pthread_mutex_lock(&j->js->lock);
	j->state = state;
	if (err && state == JOB_FAILED)
		snprintf(j->error, sizeof(j->error), "%s", cis_errmsg_or(&em, err));
	j->finished_ns = fin;
	job_save(j);
	pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->js->lock);
	cis_info("job finished", "id=%llu type=%s path=%s state=%s files=%llu failed=%llu",
	         (unsigned long long)j->id, j->type, j->path, state_names[j->state],
	         (unsigned long long)j->c.files, (unsigned long long)j->c.files_failed);
	atomic_store(&j->js->prune_due, true);
	return NULL;
}

/* ---- public ---- */

int mst_jobs_new(mst_master *m, bool background, uint64_t kept, mst_jobs **out)
{
	struct mst_jobs *js = calloc(1, sizeof(*js));
	if (!js)
		return -ENOMEM;
	js->m = m;
	js->background = background;
	/* as many as stay in memory at least: a job there has its record */
	js->kept = kept > JOBS_KEPT_FINISHED ? kept : JOBS_KEPT_FINISHED;
	pthread_mutex_init(&js->lock, NULL);
	pthread_mutex_init(&js->ended_lock, NULL);
	pthread_mutex_lock(&js->ended_lock);
	int err = ended_read(js);
	pthread_mutex_unlock(&js->ended_lock);
	if (err)
		cis_warn("finished loads not read: their TTLs wait for the next start", "%s",
		         cis_strerror(err));
	else
		prune_records(js);
	*out = js;
	return 0;
}

static void job_free(struct job *j)
{
	while (j->fhead) {
		struct frec *f = j->fhead;
		j->fhead = f->next;
		frec_free(f);
	}
	while (j->qhead) {
		struct batch *b = j->qhead;
		j->qhead = b->next;
		free(b);
	}
	for (size_t i = 0; i < j->npend; i++)
		free(j->pending[i]);
	free(j->pending);
	free(j->pend_ids);
	free(j->live);
	free(j->path);
	free(j->cursor);
	free(j->resume_after);
	json_decref(j->failures);
	cis_rpc_cancel_free(j->calls);
	pthread_cond_destroy(&j->cond);
	free(j);
}

/* The master is stopping: j commits nothing more, its record stays
 * "running" for the next start to resume. Caller holds js->lock. */
static void job_stop(struct job *j)
{
	j->shutdown = true;
	j->cancel = true;
	cis_rpc_cancel_fire(j->calls); /* not waiting for slow workers */
	pthread_cond_broadcast(&j->cond);
}

void mst_jobs_stop(mst_jobs *js)
{
	if (!js)
		return;
	pthread_mutex_lock(&js->lock);
	js->stopping = true;
	for (struct job *j = js->list; j; j = j->next)
		if (j->thread)
			job_stop(j);
	pthread_mutex_unlock(&js->lock);
}

void mst_jobs_free(mst_jobs *js)
{
	if (!js)
		return;
	mst_jobs_stop(js);
	for (struct job *j = js->list; j; j = j->next)
		if (j->thread)
			pthread_join(j->th, NULL);
	while (js->list) {
		struct job *j = js->list;
		js->list = j->next;
		job_free(j);
	}
	for (size_t i = 0; i < js->nended; i++)
		free(js->ended[i].path);
	free(js->ended);
	pthread_mutex_destroy(&js->ended_lock);
	pthread_mutex_destroy(&js->lock);
	free(js);
}

/* Finished jobs past the newest JOBS_KEPT_FINISHED leave memory (their
 * records stay in LMDB, where mst_job_json finds them), their threads
 * joined: a master that runs a job a minute for months holds a few, not
 * every one with its failures and its thread. Caller holds js->lock. */
static void reap_finished(struct mst_jobs *js)
{
	size_t kept = 0;
	for (struct job **pp = &js->list; *pp;) {
		struct job *j = *pp;
		if (j->state == JOB_RUNNING || ++kept <= JOBS_KEPT_FINISHED) {
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		if (j->thread)
			pthread_join(j->th,
			             NULL); /* it has ended or is ending: no lock to wait on */
		job_free(j);
	}
}

static int job_start(struct mst_jobs *js, struct job *j)
{
	if (!js->background)
		return 0;
	if (pthread_create(&j->th, NULL, job_main, j))
		return -EAGAIN;
	j->thread = true;
	return 0;
}

/* The bytes the pins hold in the cache: each pinned file's size times its
 * replicas, now and once a change is made: path's pin setting becomes
 * pin_val (pinning it adds it as a root), and/or its replication target
 * becomes rep (with rep_clear_below, also below it). Below the path a
 * nearer setting of its own (an unpin of a subdirectory, a target of its
 * own) still wins. */
struct pin_sum {
	mst_master *m;
	const char *adding; /* a path being pinned, or NULL */
	bool skip_adding;   /* walking another root: adding's files are counted apart */
	const char *path;   /* the path changed */
	size_t path_len;
	int pin_val;          /* its new pin setting: 1, 0, or < 0 unchanged */
	uint32_t rep;         /* its new replication target; 0 unchanged */
	bool rep_clear_below; /* the targets below it dropped */
	uint64_t before, after;
};

static int sum_pinned(void *arg, const char *path, const mst_inode *f)
{
	struct pin_sum *s = arg;
	if (s->skip_adding && path_within(s->adding, path))
		return 0; /* counted by the walk of the new pin itself */
	mst_policy pol;
	mst_policy_resolve(s->m, path, &pol);
	bool pinned = pol.pin == 1, pinned_after = pinned;
	uint32_t rep = pol.replicas ? pol.replicas : 1, rep_after = rep;
	if (path_within(s->path, path)) {
		if (s->pin_val >= 0 && (pol.pin < 0 || pol.pin_from <= s->path_len))
			pinned_after = s->pin_val == 1;
		if (s->rep && (s->rep_clear_below || pol.replicas_from <= s->path_len))
			rep_after = s->rep;
	}
	if (pinned)
		s->before += f->size * rep;
	if (pinned_after)
		s->after += f->size * rep_after;
	return 0;
}

/* The roots to walk so that every pinned file is counted once: `adding`
 * when not NULL (first, walked listing the store, files below it counted
 * there only), and the pinned paths no other pinned path contains, nor
 * `adding`. */
static int pin_roots(mst_master *m, const char *adding, char ***roots, size_t *n)
{
	char **pinned;
	size_t np;
	/* the stored paths themselves (any bytes), not their JSON listing */
	int err = mst_policies_pinned(m, &pinned, &np);
	if (err)
		return err;
	size_t cnt = 0, first = adding ? 1 : 0; /* the stored pins start at first */
	const char **cand = calloc(np + 1, sizeof(*cand));
	if (!cand) {
		mst_strv_free(pinned, np);
		return -ENOMEM;
	}
	if (adding)
		cand[cnt++] = adding;
	for (size_t i = 0; i < np; i++)
		cand[cnt++] = pinned[i];
	*roots = calloc(cnt + 1, sizeof(char *));
	*n = 0;
	err = *roots ? 0 : -ENOMEM;
	for (size_t a = 0; a < cnt && !err; a++) {
		bool inside = false;
		for (size_t b = first; a >= first && b < cnt && !inside; b++)
			inside = b != a && path_within(cand[b], cand[a]) &&
			         (strcmp(cand[a], cand[b]) || b < a);
		inside = inside || (a >= first && adding && path_within(adding, cand[a]));
		if (!inside && !((*roots)[(*n)++] = strdup(cand[a])))
			err = -ENOMEM;
	}
	if (err) {
		mst_strv_free(*roots, *n);
		*roots = NULL;
	}
	free(cand);
	mst_strv_free(pinned, np);
	return err;
}

/* Pins larger than the cache can hold would make eviction impossible:
 * refuse a change that would take what is pinned past the cache's
 * capacity (the sum over all workers), unless it pins no more than before
 * (an unpin, a lower target: allowed even where workers have left).
 *
 * Only files within path change, and those are pinned (before or after)
 * only below a pinned root that lies within path or contains it, or below
 * path itself when it is being pinned: those roots are walked first, and
 * when the change adds no bytes there (a target changed where nothing is
 * pinned, an unpin) nothing else is. Only a change that adds bytes walks
 * the other pinned roots, for the total: O(pinned files), with
 * m->policy_lock held by the caller. */
int mst_pin_check(mst_master *m, const char *path, int pin, int64_t replicas, bool clear_below,
                  cis_errmsg *em)
{
	struct pin_sum s = {.m = m,
	                    .adding = pin == 1 ? path : NULL,
	                    .path = path,
	                    .path_len = strlen(path),
	                    .pin_val = pin,
	                    .rep = replicas > 0 ? (uint32_t)replicas : 0,
	                    .rep_clear_below = clear_below};
	const char *op = pin == 1 ? "pin" : "replicas of";
	char **roots;
	size_t n;
	if (pin != 1 && s.rep == 0)
		return 0; /* pins nothing more */
	int err = pin_roots(m, s.adding, &roots, &n);
	if (err)
		return cis_fail(em, err, "%s %s: %s", op, path, cis_strerror(err));
	/* pass 0: the roots that overlap path; pass 1: the others, only when
	 * the change adds bytes and the total decides */
	for (int pass = 0; pass < 2 && !err; pass++) {
		if (pass == 1 && s.after <= s.before)
			break; /* pins no more than before */
		for (size_t i = 0; i < n && !err; i++) {
			bool overlaps = path_within(roots[i], path) || path_within(path, roots[i]);
			if (overlaps != (pass == 0))
				continue;
			/* a new pin's directories may not be listed yet; older pins' are */
			bool adding = i == 0 && s.adding; /* pin_roots puts it first */
			s.skip_adding = s.adding && !adding;
			err = mst_walk(m, roots[i], adding, sum_pinned, NULL, &s, em);
			if (err == -ENOENT &&
			    !adding) /* an older pin's data is gone: it holds nothing */
				err = 0;
			if (err) { /* say which change failed, and on whose data */
				char was[sizeof(em->text)];
				snprintf(was, sizeof(was), "%s", cis_errmsg_or(em, err));
				if (!strcmp(roots[i], path))
					cis_fail(em, err, "%s %s: %s", op, path, was);
				else
					cis_fail(em, err,
					         "%s %s: counting the pinned data under %s: %s", op,
					         path, roots[i], was);
			}
		}
	}
	mst_strv_free(roots, n);
	if (err)
		return err;
	if (s.after <= s.before)
		return 0;
	json_t *w = mst_workers_json(m->workers);
	uint64_t cap = 0;
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(w, "workers"), i, v) cap +=
	    (uint64_t)json_integer_value(json_object_get(v, "capacity"));
	json_decref(w);
	if (s.after > cap) {
		char need[32], have[32];
		cis_fmt_size(s.after, need, sizeof(need));
		cis_fmt_size(cap, have, sizeof(have));
		return cis_fail(em, -ENOSPC,
		                "%s %s: the pinned data would be %s (replicas counted), more than "
		                "the cache's %s",
		                op, path, need, have);
	}
	return 0;
}

int mst_job_submit_locked(mst_master *m, const mst_job_req *r, uint64_t *id_out, cis_errmsg *em)
{
	struct mst_jobs *js = m->jobs;
	char path[MST_PATH_MAX + 1];
	int err;
	if (!r->type || (strcmp(r->type, "load") && strcmp(r->type, "free") &&
	                 strcmp(r->type, "pin") && strcmp(r->type, "unpin")))
		return cis_fail(em, -EINVAL, "unknown job type");
	if (r->replicas > CIS_REPLICAS_MAX || r->parallel > CIS_PARALLEL_MAX)
		return cis_fail(em, -EINVAL, "replicas must be 1..%d and parallel 1..%d",
		                CIS_REPLICAS_MAX, CIS_PARALLEL_MAX);
	/* what the path leads to, links followed: the job walks that */
	err = mst_ns_realpath(m, r->path, true, path, NULL, em);
	if (err)
		return err;
	if (!strcmp(r->type, "pin") && !r->pin_checked) {
		err = mst_pin_check(m, path, 1, -1, false, em);
		if (err)
			return err;
	}
	mst_policy pol;
	mst_policy_resolve(m, path, &pol);
	if (!strcmp(r->type, "load") && r->replicas > 1 && pol.replicas != r->replicas) {
		/* the target the replication manager keeps from now on: more
		 * copies of pinned data must fit the cache too */
		err = mst_pin_check(m, path, -1, r->replicas, false, em);
		if (!err)
			err = mst_policy_update(m, path, r->replicas, -1, -2, false, em);
		if (err)
			return err;
	}
	MDB_txn *txn;
	uint64_t id;
	err = mst_txn_begin(m, true, &txn);
	if (!err) {
		err = mst_store_next_id(m, txn, "next_job", &id);
		if (err)
			mdb_txn_abort(txn);
		else
			err = mst_txn_commit(txn);
	}
	if (err)
		return cis_fail(em, err, "jobs: %s", cis_strerror(err));
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->js = js;
	j->id = id;
	snprintf(j->type, sizeof(j->type), "%s", r->type);
	j->path = strdup(path);
	j->replicas = r->replicas ? r->replicas : 1;
	j->parallel = r->parallel ? r->parallel : LOAD_PARALLEL;
	j->bandwidth = r->bandwidth;
	j->verify = r->verify;
	j->metadata_only = r->metadata_only;
	j->pin = pol.pin == 1;
	j->keep_pinned = r->keep_pinned;
	j->state = JOB_RUNNING;
	j->created_ns = cis_wall_ns();
	j->failures = json_array();
	pthread_cond_init(&j->cond, NULL);
	if (!j->path || !j->failures || cis_rpc_cancel_new(&j->calls)) {
		job_free(j);
		return -ENOMEM;
	}
	pthread_mutex_lock(&js->lock);
	reap_finished(js);
	job_save(j);
	if (js->stopping) /* taken, and left for the next start to run */
		job_stop(j);
	err = job_start(js, j);
	if (err) {
		job_not_started(j);
		pthread_mutex_unlock(&js->lock);
		job_free(j);
		return cis_fail(em, err, "cannot start the job thread");
	}
	j->next = js->list;
	js->list = j;
	pthread_mutex_unlock(&js->lock);
	cis_info("job started", "id=%llu type=%s path=%s replicas=%u", (unsigned long long)id,
	         j->type, j->path, j->replicas);
	*id_out = id;
	return 0;
}

int mst_job_submit(mst_master *m, const mst_job_req *r, uint64_t *id_out, cis_errmsg *em)
{
	pthread_mutex_lock(&m->policy_lock);
	int err = mst_job_submit_locked(m, r, id_out, em);
	pthread_mutex_unlock(&m->policy_lock);
	return err;
}

int mst_jobs_resume(mst_master *m)
{
	struct mst_jobs *js = m->jobs;
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	json_t *todo = json_array();
	int err = mst_txn_begin(m, false, &txn);
	if (err) {
		json_decref(todo);
		return err;
	}
	if (mdb_cursor_open(txn, m->dbi_jobs, &cur) == 0) {
		int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
		while (rc == 0) {
			json_t *o = json_loadb(v.mv_data, v.mv_size, 0, NULL);
			const char *st = json_string_value(json_object_get(o, "state"));
			if (st && !strcmp(st, "running"))
				json_array_append(todo, o);
			json_decref(o);
			rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
		}
		mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
	size_t i;
	json_t *o;
	json_array_foreach(todo, i, o)
	{
		struct job *j = job_from_record(js, o);
		if (!j)
			continue;
		pthread_mutex_lock(&js->lock);
		j->files_seen = j->c.files;
		j->bytes_seen = j->c.bytes;
		j->resumed = true;
		if (job_start(js, j)) {
			job_not_started(j);
			pthread_mutex_unlock(&js->lock);
			cis_warn("job not resumed", "id=%llu: cannot start its thread",
			         (unsigned long long)j->id);
			job_free(j);
			continue;
		}
		j->next = js->list;
		js->list = j;
		pthread_mutex_unlock(&js->lock);
		cis_info("job resumed", "id=%llu type=%s path=%s files_done=%llu",
		         (unsigned long long)j->id, j->type, j->path,
		         (unsigned long long)j->c.files);
	}
	json_decref(todo);
	return 0;
}

int mst_job_run(mst_master *m, uint64_t id)
{
	struct job *j;
	pthread_mutex_lock(&m->jobs->lock);
	for (j = m->jobs->list; j && j->id != id; j = j->next)
		;
	pthread_mutex_unlock(&m->jobs->lock);
	if (!j)
		return -ENOENT;
	job_main(j);
	return 0;
}

json_t *mst_job_json(mst_master *m, uint64_t id, size_t max_failures)
{
	struct mst_jobs *js = m->jobs;
	json_t *o = NULL;
	pthread_mutex_lock(&js->lock);
	for (struct job *j = js->list; j; j = j->next)
		if (j->id == id)
			/* walk progress only while it runs (as records in LMDB) */
			o = job_record(j, max_failures, j->state == JOB_RUNNING);
	pthread_mutex_unlock(&js->lock);
	if (o)
		return o;
	o = record_get(m, id);
	json_t *f = json_object_get(o, "failures");
	while (json_array_size(f) > max_failures)
		json_array_remove(f, json_array_size(f) - 1);
	return o;
}

json_t *mst_jobs_json(mst_master *m)
{
	json_t *arr = json_array();
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	if (mst_txn_begin(m, false, &txn))
		return arr;
	if (mdb_cursor_open(txn, m->dbi_jobs, &cur) == 0) {
		int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
		while (rc == 0 && k.mv_size == 8) {
			uint64_t id;
			memcpy(&id, k.mv_data, 8);
			id = be64toh(id);
			json_array_append_new(arr, json_integer((json_int_t)id));
			rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
		}
		mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
	json_t *out = json_array();
	size_t i;
	json_t *jid;
	json_array_foreach(arr, i, jid)
	{
		json_t *o = mst_job_json(m, (uint64_t)json_integer_value(jid), 0);
		if (o) {
			json_object_del(o, "failures");
			json_array_append_new(out, o);
		}
	}
	json_decref(arr);
	return out;
}

int mst_job_cancel(mst_master *m, uint64_t id, cis_errmsg *em)
{
	struct mst_jobs *js = m->jobs;
	int err = cis_fail(em, -ENOENT, "job %llu: no such running job", (unsigned long long)id);
	bool found = false;
	pthread_mutex_lock(&js->lock);
	for (struct job *j = js->list; j; j = j->next)
		if (j->id == id) {
			found = true;
			if (j->state != JOB_RUNNING) {
				err = cis_fail(em, -EINVAL, "job %llu is already %s",
				               (unsigned long long)id, state_names[j->state]);
			} else {
				j->cancel = true;
				j->cancel_asked = true;
				cis_rpc_cancel_fire(j->calls); /* batches out fail now */
				pthread_cond_broadcast(&j->cond);
				if (!j->thread)
					j->state = JOB_CANCELLED;
				if (j->shutdown) /* its thread ends without a word */
					j->finished_ns = cis_wall_ns();
				job_save(j); /* as cancelled, even while its thread winds down */
				em->text[0] = 0;
				err = 0;
			}
		}
	pthread_mutex_unlock(&js->lock);
	if (!found) {
		/* finished jobs leave memory: their record says how they ended */
		json_t *o = record_get(m, id);
		const char *st = json_string_value(json_object_get(o, "state"));
		if (st && strcmp(st, state_names[JOB_RUNNING]))
			err = cis_fail(em, -EINVAL, "job %llu is already %s",
			               (unsigned long long)id, st);
		json_decref(o);
	}
	return err;
}

/* Whether load e's blocks are still wanted: while it runs, and after it
 * finished done for its TTL (forever without one). */
static bool load_live(mst_master *m, const struct ended *e, int64_t now_ns)
{
	if (e->state == JOB_RUNNING)
		return true;
	mst_policy pol;
	return e->state == JOB_DONE && mst_policy_resolve(m, e->path, &pol) == 0 &&
	       (pol.ttl_s <= 0 || e->finished_ns + pol.ttl_s * 1000000000LL > now_ns);
}

enum newer_load { NEWER_NONE, NEWER_COVERS, NEWER_WAIT };

/* A load of all[0..n) newer than old whose blocks are still wanted: a
 * finished one of old's path or above it (its own expiry frees old's
 * blocks too), or one still running, or one inside old's path (old's free
 * would take its blocks: it waits). */
static enum newer_load newer_load(mst_master *m, const struct ended *all, size_t n,
                                  const struct ended *old, int64_t now_ns)
{
	enum newer_load r = NEWER_NONE;
	for (size_t i = 0; i < n && r != NEWER_COVERS; i++) {
		const struct ended *o = &all[i];
		if (o->id <= old->id || !load_live(m, o, now_ns))
			continue;
		if (path_within(o->path, old->path) && o->state != JOB_RUNNING)
			r = NEWER_COVERS;
		else if (path_within(o->path, old->path) || path_within(old->path, o->path))
			r = NEWER_WAIT; /* a running one may yet fail or be cancelled */
	}
	return r;
}

/* Expire the finished load e if its TTL has passed: mark it, and free its
 * blocks unless a newer load of all[0..n) still wants them. */
static void expire_one(mst_master *m, const struct ended *all, size_t n, const struct ended *e,
                       int64_t now_ns, uint64_t *started)
{
	if (due_at(m, e->path, e->finished_ns) > now_ns)
		return;
	enum newer_load newer = newer_load(m, all, n, e, now_ns);
	if (newer == NEWER_WAIT)
		return; /* decided once that one ends or expires */
	/* mark first: a crash between the two leaves blocks cached, never
	 * frees twice */
	mark_expired(m->jobs, e->id);
	if (newer == NEWER_COVERS) {
		cis_info("ttl expired, blocks kept for a newer load", "path=%s load_job=%llu",
		         e->path, (unsigned long long)e->id);
		return;
	}
	mst_job_req r = {.type = "free", .path = e->path, .keep_pinned = true};
	uint64_t fid;
	cis_errmsg em = {{0}};
	int rc = mst_job_submit(m, &r, &fid, &em);
	if (rc == 0) {
		(*started)++;
		cis_info("ttl expired", "path=%s load_job=%llu free_job=%llu", e->path,
		         (unsigned long long)e->id, (unsigned long long)fid);
	} else {
		/* Marked expired already (a retry could free blocks a newer
		 * load brought in since): say so, and what to do. */
		cis_error("ttl expired but its free could not start; the blocks stay cached",
		          "path=%s load_job=%llu err=\"%s\" fix=\"cistern free %s\"", e->path,
		          (unsigned long long)e->id, cis_errmsg_or(&em, rc), e->path);
	}
}

/* Append a copy of load (its own path) to *v; false when out of memory. */
static bool loads_push(struct ended **v, size_t *n, size_t *cap, struct ended load)
{
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : 16;
		struct ended *nv = realloc(*v, c * sizeof(*nv));
		if (!nv)
			return false;
		*v = nv;
		*cap = c;
	}
	if (!(load.path = strdup(load.path)))
		return false;
	(*v)[(*n)++] = load;
	return true;
}

static void loads_free(struct ended *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].path);
	free(v);
}

int mst_jobs_expire(mst_master *m, int64_t now_ns, uint64_t *started)
{
	struct mst_jobs *js = m->jobs;
	/* copies: expire_one drops ended entries (and their paths) as it goes */
	struct ended *due = NULL, *all = NULL;
	size_t ndue = 0, duecap = 0, nall = 0, allcap = 0;
	bool ok = true;
	*started = 0;
	if (atomic_exchange(&js->prune_due, false))
		prune_records(js);
	pthread_mutex_lock(&js->ended_lock);
	do_refresh_due(js);
	for (size_t i = 0; i < js->nended && ok; i++)
		if (js->ended[i].due_ns <= now_ns)
			ok = loads_push(&due, &ndue, &duecap, js->ended[i]);
	pthread_mutex_unlock(&js->ended_lock);
	if (!ndue || !ok)
		goto out; /* out of memory: tried again in a second */
	/* The loads whose blocks may be wanted still: running ones (one the
	 * master's stop put on hold too, not one the user cancelled) and the
	 * ended ones. Nothing expires while the master stops: a free taken
	 * now would wait for the next start, and run beside the loads then
	 * resumed. */
	pthread_mutex_lock(&js->lock);
	bool stopping = js->stopping;
	for (struct job *j = js->list; j && ok; j = j->next)
		if (j->state == JOB_RUNNING && !j->cancel_asked && !strcmp(j->type, "load"))
			ok = loads_push(
			    &all, &nall, &allcap,
			    (struct ended){.id = j->id, .path = j->path, .state = JOB_RUNNING});
	pthread_mutex_unlock(&js->lock);
	pthread_mutex_lock(&js->ended_lock);
	for (size_t i = 0; i < js->nended && ok; i++)
		ok = loads_push(&all, &nall, &allcap, js->ended[i]);
	pthread_mutex_unlock(&js->ended_lock);
	for (size_t i = 0; i < ndue && ok && !stopping; i++)
		expire_one(m, all, nall, &due[i], now_ns, started);
out:
	loads_free(due, ndue);
	loads_free(all, nall);
	return 0;
}

bool mst_jobs_freeing(mst_master *m, const char *path)
{
	/* Workers tell the master what they dropped in their next heartbeat:
	 * until then its block locations still show the freed copies. */
	int64_t settle_ns =
	    2 * (int64_t)mst_workers_heartbeat_ms(m->workers) * 1000000 + 500000000LL;
	int64_t now = cis_wall_ns();
	bool r = false;
	pthread_mutex_lock(&m->jobs->lock);
	for (struct job *j = m->jobs->list; j && !r; j = j->next)
		r = !strcmp(j->type, "free") &&
		    (j->state == JOB_RUNNING || now - j->finished_ns < settle_ns) &&
		    (path_within(path, j->path) || path_within(j->path, path));
	pthread_mutex_unlock(&m->jobs->lock);
	return r;
}

bool mst_jobs_loading(mst_master *m, const char *path)
{
	bool r = false;
	pthread_mutex_lock(&m->jobs->lock);
	for (struct job *j = m->jobs->list; j && !r; j = j->next)
		r = j->state == JOB_RUNNING && !strcmp(j->type, "load") &&
		    (path_within(path, j->path) || path_within(j->path, path));
	pthread_mutex_unlock(&m->jobs->lock);
	return r;
}
