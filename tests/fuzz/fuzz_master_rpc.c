/* libFuzzer: the master's RPC dispatcher, quick (store waits refused) and
 * plain. The first two bytes pick the message type (folded into the
 * master's range and a little beyond), the rest is the message. */
#include <stdint.h>

#include "fuzz_master.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mst_master *m;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	mst_reply r;
	if (!m)
		m = fuzz_master_open();
	if (size < 2)
		return 0;
	uint16_t type = (uint16_t)(95 + ((data[0] << 8 | data[1]) % 20));
	/* as the RPC server answers: on the I/O thread, else from the pool */
	if (mst_rpc_dispatch_quick(m, type, data + 2, size - 2, &r))
		mst_reply_clear(&r);
	mst_rpc_dispatch(m, type, data + 2, size - 2, &r);
	mst_reply_clear(&r);
	return 0;
}
