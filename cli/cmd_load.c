/* cistern load / jobs / job / free: jobs on the master. `load` and `free`
 * wait for their job and show progress (a bar on a terminal, a plain line
 * every few seconds otherwise) unless --detach; a master that cannot be
 * reached while they wait is asked again for a minute (a restarted master
 * resumes the job). The CLI keeps only the latest job record in memory,
 * whatever the file count: the master sends counts and at most a page of
 * failures. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cistern/rpc.h"
#include "cistern/time.h"
#include "cli.h"

static const cis_opt load_opts[] = {
    {"replicas", "N", "1", "copies of each block, on N workers", false, 'r'},
    {"parallel", "N", "16", "batches of fetches in flight at once", false, 'p'},
    {"bandwidth", "RATE", NULL, "cap on bytes fetched per second (200M = 200 MiB/s)", false, 0},
    {"verify", NULL, NULL, "check afterwards that every block sits on its workers", false, 0},
    {"metadata-only", NULL, NULL, "list the tree, fetch no data", false, 0},
    {"detach", NULL, NULL, "print the job id and return at once", false, 'd'},
    {"json", NULL, NULL, "print JSON (the final job record)", false, 0},
    CIS_OPT_END,
};

static const cis_opt free_opts[] = {
    {"detach", NULL, NULL, "print the job id and return at once", false, 'd'},
    {"json", NULL, NULL, "print JSON", false, 0},
    CIS_OPT_END,
};

/* For `job`; `jobs` takes only --json (cli_json_opts). */
static const cis_opt job_opts[] = {
    {"json", NULL, NULL, "print JSON", false, 0},
    {"limit", "N", "100", "failures to show (at most 1000)", false, 0},
    CIS_OPT_END,
};

static void fmt_eta(double secs, char *out, size_t len)
{
	if (secs < 0 || secs > 360000) {
		snprintf(out, len, "--:--");
		return;
	}
	long s = (long)secs;
	if (s >= 3600)
		snprintf(out, len, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
	else
		snprintf(out, len, "%ld:%02ld", s / 60, s % 60);
}

/* One progress report; bar on a terminal, a line otherwise. */
static void show_progress(const json_t *j, double elapsed_s, bool tty)
{
	const json_t *p = json_object_get(j, "progress");
	const json_t *c = json_object_get(j, "counts");
	if (!p)
		p = c;
	long long files = cli_jint(c, "files"), seen = cli_jint(j, "files_seen");
	long long bytes_seen = cli_jint(j, "bytes_seen"), loaded = cli_jint(p, "bytes_loaded");
	if (!json_object_get(j, "files_seen")) { /* a job that ended: all it saw is counted */
		seen = files;
		bytes_seen = cli_jint(c, "bytes");
	}
	long long failed = cli_jint(c, "files_failed");
	bool listed = json_is_true(json_object_get(j, "listing_done"));
	double frac = seen ? (double)files / (double)seen : 0;
	double rate = elapsed_s > 0 ? (double)loaded / elapsed_s : 0;
	char bs[32], ts[32], rs[32], eta[32];
	cis_fmt_size((uint64_t)loaded, bs, sizeof(bs));
	cis_fmt_size((uint64_t)bytes_seen, ts, sizeof(ts));
	cis_fmt_size((uint64_t)rate, rs, sizeof(rs));
	double left = -1; /* unknown: still listing, or no file done to go by */
	if (listed && files >= seen)
		left = 0;
	else if (listed && files > 0)
		left = elapsed_s * (double)(seen - files) / (double)files;
	fmt_eta(left, eta, sizeof(eta));
	if (tty) {
		char bar[31];
		int fill = (int)(frac * 30);
		for (int i = 0; i < 30; i++)
			bar[i] = i < fill ? '#' : '.';
		bar[30] = 0;
		/* Padded over what the last bar left: the terminal filter
		 * (tty.c) would show an erase-line sequence as text. */
		static int last_len;
		char line[256];
		int len = snprintf(line, sizeof(line),
		                   "job %lld [%s] %lld/%lld%s files  %s fetched of %s  %s/s  ETA "
		                   "%s  failed %lld",
		                   cli_jint(j, "id"), bar, files, seen, listed ? "" : "+", bs, ts,
		                   rs, eta, failed);
		if (len < 0)
			len = 0;
		if (len >= (int)sizeof(line))
			len = (int)sizeof(line) - 1;
		printf("\r%s%*s", line, last_len > len ? last_len - len : 0, "");
		last_len = len;
	} else {
		printf("job %lld: %lld/%lld%s files, %s fetched, %s/s, ETA %s, %lld failed\n",
		       cli_jint(j, "id"), files, seen, listed ? "" : "+", bs, rs, eta, failed);
	}
	fflush(stdout);
}

static void print_failures(const json_t *j)
{
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(j, "failures"), i, f)
	{
		/* a path that is not UTF-8 comes with its bytes in hex beside
		 * "path" (which has '?' for them) */
		const char *p = cli_jstr(f, "path");
		if (cli_jstr(f, "path_hex")[0])
			fprintf(stderr, "failed: (hex) %s: %s\n", cli_jstr(f, "path_hex"),
			        cli_jstr(f, "error"));
		else
			fprintf(stderr, "failed: %s: %s\n", p, cli_jstr(f, "error"));
	}
	long long total = cli_jint(j, "failures_total"),
	          shown = (long long)json_array_size(json_object_get(j, "failures"));
	if (total > shown)
		fprintf(stderr, "... and %lld more (cistern job %lld --limit 1000)\n",
		        total - shown, cli_jint(j, "id"));
}

static void print_summary(const json_t *j)
{
	const json_t *c = json_object_get(j, "counts");
	char b[32], l[32];
	if (strcmp(cli_jstr(j, "type"), "load")) {
		/* free, pin, unpin: tasks_loaded counts the blocks the workers changed */
		cis_fmt_size((uint64_t)cli_jint(c, "bytes"), b, sizeof(b));
		printf("job %lld %s %s: %s, %lld files (%s), %lld blocks; %lld block copies %s\n",
		       cli_jint(j, "id"), cli_jstr(j, "type"), cli_jstr(j, "path"),
		       cli_jstr(j, "state"), cli_jint(c, "files"), b, cli_jint(c, "blocks"),
		       cli_jint(c, "tasks_loaded"),
		       !strcmp(cli_jstr(j, "type"), "free") ? "freed" : "changed");
		if (cli_jstr(j, "error")[0])
			printf("error: %s\n", cli_jstr(j, "error"));
		return;
	}
	cis_fmt_size((uint64_t)cli_jint(c, "bytes"), b, sizeof(b));
	cis_fmt_size((uint64_t)cli_jint(c, "bytes_loaded"), l, sizeof(l));
	printf("job %lld %s %s: %s, %lld files (%s), %lld blocks; %lld fetched (%s), %lld already "
	       "cached, %lld failed; %lld files failed\n",
	       cli_jint(j, "id"), cli_jstr(j, "type"), cli_jstr(j, "path"), cli_jstr(j, "state"),
	       cli_jint(c, "files"), b, cli_jint(c, "blocks"), cli_jint(c, "tasks_loaded"), l,
	       cli_jint(c, "tasks_cached"), cli_jint(c, "tasks_failed"),
	       cli_jint(c, "files_failed"));
	if (cli_jstr(j, "error")[0])
		printf("error: %s\n", cli_jstr(j, "error"));
}

/* Whether the job ended done with every file loaded. */
static bool job_succeeded(const json_t *j)
{
	return !strcmp(cli_jstr(j, "state"), "done") &&
	       !cli_jint(json_object_get(j, "counts"), "files_failed") &&
	       !cli_jint(j, "failures_total");
}

/* A load that asked for more copies than there are live workers got one
 * per worker: say so (the replication manager adds the rest as workers
 * join; the job itself succeeded). */
static void note_short_replicas(cli_ctx *c, const json_t *j)
{
	long long want = cli_jint(j, "replicas");
	json_t *o;
	if (strcmp(cli_jstr(j, "type"), "load") || want < 2 ||
	    cli_api(c, "GET", "/api/v1/workers", NULL, NULL, NULL, &o, "workers"))
		return;
	long long live = (long long)json_array_size(json_object_get(o, "workers"));
	if (live < want)
		printf("note: %lld replicas asked, %lld live worker%s: %lld cop%s of each block "
		       "now; the rest follow as workers join\n",
		       want, live, live == 1 ? "" : "s", live, live == 1 ? "y" : "ies");
	json_decref(o);
}

/* How often wait_job asks: a job's end is seen at most this late (a
 * 2 GiB load takes about 5 s here; a 500 ms poll added 0.25 s on average). */
#define WAIT_POLL_MS 100
/* How long wait_job keeps asking while the master cannot be reached (a
 * restart: the master resumes the job) before it gives up; each ask waits
 * at most WAIT_ASK_MS for the answer. */
#define WAIT_RETRY_MS 60000
#define WAIT_ASK_MS   10000

/* Whether a failed ask may succeed later: no answer at all (connection
 * refused or reset, a timeout), or a proxy's "the master is not there". */
static bool transient(int rc, long status)
{
	if (rc == -EREMOTEIO)
		return status == 502 || status == 503 || status == 504;
	return cis_rpc_unreachable(rc);
}

/* Poll the job until it ends; what is "load /data/d3" (errors then say
 * "load /data/d3 (job 26): ..."). Asks that get no answer are retried for
 * WAIT_RETRY_MS. Returns 0, -EIO when the job failed, was cancelled or
 * left files unloaded (its summary says which), or cli_api's code. */
static int wait_job(cli_ctx *c, const char *what, long long id, bool json)
{
	char q[64], jwhat[32];
	bool tty = !json && isatty(STDOUT_FILENO);
	uint64_t start = cis_mono_ms(), last_line = 0, failing_since = 0;
	long status = 0;
	cli_call call = {.method = "GET",
	                 .path = q,
	                 .timeout_ms = WAIT_ASK_MS,
	                 .quiet = true,
	                 .status = &status};
	/* No failure list while it runs (only the end prints it): a poll every
	 * 100 ms would copy and parse up to 100 records each time. */
	bool with_failures = false;
	snprintf(q, sizeof(q), "/api/v1/job?id=%lld&limit=0", id);
	/* The job in the call's message, the path (up to 4 KiB) printed
	 * beside it: in the message it would push the reason out of its
	 * 512 bytes. */
	snprintf(jwhat, sizeof(jwhat), "(job %lld)", id);
	for (;;) {
		json_t *o;
		cis_errmsg em = {{0}};
		int rc = cli_api_call(c, &call, &o, jwhat, &em);
		uint64_t now = cis_mono_ms();
		if (rc && transient(rc, status) &&
		    (!failing_since || now - failing_since < WAIT_RETRY_MS)) {
			if (!failing_since) {
				if (tty)
					printf("\n");
				fprintf(stderr, "cistern: %s %s; retrying for up to %d s\n", what,
				        em.text, WAIT_RETRY_MS / 1000);
				failing_since = now;
			}
			cis_sleep_ms(500);
			continue;
		}
		if (rc) {
			if (tty)
				printf("\n");
			fprintf(stderr, "cistern: %s %s\n", what, em.text);
			return rc;
		}
		failing_since = 0;
		json_t *j = json_object_get(o, "job");
		bool running = !strcmp(cli_jstr(j, "state"), "running");
		if (!running && !with_failures) {
			/* Ended: ask once more, for the summary's failures. */
			json_decref(o);
			with_failures = true;
			snprintf(q, sizeof(q), "/api/v1/job?id=%lld&limit=100", id);
			continue;
		}
		if (!json && (now - last_line >= (tty ? 250 : 5000) || !running)) {
			show_progress(j, (double)(now - start) / 1000.0, tty);
			last_line = now;
		}
		if (!running) {
			if (tty)
				printf("\n");
			rc = job_succeeded(j) ? 0 : -EIO;
			if (json) {
				cli_print_json(j);
			} else {
				print_summary(j);
				note_short_replicas(c, j);
				print_failures(j);
			}
			json_decref(o);
			return rc;
		}
		json_decref(o);
		cis_sleep_ms(WAIT_POLL_MS);
	}
}

static int submit(cli_ctx *c, json_t *body, const char *what, bool detach, bool json)
{
	json_t *out;
	int rc;
	if (!body) { /* the path was checked: only memory is left */
		fprintf(stderr, "cistern: %s: out of memory\n", what);
		return -ENOMEM;
	}
	rc = cli_api(c, "POST", "/api/v1/jobs", NULL, NULL, body, &out, what);
	json_decref(body);
	if (rc)
		return rc;
	json_t *jid = json_object_get(json_object_get(out, "job"), "id");
	long long id = json_is_integer(jid) ? json_integer_value(jid) : 0;
	json_decref(out);
	if (id <= 0) { /* not the master's answer: it always gives the new job's id */
		fprintf(stderr, "cistern: %s: the answer has no job id (is --api the master's?)\n",
		        what);
		return -CIS_E_PROTO;
	}
	if (detach) {
		if (json)
			printf("{\"id\": %lld}\n", id);
		else
			printf("%lld\n", id);
		return 0;
	}
	return wait_job(c, what, id, json);
}

/* Integer flag name (it has a default) in [min, max], digits only.
 * Returns 0 or CLI_E_USAGE, reported. */
static int num_flag(const cis_config *cfg, const char *cmd, const char *name, long long min,
                    long long max, long long *out)
{
	const char *v = cis_config_str(cfg, name);
	if (v && !cli_parse_num(v, min, max, out))
		return 0;
	fprintf(stderr, "cistern: %s: --%s %s: want a number in %lld..%lld\n", cmd, name,
	        v ? v : "", min, max);
	return CLI_E_USAGE;
}

int cli_cmd_load(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	char *path, what[4200];
	const char *bws;
	long long rep, par;
	uint64_t bw = 0;
	int err = 0;
	int rc = cli_parse(load_opts,
	                   "cistern load PATH [--replicas N] [--parallel N] [--bandwidth RATE] "
	                   "[--verify] [--metadata-only] [--detach] [--json]",
	                   argc, argv, &cfg);
	if (rc || !cfg)
		return rc;
	rc = cli_one_path(cfg, "load", &path, what, sizeof(what));
	if (rc)
		goto out_cfg;
	if ((rc = cli_check_path_utf8("load", path)))
		goto out_path;
	if ((rc = num_flag(cfg, "load", "replicas", 1, CIS_REPLICAS_MAX, &rep)) ||
	    (rc = num_flag(cfg, "load", "parallel", 1, CIS_PARALLEL_MAX, &par)))
		goto out_path;
	bws = cis_config_str(cfg, "bandwidth");
	/* The master takes at most 2^63 - 1 (a JSON integer); "16000P" would
	 * wrap to a negative one. */
	if (bws && (err = cis_parse_size(bws, &bw)) == 0 && bw > INT64_MAX)
		err = -ERANGE;
	if (bws && !err && bw == 0)
		err = -EDOM; /* 0 would mean no cap at all */
	if (bws && err) {
		fprintf(stderr, "cistern: load: --bandwidth %s: %s\n", bws,
		        err == -ERANGE ? "too large (at most 8191P)"
		        : err == -EDOM ? "at least 1 byte per second (leave it out for no cap)"
		                       : "not a rate in bytes per second (like 200M or 1G)");
		rc = CLI_E_USAGE;
		goto out_path;
	}
	json_t *body = json_pack(
	    "{s:s, s:s, s:I, s:I, s:I, s:b, s:b}", "type", "load", "path", path, "replicas",
	    (json_int_t)rep, "parallel", (json_int_t)par, "bandwidth", (json_int_t)bw, "verify",
	    cis_config_bool(cfg, "verify"), "metadata_only", cis_config_bool(cfg, "metadata-only"));
	rc = submit(c, body, what, cis_config_bool(cfg, "detach"), cis_config_bool(cfg, "json"));
out_path:
	free(path);
out_cfg:
	cis_config_free(cfg);
	return rc;
}

int cli_cmd_free(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	char *path, what[4200];
	int rc = cli_parse(free_opts, "cistern free PATH [--detach] [--json]", argc, argv, &cfg);
	if (rc || !cfg)
		return rc;
	rc = cli_one_path(cfg, "free", &path, what, sizeof(what));
	if (rc)
		goto out_cfg;
	if ((rc = cli_check_path_utf8("free", path)))
		goto out_path;
	json_t *body = json_pack("{s:s, s:s}", "type", "free", "path", path);
	rc = submit(c, body, what, cis_config_bool(cfg, "detach"), cis_config_bool(cfg, "json"));
out_path:
	free(path);
out_cfg:
	cis_config_free(cfg);
	return rc;
}

static void print_jobs(const json_t *o)
{
	size_t i;
	json_t *j;
	printf("%-6s %-6s %-10s %8s %8s %10s  %s\n", "ID", "TYPE", "STATE", "FILES", "FAILED",
	       "BYTES", "PATH");
	json_array_foreach(json_object_get(o, "jobs"), i, j)
	{
		const json_t *cn = json_object_get(j, "counts");
		char b[32];
		cis_fmt_size((uint64_t)cli_jint(cn, "bytes"), b, sizeof(b));
		printf("%-6lld %-6s %-10s %8lld %8lld %10s  %s\n", cli_jint(j, "id"),
		       cli_jstr(j, "type"), cli_jstr(j, "state"), cli_jint(cn, "files"),
		       cli_jint(cn, "files_failed"), b, cli_jstr(j, "path"));
	}
}

int cli_cmd_jobs(cli_ctx *c, int argc, char **argv)
{
	return cli_get_and_print(c, argc, argv, "cistern jobs [--json]", "/api/v1/jobs",
	                         print_jobs);
}

int cli_cmd_job(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	int rc = cli_parse(job_opts, "cistern job ID [--json] [--limit N] | cistern job cancel ID",
	                   argc, argv, &cfg);
	if (rc || !cfg)
		return rc;
	size_t np = cis_config_npos(cfg);
	bool cancel = np == 2 && !strcmp(cis_config_pos(cfg, 0), "cancel");
	long long id, limit;
	if (np > 2 || (np == 2 && !cancel)) {
		fprintf(stderr, "cistern: job: too many arguments (see cistern job --help)\n");
		rc = CLI_E_USAGE;
		goto out_cfg;
	}
	if (np == 0 || (np == 1 && !strcmp(cis_config_pos(cfg, 0), "cancel"))) {
		fprintf(stderr, "cistern: job: need a job ID (or: cancel ID)\n");
		rc = CLI_E_USAGE;
		goto out_cfg;
	}
	/* digits only: ids are positive integers, and a number past 2^63 is
	 * no job (strtoll made it 9223372036854775807) */
	if (cli_parse_num(cis_config_pos(cfg, np - 1), 1, INT64_MAX, &id)) {
		fprintf(stderr, "cistern: job: %s: not a job ID (digits, 1 or more)\n",
		        cis_config_pos(cfg, np - 1));
		rc = CLI_E_USAGE;
		goto out_cfg;
	}
	if ((rc = num_flag(cfg, "job", "limit", 0, 1000, &limit)))
		goto out_cfg;
	json_t *o;
	char what[64];
	snprintf(what, sizeof(what), "job %lld", id);
	if (cancel) {
		json_t *body = json_pack("{s:I}", "id", (json_int_t)id);
		rc = cli_api(c, "POST", "/api/v1/job/cancel", NULL, NULL, body, &o, what);
		json_decref(body);
		if (!rc) {
			cli_print_reply(o, cis_config_bool(cfg, "json"), "job %lld cancelled\n",
			                id);
			json_decref(o);
		}
	} else {
		char q[80];
		snprintf(q, sizeof(q), "/api/v1/job?id=%lld&limit=%lld", id, (long long)limit);
		rc = cli_api(c, "GET", q, NULL, NULL, NULL, &o, what);
		if (!rc) {
			json_t *j = json_object_get(o, "job");
			if (cis_config_bool(cfg, "json")) {
				cli_print_json(j);
			} else {
				print_summary(j);
				note_short_replicas(c, j);
				print_failures(j);
			}
			json_decref(o);
		}
	}
out_cfg:
	cis_config_free(cfg);
	return rc;
}
