/* Shared socket helpers for common/net/ (net_internal.h). */
#include "net_internal.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>

#include "cistern/log.h"

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;

static void threads_init_once(void)
{
	if (evthread_use_pthreads() != 0)
		cis_die("libevent: evthread_use_pthreads failed");
}

void cis_net_threads_init(void)
{
	pthread_once(&threads_once, threads_init_once);
}

int cis_net_listen_tcp(const char *addr, uint16_t port, int *fd_out, uint16_t *bound,
                       cis_errmsg *em)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
	                         .ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char portstr[8];
	int fd, r, one = 1;

	snprintf(portstr, sizeof(portstr), "%u", port);
	r = getaddrinfo(addr, portstr, &hints, &ai);
	if (r)
		return cis_fail(em, -EADDRNOTAVAIL, "resolve %s: %s", addr, gai_strerror(r));
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		cis_fail(em, r, "socket for %s:%u: %s", addr, port, strerror(-r));
		goto out_free_ai;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
		r = -errno;
		cis_fail(em, r, "bind %s:%u: %s", addr, port, strerror(-r));
		goto out_close;
	}
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		r = -errno;
		cis_fail(em, r, "getsockname %s:%u: %s", addr, port, strerror(-r));
		goto out_close;
	}
	*bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
	                                        : ((struct sockaddr_in *)&ss)->sin_port);
	*fd_out = fd;
	freeaddrinfo(ai);
	return 0;

out_close:
	close(fd);
out_free_ai:
	freeaddrinfo(ai);
	return r;
}

static void listener_resume(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	evconnlistener_enable(arg);
}

static void listener_error(struct evconnlistener *l, void *arg)
{
	struct timeval tv = {0, 100 * 1000};
	int err = EVUTIL_SOCKET_ERROR();

	(void)arg;
	cis_log_limited(CIS_LOG_WARN, "net-accept", 10, "accept failed: pausing the listener",
	                "err=\"%s\"", strerror(err));
	/* The once-event goes with the base if the loop stops first. */
	if (event_base_once(evconnlistener_get_base(l), -1, EV_TIMEOUT, listener_resume, l, &tv) ==
	    0)
		evconnlistener_disable(l);
}

void cis_net_listener_pause_on_error(struct evconnlistener *l)
{
	evconnlistener_set_error_cb(l, listener_error);
}
