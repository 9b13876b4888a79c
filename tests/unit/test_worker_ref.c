/* Block references off the wire (worker/ref.c): a reference is accepted
 * only when its id is the hash of its fields and its sizes make sense. */
#include <criterion/criterion.h>
#include <errno.h>

#include "../../worker/ref.c"

static uint8_t idb[16];

static Cis__BlockRef good(uint64_t index, uint64_t bs, uint64_t fs)
{
	Cis__BlockRef p = CIS__BLOCK_REF__INIT;

	cis_block_id_to_bytes(cis_block_id_make(7, "a/b.bin", "12-34", bs, index), idb);
	p.id.data = idb;
	p.id.len = 16;
	p.mount_id = 7;
	p.key = "a/b.bin";
	p.version = "12-34";
	p.index = index;
	p.block_size = bs;
	p.file_size = fs;
	return p;
}

Test(worker_ref, valid_ref_and_lengths)
{
	Cis__BlockRef p = good(2, 100, 250);
	wrk_ref r;
	cis_errmsg em = {{0}};

	cr_assert_eq(wrk_ref_from_proto(&r, &p, &em), 0, "%s", em.text);
	cr_assert_eq(wrk_ref_len(&r), 50, "last block is short");
	cr_assert_str_eq(r.key, "a/b.bin");
	r.index = 1;
	cr_assert_eq(wrk_ref_len(&r), 100);
	wrk_ref_free(&r);
}

Test(worker_ref, id_roundtrip)
{
	cis_block_id a = {0x0102030405060708ull, 0x1112131415161718ull}, b;
	uint8_t raw[16];
	ProtobufCBinaryData bin = {16, raw};

	cis_block_id_to_bytes(a, raw);
	cr_assert_eq(raw[0], 1);
	cr_assert_eq(raw[15], 0x18);
	cr_assert_eq(wrk_id_from_bytes(&bin, &b), 0);
	cr_assert(cis_block_id_eq(a, b));
	bin.len = 15;
	cr_assert_eq(wrk_id_from_bytes(&bin, &b), -EINVAL);
}

Test(worker_ref, rejects_bad_refs)
{
	wrk_ref r;
	cis_errmsg em = {{0}};
	Cis__BlockRef p;

	cr_assert_eq(wrk_ref_from_proto(&r, NULL, &em), -EINVAL);

	p = good(0, 100, 250);
	p.key = "a/other.bin"; /* id no longer matches */
	cr_assert_eq(wrk_ref_from_proto(&r, &p, &em), -EINVAL);
	cr_assert(strstr(em.text, "does not match"), "%s", em.text);

	p = good(3, 100, 250); /* past the end */
	cr_assert_eq(wrk_ref_from_proto(&r, &p, &em), -EINVAL);

	p = good(0, 0, 250);
	cr_assert_eq(wrk_ref_from_proto(&r, &p, &em), -EINVAL);

	p = good(0, WRK_MAX_BLOCK_SIZE + 1, 250);
	cr_assert_eq(wrk_ref_from_proto(&r, &p, &em), -EINVAL);

	p = good(0, 100, 250);
	p.id.len = 3;
	cr_assert_eq(wrk_ref_from_proto(&r, &p, &em), -EINVAL);

	p = good(0, 100, 250);
	p.key = "";
	cr_assert_eq(wrk_ref_from_proto(&r, &p, &em), -EINVAL);

	p = good(UINT64_MAX / 2, 100, 250); /* index * block_size overflows */
	cr_assert_eq(wrk_ref_from_proto(&r, &p, &em), -EINVAL);
}

Test(worker_ref, block_size_is_part_of_the_id)
{
	Cis__BlockRef p = good(1, 100, 250);
	wrk_ref r;
	cis_errmsg em = {{0}};

	/* The id of block 1 at 100-byte blocks, sent with 200-byte blocks
	 * (bytes [200, 400) instead of [100, 200)): refused. */
	p.block_size = 200;
	cr_assert_eq(wrk_ref_from_proto(&r, &p, &em), -EINVAL);
	cr_assert(strstr(em.text, "does not match"), "%s", em.text);
}

Test(worker_ref, empty_file_has_one_empty_block)
{
	Cis__BlockRef p = good(0, 100, 0);
	wrk_ref r;

	cr_assert_eq(wrk_ref_from_proto(&r, &p, NULL), 0);
	cr_assert_eq(wrk_ref_len(&r), 0);
	wrk_ref_free(&r);
}
