/* Namespace scale benchmark for cistern-master (bench/ns-scale.sh).
 *
 *   ns_bench gen DATA_DIR STORE_DIR INODES [PER_DIR]
 *     Writes INODES file inodes, PER_DIR (1000) to a directory, straight into
 *     the master's LMDB through its own store API (mst_inode_put and
 *     mst_child_put), under a file:// mount of STORE_DIR at /ns with a sync
 *     interval of 0 and every directory marked listed, so that a lookup is
 *     answered from LMDB alone and never lists the (empty) store.
 *   ns_bench lookup HOST PORT THREADS SECONDS INODES [PER_DIR]
 *     THREADS clients, each with its own RPC connection, look up random
 *     files (CIS_MSG_MASTER_LOOKUP by parent inode and name) for SECONDS;
 *     prints one JSON line: lookups, per second, p50 and p99 in us. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/frame.h"
#include "cistern/msgtype.h"
#include "cistern/proto/master.pb-c.h"
#include "cistern/rpc.h"
#include "cistern/time.h"
#include "master.h"

#define NSB_BATCH 100000u

static int nsb_put(mst_master *m, MDB_txn *txn, mst_inode *ino, uint64_t parent)
{
	int err = mst_store_next_id(m, txn, "next_inode", &ino->id);
	if (!err)
		err = mst_inode_put(m, txn, ino);
	if (!err)
		err = mst_child_put(m, txn, parent, ino->name, ino->id);
	return err;
}

static int nsb_gen(const char *data_dir, const char *store_dir, uint64_t n, uint64_t per_dir)
{
	mst_open_opts o = {.data_dir = data_dir, .no_background = true};
	mst_master *m;
	cis_errmsg em = {0};
	int err = mst_open(&o, &m, &em);
	if (err) {
		fprintf(stderr, "ns_bench: open %s: %s\n", data_dir, em.text);
		return 1;
	}
	char uri[MST_PATH_MAX];
	snprintf(uri, sizeof(uri), "file://%s", store_dir);
	mst_mount_req r = {.path = "/ns", .uri = uri, .sync_interval_ms = 0};
	uint64_t mid;
	mst_inode root, dir, f;
	MDB_txn *txn = NULL;
	err = mst_mount_add(m, &r, &mid, &em);
	if (err) {
		fprintf(stderr, "ns_bench: mount %s: %s\n", uri, em.text);
		goto out_close;
	}
	err = mst_ns_resolve(m, "/ns", &root, &em);
	if (err) {
		fprintf(stderr, "ns_bench: resolve /ns: %s\n", em.text);
		goto out_close;
	}
	int64_t now = cis_wall_ns();
	uint64_t t0 = cis_mono_ns(), done = 0, in_txn = 0;
	err = mst_txn_begin(m, true, &txn);
	for (uint64_t d = 0; !err && done < n; d++) {
		memset(&dir, 0, sizeof(dir));
		dir.parent = root.id;
		dir.mount_id = root.mount_id;
		dir.type = MST_DIR;
		dir.mode = 0755;
		dir.mtime_ns = now;
		dir.listed_ns = now;
		snprintf(dir.name, sizeof(dir.name), "d%06" PRIu64, d);
		snprintf(dir.key, sizeof(dir.key), "%s", dir.name);
		err = nsb_put(m, txn, &dir, root.id);
		for (uint64_t i = 0; !err && i < per_dir && done < n; i++, done++, in_txn++) {
			memset(&f, 0, sizeof(f));
			f.parent = dir.id;
			f.mount_id = root.mount_id;
			f.type = MST_FILE;
			f.mode = 0644;
			f.size = 1024;
			f.mtime_ns = now;
			snprintf(f.name, sizeof(f.name), "f%07" PRIu64 ".bin", i);
			snprintf(f.key, sizeof(f.key), "%s/%s", dir.name, f.name);
			snprintf(f.version, sizeof(f.version), "\"%016" PRIx64 "%016" PRIx64 "\"",
			         (uint64_t)(done * 0x9e3779b97f4a7c15ull), done);
			err = nsb_put(m, txn, &f, dir.id);
		}
		if (!err && in_txn >= NSB_BATCH) {
			err = mst_txn_commit(txn);
			txn = NULL;
			in_txn = 0;
			if (!err)
				err = mst_txn_begin(m, true, &txn);
		}
	}
	if (!err) {
		/* The mount root was listed (empty) once: it is not stale. */
		root.listed_ns = now;
		err = mst_inode_put(m, txn, &root);
	}
	if (!err) {
		err = mst_txn_commit(txn);
		txn = NULL;
	}
	if (err) {
		fprintf(stderr, "ns_bench: writing inodes: %s\n", cis_strerror(err));
		if (txn)
			mdb_txn_abort(txn);
		goto out_close;
	}
	printf("{\"inodes\": %" PRIu64 ", \"seconds\": %.2f, \"mount_root\": %" PRIu64 "}\n",
	       mst_inode_count(m), (double)(cis_mono_ns() - t0) / 1e9, root.id);
out_close:
	mst_close(m);
	return err ? 1 : 0;
}

struct nsb_thr {
	const char *host;
	uint16_t port;
	uint64_t seconds, n, per_dir, seed;
	const uint64_t *dirs;
	uint64_t ndirs;
	uint32_t *lat_us; /* one per lookup, up to cap */
	size_t nlat, cap;
	uint64_t errors;
};

static uint64_t nsb_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int nsb_lookup(cis_rpc_client *c, uint64_t parent, const char *name, uint64_t *id)
{
	Cis__LookupRequest req = CIS__LOOKUP_REQUEST__INIT;
	cis_rpc_result res;
	cis_errmsg em = {0};
	req.parent = parent;
	req.name = (char *)name;
	int err = cis_rpc_call(c, CIS_MSG_MASTER_LOOKUP, &req.base, NULL, 0, &res, 0, &em);
	if (err)
		return err;
	Cis__LookupReply *rep = NULL;
	err = cis_msg_unpack(&cis__lookup_reply__descriptor, res.msg, res.msg_len,
	                     (ProtobufCMessage **)&rep);
	if (!err && id)
		*id = rep->inode ? rep->inode->id : 0;
	if (rep)
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	cis_rpc_result_free(&res);
	return err;
}

static void *nsb_worker(void *arg)
{
	struct nsb_thr *t = arg;
	cis_rpc_client_opts co = {.host = t->host, .port = t->port, .name = "ns_bench"};
	cis_rpc_client *c;
	if (cis_rpc_client_new(&co, &c))
		return NULL;
	uint64_t end = cis_mono_ns() + t->seconds * 1000000000ull, s = t->seed;
	char name[32];
	while (cis_mono_ns() < end && t->nlat < t->cap) {
		uint64_t k = nsb_rand(&s) % t->n;
		snprintf(name, sizeof(name), "f%07" PRIu64 ".bin", k % t->per_dir);
		uint64_t a = cis_mono_ns();
		if (nsb_lookup(c, t->dirs[k / t->per_dir], name, NULL))
			t->errors++;
		else
			t->lat_us[t->nlat++] = (uint32_t)((cis_mono_ns() - a) / 1000);
	}
	cis_rpc_client_free(c);
	return NULL;
}

static int nsb_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static int nsb_run(const char *host, uint16_t port, int threads, uint64_t seconds, uint64_t n,
                   uint64_t per_dir)
{
	cis_rpc_client_opts co = {.host = host, .port = port, .name = "ns_bench"};
	cis_rpc_client *c;
	uint64_t ns_id, ndirs = (n + per_dir - 1) / per_dir;
	uint64_t *dirs = calloc(ndirs, sizeof(*dirs));
	char name[32];
	int rc = 1;
	if (!dirs || cis_rpc_client_new(&co, &c))
		goto out_dirs;
	if (nsb_lookup(c, MST_ROOT_INO, "ns", &ns_id)) {
		fprintf(stderr, "ns_bench: lookup /ns failed\n");
		goto out_client;
	}
	for (uint64_t d = 0; d < ndirs; d++) {
		snprintf(name, sizeof(name), "d%06" PRIu64, d);
		if (nsb_lookup(c, ns_id, name, &dirs[d])) {
			fprintf(stderr, "ns_bench: lookup /ns/%s failed\n", name);
			goto out_client;
		}
	}
	struct nsb_thr *t = calloc((size_t)threads, sizeof(*t));
	pthread_t *tid = calloc((size_t)threads, sizeof(*tid));
	if (!t || !tid)
		goto out_thr;
	for (int i = 0; i < threads; i++) {
		t[i] = (struct nsb_thr){.host = host,
		                        .port = port,
		                        .seconds = seconds,
		                        .n = n,
		                        .per_dir = per_dir,
		                        .seed = 0x2545f4914f6cdd1dull + (uint64_t)i * 7919,
		                        .dirs = dirs,
		                        .ndirs = ndirs,
		                        .cap = 4000000};
		t[i].lat_us = malloc(t[i].cap * sizeof(uint32_t));
		if (!t[i].lat_us)
			goto out_thr;
	}
	uint64_t t0 = cis_mono_ns();
	for (int i = 0; i < threads; i++)
		pthread_create(&tid[i], NULL, nsb_worker, &t[i]);
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	double secs = (double)(cis_mono_ns() - t0) / 1e9;
	size_t total = 0, errors = 0;
	for (int i = 0; i < threads; i++) {
		total += t[i].nlat;
		errors += t[i].errors;
	}
	uint32_t *all = malloc((total ? total : 1) * sizeof(uint32_t));
	if (!all)
		goto out_thr;
	size_t k = 0;
	for (int i = 0; i < threads; i++) {
		memcpy(all + k, t[i].lat_us, t[i].nlat * sizeof(uint32_t));
		k += t[i].nlat;
	}
	qsort(all, total, sizeof(uint32_t), nsb_cmp);
	printf("{\"lookups\": %zu, \"errors\": %zu, \"seconds\": %.2f, \"per_s\": %.0f, "
	       "\"p50_us\": %u, \"p99_us\": %u, \"threads\": %d}\n",
	       total, errors, secs, total / secs, total ? all[total / 2] : 0,
	       total ? all[total * 99 / 100] : 0, threads);
	free(all);
	rc = errors || !total;
out_thr:
	if (t)
		for (int i = 0; i < threads; i++)
			free(t[i].lat_us);
	free(t);
	free(tid);
out_client:
	cis_rpc_client_free(c);
out_dirs:
	free(dirs);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc >= 5 && !strcmp(argv[1], "gen"))
		return nsb_gen(argv[2], argv[3], strtoull(argv[4], NULL, 10),
		               argc > 5 ? strtoull(argv[5], NULL, 10) : 1000);
	if (argc >= 7 && !strcmp(argv[1], "lookup"))
		return nsb_run(argv[2], (uint16_t)atoi(argv[3]), atoi(argv[4]),
		               strtoull(argv[5], NULL, 10), strtoull(argv[6], NULL, 10),
		               argc > 7 ? strtoull(argv[7], NULL, 10) : 1000);
	fprintf(stderr, "usage: ns_bench gen DATA_DIR STORE_DIR INODES [PER_DIR]\n"
	                "       ns_bench lookup HOST PORT THREADS SECONDS INODES [PER_DIR]\n");
	return 2;
}
