/* The cistern CLI: shared helpers for the command files (cmd_*.c). Each
 * command gets argv starting at its own name, prints human-readable output
 * (or JSON with --json) and returns the process exit status. */
#ifndef CISTERN_CLI_H
#define CISTERN_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "cistern/config.h"

typedef struct cli_ctx {
	char base[300]; /* "http://127.0.0.1:19601" */
} cli_ctx;

typedef struct cli_cmd {
	const char *name;
	const char *summary;
	int (*fn)(cli_ctx *c, int argc, char **argv);
} cli_cmd;

/* Parse a command's flags (opts gains --json and --help handling by the
 * caller). Returns 0 and *cfg, or the exit status to return at once (0
 * after --help, 2 on a usage error). */
int cli_parse(const cis_opt *opts, const char *synopsis, int argc, char **argv, cis_config **cfg);
/* Call the admin API. On success (2xx) returns 0 with *out the body. On
 * failure prints "cistern: WHAT: ERROR" and returns 1. */
int cli_api(cli_ctx *c, const char *method, const char *path, const char *query_path,
            const char *extra_query, const json_t *body, json_t **out, const char *what);
void cli_print_json(const json_t *j);
/* "2026-11-22 14:10" in local time. */
void cli_fmt_time(int64_t ns, char *out, size_t len);
/* Strip trailing slashes in place ("/a/" -> "/a", "/" stays). */
void cli_trim_path(char *p);

int cmd_mount(cli_ctx *c, int argc, char **argv);
int cmd_unmount(cli_ctx *c, int argc, char **argv);
int cmd_mounts(cli_ctx *c, int argc, char **argv);
int cmd_ls(cli_ctx *c, int argc, char **argv);
int cmd_stat(cli_ctx *c, int argc, char **argv);
int cmd_sync(cli_ctx *c, int argc, char **argv);
int cmd_report(cli_ctx *c, int argc, char **argv);
int cmd_workers(cli_ctx *c, int argc, char **argv);
int cmd_local(cli_ctx *c, int argc, char **argv);
int cmd_load(cli_ctx *c, int argc, char **argv);
int cmd_free(cli_ctx *c, int argc, char **argv);
int cmd_jobs(cli_ctx *c, int argc, char **argv);
int cmd_job(cli_ctx *c, int argc, char **argv);
int cmd_setrep(cli_ctx *c, int argc, char **argv);
int cmd_pin(cli_ctx *c, int argc, char **argv);
int cmd_unpin(cli_ctx *c, int argc, char **argv);
int cmd_ttl(cli_ctx *c, int argc, char **argv);

#endif
