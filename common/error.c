#include "cistern/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const project_names[CIS_E_LAST - CIS_E_FIRST] = {
    [CIS_E_PROTO - CIS_E_FIRST] = "malformed or unexpected message",
    [CIS_E_TOOBIG - CIS_E_FIRST] = "input over the size limit",
    [CIS_E_STORE - CIS_E_FIRST] = "under-store failure",
    [CIS_E_DENIED - CIS_E_FIRST] = "access denied by the store",
    [CIS_E_NOBUCKET - CIS_E_FIRST] = "no such bucket",
    [CIS_E_URI - CIS_E_FIRST] = "malformed or unsupported uri",
    [CIS_E_CONFIG - CIS_E_FIRST] = "bad configuration",
    [CIS_E_CHECKSUM - CIS_E_FIRST] = "checksum mismatch",
    [CIS_E_PARSE - CIS_E_FIRST] = "malformed input",
    [CIS_E_CHANGED - CIS_E_FIRST] = "object changed in the store",
    [CIS_E_CLOSED - CIS_E_FIRST] = "connection closed",
    [CIS_E_INTERNAL - CIS_E_FIRST] = "internal error",
    [CIS_E_UPSTREAM - CIS_E_FIRST] = "a peer could not reach its own server",
};

const char *cis_strerror(int err)
{
	int code = err < 0 ? -err : err;

	if (code == 0)
		return "success";
	if (code > CIS_E_FIRST && code < CIS_E_LAST)
		return project_names[code - CIS_E_FIRST];
	if (code < CIS_E_FIRST)
		return strerrordesc_np(code) ? strerrordesc_np(code) : "unknown error";
	return "unknown error";
}

int cis_fail(cis_errmsg *em, int code, const char *fmt, ...)
{
	va_list ap;

	if (em) {
		va_start(ap, fmt);
		vsnprintf(em->text, sizeof(em->text), fmt, ap);
		va_end(ap);
	}
	return code;
}

const char *cis_errmsg_or(const cis_errmsg *em, int code)
{
	if (em && em->text[0])
		return em->text;
	return cis_strerror(code);
}
