/* A stop signal while requests wait. libfuse's handlers for SIGINT,
 * SIGTERM and SIGHUP end the session loop, but the loop returns only once
 * every request being served is done, and one waiting on a master or a
 * store that stopped answering waits out its timeout (30 s, a minute):
 * long enough for a supervisor to give up and SIGKILL the client. So each
 * of those signals also wakes a watcher thread (through a pipe: the one
 * thing a signal handler may do). Requests answered normally get a second
 * to finish; then the watcher makes every wait still going end at once:
 * the master and worker clients fail their calls, the store's requests are
 * abandoned. Those requests fail (the kernel is about to lose the mount
 * anyway) and the loop ends. */
#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>

#include "cistern/log.h"
#include "cistern/time.h"
#include "cistern/ufs.h"

/* How long requests being served may take to finish after a stop signal
 * before the ones still waiting are made to give up. */
#define FCL_STOP_GRACE_MS 1000

static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define NSTOP (sizeof(stop_signals) / sizeof(stop_signals[0]))

/* Process-wide, as signal dispositions are. */
static struct sigaction libfuse_action[NSTOP]; /* what libfuse installed */
static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
	int saved = errno;

	for (size_t i = 0; i < NSTOP; i++) {
		const struct sigaction *a = &libfuse_action[i];

		if (stop_signals[i] == sig && !(a->sa_flags & SA_SIGINFO) &&
		    a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN)
			a->sa_handler(sig);
	}
	(void)!write(stop_pipe[1], "", 1); /* non-blocking: a full pipe is woken already */
	errno = saved;
}

/* Wait for the pipe until the monotonic time until (UINT64_MAX: no
 * limit): 1 for a byte (a signal), 0 when the pipe was closed
 * (fcl_stop_unwatch: *closed set) or the time is up. */
static int pipe_byte(uint64_t until, bool *closed)
{
	struct pollfd p = {.fd = stop_pipe[0], .events = POLLIN};

	for (;;) {
		uint64_t now = cis_mono_ms();
		int wait = until == UINT64_MAX ? -1 : now >= until ? 0 : (int)(until - now);
		int ready = poll(&p, 1, wait);
		ssize_t n;
		char b;

		if (ready == 0)
			return 0;
		if (ready < 0) {
			if (errno == EINTR)
				continue;
			return 0;
		}
		n = read(stop_pipe[0], &b, 1);
		if (n == 1)
			return 1;
		if (n == 0) {
			*closed = true;
			return 0;
		}
		if (errno != EINTR)
			return 0;
	}
}

static void *watch_main(void *arg)
{
	fcl *c = arg;
	bool closed = false;
	uint64_t grace_end;

	if (!pipe_byte(UINT64_MAX, &closed))
		return NULL; /* unwatched without a signal */
	/* Requests that are answered normally get a moment to finish: the loop
	 * may end, and fcl_stop_unwatch close the pipe, before it is over. */
	grace_end = cis_mono_ms() + FCL_STOP_GRACE_MS;
	while (pipe_byte(grace_end, &closed))
		; /* a repeated signal */
	if (closed)
		return NULL;
	cis_info("stopping: requests in flight give up their waits", NULL);
	cis_ufs_cancel_all();
	cis_rpc_client_close(c->master);
	fcl_remote_close(c->remote);
	return NULL;
}

int fcl_stop_watch(fcl *c)
{
	struct sigaction sa = {.sa_handler = on_stop_signal};
	int rc;

	if (pipe2(stop_pipe, O_CLOEXEC))
		return -errno;
	rc = fcntl(stop_pipe[1], F_SETFL, O_NONBLOCK)
	         ? -errno
	         : -pthread_create(&c->stop_thread, NULL, watch_main, c);
	if (rc) {
		close(stop_pipe[0]);
		close(stop_pipe[1]);
		return rc;
	}
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < NSTOP; i++)
		sigaction(stop_signals[i], &sa, &libfuse_action[i]);
	c->stop_watched = true;
	return 0;
}

void fcl_stop_unwatch(fcl *c)
{
	if (!c->stop_watched)
		return;
	for (size_t i = 0; i < NSTOP; i++)
		sigaction(stop_signals[i], &libfuse_action[i], NULL);
	close(stop_pipe[1]); /* the watcher reads the end of the pipe */
	pthread_join(c->stop_thread, NULL);
	close(stop_pipe[0]);
	c->stop_watched = false;
}
