# An S3 store for tests (sourced after common.sh): s3rver behind s3front,
# the front verifying every request's SigV4 signature with AWS's signer.
#   s3_start            start both on free loopback ports, wait until ready,
#                       export CIS_S3_ENDPOINT CIS_S3_ACCESS_KEY
#                       CIS_S3_SECRET_KEY CIS_S3_BUCKET CIS_S3_REGION, and
#                       S3_FRONT_PID S3RVER_PID S3RVER_PORT S3_FRONT_PORT
#   s3_kill_store       kill -9 s3rver (the front stays, answering 503)
#   s3_stats            the front's request counts (JSON)
#   s3_reset_stats
# Both processes are killed on exit. S3RVER_SILENT= (empty) shows s3rver's log
# in $CIS_TMP/s3rver.log, for debugging. S3RVER_DATA_DIR puts s3rver's objects
# elsewhere than $CIS_TMP/s3rver (the caller removes it).

S3_NODE_DIR="$CIS_SRC/tests/node"
S3_START_TIMEOUT=${S3_START_TIMEOUT:-30}

_s3_need() {
	command -v node >/dev/null || fail "node is not installed (scripts/install-deps.sh)"
	[ -f "$S3_NODE_DIR/node_modules/s3rver/bin/s3rver.js" ] ||
		fail "s3rver missing: run scripts/install-deps.sh (npm install in tests/node)"
}

s3_start() {
	_s3_need
	export CIS_S3_ACCESS_KEY=${CIS_S3_ACCESS_KEY:-CISTESTKEY}
	export CIS_S3_SECRET_KEY=${CIS_S3_SECRET_KEY:-cis-test-secret/With+Odd=Chars}
	export CIS_S3_BUCKET=${CIS_S3_BUCKET:-cistern-test}
	export CIS_S3_REGION=${CIS_S3_REGION:-us-east-1}
	local data="${S3RVER_DATA_DIR:-$CIS_TMP/s3rver}"
	mkdir -p "$data"

	S3RVER_PORT=$(free_port)
	# s3rver's continuation tokens are DES-encrypted; OpenSSL 3 keeps DES in
	# its legacy provider, without which every truncated listing is a 500.
	node --openssl-legacy-provider "$S3_NODE_DIR/node_modules/s3rver/bin/s3rver.js" -d "$data" -a 127.0.0.1 \
		-p "$S3RVER_PORT" ${S3RVER_SILENT---silent} --no-vhost-buckets \
		--configure-bucket "$CIS_S3_BUCKET" >"$CIS_TMP/s3rver.log" 2>&1 &
	S3RVER_PID=$!
	disown "$S3RVER_PID" # no "Killed" notices when a test kills it
	cis_on_exit "kill_pid $S3RVER_PID"
	wait_for "$S3_START_TIMEOUT" curl -sf -m 2 -o /dev/null "http://127.0.0.1:$S3RVER_PORT/$CIS_S3_BUCKET"

	S3_FRONT_PORT=$(free_port)
	node "$S3_NODE_DIR/s3front.js" --listen "127.0.0.1:$S3_FRONT_PORT" \
		--upstream "127.0.0.1:$S3RVER_PORT" \
		--key "$CIS_S3_ACCESS_KEY:$CIS_S3_SECRET_KEY" >"$CIS_TMP/s3front.log" 2>&1 &
	S3_FRONT_PID=$!
	disown "$S3_FRONT_PID"
	cis_on_exit "kill_pid $S3_FRONT_PID"
	wait_for "$S3_START_TIMEOUT" grep -q "s3front ready" "$CIS_TMP/s3front.log"
	kill -0 "$S3_FRONT_PID" 2>/dev/null || fail "s3front died: $(cat "$CIS_TMP/s3front.log")"

	export CIS_S3_ENDPOINT="http://127.0.0.1:$S3_FRONT_PORT"
	export S3RVER_PID S3RVER_PORT S3_FRONT_PID S3_FRONT_PORT
	log "s3: s3rver on $S3RVER_PORT (pid $S3RVER_PID), verifying front on $S3_FRONT_PORT (pid $S3_FRONT_PID)"
}

s3_kill_store() {
	kill -9 "$S3RVER_PID" 2>/dev/null || true
}

s3_stats() {
	curl -sf -m 5 "$CIS_S3_ENDPOINT/__front/stats"
}

s3_reset_stats() {
	curl -sf -m 5 -X POST "$CIS_S3_ENDPOINT/__front/reset" >/dev/null
}
