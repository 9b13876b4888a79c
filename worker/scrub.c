/* Background scrub: re-read cached blocks one at a time and compare their
 * checksums, so a block rotting on disk is dropped (and fetched again on
 * its next read) instead of served. Paced by the caller (main.c). */
#include "worker.h"

#include <errno.h>

bool wrk_scrub_step(wrk *w, cis_block_id *cursor, bool *started)
{
	cis_block_id id;
	int rc;

	rc = wrk_bs_next(w->bs, *started ? cursor : NULL, &id);
	if (rc < 0) {
		*started = false; /* pass over: start from the first next time */
		return false;
	}
	*started = true;
	*cursor = id;
	rc = wrk_bs_verify(w->bs, id, true);
	if (rc == 0 || rc == -CIS_E_CHECKSUM)
		cis_counter_inc(w->m.scrubbed);
	return true;
}
