/* Configuration layers: default < file < CISTERN_* environment < flags. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#include "cistern/config.h"

static const cis_opt opts[] = {
    {"config", "FILE", NULL, "config file", false, 0},
    {"rpc-port", "N", "19600", "RPC port", false, 0},
    {"http-port", "N", "19601", "HTTP port", false, 0},
    {"data-dir", "DIR", "/var/lib/cistern", "state", false, 0},
    {"cache-dir", "DIR:SIZE", NULL, "cache dir", true, 0},
    {"foreground", NULL, NULL, "stay in the foreground", false, 'f'},
    CIS_OPT_END,
};

static char path[64];

static void write_file(const char *text)
{
	int fd;

	snprintf(path, sizeof(path), "/tmp/cis-test-config-XXXXXX");
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void clear_env(void)
{
	unsetenv("CISTERN_RPC_PORT");
	unsetenv("CISTERN_HTTP_PORT");
	unsetenv("CISTERN_DATA_DIR");
	unsetenv("CISTERN_CACHE_DIR");
	unsetenv("CISTERN_CONFIG");
}

TestSuite(config, .init = clear_env);

Test(config, precedence_flag_env_file_default)
{
	cis_config *cfg;
	cis_errmsg em = {{0}};
	char *argv[] = {"prog", "--config", path, "--rpc-port", "3", NULL};
	int64_t v;

	write_file("# comment\nrpc-port = 1\nhttp_port = 2\ndata-dir = \"/from/file\"\n");
	argv[2] = path;
	setenv("CISTERN_RPC_PORT", "10", 1);
	setenv("CISTERN_HTTP_PORT", "20", 1);
	cr_assert_eq(cis_config_load(&cfg, opts, "CISTERN_", 5, argv, 1, &em), 0, "%s", em.text);
	cr_assert_eq(cis_config_int(cfg, "rpc-port", 1, 65535, &v, &em), 0);
	cr_assert_eq(v, 3, "flag wins");
	cr_assert_eq(cis_config_int(cfg, "http-port", 1, 65535, &v, &em), 0);
	cr_assert_eq(v, 20, "environment beats file");
	cr_assert_str_eq(cis_config_str(cfg, "data-dir"), "/from/file", "file beats default");
	cr_assert(cis_config_is_set(cfg, "data-dir"));
	cis_config_free(cfg);
	unlink(path);
}

Test(config, defaults_and_positionals)
{
	cis_config *cfg;
	char *argv[] = {"prog", "/mnt/x", "-f", "--", "--not-a-flag", NULL};

	cr_assert_eq(cis_config_load(&cfg, opts, "CISTERN_", 5, argv, 1, NULL), 0);
	cr_assert_str_eq(cis_config_str(cfg, "rpc-port"), "19600");
	cr_assert_not(cis_config_is_set(cfg, "rpc-port"));
	cr_assert(cis_config_bool(cfg, "foreground"));
	cr_assert_eq(cis_config_npos(cfg), 2);
	cr_assert_str_eq(cis_config_pos(cfg, 0), "/mnt/x");
	cr_assert_str_eq(cis_config_pos(cfg, 1), "--not-a-flag");
	cis_config_free(cfg);
}

Test(config, multi_values_replace_lower_layer)
{
	cis_config *cfg;
	const char *const *vals;
	char *argv[] = {"prog", "--cache-dir", "/a:1G", "--cache-dir=/b:2G", NULL};

	setenv("CISTERN_CACHE_DIR", "/env:1G", 1);
	cr_assert_eq(cis_config_load(&cfg, opts, "CISTERN_", 4, argv, 1, NULL), 0);
	cr_assert_eq(cis_config_multi(cfg, "cache-dir", &vals), 2);
	cr_assert_str_eq(vals[0], "/a:1G");
	cr_assert_str_eq(vals[1], "/b:2G");
	cis_config_free(cfg);
}

Test(config, errors_are_clear)
{
	cis_config *cfg;
	cis_errmsg em = {{0}};
	char *unknown[] = {"prog", "--bogus", "1", NULL};
	char *missing[] = {"prog", "--rpc-port", NULL};
	char *badfile[] = {"prog", "--config", "/nonexistent/cistern.conf", NULL};
	char *badint[] = {"prog", "--rpc-port", "70000", NULL};
	int64_t v;

	cr_assert_eq(cis_config_load(&cfg, opts, NULL, 3, unknown, 1, &em), -CIS_E_CONFIG);
	cr_assert_str_eq(em.text, "unknown flag '--bogus'");
	cr_assert_eq(cis_config_load(&cfg, opts, NULL, 2, missing, 1, &em), -CIS_E_CONFIG);
	cr_assert(strstr(em.text, "needs a value") != NULL, "%s", em.text);
	cr_assert_eq(cis_config_load(&cfg, opts, NULL, 3, badfile, 1, &em), -CIS_E_CONFIG);
	cr_assert(strstr(em.text, "/nonexistent/cistern.conf") != NULL, "%s", em.text);
	write_file("rpc-port 5\n");
	badfile[2] = path;
	cr_assert_eq(cis_config_load(&cfg, opts, NULL, 3, badfile, 1, &em), -CIS_E_CONFIG);
	cr_assert(strstr(em.text, ":1: expected key = value") != NULL, "%s", em.text);
	unlink(path);
	/* A comment after a value: it was taken into the value. */
	write_file("# ok\ndata-dir = /var/lib/x   # the big disk\n");
	cr_assert_eq(cis_config_load(&cfg, opts, NULL, 3, badfile, 1, &em), -CIS_E_CONFIG);
	cr_assert(strstr(em.text, ":2: a comment after the value of 'data-dir'") != NULL, "%s",
	          em.text);
	unlink(path);
	write_file("data-dir = \"/var/lib/x #2\"\n"); /* quoted: the value */
	cr_assert_eq(cis_config_load(&cfg, opts, NULL, 3, badfile, 1, &em), 0, "%s", em.text);
	cr_assert_str_eq(cis_config_str(cfg, "data-dir"), "/var/lib/x #2");
	cis_config_free(cfg);
	unlink(path);
	/* A directory given as the file (it used to load as an empty one). */
	badfile[2] = "/tmp";
	cr_assert_eq(cis_config_load(&cfg, opts, NULL, 3, badfile, 1, &em), -CIS_E_CONFIG);
	cr_assert(strstr(em.text, "/tmp: is a directory") != NULL, "%s", em.text);
	cr_assert_eq(cis_config_load(&cfg, opts, NULL, 3, badint, 1, &em), 0);
	cr_assert_eq(cis_config_int(cfg, "rpc-port", 1, 65535, &v, &em), -CIS_E_CONFIG);
	cr_assert(strstr(em.text, "70000") != NULL);
	cis_config_free(cfg);
	/* strtoll would take a sign or a blank: a count is digits only. */
	badint[2] = "+5";
	cr_assert_eq(cis_config_load(&cfg, opts, NULL, 3, badint, 1, &em), 0);
	cr_assert_eq(cis_config_int(cfg, "rpc-port", 1, 65535, &v, &em), -CIS_E_CONFIG);
	cr_assert(strstr(em.text, "'+5' is not an integer") != NULL, "%s", em.text);
	cis_config_free(cfg);
}

Test(config, help_is_reported)
{
	cis_config *cfg;
	char *argv[] = {"prog", "--help", NULL};

	cr_assert_eq(cis_config_load(&cfg, opts, NULL, 2, argv, 1, NULL), 1);
	cis_config_free(cfg);
}

Test(config, version_is_reported)
{
	cis_config *cfg;
	char *argv[] = {"prog", "--rpc-port", "5", "--version", NULL};
	char *with_value[] = {"prog", "--version=2", NULL};
	cis_errmsg em = {{0}};

	cr_assert_eq(cis_config_load(&cfg, opts, NULL, 4, argv, 1, NULL), 2);
	cis_config_free(cfg);
	cr_assert_eq(cis_config_load(&cfg, opts, NULL, 2, with_value, 1, &em), -CIS_E_CONFIG,
	             "--version takes no value");
	cr_assert(strstr(em.text, "version") != NULL, "%s", em.text);
}

Test(parse, sizes)
{
	uint64_t v;

	cr_assert_eq(cis_parse_size("4096", &v), 0);
	cr_assert_eq(v, 4096);
	cr_assert_eq(cis_parse_size("64k", &v), 0);
	cr_assert_eq(v, 65536);
	cr_assert_eq(cis_parse_size("200G", &v), 0);
	cr_assert_eq(v, 200ull << 30);
	cr_assert_eq(cis_parse_size("1.5MiB", &v), 0);
	cr_assert_eq(v, 1572864);
	cr_assert_eq(cis_parse_size("2TB", &v), 0);
	cr_assert_eq(v, 2ull << 40);
	cr_assert_eq(cis_parse_size("", &v), -EINVAL);
	cr_assert_eq(cis_parse_size("-1G", &v), -EINVAL);
	/* Counts: digits only, up to the bound given. */
	cr_assert_eq(cis_parse_decimal("42", 100, &v), 0);
	cr_assert_eq(v, 42);
	cr_assert_eq(cis_parse_decimal("18446744073709551615", UINT64_MAX, &v), 0);
	cr_assert_eq(v, UINT64_MAX);
	cr_assert_eq(cis_parse_decimal("18446744073709551616", UINT64_MAX, &v), -ERANGE);
	cr_assert_eq(cis_parse_decimal("101", 100, &v), -ERANGE);
	const char *not_counts[] = {"", " 2", "+2", "-0", "2 ", "0x10", "1.5", "2k"};
	for (size_t i = 0; i < sizeof(not_counts) / sizeof(*not_counts); i++)
		cr_assert_eq(cis_parse_decimal(not_counts[i], 100, &v), -EINVAL, "'%s'",
		             not_counts[i]);
	cr_assert_eq(cis_parse_size("12X", &v), -EINVAL);
	cr_assert_eq(cis_parse_size("1Gx", &v), -EINVAL);
	cr_assert_eq(cis_parse_size("99999999999P", &v), -ERANGE);
	/* Only digits with an optional fraction (strtod would take these). */
	cr_assert_eq(cis_parse_size("0x10", &v), -EINVAL);
	cr_assert_eq(cis_parse_size("0x1p20", &v), -EINVAL);
	cr_assert_eq(cis_parse_size("1e3M", &v), -EINVAL);
	cr_assert_eq(cis_parse_size("1.", &v), -EINVAL);
	cr_assert_eq(cis_parse_size(" 1", &v), -EINVAL);
	/* Whole numbers are exact past 2^53 (cookies and ids ride on this). */
	cr_assert_eq(cis_parse_size("9007199254740993", &v), 0);
	cr_assert_eq(v, 9007199254740993ull);
	cr_assert_eq(cis_parse_size("18446744073709551615", &v), 0);
	cr_assert_eq(v, UINT64_MAX);
	cr_assert_eq(cis_parse_size("16777216T", &v), -ERANGE);
	/* A fraction of a byte is no size. */
	cr_assert_eq(cis_parse_size("1.9", &v), -EINVAL);
	cr_assert_eq(cis_parse_size("1.5B", &v), -EINVAL);
}

Test(parse, durations)
{
	uint64_t v;

	cr_assert_eq(cis_parse_duration_ms("300", &v), 0);
	cr_assert_eq(v, 300000);
	cr_assert_eq(cis_parse_duration_ms("500ms", &v), 0);
	cr_assert_eq(v, 500);
	cr_assert_eq(cis_parse_duration_ms("5m", &v), 0);
	cr_assert_eq(v, 300000);
	cr_assert_eq(cis_parse_duration_ms("1h", &v), 0);
	cr_assert_eq(v, 3600000);
	cr_assert_eq(cis_parse_duration_ms("1w", &v), -EINVAL);
	cr_assert_eq(cis_parse_duration_ms("m", &v), -EINVAL);
	cr_assert_eq(cis_parse_duration_ms("0x10", &v), -EINVAL);
	cr_assert_eq(cis_parse_duration_ms("1e3", &v), -EINVAL);
	cr_assert_eq(cis_parse_duration_ms("1.5s", &v), 0);
	cr_assert_eq(v, 1500);
}

Test(parse, hostport)
{
	char host[64];
	uint16_t port;

	cr_assert_eq(cis_parse_hostport("127.0.0.1:19600", host, sizeof(host), &port), 0);
	cr_assert_str_eq(host, "127.0.0.1");
	cr_assert_eq(port, 19600);
	cr_assert_eq(cis_parse_hostport("[::1]:80", host, sizeof(host), &port), 0);
	cr_assert_str_eq(host, "::1");
	cr_assert_eq(cis_parse_hostport("host", host, sizeof(host), &port), -EINVAL);
	cr_assert_eq(cis_parse_hostport("host:0", host, sizeof(host), &port), -EINVAL);
	cr_assert_eq(cis_parse_hostport("host:65536", host, sizeof(host), &port), -EINVAL);
	cr_assert_eq(cis_parse_hostport(":80", host, sizeof(host), &port), -EINVAL);
	cr_assert_eq(cis_parse_hostport("h:80x", host, sizeof(host), &port), -EINVAL);
}

Test(format, sizes)
{
	char out[32];

	cis_fmt_size(512, out, sizeof(out));
	cr_assert_str_eq(out, "512 B");
	cis_fmt_size(1536ull << 20, out, sizeof(out));
	cr_assert_str_eq(out, "1.5 GiB");
}

Test(config, config_flag_understood_without_table_entry)
{
	static const cis_opt bare[] = {
	    {"rpc-port", "N", "19600", "RPC port", false, 0},
	    CIS_OPT_END,
	};
	cis_config *cfg;
	cis_errmsg em = {{0}};
	char *argv[] = {"prog", "--config", path, NULL};

	write_file("rpc-port = 7\n");
	argv[2] = path;
	cr_assert_eq(cis_config_load(&cfg, bare, NULL, 3, argv, 1, &em), 0, "%s", em.text);
	cr_assert_str_eq(cis_config_str(cfg, "rpc-port"), "7");
	cis_config_free(cfg);
	unlink(path);
}
