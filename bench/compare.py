#!/usr/bin/env python3
"""Runs one workload against every system mounted on the same bucket, cold
then warm, repeated, and writes the medians as JSON. Standard library only.

Systems: local (the dataset on local disk: the baseline), copyfirst (rclone
copy --transfers 16 to local disk, then read), s3fs (use_cache, tuned
parallel_count/multireq_max), rclone (mount, --vfs-cache-mode full, read-ahead
and buffer as its docs advise), cistern (`cistern local`, fresh state dir per
cold run), and "limit": one curl --parallel --parallel-max 16 fetching the
same objects (16 MiB ranges of the large ones), the best the store can give.

Cold: a fresh mount with an empty cache, page cache dropped. Warm: the same
mount again after the cold pass, page cache dropped again (so warm measures
the system's own cache, not the kernel's). For large sequential files,
Cistern's warm pass is also set against a direct read of its cached bytes
(the block files in its cache dir, page cache dropped) just before and just
after it in the same repeat: the issue's baseline for warm large files, and
one whose files are as new to the machine as the ones Cistern reads (the
local-disk copy is read in every repeat, and a VM host keeps it cached).
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "workload.py")


def log(*a):
    print(time.strftime("%H:%M:%S"), "compare:", *a, file=sys.stderr, flush=True)


def drop_caches():
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def is_mounted(mnt):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == mnt for line in f)


def wait_mounted(mnt, proc=None, secs=60):
    t = time.monotonic() + secs
    while time.monotonic() < t:
        if is_mounted(mnt):
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"mount process exited with {proc.returncode}")
        time.sleep(0.1)
    raise RuntimeError(f"{mnt}: not mounted after {secs}s")


def unmount(mnt):
    for args in (["fusermount3", "-u", mnt], ["fusermount3", "-u", "-z", mnt]):
        if not is_mounted(mnt):
            return
        subprocess.run(args, stderr=subprocess.DEVNULL, check=False)
        time.sleep(0.2)


def run_workload(args, target):
    cmd = [sys.executable, WORKLOAD] + [a.replace("{DIR}", target) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"workload failed: {r.stderr.strip()[-300:]}")
    out = json.loads(r.stdout)
    errs = out.get("errors", 0) or sum(e.get("errors", 0) for e in out.get("epochs", []))
    if errs:
        raise RuntimeError(f"workload saw {errs} read errors: {r.stderr.strip()[-300:]}")
    return out


class Env:
    def __init__(self, a):
        self.a = a
        self.work = tempfile.mkdtemp(prefix="cis-bench-", dir=a.work_dir)
        self.mnt = os.path.join(self.work, "mnt")
        os.makedirs(self.mnt)
        self.rclone_env = dict(os.environ,
                               RCLONE_CONFIG_BENCH_TYPE="s3",
                               RCLONE_CONFIG_BENCH_PROVIDER="Other",
                               RCLONE_CONFIG_BENCH_ENDPOINT=a.endpoint,
                               RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=a.access_key,
                               RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=a.secret_key,
                               RCLONE_CONFIG_BENCH_REGION=a.region,
                               RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE="true")
        # rclone 1.60 fails on AWS_CA_BUNDLE with its own transport; the
        # store is plain HTTP on loopback.
        self.rclone_env.pop("AWS_CA_BUNDLE", None)
        self.passwd = os.path.join(self.work, "s3fs.passwd")
        with open(self.passwd, "w") as f:
            f.write(f"{a.access_key}:{a.secret_key}\n")
        os.chmod(self.passwd, 0o600)

    def remote(self):
        return f"bench:{self.a.bucket}/{self.a.prefix}"

    def fresh(self, name):
        d = os.path.join(self.work, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d


class System:
    """setup() -> (target dir, seconds spent making it ready); teardown()."""
    def __init__(self, env):
        self.env, self.a = env, env.a
        self.proc = None

    def teardown(self):
        pass


class Local(System):
    name = "local"

    def setup(self):
        return self.a.local_dir, 0.0


class CopyFirst(System):
    name = "copyfirst"

    def setup(self):
        d = self.env.fresh("copy")
        t0 = time.monotonic()
        r = subprocess.run(["rclone", "copy", self.env.remote(), d, "--transfers", "16",
                            "--checkers", "16", "--s3-disable-checksum", "--no-check-dest"],
                           env=self.env.rclone_env, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"rclone copy: {r.stderr.strip()[-300:]}")
        return d, time.monotonic() - t0

    def teardown(self):
        shutil.rmtree(os.path.join(self.env.work, "copy"), ignore_errors=True)


class FuseMount(System):
    """A peer that runs its own FUSE process (self.proc) on env.mnt."""
    def teardown(self):
        unmount(self.env.mnt)
        if self.proc:
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class S3fs(FuseMount):
    name = "s3fs"

    def setup(self):
        cache = self.env.fresh("s3fs-cache")
        mnt = self.env.mnt
        opts = ",".join([f"url={self.a.endpoint}", "use_path_request_style",
                         f"passwd_file={self.env.passwd}", f"use_cache={cache}",
                         "parallel_count=16", "multireq_max=16", "ro",
                         "stat_cache_expire=3600", f"endpoint={self.a.region}"])
        bucket = f"{self.a.bucket}:/{self.a.prefix}" if self.a.prefix else self.a.bucket
        t0 = time.monotonic()
        self.proc = subprocess.Popen(["s3fs", bucket, mnt, "-f", "-o", opts],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_mounted(mnt, self.proc)
        return mnt, time.monotonic() - t0


class Rclone(FuseMount):
    name = "rclone"

    def setup(self):
        cache = self.env.fresh("rclone-cache")
        mnt = self.env.mnt
        t0 = time.monotonic()
        # --vfs-cache-mode full with read-ahead and a buffer per open file,
        # as rclone's mount docs advise for streaming reads; long
        # directory/attribute caching so that warm metadata is cached.
        self.proc = subprocess.Popen(
            ["rclone", "mount", self.env.remote(), mnt, "--read-only",
             "--vfs-cache-mode", "full", "--cache-dir", cache,
             "--vfs-read-ahead", "256M", "--buffer-size", "32M",
             "--vfs-read-chunk-size", "16M", "--transfers", "16",
             "--dir-cache-time", "1h", "--attr-timeout", "1h", "--no-modtime"],
            env=self.env.rclone_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_mounted(mnt, self.proc)
        return mnt, time.monotonic() - t0


class Cistern(System):
    name = "cistern"
    preload = False

    def setup(self):
        self.state = self.env.fresh("cistern-state")
        mnt = self.env.mnt
        env = dict(os.environ, AWS_ACCESS_KEY_ID=self.a.access_key,
                   AWS_SECRET_ACCESS_KEY=self.a.secret_key)
        t0 = time.monotonic()
        r = subprocess.run([self.a.cistern, "local", f"s3://{self.a.bucket}/{self.a.prefix}",
                            mnt, "--state-dir", self.state, "--timeout", "120",
                            "--option", f"endpoint={self.a.endpoint}",
                            "--option", "path_style=true",
                            "--option", f"region={self.a.region}"],
                           env=env, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError((r.stderr or r.stdout).strip()[-400:])
        with open(os.path.join(self.state, "local.json")) as f:
            self.api = json.load(f)["api"]
        return mnt, time.monotonic() - t0

    def cached_dir(self):
        """Where the worker keeps its block files (cistern local's default)."""
        return os.path.join(self.state, "cache")

    def start_preload(self):
        return subprocess.Popen([self.a.cistern, "--api", self.api, "load", "/"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def teardown(self):
        subprocess.run([self.a.cistern, "local", "--stop", self.env.mnt, "--state-dir",
                        self.state], capture_output=True, check=False)
        unmount(self.env.mnt)


class CisternLoad(Cistern):
    name = "cistern+load"
    preload = True


SYSTEMS = {c.name: c for c in (Local, CopyFirst, S3fs, Rclone, Cistern, CisternLoad)}


def store_limit(a):
    """One curl --parallel --parallel-max 16 over the same objects (ranges
    of rng bytes for large ones). Seconds, bytes, objects."""
    files = []
    for d, _, fs in os.walk(a.local_dir):
        for f in fs:
            p = os.path.join(d, f)
            files.append((os.path.relpath(p, a.local_dir), os.path.getsize(p)))
    base = f"{a.endpoint}/{a.bucket}/{a.prefix}".rstrip("/")
    cfg = os.path.join(a.work_dir or tempfile.gettempdir(), f"curl-{os.getpid()}.cfg")
    nreq = 0
    with open(cfg, "w") as f:
        for rel, size in files:
            rng = a.range_mib << 20
            parts = [(0, size - 1)] if size <= rng or size == 0 else \
                [(o, min(o + rng, size) - 1) for o in range(0, size, rng)]
            for lo, hi in parts:
                f.write(f'url = "{base}/{rel}"\noutput = "/dev/null"\n')
                if size:
                    f.write(f'range = "{lo}-{hi}"\n')
                nreq += 1
    t0 = time.monotonic()
    r = subprocess.run(["curl", "-sS", "--fail", "--parallel", "--parallel-max", "16",
                        "--aws-sigv4", f"aws:amz:{a.region}:s3",
                        "--user", f"{a.access_key}:{a.secret_key}",
                        "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-K", cfg],
                       capture_output=True, text=True)
    secs = time.monotonic() - t0
    os.unlink(cfg)
    if r.returncode:
        raise RuntimeError(f"curl: {r.stderr.strip()[-300:]}")
    nbytes = sum(s for _, s in files)
    return {"seconds": secs, "bytes": nbytes, "files": len(files), "requests": nreq,
            "MBps": nbytes / secs / 1e6, "files_per_s": len(files) / secs}


def charge_setup(kind, out, setup):
    """Copy-first's cold pass pays for the download: its rate is over the
    copy and the read together."""
    if kind in ("seq", "small", "meta"):
        secs = out["seconds"] + setup
        out["read_seconds"], out["seconds"] = out["seconds"], secs
        if "MBps" in out:
            out["MBps"] = out["bytes"] / secs / 1e6
        if "files_per_s" in out:
            out["files_per_s"] = out["files"] / secs
        if "stats_per_s" in out:
            out["stats_per_s"] = out["entries"] / secs


def metric(kind, out):
    if kind == "seq":
        return out["MBps"]
    if kind == "small":
        return out["files_per_s"]
    if kind == "meta":
        return out["stats_per_s"]
    return None


def cached_dir_of(sysobj, kind):
    """The dir of the system's cached bytes when its warm pass is to be set
    against a direct read of them (large sequential files), else None."""
    if kind != "seq" or not hasattr(sysobj, "cached_dir"):
        return None
    return sysobj.cached_dir()


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def epoch_au(r, e):
    """AU of epoch e of run r. Epoch 1 counts from the job's start: the
    system's set-up (mounting, or for copy-first the whole download) and the
    listing are time the accelerator waits as much as a slow read is, so
    copying first cannot hide its download outside the epoch."""
    ep = r["epochs"][e]
    if e:
        return ep["au"]
    busy = ep["au"] * ep["seconds"]
    wall = ep["seconds"] + r.get("listing_seconds", 0) + r.get("setup_seconds", 0)
    return busy / wall if wall else 0


def summarize_train(runs):
    """Medians; time to first batch, total time and epoch 1's AU include the
    system's set-up (mounting, or for copy-first the whole download)."""
    n = len(runs[0]["epochs"])
    return {
        "setup_seconds": med([r.get("setup_seconds", 0) for r in runs]),
        "time_to_first_batch": med([r["time_to_first_batch"] + r.get("setup_seconds", 0)
                                    for r in runs]),
        "total_seconds": med([r["total_seconds"] + r.get("setup_seconds", 0) for r in runs]),
        "au": [med([epoch_au(r, e) for r in runs]) for e in range(n)],
        "samples_per_s": [med([r["epochs"][e]["samples_per_s"] for r in runs])
                          for e in range(n)],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--benchmark", required=True)
    p.add_argument("--store-label", required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--access-key", required=True)
    p.add_argument("--secret-key", required=True)
    p.add_argument("--local-dir", required=True, help="the same dataset on local disk")
    p.add_argument("--systems", default="limit,local,copyfirst,s3fs,rclone,cistern")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-warm", action="store_true")
    p.add_argument("--range-mib", type=int, default=16)
    p.add_argument("--cistern", default="cistern")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--params", default="{}", help="JSON recorded with the results")
    p.add_argument("--out", required=True)
    p.add_argument("workload", nargs=argparse.REMAINDER,
                   help="-- then workload.py arguments, {DIR} for the target")
    a = p.parse_args()
    wl = [x for x in a.workload if x != "--"]
    if not wl or "{DIR}" not in wl:
        p.error("give the workload after --, with {DIR} where the target goes")
    kind = wl[0]
    res = {"benchmark": a.benchmark, "store": a.store_label, "workload": wl,
           "params": json.loads(a.params), "repeats": a.repeats,
           "page_cache_dropped": drop_caches(), "systems": {}, "errors": {}}
    env = Env(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for name in a.systems.split(","):
            if name == "limit":
                runs = []
                for i in range(a.repeats):
                    drop_caches()
                    try:
                        runs.append(store_limit(a))
                    except RuntimeError as e:
                        res["errors"]["limit"] = str(e)
                        break
                if runs:
                    res["limit"] = {"MBps": med([r["MBps"] for r in runs]),
                                    "files_per_s": med([r["files_per_s"] for r in runs]),
                                    "runs": runs}
                    log(f"{a.benchmark}/{a.store_label} limit: "
                        f"{res['limit']['MBps']:.1f} MB/s {res['limit']['files_per_s']:.0f} files/s")
                continue
            sysobj = SYSTEMS[name](env)
            cold, warm = [], []
            try:
                for i in range(a.repeats):
                    drop_caches()
                    t0 = time.monotonic()
                    target, ready_s = sysobj.setup()
                    try:
                        pre = sysobj.start_preload() if getattr(sysobj, "preload", False) \
                            else None
                        out = run_workload(wl, target)
                        if pre is not None and pre.poll() not in (None, 0):
                            # The load failed: this is not a "with load" run.
                            err = pre.stderr.read().decode(errors="replace").strip()
                            raise RuntimeError(f"cistern load: {err[-300:]}")
                        out["setup_seconds"] = ready_s
                        if name == "copyfirst":
                            charge_setup(kind, out, ready_s)
                        out["wall_with_setup"] = time.monotonic() - t0
                        cold.append(out)
                        if pre is not None:
                            pre.wait(600)
                            if pre.returncode != 0:
                                err = pre.stderr.read().decode(errors="replace").strip()
                                raise RuntimeError(f"cistern load: {err[-300:]}")
                        if not a.no_warm and name != "local":
                            cached = cached_dir_of(sysobj, kind)
                            if cached:
                                drop_caches()
                                before = run_workload(wl, cached)
                            drop_caches()
                            w = run_workload(wl, target)
                            if cached:
                                drop_caches()
                                after = run_workload(wl, cached)
                                w["cached_direct"] = [metric(kind, before), metric(kind, after)]
                            warm.append(w)
                    finally:
                        sysobj.teardown()
                    log(f"{a.benchmark}/{a.store_label} {name} run {i + 1}: "
                        f"cold {metric(kind, cold[-1]) or cold[-1].get('total_seconds')}"
                        + (f" warm {metric(kind, warm[-1]) or warm[-1].get('total_seconds')}"
                           if warm else ""))
            except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
                res["errors"][name] = str(e).splitlines()[-1] if str(e) else repr(e)
                log(f"{name}: {res['errors'][name]}")
            if not cold:
                continue
            entry = {"cold_runs": cold, "warm_runs": warm}
            if kind == "train":
                entry["cold"] = summarize_train(cold)
                entry["warm"] = summarize_train(warm) if warm else None
            else:
                entry["cold"] = med([metric(kind, r) for r in cold])
                entry["cold_incl_setup"] = med([r["wall_with_setup"] for r in cold])
                entry["warm"] = med([metric(kind, r) for r in warm]) if warm else None
                direct = [r for r in warm if "cached_direct" in r]
                if direct:
                    entry["cached_direct"] = med([statistics.mean(r["cached_direct"])
                                                  for r in direct])
                    entry["warm_vs_cached_direct"] = med(
                        [metric(kind, r) / statistics.mean(r["cached_direct"]) for r in direct])
            res["systems"][name] = entry
    finally:
        unmount(env.mnt)
        shutil.rmtree(env.work, ignore_errors=True)
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
