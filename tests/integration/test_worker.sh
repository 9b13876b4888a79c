#!/usr/bin/env bash
# cistern-worker on its own (a file:// mount given with --mount, no
# master), driven by worker_client: byte ranges compared byte for byte,
# single flight, short-circuit fds, warm restart after kill -9 with
# reconcile, corruption (first read after restart and the scrubber),
# eviction under watermarks, scan resistance, pins and leases, and the
# faults: files deleted or truncated behind the worker, a full disk, one
# out of inodes, a read-only dir, a vanished dir, a missing object,
# garbage on both sockets.
source "$CIS_SRC/tests/integration/lib/common.sh"

WORKER=$CIS_BUILD/worker/cistern-worker
WC=$CIS_BUILD/tests/worker_client
[ -x "$WORKER" ] && [ -x "$WC" ] || fail "build cistern-worker and worker_client first"

DATA=$CIS_TMP/data
mkdir -p "$DATA"
MB=1048576
head -c $((5 * MB + 12345)) /dev/urandom >"$DATA/f.bin"
for i in $(seq 0 24); do head -c $MB /dev/urandom >"$DATA/scan$i"; done
head -c $((3 * MB)) /dev/urandom >"$DATA/hot"
echo -n "tiny" >"$DATA/tiny"
head -c 300000 /dev/urandom >"$DATA/small"
: >"$DATA/empty"

# start_worker NAME ARGS...: a worker with state in $CIS_TMP/NAME.
start_worker() {
	local name=$1
	shift
	local rpc http
	rpc=$(free_port)
	http=$(free_port)
	"$WORKER" --bind 127.0.0.1 --host 127.0.0.1 --rpc-port "$rpc" --http-port "$http" \
		--state-dir "$CIS_TMP/$name.state" --mount "1=file://$DATA" --fetch-threads 4 "$@" \
		>>"$CIS_TMP/$name.log" 2>&1 &
	local pid=$!
	cis_on_exit "kill -9 $pid"
	eval "${name}_PID=$pid ${name}_RPC=$rpc ${name}_HTTP=$http"
	wait_for 20 curl -fsS "http://127.0.0.1:$http/healthz"
}

# wc NAME KEY CMD ARGS...
wcl() {
	local name=$1 key=$2
	shift 2
	local rpc_var=${name}_RPC
	"$WC" --tcp "127.0.0.1:${!rpc_var}" --unix "$CIS_TMP/$name.state/worker.sock" \
		--uri "file://$DATA" --key "$key" --mount-id 1 --block-size 1M "$@"
}

metric() { # metric NAME METRIC
	local http_var=${1}_HTTP
	curl -fsS "http://127.0.0.1:${!http_var}/metrics" | awk -v n="$2" '$1 == n { print $2 }'
}

# expect FILE OFF LEN: the source bytes of FILE [OFF, OFF+LEN)
expect() {
	tail -c +$(($2 + 1)) "$DATA/$1" | head -c "$3"
}

# ---------------------------------------------------------------- reads
start_worker W1 --cache-dir "$CIS_TMP/c1:64M"
size=$(stat -c %s "$DATA/f.bin")
log "byte ranges"
for spec in "0 0 0" "0 0 1" "0 1 1" "0 $((MB - 1)) 1" "0 $((MB - 1)) 10" "1 12345 54321" \
	"2 0 $MB" "3 100 0" "5 0 0" "5 12344 1" "5 12345 0" "5 0 99999999" "4 $((MB / 2)) $MB"; do
	set -- $spec
	blen=$MB
	[ "$1" = 5 ] && blen=12345
	len=$3
	{ [ "$len" = 0 ] || [ $(($2 + len)) -gt $blen ]; } && len=$((blen - $2))
	wcl W1 f.bin read $spec >"$CIS_TMP/out"
	cmp "$CIS_TMP/out" <(expect f.bin $(($1 * MB + $2)) $len) || fail "range $spec differs"
done
wcl W1 f.bin cat >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$DATA/f.bin" || fail "whole file differs"
wcl W1 tiny read 0 0 0 >"$CIS_TMP/out"
assert_eq "$(cat "$CIS_TMP/out")" "tiny" "one short block"
wcl W1 empty read 0 0 0 >"$CIS_TMP/out"
assert_eq "$(stat -c %s "$CIS_TMP/out")" 0 "empty file"

log "a second worker on the same state dir or cache dir touches nothing"
# An unfinished fill of W1's (its temporary file), and W1's blocks: a
# worker started by mistake beside it must exit before cleaning either.
: >"$CIS_TMP/c1/.tmp/unfinished"
nfiles=$(find "$CIS_TMP/c1" -path '*/[0-9a-f][0-9a-f]/*' -type f | wc -l)
[ "$nfiles" -gt 0 ] || fail "W1 cached nothing"
for state in "$CIS_TMP/W1.state" "$CIS_TMP/W1-other.state"; do
	rc=0
	timeout 20 "$WORKER" --bind 127.0.0.1 --rpc-port 0 --http-port 0 --state-dir "$state" \
		--mount "1=file://$DATA" --cache-dir "$CIS_TMP/c1:64M" 2>"$CIS_TMP/err" || rc=$?
	[ "$rc" != 0 ] && [ "$rc" != 124 ] ||
		fail "a second worker on $state and W1's cache dir started (status $rc)"
	assert_contains "$(cat "$CIS_TMP/err")" "in use by another worker" "second worker, $state"
	[ -e "$CIS_TMP/c1/.tmp/unfinished" ] || fail "a second worker ($state) cleaned W1's .tmp"
	assert_eq "$(find "$CIS_TMP/c1" -path '*/[0-9a-f][0-9a-f]/*' -type f | wc -l)" "$nfiles" \
		"W1's block files after a second worker ($state)"
done
rm "$CIS_TMP/c1/.tmp/unfinished"
wcl W1 f.bin cat | cmp - "$DATA/f.bin" || fail "W1 after a second worker tried its dirs"
wcl W1 tiny read 0 4 0 >"$CIS_TMP/out"
assert_eq "$(stat -c %s "$CIS_TMP/out")" 0 "read at the block end"
if wcl W1 f.bin read 5 12346 1 2>"$CIS_TMP/err"; then fail "read past the block end succeeded"; fi
assert_contains "$(cat "$CIS_TMP/err")" "past the end"
if wcl W1 f.bin read 6 0 0 2>"$CIS_TMP/err"; then fail "a block past the file end was read"; fi
assert_eq "$(metric W1 cistern_worker_store_reads_total)" 7 "one store read per block"

log "local short-circuit"
wcl W1 f.bin local 2 >"$CIS_TMP/out"
cmp "$CIS_TMP/out" <(expect f.bin $((2 * MB)) $MB) || fail "local fd bytes differ"
# A miss is answered at once, "not cached yet", with the fetch started; the
# client reads the block over the socket, then it opens locally.
wcl W1 scan0 local 0 >"$CIS_TMP/out" 2>"$CIS_TMP/err"
assert_contains "$(cat "$CIS_TMP/err")" "not cached yet"
cmp "$CIS_TMP/out" "$DATA/scan0" || fail "local fd of a fetched block differs"
# With wait (what clients ask for small blocks) a miss is answered when
# the fetch is done: the descriptor at the first call, one store read.
reads0=$(metric W1 cistern_worker_store_reads_total)
wcl W1 small waitlocal 0 >"$CIS_TMP/out" 2>"$CIS_TMP/err" || fail "open local with wait failed"
cmp "$CIS_TMP/out" "$DATA/small" || fail "open local with wait: bytes differ"
assert_eq "$(metric W1 cistern_worker_store_reads_total)" $((reads0 + 1)) "one store read for a waited open"
# The reply says it waited for the fetch (the client's stall), and a
# cached block's does not.
assert_eq "$(cat "$CIS_TMP/err")" "waited=1" "a miss's reply says it waited"
wcl W1 small waitlocal 0 >/dev/null 2>"$CIS_TMP/err" || fail "open local with wait failed"
assert_eq "$(cat "$CIS_TMP/err")" "waited=0" "a hit's reply says it did not wait"
# Leases renewed and released in batches; an unknown one among them is
# listed (renew) or skipped (release); more than 4,096 at once is refused.
assert_eq "$(wcl W1 small leases 0)" "leases ok" "batched lease calls"
assert_eq "$(metric W1 cistern_worker_leases)" 0 "leases left after the batch release"
if "$WC" --tcp "127.0.0.1:$W1_RPC" --unix /nonexistent --uri "file://$DATA" --key f.bin \
	--mount-id 1 local 0 2>/dev/null; then fail "local on a missing socket"; fi
[ "$(metric W1 'cistern_worker_served_bytes_total{path="local"}')" -ge $((2 * MB)) ] ||
	fail "local bytes not counted"

log "single flight: 32 readers of one cold block"
reads0=$(metric W1 cistern_worker_store_reads_total)
wcl W1 scan1 parallel 32 0 >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$DATA/scan1" || fail "parallel readers got wrong bytes"
assert_eq "$(metric W1 cistern_worker_store_reads_total)" $((reads0 + 1)) "32 readers, one fetch"

log "prefetch and load"
out=$(wcl W1 scan2 prefetch 0)
assert_contains "$out" "queued 1"
out=$(wcl W1 scan3 load 0)
assert_contains "$out" "code=0"
out=$(wcl W1 scan3 load 0)
assert_contains "$out" "cached=1"
wait_for 10 bash -c "[ \$(curl -fsS http://127.0.0.1:$W1_HTTP/metrics | awk '\$1==\"cistern_worker_fetches_in_flight\"{print \$2}') = 0 ]"
reads0=$(metric W1 cistern_worker_store_reads_total)
wcl W1 scan2 read 0 0 0 | cmp - "$DATA/scan2" || fail "prefetched block differs"
assert_eq "$(metric W1 cistern_worker_store_reads_total)" "$reads0" "prefetched block was cached"
# A Prefetch of a cached block reads its file into the page cache ahead of
# the reader (no store read, nothing queued).
id=$(wcl W1 scan2 id 0)
bfile="$CIS_TMP/c1/${id:0:2}/$id"
# Drop bfile from the page cache, once its fill is in place (a reader has
# its bytes before the fill is renamed and its last pages written).
drop_bfile() {
	wait_for 10 bash -c "[ -s '$bfile' ] && sync '$bfile' &&
		dd if='$bfile' iflag=nocache count=0 status=none &&
		[ \$(fincore --bytes --noheadings --output RES '$bfile') -lt $MB ]"
}
drop_bfile
ahead0=$(metric W1 cistern_worker_read_ahead_bytes_total)
out=$(wcl W1 scan2 prefetch 0)
assert_contains "$out" "queued 0"
# Read ahead once the reply is out: counted a moment later.
wait_for 10 bash -c "[ \$(curl -fsS http://127.0.0.1:$W1_HTTP/metrics | awk '\$1==\"cistern_worker_read_ahead_bytes_total\"{print \$2}') = $((ahead0 + MB)) ]"
wait_for 10 bash -c "[ \$(fincore --bytes --noheadings --output RES '$bfile') = $MB ]"
assert_eq "$(metric W1 cistern_worker_store_reads_total)" "$reads0" "a cached block's prefetch read the store"

log "free"
out=$(wcl W1 scan2 free 0)
assert_contains "$out" "freed 1"
wcl W1 scan2 read 0 0 0 | cmp - "$DATA/scan2" || fail "freed block re-read differs"
assert_eq "$(metric W1 cistern_worker_store_reads_total)" $((reads0 + 1)) "freed block fetched again"
# Batches past 65,536 blocks are refused whole, as Prefetch and Load are.
for cmd in free pin; do
	if wcl W1 scan2 "$cmd" $(seq 0 65536) >"$CIS_TMP/out" 2>"$CIS_TMP/err"; then
		fail "a $cmd of 65,537 blocks was taken: $(cat "$CIS_TMP/out")"
	fi
	assert_contains "$(cat "$CIS_TMP/err")" "$cmd of 65537 blocks, limit 65536"
done
wcl W1 scan2 read 0 0 0 | cmp - "$DATA/scan2" || fail "scan2 after the refused batches"

log "a load of more consecutive blocks than fetch threads is fetched in spans"
head -c $((6 * MB + 777)) /dev/urandom >"$DATA/span.bin"
reads0=$(metric W1 cistern_worker_store_reads_total)
out=$(wcl W1 span.bin load 0 1 2 3 4 5 6)
assert_eq "$(grep -c "code=0 cached=0" <<<"$out")" 7 "blocks loaded: $out"
# 7 blocks over the 3 threads a load may use (of 4): spans of 2 or 3.
reads=$(($(metric W1 cistern_worker_store_reads_total) - reads0))
[ "$reads" -ge 2 ] && [ "$reads" -lt 7 ] || fail "$reads store reads for a load of 7 blocks on 3 threads"
for b in 0 1 2 3 4 5 6; do
	wcl W1 span.bin read $b 0 0 | cmp - <(expect span.bin $((b * MB)) $MB) || fail "span block $b differs"
done
assert_eq "$(metric W1 cistern_worker_store_reads_total)" $((reads0 + reads)) "store reads after reading the spans back"

log "a load's store reads give way to a reader's"
# On an S3 store paced at 1 MB/s per response (s3front), a load of 12
# blocks streams in 3 spans for about 4 s. A reader's block of another
# object, asked for 0.5 s in, leaves one of them streaming beside it and
# pauses the others (cistern_worker_load_pauses_total); they go on after
# it, and every block of both arrives whole.
source "$CIS_SRC/tests/integration/lib/s3.sh"
s3_start
head -c $((12 * MB)) /dev/urandom >"$CIS_TMP/bulk.bin"
head -c "$MB" /dev/urandom >"$CIS_TMP/want.bin"
for f in bulk.bin want.bin; do
	curl -fsS -X PUT --data-binary @"$CIS_TMP/$f" \
		"http://127.0.0.1:$S3RVER_PORT/$CIS_S3_BUCKET/$f" >/dev/null || fail "upload of $f"
done
export AWS_ENDPOINT_URL=$CIS_S3_ENDPOINT AWS_REGION=$CIS_S3_REGION
export AWS_ACCESS_KEY_ID=$CIS_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CIS_S3_SECRET_KEY
start_worker W8 --cache-dir "$CIS_TMP/c8:64M" --mount "2=s3://$CIS_S3_BUCKET"
s3wc() { # s3wc KEY CMD ARGS...: worker_client on W8's S3 mount
	"$WC" --tcp "127.0.0.1:$W8_RPC" --uri "s3://$CIS_S3_BUCKET" --key "$1" --mount-id 2 \
		--block-size 1M "${@:2}"
}
curl -fsS -X POST "$CIS_S3_ENDPOINT/__front/pace?bps=$MB" || fail "s3front took no pace"
s3wc bulk.bin load $(seq 0 11) >"$CIS_TMP/bulk.out" &
loader=$!
sleep 0.5
s3wc want.bin read 0 0 0 | cmp - "$CIS_TMP/want.bin" || fail "the reader's block differs"
pauses=$(metric W8 cistern_worker_load_pauses_total)
[ "$pauses" -ge 1 ] || fail "no load read paused for the reader's ($pauses)"
wait "$loader" || fail "the load failed: $(cat "$CIS_TMP/bulk.out")"
assert_eq "$(grep -c "code=0 cached=0" "$CIS_TMP/bulk.out")" 12 "blocks loaded beside the reader"
curl -fsS -X POST "$CIS_S3_ENDPOINT/__front/pace?bps=0"
for b in $(seq 0 11); do
	s3wc bulk.bin read "$b" 0 0 | cmp - <(tail -c +$((b * MB + 1)) "$CIS_TMP/bulk.bin" | head -c "$MB") ||
		fail "loaded block $b differs"
done
assert_eq "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$CIS_S3_ENDPOINT/__front/pace?bps=fast")" \
	400 "a pace that is no number"
kill_pid "$W8_PID"
unset AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY

log "a load fills past the page cache: whole pages O_DIRECT, the last partial page through it"
# 3 MiB blocks: block 0 is three whole stages, block 1 two and a partial
# one (4567 bytes: one whole page and a 471-byte tail).
head -c $((5 * MB + 4567)) /dev/urandom >"$DATA/big.bin"
out=$(wcl W1 big.bin --block-size 3M load 0 1)
assert_eq "$(grep -c "code=0 cached=0" <<<"$out")" 2 "blocks loaded: $out"
if dd if=/dev/zero of="$CIS_TMP/.direct-probe" bs=4096 count=1 oflag=direct status=none 2>/dev/null; then
	for b in 0 1; do
		id=$(wcl W1 big.bin --block-size 3M id $b)
		res=$(fincore --bytes --noheadings --output RES "$CIS_TMP/c1/${id:0:2}/$id")
		[ "$res" -le 4096 ] || fail "loaded block $b left $res bytes in the page cache"
	done
else
	log "(the cache dir refuses O_DIRECT: the load went through the page cache)"
fi
rm -f "$CIS_TMP/.direct-probe"
wcl W1 big.bin --block-size 3M read 0 0 0 | cmp - <(expect big.bin 0 $((3 * MB))) ||
	fail "loaded block 0 differs"
wcl W1 big.bin --block-size 3M read 1 0 0 | cmp - <(expect big.bin $((3 * MB)) $((2 * MB + 4567))) ||
	fail "loaded block 1 differs"
wcl W1 big.bin --block-size 3M local 1 | cmp - <(expect big.bin $((3 * MB)) $((2 * MB + 4567))) ||
	fail "loaded block 1 differs through its local fd"

log "block file deleted or truncated behind the worker"
id=$(wcl W1 f.bin id 1)
rm "$CIS_TMP/c1/${id:0:2}/$id"
wcl W1 f.bin read 1 0 0 | cmp - <(expect f.bin $MB $MB) || fail "deleted block re-read"
id=$(wcl W1 f.bin id 2)
[ -f "$CIS_TMP/c1/${id:0:2}/$id" ] || fail "block 2 is not cached"
truncate -s 1000 "$CIS_TMP/c1/${id:0:2}/$id"
wcl W1 f.bin read 2 0 0 | cmp - <(expect f.bin $((2 * MB)) $MB) || fail "truncated block re-read"
wcl W1 f.bin local 2 | cmp - <(expect f.bin $((2 * MB)) $MB) || fail "local after truncation"

log "missing object: clear error, others still served"
echo gone >"$DATA/gone"
wcl W1 gone id 0 >/dev/null
ver_args=$(wcl W1 gone id 0)
cp "$DATA/gone" "$CIS_TMP/gone.keep"
rm "$DATA/gone"
if wcl W1 gone read 0 0 0 2>"$CIS_TMP/err"; then fail "read of a removed object succeeded"; fi
cp "$CIS_TMP/gone.keep" "$DATA/gone"
wcl W1 f.bin read 0 0 0 | cmp - <(expect f.bin 0 $MB) || fail "worker stopped serving"

log "garbage on the RPC port and the Unix socket"
python3 - "$W1_RPC" "$CIS_TMP/W1.state/worker.sock" <<'EOF'
import os, socket, sys
for fam, addr in ((socket.AF_INET, ("127.0.0.1", int(sys.argv[1]))), (socket.AF_UNIX, sys.argv[2])):
    for junk in (os.urandom(4096), b"\xc1\x57\x01\x00" + b"\xff" * 60, b"GET / HTTP/1.0\r\n\r\n"):
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(addr)
        s.sendall(junk)
        try:
            s.recv(100)
        except Exception:
            pass
        s.close()
EOF
wcl W1 f.bin read 3 0 100 | cmp - <(expect f.bin $((3 * MB)) 100) || fail "served after garbage"
wcl W1 f.bin local 3 | cmp - <(expect f.bin $((3 * MB)) $MB) || fail "local after garbage"
kill -0 "$W1_PID" || fail "worker died on garbage"
# Random bytes and a header with impossible lengths are bad frames (two per
# socket); the 18-byte HTTP request is shorter than a header, so its
# connection just ends (the peer left mid-frame), uncounted.
assert_eq "$(metric W1 cistern_worker_rpc_bad_frames_total)" 4 "garbage connections counted"

log "forged block or file sizes are never served to readers of the real ones"
# Block 1 of 2 MiB blocks is bytes [2M, 4M): the block size is in the id,
# so it is another block than block 1 of the 1 MiB blocks.
wcl W1 f.bin --force-block-size 2M read 1 0 0 | cmp - <(expect f.bin $((2 * MB)) $((2 * MB))) ||
	fail "block 1 of 2 MiB blocks differs"
wcl W1 f.bin read 1 0 0 | cmp - <(expect f.bin $MB $MB) || fail "a 2 MiB block served as 1 MiB block 1"
wcl W1 f.bin local 1 | cmp - <(expect f.bin $MB $MB) || fail "local: a 2 MiB block as block 1"
# A smaller file size caches the last block short; the id does not cover
# the file size, so a reader of the real one must find it corrupt.
wcl W1 f.bin --file-size $((5 * MB + 100)) read 5 0 0 | cmp - <(expect f.bin $((5 * MB)) 100) ||
	fail "short last block differs"
wcl W1 f.bin read 5 0 0 | cmp - <(expect f.bin $((5 * MB)) 12345) || fail "short block served whole"
wcl W1 f.bin --file-size $((5 * MB + 100)) read 5 0 0 >/dev/null
# Its reader has the bytes before the worker commits the block: let the
# fetch end first (the open below raced it, and found it still fetching).
wait_for 10 bash -c "[ \$(curl -fsS http://127.0.0.1:$W1_HTTP/metrics | awk '\$1==\"cistern_worker_fetches_in_flight\"{print \$2}') = 0 ]"
wcl W1 f.bin local 5 | cmp - <(expect f.bin $((5 * MB)) 12345) || fail "local: short block served"
wcl W1 f.bin --file-size $((5 * MB + 100)) read 5 0 0 >/dev/null
out=$(wcl W1 f.bin load 5)
assert_contains "$out" "code=0"
wcl W1 f.bin read 5 0 0 | cmp - <(expect f.bin $((5 * MB)) 12345) || fail "load kept a short block"

log "replicate from a peer, and from the store when the peer fails"
start_worker W6 --cache-dir "$CIS_TMP/c6:64M"
out=$(wcl W6 f.bin replicate 3 "127.0.0.1:$W1_RPC")
assert_contains "$out" "from_peer=1 code=0"
assert_eq "$(metric W6 cistern_worker_store_reads_total)" 0 "replica came from the peer"
assert_eq "$(metric W6 cistern_worker_peer_fetched_bytes_total)" $MB "peer bytes"
dead=$(free_port)
out=$(wcl W6 f.bin replicate 2 "127.0.0.1:$dead")
assert_contains "$out" "from_peer=0 code=0"
assert_eq "$(metric W6 cistern_worker_store_reads_total)" 1 "fell back to the store"
reads0=$(metric W6 cistern_worker_store_reads_total)
wcl W6 f.bin read 3 0 0 | cmp - <(expect f.bin $((3 * MB)) $MB) || fail "replica differs"
wcl W6 f.bin read 2 0 0 | cmp - <(expect f.bin $((2 * MB)) $MB) || fail "fallback copy differs"
# A copy asked pinned is pinned once cached: reads of more blocks than a
# small cache holds evict everything else, not it.
start_worker W7 --cache-dir "$CIS_TMP/c7:3M"
out=$(wcl W7 f.bin replicate 4 "127.0.0.1:$W1_RPC" pin)
assert_contains "$out" "from_peer=1 code=0"
for b in 0 1 2 3 0 1 2 3; do wcl W7 f.bin read $b 0 0 >/dev/null; done
r7=$(metric W7 cistern_worker_store_reads_total)
wcl W7 f.bin read 4 0 0 | cmp - <(expect f.bin $((4 * MB)) $MB) || fail "pinned copy differs"
assert_eq "$(metric W7 cistern_worker_store_reads_total)" "$r7" "the copy asked pinned was evicted"
kill_pid "$W7_PID"
assert_eq "$(metric W6 cistern_worker_store_reads_total)" "$reads0" "replicas are cached"
kill_pid "$W6_PID"

# ---------------------------------------------------------------- warm restart
log "warm restart after kill -9"
wcl W1 f.bin cat >/dev/null
kill -9 "$W1_PID"
wait "$W1_PID" 2>/dev/null || true
touch "$CIS_TMP/c1/.tmp/leftover.1"
mkdir -p "$CIS_TMP/c1/ee"
echo junk >"$CIS_TMP/c1/ee/eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
gone_id=$(wcl W1 scan1 id 0)
rm "$CIS_TMP/c1/${gone_id:0:2}/$gone_id"
bad_id=$(wcl W1 f.bin id 4)
printf 'XXXXXXXX' | dd of="$CIS_TMP/c1/${bad_id:0:2}/$bad_id" bs=1 seek=4096 conv=notrunc 2>/dev/null
start_worker W1 --cache-dir "$CIS_TMP/c1:64M"
[ -e "$CIS_TMP/c1/.tmp/leftover.1" ] && fail "temporary file survived the restart"
[ -e "$CIS_TMP/c1/ee/eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee" ] && fail "unknown file survived"
assert_contains "$(cat "$CIS_TMP/W1.log")" "dropped index entries without a good block file"
wcl W1 f.bin cat >"$CIS_TMP/out"
cmp "$CIS_TMP/out" "$DATA/f.bin" || fail "file after restart differs"
assert_eq "$(metric W1 cistern_worker_store_reads_total)" 1 "only the corrupted block is fetched again"
assert_eq "$(metric W1 cistern_worker_checksum_failures_total)" 1 "corruption detected on first read"
wcl W1 scan1 read 0 0 0 | cmp - "$DATA/scan1" || fail "dropped entry re-fetched"
assert_eq "$(metric W1 cistern_worker_store_reads_total)" 2 "missing file fetched again"

log "scrubber finds a corrupted block"
kill_pid "$W1_PID"
start_worker W1 --cache-dir "$CIS_TMP/c1:64M" --scrub-interval 200ms --scrub-pause 1ms
wait_for 20 bash -c "[ \$(curl -fsS http://127.0.0.1:$W1_HTTP/metrics | awk '\$1==\"cistern_worker_scrubbed_blocks_total\"{print \$2}') -ge 10 ]"
bad_id=$(wcl W1 f.bin id 0)
printf 'XXXXXXXX' | dd of="$CIS_TMP/c1/${bad_id:0:2}/$bad_id" bs=1 seek=10 conv=notrunc 2>/dev/null
wait_for 20 bash -c "[ \$(curl -fsS http://127.0.0.1:$W1_HTTP/metrics | awk '\$1==\"cistern_worker_checksum_failures_total\"{print \$2}') = 1 ]"
wcl W1 f.bin read 0 0 0 | cmp - <(expect f.bin 0 $MB) || fail "scrubbed block served corrupted"
kill_pid "$W1_PID"

log "a scrubber told not to pause does not spin"
mkdir -p "$CIS_TMP/c-empty"
start_worker WS --cache-dir "$CIS_TMP/c-empty:8M" --scrub-interval 0 --scrub-pause 0
cpu0=$(awk '{print $14 + $15}' "/proc/$WS_PID/stat")
sleep 2
cpu=$(($(awk '{print $14 + $15}' "/proc/$WS_PID/stat") - cpu0))
# Clock ticks (100 a second): spinning, it took some 50 in 2 s; idle, 1.
[ "$cpu" -lt 20 ] || fail "an idle worker with --scrub-interval 0 used $cpu ticks of CPU in 2 s"
kill_pid "$WS_PID"

# ---------------------------------------------------------------- eviction
log "eviction keeps usage under the high watermark; pins and leases hold"
start_worker W2 --cache-dir "$CIS_TMP/c2:8M" --high-watermark 0.9 --low-watermark 0.7
high=$((8 * MB * 9 / 10))
wcl W2 f.bin read 0 0 0 >/dev/null
out=$(wcl W2 f.bin pin 0)
assert_contains "$out" "changed 1"
# The hot set: read again after a pause (uses within WRK_REUSE_MS, 2 s, are
# one), so it sits in the protected segment.
wcl W2 hot cat >/dev/null
sleep 2.5
wcl W2 hot cat >/dev/null
wcl W2 f.bin hold 1 60000 >"$CIS_TMP/hold.out" 2>/dev/null &
HOLD=$! # the subshell running wcl; its worker_client is its child
cis_on_exit "pkill -P $HOLD; kill $HOLD"
wait_for 10 grep -q held "$CIS_TMP/hold.out"
# Each scan block is read in two requests, as a client reading in pieces
# does: one pass, one use (each hit promoted a block, and the scan flushed
# the hot set).
for i in $(seq 0 24); do
	{
		wcl W2 "scan$i" read 0 0 $((MB / 2))
		wcl W2 "scan$i" read 0 $((MB / 2)) 0
	} | cmp - "$DATA/scan$i" || fail "scan$i differs"
	used=$(wcl W2 f.bin stat | awk 'NR==1 {print $2}')
	[ "$used" -le "$high" ] || fail "usage $used over the high watermark $high"
done
[ "$(metric W2 cistern_worker_evictions_total)" -gt 10 ] || fail "nothing was evicted"
reads0=$(metric W2 cistern_worker_store_reads_total)
wcl W2 f.bin read 0 0 0 | cmp - <(expect f.bin 0 $MB) || fail "pinned block differs"
wcl W2 f.bin read 1 0 0 | cmp - <(expect f.bin $MB $MB) || fail "leased block differs"
wcl W2 hot cat | cmp - "$DATA/hot" || fail "hot set differs"
assert_eq "$(metric W2 cistern_worker_store_reads_total)" "$reads0" \
	"pinned, leased and hot blocks survived a scan larger than the cache"
# A pinned block whose file goes bad is fetched again by its next reader
# and must stay pinned: it came back unpinned, and the next scan evicted it.
id=$(wcl W2 f.bin id 0)
rm "$CIS_TMP/c2/${id:0:2}/$id"
wcl W2 f.bin read 0 0 0 | cmp - <(expect f.bin 0 $MB) || fail "pinned block after its file went"
for i in $(seq 0 24); do wcl W2 "scan$i" read 0 0 0 >/dev/null; done
reads0=$(metric W2 cistern_worker_store_reads_total)
wcl W2 f.bin read 0 0 0 | cmp - <(expect f.bin 0 $MB) || fail "repaired pinned block differs"
assert_eq "$(metric W2 cistern_worker_store_reads_total)" "$reads0" \
	"a pinned block fetched again after its file went survived a scan"
pkill -P "$HOLD" 2>/dev/null || true
kill "$HOLD" 2>/dev/null || true
out=$(wcl W2 f.bin unpin 0)
assert_contains "$out" "changed 1"
kill_pid "$W2_PID"

# ---------------------------------------------------------------- disk faults
log "full disk (ENOSPC): served from the store uncached"
mkdir -p "$CIS_TMP/small" "$CIS_TMP/ro"
mount -t tmpfs -o size=1500k tmpfs "$CIS_TMP/small" || fail "cannot mount a tmpfs (root needed)"
cis_on_exit "umount -l $CIS_TMP/small"
start_worker W3 --cache-dir "$CIS_TMP/small:64M"
wcl W3 f.bin read 0 0 0 | cmp - <(expect f.bin 0 $MB) || fail "first block"
for b in 1 2 3; do
	wcl W3 f.bin read $b 0 0 | cmp - <(expect f.bin $((b * MB)) $MB) || fail "block $b on a full disk"
done
[ "$(metric W3 cistern_worker_disk_errors_total)" -ge 1 ] || fail "ENOSPC not counted"
[ "$(metric W3 cistern_worker_direct_reads_total)" -ge 1 ] || fail "no uncached read"
# The dir shrank to what the file system holds and goes on caching there.
reads0=$(metric W3 cistern_worker_store_reads_total)
wcl W3 f.bin read 3 0 0 | cmp - <(expect f.bin $((3 * MB)) $MB) || fail "block 3 again"
assert_eq "$(metric W3 cistern_worker_store_reads_total)" "$reads0" "block cached after ENOSPC"
used=$(wcl W3 f.bin stat | awk 'NR==1 {print $2}')
[ "$used" -le $((1500 * 1024)) ] || fail "used $used over the tmpfs size"
wcl W3 f.bin read 0 0 0 | cmp - <(expect f.bin 0 $MB) || fail "block 0 after ENOSPC"
# A span that runs out of room midway: what it got is kept, the block it
# failed in is refused, the rest are fetched alone; every block still reads.
head -c $((4 * MB)) /dev/urandom >"$DATA/full.bin"
rc=0
out=$(timeout 60 "$WC" --tcp "127.0.0.1:$W3_RPC" --uri "file://$DATA" --key full.bin --mount-id 1 \
	--block-size 1M load 0 1 2 3) || rc=$?
# 0: all cached; 2: some refused with their error (the disk is full).
[ "$rc" = 0 ] || [ "$rc" = 2 ] || fail "a load onto a full disk: exit $rc: $out"
assert_eq "$(grep -c "code=" <<<"$out")" 4 "results of a load onto a full disk: $out"
for b in 0 1 2 3; do
	wcl W3 full.bin read $b 0 0 | cmp - <(expect full.bin $((b * MB)) $MB) || fail "full.bin block $b"
done
n=$(grep -c "cache dir failed" "$CIS_TMP/W3.log" || true)
[ "$n" -le 2 ] || fail "ENOSPC logged $n times"
if wcl W3 f.bin local 3 >/dev/null 2>"$CIS_TMP/err"; then :; else
	assert_contains "$(cat "$CIS_TMP/err")" "cache"
fi
kill_pid "$W3_PID"

log "no inode left for a block's subdirectory: a full disk, not a vanished dir"
# A tmpfs of 5 inodes: its root, .tmp, then per block a temporary file and,
# at commit, the subdirectory named for the id's first two hex digits. The
# second block's subdirectory finds no inode left (ENOSPC): the dir is full
# and shrinks to what it holds. The failed mkdir was reported as the
# rename's ENOENT, and the dir taken for gone: caching there paused.
mkdir -p "$CIS_TMP/inodes"
mount -t tmpfs -o size=16m,nr_inodes=5 tmpfs "$CIS_TMP/inodes" || fail "cannot mount a tmpfs"
cis_on_exit "umount -l $CIS_TMP/inodes"
start_worker W8 --cache-dir "$CIS_TMP/inodes:8M"
blocks=() seen=""
for b in 0 1 2 3 4 5; do # two blocks whose ids start with other hex pairs
	id=$(wcl W8 f.bin id $b)
	case "$seen" in *"${id:0:2}"*) continue ;; esac
	seen="$seen ${id:0:2}"
	blocks+=("$b")
done
assert_contains "$(wcl W8 f.bin load "${blocks[0]}")" "code=0"
out=$(wcl W8 f.bin load "${blocks[1]}" 2>&1) || true
assert_contains "$out" "No space left" "a load that found no inode for its subdirectory"
b=${blocks[1]}
wcl W8 f.bin read "$b" 0 0 | cmp - <(expect f.bin $((b * MB)) $MB) || fail "block $b, no inode left"
assert_not_contains "$(cat "$CIS_TMP/W8.log")" "No such file" "ENOSPC taken for a vanished dir"
kill_pid "$W8_PID"

log "read-only cache dir"
mkdir -p "$CIS_TMP/ro"
start_worker W4 --cache-dir "$CIS_TMP/ro:64M"
wcl W4 f.bin read 0 0 0 >/dev/null
mount --bind "$CIS_TMP/ro" "$CIS_TMP/ro"
cis_on_exit "umount -l $CIS_TMP/ro"
mount -o remount,ro,bind "$CIS_TMP/ro"
wcl W4 f.bin read 0 0 0 | cmp - <(expect f.bin 0 $MB) || fail "cached block on a ro dir"
wcl W4 f.bin read 1 0 0 | cmp - <(expect f.bin $MB $MB) || fail "new block on a ro dir"
wcl W4 f.bin read 2 5 100 | cmp - <(expect f.bin $((2 * MB + 5)) 100) || fail "range on a ro dir"
[ "$(metric W4 cistern_worker_direct_reads_total)" -ge 2 ] || fail "ro dir: no uncached reads"
out=$(wcl W4 f.bin stat)
assert_contains "$out" " 0 " # writable 0
# A block freed while its dir is read-only: its file cannot go, so its
# bytes stay counted until the dir is writable again (it was forgotten,
# and the worker filled the dir over it).
out=$(wcl W4 f.bin free 0)
assert_contains "$out" "freed 1"
assert_eq "$("$WC" --tcp 127.0.0.1:$W4_RPC stat | awk 'NR==1 {print $2, $4}')" "$MB 0" \
	"used bytes and blocks after a free on a read-only dir"
umount "$CIS_TMP/ro"
wait_for 10 bash -c "'$WC' --tcp 127.0.0.1:$W4_RPC stat | awk 'NR==1 {exit \$5 != 1}'"
assert_eq "$("$WC" --tcp 127.0.0.1:$W4_RPC stat | awk 'NR==1 {print $2, $4}')" "0 0" \
	"used bytes and blocks once the dir is writable again"
assert_eq "$(find "$CIS_TMP/ro" -path "$CIS_TMP/ro/.tmp" -prune -o -type f -print)" "" \
	"files left in the dir once writable again"
kill_pid "$W4_PID"

# Started on a dir the kernel has made read-only (its disk failing): the
# worker starts and serves what the dir holds, caching nothing there.
log "a worker started on a read-only cache dir serves its blocks"
mkdir -p "$CIS_TMP/ro3"
start_worker W9 --cache-dir "$CIS_TMP/ro3:64M"
wcl W9 f.bin read 0 0 0 >/dev/null
kill_pid "$W9_PID"
mount --bind "$CIS_TMP/ro3" "$CIS_TMP/ro3"
cis_on_exit "umount -l $CIS_TMP/ro3"
mount -o remount,ro,bind "$CIS_TMP/ro3"
start_worker W9 --cache-dir "$CIS_TMP/ro3:64M"
reads0=$(metric W9 cistern_worker_store_reads_total)
wcl W9 f.bin read 0 0 0 | cmp - <(expect f.bin 0 $MB) || fail "block 0 of the read-only dir"
assert_eq "$(metric W9 cistern_worker_store_reads_total)" "$reads0" "block 0 came from the store"
kill_pid "$W9_PID"
umount "$CIS_TMP/ro3"

log "a full cache dir that turns read-only: eviction leaves its blocks served"
mkdir -p "$CIS_TMP/ro2"
start_worker W7 --cache-dir "$CIS_TMP/ro2:4M" --high-watermark 0.9 --low-watermark 0.5
for b in 0 1 2; do wcl W7 f.bin read $b 0 0 >/dev/null; done
mount --bind "$CIS_TMP/ro2" "$CIS_TMP/ro2"
cis_on_exit "umount -l $CIS_TMP/ro2"
mount -o remount,ro,bind "$CIS_TMP/ro2"
# Block 3 needs room: the first eviction finds the file cannot go (the
# rest of the dir was forgotten, and its files deleted once writable).
wcl W7 f.bin read 3 0 0 | cmp - <(expect f.bin $((3 * MB)) $MB) || fail "block 3, dir turned ro"
assert_eq "$("$WC" --tcp 127.0.0.1:$W7_RPC stat | awk 'NR==1 {print $2, $4, $5}')" \
	"$((3 * MB)) 3 0" "used, blocks and writable of a full dir that turned read-only"
reads0=$(metric W7 cistern_worker_store_reads_total)
for b in 0 1 2; do
	wcl W7 f.bin read $b 0 0 | cmp - <(expect f.bin $((b * MB)) $MB) || fail "block $b, dir ro"
done
assert_eq "$(metric W7 cistern_worker_store_reads_total)" "$reads0" "cached blocks of the ro dir"
umount "$CIS_TMP/ro2"
kill_pid "$W7_PID"

log "a cache dir that vanishes"
start_worker W5 --cache-dir "$CIS_TMP/c5:64M"
for b in 0 3 4; do wcl W5 f.bin read $b 0 0 >/dev/null; done
rm -rf "$CIS_TMP/c5"
wcl W5 f.bin read 0 0 0 | cmp - <(expect f.bin 0 $MB) || fail "block of a vanished dir"
wcl W5 f.bin read 1 0 0 | cmp - <(expect f.bin $MB $MB) || fail "new block, vanished dir"
mkdir -p "$CIS_TMP/c5"
wait_for 10 bash -c "'$WC' --tcp 127.0.0.1:$W5_RPC stat | awk 'NR==1 {exit \$5 != 1}'"
# Blocks 3 and 4 went with the dir: not indexed, not counted as used (they
# stayed, as ghosts, until a read of each failed).
assert_eq "$("$WC" --tcp 127.0.0.1:$W5_RPC stat | awk 'NR==1 {print $2, $4}')" "0 0" \
	"used bytes and blocks of the dir that came back empty"
wcl W5 f.bin read 3 0 0 | cmp - <(expect f.bin $((3 * MB)) $MB) || fail "block 3 after the dir came back"
wcl W5 f.bin read 2 0 0 | cmp - <(expect f.bin $((2 * MB)) $MB) || fail "after the dir came back"
kill -0 "$W5_PID" || fail "worker died"
log "a cache dir emptied behind the worker"
# Its .tmp went too: the next fill takes the dir out of use, and the probe
# reconciles it (recreating .tmp and going on, the worker kept the blocks
# that went indexed, counted as used and reported to the master).
wcl W5 f.bin read 4 0 0 >/dev/null
rm -rf "$CIS_TMP/c5/"* "$CIS_TMP/c5/.tmp"
wcl W5 f.bin read 5 0 0 | cmp - <(expect f.bin $((5 * MB)) $MB) || fail "new block, emptied dir"
wait_for 10 bash -c "'$WC' --tcp 127.0.0.1:$W5_RPC stat | awk 'NR==1 {exit !(\$5 == 1 && \$4 == 0)}'" ||
	fail "the emptied dir's blocks are still indexed: $("$WC" --tcp 127.0.0.1:$W5_RPC stat | head -1)"
wcl W5 f.bin read 2 0 0 | cmp - <(expect f.bin $((2 * MB)) $MB) || fail "block 2 after the dir was emptied"
kill -0 "$W5_PID" || fail "worker died"
kill_pid "$W5_PID"

log "a prefetched cached block is read ahead whole on a disk with a small readahead window"
# The kernel reads at most the disk's readahead window per WILLNEED (the
# larger of read_ahead_kb and max_sectors_kb): on a loop disk set to 128
# KiB, a 1 MiB block asked for in one call came in an eighth.
if losetup -f >/dev/null 2>&1; then
	truncate -s 64M "$CIS_TMP/ra.img"
	mkfs.ext4 -q -F -b 4096 "$CIS_TMP/ra.img" || fail "mkfs.ext4 failed"
	ra_dev=$(losetup -f --show "$CIS_TMP/ra.img") || fail "losetup failed"
	cis_on_exit "losetup -d $ra_dev"
	q=/sys/block/$(basename "$ra_dev")/queue
	echo 128 >"$q/read_ahead_kb" && echo 128 >"$q/max_sectors_kb" ||
		fail "cannot set the loop disk's readahead window"
	mkdir -p "$CIS_TMP/ra"
	mount "$ra_dev" "$CIS_TMP/ra" || fail "mount of the loop device failed"
	cis_on_exit "umount -l $CIS_TMP/ra"
	start_worker W9 --cache-dir "$CIS_TMP/ra/c:16M"
	wcl W9 scan5 read 0 0 0 | cmp - "$DATA/scan5" || fail "block on the loop disk differs"
	id=$(wcl W9 scan5 id 0)
	bfile="$CIS_TMP/ra/c/${id:0:2}/$id"
	drop_bfile
	assert_contains "$(wcl W9 scan5 prefetch 0)" "queued 0"
	wait_for 10 bash -c "[ \$(fincore --bytes --noheadings --output RES '$bfile') = $MB ]"
	kill_pid "$W9_PID"
else
	skip "a small readahead window: no loop device on this machine"
fi

log "a cached block on a failing disk is fetched again"
# A cache dir on a loop device whose end is cut off once the blocks are
# cached: their files' reads fail with EIO, as on a disk going bad. The
# worker must not hand such a read to sendfile, which could only cut the
# reader's connection (again at every read): it drops the block and
# fetches it again.
if failing_disk "$CIS_TMP/disk"; then
	start_worker W8 --cache-dir "$CIS_TMP/disk/c:16M"
	wcl W8 f.bin cat | cmp - "$DATA/f.bin" || fail "file on the loop disk differs"
	# Every block in place (a reader has its bytes before its fill is
	# committed): the cut below must take them all.
	wait_for 10 bash -c "'$WC' --tcp 127.0.0.1:$W8_RPC stat | awk 'NR==1 {exit \$4 != 6}'"
	cut_disk $(for b in 0 1 2 3 4 5; do
		id=$(wcl W8 f.bin id $b)
		echo "$CIS_TMP/disk/c/${id:0:2}/$id"
	done)
	reads0=$(metric W8 cistern_worker_store_reads_total)
	for b in 1 4; do
		wcl W8 f.bin read $b 0 0 | cmp - <(expect f.bin $((b * MB)) $MB) ||
			fail "block $b on the failing disk not served"
	done
	[ "$(metric W8 cistern_worker_store_reads_total)" -ge $((reads0 + 2)) ] ||
		fail "blocks on the failing disk were not fetched again"
	assert_contains "$(cat "$CIS_TMP/W8.log")" "unreadable"
	kill -0 "$W8_PID" || fail "worker died"
	kill_pid "$W8_PID"
else
	skip "a failing cache disk: no loop device on this machine"
fi

log "a block index cut short"
# LMDB checks the header pages only: a page past the file's end was a
# SIGBUS at the first read of it, at every start (a loop under systemd).
ls "$CIS_TMP/W5.state/index.mdb" >/dev/null || fail "no index of W5 to cut"
truncate -s 8192 "$CIS_TMP/W5.state/index.mdb"
rc=0
"$WORKER" --master 127.0.0.1:1 --cache-dir "$CIS_TMP/c5:64M" --state-dir "$CIS_TMP/W5.state" \
	--rpc-port 0 --http-port 0 2>"$CIS_TMP/err" || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "a start on a cut index: exit status $rc (a signal?)"
assert_contains "$(cat "$CIS_TMP/err")" "cut short" "a start on a cut index"

log "bad flags"
if "$WORKER" --cache-dir "$CIS_TMP/x:lots" 2>"$CIS_TMP/err"; then fail "bad size accepted"; fi
assert_contains "$(cat "$CIS_TMP/err")" "bad size"
if "$WORKER" --cache-dir "$CIS_TMP/x:10000P" 2>"$CIS_TMP/err"; then fail "a 10000P dir accepted"; fi
assert_contains "$(cat "$CIS_TMP/err")" "over 1 EiB"
if "$WORKER" 2>"$CIS_TMP/err"; then fail "no cache dir accepted"; fi
assert_contains "$(cat "$CIS_TMP/err")" "cache-dir"
rc=0
timeout 20 "$WORKER" --cache-dir "$CIS_TMP/x:1M" --host "" 2>"$CIS_TMP/err" || rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "empty --host accepted (status $rc)"
assert_contains "$(cat "$CIS_TMP/err")" "--host: empty"

log "ok"
