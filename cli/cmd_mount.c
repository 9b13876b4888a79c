/* cistern mount / unmount / mounts. */
#include <errno.h>
#include <stdint.h>
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
    {"sync-interval", "DURATION", NULL,
     "re-list directories older than this (300, 5m; at most 100 years)", false, 0},
    {"block-size", "SIZE", NULL, "block size (default 4M)", false, 0},
    {"json", NULL, NULL, "print JSON", false, 0},
    CIS_OPT_END,
};

int cli_put_option(json_t *opts, const char *what, const char *flag, const char *arg,
                   const char *eq, const char *val)
{
	char key[128];
	json_t *v;
	if ((size_t)(eq - arg) >= sizeof(key)) {
		fprintf(stderr, "cistern: %s: %s %.*s...: the key is over %zu bytes\n", what, flag,
		        32, arg, sizeof(key) - 1);
		return CLI_E_USAGE;
	}
	snprintf(key, sizeof(key), "%.*s", (int)(eq - arg), arg);
	if (!cli_utf8(key)) {
		fprintf(stderr, "cistern: %s: %s: the key is not valid UTF-8\n", what, flag);
		return CLI_E_USAGE;
	}
	v = json_string(val);
	if (!v) { /* JSON cannot carry it; json_object_set_new would drop it */
		fprintf(stderr, "cistern: %s: %s %s: the value is not valid UTF-8\n", what, flag,
		        key);
		return CLI_E_USAGE;
	}
	if (json_object_set_new(opts, key, v)) {
		fprintf(stderr, "cistern: %s: out of memory\n", what);
		return -ENOMEM;
	}
	return 0;
}

int cli_check_sync_interval(const char *what, const char *flag, const char *si)
{
	uint64_t v;
	int err = cis_parse_duration_ms(si, &v);

	if (err == 0 && v > (uint64_t)CIS_SYNC_MAX_MS)
		err = -ERANGE;
	if (err == 0)
		return 0;
	fprintf(stderr, "cistern: %s: %s %s: %s\n", what, flag, si,
	        err == -ERANGE ? "too long (at most 100 years)"
	                       : "not a duration (like 300, 500ms, 5m or 1h; 0 never re-lists)");
	return CLI_E_USAGE;
}

int cli_check_block_size(const char *what, const char *flag, const char *bs)
{
	uint64_t v;
	int err = cis_parse_size(bs, &v);

	if (err == 0 && (v < 4096 || v > (1ull << 30)))
		err = -ERANGE;
	if (err == 0)
		return 0;
	fprintf(stderr, "cistern: %s: %s %s: %s\n", what, flag, bs,
	        err == -ERANGE ? "out of range (4K .. 1G)" : "not a size (like 4M or 64K)");
	return CLI_E_USAGE;
}

int cli_cmd_mount(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	json_t *opts, *body, *out;
	const char *const *vals;
	char *path, what[600];
	int rc = cli_parse(mount_opts,
	                   "cistern mount PATH URI [--option K=V]... [--option-env K=VAR]... "
	                   "[--readonly] [--sync-interval DURATION] [--block-size SIZE]",
	                   argc, argv, &cfg);
	if (rc || !cfg)
		return rc;
	if (cis_config_npos(cfg) != 2) {
		fprintf(stderr, "cistern: mount: %s (see cistern mount --help)\n",
		        cis_config_npos(cfg) > 2 ? "too many arguments" : "need PATH and URI");
		rc = CLI_E_USAGE;
		goto out_cfg;
	}
	rc = cli_path_arg(cfg, 0, "mount", &path, what, sizeof(what));
	if (rc)
		goto out_cfg;
	if ((rc = cli_check_path_utf8("mount", path)) ||
	    (rc = cli_check_path_utf8("mount", cis_config_pos(cfg, 1))) ||
	    (cis_config_str(cfg, "sync-interval") &&
	     (rc = cli_check_sync_interval(what, "--sync-interval",
	                                   cis_config_str(cfg, "sync-interval")))) ||
	    (cis_config_str(cfg, "block-size") &&
	     (rc = cli_check_block_size(what, "--block-size", cis_config_str(cfg, "block-size")))))
		goto out_path;
	opts = json_object();
	if (!opts) {
		fprintf(stderr, "cistern: %s: out of memory\n", what);
		rc = -ENOMEM;
		goto out_path;
	}
	size_t n = cis_config_multi(cfg, "option", &vals);
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(vals[i], '=');
		if (!eq || eq == vals[i]) {
			/* never echo the value: it may be a secret */
			fprintf(stderr, "cistern: %s: --option needs KEY=VALUE\n", what);
			rc = CLI_E_USAGE;
			goto out_opts;
		}
		rc = cli_put_option(opts, what, "--option", vals[i], eq, eq + 1);
		if (rc)
			goto out_opts;
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
		rc = cli_put_option(opts, what, "--option-env", vals[i], eq, v);
		if (rc)
			goto out_opts;
	}
	body = json_pack("{s:s, s:s, s:O, s:b}", "path", path, "uri", cis_config_pos(cfg, 1),
	                 "options", opts, "read_only", cis_config_bool(cfg, "readonly"));
	if (body && cis_config_is_set(cfg, "sync-interval") &&
	    json_object_set_new(body, "sync_interval",
	                        json_string(cis_config_str(cfg, "sync-interval")))) {
		json_decref(body);
		body = NULL;
	}
	if (body && cis_config_is_set(cfg, "block-size") &&
	    json_object_set_new(body, "block_size",
	                        json_string(cis_config_str(cfg, "block-size")))) {
		json_decref(body);
		body = NULL;
	}
	if (!body) { /* the texts were checked: only memory is left */
		fprintf(stderr, "cistern: %s: out of memory\n", what);
		rc = -ENOMEM;
		goto out_opts;
	}
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
out_path:
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

/* A block size, exact: "4.0 MiB" or "1.5 MiB" when cis_fmt_size's one
 * decimal is exact (units are powers of two, so only .0 and .5 can be),
 * else the bytes ("4097 B", not "4.0 KiB"). */
static void fmt_exact_size(uint64_t b, char *out, size_t len)
{
	uint64_t unit = 1;
	while (unit <= (UINT64_MAX >> 10) && b >= unit << 10)
		unit <<= 10;
	if (unit == 1 || b % (unit / 2) == 0)
		cis_fmt_size(b, out, len);
	else
		snprintf(out, len, "%llu B", (unsigned long long)b);
}

/* A sync interval, exact: "300s", or "500ms" / "1500ms" when it is not
 * whole seconds (0: never re-list, shown as "0s" as it is given). */
static void fmt_exact_ms(long long ms, char *out, size_t len)
{
	if (ms % 1000 == 0)
		snprintf(out, len, "%llds", ms / 1000);
	else
		snprintf(out, len, "%lldms", ms);
}

static void print_mounts(const json_t *out)
{
	size_t i;
	json_t *mt;
	printf("%-24s %-40s %s\n", "PATH", "URI", "OPTIONS");
	json_array_foreach(json_object_get(out, "mounts"), i, mt)
	{
		char bs[32], si[32];
		const char *k;
		json_t *v;
		fmt_exact_size((uint64_t)cli_jint(mt, "block_size"), bs, sizeof(bs));
		fmt_exact_ms(cli_jint(mt, "sync_interval_ms"), si, sizeof(si));
		printf("%-24s %-40s %sblock_size=%s sync=%s",
		       json_string_value(json_object_get(mt, "path")),
		       json_string_value(json_object_get(mt, "uri")),
		       json_is_true(json_object_get(mt, "read_only")) ? "ro " : "", bs, si);
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
