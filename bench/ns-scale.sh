#!/usr/bin/env bash
# Master namespace scale: NS_INODES (10,000,000) file inodes, 1,000 to a
# directory, written straight into the master's LMDB by bench/ns_bench.c
# through the master's own store API (a real store listing of 10 M objects
# would take hours here), then the real cistern-master on that data dir and
# NS_THREADS (8) client threads doing random Lookup RPCs (binary protocol,
# master.proto LookupRequest) for NS_SECONDS (10) each repeat. Reports
# master RSS after the lookups (target: the heap, i.e. anonymous RSS, under
# 512 MiB; LMDB's mapped pages are the OS's page cache and are shown apart),
# data.mdb bytes per
# inode, lookup p50/p99 (median of the repeats) and lookups/s.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
n=${NS_INODES:-10000000}
threads=${NS_THREADS:-8}
secs=${NS_SECONDS:-10}
tool=$CIS_BUILD/bench/ns_bench
[ -x "$tool" ] || fail "$tool is not built (cmake --build ... --target ns_bench)"
data=$BENCH_DATA/ns-scale-$n
if [ ! -f "$data.made" ]; then
	rm -rf "$data"
	mkdir -p "$data/store"
	log "bench: writing $n inodes into $data/lmdb"
	"$tool" gen "$data/lmdb" "$data/store" "$n" >"$CIS_TMP/gen.json" || fail "ns_bench gen failed"
	cat "$CIS_TMP/gen.json"
	cp "$CIS_TMP/gen.json" "$data.made"
fi
# Page cache dropped first: RSS then shows the pages the master itself
# touches (LMDB is mapped: resident map pages count as file-backed RSS).
sync
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || log "bench: not root: page cache not dropped"
rpc=$(free_port)
http=$(free_port)
"$CIS_BUILD/master/cistern-master" --data-dir "$data/lmdb" --bind 127.0.0.1 --rpc-port "$rpc" \
	--http-port "$http" --log-level warn >"$CIS_TMP/master.log" 2>&1 &
mpid=$!
cis_on_exit "kill_pid $mpid"
wait_for 60 curl -sf "http://127.0.0.1:$http/healthz" -o /dev/null
sleep 2
rss_start=$(awk '/^VmRSS/ {print $2}' "/proc/$mpid/status")
: >"$CIS_TMP/runs.jsonl"
for i in $(seq "$BENCH_REPEATS"); do
	"$tool" lookup 127.0.0.1 "$rpc" "$threads" "$secs" "$n" | tee -a "$CIS_TMP/runs.jsonl" ||
		fail "ns_bench lookup failed"
done
status=$(cat "/proc/$mpid/status")
mdb=$(stat -c %s "$data/lmdb/data.mdb")
python3 - "$CIS_TMP/runs.jsonl" "$data.made" "$mdb" "$rss_start" "$n" "$threads" "$secs" \
	"$BENCH_REPEATS" "$BENCH_RESULTS/ns-scale-lmdb.json" <<PY
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
gen = json.load(open(sys.argv[2]))
mdb, rss0, n, threads, secs, reps, out = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8]), sys.argv[9]
st = {l.split(":")[0]: l.split(":")[1].strip() for l in """$status""".splitlines() if ":" in l}
kb = lambda k: int(st.get(k, "0 kB").split()[0])
rss, anon, filerss = kb("VmRSS") / 1024, kb("RssAnon") / 1024, kb("RssFile") / 1024
med = lambda k: statistics.median(r[k] for r in runs)
inodes = gen["inodes"]
d = {"benchmark": "ns-scale", "store": "LMDB (generated)", "repeats": reps,
     "params": {"inodes": inodes, "client threads": threads, "seconds per repeat": secs,
                "files per directory": 1000},
     "runs": runs, "generate_seconds": gen["seconds"],
     "table": {"columns": ["what", "value", "target", ""], "rows": [
         ["master RSS after the lookups, anonymous (heap) (MiB)", f"{anon:.0f}", "< 512", "met" if anon < 512 else "not met"],
         ["master RSS after the lookups, file-backed LMDB map pages (MiB)", f"{filerss:.0f}", "", "the OS's page cache"],
         ["master VmRSS after the lookups, both (MiB)", f"{rss:.0f}", "", ""],
         ["master VmRSS at start, before any lookup (MiB)", f"{rss0/1024:.0f}", "", ""],
         ["data.mdb size (MiB)", f"{mdb/2**20:,.0f}", "", ""],
         ["bytes per inode on disk (data.mdb ÷ inodes)", f"{mdb/inodes:.0f}", "", ""],
         ["lookups/s, %d client threads (median)" % threads, f"{med('per_s'):,.0f}", "", ""],
         ["lookup p50 (µs, median of repeats)", f"{med('p50_us'):.0f}", "", ""],
         ["lookup p99 (µs, median of repeats)", f"{med('p99_us'):.0f}", "", ""]]},
     "extra": f"Inodes written by bench/ns_bench.c (the master's own mst_inode_put/mst_child_put) in {gen['seconds']:.0f} s; the master then served Lookup RPCs (binary protocol, one connection per client thread, random file in a random directory of 1,000, uniform over all {inodes:,} inodes). RSS includes the pages of the LMDB map the lookups touched (file-backed, reclaimable page cache); anonymous memory is the master's own heap.",
     "targets": [["master heap RSS < 512 MiB; LMDB's mapped pages are the OS's (ratio: anonymous RSS ÷ 512 MiB)", anon / 512, 1, "le"]]}
json.dump(d, open(out, "w"), indent=1)
print(json.dumps(d["table"], indent=1))
PY
