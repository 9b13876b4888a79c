# Helpers for the integration tests (sourced). Gives every test:
#   CIS_TMP               a temporary directory, removed on exit
#   cis_on_exit CMD       run CMD on exit (last registered runs first)
#   free_port             print a free loopback TCP port
#   wait_for SECS CMD...  run CMD until it succeeds, or fail after SECS
#   fail MSG; skip MSG; assert_eq GOT WANT MSG; assert_contains HAYSTACK NEEDLE MSG;
#   assert_not_contains HAYSTACK NEEDLE MSG; log MSG
# Every wait is bounded; nothing here waits forever.
set -euo pipefail

: "${CIS_SRC:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}"
: "${CIS_BUILD:=$CIS_SRC/build}"
export CIS_SRC CIS_BUILD

CIS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/cis-test.XXXXXX")
export CIS_TMP
_cis_exit_cmds=()

# Programs of the sanitizer build write their AddressSanitizer, LeakSanitizer
# and UBSan reports here (one file per process), and any report fails the
# test at exit: a daemon that aborts would otherwise only be failed over,
# and one that stops with a leak or an error at exit would go unnoticed.
mkdir -p "$CIS_TMP/sanitizer"
export ASAN_OPTIONS="log_path=$CIS_TMP/sanitizer/asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="log_path=$CIS_TMP/sanitizer/ubsan:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

cis_on_exit() {
	_cis_exit_cmds+=("$1")
}

_cis_run_exit() {
	local rc=$? i
	set +e
	for ((i = ${#_cis_exit_cmds[@]} - 1; i >= 0; i--)); do
		eval "${_cis_exit_cmds[$i]}" >/dev/null 2>&1
	done
	local reports
	reports=$(find "$CIS_TMP/sanitizer" -type f -size +0 2>/dev/null)
	if [ -n "$reports" ]; then
		printf 'FAIL: sanitizer reports:\n' >&2
		for f in $reports; do
			printf '==> %s\n' "$f" >&2
			head -c 20000 "$f" >&2
		done
		[ "$rc" = 0 ] && rc=1
	fi
	rm -rf "$CIS_TMP"
	exit $rc
}
trap _cis_run_exit EXIT
trap 'exit 130' INT TERM

log() {
	printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2
}

fail() {
	printf 'FAIL: %s\n' "$*" >&2
	exit 1
}

# skip MSG: a section this machine cannot run. Logged, and listed in
# $CIS_SKIP_LOG when set (`make test` prints that list at its end: a pass
# with sections skipped is not the same pass).
skip() {
	log "SKIPPED: $*"
	[ -z "${CIS_SKIP_LOG:-}" ] || printf '%s: %s\n' "$(basename "$0" .sh)" "$*" >>"$CIS_SKIP_LOG"
}

assert_eq() {
	[ "$1" = "$2" ] || fail "${3:-values differ}: got '$1', want '$2'"
}

assert_contains() {
	case "$1" in
	*"$2"*) ;;
	*) fail "${3:-missing text}: '$2' not in: $1" ;;
	esac
}

assert_not_contains() {
	case "$1" in
	*"$2"*) fail "${3:-unexpected text}: '$2' found in: $1" ;;
	*) ;;
	esac
}

# A loopback port nobody listens on now (the kernel picks it).
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_for SECS CMD...: retry CMD every 0.1 s for at most SECS seconds.
wait_for() {
	local secs=$1 deadline
	shift
	deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		[ $SECONDS -lt $deadline ] || fail "timed out after ${secs}s waiting for: $*"
		sleep 0.1
	done
}

# Kill a process we started (by pid), politely then firmly, bounded.
kill_pid() {
	local pid=$1 i
	kill "$pid" 2>/dev/null || return 0
	for i in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
}

# failing_disk DIR: a 64 MiB ext4 file system on a loop device, mounted
# at DIR, whose first 40 MiB a filler file takes, so that files written
# afterwards (and their data) lie after it while its metadata lies before;
# cut_disk then makes them unreadable. Sets DISK_IMG and DISK_DEV; returns
# 1 where no loop device can be had (the caller skips, saying so).
failing_disk() {
	losetup -f >/dev/null 2>&1 || return 1
	DISK_IMG=$CIS_TMP/disk.img
	truncate -s 64M "$DISK_IMG"
	mkfs.ext4 -q -F -O ^has_journal -b 4096 "$DISK_IMG" || fail "mkfs.ext4 failed"
	DISK_DEV=$(losetup -f --show "$DISK_IMG") || fail "losetup failed"
	cis_on_exit "losetup -d $DISK_DEV"
	mkdir -p "$1" || fail "mkdir $1 failed"
	mount "$DISK_DEV" "$1" || fail "mount of the loop device failed"
	cis_on_exit "umount -l $1"
	# (called in an if: set -e is off here, so every step says when it fails)
	fallocate -l 40M "$1/filler" || fail "fallocate on the loop disk failed"
}

# cut_disk FILE...: cut the failing disk's end off at the first data block
# of the FILEs, so that reading any of them fails with EIO (as on a disk
# going bad), and drop the page cache.
cut_disk() {
	local cut="" f out first
	sync
	# Every file's first block, each one checked: a file missing here
	# (not renamed into place yet) could lie before the cut and stay
	# readable.
	for f in "$@"; do
		out=$(filefrag -v "$f") || fail "filefrag $f failed"
		first=$(awk '$1 == "0:" { sub(/\.\./, "", $4); print $4 }' <<<"$out")
		[ -n "$first" ] || fail "$f: no first extent in: $out"
		if [ -z "$cut" ] || [ "$first" -lt "$cut" ]; then cut=$first; fi
	done
	[ "${cut:-0}" -gt $((40 * 256)) ] || fail "files not after the disk's filler (at block ${cut:-?})"
	truncate -s $((cut * 4096)) "$DISK_IMG"
	losetup -c "$DISK_DEV"
	echo 3 >/proc/sys/vm/drop_caches
}
