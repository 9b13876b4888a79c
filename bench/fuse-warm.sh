#!/usr/bin/env bash
# FUSE, warm: FUSE_FILES x FUSE_MIB MiB (8 x 128; quick 4 x 64) on the plain
# s3rver, mounted at /s3 through one master, one worker and cistern-fuse on
# this host; read once to cache it on the worker, then (bench/rigbench.py
# fuse): warm sequential 1 MiB reads with the page cache dropped against the
# worker's block files read directly; hot re-read against a local file in
# the page cache; and os.lstat of every file of a STAT_FILES (100,000)
# empty-file tree in a file:// mount, warm.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$BENCH_DIR/rig.sh"
n=${FUSE_FILES:-8}
mib=${FUSE_MIB:-128}
[ "${BENCH_QUICK:-0}" = 1 ] && n=${FUSE_FILES:-4} mib=${FUSE_MIB:-64}
nstat=${STAT_FILES:-100000}
gen_files "$BENCH_DATA/large-$n-$mib" "$n" $((mib << 20)) 1
gen_files "$BENCH_DATA/tree-$nstat" "$nstat" 0 100
bench_store_up
bench_upload "$BENCH_DATA/large-$n-$mib" flarge
rig_master
rig_worker W1 $((n * mib * 2))
rig_mount flarge 4M
"$RIG_CLI" mount /tree "file://$BENCH_DATA/tree-$nstat" >/dev/null || fail "mount /tree failed"
mnt=$CIS_TMP/mnt
mkdir -p "$mnt"
"$CIS_BUILD/fuse/cistern-fuse" "$mnt" --master "127.0.0.1:$M_RPC" --http-port "$(free_port)" \
	--log-file "$CIS_TMP/fuse.log" || fail "cistern-fuse failed: $(cat "$CIS_TMP/fuse.log")"
cis_on_exit "fusermount3 -u -z '$mnt'"
wait_for 20 mountpoint -q "$mnt"
python3 "$BENCH_DIR/rigbench.py" fuse --local-dir "$BENCH_DATA/large-$n-$mib" --mnt "$mnt" \
	--tree "$BENCH_DATA/tree-$nstat" --cache "$W1_CACHE" --repeats "$BENCH_REPEATS" \
	--out "$BENCH_RESULTS/fuse-warm-plain.json"
