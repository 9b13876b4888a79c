/* cistern mount / unmount / mounts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/kv.h"
#include "cli.h"

static const cis_opt mount_opts[] = {
    {"option", "KEY=VALUE", NULL, "connector option (endpoint, region, access_key, ...)", true,
     'o'},
    {"readonly", NULL, NULL, "mount read-only", false, 0},
    {"sync-interval", "DURATION", NULL, "re-list directories older than this (300, 5m)", false, 0},
    {"block-size", "SIZE", NULL, "block size (default 4M)", false, 0},
    {"json", NULL, NULL, "print JSON", false, 0},
    CIS_OPT_END,
};

int cmd_mount(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	int rc = cli_parse(mount_opts, "cistern mount PATH URI [--option K=V]... [--readonly]",
	                   argc, argv, &cfg);
	if (rc >= 0)
		return rc;
	if (cis_config_npos(cfg) != 2) {
		fprintf(stderr, "cistern: mount: need PATH and URI (see cistern mount --help)\n");
		cis_config_free(cfg);
		return 2;
	}
	char *path = strdup(cis_config_pos(cfg, 0));
	const char *uri = cis_config_pos(cfg, 1);
	char what[600];
	cli_trim_path(path);
	snprintf(what, sizeof(what), "mount %s", path);
	json_t *opts = json_object();
	const char *const *vals;
	size_t n = cis_config_multi(cfg, "option", &vals);
	rc = 0;
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(vals[i], '=');
		if (!eq || eq == vals[i]) {
			/* never echo the value: it may be a secret */
			fprintf(stderr, "cistern: %s: --option needs KEY=VALUE\n", what);
			rc = 2;
			goto out;
		}
		char key[128];
		snprintf(key, sizeof(key), "%.*s", (int)(eq - vals[i]), vals[i]);
		json_object_set_new(opts, key, json_string(eq + 1));
	}
	json_t *body = json_pack("{s:s, s:s, s:O, s:b}", "path", path, "uri", uri, "options", opts,
	                         "read_only", cis_config_bool(cfg, "readonly"));
	if (cis_config_is_set(cfg, "sync-interval"))
		json_object_set_new(body, "sync_interval",
		                    json_string(cis_config_str(cfg, "sync-interval")));
	if (cis_config_is_set(cfg, "block-size"))
		json_object_set_new(body, "block_size",
		                    json_string(cis_config_str(cfg, "block-size")));
	json_t *out;
	rc = cli_api(c, "POST", "/api/v1/mounts", NULL, NULL, body, &out, what);
	json_decref(body);
	if (!rc) {
		if (cis_config_bool(cfg, "json"))
			cli_print_json(out);
		else
			printf("mounted %s at %s\n",
			       json_string_value(
			           json_object_get(json_object_get(out, "mount"), "uri")),
			       path);
		json_decref(out);
	}
out:
	json_decref(opts);
	free(path);
	cis_config_free(cfg);
	return rc;
}

static const cis_opt plain_opts[] = {
    {"json", NULL, NULL, "print JSON", false, 0},
    CIS_OPT_END,
};

int cmd_unmount(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	int rc = cli_parse(plain_opts, "cistern unmount PATH", argc, argv, &cfg);
	if (rc >= 0)
		return rc;
	if (cis_config_npos(cfg) != 1) {
		fprintf(stderr, "cistern: unmount: need PATH\n");
		cis_config_free(cfg);
		return 2;
	}
	char *path = strdup(cis_config_pos(cfg, 0));
	char what[600];
	cli_trim_path(path);
	snprintf(what, sizeof(what), "unmount %s", path);
	json_t *out;
	rc = cli_api(c, "DELETE", "/api/v1/mounts", path, NULL, NULL, &out, what);
	if (!rc) {
		if (cis_config_bool(cfg, "json"))
			cli_print_json(out);
		else
			printf("unmounted %s\n", path);
		json_decref(out);
	}
	free(path);
	cis_config_free(cfg);
	return rc;
}

int cmd_mounts(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	int rc = cli_parse(plain_opts, "cistern mounts", argc, argv, &cfg);
	if (rc >= 0)
		return rc;
	json_t *out;
	rc = cli_api(c, "GET", "/api/v1/mounts", NULL, NULL, NULL, &out, "mounts");
	if (!rc) {
		if (cis_config_bool(cfg, "json")) {
			cli_print_json(out);
		} else {
			size_t i;
			json_t *mt;
			printf("%-24s %-40s %s\n", "PATH", "URI", "OPTIONS");
			json_array_foreach(json_object_get(out, "mounts"), i, mt)
			{
				char bs[32];
				cis_fmt_size(
				    (uint64_t)json_integer_value(json_object_get(mt, "block_size")),
				    bs, sizeof(bs));
				printf("%-24s %-40s %sblock_size=%s sync=%llds",
				       json_string_value(json_object_get(mt, "path")),
				       json_string_value(json_object_get(mt, "uri")),
				       json_is_true(json_object_get(mt, "read_only")) ? "ro " : "",
				       bs,
				       (long long)json_integer_value(
				           json_object_get(mt, "sync_interval_ms")) /
				           1000);
				const char *k;
				json_t *v;
				/* The master already shows secrets as "***". */
				json_object_foreach(json_object_get(mt, "options"), k, v)
				    printf(" %s=%s", k, json_string_value(v));
				printf("\n");
			}
		}
		json_decref(out);
	}
	cis_config_free(cfg);
	return rc;
}
