/* Background scrub: re-read cached blocks one at a time and compare their
 * checksums, so a block rotting on disk is dropped (and fetched again on
 * its next read) instead of served. On a thread of its own: a block's
 * verify reads up to a whole block (1 GiB at most), which must not hold up
 * the main loop's lease expiry. */
#include "worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "cistern/time.h"

/* The shortest wait between two steps, whatever the flags say: with a
 * pause of 0 the thread would spin (an empty cache, --scrub-interval 0),
 * or read blocks back to back at the disk's full speed. */
#define SCRUB_MIN_WAIT_MS 20

struct wrk_scrub {
	wrk *w;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
};

/* Verify one block after `cursor` (advanced); false when a pass ended. */
static bool scrub_step(wrk *w, cis_block_id *cursor, bool *started)
{
	cis_block_id id;
	int rc;

	rc = wrk_bs_next(w->bs, *started ? cursor : NULL, &id);
	if (rc < 0) {
		*started = false; /* pass over: start from the first next time */
		return false;
	}
	*started = true;
	*cursor = id;
	rc = wrk_bs_verify(w->bs, id, true);
	if (rc == 0 || rc == -CIS_E_CHECKSUM)
		cis_counter_inc(w->m.scrubbed);
	return true;
}

static void *scrub_main(void *arg)
{
	wrk_scrub *s = arg;
	cis_block_id cursor = {0, 0};
	bool started = false;

	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		pthread_mutex_unlock(&s->mu);
		uint64_t pause = scrub_step(s->w, &cursor, &started) ? s->w->scrub_pause_ms
		                                                     : s->w->scrub_interval_ms;
		if (pause < SCRUB_MIN_WAIT_MS)
			pause = SCRUB_MIN_WAIT_MS;
		pthread_mutex_lock(&s->mu);
		if (!s->stop)
			cis_cond_wait_ms(&s->cv, &s->mu, pause);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int wrk_scrub_start(wrk *w, wrk_scrub **out)
{
	wrk_scrub *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->w = w;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (pthread_create(&s->th, NULL, scrub_main, s)) {
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv);
		free(s);
		return -EAGAIN;
	}
	*out = s;
	return 0;
}

void wrk_scrub_stop(wrk_scrub *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->th, NULL); /* a verify under way gives up at w->stopping */
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
}
