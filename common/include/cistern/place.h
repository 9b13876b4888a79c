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

/* Blocks are placed by extent: every block of an extent of about this
 * many bytes has the owners of the extent's first block. A worker then
 * holds runs of consecutive blocks and fetches each run from the store
 * with one ranged read (fetch.c's spans), where per-block placement would
 * scatter a file's blocks and cut every read to one block: s3rver gives
 * 4 MiB ranges 0.8 of the throughput of 16 MiB ones, and a cloud store
 * charges and delays per request. */
#define CIS_PLACE_EXTENT (16u << 20)

/* The id that block index of an object is placed by: id (the block's own)
 * when the block starts its extent, else the extent's first block's. */
cis_block_id cis_place_id(cis_block_id id, uint64_t mount_id, const char *key, const char *version,
                          uint64_t block_size, uint64_t index);

/* Weight of worker_id for block id: a hash of the pair. */
uint64_t cis_place_weight(cis_block_id id, uint64_t worker_id);

/* Write to out the indices (into worker_ids) of the min(n, nout) workers
 * with the highest weight for id, best first; return that count. The
 * primary is out[0], replicas follow. O(n * nout); fine for hundreds of
 * workers. Duplicate worker ids are the caller's bug. */
size_t cis_place(cis_block_id id, const uint64_t *worker_ids, size_t n, size_t *out, size_t nout);

#endif
