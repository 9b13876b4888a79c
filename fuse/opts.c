/* Command line. Two shapes are accepted so the same binary works by hand
 * and from /etc/fstab through mount.fuse3:
 *   cistern-fuse MNT --master H:P [--root /p] [-o allow_other] [-f]
 *   cistern-fuse SOURCE MNT -o master=H:P,root=/p,allow_other,ro,...
 * Our own keys may appear as --flags or inside -o lists (dashes or
 * underscores); the rest of each -o list goes to libfuse unchanged, which
 * rejects what it does not know. */
#include "fcl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/buf.h"
#include "cistern/config.h"

void fcl_opts_usage(FILE *out)
{
	fputs("usage: cistern-fuse MOUNTPOINT --master HOST:PORT [options]\n"
	      "       cistern-fuse HOST:PORT MOUNTPOINT -o master=HOST:PORT,... (mount.fuse3)\n"
	      "  --master HOST:PORT      master RPC address (-o master=)\n"
	      "  --root PATH             cistern path to show at the mount point (default /)\n"
	      "  --attr-timeout S        attribute cache seconds (default 60)\n"
	      "  --entry-timeout S       name cache seconds (default 60)\n"
	      "  --negative-timeout S    cache of missing names, seconds (default 10)\n"
	      "  --http-port N           metrics port, 0 for none (default 19621)\n"
	      "  --http-bind ADDR        address the metrics port listens on (default 0.0.0.0)\n"
	      "  --readahead SIZE        prefetch budget per open file (default 256M)\n"
	      "  --fd-cache N            short-circuit descriptors kept open (default 131072)\n"
	      "  --meta-cache N          entries per metadata cache (default 262144)\n"
	      "  --worker-timeout MS     skip a worker slower than this (default 15000)\n"
	      "  --threads N             FUSE threads at most (default 16)\n"
	      "  --log-level L           debug, info, warn, error (default info)\n"
	      "  --no-short-circuit      read a worker on this host over TCP, not its socket\n"
	      "  --no-passthrough        read local block files through the daemon, never\n"
	      "                          letting the kernel read them itself\n"
	      "  --log-file PATH         append the log here (a daemon has no stderr)\n"
	      "  -o OPT[,OPT...]         the keys above with '_' or '-', or FUSE mount options\n"
	      "                          (allow_other, default_permissions, ro, ...)\n"
	      "  -f                      stay in the foreground\n"
	      "  -d                      FUSE debug output (implies -f)\n"
	      "  --version               print the release and exit\n",
	      out);
}

static int set_str(char **dst, const char *v)
{
	char *c = strdup(v);
	if (!c)
		return -ENOMEM;
	free(*dst);
	*dst = c;
	return 0;
}

static int parse_secs(const char *name, const char *v, double *out, cis_errmsg *em)
{
	char *end;
	errno = 0;
	double d = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(d) || d < 0 || d > 86400 * 365)
		return cis_fail(em, -CIS_E_CONFIG, "%s: bad number of seconds '%s'", name, v);
	*out = d;
	return 0;
}

static int parse_u64(const char *name, const char *v, uint64_t min, uint64_t max, uint64_t *out,
                     cis_errmsg *em)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || n < min || n > max)
		return cis_fail(em, -CIS_E_CONFIG, "%s: expected a number in %llu..%llu, got '%s'",
		                name, (unsigned long long)min, (unsigned long long)max, v);
	*out = n;
	return 0;
}

/* One of our switches (options without a value). */
static bool set_switch(fcl_opts *o, const char *name)
{
	if (strcmp(name, "no-short-circuit") == 0)
		o->no_short_circuit = true;
	else if (strcmp(name, "no-passthrough") == 0)
		o->no_passthrough = true;
	else
		return false;
	return true;
}

/* One of our keys (name normalised to dashes). 1 if name is not ours. */
static int set_key(fcl_opts *o, const char *name, const char *v, cis_errmsg *em)
{
	uint64_t n = 0;
	int rc;
	if (!v)
		v = "";
	if (strcmp(name, "master") == 0) {
		char host[256];
		uint16_t port;
		if (cis_parse_hostport(v, host, sizeof(host), &port) || port == 0)
			return cis_fail(em, -CIS_E_CONFIG, "master: expected HOST:PORT, got '%s'",
			                v);
		return set_str(&o->master, v);
	}
	if (strcmp(name, "root") == 0) {
		if (v[0] != '/')
			return cis_fail(em, -CIS_E_CONFIG,
			                "root: expected an absolute path, got '%s'", v);
		return set_str(&o->root, v);
	}
	if (strcmp(name, "attr-timeout") == 0)
		return parse_secs(name, v, &o->attr_timeout, em);
	if (strcmp(name, "entry-timeout") == 0)
		return parse_secs(name, v, &o->entry_timeout, em);
	if (strcmp(name, "negative-timeout") == 0)
		return parse_secs(name, v, &o->negative_timeout, em);
	if (strcmp(name, "http-port") == 0) {
		rc = parse_u64(name, v, 0, 65535, &n, em);
		if (rc == 0)
			o->http_port = (int)n;
		return rc;
	}
	if (strcmp(name, "http-bind") == 0) {
		struct in_addr a4;
		struct in6_addr a6;
		if (inet_pton(AF_INET, v, &a4) != 1 && inet_pton(AF_INET6, v, &a6) != 1)
			return cis_fail(em, -CIS_E_CONFIG,
			                "http-bind: expected an IP address, got '%s'", v);
		return set_str(&o->http_bind, v);
	}
	if (strcmp(name, "readahead") == 0) {
		if (cis_parse_size(v, &o->readahead_budget))
			return cis_fail(em, -CIS_E_CONFIG, "readahead: bad size '%s'", v);
		return 0;
	}
	if (strcmp(name, "fd-cache") == 0)
		return parse_u64(name, v, 1, 1u << 20, &o->fd_cache, em);
	if (strcmp(name, "meta-cache") == 0)
		return parse_u64(name, v, 1, 1u << 26, &o->meta_cache, em);
	if (strcmp(name, "worker-timeout") == 0) {
		rc = parse_u64(name, v, 1, 3600000, &n, em);
		if (rc == 0)
			o->worker_timeout_ms = (int)n;
		return rc;
	}
	if (strcmp(name, "threads") == 0) {
		rc = parse_u64(name, v, 1, 1024, &n, em);
		if (rc == 0)
			o->threads = (int)n;
		return rc;
	}
	if (strcmp(name, "log-level") == 0)
		return set_str(&o->log_level, v);
	if (set_switch(o, name))
		return 0;
	if (strcmp(name, "log-file") == 0)
		return set_str(&o->log_file, v);
	return 1;
}

/* Options for mount(8), systemd and fstab readers that mean nothing to
 * FUSE. mount.fuse3 drops some of them itself; drop all, so an fstab line
 * never fails on them whichever helper runs us. */
static bool is_mount_only(const char *item)
{
	static const char *const plain[] = {"defaults", "_netdev", "nofail", "auto",  "noauto",
	                                    "user",     "users",   "nouser", "owner", "group"};
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
		if (strcmp(item, plain[i]) == 0)
			return true;
	return strncmp(item, "x-", 2) == 0 || strncmp(item, "comment=", 8) == 0;
}

/* Split an -o list: our keys are applied, the rest appended to fuse. */
static int take_o_list(fcl_opts *o, const char *list, cis_buf *fuse, cis_errmsg *em)
{
	char *copy = strdup(list);
	if (!copy)
		return -ENOMEM;
	int rc = 0;
	char *save = NULL;
	for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char name[64];
		char *eq = strchr(item, '=');
		size_t nlen = eq ? (size_t)(eq - item) : strlen(item);
		if (nlen < sizeof(name)) {
			memcpy(name, item, nlen);
			name[nlen] = 0;
			for (char *p = name; *p; p++)
				if (*p == '_')
					*p = '-';
			rc = set_key(o, name, eq ? eq + 1 : NULL, em);
			if (rc < 0)
				goto out_free;
			if (rc == 0)
				continue;
		}
		/* Not ours: libfuse's, or what mount(8) adds that means nothing
		 * to FUSE (mount.fuse3 already drops _netdev, nofail, auto...). */
		if (is_mount_only(item))
			continue;
		rc = cis_buf_printf(fuse, "%s%s", fuse->len ? "," : "", item);
		if (rc)
			goto out_free;
	}
	rc = 0;
out_free:
	free(copy);
	return rc;
}

int fcl_opts_parse(fcl_opts *o, int argc, char **argv, cis_errmsg *em)
{
	*o = (fcl_opts){
	    .attr_timeout = 60,
	    .entry_timeout = 60,
	    .negative_timeout = 10,
	    .http_port = 19621,
	    .readahead_budget = 256u << 20,
	    .fd_cache = 131072,
	    .meta_cache = 262144,
	    .worker_timeout_ms = 15000,
	    .threads = 16,
	};
	cis_buf fuse = CIS_BUF_INIT;
	const char *pos[2];
	int npos = 0, rc = 0;
	bool flags_done = false;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (flags_done || a[0] != '-' || a[1] == 0) {
			if (npos == 2) {
				rc = cis_fail(em, -CIS_E_CONFIG, "unexpected argument '%s'", a);
				goto out;
			}
			pos[npos++] = a;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			flags_done = true;
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			rc = 1;
			goto out;
		} else if (strcmp(a, "--version") == 0) {
			rc = 2;
			goto out;
		} else if (strcmp(a, "-f") == 0) {
			o->foreground = true;
		} else if (strcmp(a, "-d") == 0 || strcmp(a, "--debug") == 0) {
			o->debug = o->foreground = true;
		} else if (strcmp(a, "-n") == 0 || strcmp(a, "-v") == 0) {
			/* mount(8) helper flags (no mtab, verbose): nothing to do */
		} else if (strncmp(a, "-o", 2) == 0) {
			const char *list = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
			if (!list) {
				rc = cis_fail(em, -CIS_E_CONFIG, "-o: missing option list");
				goto out;
			}
			rc = take_o_list(o, list, &fuse, em);
			if (rc)
				goto out;
		} else if (strncmp(a, "--", 2) == 0) {
			char name[64];
			const char *eq = strchr(a + 2, '=');
			size_t nlen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
			if (nlen >= sizeof(name)) {
				rc = cis_fail(em, -CIS_E_CONFIG, "unknown option '%s'", a);
				goto out;
			}
			memcpy(name, a + 2, nlen);
			name[nlen] = 0;
			for (char *p = name; *p; p++)
				if (*p == '_')
					*p = '-';
			const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
			if (strcmp(name, "foreground") == 0) {
				o->foreground = true;
				continue;
			}
			if (set_switch(o, name))
				continue;
			if (!v) {
				rc = cis_fail(em, -CIS_E_CONFIG, "--%s: missing value", name);
				goto out;
			}
			rc = set_key(o, name, v, em);
			if (rc == 1)
				rc = cis_fail(em, -CIS_E_CONFIG, "unknown option '%s'", a);
			if (rc)
				goto out;
			if (!eq)
				i++;
		} else {
			rc = cis_fail(em, -CIS_E_CONFIG, "unknown option '%s'", a);
			goto out;
		}
	}

	if (npos == 2) {
		/* mount.fuse3: SOURCE MOUNTPOINT. A HOST:PORT source names the
		 * master unless master= was given; anything else is a label. */
		char host[256];
		uint16_t port;
		if (!o->master && cis_parse_hostport(pos[0], host, sizeof(host), &port) == 0 &&
		    port != 0) {
			rc = set_str(&o->master, pos[0]);
			if (rc)
				goto out;
		}
		rc = set_str(&o->mountpoint, pos[1]);
	} else if (npos == 1) {
		rc = set_str(&o->mountpoint, pos[0]);
	} else {
		rc = cis_fail(em, -CIS_E_CONFIG, "missing mount point");
	}
	if (rc)
		goto out;
	if (!o->master) {
		rc = cis_fail(
		    em, -CIS_E_CONFIG,
		    "missing master address: give --master HOST:PORT or -o master=HOST:PORT");
		goto out;
	}
	if (!o->root)
		rc = set_str(&o->root, "/");
	if (!rc && !o->http_bind)
		rc = set_str(&o->http_bind, "0.0.0.0");
	if (!rc && !o->log_level)
		rc = set_str(&o->log_level, "info");
	if (!rc && fuse.len) {
		o->fuse_opts = cis_buf_steal(&fuse);
		rc = o->fuse_opts ? 0 : -ENOMEM;
	}
out:
	cis_buf_free(&fuse);
	return rc;
}

void fcl_opts_free(fcl_opts *o)
{
	free(o->mountpoint);
	free(o->master);
	free(o->root);
	free(o->http_bind);
	free(o->log_level);
	free(o->log_file);
	free(o->fuse_opts);
	*o = (fcl_opts){0};
}
