/* For the unit tests that put a fake S3 store on a loopback port:
 * s3://bkt on it, with fixed credentials. */
#ifndef CISTERN_TEST_S3_AT_PORT_H
#define CISTERN_TEST_S3_AT_PORT_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>

#include "cistern/kv.h"
#include "cistern/ufs.h"

static cis_ufs *s3_at_port(uint16_t port, cis_errmsg *em)
{
	cis_kvlist o = CIS_KVLIST_INIT;
	char ep[64];
	cis_ufs *u;

	snprintf(ep, sizeof(ep), "http://127.0.0.1:%u", port);
	cr_assert_eq(cis_kvlist_set(&o, "endpoint", ep), 0);
	cr_assert_eq(cis_kvlist_set(&o, "access_key", "AK"), 0);
	cr_assert_eq(cis_kvlist_set(&o, "secret_key", "SK"), 0);
	cr_assert_eq(cis_ufs_open("s3://bkt", &o, &u, em), 0, "%s", em->text);
	cis_kvlist_free(&o);
	return u;
}

#endif
