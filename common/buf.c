#include "cistern/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cis_buf_init(cis_buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void cis_buf_free(cis_buf *b)
{
	free(b->data);
	cis_buf_init(b);
}

void cis_buf_reset(cis_buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = 0;
}

int cis_buf_reserve(cis_buf *b, size_t extra)
{
	size_t need, cap;
	char *p;

	if (extra > SIZE_MAX - b->len - 1)
		return -ENOMEM;
	need = b->len + extra + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->data[b->len] = 0;
	b->cap = cap;
	return 0;
}

int cis_buf_append(cis_buf *b, const void *data, size_t n)
{
	int r = cis_buf_reserve(b, n);

	if (r)
		return r;
	if (n)
		memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = 0;
	return 0;
}

int cis_buf_puts(cis_buf *b, const char *s)
{
	return cis_buf_append(b, s, strlen(s));
}

int cis_buf_printf(cis_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n, r;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	r = cis_buf_reserve(b, (size_t)n);
	if (r)
		return r;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

char *cis_buf_steal(cis_buf *b)
{
	char *p;

	if (!b->data && cis_buf_reserve(b, 0))
		return NULL;
	p = b->data;
	cis_buf_init(b);
	return p;
}
