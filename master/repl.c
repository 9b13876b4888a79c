/* RPC clients to workers and the replication manager.
 *
 * Clients: one cis_rpc_client per worker (pipelined, thread-safe), made on
 * first use and remade when the worker's address changes; freed at close.
 *
 * Replication manager: a thread that, when something changed (a policy was
 * set, a worker joined or was lost, a load ended) and otherwise every
 * interval, walks the paths that have a replication target (LMDB only, no
 * store listing) and, block by block, compares the holders in the location
 * index with the target: under-replicated blocks are copied worker to worker
 * (Replicate to the best-placed worker that lacks it, from the best-placed
 * holder), over-replicated ones are freed on the worst-placed holders. It
 * stays idle for a grace period after the master starts and after
 * membership changes, while block reports rebuild the index, so it never
 * acts on a partial view; TTLs are not expired before that grace either
 * (their frees would reach no worker). Cost of a pass: O(files under
 * managed paths). */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "cistern/log.h"
#include "cistern/msgtype.h"
#include "cistern/place.h"
#include "cistern/proto/master.pb-c.h"
#include "cistern/proto/worker.pb-c.h"
#include "cistern/rpc.h"
#include "cistern/time.h"
#include "master.h"

struct wconn {
	uint64_t id;
	char *host;
	uint32_t port;
	cis_rpc_client *cl;
};

struct mst_wconns {
	pthread_mutex_t lock;
	struct wconn *c;
	size_t n, cap;
};

int mst_wconns_new(mst_master *m, mst_wconns **out)
{
	(void)m;
	mst_wconns *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	*out = c;
	return 0;
}

void mst_wconns_free(mst_wconns *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++) {
		cis_rpc_client_free(c->c[i].cl);
		free(c->c[i].host);
	}
	free(c->c);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

void mst_wconns_abort(mst_master *m, uint64_t wid)
{
	mst_wconns *c = m->wconns;
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->n; i++)
		if (c->c[i].id == wid)
			cis_rpc_client_abort(c->c[i].cl);
	pthread_mutex_unlock(&c->lock);
}

/* The client for worker wid (the pool's: never freed before close). */
static int client_for(mst_master *m, uint64_t wid, cis_rpc_client **out, cis_errmsg *em)
{
	Cis__WorkerInfo *wi = mst_workers_info(m->workers, wid);
	if (!wi)
		return cis_fail(em, -ENOENT, "worker %llu is not live", (unsigned long long)wid);
	mst_wconns *c = m->wconns;
	int err = 0;
	pthread_mutex_lock(&c->lock);
	struct wconn *w = NULL;
	for (size_t i = 0; i < c->n; i++)
		if (c->c[i].id == wid && c->c[i].port == wi->rpc_port &&
		    !strcmp(c->c[i].host, wi->host))
			w = &c->c[i];
	if (!w) {
		/* A moved worker keeps its old client (in use by others maybe);
		 * a new one is added. Moves are rare. */
		if (c->n == c->cap) {
			size_t cap = c->cap ? c->cap * 2 : 8;
			struct wconn *nc = realloc(c->c, cap * sizeof(*nc));
			if (!nc) {
				err = -ENOMEM;
				goto out_unlock;
			}
			c->c = nc;
			c->cap = cap;
		}
		cis_rpc_client_opts o = {
		    .host = wi->host,
		    .port = (uint16_t)wi->rpc_port,
		    .name = "cistern-master",
		    .connect_timeout_ms = 2000,
		    .call_timeout_ms = 60000,
		};
		w = &c->c[c->n];
		w->id = wid;
		w->port = wi->rpc_port;
		w->host = strdup(wi->host);
		if (!w->host || cis_rpc_client_new(&o, &w->cl)) {
			free(w->host);
			err = -ENOMEM;
			goto out_unlock;
		}
		c->n++;
	}
	*out = w->cl;
out_unlock:
	pthread_mutex_unlock(&c->lock);
	protobuf_c_message_free_unpacked(&wi->base, NULL);
	return err;
}

int mst_wcall(mst_master *m, uint64_t wid, uint16_t type, const ProtobufCMessage *req, void *res,
              int timeout_ms, cis_errmsg *em)
{
	return mst_wcall_in(m, wid, NULL, type, req, res, timeout_ms, em);
}

int mst_wcall_in(mst_master *m, uint64_t wid, cis_rpc_cancel *cancel, uint16_t type,
                 const ProtobufCMessage *req, void *res, int timeout_ms, cis_errmsg *em)
{
	cis_rpc_client *cl = NULL;
	int err = client_for(m, wid, &cl, em);
	if (err)
		return err;
	return cis_rpc_call_in(cl, cancel, type, req, NULL, 0, res, timeout_ms, em);
}

/* ---- worker hit counters (for the report) ---- */

struct sbuf {
	char *p;
	size_t n;
};

static size_t sbuf_write(char *d, size_t sz, size_t nm, void *arg)
{
	struct sbuf *b = arg;
	size_t len = sz * nm;
	if (b->n + len > (4u << 20))
		return 0; /* a metrics page is small: refuse a huge one */
	char *np = realloc(b->p, b->n + len + 1);
	if (!np)
		return 0;
	memcpy(np + b->n, d, len);
	b->p = np;
	b->n += len;
	b->p[b->n] = 0;
	return len;
}

static uint64_t metric_value(const char *text, const char *name)
{
	size_t nl = strlen(name);
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, name, nl) && (p[nl] == ' ' || p[nl] == '{')) {
			const char *v = strchr(p, ' ');
			return v ? strtoull(v + 1, NULL, 10) : 0;
		}
	return 0;
}

int mst_worker_hits(const Cis__WorkerInfo *wi, uint64_t *hits, uint64_t *misses)
{
	char url[400];
	struct sbuf b = {0};
	*hits = *misses = 0;
	if (!wi->http_port)
		return -ENOENT;
	snprintf(url, sizeof(url), "http://%s:%u/metrics", wi->host, wi->http_port);
	CURL *h = curl_easy_init();
	if (!h)
		return -ENOMEM;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sbuf_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 1500L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
	CURLcode rc = curl_easy_perform(h);
	curl_easy_cleanup(h);
	if (rc != CURLE_OK || !b.p) {
		free(b.p);
		return -ECONNREFUSED;
	}
	*hits = metric_value(b.p, "cistern_worker_hits_total");
	*misses = metric_value(b.p, "cistern_worker_misses_total");
	free(b.p);
	return 0;
}

/* ---- the replication manager ---- */

struct mst_repl {
	mst_master *m;
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop, kicked;
	uint64_t interval_ms;
	cis_counter *c_copies, *c_copy_errors, *c_trims;
	/* Fired by mst_repl_stop: a pass under way stops at its next
	 * block, and its calls in flight are abandoned. */
	cis_rpc_cancel *cancel;
	atomic_bool stopping;
};

struct scan {
	mst_master *m;
	cis_rpc_cancel *cancel; /* NULL: a scan without the manager (tests) */
	const atomic_bool *stopping;
	const char *root;
	uint64_t *live;
	size_t nlive;
	uint64_t copied, trimmed, errors;
};

static void set_ref(Cis__BlockRef *b, uint8_t idb[16], cis_block_id id, const mst_inode *f,
                    uint64_t index, uint64_t bs)
{
	cis_block_id_to_bytes(id, idb);
	b->id.data = idb;
	b->id.len = 16;
	b->mount_id = f->mount_id;
	b->key = (char *)f->key;
	b->version = (char *)f->version;
	b->index = index;
	b->block_size = bs;
	b->file_size = f->size;
}

static int scan_file(void *arg, const char *path, const mst_inode *f)
{
	struct scan *s = arg;
	mst_policy pol;
	uint64_t bs = 0;
	if (s->stopping && atomic_load(s->stopping))
		return 1; /* the master stops: the rest waits for the next pass */
	if (mst_policy_resolve(s->m, path, &pol) || !pol.replicas ||
	    pol.replicas_from != strlen(s->root))
		return 0; /* another managed path (nested) owns this file */
	uint64_t nb = mst_file_blocks(s->m, f, &bs);
	size_t target = pol.replicas < s->nlive ? pol.replicas : s->nlive;
	size_t order[64];
	int freeing = -1; /* whether a free job drops path: not asked yet */
	for (uint64_t b = 0; b < nb; b++) {
		if (s->stopping && atomic_load(s->stopping))
			return 1; /* the master stops: the rest waits for the next pass */
		cis_block_id id = cis_block_id_make(f->mount_id, f->key, f->version, bs, b);
		uint64_t hold[64];
		size_t nh = mst_workers_locate(s->m->workers, id, hold, 64);
		if (nh == 0 || nh == target)
			continue; /* not cached (loads bring blocks in), or right */
		if (nh < target && freeing < 0)
			freeing = mst_jobs_freeing(s->m, path); /* asked once per file */
		if (nh < target && freeing)
			return 0; /* being freed: copies would bring it back */
		cis_block_id pid = cis_place_id(id, f->mount_id, f->key, f->version, bs, b);
		size_t no = cis_place(pid, s->live, s->nlive, order, 64);
		uint8_t idb[16];
		Cis__BlockRef ref = CIS__BLOCK_REF__INIT;
		set_ref(&ref, idb, id, f, b, bs);
		if (nh < target) {
			/* the best-placed holder is the source */
			Cis__WorkerInfo *src = NULL;
			for (size_t i = 0; i < no && !src; i++)
				if (mst_id_in(hold, nh, s->live[order[i]]))
					src = mst_workers_info(s->m->workers, s->live[order[i]]);
			size_t need = target - nh;
			for (size_t i = 0; i < no && need && src; i++) {
				uint64_t t = s->live[order[i]];
				if (mst_id_in(hold, nh, t))
					continue;
				Cis__ReplicateRequest rq = CIS__REPLICATE_REQUEST__INIT;
				rq.block = &ref;
				rq.source = src;
				/* Pinned by the worker itself once copied: a Pin
				 * sent after the copy was cancelled, or never sent,
				 * when the master stopped during it, and a later pass
				 * found the block at its target and pinned nothing. */
				rq.pin = pol.pin == 1;
				cis_rpc_result res = {.fd = -1};
				cis_errmsg em = {{0}};
				int err = mst_wcall_in(s->m, t, s->cancel, CIS_MSG_WORKER_REPLICATE,
				                       &rq.base, &res, 60000, &em);
				cis_rpc_result_free(&res);
				if (err == -ECANCELED)
					break; /* the master stops: the next block ends the walk */
				if (err) {
					s->errors++;
					cis_warn("replicate failed",
					         "path=%s block=%llu worker=%llu: %s", path,
					         (unsigned long long)b, (unsigned long long)t,
					         cis_errmsg_or(&em, err));
					continue;
				}
				s->copied++;
				need--;
			}
			if (src)
				protobuf_c_message_free_unpacked(&src->base, NULL);
		} else {
			/* Keep the best-placed target holders, free the rest; but
			 * only holders heard from lately count: one going silent
			 * (not lost yet) is neither kept in place of a live copy
			 * nor freed, or its loss a moment later could leave none. */
			size_t kept = 0;
			for (size_t i = 0; i < no; i++) {
				uint64_t t = s->live[order[i]];
				if (!mst_id_in(hold, nh, t) ||
				    !mst_workers_sure_holder(s->m->workers, t))
					continue;
				if (kept < target) {
					kept++;
					continue;
				}
				Cis__FreeRequest fr = CIS__FREE_REQUEST__INIT;
				fr.n_ids = 1;
				fr.ids = &ref.id;
				cis_rpc_result res = {.fd = -1};
				cis_errmsg em = {{0}};
				if (mst_wcall_in(s->m, t, s->cancel, CIS_MSG_WORKER_FREE, &fr.base,
				                 &res, 10000, &em) == 0)
					s->trimmed++;
				else
					s->errors++;
				cis_rpc_result_free(&res);
			}
		}
	}
	return 0;
}

int mst_repl_scan(mst_master *m, uint64_t *copied, uint64_t *trimmed)
{
	char **paths;
	size_t np;
	struct scan s = {.m = m,
	                 .cancel = m->repl ? m->repl->cancel : NULL,
	                 .stopping = m->repl ? &m->repl->stopping : NULL};
	int err = mst_policies_with_replicas(m, &paths, &np);
	if (err)
		return err;
	err = mst_workers_ids(m->workers, &s.live, &s.nlive);
	for (size_t i = 0; !err && i < np && s.nlive && !(s.stopping && atomic_load(s.stopping));
	     i++) {
		cis_errmsg em = {{0}};
		s.root = paths[i];
		if (mst_jobs_loading(m, paths[i]))
			continue; /* the load places the copies; look again after it */
		int e = mst_walk(m, paths[i], false, scan_file, NULL, &s, &em);
		if (e && e != -ENOENT)
			cis_warn("replication scan failed", "path=%s: %s", paths[i],
			         cis_errmsg_or(&em, e));
	}
	free(s.live);
	mst_strv_free(paths, np);
	if (copied)
		*copied = s.copied;
	if (trimmed)
		*trimmed = s.trimmed;
	if (m->repl) {
		cis_counter_add(m->repl->c_copies, s.copied);
		cis_counter_add(m->repl->c_trims, s.trimmed);
		cis_counter_add(m->repl->c_copy_errors, s.errors);
	}
	if (s.copied || s.trimmed || s.errors)
		cis_info("replication pass", "copied=%llu trimmed=%llu errors=%llu",
		         (unsigned long long)s.copied, (unsigned long long)s.trimmed,
		         (unsigned long long)s.errors);
	return err;
}

static void *repl_main(void *arg)
{
	mst_repl *r = arg;
	mst_master *m = r->m;
	uint64_t hb = mst_workers_heartbeat_ms(m->workers);
	uint64_t grace = mst_workers_lost_ms(m->workers) + 2 * hb;
	uint64_t started = cis_mono_ms(), last_scan = 0, changed_at = 0, last_ttl = 0;
	uint64_t seen_version = mst_workers_version(m->workers);
	pthread_mutex_lock(&r->lock);
	while (!r->stop) {
		cis_cond_wait_ms(&r->cond, &r->lock, 500);
		if (r->stop)
			break;
		uint64_t now = cis_mono_ms();
		/* Not before the workers are back after a start: the frees of
		 * TTLs that passed meanwhile would reach none of them. */
		if (now - last_ttl >= 1000 && now - started >= grace) {
			uint64_t n;
			pthread_mutex_unlock(&r->lock);
			mst_jobs_expire(m, cis_wall_ns(), &n);
			pthread_mutex_lock(&r->lock);
			last_ttl = now;
		}
		uint64_t v = mst_workers_version(m->workers);
		if (v != seen_version) {
			/* membership moved: wait for block reports to settle */
			seen_version = v;
			changed_at = now;
			r->kicked = true;
		}
		bool due = r->kicked || now - last_scan >= r->interval_ms;
		if (!due || now - started < grace ||
		    (changed_at && now - changed_at < 2 * hb + 500))
			continue;
		r->kicked = false;
		pthread_mutex_unlock(&r->lock);
		mst_repl_scan(m, NULL, NULL);
		last_scan = cis_mono_ms();
		pthread_mutex_lock(&r->lock);
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

int mst_repl_start(mst_master *m, uint64_t interval_ms, mst_repl **out)
{
	mst_repl *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->m = m;
	r->interval_ms = interval_ms ? interval_ms : 30000;
	if (cis_rpc_cancel_new(&r->cancel)) {
		free(r);
		return -ENOMEM;
	}
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	r->c_copies = cis_metrics_counter(m->metrics, "cistern_master_replica_copies_total", NULL,
	                                  "Blocks copied to restore their replication target");
	r->c_copy_errors = cis_metrics_counter(m->metrics, "cistern_master_replica_errors_total",
	                                       NULL, "Replica copies or trims that failed");
	r->c_trims = cis_metrics_counter(m->metrics, "cistern_master_replica_trims_total", NULL,
	                                 "Surplus replicas freed");
	if (pthread_create(&r->th, NULL, repl_main, r)) {
		cis_rpc_cancel_free(r->cancel);
		pthread_mutex_destroy(&r->lock);
		pthread_cond_destroy(&r->cond);
		free(r);
		return -EAGAIN;
	}
	*out = r;
	return 0;
}

void mst_repl_stop(mst_repl *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	bool joined = r->stop;
	r->stop = true;
	atomic_store(&r->stopping, true);
	cis_rpc_cancel_fire(r->cancel);
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	if (!joined)
		pthread_join(r->th, NULL);
}

void mst_repl_free(mst_repl *r)
{
	if (!r)
		return;
	mst_repl_stop(r);
	cis_rpc_cancel_free(r->cancel);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->cond);
	free(r);
}

void mst_repl_kick(mst_master *m)
{
	mst_repl *r = m->repl;
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->kicked = true;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}
