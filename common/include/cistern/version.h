/* The release every program of this build reports: `--version`, the
 * `cistern_build_info` metric. The number is the CMake project's. */
#ifndef CISTERN_VERSION_H
#define CISTERN_VERSION_H

#include <stdio.h>

#include "cistern/metrics.h"

/* "0.1.0". */
const char *cis_version(void);
/* "PROG 0.1.0" and a newline, on out. */
void cis_version_print(const char *prog, FILE *out);
/* A gauge cistern_build_info{program="PROG",version="0.1.0"} of 1, the
 * Prometheus way of exporting what is running. 0, or -ENOMEM. */
int cis_version_metric(cis_metrics *m, const char *prog);

#endif
