#include "cistern/version.h"

#include <errno.h>

#ifndef CIS_VERSION
#error "CIS_VERSION is defined by CMakeLists.txt (the project's version)"
#endif

const char *cis_version(void)
{
	return CIS_VERSION;
}

void cis_version_print(const char *prog, FILE *out)
{
	fprintf(out, "%s %s\n", prog, CIS_VERSION);
}

int cis_version_metric(cis_metrics *m, const char *prog)
{
	char labels[128];
	snprintf(labels, sizeof(labels), "program=\"%s\",version=\"%s\"", prog, CIS_VERSION);
	cis_gauge *g = cis_metrics_gauge(m, "cistern_build_info", labels,
	                                 "The program and release running (always 1)");
	if (!g)
		return -ENOMEM;
	cis_gauge_set(g, 1);
	return 0;
}
