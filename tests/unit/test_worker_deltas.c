/* The block changes a worker holds for its next heartbeat: each block's
 * last change only, bounded, and a heartbeat at the bound still fits the
 * message limit (a bigger one could never be sent, and the worker would
 * never learn that a restarted master wants it to register). */
#include <criterion/criterion.h>

#include "../../worker/deltas.c"
#include "cistern/frame.h"
#include "cistern/proto/master.pb-c.h"

static cis_block_id bid(uint64_t i)
{
	return (cis_block_id){.hi = i * 0x9E3779B97F4A7C15ull, .lo = i};
}

static bool last_change(const wrk_deltas *d, uint64_t i, bool *added)
{
	for (size_t k = 0; k < d->n; k++)
		if (cis_block_id_eq(d->v[k].id, bid(i))) {
			*added = d->v[k].added;
			return true;
		}
	return false;
}

Test(worker_deltas, each_block_keeps_its_last_change)
{
	wrk_deltas d = {0}, out;
	bool added;

	wrk_deltas_note(&d, bid(1), true);
	wrk_deltas_note(&d, bid(2), true);
	wrk_deltas_note(&d, bid(1), false); /* evicted ... */
	wrk_deltas_note(&d, bid(1), true);  /* ... and cached again */
	wrk_deltas_note(&d, bid(3), true);
	wrk_deltas_note(&d, bid(3), false);
	wrk_deltas_take(&d, &out);
	cr_assert_eq(d.n, 0);
	wrk_deltas_collapse(&out);
	cr_assert_eq(out.n, 3);
	cr_assert(last_change(&out, 1, &added) && added, "cached again: added");
	cr_assert(last_change(&out, 2, &added) && added);
	cr_assert(last_change(&out, 3, &added) && !added, "evicted last: removed");
	wrk_deltas_free(&out);
}

Test(worker_deltas, bounded_then_overflowed)
{
	wrk_deltas d = {0};

	for (uint64_t i = 0; i < WRK_MAX_DELTAS; i++)
		wrk_deltas_note(&d, bid(i), true);
	cr_assert_eq(d.n, WRK_MAX_DELTAS);
	cr_assert_not(d.overflow);
	wrk_deltas_note(&d, bid(WRK_MAX_DELTAS), true);
	cr_assert(d.overflow, "past the bound: a full report instead");
	cr_assert_eq(d.n, 0, "the changes are dropped");
	wrk_deltas_note(&d, bid(1), true);
	cr_assert_eq(d.n, 0, "nothing more is kept until the report");
	wrk_deltas_free(&d);
	cr_assert_not(d.overflow);
}

/* WRK_MAX_DELTAS changes (all added: the bigger list) in one heartbeat
 * with the most cache dirs pack under the message limit. */
Test(worker_deltas, a_full_heartbeat_fits_a_message)
{
	static uint8_t raw[WRK_MAX_DELTAS][16];
	static ProtobufCBinaryData add[WRK_MAX_DELTAS];
	Cis__HeartbeatRequest req = CIS__HEARTBEAT_REQUEST__INIT;
	uint8_t *msg;
	size_t len;

	for (size_t i = 0; i < WRK_MAX_DELTAS; i++) {
		memset(raw[i], 0xff, 16);
		add[i] = (ProtobufCBinaryData){.len = 16, .data = raw[i]};
	}
	req.worker_id = UINT64_MAX;
	req.capacity = req.used = UINT64_MAX;
	req.n_added = WRK_MAX_DELTAS;
	req.added = add;
	cr_assert_eq(cis_msg_pack(&req.base, &msg, &len), 0);
	cr_assert_lt(len, CIS_FRAME_MAX_MSG / 2, "%zu bytes: too close to the limit", len);
	free(msg);
}
