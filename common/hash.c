#include "cistern/hash.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

uint64_t cis_hash64(const void *data, size_t len, uint64_t seed)
{
	return XXH3_64bits_withSeed(data, len, seed);
}

cis_block_id cis_block_id_make(uint64_t mount_id, const char *key, const char *version,
                               uint64_t block_size, uint64_t index)
{
	XXH3_state_t st;
	XXH128_hash_t h;
	uint8_t sep = 0;

	/* Fields are separated by NULs so ("ab","c") and ("a","bc") differ. */
	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, &mount_id, sizeof(mount_id));
	XXH3_128bits_update(&st, key, strlen(key));
	XXH3_128bits_update(&st, &sep, 1);
	XXH3_128bits_update(&st, version, strlen(version));
	XXH3_128bits_update(&st, &sep, 1);
	XXH3_128bits_update(&st, &block_size, sizeof(block_size));
	XXH3_128bits_update(&st, &index, sizeof(index));
	h = XXH3_128bits_digest(&st);
	return (cis_block_id){.hi = h.high64, .lo = h.low64};
}

void cis_block_id_fmt(cis_block_id id, char *out)
{
	static const char hex[] = "0123456789abcdef";

	for (int i = 0; i < 16; i++) {
		out[i] = hex[(id.hi >> (60 - 4 * i)) & 0xf];
		out[16 + i] = hex[(id.lo >> (60 - 4 * i)) & 0xf];
	}
	out[32] = 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int cis_block_id_parse(const char *s, cis_block_id *out)
{
	uint64_t parts[2] = {0, 0};

	for (int i = 0; i < 32; i++) {
		int v = hexval(s[i]);
		if (v < 0)
			return -EINVAL;
		parts[i / 16] = (parts[i / 16] << 4) | (uint64_t)v;
	}
	if (s[32] != 0)
		return -EINVAL;
	out->hi = parts[0];
	out->lo = parts[1];
	return 0;
}

bool cis_block_id_eq(cis_block_id a, cis_block_id b)
{
	return a.hi == b.hi && a.lo == b.lo;
}

void cis_block_id_to_bytes(cis_block_id id, uint8_t out[16])
{
	for (int i = 0; i < 8; i++) {
		out[i] = (uint8_t)(id.hi >> (56 - 8 * i));
		out[8 + i] = (uint8_t)(id.lo >> (56 - 8 * i));
	}
}

cis_block_id cis_block_id_from_bytes(const uint8_t in[16])
{
	cis_block_id id = {0, 0};
	for (int i = 0; i < 8; i++) {
		id.hi = id.hi << 8 | in[i];
		id.lo = id.lo << 8 | in[8 + i];
	}
	return id;
}

struct cis_checksum {
	XXH3_state_t st;
};

cis_checksum *cis_checksum_new(void)
{
	cis_checksum *c = malloc(sizeof(*c));

	if (c)
		XXH3_64bits_reset(&c->st);
	return c;
}

void cis_checksum_update(cis_checksum *c, const void *data, size_t len)
{
	XXH3_64bits_update(&c->st, data, len);
}

uint64_t cis_checksum_digest(const cis_checksum *c)
{
	return XXH3_64bits_digest(&c->st);
}

void cis_checksum_reset(cis_checksum *c)
{
	XXH3_64bits_reset(&c->st);
}

void cis_checksum_free(cis_checksum *c)
{
	free(c);
}
