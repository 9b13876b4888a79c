/* The master's LMDB: six databases in one environment.
 *   meta      "next_inode", "next_mount", "next_worker" -> u64 counters
 *   inodes    u64 id (big-endian) -> packed inode (see ino_pack)
 *   children  u64 parent (big-endian) + name bytes -> u64 child id; the
 *             big-endian prefix keeps one directory's entries together and
 *             in bytewise name order, so a listing is one cursor walk
 *   mounts    u64 id (big-endian) -> u64 root inode + packed MountInfo
 *   jobs      u64 id (big-endian) -> job record, JSON text (jobs.c)
 *   policies  path bytes -> policy, JSON text (policy.c)
 * Nothing of the namespace is copied into memory: LMDB's pages are the OS's
 * page cache, so 10 million inodes cost disk, not RSS. The environment is
 * opened without MDB_NOSYNC: a committed mount or listing survives kill -9. */
#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "cistern/lmdb_lock.h"
#include "cistern/log.h"
#include "master.h"

int mst_lmdb_err(int rc)
{
	switch (rc) {
	case 0:
		return 0;
	case MDB_NOTFOUND:
		return -ENOENT;
	case MDB_MAP_FULL:
		return -ENOSPC;
	default:
		return rc > 0 ? -rc : -CIS_E_INTERNAL;
	}
}

int mst_store_open(mst_master *m, const char *dir, uint64_t map_size, cis_errmsg *em)
{
	MDB_txn *txn = NULL;
	int rc;

	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return cis_fail(em, -errno, "data dir %s: %s", dir, strerror(errno));
	char lock[PATH_MAX];
	snprintf(lock, sizeof(lock), "%s/lock.mdb", dir);
	rc = cis_lmdb_lock_prepare(lock, em);
	if (rc)
		return rc;
	rc = mdb_env_create(&m->env);
	if (rc)
		return cis_fail(em, mst_lmdb_err(rc), "lmdb: %s", mdb_strerror(rc));
	mdb_env_set_maxdbs(m->env, 8);
	mdb_env_set_maxreaders(m->env, 1024);
	mdb_env_set_mapsize(m->env, map_size ? map_size : (64ull << 30));
	/* MDB_NOTLS: read transactions are not tied to threads (I/O threads
	 * and the HTTP thread each open short ones). MDB_NORDAHEAD: lookups
	 * touch random pages of a map that may be far larger than memory;
	 * readahead would only fill the page cache (and our RSS) with
	 * neighbours nobody asked for. */
	rc = mdb_env_open(m->env, dir, MDB_NOTLS | MDB_NORDAHEAD, 0600);
	if (rc) {
		cis_fail(em, mst_lmdb_err(rc), "lmdb %s: %s", dir, mdb_strerror(rc));
		goto out_env;
	}
	char data_file[PATH_MAX];
	snprintf(data_file, sizeof(data_file), "%s/data.mdb", dir);
	if ((rc = cis_lmdb_check_length(m->env, data_file, em)) < 0)
		goto out_env;
	int dead = 0;
	mdb_reader_check(m->env, &dead); /* slots left by a killed process */
	rc = mdb_txn_begin(m->env, NULL, 0, &txn);
	if (rc)
		goto out_lmdb;
	if ((rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &m->dbi_meta)) ||
	    (rc = mdb_dbi_open(txn, "inodes", MDB_CREATE, &m->dbi_inodes)) ||
	    (rc = mdb_dbi_open(txn, "children", MDB_CREATE, &m->dbi_children)) ||
	    (rc = mdb_dbi_open(txn, "mounts", MDB_CREATE, &m->dbi_mounts)) ||
	    (rc = mdb_dbi_open(txn, "jobs", MDB_CREATE, &m->dbi_jobs)) ||
	    (rc = mdb_dbi_open(txn, "policies", MDB_CREATE, &m->dbi_policies)))
		goto out_txn;
	mst_inode root;
	int err = mst_inode_get(m, txn, MST_ROOT_INO, &root);
	if (err == -ENOENT) {
		memset(&root, 0, sizeof(root));
		root.id = MST_ROOT_INO;
		root.parent = MST_ROOT_INO;
		root.type = MST_DIR;
		root.mode = 0755;
		root.mtime_ns = 0;
		err = mst_inode_put(m, txn, &root);
		if (err) {
			rc = -err;
			goto out_txn;
		}
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		goto out_lmdb;
	return 0;

out_txn:
	mdb_txn_abort(txn);
out_lmdb:
	cis_fail(em, mst_lmdb_err(rc), "lmdb %s: %s", dir, mdb_strerror(rc));
out_env:
	mdb_env_close(m->env);
	m->env = NULL;
	return rc < 0 ? rc : mst_lmdb_err(rc); /* an errno of ours, or LMDB's */
}

void mst_store_close(mst_master *m)
{
	if (m->env)
		mdb_env_close(m->env);
	m->env = NULL;
}

int mst_txn_begin(mst_master *m, bool write, MDB_txn **txn)
{
	return mst_lmdb_err(mdb_txn_begin(m->env, NULL, write ? 0 : MDB_RDONLY, txn));
}

/* Whether the file system holding env's files has under 1 MiB left. */
static bool env_disk_full(MDB_env *env)
{
	const char *path;
	struct statvfs vfs;
	return mdb_env_get_path(env, &path) == 0 && statvfs(path, &vfs) == 0 &&
	       (uint64_t)vfs.f_bavail * vfs.f_frsize < (1u << 20);
}

int mst_txn_commit(MDB_txn *txn)
{
	MDB_env *env = mdb_txn_env(txn);
	int rc = mdb_txn_commit(txn);
	/* LMDB reports a write the full disk cut short as EIO: say what it is.
	 * Nothing of the transaction was committed, and the database is as it
	 * was before it. */
	if (rc == EIO && env_disk_full(env))
		rc = ENOSPC;
	if (rc == ENOSPC)
		cis_log_limited(CIS_LOG_ERROR, "lmdb-full", 60,
		                "the master's data directory is full: changes are refused", NULL);
	return mst_lmdb_err(rc);
}

int mst_store_next_id(mst_master *m, MDB_txn *txn, const char *counter, uint64_t *out)
{
	return mst_store_take_id(m, txn, counter, 0, out);
}

int mst_store_peek_id(mst_master *m, MDB_txn *txn, const char *counter, uint64_t *out)
{
	MDB_val k = {strlen(counter), (void *)counter}, v;
	uint64_t next = 2; /* 1 is the root inode; ids of other kinds start at 2 too */
	int rc = mdb_get(txn, m->dbi_meta, &k, &v);

	if (rc == 0 && v.mv_size == 8) {
		memcpy(&next, v.mv_data, 8);
		next = le64toh(next);
	} else if (rc != 0 && rc != MDB_NOTFOUND) {
		return mst_lmdb_err(rc);
	}
	*out = next;
	return 0;
}

int mst_store_take_id(mst_master *m, MDB_txn *txn, const char *counter, uint64_t at_least,
                      uint64_t *out)
{
	MDB_val k = {strlen(counter), (void *)counter}, v;
	uint64_t next;
	int rc = mst_store_peek_id(m, txn, counter, &next);

	if (rc)
		return rc;
	if (next < at_least)
		next = at_least;
	*out = next;
	uint64_t le = htole64(next + 1);
	v.mv_size = 8;
	v.mv_data = &le;
	return mst_lmdb_err(mdb_put(txn, m->dbi_meta, &k, &v, 0));
}

/* Packed inode: fixed part, then name, version and key bytes. */
struct ino_fixed {
	uint64_t parent, mount_id, size;
	int64_t mtime_ns, listed_ns;
	uint32_t mode;
	uint8_t type, flags, ver_len;
	uint8_t pad;
	uint16_t name_len, key_len;
} __attribute__((packed));

#define INO_FLAG_MOUNT_POINT 1

int mst_inode_put(mst_master *m, MDB_txn *txn, const mst_inode *ino)
{
	size_t nl = strlen(ino->name), vl = strlen(ino->version), kl = strlen(ino->key);
	struct ino_fixed f = {
	    .parent = ino->parent,
	    .mount_id = ino->mount_id,
	    .size = ino->size,
	    .mtime_ns = ino->mtime_ns,
	    .listed_ns = ino->listed_ns,
	    .mode = ino->mode,
	    .type = ino->type,
	    .flags = ino->mount_point ? INO_FLAG_MOUNT_POINT : 0,
	    .ver_len = (uint8_t)vl,
	    .name_len = (uint16_t)nl,
	    .key_len = (uint16_t)kl,
	};
	uint64_t kbe = htobe64(ino->id);
	MDB_val k = {8, &kbe}, v = {sizeof(f) + nl + vl + kl, NULL};
	int rc = mdb_put(txn, m->dbi_inodes, &k, &v, MDB_RESERVE);

	if (rc)
		return mst_lmdb_err(rc);
	char *p = v.mv_data;
	memcpy(p, &f, sizeof(f));
	p += sizeof(f);
	memcpy(p, ino->name, nl);
	memcpy(p + nl, ino->version, vl);
	memcpy(p + nl + vl, ino->key, kl);
	return 0;
}

int mst_inode_get(mst_master *m, MDB_txn *txn, uint64_t id, mst_inode *out)
{
	uint64_t kbe = htobe64(id);
	MDB_val k = {8, &kbe}, v;
	struct ino_fixed f;
	int rc = mdb_get(txn, m->dbi_inodes, &k, &v);

	if (rc)
		return mst_lmdb_err(rc);
	if (v.mv_size < sizeof(f))
		return -CIS_E_INTERNAL;
	memcpy(&f, v.mv_data, sizeof(f));
	if (sizeof(f) + f.name_len + f.ver_len + f.key_len != v.mv_size ||
	    f.name_len > MST_NAME_MAX || f.ver_len >= CIS_UFS_VERSION_MAX ||
	    f.key_len > MST_PATH_MAX)
		return -CIS_E_INTERNAL;
	const char *p = (const char *)v.mv_data + sizeof(f);
	out->id = id;
	out->parent = f.parent;
	out->mount_id = f.mount_id;
	out->size = f.size;
	out->mtime_ns = f.mtime_ns;
	out->listed_ns = f.listed_ns;
	out->mode = f.mode;
	out->type = f.type;
	out->mount_point = f.flags & INO_FLAG_MOUNT_POINT;
	memcpy(out->name, p, f.name_len);
	out->name[f.name_len] = 0;
	memcpy(out->version, p + f.name_len, f.ver_len);
	out->version[f.ver_len] = 0;
	memcpy(out->key, p + f.name_len + f.ver_len, f.key_len);
	out->key[f.key_len] = 0;
	return 0;
}

static size_t child_key(char *buf, uint64_t parent, const char *name, size_t nl)
{
	uint64_t be = htobe64(parent);
	memcpy(buf, &be, 8);
	memcpy(buf + 8, name, nl);
	return 8 + nl;
}

int mst_child_get(mst_master *m, MDB_txn *txn, uint64_t parent, const char *name, uint64_t *id)
{
	char kb[8 + MST_NAME_MAX];
	size_t nl = strlen(name);
	if (nl > MST_NAME_MAX)
		return -ENAMETOOLONG;
	MDB_val k = {child_key(kb, parent, name, nl), kb}, v;
	int rc = mdb_get(txn, m->dbi_children, &k, &v);
	if (rc)
		return mst_lmdb_err(rc);
	if (v.mv_size != 8)
		return -CIS_E_INTERNAL;
	memcpy(id, v.mv_data, 8);
	return 0;
}

int mst_child_put(mst_master *m, MDB_txn *txn, uint64_t parent, const char *name, uint64_t id)
{
	char kb[8 + MST_NAME_MAX];
	size_t nl = strlen(name);
	if (nl > MST_NAME_MAX)
		return -ENAMETOOLONG;
	MDB_val k = {child_key(kb, parent, name, nl), kb}, v = {8, &id};
	return mst_lmdb_err(mdb_put(txn, m->dbi_children, &k, &v, 0));
}

int mst_child_del(mst_master *m, MDB_txn *txn, uint64_t parent, const char *name)
{
	char kb[8 + MST_NAME_MAX];
	size_t nl = strlen(name);
	if (nl > MST_NAME_MAX)
		return -ENAMETOOLONG;
	MDB_val k = {child_key(kb, parent, name, nl), kb};
	return mst_lmdb_err(mdb_del(txn, m->dbi_children, &k, NULL));
}

int mst_children_each(mst_master *m, MDB_txn *txn, uint64_t parent, const char *after,
                      int (*fn)(void *arg, const char *name, size_t nlen, uint64_t id), void *arg)
{
	MDB_cursor *cur;
	char kb[8 + MST_NAME_MAX];
	size_t al = after ? strlen(after) : 0;
	if (al > MST_NAME_MAX)
		return -ENAMETOOLONG;
	MDB_val k = {child_key(kb, parent, after ? after : "", al), kb}, v;
	uint64_t pbe = htobe64(parent);
	int rc = mdb_cursor_open(txn, m->dbi_children, &cur);
	if (rc)
		return mst_lmdb_err(rc);
	rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	int err = 0;
	while (rc == 0) {
		if (k.mv_size < 8 || memcmp(k.mv_data, &pbe, 8) != 0)
			break;
		size_t nl = k.mv_size - 8;
		const char *name = (const char *)k.mv_data + 8;
		bool skip = after && nl == al && memcmp(name, after, al) == 0;
		if (!skip && v.mv_size == 8) {
			uint64_t id;
			char nb[MST_NAME_MAX + 1];
			memcpy(&id, v.mv_data, 8);
			if (nl > MST_NAME_MAX)
				nl = MST_NAME_MAX;
			memcpy(nb, name, nl);
			nb[nl] = 0;
			err = fn(arg, nb, nl, id);
			if (err)
				break;
		}
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	if (err < 0)
		return err;
	if (rc && rc != MDB_NOTFOUND)
		return mst_lmdb_err(rc);
	return 0;
}

struct del_ctx {
	uint64_t *ids;
	size_t n, cap;
	int err;
};

static int collect_child(void *arg, const char *name, size_t nlen, uint64_t id)
{
	struct del_ctx *c = arg;
	(void)name;
	(void)nlen;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		uint64_t *ids = realloc(c->ids, cap * sizeof(*ids));
		if (!ids)
			return -ENOMEM;
		c->ids = ids;
		c->cap = cap;
	}
	c->ids[c->n++] = id;
	return 0;
}

/* Iterative (a work list, not recursion): directories can be deep. */
int mst_inode_del_tree(mst_master *m, MDB_txn *txn, uint64_t id)
{
	struct del_ctx c = {0};
	mst_inode *ino = malloc(sizeof(*ino));
	int err;

	if (!ino)
		return -ENOMEM;
	err = mst_inode_get(m, txn, id, ino);
	if (err)
		goto out;
	err = mst_child_del(m, txn, ino->parent, ino->name);
	if (err && err != -ENOENT)
		goto out;
	err = collect_child(&c, NULL, 0, id);
	while (!err && c.n > 0) {
		uint64_t cur = c.ids[--c.n];
		uint64_t kbe = htobe64(cur);
		MDB_val k = {8, &kbe};
		if (mst_inode_get(m, txn, cur, ino) == 0 && ino->type == MST_DIR) {
			size_t before = c.n;
			err = mst_children_each(m, txn, cur, NULL, collect_child, &c);
			if (err)
				break;
			/* Drop the children entries of cur. */
			for (size_t i = before; i < c.n && !err; i++) {
				mst_inode ch;
				if (mst_inode_get(m, txn, c.ids[i], &ch) == 0) {
					err = mst_child_del(m, txn, cur, ch.name);
					if (err == -ENOENT)
						err = 0;
				}
			}
		}
		if (err)
			break; /* the transaction is spoilt (a full map): keep its error */
		int rc = mdb_del(txn, m->dbi_inodes, &k, NULL);
		if (rc && rc != MDB_NOTFOUND)
			err = mst_lmdb_err(rc);
	}
out:
	free(c.ids);
	free(ino);
	return err;
}

uint64_t mst_inode_count(mst_master *m)
{
	MDB_txn *txn;
	MDB_stat st;
	uint64_t n = 0;
	if (mdb_txn_begin(m->env, NULL, MDB_RDONLY, &txn) == 0) {
		if (mdb_stat(txn, m->dbi_inodes, &st) == 0)
			n = st.ms_entries;
		mdb_txn_abort(txn);
	}
	return n;
}
