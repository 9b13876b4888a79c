/* Listing readahead. A walk of a dataset (os.walk, find, a data loader's
 * file scan) lists a directory, then each of its subdirectories one after
 * the other; on an object store every first listing is a round trip or
 * more (S3: 20-100 ms), so the walk waits on them in a row. When a listing
 * finds subdirectories never listed, they are queued here and a few
 * threads list them ahead of the walker, who then finds them in LMDB (or
 * joins the listing in flight: listings are single flight).
 *
 * Bounded on purpose: only directories the store just showed for the
 * first time, at most MST_LIST_AHEAD_DEPTH levels below the listing a
 * client asked for, at most LA_QUEUE waiting (the rest are listed when
 * asked). A failed listing ahead is not an error anyone sees: the walker
 * lists the directory itself and gets the error then. */
#include <errno.h>
#include <stdlib.h>

#include "cistern/log.h"
#include "master.h"

#define LA_QUEUE       4096
#define LA_MAX_THREADS 64

typedef struct la_item {
	uint64_t dir;
	int depth;
} la_item;

struct mst_listahead {
	mst_master *m;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	la_item q[LA_QUEUE]; /* ring */
	size_t head, n;
	bool stop;
	int nthreads;
	pthread_t th[LA_MAX_THREADS];
};

static void *la_main(void *arg)
{
	mst_listahead *la = arg;

	pthread_mutex_lock(&la->mu);
	for (;;) {
		while (!la->stop && la->n == 0)
			pthread_cond_wait(&la->cv, &la->mu);
		if (la->stop)
			break;
		la_item it = la->q[la->head];
		la->head = (la->head + 1) % LA_QUEUE;
		la->n--;
		pthread_mutex_unlock(&la->mu);

		mst_inode *dir = malloc(sizeof(*dir));
		cis_errmsg em = {{0}};

		if (dir && mst_ns_getattr(la->m, it.dir, dir, &em) == 0) {
			int rc = mst_ns_list_ahead(la->m, dir, it.depth, &em);

			if (rc)
				cis_debug("listing ahead failed", "inode=%llu err=\"%s\"",
				          (unsigned long long)it.dir, cis_errmsg_or(&em, rc));
		}
		free(dir);
		pthread_mutex_lock(&la->mu);
	}
	pthread_mutex_unlock(&la->mu);
	return NULL;
}

int mst_listahead_new(mst_master *m, int threads, mst_listahead **out)
{
	mst_listahead *la;

	*out = NULL;
	if (threads <= 0)
		return 0;
	if (threads > LA_MAX_THREADS)
		threads = LA_MAX_THREADS;
	la = calloc(1, sizeof(*la));
	if (!la)
		return -ENOMEM;
	la->m = m;
	pthread_mutex_init(&la->mu, NULL);
	pthread_cond_init(&la->cv, NULL);
	for (; la->nthreads < threads; la->nthreads++)
		if (pthread_create(&la->th[la->nthreads], NULL, la_main, la)) {
			mst_listahead_free(la);
			return -EAGAIN;
		}
	*out = la;
	return 0;
}

void mst_listahead_free(mst_listahead *la)
{
	if (!la)
		return;
	pthread_mutex_lock(&la->mu);
	la->stop = true;
	pthread_cond_broadcast(&la->cv);
	pthread_mutex_unlock(&la->mu);
	for (int i = 0; i < la->nthreads; i++)
		pthread_join(la->th[i], NULL);
	pthread_mutex_destroy(&la->mu);
	pthread_cond_destroy(&la->cv);
	free(la);
}

void mst_listahead_queue(mst_listahead *la, const uint64_t *dirs, size_t n, int depth)
{
	size_t dropped = 0;

	if (!la || depth > MST_LIST_AHEAD_DEPTH)
		return;
	pthread_mutex_lock(&la->mu);
	for (size_t i = 0; i < n; i++) {
		if (la->n == LA_QUEUE) {
			dropped = n - i;
			break;
		}
		la->q[(la->head + la->n) % LA_QUEUE] = (la_item){dirs[i], depth};
		la->n++;
	}
	pthread_cond_broadcast(&la->cv);
	pthread_mutex_unlock(&la->mu);
	if (dropped)
		cis_log_limited(
		    CIS_LOG_INFO, "master:listahead", 60,
		    "listing-ahead queue full: directories left to be listed when asked",
		    "dropped=%zu", dropped);
}
