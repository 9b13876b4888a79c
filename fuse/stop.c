/* A stop signal while requests wait. libfuse's handlers for SIGINT,
 * SIGTERM and SIGHUP end the session loop, but the loop returns only once
 * every request being served is done, and one waiting on a master or a
 * store that stopped answering waits out its timeout (30 s, a minute):
 * long enough for a supervisor to give up and SIGKILL the client. So each
 * of those signals also wakes a watcher thread (through a pipe: the one
 * thing a signal handler may do), which makes every wait end at once: the
 * master and worker clients fail their calls, the store's requests are
 * abandoned. The requests then fail (the kernel is about to lose the mount
 * anyway) and the loop ends. */
#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "cistern/log.h"
#include "cistern/ufs.h"

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

static void *watch_main(void *arg)
{
	fcl *c = arg;
	ssize_t n;
	char b;

	while ((n = read(stop_pipe[0], &b, 1)) < 0 && errno == EINTR)
		;
	if (n == 1) { /* a signal; 0 is fcl_stop_unwatch closing the pipe */
		cis_info("stopping: requests in flight give up their waits", NULL);
		cis_ufs_cancel_all();
		cis_rpc_client_close(c->master);
		fcl_remote_close(c->remote);
	}
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
