/* The block changes a worker holds for its next heartbeat.
 *
 * Bounded (WRK_MAX_DELTAS): past that the set is dropped and marked
 * overflowed, and the link sends a full report instead. A heartbeat must
 * stay far below the message limit: one that could not be sent would be
 * tried again for good, and the worker would never hear that a restarted
 * master wants it to register. Before sending, each block's changes
 * collapse to its last one: the master applies the added list, then the
 * removed one, so a block evicted and cached again within one interval
 * would otherwise end up removed from its index. */
#include "worker.h"

#include <stdlib.h>

void wrk_deltas_note(wrk_deltas *d, cis_block_id id, bool added)
{
	if (d->overflow)
		return;
	if (d->n == d->cap) {
		size_t nc = d->cap ? d->cap * 2 : 1024;
		wrk_delta *nv = nc <= WRK_MAX_DELTAS ? realloc(d->v, nc * sizeof(*nv)) : NULL;

		if (!nv) {
			wrk_deltas_free(d);
			d->overflow = true;
			return;
		}
		d->v = nv;
		d->cap = nc;
	}
	d->v[d->n] = (wrk_delta){.id = id, .added = added, .seq = (uint32_t)d->n};
	d->n++;
}

void wrk_deltas_take(wrk_deltas *d, wrk_deltas *out)
{
	*out = *d;
	*d = (wrk_deltas){0};
}

static int cmp_delta(const void *a, const void *b)
{
	const wrk_delta *x = a, *y = b;

	if (x->id.hi != y->id.hi)
		return x->id.hi < y->id.hi ? -1 : 1;
	if (x->id.lo != y->id.lo)
		return x->id.lo < y->id.lo ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

void wrk_deltas_collapse(wrk_deltas *d)
{
	size_t k = 0;

	if (d->n)
		qsort(d->v, d->n, sizeof(*d->v), cmp_delta);
	for (size_t i = 0; i < d->n; i++)
		if (i + 1 == d->n || !cis_block_id_eq(d->v[i].id, d->v[i + 1].id))
			d->v[k++] = d->v[i]; /* the last change of its block */
	d->n = k;
}

void wrk_deltas_free(wrk_deltas *d)
{
	free(d->v);
	*d = (wrk_deltas){0};
}
