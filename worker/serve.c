/* The worker's RPC handlers, for TCP and the Unix socket alike (OpenLocal
 * only on the Unix socket, where fds can be passed). Handlers run on the
 * RPC I/O threads and never wait on the store: misses become fetches whose
 * completion replies (fetch.c). */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cistern/log.h"
#include "cistern/msgtype.h"

#define UNPACK(type, desc)                                                                         \
	type *req = NULL;                                                                          \
	if (cis_msg_unpack(&desc, msg, hdr->msg_len, (ProtobufCMessage **)&req) < 0) {             \
		bad_request(w, conn, hdr, "malformed " #type);                                     \
		return;                                                                            \
	}

/* A batch over WRK_MAX_BATCH: refused whole (one of millions of ids held
 * an I/O thread, and an index transaction per block, for minutes). */
static bool batch_too_big(cis_rpc_conn *conn, const cis_frame_hdr *hdr, size_t n, const char *what)
{
	if (n <= WRK_MAX_BATCH)
		return false;
	cis_rpc_reply_error(conn, hdr, -CIS_E_TOOBIG, "%s of %zu blocks, limit %d", what, n,
	                    WRK_MAX_BATCH);
	return true;
}

static void bad_request(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const char *what)
{
	cis_counter_inc(w->m.bad_requests);
	cis_log_limited(CIS_LOG_WARN, "worker:bad-request", 30, "bad request",
	                "peer=%s what=\"%s\"", cis_rpc_conn_peer(conn), what);
	cis_rpc_reply_error(conn, hdr, -CIS_E_PROTO, "%s", what);
}

static void handle_read(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const uint8_t *msg)
{
	UNPACK(Cis__ReadBlockRequest, cis__read_block_request__descriptor);
	wrk_ref ref;
	cis_errmsg em = {{0}};
	int rc = wrk_ref_from_proto(&ref, req->block, &em);

	if (rc < 0) {
		cis_counter_inc(w->m.bad_requests);
		cis_rpc_reply_error(conn, hdr, rc, "%s", cis_errmsg_or(&em, rc));
	} else {
		wrk_fx_read(w->fx, conn, hdr, &ref, req->offset, req->length);
		wrk_ref_free(&ref);
	}
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* ---- OpenLocal ---- */

typedef struct open_ctx {
	wrk *w;
	cis_rpc_conn *conn;
	cis_frame_hdr hdr;
	cis_block_id id;
	uint64_t len; /* the reference's block length */
	uint32_t lease_ms;
	bool waited; /* the reply waited for the block's fetch */
} open_ctx;

static void open_reply(open_ctx *c)
{
	wrk *w = c->w;
	wrk_blk_info info;
	Cis__OpenLocalReply r = CIS__OPEN_LOCAL_REPLY__INIT;
	uint64_t lease_id, granted;
	struct stat st;
	int fd, rc;

	rc = wrk_bs_acquire(w->bs, c->id, true, &info);
	if (rc < 0) {
		/* Evicted between the fetch and now: the client reads remotely. */
		cis_rpc_reply_error(c->conn, &c->hdr, -EAGAIN,
		                    "block evicted before it was opened");
		return;
	}
	if (!info.verified) {
		wrk_bs_release(w->bs, info.blk);
		cis_rpc_reply_error(c->conn, &c->hdr, -EAGAIN, "block not verified yet");
		return;
	}
	if (info.len != c->len) {
		/* Cached for a reference with another file size (the id does
		 * not cover it): corrupt for this one. */
		wrk_bs_drop_held(w->bs, info.blk, "indexed length is not the reference's");
		wrk_bs_release(w->bs, info.blk);
		cis_rpc_reply_error(c->conn, &c->hdr, -EAGAIN,
		                    "cached block of the wrong length dropped: read it remotely");
		return;
	}
	fd = open(info.path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && wrk_short_of_resources(errno)) {
		rc = -errno;
		wrk_bs_release(w->bs, info.blk);
		cis_rpc_reply_error(c->conn, &c->hdr, rc, "cannot open the cached block now: %s",
		                    cis_strerror(rc));
		return;
	}
	if (fd < 0 || fstat(fd, &st) < 0 || (uint64_t)st.st_size != info.len) {
		rc = fd < 0 ? -errno : -ESTALE;
		if (fd >= 0)
			close(fd);
		wrk_bs_drop_held(w->bs, info.blk, "file missing or truncated");
		wrk_bs_release(w->bs, info.blk);
		cis_rpc_reply_error(c->conn, &c->hdr, rc, "cached block file unusable: %s",
		                    cis_strerror(rc));
		return;
	}
	rc = wrk_lease_add(w->leases, info.blk, c->lease_ms, cis_rpc_conn_peer_uid(c->conn),
	                   &lease_id, &granted);
	if (rc < 0) {
		close(fd);
		wrk_bs_release(w->bs, info.blk);
		cis_rpc_reply_error(c->conn, &c->hdr, rc, "cannot lease the block: %s",
		                    rc == -EBUSY ? "too many leases" : cis_strerror(rc));
		return;
	}
	r.lease_id = lease_id;
	r.length = info.len;
	r.lease_expiry_ms = granted;
	r.waited = c->waited;
	rc = cis_rpc_reply_fd(c->conn, &c->hdr, &r.base, fd);
	close(fd);
	if (rc < 0) {
		wrk_lease_release(w->leases, lease_id, cis_rpc_conn_peer_uid(c->conn));
		/* Nothing went out (no descriptor to spare, no memory): say so,
		 * or the client waits out its timeout. */
		if (rc != -CIS_E_CLOSED)
			cis_rpc_reply_error(c->conn, &c->hdr, rc, "cannot pass the block file: %s",
			                    cis_strerror(rc));
	} else
		cis_counter_add(w->m.served_local, info.len);
}

/* The fetch an OpenLocal miss started. Without wait nobody waits on it
 * (the client reads the block by ReadBlock meanwhile; the fetch logged its
 * failure); with wait (arg) the reply goes out now. */
static void open_fetch_done(void *arg, int rc, unsigned flags, const cis_errmsg *em)
{
	open_ctx *c = arg;
	(void)flags;
	if (!c)
		return;
	c->waited = true;
	if (rc == 0)
		open_reply(c);
	else
		cis_rpc_reply_error(c->conn, &c->hdr, rc, "%s", cis_errmsg_or(em, rc));
	cis_rpc_conn_unref(c->conn);
	free(c);
}

/* OpenLocal answers at once: the fd of a cached block, or -EAGAIN ("not
 * cached yet") after starting its fetch, so that a large block is not
 * waited for whole: the client reads it by ReadBlock, which streams the
 * first bytes as they arrive (joining the same fetch), and opens the block
 * locally on later reads once it is in. With wait (small blocks) the
 * reply comes when the fetch is done. */
static void handle_open_local(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                              const uint8_t *msg)
{
	if (!cis_rpc_conn_is_local(conn)) {
		cis_rpc_reply_error(conn, hdr, -EOPNOTSUPP, "open local: only on the unix socket");
		return;
	}
	UNPACK(Cis__OpenLocalRequest, cis__open_local_request__descriptor);
	wrk_ref ref;
	cis_errmsg em = {{0}};
	open_ctx c;
	int rc = wrk_ref_from_proto(&ref, req->block, &em);

	if (rc < 0) {
		cis_counter_inc(w->m.bad_requests);
		cis_rpc_reply_error(conn, hdr, rc, "%s", cis_errmsg_or(&em, rc));
		goto out_req;
	}
	c = (open_ctx){.w = w,
	               .conn = conn,
	               .hdr = *hdr,
	               .id = ref.id,
	               .len = wrk_ref_len(&ref),
	               .lease_ms = req->lease_ms};
	open_ctx *waiter = NULL;
	if (req->wait) {
		waiter = malloc(sizeof(*waiter));
		if (!waiter) {
			cis_rpc_reply_error(conn, hdr, -ENOMEM, "out of memory");
			goto out_ref;
		}
		*waiter = c;
		cis_rpc_conn_ref(conn);
	}
	if (wrk_fx_ensure(w->fx, &ref, WRK_PRIO_HIGH, NULL, 0, open_fetch_done, waiter)) {
		cis_counter_inc(w->m.hits);
		open_reply(&c);
		if (waiter) {
			cis_rpc_conn_unref(conn);
			free(waiter);
		}
	} else {
		cis_counter_inc(w->m.misses);
		if (!waiter)
			cis_rpc_reply_error(conn, hdr, -EAGAIN,
			                    "block not cached yet (fetching it): read it remotely");
	}
out_ref:
	wrk_ref_free(&ref);
out_req:
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void handle_lease(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const uint8_t *msg)
{
	UNPACK(Cis__LeaseRequest, cis__lease_request__descriptor);
	Cis__LeaseReply r = CIS__LEASE_REPLY__INIT;
	int rc;

	int uid = cis_rpc_conn_peer_uid(conn); /* -1 on TCP: owns no lease */
	bool renew = hdr->type == CIS_MSG_WORKER_RENEW_LOCAL;
	size_t more = req->n_more_lease_ids;
	uint64_t unknown[WRK_MAX_LEASE_BATCH + 1];

	if (more > WRK_MAX_LEASE_BATCH) {
		cis_counter_inc(w->m.bad_requests);
		cis_rpc_reply_error(conn, hdr, -EINVAL, "%zu leases in one request: at most %d",
		                    more + 1, WRK_MAX_LEASE_BATCH + 1);
		goto out;
	}
	for (size_t i = 0; i <= more; i++) {
		uint64_t id = i < more ? req->more_lease_ids[i] : req->lease_id;
		rc = renew ? wrk_lease_renew(w->leases, id, req->lease_ms, uid)
		           : wrk_lease_release(w->leases, id, uid);
		if (rc > 0)
			r.lease_expiry_ms = (uint64_t)rc;
		if (rc < 0 && more && renew)
			unknown[r.n_unknown_lease_ids++] = id;
	}
	r.unknown_lease_ids = unknown;
	if (more)
		rc = 0; /* a batch lists what it did not find */
	if (rc < 0)
		cis_rpc_reply_error(conn, hdr, rc, "lease %" PRIu64 ": unknown or expired",
		                    req->lease_id);
	else
		cis_rpc_reply(conn, hdr, &r.base, 0);
out:
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* ---- Prefetch, Load, Replicate ---- */

static void prefetch_done(void *arg, int rc, unsigned flags, const cis_errmsg *em)
{
	(void)arg;
	(void)rc;
	(void)flags;
	(void)em; /* fire and forget: the fetch logged its failure */
}

static void handle_prefetch(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                            const uint8_t *msg)
{
	UNPACK(Cis__PrefetchRequest, cis__prefetch_request__descriptor);
	Cis__PrefetchReply r = CIS__PREFETCH_REPLY__INIT;
	/* The cached blocks, read ahead (readahead.c) once the fetches are
	 * queued. */
	cis_block_id cached[WRK_READ_AHEAD_BLOCKS];
	size_t ncached = 0;

	if (batch_too_big(conn, hdr, req->n_blocks, "prefetch"))
		goto out;
	wrk_fx_batch_begin(w->fx);
	for (size_t i = 0; i < req->n_blocks; i++) {
		wrk_ref ref;

		if (wrk_ref_from_proto(&ref, req->blocks[i], NULL) < 0) {
			cis_counter_inc(w->m.bad_requests);
			continue;
		}
		if (!wrk_bs_has(w->bs, ref.id)) {
			wrk_fx_ensure(w->fx, &ref, WRK_PRIO_LOW, NULL, 0, prefetch_done, NULL);
			r.queued++;
		} else if (ncached < sizeof(cached) / sizeof(cached[0])) {
			cached[ncached++] = ref.id;
		}
		wrk_ref_free(&ref);
	}
	wrk_fx_batch_end(w->fx);
	cis_rpc_reply(conn, hdr, &r.base, 0);
	wrk_ra_queue(w->ra, cached, ncached);
out:
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

typedef struct load_ctx {
	wrk *w;
	cis_rpc_conn *conn;
	cis_frame_hdr hdr;
	uint16_t type;
	pthread_mutex_t mu;
	size_t n, left;
	uint64_t job_id;
	Cis__BlockResult *results;
	Cis__BlockResult **ptrs;
	uint8_t (*ids)[16];
	char **msgs;
	bool from_peer;
} load_ctx;

typedef struct load_item {
	load_ctx *c;
	size_t i;
} load_item;

static void load_finish(load_ctx *c)
{
	if (c->type == CIS_MSG_WORKER_REPLICATE) {
		Cis__ReplicateReply r = CIS__REPLICATE_REPLY__INIT;

		r.result = c->ptrs[0];
		r.from_peer = c->from_peer;
		if (c->results[0].code < 0)
			cis_rpc_reply_error(c->conn, &c->hdr, c->results[0].code, "replicate: %s",
			                    c->results[0].message);
		else
			cis_rpc_reply(c->conn, &c->hdr, &r.base, 0);
	} else {
		Cis__LoadReply r = CIS__LOAD_REPLY__INIT;

		r.job_id = c->job_id;
		r.n_results = c->n;
		r.results = c->ptrs;
		int rc = cis_rpc_reply(c->conn, &c->hdr, &r.base, 0);
		/* A reply that cannot go out (over the frame limit: many blocks
		 * with long error messages) still ends the request. */
		if (rc < 0 && rc != -CIS_E_CLOSED)
			cis_rpc_reply_error(c->conn, &c->hdr, rc,
			                    "load: the reply for %zu blocks cannot be sent: %s",
			                    c->n, cis_strerror(rc));
	}
	for (size_t i = 0; i < c->n; i++)
		free(c->msgs[i]);
	cis_rpc_conn_unref(c->conn);
	pthread_mutex_destroy(&c->mu);
	free(c->msgs);
	free(c->ids);
	free(c->ptrs);
	free(c->results);
	free(c);
}

static void load_set(load_ctx *c, size_t i, int rc, const char *why, bool was_cached)
{
	bool last;

	pthread_mutex_lock(&c->mu);
	c->results[i].code = rc;
	c->results[i].was_cached = was_cached;
	if (rc < 0 && why) {
		c->msgs[i] = strdup(why);
		if (c->msgs[i])
			c->results[i].message = c->msgs[i];
	}
	last = --c->left == 0;
	pthread_mutex_unlock(&c->mu);
	if (last)
		load_finish(c);
}

static void load_done(void *arg, int rc, unsigned flags, const cis_errmsg *em)
{
	load_item *it = arg;
	load_ctx *c = it->c;
	size_t i = it->i;

	if (flags & WRK_DONE_PEER)
		c->from_peer = true; /* one block per replicate: no race */
	free(it);
	load_set(c, i, rc, rc < 0 ? cis_errmsg_or(em, rc) : NULL, false);
}

static load_ctx *load_new(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr, size_t n)
{
	load_ctx *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->results = calloc(n ? n : 1, sizeof(*c->results));
	c->ptrs = calloc(n ? n : 1, sizeof(*c->ptrs));
	c->ids = calloc(n ? n : 1, sizeof(*c->ids));
	c->msgs = calloc(n ? n : 1, sizeof(*c->msgs));
	if (!c->results || !c->ptrs || !c->ids || !c->msgs) {
		free(c->results);
		free(c->ptrs);
		free(c->ids);
		free(c->msgs);
		free(c);
		return NULL;
	}
	c->w = w;
	c->conn = conn;
	cis_rpc_conn_ref(conn);
	c->hdr = *hdr;
	c->type = hdr->type;
	c->n = n;
	c->left = n + 1; /* one for the loop that issues them */
	pthread_mutex_init(&c->mu, NULL);
	for (size_t i = 0; i < n; i++) {
		cis__block_result__init(&c->results[i]);
		c->ptrs[i] = &c->results[i];
	}
	return c;
}

/* Start the fetch of one block of a load (or replicate) and arrange for
 * its result to be set. */
static void load_one(load_ctx *c, size_t i, const Cis__BlockRef *b, bool pin,
                     const Cis__WorkerInfo *src)
{
	wrk *w = c->w;
	wrk_ref ref;
	cis_errmsg em = {{0}};
	load_item *it;
	int rc;

	if (b && b->id.len == 16)
		memcpy(c->ids[i], b->id.data, 16);
	c->results[i].id.data = c->ids[i];
	c->results[i].id.len = 16;
	rc = wrk_ref_from_proto(&ref, b, &em);
	if (rc < 0) {
		load_set(c, i, rc, cis_errmsg_or(&em, rc), false);
		return;
	}
	c->results[i].length = wrk_ref_len(&ref);
	it = malloc(sizeof(*it));
	if (!it) {
		load_set(c, i, -ENOMEM, "out of memory", false);
	} else {
		it->c = c;
		it->i = i;
		if (wrk_fx_ensure(
		        w->fx, &ref,
		        c->type == CIS_MSG_WORKER_REPLICATE ? WRK_PRIO_HIGH : WRK_PRIO_LOW, src,
		        WRK_FETCH_COLD | (pin ? WRK_FETCH_PIN : 0u), load_done, it)) {
			free(it);
			load_set(c, i, 0, NULL, true);
		}
	}
	wrk_ref_free(&ref);
}

static void handle_load(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const uint8_t *msg)
{
	UNPACK(Cis__LoadRequest, cis__load_request__descriptor);
	load_ctx *c;

	if (batch_too_big(conn, hdr, req->n_blocks, "load"))
		goto out;
	c = load_new(w, conn, hdr, req->n_blocks);
	if (!c) {
		cis_rpc_reply_error(conn, hdr, -ENOMEM, "worker out of memory");
		goto out;
	}
	c->job_id = req->job_id;
	wrk_fx_batch_begin(w->fx);
	for (size_t i = 0; i < req->n_blocks; i++)
		load_one(c, i, req->blocks[i], req->pin, NULL);
	wrk_fx_batch_end(w->fx);
	pthread_mutex_lock(&c->mu);
	if (--c->left == 0) {
		pthread_mutex_unlock(&c->mu);
		load_finish(c);
	} else {
		pthread_mutex_unlock(&c->mu);
	}
out:
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void handle_replicate(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                             const uint8_t *msg)
{
	UNPACK(Cis__ReplicateRequest, cis__replicate_request__descriptor);
	load_ctx *c = load_new(w, conn, hdr, 1);

	if (!c) {
		cis_rpc_reply_error(conn, hdr, -ENOMEM, "worker out of memory");
		goto out;
	}
	/* A copy from ourselves would wait on its own fetch until the peer
	 * read times out: take it from the store. (Without a master every
	 * worker's id is 0: no telling.) */
	uint64_t me = atomic_load(&w->worker_id);
	bool self = req->source && me && req->source->id == me;
	load_one(c, 0, req->block, req->pin, self ? NULL : req->source);
	pthread_mutex_lock(&c->mu);
	if (--c->left == 0) {
		pthread_mutex_unlock(&c->mu);
		load_finish(c);
	} else {
		pthread_mutex_unlock(&c->mu);
	}
out:
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* ---- Free, Pin, Stat ---- */

static void handle_free(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const uint8_t *msg)
{
	UNPACK(Cis__FreeRequest, cis__free_request__descriptor);
	Cis__FreeReply r = CIS__FREE_REPLY__INIT;

	if (batch_too_big(conn, hdr, req->n_ids, "free"))
		goto out;
	for (size_t i = 0; i < req->n_ids; i++) {
		cis_block_id id;
		int rc;

		if (wrk_id_from_bytes(&req->ids[i], &id) < 0) {
			r.absent++;
			continue;
		}
		rc = wrk_bs_free(w->bs, id);
		if (rc == 0)
			r.freed++;
		else if (rc == -EBUSY)
			r.deferred++;
		else
			r.absent++;
	}
	cis_rpc_reply(conn, hdr, &r.base, 0);
out:
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void handle_touch(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const uint8_t *msg)
{
	UNPACK(Cis__TouchRequest, cis__touch_request__descriptor);
	Cis__TouchReply r = CIS__TOUCH_REPLY__INIT;

	if (batch_too_big(conn, hdr, req->n_ids, "touch"))
		goto out;
	for (size_t i = 0; i < req->n_ids; i++) {
		cis_block_id id;

		if (wrk_id_from_bytes(&req->ids[i], &id) < 0 || wrk_bs_touch(w->bs, id) < 0)
			r.absent++;
		else
			r.touched++;
	}
	cis_rpc_reply(conn, hdr, &r.base, 0);
out:
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void handle_pin(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const uint8_t *msg)
{
	UNPACK(Cis__PinRequest, cis__pin_request__descriptor);
	Cis__PinReply r = CIS__PIN_REPLY__INIT;

	if (batch_too_big(conn, hdr, req->n_ids, "pin"))
		goto out;
	for (size_t i = 0; i < req->n_ids; i++) {
		cis_block_id id;

		if (wrk_id_from_bytes(&req->ids[i], &id) < 0 || wrk_bs_pin(w->bs, id, req->pin) < 0)
			r.absent++;
		else
			r.changed++;
	}
	cis_rpc_reply(conn, hdr, &r.base, 0);
out:
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void handle_stat(wrk *w, cis_rpc_conn *conn, const cis_frame_hdr *hdr)
{
	Cis__StatReply r = CIS__STAT_REPLY__INIT;
	int n = wrk_bs_ndirs(w->bs);
	Cis__DirUsage u[WRK_MAX_DIRS], *up[WRK_MAX_DIRS];

	for (int i = 0; i < n; i++) {
		cis__dir_usage__init(&u[i]);
		wrk_bs_dir_usage(w->bs, i, &u[i]);
		up[i] = &u[i];
	}
	r.worker_id = atomic_load(&w->worker_id);
	r.n_dirs = (size_t)n;
	r.dirs = up;
	r.blocks = wrk_bs_nblocks(w->bs);
	r.leases = wrk_leases_count(w->leases);
	r.fetches_in_flight = wrk_fx_inflight(w->fx);
	cis_rpc_reply(conn, hdr, &r.base, 0);
}

void wrk_serve_handler(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const uint8_t *msg,
                       struct evbuffer *data)
{
	wrk *w = ctx;

	(void)data; /* no worker request carries raw data */
	unsigned t = (unsigned)hdr->type - CIS_MSG_WORKER_FIRST;
	cis_counter_inc(w->m.requests[t < WRK_REQUEST_TYPES ? t : WRK_REQUEST_TYPES]);
	switch (hdr->type) {
	case CIS_MSG_PING: {
		UNPACK(Cis__Ping, cis__ping__descriptor);
		cis_rpc_reply(conn, hdr, &req->base, 0);
		protobuf_c_message_free_unpacked(&req->base, NULL);
		break;
	}
	case CIS_MSG_WORKER_READ_BLOCK:
		handle_read(w, conn, hdr, msg);
		break;
	case CIS_MSG_WORKER_OPEN_LOCAL:
		handle_open_local(w, conn, hdr, msg);
		break;
	case CIS_MSG_WORKER_RELEASE_LOCAL:
	case CIS_MSG_WORKER_RENEW_LOCAL:
		handle_lease(w, conn, hdr, msg);
		break;
	case CIS_MSG_WORKER_PREFETCH:
		handle_prefetch(w, conn, hdr, msg);
		break;
	case CIS_MSG_WORKER_LOAD:
		handle_load(w, conn, hdr, msg);
		break;
	case CIS_MSG_WORKER_REPLICATE:
		handle_replicate(w, conn, hdr, msg);
		break;
	case CIS_MSG_WORKER_FREE:
		handle_free(w, conn, hdr, msg);
		break;
	case CIS_MSG_WORKER_PIN:
		handle_pin(w, conn, hdr, msg);
		break;
	case CIS_MSG_WORKER_STAT:
		handle_stat(w, conn, hdr);
		break;
	case CIS_MSG_WORKER_TOUCH:
		handle_touch(w, conn, hdr, msg);
		break;
	default:
		bad_request(w, conn, hdr, "unknown message type");
		break;
	}
}
