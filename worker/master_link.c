/* The worker's side of the master: registration, heartbeats with
 * incremental block reports, full reports, and the mount cache.
 *
 * One thread registers (with the id persisted in the state dir), sends a
 * full block report, then a heartbeat every interval carrying the blocks
 * added and removed since the last one. A master that does not know us
 * (it restarted) answers -ENOENT: we register again and send a full
 * report; the queued increments are dropped since the full report covers
 * them. Without --master the worker runs alone with --mount mounts only. */
#include "worker.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/config.h"
#include "cistern/log.h"
#include "cistern/msgtype.h"
#include "cistern/time.h"
#include "cistern/proto/master.pb-c.h"

#define REPORT_PAGE 8192

typedef struct mount_ent {
	struct mount_ent *next;
	uint64_t id;
	cis_ufs *ufs;
	uint64_t block_size; /* from the master; 0 for a --mount mount */
} mount_ent;

struct wrk_link {
	wrk *w;
	cis_rpc_client *cl;
	pthread_t thread;
	bool has_thread;
	pthread_mutex_t mu; /* mounts and deltas */
	pthread_cond_t cv;
	mount_ent *mounts;
	wrk_deltas deltas;
	bool want_full;
	atomic_bool registered;
	bool stop;
	uint32_t interval_ms;
};

void wrk_link_note(wrk_link *l, cis_block_id id, bool added)
{
	pthread_mutex_lock(&l->mu);
	wrk_deltas_note(&l->deltas, id, added);
	pthread_mutex_unlock(&l->mu);
}

bool wrk_link_ready(wrk_link *l)
{
	return !l->cl || atomic_load(&l->registered);
}

static int add_mount(wrk_link *l, uint64_t id, cis_ufs *u, uint64_t block_size)
{
	mount_ent *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->id = id;
	m->ufs = u;
	m->block_size = block_size;
	m->next = l->mounts;
	l->mounts = m;
	return 0;
}

int wrk_link_ufs(wrk_link *l, uint64_t mount_id, cis_ufs **out, uint64_t *block_size,
                 cis_errmsg *em)
{
	Cis__GetMountRequest req = CIS__GET_MOUNT_REQUEST__INIT;
	Cis__GetMountReply *rep = NULL;
	cis_rpc_result res;
	cis_kvlist opts = CIS_KVLIST_INIT;
	cis_ufs *u = NULL;
	uint64_t bs;
	int rc;

	pthread_mutex_lock(&l->mu);
	for (mount_ent *m = l->mounts; m; m = m->next)
		if (m->id == mount_id) {
			*out = m->ufs;
			if (block_size)
				*block_size = m->block_size;
			pthread_mutex_unlock(&l->mu);
			return 0;
		}
	pthread_mutex_unlock(&l->mu);
	if (!l->cl)
		return cis_fail(em, -ENOENT, "mount %" PRIu64 ": unknown (no master)", mount_id);

	req.mount_id = mount_id;
	memset(&res, 0, sizeof(res));
	cis_errmsg why = {{0}};
	rc = cis_rpc_call(l->cl, CIS_MSG_MASTER_GET_MOUNT, &req.base, NULL, 0, &res, 10000, &why);
	if (rc < 0) /* why apart: em formatted from its own text came out garbled */
		return cis_fail(em, rc, "mount %" PRIu64 ": get mount from master: %s", mount_id,
		                cis_errmsg_or(&why, rc));
	rc = cis_msg_unpack(&cis__get_mount_reply__descriptor, res.msg, res.msg_len,
	                    (ProtobufCMessage **)&rep);
	cis_rpc_result_free(&res);
	if (rc < 0 || !rep->mount || !rep->mount->uri || !rep->mount->block_size) {
		if (rep)
			protobuf_c_message_free_unpacked(&rep->base, NULL);
		return cis_fail(em, -CIS_E_PROTO, "mount %" PRIu64 ": malformed reply from master",
		                mount_id);
	}
	bs = rep->mount->block_size;
	for (size_t i = 0; i < rep->mount->n_options; i++)
		cis_kvlist_set(&opts, rep->mount->options[i]->key, rep->mount->options[i]->value);
	rc = cis_ufs_open(rep->mount->uri, &opts, &u, em);
	cis_kvlist_free(&opts);
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&l->mu);
	for (mount_ent *m = l->mounts; m; m = m->next)
		if (m->id == mount_id) { /* another thread won the race */
			*out = m->ufs;
			if (block_size)
				*block_size = m->block_size;
			pthread_mutex_unlock(&l->mu);
			cis_ufs_close(u);
			return 0;
		}
	rc = add_mount(l, mount_id, u, bs);
	pthread_mutex_unlock(&l->mu);
	if (rc < 0) {
		cis_ufs_close(u);
		return cis_fail(em, rc, "out of memory");
	}
	*out = u;
	if (block_size)
		*block_size = bs;
	return 0;
}

int wrk_link_check_ref(wrk_link *l, const wrk_ref *ref, cis_ufs **out, cis_errmsg *em)
{
	uint64_t bs = 0;
	int rc = wrk_link_ufs(l, ref->mount_id, out, &bs, em);

	if (rc < 0)
		return rc;
	/* A reference with another block size names another byte range
	 * than the mount's block of that index: refuse to cache it. */
	if (bs && ref->block_size != bs)
		return cis_fail(em, -EINVAL,
		                "%s: block size %" PRIu64 " is not mount %" PRIu64 "'s %" PRIu64,
		                ref->key, ref->block_size, ref->mount_id, bs);
	return 0;
}

/* ---- the master conversation ---- */

static void fill_dirs(wrk *w, Cis__CacheDir *d, Cis__CacheDir **dp, Cis__DirUsage *u, int n,
                      uint64_t *cap, uint64_t *used)
{
	*cap = *used = 0;
	for (int i = 0; i < n; i++) {
		cis__dir_usage__init(&u[i]);
		wrk_bs_dir_usage(w->bs, i, &u[i]);
		cis__cache_dir__init(&d[i]);
		d[i].path = u[i].path;
		d[i].capacity = u[i].capacity;
		d[i].used = u[i].used;
		d[i].tier = "ssd";
		dp[i] = &d[i];
		*cap += u[i].capacity;
		*used += u[i].used;
	}
}

static int do_register(wrk_link *l, cis_errmsg *em)
{
	wrk *w = l->w;
	Cis__RegisterWorkerRequest req = CIS__REGISTER_WORKER_REQUEST__INIT;
	Cis__RegisterWorkerReply *rep = NULL;
	Cis__WorkerInfo wi = CIS__WORKER_INFO__INIT;
	int n = wrk_bs_ndirs(w->bs);
	Cis__CacheDir d[WRK_MAX_DIRS], *dp[WRK_MAX_DIRS];
	Cis__DirUsage u[WRK_MAX_DIRS];
	cis_rpc_result res;
	int rc;

	fill_dirs(w, d, dp, u, n, &wi.capacity, &wi.used);
	wi.id = atomic_load(&w->worker_id);
	wi.host = (char *)w->advertise_host;
	wi.rpc_port = w->rpc_port;
	wi.http_port = w->http_port;
	wi.unix_socket = (char *)w->socket_path;
	wi.hostname = w->hostname;
	wi.boot_id = w->boot_id;
	req.worker = &wi;
	req.n_dirs = (size_t)n;
	req.dirs = dp;
	memset(&res, 0, sizeof(res));
	rc = cis_rpc_call(l->cl, CIS_MSG_MASTER_REGISTER_WORKER, &req.base, NULL, 0, &res, 10000,
	                  em);
	if (rc < 0)
		return rc;
	rc = cis_msg_unpack(&cis__register_worker_reply__descriptor, res.msg, res.msg_len,
	                    (ProtobufCMessage **)&rep);
	cis_rpc_result_free(&res);
	if (rc < 0)
		return cis_fail(em, rc, "malformed register reply");
	if (rep->worker_id == 0) {
		protobuf_c_message_free_unpacked(&rep->base, NULL);
		return cis_fail(em, -CIS_E_PROTO, "master gave worker id 0");
	}
	if (rep->worker_id != wi.id) {
		rc = wrk_bs_save_worker_id(w->bs, rep->worker_id);
		if (rc < 0)
			cis_error("cannot persist worker id", "id=%" PRIu64, rep->worker_id);
		atomic_store(&w->worker_id, rep->worker_id);
	}
	l->interval_ms = rep->heartbeat_interval_ms ? rep->heartbeat_interval_ms : 1000;
	if (l->interval_ms > 10000)
		l->interval_ms = 10000;
	cis_info("registered with master", "worker_id=%" PRIu64 " master=%s", rep->worker_id,
	         w->master);
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	return 0;
}

static int send_full_report(wrk_link *l, cis_errmsg *em)
{
	wrk *w = l->w;
	cis_block_id *ids;
	size_t n, off = 0;
	ProtobufCBinaryData *bin;
	uint8_t(*raw)[16];
	int rc;

	/* Increments up to now are covered by the report. */
	pthread_mutex_lock(&l->mu);
	wrk_deltas_free(&l->deltas);
	pthread_mutex_unlock(&l->mu);
	rc = wrk_bs_list(w->bs, &ids, &n);
	if (rc < 0)
		return cis_fail(em, rc, "listing blocks: %s", cis_strerror(rc));
	bin = calloc(REPORT_PAGE, sizeof(*bin));
	raw = calloc(REPORT_PAGE, sizeof(*raw));
	if (!bin || !raw) {
		rc = cis_fail(em, -ENOMEM, "out of memory");
		goto out;
	}
	do {
		Cis__BlockReportRequest req = CIS__BLOCK_REPORT_REQUEST__INIT;
		cis_rpc_result res;
		size_t k = n - off < REPORT_PAGE ? n - off : REPORT_PAGE;

		for (size_t i = 0; i < k; i++) {
			cis_block_id_to_bytes(ids[off + i], raw[i]);
			bin[i].data = raw[i];
			bin[i].len = 16;
		}
		req.worker_id = atomic_load(&w->worker_id);
		req.first = off == 0;
		req.last = off + k == n;
		req.n_blocks = k;
		req.blocks = bin;
		memset(&res, 0, sizeof(res));
		rc = cis_rpc_call(l->cl, CIS_MSG_MASTER_BLOCK_REPORT, &req.base, NULL, 0, &res,
		                  30000, em);
		if (rc < 0)
			goto out;
		cis_rpc_result_free(&res);
		off += k;
	} while (off < n);
	cis_info("full block report sent", "blocks=%zu", n);
out:
	free(bin);
	free(raw);
	free(ids);
	return rc;
}

static void run_commands(wrk_link *l, const Cis__HeartbeatReply *rep)
{
	for (size_t i = 0; i < rep->n_commands; i++) {
		switch ((int)rep->commands[i]->type) {
		case CIS__COMMAND_TYPE__CMD_BLOCK_REPORT:
			l->want_full = true;
			break;
		default:
			break; /* kinds this worker does not know yet */
		}
	}
}

static int do_heartbeat(wrk_link *l, cis_errmsg *em)
{
	wrk *w = l->w;
	Cis__HeartbeatRequest req = CIS__HEARTBEAT_REQUEST__INIT;
	Cis__HeartbeatReply *rep = NULL;
	int n = wrk_bs_ndirs(w->bs);
	Cis__CacheDir d[WRK_MAX_DIRS], *dp[WRK_MAX_DIRS];
	Cis__DirUsage u[WRK_MAX_DIRS];
	wrk_deltas dl;
	size_t nd, na = 0, nr = 0;
	ProtobufCBinaryData *add = NULL, *rem = NULL;
	uint8_t(*raw)[16] = NULL;
	cis_rpc_result res;
	int rc;

	pthread_mutex_lock(&l->mu);
	wrk_deltas_take(&l->deltas, &dl);
	pthread_mutex_unlock(&l->mu);
	if (dl.overflow)
		l->want_full = true;
	wrk_deltas_collapse(&dl);
	wrk_delta *ds = dl.v;
	nd = dl.n;

	fill_dirs(w, d, dp, u, n, &req.capacity, &req.used);
	req.worker_id = atomic_load(&w->worker_id);
	req.n_dirs = (size_t)n;
	req.dirs = dp;
	if (nd) {
		add = calloc(nd, sizeof(*add));
		rem = calloc(nd, sizeof(*rem));
		raw = calloc(nd, sizeof(*raw));
		if (!add || !rem || !raw) {
			l->want_full = true;
			nd = 0;
		}
	}
	for (size_t i = 0; i < nd; i++) {
		cis_block_id_to_bytes(ds[i].id, raw[i]);
		if (ds[i].added) {
			add[na].data = raw[i];
			add[na++].len = 16;
		} else {
			rem[nr].data = raw[i];
			rem[nr++].len = 16;
		}
	}
	req.n_added = na;
	req.added = add;
	req.n_removed = nr;
	req.removed = rem;
	memset(&res, 0, sizeof(res));
	rc = cis_rpc_call(l->cl, CIS_MSG_MASTER_HEARTBEAT, &req.base, NULL, 0, &res, 10000, em);
	if (rc == 0) {
		if (cis_msg_unpack(&cis__heartbeat_reply__descriptor, res.msg, res.msg_len,
		                   (ProtobufCMessage **)&rep) == 0) {
			run_commands(l, rep);
			protobuf_c_message_free_unpacked(&rep->base, NULL);
		}
		cis_rpc_result_free(&res);
	} else if (rc != -ENOENT) {
		/* Not delivered: the full report after the next heartbeat that
		 * goes through says it all (putting these back would only grow
		 * a heartbeat that may be failing for its size). */
		l->want_full = true;
	}
	wrk_deltas_free(&dl);
	free(add);
	free(rem);
	free(raw);
	return rc;
}

static void *link_thread(void *arg)
{
	wrk_link *l = arg;
	wrk *w = l->w;

	while (!atomic_load(&w->stopping)) {
		cis_errmsg em = {{0}};
		uint64_t wait = l->interval_ms;
		int rc;

		if (!atomic_load(&l->registered)) {
			rc = do_register(l, &em);
			if (rc == 0)
				rc = send_full_report(l, &em);
			if (rc == 0) {
				atomic_store(&l->registered, true);
				l->want_full = false;
			} else {
				cis_log_limited(CIS_LOG_WARN, "worker:register", 30,
				                "cannot register with master, retrying",
				                "master=%s err=\"%s\"", w->master,
				                cis_errmsg_or(&em, rc));
				wait = 1000;
			}
		} else {
			rc = do_heartbeat(l, &em);
			if (rc == -ENOENT) {
				cis_warn("master does not know this worker, registering again",
				         "master=%s", w->master);
				atomic_store(&l->registered, false);
				continue;
			}
			if (rc < 0)
				cis_log_limited(CIS_LOG_WARN, "worker:heartbeat", 30,
				                "heartbeat failed", "master=%s err=\"%s\"",
				                w->master, cis_errmsg_or(&em, rc));
			if (rc == 0 && l->want_full) {
				if (send_full_report(l, &em) == 0)
					l->want_full = false;
			}
		}
		pthread_mutex_lock(&l->mu);
		if (!l->stop)
			cis_cond_wait_ms(&l->cv, &l->mu, wait);
		pthread_mutex_unlock(&l->mu);
		if (l->stop)
			break;
	}
	return NULL;
}

int wrk_link_new(wrk *w, const wrk_static_mount *mounts, int nmounts, wrk_link **out,
                 cis_errmsg *em)
{
	wrk_link *l = calloc(1, sizeof(*l));
	int rc;

	if (!l)
		return cis_fail(em, -ENOMEM, "out of memory");
	l->w = w;
	l->interval_ms = 1000;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	for (int i = 0; i < nmounts; i++) {
		cis_ufs *u;

		rc = cis_ufs_open(mounts[i].uri, NULL, &u, em);
		if (rc < 0)
			goto out_free;
		if (add_mount(l, mounts[i].id, u, 0) < 0) {
			cis_ufs_close(u);
			rc = cis_fail(em, -ENOMEM, "out of memory");
			goto out_free;
		}
	}
	*out = l;
	w->link = l;
	if (w->master) {
		char host[256];
		uint16_t port;
		cis_rpc_client_opts o = {0};

		rc = cis_parse_hostport(w->master, host, sizeof(host), &port);
		if (rc < 0) {
			rc = cis_fail(em, -CIS_E_CONFIG, "--master %s: want HOST:PORT", w->master);
			goto out_free;
		}
		o.host = host;
		o.port = port;
		o.name = "cistern-worker";
		o.connect_timeout_ms = 2000;
		o.call_timeout_ms = 10000;
		rc = cis_rpc_client_new(&o, &l->cl);
		if (rc < 0) {
			rc = cis_fail(em, rc, "master client: %s", cis_strerror(rc));
			goto out_free;
		}
	}
	return 0;

out_free:
	w->link = NULL;
	*out = NULL;
	wrk_link_stop(l);
	return rc;
}

int wrk_link_start(wrk_link *l, cis_errmsg *em)
{
	if (!l->cl)
		return 0; /* no master */
	if (pthread_create(&l->thread, NULL, link_thread, l) != 0)
		return cis_fail(em, -EAGAIN, "cannot start the master link thread");
	l->has_thread = true;
	return 0;
}

void wrk_link_stop(wrk_link *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	l->stop = true;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	/* A call to a master that does not answer (a heartbeat, a page of a
	 * block report) ends now, not at its 10 or 30 s timeout. */
	if (l->cl)
		cis_rpc_client_close(l->cl);
	if (l->has_thread)
		pthread_join(l->thread, NULL);
	if (l->cl)
		cis_rpc_client_free(l->cl);
	while (l->mounts) {
		mount_ent *m = l->mounts;

		l->mounts = m->next;
		cis_ufs_close(m->ufs);
		free(m);
	}
	wrk_deltas_free(&l->deltas);
	pthread_mutex_destroy(&l->mu);
	free(l);
}
