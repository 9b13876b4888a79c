/* Block references as they come off the wire: validated before anything
 * is done with them, since the id names a file in the cache. */
#include "worker.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int wrk_id_from_bytes(const ProtobufCBinaryData *b, cis_block_id *out)
{
	if (!b || b->len != 16 || !b->data)
		return -EINVAL;
	*out = cis_block_id_from_bytes(b->data);
	return 0;
}

uint64_t wrk_ref_len(const wrk_ref *r)
{
	uint64_t start = r->index * r->block_size;

	if (start >= r->file_size)
		return 0;
	return r->file_size - start < r->block_size ? r->file_size - start : r->block_size;
}

int wrk_ref_from_proto(wrk_ref *r, const Cis__BlockRef *p, cis_errmsg *em)
{
	cis_block_id want;
	char hex[CIS_BLOCK_ID_HEX];

	memset(r, 0, sizeof(*r));
	if (!p)
		return cis_fail(em, -EINVAL, "block ref missing");
	if (wrk_id_from_bytes(&p->id, &r->id) < 0)
		return cis_fail(em, -EINVAL, "block id: want 16 bytes, got %zu", p->id.len);
	if (!p->key || !p->key[0] || strlen(p->key) > WRK_MAX_KEY)
		return cis_fail(em, -EINVAL, "block key empty or over %d bytes", WRK_MAX_KEY);
	if (p->block_size == 0 || p->block_size > WRK_MAX_BLOCK_SIZE)
		return cis_fail(em, -EINVAL, "block size %" PRIu64 " out of range", p->block_size);
	if (p->index > UINT64_MAX / p->block_size)
		return cis_fail(em, -EINVAL, "block index %" PRIu64 " out of range", p->index);
	if (p->index * p->block_size >= p->file_size && !(p->index == 0 && p->file_size == 0))
		return cis_fail(em, -EINVAL,
		                "block index %" PRIu64 " past the end of a %" PRIu64 "-byte file",
		                p->index, p->file_size);
	want = cis_block_id_make(p->mount_id, p->key, p->version ? p->version : "", p->block_size,
	                         p->index);
	if (!cis_block_id_eq(want, r->id)) {
		cis_block_id_fmt(r->id, hex);
		return cis_fail(
		    em, -EINVAL,
		    "block id %s does not match its mount, key, version, block size, index", hex);
	}
	r->mount_id = p->mount_id;
	r->index = p->index;
	r->block_size = p->block_size;
	r->file_size = p->file_size;
	r->key = strdup(p->key);
	r->version = strdup(p->version ? p->version : "");
	if (!r->key || !r->version) {
		wrk_ref_free(r);
		return cis_fail(em, -ENOMEM, "out of memory");
	}
	return 0;
}

int wrk_ref_copy(wrk_ref *dst, const wrk_ref *src)
{
	*dst = *src;
	dst->key = strdup(src->key);
	dst->version = strdup(src->version);
	if (!dst->key || !dst->version) {
		wrk_ref_free(dst);
		return -ENOMEM;
	}
	return 0;
}

void wrk_ref_free(wrk_ref *r)
{
	free(r->key);
	free(r->version);
	r->key = r->version = NULL;
}

void wrk_ref_to_proto(const wrk_ref *r, Cis__BlockRef *p, uint8_t idbuf[16])
{
	cis__block_ref__init(p);
	cis_block_id_to_bytes(r->id, idbuf);
	p->id.data = idbuf;
	p->id.len = 16;
	p->mount_id = r->mount_id;
	p->key = r->key;
	p->version = r->version;
	p->index = r->index;
	p->block_size = r->block_size;
	p->file_size = r->file_size;
}
