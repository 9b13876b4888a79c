/* Prometheus text rendering of the metrics registry. */
#include <pthread.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cistern/metrics.h"

static char *render(cis_metrics *m)
{
	cis_buf b = CIS_BUF_INIT;

	cr_assert_eq(cis_metrics_render(m, &b), 0);
	return cis_buf_steal(&b);
}

static int count_of(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

Test(metrics, counter_and_gauge)
{
	cis_metrics *m = cis_metrics_new();
	cis_counter *c = cis_metrics_counter(m, "cistern_test_hits_total", NULL, "Cache hits.");
	cis_gauge *g = cis_metrics_gauge(m, "cistern_test_used_bytes", "dir=\"/a\"", "Used.");
	char *t;

	cis_counter_add(c, 41);
	cis_counter_inc(c);
	cis_gauge_set(g, 1.5);
	cis_gauge_add(g, -0.25);
	cr_assert_eq(cis_counter_get(c), 42);
	t = render(m);
	cr_assert_str_eq(t, "# HELP cistern_test_hits_total Cache hits.\n"
	                    "# TYPE cistern_test_hits_total counter\n"
	                    "cistern_test_hits_total 42\n"
	                    "# HELP cistern_test_used_bytes Used.\n"
	                    "# TYPE cistern_test_used_bytes gauge\n"
	                    "cistern_test_used_bytes{dir=\"/a\"} 1.25\n");
	free(t);
	cis_metrics_free(m);
}

static double forty_two(void *arg)
{
	return *(double *)arg;
}

Test(metrics, series_grouped_by_name_and_gauge_fn)
{
	cis_metrics *m = cis_metrics_new();
	double v = 7;
	cis_counter *a = cis_metrics_counter(m, "req_total", "path=\"a\"", "Requests.");
	cis_counter *other = cis_metrics_counter(m, "other_total", NULL, "Other.");
	cis_counter *b = cis_metrics_counter(m, "req_total", "path=\"b\"", "Requests.");
	char *t;

	cr_assert_neq(a, b);
	/* The same name and labels give the same series. */
	cr_assert_eq(cis_metrics_counter(m, "req_total", "path=\"a\"", "Requests."), a);
	cr_assert_eq(cis_metrics_gauge_fn(m, "fn_gauge", NULL, "Computed.", forty_two, &v), 0);
	/* A clash of types is refused and updates through NULL do nothing. */
	cr_assert_null(cis_metrics_gauge(m, "req_total", "path=\"c\"", "x"));
	cis_gauge_set(NULL, 1);
	cis_counter_inc(a);
	cis_counter_add(b, 3);
	cis_counter_inc(other);
	t = render(m);
	cr_assert_eq(count_of(t, "# TYPE req_total counter"), 1);
	cr_assert_eq(count_of(t, "# HELP req_total"), 1);
	cr_assert_not_null(strstr(t, "req_total{path=\"a\"} 1\n"
	                             "req_total{path=\"b\"} 3\n"
	                             "# HELP other_total"));
	cr_assert_not_null(strstr(t, "# TYPE fn_gauge gauge\nfn_gauge 7\n"));
	free(t);
	v = 0.5;
	t = render(m);
	cr_assert_not_null(strstr(t, "fn_gauge 0.5\n"));
	free(t);
	cis_metrics_free(m);
}

Test(metrics, histogram_buckets_cumulative)
{
	cis_metrics *m = cis_metrics_new();
	static const double le[] = {0.1, 1, 10};
	cis_histogram *h =
	    cis_metrics_histogram(m, "lat_seconds", "op=\"read\"", "Latency.", le, 3);
	char *t;

	cis_histogram_observe(h, 0.05);
	cis_histogram_observe(h, 0.1); /* le is inclusive */
	cis_histogram_observe(h, 0.5);
	cis_histogram_observe(h, 100);
	t = render(m);
	cr_assert_str_eq(t, "# HELP lat_seconds Latency.\n"
	                    "# TYPE lat_seconds histogram\n"
	                    "lat_seconds_bucket{op=\"read\",le=\"0.1\"} 2\n"
	                    "lat_seconds_bucket{op=\"read\",le=\"1\"} 3\n"
	                    "lat_seconds_bucket{op=\"read\",le=\"10\"} 3\n"
	                    "lat_seconds_bucket{op=\"read\",le=\"+Inf\"} 4\n"
	                    "lat_seconds_sum{op=\"read\"} 100.65\n"
	                    "lat_seconds_count{op=\"read\"} 4\n");
	free(t);
	cis_metrics_free(m);
}

Test(metrics, default_buckets_and_help_escaping)
{
	cis_metrics *m = cis_metrics_new();
	cis_histogram *h = cis_metrics_histogram(m, "d_seconds", NULL, "a\\b\nc", NULL, 0);
	char *t;

	cis_histogram_observe(h, 0.0002);
	t = render(m);
	cr_assert_not_null(strstr(t, "# HELP d_seconds a\\\\b\\nc\n"));
	cr_assert_not_null(strstr(t, "d_seconds_bucket{le=\"0.0001\"} 0\n"));
	cr_assert_not_null(strstr(t, "d_seconds_bucket{le=\"0.00025\"} 1\n"));
	cr_assert_not_null(strstr(t, "d_seconds_bucket{le=\"10\"} 1\n"));
	cr_assert_not_null(strstr(t, "d_seconds_bucket{le=\"+Inf\"} 1\n"));
	cr_assert_not_null(strstr(t, "d_seconds_count 1\n"));
	free(t);
	cis_metrics_free(m);
}

static void *hammer(void *arg)
{
	for (int i = 0; i < 10000; i++)
		cis_counter_inc(arg);
	return NULL;
}

Test(metrics, concurrent_counter_updates)
{
	cis_metrics *m = cis_metrics_new();
	cis_counter *c = cis_metrics_counter(m, "x_total", NULL, "X.");
	pthread_t t[4];

	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, hammer, c);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(cis_counter_get(c), 40000);
	cis_metrics_free(m);
}
