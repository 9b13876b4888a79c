#!/usr/bin/env bash
# The S3 test rig's front really verifies SigV4: requests signed with a
# wrong secret or an unknown key are refused with S3's error codes, and a
# known-good signer (s3fs, a real FUSE mount) works through it with not one
# request refused.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/s3.sh"

command -v s3fs >/dev/null || fail "s3fs is not installed (scripts/install-deps.sh)"
[ -e /dev/fuse ] || fail "/dev/fuse is missing"

s3_start
B=$CIS_S3_BUCKET
E=$CIS_S3_ENDPOINT

# curl's own SigV4 (7.75+) is an independent signer; 7.88 does not sort or
# fully encode the query, so the queries below are given canonical.
s3curl() {
	local user=$1
	shift
	curl -sS -m 20 --aws-sigv4 "aws:amz:$CIS_S3_REGION:s3" --user "$user" "$@"
}

# --- refusals ----------------------------------------------------------
printf 'seed bytes\n' >"$CIS_TMP/seed"
code=$(s3curl "$CIS_S3_ACCESS_KEY:$CIS_S3_SECRET_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
	-T "$CIS_TMP/seed" -o /dev/null -w '%{http_code}' "$E/$B/seed/hello.txt")
assert_eq "$code" 200 "signed PUT with the right secret"

out=$(s3curl "$CIS_S3_ACCESS_KEY:not-the-secret" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
	-w '\n%{http_code}' "$E/$B/seed/hello.txt")
assert_eq "${out##*$'\n'}" 403 "GET signed with a wrong secret"
assert_contains "$out" "<Code>SignatureDoesNotMatch</Code>" "wrong secret"
assert_not_contains "$out" "seed bytes" "wrong secret got the object"

out=$(s3curl "NOSUCHKEY:$CIS_S3_SECRET_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
	-w '\n%{http_code}' "$E/$B/seed/hello.txt")
assert_eq "${out##*$'\n'}" 403 "GET with an unknown access key"
assert_contains "$out" "<Code>InvalidAccessKeyId</Code>" "unknown key"

out=$(curl -sS -m 20 -w '\n%{http_code}' "$E/$B/seed/hello.txt")
assert_eq "${out##*$'\n'}" 403 "anonymous GET"
assert_contains "$out" "<Code>AccessDenied</Code>" "anonymous"

# A body that is not the one whose hash was signed is refused, and is not
# stored.
sum=$(printf 'other\n' | sha256sum | cut -d' ' -f1)
out=$(s3curl "$CIS_S3_ACCESS_KEY:$CIS_S3_SECRET_KEY" -H "x-amz-content-sha256: $sum" \
	-T "$CIS_TMP/seed" -w '\n%{http_code}' "$E/$B/seed/tampered")
assert_eq "${out##*$'\n'}" 400 "PUT with a wrong payload hash"
assert_contains "$out" "XAmzContentSHA256Mismatch" "wrong payload hash"
code=$(s3curl "$CIS_S3_ACCESS_KEY:$CIS_S3_SECRET_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
	-o /dev/null -w '%{http_code}' "$E/$B/seed/tampered")
assert_eq "$code" 404 "the tampered object was stored"

# The right secret still reads it (the refusals above were about the
# signature, nothing else).
out=$(s3curl "$CIS_S3_ACCESS_KEY:$CIS_S3_SECRET_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
	"$E/$B/seed/hello.txt")
assert_eq "$out" "seed bytes" "GET with the right secret"
log "front refuses bad signatures"

# --- s3fs, a known-good signer, through the front -------------------------
mnt="$CIS_TMP/mnt"
mkdir -p "$mnt"
printf '%s:%s\n' "$CIS_S3_ACCESS_KEY" "$CIS_S3_SECRET_KEY" >"$CIS_TMP/passwd"
chmod 600 "$CIS_TMP/passwd"
s3_reset_stats
cis_on_exit "umount -l '$mnt'"
timeout 30 s3fs "$B" "$mnt" -o "url=$E,use_path_request_style,passwd_file=$CIS_TMP/passwd" \
	-o "sigv4,endpoint=$CIS_S3_REGION,retries=2,connect_timeout=5,readwrite_timeout=20" \
	-o "dbglevel=warn,logfile=$CIS_TMP/s3fs.log" ||
	fail "s3fs mount failed: $(cat "$CIS_TMP/s3fs.log" 2>/dev/null)"
wait_for 20 mountpoint -q "$mnt"

assert_eq "$(timeout 20 ls "$mnt/seed")" "hello.txt" "s3fs listing"
assert_eq "$(timeout 20 cat "$mnt/seed/hello.txt")" "seed bytes" "s3fs read"
head -c 3000000 /dev/urandom >"$CIS_TMP/blob"
timeout 60 mkdir -p "$mnt/new dir"
timeout 60 cp "$CIS_TMP/blob" "$mnt/new dir/blob ü.bin"
timeout 60 sync
timeout 20 umount "$mnt" || fail "umount failed"

# What s3fs wrote is in the store, byte for byte (read back with curl).
s3curl "$CIS_S3_ACCESS_KEY:$CIS_S3_SECRET_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
	-o "$CIS_TMP/back" "$E/$B/new%20dir/blob%20%C3%BC.bin"
cmp -s "$CIS_TMP/blob" "$CIS_TMP/back" || fail "the object written by s3fs differs"

stats=$(s3_stats)
log "front stats during s3fs: $stats"
refused=$(jq -r .refused <<<"$stats")
gets=$(jq -r '.requests.GET // 0' <<<"$stats")
puts=$(jq -r '.requests.PUT // 0' <<<"$stats")
assert_eq "$refused" 0 "the front refused some of s3fs's requests (see $CIS_TMP/s3front.log)"
[ "$gets" -gt 0 ] && [ "$puts" -gt 0 ] || fail "s3fs made no GET or PUT through the front: $stats"

# s3fs with a wrong secret cannot use the bucket.
printf '%s:%s\n' "$CIS_S3_ACCESS_KEY" "wrong-secret" >"$CIS_TMP/passwd"
s3_reset_stats
if timeout 30 s3fs "$B" "$mnt" -o "url=$E,use_path_request_style,passwd_file=$CIS_TMP/passwd" \
	-o "sigv4,endpoint=$CIS_S3_REGION,retries=1,connect_timeout=5" \
	-o "dbglevel=warn,logfile=$CIS_TMP/s3fs-bad.log" 2>/dev/null; then
	if timeout 20 ls "$mnt/seed" >/dev/null 2>&1; then
		fail "s3fs with a wrong secret could list the bucket"
	fi
	umount -l "$mnt" 2>/dev/null || true
fi
refused=$(s3_stats | jq -r .refused)
[ "$refused" -gt 0 ] || fail "no request refused for s3fs with a wrong secret"
log "test_s3front: ok"
