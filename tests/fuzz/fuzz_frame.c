/* libFuzzer target: the frame header decoder and cis_msg_unpack of every
 * message in common.proto. The first input byte picks what is decoded:
 * 0 the header (the rest of the input), 1.. a message descriptor. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "cistern/frame.h"
#include "cistern/proto/common.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ProtobufCMessageDescriptor *const descs[] = {
    &cis__hello__descriptor,       &cis__hello_reply__descriptor, &cis__ping__descriptor,
    &cis__error_reply__descriptor, &cis__block_ref__descriptor,   &cis__mount_info__descriptor,
    &cis__worker_info__descriptor,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t nd = sizeof(descs) / sizeof(descs[0]);
	ProtobufCMessage *m;
	cis_frame_hdr h;
	uint8_t *re;
	size_t relen;

	if (size < 1)
		return 0;
	if (data[0] % (nd + 1) == 0) {
		uint8_t enc[CIS_FRAME_HDR_LEN];

		if (cis_frame_hdr_decode(data + 1, size - 1, &h) == 0) {
			/* What decodes must encode back to the same bytes. */
			cis_frame_hdr_encode(&h, enc);
			for (size_t i = 0; i < CIS_FRAME_HDR_LEN; i++)
				if (enc[i] != data[1 + i])
					abort();
		}
		return 0;
	}
	if (cis_msg_unpack(descs[data[0] % (nd + 1) - 1], data + 1, size - 1, &m) == 0) {
		/* A decoded message must pack again. */
		if (cis_msg_pack(m, &re, &relen) == 0)
			free(re);
		protobuf_c_message_free_unpacked(m, NULL);
	}
	return 0;
}
