/* What the CLI prints to a terminal: names, paths and messages come from
 * the stores (any byte but NUL and '/' in a name), from workers (their host
 * names) and from the master's errors quoting them. On a terminal, stdout
 * and stderr go through a filter that shows control characters (C0 but
 * '\n', '\r' and '\t'; DEL; the C1 range, UTF-8 0xC2 0x80-0x9F) as \xNN,
 * so that a name cannot move the cursor, retitle the window or clear the
 * screen of the admin reading it. Pipes and files get the bytes as they
 * are (JSON output escapes them itself). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct tty_out {
	int fd;
	bool held_c2; /* a 0xC2 at the end of the last write: C1 or not */
} tty_out;

static int write_all_fd(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static bool shown_raw(unsigned char b)
{
	return b >= 0x20 ? b != 0x7f : b == '\n' || b == '\r' || b == '\t';
}

static ssize_t tty_write(void *cookie, const char *buf, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	tty_out *t = cookie;
	char out[4096 + 8];
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char b = (unsigned char)buf[i];
		if (o > sizeof(out) - 8) {
			if (write_all_fd(t->fd, out, o) < 0)
				return -1;
			o = 0;
		}
		if (t->held_c2) {
			t->held_c2 = false;
			if (b >= 0x80 && b <= 0x9f) { /* C1: \xNN of the code */
				out[o++] = '\\';
				out[o++] = 'x';
				out[o++] = hex[b >> 4];
				out[o++] = hex[b & 15];
				continue;
			}
			out[o++] = (char)0xc2;
		}
		if (b == 0xc2) {
			t->held_c2 = true;
		} else if (shown_raw(b)) {
			out[o++] = (char)b;
		} else {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[b >> 4];
			out[o++] = hex[b & 15];
		}
	}
	return write_all_fd(t->fd, out, o) < 0 ? -1 : (ssize_t)n;
}

static int tty_close(void *cookie)
{
	tty_out *t = cookie;
	int rc = t->held_c2 ? write_all_fd(t->fd, "\xc2", 1) : 0;
	free(t);
	return rc;
}

/* *stream (stdout or stderr, on fd) through the filter when fd is a
 * terminal; left as it is otherwise or when the filter cannot be made. */
static void guard(FILE **stream, int fd)
{
	if (!isatty(fd))
		return;
	tty_out *t = calloc(1, sizeof(*t));
	if (!t)
		return;
	t->fd = fd;
	cookie_io_functions_t io = {.write = tty_write, .close = tty_close};
	FILE *f = fopencookie(t, "w", io);
	if (!f) {
		free(t);
		return;
	}
	fflush(*stream);
	setvbuf(f, NULL, fd == STDERR_FILENO ? _IONBF : _IOLBF, 0);
	*stream = f;
}

void cli_guard_terminal(void)
{
	guard(&stdout, STDOUT_FILENO);
	guard(&stderr, STDERR_FILENO);
}

const char *cli_name_shown(const char *name)
{
	static char bufs[2][4 * 4200 + 1];
	static unsigned next;

	if (!isatty(STDOUT_FILENO) || !strpbrk(name, "\n\r\t"))
		return name;
	char *out = bufs[next++ % 2];
	size_t o = 0;
	for (const char *p = name; *p && o < sizeof(bufs[0]) - 5; p++) {
		if (*p == '\n' || *p == '\r' || *p == '\t')
			o += (size_t)snprintf(out + o, 5, "\\x%02x", (unsigned char)*p);
		else
			out[o++] = *p;
	}
	out[o] = 0;
	return out;
}
