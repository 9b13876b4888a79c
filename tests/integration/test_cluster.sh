#!/usr/bin/env bash
# A real multi-host cluster on one machine: every program runs in its own
# network namespace (its own "host"), joined by veth pairs to a bridge in a
# "switch" namespace of its own. The addresses (10.201.0.0/24) exist only
# inside these namespaces and the root namespace has no link to them, so
# nothing the test sends can leave the test's hosts.
#
#   master  10.201.0.1     cistern-master (and the CLI)
#   w1..w3  10.201.0.11-13 cistern-worker, each with its own cache dir and
#                          hostname (unshare --uts), so the client sees them
#                          as remote
#   client  10.201.0.20    cistern-fuse (the mount is visible in the root
#                          mount namespace: only the network is entered)
#   s3      10.201.0.30    s3rver behind the SigV4-verifying front
#
# 1. load 2,000 files with --replicas 2: exact job counts, and every block
#    on exactly 2 workers (the report's blocks_by_copies);
# 2. the store's link down: every file reads back with the right checksum,
#    no worker fetches anything and the client never reads the store;
# 3. kill -9 one worker: every file still reads right, and the replication
#    manager puts every block back on 2 workers (copied worker to worker:
#    the store is still unreachable);
# 4. store back, a throttled load of a second mount, the master killed and
#    restarted mid-job: the job resumes and completes with exact counts.
# Everything (processes, mount, namespaces, bridge) goes on exit.
source "$(dirname "$0")/lib/common.sh"
source "$(dirname "$0")/fuse_lib.sh"

[ "$(id -u)" = 0 ] || fail "needs root (network namespaces)"
command -v nsenter >/dev/null && command -v unshare >/dev/null || fail "util-linux nsenter/unshare missing"
command -v node >/dev/null || fail "node is not installed (scripts/install-deps.sh)"
S3_NODE_DIR="$CIS_SRC/tests/node"
[ -f "$S3_NODE_DIR/node_modules/s3rver/bin/s3rver.js" ] || fail "s3rver missing: run scripts/install-deps.sh"

TAG=$(printf '%x' $(($$ % 4096)))
BR="cisbr$TAG"
NETP=10.201.0
HOSTS=(master w1 w2 w3 client s3)
declare -A IP=([master]=$NETP.1 [w1]=$NETP.11 [w2]=$NETP.12 [w3]=$NETP.13 [client]=$NETP.20 [s3]=$NETP.30)
ns() { echo "cis$TAG-$1"; }
veth() { echo "cv$TAG$1"; } # host side; at most 15 characters

SW=$(ns switch)
# CIS_KEEP_LOGS=DIR keeps the daemons' logs there (for debugging a failure)
[ -z "${CIS_KEEP_LOGS:-}" ] || cis_on_exit "mkdir -p '$CIS_KEEP_LOGS' && cp '$CIS_TMP'/*.log '$CIS_KEEP_LOGS'/"
teardown_net() {
	local h
	for h in "${HOSTS[@]}"; do
		# whatever still runs inside goes first (processes we started there)
		ip netns pids "$(ns "$h")" 2>/dev/null | xargs -r kill -9 2>/dev/null
		ip netns del "$(ns "$h")" 2>/dev/null
	done
	ip netns del "$SW" 2>/dev/null # takes the bridge and the veth ends with it
}
cis_on_exit teardown_net

log "network: bridge $BR in $SW, hosts ${HOSTS[*]}"
ip netns add "$SW" || fail "ip netns add $SW"
ip -n "$SW" link add "$BR" type bridge || fail "cannot create bridge $BR"
ip -n "$SW" link set "$BR" up
for h in "${HOSTS[@]}"; do
	n=$(ns "$h")
	ip netns add "$n" || fail "ip netns add $n"
	ip link add "$(veth "$h")" type veth peer name "cp$TAG$h" || fail "veth for $h"
	ip link set "$(veth "$h")" netns "$SW"
	ip link set "cp$TAG$h" netns "$n"
	ip -n "$n" link set "cp$TAG$h" name eth0
	ip -n "$n" addr add "${IP[$h]}/24" dev eth0
	ip -n "$n" link set eth0 up
	ip -n "$n" link set lo up
	ip -n "$SW" link set "$(veth "$h")" master "$BR"
	ip -n "$SW" link set "$(veth "$h")" up
done

# on HOST CMD...: run in HOST's network (root mount namespace, same files).
on() {
	local h=$1
	shift
	nsenter --net="/run/netns/$(ns "$h")" "$@"
}
# daemon HOST LOG CMD...: start CMD on HOST under its own hostname; sets PID.
daemon() {
	local h=$1 logf=$2
	shift 2
	nsenter --net="/run/netns/$(ns "$h")" unshare --uts sh -c 'hostname "$0" && exec "$@"' \
		"cis-$h" "$@" >"$logf" 2>&1 &
	PID=$!
	disown "$PID"
	cis_on_exit "kill_pid $PID"
}

# ---- the store ----
export CIS_S3_ACCESS_KEY=CISTESTKEY CIS_S3_SECRET_KEY='cis-test-secret/With+Odd=Chars'
export CIS_S3_BUCKET=cistern-test CIS_S3_REGION=us-east-1
export CIS_S3_ENDPOINT="http://${IP[s3]}:9000"
mkdir -p "$CIS_TMP/s3data"
daemon s3 "$CIS_TMP/s3rver.log" node --openssl-legacy-provider \
	"$S3_NODE_DIR/node_modules/s3rver/bin/s3rver.js" -d "$CIS_TMP/s3data" -a 127.0.0.1 -p 4568 \
	--silent --no-vhost-buckets --configure-bucket "$CIS_S3_BUCKET"
wait_for 30 on s3 curl -sf -m 2 -o /dev/null "http://127.0.0.1:4568/$CIS_S3_BUCKET"
daemon s3 "$CIS_TMP/s3front.log" node "$S3_NODE_DIR/s3front.js" --listen "${IP[s3]}:9000" \
	--upstream 127.0.0.1:4568 --key "$CIS_S3_ACCESS_KEY:$CIS_S3_SECRET_KEY"
wait_for 30 grep -q "s3front ready" "$CIS_TMP/s3front.log"

SRC="$CIS_TMP/src"
log "making and uploading 2000 files"
$TREE make "$SRC" 2000 3 >/dev/null
# one curl, 8 uploads at a time over kept-alive connections (a process per
# file costs minutes on a small machine)
python3 - "$SRC" "$CIS_S3_ENDPOINT/$CIS_S3_BUCKET/ds/" >"$CIS_TMP/upload.cfg" <<'PY'
import os, sys, urllib.parse
root, base = sys.argv[1], sys.argv[2]
q = lambda s: s.replace("\\", "\\\\").replace('"', '\\"')
for d, _, fs in os.walk(root):
    for f in fs:
        p = os.path.join(d, f)
        print('upload-file = "%s"' % q(p))
        print('url = "%s"' % q(base + urllib.parse.quote(os.path.relpath(p, root), safe="/-_.~")))
        print('output = "/dev/null"')
PY
on client curl -sSf --no-progress-meter --parallel --parallel-max 8 --aws-sigv4 "aws:amz:$CIS_S3_REGION:s3" \
	--user "$CIS_S3_ACCESS_KEY:$CIS_S3_SECRET_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
	-K "$CIS_TMP/upload.cfg" || fail "uploading the dataset"
read -r NFILES NBLOCKS NBYTES < <(python3 - "$SRC" <<'EOF'
import os, sys
n = b = t = 0
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        s = os.path.getsize(os.path.join(d, f))
        n += 1; t += s; b += (s + (1 << 20) - 1) >> 20
print(n, b, t)
EOF
)
log "dataset: $NFILES files, $NBLOCKS blocks of 1 MiB, $NBYTES bytes"

# ---- the cluster ----
MLOG="$CIS_TMP/master.log"
start_cluster_master() {
	daemon master "$1" "$MASTER_BIN" --data-dir "$CIS_TMP/master" --heartbeat-interval 1s \
		--worker-timeout 3s --repl-interval 10s
	MPID=$PID
	wait_for 30 on master curl -sf -m 2 "http://127.0.0.1:19601/readyz"
}
start_cluster_master "$MLOG"
declare -A WPID
for w in w1 w2 w3; do
	mkdir -p "$CIS_TMP/$w/cache"
	daemon "$w" "$CIS_TMP/$w.log" "$WORKER_BIN" --master "${IP[master]}:19600" \
		--cache-dir "$CIS_TMP/$w/cache:1G" --state-dir "$CIS_TMP/$w/state" --host "${IP[$w]}" \
		--socket "$CIS_TMP/$w/sock"
	WPID[$w]=$PID
	wait_for 30 on "$w" curl -sf -m 2 "http://127.0.0.1:19611/readyz"
done
CLI=(on master "$CLI_BIN" --api 127.0.0.1:19601)
live_workers() { "${CLI[@]}" workers --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workers"]))'; }
# (wait_for runs a command again and again: the checks are functions, so
# that what they compare is fetched anew each time)
live_workers_are() { test "$(live_workers)" = "$1"; }
wait_for 20 live_workers_are 3

for m in ds ds2; do
	"${CLI[@]}" mount "/$m" "s3://$CIS_S3_BUCKET/ds" --block-size 1M --sync-interval 0 \
		--option "endpoint=$CIS_S3_ENDPOINT" --option path_style=true \
		--option "region=$CIS_S3_REGION" --option "access_key=$CIS_S3_ACCESS_KEY" \
		--option "secret_key=$CIS_S3_SECRET_KEY" >/dev/null || fail "cistern mount /$m"
done

# jq-less JSON checks
jget() { python3 -c 'import json,sys; o=json.load(sys.stdin)
for k in sys.argv[1].split("."): o = o[int(k)] if isinstance(o, list) else o[k]
print(json.dumps(o) if isinstance(o, (list, dict)) else o)' "$1"; }
# copies MOUNT: the mount's blocks_by_copies from the report, as "n0 n1 n2 ..."
copies() {
	"${CLI[@]}" report --json | python3 -c 'import json,sys
for u in json.load(sys.stdin)["mount_usage"]:
    if u["path"] == sys.argv[1]: print(" ".join(map(str, u["blocks_by_copies"])))' "$1"
}
WANT_COPIES="0 0 $NBLOCKS 0 0 0 0 0 0"
two_copies() { test "$(copies "$1")" = "$WANT_COPIES"; }

# ---- 1. load with two replicas ----
log "1. load /ds --replicas 2"
OUT=$("${CLI[@]}" load /ds --replicas 2 --parallel 4 --json) || fail "load failed: $OUT"
assert_eq "$(jget state <<<"$OUT")" done "load state"
assert_eq "$(jget counts.files <<<"$OUT")" "$NFILES" "files loaded"
assert_eq "$(jget counts.files_failed <<<"$OUT")" 0 "files failed"
assert_eq "$(jget counts.blocks <<<"$OUT")" "$NBLOCKS" "blocks"
assert_eq "$(jget counts.bytes <<<"$OUT")" "$NBYTES" "bytes"
assert_eq "$(jget counts.tasks_loaded <<<"$OUT")" $((2 * NBLOCKS)) "block copies fetched"
assert_eq "$(jget counts.tasks_failed <<<"$OUT")" 0 "block copies failed"
# the location index learns of blocks by heartbeat (1 s here)
wait_for 20 two_copies /ds
REPORT=$("${CLI[@]}" report)
assert_contains "$REPORT" "MOUNT" "report shows mounts"
assert_contains "$("${CLI[@]}" jobs)" "/ds" "cistern jobs lists the load"
# a second load finds everything cached and fetches nothing
OUT=$("${CLI[@]}" load /ds --replicas 2 --json) || fail "second load failed"
# (on failure: the job's counts and the live workers, to tell a fetch from a
# block planned with fewer owners)
loaded=$(jget counts.tasks_loaded <<<"$OUT")
cached=$(jget counts.tasks_cached <<<"$OUT")
if [ "$loaded" != 0 ] || [ "$cached" != $((2 * NBLOCKS)) ]; then
	fail "second load: $loaded fetched (want 0), $cached already cached (want $((2 * NBLOCKS))); counts: $(jget counts <<<"$OUT"); workers: $("${CLI[@]}" workers 2>&1 | tr '\n' ' ')"
fi
# a path that does not exist is refused with the master's error
ERR=$("${CLI[@]}" load /ds/no-such-dir 2>&1) && fail "load of a missing path succeeded"
assert_contains "$ERR" "no-such-dir" "load error names the path"

# ---- 2. the store unreachable: every read is a cache hit ----
sum_misses() {
	local w t=0 v
	for w in "$@"; do
		v=$(on "$w" curl -sf -m 5 http://127.0.0.1:19611/metrics |
			awk '$1 == "cistern_worker_misses_total" { print $2 }') || v=
		[ -n "$v" ] || fail "worker $w: no cistern_worker_misses_total"
		t=$((t + v))
	done
	echo "$t"
}
MNT="$CIS_TMP/mnt"
mkdir -p "$MNT"
FLOG="$CIS_TMP/fuse.log"
on client unshare --uts sh -c 'hostname cis-client && exec "$@"' x "$FUSE_BIN" "$MNT" \
	--master "${IP[master]}:19600" --http-port 19621 --log-file "$FLOG" ||
	fail "cistern-fuse failed: $(cat "$FLOG")"
cis_on_exit "fusermount3 -u -z '$MNT'"
wait_for 20 is_mounted "$MNT"
store_reads() {
	local out
	out=$(on client curl -sf -m 5 http://127.0.0.1:19621/metrics) || {
		echo "metrics-unreachable"
		return 1
	}
	awk '$1 == "cistern_fuse_block_reads_total{path=\"store\"}" { v = $2 }
		END { if (v == "") print "no-series"; else printf "%d\n", v }' <<<"$out"
}
log "2. store link down, reading every file"
ip -n "$SW" link set "$(veth s3)" down
MISSES0=$(sum_misses w1 w2 w3)
checksums "$SRC" >"$CIS_TMP/want.sum"
checksums "$MNT/ds" >"$CIS_TMP/got.sum" || fail "reading the mount failed"
cmp -s "$CIS_TMP/want.sum" "$CIS_TMP/got.sum" || fail "checksums differ with the store down: $(diff "$CIS_TMP/want.sum" "$CIS_TMP/got.sum" | head -5)"
assert_eq "$(sum_misses w1 w2 w3)" "$MISSES0" "worker cache misses while reading"
assert_eq "$(store_reads)" 0 "client reads from the store"

# ---- 3. a worker lost ----
log "3. kill -9 w1"
kill -9 "${WPID[w1]}"
checksums "$MNT/ds" >"$CIS_TMP/got3.sum" || fail "reading the mount after losing w1 failed"
cmp -s "$CIS_TMP/want.sum" "$CIS_TMP/got3.sum" || fail "checksums differ after losing w1"
assert_eq "$(store_reads)" 0 "client reads from the store after losing w1"
wait_for 20 live_workers_are 2
log "waiting for the replication manager"
wait_for 90 two_copies /ds
grep -q '"replication pass" copied=' "$MLOG" || fail "no replication pass in the master log"

# ---- 4. master restarted during a load ----
log "4. store back; a throttled load of /ds2, master killed mid-job"
ip -n "$SW" link set "$(veth s3)" up
wait_for 20 on client curl -s -m 2 -o /dev/null "$CIS_S3_ENDPOINT/"
JOB=$("${CLI[@]}" load /ds2 --replicas 2 --bandwidth 8M --detach) || fail "load /ds2: $JOB"
job_files_over() { test "$("${CLI[@]}" job "$JOB" --json | jget counts.files)" -gt "$1"; }
wait_for 60 job_files_over 100
assert_eq "$("${CLI[@]}" job "$JOB" --json | jget state)" running "job state before the kill"
kill -9 "$MPID"
sleep 1
start_cluster_master "$CIS_TMP/master2.log"
job_ended() { test "$("${CLI[@]}" job "$JOB" --json | jget state)" != running; }
wait_for 20 grep -q '"job resumed" id='"$JOB" "$CIS_TMP/master2.log"
wait_for 150 job_ended
OUT=$("${CLI[@]}" job "$JOB" --json)
assert_eq "$(jget state <<<"$OUT")" done "resumed job state"
assert_eq "$(jget counts.files <<<"$OUT")" "$NFILES" "resumed job files"
assert_eq "$(jget counts.files_failed <<<"$OUT")" 0 "resumed job failures"
assert_eq "$(jget counts.blocks <<<"$OUT")" "$NBLOCKS" "resumed job blocks"
assert_eq "$(jget counts.bytes <<<"$OUT")" "$NBYTES" "resumed job bytes"
assert_eq "$(($(jget counts.tasks_loaded <<<"$OUT") + $(jget counts.tasks_cached <<<"$OUT")))" \
	$((2 * NBLOCKS)) "resumed job block copies"
wait_for 30 two_copies /ds2

log "test_cluster: all checks passed"
