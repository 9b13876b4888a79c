# A cistern-master for a test (sourced after common.sh):
#   master_up DATA RPC HTTP [FLAGS...]  start one on 127.0.0.1 with its data in
#       DATA, its output appended to $CIS_TMP/master.log; sets MPID, kills it
#       (-9) on exit, returns once /healthz answers (at most 20 s). Call it
#       again with the same ports to restart it.
master_up() {
	local data=$1 rpc=$2 http=$3
	shift 3
	"$CIS_BUILD/master/cistern-master" --data-dir "$data" --bind 127.0.0.1 --rpc-port "$rpc" \
		--http-port "$http" "$@" >>"$CIS_TMP/master.log" 2>&1 &
	MPID=$!
	cis_on_exit "kill -9 $MPID"
	wait_for 20 curl -fsS "http://127.0.0.1:$http/healthz"
}
