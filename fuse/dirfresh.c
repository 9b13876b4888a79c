/* Directory refresh: one listing in place of a master lookup per name.
 *
 * A data loader that opens files by names it did not list through this
 * mount (a file list made once at start), or in an epoch longer than
 * entry-timeout (every cached name expired since the last one), asks the
 * master for every file it opens: one round trip on each open's critical
 * path. One listing of the directory answers all of those names, a page
 * of 1024 entries per round trip, and fills the name and attribute caches
 * for the lookups still to come.
 *
 * This module decides when. Each name the client had to look up at the
 * master (and found) counts against its directory; DF_MISSES of them
 * queue the directory for a listing, which the caller's thread takes with
 * fcl_df_next. By then the misses cost as many round trips as the listing
 * of a directory of 32,768 names. A directory is queued at most once per
 * gap (half of entry-timeout): a listing renews its names for a whole
 * entry-timeout, so misses sooner than that are of names that are new or
 * were evicted, which listing again would not help. A directory too big
 * for the caches (fcl_df_too_big) is not queued again.
 *
 * Directories are remembered in a table of DF_WAYS-way sets: one that
 * finds its set full takes the place of the one missed least recently,
 * directories marked too big last; a directory forgotten that way starts
 * counting again. */
#include "fcl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DF_SET_BITS 10 /* 1024 sets */
#define DF_WAYS     4
#define DF_QUEUE    8

typedef struct df_slot {
	uint64_t dino; /* 0: free */
	uint32_t misses;
	bool too_big;
	uint64_t last_ns;   /* the latest miss */
	uint64_t queued_ns; /* 0: never queued */
} df_slot;

struct fcl_dirfresh {
	pthread_mutex_t lock;
	pthread_cond_t queued;
	uint64_t gap_ns;
	bool stopped;
	uint64_t queue[DF_QUEUE];
	size_t head, len;
	df_slot slots[(1u << DF_SET_BITS) * DF_WAYS];
};

int fcl_df_new(uint64_t gap_ns, fcl_dirfresh **out)
{
	fcl_dirfresh *df = calloc(1, sizeof(*df));
	if (!df)
		return -ENOMEM;
	pthread_mutex_init(&df->lock, NULL);
	pthread_cond_init(&df->queued, NULL);
	df->gap_ns = gap_ns;
	*out = df;
	return 0;
}

void fcl_df_free(fcl_dirfresh *df)
{
	if (!df)
		return;
	pthread_cond_destroy(&df->queued);
	pthread_mutex_destroy(&df->lock);
	free(df);
}

/* Whether b is later than a by at least d (false when the clock seen by
 * one caller ran behind another's). */
static bool later_by(uint64_t a, uint64_t b, uint64_t d)
{
	return b >= a && b - a >= d;
}

/* Whether slot a is a better one to take than b: a free one first, then
 * one not too big, then the one missed least recently. */
static bool better_victim(const df_slot *a, const df_slot *b)
{
	if (!a->dino != !b->dino)
		return !a->dino;
	if (a->too_big != b->too_big)
		return !a->too_big;
	return a->last_ns < b->last_ns;
}

static size_t set_of(uint64_t dino)
{
	return fcl_ino_slot(dino, DF_SET_BITS);
}

/* dino's slot: the one it has, or the one it takes now. */
static df_slot *slot_of(fcl_dirfresh *df, uint64_t dino)
{
	df_slot *set = &df->slots[set_of(dino) * DF_WAYS];
	df_slot *victim = &set[0];
	for (int i = 0; i < DF_WAYS; i++) {
		if (set[i].dino == dino)
			return &set[i];
		if (better_victim(&set[i], victim))
			victim = &set[i];
	}
	*victim = (df_slot){.dino = dino};
	return victim;
}

bool fcl_df_missed(fcl_dirfresh *df, uint64_t dino, uint64_t now_ns)
{
	if (!df || dino == 0 || df->gap_ns == 0)
		return false;
	bool queued = false;
	pthread_mutex_lock(&df->lock);
	df_slot *s = slot_of(df, dino);
	if (now_ns > s->last_ns)
		s->last_ns = now_ns;
	if (++s->misses >= DF_MISSES && !s->too_big && !df->stopped &&
	    (s->queued_ns == 0 || later_by(s->queued_ns, now_ns, df->gap_ns)) &&
	    df->len < DF_QUEUE) {
		df->queue[(df->head + df->len++) % DF_QUEUE] = dino;
		s->queued_ns = now_ns ? now_ns : 1;
		s->misses = 0;
		queued = true;
		pthread_cond_signal(&df->queued);
	}
	pthread_mutex_unlock(&df->lock);
	return queued;
}

int fcl_df_next(fcl_dirfresh *df, uint64_t *dino)
{
	pthread_mutex_lock(&df->lock);
	while (!df->stopped && df->len == 0)
		pthread_cond_wait(&df->queued, &df->lock);
	int rc = -ECANCELED;
	if (!df->stopped) {
		*dino = df->queue[df->head];
		df->head = (df->head + 1) % DF_QUEUE;
		df->len--;
		rc = 0;
	}
	pthread_mutex_unlock(&df->lock);
	return rc;
}

void fcl_df_too_big(fcl_dirfresh *df, uint64_t dino)
{
	pthread_mutex_lock(&df->lock);
	/* taken back if the directory was pushed out while it was listed */
	slot_of(df, dino)->too_big = true;
	pthread_mutex_unlock(&df->lock);
}

void fcl_df_stop(fcl_dirfresh *df)
{
	pthread_mutex_lock(&df->lock);
	df->stopped = true;
	pthread_cond_broadcast(&df->queued);
	pthread_mutex_unlock(&df->lock);
}
