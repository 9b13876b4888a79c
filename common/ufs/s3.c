/* The S3 under-store connector: the cis_ufs_ops backend for "s3://".
 *
 * One struct s3 per opened URI holds the frozen configuration, a CURLSH
 * share (DNS and TLS sessions; locked with one mutex per data kind) and a
 * pool of idle easy handles, each keeping its own connection (libcurl does
 * not support a connection cache shared by concurrent threads). Each call
 * takes a handle from the pool, so any number of threads may call in at
 * once and still reuse warm connections. Every request is signed (SigV4) afresh on each
 * attempt and retried with full-jitter exponential backoff on 5xx, 429 and
 * network failures, never on other 4xx, and never once a read has handed
 * bytes to its sink. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <libxml/parser.h>
#include <libxml/entities.h>
#include <openssl/crypto.h>

#include "cistern/buf.h"
#include "cistern/log.h"
#include "cistern/time.h"
#include "cistern/ufs_backend.h"
#include "s3_sigv4.h"
#include "s3_xml.h"

#define POOL_MAX       256 /* idle easy handles (and connections) kept per connector */
#define RETRY_ATTEMPTS 5   /* tries per request, the first included */
#define RETRY_BASE_MS  50
#define RETRY_CAP_MS   2000
/* A store asking to slow down (503 SlowDown, 429) is given longer: S3 answers
 * SlowDown for seconds while it scales a prefix up, and a read that gave
 * up within a second would reach a training job as EIO. */
#define RETRY_THROTTLED_ATTEMPTS 10
#define RETRY_THROTTLED_CAP_MS   5000
#define ERRBODY_MAX              (1u << 20)   /* an error or small reply body */
#define PART_MIN                 (5ull << 20) /* S3's smallest non-final part */
#define PART_MAX                 (1ull << 30) /* one part is held in memory */
#define PART_DEFAULT             (8ull << 20)
#define PARTS_MAX                10000 /* S3's limit on parts per upload */
#define CREDS_FILE_MAX           (1u << 20)
#define LIST_MAX_KEYS            1000

/* libcurl's receive buffer (its default is 16 KiB). Larger reads mean
 * fewer wake-ups of the fetch thread and fewer, larger window updates to
 * the store: on the benchmark's s3rver, 256 KiB cut the worker's CPU per
 * cold-fetched GiB from 1.25-1.79 s to 0.88-1.23 and the store's from
 * 3.5-4.3 s to 2.8-3.5 (interleaved A/B, 1 GiB loads); 1 MiB gained no
 * more. */
#define RECV_BUFFER (256L << 10)

struct s3 {
	char *bucket;
	char *prefix; /* root prefix without slashes at either end; "" for none */
	char *scheme; /* "https" or "http" */
	char *host;   /* endpoint host[:port], as the Host header says it */
	bool path_style;
	char *region;
	char *access_key; /* NULL: anonymous requests, unsigned */
	char *secret_key;
	char *session_token;
	char *ca_bundle;
	bool verify_tls;
	uint64_t part_size;
	long timeout_s;
	long connect_timeout_s;

	CURLSH *share;
	pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
	pthread_mutex_t pool_lock;
	CURL *pool[POOL_MAX];
	size_t pool_n;
};

/* One HTTP exchange, over all its attempts. */
struct req {
	const char *method;
	const char *key; /* full object key, NULL for the bucket itself */
	cis_kvlist query;
	cis_kvlist hdrs; /* extra request headers, lower-case names */
	const char *body;
	size_t body_len;
	const char *payload_hash;
	size_t body_max; /* largest reply body kept in resp */
	/* Monotonic ms by which the request, retries included, must be done
	 * (0: none; a read's only limit is a stall of timeout seconds). */
	uint64_t until_ms;
	bool empty_object; /* a read's reply said "/0" in its Content-Range */

	/* Streaming reads: 2xx bodies go to sink. For a 200 to a ranged
	 * request (a server that ignored Range) only [win_off, win_off +
	 * win_len) of the stream is delivered. */
	cis_ufs_sink_fn sink;
	void *sink_arg;
	const char *expect_etag; /* read of a version: its ETag, else NULL */
	bool changed;            /* the reply carried another ETag */
	bool ranged;
	uint64_t win_off, win_len;

	/* Per attempt. */
	long status;
	cis_buf resp;
	char etag[CIS_S3_ETAG_MAX];
	/* x-amz-bucket-region: where the bucket is, which AWS says on its
	 * replies to a request signed for another region (a HEAD's has no
	 * body to say more). */
	char bucket_region[32];
	int64_t mtime_ns;
	uint64_t content_length;
	bool have_cl;
	bool chunked; /* Transfer-Encoding: chunked (its end is marked) */
	uint64_t stream_pos;
	size_t up_pos;
	bool too_big;
	bool window_done;
	/* A 206's Content-Range "bytes START-END/TOTAL"; bad_range: it was
	 * missing or not the window asked for (nor all of it that the object
	 * holds); overrun: the body ran past END. Either way no byte outside
	 * the window reaches the sink. */
	bool have_cr;
	uint64_t cr_start, cr_end, cr_total;
	char cr_text[64];
	bool bad_range;
	bool overrun;

	/* Over all attempts. */
	uint64_t delivered;
	uint64_t ticked_at; /* delivered when the sink last heard from us */
	int sink_rc;
	bool cancelled; /* aborted by cis_ufs_cancel_all */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	xmlInitParser();
}

/* ---- small helpers ---- */

static char *dup_or_null(const char *s)
{
	return s && s[0] ? strdup(s) : NULL;
}

static void free_secret(char *s)
{
	if (s) {
		OPENSSL_cleanse(s, strlen(s));
		free(s);
	}
}

static int parse_bool(const char *v, bool *out)
{
	if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes") ||
	    !strcasecmp(v, "on"))
		*out = true;
	else if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no") ||
	         !strcasecmp(v, "off"))
		*out = false;
	else
		return -EINVAL;
	return 0;
}

/* "8M", "8MiB", "16777216", "1G": bytes. */
static int parse_size(const char *v, uint64_t *out)
{
	char *end;
	uint64_t mul = 1;

	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno || end == v || *v == '-')
		return -EINVAL;
	switch (toupper((unsigned char)*end)) {
	case 0:
		break;
	case 'K':
		mul = 1ull << 10;
		break;
	case 'M':
		mul = 1ull << 20;
		break;
	case 'G':
		mul = 1ull << 30;
		break;
	default:
		return -EINVAL;
	}
	if (*end && end[1] && strcasecmp(end + 1, "iB") && strcasecmp(end + 1, "B"))
		return -EINVAL;
	if (n > UINT64_MAX / mul)
		return -EINVAL;
	*out = n * mul;
	return 0;
}

static int parse_seconds(const char *v, long *out)
{
	char *end;

	errno = 0;
	long n = strtol(v, &end, 10);
	if (errno || end == v || *end || n <= 0 || n > 86400)
		return -EINVAL;
	*out = n;
	return 0;
}

/* The key for a path under the root prefix, malloc'd; NULL on -ENOMEM. */
static char *full_key(const struct s3 *s, const char *path)
{
	cis_buf b = CIS_BUF_INIT;

	if (!path)
		path = "";
	if (cis_buf_printf(&b, "%s%s%s", s->prefix, s->prefix[0] && path[0] ? "/" : "", path))
		return NULL;
	return cis_buf_steal(&b);
}

/* "s3://bucket/key" for messages; never carries credentials. */
static void what_of(const struct s3 *s, const char *key, char *out, size_t n)
{
	snprintf(out, n, "s3://%s%s%s", s->bucket, key && key[0] ? "/" : "", key ? key : "");
}

/* cis_fail with the message after "s3://bucket/key: ". */
static int fail_at(const struct s3 *s, const char *key, cis_errmsg *em, int code, const char *fmt,
                   ...) __attribute__((format(printf, 5, 6)));
static int fail_at(const struct s3 *s, const char *key, cis_errmsg *em, int code, const char *fmt,
                   ...)
{
	char what[600], msg[CIS_ERRMSG_MAX];
	va_list ap;

	if (!em)
		return code;
	what_of(s, key, what, sizeof(what));
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return cis_fail(em, code, "%s: %s", what, msg);
}

/* Sleep before the next attempt; cut short when the process stops. */
static void backoff(int attempt, uint64_t cap_ms)
{
	uint64_t cap = RETRY_BASE_MS << (attempt < 16 ? attempt : 16);
	uint32_t r;

	if (cap > cap_ms)
		cap = cap_ms;
	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r = (uint32_t)cis_mono_ns();
	/* Full jitter: anywhere in [0, cap], so many clients spread out. */
	uint64_t until = cis_mono_ms() + r % (cap + 1);
	for (uint64_t now; (now = cis_mono_ms()) < until && !cis_ufs_cancelled();)
		cis_sleep_ms(until - now < 100 ? until - now : 100);
}

/* ---- curl plumbing ---- */

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *u)
{
	struct s3 *s = u;
	(void)h;
	(void)a;
	pthread_mutex_lock(&s->share_locks[d]);
}

static void share_unlock(CURL *h, curl_lock_data d, void *u)
{
	struct s3 *s = u;
	(void)h;
	pthread_mutex_unlock(&s->share_locks[d]);
}

static CURL *pool_get(struct s3 *s)
{
	CURL *h = NULL;

	pthread_mutex_lock(&s->pool_lock);
	if (s->pool_n)
		h = s->pool[--s->pool_n];
	pthread_mutex_unlock(&s->pool_lock);
	return h ? h : curl_easy_init();
}

static void pool_put(struct s3 *s, CURL *h)
{
	curl_easy_reset(h);
	pthread_mutex_lock(&s->pool_lock);
	if (s->pool_n < POOL_MAX) {
		s->pool[s->pool_n++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&s->pool_lock);
	if (h)
		curl_easy_cleanup(h);
}

/* "bytes START-END/TOTAL" (TOTAL may be "*") with START <= END. */
/* "bytes START-END/TOTAL"; TOTAL "*" (unknown) gives UINT64_MAX. */
static bool parse_content_range(const char *v, uint64_t *start, uint64_t *end, uint64_t *total)
{
	char *e;

	if (strncasecmp(v, "bytes ", 6))
		return false;
	v += 6;
	if (!isdigit((unsigned char)*v))
		return false;
	errno = 0;
	*start = strtoull(v, &e, 10);
	if (errno || *e != '-' || !isdigit((unsigned char)e[1]))
		return false;
	*end = strtoull(e + 1, &e, 10);
	if (errno || *e != '/' || *end < *start)
		return false;
	if (!strcmp(e + 1, "*")) {
		*total = UINT64_MAX;
		return true;
	}
	if (!isdigit((unsigned char)e[1]))
		return false;
	*total = strtoull(e + 1, &e, 10);
	return !errno; /* an empty object's "bytes 0-0/0" (s3rver) included */
}

static size_t on_header(char *p, size_t sz, size_t n, void *arg)
{
	struct req *r = arg;
	size_t len = sz * n;
	char line[CIS_S3_ETAG_MAX + 32];

	/* Lines of interest are short; a longer one is copied cut. */
	size_t l = len < sizeof(line) - 1 ? len : sizeof(line) - 1;
	memcpy(line, p, l);
	line[l] = 0;
	while (l && (line[l - 1] == '\r' || line[l - 1] == '\n' || line[l - 1] == ' '))
		line[--l] = 0;
	if (!strncmp(line, "HTTP/", 5)) {
		/* A new response (after a 100 Continue too): forget the last. */
		const char *sp = strchr(line, ' ');
		r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		r->etag[0] = 0;
		r->bucket_region[0] = 0;
		r->have_cl = false;
		r->chunked = false;
		r->have_cr = false;
		r->cr_text[0] = 0;
		r->mtime_ns = 0;
		r->empty_object = false;
		return len;
	}
	if (!l && r->empty_object) {
		/* The end of an empty object's headers (its ETag, in whatever
		 * order they came, is in): stop before the body. */
		r->window_done = true;
		r->have_cl = false;
		return 0;
	}
	char *colon = strchr(line, ':');
	if (!colon)
		return len;
	*colon = 0;
	char *v = colon + 1;
	while (*v == ' ' || *v == '\t')
		v++;
	if (!strcasecmp(line, "etag")) {
		snprintf(r->etag, sizeof(r->etag), "%s", v);
	} else if (!strcasecmp(line, "x-amz-bucket-region")) {
		/* It goes into a message: a region name's characters only. */
		size_t n = strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789-");
		if (n < sizeof(r->bucket_region) && !v[n])
			snprintf(r->bucket_region, sizeof(r->bucket_region), "%s", v);
	} else if (!strcasecmp(line, "last-modified")) {
		time_t t = curl_getdate(v, NULL);
		r->mtime_ns = t > 0 ? (int64_t)t * 1000000000 : 0;
	} else if (!strcasecmp(line, "content-range")) {
		/* "bytes 0-0/0": an empty object. Some stores (s3rver) then
		 * announce a one-byte body and never send it; there is nothing
		 * to read, so stop at the end of the headers rather than wait
		 * for a byte. */
		const char *slash = strrchr(v, '/');
		if (r->sink && slash && !strcmp(slash, "/0")) {
			r->empty_object = true;
			return len;
		}
		snprintf(r->cr_text, sizeof(r->cr_text), "%s", v);
		r->have_cr = parse_content_range(v, &r->cr_start, &r->cr_end, &r->cr_total);
	} else if (!strcasecmp(line, "transfer-encoding")) {
		r->chunked = strcasestr(v, "chunked") != NULL;
	} else if (!strcasecmp(line, "content-length")) {
		char *end;
		errno = 0;
		unsigned long long cl = strtoull(v, &end, 10);
		r->have_cl = !errno && end != v;
		r->content_length = cl;
	}
	return len;
}

static size_t on_body(char *p, size_t sz, size_t n, void *arg)
{
	struct req *r = arg;
	size_t len = sz * n;

	if (r->sink && r->status / 100 == 2) {
		const char *d = p;
		/* Stores that ignore If-Match (s3rver) still say the ETag:
		 * never deliver bytes of another version. */
		if (r->expect_etag && r->etag[0] && strcmp(r->etag, r->expect_etag)) {
			r->changed = true;
			return 0;
		}
		size_t dl = len;
		if (r->ranged && r->status == 206) {
			/* Bytes [START, END] of the object, by Content-Range: it
			 * must start at the window and end at its end, or at the
			 * object's (a store that caps a range's length must not
			 * pass for the end of the object); the body must not run
			 * past it. */
			uint64_t want;

			if (!r->have_cr || r->cr_start != r->win_off ||
			    r->cr_end - r->cr_start >= r->win_len ||
			    (r->cr_end - r->cr_start + 1 < r->win_len &&
			     r->cr_end + 1 != r->cr_total)) {
				r->bad_range = true;
				return 0;
			}
			want = r->cr_end - r->cr_start + 1;
			if (r->stream_pos + len > want) {
				dl = r->stream_pos < want ? (size_t)(want - r->stream_pos) : 0;
				r->overrun = true;
			}
		} else if (r->ranged && r->status != 200) {
			/* Another 2xx (a proxy's 203): its body's place in
			 * the object is unknown. */
			r->bad_range = true;
			return 0;
		} else if (r->ranged) {
			/* The server sent the whole object: clip to the window. */
			uint64_t start = r->stream_pos, end = start + len;
			uint64_t ws = r->win_off, we = r->win_off + r->win_len;
			if (end <= ws || start >= we) {
				dl = 0;
			} else {
				uint64_t a = start > ws ? start : ws, b = end < we ? end : we;
				d = p + (a - start);
				dl = (size_t)(b - a);
			}
		}
		r->stream_pos += len;
		if (dl) {
			int rc = r->sink(r->sink_arg, d, dl);
			if (rc) {
				r->sink_rc = rc < 0 ? rc : -EIO;
				return 0;
			}
			r->delivered += dl;
		}
		if (r->overrun)
			return 0; /* the reply is bad: stop it */
		if (r->ranged && r->status == 200 && r->stream_pos >= r->win_off + r->win_len) {
			r->window_done = true;
			return 0; /* stop the download: the rest is not wanted */
		}
		return len;
	}
	if (r->resp.len + len > r->body_max) {
		r->too_big = true;
		return 0;
	}
	if (cis_buf_append(&r->resp, p, len))
		return 0;
	return len;
}

/* curl calls this while a transfer runs: after bytes came, and at least
 * once a second while none come (its low-speed check). The second kind
 * gives the sink of a read a tick, a call with no bytes, so that what it
 * holds back (the worker's stage) does not wait for the store's next
 * bytes. Nonzero aborts the transfer. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
	static const char none[1];
	struct req *r = arg;
	int rc;

	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	if (cis_ufs_cancelled()) {
		r->cancelled = true;
		return 1;
	}
	if (!r->sink || r->status / 100 != 2 || r->delivered == 0)
		return 0;
	if (r->delivered != r->ticked_at) { /* bytes came since: not quiet */
		r->ticked_at = r->delivered;
		return 0;
	}
	rc = r->sink(r->sink_arg, none, 0);
	if (rc)
		r->sink_rc = rc < 0 ? rc : -EIO;
	return rc != 0;
}

static size_t on_read(char *buf, size_t sz, size_t n, void *arg)
{
	struct req *r = arg;
	size_t room = sz * n, left = r->body_len - r->up_pos;
	size_t k = left < room ? left : room;

	if (k)
		memcpy(buf, r->body + r->up_pos, k);
	r->up_pos += k;
	return k;
}

static int on_seek(void *arg, curl_off_t off, int origin)
{
	struct req *r = arg;

	if (origin != SEEK_SET || off < 0 || (uint64_t)off > r->body_len)
		return CURL_SEEKFUNC_CANTSEEK;
	r->up_pos = (size_t)off;
	return CURL_SEEKFUNC_OK;
}

/* URL path (encoded) and Host for a key under the connector's bucket. */
static int build_target(const struct s3 *s, const char *key, cis_buf *path, cis_buf *host)
{
	int rc;

	if (s->path_style) {
		rc = cis_buf_puts(host, s->host);
		if (!rc)
			rc = cis_buf_puts(path, "/");
		if (!rc)
			rc = cis_s3_uri_encode(path, s->bucket, strlen(s->bucket), false);
		if (!rc && key)
			rc = cis_buf_puts(path, "/");
	} else {
		rc = cis_buf_printf(host, "%s.%s", s->bucket, s->host);
		if (!rc)
			rc = cis_buf_puts(path, "/");
	}
	if (!rc && key)
		rc = cis_s3_uri_encode(path, key, strlen(key), true);
	return rc;
}

static bool curl_retryable(CURLcode cc)
{
	switch (cc) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return true;
	default:
		return false;
	}
}

/* One attempt: sign, send, wait. *cc gets curl's result. 0, or -ENOMEM
 * and -EINVAL for requests that cannot be built. */
static int attempt_once(struct s3 *s, struct req *r, CURLcode *cc)
{
	cis_buf path = CIS_BUF_INIT, host = CIS_BUF_INIT, url = CIS_BUF_INIT, q = CIS_BUF_INIT;
	cis_kvlist h = CIS_KVLIST_INIT;
	struct curl_slist *sl = NULL;
	CURL *c = NULL;
	int rc;

	if ((rc = build_target(s, r->key, &path, &host)) ||
	    (rc = cis_s3_canonical_query(&r->query, &q)))
		goto out;
	rc = cis_buf_printf(&url, "%s://%s%s%s%s", s->scheme, host.data, path.data,
	                    q.len ? "?" : "", q.len ? q.data : "");
	if (rc || (rc = cis_kvlist_copy(&h, &r->hdrs)) ||
	    (rc = cis_kvlist_set(&h, "host", host.data)))
		goto out;
	if (s->access_key) {
		time_t now = (time_t)(cis_wall_ns() / 1000000000);
		rc = cis_s3_sign_headers(&h, r->method, path.data, &r->query, r->payload_hash,
		                         s->access_key, s->secret_key, s->session_token, s->region,
		                         now);
		if (rc)
			goto out;
	}
	for (size_t i = 0; i < h.n; i++) {
		cis_buf line = CIS_BUF_INIT;
		struct curl_slist *n;
		if ((rc = cis_buf_printf(&line, "%s: %s", h.items[i].key, h.items[i].value)))
			goto out;
		n = curl_slist_append(sl, line.data);
		cis_buf_free(&line);
		if (!n) {
			rc = -ENOMEM;
			goto out;
		}
		sl = n;
	}
	/* No "Expect: 100-continue" round trip: bodies are small or parts. */
	struct curl_slist *n = curl_slist_append(sl, "Expect:");
	if (!n) {
		rc = -ENOMEM;
		goto out;
	}
	sl = n;

	c = pool_get(s);
	if (!c) {
		rc = -ENOMEM;
		goto out;
	}
	curl_easy_setopt(c, CURLOPT_URL, url.data);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, sl);
	curl_easy_setopt(c, CURLOPT_SHARE, s->share);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(c, CURLOPT_BUFFERSIZE, RECV_BUFFER);
	curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, s->connect_timeout_s);
	/* A stall, not a total, limit: a 5 GB read may take long but must
	 * keep moving. Under 1 byte/s for timeout seconds aborts. */
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, s->timeout_s);
	uint64_t now = cis_mono_ms();
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
	                 !r->until_ms        ? 0L
	                 : now < r->until_ms ? (long)(r->until_ms - now)
	                                     : 1L);
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, s->verify_tls ? 1L : 0L);
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, s->verify_tls ? 2L : 0L);
	if (s->ca_bundle)
		curl_easy_setopt(c, CURLOPT_CAINFO, s->ca_bundle);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	/* Every request: the progress call is where a stopping process ends
	 * its requests (cis_ufs_cancel_all); for a read it also ticks the sink. */
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	if (!strcmp(r->method, "HEAD")) {
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	} else if (!strcmp(r->method, "PUT")) {
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
	} else if (!strcmp(r->method, "POST")) {
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
	} else if (strcmp(r->method, "GET")) {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
	}
	if (!strcmp(r->method, "PUT") || !strcmp(r->method, "POST")) {
		curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(c, CURLOPT_READDATA, r);
		curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(c, CURLOPT_SEEKDATA, r);
	}
	*cc = curl_easy_perform(c);
	pool_put(s, c);
	rc = 0;
out:
	curl_slist_free_all(sl);
	cis_kvlist_free(&h);
	cis_buf_free(&path);
	cis_buf_free(&host);
	cis_buf_free(&url);
	cis_buf_free(&q);
	return rc;
}

static const char *status_code_name(long status)
{
	switch (status) {
	case 301:
		return "PermanentRedirect";
	case 302:
		return "Found";
	case 307:
		return "TemporaryRedirect";
	case 400:
		return "BadRequest";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "NotFound";
	case 405:
		return "MethodNotAllowed";
	case 409:
		return "Conflict";
	case 412:
		return "PreconditionFailed";
	case 416:
		return "InvalidRange";
	case 429:
		return "TooManyRequests";
	case 503:
		return "ServiceUnavailable";
	default:
		return status >= 500 ? "ServerError" : "Error";
	}
}

/* The code and line for a non-2xx reply: "s3://b/k: 403 AccessDenied: Access Denied".
 * Redirects are not followed (the request would have to be signed for
 * another region); their line, like that of any reply naming another
 * region for the bucket, points at the region and endpoint. */
static int http_error(const struct s3 *s, const struct req *r, const char *what, cis_errmsg *em)
{
	cis_s3_error e;
	bool have = r->resp.len && cis_s3_xml_parse_error(r->resp.data, r->resp.len, &e) == 0;
	const char *code = have && e.code[0] ? e.code : status_code_name(r->status);
	const char *msg = have ? e.message : "";
	const char *hint = "";
	char region_hint[160];
	int err;

	if (!strcmp(code, "NoSuchBucket")) {
		err = -CIS_E_NOBUCKET;
	} else if (!strcmp(code, "ExpiredToken") || !strcmp(code, "InvalidToken") ||
	           !strcmp(code, "TokenRefreshRequired")) {
		/* 400 from S3: temporary credentials are read once, at the
		 * mount's open */
		err = -CIS_E_DENIED;
		hint = " (the session token has expired or is not valid: give the mount new "
		       "credentials)";
	} else if (r->status == 403 && !strcmp(code, "RequestTimeTooSkewed")) {
		err = -CIS_E_DENIED;
		hint = " (this host's clock is off: set it right, e.g. with NTP)";
	} else if (r->status == 404) {
		err = -ENOENT;
	} else if (r->status == 401 || r->status == 403) {
		err = -CIS_E_DENIED;
		hint = " (check access_key and secret_key)";
	} else if (r->status == 412) {
		err = -CIS_E_CHANGED;
	} else if (r->status / 100 == 3 || !strcmp(code, "AuthorizationHeaderMalformed")) {
		err = -CIS_E_STORE;
		hint = " (check region and endpoint)";
	} else {
		err = -CIS_E_STORE;
	}
	if (err == -CIS_E_STORE && r->bucket_region[0] && strcmp(r->bucket_region, s->region)) {
		snprintf(region_hint, sizeof(region_hint),
		         " (the bucket is in region %s, not %s: check region and endpoint)",
		         r->bucket_region, s->region);
		hint = region_hint;
	}
	return cis_fail(em, err, "%s: %ld %s%s%s%s", what, r->status, code, msg[0] ? ": " : "", msg,
	                hint);
}

/* Whether the store asked to slow down: a 429, or a 503 SlowDown (not any
 * 503: a store that is down answers one too, and is not waited out). A
 * reply to HEAD has no body to say which: its 503 counts as SlowDown, or
 * every stat of a throttled prefix would give up within a second. */
static bool throttled(const struct req *r)
{
	cis_s3_error e;
	if (r->status == 503 && !strcmp(r->method, "HEAD"))
		return true;
	return r->status == 429 || (r->status == 503 && r->resp.len &&
	                            cis_s3_xml_parse_error(r->resp.data, r->resp.len, &e) == 0 &&
	                            !strcmp(e.code, "SlowDown"));
}

/* Whether r's deadline leaves no room for another try (less than the
 * shortest pause before one). */
static bool past_deadline(const struct req *r)
{
	return r->until_ms && cis_mono_ms() + RETRY_BASE_MS >= r->until_ms;
}

/* Run r with retries. 0 on a 2xx reply (r->status, headers and body
 * filled), else a code with em filled. */
static int s3_do(struct s3 *s, struct req *r, cis_errmsg *em)
{
	char what[600];

	what_of(s, r->key, what, sizeof(what));
	if (!r->payload_hash)
		r->payload_hash = CIS_S3_EMPTY_SHA256;
	if (!r->body_max)
		r->body_max = ERRBODY_MAX;
	for (int attempt = 0;; attempt++) {
		CURLcode cc = CURLE_OK;
		bool last = attempt + 1 >= RETRY_ATTEMPTS;
		bool late = false; /* past until_ms once this attempt is over */
		uint64_t cap_ms = RETRY_CAP_MS;
		int rc = 0;

		r->status = 0;
		cis_buf_reset(&r->resp);
		r->etag[0] = 0;
		r->bucket_region[0] = 0;
		r->have_cl = false;
		r->chunked = false;
		r->mtime_ns = 0;
		r->stream_pos = 0;
		r->up_pos = 0;
		r->too_big = false;
		r->window_done = false;
		r->changed = false;
		r->have_cr = false;
		r->cr_text[0] = 0;
		r->bad_range = false;
		r->overrun = false;
		if (cis_ufs_cancelled())
			r->cancelled = true;
		else
			rc = attempt_once(s, r, &cc);
		if (r->cancelled)
			return cis_fail(em, -ECANCELED, "%s: abandoned: the process is stopping",
			                what);
		if (rc)
			return cis_fail(em, rc, "%s: cannot build request: %s", what,
			                cis_strerror(rc));
		if (r->sink_rc)
			return cis_fail(em, r->sink_rc, "%s: read aborted by its consumer: %s",
			                what, cis_strerror(r->sink_rc));
		if (r->bad_range)
			return cis_fail(em, -CIS_E_STORE,
			                "%s: %ld reply with content-range \"%s\", asked for bytes "
			                "%" PRIu64 "-%" PRIu64,
			                what, r->status, r->cr_text, r->win_off,
			                r->win_off + r->win_len - 1);
		if (r->overrun)
			return cis_fail(em, -CIS_E_STORE,
			                "%s: 206 reply body longer than its content-range \"%s\"",
			                what, r->cr_text);
		if (r->changed)
			return cis_fail(em, -CIS_E_CHANGED,
			                "%s: object changed (etag %s, wanted %s)", what, r->etag,
			                r->expect_etag);
		if (cc == CURLE_OK || (cc == CURLE_WRITE_ERROR && r->window_done)) {
			if (r->status / 100 == 2)
				return 0;
			bool retry = r->status >= 500 || r->status == 429;
			if (throttled(r)) {
				last = attempt + 1 >= RETRY_THROTTLED_ATTEMPTS;
				cap_ms = RETRY_THROTTLED_CAP_MS;
			}
			late = past_deadline(r);
			if (!retry || last || late || r->delivered)
				return http_error(s, r, what, em);
			cis_log_limited(CIS_LOG_WARN, "s3-retry", 10, "s3 request retried",
			                "uri=%s method=%s status=%ld attempt=%d", what, r->method,
			                r->status, attempt + 1);
		} else {
			if (r->too_big)
				return cis_fail(em, -CIS_E_STORE, "%s: reply body over %zu bytes",
				                what, r->body_max);
			if (r->delivered)
				return cis_fail(em, -CIS_E_STORE,
				                "%s: transfer failed after %" PRIu64 " bytes: %s",
				                what, r->delivered, curl_easy_strerror(cc));
			late = past_deadline(r);
			if (late && curl_retryable(cc))
				return cis_fail(em, -ETIMEDOUT, "%s: no answer in time: %s", what,
				                curl_easy_strerror(cc));
			if (!curl_retryable(cc) || last)
				return cis_fail(
				    em, -CIS_E_STORE, "%s: %s%s", what, curl_easy_strerror(cc),
				    last && curl_retryable(cc) ? " (after retries)" : "");
			cis_log_limited(CIS_LOG_WARN, "s3-retry", 10, "s3 request retried",
			                "uri=%s method=%s error=\"%s\" attempt=%d", what, r->method,
			                curl_easy_strerror(cc), attempt + 1);
		}
		if (r->until_ms) { /* no pause past it: the next try would only time out */
			uint64_t now = cis_mono_ms();
			uint64_t left = r->until_ms > now ? r->until_ms - now : 0;
			if (cap_ms > left)
				cap_ms = left;
		}
		backoff(attempt, cap_ms);
	}
}

static void req_free(struct req *r)
{
	cis_kvlist_free(&r->query);
	cis_kvlist_free(&r->hdrs);
	cis_buf_free(&r->resp);
}

/* ---- credentials and options ---- */

static void trim(char *s)
{
	size_t n = strlen(s);
	char *b = s;

	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = 0;
	while (*b && isspace((unsigned char)*b))
		b++;
	memmove(s, b, strlen(b) + 1);
}

/* The AWS profile in use (AWS_PROFILE, else "default"). */
static const char *aws_profile(void)
{
	const char *p = getenv("AWS_PROFILE");
	return p && p[0] ? p : "default";
}

/* The path of an AWS shared file: the variable env names, else
 * ~/.aws/name. False when neither gives one. */
static bool aws_file(const char *env, const char *name, char *path, size_t len)
{
	const char *file = getenv(env);
	const char *home = getenv("HOME");

	if (file && file[0])
		snprintf(path, len, "%s", file);
	else if (home && home[0])
		snprintf(path, len, "%s/.aws/%s", home, name);
	else
		return false;
	return true;
}

/* Values of keys[0..n) in [section] of an AWS shared file (INI) into
 * vals[] (malloc'd, the caller frees them with free_secret; NULL where
 * absent). A missing file: 0 with nothing set. Lines are wiped after use:
 * the credentials file holds secrets. */
static int ini_read(const char *path, const char *section, const char *const keys[], char *vals[],
                    size_t n, cis_errmsg *em)
{
	char line[4096];
	bool in = false;
	struct stat sb;
	FILE *f = fopen(path, "re");

	if (!f)
		return 0;
	if (fstat(fileno(f), &sb) || sb.st_size > CREDS_FILE_MAX) {
		fclose(f);
		return cis_fail(em, -CIS_E_CONFIG, "%s: unreadable or over %u bytes", path,
		                CREDS_FILE_MAX);
	}
	while (fgets(line, sizeof(line), f)) {
		trim(line);
		if (line[0] == '[') {
			char *e = strchr(line, ']');
			if (e)
				*e = 0;
			trim(line + 1);
			in = !strcmp(line + 1, section);
			continue;
		}
		char *eq = strchr(line, '=');
		if (!in || !eq || line[0] == '#' || line[0] == ';')
			continue;
		*eq = 0;
		trim(line);
		trim(eq + 1);
		for (size_t i = 0; i < n; i++) {
			if (strcmp(line, keys[i]))
				continue;
			free_secret(vals[i]);
			vals[i] = strdup(eq + 1);
		}
	}
	OPENSSL_cleanse(line, sizeof(line));
	fclose(f);
	return 0;
}

/* Keys of [profile] in the AWS shared credentials file. Missing file or
 * profile: 0 with nothing set. */
static int read_creds_file(struct s3 *s, cis_errmsg *em)
{
	static const char *const keys[] = {"aws_access_key_id", "aws_secret_access_key",
	                                   "aws_session_token"};
	char *v[3] = {NULL, NULL, NULL};
	char path[4096];
	int rc;

	if (!aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials", path, sizeof(path)))
		return 0;
	rc = ini_read(path, aws_profile(), keys, v, 3, em);
	if (rc == 0 && v[0] && v[0][0] && v[1] && v[1][0]) {
		s->access_key = v[0];
		s->secret_key = v[1];
		s->session_token = v[2] && v[2][0] ? v[2] : NULL;
		if (!s->session_token)
			free_secret(v[2]);
		return 0;
	}
	for (int i = 0; i < 3; i++)
		free_secret(v[i]);
	return rc;
}

/* The region of the profile in the AWS config file, where its section is
 * [default] or [profile NAME]; NULL when it gives none. */
static char *config_region(cis_errmsg *em, int *rc)
{
	static const char *const keys[] = {"region"};
	const char *profile = aws_profile();
	char path[4096], section[300];
	char *v = NULL;

	*rc = 0;
	if (!aws_file("AWS_CONFIG_FILE", "config", path, sizeof(path)))
		return NULL;
	if (!strcmp(profile, "default"))
		snprintf(section, sizeof(section), "default");
	else
		snprintf(section, sizeof(section), "profile %s", profile);
	*rc = ini_read(path, section, keys, &v, 1, em);
	if (*rc || !v || !v[0]) {
		free(v);
		return NULL;
	}
	return v;
}

/* Options first, then the environment, then the credentials file. */
static int load_creds(struct s3 *s, const cis_kvlist *o, cis_errmsg *em)
{
	const char *ak = o ? cis_kvlist_get(o, "access_key") : NULL;
	const char *sk = o ? cis_kvlist_get(o, "secret_key") : NULL;
	const char *tok = o ? cis_kvlist_get(o, "session_token") : NULL;

	if ((ak && ak[0]) != (sk && sk[0]))
		return cis_fail(em, -CIS_E_CONFIG, "s3://%s: access_key and secret_key go together",
		                s->bucket);
	if (!(ak && ak[0])) {
		ak = getenv("AWS_ACCESS_KEY_ID");
		sk = getenv("AWS_SECRET_ACCESS_KEY");
		tok = getenv("AWS_SESSION_TOKEN");
	}
	if (ak && ak[0] && sk && sk[0]) {
		s->access_key = strdup(ak);
		s->secret_key = strdup(sk);
		s->session_token = dup_or_null(tok);
		if (!s->access_key || !s->secret_key || (tok && tok[0] && !s->session_token))
			return -ENOMEM;
		/* A Secret made from a file ends in a newline, which would end
		 * up inside a header line. */
		trim(s->access_key);
		trim(s->secret_key);
		if (s->session_token)
			trim(s->session_token);
		return 0;
	}
	return read_creds_file(s, em);
}

static const char *opt(const cis_kvlist *o, const char *k)
{
	const char *v = o ? cis_kvlist_get(o, k) : NULL;
	return v && v[0] ? v : NULL;
}

static int parse_endpoint(struct s3 *s, const char *endpoint, cis_errmsg *em)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL, *user = NULL;
	int rc = -CIS_E_CONFIG;

	if (!u)
		return -ENOMEM;
	if (curl_url_set(u, CURLUPART_URL, endpoint, 0) ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0)) {
		/* Unparsed, its "user:secret@" cannot be cut out: never echo
		 * a text with one. */
		if (strchr(endpoint, '@'))
			cis_fail(em, rc,
			         "endpoint: not a url (and credentials belong in "
			         "access_key, not the url)");
		else
			cis_fail(em, rc, "endpoint %s: not a url", endpoint);
		goto out;
	}
	curl_url_get(u, CURLUPART_PORT, &port, 0); /* absent when not given */
	curl_url_get(u, CURLUPART_PATH, &path, 0);
	if (!curl_url_get(u, CURLUPART_USER, &user, 0) && user) {
		cis_fail(em, rc, "endpoint: credentials belong in access_key, not the url");
		goto out;
	}
	if (strcmp(scheme, "http") && strcmp(scheme, "https")) {
		cis_fail(em, rc, "endpoint %s: scheme must be http or https", endpoint);
		goto out;
	}
	if (path && strcmp(path, "/") && path[0]) {
		cis_fail(em, rc, "endpoint %s: a path is not supported", endpoint);
		goto out;
	}
	cis_buf hb = CIS_BUF_INIT;
	if (cis_buf_printf(&hb, "%s%s%s", host, port ? ":" : "", port ? port : "")) {
		rc = -ENOMEM;
		goto out;
	}
	s->host = cis_buf_steal(&hb);
	s->scheme = strdup(scheme);
	rc = s->host && s->scheme ? 0 : -ENOMEM;
out:
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_free(path);
	curl_free(user);
	curl_url_cleanup(u);
	return rc;
}

static void s3_close(void *state)
{
	struct s3 *s = state;

	if (!s)
		return;
	for (size_t i = 0; i < s->pool_n; i++)
		curl_easy_cleanup(s->pool[i]);
	if (s->share)
		curl_share_cleanup(s->share);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&s->share_locks[i]);
	pthread_mutex_destroy(&s->pool_lock);
	free(s->bucket);
	free(s->prefix);
	free(s->scheme);
	free(s->host);
	free(s->region);
	free_secret(s->access_key);
	free_secret(s->secret_key);
	free_secret(s->session_token);
	free(s->ca_bundle);
	free(s);
}

static bool bucket_name_ok(const char *b)
{
	size_t n = strlen(b);

	if (n < 1 || n > 255)
		return false;
	for (const char *c = b; *c; c++) {
		if (!isalnum((unsigned char)*c) && *c != '-' && *c != '.' && *c != '_')
			return false;
	}
	return true;
}

/* Whether b can be one DNS label of a virtual-hosted bucket's name. */
static bool dns_label(const char *b)
{
	for (const char *c = b; *c; c++)
		if (!islower((unsigned char)*c) && !isdigit((unsigned char)*c) && *c != '-')
			return false;
	return strlen(b) <= 63;
}

static bool prefix_ok(const char *p)
{
	/* Components: not empty, not "." or "..". */
	const char *c = p;

	while (*c) {
		const char *e = strchr(c, '/');
		size_t n = e ? (size_t)(e - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		c += n;
		if (*c)
			c++;
	}
	return true;
}

static int s3_open(const char *rest, const cis_kvlist *o, void **state, cis_errmsg *em)
{
	struct s3 *s;
	const char *v;
	char endpoint[1024];
	int rc = -ENOMEM;

	*state = NULL;
	pthread_once(&curl_once, curl_init_once);
	s = calloc(1, sizeof(*s));
	if (!s)
		return cis_fail(em, -ENOMEM, "s3: out of memory");
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&s->share_locks[i], NULL);
	pthread_mutex_init(&s->pool_lock, NULL);

	/* bucket[/prefix]. Never echo a "key:secret@" part into a message: a
	 * bucket name holds neither '@' nor ':', and a secret may hold a '/'. */
	const char *slash = strchr(rest, '/');
	size_t blen = slash ? (size_t)(slash - rest) : strlen(rest);
	if (memchr(rest, '@', blen) || memchr(rest, ':', blen)) {
		rc = cis_fail(em, -CIS_E_URI,
		              "s3 uri: credentials in the uri are not supported "
		              "(use the access_key and secret_key options)");
		goto out_fail;
	}
	s->bucket = slash ? strndup(rest, (size_t)(slash - rest)) : strdup(rest);
	const char *pfx = slash ? slash + 1 : "";
	while (*pfx == '/')
		pfx++;
	s->prefix = strdup(pfx);
	if (!s->bucket || !s->prefix)
		goto out_fail;
	size_t pl = strlen(s->prefix);
	while (pl && s->prefix[pl - 1] == '/')
		s->prefix[--pl] = 0;
	if (!bucket_name_ok(s->bucket)) {
		rc = cis_fail(em, -CIS_E_URI, "s3://%s: bad bucket name", s->bucket);
		goto out_fail;
	}
	if (!prefix_ok(s->prefix) || strlen(s->prefix) > 1024) {
		rc = cis_fail(em, -CIS_E_URI, "s3://%s: bad prefix", rest);
		goto out_fail;
	}

	/* The option, the environment, the AWS config file, us-east-1. */
	v = opt(o, "region");
	if (!v)
		v = getenv("AWS_REGION");
	if (!v || !v[0])
		v = getenv("AWS_DEFAULT_REGION");
	if (v && v[0]) {
		s->region = strdup(v);
	} else {
		s->region = config_region(em, &rc);
		if (rc)
			goto out_fail;
		if (!s->region)
			s->region = strdup("us-east-1");
	}
	if (!s->region) {
		rc = -ENOMEM;
		goto out_fail;
	}

	bool custom = true;
	v = opt(o, "endpoint");
	if (!v)
		v = getenv("AWS_ENDPOINT_URL_S3");
	if (!v || !v[0])
		v = getenv("AWS_ENDPOINT_URL");
	if (!v || !v[0]) {
		snprintf(endpoint, sizeof(endpoint), "https://s3.%s.amazonaws.com", s->region);
		v = endpoint;
		custom = false;
	}
	rc = parse_endpoint(s, v, em);
	if (rc)
		goto out_fail;

	/* Path style by default off AWS: MinIO, s3rver, Ceph rarely have
	 * wildcard DNS for bucket names; and for a bucket whose name is no
	 * single lowercase DNS label (a dot breaks the TLS wildcard, capitals
	 * and '_' the DNS name), as the AWS SDKs do. */
	s->path_style = custom || !dns_label(s->bucket);
	if ((v = opt(o, "path_style")) && parse_bool(v, &s->path_style)) {
		rc = cis_fail(em, -CIS_E_CONFIG, "path_style=%s: want true or false", v);
		goto out_fail;
	}
	s->verify_tls = true;
	if ((v = opt(o, "verify_tls")) && parse_bool(v, &s->verify_tls)) {
		rc = cis_fail(em, -CIS_E_CONFIG, "verify_tls=%s: want true or false", v);
		goto out_fail;
	}
	if ((v = opt(o, "ca_bundle")) && !(s->ca_bundle = strdup(v))) {
		rc = cis_fail(em, -ENOMEM, "s3: out of memory");
		goto out_fail;
	}
	s->part_size = PART_DEFAULT;
	if ((v = opt(o, "part_size")) &&
	    (parse_size(v, &s->part_size) || s->part_size < PART_MIN || s->part_size > PART_MAX)) {
		rc = cis_fail(em, -CIS_E_CONFIG, "part_size=%s: want 5M to 1G", v);
		goto out_fail;
	}
	s->timeout_s = 60;
	if ((v = opt(o, "timeout")) && parse_seconds(v, &s->timeout_s)) {
		rc = cis_fail(em, -CIS_E_CONFIG, "timeout=%s: want seconds, 1 to 86400", v);
		goto out_fail;
	}
	s->connect_timeout_s = 10;
	if ((v = opt(o, "connect_timeout")) && parse_seconds(v, &s->connect_timeout_s)) {
		rc = cis_fail(em, -CIS_E_CONFIG, "connect_timeout=%s: want seconds, 1 to 86400", v);
		goto out_fail;
	}
	rc = load_creds(s, o, em);
	if (rc) {
		if (rc == -ENOMEM)
			cis_fail(em, rc, "s3: out of memory");
		goto out_fail;
	}

	s->share = curl_share_init();
	if (!s->share) {
		rc = cis_fail(em, -ENOMEM, "s3: cannot make a curl share handle");
		goto out_fail;
	}
	curl_share_setopt(s->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(s->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(s->share, CURLSHOPT_USERDATA, s);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
	*state = s;
	return 0;

out_fail:
	if (rc == -ENOMEM && em && !em->text[0])
		cis_fail(em, rc, "s3: out of memory");
	s3_close(s);
	return rc;
}

/* ---- operations ---- */

/* One-key listing under prefix: *found when anything is there. */
static int probe_prefix(struct s3 *s, const char *prefix, uint64_t until_ms, bool *found,
                        cis_errmsg *em)
{
	struct req r = {.method = "GET", .body_max = CIS_S3_XML_MAX, .until_ms = until_ms};
	cis_s3_list l;
	int rc;

	*found = false;
	if (cis_kvlist_set(&r.query, "list-type", "2") ||
	    cis_kvlist_set(&r.query, "encoding-type", "url") ||
	    cis_kvlist_set(&r.query, "max-keys", "1") ||
	    cis_kvlist_set(&r.query, "prefix", prefix)) {
		req_free(&r);
		return cis_fail(em, -ENOMEM, "s3: out of memory");
	}
	rc = s3_do(s, &r, em);
	if (rc == 0) {
		rc = cis_s3_xml_parse_list(r.resp.data, r.resp.len, &l);
		if (rc) {
			char what[600];
			what_of(s, prefix, what, sizeof(what));
			rc = cis_fail(em, -CIS_E_STORE, "%s: malformed listing reply", what);
		} else {
			*found = l.n_objects || l.n_prefixes || l.key_count > 0;
			cis_s3_list_free(&l);
		}
	}
	req_free(&r);
	return rc;
}

static int s3_check(void *state, cis_errmsg *em)
{
	struct s3 *s = state;
	char *p = NULL;
	bool found;
	int rc;

	if (s->prefix[0] && asprintf(&p, "%s/", s->prefix) < 0)
		return cis_fail(em, -ENOMEM, "s3: out of memory");
	/* Done within the timeout, retries and all: a mount waits on it (an
	 * HTTP thread of the master's API), and a store that trickles its
	 * answer would pass the stall limit for ever. */
	rc = probe_prefix(s, p ? p : "", cis_mono_ms() + (uint64_t)s->timeout_s * 1000, &found, em);
	free(p);
	return rc;
}

static int s3_stat(void *state, const char *path, struct cis_ufs_stat *st, cis_errmsg *em)
{
	struct s3 *s = state;
	struct req r = {.method = "HEAD"};
	char *key, *dirp = NULL;
	bool found;
	int rc;

	memset(st, 0, sizeof(*st));
	if (!path[0]) {
		/* The root always is a directory once the bucket answers. */
		rc = s3_check(s, em);
		if (!rc)
			st->is_dir = true;
		return rc;
	}
	key = full_key(s, path);
	if (!key)
		return cis_fail(em, -ENOMEM, "s3: out of memory");
	r.key = key;
	rc = s3_do(s, &r, em);
	if (rc == 0 && !r.have_cl) {
		/* Taken for 0 bytes, the object would read as empty. */
		rc = fail_at(s, key, em, -CIS_E_STORE,
		             "the store answered HEAD without a Content-Length, so the "
		             "object's size is unknown");
		goto out;
	}
	if (rc == 0) {
		st->size = r.content_length;
		st->mtime_ns = r.mtime_ns;
		snprintf(st->version, sizeof(st->version), "%s", r.etag);
		goto out;
	}
	if (rc != -ENOENT)
		goto out;
	/* No object: a directory if anything sits under "key/". */
	if (asprintf(&dirp, "%s/", key) < 0) {
		rc = cis_fail(em, -ENOMEM, "s3: out of memory");
		goto out;
	}
	cis_errmsg em2 = {{0}};
	rc = probe_prefix(s, dirp, 0, &found, &em2);
	if (rc) {
		if (em)
			*em = em2;
	} else if (found) {
		st->is_dir = true;
	} else {
		rc = fail_at(s, key, em, -ENOENT, "no such object or directory");
	}
out:
	free(dirp);
	free(key);
	req_free(&r);
	return rc;
}

/* Add one entry to page; name is copied. */
static int page_add(cis_ufs_page *page, size_t *cap, const char *name, size_t nlen, bool dir,
                    const cis_s3_object *o)
{
	if (page->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		cis_ufs_entry *e = realloc(page->entries, nc * sizeof(*e));
		if (!e)
			return -ENOMEM;
		page->entries = e;
		*cap = nc;
	}
	cis_ufs_entry *e = &page->entries[page->n];
	memset(e, 0, sizeof(*e));
	e->name = strndup(name, nlen);
	if (!e->name)
		return -ENOMEM;
	e->st.is_dir = dir;
	if (o) {
		e->st.size = o->size;
		e->st.mtime_ns = o->mtime_ns;
		snprintf(e->st.version, sizeof(e->st.version), "%s", o->etag);
	}
	page->n++;
	return 0;
}

/* Adds key (a full key under pfx) as an entry unless it names nothing
 * listable: the directory marker itself, deeper keys, "." and "..", and a
 * key not under pfx at all (a store that answers another listing). */
static int add_key(cis_ufs_page *page, size_t *cap, const char *key, const char *pfx, size_t plen,
                   bool is_prefix, const cis_s3_object *o)
{
	if (strncmp(key, pfx, plen) != 0)
		return 0;
	const char *name = key + plen;
	size_t n = strlen(name);
	bool dir = is_prefix;

	if (n && name[n - 1] == '/') { /* "name/": a common prefix or a marker key */
		n--;
		dir = true;
	}
	if (n == 0 || memchr(name, '/', n) || (n == 1 && name[0] == '.') ||
	    (n == 2 && name[0] == '.' && name[1] == '.'))
		return 0;
	return page_add(page, cap, name, n, dir, dir ? NULL : o);
}

static int s3_list(void *state, const char *dir, const char *token, size_t max, cis_ufs_page *page,
                   cis_errmsg *em)
{
	struct s3 *s = state;
	struct req r = {.method = "GET", .body_max = CIS_S3_XML_MAX};
	cis_s3_list l = {0};
	char *base = full_key(s, dir), *pfx = NULL, maxs[24];
	size_t cap = 0, io = 0, ip = 0, plen;
	int rc;

	memset(page, 0, sizeof(*page));
	if (!base)
		return cis_fail(em, -ENOMEM, "s3: out of memory");
	if (asprintf(&pfx, "%s%s", base, base[0] ? "/" : "") < 0) {
		free(base);
		return cis_fail(em, -ENOMEM, "s3: out of memory");
	}
	plen = strlen(pfx);
	snprintf(maxs, sizeof(maxs), "%zu", max && max < LIST_MAX_KEYS ? max : LIST_MAX_KEYS);
	if (cis_kvlist_set(&r.query, "list-type", "2") ||
	    cis_kvlist_set(&r.query, "encoding-type", "url") ||
	    cis_kvlist_set(&r.query, "delimiter", "/") || cis_kvlist_set(&r.query, "prefix", pfx) ||
	    cis_kvlist_set(&r.query, "max-keys", maxs) ||
	    (token && token[0] && cis_kvlist_set(&r.query, "continuation-token", token))) {
		rc = cis_fail(em, -ENOMEM, "s3: out of memory");
		goto out;
	}
	rc = s3_do(s, &r, em);
	if (rc)
		goto out;
	rc = cis_s3_xml_parse_list(r.resp.data, r.resp.len, &l);
	if (rc) {
		rc = fail_at(s, pfx, em, -CIS_E_STORE, "malformed listing reply (%s)",
		             cis_strerror(rc));
		goto out;
	}
	if (l.truncated && token && !strcmp(l.next_token, token)) {
		/* A store that ignores continuation-token (a proxy dropping
		 * it) sends the same page again: paging on would never end. */
		rc = fail_at(s, pfx, em, -CIS_E_STORE,
		             "the store repeated continuation token it was sent "
		             "(listing does not advance)");
		goto out;
	}
	/* Objects and prefixes each come sorted; merge them into key order. */
	while (io < l.n_objects || ip < l.n_prefixes) {
		bool take_obj = ip == l.n_prefixes ||
		                (io < l.n_objects && strcmp(l.objects[io].key, l.prefixes[ip]) < 0);
		if (take_obj) {
			rc = add_key(page, &cap, l.objects[io].key, pfx, plen, false,
			             &l.objects[io]);
			io++;
		} else {
			rc = add_key(page, &cap, l.prefixes[ip], pfx, plen, true, NULL);
			ip++;
		}
		if (rc) {
			rc = cis_fail(em, rc, "s3: out of memory");
			goto out;
		}
	}
	if (l.truncated && !(page->next_token = strdup(l.next_token))) {
		rc = cis_fail(em, -ENOMEM, "s3: out of memory");
		goto out;
	}
	rc = 0;
out:
	if (rc) {
		for (size_t i = 0; i < page->n; i++)
			free(page->entries[i].name);
		free(page->entries);
		free(page->next_token);
		memset(page, 0, sizeof(*page));
	}
	cis_s3_list_free(&l);
	req_free(&r);
	free(pfx);
	free(base);
	return rc;
}

static int s3_read(void *state, const char *path, const char *version, uint64_t off, uint64_t len,
                   cis_ufs_sink_fn sink, void *arg, uint64_t *got, cis_errmsg *em)
{
	struct s3 *s = state;
	struct req r = {.method = "GET", .sink = sink, .sink_arg = arg, .ranged = true};
	char range[64];
	char *key;
	int rc;

	if (got)
		*got = 0;
	if (len == 0)
		return 0;
	key = full_key(s, path);
	if (!key)
		return cis_fail(em, -ENOMEM, "s3: out of memory");
	r.key = key;
	uint64_t last = len - 1 > UINT64_MAX - 1 - off ? UINT64_MAX - 1 : off + len - 1;
	snprintf(range, sizeof(range), "bytes=%" PRIu64 "-%" PRIu64, off, last);
	r.win_off = off;
	r.win_len = last - off + 1;
	if (cis_kvlist_set(&r.hdrs, "range", range) ||
	    (version && version[0] && cis_kvlist_set(&r.hdrs, "if-match", version))) {
		rc = cis_fail(em, -ENOMEM, "s3: out of memory");
		goto out;
	}
	r.expect_etag = version && version[0] ? version : NULL;
	rc = s3_do(s, &r, em);
	if ((rc == 0 || (rc == -CIS_E_STORE && r.status == 416)) && !r.delivered && r.expect_etag &&
	    r.etag[0] && strcmp(r.etag, r.expect_etag)) {
		/* No byte went through on_body's check (an empty object's
		 * reply, a 416): the end of another version is no end of this
		 * one, from a store that ignores If-Match (s3rver). */
		rc = fail_at(s, key, em, -CIS_E_CHANGED, "object changed (etag %s, wanted %s)",
		             r.etag, r.expect_etag);
		goto out;
	}
	if (rc == -CIS_E_STORE && r.status == 416) {
		/* Starting at or past the end: no bytes, not an error. */
		rc = 0;
		cis_fail(em, 0, "%s", "");
		goto out;
	}
	if (rc == 0 && ((r.status == 206 && !r.have_cr && !r.window_done) ||
	                (r.status != 200 && r.status != 206))) {
		/* on_body refuses such a reply at its first byte; one with no
		 * body (a 204, a 206 without a range) would otherwise pass as
		 * a read of zero bytes, the end. */
		rc = fail_at(s, key, em, -CIS_E_STORE,
		             "%ld reply with content-range \"%s\", asked for bytes %" PRIu64
		             "-%" PRIu64,
		             r.status, r.cr_text, r.win_off, r.win_off + r.win_len - 1);
	}
	if (rc == 0 && r.status == 206 &&
	    ((r.have_cl && r.delivered != r.content_length) ||
	     (r.have_cr && r.delivered != r.cr_end - r.cr_start + 1))) {
		rc = fail_at(s, key, em, -CIS_E_STORE,
		             "short read: %" PRIu64 " of %" PRIu64 " bytes (content-range %s)",
		             r.delivered, r.cr_end - r.cr_start + 1, r.cr_text);
	}
	if (rc == 0 && r.status == 200 && !r.have_cl && !r.chunked && r.delivered < r.win_len) {
		/* The whole object with its end marked by nothing but the
		 * connection closing: a cut cannot be told from the end. */
		rc = fail_at(s, key, em, -CIS_E_STORE,
		             "the store ended a reply of unknown length after %" PRIu64
		             " of %" PRIu64 " bytes (cut?)",
		             r.delivered, r.win_len);
	}
out:
	if (got)
		*got = r.delivered;
	free(key);
	req_free(&r);
	return rc;
}

/* Read exactly n bytes from fd into buf: 0, or -EIO at an early end. */
static int read_full(int fd, char *buf, size_t n, const char *what, cis_errmsg *em)
{
	size_t done = 0;

	while (done < n) {
		ssize_t k = read(fd, buf + done, n - done);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return cis_fail(em, -errno, "%s: read from source: %s", what,
			                strerror(errno));
		if (k == 0)
			return cis_fail(em, -EIO, "%s: source ended after %zu of %zu bytes", what,
			                done, n);
		done += (size_t)k;
	}
	return 0;
}

static int put_buf(struct s3 *s, const char *key, const char *data, size_t n, cis_errmsg *em)
{
	char hash[CIS_S3_SHA256_HEX];
	struct req r = {.method = "PUT", .key = key, .body = data, .body_len = n};
	int rc;

	cis_s3_sha256_hex(data, n, hash);
	r.payload_hash = hash;
	rc = s3_do(s, &r, em);
	req_free(&r);
	return rc;
}

static void abort_upload(struct s3 *s, const char *key, const char *upload_id)
{
	struct req r = {.method = "DELETE", .key = key};
	cis_errmsg em = {{0}};

	if (!cis_kvlist_set(&r.query, "uploadId", upload_id) && s3_do(s, &r, &em))
		cis_log(CIS_LOG_WARN, "s3 multipart abort failed", "error=\"%s\"", em.text);
	req_free(&r);
}

static int multipart(struct s3 *s, const char *key, int fd, uint64_t size, cis_errmsg *em)
{
	char what[600], hash[CIS_S3_SHA256_HEX], pn[24];
	struct req r = {.method = "POST", .key = key};
	uint64_t ps = s->part_size;
	char *upload_id = NULL, *buf = NULL, **etags = NULL;
	cis_buf xml = CIS_BUF_INIT;
	size_t nparts;
	int rc;

	what_of(s, key, what, sizeof(what));
	if (size > (uint64_t)PARTS_MAX * PART_MAX * 5)
		return cis_fail(em, -CIS_E_TOOBIG, "%s: %" PRIu64 " bytes is too large", what,
		                size);
	if (size / ps >= PARTS_MAX) /* grow parts so that at most 10000 are needed */
		ps = ((size + PARTS_MAX - 1) / PARTS_MAX + (1u << 20) - 1) & ~((1ull << 20) - 1);
	nparts = (size_t)((size + ps - 1) / ps);
	buf = malloc(ps);
	etags = calloc(nparts, sizeof(*etags));
	if (!buf || !etags) {
		rc = cis_fail(em, -ENOMEM, "%s: out of memory for a %" PRIu64 "-byte part", what,
		              ps);
		goto out;
	}
	/* The object's type: curl would send a POST's form type otherwise,
	 * and a single PUT's object gets the store's default, this one. */
	if (cis_kvlist_set(&r.query, "uploads", "") ||
	    cis_kvlist_set(&r.hdrs, "content-type", "binary/octet-stream")) {
		rc = cis_fail(em, -ENOMEM, "s3: out of memory");
		goto out;
	}
	rc = s3_do(s, &r, em);
	if (rc)
		goto out;
	if (cis_s3_xml_parse_upload_id(r.resp.data, r.resp.len, &upload_id)) {
		rc = cis_fail(em, -CIS_E_STORE, "%s: malformed CreateMultipartUpload reply", what);
		goto out;
	}
	for (size_t i = 0; i < nparts; i++) {
		size_t n = (size_t)(i + 1 < nparts ? ps : size - (uint64_t)i * ps);
		struct req p = {.method = "PUT", .key = key, .body = buf, .body_len = n};
		rc = read_full(fd, buf, n, what, em);
		if (rc)
			goto out_abort;
		cis_s3_sha256_hex(buf, n, hash);
		p.payload_hash = hash;
		snprintf(pn, sizeof(pn), "%zu", i + 1);
		if (cis_kvlist_set(&p.query, "partNumber", pn) ||
		    cis_kvlist_set(&p.query, "uploadId", upload_id)) {
			req_free(&p);
			rc = cis_fail(em, -ENOMEM, "s3: out of memory");
			goto out_abort;
		}
		rc = s3_do(s, &p, em);
		if (!rc && !p.etag[0])
			rc = cis_fail(em, -CIS_E_STORE, "%s: part %zu: reply without ETag", what,
			              i + 1);
		if (!rc && !(etags[i] = strdup(p.etag)))
			rc = cis_fail(em, -ENOMEM, "s3: out of memory");
		req_free(&p);
		if (rc)
			goto out_abort;
	}
	rc = cis_buf_puts(&xml, "<CompleteMultipartUpload>");
	for (size_t i = 0; i < nparts && !rc; i++) {
		xmlChar *esc = xmlEncodeSpecialChars(NULL, (const xmlChar *)etags[i]);
		if (!esc) {
			rc = -ENOMEM;
			break;
		}
		rc =
		    cis_buf_printf(&xml, "<Part><PartNumber>%zu</PartNumber><ETag>%s</ETag></Part>",
		                   i + 1, (const char *)esc);
		xmlFree(esc);
	}
	if (rc || cis_buf_puts(&xml, "</CompleteMultipartUpload>")) {
		rc = cis_fail(em, -ENOMEM, "s3: out of memory");
		goto out_abort;
	}
	{
		struct req c = {
		    .method = "POST", .key = key, .body = xml.data, .body_len = xml.len};
		cis_s3_error e;
		cis_s3_sha256_hex(xml.data, xml.len, hash);
		c.payload_hash = hash;
		if (cis_kvlist_set(&c.query, "uploadId", upload_id) ||
		    cis_kvlist_set(&c.hdrs, "content-type", "application/xml")) {
			req_free(&c);
			rc = cis_fail(em, -ENOMEM, "s3: out of memory");
			goto out_abort;
		}
		rc = s3_do(s, &c, em);
		/* S3 may answer 200 and still fail, with an Error body. */
		if (!rc && c.resp.len && !cis_s3_xml_parse_error(c.resp.data, c.resp.len, &e))
			rc = cis_fail(em, -CIS_E_STORE, "%s: 200 %s: %s", what, e.code, e.message);
		req_free(&c);
		if (rc)
			goto out_abort;
	}
	goto out;
out_abort:
	abort_upload(s, key, upload_id);
out:
	if (etags) {
		for (size_t i = 0; i < nparts; i++)
			free(etags[i]);
		free(etags);
	}
	cis_buf_free(&xml);
	free(buf);
	free(upload_id);
	req_free(&r);
	return rc;
}

static int s3_write_fd(void *state, const char *path, int fd, uint64_t size, cis_errmsg *em)
{
	struct s3 *s = state;
	char *key = full_key(s, path), what[600];
	int rc;

	if (!key)
		return cis_fail(em, -ENOMEM, "s3: out of memory");
	what_of(s, key, what, sizeof(what));
	if (!path[0]) {
		rc = cis_fail(em, -EINVAL, "%s: cannot write the root", what);
	} else if (size <= s->part_size) {
		char *buf = malloc(size ? size : 1);
		if (!buf) {
			rc = cis_fail(em, -ENOMEM, "%s: out of memory", what);
		} else {
			rc = read_full(fd, buf, (size_t)size, what, em);
			if (!rc)
				rc = put_buf(s, key, buf, (size_t)size, em);
			free(buf);
		}
	} else {
		rc = multipart(s, key, fd, size, em);
	}
	free(key);
	return rc;
}

static int s3_delete(void *state, const char *path, cis_errmsg *em)
{
	struct s3 *s = state;
	struct req r = {.method = "DELETE"};
	char *key = full_key(s, path);
	int rc;

	if (!key)
		return cis_fail(em, -ENOMEM, "s3: out of memory");
	r.key = key;
	rc = s3_do(s, &r, em);
	/* S3 says 204 for a missing key; some stores say 404 NoSuchKey. */
	if (rc == -ENOENT) {
		rc = 0;
		cis_fail(em, 0, "%s", "");
	}
	free(key);
	req_free(&r);
	return rc;
}

static const char *const s3_options[] = {
    "endpoint", "region",          "path_style", "verify_tls", "ca_bundle",     "part_size",
    "timeout",  "connect_timeout", "access_key", "secret_key", "session_token", NULL};

const cis_ufs_ops cis_ufs_s3_ops = {
    .scheme = "s3",
    .options = s3_options,
    .open = s3_open,
    .close = s3_close,
    .check = s3_check,
    .stat = s3_stat,
    .list = s3_list,
    .read = s3_read,
    .write_fd = s3_write_fd,
    .delete = s3_delete,
};
