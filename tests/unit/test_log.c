/* Logging: one logfmt line per event, rate limiting per cause. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "cistern/log.h"

Test(log, limited_prints_once_per_cause)
{
	char buf[8192] = {0};
	int fds[2];
	ssize_t n;
	int saved = dup(2);

	cr_assert_eq(pipe(fds), 0);
	dup2(fds[1], 2);
	cis_log_init("cistern-test", CIS_LOG_INFO);
	for (int i = 0; i < 50; i++)
		cis_log_limited(CIS_LOG_WARN, "enospc:/cache", 60, "cache dir full", "dir=%s",
		                "/cache");
	cis_log_limited(CIS_LOG_WARN, "eio:/other", 60, "read \"failed\"\nagain", NULL);
	dup2(saved, 2);
	close(fds[1]);
	n = read(fds[0], buf, sizeof(buf) - 1);
	cr_assert_gt(n, 0);
	cr_assert(strstr(buf, "level=warn prog=cistern-test msg=\"cache dir full\" dir=/cache\n"));
	cr_assert_null(strstr(strstr(buf, "cache dir full") + 1, "cache dir full"),
	               "one line for 50 events: %s", buf);
	/* Quotes escaped, newlines flattened: one event is one line. */
	cr_assert(strstr(buf, "msg=\"read \\\"failed\\\" again\"\n"), "%s", buf);
	close(fds[0]);
}
