/* libFuzzer driver: arbitrary bytes into every S3 XML parser. Any crash,
 * leak or sanitizer report is a bug; return codes are not checked. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../common/ufs/s3_xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cis_s3_list l;
	cis_s3_error e;
	char *id = NULL;

	if (cis_s3_xml_parse_list((const char *)data, size, &l) == 0) {
		/* Walk what came back so a bad pointer would show. */
		size_t sum = 0;
		for (size_t i = 0; i < l.n_objects; i++)
			sum += l.objects[i].key[0] + l.objects[i].etag[0];
		for (size_t i = 0; i < l.n_prefixes; i++)
			sum += l.prefixes[i][0];
		(void)sum;
	}
	cis_s3_list_free(&l);
	cis_s3_xml_parse_error((const char *)data, size, &e);
	if (cis_s3_xml_parse_upload_id((const char *)data, size, &id) == 0)
		free(id);
	return 0;
}
