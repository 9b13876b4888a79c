#!/usr/bin/env bash
# cistern-worker with a real master and an S3 store (s3rver behind the
# SigV4-verifying front): registration, mounts learned by GetMount, reads
# of files named through the master, 32 concurrent readers of a cold block
# making one store GET, loads kept to their share of the fetch threads
# while a read goes first, block reports (incremental, and full after a
# master restart), a persisted worker id, the bytes before a store's stall
# reaching a reader (of a fill it started, and of a load's fill it joined),
# a lookup waiting on a slow store
# listing holding up no heartbeat, a warm restart with no store GETs on
# re-read, and a failing store (5xx) giving a clear error while cached
# blocks keep being served.
source "$CIS_SRC/tests/integration/lib/common.sh"
source "$CIS_SRC/tests/integration/lib/master.sh"
source "$CIS_SRC/tests/integration/lib/s3.sh"

MASTER=$CIS_BUILD/master/cistern-master
WORKER=$CIS_BUILD/worker/cistern-worker
CLI=$CIS_BUILD/cli/cistern
WC=$CIS_BUILD/tests/worker_client
for b in "$MASTER" "$WORKER" "$CLI" "$WC"; do [ -x "$b" ] || fail "build $b first"; done

M_RPC=$(free_port)
M_HTTP=$(free_port)
W_RPC=$(free_port)
W_HTTP=$(free_port)
export CISTERN_API=127.0.0.1:$M_HTTP
MB=1048576

start_master() { # start_master [FLAGS...]
	master_up "$CIS_TMP/master" "$M_RPC" "$M_HTTP" --heartbeat-interval 1s "$@"
}

start_worker() {
	"$WORKER" --master "127.0.0.1:$M_RPC" --bind 127.0.0.1 --host 127.0.0.1 \
		--rpc-port "$W_RPC" --http-port "$W_HTTP" --state-dir "$CIS_TMP/wstate" \
		--cache-dir "$CIS_TMP/cache:256M" "$@" >>"$CIS_TMP/worker.log" 2>&1 &
	WPID=$!
	cis_on_exit "kill -9 $WPID"
	wait_for 20 curl -fsS "http://127.0.0.1:$W_HTTP/readyz"
}

# shape_proxy NAME FLAGS...: bench/shape-proxy.js in front of the store
# (its log $CIS_TMP/NAME.log); sets SHAPE_PORT.
shape_proxy() {
	local name=$1
	shift
	SHAPE_PORT=$(free_port)
	node "$CIS_SRC/bench/shape-proxy.js" --listen "127.0.0.1:$SHAPE_PORT" \
		--upstream "${CIS_S3_ENDPOINT#http://}" "$@" >"$CIS_TMP/$name.log" 2>&1 &
	cis_on_exit "kill_pid $!"
	wait_for 10 grep -q "shape-proxy ready" "$CIS_TMP/$name.log"
}

# mount_behind PORT NAME: s3://bucket/NAME at /NAME through the proxy on
# PORT, 1 MiB blocks.
mount_behind() {
	"$CLI" mount "/$2" "s3://$CIS_S3_BUCKET/$2" --option "endpoint=http://127.0.0.1:$1" \
		--option "region=$CIS_S3_REGION" --option path_style=true \
		--option "access_key=$CIS_S3_ACCESS_KEY" --option "secret_key=$CIS_S3_SECRET_KEY" \
		--block-size 1M >/dev/null || fail "mount /$2"
}

wcl() { # wcl PATH CMD ARGS...
	local p=$1
	shift
	"$WC" --tcp "127.0.0.1:$W_RPC" --unix "$CIS_TMP/wstate/worker.sock" \
		--master "127.0.0.1:$M_RPC" --path "$p" "$@"
}

wmetric() {
	curl -fsS "http://127.0.0.1:$W_HTTP/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}

blocks_indexed() {
	curl -fsS "http://127.0.0.1:$M_HTTP/api/v1/report" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["blocks_indexed"])'
}

s3gets() {
	s3_stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"].get("GET", 0))'
}

s3conns() {
	s3_stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"])'
}

s3put_file() {
	curl -fsS --aws-sigv4 "aws:amz:$CIS_S3_REGION:s3" \
		--user "$CIS_S3_ACCESS_KEY:$CIS_S3_SECRET_KEY" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X PUT --data-binary "@$2" \
		"$CIS_S3_ENDPOINT/$CIS_S3_BUCKET/$1" >/dev/null
}

s3_start
start_master
start_worker

log "registration"
out=$(curl -fsS "http://127.0.0.1:$M_HTTP/api/v1/workers")
assert_contains "$out" "\"rpc_port\":$W_RPC"
wid=$("$WC" --tcp "127.0.0.1:$W_RPC" stat | awk '/^worker/ {print $2}')
[ "$wid" -gt 0 ] || fail "worker has no id"

log "S3 mount, reads through the master"
mkdir -p "$CIS_TMP/src"
head -c $((8 * MB)) /dev/urandom >"$CIS_TMP/src/big.bin"
head -c $((2 * MB + 777)) /dev/urandom >"$CIS_TMP/src/a.bin"
"$CLI" mount /s3 "s3://$CIS_S3_BUCKET/ds" --option "endpoint=$CIS_S3_ENDPOINT" \
	--option "region=$CIS_S3_REGION" --option path_style=true \
	--option "access_key=$CIS_S3_ACCESS_KEY" --option "secret_key=$CIS_S3_SECRET_KEY" \
	--block-size 1M >/dev/null
s3put_file ds/big.bin "$CIS_TMP/src/big.bin"
head -c $((24 * MB + 5)) /dev/urandom >"$CIS_TMP/src/span.bin"
s3put_file ds/span.bin "$CIS_TMP/src/span.bin"
s3put_file ds/a.bin "$CIS_TMP/src/a.bin"
"$CLI" sync /s3 >/dev/null

wcl /s3/a.bin cat >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$CIS_TMP/src/a.bin" || fail "a.bin through the worker differs"
wcl /s3/a.bin read 2 700 1000 >"$CIS_TMP/out"
cmp "$CIS_TMP/out" <(tail -c +$((2 * MB + 701)) "$CIS_TMP/src/a.bin") || fail "tail range differs"
wcl /s3/a.bin local 1 >"$CIS_TMP/out"
cmp "$CIS_TMP/out" <(tail -c +$((MB + 1)) "$CIS_TMP/src/a.bin" | head -c $MB) || fail "local fd"

log "a reference with another block size than the mount's is refused"
if wcl /s3/a.bin --force-block-size 2M read 0 0 0 >/dev/null 2>"$CIS_TMP/err"; then
	fail "a 2 MiB block of a 1 MiB mount was served"
fi
assert_contains "$(cat "$CIS_TMP/err")" "is not mount"

log "32 concurrent readers of a cold block: one store GET"
s3_reset_stats
wcl /s3/big.bin parallel 32 5 >"$CIS_TMP/out"
cmp "$CIS_TMP/out" <(tail -c +$((5 * MB + 1)) "$CIS_TMP/src/big.bin" | head -c $MB) ||
	fail "parallel readers got wrong bytes"
assert_eq "$(s3gets)" 1 "GETs at the store for 32 readers of one block"

log "incremental block reports"
wait_for 15 bash -c "[ \$(curl -fsS http://127.0.0.1:$M_HTTP/api/v1/report | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"blocks_indexed\"])') = 4 ]"
wcl /s3/big.bin cat >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$CIS_TMP/src/big.bin" || fail "big.bin differs"
wait_for 15 bash -c "[ \$(curl -fsS http://127.0.0.1:$M_HTTP/api/v1/report | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"blocks_indexed\"])') = 11 ]"

log "a load of more consecutive blocks than fetch threads: ranged GETs of several blocks"
s3_reset_stats
wcl /s3/span.bin load $(seq 0 24) >/dev/null || fail "load of 25 blocks"
# 25 blocks over 16 threads: the first span has at least 2.
gets=$(s3gets)
[ "$gets" -ge 2 ] && [ "$gets" -lt 25 ] || fail "$gets GETs for a load of 25 blocks"
wcl /s3/span.bin cat >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$CIS_TMP/src/span.bin" || fail "span.bin differs after a span load"
assert_eq "$(s3gets)" "$gets" "GETs after reading the spans back"
wcl /s3/span.bin free $(seq 0 24) >/dev/null # the block counts below are without it

log "fetches reuse the store's connections (more GETs than connections)"
s3_reset_stats
for _ in 1 2 3; do
	wcl /s3/big.bin free 0 1 2 3 4 5 6 7 >/dev/null
	for b in 0 1 2 3 4 5 6 7; do
		wcl /s3/big.bin load $b >/dev/null
	done
done
gets=$(s3gets)
conns=$(s3conns)
[ "$gets" -ge 24 ] || fail "24 loads of one block made $gets GETs"
[ "$conns" -le 10 ] || fail "$gets GETs opened $conns connections to the store"

log "a read while a load fills the background fetch threads"
# A slow store (0.1 MB/s per connection, bench/shape-proxy.js in front of
# the front) and a worker with 8 fetch threads, 4 of them for background
# work: 12 loads of one-block objects run 4 at a time (three rounds of
# 2.6 s), and a read of another object is served by a free thread while
# the loads still run.
kill -9 "$WPID"
wait "$WPID" 2>/dev/null || true
start_worker --fetch-threads 8 --background-fetches 4
shape_proxy shape --latency-ms 0 --conn-mbps 0.1 --total-mbps 0
slow_port=$SHAPE_PORT
for i in $(seq -w 1 13); do
	head -c 262144 /dev/urandom >"$CIS_TMP/src/slow$i"
	s3put_file "slow/s$i" "$CIS_TMP/src/slow$i"
done
mount_behind "$slow_port" slow
"$CLI" sync /slow >/dev/null
bg_metric=cistern_worker_background_fetches_running
loaders=()
for i in $(seq -w 1 12); do
	wcl "/slow/s$i" load 0 >/dev/null &
	loaders+=($!)
done
wait_for 20 bash -c "[ \"\$(curl -fsS http://127.0.0.1:$W_HTTP/metrics | awk '\$1 == \"$bg_metric\" { print \$2 }')\" = 4 ]"
wcl /slow/s13 cat >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$CIS_TMP/src/slow13" || fail "a read during the loads got other bytes"
[ "$(wmetric $bg_metric)" -gt 0 ] || fail "the read waited for the loads to finish"
loading() {
	local p
	for p in "${loaders[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done
	return 1
}
most=0
while loading; do
	n=$(wmetric $bg_metric)
	[ "$n" -gt "$most" ] && most=$n
	sleep 0.1
done
for p in "${loaders[@]}"; do wait "$p" || fail "a load of a slow object failed"; done
[ "$most" -le 4 ] || fail "$most fetch threads ran loads at once (at most 4)"

log "a reader of a cold block gets its first bytes while the rest still comes"
# 512 KiB from the slow store take 5 s, sent by the proxy 64 KiB at a
# time. The fill writes to the block file 256 KiB at a time, or what came
# in 20 ms before new bytes arrive: the first 64 KiB must reach the reader
# before the proxy has sent 256 KiB, and long before the block is in.
head -c 524288 /dev/urandom >"$CIS_TMP/src/slow14"
s3put_file slow/s14 "$CIS_TMP/src/slow14"
"$CLI" sync /slow >/dev/null
shaped_bytes() {
	curl -fsS "http://127.0.0.1:$slow_port/__shape/stats" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["bytes"])'
}
before=$(shaped_bytes)
wcl /slow/s14 read 0 0 65536 >"$CIS_TMP/out"
sent=$(($(shaped_bytes) - before))
cmp "$CIS_TMP/out" <(head -c 65536 "$CIS_TMP/src/slow14") || fail "the first bytes differ"
[ "$sent" -lt 262144 ] || fail "the first 64 KiB reached the reader after $sent bytes came"
[ "$(wmetric cistern_worker_fetches_in_flight)" -ge 1 ] ||
	fail "the first 64 KiB came only when the whole block was in"
wcl /slow/s14 cat >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$CIS_TMP/src/slow14" || fail "the slow block differs"
for i in $(seq -w 1 14); do wcl "/slow/s$i" free 0 >/dev/null; done # the block counts below are without them

log "a store that stalls: the bytes that came before the stall reach the reader"
# The store sends 128 KiB of a 512 KiB block at once, then nothing for 5
# s. Those bytes are in the fill's stage, short of its 256 KiB piece, and
# no later bytes come to push them out: the store's quiet (a tick from the
# S3 connector at least once a second) must, long before the stall ends.
shape_proxy stall --latency-ms 0 --conn-mbps 0 --total-mbps 0 --stall-after 131072 \
	--stall-ms 5000
stall_port=$SHAPE_PORT
s3put_file stall/s1 "$CIS_TMP/src/slow14"
mount_behind "$stall_port" stall
"$CLI" sync /stall >/dev/null
t0=$(date +%s%N)
wcl /stall/s1 read 0 0 65536 >"$CIS_TMP/out"
waited_ms=$((($(date +%s%N) - t0) / 1000000))
cmp "$CIS_TMP/out" <(head -c 65536 "$CIS_TMP/src/slow14") || fail "the bytes before the stall differ"
log "the first 64 KiB came after $waited_ms ms"
[ "$waited_ms" -lt 4500 ] || fail "the bytes before a 5 s stall reached the reader after $waited_ms ms"
[ "$(wmetric cistern_worker_fetches_in_flight)" -ge 1 ] || fail "the stalled fetch was over already"
wcl /stall/s1 cat >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$CIS_TMP/src/slow14" || fail "the stalled block differs"
wcl /stall/s1 free 0 >/dev/null

log "a reader that joins a load's fill gets the bytes that came before a stall"
# A load writes past the page cache in 1 MiB pieces (the whole block here):
# once a reader joins, the bytes in hand go out on the store's quiet too.
# A proxy of its own: it stalls each connection once, and the worker keeps
# its connections to the first.
shape_proxy stall2 --latency-ms 0 --conn-mbps 0 --total-mbps 0 --stall-after 131072 \
	--stall-ms 5000
s3put_file stall2/s1 "$CIS_TMP/src/slow14"
mount_behind "$SHAPE_PORT" stall2
"$CLI" sync /stall2 >/dev/null
wcl /stall2/s1 load 0 >"$CIS_TMP/load.out" &
load_pid=$!
sleep 0.5 # the load's fill has its first 128 KiB and waits on the store
t0=$(date +%s%N)
wcl /stall2/s1 read 0 0 65536 >"$CIS_TMP/out"
waited_ms=$((($(date +%s%N) - t0) / 1000000))
cmp "$CIS_TMP/out" <(head -c 65536 "$CIS_TMP/src/slow14") || fail "the bytes before the stall differ"
log "the first 64 KiB came after $waited_ms ms"
[ "$waited_ms" -lt 3500 ] ||
	fail "a reader that joined a load got the bytes before a 5 s stall after $waited_ms ms"
wait "$load_pid" || fail "the load through the stall failed: $(cat "$CIS_TMP/load.out")"
wcl /stall2/s1 cat >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$CIS_TMP/src/slow14" || fail "the block loaded through the stall differs"
wcl /stall2/s1 free 0 >/dev/null

log "a lookup waiting on a slow store listing holds up no heartbeat"
# One RPC I/O thread and a 3 s worker timeout: a lookup that lists a store
# answering after 6 s, answered on that thread, would keep the worker's
# heartbeats waiting past the timeout and the worker would be lost.
kill -9 "$MPID"
wait "$MPID" 2>/dev/null || true
start_master --worker-timeout 3s --io-threads 1
wait_for 20 bash -c "curl -fsS http://127.0.0.1:$M_HTTP/api/v1/workers | grep -q '\"rpc_port\":$W_RPC'"
shape_proxy late --latency-ms 6000 --conn-mbps 0 --total-mbps 0
late_port=$SHAPE_PORT
s3put_file late/l1 "$CIS_TMP/src/a.bin"
mount_behind "$late_port" late
wcl /late/l1 id 0 >"$CIS_TMP/late.id" 2>&1 & # lists /late: 6 s in the master
looker=$!
sleep 5
lost=$(curl -fsS "http://127.0.0.1:$M_HTTP/metrics" |
	awk '$1 == "cistern_master_workers_lost_total" { print $2 }')
assert_eq "$lost" 0 "workers lost while a lookup waited on the store"
wait "$looker" || fail "the lookup through the slow store failed: $(cat "$CIS_TMP/late.id")"
"$CLI" unmount /late >/dev/null || fail "unmount /late"

log "master restart: the worker registers again and reports in full"
kill -9 "$MPID"
wait "$MPID" 2>/dev/null || true
start_master
wait_for 20 bash -c "[ \$(curl -fsS http://127.0.0.1:$M_HTTP/api/v1/report | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"blocks_indexed\"])') = 11 ]"
assert_contains "$(cat "$CIS_TMP/worker.log")" "registering again"
wid2=$("$WC" --tcp "127.0.0.1:$W_RPC" stat | awk '/^worker/ {print $2}')
assert_eq "$wid2" "$wid" "worker id kept across a master restart"

log "worker kill -9 and warm restart: no store GETs on re-read"
kill -9 "$WPID"
wait "$WPID" 2>/dev/null || true
start_worker
wid3=$("$WC" --tcp "127.0.0.1:$W_RPC" stat | awk '/^worker/ {print $2}')
assert_eq "$wid3" "$wid" "worker id persisted in the state dir"
s3_reset_stats
wcl /s3/big.bin cat >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$CIS_TMP/src/big.bin" || fail "big.bin after restart differs"
wcl /s3/a.bin cat >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$CIS_TMP/src/a.bin" || fail "a.bin after restart differs"
assert_eq "$(s3gets)" 0 "store GETs after a warm restart"
wait_for 20 bash -c "[ \$(curl -fsS http://127.0.0.1:$M_HTTP/api/v1/report | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"blocks_indexed\"])') = 11 ]"

log "store answering 5xx: a clear error, cached blocks still served"
head -c $((3 * MB)) /dev/urandom >"$CIS_TMP/src/late.bin"
s3put_file ds/late.bin "$CIS_TMP/src/late.bin"
"$CLI" sync /s3 >/dev/null
"$WC" --tcp "127.0.0.1:$W_RPC" --master "127.0.0.1:$M_RPC" --path /s3/late.bin id 0 >/dev/null
# Name the block while the master can still stat it; then kill the store.
s3_kill_store
if wcl /s3/late.bin read 0 0 0 >/dev/null 2>"$CIS_TMP/err"; then
	fail "read of an uncached block with the store down succeeded"
fi
[ -s "$CIS_TMP/err" ] || fail "no error message"
log "store down: $(cat "$CIS_TMP/err")"
wcl /s3/big.bin cat >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$CIS_TMP/src/big.bin" || fail "cached file with the store down"
[ "$(wmetric cistern_worker_store_errors_total)" -ge 1 ] || fail "store error not counted"
kill -0 "$WPID" || fail "worker died"

log "ok"
