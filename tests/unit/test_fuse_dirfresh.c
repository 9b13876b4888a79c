/* When the client lists a directory instead of asking the master for its
 * names one by one (fuse/dirfresh.c): after DF_MISSES names, once per gap
 * (a clock seen running backwards included), never again for a directory
 * too big for the caches, directories of one set kept apart, and the
 * waiting thread woken by a queued directory and ended when stopped. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <unistd.h>

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

static uint64_t next_queued(void)
{
	uint64_t dino = 0;
	cr_assert_eq(fcl_df_next(df, &dino), 0);
	return dino;
}

/* n directories (from 1) that share dino's set. */
static void same_set(uint64_t dino, uint64_t *out, size_t n)
{
	size_t k = 0;
	for (uint64_t d = 1; k < n; d++)
		if (d != dino && set_of(d) == set_of(dino))
			out[k++] = d;
}

Test(fuse_dirfresh, queues_after_enough_misses_then_waits_a_gap)
{
	uint64_t t = 100 * SEC;
	cr_assert_eq(misses_to_queue(DIR1, t, 1000), DF_MISSES);
	cr_assert_eq(next_queued(), DIR1);
	/* The listing renewed its names: more misses within the gap are of
	 * other names, which listing again would not help. */
	cr_assert_eq(misses_to_queue(DIR1, t + GAP - 1, 1000), 0);
	/* Those misses counted: the first one past the gap queues it. */
	cr_assert(fcl_df_missed(df, DIR1, t + GAP));
	cr_assert_eq(next_queued(), DIR1);
	cr_assert_eq(misses_to_queue(DIR1, t + 2 * GAP, 1000), DF_MISSES);
	cr_assert_eq(next_queued(), DIR1);
}

Test(fuse_dirfresh, a_clock_behind_the_last_queue_is_within_the_gap)
{
	uint64_t t = 100 * SEC;
	cr_assert_eq(misses_to_queue(DIR1, t, 1000), DF_MISSES);
	cr_assert_eq(next_queued(), DIR1);
	/* Another thread read the clock before the one that queued it. */
	cr_assert_eq(misses_to_queue(DIR1, t - 1, 1000), 0);
}

Test(fuse_dirfresh, slow_misses_count_too)
{
	uint64_t t = 100 * SEC;
	for (unsigned i = 1; i < DF_MISSES; i++)
		cr_assert_not(fcl_df_missed(df, DIR1, t + i * 60 * SEC));
	cr_assert(fcl_df_missed(df, DIR1, t + DF_MISSES * 60 * SEC));
}

Test(fuse_dirfresh, directories_count_apart)
{
	uint64_t t = 100 * SEC;
	for (unsigned i = 0; i < DF_MISSES - 1; i++) {
		cr_assert_not(fcl_df_missed(df, DIR1, t));
		cr_assert_not(fcl_df_missed(df, DIR2, t));
	}
	cr_assert(fcl_df_missed(df, DIR2, t));
	cr_assert(fcl_df_missed(df, DIR1, t));
	cr_assert_eq(next_queued(), DIR2);
	cr_assert_eq(next_queued(), DIR1);
}

Test(fuse_dirfresh, directories_of_one_set_count_apart)
{
	uint64_t d[DF_WAYS];
	same_set(DIR1, d, DF_WAYS);
	uint64_t t = 100 * SEC;
	/* A full set and one more, missed in turn: the one missed least
	 * recently gives way, and the others keep their counts. */
	for (unsigned i = 0; i < DF_MISSES - 1; i++)
		for (size_t j = 0; j < DF_WAYS - 1; j++)
			cr_assert_not(fcl_df_missed(df, d[j], t + i));
	cr_assert_eq(misses_to_queue(DIR1, t + DF_MISSES, 1000), DF_MISSES);
	cr_assert_eq(misses_to_queue(d[DF_WAYS - 1], t + DF_MISSES, 1000), DF_MISSES);
	for (size_t j = 1; j < DF_WAYS - 1; j++)
		cr_assert(fcl_df_missed(df, d[j], t + DF_MISSES + 1), "d[%zu] lost its count", j);
	/* d[0], missed least recently, was forgotten: it counts again. */
	cr_assert_not(fcl_df_missed(df, d[0], t + DF_MISSES + 1));
}

Test(fuse_dirfresh, too_big_is_never_queued_again)
{
	uint64_t t = 100 * SEC;
	cr_assert_eq(misses_to_queue(DIR1, t, 1000), DF_MISSES);
	cr_assert_eq(next_queued(), DIR1);
	fcl_df_too_big(df, DIR1);
	cr_assert_eq(misses_to_queue(DIR1, t + 10 * GAP, 1000), 0);
	/* Kept over the directories of its set that come later, more than
	 * the rest of the set holds. */
	uint64_t d[DF_WAYS];
	same_set(DIR1, d, DF_WAYS);
	for (unsigned round = 0; round < 3; round++)
		for (size_t j = 0; j < DF_WAYS; j++)
			for (unsigned i = 0; i < DF_MISSES / 2; i++)
				(void)fcl_df_missed(df, d[j], t + 20 * GAP + round);
	cr_assert_eq(misses_to_queue(DIR1, t + 30 * GAP, 1000), 0);
}

Test(fuse_dirfresh, too_big_is_kept_when_pushed_out_while_listed)
{
	uint64_t t = 100 * SEC;
	cr_assert_eq(misses_to_queue(DIR1, t, 1000), DF_MISSES);
	cr_assert_eq(next_queued(), DIR1);
	/* While it is listed, others of its set push it out. */
	uint64_t d[DF_WAYS];
	same_set(DIR1, d, DF_WAYS);
	for (size_t j = 0; j < DF_WAYS; j++)
		cr_assert_not(fcl_df_missed(df, d[j], t + 1));
	fcl_df_too_big(df, DIR1);
	cr_assert_eq(misses_to_queue(DIR1, t + 10 * GAP, 1000), 0);
}

Test(fuse_dirfresh, a_full_queue_drops_nothing_queued)
{
	uint64_t t = 100 * SEC;
	for (uint64_t d = 1; d <= DF_QUEUE; d++)
		cr_assert_eq(misses_to_queue(d * 1000, t, 1000), DF_MISSES);
	cr_assert_eq(misses_to_queue(77777, t, 1000), 0);
	for (uint64_t d = 1; d <= DF_QUEUE; d++)
		cr_assert_eq(next_queued(), d * 1000);
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

struct waiter {
	int rc;
	uint64_t dino;
};

static void *wait_next(void *arg)
{
	struct waiter *w = arg;
	w->rc = fcl_df_next(df, &w->dino);
	return NULL;
}

Test(fuse_dirfresh, a_waiting_thread_is_woken_by_a_queued_directory, .timeout = 10)
{
	pthread_t t;
	struct waiter w = {.rc = 1};
	cr_assert_eq(pthread_create(&t, NULL, wait_next, &w), 0);
	usleep(100000); /* let it wait */
	cr_assert_eq(misses_to_queue(DIR1, 100 * SEC, 1000), DF_MISSES);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(w.rc, 0);
	cr_assert_eq(w.dino, DIR1);
}

Test(fuse_dirfresh, stop_ends_a_waiting_thread_and_queues_nothing, .timeout = 10)
{
	pthread_t t;
	struct waiter w = {.rc = 1};
	cr_assert_eq(pthread_create(&t, NULL, wait_next, &w), 0);
	fcl_df_stop(df);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(w.rc, -ECANCELED);
	cr_assert_eq(misses_to_queue(DIR1, 100 * SEC, 1000), 0);
}
