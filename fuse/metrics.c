/* The client's /metrics: reads and bytes by the path they took
 * (short-circuit, remote, store-direct), read latency, and stall time:
 * the seconds readers spent waiting on a cache miss (a worker fetch or the
 * store), as a histogram whose _sum is the total. */
#include "client.h"

#include <errno.h>

#include "cistern/version.h"

static double gauge_opens(void *arg)
{
	fcl *c = arg;
	return c->meta ? (double)fcl_meta_open_count(c->meta) : 0;
}

static double gauge_inodes(void *arg)
{
	fcl *c = arg;
	return (double)fcl_inodes_count(c->inodes);
}

static double gauge_fds(void *arg)
{
	fcl *c = arg;
	return (double)fcl_local_count(c->local);
}

static double gauge_workers(void *arg)
{
	fcl *c = arg;
	fcl_wlist *wl = fcl_workers_get(c);
	double n = (double)wl->n;
	fcl_workers_put(c, wl);
	return n;
}

int fcl_stats_init(fcl *c)
{
	static const char *const path_labels[FCL_PATH_N] = {"path=\"short_circuit\"",
	                                                    "path=\"remote\"", "path=\"store\""};
	fcl_stats *s = &c->stats;
	s->reg = cis_metrics_new();
	if (!s->reg || cis_version_metric(s->reg, "cistern-fuse"))
		return -ENOMEM;
	bool ok = true;
	for (int p = 0; p < FCL_PATH_N; p++) {
		s->reads[p] =
		    cis_metrics_counter(s->reg, "cistern_fuse_block_reads_total", path_labels[p],
		                        "Block reads by the path that served them");
		s->bytes[p] = cis_metrics_counter(s->reg, "cistern_fuse_read_bytes_total",
		                                  path_labels[p], "Bytes read by path");
		ok = ok && s->reads[p] && s->bytes[p];
	}
	static const char *const mop_labels[FCL_MOP_N] = {"op=\"lookup\"", "op=\"getattr\"",
	                                                  "op=\"readdir\"", "op=\"open\""};
	for (int i = 0; i < FCL_MOP_N; i++) {
		s->master_calls[i] =
		    cis_metrics_counter(s->reg, "cistern_fuse_master_requests_total", mop_labels[i],
		                        "Requests sent to the master");
		ok = ok && s->master_calls[i];
	}
	s->failovers = cis_metrics_counter(s->reg, "cistern_fuse_failovers_total", NULL,
	                                   "Worker reads that failed over to the next worker");
	s->store_errors = cis_metrics_counter(s->reg, "cistern_fuse_store_errors_total", NULL,
	                                      "Reads failed because the store failed (EIO)");
	s->erofs = cis_metrics_counter(s->reg, "cistern_fuse_erofs_total", NULL,
	                               "Write attempts refused on the read-only mount");
	s->prefetch_blocks = cis_metrics_counter(s->reg, "cistern_fuse_prefetch_blocks_total", NULL,
	                                         "Blocks asked of workers ahead of readers");
	s->opens = cis_metrics_counter(s->reg, "cistern_fuse_opens_total", NULL, "Files opened");
	s->open_cache_hits =
	    cis_metrics_counter(s->reg, "cistern_fuse_open_cache_hits_total", NULL,
	                        "Opens answered from the open cache (no master request)");
	s->direct_opens = cis_metrics_counter(
	    s->reg, "cistern_fuse_local_direct_opens_total", NULL,
	    "Block files opened by the client itself, known from an earlier hand-over by the "
	    "same worker (no OpenLocal round trip)");
	s->passthrough_opens = cis_metrics_counter(
	    s->reg, "cistern_fuse_passthrough_opens_total", NULL,
	    "Opens the kernel reads straight from a local block file (FUSE passthrough: their "
	    "reads never reach the daemon)");
	s->stale_reads = cis_metrics_counter(s->reg, "cistern_fuse_stale_reads_total", NULL,
	                                     "Reads that found the object changed in the store "
	                                     "(ESTALE; the next open asks the master)");
	s->dir_refreshes = cis_metrics_counter(
	    s->reg, "cistern_fuse_dir_refreshes_total", NULL,
	    "Directories listed because their names were being asked of the master one by one");
	s->master_errors = cis_metrics_counter(s->reg, "cistern_fuse_master_errors_total", NULL,
	                                       "Master requests that failed");
	s->read_seconds = cis_metrics_histogram(s->reg, "cistern_fuse_read_seconds", NULL,
	                                        "Latency of FUSE reads", NULL, 0);
	s->stall_seconds = cis_metrics_histogram(
	    s->reg, "cistern_fuse_stall_seconds", NULL,
	    "Time reads waited on cache misses (worker fetch or store); _sum is the total", NULL,
	    0);
	ok = ok && s->failovers && s->store_errors && s->erofs && s->prefetch_blocks && s->opens &&
	     s->open_cache_hits && s->direct_opens && s->passthrough_opens && s->stale_reads &&
	     s->dir_refreshes && s->master_errors && s->read_seconds && s->stall_seconds;
	ok = ok &&
	     cis_metrics_gauge_fn(s->reg, "cistern_fuse_inodes", NULL,
	                          "Nodes the kernel holds a lookup on", gauge_inodes, c) == 0 &&
	     cis_metrics_gauge_fn(s->reg, "cistern_fuse_local_fds", NULL,
	                          "Short-circuit descriptors cached", gauge_fds, c) == 0 &&
	     cis_metrics_gauge_fn(s->reg, "cistern_fuse_workers", NULL, "Workers in the list",
	                          gauge_workers, c) == 0 &&
	     cis_metrics_gauge_fn(s->reg, "cistern_fuse_open_cache_entries", NULL,
	                          "Files whose Open reply is cached", gauge_opens, c) == 0;
	return ok ? 0 : -ENOMEM;
}

void fcl_stats_free(fcl *c)
{
	cis_metrics_free(c->stats.reg);
	c->stats.reg = NULL;
}
