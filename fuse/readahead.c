/* "Preload ahead of readers": a per-handle detector. A read that starts
 * where the previous one ended (give or take the reordering of the kernel's
 * parallel readahead requests) counts as sequential; from the second one in
 * a row the client asks the owning workers for the blocks ahead, in a
 * window that doubles each time the reader enters a new block, from one
 * block up to the budget. Any jump resets it, so random access never
 * triggers prefetch.
 *
 * A reader that opens the file anew for every read (a data loader taking
 * a shard's samples in order, one open each, several threads at once)
 * gets the same from a detector per file that its opens share
 * (fcl_ra_shared), with more slack for its threads' reads coming out of
 * order. */
#include "fcl.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

void fcl_ra_init(fcl_ra *ra, uint64_t max_window_blocks, uint64_t slack)
{
	if (max_window_blocks > FCL_PREFETCH_MAX)
		max_window_blocks = FCL_PREFETCH_MAX;
	*ra = (fcl_ra){.max_window = max_window_blocks ? max_window_blocks : 1, .slack = slack};
}

uint64_t fcl_ra_on_read(fcl_ra *ra, uint64_t off, uint64_t len, uint64_t block_size,
                        uint64_t file_size, uint64_t *first)
{
	*first = 0;
	if (block_size == 0 || len == 0)
		return 0;
	/* The kernel sends up to a few readahead requests at once and threads
	 * may answer them out of order: allow that much slack either way. */
	uint64_t slack = 4 * len > ra->slack ? 4 * len : ra->slack;
	bool seq = off + slack >= ra->next_off && off <= ra->next_off + slack;
	uint64_t end = off + len;
	uint64_t block = (end - 1) / block_size;
	/* Inside the current run but behind it by more than the slack: a
	 * read that waited on a miss while later ones were answered. It
	 * neither restarts the run nor counts. */
	if (!seq && ra->seq >= 2 && off >= ra->run_start && end <= ra->next_off)
		return 0;
	if (!seq) {
		ra->seq = 0;
		ra->window = 0;
		ra->issued_to = 0;
		ra->next_off = end;
		ra->last_block = block;
		ra->run_start = off;
		return 0;
	}
	if (end > ra->next_off)
		ra->next_off = end;
	ra->seq++;
	if (ra->seq < 2)
		return 0;
	if (ra->window == 0) {
		ra->window = 1;
	} else if (block != ra->last_block && ra->window < ra->max_window) {
		ra->window *= 2;
		if (ra->window > ra->max_window)
			ra->window = ra->max_window;
	}
	ra->last_block = block;
	uint64_t nblocks = cis_block_count(file_size, block_size);
	uint64_t to = block + 1 + ra->window;
	if (to > nblocks)
		to = nblocks;
	uint64_t from = block + 1;
	if (from < ra->issued_to)
		from = ra->issued_to;
	if (to <= from)
		return 0;
	ra->issued_to = to;
	*first = from;
	return to - from;
}

typedef struct ra_slot {
	uint64_t ino, vhash; /* 0: free */
	fcl_ra ra;
} ra_slot;

struct fcl_ra_shared {
	pthread_mutex_t lock;
	ra_slot slots[1u << FCL_RA_SHARED_BITS];
};

int fcl_ra_shared_new(fcl_ra_shared **out)
{
	fcl_ra_shared *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return -ENOMEM;
	pthread_mutex_init(&rs->lock, NULL);
	*out = rs;
	return 0;
}

void fcl_ra_shared_free(fcl_ra_shared *rs)
{
	if (!rs)
		return;
	pthread_mutex_destroy(&rs->lock);
	free(rs);
}

uint64_t fcl_ra_shared_on_read(fcl_ra_shared *rs, uint64_t ino, uint64_t vhash,
                               uint64_t max_window_blocks, uint64_t off, uint64_t len,
                               uint64_t block_size, uint64_t file_size, uint64_t *first)
{
	ra_slot *s = &rs->slots[fcl_ino_slot(ino, FCL_RA_SHARED_BITS)];
	pthread_mutex_lock(&rs->lock);
	if (s->ino != ino || s->vhash != vhash) {
		s->ino = ino;
		s->vhash = vhash;
		fcl_ra_init(&s->ra, max_window_blocks, FCL_RA_SLACK_SHARED);
	}
	uint64_t n = fcl_ra_on_read(&s->ra, off, len, block_size, file_size, first);
	pthread_mutex_unlock(&rs->lock);
	return n;
}
