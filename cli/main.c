/* cistern: the admin CLI. `cistern [--api HOST:PORT] COMMAND ...`; the
 * master's admin address comes from --api, else CISTERN_API, else
 * 127.0.0.1:19601. Commands live in a table; each group has its own file. */
#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cistern/http.h"
#include "cistern/log.h"
#include "cistern/version.h"
#include "cli.h"

static const cli_cmd commands[] = {
    {"mount", "mount a store at a cistern path", cli_cmd_mount},
    {"unmount", "remove a mount", cli_cmd_unmount},
    {"mounts", "list the mount table", cli_cmd_mounts},
    {"ls", "list a directory", cli_cmd_ls},
    {"stat", "show one file or directory", cli_cmd_stat},
    {"sync", "re-list a directory from its store now", cli_cmd_sync},
    {"report", "cluster summary", cli_cmd_report},
    {"workers", "list live workers", cli_cmd_workers},
    {"load", "preload a path into the cache (a job)", cli_cmd_load},
    {"free", "drop a path's blocks from every worker", cli_cmd_free},
    {"jobs", "list jobs", cli_cmd_jobs},
    {"job", "show a job, or cancel it (job cancel ID)", cli_cmd_job},
    {"setrep", "set a path's replication target", cli_cmd_setrep},
    {"pin", "keep a path's blocks from eviction", cli_cmd_pin},
    {"unpin", "let a path's blocks be evicted again", cli_cmd_unpin},
    {"ttl", "free a path's blocks SECONDS after they are loaded", cli_cmd_ttl},
    {"local", "run master, worker and FUSE client here; mount a store", cli_cmd_local},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: cistern [--api HOST:PORT] COMMAND [ARGS]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n'cistern COMMAND --help' for a command's flags; 'cistern --version' the "
	           "release. The master's admin API "
	           "address is --api, CISTERN_API or 127.0.0.1:19601.\n");
}

const cis_opt cli_json_opts[] = {
    {"json", NULL, NULL, "print JSON", false, 0},
    CIS_OPT_END,
};

int cli_exit_status(int rc)
{
	if (!rc)
		return 0;
	return rc == CLI_E_USAGE ? 2 : 1;
}

int cli_parse(const cis_opt *opts, const char *synopsis, int argc, char **argv, cis_config **cfg)
{
	cis_errmsg em = {{0}};
	int rc = cis_config_load(cfg, opts, NULL, argc, argv, 1, &em);
	if (rc == 1) {
		cis_config_usage(opts, stdout, synopsis);
		cis_config_free(*cfg);
		*cfg = NULL;
		return 0;
	}
	if (rc) {
		fprintf(stderr, "cistern: %s: %s\n", argv[0], cis_errmsg_or(&em, rc));
		*cfg = NULL;
		return CLI_E_USAGE;
	}
	return 0;
}

void cli_trim_path(char *p)
{
	size_t l = strlen(p);
	while (l > 1 && p[l - 1] == '/')
		p[--l] = 0;
}

int cli_path_arg(const cis_config *cfg, size_t idx, const char *cmd, char **path, char *what,
                 size_t what_len)
{
	*path = strdup(cis_config_pos(cfg, idx));
	if (!*path) {
		fprintf(stderr, "cistern: %s: out of memory\n", cmd);
		return -ENOMEM;
	}
	cli_trim_path(*path);
	if (what)
		snprintf(what, what_len, "%s %s", cmd, *path);
	return 0;
}

int cli_one_path(const cis_config *cfg, const char *cmd, char **path, char *what, size_t what_len)
{
	*path = NULL;
	if (cis_config_npos(cfg) != 1) {
		fprintf(stderr, "cistern: %s: need PATH\n", cmd);
		return CLI_E_USAGE;
	}
	return cli_path_arg(cfg, 0, cmd, path, what, what_len);
}

/* path?path=ESCAPED[&extra] in *url (the caller frees it); 0 or -ENOMEM. */
static int path_query(const char *path, const char *query_path, const char *extra, char **url)
{
	char *esc = curl_easy_escape(NULL, query_path, (int)strlen(query_path));
	int rc = 0;
	if (!esc ||
	    asprintf(url, "%s?path=%s%s%s", path, esc, extra ? "&" : "", extra ? extra : "") < 0) {
		*url = NULL;
		rc = -ENOMEM;
	}
	curl_free(esc);
	return rc;
}

int cli_api(cli_ctx *c, const char *method, const char *path, const char *query_path,
            const char *extra_query, const json_t *body, json_t **out, const char *what)
{
	char *url = NULL;
	cis_errmsg em = {{0}};
	long status = 0;
	int rc;
	*out = NULL;
	if (query_path && path_query(path, query_path, extra_query, &url)) {
		fprintf(stderr, "cistern: %s: out of memory\n", what);
		return -ENOMEM;
	}
	rc = cis_http_call(c->base, method, url ? url : path, body, 120000, &status, out, &em);
	free(url);
	if (rc) {
		fprintf(stderr, "cistern: %s: %s\n", what, cis_errmsg_or(&em, rc));
		/* a transport failure, never a usage error */
		return rc == CLI_E_USAGE ? -CIS_E_INTERNAL : rc;
	}
	if (status < 200 || status > 299) {
		const char *e = *out ? json_string_value(json_object_get(*out, "error")) : NULL;
		fprintf(stderr, "cistern: %s: %s\n", what, e ? e : "unexpected reply from master");
		json_decref(*out);
		*out = NULL;
		return -EREMOTEIO; /* the master said no */
	}
	if (!*out) {
		fprintf(stderr, "cistern: %s: the master's reply was not json\n", what);
		return -CIS_E_PARSE;
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

void cli_print_reply(const json_t *j, bool json, const char *fmt, ...)
{
	va_list ap;
	if (json) {
		cli_print_json(j);
		return;
	}
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
}

int cli_get_and_print(cli_ctx *c, int argc, char **argv, const char *synopsis, const char *api_path,
                      void (*print)(const json_t *reply))
{
	cis_config *cfg;
	json_t *out;
	int rc = cli_parse(cli_json_opts, synopsis, argc, argv, &cfg);
	if (rc || !cfg)
		return rc;
	rc = cli_api(c, "GET", api_path, NULL, NULL, NULL, &out, argv[0]);
	if (!rc) {
		if (cis_config_bool(cfg, "json"))
			cli_print_json(out);
		else
			print(out);
		json_decref(out);
	}
	cis_config_free(cfg);
	return rc;
}

void cli_fmt_time(int64_t ns, char *out, size_t len)
{
	time_t t = (time_t)(ns / 1000000000);
	struct tm tm;
	if (ns <= 0 || !localtime_r(&t, &tm) || !strftime(out, len, "%Y-%m-%d %H:%M", &tm))
		snprintf(out, len, "-");
}

long long cli_jint(const json_t *o, const char *k)
{
	return (long long)json_integer_value(json_object_get(o, k));
}

const char *cli_jstr(const json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
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
		} else if (!strcmp(argv[i], "--version")) {
			cis_version_print("cistern", stdout);
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
	for (size_t n = strlen(c.base); n > 0 && c.base[n - 1] == '/';)
		c.base[--n] = 0; /* "http://host:port/" + "/api/v1/..." */
	curl_global_init(CURL_GLOBAL_DEFAULT);
	for (size_t k = 0; k < sizeof(commands) / sizeof(commands[0]); k++)
		if (!strcmp(commands[k].name, argv[i])) {
			int rc = commands[k].fn(&c, argc - i, argv + i);
			curl_global_cleanup();
			return cli_exit_status(rc);
		}
	fprintf(stderr, "cistern: unknown command '%s' (see cistern --help)\n", argv[i]);
	return 2;
}
