/* The directory readahead detector (fuse/dirahead.c): files opened in
 * listing order name the next ones (on into the next directories of the
 * parent), shuffled opens name (almost) none, and the memory stays bounded
 * however many directories are listed. */
#include <criterion/criterion.h>

#include <stdlib.h>

#include "../../fuse/dirahead.c"

#define NFILES 400

static fcl_dirahead *da;

static void list_dir(uint64_t dino, uint64_t first_ino, size_t n, uint64_t size)
{
	fcl_da_file *f = calloc(n, sizeof(*f));
	cr_assert_not_null(f);
	for (size_t i = 0; i < n; i++)
		f[i] = (fcl_da_file){first_ino + i, size};
	fcl_da_listed(da, dino, f, n, NULL, 0);
	free(f);
}

static void setup(void)
{
	cr_assert_eq(fcl_da_new(&da), 0);
}

static void teardown(void)
{
	fcl_da_free(da);
}

TestSuite(dirahead, .init = setup, .fini = teardown);

Test(dirahead, in_order_names_every_later_file_once)
{
	list_dir(7, 1000, NFILES, 100);
	bool named[NFILES] = {false};
	size_t total = 0;
	for (size_t i = 0; i < NFILES; i++) {
		uint64_t next[DA_MAX_WINDOW];
		size_t k = fcl_da_opened(da, 1000 + i, 4096, next, DA_MAX_WINDOW);
		for (size_t j = 0; j < k; j++) {
			size_t idx = (size_t)(next[j] - 1000);
			cr_assert(idx > i && idx < NFILES, "named file %zu at open %zu", idx, i);
			cr_assert(!named[idx], "file %zu named twice", idx);
			named[idx] = true;
			total++;
		}
	}
	/* The first two opens only start the detector. */
	cr_assert_eq(total, NFILES - 2);
}

Test(dirahead, slightly_reordered_opens_still_count)
{
	list_dir(7, 1000, NFILES, 100);
	/* Eight readers taking files in turn: pairs swapped. */
	size_t total = 0;
	for (size_t i = 0; i + 1 < NFILES; i += 2) {
		uint64_t next[DA_MAX_WINDOW];
		total += fcl_da_opened(da, 1000 + i + 1, 4096, next, DA_MAX_WINDOW);
		total += fcl_da_opened(da, 1000 + i, 4096, next, DA_MAX_WINDOW);
	}
	cr_assert_geq(total, NFILES - 4);
}

Test(dirahead, shuffled_opens_name_few)
{
	list_dir(7, 1000, NFILES, 100);
	size_t order[NFILES];
	for (size_t i = 0; i < NFILES; i++)
		order[i] = i;
	srand(42);
	for (size_t i = NFILES - 1; i > 0; i--) {
		size_t j = (size_t)rand() % (i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	size_t total = 0;
	for (size_t i = 0; i < NFILES; i++) {
		uint64_t next[DA_MAX_WINDOW];
		total += fcl_da_opened(da, 1000 + order[i], 4096, next, DA_MAX_WINDOW);
	}
	cr_assert_lt(total, NFILES / 10, "%zu files named for a shuffled reader", total);
}

Test(dirahead, skips_empty_and_large_files_and_unknown_inodes)
{
	fcl_da_file f[] = {{1, 10}, {2, 10}, {3, 0}, {4, 1 << 20}, {5, 10}};
	fcl_da_listed(da, 9, f, 5, NULL, 0);
	uint64_t next[DA_MAX_WINDOW];
	cr_assert_eq(fcl_da_opened(da, 1, 4096, next, DA_MAX_WINDOW), 0);
	size_t k = fcl_da_opened(da, 2, 4096, next, DA_MAX_WINDOW);
	cr_assert_eq(k, 1);
	cr_assert_eq(next[0], 5);
	cr_assert_eq(fcl_da_opened(da, 12345, 4096, next, DA_MAX_WINDOW), 0);
	cr_assert_eq(fcl_da_opened(da, 0, 4096, next, DA_MAX_WINDOW), 0);
}

Test(dirahead, bounded_and_still_working_after_many_listings)
{
	/* Far more directories and files than it keeps. */
	for (uint64_t d = 1; d <= 2 * DA_DIRS; d++)
		list_dir(d, d * 1000000, 200, 100);
	cr_assert_leq(da->total, DA_MAX_TOTAL);
	/* The newest listing works; the oldest is gone. */
	uint64_t last = 2 * DA_DIRS, next[DA_MAX_WINDOW];
	fcl_da_opened(da, last * 1000000, 4096, next, DA_MAX_WINDOW);
	cr_assert_gt(fcl_da_opened(da, last * 1000000 + 1, 4096, next, DA_MAX_WINDOW), 0);
	fcl_da_opened(da, 1000000, 4096, next, DA_MAX_WINDOW);
	cr_assert_eq(fcl_da_opened(da, 1000001, 4096, next, DA_MAX_WINDOW), 0);
	/* A directory listed again starts over. */
	list_dir(5, 77000000, 50, 100);
	list_dir(5, 78000000, 50, 100);
	fcl_da_opened(da, 77000000, 4096, next, DA_MAX_WINDOW);
	cr_assert_eq(fcl_da_opened(da, 77000001, 4096, next, DA_MAX_WINDOW), 0);
	fcl_da_opened(da, 78000000, 4096, next, DA_MAX_WINDOW);
	cr_assert_gt(fcl_da_opened(da, 78000001, 4096, next, DA_MAX_WINDOW), 0);
}

/* Open the files of dirs 10, 11, 12 (ten each, inodes 100.., 110.., 120..)
 * in order; count the files named and check none twice, none already
 * opened. before_open: files of dir 11 named before its first open. */
static size_t walk_three_dirs(size_t *before_open)
{
	bool named[30] = {false};
	size_t total = 0;

	*before_open = 0;
	for (size_t i = 0; i < 30; i++) {
		uint64_t next[DA_MAX_WINDOW];
		size_t k = fcl_da_opened(da, 100 + i, 4096, next, DA_MAX_WINDOW);

		for (size_t j = 0; j < k; j++) {
			size_t idx = (size_t)(next[j] - 100);
			cr_assert(idx > i && idx < 30, "named file %zu at open %zu", idx, i);
			cr_assert(!named[idx], "file %zu named twice", idx);
			named[idx] = true;
			total++;
			if (idx >= 10 && idx < 20 && i < 10)
				(*before_open)++;
		}
	}
	return total;
}

Test(dirahead, window_runs_on_into_the_next_directories)
{
	uint64_t subdirs[] = {10, 11, 12};
	size_t early;

	fcl_da_listed(da, 1, NULL, 0, subdirs, 3);
	for (uint64_t d = 0; d < 3; d++)
		list_dir(10 + d, 100 + 10 * d, 10, 100);
	/* Only the first two opens of the whole walk start the detector. */
	cr_assert_eq(walk_three_dirs(&early), 28);
	cr_assert_eq(early, 10, "dir 11 named in full before its first open");
}

Test(dirahead, without_the_parent_listing_each_directory_starts_over)
{
	size_t early;

	for (uint64_t d = 0; d < 3; d++)
		list_dir(10 + d, 100 + 10 * d, 10, 100);
	cr_assert_eq(walk_three_dirs(&early), 24);
	cr_assert_eq(early, 0);
}
