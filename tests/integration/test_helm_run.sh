#!/usr/bin/env bash
# The chart's container commands, run for real. The chart is rendered (helm
# template, kubectl to JSON) and each pod is laid out as the kubelet would by
# tests/integration/helm/check_manifests.py: the same command, arguments and
# environment (fieldRefs filled in, $(VAR) expanded), volumes as folders
# (hostPaths under a per-node root), ConfigMaps written out. Every pod runs
# in a network namespace of its own making ("master", "node1" for the
# host-network worker and FUSE pods, "job"), on a bridge inside a further
# namespace of ours; the Service name resolves through a hosts file bound
# over /etc/hosts in the process's own mount namespace. The FUSE mount
# point's hostPath is a shared mount, so the FUSE pod's mount propagates to
# this (the "host's") namespace as mountPropagation: Bidirectional would,
# and the data is read there, as a training pod's hostPath volume sees it.
# Then: the cluster comes up, the mounts Job (run twice, as an upgrade
# would) mounts a file:// store, files read back byte for byte through the
# FUSE mount; a killed FUSE pod leaves ENOTCONN, its replacement (init
# container first) serves again; the preStop hook unmounts cleanly; a Job
# with a bad mount gives up. Also: every library the programs link is
# installed by deploy/Dockerfile's runtime stage.
source "$(dirname "$0")/lib/common.sh"

[ "$(id -u)" = 0 ] || fail "needs root (network namespaces, FUSE mounts)"
[ -c /dev/fuse ] || fail "needs /dev/fuse"
for t in ip nsenter unshare curl fusermount3 mountpoint readelf dpkg; do
	command -v $t >/dev/null || fail "missing $t (scripts/install-deps.sh)"
done
tools=$CIS_SRC/tests/node/node_modules/.cistern-tools
[ -x "$tools/helm" ] && [ -x "$tools/kubectl" ] || fail "helm/kubectl missing in $tools: run scripts/install-deps.sh"
checker=$CIS_SRC/tests/integration/helm/check_manifests.py
export HOME=$CIS_TMP/home XDG_CACHE_HOME=$CIS_TMP/cache XDG_CONFIG_HOME=$CIS_TMP/config
mkdir -p "$HOME"

# The four programs, on PATH as the image's /usr/local/bin has them.
bin=$CIS_TMP/bin
mkdir -p "$bin"
for p in master/cistern-master worker/cistern-worker fuse/cistern-fuse cli/cistern; do
	[ -x "$CIS_BUILD/$p" ] || fail "$CIS_BUILD/$p not built"
	ln -s "$CIS_BUILD/$p" "$bin/"
done

# ---- the image: every linked library comes from a runtime-stage package ----
log "Dockerfile runtime stage covers the programs' libraries"
dockerfile=$CIS_SRC/deploy/Dockerfile
python3 - "$dockerfile" >"$CIS_TMP/runtime-pkgs" <<'EOF'
import re, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
stages = re.split(r"^FROM\s+", text, flags=re.M)[1:]
assert len(stages) == 2, "want two stages"
assert stages[0].startswith("debian:bookworm AS build"), stages[0][:40]
assert stages[1].startswith("debian:bookworm-slim"), stages[1][:40]
assert "COPY --from=build" in stages[1], "runtime stage copies nothing from build"
m = re.search(r"apt-get install -y --no-install-recommends(.*?)&&", stages[1])
pkgs = m.group(1).split()
bad = [p for p in pkgs if p.endswith("-dev") or p in ("build-essential", "cmake", "gcc")]
assert not bad, "build packages in the runtime stage: %s" % bad
print("\n".join(pkgs))
EOF
# In every bookworm-slim image already (Priority: required).
echo libc6 >>"$CIS_TMP/runtime-pkgs"
echo libgcc-s1 >>"$CIS_TMP/runtime-pkgs"
grep -qx fuse3 "$CIS_TMP/runtime-pkgs" || fail "runtime stage lacks fuse3 (fusermount3 for the preStop hook)"
# NEEDED entries of each program -> the file ldd resolves -> its package.
: >"$CIS_TMP/needed"
for b in "$bin"/*; do
	real=$(readlink -f "$b")
	ldd "$real" >"$CIS_TMP/ldd"
	for so in $(readelf -d "$real" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
		path=$(awk -v so="$so" '$1 == so { print $3 }' "$CIS_TMP/ldd")
		[ -n "$path" ] || fail "$(basename "$b"): $so not found by ldd"
		echo "$(basename "$b") $so $path" >>"$CIS_TMP/needed"
	done
done
[ -s "$CIS_TMP/needed" ] || fail "no libraries found: readelf output changed?"
# One dpkg query for all: each path as ldd gives it and with links resolved
# (usrmerge: a package may own either spelling).
while read -r prog so path; do
	echo "$path"
	readlink -f "$path"
done <"$CIS_TMP/needed" | sort -u >"$CIS_TMP/paths"
dpkg -S $(cat "$CIS_TMP/paths") >"$CIS_TMP/owners" 2>/dev/null || true
while read -r prog so path; do
	real=$(readlink -f "$path")
	pkg=$(awk -v p="$path" -v r="$real" '$2 == p || $2 == r { sub(/:.*/, "", $1); print $1; exit }' "$CIS_TMP/owners")
	[ -n "$pkg" ] || fail "$prog: no package owns $path"
	grep -qx "$pkg" "$CIS_TMP/runtime-pkgs" ||
		fail "$prog links $so from package $pkg, not installed by the Dockerfile's runtime stage"
done <"$CIS_TMP/needed"

# ---- render ----------------------------------------------------------------
data=$CIS_TMP/store
mkdir -p "$data/sub"
printf 'hello from the store\n' >"$data/hello.txt"
head -c $((9 * 1024 * 1024 + 12345)) /dev/urandom >"$data/sub/big.bin" # 3 blocks of 4M
render() { # NAME [helm args]
	local name=$1
	shift
	"$tools/helm" template rel "$CIS_SRC/helm/cistern" --namespace ml "$@" >"$CIS_TMP/$name.yaml"
	"$tools/kubectl" label --local -f "$CIS_TMP/$name.yaml" cistern-test- -o json >"$CIS_TMP/$name.json"
}
log "render the chart"
# The path with a trailing slash, as a values file may give it: the second
# run of the Job still finds it mounted (cistern mounts lists /ds).
render run --set-json "mounts=[{\"path\":\"/ds/\",\"uri\":\"file://$data\",\"readonly\":true}]" \
	--set-json 'loads=[]'
python3 "$checker" check "$CIS_TMP/run.json" --release rel
render bad --set jobs.retries=2 --set jobs.retryDelaySeconds=1 \
	--set-json "mounts=[{\"path\":\"/nope\",\"uri\":\"file://$CIS_TMP/no-such-dir\"}]"

# ---- hosts: network namespaces on a bridge of our own ----------------------
sfx=$$
sw=cis-sw$sfx
declare -A ns_of=([master]=cis-ma$sfx [node1]=cis-n1$sfx [job]=cis-jb$sfx)
declare -A ip_of=([master]=10.77.0.1 [node1]=10.77.0.2 [job]=10.77.0.3)
ip netns add "$sw"
cis_on_exit "ip netns del $sw"
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
i=0
for h in master node1 job; do
	i=$((i + 1))
	ns=${ns_of[$h]}
	ip netns add "$ns"
	cis_on_exit "ip netns del $ns"
	ip link add "cis${sfx}a$i" type veth peer name "cis${sfx}b$i"
	ip link set "cis${sfx}a$i" netns "$sw"
	ip link set "cis${sfx}b$i" netns "$ns"
	ip -n "$sw" link set "cis${sfx}a$i" master br0 up
	ip -n "$ns" link set "cis${sfx}b$i" name eth0
	ip -n "$ns" addr add "${ip_of[$h]}/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" link set lo up
done
# The cluster DNS, as far as these pods need it.
hosts=$CIS_TMP/hosts
printf '127.0.0.1 localhost\n%s rel-cistern-master.ml.svc rel-cistern-master-0\n' "${ip_of[master]}" >"$hosts"

# The FUSE hostPath on node1 is a shared mount: what the FUSE pod mounts
# under it appears here (Bidirectional propagation).
node1=$CIS_TMP/node1
fuse_host=$node1/mnt/cistern
mkdir -p "$fuse_host"
mount --bind "$fuse_host" "$fuse_host"
cis_on_exit "umount -l $fuse_host"
mount --make-shared "$fuse_host"
mp=$fuse_host/data
cis_on_exit "fusermount3 -u -z $mp"

# layout POD KIND NAME HOST: lay out a pod for HOST in $CIS_TMP/pods/POD.
layout() {
	local pod=$1 kind=$2 name=$3 h=$4 manifests=${5:-run}
	python3 "$checker" pod "$CIS_TMP/$manifests.json" "$kind" "$name" \
		--out "$CIS_TMP/pods/$pod/spec" --node-root "$CIS_TMP/$h" \
		--pod-root "$CIS_TMP/pods/$pod/volumes" \
		--field "spec.nodeName=$h" --field "status.podIP=${ip_of[$h]}"
}

# start POD CONTAINER HOST [fg]: run one container of a laid-out pod in
# HOST's network namespace and a mount namespace of its own (the hosts file
# bound over /etc/hosts there, only there), with exactly its environment.
# In the background it sets $started (the pid); with fg it waits.
start() {
	local pod=$1 c=$2 h=$3 mode=${4:-bg} argv envs
	mapfile -d '' argv <"$CIS_TMP/pods/$pod/spec/$c.argv"
	mapfile -d '' envs <"$CIS_TMP/pods/$pod/spec/$c.env"
	local cmd=(nsenter --net="/run/netns/${ns_of[$h]}" unshare -m --propagation unchanged --
		/bin/sh -c 'mount --make-private "$(findmnt -n -o TARGET -T /etc/hosts)" &&
			mount --bind "$0" /etc/hosts && exec "$@"' "$hosts"
		env -i "PATH=$bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root "${envs[@]}" "${argv[@]}")
	if [ "$mode" = fg ]; then
		"${cmd[@]}" >>"$CIS_TMP/$pod-$c.log" 2>&1
	else
		"${cmd[@]}" >>"$CIS_TMP/$pod-$c.log" 2>&1 &
		started=$!
		cis_on_exit "kill_pid $started"
	fi
}

# ready POD CONTAINER HOST PID: the rendered readiness probe passes
# (bounded); fails at once, with the log, if the process died.
ready() {
	local pod=$1 c=$2 h=$3 pid=$4 port path deadline=$((SECONDS + 30))
	read -r port path <"$CIS_TMP/pods/$pod/spec/$c.probe"
	until nsenter --net="/run/netns/${ns_of[$h]}" curl -fsS -o /dev/null "http://${ip_of[$h]}:$port$path" 2>/dev/null; do
		kill -0 "$pid" 2>/dev/null || {
			cat "$CIS_TMP/$pod-$c.log" >&2
			fail "$pod/$c exited before it was ready"
		}
		[ $SECONDS -lt $deadline ] || fail "$pod/$c not ready after 30s"
		sleep 0.2
	done
}

api() {
	nsenter --net="/run/netns/${ns_of[job]}" "$bin/cistern" --api "${ip_of[master]}:19601" "$@"
}

# ---- the cluster -------------------------------------------------------------
log "master (StatefulSet rel-cistern-master)"
layout master-0 StatefulSet rel-cistern-master master
start master-0 0-master master
mpid=$started
ready master-0 0-master master "$mpid"
assert_contains "$(cat "$CIS_TMP/pods/master-0/volumes/config/master.conf")" "rendered by the Helm chart" \
	"the ConfigMap was not laid out"

log "worker (DaemonSet rel-cistern-worker on node1)"
layout worker-n1 DaemonSet rel-cistern-worker node1
start worker-n1 0-worker node1
wpid=$started
ready worker-n1 0-worker node1 "$wpid"
deadline=$((SECONDS + 20))
until api workers 2>/dev/null | grep -q "${ip_of[node1]}"; do
	[ $SECONDS -lt $deadline ] || fail "the worker did not register as ${ip_of[node1]} (--host \$(POD_IP)): $(api workers 2>&1)"
	sleep 0.2
done
[ -S "$node1/run/cistern/worker.sock" ] || fail "no worker socket in the shared hostPath /run/cistern"

run_fuse() {
	layout fuse-n1 DaemonSet rel-cistern-fuse node1
	start fuse-n1 0-clean-mountpoint node1 fg || fail "the FUSE init container failed"
	start fuse-n1 1-fuse node1
	fpid=$started
	ready fuse-n1 1-fuse node1 "$fpid"
	wait_for 20 mountpoint -q "$mp"
}
log "FUSE (DaemonSet rel-cistern-fuse on node1)"
run_fuse
mountpoint -q "$mp" || fail "the FUSE mount did not propagate to the host"

log "mounts Job (post-install hook)"
layout mounts-1 Job rel-cistern-mounts job
start mounts-1 0-mounts job fg || {
	cat "$CIS_TMP/mounts-1-0-mounts.log" >&2
	fail "the mounts Job failed"
}
assert_contains "$(api mounts)" "file://$data" "the Job did not mount the store"
log "mounts Job again (post-upgrade): leaves the mount as it is"
start mounts-1 0-mounts job fg || fail "the mounts Job failed on a second run"
assert_contains "$(cat "$CIS_TMP/mounts-1-0-mounts.log")" "/ds: already mounted" "second run did not skip"

log "read through the FUSE mount, as a training pod's hostPath volume sees it"
wait_for 20 test -e "$mp/ds/hello.txt"
assert_eq "$(cat "$mp/ds/hello.txt")" "hello from the store" "small file"
cmp "$data/sub/big.bin" "$mp/ds/sub/big.bin" || fail "big file differs through FUSE"
assert_eq "$(ls "$mp/ds" | tr '\n' ' ')" "hello.txt sub " "listing"
for pod in master-0:0-master:master worker-n1:0-worker:node1 fuse-n1:1-fuse:node1; do
	IFS=: read -r p c h <<<"$pod"
	read -r port _ <"$CIS_TMP/pods/$p/spec/$c.probe"
	m=$(nsenter --net="/run/netns/${ns_of[$h]}" curl -fsS "http://${ip_of[$h]}:$port/metrics")
	assert_contains "$m" "# TYPE" "$p: no Prometheus metrics on the annotated port"
done

log "FUSE pod killed: the mount fails with ENOTCONN, the replacement serves again"
kill -9 "$fpid"
wait "$fpid" 2>/dev/null || true
if out=$(cat "$mp/ds/hello.txt" 2>&1); then
	fail "a read through a dead FUSE mount succeeded: $out"
fi
assert_contains "$out" "not connected" "a dead FUSE mount should say ENOTCONN"
run_fuse
assert_eq "$(cat "$mp/ds/hello.txt")" "hello from the store" "read after the FUSE pod came back"
# The container alone restarted (killed by OOM or its liveness probe): the
# kubelet runs no init container then, and the dead mount is still there.
log "FUSE container restarted in its pod: it detaches the dead mount itself"
kill -9 "$fpid"
wait "$fpid" 2>/dev/null || true
start fuse-n1 1-fuse node1
fpid=$started
ready fuse-n1 1-fuse node1 "$fpid"
wait_for 20 mountpoint -q "$mp"
assert_eq "$(cat "$mp/ds/hello.txt")" "hello from the store" "read after the container restart"

log "preStop hook unmounts; cistern-fuse exits"
mapfile -d '' pre <"$CIS_TMP/pods/fuse-n1/spec/1-fuse.prestop"
[ ${#pre[@]} -gt 0 ] || fail "no preStop command"
nsenter -t "$fpid" -m -n env -i "PATH=$bin:/usr/sbin:/usr/bin:/sbin:/bin" "${pre[@]}" ||
	fail "the preStop command failed"
mountpoint -q "$mp" && fail "still mounted after preStop"
deadline=$((SECONDS + 15))
while kill -0 "$fpid" 2>/dev/null; do
	[ $SECONDS -lt $deadline ] || fail "cistern-fuse still running 15s after the unmount"
	sleep 0.2
done

log "a Job whose mount cannot work gives up (bounded), with a reason"
layout mounts-bad Job rel-cistern-mounts job bad
if start mounts-bad 0-mounts job fg; then
	fail "the mounts Job succeeded with a missing directory"
fi
assert_contains "$(cat "$CIS_TMP/mounts-bad-0-mounts.log")" "giving up: mount_once /nope" "no reason given"

log "example configs of deploy/ are accepted by the programs"
mkdir -p "$CIS_TMP/ex/cache" "$CIS_TMP/ex/master"
CISTERN_CONFIG=$CIS_SRC/deploy/config/master.conf nsenter --net="/run/netns/${ns_of[job]}" \
	"$bin/cistern-master" --data-dir "$CIS_TMP/ex/master" >"$CIS_TMP/ex-master.log" 2>&1 &
empid=$!
cis_on_exit "kill_pid $empid"
wait_for 20 nsenter --net="/run/netns/${ns_of[job]}" curl -fsS http://127.0.0.1:19601/readyz
CISTERN_CONFIG=$CIS_SRC/deploy/config/worker.conf nsenter --net="/run/netns/${ns_of[job]}" \
	"$bin/cistern-worker" --master 127.0.0.1:19600 --cache-dir "$CIS_TMP/ex/cache:1G" \
	--state-dir "$CIS_TMP/ex/wstate" --socket "$CIS_TMP/ex/w.sock" >"$CIS_TMP/ex-worker.log" 2>&1 &
ewpid=$!
cis_on_exit "kill_pid $ewpid"
wait_for 20 nsenter --net="/run/netns/${ns_of[job]}" curl -fsS http://127.0.0.1:19611/readyz
kill_pid "$ewpid"
kill_pid "$empid"

log "ok"
