#include "cistern/time.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

uint64_t cis_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int64_t cis_wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int cis_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *mu, uint64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	ts.tv_sec += (time_t)(ms / 1000) + ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	return pthread_cond_clockwait(cond, mu, CLOCK_MONOTONIC, &ts);
}

void cis_sleep_ms(uint64_t ms)
{
	struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
	                      .tv_nsec = (long)(ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
	}
}

void cis_fmt_rfc3339(int64_t wall_ns, char *out, size_t outlen)
{
	time_t secs = (time_t)(wall_ns / 1000000000);
	int ms = (int)((wall_ns % 1000000000) / 1000000);
	struct tm tm;

	gmtime_r(&secs, &tm);
	snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
	         tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}
