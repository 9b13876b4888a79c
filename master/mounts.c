/* The mount table: in LMDB (mounts dbi, committed synchronously) and in
 * memory (a small array with each mount's open connector). Mounts nest: a
 * mount point is a directory inode flagged mount_point, whose children come
 * from its store plus any nested mount points. Removed mounts are parked in
 * m->graves until close so that a thread still holding one (a listing in
 * flight) never sees freed memory. */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/config.h"
#include "cistern/log.h"
#include "cistern/proto/common.pb-c.h"
#include "cistern/time.h"
#include "master.h"

static const char *const secret_keys[] = {"access_key", "secret_key", "session_token",
                                          "secret",     "password",   NULL};

bool mst_option_secret(const char *key)
{
	for (size_t i = 0; secret_keys[i]; i++)
		if (strcmp(key, secret_keys[i]) == 0)
			return true;
	return false;
}

static void mount_free(mst_mount *mt)
{
	if (!mt)
		return;
	if (mt->ufs)
		cis_ufs_close(mt->ufs);
	free(mt->path);
	free(mt->uri);
	cis_kvlist_free(&mt->options);
	free(mt);
}

/* Stored value: u64 root inode (little-endian), then a packed MountInfo.
 * Trusted data (we wrote it), so plain protobuf-c pack/unpack. */
static int mount_pack(const mst_mount *mt, uint8_t **buf, size_t *len)
{
	Cis__MountInfo mi = CIS__MOUNT_INFO__INIT;
	Cis__MountInfo__OptionsEntry *ents = NULL, **pents = NULL;
	int err = 0;

	mi.id = mt->id;
	mi.path = mt->path;
	mi.uri = mt->uri;
	mi.block_size = mt->block_size;
	mi.read_only = mt->read_only;
	mi.sync_interval_ms = mt->sync_interval_ms;
	if (mt->options.n) {
		ents = calloc(mt->options.n, sizeof(*ents));
		pents = calloc(mt->options.n, sizeof(*pents));
		if (!ents || !pents) {
			err = -ENOMEM;
			goto out_free;
		}
		for (size_t i = 0; i < mt->options.n; i++) {
			cis__mount_info__options_entry__init(&ents[i]);
			ents[i].key = mt->options.items[i].key;
			ents[i].value = mt->options.items[i].value;
			pents[i] = &ents[i];
		}
	}
	mi.n_options = mt->options.n;
	mi.options = pents;
	size_t plen = protobuf_c_message_get_packed_size(&mi.base);
	*buf = malloc(8 + plen);
	if (!*buf) {
		err = -ENOMEM;
		goto out_free;
	}
	uint64_t le = htole64(mt->root_ino);
	memcpy(*buf, &le, 8);
	protobuf_c_message_pack(&mi.base, *buf + 8);
	*len = 8 + plen;
out_free:
	free(ents);
	free(pents);
	return err;
}

static int mount_unpack(const void *data, size_t len, mst_mount **out)
{
	if (len < 8)
		return -CIS_E_INTERNAL;
	Cis__MountInfo *mi = cis__mount_info__unpack(NULL, len - 8, (const uint8_t *)data + 8);
	if (!mi)
		return -CIS_E_INTERNAL;
	mst_mount *mt = calloc(1, sizeof(*mt));
	int err = -ENOMEM;
	if (!mt)
		goto out_mi;
	uint64_t le;
	memcpy(&le, data, 8);
	mt->root_ino = le64toh(le);
	mt->id = mi->id;
	mt->path = strdup(mi->path);
	mt->uri = strdup(mi->uri);
	mt->block_size = mi->block_size;
	mt->read_only = mi->read_only;
	mt->sync_interval_ms = mi->sync_interval_ms;
	if (!mt->path || !mt->uri)
		goto out_mt;
	for (size_t i = 0; i < mi->n_options; i++)
		if (cis_kvlist_set(&mt->options, mi->options[i]->key, mi->options[i]->value))
			goto out_mt;
	*out = mt;
	err = 0;
	goto out_mi;
out_mt:
	mount_free(mt);
out_mi:
	cis__mount_info__free_unpacked(mi, NULL);
	return err;
}

static int mounts_append(mst_master *m, mst_mount *mt)
{
	mst_mount **n = realloc(m->mounts, (m->nmounts + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	m->mounts = n;
	m->mounts[m->nmounts++] = mt;
	return 0;
}

int mst_mounts_load(mst_master *m, cis_errmsg *em)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	int err = mst_txn_begin(m, false, &txn);
	if (err)
		return cis_fail(em, err, "lmdb: cannot read the mount table");
	if (mdb_cursor_open(txn, m->dbi_mounts, &cur)) {
		mdb_txn_abort(txn);
		return cis_fail(em, -CIS_E_INTERNAL, "lmdb: cannot read the mount table");
	}
	int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
	while (rc == 0) {
		mst_mount *mt;
		err = mount_unpack(v.mv_data, v.mv_size, &mt);
		if (err) {
			cis_fail(em, err, "lmdb: corrupt mount record");
			break;
		}
		cis_errmsg oem = {{0}};
		err = cis_ufs_open(mt->uri, &mt->options, &mt->ufs, &oem);
		if (err) /* keep the mount; listings will report the store error */
			cis_warn("cannot open mount store", "path=%s err=\"%s\"", mt->path,
			         cis_errmsg_or(&oem, err));
		err = mounts_append(m, mt);
		if (err) {
			mount_free(mt);
			break;
		}
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return err;
}

void mst_mounts_free(mst_master *m)
{
	for (size_t i = 0; i < m->nmounts; i++)
		mount_free(m->mounts[i]);
	for (size_t i = 0; i < m->ngraves; i++)
		mount_free(m->graves[i]);
	free(m->mounts);
	free(m->graves);
	m->mounts = m->graves = NULL;
	m->nmounts = m->ngraves = 0;
}

mst_mount *mst_mount_find(mst_master *m, uint64_t id)
{
	mst_mount *mt = NULL;
	pthread_mutex_lock(&m->mounts_lock);
	for (size_t i = 0; i < m->nmounts; i++)
		if (m->mounts[i]->id == id)
			mt = m->mounts[i];
	pthread_mutex_unlock(&m->mounts_lock);
	return mt;
}

size_t mst_mount_count(mst_master *m)
{
	pthread_mutex_lock(&m->mounts_lock);
	size_t n = m->nmounts;
	pthread_mutex_unlock(&m->mounts_lock);
	return n;
}

/* Walk path to its parent directory and the last component. Existing
 * components are looked up (listing stores lazily); missing ones outside
 * any mount are created as plain directories in txn later: *missing_from
 * is the index of the first missing component (ncomp when all exist). */
static int split_path(const char *path, char comps[][MST_NAME_MAX + 1], size_t max, size_t *n)
{
	size_t c = 0;
	const char *p = path;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = strchr(p, '/');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (c == max || l > MST_NAME_MAX)
			return -ENAMETOOLONG;
		memcpy(comps[c], p, l);
		comps[c][l] = 0;
		c++;
		p += l;
	}
	*n = c;
	return 0;
}

#define MAX_DEPTH 256

int mst_mount_add(mst_master *m, const mst_mount_req *r, uint64_t *id_out, cis_errmsg *em)
{
	cis_errmsg sem = {{0}};
	mst_mount *mt;
	int err = mst_path_check(r->path, strlen(r->path), em);
	if (err)
		return err;
	if (!r->uri || !*r->uri)
		return cis_fail(em, -EINVAL, "no store uri given");
	uint64_t bs = r->block_size ? r->block_size : MST_DEFAULT_BLOCK;
	if (bs < 4096 || bs > (1ull << 30))
		return cis_fail(em, -EINVAL, "block size %llu out of range (4 KiB .. 1 GiB)",
		                (unsigned long long)bs);
	if (r->sync_interval_ms > CIS_SYNC_MAX_MS)
		return cis_fail(em, -EINVAL,
		                "sync interval %lld ms out of range (at most 100 years)",
		                (long long)r->sync_interval_ms);

	mt = calloc(1, sizeof(*mt));
	if (!mt)
		return -ENOMEM;
	mt->path = strdup(r->path);
	mt->uri = strdup(r->uri);
	if (!mt->path || !mt->uri || (r->options && cis_kvlist_copy(&mt->options, r->options))) {
		err = -ENOMEM;
		goto out_mount;
	}
	/* A trailing slash is not part of the path ("/a/" is "/a"). */
	size_t pl = strlen(mt->path);
	while (pl > 1 && mt->path[pl - 1] == '/')
		mt->path[--pl] = 0;
	mt->block_size = bs;
	mt->sync_interval_ms =
	    r->sync_interval_ms < 0 ? MST_DEFAULT_SYNC_MS : (uint64_t)r->sync_interval_ms;
	mt->read_only = r->read_only;

	/* Contact the store before touching the table: a bad URI, unknown
	 * scheme, missing bucket or wrong credentials are refused with the
	 * store's own words. */
	err = cis_ufs_open(mt->uri, &mt->options, &mt->ufs, &sem);
	if (!err)
		err = cis_ufs_check(mt->ufs, &sem);
	if (err) {
		cis_fail(em, err, "%s", cis_errmsg_or(&sem, err));
		goto out_mount;
	}

	char(*comps)[MST_NAME_MAX + 1] = malloc(MAX_DEPTH * sizeof(*comps));
	if (!comps) {
		err = -ENOMEM;
		goto out_mount;
	}
	size_t nc;
	err = split_path(mt->path, comps, MAX_DEPTH, &nc);
	if (err) {
		cis_fail(em, err, "path too deep");
		goto out_comps;
	}

	pthread_mutex_lock(&m->mount_op_lock);
	/* Existing prefix, looked up (lazily listing stores on the way). */
	mst_inode *cur = malloc(sizeof(*cur));
	if (!cur) {
		err = -ENOMEM;
		goto out_unlock;
	}
	err = mst_ns_getattr(m, MST_ROOT_INO, cur, em);
	size_t i = 0;
	for (; !err && i < nc; i++) {
		mst_inode *next = malloc(sizeof(*next));
		if (!next) {
			err = -ENOMEM;
			break;
		}
		cis_errmsg lem = {{0}};
		int lr = mst_ns_lookup(m, cur->id, comps[i], next, &lem);
		if (lr == -ENOENT) {
			free(next);
			break;
		}
		if (lr) {
			cis_fail(em, lr, "%s", cis_errmsg_or(&lem, lr));
			err = lr;
			free(next);
			break;
		}
		if (next->type != MST_DIR && i + 1 < nc) {
			free(next);
			err =
			    cis_fail(em, -ENOTDIR, "%s: a component is not a directory", mt->path);
			break;
		}
		free(cur);
		cur = next;
	}
	if (err)
		goto out_cur;
	if (i == nc) {
		/* The path exists: only "/" with nothing in it may become a mount. */
		bool empty = true;
		if (nc == 0 && !cur->mount_point) {
			MDB_txn *rt;
			if (mst_txn_begin(m, false, &rt) == 0) {
				uint64_t any;
				(void)any;
				MDB_cursor *c;
				MDB_val k, v;
				uint64_t be = htobe64(MST_ROOT_INO);
				if (mdb_cursor_open(rt, m->dbi_children, &c) == 0) {
					k.mv_size = 8;
					k.mv_data = &be;
					if (mdb_cursor_get(c, &k, &v, MDB_SET_RANGE) == 0 &&
					    k.mv_size >= 8 && memcmp(k.mv_data, &be, 8) == 0)
						empty = false;
					mdb_cursor_close(c);
				}
				mdb_txn_abort(rt);
			}
		}
		if (nc > 0 || cur->mount_point || !empty) {
			err = cis_fail(em, -EEXIST,
			               "%s already exists (a mount must not shadow it)", mt->path);
			goto out_cur;
		}
	} else if (cur->mount_id != 0) {
		/* Missing inside a mount: only the last component may be new. */
		if (i + 1 < nc) {
			err =
			    cis_fail(em, -ENOENT, "%s: parent directory does not exist", mt->path);
			goto out_cur;
		}
	}

	MDB_txn *txn;
	err = mst_txn_begin(m, true, &txn);
	if (err)
		goto out_cur;
	err = mst_store_next_id(m, txn, "next_mount", &mt->id);
	if (err)
		goto out_txn;
	if (i < nc) {
		/* A listing may have changed the namespace since it was looked
		 * at (mount_op_lock keeps other mounts out, not listings): the
		 * parent must still be there, the name still free. */
		mst_inode *chk = malloc(sizeof(*chk));
		uint64_t taken;
		err = chk ? mst_inode_get(m, txn, cur->id, chk) : -ENOMEM;
		free(chk);
		if (!err && mst_child_get(m, txn, cur->id, comps[i], &taken) != -ENOENT)
			err = -EEXIST;
		if (err == -ENOENT || err == -EEXIST) {
			cis_fail(em, -EAGAIN, "%s: the namespace changed meanwhile, try again",
			         mt->path);
			err = -EAGAIN;
		}
		if (err)
			goto out_txn;
	}
	int64_t now = cis_wall_ns();
	for (; i < nc; i++) {
		mst_inode *d = malloc(sizeof(*d));
		if (!d) {
			err = -ENOMEM;
			goto out_txn;
		}
		memset(d, 0, sizeof(*d));
		err = mst_store_next_id(m, txn, "next_inode", &d->id);
		if (err) {
			free(d);
			goto out_txn;
		}
		d->parent = cur->id;
		d->type = MST_DIR;
		d->mode = 0755;
		d->mtime_ns = now;
		snprintf(d->name, sizeof(d->name), "%s", comps[i]);
		if (i + 1 == nc) {
			d->mount_point = true;
			d->mount_id = mt->id;
		}
		err = mst_inode_put(m, txn, d);
		if (!err)
			err = mst_child_put(m, txn, cur->id, d->name, d->id);
		free(cur);
		cur = d;
		if (err)
			goto out_txn;
	}
	if (nc == 0) { /* mounting "/" */
		cur->mount_point = true;
		cur->mount_id = mt->id;
		cur->listed_ns = 0;
		err = mst_inode_put(m, txn, cur);
		if (err)
			goto out_txn;
	}
	mt->root_ino = cur->id;
	uint8_t *val;
	size_t vlen;
	err = mount_pack(mt, &val, &vlen);
	if (err)
		goto out_txn;
	uint64_t kbe = htobe64(mt->id);
	MDB_val k = {8, &kbe}, v = {vlen, val};
	int rc = mdb_put(txn, m->dbi_mounts, &k, &v, 0);
	free(val);
	if (rc) {
		err = mst_lmdb_err(rc);
		goto out_txn;
	}
	/* In the table before its inodes are committed: a listing of the
	 * outer store's directory that commits next must see the new mount
	 * below it (holds_mount), or it could take the mount point away. */
	pthread_mutex_lock(&m->mounts_lock);
	err = mounts_append(m, mt);
	pthread_mutex_unlock(&m->mounts_lock);
	if (err)
		goto out_txn;
	err = mst_txn_commit(txn);
	if (err) {
		pthread_mutex_lock(&m->mounts_lock);
		m->nmounts--; /* the last one: mount_op_lock kept others out */
		pthread_mutex_unlock(&m->mounts_lock);
		cis_fail(em, err, "lmdb: cannot commit the mount: %s", cis_strerror(err));
		goto out_cur;
	}
	cis_info("mount added", "path=%s uri=%s id=%llu", mt->path, cis_ufs_uri(mt->ufs),
	         (unsigned long long)mt->id);
	if (id_out)
		*id_out = mt->id;
	mt = NULL;
	goto out_cur;
out_txn:
	mdb_txn_abort(txn);
	if (!em || !em->text[0])
		cis_fail(em, err, "cannot store the mount: %s", cis_strerror(err));
out_cur:
	free(cur);
out_unlock:
	pthread_mutex_unlock(&m->mount_op_lock);
out_comps:
	free(comps);
out_mount:
	mount_free(mt);
	return err;
}

static int any_child(void *arg, const char *name, size_t nlen, uint64_t id)
{
	(void)name;
	(void)nlen;
	(void)id;
	*(bool *)arg = true;
	return 1;
}

/* Delete a mount's tree below root, and then the plain directories made on
 * the way to it (mst_mount_add) that nothing else is in: left, they would
 * keep a later mount from taking their path, or "/". */
static int drop_mount_tree(mst_master *m, MDB_txn *txn, uint64_t root)
{
	mst_inode *ino = malloc(sizeof(*ino));
	if (!ino)
		return -ENOMEM;
	uint64_t up = mst_inode_get(m, txn, root, ino) == 0 ? ino->parent : 0;
	int err = mst_inode_del_tree(m, txn, root);
	if (err == -ENOENT)
		err = 0;
	while (!err && up && up != MST_ROOT_INO && mst_inode_get(m, txn, up, ino) == 0 &&
	       ino->type == MST_DIR && ino->mount_id == 0 && !ino->mount_point) {
		bool busy = false;
		err = mst_children_each(m, txn, up, NULL, any_child, &busy);
		if (err || busy)
			break;
		uint64_t next = ino->parent;
		err = mst_inode_del_tree(m, txn, up);
		up = next;
	}
	/* A store directory kept for the mount (ns.c: holds_mount) is its
	 * store's again: it and the store directories above it, up to their
	 * mount's root, are listed afresh when next looked at. */
	while (!err && up && mst_inode_get(m, txn, up, ino) == 0 && ino->mount_id != 0) {
		ino->listed_ns = 0;
		err = mst_inode_put(m, txn, ino);
		if (ino->mount_point)
			break;
		up = ino->parent;
	}
	free(ino);
	return err;
}

int mst_mount_remove(mst_master *m, const char *path, cis_errmsg *em)
{
	int err = mst_path_check(path, strlen(path), em);
	if (err)
		return err;
	pthread_mutex_lock(&m->mount_op_lock);
	mst_mount *mt = NULL;
	size_t idx = 0, pl = strlen(path);
	while (pl > 1 && path[pl - 1] == '/')
		pl--;
	pthread_mutex_lock(&m->mounts_lock);
	for (size_t i = 0; i < m->nmounts; i++)
		if (strlen(m->mounts[i]->path) == pl && memcmp(m->mounts[i]->path, path, pl) == 0) {
			mt = m->mounts[i];
			idx = i;
		}
	bool nested = false;
	for (size_t i = 0; mt && i < m->nmounts; i++) {
		const char *o = m->mounts[i]->path;
		if (m->mounts[i] != mt &&
		    (pl == 1 || (strncmp(o, mt->path, pl) == 0 && o[pl] == '/')))
			nested = true;
	}
	pthread_mutex_unlock(&m->mounts_lock);
	if (!mt) {
		err = cis_fail(em, -ENOENT, "%.*s is not a mount point", (int)pl, path);
		goto out_unlock;
	}
	if (nested) {
		err = cis_fail(em, -EBUSY, "%s has nested mounts: unmount them first", mt->path);
		goto out_unlock;
	}
	/* A policy change resolves its path and keeps its policy under
	 * policy_lock: holding it from the transaction until the mount is gone
	 * from m->mounts, no policy is kept below the mount after its policies
	 * are dropped (nor a pin job started there). */
	pthread_mutex_lock(&m->policy_lock);
	MDB_txn *txn;
	err = mst_txn_begin(m, true, &txn);
	if (err)
		goto out_policy;
	uint64_t kbe = htobe64(mt->id);
	MDB_val k = {8, &kbe};
	int rc = mdb_del(txn, m->dbi_mounts, &k, NULL);
	if (rc && rc != MDB_NOTFOUND)
		err = mst_lmdb_err(rc);
	/* the policies were for this store's data, not for whatever is
	 * mounted there next */
	if (!err)
		err = mst_policies_drop(m, txn, mt->path);
	if (!err && mt->root_ino == MST_ROOT_INO) {
		/* "/" stays; what the store put under it goes. */
		mst_inode *root = malloc(sizeof(*root));
		err = root ? mst_inode_get(m, txn, MST_ROOT_INO, root) : -ENOMEM;
		while (!err) {
			MDB_cursor *c;
			MDB_val ck, cv;
			uint64_t be = htobe64(MST_ROOT_INO), child = 0;
			if (mdb_cursor_open(txn, m->dbi_children, &c)) {
				err = -CIS_E_INTERNAL;
				break;
			}
			ck.mv_size = 8;
			ck.mv_data = &be;
			bool found = mdb_cursor_get(c, &ck, &cv, MDB_SET_RANGE) == 0 &&
			             ck.mv_size >= 8 && memcmp(ck.mv_data, &be, 8) == 0 &&
			             cv.mv_size == 8;
			if (found)
				memcpy(&child, cv.mv_data, 8);
			mdb_cursor_close(c);
			if (!found)
				break;
			err = mst_inode_del_tree(m, txn, child);
		}
		if (!err) {
			root->mount_point = false;
			root->mount_id = 0;
			root->listed_ns = 0;
			err = mst_inode_put(m, txn, root);
		}
		free(root);
	} else if (!err) {
		err = drop_mount_tree(m, txn, mt->root_ino);
	}
	if (err) {
		mdb_txn_abort(txn);
		cis_fail(em, err, "unmount %s: %s", mt->path, cis_strerror(err));
		goto out_policy;
	}
	err = mst_txn_commit(txn);
	if (err) {
		cis_fail(em, err, "unmount %s: lmdb commit failed", mt->path);
		goto out_policy;
	}
	pthread_mutex_lock(&m->mounts_lock);
	m->mounts[idx] = m->mounts[--m->nmounts];
	mst_mount **g = realloc(m->graves, (m->ngraves + 1) * sizeof(*g));
	if (g) {
		m->graves = g;
		m->graves[m->ngraves++] = mt;
	} /* else: leaked rather than freed under a possible reader */
	pthread_mutex_unlock(&m->mounts_lock);
	cis_info("mount removed", "path=%s", mt->path);
out_policy:
	pthread_mutex_unlock(&m->policy_lock);
out_unlock:
	pthread_mutex_unlock(&m->mount_op_lock);
	return err;
}

int mst_mount_info(mst_master *m, uint64_t id, ProtobufCMessage **out)
{
	mst_mount *mt = mst_mount_find(m, id);
	if (!mt)
		return -ENOENT;
	Cis__MountInfo *mi = malloc(sizeof(*mi));
	if (!mi)
		return -ENOMEM;
	cis__mount_info__init(mi);
	mi->id = mt->id;
	mi->path = strdup(mt->path);
	mi->uri = strdup(mt->uri);
	mi->block_size = mt->block_size;
	mi->read_only = mt->read_only;
	mi->sync_interval_ms = mt->sync_interval_ms;
	mi->options = calloc(mt->options.n ? mt->options.n : 1, sizeof(*mi->options));
	int err = (!mi->path || !mi->uri || !mi->options) ? -ENOMEM : 0;
	for (size_t i = 0; !err && i < mt->options.n; i++) {
		Cis__MountInfo__OptionsEntry *e = malloc(sizeof(*e));
		if (!e) {
			err = -ENOMEM;
			break;
		}
		cis__mount_info__options_entry__init(e);
		e->key = strdup(mt->options.items[i].key);
		e->value = strdup(mt->options.items[i].value);
		mi->options[mi->n_options++] = e;
		if (!e->key || !e->value)
			err = -ENOMEM;
	}
	if (err) {
		protobuf_c_message_free_unpacked(&mi->base, NULL);
		return err;
	}
	*out = &mi->base;
	return 0;
}

json_t *mst_mount_json(const mst_mount *mt)
{
	json_t *opts = json_object();
	for (size_t i = 0; i < mt->options.n; i++)
		json_object_set_new(opts, mt->options.items[i].key,
		                    json_string(mst_option_secret(mt->options.items[i].key)
		                                    ? "***"
		                                    : mt->options.items[i].value));
	return json_pack("{s:I, s:s, s:s, s:o, s:I, s:b, s:I, s:I}", "id", (json_int_t)mt->id,
	                 "path", mt->path, "uri", mt->ufs ? cis_ufs_uri(mt->ufs) : mt->uri,
	                 "options", opts, "block_size", (json_int_t)mt->block_size, "read_only",
	                 mt->read_only, "sync_interval_ms", (json_int_t)mt->sync_interval_ms,
	                 "root_inode", (json_int_t)mt->root_ino);
}

json_t *mst_mounts_json(mst_master *m)
{
	json_t *arr = json_array();
	pthread_mutex_lock(&m->mounts_lock);
	for (size_t i = 0; i < m->nmounts; i++)
		json_array_append_new(arr, mst_mount_json(m->mounts[i]));
	pthread_mutex_unlock(&m->mounts_lock);
	return arr;
}
