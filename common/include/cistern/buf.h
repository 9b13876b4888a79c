/* A growable byte buffer. The struct is public so it can live on the stack
 * or inside other structs; always go through these functions to change it.
 * data is NUL-terminated after every successful call (not counted in len). */
#ifndef CISTERN_BUF_H
#define CISTERN_BUF_H

#include <stddef.h>

typedef struct cis_buf {
	char *data;
	size_t len;
	size_t cap;
} cis_buf;

#define CIS_BUF_INIT                                                                               \
	{                                                                                          \
		NULL, 0, 0                                                                         \
	}

void cis_buf_init(cis_buf *b);
/* Frees the memory; b is empty and reusable afterwards. */
void cis_buf_free(cis_buf *b);
/* Forget the contents, keep the memory. */
void cis_buf_reset(cis_buf *b);
/* Make room for extra more bytes. 0 or -ENOMEM (b unchanged). */
int cis_buf_reserve(cis_buf *b, size_t extra);
int cis_buf_append(cis_buf *b, const void *data, size_t n);
int cis_buf_puts(cis_buf *b, const char *s);
int cis_buf_printf(cis_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the memory to the caller (free() it); b is left empty. Never NULL
 * on success: an empty buffer yields "" (allocated). NULL on -ENOMEM. */
char *cis_buf_steal(cis_buf *b);

#endif
