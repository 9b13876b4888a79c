/* Helpers shared by the RPC and HTTP servers and clients inside
 * common/net/. Not a public interface. */
#ifndef CISTERN_NET_INTERNAL_H
#define CISTERN_NET_INTERNAL_H

#include <stdint.h>

#include "cistern/error.h"

/* evthread_use_pthreads() exactly once per process, before any event_base
 * that another thread touches is made. */
void cis_net_threads_init(void);

/* A listening TCP socket on addr:port (non-blocking, close-on-exec,
 * SO_REUSEADDR); *bound gets the port actually bound. 0 or -errno with em
 * naming the address ("bind 0.0.0.0:19600: address already in use"). */
int cis_net_listen_tcp(const char *addr, uint16_t port, int *fd, uint16_t *bound, cis_errmsg *em);

struct evconnlistener;
/* On l: an accept that fails (out of descriptors: EMFILE, ENFILE) pauses
 * the listener 100 ms, logged, where libevent would try again at once, and
 * forever: a core at 100 % while the descriptors are short. */
void cis_net_listener_pause_on_error(struct evconnlistener *l);

#endif
