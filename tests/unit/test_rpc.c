/* RPC server and client in one process. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <event2/buffer.h>

#include "cistern/msgtype.h"
#include "cistern/proto/common.pb-c.h"
#include "cistern/rpc.h"
#include "cistern/time.h"

enum {
	T_ECHO = 150,
	T_STREAM,
	T_FILE,
	T_FD,
	T_ERROR,
	T_NOREPLY,
	T_LATER,
	T_SLOW,     /* like T_LATER, after 600 ms */
	T_FDLIST,   /* queued on fd_list; fd_replier answers with the file's fd */
	T_UPSTREAM, /* an error reply with the code of a failed connect of its own */
};

#define FILE_LEN (3u << 20)

static cis_rpc_server *srv;
static char sock_path[64];
static char file_path[64];
static uint8_t *file_bytes;
static int file_fd = -1;

static atomic_int file_calls; /* T_FILE requests handled */

/* T_FDLIST requests waiting for fd_replier. */
static struct fd_req {
	struct fd_req *next;
	cis_rpc_conn *conn;
	cis_frame_hdr hdr;
} * fd_list;
static pthread_mutex_t fd_list_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t nonce_of(const cis_frame_hdr *h, const uint8_t *msg)
{
	ProtobufCMessage *m;
	uint64_t n;

	if (cis_msg_unpack(&cis__ping__descriptor, msg, h->msg_len, &m))
		return 0;
	n = ((Cis__Ping *)m)->nonce;
	protobuf_c_message_free_unpacked(m, NULL);
	return n;
}

struct later {
	cis_rpc_conn *conn;
	cis_frame_hdr hdr;
	uint64_t nonce;
	uint64_t delay_ms;
};

static void *reply_later(void *arg)
{
	struct later *l = arg;
	Cis__Ping p = CIS__PING__INIT;

	cis_sleep_ms(l->delay_ms);
	p.nonce = l->nonce + 1;
	cis_rpc_reply(l->conn, &l->hdr, &p.base, 0);
	cis_rpc_conn_unref(l->conn);
	free(l);
	return NULL;
}

static void handler(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *h, const uint8_t *msg,
                    struct evbuffer *data)
{
	Cis__Ping p = CIS__PING__INIT;
	uint64_t nonce = nonce_of(h, msg);
	char buf[64];

	(void)ctx;
	p.nonce = nonce;
	switch (h->type) {
	case T_ECHO: {
		size_t n = evbuffer_get_length(data);

		cis_rpc_reply_data(conn, h, &p.base, evbuffer_pullup(data, -1), n, 0);
		break;
	}
	case T_STREAM:
		for (int i = 0; i < 5; i++) {
			int len = snprintf(buf, sizeof(buf), "chunk %d", i);

			p.nonce = (uint64_t)i;
			cis_rpc_reply_data(conn, h, &p.base, buf, (size_t)len,
			                   i < 4 ? CIS_FRAME_MORE : 0);
		}
		break;
	case T_FILE:
		atomic_fetch_add(&file_calls, 1);
		cr_assert_eq(
		    cis_rpc_reply_file(conn, h, &p.base, file_fd, 1000, FILE_LEN - 2000, 0), 0);
		break;
	case T_FD: {
		int r = cis_rpc_reply_fd(conn, h, &p.base, file_fd);

		if (r)
			cis_rpc_reply_error(conn, h, r, "reply_fd: %s", cis_strerror(r));
		break;
	}
	case T_ERROR:
		cis_rpc_reply_error(conn, h, -ENOENT, "/x/%llu: not found",
		                    (unsigned long long)nonce);
		break;
	case T_UPSTREAM:
		cis_rpc_reply_error(conn, h, -ECONNREFUSED,
		                    "get mount from master: connection refused");
		break;
	case T_NOREPLY:
		break;
	case T_FDLIST: {
		struct fd_req *r = malloc(sizeof(*r));
		cr_assert(r);
		r->conn = conn;
		r->hdr = *h;
		cis_rpc_conn_ref(conn);
		pthread_mutex_lock(&fd_list_lock);
		r->next = fd_list;
		fd_list = r;
		pthread_mutex_unlock(&fd_list_lock);
		break;
	}
	case T_LATER:
	case T_SLOW: {
		struct later *l = malloc(sizeof(*l));
		pthread_t t;

		l->conn = conn;
		l->hdr = *h;
		l->nonce = nonce;
		l->delay_ms = h->type == T_SLOW ? 600 : 20;
		cis_rpc_conn_ref(conn);
		pthread_create(&t, NULL, reply_later, l);
		pthread_detach(t);
		break;
	}
	default:
		cis_rpc_reply_error(conn, h, -ENOTSUP, "unknown type %u", h->type);
	}
}

static cis_rpc_server *start_server(uint16_t port)
{
	cis_rpc_server_opts o = {.bind_addr = "127.0.0.1",
	                         .port = port,
	                         .unix_path = sock_path,
	                         .io_threads = 2,
	                         .name = "test",
	                         .handler = handler};
	cis_errmsg em = {{0}};
	cis_rpc_server *s;

	cr_assert_eq(cis_rpc_server_start(&o, &s, &em), 0, "%s", em.text);
	return s;
}

static void setup(void)
{
	snprintf(sock_path, sizeof(sock_path), "/tmp/cis-test-rpc-%d.sock", getpid());
	snprintf(file_path, sizeof(file_path), "/tmp/cis-test-rpc-%d.dat", getpid());
	file_bytes = malloc(FILE_LEN);
	for (size_t i = 0; i < FILE_LEN; i++)
		file_bytes[i] = (uint8_t)(i * 7 + (i >> 11));
	file_fd = open(file_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(file_fd, 0);
	cr_assert_eq(write(file_fd, file_bytes, FILE_LEN), (ssize_t)FILE_LEN);
	srv = start_server(0);
}

static void teardown(void)
{
	cis_rpc_server_stop(srv);
	close(file_fd);
	unlink(file_path);
	free(file_bytes);
}

static cis_rpc_client *client(bool unix_sock)
{
	cis_rpc_client_opts o = {.host = "127.0.0.1",
	                         .port = cis_rpc_server_port(srv),
	                         .unix_path = unix_sock ? sock_path : NULL,
	                         .name = "test-client",
	                         .connect_timeout_ms = 2000,
	                         .call_timeout_ms = 5000};
	cis_rpc_client *c;

	if (unix_sock)
		o.host = NULL;
	cr_assert_eq(cis_rpc_client_new(&o, &c), 0);
	return c;
}

static int echo(cis_rpc_client *c, uint64_t nonce, const char *data, cis_errmsg *em)
{
	Cis__Ping p = CIS__PING__INIT;
	cis_rpc_result res;
	int r;

	p.nonce = nonce;
	r = cis_rpc_call(c, T_ECHO, &p.base, data, data ? strlen(data) : 0, &res, 0, em);
	if (r)
		return r;
	cr_assert_eq(res.hdr.type, T_ECHO);
	cr_assert(res.hdr.flags & CIS_FRAME_REPLY);
	cr_assert_eq(nonce_of(&res.hdr, res.msg), nonce);
	cr_assert_eq(res.data_len, data ? strlen(data) : 0);
	if (data)
		cr_assert_arr_eq(res.data, data, strlen(data));
	cr_assert_eq(res.fd, -1);
	cis_rpc_result_free(&res);
	return 0;
}

TestSuite(rpc, .init = setup, .fini = teardown, .timeout = 60);

Test(rpc, hello_ping_and_echo)
{
	cis_rpc_client *c = client(false);
	Cis__Ping p = CIS__PING__INIT;
	cis_errmsg em = {{0}};
	cis_rpc_result res;

	p.nonce = 0xdeadbeef;
	cr_assert_eq(cis_rpc_call(c, CIS_MSG_PING, &p.base, NULL, 0, &res, 0, &em), 0, "%s",
	             em.text);
	cr_assert_eq(nonce_of(&res.hdr, res.msg), 0xdeadbeef);
	cis_rpc_result_free(&res);
	cr_assert_eq(echo(c, 7, "hello world", &em), 0, "%s", em.text);
	cr_assert_eq(echo(c, 8, NULL, &em), 0, "%s", em.text);
	cis_rpc_client_free(c);
}

struct worker_arg {
	cis_rpc_client *c;
	int id;
	int failures;
};

static void *caller(void *arg)
{
	struct worker_arg *w = arg;
	char data[64];

	for (int i = 0; i < 20; i++) {
		uint64_t n = (uint64_t)w->id * 1000 + (uint64_t)i;

		snprintf(data, sizeof(data), "caller %d call %d", w->id, i);
		if (echo(w->c, n, data, NULL) != 0)
			w->failures++;
	}
	return NULL;
}

Test(rpc, concurrent_callers_pipelined)
{
	cis_rpc_client *c = client(false);
	struct worker_arg w[64];
	pthread_t t[64];

	for (int i = 0; i < 64; i++) {
		w[i] = (struct worker_arg){c, i + 1, 0};
		pthread_create(&t[i], NULL, caller, &w[i]);
	}
	for (int i = 0; i < 64; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(w[i].failures, 0, "caller %d", i);
	}
	cis_rpc_client_free(c);
}

struct stream_acc {
	int frames;
	int stop_after;
	char text[256];
};

static int on_frame(void *arg, const cis_frame_hdr *h, const uint8_t *msg, const uint8_t *data)
{
	struct stream_acc *a = arg;

	cr_assert_eq(nonce_of(h, msg), (uint64_t)a->frames);
	cr_assert_eq(!!(h->flags & CIS_FRAME_MORE), a->frames < 4);
	strncat(a->text, (const char *)data, h->data_len);
	strcat(a->text, "|");
	a->frames++;
	return a->frames == a->stop_after ? -ECANCELED : 0;
}

Test(rpc, streamed_reply)
{
	cis_rpc_client *c = client(false);
	struct stream_acc a = {0};
	cis_errmsg em = {{0}};

	cr_assert_eq(cis_rpc_call_stream(c, T_STREAM, NULL, on_frame, &a, 0, &em), 0, "%s",
	             em.text);
	cr_assert_eq(a.frames, 5);
	cr_assert_str_eq(a.text, "chunk 0|chunk 1|chunk 2|chunk 3|chunk 4|");
	/* Abandoning midway: the rest is discarded, the connection goes on. */
	memset(&a, 0, sizeof(a));
	a.stop_after = 2;
	cr_assert_eq(cis_rpc_call_stream(c, T_STREAM, NULL, on_frame, &a, 0, &em), -ECANCELED);
	cr_assert_eq(a.frames, 2);
	cr_assert_eq(echo(c, 1, "after", &em), 0, "%s", em.text);
	cis_rpc_client_free(c);
}

Test(rpc, file_reply_byte_for_byte)
{
	cis_rpc_client *c = client(false);
	cis_errmsg em = {{0}};
	cis_rpc_result res;

	for (int i = 0; i < 3; i++) {
		cr_assert_eq(cis_rpc_call(c, T_FILE, NULL, NULL, 0, &res, 0, &em), 0, "%s",
		             em.text);
		cr_assert_eq(res.data_len, FILE_LEN - 2000);
		cr_assert(memcmp(res.data, file_bytes + 1000, FILE_LEN - 2000) == 0);
		cis_rpc_result_free(&res);
	}
	cis_rpc_client_free(c);
}

Test(rpc, fd_passing_over_unix_socket)
{
	cis_rpc_client *c = client(true);
	cis_errmsg em = {{0}};
	cis_rpc_result res;
	uint8_t buf[4096];

	for (int i = 0; i < 5; i++) {
		/* Interleave fd replies with ordinary ones on one connection. */
		cr_assert_eq(echo(c, (uint64_t)i, "x", &em), 0, "%s", em.text);
		cr_assert_eq(cis_rpc_call(c, T_FD, NULL, NULL, 0, &res, 0, &em), 0, "%s", em.text);
		cr_assert_geq(res.fd, 0);
		cr_assert(res.hdr.flags & CIS_FRAME_FD);
		cr_assert_eq(pread(res.fd, buf, sizeof(buf), 5000), (ssize_t)sizeof(buf));
		cr_assert_arr_eq(buf, file_bytes + 5000, sizeof(buf));
		cis_rpc_result_free(&res);
		cr_assert_eq(res.fd, -1);
	}
	cis_rpc_client_free(c);
	/* Over TCP the server refuses: -EOPNOTSUPP comes back as an error. */
	c = client(false);
	cr_assert_eq(cis_rpc_call(c, T_FD, NULL, NULL, 0, &res, 0, &em), -EOPNOTSUPP);
	cis_rpc_client_free(c);
}

Test(rpc, error_reply_code_and_message)
{
	cis_rpc_client *c = client(false);
	Cis__Ping p = CIS__PING__INIT;
	cis_errmsg em = {{0}};
	cis_rpc_result res;

	p.nonce = 42;
	cr_assert_eq(cis_rpc_call(c, T_ERROR, &p.base, NULL, 0, &res, 0, &em), -ENOENT);
	cr_assert_str_eq(em.text, "/x/42: not found");
	cr_assert_eq(cis_rpc_call(c, 999, NULL, NULL, 0, &res, 0, &em), -ENOTSUP);
	cr_assert_eq(echo(c, 1, "still fine", &em), 0, "%s", em.text);
	cis_rpc_client_free(c);
}

/* A server that answers with a code of a failed connect of its own (a
 * worker whose master is away) is not taken for unreachable: the client
 * gets -CIS_E_UPSTREAM with the server's message (a FUSE client skipped
 * such a worker, healthy and holding the blocks, for 10 s). */
Test(rpc, a_peers_own_connect_failure_is_not_the_clients)
{
	cis_rpc_client *c = client(false);
	Cis__Ping p = CIS__PING__INIT;
	cis_errmsg em = {{0}};
	cis_rpc_result res;

	int r = cis_rpc_call(c, T_UPSTREAM, &p.base, NULL, 0, &res, 0, &em);
	cr_assert_eq(r, -CIS_E_UPSTREAM, "got %d", r);
	cr_assert_not(cis_rpc_unreachable(r));
	cr_assert_str_eq(em.text, "get mount from master: connection refused");
	cr_assert(cis_rpc_unreachable(-ECONNREFUSED) && cis_rpc_unreachable(-CIS_E_CLOSED));
	cis_rpc_client_free(c);
}

Test(rpc, reply_later_from_another_thread)
{
	cis_rpc_client *c = client(false);
	Cis__Ping p = CIS__PING__INIT;
	cis_errmsg em = {{0}};
	cis_rpc_result res;

	p.nonce = 10;
	cr_assert_eq(cis_rpc_call(c, T_LATER, &p.base, NULL, 0, &res, 0, &em), 0, "%s", em.text);
	cr_assert_eq(nonce_of(&res.hdr, res.msg), 11);
	cis_rpc_result_free(&res);
	cis_rpc_client_free(c);
}

Test(rpc, timeout_then_next_call_works)
{
	cis_rpc_client *c = client(false);
	cis_errmsg em = {{0}};
	cis_rpc_result res;

	cr_assert_eq(echo(c, 1, "a", &em), 0, "%s", em.text);
	cr_assert_eq(cis_rpc_call(c, T_NOREPLY, NULL, NULL, 0, &res, 200, &em), -ETIMEDOUT);
	cr_assert_not_null(strstr(em.text, "timed out"), "%s", em.text);
	cr_assert_eq(echo(c, 2, "b", &em), 0, "%s", em.text);
	cis_rpc_client_free(c);
}

/* A call of type on c, made on a thread of its own. */
struct bg_call {
	cis_rpc_client *c;
	uint16_t type;
	int timeout_ms;
	int rc;
	uint64_t nonce;
	cis_errmsg em;
};

static void *call_in_background(void *arg)
{
	struct bg_call *s = arg;
	Cis__Ping p = CIS__PING__INIT;
	cis_rpc_result res;

	p.nonce = 40;
	s->rc = cis_rpc_call(s->c, s->type, &p.base, NULL, 0, &res, s->timeout_ms, &s->em);
	if (s->rc == 0) {
		s->nonce = nonce_of(&res.hdr, res.msg);
		cis_rpc_result_free(&res);
	}
	return NULL;
}

/* One call timing out on a silent connection must not fail another call
 * on it that is still within its deadline (the connection is slow for one
 * request, not dead). */
Test(rpc, timeout_spares_calls_still_waiting)
{
	struct bg_call s = {.c = client(true), .type = T_SLOW, .timeout_ms = 5000};
	cis_errmsg em = {{0}};
	cis_rpc_result res;
	pthread_t t;

	cr_assert_eq(echo(s.c, 1, "a", &em), 0, "%s", em.text);
	cr_assert_eq(pthread_create(&t, NULL, call_in_background, &s), 0);
	cis_sleep_ms(50); /* the slow call is sent first */
	cr_assert_eq(cis_rpc_call(s.c, T_NOREPLY, NULL, NULL, 0, &res, 200, &em), -ETIMEDOUT);
	pthread_join(t, NULL);
	cr_assert_eq(s.rc, 0, "the slow call failed: %s", s.em.text);
	cr_assert_eq(s.nonce, 41);
	cis_rpc_client_free(s.c);
}

/* A stopping process closes its client: a call waiting on a server that
 * never answers fails at once, not at its 10 s timeout, and so does every
 * later call, without connecting again. */
Test(rpc, close_ends_calls_in_flight_and_refuses_new_ones)
{
	struct bg_call s = {.c = client(false), .type = T_NOREPLY, .timeout_ms = 10000};
	cis_errmsg em = {{0}};
	uint64_t t0;
	pthread_t t;
	int r;

	cr_assert_eq(echo(s.c, 1, "a", &em), 0, "%s", em.text);
	cr_assert_eq(pthread_create(&t, NULL, call_in_background, &s), 0);
	cis_sleep_ms(100); /* the call is sent and waits */
	t0 = cis_mono_ms();
	cis_rpc_client_close(s.c);
	pthread_join(t, NULL);
	cr_assert_lt(cis_mono_ms() - t0, 2000, "the waiting call outlived the close");
	cr_assert(s.rc == -CIS_E_CLOSED || s.rc == -ECANCELED, "got %d %s", s.rc, s.em.text);
	r = echo(s.c, 2, "after", &em);
	cr_assert_eq(r, -ECANCELED, "a call after the close got %d %s", r, em.text);
	cr_assert_not_null(strstr(em.text, "stopping"), "%s", em.text);
	cis_rpc_client_free(s.c);
}

Test(rpc, server_restart_client_reconnects)
{
	cis_rpc_client *c = client(false);
	uint16_t port = cis_rpc_server_port(srv);
	cis_errmsg em = {{0}};
	int r = -1;

	cr_assert_eq(echo(c, 1, "before", &em), 0, "%s", em.text);
	cis_rpc_server_stop(srv);
	r = echo(c, 2, "down", &em);
	cr_assert(r == -CIS_E_CLOSED || r == -ECONNREFUSED, "got %d %s", r, em.text);
	srv = start_server(port);
	/* Bounded retries across the client's back-off (at most 5 s). */
	for (int i = 0; i < 100 && r != 0; i++) {
		r = echo(c, 3, "after", &em);
		if (r)
			cis_sleep_ms(100);
	}
	cr_assert_eq(r, 0, "%s", em.text);
	cis_rpc_client_free(c);
}

/* After a long outage the client's back-off is at most 1 s: a server back
 * up is used again within about a second (at 5 s, a FUSE client refused
 * lookups for seconds after its master had restarted). */
Test(rpc, a_server_back_after_a_long_outage_is_used_within_a_second)
{
	cis_rpc_client *c = client(false);
	uint16_t port = cis_rpc_server_port(srv);
	cis_errmsg em = {{0}};
	int r;

	cr_assert_eq(echo(c, 1, "before", &em), 0, "%s", em.text);
	cis_rpc_server_stop(srv);
	srv = NULL;
	/* 3.5 s of calls every 50 ms: the back-off grows to its cap. */
	for (uint64_t end = cis_mono_ms() + 3500; cis_mono_ms() < end;) {
		cr_assert_neq(echo(c, 2, "down", &em), 0);
		cis_sleep_ms(50);
	}
	srv = start_server(port);
	uint64_t back = cis_mono_ms();
	do {
		r = echo(c, 3, "after", &em);
		if (r)
			cis_sleep_ms(20);
	} while (r && cis_mono_ms() < back + 3000);
	cr_assert_eq(r, 0, "%s", em.text);
	uint64_t took = cis_mono_ms() - back;
	cr_assert_leq(took, 1500, "the first call through came %llu ms after the server",
	              (unsigned long long)took);
	cis_rpc_client_free(c);
}

Test(rpc, connection_refused)
{
	cis_rpc_client_opts o = {.host = "127.0.0.1", .port = 1, .name = "t"};
	cis_rpc_client *c;
	cis_errmsg em = {{0}};
	int r;

	cr_assert_eq(cis_rpc_client_new(&o, &c), 0);
	cr_assert_eq(echo(c, 1, NULL, &em), -ECONNREFUSED);
	cr_assert_not_null(strstr(em.text, "127.0.0.1:1"), "%s", em.text);
	/* Within the back-off the same error comes back at once. */
	r = echo(c, 1, NULL, &em);
	cr_assert_eq(r, -ECONNREFUSED);
	cis_rpc_client_free(c);
}

/* A "server" that answers the hello with a reply header announcing 100
 * bytes and then sends one byte every 100 ms (arg: the listening socket). */
static void *trickle_hello(void *arg)
{
	int lfd = *(int *)arg;
	int fd = accept(lfd, NULL, NULL);
	uint8_t hb[CIS_FRAME_HDR_LEN], junk[256];
	cis_frame_hdr h = {.type = CIS_MSG_HELLO, .flags = CIS_FRAME_REPLY, .msg_len = 100};

	if (fd < 0)
		return NULL;
	(void)!read(fd, junk, sizeof(junk));
	cis_frame_hdr_encode(&h, hb);
	/* send, not write: the client hangs up mid-way (no SIGPIPE). */
	if (send(fd, hb, sizeof(hb), MSG_NOSIGNAL) == (ssize_t)sizeof(hb))
		for (int i = 0; i < 100 && send(fd, "x", 1, MSG_NOSIGNAL) == 1; i++)
			usleep(100 * 1000);
	close(fd);
	return NULL;
}

/* The hello's reply is bounded as a whole by the connect timeout, not per
 * receive: a peer that trickles it held every caller waiting to connect
 * for as long as it went on. */
Test(rpc, a_hello_reply_trickled_in_times_out)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	pthread_t th;
	cis_rpc_client *c;
	cis_errmsg em = {{0}};

	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(lfd, 4), 0);
	cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
	cr_assert_eq(pthread_create(&th, NULL, trickle_hello, &lfd), 0);
	cis_rpc_client_opts o = {.host = "127.0.0.1",
	                         .port = ntohs(sa.sin_port),
	                         .name = "t",
	                         .connect_timeout_ms = 500,
	                         .call_timeout_ms = 5000};
	cr_assert_eq(cis_rpc_client_new(&o, &c), 0);
	uint64_t t0 = cis_mono_ms();
	cr_assert_eq(echo(c, 1, NULL, &em), -ETIMEDOUT, "%s", em.text);
	cr_assert_lt(cis_mono_ms() - t0, 2000, "the hello took %llu ms",
	             (unsigned long long)(cis_mono_ms() - t0));
	cis_rpc_client_free(c);
	pthread_join(th, NULL);
	close(lfd);
}

/* A raw TCP connection to the server. */
static int raw_conn(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_port = htons(cis_rpc_server_port(srv))};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval tv = {10, 0};

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Read until EOF; returns the bytes read (the server must close). */
static size_t drain_until_close(int fd, uint8_t *buf, size_t cap)
{
	size_t got = 0;
	ssize_t n;

	while ((n = read(fd, buf + got, cap - got)) > 0)
		got += (size_t)n;
	cr_assert_eq(n, 0, "server did not close the connection");
	return got;
}

static void send_hdr(int fd, uint16_t type, uint32_t msg_len, uint32_t data_len)
{
	cis_frame_hdr h = {.type = type, .msg_len = msg_len, .data_len = data_len, .req_id = 9};
	uint8_t b[CIS_FRAME_HDR_LEN];

	cis_frame_hdr_encode(&h, b);
	cr_assert_eq(write(fd, b, sizeof(b)), (ssize_t)sizeof(b));
}

Test(rpc, garbage_closes_only_that_connection)
{
	cis_rpc_client *c = client(false);
	cis_errmsg em = {{0}};
	uint8_t buf[256];
	int fd;

	cr_assert_eq(echo(c, 1, "a", &em), 0, "%s", em.text);
	fd = raw_conn();
	cr_assert_eq(write(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27), 27);
	cr_assert_eq(drain_until_close(fd, buf, sizeof(buf)), 0);
	close(fd);
	cr_assert_eq(echo(c, 2, "b", &em), 0, "%s", em.text);
	cis_rpc_client_free(c);
}

Test(rpc, non_hello_first_frame_gets_error_then_close)
{
	cis_rpc_client *c = client(false);
	cis_errmsg em = {{0}};
	uint8_t buf[512];
	cis_frame_hdr h;
	size_t n;
	int fd = raw_conn();

	send_hdr(fd, CIS_MSG_PING, 0, 0);
	n = drain_until_close(fd, buf, sizeof(buf));
	close(fd);
	cr_assert_geq(n, CIS_FRAME_HDR_LEN);
	cr_assert_eq(cis_frame_hdr_decode(buf, n, &h), 0);
	cr_assert_eq(h.flags & (CIS_FRAME_REPLY | CIS_FRAME_ERROR),
	             CIS_FRAME_REPLY | CIS_FRAME_ERROR);
	cr_assert_eq(h.req_id, 9);
	cr_assert_eq(echo(c, 2, "b", &em), 0, "%s", em.text);
	cis_rpc_client_free(c);
}

Test(rpc, oversized_frame_closes_connection)
{
	Cis__Hello hello = CIS__HELLO__INIT;
	uint8_t buf[512], *mb;
	size_t mlen, n;
	cis_frame_hdr h;
	int fd = raw_conn();
	cis_rpc_client *c = client(false);
	cis_errmsg em = {{0}};
	cis_rpc_result res;

	hello.protocol_version = 1;
	cr_assert_eq(cis_msg_pack(&hello.base, &mb, &mlen), 0);
	send_hdr(fd, CIS_MSG_HELLO, (uint32_t)mlen, 0);
	cr_assert_eq(write(fd, mb, mlen), (ssize_t)mlen);
	free(mb);
	send_hdr(fd, T_ECHO, 0, CIS_FRAME_MAX_DATA + 1);
	n = drain_until_close(fd, buf, sizeof(buf));
	close(fd);
	/* Only the HelloReply came back. */
	cr_assert_eq(cis_frame_hdr_decode(buf, n, &h), 0);
	cr_assert_eq(h.type, CIS_MSG_HELLO);
	cr_assert_eq(n, CIS_FRAME_HDR_LEN + h.msg_len);
	/* The client refuses to send one at all. */
	cr_assert_eq(
	    cis_rpc_call(c, T_ECHO, NULL, buf, (size_t)CIS_FRAME_MAX_DATA + 1, &res, 0, &em),
	    -CIS_E_TOOBIG);
	cr_assert_eq(echo(c, 2, "b", &em), 0, "%s", em.text);
	cis_rpc_client_free(c);
}

Test(rpc, idle_connection_closed)
{
	cis_rpc_server_opts o = {
	    .bind_addr = "127.0.0.1", .io_threads = 1, .handler = handler, .idle_timeout_ms = 100};
	cis_rpc_server *keep = srv;
	Cis__Hello hello = CIS__HELLO__INIT;
	cis_errmsg em = {{0}};
	uint8_t buf[256], *mb;
	size_t mlen;
	int fd;

	cr_assert_eq(cis_rpc_server_start(&o, &srv, &em), 0, "%s", em.text);
	fd = raw_conn();
	hello.protocol_version = 1;
	cr_assert_eq(cis_msg_pack(&hello.base, &mb, &mlen), 0);
	send_hdr(fd, CIS_MSG_HELLO, (uint32_t)mlen, 0);
	cr_assert_eq(write(fd, mb, mlen), (ssize_t)mlen);
	free(mb);
	/* The HelloReply, then nothing: the server must hang up by itself. */
	cr_assert_gt(drain_until_close(fd, buf, sizeof(buf)), 0);
	close(fd);
	cis_rpc_server_stop(srv);
	srv = keep;
}

/* A server of max_conns 4 whose hello deadline is 300 ms, in place of srv;
 * the caller stops it and puts srv back. */
static cis_rpc_server *swap_in_small_server(void)
{
	cis_rpc_server_opts o = {.bind_addr = "127.0.0.1",
	                         .io_threads = 1,
	                         .handler = handler,
	                         .max_conns = 4,
	                         .hello_timeout_ms = 300};
	cis_errmsg em = {{0}};
	cis_rpc_server *keep = srv;

	cr_assert_eq(cis_rpc_server_start(&o, &srv, &em), 0, "%s", em.text);
	return keep;
}

/* Connections opened and left silent take every slot: each is dropped when
 * it has not said hello in time, and a real client gets in (they held the
 * slots for good). */
Test(rpc, silent_connections_are_dropped_at_the_hello_deadline)
{
	cis_rpc_server *keep = swap_in_small_server();
	cis_errmsg em = {{0}};
	uint8_t buf[64];
	int fds[4];

	for (int i = 0; i < 4; i++)
		fds[i] = raw_conn();
	usleep(100 * 1000); /* taken by the server: every slot */
	cis_rpc_client *c = client(false);
	uint64_t t0 = cis_mono_ms();
	int rc;
	while ((rc = echo(c, 1, "a", &em)) != 0 && cis_mono_ms() - t0 < 5000)
		usleep(50 * 1000);
	cr_assert_eq(rc, 0, "no way in past silent connections: %s", em.text);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(drain_until_close(fds[i], buf, sizeof(buf)), 0);
		close(fds[i]);
	}
	cis_rpc_client_free(c);
	cis_rpc_server_stop(srv);
	srv = keep;
}

/* A frame whose first bytes came, and not the rest, is given up with its
 * connection (it held up to 20 MiB of buffer for good). */
Test(rpc, a_frame_left_unfinished_is_dropped)
{
	cis_rpc_server *keep = swap_in_small_server();
	Cis__Hello hello = CIS__HELLO__INIT;
	uint8_t buf[256], *mb;
	size_t mlen, n;
	cis_frame_hdr h;
	int fd = raw_conn();

	hello.protocol_version = 1;
	cr_assert_eq(cis_msg_pack(&hello.base, &mb, &mlen), 0);
	send_hdr(fd, CIS_MSG_HELLO, (uint32_t)mlen, 0);
	cr_assert_eq(write(fd, mb, mlen), (ssize_t)mlen);
	free(mb);
	send_hdr(fd, T_ECHO, 100, 1 << 20);
	cr_assert_eq(write(fd, "0123456789", 10), 10);
	uint64_t t0 = cis_mono_ms();
	n = drain_until_close(fd, buf, sizeof(buf));
	close(fd);
	cr_assert_lt(cis_mono_ms() - t0, 5000);
	/* Only the HelloReply came back: after the hello, 900 ms. */
	cr_assert_eq(cis_frame_hdr_decode(buf, n, &h), 0);
	cr_assert_eq(h.type, CIS_MSG_HELLO);
	cr_assert_eq(n, CIS_FRAME_HDR_LEN + h.msg_len);
	cis_rpc_server_stop(srv);
	srv = keep;
}

/* Frames that keep coming whole, each in two pieces so that part of one
 * is always in, for longer than the frame deadline: progress, not a frame
 * left unfinished (the deadline ran from the first part-frame on, and
 * dropped a busy client). */
Test(rpc, frames_pipelined_in_pieces_keep_the_connection)
{
	cis_rpc_server *keep = swap_in_small_server();
	Cis__Hello hello = CIS__HELLO__INIT;
	Cis__Ping ping = CIS__PING__INIT;
	uint8_t *mb, frame[CIS_FRAME_HDR_LEN + 64], buf[4096];
	size_t mlen, flen, got = 0;
	int fd = raw_conn(), n = 0;

	hello.protocol_version = 1;
	cr_assert_eq(cis_msg_pack(&hello.base, &mb, &mlen), 0);
	send_hdr(fd, CIS_MSG_HELLO, (uint32_t)mlen, 0);
	cr_assert_eq(write(fd, mb, mlen), (ssize_t)mlen);
	free(mb);
	ping.nonce = 7;
	cr_assert_eq(cis_msg_pack(&ping.base, &mb, &mlen), 0);
	cis_frame_hdr h = {.type = CIS_MSG_PING, .msg_len = (uint32_t)mlen, .req_id = 9};
	cis_frame_hdr_encode(&h, frame);
	memcpy(frame + CIS_FRAME_HDR_LEN, mb, mlen);
	free(mb);
	flen = CIS_FRAME_HDR_LEN + mlen;
	/* 2 s of frames (the deadline is 900 ms): the second half of one
	 * and the first half of the next in each write. */
	cr_assert_eq(write(fd, frame, flen / 2), (ssize_t)(flen / 2));
	for (uint64_t t0 = cis_mono_ms(); cis_mono_ms() - t0 < 2000; n++) {
		uint8_t two[2 * sizeof(frame)];

		memcpy(two, frame + flen / 2, flen - flen / 2);
		memcpy(two + flen - flen / 2, frame, flen / 2);
		cr_assert_eq(write(fd, two, flen), (ssize_t)flen, "the connection was dropped");
		usleep(100 * 1000);
	}
	cr_assert_eq(write(fd, frame + flen / 2, flen - flen / 2), (ssize_t)(flen - flen / 2));
	n++;
	/* The HelloReply and n replies, all there (read until they are: the
	 * socket's 10 s receive timeout bounds it). */
	int replies = 0;
	size_t off = 0;
	while (replies < n + 1) {
		cis_frame_hdr rh;

		if (off + CIS_FRAME_HDR_LEN <= got &&
		    cis_frame_hdr_decode(buf + off, got - off, &rh) == 0 &&
		    off + CIS_FRAME_HDR_LEN + rh.msg_len + rh.data_len <= got) {
			cr_assert_eq(rh.flags & CIS_FRAME_ERROR, 0, "an error reply");
			off += CIS_FRAME_HDR_LEN + rh.msg_len + rh.data_len;
			replies++;
			continue;
		}
		ssize_t k = got < sizeof(buf) ? read(fd, buf + got, sizeof(buf) - got) : 0;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	close(fd);
	cr_assert_eq(replies, n + 1, "%d replies to %d pings and the hello", replies, n);
	cis_rpc_server_stop(srv);
	srv = keep;
}

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* With no descriptor left for accept, the listener pauses (it tried again
 * at once, forever: a core at 100 %), and takes the connection once one
 * is free again. */
Test(rpc, a_listener_out_of_descriptors_does_not_spin)
{
	struct rlimit old, low;
	static int fds[512];
	size_t n = 0;

	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = 256;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (n < 512 && (fds[n] = dup(0)) >= 0)
		n++;
	cr_assert(n > 0 && n < 512 && errno == EMFILE);
	close(fds[--n]); /* one for the connection; none for the accept */
	int fd = raw_conn();
	usleep(200 * 1000);
	double cpu0 = cpu_seconds();
	usleep(1000 * 1000);
	double used = cpu_seconds() - cpu0;
	while (n)
		close(fds[--n]);
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
	cr_assert_lt(used, 0.3, "%.2f s of CPU in 1 s while accept failed", used);
	/* Descriptors back: the connection is taken (and, silent, dropped at
	 * the hello deadline: not waited for here). */
	cis_rpc_client *c = client(false);
	cis_errmsg em = {{0}};
	cr_assert_eq(echo(c, 1, "a", &em), 0, "%s", em.text);
	cis_rpc_client_free(c);
	close(fd);
}

Test(rpc, stale_unix_socket_replaced_live_one_refused)
{
	cis_rpc_server_opts o = {.unix_path = sock_path, .io_threads = 1, .handler = handler};
	cis_rpc_server *s2 = NULL;
	cis_errmsg em = {{0}};

	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char stale[64];
	int fd;

	cr_assert_eq(cis_rpc_server_start(&o, &s2, &em), -EADDRINUSE);
	cr_assert_not_null(strstr(em.text, sock_path), "%s", em.text);
	/* A socket file left by a dead server is replaced. */
	snprintf(stale, sizeof(stale), "/tmp/cis-test-stale-%d.sock", getpid());
	strcpy(sa.sun_path, stale);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	o.unix_path = stale;
	cr_assert_eq(cis_rpc_server_start(&o, &s2, &em), 0, "%s", em.text);
	cis_rpc_server_stop(s2);
	cr_assert_neq(access(stale, F_OK), 0, "socket file left behind");
}

/* Read one whole frame from fd (header, message, data). */
static void read_frame(int fd, cis_frame_hdr *h)
{
	uint8_t hb[CIS_FRAME_HDR_LEN], buf[65536];
	size_t got = 0;
	while (got < sizeof(hb)) {
		ssize_t n = read(fd, hb + got, sizeof(hb) - got);
		cr_assert_gt(n, 0, "connection closed or timed out in a header");
		got += (size_t)n;
	}
	cr_assert_eq(cis_frame_hdr_decode(hb, sizeof(hb), h), 0);
	size_t left = (size_t)h->msg_len + h->data_len;
	while (left) {
		ssize_t n = read(fd, buf, left < sizeof(buf) ? left : sizeof(buf));
		cr_assert_gt(n, 0, "connection closed or timed out in a body");
		left -= (size_t)n;
	}
}

/* Send HELLO on a raw connection and read its reply; fd. */
static int say_hello(int fd)
{
	Cis__Hello hello = CIS__HELLO__INIT;
	uint8_t *msg;
	size_t len;
	cis_frame_hdr h;

	hello.protocol_version = 1;
	hello.client_name = "raw";
	cr_assert_eq(cis_msg_pack(&hello.base, &msg, &len), 0);
	send_hdr(fd, CIS_MSG_HELLO, (uint32_t)len, 0);
	cr_assert_eq(write(fd, msg, len), (ssize_t)len);
	free(msg);
	read_frame(fd, &h);
	return fd;
}

/* A TCP connection to srv from the loopback address 127.0.0.n. */
static int raw_conn_from(int n)
{
	struct sockaddr_in from = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	from.sin_addr.s_addr = htonl(INADDR_LOOPBACK - 1 + (uint32_t)n);
	cr_assert_eq(bind(fd, (struct sockaddr *)&from, sizeof(from)), 0, "%s", strerror(errno));
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_port = htons(cis_rpc_server_port(srv))};
	struct timeval tv = {10, 0};

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Whether a hello sent on fd gets an answer (false: the server hung up). */
static bool hello_answered(int fd)
{
	Cis__Hello hello = CIS__HELLO__INIT;
	cis_frame_hdr h = {.type = CIS_MSG_HELLO, .req_id = 9};
	uint8_t *mb, hb[CIS_FRAME_HDR_LEN], buf[64];
	size_t mlen;

	hello.protocol_version = 1;
	cr_assert_eq(cis_msg_pack(&hello.base, &mb, &mlen), 0);
	h.msg_len = (uint32_t)mlen;
	cis_frame_hdr_encode(&h, hb);
	/* A refused connection may be reset under these writes. */
	bool sent = send(fd, hb, sizeof(hb), MSG_NOSIGNAL) == (ssize_t)sizeof(hb) &&
	            send(fd, mb, mlen, MSG_NOSIGNAL) == (ssize_t)mlen;
	free(mb);
	return sent && read(fd, buf, sizeof(buf)) > 0;
}

/* One address holds at most max_conns_per_addr connections: past them it
 * is refused, while another address still gets in (one host with
 * connections that said hello and then nothing held every slot). */
Test(rpc, one_address_cannot_take_every_slot)
{
	cis_rpc_server_opts o = {.bind_addr = "127.0.0.1",
	                         .io_threads = 1,
	                         .handler = handler,
	                         .max_conns = 8,
	                         .max_conns_per_addr = 2};
	cis_errmsg em = {{0}};
	cis_rpc_server *keep = srv;
	uint8_t buf[64];
	int fds[2];

	cr_assert_eq(cis_rpc_server_start(&o, &srv, &em), 0, "%s", em.text);
	for (int i = 0; i < 2; i++)
		fds[i] = say_hello(raw_conn_from(1));
	int third = raw_conn_from(1);
	cr_assert_eq(drain_until_close(third, buf, sizeof(buf)), 0,
	             "a third from 127.0.0.1 got in");
	close(third);
	close(say_hello(raw_conn_from(2))); /* another address: answered */
	close(fds[0]);
	/* Its slot is back: once the server has seen the close, one more
	 * from 127.0.0.1 gets in. */
	uint64_t t0 = cis_mono_ms();
	int again;
	while (!hello_answered(again = raw_conn_from(1))) {
		close(again);
		cr_assert_lt(cis_mono_ms() - t0, 5000,
		             "the closed connection's slot never came back");
		cis_sleep_ms(50);
	}
	close(again);
	close(fds[1]);
	cis_rpc_server_stop(srv);
	srv = keep;
}

/* A client that pipelines requests for large replies and reads none holds
 * at most OUT_HIGH (64 MiB) of the server's output: the server stops
 * reading its requests, and goes on once the client reads the replies. */
Test(rpc, a_client_that_reads_no_replies_is_not_read_either)
{
	int fd = say_hello(raw_conn());
	cis_frame_hdr h;
	const int n = 100; /* replies of 3 MiB each: 300 MiB if all were queued */

	atomic_store(&file_calls, 0);
	for (int i = 0; i < n; i++)
		send_hdr(fd, T_FILE, 0, 0);
	cis_sleep_ms(1000);
	int handled = atomic_load(&file_calls);
	cr_assert_lt(handled, 40, "%d of %d requests handled with no reply read", handled, n);
	for (int i = 0; i < n; i++) {
		read_frame(fd, &h);
		cr_assert_eq(h.data_len, FILE_LEN - 2000);
	}
	cr_assert_eq(atomic_load(&file_calls), n);
	close(fd);
}

/* Connect to the Unix socket and say hello; a 5 s receive timeout. */
static int raw_unix_hello(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct timeval tv = {5, 0};

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return say_hello(fd);
}

/* Every 200 ms, answers the T_FDLIST requests queued with the file's fd,
 * one every 0.2 ms, until want are answered. */
static void *fd_replier(void *arg)
{
	int want = *(int *)arg, done = 0;
	Cis__Ping p = CIS__PING__INIT;

	while (done < want) {
		cis_sleep_ms(200);
		pthread_mutex_lock(&fd_list_lock);
		struct fd_req *r = fd_list;
		fd_list = NULL;
		pthread_mutex_unlock(&fd_list_lock);
		while (r) {
			struct fd_req *next = r->next;
			cis_rpc_reply_fd(r->conn, &r->hdr, &p.base, file_fd);
			cis_rpc_conn_unref(r->conn);
			free(r);
			r = next;
			done++;
			usleep(200); /* the reader keeps up: each reply goes straight out */
		}
	}
	return NULL;
}

/* More requests in flight than a connection may have (1,024) whose
 * replies pass fds: the server stops reading, and reads on as the replies
 * go out (a reply passing an fd straight out used to leave it unread for
 * good). */
Test(rpc, fd_replies_let_a_throttled_connection_read_on)
{
	int fd = raw_unix_hello(), n = 1100;
	pthread_t t;
	cis_frame_hdr h;
	uint8_t buf[256];

	cr_assert_eq(pthread_create(&t, NULL, fd_replier, &n), 0);
	for (int i = 0; i < n; i++)
		send_hdr(fd, T_FDLIST, 0, 0);
	for (int i = 0; i < n; i++) {
		struct iovec iov = {buf, CIS_FRAME_HDR_LEN};
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct msghdr mh = {.msg_iov = &iov,
		                    .msg_iovlen = 1,
		                    .msg_control = cbuf,
		                    .msg_controllen = sizeof(cbuf)};
		ssize_t k = recvmsg(fd, &mh, MSG_WAITALL);
		cr_assert_eq(k, CIS_FRAME_HDR_LEN, "stalled after %d of %d replies", i, n);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		if (cm && cm->cmsg_type == SCM_RIGHTS) {
			int got;
			memcpy(&got, CMSG_DATA(cm), sizeof(got));
			close(got);
		}
		cr_assert_eq(cis_frame_hdr_decode(buf, CIS_FRAME_HDR_LEN, &h), 0);
		for (size_t left = (size_t)h.msg_len + h.data_len; left;) {
			ssize_t r = read(fd, buf, left < sizeof(buf) ? left : sizeof(buf));
			cr_assert_gt(r, 0);
			left -= (size_t)r;
		}
	}
	pthread_join(t, NULL);
	close(fd);
}

/* Replies held behind one that passes an fd (it waits for the output to
 * drain) count against the connection's limits too: 100 large replies
 * queued behind it used to be taken in and held, all of them. */
Test(rpc, replies_held_behind_an_fd_count_too)
{
	int fd = raw_unix_hello();

	signal(SIGPIPE, SIG_IGN); /* the server writes on after our close */

	atomic_store(&file_calls, 0);
	send_hdr(fd, T_FILE, 0, 0);
	send_hdr(fd, T_FD, 0, 0);
	for (int i = 0; i < 100; i++)
		send_hdr(fd, T_FILE, 0, 0);
	cis_sleep_ms(1000);
	int handled = atomic_load(&file_calls);
	cr_assert_lt(handled, 80, "%d of 101 file requests taken in with no reply read", handled);
	close(fd);
}

/* A client that stops reading its replies for good is dropped after the
 * write stall time (it held up to 64 MiB of output before, without end:
 * a throttled connection is not read, so no idle timeout fires), on TCP
 * and on the Unix socket with an fd reply held behind the output. */
/* Read until the server closes (not a receive timeout); the bytes read. */
static size_t count_until_close(int fd)
{
	static uint8_t buf[1 << 20];
	size_t got = 0;
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		got += (size_t)n;
	cr_assert_eq(n, 0, "server did not close the connection");
	return got;
}

Test(rpc, a_client_that_takes_no_replies_is_dropped)
{
	cis_rpc_server_opts o = {.bind_addr = "127.0.0.1",
	                         .unix_path = sock_path,
	                         .io_threads = 1,
	                         .handler = handler,
	                         .write_stall_ms = 500};
	cis_errmsg em = {{0}};

	signal(SIGPIPE, SIG_IGN);
	cis_rpc_server_stop(srv); /* for its Unix socket path */
	cr_assert_eq(cis_rpc_server_start(&o, &srv, &em), 0, "%s", em.text);
	int tcp = say_hello(raw_conn()), local = raw_unix_hello();
	for (int i = 0; i < 30; i++)
		send_hdr(tcp, T_FILE, 0, 0);
	send_hdr(local, T_FILE, 0, 0);
	send_hdr(local, T_FD, 0, 0);
	cis_sleep_ms(2000);
	/* What the socket buffers held comes out, then the end. */
	size_t got = count_until_close(tcp);
	cr_assert_lt(got, 10 * (size_t)FILE_LEN, "%zu bytes", got);
	got = count_until_close(local);
	cr_assert_lt(got, (size_t)FILE_LEN, "%zu bytes", got);
	close(tcp);
	close(local);
	/* The server serves on. */
	cis_rpc_client *c = client(false);
	cr_assert_eq(echo(c, 3, "after", &em), 0, "%s", em.text);
	cis_rpc_client_free(c);
	cis_rpc_server_stop(srv);
	srv = start_server(0);
}
