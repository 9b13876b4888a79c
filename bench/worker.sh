#!/usr/bin/env bash
# Worker: WORKER_FILES x WORKER_MIB MiB (8 x 128; quick 4 x 64) on the
# plain s3rver, one master and one worker on loopback, /s3 mounted with
# 4 MiB blocks. Cold: every block loaded from the store (LoadRequest)
# against the best of curl --parallel-max 1/4/8/16 ranged GETs of the same
# objects; warm: the cached blocks read over loopback TCP against the same
# block files read directly from the cache dir (bench/rigbench.py worker).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$BENCH_DIR/rig.sh"
n=${WORKER_FILES:-8}
mib=${WORKER_MIB:-128}
[ "${BENCH_QUICK:-0}" = 1 ] && n=${WORKER_FILES:-4} mib=${WORKER_MIB:-64}
gen_files "$BENCH_DATA/large-$n-$mib" "$n" $((mib << 20)) 1
bench_store_up
bench_upload "$BENCH_DATA/large-$n-$mib" wlarge
rig_master
rig_worker W1 $((n * mib * 2))
rig_mount wlarge 4M
export RIG_WC M_RPC
python3 "$BENCH_DIR/rigbench.py" worker --local-dir "$BENCH_DATA/large-$n-$mib" --prefix wlarge \
	--cache "$W1_CACHE" --worker-rpc "$W1_RPC" --repeats "$BENCH_REPEATS" \
	--out "$BENCH_RESULTS/worker-plain.json"
