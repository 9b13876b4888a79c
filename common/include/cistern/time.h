/* Clocks. Monotonic for intervals and deadlines, wall for what users see. */
#ifndef CISTERN_TIME_H
#define CISTERN_TIME_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

uint64_t cis_mono_ns(void);
static inline uint64_t cis_mono_ms(void)
{
	return cis_mono_ns() / 1000000u;
}
int64_t cis_wall_ns(void);
/* Wait on cond for at most ms from now, on the monotonic clock whatever
 * the condition's own (a step of the wall clock neither stretches nor
 * cuts the wait): pthread_cond_clockwait's result. */
int cis_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *mu, uint64_t ms);
/* Sleep, restarting after signals. */
void cis_sleep_ms(uint64_t ms);
/* RFC 3339 UTC with milliseconds: 2026-11-22T14:10:41.123Z (needs 25 bytes). */
void cis_fmt_rfc3339(int64_t wall_ns, char *out, size_t outlen);

#endif
