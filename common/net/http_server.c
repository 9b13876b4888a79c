/* The HTTP server on libevent's evhttp (http.h).
 *
 * Each of opts.threads threads runs its own event_base and evhttp, all
 * accepting on one listening socket (each evhttp holds a dup of it): a
 * handler that takes long (a report walking ten million files) holds one
 * thread, and the others go on answering /healthz and the API. Handlers
 * must therefore be thread-safe when threads > 1. Every request goes
 * through dispatch(): built-in endpoints first (/healthz, /readyz,
 * /metrics), then the route table (exact paths before prefixes, the
 * longest prefix first). A request whose path matches a route but not its
 * method gets 405 with an Allow header; no match at all gets 404.
 *
 * Handlers reply synchronously: the cis_http_req lives on dispatch()'s
 * stack, and a handler that returns without replying gets a 500 so that no
 * client hangs. */
#include "cistern/http.h"
#include "cistern/json_text.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "cistern/log.h"
#include "cistern/metrics.h"
#include "net_internal.h"

#define DEFAULT_MAX_BODY (1u << 20)
#define CONN_TIMEOUT_S   60
#define MAX_HEADERS      (64 << 10) /* request line and headers, bytes */

struct route {
	char *method;
	char *path;
	size_t path_len;
	bool prefix;
	cis_http_handler_fn fn;
	void *ctx;
};

/* One serving thread. */
struct http_loop {
	struct event_base *base;
	struct evhttp *http;
	struct event *stop_ev; /* activated from another thread to stop the loop */
	pthread_t thread;
};

struct cis_http_server {
	struct http_loop *loops;
	int nloops;
	uint16_t port;
	size_t max_body;
	cis_metrics *metrics;
	cis_http_ready_fn ready;
	void *ready_ctx;
	struct route *routes;
	size_t nroutes;
	bool started;
};

struct cis_http_req {
	struct evhttp_request *r;
	const char *method;
	char *path; /* decoded */
	const char *raw_query;
	struct evkeyvalq query;
	bool query_parsed;
	json_t *json;
	bool json_tried;
	bool replied;
};

static const char *method_name(enum evhttp_cmd_type cmd)
{
	switch (cmd) {
	case EVHTTP_REQ_GET:
		return "GET";
	case EVHTTP_REQ_POST:
		return "POST";
	case EVHTTP_REQ_HEAD:
		return "HEAD";
	case EVHTTP_REQ_PUT:
		return "PUT";
	case EVHTTP_REQ_DELETE:
		return "DELETE";
	case EVHTTP_REQ_OPTIONS:
		return "OPTIONS";
	case EVHTTP_REQ_TRACE:
		return "TRACE";
	case EVHTTP_REQ_CONNECT:
		return "CONNECT";
	case EVHTTP_REQ_PATCH:
		return "PATCH";
	}
	return "?";
}

/* ---- replies ---- */

static bool claim_reply(cis_http_req *r)
{
	if (r->replied) {
		cis_error("http handler replied twice", "path=%s", r->path ? r->path : "?");
		return false;
	}
	r->replied = true;
	return true;
}

void cis_http_reply_text(cis_http_req *r, int status, const char *content_type, const char *body,
                         size_t len)
{
	struct evbuffer *b;

	if (!claim_reply(r))
		return;
	b = evbuffer_new();
	if (b && len)
		evbuffer_add(b, body, len);
	if (content_type)
		evhttp_add_header(evhttp_request_get_output_headers(r->r), "Content-Type",
		                  content_type);
	evhttp_send_reply(r->r, status, NULL, b);
	if (b)
		evbuffer_free(b);
}

void cis_http_reply_json(cis_http_req *r, int status, json_t *body)
{
	char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
	size_t n;

	json_decref(body);
	if (!s) {
		cis_http_reply_text(r, 500, "application/json", "{\"error\":\"out of memory\"}\n",
		                    26);
		return;
	}
	n = strlen(s);
	s[n] = 0;
	{
		char *t = realloc(s, n + 2);

		if (t) {
			s = t;
			s[n++] = '\n';
			s[n] = 0;
		}
	}
	cis_http_reply_text(r, status, "application/json", s, n);
	free(s);
}

static void reply_error_v(cis_http_req *r, int status, const char *fmt, va_list ap)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* a request path's bytes, or a text cut short mid-character */
	cis_http_reply_json(r, status, json_pack("{s:o}", "error", cis_json_text(msg)));
}

void cis_http_reply_error(cis_http_req *r, int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	reply_error_v(r, status, fmt, ap);
	va_end(ap);
}

int cis_http_status_of(int code)
{
	switch (code) {
	case -ENOENT:
	case -CIS_E_NOBUCKET:
		return 404;
	case -EINVAL:
	case -ENAMETOOLONG:
	case -ENOTDIR:
	case -EISDIR:
	case -EXDEV:
	case -ELOOP:
	case -CIS_E_PARSE:
	case -CIS_E_URI:
	case -CIS_E_CONFIG:
		return 400;
	case -EEXIST:
	case -EBUSY:
	case -ESTALE:
		return 409;
	case -CIS_E_DENIED:
	case -EACCES:
	case -EPERM:
		return 403;
	case -CIS_E_STORE:
	case -CIS_E_CLOSED:
	case -ECONNREFUSED:
	case -EIO:
		return 502;
	case -ETIMEDOUT:
		return 504;
	case -ENOSPC:
		return 507;
	case -CIS_E_TOOBIG:
		return 413;
	case -ENOTSUP:
		return 501;
	case -EAGAIN:    /* changed meanwhile: try again */
	case -ECANCELED: /* the daemon is stopping */
		return 503;
	}
	return 500;
}

void cis_http_reply_code(cis_http_req *r, int code, const char *msg)
{
	cis_http_reply_error(r, cis_http_status_of(code), "%s",
	                     msg && *msg ? msg : cis_strerror(code));
}

/* ---- request accessors ---- */

const char *cis_http_req_method(const cis_http_req *r)
{
	return r->method;
}

const char *cis_http_req_path(const cis_http_req *r)
{
	return r->path;
}

const char *cis_http_req_query(const cis_http_req *r, const char *name)
{
	return evhttp_find_header(&r->query, name);
}

json_t *cis_http_req_json(cis_http_req *r)
{
	struct evbuffer *in;
	size_t n;
	json_error_t jerr;
	const char *p;

	if (r->json_tried)
		return r->json;
	r->json_tried = true;
	in = evhttp_request_get_input_buffer(r->r);
	n = evbuffer_get_length(in);
	if (n == 0) {
		cis_http_reply_error(r, 400, "request body: expected a JSON object");
		return NULL;
	}
	p = (const char *)evbuffer_pullup(in, -1);
	if (!p) {
		cis_http_reply_error(r, 500, "out of memory");
		return NULL;
	}
	r->json = json_loadb(p, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!r->json) {
		cis_http_reply_error(r, 400, "request body: malformed JSON: %s (line %d column %d)",
		                     jerr.text, jerr.line, jerr.column);
		return NULL;
	}
	if (!json_is_object(r->json)) {
		json_decref(r->json);
		r->json = NULL;
		cis_http_reply_error(r, 400, "request body: expected a JSON object");
		return NULL;
	}
	return r->json;
}

/* ---- built-in endpoints ---- */

static void serve_metrics(cis_http_server *s, cis_http_req *r)
{
	cis_buf b = CIS_BUF_INIT;

	if (s->metrics && cis_metrics_render(s->metrics, &b) != 0) {
		cis_buf_free(&b);
		cis_http_reply_error(r, 500, "render metrics: out of memory");
		return;
	}
	cis_http_reply_text(r, 200, "text/plain; version=0.0.4; charset=utf-8",
	                    b.data ? b.data : "", b.len);
	cis_buf_free(&b);
}

static void serve_readyz(cis_http_server *s, cis_http_req *r)
{
	cis_buf why = CIS_BUF_INIT;

	if (!s->ready || s->ready(s->ready_ctx, &why)) {
		cis_http_reply_text(r, 200, "text/plain; charset=utf-8", "ok\n", 3);
	} else {
		cis_buf out = CIS_BUF_INIT;

		cis_buf_printf(&out, "not ready: %s\n", why.len ? why.data : "unspecified");
		cis_http_reply_text(r, 503, "text/plain; charset=utf-8", out.data ? out.data : "",
		                    out.len);
		cis_buf_free(&out);
	}
	cis_buf_free(&why);
}

/* true when the request was a built-in endpoint (and has been answered). */
static bool serve_builtin(cis_http_server *s, cis_http_req *r)
{
	bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;

	if (strcmp(r->path, "/healthz") && strcmp(r->path, "/readyz") &&
	    strcmp(r->path, "/metrics"))
		return false;
	if (!get) {
		evhttp_add_header(evhttp_request_get_output_headers(r->r), "Allow", "GET");
		cis_http_reply_error(r, 405, "%s %s: method not allowed", r->method, r->path);
	} else if (strcmp(r->path, "/healthz") == 0) {
		cis_http_reply_text(r, 200, "text/plain; charset=utf-8", "ok\n", 3);
	} else if (strcmp(r->path, "/readyz") == 0) {
		serve_readyz(s, r);
	} else {
		serve_metrics(s, r);
	}
	return true;
}

/* ---- dispatch ---- */

static bool route_matches(const struct route *rt, const char *path)
{
	if (rt->prefix)
		return strncmp(path, rt->path, rt->path_len) == 0;
	return strcmp(path, rt->path) == 0;
}

/* The best route for path among those of any method: exact beats prefix,
 * a longer prefix beats a shorter one. Returns its path text, or NULL. */
static const struct route *best_path(const cis_http_server *s, const char *path)
{
	const struct route *best = NULL;

	for (size_t i = 0; i < s->nroutes; i++) {
		const struct route *rt = &s->routes[i];

		if (!route_matches(rt, path))
			continue;
		if (!best || (best->prefix && !rt->prefix) ||
		    (best->prefix == rt->prefix && rt->path_len > best->path_len))
			best = rt;
	}
	return best;
}

static void dispatch_routes(cis_http_server *s, cis_http_req *r)
{
	const struct route *best = best_path(s, r->path);
	cis_buf allow = CIS_BUF_INIT;

	if (!best) {
		cis_http_reply_error(r, 404, "%s: not found", r->path);
		return;
	}
	for (size_t i = 0; i < s->nroutes; i++) {
		const struct route *rt = &s->routes[i];

		if (rt->prefix != best->prefix || strcmp(rt->path, best->path) != 0)
			continue;
		if (strcmp(rt->method, r->method) == 0) {
			rt->fn(rt->ctx, r);
			if (!r->replied)
				cis_http_reply_error(r, 500, "%s %s: handler did not reply",
				                     r->method, r->path);
			cis_buf_free(&allow);
			return;
		}
		cis_buf_printf(&allow, "%s%s", allow.len ? ", " : "", rt->method);
	}
	evhttp_add_header(evhttp_request_get_output_headers(r->r), "Allow",
	                  allow.data ? allow.data : "");
	cis_buf_free(&allow);
	cis_http_reply_error(r, 405, "%s %s: method not allowed", r->method, r->path);
}

#define QUERY_MAX_PARAMS 64

/* Parse r's query into r->query, or reply 400 and return false when it
 * cannot be taken as it stands: libevent refuses a whole query with one
 * malformed item (no '=', or no name), and a handler would then act on
 * none of its parameters (a recursive sync done as a plain one); a value
 * with a nul byte (only the escape %00 makes one) would be cut short
 * where a handler reads it as a C string ("path=/m1%00garbage" naming
 * /m1); and of a parameter given twice, which one counts would be a
 * guess. */
static bool parse_query(cis_http_req *r)
{
	const char *why = NULL;
	size_t n = 0;

	r->query_parsed = true;
	TAILQ_INIT(&r->query);
	if (!r->raw_query)
		return true;
	if (strstr(r->raw_query, "%00")) {
		why = "a value contains a nul byte";
	} else if (evhttp_parse_query_str(r->raw_query, &r->query) != 0) {
		why = "each item must be name=value";
	} else {
		struct evkeyval *a, *b;

		TAILQ_FOREACH(a, &r->query, next)
		{
			if (why)
				break;
			if (++n > QUERY_MAX_PARAMS) {
				why = "too many parameters";
				break;
			}
			for (b = TAILQ_NEXT(a, next); b && !why; b = TAILQ_NEXT(b, next))
				if (!strcmp(a->key, b->key))
					why = "a parameter is given more than once";
		}
	}
	if (why)
		cis_http_reply_error(r, 400, "malformed query: %s", why);
	return !why;
}

static void dispatch(struct evhttp_request *er, void *arg)
{
	cis_http_server *s = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(er);
	cis_http_req r = {.r = er};
	const char *raw;
	size_t dlen = 0;

	r.method = method_name(evhttp_request_get_command(er));
	raw = uri ? evhttp_uri_get_path(uri) : NULL;
	if (!raw || !*raw)
		raw = "/";
	r.path = evhttp_uridecode(raw, 0, &dlen);
	if (!r.path || strlen(r.path) != dlen || r.path[0] != '/') {
		/* NULL only without memory; an embedded %00 would cut the
		 * path short where a handler does not expect it. */
		free(r.path);
		r.path = strdup("?");
		if (r.path)
			cis_http_reply_error(&r, 400, "malformed request path");
		else
			evhttp_send_error(er, 500, NULL);
		goto out;
	}
	r.raw_query = uri ? evhttp_uri_get_query(uri) : NULL;
	if (!parse_query(&r))
		goto out;
	if (!serve_builtin(s, &r))
		dispatch_routes(s, &r);
out:
	if (r.query_parsed)
		evhttp_clear_headers(&r.query);
	json_decref(r.json);
	free(r.path);
}

/* ---- lifecycle ---- */

/* Runs in the loop. event_base_loopbreak() from another thread could be
 * lost if it came before the loop started (the loop clears the flag). */
static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_loop *l = arg;

	(void)fd;
	(void)what;
	event_base_loopbreak(l->base);
}

static void loop_free(struct http_loop *l)
{
	if (l->stop_ev)
		event_free(l->stop_ev);
	if (l->http)
		evhttp_free(l->http);
	if (l->base)
		event_base_free(l->base);
}

/* A loop serving s's routes, accepting on fd (which it owns from here, also
 * on failure). */
static int loop_init(cis_http_server *s, struct http_loop *l, int fd)
{
	l->base = event_base_new();
	l->http = l->base ? evhttp_new(l->base) : NULL;
	l->stop_ev = l->base ? event_new(l->base, -1, 0, stop_cb, l) : NULL;
	if (!l->http || !l->stop_ev) {
		close(fd);
		return -ENOMEM;
	}
	evhttp_set_max_body_size(l->http, (ev_ssize_t)s->max_body);
	/* libevent takes headers of any size by default: a header line sent
	 * without end held memory and CPU (each read rescans it) for good. */
	evhttp_set_max_headers_size(l->http, MAX_HEADERS);
	evhttp_set_timeout(l->http, CONN_TIMEOUT_S);
	/* Every method evhttp knows reaches dispatch, which answers one no
	 * route takes with the JSON 405 (evhttp's own answer is an HTML 501). */
	evhttp_set_allowed_methods(l->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
	                                        EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
	                                        EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS |
	                                        EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT);
	evhttp_set_gencb(l->http, dispatch, s);
	/* The listener owns fd once made (closed by evhttp_free, or by
	 * evconnlistener_free if evhttp will not take it). */
	struct evconnlistener *lev = evconnlistener_new(
	    l->base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
	if (!lev) {
		close(fd);
		return -ENOMEM;
	}
	if (!evhttp_bind_listener(l->http, lev)) {
		evconnlistener_free(lev);
		return -ENOMEM;
	}
	cis_net_listener_pause_on_error(lev);
	return 0;
}

int cis_http_server_new(const cis_http_server_opts *opts, cis_http_server **out, cis_errmsg *em)
{
	cis_http_server *s;
	int fd, r, nthreads;

	*out = NULL;
	cis_net_threads_init();
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->max_body = opts->max_body ? opts->max_body : DEFAULT_MAX_BODY;
	s->metrics = opts->metrics;
	s->ready = opts->ready;
	s->ready_ctx = opts->ready_ctx;
	nthreads = opts->threads > 0 ? opts->threads : 1;
	s->loops = calloc((size_t)nthreads, sizeof(*s->loops));
	if (!s->loops) {
		free(s);
		return -ENOMEM;
	}
	r = cis_net_listen_tcp(opts->bind_addr ? opts->bind_addr : "0.0.0.0", opts->port, &fd,
	                       &s->port, em);
	if (r)
		goto out_free;
	for (int i = 0; i < nthreads; i++) {
		int lfd = i == 0 ? fd : fcntl(fd, F_DUPFD_CLOEXEC, 0);

		r = lfd < 0 ? -errno : loop_init(s, &s->loops[i], lfd);
		s->nloops++;
		if (r) {
			cis_fail(em, r, "http listen on port %u: cannot add listener: %s", s->port,
			         strerror(-r));
			goto out_free;
		}
	}
	*out = s;
	return 0;

out_free:
	for (int i = 0; i < s->nloops; i++)
		loop_free(&s->loops[i]);
	free(s->loops);
	free(s);
	return r;
}

int cis_http_route(cis_http_server *s, const char *method, const char *path, cis_http_handler_fn fn,
                   void *ctx)
{
	struct route *nr, *rt;
	size_t n = strlen(path);

	if (s->started || !fn || n == 0 || path[0] != '/')
		return -EINVAL;
	nr = realloc(s->routes, (s->nroutes + 1) * sizeof(*nr));
	if (!nr)
		return -ENOMEM;
	s->routes = nr;
	rt = &nr[s->nroutes];
	rt->method = strdup(method);
	rt->path = strdup(path);
	if (!rt->method || !rt->path) {
		free(rt->method);
		free(rt->path);
		return -ENOMEM;
	}
	rt->path_len = n;
	rt->prefix = path[n - 1] == '/' && n > 1;
	rt->fn = fn;
	rt->ctx = ctx;
	s->nroutes++;
	return 0;
}

static void *http_thread(void *arg)
{
	struct http_loop *l = arg;

	event_base_dispatch(l->base);
	return NULL;
}

/* Stop and join the first n loops' threads. */
static void stop_loops(cis_http_server *s, int n)
{
	for (int i = 0; i < n; i++)
		event_active(s->loops[i].stop_ev, EV_READ, 1);
	for (int i = 0; i < n; i++)
		pthread_join(s->loops[i].thread, NULL);
}

int cis_http_server_start(cis_http_server *s)
{
	int r;

	if (s->started)
		return -EINVAL;
	for (int i = 0; i < s->nloops; i++) {
		r = pthread_create(&s->loops[i].thread, NULL, http_thread, &s->loops[i]);
		if (r) {
			stop_loops(s, i);
			return -r;
		}
	}
	s->started = true;
	return 0;
}

uint16_t cis_http_server_port(const cis_http_server *s)
{
	return s->port;
}

void cis_http_server_free(cis_http_server *s)
{
	if (!s)
		return;
	if (s->started)
		stop_loops(s, s->nloops);
	for (int i = 0; i < s->nloops; i++)
		loop_free(&s->loops[i]);
	free(s->loops);
	for (size_t i = 0; i < s->nroutes; i++) {
		free(s->routes[i].method);
		free(s->routes[i].path);
	}
	free(s->routes);
	free(s);
}
