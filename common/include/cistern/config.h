/* Configuration from four layers, the later winning:
 *   defaults < config file (--config FILE) < CISTERN_* environment < flags.
 *
 * Options are declared once in a table. A flag --rpc-port 19600 (or
 * --rpc-port=19600), a file line "rpc-port = 19600" (or rpc_port) and the
 * variable CISTERN_RPC_PORT all set the option "rpc-port". Options marked
 * multi collect every value (--cache-dir twice); a higher layer that sets a
 * multi option replaces the lower layer's list. Arguments that are not flags
 * are kept in order as positionals; "--" ends the flags. */
#ifndef CISTERN_CONFIG_H
#define CISTERN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cistern/error.h"

typedef struct cis_opt {
	const char *name; /* "rpc-port" */
	const char *arg;  /* placeholder shown in help ("N"); NULL for a switch */
	const char *def;  /* default value, or NULL */
	const char *help; /* one line */
	bool multi;       /* may be given more than once */
	char short_name;  /* 'f' for -f, or 0 */
} cis_opt;

/* Terminate option tables with CIS_OPT_END. */
#define CIS_OPT_END                                                                                \
	{                                                                                          \
		NULL, NULL, NULL, NULL, false, 0                                                   \
	}

typedef struct cis_config cis_config;

/* Parse argv[first..argc) against opts (which must outlive the config) and
 * the layers above. "--config FILE", "--help" and "--version" are always
 * understood; with env_prefix NULL the environment is not read. On success
 * *out is the caller's (cis_config_free). Returns 0; 1 when --help was
 * given (usage was not printed: call cis_config_usage); 2 when --version
 * was (cis_version_print); or -CIS_E_CONFIG with em saying what is wrong
 * (unknown flag, missing value, unreadable file, bad line). */
int cis_config_load(cis_config **out, const cis_opt *opts, const char *env_prefix, int argc,
                    char **argv, int first, cis_errmsg *em);
void cis_config_free(cis_config *cfg);

/* Print a usage text: synopsis line, then each option with its help. */
void cis_config_usage(const cis_opt *opts, FILE *out, const char *synopsis);

/* The winning value, or the default, or NULL. Borrowed from cfg. */
const char *cis_config_str(const cis_config *cfg, const char *name);
/* Whether the option was set by any layer (not counting the default). */
bool cis_config_is_set(const cis_config *cfg, const char *name);
/* A switch or boolean: true for "1", "true", "yes", "on" or a bare flag. */
bool cis_config_bool(const cis_config *cfg, const char *name);
/* A count in [min, max] (min >= 0), digits only (cis_parse_decimal). 0,
 * -ENOENT when unset with no default, or -CIS_E_CONFIG (em says). */
int cis_config_int(const cis_config *cfg, const char *name, int64_t min, int64_t max, int64_t *out,
                   cis_errmsg *em);
int cis_config_size(const cis_config *cfg, const char *name, uint64_t *out, cis_errmsg *em);
/* Seconds with an optional unit: 300, 5m, 1h, 500ms, 2d. Result in ms. */
int cis_config_duration_ms(const cis_config *cfg, const char *name, uint64_t *out, cis_errmsg *em);
/* Values of a multi option in order; *vals borrowed from cfg. */
size_t cis_config_multi(const cis_config *cfg, const char *name, const char *const **vals);

size_t cis_config_npos(const cis_config *cfg);
const char *cis_config_pos(const cis_config *cfg, size_t i);

/* A count: decimal digits only (no sign, blank, suffix or fraction, which
 * strtoull would take or skip), at most max. 0, -EINVAL or -ERANGE. */
int cis_parse_decimal(const char *s, uint64_t max, uint64_t *out);
/* "200G", "1.5M", "4096", "64k": binary units K/M/G/T (KiB...), optional
 * trailing "B"/"iB". 0 or -EINVAL / -ERANGE. */
int cis_parse_size(const char *s, uint64_t *out);
/* See cis_config_duration_ms. 0 or -EINVAL / -ERANGE. */
int cis_parse_duration_ms(const char *s, uint64_t *out);
/* The longest sync interval a mount takes: 100 years, as TTLs. The master
 * refuses more; cistern mount checks it first, to name its flag. */
#define CIS_SYNC_MAX_MS (100ll * 366 * 86400 * 1000)
/* Bounds the master refuses past; the CLI checks them first, to name its
 * flag. */
#define CIS_REPLICAS_MAX 64                    /* copies of a block a policy or a load asks for */
#define CIS_PARALLEL_MAX 256                   /* batches a load job keeps in flight */
#define CIS_TTL_MAX_S    (100ll * 366 * 86400) /* a TTL: in ns it still fits an int64 */
/* A cache dir's capacity: room for the sums and watermark products of all
 * the dirs of a worker. */
#define CIS_CACHE_DIR_MAX (1ull << 60)
/* "1.5 GiB" style, for people. */
void cis_fmt_size(uint64_t bytes, char *out, size_t outlen);
/* "host:port" into parts; host may be "[v6]". 0 or -EINVAL. */
int cis_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port);

#endif
