#include "cistern/kv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void cis_kvlist_free(cis_kvlist *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->items[i].key);
		free(l->items[i].value);
	}
	free(l->items);
	l->items = NULL;
	l->n = l->cap = 0;
}

static cis_kv *find(const cis_kvlist *l, const char *key)
{
	for (size_t i = 0; i < l->n; i++) {
		if (strcmp(l->items[i].key, key) == 0)
			return &l->items[i];
	}
	return NULL;
}

int cis_kvlist_set(cis_kvlist *l, const char *key, const char *value)
{
	cis_kv *kv = find(l, key);
	char *v = strdup(value);

	if (!v)
		return -ENOMEM;
	if (kv) {
		free(kv->value);
		kv->value = v;
		return 0;
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		cis_kv *items = realloc(l->items, cap * sizeof(*items));
		if (!items)
			goto out_free_value;
		l->items = items;
		l->cap = cap;
	}
	l->items[l->n].key = strdup(key);
	if (!l->items[l->n].key)
		goto out_free_value;
	l->items[l->n].value = v;
	l->n++;
	return 0;

out_free_value:
	free(v);
	return -ENOMEM;
}

int cis_kvlist_set_pair(cis_kvlist *l, const char *pair)
{
	const char *eq = strchr(pair, '=');
	char *key;
	int r;

	if (!eq || eq == pair)
		return -EINVAL;
	key = strndup(pair, (size_t)(eq - pair));
	if (!key)
		return -ENOMEM;
	r = cis_kvlist_set(l, key, eq + 1);
	free(key);
	return r;
}

const char *cis_kvlist_get(const cis_kvlist *l, const char *key)
{
	cis_kv *kv = find(l, key);

	return kv ? kv->value : NULL;
}

int cis_kvlist_remove(cis_kvlist *l, const char *key)
{
	cis_kv *kv = find(l, key);

	if (!kv)
		return -ENOENT;
	free(kv->key);
	free(kv->value);
	memmove(kv, kv + 1, (size_t)(l->items + l->n - kv - 1) * sizeof(*kv));
	l->n--;
	return 0;
}

int cis_kvlist_copy(cis_kvlist *dst, const cis_kvlist *src)
{
	for (size_t i = 0; i < src->n; i++) {
		int r = cis_kvlist_set(dst, src->items[i].key, src->items[i].value);
		if (r)
			return r;
	}
	return 0;
}
