/* Binary RPC over TCP and Unix sockets, framed as in frame.h.
 *
 * Server: one listener thread and N I/O threads, each with its own
 * event_base; accepted connections are handed to the I/O threads round
 * robin. The handler runs on the connection's I/O thread and must not
 * block; it replies at once or later from any thread, holding a reference
 * to the connection (cis_rpc_conn_ref) until it has. Connection setup: the
 * first frame must be HELLO (protocol version, client name, and room for a
 * cluster credential; see common.proto). Garbage, a bad header or an
 * oversized frame closes that connection (counted and logged, rate
 * limited); the server keeps serving everyone else.
 *
 * Client: a connection to one server used by many threads at once;
 * requests are pipelined (each waits for its own request id), with a
 * per-call timeout, and the connection is re-established on the next call
 * after it breaks (with backoff). */
#ifndef CISTERN_RPC_H
#define CISTERN_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <protobuf-c/protobuf-c.h>

#include "cistern/error.h"
#include "cistern/frame.h"
#include "cistern/metrics.h"

struct evbuffer;

/* ---- server ---- */

typedef struct cis_rpc_server cis_rpc_server;
typedef struct cis_rpc_conn cis_rpc_conn;

/* Called for every request frame after the handshake. msg (hdr->msg_len
 * bytes) is valid only during the call; data holds hdr->data_len bytes the
 * handler may drain or leave (the server discards what is left). */
typedef void (*cis_rpc_handler_fn)(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                                   const uint8_t *msg, struct evbuffer *data);

typedef struct cis_rpc_server_opts {
	const char *bind_addr; /* TCP address, e.g. "0.0.0.0"; NULL for no TCP */
	uint16_t port;         /* 0 with bind_addr: any free port (see cis_rpc_server_port) */
	const char *unix_path; /* Unix socket path, or NULL; replaced if stale */
	int io_threads;        /* >= 1 */
	const char *name;      /* for logs and metrics: "master", "worker" */
	cis_rpc_handler_fn handler;
	void *ctx;
	size_t max_conns; /* 0: 4096 */
	/* Connections from one TCP peer address (Unix socket peers are not
	 * counted), so that one host cannot take every slot. 0: a quarter of
	 * max_conns. */
	size_t max_conns_per_addr;
	int idle_timeout_ms; /* 0: none */
	/* A peer that takes none of the output waiting for it this long is
	 * dropped (it would hold up to the connection's output limit for good:
	 * a throttled connection is not read, so the idle timeout never fires).
	 * 0: 60 s. */
	int write_stall_ms;
	/* A connection must finish its hello this soon, and a frame once its
	 * first bytes are in: one that does not is dropped (connections
	 * opened and left silent, or a frame trickled in, would hold a slot
	 * of max_conns, and up to a frame's 20 MiB, for good). 0: 10 s for
	 * the hello, 3 times that for a frame. */
	int hello_timeout_ms;
	/* Connections dropped for a malformed frame (or no hello first), and
	 * refused over max_conns or max_conns_per_addr; NULL: not counted. */
	cis_counter *bad_frames;
	cis_counter *refused_conns;
} cis_rpc_server_opts;

/* A server of many connections needs as many descriptors: the soft
 * RLIMIT_NOFILE (often 1,024, below max_conns) goes up to the hard one. */
void cis_rpc_raise_fd_limit(void);

/* Bind the listeners (fails fast on EADDRINUSE with em saying which
 * address) and start the threads. *out is the caller's. */
int cis_rpc_server_start(const cis_rpc_server_opts *opts, cis_rpc_server **out, cis_errmsg *em);
/* The bound TCP port. */
uint16_t cis_rpc_server_port(const cis_rpc_server *s);
/* Stop accepting, close every connection, join the threads, free. */
void cis_rpc_server_stop(cis_rpc_server *s);

void cis_rpc_conn_ref(cis_rpc_conn *c);
void cis_rpc_conn_unref(cis_rpc_conn *c);
/* False once the peer went away; replies to a closed connection are dropped. */
bool cis_rpc_conn_open(const cis_rpc_conn *c);
/* Peer address as text ("127.0.0.1:53312" or "unix"). */
const char *cis_rpc_conn_peer(const cis_rpc_conn *c);
/* Whether the connection came in on the Unix socket (fd passing works). */
bool cis_rpc_conn_is_local(const cis_rpc_conn *c);
/* The peer's user id on a Unix connection (SO_PEERCRED), else -1. */
int cis_rpc_conn_peer_uid(const cis_rpc_conn *c);

/* Replies; all thread-safe. flags may add CIS_FRAME_MORE for all but the
 * last frame of a streamed reply. type is the request's type. */
int cis_rpc_reply(cis_rpc_conn *c, const cis_frame_hdr *req, const ProtobufCMessage *msg,
                  uint8_t flags);
/* msg then len bytes copied from data. */
int cis_rpc_reply_data(cis_rpc_conn *c, const cis_frame_hdr *req, const ProtobufCMessage *msg,
                       const void *data, size_t len, uint8_t flags);
/* msg then len bytes of fd from off, sent without copying through user
 * space (sendfile). fd stays the caller's; it may be closed after the call. */
int cis_rpc_reply_file(cis_rpc_conn *c, const cis_frame_hdr *req, const ProtobufCMessage *msg,
                       int fd, off_t off, size_t len, uint8_t flags);
/* msg with fd passed to the peer (SCM_RIGHTS). Unix connections only
 * (-EOPNOTSUPP otherwise). fd stays the caller's. */
int cis_rpc_reply_fd(cis_rpc_conn *c, const cis_frame_hdr *req, const ProtobufCMessage *msg,
                     int fd);
/* An ErrorReply with code (negative, as everywhere) and message. */
int cis_rpc_reply_error(cis_rpc_conn *c, const cis_frame_hdr *req, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- client ---- */

typedef struct cis_rpc_client cis_rpc_client;

typedef struct cis_rpc_client_opts {
	const char *host; /* TCP host, or NULL with unix_path */
	uint16_t port;
	const char *unix_path;
	const char *name;       /* sent in HELLO: "cistern-fuse" */
	int connect_timeout_ms; /* 0: 3000 */
	int call_timeout_ms;    /* default per call; 0: 30000 */
} cis_rpc_client_opts;

/* A reply: the header, the message bytes (unpack with cis_msg_unpack) and
 * the raw data (or a passed fd, else -1). Owned by the caller:
 * cis_rpc_result_free. */
typedef struct cis_rpc_result {
	cis_frame_hdr hdr;
	uint8_t *msg;
	size_t msg_len;
	uint8_t *data;
	size_t data_len;
	int fd;
} cis_rpc_result;

/* Does not connect; the first call does. *out is the caller's. */
int cis_rpc_client_new(const cis_rpc_client_opts *opts, cis_rpc_client **out);
void cis_rpc_client_free(cis_rpc_client *c);
/* Fail every call in flight with -CIS_E_CLOSED and drop the connection
 * (the next call connects again): for a server known to be gone, whose
 * callers would otherwise wait out their timeouts. */
void cis_rpc_client_abort(cis_rpc_client *c);
/* For a process that is stopping: fail every call in flight, and every
 * call from now on, at once (-ECANCELED; calls in flight may see
 * -CIS_E_CLOSED), and never connect again. */
void cis_rpc_client_close(cis_rpc_client *c);

/* Send a request and wait for its (single-frame) reply. timeout_ms 0 means
 * the client's default. An error reply returns its code (em gets its
 * message); a broken connection -CIS_E_CLOSED; a timeout -ETIMEDOUT;
 * cannot connect -ECONNREFUSED or -EHOSTUNREACH or the like. A peer's
 * error reply carrying one of those codes (it could not reach a server of
 * its own) returns -CIS_E_UPSTREAM, so that only this client's own
 * failures to reach the peer read as cis_rpc_unreachable. */
int cis_rpc_call(cis_rpc_client *c, uint16_t type, const ProtobufCMessage *req, const void *data,
                 size_t data_len, cis_rpc_result *res, int timeout_ms, cis_errmsg *em);

/* A set of calls, on any clients, that can be abandoned together (a job's
 * calls to its workers, when it is cancelled or the process stops). */
typedef struct cis_rpc_cancel cis_rpc_cancel;

int cis_rpc_cancel_new(cis_rpc_cancel **out);
/* No call may be in flight under t any more. */
void cis_rpc_cancel_free(cis_rpc_cancel *t);
/* Fail every call made under t with -ECANCELED, now and from now on. The
 * connections stay up (late replies are discarded); the servers are not
 * told, so work they started goes on. */
void cis_rpc_cancel_fire(cis_rpc_cancel *t);
/* cis_rpc_call that also fails with -ECANCELED once cancel fires (NULL:
 * never). */
int cis_rpc_call_in(cis_rpc_client *c, cis_rpc_cancel *cancel, uint16_t type,
                    const ProtobufCMessage *req, const void *data, size_t data_len,
                    cis_rpc_result *res, int timeout_ms, cis_errmsg *em);

/* Like cis_rpc_call for replies streamed over several frames: each frame
 * is passed to fn (data valid during the call) until the one without
 * CIS_FRAME_MORE. fn returns 0 to go on, negative to abandon the request
 * (the rest of its frames are discarded when they come). */
typedef int (*cis_rpc_frame_fn)(void *arg, const cis_frame_hdr *hdr, const uint8_t *msg,
                                const uint8_t *data);
int cis_rpc_call_stream(cis_rpc_client *c, uint16_t type, const ProtobufCMessage *req,
                        cis_rpc_frame_fn fn, void *arg, int timeout_ms, cis_errmsg *em);

void cis_rpc_result_free(cis_rpc_result *r);

/* Whether rc says the peer could not be reached or stopped answering (as
 * opposed to a peer that answered with an error). */
bool cis_rpc_unreachable(int rc);

#endif
