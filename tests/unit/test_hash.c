#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "cistern/hash.h"

Test(block_id, depends_on_every_field)
{
	const uint64_t bs = 4 << 20;
	cis_block_id base = cis_block_id_make(1, "a/b", "v1", bs, 0);

	cr_assert(cis_block_id_eq(base, cis_block_id_make(1, "a/b", "v1", bs, 0)));
	cr_assert_not(cis_block_id_eq(base, cis_block_id_make(2, "a/b", "v1", bs, 0)));
	cr_assert_not(cis_block_id_eq(base, cis_block_id_make(1, "a/c", "v1", bs, 0)));
	cr_assert_not(cis_block_id_eq(base, cis_block_id_make(1, "a/b", "v2", bs, 0)));
	cr_assert_not(cis_block_id_eq(base, cis_block_id_make(1, "a/b", "v1", bs, 1)));
	/* Block 1 of 8 MiB blocks is other bytes than block 1 of 4 MiB. */
	cr_assert_not(cis_block_id_eq(cis_block_id_make(1, "a/b", "v1", bs, 1),
	                              cis_block_id_make(1, "a/b", "v1", 2 * bs, 1)));
	/* Field boundaries matter: ("a/b", "v1") is not ("a/bv", "1"). */
	cr_assert_not(cis_block_id_eq(base, cis_block_id_make(1, "a/bv", "1", bs, 0)));
}

Test(block_id, hex_round_trip)
{
	cis_block_id id = cis_block_id_make(9, "x", "y", 1 << 20, 3), back;
	char hex[CIS_BLOCK_ID_HEX];

	cis_block_id_fmt(id, hex);
	cr_assert_eq(strlen(hex), 32);
	cr_assert_eq(cis_block_id_parse(hex, &back), 0);
	cr_assert(cis_block_id_eq(id, back));
}

Test(block_id, parse_rejects_bad_text)
{
	cis_block_id id;

	cr_assert_eq(cis_block_id_parse("", &id), -EINVAL);
	cr_assert_eq(cis_block_id_parse("0123456789abcdef0123456789abcde", &id), -EINVAL);
	cr_assert_eq(cis_block_id_parse("0123456789abcdef0123456789abcdef0", &id), -EINVAL);
	cr_assert_eq(cis_block_id_parse("0123456789abcdef0123456789abcdeg", &id), -EINVAL);
	cr_assert_eq(cis_block_id_parse("0123456789ABCDEF0123456789abcdef", &id), 0);
}

Test(checksum, streaming_equals_one_shot)
{
	char data[10000];
	cis_checksum *c = cis_checksum_new();
	uint64_t whole;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (char)(i * 7);
	cr_assert_not_null(c);
	cis_checksum_update(c, data, sizeof(data));
	whole = cis_checksum_digest(c);
	cis_checksum_reset(c);
	for (size_t off = 0; off < sizeof(data); off += 333)
		cis_checksum_update(c, data + off,
		                    off + 333 > sizeof(data) ? sizeof(data) - off : 333);
	cr_assert_eq(cis_checksum_digest(c), whole);
	data[5000] ^= 1;
	cis_checksum_reset(c);
	cis_checksum_update(c, data, sizeof(data));
	cr_assert_neq(cis_checksum_digest(c), whole);
	cis_checksum_free(c);
}

/* A size near 2^64 does not wrap to a few blocks. */
Test(block_id, count_without_wrap)
{
	cr_assert_eq(cis_block_count(0, 4096), 0);
	cr_assert_eq(cis_block_count(1, 4096), 1);
	cr_assert_eq(cis_block_count(4096, 4096), 1);
	cr_assert_eq(cis_block_count(4097, 4096), 2);
	cr_assert_eq(cis_block_count(UINT64_MAX, 1 << 20), (UINT64_MAX >> 20) + 1);
	cr_assert_eq(cis_block_count(UINT64_MAX - 5, 4 << 20), ((UINT64_MAX - 5) >> 22) + 1);
}
