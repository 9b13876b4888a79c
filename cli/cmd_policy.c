/* cistern setrep / pin / unpin / ttl: per-path policies on the master,
 * inherited by everything below the path. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const cis_opt setrep_opts[] = {
    {"recursive", NULL, NULL, "also drop targets set below PATH, so all of it follows", false, 'R'},
    {"json", NULL, NULL, "print JSON", false, 0},
    CIS_OPT_END,
};

static int post_policy(cli_ctx *c, cis_config *cfg, json_t *body, const char *what)
{
	json_t *out;
	int rc;
	if (!body) { /* the path was checked: only memory is left */
		fprintf(stderr, "cistern: %s: out of memory\n", what);
		return -ENOMEM;
	}
	rc = cli_api(c, "POST", "/api/v1/policy", NULL, NULL, body, &out, what);
	json_decref(body);
	if (rc)
		return rc;
	if (cis_config_bool(cfg, "json")) {
		cli_print_json(out);
	} else {
		json_t *p = json_object_get(out, "policy");
		json_t *r = json_object_get(p, "replicas"), *t = json_object_get(p, "ttl");
		char ttl[32] = "off";
		if (json_is_integer(t))
			snprintf(ttl, sizeof(ttl), "%llds", (long long)json_integer_value(t));
		printf("%s: replicas %lld, %s, ttl %s",
		       json_string_value(json_object_get(out, "path")),
		       json_is_integer(r) ? (long long)json_integer_value(r) : 1LL,
		       json_is_true(json_object_get(p, "pin")) ? "pinned" : "not pinned", ttl);
		if (json_is_integer(json_object_get(out, "job")))
			printf(" (job %lld)",
			       (long long)json_integer_value(json_object_get(out, "job")));
		printf("\n");
	}
	json_decref(out);
	return 0;
}

/* PATH (the first of want positional arguments) in *path and "CMD PATH" in
 * what; PATH goes in a JSON body, so it must be UTF-8. Returns 0,
 * CLI_E_USAGE or -ENOMEM, each failure reported. */
static int one_path(const cis_config *cfg, size_t want, const char *cmd, char **path, char *what,
                    size_t what_len)
{
	int rc;
	*path = NULL;
	if (cis_config_npos(cfg) != want) {
		fprintf(stderr, "cistern: %s: %s (see cistern %s --help)\n", cmd,
		        cis_config_npos(cfg) > want ? "too many arguments" : "wrong arguments",
		        cmd);
		return CLI_E_USAGE;
	}
	rc = cli_path_arg(cfg, 0, cmd, path, what, what_len);
	if (!rc && (rc = cli_check_path_utf8(cmd, *path))) {
		free(*path);
		*path = NULL;
	}
	return rc;
}

int cli_cmd_setrep(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	char *path, what[4200];
	long long n;
	int rc = cli_parse(setrep_opts, "cistern setrep PATH N [-R]", argc, argv, &cfg);
	if (rc || !cfg)
		return rc;
	rc = one_path(cfg, 2, "setrep", &path, what, sizeof(what));
	if (rc)
		goto out_cfg;
	if (cli_parse_num(cis_config_pos(cfg, 1), 1, CIS_REPLICAS_MAX, &n)) {
		fprintf(stderr, "cistern: setrep: N must be 1..%d\n", CIS_REPLICAS_MAX);
		rc = CLI_E_USAGE;
		goto out_path;
	}
	rc = post_policy(c, cfg,
	                 json_pack("{s:s, s:I, s:b}", "path", path, "replicas", (json_int_t)n,
	                           "recursive", cis_config_bool(cfg, "recursive")),
	                 what);
out_path:
	free(path);
out_cfg:
	cis_config_free(cfg);
	return rc;
}

static int pin_common(cli_ctx *c, int argc, char **argv, bool pin)
{
	cis_config *cfg;
	const char *cmd = pin ? "pin" : "unpin";
	char *path, what[4200];
	int rc = cli_parse(cli_json_opts, pin ? "cistern pin PATH" : "cistern unpin PATH", argc,
	                   argv, &cfg);
	if (rc || !cfg)
		return rc;
	rc = one_path(cfg, 1, cmd, &path, what, sizeof(what));
	if (!rc)
		rc = post_policy(c, cfg, json_pack("{s:s, s:b}", "path", path, "pin", pin), what);
	free(path);
	cis_config_free(cfg);
	return rc;
}

int cli_cmd_pin(cli_ctx *c, int argc, char **argv)
{
	return pin_common(c, argc, argv, true);
}

int cli_cmd_unpin(cli_ctx *c, int argc, char **argv)
{
	return pin_common(c, argc, argv, false);
}

int cli_cmd_ttl(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	char *path, what[4200];
	long long n = 0;
	int rc = cli_parse(cli_json_opts, "cistern ttl PATH SECONDS|off", argc, argv, &cfg);
	if (rc || !cfg)
		return rc;
	rc = one_path(cfg, 2, "ttl", &path, what, sizeof(what));
	if (rc)
		goto out_cfg;
	const char *v = cis_config_pos(cfg, 1);
	bool off = !strcmp(v, "off");
	if (!off && cli_parse_num(v, 1, CIS_TTL_MAX_S, &n)) {
		fprintf(stderr,
		        "cistern: ttl: %s: want SECONDS (digits, 1 to %lld: 100 years) or off\n", v,
		        (long long)CIS_TTL_MAX_S);
		rc = CLI_E_USAGE;
		goto out_path;
	}
	json_t *body = off ? json_pack("{s:s, s:s}", "path", path, "ttl", "off")
	                   : json_pack("{s:s, s:I}", "path", path, "ttl", (json_int_t)n);
	rc = post_policy(c, cfg, body, what);
out_path:
	free(path);
out_cfg:
	cis_config_free(cfg);
	return rc;
}
