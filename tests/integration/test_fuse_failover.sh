#!/usr/bin/env bash
# cistern-fuse when things go wrong or change:
#  - a worker killed with kill -9 in the middle of a read of a large file:
#    the read completes with the right bytes, over TCP (the other worker)
#    and short-circuit (the store, once no worker is left);
#  - an object overwritten in the store: after `cistern sync` the mount shows
#    the new size and content, and no read ever sees a mix of versions;
#    without a sync, a read that finds the object changed fails (ESTALE) and
#    the next open sees the new version (the master asks the store); a load
#    that finds it changed fails that file and the next load takes it; a
#    file still open on the old version puts no old bytes in the page cache
#    a newer open reads;
#  - a block file truncated under the client's cached short-circuit
#    descriptor: the client asks the worker, which fetches the blocks
#    again, and the read returns the right bytes;
#  - fio read jobs with verification through the mount, on files fio wrote
#    into the store with its verify pattern;
#  - after changes in the store and a sync: a grown file read whole after
#    the kernel forgot its name, a file replaced by a directory seen as one,
#    test -x following the execute bits;
#  - the master killed: lookups fail with EIO (not ECONNREFUSED) while it is
#    away, and resolve again within about a second of its return;
#  - a client showing --root /data follows /data mounted again.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/fuse_lib.sh"
command -v fio >/dev/null || fail "fio is not installed"

start_master
start_worker a
start_worker b

SRC="$CIS_TMP/data"
mkdir -p "$SRC/fio"
# 16 extents of 16 MiB (placement is by extent): after the first, the
# reader meets blocks of both workers but with odds of 2^-15.
head -c $((256 << 20)) /dev/urandom >"$SRC/big.bin"
head -c $((3 << 20)) /dev/urandom >"$SRC/ow.bin"
head -c $((1 << 20)) /dev/urandom >"$SRC/gone.bin"
# fio writes its files with verification headers straight into the store.
FIO_JOB=(--name=cis --directory="$SRC/fio" --bs=64k --size=8m --nrfiles=2 --numjobs=2
	--verify=crc32c)
fio "${FIO_JOB[@]}" --rw=write --do_verify=0 --verify_state_save=0 >"$CIS_TMP/fio-write.log" 2>&1 ||
	fail "fio write: $(tail -5 "$CIS_TMP/fio-write.log")"
"${CLI[@]}" mount /data "file://$SRC" --block-size 1M >/dev/null || fail "cistern mount /data"

MNT="$CIS_TMP/mnt"
mount_fuse "$MNT" --no-short-circuit --attr-timeout 1 --entry-timeout 1 --negative-timeout 1 \
	--worker-timeout 5000
wait_for 20 bash -c "[ \"\$(curl -sf http://127.0.0.1:$FHTTP/metrics | awk '\$1 == \"cistern_fuse_workers\" { print \$2 }')\" = 2 ]"
want=$(sha256sum <"$SRC/big.bin" | cut -d' ' -f1)

# --- kill -9 during a read, over TCP ------------------------------------------------
log "kill -9 a worker during a read (TCP)"
mkdir -p "$CIS_TMP/gate1"
$TREE gatedread "$MNT/data/big.bin" "$CIS_TMP/gate1" >"$CIS_TMP/read1.out" &
reader=$!
wait_for 60 test -e "$CIS_TMP/gate1/paused"
kill -9 "$WPID_b"
touch "$CIS_TMP/gate1/go"
wait "$reader" || fail "the read failed after a worker was killed"
assert_eq "$(cat "$CIS_TMP/read1.out")" "$want" "bytes read across a worker kill"
[ "$(metric cistern_fuse_failovers_total)" -gt 0 ] || fail "no failover counted"
assert_eq "$(metric cistern_fuse_store_errors_total)" 0 "store errors"
FHTTP_TCP=$FHTTP

# --- kill -9 during a short-circuit read: no worker left, the store serves ---------
log "kill -9 the last worker during a short-circuit read"
MNT2="$CIS_TMP/mnt2"
mount_fuse "$MNT2"
mkdir -p "$CIS_TMP/gate2"
$TREE gatedread "$MNT2/data/big.bin" "$CIS_TMP/gate2" >"$CIS_TMP/read2.out" &
reader=$!
wait_for 60 test -e "$CIS_TMP/gate2/paused"
kill -9 "$WPID_a"
touch "$CIS_TMP/gate2/go"
wait "$reader" || fail "the short-circuit read failed after the worker was killed"
assert_eq "$(cat "$CIS_TMP/read2.out")" "$want" "bytes read across the last worker's kill"
[ "$(metric 'cistern_fuse_block_reads_total{path="short_circuit"}')" -gt 0 ] ||
	fail "no short-circuit reads before the kill"
[ "$(metric 'cistern_fuse_block_reads_total{path="store"}')" -gt 0 ] ||
	fail "no store-direct reads after the kill"
# Every file still reads right with no worker at all.
cmp -s "$SRC/ow.bin" "$MNT2/data/ow.bin" || fail "store-direct read of ow.bin differs"
# Only a failing store fails a read: EIO, and the client's log says why.
stat "$MNT2/data/gone.bin" >/dev/null || fail "gone.bin not listed"
rm "$SRC/gone.bin"
err=$(cat "$MNT2/data/gone.bin" 2>&1 >/dev/null) && fail "a read of a vanished object succeeded"
assert_contains "$err" "Input/output error" "vanished object"
grep "read failed: the store failed" "$FLOG" | grep -q "gone.bin" ||
	fail "no log line saying why the read failed: $(tail -3 "$FLOG")"
unmount_fuse "$MNT2"
FHTTP=$FHTTP_TCP


# read_sum FILE: its sha256, or "stale" when the read failed with ESTALE.
read_sum() {
	local out
	if out=$(sha256sum <"$1" 2>&1); then
		echo "${out%% *}"
	elif [[ $out == *"Stale file handle"* ]]; then
		echo stale
	else
		echo "failed: $out"
	fi
}

# --- overwrite in the store ----------------------------------------------------------
start_worker c
log "overwrite an object in the store"
cmp -s "$SRC/ow.bin" "$MNT/data/ow.bin" || fail "ow.bin differs before the overwrite"
old_sum=$(sha256sum <"$SRC/ow.bin" | cut -d' ' -f1)
head -c $(((5 << 20) + 7)) /dev/urandom >"$CIS_TMP/ow.new"
new_sum=$(sha256sum <"$CIS_TMP/ow.new" | cut -d' ' -f1)
mv "$CIS_TMP/ow.new" "$SRC/ow.bin" # replaced whole, as an object is
"${CLI[@]}" sync /data >/dev/null || fail "cistern sync /data"
# Within the attribute timeout (1 s) an open may still use the old version:
# its bytes, or ESTALE where no cache holds them; never a mix.
for _ in $(seq 100); do
	got=$(read_sum "$MNT/data/ow.bin")
	[ "$got" = "$old_sum" ] || [ "$got" = "$new_sum" ] || [ "$got" = stale ] ||
		fail "a read saw a mix of versions"
	[ "$got" = "$new_sum" ] && break
	sleep 0.2
done
assert_eq "$got" "$new_sum" "content after sync"
assert_eq "$(stat -c %s "$MNT/data/ow.bin")" $(((5 << 20) + 7)) "size after sync"

# Same size, new bytes, new mtime: the page cache must not serve the old ones.
head -c $(((5 << 20) + 7)) /dev/urandom >"$CIS_TMP/ow.new"
touch -d '+1 minute' "$CIS_TMP/ow.new"
third_sum=$(sha256sum <"$CIS_TMP/ow.new" | cut -d' ' -f1)
mv "$CIS_TMP/ow.new" "$SRC/ow.bin"
"${CLI[@]}" sync /data >/dev/null || fail "cistern sync /data (second)"
for _ in $(seq 100); do
	got=$(read_sum "$MNT/data/ow.bin")
	[ "$got" = "$new_sum" ] || [ "$got" = "$third_sum" ] || [ "$got" = stale ] ||
		fail "a read saw a mix of versions (same size)"
	[ "$got" = "$third_sum" ] && break
	sleep 0.2
done
assert_eq "$got" "$third_sum" "content after a same-size overwrite"

# --- an open answered from the open cache after the object changed ---------------------
log "a cached open of a changed object: ESTALE once, then the next open sees the new version"
MNT4="$CIS_TMP/mnt4"
head -c $((3 << 20)) /dev/urandom >"$SRC/st.bin"
"${CLI[@]}" sync /data >/dev/null || fail "cistern sync /data (st.bin)"
mount_fuse "$MNT4" --no-short-circuit --attr-timeout 60 --entry-timeout 60
cmp "$SRC/st.bin" "$MNT4/data/st.bin" || fail "st.bin differs"
# No cache keeps the old bytes: the workers free them (once the master has
# given up the two killed above), the store replaces them.
wait_for 30 bash -c "${CLI[*]} report | grep -q '^workers: *1 live'"
"${CLI[@]}" free /data/st.bin >/dev/null || fail "cistern free /data/st.bin"
head -c $((3 << 20)) /dev/urandom >"$CIS_TMP/st.new"
touch -d '+3 minutes' "$CIS_TMP/st.new"
mv "$CIS_TMP/st.new" "$SRC/st.bin"
"${CLI[@]}" sync /data >/dev/null || fail "cistern sync /data (st.bin replaced)"
echo 1 >/proc/sys/vm/drop_caches
# The first open may still use the cached Open of the old version (60 s);
# its read then fails rather than mixing versions, and forgets the version.
if ! cmp -s "$SRC/st.bin" "$MNT4/data/st.bin"; then
	[ "$(metric cistern_fuse_stale_reads_total)" -gt 0 ] || fail "st.bin: wrong bytes, and no stale read counted"
fi
cmp "$SRC/st.bin" "$MNT4/data/st.bin" || fail "st.bin: the open after a stale read still saw the old version"
unmount_fuse "$MNT4"

# --- an object changed in the store while the master still holds the old version -------
log "an object changed with no sync: at most one ESTALE, then the open sees the new version"
head -c $((2 << 20)) /dev/urandom >"$SRC/ns.bin"
"${CLI[@]}" sync /data >/dev/null || fail "cistern sync /data (ns.bin)"
cmp "$SRC/ns.bin" "$MNT/data/ns.bin" || fail "ns.bin differs"
"${CLI[@]}" free /data/ns.bin >/dev/null || fail "cistern free /data/ns.bin"
head -c $(((2 << 20) + 11)) /dev/urandom >"$CIS_TMP/ns.new"
touch -d '+4 minutes' "$CIS_TMP/ns.new"
ns_sum=$(sha256sum <"$CIS_TMP/ns.new" | cut -d' ' -f1)
mv "$CIS_TMP/ns.new" "$SRC/ns.bin" # no sync: the master's listing is 5 minutes good
echo 1 >/proc/sys/vm/drop_caches
stats0=$(curl -sf "http://127.0.0.1:$MHTTP/metrics" | awk '$1 == "cistern_master_store_stats_total" { print $2 }')
got=$(read_sum "$MNT/data/ns.bin")
[ "$got" = "$ns_sum" ] || [ "$got" = stale ] || fail "ns.bin: a read of a changed object gave $got"
assert_eq "$(read_sum "$MNT/data/ns.bin")" "$ns_sum" "ns.bin: the open after the stale read"
assert_eq "$(stat -c %s "$MNT/data/ns.bin")" $(((2 << 20) + 11)) "ns.bin: size after the stale read"
"${CLI[@]}" stat /data/ns.bin | grep -q "($(((2 << 20) + 11)) bytes)" ||
	fail "the master did not keep the new version: $("${CLI[@]}" stat /data/ns.bin)"
stats1=$(curl -sf "http://127.0.0.1:$MHTTP/metrics" | awk '$1 == "cistern_master_store_stats_total" { print $2 }')
[ "$stats1" -gt "$stats0" ] || fail "the master asked no store about ns.bin ($stats0 -> $stats1)"
if [ "$got" = stale ]; then
	grep -q 'msg="read failed: the file changed in its store since it was opened".*ns.bin' \
		"$CIS_TMP/fuse-mnt.log" || fail "no log line saying ns.bin changed"
fi

# A load that finds the object changed since the walk listed it fails that
# file, says why, and the master takes the new version: a second load works.
"${CLI[@]}" free /data/ns.bin >/dev/null || fail "cistern free /data/ns.bin (second)"
head -c $(((2 << 20) + 22)) /dev/urandom >"$CIS_TMP/ns.new"
touch -d '+5 minutes' "$CIS_TMP/ns.new"
mv "$CIS_TMP/ns.new" "$SRC/ns.bin"
out=$("${CLI[@]}" load /data/ns.bin 2>&1) && fail "a load of a changed object succeeded: $out"
assert_contains "$out" "load it again" "load of a changed object"
"${CLI[@]}" stat /data/ns.bin | grep -q "($(((2 << 20) + 22)) bytes)" ||
	fail "the failed load left the old version: $("${CLI[@]}" stat /data/ns.bin)"
out=$("${CLI[@]}" load /data/ns.bin 2>&1) || fail "the second load of ns.bin failed: $out"
assert_contains "$out" "0 files failed" "second load of ns.bin"
# More copies asked than there are live workers (c alone): said, not failed.
out=$("${CLI[@]}" load /data/ns.bin --replicas 2 2>&1) || fail "load --replicas 2 failed: $out"
assert_contains "$out" "note: 2 replicas asked, 1 live worker" "load --replicas 2 with one worker"

# --- a file still open on the old version after a newer one was opened ------------------
log "an open of the old version reads no old bytes into the new version's page cache"
python3 -c "open('$SRC/ov.bin', 'wb').write(b'A' * (3 << 20))"
"${CLI[@]}" sync /data >/dev/null || fail "cistern sync /data (ov.bin)"
python3 - "$MNT/data/ov.bin" "$SRC/ov.bin" "${CLI[*]}" <<'PY' || fail "ov.bin: old bytes under a newer open"
import os, subprocess, sys, time
f, src, cli = sys.argv[1], sys.argv[2], sys.argv[3].split()
h1 = os.open(f, os.O_RDONLY)
assert os.pread(h1, 3 << 20, 0) == b'A' * (3 << 20), "first read"
open('/proc/sys/vm/drop_caches', 'w').write('1\n')
open(src + '.new', 'wb').write(b'B' * (4 << 20))
os.rename(src + '.new', src)
subprocess.run(cli + ['sync', '/data'], check=True, capture_output=True)
time.sleep(1.5)  # past the attribute timeout: the next open asks the master
h2 = os.open(f, os.O_RDONLY)
assert os.fstat(h2).st_size == 4 << 20, "size at the new open"
try:
    d = os.pread(h1, 2 << 20, 1 << 20)
    assert d == b'A' * (2 << 20), "the old open read neither its bytes nor ESTALE"
except OSError as e:
    assert e.errno == 116, e  # ESTALE
d = os.pread(h2, 4 << 20, 0)
assert d == b'B' * (4 << 20), "new open read %d bytes, %d of them old" % (len(d), d.count(b'A'))
PY

# --- a short-circuit block file that fails under the client ---------------------------
log "a block file truncated under a cached short-circuit descriptor: read again, not a short read"
head -c $((2 << 20)) /dev/urandom >"$SRC/sc.bin"
"${CLI[@]}" sync /data >/dev/null || fail "cistern sync /data (sc.bin)"
MNT3="$CIS_TMP/mnt3"
mount_fuse "$MNT3"
cmp "$SRC/sc.bin" "$MNT3/data/sc.bin" || fail "sc.bin differs"
echo 1 >/proc/sys/vm/drop_caches
cmp "$SRC/sc.bin" "$MNT3/data/sc.bin" || fail "sc.bin differs (short-circuit)"
[ "$(metric 'cistern_fuse_block_reads_total{path="short_circuit"}')" -gt 0 ] ||
	fail "sc.bin was not read through a short-circuit descriptor"
for i in 0 1; do
	id=$("$CIS_BUILD/tests/worker_client" --tcp "127.0.0.1:$WRPC_c" \
		--master "127.0.0.1:$MRPC" --path /data/sc.bin id $i)
	f="$CIS_TMP/w-c/cache/${id:0:2}/$id"
	[ -f "$f" ] || fail "block $i of sc.bin not on worker c"
	truncate -s 1000 "$f"
done
echo 1 >/proc/sys/vm/drop_caches
miss0=$(wmetric c cistern_worker_misses_total)
cmp "$SRC/sc.bin" "$MNT3/data/sc.bin" || fail "a truncated block file under a cached descriptor: wrong bytes"
# The client asked worker c for the bytes, which dropped both files and
# fetched the blocks again.
[ "$(wmetric c cistern_worker_misses_total)" -ge $((miss0 + 2)) ] ||
	fail "worker c did not fetch the truncated blocks again"
unmount_fuse "$MNT3"

# --- fio verification through the mount ------------------------------------------------
log "fio verify through the mount"
fio "${FIO_JOB[@]/#--directory=*/--directory=$MNT/data/fio}" --rw=randread --readonly \
	>"$CIS_TMP/fio-read.log" 2>&1 || fail "fio verify through the mount: $(tail -5 "$CIS_TMP/fio-read.log")"
grep -q "err= 0" "$CIS_TMP/fio-read.log" || fail "fio reported errors: $(cat "$CIS_TMP/fio-read.log")"
fio "${FIO_JOB[@]/#--directory=*/--directory=$MNT/data/fio}" --rw=read --readonly \
	>"$CIS_TMP/fio-read2.log" 2>&1 || fail "fio sequential verify: $(tail -5 "$CIS_TMP/fio-read2.log")"
# The check can fail: a file with one flipped byte in the store is caught.
printf 'X' | dd of="$SRC/fio/cis.0.0" bs=1 seek=70000 conv=notrunc status=none
touch -d '+2 minutes' "$SRC/fio/cis.0.0" # a new version, whatever the clock did
"${CLI[@]}" sync /data/fio >/dev/null || fail "cistern sync /data/fio"
wait_for 20 bash -c "[ \"\$(stat -c %Y '$SRC/fio/cis.0.0')\" = \"\$(stat -c %Y '$MNT/data/fio/cis.0.0')\" ]"
fio "${FIO_JOB[@]/#--directory=*/--directory=$MNT/data/fio}" --rw=read --readonly --numjobs=1 \
	>"$CIS_TMP/fio-bad.log" 2>&1 && fail "fio verified a corrupted file"
grep -q "verify failed" "$CIS_TMP/fio-bad.log" || fail "fio: no verify failure: $(tail -3 "$CIS_TMP/fio-bad.log")"

# --- metadata after a change ---------------------------------------------------------------
log "metadata: a grown file read whole after the kernel forgot it, a file turned directory, X_OK"
head -c 100 /dev/urandom >"$SRC/grow.bin"
printf '#!/bin/sh\necho ran\n' >"$SRC/run.sh"
cp "$SRC/run.sh" "$SRC/norun.sh"
chmod 0755 "$SRC/run.sh"
chmod 0644 "$SRC/norun.sh"
echo file >"$SRC/swap"
"${CLI[@]}" sync /data >/dev/null || fail "cistern sync /data (metadata)"
MNT5="$CIS_TMP/mnt5"
mount_fuse "$MNT5" --no-passthrough # names and attributes cached for 60 s; reads by the daemon
ls -l "$MNT5/data" >/dev/null
head -c 300000 /dev/urandom >"$SRC/grow.bin"
touch -d '+1 minute' "$SRC/grow.bin"
"${CLI[@]}" sync /data >/dev/null || fail "cistern sync /data (grown)"
cmp "$SRC/grow.bin" "$MNT5/data/grow.bin" || fail "the grown file, first read"
echo 2 >/proc/sys/vm/drop_caches # the kernel forgets the name; the client's cache keeps it
assert_eq "$(stat -c %s "$MNT5/data/grow.bin")" 300000 "the grown file's size, looked up again"
cmp "$SRC/grow.bin" "$MNT5/data/grow.bin" ||
	fail "the grown file read at its old size (the name cache's attributes)"
test -x "$MNT5/data/run.sh" || fail "access X_OK refused on a 0755 file"
test -x "$MNT5/data/norun.sh" && fail "access X_OK granted on a 0644 file"
assert_eq "$("$MNT5/data/run.sh")" ran "a script with an execute bit"
unmount_fuse "$MNT5"
MNT6="$CIS_TMP/mnt6"
mount_fuse "$MNT6" --attr-timeout 1
assert_eq "$(stat -c %F "$MNT6/data/swap")" "regular file" "swap before"
rm "$SRC/swap"
mkdir "$SRC/swap"
echo inside >"$SRC/swap/in.txt"
"${CLI[@]}" sync /data >/dev/null || fail "cistern sync /data (swap)"
sleep 1.5 # the kernel's attributes expire; its name does not
assert_eq "$(stat -c %F "$MNT6/data/swap" 2>&1)" "directory" "a file replaced by a directory"
assert_eq "$(cat "$MNT6/data/swap/in.txt")" inside "inside the new directory"
unmount_fuse "$MNT6"

# --- the master restarted ----------------------------------------------------------------
log "master away: lookups fail with EIO; back: names resolve again within about a second"
MNT4="$CIS_TMP/mnt4"
mount_fuse "$MNT4" --attr-timeout 0.2 --entry-timeout 0.2 --negative-timeout 0.2
cmp "$SRC/sc.bin" "$MNT4/data/sc.bin" || fail "sc.bin differs (before the master restart)"
kill -9 "$MPID"
# 3 s of lookups: the client's back-off reaches its cap.
for i in $(seq 30); do
	err=$(stat "$MNT4/data/new-$i" 2>&1) && fail "a lookup succeeded with the master away"
	sleep 0.1
done
assert_contains "$err" "Input/output error" "a lookup with the master away (ECONNREFUSED before)"
"$MASTER_BIN" --data-dir "$CIS_TMP/master" --rpc-port "$MRPC" --http-port "$MHTTP" \
	>>"$CIS_TMP/master.log" 2>&1 &
MPID=$!
disown "$MPID"
cis_on_exit "kill_pid $MPID"
wait_for 30 curl -sf -m 2 "http://127.0.0.1:$MHTTP/readyz"
back=$(date +%s%N)
wait_for 10 stat "$MNT4/data/ow.bin"
took=$((($(date +%s%N) - back) / 1000000))
# Back-off is capped at 1 s; 4 s leaves room for a loaded (sanitizer) run.
[ "$took" -le 4000 ] || fail "the first lookup through came ${took} ms after the master was ready"
cmp "$SRC/ow.bin" "$MNT4/data/ow.bin" || fail "ow.bin differs after the master restart"
unmount_fuse "$MNT4"

# --- the --root mounted again -------------------------------------------------------------
log "a client showing --root /data follows /data when it is mounted again"
MNT7="$CIS_TMP/mnt7"
mount_fuse "$MNT7" --root /data --attr-timeout 1 --entry-timeout 1 --negative-timeout 1
cmp "$SRC/ow.bin" "$MNT7/ow.bin" || fail "ow.bin through --root /data"
unmount_fuse "$MNT" # the first mount's files would hold the mount
"${CLI[@]}" unmount /data >/dev/null || fail "cistern unmount /data"
"${CLI[@]}" mount /data "file://$SRC" --block-size 1M >/dev/null || fail "cistern mount /data again"
# The old /data inode is gone: its listing was empty, its getattr ENOENT.
wait_for 15 bash -c "ls '$MNT7' | grep -qx ow.bin"
cmp "$SRC/ow.bin" "$MNT7/ow.bin" || fail "ow.bin through --root /data mounted again"
unmount_fuse "$MNT7"
log "ok"
