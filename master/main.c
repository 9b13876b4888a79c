/* cistern-master: flags, start-up, the RPC and HTTP servers, signals.
 * SIGTERM or SIGINT stop it cleanly; kill -9 loses nothing committed. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "cistern/config.h"
#include "cistern/http.h"
#include "cistern/log.h"
#include "cistern/rpc.h"
#include "cistern/ufs.h"
#include "cistern/version.h"
#include "master.h"

#define MASTER_HTTP_THREADS 4

static const cis_opt opts[] = {
    {"data-dir", "DIR", "/var/lib/cistern/master", "where the LMDB state lives", false, 0},
    {"bind", "ADDR", "0.0.0.0", "address to listen on", false, 0},
    {"rpc-port", "N", "19600", "binary RPC port (clients, workers)", false, 0},
    {"http-port", "N", "19601", "HTTP admin API and /metrics port", false, 0},
    {"io-threads", "N", "8", "RPC I/O threads", false, 0},
    {"rpc-threads", "N", "16",
     "threads answering the requests that wait on a store (a lookup that lists a directory)", false,
     0},
    {"map-size", "SIZE", "64G", "LMDB map size (sparse)", false, 0},
    {"heartbeat-interval", "DURATION", "1s", "worker heartbeat interval", false, 0},
    {"worker-timeout", "DURATION", "10s", "a silent worker is lost after this", false, 0},
    {"repl-interval", "DURATION", "30s", "replication manager's full scan period", false, 0},
    {"list-ahead", "N", "16", "threads listing new subdirectories before clients ask (0: off)",
     false, 0},
    {"list-max-entries", "N", "10000000",
     "entries one directory's listing may hold (it is held whole while merged)", false, 0},
    {"jobs-kept", "N", "1000",
     "finished jobs' records kept, the newest (besides loads whose TTL is to run)", false, 0},
    {"log-level", "LEVEL", "info", "debug, info, warn or error", false, 0},
    CIS_OPT_END,
};

static const char *const api_paths[][2] = {
    {"GET", "/api/v1/mounts"},   {"POST", "/api/v1/mounts"}, {"DELETE", "/api/v1/mounts"},
    {"GET", "/api/v1/ls"},       {"GET", "/api/v1/stat"},    {"POST", "/api/v1/sync"},
    {"GET", "/api/v1/report"},   {"GET", "/api/v1/workers"}, {"GET", "/api/v1/jobs"},
    {"POST", "/api/v1/jobs"},    {"GET", "/api/v1/job"},     {"POST", "/api/v1/job/cancel"},
    {"GET", "/api/v1/policies"}, {"POST", "/api/v1/policy"},
};

static void http_api(void *ctx, cis_http_req *req)
{
	mst_master *m = ctx;
	cis_kvlist q = CIS_KVLIST_INIT;
	json_t *body = NULL, *out = NULL;
	const char *method = cis_http_req_method(req);

	for (size_t i = 0; mst_api_query_names[i]; i++) {
		const char *v = cis_http_req_query(req, mst_api_query_names[i]);
		if (v && cis_kvlist_set(&q, mst_api_query_names[i], v)) {
			cis_http_reply_error(req, 500, "out of memory");
			goto out_q;
		}
	}
	if (!strcmp(method, "POST")) {
		body = cis_http_req_json(req);
		if (!body)
			goto out_q; /* the server replied 400 */
	}
	int status = mst_api_handle(m, method, cis_http_req_path(req), &q, body, &out);
	if (!out && status / 100 == 2) /* json_pack failed: say so, never 200 {} */
		cis_http_reply_error(req, 500, "the reply could not be built (out of memory?)");
	else
		cis_http_reply_json(req, status, out ? out : json_object());
out_q:
	cis_kvlist_free(&q);
}

int main(int argc, char **argv)
{
	cis_config *cfg;
	cis_errmsg em = {{0}};
	int64_t rpc_port, http_port, io_threads, rpc_threads, list_ahead, list_max, jobs_kept;
	uint64_t map_size, hb_ms, lost_ms, repl_ms;
	enum cis_log_level lvl;
	/* Once, before any thread: the API's report asks workers over libcurl. */
	curl_global_init(CURL_GLOBAL_DEFAULT);
	int rc = cis_config_load(&cfg, opts, "CISTERN_", argc, argv, 1, &em);
	if (rc == 1) {
		cis_config_usage(opts, stdout, "cistern-master [--config FILE] [flags]");
		cis_config_free(cfg);
		return 0;
	}
	if (rc == 2) {
		cis_version_print("cistern-master", stdout);
		cis_config_free(cfg);
		return 0;
	}
	if (rc)
		cis_die("%s", cis_errmsg_or(&em, rc));
	if (cis_log_parse_level(cis_config_str(cfg, "log-level"), &lvl))
		cis_die("bad --log-level '%s'", cis_config_str(cfg, "log-level"));
	cis_log_init("cistern-master", lvl);
	if (cis_config_int(cfg, "rpc-port", 0, 65535, &rpc_port, &em) ||
	    cis_config_int(cfg, "http-port", 0, 65535, &http_port, &em) ||
	    cis_config_int(cfg, "io-threads", 1, 256, &io_threads, &em) ||
	    cis_config_int(cfg, "rpc-threads", 0, 1024, &rpc_threads, &em) ||
	    cis_config_size(cfg, "map-size", &map_size, &em) ||
	    cis_config_duration_ms(cfg, "heartbeat-interval", &hb_ms, &em) ||
	    cis_config_duration_ms(cfg, "worker-timeout", &lost_ms, &em) ||
	    cis_config_duration_ms(cfg, "repl-interval", &repl_ms, &em) ||
	    cis_config_int(cfg, "list-ahead", 0, 64, &list_ahead, &em) ||
	    cis_config_int(cfg, "list-max-entries", 1000, 1000000000, &list_max, &em) ||
	    cis_config_int(cfg, "jobs-kept", 64, 1000000000, &jobs_kept, &em))
		cis_die("%s", em.text);
	if (cis_config_npos(cfg))
		cis_die("unexpected argument '%s'", cis_config_pos(cfg, 0));
	/* Workers heartbeat at most every 10 s; a timeout within two beats
	 * would have live workers declared lost between them. */
	if (hb_ms == 0 || hb_ms > 10000)
		cis_die("--heartbeat-interval: %llu ms: want 1ms to 10s",
		        (unsigned long long)hb_ms);
	if (lost_ms < 2 * hb_ms)
		cis_die("--worker-timeout (%llu ms) must be at least twice --heartbeat-interval "
		        "(%llu ms)",
		        (unsigned long long)lost_ms, (unsigned long long)hb_ms);

	/* Signals are taken synchronously by the main thread: block them
	 * before any thread starts so every thread inherits the mask. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	cis_rpc_raise_fd_limit(); /* every FUSE client and worker holds connections */
	cis_metrics *metrics = cis_metrics_new();
	if (!metrics || cis_version_metric(metrics, "cistern-master"))
		cis_die("out of memory");
	mst_master *m;
	mst_open_opts mo = {
	    .data_dir = cis_config_str(cfg, "data-dir"),
	    .map_size = map_size,
	    .heartbeat_ms = hb_ms,
	    .lost_timeout_ms = lost_ms,
	    .metrics = metrics,
	    .repl_interval_ms = repl_ms,
	    .list_ahead = (int)list_ahead,
	    .list_max = (uint64_t)list_max,
	    .jobs_kept = (uint64_t)jobs_kept,
	};
	rc = mst_open(&mo, &m, &em);
	if (rc)
		cis_die("%s", cis_errmsg_or(&em, rc));

	cis_http_server *http;
	cis_http_server_opts ho = {
	    .bind_addr = cis_config_str(cfg, "bind"),
	    .port = (uint16_t)http_port,
	    .metrics = metrics,
	    /* A report or a sync of a big tree holds its thread for seconds;
	     * the others keep /healthz (the kubelet's probe) and the API up. */
	    .threads = MASTER_HTTP_THREADS,
	};
	rc = cis_http_server_new(&ho, &http, &em);
	if (rc)
		cis_die("http: %s", cis_errmsg_or(&em, rc));
	for (size_t i = 0; i < sizeof(api_paths) / sizeof(api_paths[0]); i++)
		if (cis_http_route(http, api_paths[i][0], api_paths[i][1], http_api, m))
			cis_die("http: cannot add route %s", api_paths[i][1]);

	mst_rpcpool *pool;
	rc = mst_rpcpool_new(m, (int)rpc_threads, &pool);
	if (rc)
		cis_die("rpc threads: %s", cis_strerror(rc));
	cis_rpc_server *rpc;
	cis_rpc_server_opts ro = {
	    .bind_addr = cis_config_str(cfg, "bind"),
	    .port = (uint16_t)rpc_port,
	    .io_threads = (int)io_threads,
	    .name = "master",
	    .handler = mst_rpc_handler,
	    .ctx = pool,
	    .bad_frames = cis_metrics_counter(
	        metrics, "cistern_master_rpc_bad_frames_total", NULL,
	        "RPC connections dropped for a malformed frame or one not finished in time"),
	    .refused_conns = cis_metrics_counter(metrics, "cistern_master_rpc_refused_total", NULL,
	                                         "RPC connections refused over the limit"),
	};
	rc = cis_rpc_server_start(&ro, &rpc, &em);
	if (rc)
		cis_die("rpc: %s", cis_errmsg_or(&em, rc));
	/* Before the API takes new jobs, so none is taken for one to resume. */
	mst_jobs_resume(m);
	if (cis_http_server_start(http))
		cis_die("http: cannot start");
	cis_info("master started", "rpc_port=%u http_port=%u data_dir=%s mounts=%zu",
	         cis_rpc_server_port(rpc), cis_http_server_port(http), mo.data_dir,
	         mst_mount_count(m));

	int sig = 0;
	sigwait(&sigs, &sig);
	cis_info("stopping", "signal=%d", sig);
	/* Requests waiting on a store that stopped answering would hold the
	 * stop up for the store's timeouts (a minute): abandon them, once the
	 * jobs keep nothing more of what fails now. */
	mst_jobs_stop(m->jobs);
	cis_ufs_cancel_all();
	cis_rpc_server_stop(rpc);
	mst_rpcpool_free(pool);
	cis_http_server_free(http);
	mst_close(m);
	cis_metrics_free(metrics);
	cis_config_free(cfg);
	cis_info("stopped", NULL);
	return 0;
}
