/* The master's jobs, policies and walk, driven directly (no background
 * threads: each job runs on the test's thread with mst_job_run) against a
 * file:// store. Workers are registered by hand where a test needs one;
 * their addresses lead nowhere, which is the failure path under test. */
#include <criterion/criterion.h>
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "cistern/msgtype.h"
#include "cistern/proto/master.pb-c.h"
#include "cistern/proto/worker.pb-c.h"
#include "cistern/rpc.h"
#include "cistern/time.h"
#include "master.h"

static char tmp[256], store[300], data[300];
static cis_metrics *metrics;
static mst_master *m;
static uint64_t jobs_kept; /* the masters opened keep this many finished records (0: default) */

static void put_file(const char *dir, const char *name, const char *content)
{
	char p[1024];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	cr_assert(f);
	fputs(content, f);
	fclose(f);
}

/* The master without background threads (jobs run by mst_job_run),
 * workers silent for lost_ms lost. */
static void open_master_lost_after(uint64_t lost_ms)
{
	cis_errmsg em = {{0}};
	mst_open_opts o = {.data_dir = data,
	                   .map_size = 1ull << 30,
	                   .heartbeat_ms = 100,
	                   .lost_timeout_ms = lost_ms,
	                   .metrics = metrics,
	                   .jobs_kept = jobs_kept,
	                   .no_background = true};
	int rc = mst_open(&o, &m, &em);
	cr_assert_eq(rc, 0, "mst_open: %s", em.text);
}

static void open_master(void)
{
	open_master_lost_after(200);
}

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/cis-jobs-XXXXXX");
	cr_assert(mkdtemp(tmp));
	snprintf(store, sizeof(store), "%s/store", tmp);
	snprintf(data, sizeof(data), "%s/data", tmp);
	mkdir(store, 0755);
	char sub[400];
	snprintf(sub, sizeof(sub), "%s/sub", store);
	mkdir(sub, 0755);
	put_file(store, "a.txt", "hello");
	put_file(store, "b.txt", "world!");
	put_file(sub, "c.bin", "xyz");
	metrics = cis_metrics_new();
	open_master();
	char uri[400];
	cis_errmsg em = {{0}};
	snprintf(uri, sizeof(uri), "file://%s", store);
	mst_mount_req r = {.path = "/m", .uri = uri, .sync_interval_ms = 0};
	cr_assert_eq(mst_mount_add(m, &r, NULL, &em), 0, "%s", em.text);
}

static void teardown(void)
{
	mst_close(m);
	cis_metrics_free(metrics);
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(jobs, .init = setup, .fini = teardown, .timeout = 60);

/* Register a worker at 127.0.0.1:port (asking for id, 0: a new one); its id. */
static uint64_t register_worker(uint16_t port, uint64_t capacity, uint64_t id)
{
	Cis__WorkerInfo wi = CIS__WORKER_INFO__INIT;
	Cis__RegisterWorkerRequest rq = CIS__REGISTER_WORKER_REQUEST__INIT;
	ProtobufCMessage *rep;
	wi.host = "127.0.0.1";
	wi.rpc_port = port;
	wi.unix_socket = "";
	wi.hostname = "fake";
	wi.capacity = capacity;
	wi.id = id;
	rq.worker = &wi;
	cis_errmsg em = {{0}};
	cr_assert_eq(mst_workers_register(m->workers, &rq.base, &rep, &em), 0, "%s", em.text);
	uint64_t got = ((Cis__RegisterWorkerReply *)rep)->worker_id;
	protobuf_c_message_free_unpacked(rep, NULL);
	return got;
}

/* A worker at an address where nothing listens (port 1). */
static uint64_t fake_worker(uint64_t capacity)
{
	return register_worker(1, capacity, 0);
}

/* A file's first block, as the master names it. */
static cis_block_id first_block(const char *path)
{
	cis_errmsg em = {{0}};
	mst_inode f;
	cr_assert_eq(mst_ns_resolve(m, path, &f, &em), 0, "%s", em.text);
	uint64_t bs = 0;
	cr_assert(mst_file_blocks(m, &f, &bs) >= 1);
	return cis_block_id_make(f.mount_id, f.key, f.version, bs, 0);
}

/* A worker that answers with handler, registered (its id into *id when not
 * NULL); the caller stops it. */
static cis_rpc_server *serve_worker_as(cis_rpc_handler_fn handler, uint64_t *id)
{
	cis_errmsg em = {{0}};
	cis_rpc_server_opts so = {
	    .bind_addr = "127.0.0.1", .io_threads = 1, .name = "fake", .handler = handler};
	cis_rpc_server *srv;
	cr_assert_eq(cis_rpc_server_start(&so, &srv, &em), 0, "%s", em.text);
	uint64_t got = register_worker(cis_rpc_server_port(srv), 1 << 20, 0);
	if (id)
		*id = got;
	return srv;
}

static cis_rpc_server *serve_worker(cis_rpc_handler_fn handler)
{
	return serve_worker_as(handler, NULL);
}

/* The master again, with its background threads (jobs run by themselves,
 * workers silent for lost_ms are lost). */
static void reopen_with_threads(uint64_t lost_ms)
{
	cis_errmsg em = {{0}};
	mst_close(m);
	mst_open_opts o = {.data_dir = data,
	                   .map_size = 1ull << 30,
	                   .heartbeat_ms = 100,
	                   .lost_timeout_ms = lost_ms,
	                   .metrics = metrics};
	cr_assert_eq(mst_open(&o, &m, &em), 0, "%s", em.text);
}

static json_int_t count(json_t *job, const char *k)
{
	return json_integer_value(json_object_get(json_object_get(job, "counts"), k));
}

static const char *str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

/* Submit r and run it here to its end; its id. */
static uint64_t submit_and_run(mst_job_req *r)
{
	cis_errmsg em = {{0}};
	uint64_t id;
	cr_assert_eq(mst_job_submit(m, r, &id, &em), 0, "%s", em.text);
	cr_assert_eq(mst_job_run(m, id), 0);
	return id;
}

Test(jobs, path_order_is_the_walk_order)
{
	cr_assert_eq(mst_path_order("/a/b", "/a/b"), 0);
	cr_assert_lt(mst_path_order("/a/b", "/a/c"), 0);
	cr_assert_lt(mst_path_order("/a/b/c", "/a/b c"), 0, "a directory's files come before b c");
	cr_assert_lt(mst_path_order("/a/b", "/a/b/c"), 0);
	cr_assert_gt(mst_path_order("/a/\xc3\xa9", "/a/z"), 0, "bytes compare unsigned");
}

struct seen {
	char paths[8][64];
	size_t n;
};

static int collect(void *arg, const char *path, const mst_inode *f)
{
	struct seen *s = arg;
	cr_assert_eq(f->type, MST_FILE);
	cr_assert_lt(s->n, 8);
	snprintf(s->paths[s->n++], 64, "%s", path);
	return 0;
}

Test(jobs, walk_lists_and_visits_in_order)
{
	struct seen s = {0}, s2 = {0};
	cis_errmsg em = {{0}};
	/* nothing listed yet: the LMDB-only walk does not reach the store */
	cr_assert_eq(mst_walk(m, "/m", false, collect, NULL, &s, &em), 0, "%s", em.text);
	cr_assert_eq(s.n, 0);
	cr_assert_eq(mst_walk(m, "/m", true, collect, NULL, &s, &em), 0, "%s", em.text);
	cr_assert_eq(s.n, 3);
	cr_assert_str_eq(s.paths[0], "/m/a.txt");
	cr_assert_str_eq(s.paths[1], "/m/b.txt");
	cr_assert_str_eq(s.paths[2], "/m/sub/c.bin");
	cr_assert_eq(mst_walk(m, "/m", false, collect, NULL, &s2, &em), 0);
	cr_assert_eq(s2.n, 3, "once listed, LMDB holds the tree");
	cr_assert_neq(mst_walk(m, "/m/missing", true, collect, NULL, &s2, &em), 0);
	cr_assert(strstr(em.text, "missing"), "error names the path: %s", em.text);
}

/* The one path with a replication target is path. */
static void only_replicas_policy_is(const char *path)
{
	char **paths;
	size_t n;
	cr_assert_eq(mst_policies_with_replicas(m, &paths, &n), 0);
	cr_assert_eq(n, 1);
	cr_assert_str_eq(paths[0], path);
	mst_strv_free(paths, n);
}

Test(jobs, policies_inherit_and_recursive_setrep_clears_below)
{
	cis_errmsg em = {{0}};
	mst_policy p;
	cr_assert_eq(mst_policy_update(m, "/m", 2, -1, 60, false, &em), 0, "%s", em.text);
	cr_assert_eq(mst_policy_update(m, "/m/sub", 3, 1, 0, false, &em), 0, "%s", em.text);
	cr_assert_eq(mst_policy_resolve(m, "/m/a.txt", &p), 0);
	cr_assert_eq(p.replicas, 2);
	cr_assert_eq(p.replicas_from, 2);
	cr_assert_eq(p.pin, -1);
	cr_assert_eq(p.ttl_s, 60);
	cr_assert_eq(mst_policy_resolve(m, "/m/sub/c.bin", &p), 0);
	cr_assert_eq(p.replicas, 3, "the nearest ancestor wins");
	cr_assert_eq(p.pin, 1);
	cr_assert_eq(p.ttl_s, 0, "ttl off below overrides the ttl above");
	cr_assert_eq(mst_policy_update(m, "/m", 1, -1, -2, true, &em), 0, "%s", em.text);
	cr_assert_eq(mst_policy_resolve(m, "/m/sub/c.bin", &p), 0);
	cr_assert_eq(p.replicas, 1, "-R dropped the target below");
	cr_assert_eq(p.pin, 1, "-R leaves other fields");
	cr_assert_eq(mst_policy_resolve(m, "/other", &p), 0);
	cr_assert_eq(p.replicas, 0);
	cr_assert_eq(mst_policy_update(m, "/m", 65, -1, -2, false, &em), -EINVAL);
	cr_assert_neq(mst_policy_update(m, "/m/../x", 2, -1, -2, false, &em), 0);
	only_replicas_policy_is("/m");
}

Test(jobs, recursive_setrep_clears_every_target_below_and_only_below)
{
	cis_errmsg em = {{0}};
	mst_policy p;
	cr_assert_eq(mst_policy_update(m, "/m", 2, -1, -2, false, &em), 0, "%s", em.text);
	cr_assert_eq(mst_policy_update(m, "/m/a", 3, -1, -2, false, &em), 0, "%s", em.text);
	cr_assert_eq(mst_policy_update(m, "/m/b", 4, 1, -2, false, &em), 0, "%s", em.text);
	cr_assert_eq(mst_policy_update(m, "/m/b/c", 5, -1, -2, false, &em), 0, "%s", em.text);
	cr_assert_eq(mst_policy_update(m, "/mx", 6, -1, -2, false, &em), 0, "%s", em.text);
	cr_assert_eq(mst_policy_update(m, "/m", 1, -1, -2, true, &em), 0, "%s", em.text);
	char **paths;
	size_t n;
	cr_assert_eq(mst_policies_with_replicas(m, &paths, &n), 0);
	cr_assert_eq(n, 2, "targets left: /m and the sibling /mx");
	cr_assert_str_eq(paths[0], "/m");
	cr_assert_str_eq(paths[1], "/mx");
	mst_strv_free(paths, n);
	cr_assert_eq(mst_policy_resolve(m, "/m/b/c/f", &p), 0);
	cr_assert_eq(p.replicas, 1);
	cr_assert_eq(p.pin, 1, "the pin of /m/b stays");
	cr_assert_eq(mst_policy_resolve(m, "/mx/f", &p), 0);
	cr_assert_eq(p.replicas, 6, "not below /m: left alone");
}

Test(jobs, load_without_workers_fails_each_file_once_and_persists)
{
	mst_job_req r = {.type = "load", .path = "/m", .replicas = 2};
	uint64_t id;
	id = submit_and_run(&r);
	json_t *j = mst_job_json(m, id, 10);
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_eq(count(j, "files"), 3);
	cr_assert_eq(count(j, "files_failed"), 3);
	cr_assert_eq(count(j, "blocks"), 3);
	cr_assert_eq(count(j, "bytes"), 14);
	cr_assert_eq(count(j, "tasks_loaded"), 0);
	json_t *f0 = json_array_get(json_object_get(j, "failures"), 0);
	cr_assert_str_eq(str(f0, "path"), "/m/a.txt");
	cr_assert(strstr(str(f0, "error"), "no live worker"), "%s", str(f0, "error"));
	json_decref(j);
	/* the load set the replication target */
	mst_policy p;
	mst_policy_resolve(m, "/m/sub", &p);
	cr_assert_eq(p.replicas, 2);
	/* the record survives a restart */
	mst_close(m);
	open_master();
	j = mst_job_json(m, id, 10);
	cr_assert(j);
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_eq(count(j, "files_failed"), 3);
	json_decref(j);
	json_t *all = mst_jobs_json(m);
	cr_assert_eq(json_array_size(all), 1);
	json_decref(all);
}

Test(jobs, unreachable_worker_fails_files_with_its_error)
{
	fake_worker(1 << 30);
	mst_job_req r = {.type = "load", .path = "/m/sub"};
	uint64_t id;
	id = submit_and_run(&r);
	json_t *j = mst_job_json(m, id, 10);
	cr_assert_eq(count(j, "files"), 1);
	cr_assert_eq(count(j, "files_failed"), 1);
	cr_assert_eq(count(j, "tasks_failed"), 1);
	json_t *f0 = json_array_get(json_object_get(j, "failures"), 0);
	cr_assert_str_eq(str(f0, "path"), "/m/sub/c.bin");
	cr_assert(strstr(str(f0, "error"), "127.0.0.1"), "the worker's error: %s",
	          str(f0, "error"));
	json_decref(j);
}

/* Senders commit files (and move the job's cursor) while the walk is still
 * going: each of many files must be counted once. The walk once compared
 * paths with the live cursor, which a sender could free under it. */
Test(jobs, files_committed_during_the_walk_are_each_counted_once)
{
	char dir[400], name[32];
	enum { NFILES = 3000 };

	snprintf(dir, sizeof(dir), "%s/many", store);
	cr_assert_eq(mkdir(dir, 0755), 0);
	for (int i = 0; i < NFILES; i++) {
		snprintf(name, sizeof(name), "f%05d", i);
		put_file(dir, name, "x");
	}
	fake_worker(1 << 30);
	mst_job_req r = {.type = "load", .path = "/m/many", .parallel = 4};
	uint64_t id;
	id = submit_and_run(&r);
	json_t *j = mst_job_json(m, id, 0);
	cr_assert_eq(count(j, "files"), NFILES);
	cr_assert_eq(count(j, "files_failed"), NFILES, "the worker is unreachable");
	cr_assert_eq(count(j, "tasks_failed"), NFILES);
	json_decref(j);
}

Test(jobs, metadata_only_lists_without_tasks)
{
	mst_job_req r = {.type = "load", .path = "/m", .metadata_only = true};
	uint64_t id;
	id = submit_and_run(&r);
	json_t *j = mst_job_json(m, id, 10);
	cr_assert_eq(count(j, "files"), 3);
	cr_assert_eq(count(j, "files_failed"), 0);
	cr_assert_eq(count(j, "tasks_failed"), 0);
	json_decref(j);
}

Test(jobs, a_running_job_resumes_after_restart)
{
	cis_errmsg em = {{0}};
	mst_job_req r = {.type = "load", .path = "/m"};
	uint64_t id;
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	json_t *j = mst_job_json(m, id, 0);
	cr_assert_str_eq(str(j, "state"), "running");
	json_decref(j);
	/* "crash" before it ran: the record says running */
	mst_close(m);
	open_master();
	cr_assert_eq(mst_jobs_resume(m), 0);
	cr_assert_eq(mst_job_run(m, id), 0);
	j = mst_job_json(m, id, 10);
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_eq(count(j, "files"), 3, "each file counted once");
	json_decref(j);
	cr_assert_eq(mst_job_cancel(m, id, &em), -EINVAL, "a finished job cannot be cancelled");
	cr_assert_eq(mst_job_cancel(m, 999, &em), -ENOENT);
}

/* A job taken while the master stops (after mst_jobs_stop, when store
 * requests are being abandoned) must not run into those failures: it is
 * kept as running, untouched, for the next start. */
Test(jobs, a_job_taken_while_the_master_stops_waits_for_the_next_start)
{
	cis_errmsg em = {{0}};
	mst_job_req r = {.type = "load", .path = "/m"};
	uint64_t id;
	reopen_with_threads(60000);
	mst_jobs_stop(m->jobs);
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	cis_sleep_ms(300); /* without workers, a job that ran would be done, every file failed */
	json_t *j = mst_job_json(m, id, 10);
	cr_assert_str_eq(str(j, "state"), "running");
	cr_assert_eq(count(j, "files_failed"), 0);
	json_decref(j);
	mst_close(m);
	open_master();
	j = mst_job_json(m, id, 10);
	cr_assert_str_eq(str(j, "state"), "running", "the record was not kept for the next start");
	json_decref(j);
	cr_assert_eq(mst_jobs_resume(m), 0);
	cr_assert_eq(mst_job_run(m, id), 0);
	j = mst_job_json(m, id, 10);
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_eq(count(j, "files"), 3);
	json_decref(j);
}

Test(jobs, pin_larger_than_the_cache_is_refused)
{
	cis_errmsg em = {{0}};
	uint64_t id;
	mst_job_req r = {.type = "pin", .path = "/m"};
	fake_worker(4); /* 4 bytes of cache; /m holds 14 */
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), -ENOSPC);
	cr_assert(strstr(em.text, "pin /m") && strstr(em.text, "more than the cache"), "%s",
	          em.text);
	mst_job_req r2 = {.type = "pin", .path = "/m/sub/c.bin"}; /* 3 bytes fit */
	cr_assert_eq(mst_job_submit(m, &r2, &id, &em), 0, "%s", em.text);
	mst_job_req bad = {.type = "bogus", .path = "/m"};
	cr_assert_eq(mst_job_submit(m, &bad, &id, &em), -EINVAL);
}

static int api(const char *method, const char *path, const char *query_id, const char *body,
               json_t **out)
{
	cis_kvlist q = CIS_KVLIST_INIT;
	json_t *b = body ? json_loads(body, 0, NULL) : NULL;
	if (query_id)
		cis_kvlist_set(&q, "id", query_id);
	int st = mst_api_handle(m, method, path, &q, b, out);
	json_decref(b);
	cis_kvlist_free(&q);
	return st;
}

/* POST /api/v1/policy {"path": path, "pin": pin}: the status; the error
 * text into msg (when not NULL). */
static int pin_api(const char *path, bool pin, char *msg, size_t msg_len)
{
	char body[200];
	json_t *o = NULL;
	snprintf(body, sizeof(body), "{\"path\": \"%s\", \"pin\": %s}", path,
	         pin ? "true" : "false");
	int st = api("POST", "/api/v1/policy", NULL, body, &o);
	if (msg)
		snprintf(msg, msg_len, "%s", o ? str(o, "error") ? str(o, "error") : "" : "");
	json_decref(o);
	return st;
}

Test(jobs, pins_together_larger_than_the_cache_are_refused)
{
	char msg[300];
	fake_worker(10); /* 10 bytes of cache; a.txt 5, b.txt 6, sub/c.bin 3 */
	cr_assert_eq(pin_api("/m/", true, NULL, 0), 507, "a trailing slash is the same path");
	cr_assert_eq(pin_api("/m/b.txt", true, NULL, 0), 200);
	cr_assert_eq(pin_api("/m/a.txt", true, msg, sizeof(msg)), 507, "6 + 5 bytes pinned");
	cr_assert(strstr(msg, "pin /m/a.txt") && strstr(msg, "11 B") && strstr(msg, "10 B"), "%s",
	          msg);
	cr_assert_eq(pin_api("/m/sub", true, NULL, 0), 200, "6 + 3 bytes");
	cr_assert_eq(pin_api("/m/sub", true, NULL, 0), 200, "pinned again: counted once");
	cr_assert_eq(pin_api("/m", true, NULL, 0), 507, "all 14 bytes");
	/* An unpinned file below a pinned directory takes no pinned space. */
	cr_assert_eq(pin_api("/m/b.txt", false, NULL, 0), 200);
	cr_assert_eq(pin_api("/m", true, msg, sizeof(msg)), 200, "a.txt 5 + sub 3: %s", msg);
	mst_policy p;
	mst_policy_resolve(m, "/m/b.txt", &p);
	cr_assert_eq(p.pin, 0, "the nearer unpin still holds");
	/* A pinned path gone from the store holds nothing and blocks no pin. */
	cr_assert_eq(pin_api("/m", false, NULL, 0), 200);
	char sub[400], c[420];
	snprintf(sub, sizeof(sub), "%s/sub", store);
	snprintf(c, sizeof(c), "%s/c.bin", sub);
	cr_assert_eq(unlink(c) | rmdir(sub), 0);
	cis_errmsg em = {{0}};
	uint64_t dirs;
	cr_assert_eq(mst_ns_sync(m, "/m", true, &dirs, &em), 0, "%s", em.text);
	cr_assert_eq(pin_api("/m/a.txt", true, msg, sizeof(msg)), 200, "%s", msg);
}

Test(jobs, api_checks_input)
{
	json_t *o;
#define EXPECT(st, ...)                                                                            \
	do {                                                                                       \
		int got = api(__VA_ARGS__, &o);                                                    \
		cr_assert_eq(got, st, "%s -> %d", #__VA_ARGS__, got);                              \
		json_decref(o);                                                                    \
	} while (0)
	EXPECT(400, "POST", "/api/v1/jobs", NULL, "{}");
	EXPECT(400, "POST", "/api/v1/jobs", NULL, "{\"path\": \"/m\", \"type\": \"bogus\"}");
	/* a pin job with no pin policy kept: capacity checks would not count it */
	EXPECT(400, "POST", "/api/v1/jobs", NULL, "{\"path\": \"/m\", \"type\": \"pin\"}");
	EXPECT(400, "POST", "/api/v1/jobs", NULL, "{\"path\": \"/m\", \"type\": \"unpin\"}");
	EXPECT(400, "POST", "/api/v1/jobs", NULL, "{\"path\": \"/m\", \"replicas\": 0}");
	EXPECT(400, "POST", "/api/v1/jobs", NULL, "{\"path\": \"/m\", \"replicas\": 99}");
	EXPECT(400, "POST", "/api/v1/jobs", NULL, "{\"path\": \"/m\", \"verify\": 3}");
	EXPECT(404, "POST", "/api/v1/jobs", NULL, "{\"path\": \"/nope\"}");
	EXPECT(201, "POST", "/api/v1/jobs", NULL, "{\"path\": \"/m\", \"bandwidth\": \"200M\"}");
	EXPECT(200, "GET", "/api/v1/jobs", NULL, NULL);
	EXPECT(400, "GET", "/api/v1/job", "abc", NULL);
	EXPECT(404, "GET", "/api/v1/job", "12345", NULL);
	EXPECT(404, "POST", "/api/v1/job/cancel", NULL, "{\"id\": 12345}");
	EXPECT(400, "POST", "/api/v1/job/cancel", NULL, "{\"id\": \"x\"}");
	EXPECT(405, "GET", "/api/v1/policy", NULL, NULL);
	EXPECT(400, "POST", "/api/v1/policy", NULL, "{\"path\": \"/m\"}");
	EXPECT(400, "POST", "/api/v1/policy", NULL, "{\"path\": \"/m\", \"ttl\": \"never\"}");
	/* seconds as ns would overflow: it used to be taken, and expire at once */
	EXPECT(400, "POST", "/api/v1/policy", NULL, "{\"path\": \"/m\", \"ttl\": 100000000000}");
	EXPECT(400, "POST", "/api/v1/policy", NULL, "{\"path\": \"/m\", \"replicas\": 0}");
	EXPECT(404, "POST", "/api/v1/policy", NULL, "{\"path\": \"/nope\", \"replicas\": 2}");
	cr_assert_eq(api("POST", "/api/v1/policy", NULL,
	                 "{\"path\": \"/m\", \"replicas\": 2, \"ttl\": 30}", &o),
	             200);
	json_t *p = json_object_get(o, "policy");
	cr_assert_eq(json_integer_value(json_object_get(p, "replicas")), 2);
	cr_assert_eq(json_integer_value(json_object_get(p, "ttl")), 30);
	json_decref(o);
	cr_assert_eq(api("GET", "/api/v1/policies", NULL, NULL, &o), 200);
	cr_assert_eq(json_array_size(json_object_get(o, "policies")), 1);
	json_decref(o);
	cr_assert_eq(api("GET", "/api/v1/report", NULL, NULL, &o), 200);
	json_t *mu = json_array_get(json_object_get(o, "mount_usage"), 0);
	cr_assert_str_eq(str(mu, "path"), "/m");
	cr_assert_eq(json_integer_value(json_object_get(mu, "cached_bytes")), 0);
	json_decref(o);
}

/* The newest job is a free of the path recorded under key ("path", or
 * "path_hex" for one that is not UTF-8). */
static void assert_last_job_frees(const char *key, const char *want)
{
	json_t *all = mst_jobs_json(m);
	json_t *last = json_array_get(all, json_array_size(all) - 1);
	cr_assert_str_eq(str(last, "type"), "free");
	cr_assert_str_eq(str(last, key), want);
	json_decref(all);
}

Test(jobs, ttl_frees_after_the_load)
{
	cis_errmsg em = {{0}};
	mst_job_req r = {.type = "load", .path = "/m", .metadata_only = true};
	uint64_t started;
	(void)submit_and_run(&r);
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 3600000000000LL, &started), 0);
	cr_assert_eq(started, 0, "no ttl, nothing expires");
	cr_assert_eq(mst_policy_update(m, "/m", -1, -1, 10, false, &em), 0);
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns(), &started), 0);
	cr_assert_eq(started, 0, "not yet");
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 11000000000LL, &started), 0);
	cr_assert_eq(started, 1, "a free job for the load's path");
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 11000000000LL, &started), 0);
	cr_assert_eq(started, 0, "only once");
	assert_last_job_frees("path", "/m");
}

/* A load that finished before a restart expires after it (the finished
 * loads are read from their records at open). */
Test(jobs, ttl_frees_a_load_finished_before_a_restart)
{
	cis_errmsg em = {{0}};
	mst_job_req r = {.type = "load", .path = "/m", .metadata_only = true};
	uint64_t started;
	(void)submit_and_run(&r);
	mst_close(m);
	open_master();
	cr_assert_eq(mst_policy_update(m, "/m", -1, -1, 10, false, &em), 0);
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 11000000000LL, &started), 0);
	cr_assert_eq(started, 1, "a free job for the load's path");
	assert_last_job_frees("path", "/m");
}

/* A cancelled load's blocks expire by the TTL too (only done ones did: what
 * a cancelled or failed load had fetched stayed cached for good). */
Test(jobs, ttl_frees_after_a_cancelled_load)
{
	cis_errmsg em = {{0}};
	mst_job_req r = {.type = "load", .path = "/m", .metadata_only = true};
	uint64_t id, started;
	cr_assert_eq(mst_policy_update(m, "/m", -1, -1, 10, false, &em), 0);
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0);
	cr_assert_eq(mst_job_cancel(m, id, &em), 0, "%s", em.text);
	cr_assert_eq(mst_job_run(m, id), 0);
	json_t *j = mst_job_json(m, id, 0);
	cr_assert_str_eq(str(j, "state"), "cancelled");
	json_decref(j);
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns(), &started), 0);
	cr_assert_eq(started, 0, "not yet");
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 11000000000LL, &started), 0);
	cr_assert_eq(started, 1, "a free job for the cancelled load's path");
	assert_last_job_frees("path", "/m");
}

/* A load of a path that is not UTF-8 (kept in hex in its record) expires
 * by its TTL like any other (it used to be passed over for good). */
Test(jobs, ttl_frees_a_load_of_a_path_not_utf8)
{
	cis_errmsg em = {{0}};
	char dir[sizeof(store) + 8];
	snprintf(dir, sizeof(dir), "%s/d\xff", store);
	cr_assert_eq(mkdir(dir, 0755), 0);
	put_file(dir, "f.bin", "ab");
	mst_job_req r = {.type = "load", .path = "/m/d\xff", .metadata_only = true};
	uint64_t started;
	(void)submit_and_run(&r);
	cr_assert_eq(mst_policy_update(m, "/m", -1, -1, 10, false, &em), 0);
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 11000000000LL, &started), 0);
	cr_assert_eq(started, 1, "a free job for the load's path");
	assert_last_job_frees("path_hex", "2f6d2f64ff");
}

/* An older load's TTL does not free what a newer load brings in: one still
 * running (inside the path or over it) makes the free wait, one that ended
 * cancelled does not, and a finished one over the path takes the blocks
 * over (the older load expires without a free; the newer one's expiry
 * frees them). TTL 1 s. */
static bool expired(uint64_t id)
{
	json_t *j = mst_job_json(m, id, 0);
	bool e = json_is_true(json_object_get(j, "expired"));
	json_decref(j);
	return e;
}

Test(jobs, ttl_of_an_older_load_spares_a_newer_one)
{
	cis_errmsg em = {{0}};
	uint64_t id1, id2, id3, id4, started;
	int64_t ms = 1000000LL;
	cr_assert_eq(mst_policy_update(m, "/m", -1, -1, 1, false, &em), 0);
	mst_job_req r = {.type = "load", .path = "/m", .metadata_only = true};
	mst_job_req in = {.type = "load", .path = "/m/sub", .metadata_only = true};
	cr_assert_eq(mst_job_submit(m, &r, &id1, &em), 0);
	cr_assert_eq(mst_job_run(m, id1), 0);
	cr_assert_eq(mst_job_submit(m, &in, &id2, &em), 0); /* running until run below */
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 2000 * ms, &started), 0);
	cr_assert_eq(started, 0, "a running load inside the path holds the older one's free");
	cr_assert_eq(mst_job_submit(m, &r, &id3, &em), 0); /* /m again, running */
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 2000 * ms, &started), 0);
	cr_assert_eq(started, 0);
	cr_assert_not(expired(id1), "a running load over the path may yet fail: no takeover");
	cr_assert_eq(mst_job_cancel(m, id3, &em), 0, "%s", em.text);
	cis_sleep_ms(1100); /* id1 is due from now on */
	cr_assert_eq(mst_job_run(m, id2), 0);
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 500 * ms, &started), 0);
	cr_assert_eq(started, 0, "the load inside ended with its TTL to run, id3 was cancelled");
	cr_assert_not(expired(id1));
	cr_assert_eq(mst_job_submit(m, &r, &id4, &em), 0);
	cr_assert_eq(mst_job_run(m, id4), 0);
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 500 * ms, &started), 0);
	cr_assert_eq(started, 0, "/m was loaded again: taken over");
	cr_assert(expired(id1), "taken over: expired without a free");
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 2000 * ms, &started), 0);
	cr_assert_eq(started, 2, "then /m/sub's and /m's newest loads expire: %llu",
	             (unsigned long long)started);
}

/* ---- a worker that answers Load ---- */

/* Every block cached (lw_cached) or fetched in full, answered after
 * lw_delay_ms on a thread of its own (lw_drain answers those at once).
 * The first LW_KEPT batches' arrival times and block counts are kept:
 * slots below lw_batches are written (one server thread writes them,
 * before it counts the batch). */
#define LW_KEPT 256
static atomic_int lw_cached, lw_delay_ms, lw_release, lw_late;
static atomic_uint lw_blocks, lw_batches;
static uint64_t lw_batch_ms[LW_KEPT];
static size_t lw_batch_blocks[LW_KEPT];

struct lw_call {
	cis_rpc_conn *conn;
	cis_frame_hdr hdr;
	Cis__LoadRequest *q;
	uint64_t due_ms;
};

static void lw_answer(cis_rpc_conn *conn, const cis_frame_hdr *hdr, const Cis__LoadRequest *q)
{
	Cis__BlockResult *res = calloc(q->n_blocks, sizeof(*res));
	Cis__BlockResult **rp = calloc(q->n_blocks, sizeof(*rp));
	cr_assert(res && rp);
	for (size_t i = 0; i < q->n_blocks; i++) {
		const Cis__BlockRef *b = q->blocks[i];
		uint64_t end = (b->index + 1) * b->block_size;
		cis__block_result__init(&res[i]);
		res[i].id = b->id;
		res[i].length =
		    (end > b->file_size ? b->file_size : end) - b->index * b->block_size;
		res[i].was_cached = atomic_load(&lw_cached);
		rp[i] = &res[i];
	}
	Cis__LoadReply r = CIS__LOAD_REPLY__INIT;
	r.job_id = q->job_id;
	r.n_results = q->n_blocks;
	r.results = rp;
	cis_rpc_reply(conn, hdr, &r.base, 0);
	free(res);
	free(rp);
}

static void *lw_late_main(void *arg)
{
	struct lw_call *l = arg;
	while (cis_mono_ms() < l->due_ms && !atomic_load(&lw_release))
		cis_sleep_ms(10);
	lw_answer(l->conn, &l->hdr, l->q);
	cis__load_request__free_unpacked(l->q, NULL);
	cis_rpc_conn_unref(l->conn);
	free(l);
	atomic_fetch_sub(&lw_late, 1);
	return NULL;
}

static void load_worker(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr, const uint8_t *msg,
                        struct evbuffer *data)
{
	(void)ctx;
	(void)data;
	if (hdr->type != CIS_MSG_WORKER_LOAD) {
		cis_rpc_reply_error(conn, hdr, -ENOTSUP, "not in this test");
		return;
	}
	Cis__LoadRequest *q = cis__load_request__unpack(NULL, hdr->msg_len, msg);
	cr_assert(q);
	unsigned k = atomic_load(&lw_batches);
	if (k < LW_KEPT) {
		lw_batch_ms[k] = cis_mono_ms();
		lw_batch_blocks[k] = q->n_blocks;
	}
	atomic_fetch_add(&lw_blocks, (unsigned)q->n_blocks);
	atomic_fetch_add(&lw_batches, 1);
	int delay = atomic_load(&lw_delay_ms);
	if (!delay) {
		lw_answer(conn, hdr, q);
		cis__load_request__free_unpacked(q, NULL);
		return;
	}
	struct lw_call *l = malloc(sizeof(*l));
	cr_assert(l);
	*l = (struct lw_call){conn, *hdr, q, cis_mono_ms() + (uint64_t)delay};
	cis_rpc_conn_ref(conn);
	atomic_fetch_add(&lw_late, 1);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, lw_late_main, l), 0);
	pthread_detach(t);
}

/* Answer the delayed calls now and wait until they are. */
static void lw_drain(void)
{
	atomic_store(&lw_release, 1);
	while (atomic_load(&lw_late))
		cis_sleep_ms(10);
}

/* Nothing expires while the master stops: a load the stop put on hold
 * still holds an older load's blocks (it resumes at the next start), and a
 * free taken now would run beside it then. */
Test(jobs, nothing_expires_while_the_master_stops)
{
	cis_errmsg em = {{0}};
	uint64_t id, started;
	cr_assert_eq(mst_policy_update(m, "/m", -1, -1, 1, false, &em), 0);
	mst_job_req r = {.type = "load", .path = "/m", .metadata_only = true};
	(void)submit_and_run(&r);
	mst_jobs_stop(m->jobs);
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 5000000000LL, &started), 0);
	cr_assert_eq(started, 0, "a free was started while the master stops");
}

/* A worker that answers Pin, Free and Load (as load_worker does) and
 * counts the blocks it was asked to pin, unpin, free, and load with and
 * without pinning. */
static struct {
	pthread_mutex_t lock;
	unsigned pinned, unpinned, freed, loaded_pinned, loaded_plain;
} seen = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void recording_worker(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                             const uint8_t *msg, struct evbuffer *data)
{
	(void)ctx;
	(void)data;
	if (hdr->type == CIS_MSG_WORKER_PIN) {
		Cis__PinRequest *q = cis__pin_request__unpack(NULL, hdr->msg_len, msg);
		cr_assert(q);
		pthread_mutex_lock(&seen.lock);
		*(q->pin ? &seen.pinned : &seen.unpinned) += (unsigned)q->n_ids;
		pthread_mutex_unlock(&seen.lock);
		Cis__PinReply r = CIS__PIN_REPLY__INIT;
		r.changed = (uint32_t)q->n_ids;
		cis_rpc_reply(conn, hdr, &r.base, 0);
		cis__pin_request__free_unpacked(q, NULL);
		return;
	}
	if (hdr->type == CIS_MSG_WORKER_FREE) {
		Cis__FreeRequest *q = cis__free_request__unpack(NULL, hdr->msg_len, msg);
		cr_assert(q);
		pthread_mutex_lock(&seen.lock);
		seen.freed += (unsigned)q->n_ids;
		pthread_mutex_unlock(&seen.lock);
		Cis__FreeReply r = CIS__FREE_REPLY__INIT;
		r.freed = (uint32_t)q->n_ids;
		cis_rpc_reply(conn, hdr, &r.base, 0);
		cis__free_request__free_unpacked(q, NULL);
		return;
	}
	if (hdr->type == CIS_MSG_WORKER_LOAD) {
		Cis__LoadRequest *q = cis__load_request__unpack(NULL, hdr->msg_len, msg);
		cr_assert(q);
		pthread_mutex_lock(&seen.lock);
		*(q->pin ? &seen.loaded_pinned : &seen.loaded_plain) += (unsigned)q->n_blocks;
		pthread_mutex_unlock(&seen.lock);
		cis__load_request__free_unpacked(q, NULL);
		load_worker(ctx, conn, hdr, msg, data);
		return;
	}
	cis_rpc_reply_error(conn, hdr, -ENOTSUP, "not in this test");
}

/* POST /api/v1/policy {"path": path, "pin": pin}, then run its job. */
static void pin_job(const char *path, bool pin)
{
	char body[200];
	json_t *o = NULL;
	snprintf(body, sizeof(body), "{\"path\": \"%s\", \"pin\": %s}", path,
	         pin ? "true" : "false");
	cr_assert_eq(api("POST", "/api/v1/policy", NULL, body, &o), 200);
	uint64_t id = (uint64_t)json_integer_value(json_object_get(o, "job"));
	json_decref(o);
	cr_assert_eq(mst_job_run(m, id), 0);
}

/* pin, unpin and load leave alone a file below the job's path whose own
 * (nearer) pin setting says otherwise: an unpinned file is not pinned by a
 * pin of its directory, pinned data stays pinned through an unpin of its
 * parent, and a load pins what lies below a pinned path. */
Test(jobs, nearer_pin_settings_win_over_the_jobs_path)
{
	cis_rpc_server *srv = serve_worker(recording_worker);

	json_t *j;
	/* a.txt, b.txt, sub/c.bin: one block each */
	pin_job("/m/b.txt", false);
	cr_assert_eq(seen.unpinned, 1, "the unpin of b.txt");
	pin_job("/m", true);
	cr_assert_eq(seen.pinned, 2, "pin /m pinned %u blocks; b.txt is unpinned", seen.pinned);
	pin_job("/m/sub", true);
	seen.unpinned = 0;
	pin_job("/m", false);
	cr_assert_eq(seen.unpinned, 2, "unpin /m unpinned %u blocks: a.txt and b.txt, not sub",
	             seen.unpinned);

	mst_job_req r = {.type = "load", .path = "/m"};
	uint64_t id;
	id = submit_and_run(&r);
	j = mst_job_json(m, id, 10);
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_eq(count(j, "files_failed"), 0);
	json_decref(j);
	cr_assert_eq(seen.loaded_pinned, 1, "sub/c.bin is loaded pinned (%u)", seen.loaded_pinned);
	cr_assert_eq(seen.loaded_plain, 2, "a.txt and b.txt are not (%u)", seen.loaded_plain);
	cis_rpc_server_stop(srv);
}

/* A load of /m, run, under a 10 s TTL taken as passed: the id of the free
 * job the expiry submitted (not run yet). */
static uint64_t load_m_and_expire(void)
{
	cis_errmsg em = {{0}};
	mst_job_req r = {.type = "load", .path = "/m"};
	uint64_t started;
	(void)submit_and_run(&r);
	cr_assert_eq(mst_policy_update(m, "/m", -1, -1, 10, false, &em), 0);
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 11000000000LL, &started), 0);
	cr_assert_eq(started, 1);
	json_t *all = mst_jobs_json(m);
	json_t *last = json_array_get(all, json_array_size(all) - 1);
	cr_assert_str_eq(str(last, "type"), "free");
	uint64_t fid = (uint64_t)json_integer_value(json_object_get(last, "id"));
	json_decref(all);
	return fid;
}

/* The free a TTL starts leaves alone the files the pin settings pin (it
 * used to free them with the rest). */
Test(jobs, ttl_free_keeps_pinned_files)
{
	cis_rpc_server *srv = serve_worker(recording_worker);
	pin_job("/m/sub", true);
	uint64_t fid = load_m_and_expire();
	cr_assert_eq(mst_job_run(m, fid), 0);
	cr_assert_eq(seen.freed, 2, "a.txt and b.txt freed, not the pinned sub/c.bin: %u",
	             seen.freed);
	cis_rpc_server_stop(srv);
}

/* A load of a path inside a TTL's free, submitted after that free: the
 * free leaves its files alone (it used to drop the blocks the newer load
 * had just counted as cached). */
Test(jobs, ttl_free_spares_files_a_newer_load_covers)
{
	cis_errmsg em = {{0}};
	cis_rpc_server *srv = serve_worker(recording_worker);
	uint64_t fid = load_m_and_expire(), lid;
	mst_job_req sub = {.type = "load", .path = "/m/sub"};
	cr_assert_eq(mst_job_submit(m, &sub, &lid, &em), 0, "%s", em.text);
	cr_assert_eq(mst_job_run(m, lid), 0);
	cr_assert_eq(mst_job_run(m, fid), 0);
	cr_assert_eq(seen.freed, 2, "a.txt and b.txt freed, not sub/c.bin loaded again: %u",
	             seen.freed);
	cis_rpc_server_stop(srv);
}

static void *run_job(void *arg)
{
	cr_assert_eq(mst_job_run(m, (uint64_t)(uintptr_t)arg), 0);
	return NULL;
}

/* A pin set while a load's batch is out: the pin job's walk finds the
 * blocks not cached yet, and the batch went out unpinned; the load pins
 * them once the worker has them. */
Test(jobs, a_pin_set_while_a_load_runs_pins_what_it_loads)
{
	cis_errmsg em = {{0}};
	cis_rpc_server *srv = serve_worker(recording_worker);
	atomic_store(&lw_delay_ms, 500);
	mst_job_req r = {.type = "load", .path = "/m"};
	uint64_t id;
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, run_job, (void *)(uintptr_t)id), 0);
	for (int i = 0; i < 200 && !atomic_load(&lw_batches); i++)
		cis_sleep_ms(10);
	cr_assert(atomic_load(&lw_batches), "no batch reached the worker");
	pin_job("/m", true);
	unsigned by_pin_job = seen.pinned;
	pthread_join(t, NULL);
	cr_assert_eq(seen.loaded_plain, 3, "the batch went out before the pin");
	cr_assert_eq(seen.pinned, by_pin_job + 3, "the load pinned %u blocks after its batch",
	             seen.pinned - by_pin_job);
	json_t *j = mst_job_json(m, id, 10);
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_eq(count(j, "files_failed"), 0);
	json_decref(j);
	cis_rpc_server_stop(srv);
}

/* A walk of a directory one of whose files leaves the store (and the
 * directory is listed again) while the walk is in it goes on after that
 * file's name instead of failing with a stale cookie. */
struct vanish {
	int n;
	char gone[64];
};

static int vanish_fn(void *arg, const char *path, const mst_inode *f)
{
	struct vanish *v = arg;
	(void)f;
	if (++v->n == 64) { /* the last file of the walk's first page */
		char p[600];
		snprintf(v->gone, sizeof(v->gone), "%s", strrchr(path, '/') + 1);
		snprintf(p, sizeof(p), "%s/big/%s", store, v->gone);
		cr_assert_eq(unlink(p), 0);
		cis_errmsg em = {{0}};
		uint64_t dirs;
		cr_assert_eq(mst_ns_sync(m, "/m/big", false, &dirs, &em), 0, "%s", em.text);
	}
	return 0;
}

/* The store's directory big with n files f000, f001, ... */
static void make_big(int n)
{
	char big[400];
	snprintf(big, sizeof(big), "%s/big", store);
	mkdir(big, 0755);
	for (int i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%03d", i);
		put_file(big, name, "x");
	}
}

Test(jobs, walk_goes_on_when_a_listed_file_leaves)
{
	make_big(200);
	struct vanish v = {0};
	cis_errmsg em = {{0}};
	cr_assert_eq(mst_walk(m, "/m/big", true, vanish_fn, NULL, &v, &em), 0, "%s", em.text);
	cr_assert_eq(v.n, 200, "each file visited once: %d", v.n);
}

/* A directory below the walk's path removed between two of its pages
 * ends there as one failure (efn), and the walk goes on; it used to fail
 * the whole walk. */
static int remove_big_at_64(void *arg, const char *path, const mst_inode *f)
{
	int *n = arg;
	(void)path;
	(void)f;
	if (++*n == 64) {
		char cmd[600];
		snprintf(cmd, sizeof(cmd), "rm -rf %s/big", store);
		cr_assert_eq(system(cmd), 0);
		cis_errmsg em = {{0}};
		uint64_t dirs;
		cr_assert_eq(mst_ns_sync(m, "/m", false, &dirs, &em), 0, "%s", em.text);
	}
	return 0;
}

static int count_dir_errors(void *arg, const char *path, int code, const char *msg)
{
	(void)path;
	(void)code;
	(void)msg;
	(*(int *)arg) += 1000;
	return 0;
}

Test(jobs, walk_goes_on_when_a_directory_leaves_between_pages)
{
	make_big(100);
	int n = 0;
	cis_errmsg em = {{0}};
	cr_assert_eq(mst_walk(m, "/m", true, remove_big_at_64, count_dir_errors, &n, &em), 0, "%s",
	             em.text);
	cr_assert_eq(n / 1000, 1, "one directory failure: %d", n);
	cr_assert_eq(n % 1000, 64 + 3, "the walk went on past big: %d files", n % 1000);
}

/* A job cancelled while batches are still out at a worker, with the
 * master stopped before the last comes back, stays cancelled after the
 * restart: the record said running (and the job resumed) when the master
 * stopped first, or when a batch that came back in between got the record
 * saved again. The worker answers the batch holding a.txt after 1.5 s, the
 * others after 6 s. */
struct late_reply {
	cis_rpc_conn *conn;
	cis_frame_hdr hdr;
	int ms;
};

static void *reply_late(void *arg)
{
	struct late_reply *l = arg;
	cis_sleep_ms(l->ms);
	cis_rpc_reply_error(l->conn, &l->hdr, -EIO, "late and failing");
	cis_rpc_conn_unref(l->conn);
	free(l);
	return NULL;
}

static void two_speed_worker(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                             const uint8_t *msg, struct evbuffer *data)
{
	(void)ctx;
	(void)data;
	if (hdr->type != CIS_MSG_WORKER_LOAD) {
		cis_rpc_reply_error(conn, hdr, -ENOTSUP, "not in this test");
		return;
	}
	Cis__LoadRequest *q = cis__load_request__unpack(NULL, hdr->msg_len, msg);
	bool first = false;
	for (size_t i = 0; q && i < q->n_blocks; i++)
		first |= strstr(q->blocks[i]->key, "a.txt") != NULL;
	if (q)
		cis__load_request__free_unpacked(q, NULL);
	struct late_reply *l = malloc(sizeof(*l));
	cr_assert(l);
	*l = (struct late_reply){conn, *hdr, first ? 1500 : 6000};
	cis_rpc_conn_ref(conn);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, reply_late, l), 0);
	pthread_detach(t);
}

Test(jobs, cancelled_job_stays_cancelled_across_a_restart)
{
	cis_errmsg em = {{0}};
	for (int i = 0; i < 100; i++) { /* more batches than the first */
		char n[32];
		snprintf(n, sizeof(n), "f%03d", i);
		put_file(store, n, "x");
	}
	reopen_with_threads(50000);
	cis_rpc_server *srv = serve_worker(two_speed_worker);
	mst_job_req r = {.type = "load", .path = "/m"};
	uint64_t id;
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	cis_sleep_ms(300); /* its batches are at the worker */
	cr_assert_eq(mst_job_cancel(m, id, &em), 0, "%s", em.text);
	cis_sleep_ms(3000); /* the first batch came back (and was saved), the others not */
	mst_close(m);
	cis_rpc_server_stop(srv);
	open_master();
	json_t *j = mst_job_json(m, id, 0);
	cr_assert_str_eq(str(j, "state"), "cancelled");
	json_decref(j);
}

/* A worker registering with a large persisted id is answered at once (the
 * id counter used to be stepped up to it one LMDB put at a time: days for
 * this one). */
Test(jobs, register_with_a_large_id_is_quick)
{
	cr_assert_eq(register_worker(1, 1, 1ull << 40),
	             1ull << 40); /* within the suite's timeout */
	uint64_t next = fake_worker(1);
	cr_assert_eq(next, (1ull << 40) + 1, "the next new worker's id: %llu",
	             (unsigned long long)next);
}

/* Finished jobs past the newest few leave memory; their records are still
 * what the API shows (from LMDB), and the list shows every job. */
Test(jobs, finished_jobs_leave_memory_not_the_records)
{
	mst_job_req r = {.type = "load", .path = "/m", .metadata_only = true};
	uint64_t first = 0, id;
	for (int i = 0; i < 80; i++) {
		id = submit_and_run(&r);
		if (!first)
			first = id;
	}
	json_t *j = mst_job_json(m, first, 10);
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_eq(count(j, "files"), 3);
	json_decref(j);
	json_t *all = mst_jobs_json(m);
	cr_assert_eq(json_array_size(all), 80);
	json_decref(all);
	/* a cancel is refused as for a job still in memory: 400, not 404 */
	char body[64];
	snprintf(body, sizeof(body), "{\"id\": %llu}", (unsigned long long)first);
	json_t *o = NULL;
	cr_assert_eq(api("POST", "/api/v1/job/cancel", NULL, body, &o), 400);
	cr_assert(strstr(str(o, "error") ?: "", "is already done"), "%s", str(o, "error"));
	json_decref(o);
}

/* The ids of the job records, oldest first, into ids[] (at most 128);
 * their count. */
static size_t record_ids(uint64_t *ids)
{
	json_t *all = mst_jobs_json(m);
	size_t n = json_array_size(all);
	cr_assert_leq(n, 128);
	for (size_t i = 0; i < n; i++)
		ids[i] =
		    (uint64_t)json_integer_value(json_object_get(json_array_get(all, i), "id"));
	json_decref(all);
	return n;
}

/* Records of finished jobs past the newest `jobs_kept` are deleted, oldest
 * first, at open and by the TTL tick after a job ends (with no TTL due, it
 * deletes and expires nothing else). A load whose TTL is still to run
 * keeps its record, left out of the count, across a restart too, unless a
 * newer load of its path that finished done takes it over; a load with no
 * TTL is counted like any job; a running job keeps its record. */
static void tick(void)
{
	uint64_t started;
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns(), &started), 0);
	cr_assert_eq(started, 0);
}

Test(jobs, finished_job_records_past_the_kept_are_deleted)
{
	cis_errmsg em = {{0}};
	uint64_t ids[128], frees[66], no_ttl, old_load, new_load, running, started;
	mst_close(m);
	jobs_kept = 200;
	open_master();
	cr_assert_eq(mst_policy_update(m, "/m/sub", -1, -1, 10, false, &em), 0, "%s", em.text);
	mst_job_req all = {.type = "load", .path = "/m", .metadata_only = true};
	mst_job_req sub = {.type = "load", .path = "/m/sub", .metadata_only = true};
	mst_job_req fr = {.type = "free", .path = "/m"};
	no_ttl = submit_and_run(&all);
	old_load = submit_and_run(&sub);
	for (int i = 0; i < 66; i++)
		frees[i] = submit_and_run(&fr);
	tick();
	cr_assert_eq(record_ids(ids), 68, "200 kept: none deleted");
	/* At open, keeping 64: the load with no TTL and the two oldest frees go. */
	mst_close(m);
	jobs_kept = 64;
	open_master();
	cr_assert_eq(record_ids(ids), 65);
	cr_assert_eq(ids[0], old_load);
	cr_assert_eq(ids[1], frees[2]);
	cr_assert_null(mst_job_json(m, no_ttl, 0));
	cr_assert_null(mst_job_json(m, frees[1], 0));
	/* A newer done load of the path takes the older one over; a running
	 * job stays. */
	cr_assert_eq(mst_job_submit(m, &fr, &running, &em), 0, "%s", em.text);
	new_load = submit_and_run(&sub);
	cr_assert(expired(old_load), "not taken over when the newer load of its path finished");
	tick();
	cr_assert_eq(record_ids(ids), 66);
	cr_assert_eq(ids[0], frees[2], "the older load's record went");
	cr_assert_eq(ids[64], running);
	cr_assert_eq(ids[65], new_load);
	/* The newer load's TTL still runs after a restart. */
	mst_close(m);
	open_master();
	cr_assert_eq(record_ids(ids), 66);
	cr_assert_eq(mst_jobs_expire(m, cis_wall_ns() + 11000000000LL, &started), 0);
	cr_assert_eq(started, 1, "the kept load expires after the restart");
	assert_last_job_frees("path", "/m/sub");
}

/* A worker that takes requests and never answers. */
static void silent_worker(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                          const uint8_t *msg, struct evbuffer *data)
{
	(void)ctx;
	(void)conn;
	(void)hdr;
	(void)msg;
	(void)data;
}

/* A load batch out at a worker that then goes silent fails as soon as the
 * worker is declared lost (its files fail: no other worker), not when the
 * call's 300 s timeout runs out. */
Test(jobs, load_batches_at_a_lost_worker_fail_at_once)
{
	cis_errmsg em = {{0}};
	reopen_with_threads(500);
	cis_rpc_server *srv = serve_worker(silent_worker);
	mst_job_req r = {.type = "load", .path = "/m"};
	uint64_t id;
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	json_t *j = NULL;
	for (int i = 0; i < 300; i++) { /* 30 s; the old way took 300 */
		json_decref(j);
		j = mst_job_json(m, id, 10);
		if (strcmp(str(j, "state"), "running"))
			break;
		cis_sleep_ms(100);
	}
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_eq(count(j, "files_failed"), 3, "each file failed: no live worker");
	json_decref(j);
	mst_close(m);
	cis_rpc_server_stop(srv);
	open_master();
}

/* A name that is not UTF-8 (a file:// store may hold any bytes) keeps its
 * place in the job's record: the cursor and the failure's path in hex, so a
 * resumed job skips what it did (the cursor used to be dropped: the walk
 * started over and counted those files twice). */
Test(jobs, names_not_utf8_keep_the_cursor_and_the_failures)
{
	put_file(store, "\xff\xfe.bin", "ab");
	mst_job_req r = {.type = "load", .path = "/m"};
	uint64_t id;
	id = submit_and_run(&r);
	mst_close(m);
	open_master();
	json_t *j = mst_job_json(m, id, 10);
	cr_assert_eq(count(j, "files_failed"), 4);
	cr_assert_str_eq(str(j, "cursor_hex"), "2f6d2ffffe2e62696e", "%s", str(j, "cursor_hex"));
	json_t *f = json_object_get(j, "failures");
	cr_assert_eq(json_array_size(f), 4, "every failure kept");
	cr_assert_str_eq(str(json_array_get(f, 3), "path_hex"), "2f6d2ffffe2e62696e");
	json_decref(j);
	/* ls shows the entry (it used to leave it out), its odd bytes as '?' */
	cis_kvlist q = CIS_KVLIST_INIT;
	cis_kvlist_set(&q, "path", "/m");
	json_t *o = NULL;
	cr_assert_eq(mst_api_handle(m, "GET", "/api/v1/ls", &q, NULL, &o), 200);
	cis_kvlist_free(&q);
	json_t *ents = json_object_get(o, "entries");
	cr_assert_eq(json_array_size(ents), 4);
	cr_assert_str_eq(str(json_array_get(ents, 3), "name"), "??.bin");
	json_decref(o);
}

/* A worker that answers Free and counts the calls. */
static atomic_uint frees_seen;

static void freeing_worker(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                           const uint8_t *msg, struct evbuffer *data)
{
	(void)ctx;
	(void)msg;
	(void)data;
	if (hdr->type != CIS_MSG_WORKER_FREE) {
		cis_rpc_reply_error(conn, hdr, -ENOTSUP, "not in this test");
		return;
	}
	atomic_fetch_add(&frees_seen, 1);
	Cis__FreeReply r = CIS__FREE_REPLY__INIT;
	r.freed = 1;
	cis_rpc_reply(conn, hdr, &r.base, 0);
}

/* A heartbeat from worker id, reporting block bid added (or nothing). */
static void beat(uint64_t id, const cis_block_id *bid)
{
	uint8_t idb[16];
	ProtobufCBinaryData added = {16, idb};
	Cis__HeartbeatRequest hq = CIS__HEARTBEAT_REQUEST__INIT;
	ProtobufCMessage *rep = NULL;
	cis_errmsg em = {{0}};
	hq.worker_id = id;
	if (bid) {
		cis_block_id_to_bytes(*bid, idb);
		hq.n_added = 1;
		hq.added = &added;
	}
	cr_assert_eq(mst_workers_heartbeat(m->workers, &hq.base, &rep, &em), 0, "%s", em.text);
	protobuf_c_message_free_unpacked(rep, NULL);
}

/* An over-replicated block held by a worker gone silent (not lost yet) and
 * a live one: the trim frees neither (it could keep the silent copy and
 * free the live one, and the block then lose its last copy with the silent
 * worker); with both heard from, it frees one. */
Test(jobs, trim_spares_copies_while_a_holder_is_silent)
{
	cis_errmsg em = {{0}};
	mst_close(m);
	open_master_lost_after(10000);
	uint64_t a, b;
	cis_rpc_server *sa = serve_worker_as(freeing_worker, &a);
	cis_rpc_server *sb = serve_worker_as(freeing_worker, &b);
	cr_assert_eq(mst_policy_update(m, "/m", 1, -1, -1, false, &em), 0, "%s", em.text);
	cis_block_id bid = first_block("/m/a.txt");
	beat(a, &bid);
	beat(b, &bid);
	for (int i = 0; i < 10; i++) { /* a silent for 1 s: 2 heartbeats and more */
		cis_sleep_ms(100);
		beat(b, NULL);
	}
	uint64_t copied, trimmed;
	atomic_store(&frees_seen, 0);
	cr_assert_eq(mst_repl_scan(m, &copied, &trimmed), 0);
	cr_assert_eq(trimmed, 0, "a copy was freed while the other holder was silent");
	cr_assert_eq(atomic_load(&frees_seen), 0);
	beat(a, NULL);
	cr_assert_eq(mst_repl_scan(m, &copied, &trimmed), 0);
	cr_assert_eq(trimmed, 1, "both heard from: one copy too many is freed");
	cr_assert_eq(atomic_load(&frees_seen), 1);
	cis_rpc_server_stop(sa);
	cis_rpc_server_stop(sb);
}

static atomic_int replicates_seen, replicates_pinned;

/* Takes Replicate requests and never answers them (a worker stuck on a
 * slow peer or store); counts those that ask for the copy pinned. */
static void stuck_replicator(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                             const uint8_t *msg, struct evbuffer *data)
{
	(void)ctx;
	(void)data;
	if (hdr->type == CIS_MSG_WORKER_REPLICATE) {
		Cis__ReplicateRequest *rq = NULL;
		if (cis_msg_unpack(&cis__replicate_request__descriptor, msg, hdr->msg_len,
		                   (ProtobufCMessage **)&rq) == 0) {
			if (rq->pin)
				atomic_fetch_add(&replicates_pinned, 1);
			protobuf_c_message_free_unpacked(&rq->base, NULL);
		}
		atomic_fetch_add(&replicates_seen, 1);
	} else {
		cis_rpc_reply_error(conn, hdr, -ENOTSUP, "not in this test");
	}
}

/* Answers Free; counts Replicate requests and refuses them. */
static void freeing_counter(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                            const uint8_t *msg, struct evbuffer *data)
{
	if (hdr->type == CIS_MSG_WORKER_REPLICATE) {
		atomic_fetch_add(&replicates_seen, 1);
		cis_rpc_reply_error(conn, hdr, -ENOTSUP, "not in this test");
		return;
	}
	freeing_worker(ctx, conn, hdr, msg, data);
}

/* A block under two replicas that a free job is dropping: the holder's
 * heartbeat has not said so yet, and a replication pass then would copy
 * the block back (and keep it cached for good after a TTL's free). Passes
 * leave the path alone while the free runs and until the workers' reports
 * have caught up. */
Test(jobs, no_copies_of_blocks_a_free_is_dropping)
{
	cis_errmsg em = {{0}};
	mst_close(m);
	open_master_lost_after(10000);
	uint64_t a, b, fid, copied, trimmed;
	cis_rpc_server *sa = serve_worker_as(freeing_counter, &a);
	cis_rpc_server *sb = serve_worker_as(freeing_counter, &b);
	cr_assert_eq(mst_policy_update(m, "/m", 2, -1, -1, false, &em), 0, "%s", em.text);
	cis_block_id bid = first_block("/m/a.txt");
	beat(a, &bid); /* one copy of two */
	beat(b, NULL);
	atomic_store(&replicates_seen, 0);
	mst_job_req r = {.type = "free", .path = "/m"};
	cr_assert_eq(mst_job_submit(m, &r, &fid, &em), 0, "%s", em.text);
	cr_assert_eq(mst_repl_scan(m, &copied, &trimmed), 0);
	cr_assert_eq(atomic_load(&replicates_seen), 0, "a copy while the free runs");
	cr_assert_eq(mst_job_run(m, fid), 0);
	cr_assert_eq(mst_repl_scan(m, &copied, &trimmed), 0);
	cr_assert_eq(atomic_load(&replicates_seen), 0, "a copy before the holder's next report");
	cis_sleep_ms(800); /* 2 heartbeats and 0.5 s: the reports are in */
	beat(a, &bid);     /* a holds it still (this worker drops nothing) */
	beat(b, NULL);
	cr_assert_eq(mst_repl_scan(m, &copied, &trimmed), 0);
	cr_assert_gt(atomic_load(&replicates_seen), 0, "an under-replicated block is copied again");
	cis_rpc_server_stop(sa);
	cis_rpc_server_stop(sb);
}

/* A master whose replication pass is stuck copying /m/a.txt's block (one
 * copy of two) to a worker that takes Replicate requests and never
 * answers, the files under pin (-1: no pin policy). The stuck worker's
 * server, to stop at the end. */
static cis_rpc_server *stuck_copy(int pin)
{
	cis_errmsg em = {{0}};
	reopen_with_threads(1000);
	uint64_t a = fake_worker(1 << 20), b;
	cis_rpc_server *srv = serve_worker_as(stuck_replicator, &b);
	cr_assert_eq(mst_policy_update(m, "/m", 2, pin, -1, false, &em), 0, "%s", em.text);
	mst_inode f;
	cr_assert_eq(mst_ns_resolve(m, "/m/a.txt", &f, &em), 0, "%s", em.text);
	uint64_t bs = 0;
	cr_assert_eq(mst_file_blocks(m, &f, &bs), 1);
	cis_block_id bid = cis_block_id_make(f.mount_id, f.key, f.version, bs, 0);
	atomic_store(&replicates_seen, 0);
	atomic_store(&replicates_pinned, 0);
	beat(a, &bid); /* one copy of two: the pass copies it to b */
	for (int i = 0; i < 100 && !atomic_load(&replicates_seen); i++) {
		mst_repl_kick(m);
		cis_sleep_ms(100);
		beat(a, NULL);
		beat(b, NULL);
	}
	cr_assert_gt(atomic_load(&replicates_seen), 0, "no replication pass reached the worker");
	return srv;
}

/* Stopping the master stops a replication pass under way: its call in
 * flight is abandoned (it waited out its 60 s timeout, and the pass went
 * on walking every managed path after it). */
Test(jobs, a_replication_pass_stops_with_the_master)
{
	cis_rpc_server *srv = stuck_copy(-1);
	cr_assert_eq(atomic_load(&replicates_pinned), 0,
	             "a copy asked pinned without a pin policy");
	uint64_t t0 = cis_mono_ms();
	mst_repl_stop(m->repl);
	cr_assert_lt(cis_mono_ms() - t0, 10000, "the stop waited %llu ms for the pass (60 s call)",
	             (unsigned long long)(cis_mono_ms() - t0));
	mst_close(m);
	cis_rpc_server_stop(srv);
	open_master();
}

/* Under a pin policy a copy is asked pinned in the Replicate itself: the
 * Pin sent after it never goes out when the master stops during the copy,
 * and a later pass finds the block at its target and pins nothing. */
Test(jobs, a_copy_under_a_pin_policy_is_asked_pinned)
{
	cis_rpc_server *srv = stuck_copy(1);
	cr_assert_eq(atomic_load(&replicates_pinned), atomic_load(&replicates_seen),
	             "a copy under a pin policy asked unpinned");
	mst_repl_stop(m->repl);
	mst_close(m);
	cis_rpc_server_stop(srv);
	open_master();
}

/* A job id in a query string is digits only: a sign, blanks, nothing or a
 * value past 2^64 is a 400 that says so (strtoull took "-1" as 2^64-1 and
 * " 1" or "+1" as job 1). */
Test(jobs, bad_job_ids_in_a_query_are_refused)
{
	mst_job_req r = {.type = "load", .path = "/m", .metadata_only = true};
	uint64_t id;
	id = submit_and_run(&r);
	char good[32], spaced[40], plus[40];
	snprintf(good, sizeof(good), "%llu", (unsigned long long)id);
	snprintf(spaced, sizeof(spaced), " %llu", (unsigned long long)id);
	snprintf(plus, sizeof(plus), "+%llu", (unsigned long long)id);
	const char *bad[] = {
	    "-1", spaced, plus, "", "0", "1x", "18446744073709551616", "99999999999999999999999"};
	json_t *o = NULL;
	cr_assert_eq(api("GET", "/api/v1/job", good, NULL, &o), 200);
	json_decref(o);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o = NULL;
		int st = api("GET", "/api/v1/job", bad[i], NULL, &o);
		cr_assert_eq(st, 400, "id \"%s\" -> %d", bad[i], st);
		cr_assert(strstr(str(o, "error"), "job id"), "id \"%s\": %s", bad[i],
		          str(o, "error"));
		json_decref(o);
	}
}

/* Two copies asked for; one owner refuses, the other holds the block
 * already. A load started after the loss would find it cached on the live
 * one (fewer copies than asked, no failure); one whose batch failed
 * mid-job must end the same way, not fail the file with the dead worker's
 * error (re-placement excluded the holder and found no one else). */
Test(jobs, a_failed_owner_leaves_the_block_cached_on_a_live_holder)
{
	fake_worker(1 << 20); /* refuses */
	atomic_store(&lw_cached, 1);
	uint64_t b;
	cis_rpc_server *srv = serve_worker_as(load_worker, &b);
	cis_block_id bid = first_block("/m/a.txt");
	beat(b, &bid);
	mst_job_req r = {.type = "load", .path = "/m/a.txt", .replicas = 2};
	uint64_t id;
	id = submit_and_run(&r);
	json_t *j = mst_job_json(m, id, 10);
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_eq(count(j, "files_failed"), 0, "%s",
	             str(json_array_get(json_object_get(j, "failures"), 0), "error"));
	cr_assert_eq(count(j, "tasks_failed"), 0);
	cr_assert_eq(count(j, "tasks_cached"), 2, "the holder's own task and the failed owner's");
	cr_assert_eq(json_integer_value(json_object_get(j, "failures_total")), 0);
	json_decref(j);
	cis_rpc_server_stop(srv);
}

/* The block ids each of two answering workers was asked to load, and how
 * often one was asked for a block it had been asked for already. */
#define RL_MAX 128
static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t rl_ids[2][RL_MAX][16];
static size_t rl_n[2];
static unsigned rl_twice;

static void recording_loader(int which, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                             const uint8_t *msg)
{
	if (hdr->type != CIS_MSG_WORKER_LOAD) {
		cis_rpc_reply_error(conn, hdr, -ENOTSUP, "not in this test");
		return;
	}
	Cis__LoadRequest *q = cis__load_request__unpack(NULL, hdr->msg_len, msg);
	cr_assert(q);
	pthread_mutex_lock(&rl_lock);
	for (size_t i = 0; i < q->n_blocks; i++) {
		const ProtobufCBinaryData *id = &q->blocks[i]->id;
		cr_assert_eq(id->len, 16);
		for (size_t k = 0; k < rl_n[which]; k++)
			rl_twice += !memcmp(rl_ids[which][k], id->data, 16);
		cr_assert_lt(rl_n[which], RL_MAX);
		memcpy(rl_ids[which][rl_n[which]++], id->data, 16);
	}
	pthread_mutex_unlock(&rl_lock);
	lw_answer(conn, hdr, q);
	cis__load_request__free_unpacked(q, NULL);
}

static void recording_loader_0(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                               const uint8_t *msg, struct evbuffer *data)
{
	(void)ctx;
	(void)data;
	recording_loader(0, conn, hdr, msg);
}

static void recording_loader_1(void *ctx, cis_rpc_conn *conn, const cis_frame_hdr *hdr,
                               const uint8_t *msg, struct evbuffer *data)
{
	(void)ctx;
	(void)data;
	recording_loader(1, conn, hdr, msg);
}

/* Two copies of each of 40 one-block files over four workers, two of which
 * refuse: a block whose two owners both refuse is placed again on the two
 * that answer, one copy each (both copies went to the same one, which
 * loaded it twice, and the load still counted two). */
Test(jobs, two_failing_owners_are_replaced_by_two_workers)
{
	cis_errmsg em = {{0}};
	char dir[400], name[16];
	snprintf(dir, sizeof(dir), "%s/many", store);
	cr_assert_eq(mkdir(dir, 0755), 0);
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "f%02d", i);
		put_file(dir, name, name);
	}
	uint64_t dirs;
	cr_assert_eq(mst_ns_sync(m, "/m", false, &dirs, &em), 0, "%s", em.text);
	/* Workers stay live without heartbeats through the failed batches'
	 * pauses. */
	mst_close(m);
	open_master_lost_after(30000);
	fake_worker(1 << 20);           /* refuses */
	register_worker(2, 1 << 20, 0); /* refuses too (another address) */
	cis_rpc_server *s0 = serve_worker(recording_loader_0);
	cis_rpc_server *s1 = serve_worker(recording_loader_1);
	mst_job_req r = {.type = "load", .path = "/m/many", .replicas = 2};
	json_t *j = mst_job_json(m, submit_and_run(&r), 10);
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_eq(count(j, "files_failed"), 0, "%s",
	             str(json_array_get(json_object_get(j, "failures"), 0), "error"));
	cr_assert_eq(count(j, "tasks_loaded"), 80);
	json_decref(j);
	cr_assert_eq(rl_twice, 0, "a worker was asked %u times for a block it had been asked for",
	             rl_twice);
	cr_assert_eq(rl_n[0], 40, "worker 0 loaded %zu blocks, worker 1 %zu", rl_n[0], rl_n[1]);
	cr_assert_eq(rl_n[1], 40);
	cis_rpc_server_stop(s0);
	cis_rpc_server_stop(s1);
}

/* Poll job id until it leaves "running" (at most max_ms); its record. */
static json_t *wait_job(uint64_t id, uint64_t max_ms)
{
	uint64_t t0 = cis_mono_ms();
	json_t *j = NULL;
	for (;;) {
		json_decref(j);
		j = mst_job_json(m, id, 10);
		if (strcmp(str(j, "state"), "running") || cis_mono_ms() - t0 > max_ms)
			return j;
		cis_sleep_ms(20);
	}
}

/* /m/d is in the namespace but no longer lists (the store's d is a file). */
static void make_d_unlistable(void)
{
	cis_errmsg em = {{0}};
	char d[400], cmd[1000];
	snprintf(d, sizeof(d), "%s/d", store);
	mkdir(d, 0755);
	put_file(d, "x1", "1");
	put_file(d, "x2", "2");
	uint64_t dirs;
	cr_assert_eq(mst_ns_sync(m, "/m", false, &dirs, &em), 0, "%s", em.text);
	snprintf(cmd, sizeof(cmd), "rm -rf %s && echo notadir > %s", d, d);
	cr_assert_eq(system(cmd), 0);
}

/* A directory that fails to list is one failure, also when the master
 * stops before the files ahead of it are counted: the failure was
 * recorded at once while the cursor stayed before the directory, so the
 * resumed walk listed it again and counted it twice. */
Test(jobs, a_listing_failure_is_counted_once_across_a_restart)
{
	cis_errmsg em = {{0}};
	make_d_unlistable();
	reopen_with_threads(60000);
	atomic_store(&lw_delay_ms, 2500); /* a.txt and b.txt are at the worker */
	uint64_t w;
	cis_rpc_server *srv = serve_worker_as(load_worker, &w);
	mst_job_req r = {.type = "load", .path = "/m"};
	uint64_t id;
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	cis_sleep_ms(1300); /* the walk is done and the record saved */
	mst_close(m);       /* the job stays running in its record */
	atomic_store(&lw_delay_ms, 0);
	m = NULL;
	reopen_with_threads(60000);
	register_worker(cis_rpc_server_port(srv), 1 << 20, w);
	cr_assert_eq(mst_jobs_resume(m), 0);
	json_t *j = wait_job(id, 10000);
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_eq(json_integer_value(json_object_get(j, "failures_total")), 1);
	json_t *f = json_object_get(j, "failures");
	cr_assert_eq(json_array_size(f), 1);
	cr_assert_str_eq(str(json_array_get(f, 0), "path"), "/m/d");
	cr_assert_eq(count(j, "files"), 3, "a.txt, b.txt, sub/c.bin");
	cr_assert_eq(count(j, "files_failed"), 0);
	json_decref(j);
	mst_close(m);
	m = NULL;
	lw_drain();
	cis_rpc_server_stop(srv);
	open_master();
}

/* A job resumed with its cursor inside a directory that no longer lists
 * reports that directory (the rest of it is not loaded): the failure was
 * taken for one counted before the restart, as the directory sorts before
 * the cursor, and the job ended with no failure. */
Test(jobs, a_resumed_job_reports_the_directory_its_cursor_is_in)
{
	make_d_unlistable();
	/* the record of a master stopped after it counted /m/d/x1 */
	const char *rec = "{\"id\":77,\"type\":\"load\",\"state\":\"running\",\"path\":\"/m\","
	                  "\"cursor\":\"/m/d/x1\",\"replicas\":1,\"parallel\":16,\"bandwidth\":0,"
	                  "\"counts\":{\"files\":3},\"failures\":[],\"failures_total\":0}";
	MDB_txn *txn;
	cr_assert_eq(mst_txn_begin(m, true, &txn), 0);
	uint64_t kbe = htobe64(77);
	MDB_val k = {8, &kbe}, v = {strlen(rec), (void *)rec};
	cr_assert_eq(mdb_put(txn, m->dbi_jobs, &k, &v, 0), 0);
	cr_assert_eq(mst_txn_commit(txn), 0);
	reopen_with_threads(60000);
	cis_rpc_server *srv = serve_worker(load_worker);
	cr_assert_eq(mst_jobs_resume(m), 0);
	json_t *j = wait_job(77, 10000);
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_eq(json_integer_value(json_object_get(j, "failures_total")), 1);
	json_t *f = json_object_get(j, "failures");
	cr_assert_str_eq(str(json_array_get(f, 0), "path"), "/m/d");
	cr_assert_eq(count(j, "files"), 4, "3 before the restart, then sub/c.bin");
	json_decref(j);
	mst_close(m);
	cis_rpc_server_stop(srv);
	open_master();
}

/* A load whose batch is out at a worker slow to answer (20 s here; the
 * call's timeout is 300 s). */
static uint64_t start_slow_load(cis_rpc_server **srv)
{
	cis_errmsg em = {{0}};
	reopen_with_threads(60000);
	atomic_store(&lw_delay_ms, 20000);
	*srv = serve_worker(load_worker);
	mst_job_req r = {.type = "load", .path = "/m"};
	uint64_t id;
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	for (int i = 0; i < 200 && !atomic_load(&lw_batches); i++)
		cis_sleep_ms(10);
	cr_assert(atomic_load(&lw_batches), "no batch reached the worker");
	return id;
}

/* Cancel job id: it is cancelled within a second. Its record. */
static json_t *cancel_within_a_second(uint64_t id)
{
	cis_errmsg em = {{0}};
	uint64_t t0 = cis_mono_ms();
	cr_assert_eq(mst_job_cancel(m, id, &em), 0, "%s", em.text);
	json_t *j = wait_job(id, 5000);
	uint64_t took = cis_mono_ms() - t0;
	cr_assert_str_eq(str(j, "state"), "cancelled");
	cr_assert_lt(took, 1000, "cancelled after %llu ms", (unsigned long long)took);
	return j;
}

/* Answer the slow worker's calls, then stop it and the threaded master. */
static void end_slow_load(cis_rpc_server *srv)
{
	lw_drain();
	mst_close(m);
	m = NULL;
	cis_rpc_server_stop(srv);
	open_master();
}

/* A cancel taken while the master stops is kept: the job is not resumed
 * at the next start (the record used to stay "running"). */
Test(jobs, a_cancel_while_the_master_stops_is_kept)
{
	cis_errmsg em = {{0}};
	cis_rpc_server *srv;
	uint64_t id = start_slow_load(&srv);
	mst_jobs_stop(m->jobs);
	cr_assert_eq(mst_job_cancel(m, id, &em), 0, "%s", em.text);
	end_slow_load(srv);
	json_t *j = mst_job_json(m, id, 0);
	cr_assert_str_eq(str(j, "state"), "cancelled");
	cr_assert_gt(json_integer_value(json_object_get(j, "finished_ns")), 0);
	json_decref(j);
}

/* Cancel does not wait for the batches out: they fail at once (the worker
 * may go on fetching), and the job is cancelled within a second, not when
 * the worker answers. */
Test(jobs, cancel_does_not_wait_for_a_slow_worker)
{
	cis_rpc_server *srv;
	uint64_t id = start_slow_load(&srv);
	json_decref(cancel_within_a_second(id));
	end_slow_load(srv);
}

/* Mount the directory dir of the file store at path, in 4 KiB blocks. */
static void mount_4k(const char *dir, const char *path)
{
	char uri[520];
	cis_errmsg em = {{0}};
	snprintf(uri, sizeof(uri), "file://%s", dir);
	mst_mount_req r = {.path = path, .uri = uri, .block_size = 4096, .sync_interval_ms = 0};
	cr_assert_eq(mst_mount_add(m, &r, NULL, &em), 0, "%s", em.text);
}

/* A huge file is queued as the senders take its batches: its first batch
 * reaches the worker at once and a cancel is quick. Before, the 16M blocks
 * of this 64 GiB file (sparse, 4 KiB blocks) were all queued with the
 * jobs' lock held, seconds and gigabytes before the first one was sent. */
Test(jobs, a_huge_file_is_queued_as_the_senders_go)
{
	cis_errmsg em = {{0}};
	char dir[400], path[500];
	snprintf(dir, sizeof(dir), "%s/huge", tmp);
	cr_assert_eq(mkdir(dir, 0755), 0);
	snprintf(path, sizeof(path), "%s/big", dir);
	FILE *fp = fopen(path, "w");
	cr_assert(fp);
	fclose(fp);
	cr_assert_eq(truncate(path, 64ll << 30), 0);
	reopen_with_threads(60000);
	mount_4k(dir, "/h");
	atomic_store(&lw_delay_ms, 20000);
	cis_rpc_server *srv = serve_worker(load_worker);
	mst_job_req r = {.type = "load", .path = "/h"};
	uint64_t id, t0 = cis_mono_ms();
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	while (!atomic_load(&lw_batches) && cis_mono_ms() - t0 < 20000)
		cis_sleep_ms(10);
	uint64_t first = cis_mono_ms() - t0;
	cr_assert_lt(first, 1000, "the first batch reached the worker after %llu ms",
	             (unsigned long long)first);
	json_t *j = cancel_within_a_second(id);
	cr_assert(!json_is_true(json_object_get(j, "listing_done")),
	          "the walk was stopped part way, yet the listing is said to be done");
	json_decref(j);
	end_slow_load(srv);
}

/* A master stopping with a batch out does not wait for the worker either,
 * and the job's record still says running (the next start resumes it). */
Test(jobs, close_does_not_wait_for_a_slow_worker)
{
	cis_rpc_server *srv;
	uint64_t id = start_slow_load(&srv);
	uint64_t t0 = cis_mono_ms();
	mst_close(m);
	m = NULL;
	uint64_t took = cis_mono_ms() - t0;
	cr_assert_lt(took, 1000, "mst_close took %llu ms", (unsigned long long)took);
	lw_drain();
	cis_rpc_server_stop(srv);
	open_master();
	json_t *j = mst_job_json(m, id, 0);
	cr_assert_str_eq(str(j, "state"), "running");
	json_decref(j);
}

/* A mount /bw of 4 KiB blocks over store/bw, holding big.bin of nblocks
 * (64 blocks, 256 KiB, make a batch). */
static void bw_mount(int nblocks)
{
	char dir[400], p[500];
	snprintf(dir, sizeof(dir), "%s/bw", store);
	mkdir(dir, 0755);
	snprintf(p, sizeof(p), "%s/big.bin", dir);
	FILE *f = fopen(p, "w");
	cr_assert(f);
	for (int i = 0; i < nblocks * 4096; i++)
		fputc('x', f);
	fclose(f);
	mount_4k(dir, "/bw");
}

/* --bandwidth is one bucket for all the job's senders, and its debt
 * carries over: at 16 KiB/s a batch is one second of it (4 blocks of 4 KiB,
 * not 64: a load shorter than a full batch went out at once, uncapped),
 * and the second batch waits for the first one's second (each sender
 * slept at most 10 s whatever it owed, and the window started over after
 * 10 s: a cap could be exceeded 2-6x). A sender waiting out the debt still
 * notices a cancel at once, and sends nothing after it. Timed by when the
 * batches reach the worker, not by how soon the first one does. */
Test(jobs, bandwidth_debt_holds_back_the_next_batch)
{
	cis_errmsg em = {{0}};
	reopen_with_threads(60000);
	bw_mount(128);
	cis_rpc_server *srv = serve_worker(load_worker);
	mst_job_req r = {.type = "load", .path = "/bw", .parallel = 2, .bandwidth = 16384};
	uint64_t id, t0 = cis_mono_ms();
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	cis_sleep_ms(1500);
	/* the first batch goes on credit; the third is due 2 s after it at
	 * the earliest, so at most two have come */
	unsigned n = atomic_load(&lw_blocks);
	cr_assert(n >= 4 && n <= 8, "blocks sent within 1.5 s: %u (one or two batches)", n);
	while (atomic_load(&lw_batches) < 2 && cis_mono_ms() - t0 < 20000)
		cis_sleep_ms(10);
	cr_assert_geq(atomic_load(&lw_batches), 2, "the second batch never came");
	cr_assert_eq(lw_batch_blocks[0], 4);
	cr_assert_eq(lw_batch_blocks[1], 4);
	uint64_t gap = lw_batch_ms[1] - lw_batch_ms[0];
	cr_assert_geq(gap, 900, "the second batch came %llu ms after the first",
	              (unsigned long long)gap);
	/* the cancel: nothing is sent after it */
	unsigned before = atomic_load(&lw_blocks);
	uint64_t t_cancel = cis_mono_ms();
	cr_assert_eq(mst_job_cancel(m, id, &em), 0, "%s", em.text);
	uint64_t fired = cis_mono_ms();
	json_t *j = wait_job(id, 5000);
	cr_assert_str_eq(str(j, "state"), "cancelled");
	json_decref(j);
	uint64_t took = cis_mono_ms() - t_cancel;
	cr_assert_lt(took, 1000, "cancelled after %llu ms", (unsigned long long)took);
	/* past when the third batch would have come, and then some */
	while (cis_mono_ms() < fired + 1500 || cis_mono_ms() < lw_batch_ms[1] + 2500)
		cis_sleep_ms(50);
	unsigned after = atomic_load(&lw_blocks);
	/* The third batch could not be sent before t0 + 2 s (2 s of debt
	 * after the job started). A cancel done before then leaves nothing to
	 * send: an exact check. A later one (a machine too slow to get here in
	 * time) may find a sender whose frame was already written, which
	 * reaches the worker after the cancel: one batch at most. */
	if (fired < t0 + 2000)
		cr_assert_eq(after, before, "%u blocks sent after the cancel", after - before);
	else
		cr_assert_leq(after, before + 4, "%u blocks sent after the cancel", after - before);
	end_slow_load(srv);
}

/* Under a cap a batch holds one second of it in bytes, not in block
 * sizes: 40 files of 1000 bytes (4 KiB blocks) at 16000 B/s go 16 to a
 * batch (16000 bytes), not 4 (16000 / 4096: a quarter of a second each). */
Test(jobs, a_capped_batch_counts_the_bytes_of_small_files)
{
	cis_errmsg em = {{0}};
	char dir[400], name[32];
	snprintf(dir, sizeof(dir), "%s/small", store);
	cr_assert_eq(mkdir(dir, 0755), 0);
	char content[1001];
	memset(content, 'x', 1000);
	content[1000] = 0;
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "f%02d", i);
		put_file(dir, name, content);
	}
	reopen_with_threads(60000);
	mount_4k(dir, "/sm");
	cis_rpc_server *srv = serve_worker(load_worker);
	mst_job_req r = {.type = "load", .path = "/sm", .parallel = 1, .bandwidth = 16000};
	uint64_t id, t0 = cis_mono_ms();
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	while (!atomic_load(&lw_batches) && cis_mono_ms() - t0 < 10000)
		cis_sleep_ms(10);
	cr_assert(atomic_load(&lw_batches), "no batch reached the worker");
	cr_assert_eq(lw_batch_blocks[0], 16, "the first batch held %zu files", lw_batch_blocks[0]);
	json_decref(cancel_within_a_second(id));
	end_slow_load(srv);
}

/* Blocks the worker answers cached for cost no bandwidth: a reload of
 * 768 KiB of cached data at 16 KiB/s (48 s of it when fetched) takes no
 * time. Each batch's full size was charged before it was sent. */
Test(jobs, cached_blocks_cost_no_bandwidth)
{
	cis_errmsg em = {{0}};
	reopen_with_threads(60000);
	bw_mount(192);
	atomic_store(&lw_cached, 1);
	cis_rpc_server *srv = serve_worker(load_worker);
	mst_job_req r = {.type = "load", .path = "/bw", .parallel = 1, .bandwidth = 16384};
	uint64_t id;
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	json_t *j = wait_job(id, 3000);
	cr_assert_str_eq(str(j, "state"), "done", "48 batches, all cached, not done in 3 s");
	cr_assert_eq(count(j, "tasks_cached"), 192);
	cr_assert_eq(count(j, "bytes_loaded"), 0);
	json_decref(j);
	mst_close(m);
	m = NULL;
	cis_rpc_server_stop(srv);
	open_master();
}

/* A policy set through a link has the target's path, which a file:// store
 * may name with any bytes: it is kept, listed ("path" with '?', and
 * "path_hex"), and used by replication and pin checks as it is, also after
 * a restart (a policy whose path is not UTF-8 used to crash the
 * replication thread and every later pin). */
Test(jobs, policy_on_a_path_not_utf8_is_listed_and_used)
{
	char dir[sizeof(store) + 8], link[sizeof(store) + 8];
	snprintf(dir, sizeof(dir), "%s/caf\xe9", store);
	snprintf(link, sizeof(link), "%s/latest", store);
	cr_assert_eq(mkdir(dir, 0755), 0);
	put_file(dir, "f", "abc");
	cr_assert_eq(symlink("caf\xe9", link), 0);
	fake_worker(100);
	json_t *o = NULL;
	cr_assert_eq(api("POST", "/api/v1/policy", NULL,
	                 "{\"path\": \"/m/latest\", \"replicas\": 2, \"pin\": true}", &o),
	             200);
	cr_assert_str_eq(str(o, "path"), "/m/caf?");
	cr_assert_str_eq(str(o, "path_hex"), "2f6d2f636166e9");
	json_decref(o);
	for (int round = 0; round < 2; round++) {
		cr_assert_eq(api("GET", "/api/v1/policies", NULL, NULL, &o), 200);
		json_t *ps = json_object_get(o, "policies");
		cr_assert_eq(json_array_size(ps), (size_t)(1 + round), "and /m/a.txt's pin");
		json_t *p = json_array_get(ps, round); /* in bytewise order */
		cr_assert_str_eq(str(p, "path"), "/m/caf?");
		cr_assert_str_eq(str(p, "path_hex"), "2f6d2f636166e9");
		cr_assert_eq(json_integer_value(json_object_get(p, "replicas")), 2);
		json_decref(o);
		only_replicas_policy_is("/m/caf\xe9");
		cr_assert_eq(mst_repl_scan(m, NULL, NULL), 0);
		cr_assert_eq(pin_api(round ? "/m/b.txt" : "/m/a.txt", true, NULL, 0), 200,
		             "a pin counts the pinned path that is not UTF-8");
		/* as stored: the master opens its LMDB with the policy in it */
		mst_close(m);
		open_master();
		fake_worker(100);
	}
}

/* POST /api/v1/policy with body: the status. */
static int post_policy(const char *body)
{
	json_t *o = NULL;
	int st = api("POST", "/api/v1/policy", NULL, body, &o);
	json_decref(o);
	return st;
}

/* More copies of pinned data take more of the cache: raising a pinned
 * path's replicas (on it or above it) is checked as a pin is, and a pin
 * with replicas in one request is checked with those replicas (it was
 * checked with the old target, and a target change alone not at all). */
Test(jobs, replicas_of_pinned_data_must_fit_the_cache)
{
	fake_worker(10); /* a.txt 5, b.txt 6 bytes */
	cr_assert_eq(post_policy("{\"path\": \"/m/b.txt\", \"pin\": true, \"replicas\": 2}"), 507,
	             "12 bytes pinned into 10");
	cr_assert_eq(post_policy("{\"path\": \"/m/b.txt\", \"replicas\": 2}"), 200, "not pinned");
	cr_assert_eq(post_policy("{\"path\": \"/m/b.txt\", \"pin\": true}"), 507, "6 x 2");
	cr_assert_eq(post_policy("{\"path\": \"/m/b.txt\", \"pin\": true, \"replicas\": 1}"), 200,
	             "6 x 1, checked with the replicas asked for");
	cr_assert_eq(post_policy("{\"path\": \"/m/b.txt\", \"replicas\": 2}"), 507);
	cr_assert_eq(post_policy("{\"path\": \"/m\", \"replicas\": 2}"), 200,
	             "b.txt's own target stays 1");
	char msg[300];
	cis_errmsg em = {{0}};
	json_t *o = NULL;
	cr_assert_eq(api("POST", "/api/v1/policy", NULL,
	                 "{\"path\": \"/m\", \"replicas\": 2, \"recursive\": true}", &o),
	             507, "recursive: b.txt follows /m");
	snprintf(msg, sizeof(msg), "%s", str(o, "error") ?: "");
	json_decref(o);
	cr_assert(strstr(msg, "/m: the pinned data would be 12 B"), "%s", msg);
	mst_policy p;
	mst_policy_resolve(m, "/m/b.txt", &p);
	cr_assert_eq(p.replicas, 1, "refused changes are not kept");
	/* a load with replicas sets the target too */
	uint64_t id;
	mst_job_req r = {.type = "load", .path = "/m/b.txt", .replicas = 3};
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), -ENOSPC);
	mst_policy_resolve(m, "/m/b.txt", &p);
	cr_assert_eq(p.replicas, 1);
	/* fewer copies, or an unpin, always pass: here with no worker left */
	mst_close(m);
	open_master();
	cr_assert_eq(post_policy("{\"path\": \"/m/b.txt\", \"replicas\": 1}"), 200);
	cr_assert_eq(post_policy("{\"path\": \"/m/b.txt\", \"pin\": false, \"replicas\": 5}"), 200);
}

/* A pinned root no walk can read: its name has a component longer than
 * any name (stored as it is, past mst_policy_update's checks). */
static void pin_unreadable_root(void)
{
	char key[400] = "/m/";
	memset(key + 3, 'x', 300);
	key[303] = 0;
	MDB_txn *txn;
	cr_assert_eq(mst_txn_begin(m, true, &txn), 0);
	MDB_val k = {strlen(key), key}, v = {strlen("{\"pin\":true}"), "{\"pin\":true}"};
	cr_assert_eq(mdb_put(txn, m->dbi_policies, &k, &v, 0), 0);
	cr_assert_eq(mst_txn_commit(txn), 0);
}

/* A target changed where nothing is pinned cannot add pinned bytes: it
 * walks no pinned data (every pinned file was walked, under the policy
 * lock, on each setrep or load --replicas), so a pinned root elsewhere
 * that cannot be walked does not fail it. Where the change needs that
 * root, the error says which change and whose data. */
Test(jobs, replicas_away_from_pinned_data_walk_none)
{
	cis_errmsg em = {{0}};
	fake_worker(100);
	pin_unreadable_root();
	cr_assert_eq(post_policy("{\"path\": \"/m/b.txt\", \"replicas\": 2}"), 200);
	uint64_t id;
	mst_job_req r = {.type = "load", .path = "/m/a.txt", .replicas = 3, .metadata_only = true};
	cr_assert_eq(mst_job_submit(m, &r, &id, &em), 0, "%s", em.text);
	/* pinned data within the path, none added: unpin with a target */
	cr_assert_eq(mst_policy_update(m, "/m/sub/c.bin", -1, 1, -2, false, &em), 0, "%s", em.text);
	cr_assert_eq(post_policy("{\"path\": \"/m/sub\", \"pin\": false, \"replicas\": 2}"), 200);
	/* the unreadable root overlaps the path */
	cr_assert_eq(mst_pin_check(m, "/m", -1, 2, false, &em), -ENAMETOOLONG);
	cr_assert(strstr(em.text, "replicas of /m: counting the pinned data under /m/xxx"), "%s",
	          em.text);
	/* a pin adds bytes: the total takes every pinned root */
	cr_assert_eq(mst_pin_check(m, "/m/a.txt", 1, -1, false, &em), -ENAMETOOLONG);
	cr_assert(strstr(em.text, "pin /m/a.txt: counting the pinned data under /m/xxx"), "%s",
	          em.text);
}

/* An unmount drops the policies at and below the mount point: they were
 * for that store's data, not for what is mounted there next. */
Test(jobs, unmount_drops_the_policies_below_it)
{
	cis_errmsg em = {{0}};
	cr_assert_eq(mst_policy_update(m, "/m", 2, 1, -2, false, &em), 0, "%s", em.text);
	cr_assert_eq(mst_policy_update(m, "/m/a.txt", 3, -1, -2, false, &em), 0, "%s", em.text);
	cr_assert_eq(mst_policy_update(m, "/m/sub", -1, -1, 10, false, &em), 0, "%s", em.text);
	cr_assert_eq(mst_policy_update(m, "/m-x", 3, -1, -2, false, &em), 0, "%s", em.text);
	cr_assert_eq(mst_policy_update(m, "/mm/y", 3, -1, -2, false, &em), 0, "%s", em.text);
	cr_assert_eq(mst_mount_remove(m, "/m", &em), 0, "%s", em.text);
	json_t *ps = mst_policies_json(m);
	cr_assert_eq(json_array_size(ps), 2, "%s", json_dumps(ps, 0));
	cr_assert_str_eq(str(json_array_get(ps, 0), "path"), "/m-x");
	cr_assert_str_eq(str(json_array_get(ps, 1), "path"), "/mm/y");
	json_decref(ps);
	char uri[400];
	snprintf(uri, sizeof(uri), "file://%s", store);
	mst_mount_req r = {.path = "/m", .uri = uri, .sync_interval_ms = 0};
	cr_assert_eq(mst_mount_add(m, &r, NULL, &em), 0, "%s", em.text);
	mst_policy p;
	mst_policy_resolve(m, "/m/sub/c.bin", &p);
	cr_assert(p.replicas == 0 && p.pin < 0 && p.ttl_s < 0, "the old mount's policies apply");
}

/* files_seen, bytes_seen and progress are the walk's, while it runs: a
 * finished job still in memory shows none, as its record in LMDB. */
Test(jobs, a_finished_job_shows_no_walk_progress)
{
	mst_job_req r = {.type = "load", .path = "/m", .metadata_only = true};
	uint64_t id = submit_and_run(&r);
	json_t *j = mst_job_json(m, id, 10);
	cr_assert_str_eq(str(j, "state"), "done");
	cr_assert_null(json_object_get(j, "progress"));
	cr_assert_null(json_object_get(j, "files_seen"));
	cr_assert_null(json_object_get(j, "bytes_seen"));
	json_decref(j);
	/* limits are decimal counts: "0.5k" was 512 */
	cis_kvlist q = CIS_KVLIST_INIT;
	char ids[32];
	snprintf(ids, sizeof(ids), "%llu", (unsigned long long)id);
	cis_kvlist_set(&q, "id", ids);
	cis_kvlist_set(&q, "limit", "0.5k");
	json_t *o = NULL;
	cr_assert_eq(mst_api_handle(m, "GET", "/api/v1/job", &q, NULL, &o), 400);
	json_decref(o);
	cis_kvlist_set(&q, "limit", "5");
	cr_assert_eq(mst_api_handle(m, "GET", "/api/v1/job", &q, NULL, &o), 200);
	json_decref(o);
	cis_kvlist_free(&q);
}

/* Inputs the API took for something else: counts with a size suffix
 * ("0.03k" replicas were 30), a nul byte cutting "type" or "ttl" short, a
 * method that is a piece of an allowed one ("ST" ran the DELETE of
 * /mounts), and options by the ten thousand (each looked up in a list). */
Test(jobs, api_inputs_taken_for_something_else_are_refused)
{
	json_t *o = NULL;
	cr_assert_eq(
	    api("POST", "/api/v1/jobs", NULL, "{\"path\": \"/m\", \"replicas\": \"0.03k\"}", &o),
	    400);
	json_decref(o);
	cr_assert_eq(
	    api("POST", "/api/v1/jobs", NULL, "{\"path\": \"/m\", \"parallel\": \"0.1k\"}", &o),
	    400);
	json_decref(o);
	cr_assert_eq(api("POST", "/api/v1/jobs", NULL,
	                 "{\"path\": \"/m\", \"type\": \"load\\u0000zz\"}", &o),
	             400);
	json_decref(o);
	cr_assert_eq(
	    api("POST", "/api/v1/policy", NULL, "{\"path\": \"/m\", \"ttl\": \"off\\u0000x\"}", &o),
	    400);
	json_decref(o);
	cr_assert_eq(api("ST", "/api/v1/mounts", NULL, NULL, &o), 405);
	json_decref(o);
	cr_assert_eq(api("GET", "/api/v1/mounts", NULL, NULL, &o), 200);
	cr_assert_eq(json_array_size(json_object_get(o, "mounts")), 1, "the mount is still there");
	json_decref(o);
	json_t *opts = json_object();
	for (int i = 0; i < 1000; i++) {
		char k[16];
		snprintf(k, sizeof(k), "k%d", i);
		json_object_set_new(opts, k, json_string(""));
	}
	json_t *b =
	    json_pack("{s:s, s:s, s:o}", "path", "/other", "uri", "file:///tmp", "options", opts);
	cis_kvlist q = CIS_KVLIST_INIT;
	cr_assert_eq(mst_api_handle(m, "POST", "/api/v1/mounts", &q, b, &o), 400);
	cr_assert(strstr(str(o, "error"), "too many"), "%s", str(o, "error"));
	json_decref(o);
	json_decref(b);
	/* A field the endpoint does not know (a typo) is refused, not
	 * ignored: "replica": 3 loaded one copy. */
	cr_assert_eq(api("POST", "/api/v1/jobs", NULL, "{\"path\": \"/m\", \"replica\": 3}", &o),
	             400);
	cr_assert(strstr(str(o, "error"), "unknown field \"replica\""), "%s", str(o, "error"));
	json_decref(o);
	cr_assert_eq(
	    api("POST", "/api/v1/jobs", NULL, "{\"path\": \"/m\", \"path replicas\": 3}", &o), 400);
	json_decref(o);
	/* Still taken: a count as digits, a bandwidth with its suffix. */
	cr_assert_eq(api("POST", "/api/v1/jobs", NULL,
	                 "{\"path\": \"/m\", \"replicas\": \"1\", \"bandwidth\": \"10M\", "
	                 "\"metadata_only\": true}",
	                 &o),
	             201, "%s", o ? str(o, "error") : "");
	json_decref(o);
}
