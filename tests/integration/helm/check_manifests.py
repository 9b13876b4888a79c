#!/usr/bin/env python3
"""Checks the Kubernetes objects rendered by the Cistern chart.

Input: the rendered manifests as a stream of JSON objects (helm template,
then `kubectl label --local -o json`, which converts YAML to JSON offline).

  check_manifests.py check FILE --release R [--expect full|default]
      asserts the chart's invariants (see check()); exit 1 with one line per
      violation.
  check_manifests.py pod FILE KIND NAME --out DIR --node-root DIR
                      --pod-root DIR [--field PATH=VALUE]... [--secrets JSON]
      lays out the pod of workload KIND/NAME to run here as the kubelet
      would (see pod_materialize) for tests/integration/test_helm_run.sh.

Standard library only.
"""
import json
import re
import sys

CRED_WORDS = re.compile(r"(ACCESS_KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL)", re.I)
CRED_OPTS = ("access_key", "secret_key", "session_token", "password", "token")
WORKLOADS = ("StatefulSet", "DaemonSet", "Deployment", "Job")
LONG_RUNNING = ("StatefulSet", "DaemonSet", "Deployment")


def load(path):
    text = open(path, encoding="utf-8").read()
    dec = json.JSONDecoder()
    objs, i = [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        obj, i = dec.raw_decode(text, i)
        if obj.get("kind") == "List":
            objs.extend(obj.get("items", []))
        else:
            objs.append(obj)
    return objs


def pod_spec(obj):
    return obj["spec"]["template"]["spec"]


def containers(obj, init=True):
    spec = pod_spec(obj)
    out = [("container", c) for c in spec.get("containers", [])]
    if init:
        out += [("initContainer", c) for c in spec.get("initContainers", [])]
    return out


class Checker:
    def __init__(self, release):
        self.errors = []
        self.release = release

    def fail(self, obj, msg):
        where = "%s/%s" % (obj.get("kind"), obj.get("metadata", {}).get("name"))
        self.errors.append("%s: %s" % (where, msg))

    # ---- names and labels -------------------------------------------------
    def names_labels(self, obj, prefix):
        md = obj.get("metadata", {})
        name = md.get("name", "")
        labels = md.get("labels") or {}
        comp = labels.get("app.kubernetes.io/component")
        want = {
            "app.kubernetes.io/name": "cistern",
            "app.kubernetes.io/instance": self.release,
            "app.kubernetes.io/managed-by": "Helm",
            "app.kubernetes.io/part-of": "cistern",
        }
        for k, v in want.items():
            if labels.get(k) != v:
                self.fail(obj, "label %s is %r, want %r" % (k, labels.get(k), v))
        if not re.fullmatch(r"cistern-\d+\.\d+\.\d+.*", labels.get("helm.sh/chart", "")):
            self.fail(obj, "label helm.sh/chart missing or malformed")
        if not comp:
            self.fail(obj, "no app.kubernetes.io/component label")
            return
        if not re.fullmatch(re.escape(prefix) + "-" + re.escape(comp) + r"(-headless)?", name):
            self.fail(obj, "name %r is not %s-%s[-headless]" % (name, prefix, comp))
        if len(name) > 63:
            self.fail(obj, "name longer than 63 characters")
        if obj["kind"] in WORKLOADS:
            tl = obj["spec"]["template"]["metadata"].get("labels") or {}
            for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                      "app.kubernetes.io/component"):
                if tl.get(k) != labels.get(k):
                    self.fail(obj, "pod template label %s differs from the object's" % k)
            if obj["kind"] != "Job":
                sel = obj["spec"].get("selector", {}).get("matchLabels", {})
                if set(sel) != {"app.kubernetes.io/name", "app.kubernetes.io/instance",
                                "app.kubernetes.io/component"}:
                    self.fail(obj, "selector is not the chart's selector labels: %s" % sorted(sel))
                for k, v in sel.items():
                    if tl.get(k) != v:
                        self.fail(obj, "selector %s=%s does not match the pod template" % (k, v))
        if obj["kind"] == "Service" and obj["spec"].get("selector"):
            sel = obj["spec"]["selector"]
            if sel.get("app.kubernetes.io/component") != comp or \
                    sel.get("app.kubernetes.io/instance") != self.release:
                self.fail(obj, "Service selector does not select its component")

    # ---- containers --------------------------------------------------------
    def container_rules(self, obj):
        kind = obj["kind"]
        for where, c in containers(obj):
            cn = "%s %s" % (where, c.get("name"))
            res = c.get("resources") or {}
            for part in ("requests", "limits"):
                for r in ("cpu", "memory"):
                    if r not in (res.get(part) or {}):
                        self.fail(obj, "%s: no resources.%s.%s" % (cn, part, r))
            if not c.get("image"):
                self.fail(obj, "%s: no image" % cn)
            if where == "container" and kind in LONG_RUNNING:
                ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
                for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                                    ("readinessProbe", "/readyz")):
                    p = c.get(probe)
                    if not p:
                        self.fail(obj, "%s: no %s" % (cn, probe))
                        continue
                    hg = p.get("httpGet") or {}
                    if hg.get("path") != path:
                        self.fail(obj, "%s: %s path %r, want %s" % (cn, probe, hg.get("path"), path))
                    port = hg.get("port")
                    if port not in ports and port not in ports.values():
                        self.fail(obj, "%s: %s port %r is no container port" % (cn, probe, port))
                # Prometheus scrape annotations name the HTTP port.
                ann = obj["spec"]["template"]["metadata"].get("annotations") or {}
                if ann.get("prometheus.io/scrape") == "true":
                    if str(ports.get("http")) != ann.get("prometheus.io/port"):
                        self.fail(obj, "prometheus.io/port %r is not the http port %r" %
                                  (ann.get("prometheus.io/port"), ports.get("http")))
                    if ann.get("prometheus.io/path") != "/metrics":
                        self.fail(obj, "prometheus.io/path is not /metrics")
                # The HTTP port given to the program is the probed port.
                argv = (c.get("command") or []) + (c.get("args") or [])
                if "--http-port" in argv:
                    hp = argv[argv.index("--http-port") + 1]
                    if str(ports.get("http")) != hp:
                        self.fail(obj, "%s: --http-port %s but container port http is %s" %
                                  (cn, hp, ports.get("http")))
                else:
                    self.fail(obj, "%s: no --http-port argument" % cn)

    # ---- credentials -------------------------------------------------------
    def credentials(self, obj):
        kind = obj["kind"]
        if kind == "ConfigMap":
            for k, v in (obj.get("data") or {}).items():
                for line in str(v).splitlines():
                    line = line.strip()
                    if line.startswith("#") or "=" not in line:
                        continue
                    key = line.split("=", 1)[0].strip().lower().replace("-", "_")
                    if key in CRED_OPTS or CRED_WORDS.search(key):
                        self.fail(obj, "ConfigMap %s holds a credential (%s)" % (k, key))
        if kind not in WORKLOADS:
            return
        for where, c in containers(obj):
            secret_vars = set()
            for e in c.get("env") or []:
                vf = e.get("valueFrom") or {}
                if "secretKeyRef" in vf:
                    secret_vars.add(e["name"])
                elif CRED_WORDS.search(e["name"]):
                    self.fail(obj, "%s: env %s looks like a credential but is not from a Secret" %
                              (c["name"], e["name"]))
                if "configMapKeyRef" in vf and CRED_WORDS.search(e["name"]):
                    self.fail(obj, "%s: env %s comes from a ConfigMap" % (c["name"], e["name"]))
            text = " ".join((c.get("command") or []) + (c.get("args") or []))
            for m in re.finditer(r"(--option-env\s+['\"]?)?(%s)=(\S*)" % "|".join(CRED_OPTS), text):
                val = m.group(3).strip("'\"")
                if m.group(1):  # --option-env KEY=VAR: the CLI reads VAR itself
                    ref = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)", val)
                    var = ref and ref.group(1)
                else:
                    ref = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", val)
                    var = ref and (ref.group(1) or ref.group(2))
                if not var or var not in secret_vars:
                    self.fail(obj, "%s: %s= in the command is not a Secret-backed variable" %
                              (c["name"], m.group(2)))

    # ---- component-specific ------------------------------------------------
    def master(self, obj):
        if obj["spec"].get("replicas") != 1:
            self.fail(obj, "master replicas is not 1")
        c = pod_spec(obj)["containers"][0]
        argv = c.get("args") or []
        ddir = argv[argv.index("--data-dir") + 1] if "--data-dir" in argv else None
        if not ddir:
            self.fail(obj, "master has no --data-dir")
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        vol = mounts.get(ddir)
        claims = [t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates", [])]
        vols = [v["name"] for v in pod_spec(obj).get("volumes", [])]
        if vol not in claims and vol not in vols:
            self.fail(obj, "master data dir %s is on no volume" % ddir)
        return vol in claims

    def fuse(self, obj):
        spec = pod_spec(obj)
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        c = [c for c in spec["containers"] if c["name"] == "fuse"]
        if not c:
            self.fail(obj, "no container named fuse")
            return
        c = c[0]
        if not (c.get("securityContext") or {}).get("privileged"):
            self.fail(obj, "fuse container is not privileged")
        devs = [m for m in c.get("volumeMounts", []) if m["mountPath"] == "/dev/fuse"]
        if not devs or (vols.get(devs[0]["name"], {}).get("hostPath") or {}).get("path") != "/dev/fuse":
            self.fail(obj, "fuse container has no /dev/fuse from the host")
        bid = [m for m in c.get("volumeMounts", []) if m.get("mountPropagation") == "Bidirectional"]
        if not bid:
            self.fail(obj, "fuse container has no Bidirectional mount")
            return
        if "hostPath" not in vols.get(bid[0]["name"], {}):
            self.fail(obj, "the Bidirectional mount is not a hostPath")
        mp = (c.get("args") or [""])[0]
        base = bid[0]["mountPath"].rstrip("/") + "/"
        if not mp.startswith(base) or "/" in mp[len(base):]:
            self.fail(obj, "mount point %r is not a folder directly under the shared %s" % (mp, base))
        pre = " ".join(((c.get("lifecycle") or {}).get("preStop") or {}).get("exec", {}).get("command", []))
        if "fusermount3 -u %s" % mp not in pre:
            self.fail(obj, "no preStop unmount of %s" % mp)
        if "-f" not in (c.get("args") or []):
            self.fail(obj, "cistern-fuse is not in the foreground (-f)")

    def worker(self, obj):
        c = pod_spec(obj)["containers"][0]
        argv = c.get("args") or []
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        vols = {v["name"] for v in pod_spec(obj).get("volumes", [])}
        claims = {t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates", [])}
        dirs = [argv[i + 1] for i, a in enumerate(argv) if a == "--cache-dir"]
        if not dirs:
            self.fail(obj, "worker has no --cache-dir")
        for d in dirs:
            path, _, size = d.rpartition(":")
            if not path or not re.fullmatch(r"\d+(\.\d+)?[KMGT]?(i?B)?", size):
                self.fail(obj, "--cache-dir %r is not DIR:SIZE" % d)
            v = mounts.get(path)
            if v is None or (v not in vols and v not in claims):
                self.fail(obj, "cache dir %s is on no volume" % path)
        for flag in ("--master", "--state-dir", "--socket", "--rpc-port"):
            if flag not in argv:
                self.fail(obj, "worker has no %s" % flag)
        return dirs

    def check(self, objs, expect):
        prefix = None
        for o in objs:
            if o["kind"] == "StatefulSet" and o["metadata"]["labels"].get(
                    "app.kubernetes.io/component") == "master":
                prefix = o["metadata"]["name"][: -len("-master")]
        if not prefix:
            self.errors.append("no master StatefulSet")
            return
        by = {}
        for o in objs:
            self.names_labels(o, prefix)
            if o["kind"] in WORKLOADS:
                self.container_rules(o)
            self.credentials(o)
            comp = (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component")
            by.setdefault((o["kind"], comp), []).append(o)
        for kind in ("Secret",):
            for (k, _), os_ in by.items():
                if k == kind:
                    for o in os_:
                        self.fail(o, "the chart renders a Secret: credentials must come from the user's own Secret")
        m = by.get(("StatefulSet", "master"), [])
        has_pvc = m and self.master(m[0])
        svc = [s for s in by.get(("Service", "master"), []) if s["spec"].get("clusterIP") != "None"]
        if not svc:
            self.errors.append("no master Service")
        else:
            pnames = {p["name"] for p in svc[0]["spec"]["ports"]}
            if not {"rpc", "http"} <= pnames:
                self.fail(svc[0], "master Service lacks rpc or http port")
        wk = [o for k, os_ in by.items() if k[1] == "worker" and k[0] in LONG_RUNNING for o in os_]
        if len(wk) != 1:
            self.errors.append("want one worker workload, found %d" % len(wk))
        dirs = self.worker(wk[0]) if wk else []
        fu = by.get(("DaemonSet", "fuse"), [])
        if fu:
            self.fuse(fu[0])
        for o in wk + fu:
            ps = pod_spec(o)
            if ps.get("hostNetwork") and ps.get("dnsPolicy") != "ClusterFirstWithHostNet":
                self.fail(o, "hostNetwork without dnsPolicy ClusterFirstWithHostNet: "
                          "the master's Service name would not resolve")
        if wk and fu and bool(pod_spec(wk[0]).get("hostNetwork")) != bool(pod_spec(fu[0]).get("hostNetwork")):
            self.errors.append("worker and FUSE differ in hostNetwork: the short-circuit "
                               "needs the same hostname")
        if wk:
            argv = pod_spec(wk[0])["containers"][0].get("args") or []
            env = {e["name"]: e for e in pod_spec(wk[0])["containers"][0].get("env", [])}
            if "--host" not in argv or argv[argv.index("--host") + 1] != "$(POD_IP)" or \
                    (env.get("POD_IP", {}).get("valueFrom") or {}).get("fieldRef", {}).get(
                        "fieldPath") != "status.podIP":
                self.fail(wk[0], "worker does not advertise its pod IP (--host $(POD_IP))")
        if expect == "default":
            if not has_pvc:
                self.errors.append("default: master state is not on a PVC")
            if not fu:
                self.errors.append("default: no FUSE DaemonSet")
            if wk and wk[0]["kind"] != "DaemonSet":
                self.errors.append("default: worker is not a DaemonSet")
            if wk and not pod_spec(wk[0]).get("hostNetwork"):
                self.errors.append("default: worker is not on the host network")
            if any(k[0] == "Job" for k in by):
                self.errors.append("default: hook Jobs rendered with no mounts or loads")
            if any(k[0] == "NetworkPolicy" for k in by):
                self.errors.append("default: a NetworkPolicy rendered though not enabled")
        elif expect == "full":
            self.expect_full(by, wk, dirs, fu)

    # The values in tests/integration/helm/values-full.yaml, reflected.
    def expect_full(self, by, wk, dirs, fu):
        e = self.errors
        # podLabels and podAnnotations reach every pod, the hook Jobs' too
        # (a sidecar injected there would keep a Job from ever finishing).
        jobs = 0
        for (kind, _), os_ in by.items():
            for o in os_ if kind in WORKLOADS else ():
                md = o["spec"]["template"]["metadata"]
                jobs += kind == "Job"
                if (md.get("labels") or {}).get("team") != "ml":
                    self.fail(o, "full: podLabels not on its pods")
                if (md.get("annotations") or {}).get("example.com/owner") != "data-platform":
                    self.fail(o, "full: podAnnotations not on its pods")
        if not jobs:
            e.append("full: no hook Jobs rendered")
        np = by.get(("NetworkPolicy", "master"), [])
        if len(np) != 1:
            e.append("full: want one NetworkPolicy on the master, found %d" % len(np))
        else:
            sp = np[0]["spec"]
            sel = sp["podSelector"].get("matchLabels", {})
            if sel.get("app.kubernetes.io/component") != "master":
                self.fail(np[0], "full: does not select the master")
            rule = sp["ingress"][0]
            peers = rule.get("from", [])
            if not any((p.get("podSelector") or {}).get("matchLabels", {}).get(
                    "app.kubernetes.io/instance") == self.release for p in peers):
                self.fail(np[0], "full: the release's own pods are not let in")
            if {"ipBlock": {"cidr": "10.0.0.0/16"}} not in peers:
                self.fail(np[0], "full: allowFrom not applied")
            if sorted(p["port"] for p in rule.get("ports", [])) != ["http", "rpc"]:
                self.fail(np[0], "full: not the master's rpc and http ports")
        if not wk or wk[0]["kind"] != "StatefulSet" or wk[0]["spec"].get("replicas") != 2:
            e.append("full: worker is not a StatefulSet of 2")
        else:
            ps = pod_spec(wk[0])
            if ps.get("nodeSelector") != {"cistern.io/cache": "nvme"}:
                e.append("full: worker nodeSelector not applied")
            if not any(t.get("key") == "nvidia.com/gpu" for t in ps.get("tolerations", [])):
                e.append("full: worker tolerations not applied")
            claims = [t["metadata"]["name"] for t in wk[0]["spec"].get("volumeClaimTemplates", [])]
            if claims != ["cache-1"]:
                e.append("full: worker claims %s, want [cache-1]" % claims)
            # The block index goes with the claim: on an emptyDir it started
            # empty at every new pod and deleted the claim's blocks.
            wargs = ps["containers"][0].get("args") or []
            sd = wargs[wargs.index("--state-dir") + 1] if "--state-dir" in wargs else None
            if sd != "/cache/1/.state":
                e.append("full: worker --state-dir %s, want /cache/1/.state (on the claim)" % sd)
            if any(v.get("name") == "state" for v in ps.get("volumes", [])):
                e.append("full: a state volume beside the claim that holds the index")
            if [d.rpartition(":")[2] for d in dirs] != ["8G", "450G", "100G"]:
                e.append("full: cache sizes %s" % dirs)
            env = {x["name"] for x in ps["containers"][0].get("env", [])}
            if "CISTERN_LOG_LEVEL" not in env:
                e.append("full: worker extraEnv not applied")
        jobs = {k[1]: v[0] for k, v in by.items() if k[0] == "Job"}
        if set(jobs) != {"mounts", "loads"}:
            e.append("full: hook jobs %s, want mounts and loads" % sorted(jobs))
        else:
            mj, lj = jobs["mounts"], jobs["loads"]
            ann = mj["metadata"].get("annotations", {})
            if "post-install" not in ann.get("helm.sh/hook", ""):
                e.append("full: mounts Job is not a post-install hook")
            if int(lj["metadata"]["annotations"]["helm.sh/hook-weight"]) <= \
                    int(ann.get("helm.sh/hook-weight", "0")):
                e.append("full: loads Job does not run after the mounts Job")
            script = pod_spec(mj)["containers"][0]["command"][-1]
            for want in ('-ge 4 ]', "sleep 3;", "try mount_once '/imagenet' 's3://datasets/imagenet'", "--readonly",
                         "--sync-interval '5m'", "--block-size '16M'",
                         "'file:///srv/data' --block-size '8M'", "'region=us-east-1'",
                         "try mount_once '/local' 'file:///srv/data'"):
                if want not in script:
                    e.append("full: mounts script lacks %r" % want)
            lscript = pod_spec(lj)["containers"][0]["command"][-1]
            if "load '/imagenet/train' --replicas 3" not in lscript or \
                    "load '/local' --replicas 1" not in lscript:
                e.append("full: loads script wrong: %r" % lscript)
            refs = [x["valueFrom"]["secretKeyRef"]["name"] for x in
                    pod_spec(mj)["containers"][0].get("env", []) if "valueFrom" in x]
            if refs.count("s3-credentials") != 2:
                e.append("full: credentials not taken from Secret s3-credentials")
        if not by.get(("ServiceMonitor", "metrics")):
            e.append("full: no ServiceMonitor")
        if not fu:
            e.append("full: no FUSE DaemonSet")
        else:
            a = pod_spec(fu[0])["containers"][0]["args"]
            if a[0] != "/mnt/ds/fs" or "allow_other,default_permissions" not in a:
                e.append("full: fuse mount point/options not applied: %s" % a)
            if pod_spec(fu[0]).get("hostNetwork"):
                e.append("full: fuse.hostNetwork=false not applied")
        m = by.get(("StatefulSet", "master"), [])
        if m:
            c = pod_spec(m[0])["containers"][0]
            if not any(v["name"] == "data" and "emptyDir" in v for v in pod_spec(m[0])["volumes"]):
                e.append("full: master persistence.enabled=false did not give an emptyDir")
            if not any(x.get("name") == "extra" for x in c.get("volumeMounts", [])):
                e.append("full: master extraVolumeMounts not applied")
            if pod_spec(m[0]).get("imagePullSecrets") != [{"name": "regcred"}]:
                e.append("full: imagePullSecrets not applied")
            if c["image"] != "registry.example.com/cistern:test":
                e.append("full: image not applied: %s" % c["image"])
        cms = by.get(("ConfigMap", "master"), [])
        if not cms or "log-level = debug" not in cms[0]["data"]["master.conf"]:
            e.append("full: master.config not in the ConfigMap")


def expand_refs(s, env):
    """Kubernetes' $(VAR) expansion in command and args ($$ escapes)."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, s)


def map_paths(s, table):
    """Container paths in s (a whole argument or inside a shell line) to the
    host folders backing them; longest mount path first."""
    for cpath, hpath in table:
        s = re.sub(r"(?<![\w./-])" + re.escape(cpath) + r"(?=/|$|[:\s;'\"|&)])",
                   lambda m: hpath, s)
    return s


def pod_materialize(objs, kind, name, outdir, node_root, pod_root, fields, secrets):
    """Lays out pod KIND/NAME to run on this machine as the kubelet would:
    volumes become folders (hostPath under node_root, the rest under
    pod_root, ConfigMaps written out), env is resolved (fieldRef from
    fields, secretKeyRef from secrets), $(VAR) expanded, container paths
    mapped to those folders. Writes OUTDIR/<n>-<container>.{argv,env,prestop}
    (NUL-separated) and OUTDIR/order (init containers first)."""
    import os
    obj = next((o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name), None)
    if obj is None:
        sys.exit("no %s/%s in the manifests" % (kind, name))
    cms = {o["metadata"]["name"]: o.get("data", {}) for o in objs if o["kind"] == "ConfigMap"}
    spec = pod_spec(obj)
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    for t in obj["spec"].get("volumeClaimTemplates", []):
        vols[t["metadata"]["name"]] = {"name": t["metadata"]["name"], "pvc": True}
    host = {}
    for vn, v in vols.items():
        if "hostPath" in v:
            hp = v["hostPath"]["path"]
            if v["hostPath"].get("type") == "CharDevice":
                host[vn] = hp  # a device: the real one
                continue
            host[vn] = os.path.join(node_root, hp.lstrip("/"))
        else:
            host[vn] = os.path.join(pod_root, vn)
        os.makedirs(host[vn], exist_ok=True)
        if "configMap" in v:
            for k, text in cms.get(v["configMap"]["name"], {}).items():
                with open(os.path.join(host[vn], k), "w") as f:
                    f.write(text)
    os.makedirs(outdir, exist_ok=True)
    order = []
    ordered = [("initContainer", x) for x in spec.get("initContainers", [])] + \
        [("container", x) for x in spec.get("containers", [])]
    for n, (where, c) in enumerate(ordered):
        env = {}
        for e in c.get("env", []):
            vf = e.get("valueFrom")
            if vf is None:
                env[e["name"]] = expand_refs(e.get("value", ""), env)
            elif "fieldRef" in vf:
                env[e["name"]] = fields[vf["fieldRef"]["fieldPath"]]
            elif "secretKeyRef" in vf:
                r = vf["secretKeyRef"]
                env[e["name"]] = secrets[r["name"]][r["key"]]
            else:
                sys.exit("%s: env %s: unsupported source %s" % (c["name"], e["name"], vf))
        table = sorted(((m["mountPath"], host[m["name"]]) for m in c.get("volumeMounts", [])),
                       key=lambda t: -len(t[0]))
        argv = [map_paths(expand_refs(a, env), table)
                for a in (c.get("command") or []) + (c.get("args") or [])]
        pre = (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command") or []
        pre = [map_paths(a, table) for a in pre]
        base = os.path.join(outdir, "%d-%s" % (n, c["name"]))
        rp = (c.get("readinessProbe") or {}).get("httpGet")
        if rp:
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            with open(base + ".probe", "w") as f:
                f.write("%s %s\n" % (ports.get(rp["port"], rp["port"]), rp["path"]))
        envl = ["%s=%s" % (k, map_paths(v, table)) for k, v in env.items()]
        for ext, items in (("argv", argv), ("env", envl),
                           ("prestop", pre)):
            with open(base + "." + ext, "w") as f:
                f.write("".join(x + "\0" for x in items))
        order.append("%s %d-%s" % (where, n, c["name"]))
    with open(os.path.join(outdir, "order"), "w") as f:
        f.write("\n".join(order) + "\n")


def main():
    a = sys.argv[1:]
    if len(a) >= 2 and a[0] == "check":
        release = a[a.index("--release") + 1] if "--release" in a else "cistern"
        expect = a[a.index("--expect") + 1] if "--expect" in a else None
        ch = Checker(release)
        ch.check(load(a[1]), expect)
        for e in ch.errors:
            print("check_manifests: " + e)
        if ch.errors:
            sys.exit(1)
        print("check_manifests: ok (%s)" % a[1])
    elif len(a) >= 4 and a[0] == "pod":
        # pod FILE KIND NAME --out DIR --node-root DIR --pod-root DIR
        #     [--field PATH=VALUE]... [--secrets JSONFILE]
        opt = {"--field": []}
        k = 4
        while k < len(a):
            if a[k] == "--field":
                opt["--field"].append(a[k + 1])
            else:
                opt[a[k]] = a[k + 1]
            k += 2
        fields = dict(f.split("=", 1) for f in opt["--field"])
        secrets = json.load(open(opt["--secrets"])) if "--secrets" in opt else {}
        pod_materialize(load(a[1]), a[2], a[3], opt["--out"], opt["--node-root"],
                        opt["--pod-root"], fields, secrets)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
