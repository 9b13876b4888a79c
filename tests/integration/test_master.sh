#!/usr/bin/env bash
# cistern-master end to end, through the cistern CLI and the raw API/RPC
# ports: file:// and S3 (s3rver behind a SigV4-verifying front) mounts,
# nesting, lazy listing, a store directory holding a name over 255 bytes
# (a FUSE file system of tests/longname_fs), sync after changes in the store, concurrent
# listings (one store listing), bad input, credentials never shown,
# kill -9 persistence, listing new subdirectories ahead of a walk, and a
# full data directory.
source "$CIS_SRC/tests/integration/lib/common.sh"
source "$CIS_SRC/tests/integration/lib/master.sh"

MASTER=$CIS_BUILD/master/cistern-master
CLI=$CIS_BUILD/cli/cistern
[ -x "$MASTER" ] && [ -x "$CLI" ] || fail "build cistern-master and cistern first"

RPC=$(free_port)
HTTP=$(free_port)
DATA=$CIS_TMP/master
LOGF=$CIS_TMP/master.log
OUTS=$CIS_TMP/outputs.txt
export CISTERN_API=127.0.0.1:$HTTP
SECRET=""

# Listing ahead is off until its own section: the sections before count
# the store listings a client's request causes.
start_master() { # start_master [FLAGS...]
	master_up "$DATA" "$RPC" "$HTTP" --list-ahead "${LIST_AHEAD:-0}" "$@"
}

# Run the CLI, keep its output for the credentials check; echo stdout.
cli() {
	local out rc=0
	out=$("$CLI" "$@" 2>&1) || rc=$?
	printf '%s\n' "$out" >>"$OUTS"
	printf '%s\n' "$out"
	return $rc
}

metric() {
	curl -fsS "http://127.0.0.1:$HTTP/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}

start_master

# ---- the release: --version of every program, the build_info metric ----
for b in master/cistern-master worker/cistern-worker fuse/cistern-fuse cli/cistern; do
	out=$("$CIS_BUILD/$b" --version) || fail "$b --version failed"
	[[ "$out" =~ ^cistern(-master|-worker|-fuse)?\ [0-9]+\.[0-9]+\.[0-9]+$ ]] ||
		fail "$b --version: '$out'"
done
assert_eq "$(metric "cistern_build_info{program=\"cistern-master\",version=\"${out##* }\"}")" 1 \
	"the master's build_info metric"

# ---- file:// mounts, nested ----
ROOT=$CIS_TMP/root
mkdir -p "$ROOT/dir/sub" "$CIS_TMP/other"
echo hello >"$ROOT/a.txt"
echo world >"$ROOT/dir/b.txt"
echo inner >"$CIS_TMP/other/inner.txt"
cli mount / "file://$ROOT" --sync-interval 0 >/dev/null
cli mount /nested "file://$CIS_TMP/other" >/dev/null
out=$(cli mounts)
assert_contains "$out" "file://$ROOT"
assert_contains "$out" "/nested"
lists0=$(metric cistern_master_store_lists_total)
out=$(cli ls /)
assert_contains "$out" "a.txt"
assert_contains "$out" "dir/"
assert_contains "$out" "nested/"
out=$(cli ls -l /nested)
assert_contains "$out" "inner.txt"
lists1=$(metric cistern_master_store_lists_total)
# / was listed when /nested was mounted (to check nothing is shadowed);
# /nested is listed on its first ls.
assert_eq "$((lists1 - lists0))" 1 "lazy listing of /nested"
cli ls / >/dev/null
assert_eq "$(metric cistern_master_store_lists_total)" "$lists1" "listed directories come from LMDB"
out=$(cli stat /dir/b.txt)
assert_contains "$out" "key:      dir/b.txt"
out=$(cli ls -R --json /dir)
assert_contains "$out" '"name": "b.txt"'
# ls -R goes into a directory whose name is not UTF-8: the entry's path
# shows it with '?' and path_hex names it exactly (before, it could not be
# named back, and ls -R failed there).
mkdir -p "$ROOT/rec/$(printf 'bad\xff')" "$ROOT/rec/d" "$ROOT/rec/zz"
echo x >"$ROOT/rec/$(printf 'bad\xff')/inside.txt"
echo x >"$ROOT/rec/zz/last.txt"
cli sync / >/dev/null
rc=0
out=$(cli ls -R /rec) || rc=$?
assert_eq "$rc" 0 "ls -R into a directory not named in UTF-8"
assert_contains "$out" "inside.txt" "ls -R listed the directory not named in UTF-8"
assert_contains "$out" "last.txt" "ls -R listed the directories after it"
out=$(cli ls --json /rec)
assert_contains "$out" '"path_hex": "2f7265632f626164ff"' "the entry's exact path"
rm -rf "$ROOT/rec"
# A store directory holding a name of 600 bytes (FUSE takes up to 1,024;
# vfat 255 UTF-16 units, 765 bytes of UTF-8): the listing leaves that one
# out and says so (the file:// connector wrote every name into a buffer of
# 256 bytes: a heap overflow in the master).
LONGFS=$CIS_TMP/longfs
mkdir -p "$LONGFS"
"$CIS_BUILD/tests/longname_fs" "$LONGFS" >"$CIS_TMP/longname_fs.log" 2>&1 &
cis_on_exit "fusermount3 -u -z '$LONGFS' 2>/dev/null"
wait_for 10 test -e "$LONGFS/short.txt"
cli mount /longfs "file://$LONGFS" >/dev/null || fail "mount of a dir with a 600-byte name"
out=$(cli ls /longfs)
assert_contains "$out" "short.txt" "the listing of a dir with a 600-byte name"
grep -q "store entry left out" "$LOGF" || fail "the 600-byte name was left out unsaid"
cli unmount /longfs >/dev/null || fail "unmount /longfs"
fusermount3 -u "$LONGFS" || fail "fusermount3 -u $LONGFS"
# stat of a link shows the link; with a trailing slash, what it leads to.
ln -s dir "$ROOT/latest"
cli sync / >/dev/null
assert_contains "$(cli stat /latest)" "type:     link"
assert_contains "$(cli stat /latest/)" "type:     dir"
rm "$ROOT/latest"
cli sync / >/dev/null
if cli mount /dir "file://$CIS_TMP/other" >/dev/null; then fail "a mount shadowed /dir"; fi

# ---- concurrent listings of a new directory: one store listing ----
mkdir -p "$ROOT/many"
for i in $(seq 50); do echo $i >"$ROOT/many/f$i"; done
cli sync / >/dev/null
before=$(metric cistern_master_store_lists_total)
pids=()
for i in $(seq 8); do "$CLI" ls /many >"$CIS_TMP/ls.$i" 2>&1 & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a concurrent ls failed"; done
for i in $(seq 8); do assert_eq "$(wc -l <"$CIS_TMP/ls.$i")" 50 "ls $i saw every file"; done
assert_eq "$(($(metric cistern_master_store_lists_total) - before))" 1 "single flight"

# ---- a directory of several pages gains a file that sorts early ----
# The page cookie is the last entry's inode id, which need not grow from
# page to page: ls must take every page all the same.
mkdir -p "$ROOT/pages"
(cd "$ROOT/pages" && touch $(seq -f 'f%04g' 0 2000))
cli sync / >/dev/null
assert_eq "$(cli ls /pages | wc -l)" 2001 "ls of three pages"
touch "$ROOT/pages/f0998a"
cli sync /pages >/dev/null
out=$(cli ls /pages) || fail "ls after a file was added mid-way failed: $(printf '%s\n' "$out" | tail -1)"
assert_eq "$(printf '%s\n' "$out" | wc -l)" 2002 "ls took every page"
rm -rf "$ROOT/pages"
cli sync / >/dev/null

# ---- sync after add / overwrite / delete ----
ino=$(cli stat --json /a.txt | python3 -c 'import json,sys; print(json.load(sys.stdin)["inode"])')
echo "a longer hello" >"$ROOT/a.txt"
echo new >"$ROOT/new.txt"
rm "$ROOT/dir/b.txt"
out=$(cli ls /)
assert_not_contains "$out" "new.txt" "sync interval 0: nothing changes before a sync"
cli sync -R / >/dev/null
out=$(cli ls /)
assert_contains "$out" "new.txt"
out=$(cli stat --json /a.txt)
assert_contains "$out" '"size": 15'
assert_contains "$out" "\"inode\": $ino"
if cli stat /dir/b.txt >/dev/null; then fail "deleted object still listed"; fi
# A directory removed from the store, synced by its own path: gone (it
# stayed, empty, until its parent was listed again: never, here).
mkdir -p "$ROOT/gonedir"
echo x >"$ROOT/gonedir/x.txt"
cli sync / >/dev/null
cli ls /gonedir >/dev/null || fail "gonedir not listed"
rm -r "$ROOT/gonedir"
rc=0
out=$(cli sync /gonedir 2>&1) || rc=$?
[ "$rc" -ne 0 ] || fail "sync of a directory removed from the store succeeded: $out"
assert_contains "$out" "no longer in the store" "sync of a removed directory"
if cli ls / | grep -q gonedir; then fail "a directory removed from the store is still listed"; fi

# ---- S3 mount (credentials stored, never shown) ----
# The S3 part always runs: scripts/install-deps.sh installs s3rver, and a
# missing one is a broken setup, not a reason to pass.
[ -f "$CIS_SRC/tests/node/node_modules/s3rver/bin/s3rver.js" ] || fail "s3rver is not installed (run scripts/install-deps.sh)"
source "$CIS_SRC/tests/integration/lib/s3.sh"
s3_start
SECRET=$CIS_S3_SECRET_KEY
s3put() {
	curl -fsS --aws-sigv4 "aws:amz:$CIS_S3_REGION:s3" \
		--user "$CIS_S3_ACCESS_KEY:$CIS_S3_SECRET_KEY" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X PUT --data-binary "$2" \
		"$CIS_S3_ENDPOINT/$CIS_S3_BUCKET/$1" >/dev/null
}
s3del() {
	curl -fsS --aws-sigv4 "aws:amz:$CIS_S3_REGION:s3" \
		--user "$CIS_S3_ACCESS_KEY:$CIS_S3_SECRET_KEY" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X DELETE \
		"$CIS_S3_ENDPOINT/$CIS_S3_BUCKET/$1" >/dev/null
}
opts=(--option "endpoint=$CIS_S3_ENDPOINT" --option "region=$CIS_S3_REGION"
	--option path_style=true --option "access_key=$CIS_S3_ACCESS_KEY")
out=$(cli mount /s3 "s3://$CIS_S3_BUCKET/ds" "${opts[@]}" --option "secret_key=wrong$SECRET") &&
	fail "wrong credentials accepted"
assert_contains "$out" "cistern: mount /s3: "
assert_eq "$(printf '%s\n' "$out" | wc -l)" 1 "one-line error"
out=$(cli mount /s3 "s3://no-such-bucket-cis/ds" "${opts[@]}" --option "secret_key=$SECRET") &&
	fail "missing bucket accepted"
# --option-env: the secret from the environment, never on a command line
# (the Helm chart's mounts Job does this).
out=$(cli mount /s3 "s3://$CIS_S3_BUCKET/ds" "${opts[@]}" --option-env secret_key=CIS_NO_SUCH_VAR) &&
	fail "--option-env of a variable that is not set was accepted"
assert_contains "$out" "--option-env secret_key=CIS_NO_SUCH_VAR: no such environment variable"
CIS_SECRET_VAR=$SECRET cli mount /s3 "s3://$CIS_S3_BUCKET/ds" "${opts[@]}" \
	--option-env secret_key=CIS_SECRET_VAR --readonly --sync-interval 300 --block-size 1M >/dev/null ||
	fail "mount with --option-env failed"

# Objects go in after the mount: s3rver answers a truncated
# ListObjectsV2 (the connector's check uses max-keys=1) with a 500.
s3put ds/x/one.bin 1111
s3put ds/two.bin 22
cli sync /s3 >/dev/null
out=$(cli mounts)
assert_contains "$out" "secret_key=***"
out=$(cli ls -R /s3)
assert_contains "$out" "one.bin"
assert_contains "$out" "two.bin"
s3put ds/three.bin 333
s3del ds/two.bin
cli sync /s3 >/dev/null
out=$(cli ls /s3)
assert_contains "$out" "three.bin"
assert_not_contains "$out" "two.bin"
curl -fsS "http://127.0.0.1:$HTTP/api/v1/mounts" >>"$OUTS"
curl -fsS "http://127.0.0.1:$HTTP/api/v1/stat?path=/s3/three.bin" >>"$OUTS"
# An object and a prefix of one name (ds/dup, ds/dup/in.bin) are one entry,
# the directory, whichever way the listing's sort put the two; syncs keep
# it so and make no inodes that nothing reaches.
s3put ds/dup 9
s3put ds/dup/in.bin 55
inodes() { curl -fsS "http://127.0.0.1:$HTTP/api/v1/report" | python3 -c 'import json, sys; print(json.load(sys.stdin)["inodes"])'; }
for i in 1 2 3; do
	cli sync /s3 >/dev/null || fail "sync with an object and a prefix of one name"
	assert_eq "$(cli ls /s3 | grep -c '^dup/\?$')" 1 "entries named dup (sync $i)"
	assert_contains "$(cli ls /s3)" "dup/"
	assert_contains "$(cli ls /s3/dup)" "in.bin"
	[ "$i" = 1 ] && before=$(inodes)
done
assert_eq "$(inodes)" "$before" "inodes after syncing an object and a prefix of one name"

# A store whose continuation tokens go round in a cycle (T1, T2, T1, ...),
# and one (bucket f) whose tokens are always new (T1, T2, T3, ...): each
# listing fails with the cause instead of paging (and growing) for ever.
CYC_PORT=$(free_port)
python3 - "$CYC_PORT" >"$CIS_TMP/cyc.log" 2>&1 <<'PY' &
import http.server, sys, urllib.parse
class Cycle(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        tok = q.get("continuation-token", [""])[0]
        if self.path.startswith("/f"):
            nxt = "T%d" % (int(tok[1:] or 0) + 1)
        else:
            nxt = "T2" if tok == "T1" else "T1"
        body = ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name>'
                '<IsTruncated>true</IsTruncated><NextContinuationToken>%s'
                '</NextContinuationToken><Contents><Key>k%s</Key><Size>1</Size>'
                '<ETag>"e"</ETag><LastModified>2026-01-01T00:00:00.000Z</LastModified>'
                '</Contents></ListBucketResult>' % (nxt, tok)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Cycle).serve_forever()
PY
cis_on_exit "kill_pid $!"
wait_for 10 curl -sf -o /dev/null "http://127.0.0.1:$CYC_PORT/b"
# endless_listing_fails PATH BUCKET NEEDLE: BUCKET of that store, mounted
# at PATH, fails to list, saying NEEDLE.
endless_listing_fails() {
	cli mount "$1" "s3://$2" --option "endpoint=http://127.0.0.1:$CYC_PORT" \
		--option region=us-east-1 --option path_style=true --option access_key=AK \
		--option secret_key=SK >/dev/null || fail "mount of $1"
	out=$(timeout 60 "$CLI" ls "$1" 2>&1) && fail "the endless listing of $1 succeeded"
	assert_contains "$out" "$3"
	cli unmount "$1" >/dev/null || fail "unmount $1"
}
endless_listing_fails /cyc b "continuation tokens go round in a cycle"
kill "$MPID"
wait "$MPID" 2>/dev/null || true
start_master --list-max-entries 1000
endless_listing_fails /fresh f "holds over 1000 entries (the master's --list-max-entries)"
kill "$MPID"
wait "$MPID" 2>/dev/null || true
start_master

# ---- bad input ----
for p in "/a/../b" "/a//b" "relative" "/$(printf 'x%.0s' $(seq 300))"; do
	out=$(cli ls "$p") && fail "ls $p accepted"
	assert_eq "$(printf '%s\n' "$out" | wc -l)" 1 "one-line error for $p"
	assert_contains "$out" "cistern: ls "
done
out=$(cli mount /g gopher://x/y) && fail "unknown scheme accepted"
assert_contains "$out" "cistern: mount /g: "
out=$(cli ls /nope) && fail "missing path accepted"
assert_contains "$out" "no such file or directory"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -d '{bad json' "http://127.0.0.1:$HTTP/api/v1/mounts")
assert_eq "$code" 400 "malformed json"
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "http://127.0.0.1:$HTTP/api/v1/mounts")
assert_eq "$code" 405 "wrong method"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP/api/v1/stat?path=/a%00b")
assert_eq "$code" 400 "nul in path"
# Garbage and a truncated frame on the RPC port; the master keeps serving.
head -c 4096 /dev/urandom >"$CIS_TMP/junk"
python3 - "$RPC" "$CIS_TMP/junk" <<'PY'
import socket, sys
for payload in (open(sys.argv[2], 'rb').read(), bytes.fromhex('c157010000640000')):
    s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)
    try:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        s.recv(100)
    except OSError:
        pass
    s.close()
PY
cli ls / >/dev/null || fail "master stopped serving after garbage"
kill -0 "$MPID" || fail "master died"
[ "$(metric cistern_master_rpc_bad_frames_total)" -ge 1 ] || fail "garbage frame not counted"

# ---- kill -9 and restart: mounts and namespace intact ----
kill -9 "$MPID"
wait "$MPID" 2>/dev/null || true
start_master
out=$(cli mounts)
assert_contains "$out" "/nested"
out=$(cli stat --json /a.txt)
assert_contains "$out" "\"inode\": $ino"
cli unmount /nested >/dev/null
out=$(cli mounts)
assert_not_contains "$out" "/nested"
out=$(cli unmount /nested) && fail "unmounting twice succeeded"

# ---- listing ahead: a walk finds new subdirectories already listed ----
kill "$MPID"
wait "$MPID" 2>/dev/null || true
LIST_AHEAD=4 start_master
for d in a b c; do
	for e in x y; do
		mkdir -p "$ROOT/walk/$d/$e/deeper"
		echo "$d$e" >"$ROOT/walk/$d/$e/f.txt"
	done
done
before=$(metric cistern_master_store_lists_total)
ahead0=$(metric cistern_master_lists_ahead_total)
ahead() { echo $(($(metric cistern_master_lists_ahead_total) - ahead0)); }
# For wait_for, which runs its command again and again (a "$(...)" in its
# arguments would be worked out once, before the wait).
ahead_at_least() { [ "$(ahead)" -ge "$1" ]; }
lists_since_at_least() { [ "$(($(metric cistern_master_store_lists_total) - $1))" -ge "$2" ]; }
# Syncing / finds walk/ new: it (one level below the listing asked for)
# and its 3 subdirectories (two levels) are listed ahead; theirs, three
# levels below, are left for whoever asks.
cli sync / >/dev/null
wait_for 20 ahead_at_least 4
sleep 0.5
assert_eq "$(ahead)" 4 "listed ahead: two levels"
lists=$(metric cistern_master_store_lists_total)
assert_eq "$((lists - before))" 5 "/ and the 4 listed ahead"
assert_contains "$(cli ls /walk)" "a/"
assert_contains "$(cli ls /walk/c)" "y/"
assert_eq "$(metric cistern_master_store_lists_total)" "$lists" "a walk finds them listed"
# The walk goes on into the 6 directories below: listed when asked, each
# finds deeper/ new and lists it ahead (or the walk gets there first):
# either way every directory is listed once.
out=$(cli ls -R /walk)
assert_contains "$out" "f.txt"
wait_for 20 lists_since_at_least "$lists" 12
sleep 0.5
assert_eq "$(($(metric cistern_master_store_lists_total) - lists))" 12 "6 asked for, 6 deeper/"
assert_contains "$(cli stat /walk/b/y/f.txt)" "key:      walk/b/y/f.txt"

# ---- a full data directory ----
# A listing that does not fit is refused with the cause; nothing is lost,
# and the master goes on answering.
FULL=$CIS_TMP/full
mkdir -p "$FULL/data" "$FULL/src/big" "$FULL/src/small"
mount -t tmpfs -o size=3m tmpfs "$FULL/data" || fail "tmpfs for a full data dir"
cis_on_exit "umount -l '$FULL/data'"
python3 -c 'import sys
for i in range(50000): open("%s/f_%07d_with_a_longer_name" % (sys.argv[1], i), "w").close()' "$FULL/src/big"
touch "$FULL/src/small/one"
FHTTP=$(free_port)
"$MASTER" --data-dir "$FULL/data" --bind 127.0.0.1 --rpc-port "$(free_port)" --http-port "$FHTTP" \
	>>"$CIS_TMP/master-full.log" 2>&1 &
FPID=$!
cis_on_exit "kill -9 $FPID"
wait_for 20 curl -fsS "http://127.0.0.1:$FHTTP/healthz"
fcli() { CISTERN_API=127.0.0.1:$FHTTP "$CLI" "$@" 2>&1; }
fcli mount /small "file://$FULL/src/small" >/dev/null || fail "mount on the small data dir"
fcli mount /big "file://$FULL/src/big" >/dev/null || fail "mount on the small data dir (big)"
out=$(fcli ls /big) && fail "a listing larger than the data dir was stored"
assert_contains "$out" "No space left on device (the master's data directory is full)"
grep -q "the master's data directory is full" "$CIS_TMP/master-full.log" ||
	fail "no log line for the full data dir"
kill -0 "$FPID" || fail "the master died on a full data dir"
assert_eq "$(fcli ls /small)" "one" "a small listing on the full data dir"
assert_contains "$(fcli mounts)" "/big"
kill "$FPID"
# Started on a file system with no room left, the master and the worker
# refuse with the cause (they died of a SIGBUS writing LMDB's mapped lock
# file).
head -c 4M /dev/zero >"$FULL/data/filler" 2>/dev/null || true # until it is full
rc=0
out=$(timeout 20 "$MASTER" --data-dir "$FULL/data/m2" --bind 127.0.0.1 --rpc-port "$(free_port)" \
	--http-port "$(free_port)" 2>&1) || rc=$?
assert_eq "$rc" 1 "exit status of a master started on a full disk"
assert_contains "$out" "lock.mdb: No space left on device"
mkdir -p "$CIS_TMP/wcache"
rc=0
out=$(timeout 20 "$CIS_BUILD/worker/cistern-worker" --master "127.0.0.1:$RPC" \
	--state-dir "$FULL/data/w" --cache-dir "$CIS_TMP/wcache:64M" --rpc-port "$(free_port)" \
	--http-port "$(free_port)" --socket "$CIS_TMP/w.sock" 2>&1) || rc=$?
assert_eq "$rc" 1 "exit status of a worker started on a full disk"
assert_contains "$out" "index.mdb-lock: No space left on device"

# ---- heartbeat flags that would lose live workers ----
for flags in "--heartbeat-interval 10s" "--heartbeat-interval 0" \
	"--heartbeat-interval 2s --worker-timeout 3s" "--heartbeat-interval 11s --worker-timeout 1m"; do
	rc=0
	out=$(timeout 20 "$MASTER" --data-dir "$CIS_TMP/hb-data" $flags 2>&1) || rc=$?
	assert_eq "$rc" 1 "master $flags: exit status ($out)"
	assert_contains "$out" "--heartbeat-interval" "master $flags"
done

# ---- credentials never shown ----
if [ -n "$SECRET" ]; then
	assert_not_contains "$(cat "$OUTS")" "$SECRET" "secret in CLI or API output"
	assert_not_contains "$(cat "$LOGF")" "$SECRET" "secret in the master log"
fi
kill "$MPID"
wait "$MPID" 2>/dev/null || true
log "test_master: ok"
