/* The master's namespace, mount table, worker registry, RPC dispatch and
 * admin API, driven directly (no sockets) against file:// stores. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cistern/msgtype.h"
#include "cistern/time.h"
#include "cistern/proto/master.pb-c.h"
#include "master.h"

static char tmp[256], store[300], store2[300], data[300];
static cis_metrics *metrics;
static mst_master *m;

static void put_file(const char *dir, const char *name, const char *content)
{
	char p[1024];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	cr_assert(f);
	fputs(content, f);
	fclose(f);
}

static void open_master(void)
{
	cis_errmsg em = {{0}};
	mst_open_opts o = {
	    .data_dir = data, .map_size = 1ull << 30, .lost_timeout_ms = 200, .metrics = metrics};
	int rc = mst_open(&o, &m, &em);
	cr_assert_eq(rc, 0, "mst_open: %s", em.text);
}

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/cis-mst-XXXXXX");
	cr_assert(mkdtemp(tmp));
	snprintf(store, sizeof(store), "%s/store", tmp);
	snprintf(store2, sizeof(store2), "%s/store2", tmp);
	snprintf(data, sizeof(data), "%s/data", tmp);
	mkdir(store, 0755);
	mkdir(store2, 0755);
	char sub[400];
	snprintf(sub, sizeof(sub), "%s/sub", store);
	mkdir(sub, 0755);
	put_file(store, "a.txt", "hello");
	put_file(store, "b.txt", "world!");
	put_file(sub, "c.bin", "xyz");
	put_file(store2, "inner.txt", "nested");
	metrics = cis_metrics_new();
	open_master();
}

static void teardown(void)
{
	mst_close(m);
	cis_metrics_free(metrics);
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	cr_assert_eq(system(cmd), 0);
}

static int mount(const char *path, const char *dir, cis_errmsg *em)
{
	char uri[400];
	snprintf(uri, sizeof(uri), "file://%s", dir);
	cis_kvlist opts = CIS_KVLIST_INIT;
	cis_kvlist_set(&opts, "fsync", "false");
	mst_mount_req r = {.path = path, .uri = uri, .options = &opts, .sync_interval_ms = 0};
	int rc = mst_mount_add(m, &r, NULL, em);
	cis_kvlist_free(&opts);
	return rc;
}

TestSuite(master, .init = setup, .fini = teardown, .timeout = 60);

Test(master, lazy_listing_lookup_and_readdir)
{
	cis_errmsg em = {{0}};
	mst_inode ino;
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	cr_assert_eq(cis_counter_get(m->c_store_lists), 0, "mounting must not list");
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &ino, &em), 0, "%s", em.text);
	cr_assert_eq(ino.type, MST_FILE);
	cr_assert_eq(ino.size, 3);
	cr_assert_str_eq(ino.key, "sub/c.bin");
	cr_assert_neq(ino.version[0], 0);
	cr_assert_eq(cis_counter_get(m->c_store_lists), 2); /* /data and /data/sub */
	cr_assert_eq(mst_ns_resolve(m, "/data/a.txt", &ino, &em), 0);
	cr_assert_eq(cis_counter_get(m->c_store_lists), 2, "a listed directory is not re-listed");

	mst_inode dir, *ents;
	size_t n;
	uint64_t next;
	bool eof;
	cr_assert_eq(mst_ns_resolve(m, "/data", &dir, &em), 0);
	cr_assert(dir.mount_point);
	/* Paged: two entries, then the rest. */
	cr_assert_eq(mst_ns_readdir(m, dir.id, 0, 2, &ents, &n, &next, &eof, &em), 0);
	cr_assert_eq(n, 2);
	cr_assert_not(eof);
	cr_assert_str_eq(ents[0].name, "a.txt");
	cr_assert_str_eq(ents[1].name, "b.txt");
	free(ents);
	cr_assert_eq(mst_ns_readdir(m, dir.id, next, 2, &ents, &n, &next, &eof, &em), 0);
	cr_assert_eq(n, 1);
	cr_assert(eof);
	cr_assert_str_eq(ents[0].name, "sub");
	free(ents);

	cr_assert_eq(mst_ns_resolve(m, "/data/nope", &ino, &em), -ENOENT);
	cr_assert_eq(mst_ns_resolve(m, "/data/a.txt/x", &ino, &em), -ENOTDIR);
}

struct lk {
	uint64_t dir;
	int rc;
};

static void *lookup_thread(void *arg)
{
	struct lk *l = arg;
	mst_inode ino;
	l->rc = mst_ns_lookup(m, l->dir, "b.txt", &ino, NULL);
	return NULL;
}

Test(master, concurrent_lookups_list_once)
{
	cis_errmsg em = {{0}};
	mst_inode dir;
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data", &dir, &em), 0);
	pthread_t t[16];
	struct lk l[16];
	for (int i = 0; i < 16; i++) {
		l[i].dir = dir.id;
		pthread_create(&t[i], NULL, lookup_thread, &l[i]);
	}
	for (int i = 0; i < 16; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(l[i].rc, 0);
	}
	cr_assert_eq(cis_counter_get(m->c_store_lists), 1);
}

Test(master, sync_sees_added_changed_deleted)
{
	cis_errmsg em = {{0}};
	mst_inode a, a2, ino;
	uint64_t dirs;
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/a.txt", &a, &em), 0);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &ino, &em), 0);
	put_file(store, "a.txt", "a longer content");
	put_file(store, "new.txt", "n");
	char p[400];
	snprintf(p, sizeof(p), "%s/b.txt", store);
	unlink(p);
	snprintf(p, sizeof(p), "%s/sub/c.bin", store);
	unlink(p);
	/* sync_interval 0: nothing changes until a sync. */
	cr_assert_eq(mst_ns_resolve(m, "/data/b.txt", &ino, &em), 0);
	cr_assert_eq(mst_ns_sync(m, "/data", false, &dirs, &em), 0, "%s", em.text);
	cr_assert_eq(dirs, 1);
	cr_assert_eq(mst_ns_resolve(m, "/data/a.txt", &a2, &em), 0);
	cr_assert_eq(a2.id, a.id, "an overwritten object keeps its inode");
	cr_assert_eq(a2.size, 16);
	cr_assert_str_neq(a2.version, a.version);
	cr_assert_eq(mst_ns_resolve(m, "/data/b.txt", &ino, &em), -ENOENT);
	cr_assert_eq(mst_ns_resolve(m, "/data/new.txt", &ino, &em), 0);
	/* Not recursive: sub still shows c.bin; -R removes it. */
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &ino, &em), 0);
	cr_assert_eq(mst_ns_sync(m, "/data", true, &dirs, &em), 0, "%s", em.text);
	cr_assert_eq(dirs, 2);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &ino, &em), -ENOENT);
}

/* A store whose root is missing (a file system not mounted under the
 * file:// root) is the store's error: the directories keep what they had.
 * A directory that alone is gone from a store that is there lists empty. */
Test(master, a_missing_store_root_empties_no_directory)
{
	cis_errmsg em = {{0}};
	mst_inode ino;
	uint64_t dirs;
	char moved[400], p[400];
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &ino, &em), 0, "%s", em.text);
	snprintf(moved, sizeof(moved), "%s.away", store);
	cr_assert_eq(rename(store, moved), 0);
	em = (cis_errmsg){{0}};
	cr_assert_neq(mst_ns_sync(m, "/data/sub", false, &dirs, &em), 0,
	              "a sync of a store with no root succeeded");
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &ino, &em), 0,
	             "the file left the namespace with the store's root: %s", em.text);
	cr_assert_eq(rename(moved, store), 0);
	snprintf(p, sizeof(p), "%s/sub/c.bin", store);
	cr_assert_eq(unlink(p), 0);
	snprintf(p, sizeof(p), "%s/sub", store);
	cr_assert_eq(rmdir(p), 0);
	cr_assert_eq(mst_ns_sync(m, "/data/sub", false, &dirs, &em), -ENOENT);
	cr_assert(strstr(em.text, "/data/sub: no longer in the store"), "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &ino, &em), -ENOENT);
}

/* A directory whose first listing fails (here: more entries than
 * --list-max-entries) gives its error back to the lookups that follow for
 * a while instead of each listing it again; a sync lists it again. */
Test(master, a_failed_first_listing_is_not_redone_by_every_lookup)
{
	cis_errmsg em = {{0}};
	mst_inode ino;
	uint64_t dirs;
	char big[400];
	mst_close(m);
	mst_open_opts o = {.data_dir = data,
	                   .map_size = 1ull << 30,
	                   .lost_timeout_ms = 200,
	                   .metrics = metrics,
	                   .list_max = 1000};
	cr_assert_eq(mst_open(&o, &m, &em), 0, "%s", em.text);
	snprintf(big, sizeof(big), "%s/big", store);
	cr_assert_eq(mkdir(big, 0755), 0);
	for (int i = 0; i < 1001; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%04d", i);
		put_file(big, name, "x");
	}
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	cr_assert_neq(mst_ns_resolve(m, "/data/big/f0001", &ino, &em), 0);
	cr_assert(strstr(em.text, "--list-max-entries"), "%s", em.text);
	uint64_t lists = cis_counter_get(m->c_store_lists);
	for (int i = 0; i < 5; i++) {
		em = (cis_errmsg){{0}};
		cr_assert_neq(mst_ns_resolve(m, "/data/big/f0002", &ino, &em), 0);
		cr_assert(strstr(em.text, "--list-max-entries"), "the error again: %s", em.text);
	}
	cr_assert_eq(cis_counter_get(m->c_store_lists), lists,
	             "lookups listed the directory again");
	cr_assert_neq(mst_ns_sync(m, "/data/big", false, &dirs, &em), 0);
	cr_assert_gt(cis_counter_get(m->c_store_lists), lists, "a sync did not list it again");
}

Test(master, nested_mounts_and_shadowing)
{
	cis_errmsg em = {{0}};
	mst_inode ino;
	cr_assert_eq(mount("/", store, &em), 0, "%s", em.text);
	cr_assert_eq(mount("/nested", store2, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/a.txt", &ino, &em), 0);
	cr_assert_eq(mst_ns_resolve(m, "/nested/inner.txt", &ino, &em), 0, "%s", em.text);
	cr_assert_str_eq(ino.key, "inner.txt");
	em.text[0] = 0;
	cr_assert_eq(mount("/sub", store2, &em), -EEXIST, "a mount must not shadow");
	cr_assert(strstr(em.text, "exists"), "%s", em.text);
	cr_assert_eq(mount("/", store2, &em), -EEXIST);
	/* The report counts each file for its own mount only (the outer
	 * mount's walk goes into the nested one: it counted inner.txt too). */
	cr_assert_eq(mst_ns_resolve(m, "/sub/c.bin", &ino, &em), 0);
	json_t *out;
	cr_assert_eq(mst_api_handle(m, "GET", "/api/v1/report", NULL, NULL, &out), 200);
	size_t i;
	json_t *mu;
	json_array_foreach(json_object_get(out, "mount_usage"), i, mu)
	{
		const char *p = json_string_value(json_object_get(mu, "path"));
		json_int_t files = json_integer_value(json_object_get(mu, "files"));
		json_int_t bytes = json_integer_value(json_object_get(mu, "total_bytes"));
		if (!strcmp(p, "/"))
			cr_assert(files == 3 && bytes == 14, "/: %lld files, %lld bytes",
			          (long long)files, (long long)bytes);
		else
			cr_assert(files == 1 && bytes == 6, "/nested: %lld files, %lld bytes",
			          (long long)files, (long long)bytes);
	}
	cr_assert_eq(json_array_size(json_object_get(out, "mount_usage")), 2);
	json_decref(out);
	/* The mount point survives a sync of its parent. */
	uint64_t dirs;
	cr_assert_eq(mst_ns_sync(m, "/", false, &dirs, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/nested/inner.txt", &ino, &em), 0);
	/* Unmounting the parent first is refused. */
	cr_assert_eq(mst_mount_remove(m, "/", &em), -EBUSY);
	cr_assert_eq(mst_mount_remove(m, "/nested", &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/nested", &ino, &em), -ENOENT);
	cr_assert_eq(mst_mount_remove(m, "/nested", &em), -ENOENT);
	cr_assert_eq(mst_mount_remove(m, "/", &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/a.txt", &ino, &em), -ENOENT);
}

Test(master, bad_mounts_refused_with_store_error)
{
	cis_errmsg em = {{0}};
	mst_mount_req r = {.path = "/x", .uri = "ftp://host/x", .sync_interval_ms = -1};
	cr_assert_eq(mst_mount_add(m, &r, NULL, &em), -CIS_E_URI);
	r.uri = "file:///definitely/not/here";
	em.text[0] = 0;
	cr_assert_neq(mst_mount_add(m, &r, NULL, &em), 0);
	cr_assert(strstr(em.text, "/definitely/not/here"), "%s", em.text);
	r.uri = "not a uri";
	cr_assert_eq(mst_mount_add(m, &r, NULL, &em), -CIS_E_URI);
	cr_assert_eq(mst_mount_count(m), 0);
}

Test(master, bad_paths)
{
	cis_errmsg em;
	mst_inode ino;
	char big[5000];
	memset(big, 'a', sizeof(big));
	big[0] = '/';
	big[4999] = 0;
	cr_assert_eq(mst_path_check("/a/../b", 7, &em), -EINVAL);
	cr_assert_eq(mst_path_check("/a//b", 5, &em), -EINVAL);
	cr_assert_eq(mst_path_check("/a/./b", 6, &em), -EINVAL);
	cr_assert_eq(mst_path_check("/a\0b", 4, &em), -EINVAL);
	cr_assert_eq(mst_path_check("a/b", 3, &em), -EINVAL);
	cr_assert_eq(mst_path_check("", 0, &em), -EINVAL);
	cr_assert_eq(mst_path_check(big, strlen(big), &em), -ENAMETOOLONG);
	big[300] = 0;
	cr_assert_eq(mst_path_check(big, strlen(big), &em), -ENAMETOOLONG);
	cr_assert_eq(mst_path_check("/a/b/", 5, &em), 0);
	cr_assert_eq(mst_ns_resolve(m, "/x/..", &ino, &em), -EINVAL);
	cr_assert_eq(mst_name_check("..", 2, &em), -EINVAL);
	cr_assert_eq(mst_name_check("a/b", 3, &em), -EINVAL);
}

Test(master, restart_keeps_mounts_and_inode_ids)
{
	cis_errmsg em = {{0}};
	mst_inode a, a2;
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &a, &em), 0);
	mst_close(m);
	open_master();
	cr_assert_eq(mst_mount_count(m), 1);
	uint64_t before = cis_counter_get(m->c_store_lists);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &a2, &em), 0, "%s", em.text);
	cr_assert_eq(a2.id, a.id);
	cr_assert_eq(cis_counter_get(m->c_store_lists), before, "listing came from LMDB");
}

static void call(uint16_t type, const ProtobufCMessage *req, mst_reply *r)
{
	size_t len = protobuf_c_message_get_packed_size(req);
	uint8_t *buf = malloc(len + 1);
	protobuf_c_message_pack(req, buf);
	mst_rpc_dispatch(m, type, buf, len, r);
	free(buf);
}

Test(master, rpc_lookup_open_and_garbage)
{
	cis_errmsg em = {{0}};
	mst_reply r;
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	Cis__LookupRequest lq = CIS__LOOKUP_REQUEST__INIT;
	lq.parent = MST_ROOT_INO;
	lq.name = "data";
	call(CIS_MSG_MASTER_LOOKUP, &lq.base, &r);
	cr_assert_eq(r.code, 0, "%s", r.em.text);
	uint64_t dir = ((Cis__LookupReply *)r.msg)->inode->id;
	cr_assert(((Cis__LookupReply *)r.msg)->inode->mount_point);
	mst_reply_clear(&r);
	lq.parent = dir;
	lq.name = "a.txt";
	call(CIS_MSG_MASTER_LOOKUP, &lq.base, &r);
	cr_assert_eq(r.code, 0, "%s", r.em.text);
	uint64_t file = ((Cis__LookupReply *)r.msg)->inode->id;
	mst_reply_clear(&r);
	lq.name = "..";
	call(CIS_MSG_MASTER_LOOKUP, &lq.base, &r);
	cr_assert_eq(r.code, -EINVAL);
	mst_reply_clear(&r);

	Cis__OpenRequest oq = CIS__OPEN_REQUEST__INIT;
	oq.inode = file;
	call(CIS_MSG_MASTER_OPEN, &oq.base, &r);
	cr_assert_eq(r.code, 0, "%s", r.em.text);
	Cis__OpenReply *o = (Cis__OpenReply *)r.msg;
	cr_assert_str_eq(o->inode->key, "a.txt");
	cr_assert_eq(o->mount->block_size, MST_DEFAULT_BLOCK);
	cr_assert_eq(o->mount->n_options, 1, "credentials go to cluster clients");
	mst_reply_clear(&r);

	Cis__ReadDirRequest rq = CIS__READ_DIR_REQUEST__INIT;
	rq.inode = dir;
	call(CIS_MSG_MASTER_READDIR, &rq.base, &r);
	cr_assert_eq(r.code, 0);
	cr_assert_eq(((Cis__ReadDirReply *)r.msg)->n_entries, 3);
	cr_assert(((Cis__ReadDirReply *)r.msg)->eof);
	mst_reply_clear(&r);

	const uint8_t junk[] = {0xff, 0xff, 0xff, 0x01, 0x02};
	mst_rpc_dispatch(m, CIS_MSG_MASTER_LOOKUP, junk, sizeof(junk), &r);
	cr_assert_eq(r.code, -CIS_E_PROTO);
	mst_reply_clear(&r);
	mst_rpc_dispatch(m, 199, junk, 0, &r);
	cr_assert_eq(r.code, -CIS_E_PROTO);
	mst_reply_clear(&r);
}

/* OPEN with the version a reader found changed: the master asks the store
 * and answers with what it holds now (sync_interval 0: nothing else would
 * ever show the change); a version already replaced, or none, asks nothing;
 * a file gone from the store is gone from the namespace. */
static int open_with(uint64_t file, const char *stale, Cis__Inode *got)
{
	mst_reply r;
	Cis__OpenRequest oq = CIS__OPEN_REQUEST__INIT;
	oq.inode = file;
	oq.stale_version = (char *)stale;
	call(CIS_MSG_MASTER_OPEN, &oq.base, &r);
	int code = r.code;
	if (code == 0) {
		Cis__Inode *i = ((Cis__OpenReply *)r.msg)->inode;
		got->size = i->size;
		got->type = i->type;
		snprintf(got->version, CIS_UFS_VERSION_MAX, "%s", i->version);
	}
	mst_reply_clear(&r);
	return code;
}

Test(master, open_after_a_changed_read_asks_the_store)
{
	cis_errmsg em = {{0}};
	mst_inode a, b;
	char ver[CIS_UFS_VERSION_MAX], old[CIS_UFS_VERSION_MAX], p[400];
	Cis__Inode got = {.version = ver};
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/a.txt", &a, &em), 0);
	cr_assert_eq(mst_ns_resolve(m, "/data/b.txt", &b, &em), 0);
	snprintf(old, sizeof(old), "%s", a.version);
	usleep(10000); /* a new mtime even on a coarse clock */
	put_file(store, "a.txt", "a longer content");
	uint64_t asked = cis_counter_get(m->c_store_stats);

	cr_assert_eq(open_with(a.id, "", &got), 0);
	cr_assert_str_eq(ver, old, "a plain open asks no store");
	cr_assert_eq(open_with(a.id, "some-other-version", &got), 0);
	cr_assert_str_eq(ver, old, "a version not held asks no store");
	cr_assert_eq(cis_counter_get(m->c_store_stats), asked);

	cr_assert_eq(open_with(a.id, old, &got), 0);
	cr_assert_eq(got.size, 16);
	cr_assert_str_neq(ver, old);
	cr_assert_eq(cis_counter_get(m->c_store_stats), asked + 1);
	mst_inode a2;
	cr_assert_eq(mst_ns_resolve(m, "/data/a.txt", &a2, &em), 0);
	cr_assert_eq(a2.id, a.id, "the inode is kept");
	cr_assert_str_eq(a2.version, ver, "stored, not only answered");
	cr_assert_eq(open_with(a.id, old, &got), 0, "asked again: already refreshed");
	cr_assert_eq(cis_counter_get(m->c_store_stats), asked + 1);

	snprintf(p, sizeof(p), "%s/b.txt", store);
	cr_assert_eq(unlink(p), 0);
	cr_assert_eq(open_with(b.id, b.version, &got), -ENOENT);
	cr_assert_eq(mst_ns_resolve(m, "/data/b.txt", &b, &em), -ENOENT);

	/* Became a directory: the listing replaces the inode. */
	snprintf(p, sizeof(p), "%s/a.txt", store);
	cr_assert_eq(unlink(p), 0);
	cr_assert_eq(mkdir(p, 0755), 0);
	cr_assert_eq(open_with(a.id, ver, &got), -ENOENT);
	cr_assert_eq(mst_ns_resolve(m, "/data/a.txt", &a2, &em), 0);
	cr_assert_eq(a2.type, MST_DIR);
}

/* Which requests the RPC server hands to the threads that may wait on a
 * store: a lookup or readdir in a directory due for a listing, an open
 * asking about a changed file; not the same once listed, nor junk. The
 * quick answer refuses before touching the store, and answers the rest in
 * full. */
static bool may_wait(uint16_t type, const ProtobufCMessage *req)
{
	size_t len = protobuf_c_message_get_packed_size(req);
	uint8_t *buf = malloc(len + 1);
	mst_reply r;
	protobuf_c_message_pack(req, buf);
	uint64_t lists = cis_counter_get(m->c_store_lists);
	bool answered = mst_rpc_dispatch_quick(m, type, buf, len, &r);
	free(buf);
	cr_assert_eq(cis_counter_get(m->c_store_lists), lists, "the quick answer listed a store");
	if (answered) {
		cr_assert(r.code || r.msg, "answered without a reply");
		mst_reply_clear(&r);
	} else {
		cr_assert(!r.msg && !r.code, "a refused request left a reply");
	}
	return !answered;
}

Test(master, requests_that_may_wait_on_a_store)
{
	cis_errmsg em = {{0}};
	mst_inode d, a;
	mst_reply r;
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data", &d, &em), 0);
	Cis__LookupRequest lq = CIS__LOOKUP_REQUEST__INIT;
	lq.parent = d.id;
	lq.name = "a.txt";
	Cis__ReadDirRequest rq = CIS__READ_DIR_REQUEST__INIT;
	rq.inode = d.id;
	cr_assert(may_wait(CIS_MSG_MASTER_LOOKUP, &lq.base), "never listed");
	cr_assert(may_wait(CIS_MSG_MASTER_READDIR, &rq.base), "never listed");
	cr_assert_eq(mst_ns_resolve(m, "/data/a.txt", &a, &em), 0); /* lists /data */
	cr_assert_not(may_wait(CIS_MSG_MASTER_LOOKUP, &lq.base), "listed (sync interval 0)");
	cr_assert_not(may_wait(CIS_MSG_MASTER_READDIR, &rq.base));
	Cis__OpenRequest oq = CIS__OPEN_REQUEST__INIT;
	oq.inode = a.id;
	cr_assert_not(may_wait(CIS_MSG_MASTER_OPEN, &oq.base));
	oq.stale_version = a.version;
	cr_assert(may_wait(CIS_MSG_MASTER_OPEN, &oq.base));
	Cis__GetAttrRequest gq = CIS__GET_ATTR_REQUEST__INIT;
	gq.inode = d.id;
	cr_assert_not(may_wait(CIS_MSG_MASTER_GETATTR, &gq.base));
	const uint8_t junk[] = {0xff, 0xff, 0xff, 0x01};
	cr_assert(mst_rpc_dispatch_quick(m, CIS_MSG_MASTER_LOOKUP, junk, sizeof(junk), &r));
	cr_assert_eq(r.code, -CIS_E_PROTO);
	mst_reply_clear(&r);
	/* the thread may wait on stores again: a plain dispatch lists */
	Cis__LookupRequest lq2 = CIS__LOOKUP_REQUEST__INIT;
	mst_inode sub;
	cr_assert_eq(mst_ns_resolve(m, "/data/sub", &sub, &em), 0);
	lq2.parent = sub.id;
	lq2.name = "c.bin";
	call(CIS_MSG_MASTER_LOOKUP, &lq2.base, &r);
	cr_assert_eq(r.code, 0, "%s", r.em.text);
	mst_reply_clear(&r);
}

/* A file:// store's links are inodes of their own: typed, with the text,
 * kept across a restart, a changed text (or a link become a file) is a new
 * inode; GETATTR carries the text, OPEN refuses a link. */
Test(master, links_listed_as_links)
{
	cis_errmsg em = {{0}};
	mst_inode l, l2;
	uint64_t dirs;
	char p[400];
	mst_reply r;
	snprintf(p, sizeof(p), "%s/lnk", store);
	cr_assert_eq(symlink("sub/c.bin", p), 0);
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/lnk", &l, &em), 0, "%s", em.text);
	cr_assert_eq(l.type, MST_LINK);
	cr_assert_str_eq(l.link_target, "sub/c.bin");
	cr_assert_eq(l.size, 9);

	Cis__GetAttrRequest gq = CIS__GET_ATTR_REQUEST__INIT;
	gq.inode = l.id;
	call(CIS_MSG_MASTER_GETATTR, &gq.base, &r);
	cr_assert_eq(r.code, 0, "%s", r.em.text);
	Cis__Inode *gi = ((Cis__GetAttrReply *)r.msg)->inode;
	cr_assert_eq(gi->type, CIS__INODE_TYPE__INODE_LINK);
	cr_assert_str_eq(gi->link_target, "sub/c.bin");
	cr_assert_str_eq(gi->key, "");
	mst_reply_clear(&r);
	Cis__OpenRequest oq = CIS__OPEN_REQUEST__INIT;
	oq.inode = l.id;
	call(CIS_MSG_MASTER_OPEN, &oq.base, &r);
	cr_assert_eq(r.code, -ELOOP);
	mst_reply_clear(&r);

	mst_close(m);
	open_master();
	cr_assert_eq(mst_ns_resolve(m, "/data/lnk", &l2, &em), 0, "%s", em.text);
	cr_assert_eq(l2.id, l.id);
	cr_assert_str_eq(l2.link_target, "sub/c.bin");

	unlink(p);
	cr_assert_eq(symlink("b.txt", p), 0);
	cr_assert_eq(mst_ns_sync(m, "/data", false, &dirs, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/lnk", &l2, &em), 0, "%s", em.text);
	cr_assert_neq(l2.id, l.id, "a changed link is a new inode");
	cr_assert_str_eq(l2.link_target, "b.txt");
	cr_assert_eq(l2.size, 5);

	unlink(p);
	put_file(store, "lnk", "now a file");
	cr_assert_eq(mst_ns_sync(m, "/data", false, &dirs, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/lnk", &l, &em), 0, "%s", em.text);
	cr_assert_eq(l.type, MST_FILE);
	cr_assert_neq(l.id, l2.id);
	cr_assert_str_eq(l.key, "lnk");
}

/* A link named in the store at name, with text target. */
static void link_in_store(const char *name, const char *target)
{
	char p[400];
	snprintf(p, sizeof(p), "%s/%s", store, name);
	cr_assert_eq(symlink(target, p), 0, "%s", p);
}

Test(master, links_followed_in_paths)
{
	cis_errmsg em = {{0}};
	char abs[400], real[MST_PATH_MAX + 1];
	snprintf(abs, sizeof(abs), "%s/sub/c.bin", store);
	link_in_store("latest", "sub");
	link_in_store("sub/up", "../b.txt");
	link_in_store("abs", abs);
	char abs2[420];
	snprintf(abs2, sizeof(abs2), "%s/./sub//c.bin", store);
	link_in_store("abs2", abs2);
	link_in_store("twice", "latest/./up");
	link_in_store("out", "../../etc");
	link_in_store("outabs", "/etc/passwd");
	link_in_store("loop", "loop");
	link_in_store("gone", "nothing");
	char longname[400];
	memset(longname, 'x', 300);
	longname[300] = 0;
	link_in_store("long", longname);
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);

	static const struct {
		const char *path;
		bool follow_last;
		const char *want;
	} cases[] = {
	    {"/", true, "/"},
	    {"/data/b.txt", true, "/data/b.txt"},
	    {"/data/latest", true, "/data/sub"},
	    {"/data/latest", false, "/data/latest"},
	    {"/data/latest/c.bin", false, "/data/sub/c.bin"},
	    {"/data/latest/up", true, "/data/b.txt"},
	    {"/data/latest/up", false, "/data/sub/up"},
	    {"/data/abs", true, "/data/sub/c.bin"},
	    {"/data/abs2", true, "/data/sub/c.bin"},
	    {"/data/latest/", false, "/data/sub"},
	    {"/data/", false, "/data"},
	    {"/data/twice", true, "/data/b.txt"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		mst_inode got;
		cr_assert_eq(
		    mst_ns_realpath(m, cases[i].path, cases[i].follow_last, real, &got, &em), 0,
		    "%s: %s", cases[i].path, em.text);
		cr_assert_str_eq(real, cases[i].want, "%s", cases[i].path);
		mst_inode want;
		cr_assert_eq(mst_ns_resolve(m, cases[i].want, &want, &em), 0, "%s", em.text);
		cr_assert_eq(got.id, want.id, "%s: the inode of %s", cases[i].path, cases[i].want);
	}
	cr_assert_eq(mst_ns_realpath(m, "/data/out", true, real, NULL, &em), -EXDEV);
	cr_assert(strstr(em.text, "'out'") && strstr(em.text, "leads out of its mount"), "%s",
	          em.text);
	cr_assert_eq(mst_ns_realpath(m, "/data/outabs", true, real, NULL, &em), -EXDEV);
	cr_assert(strstr(em.text, "points outside its mount"), "%s", em.text);
	cr_assert_eq(mst_ns_realpath(m, "/data/loop", true, real, NULL, &em), -ELOOP);
	cr_assert_eq(mst_ns_realpath(m, "/data/gone", true, real, NULL, &em), -ENOENT);
	cr_assert_eq(mst_ns_realpath(m, "/data/long", true, real, NULL, &em), -ENAMETOOLONG,
	             "a link's text with a name over the limit");
	cr_assert_eq(mst_ns_realpath(m, "/data/b.txt/x", true, real, NULL, &em), -ENOTDIR);
	cr_assert_eq(mst_ns_realpath(m, "/data/../x", true, real, NULL, &em), -EINVAL, "bad paths");
}

/* RegisterWorker for id at host:port through the RPC dispatch: its code,
 * its message in *em (may be NULL). */
static int register_at(const char *host, uint32_t port, uint64_t id, cis_errmsg *em)
{
	mst_reply r;
	Cis__WorkerInfo wi = CIS__WORKER_INFO__INIT;
	Cis__RegisterWorkerRequest rq = CIS__REGISTER_WORKER_REQUEST__INIT;
	wi.host = (char *)host;
	wi.rpc_port = port;
	wi.id = id;
	rq.worker = &wi;
	call(CIS_MSG_MASTER_REGISTER_WORKER, &rq.base, &r);
	int code = r.code;
	if (em)
		*em = r.em;
	mst_reply_clear(&r);
	return code;
}

/* A worker restarted with its state lost registers under a new id at the
 * same address: the old entry goes at once, with its block locations (they
 * counted copies that were not there, and named the old id as a copy's
 * source to the new one, the same process). */
Test(master, a_new_id_at_the_same_address_replaces_the_old)
{
	mst_reply r;
	cr_assert_eq(register_at("10.0.0.1", 19610, 42, NULL), 0);
	uint8_t idb[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	ProtobufCBinaryData added[1] = {{16, idb}};
	Cis__HeartbeatRequest hq = CIS__HEARTBEAT_REQUEST__INIT;
	hq.worker_id = 42;
	hq.n_added = 1;
	hq.added = added;
	call(CIS_MSG_MASTER_HEARTBEAT, &hq.base, &r);
	cr_assert_eq(r.code, 0, "%s", r.em.text);
	mst_reply_clear(&r);
	/* Another worker at another port stays. */
	cr_assert_eq(register_at("10.0.0.1", 19620, 50, NULL), 0);
	/* The same address, a new id. */
	cr_assert_eq(register_at("10.0.0.1", 19610, 43, NULL), 0);
	uint64_t *ids;
	size_t n;
	cr_assert_eq(mst_workers_ids(m->workers, &ids, &n), 0);
	cr_assert_eq(n, 2, "%zu live entries", n);
	cr_assert((ids[0] == 43 && ids[1] == 50) || (ids[0] == 50 && ids[1] == 43));
	free(ids);
	cis_block_id bid = {0x0102030405060708ull, 0x090a0b0c0d0e0f10ull};
	uint64_t w[4];
	cr_assert_eq(mst_workers_locate(m->workers, bid, w, 4), 0, "the old id's copy is gone");
}

/* A registration for a live id from another address (a second worker with
 * a copied state dir, a stray frame) is refused; the entry keeps its
 * address (taking it over sent the worker's reads and loads elsewhere). */
Test(master, a_live_id_from_another_address_is_refused)
{
	cis_errmsg em = {{0}};
	cr_assert_eq(register_at("10.0.0.1", 19610, 42, NULL), 0);
	cr_assert_eq(register_at("127.0.0.1", 9, 42, &em), -EBUSY);
	cr_assert(strstr(em.text, "worker id 42 is live at 10.0.0.1:19610"), "%s", em.text);
	Cis__WorkerInfo *now = mst_workers_info(m->workers, 42);
	cr_assert_not_null(now);
	cr_assert_str_eq(now->host, "10.0.0.1");
	cr_assert_eq(now->rpc_port, 19610);
	protobuf_c_message_free_unpacked(&now->base, NULL);
	/* The same worker registering again (a restart) is taken. */
	cr_assert_eq(register_at("10.0.0.1", 19610, 42, NULL), 0);
}

/* A registration must name where the worker serves: without its address,
 * its host or its RPC port, or with a port out of range, it is refused (a
 * stray frame would become a worker that clients and loads are sent to). */
Test(master, a_registration_without_an_address_is_refused)
{
	mst_reply r;
	Cis__RegisterWorkerRequest rq = CIS__REGISTER_WORKER_REQUEST__INIT;
	uint64_t *ids;
	size_t n;

	call(CIS_MSG_MASTER_REGISTER_WORKER, &rq.base, &r);
	cr_assert_eq(r.code, -EINVAL, "no worker: %s", r.em.text);
	mst_reply_clear(&r);
	cr_assert_eq(register_at("", 19610, 0, NULL), -EINVAL, "no host");
	cr_assert_eq(register_at("10.0.0.1", 0, 0, NULL), -EINVAL, "no port");
	cr_assert_eq(register_at("10.0.0.1", 70000, 0, NULL), -EINVAL, "port 70000");
	cr_assert_eq(mst_workers_ids(m->workers, &ids, &n), 0);
	cr_assert_eq(n, 0, "%zu workers registered", n);
	free(ids);
}

struct writer_hold {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool holding;
};

/* Holds LMDB's writer lock for 3 s, as an unmount or a big listing may. */
static void *hold_writer(void *arg)
{
	struct writer_hold *h = arg;
	MDB_txn *txn;

	cr_assert_eq(mst_txn_begin(m, true, &txn), 0);
	pthread_mutex_lock(&h->mu);
	h->holding = true;
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
	usleep(3000 * 1000);
	mdb_txn_abort(txn);
	return NULL;
}

/* A worker registering again under its id (the counter is past it) is
 * answered on the RPC I/O thread with nothing written, while another thread
 * holds LMDB's writer lock: that thread's other connections (other
 * workers' heartbeats) would wait too. A new id is a write: the I/O thread
 * leaves it to the pool. */
Test(master, a_known_worker_registers_without_waiting_for_the_writer)
{
	struct writer_hold h = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
	Cis__WorkerInfo wi = CIS__WORKER_INFO__INIT;
	Cis__RegisterWorkerRequest rq = CIS__REGISTER_WORKER_REQUEST__INIT;
	uint8_t buf[256];
	mst_reply r;
	pthread_t t;

	cr_assert_eq(register_at("10.0.0.1", 19610, 42, NULL), 0);
	cr_assert_eq(pthread_create(&t, NULL, hold_writer, &h), 0);
	pthread_mutex_lock(&h.mu);
	while (!h.holding)
		pthread_cond_wait(&h.cv, &h.mu);
	pthread_mutex_unlock(&h.mu);
	wi.host = "10.0.0.1";
	wi.rpc_port = 19610;
	wi.id = 42;
	rq.worker = &wi;
	size_t len = protobuf_c_message_pack(&rq.base, buf);
	uint64_t t0 = cis_mono_ms();
	cr_assert(mst_rpc_dispatch_quick(m, CIS_MSG_MASTER_REGISTER_WORKER, buf, len, &r),
	          "a known id was left to the pool");
	cr_assert_lt(cis_mono_ms() - t0, 1500, "the registration waited for the writer");
	cr_assert_eq(r.code, 0, "%s", r.em.text);
	cr_assert_eq(((Cis__RegisterWorkerReply *)r.msg)->worker_id, 42);
	mst_reply_clear(&r);
	wi.id = 0;
	wi.rpc_port = 19611;
	len = protobuf_c_message_pack(&rq.base, buf);
	t0 = cis_mono_ms();
	cr_assert_not(mst_rpc_dispatch_quick(m, CIS_MSG_MASTER_REGISTER_WORKER, buf, len, &r),
	              "a new id was written on the I/O thread");
	cr_assert_lt(cis_mono_ms() - t0, 1500, "the refusal waited for the writer");
	pthread_join(t, NULL);
	/* On a pool thread it is written, and the next id is past it. */
	call(CIS_MSG_MASTER_REGISTER_WORKER, &rq.base, &r);
	cr_assert_eq(r.code, 0, "%s", r.em.text);
	cr_assert_eq(((Cis__RegisterWorkerReply *)r.msg)->worker_id, 43);
	mst_reply_clear(&r);
}

Test(master, workers_register_heartbeat_lost)
{
	mst_reply r;
	Cis__HeartbeatRequest hq = CIS__HEARTBEAT_REQUEST__INIT;
	hq.worker_id = 42;
	call(CIS_MSG_MASTER_HEARTBEAT, &hq.base, &r);
	cr_assert_eq(r.code, -ENOENT, "unknown workers are told to register");
	cr_assert(strstr(r.em.text, "register again"));
	mst_reply_clear(&r);

	Cis__WorkerInfo wi = CIS__WORKER_INFO__INIT;
	wi.host = "10.0.0.1";
	wi.rpc_port = 19610;
	wi.id = 42;
	Cis__RegisterWorkerRequest rq = CIS__REGISTER_WORKER_REQUEST__INIT;
	rq.worker = &wi;
	call(CIS_MSG_MASTER_REGISTER_WORKER, &rq.base, &r);
	cr_assert_eq(r.code, 0);
	cr_assert_eq(((Cis__RegisterWorkerReply *)r.msg)->worker_id, 42, "persisted id kept");
	mst_reply_clear(&r);

	uint8_t idb[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	ProtobufCBinaryData added[1] = {{16, idb}};
	hq.n_added = 1;
	hq.added = added;
	call(CIS_MSG_MASTER_HEARTBEAT, &hq.base, &r);
	cr_assert_eq(r.code, 0, "%s", r.em.text);
	mst_reply_clear(&r);
	cis_block_id bid = {0x0102030405060708ull, 0x090a0b0c0d0e0f10ull};
	uint64_t w[4];
	cr_assert_eq(mst_workers_locate(m->workers, bid, w, 4), 1);
	cr_assert_eq(w[0], 42);

	Cis__WorkerListRequest lq = CIS__WORKER_LIST_REQUEST__INIT;
	call(CIS_MSG_MASTER_WORKER_LIST, &lq.base, &r);
	cr_assert_eq(((Cis__WorkerListReply *)r.msg)->n_workers, 1);
	uint64_t v = ((Cis__WorkerListReply *)r.msg)->version;
	mst_reply_clear(&r);
	lq.known_version = v;
	call(CIS_MSG_MASTER_WORKER_LIST, &lq.base, &r);
	cr_assert(((Cis__WorkerListReply *)r.msg)->unchanged);
	mst_reply_clear(&r);

	/* Silent past the timeout (200 ms here): lost, locations dropped. */
	cr_assert_eq(mst_workers_expire(m->workers, cis_mono_ms() + 100000), 1);
	cr_assert_eq(mst_workers_locate(m->workers, bid, w, 4), 0);
	cr_assert_gt(mst_workers_version(m->workers), v);
	hq.n_added = 0;
	call(CIS_MSG_MASTER_HEARTBEAT, &hq.base, &r);
	cr_assert_eq(r.code, -ENOENT);
	mst_reply_clear(&r);
}

/* Block number k (1..255) as the 16 bytes a worker sends. */
static void block_bytes(uint8_t k, uint8_t out[16])
{
	memset(out, 0, 16);
	out[0] = k;
	out[15] = 1;
}

/* How many workers hold block number k; the first of them in *first. */
static size_t holders(uint8_t k, uint64_t *first)
{
	cis_block_id id = {(uint64_t)k << 56, 1};
	uint64_t w[4];
	size_t n = mst_workers_locate(m->workers, id, w, 4);
	if (n && first)
		*first = w[0];
	return n;
}

/* One page of worker wid's full block report naming blocks ks[0..n). */
static int report_page(uint64_t wid, bool first, bool last, const uint8_t *ks, size_t n,
                       uint64_t *known)
{
	uint8_t raw[8][16];
	ProtobufCBinaryData b[8];
	for (size_t i = 0; i < n; i++) {
		block_bytes(ks[i], raw[i]);
		b[i].data = raw[i];
		b[i].len = 16;
	}
	Cis__BlockReportRequest q = CIS__BLOCK_REPORT_REQUEST__INIT;
	q.worker_id = wid;
	q.first = first;
	q.last = last;
	q.n_blocks = n;
	q.blocks = b;
	mst_reply r;
	call(CIS_MSG_MASTER_BLOCK_REPORT, &q.base, &r);
	int code = r.code;
	if (code == 0 && known)
		*known = ((Cis__BlockReportReply *)r.msg)->blocks_known;
	mst_reply_clear(&r);
	return code;
}

/* A heartbeat from wid adding block number add and removing block number
 * del (0: none). */
static int heartbeat_delta(uint64_t wid, uint8_t add, uint8_t del)
{
	uint8_t a[16], d[16];
	block_bytes(add, a);
	block_bytes(del, d);
	ProtobufCBinaryData ab = {16, a}, db = {16, d};
	Cis__HeartbeatRequest hq = CIS__HEARTBEAT_REQUEST__INIT;
	hq.worker_id = wid;
	hq.n_added = add ? 1 : 0;
	hq.added = &ab;
	hq.n_removed = del ? 1 : 0;
	hq.removed = &db;
	mst_reply r;
	call(CIS_MSG_MASTER_HEARTBEAT, &hq.base, &r);
	int code = r.code;
	mst_reply_clear(&r);
	return code;
}

/* A full report in pages replaces the worker's locations at its last page:
 * until then the blocks it had stay located (a load half way through a
 * worker's report fetched them again, replication copied them); what a
 * heartbeat adds or removes meanwhile counts. */
Test(master, a_full_report_replaces_locations_at_its_last_page)
{
	uint64_t known = 0, who = 0;
	cr_assert_eq(register_at("10.0.0.1", 19610, 42, NULL), 0);
	cr_assert_eq(report_page(42, true, true, (const uint8_t[]){1, 2, 3}, 3, &known), 0);
	cr_assert_eq(known, 3);
	cr_assert_eq(report_page(42, true, false, (const uint8_t[]){1}, 1, &known), 0);
	cr_assert_eq(holders(2, &who), 1, "a block not named yet is still located");
	cr_assert_eq(who, 42);
	cr_assert_eq(holders(3, NULL), 1);
	cr_assert_eq(heartbeat_delta(42, 4, 0), 0);
	cr_assert_eq(heartbeat_delta(42, 0, 1), 0);
	cr_assert_eq(report_page(42, false, true, (const uint8_t[]){2}, 1, &known), 0);
	cr_assert_eq(known, 2, "blocks 2 and 4, got %llu", (unsigned long long)known);
	cr_assert_eq(holders(1, NULL), 0, "removed by a heartbeat during the report");
	cr_assert_eq(holders(2, NULL), 1);
	cr_assert_eq(holders(3, NULL), 0, "not in the report: dropped at its last page");
	cr_assert_eq(holders(4, NULL), 1, "added by a heartbeat during the report");
	json_t *j = mst_workers_json(m->workers);
	cr_assert_eq(json_integer_value(json_object_get(j, "blocks_indexed")), 2);
	json_decref(j);
	/* An empty report (a worker whose cache was wiped) drops everything. */
	cr_assert_eq(report_page(42, true, true, NULL, 0, &known), 0);
	cr_assert_eq(known, 0);
	cr_assert_eq(holders(2, NULL) + holders(4, NULL), 0);
}

/* A worker registering again (a warm restart) keeps its locations until its
 * report says what it still has. */
Test(master, a_reregistered_worker_keeps_its_locations_until_its_report)
{
	cr_assert_eq(register_at("10.0.0.1", 19610, 42, NULL), 0);
	cr_assert_eq(heartbeat_delta(42, 1, 0), 0);
	cr_assert_eq(heartbeat_delta(42, 2, 0), 0);
	cr_assert(mst_workers_sure_holder(m->workers, 42));
	cr_assert_eq(register_at("10.0.0.1", 19610, 42, NULL), 0);
	cr_assert_eq(holders(1, NULL), 1);
	cr_assert_eq(holders(2, NULL), 1);
	/* Not a sure holder meanwhile: replication trims no copy elsewhere
	 * for one this worker may have lost. */
	cr_assert_not(mst_workers_sure_holder(m->workers, 42));
	cr_assert_eq(report_page(42, true, true, (const uint8_t[]){2}, 1, NULL), 0);
	cr_assert(mst_workers_sure_holder(m->workers, 42));
	cr_assert_eq(holders(1, NULL), 0);
	cr_assert_eq(holders(2, NULL), 1);
}

/* A lost worker takes its own locations with it and no one else's. */
Test(master, a_lost_worker_drops_only_its_own_locations)
{
	uint64_t who = 0;
	cr_assert_eq(register_at("10.0.0.1", 19610, 42, NULL), 0);
	cr_assert_eq(register_at("10.0.0.2", 19610, 50, NULL), 0);
	cr_assert_eq(heartbeat_delta(42, 1, 0), 0);
	cr_assert_eq(heartbeat_delta(42, 2, 0), 0);
	cr_assert_eq(heartbeat_delta(50, 1, 0), 0);
	cr_assert_eq(heartbeat_delta(50, 3, 0), 0);
	cr_assert_eq(holders(1, NULL), 2);
	usleep(20000);
	uint64_t t = cis_mono_ms();
	cr_assert_eq(heartbeat_delta(50, 0, 0), 0);
	/* 42 was last heard over 20 ms before t, 50 at t or later. */
	mst_workers_expire(m->workers, t + 199);
	uint64_t *ids;
	size_t n;
	cr_assert_eq(mst_workers_ids(m->workers, &ids, &n), 0);
	cr_assert_eq(n, 1);
	cr_assert_eq(ids[0], 50);
	free(ids);
	cr_assert_eq(holders(1, &who), 1);
	cr_assert_eq(who, 50);
	cr_assert_eq(holders(2, NULL), 0);
	cr_assert_eq(holders(3, &who), 1);
	cr_assert_eq(who, 50);
}

Test(master, api_redacts_credentials_and_checks_input)
{
	cis_errmsg em = {{0}};
	json_t *out;
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	cr_assert_eq(mst_api_handle(m, "GET", "/api/v1/mounts", NULL, NULL, &out), 200);
	char *s = json_dumps(out, 0);
	cr_assert(strstr(s, "\"fsync\": \"false\""), "%s", s);
	free(s);
	json_decref(out);
	/* An S3 mount's credentials show as "***" (built by hand: the store
	 * would be asked when mounting). */
	mst_mount s3 = {.id = 9, .path = "/s3", .uri = "s3://b/p", .block_size = 4 << 20};
	cis_kvlist_set(&s3.options, "region", "eu-west-1");
	cis_kvlist_set(&s3.options, "secret_key", "TOPSECRET123");
	out = mst_mount_json(&s3);
	s = json_dumps(out, 0);
	cr_assert_null(strstr(s, "TOPSECRET123"), "%s", s);
	cr_assert(strstr(s, "\"secret_key\": \"***\""), "%s", s);
	cr_assert(strstr(s, "\"region\": \"eu-west-1\""), "%s", s);
	free(s);
	json_decref(out);
	cis_kvlist_free(&s3.options);

	cr_assert_eq(mst_api_handle(m, "PUT", "/api/v1/mounts", NULL, NULL, &out), 405);
	json_decref(out);
	cr_assert_eq(mst_api_handle(m, "GET", "/api/v1/nope", NULL, NULL, &out), 404);
	json_decref(out);
	json_t *b = json_pack("{s:s}", "uri", "file:///tmp");
	cr_assert_eq(mst_api_handle(m, "POST", "/api/v1/mounts", NULL, b, &out), 400);
	json_decref(out);
	json_decref(b);
	b = json_pack("{s:s, s:s}", "path", "/y", "uri", "gopher://x/y");
	cr_assert_eq(mst_api_handle(m, "POST", "/api/v1/mounts", NULL, b, &out), 400);
	json_decref(out);
	json_decref(b);

	cis_kvlist q = CIS_KVLIST_INIT;
	cis_kvlist_set(&q, "path", "/data");
	cr_assert_eq(mst_api_handle(m, "GET", "/api/v1/ls", &q, NULL, &out), 200);
	cr_assert_eq(json_array_size(json_object_get(out, "entries")), 3);
	json_decref(out);
	cis_kvlist_set(&q, "path", "/data/../etc");
	cr_assert_eq(mst_api_handle(m, "GET", "/api/v1/stat", &q, NULL, &out), 400);
	json_decref(out);
	cis_kvlist_set(&q, "path", "/data/a.txt");
	cr_assert_eq(mst_api_handle(m, "GET", "/api/v1/stat", &q, NULL, &out), 200);
	s = json_dumps(out, 0);
	cr_assert_null(strstr(s, "TOPSECRET123"), "%s", s);
	free(s);
	json_decref(out);
	cis_kvlist_free(&q);
}

/* GET or POST path with query path=qpath: the status; the reply in *out. */
static int api_path(const char *method, const char *path, const char *qpath, json_t **out)
{
	cis_kvlist q = CIS_KVLIST_INIT;
	cis_kvlist_set(&q, "path", qpath);
	json_t *body = !strcmp(method, "POST") ? json_object() : NULL;
	int st = mst_api_handle(m, method, path, &q, body, out);
	json_decref(body);
	cis_kvlist_free(&q);
	return st;
}

static const char *jstr(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

/* A file:// store's names may be any bytes, JSON strings only UTF-8: every
 * reply that echoes such a path or text, errors included, has it with '?'
 * (and its exact bytes in *_hex), never a 500 or an empty "{}". */
Test(master, replies_echo_names_not_utf8)
{
	cis_errmsg em = {{0}};
	json_t *out;
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/caf\xe9", store);
	cr_assert_eq(mkdir(dir, 0755), 0);
	put_file(dir, "f", "abc");
	link_in_store("odd", "caf\xe9");
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);

	cr_assert_eq(api_path("GET", "/api/v1/ls", "/data/caf\xe9", &out), 200);
	cr_assert_str_eq(jstr(out, "path"), "/data/caf?");
	cr_assert_str_eq(jstr(out, "path_hex"), "2f646174612f636166e9");
	cr_assert_eq(json_array_size(json_object_get(out, "entries")), 1);
	json_decref(out);
	cr_assert_eq(api_path("GET", "/api/v1/ls", "/data/caf\xe9/f", &out), 200, "a file");
	cr_assert_str_eq(jstr(out, "path"), "/data/caf?/f");
	json_decref(out);

	cr_assert_eq(api_path("GET", "/api/v1/stat", "/data/odd", &out), 200);
	cr_assert_str_eq(jstr(out, "link_target"), "caf?");
	cr_assert_str_eq(jstr(out, "link_target_hex"), "636166e9");
	json_decref(out);
	cr_assert_eq(api_path("GET", "/api/v1/stat", "/data/a.txt", &out), 200);
	cr_assert_null(json_object_get(out, "path_hex"), "UTF-8 is exact already");
	json_decref(out);

	cr_assert_eq(api_path("POST", "/api/v1/sync", "/data/caf\xe9", &out), 200);
	cr_assert_str_eq(jstr(out, "path"), "/data/caf?");
	json_decref(out);

	cr_assert_eq(api_path("GET", "/api/v1/stat", "/data/caf\xe9/nope", &out), 404);
	cr_assert(jstr(out, "error") && strstr(jstr(out, "error"), "caf?"), "%s",
	          jstr(out, "error") ?: "no error text");
	json_decref(out);
	cr_assert_eq(api_path("GET", "/api/v1/stat", "\xff", &out), 400);
	cr_assert(jstr(out, "error") && strstr(jstr(out, "error"), "?"), "%s",
	          jstr(out, "error") ?: "no error text");
	json_decref(out);
}

static int post_mount(const char *path, const char *sync_interval_json)
{
	char body[700];
	snprintf(body, sizeof(body),
	         "{\"path\": \"%s\", \"uri\": \"file://%s\", \"sync_interval\": %s}", path, store,
	         sync_interval_json);
	json_t *b = json_loads(body, 0, NULL), *out = NULL;
	cr_assert(b, "%s", body);
	int st = mst_api_handle(m, "POST", "/api/v1/mounts", NULL, b, &out);
	json_decref(b);
	json_decref(out);
	return st;
}

/* A sync interval is at most 100 years: a longer one overflowed (seconds
 * times 1000 into the default; ms times 10^6 into a negative age limit, so
 * every lookup listed the store again). */
Test(master, sync_interval_is_bounded_and_never_overflows)
{
	cr_assert_eq(post_mount("/a", "9223372036854775807"), 400);
	cr_assert_eq(post_mount("/a", "10000000000"), 400, "317 years in seconds");
	cr_assert_eq(post_mount("/a", "\"200000d\""), 400);
	cr_assert_eq(post_mount("/a", "-1"), 400);
	cr_assert_eq(post_mount("/a", "\"36500d\""), 201);
	cis_errmsg em = {{0}};
	mst_inode i;
	cr_assert_eq(mst_ns_resolve(m, "/a/sub/c.bin", &i, &em), 0, "%s", em.text);
	uint64_t lists = cis_counter_get(m->c_store_lists);
	/* as a mount kept before intervals were bounded may have it */
	m->mounts[0]->sync_interval_ms = 200000ull * 86400 * 1000;
	cr_assert_eq(mst_ns_resolve(m, "/a/sub/c.bin", &i, &em), 0, "%s", em.text);
	cr_assert_eq(cis_counter_get(m->c_store_lists), lists, "listed again");
}

/* ls's limit and cookie are decimal counts: "0.5k" was taken as 512. */
/* A worker's texts are its own bytes: one whose host is not UTF-8 is still
 * listed (json_pack's "s" failed, and the worker went missing from the
 * list and the report's count while clients used it). */
Test(master, a_worker_named_in_bytes_not_utf8_is_listed)
{
	json_t *out = NULL;

	cr_assert_eq(register_at("host-\xff", 19610, 0, NULL), 0);
	cr_assert_eq(api_path("GET", "/api/v1/workers", "", &out), 200);
	json_t *ws = json_object_get(out, "workers");
	cr_assert_eq(json_array_size(ws), 1, "%zu workers listed", json_array_size(ws));
	cr_assert_str_eq(jstr(json_array_get(ws, 0), "host"), "host-?");
	json_int_t ago =
	    json_integer_value(json_object_get(json_array_get(ws, 0), "last_heartbeat_ms_ago"));
	cr_assert(ago >= 0 && ago < 60000, "last heartbeat %lld ms ago", (long long)ago);
	json_decref(out);
}

Test(master, ls_limit_and_cookie_are_decimal)
{
	cis_errmsg em = {{0}};
	json_t *out;
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	const char *bad[][2] = {{"limit", "0.5k"}, {"limit", "1k"},  {"limit", " 2"},
	                        {"limit", "+2"},   {"cookie", "1k"}, {"cookie", "-1"},
	                        {"limit", "0"},    {"limit", "4097"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cis_kvlist q = CIS_KVLIST_INIT;
		cis_kvlist_set(&q, "path", "/data");
		cis_kvlist_set(&q, bad[i][0], bad[i][1]);
		cr_assert_eq(mst_api_handle(m, "GET", "/api/v1/ls", &q, NULL, &out), 400, "%s=%s",
		             bad[i][0], bad[i][1]);
		json_decref(out);
		cis_kvlist_free(&q);
	}
	cis_kvlist q = CIS_KVLIST_INIT;
	cis_kvlist_set(&q, "path", "/data");
	cis_kvlist_set(&q, "limit", "2");
	cr_assert_eq(mst_api_handle(m, "GET", "/api/v1/ls", &q, NULL, &out), 200);
	cr_assert_eq(json_array_size(json_object_get(out, "entries")), 2);
	char next[32];
	snprintf(next, sizeof(next), "%lld",
	         json_integer_value(json_object_get(out, "next_cookie")));
	json_decref(out);
	cis_kvlist_set(&q, "cookie", next);
	cr_assert_eq(mst_api_handle(m, "GET", "/api/v1/ls", &q, NULL, &out), 200);
	cr_assert_eq(json_array_size(json_object_get(out, "entries")), 1);
	json_decref(out);
	cis_kvlist_free(&q);
}

/* A directory listed before whose refresh fails (the store is gone) is
 * served as it was last listed, and not listed again for a while; a sync
 * still says why it failed. It used to fail every lookup below it, each
 * after a listing of its own. */
Test(master, a_failed_refresh_serves_the_last_listing)
{
	cis_errmsg em = {{0}};
	mst_inode i;
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	m->mounts[0]->sync_interval_ms = 50;
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &i, &em), 0, "%s", em.text);
	char gone[400];
	snprintf(gone, sizeof(gone), "%s.gone", store);
	cr_assert_eq(rename(store, gone), 0);
	put_file(tmp, "store", "not a directory"); /* a store that fails every listing */
	cis_sleep_ms(100);
	uint64_t errors = cis_counter_get(m->c_store_list_errors);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &i, &em), 0, "%s", em.text);
	cr_assert_eq(i.size, 3);
	cr_assert_gt(cis_counter_get(m->c_store_list_errors), errors, "no refresh was tried");
	errors = cis_counter_get(m->c_store_list_errors);
	cr_assert_eq(mst_ns_resolve(m, "/data/a.txt", &i, &em), 0, "%s", em.text);
	cr_assert_eq(cis_counter_get(m->c_store_list_errors), errors, "listed again at once");
	uint64_t dirs;
	cr_assert_neq(mst_ns_sync(m, "/data", false, &dirs, &em), 0, "a sync of a gone store");
	cr_assert(em.text[0]);
}

/* A sync of a path new in the store lists the deepest directory the
 * namespace holds on the way to it (it used to answer "no such file"
 * until the parent's own sync); a recursive sync of / reaches a mount
 * below a plain directory the master made for it (it used to stop there). */
Test(master, sync_finds_new_paths_and_mounts_below_plain_directories)
{
	cis_errmsg em = {{0}};
	mst_inode i;
	uint64_t dirs;
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	cr_assert_eq(mount("/x/deep", store2, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/a.txt", &i, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/x/deep/inner.txt", &i, &em), 0, "%s", em.text);
	char d[400];
	snprintf(d, sizeof(d), "%s/newdir", store);
	cr_assert_eq(mkdir(d, 0755), 0);
	put_file(d, "f.txt", "new");
	cr_assert_eq(mst_ns_sync(m, "/data/newdir", false, &dirs, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/newdir/f.txt", &i, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_sync(m, "/data/nothing/here", false, &dirs, &em), -ENOENT);
	put_file(store2, "later.txt", "x");
	cr_assert_eq(mst_ns_sync(m, "/", true, &dirs, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/x/deep/later.txt", &i, &em), 0,
	             "the recursive sync did not reach /x/deep: %s", em.text);
}

/* A mount nested in a directory of another mount's store stays when that
 * directory leaves the store or becomes a file there: the directory is
 * kept for it (the mount went with the directory's subtree, and the outer
 * store's entry then showed at its path). */
Test(master, a_nested_mount_outlives_its_store_directory)
{
	cis_errmsg em = {{0}};
	mst_inode ino;
	uint64_t dirs;
	cr_assert_eq(mount("/data", store, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &ino, &em), 0, "%s", em.text);
	cr_assert_eq(mount("/data/sub/in", store2, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/in/inner.txt", &ino, &em), 0, "%s", em.text);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf %s/sub", store);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(mst_ns_sync(m, "/data", true, &dirs, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/in/inner.txt", &ino, &em), 0,
	             "the nested mount went with its directory: %s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/c.bin", &ino, &em), -ENOENT,
	             "the rest of the directory stays");
	put_file(store, "sub", "now a file");
	cr_assert_eq(mst_ns_sync(m, "/data", false, &dirs, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub/in/inner.txt", &ino, &em), 0, "%s", em.text);
	/* Unmounted, the store has its say again (sync interval 0: only
	 * because the unmount marks the directories on the way for listing). */
	cr_assert_eq(mst_mount_remove(m, "/data/sub/in", &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/data/sub", &ino, &em), 0, "%s", em.text);
	cr_assert_eq(ino.type, MST_FILE, "the directory kept for the mount stayed");
}

/* Unmounting takes the plain directories made on the way to the mount
 * with it when nothing else is in them: /x used to stay, and keep a mount
 * of /x, or of /, from being made. */
Test(master, unmount_takes_the_directories_made_for_the_mount)
{
	cis_errmsg em = {{0}};
	mst_inode ino;
	cr_assert_eq(mount("/x/y/data", store, &em), 0, "%s", em.text);
	cr_assert_eq(mount("/x/other", store2, &em), 0, "%s", em.text);
	cr_assert_eq(mst_mount_remove(m, "/x/y/data", &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/x/y", &ino, &em), -ENOENT, "/x/y was left");
	cr_assert_eq(mst_ns_resolve(m, "/x/other/inner.txt", &ino, &em), 0, "%s", em.text);
	cr_assert_eq(mst_mount_remove(m, "/x/other", &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/x", &ino, &em), -ENOENT, "/x was left");
	cr_assert_eq(mount("/", store, &em), 0, "%s", em.text);
	cr_assert_eq(mst_ns_resolve(m, "/a.txt", &ino, &em), 0, "%s", em.text);
}
