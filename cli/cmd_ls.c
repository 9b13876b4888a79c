/* cistern ls / stat. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const cis_opt ls_opts[] = {
    {"long", NULL, NULL, "long format: type, mode, size, time", false, 'l'},
    {"recursive", NULL, NULL, "list directories below too", false, 'R'},
    {"json", NULL, NULL, "print JSON (one document per directory)", false, 0},
    CIS_OPT_END,
};

static void print_entry(const json_t *e, bool lng)
{
	const char *name = cli_jstr(e, "name"), *type = cli_jstr(e, "type");
	const char *target = json_string_value(json_object_get(e, "link_target"));
	bool dir = !strcmp(type, "dir"), link = !strcmp(type, "link");
	if (!lng) {
		printf("%s%s\n", name, dir ? "/" : "");
		return;
	}
	char sz[32], tm[32];
	cis_fmt_size((uint64_t)cli_jint(e, "size"), sz, sizeof(sz));
	cli_fmt_time(cli_jint(e, "mtime_ns"), tm, sizeof(tm));
	printf("%c%04llo %10s  %s  %s%s%s%s\n",
	       dir    ? 'd'
	       : link ? 'l'
	              : '-',
	       (unsigned long long)cli_jint(e, "mode"), dir ? "-" : sz, tm, name,
	       link ? " -> " : "", link && target ? target : "",
	       json_is_true(json_object_get(e, "mount_point")) ? "  (mount)" : "");
}

/* List one directory (all pages); with rec, the directories below it too.
 * A directory that fails is reported and the rest is listed: the result
 * is the first failure, after everything else was listed. */
static int ls_one(cli_ctx *c, const char *path, bool lng, bool rec, bool js, bool header)
{
	uint64_t cookie = 0;
	bool eof = false;
	char what[4200], extra[64];
	snprintf(what, sizeof(what), "ls %s", path);
	char **subs = NULL;
	size_t nsubs = 0;
	int rc = 0;
	if (header)
		printf("\n%s:\n", path);
	while (!eof) {
		json_t *out;
		snprintf(extra, sizeof(extra), "limit=1000&cookie=%" PRIu64, cookie);
		rc = cli_api(c, "GET", "/api/v1/ls", path, extra, NULL, &out, what);
		if (rc)
			break;
		if (js)
			cli_print_json(out);
		size_t i;
		json_t *e;
		json_array_foreach(json_object_get(out, "entries"), i, e)
		{
			if (!js)
				print_entry(e, lng);
			const char *sub = json_string_value(json_object_get(e, "path"));
			if (!rc && rec && sub && !strcmp(cli_jstr(e, "type"), "dir")) {
				char **ns = realloc(subs, (nsubs + 1) * sizeof(*ns));
				if (ns) {
					subs = ns;
					subs[nsubs] = strdup(sub);
				}
				if (!ns || !subs[nsubs++]) {
					/* the rest of this page still prints */
					fprintf(stderr, "cistern: %s: out of memory\n", what);
					rc = -ENOMEM;
				}
			}
		}
		uint64_t next = (uint64_t)cli_jint(out, "next_cookie");
		eof = rc || json_is_true(json_object_get(out, "eof"));
		/* The cookie is the page's last inode id, which need not grow
		 * (pages go by name, ids by creation): only one that stays put
		 * would loop. */
		if (!eof && next == cookie) {
			fprintf(stderr,
			        "cistern: %s: the master's listing did not move on (cookie %" PRIu64
			        ")\n",
			        what, cookie);
			rc = -CIS_E_PROTO;
			eof = true;
		}
		cookie = next;
		json_decref(out);
	}
	for (size_t i = 0; i < nsubs; i++) {
		int sub_rc = rc == -ENOMEM ? 0 : ls_one(c, subs[i], lng, rec, js, !js);
		if (!rc)
			rc = sub_rc;
		free(subs[i]);
	}
	free(subs);
	return rc;
}

int cli_cmd_ls(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	char *path;
	int rc = cli_parse(ls_opts, "cistern ls [-l] [-R] [--json] PATH", argc, argv, &cfg);
	if (rc || !cfg)
		return rc;
	if (cis_config_npos(cfg)) {
		rc = cli_path_arg(cfg, 0, "ls", &path, NULL, 0);
	} else if (!(path = strdup("/"))) {
		fprintf(stderr, "cistern: ls: out of memory\n");
		rc = -ENOMEM;
	}
	if (rc)
		goto out_cfg;
	rc = ls_one(c, path, cis_config_bool(cfg, "long"), cis_config_bool(cfg, "recursive"),
	            cis_config_bool(cfg, "json"), false);
	free(path);
out_cfg:
	cis_config_free(cfg);
	return rc;
}

int cli_cmd_stat(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	char *path, what[4200];
	json_t *o;
	int rc = cli_parse(cli_json_opts, "cistern stat [--json] PATH", argc, argv, &cfg);
	if (rc || !cfg)
		return rc;
	rc = cli_one_path(cfg, "stat", &path, what, sizeof(what));
	if (rc)
		goto out_cfg;
	/* "stat /latest/" is the link's target, as the API has it: keep one
	 * trailing slash (cli_one_path took them all off). */
	const char *arg = cis_config_pos(cfg, 0);
	size_t alen = strlen(arg), plen = strlen(path);
	if (alen > 1 && arg[alen - 1] == '/' && strcmp(path, "/") != 0) {
		char *p = realloc(path, plen + 2);
		if (!p) {
			fprintf(stderr, "cistern: %s: out of memory\n", what);
			rc = -ENOMEM;
			goto out_path;
		}
		path = p;
		memcpy(path + plen, "/", 2);
	}
	rc = cli_api(c, "GET", "/api/v1/stat", path, NULL, NULL, &o, what);
	if (!rc) {
		if (cis_config_bool(cfg, "json")) {
			cli_print_json(o);
		} else {
			char sz[32], tm[32];
			json_t *mt = json_object_get(o, "mount");
			cis_fmt_size((uint64_t)json_integer_value(json_object_get(o, "size")), sz,
			             sizeof(sz));
			cli_fmt_time(json_integer_value(json_object_get(o, "mtime_ns")), tm,
			             sizeof(tm));
			printf("path:     %s\n", path);
			printf("type:     %s%s\n", json_string_value(json_object_get(o, "type")),
			       json_is_true(json_object_get(o, "mount_point")) ? " (mount point)"
			                                                       : "");
			printf("inode:    %lld\n",
			       (long long)json_integer_value(json_object_get(o, "inode")));
			printf("size:     %s (%lld bytes)\n", sz,
			       (long long)json_integer_value(json_object_get(o, "size")));
			printf("modified: %s\n", tm);
			printf("mode:     %04llo\n",
			       (unsigned long long)json_integer_value(json_object_get(o, "mode")));
			const char *target = json_string_value(json_object_get(o, "link_target"));
			if (target)
				printf("target:   %s\n", target);
			const char *ver = json_string_value(json_object_get(o, "version"));
			if (ver && *ver)
				printf("version:  %s\n", ver);
			if (json_is_object(mt)) {
				printf("mount:    %s (%s)\n",
				       json_string_value(json_object_get(mt, "path")),
				       json_string_value(json_object_get(mt, "uri")));
				if (!target)
					printf("key:      %s\n",
					       json_string_value(json_object_get(o, "key")));
			}
			if (json_object_get(o, "blocks"))
				printf("blocks:   %lld\n",
				       (long long)json_integer_value(json_object_get(o, "blocks")));
		}
		json_decref(o);
	}
out_path:
	free(path);
out_cfg:
	cis_config_free(cfg);
	return rc;
}
