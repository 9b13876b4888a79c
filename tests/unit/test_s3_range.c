/* Ranged S3 reads against a store that answers a Range GET wrongly: a 206
 * must start where asked and end at the window's end (before it only at
 * the object's), and its body must not
 * run past its Content-Range; otherwise the read fails and no byte outside
 * the window reaches the consumer. Then the signing region, which comes from
 * the option, the environment or the AWS config file's profile, in that
 * order. The store is a one-shot HTTP server on a loopback port that sends a
 * canned reply and keeps the last request it read. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cistern/error.h"
#include "cistern/kv.h"
#include "cistern/time.h"
#include "cistern/ufs.h"
#include "s3_at_port.h"

static int lfd = -1;
static uint16_t port;
static char reply[4096];
static char last_req[8192]; /* the last request's head */
static atomic_int requests; /* requests answered */
static pthread_t srv_thread;

/* Answer every connection with `reply` and close it. */
static void *serve(void *arg)
{
	(void)arg;
	for (;;) {
		char req[8192];
		size_t got = 0;
		int c = accept(lfd, NULL, NULL);

		if (c < 0)
			return NULL;
		while (got < sizeof(req) - 1) {
			ssize_t n = read(c, req + got, sizeof(req) - 1 - got);

			if (n <= 0)
				break;
			got += (size_t)n;
			req[got] = 0;
			if (strstr(req, "\r\n\r\n"))
				break;
		}
		req[got] = 0;
		memcpy(last_req, req, got + 1);
		atomic_fetch_add(&requests, 1);
		(void)!write(c, reply, strlen(reply));
		close(c);
	}
}

static void setup(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(lfd, 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(lfd, 16), 0);
	cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
	port = ntohs(sa.sin_port);
	cr_assert_eq(pthread_create(&srv_thread, NULL, serve, NULL), 0);
}

static void teardown(void)
{
	shutdown(lfd, SHUT_RDWR);
	close(lfd);
	pthread_join(srv_thread, NULL);
}

static void set_reply(const char *status, const char *content_range, const char *body)
{
	int n = snprintf(reply, sizeof(reply),
	                 "HTTP/1.1 %s\r\nContent-Length: %zu\r\nConnection: close\r\n", status,
	                 strlen(body));

	if (content_range)
		n += snprintf(reply + n, sizeof(reply) - (size_t)n, "Content-Range: %s\r\n",
		              content_range);
	snprintf(reply + n, sizeof(reply) - (size_t)n, "\r\n%s", body);
}

typedef struct sink {
	char buf[256];
	size_t n;
} sink;

static int sink_fn(void *arg, const void *data, size_t len)
{
	sink *s = arg;

	cr_assert_leq(s->n + len, sizeof(s->buf));
	memcpy(s->buf + s->n, data, len);
	s->n += len;
	return 0;
}

/* s3://bkt on the fake store. */
static cis_ufs *open_fake_store(cis_errmsg *em)
{
	return s3_at_port(port, em);
}

/* The fake store answering every request with this listing. */
static cis_ufs *listing_store(const char *xml, cis_errmsg *em)
{
	set_reply("200 OK", NULL, xml);
	return open_fake_store(em);
}

/* Read bytes [off, off+len) of s3://bkt/obj from the fake store. */
static int s3_get(uint64_t off, uint64_t len, sink *out, cis_errmsg *em)
{
	cis_ufs *u = open_fake_store(em);
	uint64_t got = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = cis_ufs_read(u, "obj", NULL, off, len, sink_fn, out, &got, em);
	cr_assert_eq(got, out->n, "got counts what the sink received");
	cis_ufs_close(u);
	return rc;
}

TestSuite(s3_range, .init = setup, .fini = teardown);

Test(s3_range, matching_206_is_delivered)
{
	cis_errmsg em = {{0}};
	sink s;

	set_reply("206 Partial Content", "bytes 10-19/100", "0123456789");
	cr_assert_eq(s3_get(10, 10, &s, &em), 0, "%s", em.text);
	cr_assert_eq(s.n, 10);
	cr_assert_arr_eq(s.buf, "0123456789", 10);
	/* A shorter range than asked (the object ends) is fine. */
	set_reply("206 Partial Content", "bytes 10-14/15", "01234");
	cr_assert_eq(s3_get(10, 10, &s, &em), 0, "%s", em.text);
	cr_assert_eq(s.n, 5);
}

Test(s3_range, wrong_start_refused)
{
	cis_errmsg em = {{0}};
	sink s;

	set_reply("206 Partial Content", "bytes 0-9/100", "ABCDEFGHIJ");
	cr_assert_eq(s3_get(10, 10, &s, &em), -CIS_E_STORE);
	cr_assert_eq(s.n, 0, "no byte of the wrong range delivered");
	cr_assert(strstr(em.text, "content-range \"bytes 0-9/100\""), "%s", em.text);
	cr_assert(strstr(em.text, "asked for bytes 10-19"), "%s", em.text);
}

/* A range shorter than asked that does not end at the object's end (a
 * proxy capping a range's length) is no read of all that is there; nor is
 * a 2xx other than 200 and 206, whose body's place is unknown. */
Test(s3_range, short_range_not_at_the_end_refused)
{
	cis_errmsg em = {{0}};
	sink s;

	set_reply("206 Partial Content", "bytes 10-14/100", "01234");
	cr_assert_eq(s3_get(10, 10, &s, &em), -CIS_E_STORE);
	cr_assert_eq(s.n, 0, "a short range passed for the object's end");
	set_reply("206 Partial Content", "bytes 10-14/*", "01234");
	cr_assert_eq(s3_get(10, 10, &s, &em), -CIS_E_STORE);
	cr_assert_eq(s.n, 0);
	set_reply("203 Non-Authoritative Information", NULL, "0123456789");
	cr_assert_eq(s3_get(10, 10, &s, &em), -CIS_E_STORE);
	cr_assert_eq(s.n, 0, "a 203's body delivered as the window");
	cr_assert(strstr(em.text, "203 reply"), "%s", em.text);
	set_reply("204 No Content", NULL, "");
	cr_assert_eq(s3_get(10, 10, &s, &em), -CIS_E_STORE, "a 204 passed for the end");
}

/* A store asking to slow down (503 SlowDown) is tried 10 times, one that
 * is down (any other 503) 5 times, as other 5xx. */
Test(s3_range, slow_down_is_waited_out_longer_than_a_store_that_is_down, .timeout = 60)
{
	cis_errmsg em = {{0}};
	sink s;

	set_reply("503 Service Unavailable", NULL,
	          "<Error><Code>ServiceUnavailable</Code><Message>down</Message></Error>");
	atomic_store(&requests, 0);
	cr_assert_eq(s3_get(0, 10, &s, &em), -CIS_E_STORE);
	cr_assert_eq(atomic_load(&requests), 5);
	set_reply("503 Slow Down", NULL,
	          "<Error><Code>SlowDown</Code><Message>Please reduce your request rate."
	          "</Message></Error>");
	atomic_store(&requests, 0);
	cr_assert_eq(s3_get(0, 10, &s, &em), -CIS_E_STORE);
	cr_assert_eq(atomic_load(&requests), 10, "SlowDown tried %d times", atomic_load(&requests));
	cr_assert(strstr(em.text, "SlowDown"), "%s", em.text);
}

/* A store that answers the check one byte at a time (faster than the
 * stall limit of 1 byte/s): arg is its listening socket. */
static void *trickle_store(void *arg)
{
	int l = *(int *)arg, c = accept(l, NULL, NULL);
	char req[4096];
	const char *head = "HTTP/1.1 200 OK\r\nx-slow: ";

	if (c < 0)
		return NULL;
	(void)!read(c, req, sizeof(req));
	if (send(c, head, strlen(head), MSG_NOSIGNAL) > 0)
		for (int i = 0; i < 60 && send(c, "a", 1, MSG_NOSIGNAL) == 1; i++)
			usleep(200 * 1000);
	close(c);
	return NULL;
}

/* The check a mount waits on (on an HTTP thread of the master's API) ends
 * within the timeout option, retries and all: the stall limit alone let a
 * trickling store hold it for as long as it kept on. */
Test(s3_range, a_check_of_a_trickling_store_ends_at_the_timeout, .timeout = 60)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	pthread_t th;
	cis_kvlist o = CIS_KVLIST_INIT;
	cis_errmsg em = {{0}};
	char ep[64];
	cis_ufs *u;

	cr_assert_eq(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(l, 4), 0);
	cr_assert_eq(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
	cr_assert_eq(pthread_create(&th, NULL, trickle_store, &l), 0);
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%u", ntohs(sa.sin_port));
	cr_assert_eq(cis_kvlist_set(&o, "endpoint", ep), 0);
	cr_assert_eq(cis_kvlist_set(&o, "access_key", "AK"), 0);
	cr_assert_eq(cis_kvlist_set(&o, "secret_key", "SK"), 0);
	cr_assert_eq(cis_kvlist_set(&o, "timeout", "1"), 0);
	cr_assert_eq(cis_ufs_open("s3://bkt", &o, &u, &em), 0, "%s", em.text);
	uint64_t t0 = cis_mono_ms();
	cr_assert_eq(cis_ufs_check(u, &em), -ETIMEDOUT, "%s", em.text);
	cr_assert_lt(cis_mono_ms() - t0, 5000, "the check took %llu ms",
	             (unsigned long long)(cis_mono_ms() - t0));
	cis_ufs_close(u);
	cis_kvlist_free(&o);
	pthread_join(th, NULL);
	close(l);
}

/* A HEAD's 503 has no body to name SlowDown: it is waited out as one, or a
 * stat of a throttled prefix gives up within a second. */
Test(s3_range, head_503_is_waited_out_as_slow_down, .timeout = 60)
{
	struct cis_ufs_stat st;
	cis_errmsg em = {{0}};
	cis_ufs *u;

	set_reply("503 Slow Down", NULL, "");
	u = open_fake_store(&em);
	atomic_store(&requests, 0);
	cr_assert_eq(cis_ufs_stat(u, "obj", &st, &em), -CIS_E_STORE, "%s", em.text);
	cr_assert_eq(atomic_load(&requests), 10, "HEAD tried %d times", atomic_load(&requests));
	cis_ufs_close(u);
}

/* With the fake store answering head (no body): a read at off of version
 * "old" is a change, of version "new" the end (no bytes). */
static void versioned_bodyless(cis_ufs *u, const char *head, uint64_t off)
{
	cis_errmsg em = {{0}};
	sink s = {.n = 0};
	uint64_t got;

	snprintf(reply, sizeof(reply), "%s", head);
	cr_assert_eq(cis_ufs_read(u, "obj", "\"old\"", off, 10, sink_fn, &s, &got, &em),
	             -CIS_E_CHANGED, "%s", em.text);
	cr_assert(strstr(em.text, "object changed"), "%s", em.text);
	cr_assert_eq(cis_ufs_read(u, "obj", "\"new\"", off, 10, sink_fn, &s, &got, &em), 0, "%s",
	             em.text);
	cr_assert_eq(got, 0);
	cr_assert_eq(s.n, 0);
}

/* A versioned read whose reply carries no byte to check (an empty
 * object's, a 416 past the end) from a store that ignores If-Match: the
 * ETag of another version makes it a change, not the end of this one. */
Test(s3_range, bodyless_reply_of_another_version_is_a_change)
{
	cis_errmsg em = {{0}};
	cis_ufs *u = open_fake_store(&em);

	versioned_bodyless(u,
	                   "HTTP/1.1 206 Partial Content\r\nETag: \"new\"\r\n"
	                   "Content-Range: bytes 0-0/0\r\nContent-Length: 1\r\n"
	                   "Connection: close\r\n\r\n",
	                   0);
	/* The ETag after the Content-Range is seen too. */
	versioned_bodyless(u,
	                   "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-0/0\r\n"
	                   "ETag: \"new\"\r\nContent-Length: 1\r\nConnection: close\r\n\r\n",
	                   0);
	versioned_bodyless(u,
	                   "HTTP/1.1 416 Requested Range Not Satisfiable\r\nETag: \"new\"\r\n"
	                   "Content-Length: 0\r\nConnection: close\r\n\r\n",
	                   100);
	cis_ufs_close(u);
}

/* A size no multipart upload can hold is refused before any arithmetic
 * on it (size + 9999 wrapped around to a part size of 0: SIGFPE). */
Test(s3_range, write_of_an_impossible_size_refused)
{
	cis_errmsg em = {{0}};
	cis_ufs *u = open_fake_store(&em);

	atomic_store(&requests, 0);
	cr_assert_eq(cis_ufs_write_fd(u, "obj", -1, UINT64_MAX, &em), -CIS_E_TOOBIG, "%s", em.text);
	cr_assert_eq(atomic_load(&requests), 0);
	cis_ufs_close(u);
}

/* An expired session token and a skewed clock say so, not "check
 * access_key and secret_key" or a bare store error. */
Test(s3_range, expired_token_and_skewed_clock_named)
{
	cis_errmsg em = {{0}};
	sink s;

	set_reply("400 Bad Request", NULL,
	          "<Error><Code>ExpiredToken</Code><Message>The provided token has expired."
	          "</Message></Error>");
	cr_assert_eq(s3_get(0, 10, &s, &em), -CIS_E_DENIED);
	cr_assert(strstr(em.text, "session token has expired"), "%s", em.text);
	set_reply("403 Forbidden", NULL,
	          "<Error><Code>RequestTimeTooSkewed</Code><Message>The difference between "
	          "the request time and the current time is too large.</Message></Error>");
	cr_assert_eq(s3_get(0, 10, &s, &em), -CIS_E_DENIED);
	cr_assert(strstr(em.text, "clock is off"), "%s", em.text);
}

Test(s3_range, range_past_the_window_refused)
{
	cis_errmsg em = {{0}};
	sink s;

	set_reply("206 Partial Content", "bytes 10-29/100", "01234567890123456789");
	cr_assert_eq(s3_get(10, 10, &s, &em), -CIS_E_STORE);
	cr_assert_eq(s.n, 0);
}

Test(s3_range, missing_content_range_refused)
{
	cis_errmsg em = {{0}};
	sink s;

	set_reply("206 Partial Content", NULL, "0123456789");
	cr_assert_eq(s3_get(10, 10, &s, &em), -CIS_E_STORE);
	cr_assert_eq(s.n, 0);
	set_reply("206 Partial Content", "bytes junk", "0123456789");
	cr_assert_eq(s3_get(10, 10, &s, &em), -CIS_E_STORE);
	cr_assert_eq(s.n, 0);
}

/* With no body as well, nothing reached the check of the bytes: the read
 * passed as one of zero bytes, which a caller takes for the object's end. */
Test(s3_range, empty_206_without_content_range_refused)
{
	cis_errmsg em = {{0}};
	sink s;

	set_reply("206 Partial Content", NULL, "");
	cr_assert_eq(s3_get(0, 10, &s, &em), -CIS_E_STORE, "%s", em.text);
	cr_assert(strstr(em.text, "asked for bytes 0-9"), "%s", em.text);
	/* An empty object's "bytes 0-0/0" (s3rver) is still no bytes, no error. */
	set_reply("206 Partial Content", "bytes 0-0/0", "");
	cr_assert_eq(s3_get(0, 10, &s, &em), 0, "%s", em.text);
	cr_assert_eq(s.n, 0);
}

Test(s3_range, body_longer_than_its_range_is_cut_and_refused)
{
	cis_errmsg em = {{0}};
	sink s;

	/* Says 10 bytes, sends 20: only the window may reach the sink. */
	set_reply("206 Partial Content", "bytes 10-19/100", "0123456789abcdefghij");
	cr_assert_eq(s3_get(10, 10, &s, &em), -CIS_E_STORE);
	cr_assert_leq(s.n, 10, "%zu bytes delivered for a 10-byte window", s.n);
	cr_assert_arr_eq(s.buf, "0123456789", s.n);
	cr_assert(strstr(em.text, "longer than its content-range"), "%s", em.text);
}

/* A 200 (the store ignored Range) framed only by the connection closing:
 * a body that ends short of the window may be a cut, and must not pass as
 * the whole read. */
Test(s3_range, reply_of_unknown_length_ending_short_refused)
{
	cis_errmsg em = {{0}};
	sink s;

	snprintf(reply, sizeof(reply), "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n0123456789");
	cr_assert_eq(s3_get(0, 100, &s, &em), -CIS_E_STORE);
	cr_assert(strstr(em.text, "unknown length after 10 of 100 bytes"), "%s", em.text);
	/* With its length said, the same short object is whole. */
	set_reply("200 OK", NULL, "0123456789");
	cr_assert_eq(s3_get(0, 100, &s, &em), 0, "%s", em.text);
	cr_assert_eq(s.n, 10);
}

/* A listing that names keys outside the prefix asked for (a broken store
 * or proxy) skips them; it used to read past the end of a short key. */
Test(s3_range, listed_keys_outside_the_prefix_skipped)
{
	static const char xml[] =
	    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
	    "<ListBucketResult><Name>bkt</Name><Prefix>some/long/dir/</Prefix>"
	    "<KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
	    "<Contents><Key>x</Key><Size>1</Size><ETag>\"e\"</ETag></Contents>"
	    "<Contents><Key>some/long/dir/ok</Key><Size>2</Size><ETag>\"f\"</ETag></Contents>"
	    "<CommonPrefixes><Prefix>y/</Prefix></CommonPrefixes>"
	    "</ListBucketResult>";
	cis_errmsg em = {{0}};
	cis_ufs_page page;
	cis_ufs *u = listing_store(xml, &em);

	cr_assert_eq(cis_ufs_list(u, "some/long/dir", NULL, 0, &page, &em), 0, "%s", em.text);
	cr_assert_eq(page.n, 1);
	cr_assert_str_eq(page.entries[0].name, "ok");
	cis_ufs_page_free(&page);
	cis_ufs_close(u);
}

/* A store (or proxy) that drops continuation-token answers every page
 * with the first one and the same token: a caller paging on until there
 * is no token never ended, piling up the same keys. */
Test(s3_range, listing_that_repeats_its_token_refused)
{
	static const char xml[] =
	    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
	    "<ListBucketResult><Name>bkt</Name><Prefix>d/</Prefix><KeyCount>1</KeyCount>"
	    "<MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>"
	    "<NextContinuationToken>T1</NextContinuationToken>"
	    "<Contents><Key>d/a</Key><Size>1</Size><ETag>\"e\"</ETag></Contents>"
	    "</ListBucketResult>";
	cis_errmsg em = {{0}};
	cis_ufs_page page;
	cis_ufs *u = listing_store(xml, &em);

	cr_assert_eq(cis_ufs_list(u, "d", NULL, 0, &page, &em), 0, "%s", em.text);
	cr_assert_str_eq(page.next_token, "T1");
	cis_ufs_page_free(&page);
	cr_assert_eq(cis_ufs_list(u, "d", "T1", 0, &page, &em), -CIS_E_STORE, "%s", em.text);
	cr_assert_eq(page.n, 0);
	cr_assert_null(page.next_token);
	cr_assert(strstr(em.text, "s3://bkt/d/: the store repeated continuation token"), "%s",
	          em.text);
	cis_ufs_close(u);
}

/* A HEAD (stat) answered with no body: AWS's reply to a request signed
 * for the wrong region says only 400 and x-amz-bucket-region, a redirect
 * only its status. The line must still point at the region and endpoint,
 * not read "400 BadRequest" or "307 Error". */
Test(s3_range, bodyless_region_and_redirect_replies_named)
{
	struct cis_ufs_stat st;
	cis_errmsg em = {{0}};
	cis_ufs *u;

	snprintf(reply, sizeof(reply),
	         "HTTP/1.1 400 Bad Request\r\nx-amz-bucket-region: eu-west-1\r\n"
	         "Content-Length: 0\r\nConnection: close\r\n\r\n");
	u = open_fake_store(&em);
	cr_assert_eq(cis_ufs_stat(u, "obj", &st, &em), -CIS_E_STORE, "%s", em.text);
	cr_assert(strstr(em.text, "s3://bkt/obj: 400 BadRequest (the bucket is in region "
	                          "eu-west-1, not "),
	          "%s", em.text);
	cr_assert(strstr(em.text, "check region and endpoint)"), "%s", em.text);
	snprintf(reply, sizeof(reply),
	         "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:1/bkt/obj\r\n"
	         "Content-Length: 0\r\nConnection: close\r\n\r\n");
	cr_assert_eq(cis_ufs_stat(u, "obj", &st, &em), -CIS_E_STORE, "%s", em.text);
	cr_assert_str_eq(em.text,
	                 "s3://bkt/obj: 307 TemporaryRedirect (check region and endpoint)");
	cis_ufs_close(u);
}

/* A HEAD answered 200 without a Content-Length fails: taken for 0 bytes,
 * the object would read as empty. */
Test(s3_range, head_without_content_length_refused)
{
	struct cis_ufs_stat st;
	cis_errmsg em = {{0}};
	cis_ufs *u;

	snprintf(reply, sizeof(reply),
	         "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\nConnection: close\r\n\r\n");
	u = open_fake_store(&em);
	cr_assert_eq(cis_ufs_stat(u, "obj", &st, &em), -CIS_E_STORE, "%s", em.text);
	cr_assert_str_eq(em.text, "s3://bkt/obj: the store answered HEAD without a "
	                          "Content-Length, so the object's size is unknown");
	/* With it, the same answer is the object. */
	snprintf(reply, sizeof(reply),
	         "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\nContent-Length: 12\r\n"
	         "Connection: close\r\n\r\n");
	cr_assert_eq(cis_ufs_stat(u, "obj", &st, &em), 0, "%s", em.text);
	cr_assert_eq(st.size, 12);
	cr_assert(!st.is_dir);
	cis_ufs_close(u);
}

/* The region the request was signed for, from its credential scope
 * (Credential=AK/DATE/REGION/s3/aws4_request). */
static const char *signed_region(char *out, size_t len)
{
	const char *c = strstr(last_req, "Credential=AK/");
	cr_assert_not_null(c, "no credential scope in: %s", last_req);
	c = strchr(c + strlen("Credential=AK/"), '/');
	cr_assert_not_null(c);
	c++;
	size_t n = strcspn(c, "/");
	cr_assert_lt(n, len);
	memcpy(out, c, n);
	out[n] = 0;
	return out;
}

/* A config file with a default and a named profile; HOME points nowhere
 * useful so that only AWS_CONFIG_FILE counts. */
static void with_config(void)
{
	static char path[] = "/tmp/cistern-aws-config-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	const char *text = "[default]\nregion = eu-west-3\n\n"
	                   "[profile other]\n# a comment\nregion=ap-south-2\n";
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	setenv("AWS_CONFIG_FILE", path, 1);
	setenv("HOME", "/nonexistent", 1);
	unsetenv("AWS_REGION");
	unsetenv("AWS_DEFAULT_REGION");
	unsetenv("AWS_PROFILE");
}

Test(s3_range, region_from_the_aws_config_file_after_option_and_environment)
{
	cis_errmsg em = {{0}};
	char r[64];
	sink s;

	with_config();
	set_reply("206 Partial Content", "bytes 0-3/4", "abcd");
	cr_assert_eq(s3_get(0, 4, &s, &em), 0, "%s", em.text);
	cr_assert_str_eq(signed_region(r, sizeof(r)), "eu-west-3", "[default] of the config file");
	setenv("AWS_PROFILE", "other", 1);
	cr_assert_eq(s3_get(0, 4, &s, &em), 0, "%s", em.text);
	cr_assert_str_eq(signed_region(r, sizeof(r)), "ap-south-2", "[profile other]");
	setenv("AWS_PROFILE", "missing", 1);
	cr_assert_eq(s3_get(0, 4, &s, &em), 0, "%s", em.text);
	cr_assert_str_eq(signed_region(r, sizeof(r)), "us-east-1", "a profile it lacks");
	setenv("AWS_DEFAULT_REGION", "sa-east-1", 1);
	cr_assert_eq(s3_get(0, 4, &s, &em), 0, "%s", em.text);
	cr_assert_str_eq(signed_region(r, sizeof(r)), "sa-east-1", "the environment first");
	unlink(getenv("AWS_CONFIG_FILE"));
}
