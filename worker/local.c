/* Leases on short-circuit fds. A client on the same host gets an open fd
 * of a block file; while its lease lives the block holds a reference and
 * cannot be evicted. Leases expire unless renewed, so a client that dies
 * without releasing frees its blocks after the lease time.
 *
 * A lease belongs to the user id of the Unix connection that took it; only
 * that user renews or releases it (from any of its connections, so a
 * client that reconnected keeps its leases). To anyone else it is unknown:
 * one local user cannot release another's blocks for eviction. */
#include "worker.h"

#include <errno.h>
#include <stdlib.h>

#include "cistern/time.h"

typedef struct lease {
	struct lease *next;
	uint64_t id;
	wrk_block *blk;
	uint64_t expiry_ms; /* monotonic */
	int owner_uid;
} lease;

#define LEASE_BUCKETS 65536

struct wrk_leases {
	wrk *w;
	pthread_mutex_t mu;
	lease *table[LEASE_BUCKETS];
	uint64_t next_id;
	uint64_t count;
	uint64_t next_expiry_ms; /* no lease expires before: the sweep waits */
};

static uint32_t clamp_ms(uint32_t ms)
{
	if (ms == 0)
		return WRK_DEFAULT_LEASE;
	return ms > WRK_MAX_LEASE ? WRK_MAX_LEASE : ms;
}

int wrk_leases_new(wrk *w, wrk_leases **out)
{
	wrk_leases *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->w = w;
	/* Ids start at a random-ish point so a restarted worker does not
	 * honour a lease id from before. */
	l->next_id = (cis_mono_ns() & 0xffffffffull) << 20 | 1;
	pthread_mutex_init(&l->mu, NULL);
	*out = l;
	return 0;
}

void wrk_leases_free(wrk_leases *l)
{
	if (!l)
		return;
	for (int i = 0; i < LEASE_BUCKETS; i++) {
		lease *e = l->table[i], *next;

		for (; e; e = next) {
			next = e->next;
			wrk_bs_release(l->w->bs, e->blk);
			free(e);
		}
	}
	pthread_mutex_destroy(&l->mu);
	free(l);
}

int wrk_lease_add(wrk_leases *l, wrk_block *blk, uint32_t ms, int owner_uid, uint64_t *lease_id,
                  uint64_t *granted_ms)
{
	lease *e;
	uint64_t id;

	if (owner_uid < 0)
		return -EPERM; /* only Unix connections have an owner */
	ms = clamp_ms(ms);
	pthread_mutex_lock(&l->mu);
	if (l->count >= WRK_MAX_LEASES) {
		pthread_mutex_unlock(&l->mu);
		return -EBUSY;
	}
	e = malloc(sizeof(*e));
	if (!e) {
		pthread_mutex_unlock(&l->mu);
		return -ENOMEM;
	}
	id = e->id = l->next_id++;
	e->blk = blk;
	e->expiry_ms = cis_mono_ms() + ms;
	e->owner_uid = owner_uid;
	if (l->count == 0 || e->expiry_ms < l->next_expiry_ms)
		l->next_expiry_ms = e->expiry_ms;
	e->next = l->table[e->id % LEASE_BUCKETS];
	l->table[e->id % LEASE_BUCKETS] = e;
	l->count++;
	/* Once unlocked, e is another thread's to release and free. */
	pthread_mutex_unlock(&l->mu);
	*lease_id = id;
	*granted_ms = ms;
	return 0;
}

int wrk_lease_renew(wrk_leases *l, uint64_t lease_id, uint32_t ms, int owner_uid)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&l->mu);
	for (lease *e = l->table[lease_id % LEASE_BUCKETS]; e; e = e->next)
		if (e->id == lease_id && e->owner_uid == owner_uid) {
			/* Renewed: its holder is reading the block. */
			wrk_bs_touch_held(l->w->bs, e->blk);
			e->expiry_ms = cis_mono_ms() + clamp_ms(ms);
			if (e->expiry_ms < l->next_expiry_ms)
				l->next_expiry_ms = e->expiry_ms; /* a renewal may shorten it */
			rc = (int)clamp_ms(ms);
			break;
		}
	pthread_mutex_unlock(&l->mu);
	return rc;
}

int wrk_lease_release(wrk_leases *l, uint64_t lease_id, int owner_uid)
{
	lease **pp, *e = NULL;

	pthread_mutex_lock(&l->mu);
	for (pp = &l->table[lease_id % LEASE_BUCKETS]; *pp; pp = &(*pp)->next)
		if ((*pp)->id == lease_id && (*pp)->owner_uid == owner_uid) {
			e = *pp;
			*pp = e->next;
			l->count--;
			break;
		}
	pthread_mutex_unlock(&l->mu);
	if (!e)
		return -ENOENT;
	wrk_bs_release(l->w->bs, e->blk);
	free(e);
	return 0;
}

void wrk_leases_expire(wrk_leases *l)
{
	uint64_t now = cis_mono_ms();
	uint64_t next = UINT64_MAX;
	lease *dead = NULL;

	pthread_mutex_lock(&l->mu);
	if (l->count == 0 || now < l->next_expiry_ms) {
		pthread_mutex_unlock(&l->mu);
		return; /* nothing can have expired: no sweep of the table */
	}
	for (int i = 0; i < LEASE_BUCKETS; i++)
		for (lease **pp = &l->table[i]; *pp;) {
			lease *e = *pp;

			if (e->expiry_ms > now) {
				if (e->expiry_ms < next)
					next = e->expiry_ms;
				pp = &e->next;
				continue;
			}
			*pp = e->next;
			l->count--;
			e->next = dead;
			dead = e;
		}
	l->next_expiry_ms = next;
	pthread_mutex_unlock(&l->mu);
	while (dead) {
		lease *next = dead->next;

		wrk_bs_release(l->w->bs, dead->blk);
		free(dead);
		dead = next;
	}
}

uint64_t wrk_leases_count(wrk_leases *l)
{
	uint64_t n;

	pthread_mutex_lock(&l->mu);
	n = l->count;
	pthread_mutex_unlock(&l->mu);
	return n;
}
