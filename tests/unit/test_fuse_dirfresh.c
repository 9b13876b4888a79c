/* When the client lists a directory instead of asking the master for its
 * names one by one (fuse/dirfresh.c): after DF_MISSES misses within the
 * window, once per gap, never for a directory too big for the caches, and
 * the waiting thread ends when stopped. */
#include <criterion/criterion.h>

#include <pthread.h>

#include "../../fuse/dirfresh.c"

#define SEC  1000000000ull
#define GAP  (30 * SEC)
#define DIR1 42
#define DIR2 43

static fcl_dirfresh *df;

static void setup(void)
{
	cr_assert_eq(fcl_df_new(GAP, &df), 0);
}

static void teardown(void)
{
	fcl_df_free(df);
}

TestSuite(fuse_dirfresh, .init = setup, .fini = teardown);

/* Misses of dino at now_ns until one queues it; how many that took (0:
 * none did in limit). */
static unsigned misses_to_queue(uint64_t dino, uint64_t now_ns, unsigned limit)
{
	for (unsigned i = 1; i <= limit; i++)
		if (fcl_df_missed(df, dino, now_ns))
			return i;
	return 0;
}

Test(fuse_dirfresh, queues_after_enough_misses_then_waits_a_gap)
{
	uint64_t t = 100 * SEC, dino = 0;
	cr_assert_eq(misses_to_queue(DIR1, t, 1000), DF_MISSES);
	cr_assert_eq(fcl_df_next(df, &dino), 0);
	cr_assert_eq(dino, DIR1);
	/* The listing renewed its names: more misses within the gap are of
	 * other names, which listing again would not help. */
	cr_assert_eq(misses_to_queue(DIR1, t + SEC, 1000), 0);
	cr_assert_eq(misses_to_queue(DIR1, t + GAP, 1000), DF_MISSES);
	cr_assert_eq(fcl_df_next(df, &dino), 0);
	cr_assert_eq(dino, DIR1);
}

Test(fuse_dirfresh, misses_spread_over_windows_queue_nothing)
{
	uint64_t t = 100 * SEC;
	for (unsigned w = 0; w < 10; w++) {
		uint64_t start = t + w * (DF_WINDOW_NS + 1);
		cr_assert_eq(misses_to_queue(DIR1, start, DF_MISSES - 1), 0);
	}
}

Test(fuse_dirfresh, directories_count_apart)
{
	uint64_t t = 100 * SEC, dino = 0;
	for (unsigned i = 0; i < DF_MISSES - 1; i++) {
		cr_assert_not(fcl_df_missed(df, DIR1, t));
		cr_assert_not(fcl_df_missed(df, DIR2, t));
	}
	cr_assert(fcl_df_missed(df, DIR2, t));
	cr_assert(fcl_df_missed(df, DIR1, t));
	cr_assert_eq(fcl_df_next(df, &dino), 0);
	cr_assert_eq(dino, DIR2);
	cr_assert_eq(fcl_df_next(df, &dino), 0);
	cr_assert_eq(dino, DIR1);
}

Test(fuse_dirfresh, too_big_is_never_queued_again)
{
	uint64_t t = 100 * SEC, dino = 0;
	cr_assert_eq(misses_to_queue(DIR1, t, 1000), DF_MISSES);
	cr_assert_eq(fcl_df_next(df, &dino), 0);
	fcl_df_too_big(df, DIR1);
	cr_assert_eq(misses_to_queue(DIR1, t + 10 * GAP, 1000), 0);
}

Test(fuse_dirfresh, a_full_queue_drops_nothing_queued)
{
	uint64_t t = 100 * SEC, dino = 0;
	for (uint64_t d = 1; d <= DF_QUEUE; d++)
		cr_assert_eq(misses_to_queue(d * 1000, t, 1000), DF_MISSES);
	cr_assert_eq(misses_to_queue(77777, t, 1000), 0);
	for (uint64_t d = 1; d <= DF_QUEUE; d++) {
		cr_assert_eq(fcl_df_next(df, &dino), 0);
		cr_assert_eq(dino, d * 1000);
	}
	/* Room again: the directory that found the queue full gets in. */
	cr_assert(fcl_df_missed(df, 77777, t));
}

Test(fuse_dirfresh, no_gap_means_never)
{
	fcl_dirfresh *off = NULL;
	cr_assert_eq(fcl_df_new(0, &off), 0);
	for (unsigned i = 0; i < 1000; i++)
		cr_assert_not(fcl_df_missed(off, DIR1, 100 * SEC));
	fcl_df_free(off);
	cr_assert_not(fcl_df_missed(NULL, DIR1, 100 * SEC));
}

static void *wait_next(void *arg)
{
	uint64_t dino;
	*(int *)arg = fcl_df_next(df, &dino);
	return NULL;
}

Test(fuse_dirfresh, stop_ends_a_waiting_thread_and_queues_nothing)
{
	pthread_t t;
	int rc = 1;
	cr_assert_eq(pthread_create(&t, NULL, wait_next, &rc), 0);
	fcl_df_stop(df);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(rc, -ECANCELED);
	cr_assert_eq(misses_to_queue(DIR1, 100 * SEC, 1000), 0);
}
