/* "Preload ahead of readers": a per-handle detector. A read that starts
 * where the previous one ended (give or take the reordering of the kernel's
 * parallel readahead requests) counts as sequential; from the second one in
 * a row the client asks the owning workers for the blocks ahead, in a
 * window that doubles each time the reader enters a new block, from one
 * block up to the budget. Any jump resets it, so random access never
 * triggers prefetch. */
#include "fcl.h"

void fcl_ra_init(fcl_ra *ra, uint64_t max_window_blocks)
{
	*ra = (fcl_ra){.max_window = max_window_blocks ? max_window_blocks : 1};
}

uint64_t fcl_ra_on_read(fcl_ra *ra, uint64_t off, uint64_t len, uint64_t block_size,
                        uint64_t file_size, uint64_t *first)
{
	*first = 0;
	if (block_size == 0 || len == 0)
		return 0;
	/* The kernel sends up to a few readahead requests at once and threads
	 * may answer them out of order: allow that much slack either way. */
	uint64_t slack = 4 * (len > (128u << 10) ? len : (128u << 10));
	bool seq = off + slack >= ra->next_off && off <= ra->next_off + slack;
	uint64_t end = off + len;
	uint64_t block = (end - 1) / block_size;
	if (!seq) {
		ra->seq = 0;
		ra->window = 0;
		ra->issued_to = 0;
		ra->next_off = end;
		ra->last_block = block;
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
	uint64_t nblocks = file_size ? (file_size + block_size - 1) / block_size : 0;
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
