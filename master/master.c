/* Opening and closing the master's state: LMDB, the mount table, the
 * worker registry and the metrics they count into. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/log.h"
#include "master.h"

int mst_open(const mst_open_opts *o, mst_master **out, cis_errmsg *em)
{
	mst_master *m = calloc(1, sizeof(*m));
	int err;
	if (!m)
		return -ENOMEM;
	pthread_mutex_init(&m->mounts_lock, NULL);
	pthread_mutex_init(&m->mount_op_lock, NULL);
	pthread_mutex_init(&m->policy_lock, NULL);
	mst_ns_flights_init(m);
	m->metrics = o->metrics ? o->metrics : cis_metrics_new();
	if (!m->metrics) {
		free(m);
		return -ENOMEM;
	}
	m->c_store_lists = cis_metrics_counter(m->metrics, "cistern_master_store_lists_total", NULL,
	                                       "Directory listings fetched from under-stores");
	m->c_store_list_errors =
	    cis_metrics_counter(m->metrics, "cistern_master_store_list_errors_total", NULL,
	                        "Directory listings that failed");
	m->c_lookups = cis_metrics_counter(m->metrics, "cistern_master_lookups_total", NULL,
	                                   "Namespace lookups");
	m->c_rpc_requests = cis_metrics_counter(m->metrics, "cistern_master_rpc_requests_total",
	                                        NULL, "RPC requests handled");
	m->c_rpc_errors = cis_metrics_counter(m->metrics, "cistern_master_rpc_errors_total", NULL,
	                                      "RPC requests answered with an error");
	m->c_api_requests = cis_metrics_counter(m->metrics, "cistern_master_api_requests_total",
	                                        NULL, "Admin API requests handled");
	m->c_lists_ahead =
	    cis_metrics_counter(m->metrics, "cistern_master_lists_ahead_total", NULL,
	                        "New subdirectories listed before a client asked for them");
	m->c_store_stats =
	    cis_metrics_counter(m->metrics, "cistern_master_store_stats_total", NULL,
	                        "Objects asked of under-stores after a reader found them changed");
	m->list_max = o->list_max ? o->list_max : MST_LIST_MAX;
	err = mst_store_open(m, o->data_dir, o->map_size, em);
	if (err)
		goto out_free;
	err = mst_mounts_load(m, em);
	if (err)
		goto out_store;
	err = mst_workers_new(m, o->heartbeat_ms, o->lost_timeout_ms, &m->workers);
	if (err) {
		cis_fail(em, err, "worker registry: %s", cis_strerror(err));
		goto out_mounts;
	}
	err = mst_wconns_new(m, &m->wconns);
	if (!err)
		err = mst_jobs_new(m, !o->no_background,
		                   o->jobs_kept ? o->jobs_kept : MST_JOBS_KEPT, &m->jobs);
	if (!err && !o->no_background)
		err = mst_repl_start(m, o->repl_interval_ms, &m->repl);
	if (!err && !o->no_background)
		err = mst_listahead_new(m, o->list_ahead, &m->listahead);
	if (err) {
		cis_fail(em, err, "jobs: %s", cis_strerror(err));
		goto out_jobs;
	}
	*out = m;
	return 0;
out_jobs:
	mst_repl_stop(m->repl);
	mst_jobs_free(m->jobs);
	mst_repl_free(m->repl);
	mst_workers_free(m->workers); /* its monitor aborts calls on wconns */
	mst_wconns_free(m->wconns);
out_mounts:
	mst_mounts_free(m);
out_store:
	mst_store_close(m);
out_free:
	if (!o->metrics)
		cis_metrics_free(m->metrics);
	free(m);
	return err;
}

void mst_close(mst_master *m)
{
	if (!m)
		return;
	mst_repl_stop(m->repl);
	mst_jobs_free(m->jobs); /* job threads kick the stopped repl on their way out */
	mst_repl_free(m->repl);
	/* After the jobs (their walks queue here), before what its threads
	 * list into: the mounts and LMDB. */
	mst_listahead_free(m->listahead);
	mst_workers_free(m->workers); /* its monitor aborts calls on wconns */
	mst_wconns_free(m->wconns);
	mst_mounts_free(m);
	mst_store_close(m);
	pthread_mutex_destroy(&m->policy_lock);
	/* The metrics registry is the caller's when it passed one; we cannot
	 * tell here, so the owner frees it (main.c and the tests pass one). */
	free(m);
}
