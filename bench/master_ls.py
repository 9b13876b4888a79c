#!/usr/bin/env python3
"""Master `ls -R` against a plain ListObjectsV2 walk of the same tree.

The walk: one client listing prefix by prefix with delimiter "/" (paginated,
SigV4-signed, standard library only), recursing into common prefixes the
way `ls -R` does. The master: a fresh cistern-master (empty LMDB) with the
prefix mounted at /, then `cistern ls -R /` (cold: every directory listed
from the store and stored), then again (warm: from LMDB). Target: the cold
master adds < 25 % to the plain walk.
"""
import argparse
import datetime
import hashlib
import hmac
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

def sigv4_get(endpoint, path, query, region, ak, sk):
    u = urllib.parse.urlparse(endpoint)
    host = u.netloc
    now = datetime.datetime.now(datetime.timezone.utc)
    amzdate, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    q = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                 for k, v in sorted(query.items()))
    payload = "UNSIGNED-PAYLOAD"
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amzdate}
    signed = ";".join(sorted(headers))
    canon = "\n".join(["GET", urllib.parse.quote(path), q,
                       "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), signed, payload])
    scope = f"{day}/{region}/s3/aws4_request"
    sts = "\n".join(["AWS4-HMAC-SHA256", amzdate, scope,
                     hashlib.sha256(canon.encode()).hexdigest()])
    k = ("AWS4" + sk).encode()
    for part in (day, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    req = urllib.request.Request(f"{endpoint}{urllib.parse.quote(path)}?{q}", headers={
        "x-amz-content-sha256": payload, "x-amz-date": amzdate,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={ak}/{scope}, "
                         f"SignedHeaders={signed}, Signature={sig}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


def walk(a):
    """(seconds, objects, prefixes, requests)."""
    t0 = time.monotonic()
    todo, objs, prefixes, reqs = [a.prefix.rstrip("/") + "/"], 0, 0, 0
    while todo:
        pfx = todo.pop()
        token = None
        while True:
            q = {"list-type": "2", "delimiter": "/", "prefix": pfx, "max-keys": "1000"}
            if token:
                q["continuation-token"] = token
            root = ET.fromstring(sigv4_get(a.endpoint, f"/{a.bucket}", q, a.region,
                                           a.access_key, a.secret_key))
            reqs += 1
            token = None
            # By local name: s3rver and S3 use different XML namespaces.
            for el in root:
                tag = el.tag.rsplit("}", 1)[-1]
                if tag == "Contents":
                    objs += 1
                elif tag == "CommonPrefixes":
                    todo.append(next(iter(el)).text)
                    prefixes += 1
                elif tag == "NextContinuationToken":
                    token = el.text
            if not token:
                break
    return time.monotonic() - t0, objs, prefixes, reqs


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def master_run(a):
    d = tempfile.mkdtemp(prefix="cis-bench-master-", dir=a.work_dir)
    rpc, http = free_port(), free_port()
    env = dict(os.environ, AWS_ACCESS_KEY_ID=a.access_key, AWS_SECRET_ACCESS_KEY=a.secret_key)
    env.pop("AWS_CA_BUNDLE", None)
    log = open(os.path.join(d, "master.log"), "w")
    p = subprocess.Popen([a.master, "--data-dir", os.path.join(d, "data"), "--bind", "127.0.0.1",
                          "--rpc-port", str(rpc), "--http-port", str(http)],
                         env=env, stdout=log, stderr=subprocess.STDOUT)
    api = f"http://127.0.0.1:{http}"
    try:
        t = time.monotonic() + 30
        while not http_ok(api + "/readyz"):
            if p.poll() is not None or time.monotonic() > t:
                log.flush()
                with open(log.name) as lf:
                    tail = lf.read().strip().splitlines()[-1:] or ["(no output)"]
                raise RuntimeError(f"cistern-master did not start: {tail[0]}")
            time.sleep(0.1)
        body = json.dumps({"path": "/", "uri": f"s3://{a.bucket}/{a.prefix}",
                           "options": {"endpoint": a.endpoint, "path_style": "true",
                                       "region": a.region}}).encode()
        req = urllib.request.Request(api + "/api/v1/mounts", data=body, method="POST",
                                     headers={"content-type": "application/json"})
        urllib.request.urlopen(req, timeout=60).read()
        out = {}
        for phase in ("cold", "warm"):
            t0 = time.monotonic()
            r = subprocess.run([a.cli, "--api", api, "ls", "-R", "/"], capture_output=True,
                               text=True, timeout=3600)
            out[phase] = time.monotonic() - t0
            if r.returncode:
                raise RuntimeError(f"cistern ls -R: {r.stderr.strip()[-300:]}")
            out[phase + "_lines"] = r.stdout.count("\n")
        rss = None
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
        out["rss_bytes"] = rss
        du = sum(os.path.getsize(os.path.join(r_, f)) for r_, _, fs in
                 os.walk(os.path.join(d, "data")) for f in fs)
        out["lmdb_bytes"] = du
        return out
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    for k in ("endpoint", "bucket", "prefix", "access-key", "secret-key", "master", "cli",
              "out", "store-label"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--params", default="{}")
    a = ap.parse_args()
    res = {"benchmark": "master-ls", "store": a.store_label, "params": json.loads(a.params),
           "repeats": a.repeats, "systems": {}, "errors": {}}
    walks, runs = [], []
    try:
        for _ in range(a.repeats):
            walks.append(walk(a))
            runs.append(master_run(a))
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        res["errors"]["cistern"] = str(e)
    if walks:
        w = statistics.median(x[0] for x in walks)
        objs, pfx, reqs = walks[0][1], walks[0][2], walks[0][3]
        rows = [["plain ListObjectsV2 walk (delimiter /, 1 client)", f"{w:.2f}", "1.00", "—"]]
        targets = []
        if runs:
            cold = statistics.median(r["cold"] for r in runs)
            warm = statistics.median(r["warm"] for r in runs)
            rows.append(["cistern ls -R /, cold (master lists the store)", f"{cold:.2f}",
                         f"{cold / w:.2f}", f"{objs / cold:,.0f}"])
            rows.append(["cistern ls -R /, warm (from the master's LMDB)", f"{warm:.2f}",
                         f"{warm / w:.2f}", f"{objs / warm:,.0f}"])
            rss = max(r["rss_bytes"] or 0 for r in runs)
            lmdb = max(r["lmdb_bytes"] for r in runs)
            res["extra"] = (f"{objs:,} objects in {pfx:,} prefixes, {reqs:,} list requests per "
                            f"walk. Master RSS after the listing: {rss / 2**20:.0f} MiB; LMDB "
                            f"files: {lmdb / 2**20:.0f} MiB ({lmdb / max(objs + pfx, 1):.0f} bytes "
                            f"per inode, map included).")
            # Target: the master adds < 25 %: cold time / walk time <= 1.25.
            targets.append(["cold ls -R ÷ plain walk ≤ 1.25", cold / w, 1.25, "le"])
        res["table"] = {"columns": ["what", "seconds", "÷ plain walk", "entries/s"],
                        "rows": rows}
        res["targets"] = targets
        res["walk_runs"], res["master_runs"] = walks, runs
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
