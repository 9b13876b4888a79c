/* Text in JSON that need not be UTF-8. JSON strings must be, while a
 * file:// store's names (and so paths, keys, link texts, error texts that
 * name them) may be any bytes. Such text is shown with its bytes above 0x7f
 * as '?' and, where it must be named back exactly, also in hex beside it:
 * KEY_hex, present only for text that is not UTF-8. */
#pragma once

#include <jansson.h>

/* s as a JSON string, '?' for bytes above 0x7f when s is not UTF-8; NULL
 * on ENOMEM. */
json_t *cis_json_text(const char *s);
/* o[key] = cis_json_text(s), and o[key + "_hex"] = s's bytes in hex when s
 * is not UTF-8 (removed when it is). 0 or -ENOMEM. */
int cis_json_set_text(json_t *o, const char *key, const char *s);
/* The exact bytes cis_json_set_text stored under key (KEY_hex first, else
 * KEY's text), malloc'd; NULL when absent, not hex of a path (odd length,
 * not hex digits, a NUL inside) or on ENOMEM. */
char *cis_json_get_text(const json_t *o, const char *key);
