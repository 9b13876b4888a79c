/* Per-path policies: replication target, pin, TTL. Kept in the policies
 * dbi keyed by the path's bytes, each value a small JSON object with only
 * the fields the path sets ({"replicas": 2, "pin": true, "ttl": 600}).
 * Resolving walks from the path up to "/": O(depth) LMDB gets. The table is
 * expected to be small (policies are set by operators on dataset roots). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/config.h"
#include "cistern/json_text.h"
#include "master.h"

static json_t *policy_get_raw(mst_master *m, MDB_txn *txn, const char *path, size_t len)
{
	MDB_val k = {len, (void *)path}, v;
	if (mdb_get(txn, m->dbi_policies, &k, &v))
		return NULL;
	return json_loadb(v.mv_data, v.mv_size, 0, NULL);
}

int mst_policy_resolve(mst_master *m, const char *path, mst_policy *out)
{
	MDB_txn *txn;
	*out = MST_POLICY_UNSET;
	int err = mst_txn_begin(m, false, &txn);
	if (err)
		return err;
	size_t len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	for (;;) {
		json_t *p = policy_get_raw(m, txn, path, len);
		if (p) {
			json_t *r = json_object_get(p, "replicas");
			if (!out->replicas && json_is_integer(r) && json_integer_value(r) > 0) {
				out->replicas = (uint32_t)json_integer_value(r);
				out->replicas_from = len;
			}
			json_t *pin = json_object_get(p, "pin");
			if (out->pin < 0 && json_is_boolean(pin)) {
				out->pin = json_is_true(pin);
				out->pin_from = len;
			}
			json_t *t = json_object_get(p, "ttl");
			if (out->ttl_s < 0 && json_is_integer(t) && json_integer_value(t) >= 0)
				out->ttl_s = json_integer_value(t);
			json_decref(p);
		}
		if (len <= 1)
			break;
		/* up one component; "/a" -> "/" */
		while (len > 1 && path[len - 1] != '/')
			len--;
		if (len > 1)
			len--;
	}
	mdb_txn_abort(txn);
	return 0;
}

static bool is_below(const char *dir, size_t dl, const char *p, size_t pl)
{
	if (dl == 1)
		return pl > 1;
	return pl > dl && memcmp(p, dir, dl) == 0 && p[dl] == '/';
}

static int put_json(mst_master *m, MDB_txn *txn, const char *path, size_t len, json_t *o)
{
	MDB_val k = {len, (void *)path};
	if (json_object_size(o) == 0) {
		int rc = mdb_del(txn, m->dbi_policies, &k, NULL);
		return rc == MDB_NOTFOUND ? 0 : mst_lmdb_err(rc);
	}
	char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	if (!s)
		return -ENOMEM;
	MDB_val v = {strlen(s), s};
	int rc = mdb_put(txn, m->dbi_policies, &k, &v, 0);
	free(s);
	return mst_lmdb_err(rc);
}

/* A policy of the subtree, changed or deleted through the cursor on it. */
typedef int (*subtree_fn)(MDB_cursor *cur, const MDB_val *k, const MDB_val *v);

/* Each policy below path (and path's own with self), through fn. */
static int each_in_subtree(mst_master *m, MDB_txn *txn, const char *path, size_t len, bool self,
                           subtree_fn fn)
{
	MDB_cursor *cur;
	MDB_val k = {len, (void *)path}, v;
	if (mdb_cursor_open(txn, m->dbi_policies, &cur))
		return -CIS_E_INTERNAL;
	int err = 0, rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	/* path's subtree sorts after path, among keys that begin with it */
	while (!err && rc == 0 &&
	       (len == 1 || (k.mv_size >= len && !memcmp(k.mv_data, path, len)))) {
		if ((self && k.mv_size == len && !memcmp(k.mv_data, path, len)) ||
		    is_below(path, len, k.mv_data, k.mv_size))
			err = fn(cur, &k, &v);
		/* after a delete, MDB_NEXT gives the entry that followed it */
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	return err;
}

static int drop_one(MDB_cursor *cur, const MDB_val *k, const MDB_val *v)
{
	(void)k;
	(void)v;
	return mst_lmdb_err(mdb_cursor_del(cur, 0));
}

/* A descendant's own replicas give way to its ancestor's new target. */
static int clear_replicas(MDB_cursor *cur, const MDB_val *k, const MDB_val *v)
{
	json_t *o = json_loadb(v->mv_data, v->mv_size, 0, NULL);
	if (!o || !json_object_get(o, "replicas")) {
		json_decref(o);
		return 0;
	}
	json_object_del(o, "replicas");
	int err = 0;
	if (json_object_size(o) == 0) {
		err = mst_lmdb_err(mdb_cursor_del(cur, 0));
	} else {
		/* the key's own copy: a value of another size is written by a
		 * delete and an insert, and the delete frees what k points at */
		char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS), *kc = malloc(k->mv_size);
		MDB_val key = {k->mv_size, kc}, nv = {s ? strlen(s) : 0, s};
		int rc = ENOMEM;
		if (s && kc) {
			memcpy(kc, k->mv_data, k->mv_size);
			rc = mdb_cursor_put(cur, &key, &nv, MDB_CURRENT);
		}
		err = mst_lmdb_err(rc);
		free(kc);
		free(s);
	}
	json_decref(o);
	return err;
}

int mst_policies_drop(mst_master *m, MDB_txn *txn, const char *path)
{
	return each_in_subtree(m, txn, path, strlen(path), true, drop_one);
}

int mst_policy_update(mst_master *m, const char *path, int64_t replicas, int pin, int64_t ttl_s,
                      bool clear_below, cis_errmsg *em)
{
	MDB_txn *txn;
	size_t len = strlen(path);
	int err = mst_path_check(path, len, em);
	if (err)
		return err;
	while (len > 1 && path[len - 1] == '/')
		len--;
	if (replicas > CIS_REPLICAS_MAX)
		return cis_fail(em, -EINVAL, "%s: %lld replicas, at most %d", path,
		                (long long)replicas, CIS_REPLICAS_MAX);
	err = mst_txn_begin(m, true, &txn);
	if (err)
		return cis_fail(em, err, "policies: %s", cis_strerror(err));
	json_t *o = policy_get_raw(m, txn, path, len);
	if (!o)
		o = json_object();
	if (replicas == 0)
		json_object_del(o, "replicas");
	else if (replicas > 0)
		json_object_set_new(o, "replicas", json_integer(replicas));
	if (pin >= 0)
		json_object_set_new(o, "pin", json_boolean(pin));
	if (ttl_s == -1)
		json_object_del(o, "ttl");
	else if (ttl_s >= 0)
		json_object_set_new(o, "ttl", json_integer(ttl_s));
	err = put_json(m, txn, path, len, o);
	json_decref(o);
	if (!err && clear_below)
		err = each_in_subtree(m, txn, path, len, false, clear_replicas);
	if (err) {
		mdb_txn_abort(txn);
		return cis_fail(em, err, "%s: saving the policy: %s", path, cis_strerror(err));
	}
	err = mst_txn_commit(txn);
	if (err)
		return cis_fail(em, err, "%s: saving the policy: %s", path, cis_strerror(err));
	atomic_fetch_add(&m->policy_gen, 1);
	return 0;
}

/* A stored key as a path, malloc'd, or NULL for one that cannot be a path
 * (empty, or a NUL inside: never stored by mst_policy_update, skipped in
 * case an older or damaged database has one). Keys are the path's bytes,
 * any bytes but NUL: a policy set through a link has its target's path,
 * which a file:// store's names make anything, UTF-8 or not. */
static char *key_path(const MDB_val *k)
{
	if (k->mv_size == 0 || memchr(k->mv_data, 0, k->mv_size))
		return NULL;
	char *p = malloc(k->mv_size + 1);
	if (p) {
		memcpy(p, k->mv_data, k->mv_size);
		p[k->mv_size] = 0;
	}
	return p;
}

/* Calls fn(arg, path, policy) for each stored policy in key order; path and
 * policy are the callee's to borrow only. fn returns 0 to go on, else that
 * is returned. Entries that are no path or no JSON object are skipped. */
static int policies_each(mst_master *m, int (*fn)(void *, const char *, json_t *), void *arg)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	int err = mst_txn_begin(m, false, &txn);
	if (err)
		return err;
	if (mdb_cursor_open(txn, m->dbi_policies, &cur) != 0) {
		mdb_txn_abort(txn);
		return -CIS_E_INTERNAL;
	}
	int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
	while (rc == 0 && !err) {
		char *path = key_path(&k);
		json_t *o = path ? json_loadb(v.mv_data, v.mv_size, 0, NULL) : NULL;
		if (json_is_object(o))
			err = fn(arg, path, o);
		json_decref(o);
		free(path);
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return err;
}

static int list_one(void *arg, const char *path, json_t *o)
{
	json_t *arr = arg;
	/* "path" as text ('?' for bytes that are not UTF-8), and "path_hex"
	 * with its exact bytes when it is not UTF-8 */
	if (cis_json_set_text(o, "path", path) || json_array_append(arr, o))
		return -ENOMEM;
	return 0;
}

json_t *mst_policies_json(mst_master *m)
{
	json_t *arr = json_array();
	if (arr && policies_each(m, list_one, arr) == -ENOMEM) {
		json_decref(arr);
		return NULL;
	}
	return arr;
}

void mst_strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

struct strv {
	char **v;
	size_t n, cap;
	const char *field; /* collect the paths setting this */
};

static int collect_path(void *arg, const char *path, json_t *o)
{
	struct strv *sv = arg;
	json_t *f = json_object_get(o, sv->field);
	if (!(json_is_true(f) || (json_is_integer(f) && json_integer_value(f) > 0)))
		return 0;
	if (sv->n + 1 >= sv->cap) {
		size_t cap = sv->cap ? 2 * sv->cap : 16;
		char **v = realloc(sv->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		sv->v = v;
		sv->cap = cap;
	}
	if (!(sv->v[sv->n] = strdup(path)))
		return -ENOMEM;
	sv->v[++sv->n] = NULL;
	return 0;
}

/* The paths whose own policy sets field to true or a positive number. */
static int policies_setting(mst_master *m, const char *field, char ***paths, size_t *n)
{
	struct strv sv = {.field = field};
	int err = policies_each(m, collect_path, &sv);
	if (!err && !sv.v && !(sv.v = calloc(1, sizeof(char *))))
		err = -ENOMEM;
	if (err) {
		mst_strv_free(sv.v, sv.n);
		return err;
	}
	*paths = sv.v;
	*n = sv.n;
	return 0;
}

int mst_policies_with_replicas(mst_master *m, char ***paths, size_t *n)
{
	return policies_setting(m, "replicas", paths, n);
}

int mst_policies_pinned(mst_master *m, char ***paths, size_t *n)
{
	return policies_setting(m, "pin", paths, n);
}
