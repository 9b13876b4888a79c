/* cistern-worker: flags, start-up, the housekeeping loop, shutdown.
 *
 *   cistern-worker --master HOST:PORT --cache-dir /nvme0:200G [--cache-dir ...]
 *                  [--state-dir DIR] [--rpc-port N] [--http-port N] [--socket PATH]
 *
 * The main thread, after starting everything, waits for SIGINT/SIGTERM and
 * meanwhile expires leases, re-probes failed cache dirs and saves access
 * times; the scrubber has a thread of its own. */
#include "worker.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cistern/config.h"
#include "cistern/http.h"
#include "cistern/log.h"
#include "cistern/time.h"
#include "cistern/ufs.h"
#include "cistern/version.h"

static const cis_opt worker_opts[] = {
    {"master", "HOST:PORT", NULL, "master RPC address (without it: standalone, --mount only)",
     false, 'm'},
    {"cache-dir", "PATH:SIZE", NULL, "cache directory and its capacity (K/M/G/T)", true, 'd'},
    {"state-dir", "DIR", NULL, "block index and worker id (default: <first cache dir>/.state)",
     false, 0},
    {"bind", "ADDR", "0.0.0.0", "address the RPC and HTTP ports listen on", false, 0},
    {"host", "HOST", NULL, "address clients reach this worker at (default: the hostname)", false,
     0},
    {"rpc-port", "N", "19610", "binary RPC port (0: any free port)", false, 0},
    {"http-port", "N", "19611", "HTTP port for /metrics, /healthz, /readyz", false, 0},
    {"socket", "PATH", NULL, "Unix socket for local clients (default: <state-dir>/worker.sock)",
     false, 0},
    {"fetch-threads", "N", "24", "concurrent fetches from the store", false, 0},
    {"background-fetches", "N", NULL,
     "of them, how many may serve prefetch and load at once (default three quarters)", false, 0},
    {"io-threads", "N", "4", "RPC I/O threads", false, 0},
    {"high-watermark", "FRACTION", "0.95", "evict when a dir is fuller than this", false, 0},
    {"low-watermark", "FRACTION", "0.85", "evict down to this", false, 0},
    {"scrub-interval", "DURATION", "6h", "pause between scrub passes over all blocks", false, 0},
    {"scrub-pause", "DURATION", "50ms", "pause between two blocks of a scrub pass", false, 0},
    {"mount", "ID=URI", NULL, "a mount known without the master (tests, standalone)", true, 0},
    {"log-level", "LEVEL", "info", "debug, info, warn or error", false, 0},
    CIS_OPT_END,
};

static int parse_frac(const cis_config *cfg, const char *name, double *out, cis_errmsg *em)
{
	const char *s = cis_config_str(cfg, name);
	char *end;

	*out = strtod(s, &end);
	if (end == s || *end || !(*out > 0 && *out <= 1))
		return cis_fail(em, -CIS_E_CONFIG, "--%s %s: want a fraction in (0, 1]", name, s);
	return 0;
}

/* "PATH:SIZE", split at the last colon. */
static int parse_dir(const char *arg, wrk_dir_cfg *d, char **path, cis_errmsg *em)
{
	const char *colon = strrchr(arg, ':');
	int rc;

	if (!colon || colon == arg)
		return cis_fail(em, -CIS_E_CONFIG, "--cache-dir %s: want PATH:SIZE", arg);
	rc = cis_parse_size(colon + 1, &d->capacity);
	if (rc < 0 || d->capacity == 0)
		return cis_fail(em, -CIS_E_CONFIG, "--cache-dir %s: bad size", arg);
	if (d->capacity > CIS_CACHE_DIR_MAX)
		return cis_fail(em, -CIS_E_CONFIG, "--cache-dir %s: over 1 EiB", arg);
	*path = strndup(arg, (size_t)(colon - arg));
	if (!*path)
		return -ENOMEM;
	d->path = *path;
	return 0;
}

static void metrics_init(wrk *w)
{
	cis_metrics *m = w->metrics;
	wrk_metrics *k = &w->m;

	static const char *const types[WRK_REQUEST_TYPES + 1] = {
	    "read_block", "open_local", "release_local", "renew_local", "prefetch", "load",
	    "replicate",  "free",       "pin",           "stat",        "touch",    "other"};
	for (int i = 0; i <= WRK_REQUEST_TYPES; i++) {
		char label[48];
		snprintf(label, sizeof(label), "type=\"%s\"", types[i]);
		k->requests[i] = cis_metrics_counter(m, "cistern_worker_requests_total", label,
		                                     "requests received, by type");
	}
	k->hits = cis_metrics_counter(m, "cistern_worker_hits_total", NULL,
	                              "reads served from the cache");
	k->misses = cis_metrics_counter(m, "cistern_worker_misses_total", NULL,
	                                "reads that needed a fetch");
	k->served_remote = cis_metrics_counter(m, "cistern_worker_served_bytes_total",
	                                       "path=\"remote\"", "bytes served to clients");
	k->served_local = cis_metrics_counter(m, "cistern_worker_served_bytes_total",
	                                      "path=\"local\"", "bytes served to clients");
	k->read_ahead =
	    cis_metrics_counter(m, "cistern_worker_read_ahead_bytes_total", NULL,
	                        "cached bytes a Prefetch asked the kernel to read into memory");
	k->store_bytes = cis_metrics_counter(m, "cistern_worker_store_fetched_bytes_total", NULL,
	                                     "bytes read from under-stores");
	k->store_reads = cis_metrics_counter(m, "cistern_worker_store_reads_total", NULL,
	                                     "ranged reads issued to under-stores");
	k->store_errors = cis_metrics_counter(m, "cistern_worker_store_errors_total", NULL,
	                                      "fetches the under-store failed");
	k->peer_bytes = cis_metrics_counter(m, "cistern_worker_peer_fetched_bytes_total", NULL,
	                                    "bytes copied from peer workers");
	k->fetch_seconds = cis_metrics_histogram(m, "cistern_worker_fetch_seconds", NULL,
	                                         "time to fetch one block", NULL, 0);
	k->evictions =
	    cis_metrics_counter(m, "cistern_worker_evictions_total", NULL, "blocks evicted");
	k->evicted_bytes =
	    cis_metrics_counter(m, "cistern_worker_evicted_bytes_total", NULL, "bytes evicted");
	k->checksum_failures =
	    cis_metrics_counter(m, "cistern_worker_checksum_failures_total", NULL,
	                        "cached blocks that failed their checksum");
	k->scrubbed = cis_metrics_counter(m, "cistern_worker_scrubbed_blocks_total", NULL,
	                                  "blocks checked by the scrubber");
	k->verified_blocks =
	    cis_metrics_counter(m, "cistern_worker_verified_blocks_total", NULL,
	                        "cached blocks read whole to check their checksum (first read "
	                        "after a restart, scrub)");
	k->disk_errors = cis_metrics_counter(m, "cistern_worker_disk_errors_total", NULL,
	                                     "cache dir I/O failures");
	k->direct_reads = cis_metrics_counter(m, "cistern_worker_direct_reads_total", NULL,
	                                      "reads served from the store without caching");
	k->bad_requests = cis_metrics_counter(m, "cistern_worker_bad_requests_total", NULL,
	                                      "malformed or invalid requests");
	k->single_flight_joins = cis_metrics_counter(m, "cistern_worker_fetch_joins_total", NULL,
	                                             "requests that joined a fetch under way");
	k->bulk_pauses =
	    cis_metrics_counter(m, "cistern_worker_load_pauses_total", NULL,
	                        "store reads of a load or replica that paused for readers' reads");
}

typedef struct dir_gauge {
	wrk *w;
	int i;
	int what; /* 0 capacity, 1 used, 2 blocks */
} dir_gauge;

static double dir_gauge_fn(void *arg)
{
	dir_gauge *g = arg;
	Cis__DirUsage u = CIS__DIR_USAGE__INIT;

	wrk_bs_dir_usage(g->w->bs, g->i, &u);
	return g->what == 0 ? (double)u.capacity : g->what == 1 ? (double)u.used : (double)u.blocks;
}

static double leases_fn(void *arg)
{
	wrk *w = arg;

	return (double)wrk_leases_count(w->leases);
}

static double inflight_fn(void *arg)
{
	wrk *w = arg;

	return (double)wrk_fx_inflight(w->fx);
}

static double background_fn(void *arg)
{
	wrk *w = arg;

	return (double)wrk_fx_background_busy(w->fx);
}

static int dir_gauges(wrk *w, dir_gauge **out)
{
	int n = wrk_bs_ndirs(w->bs);
	dir_gauge *g = calloc((size_t)n * 3, sizeof(*g));
	static const char *const names[3] = {"cistern_worker_dir_capacity_bytes",
	                                     "cistern_worker_dir_used_bytes",
	                                     "cistern_worker_dir_blocks"};
	static const char *const help[3] = {"capacity of a cache dir", "bytes used in a cache dir",
	                                    "blocks in a cache dir"};

	if (!g)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		Cis__DirUsage u = CIS__DIR_USAGE__INIT;
		char lab[PATH_MAX + 16];

		wrk_bs_dir_usage(w->bs, i, &u);
		snprintf(lab, sizeof(lab), "dir=\"%s\"", u.path);
		for (int k = 0; k < 3; k++) {
			g[i * 3 + k].w = w;
			g[i * 3 + k].i = i;
			g[i * 3 + k].what = k;
			cis_metrics_gauge_fn(w->metrics, names[k], lab, help[k], dir_gauge_fn,
			                     &g[i * 3 + k]);
		}
	}
	cis_metrics_gauge_fn(w->metrics, "cistern_worker_leases", NULL, "open short-circuit leases",
	                     leases_fn, w);
	cis_metrics_gauge_fn(w->metrics, "cistern_worker_fetches_in_flight", NULL,
	                     "block fetches under way", inflight_fn, w);
	cis_metrics_gauge_fn(
	    w->metrics, "cistern_worker_background_fetches_running", NULL,
	    "fetch threads running prefetch or load jobs (--background-fetches at most)",
	    background_fn, w);
	*out = g;
	return 0;
}

static bool ready_fn(void *ctx, cis_buf *why)
{
	wrk *w = ctx;

	if (wrk_link_ready(w->link))
		return true;
	cis_buf_puts(why, "not registered with the master yet");
	return false;
}

int main(int argc, char **argv)
{
	static wrk w; /* the one worker; its fields are set once here */
	cis_config *cfg = NULL;
	cis_errmsg em = {{0}};
	wrk_dir_cfg dirs[WRK_MAX_DIRS];
	char *dir_paths[WRK_MAX_DIRS] = {NULL};
	wrk_static_mount mounts[WRK_MAX_STATIC_MOUNTS];
	int nmounts = 0;
	const char *const *vals;
	size_t nv;
	int64_t v;
	uint64_t ms;
	wrk_bs_opts bo = {0};
	char state_dir[PATH_MAX], sock[PATH_MAX];
	cis_rpc_server *rpc = NULL;
	cis_rpc_server_opts ro = {0};
	cis_http_server *http = NULL;
	cis_http_server_opts ho = {0};
	dir_gauge *gauges = NULL;
	enum cis_log_level lvl;
	sigset_t sigs;
	int rc, io_threads;
	wrk_scrub *scrub = NULL;
	uint64_t next_probe = 0, next_atimes = 0;

	rc = cis_config_load(&cfg, worker_opts, "CISTERN_", argc, argv, 1, &em);
	if (rc == 1) {
		cis_config_usage(worker_opts, stdout,
		                 "cistern-worker [--config FILE] --cache-dir PATH:SIZE [options]");
		cis_config_free(cfg);
		return 0;
	}
	if (rc == 2) {
		cis_version_print("cistern-worker", stdout);
		cis_config_free(cfg);
		return 0;
	}
	if (rc < 0)
		cis_die("%s", cis_errmsg_or(&em, rc));
	if (cis_log_parse_level(cis_config_str(cfg, "log-level"), &lvl) < 0)
		cis_die("--log-level %s: want debug, info, warn or error",
		        cis_config_str(cfg, "log-level"));
	cis_log_init("cistern-worker", lvl);

	nv = cis_config_multi(cfg, "cache-dir", &vals);
	if (nv == 0)
		cis_die("at least one --cache-dir PATH:SIZE is needed");
	if (nv > WRK_MAX_DIRS)
		cis_die("at most %d --cache-dir", WRK_MAX_DIRS);
	for (size_t i = 0; i < nv; i++)
		if ((rc = parse_dir(vals[i], &dirs[i], &dir_paths[i], &em)) < 0)
			cis_die("%s", cis_errmsg_or(&em, rc));
	bo.dirs = dirs;
	bo.ndirs = (int)nv;
	bo.protected_frac = 0.8;
	if ((rc = parse_frac(cfg, "high-watermark", &bo.high, &em)) < 0 ||
	    (rc = parse_frac(cfg, "low-watermark", &bo.low, &em)) < 0)
		cis_die("%s", em.text);
	if (bo.low > bo.high)
		cis_die("--low-watermark must not be above --high-watermark");

	nv = cis_config_multi(cfg, "mount", &vals);
	if (nv > WRK_MAX_STATIC_MOUNTS)
		cis_die("--mount: at most %d", WRK_MAX_STATIC_MOUNTS);
	for (size_t i = 0; i < nv; i++) {
		const char *eq = strchr(vals[i], '=');
		char *end;

		if (!eq)
			cis_die("--mount %s: want ID=URI", vals[i]);
		mounts[nmounts].id = strtoull(vals[i], &end, 10);
		if (end != eq)
			cis_die("--mount %s: want ID=URI", vals[i]);
		mounts[nmounts++].uri = eq + 1;
	}

	if (cis_config_str(cfg, "state-dir"))
		snprintf(state_dir, sizeof(state_dir), "%s", cis_config_str(cfg, "state-dir"));
	else
		snprintf(state_dir, sizeof(state_dir), "%s/.state", dirs[0].path);
	w.state_dir = state_dir;
	if (cis_config_str(cfg, "socket"))
		snprintf(sock, sizeof(sock), "%s", cis_config_str(cfg, "socket"));
	else if (strlen(state_dir) + sizeof("/worker.sock") > sizeof(sock))
		cis_die("--state-dir %s: path too long", state_dir);
	else
		snprintf(sock, sizeof(sock), "%.*s/worker.sock", PATH_MAX - 16, state_dir);
	w.socket_path = sock;
	w.master = cis_config_str(cfg, "master");
	if (gethostname(w.hostname, sizeof(w.hostname) - 1) < 0)
		snprintf(w.hostname, sizeof(w.hostname), "localhost");
	w.advertise_host = cis_config_str(cfg, "host") ? cis_config_str(cfg, "host") : w.hostname;
	if (!w.advertise_host[0])
		cis_die("--host: empty (clients need an address to reach this worker at)");
	if (getrandom(&w.boot_id, sizeof(w.boot_id), 0) != (ssize_t)sizeof(w.boot_id))
		w.boot_id = cis_wall_ns() ^ ((uint64_t)getpid() << 32);
	if (cis_config_int(cfg, "rpc-port", 0, 65535, &v, &em) < 0)
		cis_die("%s", em.text);
	w.rpc_port = (uint16_t)v;
	if (cis_config_int(cfg, "http-port", 0, 65535, &v, &em) < 0)
		cis_die("%s", em.text);
	w.http_port = (uint16_t)v;
	if (cis_config_int(cfg, "fetch-threads", 1, 1024, &v, &em) < 0)
		cis_die("%s", em.text);
	w.fetch_threads = (int)v;
	/* A quarter (at least one) is kept for reads a client waits on. */
	w.background_fetches =
	    w.fetch_threads > 1 ? w.fetch_threads - (w.fetch_threads + 3) / 4 : 1;
	if (cis_config_str(cfg, "background-fetches")) {
		if (cis_config_int(cfg, "background-fetches", 1, w.fetch_threads, &v, &em) < 0)
			cis_die("%s", em.text);
		w.background_fetches = (int)v;
	}
	if (cis_config_int(cfg, "io-threads", 1, 256, &v, &em) < 0)
		cis_die("%s", em.text);
	io_threads = (int)v;
	if (cis_config_duration_ms(cfg, "scrub-interval", &ms, &em) < 0)
		cis_die("%s", em.text);
	w.scrub_interval_ms = ms;
	if (cis_config_duration_ms(cfg, "scrub-pause", &ms, &em) < 0)
		cis_die("%s", em.text);
	w.scrub_pause_ms = ms;
	bo.state_dir = state_dir;

	/* Signals are taken by sigtimedwait in the loop below; every thread
	 * started from here on inherits the mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* Every reply frame of a block being sent holds a descriptor of
	 * its file until it leaves (sendfile): many clients, many. */
	cis_rpc_raise_fd_limit();

	w.metrics = cis_metrics_new();
	if (!w.metrics || cis_version_metric(w.metrics, "cistern-worker"))
		cis_die("out of memory");
	metrics_init(&w);
	rc = wrk_bs_open(&w, &bo, &w.bs, &em);
	if (rc < 0)
		cis_die("%s", cis_errmsg_or(&em, rc));
	atomic_store(&w.worker_id, wrk_bs_load_worker_id(w.bs));
	if (wrk_leases_new(&w, &w.leases) < 0)
		cis_die("out of memory");
	if (wrk_fx_start(&w, w.fetch_threads, w.background_fetches, &w.fx) < 0)
		cis_die("cannot start fetch threads");
	if (wrk_ra_start(&w, &w.ra) < 0)
		cis_die("cannot start the read-ahead threads");
	rc = wrk_link_new(&w, mounts, nmounts, &w.link, &em);
	if (rc < 0)
		cis_die("%s", cis_errmsg_or(&em, rc));

	ro.bind_addr = cis_config_str(cfg, "bind");
	ro.port = w.rpc_port;
	ro.unix_path = sock;
	ro.io_threads = io_threads;
	ro.name = "worker";
	ro.handler = wrk_serve_handler;
	ro.ctx = &w;
	ro.bad_frames = cis_metrics_counter(
	    w.metrics, "cistern_worker_rpc_bad_frames_total", NULL,
	    "RPC connections dropped for a malformed frame or one not finished in time");
	ro.refused_conns = cis_metrics_counter(w.metrics, "cistern_worker_rpc_refused_total", NULL,
	                                       "RPC connections refused over the limit");
	rc = cis_rpc_server_start(&ro, &rpc, &em);
	if (rc < 0)
		cis_die("rpc: %s", cis_errmsg_or(&em, rc));
	w.rpc_port = cis_rpc_server_port(rpc);

	ho.bind_addr = cis_config_str(cfg, "bind");
	ho.port = w.http_port;
	ho.metrics = w.metrics;
	ho.ready = ready_fn;
	ho.ready_ctx = &w;
	rc = cis_http_server_new(&ho, &http, &em);
	if (rc < 0)
		cis_die("http: %s", cis_errmsg_or(&em, rc));
	w.http_port = cis_http_server_port(http);
	if (dir_gauges(&w, &gauges) < 0)
		cis_die("out of memory");
	if (cis_http_server_start(http) < 0)
		cis_die("http: cannot start");
	if (wrk_link_start(w.link, &em) < 0)
		cis_die("%s", cis_errmsg_or(&em, -EAGAIN));
	cis_info("worker started",
	         "rpc_port=%u http_port=%u socket=%s state_dir=%s blocks=%" PRIu64
	         " worker_id=%" PRIu64,
	         w.rpc_port, w.http_port, sock, state_dir, wrk_bs_nblocks(w.bs),
	         (uint64_t)atomic_load(&w.worker_id));

	if (wrk_scrub_start(&w, &scrub) < 0)
		cis_die("cannot start the scrubber");
	for (;;) {
		struct timespec ts = {0, 20 * 1000000};
		int sig = sigtimedwait(&sigs, NULL, &ts);
		uint64_t now = cis_mono_ms();

		if (sig == SIGINT || sig == SIGTERM)
			break;
		wrk_leases_expire(w.leases);
		if (now >= next_probe) {
			wrk_bs_probe_dirs(w.bs);
			next_probe = now + 2000;
		}
		if (now >= next_atimes) {
			if (next_atimes)
				(void)wrk_bs_save_atimes(w.bs);
			next_atimes = now + WRK_ATIME_SAVE_MS;
		}
	}

	cis_info("worker stopping", NULL);
	atomic_store(&w.stopping, true);
	wrk_scrub_stop(scrub);
	cis_http_server_free(http);
	cis_rpc_server_stop(rpc);
	/* No reply goes out any more: fetches waiting on a store that stopped
	 * answering end now instead of at its timeouts (their temporary files
	 * are removed; nothing half-written is kept). */
	cis_ufs_cancel_all();
	wrk_fx_stop(w.fx); /* fetch threads use the link's mounts */
	wrk_link_stop(w.link);
	wrk_ra_stop(w.ra); /* after the RPC server: its handlers queue to it */
	wrk_leases_free(w.leases);
	wrk_bs_close(w.bs);
	cis_metrics_free(w.metrics);
	free(gauges);
	for (size_t i = 0; i < WRK_MAX_DIRS; i++)
		free(dir_paths[i]);
	cis_config_free(cfg);
	return 0;
}
