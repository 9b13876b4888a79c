/* Short-circuit leases (worker/local.c): a lease belongs to the user of the
 * Unix connection that took it; nobody else renews or releases it, and
 * every lease releases its block reference exactly once. */
#include <criterion/criterion.h>
#include <errno.h>

#include "../../worker/local.c"

/* The block store is not needed: count the references handed back. */
static int released;
static wrk_block *last_released;

void wrk_bs_release(wrk_bs *bs, wrk_block *b)
{
	(void)bs;
	released++;
	last_released = b;
}

/* Renewals count as uses of the block. */
static int touched;

void wrk_bs_touch_held(wrk_bs *bs, wrk_block *b)
{
	(void)bs;
	(void)b;
	touched++;
}

static wrk w;

static wrk_leases *leases(void)
{
	wrk_leases *l = NULL;

	released = touched = 0;
	cr_assert_eq(wrk_leases_new(&w, &l), 0);
	return l;
}

Test(worker_lease, owner_renews_and_releases)
{
	wrk_leases *l = leases();
	wrk_block *blk = (wrk_block *)&w; /* any non-NULL handle */
	uint64_t id, granted;

	cr_assert_eq(wrk_lease_add(l, blk, 5000, 1000, &id, &granted), 0);
	cr_assert_eq(granted, 5000);
	cr_assert_eq(wrk_leases_count(l), 1);
	cr_assert_eq(wrk_lease_renew(l, id, 7000, 1000), 7000);
	cr_assert_eq(touched, 1, "a renewal is a use of the block");
	cr_assert_eq(wrk_lease_release(l, id, 1000), 0);
	cr_assert_eq(released, 1);
	cr_assert_eq(last_released, blk);
	cr_assert_eq(wrk_leases_count(l), 0);
	cr_assert_eq(wrk_lease_release(l, id, 1000), -ENOENT, "released twice");
	cr_assert_eq(released, 1);
	wrk_leases_free(l);
}

Test(worker_lease, other_users_cannot_touch_it)
{
	wrk_leases *l = leases();
	uint64_t id, granted;

	cr_assert_eq(wrk_lease_add(l, (wrk_block *)&w, 0, 1000, &id, &granted), 0);
	cr_assert_eq(granted, WRK_DEFAULT_LEASE);
	cr_assert_eq(wrk_lease_renew(l, id, 5000, 1001), -ENOENT);
	cr_assert_eq(touched, 0);
	cr_assert_eq(wrk_lease_release(l, id, 1001), -ENOENT);
	cr_assert_eq(wrk_lease_release(l, id, 0), -ENOENT, "root is not the owner either");
	cr_assert_eq(wrk_lease_release(l, id, -1), -ENOENT, "nor a TCP connection");
	cr_assert_eq(released, 0);
	cr_assert_eq(wrk_leases_count(l), 1);
	cr_assert_eq(wrk_lease_release(l, id, 1000), 0);
	cr_assert_eq(released, 1);
	wrk_leases_free(l);
}

Test(worker_lease, tcp_connections_get_none)
{
	wrk_leases *l = leases();
	uint64_t id = 0, granted = 0;

	cr_assert_eq(wrk_lease_add(l, (wrk_block *)&w, 1000, -1, &id, &granted), -EPERM);
	cr_assert_eq(wrk_leases_count(l), 0);
	cr_assert_eq(released, 0, "a refused lease leaves the reference with the caller");
	wrk_leases_free(l);
}

Test(worker_lease, ids_distinct_and_expiry_releases)
{
	wrk_leases *l = leases();
	uint64_t a, b, granted;

	cr_assert_eq(wrk_lease_add(l, (wrk_block *)&w, 1, 7, &a, &granted), 0);
	cr_assert_eq(wrk_lease_add(l, (wrk_block *)&w, 60000, 7, &b, &granted), 0);
	cr_assert_neq(a, b);
	cis_sleep_ms(5);
	wrk_leases_expire(l);
	cr_assert_eq(released, 1, "the 1 ms lease expired, the other did not");
	cr_assert_eq(wrk_lease_renew(l, a, 1000, 7), -ENOENT);
	cr_assert_eq(wrk_lease_renew(l, b, 1000, 7), 1000);
	wrk_leases_free(l);
	cr_assert_eq(released, 2, "freeing the table releases what is left");
}

Test(worker_lease, sweep_waits_for_the_earliest_expiry)
{
	wrk_leases *l = leases();
	uint64_t a, b, c, granted;

	cr_assert_eq(wrk_lease_add(l, (wrk_block *)&w, 60000, 7, &a, &granted), 0);
	wrk_leases_expire(l);
	cr_assert_eq(released, 0);
	/* Added after the sweep with an earlier expiry: swept in time. */
	cr_assert_eq(wrk_lease_add(l, (wrk_block *)&w, 1, 7, &b, &granted), 0);
	cis_sleep_ms(5);
	wrk_leases_expire(l);
	cr_assert_eq(released, 1, "the later, shorter lease expired");
	/* A renewal that shortens a lease brings its sweep forward. */
	cr_assert_eq(wrk_lease_add(l, (wrk_block *)&w, 60000, 7, &c, &granted), 0);
	wrk_leases_expire(l);
	cr_assert_eq(wrk_lease_renew(l, c, 1, 7), 1);
	cis_sleep_ms(5);
	wrk_leases_expire(l);
	cr_assert_eq(released, 2, "the shortened lease expired");
	cr_assert_eq(wrk_leases_count(l), 1);
	cr_assert_eq(wrk_lease_renew(l, a, 1000, 7), 1000, "the long one lives");
	wrk_leases_free(l);
}
