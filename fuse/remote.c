/* Worker RPC clients, one per worker and transport, created on first use
 * and kept: a client re-connects by itself after a break, and requests from
 * many threads are pipelined on it. A worker that re-registers on another
 * address gets a new client; the old one is kept until exit because other
 * threads may still be using it (rare, and bounded by membership churn). */
#include "client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/frame.h"
#include "cistern/log.h"
#include "cistern/msgtype.h"

typedef struct rclient {
	struct rclient *next;
	uint64_t id;
	bool unix_sock;
	char addr[400]; /* host:port or socket path it was made for */
	bool stale;     /* replaced by a client for a newer address */
	cis_rpc_client *cl;
} rclient;

struct fcl_remote {
	pthread_mutex_t lock;
	rclient *list;
	bool closed; /* fcl_remote_close: every client fails its calls */
};

int fcl_remote_new(fcl_remote **out)
{
	fcl_remote *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	pthread_mutex_init(&r->lock, NULL);
	*out = r;
	return 0;
}

void fcl_remote_free(fcl_remote *r)
{
	if (!r)
		return;
	rclient *rc = r->list;
	while (rc) {
		rclient *next = rc->next;
		cis_rpc_client_free(rc->cl);
		free(rc);
		rc = next;
	}
	pthread_mutex_destroy(&r->lock);
	free(r);
}

void fcl_remote_close(fcl_remote *r)
{
	pthread_mutex_lock(&r->lock);
	r->closed = true;
	for (rclient *rc = r->list; rc; rc = rc->next)
		cis_rpc_client_close(rc->cl);
	pthread_mutex_unlock(&r->lock);
}

cis_rpc_client *fcl_remote_client(fcl *c, const fcl_worker *w, bool unix_sock)
{
	fcl_remote *r = c->remote;
	char addr[400];
	if (unix_sock)
		snprintf(addr, sizeof(addr), "%s", w->unix_path);
	else
		snprintf(addr, sizeof(addr), "%s:%u", w->host, w->port);
	cis_rpc_client *cl = NULL;
	pthread_mutex_lock(&r->lock);
	for (rclient *rc = r->list; rc; rc = rc->next) {
		if (rc->stale || rc->id != w->id || rc->unix_sock != unix_sock)
			continue;
		if (strcmp(rc->addr, addr) == 0) {
			cl = rc->cl;
			goto out_unlock;
		}
		rc->stale = true;
	}
	rclient *rc = calloc(1, sizeof(*rc));
	if (!rc)
		goto out_unlock;
	cis_rpc_client_opts o = {
	    .host = unix_sock ? NULL : w->host,
	    .port = unix_sock ? 0 : w->port,
	    .unix_path = unix_sock ? w->unix_path : NULL,
	    .name = "cistern-fuse",
	    .connect_timeout_ms = 3000,
	    .call_timeout_ms = c->opts->worker_timeout_ms,
	};
	if (cis_rpc_client_new(&o, &rc->cl)) {
		free(rc);
		goto out_unlock;
	}
	rc->id = w->id;
	rc->unix_sock = unix_sock;
	snprintf(rc->addr, sizeof(rc->addr), "%s", addr);
	rc->next = r->list;
	r->list = rc;
	cl = rc->cl;
	if (r->closed)
		cis_rpc_client_close(cl);
out_unlock:
	pthread_mutex_unlock(&r->lock);
	return cl;
}

typedef struct rd_state {
	uint64_t off; /* block offset the request starts at */
	size_t len;   /* bytes wanted */
	char *buf;
	size_t got; /* contiguous bytes received */
	bool cached;
	bool seen;
	int err;
} rd_state;

static int on_frame(void *arg, const cis_frame_hdr *hdr, const uint8_t *msg, const uint8_t *data)
{
	rd_state *st = arg;
	if (hdr->flags & CIS_FRAME_ERROR)
		return 0; /* cis_rpc_call_stream returns its code */
	Cis__ReadBlockReply *rep = NULL;
	if (cis_msg_unpack(&cis__read_block_reply__descriptor, msg, hdr->msg_len,
	                   (ProtobufCMessage **)&rep))
		return st->err = -CIS_E_PROTO;
	int rc = 0;
	if (!st->seen) {
		st->cached = rep->cached;
		st->seen = true;
	}
	/* In order and without gaps, as worker.proto promises: check it. */
	if (hdr->data_len &&
	    (rep->offset != st->off + st->got || st->got + hdr->data_len > st->len))
		rc = st->err = -CIS_E_PROTO;
	else if (hdr->data_len) {
		memcpy(st->buf + st->got, data, hdr->data_len);
		st->got += hdr->data_len;
	}
	cis__read_block_reply__free_unpacked(rep, NULL);
	return rc;
}

int fcl_remote_read(fcl *c, const fcl_worker *w, const Cis__BlockRef *ref, uint64_t off, size_t len,
                    char *buf, bool *cached, cis_errmsg *em)
{
	/* The worker on this host over its Unix socket: no TCP stack. */
	cis_rpc_client *cl = fcl_remote_client(c, w, w->local);
	if (!cl)
		return cis_fail(em, -ENOMEM, "worker %s:%u: no client", w->host, w->port);
	Cis__ReadBlockRequest req = CIS__READ_BLOCK_REQUEST__INIT;
	req.block = (Cis__BlockRef *)ref;
	req.offset = off;
	req.length = len;
	rd_state st = {.off = off, .len = len, .buf = buf};
	int rc = cis_rpc_call_stream(cl, CIS_MSG_WORKER_READ_BLOCK, &req.base, on_frame, &st,
	                             c->opts->worker_timeout_ms, em);
	if (rc == 0 && st.err)
		rc = st.err;
	if (rc == -CIS_E_PROTO && em && !em->text[0])
		cis_fail(em, rc, "worker %s:%u: malformed read reply", w->host, w->port);
	if (rc == 0 && st.got != len)
		rc = cis_fail(em, -CIS_E_PROTO, "worker %s:%u: short block read: %zu of %zu bytes",
		              w->host, w->port, st.got, len);
	*cached = st.cached;
	return rc;
}

int fcl_remote_notify(fcl *c, const fcl_worker *w, uint16_t type, const ProtobufCMessage *msg,
                      cis_errmsg *em)
{
	cis_rpc_client *cl = fcl_remote_client(c, w, w->local);
	if (!cl)
		return -ENOMEM;
	cis_rpc_result res;
	memset(&res, 0, sizeof(res));
	res.fd = -1;
	int rc = cis_rpc_call(cl, type, msg, NULL, 0, &res, 5000, em);
	if (rc == 0)
		cis_rpc_result_free(&res);
	return rc;
}

int fcl_remote_prefetch(fcl *c, const fcl_worker *w, Cis__BlockRef **refs, size_t n, cis_errmsg *em)
{
	Cis__PrefetchRequest req = CIS__PREFETCH_REQUEST__INIT;
	req.blocks = refs;
	req.n_blocks = n;
	return fcl_remote_notify(c, w, CIS_MSG_WORKER_PREFETCH, &req.base, em);
}
