#include "cistern/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cistern/hash.h"
#include "cistern/time.h"

/* Frozen at start-up (cis_log_init), read by every thread afterwards. */
static const char *log_program = "cistern";
static enum cis_log_level log_min = CIS_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void cis_log_init(const char *program, enum cis_log_level min)
{
	log_program = program;
	log_min = min;
}

int cis_log_parse_level(const char *s, enum cis_log_level *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcasecmp(s, level_names[i]) == 0) {
			*out = (enum cis_log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

bool cis_log_enabled(enum cis_log_level level)
{
	return level >= log_min;
}

/* Quote the message if it needs it; replace control characters so one event
 * is always one line. */
static size_t put_msg(char *out, size_t room, const char *msg)
{
	size_t n = 0;

	if (room < 4)
		return 0;
	out[n++] = '"';
	for (const char *p = msg; *p && n + 3 < room; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '"' || c == '\\') {
			out[n++] = '\\';
			out[n++] = (char)c;
		} else {
			out[n++] = c < 0x20 ? ' ' : (char)c;
		}
	}
	out[n++] = '"';
	return n;
}

static void vlog(enum cis_log_level level, const char *msg, const char *suffix,
                 const char *fields_fmt, va_list ap)
{
	char line[4096];
	char ts[32];
	size_t n;
	int r;

	cis_fmt_rfc3339(cis_wall_ns(), ts, sizeof(ts));
	r = snprintf(line, sizeof(line), "%s level=%s prog=%s msg=", ts, level_names[level],
	             log_program);
	n = r < 0 ? 0 : (size_t)r;
	n += put_msg(line + n, sizeof(line) - n - 2, msg);
	if (fields_fmt && *fields_fmt && n + 2 < sizeof(line)) {
		line[n++] = ' ';
		r = vsnprintf(line + n, sizeof(line) - n - 1, fields_fmt, ap);
		if (r > 0)
			n += (size_t)r < sizeof(line) - n - 1 ? (size_t)r : sizeof(line) - n - 2;
	}
	if (suffix && n + 2 < sizeof(line)) {
		r = snprintf(line + n, sizeof(line) - n - 1, "%s", suffix);
		if (r > 0)
			n += (size_t)r < sizeof(line) - n - 1 ? (size_t)r : sizeof(line) - n - 2;
	}
	for (size_t i = 0; i < n; i++) {
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	}
	line[n++] = '\n';
	/* One write per line keeps lines whole between threads. */
	if (write(STDERR_FILENO, line, n) < 0) {
		/* Nowhere left to report it. */
	}
}

void cis_log(enum cis_log_level level, const char *msg, const char *fields_fmt, ...)
{
	va_list ap;

	if (!cis_log_enabled(level))
		return;
	va_start(ap, fields_fmt);
	vlog(level, msg, NULL, fields_fmt, ap);
	va_end(ap);
}

/* A small fixed table of causes, keyed by hash; a collision only merges two
 * causes' rate limits, which is harmless. Global by design: one rate
 * limiter per process, guarded by limit_lock. */
#define LIMIT_SLOTS 256
static struct limit_slot {
	uint64_t key;
	uint64_t last_ms;
	uint64_t suppressed;
} limit_slots[LIMIT_SLOTS];
static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;

void cis_log_limited(enum cis_log_level level, const char *cause, int interval_s, const char *msg,
                     const char *fields_fmt, ...)
{
	uint64_t key = cis_hash64(cause, strlen(cause), 0x10c);
	uint64_t now = cis_mono_ms();
	struct limit_slot *s = &limit_slots[key % LIMIT_SLOTS];
	uint64_t suppressed = 0;
	bool print = false;
	char suffix[64];
	va_list ap;

	if (!cis_log_enabled(level))
		return;
	pthread_mutex_lock(&limit_lock);
	if (s->key != key || s->last_ms == 0 || now - s->last_ms >= (uint64_t)interval_s * 1000) {
		print = true;
		suppressed = s->key == key ? s->suppressed : 0;
		s->key = key;
		s->last_ms = now ? now : 1;
		s->suppressed = 0;
	} else {
		s->suppressed++;
	}
	pthread_mutex_unlock(&limit_lock);
	if (!print)
		return;
	suffix[0] = 0;
	if (suppressed)
		snprintf(suffix, sizeof(suffix), " suppressed=%llu",
		         (unsigned long long)suppressed);
	va_start(ap, fields_fmt);
	vlog(level, msg, suffix, fields_fmt, ap);
	va_end(ap);
}

void cis_die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", log_program);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}
