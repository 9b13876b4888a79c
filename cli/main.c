/* cistern: the admin CLI. `cistern [--api HOST:PORT] COMMAND ...`; the
 * master's admin address comes from --api, else CISTERN_API, else
 * 127.0.0.1:19601. Commands live in a table; each group has its own file. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cistern/http.h"
#include "cistern/log.h"
#include "cli.h"

static const cli_cmd commands[] = {
    {"mount", "mount a store at a cistern path", cmd_mount},
    {"unmount", "remove a mount", cmd_unmount},
    {"mounts", "list the mount table", cmd_mounts},
    {"ls", "list a directory", cmd_ls},
    {"stat", "show one file or directory", cmd_stat},
    {"sync", "re-list a directory from its store now", cmd_sync},
    {"report", "cluster summary", cmd_report},
    {"workers", "list live workers", cmd_workers},
    {"load", "preload a path into the cache (a job)", cmd_load},
    {"free", "drop a path's blocks from every worker", cmd_free},
    {"jobs", "list jobs", cmd_jobs},
    {"job", "show a job, or cancel it (job cancel ID)", cmd_job},
    {"setrep", "set a path's replication target", cmd_setrep},
    {"pin", "keep a path's blocks from eviction", cmd_pin},
    {"unpin", "let a path's blocks be evicted again", cmd_unpin},
    {"ttl", "free a path's blocks SECONDS after they are loaded", cmd_ttl},
    {"local", "run master, worker and FUSE client here; mount a store", cmd_local},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: cistern [--api HOST:PORT] COMMAND [ARGS]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n'cistern COMMAND --help' for a command's flags. The master's admin API "
	           "address is --api, CISTERN_API or 127.0.0.1:19601.\n");
}

int cli_parse(const cis_opt *opts, const char *synopsis, int argc, char **argv, cis_config **cfg)
{
	cis_errmsg em = {{0}};
	int rc = cis_config_load(cfg, opts, NULL, argc, argv, 1, &em);
	if (rc == 1) {
		cis_config_usage(opts, stdout, synopsis);
		cis_config_free(*cfg);
		return 0;
	}
	if (rc) {
		fprintf(stderr, "cistern: %s: %s\n", argv[0], cis_errmsg_or(&em, rc));
		return 2;
	}
	return -1; /* go on */
}

void cli_trim_path(char *p)
{
	size_t l = strlen(p);
	while (l > 1 && p[l - 1] == '/')
		p[--l] = 0;
}

int cli_api(cli_ctx *c, const char *method, const char *path, const char *query_path,
            const char *extra_query, const json_t *body, json_t **out, const char *what)
{
	char *url = NULL;
	cis_errmsg em = {{0}};
	long status = 0;
	*out = NULL;
	if (query_path) {
		char *esc = curl_easy_escape(NULL, query_path, (int)strlen(query_path));
		if (!esc || asprintf(&url, "%s?path=%s%s%s", path, esc, extra_query ? "&" : "",
		                     extra_query ? extra_query : "") < 0) {
			curl_free(esc);
			fprintf(stderr, "cistern: %s: out of memory\n", what);
			return 1;
		}
		curl_free(esc);
	}
	int rc = cis_http_call(c->base, method, url ? url : path, body, 120000, &status, out, &em);
	free(url);
	if (rc) {
		fprintf(stderr, "cistern: %s: %s\n", what, cis_errmsg_or(&em, rc));
		return 1;
	}
	if (status < 200 || status > 299) {
		const char *e = *out ? json_string_value(json_object_get(*out, "error")) : NULL;
		fprintf(stderr, "cistern: %s: %s\n", what, e ? e : "unexpected reply from master");
		json_decref(*out);
		*out = NULL;
		return 1;
	}
	if (!*out) {
		fprintf(stderr, "cistern: %s: the master's reply was not json\n", what);
		return 1;
	}
	return 0;
}

void cli_print_json(const json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (s)
		puts(s);
	free(s);
}

void cli_fmt_time(int64_t ns, char *out, size_t len)
{
	time_t t = (time_t)(ns / 1000000000);
	struct tm tm;
	if (ns <= 0 || !localtime_r(&t, &tm) || !strftime(out, len, "%Y-%m-%d %H:%M", &tm))
		snprintf(out, len, "-");
}

int main(int argc, char **argv)
{
	cli_ctx c;
	const char *api = getenv("CISTERN_API");
	int i = 1;
	cis_log_init("cistern", CIS_LOG_WARN);
	while (i < argc && argv[i][0] == '-') {
		if (!strcmp(argv[i], "--api") && i + 1 < argc) {
			api = argv[i + 1];
			i += 2;
		} else if (!strncmp(argv[i], "--api=", 6)) {
			api = argv[i] + 6;
			i++;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "cistern: unknown flag '%s'\n", argv[i]);
			return 2;
		}
	}
	if (i == argc) {
		usage(stderr);
		return 2;
	}
	if (!api || !*api)
		api = "127.0.0.1:19601";
	snprintf(c.base, sizeof(c.base), "%s%s", strncmp(api, "http", 4) ? "http://" : "", api);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	for (size_t k = 0; k < sizeof(commands) / sizeof(commands[0]); k++)
		if (!strcmp(commands[k].name, argv[i])) {
			int rc = commands[k].fn(&c, argc - i, argv + i);
			curl_global_cleanup();
			return rc;
		}
	fprintf(stderr, "cistern: unknown command '%s' (see cistern --help)\n", argv[i]);
	return 2;
}
