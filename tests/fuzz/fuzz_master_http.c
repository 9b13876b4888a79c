/* libFuzzer: the master's HTTP admin API handler. Input: a method index
 * byte, a path index byte, then "query-path\nJSON body". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cistern/log.h"
#include "master.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mst_master *m;
static const char *const methods[] = {"GET", "POST", "DELETE", "PUT", ""};
static const char *const paths[] = {
    "/api/v1/mounts", "/api/v1/ls",      "/api/v1/stat", "/api/v1/sync",
    "/api/v1/report", "/api/v1/workers", "/api/v1/",     "/"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!m) {
		char tmpl[] = "/tmp/cis-fuzz-msth-XXXXXX";
		char *dir = mkdtemp(tmpl);
		cis_errmsg em = {{0}};
		if (!dir)
			abort();
		cis_log_init("fuzz", CIS_LOG_ERROR);
		mst_open_opts o = {.data_dir = dir, .map_size = 1ull << 28};
		if (mst_open(&o, &m, &em))
			abort();
	}
	if (size < 2)
		return 0;
	const char *method = methods[data[0] % 5];
	const char *path = paths[data[1] % 8];
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
