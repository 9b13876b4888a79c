/* AWS Signature Version 4, header-based, single chunk (see s3_sigv4.h). */
#include "s3_sigv4.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

static const char hexdig[] = "0123456789abcdef";

static void hex_encode(const unsigned char *in, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hexdig[in[i] >> 4];
		out[2 * i + 1] = hexdig[in[i] & 15];
	}
	out[2 * n] = 0;
}

void cis_s3_sha256_hex(const void *data, size_t len, char *out)
{
	unsigned char md[SHA256_DIGEST_LENGTH];

	SHA256(data, len, md);
	hex_encode(md, sizeof(md), out);
}

static bool unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_' || c == '.' || c == '~';
}

int cis_s3_uri_encode(cis_buf *out, const char *s, size_t len, bool keep_slash)
{
	static const char up[] = "0123456789ABCDEF";
	/* Worst case three bytes out per byte in. */
	if (len > (SIZE_MAX - 1) / 3)
		return -ENOMEM;
	int rc = cis_buf_reserve(out, 3 * len + 1);
	if (rc)
		return rc;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (unreserved(c) || (keep_slash && c == '/')) {
			out->data[out->len++] = (char)c;
		} else {
			out->data[out->len++] = '%';
			out->data[out->len++] = up[c >> 4];
			out->data[out->len++] = up[c & 15];
		}
	}
	out->data[out->len] = 0;
	return 0;
}

void cis_s3_amz_date(time_t t, char *out)
{
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, CIS_S3_AMZ_DATE_LEN, "%Y%m%dT%H%M%SZ", &tm);
}

static void hmac(const void *key, size_t keylen, const char *msg, unsigned char *out)
{
	unsigned int outlen = 32;

	HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg, strlen(msg), out, &outlen);
}

void cis_s3_signing_key(const char *secret, const char *date8, const char *region,
                        const char *service, unsigned char *out)
{
	size_t slen = strlen(secret);
	char *k = malloc(slen + 5);
	unsigned char a[32], b[32];

	if (!k) {
		/* Cannot fail in practice; a zero key just makes a wrong signature. */
		memset(out, 0, 32);
		return;
	}
	memcpy(k, "AWS4", 4);
	memcpy(k + 4, secret, slen + 1);
	hmac(k, slen + 4, date8, a);
	OPENSSL_cleanse(k, slen + 4);
	free(k);
	hmac(a, 32, region, b);
	hmac(b, 32, service, a);
	hmac(a, 32, "aws4_request", out);
	OPENSSL_cleanse(a, sizeof(a));
	OPENSSL_cleanse(b, sizeof(b));
}

/* A name/value pair in canonical (encoded or lower-cased) form. */
struct pair {
	char *name;
	char *value;
};

static int cmp_pair(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : strcmp(x->value, y->value);
}

static void free_pairs(struct pair *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(p[i].name);
		free(p[i].value);
	}
	free(p);
}

static char *encode_dup(const char *s)
{
	cis_buf b = CIS_BUF_INIT;

	if (cis_s3_uri_encode(&b, s, strlen(s), false))
		return NULL;
	return cis_buf_steal(&b);
}

int cis_s3_canonical_query(const cis_kvlist *query, cis_buf *out)
{
	size_t n = query ? query->n : 0;
	struct pair *p;
	int rc = -ENOMEM;

	if (n == 0)
		return cis_buf_puts(out, "");
	p = calloc(n, sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		p[i].name = encode_dup(query->items[i].key);
		p[i].value = encode_dup(query->items[i].value);
		if (!p[i].name || !p[i].value)
			goto out_free_pairs;
	}
	qsort(p, n, sizeof(*p), cmp_pair);
	for (size_t i = 0; i < n; i++) {
		rc = cis_buf_printf(out, "%s%s=%s", i ? "&" : "", p[i].name, p[i].value);
		if (rc)
			goto out_free_pairs;
	}
	rc = 0;
out_free_pairs:
	free_pairs(p, n);
	return rc;
}

/* Lower-case copy of a header name; NULL on -ENOMEM. */
static char *lower_dup(const char *s)
{
	char *d = strdup(s);

	for (char *c = d; c && *c; c++)
		*c = (char)tolower((unsigned char)*c);
	return d;
}

/* Header value with leading and trailing blanks removed and inner runs of
 * blanks folded to one space, as the canonical form asks. */
static char *trim_dup(const char *s)
{
	size_t n = strlen(s);
	char *d = malloc(n + 1), *o = d;
	bool space = false;

	if (!d)
		return NULL;
	while (*s == ' ' || *s == '\t')
		s++;
	for (; *s; s++) {
		if (*s == ' ' || *s == '\t') {
			space = true;
			continue;
		}
		if (space)
			*o++ = ' ';
		space = false;
		*o++ = *s;
	}
	*o = 0;
	return d;
}

int cis_s3_canonical_request(const cis_s3_sign_req *r, cis_buf *out, cis_buf *signed_headers)
{
	size_t n = r->headers ? r->headers->n : 0;
	struct pair *h = calloc(n ? n : 1, sizeof(*h));
	cis_buf names = CIS_BUF_INIT;
	int rc = -ENOMEM;

	if (!h)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const cis_kv *kv = &r->headers->items[i];
		if (strpbrk(kv->key, "\r\n:") || strpbrk(kv->value, "\r\n") || !kv->key[0]) {
			rc = -EINVAL;
			goto out_free;
		}
		h[i].name = lower_dup(kv->key);
		h[i].value = trim_dup(kv->value);
		if (!h[i].name || !h[i].value)
			goto out_free;
	}
	qsort(h, n, sizeof(*h), cmp_pair);
	for (size_t i = 1; i < n; i++) {
		if (strcmp(h[i - 1].name, h[i].name) == 0) {
			rc = -EINVAL;
			goto out_free;
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (cis_buf_printf(&names, "%s%s", i ? ";" : "", h[i].name))
			goto out_free;
	}
	if (cis_buf_printf(out, "%s\n%s\n", r->method, r->path))
		goto out_free;
	if (cis_s3_canonical_query(r->query, out) || cis_buf_puts(out, "\n"))
		goto out_free;
	for (size_t i = 0; i < n; i++) {
		if (cis_buf_printf(out, "%s:%s\n", h[i].name, h[i].value))
			goto out_free;
	}
	if (cis_buf_printf(out, "\n%s\n%s", names.data ? names.data : "", r->payload_hash))
		goto out_free;
	if (signed_headers && cis_buf_puts(signed_headers, names.data ? names.data : ""))
		goto out_free;
	rc = 0;
out_free:
	cis_buf_free(&names);
	free_pairs(h, n);
	return rc;
}

int cis_s3_string_to_sign(const char *amz_date, const char *region, const char *service,
                          const char *canonical_request, cis_buf *out)
{
	char hash[CIS_S3_SHA256_HEX];

	cis_s3_sha256_hex(canonical_request, strlen(canonical_request), hash);
	return cis_buf_printf(out, "AWS4-HMAC-SHA256\n%s\n%.8s/%s/%s/aws4_request\n%s", amz_date,
	                      amz_date, region, service, hash);
}

int cis_s3_authorization(const cis_s3_sign_req *r, const char *access_key, const char *secret_key,
                         const char *region, const char *amz_date, cis_buf *out, char *signature)
{
	cis_buf creq = CIS_BUF_INIT, names = CIS_BUF_INIT, sts = CIS_BUF_INIT;
	unsigned char key[32], sig[32];
	char date8[9], sighex[CIS_S3_SHA256_HEX];
	int rc;

	if (strlen(amz_date) != CIS_S3_AMZ_DATE_LEN - 1)
		return -EINVAL;
	memcpy(date8, amz_date, 8);
	date8[8] = 0;
	rc = cis_s3_canonical_request(r, &creq, &names);
	if (rc)
		goto out_free;
	rc = cis_s3_string_to_sign(amz_date, region, "s3", creq.data, &sts);
	if (rc)
		goto out_free;
	cis_s3_signing_key(secret_key, date8, region, "s3", key);
	hmac(key, sizeof(key), sts.data, sig);
	OPENSSL_cleanse(key, sizeof(key));
	hex_encode(sig, sizeof(sig), sighex);
	rc = cis_buf_printf(out,
	                    "AWS4-HMAC-SHA256 Credential=%s/%s/%s/s3/aws4_request,"
	                    "SignedHeaders=%s,Signature=%s",
	                    access_key, date8, region, names.data, sighex);
	if (!rc && signature)
		memcpy(signature, sighex, sizeof(sighex));
out_free:
	cis_buf_free(&creq);
	cis_buf_free(&names);
	cis_buf_free(&sts);
	return rc;
}

int cis_s3_sign_headers(cis_kvlist *headers, const char *method, const char *path,
                        const cis_kvlist *query, const char *payload_hash, const char *access_key,
                        const char *secret_key, const char *session_token, const char *region,
                        time_t now)
{
	char amz_date[CIS_S3_AMZ_DATE_LEN];
	cis_buf auth = CIS_BUF_INIT;
	int rc;

	cis_s3_amz_date(now, amz_date);
	cis_kvlist_remove(headers, "authorization");
	if ((rc = cis_kvlist_set(headers, "x-amz-date", amz_date)) ||
	    (rc = cis_kvlist_set(headers, "x-amz-content-sha256", payload_hash)))
		return rc;
	if (session_token && session_token[0]) {
		rc = cis_kvlist_set(headers, "x-amz-security-token", session_token);
		if (rc)
			return rc;
	}
	cis_s3_sign_req r = {method, path, query, headers, payload_hash};
	rc = cis_s3_authorization(&r, access_key, secret_key, region, amz_date, &auth, NULL);
	if (!rc)
		rc = cis_kvlist_set(headers, "authorization", auth.data);
	cis_buf_free(&auth);
	return rc;
}
