/* cistern sync: re-list from the store now. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const cis_opt sync_opts[] = {
    {"recursive", NULL, NULL, "also every directory below that was listed before", false, 'R'},
    {"json", NULL, NULL, "print JSON", false, 0},
    CIS_OPT_END,
};

int cmd_sync(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	int rc = cli_parse(sync_opts, "cistern sync [-R] PATH", argc, argv, &cfg);
	if (rc >= 0)
		return rc;
	if (cis_config_npos(cfg) != 1) {
		fprintf(stderr, "cistern: sync: need PATH\n");
		cis_config_free(cfg);
		return 2;
	}
	char *path = strdup(cis_config_pos(cfg, 0));
	char what[4200];
	cli_trim_path(path);
	snprintf(what, sizeof(what), "sync %s", path);
	json_t *body = json_pack("{s:s, s:b}", "path", path, "recursive",
	                         cis_config_bool(cfg, "recursive")),
	       *out;
	rc = cli_api(c, "POST", "/api/v1/sync", NULL, NULL, body, &out, what);
	json_decref(body);
	if (!rc) {
		if (cis_config_bool(cfg, "json"))
			cli_print_json(out);
		else
			printf("synced %s (%lld directories listed)\n", path,
			       (long long)json_integer_value(json_object_get(out, "dirs_synced")));
		json_decref(out);
	}
	free(path);
	cis_config_free(cfg);
	return rc;
}
