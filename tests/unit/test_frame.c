/* Frame header encode/decode and bounded protobuf unpacking. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cistern/frame.h"
#include "cistern/proto/common.pb-c.h"

static void encode_sample(uint8_t out[CIS_FRAME_HDR_LEN])
{
	cis_frame_hdr h = {.flags = CIS_FRAME_REPLY | CIS_FRAME_MORE,
	                   .type = 0x1234,
	                   .msg_len = 77,
	                   .data_len = 1u << 20,
	                   .req_id = 0x0102030405060708ull};

	cis_frame_hdr_encode(&h, out);
}

Test(frame, round_trip_and_byte_layout)
{
	uint8_t b[CIS_FRAME_HDR_LEN];
	cis_frame_hdr d;
	static const uint8_t want[CIS_FRAME_HDR_LEN] = {
	    0xC1, 0x57, 1, 5, 0x12, 0x34, 0, 0, 0, 0, 0, 77, 0, 0x10, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};

	encode_sample(b);
	cr_assert_arr_eq(b, want, sizeof(want));
	cr_assert_eq(cis_frame_hdr_decode(b, sizeof(b), &d), 0);
	cr_assert_eq(d.flags, CIS_FRAME_REPLY | CIS_FRAME_MORE);
	cr_assert_eq(d.type, 0x1234);
	cr_assert_eq(d.msg_len, 77);
	cr_assert_eq(d.data_len, 1u << 20);
	cr_assert_eq(d.req_id, 0x0102030405060708ull);
}

Test(frame, limits_are_inclusive)
{
	cis_frame_hdr h = {.type = 1, .msg_len = CIS_FRAME_MAX_MSG, .data_len = CIS_FRAME_MAX_DATA};
	uint8_t b[CIS_FRAME_HDR_LEN];
	cis_frame_hdr d;

	cis_frame_hdr_encode(&h, b);
	cr_assert_eq(cis_frame_hdr_decode(b, sizeof(b), &d), 0);
	h.msg_len++;
	cis_frame_hdr_encode(&h, b);
	cr_assert_eq(cis_frame_hdr_decode(b, sizeof(b), &d), -CIS_E_TOOBIG);
	h.msg_len--;
	h.data_len++;
	cis_frame_hdr_encode(&h, b);
	cr_assert_eq(cis_frame_hdr_decode(b, sizeof(b), &d), -CIS_E_TOOBIG);
	h.data_len = UINT32_MAX;
	cis_frame_hdr_encode(&h, b);
	cr_assert_eq(cis_frame_hdr_decode(b, sizeof(b), &d), -CIS_E_TOOBIG);
}

Test(frame, truncated_header_is_eagain)
{
	uint8_t b[CIS_FRAME_HDR_LEN];
	cis_frame_hdr d;

	encode_sample(b);
	for (size_t n = 0; n < CIS_FRAME_HDR_LEN; n++)
		cr_assert_eq(cis_frame_hdr_decode(b, n, &d), -EAGAIN, "len %zu", n);
}

/* Corrupt one byte and expect -CIS_E_PROTO. */
static void expect_bad(size_t off, uint8_t val)
{
	uint8_t b[CIS_FRAME_HDR_LEN];
	cis_frame_hdr d;

	encode_sample(b);
	b[off] = val;
	cr_assert_eq(cis_frame_hdr_decode(b, sizeof(b), &d), -CIS_E_PROTO, "byte %zu = %u", off,
	             val);
}

Test(frame, bad_headers_rejected)
{
	expect_bad(0, 0x00); /* magic */
	expect_bad(1, 0x58);
	expect_bad(2, 0); /* version */
	expect_bad(2, 2);
	expect_bad(3, 1 << 4); /* unknown flag */
	expect_bad(3, 0x80);
	expect_bad(6, 1); /* reserved */
	expect_bad(7, 1);
}

Test(frame, type_zero_rejected)
{
	cis_frame_hdr h = {.type = 0};
	uint8_t b[CIS_FRAME_HDR_LEN];
	cis_frame_hdr d;

	cis_frame_hdr_encode(&h, b);
	cr_assert_eq(cis_frame_hdr_decode(b, sizeof(b), &d), -CIS_E_PROTO);
}

Test(frame, pack_unpack_round_trip)
{
	Cis__ErrorReply e = CIS__ERROR_REPLY__INIT;
	ProtobufCMessage *m;
	uint8_t *buf;
	size_t len;

	e.code = -10001;
	e.message = "bad thing";
	cr_assert_eq(cis_msg_pack(&e.base, &buf, &len), 0);
	cr_assert_gt(len, 0);
	cr_assert_eq(cis_msg_unpack(&cis__error_reply__descriptor, buf, len, &m), 0);
	cr_assert_eq(((Cis__ErrorReply *)m)->code, -10001);
	cr_assert_str_eq(((Cis__ErrorReply *)m)->message, "bad thing");
	protobuf_c_message_free_unpacked(m, NULL);
	free(buf);
}

Test(frame, empty_message_packs_and_unpacks)
{
	Cis__Ping p = CIS__PING__INIT;
	ProtobufCMessage *m;
	uint8_t *buf;
	size_t len;

	cr_assert_eq(cis_msg_pack(&p.base, &buf, &len), 0);
	cr_assert_eq(len, 0);
	cr_assert_eq(cis_msg_unpack(&cis__ping__descriptor, buf, len, &m), 0);
	protobuf_c_message_free_unpacked(m, NULL);
	free(buf);
}

Test(frame, unpack_garbage_and_truncated)
{
	static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	                                  0xff, 0xff, 0xff, 0xff, 0xff};
	Cis__MountInfo mi = CIS__MOUNT_INFO__INIT;
	ProtobufCMessage *m = (void *)1;
	uint8_t *buf;
	size_t len;

	cr_assert_eq(cis_msg_unpack(&cis__hello__descriptor, garbage, sizeof(garbage), &m),
	             -CIS_E_PROTO);
	cr_assert_null(m);
	mi.path = "/imagenet";
	mi.uri = "s3://bucket/prefix";
	cr_assert_eq(cis_msg_pack(&mi.base, &buf, &len), 0);
	for (size_t n = 1; n < len; n++) {
		int r = cis_msg_unpack(&cis__mount_info__descriptor, buf, n, &m);

		/* A prefix may end on a field boundary and parse; none may crash
		 * or leave *out set on failure. */
		if (r == 0)
			protobuf_c_message_free_unpacked(m, NULL);
		else
			cr_assert_null(m);
	}
	cr_assert_eq(cis_msg_unpack(&cis__mount_info__descriptor, buf, len - 1, &m), -CIS_E_PROTO);
	free(buf);
}

Test(frame, unpack_huge_length_prefix)
{
	/* field 2 (client_name), wire type 2, length 0x7fffffff, 3 bytes present */
	static const uint8_t huge[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0x07, 'a', 'b', 'c'};
	/* field 3 (auth) length 2^62 as a 9-byte varint */
	static const uint8_t huge64[] = {0x1a, 0x80, 0x80, 0x80, 0x80, 0x80,
	                                 0x80, 0x80, 0x80, 0x40, 'x'};
	ProtobufCMessage *m;

	cr_assert_eq(cis_msg_unpack(&cis__hello__descriptor, huge, sizeof(huge), &m), -CIS_E_PROTO);
	cr_assert_eq(cis_msg_unpack(&cis__hello__descriptor, huge64, sizeof(huge64), &m),
	             -CIS_E_PROTO);
}

Test(frame, unpack_refuses_over_budget)
{
	/* A map of many tiny entries: each 2-byte empty entry costs a whole
	 * struct plus pointers, far beyond 16 bytes per input byte. */
	size_t n = 200000, len = n * 2, i;
	uint8_t *buf = malloc(len);
	ProtobufCMessage *m;

	cr_assert_not_null(buf);
	for (i = 0; i < n; i++) {
		buf[2 * i] = 0x22; /* field 4 (options), length-delimited */
		buf[2 * i + 1] = 0;
	}
	cr_assert_eq(cis_msg_unpack(&cis__mount_info__descriptor, buf, len, &m), -CIS_E_PROTO);
	/* The same entries, few of them, are fine. */
	cr_assert_eq(cis_msg_unpack(&cis__mount_info__descriptor, buf, 20, &m), 0);
	cr_assert_eq(((Cis__MountInfo *)m)->n_options, 10);
	protobuf_c_message_free_unpacked(m, NULL);
	free(buf);
}

Test(frame, unpack_over_max_msg_rejected)
{
	ProtobufCMessage *m;
	static const uint8_t one = 0;

	cr_assert_eq(
	    cis_msg_unpack(&cis__ping__descriptor, &one, (size_t)CIS_FRAME_MAX_MSG + 1, &m),
	    -CIS_E_PROTO);
}
