# Shared by the daemon benchmarks (worker.sh, fuse-warm.sh, preload.sh;
# sourced after lib.sh): a master and N workers on loopback over the plain
# s3rver store, and the S3 dataset mounted at /s3.
#   rig_master                start cistern-master (sets M_RPC, M_HTTP, CISTERN_API)
#   rig_worker NAME CACHE_MIB start a worker with its own cache dir and ports
#                             (sets NAME_RPC, NAME_HTTP, NAME_CACHE, NAME_STATE)
#   rig_mount PREFIX BLOCK    mount s3://bucket/PREFIX at /s3 and sync it
RIG_CLI=$CIS_BUILD/cli/cistern
RIG_WC=$CIS_BUILD/tests/worker_client

rig_master() {
	M_RPC=$(free_port)
	M_HTTP=$(free_port)
	"$CIS_BUILD/master/cistern-master" --data-dir "$CIS_TMP/master" --bind 127.0.0.1 \
		--rpc-port "$M_RPC" --http-port "$M_HTTP" --heartbeat-interval 1s \
		--log-level warn >>"$CIS_TMP/master.log" 2>&1 &
	local pid=$!
	cis_on_exit "kill_pid $pid"
	export CISTERN_API=127.0.0.1:$M_HTTP M_RPC M_HTTP
	wait_for 20 curl -fsS "http://127.0.0.1:$M_HTTP/healthz"
}

rig_worker() {
	local name=$1 mib=$2 rpc http
	rpc=$(free_port)
	http=$(free_port)
	mkdir -p "$CIS_TMP/$name.cache"
	"$CIS_BUILD/worker/cistern-worker" --master "127.0.0.1:$M_RPC" --bind 127.0.0.1 \
		--host 127.0.0.1 --rpc-port "$rpc" --http-port "$http" \
		--state-dir "$CIS_TMP/$name.state" --cache-dir "$CIS_TMP/$name.cache:${mib}M" \
		--log-level warn ${RIG_WORKER_ARGS:-} >>"$CIS_TMP/$name.log" 2>&1 &
	local pid=$!
	cis_on_exit "kill_pid $pid"
	eval "${name}_PID=$pid ${name}_RPC=$rpc ${name}_HTTP=$http"
	eval "${name}_CACHE=$CIS_TMP/$name.cache ${name}_STATE=$CIS_TMP/$name.state"
	wait_for 30 curl -fsS "http://127.0.0.1:$http/readyz"
}

rig_mount() {
	"$RIG_CLI" mount /s3 "s3://$CIS_S3_BUCKET/$1" --option "endpoint=$PLAIN_ENDPOINT" \
		--option "region=$CIS_S3_REGION" --option path_style=true \
		--option "access_key=$BENCH_ACCESS_KEY" --option "secret_key=$BENCH_SECRET_KEY" \
		--block-size "$2" >/dev/null || fail "cistern mount failed"
	"$RIG_CLI" sync /s3 >/dev/null || fail "cistern sync failed"
}
