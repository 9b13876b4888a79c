/* cistern sync: re-list from the store now. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* A tree of any size; a master that is down still fails at connect. */
#define SYNC_TIMEOUT_MS (24 * 3600 * 1000)

static const cis_opt sync_opts[] = {
    {"recursive", NULL, NULL, "also every directory below that was listed before", false, 'R'},
    {"json", NULL, NULL, "print JSON", false, 0},
    CIS_OPT_END,
};

int cli_cmd_sync(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	json_t *body, *out;
	char *path, what[4200];
	int rc = cli_parse(sync_opts, "cistern sync [-R] PATH", argc, argv, &cfg);
	if (rc || !cfg)
		return rc;
	rc = cli_one_path(cfg, "sync", &path, what, sizeof(what));
	if (rc)
		goto out_cfg;
	if ((rc = cli_check_path_utf8("sync", path)))
		goto out_path;
	body =
	    json_pack("{s:s, s:b}", "path", path, "recursive", cis_config_bool(cfg, "recursive"));
	if (!body) { /* the path was checked: only memory is left */
		fprintf(stderr, "cistern: %s: out of memory\n", what);
		rc = -ENOMEM;
		goto out_path;
	}
	/* The master lists the directories one after another in this one
	 * request: thousands of them under -R take longer than the usual
	 * 120 s, and a give-up then says "failed" of a sync going on. */
	cis_errmsg em = {{0}};
	cli_call call = {
	    .method = "POST", .path = "/api/v1/sync", .body = body, .timeout_ms = SYNC_TIMEOUT_MS};
	rc = cli_api_call(c, &call, &out, what, &em);
	json_decref(body);
	if (!rc) {
		cli_print_reply(out, cis_config_bool(cfg, "json"),
		                "synced %s (%lld directories listed)\n", path,
		                cli_jint(out, "dirs_synced"));
		json_decref(out);
	}
out_path:
	free(path);
out_cfg:
	cis_config_free(cfg);
	return rc;
}
