/* S3 XML replies through libxml2 (see s3_xml.h). */
#include "s3_xml.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#include "cistern/error.h"

/* No network, no entity substitution (XML_PARSE_NOENT deliberately
 * absent), no DTD loading, quiet: errors come back as codes, not stderr. */
#define PARSE_OPTS (XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NOCDATA)

static int parse_doc(const char *data, size_t len, xmlDocPtr *out)
{
	xmlDocPtr doc;

	*out = NULL;
	if (!data || len == 0)
		return -CIS_E_PARSE;
	if (len > CIS_S3_XML_MAX)
		return -CIS_E_TOOBIG;
	/* S3 never sends a DTD. Refusing any DOCTYPE up front means entity
	 * declarations are never even parsed (billion laughs, external
	 * entities). memmem also finds it inside comments: harmless to refuse. */
	if (memmem(data, len, "<!DOCTYPE", 9) || memmem(data, len, "<!ENTITY", 8))
		return -CIS_E_PARSE;
	doc = xmlReadMemory(data, (int)len, NULL, NULL, PARSE_OPTS);
	if (!doc)
		return -CIS_E_PARSE;
	if (doc->intSubset || doc->extSubset || !xmlDocGetRootElement(doc)) {
		xmlFreeDoc(doc);
		return -CIS_E_PARSE;
	}
	*out = doc;
	return 0;
}

static bool is(const xmlNode *n, const char *name)
{
	return n->type == XML_ELEMENT_NODE && n->name && strcmp((const char *)n->name, name) == 0;
}

/* The text of n (entities decoded), malloc'd; NULL on -ENOMEM. */
static char *text_dup(const xmlNode *n)
{
	xmlChar *t = xmlNodeGetContent(n);
	char *s;

	if (!t)
		return strdup("");
	s = strdup((const char *)t);
	xmlFree(t);
	return s;
}

/* Copy the text of n into out (size bytes), truncated. */
static void text_copy(const xmlNode *n, char *out, size_t size)
{
	xmlChar *t = xmlNodeGetContent(n);

	snprintf(out, size, "%s", t ? (const char *)t : "");
	xmlFree(t);
}

int cis_s3_parse_iso8601(const char *s, int64_t *ns)
{
	struct tm tm = {0};
	int y, mo, d, h, mi, sec, used = 0;
	int64_t frac = 0;
	time_t secs;

	if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) != 6)
		return -CIS_E_PARSE;
	if (y < 1970 || y > 9999 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
	    sec > 60 || h < 0 || mi < 0 || sec < 0)
		return -CIS_E_PARSE;
	s += used;
	if (*s == '.') {
		int digits = 0;
		for (s++; *s >= '0' && *s <= '9'; s++) {
			if (digits < 9) {
				frac = frac * 10 + (*s - '0');
				digits++;
			}
		}
		for (; digits < 9; digits++)
			frac *= 10;
	}
	if (*s != 'Z' && *s != 0)
		return -CIS_E_PARSE;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	secs = timegm(&tm);
	/* Keep the nanosecond count inside int64 (years 1678..2262). */
	if (secs == (time_t)-1 || secs < -9223372036LL || secs > 9223372035LL)
		return -CIS_E_PARSE;
	*ns = (int64_t)secs * 1000000000 + frac;
	return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -CIS_E_PARSE;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -CIS_E_PARSE;
	*out = v;
	return 0;
}

static int parse_contents(const xmlNode *c, cis_s3_object *o)
{
	int rc = 0;

	memset(o, 0, sizeof(*o));
	for (const xmlNode *n = c->children; n; n = n->next) {
		if (is(n, "Key")) {
			free(o->key);
			o->key = text_dup(n);
			if (!o->key)
				return -ENOMEM;
		} else if (is(n, "Size")) {
			char *t = text_dup(n);
			if (!t)
				return -ENOMEM;
			rc = parse_u64(t, &o->size);
			free(t);
			if (rc)
				return rc;
		} else if (is(n, "LastModified")) {
			char *t = text_dup(n);
			if (!t)
				return -ENOMEM;
			if (cis_s3_parse_iso8601(t, &o->mtime_ns))
				o->mtime_ns = 0;
			free(t);
		} else if (is(n, "ETag")) {
			text_copy(n, o->etag, sizeof(o->etag));
		}
	}
	return 0;
}

void cis_s3_list_free(cis_s3_list *l)
{
	for (size_t i = 0; i < l->n_objects; i++)
		free(l->objects[i].key);
	free(l->objects);
	for (size_t i = 0; i < l->n_prefixes; i++)
		free(l->prefixes[i]);
	free(l->prefixes);
	free(l->next_token);
	memset(l, 0, sizeof(*l));
	l->key_count = -1;
}

/* Grow an array of elem-sized items to hold one more. */
static int grow(void **arr, size_t n, size_t *cap, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 16;
	void *p = realloc(*arr, nc * elem);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = nc;
	return 0;
}

/* A key sent with EncodingType url (form encoding: '+' is a space) back
 * to its bytes, in place of *s. One holding a NUL names nothing a path
 * can: it becomes "" (a listing skips it). */
static int url_decode(char **s)
{
	for (char *p = *s; *p; p++)
		if (*p == '+')
			*p = ' ';
	int n = 0;
	char *d = curl_easy_unescape(NULL, *s, 0, &n);
	if (!d)
		return -ENOMEM;
	char *copy = strlen(d) == (size_t)n ? strdup(d) : strdup("");
	curl_free(d);
	if (!copy)
		return -ENOMEM;
	free(*s);
	*s = copy;
	return 0;
}

static int url_decode_all(cis_s3_list *l)
{
	for (size_t i = 0; i < l->n_objects; i++)
		if (url_decode(&l->objects[i].key))
			return -ENOMEM;
	for (size_t i = 0; i < l->n_prefixes; i++)
		if (url_decode(&l->prefixes[i]))
			return -ENOMEM;
	return 0;
}

int cis_s3_xml_parse_list(const char *data, size_t len, cis_s3_list *out)
{
	xmlDocPtr doc;
	size_t cap_o = 0, cap_p = 0;
	bool url_encoded = false;
	int rc;

	memset(out, 0, sizeof(*out));
	out->key_count = -1;
	rc = parse_doc(data, len, &doc);
	if (rc)
		return rc;
	xmlNode *root = xmlDocGetRootElement(doc);
	if (!is(root, "ListBucketResult")) {
		rc = -CIS_E_PARSE;
		goto out_free_doc;
	}
	for (const xmlNode *n = root->children; n; n = n->next) {
		if (is(n, "Contents")) {
			cis_s3_object o;
			rc = parse_contents(n, &o);
			if (rc) {
				free(o.key);
				goto out_fail;
			}
			if (!o.key) /* an entry without a key names nothing */
				continue;
			rc = grow((void **)&out->objects, out->n_objects, &cap_o, sizeof(o));
			if (rc) {
				free(o.key);
				goto out_fail;
			}
			out->objects[out->n_objects++] = o;
		} else if (is(n, "CommonPrefixes")) {
			for (const xmlNode *p = n->children; p; p = p->next) {
				if (!is(p, "Prefix"))
					continue;
				rc = grow((void **)&out->prefixes, out->n_prefixes, &cap_p,
				          sizeof(char *));
				if (rc)
					goto out_fail;
				out->prefixes[out->n_prefixes] = text_dup(p);
				if (!out->prefixes[out->n_prefixes]) {
					rc = -ENOMEM;
					goto out_fail;
				}
				out->n_prefixes++;
			}
		} else if (is(n, "IsTruncated")) {
			char *t = text_dup(n);
			if (!t) {
				rc = -ENOMEM;
				goto out_fail;
			}
			/* "true", give or take case and white space: a
			 * truncated listing taken for whole loses keys */
			const char *b = t + strspn(t, " \t\r\n");
			out->truncated =
			    !strncasecmp(b, "true", 4) && !b[4 + strspn(b + 4, " \t\r\n")];
			free(t);
		} else if (is(n, "NextContinuationToken")) {
			free(out->next_token);
			out->next_token = text_dup(n);
			if (!out->next_token) {
				rc = -ENOMEM;
				goto out_fail;
			}
		} else if (is(n, "EncodingType")) {
			char *t = text_dup(n);
			if (!t) {
				rc = -ENOMEM;
				goto out_fail;
			}
			url_encoded = strcmp(t, "url") == 0;
			free(t);
		} else if (is(n, "KeyCount")) {
			char *t = text_dup(n);
			uint64_t v;
			if (!t) {
				rc = -ENOMEM;
				goto out_fail;
			}
			out->key_count = (parse_u64(t, &v) == 0 && v <= LONG_MAX) ? (long)v : -1;
			free(t);
		}
	}
	/* A truncated page must say where to go on, or paging would loop. */
	if (out->truncated && (!out->next_token || !out->next_token[0])) {
		rc = -CIS_E_PARSE;
		goto out_fail;
	}
	rc = url_encoded ? url_decode_all(out) : 0;
	if (rc)
		goto out_fail;
	goto out_free_doc;
out_fail:
	cis_s3_list_free(out);
out_free_doc:
	xmlFreeDoc(doc);
	return rc;
}

int cis_s3_xml_parse_error(const char *data, size_t len, cis_s3_error *out)
{
	xmlDocPtr doc;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = parse_doc(data, len, &doc);
	if (rc)
		return rc;
	xmlNode *root = xmlDocGetRootElement(doc);
	if (!is(root, "Error")) {
		xmlFreeDoc(doc);
		return -CIS_E_PARSE;
	}
	for (const xmlNode *n = root->children; n; n = n->next) {
		if (is(n, "Code"))
			text_copy(n, out->code, sizeof(out->code));
		else if (is(n, "Message"))
			text_copy(n, out->message, sizeof(out->message));
	}
	/* The text goes into one-line error messages: no control bytes. */
	for (char *c = out->message; *c; c++) {
		if ((unsigned char)*c < 0x20)
			*c = ' ';
	}
	for (char *c = out->code; *c; c++) {
		if ((unsigned char)*c < 0x20)
			*c = ' ';
	}
	xmlFreeDoc(doc);
	return 0;
}

int cis_s3_xml_parse_upload_id(const char *data, size_t len, char **upload_id)
{
	xmlDocPtr doc;
	int rc;

	*upload_id = NULL;
	rc = parse_doc(data, len, &doc);
	if (rc)
		return rc;
	xmlNode *root = xmlDocGetRootElement(doc);
	rc = -CIS_E_PARSE;
	if (is(root, "InitiateMultipartUploadResult")) {
		for (const xmlNode *n = root->children; n; n = n->next) {
			if (!is(n, "UploadId"))
				continue;
			free(*upload_id);
			*upload_id = text_dup(n);
			rc = *upload_id ? 0 : -ENOMEM;
		}
	}
	if (rc == 0 && !(*upload_id)[0])
		rc = -CIS_E_PARSE;
	if (rc) {
		free(*upload_id);
		*upload_id = NULL;
	}
	xmlFreeDoc(doc);
	return rc;
}
