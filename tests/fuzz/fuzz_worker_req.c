/* Fuzz the worker's request decoding: the first byte picks a request type
 * (as the frame header would), the rest is the protobuf message. Every
 * block reference inside is validated as the handlers do (worker/ref.c):
 * nothing may crash, leak or allocate without bound. */
#include <stddef.h>
#include <stdint.h>

#include "../../worker/ref.c"

static const ProtobufCMessageDescriptor *const descs[] = {
    &cis__read_block_request__descriptor, &cis__open_local_request__descriptor,
    &cis__lease_request__descriptor,      &cis__prefetch_request__descriptor,
    &cis__load_request__descriptor,       &cis__replicate_request__descriptor,
    &cis__free_request__descriptor,       &cis__pin_request__descriptor,
    &cis__read_block_reply__descriptor,   &cis__touch_request__descriptor,
};

static void check_ref(const Cis__BlockRef *p)
{
	wrk_ref r;
	cis_errmsg em;

	if (wrk_ref_from_proto(&r, p, &em) == 0) {
		/* An accepted ref has a sane length. */
		if (wrk_ref_len(&r) > r.block_size)
			__builtin_trap();
		wrk_ref_free(&r);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const ProtobufCMessageDescriptor *d;
	ProtobufCMessage *m = NULL;
	cis_block_id id;

	if (size < 1)
		return 0;
	d = descs[data[0] % (sizeof(descs) / sizeof(descs[0]))];
	if (cis_msg_unpack(d, data + 1, size - 1, &m) < 0)
		return 0;
	if (d == &cis__read_block_request__descriptor) {
		check_ref(((Cis__ReadBlockRequest *)m)->block);
	} else if (d == &cis__open_local_request__descriptor) {
		check_ref(((Cis__OpenLocalRequest *)m)->block);
	} else if (d == &cis__prefetch_request__descriptor) {
		Cis__PrefetchRequest *r = (Cis__PrefetchRequest *)m;

		for (size_t i = 0; i < r->n_blocks; i++)
			check_ref(r->blocks[i]);
	} else if (d == &cis__load_request__descriptor) {
		Cis__LoadRequest *r = (Cis__LoadRequest *)m;

		for (size_t i = 0; i < r->n_blocks; i++)
			check_ref(r->blocks[i]);
	} else if (d == &cis__replicate_request__descriptor) {
		check_ref(((Cis__ReplicateRequest *)m)->block);
	} else if (d == &cis__free_request__descriptor) {
		Cis__FreeRequest *r = (Cis__FreeRequest *)m;

		for (size_t i = 0; i < r->n_ids; i++)
			(void)wrk_id_from_bytes(&r->ids[i], &id);
	} else if (d == &cis__pin_request__descriptor) {
		Cis__PinRequest *r = (Cis__PinRequest *)m;

		for (size_t i = 0; i < r->n_ids; i++)
			(void)wrk_id_from_bytes(&r->ids[i], &id);
	} else if (d == &cis__touch_request__descriptor) {
		Cis__TouchRequest *r = (Cis__TouchRequest *)m;

		for (size_t i = 0; i < r->n_ids; i++)
			(void)wrk_id_from_bytes(&r->ids[i], &id);
	}
	protobuf_c_message_free_unpacked(m, NULL);
	return 0;
}
