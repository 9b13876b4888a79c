/* Parsing of S3 XML replies (internal to the S3 connector).
 *
 * libxml2 with no network access, no entity substitution and no DTD: any
 * document that carries a DOCTYPE is refused before it is parsed, so an
 * entity bomb cannot expand. Input is bounded (CIS_S3_XML_MAX). Element
 * names are matched by local name, so namespaced and plain replies parse
 * alike; unknown elements are ignored. */
#ifndef CISTERN_UFS_S3_XML_H
#define CISTERN_UFS_S3_XML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CIS_S3_XML_MAX      (32u << 20) /* bytes of one reply body */
#define CIS_S3_ETAG_MAX     80
#define CIS_S3_ERR_CODE_MAX 96
#define CIS_S3_ERR_MSG_MAX  256

typedef struct cis_s3_object {
	char *key;                  /* full key, XML entities (and url encoding) decoded */
	uint64_t size;              /* 0 when absent */
	int64_t mtime_ns;           /* LastModified; 0 when absent or unparseable */
	char etag[CIS_S3_ETAG_MAX]; /* as sent, quotes included; "" when absent */
} cis_s3_object;

/* One ListObjectsV2 page. Objects and prefixes each in the order sent. */
typedef struct cis_s3_list {
	cis_s3_object *objects;
	size_t n_objects;
	char **prefixes; /* CommonPrefixes/Prefix, full */
	size_t n_prefixes;
	bool truncated;
	char *next_token; /* NULL when absent */
	long key_count;   /* -1 when absent */
} cis_s3_list;

/* Parse a ListBucketResult; keys and prefixes of a reply that says
 * <EncodingType>url</EncodingType> are decoded (asked for with
 * encoding-type=url, so that keys with bytes XML cannot carry, 0x01-0x1F,
 * and a CR, which XML turns into LF, list as they are; one holding a NUL
 * comes out ""). out is the caller's afterwards
 * (cis_s3_list_free), also on failure (then empty). 0, -CIS_E_TOOBIG,
 * -CIS_E_PARSE (not XML, a DTD, another root, a bad Size) or -ENOMEM. */
int cis_s3_xml_parse_list(const char *data, size_t len, cis_s3_list *out);
void cis_s3_list_free(cis_s3_list *l);

/* An <Error> body: Code and Message, truncated to fit. 0 when data is an
 * Error document (missing fields left ""), else -CIS_E_PARSE,
 * -CIS_E_TOOBIG or -ENOMEM. */
typedef struct cis_s3_error {
	char code[CIS_S3_ERR_CODE_MAX];
	char message[CIS_S3_ERR_MSG_MAX];
} cis_s3_error;
int cis_s3_xml_parse_error(const char *data, size_t len, cis_s3_error *out);

/* InitiateMultipartUploadResult/UploadId into *upload_id (malloc'd, the
 * caller's). 0, -CIS_E_PARSE (no or empty UploadId), -CIS_E_TOOBIG,
 * -ENOMEM. */
int cis_s3_xml_parse_upload_id(const char *data, size_t len, char **upload_id);

/* "2009-10-12T17:50:30.000Z" (fraction optional) to ns since the epoch.
 * 0 or -CIS_E_PARSE. */
int cis_s3_parse_iso8601(const char *s, int64_t *ns);

#endif
