# Shared by the bench/*.sh scripts (sourced). Reuses the integration tests'
# rig (tests/integration/lib: CIS_TMP, traps, s3rver) and adds:
#   bench_store_up        s3rver, plus bench/shape-proxy.js in front of it;
#                         sets PLAIN_ENDPOINT and SHAPED_ENDPOINT
#   bench_upload DIR PFX  copy a local tree into the bucket under PFX
#   bench_compare NAME STORE PFX DIR PARAMS_JSON -- WORKLOAD...
#                         bench/compare.py against that store; results in
#                         $BENCH_RESULTS/NAME-STORE.json
# Knobs (environment): BENCH_REPEATS (3), BENCH_STORES ("plain shaped"),
# BENCH_SYSTEMS, SHAPE_LATENCY_MS (20), SHAPE_CONN_MBPS (100),
# SHAPE_TOTAL_MBPS (1000), BENCH_DATA (where generated datasets are kept,
# with the caches: in the benchmark filesystem of bench/fs.sh when
# BENCH_FS=journaled mounts one (BENCH_FS_GIB, BENCH_FS_IMG), else in the
# build dir),
# BENCH_STORE_DIR (where s3rver keeps its objects: by default a fresh
# directory in /dev/shm when it has BENCH_STORE_RAM_MIN_GIB (8) free, else
# under CIS_TMP on the data's disk; see bench_store_up),
# BENCH_VIA_FRONT=1 (go through the SigV4-verifying front; by default the
# benchmarks talk to s3rver directly, which does not check signatures, so
# the front's extra proxy hop and signature checks do not cost CPU that the
# two cores are short of; every system is signed either way).
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CIS_SRC=${CIS_SRC:-$(cd "$BENCH_DIR/.." && pwd)}
CIS_BUILD=${CIS_BUILD:-$CIS_SRC/build}
export CIS_SRC CIS_BUILD
# shellcheck source=fs.sh
source "$BENCH_DIR/fs.sh"
BENCH_FS_DIR=$(bench_fs_up) || {
	echo "bench: cannot mount the benchmark filesystem (bench/fs.sh)" >&2
	exit 1
}
BENCH_DATA=${BENCH_DATA:-${BENCH_FS_DIR:-$CIS_BUILD}/bench-data}
# The caches of the systems under test live under CIS_TMP (the rigs) and
# BENCH_DATA (compare.py): both on the disk of the data, not a small tmpfs.
mkdir -p "$BENCH_DATA"
export TMPDIR=${TMPDIR:-$BENCH_DATA}
# shellcheck source=../tests/integration/lib/common.sh
source "$CIS_SRC/tests/integration/lib/common.sh"
# shellcheck source=../tests/integration/lib/s3.sh
source "$CIS_SRC/tests/integration/lib/s3.sh"

BENCH_RESULTS=${BENCH_RESULTS:-$CIS_SRC/bench/results}
BENCH_REPEATS=${BENCH_REPEATS:-3}
BENCH_STORES=${BENCH_STORES:-plain shaped}
BENCH_SYSTEMS=${BENCH_SYSTEMS:-limit,local,copyfirst,s3fs,rclone,cistern}
SHAPE_LATENCY_MS=${SHAPE_LATENCY_MS:-20}
SHAPE_CONN_MBPS=${SHAPE_CONN_MBPS:-100}
SHAPE_TOTAL_MBPS=${SHAPE_TOTAL_MBPS:-1000}
mkdir -p "$BENCH_RESULTS"

# s3rver's objects live in memory when there is room: a remote store never
# reads from the disk the systems under test cache on, and on one shared
# disk every system's cache writes would slow the store's own reads (the
# curl baseline writes nothing). Page-cache drops do not touch tmpfs, so the
# store's reads cost CPU only, the same for every system.
bench_store_dir() {
	if [ -n "${BENCH_STORE_DIR:-}" ]; then
		mkdir -p "$BENCH_STORE_DIR"
		echo "$BENCH_STORE_DIR"
		return
	fi
	local free_kib
	free_kib=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
	if [ "${free_kib:-0}" -ge $((${BENCH_STORE_RAM_MIN_GIB:-8} << 20)) ]; then
		mktemp -d /dev/shm/cistern-bench-store.XXXXXX
	else
		echo "$CIS_TMP/s3rver"
	fi
}

bench_store_up() {
	S3RVER_DATA_DIR=$(bench_store_dir)
	case $S3RVER_DATA_DIR in
	/dev/shm/cistern-bench-store.*) cis_on_exit "rm -rf $S3RVER_DATA_DIR" ;;
	esac
	export S3RVER_DATA_DIR
	s3_start
	if [ "${BENCH_VIA_FRONT:-0}" = 1 ]; then
		PLAIN_ENDPOINT=$CIS_S3_ENDPOINT
		BENCH_ACCESS_KEY=$CIS_S3_ACCESS_KEY BENCH_SECRET_KEY=$CIS_S3_SECRET_KEY
	else
		# s3rver's own (fixed) credentials: it checks the key id.
		PLAIN_ENDPOINT="http://127.0.0.1:$S3RVER_PORT"
		BENCH_ACCESS_KEY=S3RVER BENCH_SECRET_KEY=S3RVER
	fi
	export BENCH_ACCESS_KEY BENCH_SECRET_KEY
	local port
	port=$(free_port)
	node "$BENCH_DIR/shape-proxy.js" --listen "127.0.0.1:$port" \
		--upstream "${PLAIN_ENDPOINT#http://}" --latency-ms "$SHAPE_LATENCY_MS" \
		--conn-mbps "$SHAPE_CONN_MBPS" --total-mbps "$SHAPE_TOTAL_MBPS" \
		>"$CIS_TMP/shape.log" 2>&1 &
	SHAPE_PID=$!
	disown "$SHAPE_PID"
	cis_on_exit "kill_pid $SHAPE_PID"
	wait_for 20 grep -q "shape-proxy ready" "$CIS_TMP/shape.log"
	SHAPED_ENDPOINT="http://127.0.0.1:$port"
	export PLAIN_ENDPOINT SHAPED_ENDPOINT
	log "bench: store plain $PLAIN_ENDPOINT, shaped $SHAPED_ENDPOINT, objects in $S3RVER_DATA_DIR" \
		"(${SHAPE_LATENCY_MS} ms, ${SHAPE_CONN_MBPS} MB/s per connection, ${SHAPE_TOTAL_MBPS} MB/s total)"
}

bench_rclone_env() {
	export RCLONE_CONFIG_BENCH_TYPE=s3 RCLONE_CONFIG_BENCH_PROVIDER=Other \
		RCLONE_CONFIG_BENCH_ENDPOINT=$PLAIN_ENDPOINT \
		RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=$BENCH_ACCESS_KEY \
		RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=$BENCH_SECRET_KEY \
		RCLONE_CONFIG_BENCH_REGION=$CIS_S3_REGION RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE=true
}

bench_upload() {
	local dir=$1 prefix=$2
	bench_rclone_env
	log "bench: uploading $(du -sh "$dir" | cut -f1) from $dir to $prefix"
	# rclone 1.60 cannot combine AWS_CA_BUNDLE with its own transport; the
	# store is plain HTTP on loopback anyway.
	env -u AWS_CA_BUNDLE rclone copy "$dir" "bench:$CIS_S3_BUCKET/$prefix" --transfers 16 --checkers 16 \
		--s3-upload-concurrency 4 --no-check-dest --s3-disable-checksum ||
		fail "upload of $dir failed"
}

bench_compare() {
	local name=$1 store=$2 prefix=$3 dir=$4 params=$5 endpoint
	shift 5
	[ "$1" = "--" ] && shift
	case $store in
	plain) endpoint=$PLAIN_ENDPOINT ;;
	shaped) endpoint=$SHAPED_ENDPOINT ;;
	*) fail "unknown store $store" ;;
	esac
	python3 "$BENCH_DIR/compare.py" --benchmark "$name" --store-label "$store" \
		--endpoint "$endpoint" --bucket "$CIS_S3_BUCKET" --prefix "$prefix" \
		--region "$CIS_S3_REGION" --access-key "$BENCH_ACCESS_KEY" \
		--secret-key "$BENCH_SECRET_KEY" --local-dir "$dir" \
		--systems "${BENCH_SYSTEMS_OVERRIDE:-$BENCH_SYSTEMS}" --repeats "$BENCH_REPEATS" \
		--cistern "$CIS_BUILD/cli/cistern" --work-dir "$BENCH_DATA" \
		--params "$params" --out "$BENCH_RESULTS/$name-$store.json" ${BENCH_COMPARE_FLAGS:-} \
		-- "$@"
}

# gen_files DIR COUNT SIZE_BYTES DIRS: COUNT random files spread over DIRS
# directories; made once (DIR.made records the parameters).
gen_files() {
	local dir=$1 count=$2 size=$3 ndirs=$4 want
	want="$count $size $ndirs"
	[ -f "$dir.made" ] && [ "$(cat "$dir.made")" = "$want" ] && return 0
	rm -rf "$dir" "$dir.made" # a marker left from before would bless a half-made tree
	mkdir -p "$dir"
	log "bench: generating $count files of $size bytes in $ndirs dirs under $dir"
	python3 - "$dir" "$count" "$size" "$ndirs" <<'PY'
import os, sys
top, count, size, ndirs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
blob = os.urandom(max(size, 1) + 4096)
for i in range(count):
    d = os.path.join(top, f"d{i % ndirs:04d}")
    if i < ndirs:
        os.makedirs(d, exist_ok=True)
    off = (i * 7919) % 4096  # distinct contents without paying urandom per file
    with open(os.path.join(d, f"f{i:07d}.bin"), "wb") as f:
        f.write(i.to_bytes(8, "little") + blob[off:off + max(size - 8, 0)] if size >= 8 else blob[:size])
PY
	echo "$want" >"$dir.made"
}
