# Helpers for the cistern-fuse integration tests (sourced after
# lib/common.sh): a master, workers and FUSE mounts on free ports, all
# stopped (and unmounted) on exit, every wait bounded.
MASTER_BIN="$CIS_BUILD/master/cistern-master"
WORKER_BIN="$CIS_BUILD/worker/cistern-worker"
FUSE_BIN="$CIS_BUILD/fuse/cistern-fuse"
CLI_BIN="$CIS_BUILD/cli/cistern"
TREE="python3 $CIS_SRC/tests/integration/fuse_tree.py"
for b in "$MASTER_BIN" "$WORKER_BIN" "$FUSE_BIN" "$CLI_BIN"; do
	[ -x "$b" ] || fail "$b is not built"
done
[ -e /dev/fuse ] || fail "/dev/fuse is missing"
command -v fusermount3 >/dev/null || fail "fusermount3 is not installed"

is_mounted() {
	awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo
}

start_master() {
	MRPC=$(free_port)
	MHTTP=$(free_port)
	"$MASTER_BIN" --data-dir "$CIS_TMP/master" --rpc-port "$MRPC" --http-port "$MHTTP" \
		>"$CIS_TMP/master.log" 2>&1 &
	MPID=$!
	disown "$MPID"
	cis_on_exit "kill_pid $MPID"
	wait_for 30 curl -sf -m 2 "http://127.0.0.1:$MHTTP/readyz"
	CLI=("$CLI_BIN" --api "127.0.0.1:$MHTTP")
}

# start_worker NAME: a worker with its own cache, state and socket; sets
# WPID_<NAME>, WRPC_<NAME> and WHTTP_<NAME>.
start_worker() {
	local name=$1 rpc http pid
	rpc=$(free_port)
	http=$(free_port)
	mkdir -p "$CIS_TMP/w-$name/cache"
	"$WORKER_BIN" --master "127.0.0.1:$MRPC" --cache-dir "$CIS_TMP/w-$name/cache:2G" \
		--state-dir "$CIS_TMP/w-$name/state" --rpc-port "$rpc" --http-port "$http" \
		--host 127.0.0.1 --socket "$CIS_TMP/w-$name/sock" >"$CIS_TMP/worker-$name.log" 2>&1 &
	pid=$!
	disown "$pid"
	cis_on_exit "kill_pid $pid"
	wait_for 30 curl -sf -m 2 "http://127.0.0.1:$http/readyz"
	printf -v "WPID_$name" '%s' "$pid"
	printf -v "WRPC_$name" '%s' "$rpc"
	printf -v "WHTTP_$name" '%s' "$http"
}

# metric_of URL NAME: the value of series NAME at URL. A dead endpoint or a
# series it does not have prints a word, not a number, so that a check
# like [ "$(metric ...)" -le 2 ] or assert_eq fails instead of reading 0.
metric_of() {
	local out
	out=$(curl -sf -m 5 "$1") || {
		echo "metrics-unreachable"
		return 1
	}
	awk -v n="$2" '$1 == n { v = $2 } END { if (v == "") print "no-series"; else printf "%d\n", v }' \
		<<<"$out"
}

# wmetric NAME METRIC: its value from worker NAME's /metrics.
wmetric() {
	local port="WHTTP_$1"
	metric_of "http://127.0.0.1:${!port}/metrics" "$2"
}

# mount_fuse MNT ARGS...: cistern-fuse as a daemon on MNT; FHTTP is its
# metrics port, FLOG its log.
mount_fuse() {
	local mnt=$1
	shift
	mkdir -p "$mnt"
	FHTTP=$(free_port)
	FLOG="$CIS_TMP/fuse-$(basename "$mnt").log"
	"$FUSE_BIN" "$mnt" --master "127.0.0.1:$MRPC" --http-port "$FHTTP" --log-file "$FLOG" "$@" ||
		fail "cistern-fuse $mnt failed: $(cat "$FLOG" 2>/dev/null)"
	cis_on_exit "fusermount3 -u -z '$mnt'"
	wait_for 20 is_mounted "$mnt"
}

unmount_fuse() {
	fusermount3 -u "$1" || fail "fusermount3 -u $1 failed"
	wait_for 20 bash -c "! awk -v m='$1' '\$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo"
}

# metric NAME_WITH_LABELS: its value from the FUSE client's /metrics.
metric() {
	metric_of "http://127.0.0.1:$FHTTP/metrics" "$1"
}

# The listing and the checksums of every file, relative to a root.
listing() {
	(cd "$1" && find . -mindepth 1 | LC_ALL=C sort)
}
checksums() {
	(cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -P 2 -n 64 sha256sum |
		LC_ALL=C sort -k2)
}

s3_put_tree() {
	$TREE s3put "$1" "$2" || fail "uploading $1 to s3"
}
