/* The HTTP server (routes, errors, built-ins) driven by the HTTP client. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <curl/curl.h>

#include "cistern/http.h"
#include "cistern/metrics.h"
#include "cistern/time.h"

static cis_http_server *srv;
static cis_metrics *reg;
static char base[64];
static bool is_ready;

static void h_echo(void *ctx, cis_http_req *r)
{
	json_t *in = cis_http_req_json(r);

	(void)ctx;
	if (!in)
		return;
	cis_http_reply_json(r, 201,
	                    json_pack("{s:O,s:s,s:s?}", "got", in, "path", cis_http_req_path(r),
	                              "q", cis_http_req_query(r, "q")));
}

static void h_get(void *ctx, cis_http_req *r)
{
	cis_http_reply_json(
	    r, 200,
	    json_pack("{s:s,s:s}", "route", (const char *)ctx, "path", cis_http_req_path(r)));
}

static void h_code(void *ctx, cis_http_req *r)
{
	(void)ctx;
	cis_http_reply_code(r, -ENOENT, "/x: no such mount");
}

static void h_silent(void *ctx, cis_http_req *r)
{
	(void)ctx;
	(void)r;
}

static bool ready_fn(void *ctx, cis_buf *why)
{
	(void)ctx;
	if (!is_ready)
		cis_buf_puts(why, "no workers registered");
	return is_ready;
}

static void setup(void)
{
	cis_http_server_opts o = {.bind_addr = "127.0.0.1", .max_body = 1024, .ready = ready_fn};
	cis_errmsg em = {{0}};

	reg = cis_metrics_new();
	cis_counter_add(cis_metrics_counter(reg, "cistern_test_total", NULL, "Test."), 5);
	o.metrics = reg;
	is_ready = true;
	cr_assert_eq(cis_http_server_new(&o, &srv, &em), 0, "%s", em.text);
	cr_assert_eq(cis_http_route(srv, "POST", "/api/v1/echo", h_echo, NULL), 0);
	cr_assert_eq(cis_http_route(srv, "GET", "/api/v1/echo", h_get, "exact"), 0);
	cr_assert_eq(cis_http_route(srv, "GET", "/api/v1/jobs/", h_get, "prefix"), 0);
	cr_assert_eq(cis_http_route(srv, "GET", "/api/v1/jobs/special", h_get, "special"), 0);
	cr_assert_eq(cis_http_route(srv, "DELETE", "/api/v1/code", h_code, NULL), 0);
	cr_assert_eq(cis_http_route(srv, "GET", "/api/v1/silent", h_silent, NULL), 0);
	cr_assert_eq(cis_http_server_start(srv), 0);
	cr_assert_eq(cis_http_route(srv, "GET", "/late", h_get, NULL), -EINVAL);
	snprintf(base, sizeof(base), "http://127.0.0.1:%u", cis_http_server_port(srv));
}

static void teardown(void)
{
	cis_http_server_free(srv);
	cis_metrics_free(reg);
}

/* Steals body. */
static json_t *call(const char *method, const char *path, json_t *body, long want)
{
	cis_errmsg em = {{0}};
	json_t *out = NULL;
	long st = 0;
	int r = cis_http_call(base, method, path, body, 5000, &st, &out, &em);

	json_decref(body);
	cr_assert_eq(r, 0, "%s %s: %s", method, path, em.text);
	cr_assert_eq(st, want, "%s %s: status %ld, want %ld", method, path, st, want);
	return out;
}

static void assert_error_body(json_t *o, const char *needle)
{
	const char *e;

	cr_assert_not_null(o, "error body is not JSON");
	e = json_string_value(json_object_get(o, "error"));
	cr_assert_not_null(e);
	cr_assert_not_null(strstr(e, needle), "error %s lacks %s", e, needle);
	json_decref(o);
}

static size_t on_data(char *p, size_t sz, size_t n, void *arg)
{
	cis_buf_append(arg, p, sz * n);
	return sz * n;
}

/* Raw text of a reply and its Content-Type (both the caller's). */
static long raw(const char *method, const char *path, const char *body, cis_buf *text, char **ctype)
{
	cis_buf url = CIS_BUF_INIT;
	CURL *h = curl_easy_init();
	struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
	char *ct = NULL;
	long st = 0;

	cis_buf_printf(&url, "%s%s", base, path);
	curl_easy_setopt(h, CURLOPT_URL, url.data);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, text);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
	if (body)
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	cr_assert_eq(curl_easy_perform(h), CURLE_OK);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
	curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct);
	if (ctype)
		*ctype = ct ? strdup(ct) : NULL;
	curl_slist_free_all(hd);
	curl_easy_cleanup(h);
	cis_buf_free(&url);
	return st;
}

TestSuite(http, .init = setup, .fini = teardown);

Test(http, post_json_and_query)
{
	json_t *in = json_pack("{s:i}", "a", 1);
	json_t *o = call("POST", "/api/v1/echo?q=a%20b", in, 201);

	cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "got"), "a")), 1);
	cr_assert_str_eq(json_string_value(json_object_get(o, "q")), "a b");
	cr_assert_str_eq(json_string_value(json_object_get(o, "path")), "/api/v1/echo");
	json_decref(o);
}

Test(http, exact_and_prefix_routes)
{
	json_t *o = call("GET", "/api/v1/echo", NULL, 200);

	cr_assert_str_eq(json_string_value(json_object_get(o, "route")), "exact");
	json_decref(o);
	o = call("GET", "/api/v1/jobs/42", NULL, 200);
	cr_assert_str_eq(json_string_value(json_object_get(o, "route")), "prefix");
	cr_assert_str_eq(json_string_value(json_object_get(o, "path")), "/api/v1/jobs/42");
	json_decref(o);
	o = call("GET", "/api/v1/jobs/special", NULL, 200);
	cr_assert_str_eq(json_string_value(json_object_get(o, "route")), "special");
	json_decref(o);
	/* percent-decoded path */
	o = call("GET", "/api/v1/jobs/a%2Fb", NULL, 200);
	cr_assert_str_eq(json_string_value(json_object_get(o, "path")), "/api/v1/jobs/a/b");
	json_decref(o);
}

Test(http, not_found_and_method_not_allowed)
{
	assert_error_body(call("GET", "/nope", NULL, 404), "not found");
	/* "/api/v1/jobs" without the slash is not under the prefix */
	assert_error_body(call("GET", "/api/v1/jobs", NULL, 404), "not found");
	assert_error_body(call("PUT", "/api/v1/echo", NULL, 405), "method not allowed");
	assert_error_body(call("POST", "/healthz", NULL, 405), "method not allowed");
	/* Methods no route takes get the same JSON, not evhttp's HTML 501. */
	assert_error_body(call("OPTIONS", "/api/v1/echo", NULL, 405), "method not allowed");
	assert_error_body(call("TRACE", "/api/v1/echo", NULL, 405), "method not allowed");
	assert_error_body(call("GET", "/api/v1/jobs/%00x", NULL, 400), "malformed");
	/* a value decoded as a C string would be cut at the NUL */
	assert_error_body(call("GET", "/api/v1/echo?path=/m1%00garbage", NULL, 400), "nul byte");
	/* libevent refuses a whole query with one malformed item: the handler
	 * would have acted on none of its parameters (a recursive sync done as
	 * a plain one); of a parameter given twice, the first counted. */
	assert_error_body(call("GET", "/api/v1/echo?q=1&recursive", NULL, 400), "name=value");
	assert_error_body(call("GET", "/api/v1/echo?q=1&q=2", NULL, 400), "more than once");
	char many[1024];
	int n = snprintf(many, sizeof(many), "/api/v1/echo?q=1");
	for (int i = 0; i < 64; i++)
		n += snprintf(many + n, sizeof(many) - (size_t)n, "&p%d=1", i);
	assert_error_body(call("GET", many, NULL, 400), "too many parameters");
	/* a path that is not UTF-8 is named with '?' (it was a 500) */
	assert_error_body(call("GET", "/caf%e9", NULL, 404), "/caf?: not found");
}

Test(http, bad_json_and_too_large)
{
	json_t *big = json_object();
	char s[2000];

	/* A body that is not JSON: send a JSON string, which is not an object. */
	assert_error_body(call("POST", "/api/v1/echo", json_string("x"), 400), "JSON object");
	assert_error_body(call("POST", "/api/v1/echo", json_pack("[i]", 1), 400), "JSON object");
	assert_error_body(call("POST", "/api/v1/echo", NULL, 400), "JSON object");
	memset(s, 'x', sizeof(s) - 1);
	s[sizeof(s) - 1] = 0;
	json_object_set_new(big, "k", json_string(s));
	json_decref(call("POST", "/api/v1/echo", big, 413));
}

Test(http, malformed_json_text)
{
	cis_buf t = CIS_BUF_INIT;

	cr_assert_eq(raw("POST", "/api/v1/echo", "{\"a\":", &t, NULL), 400);
	cr_assert_not_null(strstr(t.data, "\"error\""), "%s", t.data);
	cr_assert_not_null(strstr(t.data, "malformed JSON"), "%s", t.data);
	cis_buf_reset(&t);
	cr_assert_eq(raw("POST", "/api/v1/echo", "[1]", &t, NULL), 400);
	cr_assert_not_null(strstr(t.data, "expected a JSON object"), "%s", t.data);
	cis_buf_free(&t);
}

Test(http, metrics_text_format)
{
	cis_buf t = CIS_BUF_INIT;
	char *ct;

	cr_assert_eq(raw("GET", "/metrics", NULL, &t, &ct), 200);
	cr_assert_str_eq(ct, "text/plain; version=0.0.4; charset=utf-8");
	cr_assert_str_eq(t.data, "# HELP cistern_test_total Test.\n"
	                         "# TYPE cistern_test_total counter\n"
	                         "cistern_test_total 5\n");
	free(ct);
	cis_buf_reset(&t);
	cr_assert_eq(raw("GET", "/healthz", NULL, &t, NULL), 200);
	cr_assert_str_eq(t.data, "ok\n");
	cis_buf_reset(&t);
	is_ready = false;
	cr_assert_eq(raw("GET", "/readyz", NULL, &t, NULL), 503);
	cr_assert_str_eq(t.data, "not ready: no workers registered\n");
	cis_buf_free(&t);
}

Test(http, raw_bytes_roundtrip)
{
	static const char req[] = "POST /api/v1/echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
	                          "Content-Length: 5\r\n\r\n{\"a\":";
	static const char ka[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
	uint16_t port = cis_http_server_port(srv);
	uint64_t t0;
	int n;

	n = cis_http_fuzz_roundtrip(port, (const uint8_t *)req, strlen(req));
	cr_assert_gt(n, 0, "no reply to a complete request");
	/* Keep-alive: the server answers, then sees our EOF and closes. */
	t0 = cis_mono_ms();
	n = cis_http_fuzz_roundtrip(port, (const uint8_t *)ka, strlen(ka));
	cr_assert_gt(n, 0, "no reply to a keep-alive request");
	cr_log_info("keep-alive roundtrip took %llu ms", (unsigned long long)(cis_mono_ms() - t0));
	/* Garbage: whatever the server says, it must survive it. */
	cr_assert_geq(cis_http_fuzz_roundtrip(port, (const uint8_t *)"\x01\x02garbage\r\n\r\n", 13),
	              0);
	json_decref(call("GET", "/healthz", NULL, 200)); /* still serving */
}

/* A header line that never ends is cut off (64 KiB), not buffered for
 * good: the server hangs up while the client still sends. */
Test(http, endless_header_line_is_cut_off)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_port = htons(cis_http_server_port(srv))};
	struct timeval tv = {3, 0};
	static char junk[1 << 20];
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	char buf[4096];
	ssize_t n;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	memset(junk, 'A', sizeof(junk));
	const char *start = "GET /healthz HTTP/1.1\r\nX-Junk: ";
	cr_assert_eq(send(fd, start, strlen(start), MSG_NOSIGNAL), (ssize_t)strlen(start));
	for (int i = 0; i < 4 && send(fd, junk, sizeof(junk), MSG_NOSIGNAL) > 0; i++)
		;
	/* Closed (EOF or reset) or an error reply; a timeout means it waits on. */
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		;
	cr_assert(n == 0 || errno == ECONNRESET, "the server still reads the header: %s",
	          strerror(errno));
	close(fd);
	json_decref(call("GET", "/healthz", NULL, 200)); /* still serving */
}

Test(http, reply_code_and_silent_handler)
{
	assert_error_body(call("DELETE", "/api/v1/code", NULL, 404), "no such mount");
	assert_error_body(call("GET", "/api/v1/silent", NULL, 500), "did not reply");
}

Test(http, healthz_readyz_metrics)
{
	cis_errmsg em = {{0}};
	long st;
	json_t *o = NULL;

	cr_assert_null(call("GET", "/healthz", NULL, 200)); /* "ok", not JSON */
	cr_assert_null(call("GET", "/readyz", NULL, 200));
	is_ready = false;
	cr_assert_null(call("GET", "/readyz", NULL, 503));
	cr_assert_eq(cis_http_call(base, "GET", "/metrics", NULL, 5000, &st, &o, &em), 0);
	cr_assert_eq(st, 200);
	cr_assert_null(o);
}

Test(http, unreachable_server)
{
	cis_errmsg em = {{0}};
	long st;
	json_t *o;
	int r = cis_http_call("http://127.0.0.1:1", "GET", "/x", NULL, 2000, &st, &o, &em);

	cr_assert_eq(r, -ECONNREFUSED);
	cr_assert_str_eq(em.text, "cannot reach master at 127.0.0.1:1: connection refused");
}

static bool always_stop(void)
{
	return true;
}

/* A master that takes the connection and never answers: "did not answer"
 * (not "cannot reach") after the call's time; a stop check cuts it short. */
Test(http, silent_server_and_stop_check)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	char base[64];
	cis_errmsg em = {{0}};
	long st;
	json_t *o;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(fd, 8), 0); /* the kernel completes connections; none is read */
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(base, sizeof(base), "http://127.0.0.1:%u", ntohs(sa.sin_port));
	cr_assert_eq(cis_http_call(base, "GET", "/x", NULL, 500, &st, &o, &em), -ETIMEDOUT);
	cr_assert_not_null(strstr(em.text, "did not answer GET /x within 1 s"), "%s", em.text);
	cis_http_client_set_stop(always_stop);
	uint64_t t0 = cis_mono_ms();
	cr_assert_eq(cis_http_call(base, "GET", "/x", NULL, 10000, &st, &o, &em), -EINTR);
	cis_http_client_set_stop(NULL);
	cr_assert_lt(cis_mono_ms() - t0, 3000, "the stop check did not cut the call short");
	cr_assert_not_null(strstr(em.text, "interrupted"), "%s", em.text);
	close(fd);
}

Test(http, bind_conflict_fails_with_address)
{
	cis_http_server_opts o = {.bind_addr = "127.0.0.1", .port = cis_http_server_port(srv)};
	cis_http_server *s2 = NULL;
	cis_errmsg em = {{0}};

	cr_assert_eq(cis_http_server_new(&o, &s2, &em), -EADDRINUSE);
	cr_assert_null(s2);
	cr_assert_not_null(strstr(em.text, "127.0.0.1"), "%s", em.text);
}

Test(http, free_without_start_and_right_after_start)
{
	cis_http_server_opts o = {.bind_addr = "127.0.0.1"};
	cis_http_server *s2;

	cr_assert_eq(cis_http_server_new(&o, &s2, NULL), 0);
	cis_http_server_free(s2);
	cr_assert_eq(cis_http_server_new(&o, &s2, NULL), 0);
	cr_assert_eq(cis_http_server_start(s2), 0);
	cis_http_server_free(s2);
}

/* A handler that holds its thread until released (at most 10 s). */
static pthread_mutex_t slow_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slow_cond = PTHREAD_COND_INITIALIZER;
static bool slow_entered, slow_release;

static void h_slow(void *ctx, cis_http_req *r)
{
	struct timespec until;

	(void)ctx;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	pthread_mutex_lock(&slow_lock);
	slow_entered = true;
	pthread_cond_broadcast(&slow_cond);
	while (!slow_release && pthread_cond_timedwait(&slow_cond, &slow_lock, &until) == 0)
		;
	pthread_mutex_unlock(&slow_lock);
	cis_http_reply_json(r, 200, json_pack("{s:b}", "slow", 1));
}

static void *call_slow(void *arg)
{
	long st = 0;
	json_t *out = NULL;

	cis_http_call(arg, "GET", "/slow", NULL, 15000, &st, &out, NULL);
	json_decref(out);
	return (void *)st;
}

/* With several threads, a handler that takes long holds one of them: the
 * built-ins and the other routes are still answered at once. */
Test(http, slow_handler_holds_one_thread_only)
{
	cis_http_server_opts o = {.bind_addr = "127.0.0.1", .threads = 3};
	cis_http_server *s2;
	char b2[64];
	pthread_t th;
	long st = 0;
	json_t *out = NULL;
	cis_errmsg em = {{0}};

	cr_assert_eq(cis_http_server_new(&o, &s2, &em), 0, "%s", em.text);
	cr_assert_eq(cis_http_route(s2, "GET", "/slow", h_slow, NULL), 0);
	cr_assert_eq(cis_http_route(s2, "GET", "/fast", h_get, "fast"), 0);
	cr_assert_eq(cis_http_server_start(s2), 0);
	snprintf(b2, sizeof(b2), "http://127.0.0.1:%u", cis_http_server_port(s2));
	cr_assert_eq(pthread_create(&th, NULL, call_slow, b2), 0);
	pthread_mutex_lock(&slow_lock);
	while (!slow_entered)
		pthread_cond_wait(&slow_cond, &slow_lock);
	pthread_mutex_unlock(&slow_lock);

	for (int i = 0; i < 5; i++) {
		uint64_t t0 = cis_mono_ns();
		cr_assert_eq(cis_http_call(b2, "GET", "/healthz", NULL, 2000, &st, &out, &em), 0,
		             "healthz while a handler is busy: %s", em.text);
		cr_assert_eq(st, 200);
		json_decref(out);
		cr_assert_eq(cis_http_call(b2, "GET", "/fast", NULL, 2000, &st, &out, &em), 0, "%s",
		             em.text);
		cr_assert_eq(st, 200);
		json_decref(out);
		cr_assert_lt(cis_mono_ns() - t0, 1000000000ull, "answered behind the slow handler");
	}

	pthread_mutex_lock(&slow_lock);
	slow_release = true;
	pthread_cond_broadcast(&slow_cond);
	pthread_mutex_unlock(&slow_lock);
	void *ret;
	pthread_join(th, &ret);
	cr_assert_eq((long)ret, 200, "the slow request itself");
	cis_http_server_free(s2);
}

Test(http, status_of_codes)
{
	cr_assert_eq(cis_http_status_of(-ENOENT), 404);
	cr_assert_eq(cis_http_status_of(-CIS_E_NOBUCKET), 404);
	cr_assert_eq(cis_http_status_of(-ENOTDIR), 400);
	cr_assert_eq(cis_http_status_of(-EXDEV), 400, "a link out of its mount");
	cr_assert_eq(cis_http_status_of(-ELOOP), 400);
	cr_assert_eq(cis_http_status_of(-CIS_E_URI), 400);
	cr_assert_eq(cis_http_status_of(-ESTALE), 409);
	cr_assert_eq(cis_http_status_of(-CIS_E_DENIED), 403);
	cr_assert_eq(cis_http_status_of(-EIO), 502);
	cr_assert_eq(cis_http_status_of(-ETIMEDOUT), 504);
	cr_assert_eq(cis_http_status_of(-ENOSPC), 507);
	cr_assert_eq(cis_http_status_of(-CIS_E_INTERNAL), 500);
	cr_assert_eq(cis_http_status_of(-EAGAIN), 503, "changed meanwhile: try again");
	cr_assert_eq(cis_http_status_of(-ECANCELED), 503, "the daemon is stopping");
}
