#include "cistern/place.h"

#include <xxhash.h>

uint64_t cis_place_weight(cis_block_id id, uint64_t worker_id)
{
	uint64_t in[3] = {id.hi, id.lo, worker_id};

	return XXH3_64bits(in, sizeof(in));
}

cis_block_id cis_place_id(cis_block_id id, uint64_t mount_id, const char *key, const char *version,
                          uint64_t block_size, uint64_t index)
{
	uint64_t per =
	    block_size && block_size < CIS_PLACE_EXTENT ? CIS_PLACE_EXTENT / block_size : 1;

	if (index % per == 0)
		return id;
	return cis_block_id_make(mount_id, key, version, block_size, index - index % per);
}

size_t cis_place(cis_block_id id, const uint64_t *worker_ids, size_t n, size_t *out, size_t nout)
{
	/* Partial selection: keep the best nout seen so far in out[], sorted by
	 * weight (ties broken by the lower worker id, so order is total). */
	uint64_t best[64];
	size_t have = 0;

	if (nout > sizeof(best) / sizeof(best[0]))
		nout = sizeof(best) / sizeof(best[0]);
	for (size_t i = 0; i < n; i++) {
		uint64_t w = cis_place_weight(id, worker_ids[i]);
		size_t pos = have;

		while (pos > 0 && (best[pos - 1] < w || (best[pos - 1] == w &&
		                                         worker_ids[out[pos - 1]] > worker_ids[i])))
			pos--;
		if (pos >= nout)
			continue;
		if (have < nout)
			have++;
		for (size_t j = have - 1; j > pos; j--) {
			best[j] = best[j - 1];
			out[j] = out[j - 1];
		}
		best[pos] = w;
		out[pos] = i;
	}
	return have;
}
