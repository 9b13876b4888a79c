/* Read-ahead of cached blocks a Prefetch names: their files are read into
 * the page cache (asynchronous readahead) so that the reader coming for
 * them finds the bytes in memory instead of waiting on the disk per
 * request, as a local file's readahead would spare it.
 *
 * On threads of their own (a few, so that the page allocations for several
 * readers' blocks run side by side), not on the RPC I/O thread that took
 * the Prefetch: asking the kernel to read 64 MiB allocates its pages and
 * submits the reads, and blocks while the device's queue is full, which
 * held up every request behind it on that connection (a reader's
 * OpenLocal waited on the read-ahead of blocks it would need later).
 * Read-ahead is a hint: a batch that finds the queue full is dropped, and
 * its blocks are read when asked for. */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cistern/log.h"

#define RA_QUEUE   32 /* batches waiting at most */
#define RA_THREADS 4  /* read-ahead threads */

typedef struct ra_batch {
	size_t n;
	cis_block_id ids[WRK_READ_AHEAD_BLOCKS];
} ra_batch;

struct wrk_ra {
	wrk *w;
	pthread_t th[RA_THREADS];
	int nth;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	ra_batch queue[RA_QUEUE];
	size_t head, count;
	bool stop;
};

/* WILLNEED reads at most the device's readahead window per call (max of
 * read_ahead_kb and the largest I/O: 128 KiB and 1.25 MiB on many disks),
 * so the file is asked for in pieces no larger. *budget: the bytes this
 * batch may still read ahead, lowered by this block's. */
static void read_ahead_block(wrk *w, cis_block_id id, uint64_t *budget)
{
	wrk_blk_info info;

	if (wrk_bs_acquire(w->bs, id, false, &info) < 0)
		return; /* evicted since */
	if (*budget >= info.len) {
		int fd = open(info.path, O_RDONLY | O_CLOEXEC);

		if (fd >= 0) {
			for (uint64_t off = 0; off < info.len; off += WRK_READ_AHEAD_PIECE)
				(void)posix_fadvise(fd, (off_t)off, WRK_READ_AHEAD_PIECE,
				                    POSIX_FADV_WILLNEED);
			close(fd);
			*budget -= info.len;
			cis_counter_add(w->m.read_ahead, info.len);
		}
	}
	wrk_bs_release(w->bs, info.blk);
}

static void *ra_main(void *arg)
{
	wrk_ra *ra = arg;
	ra_batch b;

	pthread_mutex_lock(&ra->mu);
	for (;;) {
		while (!ra->stop && ra->count == 0)
			pthread_cond_wait(&ra->cv, &ra->mu);
		if (ra->stop)
			break;
		b = ra->queue[ra->head];
		ra->head = (ra->head + 1) % RA_QUEUE;
		ra->count--;
		pthread_mutex_unlock(&ra->mu);
		uint64_t budget = WRK_READ_AHEAD_MAX;
		for (size_t i = 0; i < b.n && budget && !atomic_load(&ra->w->stopping); i++)
			read_ahead_block(ra->w, b.ids[i], &budget);
		pthread_mutex_lock(&ra->mu);
	}
	pthread_mutex_unlock(&ra->mu);
	return NULL;
}

int wrk_ra_start(wrk *w, wrk_ra **out)
{
	wrk_ra *ra = calloc(1, sizeof(*ra));

	if (!ra)
		return -ENOMEM;
	ra->w = w;
	pthread_mutex_init(&ra->mu, NULL);
	pthread_cond_init(&ra->cv, NULL);
	for (; ra->nth < RA_THREADS; ra->nth++)
		if (pthread_create(&ra->th[ra->nth], NULL, ra_main, ra)) {
			wrk_ra_stop(ra);
			return -EAGAIN;
		}
	*out = ra;
	return 0;
}

void wrk_ra_queue(wrk_ra *ra, const cis_block_id *ids, size_t n)
{
	if (n == 0)
		return;
	if (n > WRK_READ_AHEAD_BLOCKS)
		n = WRK_READ_AHEAD_BLOCKS;
	pthread_mutex_lock(&ra->mu);
	bool full = ra->count == RA_QUEUE;
	if (!full) {
		ra_batch *b = &ra->queue[(ra->head + ra->count) % RA_QUEUE];
		b->n = n;
		memcpy(b->ids, ids, n * sizeof(ids[0]));
		ra->count++;
		pthread_cond_signal(&ra->cv);
	}
	pthread_mutex_unlock(&ra->mu);
	if (full)
		cis_log_limited(
		    CIS_LOG_DEBUG, "worker:read-ahead-full", 10,
		    "read-ahead queue full: a Prefetch's cached blocks are read when asked",
		    "blocks=%zu", n);
}

void wrk_ra_stop(wrk_ra *ra)
{
	if (!ra)
		return;
	pthread_mutex_lock(&ra->mu);
	ra->stop = true;
	pthread_cond_broadcast(&ra->cv);
	pthread_mutex_unlock(&ra->mu);
	for (int i = 0; i < ra->nth; i++)
		pthread_join(ra->th[i], NULL);
	pthread_mutex_destroy(&ra->mu);
	pthread_cond_destroy(&ra->cv);
	free(ra);
}
