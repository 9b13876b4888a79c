/* cistern local: the whole stack for one machine in one command.
 *
 *   cistern local URI MOUNTPOINT [--cache-dir DIR[:SIZE]] [--state-dir DIR]
 *                 [--option k=v ...] [--fuse-option OPT[,OPT...] ...] [-f]
 *   cistern local --stop MOUNTPOINT [--state-dir DIR]
 *
 * A supervisor starts cistern-master, cistern-worker and cistern-fuse as its
 * children (each in its own process group, so a terminal's Ctrl-C reaches
 * only the supervisor, which then stops them in order), waits for each to be
 * ready, mounts URI at / through the master's admin API and waits for the
 * FUSE mount to appear. With -f the supervisor is this process and prints the
 * ready line; without it the supervisor is a forked daemon that reports
 * "ready" or its error through a pipe, and this process prints it and
 * returns. SIGINT/SIGTERM (or `--stop`) unmount and stop everything; a child
 * that dies on its own takes the others down with it, so nothing is ever
 * left half running. Children carry PR_SET_PDEATHSIG so that even a
 * SIGKILLed supervisor leaves no daemons behind.
 *
 * The state directory (default $XDG_CACHE_HOME or ~/.cache, then
 * cistern/local/<mount point's last component>-<8 hex digits of its hash>)
 * holds master/ (LMDB), worker/ (block index), cache/ (blocks, unless
 * --cache-dir), logs/<daemon>.log, the lock, local.pid and local.json (addresses of
 * the running stack, for scripts: {"pid", "api", "master", "mountpoint",
 * "uri", ...}). */
#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cistern/config.h"
#include "cistern/error.h"
#include "cistern/hash.h"
#include "cistern/http.h"
#include "cistern/time.h"
#include "cistern/version.h"

#include "cli.h"

#define LOCAL_STOP_TIMEOUT_MS 15000
#define LOCAL_LINE_MAX        (3 * PATH_MAX + 1024) /* the ready or error line */
#define LOCAL_MAX_CACHE_DIRS  32                    /* the worker's limit (WRK_MAX_DIRS) */
#define LOCAL_MAX_FUSE_OPTS   16
#define LOCAL_POLL_MS         100
#define LOCAL_PORT_TRIES      3 /* starts of a daemon whose port another took first */

static const cis_opt local_opts[] = {
    {"state-dir", "DIR", NULL, "state directory (default ~/.cache/cistern/local/<name>-<hash>)",
     false, 0},
    {"cache-dir", "DIR[:SIZE]", NULL,
     "block cache directory (default STATE/cache, half the free space)", true, 0},
    {"option", "K=V", NULL, "mount option (endpoint=, region=, path_style=, ...)", true, 'o'},
    {"fuse-option", "OPT[,OPT...]", NULL,
     "cistern-fuse option as its -o takes it (allow_other, readahead=512M, no_passthrough, ...)",
     true, 0},
    {"foreground", NULL, NULL, "stay in the foreground; Ctrl-C unmounts and stops", false, 'f'},
    {"stop", NULL, NULL, "stop the stack serving MOUNTPOINT", false, 0},
    {"allow-non-empty", NULL, NULL, "mount over a MOUNTPOINT that holds files (hiding them)", false,
     0},
    {"timeout", "SECONDS", "30", "how long each daemon may take to become ready", false, 0},
    {"bin-dir", "DIR", NULL, "where cistern-master, -worker and -fuse are (default: found)", false,
     0},
    {"master-port", "N", "19600", "master RPC port (its HTTP API is N+1); busy: any free", false,
     0},
    {"worker-port", "N", "19610", "worker RPC port (its HTTP is N+1); busy: any free", false, 0},
    {"fuse-http-port", "N", "19621", "FUSE client metrics port; busy: any free", false, 0},
    CIS_OPT_END,
};

static const char local_synopsis[] =
    "cistern local URI MOUNTPOINT [options]\n"
    "       cistern local --stop MOUNTPOINT [--state-dir DIR]\n"
    "Runs master, worker and FUSE client for this machine and mounts URI (s3://bucket/prefix\n"
    "or file:///dir) at MOUNTPOINT.";

typedef struct local_child {
	const char *name; /* "cistern-master" */
	pid_t pid;        /* 0: not running */
	int status;       /* wait status once reaped */
	bool reaped;
	char bin[PATH_MAX];
	char log[PATH_MAX];
} local_child;

typedef struct local_stack {
	const cis_config *cfg;
	const char *uri;
	char mnt[PATH_MAX];
	char state[PATH_MAX];
	char *caches[LOCAL_MAX_CACHE_DIRS]; /* the worker's --cache-dir DIR:SIZE arguments */
	size_t ncache;
	bool made_mnt;     /* the mount point directory was created by this start */
	bool fuse_mounted; /* the mount at mnt is our cistern-fuse's */
	uint16_t m_rpc, m_http, w_rpc, w_http, f_http;
	/* Ports picked: 5 at first, 2 more for each daemon started again. */
	uint16_t used[5 + 2 * 3 * (LOCAL_PORT_TRIES - 1)];
	size_t nused;
	char api[64];
	int timeout_ms;
	json_t *mount_req;      /* the body of the mount of / (local_mount_request) */
	uint16_t want_ports[3]; /* --master-port, --worker-port, --fuse-http-port */
	sigset_t sigs;          /* blocked in the supervisor, taken with sigtimedwait */
	local_child master, worker, fuse;
} local_stack;

/* ---- small helpers ---- */

static int mkdir_p(const char *path)
{
	char tmp[PATH_MAX];
	struct stat st;
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0700) == 0)
		return 0;
	if (errno != EEXIST)
		return -errno;
	if (stat(tmp, &st) < 0) /* a file of that name is no directory */
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static bool path_join(char *out, size_t len, const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);

	if (la + 1 + lb + 1 > len)
		return false;
	memcpy(out, a, la);
	out[la] = '/';
	memcpy(out + la + 1, b, lb + 1);
	return true;
}

/* path as it is when absolute, else below this process's working
 * directory: the stack runs in "/". False when it does not fit. */
static bool from_cwd(const char *path, char *out, size_t len)
{
	char cwd[PATH_MAX];

	if (path[0] == '/')
		return snprintf(out, len, "%s", path) < (int)len;
	return getcwd(cwd, sizeof(cwd)) && path_join(out, len, cwd, path);
}

/* The absolute form of a mount point, symbolic links resolved (the kernel
 * mounts on the target); one that is not reachable (a stale FUSE mount
 * fails stat with ENOTCONN) or not there yet: realpath of its parent + its
 * name. */
static int abs_mountpoint(const char *arg, char *out, size_t len, cis_errmsg *em)
{
	char parent[PATH_MAX], buf[PATH_MAX];
	const char *slash, *name;
	size_t alen = strlen(arg);

	if (alen == 0 || alen >= sizeof(buf))
		return cis_fail(em, -EINVAL, "%s: bad mount point", arg);
	if (len >= PATH_MAX && realpath(arg, buf)) {
		if (strcmp(buf, "/") == 0)
			return cis_fail(em, -EINVAL, "%s: cannot mount over /", arg);
		snprintf(out, len, "%s", buf);
		return 0;
	}
	memcpy(buf, arg, alen + 1);
	while (alen > 1 && buf[alen - 1] == '/')
		buf[--alen] = 0;
	slash = strrchr(buf, '/');
	if (!slash) {
		if (!getcwd(parent, sizeof(parent)))
			return cis_fail(em, -errno, "getcwd: %s", strerror(errno));
		name = buf;
	} else if (slash == buf) {
		strcpy(parent, "/");
		name = buf + 1;
	} else {
		char pbuf[PATH_MAX];

		memcpy(pbuf, buf, (size_t)(slash - buf));
		pbuf[slash - buf] = 0;
		if (!realpath(pbuf, parent))
			return cis_fail(em, -errno, "%s: %s", pbuf, strerror(errno));
		name = slash + 1;
	}
	if (*name == 0)
		return cis_fail(em, -EINVAL, "%s: cannot mount over /", arg);
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
		if (!realpath(buf, out))
			return cis_fail(em, -errno, "%s: %s", arg, strerror(errno));
		return 0;
	}
	if (snprintf(out, len, "%s%s%s", parent, strcmp(parent, "/") == 0 ? "" : "/", name) >=
	    (int)len)
		return cis_fail(em, -ENAMETOOLONG, "%s: path too long", arg);
	return 0;
}

/* Undo the octal escapes (\040 for a space) of /proc/self/mountinfo. */
static void unescape_mountinfo(char *s)
{
	char *w = s;

	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = 0;
}

/* Whether mnt is a mount point now; its file system type into fstype. */
/* Whether the FUSE mount at mnt has no daemon behind it. statfs, not stat:
 * the kernel answers stat of the root from its cached attributes (for the
 * attribute timeout) even with the daemon gone, statfs always asks. */
static bool mount_dead(const char *mnt)
{
	struct statfs sfs;

	return statfs(mnt, &sfs) < 0 && errno == ENOTCONN;
}

static bool mounted(const char *mnt, char *fstype, size_t fslen)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char *line = NULL;
	size_t cap = 0;
	bool found = false;

	if (!f)
		return false;
	while (getline(&line, &cap, f) > 0) {
		/* id parent major:minor root MOUNTPOINT opts [optional...] - FSTYPE ... */
		char *save = NULL, *tok, *mp = NULL, *fs = NULL;
		int i = 0;
		bool dash = false;

		for (tok = strtok_r(line, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
			if (i == 4)
				mp = tok;
			if (dash) {
				fs = tok;
				break;
			}
			if (i >= 6 && strcmp(tok, "-") == 0)
				dash = true;
			i++;
		}
		if (!mp)
			continue;
		unescape_mountinfo(mp);
		if (strcmp(mp, mnt) == 0) {
			found = true;
			if (fstype && fs)
				snprintf(fstype, fslen, "%s", fs);
		}
	}
	free(line);
	fclose(f);
	return found;
}

/* cistern-fuse's mounts are of this type (its subtype=cistern): a
 * stop or a start unmounts only those, never another FUSE file system
 * (sshfs, rclone, ntfs-3g) mounted there. */
#define CISTERN_FSTYPE "fuse.cistern"

static bool mounted_fuse(const char *mnt)
{
	char fs[64] = "";

	return mounted(mnt, fs, sizeof(fs)) && strcmp(fs, CISTERN_FSTYPE) == 0;
}

/* Run a helper (fusermount3) quietly and wait for it. Its exit status, or -1. */
static int run_quiet(const char *prog, const char *a1, const char *a2, const char *a3)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		sigset_t none;
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (null >= 0) {
			dup2(null, 1);
			dup2(null, 2);
		}
		execlp(prog, prog, a1, a2, a3, (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Unmount a FUSE mount point: fusermount3, then lazily, then umount2 (root). */
static void unmount_fuse(const char *mnt)
{
	if (!mounted_fuse(mnt))
		return;
	run_quiet("fusermount3", "-u", "-q", mnt);
	if (!mounted_fuse(mnt))
		return;
	run_quiet("fusermount3", "-u", "-z", mnt);
	if (mounted_fuse(mnt))
		umount2(mnt, MNT_DETACH);
}

static bool port_free(uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	if (fd < 0)
		return false;
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

/* A free port from the kernel's ephemeral range, not in avoid[]. */
static uint16_t any_free_port(const uint16_t *avoid, size_t navoid)
{
	for (int tries = 0; tries < 64; tries++) {
		struct sockaddr_in sa = {.sin_family = AF_INET};
		socklen_t sl = sizeof(sa);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		uint16_t p = 0;
		bool clash = false;

		if (fd < 0)
			return 0;
		sa.sin_addr.s_addr = htonl(INADDR_ANY);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
		    getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
			p = ntohs(sa.sin_port);
		close(fd);
		for (size_t i = 0; i < navoid; i++)
			clash |= avoid[i] == p || (p < UINT16_MAX && avoid[i] == p + 1);
		if (p && p < UINT16_MAX && !clash)
			return p;
	}
	return 0;
}

static bool port_clash(uint16_t p, bool pair, const uint16_t *used, size_t nused)
{
	for (size_t i = 0; i < nused; i++)
		if (used[i] == p || (pair && used[i] == p + 1))
			return true;
	return false;
}

/* The default when it (and its +1 HTTP neighbour, if pair) is free, else the
 * next free ones above it (below the kernel's ephemeral range, where an
 * outgoing connection could take a port between our check and the daemon's
 * bind; a default given in that range is still tried), else any free port. Chosen ports are added to used. */
static int pick_port(uint16_t def, bool pair, uint16_t *used, size_t *nused, uint16_t *out)
{
	uint16_t p = 0;

	for (unsigned c = def;
	     c < (unsigned)def + 400 && (c == def || c < 32000) && c + (pair ? 1 : 0) <= UINT16_MAX;
	     c += pair ? 2 : 1) {
		if (!port_clash((uint16_t)c, pair, used, *nused) && port_free((uint16_t)c) &&
		    (!pair || port_free((uint16_t)(c + 1)))) {
			p = (uint16_t)c;
			break;
		}
	}
	for (int tries = 0; tries < 32 && !p; tries++) {
		p = any_free_port(used, *nused);
		if (p && pair && !port_free((uint16_t)(p + 1)))
			p = 0;
	}
	if (!p)
		return -EADDRINUSE;
	*out = p;
	used[(*nused)++] = p;
	if (pair)
		used[(*nused)++] = (uint16_t)(p + 1);
	return 0;
}

/* Find a daemon: --bin-dir, then next to this program (installed side by
 * side), then the build tree (build/cli/cistern -> build/master/...), then
 * PATH. */
static int find_daemon(const char *bin_dir, const char *name, const char *subdir, char *out,
                       size_t len, cis_errmsg *em)
{
	char self[PATH_MAX], dir[PATH_MAX];
	ssize_t n;

	if (bin_dir) {
		if (snprintf(out, len, "%s/%s", bin_dir, name) < (int)len && access(out, X_OK) == 0)
			return 0;
		return cis_fail(em, -ENOENT, "%s: not found in %s", name, bin_dir);
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		char *slash;

		self[n] = 0;
		slash = strrchr(self, '/');
		if (slash) {
			*slash = 0;
			snprintf(dir, sizeof(dir), "%s", self);
			if (snprintf(out, len, "%s/%s", dir, name) < (int)len &&
			    access(out, X_OK) == 0)
				return 0;
			if (snprintf(out, len, "%s/../%s/%s", dir, subdir, name) < (int)len &&
			    access(out, X_OK) == 0)
				return 0;
		}
	}
	const char *path = getenv("PATH");

	if (path) {
		char *copy = strdup(path), *save = NULL;

		for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d;
		     d = strtok_r(NULL, ":", &save)) {
			if (snprintf(out, len, "%s/%s", d, name) < (int)len &&
			    access(out, X_OK) == 0) {
				free(copy);
				return 0;
			}
		}
		free(copy);
	}
	return cis_fail(em, -ENOENT,
	                "%s: not found next to cistern, in the build tree or in PATH (build it, or "
	                "give --bin-dir)",
	                name);
}

/* The last non-empty line of a log, for an error message. */
static void log_tail(const char *path, char *out, size_t len)
{
	char buf[4096], *start;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	off_t end;
	ssize_t n;

	out[0] = 0;
	if (fd < 0)
		return;
	end = lseek(fd, 0, SEEK_END);
	if (end > (off_t)sizeof(buf) - 1)
		lseek(fd, end - (off_t)sizeof(buf) + 1, SEEK_SET);
	else
		lseek(fd, 0, SEEK_SET);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		buf[--n] = 0;
	/* The last line that says error, else the very last line: a daemon
	 * often logs its shutdown after the line that explains it. */
	start = NULL;
	for (char *end = buf + n; end > buf && !start;) {
		char *ls = end;

		while (ls > buf && ls[-1] != '\n')
			ls--;
		if (memmem(ls, (size_t)(end - ls), "error", 5) ||
		    memmem(ls, (size_t)(end - ls), "fatal", 5)) {
			start = ls;
			*end = 0;
		}
		end = ls > buf ? ls - 1 : buf;
	}
	if (!start) {
		start = strrchr(buf, '\n');
		start = start ? start + 1 : buf;
	}
	n = (ssize_t)strlen(start);
	if ((size_t)n >= len)
		n = (ssize_t)len - 1;
	memcpy(out, start, (size_t)n);
	out[n] = 0;
}

/* ---- children ---- */

static int child_spawn(local_child *c, char *const argv[], cis_errmsg *em)
{
	int logfd = open(c->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	pid_t parent = getpid();
	pid_t pid;

	if (logfd < 0)
		return cis_fail(em, -errno, "%s: %s", c->log, strerror(errno));
	pid = fork();
	if (pid < 0) {
		int err = -errno;

		close(logfd);
		return cis_fail(em, err, "fork %s: %s", c->name, strerror(-err));
	}
	if (pid == 0) {
		sigset_t none;
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

		/* Its own process group: a terminal's Ctrl-C goes to the
		 * supervisor only, which stops the children in order. */
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(1);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		if (null >= 0)
			dup2(null, 0);
		dup2(logfd, 1);
		dup2(logfd, 2);
		execv(c->bin, argv);
		dprintf(2, "exec %s: %s\n", c->bin, strerror(errno));
		_exit(127);
	}
	close(logfd);
	c->pid = pid;
	c->reaped = false;
	return 0;
}

/* Reap whatever exited, marking the stack's children. */
static void reap(local_stack *s)
{
	local_child *all[] = {&s->master, &s->worker, &s->fuse};
	pid_t pid;
	int st;

	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		for (size_t i = 0; i < 3; i++) {
			if (all[i]->pid == pid) {
				all[i]->reaped = true;
				all[i]->status = st;
			}
		}
	}
}

static bool child_alive(const local_child *c)
{
	return c->pid > 0 && !c->reaped;
}

static void child_describe_exit(const local_child *c, char *out, size_t len)
{
	char tail[512];

	log_tail(c->log, tail, sizeof(tail));
	if (WIFEXITED(c->status))
		snprintf(out, len, "%s exited with status %d", c->name, WEXITSTATUS(c->status));
	else if (WIFSIGNALED(c->status))
		snprintf(out, len, "%s killed by signal %d", c->name, WTERMSIG(c->status));
	else
		snprintf(out, len, "%s stopped", c->name);
	if (tail[0]) {
		size_t n = strlen(out);

		snprintf(out + n, len - n, ": %s", tail);
	}
}

/* Wait for a pending stop signal for up to ms. The signal, or 0. */
static int wait_signal(local_stack *s, long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	siginfo_t si;
	int sig = sigtimedwait(&s->sigs, &si, &ts);

	if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)
		return sig;
	return 0;
}

/* SIGTERM, wait up to ms, then SIGKILL. */
static void child_stop(local_stack *s, local_child *c, uint64_t ms)
{
	uint64_t deadline;

	if (!child_alive(c))
		return;
	kill(c->pid, SIGTERM);
	deadline = cis_mono_ms() + ms;
	while (child_alive(c) && cis_mono_ms() < deadline) {
		reap(s);
		if (child_alive(c))
			cis_sleep_ms(20);
	}
	if (child_alive(c)) {
		fprintf(stderr, "cistern local: %s did not stop within %llu s of SIGTERM; killed\n",
		        c->name, (unsigned long long)(ms / 1000));
		kill(c->pid, SIGKILL);
		while (waitpid(c->pid, &c->status, 0) < 0 && errno == EINTR)
			;
		c->reaped = true;
	}
}

/* Everything down, in order: the FUSE client first (so no reader sees a
 * half-stopped stack), then the worker, then the master; then any mount the
 * FUSE client could not take away with it (only its own: a mount at mnt
 * that it never made is another stack's). */
static void stack_teardown(local_stack *s)
{
	/* A client that mounted and died before the start saw the mount
	 * left it dead: ours too (the start refused a mount point that was
	 * one already). */
	bool fuse_ran = s->fuse.pid > 0;

	child_stop(s, &s->fuse, 10000);
	if (s->fuse_mounted || (fuse_ran && mounted_fuse(s->mnt) && mount_dead(s->mnt)))
		unmount_fuse(s->mnt);
	child_stop(s, &s->worker, 10000);
	child_stop(s, &s->master, 10000);
}

/* Fail the start when a daemon of the stack has died: the one waited for,
 * else one started before it (the stack cannot come up without it, and
 * waiting on would end in a timeout that blames the one waited for). */
static int check_alive(local_stack *s, local_child *waited, cis_errmsg *em)
{
	local_child *order[] = {waited, &s->master, &s->worker, &s->fuse};

	reap(s);
	for (size_t i = 0; i < 4; i++) {
		char why[768];

		if (order[i]->pid == 0 || child_alive(order[i]))
			continue; /* not started yet, or running */
		child_describe_exit(order[i], why, sizeof(why));
		return cis_fail(em, -ECHILD, "%s", why);
	}
	return 0;
}

/* Whether process pid has a descriptor whose link reads one of the n
 * targets ("/dev/fuse", "socket:[123]"). */
static bool pid_holds(pid_t pid, char targets[][40], size_t n)
{
	char dir[32], target[40];
	struct dirent *e;
	bool found = false;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return false;
	while (!found && (e = readdir(d))) {
		ssize_t len = e->d_name[0] == '.'
		                  ? -1
		                  : readlinkat(dirfd(d), e->d_name, target, sizeof(target) - 1);

		if (len <= 0)
			continue;
		target[len] = 0;
		for (size_t i = 0; i < n && !found; i++)
			found = strcmp(target, targets[i]) == 0;
	}
	closedir(d);
	return found;
}

/* Whether process pid has /dev/fuse open. A FUSE daemon holds it from its
 * mount on; one that refuses to mount (the mount point is already one)
 * never opens it. */
static bool holds_fuse_device(pid_t pid)
{
	char fuse[1][40] = {"/dev/fuse"};

	return pid_holds(pid, fuse, 1);
}

/* Whether process pid holds the socket listening on TCP port (IPv4, in
 * this network namespace): /proc/net/tcp names the listener's inode, and
 * pid's descriptors show "socket:[inode]" for it. Without a readable
 * /proc/net/tcp, true. */
static bool listens_on(pid_t pid, uint16_t port)
{
	char sockets[8][40], line[512];
	size_t n = 0;
	FILE *f = fopen("/proc/net/tcp", "r");

	if (!f)
		return true; /* no /proc to ask: the answer is taken as ours */
	while (n < 8 && fgets(line, sizeof(line), f)) {
		unsigned lport, st;
		unsigned long ino;

		/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
		if (sscanf(line, " %*u: %*x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu", &lport,
		           &st, &ino) == 3 &&
		    lport == port && st == 0x0A)
			snprintf(sockets[n++], sizeof(sockets[0]), "socket:[%lu]", ino);
	}
	fclose(f);
	return pid_holds(pid, sockets, n);
}

/* Poll GET /readyz until 200, a daemon exits, a stop signal or timeout. */
static int wait_ready(local_stack *s, local_child *c, uint16_t http_port, cis_errmsg *em)
{
	char base[64];
	uint64_t deadline = cis_mono_ms() + (uint64_t)s->timeout_ms;
	cis_errmsg last = {{0}};

	snprintf(base, sizeof(base), "http://127.0.0.1:%u", http_port);
	for (;;) {
		long status = 0;
		json_t *body = NULL;
		int rc, sig;

		if ((rc = check_alive(s, c, em)) < 0)
			return rc;
		rc = cis_http_call(base, "GET", "/readyz", NULL, 1000, &status, &body, &last);
		json_decref(body);
		/* Ready, and it was our child that answered: another stack
		 * starting beside this one may have picked the same port and
		 * bound it first (ours then fails to bind and check_alive sees
		 * it go, to be started again on other ports). */
		if (rc == 0 && status == 200 && listens_on(c->pid, http_port))
			return 0;
		if (rc == 0 && status == 200)
			snprintf(last.text, sizeof(last.text),
			         "port %u answered, but not from %s (pid %d)", http_port, c->name,
			         (int)c->pid);
		else if (rc == 0)
			snprintf(last.text, sizeof(last.text), "/readyz answered %ld", status);
		if (cis_mono_ms() > deadline)
			return cis_fail(em, -ETIMEDOUT, "%s not ready after %d s (%s; log: %s)",
			                c->name, s->timeout_ms / 1000, last.text, c->log);
		sig = wait_signal(s, LOCAL_POLL_MS);
		if (sig)
			return cis_fail(em, -EINTR, "interrupted by signal %d while starting %s",
			                sig, c->name);
	}
}

/* Whether the mount m (as GET /api/v1/mounts shows it) has what the mount
 * request req asks for: read_only, and block_size and sync_interval where
 * given; and the same store options, credentials aside (the master shows
 * them as "***"; changed credentials need `cistern mount` or a new state
 * directory). */
static bool same_mount_options(const json_t *req, const json_t *m)
{
	const json_t *want = json_object_get(req, "options"), *have = json_object_get(m, "options");
	const char *bs = json_string_value(json_object_get(req, "block_size"));
	const char *si = json_string_value(json_object_get(req, "sync_interval"));
	const char *k;
	json_t *v;
	uint64_t n;

	if (json_is_true(json_object_get(req, "read_only")) !=
	    json_is_true(json_object_get(m, "read_only")))
		return false;
	if (bs && (cis_parse_size(bs, &n) < 0 ||
	           (json_int_t)n != json_integer_value(json_object_get(m, "block_size"))))
		return false;
	if (si && (cis_parse_duration_ms(si, &n) < 0 ||
	           (json_int_t)n != json_integer_value(json_object_get(m, "sync_interval_ms"))))
		return false;
	json_object_foreach((json_t *)want, k, v)
	{
		const char *hv = json_string_value(json_object_get(have, k));

		if (!hv || (strcmp(hv, "***") != 0 && strcmp(hv, json_string_value(v)) != 0))
			return false;
	}
	json_object_foreach((json_t *)have, k, v)
	{
		const char *hv = json_string_value(v);

		if (!json_object_get(want, k) && (!hv || strcmp(hv, "***") != 0))
			return false; /* an option dropped since */
	}
	return true;
}

/* The -o VALUE of a read_only option: 1, 0, or -1 for neither. */
static int option_bool(const char *v)
{
	static const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0",
	                                                                            "no", "off"};

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(v, yes[i]) == 0)
			return 1;
		if (strcasecmp(v, no[i]) == 0)
			return 0;
	}
	return -1;
}

/* Whether the -o argument arg (its '=' at eq) sets key. */
static bool option_is(const char *arg, const char *eq, const char *key)
{
	return strlen(key) == (size_t)(eq - arg) && strncmp(arg, key, (size_t)(eq - arg)) == 0;
}

/* One -o KEY=VALUE into the mount request req: read_only, block_size and
 * sync_interval are the mount's own fields, anything else a connector
 * option. 0, CLI_E_USAGE after saying what is wrong, or -ENOMEM. */
static int put_mount_option(json_t *req, const char *arg)
{
	const char *eq = strchr(arg, '='), *v = eq ? eq + 1 : NULL;
	json_t *field = NULL;
	int b;

	if (!eq || eq == arg) {
		/* never echo it: it may be a secret */
		fprintf(stderr, "cistern: local: -o needs KEY=VALUE\n");
		return CLI_E_USAGE;
	}
	if (option_is(arg, eq, "read_only")) {
		if ((b = option_bool(v)) < 0) {
			fprintf(stderr, "cistern: local: -o read_only=%s: want true or false\n", v);
			return CLI_E_USAGE;
		}
		field = json_boolean(b);
	} else if (option_is(arg, eq, "block_size") || option_is(arg, eq, "sync_interval")) {
		int rc = option_is(arg, eq, "block_size")
		             ? cli_check_block_size("local", "-o block_size", v)
		             : cli_check_sync_interval("local", "-o sync_interval", v);
		if (rc)
			return rc;
		field = json_string(v);
	} else if (option_is(arg, eq, "ca_bundle") && v[0] && v[0] != '/') {
		/* a file of the caller's directory: the master runs in "/" */
		char abs[PATH_MAX], opt[PATH_MAX + 16];
		if (!from_cwd(v, abs, sizeof(abs)) ||
		    snprintf(opt, sizeof(opt), "ca_bundle=%s", abs) >= (int)sizeof(opt)) {
			fprintf(stderr, "cistern: local: -o ca_bundle=%s: path too long\n", v);
			return CLI_E_USAGE;
		}
		return cli_put_option(json_object_get(req, "options"), "local", "-o", opt, opt + 9,
		                      opt + 10);
	} else {
		return cli_put_option(json_object_get(req, "options"), "local", "-o", arg, eq, v);
	}
	char key[16];

	snprintf(key, sizeof(key), "%.*s", (int)(eq - arg), arg);
	return json_object_set_new(req, key, field) ? -ENOMEM : 0;
}

/* The mount request for / (POST /api/v1/mounts {"path": "/", "uri": URI,
 * "options": {...}}) in s->mount_req, made from the -o options before
 * anything starts: 0, CLI_E_USAGE after saying what is wrong, or -ENOMEM. */
static int local_mount_request(local_stack *s)
{
	const char *const *kvs = NULL;
	size_t n = cis_config_multi(s->cfg, "option", &kvs);
	int rc;

	if ((rc = cli_check_path_utf8("local", s->uri)))
		return rc;
	s->mount_req = json_pack("{s:s, s:s, s:{}}", "path", "/", "uri", s->uri, "options");
	if (!s->mount_req) {
		fprintf(stderr, "cistern: local: out of memory\n");
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		if ((rc = put_mount_option(s->mount_req, kvs[i])))
			return rc;
	return 0;
}

/* Mount the store at / (s->mount_req). A mount of / kept from an earlier
 * run (the master's LMDB is in the state dir) is reused when its URI and
 * options are the same, else replaced. */
static int mount_root(local_stack *s, cis_errmsg *em)
{
	const json_t *req = s->mount_req;
	json_t *reply = NULL;
	long status = 0;
	int rc;

	for (int attempt = 0; attempt < 2; attempt++) {
		rc = cis_http_call(s->api, "POST", "/api/v1/mounts", req, 60000, &status, &reply,
		                   em);
		if (rc == -ETIMEDOUT)
			cis_fail(
			    em, rc,
			    "mount %s: the master did not answer in 60 s (is the store slow or "
			    "unreachable?)",
			    s->uri);
		if (rc < 0)
			goto out_req;
		if (status >= 200 && status < 300)
			goto out_ok;
		if (status != 409 || attempt > 0)
			break;
		/* / is mounted from an earlier run: the same store is kept (its
		 * namespace is still good), another is replaced. */
		json_decref(reply);
		reply = NULL;
		rc = cis_http_call(s->api, "GET", "/api/v1/mounts", NULL, 10000, &status, &reply,
		                   em);
		if (rc < 0)
			goto out_req;
		json_t *list = json_is_object(reply) ? json_object_get(reply, "mounts") : reply;
		size_t i;
		json_t *m;
		bool same = false;

		json_array_foreach(list, i, m)
		{
			const char *p = json_string_value(json_object_get(m, "path"));
			const char *u = json_string_value(json_object_get(m, "uri"));

			if (p && strcmp(p, "/") == 0 && u && strcmp(u, s->uri) == 0)
				same = same_mount_options(req, m);
		}
		json_decref(reply);
		reply = NULL;
		if (same)
			goto out_ok;
		rc = cis_http_call(s->api, "DELETE", "/api/v1/mounts?path=%2F", NULL, 30000,
		                   &status, &reply, em);
		if (rc < 0)
			goto out_req;
		if (status < 200 || status >= 300) {
			const char *msg = json_string_value(json_object_get(reply, "error"));

			rc = cis_fail(em, status == 409 ? -EBUSY : -CIS_E_STORE,
			              "cannot replace the mount of / kept from an earlier run: %s",
			              msg ? msg : "refused by the master");
			goto out_req;
		}
		json_decref(reply);
		reply = NULL;
		fprintf(stderr, "cistern local: replacing the mount of / kept from an earlier run "
		                "(another store or options)\n");
	}
	{
		const char *msg = json_string_value(json_object_get(reply, "error"));

		int code = status == 404 ? -ENOENT : -CIS_E_STORE;

		/* The master's message usually names the store already. */
		if (msg && strstr(msg, s->uri))
			rc = cis_fail(em, code, "mount refused: %s", msg);
		else if (msg)
			rc = cis_fail(em, code, "mount %s: %s", s->uri, msg);
		else
			rc = cis_fail(em, code, "mount %s: refused by the master (HTTP %ld)",
			              s->uri, status);
		goto out_req;
	}
out_ok:
	rc = 0;
out_req:
	json_decref(reply);
	return rc;
}

/* Whether dir holds nothing (or cannot be listed: the mount says why). */
static bool dir_empty(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool empty = true;

	if (!d)
		return true;
	while (empty && (e = readdir(d)))
		empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
	closedir(d);
	return empty;
}

/* Wait until our cistern-fuse has mounted. A FUSE mount at mnt alone is no
 * proof: another stack started beside this one on the same mount point may
 * have made it, and our FUSE client then refuses to mount and exits. */
static int wait_mounted(local_stack *s, cis_errmsg *em)
{
	uint64_t deadline = cis_mono_ms() + (uint64_t)s->timeout_ms;

	for (;;) {
		int rc, sig;

		if ((rc = check_alive(s, &s->fuse, em)) < 0)
			return rc;
		if (mounted_fuse(s->mnt) && holds_fuse_device(s->fuse.pid)) {
			s->fuse_mounted = true;
			return 0;
		}
		if (cis_mono_ms() > deadline)
			return cis_fail(em, -ETIMEDOUT, "%s: not mounted after %d s (log: %s)",
			                s->mnt, s->timeout_ms / 1000, s->fuse.log);
		sig = wait_signal(s, LOCAL_POLL_MS);
		if (sig)
			return cis_fail(em, -EINTR, "interrupted by signal %d while mounting", sig);
	}
}

static void port_str(char *out, size_t len, uint16_t p)
{
	snprintf(out, len, "%u", p);
}

static int start_master(local_stack *s, cis_errmsg *em)
{
	char mdata[PATH_MAX], mrpc[8], mhttp[8];
	int rc;

	path_join(mdata, sizeof(mdata), s->state, "master"); /* checked by stack_start */
	port_str(mrpc, sizeof(mrpc), s->m_rpc);
	port_str(mhttp, sizeof(mhttp), s->m_http);

	char *margv[] = {(char *)"cistern-master",
	                 (char *)"--data-dir",
	                 mdata,
	                 (char *)"--bind",
	                 (char *)"127.0.0.1",
	                 (char *)"--rpc-port",
	                 mrpc,
	                 (char *)"--http-port",
	                 mhttp,
	                 NULL};
	if ((rc = child_spawn(&s->master, margv, em)) < 0)
		return rc;
	return wait_ready(s, &s->master, s->m_http, em);
}

/* The worker: state, socket, and one --cache-dir per cache. */
static int start_worker(local_stack *s, cis_errmsg *em)
{
	char wstate[PATH_MAX], sock[PATH_MAX], wrpc[8], whttp[8], master_addr[32];
	char *wargv[20 + 2 * LOCAL_MAX_CACHE_DIRS];
	int wn = 0, rc;

	path_join(wstate, sizeof(wstate), s->state, "worker"); /* checked by stack_start */
	path_join(sock, sizeof(sock), s->state, "worker.sock");
	port_str(wrpc, sizeof(wrpc), s->w_rpc);
	port_str(whttp, sizeof(whttp), s->w_http);
	snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", s->m_rpc);

	wargv[wn++] = (char *)"cistern-worker";
	wargv[wn++] = (char *)"--master";
	wargv[wn++] = master_addr;
	wargv[wn++] = (char *)"--state-dir";
	wargv[wn++] = wstate;
	wargv[wn++] = (char *)"--socket";
	wargv[wn++] = sock;
	wargv[wn++] = (char *)"--rpc-port";
	wargv[wn++] = wrpc;
	wargv[wn++] = (char *)"--http-port";
	wargv[wn++] = whttp;
	/* One machine: nothing off it reads the blocks or the metrics. */
	wargv[wn++] = (char *)"--bind";
	wargv[wn++] = (char *)"127.0.0.1";
	wargv[wn++] = (char *)"--host";
	wargv[wn++] = (char *)"127.0.0.1";
	for (size_t i = 0; i < s->ncache; i++) {
		wargv[wn++] = (char *)"--cache-dir";
		wargv[wn++] = s->caches[i];
	}
	wargv[wn] = NULL;
	if ((rc = child_spawn(&s->worker, wargv, em)) < 0)
		return rc;
	return wait_ready(s, &s->worker, s->w_http, em);
}

/* The FUSE client: each --fuse-option goes to it as one -o. */
static int start_fuse(local_stack *s, cis_errmsg *em)
{
	const char *const *fopts = NULL;
	size_t nfopt = cis_config_multi(s->cfg, "fuse-option", &fopts);
	char fhttp[8], master_addr[32];
	char *fargv[10 + 2 * LOCAL_MAX_FUSE_OPTS];
	int fn = 0, rc;

	port_str(fhttp, sizeof(fhttp), s->f_http);
	snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", s->m_rpc);
	fargv[fn++] = (char *)"cistern-fuse";
	fargv[fn++] = s->mnt;
	fargv[fn++] = (char *)"--master";
	fargv[fn++] = master_addr;
	fargv[fn++] = (char *)"-f";
	fargv[fn++] = (char *)"--http-port";
	fargv[fn++] = fhttp;
	fargv[fn++] = (char *)"--http-bind";
	fargv[fn++] = (char *)"127.0.0.1";
	for (size_t i = 0; i < nfopt && i < LOCAL_MAX_FUSE_OPTS; i++) {
		fargv[fn++] = (char *)"-o";
		fargv[fn++] = (char *)fopts[i];
	}
	fargv[fn] = NULL;
	if ((rc = child_spawn(&s->fuse, fargv, em)) < 0)
		return rc;
	return wait_mounted(s, em);
}

/* After c died at start: whether a port picked for it is taken now, and
 * others were picked in its place. Ports are picked free, but another
 * stack starting beside this one may pick the same ones and bind them
 * first. */
static bool repick_lost_ports(local_stack *s, local_child *c)
{
	bool pair = c != &s->fuse;
	uint16_t *port = c == &s->master ? &s->m_rpc : c == &s->worker ? &s->w_rpc : &s->f_http;
	unsigned next = *port + (pair ? 2u : 1u);

	if (port_free(*port) && (!pair || port_free((uint16_t)(*port + 1))))
		return false; /* it died of something else */
	if (pick_port(next < 32000 ? (uint16_t)next : 32000, pair, s->used, &s->nused, port) < 0)
		return false;
	if (c == &s->master) {
		s->m_http = (uint16_t)(s->m_rpc + 1);
		snprintf(s->api, sizeof(s->api), "http://127.0.0.1:%u", s->m_http);
	} else if (c == &s->worker) {
		s->w_http = (uint16_t)(s->w_rpc + 1);
	}
	return true;
}

/* start() a daemon; one that dies because its port was taken meanwhile is
 * started again on others, LOCAL_PORT_TRIES times in all. */
static int start_daemon(local_stack *s, local_child *c,
                        int (*start)(local_stack *s, cis_errmsg *em), cis_errmsg *em)
{
	for (int attempt = 1;; attempt++) {
		int rc = start(s, em);

		if (rc != -ECHILD || child_alive(c) || attempt == LOCAL_PORT_TRIES ||
		    !repick_lost_ports(s, c))
			return rc;
		fprintf(stderr,
		        "cistern local: %s: its port was taken as it started (%s); "
		        "starting it again on others\n",
		        c->name, cis_errmsg_or(em, rc));
	}
}

/* Start master, worker, mount, FUSE client; each step waits for the last. */
static int stack_start(local_stack *s, cis_errmsg *em)
{
	char mdata[PATH_MAX], wstate[PATH_MAX], sock[PATH_MAX];
	int rc;

	if (!path_join(mdata, sizeof(mdata), s->state, "master") ||
	    !path_join(wstate, sizeof(wstate), s->state, "worker") ||
	    !path_join(sock, sizeof(sock), s->state, "worker.sock"))
		return cis_fail(em, -ENAMETOOLONG, "%s: path too long", s->state);
	if (strlen(sock) >= 108) /* sun_path */
		return cis_fail(em, -ENAMETOOLONG,
		                "%s: too long for a unix socket path (use a shorter --state-dir)",
		                sock);
	if ((rc = mkdir_p(mdata)) < 0 || (rc = mkdir_p(wstate)) < 0)
		return cis_fail(em, rc, "%s: cannot create: %s", s->state, cis_strerror(rc));
	if ((rc = start_daemon(s, &s->master, start_master, em)) < 0 ||
	    (rc = start_daemon(s, &s->worker, start_worker, em)) < 0)
		return rc;
	if ((rc = mount_root(s, em)) < 0) {
		int died = check_alive(s, &s->master, em); /* says more than the request */

		return died < 0 ? died : rc;
	}
	return start_daemon(s, &s->fuse, start_fuse, em);
}

/* local.pid: the supervisor's pid, written as it starts, so that --stop
 * reaches a stack still starting. */
static int write_pid_file(local_stack *s)
{
	char path[PATH_MAX];
	FILE *f;

	path_join(path, sizeof(path), s->state, "local.pid");
	f = fopen(path, "w");
	if (!f)
		return -errno;
	fprintf(f, "%d\n", (int)getpid());
	return fclose(f) == 0 ? 0 : -EIO;
}

/* local.json: the running stack's addresses, for scripts. */
static int write_state_file(local_stack *s)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8], master_addr[32];
	json_t *j;
	int rc = 0;

	snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", s->m_rpc);
	j = json_pack("{s:I, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "pid",
	              (json_int_t)getpid(), "api", s->api, "master", master_addr, "mountpoint",
	              s->mnt, "uri", s->uri, "state_dir", s->state, "master_pid",
	              (json_int_t)s->master.pid, "worker_pid", (json_int_t)s->worker.pid,
	              "fuse_pid", (json_int_t)s->fuse.pid, "worker_http_port",
	              (json_int_t)s->w_http, "fuse_http_port", (json_int_t)s->f_http,
	              "worker_rpc_port", (json_int_t)s->w_rpc);
	if (!j)
		return -ENOMEM;
	path_join(path, sizeof(path), s->state, "local.json");
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (json_dump_file(j, tmp, JSON_INDENT(2)) < 0 || rename(tmp, path) < 0)
		rc = -EIO;
	json_decref(j);
	return rc;
}

static void remove_state_files(local_stack *s)
{
	char path[PATH_MAX];

	if (path_join(path, sizeof(path), s->state, "local.json"))
		unlink(path);
	if (path_join(path, sizeof(path), s->state, "local.pid"))
		unlink(path);
}

/* Whether a stop signal waits (the supervisor blocks them and takes them
 * with sigtimedwait): it cuts short a request to the master. */
static bool stop_pending(void)
{
	sigset_t pend;

	if (sigpending(&pend) < 0)
		return false;
	return sigismember(&pend, SIGINT) == 1 || sigismember(&pend, SIGTERM) == 1 ||
	       sigismember(&pend, SIGHUP) == 1;
}

/* Say line to whoever started us (ready_fd, closed after) and on out.
 * False when a background start's caller is gone and was told nothing. */
static bool report(int ready_fd, const char *line, FILE *out)
{
	bool told = true;

	if (ready_fd >= 0) {
		told = dprintf(ready_fd, "%s", line) >= 0;
		close(ready_fd);
	}
	fputs(line, out);
	fflush(out);
	return told;
}

/* Close every descriptor from 3 up but those in keep (n, any order; one
 * below 3 or -1 is no matter). */
static void close_all_but(int *keep, size_t n)
{
	unsigned lo = 3;

	for (size_t i = 1; i < n; i++) /* sorted: a handful */
		for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];
			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	for (size_t i = 0; i < n; i++) {
		if (keep[i] < (int)lo)
			continue;
		if ((unsigned)keep[i] > lo)
			close_range(lo, (unsigned)keep[i] - 1, 0);
		lo = (unsigned)keep[i] + 1;
	}
	close_range(lo, ~0U, 0);
}

/* The supervisor: start, report to ready_fd (or stdout with -f), then wait
 * for a stop signal or a child's death, and tear down. Exit code. */
static int supervise(local_stack *s, int ready_fd)
{
	cis_errmsg em = {{0}};
	int rc, code = 0;
	char line[LOCAL_LINE_MAX];

	write_pid_file(s);
	/* Its paths are absolute: it holds no caller's directory busy, and
	 * its daemons inherit no descriptor of the caller's. */
	if (chdir("/") < 0)
		fprintf(stderr, "cistern local: cannot leave the caller's directory: %s\n",
		        strerror(errno));
	close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
	cis_http_client_set_stop(stop_pending);
	rc = stack_start(s, &em);
	if (rc < 0) {
		stack_teardown(s);
		remove_state_files(s);
		snprintf(line, sizeof(line), "cistern local: %s\n", cis_errmsg_or(&em, rc));
		report(ready_fd, line, stderr);
		return 1;
	}
	write_state_file(s);
	snprintf(line, sizeof(line),
	         "cistern local: ready: %s mounted at %s (api %s, state %s, pid %d)\n", s->uri,
	         s->mnt, s->api, s->state, (int)getpid());
	/* A caller killed while it waited for this line would never know to
	 * stop us: stop rather than stay up unseen. */
	bool told = report(ready_fd, line, stdout);

	for (;;) {
		int sig = told ? wait_signal(s, 500) : 0;

		if (!told) {
			fprintf(stderr,
			        "cistern local: nobody heard the ready line; unmounting %s "
			        "and stopping\n",
			        s->mnt);
			break;
		}
		if (sig) {
			fprintf(stderr, "cistern local: signal %d: unmounting %s and stopping\n",
			        sig, s->mnt);
			break;
		}
		reap(s);
		local_child *all[] = {&s->master, &s->worker, &s->fuse};
		bool done = false;

		for (size_t i = 0; i < 3; i++) {
			char why[768];

			if (child_alive(all[i]))
				continue;
			done = true;
			/* Unmounted from outside (fusermount3 -u): cistern-fuse
			 * ends cleanly, and the rest is stopped as on a signal. */
			if (all[i] == &s->fuse && WIFEXITED(s->fuse.status) &&
			    WEXITSTATUS(s->fuse.status) == 0 && !mounted_fuse(s->mnt)) {
				fprintf(stderr, "cistern local: %s was unmounted; stopping\n",
				        s->mnt);
				continue;
			}
			child_describe_exit(all[i], why, sizeof(why));
			fprintf(stderr, "cistern local: %s; stopping the rest\n", why);
			code = 1;
		}
		if (done)
			break;
	}
	stack_teardown(s);
	remove_state_files(s);
	fprintf(stderr, "cistern local: stopped\n");
	return code;
}

/* ---- set-up shared by start and stop ---- */

static int default_state_dir(const char *mnt, char *out, size_t len, cis_errmsg *em)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	char base[PATH_MAX];
	uint64_t h = cis_hash64(mnt, strlen(mnt), 0);
	const char *name = strrchr(mnt, '/');

	if (xdg && *xdg)
		snprintf(base, sizeof(base), "%s/cistern/local", xdg);
	else if (home && *home)
		snprintf(base, sizeof(base), "%s/.cache/cistern/local", home);
	else
		return cis_fail(em, -CIS_E_CONFIG,
		                "neither HOME nor XDG_CACHE_HOME is set: give "
		                "--state-dir");
	name = name && name[1] ? name + 1 : "root";
	if (snprintf(out, len, "%s/%.32s-%08x", base, name, (unsigned)(h & 0xffffffffu)) >=
	    (int)len)
		return cis_fail(em, -ENAMETOOLONG, "state directory path too long");
	return 0;
}

/* The lock of mount point mnt, held by the stack serving it from its start
 * to its end, whatever its state dir: without it two stacks started at one
 * moment on one mount point (each with a state dir of its own) could both
 * mount there and both say ready. In the default state dirs' parent; *fd
 * is -1 with no HOME or XDG_CACHE_HOME (then only the state dir's lock
 * holds). 0 or a negative errno. */
static int mountpoint_lock(const char *mnt, int *fd, cis_errmsg *em)
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	char *slash;

	*fd = -1;
	if (default_state_dir(mnt, dir, sizeof(dir), NULL) < 0 || !(slash = strrchr(dir, '/')))
		return 0;
	*slash = 0;
	int rc = mkdir_p(dir);
	if (rc < 0)
		return cis_fail(em, rc, "%s: cannot create: %s", dir, cis_strerror(rc));
	snprintf(path, sizeof(path), "%s/mnt-%08x.lock", dir,
	         (unsigned)(cis_hash64(mnt, strlen(mnt), 0) & 0xffffffffu));
	*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (*fd < 0)
		return cis_fail(em, -errno, "%s: %s", path, strerror(errno));
	if (flock(*fd, LOCK_EX | LOCK_NB) < 0) {
		close(*fd);
		*fd = -1;
		return cis_fail(em, -EBUSY,
		                "%s: another cistern local is starting or serving it (with "
		                "another --state-dir); stop that one first",
		                mnt);
	}
	return 0;
}

static int resolve_state_dir(const cis_config *cfg, const char *mnt, char *out, size_t len,
                             cis_errmsg *em)
{
	const char *sd = cis_config_str(cfg, "state-dir");
	int rc;

	if (!sd)
		return default_state_dir(mnt, out, len, em);
	if ((rc = mkdir_p(sd)) < 0)
		return cis_fail(em, rc, "%s: cannot create: %s", sd, cis_strerror(rc));
	if (!realpath(sd, out))
		return cis_fail(em, -errno, "%s: %s", sd, strerror(errno));
	return 0;
}

static pid_t read_pid(const char *state)
{
	char path[PATH_MAX];
	FILE *f;
	int pid = 0;

	if (!path_join(path, sizeof(path), state, "local.pid"))
		return 0;
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%d", &pid) != 1)
		pid = 0;
	fclose(f);
	return pid > 0 ? pid : 0;
}

/* Whether a supervisor holds state's lock: it does while it runs. */
static bool stack_lock_held(const char *state)
{
	char lockp[PATH_MAX];
	int fd;

	if (!path_join(lockp, sizeof(lockp), state, "lock"))
		return false;
	fd = open(lockp, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool held = flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	close(fd);
	return held;
}

/* The pid of the supervisor running on state, or 0. When the lock is
 * free, local.pid is left from one that was killed, and its pid may be
 * another process's by now. */
static pid_t stack_pid(const char *state)
{
	if (!stack_lock_held(state)) {
		char path[PATH_MAX];

		if (path_join(path, sizeof(path), state, "local.pid"))
			unlink(path);
		if (path_join(path, sizeof(path), state, "local.json"))
			unlink(path);
		return 0;
	}
	return read_pid(state);
}

/* rc, a reported failure, as a command result: a -CIS_E_CONFIG found
 * after parsing (no HOME, a bad --option) is no usage error, exit status 1. */
static int not_usage(int rc)
{
	return rc == CLI_E_USAGE ? -EINVAL : rc;
}

static int local_stop(const cis_config *cfg, const char *mnt_arg)
{
	char mnt[PATH_MAX], state[PATH_MAX];
	cis_errmsg em = {{0}};
	pid_t pid;
	int rc;

	if ((rc = abs_mountpoint(mnt_arg, mnt, sizeof(mnt), &em)) < 0 ||
	    (rc = resolve_state_dir(cfg, mnt, state, sizeof(state), &em)) < 0) {
		fprintf(stderr, "cistern local: %s\n", cis_errmsg_or(&em, rc));
		return not_usage(rc);
	}
	pid = stack_pid(state);
	if (pid > 0 && kill(pid, 0) == 0) {
		uint64_t deadline = cis_mono_ms() + LOCAL_STOP_TIMEOUT_MS + 30000;

		kill(pid, SIGTERM);
		/* Gone when its lock is free: a supervisor whose parent does
		 * not reap it (PID 1 in a container) stays a zombie, which
		 * kill(pid, 0) takes for alive; and it removes local.pid
		 * before it lets go of the lock, so the pid file going says
		 * nothing yet. */
		while (stack_lock_held(state) && cis_mono_ms() < deadline)
			cis_sleep_ms(50);
		if (stack_lock_held(state)) {
			fprintf(stderr, "cistern local: pid %d did not stop; see %s/logs\n",
			        (int)pid, state);
			return -ETIMEDOUT;
		}
		printf("cistern local: stopped %s (pid %d)\n", mnt, (int)pid);
		return 0;
	}
	if (mounted_fuse(mnt)) {
		/* A mount left by a killed stack (its daemon gone: statfs fails
		 * with ENOTCONN), or one of a stack started with another
		 * --state-dir, which stops when it sees its mount gone. */
		bool served = !mount_dead(mnt);
		unmount_fuse(mnt);
		if (mounted_fuse(mnt)) {
			fprintf(stderr, "cistern local: %s: cannot unmount (busy?)\n", mnt);
			return -EBUSY;
		}
		if (served)
			printf(
			    "cistern local: unmounted %s; the stack serving it (state not in %s) "
			    "stops as it sees that\n",
			    mnt, state);
		else
			printf("cistern local: unmounted a stale mount at %s\n", mnt);
		return 0;
	}
	fprintf(stderr, "cistern local: %s: no cistern local running for it (state %s)\n", mnt,
	        state);
	return -ESRCH;
}

/* The DIR of a --cache-dir DIR[:SIZE] into dir (len bytes), split at the
 * last colon when a size follows it, as the worker splits it (a colon in
 * the path itself stays there); *sized says whether a size was given.
 * False when DIR is empty or too long. */
static bool cache_dir_path(const char *arg, char *dir, size_t len, bool *sized)
{
	const char *colon = strrchr(arg, ':');
	uint64_t size;
	size_t n = strlen(arg);

	*sized = colon && cis_parse_size(colon + 1, &size) == 0;
	if (*sized)
		n = (size_t)(colon - arg);
	if (n == 0 || n >= len)
		return false;
	memcpy(dir, arg, n);
	dir[n] = 0;
	return true;
}

/* The worker's --cache-dir arguments: each --cache-dir, one without a
 * size given half the free space in it (1..64 GiB); none: STATE/cache so.
 * One that is a file is refused: the worker would start without it and,
 * with no other, cache nothing. */
static int cache_args(local_stack *s, cis_errmsg *em)
{
	const char *const *dirs = NULL;
	size_t n = cis_config_multi(s->cfg, "cache-dir", &dirs);
	char def[PATH_MAX];
	const char *only = def;
	int rc;

	if (n == 0) {
		path_join(def, sizeof(def), s->state, "cache");
		dirs = &only;
		n = 1;
	}
	for (size_t i = 0; i < n; i++) {
		struct statvfs vfs;
		uint64_t size = 4ull << 30;
		char dir[PATH_MAX];
		struct stat st;
		bool sized;
		char *arg;

		if (!cache_dir_path(dirs[i], dir, sizeof(dir), &sized))
			return cis_fail(em, -EINVAL, "--cache-dir %s: want DIR[:SIZE]", dirs[i]);
		const char *size_arg = dirs[i] + strlen(dir); /* ":SIZE" or "" */
		/* Absolute: the supervisor and its daemons run in "/". */
		char rel[PATH_MAX];
		snprintf(rel, sizeof(rel), "%s", dir);
		if (!from_cwd(rel, dir, sizeof(dir)))
			return cis_fail(em, -ENAMETOOLONG, "--cache-dir %s: path too long",
			                dirs[i]);
		if (sized) {
			/* The worker makes it; one that is a file it would skip. */
			if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
				return cis_fail(em, -ENOTDIR, "--cache-dir %s: %s", dir,
				                cis_strerror(-ENOTDIR));
			if (asprintf(&arg, "%s%s", dir, size_arg) < 0)
				arg = NULL;
		} else {
			if ((rc = mkdir_p(dir)) < 0)
				return cis_fail(em, rc, "--cache-dir %s: %s", dir,
				                cis_strerror(rc));
			if (statvfs(dir, &vfs) == 0) {
				size = (uint64_t)vfs.f_bavail * vfs.f_frsize / 2;
				if (size > (64ull << 30))
					size = 64ull << 30;
				if (size < (1ull << 30))
					size = 1ull << 30;
			}
			arg = NULL;
			if (asprintf(&arg, "%s:%lluM", dir, (unsigned long long)(size >> 20)) < 0)
				arg = NULL;
		}
		if (!arg)
			return cis_fail(em, -ENOMEM, "out of memory");
		s->caches[s->ncache++] = arg;
	}
	return 0;
}

/* Whether path is dir or below it (both absolute, resolved). */
static bool path_within(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (strcmp(dir, "/") == 0)
		return true;
	return strncmp(path, dir, n) == 0 && (path[n] == 0 || path[n] == '/');
}

/* A mount point over the file:// store's own directory (or around it)
 * would have the master read its store through its own mount and hang;
 * one over the state directory or a cache directory would hide it from the
 * daemons (the worker, finding its cache gone, caches nothing). */
static int check_overlaps(const local_stack *s, cis_errmsg *em)
{
	const char *const *caches = NULL;
	size_t ncache = cis_config_multi(s->cfg, "cache-dir", &caches);
	char store[PATH_MAX];

	if (path_within(s->state, s->mnt))
		return cis_fail(em, -EINVAL, "%s: the state directory %s is inside it", s->mnt,
		                s->state);
	/* Over the state's own cache/ or logs/, it would hide them. */
	if (path_within(s->mnt, s->state))
		return cis_fail(em, -EINVAL,
		                "%s: inside the state directory %s; mount it elsewhere", s->mnt,
		                s->state);
	for (size_t i = 0; i < ncache; i++) {
		char dir[PATH_MAX], abs[PATH_MAX];
		cis_errmsg unresolved = {{0}};
		bool sized;

		if (!cache_dir_path(caches[i], dir, sizeof(dir), &sized))
			continue; /* refused where the worker's arguments are made */
		/* Resolved as the mount point is: symbolic links followed, a
		 * missing last component taken as it will be made. */
		if (abs_mountpoint(dir, abs, sizeof(abs), &unresolved) == 0 &&
		    path_within(abs, s->mnt))
			return cis_fail(em, -EINVAL, "%s: the cache directory %s is inside it",
			                s->mnt, dir);
	}
	if (strncmp(s->uri, "file://", 7) != 0)
		return 0;
	const char *dir = s->uri + 7;
	if (strncmp(dir, "localhost/", 10) == 0) /* file://localhost/dir is file:///dir */
		dir += 9;
	if (!realpath(dir, store))
		return 0;
	if (path_within(s->mnt, store) || path_within(store, s->mnt))
		return cis_fail(em, -EINVAL,
		                "%s: overlaps the store %s (the mount would serve its own store); "
		                "mount it elsewhere",
		                s->mnt, s->uri);
	return 0;
}

/* The mount point of the stack running on state (local.json), or "?". */
static void running_mountpoint(const char *state, char *out, size_t len)
{
	char path[PATH_MAX];
	json_t *j = NULL;
	const char *m = NULL;

	if (path_join(path, sizeof(path), state, "local.json"))
		j = json_load_file(path, 0, NULL);
	m = json_string_value(json_object_get(j, "mountpoint"));
	snprintf(out, len, "%s", m ? m : "?");
	json_decref(j);
}

/* Whether uri's authority holds more than a bucket or host name: a
 * "user:secret@" (a secret may hold a '/', so any ':' counts). Such a URI
 * is refused without being echoed: it would be printed, logged and kept
 * in local.json. */
static bool uri_has_userinfo(const char *uri)
{
	const char *auth = strstr(uri, "://");

	if (!auth)
		return false;
	auth += 3;
	size_t n = strcspn(auth, "/?#");
	return memchr(auth, '@', n) || memchr(auth, ':', n);
}

/* The flags checked before anything is made or started: 0, or CLI_E_USAGE
 * (or -ENOMEM) after saying what is wrong. */
static int local_check_flags(local_stack *s)
{
	static const char *const ports[] = {"master-port", "worker-port", "fuse-http-port"};
	const char *const *vals = NULL;
	cis_errmsg em = {{0}};
	int64_t v = 0;
	int rc = 0;

	if (cis_config_int(s->cfg, "timeout", 1, 3600, &v, &em) < 0)
		rc = CLI_E_USAGE;
	else if (cis_config_multi(s->cfg, "cache-dir", &vals) > LOCAL_MAX_CACHE_DIRS)
		rc = cis_fail(&em, CLI_E_USAGE, "at most %d --cache-dir", LOCAL_MAX_CACHE_DIRS);
	else if (cis_config_multi(s->cfg, "fuse-option", &vals) > LOCAL_MAX_FUSE_OPTS)
		rc = cis_fail(&em, CLI_E_USAGE, "at most %d --fuse-option", LOCAL_MAX_FUSE_OPTS);
	s->timeout_ms = (int)v * 1000;
	const char *const *caches = NULL;
	size_t ncaches = cis_config_multi(s->cfg, "cache-dir", &caches);
	for (size_t i = 0; i < ncaches && rc == 0; i++) {
		/* DIR:SIZE with a size that does not parse would be taken for a
		 * directory named so, and made. */
		const char *colon = strrchr(caches[i], ':');
		uint64_t size;

		if (!colon || !(isdigit((unsigned char)colon[1]) || colon[1] == '-'))
			continue;
		if (cis_parse_size(colon + 1, &size) < 0)
			rc = cis_fail(&em, CLI_E_USAGE,
			              "--cache-dir %s: '%s' is not a size (K/M/G/T)", caches[i],
			              colon + 1);
		else if (size == 0 || size > CIS_CACHE_DIR_MAX)
			rc = cis_fail(&em, CLI_E_USAGE,
			              "--cache-dir %s: want a size above 0, at most 1 EiB",
			              caches[i]);
	}
	for (size_t i = 0; i < 3 && rc == 0; i++) {
		int64_t p = 0;

		if (cis_config_int(s->cfg, ports[i], 1, 65534, &p, &em) < 0)
			rc = CLI_E_USAGE;
		s->want_ports[i] = (uint16_t)p;
	}
	if (rc) {
		fprintf(stderr, "cistern local: %s\n", cis_errmsg_or(&em, rc));
		return rc;
	}
	if (uri_has_userinfo(s->uri)) {
		fprintf(stderr,
		        "cistern local: credentials in the URI are not supported (and are "
		        "not repeated here): give them with --option access_key=... "
		        "--option secret_key=... or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY\n");
		return CLI_E_USAGE;
	}
	if (strncmp(s->uri, "s3://", 5) != 0 && strncmp(s->uri, "file://", 7) != 0) {
		const char *sep = strstr(s->uri, "://");
		fprintf(stderr,
		        "cistern local: %.*s: unsupported URI (use s3://bucket/prefix or "
		        "file:///dir)\n",
		        sep ? (int)(sep - s->uri + 3) : (int)strlen(s->uri), s->uri);
		return CLI_E_USAGE;
	}
	return local_mount_request(s);
}

/* path (a file that exists) made absolute in place, when it fits. */
static void absolute_path(char *path, size_t len)
{
	char abs[PATH_MAX];

	if (path[0] != '/' && realpath(path, abs) && strlen(abs) < len)
		memcpy(path, abs, strlen(abs) + 1);
}

static int local_prepare(local_stack *s, const char *mnt_arg, int *lock_fd, int *mnt_lock_fd,
                         cis_errmsg *em)
{
	const char *bin_dir = cis_config_str(s->cfg, "bin-dir");
	char logs[PATH_MAX], lockp[PATH_MAX], fs[64] = "";
	struct stat st;
	int rc;

	if ((rc = abs_mountpoint(mnt_arg, s->mnt, sizeof(s->mnt), em)) < 0)
		return rc;
	/* The lock first: a start refused for a running stack touches nothing. */
	if ((rc = resolve_state_dir(s->cfg, s->mnt, s->state, sizeof(s->state), em)) < 0)
		return rc;
	if (!path_join(logs, sizeof(logs), s->state, "logs") ||
	    !path_join(lockp, sizeof(lockp), s->state, "lock"))
		return cis_fail(em, -ENAMETOOLONG, "%s: path too long", s->state);
	if ((rc = mkdir_p(logs)) < 0)
		return cis_fail(em, rc, "%s: cannot create: %s", logs, cis_strerror(rc));
	*lock_fd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (*lock_fd < 0)
		return cis_fail(em, -errno, "%s: %s", lockp, strerror(errno));
	if (flock(*lock_fd, LOCK_EX | LOCK_NB) < 0) {
		char other[PATH_MAX];

		running_mountpoint(s->state, other, sizeof(other));
		close(*lock_fd);
		*lock_fd = -1;
		return cis_fail(
		    em, -EBUSY,
		    "%s: already in use by a running cistern local (pid %d, serving %s); "
		    "stop it with cistern local --stop %s --state-dir %s",
		    s->state, (int)read_pid(s->state), other, other, s->state);
	}
	/* Ours now: a local.pid left by a stack that was killed names a pid
	 * that may be another process's by now, and a --stop would signal
	 * it. This process forwards a stop to the supervisor it starts,
	 * which writes its own pid when it runs. */
	write_pid_file(s);
	if ((rc = mountpoint_lock(s->mnt, mnt_lock_fd, em)) < 0)
		return rc;
	if (mounted(s->mnt, fs, sizeof(fs))) {
		if (strcmp(fs, CISTERN_FSTYPE) == 0 && mount_dead(s->mnt)) {
			/* Left by a stack that was killed: nobody serves it. */
			unmount_fuse(s->mnt);
		}
		if (mounted(s->mnt, fs, sizeof(fs)))
			return cis_fail(em, -EBUSY,
			                "%s: already a mount point (%s); unmount it first "
			                "(cistern local --stop %s, or fusermount3 -u %s)",
			                s->mnt, fs, s->mnt, s->mnt);
	}
	if ((rc = check_overlaps(s, em)) < 0)
		return rc;
	if (stat(s->mnt, &st) < 0) {
		if (errno != ENOENT)
			return cis_fail(em, -errno, "%s: %s", s->mnt, strerror(errno));
		if (mkdir(s->mnt, 0755) < 0)
			return cis_fail(em, -errno, "%s: cannot create: %s", s->mnt,
			                strerror(errno));
		s->made_mnt = true;
	} else if (!S_ISDIR(st.st_mode)) {
		return cis_fail(em, -ENOTDIR, "%s: not a directory", s->mnt);
	} else if (!cis_config_bool(s->cfg, "allow-non-empty") && !dir_empty(s->mnt)) {
		return cis_fail(em, -ENOTEMPTY,
		                "%s: not empty: the mount would hide its files (give "
		                "--allow-non-empty to mount over them)",
		                s->mnt);
	}

	if ((rc = find_daemon(bin_dir, "cistern-master", "master", s->master.bin,
	                      sizeof(s->master.bin), em)) < 0 ||
	    (rc = find_daemon(bin_dir, "cistern-worker", "worker", s->worker.bin,
	                      sizeof(s->worker.bin), em)) < 0 ||
	    (rc = find_daemon(bin_dir, "cistern-fuse", "fuse", s->fuse.bin, sizeof(s->fuse.bin),
	                      em)) < 0)
		return rc;
	absolute_path(s->master.bin, sizeof(s->master.bin)); /* the stack runs in "/" */
	absolute_path(s->worker.bin, sizeof(s->worker.bin));
	absolute_path(s->fuse.bin, sizeof(s->fuse.bin));
	if (!path_join(s->master.log, sizeof(s->master.log), logs, "master.log") ||
	    !path_join(s->worker.log, sizeof(s->worker.log), logs, "worker.log") ||
	    !path_join(s->fuse.log, sizeof(s->fuse.log), logs, "fuse.log"))
		return cis_fail(em, -ENAMETOOLONG, "%s: path too long", logs);

	if ((rc = cache_args(s, em)) < 0)
		return rc;

	if (pick_port(s->want_ports[0], true, s->used, &s->nused, &s->m_rpc) < 0 ||
	    pick_port(s->want_ports[1], true, s->used, &s->nused, &s->w_rpc) < 0 ||
	    pick_port(s->want_ports[2], false, s->used, &s->nused, &s->f_http) < 0)
		return cis_fail(em, -EADDRINUSE, "no free TCP ports for the daemons");
	s->m_http = (uint16_t)(s->m_rpc + 1);
	s->w_http = (uint16_t)(s->w_rpc + 1);
	snprintf(s->api, sizeof(s->api), "http://127.0.0.1:%u", s->m_http);
	return 0;
}

static volatile sig_atomic_t stop_asked;

static void note_stop(int sig)
{
	(void)sig;
	stop_asked = 1;
}

int cli_cmd_local(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg = NULL;
	cis_errmsg em = {{0}};
	local_stack s;
	int rc, lock_fd = -1, mnt_lock_fd = -1, pipefd[2];
	bool fg;

	(void)c; /* the stack has its own master; --api is not used */
	memset(&s, 0, sizeof(s));
	s.master.name = "cistern-master";
	s.worker.name = "cistern-worker";
	s.fuse.name = "cistern-fuse";

	rc = cis_config_load(&cfg, local_opts, NULL, argc, argv, 1, &em);
	if (rc == 1 || rc == 2) {
		if (rc == 1)
			cis_config_usage(local_opts, stdout, local_synopsis);
		else
			cis_version_print("cistern", stdout);
		cis_config_free(cfg);
		return 0;
	}
	if (rc < 0) {
		fprintf(stderr, "cistern local: %s\n", cis_errmsg_or(&em, rc));
		return CLI_E_USAGE;
	}
	s.cfg = cfg;
	if (cis_config_bool(cfg, "stop")) {
		if (cis_config_npos(cfg) != 1) {
			fprintf(stderr, "cistern local: --stop takes one MOUNTPOINT\n");
			rc = CLI_E_USAGE;
		} else {
			rc = local_stop(cfg, cis_config_pos(cfg, 0));
		}
		cis_config_free(cfg);
		return rc;
	}
	if (cis_config_npos(cfg) != 2) {
		cis_config_usage(local_opts, stderr, local_synopsis);
		cis_config_free(cfg);
		return CLI_E_USAGE;
	}
	s.uri = cis_config_pos(cfg, 0);
	fg = cis_config_bool(cfg, "foreground");

	if ((rc = local_check_flags(&s)) < 0) {
		json_decref(s.mount_req);
		cis_config_free(cfg);
		return rc;
	}
	rc = local_prepare(&s, cis_config_pos(cfg, 1), &lock_fd, &mnt_lock_fd, &em);
	if (rc < 0) {
		fprintf(stderr, "cistern local: %s\n", cis_errmsg_or(&em, rc));
		goto out_lock;
	}

	/* The supervisor takes stop signals synchronously (sigtimedwait), and
	 * reaps its children itself. */
	signal(SIGCHLD, SIG_DFL);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&s.sigs);
	sigaddset(&s.sigs, SIGINT);
	sigaddset(&s.sigs, SIGTERM);
	sigaddset(&s.sigs, SIGHUP);
	sigaddset(&s.sigs, SIGCHLD);

	if (fg) {
		sigprocmask(SIG_BLOCK, &s.sigs, NULL);
		rc = supervise(&s, -1) ? -ECHILD : 0; /* it reported why */
		goto out_lock;
	}

	/* Background: fork the supervisor; it reports one line through a
	 * pipe, which we print; EOF without a line means it died. */
	if (pipe2(pipefd, O_CLOEXEC) < 0) {
		rc = -errno;
		fprintf(stderr, "cistern local: pipe: %s\n", strerror(-rc));
		goto out_lock;
	}
	fflush(NULL);
	pid_t pid = fork();

	if (pid < 0) {
		rc = -errno;
		fprintf(stderr, "cistern local: fork: %s\n", strerror(-rc));
		close(pipefd[0]);
		close(pipefd[1]);
		goto out_lock;
	}
	if (pid == 0) {
		char logp[PATH_MAX + 16];
		int null = open("/dev/null", O_RDWR | O_CLOEXEC), logfd;

		close(pipefd[0]);
		setsid();
		sigprocmask(SIG_BLOCK, &s.sigs, NULL);
		/* Detached: none of the caller's descriptors (a pipe a script
		 * waits on for EOF) stays open in it. */
		int keep[] = {pipefd[1], lock_fd, mnt_lock_fd, null};
		close_all_but(keep, sizeof(keep) / sizeof(keep[0]));
		snprintf(logp, sizeof(logp), "%s/logs/local.log", s.state);
		logfd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (null >= 0)
			dup2(null, 0);
		if (logfd >= 0) {
			dup2(logfd, 1);
			dup2(logfd, 2);
		}
		_exit(supervise(&s, pipefd[1]));
	}
	close(pipefd[1]);
	if (lock_fd >= 0) {
		close(lock_fd); /* the supervisor holds it now */
		lock_fd = -1;
	}
	if (mnt_lock_fd >= 0) {
		close(mnt_lock_fd); /* and this one */
		mnt_lock_fd = -1;
	}
	{
		char line[LOCAL_LINE_MAX];
		size_t n = 0;

		/* Ctrl-C here stops the start (the supervisor is in its own
		 * session, so it would not get it and would come up unseen). */
		struct sigaction sa = {.sa_handler = note_stop}; /* no SA_RESTART */
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGHUP, &sa, NULL);
		bool forwarded = false;
		while (n < sizeof(line) - 1) {
			struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};

			if (stop_asked && !forwarded) {
				fprintf(stderr,
				        "cistern local: interrupted; stopping the stack being "
				        "started\n");
				kill(pid, SIGTERM);
				forwarded = true;
			}
			if (poll(&pfd, 1, LOCAL_POLL_MS) <= 0)
				continue; /* a signal, or the next look at stop_asked */
			ssize_t r = read(pipefd[0], line + n, sizeof(line) - 1 - n);

			if (r > 0)
				n += (size_t)r;
			else if (r == 0 || errno != EINTR)
				break;
		}
		close(pipefd[0]);
		line[n] = 0;
		if (forwarded) {
			/* Stopped as asked, whatever it had written by then (a
			 * ready line too): the stack is going, not up. */
			int st;

			waitpid(pid, &st, 0);
			fprintf(stderr, "cistern local: stopped before it was ready\n");
			rc = -ECANCELED;
		} else if (strncmp(line, "cistern local: ready:", 21) == 0) {
			fputs(line, stdout);
			/* A state dir of one's own must be named to --stop too. */
			if (cis_config_str(s.cfg, "state-dir"))
				printf(
				    "cistern local: stop with: cistern local --stop %s --state-dir "
				    "%s\n",
				    s.mnt, s.state);
			else
				printf("cistern local: stop with: cistern local --stop %s\n",
				       s.mnt);
			rc = 0;
		} else {
			int st;

			if (n)
				fputs(line, stderr);
			else
				fprintf(stderr,
				        "cistern local: the supervisor died while starting (see "
				        "%s/logs)\n",
				        s.state);
			waitpid(pid, &st, 0);
			rc = -ECHILD; /* the supervisor failed */
		}
	}
out_lock:
	if (rc < 0 && s.made_mnt)
		rmdir(s.mnt); /* made for a start that failed */
	if (rc < 0 && lock_fd >= 0)
		remove_state_files(&s); /* local.pid, written once the lock was ours */
	if (lock_fd >= 0)
		close(lock_fd);
	if (mnt_lock_fd >= 0)
		close(mnt_lock_fd);
	for (size_t i = 0; i < s.ncache; i++)
		free(s.caches[i]);
	json_decref(s.mount_req);
	cis_config_free(cfg);
	return not_usage(rc);
}
