/* The HTTP client (http.h): one libcurl easy handle per call, which is
 * plenty for a CLI and for tests; plus the raw-bytes helper for fuzzers. */
#include "cistern/http.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cistern/time.h"

#define MAX_REPLY          (64u << 20)
#define DEFAULT_TIMEOUT_MS 30000
#define CONNECT_TIMEOUT_MS 5000 /* a host that drops our SYNs */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static bool (*stop_check)(void);

void cis_http_client_set_stop(bool (*stop)(void))
{
	stop_check = stop;
}

/* libcurl's progress callback: non-zero aborts the transfer. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
	(void)arg;
	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	return stop_check && stop_check();
}

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	cis_buf *b = arg;
	size_t len = size * n;

	if (b->len + len > MAX_REPLY || cis_buf_append(b, p, len) != 0)
		return 0; /* makes curl fail with CURLE_WRITE_ERROR */
	return len;
}

/* "127.0.0.1:19601" from "http://127.0.0.1:19601/..." for messages. */
static void host_of(const char *url, char *out, size_t n)
{
	const char *p = strstr(url, "://");
	size_t len;

	p = p ? p + 3 : url;
	len = strcspn(p, "/?#");
	if (len >= n)
		len = n - 1;
	memcpy(out, p, len);
	out[len] = 0;
}

int cis_http_call(const char *base_url, const char *method, const char *path, const json_t *body,
                  int timeout_ms, long *status, json_t **out, cis_errmsg *em)
{
	char errbuf[CURL_ERROR_SIZE] = "";
	char host[256];
	cis_buf url = CIS_BUF_INIT, reply = CIS_BUF_INIT;
	struct curl_slist *hdrs = NULL;
	char *payload = NULL;
	CURL *h;
	CURLcode cc;
	int r = 0;

	*status = 0;
	if (out)
		*out = NULL;
	pthread_once(&curl_once, curl_init_once);
	host_of(base_url, host, sizeof(host));
	if (cis_buf_printf(&url, "%s%s", base_url, path ? path : ""))
		return -ENOMEM;
	h = curl_easy_init();
	if (!h) {
		r = -ENOMEM;
		goto out_url;
	}
	curl_easy_setopt(h, CURLOPT_URL, url.data);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	if (timeout_ms <= 0)
		timeout_ms = DEFAULT_TIMEOUT_MS;
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
	                 (long)(timeout_ms < CONNECT_TIMEOUT_MS ? timeout_ms : CONNECT_TIMEOUT_MS));
	if (stop_check) {
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	}
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &reply);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	if (strcmp(method, "HEAD") == 0)
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	hdrs = curl_slist_append(hdrs, "Accept: application/json");
	if (body) {
		payload = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
		if (!payload) {
			r = -ENOMEM;
			goto out_curl;
		}
		hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	cc = curl_easy_perform(h);
	switch (cc) {
	case CURLE_OK:
		break;
	case CURLE_COULDNT_CONNECT:
		r = cis_fail(em, -ECONNREFUSED, "cannot reach master at %s: connection refused",
		             host);
		goto out_curl;
	case CURLE_OPERATION_TIMEDOUT: {
		curl_off_t connected = 0;

		curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connected);
		if (connected > 0)
			r = cis_fail(em, -ETIMEDOUT,
			             "master at %s did not answer %s %s within %d s", host, method,
			             path ? path : "/", (timeout_ms + 999) / 1000);
		else
			r = cis_fail(em, -ETIMEDOUT, "cannot reach master at %s: timed out", host);
		goto out_curl;
	}
	case CURLE_ABORTED_BY_CALLBACK:
		r = cis_fail(em, -EINTR, "%s %s to master at %s: interrupted", method,
		             path ? path : "/", host);
		goto out_curl;
	case CURLE_COULDNT_RESOLVE_HOST:
		r = cis_fail(em, -EHOSTUNREACH, "cannot reach master at %s: unknown host", host);
		goto out_curl;
	default:
		r = cis_fail(em, -CIS_E_CLOSED, "cannot reach master at %s: %s", host,
		             errbuf[0] ? errbuf : curl_easy_strerror(cc));
		goto out_curl;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	if (out && reply.len)
		*out = json_loadb(reply.data, reply.len, 0, NULL);

out_curl:
	free(payload);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
out_url:
	cis_buf_free(&url);
	cis_buf_free(&reply);
	return r;
}

int cis_http_fuzz_roundtrip(uint16_t port, const uint8_t *data, size_t len)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	uint64_t deadline = cis_mono_ms() + 2000;
	char sink[4096];
	size_t got = 0;
	int fd, r;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		goto out_close;
	}
	while (len > 0) {
		ssize_t n = send(fd, data, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* the server closed on us: fine, it is allowed to */
		data += n;
		len -= (size_t)n;
	}
	shutdown(fd, SHUT_WR);
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		uint64_t now = cis_mono_ms();
		ssize_t n;

		if (now >= deadline || poll(&p, 1, (int)(deadline - now)) <= 0)
			break;
		n = recv(fd, sink, sizeof(sink), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	r = got > INT_MAX ? INT_MAX : (int)got;
out_close:
	close(fd);
	return r;
}
