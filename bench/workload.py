#!/usr/bin/env python3
"""The benchmark workloads, run against a directory (a mount point or a local
copy). Standard library only. Each prints one JSON object on stdout.

  seq DIR [--threads 8] [--bs 1M]       read every file sequentially, one
                                        thread per file at a time
  small DIR [--threads 8]               read every file whole, N threads
  meta DIR                              find + stat of the whole tree
  train DIR --kind files|shards [--threads 8] [--batch 32] [--compute-ms 10]
        [--epochs 2] [--sample-kib 128]  an MLPerf-Storage-style data loader:
        shuffled sample order every epoch, batches of 32, a fixed sleep per
        batch for the accelerator; reports AU = compute time / wall time per
        epoch, time to first batch and total time.
"""
import argparse
import json
import os
import queue
import random
import sys
import threading
import time


def list_files(top):
    out = []
    for d, _, files in os.walk(top):
        for f in files:
            out.append(os.path.join(d, f))
    out.sort()
    return out


def parse_size(s):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = s.strip().lower()
    if s and s[-1] in units:
        return int(float(s[:-1]) * units[s[-1]])
    return int(s)


def read_whole(path, bs):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(bs)
            if not b:
                return n
            n += len(b)


def parallel(items, threads, fn):
    """fn(item) -> bytes, over items with N threads; (seconds, bytes, errors)."""
    it = iter(items)
    lock = threading.Lock()
    total = [0, 0]

    def run():
        while True:
            with lock:
                try:
                    x = next(it)
                except StopIteration:
                    return
            try:
                n = fn(x)
                with lock:
                    total[0] += n
            except OSError as e:
                with lock:
                    total[1] += 1
                print(f"workload: {x}: {e}", file=sys.stderr)

    t0 = time.monotonic()
    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.monotonic() - t0, total[0], total[1]


def cmd_seq(a):
    files = list_files(a.dir)
    secs, nbytes, errs = parallel(files, a.threads, lambda p: read_whole(p, parse_size(a.bs)))
    return {"seconds": secs, "bytes": nbytes, "files": len(files), "errors": errs,
            "MBps": nbytes / secs / 1e6 if secs else 0}


def cmd_small(a):
    t0 = time.monotonic()
    files = list_files(a.dir)
    list_s = time.monotonic() - t0
    secs, nbytes, errs = parallel(files, a.threads, lambda p: read_whole(p, 1 << 20))
    secs += list_s
    return {"seconds": secs, "list_seconds": list_s, "bytes": nbytes, "files": len(files),
            "errors": errs, "files_per_s": len(files) / secs if secs else 0,
            "MBps": nbytes / secs / 1e6 if secs else 0}


def cmd_meta(a):
    t0 = time.monotonic()
    n = 0
    for d, dirs, files in os.walk(a.dir):
        for x in dirs + files:
            os.lstat(os.path.join(d, x))
            n += 1
    secs = time.monotonic() - t0
    return {"seconds": secs, "entries": n, "stats_per_s": n / secs if secs else 0}


def samples_of(a, files):
    if a.kind == "files":
        return [(p, 0, -1) for p in files]
    size = a.sample_kib << 10
    out = []
    for p in files:
        length = os.stat(p).st_size
        out += [(p, off, min(size, length - off)) for off in range(0, length, size)]
    return out


def read_sample(s):
    path, off, length = s
    with open(path, "rb", buffering=0) as f:
        if length < 0:
            n = 0
            while True:
                b = f.read(1 << 20)
                if not b:
                    return n
                n += len(b)
        f.seek(off)
        return len(f.read(length))


def cmd_train(a):
    t_start = time.monotonic()
    files = list_files(a.dir)
    samples = samples_of(a, files)
    rng = random.Random(a.seed)
    compute = a.compute_ms / 1000.0
    epochs = []
    first_batch = None
    listing = time.monotonic() - t_start
    for e in range(a.epochs):
        if a.kind == "files":
            order = samples[:]
            rng.shuffle(order)
        else:
            # WebDataset style: shards in a new order each epoch, each read
            # sequentially (its samples in order), by N threads.
            shards = files[:]
            rng.shuffle(shards)
            by = {p: [] for p in shards}
            for s in samples:
                by[s[0]].append(s)
            order = [s for p in shards for s in by[p]]
        q = queue.Queue(maxsize=max(2 * a.batch, a.threads * 4))
        it = iter(order)
        lock = threading.Lock()
        errors = [0]

        def loader():
            while True:
                with lock:
                    s = next(it, None)
                if s is None:
                    q.put(None)
                    return
                try:
                    read_sample(s)
                except OSError as ex:
                    errors[0] += 1
                    print(f"workload: {s[0]}: {ex}", file=sys.stderr)
                q.put(1)

        t0 = time.monotonic()
        ts = [threading.Thread(target=loader, daemon=True) for _ in range(a.threads)]
        for t in ts:
            t.start()
        done, batches, in_batch, busy = 0, 0, 0, 0.0
        while done < a.threads:
            x = q.get()
            if x is None:
                done += 1
                continue
            in_batch += 1
            if in_batch == a.batch:
                if first_batch is None:
                    first_batch = time.monotonic() - t_start
                in_batch = 0
                batches += 1
                time.sleep(compute)
                busy += compute
        if in_batch:
            batches += 1
            time.sleep(compute)
            busy += compute
        wall = time.monotonic() - t0
        epochs.append({"epoch": e + 1, "seconds": wall, "batches": batches,
                       "samples": len(order), "samples_per_s": len(order) / wall,
                       "au": busy / wall if wall else 0, "errors": errors[0]})
    return {"kind": a.kind, "threads": a.threads, "batch": a.batch, "compute_ms": a.compute_ms,
            "samples": len(samples), "listing_seconds": listing,
            "time_to_first_batch": first_batch,
            "total_seconds": time.monotonic() - t_start, "epochs": epochs}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("seq")
    s.add_argument("dir")
    s.add_argument("--threads", type=int, default=8)
    s.add_argument("--bs", default="1M")
    s = sub.add_parser("small")
    s.add_argument("dir")
    s.add_argument("--threads", type=int, default=8)
    s = sub.add_parser("meta")
    s.add_argument("dir")
    s = sub.add_parser("train")
    s.add_argument("dir")
    s.add_argument("--kind", choices=["files", "shards"], required=True)
    s.add_argument("--threads", type=int, default=8)
    s.add_argument("--batch", type=int, default=32)
    s.add_argument("--compute-ms", type=float, default=10.0)
    s.add_argument("--epochs", type=int, default=2)
    s.add_argument("--sample-kib", type=int, default=128)
    s.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if not os.path.isdir(a.dir):
        print(f"workload: {a.dir}: not a directory", file=sys.stderr)
        return 2
    r = {"seq": cmd_seq, "small": cmd_small, "meta": cmd_meta, "train": cmd_train}[a.cmd](a)
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
