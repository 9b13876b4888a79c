/* S3 XML replies: real ListObjectsV2, error and multipart bodies, and the
 * hostile ones (truncated, garbage, entity bombs, oversized). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/error.h"
#include "../../common/ufs/s3_xml.h"

#define HDR "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define NS  " xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""

static int parse_list(const char *s, cis_s3_list *l)
{
	return cis_s3_xml_parse_list(s, strlen(s), l);
}

Test(s3_xml, list_page_with_pagination)
{
	const char *body =
	    HDR "<ListBucketResult" NS ">"
	        "<Name>bucket</Name><Prefix>photos/</Prefix><KeyCount>2</KeyCount>"
	        "<MaxKeys>2</MaxKeys><Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>"
	        "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
	        "</NextContinuationToken>"
	        "<Contents><Key>photos/a.jpg</Key>"
	        "<LastModified>2009-10-12T17:50:30.000Z</LastModified>"
	        "<ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag>"
	        "<Size>434234</Size><StorageClass>STANDARD</StorageClass></Contents>"
	        "<Contents><Key>photos/b.jpg</Key>"
	        "<LastModified>2009-10-12T17:50:31Z</LastModified>"
	        "<ETag>\"3858f62230ac3c915f300c664312c11f-9\"</ETag>"
	        "<Size>18446744073709551615</Size></Contents>"
	        "</ListBucketResult>";
	cis_s3_list l;

	cr_assert_eq(parse_list(body, &l), 0);
	cr_assert_eq(l.n_objects, 2);
	cr_assert_str_eq(l.objects[0].key, "photos/a.jpg");
	cr_assert_eq(l.objects[0].size, 434234);
	cr_assert_eq(l.objects[0].mtime_ns, 1255369830LL * 1000000000LL);
	cr_assert_str_eq(l.objects[0].etag, "\"fba9dede5f27731c9771645a39863328\"");
	cr_assert_str_eq(l.objects[1].etag, "\"3858f62230ac3c915f300c664312c11f-9\"");
	cr_assert_eq(l.objects[1].size, UINT64_MAX);
	cr_assert_eq(l.objects[1].mtime_ns, 1255369831LL * 1000000000LL);
	cr_assert(l.truncated);
	cr_assert_str_eq(l.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
	cr_assert_eq(l.key_count, 2);
	cr_assert_eq(l.n_prefixes, 0);
	cis_s3_list_free(&l);
	cr_assert_null(l.objects);
}

Test(s3_xml, list_last_page_with_common_prefixes)
{
	const char *body = HDR "<ListBucketResult" NS ">"
	                       "<Name>b</Name><Prefix></Prefix><KeyCount>3</KeyCount>"
	                       "<IsTruncated>false</IsTruncated>"
	                       "<Contents><Key>top.txt</Key><Size>5</Size></Contents>"
	                       "<CommonPrefixes><Prefix>dir1/</Prefix></CommonPrefixes>"
	                       "<CommonPrefixes><Prefix>dir 2/</Prefix></CommonPrefixes>"
	                       "</ListBucketResult>";
	cis_s3_list l;

	cr_assert_eq(parse_list(body, &l), 0);
	cr_assert_eq(l.n_objects, 1);
	cr_assert_eq(l.objects[0].size, 5);
	cr_assert_eq(l.objects[0].mtime_ns, 0);
	cr_assert_str_eq(l.objects[0].etag, "");
	cr_assert_eq(l.n_prefixes, 2);
	cr_assert_str_eq(l.prefixes[0], "dir1/");
	cr_assert_str_eq(l.prefixes[1], "dir 2/");
	cr_assert_not(l.truncated);
	cr_assert_null(l.next_token);
	cis_s3_list_free(&l);
}

Test(s3_xml, list_utf8_and_escaped_keys_without_namespace)
{
	const char *body =
	    "<ListBucketResult><IsTruncated>false</IsTruncated>"
	    "<Contents><Key>caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac.txt</Key>"
	    "<Size>1</Size></Contents>"
	    "<Contents><Key>a &amp; b &lt;c&gt; &#x41;&#66;</Key><Size>2</Size></Contents>"
	    "<Contents><Key><![CDATA[x<y]]></Key><Size>3</Size></Contents>"
	    "</ListBucketResult>";
	cis_s3_list l;

	cr_assert_eq(parse_list(body, &l), 0);
	cr_assert_eq(l.n_objects, 3);
	cr_assert_str_eq(l.objects[0].key, "caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac.txt");
	cr_assert_str_eq(l.objects[1].key, "a & b <c> AB");
	cr_assert_str_eq(l.objects[2].key, "x<y");
	cis_s3_list_free(&l);
}

/* encoding-type=url: keys with bytes XML cannot carry (0x01, CR) come
 * back as they are; '+' is a space, %2B a plus; a NUL makes the key "".
 * A reply that does not say EncodingType url is taken as it is. */
Test(s3_xml, list_url_encoded_keys_decoded)
{
	static const char x[] = "<ListBucketResult><EncodingType>url</EncodingType>"
	                        "<Contents><Key>d/a%01b</Key></Contents>"
	                        "<Contents><Key>d/cr%0Dx</Key></Contents>"
	                        "<Contents><Key>d/sp+ace%2Bplus</Key></Contents>"
	                        "<Contents><Key>d/nul%00x</Key></Contents>"
	                        "<CommonPrefixes><Prefix>d/s%C3%BCb+dir/</Prefix></CommonPrefixes>"
	                        "</ListBucketResult>";
	static const char plain[] = "<ListBucketResult><Contents><Key>d/a+b%41</Key></Contents>"
	                            "</ListBucketResult>";
	cis_s3_list l;

	cr_assert_eq(cis_s3_xml_parse_list(x, sizeof(x) - 1, &l), 0);
	cr_assert_eq(l.n_objects, 4);
	cr_assert_str_eq(l.objects[0].key, "d/a\x01"
	                                   "b");
	cr_assert_str_eq(l.objects[1].key, "d/cr\rx");
	cr_assert_str_eq(l.objects[2].key, "d/sp ace+plus");
	cr_assert_str_eq(l.objects[3].key, "");
	cr_assert_eq(l.n_prefixes, 1);
	cr_assert_str_eq(l.prefixes[0], "d/s\xc3\xbc"
	                                "b dir/");
	cis_s3_list_free(&l);
	cr_assert_eq(cis_s3_xml_parse_list(plain, sizeof(plain) - 1, &l), 0);
	cr_assert_str_eq(l.objects[0].key, "d/a+b%41");
	cis_s3_list_free(&l);
}

Test(s3_xml, list_unknown_elements_and_missing_fields)
{
	const char *body = "<ns:ListBucketResult xmlns:ns=\"urn:x\">"
	                   "<ns:Owner><ns:ID>x</ns:ID><Key>not-an-object</Key></ns:Owner>"
	                   "<ns:Fancy><Contents><Key>nested</Key></Contents></ns:Fancy>"
	                   "<ns:Contents><ns:Size>7</ns:Size></ns:Contents>" /* no key: skipped */
	                   "<ns:Contents><ns:Key>k</ns:Key><ns:Checksum>z</ns:Checksum>"
	                   "<ns:LastModified>yesterday</ns:LastModified></ns:Contents>"
	                   "<ns:CommonPrefixes><ns:Other/></ns:CommonPrefixes>"
	                   "<ns:KeyCount>many</ns:KeyCount>"
	                   "</ns:ListBucketResult>";
	cis_s3_list l;

	cr_assert_eq(parse_list(body, &l), 0);
	cr_assert_eq(l.n_objects, 1);
	cr_assert_str_eq(l.objects[0].key, "k");
	cr_assert_eq(l.objects[0].size, 0);
	cr_assert_eq(l.objects[0].mtime_ns, 0);
	cr_assert_eq(l.n_prefixes, 0);
	cr_assert_eq(l.key_count, -1);
	cis_s3_list_free(&l);
}

Test(s3_xml, list_bad_size_and_truncated_without_token_rejected)
{
	cis_s3_list l;

	cr_assert_eq(parse_list("<ListBucketResult><Contents><Key>a</Key><Size>-1</Size>"
	                        "</Contents></ListBucketResult>",
	                        &l),
	             -CIS_E_PARSE);
	cr_assert_eq(l.n_objects, 0);
	cr_assert_eq(
	    parse_list("<ListBucketResult><Contents><Key>a</Key>"
	               "<Size>99999999999999999999999</Size></Contents></ListBucketResult>",
	               &l),
	    -CIS_E_PARSE);
	cr_assert_eq(parse_list("<ListBucketResult><IsTruncated>true</IsTruncated>"
	                        "<Contents><Key>a</Key></Contents></ListBucketResult>",
	                        &l),
	             -CIS_E_PARSE);
	cr_assert_eq(l.n_objects, 0);
	cr_assert_null(l.objects);
}

Test(s3_xml, list_refuses_other_roots_and_garbage)
{
	cis_s3_list l;

	cr_assert_eq(parse_list("<Error><Code>NoSuchBucket</Code></Error>", &l), -CIS_E_PARSE);
	cr_assert_eq(parse_list("", &l), -CIS_E_PARSE);
	cr_assert_eq(cis_s3_xml_parse_list(NULL, 0, &l), -CIS_E_PARSE);
	cr_assert_eq(parse_list("\x00\xff\xfe garbage", &l), -CIS_E_PARSE);
	cr_assert_eq(parse_list("not xml at all", &l), -CIS_E_PARSE);
	cr_assert_eq(parse_list("<ListBucketResult><Contents><Key>a</Key>", &l), -CIS_E_PARSE);
	cr_assert_eq(parse_list("<ListBucketResult></ListBucketResul>", &l), -CIS_E_PARSE);
	cr_assert_eq(l.n_objects, 0);
}

Test(s3_xml, entity_bomb_refused_not_expanded)
{
	const char *bomb =
	    HDR "<!DOCTYPE lolz [<!ENTITY lol \"lol\">"
	        "<!ENTITY lol2 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">"
	        "<!ENTITY lol3 \"&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;\">"
	        "<!ENTITY lol4 \"&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;\">"
	        "<!ENTITY lol5 \"&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;\">"
	        "<!ENTITY lol6 \"&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;\">"
	        "<!ENTITY lol7 \"&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;\">"
	        "<!ENTITY lol8 \"&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;\">"
	        "<!ENTITY lol9 \"&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;\">]>"
	        "<ListBucketResult><Contents><Key>&lol9;</Key></Contents>"
	        "</ListBucketResult>";
	const char *xxe = HDR "<!DOCTYPE e [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>"
	                      "<Error><Code>&x;</Code></Error>";
	cis_s3_list l;
	cis_s3_error e;
	char *id;

	cr_assert_eq(parse_list(bomb, &l), -CIS_E_PARSE);
	cr_assert_eq(l.n_objects, 0);
	cr_assert_eq(cis_s3_xml_parse_error(xxe, strlen(xxe), &e), -CIS_E_PARSE);
	cr_assert_str_eq(e.code, "");
	cr_assert_eq(cis_s3_xml_parse_upload_id(bomb, strlen(bomb), &id), -CIS_E_PARSE);
	cr_assert_null(id);
	/* An undeclared entity is an error too, never passed through. */
	cr_assert_eq(parse_list("<ListBucketResult><Contents><Key>&lol;</Key></Contents>"
	                        "</ListBucketResult>",
	                        &l),
	             -CIS_E_PARSE);
}

Test(s3_xml, oversized_input_refused)
{
	size_t n = CIS_S3_XML_MAX + 1;
	char *big = malloc(n);
	cis_s3_list l;

	cr_assert_not_null(big);
	memset(big, ' ', n);
	memcpy(big, "<ListBucketResult>", 18);
	cr_assert_eq(cis_s3_xml_parse_list(big, n, &l), -CIS_E_TOOBIG);
	free(big);
}

Test(s3_xml, many_entries)
{
	size_t n = 5000, cap = n * 64 + 64, off = 0;
	char *b = malloc(cap);
	cis_s3_list l;

	cr_assert_not_null(b);
	off += (size_t)sprintf(b + off, "<ListBucketResult>");
	for (size_t i = 0; i < n; i++)
		off += (size_t)sprintf(
		    b + off, "<Contents><Key>k%05zu</Key><Size>%zu</Size></Contents>", i, i);
	off += (size_t)sprintf(b + off, "</ListBucketResult>");
	cr_assert_eq(cis_s3_xml_parse_list(b, off, &l), 0);
	cr_assert_eq(l.n_objects, n);
	cr_assert_str_eq(l.objects[4321].key, "k04321");
	cr_assert_eq(l.objects[4321].size, 4321);
	cis_s3_list_free(&l);
	free(b);
}

Test(s3_xml, error_bodies)
{
	const char *denied =
	    HDR "<Error><Code>AccessDenied</Code><Message>Access Denied</Message>"
	        "<RequestId>656c76696e6727732072657175657374</RequestId>"
	        "<HostId>Uuag1LuByRx9e6j5Onimru9pO4ZVKnJ2Qz7/C1NPcfTWAtRPfTaOFg==</HostId>"
	        "</Error>";
	cis_s3_error e;

	cr_assert_eq(cis_s3_xml_parse_error(denied, strlen(denied), &e), 0);
	cr_assert_str_eq(e.code, "AccessDenied");
	cr_assert_str_eq(e.message, "Access Denied");

	const char *nsb = "<Error><Code>NoSuchBucket</Code><BucketName>x</BucketName></Error>";
	cr_assert_eq(cis_s3_xml_parse_error(nsb, strlen(nsb), &e), 0);
	cr_assert_str_eq(e.code, "NoSuchBucket");
	cr_assert_str_eq(e.message, "");

	/* A long message is cut, control bytes become spaces (one-line errors). */
	char longmsg[2048];
	int k = snprintf(longmsg, sizeof(longmsg), "<Error><Code>X</Code><Message>line1\nline2");
	memset(longmsg + k, 'm', 1000);
	strcpy(longmsg + k + 1000, "</Message></Error>");
	cr_assert_eq(cis_s3_xml_parse_error(longmsg, strlen(longmsg), &e), 0);
	cr_assert_eq(strlen(e.message), CIS_S3_ERR_MSG_MAX - 1);
	cr_assert(strncmp(e.message, "line1 line2mmm", 14) == 0);

	cr_assert_eq(cis_s3_xml_parse_error("<ListBucketResult/>", 19, &e), -CIS_E_PARSE);
	cr_assert_eq(cis_s3_xml_parse_error("<Error><Code>Trunc", 18, &e), -CIS_E_PARSE);
	cr_assert_eq(cis_s3_xml_parse_error("", 0, &e), -CIS_E_PARSE);
}

Test(s3_xml, initiate_multipart_upload)
{
	const char *ok = HDR "<InitiateMultipartUploadResult" NS ">"
	                     "<Bucket>example-bucket</Bucket><Key>example-object</Key>"
	                     "<UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA"
	                     "</UploadId></InitiateMultipartUploadResult>";
	char *id;

	cr_assert_eq(cis_s3_xml_parse_upload_id(ok, strlen(ok), &id), 0);
	cr_assert_str_eq(id, "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA");
	free(id);
	const char *empty = "<InitiateMultipartUploadResult><UploadId></UploadId>"
	                    "</InitiateMultipartUploadResult>";
	cr_assert_eq(cis_s3_xml_parse_upload_id(empty, strlen(empty), &id), -CIS_E_PARSE);
	cr_assert_null(id);
	const char *none = "<InitiateMultipartUploadResult><Key>k</Key>"
	                   "</InitiateMultipartUploadResult>";
	cr_assert_eq(cis_s3_xml_parse_upload_id(none, strlen(none), &id), -CIS_E_PARSE);
	const char *err = "<Error><Code>InternalError</Code></Error>";
	cr_assert_eq(cis_s3_xml_parse_upload_id(err, strlen(err), &id), -CIS_E_PARSE);
}

Test(s3_xml, iso8601)
{
	int64_t ns;

	cr_assert_eq(cis_s3_parse_iso8601("2009-10-12T17:50:30.000Z", &ns), 0);
	cr_assert_eq(ns, 1255369830LL * 1000000000LL);
	cr_assert_eq(cis_s3_parse_iso8601("1970-01-01T00:00:01.5Z", &ns), 0);
	cr_assert_eq(ns, 1500000000LL);
	cr_assert_eq(cis_s3_parse_iso8601("2009-13-12T17:50:30Z", &ns), -CIS_E_PARSE);
	cr_assert_eq(cis_s3_parse_iso8601("2009-10-12 17:50:30", &ns), -CIS_E_PARSE);
	cr_assert_eq(cis_s3_parse_iso8601("2009-10-12T17:50:30+02:00", &ns), -CIS_E_PARSE);
	cr_assert_eq(cis_s3_parse_iso8601("", &ns), -CIS_E_PARSE);
}

/* IsTruncated is "true" give or take case and white space (a listing
 * taken for whole after its first page lost the rest's keys); anything
 * else is not. */
Test(s3_xml, is_truncated_ignores_case_and_white_space)
{
	const char *vals[] = {"true", "True", " TRUE\n", "false", "truely", ""};
	const bool want[] = {true, true, true, false, false, false};
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		char body[512];
		snprintf(body, sizeof(body),
		         HDR "<ListBucketResult" NS "><Name>b</Name><IsTruncated>%s</IsTruncated>"
		             "<NextContinuationToken>t</NextContinuationToken>"
		             "</ListBucketResult>",
		         vals[i]);
		cis_s3_list l;
		cr_assert_eq(parse_list(body, &l), 0, "'%s'", vals[i]);
		cr_assert_eq(l.truncated, want[i], "'%s'", vals[i]);
		cis_s3_list_free(&l);
	}
}
