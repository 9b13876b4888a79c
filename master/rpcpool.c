/* The master's RPC handler, and the threads that answer the requests that
 * may wait on a store.
 *
 * The RPC server calls its handler on the connection's I/O thread, and each
 * I/O thread serves many connections. A lookup, readdir or open can list a
 * directory from its store first (a million-object prefix: a thousand
 * pages, many seconds) or ask the store for an object: done on the I/O
 * thread, every connection it serves would wait that long, the workers'
 * heartbeats among them, until the master declared them lost. So each
 * request is first answered on the I/O thread with store waits refused
 * (mst_rpc_dispatch_quick); one that would wait (a lookup or readdir in a
 * directory due for a listing, an open asking the store about a changed
 * file) goes to this pool's threads instead, which reply when done
 * (replies are thread-safe and matched by request id). Everything else,
 * most lookups included, is answered at once. With the queue full (in
 * requests or in bytes), a request is answered on the I/O thread: the
 * client waits, and the connection reads no more meanwhile. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/frame.h"
#include "cistern/rpc.h"
#include "master.h"

#define POOL_QUEUE_MAX   65536       /* requests waiting for a thread */
#define POOL_QUEUE_BYTES (64u << 20) /* and their bytes (a frame may hold 4 MiB) */

typedef struct pool_item {
	struct pool_item *next;
	cis_rpc_conn *conn; /* a reference */
	cis_frame_hdr hdr;
	uint8_t msg[]; /* hdr.msg_len bytes */
} pool_item;

struct mst_rpcpool {
	mst_master *m;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pool_item *head, *tail;
	size_t n, bytes;
	bool stop;
	int nthreads;
	pthread_t *th;
};

static void send_reply(cis_rpc_conn *conn, const cis_frame_hdr *hdr, mst_reply *r)
{
	int rc;

	if (r->code) {
		cis_rpc_reply_error(conn, hdr, r->code, "%s", r->em.text);
	} else if ((rc = cis_rpc_reply(conn, hdr, r->msg, 0)) < 0 && rc != -CIS_E_CLOSED) {
		/* Not sent (over the frame limit, out of memory): the caller
		 * must not wait out its timeout, nor the request stay counted
		 * as in flight on the connection. */
		cis_rpc_reply_error(conn, hdr, rc, "master: cannot send the reply: %s",
		                    cis_strerror(rc));
	}
	mst_reply_clear(r);
}

static void answer(mst_master *m, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const uint8_t *msg)
{
	mst_reply r;
	mst_rpc_dispatch(m, hdr->type, msg, hdr->msg_len, &r);
	send_reply(conn, hdr, &r);
}

static void *pool_main(void *arg)
{
	mst_rpcpool *p = arg;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && !p->head)
			pthread_cond_wait(&p->cv, &p->mu);
		if (p->stop)
			break;
		pool_item *it = p->head;
		p->head = it->next;
		if (!p->head)
			p->tail = NULL;
		p->n--;
		p->bytes -= it->hdr.msg_len;
		pthread_mutex_unlock(&p->mu);
		if (cis_rpc_conn_open(it->conn))
			answer(p->m, it->conn, &it->hdr, it->msg);
		cis_rpc_conn_unref(it->conn);
		free(it);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int mst_rpcpool_new(mst_master *m, int threads, mst_rpcpool **out)
{
	mst_rpcpool *p = calloc(1, sizeof(*p));
	*out = NULL;
	if (!p || !(p->th = calloc((size_t)(threads > 0 ? threads : 1), sizeof(*p->th)))) {
		free(p);
		return -ENOMEM;
	}
	p->m = m;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	for (; p->nthreads < threads; p->nthreads++)
		if (pthread_create(&p->th[p->nthreads], NULL, pool_main, p)) {
			mst_rpcpool_free(p);
			return -EAGAIN;
		}
	*out = p;
	return 0;
}

void mst_rpcpool_free(mst_rpcpool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->th[i], NULL);
	while (p->head) { /* the server has stopped: nobody waits for these */
		pool_item *it = p->head;
		p->head = it->next;
		cis_rpc_conn_unref(it->conn);
		free(it);
	}
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->th);
	free(p);
}

void mst_rpc_handler(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const uint8_t *msg,
                     struct evbuffer *data)
{
	mst_rpcpool *p = ctx;
	mst_reply r;
	(void)data; /* no master request carries raw data; the server drops it */
	if (p->nthreads > 0 && mst_rpc_dispatch_quick(p->m, hdr->type, msg, hdr->msg_len, &r)) {
		send_reply(conn, hdr, &r);
		return;
	}
	if (p->nthreads > 0) {
		pool_item *it = malloc(sizeof(*it) + hdr->msg_len);
		pthread_mutex_lock(&p->mu);
		/* A count alone would let requests padded to the frame limit
		 * hold gigabytes here while the threads wait on a store. */
		bool queued = it && !p->stop && p->n < POOL_QUEUE_MAX &&
		              p->bytes + hdr->msg_len <= POOL_QUEUE_BYTES;
		if (queued) {
			it->next = NULL;
			it->conn = conn;
			it->hdr = *hdr;
			if (hdr->msg_len) /* msg is NULL for an empty message */
				memcpy(it->msg, msg, hdr->msg_len);
			cis_rpc_conn_ref(conn);
			if (p->tail)
				p->tail->next = it;
			else
				p->head = it;
			p->tail = it;
			p->n++;
			p->bytes += hdr->msg_len;
			pthread_cond_signal(&p->cv);
		}
		pthread_mutex_unlock(&p->mu);
		if (queued)
			return;
		free(it);
	}
	answer(p->m, conn, hdr, msg);
}
