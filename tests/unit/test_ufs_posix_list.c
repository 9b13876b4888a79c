/* Paged listings of the file:// connector: the names after a page are kept
 * for the page that comes with its token (a directory is read whole, and
 * reading it again for every page cost minutes for a million names), and
 * only while the directory is the same one, unchanged; listings of other
 * directories, or of the same one at other places, do not disturb them. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cistern/error.h"
#include "cistern/ufs.h"

#define NFILES 600
#define PAGE   100

static char root[64];
static cis_ufs *u;

static void touch(const char *dir, const char *name)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s/%s", root, dir, name);
	int fd = open(p, O_CREAT | O_WRONLY, 0644);
	cr_assert_geq(fd, 0, "%s", p);
	close(fd);
}

static void setup(void)
{
	snprintf(root, sizeof(root), "/tmp/cis-posix-list.XXXXXX");
	cr_assert_not_null(mkdtemp(root));
	char d[128], uri[128];
	for (int k = 0; k < 2; k++) {
		snprintf(d, sizeof(d), "%s/d%d", root, k);
		cr_assert_eq(mkdir(d, 0755), 0);
		for (int i = 0; i < NFILES; i++) {
			char name[32];
			snprintf(name, sizeof(name), "f%04d", i * 2); /* room for odd names */
			touch(k ? "d1" : "d0", name);
		}
	}
	snprintf(uri, sizeof(uri), "file://%s", root);
	cis_errmsg em = {{0}};
	cr_assert_eq(cis_ufs_open(uri, NULL, &u, &em), 0, "%s", em.text);
}

static void teardown(void)
{
	cis_ufs_close(u);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(posix_list, .init = setup, .fini = teardown, .timeout = 60);

/* One listing of dir under way: its token and what it has seen. */
typedef struct lister {
	const char *dir;
	char *token;
	size_t seen;
	char last[64];
	bool done;
} lister;

/* The next page of l; checks the names come in order, once each. */
static void next_page(lister *l)
{
	cis_ufs_page pg;
	cis_errmsg em = {{0}};
	cr_assert_eq(cis_ufs_list(u, l->dir, l->token, PAGE, &pg, &em), 0, "%s", em.text);
	for (size_t i = 0; i < pg.n; i++) {
		cr_assert_gt(strcmp(pg.entries[i].name, l->last), 0, "%s after %s",
		             pg.entries[i].name, l->last);
		snprintf(l->last, sizeof(l->last), "%s", pg.entries[i].name);
	}
	l->seen += pg.n;
	free(l->token);
	l->token = pg.next_token ? strdup(pg.next_token) : NULL;
	l->done = !pg.next_token;
	cis_ufs_page_free(&pg);
}

/* The directory's mtime, to put back after a change. */
static struct timespec dir_mtime(const char *dir)
{
	char p[128];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", root, dir);
	cr_assert_eq(stat(p, &st), 0);
	return st.st_mtim;
}

static void set_dir_mtime(const char *dir, struct timespec mt)
{
	char p[128];
	snprintf(p, sizeof(p), "%s/%s", root, dir);
	struct timespec ts[2] = {mt, mt};
	cr_assert_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
}

/* Two listings of the same directory at different places, and one of
 * another, interleaved: each sees every name once, in order. */
Test(posix_list, interleaved_listings_each_see_every_name)
{
	lister a = {.dir = "d0"}, b = {.dir = "d0"}, c = {.dir = "d1"};
	next_page(&a);
	next_page(&a);
	while (!a.done || !b.done || !c.done) {
		if (!b.done)
			next_page(&b);
		if (!a.done)
			next_page(&a);
		if (!c.done)
			next_page(&c);
	}
	cr_assert_eq(a.seen, NFILES);
	cr_assert_eq(b.seen, NFILES);
	cr_assert_eq(c.seen, NFILES);
	free(a.token);
	free(b.token);
	free(c.token);
}

/* The next page comes from the names read for the first: a name added
 * behind the connector's back with the directory's mtime put back is not
 * seen (the directory was not read again); with the mtime changed, as any
 * real change does, the directory is read again and the name is seen. */
Test(posix_list, the_next_page_reuses_the_names_read_until_the_directory_changes)
{
	lister l = {.dir = "d0"};
	next_page(&l); /* f0000 .. f0198 */
	struct timespec mt = dir_mtime("d0");
	touch("d0", "f0301");
	set_dir_mtime("d0", mt);
	while (!l.done)
		next_page(&l);
	cr_assert_eq(l.seen, NFILES, "the kept names were used: %zu seen", l.seen);

	lister m = {.dir = "d0"};
	next_page(&m);
	touch("d0", "f0303"); /* changes the directory's mtime */
	while (!m.done)
		next_page(&m);
	cr_assert_eq(m.seen, NFILES + 2, "read again after the change: %zu seen", m.seen);
	free(l.token);
	free(m.token);
}
