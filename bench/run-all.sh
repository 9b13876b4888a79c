#!/usr/bin/env bash
# make bench: every benchmark in one go, then docs/benchmarks.md and its
# charts (bench/report.py). Each bench/<name>.sh writes JSON into
# bench/results/; a script that fails is recorded and the others still run.
#
#   bench/run-all.sh [NAME...]      (default: large small meta train master-ls ns-scale
#                                    worker fuse-warm preload)
# Environment: BENCH_QUICK=1 for a small version of every dataset (for a
# shared or slow machine; the report says so), BENCH_TIMEOUT per script in
# seconds (3600), BENCH_KEEP=1 to keep the results already in bench/results
# (to add or redo some benchmarks and render everything), and the knobs of bench/lib.sh (BENCH_REPEATS, BENCH_STORES,
# SHAPE_*), the dataset sizes (LARGE_FILES, LARGE_MIB, SMALL_FILES,
# SMALL_KIB, META_OBJECTS, META_DIRS, TRAIN_THREADS, TRAIN_EPOCHS).
set -uo pipefail

bench=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$bench")
results=${BENCH_RESULTS:-$bench/results}
export BENCH_RESULTS=$results
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(large small meta train master-ls ns-scale worker fuse-warm preload)

if [ "${BENCH_QUICK:-0}" = 1 ]; then
	export LARGE_FILES=${LARGE_FILES:-4} LARGE_MIB=${LARGE_MIB:-64}
	export SMALL_FILES=${SMALL_FILES:-2000} SMALL_KIB=${SMALL_KIB:-100}
	export META_OBJECTS=${META_OBJECTS:-10000} META_DIRS=${META_DIRS:-100}
fi
[ "$(id -u)" = 0 ] || echo "run-all: not root: page caches cannot be dropped and cold figures will be warm" >&2
[ -x "${CIS_BUILD:-$top/build}/cli/cistern" ] ||
	echo "run-all: ${CIS_BUILD:-$top/build}/cli/cistern is not built: Cistern rows will be missing" >&2

mkdir -p "$results"
notes="$results/notes.md"
CIS_BUILD=${CIS_BUILD:-$top/build}
# shellcheck source=fs.sh
source "$bench/fs.sh"
fs_why=$(bench_fs_why)
if [ "${BENCH_KEEP:-0}" = 1 ] && [ -f "$notes" ]; then
	# Only the stores this run measures: a plain-only re-run keeps the
	# shaped results of an earlier one.
	for n in "${names[@]}"; do
		rm -f "$results/$n.log"
		for store in ${BENCH_STORES:-plain shaped}; do
			rm -f "$results/$n-$store".json "$results/$n-$store"-*.json
		done
	done
else
	rm -f "$results"/*.json "$results"/*.log "$notes" "$results/builds.txt"
fi
# The commit measured, for the report's machine table (rendering later, at
# another HEAD, must not name that one).
build=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$top" diff --quiet HEAD -- 2>/dev/null || build="$build with uncommitted changes"
grep -qxF "$build" "$results/builds.txt" 2>/dev/null || echo "$build" >>"$results/builds.txt"
{
	echo "- Started $(date -u '+%Y-%m-%d %H:%M UTC') (${names[*]}); load average at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores."
	if [ "${BENCH_QUICK:-0}" = 1 ]; then
		echo "- **Quick mode** (BENCH_QUICK=1): datasets smaller than the full suite's; see each table's parameters."
	fi
	echo "- Shaped store: ${SHAPE_LATENCY_MS:-20} ms first-byte latency, ${SHAPE_CONN_MBPS:-100} MB/s per connection, ${SHAPE_TOTAL_MBPS:-1000} MB/s in all."
	if [ -n "$fs_why" ]; then
		echo "- Disk: $fs_why, which scans past recently freed inodes on every file create (bench/fs.sh), so the datasets and every system's cache were on a journaled ext4 of the suite's own: a sparse image on that disk, on a loop device with direct I/O."
	fi
} >>"$notes"

# The report says s3rver's objects are in memory; a script whose store had
# to go on disk (bench/lib.sh: bench_store_dir) is marked.
store_on_disk_note() {
	local dir
	dir=$(sed -n 's/.*bench: store .*, objects in \(.*\) (.*/\1/p' "$1" | head -1)
	case $dir in
	"" | /dev/shm/*) ;;
	*) echo " Its store's objects were on disk ($dir), not in memory." ;;
	esac
}

for n in "${names[@]}"; do
	script="$bench/$n.sh"
	if [ ! -x "$script" ]; then
		echo "- \`$n\`: no such benchmark script" >>"$notes"
		continue
	fi
	echo "run-all: $n" >&2
	t0=$SECONDS
	timeout --kill-after=30 "${BENCH_TIMEOUT:-3600}" "$script" >"$results/$n.log" 2>&1
	rc=$?
	# A script killed for its time had no exit trap: its store's objects
	# would stay in memory and push the next scripts' stores to disk.
	rm -rf /dev/shm/cistern-bench-store.*
	if [ $rc -eq 0 ]; then
		echo "- \`bench/$n.sh\`: done in $((SECONDS - t0)) s.$(store_on_disk_note "$results/$n.log")" >>"$notes"
	else
		echo "- \`bench/$n.sh\`: **failed** (exit $rc after $((SECONDS - t0)) s): \`$(grep -v '^\s*$' "$results/$n.log" | tail -1 | cut -c1-200)\`" >>"$notes"
		echo "run-all: $n failed (exit $rc), see $results/$n.log" >&2
	fi
done
echo "- Finished $(date -u '+%H:%M UTC'); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)." >>"$notes"
bench_fs_down || echo "run-all: cannot unmount $BENCH_FS_MNT" >&2

# Benchmarks this machine cannot run (the GPU one needs a lent GPU machine)
# keep their last result in bench/kept/; it is shown, marked, when this run
# has none of its own.
for kept in "$bench"/kept/*.json; do
	[ -f "$kept" ] && [ ! -f "$results/$(basename "$kept")" ] || continue
	cp "$kept" "$results/"
	echo "- \`$(basename "$kept")\`: not run here; the table is the result kept in bench/kept/." >>"$notes"
done

python3 "$bench/report.py" --results "$results" --out "$top/docs/benchmarks.md" --notes "$notes"
