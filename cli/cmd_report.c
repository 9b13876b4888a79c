/* cistern report / workers. */
#include <stdio.h>

#include "cli.h"

static void print_report(const json_t *o)
{
	char cap[32], used[32];
	size_t i;
	json_t *v;
	cis_fmt_size((uint64_t)cli_jint(o, "capacity"), cap, sizeof(cap));
	cis_fmt_size((uint64_t)cli_jint(o, "used"), used, sizeof(used));
	printf("mounts:          %lld\n", cli_jint(o, "mounts"));
	printf("inodes:          %lld\n", cli_jint(o, "inodes"));
	printf("workers:         %lld live\n", cli_jint(o, "workers_live"));
	printf("cache:           %s used of %s\n", used, cap);
	printf("blocks indexed:  %lld\n", cli_jint(o, "blocks_indexed"));
	printf("store listings:  %lld\n", cli_jint(o, "store_lists"));
	printf("\n%-6s %-20s %10s %10s %8s %6s\n", "WORKER", "HOST", "USED", "CAPACITY", "BLOCKS",
	       "HITS");
	json_array_foreach(json_object_get(o, "workers"), i, v)
	{
		char wc[32], wu[32], hr[16];
		json_t *h = json_object_get(v, "hit_ratio");
		cis_fmt_size((uint64_t)cli_jint(v, "capacity"), wc, sizeof(wc));
		cis_fmt_size((uint64_t)cli_jint(v, "used"), wu, sizeof(wu));
		if (json_is_number(h))
			snprintf(hr, sizeof(hr), "%.0f%%", json_number_value(h) * 100);
		else
			snprintf(hr, sizeof(hr), "-");
		printf("%-6lld %-20s %10s %10s %8lld %6s\n", cli_jint(v, "id"),
		       json_string_value(json_object_get(v, "hostname")), wu, wc,
		       cli_jint(v, "blocks"), hr);
	}
	printf("\n%-24s %10s %10s %8s\n", "MOUNT", "CACHED", "TOTAL", "FILES");
	json_array_foreach(json_object_get(o, "mount_usage"), i, v)
	{
		char cb[32], tb[32];
		cis_fmt_size((uint64_t)cli_jint(v, "cached_bytes"), cb, sizeof(cb));
		cis_fmt_size((uint64_t)cli_jint(v, "total_bytes"), tb, sizeof(tb));
		printf("%-24s %10s %10s %8lld\n", json_string_value(json_object_get(v, "path")), cb,
		       tb, cli_jint(v, "files"));
	}
}

int cli_cmd_report(cli_ctx *c, int argc, char **argv)
{
	return cli_get_and_print(c, argc, argv, "cistern report [--json]", "/api/v1/report",
	                         print_report);
}

static void print_workers(const json_t *o)
{
	size_t i;
	json_t *w;
	printf("%-6s %-22s %-20s %10s %10s %8s %s\n", "ID", "ADDRESS", "HOST", "USED", "CAPACITY",
	       "BLOCKS", "LAST SEEN");
	json_array_foreach(json_object_get(o, "workers"), i, w)
	{
		char addr[300], cap[32], used[32];
		snprintf(addr, sizeof(addr), "%s:%lld",
		         json_string_value(json_object_get(w, "host")), cli_jint(w, "rpc_port"));
		cis_fmt_size((uint64_t)cli_jint(w, "capacity"), cap, sizeof(cap));
		cis_fmt_size((uint64_t)cli_jint(w, "used"), used, sizeof(used));
		printf("%-6lld %-22s %-20s %10s %10s %8lld %.1fs ago\n", cli_jint(w, "id"), addr,
		       json_string_value(json_object_get(w, "hostname")), used, cap,
		       cli_jint(w, "blocks"),
		       (double)cli_jint(w, "last_heartbeat_ms_ago") / 1000.0);
	}
}

int cli_cmd_workers(cli_ctx *c, int argc, char **argv)
{
	return cli_get_and_print(c, argc, argv, "cistern workers [--json]", "/api/v1/workers",
	                         print_workers);
}
