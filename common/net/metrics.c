/* Metrics registry and Prometheus text rendering (metrics.h).
 *
 * Registration takes the registry's mutex and happens at start-up; updates
 * are relaxed atomics on the series itself, so the hot path never locks.
 * Series are grouped in families by name (HELP and TYPE printed once per
 * family) in the order their names were first registered. */
#include "cistern/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/error.h"
#include "cistern/log.h"

enum metric_type { M_COUNTER, M_GAUGE, M_GAUGE_FN, M_HISTOGRAM };

struct cis_counter {
	_Atomic uint64_t v;
};

struct cis_gauge {
	_Atomic uint64_t bits; /* a double's bits */
};

struct cis_histogram {
	int nbuckets;
	double *le;               /* nbuckets upper bounds */
	_Atomic uint64_t *counts; /* nbuckets + 1 (the last is +Inf), not cumulative */
	_Atomic uint64_t sum_bits;
};

struct series {
	struct series *next;
	char *labels; /* NULL or "" for none */
	enum metric_type type;
	union {
		struct cis_counter counter;
		struct cis_gauge gauge;
		struct cis_histogram hist;
		struct {
			double (*fn)(void *arg);
			void *arg;
		} gfn;
	} u;
};

struct family {
	struct family *next;
	char *name;
	char *help;
	enum metric_type type; /* M_GAUGE_FN is listed as a gauge */
	struct series *series, **series_tail;
};

struct cis_metrics {
	pthread_mutex_t lock;
	struct family *families, **families_tail;
};

static const double default_buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                         0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};

static uint64_t dbits(double d)
{
	uint64_t u;

	memcpy(&u, &d, sizeof(u));
	return u;
}

static double bitsd(uint64_t u)
{
	double d;

	memcpy(&d, &u, sizeof(d));
	return d;
}

cis_metrics *cis_metrics_new(void)
{
	cis_metrics *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	pthread_mutex_init(&m->lock, NULL);
	m->families_tail = &m->families;
	return m;
}

static void series_free(struct series *s)
{
	if (s->type == M_HISTOGRAM) {
		free(s->u.hist.le);
		free((void *)s->u.hist.counts);
	}
	free(s->labels);
	free(s);
}

void cis_metrics_free(cis_metrics *m)
{
	struct family *f, *fn;
	struct series *s, *sn;

	if (!m)
		return;
	for (f = m->families; f; f = fn) {
		fn = f->next;
		for (s = f->series; s; s = sn) {
			sn = s->next;
			series_free(s);
		}
		free(f->name);
		free(f->help);
		free(f);
	}
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static bool same_kind(enum metric_type a, enum metric_type b)
{
	if (a == M_GAUGE_FN)
		a = M_GAUGE;
	if (b == M_GAUGE_FN)
		b = M_GAUGE;
	return a == b;
}

static bool labels_eq(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "") == 0;
}

/* Caller holds m->lock. Finds or adds the family for name and returns a
 * new series in it, or an existing one with the same labels through
 * *existing. NULL on ENOMEM or on a type clash (a programming error,
 * logged: the update functions accept NULL and do nothing). */
static struct series *do_add_series(cis_metrics *m, const char *name, const char *labels,
                                    const char *help, enum metric_type type,
                                    struct series **existing)
{
	struct family *f;
	struct series *s;

	*existing = NULL;
	for (f = m->families; f; f = f->next)
		if (strcmp(f->name, name) == 0)
			break;
	if (f) {
		if (!same_kind(f->type, type)) {
			cis_error("metric registered twice with different types", "name=%s", name);
			return NULL;
		}
		for (s = f->series; s; s = s->next) {
			if (labels_eq(s->labels, labels)) {
				if (s->type != type) {
					cis_error("metric series registered twice", "name=%s",
					          name);
					return NULL;
				}
				*existing = s;
				return NULL;
			}
		}
	} else {
		f = calloc(1, sizeof(*f));
		if (!f)
			return NULL;
		f->name = strdup(name);
		f->help = strdup(help ? help : "");
		if (!f->name || !f->help) {
			free(f->name);
			free(f->help);
			free(f);
			return NULL;
		}
		f->type = type;
		f->series_tail = &f->series;
		*m->families_tail = f;
		m->families_tail = &f->next;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	if (labels && *labels && !(s->labels = strdup(labels))) {
		free(s);
		return NULL;
	}
	s->type = type;
	*f->series_tail = s;
	f->series_tail = &s->next;
	return s;
}

cis_counter *cis_metrics_counter(cis_metrics *m, const char *name, const char *labels,
                                 const char *help)
{
	struct series *s, *old;

	pthread_mutex_lock(&m->lock);
	s = do_add_series(m, name, labels, help, M_COUNTER, &old);
	pthread_mutex_unlock(&m->lock);
	if (old)
		return &old->u.counter;
	return s ? &s->u.counter : NULL;
}

cis_gauge *cis_metrics_gauge(cis_metrics *m, const char *name, const char *labels, const char *help)
{
	struct series *s, *old;

	pthread_mutex_lock(&m->lock);
	s = do_add_series(m, name, labels, help, M_GAUGE, &old);
	pthread_mutex_unlock(&m->lock);
	if (old)
		return &old->u.gauge;
	return s ? &s->u.gauge : NULL;
}

int cis_metrics_gauge_fn(cis_metrics *m, const char *name, const char *labels, const char *help,
                         double (*fn)(void *arg), void *arg)
{
	struct series *s, *old;
	int r = 0;

	pthread_mutex_lock(&m->lock);
	s = do_add_series(m, name, labels, help, M_GAUGE_FN, &old);
	if (s) {
		s->u.gfn.fn = fn;
		s->u.gfn.arg = arg;
	} else if (old) {
		r = -EEXIST;
	} else {
		r = -ENOMEM;
	}
	pthread_mutex_unlock(&m->lock);
	return r;
}

cis_histogram *cis_metrics_histogram(cis_metrics *m, const char *name, const char *labels,
                                     const char *help, const double *buckets, int nbuckets)
{
	struct series *s, *old;
	struct cis_histogram *h;

	if (!buckets || nbuckets <= 0) {
		buckets = default_buckets;
		nbuckets = (int)(sizeof(default_buckets) / sizeof(default_buckets[0]));
	}
	pthread_mutex_lock(&m->lock);
	s = do_add_series(m, name, labels, help, M_HISTOGRAM, &old);
	if (!s) {
		pthread_mutex_unlock(&m->lock);
		return old ? &old->u.hist : NULL;
	}
	h = &s->u.hist;
	h->le = malloc(sizeof(double) * (size_t)nbuckets);
	h->counts = calloc((size_t)nbuckets + 1, sizeof(*h->counts));
	if (!h->le || !h->counts) {
		/* Leave a histogram with no buckets but +Inf: still valid. */
		free(h->le);
		free((void *)h->counts);
		h->le = NULL;
		h->nbuckets = 0;
		h->counts = calloc(1, sizeof(*h->counts));
		pthread_mutex_unlock(&m->lock);
		return h->counts ? h : NULL;
	}
	memcpy(h->le, buckets, sizeof(double) * (size_t)nbuckets);
	h->nbuckets = nbuckets;
	pthread_mutex_unlock(&m->lock);
	return h;
}

void cis_counter_add(cis_counter *c, uint64_t n)
{
	if (c)
		atomic_fetch_add_explicit(&c->v, n, memory_order_relaxed);
}

uint64_t cis_counter_get(const cis_counter *c)
{
	if (!c)
		return 0;
	return atomic_load_explicit(&((cis_counter *)c)->v, memory_order_relaxed);
}

void cis_gauge_set(cis_gauge *g, double v)
{
	if (g)
		atomic_store_explicit(&g->bits, dbits(v), memory_order_relaxed);
}

static void atomic_add_double(_Atomic uint64_t *bits, double delta)
{
	uint64_t old = atomic_load_explicit(bits, memory_order_relaxed);

	while (!atomic_compare_exchange_weak_explicit(bits, &old, dbits(bitsd(old) + delta),
	                                              memory_order_relaxed, memory_order_relaxed))
		;
}

void cis_gauge_add(cis_gauge *g, double delta)
{
	if (g)
		atomic_add_double(&g->bits, delta);
}

void cis_histogram_observe(cis_histogram *h, double seconds)
{
	int i;

	if (!h)
		return;
	/* Linear: a dozen or two buckets, cheaper than a branchy search. */
	for (i = 0; i < h->nbuckets; i++)
		if (seconds <= h->le[i])
			break;
	atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
	atomic_add_double(&h->sum_bits, seconds);
}

/* Prometheus float text: shortest of %.15g/%.17g that reads back exact. */
static int put_double(cis_buf *out, double v)
{
	char tmp[40];

	if (isnan(v))
		return cis_buf_puts(out, "NaN");
	if (isinf(v))
		return cis_buf_puts(out, v > 0 ? "+Inf" : "-Inf");
	snprintf(tmp, sizeof(tmp), "%.15g", v);
	if (strtod(tmp, NULL) != v)
		snprintf(tmp, sizeof(tmp), "%.17g", v);
	return cis_buf_puts(out, tmp);
}

/* HELP text escapes backslash and newline (text format 0.0.4). */
static int put_help(cis_buf *out, const char *s)
{
	int r = 0;

	for (; *s && !r; s++) {
		if (*s == '\\')
			r = cis_buf_puts(out, "\\\\");
		else if (*s == '\n')
			r = cis_buf_puts(out, "\\n");
		else
			r = cis_buf_append(out, s, 1);
	}
	return r;
}

/* "name{labels} " or "name ", with an optional suffix and an extra label. */
static int put_series_name(cis_buf *out, const char *name, const char *suffix, const char *labels,
                           const char *extra)
{
	bool has_l = labels && *labels, has_e = extra && *extra;
	int r = cis_buf_printf(out, "%s%s", name, suffix);

	if (!r && (has_l || has_e))
		r = cis_buf_printf(out, "{%s%s%s}", has_l ? labels : "", has_l && has_e ? "," : "",
		                   has_e ? extra : "");
	if (!r)
		r = cis_buf_puts(out, " ");
	return r;
}

static int render_hist(cis_buf *out, const char *name, const struct series *s)
{
	const struct cis_histogram *h = &s->u.hist;
	uint64_t cum = 0;
	cis_buf le = CIS_BUF_INIT;
	int r = 0, i;

	for (i = 0; i <= h->nbuckets && !r; i++) {
		cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
		cis_buf_reset(&le);
		r = cis_buf_puts(&le, "le=\"");
		if (!r)
			r = i < h->nbuckets ? put_double(&le, h->le[i]) : cis_buf_puts(&le, "+Inf");
		if (!r)
			r = cis_buf_puts(&le, "\"");
		if (!r)
			r = put_series_name(out, name, "_bucket", s->labels, le.data);
		if (!r)
			r = cis_buf_printf(out, "%" PRIu64 "\n", cum);
	}
	cis_buf_free(&le);
	if (!r)
		r = put_series_name(out, name, "_sum", s->labels, NULL);
	if (!r)
		r = put_double(out,
		               bitsd(atomic_load_explicit(&h->sum_bits, memory_order_relaxed)));
	if (!r)
		r = cis_buf_puts(out, "\n");
	if (!r)
		r = put_series_name(out, name, "_count", s->labels, NULL);
	/* _count is the +Inf bucket, so the two always agree in one scrape. */
	if (!r)
		r = cis_buf_printf(out, "%" PRIu64 "\n", cum);
	return r;
}

static int render_series(cis_buf *out, const struct family *f, const struct series *s)
{
	int r;

	switch (s->type) {
	case M_COUNTER:
		r = put_series_name(out, f->name, "", s->labels, NULL);
		if (!r)
			r = cis_buf_printf(out, "%" PRIu64 "\n", cis_counter_get(&s->u.counter));
		return r;
	case M_GAUGE:
	case M_GAUGE_FN:
		r = put_series_name(out, f->name, "", s->labels, NULL);
		if (!r)
			r = put_double(out, s->type == M_GAUGE
			                        ? bitsd(atomic_load_explicit(&s->u.gauge.bits,
			                                                     memory_order_relaxed))
			                        : s->u.gfn.fn(s->u.gfn.arg));
		if (!r)
			r = cis_buf_puts(out, "\n");
		return r;
	case M_HISTOGRAM:
		return render_hist(out, f->name, s);
	}
	return -CIS_E_INTERNAL;
}

int cis_metrics_render(const cis_metrics *cm, cis_buf *out)
{
	static const char *const type_names[] = {"counter", "gauge", "gauge", "histogram"};
	cis_metrics *m = (cis_metrics *)cm; /* the lock is not part of the value */
	const struct family *f;
	const struct series *s;
	int r = 0;

	pthread_mutex_lock(&m->lock);
	for (f = m->families; f && !r; f = f->next) {
		if (*f->help) {
			r = cis_buf_printf(out, "# HELP %s ", f->name);
			if (!r)
				r = put_help(out, f->help);
			if (!r)
				r = cis_buf_puts(out, "\n");
		}
		if (!r)
			r = cis_buf_printf(out, "# TYPE %s %s\n", f->name, type_names[f->type]);
		for (s = f->series; s && !r; s = s->next)
			r = render_series(out, f, s);
	}
	pthread_mutex_unlock(&m->lock);
	return r;
}
