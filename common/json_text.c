/* Text in JSON that need not be UTF-8 (cistern/json_text.h). */
#include "cistern/json_text.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *cis_json_text(const char *s)
{
	json_t *v = json_string(s);
	if (v)
		return v;
	char *t = strdup(s);
	for (char *c = t; c && *c; c++)
		if ((unsigned char)*c >= 0x80)
			*c = '?';
	v = t ? json_string(t) : NULL;
	free(t);
	return v;
}

int cis_json_set_text(json_t *o, const char *key, const char *s)
{
	char hk[64];
	snprintf(hk, sizeof(hk), "%s_hex", key);
	json_t *v = json_string(s); /* NULL: not UTF-8 */
	if (v) {                    /* the text is exact */
		json_object_del(o, hk);
		return json_object_set_new(o, key, v) ? -ENOMEM : 0;
	}
	if (json_object_set_new(o, key, cis_json_text(s)))
		return -ENOMEM;
	size_t n = strlen(s);
	char *hex = malloc(2 * n + 1);
	if (!hex)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned char)s[i]);
	int rc = json_object_set_new(o, hk, json_string(hex));
	free(hex);
	return rc ? -ENOMEM : 0;
}

static int hex_digit(char c)
{
	return isdigit((unsigned char)c)    ? c - '0'
	       : isxdigit((unsigned char)c) ? tolower((unsigned char)c) - 'a' + 10
	                                    : -1;
}

char *cis_json_get_text(const json_t *o, const char *key)
{
	char hk[64];
	snprintf(hk, sizeof(hk), "%s_hex", key);
	const char *hex = json_string_value(json_object_get(o, hk));
	if (!hex) {
		const char *v = json_string_value(json_object_get(o, key));
		return v ? strdup(v) : NULL;
	}
	size_t n = strlen(hex);
	char *p = n % 2 ? NULL : malloc(n / 2 + 1);
	for (size_t i = 0; p && i < n / 2; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
		if (hi < 0 || lo < 0 || (hi | lo) == 0) {
			free(p);
			return NULL;
		}
		p[i] = (char)(hi << 4 | lo);
	}
	if (p)
		p[n / 2] = 0;
	return p;
}
