# Helpers for the integration tests (sourced). Gives every test:
#   CIS_TMP               a temporary directory, removed on exit
#   cis_on_exit CMD       run CMD on exit (last registered runs first)
#   free_port             print a free loopback TCP port
#   wait_for SECS CMD...  run CMD until it succeeds, or fail after SECS
#   fail MSG; assert_eq GOT WANT MSG; assert_contains HAYSTACK NEEDLE MSG;
#   assert_not_contains HAYSTACK NEEDLE MSG; log MSG
# Every wait is bounded; nothing here waits forever.
set -euo pipefail

: "${CIS_SRC:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}"
: "${CIS_BUILD:=$CIS_SRC/build}"
export CIS_SRC CIS_BUILD

CIS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/cis-test.XXXXXX")
export CIS_TMP
_cis_exit_cmds=()

cis_on_exit() {
	_cis_exit_cmds+=("$1")
}

_cis_run_exit() {
	local rc=$? i
	set +e
	for ((i = ${#_cis_exit_cmds[@]} - 1; i >= 0; i--)); do
		eval "${_cis_exit_cmds[$i]}" >/dev/null 2>&1
	done
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
