/* cistern: the admin CLI. `cistern [--api HOST:PORT] COMMAND ...`; the
 * master's admin address comes from --api, else CISTERN_API, else
 * 127.0.0.1:19601. Commands live in a table; each group has its own file. */
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
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
	if (rc == 1 || rc == 2) {
		if (rc == 1)
			cis_config_usage(opts, stdout, synopsis);
		else
			cis_version_print("cistern", stdout);
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
	if (what) /* an empty path shows as '' ("ls : empty path" read as a typo) */
		snprintf(what, what_len, "%s %s", cmd, **path ? *path : "''");
	return 0;
}

int cli_one_path(const cis_config *cfg, const char *cmd, char **path, char *what, size_t what_len)
{
	*path = NULL;
	if (cis_config_npos(cfg) != 1) {
		fprintf(stderr, "cistern: %s: %s\n", cmd,
		        cis_config_npos(cfg) ? "too many arguments (one PATH)" : "need PATH");
		return CLI_E_USAGE;
	}
	return cli_path_arg(cfg, 0, cmd, path, what, what_len);
}

int cli_too_many(const cis_config *cfg, size_t max, const char *cmd)
{
	if (cis_config_npos(cfg) <= max)
		return 0;
	fprintf(stderr, "cistern: %s: too many arguments (see cistern %s --help)\n", cmd, cmd);
	return CLI_E_USAGE;
}

int cli_parse_num(const char *s, long long min, long long max, long long *out)
{
	uint64_t v;
	int rc = cis_parse_decimal(s, (uint64_t)max, &v);
	if (rc)
		return rc;
	if (v < (uint64_t)min)
		return -ERANGE;
	*out = (long long)v;
	return 0;
}

bool cli_utf8(const char *s)
{
	json_t *j = json_string(s); /* NULL for text that is not UTF-8 */
	bool ok = j != NULL;
	json_decref(j);
	return ok;
}

int cli_check_path_utf8(const char *cmd, const char *path)
{
	if (cli_utf8(path))
		return 0;
	/* The request body is JSON, which cannot carry it. */
	fprintf(stderr, "cistern: %s: %s: not valid UTF-8\n", cmd, path);
	return CLI_E_USAGE;
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

/* How much of e to skip when it starts with the n bytes at subj and ": ";
 * else 0. */
static size_t subject_len(const char *e, const char *subj, size_t n)
{
	return n && !strncmp(e, subj, n) && e[n] == ':' && e[n + 1] == ' ' ? n + 2 : 0;
}

/* How much of a master's error text to skip because it repeats what the
 * CLI puts before it ("pin /a: pin /a: ...", "ls /a: /a: ...", "load /a
 * (job 7): job 7: ..."): what itself, the argument after the command's
 * name, or what's trailing "(...)", then ": ". */
static size_t repeated_subject(const char *e, const char *what)
{
	const char *arg = strchr(what, ' ');
	const char *paren = strrchr(what, '(');
	size_t wl = strlen(what), n = subject_len(e, what, wl);
	if (!n && arg)
		n = subject_len(e, arg + 1, strlen(arg + 1));
	if (!n && paren && wl > 0 && what[wl - 1] == ')')
		n = subject_len(e, paren + 1, (size_t)(what + wl - 1 - (paren + 1)));
	return n;
}

/* An error of cli_api_call: into err when the call is quiet, else
 * "cistern: TEXT" on stderr (whole: a path may be longer than err). */
static void say(const cli_call *call, cis_errmsg *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(const cli_call *call, cis_errmsg *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (call->quiet) {
		vsnprintf(err->text, sizeof(err->text), fmt, ap);
	} else {
		fputs("cistern: ", stderr);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
}

int cli_api_call(cli_ctx *c, const cli_call *call, json_t **out, const char *what, cis_errmsg *err)
{
	char *url = NULL;
	cis_errmsg em = {{0}};
	long status = 0;
	int rc;
	*out = NULL;
	if (call->query_path && path_query(call->path, call->query_path, call->extra_query, &url)) {
		say(call, err, "%s: out of memory", what);
		return -ENOMEM;
	}
	rc = cis_http_call(c->base, call->method, url ? url : call->path, call->body,
	                   call->timeout_ms ? call->timeout_ms : 120000, &status, out, &em);
	if (rc) {
		say(call, err, "%s: %s", what, cis_errmsg_or(&em, rc));
		/* a transport failure, never a usage error */
		rc = rc == CLI_E_USAGE ? -CIS_E_INTERNAL : rc;
	} else if (status < 200 || status > 299) {
		const char *e = *out ? json_string_value(json_object_get(*out, "error")) : NULL;
		if (e)
			say(call, err, "%s: %s", what, e + repeated_subject(e, what));
		else /* not the master, or a proxy between */
			say(call, err, "%s: unexpected reply from master (HTTP %ld to %s %s: %s)",
			    what, status, call->method, url ? url : call->path,
			    *out ? "no error text" : "not json");
		json_decref(*out);
		*out = NULL;
		rc = -EREMOTEIO; /* the master said no */
	} else if (!*out) {
		say(call, err, "%s: the master's reply was not json", what);
		rc = -CIS_E_PARSE;
	}
	if (call->status)
		*call->status = status;
	free(url);
	return rc;
}

int cli_api(cli_ctx *c, const char *method, const char *path, const char *query_path,
            const char *extra_query, const json_t *body, json_t **out, const char *what)
{
	cis_errmsg em = {{0}};
	cli_call call = {.method = method,
	                 .path = path,
	                 .query_path = query_path,
	                 .extra_query = extra_query,
	                 .body = body};
	return cli_api_call(c, &call, out, what, &em);
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
	rc = cli_too_many(cfg, 0, argv[0]);
	if (!rc)
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
	const char *api = getenv("CISTERN_API"), *api_flag = NULL;
	int i = 1;
	cli_guard_terminal();
	cis_log_init("cistern", CIS_LOG_WARN);
	while (i < argc && argv[i][0] == '-') {
		if (!strcmp(argv[i], "--api") && i + 1 < argc) {
			api_flag = argv[i + 1];
			i += 2;
		} else if (!strcmp(argv[i], "--api")) {
			fprintf(stderr, "cistern: --api: needs HOST:PORT\n");
			return 2;
		} else if (!strncmp(argv[i], "--api=", 6)) {
			api_flag = argv[i] + 6;
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
	if (api_flag && !*api_flag) { /* "--api=": a mistake, not the default */
		fprintf(stderr, "cistern: --api: empty address (want HOST:PORT)\n");
		return 2;
	}
	if (api_flag)
		api = api_flag;
	if (!api || !*api) /* CISTERN_API unset or empty */
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
