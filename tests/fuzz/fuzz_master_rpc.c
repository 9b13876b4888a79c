/* libFuzzer: the master's RPC dispatcher, quick (store waits refused) and
 * plain. The first two bytes pick the message type (folded into the
 * master's range and a little beyond), the rest is the message. A file:// mount gives lookups something to list. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cistern/log.h"
#include "master.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mst_master *m;

static void setup(void)
{
	char tmpl[] = "/tmp/cis-fuzz-mst-XXXXXX";
	char *dir = mkdtemp(tmpl);
	char p[300], uri[300];
	cis_errmsg em = {{0}};
	if (!dir)
		abort();
	cis_log_init("fuzz", CIS_LOG_ERROR);
	snprintf(p, sizeof(p), "%s/store", dir);
	mkdir(p, 0755);
	snprintf(uri, sizeof(uri), "%s/store/f.txt", dir);
	FILE *f = fopen(uri, "w");
	if (f) {
		fputs("x", f);
		fclose(f);
	}
	snprintf(uri, sizeof(uri), "file://%s/store", dir);
	snprintf(p, sizeof(p), "%s/data", dir);
	mst_open_opts o = {.data_dir = p, .map_size = 1ull << 28};
	if (mst_open(&o, &m, &em))
		abort();
	mst_mount_req r = {.path = "/d", .uri = uri, .sync_interval_ms = 0};
	mst_mount_add(m, &r, NULL, &em);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	mst_reply r;
	if (!m)
		setup();
	if (size < 2)
		return 0;
	uint16_t type = (uint16_t)(95 + ((data[0] << 8 | data[1]) % 20));
	/* as the RPC server answers: on the I/O thread, else from the pool */
	if (mst_rpc_dispatch_quick(m, type, data + 2, size - 2, &r))
		mst_reply_clear(&r);
	mst_rpc_dispatch(m, type, data + 2, size - 2, &r);
	mst_reply_clear(&r);
	return 0;
}
