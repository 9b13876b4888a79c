/* The RPC server (rpc.h).
 *
 * Threads: one listener thread (its own event_base, the TCP and Unix
 * evconnlisteners) and N I/O threads, each with its own event_base. The
 * listener hands accepted fds round robin to the I/O threads through a
 * per-thread queue plus an eventfd (memcached style); the same eventfd
 * carries the stop request.
 *
 * Connections: one bufferevent each, owned by its I/O thread, created with
 * BEV_OPT_THREADSAFE | DEFER_CALLBACKS | UNLOCK_CALLBACKS so that callbacks
 * run without the bufferevent lock. Lock order: conn->lock, then the
 * bufferevent's lock (taken inside libevent). Every writer (any thread)
 * holds conn->lock while it appends one whole frame, so frames never
 * interleave. A conn is refcounted: the I/O thread holds one reference
 * while it is open, handlers take more to reply later. Closing (I/O thread
 * only) frees the bufferevent under conn->lock; later replies see
 * !open and are dropped.
 *
 * Passing an fd (SCM_RIGHTS) must attach it to the frame's own bytes, so
 * it needs the output buffer empty: such a frame, and every frame after
 * it, goes through a per-connection hold queue that is drained in order
 * when the output buffer empties (write callback) or the socket becomes
 * writable again. */
#include "cistern/rpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "cistern/log.h"
#include "cistern/metrics.h"
#include "cistern/msgtype.h"
#include "cistern/proto/common.pb-c.h"
#include "net_internal.h"

#define DEFAULT_MAX_CONNS      4096
#define DEFAULT_WRITE_STALL_MS 60000
#define DEFAULT_HELLO_MS       10000
#define KEEPALIVE_IDLE_S       60 /* TCP keepalive: a peer whose host vanished */
#define KEEPALIVE_INTVL_S      10 /* is dropped after about two minutes */
#define KEEPALIVE_CNT          6
#define PROTOCOL_VERSION       1
/* A connection stops being read while this much output waits to be sent,
 * or this many of its requests wait for a reply: a client that pipelines
 * requests and reads no replies holds the server's memory and (file
 * replies) descriptors to this, not without end. Reading resumes once the
 * output has drained. */
#define OUT_HIGH      (64u << 20)
#define INFLIGHT_HIGH 1024
#define HELD_HIGH     64 /* frames waiting behind one that passes an fd */

struct io_thread;

/* One frame waiting in a connection's hold queue. */
struct held {
	struct held *next;
	struct evbuffer *frame; /* header + message (+ copied data) */
	int file_fd;            /* -1, or a file segment to append (owned) */
	off_t file_off;
	size_t file_len;
	int pass_fd; /* -1, or the fd to pass with the frame (owned) */
};

struct cis_rpc_conn {
	_Atomic int refs;
	pthread_mutex_t lock; /* open, bev, held */
	bool open;
	struct bufferevent *bev;
	struct held *held, **held_tail;
	size_t nheld;        /* frames in held */
	bool broken;         /* passing an fd failed: close (write_cb) */
	struct event *wr_ev; /* EV_WRITE, when a held sendmsg hit EAGAIN */
	/* Below: I/O thread only. */
	struct io_thread *t;
	struct cis_rpc_conn *prev, *next;
	int fd;
	bool local;
	bool hello_done;
	/* Armed for the hello at the start, then while a frame is partly
	 * in (read_cb): the peer is dropped when it fires. */
	struct event *deadline_ev;
	bool closing;           /* close once output is flushed */
	_Atomic bool throttled; /* not read until its output drains (over_limits) */
	int uid;
	_Atomic int inflight; /* requests handed to the handler, not yet answered */
	char peer[64];
	bool addr_counted; /* in the server's count for addr (TCP) */
	uint8_t addr[16];  /* the peer's address, IPv4 as v4-mapped IPv6 */
};

struct pending_fd {
	struct pending_fd *next;
	int fd;
	bool local;
	bool addr_counted;
	uint8_t addr[16];
};

/* Connections open from one address. */
struct addr_count {
	uint8_t addr[16];
	size_t n;
};

struct io_thread {
	cis_rpc_server *srv;
	struct event_base *base;
	pthread_t tid;
	int efd;
	struct event *notify_ev;
	pthread_mutex_t qlock;
	struct pending_fd *q;
	bool stop;                  /* under qlock */
	struct cis_rpc_conn *conns; /* this thread's open connections */
};

struct cis_rpc_server {
	cis_rpc_handler_fn handler;
	void *ctx;
	char *name;
	char *unix_path;
	size_t max_conns;
	int idle_timeout_ms;
	struct timeval write_stall;
	struct timeval hello_deadline, frame_deadline;
	uint16_t port;
	struct event_base *lbase;
	struct evconnlistener *tcp_l, *unix_l;
	struct event *lstop_ev;
	pthread_t ltid;
	bool lstarted;
	struct io_thread *threads;
	int nthreads;
	unsigned next_thread;
	_Atomic size_t nconns;
	/* Per TCP peer address, at most max_per_addr connections, so that
	 * one host cannot take every slot of max_conns. */
	size_t max_per_addr;
	pthread_mutex_t addrs_lock;
	struct addr_count *addrs;
	size_t naddrs, addrs_cap;
	cis_counter *bad_frames;    /* may be NULL */
	cis_counter *refused_conns; /* may be NULL */
};

static void count(cis_counter *c)
{
	if (c)
		cis_counter_inc(c);
}

/* ---- connection slots ---- */

/* The address of a TCP peer as 16 bytes (IPv4 v4-mapped); false for
 * anything else. */
static bool addr_key(const struct sockaddr *sa, uint8_t key[16])
{
	if (sa->sa_family == AF_INET) {
		memset(key, 0, 10);
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return true;
	}
	return false;
}

/* Count one more connection from addr: false when it has max_per_addr
 * already (or no memory to count it). */
static bool addr_take(cis_rpc_server *s, const uint8_t addr[16])
{
	bool ok = false;
	size_t i;

	pthread_mutex_lock(&s->addrs_lock);
	for (i = 0; i < s->naddrs && memcmp(s->addrs[i].addr, addr, 16); i++)
		;
	if (i == s->naddrs && s->naddrs == s->addrs_cap) {
		size_t cap = s->addrs_cap ? 2 * s->addrs_cap : 16;
		struct addr_count *a = realloc(s->addrs, cap * sizeof(*a));

		if (!a)
			goto out;
		s->addrs = a;
		s->addrs_cap = cap;
	}
	if (i == s->naddrs) {
		memcpy(s->addrs[i].addr, addr, 16);
		s->addrs[i].n = 0;
		s->naddrs++;
	}
	if (s->addrs[i].n < s->max_per_addr) {
		s->addrs[i].n++;
		ok = true;
	}
out:
	pthread_mutex_unlock(&s->addrs_lock);
	return ok;
}

/* A connection's slot back: in max_conns, and in its address's count when
 * it was counted there. */
static void slot_release(cis_rpc_server *s, bool addr_counted, const uint8_t addr[16])
{
	atomic_fetch_sub(&s->nconns, 1);
	if (!addr_counted)
		return;
	pthread_mutex_lock(&s->addrs_lock);
	for (size_t i = 0; i < s->naddrs; i++)
		if (!memcmp(s->addrs[i].addr, addr, 16)) {
			if (--s->addrs[i].n == 0)
				s->addrs[i] = s->addrs[--s->naddrs];
			break;
		}
	pthread_mutex_unlock(&s->addrs_lock);
}

/* ---- connection references and accessors ---- */

void cis_rpc_conn_ref(cis_rpc_conn *c)
{
	atomic_fetch_add(&c->refs, 1);
}

static void held_free(struct held *h)
{
	if (h->frame)
		evbuffer_free(h->frame);
	if (h->file_fd >= 0)
		close(h->file_fd);
	if (h->pass_fd >= 0)
		close(h->pass_fd);
	free(h);
}

void cis_rpc_conn_unref(cis_rpc_conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	/* Closed by now: the I/O thread's reference is the last to go while
	 * it is open; bev, wr_ev and the hold queue went with the close. */
	pthread_mutex_destroy(&c->lock);
	free(c);
}

bool cis_rpc_conn_open(const cis_rpc_conn *c)
{
	cis_rpc_conn *m = (cis_rpc_conn *)c;
	bool open;

	pthread_mutex_lock(&m->lock);
	open = m->open;
	pthread_mutex_unlock(&m->lock);
	return open;
}

const char *cis_rpc_conn_peer(const cis_rpc_conn *c)
{
	return c->peer;
}

bool cis_rpc_conn_is_local(const cis_rpc_conn *c)
{
	return c->local;
}

int cis_rpc_conn_peer_uid(const cis_rpc_conn *c)
{
	return c->uid;
}

/* ---- sending ---- */

/* Caller holds c->lock, c->open. Appends a held plain frame to output. */
static void do_append(cis_rpc_conn *c, struct held *h)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	evbuffer_add_buffer(out, h->frame);
	if (h->file_fd >= 0) {
		/* evbuffer_add_file owns the fd from here, even on failure;
		 * on the bufferevent's own output it is sent with sendfile. */
		if (evbuffer_add_file(out, h->file_fd, h->file_off, (ev_off_t)h->file_len) != 0)
			shutdown(c->fd, SHUT_RDWR); /* the frame is cut short: drop the peer */
		h->file_fd = -1;
	}
}

/* Caller holds c->lock, c->open, c->held non-empty. Sends held frames in
 * order while it can: a frame passing an fd only when the output buffer is
 * empty. */
static void do_drain_held(cis_rpc_conn *c)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	struct held *h;

	while ((h = c->held)) {
		if (h->pass_fd >= 0) {
			char cbuf[CMSG_SPACE(sizeof(int))] = {0};
			size_t len = evbuffer_get_length(h->frame);
			struct iovec iov = {evbuffer_pullup(h->frame, -1), len};
			struct msghdr mh = {.msg_iov = &iov,
			                    .msg_iovlen = 1,
			                    .msg_control = cbuf,
			                    .msg_controllen = sizeof(cbuf)};
			struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
			ssize_t n;

			if (evbuffer_get_length(out) > 0)
				return; /* the write callback calls again once drained */
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(cm), &h->pass_fd, sizeof(int));
			do {
				n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
			} while (n < 0 && errno == EINTR);
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				event_add(c->wr_ev, &c->t->srv->write_stall);
				return;
			}
			if (n < 0) {
				/* The peer is gone: write_cb closes the connection (its
				 * reading may be stopped, so EOF would not). */
				shutdown(c->fd, SHUT_RDWR);
				c->broken = true;
				event_active(c->wr_ev, EV_WRITE, 0);
				return;
			}
			/* The fd went with the first byte; the rest is ordinary. */
			evbuffer_drain(h->frame, (size_t)n);
			close(h->pass_fd);
			h->pass_fd = -1;
		}
		do_append(c, h);
		c->held = h->next;
		c->nheld--;
		if (!c->held)
			c->held_tail = &c->held;
		held_free(h);
	}
}

/* Send one frame (takes h). Thread-safe. */
static int conn_send(cis_rpc_conn *c, struct held *h, uint8_t flags)
{
	int r = 0;

	pthread_mutex_lock(&c->lock);
	if (!c->open) {
		r = -CIS_E_CLOSED;
		held_free(h);
		goto out_unlock;
	}
	if (!c->held && h->pass_fd < 0) {
		do_append(c, h);
		held_free(h);
	} else {
		*c->held_tail = h;
		c->held_tail = &h->next;
		c->nheld++;
		do_drain_held(c);
	}
	if (!(flags & CIS_FRAME_MORE))
		atomic_fetch_sub(&c->inflight, 1);
	/* A connection not read for its limits reads on from write_cb, which
	 * a reply passing an fd straight out (sendmsg, no output buffered) or
	 * one only lowering the requests in flight would not bring about. */
	if (atomic_load(&c->throttled))
		event_active(c->wr_ev, EV_WRITE, 0);
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return r;
}

/* A new held frame: header for req's reply, then the packed msg (NULL for
 * an empty message), with data_len announced. */
static int build_frame(const cis_frame_hdr *req, const ProtobufCMessage *msg, uint8_t flags,
                       size_t data_len, struct held **out)
{
	cis_frame_hdr h = {.flags = (uint8_t)(flags | CIS_FRAME_REPLY),
	                   .type = req->type,
	                   .req_id = req->req_id,
	                   .data_len = (uint32_t)data_len};
	uint8_t hb[CIS_FRAME_HDR_LEN], *mb = NULL;
	size_t mlen = 0;
	struct held *e;
	int r;

	if (data_len > CIS_FRAME_MAX_DATA)
		return -CIS_E_TOOBIG;
	if (msg && (r = cis_msg_pack(msg, &mb, &mlen)))
		return r;
	h.msg_len = (uint32_t)mlen;
	cis_frame_hdr_encode(&h, hb);
	e = calloc(1, sizeof(*e));
	if (!e || !(e->frame = evbuffer_new())) {
		free(e);
		free(mb);
		return -ENOMEM;
	}
	e->file_fd = -1;
	e->pass_fd = -1;
	if (evbuffer_add(e->frame, hb, sizeof(hb)) || (mlen && evbuffer_add(e->frame, mb, mlen))) {
		free(mb);
		held_free(e);
		return -ENOMEM;
	}
	free(mb);
	*out = e;
	return 0;
}

int cis_rpc_reply(cis_rpc_conn *c, const cis_frame_hdr *req, const ProtobufCMessage *msg,
                  uint8_t flags)
{
	return cis_rpc_reply_data(c, req, msg, NULL, 0, flags);
}

int cis_rpc_reply_data(cis_rpc_conn *c, const cis_frame_hdr *req, const ProtobufCMessage *msg,
                       const void *data, size_t len, uint8_t flags)
{
	struct held *h;
	int r = build_frame(req, msg, flags, len, &h);

	if (r)
		return r;
	if (len && evbuffer_add(h->frame, data, len)) {
		held_free(h);
		return -ENOMEM;
	}
	return conn_send(c, h, flags);
}

int cis_rpc_reply_file(cis_rpc_conn *c, const cis_frame_hdr *req, const ProtobufCMessage *msg,
                       int fd, off_t off, size_t len, uint8_t flags)
{
	struct held *h;
	struct stat st;
	int r;

	if (off < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || off > st.st_size ||
	    len > (size_t)(st.st_size - off))
		return -EINVAL; /* a short file would desynchronise the stream */
	r = build_frame(req, msg, flags, len, &h);
	if (r)
		return r;
	if (len) {
		h->file_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		if (h->file_fd < 0) {
			r = -errno;
			held_free(h);
			return r;
		}
		h->file_off = off;
		h->file_len = len;
	}
	return conn_send(c, h, flags);
}

int cis_rpc_reply_fd(cis_rpc_conn *c, const cis_frame_hdr *req, const ProtobufCMessage *msg, int fd)
{
	struct held *h;
	int r;

	if (!c->local)
		return -EOPNOTSUPP;
	r = build_frame(req, msg, CIS_FRAME_FD, 0, &h);
	if (r)
		return r;
	h->pass_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (h->pass_fd < 0) {
		r = -errno;
		held_free(h);
		return r;
	}
	return conn_send(c, h, 0);
}

static int reply_error_v(cis_rpc_conn *c, const cis_frame_hdr *req, int code, const char *fmt,
                         va_list ap)
{
	Cis__ErrorReply e = CIS__ERROR_REPLY__INIT;
	char text[CIS_ERRMSG_MAX];

	vsnprintf(text, sizeof(text), fmt, ap);
	e.code = code < 0 ? code : -CIS_E_INTERNAL;
	e.message = text;
	return cis_rpc_reply(c, req, &e.base, CIS_FRAME_ERROR);
}

int cis_rpc_reply_error(cis_rpc_conn *c, const cis_frame_hdr *req, int code, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = reply_error_v(c, req, code, fmt, ap);
	va_end(ap);
	return r;
}

static void server_reply_error(cis_rpc_conn *c, const cis_frame_hdr *req, int code, const char *fmt,
                               ...) __attribute__((format(printf, 4, 5)));
static void server_reply_error(cis_rpc_conn *c, const cis_frame_hdr *req, int code, const char *fmt,
                               ...)
{
	va_list ap;

	atomic_fetch_add(&c->inflight, 1); /* balanced by the final reply */
	va_start(ap, fmt);
	reply_error_v(c, req, code, fmt, ap);
	va_end(ap);
}

/* ---- connection life on the I/O thread ---- */

static void conn_close(cis_rpc_conn *c)
{
	struct bufferevent *bev;
	struct held *h, *hn;

	pthread_mutex_lock(&c->lock);
	if (!c->open) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	c->open = false;
	bev = c->bev;
	c->bev = NULL;
	h = c->held;
	c->held = NULL;
	c->held_tail = &c->held;
	c->nheld = 0;
	pthread_mutex_unlock(&c->lock);
	for (; h; h = hn) {
		hn = h->next;
		held_free(h);
	}
	event_free(c->wr_ev);
	c->wr_ev = NULL;
	event_free(c->deadline_ev);
	c->deadline_ev = NULL;
	bufferevent_free(bev); /* closes the fd */
	if (c->prev)
		c->prev->next = c->next;
	else
		c->t->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	slot_release(c->t->srv, c->addr_counted, c->addr);
	cis_rpc_conn_unref(c);
}

/* After an error reply to a peer we then drop: stop reading, close once
 * the output is flushed (write_cb). */
static void conn_close_after_flush(cis_rpc_conn *c)
{
	struct timeval tv = {10, 0}; /* a peer that does not read is dropped anyway */

	c->closing = true;
	bufferevent_disable(c->bev, EV_READ);
	bufferevent_set_timeouts(c->bev, NULL, &tv);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		conn_close(c);
}

/* A protocol violation: count it, log it (rate limited), drop the peer. */
static void conn_bad(cis_rpc_conn *c, const char *why)
{
	count(c->t->srv->bad_frames);
	cis_log_limited(CIS_LOG_WARN, "rpc-bad-frame", 10, "rpc connection dropped",
	                "server=%s peer=%s reason=\"%s\"", c->t->srv->name, c->peer, why);
	conn_close_after_flush(c);
}

static void handle_hello(cis_rpc_conn *c, const cis_frame_hdr *h, const uint8_t *msg)
{
	Cis__HelloReply hr = CIS__HELLO_REPLY__INIT;
	ProtobufCMessage *m;
	uint32_t ver;

	if (cis_msg_unpack(&cis__hello__descriptor, msg, h->msg_len, &m) != 0) {
		server_reply_error(c, h, -CIS_E_PROTO, "malformed hello");
		conn_close_after_flush(c);
		return;
	}
	ver = ((Cis__Hello *)m)->protocol_version;
	protobuf_c_message_free_unpacked(m, NULL);
	if (ver != PROTOCOL_VERSION) {
		server_reply_error(c, h, -CIS_E_PROTO, "unsupported protocol version %u (want %u)",
		                   ver, PROTOCOL_VERSION);
		conn_close_after_flush(c);
		return;
	}
	c->hello_done = true;
	hr.protocol_version = PROTOCOL_VERSION;
	hr.server_name = c->t->srv->name;
	atomic_fetch_add(&c->inflight, 1);
	cis_rpc_reply(c, h, &hr.base, 0);
}

/* One complete frame at the head of in. Returns false when the connection
 * was closed or stops reading. */
static bool handle_frame(cis_rpc_conn *c, struct evbuffer *in, const cis_frame_hdr *h)
{
	cis_rpc_server *s = c->t->srv;
	uint8_t *msg = NULL;
	struct evbuffer *data;
	bool go_on = true;

	evbuffer_drain(in, CIS_FRAME_HDR_LEN);
	if (h->msg_len && !(msg = malloc(h->msg_len))) {
		conn_close(c);
		return false;
	}
	evbuffer_remove(in, msg, h->msg_len);
	data = evbuffer_new();
	if (!data) {
		free(msg);
		conn_close(c);
		return false;
	}
	evbuffer_remove_buffer(in, data, h->data_len);
	if (!c->hello_done) {
		if (h->type == CIS_MSG_HELLO) {
			handle_hello(c, h, msg);
		} else {
			count(s->bad_frames);
			cis_log_limited(CIS_LOG_WARN, "rpc-no-hello", 10,
			                "rpc connection did not start with hello",
			                "server=%s peer=%s type=%u", s->name, c->peer, h->type);
			server_reply_error(c, h, -CIS_E_PROTO, "expected hello as the first frame");
			conn_close_after_flush(c);
		}
		go_on = !c->closing;
	} else if (h->type == CIS_MSG_HELLO) {
		server_reply_error(c, h, -CIS_E_PROTO, "hello sent twice");
	} else if (h->type == CIS_MSG_PING) {
		ProtobufCMessage *ping;

		/* Answered here, echoing the nonce, so that it measures the
		 * connection and not the handler. */
		if (cis_msg_unpack(&cis__ping__descriptor, msg, h->msg_len, &ping) != 0) {
			server_reply_error(c, h, -CIS_E_PROTO, "malformed ping");
		} else {
			atomic_fetch_add(&c->inflight, 1);
			cis_rpc_reply(c, h, ping, 0);
			protobuf_c_message_free_unpacked(ping, NULL);
		}
	} else {
		atomic_fetch_add(&c->inflight, 1);
		s->handler(s->ctx, c, h, msg, data);
	}
	evbuffer_free(data);
	free(msg);
	return go_on && c->open;
}

/* Whether c has more output or unanswered requests than it may. */
static bool over_limits(cis_rpc_conn *c)
{
	pthread_mutex_lock(&c->lock);
	bool over = c->open && (evbuffer_get_length(bufferevent_get_output(c->bev)) > OUT_HIGH ||
	                        c->nheld > HELD_HIGH);
	pthread_mutex_unlock(&c->lock);
	return over || atomic_load(&c->inflight) >= INFLIGHT_HIGH;
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	cis_rpc_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	uint8_t hb[CIS_FRAME_HDR_LEN];
	cis_frame_hdr h;
	int r;

	bool progress = false; /* a whole frame was taken */

	cis_rpc_conn_ref(c); /* the handler may make us close */
	while (c->open && !c->closing) {
		size_t have = evbuffer_get_length(in);

		if (have < CIS_FRAME_HDR_LEN)
			break;
		if (over_limits(c)) {
			atomic_store(&c->throttled, true); /* write_cb reads on */
			bufferevent_disable(bev, EV_READ);
			break;
		}
		evbuffer_copyout(in, hb, sizeof(hb));
		r = cis_frame_hdr_decode(hb, sizeof(hb), &h);
		if (r) {
			conn_bad(c,
			         r == -CIS_E_TOOBIG ? "frame over the size limit" : "bad header");
			break;
		}
		if (h.flags & (CIS_FRAME_REPLY | CIS_FRAME_FD)) {
			conn_bad(c, "reply or fd flag on a request");
			break;
		}
		/* Limits are checked (decode) before the body is buffered; at
		 * most one frame (20 MiB) is held per connection. */
		if (have < CIS_FRAME_HDR_LEN + (size_t)h.msg_len + h.data_len)
			break;
		progress = true;
		if (!handle_frame(c, in, &h))
			break;
	}
	if (c->open && !c->closing && c->hello_done) {
		/* A frame partly in must come whole within the deadline, from
		 * when its first bytes came after the last whole frame (event_add
		 * starts the timer again); a connection not read (throttled) is
		 * not waiting for it. */
		bool partial = evbuffer_get_length(in) > 0 && !atomic_load(&c->throttled);

		if (!partial)
			event_del(c->deadline_ev);
		else if (progress || !event_pending(c->deadline_ev, EV_TIMEOUT, NULL))
			event_add(c->deadline_ev, &c->t->srv->frame_deadline);
	}
	cis_rpc_conn_unref(c);
}

/* The hello, or a frame begun, did not come in time. */
static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	cis_rpc_conn *c = arg;

	(void)fd;
	(void)what;
	if (!c->open || c->closing)
		return;
	count(c->t->srv->bad_frames);
	cis_log_limited(CIS_LOG_WARN, "rpc-deadline", 10, "rpc connection dropped",
	                "server=%s peer=%s reason=\"%s\"", c->t->srv->name, c->peer,
	                c->hello_done ? "a frame begun was not finished in time"
	                              : "no hello in time");
	conn_close(c);
}

static void write_cb(struct bufferevent *bev, void *arg)
{
	cis_rpc_conn *c = arg;

	pthread_mutex_lock(&c->lock);
	if (c->open && c->held && !c->broken)
		do_drain_held(c);
	bool broken = c->broken;
	pthread_mutex_unlock(&c->lock);
	if (broken || (c->closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0)) {
		conn_close(c);
		return;
	}
	if (atomic_load(&c->throttled) && c->open && !c->closing && !over_limits(c)) {
		atomic_store(&c->throttled, false);
		bufferevent_enable(bev, EV_READ);
		read_cb(bev, c); /* the frames that came meanwhile */
	}
}

/* The peer took none of our output for the write stall time. */
static void conn_stalled(cis_rpc_conn *c)
{
	cis_log_limited(
	    CIS_LOG_WARN, "rpc-write-stall", 10, "rpc connection dropped",
	    "server=%s peer=%s reason=\"took no replies for %.1f s\"", c->t->srv->name, c->peer,
	    (double)c->t->srv->write_stall.tv_sec + c->t->srv->write_stall.tv_usec / 1e6);
	conn_close(c);
}

static void wr_ready_cb(evutil_socket_t fd, short what, void *arg)
{
	cis_rpc_conn *c = arg;

	(void)fd;
	if ((what & EV_TIMEOUT) && !c->closing) {
		conn_stalled(c);
		return;
	}
	write_cb(c->bev, c);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	cis_rpc_conn *c = arg;

	if ((what & BEV_EVENT_TIMEOUT) && (what & BEV_EVENT_WRITING) && !c->closing) {
		conn_stalled(c);
		return;
	}
	if ((what & BEV_EVENT_TIMEOUT) && !c->closing && atomic_load(&c->inflight) > 0) {
		/* Not idle: the peer waits for our reply. */
		if (!atomic_load(&c->throttled))
			bufferevent_enable(bev, EV_READ);
		return;
	}
	conn_close(c);
}

static void conn_setup(struct io_thread *t, const struct pending_fd *p)
{
	cis_rpc_server *s = t->srv;
	cis_rpc_conn *c = calloc(1, sizeof(*c));
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int one = 1, fd = p->fd;
	bool local = p->local;

	if (!c)
		goto out_close;
	c->refs = 1;
	pthread_mutex_init(&c->lock, NULL);
	c->held_tail = &c->held;
	c->t = t;
	c->fd = fd;
	c->local = local;
	c->addr_counted = p->addr_counted;
	memcpy(c->addr, p->addr, 16);
	c->uid = -1;
	if (local) {
		struct ucred cr;
		socklen_t cl = sizeof(cr);

		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
			c->uid = (int)cr.uid;
		snprintf(c->peer, sizeof(c->peer), "unix");
	} else {
		char a[INET6_ADDRSTRLEN] = "?";
		unsigned port = 0;

		int idle = KEEPALIVE_IDLE_S, intvl = KEEPALIVE_INTVL_S, cnt = KEEPALIVE_CNT;

		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
		if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
			if (ss.ss_family == AF_INET) {
				struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

				inet_ntop(AF_INET, &sin->sin_addr, a, sizeof(a));
				port = ntohs(sin->sin_port);
			} else if (ss.ss_family == AF_INET6) {
				struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

				inet_ntop(AF_INET6, &sin6->sin6_addr, a, sizeof(a));
				port = ntohs(sin6->sin6_port);
			}
		}
		snprintf(c->peer, sizeof(c->peer), ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u",
		         a, port);
	}
	c->bev = bufferevent_socket_new(t->base, fd,
	                                BEV_OPT_CLOSE_ON_FREE | BEV_OPT_THREADSAFE |
	                                    BEV_OPT_DEFER_CALLBACKS | BEV_OPT_UNLOCK_CALLBACKS);
	if (!c->bev)
		goto out_free;
	c->wr_ev = event_new(t->base, fd, EV_WRITE, wr_ready_cb, c);
	if (!c->wr_ev)
		goto out_bev;
	c->deadline_ev = evtimer_new(t->base, deadline_cb, c);
	if (!c->deadline_ev) {
		event_free(c->wr_ev);
		goto out_bev;
	}
	event_add(c->deadline_ev, &s->hello_deadline);
	bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
	if (s->idle_timeout_ms > 0) {
		struct timeval tv = {s->idle_timeout_ms / 1000, (s->idle_timeout_ms % 1000) * 1000};

		bufferevent_set_timeouts(c->bev, &tv, &s->write_stall);
	} else {
		bufferevent_set_timeouts(c->bev, NULL, &s->write_stall);
	}
	c->open = true;
	c->next = t->conns;
	if (t->conns)
		t->conns->prev = c;
	t->conns = c;
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	return;

out_bev:
	bufferevent_free(c->bev); /* closes fd */
	pthread_mutex_destroy(&c->lock);
	free(c);
	slot_release(s, p->addr_counted, p->addr);
	return;
out_free:
	pthread_mutex_destroy(&c->lock);
	free(c);
out_close:
	close(fd);
	slot_release(s, p->addr_counted, p->addr);
}

/* ---- I/O threads ---- */

static void notify_cb(evutil_socket_t fd, short what, void *arg)
{
	struct io_thread *t = arg;
	struct pending_fd *p, *pn;
	uint64_t v;
	bool stop;

	(void)what;
	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		cis_warn("rpc eventfd read failed", "err=\"%s\"", strerror(errno));
	pthread_mutex_lock(&t->qlock);
	p = t->q;
	t->q = NULL;
	stop = t->stop;
	pthread_mutex_unlock(&t->qlock);
	for (; p; p = pn) {
		pn = p->next;
		if (stop) {
			close(p->fd);
			slot_release(t->srv, p->addr_counted, p->addr);
		} else {
			conn_setup(t, p);
		}
		free(p);
	}
	if (stop) {
		while (t->conns)
			conn_close(t->conns);
		event_base_loopbreak(t->base);
	}
}

static void *io_thread_main(void *arg)
{
	struct io_thread *t = arg;

	event_base_dispatch(t->base);
	return NULL;
}

static void io_thread_kick(struct io_thread *t)
{
	uint64_t one = 1;

	if (write(t->efd, &one, sizeof(one)) < 0)
		cis_warn("rpc eventfd write failed", "err=\"%s\"", strerror(errno));
}

void cis_rpc_raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* ---- listener ---- */

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int sl,
                      void *arg)
{
	cis_rpc_server *s = arg;
	struct io_thread *t;
	struct pending_fd *p;
	uint8_t addr[16];
	bool by_addr = l != s->unix_l && sl > 0 && addr_key(sa, addr);

	if (atomic_fetch_add(&s->nconns, 1) >= s->max_conns) {
		atomic_fetch_sub(&s->nconns, 1);
		count(s->refused_conns);
		cis_log_limited(CIS_LOG_WARN, "rpc-max-conns", 10,
		                "rpc connection refused: too many connections", "server=%s max=%zu",
		                s->name, s->max_conns);
		close(fd);
		return;
	}
	if (by_addr && !addr_take(s, addr)) {
		atomic_fetch_sub(&s->nconns, 1);
		count(s->refused_conns);
		char a[INET6_ADDRSTRLEN] = "?";
		inet_ntop(AF_INET6, addr, a, sizeof(a));
		cis_log_limited(CIS_LOG_WARN, "rpc-max-per-addr", 10,
		                "rpc connection refused: too many connections from one address",
		                "server=%s peer=%s max=%zu", s->name, a, s->max_per_addr);
		close(fd);
		return;
	}
	p = malloc(sizeof(*p));
	if (!p) {
		slot_release(s, by_addr, addr);
		close(fd);
		return;
	}
	p->fd = fd;
	p->local = l == s->unix_l;
	p->addr_counted = by_addr;
	memset(p->addr, 0, sizeof(p->addr));
	if (by_addr)
		memcpy(p->addr, addr, sizeof(p->addr));
	t = &s->threads[s->next_thread++ % (unsigned)s->nthreads];
	pthread_mutex_lock(&t->qlock);
	p->next = t->q;
	t->q = p;
	pthread_mutex_unlock(&t->qlock);
	io_thread_kick(t);
}

static void lstop_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	event_base_loopbreak(arg);
}

static void *listener_main(void *arg)
{
	cis_rpc_server *s = arg;

	event_base_dispatch(s->lbase);
	return NULL;
}

/* A Unix listening socket at path; a stale socket file (nobody accepting)
 * is replaced, a live one is EADDRINUSE. Mode 0666: any local user may
 * connect; servers decide per request with cis_rpc_conn_peer_uid(). */
static int listen_unix(const char *path, int *out, cis_errmsg *em)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return cis_fail(em, -ENAMETOOLONG, "unix socket %s: path too long", path);
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return cis_fail(em, -errno, "unix socket %s: %s", path, strerror(errno));
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			close(fd);
			return cis_fail(em, -EADDRINUSE, "unix socket %s: in use by another server",
			                path);
		}
		if (probe >= 0)
			close(probe);
		unlink(path);
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1024) < 0) {
		r = -errno;
		close(fd);
		return cis_fail(em, r, "bind unix socket %s: %s", path, strerror(-r));
	}
	/* Any local user's client may connect; requests are checked per peer uid. */
	if (chmod(path, 0666) < 0) {
		r = -errno;
		close(fd);
		return cis_fail(em, r, "chmod unix socket %s: %s", path, strerror(-r));
	}
	*out = fd;
	return 0;
}

/* ---- start and stop ---- */

static void free_threads(cis_rpc_server *s)
{
	for (int i = 0; i < s->nthreads; i++) {
		struct io_thread *t = &s->threads[i];
		struct pending_fd *p, *pn;

		for (p = t->q; p; p = pn) {
			pn = p->next;
			close(p->fd);
			free(p);
		}
		if (t->notify_ev)
			event_free(t->notify_ev);
		if (t->base)
			event_base_free(t->base);
		if (t->efd >= 0)
			close(t->efd);
		pthread_mutex_destroy(&t->qlock);
	}
	free(s->threads);
}

static void free_server(cis_rpc_server *s)
{
	if (s->tcp_l)
		evconnlistener_free(s->tcp_l);
	if (s->unix_l) {
		evconnlistener_free(s->unix_l);
		unlink(s->unix_path);
	}
	if (s->lstop_ev)
		event_free(s->lstop_ev);
	if (s->lbase)
		event_base_free(s->lbase);
	if (s->threads)
		free_threads(s);
	free(s->addrs);
	pthread_mutex_destroy(&s->addrs_lock);
	free(s->name);
	free(s->unix_path);
	free(s);
}

static void stop_threads(cis_rpc_server *s, int n)
{
	for (int i = 0; i < n; i++) {
		struct io_thread *t = &s->threads[i];

		pthread_mutex_lock(&t->qlock);
		t->stop = true;
		pthread_mutex_unlock(&t->qlock);
		io_thread_kick(t);
	}
	for (int i = 0; i < n; i++)
		pthread_join(s->threads[i].tid, NULL);
}

int cis_rpc_server_start(const cis_rpc_server_opts *o, cis_rpc_server **out, cis_errmsg *em)
{
	cis_rpc_server *s;
	int r = -ENOMEM, fd, i, started = 0;
	const unsigned lflags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC;

	*out = NULL;
	if (!o->handler || o->io_threads < 1 || (!o->bind_addr && !o->unix_path))
		return cis_fail(em, -EINVAL,
		                "rpc server: need a handler, io_threads >= 1 and an "
		                "address");
	cis_net_threads_init();
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->handler = o->handler;
	s->ctx = o->ctx;
	s->name = strdup(o->name ? o->name : "rpc");
	s->unix_path = o->unix_path ? strdup(o->unix_path) : NULL;
	s->max_conns = o->max_conns ? o->max_conns : DEFAULT_MAX_CONNS;
	s->max_per_addr = o->max_conns_per_addr ? o->max_conns_per_addr
	                                        : (s->max_conns / 4 ? s->max_conns / 4 : 1);
	pthread_mutex_init(&s->addrs_lock, NULL);
	s->idle_timeout_ms = o->idle_timeout_ms;
	int stall_ms = o->write_stall_ms > 0 ? o->write_stall_ms : DEFAULT_WRITE_STALL_MS;
	s->write_stall = (struct timeval){stall_ms / 1000, (stall_ms % 1000) * 1000};
	int hello_ms = o->hello_timeout_ms > 0 ? o->hello_timeout_ms : DEFAULT_HELLO_MS;
	s->hello_deadline = (struct timeval){hello_ms / 1000, (hello_ms % 1000) * 1000};
	s->frame_deadline = (struct timeval){3 * hello_ms / 1000, (3 * hello_ms % 1000) * 1000};
	s->bad_frames = o->bad_frames;
	s->refused_conns = o->refused_conns;
	s->threads = calloc((size_t)o->io_threads, sizeof(*s->threads));
	/* Each made ready for free_threads before anything can fail. */
	for (i = 0; s->threads && i < o->io_threads; i++) {
		struct io_thread *t = &s->threads[i];

		t->srv = s;
		t->efd = -1;
		pthread_mutex_init(&t->qlock, NULL);
		s->nthreads = i + 1;
	}
	s->lbase = event_base_new();
	if (!s->name || (o->unix_path && !s->unix_path) || !s->threads || !s->lbase)
		goto out_free;
	if (o->bind_addr) {
		r = cis_net_listen_tcp(o->bind_addr, o->port, &fd, &s->port, em);
		if (r)
			goto out_free;
		s->tcp_l = evconnlistener_new(s->lbase, accept_cb, s, lflags, -1, fd);
		if (!s->tcp_l) {
			close(fd);
			r = cis_fail(em, -ENOMEM, "rpc listener on %s:%u", o->bind_addr, s->port);
			goto out_free;
		}
		cis_net_listener_pause_on_error(s->tcp_l);
	}
	if (o->unix_path) {
		r = listen_unix(o->unix_path, &fd, em);
		if (r) {
			free(s->unix_path);
			s->unix_path = NULL; /* not ours to unlink */
			goto out_free;
		}
		s->unix_l = evconnlistener_new(s->lbase, accept_cb, s, lflags, -1, fd);
		if (!s->unix_l) {
			close(fd);
			r = cis_fail(em, -ENOMEM, "rpc listener on %s", o->unix_path);
			goto out_free;
		}
		cis_net_listener_pause_on_error(s->unix_l);
	}
	r = -ENOMEM;
	s->lstop_ev = event_new(s->lbase, -1, 0, lstop_cb, s->lbase);
	if (!s->lstop_ev)
		goto out_free;
	for (i = 0; i < s->nthreads; i++) {
		struct io_thread *t = &s->threads[i];

		t->base = event_base_new();
		t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (!t->base || t->efd < 0)
			goto out_free;
		t->notify_ev = event_new(t->base, t->efd, EV_READ | EV_PERSIST, notify_cb, t);
		if (!t->notify_ev || event_add(t->notify_ev, NULL))
			goto out_free;
	}
	for (i = 0; i < s->nthreads; i++, started++) {
		r = -pthread_create(&s->threads[i].tid, NULL, io_thread_main, &s->threads[i]);
		if (r) {
			cis_fail(em, r, "rpc server: cannot start thread");
			goto out_stop;
		}
	}
	r = -pthread_create(&s->ltid, NULL, listener_main, s);
	if (r) {
		cis_fail(em, r, "rpc server: cannot start thread");
		goto out_stop;
	}
	s->lstarted = true;
	*out = s;
	return 0;

out_stop:
	stop_threads(s, started);
out_free:
	free_server(s);
	return r;
}

uint16_t cis_rpc_server_port(const cis_rpc_server *s)
{
	return s->port;
}

void cis_rpc_server_stop(cis_rpc_server *s)
{
	if (!s)
		return;
	/* The listener first, so that no new connection is handed over. */
	event_active(s->lstop_ev, EV_READ, 1);
	pthread_join(s->ltid, NULL);
	stop_threads(s, s->nthreads);
	free_server(s);
}
