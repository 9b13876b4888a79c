/* Text in JSON that need not be UTF-8: shown with '?', kept exactly in hex. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "cistern/json_text.h"

Test(json_text, utf8_is_kept_as_is_and_other_bytes_in_hex)
{
	json_t *o = json_object();
	cr_assert_eq(cis_json_set_text(o, "path", "/d/caf\xc3\xa9"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(o, "path")), "/d/caf\xc3\xa9");
	cr_assert_null(json_object_get(o, "path_hex"));
	cr_assert_eq(cis_json_set_text(o, "path", "/d/caf\xe9"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(o, "path")), "/d/caf?");
	cr_assert_str_eq(json_string_value(json_object_get(o, "path_hex")), "2f642f636166e9");
	char *p = cis_json_get_text(o, "path");
	cr_assert_str_eq(p, "/d/caf\xe9", "the exact bytes back");
	free(p);
	/* UTF-8 again: the hex of the old text goes */
	cr_assert_eq(cis_json_set_text(o, "path", "/x"), 0);
	cr_assert_null(json_object_get(o, "path_hex"));
	p = cis_json_get_text(o, "path");
	cr_assert_str_eq(p, "/x");
	free(p);
	json_decref(o);
}

Test(json_text, bad_hex_names_nothing)
{
	const char *bad[] = {"2f6", "2fzz", "2f00"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		json_t *o = json_pack("{s:s, s:s}", "path", "?", "path_hex", bad[i]);
		cr_assert_null(cis_json_get_text(o, "path"), "path_hex \"%s\"", bad[i]);
		json_decref(o);
	}
	json_t *none = json_object();
	cr_assert_null(cis_json_get_text(none, "path"));
	json_decref(none);
}
