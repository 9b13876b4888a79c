#!/usr/bin/env bash
# The connector conformance suite (ufs_conformance, one Criterion program)
# run against both backends: a file:// directory, and S3 (s3rver behind the
# SigV4-verifying front). Then the S3 failure checks: a wrong secret gives
# a clear 403, and the store killed -9 mid-read gives a correct read or a
# clear error, never wrong bytes.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/s3.sh"

conf="$CIS_BUILD/tests/ufs_conformance"
[ -x "$conf" ] || fail "$conf not built (cmake --build $CIS_BUILD --target ufs_conformance)"
run_conf() {
	# Criterion's own per-test timeouts bound each test; this bounds the run.
	timeout 300 "$conf" --jobs "${CIS_TEST_JOBS:-2}" "$@" || fail "ufs_conformance $* failed"
}

# --- POSIX -------------------------------------------------------------
mkdir -p "$CIS_TMP/root"
log "conformance: file://$CIS_TMP/root"
CIS_TEST_UFS_URI="file://$CIS_TMP/root" run_conf

# --- S3 ----------------------------------------------------------------
s3_start
export CIS_S3_PATH_STYLE=true
export CIS_TEST_UFS_URI="s3://$CIS_S3_BUCKET/conformance"
# s3rver lists by reading every key's metadata file, so 10,000 keys (ten
# pages) take about a minute here; the connector retries its rare 500s.
export CIS_TEST_UFS_LIST_N=${CIS_TEST_UFS_LIST_N_S3:-10000}
log "conformance: $CIS_TEST_UFS_URI via $CIS_S3_ENDPOINT"
s3_reset_stats
run_conf
stats=$(s3_stats)
log "front stats: $stats"
# Everything the connector sent verified, except the wrong-secret test's.
refused=$(jq -r .refused <<<"$stats")
[ "$refused" -ge 1 ] || fail "the wrong-secret test made no refused request: $stats"
[ "$refused" -le 20 ] || fail "the front refused $refused requests (see $CIS_TMP/s3front.log)"

# Killed mid-read: must run last, it leaves no store behind.
log "conformance: s3rver killed -9 mid-read"
CIS_TEST_UFS_KILL_CMD="kill -9 $S3RVER_PID" run_conf --filter 'faults/*' --verbose 2>&1 |
	tee "$CIS_TMP/kill.log" >&2
grep -q "Tested: 1 | Passing: 1 | Failing: 0 | Crashing: 0" "$CIS_TMP/kill.log" ||
	fail "the killed-store test did not pass"
! kill -0 "$S3RVER_PID" 2>/dev/null || fail "s3rver was not killed"
log "test_ufs_conformance: ok"
