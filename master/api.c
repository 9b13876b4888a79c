/* The HTTP admin API (JSON), for the CLI and operators; docs/api.md lists
 * every endpoint. mst_api_handle works without a socket (tests, fuzzing);
 * main.c routes the HTTP server's requests to it. Credentials are never in
 * a reply: mount options that are secrets show as "***". */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/config.h"
#include "cistern/http.h"
#include "cistern/json_text.h"
#include "cistern/log.h"
#include "cistern/proto/common.pb-c.h"
#include "master.h"

const char *const mst_api_query_names[] = {"path", "recursive", "limit", "cookie", "id", NULL};

/* Error texts often name a path, which may be any bytes: cis_json_text
 * keeps them JSON. */
static int fail(json_t **out, int code, const cis_errmsg *em)
{
	*out =
	    json_pack("{s:o, s:i}", "error", cis_json_text(cis_errmsg_or(em, code)), "code", code);
	return cis_http_status_of(code);
}

static int fail_msg(json_t **out, int status, const char *msg)
{
	*out = json_pack("{s:o}", "error", cis_json_text(msg));
	return status;
}

/* o[key] = text as cis_json_set_text sets it; on failure o is dropped. */
static json_t *with_text(json_t *o, const char *key, const char *text)
{
	if (o && cis_json_set_text(o, key, text)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *inode_json(const mst_inode *i, const char *path)
{
	bool link = i->type == MST_LINK;
	json_t *j = json_pack("{s:I, s:I, s:s, s:I, s:I, s:I, s:o, s:I, s:b}", "inode",
	                      (json_int_t)i->id, "parent", (json_int_t)i->parent, "type",
	                      i->type == MST_DIR ? "dir"
	                      : link             ? "link"
	                                         : "file",
	                      "size", (json_int_t)i->size, "mtime_ns", (json_int_t)i->mtime_ns,
	                      "mode", (json_int_t)i->mode, "version", cis_json_text(i->version),
	                      "mount_id", (json_int_t)i->mount_id, "mount_point", i->mount_point);
	/* A text that is not UTF-8 shows with '?', exactly in NAME_hex: a
	 * client names such an entry back by its path_hex (ls -R). */
	j = with_text(with_text(with_text(j, "name", i->name), "path", path), "key",
	              link ? "" : i->key);
	return link ? with_text(j, "link_target", i->link_target) : j;
}

/* A path from a query parameter or a JSON field, checked. */
static int get_path(const cis_kvlist *q, json_t *body, const char **path, cis_errmsg *em)
{
	const char *p = NULL;
	size_t len = 0;
	if (body) {
		json_t *jp = json_object_get(body, "path");
		if (jp && !json_is_string(jp))
			return cis_fail(em, -EINVAL, "\"path\" must be a string");
		if (jp) {
			p = json_string_value(jp);
			len = json_string_length(jp);
		}
	}
	if (!p && q) {
		p = cis_kvlist_get(q, "path");
		len = p ? strlen(p) : 0;
	}
	if (!p)
		return cis_fail(em, -EINVAL, "no path given");
	int err = mst_path_check(p, len, em);
	if (err)
		return err;
	*path = p;
	return 0;
}

/* A query count or cookie: decimal digits only (no sign, blanks, suffix or
 * fraction: "0.5k" is no count), below 2^64. */
static bool parse_decimal(const char *s, uint64_t *out)
{
	return cis_parse_decimal(s, UINT64_MAX, out) == 0;
}

static bool truthy(const char *s)
{
	return s && (!strcmp(s, "1") || !strcmp(s, "true") || !strcmp(s, "yes"));
}

static int api_mounts_get(mst_master *m, json_t **out)
{
	*out = json_pack("{s:o}", "mounts", mst_mounts_json(m));
	return 200;
}

static int api_mounts_post(mst_master *m, json_t *body, json_t **out)
{
	cis_errmsg em = {{0}};
	cis_kvlist opts = CIS_KVLIST_INIT;
	mst_mount_req r = {.sync_interval_ms = -1};
	int status;
	if (!body)
		return fail_msg(out, 400, "a json object body is required");
	int err = get_path(NULL, body, &r.path, &em);
	if (err)
		return fail(out, err, &em);
	json_t *ju = json_object_get(body, "uri");
	if (!json_is_string(ju) || !*json_string_value(ju))
		return fail_msg(out, 400, "\"uri\" must be a non-empty string");
	if (strlen(json_string_value(ju)) != json_string_length(ju))
		return fail_msg(out, 400, "\"uri\" contains a nul byte");
	r.uri = json_string_value(ju);
	json_t *jo = json_object_get(body, "options");
	if (jo && !json_is_object(jo))
		return fail_msg(out, 400, "\"options\" must be an object of strings");
	/* Each is looked up in a list: a body of 90,000 keys would cost one
	 * HTTP thread billions of compares before the store refused them. */
	if (json_object_size(jo) > MST_MOUNT_OPTIONS_MAX)
		return fail_msg(out, 400, "too many \"options\"");
	const char *k;
	json_t *v;
	json_object_foreach(jo, k, v)
	{
		if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
			status = fail_msg(out, 400, "\"options\" values must be strings");
			goto out_opts;
		}
		if (!*k || cis_kvlist_set(&opts, k, json_string_value(v))) {
			status = fail_msg(out, 400, "bad option name");
			goto out_opts;
		}
	}
	r.options = &opts;
	json_t *jr = json_object_get(body, "read_only");
	if (jr && !json_is_boolean(jr)) {
		status = fail_msg(out, 400, "\"read_only\" must be true or false");
		goto out_opts;
	}
	r.read_only = json_is_true(jr);
	json_t *jb = json_object_get(body, "block_size");
	if (json_is_integer(jb) && json_integer_value(jb) > 0) {
		r.block_size = (uint64_t)json_integer_value(jb);
	} else if (json_is_string(jb)) {
		if (cis_parse_size(json_string_value(jb), &r.block_size) || !r.block_size) {
			status = fail_msg(out, 400, "bad \"block_size\"");
			goto out_opts;
		}
	} else if (jb) {
		status = fail_msg(out, 400, "bad \"block_size\"");
		goto out_opts;
	}
	json_t *js = json_object_get(body, "sync_interval");
	uint64_t ms = 0;
	if (json_is_integer(js) && json_integer_value(js) >= 0 &&
	    json_integer_value(js) <= CIS_SYNC_MAX_MS / 1000) {
		r.sync_interval_ms = json_integer_value(js) * 1000; /* seconds */
	} else if (json_is_string(js) && !cis_parse_duration_ms(json_string_value(js), &ms) &&
	           ms <= CIS_SYNC_MAX_MS) {
		r.sync_interval_ms = (int64_t)ms;
	} else if (js) {
		status = fail_msg(
		    out, 400, "bad \"sync_interval\": seconds or a duration, at most 100 years");
		goto out_opts;
	}
	uint64_t id;
	err = mst_mount_add(m, &r, &id, &em);
	if (err) {
		status = fail(out, err, &em);
		goto out_opts;
	}
	json_t *mj = json_null();
	pthread_mutex_lock(&m->mounts_lock);
	for (size_t i = 0; i < m->nmounts; i++)
		if (m->mounts[i]->id == id) {
			json_decref(mj);
			mj = mst_mount_json(m->mounts[i]);
		}
	pthread_mutex_unlock(&m->mounts_lock);
	*out = json_pack("{s:o}", "mount", mj);
	status = 201;
out_opts:
	cis_kvlist_free(&opts);
	return status;
}

static int api_mounts_delete(mst_master *m, const cis_kvlist *q, json_t *body, json_t **out)
{
	cis_errmsg em = {{0}};
	const char *path = NULL;
	int err = get_path(q, body, &path, &em);
	if (!err)
		err = mst_mount_remove(m, path, &em);
	if (err)
		return fail(out, err, &em);
	*out = with_text(json_object(), "removed", path);
	return 200;
}

static char *join(const char *dir, const char *name)
{
	size_t dl = strlen(dir);
	char *p = malloc(dl + strlen(name) + 2);
	if (p)
		sprintf(p, "%s%s%s", dir, (dl && dir[dl - 1] == '/') ? "" : "/", name);
	return p;
}

static int api_ls(mst_master *m, const cis_kvlist *q, json_t **out)
{
	cis_errmsg em = {{0}};
	const char *path = NULL;
	mst_inode *dir = malloc(sizeof(*dir));
	int status;
	if (!dir)
		return fail_msg(out, 500, "out of memory");
	char real[MST_PATH_MAX + 1];
	int err = get_path(q, NULL, &path, &em);
	if (!err) { /* ls of a link to a directory lists the directory, as ls(1) does */
		err = mst_ns_realpath(m, path, true, real, dir, &em);
		if (err == -ENOENT || err == -EXDEV || err == -ELOOP) /* and shows a broken one */
			err = mst_ns_realpath(m, path, false, real, dir, &em);
	}
	if (err) {
		status = fail(out, err, &em);
		goto out_dir;
	}
	if (dir->type != MST_DIR) {
		/* ls of a file shows the file, as ls(1) does */
		*out = with_text(json_pack("{s:[o], s:I, s:b}", "entries", inode_json(dir, path),
		                           "next_cookie", (json_int_t)0, "eof", 1),
		                 "path", path);
		status = 200;
		goto out_dir;
	}
	uint64_t limit = 1000, cookie = 0;
	const char *ls = cis_kvlist_get(q, "limit"), *cs = cis_kvlist_get(q, "cookie");
	if ((ls && (!parse_decimal(ls, &limit) || limit == 0 || limit > 4096)) ||
	    (cs && !parse_decimal(cs, &cookie))) {
		status = fail_msg(out, 400, "bad limit or cookie");
		goto out_dir;
	}
	mst_inode *ents;
	size_t n;
	uint64_t next;
	bool eof;
	err = mst_ns_readdir(m, dir->id, cookie, limit, &ents, &n, &next, &eof, &em);
	if (err) {
		status = fail(out, err, &em);
		goto out_dir;
	}
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		char *p = join(path, ents[i].name);
		json_array_append_new(arr, inode_json(&ents[i], p ? p : ents[i].name));
		free(p);
	}
	free(ents);
	*out = with_text(json_pack("{s:o, s:I, s:b}", "entries", arr, "next_cookie",
	                           (json_int_t)next, "eof", eof),
	                 "path", path);
	status = 200;
out_dir:
	free(dir);
	return status;
}

static int api_stat(mst_master *m, const cis_kvlist *q, json_t **out)
{
	cis_errmsg em = {{0}};
	const char *path = NULL;
	mst_inode *ino = malloc(sizeof(*ino));
	if (!ino)
		return fail_msg(out, 500, "out of memory");
	char real[MST_PATH_MAX + 1];
	int err = get_path(q, NULL, &path, &em);
	if (!err) /* a link itself, reached through any links on the way */
		err = mst_ns_realpath(m, path, false, real, ino, &em);
	if (err) {
		free(ino);
		return fail(out, err, &em);
	}
	json_t *o = inode_json(ino, path);
	json_t *mj = json_null();
	pthread_mutex_lock(&m->mounts_lock);
	for (size_t i = 0; i < m->nmounts; i++)
		if (m->mounts[i]->id == ino->mount_id) {
			json_decref(mj);
			mj = mst_mount_json(m->mounts[i]);
		}
	pthread_mutex_unlock(&m->mounts_lock);
	json_object_set_new(o, "mount", mj);
	if (ino->type == MST_DIR)
		json_object_set_new(o, "listed_ns", json_integer(ino->listed_ns));
	else if (ino->type == MST_FILE && json_is_object(mj))
		json_object_set_new(
		    o, "blocks",
		    json_integer(
		        (json_int_t)((ino->size +
		                      json_integer_value(json_object_get(mj, "block_size")) - 1) /
		                     json_integer_value(json_object_get(mj, "block_size")))));
	free(ino);
	*out = o;
	return 200;
}

static int api_sync(mst_master *m, const cis_kvlist *q, json_t *body, json_t **out)
{
	cis_errmsg em = {{0}};
	const char *path = NULL;
	bool rec = false;
	int err = get_path(q, body, &path, &em);
	if (err)
		return fail(out, err, &em);
	json_t *jr = body ? json_object_get(body, "recursive") : NULL;
	if (jr && !json_is_boolean(jr))
		return fail_msg(out, 400, "\"recursive\" must be true or false");
	rec = json_is_true(jr) || truthy(cis_kvlist_get(q, "recursive"));
	uint64_t dirs;
	err = mst_ns_sync(m, path, rec, &dirs, &em);
	if (err)
		return fail(out, err, &em);
	*out = with_text(json_pack("{s:b, s:I}", "recursive", rec, "dirs_synced", (json_int_t)dirs),
	                 "path", path);
	return 200;
}

static int api_workers(mst_master *m, json_t **out)
{
	*out = mst_workers_json(m->workers);
	return 200;
}

#define USAGE_MAX_REPLICAS 8

struct usage {
	mst_master *m;
	uint64_t mount_id; /* files of mounts nested below count for those */
	uint64_t files, bytes, cached;
	uint64_t by_copies[USAGE_MAX_REPLICAS + 1]; /* blocks by number of holders */
};

static int usage_file(void *arg, const char *path, const mst_inode *f)
{
	struct usage *u = arg;
	(void)path;
	if (f->mount_id != u->mount_id)
		return 0;
	uint64_t bs = 0, nb = mst_file_blocks(u->m, f, &bs);
	u->files++;
	u->bytes += f->size;
	for (uint64_t b = 0; b < nb; b++) {
		uint64_t w[USAGE_MAX_REPLICAS];
		cis_block_id id = cis_block_id_make(f->mount_id, f->key, f->version, bs, b);
		size_t nh = mst_workers_locate(u->m->workers, id, w, USAGE_MAX_REPLICAS);
		u->by_copies[nh]++;
		if (nh) {
			uint64_t end = (b + 1) * bs;
			u->cached += (end > f->size ? f->size : end) - b * bs;
		}
	}
	return 0;
}

/* Per mount: bytes known to the namespace (listed so far), bytes with at
 * least one cached copy, and blocks_by_copies[k] = blocks held by k workers
 * (the last entry: USAGE_MAX_REPLICAS or more). O(files listed): a walk of LMDB, no store access. */
static json_t *mounts_usage(mst_master *m)
{
	json_t *ms = mst_mounts_json(m), *out = json_array();
	size_t i;
	json_t *mt;
	json_array_foreach(ms, i, mt)
	{
		struct usage u = {
		    .m = m, .mount_id = (uint64_t)json_integer_value(json_object_get(mt, "id"))};
		cis_errmsg em = {{0}};
		const char *path = json_string_value(json_object_get(mt, "path"));
		if (!path)
			continue;
		mst_walk(m, path, false, usage_file, NULL, &u, &em);
		json_t *bc = json_array();
		for (size_t k = 0; k <= USAGE_MAX_REPLICAS; k++)
			json_array_append_new(bc, json_integer((json_int_t)u.by_copies[k]));
		json_array_append_new(
		    out, json_pack("{s:s, s:I, s:I, s:I, s:I, s:o}", "path", path, "id",
		                   json_integer_value(json_object_get(mt, "id")), "files",
		                   (json_int_t)u.files, "total_bytes", (json_int_t)u.bytes,
		                   "cached_bytes", (json_int_t)u.cached, "blocks_by_copies", bc));
	}
	json_decref(ms);
	return out;
}

static int api_report(mst_master *m, json_t **out)
{
	json_t *w = mst_workers_json(m->workers);
	json_t *arr = json_object_get(w, "workers");
	uint64_t cap = 0, used = 0;
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v)
	{
		cap += (uint64_t)json_integer_value(json_object_get(v, "capacity"));
		used += (uint64_t)json_integer_value(json_object_get(v, "used"));
		/* hit ratio from the worker's own counters (its /metrics) */
		Cis__WorkerInfo *wi = mst_workers_info(
		    m->workers, (uint64_t)json_integer_value(json_object_get(v, "id")));
		uint64_t hits, misses;
		if (wi && mst_worker_hits(wi, &hits, &misses) == 0) {
			json_object_set_new(v, "hits", json_integer((json_int_t)hits));
			json_object_set_new(v, "misses", json_integer((json_int_t)misses));
			json_object_set_new(v, "hit_ratio",
			                    hits + misses
			                        ? json_real((double)hits / (double)(hits + misses))
			                        : json_null());
		}
		if (wi)
			protobuf_c_message_free_unpacked(&wi->base, NULL);
	}
	*out = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:O, s:I, s:O, s:o}", "mounts",
	                 (json_int_t)mst_mount_count(m), "inodes", (json_int_t)mst_inode_count(m),
	                 "workers_live", (json_int_t)json_array_size(arr), "capacity",
	                 (json_int_t)cap, "used", (json_int_t)used, "worker_list_version",
	                 (json_int_t)mst_workers_version(m->workers), "blocks_indexed",
	                 json_object_get(w, "blocks_indexed"), "store_lists",
	                 (json_int_t)cis_counter_get(m->c_store_lists), "workers", arr,
	                 "mount_usage", mounts_usage(m));
	json_decref(w);
	return 200;
}

/* ---- jobs and policies ---- */

/* body[k] as a number up to max: an integer, or a string of one; sized,
 * a size with a suffix ("100M": a bandwidth), else decimal digits only
 * (a count: "0.03k" is no number of replicas). */
static int get_u64(json_t *body, const char *k, uint64_t max, bool sized, uint64_t *out,
                   json_t **err_out)
{
	json_t *v = json_object_get(body, k);
	if (!v)
		return 0;
	if (json_is_integer(v) && json_integer_value(v) >= 0 &&
	    (uint64_t)json_integer_value(v) <= max) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	const char *s = json_string_value(v);
	if (s && strlen(s) == json_string_length(v) &&
	    (sized ? !cis_parse_size(s, out) && *out <= max : !cis_parse_decimal(s, max, out)))
		return 0;
	char msg[80];
	snprintf(msg, sizeof(msg), "bad \"%s\"", k);
	return fail_msg(err_out, 400, msg);
}

static int get_bool(json_t *body, const char *k, bool *out, json_t **err_out)
{
	json_t *v = json_object_get(body, k);
	if (!v)
		return 0;
	if (!json_is_boolean(v)) {
		char msg[80];
		snprintf(msg, sizeof(msg), "\"%s\" must be true or false", k);
		return fail_msg(err_out, 400, msg);
	}
	*out = json_is_true(v);
	return 0;
}

static int api_jobs_post(mst_master *m, json_t *body, json_t **out)
{
	cis_errmsg em = {{0}};
	mst_job_req r = {0};
	uint64_t rep = 1, par = 16, bw = 0;
	int st;
	if (!body)
		return fail_msg(out, 400, "a json object body is required");
	int err = get_path(NULL, body, &r.path, &em);
	if (err)
		return fail(out, err, &em);
	json_t *jt = json_object_get(body, "type");
	r.type = jt ? json_string_value(jt) : "load";
	if (!r.type || (jt && strlen(r.type) != json_string_length(jt)))
		return fail_msg(out, 400, "\"type\" must be a string without nul bytes");
	/* A pin job alone would pin blocks with no pin policy kept: later
	 * capacity checks would not count them, nor loads pin what they fetch. */
	if (!strcmp(r.type, "pin") || !strcmp(r.type, "unpin"))
		return fail_msg(
		    out, 400,
		    "pin and unpin are set with POST /api/v1/policy {\"path\", \"pin\": "
		    "true|false}, which starts the job");
	if ((st = get_u64(body, "replicas", CIS_REPLICAS_MAX, false, &rep, out)) ||
	    (st = get_u64(body, "parallel", CIS_PARALLEL_MAX, false, &par, out)) ||
	    (st = get_u64(body, "bandwidth", UINT64_MAX / 2, true, &bw, out)) ||
	    (st = get_bool(body, "verify", &r.verify, out)) ||
	    (st = get_bool(body, "metadata_only", &r.metadata_only, out)))
		return st;
	if (!rep || !par)
		return fail_msg(out, 400, "\"replicas\" and \"parallel\" must be at least 1");
	r.replicas = (uint32_t)rep;
	r.parallel = (uint32_t)par;
	r.bandwidth = bw;
	uint64_t id;
	err = mst_job_submit(m, &r, &id, &em);
	if (err)
		return fail(out, err, &em);
	*out = json_pack("{s:o}", "job", mst_job_json(m, id, 0));
	return 201;
}

static int get_id(const cis_kvlist *q, json_t *body, uint64_t *id, json_t **out)
{
	json_t *v = body ? json_object_get(body, "id") : NULL;
	const char *s = q ? cis_kvlist_get(q, "id") : NULL;
	if (json_is_integer(v) && json_integer_value(v) > 0) {
		*id = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (!v && s) {
		int rc = cis_parse_decimal(s, UINT64_MAX, id);
		if (rc == -ERANGE)
			return fail_msg(out, 400, "bad job id: larger than 2^64-1");
		if (rc)
			return fail_msg(out, 400, "bad job id: digits only (no sign or blanks)");
		if (*id)
			return 0;
	}
	return fail_msg(out, 400, "a job id (a positive integer) is required");
}

static int api_job_get(mst_master *m, const cis_kvlist *q, json_t **out)
{
	uint64_t id, limit = 100;
	int st = get_id(q, NULL, &id, out);
	if (st)
		return st;
	const char *ls = cis_kvlist_get(q, "limit");
	if (ls && (!parse_decimal(ls, &limit) || limit > 1000))
		return fail_msg(out, 400, "bad limit");
	json_t *j = mst_job_json(m, id, limit);
	if (!j)
		return fail_msg(out, 404, "no such job");
	*out = json_pack("{s:o}", "job", j);
	return 200;
}

static int api_job_cancel(mst_master *m, json_t *body, json_t **out)
{
	cis_errmsg em = {{0}};
	uint64_t id;
	int st = get_id(NULL, body, &id, out);
	if (st)
		return st;
	int err = mst_job_cancel(m, id, &em);
	if (err)
		return fail(out, err, &em);
	*out = json_pack("{s:I, s:b}", "id", (json_int_t)id, "cancelled", 1);
	return 200;
}

static json_t *policy_json(const mst_policy *p)
{
	json_t *o = json_object();
	json_object_set_new(o, "replicas", p->replicas ? json_integer(p->replicas) : json_null());
	json_object_set_new(o, "pin", json_boolean(p->pin == 1));
	json_object_set_new(o, "ttl", p->ttl_s > 0 ? json_integer(p->ttl_s) : json_null());
	return o;
}

static int walk_nothing(void *arg, const char *path, const mst_inode *file)
{
	(void)arg;
	(void)path;
	(void)file;
	return 0;
}

/* Body: {"path", "replicas": N, "recursive": bool, "pin": bool, "ttl": N | "off"}.
 * Pin starts a pin job (after refusing a pin larger than the cache), unpin
 * an unpin job. */
static int api_policy_post(mst_master *m, json_t *body, json_t **out)
{
	cis_errmsg em = {{0}};
	const char *path = NULL;
	uint64_t rep = 0;
	bool rec = false, pin = false;
	int64_t ttl = -2;
	int st;
	if (!body)
		return fail_msg(out, 400, "a json object body is required");
	int err = get_path(NULL, body, &path, &em);
	if (err)
		return fail(out, err, &em);
	json_t *jr = json_object_get(body, "replicas"), *jp = json_object_get(body, "pin"),
	       *jt = json_object_get(body, "ttl");
	if ((st = get_u64(body, "replicas", CIS_REPLICAS_MAX, false, &rep, out)) ||
	    (st = get_bool(body, "recursive", &rec, out)) ||
	    (st = get_bool(body, "pin", &pin, out)))
		return st;
	if (jr && !rep) {
		char msg[64];
		snprintf(msg, sizeof(msg), "\"replicas\" must be 1..%d", CIS_REPLICAS_MAX);
		return fail_msg(out, 400, msg);
	}
	if (jt) {
		if (json_is_string(jt) && json_string_length(jt) == 3 &&
		    !strcmp(json_string_value(jt), "off"))
			ttl = 0;
		else if (json_is_integer(jt) && json_integer_value(jt) > 0 &&
		         json_integer_value(jt) <= CIS_TTL_MAX_S)
			ttl = json_integer_value(jt);
		else
			return fail_msg(out, 400,
			                "\"ttl\" must be seconds (1 to 100 years) or \"off\"");
	}
	if (!jr && !jp && !jt)
		return fail_msg(out, 400, "nothing to set: give replicas, pin or ttl");
	/* the policy of what the path leads to (links followed), resolved
	 * under policy_lock: an unmount drops the mount's policies under it,
	 * so none is kept below a mount that is gone */
	char real[MST_PATH_MAX + 1];
	uint64_t job = 0;
	if (jp && pin) {
		/* The capacity check of a new pin walks its tree, listing what
		 * was never listed: minutes for a large tree, which must not be
		 * spent holding policy_lock (an unmount waits on it, and every
		 * mount, job and policy request behind the unmount). List it
		 * now, unlocked; the check then walks what LMDB holds. Its
		 * errors are the check's to report. */
		cis_errmsg pre = {{0}};
		if (!mst_ns_realpath(m, path, true, real, NULL, &pre))
			(void)mst_walk(m, real, true, walk_nothing, NULL, NULL, &pre);
	}
	pthread_mutex_lock(&m->policy_lock);
	err = mst_ns_realpath(m, path, true, real, NULL, &em);
	if (!err)
		path = real;
	/* The capacity check comes first, before the policy is kept: a pin, and
	 * more copies of pinned data, with both of this request's settings. */
	if (!err)
		err = mst_pin_check(m, path, jp ? pin : -1, jr ? (int64_t)rep : -1, rec && jr, &em);
	/* The policy is saved before the pin job starts: a job that ran with
	 * its policy unsaved would (un)pin blocks the policy does not say. */
	if (!err)
		err = mst_policy_update(m, path, jr ? (int64_t)rep : -1, jp ? pin : -1, ttl,
		                        rec && jr, &em);
	bool saved = !err;
	if (!err && jp) {
		mst_job_req r = {.type = pin ? "pin" : "unpin", .path = path, .pin_checked = true};
		err = mst_job_submit_locked(m, &r, &job, &em);
		if (err) {
			char why[sizeof(em.text)];
			snprintf(why, sizeof(why), "%s", cis_errmsg_or(&em, err));
			cis_fail(&em, err,
			         "%s: the policy is saved, but the job that %s the cached blocks "
			         "did not start (%s); set it again to retry",
			         path, pin ? "pins" : "unpins", why);
		}
	}
	pthread_mutex_unlock(&m->policy_lock);
	if (saved && jr)
		mst_repl_kick(m);
	if (err)
		return fail(out, err, &em);
	mst_policy p;
	mst_policy_resolve(m, path, &p);
	/* the path the link led to may be any bytes (a file:// store's names) */
	*out = with_text(json_pack("{s:o, s:o}", "policy", policy_json(&p), "job",
	                           job ? json_integer((json_int_t)job) : json_null()),
	                 "path", path);
	return 200;
}
/* Whether word is one of the space-separated words of words (a word with
 * a space in it is none: "path uri" is two). */
static bool word_in(const char *words, const char *word)
{
	size_t wl = strlen(word);
	if (strchr(word, ' '))
		return false;
	for (const char *p = words; wl && (p = strstr(p, word)); p++)
		if ((p == words || p[-1] == ' ') && (p[wl] == ' ' || !p[wl]))
			return true;
	return false;
}

int mst_api_handle(mst_master *m, const char *method, const char *path, const cis_kvlist *query,
                   json_t *body, json_t **out)
{
	/* The fields a POST body may have: one it does not know is refused,
	 * not ignored (a typo, "replica": 3, would load one copy). */
	static const struct {
		const char *path;
		const char *methods;
		const char *post_fields;
	} known[] = {
	    {"/api/v1/mounts", "GET POST DELETE",
	     "path uri options read_only block_size sync_interval"},
	    {"/api/v1/ls", "GET", ""},
	    {"/api/v1/stat", "GET", ""},
	    {"/api/v1/sync", "POST", "path recursive"},
	    {"/api/v1/report", "GET", ""},
	    {"/api/v1/workers", "GET", ""},
	    {"/api/v1/jobs", "GET POST",
	     "type path replicas parallel bandwidth verify metadata_only"},
	    {"/api/v1/job", "GET", ""},
	    {"/api/v1/job/cancel", "POST", "id"},
	    {"/api/v1/policies", "GET", ""},
	    {"/api/v1/policy", "POST", "path replicas recursive pin ttl"},
	};
	*out = NULL;
	cis_counter_inc(m->c_api_requests);
	if (!method || !path)
		return fail_msg(out, 400, "bad request");
	const char *fields = NULL;
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(path, known[i].path)) {
			fields = known[i].post_fields;
			if (!word_in(known[i].methods, method))
				return fail_msg(out, 405, "method not allowed");
		}
	if (!fields)
		return fail_msg(out, 404, "no such endpoint");
	if (body && !json_is_object(body))
		return fail_msg(out, 400, "the body must be a json object");
	const char *k;
	json_t *v;
	if (body && !strcmp(method, "POST"))
		json_object_foreach(body, k, v)
		{
			if (!word_in(fields, k)) {
				char msg[80];
				snprintf(msg, sizeof(msg), "unknown field \"%.40s\"", k);
				return fail_msg(out, 400, msg);
			}
		}
	if (!strcmp(path, "/api/v1/mounts")) {
		if (!strcmp(method, "GET"))
			return api_mounts_get(m, out);
		if (!strcmp(method, "POST"))
			return api_mounts_post(m, body, out);
		return api_mounts_delete(m, query, body, out);
	}
	if (!strcmp(path, "/api/v1/ls"))
		return api_ls(m, query, out);
	if (!strcmp(path, "/api/v1/stat"))
		return api_stat(m, query, out);
	if (!strcmp(path, "/api/v1/sync"))
		return api_sync(m, query, body, out);
	if (!strcmp(path, "/api/v1/report"))
		return api_report(m, out);
	if (!strcmp(path, "/api/v1/jobs")) {
		if (!strcmp(method, "POST"))
			return api_jobs_post(m, body, out);
		*out = json_pack("{s:o}", "jobs", mst_jobs_json(m));
		return 200;
	}
	if (!strcmp(path, "/api/v1/job"))
		return api_job_get(m, query, out);
	if (!strcmp(path, "/api/v1/job/cancel"))
		return api_job_cancel(m, body, out);
	if (!strcmp(path, "/api/v1/policies")) {
		*out = json_pack("{s:o}", "policies", mst_policies_json(m));
		return 200;
	}
	if (!strcmp(path, "/api/v1/policy"))
		return api_policy_post(m, body, out);
	return api_workers(m, out);
}
