/* cistern report / workers. */
#include <stdio.h>

#include "cli.h"

static const cis_opt opts[] = {
    {"json", NULL, NULL, "print JSON", false, 0},
    CIS_OPT_END,
};

static long long jint(const json_t *o, const char *k)
{
	return (long long)json_integer_value(json_object_get(o, k));
}

int cmd_report(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	int rc = cli_parse(opts, "cistern report [--json]", argc, argv, &cfg);
	if (rc >= 0)
		return rc;
	json_t *o;
	rc = cli_api(c, "GET", "/api/v1/report", NULL, NULL, NULL, &o, "report");
	if (!rc) {
		if (cis_config_bool(cfg, "json")) {
			cli_print_json(o);
		} else {
			char cap[32], used[32];
			cis_fmt_size((uint64_t)jint(o, "capacity"), cap, sizeof(cap));
			cis_fmt_size((uint64_t)jint(o, "used"), used, sizeof(used));
			printf("mounts:          %lld\n", jint(o, "mounts"));
			printf("inodes:          %lld\n", jint(o, "inodes"));
			printf("workers:         %lld live\n", jint(o, "workers_live"));
			printf("cache:           %s used of %s\n", used, cap);
			printf("blocks indexed:  %lld\n", jint(o, "blocks_indexed"));
			printf("store listings:  %lld\n", jint(o, "store_lists"));
			size_t i;
			json_t *v;
			printf("\n%-6s %-20s %10s %10s %8s %6s\n", "WORKER", "HOST", "USED",
			       "CAPACITY", "BLOCKS", "HITS");
			json_array_foreach(json_object_get(o, "workers"), i, v)
			{
				char wc[32], wu[32], hr[16];
				json_t *h = json_object_get(v, "hit_ratio");
				cis_fmt_size((uint64_t)jint(v, "capacity"), wc, sizeof(wc));
				cis_fmt_size((uint64_t)jint(v, "used"), wu, sizeof(wu));
				if (json_is_number(h))
					snprintf(hr, sizeof(hr), "%.0f%%",
					         json_number_value(h) * 100);
				else
					snprintf(hr, sizeof(hr), "-");
				printf("%-6lld %-20s %10s %10s %8lld %6s\n", jint(v, "id"),
				       json_string_value(json_object_get(v, "hostname")), wu, wc,
				       jint(v, "blocks"), hr);
			}
			printf("\n%-24s %10s %10s %8s\n", "MOUNT", "CACHED", "TOTAL", "FILES");
			json_array_foreach(json_object_get(o, "mount_usage"), i, v)
			{
				char cb[32], tb[32];
				cis_fmt_size((uint64_t)jint(v, "cached_bytes"), cb, sizeof(cb));
				cis_fmt_size((uint64_t)jint(v, "total_bytes"), tb, sizeof(tb));
				printf("%-24s %10s %10s %8lld\n",
				       json_string_value(json_object_get(v, "path")), cb, tb,
				       jint(v, "files"));
			}
		}
		json_decref(o);
	}
	cis_config_free(cfg);
	return rc;
}

int cmd_workers(cli_ctx *c, int argc, char **argv)
{
	cis_config *cfg;
	int rc = cli_parse(opts, "cistern workers [--json]", argc, argv, &cfg);
	if (rc >= 0)
		return rc;
	json_t *o;
	rc = cli_api(c, "GET", "/api/v1/workers", NULL, NULL, NULL, &o, "workers");
	if (!rc) {
		if (cis_config_bool(cfg, "json")) {
			cli_print_json(o);
		} else {
			size_t i;
			json_t *w;
			printf("%-6s %-22s %-20s %10s %10s %8s %s\n", "ID", "ADDRESS", "HOST",
			       "USED", "CAPACITY", "BLOCKS", "LAST SEEN");
			json_array_foreach(json_object_get(o, "workers"), i, w)
			{
				char addr[300], cap[32], used[32];
				snprintf(addr, sizeof(addr), "%s:%lld",
				         json_string_value(json_object_get(w, "host")),
				         jint(w, "rpc_port"));
				cis_fmt_size((uint64_t)jint(w, "capacity"), cap, sizeof(cap));
				cis_fmt_size((uint64_t)jint(w, "used"), used, sizeof(used));
				printf("%-6lld %-22s %-20s %10s %10s %8lld %.1fs ago\n",
				       jint(w, "id"), addr,
				       json_string_value(json_object_get(w, "hostname")), used, cap,
				       jint(w, "blocks"),
				       (double)jint(w, "last_heartbeat_ms_ago") / 1000.0);
			}
		}
		json_decref(o);
	}
	cis_config_free(cfg);
	return rc;
}
