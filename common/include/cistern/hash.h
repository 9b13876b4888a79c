/* Hashing (xxHash) and block identifiers.
 *
 * A block id is a 128-bit hash of (mount id, object key, object version,
 * block size, block index). The version in the id means an overwritten
 * object gets new block ids, so a cache can never serve old bytes for a new
 * version; the block size in it means the id names one byte range of the
 * object, [index * block_size, (index + 1) * block_size), so a request that
 * claims another block size names another block, never this one. */
#ifndef CISTERN_HASH_H
#define CISTERN_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint64_t cis_hash64(const void *data, size_t len, uint64_t seed);

typedef struct cis_block_id {
	uint64_t hi;
	uint64_t lo;
} cis_block_id;

#define CIS_BLOCK_ID_HEX 33 /* 32 hex digits and the NUL */

cis_block_id cis_block_id_make(uint64_t mount_id, const char *key, const char *version,
                               uint64_t block_size, uint64_t index);
/* The blocks of a file of size bytes (block_size > 0); without the wrap of
 * (size + block_size - 1) / block_size for a size near 2^64. */
static inline uint64_t cis_block_count(uint64_t size, uint64_t block_size)
{
	return size / block_size + (size % block_size != 0);
}
/* 32 lowercase hex digits. out must hold CIS_BLOCK_ID_HEX bytes. */
void cis_block_id_fmt(cis_block_id id, char *out);
/* 0, or -EINVAL unless s is exactly 32 hex digits. */
int cis_block_id_parse(const char *s, cis_block_id *out);
bool cis_block_id_eq(cis_block_id a, cis_block_id b);
/* The id's 16 bytes as messages carry it: hi, then lo, big-endian. */
void cis_block_id_to_bytes(cis_block_id id, uint8_t out[16]);
cis_block_id cis_block_id_from_bytes(const uint8_t in[16]);

/* Streaming xxh3-64 checksum for block contents. */
typedef struct cis_checksum cis_checksum;
/* NULL on -ENOMEM. */
cis_checksum *cis_checksum_new(void);
void cis_checksum_update(cis_checksum *c, const void *data, size_t len);
uint64_t cis_checksum_digest(const cis_checksum *c);
void cis_checksum_reset(cis_checksum *c);
void cis_checksum_free(cis_checksum *c);

#endif
