/* The cistern CLI: shared helpers for the command files (cmd_*.c). Each
 * command gets argv starting at its own name, prints human-readable output
 * (or JSON with --json) and returns 0 or a negative code; main() turns that
 * into the exit status (cli_exit_status). */
#ifndef CISTERN_CLI_H
#define CISTERN_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "cistern/config.h"
#include "cistern/error.h"

/* A usage error (bad flag or arguments), already reported: exit status 2.
 * Every other negative code is exit status 1. Commands must not pass a
 * lower layer's -CIS_E_CONFIG through when it is not a usage error. */
#define CLI_E_USAGE (-CIS_E_CONFIG)

typedef struct cli_ctx {
	char base[300]; /* "http://127.0.0.1:19601" */
} cli_ctx;

typedef struct cli_cmd {
	const char *name;
	const char *summary;
	int (*fn)(cli_ctx *c, int argc, char **argv);
} cli_cmd;

/* The option table of a command whose only flag is --json. */
extern const cis_opt cli_json_opts[];

/* The process exit status for a command's result: 0 for 0, 2 for
 * CLI_E_USAGE, 1 for any other negative code. */
int cli_exit_status(int rc);

/* Parse a command's flags (--help and --version are handled here). Returns
 * 0 with *cfg (the caller frees it) when the command should go on; 0 with
 * *cfg NULL after --help printed the usage or --version the release, when
 * the command is done; CLI_E_USAGE,
 * *cfg NULL, after printing a usage error. Callers:
 *	if ((rc = cli_parse(...)) || !cfg) return rc; */
int cli_parse(const cis_opt *opts, const char *synopsis, int argc, char **argv, cis_config **cfg);

/* Copy positional argument idx of cfg into *path (the caller frees it),
 * trailing slashes stripped, and, if what is not NULL, write "CMD PATH"
 * there for messages. Returns 0, or -ENOMEM after printing the error. */
int cli_path_arg(const cis_config *cfg, size_t idx, const char *cmd, char **path, char *what,
                 size_t what_len);

/* cli_path_arg for a command that takes exactly one PATH; CLI_E_USAGE,
 * *path NULL, after "cistern: CMD: need PATH" (or "too many arguments")
 * when it got another count. */
int cli_one_path(const cis_config *cfg, const char *cmd, char **path, char *what, size_t what_len);

/* 0 when cfg has at most max positional arguments, else CLI_E_USAGE after
 * "cistern: CMD: too many arguments". */
int cli_too_many(const cis_config *cfg, size_t max, const char *cmd);

/* s as a number in [min, max]: decimal digits only (no sign, space or
 * unit). 0, -EINVAL (not digits) or -ERANGE; nothing is printed. */
int cli_parse_num(const char *s, long long min, long long max, long long *out);

/* Whether s is valid UTF-8 (and so can be a JSON string). */
bool cli_utf8(const char *s);

/* 0 when path can travel in a JSON request body; CLI_E_USAGE after
 * "cistern: CMD: PATH: not valid UTF-8" when it cannot. */
int cli_check_path_utf8(const char *cmd, const char *path);

/* Call the admin API: method on path, with ?path=QUERY_PATH (escaped) and
 * &EXTRA_QUERY appended when given. On success (2xx) returns 0 with *out
 * the body (the caller's). On failure prints "cistern: WHAT: ERROR" (ERROR
 * without a "WHAT: " or "PATH: " it may start with, said once is enough)
 * and returns a negative code (never CLI_E_USAGE), *out NULL. */
int cli_api(cli_ctx *c, const char *method, const char *path, const char *query_path,
            const char *extra_query, const json_t *body, json_t **out, const char *what);

/* cli_api with every knob. */
typedef struct cli_call {
	const char *method, *path, *query_path, *extra_query;
	const json_t *body;
	int timeout_ms; /* 0: 120 s */
	bool quiet;     /* the error goes into err, not to stderr */
	long *status;   /* if set, the HTTP status (0 when there was no reply) */
} cli_call;

/* As cli_api; with call->quiet the error ("WHAT: ERROR", without
 * "cistern: ") is put in err instead of printed. A transport failure (no
 * reply) returns the code of cis_http_call: -ECONNREFUSED, -ETIMEDOUT,
 * -EHOSTUNREACH or -CIS_E_CLOSED. */
int cli_api_call(cli_ctx *c, const cli_call *call, json_t **out, const char *what, cis_errmsg *err);

/* Print j as indented JSON if json, else the formatted line. */
void cli_print_reply(const json_t *j, bool json, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void cli_print_json(const json_t *j);
/* The whole of a command that takes only --json: GET api_path, then print
 * the reply as JSON or through print. Errors name the command (argv[0]).
 * Returns as a command does. */
int cli_get_and_print(cli_ctx *c, int argc, char **argv, const char *synopsis, const char *api_path,
                      void (*print)(const json_t *reply));
/* "2026-11-22 14:10" in local time. */
void cli_fmt_time(int64_t ns, char *out, size_t len);
/* Strip trailing slashes in place ("/a/" -> "/a", "/" stays). */
void cli_trim_path(char *p);
/* Member k of o as an integer (0 if missing) or a string ("" if missing). */
long long cli_jint(const json_t *o, const char *k);
const char *cli_jstr(const json_t *o, const char *k);
/* On a terminal, stdout and stderr show control characters as \xNN from
 * now on (tty.c): what the stores and workers name reaches the admin's
 * screen as text, never as terminal commands. */
void cli_guard_terminal(void);
/* A name (of an entry in the store) for a line of its own on a terminal:
 * its newlines and tabs too as \xNN, lest one name read as two; as it is
 * through a pipe. Valid until the second call after. */
const char *cli_name_shown(const char *name);

/* Put connector option KEY=VALUE (arg, with eq at its '=') into opts, the
 * value val; flag ("--option", "-o") names it in messages, which never
 * show the value: it may be a secret. 0, or CLI_E_USAGE after saying what
 * is wrong (a key too long, text JSON cannot carry), or -ENOMEM. */
int cli_put_option(json_t *opts, const char *what, const char *flag, const char *arg,
                   const char *eq, const char *val);
/* A mount's sync interval and block size checked as the master would, so
 * a typo is a usage error that names flag: 0, or CLI_E_USAGE after saying
 * what is wrong. */
int cli_check_sync_interval(const char *what, const char *flag, const char *si);
int cli_check_block_size(const char *what, const char *flag, const char *bs);

int cli_cmd_mount(cli_ctx *c, int argc, char **argv);
int cli_cmd_unmount(cli_ctx *c, int argc, char **argv);
int cli_cmd_mounts(cli_ctx *c, int argc, char **argv);
int cli_cmd_ls(cli_ctx *c, int argc, char **argv);
int cli_cmd_stat(cli_ctx *c, int argc, char **argv);
int cli_cmd_sync(cli_ctx *c, int argc, char **argv);
int cli_cmd_report(cli_ctx *c, int argc, char **argv);
int cli_cmd_workers(cli_ctx *c, int argc, char **argv);
int cli_cmd_local(cli_ctx *c, int argc, char **argv);
int cli_cmd_load(cli_ctx *c, int argc, char **argv);
int cli_cmd_free(cli_ctx *c, int argc, char **argv);
int cli_cmd_jobs(cli_ctx *c, int argc, char **argv);
int cli_cmd_job(cli_ctx *c, int argc, char **argv);
int cli_cmd_setrep(cli_ctx *c, int argc, char **argv);
int cli_cmd_pin(cli_ctx *c, int argc, char **argv);
int cli_cmd_unpin(cli_ctx *c, int argc, char **argv);
int cli_cmd_ttl(cli_ctx *c, int argc, char **argv);

#endif
