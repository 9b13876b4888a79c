/* cistern mount / unmount / mounts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/kv.h"
#include "cli.h"

static const cis_opt mount_opts[] = {
    {"option", "KEY=VALUE", NULL, "connector option (endpoint, region, access_key, ...)", true,
     'o'},
    {"option-env", "KEY=VAR", NULL,
     "connector option whose value is in environment variable VAR (credentials stay out of "
     "the command line)",
     true, 0},
    {"readonly", NULL, NULL, "mount read-only", false, 0},
    {"sync-interval", "DURATION", NULL, "re-list directories older than this (300, 5m)", false, 0},
    {"block-size", "SIZE", NULL, "block size (default 4M)", false, 0},
    {"json", NULL, NULL, "print JSON", false, 0},
    CIS_OPT_END,
};

int cli_cmd_mount(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	json_t *opts, *body, *out;
	const char *const *vals;
	char *path, what[600];
	int rc = cli_parse(
	    mount_opts,
	    "cistern mount PATH URI [--option K=V]... [--option-env K=VAR]... [--readonly]", argc,
	    argv, &cfg);
	if (rc || !cfg)
		return rc;
	if (cis_config_npos(cfg) != 2) {
		fprintf(stderr, "cistern: mount: need PATH and URI (see cistern mount --help)\n");
		rc = CLI_E_USAGE;
		goto out_cfg;
	}
	rc = cli_path_arg(cfg, 0, "mount", &path, what, sizeof(what));
	if (rc)
		goto out_cfg;
	opts = json_object();
	size_t n = cis_config_multi(cfg, "option", &vals);
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(vals[i], '=');
		if (!eq || eq == vals[i]) {
			/* never echo the value: it may be a secret */
			fprintf(stderr, "cistern: %s: --option needs KEY=VALUE\n", what);
			rc = CLI_E_USAGE;
			goto out_opts;
		}
		char key[128];
		snprintf(key, sizeof(key), "%.*s", (int)(eq - vals[i]), vals[i]);
		json_object_set_new(opts, key, json_string(eq + 1));
	}
	n = cis_config_multi(cfg, "option-env", &vals);
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(vals[i], '=');
		const char *v = eq && eq != vals[i] && eq[1] ? getenv(eq + 1) : NULL;
		if (!v) {
			fprintf(stderr, "cistern: %s: --option-env %s: %s\n", what, vals[i],
			        eq && eq != vals[i] && eq[1] ? "no such environment variable"
			                                     : "needs KEY=VAR");
			rc = CLI_E_USAGE;
			goto out_opts;
		}
		char key[128];
		snprintf(key, sizeof(key), "%.*s", (int)(eq - vals[i]), vals[i]);
		json_object_set_new(opts, key, json_string(v));
	}
	body = json_pack("{s:s, s:s, s:O, s:b}", "path", path, "uri", cis_config_pos(cfg, 1),
	                 "options", opts, "read_only", cis_config_bool(cfg, "readonly"));
	if (cis_config_is_set(cfg, "sync-interval"))
		json_object_set_new(body, "sync_interval",
		                    json_string(cis_config_str(cfg, "sync-interval")));
	if (cis_config_is_set(cfg, "block-size"))
		json_object_set_new(body, "block_size",
		                    json_string(cis_config_str(cfg, "block-size")));
	rc = cli_api(c, "POST", "/api/v1/mounts", NULL, NULL, body, &out, what);
	json_decref(body);
	if (!rc) {
		cli_print_reply(
		    out, cis_config_bool(cfg, "json"), "mounted %s at %s\n",
		    json_string_value(json_object_get(json_object_get(out, "mount"), "uri")), path);
		json_decref(out);
	}
out_opts:
	json_decref(opts);
	free(path);
out_cfg:
	cis_config_free(cfg);
	return rc;
}

int cli_cmd_unmount(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	json_t *out;
	char *path, what[600];
	int rc = cli_parse(cli_json_opts, "cistern unmount PATH", argc, argv, &cfg);
	if (rc || !cfg)
		return rc;
	rc = cli_one_path(cfg, "unmount", &path, what, sizeof(what));
	if (rc)
		goto out_cfg;
	rc = cli_api(c, "DELETE", "/api/v1/mounts", path, NULL, NULL, &out, what);
	if (!rc) {
		cli_print_reply(out, cis_config_bool(cfg, "json"), "unmounted %s\n", path);
		json_decref(out);
	}
	free(path);
out_cfg:
	cis_config_free(cfg);
	return rc;
}

static void print_mounts(const json_t *out)
{
	size_t i;
	json_t *mt;
	printf("%-24s %-40s %s\n", "PATH", "URI", "OPTIONS");
	json_array_foreach(json_object_get(out, "mounts"), i, mt)
	{
		char bs[32];
		const char *k;
		json_t *v;
		cis_fmt_size((uint64_t)cli_jint(mt, "block_size"), bs, sizeof(bs));
		printf("%-24s %-40s %sblock_size=%s sync=%llds",
		       json_string_value(json_object_get(mt, "path")),
		       json_string_value(json_object_get(mt, "uri")),
		       json_is_true(json_object_get(mt, "read_only")) ? "ro " : "", bs,
		       cli_jint(mt, "sync_interval_ms") / 1000);
		/* The master already shows secrets as "***". */
		json_object_foreach(json_object_get(mt, "options"), k, v)
		    printf(" %s=%s", k, json_string_value(v));
		printf("\n");
	}
}

int cli_cmd_mounts(cli_ctx *c, int argc, char **argv)
{
	return cli_get_and_print(c, argc, argv, "cistern mounts", "/api/v1/mounts", print_mounts);
}
