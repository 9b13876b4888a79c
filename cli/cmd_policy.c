/* cistern setrep / pin / unpin / ttl: per-path policies on the master,
 * inherited by everything below the path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const cis_opt setrep_opts[] = {
    {"recursive", NULL, NULL, "also drop targets set below PATH, so all of it follows", false, 'R'},
    {"json", NULL, NULL, "print JSON", false, 0},
    CIS_OPT_END,
};

static const cis_opt plain_opts[] = {
    {"json", NULL, NULL, "print JSON", false, 0},
    CIS_OPT_END,
};

static int post_policy(cli_ctx *c, cis_config *cfg, json_t *body, const char *what)
{
	json_t *out;
	int rc = cli_api(c, "POST", "/api/v1/policy", NULL, NULL, body, &out, what);
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

static char *one_path(cis_config *cfg, size_t want, const char *cmd)
{
	if (cis_config_npos(cfg) != want) {
		fprintf(stderr, "cistern: %s: wrong arguments (see cistern %s --help)\n", cmd, cmd);
		return NULL;
	}
	char *p = strdup(cis_config_pos(cfg, 0));
	if (p)
		cli_trim_path(p);
	return p;
}

int cmd_setrep(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	int rc = cli_parse(setrep_opts, "cistern setrep PATH N [-R]", argc, argv, &cfg);
	if (rc >= 0)
		return rc;
	char *path = one_path(cfg, 2, "setrep"), *end;
	long long n = path ? strtoll(cis_config_pos(cfg, 1), &end, 10) : 0;
	if (!path || *end || n < 1 || n > 64) {
		if (path)
			fprintf(stderr, "cistern: setrep: N must be 1..64\n");
		free(path);
		cis_config_free(cfg);
		return 2;
	}
	char what[4200];
	snprintf(what, sizeof(what), "setrep %s", path);
	rc = post_policy(c, cfg,
	                 json_pack("{s:s, s:I, s:b}", "path", path, "replicas", (json_int_t)n,
	                           "recursive", cis_config_bool(cfg, "recursive")),
	                 what);
	free(path);
	cis_config_free(cfg);
	return rc;
}

static int pin_common(cli_ctx *c, int argc, char **argv, bool pin)
{
	cis_config *cfg;
	const char *cmd = pin ? "pin" : "unpin";
	int rc = cli_parse(plain_opts, pin ? "cistern pin PATH" : "cistern unpin PATH", argc, argv,
	                   &cfg);
	if (rc >= 0)
		return rc;
	char *path = one_path(cfg, 1, cmd);
	if (!path) {
		cis_config_free(cfg);
		return 2;
	}
	char what[4200];
	snprintf(what, sizeof(what), "%s %s", cmd, path);
	rc = post_policy(c, cfg, json_pack("{s:s, s:b}", "path", path, "pin", pin), what);
	free(path);
	cis_config_free(cfg);
	return rc;
}

int cmd_pin(cli_ctx *c, int argc, char **argv)
{
	return pin_common(c, argc, argv, true);
}

int cmd_unpin(cli_ctx *c, int argc, char **argv)
{
	return pin_common(c, argc, argv, false);
}

int cmd_ttl(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	int rc = cli_parse(plain_opts, "cistern ttl PATH SECONDS|off", argc, argv, &cfg);
	if (rc >= 0)
		return rc;
	char *path = one_path(cfg, 2, "ttl"), *end = NULL;
	const char *v = path ? cis_config_pos(cfg, 1) : "";
	bool off = !strcmp(v, "off");
	long long n = off ? 0 : strtoll(v, &end, 10);
	if (!path || (!off && (*end || n < 1))) {
		if (path)
			fprintf(stderr, "cistern: ttl: want SECONDS (> 0) or off\n");
		free(path);
		cis_config_free(cfg);
		return 2;
	}
	char what[4200];
	snprintf(what, sizeof(what), "ttl %s", path);
	json_t *body = off ? json_pack("{s:s, s:s}", "path", path, "ttl", "off")
	                   : json_pack("{s:s, s:I}", "path", path, "ttl", (json_int_t)n);
	rc = post_policy(c, cfg, body, what);
	free(path);
	cis_config_free(cfg);
	return rc;
}
