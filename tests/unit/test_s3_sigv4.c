/* AWS SigV4 for S3: the worked examples of the AWS documentation
 * ("Examples: Signature Calculations", header-based auth, single chunk),
 * checked byte for byte, plus the encoding rules they rest on. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../common/ufs/s3_sigv4.h"

#define AK     "AKIAIOSFODNN7EXAMPLE"
#define SK     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define DATE   "20130524T000000Z"
#define HOST   "examplebucket.s3.amazonaws.com"
#define T_2013 ((time_t)1369353600) /* 2013-05-24T00:00:00Z */

static void set(cis_kvlist *l, const char *k, const char *v)
{
	cr_assert_eq(cis_kvlist_set(l, k, v), 0);
}

static void hex(const unsigned char *in, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", in[i]);
}

/* Signs r and checks canonical request, string to sign and signature. */
static void check(const cis_s3_sign_req *r, const char *want_creq, const char *want_sts_hash,
                  const char *want_sig)
{
	cis_buf creq = CIS_BUF_INIT, sts = CIS_BUF_INIT, auth = CIS_BUF_INIT;
	char sig[CIS_S3_SHA256_HEX], want_sts[256];

	cr_assert_eq(cis_s3_canonical_request(r, &creq, NULL), 0);
	if (want_creq)
		cr_assert_str_eq(creq.data, want_creq);
	cr_assert_eq(cis_s3_string_to_sign(DATE, "us-east-1", "s3", creq.data, &sts), 0);
	snprintf(want_sts, sizeof(want_sts),
	         "AWS4-HMAC-SHA256\n" DATE "\n20130524/us-east-1/s3/aws4_request\n%s",
	         want_sts_hash);
	cr_assert_str_eq(sts.data, want_sts);
	cr_assert_eq(cis_s3_authorization(r, AK, SK, "us-east-1", DATE, &auth, sig), 0);
	cr_assert_str_eq(sig, want_sig);
	cis_buf_free(&creq);
	cis_buf_free(&sts);
	cis_buf_free(&auth);
}

Test(s3_sigv4, get_object_range)
{
	cis_kvlist h = CIS_KVLIST_INIT;
	cis_buf auth = CIS_BUF_INIT;

	/* Mixed case on purpose: names are lower-cased and sorted. */
	set(&h, "Host", HOST);
	set(&h, "Range", "bytes=0-9");
	set(&h, "x-amz-content-sha256", CIS_S3_EMPTY_SHA256);
	set(&h, "X-Amz-Date", DATE);
	cis_s3_sign_req r = {"GET", "/test.txt", NULL, &h, CIS_S3_EMPTY_SHA256};
	check(&r,
	      "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
	      "x-amz-content-sha256:" CIS_S3_EMPTY_SHA256 "\nx-amz-date:" DATE "\n\n"
	      "host;range;x-amz-content-sha256;x-amz-date\n" CIS_S3_EMPTY_SHA256,
	      "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972",
	      "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
	cr_assert_eq(cis_s3_authorization(&r, AK, SK, "us-east-1", DATE, &auth, NULL), 0);
	cr_assert_str_eq(
	    auth.data,
	    "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
	    "aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
	    "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
	cis_buf_free(&auth);
	cis_kvlist_free(&h);
}

Test(s3_sigv4, sign_headers_adds_date_and_hash)
{
	cis_kvlist h = CIS_KVLIST_INIT;

	set(&h, "host", HOST);
	set(&h, "range", "bytes=0-9");
	cr_assert_eq(cis_s3_sign_headers(&h, "GET", "/test.txt", NULL, CIS_S3_EMPTY_SHA256, AK, SK,
	                                 NULL, "us-east-1", T_2013),
	             0);
	cr_assert_str_eq(cis_kvlist_get(&h, "x-amz-date"), DATE);
	cr_assert_str_eq(cis_kvlist_get(&h, "x-amz-content-sha256"), CIS_S3_EMPTY_SHA256);
	cr_assert_null(cis_kvlist_get(&h, "x-amz-security-token"));
	cr_assert(
	    strstr(cis_kvlist_get(&h, "authorization"),
	           "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"));
	/* Signing again (a retry) replaces, never signs the old signature. */
	cr_assert_eq(cis_s3_sign_headers(&h, "GET", "/test.txt", NULL, CIS_S3_EMPTY_SHA256, AK, SK,
	                                 NULL, "us-east-1", T_2013),
	             0);
	cr_assert(strstr(cis_kvlist_get(&h, "authorization"), "f0e8bdb87c96"));
	cis_kvlist_free(&h);
}

Test(s3_sigv4, session_token_is_signed)
{
	cis_kvlist h = CIS_KVLIST_INIT;

	set(&h, "host", HOST);
	cr_assert_eq(cis_s3_sign_headers(&h, "GET", "/test.txt", NULL, CIS_S3_UNSIGNED, AK, SK,
	                                 "TOKEN+/=", "us-east-1", T_2013),
	             0);
	cr_assert_str_eq(cis_kvlist_get(&h, "x-amz-security-token"), "TOKEN+/=");
	cr_assert(
	    strstr(cis_kvlist_get(&h, "authorization"),
	           "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"));
	cr_assert_str_eq(cis_kvlist_get(&h, "x-amz-content-sha256"), "UNSIGNED-PAYLOAD");
	cis_kvlist_free(&h);
}

Test(s3_sigv4, put_object)
{
	cis_kvlist h = CIS_KVLIST_INIT;
	cis_buf path = CIS_BUF_INIT;
	char payload[CIS_S3_SHA256_HEX];
	const char *body = "Welcome to Amazon S3.";

	cis_s3_sha256_hex(body, strlen(body), payload);
	cr_assert_str_eq(payload,
	                 "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
	/* The key "test$file.text": '$' is encoded, once. */
	cr_assert_eq(cis_buf_puts(&path, "/"), 0);
	cr_assert_eq(cis_s3_uri_encode(&path, "test$file.text", 14, true), 0);
	cr_assert_str_eq(path.data, "/test%24file.text");
	set(&h, "Host", HOST);
	set(&h, "Date", "Fri, 24 May 2013 00:00:00 GMT");
	set(&h, "x-amz-date", DATE);
	set(&h, "x-amz-storage-class", "REDUCED_REDUNDANCY");
	set(&h, "x-amz-content-sha256", payload);
	cis_s3_sign_req r = {"PUT", path.data, NULL, &h, payload};
	check(&r,
	      "PUT\n/test%24file.text\n\ndate:Fri, 24 May 2013 00:00:00 GMT\n"
	      "host:examplebucket.s3.amazonaws.com\n"
	      "x-amz-content-sha256:"
	      "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
	      "x-amz-date:20130524T000000Z\nx-amz-storage-class:REDUCED_REDUNDANCY\n\n"
	      "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
	      "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
	      "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d",
	      "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
	cis_buf_free(&path);
	cis_kvlist_free(&h);
}

Test(s3_sigv4, get_bucket_lifecycle)
{
	cis_kvlist h = CIS_KVLIST_INIT, q = CIS_KVLIST_INIT;

	set(&q, "lifecycle", "");
	set(&h, "host", HOST);
	set(&h, "x-amz-date", DATE);
	set(&h, "x-amz-content-sha256", CIS_S3_EMPTY_SHA256);
	cis_s3_sign_req r = {"GET", "/", &q, &h, CIS_S3_EMPTY_SHA256};
	check(&r,
	      "GET\n/\nlifecycle=\nhost:examplebucket.s3.amazonaws.com\n"
	      "x-amz-content-sha256:" CIS_S3_EMPTY_SHA256 "\nx-amz-date:" DATE "\n\n"
	      "host;x-amz-content-sha256;x-amz-date\n" CIS_S3_EMPTY_SHA256,
	      "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca",
	      "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
	cis_kvlist_free(&h);
	cis_kvlist_free(&q);
}

Test(s3_sigv4, list_objects_query_sorted)
{
	cis_kvlist h = CIS_KVLIST_INIT, q = CIS_KVLIST_INIT;
	cis_buf auth = CIS_BUF_INIT;

	/* Given out of order; the canonical query sorts them. */
	set(&q, "prefix", "J");
	set(&q, "max-keys", "2");
	set(&h, "host", HOST);
	set(&h, "x-amz-date", DATE);
	set(&h, "x-amz-content-sha256", CIS_S3_EMPTY_SHA256);
	cis_s3_sign_req r = {"GET", "/", &q, &h, CIS_S3_EMPTY_SHA256};
	cis_buf creq = CIS_BUF_INIT;
	cr_assert_eq(cis_s3_canonical_request(&r, &creq, NULL), 0);
	cr_assert(strncmp(creq.data, "GET\n/\nmax-keys=2&prefix=J\nhost:", 31) == 0, "%s",
	          creq.data);
	char sig[CIS_S3_SHA256_HEX];
	cr_assert_eq(cis_s3_authorization(&r, AK, SK, "us-east-1", DATE, &auth, sig), 0);
	cr_assert_str_eq(sig, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
	/* A different prefix must give a different signature. */
	set(&q, "prefix", "K");
	cis_buf_reset(&auth);
	cr_assert_eq(cis_s3_authorization(&r, AK, SK, "us-east-1", DATE, &auth, sig), 0);
	cr_assert_str_neq(sig, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
	cis_buf_free(&creq);
	cis_buf_free(&auth);
	cis_kvlist_free(&h);
	cis_kvlist_free(&q);
}

Test(s3_sigv4, signing_key_derivation)
{
	unsigned char key[32];
	char h[65];

	/* The IAM guide's example (service iam, secret with '+'). */
	cis_s3_signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20150830", "us-east-1",
	                   "iam", key);
	hex(key, 32, h);
	cr_assert_str_eq(h, "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9");
	cis_s3_signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20150831", "us-east-1",
	                   "iam", key);
	hex(key, 32, h);
	cr_assert_str_neq(h, "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9");
}

Test(s3_sigv4, uri_encode_rules)
{
	static const struct {
		const char *in;
		bool slash;
		const char *want;
	} c[] = {
	    {"a b", true, "a%20b"},
	    {"a+b", true, "a%2Bb"},
	    {"100%", true, "100%25"},
	    {"a/b c", true, "a/b%20c"},
	    {"a/b", false, "a%2Fb"},
	    {"A-z_0.9~", false, "A-z_0.9~"},
	    {"=&?#!'()*", false, "%3D%26%3F%23%21%27%28%29%2A"},
	    {"caf\xc3\xa9/\xe2\x82\xac", true, "caf%C3%A9/%E2%82%AC"},
	    {"a%20b", true, "a%2520b"}, /* encoded once, from the raw key */
	    {"", true, ""},
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		cis_buf b = CIS_BUF_INIT;
		cr_assert_eq(cis_s3_uri_encode(&b, c[i].in, strlen(c[i].in), c[i].slash), 0);
		cr_assert_str_eq(b.data ? b.data : "", c[i].want, "case %zu", i);
		cis_buf_free(&b);
	}
}

Test(s3_sigv4, canonical_query_encodes_values)
{
	cis_kvlist q = CIS_KVLIST_INIT;
	cis_buf b = CIS_BUF_INIT;

	set(&q, "prefix", "dir with space/caf\xc3\xa9/");
	set(&q, "continuation-token", "1/a+b==");
	set(&q, "delimiter", "/");
	set(&q, "list-type", "2");
	cr_assert_eq(cis_s3_canonical_query(&q, &b), 0);
	cr_assert_str_eq(b.data, "continuation-token=1%2Fa%2Bb%3D%3D&delimiter=%2F&list-type=2&"
	                         "prefix=dir%20with%20space%2Fcaf%C3%A9%2F");
	cis_buf_free(&b);
	cis_kvlist_free(&q);
}

Test(s3_sigv4, header_values_trimmed_and_bad_headers_refused)
{
	cis_kvlist h = CIS_KVLIST_INIT;
	cis_buf b = CIS_BUF_INIT;

	set(&h, "host", "  h  ");
	set(&h, "x-amz-meta-a", "a   b\t c ");
	cis_s3_sign_req r = {"GET", "/", NULL, &h, CIS_S3_EMPTY_SHA256};
	cr_assert_eq(cis_s3_canonical_request(&r, &b, NULL), 0);
	cr_assert(strstr(b.data, "\nhost:h\nx-amz-meta-a:a b c\n"), "%s", b.data);
	cis_buf_reset(&b);
	/* A newline in a value would forge a header line. */
	set(&h, "x-amz-meta-a", "a\nx-amz-acl:public-read");
	cr_assert_eq(cis_s3_canonical_request(&r, &b, NULL), -EINVAL);
	cis_kvlist_remove(&h, "x-amz-meta-a");
	/* Two spellings of one header cannot both be signed. */
	set(&h, "Host", "other");
	cr_assert_eq(cis_s3_canonical_request(&r, &b, NULL), -EINVAL);
	cis_buf_free(&b);
	cis_kvlist_free(&h);
}

Test(s3_sigv4, amz_date_format)
{
	char d[CIS_S3_AMZ_DATE_LEN];

	cis_s3_amz_date(T_2013, d);
	cr_assert_str_eq(d, DATE);
	cis_s3_amz_date((time_t)951782400, d);
	cr_assert_str_eq(d, "20000229T000000Z");
}
