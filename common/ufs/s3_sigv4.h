/* AWS Signature Version 4 for S3 (internal to the S3 connector).
 *
 * Pure functions: the caller passes the time, so the AWS worked examples
 * can be checked byte for byte. Only s3.c and the unit tests include this.
 *
 * Encoding follows the S3 flavour of SigV4: every byte outside
 * A-Z a-z 0-9 - _ . ~ is percent-encoded with upper-case hex, a space is
 * %20 (never '+'), and the object path is encoded once (S3 does not
 * double-encode it, unlike the other AWS services). */
#ifndef CISTERN_UFS_S3_SIGV4_H
#define CISTERN_UFS_S3_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "cistern/buf.h"
#include "cistern/kv.h"

#define CIS_S3_SHA256_HEX   65 /* 64 lower-case hex digits and the NUL */
#define CIS_S3_AMZ_DATE_LEN 17 /* "20130524T000000Z" and the NUL */
#define CIS_S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define CIS_S3_UNSIGNED     "UNSIGNED-PAYLOAD"

/* Hex SHA-256 of data into out (CIS_S3_SHA256_HEX bytes). */
void cis_s3_sha256_hex(const void *data, size_t len, char *out);

/* Append the AWS UriEncode() of s[0..len) to out; '/' is kept as is when
 * keep_slash (object paths), encoded otherwise (query names and values).
 * 0 or -ENOMEM. */
int cis_s3_uri_encode(cis_buf *out, const char *s, size_t len, bool keep_slash);

/* "YYYYMMDDTHHMMSSZ" for t (UTC) into out (CIS_S3_AMZ_DATE_LEN bytes). */
void cis_s3_amz_date(time_t t, char *out);

/* kSigning = HMAC(HMAC(HMAC(HMAC("AWS4"+secret, date8), region), service),
 * "aws4_request"), 32 bytes into out. date8 is "YYYYMMDD". */
void cis_s3_signing_key(const char *secret, const char *date8, const char *region,
                        const char *service, unsigned char *out);

/* One request to sign. */
typedef struct cis_s3_sign_req {
	const char *method;        /* "GET", "PUT", ... */
	const char *path;          /* canonical URI, already encoded: "/bkt/a%20b" */
	const cis_kvlist *query;   /* raw (unencoded) names and values; may be NULL */
	const cis_kvlist *headers; /* every header to sign, names in any case */
	const char *payload_hash;  /* hex SHA-256 of the body, or CIS_S3_UNSIGNED */
} cis_s3_sign_req;

/* The canonical query string: names and values encoded, sorted by name
 * then value, "name=" for an empty value. Also what s3.c puts on the wire,
 * so the request and its signature cannot disagree. 0 or -ENOMEM. */
int cis_s3_canonical_query(const cis_kvlist *query, cis_buf *out);

/* The canonical request (method, path, query, headers, signed header
 * list, payload hash, joined by newlines) into out, and the signed header
 * list ("host;range;x-amz-date") into signed_headers when not NULL.
 * 0, -ENOMEM, or -EINVAL (a header name or value with a newline, or two
 * headers whose names differ only in case). */
int cis_s3_canonical_request(const cis_s3_sign_req *r, cis_buf *out, cis_buf *signed_headers);

/* "AWS4-HMAC-SHA256\n<amz_date>\n<date8>/<region>/<service>/aws4_request\n
 * <hex sha256 of canonical request>" into out. 0 or -ENOMEM. */
int cis_s3_string_to_sign(const char *amz_date, const char *region, const char *service,
                          const char *canonical_request, cis_buf *out);

/* The whole Authorization header value ("AWS4-HMAC-SHA256 Credential=...,
 * SignedHeaders=...,Signature=...") into out; the hex signature into
 * signature (CIS_S3_SHA256_HEX bytes) when not NULL. r->headers must hold
 * host, x-amz-date (equal to amz_date), x-amz-content-sha256 and, with
 * temporary credentials, x-amz-security-token: cis_s3_sign_headers adds
 * them. 0, -ENOMEM or -EINVAL. */
int cis_s3_authorization(const cis_s3_sign_req *r, const char *access_key, const char *secret_key,
                         const char *region, const char *amz_date, cis_buf *out, char *signature);

/* Add x-amz-date, x-amz-content-sha256 and (when session_token is
 * non-empty) x-amz-security-token to headers, then set "authorization" to
 * the signature over all of them. headers must already hold host and any
 * other header that is sent. 0, -ENOMEM or -EINVAL. */
int cis_s3_sign_headers(cis_kvlist *headers, const char *method, const char *path,
                        const cis_kvlist *query, const char *payload_hash, const char *access_key,
                        const char *secret_key, const char *session_token, const char *region,
                        time_t now);

#endif
