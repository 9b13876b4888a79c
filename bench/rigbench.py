#!/usr/bin/env python3
"""Measurements for the daemon benchmarks (bench/worker.sh, fuse-warm.sh,
preload.sh), run after bench/rig.sh brought up s3rver, a master and
workers. One subcommand per benchmark; each writes a JSON result in the
"table" form bench/report.py renders. Every ratio is against a baseline
measured in the same run; every figure is the median of the repeats."""
import argparse
import glob
import json
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import drop_caches  # noqa: E402

# A hot re-read of 1 GiB from the page cache takes ~0.1 s; each reader reads
# its file this many times so process start-up does not dominate the figure.
HOT_PASSES = 8


def env(k, d=None):
    return os.environ.get(k, d)


def curl_best(files, prefix, range_mib=16, parallels=(1, 4, 8, 16), out_dir=None):
    """{parallel: MB/s} for curl --parallel over the objects, ranges of
    range_mib MiB, into /dev/null or (out_dir) one file per range there.
    files: [(rel, size)]."""
    base = f"{env('PLAIN_ENDPOINT')}/{env('CIS_S3_BUCKET')}/{prefix}"
    cfg = tempfile.NamedTemporaryFile("w", delete=False, suffix=".cfg")
    rng = range_mib << 20
    for i, (rel, size) in enumerate(files):
        for lo in range(0, size, rng):
            out = os.path.join(out_dir, f"{i}.{lo}") if out_dir else "/dev/null"
            cfg.write(f'url = "{base}/{rel}"\noutput = "{out}"\n'
                      f'range = "{lo}-{min(lo + rng, size) - 1}"\n')
    cfg.close()
    nbytes = sum(s for _, s in files)
    out = {}
    for p in parallels:
        drop_caches()
        t0 = time.monotonic()
        r = subprocess.run(["curl", "-sS", "--fail", "--parallel", "--parallel-max", str(p),
                            "--aws-sigv4", f"aws:amz:{env('CIS_S3_REGION')}:s3",
                            "--user", f"{env('BENCH_ACCESS_KEY')}:{env('BENCH_SECRET_KEY')}",
                            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-K", cfg.name],
                           capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"curl: {r.stderr.strip()[-300:]}")
        out[p] = nbytes / (time.monotonic() - t0) / 1e6
    os.unlink(cfg.name)
    return out


def run_all(cmds):
    """Run shell commands concurrently; seconds for all; raises on failure."""
    t0 = time.monotonic()
    ps = [subprocess.Popen(c, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True) for c in cmds]
    errs = [(c, p.communicate()[1]) for c, p in zip(cmds, ps) if p.wait()]
    if errs:
        raise RuntimeError(f"{errs[0][0]}: {errs[0][1].strip()[-300:]}")
    return time.monotonic() - t0


def local_files(d):
    out = []
    for root, _, fs in os.walk(d):
        for f in fs:
            p = os.path.join(root, f)
            out.append((os.path.relpath(p, d), os.path.getsize(p)))
    return sorted(out)


def block_files(cache):
    """Block files in a worker's cache dir (every regular file of 1 byte or
    more outside the state)."""
    fs = [p for p in glob.glob(os.path.join(cache, "**"), recursive=True)
          if os.path.isfile(p) and os.path.getsize(p) > 0 and "/.state" not in p]
    return sorted(fs)


def med(xs):
    return statistics.median(xs) if xs else None


def f0(v):
    return "—" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10
                                  else f"{v:.2f}")


def write(out, d):
    with open(out, "w") as f:
        json.dump(d, f, indent=1)
    print(json.dumps(d.get("table"), indent=1))


def wc(worker, path, cmd):
    return (f"{env('RIG_WC')} --tcp 127.0.0.1:{worker} --master 127.0.0.1:{env('M_RPC')} "
            f"--path {path} {cmd}")


def nblocks(size, bs):
    return (size + bs - 1) // bs


def cmd_worker(a):
    files = local_files(a.local_dir)
    nbytes = sum(s for _, s in files)
    bs = a.block_mib << 20
    loads = [wc(a.worker_rpc, f"/s3/{rel}", "load " + " ".join(
        str(i) for i in range(nblocks(s, bs))) + " >/dev/null") for rel, s in files]
    frees = [wc(a.worker_rpc, f"/s3/{rel}", "free " + " ".join(
        str(i) for i in range(nblocks(s, bs))) + " >/dev/null") for rel, s in files]
    cold, remote, direct, curls, tofiles = [], [], [], [], []
    for _ in range(a.repeats):
        run_all(frees)
        time.sleep(0.5)
        left = sum(os.path.getsize(p) for p in block_files(a.cache))
        if left >= nbytes:
            raise RuntimeError(f"free left {left} bytes cached")
        drop_caches()
        cold.append(nbytes / run_all(loads) / 1e6)
        curls.append(curl_best(files, a.prefix))
        # The same GETs landing in files on the cache's disk, as the
        # worker's must: whether the disk, not the fetch, is the limit.
        land = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(a.cache)))
        tofiles.append(curl_best(files, a.prefix, parallels=(16,), out_dir=land)[16])
        shutil.rmtree(land)
        # Warm: the blocks are cached now. Remote read over loopback TCP
        # (one client per file, blocks in order, each asking for the two
        # blocks ahead with Prefetch as cistern-fuse's readahead does)
        # against the same block files read straight from the cache dir
        # (as many readers).
        drop_caches()
        remote.append(nbytes / run_all([wc(a.worker_rpc, f"/s3/{rel}", "cat 2 >/dev/null")
                                       for rel, _ in files]) / 1e6)
        blocks = block_files(a.cache)
        got = sum(os.path.getsize(p) for p in blocks)
        k = len(files)
        groups = [blocks[i::k] for i in range(k)]
        drop_caches()
        t = run_all([f"cat {' '.join(g)} >/dev/null" for g in groups if g])
        direct.append(got / t / 1e6)
    best = {p: med([c[p] for c in curls]) for p in curls[0]}
    bp = max(best, key=best.get)
    c, r, dd = med(cold), med(remote), med(direct)
    rows = [["direct read of the block files from the cache dir (baseline, %d readers)" % len(files),
             f0(dd), "1.00", ""],
            ["remote read of the cached blocks over loopback TCP (worker_client cat, "
             "prefetching 2 blocks ahead)", f0(r),
             f"{r / dd:.2f}", "≥ 0.8"]]
    rows += [[f"curl --parallel-max {p}, 16 MiB ranged GETs from s3rver",
              f0(v), "1.00" if p == bp else f"{v / best[bp]:.2f}", ""] for p, v in best.items()]
    tf = med(tofiles)
    rows.append(["curl --parallel-max 16 into files on the cache's disk", f0(tf),
                 f"{tf / best[bp]:.2f}", ""])
    rows.append(["worker cold fetch from s3rver (LoadRequest of every block, one per file)", f0(c),
                 f"{c / best[bp]:.2f}", "≥ 0.8 (÷ best curl)"])
    write(a.out, {
        "benchmark": "worker", "store": "plain", "repeats": a.repeats,
        "params": {"files": len(files), "mib": (nbytes >> 20) // max(len(files), 1),
                   "block_mib": a.block_mib, "page cache dropped": drop_caches()},
        "raw": {"cold": cold, "remote": remote, "direct": direct, "curl": curls,
                "curl_to_files": tofiles},
        "table": {"columns": ["what", "MB/s", "÷ baseline", "target"], "rows": rows},
        "extra": f"Warm rows: baseline is the direct read, same run. Cold rows: baseline is the "
                 f"best curl parallelism (--parallel-max {bp}), same run. Page cache dropped "
                 "before each measurement; the cache was emptied with FreeRequest before each "
                 "cold fetch.",
        "targets": [["remote read of cached blocks ≥ 0.8 × direct file read", r / dd, 0.8],
                    ["cold fetch ≥ 0.8 × best parallel curl", c / best[bp], 0.8]]})


def dd_all(paths, k, passes=1):
    """Read paths with 1 MiB reads into a buffer each reader keeps, k
    concurrent readers (threads of this process, not a process per file,
    whose start-up would weigh on many small files such as the block
    files), each reading its files `passes` times; MB/s."""
    nbytes = sum(os.path.getsize(p) for p in paths) * passes
    groups = [paths[i::k] for i in range(k)]
    errors = []

    def reader(group):
        buf = bytearray(1 << 20)
        try:
            for p in group:
                for _ in range(passes):
                    with open(p, "rb", buffering=0) as f:
                        while f.readinto(buf):
                            pass
        except OSError as e:
            errors.append(f"{e.filename}: {e.strerror}")

    ts = [threading.Thread(target=reader, args=(g,)) for g in groups if g]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.monotonic() - t0
    if errors:
        raise RuntimeError(errors[0])
    return nbytes / secs / 1e6


def stat_rate(paths):
    t0 = time.monotonic()
    for p in paths:
        os.lstat(p)
    return len(paths) / (time.monotonic() - t0)


def cmd_fuse(a):
    files = local_files(a.local_dir)
    k = len(files)
    fpaths = [os.path.join(a.mnt, "s3", rel) for rel, _ in files]
    lpaths = [os.path.join(a.local_dir, rel) for rel, _ in files]
    # Populate the worker's cache through the mount (cold, not measured).
    dd_all(fpaths, k)
    warm, blocks_d, hot, hot_local = [], [], [], []
    for _ in range(a.repeats):
        drop_caches()
        warm.append(dd_all(fpaths, k))
        hot.append(dd_all(fpaths, k, HOT_PASSES))  # again, page cache warm
        blocks = block_files(a.cache)
        drop_caches()
        blocks_d.append(dd_all(blocks, k))
        dd_all(lpaths, k)  # into the page cache
        hot_local.append(dd_all(lpaths, k, HOT_PASSES))
    # Stat of every file of the tree mounted at /tree (file://), warm:
    # listed once through the mount first.
    tree = sorted(os.path.join(r, f) for r, _, fs in os.walk(a.tree) for f in fs)
    mtree = [os.path.join(a.mnt, "tree", os.path.relpath(p, a.tree)) for p in tree]
    t0 = time.monotonic()
    subprocess.run(["find", os.path.join(a.mnt, "tree")], stdout=subprocess.DEVNULL, check=True)
    first = time.monotonic() - t0
    sf, sl = [], []
    for _ in range(a.repeats):
        sf.append(stat_rate(mtree))
        sl.append(stat_rate(tree))
    w, b, h, hl, s, l = map(med, (warm, blocks_d, hot, hot_local, sf, sl))
    nbytes = sum(sz for _, sz in files)
    rows = [
        ["block files read directly from the worker's cache dir, page cache dropped (baseline)",
         f0(b), "1.00", ""],
        ["FUSE warm sequential (cached on the local worker, page cache dropped)", f0(w),
         f"{w / b:.2f}", "≥ 0.85"],
        ["local file read from the page cache (baseline)", f0(hl), "1.00", ""],
        ["FUSE hot re-read (page cache warm)", f0(h), f"{h / hl:.2f}", "≥ 0.8"],
        [f"stat of {len(tree):,} local files (stats/s)", f0(l), "1.00", ""],
        [f"stat of {len(tree):,} files through FUSE, warm (stats/s)", f0(s), f"{s / l:.2f}",
         "≥ 100,000 stats/s"],
    ]
    write(a.out, {
        "benchmark": "fuse-warm", "store": "plain", "repeats": a.repeats,
        "params": {"files": k, "mib": (nbytes >> 20) // max(k, 1), "read size": "1 MiB",
                   "readers": k, "tree files": len(tree),
                   "page cache dropped": drop_caches()},
        "raw": {"warm": warm, "blocks": blocks_d, "hot": hot, "hot_local": hot_local,
                "stat_fuse": sf, "stat_local": sl, "first_find_s": first},
        "table": {"columns": ["what", "MB/s or stats/s", "÷ baseline", "target"], "rows": rows},
        "extra": f"FUSE: cistern-fuse against one master and one worker on this host, the "
                 f"dataset on s3rver mounted at /s3 (4 MiB blocks), read whole by {k} "
                 f"concurrent readers of 1 MiB reads (one file each; {HOT_PASSES} passes each for the "
                 f"hot re-read rows). The tree: {len(tree):,} empty "
                 f"files in a file:// mount at /tree; its first find through the mount took "
                 f"{first:.1f} s (listing, not in the figures); the stat rows are os.lstat of "
                 "every file, one thread, after that. The hot re-read reads the FUSE "
                 "files' page cache, which a kernel without large folios for FUSE files "
                 "keeps in 4 KiB pages, against the local file's folios of up to 2 MiB "
                 "(docs/fuse.md, How it works, page cache).",
        "targets": [["FUSE warm sequential ≥ 0.85 × direct read of the block files", w / b, 0.85],
                    ["FUSE hot re-read ≥ 0.8 × local page cache", h / hl, 0.8],
                    ["FUSE warm stat ≥ 100,000 stats/s (ratio: rate ÷ 100,000)", s / 1e5, 1]]})


def cli(*args, check=True):
    r = subprocess.run([env("RIG_CLI"), *args], capture_output=True, text=True)
    if check and r.returncode:
        raise RuntimeError(f"cistern {' '.join(args)}: {r.stderr.strip()[-300:]}")
    return r


def cache_bytes(caches):
    return sum(os.path.getsize(p) for c in caches for p in block_files(c))


def empty_caches(caches):
    cli("free", "/s3")
    for _ in range(100):
        if cache_bytes(caches) == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"cistern free /s3 left {cache_bytes(caches)} bytes cached")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mount_fuse(cmd, mnt):
    """Mount cistern-fuse (cmd: the binary and its options) at mnt; its
    /metrics URL."""
    port = free_port()
    subprocess.run(shlex.split(cmd) + [mnt, "--http-port", str(port)], check=True)
    for _ in range(100):
        if os.path.ismount(mnt):
            return f"http://127.0.0.1:{port}/metrics"
        time.sleep(0.2)
    raise RuntimeError(f"cistern-fuse did not mount {mnt}")


def cmd_preload(a):
    files = local_files(a.local_dir)
    nbytes = sum(s for _, s in files)
    caches = a.cache
    loads, curls = [], []
    for _ in range(a.repeats):
        empty_caches(caches)
        drop_caches()
        t0 = time.monotonic()
        cli("load", "/s3", "--parallel", str(a.parallel))
        loads.append(nbytes / (time.monotonic() - t0) / 1e6)
        if cache_bytes(caches) < nbytes:
            raise RuntimeError(f"after load only {cache_bytes(caches)} of {nbytes} bytes cached")
        curls.append(curl_best(files, a.prefix))
    spread = [sum(os.path.getsize(p) for p in block_files(c)) >> 20 for c in caches]
    best = {p: med([c[p] for c in curls]) for p in curls[0]}
    bp = max(best, key=best.get)
    l = med(loads)

    # A reader started together with the load, reading like a training job:
    # the files in order through the FUSE mount (1 MiB reads), pass after
    # pass (page cache dropped before each, so a pass reads from the workers,
    # not from memory), until a whole pass has begun after the load ended.
    # It stalls when a read waits on a cache miss: cistern-fuse counts those
    # reads and the time they waited (cistern_fuse_stall_seconds), read here
    # after every file. It stopped stalling at the end of the last file whose
    # read stalled. Each repeat mounts anew: a client keeps the descriptors
    # of blocks it read, which outlive the blocks' removal from the cache.
    fpaths = [os.path.join(a.mnt, "s3", rel) for rel, _ in files]
    metrics = None

    def stall():
        """(reads that stalled, seconds they waited) so far, from cistern-fuse."""
        n = secs = 0.0
        with urllib.request.urlopen(metrics, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("cistern_fuse_stall_seconds_count"):
                    n = float(line.split()[-1])
                elif line.startswith("cistern_fuse_stall_seconds_sum"):
                    secs = float(line.split()[-1])
        return n, secs

    def read_pass():
        drop_caches()
        out = []
        for p in fpaths:
            with open(p, "rb", buffering=0) as f:
                while f.read(1 << 20):
                    pass
            out.append((time.monotonic(), stall()))
        return out

    unstall, stalled_s, traces = [], [], []
    for _ in range(a.repeats):
        metrics = mount_fuse(a.fuse, a.mnt)
        empty_caches(caches)
        drop_caches()
        n0, s0 = stall()
        t0 = time.monotonic()
        lp = subprocess.Popen([env("RIG_CLI"), "load", "/s3", "--parallel", str(a.parallel)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ended = []  # when the load ended, taken by a thread waiting for it
        waiter = threading.Thread(target=lambda: ended.append((lp.wait(), time.monotonic())))
        waiter.start()
        reads = []
        while True:
            began = time.monotonic()
            reads += read_pass()
            if ended and began > ended[0][1]:
                break
        waiter.join()
        if ended[0][0]:
            raise RuntimeError(f"cistern load: {lp.stderr.read().strip()[-300:]}")
        load_s = ended[0][1] - t0
        last, prev = None, n0
        for end, (n, _) in reads:
            if n > prev:
                last = end
            prev = n
        unstall.append(0.0 if last is None else last - t0)
        stalled_s.append(reads[-1][1][1] - s0)
        subprocess.run(["fusermount3", "-u", a.mnt], check=True)
        traces.append({"load_s": load_s, "passes": len(reads) // len(fpaths),
                       "stalled_reads": reads[-1][1][0] - n0,
                       "file_done_s": [e - t0 for e, _ in reads],
                       "stalled_reads_after_file": [n - n0 for _, (n, _) in reads]})
    rows = [[f"curl --parallel-max {p}, 16 MiB ranged GETs from s3rver", f0(v),
             "1.00" if p == bp else f"{v / best[bp]:.2f}", ""] for p, v in best.items()]
    rows.append([f"cistern load /s3 into {len(caches)} workers (--parallel {a.parallel})", f0(l),
                 f"{l / best[bp]:.2f}", "≥ 0.8 (÷ best curl)"])
    rows.append(["reader started with the load: time until it stops stalling (s)",
                 f0(med(unstall)), "", ""])
    rows.append(["the same reader: time its reads waited on cache misses (s, summed over its concurrent reads)", f0(med(stalled_s)),
                 "", ""])
    loads_s = ", ".join(f"{t['load_s']:.1f}" for t in traces)
    extra = (f"{len(files)} files, {nbytes >> 20} MiB, on s3rver (plain); one master and "
             f"{len(caches)} cistern-worker processes on this host with their own cache dirs "
             f"and ports; cache spread after a load (MiB per worker): {spread}. "
             f"Reader with the load: started together with `cistern load`, page cache "
             f"dropped and caches emptied first, it reads the files in order through "
             f"cistern-fuse (1 MiB reads), pass after pass with the page cache dropped "
             f"before each, until a pass has begun after the load ended. A read stalls when "
             f"it waits on a cache miss (cistern-fuse's cistern_fuse_stall_seconds, read "
             f"after every file); the reader stopped stalling when the last file whose read "
             f"stalled was done. Per repeat: stopped stalling "
             f"{', '.join(f'{x:.1f}' for x in unstall)} s after the start, having waited "
             f"{', '.join(f'{x:.1f}' for x in stalled_s)} s on misses in "
             f"{', '.join(str(round(t['stalled_reads'])) for t in traces)} reads; the loads took "
             f"{loads_s} s with the reader (passes: "
             f"{', '.join(str(t['passes']) for t in traces)}).")
    write(a.out, {
        "benchmark": "preload", "store": "plain", "repeats": a.repeats,
        "params": {"files": len(files), "total_mib": nbytes >> 20, "workers": len(caches),
                   "page cache dropped": drop_caches()},
        "raw": {"loads": loads, "curl": curls, "unstall_s": unstall, "stalled_s": stalled_s,
                "traces": traces},
        "table": {"columns": ["what", "MB/s or s", "÷ best curl", "target"], "rows": rows},
        "extra": extra,
        "targets": [["cistern load ≥ 0.8 × best parallel curl", l / best[bp], 0.8]]})


def main():
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--local-dir", required=True)
    w.add_argument("--prefix", required=True)
    w.add_argument("--cache", required=True)
    w.add_argument("--worker-rpc", required=True)
    w.add_argument("--block-mib", type=int, default=4)
    w.add_argument("--repeats", type=int, default=3)
    w.add_argument("--out", required=True)
    f = sub.add_parser("fuse")
    f.add_argument("--local-dir", required=True)
    f.add_argument("--mnt", required=True)
    f.add_argument("--tree", required=True)
    f.add_argument("--cache", required=True)
    f.add_argument("--repeats", type=int, default=3)
    f.add_argument("--out", required=True)
    q = sub.add_parser("preload")
    q.add_argument("--local-dir", required=True)
    q.add_argument("--prefix", required=True)
    q.add_argument("--mnt", required=True)
    q.add_argument("--cache", action="append", required=True)
    q.add_argument("--fuse", required=True,
                   help="cistern-fuse and its options but the mount point and --http-port")
    q.add_argument("--parallel", type=int, default=4)
    q.add_argument("--repeats", type=int, default=3)
    q.add_argument("--out", required=True)
    a = p.parse_args()
    {"worker": cmd_worker, "fuse": cmd_fuse, "preload": cmd_preload}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
