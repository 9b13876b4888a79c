/* Metrics in the Prometheus text format. A registry is filled at start-up
 * and read by /metrics; updates are lock-free atomics, safe from any
 * thread. Names follow Prometheus conventions: cistern_worker_hits_total,
 * cistern_fuse_read_seconds (histogram), ..._bytes. */
#ifndef CISTERN_METRICS_H
#define CISTERN_METRICS_H

#include <stdint.h>

#include "cistern/buf.h"

typedef struct cis_metrics cis_metrics;
typedef struct cis_counter cis_counter;
typedef struct cis_gauge cis_gauge;
typedef struct cis_histogram cis_histogram;

cis_metrics *cis_metrics_new(void);
void cis_metrics_free(cis_metrics *m);

/* labels: NULL or a Prometheus label list without braces, e.g.
 * "path=\"remote\"". Series of one name share help text and type. The
 * returned pointers live as long as the registry. NULL only on ENOMEM. */
cis_counter *cis_metrics_counter(cis_metrics *m, const char *name, const char *labels,
                                 const char *help);
cis_gauge *cis_metrics_gauge(cis_metrics *m, const char *name, const char *labels,
                             const char *help);
/* A gauge computed when scraped. fn is called from the HTTP thread. */
int cis_metrics_gauge_fn(cis_metrics *m, const char *name, const char *labels, const char *help,
                         double (*fn)(void *arg), void *arg);
/* Buckets in seconds, ascending; NULL for the default latency buckets
 * (100us .. 10s). */
cis_histogram *cis_metrics_histogram(cis_metrics *m, const char *name, const char *labels,
                                     const char *help, const double *buckets, int nbuckets);

void cis_counter_add(cis_counter *c, uint64_t n);
static inline void cis_counter_inc(cis_counter *c)
{
	cis_counter_add(c, 1);
}
uint64_t cis_counter_get(const cis_counter *c);
void cis_gauge_set(cis_gauge *g, double v);
void cis_gauge_add(cis_gauge *g, double delta);
void cis_histogram_observe(cis_histogram *h, double seconds);

/* Append the whole registry in text format 0.0.4. */
int cis_metrics_render(const cis_metrics *m, cis_buf *out);

#endif
