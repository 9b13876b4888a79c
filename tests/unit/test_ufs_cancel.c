/* cis_ufs_cancel_all, which a stopping daemon calls: a store request
 * waiting on a store that accepted the connection and never answers ends
 * within about a second (not at the connector's one-minute timeout), and
 * every request after it, on any handle, fails at once. Criterion runs
 * each test in a process of its own, so the cancel does not leak. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cistern/error.h"
#include "cistern/kv.h"
#include "cistern/time.h"
#include "cistern/ufs.h"
#include "s3_at_port.h"

/* A store that takes connections (the kernel's backlog) and never reads or
 * answers them. */
static int silent_store(uint16_t *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(fd, 16), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

static cis_ufs *open_s3(uint16_t port)
{
	cis_errmsg em = {{0}};

	return s3_at_port(port, &em);
}

struct waiting_read {
	cis_ufs *u;
	int rc;
	cis_errmsg em;
};

static int discard(void *arg, const void *data, size_t len)
{
	(void)arg, (void)data, (void)len;
	return 0;
}

static void *read_obj(void *arg)
{
	struct waiting_read *w = arg;

	w->rc = cis_ufs_read(w->u, "obj", NULL, 0, 4096, discard, NULL, NULL, &w->em);
	return NULL;
}

Test(ufs_cancel, a_request_waiting_on_a_silent_store_ends_soon)
{
	uint16_t port;
	int lfd = silent_store(&port);
	struct waiting_read w = {.u = open_s3(port)};
	uint64_t t0;
	pthread_t t;

	cr_assert_eq(pthread_create(&t, NULL, read_obj, &w), 0);
	cis_sleep_ms(300); /* connected, request sent, waiting */
	t0 = cis_mono_ms();
	cis_ufs_cancel_all();
	pthread_join(t, NULL);
	cr_assert_lt(cis_mono_ms() - t0, 3000, "the read outlived the cancel by %llu ms",
	             (unsigned long long)(cis_mono_ms() - t0));
	cr_assert_eq(w.rc, -ECANCELED, "got %d: %s", w.rc, w.em.text);
	cr_assert_not_null(strstr(w.em.text, "s3://bkt/obj"), "%s", w.em.text);
	cr_assert_not_null(strstr(w.em.text, "stopping"), "%s", w.em.text);
	cis_ufs_close(w.u);
	close(lfd);
}

Test(ufs_cancel, every_request_after_it_fails_at_once)
{
	char dir[] = "/tmp/cis-ufs-cancel-XXXXXX";
	char uri[64], file[96];
	cis_errmsg em = {{0}};
	struct cis_ufs_stat st;
	cis_ufs_page page;
	uint16_t port;
	int lfd = silent_store(&port);
	cis_ufs *s3 = open_s3(port), *fs;
	uint64_t t0;
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/a", dir);
	cr_assert_not_null(f = fopen(file, "w"));
	fclose(f);
	snprintf(uri, sizeof(uri), "file://%s", dir);
	cr_assert_eq(cis_ufs_open(uri, NULL, &fs, &em), 0, "%s", em.text);
	cr_assert_eq(cis_ufs_stat(fs, "a", &st, &em), 0, "%s", em.text);

	cis_ufs_cancel_all();
	cr_assert_eq(cis_ufs_stat(fs, "a", &st, &em), -ECANCELED);
	cr_assert_not_null(strstr(em.text, "stopping"), "%s", em.text);
	cr_assert_eq(cis_ufs_list(fs, "", NULL, 0, &page, &em), -ECANCELED);
	cr_assert_eq(page.n, 0);
	t0 = cis_mono_ms();
	cr_assert_eq(cis_ufs_check(s3, &em), -ECANCELED, "%s", em.text);
	cr_assert_eq(cis_ufs_list(s3, "", NULL, 0, &page, &em), -ECANCELED, "%s", em.text);
	cr_assert_lt(cis_mono_ms() - t0, 500, "a request after the cancel waited on the store");

	cis_ufs_close(s3);
	cis_ufs_close(fs);
	unlink(file);
	rmdir(dir);
	close(lfd);
}
