/* Logging to stderr, one line per event, logfmt style:
 *   2026-11-22T14:10:41.123Z level=info prog=cistern-master msg="mount added" path=/x
 * The message is a short lowercase phrase; the fields are key=value pairs
 * formatted by the caller. Thread-safe (one write(2) per line). */
#ifndef CISTERN_LOG_H
#define CISTERN_LOG_H

#include <stdbool.h>

enum cis_log_level { CIS_LOG_DEBUG, CIS_LOG_INFO, CIS_LOG_WARN, CIS_LOG_ERROR };

/* Set the program name and lowest level printed. Call once at start-up. */
void cis_log_init(const char *program, enum cis_log_level min);

/* Parse "debug", "info", "warn" or "error". 0 or -EINVAL. */
int cis_log_parse_level(const char *s, enum cis_log_level *out);

bool cis_log_enabled(enum cis_log_level level);

/* fields_fmt may be NULL for none. */
void cis_log(enum cis_log_level level, const char *msg, const char *fields_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Like cis_log, but a given cause (any stable string, such as
 * "enospc:/nvme0") is printed at most once per interval_s seconds; the
 * suppressed count is added to the next line printed for it. Use it where
 * one fault would otherwise log once per request. */
void cis_log_limited(enum cis_log_level level, const char *cause, int interval_s, const char *msg,
                     const char *fields_fmt, ...) __attribute__((format(printf, 5, 6)));

#define cis_debug(msg, ...) cis_log(CIS_LOG_DEBUG, msg, __VA_ARGS__)
#define cis_info(msg, ...)  cis_log(CIS_LOG_INFO, msg, __VA_ARGS__)
#define cis_warn(msg, ...)  cis_log(CIS_LOG_WARN, msg, __VA_ARGS__)
#define cis_error(msg, ...) cis_log(CIS_LOG_ERROR, msg, __VA_ARGS__)

/* Print "PROG: MSG" to stderr and exit(1). For set-up failures only. */
void cis_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
