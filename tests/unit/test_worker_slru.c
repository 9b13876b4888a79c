/* The worker's segmented LRU (worker/slru.c): victim order, promotion,
 * the protected segment's cap, and scan resistance. */
#include <criterion/criterion.h>

#include "../../worker/slru.c"

#define N 32

static wrk_slru s;
static wrk_lru_node nodes[N];

static int idx(const wrk_lru_node *n)
{
	return n ? (int)(n - nodes) : -1;
}

/* The first k victims, in order. */
static void victims(int *out, int k)
{
	wrk_lru_node *n = NULL;

	for (int i = 0; i < k; i++) {
		n = wrk_slru_next_victim(&s, n);
		out[i] = idx(n);
	}
}

Test(worker_slru, new_blocks_leave_in_insertion_order)
{
	int v[4];

	wrk_slru_init(&s, 100);
	for (int i = 0; i < 3; i++)
		wrk_slru_insert(&s, &nodes[i], 10);
	victims(v, 4);
	cr_assert_eq(v[0], 0);
	cr_assert_eq(v[1], 1);
	cr_assert_eq(v[2], 2);
	cr_assert_eq(v[3], -1, "end of candidates");
	cr_assert_eq(s.prob_bytes, 30);
}

Test(worker_slru, touched_block_goes_after_probation)
{
	int v[4];

	wrk_slru_init(&s, 100);
	for (int i = 0; i < 3; i++)
		wrk_slru_insert(&s, &nodes[i], 10);
	wrk_slru_touch(&s, &nodes[0]);
	cr_assert_eq(nodes[0].seg, WRK_SEG_PROTECTED);
	victims(v, 4);
	cr_assert_eq(v[0], 1);
	cr_assert_eq(v[1], 2);
	cr_assert_eq(v[2], 0, "protected blocks are the last candidates");
	cr_assert_eq(v[3], -1);
	cr_assert_eq(s.prot_bytes, 10);
	cr_assert_eq(s.prob_bytes, 20);
}

Test(worker_slru, protected_overflow_demotes_least_recent)
{
	wrk_slru_init(&s, 20);
	for (int i = 0; i < 3; i++) {
		wrk_slru_insert(&s, &nodes[i], 10);
		wrk_slru_touch(&s, &nodes[i]);
	}
	cr_assert_eq(s.prot_bytes, 20, "protected stays within its cap");
	cr_assert_eq(nodes[0].seg, WRK_SEG_PROBATION, "oldest protected went back");
	cr_assert_eq(nodes[2].seg, WRK_SEG_PROTECTED);
	cr_assert_eq(idx(wrk_slru_next_victim(&s, NULL)), 0);
}

Test(worker_slru, remove_and_removed_twice)
{
	wrk_slru_init(&s, 100);
	wrk_slru_insert(&s, &nodes[0], 7);
	wrk_slru_insert(&s, &nodes[1], 5);
	wrk_slru_remove(&s, &nodes[0]);
	wrk_slru_remove(&s, &nodes[0]); /* no-op, no corruption */
	cr_assert_eq(s.prob_bytes, 5);
	cr_assert_eq(idx(wrk_slru_next_victim(&s, NULL)), 1);
	cr_assert_null(wrk_slru_next_victim(&s, &nodes[1]));
}

Test(worker_slru, a_scan_does_not_flush_the_hot_set)
{
	/* Capacity for 10 blocks; a hot set of 4 read twice; then a scan of
	 * 20 blocks read once each, evicting the first candidate whenever
	 * the cache is full. The hot set must survive. */
	int cached = 0;

	wrk_slru_init(&s, 8);
	for (int i = 0; i < 4; i++) {
		wrk_slru_insert(&s, &nodes[i], 1);
		cached++;
	}
	for (int i = 0; i < 4; i++)
		wrk_slru_touch(&s, &nodes[i]);
	for (int i = 4; i < 24; i++) {
		if (cached == 10) {
			wrk_lru_node *v = wrk_slru_next_victim(&s, NULL);

			cr_assert(idx(v) >= 4, "hot block %d evicted by the scan", idx(v));
			wrk_slru_remove(&s, v);
			cached--;
		}
		wrk_slru_insert(&s, &nodes[i], 1);
		cached++;
	}
	for (int i = 0; i < 4; i++)
		cr_assert_eq(nodes[i].seg, WRK_SEG_PROTECTED, "hot block %d lost", i);
}

Test(worker_slru, insert_old_goes_to_the_cold_end)
{
	wrk_slru_init(&s, 100);
	wrk_slru_insert(&s, &nodes[0], 1);
	wrk_slru_insert_old(&s, &nodes[1], 1);
	cr_assert_eq(idx(wrk_slru_next_victim(&s, NULL)), 1);
}
