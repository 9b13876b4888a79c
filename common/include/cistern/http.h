/* HTTP on libevent's evhttp: the JSON admin API and /metrics, /healthz,
 * /readyz that every daemon serves; and a small libcurl client for the CLI.
 *
 * A server runs its own thread and event_base. Routes match a method and
 * an exact path or a prefix ending in '/'. Requests with bodies over
 * max_body (default 1 MiB), malformed JSON, unknown paths (404) and wrong
 * methods (405) are answered with a JSON error body {"error": "..."} and
 * never reach a handler in a state it did not ask for. */
#ifndef CISTERN_HTTP_H
#define CISTERN_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cistern/buf.h"
#include "cistern/error.h"

typedef struct cis_http_server cis_http_server;
typedef struct cis_http_req cis_http_req;
struct cis_metrics;

typedef void (*cis_http_handler_fn)(void *ctx, cis_http_req *req);
/* For /readyz: true when ready; may fill why (not ready) with a reason. */
typedef bool (*cis_http_ready_fn)(void *ctx, cis_buf *why);

typedef struct cis_http_server_opts {
	const char *bind_addr;       /* "0.0.0.0" */
	uint16_t port;               /* 0: any free port (cis_http_server_port) */
	size_t max_body;             /* 0: 1 MiB */
	struct cis_metrics *metrics; /* served at /metrics, or NULL */
	cis_http_ready_fn ready;     /* NULL: always ready */
	void *ready_ctx;
	int threads; /* serving threads (0: 1); above 1, handlers run concurrently */
} cis_http_server_opts;

/* Bind (EADDRINUSE fails with em) but do not serve until started, so routes
 * can be added first. */
int cis_http_server_new(const cis_http_server_opts *opts, cis_http_server **out, cis_errmsg *em);
/* method: "GET", "POST", "PUT", "DELETE". path: "/api/v1/mounts" exact, or
 * "/api/v1/jobs/" to match everything below it. Before start only. */
int cis_http_route(cis_http_server *s, const char *method, const char *path, cis_http_handler_fn fn,
                   void *ctx);
int cis_http_server_start(cis_http_server *s);
uint16_t cis_http_server_port(const cis_http_server *s);
void cis_http_server_free(cis_http_server *s);

/* Request accessors; borrowed pointers valid during the handler. */
const char *cis_http_req_method(const cis_http_req *r);
/* The decoded path, without the query. */
const char *cis_http_req_path(const cis_http_req *r);
/* A decoded query parameter, or NULL. A query that does not parse, holds
 * a nul byte or names a parameter twice never reaches a handler (400). */
const char *cis_http_req_query(const cis_http_req *r, const char *name);
/* The body parsed as a JSON object; NULL after the server already replied
 * 400 (malformed or not an object). The caller must then just return. */
json_t *cis_http_req_json(cis_http_req *r);

/* Replies (exactly one per request). The _json variant steals body. */
void cis_http_reply_json(cis_http_req *r, int status, json_t *body);
void cis_http_reply_text(cis_http_req *r, int status, const char *content_type, const char *body,
                         size_t len);
/* {"error": "<formatted>"} with status. */
void cis_http_reply_error(cis_http_req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The HTTP status for a Cistern code: -ENOENT 404; -EINVAL, -ENAMETOOLONG,
 * -ENOTDIR, -EISDIR and malformed input 400; -EEXIST, -EBUSY, -ESTALE 409;
 * refused credentials or permissions 403; store and connection failures
 * 502; -ETIMEDOUT 504; -ENOSPC 507; -CIS_E_TOOBIG 413; -ENOTSUP 501;
 * anything else 500. */
int cis_http_status_of(int code);
/* Replies {"error": msg} (or the code's name) with cis_http_status_of(code). */
void cis_http_reply_code(cis_http_req *r, int code, const char *msg);

/* ---- client (libcurl), for the CLI and tests ---- */

/* method with an optional JSON body to base_url + path (path already
 * URL-encoded where needed). On any HTTP reply: 0, *status set and *out the
 * parsed JSON body (caller's; NULL if the body was not JSON). Transport
 * failures: -ECONNREFUSED / -ETIMEDOUT / -CIS_E_CLOSED with em saying
 * "cannot reach master at 127.0.0.1:19601: connection refused" (connecting
 * gives up after 5 s; a master that took the connection and did not answer
 * in time_ms: "master at ... did not answer GET /x within N s"). */
int cis_http_call(const char *base_url, const char *method, const char *path, const json_t *body,
                  int timeout_ms, long *status, json_t **out, cis_errmsg *em);
/* A check every call of this process makes while it waits (a few times a
 * second): when it returns true the call fails with -EINTR. For a program
 * that takes its stop signals synchronously (sigpending). NULL: none. */
void cis_http_client_set_stop(bool (*stop)(void));

/* For fuzz targets and tests: connect to 127.0.0.1:port, write len raw
 * bytes (an HTTP request, well formed or not), shut down the write side
 * and read until the server closes or 2 s pass. Lets a libFuzzer target
 * drive a real server started once on an ephemeral port:
 *   static uint16_t port; if (!port) { ...new, route, start...; port = ...; }
 *   cis_http_fuzz_roundtrip(port, data, size);
 * The number of reply bytes read (>= 0), or -errno when the connection
 * could not be made. */
int cis_http_fuzz_roundtrip(uint16_t port, const uint8_t *data, size_t len);

#endif
