/* The master the master fuzzers drive: LMDB in a fresh /tmp directory,
 * no background threads, and a file:// store of one file mounted at /d so
 * that lookups, listings, jobs and policies have something to work on. */
#pragma once

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "cistern/log.h"
#include "master.h"

static char fuzz_dir[] = "/tmp/cis-fuzz-mst-XXXXXX";

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* At exit: the run's directory goes (every run made one, and kept it). */
static void fuzz_master_clean(void)
{
	nftw(fuzz_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static mst_master *fuzz_master_open(void)
{
	char *dir = mkdtemp(fuzz_dir);
	char p[300], uri[300];
	cis_errmsg em = {{0}};
	mst_master *m;

	if (!dir)
		abort();
	atexit(fuzz_master_clean);
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
	mst_open_opts o = {.data_dir = p, .map_size = 1ull << 28, .no_background = true};
	if (mst_open(&o, &m, &em))
		abort();
	mst_mount_req r = {.path = "/d", .uri = uri, .sync_interval_ms = 0};
	mst_mount_add(m, &r, NULL, &em);
	return m;
}
