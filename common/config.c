#include "cistern/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Layers, lowest first. A value from a higher layer hides the lower ones. */
enum layer { LAYER_FILE, LAYER_ENV, LAYER_FLAG, LAYER_COUNT };

struct values {
	char **v;
	size_t n;
};

struct cis_config {
	const cis_opt *opts;
	size_t nopts;
	struct values *vals; /* [nopts * LAYER_COUNT] */
	char **pos;
	size_t npos;
};

static const cis_opt *find_opt(const cis_config *cfg, const char *name, size_t len, size_t *idx)
{
	for (size_t i = 0; i < cfg->nopts; i++) {
		const char *n = cfg->opts[i].name;
		size_t j;

		/* '-' and '_' are the same in option names. */
		for (j = 0; j < len && n[j]; j++) {
			char a = name[j] == '_' ? '-' : (char)tolower((unsigned char)name[j]);
			if (a != n[j])
				break;
		}
		if (j == len && n[j] == 0) {
			*idx = i;
			return &cfg->opts[i];
		}
	}
	return NULL;
}

static struct values *slot(const cis_config *cfg, size_t idx, enum layer layer)
{
	return &cfg->vals[idx * LAYER_COUNT + layer];
}

static void values_clear(struct values *v)
{
	for (size_t i = 0; i < v->n; i++)
		free(v->v[i]);
	free(v->v);
	v->v = NULL;
	v->n = 0;
}

/* Single-valued options keep the last value set in a layer. */
static int put(cis_config *cfg, size_t idx, enum layer layer, const char *value)
{
	struct values *v = slot(cfg, idx, layer);
	char *copy = strdup(value);
	char **arr;

	if (!copy)
		return -ENOMEM;
	if (!cfg->opts[idx].multi)
		values_clear(v);
	arr = realloc(v->v, (v->n + 1) * sizeof(*arr));
	if (!arr) {
		free(copy);
		return -ENOMEM;
	}
	v->v = arr;
	v->v[v->n++] = copy;
	return 0;
}

static int add_pos(cis_config *cfg, const char *arg)
{
	char **arr = realloc(cfg->pos, (cfg->npos + 1) * sizeof(*arr));

	if (!arr)
		return -ENOMEM;
	cfg->pos = arr;
	cfg->pos[cfg->npos] = strdup(arg);
	if (!cfg->pos[cfg->npos])
		return -ENOMEM;
	cfg->npos++;
	return 0;
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	return s;
}

static int load_file(cis_config *cfg, const char *path, cis_errmsg *em)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	int lineno = 0, r = 0;

	struct stat st;

	if (!f)
		return cis_fail(em, -CIS_E_CONFIG, "config %s: %s", path, strerror(errno));
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		fclose(f);
		return cis_fail(em, -CIS_E_CONFIG, "config %s: is a directory", path);
	}
	while (fgets(line, sizeof(line), f)) {
		char *s, *eq, *key, *value;
		size_t idx, vlen;

		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			r = cis_fail(em, -CIS_E_CONFIG, "config %s:%d: line too long", path,
			             lineno);
			break;
		}
		s = trim(line);
		if (*s == 0 || *s == '#')
			continue;
		eq = strchr(s, '=');
		if (!eq) {
			r = cis_fail(em, -CIS_E_CONFIG, "config %s:%d: expected key = value", path,
			             lineno);
			break;
		}
		*eq = 0;
		key = trim(s);
		value = trim(eq + 1);
		vlen = strlen(value);
		if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"') {
			value[vlen - 1] = 0;
			value++;
		} else if (strstr(value, " #") || strstr(value, "\t#")) {
			/* Taken whole, "10.0.0.5  # public NIC" would be the value
			 * (a host a worker advertises, a socket's name): say so. */
			r = cis_fail(
			    em, -CIS_E_CONFIG,
			    "config %s:%d: a comment after the value of '%s' (comments go on "
			    "lines of their own; quote a value that holds \" #\")",
			    path, lineno, key);
			break;
		}
		if (!find_opt(cfg, key, strlen(key), &idx) ||
		    strcmp(cfg->opts[idx].name, "config") == 0) {
			r = cis_fail(em, -CIS_E_CONFIG, "config %s:%d: unknown option '%s'", path,
			             lineno, key);
			break;
		}
		r = put(cfg, idx, LAYER_FILE, value);
		if (r)
			break;
	}
	if (!r && ferror(f))
		r = cis_fail(em, -CIS_E_CONFIG, "config %s: read failed", path);
	fclose(f);
	return r;
}

static int load_env(cis_config *cfg, const char *prefix)
{
	size_t plen = strlen(prefix);

	for (size_t i = 0; i < cfg->nopts; i++) {
		char name[128];
		const char *v;
		size_t j;

		if (plen + strlen(cfg->opts[i].name) + 1 > sizeof(name))
			continue;
		memcpy(name, prefix, plen);
		for (j = 0; cfg->opts[i].name[j]; j++) {
			char c = cfg->opts[i].name[j];
			name[plen + j] = c == '-' ? '_' : (char)toupper((unsigned char)c);
		}
		name[plen + j] = 0;
		v = getenv(name);
		if (v) {
			int r = put(cfg, i, LAYER_ENV, v);
			if (r)
				return r;
		}
	}
	return 0;
}

static int parse_args(cis_config *cfg, int argc, char **argv, int first, const char **config_path,
                      bool *help, bool *version, cis_errmsg *em)
{
	bool flags_done = false;

	for (int i = first; i < argc; i++) {
		const char *a = argv[i];
		const char *name, *value = NULL;
		const cis_opt *opt;
		size_t idx, nlen;
		int r;

		if (flags_done || a[0] != '-' || a[1] == 0) {
			r = add_pos(cfg, a);
			if (r)
				return r;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			flags_done = true;
			continue;
		}
		if (a[1] != '-') {
			/* Short switches or a short option with its value next. */
			opt = NULL;
			for (size_t k = 0; k < cfg->nopts; k++) {
				if (cfg->opts[k].short_name && cfg->opts[k].short_name == a[1] &&
				    a[2] == 0) {
					opt = &cfg->opts[k];
					idx = k;
				}
			}
			if (!opt && strcmp(a, "-h") == 0) {
				*help = true;
				continue;
			}
			if (!opt)
				return cis_fail(em, -CIS_E_CONFIG, "unknown flag '%s'", a);
			name = opt->name;
			nlen = strlen(name);
		} else {
			const char *eq;

			name = a + 2;
			eq = strchr(name, '=');
			nlen = eq ? (size_t)(eq - name) : strlen(name);
			if (eq)
				value = eq + 1;
			if (nlen == 4 && strncmp(name, "help", 4) == 0) {
				*help = true;
				continue;
			}
			if (!value && strcmp(name, "version") == 0 &&
			    !find_opt(cfg, name, nlen, &idx)) {
				*version = true;
				continue;
			}
			/* --config is understood by every program, listed or not. */
			if (nlen == 6 && strncmp(name, "config", 6) == 0 &&
			    !find_opt(cfg, name, nlen, &idx)) {
				if (!value && i + 1 >= argc)
					return cis_fail(em, -CIS_E_CONFIG,
					                "flag '--config' needs a value (FILE)");
				*config_path = value ? value : argv[++i];
				continue;
			}
			opt = find_opt(cfg, name, nlen, &idx);
			if (!opt)
				return cis_fail(em, -CIS_E_CONFIG, "unknown flag '--%.*s'",
				                (int)nlen, name);
		}
		if (!opt->arg) {
			if (value && strcmp(value, "true") && strcmp(value, "false"))
				return cis_fail(em, -CIS_E_CONFIG, "flag '--%s' takes no value",
				                opt->name);
			value = value ? value : "true";
		} else if (!value) {
			if (i + 1 >= argc)
				return cis_fail(em, -CIS_E_CONFIG, "flag '--%s' needs a value (%s)",
				                opt->name, opt->arg);
			value = argv[++i];
		}
		if (strcmp(opt->name, "config") == 0)
			*config_path = value;
		r = put(cfg, idx, LAYER_FLAG, value);
		if (r)
			return r;
	}
	return 0;
}

int cis_config_load(cis_config **out, const cis_opt *opts, const char *env_prefix, int argc,
                    char **argv, int first, cis_errmsg *em)
{
	cis_config *cfg = calloc(1, sizeof(*cfg));
	const char *config_path = NULL;
	bool help = false, version = false;
	int r;

	*out = NULL;
	if (!cfg)
		return -ENOMEM;
	cfg->opts = opts;
	while (opts[cfg->nopts].name)
		cfg->nopts++;
	cfg->vals = calloc(cfg->nopts * LAYER_COUNT + 1, sizeof(*cfg->vals));
	if (!cfg->vals) {
		r = -ENOMEM;
		goto out_free;
	}
	r = parse_args(cfg, argc, argv, first, &config_path, &help, &version, em);
	if (r)
		goto out_free;
	if (help || version) {
		*out = cfg;
		return help ? 1 : 2;
	}
	if (!config_path && env_prefix) {
		char name[128];
		snprintf(name, sizeof(name), "%sCONFIG", env_prefix);
		config_path = getenv(name);
	}
	if (config_path) {
		r = load_file(cfg, config_path, em);
		if (r)
			goto out_free;
	}
	if (env_prefix) {
		r = load_env(cfg, env_prefix);
		if (r)
			goto out_free;
	}
	*out = cfg;
	return 0;

out_free:
	cis_config_free(cfg);
	return r == -ENOMEM ? cis_fail(em, -CIS_E_CONFIG, "out of memory") : r;
}

void cis_config_free(cis_config *cfg)
{
	if (!cfg)
		return;
	if (cfg->vals) {
		for (size_t i = 0; i < cfg->nopts * LAYER_COUNT; i++)
			values_clear(&cfg->vals[i]);
	}
	free(cfg->vals);
	for (size_t i = 0; i < cfg->npos; i++)
		free(cfg->pos[i]);
	free(cfg->pos);
	free(cfg);
}

void cis_config_usage(const cis_opt *opts, FILE *out, const char *synopsis)
{
	fprintf(out, "usage: %s\n", synopsis);
	if (opts[0].name)
		fprintf(out, "\noptions:\n");
	for (const cis_opt *o = opts; o->name; o++) {
		char left[64];

		if (o->short_name)
			snprintf(left, sizeof(left), "-%c, --%s%s%s", o->short_name, o->name,
			         o->arg ? " " : "", o->arg ? o->arg : "");
		else
			snprintf(left, sizeof(left), "    --%s%s%s", o->name, o->arg ? " " : "",
			         o->arg ? o->arg : "");
		fprintf(out, "  %-30s %s", left, o->help ? o->help : "");
		if (o->def)
			fprintf(out, " (default %s)", o->def);
		if (o->multi)
			fprintf(out, " (repeatable)");
		fputc('\n', out);
	}
	fprintf(out, "  %-30s %s\n", "-h, --help", "show this help");
	fprintf(out, "  %-30s %s\n", "--version", "print the program's release and exit");
}

/* The highest layer that has values for option idx, or NULL. */
static const struct values *winner(const cis_config *cfg, size_t idx)
{
	for (int l = LAYER_COUNT - 1; l >= 0; l--) {
		const struct values *v = slot(cfg, idx, (enum layer)l);
		if (v->n)
			return v;
	}
	return NULL;
}

static bool lookup(const cis_config *cfg, const char *name, size_t *idx)
{
	return find_opt(cfg, name, strlen(name), idx) != NULL;
}

const char *cis_config_str(const cis_config *cfg, const char *name)
{
	const struct values *v;
	size_t idx;

	if (!lookup(cfg, name, &idx))
		return NULL;
	v = winner(cfg, idx);
	return v ? v->v[v->n - 1] : cfg->opts[idx].def;
}

bool cis_config_is_set(const cis_config *cfg, const char *name)
{
	size_t idx;

	return lookup(cfg, name, &idx) && winner(cfg, idx) != NULL;
}

bool cis_config_bool(const cis_config *cfg, const char *name)
{
	const char *s = cis_config_str(cfg, name);

	return s && (strcasecmp(s, "1") == 0 || strcasecmp(s, "true") == 0 ||
	             strcasecmp(s, "yes") == 0 || strcasecmp(s, "on") == 0);
}

int cis_config_int(const cis_config *cfg, const char *name, int64_t min, int64_t max, int64_t *out,
                   cis_errmsg *em)
{
	const char *s = cis_config_str(cfg, name);
	uint64_t v;

	if (!s)
		return -ENOENT;
	if (min < 0 || max < min || cis_parse_decimal(s, (uint64_t)max, &v) || v < (uint64_t)min)
		return cis_fail(em, -CIS_E_CONFIG, "--%s: '%s' is not an integer in [%lld, %lld]",
		                name, s, (long long)min, (long long)max);
	*out = (int64_t)v;
	return 0;
}

int cis_config_size(const cis_config *cfg, const char *name, uint64_t *out, cis_errmsg *em)
{
	const char *s = cis_config_str(cfg, name);

	if (!s)
		return -ENOENT;
	if (cis_parse_size(s, out))
		return cis_fail(em, -CIS_E_CONFIG, "--%s: '%s' is not a size (like 512M or 2G)",
		                name, s);
	return 0;
}

int cis_config_duration_ms(const cis_config *cfg, const char *name, uint64_t *out, cis_errmsg *em)
{
	const char *s = cis_config_str(cfg, name);

	if (!s)
		return -ENOENT;
	if (cis_parse_duration_ms(s, out))
		return cis_fail(em, -CIS_E_CONFIG,
		                "--%s: '%s' is not a duration (like 30, 500ms, 5m or 1h)", name, s);
	return 0;
}

size_t cis_config_multi(const cis_config *cfg, const char *name, const char *const **vals)
{
	const struct values *v;
	size_t idx;

	*vals = NULL;
	if (!lookup(cfg, name, &idx))
		return 0;
	v = winner(cfg, idx);
	if (!v) {
		if (cfg->opts[idx].def) {
			*vals = &cfg->opts[idx].def;
			return 1;
		}
		return 0;
	}
	*vals = (const char *const *)v->v;
	return v->n;
}

size_t cis_config_npos(const cis_config *cfg)
{
	return cfg->npos;
}

const char *cis_config_pos(const cis_config *cfg, size_t i)
{
	return i < cfg->npos ? cfg->pos[i] : NULL;
}

/* A non-negative decimal, digits with an optional fraction ("1.5"; no
 * sign, exponent or hex, which strtod would take), then the unit text. */
static int parse_number(const char *s, double *num, const char **unit)
{
	const char *p = s;
	char *end;

	while (isdigit((unsigned char)*p))
		p++;
	if (p == s)
		return -EINVAL;
	if (*p == '.' && isdigit((unsigned char)p[1]))
		for (p++; isdigit((unsigned char)*p); p++)
			;
	errno = 0;
	*num = strtod(s, &end);
	if (errno || end != p || !isfinite(*num))
		return -EINVAL;
	*unit = end;
	return 0;
}

int cis_parse_decimal(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!*s)
		return -EINVAL;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int cis_parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "BKMGTP";
	const char *unit;
	double num;
	int shift = 0, r = parse_number(s, &num, &unit);

	if (r)
		return r;
	if (*unit) {
		const char *u = strchr(units, toupper((unsigned char)*unit));
		if (!u)
			return -EINVAL;
		shift = 10 * (int)(u - units);
		unit++;
		if (u != units) {
			if (strcasecmp(unit, "ib") == 0 || strcasecmp(unit, "b") == 0)
				unit += strlen(unit);
		}
		if (*unit)
			return -EINVAL;
	}
	if (!memchr(s, '.', (size_t)(unit - s))) {
		/* Whole: exact (a double would round past 2^53). */
		errno = 0;
		unsigned long long v = strtoull(s, NULL, 10);
		if (errno == ERANGE || (shift && v > (UINT64_MAX >> shift)))
			return -ERANGE;
		*out = (uint64_t)v << shift;
		return 0;
	}
	if (shift == 0)
		return -EINVAL; /* a fraction of a byte */
	num = ldexp(num, shift);
	if (num >= 18446744073709551615.0)
		return -ERANGE;
	*out = (uint64_t)num;
	return 0;
}

int cis_parse_duration_ms(const char *s, uint64_t *out)
{
	static const struct {
		const char *name;
		double ms;
	} units[] = {{"", 1000},   {"ms", 1},      {"s", 1000},
	             {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
	const char *unit;
	double num;
	int r = parse_number(s, &num, &unit);

	if (r)
		return r;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(unit, units[i].name) == 0) {
			num *= units[i].ms;
			if (num >= 9.2e18)
				return -ERANGE;
			*out = (uint64_t)num;
			return 0;
		}
	}
	return -EINVAL;
}

void cis_fmt_size(uint64_t bytes, char *out, size_t outlen)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(out, outlen, "%llu B", (unsigned long long)bytes);
	else
		snprintf(out, outlen, "%.1f %s", v, units[u]);
}

int cis_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port)
{
	const char *colon, *hstart = s, *hend;
	char *end;
	unsigned long p;

	if (*s == '[') {
		hend = strchr(s, ']');
		if (!hend || hend[1] != ':')
			return -EINVAL;
		hstart = s + 1;
		colon = hend + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		hend = colon;
	}
	if (hend == hstart || (size_t)(hend - hstart) >= hostlen)
		return -EINVAL;
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || p == 0 || p > 65535)
		return -EINVAL;
	memcpy(host, hstart, (size_t)(hend - hstart));
	host[hend - hstart] = 0;
	*port = (uint16_t)p;
	return 0;
}
