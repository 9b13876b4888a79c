/* The connector conformance suite: one set of tests, run against every
 * under-store backend through the public cistern/ufs.h API.
 *
 * Environment:
 *   CIS_TEST_UFS_URI       the store to test (file:///dir or s3://bucket/prefix)
 *   CIS_TEST_UFS_OPTIONS   extra options, "k=v,k=v"
 *   CIS_S3_ENDPOINT, CIS_S3_ACCESS_KEY, CIS_S3_SECRET_KEY, CIS_S3_REGION,
 *   CIS_S3_PATH_STYLE      S3 options (endpoint, access_key, ...), used for s3://
 *   CIS_TEST_UFS_LIST_N    objects in the paginated listing (default 10000)
 *   CIS_TEST_UFS_BIG_MB    size of the multipart object (default 100)
 *   CIS_TEST_UFS_KILL_CMD  shell command that kills the store; enables the
 *                          faults/killed_mid_read test, which must run last
 *
 * Each test works under its own prefix ("conf-<pid>-<time>/<test>") so the
 * tests can run in parallel and again without cleaning the store. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cistern/hash.h"
#include "cistern/ufs.h"
#include "cistern/ufs_backend.h"

#define MiB (1024u * 1024u)

/* ---- helpers ---------------------------------------------------------- */

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);

	return v && *v ? strtoull(v, NULL, 10) : dflt;
}

static bool is_s3(void)
{
	const char *uri = getenv("CIS_TEST_UFS_URI");

	return uri && strncmp(uri, "s3://", 5) == 0;
}

static bool is_file(void)
{
	const char *uri = getenv("CIS_TEST_UFS_URI");

	return uri && strncmp(uri, "file://", 7) == 0;
}

static void options_from_env(cis_kvlist *o, const char *secret_override)
{
	static const struct {
		const char *env, *key;
	} map[] = {
	    {"CIS_S3_ENDPOINT", "endpoint"},     {"CIS_S3_ACCESS_KEY", "access_key"},
	    {"CIS_S3_SECRET_KEY", "secret_key"}, {"CIS_S3_REGION", "region"},
	    {"CIS_S3_PATH_STYLE", "path_style"},
	};
	const char *extra = getenv("CIS_TEST_UFS_OPTIONS");

	if (is_s3()) {
		for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
			const char *v = getenv(map[i].env);

			if (v && *v)
				cr_assert_eq(cis_kvlist_set(o, map[i].key, v), 0);
		}
		if (!cis_kvlist_get(o, "path_style"))
			cr_assert_eq(cis_kvlist_set(o, "path_style", "true"), 0);
		if (secret_override)
			cr_assert_eq(cis_kvlist_set(o, "secret_key", secret_override), 0);
	}
	if (extra && *extra) {
		char *copy = strdup(extra), *save = NULL;

		for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			cr_assert_eq(cis_kvlist_set_pair(o, tok), 0, "bad option '%s'", tok);
		free(copy);
	}
}

static cis_ufs *open_store_with(const char *secret_override)
{
	const char *uri = getenv("CIS_TEST_UFS_URI");
	cis_kvlist o = CIS_KVLIST_INIT;
	cis_errmsg em = {{0}};
	cis_ufs *u = NULL;
	int err;

	cr_assert(uri && *uri, "CIS_TEST_UFS_URI is not set");
	options_from_env(&o, secret_override);
	err = cis_ufs_open(uri, &o, &u, &em);
	cis_kvlist_free(&o);
	cr_assert_eq(err, 0, "open %s: %s", uri, cis_errmsg_or(&em, err));
	return u;
}

static cis_ufs *open_store(void)
{
	return open_store_with(NULL);
}

/* "conf-<pid>-<time>/<name>", unique per test process. */
static void base_for(char *out, size_t n, const char *name)
{
	snprintf(out, n, "conf-%d-%ld/%s", (int)getpid(), (long)time(NULL), name);
}

/* Deterministic bytes: xorshift64 seeded by seed, so any range can be
 * regenerated without keeping the object in memory. */
static void fill_pattern(void *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	unsigned char *p = buf;

	for (size_t i = 0; i < len; i++) {
		if ((i & 7) == 0) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		p[i] = (unsigned char)(x >> ((i & 7) * 8));
	}
}

static void put(cis_ufs *u, const char *path, const void *data, size_t len)
{
	cis_errmsg em = {{0}};
	int err = cis_ufs_write_buf(u, path, data, len, &em);

	cr_assert_eq(err, 0, "write %s: %s", path, cis_errmsg_or(&em, err));
}

static void put_str(cis_ufs *u, const char *path, const char *s)
{
	put(u, path, s, strlen(s));
}

/* Reads all of path into a malloc'd buffer of *len bytes (at most cap). */
static char *get_all(cis_ufs *u, const char *path, size_t cap, size_t *len)
{
	cis_errmsg em = {{0}};
	char *buf = malloc(cap ? cap : 1);
	int err;

	cr_assert_not_null(buf);
	err = cis_ufs_read_buf(u, path, NULL, 0, cap, buf, len, &em);
	cr_assert_eq(err, 0, "read %s: %s", path, cis_errmsg_or(&em, err));
	return buf;
}

/* ---- the dispatcher --------------------------------------------------- */

Test(dispatch, check_path)
{
	char long_ok[4096], long_bad[4097]; /* what the kernel takes, and one more */

	memset(long_ok, 'a', 4095);
	long_ok[4095] = 0;
	memset(long_bad, 'a', 4096);
	long_bad[4096] = 0;
	cr_expect_eq(cis_ufs_check_path(""), 0);
	cr_expect_eq(cis_ufs_check_path("a"), 0);
	cr_expect_eq(cis_ufs_check_path("a/b c/ü"), 0);
	cr_expect_eq(cis_ufs_check_path("..."), 0);
	cr_expect_eq(cis_ufs_check_path(".hidden/x"), 0);
	cr_expect_eq(cis_ufs_check_path(long_ok), 0);
	cr_expect_eq(cis_ufs_check_path(long_bad), -EINVAL);
	cr_expect_eq(cis_ufs_check_path(NULL), -EINVAL);
	const char *bad[] = {"/a", "a/", "a//b", ".", "..", "./a", "a/.", "a/../b", "../x", "/"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(cis_ufs_check_path(bad[i]), -EINVAL, "'%s' accepted", bad[i]);
}

Test(dispatch, bad_uris)
{
	cis_errmsg em = {{0}};
	cis_ufs *u = (cis_ufs *)1;
	int err;

	err = cis_ufs_open("gs://x", NULL, &u, &em);
	cr_expect_eq(err, -CIS_E_URI);
	cr_expect_null(u);
	cr_expect_str_eq(em.text, "unknown scheme 'gs' in 'gs://x' (use s3:// or file://)");

	const char *bad[] = {"", "nothing", "://x", "1s3://b", "s3:/b", "fi le://x", "file://\n/x"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		em.text[0] = 0;
		err = cis_ufs_open(bad[i], NULL, &u, &em);
		cr_expect_eq(err, -CIS_E_URI, "'%s' gave %d", bad[i], err);
		cr_expect(em.text[0], "no message for '%s'", bad[i]);
	}
	/* The file connector wants an absolute directory. */
	err = cis_ufs_open("file://relative/dir", NULL, &u, &em);
	cr_expect_eq(err, -CIS_E_URI);
	cr_expect(strstr(em.text, "absolute"), "message: %s", em.text);
}

/* An option the connector does not know is refused, naming it and what it
 * knows (a misspelt endpoint would send requests to AWS); so is an fsync
 * it cannot read. */
Test(dispatch, unknown_options_refused)
{
	cis_kvlist o = CIS_KVLIST_INIT;
	cis_errmsg em = {{0}};
	cis_ufs *u = NULL;

	cr_assert_eq(cis_kvlist_set(&o, "endpiont", "http://127.0.0.1:9"), 0);
	cr_expect_eq(cis_ufs_open("s3://bucket/p", &o, &u, &em), -CIS_E_CONFIG);
	cr_expect_null(u);
	cr_expect(strstr(em.text, "s3:// has no option 'endpiont' (it knows: endpoint, region"),
	          "message: %s", em.text);
	cis_kvlist_free(&o);
	cr_assert_eq(cis_kvlist_set(&o, "fsync", "no"), 0);
	cr_expect_eq(cis_ufs_open("file:///tmp", &o, &u, &em), -CIS_E_CONFIG);
	cr_expect(strstr(em.text, "fsync=no"), "message: %s", em.text);
	cis_kvlist_free(&o);
	cr_assert_eq(cis_kvlist_set(&o, "fsync", "false"), 0);
	cr_expect_eq(cis_ufs_open("file:///tmp", &o, &u, &em), 0, "%s", em.text);
	cis_ufs_close(u);
	cis_kvlist_free(&o);
}

Test(dispatch, uri_hides_credentials)
{
	cis_errmsg em = {{0}};
	cis_ufs *u = NULL;
	int err;

	/* Unknown scheme: the message carries the URI, without the secret. */
	err = cis_ufs_open("gs://AKID:SeCrEt@bucket/p", NULL, &u, &em);
	cr_assert_eq(err, -CIS_E_URI);
	cr_expect_null(strstr(em.text, "SeCrEt"), "secret echoed: %s", em.text);
	cr_expect(strstr(em.text, "gs://bucket/p"), "message: %s", em.text);

	/* A secret with a '/' in it (AWS secrets are base64). */
	err = cis_ufs_open("gs://AKID:SeC/rEt@bucket/p", NULL, &u, &em);
	cr_assert_eq(err, -CIS_E_URI);
	cr_expect_null(strstr(em.text, "SeC"), "secret echoed: %s", em.text);
	cr_expect_null(strstr(em.text, "rEt"), "secret echoed: %s", em.text);
	err = cis_ufs_open("gs://AKID:SeC/rEt/p", NULL, &u, &em);
	cr_assert_eq(err, -CIS_E_URI);
	cr_expect_null(strstr(em.text, "SeC"), "secret echoed: %s", em.text);

	/* A backend refusing userinfo must not echo it either. */
	const char *with_secret[] = {"file://u:SeCrEt@/tmp",      "file://u:SeC/rEt@/tmp",
	                             "s3://AKID:SeCrEt@bucket/p", "s3://AKID:SeC/rEt@bucket/p",
	                             "s3://AKID:SeC/rEt/p",       "s3://AKID@bucket/p"};
	for (size_t i = 0; i < 6; i++) {
		em.text[0] = 0;
		err = cis_ufs_open(with_secret[i], NULL, &u, &em);
		if (err == 0) {
			cr_expect_null(strstr(cis_ufs_uri(u), "SeCrEt"), "uri: %s", cis_ufs_uri(u));
			cis_ufs_close(u);
		}
		cr_expect_null(strstr(em.text, "SeCrEt"), "secret echoed: %s", em.text);
		cr_expect_null(strstr(em.text, "SeC"), "secret echoed: %s", em.text);
		cr_expect_null(strstr(em.text, "rEt"), "secret echoed: %s", em.text);
		cr_expect_neq(err, 0, "%s opened", with_secret[i]);
	}

	/* Nor an endpoint with userinfo, even one that is no URL at all. */
	const char *endpoints[] = {"http://AKID:SeCrEt@h:99999", "http://AKID:SeCrEt@bad host",
	                           "ftp://AKID:SeCrEt@h", "http://AKID:SeCrEt@h/path"};
	for (size_t i = 0; i < 4; i++) {
		cis_kvlist o = CIS_KVLIST_INIT;

		em.text[0] = 0;
		cr_assert_eq(cis_kvlist_set(&o, "endpoint", endpoints[i]), 0);
		err = cis_ufs_open("s3://bucket/p", &o, &u, &em);
		cis_kvlist_free(&o);
		cr_expect_eq(err, -CIS_E_CONFIG, "%s: %s", endpoints[i], em.text);
		cr_expect_null(strstr(em.text, "SeCrEt"), "secret echoed: %s", em.text);
	}

	err = cis_ufs_open("FILE:///tmp", NULL, &u, &em);
	cr_assert_eq(err, 0, "scheme case: %s", em.text);
	cr_expect_str_eq(cis_ufs_uri(u), "FILE:///tmp");
	cis_ufs_close(u);
}

Test(dispatch, file_root_missing)
{
	cis_errmsg em = {{0}};
	cis_ufs *u = NULL;
	int err;

	/* Opening contacts nothing; check does. */
	err = cis_ufs_open("file:///nonexistent-cistern-dir/x", NULL, &u, &em);
	cr_assert_eq(err, 0, "%s", em.text);
	err = cis_ufs_check(u, &em);
	cr_expect_eq(err, -ENOENT);
	cr_expect(strstr(em.text, "/nonexistent-cistern-dir/x"), "message: %s", em.text);
	cis_ufs_close(u);
}

/* ---- the conformance suite -------------------------------------------- */

TestSuite(conf, .timeout = 240);

Test(conf, check)
{
	cis_ufs *u = open_store();
	cis_errmsg em = {{0}};
	int err = cis_ufs_check(u, &em);

	cr_expect_eq(err, 0, "check: %s", cis_errmsg_or(&em, err));
	cr_expect_null(strstr(cis_ufs_uri(u), "@"), "uri shows credentials: %s", cis_ufs_uri(u));
	cis_ufs_close(u);
}

Test(conf, write_stat_read)
{
	cis_ufs *u = open_store();
	char base[128], path[256], dir[256], data[5000];
	struct cis_ufs_stat st;
	cis_errmsg em = {{0}};
	size_t got;
	char *back;
	int err;

	base_for(base, sizeof(base), "wsr");
	snprintf(path, sizeof(path), "%s/a/b/hello.bin", base);
	fill_pattern(data, sizeof(data), 1);
	put(u, path, data, sizeof(data));

	err = cis_ufs_stat(u, path, &st, &em);
	cr_assert_eq(err, 0, "stat: %s", cis_errmsg_or(&em, err));
	cr_expect_not(st.is_dir);
	cr_expect_eq(st.size, sizeof(data));
	cr_expect(st.version[0], "no version");
	cr_expect_gt(st.mtime_ns, 0);

	back = get_all(u, path, sizeof(data) + 100, &got);
	cr_expect_eq(got, sizeof(data));
	cr_expect_arr_eq(back, data, sizeof(data));
	free(back);

	/* The parents are directories. */
	snprintf(dir, sizeof(dir), "%s/a/b", base);
	err = cis_ufs_stat(u, dir, &st, &em);
	cr_assert_eq(err, 0, "stat dir: %s", cis_errmsg_or(&em, err));
	cr_expect(st.is_dir);
	snprintf(dir, sizeof(dir), "%s/a", base);
	err = cis_ufs_stat(u, dir, &st, &em);
	cr_assert_eq(err, 0, "stat dir: %s", cis_errmsg_or(&em, err));
	cr_expect(st.is_dir);

	/* An empty object. */
	snprintf(path, sizeof(path), "%s/empty", base);
	put(u, path, "", 0);
	err = cis_ufs_stat(u, path, &st, &em);
	cr_assert_eq(err, 0, "stat empty: %s", cis_errmsg_or(&em, err));
	cr_expect_eq(st.size, 0);
	back = get_all(u, path, 10, &got);
	cr_expect_eq(got, 0);
	free(back);
	cis_ufs_close(u);
}

struct writer {
	cis_ufs *u;
	const char *dir;
	unsigned first, count;
	int failures;
	char em[CIS_ERRMSG_MAX];
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	char path[256], body[64];
	cis_errmsg em = {{0}};

	for (unsigned i = w->first; i < w->first + w->count; i++) {
		snprintf(path, sizeof(path), "%s/obj-%05u", w->dir, i);
		snprintf(body, sizeof(body), "object %u", i);
		if (cis_ufs_write_buf(w->u, path, body, strlen(body), &em) != 0) {
			w->failures++;
			snprintf(w->em, sizeof(w->em), "%s", em.text);
		}
	}
	return NULL;
}

/* All entries of one level, checking each page's shape on the way. */
static cis_ufs_entry *list_all(cis_ufs *u, const char *dir, size_t max, size_t *n, int *pages)
{
	cis_ufs_entry *all = NULL;
	char *token = NULL;
	size_t cap = 0;
	int err;

	*n = 0;
	*pages = 0;
	do {
		cis_ufs_page page;
		cis_errmsg em = {{0}};

		err = cis_ufs_list(u, dir, token, max, &page, &em);
		cr_assert_eq(err, 0, "list %s: %s", dir, cis_errmsg_or(&em, err));
		cr_assert_leq(page.n, max ? max : 1000, "page of %zu entries", page.n);
		cr_assert(page.n > 0 || !page.next_token, "empty page with a next token");
		(*pages)++;
		cr_assert_lt(*pages, 100000, "listing does not end");
		if (*n + page.n > cap) {
			cap = (*n + page.n) * 2;
			all = realloc(all, cap * sizeof(*all));
			cr_assert_not_null(all);
		}
		for (size_t i = 0; i < page.n; i++) {
			all[(*n)++] = page.entries[i];
			page.entries[i].name = NULL;
			page.entries[i].link_target = NULL;
		}
		free(token);
		token = page.next_token ? strdup(page.next_token) : NULL;
		cis_ufs_page_free(&page);
	} while (token);
	return all;
}

static void free_entries(cis_ufs_entry *e, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(e[i].name);
		free(e[i].link_target);
	}
	free(e);
}

Test(conf, list_paginated)
{
	cis_ufs *u = open_store();
	unsigned total = (unsigned)env_u64("CIS_TEST_UFS_LIST_N", 10000), nthreads = 8;
	char base[128], dir[256], path[300];
	struct writer w[8];
	pthread_t th[8];
	cis_ufs_entry *all;
	size_t n;
	int pages;

	cr_assert_gt(total, 1000, "CIS_TEST_UFS_LIST_N must exceed one page");
	base_for(base, sizeof(base), "list");
	snprintf(dir, sizeof(dir), "%s/many", base);
	for (unsigned t = 0; t < nthreads; t++) {
		w[t] = (struct writer){u,
		                       dir,
		                       t * (total / nthreads),
		                       t == nthreads - 1 ? total - t * (total / nthreads)
		                                         : total / nthreads,
		                       0,
		                       ""};
		cr_assert_eq(pthread_create(&th[t], NULL, writer_main, &w[t]), 0);
	}
	for (unsigned t = 0; t < nthreads; t++) {
		pthread_join(th[t], NULL);
		cr_assert_eq(w[t].failures, 0, "%d writes failed: %s", w[t].failures, w[t].em);
	}
	/* Nested prefixes: directories sort among the files by name. */
	snprintf(path, sizeof(path), "%s/sub/x", dir);
	put_str(u, path, "x");
	snprintf(path, sizeof(path), "%s/sub2/deep/y", dir);
	put_str(u, path, "yy");
	snprintf(path, sizeof(path), "%s/a-first", dir);
	put_str(u, path, "a");

	all = list_all(u, dir, 1000, &n, &pages);
	cr_expect_eq(n, total + 3, "listed %zu of %u", n, total + 3);
	cr_expect_geq(pages, (int)((total + 3 + 999) / 1000), "only %d pages", pages);
	cr_assert_eq(strcmp(all[0].name, "a-first"), 0, "first is %s", all[0].name);
	cr_expect_not(all[0].st.is_dir);
	cr_expect_eq(all[0].st.size, 1);
	for (size_t i = 1; i < n; i++)
		cr_assert_lt(strcmp(all[i - 1].name, all[i].name), 0, "not sorted: '%s' then '%s'",
		             all[i - 1].name, all[i].name);
	for (unsigned i = 0; i < total && i + 1 < n; i++) {
		char want[32];

		snprintf(want, sizeof(want), "obj-%05u", i);
		cr_assert_str_eq(all[i + 1].name, want);
		cr_assert_not(all[i + 1].st.is_dir);
		cr_assert_eq(all[i + 1].st.size, (uint64_t)snprintf(NULL, 0, "object %u", i),
		             "%s size %" PRIu64, want, all[i + 1].st.size);
	}
	cr_expect_str_eq(all[n - 2].name, "sub");
	cr_expect(all[n - 2].st.is_dir, "%s is not a directory", all[n - 2].name);
	cr_expect_str_eq(all[n - 1].name, "sub2");
	cr_expect(all[n - 1].st.is_dir, "%s is not a directory (size %" PRIu64 ", version %s)",
	          all[n - 1].name, all[n - 1].st.size, all[n - 1].st.version);
	free_entries(all, n);

	/* Small pages resume exactly after the token (on a small directory:
	 * a page costs a listing of the whole level on some stores). */
	for (unsigned i = 0; i < 20; i++) {
		snprintf(path, sizeof(path), "%s/few/f%02u", base, i);
		put_str(u, path, "f");
	}
	snprintf(path, sizeof(path), "%s/few/f05.d/x", base);
	put_str(u, path, "x");
	snprintf(path, sizeof(path), "%s/few", base);
	all = list_all(u, path, 3, &n, &pages);
	cr_expect_eq(n, 21);
	cr_expect_eq(pages, 7);
	for (size_t i = 1; i < n; i++)
		cr_expect_lt(strcmp(all[i - 1].name, all[i].name), 0);
	cr_expect_str_eq(all[6].name, "f05.d");
	cr_expect(all[6].st.is_dir);
	free_entries(all, n);

	/* Deeper levels. */
	snprintf(path, sizeof(path), "%s/sub2", dir);
	all = list_all(u, path, 0, &n, &pages);
	cr_assert_eq(n, 1);
	cr_expect_str_eq(all[0].name, "deep");
	cr_expect(all[0].st.is_dir);
	free_entries(all, n);
	snprintf(path, sizeof(path), "%s/sub2/deep", dir);
	all = list_all(u, path, 0, &n, &pages);
	cr_assert_eq(n, 1);
	cr_expect_str_eq(all[0].name, "y");
	cr_expect_not(all[0].st.is_dir);
	cr_expect_eq(all[0].st.size, 2);
	free_entries(all, n);
	/* The test's own base holds exactly "few" and "many". */
	all = list_all(u, base, 0, &n, &pages);
	cr_assert_eq(n, 2);
	cr_expect_str_eq(all[0].name, "few");
	cr_expect_str_eq(all[1].name, "many");
	free_entries(all, n);
	cis_ufs_close(u);
}

Test(conf, odd_names)
{
	static const char *const names[] = {
	    "with space.txt",
	    "ünïcødé-日本語.bin",
	    "plus+percent%25&amp=;.txt",
	    "tilde~star*quote'\"paren().txt",
	    "sp ace dir",
	    "#hash?query",
	};
	cis_ufs *u = open_store();
	char base[128], path[512];
	struct cis_ufs_stat st;
	cis_errmsg em = {{0}};
	cis_ufs_entry *all;
	size_t n, got;
	int pages, err;

	base_for(base, sizeof(base), "odd name");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", base, names[i]);
		put_str(u, path, names[i]);
		err = cis_ufs_stat(u, path, &st, &em);
		cr_assert_eq(err, 0, "stat '%s': %s", path, cis_errmsg_or(&em, err));
		cr_expect_eq(st.size, strlen(names[i]));
		char *back = get_all(u, path, 256, &got);
		cr_expect_eq(got, strlen(names[i]));
		cr_expect_arr_eq(back, names[i], got);
		free(back);
	}
	all = list_all(u, base, 0, &n, &pages);
	cr_assert_eq(n, sizeof(names) / sizeof(names[0]));
	for (size_t i = 0; i < n; i++) {
		bool found = false;

		for (size_t j = 0; j < n; j++)
			found |= strcmp(all[i].name, names[j]) == 0;
		cr_expect(found, "listed a name not written: '%s'", all[i].name);
		if (i)
			cr_expect_lt(strcmp(all[i - 1].name, all[i].name), 0);
	}
	free_entries(all, n);
	cis_ufs_close(u);
}

Test(conf, ranged_reads)
{
	const size_t size = 3 * MiB + 17;
	cis_ufs *u = open_store();
	char base[128], path[256];
	unsigned char *data, *buf;
	cis_errmsg em = {{0}};
	size_t got;
	int err;

	base_for(base, sizeof(base), "range");
	snprintf(path, sizeof(path), "%s/blob", base);
	data = malloc(size);
	buf = malloc(size + 1);
	cr_assert(data && buf);
	fill_pattern(data, size, 42);
	put(u, path, data, size);

	const uint64_t offs[] = {0,       1,   7,           4095,     4096,      65537,
	                         MiB - 1, MiB, 2 * MiB + 3, size - 1, size - 100};
	const size_t lens[] = {1, 2, 100, 4096, 65536, MiB + 1, size};
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		for (size_t j = 0; j < sizeof(lens) / sizeof(lens[0]); j++) {
			size_t want = offs[i] + lens[j] > size ? size - offs[i] : lens[j];

			memset(buf, 0xAA, want);
			err = cis_ufs_read_buf(u, path, NULL, offs[i], lens[j], buf, &got, &em);
			cr_assert_eq(err, 0, "read %" PRIu64 "+%zu: %s", offs[i], lens[j],
			             cis_errmsg_or(&em, err));
			cr_assert_eq(got, want, "read %" PRIu64 "+%zu gave %zu", offs[i], lens[j],
			             got);
			cr_assert(memcmp(buf, data + offs[i], want) == 0,
			          "bytes differ at %" PRIu64 "+%zu", offs[i], lens[j]);
		}
	}
	/* At and past the end: nothing, and no error. */
	err = cis_ufs_read_buf(u, path, NULL, size, 10, buf, &got, &em);
	cr_expect_eq(err, 0, "read at end: %s", cis_errmsg_or(&em, err));
	cr_expect_eq(got, 0);
	err = cis_ufs_read_buf(u, path, NULL, size + 1000, 10, buf, &got, &em);
	cr_expect_eq(err, 0, "read past end: %s", cis_errmsg_or(&em, err));
	cr_expect_eq(got, 0);
	free(data);
	free(buf);
	cis_ufs_close(u);
}

struct hash_sink {
	cis_checksum *ck;
	uint64_t bytes;
	uint64_t abort_after; /* 0: never */
};

static int hash_sink_fn(void *arg, const void *data, size_t len)
{
	struct hash_sink *h = arg;

	cis_checksum_update(h->ck, data, len);
	h->bytes += len;
	if (h->abort_after && h->bytes >= h->abort_after)
		return -ECANCELED;
	return 0;
}

/* A temporary file of size pattern bytes; returns its fd at offset 0 and
 * the xxh3 of its contents. */
static int make_big_file(uint64_t size, uint64_t seed, uint64_t *digest)
{
	char tmpl[] = "/tmp/cis-conf-big-XXXXXX";
	cis_checksum *ck = cis_checksum_new();
	unsigned char *chunk = malloc(MiB);
	int fd = mkstemp(tmpl);

	cr_assert(fd >= 0 && ck && chunk);
	unlink(tmpl);
	for (uint64_t off = 0; off < size; off += MiB) {
		size_t n = size - off < MiB ? (size_t)(size - off) : MiB;

		fill_pattern(chunk, n, seed + off / MiB);
		cis_checksum_update(ck, chunk, n);
		cr_assert_eq(write(fd, chunk, n), (ssize_t)n);
	}
	*digest = cis_checksum_digest(ck);
	cis_checksum_free(ck);
	free(chunk);
	cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
	return fd;
}

Test(conf, big_multipart)
{
	uint64_t size = env_u64("CIS_TEST_UFS_BIG_MB", 100) * MiB + 12345, digest, got;
	cis_ufs *u = open_store();
	struct hash_sink h = {cis_checksum_new(), 0, 0};
	char base[128], path[256];
	struct cis_ufs_stat st;
	cis_errmsg em = {{0}};
	int fd, err;

	base_for(base, sizeof(base), "big");
	snprintf(path, sizeof(path), "%s/big.bin", base);
	fd = make_big_file(size, 7, &digest);
	err = cis_ufs_write_fd(u, path, fd, size, &em);
	close(fd);
	cr_assert_eq(err, 0, "write %s: %s", path, cis_errmsg_or(&em, err));
	err = cis_ufs_stat(u, path, &st, &em);
	cr_assert_eq(err, 0, "stat: %s", cis_errmsg_or(&em, err));
	cr_expect_eq(st.size, size);
	err = cis_ufs_read(u, path, st.version, 0, UINT64_MAX, hash_sink_fn, &h, &got, &em);
	cr_assert_eq(err, 0, "read: %s", cis_errmsg_or(&em, err));
	cr_expect_eq(got, size);
	cr_expect_eq(h.bytes, size);
	cr_expect_eq(cis_checksum_digest(h.ck), digest, "contents differ");

	/* A sink that refuses stops the read with its code. */
	cis_checksum_reset(h.ck);
	h.bytes = 0;
	h.abort_after = 1;
	err = cis_ufs_read(u, path, NULL, 0, UINT64_MAX, hash_sink_fn, &h, &got, &em);
	cr_expect_eq(err, -ECANCELED, "aborted read gave %d", err);
	cr_expect_leq(got, h.bytes); /* the refused chunk may or may not count */
	cr_expect_lt(h.bytes, size);
	cis_checksum_free(h.ck);

	/* write_fd must fail cleanly when the fd holds fewer bytes than said,
	 * and leave no object behind. */
	fd = make_big_file(1000, 1, &digest);
	snprintf(path, sizeof(path), "%s/short.bin", base);
	err = cis_ufs_write_fd(u, path, fd, 5000, &em);
	close(fd);
	cr_expect_lt(err, 0, "short source accepted");
	err = cis_ufs_stat(u, path, &st, &em);
	cr_expect_eq(err, -ENOENT, "object left after a failed write: %d", err);
	cis_ufs_close(u);
}

Test(conf, missing)
{
	cis_ufs *u = open_store();
	char base[128], path[256];
	struct cis_ufs_stat st;
	cis_errmsg em = {{0}};
	cis_ufs_page page;
	char buf[16];
	size_t got;
	int err;

	base_for(base, sizeof(base), "missing");
	snprintf(path, sizeof(path), "%s/no/such/key", base);
	err = cis_ufs_stat(u, path, &st, &em);
	cr_expect_eq(err, -ENOENT, "stat gave %d: %s", err, em.text);
	cr_expect(strstr(em.text, "no/such/key"), "message does not name the key: %s", em.text);
	em.text[0] = 0;
	err = cis_ufs_read_buf(u, path, NULL, 0, sizeof(buf), buf, &got, &em);
	cr_expect_eq(err, -ENOENT, "read gave %d: %s", err, em.text);
	cr_expect_eq(got, 0);
	/* A missing directory: -ENOENT, or an empty listing where the store
	 * cannot tell (S3 has no directories). */
	err = cis_ufs_list(u, path, NULL, 0, &page, &em);
	cr_expect(err == -ENOENT || (err == 0 && page.n == 0 && !page.next_token),
	          "list of a missing dir gave %d with %zu entries", err, page.n);
	cis_ufs_page_free(&page);
	cis_ufs_close(u);
}

Test(conf, delete)
{
	cis_ufs *u = open_store();
	char base[128], path[256];
	struct cis_ufs_stat st;
	cis_errmsg em = {{0}};
	int err;

	base_for(base, sizeof(base), "delete");
	snprintf(path, sizeof(path), "%s/d/victim", base);
	put_str(u, path, "doomed");
	err = cis_ufs_stat(u, path, &st, &em);
	cr_assert_eq(err, 0, "%s", em.text);
	err = cis_ufs_delete(u, path, &em);
	cr_assert_eq(err, 0, "delete: %s", cis_errmsg_or(&em, err));
	err = cis_ufs_stat(u, path, &st, &em);
	cr_expect_eq(err, -ENOENT, "stat after delete gave %d", err);
	err = cis_ufs_delete(u, path, &em);
	cr_expect(err == -ENOENT || (err == 0 && is_s3()), "second delete gave %d", err);
	cis_ufs_close(u);
}

Test(conf, version_changes)
{
	cis_ufs *u = open_store();
	char base[128], path[256], a[4096], b[4096], buf[4096];
	struct cis_ufs_stat st1, st2;
	cis_errmsg em = {{0}};
	size_t got;
	int err;

	base_for(base, sizeof(base), "version");
	snprintf(path, sizeof(path), "%s/v", base);
	fill_pattern(a, sizeof(a), 100);
	fill_pattern(b, sizeof(b), 200);
	put(u, path, a, sizeof(a));
	err = cis_ufs_stat(u, path, &st1, &em);
	cr_assert_eq(err, 0, "%s", em.text);
	err = cis_ufs_read_buf(u, path, st1.version, 0, sizeof(buf), buf, &got, &em);
	cr_assert_eq(err, 0, "read with the current version: %s", cis_errmsg_or(&em, err));

	/* Same size, different bytes, right away. */
	put(u, path, b, sizeof(b));
	err = cis_ufs_stat(u, path, &st2, &em);
	cr_assert_eq(err, 0, "%s", em.text);
	cr_expect_str_neq(st1.version, st2.version, "version unchanged after overwrite: %s",
	                  st1.version);

	em.text[0] = 0;
	err = cis_ufs_read_buf(u, path, st1.version, 0, sizeof(buf), buf, &got, &em);
	cr_expect_eq(err, -CIS_E_CHANGED, "read with the old version gave %d", err);
	cr_expect_eq(got, 0, "bytes delivered for the wrong version");
	cr_expect(em.text[0], "no message");

	err = cis_ufs_read_buf(u, path, st2.version, 100, 1000, buf, &got, &em);
	cr_assert_eq(err, 0, "read with the new version: %s", cis_errmsg_or(&em, err));
	cr_expect_eq(got, 1000);
	cr_expect_arr_eq(buf, b + 100, 1000);
	cis_ufs_close(u);
}

Test(conf, bad_paths)
{
	static const char *const bad[] = {"/abs", "a//b", "a/./b", "../x", "a/..", "a/", "."};
	cis_ufs *u = open_store();
	char long_path[4100], buf[4];
	struct cis_ufs_stat st;
	cis_errmsg em = {{0}};
	cis_ufs_page page;
	size_t got;

	memset(long_path, 'x', sizeof(long_path) - 1);
	long_path[sizeof(long_path) - 1] = 0;
	for (size_t i = 0; i <= sizeof(bad) / sizeof(bad[0]); i++) {
		const char *p = i < sizeof(bad) / sizeof(bad[0]) ? bad[i] : long_path;

		em.text[0] = 0;
		cr_expect_eq(cis_ufs_stat(u, p, &st, &em), -EINVAL, "stat '%.20s'", p);
		cr_expect(strstr(em.text, "invalid path"), "message: %s", em.text);
		cr_expect_eq(cis_ufs_read_buf(u, p, NULL, 0, 4, buf, &got, &em), -EINVAL);
		cr_expect_eq(cis_ufs_write_buf(u, p, "x", 1, &em), -EINVAL);
		cr_expect_eq(cis_ufs_delete(u, p, &em), -EINVAL);
		cr_expect_eq(cis_ufs_list(u, p, NULL, 0, &page, &em), -EINVAL);
		cr_expect_eq(page.n, 0);
		cis_ufs_page_free(&page);
	}
	/* The root is a directory, not an object. */
	cr_expect_lt(cis_ufs_write_buf(u, "", "x", 1, &em), 0);
	cr_expect_lt(cis_ufs_delete(u, "", &em), 0);
	cis_ufs_close(u);
}

/* ---- POSIX only: links must stay beneath the root ---------------------- */

Test(posix, symlinks_stay_beneath_root)
{
	const char *uri = getenv("CIS_TEST_UFS_URI");
	char root[512], base[128], dirp[700], lnk[800], tgt[800], buf[64];
	struct cis_ufs_stat st;
	cis_errmsg em = {{0}};
	cis_ufs *u;
	size_t got;
	int err;

	if (!is_file())
		cr_skip_test("not a file:// store");
	snprintf(root, sizeof(root), "%s", uri + 7);
	u = open_store();
	base_for(base, sizeof(base), "links");
	snprintf(tgt, sizeof(tgt), "%s/real/file", base);
	put_str(u, tgt, "inside");
	snprintf(dirp, sizeof(dirp), "%s/%s", root, base);

	/* A relative link to a file inside the root is followed. */
	snprintf(lnk, sizeof(lnk), "%s/in", dirp);
	cr_assert_eq(symlink("real/file", lnk), 0);
	snprintf(tgt, sizeof(tgt), "%s/in", base);
	err = cis_ufs_stat(u, tgt, &st, &em);
	cr_assert_eq(err, 0, "link inside: %s", em.text);
	cr_expect_eq(st.size, 6);
	err = cis_ufs_read_buf(u, tgt, NULL, 0, sizeof(buf), buf, &got, &em);
	cr_assert_eq(err, 0, "%s", em.text);
	cr_expect_arr_eq(buf, "inside", 6);

	/* Absolute and ".."-escaping links are refused. */
	snprintf(lnk, sizeof(lnk), "%s/abs", dirp);
	cr_assert_eq(symlink("/etc/passwd", lnk), 0);
	snprintf(lnk, sizeof(lnk), "%s/up", dirp);
	cr_assert_eq(symlink("../../../../../../../../etc", lnk), 0);
	snprintf(tgt, sizeof(tgt), "%s/abs", base);
	cr_expect_eq(cis_ufs_stat(u, tgt, &st, &em), -EACCES);
	cr_expect_eq(cis_ufs_read_buf(u, tgt, NULL, 0, sizeof(buf), buf, &got, &em), -EACCES);
	cr_expect_eq(got, 0);
	snprintf(tgt, sizeof(tgt), "%s/up/passwd", base);
	cr_expect_eq(cis_ufs_stat(u, tgt, &st, &em), -EACCES);
	cr_expect_eq(cis_ufs_write_buf(u, tgt, "x", 1, &em), -EACCES);
	snprintf(tgt, sizeof(tgt), "%s/up", base);
	cis_ufs_page page;
	cr_expect_eq(cis_ufs_list(u, tgt, NULL, 0, &page, &em), -EACCES);
	cis_ufs_page_free(&page);

	/* A listing shows every link as itself, with its text as it is; only
	 * reading through one is held beneath the root. */
	size_t n;
	int pages;
	cis_ufs_entry *all = list_all(u, base, 0, &n, &pages);
	cr_assert_eq(n, 4, "listed %zu entries", n);
	const char *names[] = {"abs", "in", "real", "up"};
	const char *targets[] = {"/etc/passwd", "real/file", NULL, "../../../../../../../../etc"};
	for (size_t i = 0; i < n; i++) {
		cr_expect_str_eq(all[i].name, names[i]);
		if (!targets[i]) {
			cr_expect_null(all[i].link_target, "%s", names[i]);
			cr_expect(all[i].st.is_dir);
			continue;
		}
		cr_assert_not_null(all[i].link_target, "%s is listed as a link", names[i]);
		cr_expect_str_eq(all[i].link_target, targets[i]);
		cr_expect_eq(all[i].st.size, strlen(targets[i]));
		cr_expect_not(all[i].st.is_dir);
		cr_expect_str_eq(all[i].st.version, "");
	}
	free_entries(all, n);
	cis_ufs_close(u);
}

Test(posix, version_is_size_mtime_ctime)
{
	const char *uri = getenv("CIS_TEST_UFS_URI");
	char base[128], path[256], full[900], want[80];
	struct cis_ufs_stat st;
	struct stat sb;
	cis_errmsg em = {{0}};
	cis_ufs *u;

	if (!is_file())
		cr_skip_test("not a file:// store");
	u = open_store();
	base_for(base, sizeof(base), "vfmt");
	snprintf(path, sizeof(path), "%s/f", base);
	put_str(u, path, "12345");
	cr_assert_eq(cis_ufs_stat(u, path, &st, &em), 0, "%s", em.text);
	snprintf(full, sizeof(full), "%s/%s", uri + 7, path);
	cr_assert_eq(stat(full, &sb), 0);
	snprintf(want, sizeof(want), "5-%" PRId64 "-%" PRId64,
	         (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec,
	         (int64_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec);
	cr_expect_str_eq(st.version, want);
	cr_expect_eq(st.mode, sb.st_mode & 07777);
	/* No temporary files are left next to it. */
	snprintf(full, sizeof(full), "%s/%s", uri + 7, base);
	size_t n;
	int pages;
	cis_ufs_entry *all = list_all(u, base, 0, &n, &pages);
	cr_expect_eq(n, 1);
	free_entries(all, n);
	cis_ufs_close(u);
}

/* ---- S3 only ----------------------------------------------------------- */

Test(s3, wrong_secret_denied)
{
	cis_ufs *u;
	cis_errmsg em = {{0}};
	struct cis_ufs_stat st;
	int err;

	if (!is_s3())
		cr_skip_test("not an s3:// store");
	u = open_store_with("definitely-not-the-secret");
	err = cis_ufs_check(u, &em);
	cr_expect_eq(err, -CIS_E_DENIED, "check with a wrong secret gave %d: %s", err, em.text);
	cr_expect(strstr(em.text, "403") || strstr(em.text, "SignatureDoesNotMatch"),
	          "message does not say why: %s", em.text);
	cr_expect_null(strstr(em.text, "definitely-not-the-secret"), "secret echoed");
	em.text[0] = 0;
	err = cis_ufs_stat(u, "anything", &st, &em);
	cr_expect_eq(err, -CIS_E_DENIED, "stat with a wrong secret gave %d: %s", err, em.text);
	cis_ufs_close(u);
}

/* Runs only when the script says how to kill the store, as the last test:
 * the store is killed -9 while a large read streams. The read must end
 * either with every byte right or with an error; the bytes delivered
 * before an error must be the object's own, in order. */
struct kill_sink {
	const unsigned char *want;
	uint64_t off, bytes, size;
	bool killed, wrong;
	const char *cmd;
};

static int kill_sink_fn(void *arg, const void *data, size_t len)
{
	struct kill_sink *k = arg;

	if (k->off + k->bytes + len > k->size ||
	    memcmp(data, k->want + k->off + k->bytes, len) != 0)
		k->wrong = true;
	k->bytes += len;
	if (!k->killed && k->bytes >= 256 * 1024) {
		k->killed = true;
		if (system(k->cmd) != 0)
			fprintf(stderr, "kill command failed: %s\n", k->cmd);
	}
	return 0;
}

Test(faults, killed_mid_read, .timeout = 240)
{
	const char *cmd = getenv("CIS_TEST_UFS_KILL_CMD");
	const size_t size = 48 * MiB;
	struct kill_sink k = {0};
	char base[128], path[256];
	cis_errmsg em = {{0}};
	unsigned char *data;
	uint64_t got;
	cis_ufs *u;
	int err;

	if (!cmd || !*cmd)
		cr_skip_test("CIS_TEST_UFS_KILL_CMD not set");
	u = open_store();
	base_for(base, sizeof(base), "kill");
	snprintf(path, sizeof(path), "%s/big", base);
	data = malloc(size);
	cr_assert_not_null(data);
	fill_pattern(data, size, 9);
	put(u, path, data, size);
	k = (struct kill_sink){data, 4096, 0, size, false, false, cmd};
	err = cis_ufs_read(u, path, NULL, 4096, size - 4096, kill_sink_fn, &k, &got, &em);
	cr_assert(k.killed, "the store was never killed (read %" PRIu64 " bytes)", k.bytes);
	cr_expect_not(k.wrong, "wrong bytes delivered");
	cr_expect_eq(got, k.bytes);
	if (err == 0) {
		cr_expect_eq(k.bytes, size - 4096, "read succeeded short: %" PRIu64, k.bytes);
	} else {
		cr_expect(err == -CIS_E_STORE || err == -EIO || err == -CIS_E_CLOSED,
		          "unexpected code %d (%s)", err, cis_errmsg_or(&em, err));
		cr_expect(em.text[0], "no message for the failed read");
		fprintf(stderr, "killed mid-read: %s after %" PRIu64 " bytes: %s\n",
		        cis_strerror(err), k.bytes, em.text);
	}
	free(data);
	cis_ufs_close(u);
}
