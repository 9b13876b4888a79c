/* Rendezvous placement: deterministic, balanced, minimal movement. */
#include <criterion/criterion.h>

#include "cistern/hash.h"
#include "cistern/place.h"

#define NBLOCKS  100000
#define NWORKERS 10

static cis_block_id block(uint64_t i)
{
	return cis_block_id_make(7, "dataset/file", "etag", 1 << 20, i);
}

Test(place, deterministic_and_distinct)
{
	uint64_t workers[NWORKERS];
	size_t a[3], b[3];

	for (int i = 0; i < NWORKERS; i++)
		workers[i] = 1000 + (uint64_t)i * 7919;
	for (uint64_t i = 0; i < 1000; i++) {
		cr_assert_eq(cis_place(block(i), workers, NWORKERS, a, 3), 3);
		cr_assert_eq(cis_place(block(i), workers, NWORKERS, b, 3), 3);
		cr_assert_arr_eq(a, b, sizeof(a));
		cr_assert(a[0] != a[1] && a[1] != a[2] && a[0] != a[2]);
	}
}

Test(place, order_is_by_weight)
{
	uint64_t workers[NWORKERS];
	size_t out[NWORKERS];

	for (int i = 0; i < NWORKERS; i++)
		workers[i] = (uint64_t)i + 1;
	cr_assert_eq(cis_place(block(42), workers, NWORKERS, out, NWORKERS), NWORKERS);
	for (int i = 1; i < NWORKERS; i++)
		cr_assert_geq(cis_place_weight(block(42), workers[out[i - 1]]),
		              cis_place_weight(block(42), workers[out[i]]));
}

Test(place, input_order_does_not_matter)
{
	uint64_t fwd[NWORKERS], rev[NWORKERS];
	size_t a[2], b[2];

	for (int i = 0; i < NWORKERS; i++) {
		fwd[i] = (uint64_t)i * 31 + 5;
		rev[NWORKERS - 1 - i] = fwd[i];
	}
	for (uint64_t i = 0; i < 1000; i++) {
		cis_place(block(i), fwd, NWORKERS, a, 2);
		cis_place(block(i), rev, NWORKERS, b, 2);
		cr_assert_eq(fwd[a[0]], rev[b[0]]);
		cr_assert_eq(fwd[a[1]], rev[b[1]]);
	}
}

Test(place, balanced_within_five_percent)
{
	uint64_t workers[NWORKERS];
	unsigned count[NWORKERS] = {0};
	const double mean = (double)NBLOCKS / NWORKERS;
	size_t out;

	for (int i = 0; i < NWORKERS; i++)
		workers[i] = cis_hash64(&i, sizeof(i), 99);
	for (uint64_t i = 0; i < NBLOCKS; i++) {
		cr_assert_eq(cis_place(block(i), workers, NWORKERS, &out, 1), 1);
		count[out]++;
	}
	for (int i = 0; i < NWORKERS; i++)
		cr_expect(count[i] > mean * 0.95 && count[i] < mean * 1.05,
		          "worker %d has %u blocks, mean %.0f", i, count[i], mean);
}

Test(place, minimal_movement_when_a_worker_leaves)
{
	uint64_t workers[NWORKERS], fewer[NWORKERS - 1];
	const int gone = 3;
	unsigned moved = 0, owned_by_gone = 0;
	size_t before, after;

	for (int i = 0; i < NWORKERS; i++)
		workers[i] = 500 + (uint64_t)i;
	for (int i = 0, j = 0; i < NWORKERS; i++) {
		if (i != gone)
			fewer[j++] = workers[i];
	}
	for (uint64_t i = 0; i < NBLOCKS; i++) {
		cis_place(block(i), workers, NWORKERS, &before, 1);
		cis_place(block(i), fewer, NWORKERS - 1, &after, 1);
		if (workers[before] == workers[gone])
			owned_by_gone++;
		else if (workers[before] != fewer[after])
			moved++;
	}
	/* Only the departed worker's blocks move; everyone else keeps theirs. */
	cr_assert_eq(moved, 0, "%u blocks moved between surviving workers", moved);
	cr_assert_gt(owned_by_gone, 0);
}

Test(place, fewer_workers_than_asked)
{
	uint64_t workers[2] = {1, 2};
	size_t out[5];

	cr_assert_eq(cis_place(block(1), workers, 2, out, 5), 2);
	cr_assert_eq(cis_place(block(1), workers, 0, out, 5), 0);
}

static cis_block_id place_id(uint64_t bs, uint64_t i)
{
	cis_block_id id = cis_block_id_make(7, "dataset/file", "etag", bs, i);

	return cis_place_id(id, 7, "dataset/file", "etag", bs, i);
}

static cis_block_id block_of_size(uint64_t bs, uint64_t i)
{
	return cis_block_id_make(7, "dataset/file", "etag", bs, i);
}

Test(place, blocks_of_an_extent_share_their_owners)
{
	uint64_t workers[NWORKERS];
	size_t first[3], other[3];
	unsigned runs_split = 0;

	for (int i = 0; i < NWORKERS; i++)
		workers[i] = 1000 + (uint64_t)i * 7919;
	/* 4 MiB blocks: extents of 4. Each block is placed as its extent's
	 * first block, with the same owners in the same order. */
	for (uint64_t e = 0; e < 200; e++) {
		cis_block_id head = place_id(4 << 20, 4 * e);
		cr_assert(cis_block_id_eq(head, block_of_size(4 << 20, 4 * e)),
		          "the first block is placed by its own id");
		cis_place(head, workers, NWORKERS, first, 3);
		for (uint64_t k = 1; k < 4; k++) {
			cis_block_id pid = place_id(4 << 20, 4 * e + k);
			cr_assert(cis_block_id_eq(pid, head), "block %llu of extent %llu",
			          (unsigned long long)k, (unsigned long long)e);
			cis_place(pid, workers, NWORKERS, other, 3);
			cr_assert_arr_eq(first, other, sizeof(first));
		}
		/* Neighbouring extents are placed independently. */
		cis_place(place_id(4 << 20, 4 * e + 4), workers, NWORKERS, other, 1);
		runs_split += other[0] != first[0];
	}
	cr_assert_gt(runs_split, 150, "extents spread over the workers: %u of 200 moved on",
	             runs_split);
	/* 16 MiB blocks and larger, and a 0 block size: every block is its own. */
	for (uint64_t i = 0; i < 10; i++) {
		cr_assert(cis_block_id_eq(place_id(16 << 20, i), block_of_size(16 << 20, i)));
		cr_assert(cis_block_id_eq(place_id(64 << 20, i), block_of_size(64 << 20, i)));
		cr_assert(cis_block_id_eq(place_id(0, i), block_of_size(0, i)));
	}
}
