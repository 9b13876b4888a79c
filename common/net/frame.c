/* The wire frame header and bounded protobuf-c (un)packing (frame.h). */
#include "cistern/frame.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) << 16 | get16(p + 2);
}

void cis_frame_hdr_encode(const cis_frame_hdr *h, uint8_t out[CIS_FRAME_HDR_LEN])
{
	put16(out, CIS_FRAME_MAGIC);
	out[2] = CIS_FRAME_VERSION;
	out[3] = h->flags;
	put16(out + 4, h->type);
	put16(out + 6, 0);
	put32(out + 8, h->msg_len);
	put32(out + 12, h->data_len);
	put32(out + 16, (uint32_t)(h->req_id >> 32));
	put32(out + 20, (uint32_t)h->req_id);
}

int cis_frame_hdr_decode(const uint8_t *in, size_t len, cis_frame_hdr *h)
{
	if (len < CIS_FRAME_HDR_LEN)
		return -EAGAIN;
	if (get16(in) != CIS_FRAME_MAGIC || in[2] != CIS_FRAME_VERSION)
		return -CIS_E_PROTO;
	if (in[3] & ~CIS_FRAME_FLAGS_KNOWN)
		return -CIS_E_PROTO;
	if (get16(in + 4) == 0 || get16(in + 6) != 0)
		return -CIS_E_PROTO;
	h->flags = in[3];
	h->type = get16(in + 4);
	h->msg_len = get32(in + 8);
	h->data_len = get32(in + 12);
	h->req_id = (uint64_t)get32(in + 16) << 32 | get32(in + 20);
	if (h->msg_len > CIS_FRAME_MAX_MSG || h->data_len > CIS_FRAME_MAX_DATA)
		return -CIS_E_TOOBIG;
	return 0;
}

/* An allocator that counts what protobuf-c asks for during one unpack and
 * refuses past a budget. Memory comes from malloc so that the caller can
 * free the message with the default allocator (free_unpacked(msg, NULL));
 * the count only grows, which is what bounds the work of one unpack. */
struct bounded_alloc {
	size_t used;
	size_t limit;
};

static void *bounded_alloc_fn(void *data, size_t size)
{
	struct bounded_alloc *b = data;

	if (size > b->limit - b->used)
		return NULL;
	b->used += size;
	return malloc(size ? size : 1);
}

static void bounded_free_fn(void *data, void *p)
{
	(void)data;
	free(p);
}

/* 16 bytes of structures per input byte is far above what a real message
 * needs (a repeated varint is 1 input byte, 8 output bytes); the constant
 * covers the top-level struct and small fixed parts. */
#define UNPACK_BUDGET(len) ((len)*16 + (64u << 10))

int cis_msg_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                   ProtobufCMessage **out)
{
	struct bounded_alloc b = {0, 0};
	ProtobufCAllocator a = {bounded_alloc_fn, bounded_free_fn, &b};
	ProtobufCMessage *m;

	*out = NULL;
	if (len > CIS_FRAME_MAX_MSG)
		return -CIS_E_PROTO;
	b.limit = UNPACK_BUDGET(len);
	m = protobuf_c_message_unpack(desc, &a, len, buf);
	if (!m)
		return -CIS_E_PROTO;
	*out = m;
	return 0;
}

int cis_msg_pack(const ProtobufCMessage *msg, uint8_t **out, size_t *len)
{
	size_t n = protobuf_c_message_get_packed_size(msg);
	uint8_t *p;

	*out = NULL;
	*len = 0;
	if (n > CIS_FRAME_MAX_MSG)
		return -CIS_E_TOOBIG;
	p = malloc(n ? n : 1);
	if (!p)
		return -ENOMEM;
	if (protobuf_c_message_pack(msg, p) != n) {
		free(p);
		return -CIS_E_INTERNAL;
	}
	*out = p;
	*len = n;
	return 0;
}
