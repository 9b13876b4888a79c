#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/buf.h"
#include "cistern/error.h"
#include "cistern/kv.h"

Test(buf, append_printf_steal)
{
	cis_buf b = CIS_BUF_INIT;
	char *s;

	cr_assert_eq(cis_buf_puts(&b, "abc"), 0);
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(cis_buf_printf(&b, "%d,", i), 0);
	cr_assert_eq(b.data[b.len], 0);
	cr_assert(strncmp(b.data, "abc0,1,2,", 9) == 0);
	cr_assert(strstr(b.data, "999,") != NULL);
	s = cis_buf_steal(&b);
	cr_assert_eq(b.data, NULL);
	cr_assert_eq(b.len, 0);
	free(s);
	s = cis_buf_steal(&b);
	cr_assert_str_eq(s, "");
	free(s);
}

Test(kvlist, set_replace_remove)
{
	cis_kvlist l = CIS_KVLIST_INIT, copy = CIS_KVLIST_INIT;

	cr_assert_eq(cis_kvlist_set_pair(&l, "region=us-east-1"), 0);
	cr_assert_eq(cis_kvlist_set_pair(&l, "endpoint=http://h:1/x=y"), 0);
	cr_assert_str_eq(cis_kvlist_get(&l, "endpoint"), "http://h:1/x=y");
	cr_assert_eq(cis_kvlist_set(&l, "region", "eu-west-1"), 0);
	cr_assert_eq(l.n, 2);
	cr_assert_str_eq(cis_kvlist_get(&l, "region"), "eu-west-1");
	cr_assert_eq(cis_kvlist_set_pair(&l, "novalue"), -EINVAL);
	cr_assert_eq(cis_kvlist_set_pair(&l, "=x"), -EINVAL);
	cr_assert_eq(cis_kvlist_copy(&copy, &l), 0);
	cr_assert_eq(cis_kvlist_remove(&l, "region"), 0);
	cr_assert_eq(cis_kvlist_remove(&l, "region"), -ENOENT);
	cr_assert_null(cis_kvlist_get(&l, "region"));
	cr_assert_str_eq(cis_kvlist_get(&copy, "region"), "eu-west-1");
	cis_kvlist_free(&l);
	cis_kvlist_free(&copy);
}

Test(error, names_every_code)
{
	cis_errmsg em = {{0}};

	for (int c = CIS_E_FIRST + 1; c < CIS_E_LAST; c++)
		cr_assert_str_neq(cis_strerror(-c), "unknown error", "code %d", c);
	cr_assert_str_eq(cis_strerror(-ENOENT), "No such file or directory");
	cr_assert_str_eq(cis_strerror(0), "success");
	cr_assert_eq(cis_fail(&em, -CIS_E_DENIED, "s3://%s: 403", "bkt"), -CIS_E_DENIED);
	cr_assert_str_eq(cis_errmsg_or(&em, -CIS_E_DENIED), "s3://bkt: 403");
	cr_assert_eq(cis_fail(NULL, -EIO, "ignored"), -EIO);
}
