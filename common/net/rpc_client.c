/* The RPC client (rpc.h).
 *
 * One blocking socket per client object, shared by every calling thread.
 * Callers write whole frames under wlock; a dedicated reader thread per
 * connection reads frames and queues each on the waiting call with the
 * same request id (unknown ids, such as replies to calls that timed out,
 * are discarded). The caller itself runs a stream's callback, so a slow
 * consumer never stalls the reader for the other calls.
 *
 * Locks: wlock (writing, and replacing the fd) before lock (state, the
 * pending calls). The reader never closes the fd: on EOF or an error it
 * marks the connection broken, fails every pending call with
 * -CIS_E_CLOSED and exits; the next call joins it, closes the fd under
 * wlock and reconnects (failed connects back off, doubling from 100 ms to
 * 1 s; calls within the back-off fail fast with the last error, which
 * suits failover to another server).
 *
 * Timeouts: a call that times out is forgotten (its late reply will be
 * discarded); the connection is kept unless it looks dead, meaning that
 * nothing at all arrived from the server during the whole timeout while
 * the call was waiting, and no other call on it is still within its own
 * deadline. Then it is shut down so that the next call reconnects. A slow
 * call (a server that takes its time over one request) thus costs only
 * that call: the others keep waiting, and if the connection is in fact
 * dead the last of them to time out shuts it down. */
#include "cistern/rpc.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cistern/msgtype.h"
#include "cistern/proto/common.pb-c.h"
#include "cistern/time.h"

#define DEFAULT_CONNECT_MS 3000
#define DEFAULT_CALL_MS    30000
#define BACKOFF_MIN_MS     100
#define BACKOFF_MAX_MS     1000
#define MAX_FDS_QUEUED     64

struct rframe {
	struct rframe *next;
	cis_frame_hdr hdr;
	uint8_t *msg;
	uint8_t *data;
	int fd;
};

struct call {
	struct call *next;
	uint64_t id;
	uint64_t deadline_ms; /* monotonic; when its caller gives up */
	pthread_cond_t cv;
	struct rframe *frames, **frames_tail;
	int err; /* set when the connection broke or the call was cancelled */
	/* the set it can be cancelled with, and its place there */
	cis_rpc_cancel *cancel;
	cis_rpc_client *client;
	struct call *cnext;
};

/* Lock order: a cancel set's lock before a client's lock. */
struct cis_rpc_cancel {
	pthread_mutex_t lock;
	bool fired;
	struct call *calls;
};

struct cis_rpc_client {
	char *host;
	char *unix_path;
	char *name;
	uint16_t port;
	int connect_ms;
	int call_ms;

	pthread_mutex_t wlock;
	pthread_mutex_t lock;
	pthread_cond_t conn_cv; /* connecting finished */
	int fd;                 /* -1: none */
	bool broken;
	bool closed; /* cis_rpc_client_close: no call from now on */
	bool connecting;
	bool reader_live; /* a reader thread to join */
	pthread_t reader;
	struct call *calls;
	uint64_t next_id;
	uint64_t last_rx_ms;
	int backoff_ms;
	uint64_t retry_at_ms;
	int last_err;
	char last_errmsg[CIS_ERRMSG_MAX];
	/* reader thread only */
	int rfds[MAX_FDS_QUEUED];
	int nrfds;
};

/* ---- small helpers ---- */

static void rframe_free(struct rframe *f)
{
	free(f->msg);
	free(f->data);
	if (f->fd >= 0)
		close(f->fd);
	free(f);
}

static struct timespec deadline_ts(uint64_t deadline_ms)
{
	struct timespec ts;
	uint64_t now = cis_mono_ms(), left = deadline_ms > now ? deadline_ms - now : 0;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(left / 1000);
	ts.tv_nsec += (long)(left % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

static void cond_init_mono(pthread_cond_t *cv)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
}

static const char *target(const cis_rpc_client *c, char *buf, size_t n)
{
	if (c->unix_path)
		snprintf(buf, n, "%s", c->unix_path);
	else
		snprintf(buf, n, "%s:%u", c->host, c->port);
	return buf;
}

/* Write all of iov on a blocking socket. 0 or -errno. */
static int write_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
		ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/* Wait for events on fd until until_ms (monotonic), a signal not ending
 * the wait: 1 when they came, 0 at the deadline, or -errno. */
static int poll_until(int fd, short events, uint64_t until_ms)
{
	struct pollfd p = {.fd = fd, .events = events};
	int n;
	do {
		uint64_t now = cis_mono_ms();
		n = poll(&p, 1, now < until_ms ? (int)(until_ms - now) : 0);
	} while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n > 0;
}

/* Read exactly n bytes; on Unix sockets, collect passed fds into c->rfds.
 * until_ms (monotonic), when not 0, bounds the whole read: a peer that
 * sends a byte now and then would otherwise hold it for as long as it
 * keeps that up (a receive timeout counts per recv). 0, -CIS_E_CLOSED on
 * EOF, -ETIMEDOUT past until_ms, or -errno. */
static int read_all(cis_rpc_client *c, int fd, void *buf, size_t n, uint64_t until_ms)
{
	uint8_t *p = buf;

	while (n > 0) {
		if (until_ms) {
			int k = poll_until(fd, POLLIN, until_ms);

			if (k <= 0)
				return k < 0 ? k : -ETIMEDOUT;
		}
		char cbuf[CMSG_SPACE(sizeof(int) * 8)];
		struct iovec iov = {p, n};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
		struct cmsghdr *cm;
		ssize_t r;

		if (c->unix_path) {
			mh.msg_control = cbuf;
			mh.msg_controllen = sizeof(cbuf);
		}
		r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		for (cm = c->unix_path ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm)) {
			size_t k, nfd;

			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (k = 0; k < nfd; k++) {
				int got;

				memcpy(&got, CMSG_DATA(cm) + k * sizeof(int), sizeof(int));
				if (c->nrfds < MAX_FDS_QUEUED)
					c->rfds[c->nrfds++] = got;
				else
					close(got);
			}
		}
		if (r == 0)
			return -CIS_E_CLOSED;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Read one frame, by until_ms when not 0 (read_all). 0 or negative (the
 * connection is unusable). */
static int read_frame(cis_rpc_client *c, int fd, struct rframe **out, uint64_t until_ms)
{
	uint8_t hb[CIS_FRAME_HDR_LEN];
	struct rframe *f;
	int r;

	r = read_all(c, fd, hb, sizeof(hb), until_ms);
	if (r)
		return r;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fd = -1;
	r = cis_frame_hdr_decode(hb, sizeof(hb), &f->hdr);
	if (r)
		goto out_free;
	r = -CIS_E_PROTO;
	if (!(f->hdr.flags & CIS_FRAME_REPLY))
		goto out_free;
	r = -ENOMEM;
	/* One byte more than asked, so that an empty part is never NULL. */
	if (!(f->msg = malloc(f->hdr.msg_len + 1u)) || !(f->data = malloc(f->hdr.data_len + 1u)))
		goto out_free;
	r = read_all(c, fd, f->msg, f->hdr.msg_len, until_ms);
	if (!r)
		r = read_all(c, fd, f->data, f->hdr.data_len, until_ms);
	if (r)
		goto out_free;
	if (f->hdr.flags & CIS_FRAME_FD) {
		/* The fd came with the frame's first byte at the latest. */
		r = -CIS_E_PROTO;
		if (c->nrfds == 0)
			goto out_free;
		f->fd = c->rfds[0];
		memmove(c->rfds, c->rfds + 1, sizeof(int) * (size_t)--c->nrfds);
	}
	*out = f;
	return 0;

out_free:
	rframe_free(f);
	return r;
}

/* ---- the reader ---- */

/* Caller holds lock. */
static struct call *do_find_call(cis_rpc_client *c, uint64_t id, struct call ***link)
{
	struct call **pp;

	for (pp = &c->calls; *pp; pp = &(*pp)->next) {
		if ((*pp)->id == id) {
			if (link)
				*link = pp;
			return *pp;
		}
	}
	return NULL;
}

/* Caller holds lock. */
static void do_unlink_call(cis_rpc_client *c, struct call *call)
{
	struct call **pp;

	if (do_find_call(c, call->id, &pp))
		*pp = call->next;
}

/* Caller holds lock: mark the connection broken, fail every call. */
static void do_break(cis_rpc_client *c)
{
	struct call *k;

	if (c->fd >= 0 && !c->broken)
		shutdown(c->fd, SHUT_RDWR); /* wakes the reader and any writer */
	c->broken = true;
	for (k = c->calls; k; k = k->next) {
		if (!k->err) /* a cancelled call stays cancelled */
			k->err = -CIS_E_CLOSED;
		pthread_cond_signal(&k->cv);
	}
	c->calls = NULL;
}

void cis_rpc_client_abort(cis_rpc_client *c)
{
	pthread_mutex_lock(&c->lock);
	if (c->fd >= 0)
		do_break(c);
	pthread_mutex_unlock(&c->lock);
}

void cis_rpc_client_close(cis_rpc_client *c)
{
	pthread_mutex_lock(&c->lock);
	c->closed = true;
	if (c->fd >= 0)
		do_break(c);
	pthread_mutex_unlock(&c->lock);
}

int cis_rpc_cancel_new(cis_rpc_cancel **out)
{
	cis_rpc_cancel *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	*out = t;
	return 0;
}

void cis_rpc_cancel_free(cis_rpc_cancel *t)
{
	if (!t)
		return;
	pthread_mutex_destroy(&t->lock);
	free(t);
}

void cis_rpc_cancel_fire(cis_rpc_cancel *t)
{
	pthread_mutex_lock(&t->lock);
	t->fired = true;
	for (struct call *k = t->calls; k; k = k->cnext) {
		pthread_mutex_lock(&k->client->lock);
		if (!k->err) {
			k->err = -ECANCELED;
			pthread_cond_signal(&k->cv);
		}
		pthread_mutex_unlock(&k->client->lock);
	}
	pthread_mutex_unlock(&t->lock);
}

/* Put k in its cancel set, if any: 0, or -ECANCELED when the set has
 * fired already. k->cv is ready. */
static int cancel_join(cis_rpc_client *c, struct call *k)
{
	cis_rpc_cancel *t = k->cancel;
	int r = 0;

	if (!t)
		return 0;
	k->client = c;
	pthread_mutex_lock(&t->lock);
	if (t->fired) {
		r = -ECANCELED;
	} else {
		k->cnext = t->calls;
		t->calls = k;
	}
	pthread_mutex_unlock(&t->lock);
	return r;
}

static void cancel_leave(struct call *k)
{
	cis_rpc_cancel *t = k->cancel;

	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	for (struct call **pp = &t->calls; *pp; pp = &(*pp)->cnext)
		if (*pp == k) {
			*pp = k->cnext;
			break;
		}
	pthread_mutex_unlock(&t->lock);
}

static void *reader_main(void *arg)
{
	cis_rpc_client *c = arg;
	int fd;

	pthread_mutex_lock(&c->lock);
	fd = c->fd;
	pthread_mutex_unlock(&c->lock);
	for (;;) {
		struct rframe *f;
		struct call *k;

		if (read_frame(c, fd, &f, 0) != 0)
			break;
		pthread_mutex_lock(&c->lock);
		c->last_rx_ms = cis_mono_ms();
		k = do_find_call(c, f->hdr.req_id, NULL);
		if (k) {
			*k->frames_tail = f;
			k->frames_tail = &f->next;
			pthread_cond_signal(&k->cv);
			f = NULL;
		}
		pthread_mutex_unlock(&c->lock);
		if (f)
			rframe_free(f); /* a call that gave up or timed out */
	}
	pthread_mutex_lock(&c->lock);
	do_break(c);
	pthread_mutex_unlock(&c->lock);
	while (c->nrfds > 0)
		close(c->rfds[--c->nrfds]);
	return NULL;
}

/* A server whose host vanished (no reset comes) is found out by TCP
 * itself: requests left unacknowledged for 60 s, or an idle connection
 * whose keepalive probes go unanswered (30 s, then 3 probes 10 s apart),
 * break the connection, and every call on it fails. Without, calls that
 * overlap one another kept it "alive" (each timed out while another
 * waited), and TCP gave up only after some 15 minutes. */
static void set_dead_peer_limits(int fd)
{
	int one = 1, idle = 30, intvl = 10, cnt = 3;
	unsigned user_ms = 60000;

	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms));
}

/* ---- connecting ---- */

static int connect_socket(cis_rpc_client *c, int *out, cis_errmsg *em)
{
	char t[300];
	int fd = -1, r, one = 1;

	if (c->unix_path) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};

		if (strlen(c->unix_path) >= sizeof(sa.sun_path))
			return cis_fail(em, -ENAMETOOLONG, "connect %s: path too long",
			                c->unix_path);
		strcpy(sa.sun_path, c->unix_path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return cis_fail(em, -errno, "socket: %s", strerror(errno));
		/* A connect to a listener that stopped accepting blocks once its
		 * backlog is full; the send timeout bounds it (the handshake sets
		 * its own afterwards). */
		struct timeval tv = {.tv_sec = c->connect_ms / 1000,
		                     .tv_usec = (suseconds_t)(c->connect_ms % 1000) * 1000};
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			r = errno == EAGAIN || errno == EINPROGRESS ? -ETIMEDOUT : -errno;
			close(fd);
			return cis_fail(em, r, "connect %s: %s", c->unix_path, strerror(-r));
		}
		*out = fd;
		return 0;
	}

	struct addrinfo hints = {
	    .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai, *a;
	char port[8];

	snprintf(port, sizeof(port), "%u", c->port);
	r = getaddrinfo(c->host, port, &hints, &ai);
	if (r)
		return cis_fail(em, -EHOSTUNREACH, "connect %s: %s", target(c, t, sizeof(t)),
		                gai_strerror(r));
	r = -EHOSTUNREACH;
	for (a = ai; a; a = a->ai_next) {
		int err = 0;
		socklen_t el = sizeof(err);

		fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			r = -errno;
			continue;
		}
		if (connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
			if (errno != EINPROGRESS) {
				r = -errno;
				goto next;
			}
			/* a signal is not the peer's answer: wait on for the rest */
			if (poll_until(fd, POLLOUT, cis_mono_ms() + (uint64_t)c->connect_ms) <= 0) {
				r = -ETIMEDOUT;
				goto next;
			}
			getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
			if (err) {
				r = -err;
				goto next;
			}
		}
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		set_dead_peer_limits(fd);
		freeaddrinfo(ai);
		*out = fd;
		return 0;
	next:
		close(fd);
	}
	freeaddrinfo(ai);
	return cis_fail(em, r, "connect %s: %s", target(c, t, sizeof(t)), strerror(-r));
}

static void set_timeouts(int fd, int rcv_ms, int snd_ms)
{
	struct timeval rt = {rcv_ms / 1000, (rcv_ms % 1000) * 1000};
	struct timeval st = {snd_ms / 1000, (snd_ms % 1000) * 1000};

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rt, sizeof(rt));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &st, sizeof(st));
}

static int send_frame(int fd, uint16_t type, uint64_t id, const uint8_t *msg, size_t mlen,
                      const void *data, size_t dlen)
{
	cis_frame_hdr h = {
	    .type = type, .msg_len = (uint32_t)mlen, .data_len = (uint32_t)dlen, .req_id = id};
	uint8_t hb[CIS_FRAME_HDR_LEN];
	struct iovec iov[3] = {{hb, sizeof(hb)}, {(void *)msg, mlen}, {(void *)data, dlen}};

	cis_frame_hdr_encode(&h, hb);
	return write_all(fd, iov, 3);
}

/* Say hello on a fresh socket, before the reader starts. */
static int handshake(cis_rpc_client *c, int fd, cis_errmsg *em)
{
	Cis__Hello hello = CIS__HELLO__INIT;
	ProtobufCMessage *m;
	struct rframe *f = NULL;
	uint8_t *buf;
	size_t len;
	char t[300];
	int r;

	hello.protocol_version = 1;
	hello.client_name = c->name;
	r = cis_msg_pack(&hello.base, &buf, &len);
	if (r)
		return r;
	set_timeouts(fd, c->connect_ms, c->connect_ms);
	r = send_frame(fd, CIS_MSG_HELLO, 0, buf, len, NULL, 0);
	free(buf);
	/* The whole reply within the connect timeout: every call waiting
	 * to connect waits on this one, whatever its own timeout. */
	if (!r)
		r = read_frame(c, fd, &f, cis_mono_ms() + (uint64_t)c->connect_ms);
	if (r) {
		r = r == -EAGAIN ? -ETIMEDOUT : r;
		return cis_fail(em, r, "hello to %s: %s", target(c, t, sizeof(t)), cis_strerror(r));
	}
	if (f->hdr.type != CIS_MSG_HELLO || (f->hdr.flags & CIS_FRAME_ERROR)) {
		r = cis_fail(em, -CIS_E_PROTO, "hello to %s: refused", target(c, t, sizeof(t)));
	} else if (cis_msg_unpack(&cis__hello_reply__descriptor, f->msg, f->hdr.msg_len, &m)) {
		r = cis_fail(em, -CIS_E_PROTO, "hello to %s: malformed reply",
		             target(c, t, sizeof(t)));
	} else {
		if (((Cis__HelloReply *)m)->protocol_version != 1)
			r = cis_fail(em, -CIS_E_PROTO, "hello to %s: protocol version %u",
			             target(c, t, sizeof(t)),
			             ((Cis__HelloReply *)m)->protocol_version);
		protobuf_c_message_free_unpacked(m, NULL);
	}
	rframe_free(f);
	/* The reader blocks without a timeout; writes give up after the
	 * default call timeout so that a stuck peer cannot hold wlock. */
	set_timeouts(fd, 0, c->call_ms);
	return r;
}

/* Make sure a live connection exists. Called with lock held; may drop it
 * and take it again. */
static int do_ensure_connected(cis_rpc_client *c, cis_errmsg *em)
{
	int r, fd = -1, old;
	bool join;

	while (c->connecting)
		pthread_cond_wait(&c->conn_cv, &c->lock);
	if (c->closed) {
		char t[300];

		return cis_fail(em, -ECANCELED, "rpc to %s: the client is stopping",
		                target(c, t, sizeof(t)));
	}
	if (c->fd >= 0 && !c->broken)
		return 0;
	if (cis_mono_ms() < c->retry_at_ms) {
		if (em)
			snprintf(em->text, sizeof(em->text), "%s", c->last_errmsg);
		return c->last_err;
	}
	c->connecting = true;
	old = c->fd;
	join = c->reader_live;
	c->reader_live = false;
	pthread_mutex_unlock(&c->lock);
	if (old >= 0) {
		pthread_mutex_lock(&c->lock);
		do_break(c);
		pthread_mutex_unlock(&c->lock);
	}
	if (join)
		pthread_join(c->reader, NULL);
	pthread_mutex_lock(&c->wlock);
	if (old >= 0)
		close(old);
	pthread_mutex_lock(&c->lock);
	c->fd = -1;
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&c->wlock);

	cis_errmsg local = {{0}};
	r = connect_socket(c, &fd, &local);
	if (!r) {
		r = handshake(c, fd, &local);
		if (r)
			close(fd);
	}
	pthread_mutex_lock(&c->lock);
	if (!r) {
		c->fd = fd;
		c->broken = false;
		c->backoff_ms = 0;
		c->retry_at_ms = 0;
		c->last_rx_ms = cis_mono_ms();
		r = -pthread_create(&c->reader, NULL, reader_main, c);
		if (r) {
			c->broken = true;
			snprintf(local.text, sizeof(local.text), "cannot start reader thread");
		} else {
			c->reader_live = true;
		}
	}
	if (r) {
		c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : BACKOFF_MIN_MS;
		if (c->backoff_ms > BACKOFF_MAX_MS)
			c->backoff_ms = BACKOFF_MAX_MS;
		c->retry_at_ms = cis_mono_ms() + (uint64_t)c->backoff_ms;
		c->last_err = r;
		snprintf(c->last_errmsg, sizeof(c->last_errmsg), "%s", local.text);
		if (em)
			*em = local;
	}
	c->connecting = false;
	pthread_cond_broadcast(&c->conn_cv);
	return r;
}

/* ---- calls ---- */

int cis_rpc_client_new(const cis_rpc_client_opts *o, cis_rpc_client **out)
{
	cis_rpc_client *c;

	*out = NULL;
	if (!o->unix_path && !o->host)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->host = o->host ? strdup(o->host) : NULL;
	c->unix_path = o->unix_path ? strdup(o->unix_path) : NULL;
	c->name = strdup(o->name ? o->name : "cistern");
	if ((o->host && !c->host) || (o->unix_path && !c->unix_path) || !c->name) {
		cis_rpc_client_free(c);
		return -ENOMEM;
	}
	c->port = o->port;
	c->connect_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : DEFAULT_CONNECT_MS;
	c->call_ms = o->call_timeout_ms > 0 ? o->call_timeout_ms : DEFAULT_CALL_MS;
	c->fd = -1;
	pthread_mutex_init(&c->wlock, NULL);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->conn_cv, NULL);
	*out = c;
	return 0;
}

void cis_rpc_client_free(cis_rpc_client *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	do_break(c);
	pthread_mutex_unlock(&c->lock);
	if (c->reader_live)
		pthread_join(c->reader, NULL);
	if (c->fd >= 0)
		close(c->fd);
	pthread_mutex_destroy(&c->wlock);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->conn_cv);
	free(c->host);
	free(c->unix_path);
	free(c->name);
	free(c);
}

/* Register call and send the request. 0, or negative with the call not
 * registered. */
static int start_call(cis_rpc_client *c, struct call *k, uint16_t type, const ProtobufCMessage *req,
                      const void *data, size_t data_len, cis_errmsg *em)
{
	uint8_t *mb = NULL;
	size_t mlen = 0;
	char t[300];
	int r, fd;

	if (type == 0 || data_len > CIS_FRAME_MAX_DATA)
		return cis_fail(em, type ? -CIS_E_TOOBIG : -EINVAL,
		                "rpc request: bad type or size");
	if (req && (r = cis_msg_pack(req, &mb, &mlen)))
		return cis_fail(em, r, "rpc request: %s", cis_strerror(r));
	k->frames = NULL;
	k->frames_tail = &k->frames;
	k->err = 0;
	cond_init_mono(&k->cv);
	r = cancel_join(c, k);
	if (r) {
		r = cis_fail(em, r, "rpc to %s: cancelled", target(c, t, sizeof(t)));
		free(mb);
		pthread_cond_destroy(&k->cv);
		return r;
	}
	pthread_mutex_lock(&c->lock);
	r = do_ensure_connected(c, em);
	if (r) {
		pthread_mutex_unlock(&c->lock);
		goto out_free;
	}
	pthread_mutex_unlock(&c->lock);

	pthread_mutex_lock(&c->wlock);
	pthread_mutex_lock(&c->lock);
	if (c->closed || c->fd < 0 || c->broken) {
		bool closed = c->closed;

		pthread_mutex_unlock(&c->lock);
		pthread_mutex_unlock(&c->wlock);
		r = cis_fail(em, closed ? -ECANCELED : -CIS_E_CLOSED, "rpc to %s: %s",
		             target(c, t, sizeof(t)),
		             closed ? "the client is stopping" : "connection lost");
		goto out_free;
	}
	if (k->err) { /* cancelled while it connected: never sent */
		pthread_mutex_unlock(&c->lock);
		pthread_mutex_unlock(&c->wlock);
		r = cis_fail(em, k->err, "rpc to %s: cancelled", target(c, t, sizeof(t)));
		goto out_free;
	}
	fd = c->fd;
	k->id = ++c->next_id;
	k->next = c->calls;
	c->calls = k;
	pthread_mutex_unlock(&c->lock);
	r = send_frame(fd, type, k->id, mb, mlen, data, data_len);
	if (r) {
		/* Broken before wlock goes: another caller would write its
		 * frame after this one's part, which the server would read as
		 * one. And only this connection: after wlock went, another
		 * caller could have made a new, sound one. */
		pthread_mutex_lock(&c->lock);
		do_unlink_call(c, k);
		if (c->fd == fd)
			do_break(c);
		pthread_mutex_unlock(&c->lock);
		pthread_mutex_unlock(&c->wlock);
		r = cis_fail(em, -CIS_E_CLOSED, "rpc to %s: send: %s", target(c, t, sizeof(t)),
		             strerror(-r));
	} else {
		pthread_mutex_unlock(&c->wlock);
	}
out_free:
	free(mb);
	if (r) {
		cancel_leave(k);
		pthread_cond_destroy(&k->cv);
	}
	return r;
}

/* Whether a call other than those already unlinked is still within its
 * deadline. Caller holds lock. */
static bool do_calls_waiting(cis_rpc_client *c, uint64_t now)
{
	for (struct call *k = c->calls; k; k = k->next)
		if (k->deadline_ms > now)
			return true;
	return false;
}

/* Wait for the call's next frame. 0 with *f, or -ETIMEDOUT (the call is
 * unregistered) or -CIS_E_CLOSED. */
static int next_frame(cis_rpc_client *c, struct call *k, uint64_t deadline, uint64_t started,
                      struct rframe **f, cis_errmsg *em)
{
	struct timespec ts = deadline_ts(deadline);
	char t[300];
	int r = 0;

	pthread_mutex_lock(&c->lock);
	while (!k->frames && !k->err) {
		if (pthread_cond_timedwait(&k->cv, &c->lock, &ts) == ETIMEDOUT && !k->frames &&
		    !k->err) {
			do_unlink_call(c, k);
			/* Silent the whole time, and no other call still
			 * waits for an answer that would say otherwise: looks
			 * dead. */
			if (c->last_rx_ms <= started && !c->broken &&
			    !do_calls_waiting(c, cis_mono_ms()))
				do_break(c);
			pthread_mutex_unlock(&c->lock);
			return cis_fail(em, -ETIMEDOUT, "rpc to %s: timed out",
			                target(c, t, sizeof(t)));
		}
	}
	if (k->frames) {
		*f = k->frames;
		k->frames = (*f)->next;
		if (!k->frames)
			k->frames_tail = &k->frames;
	} else {
		r = cis_fail(em, k->err, "rpc to %s: %s", target(c, t, sizeof(t)),
		             k->err == -ECANCELED ? "cancelled" : "connection closed");
	}
	pthread_mutex_unlock(&c->lock);
	return r;
}

/* Unregister k and drop frames it still holds. */
static void end_call(cis_rpc_client *c, struct call *k)
{
	struct rframe *f, *fn;

	cancel_leave(k);
	pthread_mutex_lock(&c->lock);
	do_unlink_call(c, k);
	f = k->frames;
	k->frames = NULL;
	pthread_mutex_unlock(&c->lock);
	for (; f; f = fn) {
		fn = f->next;
		rframe_free(f);
	}
	pthread_cond_destroy(&k->cv);
}

bool cis_rpc_unreachable(int rc)
{
	return rc == -ETIMEDOUT || rc == -CIS_E_CLOSED || rc == -ECONNREFUSED ||
	       rc == -ECONNRESET || rc == -EHOSTUNREACH || rc == -ENETUNREACH || rc == -EPIPE;
}

/* An error frame's code and message. */
static int error_of(const struct rframe *f, cis_errmsg *em)
{
	ProtobufCMessage *m;
	Cis__ErrorReply *e;
	int r;

	if (cis_msg_unpack(&cis__error_reply__descriptor, f->msg, f->hdr.msg_len, &m))
		return cis_fail(em, -CIS_E_PROTO, "malformed error reply");
	e = (Cis__ErrorReply *)m;
	r = e->code < 0 ? e->code : -CIS_E_PROTO;
	if (cis_rpc_unreachable(r))
		r = -CIS_E_UPSTREAM; /* the peer answered: it is not the one unreachable */
	cis_fail(em, r, "%s", e->message && *e->message ? e->message : cis_strerror(r));
	protobuf_c_message_free_unpacked(m, NULL);
	return r;
}

int cis_rpc_call(cis_rpc_client *c, uint16_t type, const ProtobufCMessage *req, const void *data,
                 size_t data_len, cis_rpc_result *res, int timeout_ms, cis_errmsg *em)
{
	return cis_rpc_call_in(c, NULL, type, req, data, data_len, res, timeout_ms, em);
}

int cis_rpc_call_in(cis_rpc_client *c, cis_rpc_cancel *cancel, uint16_t type,
                    const ProtobufCMessage *req, const void *data, size_t data_len,
                    cis_rpc_result *res, int timeout_ms, cis_errmsg *em)
{
	uint64_t started = cis_mono_ms();
	uint64_t deadline = started + (uint64_t)(timeout_ms > 0 ? timeout_ms : c->call_ms);
	struct rframe *f = NULL;
	struct call k = {.cancel = cancel};
	int r;

	memset(res, 0, sizeof(*res));
	res->fd = -1;
	k.deadline_ms = deadline;
	r = start_call(c, &k, type, req, data, data_len, em);
	if (r)
		return r;
	r = next_frame(c, &k, deadline, started, &f, em);
	end_call(c, &k); /* the rest of a streamed reply is discarded */
	if (r)
		return r;
	if (f->hdr.flags & CIS_FRAME_ERROR) {
		r = error_of(f, em);
	} else if (f->hdr.flags & CIS_FRAME_MORE) {
		r = cis_fail(em, -CIS_E_PROTO, "streamed reply to a single call (use call_stream)");
	} else {
		res->hdr = f->hdr;
		res->msg = f->msg;
		res->msg_len = f->hdr.msg_len;
		res->data = f->data;
		res->data_len = f->hdr.data_len;
		res->fd = f->fd;
		f->msg = NULL;
		f->data = NULL;
		f->fd = -1;
	}
	rframe_free(f);
	return r;
}

int cis_rpc_call_stream(cis_rpc_client *c, uint16_t type, const ProtobufCMessage *req,
                        cis_rpc_frame_fn fn, void *arg, int timeout_ms, cis_errmsg *em)
{
	uint64_t started = cis_mono_ms();
	uint64_t deadline = started + (uint64_t)(timeout_ms > 0 ? timeout_ms : c->call_ms);
	struct call k = {0};
	int r;

	k.deadline_ms = deadline;
	r = start_call(c, &k, type, req, NULL, 0, em);
	if (r)
		return r;
	for (;;) {
		struct rframe *f = NULL;
		bool last;

		/* The timeout covers the whole reply, not each frame. */
		r = next_frame(c, &k, deadline, started, &f, em);
		if (r)
			break;
		last = !(f->hdr.flags & CIS_FRAME_MORE);
		if (f->hdr.flags & CIS_FRAME_ERROR) {
			r = error_of(f, em);
			last = true;
		} else {
			r = fn(arg, &f->hdr, f->msg, f->data);
			if (r < 0)
				last = true;
		}
		rframe_free(f);
		if (last)
			break;
		started = cis_mono_ms(); /* data is flowing */
	}
	end_call(c, &k);
	return r > 0 ? 0 : r;
}

void cis_rpc_result_free(cis_rpc_result *r)
{
	if (!r)
		return;
	free(r->msg);
	free(r->data);
	if (r->fd >= 0)
		close(r->fd);
	r->msg = NULL;
	r->data = NULL;
	r->fd = -1;
}
