/* Rendezvous (highest-random-weight) placement of blocks on workers.
 *
 * Every client computes the same order from the same worker list, so reads
 * need no master round trip. When a worker leaves, only the blocks it held
 * move; when one joins, it takes about 1/n of the blocks from the others. */
#ifndef CISTERN_PLACE_H
#define CISTERN_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "cistern/hash.h"

/* Weight of worker_id for block id: a hash of the pair. */
uint64_t cis_place_weight(cis_block_id id, uint64_t worker_id);

/* Write to out the indices (into worker_ids) of the min(n, nout) workers
 * with the highest weight for id, best first; return that count. The
 * primary is out[0], replicas follow. O(n * nout); fine for hundreds of
 * workers. Duplicate worker ids are the caller's bug. */
size_t cis_place(cis_block_id id, const uint64_t *worker_ids, size_t n, size_t *out, size_t nout);

#endif
