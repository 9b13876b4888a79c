/* Depth-first walk of the files below a path, streaming: one page of
 * entries per directory level is in memory, never the whole tree, so a
 * load of millions of files costs O(depth * page) here. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "master.h"

#define WALK_PAGE 64

struct frame {
	uint64_t dir;
	char *path;
	mst_inode *ents;
	size_t n, idx;
	uint64_t cookie;              /* list mode: next readdir cookie */
	char after[MST_NAME_MAX + 1]; /* the last name seen */
	bool eof;
	bool by_name; /* list mode gone on in LMDB from after (the cookie went stale) */
};

int mst_path_order(const char *a, const char *b)
{
	const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
	while (*x && *x == *y) {
		x++;
		y++;
	}
	if (*x == *y)
		return 0;
	if (!*x)
		return -1;
	if (!*y)
		return 1;
	if (*x == '/')
		return -1; /* a's component ended first: it sorts before */
	if (*y == '/')
		return 1;
	return *x < *y ? -1 : 1;
}

uint64_t mst_file_blocks(mst_master *m, const mst_inode *f, uint64_t *block_size)
{
	mst_mount *mt = mst_mount_find(m, f->mount_id);
	if (!mt || !mt->block_size)
		return 0;
	if (block_size)
		*block_size = mt->block_size;
	return cis_block_count(f->size, mt->block_size); /* a store may claim a size near 2^64 */
}

struct lmdb_page {
	uint64_t ids[WALK_PAGE];
	char last[MST_NAME_MAX + 1];
	size_t n;
};

static int page_collect(void *arg, const char *name, size_t nlen, uint64_t id)
{
	struct lmdb_page *p = arg;
	if (p->n == WALK_PAGE)
		return 1;
	p->ids[p->n++] = id;
	memcpy(p->last, name, nlen);
	p->last[nlen] = 0;
	return 0;
}

/* The next page of f's directory. */
static int next_page(mst_master *m, struct frame *f, bool list, cis_errmsg *em)
{
	free(f->ents);
	f->ents = NULL;
	f->n = f->idx = 0;
	if (list && !f->by_name) {
		uint64_t next;
		int err = mst_ns_readdir(m, f->dir, f->cookie, WALK_PAGE, &f->ents, &f->n, &next,
		                         &f->eof, em);
		if (err == 0) {
			f->cookie = next;
			if (f->n)
				snprintf(f->after, sizeof(f->after), "%s", f->ents[f->n - 1].name);
			return 0;
		}
		if (err != -ESTALE || !f->after[0])
			return err;
		/* The entry the cookie names left the directory (listed again
		 * meanwhile, so LMDB is fresh): go on after its name there. */
		f->by_name = true;
		if (em)
			em->text[0] = 0;
	}
	struct lmdb_page *p = malloc(sizeof(*p));
	MDB_txn *txn;
	if (!p)
		return -ENOMEM;
	p->n = 0;
	int err = mst_txn_begin(m, false, &txn);
	if (err)
		goto out_page;
	err = mst_children_each(m, txn, f->dir, f->after[0] ? f->after : NULL, page_collect, p);
	if (!err && p->n) {
		f->ents = malloc(p->n * sizeof(*f->ents));
		if (!f->ents)
			err = -ENOMEM;
		for (size_t i = 0; !err && i < p->n; i++)
			if (mst_inode_get(m, txn, p->ids[i], &f->ents[f->n]) == 0)
				f->n++;
		memcpy(f->after, p->last, sizeof(f->after));
	}
	f->eof = p->n < WALK_PAGE;
	mdb_txn_abort(txn);
out_page:
	free(p);
	return err;
}

static char *join(const char *dir, const char *name)
{
	size_t dl = strlen(dir);
	char *p = malloc(dl + strlen(name) + 2);
	if (p)
		sprintf(p, "%s%s%s", dir, (dl && dir[dl - 1] == '/') ? "" : "/", name);
	return p;
}

int mst_walk(mst_master *m, const char *path, bool list, mst_walk_fn fn, mst_walk_err_fn efn,
             void *arg, cis_errmsg *em)
{
	mst_inode *root = malloc(sizeof(*root));
	struct frame *st = NULL;
	size_t depth = 0, cap = 0;
	int err;
	if (!root)
		return -ENOMEM;
	err = list ? mst_ns_resolve(m, path, root, em) : 0;
	if (!list) {
		/* LMDB only: resolve without listing anything. */
		MDB_txn *txn;
		err = mst_txn_begin(m, false, &txn);
		if (!err) {
			uint64_t id = MST_ROOT_INO;
			const char *p = path;
			char name[MST_NAME_MAX + 1];
			while (!err && *p) {
				while (*p == '/')
					p++;
				size_t l = strcspn(p, "/");
				if (!l)
					break;
				if (l > MST_NAME_MAX) {
					err = -ENAMETOOLONG;
					break;
				}
				memcpy(name, p, l);
				name[l] = 0;
				err = mst_child_get(m, txn, id, name, &id);
				p += l;
			}
			if (!err)
				err = mst_inode_get(m, txn, id, root);
			mdb_txn_abort(txn);
		}
		if (err == -ENOENT)
			cis_fail(em, err, "%s: no such file or directory (not listed yet)", path);
	} else if (err && !strstr(em->text, path)) {
		char was[sizeof(em->text)];
		snprintf(was, sizeof(was), "%s", cis_errmsg_or(em, err));
		cis_fail(em, err, "%s: %s", path, was);
	}
	if (err)
		goto out_root;
	if (root->type != MST_DIR) {
		err = root->type == MST_FILE ? fn(arg, path, root) : 0;
		goto out_root;
	}
	cap = 16;
	st = calloc(cap, sizeof(*st));
	if (!st) {
		err = -ENOMEM;
		goto out_root;
	}
	st[0].dir = root->id;
	st[0].path = strdup(path);
	if (!st[0].path) {
		err = -ENOMEM;
		goto out_stack;
	}
	depth = 1;
	err = next_page(m, &st[0], list, em);
	while (!err && depth) {
		struct frame *f = &st[depth - 1];
		if (f->idx == f->n) {
			if (!f->eof && f->n) {
				cis_errmsg sub = {{0}};
				int lerr = next_page(m, f, list, &sub);
				if (lerr && depth > 1 && efn) {
					/* A directory below that fails in a later page
					 * (removed meanwhile) ends there, as one that
					 * fails at its first does. */
					err = efn(arg, f->path, lerr, cis_errmsg_or(&sub, lerr));
					f->eof = true;
				} else {
					err = lerr;
				}
				if (err)
					cis_fail(em, err, "%s", cis_errmsg_or(&sub, err));
				continue;
			}
			free(f->ents);
			free(f->path);
			depth--;
			continue;
		}
		mst_inode *e = &f->ents[f->idx++];
		char *p = join(f->path, e->name);
		if (!p) {
			err = -ENOMEM;
			break;
		}
		if (e->type != MST_DIR) {
			err = e->type == MST_FILE ? fn(arg, p, e) : 0;
			free(p);
			continue;
		}
		if (depth == cap) {
			struct frame *ns = realloc(st, cap * 2 * sizeof(*st));
			if (!ns) {
				free(p);
				err = -ENOMEM;
				break;
			}
			st = ns;
			cap *= 2;
			f = &st[depth - 1];
		}
		struct frame *c = &st[depth];
		memset(c, 0, sizeof(*c));
		c->dir = e->id;
		c->path = p;
		cis_errmsg sub = {{0}};
		int lerr = next_page(m, c, list, &sub);
		if (lerr) {
			free(c->ents);
			err = efn ? efn(arg, p, lerr, cis_errmsg_or(&sub, lerr)) : lerr;
			if (err)
				cis_fail(em, err, "%s", cis_errmsg_or(&sub, lerr));
			free(p);
			continue;
		}
		depth++;
	}
	if (err > 0)
		err = 0;
	while (depth) {
		free(st[depth - 1].ents);
		free(st[depth - 1].path);
		depth--;
	}
out_stack:
	free(st);
out_root:
	free(root);
	return err < 0 ? err : 0;
}
