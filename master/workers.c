/* The worker registry and the block-location index, both in memory.
 *
 * Workers register (keeping the id they persisted), heartbeat every
 * heartbeat_ms and are declared lost after lost_ms of silence: removed from
 * the live list (version bumped) and their block locations dropped. After a
 * master restart nothing is known: a heartbeat gets -ENOENT "unknown worker,
 * register again", the worker re-registers and sends a full block report,
 * which rebuilds the index. The list version starts at the wall clock in ms
 * so that it keeps going up across master restarts.
 *
 * Block index: one `loc` per (block, worker) pair, chained in a hash table
 * by block id and linked into its worker's own list, so that a lost or
 * re-reporting worker costs its own blocks, not the whole table (a walk of
 * the table held the lock for most of a second at 4 million blocks).
 *
 * A full block report comes in pages (first ... last). Each page marks the
 * pairs it names with the worker's report generation; only the last page
 * drops the worker's pairs left unmarked. Until then the worker keeps its
 * old locations: a load does not fetch again, and replication does not
 * copy, blocks the worker still has while its report is half way. Blocks a
 * heartbeat adds during a report are marked too. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/json_text.h"
#include "cistern/log.h"
#include "cistern/proto/master.pb-c.h"
#include "cistern/time.h"
#include "master.h"

struct loc {
	cis_block_id id;
	uint64_t wid;
	struct loc *next;          /* the bucket's chain */
	struct loc *wprev, *wnext; /* the worker's pairs */
	uint32_t gen;              /* the full report that last named it */
};

struct worker {
	uint64_t id;
	Cis__WorkerInfo *info; /* malloc'd deep copy */
	uint64_t last_ms;
	uint64_t capacity, used;
	uint64_t blocks;     /* its pairs in the index */
	struct loc *locs;    /* their list */
	uint32_t report_gen; /* the full report under way or last made */
	bool reporting;      /* registered again, or a report under way: locations may be stale */
};

struct mst_workers {
	mst_master *m;
	pthread_mutex_t lock;
	struct worker *w;
	size_t n, cap;
	uint64_t version;
	uint64_t next_id; /* LMDB's worker id counter, kept here (under lock) */
	uint64_t heartbeat_ms, lost_ms;
	struct loc **buckets;
	size_t nbuckets, npairs, nblocks;
	pthread_t monitor;
	bool stop, monitor_running;
	pthread_cond_t stop_cond;
	cis_gauge *g_live;
	cis_counter *c_lost;
};

/* Block ids are xxh128 digests, but they come from the network: every bit
 * is mixed in (splitmix64's finalizer), so that ids differing in their top
 * bits only do not all share a bucket. */
static size_t bucket_of(cis_block_id id, size_t nbuckets)
{
	uint64_t h = id.hi ^ (id.lo * 0x9E3779B97F4A7C15ull);
	h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
	h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
	return (size_t)((h ^ (h >> 31)) & (nbuckets - 1));
}

static void loc_grow(struct mst_workers *w)
{
	size_t nb = w->nbuckets * 2;
	struct loc **b = calloc(nb, sizeof(*b));
	if (!b)
		return; /* keep the longer chains */
	for (size_t i = 0; i < w->nbuckets; i++) {
		struct loc *l = w->buckets[i];
		while (l) {
			struct loc *next = l->next;
			size_t h = bucket_of(l->id, nb);
			l->next = b[h];
			b[h] = l;
			l = next;
		}
	}
	free(w->buckets);
	w->buckets = b;
	w->nbuckets = nb;
}

/* Record that wk holds id, marked with its report generation. Returns 1
 * when the pair is new. Caller holds w->lock. */
static int loc_add(struct mst_workers *w, struct worker *wk, cis_block_id id)
{
	if (w->npairs > w->nbuckets * 2)
		loc_grow(w);
	struct loc **head = &w->buckets[bucket_of(id, w->nbuckets)];
	bool block_known = false;
	for (struct loc *l = *head; l; l = l->next) {
		if (!cis_block_id_eq(l->id, id))
			continue;
		if (l->wid == wk->id) {
			l->gen = wk->report_gen;
			return 0;
		}
		block_known = true;
	}
	struct loc *l = malloc(sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->id = id;
	l->wid = wk->id;
	l->gen = wk->report_gen;
	l->next = *head;
	*head = l;
	l->wprev = NULL;
	l->wnext = wk->locs;
	if (wk->locs)
		wk->locs->wprev = l;
	wk->locs = l;
	wk->blocks++;
	w->npairs++;
	if (!block_known)
		w->nblocks++;
	return 1;
}

/* Unlink and free the pair *pp (in its bucket's chain) of worker wk.
 * Caller holds w->lock. */
static void loc_unlink(struct mst_workers *w, struct worker *wk, struct loc **pp)
{
	struct loc *l = *pp;
	*pp = l->next;
	if (l->wprev)
		l->wprev->wnext = l->wnext;
	else
		wk->locs = l->wnext;
	if (l->wnext)
		l->wnext->wprev = l->wprev;
	bool block_left = false;
	for (struct loc *o = w->buckets[bucket_of(l->id, w->nbuckets)]; o && !block_left;
	     o = o->next)
		block_left = cis_block_id_eq(o->id, l->id);
	if (!block_left)
		w->nblocks--;
	w->npairs--;
	wk->blocks--;
	free(l);
}

/* The link in id's bucket chain that points at wid's pair, or NULL. */
static struct loc **loc_find(struct mst_workers *w, cis_block_id id, uint64_t wid)
{
	struct loc **pp = &w->buckets[bucket_of(id, w->nbuckets)];
	while (*pp && !(cis_block_id_eq((*pp)->id, id) && (*pp)->wid == wid))
		pp = &(*pp)->next;
	return *pp ? pp : NULL;
}

/* Caller holds w->lock. Returns 1 if removed. */
static int loc_del(struct mst_workers *w, struct worker *wk, cis_block_id id)
{
	struct loc **pp = loc_find(w, id, wk->id);
	if (!pp)
		return 0;
	loc_unlink(w, wk, pp);
	return 1;
}

/* Drop wk's pairs: all of them, or (stale_only) those the current full
 * report did not name. Caller holds w->lock. */
static void loc_drop_worker(struct mst_workers *w, struct worker *wk, bool stale_only)
{
	struct loc *l = wk->locs;
	while (l) {
		struct loc *next = l->wnext;
		if (!stale_only || l->gen != wk->report_gen)
			loc_unlink(w, wk, loc_find(w, l->id, wk->id));
		l = next;
	}
}

size_t mst_workers_locate(mst_workers *w, cis_block_id id, uint64_t *out, size_t max)
{
	size_t n = 0;
	pthread_mutex_lock(&w->lock);
	for (struct loc *l = w->buckets[bucket_of(id, w->nbuckets)]; l && n < max; l = l->next)
		if (cis_block_id_eq(l->id, id))
			out[n++] = l->wid;
	pthread_mutex_unlock(&w->lock);
	return n;
}

static bool id_from_bytes(ProtobufCBinaryData b, cis_block_id *id)
{
	if (b.len != 16)
		return false;
	*id = cis_block_id_from_bytes(b.data);
	return true;
}

static char *dup_str(const char *s)
{
	return strdup(s ? s : "");
}

static Cis__WorkerInfo *info_copy(const Cis__WorkerInfo *src, uint64_t id)
{
	Cis__WorkerInfo *d = malloc(sizeof(*d));
	if (!d)
		return NULL;
	cis__worker_info__init(d);
	d->id = id;
	d->host = dup_str(src ? src->host : NULL);
	d->rpc_port = src ? src->rpc_port : 0;
	d->http_port = src ? src->http_port : 0;
	d->unix_socket = dup_str(src ? src->unix_socket : NULL);
	d->hostname = dup_str(src ? src->hostname : NULL);
	d->capacity = src ? src->capacity : 0;
	d->used = src ? src->used : 0;
	d->boot_id = src ? src->boot_id : 0;
	if (!d->host || !d->unix_socket || !d->hostname) {
		protobuf_c_message_free_unpacked(&d->base, NULL);
		return NULL;
	}
	return d;
}

/* Caller holds w->lock. */
static struct worker *find(struct mst_workers *w, uint64_t id)
{
	for (size_t i = 0; i < w->n; i++)
		if (w->w[i].id == id)
			return &w->w[i];
	return NULL;
}

/* Caller holds w->lock. */
static void remove_at(struct mst_workers *w, size_t i)
{
	loc_drop_worker(w, &w->w[i], false);
	protobuf_c_message_free_unpacked(&w->w[i].info->base, NULL);
	w->w[i] = w->w[--w->n];
	w->version++;
	cis_gauge_set(w->g_live, (double)w->n);
}

size_t mst_workers_expire(mst_workers *w, uint64_t now_ms)
{
	size_t lost = 0;
	pthread_mutex_lock(&w->lock);
	/* Their calls in flight are aborted after the lock: all of them (a
	 * fixed array left those past 64 waiting out their timeouts). */
	uint64_t *ids = malloc((w->n ? w->n : 1) * sizeof(*ids));
	for (size_t i = 0; i < w->n;) {
		if (now_ms > w->w[i].last_ms + w->lost_ms) {
			cis_warn("worker lost", "id=%llu host=%s silent_ms=%llu",
			         (unsigned long long)w->w[i].id, w->w[i].info->host,
			         (unsigned long long)(now_ms - w->w[i].last_ms));
			if (ids)
				ids[lost] = w->w[i].id;
			remove_at(w, i);
			cis_counter_inc(w->c_lost);
			lost++;
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&w->lock);
	for (size_t i = 0; ids && i < lost; i++)
		mst_wconns_abort(w->m, ids[i]);
	free(ids);
	return lost;
}

static void *monitor_main(void *arg)
{
	struct mst_workers *w = arg;
	pthread_mutex_lock(&w->lock);
	while (!w->stop) {
		cis_cond_wait_ms(&w->stop_cond, &w->lock, 1000);
		if (w->stop)
			break;
		pthread_mutex_unlock(&w->lock);
		mst_workers_expire(w, cis_mono_ms());
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* The id counter as LMDB has it: 0, or the error. */
static int read_next_id(struct mst_workers *w)
{
	MDB_txn *txn;
	int err = mst_txn_begin(w->m, false, &txn);

	if (err)
		return err;
	err = mst_store_peek_id(w->m, txn, "next_worker", &w->next_id);
	mdb_txn_abort(txn);
	return err;
}

int mst_workers_new(mst_master *m, uint64_t heartbeat_ms, uint64_t lost_ms, mst_workers **out)
{
	struct mst_workers *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->m = m;
	w->heartbeat_ms = heartbeat_ms ? heartbeat_ms : 3000;
	w->lost_ms = lost_ms ? lost_ms : 10000;
	w->version = (uint64_t)(cis_wall_ns() / 1000000);
	w->nbuckets = 1024;
	w->buckets = calloc(w->nbuckets, sizeof(*w->buckets));
	if (!w->buckets) {
		free(w);
		return -ENOMEM;
	}
	int err = read_next_id(w);
	if (err) {
		free(w->buckets);
		free(w);
		return err;
	}
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->stop_cond, NULL);
	w->g_live = cis_metrics_gauge(m->metrics, "cistern_master_workers_live", NULL,
	                              "Workers alive (heartbeating)");
	w->c_lost = cis_metrics_counter(m->metrics, "cistern_master_workers_lost_total", NULL,
	                                "Workers declared lost after missing heartbeats");
	if (pthread_create(&w->monitor, NULL, monitor_main, w) == 0)
		w->monitor_running = true;
	*out = w;
	return 0;
}

void mst_workers_free(mst_workers *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_broadcast(&w->stop_cond);
	pthread_mutex_unlock(&w->lock);
	if (w->monitor_running)
		pthread_join(w->monitor, NULL);
	while (w->n)
		remove_at(w, w->n - 1); /* and every pair with them */
	free(w->buckets);
	free(w->w);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->stop_cond);
	free(w);
}

uint64_t mst_workers_version(mst_workers *w)
{
	pthread_mutex_lock(&w->lock);
	uint64_t v = w->version;
	pthread_mutex_unlock(&w->lock);
	return v;
}

/* The worker's id: its own when the counter is past it (a worker
 * registering again: nothing to write), else one reserved in LMDB, so ids
 * stay unique across master restarts (a persisted id from the worker is
 * kept and the counter moved past it). That write waits on LMDB's writer
 * lock, which an unmount or a big listing may hold for long: not on an RPC
 * I/O thread, whose other connections (other workers' heartbeats) would
 * wait too; there it fails -EWOULDBLOCK and the pool answers. */
static int reserve_id(struct mst_workers *w, uint64_t want, uint64_t *out)
{
	pthread_mutex_lock(&w->lock);
	bool known = want && want < w->next_id;
	pthread_mutex_unlock(&w->lock);
	if (known) {
		*out = want;
		return 0;
	}
	if (mst_ns_wait_refused_now())
		return -EWOULDBLOCK;
	MDB_txn *txn;
	int err = mst_txn_begin(w->m, true, &txn);
	if (err)
		return err;
	uint64_t next;
	err = mst_store_take_id(w->m, txn, "next_worker", want, &next);
	if (err) {
		mdb_txn_abort(txn);
		return err;
	}
	err = mst_txn_commit(txn);
	if (err)
		return err;
	pthread_mutex_lock(&w->lock);
	if (w->next_id < next + 1)
		w->next_id = next + 1;
	pthread_mutex_unlock(&w->lock);
	*out = want ? want : next;
	return 0;
}

/* What a registration must name: where the worker serves. */
static int check_worker_info(const Cis__WorkerInfo *wi, cis_errmsg *em)
{
	if (!wi)
		return cis_fail(em, -EINVAL, "registration without the worker's address");
	if (!wi->host || !wi->host[0])
		return cis_fail(em, -EINVAL, "registration without the worker's host");
	if (wi->rpc_port == 0 || wi->rpc_port > UINT16_MAX || wi->http_port > UINT16_MAX)
		return cis_fail(em, -EINVAL,
		                "registration with a port out of range (rpc %u, http %u)",
		                wi->rpc_port, wi->http_port);
	return 0;
}

int mst_workers_register(mst_workers *w, const ProtobufCMessage *req_msg, ProtobufCMessage **reply,
                         cis_errmsg *em)
{
	const Cis__RegisterWorkerRequest *req = (const Cis__RegisterWorkerRequest *)req_msg;
	uint64_t want = req->worker ? req->worker->id : 0;
	uint64_t id;
	int err = check_worker_info(req->worker, em);

	if (err)
		return err;
	/* Sanity: an absurd persisted id would exhaust the counter. */
	if (want > (1ull << 48))
		return cis_fail(em, -EINVAL, "worker id out of range");
	err = reserve_id(w, want, &id);
	if (err)
		return err;
	Cis__WorkerInfo *info = info_copy(req->worker, id);
	Cis__RegisterWorkerReply *r = malloc(sizeof(*r));
	if (!info || !r) {
		if (info)
			protobuf_c_message_free_unpacked(&info->base, NULL);
		free(r);
		return -ENOMEM;
	}
	cis__register_worker_reply__init(r);
	pthread_mutex_lock(&w->lock);
	struct worker *wk = find(w, id);
	if (wk && (wk->info->rpc_port != info->rpc_port ||
	           strcmp(wk->info->host ? wk->info->host : "", info->host ? info->host : ""))) {
		/* The id is live at another address: a second worker with a
		 * copied state dir, or a stray frame. Taking the entry over
		 * would send its reads and loads to the wrong place; a worker
		 * really moved registers once the old entry is lost. */
		char at[300];
		snprintf(at, sizeof(at), "%s:%u", wk->info->host ? wk->info->host : "",
		         wk->info->rpc_port);
		pthread_mutex_unlock(&w->lock);
		cis_log_limited(CIS_LOG_WARN, "master:id-in-use", 10, "worker registration refused",
		                "id=%llu host=%s rpc_port=%u live_at=%s", (unsigned long long)id,
		                info->host, info->rpc_port, at);
		protobuf_c_message_free_unpacked(&info->base, NULL);
		free(r);
		return cis_fail(
		    em, -EBUSY,
		    "worker id %llu is live at %s (another worker with this id, a copied "
		    "state dir?); registering again once it is lost",
		    (unsigned long long)id, at);
	}
	/* Another id at this address is the worker before a restart that
	 * lost its state (a new id): it is gone, and its locations with it
	 * (kept, they would count copies that are not there, and name it as
	 * a copy's source to itself). */
	uint64_t *gone = NULL;
	size_t ngone = 0;
	for (size_t i = 0; i < w->n;) {
		struct worker *o = &w->w[i];
		bool same_addr =
		    o->id != id && o->info->rpc_port == info->rpc_port &&
		    !strcmp(o->info->host ? o->info->host : "", info->host ? info->host : "");
		uint64_t *g = same_addr ? realloc(gone, (ngone + 1) * sizeof(*gone)) : NULL;
		if (!g) {
			i++;
			continue;
		}
		gone = g;
		gone[ngone++] = o->id;
		cis_warn("worker replaced", "id=%llu host=%s rpc_port=%u by_id=%llu",
		         (unsigned long long)o->id, o->info->host, o->info->rpc_port,
		         (unsigned long long)id);
		remove_at(w, i);
	}
	wk = find(w, id); /* the sweep moves entries */
	if (wk) {
		/* Re-registration (a restarted worker): its locations stay
		 * until the full report that follows has named what it still
		 * has (a warm restart keeps them all). */
		protobuf_c_message_free_unpacked(&wk->info->base, NULL);
		wk->reporting = true;
	} else {
		if (w->n == w->cap) {
			size_t cap = w->cap ? w->cap * 2 : 16;
			struct worker *nw = realloc(w->w, cap * sizeof(*nw));
			if (!nw) {
				pthread_mutex_unlock(&w->lock);
				for (size_t i = 0; i < ngone; i++)
					mst_wconns_abort(w->m, gone[i]);
				free(gone);
				protobuf_c_message_free_unpacked(&info->base, NULL);
				free(r);
				return -ENOMEM;
			}
			w->w = nw;
			w->cap = cap;
		}
		wk = &w->w[w->n++];
		memset(wk, 0, sizeof(*wk));
		wk->id = id;
	}
	wk->info = info;
	wk->last_ms = cis_mono_ms();
	wk->capacity = info->capacity;
	wk->used = info->used;
	w->version++;
	cis_gauge_set(w->g_live, (double)w->n);
	r->worker_id = id;
	r->heartbeat_interval_ms = (uint32_t)w->heartbeat_ms;
	r->lost_timeout_ms = (uint32_t)w->lost_ms;
	r->worker_list_version = w->version;
	pthread_mutex_unlock(&w->lock);
	for (size_t i = 0; i < ngone; i++)
		mst_wconns_abort(w->m, gone[i]);
	free(gone);
	cis_info("worker registered", "id=%llu host=%s rpc_port=%u", (unsigned long long)id,
	         info->host, info->rpc_port);
	*reply = &r->base;
	return 0;
}

/* Record that wk gained (added) or lost the blocks in ids, keeping its
 * block count. Malformed ids are skipped. Caller holds w->lock. */
static void do_note_blocks(mst_workers *w, struct worker *wk, const ProtobufCBinaryData *ids,
                           size_t n, bool added)
{
	for (size_t i = 0; i < n; i++) {
		cis_block_id id;
		if (!id_from_bytes(ids[i], &id))
			continue;
		if (added)
			loc_add(w, wk, id);
		else
			loc_del(w, wk, id);
	}
}

/* A worker we just heard from: it counts as alive from now. NULL when the
 * master does not know it (after a restart, or once declared lost).
 * Caller holds w->lock. */
static struct worker *do_heard_from(mst_workers *w, uint64_t id)
{
	struct worker *wk = find(w, id);

	if (wk)
		wk->last_ms = cis_mono_ms();
	return wk;
}

/* The answer a worker recognises (by -ENOENT) as "register, then send a
 * full block report". */
static int unknown_worker(cis_errmsg *em)
{
	return cis_fail(em, -ENOENT, "unknown worker, register again");
}

int mst_workers_heartbeat(mst_workers *w, const ProtobufCMessage *req_msg, ProtobufCMessage **reply,
                          cis_errmsg *em)
{
	const Cis__HeartbeatRequest *req = (const Cis__HeartbeatRequest *)req_msg;
	Cis__HeartbeatReply *r = malloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	cis__heartbeat_reply__init(r);
	pthread_mutex_lock(&w->lock);
	struct worker *wk = do_heard_from(w, req->worker_id);
	if (!wk) {
		pthread_mutex_unlock(&w->lock);
		free(r);
		return unknown_worker(em);
	}
	wk->capacity = req->capacity;
	wk->used = req->used;
	wk->info->capacity = req->capacity;
	wk->info->used = req->used;
	do_note_blocks(w, wk, req->added, req->n_added, true);
	do_note_blocks(w, wk, req->removed, req->n_removed, false);
	r->worker_list_version = w->version;
	pthread_mutex_unlock(&w->lock);
	*reply = &r->base;
	return 0;
}

int mst_workers_report(mst_workers *w, const ProtobufCMessage *req_msg, ProtobufCMessage **reply,
                       cis_errmsg *em)
{
	const Cis__BlockReportRequest *req = (const Cis__BlockReportRequest *)req_msg;
	Cis__BlockReportReply *r = malloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	cis__block_report_reply__init(r);
	pthread_mutex_lock(&w->lock);
	struct worker *wk = do_heard_from(w, req->worker_id);
	if (!wk) {
		pthread_mutex_unlock(&w->lock);
		free(r);
		return unknown_worker(em);
	}
	if (req->first) {
		wk->report_gen++;
		wk->reporting = true;
	}
	do_note_blocks(w, wk, req->blocks, req->n_blocks, true);
	if (req->last) {
		loc_drop_worker(w, wk, true);
		wk->reporting = false;
	}
	r->blocks_known = wk->blocks;
	pthread_mutex_unlock(&w->lock);
	*reply = &r->base;
	return 0;
}

int mst_workers_list(mst_workers *w, uint64_t known, ProtobufCMessage **reply)
{
	Cis__WorkerListReply *r = malloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	cis__worker_list_reply__init(r);
	pthread_mutex_lock(&w->lock);
	r->version = w->version;
	if (known == w->version) {
		r->unchanged = true;
	} else if (w->n) {
		r->workers = calloc(w->n, sizeof(*r->workers));
		for (size_t i = 0; r->workers && i < w->n; i++) {
			r->workers[i] = info_copy(w->w[i].info, w->w[i].id);
			if (!r->workers[i])
				break;
			r->n_workers++;
		}
		if (!r->workers || r->n_workers != w->n) {
			pthread_mutex_unlock(&w->lock);
			protobuf_c_message_free_unpacked(&r->base, NULL);
			return -ENOMEM;
		}
	}
	pthread_mutex_unlock(&w->lock);
	*reply = &r->base;
	return 0;
}

json_t *mst_workers_json(mst_workers *w)
{
	json_t *arr = json_array();
	pthread_mutex_lock(&w->lock);
	/* Read under the lock: a heartbeat taken in between would be later. */
	uint64_t now = cis_mono_ms();
	for (size_t i = 0; i < w->n; i++) {
		const struct worker *wk = &w->w[i];
		/* The texts are the worker's, any bytes: cis_json_text, as
		 * json_pack's "s" would fail (and the worker go missing). */
		json_array_append_new(
		    arr, json_pack("{s:I, s:o, s:I, s:I, s:o, s:o, s:I, s:I, s:I, s:I}", "id",
		                   (json_int_t)wk->id, "host", cis_json_text(wk->info->host),
		                   "rpc_port", (json_int_t)wk->info->rpc_port, "http_port",
		                   (json_int_t)wk->info->http_port, "hostname",
		                   cis_json_text(wk->info->hostname), "unix_socket",
		                   cis_json_text(wk->info->unix_socket), "capacity",
		                   (json_int_t)wk->capacity, "used", (json_int_t)wk->used, "blocks",
		                   (json_int_t)wk->blocks, "last_heartbeat_ms_ago",
		                   (json_int_t)(now - wk->last_ms)));
	}
	json_t *o = json_pack("{s:I, s:o, s:I}", "version", (json_int_t)w->version, "workers", arr,
	                      "blocks_indexed", (json_int_t)w->nblocks);
	pthread_mutex_unlock(&w->lock);
	return o;
}

int mst_workers_ids(mst_workers *w, uint64_t **ids, size_t *n)
{
	*ids = NULL;
	*n = 0;
	pthread_mutex_lock(&w->lock);
	if (w->n) {
		*ids = malloc(w->n * sizeof(**ids));
		if (!*ids) {
			pthread_mutex_unlock(&w->lock);
			return -ENOMEM;
		}
		for (size_t i = 0; i < w->n; i++)
			(*ids)[i] = w->w[i].id;
		*n = w->n;
	}
	pthread_mutex_unlock(&w->lock);
	return 0;
}

Cis__WorkerInfo *mst_workers_info(mst_workers *w, uint64_t id)
{
	Cis__WorkerInfo *r = NULL;
	pthread_mutex_lock(&w->lock);
	struct worker *wk = find(w, id);
	if (wk)
		r = info_copy(wk->info, id);
	pthread_mutex_unlock(&w->lock);
	return r;
}

bool mst_workers_sure_holder(mst_workers *w, uint64_t id)
{
	pthread_mutex_lock(&w->lock);
	struct worker *wk = find(w, id);
	bool r = wk && !wk->reporting && cis_mono_ms() <= wk->last_ms + 2 * w->heartbeat_ms + 500;
	pthread_mutex_unlock(&w->lock);
	return r;
}

uint64_t mst_workers_heartbeat_ms(mst_workers *w)
{
	return w->heartbeat_ms;
}

uint64_t mst_workers_lost_ms(mst_workers *w)
{
	return w->lost_ms;
}
