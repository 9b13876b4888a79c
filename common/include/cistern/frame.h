/* The wire frame: a fixed 24-byte header, then msg_len bytes of a
 * protobuf-c message, then data_len raw bytes (block data after a read
 * reply). All integers big-endian.
 *
 *   0  u16 magic 0xC157     2  u8 version (1)     3  u8 flags
 *   4  u16 type             6  u16 reserved (0)
 *   8  u32 msg_len         12  u32 data_len
 *  16  u64 request id
 *
 * A reply carries the request's id and type with CIS_FRAME_REPLY set. A
 * reply may be split over several frames (streamed block data): every frame
 * but the last has CIS_FRAME_MORE. An error reply has CIS_FRAME_ERROR and
 * an ErrorReply message (common.proto) instead of the type's reply. */
#ifndef CISTERN_FRAME_H
#define CISTERN_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "cistern/error.h"

#define CIS_FRAME_MAGIC    0xC157
#define CIS_FRAME_VERSION  1
#define CIS_FRAME_HDR_LEN  24
#define CIS_FRAME_MAX_MSG  (4u << 20)  /* protobuf part */
#define CIS_FRAME_MAX_DATA (16u << 20) /* raw part of one frame */

enum cis_frame_flag {
	CIS_FRAME_REPLY = 1 << 0,
	CIS_FRAME_ERROR = 1 << 1,
	CIS_FRAME_MORE = 1 << 2,
	/* Set by the sender on a frame that carries one passed file descriptor
	 * (SCM_RIGHTS, Unix sockets only; cis_rpc_reply_fd). The receiver takes
	 * the oldest descriptor it has received and not yet matched: the
	 * kernel delivers it no later than the frame's first byte. */
	CIS_FRAME_FD = 1 << 3,
};
#define CIS_FRAME_FLAGS_KNOWN (CIS_FRAME_REPLY | CIS_FRAME_ERROR | CIS_FRAME_MORE | CIS_FRAME_FD)

typedef struct cis_frame_hdr {
	uint8_t flags;
	uint16_t type;
	uint32_t msg_len;
	uint32_t data_len;
	uint64_t req_id;
} cis_frame_hdr;

void cis_frame_hdr_encode(const cis_frame_hdr *h, uint8_t out[CIS_FRAME_HDR_LEN]);

/* Decode and validate a header from in (len bytes available).
 * 0; -EAGAIN when len < CIS_FRAME_HDR_LEN; -CIS_E_PROTO for a bad magic,
 * version, reserved field, unknown flag or type 0; -CIS_E_TOOBIG when
 * msg_len or data_len is over the limits. */
int cis_frame_hdr_decode(const uint8_t *in, size_t len, cis_frame_hdr *h);

/* Unpack a protobuf message of the given descriptor with an allocator that
 * refuses to hand out more than a bound proportional to len, so hostile
 * input cannot make it allocate without limit. *out is the caller's
 * (protobuf_c_message_free_unpacked(*out, NULL)). 0 or -CIS_E_PROTO. */
int cis_msg_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                   ProtobufCMessage **out);

/* Pack msg into a malloc'd buffer (*out, *len). 0, -ENOMEM or -CIS_E_TOOBIG. */
int cis_msg_pack(const ProtobufCMessage *msg, uint8_t **out, size_t *len);

#endif
