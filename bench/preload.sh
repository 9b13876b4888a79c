#!/usr/bin/env bash
# Preload: PRELOAD_FILES x 64 MiB (32 = 2 GiB; quick 8 = 512 MiB) on the
# plain s3rver, one master and three cistern-worker processes on this host
# (own cache dirs and ports), /s3 mounted with 4 MiB blocks. `cistern load
# /s3` throughput against the best of curl --parallel-max 1/4/8/16 over the
# same objects; then a reader started together with the load (files in
# order through a new cistern-fuse mount each time) and when it stops
# stalling: its last read that waited on a cache miss, by cistern-fuse's
# stall metric (bench/rigbench.py preload).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$BENCH_DIR/rig.sh"
n=${PRELOAD_FILES:-32}
[ "${BENCH_QUICK:-0}" = 1 ] && n=${PRELOAD_FILES:-8}
gen_files "$BENCH_DATA/large-$n-64" "$n" $((64 << 20)) 1
bench_store_up
bench_upload "$BENCH_DATA/large-$n-64" plarge
rig_master
for w in W1 W2 W3; do rig_worker "$w" $((n * 64)); done
rig_mount plarge 4M
mnt=$CIS_TMP/mnt
mkdir -p "$mnt"
cis_on_exit "fusermount3 -u -z '$mnt' 2>/dev/null"
export RIG_CLI
python3 "$BENCH_DIR/rigbench.py" preload --local-dir "$BENCH_DATA/large-$n-64" --prefix plarge \
	--mnt "$mnt" --fuse "$CIS_BUILD/fuse/cistern-fuse --master 127.0.0.1:$M_RPC --log-file $CIS_TMP/fuse.log" \
	--cache "$W1_CACHE" --cache "$W2_CACHE" --cache "$W3_CACHE" \
	--parallel "${PRELOAD_PARALLEL:-16}" --repeats "$BENCH_REPEATS" \
	--out "$BENCH_RESULTS/preload-plain.json"
