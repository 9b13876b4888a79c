/* cistern ls / stat. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/json_text.h"
#include "cli.h"

static const cis_opt ls_opts[] = {
    {"long", NULL, NULL, "long format: type, mode, size, time", false, 'l'},
    {"recursive", NULL, NULL, "list directories below too", false, 'R'},
    {"json", NULL, NULL,
     "print JSON, each page as it comes: one document for the directory, all its entries, "
     "\"eof\": true; with -R an array of them, one per directory; a listing that fails "
     "part-way ends its document with \"eof\": false (the error on stderr, exit status 1)",
     false, 0},
    CIS_OPT_END,
};

static void print_entry(const json_t *e, bool lng)
{
	const char *name = cli_jstr(e, "name"), *type = cli_jstr(e, "type");
	const char *target = json_string_value(json_object_get(e, "link_target"));
	bool dir = !strcmp(type, "dir"), link = !strcmp(type, "link");
	name = cli_name_shown(name);
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
	       link ? " -> " : "", link && target ? cli_name_shown(target) : "",
	       json_is_true(json_object_get(e, "mount_point")) ? "  (mount)" : "");
}

/* How ls prints: -l, -R, --json. With --json each directory is one
 * document, {"path", "entries", "eof"}, printed as its pages come: the
 * opening once the first page is in, then each page's entries, then
 * "eof": true, or "eof": false when the listing stopped part-way (the
 * error is on stderr). Memory stays at one page however big the directory.
 * With -R the documents are the elements of one array, "[" and "]" around
 * them, so that the whole output is one JSON document. */
struct ls_how {
	bool lng, rec, js;
	bool first_doc; /* -R --json: no document printed yet (no "," before) */
};

#define LS_JSON_FLAGS (JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENCODE_ANY)

/* Print s with indent more spaces after each newline: a json_dumps text
 * nested in the document (newlines in its strings are escaped, "\n"). */
static void put_indented(const char *s, int indent)
{
	const char *nl;
	while ((nl = strchr(s, '\n'))) {
		fwrite(s, 1, (size_t)(nl + 1 - s), stdout);
		printf("%*s", indent, "");
		s = nl + 1;
	}
	fputs(s, stdout);
}

/* --json: print a directory's document up to the "[" of its entries, from
 * its first page: the page's members but its own bookkeeping (entries,
 * next_cookie, eof). Returns 0, or -ENOMEM with nothing printed. */
static int json_doc_open(json_t *page, struct ls_how *how)
{
	json_t *rest = json_copy(page); /* shallow: the members are shared */
	char *s = NULL;
	if (rest) {
		json_object_del(rest, "entries");
		json_object_del(rest, "next_cookie");
		json_object_del(rest, "eof");
		s = json_dumps(rest, LS_JSON_FLAGS);
		json_decref(rest);
	}
	if (!s)
		return -ENOMEM;
	printf("%s", how->first_doc ? "" : ",\n");
	how->first_doc = false;
	size_t n = strlen(s);
	if (n > 2 && !strcmp(s + n - 2, "\n}")) /* "{\n  \"path\": ...\n}": go on after it */
		printf("%.*s,\n  \"entries\": [", (int)(n - 2), s);
	else /* "{}" */
		printf("{\n  \"entries\": [");
	free(s);
	return 0;
}

/* --json: print one entry of the document's array (first: no "," before).
 * Returns 0, or -ENOMEM with nothing printed. */
static int json_doc_entry(const json_t *e, bool first)
{
	char *s = json_dumps(e, LS_JSON_FLAGS);
	if (!s)
		return -ENOMEM;
	printf("%s\n    ", first ? "" : ",");
	put_indented(s, 4);
	free(s);
	return 0;
}

/* --json: end the document; eof false when the listing stopped part-way. */
static void json_doc_close(const struct ls_how *how, bool any, bool eof)
{
	printf("%s],\n  \"eof\": %s\n}%s", any ? "\n  " : "", eof ? "true" : "false",
	       how->rec ? "" : "\n");
}

/* List one directory (all pages); with -R, the directories below it too.
 * A directory that fails is reported and the rest is listed: the result
 * is the first failure, after everything else was listed. With --json a
 * directory whose first page came is a document, ended with "eof": false
 * if a later page fails; one whose first page fails is left out. */
static int ls_one(cli_ctx *c, const char *path, struct ls_how *how, bool header)
{
	uint64_t cookie = 0;
	bool eof = false, begun = false, any = false;
	char what[4200], extra[64];
	snprintf(what, sizeof(what), "ls %s", *path ? path : "''");
	char **subs = NULL;
	size_t nsubs = 0;
	int rc = 0;
	if (header)
		printf("\n%s:\n", cli_name_shown(path));
	while (!eof) {
		json_t *out;
		snprintf(extra, sizeof(extra), "limit=1000&cookie=%" PRIu64, cookie);
		rc = cli_api(c, "GET", "/api/v1/ls", path, extra, NULL, &out, what);
		if (rc)
			break;
		size_t i;
		json_t *e, *ents = json_object_get(out, "entries");
		if (how->js && !begun) {
			rc = json_doc_open(out, how);
			begun = !rc;
		}
		json_array_foreach(ents, i, e)
		{
			if (!how->js) {
				print_entry(e, how->lng);
			} else if (!begun || json_doc_entry(e, !any)) {
				rc = -ENOMEM; /* nothing more can be printed */
				break;
			}
			any = true;
			const char *sub = json_string_value(json_object_get(e, "path"));
			if (!rc && how->rec && sub && !strcmp(cli_jstr(e, "type"), "dir")) {
				char **ns = realloc(subs, (nsubs + 1) * sizeof(*ns));
				if (ns) {
					subs = ns;
					/* a name not UTF-8 is only exact in hex */
					subs[nsubs] = cis_json_get_text(e, "path");
				}
				if (!ns || !subs[nsubs++])
					rc = -ENOMEM; /* the rest of this page still prints */
			}
		}
		if (rc == -ENOMEM)
			fprintf(stderr, "cistern: %s: out of memory\n", what);
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
		if (how->js)
			fflush(stdout); /* what a reader may take while the next page comes */
	}
	if (begun)
		json_doc_close(how, any, !rc);
	for (size_t i = 0; i < nsubs; i++) {
		int sub_rc = rc == -ENOMEM ? 0 : ls_one(c, subs[i], how, !how->js);
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
	int rc = cli_parse(ls_opts, "cistern ls [-l] [-R] [--json] [PATH]", argc, argv, &cfg);
	if (rc || !cfg)
		return rc;
	if ((rc = cli_too_many(cfg, 1, "ls")))
		goto out_cfg;
	if (cis_config_npos(cfg)) {
		rc = cli_path_arg(cfg, 0, "ls", &path, NULL, 0);
	} else if (!(path = strdup("/"))) {
		fprintf(stderr, "cistern: ls: out of memory\n");
		rc = -ENOMEM;
	}
	if (rc)
		goto out_cfg;
	struct ls_how how = {.lng = cis_config_bool(cfg, "long"),
	                     .rec = cis_config_bool(cfg, "recursive"),
	                     .js = cis_config_bool(cfg, "json"),
	                     .first_doc = true};
	if (how.js && how.rec)
		printf("[\n");
	rc = ls_one(c, path, &how, false);
	if (how.js && how.rec)
		printf("%s]\n", how.first_doc ? "" : "\n");
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
