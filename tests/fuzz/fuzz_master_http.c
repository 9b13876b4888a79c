/* libFuzzer: the master's HTTP admin API handler. Input: a method index
 * byte, a path index byte, then "query\nJSON body" (the query is both the
 * path and the job id). */
#include <stdint.h>
#include <string.h>

#include "fuzz_master.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mst_master *m;
static const char *const methods[] = {"GET", "POST", "DELETE", "PUT", ""};
static const char *const paths[] = {"/api/v1/mounts",
                                    "/api/v1/ls",
                                    "/api/v1/stat",
                                    "/api/v1/sync",
                                    "/api/v1/report",
                                    "/api/v1/workers",
                                    "/api/v1/jobs",
                                    "/api/v1/job",
                                    "/api/v1/job/cancel",
                                    "/api/v1/policies",
                                    "/api/v1/policy",
                                    "/api/v1/",
                                    "/"};
#define NPATHS (sizeof(paths) / sizeof(paths[0]))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!m)
		m = fuzz_master_open();
	if (size < 2)
		return 0;
	const char *method = methods[data[0] % 5];
	const char *path = paths[data[1] % NPATHS];
	char *rest = strndup((const char *)data + 2, size - 2);
	if (!rest)
		return 0;
	char *nl = strchr(rest, '\n');
	json_t *body = NULL;
	if (nl) {
		*nl = 0;
		body = json_loadb(nl + 1, strlen(nl + 1), 0, NULL);
	}
	cis_kvlist q = CIS_KVLIST_INIT;
	cis_kvlist_set(&q, "path", rest);
	cis_kvlist_set(&q, "id", rest); /* the job endpoints' */
	json_t *out = NULL;
	/* Never mount from fuzz input: that would reach out to stores. */
	if (!(strcmp(method, "POST") == 0 && strcmp(path, "/api/v1/mounts") == 0))
		mst_api_handle(m, method, path, &q, body, &out);
	json_decref(out);
	json_decref(body);
	cis_kvlist_free(&q);
	free(rest);
	return 0;
}
